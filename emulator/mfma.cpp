// MFMA semantics for a wave64. See mfma.h and docs/emulator-numerics.md.
//
// Operand layout (single-block MFMAs, the only ones modelled): the 64 lanes are G = 64/dim groups
// of `dim` lanes (dim = M for A, N for B); lane l holds row/column i = l % dim of group
// g = l / dim, and E = K / G consecutive elements of K per lane, packed low bits first:
//   E <= 16: element p of lane l is k = g*E + p.
//   E  > 16 (8-bit inputs of the gfx950 K=128/K=64 shapes): K is split in 16-element chunks
//            dealt round-robin to the groups: k = 16*(g + G*(p/16)) + p%16.
// D/C: lane l, register r holds D[i][j] with j = l % N and
//   i = 4*mr*(r/4) + 4*(l/N) + r%4,  mr = 64/N  (16x16: i = 4(l/16)+r; 32x32: 8(r/4)+4(l/32)+r%4).
// Sources: AMD rocjitsu mma/layout.h (input_loc, output_loc_32), ROCm matrix instruction
// calculator, LLVM AMDGPU MFMA tests; checked against the golden vectors.
#include "emulator/mfma.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "emulator/numerics.h"

namespace mla::emu {

namespace {

using E = MfmaElem;

struct Entry {
  MfmaInfo info;
  bool on942, on950;
};

constexpr uint64_t macs(int m, int n, int k) { return uint64_t(m) * n * k; }

// Pass counts: LLVM SISchedule.td (SIDPGFX940FullSpeedModel: 16x16x{16,32} = 4 passes,
// 32x32x{8,16} = 8 passes), and for gfx950 the wait states llc-22 inserts after each MFMA
// (16x16x32 bf16/f16 and 16x16x64 i8 = 4, 32x32 = 8; f8f6f4 with an 8-bit operand: 16x16x128 = 8,
// 32x32x64 = 16; with only fp6/fp4 operands half of that).
#define MFMA(name, m, n, k, ar, br, cr, passes, ae, be, scaled, intacc, on942, on950) \
  Entry{MfmaInfo{name, m, n, k, 1, ar, br, cr, passes, true, macs(m, n, k), ae, be, scaled, intacc}, \
        on942, on950}

const Entry kTable[] = {
    // fp8/bf8, both targets (FNUZ formats on gfx942, OCP on gfx950).
    MFMA("v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, 2, 2, 4, 4, E::fp8, E::fp8, false, false, true, true),
    MFMA("v_mfma_f32_16x16x32_fp8_bf8", 16, 16, 32, 2, 2, 4, 4, E::fp8, E::bf8, false, false, true, true),
    MFMA("v_mfma_f32_16x16x32_bf8_fp8", 16, 16, 32, 2, 2, 4, 4, E::bf8, E::fp8, false, false, true, true),
    MFMA("v_mfma_f32_16x16x32_bf8_bf8", 16, 16, 32, 2, 2, 4, 4, E::bf8, E::bf8, false, false, true, true),
    MFMA("v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, 2, 2, 16, 8, E::fp8, E::fp8, false, false, true, true),
    MFMA("v_mfma_f32_32x32x16_fp8_bf8", 32, 32, 16, 2, 2, 16, 8, E::fp8, E::bf8, false, false, true, true),
    MFMA("v_mfma_f32_32x32x16_bf8_fp8", 32, 32, 16, 2, 2, 16, 8, E::bf8, E::fp8, false, false, true, true),
    MFMA("v_mfma_f32_32x32x16_bf8_bf8", 32, 32, 16, 2, 2, 16, 8, E::bf8, E::bf8, false, false, true, true),
    // bf16 / f16 / i8, both targets.
    MFMA("v_mfma_f32_16x16x16_bf16", 16, 16, 16, 2, 2, 4, 4, E::bf16, E::bf16, false, false, true, true),
    MFMA("v_mfma_f32_32x32x8_bf16", 32, 32, 8, 2, 2, 16, 8, E::bf16, E::bf16, false, false, true, true),
    MFMA("v_mfma_f32_16x16x16_f16", 16, 16, 16, 2, 2, 4, 4, E::f16, E::f16, false, false, true, true),
    MFMA("v_mfma_f32_32x32x8_f16", 32, 32, 8, 2, 2, 16, 8, E::f16, E::f16, false, false, true, true),
    MFMA("v_mfma_i32_16x16x32_i8", 16, 16, 32, 2, 2, 4, 4, E::i8, E::i8, false, true, true, true),
    MFMA("v_mfma_i32_32x32x16_i8", 32, 32, 16, 2, 2, 16, 8, E::i8, E::i8, false, true, true, true),
    // gfx950 only.
    MFMA("v_mfma_f32_16x16x32_bf16", 16, 16, 32, 4, 4, 4, 4, E::bf16, E::bf16, false, false, false, true),
    MFMA("v_mfma_f32_32x32x16_bf16", 32, 32, 16, 4, 4, 16, 8, E::bf16, E::bf16, false, false, false, true),
    MFMA("v_mfma_f32_16x16x32_f16", 16, 16, 32, 4, 4, 4, 4, E::f16, E::f16, false, false, false, true),
    MFMA("v_mfma_f32_32x32x16_f16", 32, 32, 16, 4, 4, 16, 8, E::f16, E::f16, false, false, false, true),
    MFMA("v_mfma_i32_16x16x64_i8", 16, 16, 64, 4, 4, 4, 4, E::i8, E::i8, false, true, false, true),
    MFMA("v_mfma_i32_32x32x32_i8", 32, 32, 32, 4, 4, 16, 8, E::i8, E::i8, false, true, false, true),
    MFMA("v_mfma_f32_16x16x128_f8f6f4", 16, 16, 128, 8, 8, 4, 8, E::f8f6f4, E::f8f6f4, false, false, false, true),
    MFMA("v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64, 8, 8, 16, 16, E::f8f6f4, E::f8f6f4, false, false, false, true),
    MFMA("v_mfma_scale_f32_16x16x128_f8f6f4", 16, 16, 128, 8, 8, 4, 8, E::f8f6f4, E::f8f6f4, true, false, false, true),
    MFMA("v_mfma_scale_f32_32x32x64_f8f6f4", 32, 32, 64, 8, 8, 16, 16, E::f8f6f4, E::f8f6f4, true, false, false, true),
};

#undef MFMA

std::vector<MfmaInfo> make_infos() {
  std::vector<MfmaInfo> v;
  for (const Entry& e : kTable) v.push_back(e.info);
  return v;
}

const Entry* entry_of(const MfmaInfo& info) {
  for (const Entry& e : kTable)
    if (e.info.name == info.name) return &e;
  return nullptr;
}

int elem_bits(E e) {
  switch (e) {
    case E::bf16:
    case E::f16: return 16;
    default: return 8;
  }
}

// K index of element slot p of lane `lane` in an A (dim = M) or B (dim = N) operand.
struct OperandPos {
  int row;  // i for A, j for B
  int k;
};
OperandPos operand_pos(int dim, int K, int lane, int p) {
  const int groups = 64 / dim;
  const int per_lane = K / groups;
  const int g = lane / dim;
  if (per_lane > 16) return {lane % dim, 16 * (g + groups * (p / 16)) + p % 16};
  return {lane % dim, g * per_lane + p};
}

uint32_t raw_elem(const uint32_t* regs, int nregs, int lane, int p, int bits) {
  const int bit = p * bits;
  const uint32_t word = regs[lane * nregs + bit / 32];
  const uint32_t mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
  return (word >> (bit % 32)) & mask;
}

// f8f6f4 format field -> element type; only the 8-bit formats are modelled.
E f8f6f4_elem(const MfmaInfo& info, const char* field, int value) {
  if (value == 0) return E::fp8;
  if (value == 1) return E::bf8;
  static const char* const kNames[] = {"fp8", "bf8", "fp6 e2m3", "fp6 e3m2", "fp4 e2m1"};
  const char* what = value >= 0 && value <= 4 ? kNames[value] : "invalid";
  throw std::runtime_error(fmt::format(
      "{}: {}:{} selects the {} format, which the emulator does not support (only fp8 = 0 and "
      "bf8 = 1)",
      info.name, field, value, what));
}

// 8-bit float decode tables (every code, both families), built once: decoding through the
// generic numerics functions for each of the thousands of elements per MFMA is measurably slow.
struct Byte8Tables {
  double v[2][2][256];  // [family: 0 FNUZ, 1 OCP][0 fp8, 1 bf8][code]
  Byte8Tables() {
    for (int f = 0; f < 2; ++f)
      for (int code = 0; code < 256; ++code) {
        const auto fam = f ? num::Fp8Fmt::OCP : num::Fp8Fmt::FNUZ;
        v[f][0][code] = num::fp8_to_f32(static_cast<uint8_t>(code), fam);
        v[f][1][code] = num::bf8_to_f32(static_cast<uint8_t>(code), fam);
      }
  }
};
// Namespace scope (not a function-local static) so that lookups need no initialisation guard.
// Its constructor only calls pure functions, so initialisation order does not matter.
const Byte8Tables kByte8;

inline double decode_float(E e, uint32_t raw, num::Fp8Fmt family) {
  const int f = family == num::Fp8Fmt::OCP ? 1 : 0;
  switch (e) {
    case E::fp8: return kByte8.v[f][0][raw & 0xff];
    case E::bf8: return kByte8.v[f][1][raw & 0xff];
    case E::bf16: return num::bf16_to_f32(static_cast<uint16_t>(raw));
    case E::f16: return num::f16_to_f32(static_cast<uint16_t>(raw));
    default: break;
  }
  throw std::logic_error("decode_float: not a float element type");
}

void check_zero(const MfmaInfo& info, const char* field, int value, const char* why) {
  if (value != 0)
    throw std::runtime_error(
        fmt::format("{}: modifier {}:{} is not supported by the emulator ({})", info.name, field,
                    value, why));
}

}  // namespace

std::span<const MfmaInfo> all_mfmas() {
  static const std::vector<MfmaInfo> infos = make_infos();
  return infos;
}

bool mfma_on_target(const MfmaInfo& info, Gfx target) {
  const Entry* e = entry_of(info);
  if (!e) return false;
  return target == Gfx::gfx942 ? e->on942 : e->on950;
}

const MfmaInfo* find_mfma(std::string_view mnemonic, Gfx target) {
  for (const MfmaInfo& info : all_mfmas())
    if (info.name == mnemonic) return mfma_on_target(info, target) ? &info : nullptr;
  return nullptr;
}

int mfma_passes(const MfmaInfo& info, const MfmaMods& mods) {
  if (info.a_elem != E::f8f6f4) return info.passes;
  const bool a8 = mods.cbsz <= 1, b8 = mods.blgp <= 1;
  return (a8 || b8) ? info.passes : info.passes / 2;
}

void run_mfma(const MfmaInfo& info, Gfx target, const MfmaMods& mods, const uint32_t* a,
              const uint32_t* b, const uint32_t* c, uint32_t* d, const uint32_t* scale_a,
              const uint32_t* scale_b) {
  if (!mfma_on_target(info, target))
    throw std::runtime_error(
        fmt::format("{} does not exist on {}", info.name, gfx_name(target)));
  if (info.blocks != 1)
    throw std::logic_error(fmt::format("{}: multi-block MFMAs are not modelled", info.name));

  const bool f8f6f4 = info.a_elem == E::f8f6f4;
  E a_elem = info.a_elem, b_elem = info.b_elem;
  // Broadcast controls (CBSZ/ABID/BLGP) only matter for multi-block MFMAs, which are not
  // modelled; on f8f6f4 CBSZ/BLGP are the format selectors instead.
  check_zero(info, "abid", mods.abid, "ABID broadcast is not modelled");
  if (f8f6f4) {
    a_elem = f8f6f4_elem(info, "cbsz", mods.cbsz);
    b_elem = f8f6f4_elem(info, "blgp", mods.blgp);
  } else {
    check_zero(info, "cbsz", mods.cbsz, "CBSZ broadcast is not modelled");
    check_zero(info, "blgp", mods.blgp, "BLGP lane patterns are not modelled");
  }
  if (!info.scaled) {
    check_zero(info, "op_sel", mods.op_sel, "op_sel only selects scale bytes of v_mfma_scale");
    check_zero(info, "op_sel_hi", mods.op_sel_hi,
               "op_sel_hi only selects scale bytes of v_mfma_scale");
  } else if (!scale_a || !scale_b) {
    throw std::runtime_error(fmt::format("{}: scale operands missing", info.name));
  }

  const int M = info.m, N = info.n, K = info.k;
  // fp8/bf8 family of the target: CDNA3 uses the FNUZ encodings, CDNA4 the OCP ones.
  const num::Fp8Fmt family = target == Gfx::gfx942 ? num::Fp8Fmt::FNUZ : num::Fp8Fmt::OCP;
  const int a_bits = elem_bits(a_elem), b_bits = elem_bits(b_elem);
  const int a_per_lane = info.a_regs * 32 / a_bits;
  const int b_per_lane = info.b_regs * 32 / b_bits;
  const int mr = 64 / N;  // rows of D per register group

  auto out_pos = [&](int lane, int r, int& i, int& j) {
    j = lane % N;
    i = 4 * mr * (r / 4) + 4 * (lane / N) + r % 4;
  };

  if (info.int_acc) {
    // i8 x i8 products summed exactly in 64 bits; the i32 accumulator wraps (no saturation).
    std::vector<int64_t> A(size_t(M) * K), B(size_t(K) * N);
    for (int lane = 0; lane < 64; ++lane) {
      for (int p = 0; p < a_per_lane; ++p) {
        const OperandPos pos = operand_pos(M, K, lane, p);
        A[size_t(pos.row) * K + pos.k] = static_cast<int8_t>(raw_elem(a, info.a_regs, lane, p, 8));
      }
      for (int p = 0; p < b_per_lane; ++p) {
        const OperandPos pos = operand_pos(N, K, lane, p);
        B[size_t(pos.k) * N + pos.row] = static_cast<int8_t>(raw_elem(b, info.b_regs, lane, p, 8));
      }
    }
    std::vector<uint32_t> out(size_t(64) * info.cd_regs);
    for (int lane = 0; lane < 64; ++lane)
      for (int r = 0; r < info.cd_regs; ++r) {
        int i, j;
        out_pos(lane, r, i, j);
        int64_t acc = static_cast<int32_t>(c[lane * info.cd_regs + r]);
        for (int k = 0; k < K; ++k) acc += A[size_t(i) * K + k] * B[size_t(k) * N + j];
        out[lane * info.cd_regs + r] = static_cast<uint32_t>(acc);
      }
    std::memcpy(d, out.data(), out.size() * sizeof(uint32_t));
    return;
  }

  // Scales (v_mfma_scale): one E8M0 byte per lane; the scale of row i (column j) for K-block
  // kb = k/32 is in lane i + M*kb (j + N*kb), byte op_sel[x] | op_sel_hi[x] << 1.
  const int a_byte = (mods.op_sel & 1) | ((mods.op_sel_hi & 1) << 1);
  const int b_byte = ((mods.op_sel >> 1) & 1) | (((mods.op_sel_hi >> 1) & 1) << 1);
  auto scale_of = [&](const uint32_t* s, int lane, int byte) {
    return num::e8m0_to_f64(static_cast<uint8_t>(s[lane] >> (8 * byte)));
  };

  // Every input value (fp8/bf8/bf16/f16, subnormals included) and every product is exact in
  // double; the sum is taken in double and rounded to f32 once. The hardware accumulates in f32
  // in an unspecified order, which the golden tolerance allows for.
  // A is stored [M][K] and B transposed, [N][K], so that each dot product reads contiguously.
  static thread_local std::vector<double> A, Bt;
  A.assign(size_t(M) * K, 0.0);
  Bt.assign(size_t(N) * K, 0.0);
  for (int lane = 0; lane < 64; ++lane) {
    for (int p = 0; p < a_per_lane; ++p) {
      const OperandPos pos = operand_pos(M, K, lane, p);
      double v = decode_float(a_elem, raw_elem(a, info.a_regs, lane, p, a_bits), family);
      if (info.scaled) v *= scale_of(scale_a, pos.row + M * (pos.k / 32), a_byte);
      A[size_t(pos.row) * K + pos.k] = v;
    }
    for (int p = 0; p < b_per_lane; ++p) {
      const OperandPos pos = operand_pos(N, K, lane, p);
      double v = decode_float(b_elem, raw_elem(b, info.b_regs, lane, p, b_bits), family);
      if (info.scaled) v *= scale_of(scale_b, pos.row + N * (pos.k / 32), b_byte);
      Bt[size_t(pos.row) * K + pos.k] = v;
    }
  }
  // Results go to a scratch buffer first because d may alias c.
  static thread_local std::vector<uint32_t> out;
  out.assign(size_t(64) * info.cd_regs, 0);
  for (int lane = 0; lane < 64; ++lane)
    for (int r = 0; r < info.cd_regs; ++r) {
      int i, j;
      out_pos(lane, r, i, j);
      const double* arow = &A[size_t(i) * K];
      const double* bcol = &Bt[size_t(j) * K];
      // Four partial sums break the floating-point add dependency chain (4x faster); the order
      // of a double-precision sum of exact products does not matter at f32 output precision.
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      for (int k = 0; k < K; k += 4) {  // K is a multiple of 4 for every MFMA
        s0 += arow[k] * bcol[k];
        s1 += arow[k + 1] * bcol[k + 1];
        s2 += arow[k + 2] * bcol[k + 2];
        s3 += arow[k + 3] * bcol[k + 3];
      }
      double sum = (s0 + s1) + (s2 + s3);
      sum += static_cast<double>(num::bits_f32(c[lane * info.cd_regs + r]));
      const float f = static_cast<float>(sum);  // overflow rounds to +-inf
      out[lane * info.cd_regs + r] = std::isnan(f) ? 0x7fc00000u : num::f32_bits(f);
    }
  std::memcpy(d, out.data(), out.size() * sizeof(uint32_t));
}

}  // namespace mla::emu
