// mlabench: performance evidence without the hardware (docs/performance.md).
//
//   measured  - counters of the exact code objects on the emulator (global bytes per buffer,
//               MFMA MACs, instructions), extrapolated linearly from scaled runs to the full
//               shape with the planner's exact full-scale plan; static facts of the generated
//               assembly (bytes in flight per workgroup, hot-loop instruction mix).
//   modeled   - times from the documented machine model below (never measured here).
//   hardware  - `--backend hip`: wall-clock timing on an AMD GPU (none here).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catalog/asm_facts.h"
#include "runtime/catalog.h"
#include "runtime/planner.h"
#include "runtime/problem.h"

namespace mla::bench {

// ---- Shapes -------------------------------------------------------------------------------

struct BenchShape {
  std::string name;   // "32K x1", "K3 c16 pg1", ...
  std::string set;    // "seed-001", "seed-000", "mixed", "cli"
  rt::DecodeShape shape;
  std::vector<int> kv_lens;
  int ctx_k = 0, concurrency = 0;              // seed-001 grid coordinates (0 elsewhere)
  std::optional<double> pub_aiter_us, pub_ours_us;  // published figures (seed 001), not ours
  // Requests sharing their first pages (seed 000: every request, 63,911 tokens, whole pages
  // only). The per-request plan ignores it; the cascade plan reads the prefix once per group.
  std::optional<rt::PrefixGroup> shared;
  int64_t total_tokens() const;
};

// seed-001: ctx {32K, 64K, 128K, 256K} x concurrency {1, 2, 4, 8, 16}, 16 heads, bf16 q / fp8
// KV, page size 1, gfx942; with the published columns where the seed lists them.
std::vector<BenchShape> seed001_shapes();
// seed-000: Kimi-K3 TP8, 12 heads, fp8/fp8, gfx950, c16 and c24 at kv_len ~68.4K, page 1 and 128,
// all requests sharing 63,911 tokens (63,872 = 499 whole pages at page 128).
std::vector<BenchShape> seed000_shapes();
// mixed (issue #42): batches whose lengths differ, each against its lower bound
// (docs/performance.md "Lower bound"): lengths uniform in 1K..128K at batch 8, 32 and 128 and one
// 256K request beside 63 of 2K (seed 001's kernel); Kimi-K3 c16 with 4 requests 10x the others.
std::vector<BenchShape> mixed_shapes();
// sparse (issue #43): DSA decode on gfx950, each query row attending to its own 2048 slots of
// FlashMLA's fp8_ds_mla cache, bf16 q: DeepSeek-V3.2 at TP8 (16 heads; GLM-5 at TP4 has the same 16)
// and GLM-5 at TP8 (8 heads), at batch 1, 4, 16, 64, 128 and s_q 1 and 2 (rows = batch x s_q); and
// aiter's own form (fp8/fp8, 576-byte entries) at 16 heads, batch 1, 16, 64, 128.
std::vector<BenchShape> sparse_shapes();
// "gfx950:fp8/fp8:h12:pg128:68435x16" or "...:32768,1000,77" (see mlabench --help).
BenchShape parse_shape(const std::string& spec);

// ---- Host costs (bench/host_costs.cpp, issue #31): measured wall-clock microseconds -------------

struct HostCost {
  std::string name;
  int batch = 0;
  int64_t total_tokens = 0;
  double update_us = 0;            // mla_plan_update
  double update_given_us = 0;      // mla_plan_update_shared, the caller's group (shapes with sharing)
  double update_detected_us = 0;   // mla_plan_update_shared, groups detected in a host page table
  bool cascade = false;            // the last shared update's plan cascades the group
  double upload_us = 0;            // mla_plan_upload
  size_t upload_bytes = 0;
  double decode_host_us = 0;       // the runtime's host work per mla_decode (checks, kernarg packing)
  int launches = 0;                // kernel launches per layer
  unsigned decode_grid = 0;        // the decode launch's workgroups (the capacity)
  double python_update_us = 0, python_decode_us = 0;  // bench/python_host_cost.py (0: not run)
  // update()'s own cost over its two C calls, and mla_decode_fwd on the path a GPU tensor takes
  // (no host scan of q, no staging; issue #42).
  double python_update_over_c_us = 0, python_decode_gpu_us = 0;
  nlohmann::json to_json() const;
};
// The measured shapes plus issue #31's batches of 64 and 256 requests of 8K tokens.
std::vector<BenchShape> host_cost_shapes(const std::vector<BenchShape>& measured);
std::vector<HostCost> measure_host_costs(const std::vector<BenchShape>& shapes, int steps);
std::string host_costs_markdown(const std::vector<HostCost>& v);

// The seed's own published "same total data" rows (us), as published.
struct PublishedGroup {
  std::string members;
  double ours_lo, ours_hi, aiter_lo, aiter_hi;
};
std::vector<PublishedGroup> seed001_published_groups();

// ---- Machine model (modeled numbers only) ---------------------------------------------------

struct Machine {
  std::string name;       // "MI300X"
  rt::Target target;
  int cus;                // from generator/target (304 / 256)
  // The model's HBM ceiling: the achievable bandwidth from generator/target (4.1e12 measured on
  // MI300X / 6.0e12 estimated on MI355X), never the datasheet peak (5.3e12 / 8e12), which is
  // reported beside it.
  double hbm_bytes_per_s;
  double hbm_peak_bytes_per_s;
  std::string hbm_source;   // where the ceiling comes from ("measured: ...", "estimate: ...")
  // "MI300X achievable 4.1 TB/s (measured: ...; 0.77 of the 5.3 TB/s datasheet peak)"
  std::string ceiling_text() const;
  // From the target description's machine constants (gen::MachineModel), assumed:
  double clock_hz = 0;              // peak engine clock (2.1 GHz / 2.4 GHz)
  double little_latency_s = 0;      // loaded HBM latency for Little's law (DESIGN.md: ~2 us)
  double cu_port_bytes_per_clk = 0; // L2 -> CU read port, per CU
  double unit_fill_s = 0;           // per work unit: page id then KV row, 2 dependent ~500 ns trips
  double trip_s() const { return unit_fill_s / 2; }  // one dependent memory trip (the fill's half)
  // Per kernel launch: generator/target's kernel_fixed_s - unit_fill_s (machine_for), with its source.
  double launch_s = 5e-6;
  std::string launch_source;
  double little_bytes_per_cu() const { return hbm_bytes_per_s * little_latency_s / cus; }
  double hbm_share_per_cu() const { return hbm_bytes_per_s / cus; }
  nlohmann::json to_json() const;
};
Machine machine_for(rt::Target t);
// The same machine with HBM at its datasheet peak: what-if pricing only (PlanSide::total_at_peak_s,
// the one-read bound's what-if rows); every modeled time of the bench is at the achievable ceiling.
Machine at_datasheet_peak(Machine m);

// One work unit as the model sees it.
struct ModelUnit {
  int64_t tokens = 0;
  bool partial = false;
  // Share of its tokens' KV this unit is first to read in the launch: 1 for decode units, 1/Gp
  // for a prefix unit (the Gp row groups of one split read the same range; HBM sees it once and
  // the L2 serves the other row groups: the model's cache assumption).
  double first_read = 1.0;
  // Query rows the unit computes (prefix units: its row group's rows of the group, which the last
  // row group may fill only in part); priced by KernelFacts' per-row terms (0 for decode units).
  int rows = 0;
  // 16-row blocks that compute (0: all of the kernel's): the prefix kernel's waves of row blocks
  // wholly past a unit's rows take no tile (a member's unique part: one of 6).
  int blocks = 0;
};
// The row blocks a prefix unit of `rows` query rows computes (the prefix kernel's rule).
inline int prefix_unit_blocks(int rows, int row_blocks) { return std::min(row_blocks, (rows + 15) / 16); }
// A prefix unit's MAC measure: its tokens in whole tiles (a partial tile computes whole) times
// its computing row blocks (RunSample::NBp, KernelFacts::macs_per_block_token).
inline double prefix_unit_block_tokens(const abi::PrefixUnit& u, int tile_tokens, int blocks) {
  return double((u.kv_end - u.kv_start + tile_tokens - 1) / tile_tokens) * tile_tokens * blocks;
}

// Per-kernel facts the model needs (measured or static).
struct KernelFacts {
  int tile_tokens = 0;
  double read_per_token = 0, read_per_unit = 0;    // decode global bytes (fit of measured counters)
  // Decode distinct bytes read (each address once per launch; fit of measured counters): what
  // reaches HBM when every re-read hits the L2 / Infinity Cache (the model's cache assumption).
  double distinct_per_token = 0, distinct_per_unit = 0, distinct_per_q_group = 0;
  double write_partial_unit = 0, write_final_unit = 0;  // decode global bytes written per unit
  // Per query row of a unit (ModelUnit::rows; the prefix kernel: Q read, partials written).
  double read_per_row = 0, write_partial_per_row = 0;
  double reduce_per_entry = 0, reduce_per_split = 0;     // reduce global bytes (read + written)
  double reduce_per_bf16_split = 0;  // per bf16 partial (a prefix kernel's); reduce_per_split counts f32 ones
  double inflight_bytes_per_wg = 0;   // static, producer loop
  int consumers = 1;                  // consumer waves per workgroup (one SIMD each)
  int row_blocks = 1;                 // 16-row blocks per workgroup (consumers = row_blocks x kv_splits)
  int max_resident_wgs = 1;           // workgroups a CU can hold (LDS-limited)
  int row_groups = 1;
  double hot_loop_cycles = 0;         // issue cycles per tile per SIMD (co-issue model + ring stall)
  // The decode producer's issue cycles per tile (its loop on the co-issue model, one wave per
  // workgroup; 0: not priced). A CU's tiles pass through its resident workgroups' producers.
  double producer_cycles_per_tile = 0;
  double lds_cycles_per_tile = 0;     // CU LDS clocks per tile (128 B/clk; consumers' reads + producer's write)
  double lds_cycles_per_block = 0;    // of those, one row block's reads (a unit computing fewer blocks saves them)
  double macs_per_block_token = 0;    // prefix kernel: MACs per token per computing row block (MACs fit on NBp)
  // A kernel whose waves hold several row blocks (the wide prefix kernel: 3): a unit's computing
  // blocks fill its waves in order; a wave of b blocks issues wave_tile_cycles[b - 1] and reads
  // wave_tile_lds_cycles[b - 1] LDS clocks per tile (catalog.json's issue_model), and the CU's
  // LDS also takes the tile's DMA write (lds_write_cycles_per_tile).
  int blocks_per_wave = 1;
  std::vector<double> wave_tile_cycles, wave_tile_lds_cycles;
  double lds_write_cycles_per_tile = 0;
  // A kernel whose waves stream the KV themselves (no producer: the wide prefix kernel) runs a
  // prologue (Q and the ring's first slots, these bytes in flight per workgroup), its loop, and an
  // epilogue (the partial stores): per unit, max(fill, its per-unit and per-row reads at the
  // prologue's rate) + its tokens' reads beside its issue + its writes at the epilogue's rate,
  // one unit after another (gen::kernel_phases_inflight). 0: not phased (everything overlaps).
  double prologue_inflight_bytes_per_wg = 0, epilogue_inflight_bytes_per_wg = 0;
  // Fits of measured counters the report extrapolates (model_time does not use them).
  double kv_read_per_unit = 0, kv_read_per_token = 0;  // the kv buffer's global reads
  double macs_per_unit = 0, macs_per_token = 0;        // MFMA MACs issued
};

struct ModeledTime {
  double total_s = 0, decode_s = 0, reduce_s = 0, launch_s = 0;
  bool producer_bound = false;  // the busiest CU's issue is its producers' (decode kernels' producer loop)
  double max_cu_mem_s = 0, max_cu_compute_s = 0, hbm_floor_s = 0;
  double max_cu_phases_s = 0;  // a phased kernel's worst CU: its units' prologues and epilogues
  double per_cu_rate = 0;  // bytes/s one CU streams at (Little's law, port cap)
  std::string bound;       // "HBM", "in-flight (Little)", "issue", ...
  nlohmann::json to_json() const;
};

// Units are handed to CU (i mod C) in launch order (the planner's dispatch assumption).
// q_groups: distinct (request, row group) pairs, whose Q the launch reads from HBM once.
// reduce_bf16_splits: of the reduce_splits, the bf16 partials (priced by reduce_per_bf16_split).
// reduce_rounds: the reduce's dependent rounds of loads for its longest entry, after the entry's
// fetch (reduce_rounds(plan) for ours); the reduce takes at least the unit fill (the entry's two
// trips) plus one trip per round, however few its bytes (docs/performance.md, "The reduce's latency").
ModeledTime model_time(const Machine& m, const KernelFacts& f, const std::vector<ModelUnit>& units,
                       int reduce_entries, int reduce_splits, int q_groups, int reduce_bf16_splits = 0,
                       int reduce_rounds = 0);
std::vector<ModelUnit> model_units(const rt::Plan& plan);
// Our reduce kernel's rounds for a plan: the most of gen::reduce_load_rounds over its entries.
int reduce_rounds(const rt::Plan& plan);
// Workgroups of a non-persistent grid go to CUs round robin in launch order: cu = i mod num_cu.
std::vector<int> round_robin_cus(int items, int num_cu);
// The CU of each of a launch's units from its workgroup ranges (rt::Plan::unit_ranges: workgroup
// x runs units [ranges[x], ranges[x + 1]) on CU x mod num_cu).
std::vector<int> cus_of_ranges(const std::vector<int32_t>& ranges, size_t units, int num_cu);

// model_time with an explicit unit -> CU assignment (cu_of_unit[i] in [0, m.cus)), for launches
// that do not hand workgroup i to CU i mod C (aiter's persistent work lists); model_time is it
// with round_robin_cus.
ModeledTime model_time_assigned(const Machine& m, const KernelFacts& f, const std::vector<ModelUnit>& units,
                                const std::vector<int>& cu_of_unit, int reduce_entries, int reduce_splits, int q_groups,
                                int reduce_bf16_splits = 0, int reduce_rounds = 0);


// Brute force: every request split into s near-equal whole-tile runs, for s = 1..max_splits,
// longest first, one unit per CU per round; returns the best modeled time and its s.
struct BruteForce {
  int best_splits = 0;
  double best_s = 0;
  std::vector<std::pair<int, double>> tried;
};
BruteForce brute_force_splits(const Machine& m, const KernelFacts& f, const std::vector<int>& kv_lens, int max_splits);
// The lower bound of a layer of these requests on a kernel of these facts (modeled,
// docs/performance.md "Lower bound"): one launch plus the larger of the HBM floor of what every
// plan moves (each token, each request's Q and final rows once) and the mean CU's share of what
// passes the CUs' ports plus one unit fill; a request longer than that must split, which adds
// its pieces' partials to the floor and the reduce launch (its fill and two dependent trips).
double lower_bound_s(const Machine& m, const KernelFacts& f, const std::vector<int>& kv_lens);

// ---- Host timing ----------------------------------------------------------------------------

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Median microseconds of `fn(step)` over `steps` timed calls after `warmup` untimed ones.
template <class F>
double median_us(int warmup, int steps, F&& fn) {
  std::vector<double> t;
  for (int i = 0; i < warmup + steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    if (i >= warmup) t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median_of(std::move(t));
}

// ---- Static analysis of the generated assembly ----------------------------------------------

using HotLoop = gen::HotLoop;  // generator/catalog/asm_facts.h
// gen::analyze_hot_loop on the target's description, and llvm-mca's estimate of the same path
// when run_mca (HotLoop::mca_cycles).
HotLoop analyze_hot_loop(const std::string& asm_text, rt::Target t, bool run_mca);
using gen::producer_inflight_bytes;
// --trace-hot-loop: the steady iteration with each instruction's co-issue slot (stderr).
void print_hot_loop(const std::string& kernel, const HotLoop& h);
// The generator's target description of a runtime target (one table for the bench's facts).
const gen::Target& gen_target(rt::Target t);
double issue_cycles_of(const std::string& inst_line, rt::Target t);  // gen::issue_cycles_of

// ---- Measurement ------------------------------------------------------------------------------

// The shape's catalog: built once per process in a temporary directory (the generator, in
// process), unless use_catalog gave one (mlacheck: the catalog it checks).
const rt::Catalog& catalog_for(const rt::DecodeShape& s);
void use_catalog(const rt::DecodeShape& s, const std::string& dir);
std::string decode_asm_for(const rt::DecodeShape& s);
std::string prefix_asm_for(const rt::DecodeShape& s);  // the shape's prefix kernel (mla_prefix_*)

// Counters of one emulator run with the features the linear model uses.
struct RunSample {
  std::vector<int> kv_lens;
  int num_cus = 0;
  double U = 0, N = 0, E = 0, S = 0;   // units, tokens (row groups each), reduce entries, their splits
  double Sb = 0;                       // of the S: bf16 partials (the prefix kernel's, ReduceEntry::bf16_splits)
  double G = 0;                        // (request, row group) pairs: distinct Q blocks
  double partial_units = 0, final_units = 0;
  double decode_read = 0, decode_written = 0, reduce_read = 0, reduce_written = 0;
  double decode_read_distinct = 0, reduce_read_distinct = 0;  // distinct bytes (each address once)
  double mfma_macs = 0, wave_insts = 0;
  double lds_bank_cycles = 0, lds_ideal_cycles = 0;  // decode, emulator's bank model (modeled)
  double traffic_read = 0, traffic_needed = 0;  // runtime's Traffic (read vs plan-needed)
  double decode_kv_read = 0;  // the kv buffer's global reads by the decode launch
  // The prefix launch (cascade plans): units, tokens (row groups each), distinct tokens (each
  // split's range once), (group, row group) Q blocks, and its counters.
  double Up = 0, Np = 0, Npd = 0, Gp = 0, prefix_partial_units = 0;
  // Query rows: summed over the prefix units (each unit's rows of its row group), and over the
  // distinct (group, row group) Q blocks.
  double Rp = 0, Rpd = 0;
  double NBp = 0;  // tokens (whole tiles) x computing row blocks, summed over the prefix units (its MACs' measure)
  double prefix_read = 0, prefix_read_distinct = 0, prefix_written = 0, prefix_kv_read = 0, prefix_macs = 0;
  double kv_distinct = 0;  // the batch's distinct KV entries x bytes (shared pages once)
  bool ran_prefix = false;
  double seconds = 0;
};
// The query rows a prefix unit computes: its row group's share of the group's rows.
inline int prefix_unit_rows(const abi::PrefixUnit& u, int rows_per_group) {
  return std::min(rows_per_group, u.rows - u.row_group * rows_per_group);
}
// The random problem's parameters for a shape: its target, heads, rows, dtypes, page size and lse,
// with these request lengths, prefix groups and seed.
rt::ProblemParams problem_params(const rt::DecodeShape& s, const std::vector<int>& kv_lens, uint64_t seed,
                                 const std::vector<rt::ProblemParams::Shared>& shared = {});
RunSample run_sample(const rt::DecodeShape& s, const std::vector<int>& kv_lens, int num_cus, uint64_t seed = 1,
                     int workgroups_per_cu = 0, const std::vector<rt::ProblemParams::Shared>& shared = {},
                     rt::CascadePolicy cascade = rt::CascadePolicy::cost_model);

// Linear fit y = a*x1 + b*x2 (least squares); residual = max |y - fit| / y over the samples.
struct Fit2 {
  double a = 0, b = 0, residual = 0;
};
Fit2 fit2(const std::vector<double>& x1, const std::vector<double>& x2, const std::vector<double>& y);
// Least squares y = sum_k c[k] * x[i][k] over samples i (normal equations); residual as above.
struct FitN {
  std::vector<double> c;
  double residual = 0;
};
FitN fit_linear(const std::vector<std::vector<double>>& x, const std::vector<double>& y);
// How many of the samples' features a fit can separate (the rank of x, fit_linear's tolerance).
int feature_rank(const std::vector<std::vector<double>>& x);

// One plan of a shape with sharing, extrapolated like ShapeResult (measured counters, exact
// plan, modeled time).
struct PlanSide {
  bool cascade = false;
  int decode_units = 0, prefix_units = 0, prefix_splits = 0, reduce_entries = 0, reduce_splits = 0;
  int reduce_bf16_splits = 0;  // of the reduce_splits: bf16 partials (the prefix kernel's)
  // Prefix splits whose row-group units run in one round (Plan::prefix_row_group_bundles), and
  // those the planner placed on one XCD (docs/planner.md "XCD placement").
  int row_group_bundles = 0, row_group_bundles_one_xcd = 0;
  double kv_read = 0;       // the kv buffer's global reads (both launches, every re-read counted)
  double kv_distinct = 0;   // the batch's distinct KV bytes (the shared prefix once)
  double macs = 0, partial_bytes = 0;
  ModeledTime decode, prefix;  // per launch; `prefix` carries the reduce (and is empty without prefix units)
  double total_s = 0;          // decode launch + prefix launch + reduce, one stream (modeled)
  // What-if: the same plan priced with HBM at the datasheet peak, the bandwidth issue #13's
  // "<= 30 us, from 92 us" was set at (the plan stays the one made at the achievable ceiling).
  double total_at_peak_s = 0;
  std::string bound;
  nlohmann::json to_json() const;
};

// What reading a group's prefix once costs at the least, on the machine model (bench/bound.cpp,
// docs/shared-prefix.md "What reading the prefix once costs"): a lower bound, modeled.
struct OneReadInputs {
  double prefix_tokens = 0;        // the group's shared tokens (whole tiles)
  int rows = 0;                    // R = members x qseqlen x heads
  double distinct_kv_bytes = 0;    // the batch's distinct KV (the prefix once)
  double prefix_kv_bytes = 0;      // the prefix's KV, once
  double partial_row_bytes = 0;    // a prefix partial row: 512 x o element bytes + 4 (lse)
  double macs_per_row_token = 0;   // 576 (QK) + 512 (PV)
  double macs_per_cu_clock = 0;    // 4 SIMDs x best_macs_per_simd_clock
  int launches = 2;                // the attention launch and the reduce's (1: a reduce merged into it, not built)
};
struct OneReadBound {
  std::string basis;          // the MFMA rate taken: "best fp8 MFMA, always busy" or the kernel's hot loop
  double kv_ratio = 1;        // CU-side KV reads allowed, over the distinct bytes
  double pair_fraction = 0;   // of the prefix tiles, read twice by CU pairs of R / 2 rows
  double mfma_work_cu_s = 0;  // the prefix's MFMA work at the best rate, CU-seconds
  int launches = 2;           // OneReadInputs::launches
  double hbm_bytes_per_s = 0; // the HBM bandwidth it was priced at (the machine's achievable ceiling, or
                              // the datasheet peak the issue's 30 us target was set at: what-if rows)
  int cus = 0;                // CUs with prefix work at the bound
  double splits = 0;          // prefix splits there (each writes R partial rows)
  double compute_s = 0, hbm_s = 0, reduce_s = 0, total_s = 0;
  // Whether O^T of the R rows (f32, 512 columns) fits one CU's registers at all: if not, no
  // workgroup holds the rows and kv_ratio 1 is out of reach whatever the time.
  bool o_fits_registers = true;
  nlohmann::json to_json() const;
};
// OneReadBound::basis of the bounds at the target's best MFMA rate (they depend on the shape only).
inline constexpr const char* kBestMfmaBasis = "best MFMA, always busy";
// The target's most MACs per SIMD clock over its fp8 MFMAs (fp8) or bf16 MFMAs.
double best_macs_per_simd_clock(rt::Target t, bool fp8);
OneReadBound one_read_bound(const Machine& m, const OneReadInputs& in, double kv_ratio, std::string basis);

// The shape's prefix group priced both ways: the per-request plan (ShapeResult's) and the
// planner's full-scale cascade plan, with the prefix kernel's own facts fitted from scaled
// emulator runs of one-group problems (cascade = always).
struct CascadeResult {
  std::string prefix_kernel;
  rt::CascadeDecision decision;  // the planner's (cost_model policy) word on the group
  bool forced = false;           // the cost model kept the per-request plan: the cascade side is policy `always`
  PlanSide per_request, cascade;
  std::vector<RunSample> samples;
  double fit_residual = 0;
  double reduce_fit_residual = 0;  // the reduce's bytes per entry, f32 split and bf16 split, over the runs
  KernelFacts facts;             // the prefix kernel's
  HotLoop hot;                   // the prefix kernel's hot loop (static)
  double tile_mem_cycles = 0, coissue_over_mem = 0;
  double mfma_busy = 0;          // matrix-pipe cycles / (co-issue + ring stall) per tile (modeled)
  // The least modeled layer time of any plan reading the prefix once (kv_ratio 1) and within
  // 1.10x of the distinct KV (the issue's criterion), and the same with the MFMA forms and
  // busy fraction this prefix kernel has (modeled: lower bounds, docs/shared-prefix.md).
  std::vector<OneReadBound> one_read;
  // With the per-request side at full scale (--full-scale-tokens): the exact cascade plan
  // emulated end to end once, its counters beside the extrapolated ones of `cascade`.
  std::optional<RunSample> full_scale;
  nlohmann::json to_json() const;
};

struct AiterSide;  // bench/aiter_side.h: aiter's code objects on the same counters and model

struct ShapeResult {
  BenchShape shape;
  std::string decode_kernel;
  bool full_scale = false;        // emulated at full scale (else extrapolated)
  std::vector<RunSample> samples;
  double fit_residual = 0;        // worst over the fitted counters
  // full-shape plan
  int units = 0, num_partials = 0, reduce_entries = 0, reduce_splits = 0, cus_used = 0, cus = 0;
  double balance = 0;
  // bytes
  double kv_bytes = 0, idx_bytes = 0, q_bytes = 0, o_bytes = 0, partial_bytes = 0, table_bytes = 0;
  double read_bytes = 0, written_bytes = 0;
  double ratio_read_over_min = 0;       // bytes read / (KV + indices + Q + O)
  double ratio_moved_over_min = 0;      // (read + written) / (KV + indices + Q + O)
  double ratio_moved_over_plan = 0;     // (read + written) / (KV + idx + Q + O + 2 x partials + tables)
  double ratio_read_over_needed = 0;    // runtime Traffic definition (read / plan-needed reads)
  // Distinct bytes read (every address counted once per launch, decode and reduce): the bytes
  // the plan needs. Re-reads (Q by every unit of a request, lines shared by two units) are
  // read_bytes - read_distinct_bytes; the model serves them from the L2 / Infinity Cache.
  double read_distinct_bytes = 0;
  double ratio_distinct_moved_over_plan = 0;  // (distinct read + written) / (min + 2 x partials + tables)
  double partial_over_kv = 0;           // partial traffic (written + read) / KV bytes
  double kv_bytes_per_cu = 0;
  // compute
  double macs_issued = 0, macs_useful = 0, mac_ratio = 0;
  // memory-level parallelism
  double inflight_per_cu = 0, little_per_cu = 0;
  // hot loop
  HotLoop hot;
  double tile_mem_cycles = 0, issue_over_mem = 0;  // issue_over_mem: serial table (upper bound)
  double coissue_over_mem = 0;  // the same ratio on the co-issue model (modeled)
  double lds_over_mem = 0;      // CU LDS clocks per tile / tile memory cycles (modeled bandwidth)
  double lds_bank_factor = 0;  // decode LDS clocks / conflict-free clocks (emulator bank model, modeled)
  // modeled
  KernelFacts facts;
  ModeledTime modeled;
  double modeled_at_peak_s = 0;  // the same plan with HBM at the datasheet peak (what-if, PlanSide)
  BruteForce brute;
  double plan_over_best = 0;
  // The layer's lower bound (modeled, docs/performance.md "Lower bound"): what any plan costs.
  double lower_bound_s = 0;
  double modeled_tbps = 0;
  // Sparse shapes (docs/sparse.md "Floor"; modeled): the launches as run, one dependent round of
  // gathers (the slots' indices, then their rows), the merge's rounds and the bytes every plan moves
  // (entries, indices, Q, O) at the HBM rate.
  double sparse_floor_s = 0;
  // The layer as the runtime runs it (modeled): its launches are fixed when the plan is made (for
  // graph capture): decode, the prefix kernel's when the selection has one (cascades on, the
  // default) and the reduce, each one launch_s whether it has work or not (launches_as_run();
  // `modeled` prices the decode launch and a reduce launch only with reduce entries).
  int launches_as_run = 0, launches_priced = 0;
  double as_run_s = 0;
  // One launch (MLA_OPTION_MERGE 1, cascades off; modeled): the merging plan's decode launch plus
  // the in-launch merge of its most-split request, whose last split of a row block merges alone:
  // 1 + 5 S dependent trips (the arrival, S lse loads, 4 column passes of S partial rows), at least
  // the merge's bytes at the HBM bandwidth; nothing for single-split requests.
  int one_launch_max_splits = 0;
  double one_launch_s = 0, one_launch_merge_s = 0;
  std::optional<CascadeResult> cascade;  // shapes with a prefix group
  // The same with the wide prefix kernel (192 rows per workgroup; rt::DecodeShape::prefix_rows),
  // where the catalog has one: its reads against its modeled time (docs/shared-prefix.md).
  std::optional<CascadeResult> cascade_wide;
  std::shared_ptr<AiterSide> aiter;      // add_aiter_sides (null: not asked; ran = false: not run)
  std::shared_ptr<AiterSide> aiter_spread;  // the same kernel with v1_2 (fast_mode) metadata
  nlohmann::json to_json() const;
};

struct MeasureOptions {
  int scaled_cus = 4;            // CUs of the scaled runs
  int unit_tiles = 0;            // tiles per unit of the scaled runs (0: the full plan's mean)
  int64_t full_scale_max_tokens = 0;  // emulate at full scale when total tokens <= this
  bool run_mca = true;
  bool verbose = false;
  bool trace_hot_loop = false;  // print the steady iteration's co-issue slots per instruction
};
ShapeResult measure_shape(const BenchShape& s, const MeasureOptions& o);
// The cascade side of a shape with sharing (measure_shape calls it; r holds the per-request side).
CascadeResult measure_cascade(const BenchShape& s, const ShapeResult& r, const MeasureOptions& o);

// ---- Output ------------------------------------------------------------------------------

struct SameBytesGroup {
  std::string members;
  std::vector<int> index;  // into results
  double lo = 0, hi = 0, spread = 0;
  std::optional<PublishedGroup> published;
};
std::vector<SameBytesGroup> same_bytes_groups(const std::vector<ShapeResult>& r);
std::string markdown_report(const std::vector<ShapeResult>& r, const std::vector<SameBytesGroup>& g);
nlohmann::json json_report(const std::vector<ShapeResult>& r, const std::vector<SameBytesGroup>& g);

// ---- Hardware mode -------------------------------------------------------------------------
struct HipOptions {
  int runs = 100, warmup = 10, rotate = 0;  // rotate: input sets (0: enough to exceed 2x LLC)
  std::string catalog_dir;                   // "" : build per shape like the emulator mode
};
// Times every shape on device 0; throws std::runtime_error with a clear message when no AMD
// GPU (or no HIP) is present.
nlohmann::json hip_bench(const std::vector<BenchShape>& shapes, const HipOptions& o, std::string& table);

}  // namespace mla::bench
