// Decoding with LLVM's AMDGPU MC disassembler, then mapping LLVM's printed form into Inst.
//
// Why the printed form: the operand roles of an MCInst are only described by AMDGPU-internal
// tables (OpName) that llvm-22-dev does not install, while the printer's syntax is documented
// (AMDGPUAsmGFX940.rst / GFX950.rst) and is exactly what llvm-objdump shows. Immediates of
// SOPP/SOPK-like instructions (waitcnt, nop, branch offsets, hwreg) are taken from the MCInst.
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <mutex>

#include <llvm/MC/MCAsmInfo.h>
#include <llvm/MC/MCContext.h>
#include <llvm/MC/MCDisassembler/MCDisassembler.h>
#include <llvm/MC/MCInst.h>
#include <llvm/MC/MCInstPrinter.h>
#include <llvm/MC/MCInstrInfo.h>
#include <llvm/MC/MCRegisterInfo.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/MCTargetOptions.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include "emulator/opcodes.h"
#include "emulator/program.h"

extern "C" {
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUDisassembler();
}

namespace mla::emu {

namespace {

// An unaligned little-endian dword (section bytes need not be 4-byte aligned in memory).
uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

struct McContext {
  std::unique_ptr<llvm::MCRegisterInfo> mri;
  std::unique_ptr<llvm::MCAsmInfo> mai;
  std::unique_ptr<llvm::MCSubtargetInfo> sti;
  std::unique_ptr<llvm::MCInstrInfo> mii;
  std::unique_ptr<llvm::MCContext> ctx;
  std::unique_ptr<llvm::MCDisassembler> dis;
  std::unique_ptr<llvm::MCInstPrinter> printer;
  std::mutex mu;
};

McContext& mc_for(Gfx gfx) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeAMDGPUTargetInfo();
    LLVMInitializeAMDGPUTargetMC();
    LLVMInitializeAMDGPUDisassembler();
  });
  static std::unique_ptr<McContext> ctxs[2];
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& c = ctxs[gfx == Gfx::gfx942 ? 0 : 1];
  if (c) return *c;
  c = std::make_unique<McContext>();
  llvm::Triple triple("amdgcn-amd-amdhsa");
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t) throw Error("decode", "LLVM AMDGPU target not available: " + err);
  c->mri.reset(t->createMCRegInfo(triple));
  llvm::MCTargetOptions opts;
  c->mai.reset(t->createMCAsmInfo(*c->mri, triple, opts));
  c->sti.reset(t->createMCSubtargetInfo(triple, std::string(gfx_name(gfx)), ""));
  c->mii.reset(t->createMCInstrInfo());
  c->ctx = std::make_unique<llvm::MCContext>(triple, c->mai.get(), c->mri.get(), c->sti.get());
  c->dis.reset(t->createMCDisassembler(*c->sti, *c->ctx));
  c->printer.reset(t->createMCInstPrinter(triple, 0, *c->mai, *c->mii, *c->mri));
  if (!c->dis || !c->printer) throw Error("decode", "cannot create the AMDGPU disassembler");
  return *c;
}

// Decodes one instruction; returns false when the bytes are not a valid instruction.
bool decode_one(McContext& mc, const uint8_t* p, size_t n, uint64_t addr, unsigned& size,
                std::string& text, std::vector<int64_t>* imms) {
  llvm::MCInst mi;
  uint64_t sz = 0;
  std::string dummy;
  llvm::raw_string_ostream cs(dummy);
  // LLVM's AMDGPU disassembler reads a literal past the end of what it is given (a section that
  // ends in a truncated literal crashed it: issue #15), so it gets a zero-padded copy of the next
  // 16 bytes (the longest gfx9 instruction is 12) and an instruction longer than what is left
  // is invalid.
  uint8_t buf[32] = {};
  std::memcpy(buf, p, std::min<size_t>(n, 16));
  // LLVM's AMDGPU disassembler crashes (printing a null name into its comment stream) on an
  // operand field holding 255, the literal code, in a gfx9 encoding that cannot carry a literal:
  // a MUBUF / MTBUF soffset, a VOP3 / VOP3P source (fuzz findings, issue #15; llvm-objdump-22
  // crashes on both too). Such bytes are invalid here. A VOP3 source field an instruction does
  // not use is rejected as well: assemblers write 0 there.
  const uint32_t w0 = load_u32(buf), w1 = load_u32(buf + 4), major = w0 >> 26;
  const bool literal_soffset = (major == 0x38 || major == 0x3a) && (w1 >> 24) == 0xff;
  const bool literal_vop3_src = major == 0x34 && ((w1 & 0x1ff) == 0xff || ((w1 >> 9) & 0x1ff) == 0xff ||
                                                  ((w1 >> 18) & 0x1ff) == 0xff);
  // SDWA (src0 = 249 in VOP1 / VOP2 / VOPC): a select above 6 (DWORD) or a dst_unused above 2
  // (PRESERVE) is reserved (ISA text, SDWA fields); LLVM's disassembler crashes printing its
  // name (a fuzz finding: VOP2 with dst_unused 3 and src1_sel 7). Only the fields each encoding
  // has: VOPC's bits 8..15 are its sdst.
  bool reserved_sdwa = false;
  if (n >= 8 && (w0 & 0x1ff) == 0xf9) {
    const bool vopc = (w0 >> 25) == 0x3e, vop1 = (w0 >> 25) == 0x3f, vop2 = (w0 >> 31) == 0;
    const uint32_t dst_sel = (w1 >> 8) & 7, dst_unused = (w1 >> 11) & 3, src0_sel = (w1 >> 16) & 7, src1_sel = (w1 >> 24) & 7;
    if (vop1 || vop2) reserved_sdwa = dst_sel > 6 || dst_unused > 2 || src0_sel > 6;
    if (vop2 || vopc) reserved_sdwa = reserved_sdwa || src1_sel > 6 || (vopc && src0_sel > 6);
  }
  if (literal_soffset || literal_vop3_src || reserved_sdwa) {
    size = 4;
    return false;
  }
  std::lock_guard<std::mutex> lock(mc.mu);
  auto st = mc.dis->getInstruction(mi, sz, llvm::ArrayRef<uint8_t>(buf, sizeof buf), addr, cs);
  if (st != llvm::MCDisassembler::Success || sz == 0 || sz > n) {
    size = 4;
    return false;
  }
  size = unsigned(sz);
  text.clear();
  llvm::raw_string_ostream os(text);
  mc.printer->printInst(&mi, addr, "", *mc.sti, os);
  os.flush();
  // Trim leading whitespace and collapse tabs.
  size_t b = text.find_first_not_of(" \t");
  text = b == std::string::npos ? std::string() : text.substr(b);
  for (auto& ch : text)
    if (ch == '\t') ch = ' ';
  if (imms)
    for (unsigned i = 0; i < mi.getNumOperands(); ++i)
      if (mi.getOperand(i).isImm()) imms->push_back(mi.getOperand(i).getImm());
  return true;
}

// ---- text parsing ---------------------------------------------------------------------------

bool parse_int(std::string_view s, int64_t& v) {
  if (s.empty()) return false;
  std::string t(s);
  char* end = nullptr;
  errno = 0;
  bool neg = false;
  const char* c = t.c_str();
  if (*c == '-') { neg = true; ++c; }
  unsigned long long u = std::strtoull(c, &end, 0);
  if (end == c || *end != 0 || errno) return false;
  v = neg ? -int64_t(u) : int64_t(u);
  return true;
}

bool parse_reg(std::string_view t, Operand& o) {
  auto named = [&](Operand::Kind k, unsigned idx, unsigned w) { o.kind = k; o.index = idx; o.width = w; return true; };
  if (t == "vcc") return named(Operand::SGPR, kSgprVcc, 2);
  if (t == "vcc_lo") return named(Operand::SGPR, kSgprVcc, 1);
  if (t == "vcc_hi") return named(Operand::SGPR, kSgprVcc + 1, 1);
  if (t == "exec") return named(Operand::SGPR, kSgprExec, 2);
  if (t == "exec_lo") return named(Operand::SGPR, kSgprExec, 1);
  if (t == "exec_hi") return named(Operand::SGPR, kSgprExec + 1, 1);
  if (t == "m0") return named(Operand::SGPR, kSgprM0, 1);
  if (t == "flat_scratch") return named(Operand::SGPR, kSgprFlatScratch, 2);
  if (t == "flat_scratch_lo") return named(Operand::SGPR, kSgprFlatScratch, 1);
  if (t == "flat_scratch_hi") return named(Operand::SGPR, kSgprFlatScratch + 1, 1);
  if (t == "xnack_mask") return named(Operand::SGPR, kSgprXnackMask, 2);
  if (t == "src_scc" || t == "scc") { o.kind = Operand::SCC; return true; }
  if (t == "src_vccz" || t == "vccz") { o.kind = Operand::VCCZ; return true; }
  if (t == "src_execz" || t == "execz") { o.kind = Operand::EXECZ; return true; }
  if (t == "src_lds_direct") { o.kind = Operand::LdsDirect; return true; }
  if (t == "src_shared_base" || t == "src_shared_limit" || t == "src_private_base" ||
      t == "src_private_limit" || t == "src_pops_exiting_wave_id") {
    o.kind = Operand::Special;
    // Apertures: shared base 0x1000'0000'0000'0000-style values are irrelevant here; model
    // them as fixed high addresses that never alias device allocations.
    uint64_t v = t == "src_shared_base" ? 0x1000000000000ull : t == "src_shared_limit" ? 0x100000000ffffull
               : t == "src_private_base" ? 0x2000000000000ull : t == "src_private_limit" ? 0x20000ffffffffull : 0;
    o.imm64 = v;
    o.imm = uint32_t(v >> 32);
    return true;
  }
  Operand::Kind k;
  std::string_view rest;
  unsigned base = 0;
  if (t.substr(0, 4) == "ttmp") { k = Operand::SGPR; rest = t.substr(4); base = 108; }
  else if (t[0] == 'v') { k = Operand::VGPR; rest = t.substr(1); }
  else if (t[0] == 's') { k = Operand::SGPR; rest = t.substr(1); }
  else if (t[0] == 'a') { k = Operand::AGPR; rest = t.substr(1); }
  else return false;
  if (rest.empty()) return false;
  int64_t lo, hi;
  if (rest[0] == '[') {
    auto colon = rest.find(':');
    auto close = rest.find(']');
    if (colon == std::string_view::npos || close == std::string_view::npos) return false;
    if (!parse_int(rest.substr(1, colon - 1), lo) || !parse_int(rest.substr(colon + 1, close - colon - 1), hi)) return false;
  } else {
    if (!std::isdigit((unsigned char)rest[0]) || !parse_int(rest, lo)) return false;
    hi = lo;
  }
  if (hi < lo || hi - lo > 31) return false;
  o.kind = k;
  o.index = uint16_t(base + lo);
  o.width = uint8_t(hi - lo + 1);
  return true;
}

bool parse_operand(std::string_view t, Operand& o) {
  o = Operand{};
  // Modifiers: -x, |x|, neg(x), abs(x), sext(x)
  if (t.size() > 1 && t[0] == '-' && !std::isdigit((unsigned char)t[1]) && t[1] != '.') {
    if (!parse_operand(t.substr(1), o)) return false;
    o.neg = !o.neg;
    return true;
  }
  if (t.size() > 2 && t.front() == '|' && t.back() == '|') {
    if (!parse_operand(t.substr(1, t.size() - 2), o)) return false;
    o.abs = true;
    return true;
  }
  auto fn = [&](std::string_view name) { return t.size() > name.size() + 2 && t.substr(0, name.size() + 1) == std::string(name) + "(" && t.back() == ')'; };
  if (fn("neg")) { if (!parse_operand(t.substr(4, t.size() - 5), o)) return false; o.neg = true; return true; }
  if (fn("abs")) { if (!parse_operand(t.substr(4, t.size() - 5), o)) return false; o.abs = true; return true; }
  if (fn("sext")) { if (!parse_operand(t.substr(5, t.size() - 6), o)) return false; o.sext = true; return true; }
  // Forced literal encodings of values that would fit an inline constant: lit(0x18), lit64(...)
  if (fn("lit")) { if (!parse_operand(t.substr(4, t.size() - 5), o) || o.kind != Operand::Const) return false; o.literal = true; return true; }
  if (fn("lit64")) { if (!parse_operand(t.substr(6, t.size() - 7), o) || o.kind != Operand::Const) return false; o.literal = true; return true; }
  if (t == "off") { o.kind = Operand::None; return true; }
  if (parse_reg(t, o)) return true;
  // Numbers.
  int64_t v;
  if (parse_int(t, v)) {
    o.kind = Operand::Const;
    o.imm = uint32_t(v);
    o.imm64 = uint64_t(v);
    o.literal = t.find("0x") != std::string_view::npos;
    if (o.literal) o.imm64 = uint64_t(uint32_t(v));  // literals are 32-bit
    return true;
  }
  // Float inline constants (0.5, -4.0, 0.15915494 = 1/(2pi)).
  std::string s(t);
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (end && *end == 0 && end != s.c_str()) {
    o.kind = Operand::Const;
    float f = float(d);
    if (s == "0.15915494" || s == "-0.15915494") {
      uint32_t b = 0x3e22f983u | (d < 0 ? 0x80000000u : 0);
      std::memcpy(&f, &b, 4);
      uint64_t db = 0x3fc45f306dc9c882ull | (d < 0 ? 0x8000000000000000ull : 0);
      std::memcpy(&d, &db, 8);
    }
    std::memcpy(&o.imm, &f, 4);
    std::memcpy(&o.imm64, &d, 8);
    return true;
  }
  return false;
}

uint8_t parse_sel(std::string_view v) {
  if (v == "BYTE_0") return 0;
  if (v == "BYTE_1") return 1;
  if (v == "BYTE_2") return 2;
  if (v == "BYTE_3") return 3;
  if (v == "WORD_0") return 4;
  if (v == "WORD_1") return 5;
  return 6;
}

uint8_t parse_bits(std::string_view v) {  // "[1,0,1]"
  uint8_t bits = 0;
  unsigned i = 0;
  for (char c : v) {
    if (c == '0' || c == '1') { if (c == '1') bits |= uint8_t(1u << i); ++i; }
  }
  return bits;
}

bool parse_modifier(std::string_view t, Inst& in) {
  auto colon = t.find(':');
  std::string_view key = t.substr(0, colon), val = colon == std::string_view::npos ? std::string_view() : t.substr(colon + 1);
  int64_t v = 0;
  if (colon == std::string_view::npos) {
    if (key == "offen") in.flags |= F_OFFEN;
    else if (key == "idxen") in.flags |= F_IDXEN;
    else if (key == "glc") in.flags |= F_GLC;
    else if (key == "slc") in.flags |= F_SLC;
    else if (key == "lds") in.flags |= F_LDS;
    else if (key == "sc0") in.flags |= F_SC0;
    else if (key == "sc1") in.flags |= F_SC1;
    else if (key == "nt") in.flags |= F_NT;
    else if (key == "clamp") in.flags |= F_CLAMP;
    else if (key == "gds") in.flags |= F_GDS;
    else if (key == "tfe") in.flags |= F_TFE;
    else if (key == "row_mirror") in.dpp_ctrl = 0x140;
    else if (key == "row_half_mirror") in.dpp_ctrl = 0x141;
    else if (key == "bound_ctrl") in.flags |= F_BOUND_CTRL;
    else return false;
    return true;
  }
  if (key == "offset") { if (!parse_int(val, v)) return false; in.offset = int32_t(v); }
  else if (key == "offset0") { if (!parse_int(val, v)) return false; in.offset = int32_t(v); }
  else if (key == "offset1") { if (!parse_int(val, v)) return false; in.offset1 = int32_t(v); }
  else if (key == "op_sel") in.op_sel = parse_bits(val);
  else if (key == "op_sel_hi") { in.op_sel_hi = parse_bits(val); in.has_op_sel_hi = true; }
  else if (key == "neg_lo") in.neg_lo = parse_bits(val);
  else if (key == "neg_hi") in.neg_hi = parse_bits(val);
  else if (key == "mul") { if (!parse_int(val, v)) return false; in.omod = v == 2 ? 1 : 2; }
  else if (key == "div") in.omod = 3;
  else if (key == "quad_perm") {
    uint8_t q[4] = {0, 0, 0, 0};
    unsigned i = 0;
    for (char c : val) if (c >= '0' && c <= '3' && i < 4) q[i++] = uint8_t(c - '0');
    in.dpp_ctrl = uint16_t(q[0] | q[1] << 2 | q[2] << 4 | q[3] << 6);
  }
  else if (key == "row_shl") { if (!parse_int(val, v)) return false; in.dpp_ctrl = uint16_t(0x100 + v); }
  else if (key == "row_shr") { if (!parse_int(val, v)) return false; in.dpp_ctrl = uint16_t(0x110 + v); }
  else if (key == "row_ror") { if (!parse_int(val, v)) return false; in.dpp_ctrl = uint16_t(0x120 + v); }
  else if (key == "wave_shl") in.dpp_ctrl = 0x130;
  else if (key == "wave_rol") in.dpp_ctrl = 0x134;
  else if (key == "wave_shr") in.dpp_ctrl = 0x138;
  else if (key == "wave_ror") in.dpp_ctrl = 0x13c;
  else if (key == "row_newbcast") { if (!parse_int(val, v) || v < 0 || v > 15) return false; in.dpp_ctrl = uint16_t(0x150 + v); }
  else if (key == "row_bcast") { if (!parse_int(val, v)) return false; in.dpp_ctrl = v == 15 ? 0x142 : 0x143; }
  else if (key == "row_mask") { if (!parse_int(val, v)) return false; in.row_mask = uint8_t(v); }
  else if (key == "bank_mask") { if (!parse_int(val, v)) return false; in.bank_mask = uint8_t(v); }
  else if (key == "bound_ctrl") { if (!parse_int(val, v)) return false; if (v) in.flags |= F_BOUND_CTRL; }
  else if (key == "fi") { if (!parse_int(val, v)) return false; if (v) in.flags |= F_FI; }
  else if (key == "dst_sel") in.dst_sel = parse_sel(val);
  else if (key == "src0_sel") in.src0_sel = parse_sel(val);
  else if (key == "src1_sel") in.src1_sel = parse_sel(val);
  else if (key == "dst_unused") in.dst_unused = val == "UNUSED_SEXT" ? 1 : val == "UNUSED_PRESERVE" ? 2 : 0;
  else if (key == "cbsz") { if (!parse_int(val, v)) return false; in.cbsz = uint8_t(v); }
  else if (key == "abid") { if (!parse_int(val, v)) return false; in.abid = uint8_t(v); }
  else if (key == "blgp") { if (!parse_int(val, v)) return false; in.blgp = uint8_t(v); }
  else return false;
  return true;
}

std::string base_mnemonic(std::string m, Inst& in) {
  auto strip = [&](const char* suf, uint32_t flag) {
    size_t n = std::strlen(suf);
    if (m.size() > n && m.compare(m.size() - n, n, suf) == 0) { m.resize(m.size() - n); in.flags |= flag; return true; }
    return false;
  };
  strip("_sdwa", F_SDWA) || strip("_dpp", F_DPP) || strip("_e64", F_VOP3) || strip("_e32", 0);
  return m;
}


}  // namespace

// Instruction handlers for undecodable or unsupported instructions (defined in executor.cpp).
void exec_unsupported(Wave& w, const Inst& in);
void exec_undecodable(Wave& w, const Inst& in);

std::string decode_text(Gfx gfx, const uint8_t* bytes, size_t n, uint64_t address, unsigned* size) {
  auto& mc = mc_for(gfx);
  std::string text;
  unsigned sz = 0;
  bool ok = decode_one(mc, bytes, n, address, sz, text, nullptr);
  if (size) *size = sz;
  return ok ? text : std::string();
}

// Parses LLVM's text into `in` (operands + modifiers). Returns an error string or "".
static std::string parse_text(const std::string& text, Inst& in, std::string& mnemonic) {
  size_t sp = text.find(' ');
  mnemonic = text.substr(0, sp);
  std::string rest = sp == std::string::npos ? "" : text.substr(sp + 1);
  // Tokenize by spaces, keeping bracketed groups together.
  std::vector<std::string> toks;
  std::string cur;
  int depth = 0;
  for (char c : rest) {
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (c == ' ' && depth <= 0) {
      if (!cur.empty()) toks.push_back(cur);
      cur.clear();
    } else cur += c;
  }
  if (!cur.empty()) toks.push_back(cur);
  bool operands = true;
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string t = toks[i];
    if (operands) {
      bool more = !t.empty() && t.back() == ',';
      if (more) t.pop_back();
      // Tokens that are syntax but not register/constant operands.
      // Symbolic immediates whose values come from the MCInst (s_waitcnt, hwreg, gpr_idx, sendmsg).
      bool skip = false;
      for (const char* p : {"vmcnt(", "expcnt(", "lgkmcnt(", "hwreg(", "gpr_idx(", "sendmsg("})
        if (t.rfind(p, 0) == 0) skip = true;
      if (skip) {
        if (!more) operands = false;
        continue;
      }
      Operand o;
      if (i > 0 && !more && parse_modifier(t, in)) { operands = false; continue; }
      if (!parse_operand(t, o)) {
        if (parse_modifier(t, in)) { operands = false; continue; }
        return "cannot parse operand '" + t + "'";
      }
      if (in.nops >= 6) return "too many operands";
      in.ops[in.nops++] = o;
      if (!more) operands = false;
    } else {
      if (t.rfind("vmcnt(", 0) == 0 || t.rfind("expcnt(", 0) == 0 || t.rfind("lgkmcnt(", 0) == 0) continue;  // from the MCInst
      if (!parse_modifier(t, in)) return "unknown modifier '" + t + "'";
    }
  }
  return "";
}

static bool overlap_special_ok(unsigned idx, unsigned w) {
  // VCC, M0, EXEC, FLAT_SCRATCH, XNACK_MASK, TTMPs are always accessible.
  return idx >= 102 && idx + w <= 128;
}

std::shared_ptr<const Program> build_program(std::shared_ptr<const CodeObject> co, const Kernel& kernel) {
  auto prog = std::make_shared<Program>();
  prog->co = co;
  prog->kernel = &kernel;
  prog->gfx = co->gfx();
  const auto& kd = kernel.kd;
  prog->accum_offset = kd.accum_offset();
  // VGPR indices may run up to the whole allocation (at most 256), also at and beyond
  // accum_offset: the unified register file is addressed at the VGPR's index, where AGPRs
  // a(i - accum_offset) live (LLVM lets a kernel without AGPRs allocate the whole file to VGPRs,
  // commit 9bbd96fd "Allow to use a whole register file on gfx90a for VGPRs"; gem5's MI200 model
  // applies accum_offset to AGPR operands only). A kernel whose VGPRs and AGPRs overlap in the
  // unified file is refused below (register_range: aliasing), as no source says what it means.
  prog->nvgpr = std::min<unsigned>(256, kd.vgpr_alloc());
  prog->nagpr = kd.vgpr_alloc() > prog->accum_offset ? kd.vgpr_alloc() - prog->accum_offset : 0;
  prog->nsgpr = std::min<unsigned>(102, kd.sgpr_alloc());

  // Code range: entry .. end of function symbol, or next kernel entry / end of section.
  const Section* sec = nullptr;
  for (auto& s : co->sections())
    if (kernel.entry_address >= s.address && kernel.entry_address < s.address + s.bytes.size()) sec = &s;
  if (!sec) throw Error("loader", fmt::format("kernel {}: entry 0x{:x} not in any section", kernel.name, kernel.entry_address));
  uint64_t end = sec->address + sec->bytes.size();
  if (kernel.code_size) end = std::min(end, kernel.entry_address + kernel.code_size);
  else
    for (auto& k : co->kernels())
      if (k.entry_address > kernel.entry_address) end = std::min(end, k.entry_address);

  auto& mc = mc_for(prog->gfx);
  uint64_t pc = kernel.entry_address;
  while (pc < end) {
    Inst in;
    in.pc = pc;
    const uint8_t* p = sec->bytes.data() + (pc - sec->address);
    unsigned size = 4;
    std::vector<int64_t> imms;
    std::string text;
    bool ok = decode_one(mc, p, end - pc, pc, size, text, &imms);
    bool forced_clamp = false;
    if (!ok && end - pc >= 8 && (p[3] >> 2) == 0x34 && (p[1] & 0x80)) {
      // A VOP3 encoding with the clamp bit set on an opcode whose LLVM definition has no clamp
      // operand (e.g. v_cvt_pk_fp8_f32): decode without the bit and honour it as clamp.
      uint8_t copy[16];
      std::memcpy(copy, p, std::min<uint64_t>(16, end - pc));
      copy[1] &= 0x7f;
      imms.clear();
      ok = decode_one(mc, copy, std::min<uint64_t>(16, end - pc), pc, size, text, &imms);
      forced_clamp = ok;
      (void)forced_clamp;
      if (ok) text += " clamp";
    }
    in.size = uint8_t(size);
    if (!ok) {
      in.text = fmt::format(".long 0x{:08x} (not a valid {} instruction)", end - pc >= 4 ? load_u32(p) : 0u,
                            gfx_name(prog->gfx));
      in.fn = exec_undecodable;
    } else {
      in.text = text;
      std::string mnem;
      std::string perr = parse_text(text, in, mnem);
      if (!imms.empty()) in.simm = imms[0];
      if (imms.size() > 1) in.simm2 = imms[1];
      std::string base = base_mnemonic(mnem, in);
      // gfx940+: an atomic's sc0 bit asks for the pre-op value (AMDGPUUsage, "Memory Model
      // GFX942"); the returning form has a destination operand first.
      if ((base.rfind("global_atomic_", 0) == 0 || base.rfind("flat_atomic_", 0) == 0) && (in.flags & F_SC0)) base += "_rtn";
      const OpInfo* info = perr.empty() ? find_op(base, prog->gfx) : nullptr;
      if (!info) {
        in.fn = exec_unsupported;
        if (!perr.empty()) in.bad_reg_msg = perr;
      } else {
        in.info = info;
        in.fn = info->fn;
        // Register use.
        for (unsigned i = 0; i < in.nops; ++i) {
          const Operand& o = in.ops[i];
          if (!o.is_reg()) continue;
          RegRange r;
          r.first = uint16_t(o.reg_id());
          r.count = o.width;
          bool dst = i < info->ndst;
          if (info->kind & K_MFMA) r.role = i == 0 ? RegRange::Dst : i == 1 ? RegRange::SrcA : i == 2 ? RegRange::SrcB : i == 3 ? RegRange::SrcC : RegRange::Src;
          else if ((info->kind & K_RWLANE) && i == 2) r.role = RegRange::LaneSel;
          else r.role = dst ? RegRange::Dst : RegRange::Src;
          if ((info->kind & (K_VMEM | K_LDS)) && (info->kind & K_STORE) && !dst && o.is_vector()) {
            // data operand of a store: global_store vaddr, vdata ; buffer_store vdata, vaddr ; ds_write addr, data
            bool is_data = (info->kind & K_FLAT) ? i == 1 : (info->kind & K_LDS) ? i >= 1 : i == 0;
            if (is_data) r.role = RegRange::Data;
          }
          if (dst && (in.flags & F_LDS) && (info->kind & K_VMEM)) continue;  // LDS-DMA: vdata not written
          if (dst) in.writes.push_back(r); else in.reads.push_back(r);
          if (dst && ((info->kind & (K_READS_DST | K_PERMLANE | K_SWAP)) || (in.flags & F_SDWA && in.dst_unused == 2) ||
                      (info->kind & K_DST_OPSEL))) {
            RegRange rr = r;
            rr.role = RegRange::Src;
            in.reads.push_back(rr);
          }
          if (!dst && (info->kind & (K_PERMLANE | K_SWAP))) {  // both operands are written
            RegRange rw = r;
            rw.role = RegRange::Dst;
            in.writes.push_back(rw);
          }
          // Range check against the descriptor's allocation.
          std::string bad;
          if (o.kind == Operand::SGPR && !overlap_special_ok(o.index, o.width) && o.index + o.width > prog->nsgpr)
            bad = fmt::format("s{} (width {}) is beyond the {} SGPRs the descriptor allocates", o.index, o.width, prog->nsgpr);
          if (o.kind == Operand::VGPR && o.index + o.width > prog->nvgpr)
            bad = fmt::format("v{} (width {}) is beyond the {} vector registers the descriptor allocates (accum_offset {})", o.index,
                              o.width, prog->nvgpr, prog->accum_offset);
          if (o.kind == Operand::AGPR && o.index + o.width > prog->nagpr)
            bad = fmt::format("a{} (width {}) is beyond the {} AGPRs the descriptor allocates (vgpr alloc {}, accum_offset {})",
                              o.index, o.width, prog->nagpr, kd.vgpr_alloc(), prog->accum_offset);
          if (!bad.empty() && !in.bad_regs) { in.bad_regs = true; in.bad_reg_msg = bad; }
        }
        if (info->kind & K_LDS_DMA) in.reads.push_back(RegRange{uint16_t(kSgprM0), 1, RegRange::Src});
      }
    }
    prog->index_of[pc] = uint32_t(prog->insts.size());
    prog->insts.push_back(std::move(in));
    pc += size;
  }
  // VGPRs at or beyond accum_offset alias AGPRs in the unified file: refused where an AGPR of
  // the same unified index is used too.
  {
    std::vector<bool> agpr_used(prog->accum_offset + prog->nagpr + 32, false);
    for (auto& in : prog->insts)
      for (unsigned i = 0; i < in.nops; ++i)
        if (in.ops[i].kind == Operand::AGPR)
          for (unsigned k = 0; k < in.ops[i].width; ++k)
            if (prog->accum_offset + in.ops[i].index + k < agpr_used.size()) agpr_used[prog->accum_offset + in.ops[i].index + k] = true;
    for (auto& in : prog->insts)
      for (unsigned i = 0; i < in.nops && !in.bad_regs; ++i)
        if (in.ops[i].kind == Operand::VGPR && in.ops[i].index + in.ops[i].width > prog->accum_offset)
          for (unsigned k = 0; k < in.ops[i].width; ++k) {
            unsigned u = in.ops[i].index + k;
            if (u >= prog->accum_offset && u < agpr_used.size() && agpr_used[u]) {
              in.bad_regs = true;
              in.bad_reg_msg = fmt::format("v{} is at or beyond accum_offset {} and aliases a{}, which the kernel also uses", u,
                                           prog->accum_offset, u - prog->accum_offset);
              break;
            }
          }
  }
  // Branch targets.
  for (auto& in : prog->insts) {
    if (!in.info || !(in.info->kind & K_BRANCH)) continue;
    int64_t off = int16_t(uint16_t(in.simm));
    uint64_t tgt = in.pc + 4 + off * 4;
    auto it = prog->index_of.find(tgt);
    in.target = it == prog->index_of.end() ? -1 : int32_t(it->second);
  }
  prog->entry = 0;
  return prog;
}

uint32_t Program::index_at(uint64_t pc) const {
  auto it = index_of.find(pc);
  if (it == index_of.end()) throw Error("decode", fmt::format("pc 0x{:x} is not the start of a decoded instruction", pc));
  return it->second;
}

std::vector<DisasmLine> disassemble(const CodeObject& co) {
  auto& mc = mc_for(co.gfx());
  std::vector<DisasmLine> out;
  for (auto& s : co.sections()) {
    if (!s.executable) continue;
    uint64_t pc = s.address, end = s.address + s.bytes.size();
    while (pc < end) {
      DisasmLine l;
      l.address = pc;
      for (auto& k : co.kernels())
        if (k.entry_address == pc) l.symbol = k.name;
      unsigned size = 4;
      const uint8_t* p = s.bytes.data() + (pc - s.address);
      if (!decode_one(mc, p, end - pc, pc, size, l.text, nullptr)) l.text.clear();
      size = std::min<uint64_t>(size, end - pc);
      l.bytes.assign(p, p + size);
      out.push_back(std::move(l));
      pc += size;
    }
  }
  return out;
}

}  // namespace mla::emu
