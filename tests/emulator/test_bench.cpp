// Speed: an MLA-like mix (global loads, LDS write/read with barriers, VALU, MFMA, SALU loop)
// of ~100K wave-instructions; prints wave-instructions per second (docs/emulator.md).
#include <catch2/catch.hpp>

#include <chrono>

#include "emu_test_util.h"

using namespace mla::emu;
using namespace emutest;

TEST_CASE("bench: wave-instructions per second", "[bench]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string body = R"(  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dword s10, s[0:1], 0x10
  v_lshlrev_b32 v1, 4, v0            // lane*16 (thread id within the workgroup)
  v_and_b32 v2, 0x3ff, v1            // LDS address (wraps inside 1 KiB per wave region)
  v_mov_b32 v20, 0
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  s_waitcnt lgkmcnt(0)
  s_mov_b32 s11, 0
loop:
  global_load_dwordx4 v[4:7], v1, s[4:5]
  s_waitcnt vmcnt(0)
  v_cvt_pk_fp8_f32 v8, v4, v5
  v_cvt_pk_f32_fp8 v[10:11], v8
  v_pk_mul_f32 v[12:13], v[4:5], v[6:7]
  v_max3_f32 v14, v4, v5, v6
  v_exp_f32 v15, v14
  v_add_u32 v16, s11, v0
  v_lshlrev_b32 v17, 3, v0
  ds_write_b64 v17, v[12:13]
  s_waitcnt lgkmcnt(0)
  ds_read_b64 v[18:19], v17
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_mfma_f32_16x16x16_f16 v[20:23], v[4:5], v[6:7], v[20:23]
  v_fma_f32 v24, v18, v19, v15
  v_add_f32 v25, v24, v10
  v_mul_f32 v26, v25, v11
  v_cndmask_b32 v27, v26, v25, vcc
  v_cmp_gt_f32 vcc, v27, 0
  s_add_u32 s11, s11, 1
  s_cmp_lt_u32 s11, s10
  s_cbranch_scc1 loop
  s_nop 7
  s_nop 7
  global_store_dwordx4 v1, v[20:23], s[6:7]
  s_waitcnt vmcnt(0)
  s_endpgm)";
    KernelOpts o;
    o.vgprs = 32;
    o.lds = 16 * 1024;
    auto co = assemble(kernel_src("bench", g, body, o), g, std::string("bench_") + gfx_name(g).data());
    Device dev(g);
    uint64_t in = dev.alloc(256 * 16, 256, "in", 0x3c), out = dev.alloc(256 * 16);
    KernargBuilder kb;
    kb.put<uint64_t>(0, in).put<uint64_t>(8, out).put<uint32_t>(16, 200);
    // 2 workgroups x 4 waves x 200 iterations x ~26 instructions ~= 42K wave-instructions
    auto t0 = std::chrono::steady_clock::now();
    Counters c = dev.dispatch(co, "bench", {2, 1, 1}, {256, 1, 1}, kb.bytes);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double rate = double(c.total.wave_insts) / s;
    WARN(fmt::format("{}: {} wave-instructions ({} MFMA, {} LDS, {} VMEM) in {:.3f} s = {:.2f} M wave-instructions/s", gfx_name(g),
                     c.total.wave_insts, c.total.mfma, c.total.insts[size_t(InstClass::LDS)],
                     c.total.insts[size_t(InstClass::VMEM_LOAD)] + c.total.insts[size_t(InstClass::VMEM_STORE)], s, rate / 1e6));
    CHECK(c.total.wave_insts > 30000);
    CHECK(rate > 1e5);  // sanity floor; the measured number is recorded in docs/emulator.md
  }
}
