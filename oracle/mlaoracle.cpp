// mlaoracle: runs aiter's hardware-validated MLA decode code objects in the emulator on random
// problems and compares them with the fp64 reference (docs/aiter-oracle.md).
//
//   mlaoracle --aiter-dir ~/aiter [--target gfx942] [--kernel 'mla_a8w8_qh16_qseqlen1*']
//             [--kv-split 1 --kv-split 4] [--seed N] [--strict] [--json r.json] [--forms-out f.json]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fnmatch.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "oracle/aiter_oracle.h"

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

nlohmann::json to_json(const RunResult& r) {
  nlohmann::json j = {{"kernel", r.kernel}, {"target", r.target}, {"kv_split", r.kv_split}, {"ran", r.ran}, {"pass", r.pass}};
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
  app.add_option("--kv-split", kv_splits, "kv_split values (repeatable; default 1 and 4)");
  app.add_option("--kv-lens", kv_lens, "tokens per request, comma-separated (default 421,777,1029)")->delimiter(',');
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
  if (kv_splits.empty()) kv_splits = {1, 4};
  if (targets.empty()) targets = {"gfx942", "gfx950"};
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
    if (!kv_lens.empty()) base.kv_lens = kv_lens;
    std::cerr << fmt::format("mlaoracle: {} kernel(s) x kv_split {{{}}}, requests of {} tokens, seed {}, {} checks\n", selected.size(),
                             fmt::join(kv_splits, ","), fmt::join(base.kv_lens, "/"), seed, base.relaxed ? "relaxed" : "strict");
    std::vector<RunResult> results;
    size_t n = selected.size() * kv_splits.size(), i = 0;
    for (auto& k : selected)
      for (int s : kv_splits) {
        RunConfig cfg = base;
        cfg.kv_split = s;
        std::cerr << fmt::format("mlaoracle: [{}/{}] {} {} kv_split {} ...\n", ++i, n, emu::gfx_name(k.gfx), k.stem(), s);
        RunResult r = run_kernel(k, cfg);
        std::cerr << fmt::format("mlaoracle: [{}/{}] {}\n", i, n,
                                 r.ran ? fmt::format("done: d {:.2e}, {:.1f} s", r.d, r.seconds) : "failed: " + r.error);
        results.push_back(std::move(r));
      }
    // Table.
    fmt::print("| kernel | target | kv_split | d | max err % of max\\|ref\\| | lse max err | strict-check findings | wave-inst/s | result |\n");
    fmt::print("|---|---|---|---|---|---|---|---|---|\n");
    int failed = 0;
    for (auto& r : results) {
      if (!r.ran) {
        ++failed;
        std::string why = !r.unsupported.empty() ? "unsupported instruction `" + r.unsupported + "`" : r.error_rule + ": " + r.error;
        fmt::print("| {} | {} | {} | - | - | - | - | - | FAIL: {} |\n", r.kernel, r.target, r.kv_split, why);
        continue;
      }
      if (!r.pass) ++failed;
      std::string status = r.pass ? "pass" : fmt::format("FAIL (unwritten {}, non-finite {})", r.unwritten, r.nonfinite);
      fmt::print("| {} | {} | {} | {:.2e} | {:.2f} | {} | {} | {:.2f}M | {} |\n", r.kernel, r.target, r.kv_split, r.d, r.max_err_pct,
                 r.lse_err >= 0 ? fmt::format("{:.2e}", r.lse_err) : std::string("- (no lse out)"), findings_text(r),
                 r.seconds > 0 ? r.wave_insts / r.seconds / 1e6 : 0.0, status);
    }
    if (!json_out.empty()) {
      nlohmann::json j = {{"aiter_dir", dir}, {"seed", seed}, {"kv_lens", base.kv_lens}, {"relaxed", base.relaxed},
                          {"pass_rule", "d <= 3e-4 and max error <= 2.5% of max|ref| and every output written"}};
      for (auto& r : results) j["runs"].push_back(to_json(r));
      std::ofstream(json_out) << j.dump(2) << "\n";
    }
    if (!forms_out.empty()) {
      nlohmann::json j = {{"about", "instruction forms (emulator/inst_form.h) executed by aiter's MLA code objects in mlaemu, "
                                    "wave-instruction counts per run; runs with pass=true matched the fp64 reference"},
                          {"seed", seed}, {"kv_lens", base.kv_lens}};
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
