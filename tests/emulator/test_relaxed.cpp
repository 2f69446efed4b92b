// Relaxed mode: per rule, a broken kernel that is an error under the strict checks warns once
// (per rule and pc), is counted in Counters::findings and runs to the end under relaxed, with
// the register values docs/emulator.md promises; each rule's switch turns it off; bounds and
// unsupported instructions stay errors.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "emulator/mfma.h"
#include "sem_harness.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const Gfx kTargets[] = {Gfx::gfx942, Gfx::gfx950};

size_t count_lines(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// Runs `body` strictly (must throw `rule`), relaxed (must finish: one warning per (rule, pc),
// `occurrences` counted) and with the rule's switch off (clean, no finding).
WaveRun twin(Gfx g, const std::string& name, const std::string& body, const std::string& rule, uint64_t occurrences,
             void (*switch_off)(DispatchOptions&), std::vector<uint32_t> extra = std::vector<uint32_t>(256, 0), KernelOpts o = {}) {
  INFO(name << " on " << gfx_name(g));
  try {
    run_wave(g, name + "_s", body, ramp_inputs(), extra, o);
    FAIL("expected a strict '" << rule << "' error");
  } catch (const Error& e) {
    CHECK(e.rule == rule);
  }
  DispatchOptions relaxed;
  relaxed.relaxed = true;
  relaxed.early_read = DispatchOptions::EarlyRead::loaded_value;  // the latency model has its own test
  std::ostringstream warn;
  relaxed.warnings = &warn;
  WaveRun r = run_wave(g, name + "_r", body, ramp_inputs(), extra, o, relaxed);
  INFO(warn.str());
  CHECK(count_lines(warn.str(), "mlaemu: warning [" + rule + "]") == 1);
  CHECK(warn.str().find("relaxed: ") != std::string::npos);
  REQUIRE(r.counters.findings.size() == 1);
  CHECK(r.counters.findings[0].rule == rule);
  CHECK(r.counters.findings[0].count == occurrences);
  CHECK(r.counters.findings[0].pc > 0);
  CHECK(!r.counters.findings[0].text.empty());
  DispatchOptions off;
  switch_off(off);
  WaveRun c = run_wave(g, name + "_o", body, ramp_inputs(), extra, o, off);
  CHECK(c.counters.findings.empty());
  CHECK(c.out == r.out);
  return r;
}
}  // namespace

TEST_CASE("relaxed: waitcnt read too early (EarlyRead::loaded_value) sees the load's data, warned once over a loop", "[relaxed]") {
  for (Gfx g : kTargets) {
    // Three iterations read v20 before the vmcnt wait: three occurrences, one warning.
    std::string body = R"(
  s_mov_b32 s20, 3
loop:
  global_load_dword v20, v1, s[4:5]
  v_add_u32 v21, v20, v20
  s_waitcnt vmcnt(0)
  s_sub_u32 s20, s20, 1
  s_cmp_lg_u32 s20, 0
  s_cbranch_scc1 loop
)";
    auto r = twin(g, "wc", body, "waitcnt", 3, [](DispatchOptions& o) { o.check_waitcnt = false; });
    auto in = ramp_inputs();
    for (int l = 0; l < 64; ++l) CHECK(r.at(l, 1) == 2 * in[l * 4]);  // v20 = dword 0 of lane l's 16 bytes
  }
}

TEST_CASE("relaxed: EarlyRead::previous_value and ::latency give the register's old contents", "[relaxed]") {
  for (Gfx g : kTargets) {
    // v20 = 7 before the load; the read 1 wait state after the load issued.
    std::string body = R"(
  v_mov_b32 v20, 7
  global_load_dword v20, v1, s[4:5]
  v_add_u32 v21, v20, v20
  s_waitcnt vmcnt(0)
  v_mov_b32 v22, v20
)";
    auto in = ramp_inputs();
    for (auto mode : {DispatchOptions::EarlyRead::previous_value, DispatchOptions::EarlyRead::latency,
                      DispatchOptions::EarlyRead::loaded_value}) {
      DispatchOptions o;
      o.relaxed = true;
      o.early_read = mode;
      std::ostringstream warn;
      o.warnings = &warn;
      auto r = run_wave(g, "wc_prev", body, in, std::vector<uint32_t>(256, 0), {}, o);
      bool old = mode != DispatchOptions::EarlyRead::loaded_value;
      CHECK(warn.str().find(old ? "previous value" : "the load's data") != std::string::npos);
      for (int l = 0; l < 64; ++l) {
        CHECK(r.at(l, 1) == (old ? 14u : 2 * in[l * 4]));
        CHECK(r.at(l, 2) == in[l * 4]);  // the load lands after the read
      }
    }
    // latency: a read 64 wait states after a VMEM load sees its data.
    DispatchOptions o;
    o.relaxed = true;
    o.early_read = DispatchOptions::EarlyRead::latency;
    std::ostringstream warn;
    o.warnings = &warn;
    std::string late = R"(
  v_mov_b32 v20, 7
  global_load_dword v20, v1, s[4:5]
  s_nop 15
  s_nop 15
  s_nop 15
  s_nop 14
  v_add_u32 v21, v20, v20
  s_waitcnt vmcnt(0)
)";
    auto r = run_wave(g, "wc_late", late, in, std::vector<uint32_t>(256, 0), {}, o);
    for (int l = 0; l < 64; ++l) CHECK(r.at(l, 1) == 2 * in[l * 4]);
  }
}

TEST_CASE("relaxed: latency model: a wave stalled at s_waitcnt lets the younger loads land", "[relaxed]") {
  for (Gfx g : kTargets) {
    KernelOpts o;
    o.lds = 1024;
    // Two LDS reads; lgkmcnt(1) waits for the first (the wave stalls until it lands, 16 wait
    // states after its issue), so the second, issued one instruction later, has landed by the
    // next instruction. Without the wait the same read is early and sees the old value.
    std::string common = R"(
  v_lshlrev_b32 v4, 2, v0
  ds_write_b32 v4, v10
  ds_write_b32 v4, v11 offset:256
  s_waitcnt lgkmcnt(0)
  v_mov_b32 v21, 7
  ds_read_b32 v20, v4
  ds_read_b32 v21, v4 offset:256
)";
    auto in = ramp_inputs();
    DispatchOptions opt;
    opt.relaxed = true;
    std::ostringstream warn;
    opt.warnings = &warn;
    auto waited = run_wave(g, "lat_wait", common + "  s_waitcnt lgkmcnt(1)\n  v_mov_b32 v22, v21\n  s_waitcnt lgkmcnt(0)\n", in,
                           std::vector<uint32_t>(256, 0), o, opt);
    auto early = run_wave(g, "lat_early", common + "  v_mov_b32 v22, v21\n  s_waitcnt lgkmcnt(0)\n", in, std::vector<uint32_t>(256, 0), o, opt);
    for (int l = 0; l < 64; ++l) {
      CHECK(waited.at(l, 2) == in[l * 4 + 1]);
      CHECK(early.at(l, 2) == 7u);
      CHECK(early.at(l, 1) == in[l * 4 + 1]);  // the load lands afterwards
    }
  }
}

TEST_CASE("relaxed: hazard read sees the producer's result", "[relaxed]") {
  for (Gfx g : kTargets) {
    const MfmaInfo* mi = find_mfma("v_mfma_f32_16x16x16_f16", g);
    REQUIRE(mi);
    std::string body = "  v_mfma_f32_16x16x16_f16 v[20:23], v[10:11], v[10:11], 0\n  v_mov_b32 v24, v20\n";
    auto r = twin(g, "hz", body, "hazard", 1, [](DispatchOptions& o) { o.check_hazards = false; });
    for (int l = 0; l < 64; ++l) CHECK(r.at(l, 4) == r.at(l, 0));
  }
}

TEST_CASE("relaxed: LDS-DMA bytes read before vmcnt hold the DMA's data", "[relaxed]") {
  std::vector<uint32_t> extra(1024);
  for (int i = 0; i < 1024; ++i) extra[i] = 0xa000 + i;
  KernelOpts o;
  o.lds = 4096;
  std::string body = R"(
  s_mov_b32 m0, 256
  v_lshlrev_b32 v3, 4, v0
  s_nop 0
  global_load_lds_dwordx4 v3, s[8:9] offset:16
  ds_read_b128 v[20:23], v3 offset:272
  s_waitcnt lgkmcnt(0)
  s_waitcnt vmcnt(0)
)";
  auto r = twin(Gfx::gfx950, "dma", body, "lds_dma", 1, [](DispatchOptions& d) { d.check_lds_dma = false; }, extra, o);
  for (int l = 0; l < 64; ++l)
    for (int k = 0; k < 4; ++k) CHECK(r.at(l, k) == 0xa000u + (16 + l * 16) / 4 + k);
}

TEST_CASE("relaxed: an LDS byte read before its workgroup wrote it reads zero", "[relaxed]") {
  KernelOpts o;
  o.lds = 1024;
  for (Gfx g : kTargets) {
    const std::string body = "  v_lshlrev_b32 v3, 2, v0\n  ds_read_b32 v20, v3\n  s_waitcnt lgkmcnt(0)\n";
    auto r = twin(g, "uninit", body, "lds_uninit", 1, [](DispatchOptions& d) { d.check_lds_uninit = false; },
                  std::vector<uint32_t>(256, 0), o);
    for (int l = 0; l < 64; ++l) CHECK(r.at(l, 0) == 0u);
  }
}

TEST_CASE("relaxed: LDS race between waves runs in the scheduler's order", "[relaxed]") {
  for (Gfx g : kTargets) {
    // Two waves exchange words through LDS with no barrier: thread t writes t at 4t, reads t^64.
    std::string src = kernel_src("race_r", g, R"(  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  v_xor_b32 v2, 0x100, v1
  ds_write_b32 v1, v0
  s_waitcnt lgkmcnt(0)
  ds_read_b32 v3, v2
  s_waitcnt lgkmcnt(0)
  global_store_dword v1, v3, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm)", [] { KernelOpts o; o.lds = 512; return o; }());
    auto co = assemble(src, g, "race_r");
    Device dev(g);
    uint64_t out = dev.alloc(512);
    KernargBuilder kb;
    kb.put<uint64_t>(0, out);
    REQUIRE_THROWS_WITH(dev.dispatch(co, "race_r", {2, 1, 1}, {128, 1, 1}, kb.bytes), Catch::Contains("lds_race"));
    DispatchOptions opts;
    opts.relaxed = true;
    std::ostringstream warn;
    opts.warnings = &warn;
    Counters c = dev.dispatch(co, "race_r", {2, 1, 1}, {128, 1, 1}, kb.bytes, opts);
    INFO(warn.str());
    REQUIRE(c.findings.size() == 1);  // the read of wave 1 (round robin: both writes come first)
    CHECK(c.findings[0].rule == "lds_race");
    CHECK(c.findings[0].count == 4);  // both waves, two workgroups
    CHECK(count_lines(warn.str(), "mlaemu: warning [lds_race]") == 1);
    auto v = dev.read_vector<uint32_t>(out, 128);
    for (uint32_t t = 0; t < 128; ++t) CHECK(v[t] == (t ^ 64));
    DispatchOptions off;
    off.check_lds_race = false;
    CHECK(dev.dispatch(co, "race_r", {2, 1, 1}, {128, 1, 1}, kb.bytes, off).findings.empty());
  }
}

TEST_CASE("relaxed: bounds and unsupported instructions stay errors", "[relaxed]") {
  for (Gfx g : kTargets) {
    DispatchOptions relaxed;
    relaxed.relaxed = true;
    std::ostringstream warn;
    relaxed.warnings = &warn;
    try {
      run_wave(g, "oob_r", "  global_load_dword v20, v1, s[4:5] offset:1024\n  s_waitcnt vmcnt(0)\n", ramp_inputs(),
               std::vector<uint32_t>(256, 0), {}, relaxed);
      FAIL("expected out_of_bounds");
    } catch (const Error& e) {
      CHECK(e.rule == "out_of_bounds");
    }
    try {
      run_wave(g, "unsup_r", "  v_sin_f32 v20, v10\n", ramp_inputs(), std::vector<uint32_t>(256, 0), {}, relaxed);
      FAIL("expected unsupported");
    } catch (const Error& e) {
      CHECK(e.rule == "unsupported");
    }
    CHECK(warn.str().empty());
  }
}

TEST_CASE("relaxed: mlaemu run --relaxed warns on stderr and finishes", "[relaxed][json]") {
  fs::path exe = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "emulator" / "mlaemu";
  REQUIRE(fs::exists(exe));
  Gfx g = Gfx::gfx942;
  std::string body = R"(  s_load_dwordx2 s[4:5], s[0:1], 0x0
  v_lshlrev_b32 v1, 2, v0
  s_waitcnt lgkmcnt(0)
  global_load_dword v2, v1, s[4:5]
  v_add_u32 v3, v2, v2
  s_waitcnt vmcnt(0)
  global_store_dword v1, v3, s[4:5]
  s_waitcnt vmcnt(0)
  s_endpgm)";
  std::string co = assemble_file(kernel_src("cli_relaxed", g, body), g, "cli_relaxed");
  fs::path dir = tmp_root() / "cli_relaxed";
  fs::create_directories(dir);
  nlohmann::json j = {{"code_object", co},
                      {"kernel", "cli_relaxed"},
                      {"grid", {1}},
                      {"block", {64}},
                      {"buffers", {{{"name", "buf"}, {"size", 256}, {"fill", 1}, {"dtype", "<u4"}}}},
                      {"kernarg", {{"fields", {{{"offset", 0}, {"buffer", "buf"}}}}}},
                      {"out_dir", "out"}};
  std::ofstream(dir / "d.json") << j.dump(2);
  std::string out;
  CHECK(run_cmd(exe.string() + " run " + (dir / "d.json").string(), &out) != 0);
  CHECK(out.find("error [waitcnt]") != std::string::npos);
  REQUIRE(run_cmd(exe.string() + " run --relaxed " + (dir / "d.json").string(), &out) == 0);
  CHECK(count_lines(out, "mlaemu: warning [waitcnt]") == 1);
  CHECK(out.find("v_add_u32") != std::string::npos);
  CHECK(out.find("\"findings\"") != std::string::npos);
}
