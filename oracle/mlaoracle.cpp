// mlaoracle: runs aiter's hardware-validated MLA decode code objects in the emulator on random
// problems and compares them with the fp64 reference (docs/aiter-oracle.md).
//
//   mlaoracle --aiter-dir ~/aiter [--target gfx942] [--kernel 'mla_a8w8_qh16_qseqlen1*']
//             [--kv-split 1 --kv-split 4] [--seed N] [--strict] [--json r.json] [--forms-out f.json]
//   mlaoracle --aiter-dir ~/aiter --sweep sampled|full [--kv-split S] [--max-len N] [--summary s.md]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>

#include "oracle/aiter_oracle.h"
#include "oracle/sweep.h"

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
  CLI11_PARSE(app, argc, argv);
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
    if (sweep.empty())
      std::cerr << fmt::format("mlaoracle: {} kernel(s) x kv_split {{{}}}, requests of {} tokens, seed {}, {} checks\n", selected.size(),
                               fmt::join(kv_splits, ","), fmt::join(cases[0].kv_lens, "/"), seed, base.relaxed ? "relaxed" : "strict");
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
