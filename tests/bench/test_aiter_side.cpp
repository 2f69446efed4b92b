// mlabench --aiter-dir (bench/aiter_side.h): aiter's launch restated (get_meta_param's split
// choice, v1_0's work distribution), the explicit-assignment machine model, the "not run" path
// without aiter, and the emulator's in-flight load counter on our own decode kernel. No aiter
// checkout is needed.
#include <catch2/catch.hpp>

#include <cmath>

#include "bench/aiter_side.h"
#include "bench/bench.h"
#include "runtime/emulator_backend.h"

using namespace mla;
using namespace mla::bench;

TEST_CASE("aiter: get_meta_param's split choice, against values computed by hand from aiter/mla.py's formula") {
  // score(i) = bs*i / (ceil(bs*i / cu) * cu) * avg / (avg + 84.1 i), i = 1..16, first maximum.
  // bs = 1, 32K, 304 CUs: i/304 * 32768/(32768 + 84.1 i) grows with i -> 16 (seed 001's
  // "16 of 304 CUs"); likewise bs 8 (128/304 at i = 16) and bs 16 (256/304).
  CHECK(aiter_meta_splits(1, 32768, 16, 1, false, 304) == 16);
  CHECK(aiter_meta_splits(8, 8 * 32768, 16, 1, false, 304) == 16);
  CHECK(aiter_meta_splits(16, 16 * 262144, 16, 1, false, 304) == 16);
  // bs = 64, 4096 tokens each: i = 4: 256/304 * 4096/4432.4 = 0.778; i = 9: 576/608 * 4096/4852.9
  // = 0.800 (the best); i = 8: 512/608 * 0.859 = 0.723; i = 14: 896/912 * 0.777 = 0.763.
  CHECK(aiter_meta_splits(64, 64 * 4096, 16, 1, false, 304) == 9);
  // bs = 32, 1000 tokens: i = 9: 288/304 * 1000/1756.9 = 0.539 beats i = 4 (0.315) and i = 16 (0.224).
  CHECK(aiter_meta_splits(32, 32 * 1000, 16, 1, false, 304) == 9);
  // bs = 100, 8192 tokens: i = 3: 300/304 * 8192/8444.3 = 0.957.
  CHECK(aiter_meta_splits(100, 100 * 8192, 16, 1, false, 304) == 3);
  // bs = 3, 50 tokens (bf16 q: no block cap): 3i/304 * 50/(50 + 84.1 i) still grows -> 16.
  CHECK(aiter_meta_splits(3, 150, 16, 1, false, 304) == 16);
  // fp8 q, 16 heads (min_block_n 128): bs 4 x 300 tokens: auto 16, cap ceil(300/128) = 3, then
  // floor(|300 - 1| / 128) + 1 = 3.
  CHECK(aiter_meta_splits(4, 1200, 16, 1, true, 304) == 3);
  // fp8, bs 2 x 100 tokens: cap ceil(100/128) = 1.
  CHECK(aiter_meta_splits(2, 200, 16, 1, true, 304) == 1);
  // fp8, bs 24 x 68433 on 256 CUs: i = 10: 240/256 * 68433/69274 = 0.926 (i = 16: 384/512 ... = 0.74).
  CHECK(aiter_meta_splits(24, 24 * 68433, 16, 1, true, 256) == 10);
  CHECK_THROWS(aiter_meta_splits(1, 100, 12, 1, true, 304));  // no fp8 block size for 12 rows
}

TEST_CASE("aiter: v1_0 metadata's splits and work_indptr distribution, by hand") {
  CHECK(aiter_v1_0_splits(rt::Target::gfx942, 32768, 1, 304) == 16);
  CHECK(aiter_v1_0_splits(rt::Target::gfx942, 100, 64, 304) == 16);
  // gfx950: min(len / 196, ceil(256 / batch)): 68433 / 196 = 349; ceil(256/16) = 16, ceil(256/24) = 11.
  CHECK(aiter_v1_0_splits(rt::Target::gfx950, 68433, 16, 256) == 16);
  CHECK(aiter_v1_0_splits(rt::Target::gfx950, 68433, 24, 256) == 11);
  CHECK(aiter_v1_0_splits(rt::Target::gfx950, 1000, 1, 256) == 5);
  CHECK(aiter_v1_0_splits(rt::Target::gfx950, 68433, 1, 256, 8) == 8);
  // 10 items on 4 CUs: 10 / 4 = 2, 10 % 4 = 2 -> CUs 0, 1 take 3 each, CUs 2, 3 take 2 each.
  CHECK(aiter_v1_0_cu_of_items(10, 4) == std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 3, 3});
  // Fewer items than CUs: item i on CU i.
  CHECK(aiter_v1_0_cu_of_items(3, 304) == std::vector<int>{0, 1, 2});
  CHECK(round_robin_cus(5, 2) == std::vector<int>{0, 1, 0, 1, 0});
  // The launch of a seed-001 shape: 16 items of 2048 tokens per request, each on its own CU.
  const auto shapes = seed001_shapes();
  const AiterLaunch l = aiter_launch_for(shapes[0], 304);  // 32K x1
  CHECK(l.stem == "mla_a16w8_qh16_m16x4_n16x1_coex0_mask1_ps");
  CHECK(l.splits == 16);
  REQUIRE(l.item_tokens.size() == 16);
  CHECK(l.item_tokens[0] == 2048);
  CHECK(l.cu_of_item[15] == 15);
  CHECK(l.reduce_entries == 1);
  CHECK(l.reduce_splits == 16);
  CHECK(aiter_launch_for(parse_shape("gfx942:fp8/fp8:h16:pg1:1000"), 304).stem.empty());
}

TEST_CASE("aiter: the model with an explicit unit -> CU assignment, against a hand computation and model_time") {
  Machine m = machine_for(rt::Target::gfx942);
  m.cus = 4;
  m.hbm_bytes_per_s = 1e12;
  m.clock_hz = 1e9;
  m.little_latency_s = 1e-6;
  m.unit_fill_s = 1e-6;
  m.cu_port_bytes_per_clk = 64;  // 64 GB/s port
  m.launch_s = 5e-6;
  KernelFacts f;
  f.tile_tokens = 1;
  f.read_per_token = 1000;
  f.read_per_unit = 0;
  f.distinct_per_token = 1000;
  f.write_final_unit = 0;
  f.inflight_bytes_per_wg = 16000;  // 16 KB / 1 us = 16 GB/s per CU
  f.consumers = 4;
  f.max_resident_wgs = 1;
  f.hot_loop_cycles = 0;
  const std::vector<ModelUnit> units = {{1000, false}, {1000, false}, {1000, false}};
  // All three on CU 0: 3e6 bytes at 16 GB/s = 187.5 us, + 3 fills (one resident) = 190.5 us;
  // HBM floor 3e6 / 1e12 = 3 us; + one launch (no reduce) = 195.5 us.
  ModeledTime t = model_time_assigned(m, f, units, {0, 0, 0}, 0, 0, 1);
  CHECK(t.decode_s == Approx(190.5e-6));
  CHECK(t.total_s == Approx(195.5e-6));
  CHECK(t.bound == "bytes in flight (Little)");
  // Spread over three CUs: 1e6 / 16e9 = 62.5 us + 1 fill.
  t = model_time_assigned(m, f, units, {0, 1, 2}, 0, 0, 1);
  CHECK(t.decode_s == Approx(63.5e-6));
  // model_time hands unit i to CU i mod C (hand computation, not the shared code): five units
  // on 4 CUs put units 0 and 4 on CU 0: 2e6 bytes at 16 GB/s = 125 us + 2 fills = 127 us.
  {
    const std::vector<ModelUnit> five = {{1000, false}, {1000, false}, {1000, false}, {1000, false}, {1000, false}};
    CHECK(model_time(m, f, five, 0, 0, 1).decode_s == Approx(127e-6));
  }
  // Round robin is model_time's assignment: the two agree on a real plan's units.
  f.hot_loop_cycles = 300;
  f.write_partial_unit = 4096;
  f.reduce_per_entry = 100;
  f.reduce_per_split = 10;
  std::vector<ModelUnit> many;
  for (int i = 0; i < 11; ++i) many.push_back({100 + 37 * i, i % 3 != 0});
  ModeledTime a = model_time(m, f, many, 2, 7, 3);
  ModeledTime b = model_time_assigned(m, f, many, round_robin_cus(11, 4), 2, 7, 3);
  CHECK(a.total_s == b.total_s);
  CHECK(a.bound == b.bound);
  CHECK_THROWS(model_time_assigned(m, f, units, {0, 4, 0}, 0, 0, 1));  // CU out of range
  CHECK_THROWS(model_time_assigned(m, f, units, {0, 1}, 0, 0, 1));     // one CU per unit
}

TEST_CASE("aiter: without --aiter-dir every shape's aiter columns say \"not run\", and a bad directory is an error") {
  std::vector<ShapeResult> v(2);
  v[0].shape = seed001_shapes()[0];
  v[1].shape = parse_shape("gfx942:fp8/fp8:h16:pg1:1000");
  v[0].modeled.total_s = v[1].modeled.total_s = 50e-6;
  add_aiter_sides(v, AiterSideOptions{});
  for (const auto& x : v) {
    REQUIRE(x.aiter);
    CHECK_FALSE(x.aiter->ran);
    CHECK(x.aiter->not_run.find("not run") != std::string::npos);
    CHECK(x.to_json()["aiter"]["ran"] == false);
  }
  const std::string md = markdown_report(v, {});
  CHECK(md.find("| not run | not run | not run |") != std::string::npos);
  CHECK(aiter_markdown(v).find("| not run |") != std::string::npos);
  AiterSideOptions bad;
  bad.aiter_dir = "/nonexistent/aiter";
  CHECK_THROWS_WITH(add_aiter_sides(v, bad), Catch::Contains("has no hsa/gfx942/mla/mla_asm.csv"));
}

TEST_CASE("aiter: the emulator's in-flight load counter on our decode kernel agrees with the static producer analysis") {
  // gfx942 bf16/fp8 16 heads page 1 (seed 001's kernel) on a 4-CU problem of long units, so that
  // the producer loop reaches its steady state.
  const BenchShape s = parse_shape("gfx942:bf16/fp8:h16:pg1:4096");
  const double stat = producer_inflight_bytes(decode_asm_for(s.shape));
  rt::ProblemParams pp;
  pp.target = s.shape.target;
  pp.heads = s.shape.heads;
  pp.q_dtype = s.shape.q_dtype;
  pp.kv_dtype = s.shape.kv_dtype;
  pp.page_size = 1;
  pp.kv_lens = s.kv_lens;
  auto p = rt::make_random_problem(pp);
  rt::EmulatorRunOptions opts;
  opts.num_cus = 4;
  opts.workgroups_per_cu = 1;
  auto r = rt::run_decode_on_emulator(p, catalog_for(s.shape).select(s.shape), opts);
  const double wave = double(r.decode.total.vm_load_peak_wave_bytes);
  const double wg = double(r.decode.total.vm_load_peak_wg_bytes);
  INFO("static producer " << stat << " B, emulator peak per wave " << wave << " B, per workgroup " << wg << " B");
  REQUIRE(stat > 0);
  CHECK(wg >= wave);
  // The KV part agrees exactly: one 36 KiB slot (4 tiles x 16 tokens x 576 B) in flight. The
  // static replay keeps the page ids of 4 tiles outstanding at its peak (1 KiB); on the emulator's
  // interleaving one 256-byte page-id load is outstanding then (37,888 vs 37,120 B).
  const double slot = 4 * 16 * 576;
  CHECK(wave >= slot);
  CHECK(stat >= slot);
  CHECK(std::fabs(wave - stat) <= 1024);
  CHECK(wave == Approx(stat).epsilon(0.03));
}

TEST_CASE("aiter: v1_2 (fast_mode) metadata spreads a request over the CUs, by hand") {
  // 32K x1, 304 CUs, 16-token blocks: 2048 blocks + 16 overhead = 2064; payload ceil(2064/304) +
  // 16 = 23, so each CU takes 23 - 16 = 7 blocks (112 tokens); CU 292 finds 4 blocks left, which
  // fit with their overhead (4 + 16 <= 23): 292 items of 112 tokens and one of 64, on CUs 0..292.
  const AiterLaunch l = aiter_v1_2_launch_for(seed001_shapes()[0], 304);
  REQUIRE(l.item_tokens.size() == 293);
  CHECK(l.item_tokens[0] == 112);
  CHECK(l.item_tokens[291] == 112);
  CHECK(l.item_tokens[292] == 64);
  CHECK(l.cu_of_item[292] == 292);
  CHECK(l.splits == 293);
  CHECK(l.reduce_entries == 1);
  CHECK(l.reduce_splits == 293);
  CHECK(l.item_partial[0]);
  // Two short requests (100 and 50 tokens: 7 and 4 blocks) on 4 CUs: payload ceil(43/4) + 16 = 27;
  // CU 0 takes request 0 whole (7 + 16 <= 27) and has 4 left, too few for request 1 (4 + 16),
  // and no more than the overhead to split it: request 1 goes whole to CU 1. No reduce.
  const AiterLaunch m = aiter_v1_2_launch_for(parse_shape("gfx942:bf16/fp8:h16:pg1:100,50"), 4);
  CHECK(m.item_tokens == std::vector<int>{100, 50});
  CHECK(m.cu_of_item == std::vector<int>{0, 1});
  CHECK(m.item_partial == std::vector<bool>{false, false});
  CHECK(m.reduce_entries == 0);
}
