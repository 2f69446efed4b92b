// Scalar ALU, scalar control flow, waitcnt, barriers, mode registers.
#include <fmt/format.h>

#include "emulator/exec_common.h"

namespace mla::emu {

namespace {

inline uint32_t bitrev32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// ---- generic SOP2 / SOP1 / SOPC / SOPK ----
template <class F>
void sop2_32(Wave& w, const Inst& in) {
  uint32_t a = sread(w, in.ops[1]), b = sread(w, in.ops[2]);
  bool scc = w.scc;
  uint32_t d = F{}(a, b, scc);
  swrite(w, in.ops[0], d);
  w.scc = scc;
}
template <class F>
void sop2_64(Wave& w, const Inst& in) {
  uint64_t a = sread64(w, in.ops[1]), b = in.ops[2].width == 2 || in.ops[2].kind == Operand::Const ? sread64(w, in.ops[2]) : sread(w, in.ops[2]);
  bool scc = w.scc;
  uint64_t d = F{}(a, b, scc);
  swrite64(w, in.ops[0], d);
  w.scc = scc;
}
template <class F>
void sop1_32(Wave& w, const Inst& in) {
  bool scc = w.scc;
  uint32_t d = F{}(sread(w, in.ops[1]), scc);
  swrite(w, in.ops[0], d);
  w.scc = scc;
}
template <class F>
void sop1_64(Wave& w, const Inst& in) {
  bool scc = w.scc;
  uint64_t d = F{}(sread64(w, in.ops[1]), scc);
  swrite64(w, in.ops[0], d);
  w.scc = scc;
}
template <class F>
void sopc(Wave& w, const Inst& in) {
  w.scc = F{}(sread(w, in.ops[0]), sread(w, in.ops[1]));
}
template <class F>
void sopc64(Wave& w, const Inst& in) {
  w.scc = F{}(sread64(w, in.ops[0]), sread64(w, in.ops[1]));
}
template <class F>
void sopk_cmp(Wave& w, const Inst& in) {
  w.scc = F{}(sread(w, in.ops[0]), uint32_t(in.ops[1].imm));
}

#define S2(name, ...) struct name { uint32_t operator()(uint32_t a, uint32_t b, bool& scc) const { __VA_ARGS__ } };
#define S2_64(name, ...) struct name { uint64_t operator()(uint64_t a, uint64_t b, bool& scc) const { __VA_ARGS__ } };

S2(AddU32, { uint64_t r = uint64_t(a) + b; scc = r >> 32; return uint32_t(r); })
S2(AddcU32, { uint64_t r = uint64_t(a) + b + scc; scc = r >> 32; return uint32_t(r); })
S2(SubU32, { scc = b > a; return a - b; })
S2(SubbU32, { uint64_t bb = uint64_t(b) + scc; scc = bb > a; return uint32_t(a - bb); })
S2(AddI32, { int32_t r = int32_t(a + b); scc = ((int32_t(a) >= 0) == (int32_t(b) >= 0)) && ((r >= 0) != (int32_t(a) >= 0)); return uint32_t(r); })
S2(SubI32, { int32_t r = int32_t(a - b); scc = ((int32_t(a) >= 0) != (int32_t(b) >= 0)) && ((r >= 0) != (int32_t(a) >= 0)); return uint32_t(r); })
S2(And32, { uint32_t r = a & b; scc = r != 0; return r; })
S2(Or32, { uint32_t r = a | b; scc = r != 0; return r; })
S2(Xor32, { uint32_t r = a ^ b; scc = r != 0; return r; })
S2(Andn2_32, { uint32_t r = a & ~b; scc = r != 0; return r; })
S2(Orn2_32, { uint32_t r = a | ~b; scc = r != 0; return r; })
S2(Nand32, { uint32_t r = ~(a & b); scc = r != 0; return r; })
S2(Nor32, { uint32_t r = ~(a | b); scc = r != 0; return r; })
S2(Xnor32, { uint32_t r = ~(a ^ b); scc = r != 0; return r; })
S2(Lshl32, { uint32_t r = a << (b & 31); scc = r != 0; return r; })
S2(Lshr32, { uint32_t r = a >> (b & 31); scc = r != 0; return r; })
S2(Ashr32, { uint32_t r = uint32_t(int32_t(a) >> (b & 31)); scc = r != 0; return r; })
S2(MulI32, { (void)scc; return uint32_t(int32_t(a) * int32_t(b)); })
S2(MulHiU32, { (void)scc; return uint32_t((uint64_t(a) * b) >> 32); })
S2(MulHiI32, { (void)scc; return uint32_t((int64_t(int32_t(a)) * int32_t(b)) >> 32); })
S2(MinU32, { scc = a < b; return a < b ? a : b; })
S2(MaxU32, { scc = a > b; return a > b ? a : b; })
S2(MinI32, { scc = int32_t(a) < int32_t(b); return scc ? a : b; })
S2(MaxI32, { scc = int32_t(a) > int32_t(b); return scc ? a : b; })
S2(CselectB32, { return scc ? a : b; })
S2(BfeU32, { unsigned off = b & 31, wd = (b >> 16) & 0x7f; uint32_t r = wd == 0 ? 0 : wd + off >= 32 ? a >> off : (a >> off) & ((1u << wd) - 1); scc = r != 0; return r; })
S2(BfeI32, { unsigned off = b & 31, wd = (b >> 16) & 0x7f; int32_t r; if (wd == 0) r = 0; else if (wd + off >= 32) r = int32_t(a) >> off; else r = int32_t(a << (32 - off - wd)) >> (32 - wd); scc = r != 0; return uint32_t(r); })
S2(BfmB32, { (void)scc; return ((1u << (a & 31)) - 1) << (b & 31); })
S2(Lshl1Add, { uint64_t r = (uint64_t(a) << 1) + b; scc = r >> 32; return uint32_t(r); })
S2(Lshl2Add, { uint64_t r = (uint64_t(a) << 2) + b; scc = r >> 32; return uint32_t(r); })
S2(Lshl3Add, { uint64_t r = (uint64_t(a) << 3) + b; scc = r >> 32; return uint32_t(r); })
S2(Lshl4Add, { uint64_t r = (uint64_t(a) << 4) + b; scc = r >> 32; return uint32_t(r); })
S2(PackLL, { (void)scc; return (a & 0xffff) | (b << 16); })
S2(PackLH, { (void)scc; return (a & 0xffff) | (b & 0xffff0000u); })
S2(PackHH, { (void)scc; return (a >> 16) | (b & 0xffff0000u); })
S2(AbsDiff, { int32_t r = int32_t(a) - int32_t(b); r = r < 0 ? -r : r; scc = r != 0; return uint32_t(r); })

S2_64(And64, { uint64_t r = a & b; scc = r != 0; return r; })
S2_64(Or64, { uint64_t r = a | b; scc = r != 0; return r; })
S2_64(Xor64, { uint64_t r = a ^ b; scc = r != 0; return r; })
S2_64(Andn2_64, { uint64_t r = a & ~b; scc = r != 0; return r; })
S2_64(Orn2_64, { uint64_t r = a | ~b; scc = r != 0; return r; })
S2_64(Nand64, { uint64_t r = ~(a & b); scc = r != 0; return r; })
S2_64(Nor64, { uint64_t r = ~(a | b); scc = r != 0; return r; })
S2_64(Xnor64, { uint64_t r = ~(a ^ b); scc = r != 0; return r; })
S2_64(Lshl64, { uint64_t r = a << (b & 63); scc = r != 0; return r; })
S2_64(Lshr64, { uint64_t r = a >> (b & 63); scc = r != 0; return r; })
S2_64(Ashr64, { uint64_t r = uint64_t(int64_t(a) >> (b & 63)); scc = r != 0; return r; })
S2_64(CselectB64, { return scc ? a : b; })
S2_64(BfeU64, { unsigned off = b & 63, wd = (b >> 16) & 0x7f; uint64_t r = wd == 0 ? 0 : wd + off >= 64 ? a >> off : (a >> off) & ((1ull << wd) - 1); scc = r != 0; return r; })

#define S1(name, ...) struct name { uint32_t operator()(uint32_t a, bool& scc) const { __VA_ARGS__ } };
#define S1_64(name, ...) struct name { uint64_t operator()(uint64_t a, bool& scc) const { __VA_ARGS__ } };
S1(Mov32, { (void)scc; return a; })
S1(Not32, { uint32_t r = ~a; scc = r != 0; return r; })
S1(Brev32, { (void)scc; return bitrev32(a); })
S1(Bcnt1_32, { uint32_t r = __builtin_popcount(a); scc = r != 0; return r; })
S1(Ff1_32, { (void)scc; return a ? uint32_t(__builtin_ctz(a)) : 0xffffffffu; })
S1(Flbit32, { (void)scc; return a ? uint32_t(__builtin_clz(a)) : 0xffffffffu; })
S1(SextI8, { (void)scc; return uint32_t(int32_t(int8_t(a))); })
S1(SextI16, { (void)scc; return uint32_t(int32_t(int16_t(a))); })
S1(AbsI32, { int32_t r = int32_t(a) < 0 ? -int32_t(a) : int32_t(a); scc = r != 0; return uint32_t(r); })
S1_64(Mov64, { (void)scc; return a; })
S1_64(Not64, { uint64_t r = ~a; scc = r != 0; return r; })

struct Bcnt1_64 { uint32_t operator()(uint64_t a) const { return __builtin_popcountll(a); } };

#define CMP(name, T, op) struct name { bool operator()(uint32_t a, uint32_t b) const { return T(a) op T(b); } };
CMP(EqI, int32_t, ==) CMP(LgI, int32_t, !=) CMP(LtI, int32_t, <) CMP(LeI, int32_t, <=) CMP(GtI, int32_t, >) CMP(GeI, int32_t, >=)
CMP(EqU, uint32_t, ==) CMP(LgU, uint32_t, !=) CMP(LtU, uint32_t, <) CMP(LeU, uint32_t, <=) CMP(GtU, uint32_t, >) CMP(GeU, uint32_t, >=)
struct Eq64 { bool operator()(uint64_t a, uint64_t b) const { return a == b; } };
struct Lg64 { bool operator()(uint64_t a, uint64_t b) const { return a != b; } };
struct Bitcmp0 { bool operator()(uint32_t a, uint32_t b) const { return ((a >> (b & 31)) & 1) == 0; } };
struct Bitcmp1 { bool operator()(uint32_t a, uint32_t b) const { return ((a >> (b & 31)) & 1) == 1; } };
// SOPK compares take a 16-bit immediate: signed forms sign-extend it, unsigned zero-extend.
struct KEqI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) == int32_t(int16_t(k)); } };
struct KLgI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) != int32_t(int16_t(k)); } };
struct KLtI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) < int32_t(int16_t(k)); } };
struct KLeI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) <= int32_t(int16_t(k)); } };
struct KGtI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) > int32_t(int16_t(k)); } };
struct KGeI { bool operator()(uint32_t a, uint32_t k) const { return int32_t(a) >= int32_t(int16_t(k)); } };
struct KEqU { bool operator()(uint32_t a, uint32_t k) const { return a == (k & 0xffff); } };
struct KLgU { bool operator()(uint32_t a, uint32_t k) const { return a != (k & 0xffff); } };
struct KLtU { bool operator()(uint32_t a, uint32_t k) const { return a < (k & 0xffff); } };
struct KLeU { bool operator()(uint32_t a, uint32_t k) const { return a <= (k & 0xffff); } };
struct KGtU { bool operator()(uint32_t a, uint32_t k) const { return a > (k & 0xffff); } };
struct KGeU { bool operator()(uint32_t a, uint32_t k) const { return a >= (k & 0xffff); } };

void s_bcnt1_i32_b64(Wave& w, const Inst& in) {
  uint32_t r = __builtin_popcountll(sread64(w, in.ops[1]));
  swrite(w, in.ops[0], r);
  w.scc = r != 0;
}
void s_movk_i32(Wave& w, const Inst& in) { swrite(w, in.ops[0], uint32_t(int32_t(int16_t(in.ops[1].imm)))); }
void s_cmovk_i32(Wave& w, const Inst& in) { if (w.scc) swrite(w, in.ops[0], uint32_t(int32_t(int16_t(in.ops[1].imm)))); }
void s_addk_i32(Wave& w, const Inst& in) {
  uint32_t a = sread(w, in.ops[0]);
  uint32_t b = uint32_t(int32_t(int16_t(in.ops[1].imm)));
  bool scc = false;
  swrite(w, in.ops[0], AddI32{}(a, b, scc));
  w.scc = scc;
}
void s_mulk_i32(Wave& w, const Inst& in) {
  swrite(w, in.ops[0], uint32_t(int32_t(sread(w, in.ops[0])) * int32_t(int16_t(in.ops[1].imm))));
}
void s_cmov_b32(Wave& w, const Inst& in) { if (w.scc) swrite(w, in.ops[0], sread(w, in.ops[1])); }
void s_cmov_b64(Wave& w, const Inst& in) { if (w.scc) swrite64(w, in.ops[0], sread64(w, in.ops[1])); }

template <int Mode>  // 0 and, 1 or, 2 andn2, 3 orn2, 4 xor
void s_saveexec(Wave& w, const Inst& in) {
  uint64_t s0 = sread64(w, in.ops[1]), e = w.exec(), ne;
  switch (Mode) {
    case 0: ne = s0 & e; break;
    case 1: ne = s0 | e; break;
    case 2: ne = s0 & ~e; break;
    case 3: ne = s0 | ~e; break;
    default: ne = s0 ^ e; break;
  }
  swrite64(w, in.ops[0], e);
  w.set_exec(ne);
  w.scc = ne != 0;
}

void s_getpc_b64(Wave& w, const Inst& in) { swrite64(w, in.ops[0], in.pc + in.size); }

void jump_to_address(Wave& w, uint64_t addr) {
  auto it = w.prog->index_of.find(addr);
  if (it == w.prog->index_of.end())
    w.fail("branch", fmt::format("jump to 0x{:x}, which is not an instruction of kernel {}", addr, w.prog->kernel->name));
  w.next_pc = it->second;
}
void s_setpc_b64(Wave& w, const Inst& in) { jump_to_address(w, sread64(w, in.ops[0])); }
void s_swappc_b64(Wave& w, const Inst& in) {
  uint64_t t = sread64(w, in.ops[1]);
  swrite64(w, in.ops[0], in.pc + in.size);
  jump_to_address(w, t);
}

void take_branch(Wave& w, const Inst& in) {
  if (in.target < 0) w.fail("branch", "branch target is outside the kernel's decoded code");
  w.next_pc = uint32_t(in.target);
}
void s_branch(Wave& w, const Inst& in) { take_branch(w, in); }
void s_cbranch_scc0(Wave& w, const Inst& in) { if (!w.scc) take_branch(w, in); }
void s_cbranch_scc1(Wave& w, const Inst& in) { if (w.scc) take_branch(w, in); }
void s_cbranch_vccz(Wave& w, const Inst& in) { if (w.vcc() == 0) take_branch(w, in); }
void s_cbranch_vccnz(Wave& w, const Inst& in) { if (w.vcc() != 0) take_branch(w, in); }
void s_cbranch_execz(Wave& w, const Inst& in) { if (w.exec() == 0) take_branch(w, in); }
void s_cbranch_execnz(Wave& w, const Inst& in) { if (w.exec() != 0) take_branch(w, in); }

void s_nop(Wave&, const Inst&) {}
void s_endpgm(Wave& w, const Inst&) {
  w.done = true;
  w.next_pc = w.pc;
}
void s_barrier(Wave& w, const Inst&) {
  w.at_barrier = true;
  w.ctr->barriers++;
}
void s_waitcnt(Wave& w, const Inst& in) {
  uint32_t v = uint32_t(in.simm);
  unsigned vm = (v & 0xf) | (((v >> 14) & 3) << 4);
  unsigned lgkm = (v >> 8) & 0xf;
  wait_counts(w, vm, lgkm);
}

void s_set_gpr_idx_on(Wave& w, const Inst& in) {
  uint32_t idx = sread(w, in.ops[0]) & 0xff;
  uint32_t mode = uint32_t(in.simm) & 0xf;
  w.gpr_idx_on = true;
  w.gpr_idx_mode = uint8_t(mode);
  w.s[kSgprM0] = (w.s[kSgprM0] & 0xffff0f00u) | idx | (mode << 12);
}
void s_set_gpr_idx_off(Wave& w, const Inst&) { w.gpr_idx_on = false; }
void s_set_gpr_idx_mode(Wave& w, const Inst& in) {
  w.gpr_idx_mode = uint8_t(in.simm & 0xf);
  w.s[kSgprM0] = (w.s[kSgprM0] & 0xffff0fffu) | (uint32_t(in.simm & 0xf) << 12);
}
void s_set_gpr_idx_idx(Wave& w, const Inst& in) { w.s[kSgprM0] = (w.s[kSgprM0] & 0xffffff00u) | (sread(w, in.ops[0]) & 0xff); }

// hwreg(id, offset, size): simm16 = id[5:0] | offset[10:6] | (size-1)[15:11]
void s_getreg_b32(Wave& w, const Inst& in) {
  unsigned id = in.simm & 0x3f, off = (in.simm >> 6) & 31, sz = ((in.simm >> 11) & 31) + 1;
  uint32_t v = w.hwreg[id];
  if (id == 4) v = w.id;  // HW_REG_HW_ID: wave id in bits [3:0]
  uint32_t mask = sz >= 32 ? 0xffffffffu : ((1u << sz) - 1);
  swrite(w, in.ops[0], (v >> off) & mask);
}
void setreg(Wave& w, unsigned simm, uint32_t val) {
  unsigned id = simm & 0x3f, off = (simm >> 6) & 31, sz = ((simm >> 11) & 31) + 1;
  uint32_t mask = (sz >= 32 ? 0xffffffffu : ((1u << sz) - 1)) << off;
  w.hwreg[id] = (w.hwreg[id] & ~mask) | ((val << off) & mask);
  if (id == 1) {  // HW_REG_MODE: FP_DENORM at [7:4] (single [5:4]), FP16_OVFL at [23]
    w.denorm32 = ((w.hwreg[1] >> 4) & 3) != 0;
    w.denorm16 = ((w.hwreg[1] >> 6) & 3) != 0;
    w.fp16_ovfl = (w.hwreg[1] >> 23) & 1;
  }
}
void s_setreg_b32(Wave& w, const Inst& in) { setreg(w, unsigned(in.simm), sread(w, in.ops[0])); }
void s_setreg_imm32_b32(Wave& w, const Inst& in) { setreg(w, unsigned(in.simm), uint32_t(in.simm2)); }

void add(const char* name, Handler fn, InstClass cls, uint8_t ndst, uint32_t kind = K_SALU) {
  OpInfo i;
  i.name = name;
  i.fn = fn;
  i.cls = cls;
  i.ndst = ndst;
  i.kind = kind;
  add_op(i);
}

}  // namespace

void register_salu_ops() {
  const InstClass S = InstClass::SALU;
  const uint32_t WS = K_SALU | K_WRITES_SCC, RS = K_SALU | K_READS_SCC;
  add("s_add_u32", sop2_32<AddU32>, S, 1, WS);
  add("s_addc_u32", sop2_32<AddcU32>, S, 1, WS | RS);
  add("s_sub_u32", sop2_32<SubU32>, S, 1, WS);
  add("s_subb_u32", sop2_32<SubbU32>, S, 1, WS | RS);
  add("s_add_i32", sop2_32<AddI32>, S, 1, WS);
  add("s_sub_i32", sop2_32<SubI32>, S, 1, WS);
  add("s_and_b32", sop2_32<And32>, S, 1, WS);
  add("s_or_b32", sop2_32<Or32>, S, 1, WS);
  add("s_xor_b32", sop2_32<Xor32>, S, 1, WS);
  add("s_andn2_b32", sop2_32<Andn2_32>, S, 1, WS);
  add("s_orn2_b32", sop2_32<Orn2_32>, S, 1, WS);
  add("s_nand_b32", sop2_32<Nand32>, S, 1, WS);
  add("s_nor_b32", sop2_32<Nor32>, S, 1, WS);
  add("s_xnor_b32", sop2_32<Xnor32>, S, 1, WS);
  add("s_lshl_b32", sop2_32<Lshl32>, S, 1, WS);
  add("s_lshr_b32", sop2_32<Lshr32>, S, 1, WS);
  add("s_ashr_i32", sop2_32<Ashr32>, S, 1, WS);
  add("s_mul_i32", sop2_32<MulI32>, S, 1);
  add("s_mul_hi_u32", sop2_32<MulHiU32>, S, 1);
  add("s_mul_hi_i32", sop2_32<MulHiI32>, S, 1);
  add("s_min_u32", sop2_32<MinU32>, S, 1, WS);
  add("s_max_u32", sop2_32<MaxU32>, S, 1, WS);
  add("s_min_i32", sop2_32<MinI32>, S, 1, WS);
  add("s_max_i32", sop2_32<MaxI32>, S, 1, WS);
  add("s_cselect_b32", sop2_32<CselectB32>, S, 1, RS);
  add("s_bfe_u32", sop2_32<BfeU32>, S, 1, WS);
  add("s_bfe_i32", sop2_32<BfeI32>, S, 1, WS);
  add("s_bfm_b32", sop2_32<BfmB32>, S, 1);
  add("s_lshl1_add_u32", sop2_32<Lshl1Add>, S, 1, WS);
  add("s_lshl2_add_u32", sop2_32<Lshl2Add>, S, 1, WS);
  add("s_lshl3_add_u32", sop2_32<Lshl3Add>, S, 1, WS);
  add("s_lshl4_add_u32", sop2_32<Lshl4Add>, S, 1, WS);
  add("s_pack_ll_b32_b16", sop2_32<PackLL>, S, 1);
  add("s_pack_lh_b32_b16", sop2_32<PackLH>, S, 1);
  add("s_pack_hh_b32_b16", sop2_32<PackHH>, S, 1);
  add("s_absdiff_i32", sop2_32<AbsDiff>, S, 1, WS);
  add("s_and_b64", sop2_64<And64>, S, 1, WS);
  add("s_or_b64", sop2_64<Or64>, S, 1, WS);
  add("s_xor_b64", sop2_64<Xor64>, S, 1, WS);
  add("s_andn2_b64", sop2_64<Andn2_64>, S, 1, WS);
  add("s_orn2_b64", sop2_64<Orn2_64>, S, 1, WS);
  add("s_nand_b64", sop2_64<Nand64>, S, 1, WS);
  add("s_nor_b64", sop2_64<Nor64>, S, 1, WS);
  add("s_xnor_b64", sop2_64<Xnor64>, S, 1, WS);
  add("s_lshl_b64", sop2_64<Lshl64>, S, 1, WS);
  add("s_lshr_b64", sop2_64<Lshr64>, S, 1, WS);
  add("s_ashr_i64", sop2_64<Ashr64>, S, 1, WS);
  add("s_cselect_b64", sop2_64<CselectB64>, S, 1, RS);
  add("s_bfe_u64", sop2_64<BfeU64>, S, 1, WS);
  add("s_mov_b32", sop1_32<Mov32>, S, 1);
  add("s_not_b32", sop1_32<Not32>, S, 1, WS);
  add("s_brev_b32", sop1_32<Brev32>, S, 1);
  add("s_bcnt1_i32_b32", sop1_32<Bcnt1_32>, S, 1, WS);
  add("s_ff1_i32_b32", sop1_32<Ff1_32>, S, 1);
  add("s_flbit_i32_b32", sop1_32<Flbit32>, S, 1);
  add("s_sext_i32_i8", sop1_32<SextI8>, S, 1);
  add("s_sext_i32_i16", sop1_32<SextI16>, S, 1);
  add("s_abs_i32", sop1_32<AbsI32>, S, 1, WS);
  add("s_mov_b64", sop1_64<Mov64>, S, 1);
  add("s_not_b64", sop1_64<Not64>, S, 1, WS);
  add("s_bcnt1_i32_b64", s_bcnt1_i32_b64, S, 1, WS);
  add("s_movk_i32", s_movk_i32, S, 1);
  add("s_cmovk_i32", s_cmovk_i32, S, 1, RS);
  add("s_addk_i32", s_addk_i32, S, 1, WS | K_READS_DST);
  add("s_mulk_i32", s_mulk_i32, S, 1, K_SALU | K_READS_DST);
  add("s_cmov_b32", s_cmov_b32, S, 1, RS);
  add("s_cmov_b64", s_cmov_b64, S, 1, RS);
  add("s_and_saveexec_b64", s_saveexec<0>, S, 1, WS);
  add("s_or_saveexec_b64", s_saveexec<1>, S, 1, WS);
  add("s_andn2_saveexec_b64", s_saveexec<2>, S, 1, WS);
  add("s_orn2_saveexec_b64", s_saveexec<3>, S, 1, WS);
  add("s_xor_saveexec_b64", s_saveexec<4>, S, 1, WS);
  add("s_getpc_b64", s_getpc_b64, S, 1);
  add("s_setpc_b64", s_setpc_b64, InstClass::BRANCH, 0);
  add("s_swappc_b64", s_swappc_b64, InstClass::BRANCH, 1);
  add("s_cmp_eq_i32", sopc<EqI>, S, 0, WS);
  add("s_cmp_lg_i32", sopc<LgI>, S, 0, WS);
  add("s_cmp_lt_i32", sopc<LtI>, S, 0, WS);
  add("s_cmp_le_i32", sopc<LeI>, S, 0, WS);
  add("s_cmp_gt_i32", sopc<GtI>, S, 0, WS);
  add("s_cmp_ge_i32", sopc<GeI>, S, 0, WS);
  add("s_cmp_eq_u32", sopc<EqU>, S, 0, WS);
  add("s_cmp_lg_u32", sopc<LgU>, S, 0, WS);
  add("s_cmp_lt_u32", sopc<LtU>, S, 0, WS);
  add("s_cmp_le_u32", sopc<LeU>, S, 0, WS);
  add("s_cmp_gt_u32", sopc<GtU>, S, 0, WS);
  add("s_cmp_ge_u32", sopc<GeU>, S, 0, WS);
  add("s_cmp_eq_u64", sopc64<Eq64>, S, 0, WS);
  add("s_cmp_lg_u64", sopc64<Lg64>, S, 0, WS);
  add("s_bitcmp0_b32", sopc<Bitcmp0>, S, 0, WS);
  add("s_bitcmp1_b32", sopc<Bitcmp1>, S, 0, WS);
  add("s_cmpk_eq_i32", sopk_cmp<KEqI>, S, 0, WS);
  add("s_cmpk_lg_i32", sopk_cmp<KLgI>, S, 0, WS);
  add("s_cmpk_lt_i32", sopk_cmp<KLtI>, S, 0, WS);
  add("s_cmpk_le_i32", sopk_cmp<KLeI>, S, 0, WS);
  add("s_cmpk_gt_i32", sopk_cmp<KGtI>, S, 0, WS);
  add("s_cmpk_ge_i32", sopk_cmp<KGeI>, S, 0, WS);
  add("s_cmpk_eq_u32", sopk_cmp<KEqU>, S, 0, WS);
  add("s_cmpk_lg_u32", sopk_cmp<KLgU>, S, 0, WS);
  add("s_cmpk_lt_u32", sopk_cmp<KLtU>, S, 0, WS);
  add("s_cmpk_le_u32", sopk_cmp<KLeU>, S, 0, WS);
  add("s_cmpk_gt_u32", sopk_cmp<KGtU>, S, 0, WS);
  add("s_cmpk_ge_u32", sopk_cmp<KGeU>, S, 0, WS);
  const InstClass B = InstClass::BRANCH;
  add("s_branch", s_branch, B, 0, K_SALU | K_BRANCH);
  add("s_cbranch_scc0", s_cbranch_scc0, B, 0, K_SALU | K_BRANCH | K_READS_SCC);
  add("s_cbranch_scc1", s_cbranch_scc1, B, 0, K_SALU | K_BRANCH | K_READS_SCC);
  add("s_cbranch_vccz", s_cbranch_vccz, B, 0, K_SALU | K_BRANCH);
  add("s_cbranch_vccnz", s_cbranch_vccnz, B, 0, K_SALU | K_BRANCH);
  add("s_cbranch_execz", s_cbranch_execz, B, 0, K_SALU | K_BRANCH);
  add("s_cbranch_execnz", s_cbranch_execnz, B, 0, K_SALU | K_BRANCH);
  add("s_nop", s_nop, InstClass::NOP, 0, 0);
  add("s_sleep", s_nop, InstClass::OTHER, 0, 0);
  add("s_setprio", s_nop, InstClass::OTHER, 0, 0);
  add("s_sethalt", s_nop, InstClass::OTHER, 0, 0);
  add("s_icache_inv", s_nop, InstClass::OTHER, 0, 0);
  add("s_code_end", s_endpgm, InstClass::OTHER, 0, 0);
  add("s_endpgm", s_endpgm, InstClass::OTHER, 0, 0);
  add("s_barrier", s_barrier, InstClass::BARRIER, 0, 0);
  add("s_waitcnt", s_waitcnt, InstClass::WAITCNT, 0, 0);
  add("s_set_gpr_idx_on", s_set_gpr_idx_on, S, 0, K_SALU);
  add("s_set_gpr_idx_off", s_set_gpr_idx_off, S, 0, K_SALU);
  add("s_set_gpr_idx_mode", s_set_gpr_idx_mode, S, 0, K_SALU);
  add("s_set_gpr_idx_idx", s_set_gpr_idx_idx, S, 0, K_SALU);
  add("s_getreg_b32", s_getreg_b32, S, 1, K_SALU | K_GETREG);
  add("s_setreg_b32", s_setreg_b32, S, 0, K_SALU | K_SETREG);
  add("s_setreg_imm32_b32", s_setreg_imm32_b32, S, 0, K_SALU | K_SETREG);
}

}  // namespace mla::emu
