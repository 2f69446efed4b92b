// Strictness: each deliberately broken kernel must be rejected with the right rule, and its
// fixed twin must run clean.
#include <catch2/catch.hpp>

#include <sstream>

#include "emulator/mfma.h"
#include "sem_harness.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const Gfx kTargets[] = {Gfx::gfx942, Gfx::gfx950};

void expect_error(Gfx g, const std::string& name, const std::string& body, const std::string& rule, const std::string& text,
                  KernelOpts o = {}) {
  INFO(name << " on " << gfx_name(g));
  try {
    run_wave(g, name, body, ramp_inputs(), std::vector<uint32_t>(256, 0), o);
    FAIL("expected a '" << rule << "' error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.rule == rule);
    CHECK(std::string(e.what()).find(text) != std::string::npos);
    CHECK(std::string(e.what()).find("kernel " + name) != std::string::npos);
    CHECK(std::string(e.what()).find("pc 0x") != std::string::npos);
    CHECK(std::string(e.what()).find("previous instructions of this wave") != std::string::npos);
  }
}
void expect_clean(Gfx g, const std::string& name, const std::string& body, KernelOpts o = {}) {
  INFO(name << " on " << gfx_name(g));
  REQUIRE_NOTHROW(run_wave(g, name, body, ramp_inputs(), std::vector<uint32_t>(256, 0), o));
}
std::string nops(int ws) {  // exactly `ws` wait states of s_nop
  std::string s;
  while (ws > 0) {
    int n = std::min(ws, 16);
    s += fmt::format("  s_nop {}\n", n - 1);
    ws -= n;
  }
  return s;
}
}  // namespace

TEST_CASE("strict: waitcnt scoreboard", "[strict]") {
  for (Gfx g : kTargets) {
    expect_error(g, "vm_missing", "  global_load_dword v20, v1, s[4:5]\n  v_add_u32 v21, v20, v20\n", "waitcnt", "reads v20");
    expect_clean(g, "vm_fixed", "  global_load_dword v20, v1, s[4:5]\n  s_waitcnt vmcnt(0)\n  v_add_u32 v21, v20, v20\n");
    expect_error(g, "vm_waw", "  global_load_dword v20, v1, s[4:5]\n  v_mov_b32 v20, 0\n  s_waitcnt vmcnt(0)\n", "waitcnt", "overwrites v20");
    // vmcnt counts in order: vmcnt(1) covers the older of two loads only.
    expect_clean(g, "vm_inorder", "  global_load_dword v20, v1, s[4:5]\n  global_load_dword v21, v1, s[4:5] offset:4\n"
                                  "  s_waitcnt vmcnt(1)\n  v_mov_b32 v22, v20\n  s_waitcnt vmcnt(0)\n");
    expect_error(g, "vm_inorder_bad", "  global_load_dword v20, v1, s[4:5]\n  global_load_dword v21, v1, s[4:5] offset:4\n"
                                      "  s_waitcnt vmcnt(1)\n  v_mov_b32 v22, v21\n  s_waitcnt vmcnt(0)\n", "waitcnt", "reads v21");
    // SMEM returns out of order: lgkmcnt(1) proves nothing while two scalar loads are outstanding.
    expect_error(g, "smem_ooo", "  s_load_dword s30, s[8:9], 0x0\n  s_load_dword s31, s[8:9], 0x4\n  s_waitcnt lgkmcnt(1)\n"
                                "  v_mov_b32 v20, s30\n  s_waitcnt lgkmcnt(0)\n", "waitcnt", "reads s30");
    expect_clean(g, "smem_fixed", "  s_load_dword s30, s[8:9], 0x0\n  s_load_dword s31, s[8:9], 0x4\n  s_waitcnt lgkmcnt(0)\n"
                                  "  v_mov_b32 v20, s30\n");
    // LDS returns in order.
    KernelOpts o;
    o.lds = 1024;
    const std::string written = "  v_lshlrev_b32 v4, 2, v0\n  ds_write_b32 v4, v0\n  ds_write_b32 v4, v0 offset:256\n  s_waitcnt lgkmcnt(0)\n";
    expect_clean(g, "lds_inorder", written + "  ds_read_b32 v20, v4\n  ds_read_b32 v21, v4 offset:256\n"
                                   "  s_waitcnt lgkmcnt(1)\n  v_mov_b32 v22, v20\n  s_waitcnt lgkmcnt(0)\n", o);
    expect_error(g, "lds_missing", written + "  ds_read_b32 v20, v4\n  v_mov_b32 v22, v20\n", "waitcnt", "reads v20", o);
  }
}

TEST_CASE("strict: hazard wait states", "[strict]") {
  for (Gfx g : kTargets) {
    const MfmaInfo* mi = find_mfma("v_mfma_f32_16x16x16_f16", g);
    REQUIRE(mi);
    int need_valu = mi->passes + 3 + (g == Gfx::gfx950 && mi->passes > 2 ? 1 : 0);
    if (!mi->xdl) need_valu = mi->passes + 2;
    std::string mfma = "  v_mfma_f32_16x16x16_f16 v[20:23], v[10:11], v[10:11], 0\n";
    expect_error(g, "mfma_valu", mfma + nops(need_valu - 1) + "  v_mov_b32 v24, v20\n", "hazard", "MFMA write then VALU read");
    expect_clean(g, "mfma_valu_ok", mfma + nops(need_valu) + "  v_mov_b32 v24, v20\n");
    expect_error(g, "mfma_store", mfma + nops(need_valu - 1) + "  global_store_dword v1, v20, s[8:9]\n", "hazard",
                 "memory-instruction read");
    expect_error(g, "mfma_waw", mfma + nops(need_valu - 1) + "  v_mov_b32 v21, 0\n", "hazard", "same register");
    int need_ab = mi->xdl ? mi->passes + 3 + (g == Gfx::gfx950 && mi->passes > 2 ? 1 : 0) : mi->passes + 2;
    std::string mfma2 = "  v_mfma_f32_16x16x16_f16 v[24:27], v[20:21], v[10:11], 0\n";
    expect_error(g, "mfma_srcab", mfma + nops(need_ab - 1) + mfma2, "hazard", "SrcA/SrcB");
    expect_clean(g, "mfma_srcab_ok", mfma + nops(need_ab) + mfma2);
    // Back-to-back accumulation into the same registers needs no wait states (4+ pass MFMA).
    expect_clean(g, "mfma_chain", mfma + "  v_mfma_f32_16x16x16_f16 v[20:23], v[10:11], v[10:11], v[20:23]\n");
    expect_error(g, "valu_mfma", "  v_mov_b32 v10, 0\n  v_mfma_f32_16x16x16_f16 v[20:23], v[10:11], v[10:11], 0\n", "hazard",
                 "VALU write then MFMA read");
    expect_clean(g, "valu_mfma_ok", "  v_mov_b32 v10, 0\n  s_nop 1\n  v_mfma_f32_16x16x16_f16 v[20:23], v[10:11], v[10:11], 0\n");
    // VALU writes an SGPR that a VMEM instruction reads: 5 wait states.
    std::string sg = "  v_mov_b32 v5, s4\n  s_mov_b32 s31, s5\n  v_readfirstlane_b32 s30, v5\n";
    expect_error(g, "valu_sgpr_vmem", sg + "  global_load_dword v20, v1, s[30:31]\n  s_waitcnt vmcnt(0)\n", "hazard", "VMEM read");
    expect_clean(g, "valu_sgpr_vmem_ok", sg + "  s_nop 4\n  global_load_dword v20, v1, s[30:31]\n  s_waitcnt vmcnt(0)\n");
    // DPP reads a VGPR written by the previous VALU: 2 wait states.
    std::string dpp = "  v_mov_b32_dpp v20, v5 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf\n";
    expect_error(g, "dpp", "  v_add_u32 v5, 1, v10\n" + dpp, "hazard", "DPP");
    expect_clean(g, "dpp_ok", "  v_add_u32 v5, 1, v10\n  s_nop 1\n" + dpp);
    // v_readlane lane select written by a VALU: 4 wait states.
    std::string rl = "  v_readfirstlane_b32 s30, v0\n";
    expect_error(g, "rwlane", rl + "  s_nop 2\n  v_readlane_b32 s31, v10, s30\n", "hazard", "lane select");
    expect_clean(g, "rwlane_ok", rl + "  s_nop 3\n  v_readlane_b32 s31, v10, s30\n");
    // Transcendental result forwarded to a non-transcendental VALU: 1 wait state.
    expect_error(g, "trans", "  v_exp_f32 v5, v10\n  v_add_f32 v20, v5, v5\n", "hazard", "transcendental");
    expect_clean(g, "trans_ok", "  v_exp_f32 v5, v10\n  s_nop 0\n  v_add_f32 v20, v5, v5\n");
    // VALU writes EXEC, then MFMA: 4 wait states.
    expect_error(g, "exec_mfma", "  v_cmpx_le_u32 s[30:31], 0, v0\n  s_nop 2\n" + mfma, "hazard", "EXEC");
  }
  // gfx950: VALU write then v_permlane*_swap read: 2 wait states.
  expect_error(Gfx::gfx950, "permlane", "  v_mov_b32 v20, v10\n  v_permlane32_swap_b32 v20, v21\n", "hazard", "permlane");
  expect_clean(Gfx::gfx950, "permlane_ok", "  v_mov_b32 v20, v10\n  s_nop 1\n  v_permlane32_swap_b32 v20, v21\n");
}

namespace {
// Two waves of 64 threads share LDS: thread t's word is at v1 = 4t, its partner t^64's at v2;
// `middle` works through LDS and leaves thread t's result in v4, stored at out[t].
std::vector<uint32_t> run_two_waves(Gfx g, const std::string& name, const std::string& middle, DispatchOptions opts = {}) {
  const std::string body = "  s_load_dwordx2 s[4:5], s[0:1], 0x0\n  v_lshlrev_b32 v1, 2, v0\n  v_xor_b32 v2, 0x100, v1\n" +
                           middle + "  s_waitcnt lgkmcnt(0)\n  global_store_dword v1, v4, s[4:5]\n  s_waitcnt vmcnt(0)\n  s_endpgm";
  KernelOpts o;
  o.lds = 1024;
  auto co = assemble(kernel_src(name, g, body, o), g, name);
  Device dev(g);
  uint64_t out = dev.alloc(512);
  KernargBuilder kb;
  kb.put<uint64_t>(0, out);
  dev.dispatch(co, name, {2, 1, 1}, {128, 1, 1}, kb.bytes, opts);
  return dev.read_vector<uint32_t>(out, 128);
}
// The exchange: thread t writes t at 4t (`write`; a ds_write2 also writes it at 4t + 512), then
// `sync`, then reads its partner's word.
std::vector<uint32_t> run_exchange(Gfx g, const std::string& name, const std::string& sync, DispatchOptions opts = {},
                                   const std::string& write = "ds_write_b32 v1, v0") {
  return run_two_waves(g, name, "  " + write + "\n" + sync + "  ds_read_b32 v4, v2\n", opts);
}
}  // namespace

TEST_CASE("strict: LDS races between waves", "[strict]") {
  for (Gfx g : kTargets) {
    REQUIRE_THROWS_WITH(run_exchange(g, "race_nobarrier", "  s_waitcnt lgkmcnt(0)\n"), Catch::Contains("lds_race"));
    // The write is still outstanding when the barrier releases: other waves may not see it.
    REQUIRE_THROWS_WITH(run_exchange(g, "race_nowait", "  s_barrier\n"), Catch::Contains("lds_race"));
    for (uint64_t seed : {0, 1, 2, 3}) {
      for (unsigned q : {1u, 3u, 1000u}) {
        DispatchOptions opts;
        opts.random_seed = seed;
        opts.quantum = q;
        auto v = run_exchange(g, "race_fixed", "  s_waitcnt lgkmcnt(0)\n  s_barrier\n", opts);
        for (uint32_t t = 0; t < 128; ++t) CHECK(v[t] == (t ^ 64));
      }
    }
  }
}

// LDS atomics (ds_add_u32): atomics of two waves on the same word need no barrier between them;
// an atomic and a plain read (or write) of the same word by two waves do. Thread t writes t at
// 4t, adds t to its partner's word, then reads its own word: t + (t ^ 64) once both adds landed.
TEST_CASE("strict: LDS atomics race with plain accesses, not with each other", "[strict]") {
  const std::string init = "  ds_write_b32 v1, v0\n  s_waitcnt lgkmcnt(0)\n  s_barrier\n";
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    REQUIRE_THROWS_WITH(run_two_waves(g, "atomic_race", init + "  ds_add_u32 v2, v0\n  s_waitcnt lgkmcnt(0)\n  ds_read_b32 v4, v1\n"),
                        Catch::Contains("updated by an atomic"));
    for (uint64_t seed : {0, 5}) {
      DispatchOptions opts;
      opts.random_seed = seed;
      // Both waves add to each word (its own thread and its partner): no race among the atomics.
      auto v = run_two_waves(g, "atomic_ok",
                             init + "  ds_add_u32 v2, v0\n  ds_add_u32 v1, v0\n  s_waitcnt lgkmcnt(0)\n  s_barrier\n"
                                    "  ds_read_b32 v4, v1\n",
                             opts);
      for (uint32_t t = 0; t < 128; ++t) CHECK(v[t] == t + t + (t ^ 64));
    }
  }
}

// An LDS op still outstanding when a barrier releases belongs to the new epoch whatever its
// form: ds_write2 / ds_read2 record both elements' addresses (until 2026-12-04 they recorded
// none, and the race twins below ran clean). Read side: thread t reads t^64's two words (at 4t'
// and 4t' + 512), passes a barrier, then overwrites its own word while the partner's read of it
// may still be in flight.
TEST_CASE("strict: ds_read2 / ds_write2 outstanding at a barrier race like single reads and writes", "[strict]") {
  const std::string write2 = "ds_write2_b32 v1, v0, v0 offset1:128";
  // Thread t writes t at 4t and 4t + 512, reads its partner's two words (`read`), passes `sync`,
  // then overwrites its own word.
  auto read_side = [&](Gfx g, const std::string& name, const std::string& read, const std::string& sync) {
    return run_two_waves(g, name, "  " + write2 + "\n  s_waitcnt lgkmcnt(0)\n  s_barrier\n  " + read + "\n" + sync +
                                      "  ds_write_b32 v1, v1\n");
  };
  const std::string read1 = "ds_read_b32 v4, v2", read2 = "ds_read2_b32 v[4:5], v2 offset1:128";
  for (Gfx g : kTargets) {
    INFO(gfx_name(g));
    // Write side: the exchange with its write as a ds_write2.
    REQUIRE_THROWS_WITH(run_exchange(g, "race_nowait_write2", "  s_barrier\n", {}, write2), Catch::Contains("lds_race"));
    auto v = run_exchange(g, "race_fixed_write2", "  s_waitcnt lgkmcnt(0)\n  s_barrier\n", {}, write2);
    for (uint32_t t = 0; t < 128; ++t) CHECK(v[t] == (t ^ 64));
    // Read side: the single read (as before) and ds_read2 both race without the wait.
    for (const std::string& read : {read1, read2}) {
      INFO(read);
      REQUIRE_THROWS_WITH(read_side(g, "race_read_nowait", read, "  s_barrier\n"), Catch::Contains("lds_race"));
      auto r = read_side(g, "race_read_fixed", read, "  s_waitcnt lgkmcnt(0)\n  s_barrier\n");
      for (uint32_t t = 0; t < 128; ++t) CHECK(r[t] == (t ^ 64));
    }
  }
}

// LDS holds what an earlier workgroup left when a workgroup starts (clang rejects an initializer
// for __shared__ memory; the emulator clears it, so only a rule can show the difference).
TEST_CASE("strict: an LDS byte read before its workgroup wrote it", "[strict]") {
  KernelOpts o;
  o.lds = 1024;
  for (Gfx g : kTargets) {
    expect_error(g, "lds_unwritten", "  v_lshlrev_b32 v3, 2, v0\n  ds_read_b32 v20, v3\n  s_waitcnt lgkmcnt(0)\n", "lds_uninit",
                 "LDS byte 0x0 is read before this workgroup wrote it", o);
    expect_clean(g, "lds_written", "  v_lshlrev_b32 v3, 2, v0\n  ds_write_b32 v3, v0\n  s_waitcnt lgkmcnt(0)\n"
                                   "  ds_read_b32 v20, v3\n  s_waitcnt lgkmcnt(0)\n", o);
    // Byte by byte: 4 written bytes do not cover an 8-byte read (lane 0's bytes 4..7 come first).
    expect_error(g, "lds_half_written", "  v_lshlrev_b32 v3, 3, v0\n  ds_write_b32 v3, v0\n  s_waitcnt lgkmcnt(0)\n"
                                        "  ds_read_b64 v[20:21], v3\n  s_waitcnt lgkmcnt(0)\n", "lds_uninit", "LDS byte 0x4 is read", o);
    // Each workgroup starts unwritten: workgroup 1 does not see workgroup 0's write.
    const std::string tag = "lds_per_wg_" + std::string(gfx_name(g));
    const std::string src = kernel_src(tag, g, R"(  v_lshlrev_b32 v1, 2, v0
  s_cmp_eq_u32 s2, 0
  s_cbranch_scc0 .Lread
  ds_write_b32 v1, v0
  s_waitcnt lgkmcnt(0)
.Lread:
  ds_read_b32 v3, v1
  s_waitcnt lgkmcnt(0)
  s_endpgm)", o);
    const auto co = assemble(src, g, tag);
    Device dev(g);
    try {
      dev.dispatch(co, tag, {2, 1, 1}, {64, 1, 1}, std::vector<uint8_t>(64, 0), DispatchOptions{});
      FAIL("expected an 'lds_uninit' error in workgroup 1");
    } catch (const Error& e) {
      CHECK(e.rule == "lds_uninit");
      CHECK(std::string(e.what()).find("workgroup (1,0,0)") != std::string::npos);
    }
  }
}

TEST_CASE("strict: bounds, register range, unsupported, runaway", "[strict]") {
  for (Gfx g : kTargets) {
    expect_error(g, "oob", "  global_load_dword v20, v1, s[4:5] offset:1024\n  s_waitcnt vmcnt(0)\n", "out_of_bounds", "outside every allocation");
    expect_clean(g, "oob_ok", "  global_load_dword v20, v1, s[4:5] offset:12\n  s_waitcnt vmcnt(0)\n");
    KernelOpts o;
    o.vgprs = 64;
    expect_error(g, "vrange", "  v_mov_b32 v70, 0\n", "register_range", "v70", o);
    expect_clean(g, "vrange_ok", "  v_mov_b32 v60, 0\n", o);
    expect_error(g, "arange", "  v_accvgpr_write_b32 a0, 0\n", "register_range", "a0", o);
    expect_error(g, "unsupported", "  v_sin_f32 v20, v10\n", "unsupported", "v_sin_f32");
    KernelOpts lo;
    lo.lds = 256;
    expect_error(g, "lds_oob", "  v_lshlrev_b32 v4, 2, v0\n  ds_write_b32 v4, v0 offset:16\n  s_waitcnt lgkmcnt(0)\n", "out_of_bounds", "LDS", lo);
    auto co = assemble(kernel_src("spin", g, "loop:\n  s_branch loop\n  s_endpgm"), g, "spin");
    Device dev(g);
    DispatchOptions opts;
    opts.max_wave_instructions = 5000;
    REQUIRE_THROWS_WITH(dev.dispatch(co, "spin", {1, 1, 1}, {64, 1, 1}, {}, opts), Catch::Contains("runaway"));
  }
}

TEST_CASE("strict: buffer range checking returns zero / drops stores (not an error)", "[strict]") {
  for (Gfx g : kTargets) {
    std::vector<uint32_t> extra(256, 0x77);
    std::string body = R"(
  s_mov_b32 s12, s8
  s_and_b32 s13, s9, 0xffff
  s_mov_b32 s14, 64
  s_mov_b32 s15, 0x00027000
  v_lshlrev_b32 v3, 2, v0
  s_nop 4
  buffer_store_dword v0, v3, s[12:15], 0 offen
  buffer_load_dword v20, v3, s[12:15], 0 offen offset:4
  s_waitcnt vmcnt(0)
  global_load_dword v21, v3, s[8:9]
  s_mov_b32 s16, 8
  buffer_load_dword v22, v3, s[12:15], s16 offen offset:4
  s_waitcnt vmcnt(0)
)";
    auto r = run_wave(g, "bufrange", body, ramp_inputs(), extra);
    for (int l = 0; l < 64; ++l) {
      CHECK(r.at(l, 0) == (l * 4 + 4 + 4 <= 64 ? uint32_t(l + 1) : 0u));
      CHECK(r.at(l, 1) == (l < 16 ? uint32_t(l) : 0x77u));
      // soffset counts toward the range check: 8 + 4 + 4l + 4 <= 64
      CHECK(r.at(l, 2) == (l * 4 + 16 <= 64 ? uint32_t(l + 3) : 0u));
    }
  }
}

TEST_CASE("strict: trace option prints executed instructions", "[strict]") {
  auto co = assemble(kernel_src("traced", Gfx::gfx950, "  s_nop 0\n  s_endpgm"), Gfx::gfx950, "traced");
  Device dev(Gfx::gfx950);
  std::ostringstream os;
  DispatchOptions opts;
  opts.trace = &os;
  dev.dispatch(co, "traced", {2, 1, 1}, {64, 1, 1}, {}, opts);
  CHECK(os.str() == "wg 0,0,0 wave 0 +0x0: s_nop 0\nwg 0,0,0 wave 0 +0x4: s_endpgm\n"
                    "wg 1,0,0 wave 0 +0x0: s_nop 0\nwg 1,0,0 wave 0 +0x4: s_endpgm\n");
}
