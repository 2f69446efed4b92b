// The least modeled layer time of a cascade plan whose CU-side KV reads stay within a ratio of
// the distinct bytes (docs/shared-prefix.md "What reading the prefix once costs"). Every number
// here is modeled: it is the machine model of docs/performance.md taken at its most favourable.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "bench/bench.h"
#include "target/target.h"

namespace mla::bench {

double best_macs_per_simd_clock(rt::Target t, bool fp8) {
  const auto& tgt = gen_target(t);
  double best = 0;
  for (const auto& f : tgt.mfma) {
    const std::string_view n = f.mnemonic;
    const bool takes_fp8 = n.find("fp8") != std::string_view::npos || n.find("f8f6f4") != std::string_view::npos;
    if (fp8 ? !takes_fp8 : n.find("bf16") == std::string_view::npos) continue;
    best = std::max(best, double(f.m) * f.n * f.k / (4.0 * f.passes));  // a pass is 4 clocks
  }
  if (best == 0)
    throw std::runtime_error(fmt::format("no {} MFMA in the {} target description", fp8 ? "fp8" : "bf16", rt::name(t)));
  return best;
}

// A plan that reads the prefix at most kv_ratio times its distinct bytes puts a fraction
// f = (kv_ratio - 1) x distinct / prefix bytes of the prefix tiles on pairs of CUs that hold half
// of the rows each (read twice), the rest on CUs that hold all R rows (read once). With n CUs
// doing prefix work balanced per CU, the splits are n (1 - f / 2) (a pair is one split on two
// CUs), each writing R partial rows that the reduce reads back. Per n, the layer costs at least
//   launches + unit fill + max(MFMA work / n, HBM bytes / bandwidth) + partials / bandwidth
// where the MFMA work runs at the rate given (the target's best MFMA with every slot busy, or a
// kernel's hot loop) and the HBM bytes are the distinct KV + the partials: as in the model
// (machine.cpp), a pair's second read is an L2 hit. Q, O, page ids and the unique parts' CUs
// are left out, which only lowers it. The bound is the least of these over n = 1..CUs.
OneReadBound one_read_bound(const Machine& m, const OneReadInputs& in, double kv_ratio, std::string basis) {
  if (in.rows <= 0 || in.prefix_tokens <= 0 || in.distinct_kv_bytes <= 0 || in.prefix_kv_bytes <= 0 ||
      in.partial_row_bytes <= 0 || in.macs_per_cu_clock <= 0 || in.launches < 1 || kv_ratio < 1)
    throw std::invalid_argument(fmt::format(
        "one_read_bound: rows {}, prefix_tokens {}, distinct {}, prefix {}, partial row {}, MACs per clock {}, launches {}, "
        "kv_ratio {} (allowed: all > 0, launches >= 1, kv_ratio >= 1)",
        in.rows, in.prefix_tokens, in.distinct_kv_bytes, in.prefix_kv_bytes, in.partial_row_bytes, in.macs_per_cu_clock,
        in.launches, kv_ratio));
  OneReadBound b;
  b.basis = std::move(basis);
  b.launches = in.launches;
  b.hbm_bytes_per_s = m.hbm_bytes_per_s;
  const auto& tgt = gen_target(m.target);
  const double cu_register_bytes = 4.0 * tgt.unified_vgprs * 64 * 4;  // 4 SIMDs x 512 registers x 64 lanes x 4 B
  b.o_fits_registers = double(in.rows) * rt::kVDim * 4 <= cu_register_bytes;
  b.kv_ratio = kv_ratio;
  b.pair_fraction = std::min(1.0, (kv_ratio - 1) * in.distinct_kv_bytes / in.prefix_kv_bytes);
  b.mfma_work_cu_s = in.prefix_tokens * in.rows * in.macs_per_row_token / in.macs_per_cu_clock / m.clock_hz;
  b.total_s = INFINITY;
  for (int n = 1; n <= m.cus; ++n) {
    const double splits = n * (1 - b.pair_fraction / 2);
    const double partials = splits * in.rows * in.partial_row_bytes;
    const double compute = b.mfma_work_cu_s / n, hbm = (in.distinct_kv_bytes + partials) / m.hbm_bytes_per_s;
    const double reduce = std::max(partials / m.hbm_bytes_per_s, m.unit_fill_s);
    const double t = in.launches * m.launch_s + m.unit_fill_s + std::max(compute, hbm) + reduce;
    if (t < b.total_s) b.cus = n, b.splits = splits, b.compute_s = compute, b.hbm_s = hbm, b.reduce_s = reduce, b.total_s = t;
  }
  return b;
}

nlohmann::json OneReadBound::to_json() const {
  return {{"basis", basis},
          {"kv_ratio", kv_ratio},
          {"pair_fraction", pair_fraction},
          {"mfma_work_cu_us", mfma_work_cu_s * 1e6},
          {"launches", launches},
          {"hbm_tb_per_s", hbm_bytes_per_s / 1e12},
          {"cus", cus},
          {"splits", splits},
          {"compute_us", compute_s * 1e6},
          {"hbm_us", hbm_s * 1e6},
          {"reduce_us", reduce_s * 1e6},
          {"modeled_total_us", total_s * 1e6},
          {"o_fits_registers", o_fits_registers},
          {"modeled", "lower bound of the machine model (docs/shared-prefix.md), not a measurement"}};
}

}  // namespace mla::bench
