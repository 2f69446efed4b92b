// More instruction families: LDS DMA (buffer and gfx950 global_load_lds), ds_read2/write2,
// ds_bpermute, control flow with s_getpc/s_setpc, VGPR indexing, SDWA, v_pk_* op_sel.
#include <catch2/catch.hpp>

#include "sem_harness.h"

using namespace mla::emu;
using namespace emutest;

TEST_CASE("semantics: LDS DMA and its vmcnt visibility rule", "[semantics]") {
  std::vector<uint32_t> extra(1024);
  for (int i = 0; i < 1024; ++i) extra[i] = 0xa000 + i;
  KernelOpts o;
  o.lds = 4096;
  // gfx950: global_load_lds_dwordx4 -> LDS[M0 + offset + lane*16]
  std::string body = R"(
  s_mov_b32 m0, 256
  v_lshlrev_b32 v3, 4, v0
  s_nop 0
  global_load_lds_dwordx4 v3, s[8:9] offset:16
  s_waitcnt vmcnt(0)
  ds_read_b128 v[20:23], v3 offset:272
  s_waitcnt lgkmcnt(0)
)";
  auto r = run_wave(Gfx::gfx950, "gl_lds", body, ramp_inputs(), extra, o);
  for (int l = 0; l < 64; ++l)
    for (int k = 0; k < 4; ++k) CHECK(r.at(l, k) == 0xa000u + (16 + l * 16) / 4 + k);
  // Reading the LDS bytes before vmcnt retires the DMA is an error.
  std::string bad = body;
  bad.replace(bad.find("  s_waitcnt vmcnt(0)\n"), 20, "");
  try {
    run_wave(Gfx::gfx950, "gl_lds_bad", bad, ramp_inputs(), extra, o);
    FAIL("expected an lds_dma error");
  } catch (const Error& e) {
    CHECK(e.rule == "lds_dma");
    CHECK(std::string(e.what()).find("LDS-DMA") != std::string::npos);
  }
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {  // buffer_load_dword ... lds
    std::string b = R"(
  s_mov_b32 s12, s8
  s_and_b32 s13, s9, 0xffff
  s_mov_b32 s14, 4096
  s_mov_b32 s15, 0x00027000
  s_mov_b32 m0, 512
  v_lshlrev_b32 v3, 3, v0
  s_nop 4
  buffer_load_dword v3, s[12:15], 0 offen offset:4 lds
  s_waitcnt vmcnt(0)
  v_lshlrev_b32 v4, 2, v0
  ds_read_b32 v20, v4 offset:516
  s_waitcnt lgkmcnt(0)
)";
    auto rb = run_wave(g, "buf_lds", b, ramp_inputs(), extra, o);
    for (int l = 0; l < 64; ++l) CHECK(rb.at(l, 0) == 0xa000u + (l * 8 + 4) / 4);
  }
}

TEST_CASE("semantics: ds_read2/write2, ds_bpermute, SDWA, packed f32 op_sel", "[semantics]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    KernelOpts o;
    o.lds = 4096;
    std::vector<uint32_t> in(256);
    for (int l = 0; l < 64; ++l) {
      in[l * 4] = 100 + l;
      in[l * 4 + 1] = 0x80f0 + l;
      in[l * 4 + 2] = fbits(float(l) + 0.5f);
      in[l * 4 + 3] = fbits(2.0f - float(l));
    }
    std::string body = R"(
  v_lshlrev_b32 v4, 3, v0
  ds_write2_b32 v4, v10, v11 offset1:1
  s_waitcnt lgkmcnt(0)
  ds_read2_b32 v[20:21], v4 offset1:1
  v_sub_u32 v5, 63, v0
  v_lshlrev_b32 v5, 2, v5
  s_waitcnt lgkmcnt(0)
  ds_bpermute_b32 v22, v5, v10
  v_add_u32_sdwa v23, v11, v10 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:DWORD
  v_pk_mul_f32 v[24:25], v[12:13], v[12:13] op_sel:[0,1] op_sel_hi:[1,0]
  v_pk_add_f32 v[26:27], v[12:13], v[12:13] neg_lo:[0,1] neg_hi:[1,0]
  s_waitcnt lgkmcnt(0)
)";
    auto r = run_wave(g, "ds2", body, in, std::vector<uint32_t>(256, 0), o);
    for (int l = 0; l < 64; ++l) {
      float c = bitsf(in[l * 4 + 2]), d = bitsf(in[l * 4 + 3]);
      CHECK(r.at(l, 0) == 100u + l);
      CHECK(r.at(l, 1) == 0x80f0u + l);
      CHECK(r.at(l, 2) == 100u + (63 - l));
      CHECK(r.at(l, 3) == (((((0x80f0u + l) & 0xff) + 100u + l) & 0xffff) << 16));
      // lo = src0.lo * src1.hi ; hi = src0.hi * src1.lo
      CHECK(r.f(l, 4) == c * d);
      CHECK(r.f(l, 5) == d * c);
      CHECK(r.f(l, 6) == c - c);
      CHECK(r.f(l, 7) == -d + d);
    }
  }
}

TEST_CASE("semantics: s_getpc/s_setpc, s_cbranch_execz/vccnz, VGPR indexing", "[semantics]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string body = R"(
  s_getpc_b64 s[30:31]
pc_here:
  s_add_u32 s30, s30, target - pc_here
  s_addc_u32 s31, s31, 0
  v_mov_b32 v20, 1
  s_setpc_b64 s[30:31]
  v_mov_b32 v20, 2
target:
  v_mov_b32 v21, 3
  s_mov_b64 exec, 0
  s_cbranch_execz skip1
  v_mov_b32 v22, 4
skip1:
  s_mov_b64 exec, -1
  v_cmp_eq_u32 vcc, 5, v0
  s_cbranch_vccnz taken
  v_mov_b32 v23, 6
taken:
  v_mov_b32 v24, 7
  v_mov_b32 v25, 8
  v_mov_b32 v26, 9
  s_mov_b32 s40, 2
  s_set_gpr_idx_on s40, gpr_idx(SRC0)
  v_mov_b32 v27, v24
  s_set_gpr_idx_off
)";
    auto r = run_wave(g, "ctrl", body, ramp_inputs());
    for (int l = 0; l < 64; ++l) {
      CHECK(r.at(l, 0) == 1u);
      CHECK(r.at(l, 1) == 3u);
      CHECK(r.at(l, 2) == 0u);
      CHECK(r.at(l, 3) == 0u);  // vcc != 0 -> branch taken
      CHECK(r.at(l, 7) == 9u);  // v24 relocated by 2 -> v26
    }
  }
}

TEST_CASE("semantics: 3-operand integer min/max/med, 64-bit compares", "[semantics]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    auto in = ramp_inputs(21);
    std::string body = R"(
  v_max3_u32 v20, v10, v11, v12
  v_min3_i32 v21, v10, v11, v12
  v_med3_u32 v22, v10, v11, v12
  v_med3_i32 v23, v10, v11, v12
  v_cmp_lt_u64 s[30:31], v[10:11], v[12:13]
  v_cmp_gt_i64 s[32:33], v[10:11], v[12:13]
  v_cndmask_b32_e64 v24, 0, 1, s[30:31]
  v_cndmask_b32_e64 v25, 0, 1, s[32:33]
)";
    auto r = run_wave(g, "int3", body, in);
    for (int l = 0; l < 64; ++l) {
      uint32_t a = in[l * 4], b = in[l * 4 + 1], c = in[l * 4 + 2], d = in[l * 4 + 3];
      int32_t ia = int32_t(a), ib = int32_t(b), ic = int32_t(c);
      CHECK(r.at(l, 0) == std::max({a, b, c}));
      CHECK(int32_t(r.at(l, 1)) == std::min({ia, ib, ic}));
      uint32_t mu = a + b + c - std::max({a, b, c}) - std::min({a, b, c});
      CHECK(r.at(l, 2) == mu);
      int64_t mi = int64_t(ia) + ib + ic - std::max({ia, ib, ic}) - std::min({ia, ib, ic});
      CHECK(int32_t(r.at(l, 3)) == mi);
      uint64_t x = (uint64_t(b) << 32) | a, y = (uint64_t(d) << 32) | c;
      CHECK(r.at(l, 4) == (x < y ? 1u : 0u));
      CHECK(r.at(l, 5) == (int64_t(x) > int64_t(y) ? 1u : 0u));
    }
  }
}

TEST_CASE("counters: the LDS bank model charges rows 576 bytes apart and not 584", "[counters]") {
  // Lane l reads 8 bytes of row l % 16 at column 8 (l / 16): the K operand pattern of the decode
  // kernel. 576-byte rows are 144 dwords = 16 banks apart (rows 0, 2, 4, ... share banks 0-1):
  // 8 distinct dwords per bank in each 16-lane group of 128 bytes. 584-byte rows are 18 banks
  // apart: all 32 banks once.
  auto run = [](unsigned stride) {
    const std::string body = fmt::format(R"(
  v_and_b32 v3, 15, v0
  v_mul_u32_u24 v3, {}, v3
  v_lshrrev_b32 v4, 4, v0
  v_lshl_add_u32 v3, v4, 3, v3
  ds_read_b64 v[20:21], v3
  s_waitcnt lgkmcnt(0)
)", stride);
    KernelOpts o;
    o.lds = 16 * 1024;
    DispatchOptions d;
    d.check_lds_uninit = false;  // the rows are never written: only the read's bank pattern counts here
    return emutest::run_wave(Gfx::gfx942, fmt::format("lds_banks_{}", stride), body, std::vector<uint32_t>(256, 1),
                             std::vector<uint32_t>(256, 0), o, d)
        .counters.total;
  };
  const auto c576 = run(576), c584 = run(584);
  CHECK(c576.lds_ideal_cycles == 4);
  CHECK(c576.lds_bank_cycles == 4 * 8);
  CHECK(c584.lds_ideal_cycles == 4);
  CHECK(c584.lds_bank_cycles == 4);
}
