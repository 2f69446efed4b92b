// The machine model (docs/performance.md). Every number it produces is modeled, not measured.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/bench.h"
#include "kernels/mla_reduce.h"
#include "target/target.h"

namespace mla::bench {

Machine machine_for(rt::Target t) {
  const auto& tgt = gen_target(t);
  Machine m;
  m.target = t;
  m.name = t == rt::Target::gfx942 ? "MI300X" : "MI355X";
  m.cus = tgt.num_cus;
  m.hbm_bytes_per_s = tgt.hbm_achievable_bytes_per_s;
  m.hbm_peak_bytes_per_s = tgt.hbm_peak_bytes_per_s;
  m.hbm_source = std::string(tgt.hbm_achievable_source);
  m.clock_hz = tgt.machine.clock_hz;
  m.little_latency_s = tgt.machine.little_latency_s;
  m.cu_port_bytes_per_clk = tgt.machine.cu_port_bytes_per_clk;
  m.unit_fill_s = tgt.machine.unit_fill_s;
  // A launch's fixed device time, less the unit fill the model adds per CU: a one-unit launch of
  // a tiny kernel is then modeled at the fitted kernel_fixed_s.
  m.launch_s = std::max(0.0, tgt.machine.kernel_fixed_s - tgt.machine.unit_fill_s);
  m.launch_source = std::string(tgt.machine.kernel_fixed_source);
  return m;
}

Machine at_datasheet_peak(Machine m) {
  m.hbm_bytes_per_s = m.hbm_peak_bytes_per_s;
  return m;
}

nlohmann::json Machine::to_json() const {
  return {{"name", name},
          {"target", rt::name(target)},
          {"cus", cus},
          {"hbm_bytes_per_s", hbm_bytes_per_s},
          {"hbm_ceiling", "achievable"},
          {"hbm_source", hbm_source},
          {"hbm_peak_bytes_per_s", hbm_peak_bytes_per_s},
          {"hbm_achievable_over_peak", hbm_bytes_per_s / hbm_peak_bytes_per_s},
          {"clock_hz", clock_hz},
          {"little_latency_s", little_latency_s},
          {"unit_fill_s", unit_fill_s},
          {"cu_port_bytes_per_clk", cu_port_bytes_per_clk},
          {"launch_s", launch_s},
          {"launch_source", launch_source},
          {"little_bytes_per_cu", little_bytes_per_cu()}};
}

std::string Machine::ceiling_text() const {
  return fmt::format("{} achievable {:.1f} TB/s ({}; {:.2f} of the {:.1f} TB/s datasheet peak)", name, hbm_bytes_per_s / 1e12,
                     hbm_source, hbm_bytes_per_s / hbm_peak_bytes_per_s, hbm_peak_bytes_per_s / 1e12);
}

nlohmann::json ModeledTime::to_json() const {
  return {{"modeled_total_us", total_s * 1e6},     {"modeled_decode_us", decode_s * 1e6},
          {"modeled_reduce_us", reduce_s * 1e6},   {"modeled_launch_us", launch_s * 1e6},
          {"max_cu_mem_us", max_cu_mem_s * 1e6},   {"max_cu_issue_us", max_cu_compute_s * 1e6},
          {"hbm_floor_us", hbm_floor_s * 1e6},     {"per_cu_bytes_per_s", per_cu_rate},
          {"max_cu_phases_us", max_cu_phases_s * 1e6},
          {"bound", bound}};
}

std::vector<ModelUnit> model_units(const rt::Plan& plan) {
  std::vector<ModelUnit> v;
  for (const auto& u : plan.units) v.push_back({int64_t(u.kv_end - u.kv_start), u.partial >= 0});
  return v;
}

std::vector<int> cus_of_ranges(const std::vector<int32_t>& ranges, size_t units, int num_cu) {
  std::vector<int> cu(units, 0);
  for (size_t x = 0; x + 1 < ranges.size(); ++x)
    for (int32_t i = ranges[x]; i < ranges[x + 1] && size_t(i) < units; ++i) cu[size_t(i)] = int(x % size_t(num_cu));
  return cu;
}

std::vector<int> round_robin_cus(int items, int num_cu) {
  std::vector<int> cu(static_cast<size_t>(items));
  for (int i = 0; i < items; ++i) cu[size_t(i)] = i % num_cu;
  return cu;
}

ModeledTime model_time_assigned(const Machine& m, const KernelFacts& f, const std::vector<ModelUnit>& units,
                                const std::vector<int>& cu_of_unit, int reduce_entries, int reduce_splits, int q_groups,
                                int reduce_bf16_splits, int reduce_rounds) {
  if (cu_of_unit.size() != units.size())
    throw std::invalid_argument("model_time_assigned: one CU per unit expected");
  const int C = m.cus;
  std::vector<double> bytes(C, 0), tiles(C, 0), idle_block_tiles(C, 0);
  const bool phased = f.prologue_inflight_bytes_per_wg > 0;
  if (phased && (f.epilogue_inflight_bytes_per_wg <= 0 || f.max_resident_wgs != 1))
    throw std::invalid_argument(fmt::format("model_time_assigned: a phased kernel with {} epilogue bytes in flight and {} "
                                            "resident workgroups (allowed: > 0 and 1)",
                                            f.epilogue_inflight_bytes_per_wg, f.max_resident_wgs));
  const auto little = [&](double inflight) {
    return rt::modeled_cu_stream_rate(m.cu_port_bytes_per_clk, m.clock_hz, inflight, m.little_latency_s);
  };
  // Phased: per CU, the units' prologues and epilogues (seconds), which add to the stream.
  std::vector<double> serial(C, 0);
  // Per CU: tiles x computing row blocks, by the unit's computing consumer waves (which set how
  // many SIMDs share its issue). Whole numbers: the sums are exact in any order.
  std::vector<std::map<int, double>> block_tiles(C);
  std::vector<int> n(C, 0);
  // Several blocks per wave: per CU, tiles x (the waves' summed issue, the busiest wave's issue,
  // the LDS clocks of the waves' reads and the tile's DMA write).
  std::vector<double> wide_sum(C, 0), wide_most(C, 0), wide_lds(C, 0);
  // Every read passes the CU's port (bytes[c]); HBM sees each distinct byte once per launch
  // (re-reads such as Q by every unit of a request hit the L2 / Infinity Cache: modeled).
  double total = f.distinct_per_q_group * q_groups;
  for (size_t i = 0; i < units.size(); ++i) {
    const auto& u = units[i];
    const int c = cu_of_unit[i];
    if (c < 0 || c >= C) throw std::invalid_argument(fmt::format("model_time_assigned: unit {} on CU {} of {}", i, c, C));
    const double w = (u.partial ? f.write_partial_unit : f.write_final_unit) + f.write_partial_per_row * u.rows;
    if (phased) {
      bytes[c] += f.read_per_token * double(u.tokens);
      serial[c] += std::max(m.unit_fill_s, (f.read_per_unit + f.read_per_row * u.rows) / little(f.prologue_inflight_bytes_per_wg)) +
                   w / little(f.epilogue_inflight_bytes_per_wg);
    } else {
      bytes[c] += f.read_per_unit + f.read_per_token * double(u.tokens) + f.read_per_row * u.rows + w;
    }
    total += f.distinct_per_unit + f.distinct_per_token * double(u.tokens) * u.first_read + w;
    const double t = std::ceil(double(u.tokens) / f.tile_tokens);
    tiles[c] += t;
    const int blocks = u.blocks > 0 ? std::min(u.blocks, f.row_blocks) : f.row_blocks;
    if (f.blocks_per_wave > 1) {
      double sum = 0, most = 0, lds = f.lds_write_cycles_per_tile;
      for (int left = blocks; left > 0; left -= f.blocks_per_wave) {
        const int b = std::min(f.blocks_per_wave, left);
        sum += f.wave_tile_cycles.at(size_t(b - 1));
        most = std::max(most, f.wave_tile_cycles.at(size_t(b - 1)));
        lds += f.wave_tile_lds_cycles.at(size_t(b - 1));
      }
      wide_sum[c] += t * sum, wide_most[c] += t * most, wide_lds[c] += t * lds;
      n[c] += 1;
      continue;
    }
    block_tiles[c][std::max(1, f.consumers * blocks / std::max(1, f.row_blocks))] += t * blocks;
    idle_block_tiles[c] += t * (f.row_blocks - blocks);
    n[c] += 1;
  }
  ModeledTime t;
  t.hbm_floor_s = total / m.hbm_bytes_per_s;
  const double port = m.cu_port_bytes_per_clk * m.clock_hz;
  double worst = 0;
  for (int c = 0; c < C; ++c) {
    if (!n[c]) continue;
    const int resident = std::min(n[c], f.max_resident_wgs);
    const double rate = little(resident * f.inflight_bytes_per_wg);
    const double mem = bytes[c] / rate;
    // Every tile passes through each computing row block's consumer (one 16-row block each), on
    // the SIMDs its computing consumers and resident neighbours occupy; LDS is per CU.
    double mfma = 0;
    for (const auto& [consumers, bt] : block_tiles[c])
      mfma += bt * f.hot_loop_cycles / m.clock_hz / std::min(4, resident * consumers);
    double lds = (tiles[c] * f.lds_cycles_per_tile - idle_block_tiles[c] * f.lds_cycles_per_block) / m.clock_hz;
    if (f.blocks_per_wave > 1) {
      mfma = std::max(wide_sum[c] / 4, wide_most[c] / resident) / m.clock_hz;
      lds = wide_lds[c] / m.clock_hz;
    }
    // The producers: one wave per resident workgroup, each on its own SIMD.
    const double producer = tiles[c] * f.producer_cycles_per_tile / m.clock_hz / std::min(4, resident);
    const double issue = std::max({mfma, lds, producer});
    // Units on a CU run back to back (resident ones overlap their fill; phased ones add their
    // prologues and epilogues, the fill inside each prologue).
    const double fill = phased ? serial[c] : m.unit_fill_s * std::ceil(double(n[c]) / resident);
    const double tc = fill + std::max(mem, issue);
    if (tc > worst) {
      worst = tc;
      t.max_cu_mem_s = mem;
      t.max_cu_compute_s = issue;
      t.producer_bound = producer > std::max(mfma, lds);
      t.max_cu_phases_s = phased ? serial[c] : 0.0;
      t.per_cu_rate = rate;
    }
  }
  t.decode_s = std::max(worst, t.hbm_floor_s);
  if (t.decode_s == t.hbm_floor_s) t.bound = "HBM bandwidth";
  else if (t.max_cu_compute_s > t.max_cu_mem_s) t.bound = t.producer_bound ? "producer issue" : "hot-loop issue";
  else if (t.per_cu_rate < port) t.bound = "bytes in flight (Little)";
  else t.bound = "CU read port";
  t.launch_s = m.launch_s;
  if (reduce_entries > 0) {
    const double rb = f.reduce_per_entry * reduce_entries + f.reduce_per_split * (reduce_splits - reduce_bf16_splits) +
                      f.reduce_per_bf16_split * reduce_bf16_splits;
    t.reduce_s = std::max(rb / m.hbm_bytes_per_s, m.unit_fill_s + m.trip_s() * reduce_rounds);
    t.launch_s += m.launch_s;
  }
  t.total_s = t.launch_s + t.decode_s + t.reduce_s;
  return t;
}

ModeledTime model_time(const Machine& m, const KernelFacts& f, const std::vector<ModelUnit>& units,
                       int reduce_entries, int reduce_splits, int q_groups, int reduce_bf16_splits, int reduce_rounds) {
  return model_time_assigned(m, f, units, round_robin_cus(int(units.size()), m.cus), reduce_entries, reduce_splits, q_groups,
                             reduce_bf16_splits, reduce_rounds);
}

int reduce_rounds(const rt::Plan& plan) {
  int most = 0;
  for (const auto& e : plan.reduces) most = std::max(most, gen::reduce_load_rounds(e.num_splits, e.bf16_splits));
  return most;
}

double lower_bound_s(const Machine& m, const KernelFacts& f, const std::vector<int>& kv_lens) {
  double tokens = 0, longest = 0, requests = 0;
  for (int len : kv_lens) tokens += len, longest = std::max(longest, double(len)), requests += len > 0;
  if (requests == 0) return m.launch_s;
  const double rows = requests * f.row_groups;  // row groups: each a unit at least
  const double rate = rt::modeled_cu_stream_rate(m.cu_port_bytes_per_clk, m.clock_hz,
                                                 f.max_resident_wgs * f.inflight_bytes_per_wg, m.little_latency_s);
  // What every plan moves from HBM, and the mean CU's share of what passes the CUs' ports.
  double hbm = f.distinct_per_token * tokens + f.distinct_per_q_group * rows + f.write_final_unit * rows;
  const double cu = m.unit_fill_s + (f.read_per_token * tokens + rows * (f.read_per_unit + f.write_final_unit)) / m.cus / rate;
  double decode = std::max(hbm / m.hbm_bytes_per_s, cu), reduce = 0;
  // A request longer than the mean CU's work must split: its pieces write partials, and the
  // reduce launch (its fill and two dependent trips at least) merges them.
  const double own = m.unit_fill_s + (f.read_per_token * longest + f.read_per_unit + f.write_final_unit) / rate;
  if (own > decode) {
    const double pieces = std::ceil(own / decode);
    hbm += pieces * f.row_groups * f.write_partial_unit;
    decode = std::max(hbm / m.hbm_bytes_per_s, cu);
    reduce = m.launch_s + m.unit_fill_s + 2 * m.trip_s();
  }
  return m.launch_s + decode + reduce;
}

BruteForce brute_force_splits(const Machine& m, const KernelFacts& f, const std::vector<int>& kv_lens, int max_splits) {
  BruteForce bf;
  const int T = f.tile_tokens;
  for (int s = 1; s <= max_splits; ++s) {
    std::vector<ModelUnit> units;
    int entries = 0, splits = 0, rounds = 0;
    for (int len : kv_lens) {
      const int tiles = (len + T - 1) / T;
      const int k = std::min(s, tiles);
      if (k > 1) {
        ++entries;
        splits += k;
        rounds = std::max(rounds, gen::reduce_load_rounds(k, 0));
      }
      int start = 0;
      for (int j = 0; j < k; ++j) {
        int nt = tiles / k + (j < tiles % k ? 1 : 0);
        int end = std::min(len, (start / T + nt) * T);
        for (int g = 0; g < f.row_groups; ++g) units.push_back({int64_t(end - start), k > 1});
        start = end;
      }
    }
    // Longest first; unit i goes to CU i mod C (one unit per CU per round).
    std::stable_sort(units.begin(), units.end(), [](const ModelUnit& a, const ModelUnit& b) { return a.tokens > b.tokens; });
    const double t = model_time(m, f, units, entries, splits, int(kv_lens.size()) * f.row_groups, 0, rounds).total_s;
    bf.tried.push_back({s, t});
    if (bf.best_splits == 0 || t < bf.best_s) {
      bf.best_s = t;
      bf.best_splits = s;
    }
  }
  return bf;
}

}  // namespace mla::bench
