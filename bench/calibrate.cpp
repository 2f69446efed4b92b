// Calibration of the machine model on aiter's tuned GEMM tables (bench/calibrate.h).
#include "bench/calibrate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "codeobj/tools.h"
#include "target/target.h"

namespace mla::bench::cal {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  // The tables quote nothing; a quoted field ("a,b") is still read as one.
  std::vector<std::string> f;
  std::string cur;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) f.push_back(std::move(cur)), cur.clear();
    else if (c != '\r') cur += c;
  }
  f.push_back(std::move(cur));
  return f;
}

template <typename T>
T parse_number(const std::string& file, int line, const std::string& field, const std::string& v) {
  size_t used = 0;
  try {
    T x;
    if constexpr (std::is_same_v<T, double>) x = std::stod(v, &used);
    else x = T(std::stoll(v, &used));
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(
      fmt::format("{} line {}: field {} is '{}' (allowed: a {})", file, line, field, v,
                  std::is_same_v<T, double> ? "number" : "whole number"));
}

double torch_dtype_bytes(const std::string& file, int line, const std::string& field, const std::string& v) {
  if (v == "torch.bfloat16" || v == "torch.float16") return 2;
  if (v == "torch.float32") return 4;
  throw std::invalid_argument(fmt::format("{} line {}: field {} is '{}' (allowed: torch.bfloat16, torch.float16, "
                                          "torch.float32)",
                                          file, line, field, v));
}

bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// "256x16x64x256" -> {256, 16, 64, 256}; nullopt unless exactly `count` positive numbers.
std::optional<std::vector<int64_t>> x_list(const std::string& tok, size_t count) {
  std::vector<int64_t> v;
  std::stringstream ss(tok);
  std::string part;
  while (std::getline(ss, part, 'x')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    v.push_back(std::stoll(part));
  }
  if (v.size() != count || std::any_of(v.begin(), v.end(), [](int64_t x) { return x <= 0; })) return std::nullopt;
  return v;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Nearest-rank percentile (p in 0..1).
double percentile_of(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(p * double(v.size())));
  return v[std::min(v.size() - 1, rank ? rank - 1 : 0)];
}

bool is_model_target(const std::string& gfx, int cus) {
  return (gfx == "gfx942" && cus == 304) || (gfx == "gfx950" && cus == 256);
}

}  // namespace

void parse_tuned_csv(const std::string& file_name, const std::string& text, Tables& out) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) {
    out.skipped.push_back({file_name, "empty", 0});
    return;
  }
  const auto header = split_csv_line(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  int data_rows = 0;
  std::vector<std::string> lines;
  while (std::getline(in, line))
    if (!line.empty() && line != "\r") lines.push_back(line), ++data_rows;
  for (const char* need : {"gfx", "cu_num", "M", "N", "K", "kernelName", "splitK", "us"})
    if (!col.count(need)) {
      out.skipped.push_back({file_name, fmt::format("not a GEMM table (no {} column)", need), data_rows});
      return;
    }
  if (col.count("B")) {
    out.skipped.push_back({file_name, "batched GEMM (B column): not used", data_rows});
    return;
  }
  // Element sizes from the family the file belongs to (aiter names its tables by it).
  std::string family;
  if (contains(file_name, "a4w4")) family = "a4w4 blockscale";
  else if (contains(file_name, "a8w8")) family = contains(file_name, "blockscale") ? "a8w8 blockscale" : "a8w8 rowwise";
  else if (contains(file_name, "bf16")) family = "bf16";
  else {
    out.skipped.push_back({file_name, "element sizes unknown (not a bf16, a8w8 or a4w4 table)", data_rows});
    return;
  }
  if (family == "bf16" && (!col.count("dtype") || !col.count("outdtype"))) {
    out.skipped.push_back({file_name, "bf16 table without dtype / outdtype columns", data_rows});
    return;
  }
  out.files.push_back(file_name);
  for (size_t li = 0; li < lines.size(); ++li) {
    const int ln = int(li) + 2;
    const auto f = split_csv_line(lines[li]);
    if (f.size() != header.size())
      throw std::invalid_argument(
          fmt::format("{} line {}: {} fields (allowed: {}, as the header)", file_name, ln, f.size(), header.size()));
    const auto get = [&](const char* name) -> const std::string& { return f[col.at(name)]; };
    TunedRow r;
    r.file = file_name;
    r.line = ln;
    r.gfx = get("gfx");
    r.cu_num = parse_number<int>(file_name, ln, "cu_num", get("cu_num"));
    r.m = parse_number<int64_t>(file_name, ln, "M", get("M"));
    r.n = parse_number<int64_t>(file_name, ln, "N", get("N"));
    r.k = parse_number<int64_t>(file_name, ln, "K", get("K"));
    r.split_k = parse_number<int>(file_name, ln, "splitK", get("splitK"));
    r.us = parse_number<double>(file_name, ln, "us", get("us"));
    r.kernel = get("kernelName");
    r.family = family;
    // aiter writes 0 or inf where a shape was not timed (no kernel ran, or all failed).
    if (r.us == 0 || std::isinf(r.us)) {
      ++out.untimed;
      continue;
    }
    if (r.cu_num <= 0 || r.m <= 0 || r.n <= 0 || r.k <= 0 || r.split_k < 0 || !(r.us > 0) || r.gfx.empty())
      throw std::invalid_argument(fmt::format("{} line {}: gfx '{}', cu_num {}, M {}, N {}, K {}, splitK {}, us {} "
                                              "(allowed: a gfx name, positive sizes and time, splitK >= 0)",
                                              file_name, ln, r.gfx, r.cu_num, r.m, r.n, r.k, r.split_k, r.us));
    if (family == "bf16") {
      r.w_bytes = r.a_bytes = torch_dtype_bytes(file_name, ln, "dtype", get("dtype"));
      r.out_bytes = torch_dtype_bytes(file_name, ln, "outdtype", get("outdtype"));
    } else {
      // a8w8 / a4w4 GEMMs write bf16 (aiter's gemm_a8w8* / gemm_a4w4* dtype default; the tables
      // do not say).
      r.w_bytes = r.a_bytes = family == "a4w4 blockscale" ? 0.5 : 1.0;
      r.out_bytes = 2;
    }
    out.rows.push_back(std::move(r));
  }
}

Tables read_tuned_tables(const std::string& aiter_dir) {
  namespace fs = std::filesystem;
  Tables t;
  std::vector<fs::path> files;
  for (const char* sub : {"aiter/configs", "aiter/configs/model_configs"}) {
    const fs::path d = fs::path(aiter_dir) / sub;
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && e.path().extension() == ".csv" && contains(name, "tuned") && !contains(name, "untuned"))
        files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    throw std::invalid_argument(fmt::format("--aiter-dir {}: no aiter/configs/*tuned*.csv or "
                                            "aiter/configs/model_configs/*tuned*.csv (expected an aiter checkout)",
                                            aiter_dir));
  for (const auto& p : files) {
    std::ifstream in(p);
    if (!in) throw std::runtime_error(fmt::format("cannot read {}", p.string()));
    std::stringstream ss;
    ss << in.rdbuf();
    parse_tuned_csv(p.filename().string(), ss.str(), t);
  }
  return t;
}

double row_bytes(const TunedRow& r) {
  const double m = double(r.m), n = double(r.n), k = double(r.k);
  double scales = 0;
  if (r.family == "a8w8 rowwise") scales = 4 * (m + n);  // f32 per token and per output channel
  else if (r.family == "a8w8 blockscale")                // f32 per 128 x 128 weight block, per 1 x 128 activations
    scales = 4 * (std::ceil(n / 128) * std::ceil(k / 128) + m * std::ceil(k / 128));
  else if (r.family == "a4w4 blockscale") scales = (m + n) * std::ceil(k / 32);  // e8m0 per 1 x 32
  return n * k * r.w_bytes + m * k * r.a_bytes + m * n * r.out_bytes + scales;
}

double row_intensity(const TunedRow& r) { return 2.0 * double(r.m) * double(r.n) * double(r.k) / row_bytes(r); }

bool memory_bound(const TunedRow& r) { return row_intensity(r) <= kMaxIntensity; }

std::optional<int64_t> row_grid(const TunedRow& r) {
  if (r.family != "a8w8 rowwise" && r.family != "a8w8 blockscale") return std::nullopt;
  std::vector<std::string> tok;
  std::stringstream ss(r.kernel);
  std::string part;
  while (std::getline(ss, part, '_')) tok.push_back(part);
  size_t i = 0;
  if (tok.size() < 4 || tok[0] != "a8w8") return std::nullopt;
  if (tok[1] == "rowwise" || tok[1] == "bpreshuffle") i = 2;
  else if (tok[1] == "blockscale") {
    i = tok[2] == "bpreshuffle" ? 3 : 2;
    if (i + 1 >= tok.size() || !x_list(tok[i], 3)) return std::nullopt;  // the scale block, "1x128x128"
    ++i;
  } else return std::nullopt;
  const auto tile = x_list(tok[i], 4);  // BLOCK x MPerBlock x NPerBlock x KPerBlock; "cktile" is not
  if (!tile || r.split_k > 30) return std::nullopt;
  const int64_t mb = (*tile)[1], nb = (*tile)[2];
  return ((r.m + mb - 1) / mb) * ((r.n + nb - 1) / nb) * (int64_t(1) << r.split_k);
}

bool in_fit_half(const TunedRow& r) {
  const std::string key = fmt::format("{},{},{},{},{},{}", r.file, r.gfx, r.cu_num, r.m, r.n, r.k);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return (h & 1) == 0;
}

double Fit::predict(const Sample& s, bool per_cu) const {
  double stream = bw > 0 ? s.bytes / bw : 0;
  if (per_cu && s.grid > 0 && r_cu > 0)
    stream = std::max(stream, s.bytes / (double(std::min<int64_t>(s.grid, s.cus)) * r_cu));
  return t0_s + stream;
}

Fit fit_samples(const std::vector<Sample>& samples, const FitOptions& o) {
  Fit f;
  f.rows = int(samples.size());
  std::vector<const Sample*> tiny, large, grid;
  for (const auto& s : samples) {
    if (s.bytes <= o.tiny_bytes) tiny.push_back(&s);
    if (s.bytes >= o.large_bytes) large.push_back(&s);
    if (s.grid > 0) grid.push_back(&s);
  }
  f.tiny_rows = int(tiny.size()), f.large_rows = int(large.size()), f.grid_rows = int(grid.size());
  f.bw_fitted = int(large.size()) >= o.min_large_rows;
  f.bw = f.bw_fitted ? (o.fixed_bw > 0 ? o.fixed_bw : 5e12) : o.fixed_bw;
  // t0 depends on BW only through the tiny rows' small transfer term, so this settles in a few rounds.
  for (int round = 0; round < 100; ++round) {
    std::vector<double> rest;
    for (const auto* s : tiny) rest.push_back(s->t_s - (f.bw > 0 ? s->bytes / f.bw : 0));
    f.t0_s = median_of(rest);
    if (!f.bw_fitted) break;
    double sxy = 0, sxx = 0;
    for (const auto* s : large) {
      const double w = 1 / (s->t_s * s->t_s);
      sxy += w * s->bytes * (s->t_s - f.t0_s);
      sxx += w * s->bytes * s->bytes;
    }
    const double bw = sxx / sxy;
    if (!(bw > 0)) throw std::runtime_error("calibration: the large rows leave no time to stream (t <= t0)");
    const bool settled = std::abs(bw / f.bw - 1) < 1e-13;
    f.bw = bw;
    if (settled) break;
  }
  if (!grid.empty()) {
    const auto cost = [&](double r) {
      Fit g = f;
      g.r_cu = r;
      double e = 0;
      for (const auto* s : grid) e += std::pow(g.predict(*s, true) / s->t_s - 1, 2);
      return e;
    };
    constexpr int kSteps = 800;
    const double lo = std::log(1e8), hi = std::log(1e12);
    int best = 0;
    double best_cost = cost(std::exp(lo));
    for (int i = 1; i <= kSteps; ++i) {
      const double c = cost(std::exp(lo + (hi - lo) * i / kSteps));
      if (c < best_cost) best_cost = c, best = i;
    }
    // Golden section between the neighbours of the best scan point (log scale).
    double a = lo + (hi - lo) * std::max(0, best - 1) / kSteps, b = lo + (hi - lo) * std::min(kSteps, best + 1) / kSteps;
    const double g = (std::sqrt(5.0) - 1) / 2;
    for (int it = 0; it < 100; ++it) {
      const double x1 = b - g * (b - a), x2 = a + g * (b - a);
      if (cost(std::exp(x1)) <= cost(std::exp(x2))) b = x2;
      else a = x1;
    }
    f.r_cu = std::exp(0.5 * (a + b));
  }
  return f;
}

ErrorStats relative_errors(const Fit& f, const std::vector<Sample>& samples, bool per_cu) {
  ErrorStats e;
  std::vector<double> err, abs_err;
  for (const auto& s : samples) {
    const double x = f.predict(s, per_cu) / s.t_s - 1;
    err.push_back(x);
    abs_err.push_back(std::abs(x));
  }
  e.n = int(samples.size());
  e.median = median_of(err);
  e.median_abs = median_of(abs_err);
  e.p90_abs = percentile_of(abs_err, 0.9);
  return e;
}

Calibration calibrate(const Tables& t, const std::string& aiter_dir, const std::string& aiter_commit,
                      double (*fixed_bw)(const std::string& gfx, int cu_num)) {
  Calibration c;
  c.aiter_dir = aiter_dir;
  c.aiter_commit = aiter_commit;
  c.tables = int(t.files.size());
  c.rows = int(t.rows.size());
  c.untimed = t.untimed;
  c.skipped = t.skipped;
  std::map<std::pair<std::string, int>, std::vector<const TunedRow*>> by_target;
  for (const auto& r : t.rows) by_target[{r.gfx, r.cu_num}].push_back(&r);
  std::vector<std::pair<std::string, int>> order;
  for (const auto& [key, rows] : by_target) order.push_back(key);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return is_model_target(a.first, a.second) > is_model_target(b.first, b.second);
  });
  for (const auto& key : order) {
    const auto& rows = by_target.at(key);
    TargetCalibration tc;
    tc.gfx = key.first, tc.cu_num = key.second;
    tc.model_target = is_model_target(tc.gfx, tc.cu_num);
    tc.rows_total = int(rows.size());
    std::vector<Sample> fit_half, held, all;
    for (const auto* r : rows) {
      if (!memory_bound(*r)) continue;
      const Sample s{row_bytes(*r), r->us * 1e-6, row_grid(*r).value_or(0), r->cu_num};
      all.push_back(s);
      (in_fit_half(*r) ? fit_half : held).push_back(s);
    }
    tc.rows_memory_bound = int(all.size());
    tc.fit_rows = int(fit_half.size()), tc.held_out_rows = int(held.size());
    FitOptions o;
    o.fixed_bw = fixed_bw ? fixed_bw(tc.gfx, tc.cu_num) : 0;
    tc.fit = fit_samples(fit_half, o);
    const auto subset = [&](const std::string& name, auto keep) {
      std::vector<Sample> v;
      for (const auto& s : held)
        if (keep(s)) v.push_back(s);
      tc.held_out.push_back({name, relative_errors(tc.fit, v, false), relative_errors(tc.fit, v, true)});
    };
    subset("all", [](const Sample&) { return true; });
    subset(fmt::format("tiny (<= {:.0f} MB)", o.tiny_bytes / 1e6), [&](const Sample& s) { return s.bytes <= o.tiny_bytes; });
    subset("between", [&](const Sample& s) { return s.bytes > o.tiny_bytes && s.bytes < o.large_bytes; });
    subset(fmt::format("large (>= {:.0f} MB)", o.large_bytes / 1e6), [&](const Sample& s) { return s.bytes >= o.large_bytes; });
    subset("with a grid", [](const Sample& s) { return s.grid > 0; });
    const double edges[] = {0, 1e6, 4e6, 16e6, 64e6, 256e6, 1e9, 1e13};
    for (size_t i = 0; i + 1 < std::size(edges); ++i) {
      TargetCalibration::Band b;
      b.lo = edges[i], b.hi = edges[i + 1];
      std::vector<double> bw, bytes;
      for (const auto& s : all)
        if (s.bytes >= b.lo && s.bytes < b.hi) bw.push_back(s.bytes / s.t_s), bytes.push_back(s.bytes);
      b.n = int(bw.size());
      if (!b.n) continue;
      b.median_bw = median_of(bw);
      b.max_bw = *std::max_element(bw.begin(), bw.end());
      const double mb = median_of(bytes);
      b.model_bw = mb / tc.fit.predict({mb, 0, 0, tc.cu_num}, false);
      tc.bands.push_back(b);
    }
    c.targets.push_back(std::move(tc));
  }
  return c;
}

namespace {

double target_bw(const std::string& gfx, int) {
  const auto arch = gen::parse_arch(gfx);
  return arch ? gen::target(*arch).hbm_achievable_bytes_per_s : 0;
}

nlohmann::json stats_json(const ErrorStats& e) {
  return {{"n", e.n}, {"median_abs", e.median_abs}, {"p90_abs", e.p90_abs}, {"median", e.median}};
}

std::string pct(const ErrorStats& e) {
  if (!e.n) return "-";
  return fmt::format("{:.1f}% / {:.1f}% / {:+.1f}%", 100 * e.median_abs, 100 * e.p90_abs, 100 * e.median);
}

}  // namespace

std::string aiter_commit_of(const std::string& aiter_dir) {
  if (!std::filesystem::exists(std::filesystem::path(aiter_dir) / ".git")) return "";
  gen::ToolResult r;
  try {
    r = gen::run_tool({"/usr/bin/env", "git", "-C", aiter_dir, "rev-parse", "HEAD"});
  } catch (const std::exception&) {
    return "";  // no git: the commit is reported unknown (mlabench --aiter-commit names it)
  }
  if (r.exit_code != 0) return "";
  std::string s = r.out;
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

Calibration calibrate_aiter_dir(const std::string& aiter_dir, const std::string& aiter_commit) {
  return calibrate(read_tuned_tables(aiter_dir), aiter_dir, aiter_commit.empty() ? aiter_commit_of(aiter_dir) : aiter_commit,
                   target_bw);
}

nlohmann::json Calibration::to_json() const {
  nlohmann::json j;
  j["aiter_dir"] = aiter_dir;
  j["aiter_commit"] = aiter_commit;
  j["tables"] = tables;
  j["rows"] = rows;
  j["untimed_rows"] = untimed;
  j["criterion"] = fmt::format("arithmetic intensity 2MNK / bytes <= {} FLOP/B", kMaxIntensity);
  j["split"] = "FNV-1a 64 of 'file,gfx,cu_num,M,N,K': even = fit, odd = held out";
  for (const auto& s : skipped) j["skipped"].push_back({{"file", s.file}, {"reason", s.reason}, {"rows", s.rows}});
  for (const auto& t : targets) {
    nlohmann::json x{{"gfx", t.gfx},
                     {"cu_num", t.cu_num},
                     {"model_target", t.model_target},
                     {"rows", t.rows_total},
                     {"memory_bound_rows", t.rows_memory_bound},
                     {"fit_rows", t.fit_rows},
                     {"held_out_rows", t.held_out_rows},
                     {"fit",
                      {{"t0_s", t.fit.t0_s},
                       {"bw_bytes_per_s", t.fit.bw},
                       {"bw_fitted", t.fit.bw_fitted},
                       {"r_cu_bytes_per_s", t.fit.r_cu},
                       {"tiny_rows", t.fit.tiny_rows},
                       {"large_rows", t.fit.large_rows},
                       {"grid_rows", t.fit.grid_rows}}}};
    for (const auto& s : t.held_out)
      x["held_out"].push_back({{"subset", s.name}, {"bytes_only", stats_json(s.bytes_only)}, {"per_cu", stats_json(s.per_cu)}});
    for (const auto& b : t.bands)
      x["bands"].push_back({{"lo_bytes", b.lo}, {"hi_bytes", b.hi}, {"n", b.n}, {"median_bw", b.median_bw},
                            {"max_bw", b.max_bw}, {"model_bw", b.model_bw}});
    j["targets"].push_back(x);
  }
  return j;
}

std::string Calibration::markdown() const {
  std::string md = "## Calibration on aiter's tuned tables (measured by aiter on hardware; fit here)\n\n";
  md += fmt::format("aiter checkout {} (commit {}): {} GEMM tables, {} timed rows ({} rows with us 0 or inf, aiter's mark of an untimed shape, left out). Memory-bound rows: arithmetic intensity "
                    "2MNK / bytes <= {} FLOP/B. Fit on the rows whose FNV-1a 64 hash of 'file,gfx,cu_num,M,N,K' is even, "
                    "error on the others (model / measured - 1: median |e| / 90th percentile |e| / median e). Form: "
                    "t = t0 + max(bytes / BW, bytes / (busy CUs x r_cu)); t0 = median of (t - bytes / BW) over rows "
                    "<= 4 MB; BW from rows >= 256 MB (weighted by 1/t^2), fitted only with >= 10 such rows (otherwise "
                    "the target description's figure); r_cu over the rows whose kernel name gives the grid (ck a8w8 "
                    "instances).\n\n",
                    aiter_dir, aiter_commit.empty() ? "unknown: not a git checkout" : aiter_commit, tables, rows,
                    untimed, kMaxIntensity);
  md += "| gfx | CUs | rows | memory-bound | fit / held out | t0 us | BW TB/s | r_cu GB/s per busy CU | tiny / large / "
        "grid rows (fit) |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : targets)
    md += fmt::format("| {}{} | {} | {} | {} | {} / {} | {:.2f} | {} | {} | {} / {} / {} |\n", t.gfx,
                      t.model_target ? "" : " (not a model target)", t.cu_num, t.rows_total, t.rows_memory_bound,
                      t.fit_rows, t.held_out_rows, t.fit.t0_s * 1e6,
                      t.fit.bw > 0 ? fmt::format("{:.2f}{}", t.fit.bw / 1e12, t.fit.bw_fitted ? "" : " (not fitted: fixed)")
                                   : "-",
                      t.fit.r_cu > 0 ? fmt::format("{:.1f}", t.fit.r_cu / 1e9) : "-", t.fit.tiny_rows,
                      t.fit.large_rows, t.fit.grid_rows);
  md += "\nHeld-out error (median |e| / p90 |e| / median e):\n\n| gfx | CUs | subset | n | bytes only | with busy CUs "
        "|\n|---|---|---|---|---|---|\n";
  for (const auto& t : targets)
    for (const auto& s : t.held_out)
      md += fmt::format("| {} | {} | {} | {} | {} | {} |\n", t.gfx, t.cu_num, s.name, s.bytes_only.n, pct(s.bytes_only),
                        pct(s.per_cu));
  md += "\nBandwidth by bytes moved (all memory-bound rows; measured = bytes / us, model = t0 + bytes / BW at the "
        "band's median bytes):\n\n| gfx | CUs | bytes | n | measured median TB/s | measured max TB/s | model TB/s "
        "|\n|---|---|---|---|---|---|---|\n";
  const auto mb = [](double b) { return b >= 1e12 ? std::string("inf") : fmt::format("{:.0f} MB", b / 1e6); };
  for (const auto& t : targets)
    for (const auto& b : t.bands)
      md += fmt::format("| {} | {} | {} - {} | {} | {:.2f} | {:.2f} | {} |\n", t.gfx, t.cu_num, mb(b.lo), mb(b.hi), b.n,
                        b.median_bw / 1e12, b.max_bw / 1e12,
                        t.fit.bw > 0 ? fmt::format("{:.2f}", b.model_bw / 1e12) : std::string("-"));
  // The figures the model uses, beside this fit.
  md += "\nThe machine model's figures (generator/target) beside this fit:\n\n";
  for (const auto& t : targets) {
    if (!t.model_target) continue;
    const auto& tgt = gen::target(*gen::parse_arch(t.gfx));
    const double dbw = tgt.hbm_achievable_bytes_per_s / t.fit.bw - 1, dt0 = tgt.machine.kernel_fixed_s / t.fit.t0_s - 1;
    md += fmt::format("- {}: HBM {:.2f} TB/s ({}); kernel fixed time {:.2f} us ({}). This fit: {:.2f} TB/s{}, "
                      "{:.2f} us: {}\n",
                      t.gfx, tgt.hbm_achievable_bytes_per_s / 1e12, tgt.hbm_achievable_source,
                      tgt.machine.kernel_fixed_s * 1e6, tgt.machine.kernel_fixed_source, t.fit.bw / 1e12,
                      t.fit.bw_fitted ? "" : " (not fitted)", t.fit.t0_s * 1e6,
                      std::abs(dt0) < 0.005 && (!t.fit.bw_fitted || std::abs(dbw) < 0.005)
                          ? "the committed figures"
                          : "differs from the committed figures: update generator/target (kCalibrated*)");
  }
  if (!skipped.empty()) {
    std::map<std::string, std::pair<int, int>> why;
    for (const auto& s : skipped) why[s.reason].first += 1, why[s.reason].second += s.rows;
    md += "\nTables not used:";
    for (const auto& [reason, n] : why) md += fmt::format(" {} ({} tables, {} rows);", reason, n.first, n.second);
    md.back() = '.';
    md += "\n";
  }
  return md;
}

}  // namespace mla::bench::cal
