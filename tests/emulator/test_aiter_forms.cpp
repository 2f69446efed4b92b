// Instruction forms that aiter's MLA code objects execute and the emulator lacked: DPP
// row_newbcast, v_swap_b32, VOP3 v_add_i32 / v_sub_i32. Expected values are computed here from
// the ISA text, independently of the emulator's code.
#include <catch2/catch.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "sem_harness.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const Gfx kTargets[] = {Gfx::gfx942, Gfx::gfx950};
// An OpenCL C kernel compiled by clang-22 with -cl-denorms-are-zero (.amdhsa_float_denorm_mode_32
// 0), whose assembly must hold each of `expect` (the lowering under test), assembled for `g`.
std::shared_ptr<const mla::emu::CodeObject> compile_daz(const char* src, Gfx g, const std::string& stem,
                                                        std::initializer_list<const char*> expect) {
  const std::string name = stem + "_daz_" + std::string(gfx_name(g));
  const std::string s = compile_cl_asm(src, g, name, "-cl-denorms-are-zero");
  REQUIRE(s.find(".amdhsa_float_denorm_mode_32 0") != std::string::npos);
  for (const char* e : expect) {
    INFO("expected in the assembly: " << e);
    REQUIRE(s.find(e) != std::string::npos);
  }
  return assemble(s, g, name);
}

// fn(g, dm, opts) on every target in both f32 denormal modes (.amdhsa_float_denorm_mode_32 0:
// flushed, 3: kept), opts carrying the mode.
template <class F>
void for_targets_and_denorm_modes(F&& fn) {
  for (Gfx g : kTargets)
    for (int dm : {0, 3}) {
      INFO(gfx_name(g) << " float_denorm_mode_32 " << dm);
      KernelOpts o;
      o.denorm32 = dm;
      fn(g, dm, o);
    }
}

}  // namespace

// row_newbcast:N = dpp_ctrl 0x150 + N (LLVM SIDefines.h DppCtrl ROW_NEWBCAST_FIRST/LAST,
// AMDGPUAsmGFX90a.rst "Broadcast a thread within a row to the whole row"): lane L reads lane
// 16*(L/16) + N. As for every DPP control, a disabled source lane disables the write unless
// bound_ctrl is set (then the source reads 0), and row_mask/bank_mask disable writes.
TEST_CASE("semantics: DPP row_newbcast (gfx90a+)", "[semantics][aiter]") {
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    std::vector<uint32_t> in(256);
    for (int l = 0; l < 64; ++l) {
      in[l * 4] = 1000 + l;
      in[l * 4 + 1] = 3 + l;
      in[l * 4 + 2] = fbits(0.5f * l);
      in[l * 4 + 3] = fbits(2.0f + l);
    }
    std::string body = R"(
  s_nop 1
  v_mov_b32_dpp v20, v10 row_newbcast:0 row_mask:0xf bank_mask:0xf
  v_mul_u32_u24_dpp v21, v10, v11 row_newbcast:5 row_mask:0xf bank_mask:0xf
  v_add_u32_dpp v22, v10, v11 row_newbcast:15 row_mask:0xf bank_mask:0xf
  v_mul_f32_dpp v23, v12, v13 row_newbcast:3 row_mask:0xf bank_mask:0xf
  v_mov_b32 v24, 7
  v_mov_b32 v25, 5
  v_mov_b32 v26, 6
  s_nop 1
  v_mov_b32_dpp v24, v10 row_newbcast:9 row_mask:0xa bank_mask:0xf
  s_mov_b32 exec_lo, 0xfffbfffb
  s_mov_b32 exec_hi, 0xfffbfffb
  s_nop 4
  v_mov_b32_dpp v25, v10 row_newbcast:2 row_mask:0xf bank_mask:0xf
  v_mov_b32_dpp v26, v10 row_newbcast:2 row_mask:0xf bank_mask:0xf bound_ctrl:1
  s_mov_b64 exec, -1
)";
    auto r = run_wave(g, "newbcast", body, in);
    for (int l = 0; l < 64; ++l) {
      int row = l / 16;
      auto src = [&](int n, int k) { return in[(row * 16 + n) * 4 + k]; };
      CHECK(r.at(l, 0) == src(0, 0));
      CHECK(r.at(l, 1) == (src(5, 0) & 0xffffff) * (in[l * 4 + 1] & 0xffffff));
      CHECK(r.at(l, 2) == src(15, 0) + in[l * 4 + 1]);
      float a, b;
      uint32_t ab = src(3, 2), bb = in[l * 4 + 3];
      std::memcpy(&a, &ab, 4);
      std::memcpy(&b, &bb, 4);
      CHECK(r.at(l, 3) == fbits(a * b));
      CHECK(r.at(l, 4) == ((0xa >> row) & 1 ? src(9, 0) : 7u));
      // Lane 2 of every row is off: it keeps its value, and every other lane reads a disabled
      // source: no write without bound_ctrl, 0 with it.
      CHECK(r.at(l, 5) == 5u);
      CHECK(r.at(l, 6) == ((l & 15) == 2 ? 6u : 0u));
    }
  }
}

// V_SWAP_B32 (CDNA3 ISA, VOP1 opcode 81): "Swap operands": tmp = D; D = S0; S0 = tmp, in each
// active lane; inactive lanes keep both registers.
TEST_CASE("semantics: v_swap_b32", "[semantics][aiter]") {
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    auto in = ramp_inputs(7);
    std::string body = R"(
  v_mov_b32 v20, v10
  v_mov_b32 v21, v11
  s_mov_b32 exec_lo, 0x0000ffff
  s_mov_b32 exec_hi, 0x00ff00ff
  v_swap_b32 v20, v21
  s_mov_b64 exec, -1
  v_mov_b32 v22, v20
  v_swap_b32 v22, v22
)";
    auto r = run_wave(g, "vswap", body, in);
    const uint64_t exec = 0x00ff00ff0000ffffull;
    for (int l = 0; l < 64; ++l) {
      bool on = (exec >> l) & 1;
      uint32_t a = in[l * 4], b = in[l * 4 + 1];
      CHECK(r.at(l, 0) == (on ? b : a));
      CHECK(r.at(l, 1) == (on ? a : b));
      CHECK(r.at(l, 2) == r.at(l, 0));  // swapping a register with itself leaves it
    }
  }
}

// V_ADD_I32 / V_SUB_I32 (gfx9 VOP3-only, opcodes 0x29c / 0x29d): D.i = S0.i +/- S1.i; without
// clamp the 32-bit result wraps, with clamp it saturates to [INT32_MIN, INT32_MAX] (AMD Vega /
// CDNA3 ISA: "Supports saturation (signed 32-bit integer domain)").
TEST_CASE("semantics: VOP3 v_add_i32 / v_sub_i32", "[semantics][aiter]") {
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    auto in = ramp_inputs(11);
    std::string body = R"(
  s_mov_b32 s20, 0x7fffff00
  v_add_i32 v20, s20, v10
  v_add_i32 v21, v10, v11 clamp
  v_sub_i32 v22, v10, v11
  v_sub_i32 v23, v10, v11 clamp
)";
    auto r = run_wave(g, "addi32", body, in);
    int saturated = 0;
    for (int l = 0; l < 64; ++l) {
      int64_t a = int32_t(in[l * 4]), b = int32_t(in[l * 4 + 1]);
      CHECK(r.at(l, 0) == uint32_t(0x7fffff00u + uint32_t(a)));
      int64_t s = a + b, d = a - b;
      CHECK(r.at(l, 1) == uint32_t(int32_t(std::clamp<int64_t>(s, INT32_MIN, INT32_MAX))));
      CHECK(r.at(l, 2) == uint32_t(a) - uint32_t(b));
      CHECK(r.at(l, 3) == uint32_t(int32_t(std::clamp<int64_t>(d, INT32_MIN, INT32_MAX))));
      saturated += s != int32_t(s);
    }
    CHECK(saturated > 0);  // the inputs exercise saturation
  }
}

// accum_offset only places the AGPRs in the unified register file: a kernel without AGPRs may use
// VGPR indices up to its whole allocation (LLVM commit 9bbd96fd lets such kernels allocate the
// whole file to VGPRs; two of aiter's gfx950 prefill kernels use v128..v255 with accum_offset
// 128 and no AGPRs). A VGPR that aliases an AGPR the kernel also uses is refused.
TEST_CASE("loader: VGPRs beyond accum_offset without AGPRs / aliasing refused", "[semantics][aiter]") {
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    KernelOpts o;
    o.vgprs = 128;
    o.agprs = 128;
    auto in = ramp_inputs(5);
    auto r = run_wave(g, "vbeyond", "  v_add_u32 v200, 1, v10\n  v_mov_b32 v20, v200\n", in, std::vector<uint32_t>(256, 0), o);
    for (int l = 0; l < 64; ++l) CHECK(r.at(l, 0) == in[l * 4] + 1);
    try {
      run_wave(g, "valias", "  v_add_u32 v200, 1, v10\n  v_accvgpr_write_b32 a72, v10\n  v_mov_b32 v20, v200\n", in,
               std::vector<uint32_t>(256, 0), o);
      FAIL("expected register_range");
    } catch (const Error& e) {
      CHECK(e.rule == "register_range");
      CHECK(std::string(e.what()).find("aliases a72") != std::string::npos);
    }
    KernelOpts small;
    small.vgprs = 64;
    REQUIRE_THROWS_WITH(run_wave(g, "vpast", "  v_mov_b32 v70, 0\n", in, std::vector<uint32_t>(256, 0), small), Catch::Contains("v70"));
  }
}

// V_CVT_U32_F32 / V_CVT_I32_F32 (ISA3/ISA4 VOP1: "D.u = (unsigned)S0.f", "D.i = (int)S0.f";
// truncate toward zero, saturate, NaN -> 0) write an integer: MODE's f32 denormal flush applies
// to the float input, never to the result. The emulator once flushed results whose bits looked
// like a denormal (any integer 1..2^23-1) in kernels with .amdhsa_float_denorm_mode_32 0, which
// broke aiter's gfx950 mla_a8w8_qh16_qseqlen1_gqaratio16 at kv_split >= 4 (docs/aiter-oracle.md).
TEST_CASE("semantics: v_cvt_u32_f32 / v_cvt_i32_f32 results are integers whatever the f32 denormal mode", "[semantics][aiter]") {
  const float in_u[] = {8388607.0f, 5.7f, 0.5f, 1.0f, 8388608.0f, 4294967296.0f, -1.0f, 3000000000.0f};
  const uint32_t want_u[] = {8388607u, 5u, 0u, 1u, 8388608u, 0xffffffffu, 0u, 3000000000u};
  const float in_i[] = {-5.9f, 100.0f, -8388607.0f, 3e9f, -3e9f, 0.25f, 8388607.0f, -0.5f};
  const int32_t want_i[] = {-5, 100, -8388607, INT32_MAX, INT32_MIN, 0, 8388607, 0};
  for_targets_and_denorm_modes([&](Gfx g, int dm, const KernelOpts& o) {
    std::vector<uint32_t> in(256);
    for (int l = 0; l < 64; ++l) {
      in[l * 4] = fbits(in_u[l % 8]);
      in[l * 4 + 1] = fbits(in_i[l % 8]);
      in[l * 4 + 2] = 0x00000001u;  // an f32 denormal input: 0 when flushed, still 0 when kept
    }
    auto r = run_wave(g, "cvtint" + std::to_string(dm),
                      "  v_cvt_u32_f32 v20, v10\n  v_cvt_i32_f32 v21, v11\n  v_cvt_u32_f32 v22, v12\n"
                      "  v_cvt_u32_f32_e64 v23, v10\n",
                      in, std::vector<uint32_t>(256, 0), o);
    for (int l = 0; l < 64; ++l) {
      CHECK(r.at(l, 0) == want_u[l % 8]);
      CHECK(int32_t(r.at(l, 1)) == want_i[l % 8]);
      CHECK(r.at(l, 2) == 0u);
      CHECK(r.at(l, 3) == want_u[l % 8]);
    }
  });
}

// The same from the compiler's side: clang-22 compiles a 32-bit unsigned division with
// -cl-denorms-are-zero (.amdhsa_float_denorm_mode_32 0) to LLVM's expansion, whose estimate
// v_cvt_u32_f32(0x4f7ffffe * rcp(float(d))) is below 2^23 for every divisor d > 512. LLVM ships
// this lowering for hardware, so the conversion cannot flush there; the quotients must be exact.
TEST_CASE("semantics: clang-22 udiv with f32 denormals flushed gives exact quotients", "[semantics][aiter]") {
  const char* src = R"(
__kernel void udiv(__global uint* out, __global const uint* a, __global const uint* b) {
  uint i = __builtin_amdgcn_workitem_id_x();
  out[i] = a[i] / b[i];
}
)";
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    auto co = compile_daz(src, g, "udiv", {"v_cvt_u32_f32", "0x4f7ffffe"});
    std::vector<uint32_t> a(64), b(64);
    for (int l = 0; l < 64; ++l) {
      a[l] = 1600u + 977u * uint32_t(l) * uint32_t(l) * 31u;
      b[l] = l < 8 ? 128u * uint32_t(l + 1) : 300u + 4099u * uint32_t(l);  // 512 (kv_split 4 x 128) among them
    }
    Device dev(g);
    uint64_t pa = dev.alloc(256, 256, "a"), pb = dev.alloc(256, 256, "b"), po = dev.alloc(256, 256, "out", 0xff);
    dev.write(pa, a.data(), 256);
    dev.write(pb, b.data(), 256);
    KernargBuilder kb;
    kb.put<uint64_t>(0, po).put<uint64_t>(8, pa).put<uint64_t>(16, pb);
    dev.dispatch(co, "udiv", {1, 1, 1}, {64, 1, 1}, kb.bytes);
    auto q = dev.read_vector<uint32_t>(po, 64);
    for (int l = 0; l < 64; ++l) {
      INFO("lane " << l << ": " << a[l] << " / " << b[l]);
      CHECK(q[l] == a[l] / b[l]);
    }
  }
}

// V_CMP_CLASS_F32 (ISA3/ISA4 VOPC: "VCC = IEEE numeric class function specified in S1.u, performed
// on S0.f"): S1 is an integer mask of ten classes, so MODE's f32 denormal flush never applies to it;
// its common masks look like f32 denormals (0x1f8 "finite", 0x204 "+-inf", 0x3 "NaN"). The emulator
// once flushed the mask to 0 in kernels with .amdhsa_float_denorm_mode_32 0, so every value failed
// its class test and aiter's gfx950 bf16 qh64 _v3_ps kernels, which zero non-finite outputs that
// way, wrote all zeros (docs/aiter-oracle.md, family E).
TEST_CASE("semantics: v_cmp_class_f32's class mask is an integer whatever the f32 denormal mode", "[semantics][aiter]") {
  // Inputs: +1.5, -2, +inf, -inf, qNaN, +0, -0, -1e30 (no denormal input: its flush is not at issue).
  const uint32_t x[] = {0x3fc00000u, 0xc0000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x0u, 0x80000000u, 0xf149f2cau};
  const bool finite[] = {true, true, false, false, false, true, true, true};
  const bool inf[] = {false, false, true, true, false, false, false, false};
  const bool nan[] = {false, false, false, false, true, false, false, false};
  for_targets_and_denorm_modes([&](Gfx g, int dm, const KernelOpts& o) {
    std::vector<uint32_t> in(256);
    for (int l = 0; l < 64; ++l) in[l * 4] = x[l % 8];
    auto r = run_wave(g, "cmpclass" + std::to_string(dm),
                      "  v_mov_b32 v14, 0x1f8\n  v_cmp_class_f32_e64 s[10:11], v10, v14\n"
                      "  v_cndmask_b32_e64 v20, 0, 1, s[10:11]\n"
                      "  v_mov_b32 v15, 0x204\n  v_cmp_class_f32_e64 s[10:11], v10, v15\n"
                      "  v_cndmask_b32_e64 v21, 0, 1, s[10:11]\n"
                      "  v_cmp_class_f32_e64 s[10:11], v10, 3\n  v_cndmask_b32_e64 v22, 0, 1, s[10:11]\n",
                      in, std::vector<uint32_t>(256, 0), o);
    for (int l = 0; l < 64; ++l) {
      INFO("lane " << l);
      CHECK(r.at(l, 0) == uint32_t(finite[l % 8]));
      CHECK(r.at(l, 1) == uint32_t(inf[l % 8]));
      CHECK(r.at(l, 2) == uint32_t(nan[l % 8]));
    }
  });
}

// The same from the compiler's side: clang-22 lowers __builtin_isfpclass(x, 0x1f8) (llvm.is.fpclass,
// "finite") with -cl-denorms-are-zero (.amdhsa_float_denorm_mode_32 0) to s_movk_i32 of the mask and
// v_cmp_class_f32_e64 with it in an SGPR, a lowering LLVM ships for hardware.
TEST_CASE("semantics: clang-22 is.fpclass finite with f32 denormals flushed classes every value", "[semantics][aiter]") {
  const char* src = R"(
__kernel void fin(__global int* out, __global const float* x) {
  uint i = __builtin_amdgcn_workitem_id_x();
  out[i] = __builtin_isfpclass(x[i], 0x1f8) ? 7 : 3;
}
)";
  const float vals[] = {1.5f, -2.0f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f, -1e30f};
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    auto co = compile_daz(src, g, "fin", {"v_cmp_class_f32", "0x1f8"});
    std::vector<float> x(64);
    for (int l = 0; l < 64; ++l) x[l] = vals[l % 8];
    Device dev(g);
    uint64_t px = dev.alloc(256, 256, "x"), po = dev.alloc(256, 256, "out", 0xff);
    dev.write(px, x.data(), 256);
    KernargBuilder kb;
    kb.put<uint64_t>(0, po).put<uint64_t>(8, px);
    dev.dispatch(co, "fin", {1, 1, 1}, {64, 1, 1}, kb.bytes);
    auto q = dev.read_vector<int32_t>(po, 64);
    for (int l = 0; l < 64; ++l) {
      INFO("lane " << l << ": " << x[l]);
      CHECK(q[l] == (std::isfinite(x[l]) ? 7 : 3));
    }
  }
}
