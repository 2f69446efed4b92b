// Measurement: catalogs built in-process, scaled emulator runs, the linear fit, and the
// extrapolation to the full shape with the planner's exact full-scale plan.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "bench/aiter_side.h"
#include "bench/bench.h"
#include "catalog/catalog.h"
#include "catalog/compile.h"
#include "config/config.h"
#include "runtime/backend.h"
#include "runtime/emulator_backend.h"
#include "target/target.h"

namespace mla::bench {

namespace {
std::string config_text(const rt::DecodeShape& s) {
  if (s.sparse)
    return fmt::format(
        R"({{"deployment": "mlabench", "kernels": [{{"kind": "mla_decode", "target": "{}", "heads": {}, "q_dtype": "{}",
            "kv_dtype": "{}", "attention": "sparse", "return_lse": {}}}]}})",
        rt::name(s.target), s.heads, rt::name(s.q_dtype), s.kv_name(), s.return_lse ? "true" : "false");
  return fmt::format(
      R"({{"deployment": "mlabench", "kernels": [{{"kind": "mla_decode", "target": "{}", "heads": {}, "q_dtype": "{}",
          "kv_dtype": "{}", "qseqlen": {}, "page_size": {}, "return_lse": {}, "logit_cap": {}}}]}})",
      rt::name(s.target), s.heads, rt::name(s.q_dtype), rt::name(s.kv_dtype), s.qseqlen, s.page_size,
      s.return_lse ? "true" : "false", s.logit_cap ? "true" : "false");
}
}  // namespace

namespace {
std::map<std::string, std::unique_ptr<rt::Catalog>>& catalog_cache() {
  static std::map<std::string, std::unique_ptr<rt::Catalog>> cache;
  return cache;
}
}  // namespace

void use_catalog(const rt::DecodeShape& s, const std::string& dir) {
  catalog_cache()[s.describe()] = std::make_unique<rt::Catalog>(rt::Catalog::open(dir));
}

const rt::Catalog& catalog_for(const rt::DecodeShape& s) {
  auto& cache = catalog_cache();
  std::string key = s.describe();
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("mlabench-{}-{}", getpid(), cache.size())).string();
  // A fresh directory: one left by an earlier process of the same pid may hold another
  // generator's catalog, which the build would keep beside this shape's kernels.
  std::filesystem::remove_all(dir);
  gen::BuildOptions opts;
  opts.out_dir = dir;
  opts.jobs = 2;
  gen::build_catalog({gen::parse_config(config_text(s), "mlabench.json")}, opts);
  auto [it, _] = cache.emplace(key, std::make_unique<rt::Catalog>(rt::Catalog::open(dir)));
  return *it->second;
}

std::string decode_asm_for(const rt::DecodeShape& s) {
  auto cfg = gen::parse_config(config_text(s), "mlabench.json");
  for (const auto& spec : cfg.kernels)
    if (spec.kind == gen::KernelKind::MlaDecode) return gen::compile_kernel(spec).asm_text;
  throw std::runtime_error("mlabench: no decode kernel for " + s.describe());
}

std::string prefix_asm_for(const rt::DecodeShape& s) {
  auto cfg = gen::parse_config(config_text(s), "mlabench.json");
  // The prefix kernel the shape selects: the default one or the wide one (s.prefix_rows), as
  // rt::Catalog::select does; the first prefix spec of the config is the default one.
  for (const auto& spec : cfg.kernels)
    if (spec.kind == gen::KernelKind::MlaPrefix && spec.prefix_rows == s.prefix_rows)
      return gen::compile_kernel(spec).asm_text;
  throw std::runtime_error(fmt::format("mlabench: no prefix kernel of prefix_rows {} for {}", s.prefix_rows, s.describe()));
}

rt::ProblemParams problem_params(const rt::DecodeShape& s, const std::vector<int>& kv_lens, uint64_t seed,
                                 const std::vector<rt::ProblemParams::Shared>& shared) {
  rt::ProblemParams pp;
  pp.target = s.target;
  pp.heads = s.heads;
  pp.qseqlen = s.qseqlen;
  pp.q_dtype = s.q_dtype;
  pp.kv_dtype = s.kv_dtype;
  pp.page_size = s.page_size;
  pp.kv_lens = kv_lens;
  pp.seed = seed;
  pp.return_lse = s.return_lse;
  pp.shared = shared;
  pp.sparse = s.sparse;  // rows of kv_lens[b] random slots of their own (no slot shared), none masked
  pp.sparse_pool = s.sparse ? -1 : 0;
  pp.kv_ds_mla = s.kv_ds_mla;
  return pp;
}

// workgroups_per_cu: 0 plans as the runtime does (the kernel's occupancy); the scaled runs use 1
// so that each sample's unit count is set by its design (C, 2C, 2C units), not by occupancy.
RunSample run_sample(const rt::DecodeShape& s, const std::vector<int>& kv_lens, int num_cus, uint64_t seed,
                     int workgroups_per_cu, const std::vector<rt::ProblemParams::Shared>& shared,
                     rt::CascadePolicy cascade) {
  auto p = rt::make_random_problem(problem_params(s, kv_lens, seed, shared));
  const auto& cat = catalog_for(s);
  rt::EmulatorRunOptions opts;
  opts.num_cus = num_cus;
  opts.workgroups_per_cu = workgroups_per_cu;
  opts.cascade = cascade;
  auto t0 = std::chrono::steady_clock::now();
  auto r = rt::run_decode_on_emulator(p, cat.select(s), opts);
  RunSample x;
  x.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  x.kv_lens = kv_lens;
  x.num_cus = num_cus;
  x.U = double(r.plan.units.size());
  // Decode units only (Plan::total_tokens adds the prefix units'), and the decode launch's
  // distinct (request, row group) Q blocks.
  std::set<std::pair<int, int>> decode_q_blocks;
  for (const auto& u : r.plan.units) {
    x.N += u.kv_end - u.kv_start;
    decode_q_blocks.emplace(u.batch, u.row_group);
  }
  x.E = double(r.plan.reduces.size());
  x.G = double(decode_q_blocks.size());
  for (const auto& e : r.plan.reduces) x.S += e.num_splits, x.Sb += e.bf16_splits;
  for (const auto& u : r.plan.units) (u.partial >= 0 ? x.partial_units : x.final_units) += 1;
  auto sum = [](const emu::Counters& c, double& rd, double& rdd, double& wr) {
    for (const auto& b : c.buffers)
      if (b.name != "kernarg") {
        rd += double(b.read);
        rdd += double(b.read_distinct);
        wr += double(b.written);
      }
  };
  // The persistent walk's own reads (abi::LaunchHeader): every wave of every workgroup of a grid
  // reads its header's two offsets and its range, 16 bytes, whatever its units: a per-launch
  // constant, not per unit or token, which the fits below leave out (it is < 0.1 MB per launch).
  auto drop_walk = [](const emu::Counters& c, int workgroup_size, double& rd, double& rdd) {
    rd -= 16.0 * c.workgroups * ((workgroup_size + 63) / 64);
    rdd -= 8.0 + 4.0 * (c.workgroups + 1);
  };
  const rt::Selection sel = cat.select(s);
  if (r.ran_decode) {
    sum(r.decode, x.decode_read, x.decode_read_distinct, x.decode_written);
    drop_walk(r.decode, sel.decode.workgroup_size, x.decode_read, x.decode_read_distinct);
  }
  auto kv_read = [](const emu::Counters& c) {
    for (const auto& b : c.buffers)
      if (b.name == "kv") return double(b.read);
    return 0.0;
  };
  if (r.ran_decode) x.decode_kv_read = kv_read(r.decode);
  x.kv_distinct = double(r.kv_distinct_bytes);
  if (r.ran_prefix) {
    x.ran_prefix = true;
    sum(r.prefix, x.prefix_read, x.prefix_read_distinct, x.prefix_written);
    drop_walk(r.prefix, sel.prefix->workgroup_size, x.prefix_read, x.prefix_read_distinct);
    x.prefix_kv_read = kv_read(r.prefix);
    x.prefix_macs = double(r.prefix.total.mfma_macs);
  }
  {
    std::map<std::pair<int, int>, int> q_blocks;  // (group, row group) -> rows
    for (const auto& u : r.plan.prefix_units) {
      x.Up += 1;
      x.Np += u.kv_end - u.kv_start;
      if (u.row_group == 0) x.Npd += u.kv_end - u.kv_start;
      if (u.partial >= 0) x.prefix_partial_units += 1;
      const int rows = prefix_unit_rows(u, r.plan.prefix_rows_per_group);
      x.Rp += rows;
      x.NBp += prefix_unit_block_tokens(u, r.plan.tile_tokens, prefix_unit_blocks(rows, r.plan.prefix_rows_per_group / 16));
      if (!r.plan.is_unique_part(u)) q_blocks[{u.first_request, u.row_group}] = rows;  // a member's rows are its group's
    }
    x.Gp = double(q_blocks.size());
    for (const auto& [k, rows] : q_blocks) x.Rpd += rows;
  }
  if (r.ran_reduce) sum(r.reduce, x.reduce_read, x.reduce_read_distinct, x.reduce_written);
  x.mfma_macs = double(r.decode.total.mfma_macs);
  x.wave_insts = double(r.decode.total.wave_insts);
  x.lds_bank_cycles = double(r.decode.total.lds_bank_cycles);
  x.lds_ideal_cycles = double(r.decode.total.lds_ideal_cycles);
  x.traffic_read = double(r.traffic.read());
  x.traffic_needed = double(r.traffic.needed());
  return x;
}

int feature_rank(const std::vector<std::vector<double>>& x) {
  const size_t k = x.empty() ? 0 : x[0].size();
  // The normal matrix X^T X, eliminated with the tolerance fit_linear uses: the features a fit
  // over these samples can separate.
  std::vector<std::vector<double>> a(k, std::vector<double>(k, 0.0));
  for (const auto& row : x)
    for (size_t r = 0; r < k; ++r)
      for (size_t c = 0; c < k; ++c) a[r][c] += row[r] * row[c];
  double scale = 0;
  for (size_t r = 0; r < k; ++r) scale = std::max(scale, std::fabs(a[r][r]));
  int rank = 0;
  std::vector<bool> used(k, false);
  for (size_t c = 0; c < k; ++c) {
    size_t piv = k;
    for (size_t r = 0; r < k; ++r)
      if (!used[r] && (piv == k || std::fabs(a[r][c]) > std::fabs(a[piv][c]))) piv = r;
    if (piv == k || std::fabs(a[piv][c]) <= 1e-12 * std::max(1.0, scale)) continue;
    used[piv] = true;
    ++rank;
    for (size_t r = 0; r < k; ++r)
      if (r != piv) {
        const double f = a[r][c] / a[piv][c];
        for (size_t q = c; q < k; ++q) a[r][q] -= f * a[piv][q];
      }
  }
  return rank;
}

FitN fit_linear(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  const size_t k = x.empty() ? 0 : x[0].size();
  // Normal equations A c = b, solved by Gaussian elimination with partial pivoting.
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < y.size(); ++i)
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) a[r][c] += x[i][r] * x[i][c];
      a[r][k] += x[i][r] * y[i];
    }
  double scale = 0;
  for (size_t r = 0; r < k; ++r) scale = std::max(scale, std::fabs(a[r][r]));
  for (size_t c = 0; c < k; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[piv][c])) piv = r;
    if (std::fabs(a[piv][c]) <= 1e-12 * std::max(1.0, scale))
      throw std::runtime_error("mlabench: linear fit is singular (the samples do not vary every feature)");
    std::swap(a[c], a[piv]);
    for (size_t r = 0; r < k; ++r)
      if (r != c) {
        const double f = a[r][c] / a[c][c];
        for (size_t q = c; q <= k; ++q) a[r][q] -= f * a[c][q];
      }
  }
  FitN f;
  for (size_t r = 0; r < k; ++r) f.c.push_back(a[r][k] / a[r][r]);
  for (size_t i = 0; i < y.size(); ++i) {
    double e = y[i];
    for (size_t r = 0; r < k; ++r) e -= f.c[r] * x[i][r];
    if (y[i] != 0) f.residual = std::max(f.residual, std::fabs(e) / std::fabs(y[i]));
  }
  return f;
}

Fit2 fit2(const std::vector<double>& x1, const std::vector<double>& x2, const std::vector<double>& y) {
  std::vector<std::vector<double>> x;
  for (size_t i = 0; i < y.size(); ++i) x.push_back({x1[i], x2[i]});
  const FitN f = fit_linear(x, y);
  return {f.c[0], f.c[1], f.residual};
}

nlohmann::json ShapeResult::to_json() const {
  nlohmann::json j;
  j["name"] = shape.name;
  j["set"] = shape.set;
  j["shape"] = shape.shape.describe();
  j["batch"] = shape.kv_lens.size();
  j["total_tokens"] = shape.total_tokens();
  j["decode_kernel"] = decode_kernel;
  j["measured"] = {
      {"source", full_scale ? "emulator, full scale" : "emulator, scaled runs extrapolated with the full plan"},
      {"fit_max_relative_residual", fit_residual},
      {"bytes",
       {{"kv", kv_bytes}, {"kv_indices", idx_bytes}, {"q", q_bytes}, {"o", o_bytes}, {"partials", partial_bytes},
        {"tables", table_bytes}, {"read", read_bytes}, {"written", written_bytes}}},
      {"read_over_min", ratio_read_over_min},
      {"moved_over_min", ratio_moved_over_min},
      {"moved_over_plan_needed", ratio_moved_over_plan},
      {"runtime_read_over_needed", ratio_read_over_needed},
      {"read_distinct", read_distinct_bytes},
      {"distinct_moved_over_plan_needed", ratio_distinct_moved_over_plan},
      {"partial_traffic_over_kv", partial_over_kv},
      {"macs_issued", macs_issued},
      {"macs_useful", macs_useful},
      {"macs_issued_over_useful", mac_ratio},
      {"inflight_bytes_per_cu", inflight_per_cu},
      {"hot_loop", hot.to_json()}};
  j["plan"] = {{"units", units},      {"num_partials", num_partials}, {"reduce_entries", reduce_entries},
               {"cus", cus},          {"cus_used", cus_used},         {"balance_max_over_mean", balance},
               {"kv_bytes_per_cu", kv_bytes_per_cu}};
  j["target_model"] = {{"little_bytes_per_cu", little_per_cu},
                       {"tile_mem_cycles_at_cu_share", tile_mem_cycles},
                       {"hot_loop_issue_over_tile_mem", issue_over_mem},
                       {"hot_loop_coissue_over_tile_mem_modeled", coissue_over_mem},
                       {"lds_clocks_over_tile_mem_modeled", lds_over_mem},
                       {"lds_bank_factor_modeled", lds_bank_factor}};
  j["modeled"] = modeled.to_json();
  j["modeled"]["modeled_tbps"] = modeled_tbps;
  {
    const Machine m = machine_for(shape.shape.target);  // the ceiling these times were priced at
    j["modeled"]["hbm_ceiling"] = m.ceiling_text();
    j["modeled"]["hbm_ceiling_bytes_per_s"] = m.hbm_bytes_per_s;
    j["modeled"]["fraction_of_hbm_ceiling"] = modeled_tbps * 1e12 / m.hbm_bytes_per_s;
  }
  j["modeled"]["brute_force_best_splits"] = brute.best_splits;
  j["modeled"]["brute_force_best_us"] = brute.best_s * 1e6;
  j["modeled"]["plan_over_brute_force_best"] = plan_over_best;
  j["modeled"]["lower_bound_us"] = lower_bound_s * 1e6;
  j["modeled"]["over_lower_bound"] = modeled.total_s / lower_bound_s;
  j["modeled"]["planner_workgroups_per_cu"] = facts.max_resident_wgs;
  j["modeled"]["as_run"] = {{"launches", launches_as_run}, {"launches_priced_above", launches_priced},
                            {"total_us", as_run_s * 1e6}};
  j["modeled"]["one_launch"] = {{"option", "MLA_OPTION_MERGE 1, cascades off"},
                                {"max_splits", one_launch_max_splits},
                                {"merge_us", one_launch_merge_s * 1e6},
                                {"total_us", one_launch_s * 1e6}};
  j["samples"] = nlohmann::json::array();
  for (const auto& s : samples)
    j["samples"].push_back({{"kv_lens", s.kv_lens.size() > 4 ? nlohmann::json(fmt::format("{} x {}", s.kv_lens[0], s.kv_lens.size()))
                                                              : nlohmann::json(s.kv_lens)},
                            {"num_cus", s.num_cus}, {"units", s.U}, {"tokens", s.N}, {"decode_read", s.decode_read},
                            {"emulator_seconds", s.seconds}});
  if (cascade) j["shared_prefix"] = cascade->to_json();
  if (cascade_wide) j["shared_prefix_wide"] = cascade_wide->to_json();
  if (shape.pub_aiter_us) j["published_seed001"] = {{"aiter_us", *shape.pub_aiter_us}, {"ours_us", *shape.pub_ours_us}};
  // aiter's code objects on the same counters and model (mlabench --aiter-dir); "not run" without it.
  j["aiter"] = aiter ? aiter->to_json() : nlohmann::json{{"ran", false}, {"not_run", "not run (no --aiter-dir)"}};
  j["aiter_v1_2"] = aiter_spread ? aiter_spread->to_json() : nlohmann::json{{"ran", false}, {"not_run", "not run (no --aiter-dir)"}};
  return j;
}

namespace {

// The facts of a shape from its scaled runs (r.samples): a linear fit of each counter in units,
// tokens and (request, row group) Q blocks, the reduce's in entries and splits, and the decode's
// writes per partial and per final unit; the plan's totals from them. Returns the plan's MACs.
double fit_scaled_facts(ShapeResult& r, const BenchShape& bs, const rt::Plan& plan, bool plan_reduces) {
  KernelFacts& f = r.facts;
  const double U = double(plan.units.size()), N = double(plan.total_tokens());
  double final_units = 0, partial_units = 0;
  for (const auto& un : plan.units) (un.partial >= 0 ? partial_units : final_units) += 1;
  std::vector<double> xu, xn, yr, ym, re, rs, yred, yd;
  std::vector<std::vector<double>> xung;
  for (const auto& x : r.samples) {
    xu.push_back(x.U);
    xn.push_back(x.N);
    xung.push_back({x.U, x.N, x.G});
    yr.push_back(x.decode_read);
    yd.push_back(x.decode_read_distinct);
    ym.push_back(x.mfma_macs);
  }
  std::vector<double> ykv;
  for (const auto& x : r.samples) ykv.push_back(x.decode_kv_read);
  Fit2 fr = fit2(xu, xn, yr), fm = fit2(xu, xn, ym), fkv = fit2(xu, xn, ykv);
  f.kv_read_per_unit = fkv.a;
  f.kv_read_per_token = fkv.b;
  f.macs_per_unit = fm.a;
  f.macs_per_token = fm.b;
  // Distinct reads: Q once per (request, row group), the rest per unit and per token.
  FitN fd = fit_linear(xung, yd);
  // Reduce: samples 0..2 run it (entries 1, 1, 2); bytes = a*entries + b*splits.
  for (const auto& x : r.samples)
    if (x.E > 0) {
      re.push_back(x.E);
      rs.push_back(x.S);
      yred.push_back(x.reduce_read + x.reduce_written);
    }
  std::vector<double> rr;
  for (const auto& x : r.samples)
    if (x.E > 0) rr.push_back(x.reduce_read);
  std::vector<double> rrd;
  for (const auto& x : r.samples)
    if (x.E > 0) rrd.push_back(x.reduce_read_distinct);
  // Without reduce entries in the full plan the runs need not have varied them (not fitted).
  Fit2 fred, fredr, fredd;
  if (plan_reduces) fred = fit2(re, rs, yred), fredr = fit2(re, rs, rr), fredd = fit2(re, rs, rrd);
  r.fit_residual = std::max({fr.residual, fm.residual, fred.residual, fredr.residual, fd.residual, fredd.residual});
  // Decode writes: per partial unit (samples 0..2), per final unit (sample 3).
  double wp = 0, np = 0, wf = 0, nf = 0;
  for (const auto& x : r.samples) {
    if (x.final_units == 0) {
      wp += x.decode_written;
      np += x.partial_units;
    } else if (x.partial_units == 0) {
      wf += x.decode_written;
      nf += x.final_units;
    }
  }
  f.read_per_unit = fr.a;
  f.read_per_token = fr.b;
  f.write_partial_unit = np ? wp / np : 0;
  f.write_final_unit = nf ? wf / nf : 0;
  f.reduce_per_entry = fred.a;
  f.reduce_per_split = fred.b;
  const double E = r.reduce_entries, S = r.reduce_splits;
  const double dec_read = fr.a * U + fr.b * N;
  const double red_read = E > 0 ? fredr.a * E + fredr.b * S : 0;
  const double red_all = E > 0 ? fred.a * E + fred.b * S : 0;
  r.read_bytes = dec_read + red_read;
  f.distinct_per_unit = fd.c[0];
  f.distinct_per_token = fd.c[1];
  f.distinct_per_q_group = fd.c[2];
  const double G = double(bs.kv_lens.size()) * plan.row_groups;
  r.read_distinct_bytes = fd.c[0] * U + fd.c[1] * N + fd.c[2] * G + (E > 0 ? fredd.a * E + fredd.b * S : 0);
  r.written_bytes = f.write_partial_unit * partial_units + f.write_final_unit * final_units + (red_all - red_read);
  return fm.a * U + fm.b * N;
}

// The bytes a step needs at least (each KV token and page id once, Q read once, O written once:
// returned), what its plan adds (partials, tables) and the ratios of the bytes moved to them.
// row_bytes: a token's KV.
double count_bytes(ShapeResult& r, const BenchShape& bs, const rt::Plan& plan, double row_bytes) {
  const rt::DecodeShape& s = bs.shape;
  const double qb = rt::elem_bytes(s.q_dtype);
  const double rows = double(bs.kv_lens.size()) * s.qseqlen;
  for (int len : bs.kv_lens) {
    r.kv_bytes += double(len) * row_bytes;
    r.idx_bytes += double((len + s.page_size - 1) / s.page_size) * 4;
  }
  r.q_bytes = rows * s.heads * rt::kQkDim * qb;
  r.o_bytes = rows * s.heads * rt::kVDim * 2;
  // The partials the reduce reads, each written once: a bf16 row (a prefix or sparse kernel's)
  // 1024 bytes, an f32 one 2048, and its lse.
  r.partial_bytes = 0;
  for (const auto& e : plan.reduces)
    r.partial_bytes +=
        double(plan.rows) * (1024.0 * e.bf16_splits + 2048.0 * (e.num_splits - e.bf16_splits) + 4.0 * e.num_splits);
  r.table_bytes = double(plan.units.size() * sizeof(rt::WorkUnit) + plan.reduces.size() * sizeof(rt::ReduceEntry));
  const double minimum = r.kv_bytes + r.idx_bytes + r.q_bytes + r.o_bytes;
  r.ratio_read_over_min = r.read_bytes / minimum;
  r.ratio_moved_over_min = (r.read_bytes + r.written_bytes) / minimum;
  r.ratio_moved_over_plan = (r.read_bytes + r.written_bytes) / (minimum + 2 * r.partial_bytes + r.table_bytes);
  r.ratio_distinct_moved_over_plan =
      (r.read_distinct_bytes + r.written_bytes) / (minimum + 2 * r.partial_bytes + r.table_bytes);
  if (!r.full_scale) {
    // The runtime's definition (reads vs the plan's needed reads), from the same extrapolation.
    double needed = 0;
    for (const auto& un : plan.units) {
      needed += double(un.kv_end - un.kv_start) * row_bytes;
      needed += double((un.kv_end + s.page_size - 1) / s.page_size - un.kv_start / s.page_size) * 4;
      needed += std::min(plan.rows_per_group, plan.rows - un.row_group * plan.rows_per_group) * rt::kQkDim * qb;
    }
    needed += r.table_bytes + r.partial_bytes;
    r.ratio_read_over_needed = r.read_bytes / needed;
  }
  r.partial_over_kv = 2 * r.partial_bytes / r.kv_bytes;
  return minimum;
}

// The one-launch price (MLA_OPTION_MERGE 1, cascades off): the merging plan's decode launch plus
// the in-launch merge of its most-split request (1 + 5 S dependent trips, docs/performance.md).
void price_one_launch(ShapeResult& r, const rt::SelectedKernels& k, const BenchShape& bs, const Machine& m) {
  const KernelFacts& f = r.facts;
  rt::PlanInputs in = rt::plan_inputs_for(k, bs.kv_lens, m.cus, 0);
  in.merge_in_launch = true;
  in.cascade = rt::CascadePolicy::never;
  const rt::Plan mp = rt::plan_decode(in);
  int entries = 0, splits = 0;
  for (int s : mp.splits) {
    r.one_launch_max_splits = std::max(r.one_launch_max_splits, s);
    if (s > 1) ++entries, splits += s;
  }
  const ModeledTime d = model_time_assigned(m, f, model_units(mp), cus_of_ranges(mp.unit_ranges, mp.units.size(), m.cus),
                                            0, 0, int(bs.kv_lens.size()) * mp.row_groups);
  if (r.one_launch_max_splits > 1)
    r.one_launch_merge_s = std::max((f.reduce_per_entry * entries + f.reduce_per_split * splits) / m.hbm_bytes_per_s,
                                    (1 + 5 * r.one_launch_max_splits) * m.trip_s());
  r.one_launch_s = d.total_s + r.one_launch_merge_s;
}

// The static facts of the decode kernel's assembly (its producer's bytes in flight, the hot
// loops' issue on the co-issue model, LDS) against a tile's memory time on this machine.
void static_facts(ShapeResult& r, const rt::Selection& sel, const rt::Plan& plan, const Machine& m,
                  const MeasureOptions& o, double row_bytes) {
  const rt::DecodeShape& s = r.shape.shape;
  KernelFacts& f = r.facts;
  const int T = f.tile_tokens;
  const std::string text = decode_asm_for(s);
  f.inflight_bytes_per_wg = producer_inflight_bytes(text);
  r.hot = analyze_hot_loop(text, s.target, o.run_mca);
  if (o.trace_hot_loop) print_hot_loop(sel.decode.name, r.hot);
  r.hot.ring_stall_cycles = gen::modeled_ring_stall_cycles(r.hot, sel.decode.launch.ring, sel.decode.launch.slot_tokens,
                                                           sel.decode.launch.lds_row_bytes);
  f.hot_loop_cycles = r.hot.coissue_cycles + r.hot.ring_stall_cycles;
  {  // One producer loop iteration: stage_slots slots of slot_tokens / T tiles each.
    const gen::HotLoop ph = gen::analyze_hot_loop(text, gen_target(s.target), ".Lproducer_loop_");
    const int slots = std::max(1, sel.decode.geometry.value("stage_slots", 1));
    f.producer_cycles_per_tile = ph.coissue_cycles / (slots * double(sel.decode.launch.slot_tokens) / T);
  }
  const double resident = std::min<double>(f.max_resident_wgs, std::ceil(double(plan.units.size()) / m.cus));
  r.inflight_per_cu = f.inflight_bytes_per_wg * std::max(1.0, resident);
  r.little_per_cu = m.little_bytes_per_cu();
  const double tile_bytes = T * row_bytes + 4.0 * std::max(1, T / s.page_size);
  r.tile_mem_cycles = tile_bytes / m.hbm_share_per_cu() * m.clock_hz;
  // The CU's stream feeds min(4, resident x consumers) consumer waves, each on its own SIMD; a
  // tile occupies row_blocks of them. Each SIMD thus has (waves / row_blocks) tile memory
  // times to issue one tile's hot loop.
  const double waves = std::min(4.0, double(f.max_resident_wgs) * f.consumers);
  r.issue_over_mem = (r.hot.issue_cycles + r.hot.ring_stall_cycles) / (r.tile_mem_cycles * waves / f.row_blocks);
  r.coissue_over_mem = f.hot_loop_cycles / (r.tile_mem_cycles * waves / f.row_blocks);
  // The CU's LDS (128 B per clock) serves every consumer of a tile (row blocks of them) and the
  // producer's write of it.
  f.lds_cycles_per_tile = (f.row_blocks * r.hot.lds_bytes + T * double(sel.decode.launch.lds_row_bytes)) / 128.0;
  r.lds_over_mem = f.lds_cycles_per_tile / r.tile_mem_cycles;
  {
    double bank = 0, ideal = 0;
    for (const auto& x : r.samples) bank += x.lds_bank_cycles, ideal += x.lds_ideal_cycles;
    r.lds_bank_factor = ideal > 0 ? bank / ideal : 0;
  }

}

// The facts of a shape run whole (--full-scale-tokens): its counters over its tokens, not split
// by feature. Returns its MACs.
double full_scale_facts(ShapeResult& r, const BenchShape& bs, const Machine& m) {
  KernelFacts& f = r.facts;
  const RunSample x = run_sample(bs.shape, bs.kv_lens, m.cus, 1, 0);
  r.samples.push_back(x);
  r.read_bytes = x.decode_read + x.reduce_read;
  r.read_distinct_bytes = x.decode_read_distinct + x.reduce_read_distinct;
  f.distinct_per_token = x.decode_read_distinct / x.N;  // as read_per_token: not split by feature
  f.distinct_per_unit = f.distinct_per_q_group = 0;
  r.written_bytes = x.decode_written + x.reduce_written;
  r.ratio_read_over_needed = x.traffic_read / x.traffic_needed;
  f.read_per_token = x.decode_read / x.N;  // the model's per-unit split is not fitted here
  f.read_per_unit = 0;
  f.kv_read_per_token = x.decode_kv_read / x.N;
  f.macs_per_token = x.mfma_macs / x.N;
  f.write_partial_unit = x.partial_units ? x.decode_written / (x.partial_units + x.final_units) : 0;
  f.write_final_unit = x.final_units ? x.decode_written / (x.partial_units + x.final_units) : 0;
  f.reduce_per_split = x.S ? (x.reduce_read + x.reduce_written) / x.S : 0;
  return x.mfma_macs;
}

}  // namespace

ShapeResult measure_shape(const BenchShape& bs, const MeasureOptions& o) {
  ShapeResult r;
  r.shape = bs;
  const rt::DecodeShape& s = bs.shape;
  const Machine m = machine_for(s.target);
  const auto& cat = catalog_for(s);
  const rt::Selection sel = cat.select(s);
  r.decode_kernel = sel.decode.name;
  const rt::SelectedKernels k = rt::selected_kernels(sel, s);
  const int T = sel.decode.launch.tile_tokens;
  // The runtime's default plan: workgroups per CU = the decode kernel's occupancy (catalog.json).
  const rt::Plan plan = rt::plan_decode(rt::plan_inputs_for(k, bs.kv_lens, m.cus, 0));

  // Full-shape plan facts (exact).
  r.units = int(plan.units.size());
  r.num_partials = plan.num_partials;
  r.reduce_entries = int(plan.reduces.size());
  for (const auto& e : plan.reduces) r.reduce_splits += e.num_splits;
  r.cus = m.cus;
  r.cus_used = plan.cus_used;
  r.balance = plan.balance;

  // Scaled runs: units of the full plan's mean length (u tiles), on scaled_cus CUs.
  const int Cs = o.scaled_cus;
  const double mean_unit_tokens = double(plan.total_tokens()) / double(plan.units.size());
  // The counters are linear in tokens (the test of the extrapolation at 2 and 5 tiles), so a unit
  // need not be as long as the full plan's: its row groups x tokens are capped at 8192 (no seed
  // shape reaches it; 128 heads x 8 rows, 22 row groups, of unsplit 16K requests would run
  // 64K-token requests on each of them otherwise).
  const int u_cap = std::max(2, 8192 / (T * std::max(1, plan.row_groups)));
  const int u = o.unit_tiles > 0 ? o.unit_tiles : std::clamp(int(std::lround(mean_unit_tokens / T)), 2, std::max(2, u_cap));
  const int L = u * T;
  std::vector<std::vector<int>> runs;
  if (o.full_scale_max_tokens > 0 && bs.total_tokens() <= o.full_scale_max_tokens) {
    r.full_scale = true;
  } else {
    runs = {{Cs * L}, {2 * Cs * L}, {Cs * L, Cs * L}, std::vector<int>(size_t(2 * Cs), L)};
  }
  auto scaled_run = [&](const std::vector<int>& lens, int cus) {
    r.samples.push_back(run_sample(s, lens, cus, 1 + r.samples.size(), 1));
    if (o.verbose)
      fmt::print(stderr, "  scaled run {}: {} requests of {} tokens on {} CUs: {} units, {:.1f} s\n", r.samples.size() - 1,
                 lens.size(), lens[0], cus, r.samples.back().U, r.samples.back().seconds);
  };
  for (const auto& lens : runs) scaled_run(lens, Cs);
  // The fit's features per shape. The four runs above separate them when one request's row
  // groups are fewer than the CUs (up to 48 heads at qseqlen 1): runs 0-1 split each row group
  // in several units, run 2 in fewer, run 3 not at all. With more row groups (96 heads: 2, 128
  // heads: 3, 128 heads x 8 rows: 22) the runs may split alike or not at all, and a feature the
  // full plan needs would not vary: one request split over more CUs (2x, 4x, ... the scaled CUs)
  // is added until it does. A feature the full plan does not use is not fitted (its coefficient
  // stays 0): reduce bytes without reduce entries, partial writes without partial units.
  const bool plan_reduces = !plan.reduces.empty() && std::any_of(plan.reduces.begin(), plan.reduces.end(),
                                                                 [](const rt::ReduceEntry& e) { return e.num_splits > 0; });
  const bool plan_partials = std::any_of(plan.units.begin(), plan.units.end(), [](const auto& u) { return u.partial >= 0; });
  const bool plan_finals = std::any_of(plan.units.begin(), plan.units.end(), [](const auto& u) { return u.partial < 0; });
  auto missing = [&]() -> std::string {
    std::vector<std::vector<double>> ung, es;
    bool all_partial = false, all_final = false;
    for (const auto& x : r.samples) {
      ung.push_back({x.U, x.N, x.G});
      if (x.E > 0) es.push_back({x.E, x.S});
      all_partial = all_partial || (x.final_units == 0 && x.partial_units > 0);
      all_final = all_final || (x.partial_units == 0 && x.final_units > 0);
    }
    if (feature_rank(ung) < 3) return "units, tokens and (request, row group) Q blocks";
    if (plan_reduces && feature_rank(es) < 2) return "reduce entries and their splits";
    if (plan_partials && !all_partial) return "the bytes a partial unit writes (no run with only partial units)";
    if (plan_finals && !all_final) return "the bytes a final unit writes (no run with only final units)";
    return "";
  };
  if (!r.full_scale)
    for (int k = 2; !missing().empty() && k <= 64; k *= 2) scaled_run({Cs * L}, Cs * k);
  if (!r.full_scale && !missing().empty())
    throw std::runtime_error(fmt::format(
        "mlabench: {}: the scaled runs ({} of them, one request on up to {} CUs) do not vary {}, which the full plan "
        "needs ({} row groups of {} rows per request); run it at full scale (--full-scale-tokens {})",
        s.describe(), r.samples.size(), 64 * Cs, missing(), plan.row_groups, plan.rows_per_group, bs.total_tokens()));

  KernelFacts& f = r.facts;
  f.tile_tokens = T;
  f.consumers = sel.decode.launch.consumers;
  f.row_blocks = sel.decode.launch.row_blocks;
  f.row_groups = plan.row_groups;
  // Resident workgroups per CU (LDS, registers, wave slots): computed by the generator from the
  // target description (gen::occupancy) and recorded in catalog.json.
  f.max_resident_wgs = sel.decode.resident_workgroups_per_cu;

  const double macs = r.full_scale ? full_scale_facts(r, bs, m) : fit_scaled_facts(r, bs, plan, plan_reduces);

  const double row_bytes = s.kv_ds_mla ? double(abi::kDsMlaRowBytes) : rt::kQkDim * rt::elem_bytes(s.kv_dtype);
  const double minimum = count_bytes(r, bs, plan, row_bytes);
  r.kv_bytes_per_cu = r.kv_bytes / m.cus;

  // MACs: useful = every visible (row, token) pair x (576 QK + 512 PV), heads unpadded.
  for (int len : bs.kv_lens)
    for (int row = 0; row < s.qseqlen; ++row) r.macs_useful += double(len - s.qseqlen + row + 1) * s.heads * (576 + 512);
  r.macs_issued = macs;
  r.mac_ratio = macs / r.macs_useful;

  static_facts(r, sel, plan, m, o, row_bytes);

  // Modeled.
  auto price = [&](const Machine& at) {
    return model_time_assigned(at, f, model_units(plan), cus_of_ranges(plan.unit_ranges, plan.units.size(), at.cus),
                               r.reduce_entries, r.reduce_splits, int(bs.kv_lens.size()) * plan.row_groups, 0,
                               reduce_rounds(plan));
  };
  r.modeled = price(m);
  r.modeled_at_peak_s = price(at_datasheet_peak(m)).total_s;  // what-if (PlanSide::total_at_peak_s)
  r.launches_as_run = 2 + (k.prefix ? 1 : 0);  // rt::launch_grids: decode, prefix (if any), reduce
  r.launches_priced = 1 + (r.reduce_entries > 0 ? 1 : 0);
  r.as_run_s = r.modeled.total_s + (r.launches_as_run - r.launches_priced) * m.launch_s;
  price_one_launch(r, k, bs, m);
  r.modeled_tbps = minimum / r.modeled.total_s / 1e12;
  const int max_splits = std::max(2, int(std::ceil(4.0 * m.cus / double(bs.kv_lens.size()))));
  r.brute = brute_force_splits(m, f, bs.kv_lens, max_splits);
  r.plan_over_best = r.modeled.total_s / r.brute.best_s;
  r.lower_bound_s = lower_bound_s(m, f, bs.kv_lens);
  if (s.sparse)  // docs/sparse.md "Floor": partials are the plan's choice, not part of it
    r.sparse_floor_s = r.launches_as_run * m.launch_s + 2 * m.trip_s() + reduce_rounds(plan) * m.trip_s() +
                       minimum / m.hbm_bytes_per_s;
  if (bs.shared) {
    r.cascade = measure_cascade(bs, r, o);
    BenchShape wide = bs;
    wide.shape.prefix_rows = 192;
    const rt::Catalog& cat = catalog_for(bs.shape);
    bool has_wide = false;
    try {
      has_wide = cat.select(wide.shape).prefix.has_value();
    } catch (const rt::CatalogError&) {  // no wide prefix kernel for this shape
    }
    if (has_wide) r.cascade_wide = measure_cascade(wide, r, o);
  }
  return r;
}

}  // namespace mla::bench
