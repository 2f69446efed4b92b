// mlabench: measured counters, modeled times and (on hardware) timings of MLA decode shapes.
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/aiter_side.h"
#include "bench/bench.h"
#include "bench/indexer.h"
#include "bench/calibrate.h"
#include "codeobj/tools.h"

using namespace mla::bench;

namespace {

// The C API's host costs (bench/host_costs.cpp) and the Python layer's (bench/python_host_cost.py,
// once per target: the emulator target is per process), of the shapes and issue #31's batches.
std::vector<HostCost> measure_host_costs_with_python(const std::vector<BenchShape>& shapes, int steps,
                                                     const std::string& out_dir) {
  fmt::print(stderr, "mlabench: host costs ({} timed calls each)\n", steps);
  const auto hshapes = host_cost_shapes(shapes);
  auto costs = measure_host_costs(hshapes, steps);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : hshapes)
    list.push_back({{"name", s.name}, {"target", mla::rt::name(s.shape.target)}, {"heads", s.shape.heads},
                    {"q_dtype", mla::rt::name(s.shape.q_dtype)}, {"page_size", s.shape.page_size},
                    {"kv_lens", s.kv_lens}, {"catalog", catalog_for(s.shape).dir()}});
  const std::string list_path = out_dir + "/host_cost_shapes.json";
  std::ofstream(list_path) << list.dump() << "\n";
  for (const char* target : {"gfx942", "gfx950"}) {
    const std::string res = out_dir + fmt::format("/host_cost_python_{}.json", target);
    const mla::gen::ToolResult py = mla::gen::run_tool(
        {"/usr/bin/env", "PYTHONPATH=" MLA_PYTHON_PACKAGE_DIR, "MLA_RUNTIME_LIB=" MLA_RUNTIME_SHARED_LIB, MLA_PYTHON3,
         MLA_PYTHON_HOST_COST_SCRIPT, "--target", target, "--shapes", list_path, "--runs", std::to_string(steps),
         "--json", res});
    if (py.exit_code != 0)
      throw std::runtime_error(
          fmt::format("bench/python_host_cost.py --target {} failed (exit {}): {}", target, py.exit_code, py.err));
    for (const auto& r : nlohmann::json::parse(std::ifstream(res)))
      for (auto& c : costs)
        if (c.name == r.at("name").get<std::string>()) {
          c.python_update_us = r.at("update_us").get<double>();
          c.python_decode_us = r.at("decode_python_us").get<double>();
          c.python_update_over_c_us = r.value("update_python_us", 0.0);
          c.python_decode_gpu_us = r.value("decode_gpu_python_us", 0.0);
        }
  }
  return costs;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlabench: MLA decode performance evidence (docs/performance.md)"};
  std::string backend = "emulator", out_dir = "out/bench", set = "all", catalog_dir;
  std::vector<std::string> shape_specs;
  MeasureOptions mo;
  mo.verbose = true;
  HipOptions ho;
  AiterSideOptions ao;
  ao.verbose = true;
  app.add_option("--backend", backend, "emulator (measured counters + modeled times) or hip (timing on an AMD GPU)")
      ->check(CLI::IsMember({"emulator", "hip"}));
  app.add_option("--out", out_dir, "output folder (table.md, bench.json, bench.png)");
  app.add_option("--set", set, "seed-001, seed-000, mixed (lengths that differ), sparse, dsa-indexer (the DSA indexer's logits kernels), all, or "
                 "none (only --shape)")
      ->check(CLI::IsMember({"seed-001", "seed-000", "mixed", "sparse", "dsa-indexer", "all", "none"}));
  app.add_option("--shape", shape_specs,
                 "extra shape TARGET:Q/KV:hHEADS[:qsQSEQLEN]:pgPAGE:LENS, e.g. gfx950:fp8/fp8:h12:pg128:68435x16, gfx950:fp8/fp8:h128:qs4:pg1:8192x8 or "
                 "gfx942:bf16/fp8:h16:pg1:32768,1000 (repeatable)");
  app.add_option("--scaled-cus", mo.scaled_cus, "CUs of the scaled emulator runs");
  app.add_option("--full-scale-tokens", mo.full_scale_max_tokens,
                 "emulate shapes with at most this many tokens at full scale (0: never)");
  app.add_flag("!--no-mca", mo.run_mca, "skip the llvm-mca cross-check");
  app.add_flag("--trace-hot-loop", mo.trace_hot_loop,
               "print each shape's hot loop with the co-issue model's issue slot per instruction (stderr)");
  app.add_option("--runs", ho.runs, "hip: timed runs (>= 100)");
  app.add_option("--warmup", ho.warmup, "hip: warm-up runs");
  app.add_option("--rotate", ho.rotate, "hip: input sets rotated (0: enough to exceed 2x the LLC)");
  app.add_option("--catalog", ho.catalog_dir, "hip: catalog dir (default: built per shape)");
  app.add_option("--aiter-dir", ao.aiter_dir,
                 "an aiter checkout: run aiter's own code objects (hsa/<gfx>/mla) through the same counters and machine "
                 "model, side by side with ours and with seed 001's published aiter times (without it: 'not run')");
  bool calibrate_only = false;
  std::string aiter_commit;
  app.add_flag("--calibrate", calibrate_only,
               "only fit the machine model on the --aiter-dir checkout's tuned GEMM tables (aiter/configs/*tuned*.csv, "
               "model_configs/*tuned*.csv): calibration.md / .json (docs/performance.md)");
  app.add_option("--aiter-commit", aiter_commit, "the aiter commit of --aiter-dir when it is not a git checkout");
  app.add_option("--aiter-unit-tokens", ao.unit_tokens, "tokens per work item of aiter's scaled runs (multiple of 128)");
  bool host_costs = true;
  int host_cost_steps = 200;
  app.add_flag("!--no-host-costs", host_costs,
               "skip the host costs (plan update, upload, mla_decode's host work, Python; measured here)");
  app.add_option("--host-cost-steps", host_cost_steps, "timed calls per host-cost figure (median)");
  bool host_costs_only = false;
  app.add_flag("--host-costs-only", host_costs_only,
               "only the host costs of the shapes (no emulator runs, no modeled times): host_costs.md / .json");
  CLI11_PARSE(app, argc, argv);

  std::vector<BenchShape> shapes;
  try {
    // The calibration on aiter's tuned tables (issue #34): alone with --calibrate, else beside the
    // bench whenever --aiter-dir is given.
    std::optional<mla::bench::cal::Calibration> calibration;
    if (calibrate_only && ao.aiter_dir.empty()) throw std::invalid_argument("--calibrate needs --aiter-dir DIR");
    if (!ao.aiter_dir.empty() && backend == "emulator" && !host_costs_only) {
      fmt::print(stderr, "mlabench: calibration on {}'s tuned tables\n", ao.aiter_dir);
      calibration = mla::bench::cal::calibrate_aiter_dir(ao.aiter_dir, aiter_commit);
      if (calibrate_only) {
        std::filesystem::create_directories(out_dir);
        const std::string md = calibration->markdown();
        std::ofstream(out_dir + "/calibration.md") << md;
        std::ofstream(out_dir + "/calibration.json") << calibration->to_json().dump(2) << "\n";
        std::cout << md;
        fmt::print(stderr, "mlabench: wrote {0}/calibration.md, {0}/calibration.json\n", out_dir);
        return 0;
      }
    }
    if (set == "all" || set == "seed-001")
      for (auto& s : seed001_shapes()) shapes.push_back(s);
    if (set == "all" || set == "seed-000")
      for (auto& s : seed000_shapes()) shapes.push_back(s);
    if (set == "all" || set == "mixed")
      for (auto& s : mixed_shapes()) shapes.push_back(s);
    if (set == "all" || set == "sparse")
      for (auto& s : sparse_shapes()) shapes.push_back(s);
    // The indexer's kernels: their own table (indexer.md / indexer.json).
    if (set == "dsa-indexer") {
      std::cout << mla::bench::write_indexer_report(out_dir);
      return 0;
    }
    for (auto& spec : shape_specs) shapes.push_back(parse_shape(spec));
    if (shapes.empty()) throw std::invalid_argument("no shapes (use --set or --shape)");

    std::filesystem::create_directories(out_dir);
    if (backend == "hip") {
      std::string table;
      auto j = hip_bench(shapes, ho, table);
      std::ofstream(out_dir + "/hip.json") << j.dump(2) << "\n";
      std::ofstream(out_dir + "/hip.md") << table;
      std::cout << table;
      return 0;
    }
    if (host_costs_only) {
      auto costs = measure_host_costs_with_python(shapes, host_cost_steps, out_dir);
      const std::string md = host_costs_markdown(costs);
      nlohmann::json j = nlohmann::json::array();
      for (const auto& c : costs) j.push_back(c.to_json());
      std::ofstream(out_dir + "/host_costs.md") << md;
      std::ofstream(out_dir + "/host_costs.json") << j.dump(2) << "\n";
      std::cout << md;
      return 0;
    }
    std::vector<ShapeResult> results;
    for (const auto& s : shapes) {
      fmt::print(stderr, "mlabench: {} ({}, {} requests, {} tokens)\n", s.name, s.shape.describe(), s.kv_lens.size(),
                 s.total_tokens());
      results.push_back(measure_shape(s, mo));
      const auto& r = results.back();
      fmt::print(stderr, "  modeled {:.1f} us ({}), bytes moved / (min + partials) {:.4f}, balance {:.3f}\n",
                 r.modeled.total_s * 1e6, r.modeled.bound, r.ratio_moved_over_plan, r.balance);
      if (r.cascade)
        fmt::print(stderr, "  cascade ({}): modeled {:.1f} us ({}), KV read / distinct {:.2f} (per request {:.2f})\n",
                   r.cascade->decision.reason, r.cascade->cascade.total_s * 1e6, r.cascade->cascade.bound,
                   r.cascade->cascade.kv_read / r.cascade->cascade.kv_distinct,
                   r.cascade->per_request.kv_read / r.cascade->per_request.kv_distinct);
    }
    add_aiter_sides(results, ao);
    auto groups = same_bytes_groups(results);
    std::string md = markdown_report(results, groups);
    nlohmann::json report = json_report(results, groups);
    if (calibration) {
      md += "\n" + calibration->markdown();
      report["calibration"] = calibration->to_json();
    }
    if (host_costs) {
      auto costs = measure_host_costs_with_python(shapes, host_cost_steps, out_dir);
      md += "\n" + host_costs_markdown(costs);
      for (const auto& c : costs) report["host_costs"].push_back(c.to_json());
    }
    std::ofstream(out_dir + "/table.md") << md;
    std::ofstream(out_dir + "/bench.json") << report.dump(2) << "\n";
    std::cout << md;
    fmt::print(stderr, "mlabench: wrote {0}/table.md, {0}/bench.json\n", out_dir);
    // The plot: matplotlib reading bench.json (bench/plot.py); a failure is an error, not a
    // silently missing picture.
    const mla::gen::ToolResult plot =
        mla::gen::run_tool({MLA_PYTHON3, MLA_PLOT_SCRIPT, out_dir + "/bench.json", out_dir + "/bench.png"});
    if (plot.exit_code != 0)
      throw std::runtime_error(fmt::format("bench/plot.py failed (exit {}): {}", plot.exit_code, plot.err));
    fmt::print(stderr, "mlabench: wrote {}/bench.png (matplotlib)\n", out_dir);
  } catch (const std::exception& e) {
    std::cerr << "mlabench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
