#include "emulator/inst_form.h"

#include <fmt/format.h>

#include "emulator/opcodes.h"
#include "emulator/program.h"

namespace mla::emu {

namespace {

// The DPP control's family (the lane pattern's shape, not its constant).
std::string dpp_family(uint16_t c) {
  if (c <= 0xff) return "quad_perm";
  if (c >= 0x101 && c <= 0x10f) return "row_shl";
  if (c >= 0x111 && c <= 0x11f) return "row_shr";
  if (c >= 0x121 && c <= 0x12f) return "row_ror";
  if (c == 0x130) return "wave_shl";
  if (c == 0x134) return "wave_rol";
  if (c == 0x138) return "wave_shr";
  if (c == 0x13c) return "wave_ror";
  if (c == 0x140) return "row_mirror";
  if (c == 0x141) return "row_half_mirror";
  if (c == 0x142) return "row_bcast:15";
  if (c == 0x143) return "row_bcast:31";
  if (c >= 0x150 && c <= 0x15f) return "row_newbcast";
  return fmt::format("ctrl_0x{:x}", c);
}

const char* sel_name(uint8_t s) {
  static const char* names[] = {"BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1", "DWORD"};
  return s < 7 ? names[s] : "?";
}

}  // namespace

std::string inst_form(const Inst& in) {
  std::string f = in.info ? in.info->name : "?";
  if (in.flags & F_VOP3) f += "_e64";
  if (in.flags & F_DPP) {
    f += " dpp:" + dpp_family(in.dpp_ctrl);
    if (in.row_mask != 0xf || in.bank_mask != 0xf) f += " dpp_masks";
    if (in.flags & F_BOUND_CTRL) f += " bound_ctrl";
  }
  if (in.flags & F_SDWA) {
    f += " sdwa:";
    if (in.dst_sel != 6) f += fmt::format("dst_sel:{},dst_unused:{},", sel_name(in.dst_sel), in.dst_unused);
    if (in.src0_sel != 6) f += fmt::format("src0_sel:{},", sel_name(in.src0_sel));
    if (in.src1_sel != 6) f += fmt::format("src1_sel:{},", sel_name(in.src1_sel));
    if (f.back() == ',') f.pop_back();
  }
  if (in.op_sel) f += fmt::format(" op_sel:0b{:b}", in.op_sel);
  if (in.has_op_sel_hi) f += fmt::format(" op_sel_hi:0b{:b}", in.op_sel_hi);
  if (in.neg_lo) f += " neg_lo";
  if (in.neg_hi) f += " neg_hi";
  bool neg = false, abs = false;
  for (unsigned i = 0; i < in.nops; ++i) neg |= in.ops[i].neg, abs |= in.ops[i].abs;
  if (neg) f += " neg";
  if (abs) f += " abs";
  if (in.info && in.info->mfma) {
    // Operands in the printed order: D, A, B, C. AGPR sources or destinations are separate forms.
    std::string acc;
    const char* role = "dabc";
    for (unsigned i = 0; i < in.nops && i < 4; ++i)
      if (in.ops[i].kind == Operand::AGPR) acc += role[i];
    if (!acc.empty()) f += " acc:" + acc;
    if (in.cbsz || in.abid) f += " cbsz_abid";
    if (in.blgp) f += " blgp";
    // An inline-constant SrcC feeds every accumulator element (a separate operand path).
    if (in.nops >= 4 && in.ops[3].kind == Operand::Const) f += " c:imm";
  }
  // Address computation: MUBUF offen / idxen (voffset, index * stride), global with an SGPR
  // base (saddr + 32-bit voffset) versus a 64-bit VGPR address.
  if (in.info && (in.info->kind & K_VMEM) && !(in.info->kind & K_FLAT)) {
    if (in.flags & F_OFFEN) f += " offen";
    if (in.flags & F_IDXEN) f += " idxen";
  }
  if (in.info && (in.info->kind & K_FLAT))
    for (unsigned i = 1; i < in.nops; ++i)
      if (in.ops[i].kind == Operand::SGPR) { f += " saddr"; break; }
  if (in.flags & F_LDS) f += " lds";
  if (in.flags & F_CLAMP) f += " clamp";
  if (in.omod) f += " omod";
  return f;
}

std::map<std::string, unsigned> forms_of(const Program& prog) {
  std::map<std::string, unsigned> forms;
  for (const Inst& in : prog.insts) {
    if (in.info) ++forms[inst_form(in)];
    else if (in.text.rfind(".long", 0) == 0) ++forms["<decode>"];  // bytes LLVM does not decode
    else ++forms["<unsupported: " + in.text.substr(0, in.text.find(' ')) + ">"];
  }
  return forms;
}

}  // namespace mla::emu
