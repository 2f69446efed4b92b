// Vector ALU: integer, float, conversions (incl. fp8/bf8/bf16), compares, DPP/SDWA/VOP3
// modifiers, packed f32 (VOP3P), cross-lane operations, AccVGPR moves.
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "emulator/exec_common.h"
#include "emulator/numerics.h"

namespace mla::emu {

namespace {

inline uint32_t bitrev32(uint32_t v) {
  uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

using num::Fp8Fmt;
inline Fp8Fmt fp8fmt(const Wave& w) { return w.gfx() == Gfx::gfx942 ? Fp8Fmt::FNUZ : Fp8Fmt::OCP; }

// ---- DPP (gfx9 encoding of dpp_ctrl) ----
// Source lane of `lane` or -1 when out of range.
inline int dpp_src_lane(uint16_t c, int lane) {
  int row = lane & ~15, r = lane & 15;
  if (c <= 0xff) return (lane & ~3) | ((c >> ((lane & 3) * 2)) & 3);
  if (c >= 0x101 && c <= 0x10f) { int n = c & 15; return r + n < 16 ? lane + n : -1; }
  if (c >= 0x111 && c <= 0x11f) { int n = c & 15; return r - n >= 0 ? lane - n : -1; }
  if (c >= 0x121 && c <= 0x12f) { int n = c & 15; return row + ((r - n) & 15); }
  switch (c) {
    case 0x130: return lane + 1 < 64 ? lane + 1 : -1;      // wave_shl:1
    case 0x134: return (lane + 1) & 63;                     // wave_rol:1
    case 0x138: return lane - 1 >= 0 ? lane - 1 : -1;       // wave_shr:1
    case 0x13c: return (lane - 1) & 63;                     // wave_ror:1
    case 0x140: return row + 15 - r;                        // row_mirror
    case 0x141: return (lane & ~7) + 7 - (lane & 7);        // row_half_mirror
    case 0x142: return lane >= 16 ? row - 1 : -1;           // row_bcast:15
    case 0x143: return lane >= 32 ? 31 : -1;                // row_bcast:31
  }
  // row_newbcast:N (gfx90a+, dpp_ctrl 0x150-0x15f; LLVM SIDefines.h DppCtrl ROW_NEWBCAST_FIRST
  // = 0x150 .. ROW_NEWBCAST_LAST = 0x15f, the encoding GFX10+ calls row_share): every lane of a
  // 16-lane row reads lane N of its own row (LLVM docs/AMDGPU/AMDGPUAsmGFX90a.rst, dpp_ctrl:
  // "row_newbcast:{0..15}  Broadcast a thread within a row to the whole row"). Confirmed by
  // aiter's hardware-validated gfx942/gfx950 MLA kernels running to the reference
  // (docs/aiter-oracle.md), which compute their per-row LDS addresses with it.
  if (c >= 0x150 && c <= 0x15f) return row + (c & 15);
  return -1;
}

struct Srcs {
  const uint32_t* p[4];
  alignas(64) uint32_t t[4][64];
};

inline uint32_t sdwa_extract(uint32_t v, uint8_t sel, bool sext) {
  switch (sel) {
    case 0: case 1: case 2: case 3: { uint32_t b = (v >> (8 * sel)) & 0xff; return sext ? uint32_t(int32_t(int8_t(b))) : b; }
    case 4: case 5: { uint32_t h = (v >> (16 * (sel - 4))) & 0xffff; return sext ? uint32_t(int32_t(int16_t(h))) : h; }
    default: return v;
  }
}

// Fetches nsrc 32-bit sources starting at operand `first`, applying DPP (src0), SDWA selects
// and float abs/neg. `mask` gets the DPP write mask folded in.
// float_srcs: bit i set = source i is an f32 operand (abs/neg modifiers, denormal inputs flushed
// per MODE); a clear bit = an integer operand, taken as its bits.
void fetch_srcs(Wave& w, const Inst& in, unsigned first, unsigned nsrc, unsigned float_srcs, Srcs& S, uint64_t& mask) {
  for (unsigned i = 0; i < nsrc; ++i) {
    const bool fl = (float_srcs >> i) & 1;
    S.p[i] = vsrc(w, in, first + i, 0, S.t[i]);
    const Operand& o = in.ops[first + i];
    if (i == 0 && (in.flags & F_DPP)) {
      uint64_t exec = w.exec();
      const uint32_t* src = S.p[0];
      uint32_t tmp[64];
      for (int l = 0; l < 64; ++l) {
        int s = dpp_src_lane(in.dpp_ctrl, l);
        bool valid = s >= 0 && ((exec >> s) & 1);
        if (valid) tmp[l] = src[s];
        else if (in.flags & F_BOUND_CTRL) tmp[l] = 0;
        else { tmp[l] = 0; mask &= ~(1ull << l); }
        if (!((in.row_mask >> (l >> 4)) & 1) || !((in.bank_mask >> ((l >> 2) & 3)) & 1)) mask &= ~(1ull << l);
      }
      std::memcpy(S.t[0], tmp, sizeof tmp);
      S.p[0] = S.t[0];
    }
    if ((in.flags & F_SDWA) && i < 2) {
      uint8_t sel = i == 0 ? in.src0_sel : in.src1_sel;
      if (sel != 6 || o.sext) {
        const uint32_t* src = S.p[i];
        uint32_t tmp[64];
        for (int l = 0; l < 64; ++l) tmp[l] = sdwa_extract(src[l], sel, o.sext);
        std::memcpy(S.t[i], tmp, sizeof tmp);
        S.p[i] = S.t[i];
      }
    }
    if (fl && (o.abs || o.neg)) {
      uint32_t andm = o.abs ? 0x7fffffffu : 0xffffffffu, xorm = o.neg ? 0x80000000u : 0;
      const uint32_t* src = S.p[i];
      uint32_t tmp[64];
      for (int l = 0; l < 64; ++l) tmp[l] = (src[l] & andm) ^ xorm;
      std::memcpy(S.t[i], tmp, sizeof tmp);
      S.p[i] = S.t[i];
    }
    if (fl && !w.denorm32) {
      const uint32_t* src = S.p[i];
      uint32_t tmp[64];
      for (int l = 0; l < 64; ++l) tmp[l] = ((src[l] & 0x7f800000u) == 0) ? (src[l] & 0x80000000u) : src[l];
      std::memcpy(S.t[i], tmp, sizeof tmp);
      S.p[i] = S.t[i];
    }
  }
}

void fetch(Wave& w, const Inst& in, unsigned first, unsigned nsrc, bool fl, Srcs& S, uint64_t& mask) {
  fetch_srcs(w, in, first, nsrc, fl ? ~0u : 0u, S, mask);
}

inline uint32_t clamp01(uint32_t b) {
  float f = f32(b);
  if (std::isnan(f)) return 0;
  if (f < 0.0f || (b == 0x80000000u)) return 0;
  if (f > 1.0f) return 0x3f800000u;
  return b;
}

// Writes a 32-bit result (float output modifiers, SDWA destination select, EXEC/DPP mask).
void writeback(Wave& w, const Inst& in, unsigned opi, uint32_t* res, uint64_t mask, bool fl) {
  if (fl) {
    if (in.omod) for (int l = 0; l < 64; ++l) {
      float f = f32(res[l]);
      f = in.omod == 1 ? f * 2.0f : in.omod == 2 ? f * 4.0f : f * 0.5f;
      res[l] = b32(f);
    }
    if (in.flags & F_CLAMP) for (int l = 0; l < 64; ++l) res[l] = clamp01(res[l]);
    if (!w.denorm32) for (int l = 0; l < 64; ++l) if ((res[l] & 0x7f800000u) == 0) res[l] &= 0x80000000u;
  }
  uint32_t* d = vdst(w, in, opi);
  if ((in.flags & F_SDWA) && in.dst_sel != 6) {
    unsigned sel = in.dst_sel;
    unsigned shift = sel < 4 ? 8 * sel : 16 * (sel - 4), bits = sel < 4 ? 8 : 16;
    uint32_t fm = (bits == 32 ? 0xffffffffu : ((1u << bits) - 1)) << shift;
    for (int l = 0; l < 64; ++l) {
      if (!((mask >> l) & 1)) continue;
      uint32_t v = (res[l] << shift) & fm;
      if (in.dst_unused == 2) v |= d[l] & ~fm;
      else if (in.dst_unused == 1) {
        bool neg = (v >> (shift + bits - 1)) & 1;
        if (neg) v |= ~((1u << (shift + bits)) - 1) & (shift + bits < 32 ? 0xffffffffu : 0);
      }
      d[l] = v;
    }
    return;
  }
  if (mask == ~0ull) std::memcpy(d, res, 256);
  else for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) d[l] = res[l];
}

// ---- generic 32-bit VALU ----
// FL: float operands (abs/neg, denormal inputs flushed per MODE). FLOUT: the result is a float
// too (omod, clamp, denormal outputs flushed per MODE); false for float-to-integer conversions,
// whose integer result has no exponent field (LLVM's 32-bit udiv expansion converts 2^32/d, a
// value below 2^23 for d > 512, with v_cvt_u32_f32 in kernels that flush f32 denormals).
template <class F, unsigned N, bool FL, bool FLOUT = FL>
void valu(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  unsigned first = in.info->ndst;
  fetch(w, in, first, N, FL, S, mask);
  alignas(64) uint32_t res[64];
  const uint32_t* a = S.p[0];
  const uint32_t* b = N > 1 ? S.p[1] : S.p[0];
  const uint32_t* c = N > 2 ? S.p[2] : S.p[0];
  F f;
  for (int l = 0; l < 64; ++l) res[l] = f(a[l], b[l], c[l], w);
  writeback(w, in, 0, res, mask, FLOUT);
}

#define OP(name, ...) struct name { uint32_t operator()(uint32_t a, uint32_t b, uint32_t c, Wave& w) const { (void)a; (void)b; (void)c; (void)w; __VA_ARGS__ } };

float fmax_hw(float a, float b) {
  if (std::isnan(a)) return std::isnan(b) ? a : b;
  if (std::isnan(b)) return a;
  if (a == b && a == 0.0f) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
float fmin_hw(float a, float b) {
  if (std::isnan(a)) return std::isnan(b) ? a : b;
  if (std::isnan(b)) return a;
  if (a == b && a == 0.0f) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
inline uint32_t quiet(uint32_t b) { return ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffff)) ? (b | 0x400000u) : b; }

OP(MovB32, { return a; })
OP(AddU32, { return a + b; })
// v_add_i32 (gfx9 VOP3-only, opcode 0x29c): D.i = S0.i + S1.i, two's-complement wrap; with
// clamp the sum saturates to the signed 32-bit range (AMD Vega/CDNA3 ISA, V_ADD_I32:
// "Supports saturation (signed 32-bit integer domain)"). Clamp is applied in v_add_i32 below.
OP(AddI32, { return a + b; })
OP(SubI32, { return a - b; })
OP(SubU32, { return a - b; })
OP(SubrevU32, { return b - a; })
OP(Add3U32, { return a + b + c; })
OP(AndB32, { return a & b; })
OP(OrB32, { return a | b; })
OP(XorB32, { return a ^ b; })
OP(NotB32, { return ~a; })
OP(Or3B32, { return a | b | c; })
OP(AndOrB32, { return (a & b) | c; })
OP(XadU32, { return (a ^ b) + c; })
OP(LshlrevB32, { return b << (a & 31); })
OP(LshrrevB32, { return b >> (a & 31); })
OP(AshrrevI32, { return uint32_t(int32_t(b) >> (a & 31)); })
OP(LshlAddU32, { return (a << (b & 31)) + c; })
OP(AddLshlU32, { return (a + b) << (c & 31); })
OP(LshlOrB32, { return (a << (b & 31)) | c; })
OP(MulHiU32, { return uint32_t((uint64_t(a) * b) >> 32); })
OP(MulHiI32, { return uint32_t((int64_t(int32_t(a)) * int32_t(b)) >> 32); })
OP(MulLoU32, { return a * b; })
OP(MulI32I24, { return uint32_t(int64_t(int32_t(a << 8) >> 8) * int64_t(int32_t(b << 8) >> 8)); })  // 48-bit product, low 32
OP(MulHiI32I24, { return uint32_t((int64_t(int32_t(a << 8) >> 8) * int64_t(int32_t(b << 8) >> 8)) >> 32); })
OP(MulU32U24, { return (a & 0xffffff) * (b & 0xffffff); })
OP(MulHiU32U24, { return uint32_t((uint64_t(a & 0xffffff) * (b & 0xffffff)) >> 32); })
OP(MadU32U24, { return (a & 0xffffff) * (b & 0xffffff) + c; })
OP(MadI32I24, { return uint32_t((int32_t(a << 8) >> 8) * (int32_t(b << 8) >> 8) + int32_t(c)); })
OP(BfeU32, { unsigned o = b & 31, n = c & 31; return n == 0 ? 0 : (a >> o) & ((n + o >= 32 && false) ? 0 : ((1u << n) - 1)); })
OP(BfeI32, { unsigned o = b & 31, n = c & 31; if (n == 0) return 0; if (n + o >= 32) return uint32_t(int32_t(a) >> o); return uint32_t(int32_t(a << (32 - o - n)) >> (32 - n)); })
OP(BfiB32, { return (a & b) | (~a & c); })
OP(BfmB32, { return ((1u << (a & 31)) - 1) << (b & 31); })
OP(AlignbitB32, { return uint32_t(((uint64_t(a) << 32) | b) >> (c & 31)); })
OP(AlignbyteB32, { return uint32_t(((uint64_t(a) << 32) | b) >> (8 * (c & 3))); })
OP(MinU32, { return a < b ? a : b; })
OP(MaxU32, { return a > b ? a : b; })
OP(MinI32, { return int32_t(a) < int32_t(b) ? a : b; })
OP(MaxI32, { return int32_t(a) > int32_t(b) ? a : b; })
OP(Max3U32, { return std::max(std::max(a, b), c); })
OP(Min3U32, { return std::min(std::min(a, b), c); })
OP(Max3I32, { return uint32_t(std::max(std::max(int32_t(a), int32_t(b)), int32_t(c))); })
OP(Min3I32, { return uint32_t(std::min(std::min(int32_t(a), int32_t(b)), int32_t(c))); })
OP(Med3U32, { return std::max(std::min(a, b), std::min(std::max(a, b), c)); })
OP(Med3I32, { int32_t x = int32_t(a), y = int32_t(b), z = int32_t(c); return uint32_t(std::max(std::min(x, y), std::min(std::max(x, y), z))); })
OP(BcntU32, { return __builtin_popcount(a) + b; })
OP(BfrevB32, { return bitrev32(a); })
OP(FfbhU32, { return a ? uint32_t(__builtin_clz(a)) : 0xffffffffu; })
OP(FfblB32, { return a ? uint32_t(__builtin_ctz(a)) : 0xffffffffu; })
OP(PermB32, {
  // D.byte[i] = selector c.byte[i] over {a,b} (b is bytes 0-3, a bytes 4-7); 8-11 sign/const.
  uint64_t v = (uint64_t(a) << 32) | b;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    uint32_t s = (c >> (8 * i)) & 0xff, byte;
    if (s < 8) byte = (v >> (8 * s)) & 0xff;
    else if (s == 8) byte = ((v >> 15) & 1) ? 0xff : 0;
    else if (s == 9) byte = ((v >> 31) & 1) ? 0xff : 0;
    else if (s == 10) byte = ((v >> 47) & 1) ? 0xff : 0;
    else if (s == 11) byte = ((v >> 63) & 1) ? 0xff : 0;
    else if (s == 12) byte = 0;
    else byte = 0xff;
    r |= byte << (8 * i);
  }
  return r;
})
// floats
OP(AddF32, { return quiet(b32(f32(a) + f32(b))); })
OP(SubF32, { return quiet(b32(f32(a) - f32(b))); })
OP(SubrevF32, { return quiet(b32(f32(b) - f32(a))); })
OP(MulF32, { return quiet(b32(f32(a) * f32(b))); })
OP(FmaF32, { return quiet(b32(std::fma(f32(a), f32(b), f32(c)))); })
OP(MaxF32, { return quiet(b32(fmax_hw(f32(a), f32(b)))); })
OP(MinF32, { return quiet(b32(fmin_hw(f32(a), f32(b)))); })
OP(Max3F32, { return quiet(b32(fmax_hw(fmax_hw(f32(a), f32(b)), f32(c)))); })
OP(Min3F32, { return quiet(b32(fmin_hw(fmin_hw(f32(a), f32(b)), f32(c)))); })
OP(Med3F32, {
  float x = f32(a), y = f32(b), z = f32(c);
  return b32(fmax_hw(fmin_hw(x, y), fmin_hw(fmax_hw(x, y), z)));
})
OP(ExpF32, { return b32(num::exp2_f32(f32(a), w.denorm32)); })
OP(LogF32, { return b32(num::log2_f32(f32(a), w.denorm32)); })
OP(RcpF32, { return b32(num::rcp_f32(f32(a), w.denorm32)); })
OP(RsqF32, { return b32(num::rsq_f32(f32(a), w.denorm32)); })
OP(SqrtF32, { return b32(num::sqrt_f32(f32(a), w.denorm32)); })
OP(CvtF32U32, { return b32(float(a)); })
OP(CvtF32I32, { return b32(float(int32_t(a))); })
OP(CvtU32F32, {
  float f = f32(a);
  if (std::isnan(f) || f <= 0.0f) return 0u;
  if (f >= 4294967296.0f) return 0xffffffffu;
  return uint32_t(f);
})
OP(CvtI32F32, {
  float f = f32(a);
  if (std::isnan(f)) return 0u;
  if (f >= 2147483648.0f) return 0x7fffffffu;
  if (f <= -2147483648.0f) return 0x80000000u;
  return uint32_t(int32_t(f));
})
OP(CvtF32Ubyte0, { return b32(float(a & 0xff)); })
OP(CvtF32Ubyte1, { return b32(float((a >> 8) & 0xff)); })
OP(CvtF32Ubyte2, { return b32(float((a >> 16) & 0xff)); })
OP(CvtF32Ubyte3, { return b32(float(a >> 24)); })
OP(CvtF32F16, { return b32(num::f16_to_f32(uint16_t(a))); })
OP(CvtF16F32, { return num::f32_to_f16_rne(f32(a)); })
OP(CvtF32Bf16, { return (a & 0xffff) << 16; })
OP(CvtPkBf16F32, { return uint32_t(num::f32_to_bf16_rne(f32(a))) | (uint32_t(num::f32_to_bf16_rne(f32(b))) << 16); })
OP(CvtPkrtzF16F32, { return uint32_t(num::f32_to_f16_rne(f32(a))) | (uint32_t(num::f32_to_f16_rne(f32(b))) << 16); })
OP(FractF32, { float f = f32(a); return b32(f - std::floor(f)); })
OP(TruncF32, { return b32(std::trunc(f32(a))); })
OP(FloorF32, { return b32(std::floor(f32(a))); })
OP(CeilF32, { return b32(std::ceil(f32(a))); })
OP(RndneF32, { return b32(std::nearbyint(f32(a))); })
OP(LdexpF32, { return b32(std::ldexp(f32(a), int32_t(b))); })

// v_fmac_f32 / v_mac_f32: d = s0 * s1 + d
template <bool SUB>
void v_addsub_i32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, in.info->ndst, 2, false, S, mask);
  alignas(64) uint32_t res[64];
  bool clamp = in.flags & F_CLAMP;
  for (int l = 0; l < 64; ++l) {
    int64_t a = int32_t(S.p[0][l]), b = int32_t(S.p[1][l]);
    int64_t r = SUB ? a - b : a + b;
    if (clamp) r = std::clamp<int64_t>(r, INT32_MIN, INT32_MAX);
    res[l] = uint32_t(r);
  }
  writeback(w, in, 0, res, mask, false);
}

void v_fmac_f32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 2, true, S, mask);
  const uint32_t* c = vdst(w, in, 0);
  alignas(64) uint32_t res[64];
  for (int l = 0; l < 64; ++l) {
    uint32_t cb = c[l];
    if (!w.denorm32 && (cb & 0x7f800000u) == 0) cb &= 0x80000000u;
    res[l] = quiet(b32(std::fma(f32(S.p[0][l]), f32(S.p[1][l]), f32(cb))));
  }
  writeback(w, in, 0, res, mask, true);
}

// ---- specials ----
void v_cndmask_b32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 2, true && (in.ops[1].abs || in.ops[1].neg || in.ops[2].abs || in.ops[2].neg), S, mask);
  uint64_t sel = in.nops > 3 ? sread64(w, in.ops[3]) : w.vcc();
  alignas(64) uint32_t res[64];
  for (int l = 0; l < 64; ++l) res[l] = ((sel >> l) & 1) ? S.p[1][l] : S.p[0][l];
  writeback(w, in, 0, res, mask, false);
}

template <int Mode>  // 0 add, 1 sub, 2 subrev
void v_add_co(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 2, 2, false, S, mask);
  alignas(64) uint32_t res[64];
  uint64_t carry = 0;
  for (int l = 0; l < 64; ++l) {
    uint64_t a = S.p[0][l], b = S.p[1][l];
    if (Mode == 0) { uint64_t r = a + b; res[l] = uint32_t(r); if ((r >> 32) && ((mask >> l) & 1)) carry |= 1ull << l; }
    else {
      if (Mode == 2) std::swap(a, b);
      res[l] = uint32_t(a - b);
      if (b > a && ((mask >> l) & 1)) carry |= 1ull << l;
    }
  }
  writeback(w, in, 0, res, mask, false);
  swrite64(w, in.ops[1], carry);
}
template <int Mode>  // 0 addc, 1 subb, 2 subbrev
void v_addc_co(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 2, 2, false, S, mask);
  uint64_t cin = in.nops > 4 ? sread64(w, in.ops[4]) : w.vcc();
  alignas(64) uint32_t res[64];
  uint64_t carry = 0;
  for (int l = 0; l < 64; ++l) {
    uint64_t a = S.p[0][l], b = S.p[1][l], c = (cin >> l) & 1;
    if (Mode == 0) { uint64_t r = a + b + c; res[l] = uint32_t(r); if ((r >> 32) && ((mask >> l) & 1)) carry |= 1ull << l; }
    else {
      if (Mode == 2) std::swap(a, b);
      res[l] = uint32_t(a - b - c);
      if (b + c > a && ((mask >> l) & 1)) carry |= 1ull << l;
    }
  }
  writeback(w, in, 0, res, mask, false);
  swrite64(w, in.ops[1], carry);
}

void v_mad_u64_u32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 2, 2, false, S, mask);
  uint32_t t0[64], t1[64];
  const uint32_t* c0 = vsrc(w, in, 4, 0, t0);
  const uint32_t* c1 = vsrc(w, in, 4, 1, t1);
  uint32_t* d0 = vdst(w, in, 0, 0);
  uint32_t* d1 = vdst(w, in, 0, 1);
  uint64_t carry = 0;
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    unsigned __int128 r = (unsigned __int128)(uint64_t(S.p[0][l]) * S.p[1][l]) + ((uint64_t(c1[l]) << 32) | c0[l]);
    d0[l] = uint32_t(r);
    d1[l] = uint32_t(uint64_t(r) >> 32);
    if (r >> 64) carry |= 1ull << l;
  }
  swrite64(w, in.ops[1], carry);
}

// 64-bit lane ops: v_mov_b64, v_lshlrev_b64, v_lshrrev_b64, v_ashrrev_i64, v_lshl_add_u64
template <int Mode>
void valu64(Wave& w, const Inst& in) {
  uint64_t mask = w.exec();
  auto rd64 = [&](unsigned opi, uint32_t* t0, uint32_t* t1, const uint32_t*& lo, const uint32_t*& hi) {
    lo = vsrc(w, in, opi, 0, t0);
    const Operand& o = in.ops[opi];
    if (o.kind == Operand::Const && !o.literal) { hi = vsrc(w, in, opi, 1, t1); return; }
    hi = (o.width >= 2 || o.kind == Operand::Const) ? vsrc(w, in, opi, 1, t1) : vsrc(w, in, opi, 0, t1);
    if (o.width < 2 && o.kind != Operand::Const) { for (int l = 0; l < 64; ++l) t1[l] = 0; hi = t1; }
  };
  uint32_t a0[64], a1[64], b0[64], b1[64], c0[64], c1[64];
  const uint32_t *al, *ah, *bl, *bh, *cl, *ch;
  uint32_t* d0 = vdst(w, in, 0, 0);
  uint32_t* d1 = vdst(w, in, 0, 1);
  uint64_t res[64];
  if (Mode == 0) {  // v_mov_b64 d, s64
    rd64(1, a0, a1, al, ah);
    for (int l = 0; l < 64; ++l) res[l] = (uint64_t(ah[l]) << 32) | al[l];
    if (in.flags & F_DPP) w.fail("unsupported", "DPP v_mov_b64");
  } else if (Mode <= 3) {  // shifts: d = s1 op s0
    const uint32_t* sh = vsrc(w, in, 1, 0, a0);
    rd64(2, b0, b1, bl, bh);
    for (int l = 0; l < 64; ++l) {
      uint64_t v = (uint64_t(bh[l]) << 32) | bl[l];
      unsigned s = sh[l] & 63;
      res[l] = Mode == 1 ? v << s : Mode == 2 ? v >> s : uint64_t(int64_t(v) >> s);
    }
  } else {  // v_lshl_add_u64 d, s0(64), s1(shift), s2(64)
    rd64(1, a0, a1, al, ah);
    const uint32_t* sh = vsrc(w, in, 2, 0, b0);
    rd64(3, c0, c1, cl, ch);
    for (int l = 0; l < 64; ++l) {
      uint64_t v = (uint64_t(ah[l]) << 32) | al[l], c = (uint64_t(ch[l]) << 32) | cl[l];
      res[l] = (v << (sh[l] & 7)) + c;
    }
  }
  for (int l = 0; l < 64; ++l)
    if ((mask >> l) & 1) { d0[l] = uint32_t(res[l]); d1[l] = uint32_t(res[l] >> 32); }
}

// ---- compares ----
enum Cmp { C_F, C_LT, C_EQ, C_LE, C_GT, C_NE, C_GE, C_T, C_O, C_U, C_NGE, C_NLG, C_NGT, C_NLE, C_NEQ, C_NLT };
template <int C, int T>  // T: 0 u32, 1 i32, 2 f32
inline bool cmp1(uint32_t a, uint32_t b) {
  if (T == 2) {
    float x = f32(a), y = f32(b);
    bool un = std::isnan(x) || std::isnan(y);
    switch (C) {
      case C_F: return false;
      case C_LT: return x < y;
      case C_EQ: return x == y;
      case C_LE: return x <= y;
      case C_GT: return x > y;
      case C_NE: return !un && x != y;  // lg
      case C_GE: return x >= y;
      case C_T: return true;
      case C_O: return !un;
      case C_U: return un;
      case C_NGE: return !(x >= y);
      case C_NLG: return un || x == y;
      case C_NGT: return !(x > y);
      case C_NLE: return !(x <= y);
      case C_NEQ: return !(x == y);
      case C_NLT: return !(x < y);
    }
    return false;
  }
  auto cmp = [](auto x, auto y) {
    switch (C) {
      case C_F: return false;
      case C_LT: return x < y;
      case C_EQ: return x == y;
      case C_LE: return x <= y;
      case C_GT: return x > y;
      case C_NE: return x != y;
      case C_GE: return x >= y;
      default: return true;
    }
  };
  return T == 0 ? cmp(a, b) : cmp(int32_t(a), int32_t(b));
}
template <int C, int T, bool X>
void v_cmp(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 2, T == 2, S, mask);
  uint64_t r = 0;
  for (int l = 0; l < 64; ++l)
    if (((mask >> l) & 1) && cmp1<C, T>(S.p[0][l], S.p[1][l])) r |= 1ull << l;
  if (in.flags & F_SDWA && in.ops[0].kind != Operand::SGPR) w.set_vcc(r);
  else swrite64(w, in.ops[0], r);
  if (X) w.set_exec(r);
}
// 64-bit integer compares (T: 0 u64, 1 i64)
template <int C, int T, bool X>
void v_cmp64(Wave& w, const Inst& in) {
  uint64_t mask = w.exec();
  uint32_t t[4][64];
  const uint32_t* a0 = vsrc(w, in, 1, 0, t[0]);
  const uint32_t* a1 = vsrc(w, in, 1, 1, t[1]);
  const uint32_t* b0 = vsrc(w, in, 2, 0, t[2]);
  const uint32_t* b1 = vsrc(w, in, 2, 1, t[3]);
  uint64_t r = 0;
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint64_t a = (uint64_t(a1[l]) << 32) | a0[l], b = (uint64_t(b1[l]) << 32) | b0[l];
    bool v;
    auto cmp = [&](auto x, auto y) {
      switch (C) {
        case C_F: return false;
        case C_LT: return x < y;
        case C_EQ: return x == y;
        case C_LE: return x <= y;
        case C_GT: return x > y;
        case C_NE: return x != y;
        case C_GE: return x >= y;
        default: return true;
      }
    };
    v = T == 0 ? cmp(a, b) : cmp(int64_t(a), int64_t(b));
    if (v) r |= 1ull << l;
  }
  swrite64(w, in.ops[0], r);
  if (X) w.set_exec(r);
}

// D = S1.u[class of S0.f] (ISA3/ISA4 VOPC V_CMP_CLASS_F32): S1 is a 10-bit mask of classes, an
// integer, so MODE's f32 denormal flush never applies to it (a mask such as 0x1f8, "finite", has
// the bits of an f32 denormal). The emulator once flushed it in kernels with
// .amdhsa_float_denorm_mode_32 0, zeroing aiter's gfx950 bf16 qh64 _v3_ps outputs
// (docs/aiter-oracle.md, family E); clang-22's isfinite lowering is the test's anchor.
void v_cmp_class_f32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch_srcs(w, in, 1, 2, 1u, S, mask);
  uint64_t r = 0;
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint32_t b = S.p[0][l], m = S.p[1][l];
    float f = f32(b);
    bool neg = b >> 31;
    unsigned cls;
    if (std::isnan(f)) cls = (b & 0x400000) ? 1 : 0;
    else if (std::isinf(f)) cls = neg ? 2 : 9;
    else if (f == 0) cls = neg ? 5 : 6;
    else if ((b & 0x7f800000u) == 0) cls = neg ? 4 : 7;
    else cls = neg ? 3 : 8;
    if ((m >> cls) & 1) r |= 1ull << l;
  }
  swrite64(w, in.ops[0], r);
}

// ---- cross-lane ----
void v_readlane_b32(Wave& w, const Inst& in) {
  uint32_t lane = sread(w, in.ops[2]) & 63;
  const Operand& o = in.ops[1];
  uint32_t v = o.kind == Operand::AGPR ? w.areg(o.index)[lane] : w.vreg(vgpr_index(w, in, 1))[lane];
  swrite(w, in.ops[0], v);
}
void v_readfirstlane_b32(Wave& w, const Inst& in) {
  uint64_t e = w.exec();
  unsigned lane = e ? unsigned(__builtin_ctzll(e)) : 0;
  uint32_t t[64];
  swrite(w, in.ops[0], vsrc(w, in, 1, 0, t)[lane]);
}
void v_writelane_b32(Wave& w, const Inst& in) {
  uint32_t lane = sread(w, in.ops[2]) & 63;
  vdst(w, in, 0)[lane] = sread(w, in.ops[1]);
}
// gfx950: "swap the odd rows of vdst with the even rows of vsrc" (16-lane rows) / the upper
// half of vdst with the lower half of vsrc. All lanes are swapped regardless of EXEC (both
// reference emulators do this; see docs/emulator.md).
void v_permlane16_swap_b32(Wave& w, const Inst& in) {
  uint32_t* d = vdst(w, in, 0);
  uint32_t* s = vdst(w, in, 1);
  for (int pass = 0; pass < 64; pass += 32)
    for (int l = 0; l < 16; ++l) std::swap(d[pass + 16 + l], s[pass + l]);
}
// v_swap_b32 vdst, vsrc (VOP1): per active lane tmp = vdst; vdst = vsrc; vsrc = tmp
// (AMD CDNA3 ISA, VOP1 opcode 81 V_SWAP_B32: "Swap operands", no modifiers; LLVM
// VOP1Instructions.td defines it for GFX9+ with both operands tied as outputs).
void v_swap_b32(Wave& w, const Inst& in) {
  if (in.ops[0].kind != Operand::VGPR || in.ops[1].kind != Operand::VGPR)
    w.fail("unsupported", "v_swap_b32 needs two VGPR operands");
  uint32_t* d = vdst(w, in, 0);
  uint32_t* s = vdst(w, in, 1);
  uint64_t e = w.exec();
  for (int l = 0; l < 64; ++l)
    if ((e >> l) & 1) std::swap(d[l], s[l]);
}

void v_permlane32_swap_b32(Wave& w, const Inst& in) {
  uint32_t* d = vdst(w, in, 0);
  uint32_t* s = vdst(w, in, 1);
  for (int l = 0; l < 32; ++l) std::swap(d[32 + l], s[l]);
}
void v_accvgpr_move(Wave& w, const Inst& in) {  // read / write / mov
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* s = vsrc(w, in, 1, 0, t);
  uint32_t* d = vdst(w, in, 0);
  for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) d[l] = s[l];
}

// ---- packed f32 (VOP3P): each source is a 64-bit pair; op_sel picks the dword feeding the
// low result, op_sel_hi the dword feeding the high result; neg_lo/neg_hi negate. ----
template <int Mode>  // 0 fma, 1 mul, 2 add, 3 mov
void v_pk_f32(Wave& w, const Inst& in) {
  const unsigned n = Mode == 0 ? 3 : Mode == 3 ? 2 : 2;
  uint64_t mask = w.exec();
  uint8_t ophi = in.has_op_sel_hi ? in.op_sel_hi : 0xf;
  const uint32_t* lo[3];
  const uint32_t* hi[3];
  alignas(64) uint32_t tl[3][64], th[3][64];
  for (unsigned i = 0; i < n; ++i) {
    const Operand& o = in.ops[1 + i];
    const uint32_t *d0, *d1;
    uint32_t t0[64], t1[64];
    if (o.kind == Operand::Const) {
      // A 32-bit constant feeds both halves (the constant is not a 64-bit value here).
      for (int l = 0; l < 64; ++l) t0[l] = t1[l] = o.imm;
      d0 = t0; d1 = t1;
    } else {
      d0 = vsrc(w, in, 1 + i, 0, t0);
      d1 = vsrc(w, in, 1 + i, 1, t1);
    }
    const uint32_t* sl = ((in.op_sel >> i) & 1) ? d1 : d0;
    const uint32_t* sh = ((ophi >> i) & 1) ? d1 : d0;
    uint32_t nl = ((in.neg_lo >> i) & 1) ? 0x80000000u : 0, nh = ((in.neg_hi >> i) & 1) ? 0x80000000u : 0;
    bool flush = !w.denorm32;
    for (int l = 0; l < 64; ++l) {
      uint32_t x = sl[l] ^ nl, y = sh[l] ^ nh;
      if (flush) {
        if ((x & 0x7f800000u) == 0) x &= 0x80000000u;
        if ((y & 0x7f800000u) == 0) y &= 0x80000000u;
      }
      tl[i][l] = x;
      th[i][l] = y;
    }
    lo[i] = tl[i];
    hi[i] = th[i];
  }
  uint32_t* d0 = vdst(w, in, 0, 0);
  uint32_t* d1 = vdst(w, in, 0, 1);
  auto op = [&](const uint32_t* const* s, int l) -> uint32_t {
    float a = f32(s[0][l]), b = f32(s[1][l]);
    float r;
    switch (Mode) {
      case 0: r = std::fma(a, b, f32(s[2][l])); break;
      case 1: r = a * b; break;
      case 2: r = a + b; break;
      default: return s[0][l];
    }
    uint32_t rb = quiet(b32(r));
    if (in.flags & F_CLAMP) rb = clamp01(rb);
    if (!w.denorm32 && (rb & 0x7f800000u) == 0) rb &= 0x80000000u;
    return rb;
  };
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint32_t rl = op(lo, l), rh = op(hi, l);
    d0[l] = rl;
    d1[l] = rh;
  }
}

// v_pk_mov_b32 d, s0, s1 op_sel:[a,b]: d.lo = s0.dword[a], d.hi = s1.dword[b].
void v_pk_mov_b32(Wave& w, const Inst& in) {
  uint64_t mask = w.exec();
  uint32_t t0[64], t1[64];
  const uint32_t* lo = vsrc(w, in, 1, in.op_sel & 1, t0);
  const uint32_t* hi = vsrc(w, in, 2, (in.op_sel >> 1) & 1, t1);
  uint32_t* d0 = vdst(w, in, 0, 0);
  uint32_t* d1 = vdst(w, in, 0, 1);
  for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) { d0[l] = lo[l]; d1[l] = hi[l]; }
}
// v_mbcnt_lo/hi: count of set bits of src0 below this lane (lo: lanes 0-31, hi: lanes 32-63) + src1.
template <bool HI>
void v_mbcnt(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 2, false, S, mask);
  alignas(64) uint32_t res[64];
  for (int l = 0; l < 64; ++l) {
    int n = HI ? l - 32 : l;
    uint32_t below = n <= 0 ? 0 : n >= 32 ? 0xffffffffu : ((1u << n) - 1);
    res[l] = __builtin_popcount(S.p[0][l] & below) + S.p[1][l];
  }
  writeback(w, in, 0, res, mask, false);
}

// ---- fp8 / bf8 conversions ----
template <bool BF8>
void v_cvt_f32_f8(Wave& w, const Inst& in) {  // v_cvt_f32_fp8 / bf8: SDWA src0_sel or VOP3 op_sel byte
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 1, false, S, mask);
  // Byte selection is SDWA src0_sel (what LLVM emits on gfx942 and gfx950); llvm-mc rejects
  // op_sel on the VOP3 form, so a nonzero op_sel here is hand-encoded and not modelled.
  if (in.op_sel) w.fail("unsupported", "op_sel on the VOP3 form of this conversion is not modelled");
  unsigned byte = 0;
  auto f = fp8fmt(w);
  alignas(64) uint32_t res[64];
  for (int l = 0; l < 64; ++l) {
    uint8_t v = uint8_t(S.p[0][l] >> (8 * byte));
    res[l] = b32(BF8 ? num::bf8_to_f32(v, f) : num::fp8_to_f32(v, f));
  }
  writeback(w, in, 0, res, mask, false);
}
template <bool BF8>
void v_cvt_pk_f32_f8(Wave& w, const Inst& in) {  // vdst[2] <- two bytes of the selected word
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 1, false, S, mask);
  if (in.op_sel) w.fail("unsupported", "op_sel on the VOP3 form of this conversion is not modelled (use SDWA src0_sel)");
  unsigned word = 0;
  auto f = fp8fmt(w);
  uint32_t* d0 = vdst(w, in, 0, 0);
  uint32_t* d1 = vdst(w, in, 0, 1);
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint32_t v = S.p[0][l] >> (16 * word);
    uint8_t b0 = uint8_t(v), b1 = uint8_t(v >> 8);
    d0[l] = b32(BF8 ? num::bf8_to_f32(b0, f) : num::fp8_to_f32(b0, f));
    d1[l] = b32(BF8 ? num::bf8_to_f32(b1, f) : num::fp8_to_f32(b1, f));
  }
}
// v_cvt_pk_fp8_f32 vdst, src0, src1 [op_sel:[_,_,dst]]: two bytes into word op_sel[dst] of vdst;
// the other word keeps its value (LLVM models vdst as tied).
template <bool BF8>
void v_cvt_pk_f8_f32(Wave& w, const Inst& in) {
  Srcs S;
  uint64_t mask = w.exec();
  fetch(w, in, 1, 2, true, S, mask);
  unsigned word = (in.op_sel >> 2) & 1;
  // Saturation: the VOP3 clamp bit or MODE.FP16_OVFL (docs/emulator-numerics.md).
  bool clamp = (in.flags & F_CLAMP) || w.fp16_ovfl;
  auto f = fp8fmt(w);
  uint32_t* d = vdst(w, in, 0);
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    float a = f32(S.p[0][l]), b = f32(S.p[1][l]);
    uint32_t b0 = BF8 ? num::f32_to_bf8(a, f, clamp) : num::f32_to_fp8(a, f, clamp);
    uint32_t b1 = BF8 ? num::f32_to_bf8(b, f, clamp) : num::f32_to_fp8(b, f, clamp);
    uint32_t h = b0 | (b1 << 8);
    d[l] = word ? (d[l] & 0xffffu) | (h << 16) : (d[l] & 0xffff0000u) | h;
  }
}

void add(const char* name, Handler fn, uint8_t ndst, uint32_t kind = 0, InstClass cls = InstClass::VALU) {
  OpInfo i;
  i.name = name;
  i.fn = fn;
  i.cls = cls;
  i.ndst = ndst;
  i.kind = K_VALU | kind;
  add_op(i);
}

template <int T, bool X>
void add_cmps64(const char* ty) {
  const char* x = X ? "x" : "";
  auto reg = [&](const char* c, Handler h) {
    OpInfo i;
    i.name = fmt::format("v_cmp{}_{}_{}", x, c, ty);
    i.fn = h;
    i.cls = InstClass::VALU;
    i.ndst = 1;
    i.kind = K_VALU | (X ? uint32_t(K_CMPX) : 0u);
    add_op(i);
  };
  reg("f", v_cmp64<C_F, T, X>);
  reg("lt", v_cmp64<C_LT, T, X>);
  reg("eq", v_cmp64<C_EQ, T, X>);
  reg("le", v_cmp64<C_LE, T, X>);
  reg("gt", v_cmp64<C_GT, T, X>);
  reg("ne", v_cmp64<C_NE, T, X>);
  reg("ge", v_cmp64<C_GE, T, X>);
  reg("t", v_cmp64<C_T, T, X>);
}

template <int T, bool X>
void add_cmps(const char* ty) {
  const char* x = X ? "x" : "";
  auto reg = [&](const char* c, Handler h) {
    std::string n = fmt::format("v_cmp{}_{}_{}", x, c, ty);
    OpInfo i;
    i.name = n;
    i.fn = h;
    i.cls = InstClass::VALU;
    i.ndst = 1;
    i.kind = K_VALU | (T == 2 ? uint32_t(K_FLOAT) : 0u) | (X ? uint32_t(K_CMPX) : 0u);
    add_op(i);
  };
  reg("f", v_cmp<C_F, T, X>);
  reg("lt", v_cmp<C_LT, T, X>);
  reg("eq", v_cmp<C_EQ, T, X>);
  reg("le", v_cmp<C_LE, T, X>);
  reg("gt", v_cmp<C_GT, T, X>);
  reg(T == 2 ? "lg" : "ne", v_cmp<C_NE, T, X>);
  reg("ge", v_cmp<C_GE, T, X>);
  reg(T == 2 ? "tru" : "t", v_cmp<C_T, T, X>);
  if (T == 2) {
    reg("o", v_cmp<C_O, T, X>);
    reg("u", v_cmp<C_U, T, X>);
    reg("nge", v_cmp<C_NGE, T, X>);
    reg("nlg", v_cmp<C_NLG, T, X>);
    reg("ngt", v_cmp<C_NGT, T, X>);
    reg("nle", v_cmp<C_NLE, T, X>);
    reg("neq", v_cmp<C_NEQ, T, X>);
    reg("nlt", v_cmp<C_NLT, T, X>);
  }
}

}  // namespace

void register_valu_ops() {
  const uint32_t FL = K_FLOAT, TR = K_TRANS | K_FLOAT;
  add("v_mov_b32", valu<MovB32, 1, false>, 1);
  add("v_add_u32", valu<AddU32, 2, false>, 1);
  add("v_sub_u32", valu<SubU32, 2, false>, 1);
  add("v_add_i32", v_addsub_i32<false>, 1);
  add("v_sub_i32", v_addsub_i32<true>, 1);
  add("v_swap_b32", v_swap_b32, 1, K_SWAP);
  add("v_subrev_u32", valu<SubrevU32, 2, false>, 1);
  add("v_add3_u32", valu<Add3U32, 3, false>, 1);
  add("v_and_b32", valu<AndB32, 2, false>, 1);
  add("v_or_b32", valu<OrB32, 2, false>, 1);
  add("v_xor_b32", valu<XorB32, 2, false>, 1);
  add("v_not_b32", valu<NotB32, 1, false>, 1);
  add("v_or3_b32", valu<Or3B32, 3, false>, 1);
  add("v_and_or_b32", valu<AndOrB32, 3, false>, 1);
  add("v_xad_u32", valu<XadU32, 3, false>, 1);
  add("v_lshlrev_b32", valu<LshlrevB32, 2, false>, 1);
  add("v_lshrrev_b32", valu<LshrrevB32, 2, false>, 1);
  add("v_ashrrev_i32", valu<AshrrevI32, 2, false>, 1);
  add("v_lshl_add_u32", valu<LshlAddU32, 3, false>, 1);
  add("v_add_lshl_u32", valu<AddLshlU32, 3, false>, 1);
  add("v_lshl_or_b32", valu<LshlOrB32, 3, false>, 1);
  add("v_mul_hi_u32", valu<MulHiU32, 2, false>, 1);
  add("v_mul_hi_i32", valu<MulHiI32, 2, false>, 1);
  add("v_mul_lo_u32", valu<MulLoU32, 2, false>, 1);
  add("v_mul_i32_i24", valu<MulI32I24, 2, false>, 1);
  add("v_mul_hi_i32_i24", valu<MulHiI32I24, 2, false>, 1);
  add("v_mul_u32_u24", valu<MulU32U24, 2, false>, 1);
  add("v_mul_hi_u32_u24", valu<MulHiU32U24, 2, false>, 1);
  add("v_mad_u32_u24", valu<MadU32U24, 3, false>, 1);
  add("v_mad_i32_i24", valu<MadI32I24, 3, false>, 1);
  add("v_perm_b32", valu<PermB32, 3, false>, 1);
  add("v_bfe_u32", valu<BfeU32, 3, false>, 1);
  add("v_bfe_i32", valu<BfeI32, 3, false>, 1);
  add("v_bfi_b32", valu<BfiB32, 3, false>, 1);
  add("v_bfm_b32", valu<BfmB32, 2, false>, 1);
  add("v_alignbit_b32", valu<AlignbitB32, 3, false>, 1);
  add("v_alignbyte_b32", valu<AlignbyteB32, 3, false>, 1);
  add("v_min_u32", valu<MinU32, 2, false>, 1);
  add("v_max_u32", valu<MaxU32, 2, false>, 1);
  add("v_min_i32", valu<MinI32, 2, false>, 1);
  add("v_max_i32", valu<MaxI32, 2, false>, 1);
  add("v_bcnt_u32_b32", valu<BcntU32, 2, false>, 1);
  add("v_bfrev_b32", valu<BfrevB32, 1, false>, 1);
  add("v_ffbh_u32", valu<FfbhU32, 1, false>, 1);
  add("v_ffbl_b32", valu<FfblB32, 1, false>, 1);
  add("v_add_f32", valu<AddF32, 2, true>, 1, FL);
  add("v_sub_f32", valu<SubF32, 2, true>, 1, FL);
  add("v_subrev_f32", valu<SubrevF32, 2, true>, 1, FL);
  add("v_mul_f32", valu<MulF32, 2, true>, 1, FL);
  add("v_fma_f32", valu<FmaF32, 3, true>, 1, FL);
  add("v_mac_f32", v_fmac_f32, 1, FL | K_READS_DST);
  add("v_fmac_f32", v_fmac_f32, 1, FL | K_READS_DST);
  add("v_max_f32", valu<MaxF32, 2, true>, 1, FL);
  add("v_min_f32", valu<MinF32, 2, true>, 1, FL);
  add("v_max3_f32", valu<Max3F32, 3, true>, 1, FL);
  add("v_min3_f32", valu<Min3F32, 3, true>, 1, FL);
  add("v_med3_f32", valu<Med3F32, 3, true>, 1, FL);
  add("v_exp_f32", valu<ExpF32, 1, false>, 1, TR);
  add("v_log_f32", valu<LogF32, 1, false>, 1, TR);
  add("v_rcp_f32", valu<RcpF32, 1, false>, 1, TR);
  add("v_rcp_iflag_f32", valu<RcpF32, 1, false>, 1, TR);
  add("v_rsq_f32", valu<RsqF32, 1, false>, 1, TR);
  add("v_sqrt_f32", valu<SqrtF32, 1, false>, 1, TR);
  add("v_cvt_f32_u32", valu<CvtF32U32, 1, false>, 1);
  add("v_cvt_f32_i32", valu<CvtF32I32, 1, false>, 1);
  add("v_cvt_u32_f32", valu<CvtU32F32, 1, true, false>, 1, FL);
  add("v_cvt_i32_f32", valu<CvtI32F32, 1, true, false>, 1, FL);
  add("v_cvt_f32_ubyte0", valu<CvtF32Ubyte0, 1, false>, 1);
  add("v_cvt_f32_ubyte1", valu<CvtF32Ubyte1, 1, false>, 1);
  add("v_cvt_f32_ubyte2", valu<CvtF32Ubyte2, 1, false>, 1);
  add("v_cvt_f32_ubyte3", valu<CvtF32Ubyte3, 1, false>, 1);
  add("v_cvt_f32_f16", valu<CvtF32F16, 1, false>, 1);
  add("v_cvt_f16_f32", valu<CvtF16F32, 1, false>, 1);
  add("v_cvt_f32_bf16", valu<CvtF32Bf16, 1, false>, 1);
  add("v_cvt_pk_bf16_f32", valu<CvtPkBf16F32, 2, false>, 1);
  add("v_cvt_pkrtz_f16_f32", valu<CvtPkrtzF16F32, 2, false>, 1);
  add("v_fract_f32", valu<FractF32, 1, true>, 1, FL);
  add("v_trunc_f32", valu<TruncF32, 1, true>, 1, FL);
  add("v_floor_f32", valu<FloorF32, 1, true>, 1, FL);
  add("v_ceil_f32", valu<CeilF32, 1, true>, 1, FL);
  add("v_rndne_f32", valu<RndneF32, 1, true>, 1, FL);
  add("v_ldexp_f32", valu<LdexpF32, 2, false>, 1);
  add("v_cndmask_b32", v_cndmask_b32, 1);
  add("v_add_co_u32", v_add_co<0>, 2);
  add("v_sub_co_u32", v_add_co<1>, 2);
  add("v_subrev_co_u32", v_add_co<2>, 2);
  add("v_addc_co_u32", v_addc_co<0>, 2);
  add("v_subb_co_u32", v_addc_co<1>, 2);
  add("v_subbrev_co_u32", v_addc_co<2>, 2);
  add("v_mad_u64_u32", v_mad_u64_u32, 2);
  add("v_mov_b64", valu64<0>, 1);
  add("v_lshlrev_b64", valu64<1>, 1);
  add("v_lshrrev_b64", valu64<2>, 1);
  add("v_ashrrev_i64", valu64<3>, 1);
  add("v_lshl_add_u64", valu64<4>, 1);
  add_cmps<0, false>("u32");
  add_cmps<1, false>("i32");
  add_cmps<2, false>("f32");
  add_cmps<0, true>("u32");
  add_cmps<1, true>("i32");
  add_cmps<2, true>("f32");
  add("v_cmp_class_f32", v_cmp_class_f32, 1, FL);
  add_cmps64<0, false>("u64");
  add_cmps64<1, false>("i64");
  add_cmps64<0, true>("u64");
  add_cmps64<1, true>("i64");
  add("v_max3_u32", valu<Max3U32, 3, false>, 1);
  add("v_min3_u32", valu<Min3U32, 3, false>, 1);
  add("v_max3_i32", valu<Max3I32, 3, false>, 1);
  add("v_min3_i32", valu<Min3I32, 3, false>, 1);
  add("v_med3_u32", valu<Med3U32, 3, false>, 1);
  add("v_med3_i32", valu<Med3I32, 3, false>, 1);
  add("v_readlane_b32", v_readlane_b32, 1, K_RWLANE);
  add("v_writelane_b32", v_writelane_b32, 1, K_RWLANE | K_READS_DST);
  add("v_readfirstlane_b32", v_readfirstlane_b32, 1);
  add("v_permlane16_swap_b32", v_permlane16_swap_b32, 1, K_PERMLANE);
  add("v_permlane32_swap_b32", v_permlane32_swap_b32, 1, K_PERMLANE);
  add("v_accvgpr_write_b32", v_accvgpr_move, 1, K_ACCVGPR);
  add("v_accvgpr_write", v_accvgpr_move, 1, K_ACCVGPR);
  add("v_accvgpr_read_b32", v_accvgpr_move, 1, K_ACCVGPR);
  add("v_accvgpr_read", v_accvgpr_move, 1, K_ACCVGPR);
  add("v_accvgpr_mov_b32", v_accvgpr_move, 1, K_ACCVGPR);
  add("v_pk_fma_f32", v_pk_f32<0>, 1, FL);
  add("v_pk_mul_f32", v_pk_f32<1>, 1, FL);
  add("v_pk_add_f32", v_pk_f32<2>, 1, FL);
  add("v_pk_mov_b32", v_pk_mov_b32, 1);
  add("v_mbcnt_lo_u32_b32", v_mbcnt<false>, 1);
  add("v_mbcnt_hi_u32_b32", v_mbcnt<true>, 1);
  add("v_cvt_f32_fp8", v_cvt_f32_f8<false>, 1);
  add("v_cvt_f32_bf8", v_cvt_f32_f8<true>, 1);
  add("v_cvt_pk_f32_fp8", v_cvt_pk_f32_f8<false>, 1);
  add("v_cvt_pk_f32_bf8", v_cvt_pk_f32_f8<true>, 1);
  add("v_cvt_pk_fp8_f32", v_cvt_pk_f8_f32<false>, 1, K_DST_OPSEL | K_READS_DST);
  add("v_cvt_pk_bf8_f32", v_cvt_pk_f8_f32<true>, 1, K_DST_OPSEL | K_READS_DST);
}

}  // namespace mla::emu
