// mlabench: the plot script's series labels, the linear scaling of the emulator counters (the basis of the
// extrapolation), and the issue's targets on the counters and the planner (never wall time).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bench/bench.h"
#include "bench/indexer.h"
#include "runtime/cost_model.h"
#include "kernels/mla_reduce.h"

using namespace mla;
using namespace mla::bench;

namespace {

// The scaled runs measure every seed kernel on units of this many tiles; the linear-scaling
// test below checks that the unit length does not matter.
MeasureOptions quick() {
  MeasureOptions o;
  o.unit_tiles = 3;
  o.run_mca = false;
  o.verbose = false;
  return o;
}

const std::vector<ShapeResult>& seed_results() {
  static std::vector<ShapeResult> r = [] {
    std::vector<ShapeResult> v;
    for (const auto& s : seed001_shapes()) v.push_back(measure_shape(s, quick()));
    for (const auto& s : seed000_shapes()) v.push_back(measure_shape(s, quick()));
    return v;
  }();
  return r;
}

}  // namespace

TEST_CASE("bench: decode counters scale linearly with tokens and units, and the extrapolation matches full-scale emulation") {
  // The seed-001 kernel (gfx942 bf16 q, fp8 KV, 16 heads, page 1) on a shape small enough to
  // emulate at full scale on all 304 CUs.
  BenchShape s = parse_shape("gfx942:bf16/fp8:h16:pg1:8192,3001");
  MeasureOptions full = quick();
  full.full_scale_max_tokens = 1 << 30;
  ShapeResult f = measure_shape(s, full);
  REQUIRE(f.full_scale);
  for (int tiles : {2, 5}) {
    MeasureOptions o = quick();
    o.unit_tiles = tiles;
    ShapeResult x = measure_shape(s, o);
    INFO("unit tiles " << tiles << ": fit residual " << x.fit_residual);
    REQUIRE_FALSE(x.full_scale);
    CHECK(x.fit_residual <= 1e-3);  // four runs, two features: the counters are linear
    CHECK(std::fabs(x.read_bytes / f.read_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.written_bytes / f.written_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.read_distinct_bytes / f.read_distinct_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.macs_issued / f.macs_issued - 1) <= 2e-3);
  }
}

TEST_CASE("bench: 96 and 128 heads (2 and 3 row groups) fit without a singular matrix, and extrapolate to full-scale emulation") {
  // Issue #34: the four scaled runs split 96 and 128 heads' row groups alike (or not at all), so
  // the reduce's entries and splits (and units vs Q blocks) did not vary; the fit now adds runs of
  // one request over more CUs until every feature the full plan needs varies. The shapes are the
  // issue's (52 requests at 96 heads, one request at 128 heads), shortened to emulate at full scale
  // and cut to whole 32-token tiles: the fit prices MACs per token of whole-tile units, and a
  // request's partial last tile (computed whole) is 1/10 of a 300-token request's MACs.
  for (const char* spec : {"gfx950:fp8/fp8:h96:pg1:320x52", "gfx950:fp8/fp8:h128:pg1:2336"}) {
    BenchShape s = parse_shape(spec);
    MeasureOptions full = quick();
    full.full_scale_max_tokens = 1 << 30;
    const ShapeResult f = measure_shape(s, full);
    REQUIRE(f.full_scale);
    MeasureOptions o = quick();
    o.unit_tiles = 2;
    ShapeResult x;
    REQUIRE_NOTHROW(x = measure_shape(s, o));
    INFO(spec << ": " << x.samples.size() << " scaled runs, fit residual " << x.fit_residual << ", reduce entries "
              << x.reduce_entries);
    REQUIRE_FALSE(x.full_scale);
    CHECK(x.samples.size() > 4);     // the four runs did not separate the features
    CHECK(x.reduce_entries > 0);     // the full plan splits: the reduce's fit was needed
    CHECK(x.fit_residual <= 1e-3);
    CHECK(std::fabs(x.read_bytes / f.read_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.written_bytes / f.written_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.read_distinct_bytes / f.read_distinct_bytes - 1) <= 2e-3);
    CHECK(std::fabs(x.macs_issued / f.macs_issued - 1) <= 2e-3);
    CHECK(x.modeled.total_s > 0);
  }
}

TEST_CASE("bench: --shape takes qsN and names a bad field, its value and what is allowed") {
  const BenchShape s = parse_shape("gfx950:fp8/fp8:h128:qs8:pg16:4096x3");
  CHECK(s.shape.heads == 128);
  CHECK(s.shape.qseqlen == 8);
  CHECK(s.shape.page_size == 16);
  CHECK(s.kv_lens == std::vector<int>{4096, 4096, 4096});
  CHECK(parse_shape("gfx942:bf16/fp8:h16:pg1:100,7").shape.qseqlen == 1);
  CHECK_THROWS_WITH(parse_shape("gfx950:fp8/fp8:h128:qs9:pg1:100"), Catch::Contains("qseqlen 9 (allowed: 1..8)"));
  CHECK_THROWS_WITH(parse_shape("gfx950:fp8/fp8:h129:pg1:100"), Catch::Contains("heads 129 (allowed: 1..128)"));
  CHECK_THROWS_WITH(parse_shape("gfx950:fp8/fp8:h96:pg12:100"), Catch::Contains("page size 12 (allowed: 1 or a power of two up to 256)"));
  CHECK_THROWS_WITH(parse_shape("gfx950:fp8/fp8:h96:qs4:pg16:3"), Catch::Contains("kv length 3 < qseqlen 4"));
  CHECK_THROWS_WITH(parse_shape("gfx950:fp8/fp8:hx:pg16:3"), Catch::Contains("heads 'x' is not a whole number"));
}

TEST_CASE("bench: global reads within 1.03x of what the plan needs (KV, indices, Q per unit, tables, partials), every seed shape", "[shared-fixture]") {
  // The issue's stricter ratio (Q counted once) is reported, not asserted: the current kernel
  // reads Q once per work unit and misses 1.03 on the small seed-001 shapes (docs/performance.md).
  for (const auto& r : seed_results()) {
    INFO(r.shape.name << ": moved / (min + partials) " << r.ratio_moved_over_plan << ", read / plan-needed "
                      << r.ratio_read_over_needed << ", partials / KV " << r.partial_over_kv);
    CHECK(r.ratio_moved_over_plan >= 1.0);  // nothing is read less than once
    CHECK(r.ratio_read_over_needed <= 1.03);
  }
}

TEST_CASE("bench: distinct bytes moved within 1.03x of KV + indices + Q (once) + O + the plan's partials, every seed shape", "[shared-fixture]") {
  // The issue's ratio with every address counted once per launch: nothing is read that the plan
  // does not need. Re-reads (Q by every unit of a request) are reported apart; the machine model
  // serves them from the L2 / Infinity Cache (docs/performance.md).
  for (const auto& r : seed_results()) {
    INFO(r.shape.name << ": distinct moved / (min + partials) " << r.ratio_distinct_moved_over_plan << ", read "
                      << r.read_bytes << ", distinct " << r.read_distinct_bytes);
    CHECK(r.ratio_distinct_moved_over_plan >= 0.999);  // KV, Q, indices and partials are all read
    CHECK(r.ratio_distinct_moved_over_plan <= 1.03);
    CHECK(r.read_distinct_bytes <= r.read_bytes);
  }
}

TEST_CASE("bench: least-squares fit recovers exact coefficients and rejects samples that do not vary a feature") {
  const std::vector<std::vector<double>> x = {{4, 100, 1}, {4, 200, 1}, {4, 200, 2}, {8, 200, 8}, {3, 50, 5}};
  std::vector<double> y;
  for (const auto& r : x) y.push_back(7.5 * r[0] + 0.25 * r[1] - 3 * r[2]);
  FitN f = fit_linear(x, y);
  REQUIRE(f.c.size() == 3);
  CHECK(f.c[0] == Approx(7.5));
  CHECK(f.c[1] == Approx(0.25));
  CHECK(f.c[2] == Approx(-3.0));
  CHECK(f.residual < 1e-9);
  const std::vector<std::vector<double>> flat = {{1, 2, 3}, {2, 4, 6}, {3, 6, 9}};
  CHECK_THROWS_WITH(fit_linear(flat, {1, 2, 3}), Catch::Contains("singular"));
  // The rank the fit can separate: all three above, one of the flat ones, two where units equal
  // Q blocks in every sample but tokens vary (96 heads' four runs before issue #34).
  CHECK(feature_rank(x) == 3);
  CHECK(feature_rank(flat) == 1);
  CHECK(feature_rank({{4, 17664, 4}, {4, 35328, 4}, {4, 35328, 4}, {16, 35328, 16}}) == 2);
}

TEST_CASE("bench: the CUs with work hold max/mean work <= 1.05", "[shared-fixture]") {
  for (const auto& r : seed_results()) {
    INFO(r.shape.name << ": " << r.cus_used << "/" << r.cus << " CUs, balance " << r.balance << ", bound " << r.modeled.bound);
    // The planner feeds fewer CUs where its HBM floor binds first (docs/planner.md): on every seed
    // shape the CUs stream faster than HBM (1.4x on MI300X, 1.5x on MI355X, modeled), so at the
    // crossing at least 60% of them work.
    CHECK(r.cus_used >= r.cus * 3 / 5);
    CHECK(r.balance <= 1.05);
  }
}

TEST_CASE("bench: the runtime's default plan is modeled within 1.02 of the best split count tried by brute force", "[shared-fixture]") {
  // Default plan = workgroups per CU from the kernel's occupancy (catalog.json). The brute force
  // cuts every request into the same number of splits and tries every count (issue #42's bar).
  for (const auto& r : seed_results()) {
    INFO(r.shape.name << ": plan " << r.modeled.total_s * 1e6 << " us, best " << r.brute.best_s * 1e6 << " us at "
                      << r.brute.best_splits << " splits");
    CHECK(r.plan_over_best >= 0.98);  // the plan's order may beat the brute force's sorted order slightly
    CHECK(r.plan_over_best <= 1.02);
    CHECK(r.brute.tried.size() >= 2);
  }
}

// Issue #42's mixed batches: lengths that differ, each plan modeled within 1.05 of the layer's
// lower bound (docs/performance.md "Lower bound"), and never above the bound's own floor.
TEST_CASE("bench: batches of lengths that differ are modeled within 1.05 of their lower bound") {
  const auto shapes = mixed_shapes();
  REQUIRE(shapes.size() == 5);
  for (const auto& s : shapes) {
    const ShapeResult r = measure_shape(s, quick());
    INFO(s.name << ": plan " << r.modeled.total_s * 1e6 << " us, bound " << r.lower_bound_s * 1e6 << " us");
    CHECK(r.lower_bound_s > 0);
    CHECK(r.modeled.total_s >= r.lower_bound_s * (1 - 1e-9));
    CHECK(r.modeled.total_s <= 1.05 * r.lower_bound_s);
  }
}

// Issue #43's sparse shapes (docs/sparse.md "Performance"): each query row's 2048 slots read once
// (656 bytes a slot from the fp8_ds_mla cache, 576 from fp8), the layer as run at or above its floor
// and, for now, within 1.4x of it (the issue asks 1.25x: not met at 1-4 rows, where each split's
// Q, entries and partial pass one workgroup's bytes in flight; docs/sparse.md), bytes moved within 1.4x of what every plan needs (1.05x asked: every split reads
// its Q again, 18 KB against a 1-2 tile split's 21-42 KB of entries and its 16 KB bf16 partial),
// no prefix launch.
TEST_CASE("bench: sparse shapes read each slot once, sit at or above their floor, two launches") {
  std::vector<BenchShape> picked;
  for (const auto& s : sparse_shapes())
    if (s.name == "V3.2 TP8 / GLM-5 TP4 x1 sq1" || s.name == "V3.2 TP8 / GLM-5 TP4 x16 sq2" ||
        s.name == "GLM-5 TP8 x64 sq1" || s.name == "16 heads fp8/fp8 x128 sq1")
      picked.push_back(s);
  REQUIRE(picked.size() == 4);
  for (const auto& s : picked) {
    const ShapeResult r = measure_shape(s, quick());
    const double entry = s.shape.kv_ds_mla ? 656.0 : 576.0;
    INFO(s.name << ": as run " << r.as_run_s * 1e6 << " us, floor " << r.sparse_floor_s * 1e6 << " us, KV read per slot "
                << r.facts.kv_read_per_token << ", bytes moved / needed " << r.ratio_moved_over_plan);
    CHECK(r.facts.kv_read_per_token >= entry * (1 - 1e-9));
    CHECK(r.facts.kv_read_per_token <= entry * 1.001);
    CHECK(r.sparse_floor_s > 0);
    CHECK(r.as_run_s >= r.sparse_floor_s * (1 - 1e-9));
    CHECK(r.as_run_s <= 1.4 * r.sparse_floor_s);
    CHECK(r.ratio_moved_over_plan <= 1.4);
    CHECK(r.launches_as_run == 2);
  }
}

// The launches as run are the C runtime's own count (mla_plan_info through measure_host_costs),
// and the one-launch price is its decode launch plus 1 + 5 S trips (by hand).
TEST_CASE("bench: launches per layer as the runtime runs them, and the one-launch price", "[shared-fixture]") {
  std::vector<BenchShape> shapes;
  for (const auto& x : seed_results()) shapes.push_back(x.shape);
  const std::vector<HostCost> host = measure_host_costs(shapes, 2);
  REQUIRE(host.size() == seed_results().size());
  for (size_t i = 0; i < host.size(); ++i) {
    const ShapeResult& x = seed_results()[i];
    INFO(x.shape.name);
    const Machine m = machine_for(x.shape.shape.target);
    CHECK(x.launches_as_run == host[i].launches);
    CHECK(x.launches_priced == (x.reduce_entries > 0 ? 2 : 1));
    CHECK(x.as_run_s == Approx(x.modeled.total_s + (host[i].launches - x.launches_priced) * m.launch_s));
    // Every seed shape splits a request (>= 2 partials), so one launch pays the merge's trips:
    // 1 + 5 S of half a unit fill, more than the merge's bytes at HBM bandwidth here.
    REQUIRE(x.one_launch_max_splits >= 2);
    CHECK(x.one_launch_merge_s == Approx((1 + 5 * x.one_launch_max_splits) * m.unit_fill_s / 2));
    CHECK(x.one_launch_s > x.one_launch_merge_s + m.launch_s);
  }
}

TEST_CASE("bench: modeled time spread within each same-total-bytes group <= 1.03", "[shared-fixture]") {
  auto g = same_bytes_groups(seed_results());
  REQUIRE(g.size() == 6);
  for (const auto& x : g) {
    INFO(x.members << ": " << x.lo << " .. " << x.hi << " us");
    CHECK(x.spread <= 1.03);
  }
}

TEST_CASE("bench: MFMA MACs issued over useful: 16 heads are not padded, 12 heads pay the 16-row block", "[shared-fixture]") {
  for (const auto& r : seed_results()) {
    INFO(r.shape.name << ": " << r.mac_ratio);
    const double rows_padding = 16.0 / r.shape.shape.heads;  // one 16-row MFMA block per consumer
    // gfx942 bf16/fp8 splits Q into fp8 hi + lo: QK issues its 576 MACs per (row, token) twice
    // (on fp8 MFMAs, at twice the bf16 rate: the same matrix-pipe time as one bf16 QK).
    const bool split = r.shape.shape.target == rt::Target::gfx942 && r.shape.shape.q_dtype == rt::DType::bf16 &&
                       r.shape.shape.kv_dtype == rt::DType::fp8;
    const double expected = rows_padding * (split ? (2.0 * 576 + 512) / (576 + 512) : 1.0);
    CHECK(r.mac_ratio >= expected * 0.999);
    CHECK(r.mac_ratio <= expected * 1.01);  // + masked tokens of partial tiles
  }
}

TEST_CASE("bench: static bytes in flight and hot-loop path on a hand-written loop") {
  const std::string text = R"(
.Lproducer_loop_1:
	s_waitcnt vmcnt(2)
	ds_write_b128 v8, v[12:15]
	s_waitcnt vmcnt(0)
	global_load_dwordx4 v[12:15], v[8:9], off
	global_load_dwordx4 v[16:19], v[8:9], off offset:16
	s_cbranch_scc1 .Lpartial_2
	global_load_dword v6, v8, s[8:9]
	s_branch .Lloaded_3
.Lpartial_2:
	global_load_dwordx4 v[20:23], v[8:9], off
.Lloaded_3:
	s_cbranch_scc1 .Lproducer_loop_1
.Lconsumer_loop_4:
	s_cbranch_scc1 .Ltile_absent_8
	v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[4:5], a[0:1], v[0:3]
	s_cbranch_scc1 .Lskip_5
	v_cndmask_b32 v0, v1, v0, vcc
.Lskip_5:
	s_cbranch_vccz .Lrescaled_7
	v_pk_mul_f32 v[10:11], v[10:11], v[12:13] op_sel_hi:[1,0]
.Lrescaled_7:
	v_exp_f32 v1, v1
	s_nop 1  ; hazard
	ds_read_b64 v[2:3], v4
	s_waitcnt lgkmcnt(0)
.Ltile_absent_8:
	s_barrier
	s_cbranch_scc1 .Lconsumer_loop_4
)";
  // In flight after the loop's loads: 2 x 1 KiB + 256 B (the partial path is jumped over).
  CHECK(producer_inflight_bytes(text) == 2 * 1024 + 256);
  HotLoop h = analyze_hot_loop(text, rt::Target::gfx942, false);
  // Steady state: the tile is present (fall through), the masked-tile block and the O rescale
  // are skipped; s_waitcnt is kept (0 cycles). Every branch on the path issues, taken or not,
  // the back-branch too.
  REQUIRE(h.insts.size() == 10);
  CHECK(h.insts == std::vector<std::string>{"s_cbranch_scc1 .Ltile_absent_8",
                                            "v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[4:5], a[0:1], v[0:3]",
                                            "s_cbranch_scc1 .Lskip_5", "s_cbranch_vccz .Lrescaled_7",
                                            "v_exp_f32 v1, v1", "s_nop 1", "ds_read_b64 v[2:3], v4",
                                            "s_waitcnt lgkmcnt(0)", "s_barrier", "s_cbranch_scc1 .Lconsumer_loop_4"});
  // 4-pass MFMA 16 + transcendental 16 + s_nop 1 (2 wait states) 8 + ds_read_b64 4 + barrier 4
  // + 4 branches x 4.
  CHECK(h.issue_cycles == 16 + 16 + 8 + 4 + 4 + 4 * 4);
  CHECK(h.mfma == 1);
  CHECK(h.valu == 1);
  CHECK(h.salu == 6);  // the 4 branches, the barrier and s_waitcnt (s_nop is counted apart)
  // Co-issue: the first branch, the MFMA, then the branches and the barrier issue beside the
  // MFMA's 4 passes; v_exp waits for its VALU slot after the MFMA. A serial sum would be 64.
  CHECK(h.coissue_cycles < h.issue_cycles);
  // A forward branch the analysis has no steady-state rule for is an error, not a guess.
  std::string unknown = text;
  unknown.replace(unknown.find(".Lskip_5\n"), 8, ".Lother_5");
  unknown.replace(unknown.find(".Lskip_5:"), 9, ".Lother_5:");
  CHECK_THROWS_WITH(analyze_hot_loop(unknown, rt::Target::gfx942, false),
                    Catch::Contains("no steady-state rule") && Catch::Contains(".Lother_5"));
}

// Two producer loops (the LDS-DMA prefix kernel's two producer waves) add up; a wave counts at
// most 63 loads in flight (what vmcnt holds, modeled).
TEST_CASE("bench: static bytes in flight sum the producer loops, at most 63 loads per wave") {
  auto loop = [](int id, int loads, int wait) {
    std::string t = fmt::format(".Lproducer_loop_{}:\n\ts_waitcnt vmcnt({})\n\ts_barrier\n", id, wait);
    for (int i = 0; i < loads; ++i) t += "\tbuffer_load_dwordx4 v6, s[36:39], 0 offen lds\n";
    return t + fmt::format("\ts_cbranch_scc1 .Lproducer_loop_{}\n\ts_endpgm\n", id);
  };
  // 19 loads per iteration, 38 kept across the barrier: 57 in flight at the peak.
  CHECK(producer_inflight_bytes(loop(1, 19, 38)) == 57 * 1024);
  // 40 loads per iteration, 50 kept: 90 issued, 63 counted.
  CHECK(producer_inflight_bytes(loop(1, 40, 50)) == 63 * 1024);
  CHECK(producer_inflight_bytes(loop(1, 40, 50) + loop(2, 19, 38)) == (63 + 57) * 1024);
  CHECK_THROWS_WITH(producer_inflight_bytes("\ts_endpgm\n"), Catch::Contains("no producer loop"));
}

// A kernel whose waves stream the KV themselves (the wide prefix kernel) runs a prologue, its
// loop, then an epilogue; the static replay counts each phase's peak, per wave x waves.
TEST_CASE("bench: a phased kernel's prologue loads and epilogue stores in flight, on hand-written assembly") {
  std::string text = R"(
	buffer_load_dwordx4 v6, s[36:39], 0 offen lds
	buffer_load_dword v5, v6, s[36:39], 0 offen
	s_waitcnt vmcnt(1)
	buffer_load_dwordx2 v[8:9], v6, s[36:39], 0 offen
	s_cbranch_scc1 .Lskip_1
	buffer_load_dwordx4 v6, s[36:39], 0 offen lds
.Lskip_1:
	s_waitcnt vmcnt(0)
	s_barrier
	buffer_load_dwordx4 v6, s[36:39], 0 offen lds
	buffer_load_dwordx4 v6, s[36:39], 0 offen lds
.Lconsumer_loop_2:
	buffer_load_dwordx4 v6, s[36:39], 0 offen lds
	s_cbranch_scc1 .Lconsumer_loop_2
	buffer_load_dword v5, v6, s[36:39], 0 offen
)";
  for (int i = 0; i < 70; ++i) text += "\tbuffer_store_dwordx2 v[8:9], v6, s[36:39], 0 offen\n";
  text += "\ts_waitcnt vmcnt(0)\n\tbuffer_store_dword v5, v6, s[36:39], 0 offen\n\ts_endpgm\n";
  const gen::KernelPhases ph = gen::kernel_phases_inflight(text, 2);
  // Prologue (up to the first s_barrier): 1 KiB + 256 B, the wait keeps the 256 B, + 512 B, +
  // 1 KiB on the conditional branch's fall-through = 1,792 B a wave; the loads after the barrier
  // and in the loop do not count.
  CHECK(ph.prologue_load_bytes == 2 * (256 + 512 + 1024));
  // Epilogue (the loop's end to s_endpgm): a load then 70 stores of 512 B; a wave holds 63
  // operations, loads and stores alike (the load's slot carries no store bytes until a store
  // pushes it out): 63 x 512 B at the peak.
  CHECK(ph.epilogue_store_bytes == 2 * 63 * 512);
  CHECK(ph.to_json()["prologue_inflight_bytes"] == 2 * 1792);
  CHECK_THROWS_WITH(gen::kernel_phases_inflight(".Lconsumer_loop_2:\n\ts_cbranch_scc1 .Lconsumer_loop_2\n\ts_endpgm\n", 1),
                    Catch::Contains("no s_barrier"));
  // The persistent walk ends a unit with the branch to its meeting point instead (mla_decode.cpp).
  // Wider stores after the branch (out-of-line code) would raise the peak if they counted.
  std::string walk = text.substr(0, text.find("\ts_endpgm")) + "\ts_branch .Lunit_end_9\n.Lslow_3:\n";
  for (int i = 0; i < 70; ++i) walk += "\tbuffer_store_dwordx4 v[8:11], v6, s[36:39], 0 offen\n";
  walk += "\ts_endpgm\n";
  CHECK(gen::kernel_phases_inflight(walk, 2).epilogue_store_bytes == 2 * 63 * 512);
  std::string no_end = text.substr(0, text.find("\ts_endpgm"));
  CHECK_THROWS_WITH(gen::kernel_phases_inflight(no_end, 1), Catch::Contains("no end of the unit after the consumer loop"));
  std::string no_stores = text.substr(0, text.find("\tbuffer_store")) + "\ts_endpgm\n";
  CHECK_THROWS_WITH(gen::kernel_phases_inflight(no_stores, 1), Catch::Contains("0 epilogue store bytes"));
}

// Hand-computed: 1 CU at 1 GHz, a 64 GB/s port, 1 us latency, 1 us fill. Ring 16 KB in flight:
// 16 GB/s; prologue 32 KB: 32 GB/s; epilogue 128 KB: capped by the port at 64 GB/s.
TEST_CASE("bench: a phased kernel's units add their prologue and epilogue to the stream (by hand)") {
  Machine m = machine_for(rt::Target::gfx950);
  m.cus = 1;
  m.hbm_bytes_per_s = 1e15;  // no HBM floor
  m.clock_hz = 1e9;
  m.little_latency_s = 1e-6;
  m.unit_fill_s = 1e-6;
  m.cu_port_bytes_per_clk = 64;
  m.launch_s = 5e-6;
  KernelFacts f;
  f.tile_tokens = 1;
  f.read_per_token = 1000;
  f.read_per_unit = 8000;
  f.read_per_row = 500;
  f.write_partial_per_row = 2000;
  f.inflight_bytes_per_wg = 16000;
  f.prologue_inflight_bytes_per_wg = 32000;
  f.epilogue_inflight_bytes_per_wg = 128000;
  f.consumers = 4;
  f.max_resident_wgs = 1;
  f.hot_loop_cycles = 0;
  ModelUnit a{1000, true};
  a.rows = 96;  // prologue 8 KB + 48 KB = 56 KB at 32 GB/s = 1.75 us; epilogue 192 KB at 64 GB/s = 3 us
  ModelUnit b{2000, true};
  b.rows = 8;   // prologue 12 KB at 32 GB/s = 0.375 us < the 1 us fill; epilogue 16 KB = 0.25 us
  // Stream: 3e6 B at 16 GB/s = 187.5 us; phases 1.75 + 3 + 1 + 0.25 = 6 us.
  ModeledTime t = model_time_assigned(m, f, {a, b}, {0, 0}, 0, 0, 1);
  CHECK(t.decode_s == Approx(193.5e-6));
  CHECK(t.max_cu_phases_s == Approx(6e-6));
  CHECK(t.max_cu_mem_s == Approx(187.5e-6));
  // Not phased: everything in the stream, one fill per unit: (3e6 + 64e3 + 208e3) / 16e9 + 2 us.
  KernelFacts g = f;
  g.prologue_inflight_bytes_per_wg = g.epilogue_inflight_bytes_per_wg = 0;
  CHECK(model_time_assigned(m, g, {a, b}, {0, 0}, 0, 0, 1).decode_s == Approx((3e6 + 8000 * 2 + 104 * 500 + 104 * 2000) / 16e9 + 2e-6));
  g = f;
  g.max_resident_wgs = 2;
  CHECK_THROWS_WITH(model_time_assigned(m, g, {a, b}, {0, 0}, 0, 0, 1), Catch::Contains("phased kernel"));
}

TEST_CASE("bench: hardware mode builds and, without an AMD GPU, fails with a clear message") {
  HipOptions o;
  std::string table;
  try {
    hip_bench(seed000_shapes(), o, table);
    SUCCEED("an AMD GPU is present");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("no AMD GPU") != std::string::npos);
  }
  o.runs = 10;
  CHECK_THROWS_AS(hip_bench(seed000_shapes(), o, table), std::invalid_argument);
}

TEST_CASE("bench: hot-loop issue time / tile memory time <= 0.3: gfx950 fp8/fp8 at 8, 12 and 16 heads (serial table), gfx942 bf16/fp8 (co-issue model)", "[shared-fixture]") {
  // gfx942 bf16/fp8 meets it on the co-issue model only (0.294; the serial table's upper bound
  // is 0.48): with one consumer wave per SIMD its MFMAs must overlap its VALU, which the Q
  // split, the V widening beside QK, the early slot release and the read-ahead arrange.
  int checked = 0, checked942 = 0;
  for (const auto& r : seed_results())
    if (r.shape.shape.target == rt::Target::gfx950) {
      INFO(r.shape.name << ": " << r.issue_over_mem);
      CHECK(r.issue_over_mem <= 0.3);
      ++checked;
    } else {
      INFO(r.shape.name << ": " << r.coissue_over_mem << ", ring stall " << r.hot.ring_stall_cycles);
      CHECK(r.coissue_over_mem <= 0.3);
      CHECK(r.hot.ring_stall_cycles == 0);
      ++checked942;
    }
  CHECK(checked == 4);
  CHECK(checked942 == 20);
  for (const char* spec : {"gfx950:fp8/fp8:h8:pg1:4096x4", "gfx950:fp8/fp8:h16:pg128:4096x4"}) {
    ShapeResult r = measure_shape(parse_shape(spec), quick());
    INFO(spec << ": " << r.issue_over_mem << " (" << r.decode_kernel << ")");
    CHECK(r.issue_over_mem <= 0.3);
    CHECK(r.lds_bank_factor <= 1.1);  // conflict-free in the bank model, but for the odd group
  }
}

TEST_CASE("bench: co-issue cycles lie between the wave's issue floor and the serial table", "[shared-fixture]") {
  // One wave issues at most one instruction per 4-clock slot (s_waitcnt aside), and overlapping
  // MFMAs with other work can only shorten the serial sum.
  for (const auto& r : seed_results()) {
    int issued = 0;
    for (const auto& l : r.hot.insts)
      if (l.rfind("s_waitcnt", 0) != 0) ++issued;
    INFO(r.shape.name << ": co-issue " << r.hot.coissue_cycles << ", serial " << r.hot.issue_cycles << ", issued " << issued);
    CHECK(r.hot.coissue_cycles >= 4.0 * issued);
    CHECK(r.hot.coissue_cycles <= r.hot.issue_cycles);
    CHECK(r.coissue_over_mem <= r.issue_over_mem);
    CHECK(r.lds_over_mem > 0);
  }
}

// ---- Shared prefix (cascade) ---------------------------------------------------------------

namespace {
const BenchShape& k3_c16_pg128() {
  static const BenchShape s = [] {
    for (const auto& x : seed000_shapes())
      if (x.name == "K3 c16 pg128") return x;
    throw std::runtime_error("no K3 c16 pg128 shape");
  }();
  return s;
}
}  // namespace

TEST_CASE("bench: a scaled shared problem's cascade reads the prefix once per prefix row group and each unique part once") {
  // 16 requests x 12 heads = 192 rows: 2 prefix row groups of 96 (gfx950's LDS-DMA prefix kernel);
  // the per-request plan reads the prefix 16 times. Exact counts of the kv buffer's global reads
  // (every lane's access).
  const rt::DecodeShape& s = k3_c16_pg128().shape;
  const int shared = 1024, n = 16;  // 8 whole pages of 128
  std::vector<int> lens;
  double unique = 0, all = 0;
  for (int i = 0; i < n; ++i) {
    lens.push_back(shared + 40 + 7 * i);
    unique += 40 + 7 * i;
    all += lens.back();
  }
  const double row = rt::kQkDim * rt::elem_bytes(s.kv_dtype);
  const RunSample c = run_sample(s, lens, 4, 3, 1, {{0, n, shared}}, rt::CascadePolicy::always);
  REQUIRE(c.ran_prefix);
  // qseqlen 1 and every request a member: the unique parts run in the prefix launch too (one
  // unit of 12 rows each), no decode launch.
  CHECK(c.Gp == 2);
  CHECK(c.U == 0);
  CHECK(c.Np == 2.0 * shared + unique);
  CHECK(c.Npd == shared + unique);
  CHECK(c.prefix_kv_read == (2.0 * shared + unique) * row);
  CHECK(c.decode_kv_read == 0);
  CHECK(c.kv_distinct == (shared + unique) * row);
  // A lone request beside the group keeps the decode launch, which reads the unique parts.
  std::vector<int> with_lone = lens;
  with_lone.push_back(300);
  const RunSample l = run_sample(s, with_lone, 4, 3, 1, {{0, n, shared}}, rt::CascadePolicy::always);
  REQUIRE(l.ran_prefix);
  CHECK(l.Np == 2.0 * shared);
  CHECK(l.prefix_kv_read == 2.0 * shared * row);
  CHECK(l.decode_kv_read == (unique + 300) * row);
  const RunSample p = run_sample(s, lens, 4, 3, 1, {{0, n, shared}}, rt::CascadePolicy::never);
  CHECK_FALSE(p.ran_prefix);
  CHECK(p.decode_kv_read == all * row);
  CHECK(p.kv_distinct == c.kv_distinct);
}

TEST_CASE("bench: the prefix kernel's fitted facts reproduce a held-out emulator run within 0.5%", "[shared-fixture]") {
  const auto& r = seed_results();
  const auto it = std::find_if(r.begin(), r.end(), [](const ShapeResult& x) { return x.shape.name == "K3 c16 pg128"; });
  REQUIRE(it != r.end());
  REQUIRE(it->cascade);
  const CascadeResult& c = *it->cascade;
  CHECK(c.fit_residual <= 1e-3);
  // Not one of the fitted designs: a group of 12 (144 rows: a full 96-row group and a half-filled
  // one) on 6 CUs, unequal unique parts. Q reads and partial writes are priced per row.
  const int shared = 1536;
  std::vector<int> lens;
  for (int i = 0; i < 12; ++i) lens.push_back(shared + 33 + 50 * i);
  const RunSample x = run_sample(k3_c16_pg128().shape, lens, 6, 5, 1, {{0, 12, shared}}, rt::CascadePolicy::always);
  REQUIRE(x.ran_prefix);
  const KernelFacts& f = c.facts;
  auto near = [](double got, double want) { return std::fabs(got / want - 1) <= 5e-3; };
  INFO("prefix units " << x.Up << ", tokens " << x.Np << ", Q blocks " << x.Gp << ", rows " << x.Rp);
  REQUIRE(f.row_blocks == 6);
  CHECK(x.Gp == 2);
  // Rows: each prefix split's 96 + 48, and 12 for each member's unique part, which the prefix
  // launch runs too (qseqlen 1, every request a member) on one row block of 6, as the half-filled
  // row group computes 3.
  CHECK(x.Up > x.Gp);
  CHECK(x.NBp < 6 * x.Np);
  CHECK(f.read_per_row > 0);
  CHECK(near(f.read_per_unit * x.Up + f.read_per_token * x.Np + f.read_per_row * x.Rp, x.prefix_read));
  CHECK(near(f.distinct_per_unit * x.Up + f.distinct_per_token * x.Npd + f.distinct_per_q_group * x.Rpd,
             x.prefix_read_distinct));
  CHECK(near(f.write_partial_unit * x.Up + f.write_partial_per_row * x.Rp, x.prefix_written));
  CHECK(near(f.kv_read_per_unit * x.Up + f.kv_read_per_token * x.Np, x.prefix_kv_read));
  CHECK(near(f.macs_per_unit * x.Up + f.macs_per_block_token * x.NBp, x.prefix_macs));
}

TEST_CASE("bench: seed-000 per-request vs cascade rows are consistent, and the cascade reads less KV", "[shared-fixture]") {
  int shapes = 0;
  for (const auto& r : seed_results()) {
    if (!r.shape.shared) {
      CHECK_FALSE(r.cascade);  // seed 001: no sharing, per-request only
      continue;
    }
    ++shapes;
    REQUIRE(r.cascade);
    const CascadeResult& c = *r.cascade;
    const PlanSide &a = c.per_request, &b = c.cascade;
    INFO(r.shape.name << ": KV read " << a.kv_read << " -> " << b.kv_read << ", modeled " << a.total_s * 1e6 << " -> "
                      << b.total_s * 1e6 << " us, " << c.decision.reason);
    const double row = rt::kQkDim * rt::elem_bytes(r.shape.shape.kv_dtype);
    const int cut = c.decision.group.shared_tokens;  // the planner's: whole tiles (and pages)
    CHECK(cut % r.facts.tile_tokens == 0);
    CHECK(cut <= r.shape.shared->shared_tokens);
    CHECK(r.shape.shared->shared_tokens - cut < r.facts.tile_tokens);
    CHECK(c.decision.cascade);  // the cost model cascades every seed-000 group
    CHECK_FALSE(c.forced);
    // KV reads: every request's tokens once (per request); the prefix once per prefix row group
    // and each unique part once (cascade).
    CHECK(a.kv_read == Approx(r.shape.total_tokens() * row).epsilon(1e-9));
    const double unique = double(r.shape.total_tokens()) - double(cut) * r.shape.shared->count;
    CHECK(b.kv_read == Approx((double(c.decision.prefix_row_groups) * cut + unique) * row).epsilon(1e-9));
    CHECK(b.kv_read < a.kv_read);
    CHECK(a.kv_distinct == b.kv_distinct);
    CHECK(b.kv_read >= b.kv_distinct);
    CHECK(b.macs < a.macs);                   // the prefix's 192 rows fill their MFMA blocks (12 heads pad to 16)
    // Every member merges its prefix and unique partials, all bf16 (the prefix kernel's).
    CHECK(b.reduce_bf16_splits == b.reduce_splits);
    CHECK(a.reduce_bf16_splits == 0);
    CHECK(a.prefix_units == 0);
    // qseqlen 1, every request a member: one attention launch, the unique parts in it too.
    CHECK(b.decode_units == 0);
    CHECK(b.prefix_units > c.decision.prefix_row_groups * b.prefix_splits);
    // One round of 256 units: every prefix split's row groups run together, on one XCD.
    CHECK(b.row_group_bundles == b.prefix_splits);
    CHECK(b.row_group_bundles_one_xcd == b.row_group_bundles);
    // Two launches on one stream + the reduce, each launch max(memory, issue) per CU (modeled).
    CHECK(b.total_s == Approx(b.decode.total_s + b.prefix.total_s).epsilon(1e-12));
    CHECK(b.prefix.decode_s >= b.prefix.max_cu_compute_s);
    CHECK(b.prefix.decode_s >= b.prefix.max_cu_mem_s);
    CHECK(b.prefix.max_cu_compute_s > 0);
    // 192 and 288 rows: the prefix launch's issue time is close to its HBM floor at the
    // achievable ceiling (compute matters as much as bandwidth; 0.81-0.89 of it today).
    CHECK(b.prefix.max_cu_compute_s > 0.75 * b.prefix.hbm_floor_s);
    CHECK(b.total_s < a.total_s);
    // What-if, the same plans with HBM at the datasheet peak: never slower. (Issue #42's planner
    // sizes a plan for the achievable ceiling, feeding fewer CUs where HBM binds first, so the
    // what-if of the same plan is no longer the "92 us" the planner before it priced at 8 TB/s.)
    for (const PlanSide* p : {&a, &b}) {
      CHECK(p->total_at_peak_s > 0);
      CHECK(p->total_at_peak_s <= p->total_s);
    }
    // The prefix hot loop: the matrix pipe is busy a fraction of the co-issue cycles.
    CHECK(c.hot.mfma > 0);
    CHECK(c.mfma_busy > 0.3);
    CHECK(c.mfma_busy <= 1.0);
    // 6 row blocks: gfx950 streams every seed-000 prefix (pages 1 and 128) with LDS DMA.
    CHECK(c.facts.row_blocks == 6);
    // The planner balances the prefix launch by the modeled issue catalog.json records for the
    // kernel, which must be the figures the bench prices it with.
    const rt::Selection sel = catalog_for(r.shape.shape).select(r.shape.shape);
    REQUIRE(sel.prefix);
    REQUIRE(sel.prefix->issue_model);
    CHECK(sel.prefix->issue_model->cycles_per_block_tile == c.facts.hot_loop_cycles);
    CHECK(sel.prefix->issue_model->producer_inflight_bytes == c.facts.inflight_bytes_per_wg);
    CHECK(sel.prefix->issue_model->lds_clocks_per_block_tile == c.facts.lds_cycles_per_block);
    CHECK(sel.prefix->issue_model->lds_clocks_per_tile + 6 * sel.prefix->issue_model->lds_clocks_per_block_tile ==
          Approx(c.facts.lds_cycles_per_tile));
    const Machine m = machine_for(r.shape.shape.target);
    CHECK(sel.prefix->issue_model->clock_hz == m.clock_hz);
    CHECK(sel.prefix->issue_model->hbm_bytes_per_s == m.hbm_bytes_per_s);
    CHECK(sel.prefix->issue_model->unit_fill_s == m.unit_fill_s);
    // Issue-aware balance: at c16 the launch within 1.15x of its HBM floor (1.13 today;
    // balancing tokens alone left it at 1.24). c24's 288 rows issue more than its floor even
    // spread evenly (modeled ~24 us of issue per CU against a ~20 us floor).
    if (r.shape.shared->count == 16) CHECK(b.prefix.decode_s <= 1.15 * b.prefix.hbm_floor_s);
    // The bounds on reading the prefix once are below or at what the kernels' own rates give.
    REQUIRE(c.one_read.size() == 9);
    // [0], [1]: the best MFMA at 1.00x and 1.10x; then this kernel's MFMA forms and its hot loop;
    // [6]: the MFMA forms with one launch (the reduce merged): [2] less one launch exactly.
    for (size_t i = 2; i < 6; ++i) CHECK(c.one_read[i].total_s > c.one_read[i % 2].total_s);
    CHECK(c.one_read[6].launches == 1);
    CHECK(c.one_read[6].total_s == Approx(c.one_read[2].total_s - machine_for(r.shape.shape.target).launch_s).epsilon(1e-12));
    // [7], [8]: what-if rows, [3] and [5] (1.10x, two launches) with HBM at the datasheet peak;
    // every other row at the model's achievable ceiling.
    for (size_t i = 0; i < 7; ++i) CHECK(c.one_read[i].hbm_bytes_per_s == m.hbm_bytes_per_s);
    for (size_t i : {7, 8}) {
      const OneReadBound& at_achievable = c.one_read[i == 7 ? 3 : 5];
      CHECK(c.one_read[i].hbm_bytes_per_s == m.hbm_peak_bytes_per_s);
      CHECK(c.one_read[i].kv_ratio == 1.10);
      CHECK(c.one_read[i].launches == 2);
      CHECK(c.one_read[i].mfma_work_cu_s == at_achievable.mfma_work_cu_s);
      CHECK(c.one_read[i].total_s < at_achievable.total_s);
    }
    CHECK(c.one_read[1].total_s <= c.one_read[0].total_s);
    CHECK(c.one_read[0].o_fits_registers == (r.shape.shared->count == 16));  // 192 rows fit a CU, 288 do not
  }
  CHECK(shapes == 4);
}

TEST_CASE("bench: the wide prefix kernel is priced with its own assembly and catalog figures", "[shared-fixture]") {
  int wide = 0;
  for (const auto& r : seed_results()) {
    if (!r.cascade_wide) continue;
    ++wide;
    const CascadeResult& c = *r.cascade_wide;
    INFO(r.shape.name << ": " << c.prefix_kernel);
    CHECK(c.prefix_kernel.ends_with("_r192"));
    rt::DecodeShape s = r.shape.shape;
    s.prefix_rows = 192;
    const rt::Selection sel = catalog_for(s).select(s);
    REQUIRE(sel.prefix);
    REQUIRE(sel.prefix->name == c.prefix_kernel);
    REQUIRE(sel.prefix->issue_model);
    // The bench read the wide kernel's assembly (it once read the default kernel's: no bytes in
    // flight, an infinite modeled time).
    CHECK(sel.prefix->issue_model->producer_inflight_bytes == c.facts.inflight_bytes_per_wg);
    CHECK(c.facts.inflight_bytes_per_wg > 0);
    CHECK(sel.prefix->issue_model->wave_tile_cycles.back() == c.hot.coissue_cycles);  // its 3-block loop
    CHECK(std::isfinite(c.cascade.total_s));
    CHECK(c.facts.blocks_per_wave == 3);
    // Phases (hand-counted from the kernel's structure): before the barrier that publishes tile
    // 0, each of the 4 waves has its 27 Q loads (48 rows x 576 B in 1 KiB LDS DMAs, all in
    // flight) and the ring's sub-slots 0..4 (5 + 5 + 3 loads on waves 0 and 1) outstanding; after
    // the loop, 3 row blocks x (32 dwordx2 stores of bf16 o, 512 B, + 1 lse store), of which a
    // wave holds 63: 62 of o and one lse at the peak.
    CHECK(c.facts.prologue_inflight_bytes_per_wg == 4 * (27 + 13) * 1024);
    CHECK(c.facts.epilogue_inflight_bytes_per_wg == 4 * (62 * 512 + 256));
    CHECK(sel.prefix->issue_model->prologue_inflight_bytes == c.facts.prologue_inflight_bytes_per_wg);
    CHECK(sel.prefix->issue_model->epilogue_inflight_bytes == c.facts.epilogue_inflight_bytes_per_wg);
    CHECK(c.cascade.prefix.max_cu_phases_s > 0);
    // 192 rows per workgroup: K3 c16 reads every KV byte once.
    if (r.shape.shared->count == 16) CHECK(c.cascade.kv_read == Approx(c.cascade.kv_distinct).epsilon(1e-9));
  }
  CHECK(wide == 2);  // K3 c16 and c24 at page 128 (no wide kernel at page 1)
}

// Hand-computed: W = 2400 tokens x 100 rows x 1 MAC / (1 MAC per clock x 2.4 GHz) = 100 CU-us;
// a split's partials 100 x 600 B = 60 KB = 0.01 us at 6 TB/s; distinct KV 60 MB = 10 us. Per n:
// 5 + 5 + 1 + max(100 / n, 10 + 0.01 n) + max(0.01 n, 1) us, least at n = 10: 22.1 us.
TEST_CASE("bench: the one-read bound is the least layer time over the prefix CUs (by hand)") {
  Machine m = machine_for(rt::Target::gfx950);
  m.clock_hz = 2.4e9, m.hbm_bytes_per_s = 6e12, m.launch_s = 5e-6, m.unit_fill_s = 1e-6, m.cus = 256;
  OneReadInputs in;
  in.prefix_tokens = 2400, in.rows = 100, in.macs_per_row_token = 1, in.macs_per_cu_clock = 1;
  in.distinct_kv_bytes = 60e6, in.prefix_kv_bytes = 30e6, in.partial_row_bytes = 600;
  const OneReadBound b = one_read_bound(m, in, 1.0, "hand");
  CHECK(b.basis == "hand");
  CHECK(b.mfma_work_cu_s == Approx(100e-6));
  CHECK(b.pair_fraction == 0);
  CHECK(b.cus == 10);
  CHECK(b.splits == 10);
  CHECK(b.compute_s == Approx(10e-6));
  CHECK(b.hbm_s == Approx(10.1e-6));
  CHECK(b.reduce_s == Approx(1e-6));  // the reduce's fill floor: 0.1 us of partials
  CHECK(b.total_s == Approx(22.1e-6));
  CHECK(b.launches == 2);
  OneReadInputs one = in;
  one.launches = 1;
  CHECK(one_read_bound(m, one, 1.0, "hand").total_s == Approx(17.1e-6));  // one launch of 5 us fewer
  one.launches = 0;
  CHECK_THROWS_WITH(one_read_bound(m, one, 1.0, "hand"), Catch::Contains("launches 0"));
  // 1.25x reads: f = 0.25 x 60 / 30 = 0.5 of the prefix on CU pairs, 0.75 n splits: at n = 10,
  // max(10, 10 + 0.075) + 1 + 11 = 22.075 us (n = 11: 10.0825 + 12 = 22.0825).
  const OneReadBound p = one_read_bound(m, in, 1.25, "hand");
  CHECK(p.pair_fraction == Approx(0.5));
  CHECK(p.cus == 10);
  CHECK(p.splits == Approx(7.5));
  CHECK(p.total_s == Approx(22.075e-6));
  CHECK(one_read_bound(m, in, 2.0, "hand").pair_fraction == 1);  // capped: all of the prefix read twice
  // O^T of R rows in f32 is R x 2 KiB: 256 rows fill a CU's 4 x 512 x 64 x 4 B of registers exactly.
  in.rows = 256;
  CHECK(one_read_bound(m, in, 1.0, "hand").o_fits_registers);
  in.rows = 257;
  CHECK_FALSE(one_read_bound(m, in, 1.0, "hand").o_fits_registers);
  CHECK_THROWS_WITH(one_read_bound(m, in, 0.9, "hand"), Catch::Contains("kv_ratio 0.9"));
  in.rows = 0;
  CHECK_THROWS_WITH(one_read_bound(m, in, 1.0, "hand"), Catch::Contains("rows 0"));
}

// The reduce kernel's rounds, counted by hand from its structure (mla_reduce.cpp): 8 waves, a
// range of R = ceil(ceil(S/8)/16) x 16 splits each, 64 lse per load, 16 partial rows per chunk
// and per kind.
TEST_CASE("bench: the reduce's dependent load rounds, and the model's reduce floor (by hand)") {
  CHECK(gen::reduce_range_splits(0) == 0);
  CHECK(gen::reduce_range_splits(1) == 16);
  CHECK(gen::reduce_range_splits(128) == 16);
  CHECK(gen::reduce_range_splits(129) == 32);  // ceil(129 / 8) = 17
  CHECK(gen::reduce_range_splits(304) == 48);  // ceil(304 / 8) = 38
  CHECK(gen::reduce_load_rounds(0, 0) == 0);
  CHECK(gen::reduce_load_rounds(2, 0) == 2);      // one lse load, one chunk
  CHECK(gen::reduce_load_rounds(128, 0) == 2);    // 8 ranges of 16
  CHECK(gen::reduce_load_rounds(304, 0) == 4);    // 1 + 3 (32K x1: 304 splits, one per CU)
  CHECK(gen::reduce_load_rounds(20, 10) == 3);    // range 0: 10 bf16 + 6 f32 = 1 + 1 + 1
  CHECK(gen::reduce_load_rounds(600, 100) == 8);  // range 1 (80..159): 2 lse + 2 bf16 + 4 f32 chunks
  CHECK(gen::reduce_load_rounds(600, 0) == 7);    // 2 + 5
  // The model's reduce: max(bytes / HBM, unit fill + rounds x trip), a trip half the fill.
  Machine m = machine_for(rt::Target::gfx942);
  m.hbm_bytes_per_s = 4e12, m.unit_fill_s = 1e-6, m.launch_s = 2e-6, m.cus = 4;
  KernelFacts f;
  f.tile_tokens = 16, f.read_per_token = 100, f.distinct_per_token = 100, f.inflight_bytes_per_wg = 1e9;
  f.reduce_per_entry = 1000, f.reduce_per_split = 1000;
  const std::vector<ModelUnit> units(4, ModelUnit{.tokens = 160, .partial = true});
  CHECK(model_time(m, f, units, 1, 4, 1, 0, 0).reduce_s == Approx(1e-6));
  CHECK(model_time(m, f, units, 1, 4, 1, 0, 4).reduce_s == Approx(3e-6));
  f.reduce_per_split = 4e6;  // 16 MB: 4 us of bytes, more than 1 + 4 x 0.5 us
  CHECK(model_time(m, f, units, 1, 4, 1, 0, 4).reduce_s == Approx(16.001e6 / 4e12));
  CHECK(model_time(m, f, units, 1, 4, 1, 0, 4).launch_s == Approx(4e-6));  // decode + reduce launches
}

// The planner's copy of the reduce's rounds (runtime/cost_model.h: the runtime does not link the
// generator) is the generator's, for every split count a request can have, f32 partials.
TEST_CASE("bench: the planner's reduce rounds are the reduce kernel's") {
  for (int s = 0; s <= 5000; ++s) {
    INFO("splits " << s);
    REQUIRE(rt::LaunchModel::reduce_rounds(s) == (s < 2 ? 0 : gen::reduce_load_rounds(s, 0)));
  }
}

// The lower bound of a layer (docs/performance.md "Lower bound"), by hand: 4 CUs at 16 GB/s each
// (port-bound), 4 TB/s HBM, 1 us fill, 2 us launch, 100 bytes a token, 1,000 a unit.
TEST_CASE("bench: the layer's lower bound, by hand") {
  Machine m = machine_for(rt::Target::gfx942);
  m.hbm_bytes_per_s = 4e12, m.unit_fill_s = 1e-6, m.launch_s = 2e-6, m.cus = 4;
  m.cu_port_bytes_per_clk = 8, m.clock_hz = 2e9, m.little_latency_s = 1e-6;  // 16 GB/s a CU
  KernelFacts f;
  f.read_per_token = 100, f.distinct_per_token = 100, f.read_per_unit = 1000, f.write_final_unit = 1000;
  f.write_partial_unit = 4000, f.inflight_bytes_per_wg = 1e9, f.max_resident_wgs = 1, f.row_groups = 1;
  // 4 requests of 160,000 tokens: 16 MB each through one CU = 1,000 us (+ 2,000 bytes, 0.125 us), no
  // split needed; HBM 64 MB = 16 us. 2 + 1 + 1000.125 us.
  CHECK(lower_bound_s(m, f, {160000, 160000, 160000, 160000}) == Approx(1003.125e-6));
  // One request of 640,000 tokens: the mean CU (64 MB + 2,000 bytes) / 4 = 1000.03125 us + 1 us
  // fill, but the request alone 4,001.125 us: it splits into ceil(4001.125 / 1001.03125) = 4 pieces
  // (their partials move 16 KB more from HBM, under the CU time) and the reduce follows: launch 2
  // + fill 1 + two trips of 0.5 us.
  CHECK(lower_bound_s(m, f, {640000}) == Approx(2e-6 + 1001.03125e-6 + 2e-6 + 1e-6 + 1e-6));
  // Empty requests cost nothing but the launch.
  CHECK(lower_bound_s(m, f, {0, 0}) == Approx(2e-6));
}

// MACs per SIMD clock = m n k / (4 x passes), passes from the target description (LLVM's
// schedule model, docs/hazards.md): gfx950 16x16x128 f8f6f4 8 passes, 16x16x32 bf16 4 passes;
// gfx942 16x16x32 fp8 4 passes, 16x16x16 bf16 4 passes.
TEST_CASE("bench: the best MFMA rate per target and operand type") {
  CHECK(best_macs_per_simd_clock(rt::Target::gfx950, true) == 16 * 16 * 128 / 32);
  CHECK(best_macs_per_simd_clock(rt::Target::gfx950, false) == 16 * 16 * 32 / 16);
  CHECK(best_macs_per_simd_clock(rt::Target::gfx942, true) == 16 * 16 * 32 / 16);
  CHECK(best_macs_per_simd_clock(rt::Target::gfx942, false) == 16 * 16 * 16 / 16);
}

TEST_CASE("bench: at full scale the cascade plan is emulated end to end, and its counters match the extrapolation") {
  // A K3-like group small enough to emulate on all 256 CUs: 16 requests sharing 4,096 tokens
  // (32 pages of 128) with 200..305 of their own.
  BenchShape s = parse_shape("gfx950:fp8/fp8:h12:pg128:4296,4303,4310,4317,4324,4331,4338,4345,4352,4359,4366,4373,4380,4387,4394,4401");
  s.shared = rt::PrefixGroup{0, 16, 4096};
  MeasureOptions o = quick();
  o.full_scale_max_tokens = 1 << 30;
  const ShapeResult r = measure_shape(s, o);
  REQUIRE(r.full_scale);
  REQUIRE(r.cascade);
  REQUIRE(r.cascade->full_scale);
  const RunSample& f = *r.cascade->full_scale;
  const PlanSide& b = r.cascade->cascade;
  INFO("full scale: " << f.U << " + " << f.Up << " units; priced plan " << b.decode_units << " + " << b.prefix_units);
  CHECK(f.U == b.decode_units);
  CHECK(f.Up == b.prefix_units);
  // KV reads are exact per token; MACs gain at most one partly used tile per unit over the fit.
  CHECK(f.decode_kv_read + f.prefix_kv_read == Approx(b.kv_read).epsilon(1e-6));
  CHECK(f.mfma_macs + f.prefix_macs == Approx(b.macs).epsilon(5e-3));
  CHECK(f.kv_distinct == Approx(b.kv_distinct).epsilon(1e-9));
}

TEST_CASE("bench: modeled times are priced at the achievable HBM ceiling and say so, the datasheet peak beside it", "[shared-fixture]") {
  const Machine mi300 = machine_for(rt::Target::gfx942), mi355 = machine_for(rt::Target::gfx950);
  CHECK(mi300.hbm_bytes_per_s == 4.1e12);   // BabelStream on MI300X (generator/target)
  CHECK(mi300.hbm_peak_bytes_per_s == 5.3e12);
  CHECK(mi355.hbm_bytes_per_s == 6.09e12);  // fitted on aiter's tuned tables (bench/calibrate.h)
  CHECK(mi355.hbm_peak_bytes_per_s == 8.0e12);
  CHECK(mi355.hbm_source.rfind("fitted", 0) == 0);
  CHECK(mi300.hbm_source.rfind("measured", 0) == 0);
  for (const auto& r : seed_results()) {
    const nlohmann::json j = r.to_json();
    const Machine& m = r.shape.shape.target == rt::Target::gfx942 ? mi300 : mi355;
    INFO(r.shape.name);
    CHECK(j.at("modeled").at("hbm_ceiling_bytes_per_s").get<double>() == m.hbm_bytes_per_s);
    CHECK(j.at("modeled").at("hbm_ceiling").get<std::string>().find("achievable") != std::string::npos);
    // The HBM floor is the distinct bytes at the ceiling: no modeled time beats it.
    CHECK(r.modeled.decode_s >= r.modeled.hbm_floor_s);
    CHECK(j.at("modeled").at("fraction_of_hbm_ceiling").get<double>() <= 1.0);
  }
}

// Issue #44's indexer shapes (docs/sparse.md "The indexer: performance"): per cached token the
// logits kernel reads the 132-byte entry once (plus its block id: under 1.002x distinct) and writes
// 4 bytes per query row; wherever a step reads >= 256 MB of cache the bytes moved reach >= 0.85 of
// the HBM ceiling, launch included; the top-k reads each logit once (rows and segments of up to
// 16K) or five times.
TEST_CASE("bench: the DSA indexer's logits read each cached token once and reach 0.85 of HBM from 256 MB") {
  std::vector<IndexerShape> picked;
  for (const auto& s : dsa_indexer_shapes())
    if (s.name == "V3.2 TP8 h64 nn2 32K x64" || s.name == "GLM-5 TP8 h32 nn1 128K x16" ||
        s.name == "V3.2 TP8 h64 nn1 8K x1")
      picked.push_back(s);
  REQUIRE(picked.size() == 6);  // both targets
  for (const IndexerResult& r : measure_indexer(picked, false)) {
    INFO(rt::name(r.shape.target) << " " << r.shape.name << ": modeled " << r.total_s * 1e6 << " us, HBM "
                                  << r.hbm_s * 1e6 << " us, bandwidth reached " << r.hbm_fraction());
    const double tokens = double(r.shape.batch) * r.shape.context;
    CHECK(r.hbm_read_bytes >= tokens * 132 * (1 - 1e-9));
    CHECK(r.hbm_read_bytes <= tokens * 132 * 1.002 + double(r.shape.batch) * 8 * 64 * 1024);
    CHECK(r.write_bytes == Approx(tokens * 4 * r.shape.next_n));
    CHECK(r.total_s >= r.hbm_s);
    if (r.cache_bytes >= 256e6) CHECK(r.hbm_fraction() >= 0.85);
    // A row (segment, candidate row) of at most 16K logits is read once, a longer one five times;
    // two launches also read each segment's candidates.
    const double logits = tokens * r.shape.next_n, cands = double(r.shape.batch) * r.shape.next_n * r.topk_segments * 2048;
    CHECK(r.topk_read_bytes >= 4.0 * logits * 0.99);
    CHECK(r.topk_read_bytes <= 20.0 * (logits + cands) * 1.01);
    if (r.shape.context <= abi::kTopkResidentLogits) CHECK(r.topk_read_bytes <= 4.0 * logits * 1.01 + 64.0 * r.shape.batch);
    CHECK(r.topk_s > 0);
  }
}
