#include "asm/printer.h"

#include <fmt/format.h>

#include <map>

#include "mla/templates.h"

namespace mla::gen {

namespace {

std::string reg_range(char prefix, int first, int count) {
  if (count == 1) return fmt::format("{}{}", prefix, first);
  return fmt::format("{}[{}:{}]", prefix, first, first + count - 1);
}

std::string special_name(SpecialId id) {
  switch (id) {
    case SpecialId::vcc: return "vcc";
    case SpecialId::vcc_lo: return "vcc_lo";
    case SpecialId::vcc_hi: return "vcc_hi";
    case SpecialId::exec: return "exec";
    case SpecialId::exec_lo: return "exec_lo";
    case SpecialId::exec_hi: return "exec_hi";
    case SpecialId::m0: return "m0";
    case SpecialId::scc: return "scc";
  }
  return "?";
}

std::string fill(std::string text, const std::map<std::string, std::string>& values) {
  for (const auto& [key, value] : values) {
    std::string pat = "{{" + key + "}}";
    for (size_t pos = text.find(pat); pos != std::string::npos; pos = text.find(pat, pos + value.size()))
      text.replace(pos, pat.size(), value);
  }
  if (auto pos = text.find("{{"); pos != std::string::npos)
    throw std::logic_error(fmt::format("template field left unfilled: {}", text.substr(pos, 32)));
  return text;
}

}  // namespace

std::string format_operand(const Operand& op) {
  switch (op.kind) {
    case Operand::Kind::SGPR: return reg_range('s', op.index, op.count);
    case Operand::Kind::VGPR: return reg_range('v', op.index, op.count);
    case Operand::Kind::AGPR: return reg_range('a', op.index, op.count);
    case Operand::Kind::Special:
      if (op.index == 0xff) return "off";  // the absent SGPR base of a global access
      return special_name(SpecialId(op.index));
    case Operand::Kind::Imm:
      // Integer inline constants print as decimal, float inline constants by name (the
      // hardware supplies the same 32-bit pattern), everything else as a 32-bit literal.
      if (op.imm >= -16 && op.imm <= 64) return fmt::format("{}", op.imm);
      for (float f : {0.5f, 1.0f, 2.0f, 4.0f}) {
        uint32_t bits;
        __builtin_memcpy(&bits, &f, 4);
        if (uint32_t(op.imm) == bits) return fmt::format("{:.1f}", f);
        if (uint32_t(op.imm) == (bits | 0x80000000u)) return fmt::format("{:.1f}", -f);
      }
      return fmt::format("0x{:x}", uint32_t(op.imm));
    case Operand::Kind::Label: return fmt::format(".L{}", op.index);
    case Operand::Kind::None: break;
  }
  return "?";
}

namespace {

const char* sdwa_name(SdwaSel s) {
  static const char* names[] = {"", "BYTE_0", "BYTE_1", "BYTE_2", "BYTE_3", "WORD_0", "WORD_1"};
  return names[int(s)];
}

std::string sel_bits(const char* name, const SelBits& b) {
  std::string s = fmt::format(" {}:[", name);
  for (int i = 0; i < b.count; ++i) s += fmt::format("{}{}", i ? "," : "", b.bit(i) ? 1 : 0);
  return s + "]";
}

}  // namespace

// The modifiers as LLVM's assembler spells them, in its order.
std::string format_mods(const Mods& m) {
  std::string s;
  if (m.idxen) s += " idxen";
  if (m.offen) s += " offen";
  if (m.offset) s += fmt::format(" offset:{}", m.offset);
  if (m.lds) s += " lds";
  if (m.sc0) s += " sc0";
  if (m.sc1) s += " sc1";
  if (m.op_sel.count) s += sel_bits("op_sel", m.op_sel);
  if (m.op_sel_hi.count) s += sel_bits("op_sel_hi", m.op_sel_hi);
  if (m.dst_sel != SdwaSel::none) s += fmt::format(" dst_sel:{}", sdwa_name(m.dst_sel));
  if (m.src0_sel != SdwaSel::none) s += fmt::format(" src0_sel:{}", sdwa_name(m.src0_sel));
  if (m.dpp_quad_perm)
    s += fmt::format(" quad_perm:[{},{},{},{}] row_mask:0xf bank_mask:0xf", m.quad_perm[0], m.quad_perm[1],
                     m.quad_perm[2], m.quad_perm[3]);
  return s;
}

std::string format_inst(const Program& p, const Inst& inst) {
  switch (inst.cls()) {
    case OpClass::Label: return p.label_names.at(inst.target) + ":";
    case OpClass::Waitcnt: {
      std::string s = "s_waitcnt";
      if (inst.vmcnt >= 0) s += fmt::format(" vmcnt({})", inst.vmcnt);
      if (inst.expcnt >= 0) s += fmt::format(" expcnt({})", inst.expcnt);
      if (inst.lgkmcnt >= 0) s += fmt::format(" lgkmcnt({})", inst.lgkmcnt);
      return s;
    }
    case OpClass::Nop: return fmt::format("s_nop {}", inst.nops - 1);
    case OpClass::Branch:
    case OpClass::CondBranch: return fmt::format("{} {}", inst.name(), p.label_names.at(inst.target));
    default: break;
  }
  std::string_view name = inst.name();
  if (name.starts_with("buffer_load_") && name.ends_with("_lds")) name.remove_suffix(4);  // the lds modifier is in mods
  std::string s(name);
  bool first = true;
  for (const auto* list : {&inst.dst, &inst.src})
    for (const auto& o : *list) {
      if (list == &inst.src && inst.printed_src >= 0 && &o - inst.src.data() >= inst.printed_src) break;
      s += first ? " " : ", ";
      // An SMEM byte offset is an address field, printed in hex as LLVM does.
      if (inst.cls() == OpClass::Smem && o.kind == Operand::Kind::Imm)
        s += fmt::format("0x{:x}", uint32_t(o.imm));
      else
        s += format_operand(o);
      first = false;
    }
  s += format_mods(inst.mods);
  return s;
}

std::string print_body(const Program& p) {
  std::string out;
  for (const auto& inst : p.insts) {
    if (inst.cls() == OpClass::Label) {
      out += format_inst(p, inst) + "\n";
      continue;
    }
    out += "\t" + format_inst(p, inst);
    if (!inst.comment.empty()) out += "  ; " + inst.comment;
    out += "\n";
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

KernelResources kernel_resources(const Program& p) {
  RegisterUse u = p.register_use();
  KernelResources r{};
  r.vgprs = u.vgprs;
  r.agprs = u.agprs;
  r.accum_offset = u.accum_offset();
  // gfx90a+: the descriptor's VGPR count covers the unified file, AGPRs after accum_offset.
  r.next_free_vgpr = u.agprs ? r.accum_offset + u.agprs : u.vgprs;
  r.next_free_sgpr = u.sgprs;
  r.reserve_vcc = u.uses_vcc;
  // Metadata sgpr_count includes VCC when reserved (AMDGPUUsage: "includes VCC, FLAT_SCRATCH...").
  r.sgpr_count = u.sgprs + (u.uses_vcc ? 2 : 0);
  r.lds_bytes = p.abi.lds_bytes;
  if (r.next_free_vgpr > p.target->unified_vgprs)
    throw std::runtime_error(fmt::format("kernel {} needs {} unified VGPRs; {} has {}", p.name, r.next_free_vgpr,
                                         p.target->name, p.target->unified_vgprs));
  if (r.lds_bytes > p.target->lds_bytes)
    throw std::runtime_error(
        fmt::format("kernel {} needs {} bytes of LDS; {} has {}", p.name, r.lds_bytes, p.target->name, p.target->lds_bytes));
  return r;
}

std::string print_kernel(const Program& p, const PrintOptions& opts) {
  KernelResources r = kernel_resources(p);
  std::string args;
  for (const auto& a : p.abi.args) {
    args += fill(templates::kArg, {{"ARG_NAME", a.name},
                                   {"ARG_OFFSET", std::to_string(a.offset)},
                                   {"ARG_SIZE", std::to_string(a.size)},
                                   {"ARG_KIND", a.value_kind}});
    if (!a.address_space.empty()) args += fmt::format("        .address_space: {}\n", a.address_space);
  }
  if (args.empty()) args = "      []\n";
  if (!args.empty() && args.back() == '\n') args.pop_back();
  return fill(templates::kKernel,
              {{"GENERATOR_VERSION", MLA_GENERATOR_VERSION},
               {"SOURCE", opts.source.empty() ? "(builder)" : opts.source},
               {"KERNEL", p.name},
               {"TARGET_ID", std::string(p.target->target_id)},
               {"CODE_OBJECT_VERSION", std::to_string(opts.code_object_version)},
               {"BODY", print_body(p)},
               {"LDS_BYTES", std::to_string(r.lds_bytes)},
               {"KERNARG_SIZE", std::to_string(p.abi.kernarg_size)},
               {"USER_SGPR_COUNT", std::to_string(p.user_sgpr_count())},
               {"WORKGROUP_ID_X", std::to_string(int(p.abi.workgroup_id_x))},
               {"WORKGROUP_ID_Y", std::to_string(int(p.abi.workgroup_id_y))},
               {"WORKGROUP_ID_Z", std::to_string(int(p.abi.workgroup_id_z))},
               {"WORKITEM_ID", std::to_string(p.abi.workitem_id_dims - 1)},
               {"NEXT_FREE_VGPR", std::to_string(r.next_free_vgpr)},
               {"NEXT_FREE_SGPR", std::to_string(r.next_free_sgpr)},
               {"ACCUM_OFFSET", std::to_string(r.accum_offset)},
               {"RESERVE_VCC", std::to_string(int(r.reserve_vcc))},
               {"SGPR_COUNT", std::to_string(r.sgpr_count)},
               {"VGPR_COUNT", std::to_string(r.next_free_vgpr)},
               {"AGPR_COUNT", std::to_string(r.agprs)},
               {"MAX_WORKGROUP_SIZE", std::to_string(p.abi.max_workgroup_size)},
               {"ARGS", args}});
}

}  // namespace mla::gen
