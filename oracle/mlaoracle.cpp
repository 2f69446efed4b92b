// mlaoracle: runs aiter's hardware-validated MLA decode code objects in the emulator on random
// problems and compares them with the fp64 reference (docs/aiter-oracle.md).
//
//   mlaoracle --aiter-dir ~/aiter [--target gfx942] [--kernel 'mla_a8w8_qh16_qseqlen1*']
//             [--kv-split 1 --kv-split 4] [--seed N] [--strict] [--json r.json] [--forms-out f.json]
//   mlaoracle --aiter-dir ~/aiter --sweep sampled|full [--kv-split S] [--max-len N] [--summary s.md]
//   mlaoracle --aiter-dir ~/aiter --problem DIR --kernel ...      (a problem of mlarun make-problem)
//   mlaoracle --aiter-dir ~/aiter --engine-accuracy --catalog out  (docs/accuracy.md)
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <iostream>

#include "oracle/aiter_oracle.h"
#include "oracle/sweep.h"
#include "oracle/engine_accuracy.h"
#include "runtime/catalog.h"

using namespace mla;
using namespace mla::oracle;

namespace {

bool matches(const AiterKernel& k, const std::vector<std::string>& pats) {
  if (pats.empty()) return true;
  for (auto& p : pats)
    if (fnmatch(p.c_str(), k.stem().c_str(), 0) == 0 || fnmatch(p.c_str(), k.knl_name.c_str(), 0) == 0 ||
        fnmatch(p.c_str(), k.co_name.c_str(), 0) == 0)
      return true;
  return false;
}

std::string findings_text(const RunResult& r) {
  std::string s;
  for (auto& [rule, n] : r.findings) s += fmt::format("{}{}: {}", s.empty() ? "" : ", ", rule, n);
  return s.empty() ? "-" : s;
}

// "1600" for one request, "7: 1..2048" for a batch.
std::string requests_text(const std::vector<int>& lens) {
  if (lens.size() == 1) return std::to_string(lens[0]);
  auto [lo, hi] = std::minmax_element(lens.begin(), lens.end());
  return fmt::format("{}: {}..{}", lens.size(), *lo, *hi);
}

std::string fail_detail(const RunResult& r) {
  if (!r.ran) return r.error_rule.empty() ? "error" : r.error_rule;
  std::string s = fmt::format("d {:.1e}, max err {:.0f}%", r.d, r.max_err_pct);
  if (r.unwritten) s += fmt::format(", {} unwritten", r.unwritten);
  return s;
}

nlohmann::json to_json(const RunResult& r, const std::vector<int>& lens) {
  nlohmann::json j = {{"kernel", r.kernel}, {"target", r.target}, {"kv_split", r.kv_split}, {"kv_lens", lens}, {"ran", r.ran}, {"pass", r.pass}};
  if (!r.ran) {
    j["error"] = r.error;
    j["error_rule"] = r.error_rule;
    if (!r.unsupported.empty()) j["unsupported"] = r.unsupported;
    return j;
  }
  j["output_layout"] = r.output_layout;
  if (r.kv_split > 1) j["split_chunk_tokens"] = r.split_chunk;
  j["d"] = r.d;
  j["max_err_pct_of_max_ref"] = r.max_err_pct;
  if (r.lse_err >= 0) j["lse_max_abs_err"] = r.lse_err;
  j["unwritten"] = r.unwritten;
  j["nonfinite"] = r.nonfinite;
  j["findings"] = r.findings;
  j["bytes_written"] = r.written;
  j["finding_sites"] = r.finding_lines;
  j["wave_instructions"] = r.wave_insts;
  j["seconds"] = r.seconds;
  j["wave_instructions_per_second"] = r.seconds > 0 ? double(r.wave_insts) / r.seconds : 0.0;
  return j;
}

std::string fig(const Figures& f, bool ran, int col) {
  if (!ran) return "-";
  if (col == 0) return fmt::format("{:.2e}", f.d);
  if (col == 1) return fmt::format("{:.2f}", f.max_err_pct);
  return f.lse_err >= 0 ? fmt::format("{:.1e}", f.lse_err) : std::string("-");
}

nlohmann::json figures_json(const Figures& f) {
  nlohmann::json j = {{"d", f.d}, {"max_err_pct_of_max_ref", f.max_err_pct}, {"unwritten", f.unwritten}, {"nonfinite", f.nonfinite}};
  if (f.lse_err >= 0) j["lse_max_abs_err"] = f.lse_err, j["lse_rows"] = f.lse_rows;
  return j;
}

// --engine-accuracy: every family of docs/accuracy.md (or those matching --family), ours beside
// aiter's on the same problem, and the fp8-P model.
int engine_accuracy(const std::string& catalog_dir, const std::string& aiter_dir_opt, bool no_aiter, int aiter_kv_split,
                    const std::vector<std::string>& family_pats, const std::vector<std::string>& targets, const std::string& json_out,
                    int peak_tokens, double peak_spread) {
  EngineOptions opts;
  opts.aiter_kv_split = aiter_kv_split;
  std::optional<rt::Catalog> ours;
  if (!catalog_dir.empty()) {
    ours = rt::Catalog::open(catalog_dir);
    opts.ours = &*ours;
  }
  std::string aiter_dir;
  if (!no_aiter) {
    aiter_dir = resolve_aiter_dir(aiter_dir_opt);
    for (emu::Gfx g : {emu::Gfx::gfx942, emu::Gfx::gfx950})
      for (auto& k : load_catalog(aiter_dir, g)) opts.aiter.push_back(k);
  }
  std::vector<EngineFamily> fams;
  for (auto f : engine_families()) {
    if (f.peaked) f.peak_tokens = peak_tokens, f.peak_spread = peak_spread;
    bool ok = family_pats.empty();
    for (auto& pat : family_pats) ok |= fnmatch(pat.c_str(), f.name.c_str(), 0) == 0;
    if (!targets.empty() && std::find(targets.begin(), targets.end(), rt::name(f.target)) == targets.end()) ok = false;
    if (ok) fams.push_back(f);
  }
  if (fams.empty()) {
    std::cerr << "mlaoracle: no engine family matches --family / --target (families: ";
    for (auto& f : engine_families()) std::cerr << "'" << f.name << "' ";
    std::cerr << ")\n";
    return 2;
  }
  std::vector<EngineRow> rows;
  for (size_t i = 0; i < fams.size(); ++i) {
    std::cerr << fmt::format("mlaoracle: [{}/{}] {} (requests of {} tokens) ...\n", i + 1, fams.size(), fams[i].name,
                             fmt::join(fams[i].kv_lens, "/"));
    rows.push_back(run_engine_family(fams[i], opts));
    const EngineRow& r = rows.back();
    std::cerr << fmt::format("mlaoracle: [{}/{}] reference {:.1f} s, ours {:.1f} s{}, aiter {:.1f} s{}\n", i + 1, fams.size(),
                             r.seconds_reference, r.seconds_ours, r.ours_error.empty() ? "" : " (" + r.ours_error + ")",
                             r.seconds_aiter, r.aiter_error.empty() ? "" : " (" + r.aiter_error + ")");
  }
  fmt::print("| family | top-{} share | ours: d | max err % | lse err | aiter: d | max err % | lse err | fp8-P model, l of P8: d | "
             "max err % | lse err | l of P: d | max err % |\n",
             kPeakTokens);
  fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  int failed = 0;
  for (auto& r : rows) {
    // The model is of fp8 P: with bf16 q, P is not rounded to fp8 (both sides measure bf16-like errors).
    const bool fp8_p = r.family.q_dtype == rt::DType::fp8;
    fmt::print("| {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.family.name, r.top_share,
               fig(r.ours, r.ours_ran, 0), fig(r.ours, r.ours_ran, 1), fig(r.ours, r.ours_ran, 2), fig(r.aiter, r.aiter_ran, 0),
               fig(r.aiter, r.aiter_ran, 1), fig(r.aiter, r.aiter_ran, 2), fig(r.model, fp8_p, 0), fig(r.model, fp8_p, 1),
               fig(r.model, fp8_p, 2), fig(r.model_exact_sum, fp8_p, 0), fig(r.model_exact_sum, fp8_p, 1));
    if ((opts.ours && !r.ours_ran) || (!opts.aiter.empty() && !r.aiter_ran)) ++failed;
  }
  fmt::print("\nKernels: ");
  for (size_t i = 0; i < rows.size(); i += 2)
    fmt::print("{}{} ours {}, aiter {}", i ? "; " : "", rows[i].family.name.substr(0, rows[i].family.name.rfind(' ')),
               rows[i].ours_kernel.empty() ? "-" : rows[i].ours_kernel, rows[i].aiter_kernel.empty() ? "-" : rows[i].aiter_kernel);
  fmt::print("\n");
  if (!json_out.empty()) {
    nlohmann::json j = {{"about", "engine-shaped accuracy (docs/accuracy.md): ours and aiter's kernels on the emulator, and a float64 "
                                  "model rounding only P to fp8, each against the fp64 reference"},
                        {"aiter_dir", aiter_dir}, {"catalog", catalog_dir}, {"aiter_kv_split", aiter_kv_split},
                        {"peak_tokens", peak_tokens}, {"peak_spread", peak_spread}};
    for (auto& r : rows) {
      nlohmann::json e = {{"family", r.family.name}, {"who", r.family.who}, {"kv_lens", r.family.kv_lens}, {"seed", r.family.seed},
                          {"top_share", r.top_share}, {"model_rounded_sum", figures_json(r.model)},
                          {"model_exact_sum", figures_json(r.model_exact_sum)}, {"seconds_reference", r.seconds_reference}};
      if (opts.ours) {
        e["ours"] = {{"kernel", r.ours_kernel}, {"ran", r.ours_ran}, {"seconds", r.seconds_ours}};
        if (r.ours_ran) e["ours"].update(figures_json(r.ours));
        else e["ours"]["error"] = r.ours_error;
      }
      if (!opts.aiter.empty()) {
        e["aiter"] = {{"kernel", r.aiter_kernel}, {"ran", r.aiter_ran}, {"seconds", r.seconds_aiter}, {"findings", r.aiter_findings}};
        if (r.aiter_ran) e["aiter"].update(figures_json(r.aiter));
        else e["aiter"]["error"] = r.aiter_error;
      }
      j["families"].push_back(e);
    }
    std::ofstream(json_out) << j.dump(2) << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlaoracle: run aiter's MLA decode code objects (hardware-validated on MI300X/MI355X) in the emulator against the "
               "fp64 reference. aiter kernels rely on timing the ISA does not promise, so the emulator runs them in relaxed mode "
               "by default (violations of waitcnt/hazard/LDS-race/LDS-DMA rules are reported, once per rule and pc, and counted)."};
  std::string aiter_dir, json_out, forms_out;
  std::vector<std::string> kernels, targets;
  std::vector<int> kv_splits;
  std::vector<int> kv_lens;
  uint64_t seed = 1;
  bool strict = false, relaxed = false, list = false, show_warnings = false;
  std::string early_read = "latency";
  app.add_option("--aiter-dir", aiter_dir, "checkout of ROCm/aiter (default: $AITER_DIR)");
  app.add_option("--kernel", kernels, "kernel to run: co name stem, symbol or glob (repeatable; default: every runnable kernel)");
  app.add_option("--target", targets, "gfx942 and/or gfx950 (repeatable; default both)")->check(CLI::IsMember({"gfx942", "gfx950"}));
  app.add_option("--kv-split", kv_splits, "kv_split values 1..16 (repeatable; default 1 and 4; with --sweep: keep only these)");
  app.add_option("--kv-lens", kv_lens, "tokens per request, comma-separated (default 421,777,1029)")->delimiter(',');
  int batch = 0, max_len = 0;
  std::string sweep, summary_out;
  bool list_cases = false;
  CLI::Option* batch_opt = app.add_option("--batch", batch, "requests per launch (1..64): their lengths cycle through --kv-lens (default: one per length)");
  app.add_option("--sweep", sweep, "run a preset grid of problems instead: 'sampled' (15 edge cases per kernel) or 'full' "
                                   "(kv_split 1-16 x batch 1/8/64 x lengths 1..8192 at page/chunk edges; about a day on 2 cores)");
  app.add_option("--max-len", max_len, "with --sweep: skip cases whose longest request exceeds this many tokens");
  app.add_flag("--list-cases", list_cases, "with --sweep: print the cases (kv_split, lengths) and exit (needs no aiter)");
  app.add_option("--summary", summary_out, "write the summary table (kernel x target x kv_split x lengths: pass/fail) here (markdown)");
  app.add_option("--seed", seed, "random problem seed (default 1)");
  app.add_flag("--relaxed", relaxed, "relaxed strict checks (the default for aiter's kernels; kept for symmetry with mlaemu)");
  app.add_flag("--strict", strict, "stop at the first waitcnt/hazard/LDS-race/LDS-DMA violation instead");
  app.add_option("--early-read", early_read,
                 "relaxed mode: what a register read before the s_waitcnt covering its load holds: 'latency' (default: the "
                 "load's data once 16 wait states (LDS, SMEM) / 64 (VMEM) passed since it issued, else its previous value), "
                 "'loaded' (always the load's data) or 'previous' (always the previous value); docs/emulator.md")
      ->check(CLI::IsMember({"latency", "loaded", "previous"}));
  uint64_t sched_seed = 0;
  unsigned quantum = 1;
  app.add_option("--sched-seed", sched_seed, "wave interleaving: 0 = round robin (default), else random with this seed");
  app.add_option("--quantum", quantum, "instructions per wave turn (default 1)");
  bool fill_rp = false;
  size_t input_slack = 0;
  app.add_flag("--fill-rp", fill_rp, "experiment: also pass the output buffer in slot 0xF0 (ptr_RP, null in aiter's non-persistent launch)");
  app.add_option("--input-slack", input_slack, "experiment: bytes of 0xFF after every input buffer (default 0: reading past a tensor faults)");
  app.add_flag("--show-warnings", show_warnings, "print the emulator's relaxed-mode warnings (once per rule and pc) on stderr");
  app.add_flag("--list", list, "list the catalog and what the oracle can run, then exit");
  app.add_option("--json", json_out, "write machine-readable results here");
  app.add_option("--forms-out", forms_out, "write every instruction form executed per kernel run, with counts, here");
  std::string problem_dir, catalog_dir;
  bool engine_acc = false, no_aiter = false;
  std::vector<std::string> families;
  int aiter_kv_split = 16;
  app.add_option("--problem", problem_dir,
                 "run the kernels on this problem (mlarun make-problem; page size 1, the kernel's target and dtypes, heads up to "
                 "its gqa: fewer are zero-padded in q) instead of a random one");
  app.add_flag("--engine-accuracy", engine_acc,
               "the engine-shaped accuracy table (docs/accuracy.md): our kernels (--catalog) beside aiter's on the same problems, "
               "and the fp8-P model");
  app.add_option("--catalog", catalog_dir, "--engine-accuracy: our catalog (mlagen build --out; default $MLA_CATALOG_DIR)");
  app.add_option("--family", families, "--engine-accuracy: only the families matching this glob (repeatable)");
  app.add_flag("--no-aiter", no_aiter, "--engine-accuracy: our side and the model only");
  app.add_option("--aiter-kv-split", aiter_kv_split, "--engine-accuracy: work items per request of aiter's persistent launch")
      ->capture_default_str();
  int peak_tokens = kPeakTokens;
  double peak_spread = kPeakSpread;
  app.add_option("--peak-tokens", peak_tokens, "--engine-accuracy: peaked families' tokens per (query row, head)")->capture_default_str();
  app.add_option("--peak-spread", peak_spread, "--engine-accuracy: peaked families' score spread")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (engine_acc) {
    try {
      if (catalog_dir.empty())
        if (const char* e = std::getenv("MLA_CATALOG_DIR")) catalog_dir = e;
      if (catalog_dir.empty() && no_aiter) {
        std::cerr << "mlaoracle: --engine-accuracy --no-aiter needs --catalog DIR (or MLA_CATALOG_DIR): nothing to run\n";
        return 2;
      }
      if (aiter_kv_split < 1) {
        std::cerr << fmt::format("mlaoracle: --aiter-kv-split {} (allowed: >= 1)\n", aiter_kv_split);
        return 2;
      }
      if (peak_tokens < 1 || !(peak_spread >= 0)) {
        std::cerr << fmt::format("mlaoracle: --peak-tokens {} --peak-spread {} (allowed: >= 1, >= 0)\n", peak_tokens, peak_spread);
        return 2;
      }
      return engine_accuracy(catalog_dir, aiter_dir, no_aiter, aiter_kv_split, families, targets, json_out, peak_tokens, peak_spread);
    } catch (const std::exception& e) {
      std::cerr << "mlaoracle: error: " << e.what() << "\n";
      return 2;
    }
  }
  if (strict && relaxed) {
    std::cerr << "mlaoracle: --strict and --relaxed exclude each other\n";
    return 2;
  }
  if (targets.empty()) targets = {"gfx942", "gfx950"};
  std::vector<SweepCase> cases;
  try {
    const bool batch_given = batch_opt->count() > 0;
    check_cli_values(batch_given ? std::vector<int>{batch} : std::vector<int>{}, kv_lens, kv_splits);
    if (!sweep.empty()) {
      if (!kv_lens.empty() || batch_given) throw OracleError("--sweep sets the lengths and the batch: drop --kv-lens / --batch (--kv-split and --max-len filter its cases)");
      if (max_len < 0) throw OracleError(fmt::format("--max-len {}: must be >= 0 (0: no limit)", max_len));
      cases = filter_cases(sweep_cases(sweep, seed), kv_splits, max_len);
      if (cases.empty()) throw OracleError(fmt::format("--sweep {}: no case left after --kv-split / --max-len", sweep));
    } else {
      if (list_cases || max_len) throw OracleError("--list-cases and --max-len need --sweep");
      if (kv_splits.empty()) kv_splits = {1, 4};
      std::vector<int> lens = batch_lengths(kv_lens.empty() ? RunConfig{}.kv_lens : kv_lens, batch);
      for (int s : kv_splits) cases.push_back({s, lens, ""});
    }
  } catch (const OracleError& e) {
    std::cerr << "mlaoracle: error: " << e.what() << "\n";
    return 2;
  }
  if (list_cases) {
    for (auto& c : cases) fmt::print("kv_split {:2} batch {:2} lens {}{}\n", c.kv_split, c.batch(), fmt::join(c.kv_lens, ","), c.why.empty() ? "" : "  # " + c.why);
    return 0;
  }
  try {
    std::string dir = resolve_aiter_dir(aiter_dir);
    std::vector<AiterKernel> selected;
    for (auto& t : targets) {
      emu::Gfx g = t == "gfx942" ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
      std::vector<AiterKernel> cat;
      try {
        cat = load_catalog(dir, g);
      } catch (const OracleError& e) {
        std::cerr << "mlaoracle: " << e.what() << "\n";
        continue;
      }
      for (auto& k : cat) {
        if (!matches(k, kernels)) continue;
        std::string why = unsupported_reason(k);
        if (list) fmt::print("{:<8} {:<58} {}\n", t, k.stem(), why.empty() ? "runnable" : "skipped: " + why);
        if (!why.empty()) {
          if (!kernels.empty()) std::cerr << fmt::format("mlaoracle: skipping {} {}: {}\n", t, k.stem(), why);
          continue;
        }
        selected.push_back(k);
      }
    }
    if (list) return 0;
    if (selected.empty()) {
      std::cerr << "mlaoracle: no runnable kernel matches (try --list)\n";
      return 2;
    }
    RunConfig base;
    base.seed = seed;
    base.relaxed = !strict;
    base.show_warnings = show_warnings;
    base.sched_seed = sched_seed;
    base.fill_rp = fill_rp;
    base.input_slack = input_slack;
    base.quantum = quantum;
    base.early_read = early_read == "previous" ? emu::DispatchOptions::EarlyRead::previous_value
                      : early_read == "loaded" ? emu::DispatchOptions::EarlyRead::loaded_value
                                               : emu::DispatchOptions::EarlyRead::latency;
    std::optional<rt::Problem> given;
    if (!problem_dir.empty()) {
      if (!sweep.empty()) {
        std::cerr << "mlaoracle: error: --problem and --sweep: pick one (a sweep makes its own problems)\n";
        return 2;
      }
      given = rt::load_problem(problem_dir);
      base.problem = &*given;
      std::vector<int> lens;
      for (int b = 0; b < given->batch(); ++b) lens.push_back(given->kv_len(b));
      for (auto& c : cases) c.kv_lens = lens;
      // Only the kernels that can take it: its target (the rest of the checks are run_kernel's).
      std::erase_if(selected, [&](const AiterKernel& k) {
        return emu::gfx_name(k.gfx) != std::string(rt::name(given->target));
      });
      if (selected.empty()) {
        std::cerr << fmt::format("mlaoracle: no selected kernel is for the problem's target {}\n", rt::name(given->target));
        return 2;
      }
    }
    if (sweep.empty())
      std::cerr << fmt::format("mlaoracle: {} kernel(s) x kv_split {{{}}}, requests of {} tokens, {}, {} checks\n", selected.size(),
                               fmt::join(kv_splits, ","), fmt::join(cases[0].kv_lens, "/"),
                               given ? "problem " + problem_dir : fmt::format("seed {}", seed), base.relaxed ? "relaxed" : "strict");
    else
      std::cerr << fmt::format("mlaoracle: sweep '{}': {} kernel(s) x {} case(s), seed {}, {} checks\n", sweep, selected.size(), cases.size(),
                               seed, base.relaxed ? "relaxed" : "strict");
    std::vector<RunResult> results;
    std::vector<std::vector<int>> run_lens;
    std::vector<SweepOutcome> outcomes;
    size_t n = selected.size() * cases.size(), i = 0, failed_so_far = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& k : selected)
      for (auto& c : cases) {
        RunConfig cfg = base;
        cfg.kv_split = c.kv_split;
        // A causal request holds its own query rows: lengths below the kernel's qseqlen are raised to it.
        cfg.kv_lens = c.kv_lens;
        for (int& l : cfg.kv_lens) l = std::max(l, std::max(1, k.qseqlen));
        ++i;
        std::cerr << fmt::format("mlaoracle: [{}/{}] {} {} kv_split {} requests {} ...\n", i, n, emu::gfx_name(k.gfx), k.stem(), c.kv_split,
                                 requests_text(cfg.kv_lens));
        RunResult r;
        try {
          r = run_kernel(k, cfg);
        } catch (const std::exception& e) {  // a problem this kernel cannot be set up for: a failed run, the sweep goes on
          if (given && dynamic_cast<const OracleError*>(&e)) {
            std::cerr << "mlaoracle: " << e.what() << "\n";  // this kernel cannot take the given problem: skipped
            continue;
          }
          r.kernel = k.stem();
          r.target = emu::gfx_name(k.gfx);
          r.kv_split = c.kv_split;
          r.error = e.what();
          r.error_rule = "setup";
        }
        if (!r.pass) ++failed_so_far;
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cerr << fmt::format("mlaoracle: [{}/{}] {} ({} failed so far, {:.0f} s elapsed, ~{:.0f} s left)\n", i, n,
                                 r.ran ? fmt::format("{}: d {:.2e}, {:.1f} s", r.pass ? "pass" : "FAIL", r.d, r.seconds) : "failed: " + r.error,
                                 failed_so_far, el, el / double(i) * double(n - i));
        outcomes.push_back({r.kernel, r.target, c.kv_split, c.batch(), *std::max_element(cfg.kv_lens.begin(), cfg.kv_lens.end()),
                            *std::min_element(cfg.kv_lens.begin(), cfg.kv_lens.end()), r.pass, r.pass ? "" : fail_detail(r)});
        results.push_back(std::move(r));
        run_lens.push_back(cfg.kv_lens);
      }
    if (results.empty()) {
      std::cerr << "mlaoracle: no selected kernel can take the problem\n";
      return 2;
    }
    // Table.
    fmt::print("| kernel | target | kv_split | requests (tokens) | d | max err % of max\\|ref\\| | lse max err | strict-check findings | wave-inst/s | result |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|---|\n");
    int failed = 0;
    for (size_t ri = 0; ri < results.size(); ++ri) {
      auto& r = results[ri];
      const std::string req = requests_text(run_lens[ri]);
      if (!r.ran) {
        ++failed;
        std::string why = !r.unsupported.empty() ? "unsupported instruction `" + r.unsupported + "`" : r.error_rule + ": " + r.error;
        fmt::print("| {} | {} | {} | {} | - | - | - | - | - | FAIL: {} |\n", r.kernel, r.target, r.kv_split, req, why);
        continue;
      }
      if (!r.pass) ++failed;
      std::string status = r.pass ? "pass" : fmt::format("FAIL (unwritten {}, non-finite {})", r.unwritten, r.nonfinite);
      fmt::print("| {} | {} | {} | {} | {:.2e} | {:.2f} | {} | {} | {:.2f}M | {} |\n", r.kernel, r.target, r.kv_split, req, r.d, r.max_err_pct,
                 r.lse_err >= 0 ? fmt::format("{:.2e}", r.lse_err) : std::string("- (no lse out)"), findings_text(r),
                 r.seconds > 0 ? r.wave_insts / r.seconds / 1e6 : 0.0, status);
    }
    if (!sweep.empty()) {
      std::string sum = summarize(outcomes);
      fmt::print("\nSummary (sweep '{}', {} runs, {} failed):\n\n{}", sweep, results.size(), failed, sum);
      if (!summary_out.empty()) std::ofstream(summary_out) << sum;
    } else if (!summary_out.empty()) {
      std::ofstream(summary_out) << summarize(outcomes);
    }
    if (!json_out.empty()) {
      nlohmann::json j = {{"aiter_dir", dir}, {"seed", seed}, {"relaxed", base.relaxed},
                          {"pass_rule", "d <= 3e-4 and max error <= 2.5% of max|ref| and every output written"}};
      if (!sweep.empty()) j["sweep"] = sweep;
      else j["kv_lens"] = cases[0].kv_lens;
      for (size_t ri = 0; ri < results.size(); ++ri) j["runs"].push_back(to_json(results[ri], run_lens[ri]));
      std::ofstream(json_out) << j.dump(2) << "\n";
    }
    if (!forms_out.empty()) {
      nlohmann::json j = {{"about", "instruction forms (emulator/inst_form.h) executed by aiter's MLA code objects in mlaemu, "
                                    "wave-instruction counts per run; runs with pass=true matched the fp64 reference"},
                          {"seed", seed}};
      if (sweep.empty()) j["kv_lens"] = cases[0].kv_lens;
      for (auto& r : results) {
        if (!r.ran) continue;
        j["runs"].push_back({{"kernel", r.kernel}, {"target", r.target}, {"kv_split", r.kv_split}, {"pass", r.pass}, {"d", r.d},
                             {"forms", r.forms}});
      }
      std::ofstream(forms_out) << j.dump(1) << "\n";
    }
    return failed ? 1 : 0;
  } catch (const OracleError& e) {
    std::cerr << "mlaoracle: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlaoracle: error: " << e.what() << "\n";
    return 2;
  }
}
