// mlacheck: one command for a user with a GPU (bench/check.h, issue #34).
//
//   mlacheck --out report                       # HIP device 0, every decode kernel of its target in out/
//   mlacheck --backend emulator --out DIR       # the same on the CPU emulator (--target gfx942|gfx950)
//
// Writes DIR/report.json and DIR/report.md. Exit 0 when every kernel passes, 1 when one fails
// (the report says which), 2 for bad arguments or no device / catalog.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench.h"
#include "bench/check.h"

using namespace mla::bench;

namespace {
// "8192x16" or "100,2000,77".
std::vector<int> parse_lens(const std::string& spec) {
  std::vector<int> v;
  auto num = [&](const std::string& t) {
    size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || t.empty() || x < 1)
      throw std::invalid_argument(fmt::format("--time-lens {}: '{}' is not a length >= 1 (allowed: LENxCOUNT or LEN,LEN,...)", spec, t));
    return x;
  };
  if (auto x = spec.find('x'); x != std::string::npos) {
    const int len = num(spec.substr(0, x)), count = num(spec.substr(x + 1));
    if (count > 4096) throw std::invalid_argument(fmt::format("--time-lens {}: at most 4096 requests", spec));
    return std::vector<int>(size_t(count), len);
  }
  size_t at = 0;
  while (at <= spec.size()) {
    size_t c = spec.find(',', at);
    if (c == std::string::npos) c = spec.size();
    v.push_back(num(spec.substr(at, c - at)));
    at = c + 1;
  }
  return v;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlacheck: check and time every MLA decode kernel of a catalog on this machine's GPU (or the emulator); "
               "writes report.json and report.md to attach to an issue"};
  CheckOptions o;
  o.python3 = MLA_PYTHON3;
  o.aiter_script = MLA_AITER_SCRIPT;
  std::string time_lens;
  app.add_option("--backend", o.backend, "hip (the GPU, default) or emulator (the CPU emulator)")
      ->check(CLI::IsMember({"hip", "emulator"}));
  app.add_option("--target", o.target, "emulator: the emulated device's target")->check(CLI::IsMember({"gfx942", "gfx950"}));
  app.add_option("--device", o.device, "hip: device ordinal");
  app.add_option("--catalog", o.catalog_dir, "catalog directory (mlagen build --out; default $MLA_CATALOG_DIR, else ./out)");
  app.add_option("--out", o.out_dir, "report directory (report.json, report.md)");
  app.add_option("--kernels", o.kernels, "keep kernels whose name contains one of these (repeatable or comma-separated)")
      ->delimiter(',');
  app.add_option("--max-kernels", o.max_kernels, "check at most this many kernels (by name; 0: all)");
  app.add_option("--max-len", o.max_len, "longest request of the check problems (default 2048: on HIP they also run on the CPU emulator)");
  app.add_option("--time-lens", time_lens, "the timed batch: LENxCOUNT or LEN,LEN,... (default: hip 8192x16, emulator MAXLENx2)");
  app.add_option("--runs", o.runs, "timed runs (default: hip 100, emulator 3)");
  app.add_option("--warmup", o.warmup, "warm-up runs (default: hip 10, emulator 1)");
  app.add_option("--rotate", o.rotate, "input sets rotated while timing (0: enough to exceed 2x the 256 MB last-level cache on a GPU)");
  app.add_flag("!--no-model", o.model, "skip the model's time (mlabench's machine model; needs emulator runs)");
  app.add_option("--model-full-scale-tokens", o.model_full_scale_tokens,
                 "the model's counters from one full-scale emulator run for timed batches up to this many tokens (else scaled runs)");
  app.add_flag("!--no-aiter", o.aiter, "do not try aiter's mla_decode_fwd");
  app.add_option("--seed", o.seed, "random seed (0: a fresh one, reported)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!time_lens.empty()) o.time_lens = parse_lens(time_lens);
    if (o.backend == "hip" && app.count("--target"))
      throw std::invalid_argument("--target is for --backend emulator; a HIP device has its own target");
    if (o.backend == "hip" && o.runs >= 0 && o.runs < 100)
      fmt::print(stderr, "mlacheck: --runs {} < 100: the median is not a hardware-grade figure\n", o.runs);
    const auto report = run_check(o);
    std::cout << check_markdown(report);
    fmt::print(stderr, "mlacheck: wrote {0}/report.json and {0}/report.md\n", o.out_dir);
    return report.at("summary").at("failed").get<int>() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "mlacheck: " << e.what() << "\n";
    return 2;
  }
}
