// Expected values that touched hardware (docs/emulator.md, "Golden cases: hardware anchoring"):
// each case names the hardware-run test or shipped lowering the values come from. They check the
// decisions taken where the golden references (rocjitsu, tinygrad's emulator) disagree or are
// believed wrong.
#include <catch2/catch.hpp>

#include "sem_harness.h"

using namespace emutest;
using mla::emu::Gfx;

TEST_CASE("hw-anchored: v_cvt_pk_fp8/bf8_f32 keep D[31:16] and do not saturate (tinygrad gfx950 hardware tests)",
          "[semantics][hw-anchored]") {
  // tinygrad test/amd/hw/test_cdna_vop3.py, test_cvt_pk_fp8_f32_preserves_upper_half and
  // test_cvt_pk_bf8_f32_overflow_and_inf: run on gfx950 and compared with the hardware (USE_HW=1).
  // The golden cvt_pk_*_word0 outputs (rocjitsu) clear D[31:16]: wrong on hardware.
  std::vector<uint32_t> in(256, 0);
  WaveRun r = run_wave(Gfx::gfx950, "hw_cvt_pk", R"(
  s_mov_b32 s10, 0xdeadbeef
  v_mov_b32 v14, 1.0
  v_mov_b32 v15, 2.0
  v_mov_b32 v16, 0x47700000
  v_mov_b32 v17, 0x7f800000
  v_mov_b32 v18, 0xff800000
  v_mov_b32 v20, s10
  v_mov_b32 v21, s10
  v_mov_b32 v22, s10
  v_mov_b32 v23, s10
  v_cvt_pk_fp8_f32 v20, v14, v15
  v_cvt_pk_bf8_f32 v21, v16, v14
  v_cvt_pk_bf8_f32 v22, v17, v14
  v_cvt_pk_bf8_f32 v23, v18, v14)",
                       in);
  for (int lane : {0, 17, 63}) {
    INFO("lane " << lane);
    CHECK(r.at(lane, 0) == 0xdead4038u);  // 1.0 -> 0x38, 2.0 -> 0x40 (e4m3fn), high half kept
    CHECK(r.at(lane, 1) == 0xdead3c7cu);  // 61440 overflows e5m2 to +inf (0x7c), not to max
    CHECK(r.at(lane, 2) == 0xdead3c7cu);  // +inf -> +inf
    CHECK(r.at(lane, 3) == 0xdead3cfcu);  // -inf -> -inf
  }
}

TEST_CASE("hw-anchored: a packed-f32 SGPR-pair operand feeds lo from s[n] and hi from s[n+1] (LLVM packed-fp32.ll)",
          "[semantics][hw-anchored]") {
  // llvm/test/CodeGen/AMDGPU/packed-fp32.ll, fadd_v2_vs: `fadd <2 x float> %load, %x` with the
  // kernarg %x in s[2:3] is selected as `v_pk_add_f32 v[0:1], v[0:1], s[2:3]` (default op_sel_hi),
  // so x.hi comes from s3. The golden pk_mul_f32_sgpr_* rocjitsu output (s20 in both halves) is
  // wrong in the high half.
  std::vector<uint32_t> in(256, 0);
  for (int l = 0; l < 64; ++l) in[l * 4 + 0] = fbits(1.5f + l), in[l * 4 + 1] = fbits(-2.25f - l);
  for (Gfx gfx : {Gfx::gfx942, Gfx::gfx950}) {
    WaveRun r = run_wave(gfx, "hw_pk_sgpr", R"(
  s_mov_b32 s20, 0x40400000
  s_mov_b32 s21, 0x40a00000
  v_pk_add_f32 v[20:21], v[10:11], s[20:21]
  v_pk_mul_f32 v[22:23], v[10:11], s[20:21]
  v_pk_mul_f32 v[24:25], v[10:11], s[20:21] op_sel_hi:[1,0])",
                         in);
    for (int lane : {0, 33, 63}) {
      INFO(mla::emu::gfx_name(gfx) << " lane " << lane);
      float lo = 1.5f + lane, hi = -2.25f - lane;
      CHECK(r.f(lane, 0) == lo + 3.0f);
      CHECK(r.f(lane, 1) == hi + 5.0f);
      CHECK(r.f(lane, 2) == lo * 3.0f);
      CHECK(r.f(lane, 3) == hi * 5.0f);
      CHECK(r.f(lane, 4) == lo * 3.0f);
      CHECK(r.f(lane, 5) == hi * 3.0f);  // op_sel_hi:[1,0]: the high lane reads s20
    }
  }
}

TEST_CASE("hw-anchored: permlane32_swap then permlane16_swap reduce over lanes l^16, l^32, l^48 (Triton gfx950 warpReduce)",
          "[semantics][hw-anchored]") {
  // triton-lang/triton third_party/amd/lib/TritonAMDGPUToLLVM/TargetInfo.cpp,
  // warpReduceSwap16or32: on CDNA4 a reduction over lane bits 4 and 5 is permlane32_swap(acc,
  // acc) + combine, then permlane16_swap + combine, and every lane uses the result (Triton's
  // reductions run on MI350 in its GPU tests). That needs permlane16_swap to swap rows 1<->0
  // and 3<->2; the golden rocjitsu outputs swap only rows 1<->0 (lanes 32-63 would be wrong).
  std::vector<uint32_t> in(256, 0);
  WaveRun r = run_wave(Gfx::gfx950, "hw_permlane_reduce", R"(
  v_mov_b32 v20, v0
  v_mov_b32 v21, v0
  s_nop 4
  v_permlane32_swap_b32 v20, v21
  s_nop 4
  v_max_u32 v22, v20, v21
  v_mov_b32 v23, v22
  s_nop 4
  v_permlane16_swap_b32 v22, v23
  s_nop 4
  v_max_u32 v24, v22, v23)",
                       in);
  for (int lane = 0; lane < 64; ++lane) {
    INFO("lane " << lane);
    CHECK(r.at(lane, 4) == uint32_t(48 + (lane & 15)));
  }
}

namespace {

// OCP e4m3fn code of a small positive integer (1..15 are exact: 4 significant bits).
uint8_t e4m3_int(int n) {
  int e = 0;
  while ((2 << e) <= n) ++e;
  int m = (n - (1 << e)) * 8 / (1 << e);
  return uint8_t(((e + 7) << 3) | m);
}

}  // namespace

TEST_CASE("hw-anchored: v_mfma_f32_16x16x128_f8f6f4 rows, columns, slot pairing and D layout (rocRoller gfx950 GEMM layout)",
          "[semantics][hw-anchored]") {
  // ROCm/rocRoller lib/source/KernelGraph/Transformations/LowerTile.cpp,
  // addLoadWaveTileViaNonContiguousVGPRBlocksCT (used for 8-bit 16x16x128 / 32x32x64 tiles,
  // isTileOfSubDwordTypeWithNonContiguousVGPRBlocks): wave64, 8-bit -> 2 VGPR blocks of 16
  // elements; row of A (col of B) = l % 16, k = 64 * (p / 16) + 16 * (l / 16) + p % 16 for byte p
  // of the lane's 8 VGPRs, the same function for A and B. rocRoller's
  // GPU_MatrixMultiplyMacroTileF8F6F4 (gfx950) runs GEMMs on that layout against a CPU
  // reference, which pins what this test checks: the row/column of each lane, that A and B are
  // multiplied slot by slot (same lane group, same byte), and D[4 (l / 16) + r][l % 16] in lane l,
  // register r. The K labelling itself is not observable without scales (permuting K the same way
  // in A and B leaves D unchanged). A is one-hot: A[i][k_i] = 1, so D[i][j] = B[k_i][j].
  auto bval = [](int k, int j) { return (k * 5 + j) % 13 + 1; };
  for (int shift : {0, 3, 7}) {
    auto k_of_row = [&](int i) { return (8 * i + shift) % 128; };
    std::vector<uint32_t> ab(64 * 16, 0);  // per lane: 8 dwords of A, then 8 of B
    for (int l = 0; l < 64; ++l)
      for (int p = 0; p < 32; ++p) {
        int k = 64 * (p / 16) + 16 * (l / 16) + p % 16;
        uint8_t a = k == k_of_row(l % 16) ? e4m3_int(1) : 0;
        uint8_t b = e4m3_int(bval(k, l % 16));
        ab[l * 16 + p / 4] |= uint32_t(a) << (8 * (p % 4));
        ab[l * 16 + 8 + p / 4] |= uint32_t(b) << (8 * (p % 4));
      }
    WaveRun r = run_wave(Gfx::gfx950, "hw_mfma_f8f6f4_k", R"(
  v_lshlrev_b32 v3, 6, v0
  global_load_dwordx4 v[30:33], v3, s[8:9]
  global_load_dwordx4 v[34:37], v3, s[8:9] offset:16
  global_load_dwordx4 v[38:41], v3, s[8:9] offset:32
  global_load_dwordx4 v[42:45], v3, s[8:9] offset:48
  s_waitcnt vmcnt(0)
  v_mfma_f32_16x16x128_f8f6f4 v[20:23], v[30:37], v[38:45], 0)",
                         std::vector<uint32_t>(256, 0), ab);
    int bad = 0;
    for (int l = 0; l < 64; ++l)
      for (int reg = 0; reg < 4; ++reg) {
        int i = 4 * (l / 16) + reg, j = l % 16;
        if (r.f(l, reg) != float(bval(k_of_row(i), j))) ++bad;
      }
    INFO("shift " << shift);
    CHECK(bad == 0);
  }
}
