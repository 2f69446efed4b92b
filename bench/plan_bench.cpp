// mlaplanbench: the host cost of planning one decode step (issue #31, docs/planner.md "Host cost").
//
// For each shape it opens the catalog on the emulator device through the public C API and times
// mla_plan_update / mla_plan_update_shared (caller-given group, or groups detected in a host page
// table) step after step, each step's requests one token longer, as decode grows them; and the
// planner alone (detect_prefix_groups + plan_decode into storage reused across steps) on the
// PlanInputs the runtime builds for the same kernels. Prints median and p90 per shape with the
// plan's predicted cost; --json writes them; --max-factor F fails when a shape's C-API median
// exceeds F times its target (50 us at batch <= 64, 200 us at batch 256).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_runtime.h"
#include "runtime/planner.h"
#include "runtime/prefix.h"

// Heap allocations made by the timed updates (steady state: 0), counted while a window is open.
#include "tests/alloc_count.h"

namespace {

using namespace mla;
using Clock = std::chrono::steady_clock;

enum class Groups { none, given, detected };

struct Shape {
  std::string name;
  rt::Target target = rt::Target::gfx942;
  int heads = 16;
  bool q_bf16 = false;  // bf16 q, else fp8; the KV is fp8
  int page = 1;
  int cus = 256;
  std::vector<int> lens;  // step 0; step s adds s tokens to every request
  Groups groups = Groups::none;
  int shared = 0;         // tokens of the prefix every request shares (its whole pages in the page table)
  double target_us = 50;  // issue #31's target for the median
};

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  // Kimi-K3 TP8 on MI355X (seed 000): 12 heads, fp8/fp8, 256 CUs, ~68.4K tokens per request; with a
  // 63,911-token prefix shared by every request, given by the caller or detected in the page table.
  for (int page : {1, 128})
    for (int batch : {16, 24})
      for (Groups g : {Groups::none, Groups::given, Groups::detected}) {
        Shape s;
        s.target = rt::Target::gfx950, s.heads = 12, s.page = page, s.cus = 256, s.groups = g, s.shared = 63911;
        for (int b = 0; b < batch; ++b) s.lens.push_back(68430 + b % 5);
        s.name = fmt::format("K3 c{} pg{}{}", batch, page,
                             g == Groups::none ? "" : g == Groups::given ? " group given" : " group detected");
        out.push_back(s);
      }
  // Seed 001 (Kimi-K2.7 on MI300X): 16 heads, bf16 q / fp8 kv, page 1, 304 CUs.
  for (int ctx : {32768, 65536, 131072, 262144})
    for (int batch : {1, 2, 4, 8, 16}) {
      Shape s;
      s.target = rt::Target::gfx942, s.heads = 16, s.q_bf16 = true, s.page = 1, s.cus = 304;
      s.lens.assign(size_t(batch), ctx);
      s.name = fmt::format("seed001 {}K x{}", ctx / 1024, batch);
      out.push_back(s);
    }
  // Large batches of 8K-token requests, on both shapes.
  for (int batch : {64, 256}) {
    Shape a;
    a.target = rt::Target::gfx942, a.heads = 16, a.q_bf16 = true, a.page = 1, a.cus = 304;
    a.lens.assign(size_t(batch), 8192);
    a.name = fmt::format("seed001 8K x{}", batch);
    a.target_us = batch > 64 ? 200 : 50;
    out.push_back(a);
    Shape k = a;
    k.target = rt::Target::gfx950, k.heads = 12, k.q_bf16 = false, k.page = 128, k.cus = 256;
    k.name = fmt::format("K3 8K x{} pg128", batch);
    out.push_back(k);
  }
  return out;
}

struct Stats {
  double median = 0, p90 = 0;
  size_t n = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median = v[v.size() / 2];
  s.p90 = v[std::min(v.size() - 1, size_t(0.9 * double(v.size())))];
  return s;
}

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

void check(mla_status s, const char* what) {
  if (s != MLA_SUCCESS) throw std::runtime_error(fmt::format("{}: {} ({})", what, mla_last_error(), mla_status_name(s)));
}

// One emulator device and context per target, shared by the shapes.
struct Api {
  mla_device* dev = nullptr;
  mla_context* ctx = nullptr;
  ~Api() {
    mla_context_destroy(ctx);
    mla_device_close(dev);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlaplanbench: host cost of a decode step's plan update (docs/planner.md \"Host cost\")"};
  std::string catalog = "out", json_path, filter;
  bool quick = false, planner_only = false;
  int steps = 0;
  double max_factor = 0;
  app.add_option("--catalog", catalog, "catalog dir (mlagen build --out)");
  app.add_flag("--quick", quick, "fewer steps per shape (the ctest)");
  app.add_option("--steps", steps, "timed steps per shape (default 300, --quick 40)");
  app.add_option("--json", json_path, "write the results as JSON to this file ('-': stdout)");
  app.add_option("--shape", filter, "only the shape of this name, or those whose name contains it");
  app.add_flag("--planner-only", planner_only, "time the planner only, not the C API (profiling)");
  app.add_option("--max-factor", max_factor,
                 "fail (exit 1) when a shape's C-API median exceeds this many times its target (0: never)");
  CLI11_PARSE(app, argc, argv);
  if (steps <= 0) steps = quick ? 40 : 300;
  const int warmup = quick ? 3 : 10;

  try {
    const rt::Catalog cat = rt::Catalog::open(catalog);
    std::map<rt::Target, std::unique_ptr<Api>> apis;
    nlohmann::json results = nlohmann::json::array();
    bool over = false;
    fmt::print("{:<28} {:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>14} {:>7} {:>11}\n", "shape (us)", "batch", "target",
               "capi med", "capi p90", "plan med", "plan p90", "x target", "predicted cost", "cascade", "allocs a/p");
    const auto all_shapes = shapes();
    const bool exact = std::any_of(all_shapes.begin(), all_shapes.end(), [&](const Shape& s) { return s.name == filter; });
    for (const Shape& s : all_shapes) {
      if (!filter.empty() && (exact ? s.name != filter : s.name.find(filter) == std::string::npos)) continue;
      const int B = int(s.lens.size());
      rt::DecodeShape ds;
      ds.target = s.target;
      ds.q_dtype = s.q_bf16 ? rt::DType::bf16 : rt::DType::fp8;
      ds.kv_dtype = rt::DType::fp8;
      ds.heads = s.heads, ds.qseqlen = 1, ds.page_size = s.page;
      const rt::SelectedKernels k = rt::selected_kernels(cat.select(ds), ds);
      // A [batch, stride] page table (vLLM's block table) for every step: the prefix's whole pages
      // are the same ids in every row, the rest distinct.
      const int max_len = *std::max_element(s.lens.begin(), s.lens.end()) + warmup + steps + 1;
      const int64_t stride = (max_len + s.page - 1) / s.page;
      std::vector<int32_t> table(size_t(B) * size_t(stride));
      const int64_t shared_pages = s.shared / s.page;
      for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < stride; ++i)
          table[size_t(b) * size_t(stride) + size_t(i)] =
              int32_t(i < shared_pages ? i : shared_pages + int64_t(b) * stride + i);
      const int given_shared = s.shared / s.page * s.page;  // whole pages
      const rt::PrefixGroup group{0, B, given_shared};
      std::vector<int> lens(s.lens);
      auto set_step = [&](int step) {
        for (int b = 0; b < B; ++b) lens[size_t(b)] = s.lens[size_t(b)] + step;
      };

      // The C API, as a serving engine calls it.
      std::vector<double> t_api;
      size_t api_allocations = 0;
      nlohmann::json described = nlohmann::json::object();
      if (!planner_only) {
        auto& api = apis[s.target];
        if (!api) {
          api = std::make_unique<Api>();
          check(mla_device_open(MLA_BACKEND_EMULATOR, 0, rt::name(s.target), &api->dev), "mla_device_open");
          check(mla_context_create(api->dev, catalog.c_str(), &api->ctx), "mla_context_create");
        }
        check(mla_context_set_option(api->ctx, MLA_OPTION_NUM_CUS, s.cus), "mla_context_set_option");
        const mla_shape shape{s.q_bf16 ? MLA_DTYPE_BF16 : MLA_DTYPE_FP8, MLA_DTYPE_FP8, s.heads, 1, s.page, 0, 0};
        mla_selection sel;
        check(mla_select(api->ctx, &shape, MLA_SELECT_EXACT, &sel), "mla_select");
        mla_plan* plan = nullptr;
        check(mla_plan_create(api->ctx, &sel, B, 0, &plan), "mla_plan_create");
        std::unique_ptr<mla_plan, void (*)(mla_plan*)> plan_owner(plan, mla_plan_destroy);
        const mla_prefix_group cgroup{group.first, group.count, group.shared_tokens};
        auto update = [&] {
          mla_status st = s.groups == Groups::none ? mla_plan_update(api->ctx, plan, lens.data(), B, int32_t(stride))
                          : s.groups == Groups::given
                              ? mla_plan_update_shared(api->ctx, plan, lens.data(), B, int32_t(stride), nullptr, &cgroup, 1)
                              : mla_plan_update_shared(api->ctx, plan, lens.data(), B, int32_t(stride), table.data(),
                                                       nullptr, 0);
          check(st, "mla_plan_update");
        };
        t_api.reserve(size_t(steps));
        for (int step = 0; step < warmup + steps; ++step) {
          set_step(step);
          mla::alloc_count::allocations = 0;
          mla::alloc_count::counting = step >= warmup;
          const auto t0 = Clock::now();
          update();
          const double us = us_since(t0);
          mla::alloc_count::counting = false;
          api_allocations += mla::alloc_count::allocations;
          if (step >= warmup) t_api.push_back(us);
        }
        set_step(0);
        update();
        described = nlohmann::json::parse(mla_plan_describe_json(plan));
      }

      // The planner alone on the runtime's inputs for these kernels, into storage reused across
      // steps: detection (when the page table is searched) and plan_decode, which checks the groups.
      rt::PlanInputs in = rt::plan_inputs_for(k, lens, s.cus, 0);
      const rt::WorkspaceLayout ws = rt::workspace_layout(k, B, 0, s.cus);
      in.max_units = int64_t(ws.max_units);
      in.max_partials = int64_t(ws.max_partials);
      in.kv_lens = std::span<const int>(lens);
      std::vector<rt::PrefixGroup> groups;
      if (s.groups == Groups::given) groups.push_back(group);
      in.prefix_groups = std::span<const rt::PrefixGroup>(groups);
      rt::PlanScratch scratch;
      rt::Plan out;
      auto plan_step = [&] {
        if (s.groups == Groups::detected) {
          rt::detect_prefix_groups(in.kv_lens, s.page, 1, in.tile_tokens, rt::PageTableView{table.data(), stride}, groups);
          in.prefix_groups = std::span<const rt::PrefixGroup>(groups);
        }
        rt::plan_decode(in, out, scratch);
      };
      std::vector<double> t_plan;
      t_plan.reserve(size_t(steps));
      size_t plan_allocations = 0;
      for (int step = 0; step < warmup + steps; ++step) {
        set_step(step);
        mla::alloc_count::allocations = 0;
        mla::alloc_count::counting = step >= warmup;
        const auto t0 = Clock::now();
        plan_step();
        const double us = us_since(t0);
        mla::alloc_count::counting = false;
        plan_allocations += mla::alloc_count::allocations;
        if (step >= warmup) t_plan.push_back(us);
      }
      set_step(0);
      plan_step();

      const Stats a = stats(t_api), p = stats(t_plan);
      const bool cascade = !out.prefix_groups.empty() && out.prefix_groups[0].cascade;
      const double factor = a.median / s.target_us;
      over = over || (max_factor > 0 && factor > max_factor);
      fmt::print("{:<28} {:>5} {:>6.0f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>8.2f} {:>14.3f} {:>7} {:>5}/{:<5}\n", s.name, B,
                 s.target_us, a.median, a.p90, p.median, p.p90, factor, out.predicted_cost,
                 out.prefix_groups.empty() ? "-" : cascade ? "yes" : "no", api_allocations, plan_allocations);
      std::fflush(stdout);
      results.push_back({{"name", s.name},
                         {"target", rt::name(s.target)},
                         {"heads", s.heads},
                         {"page_size", s.page},
                         {"num_cus", s.cus},
                         {"batch", B},
                         {"kv_len_0", s.lens[0]},
                         {"groups", s.groups == Groups::none ? "none" : s.groups == Groups::given ? "given" : "detected"},
                         {"target_us", s.target_us},
                         {"capi_median_us", a.median},
                         {"capi_p90_us", a.p90},
                         {"planner_median_us", p.median},
                         {"planner_p90_us", p.p90},
                         {"steps", std::max(a.n, p.n)},
                         {"capi_allocations", api_allocations},
                         {"planner_allocations", plan_allocations},
                         {"predicted_cost", out.predicted_cost},
                         {"capi_predicted_cost", described.value("predicted_cost_tokens", 0.0)},
                         {"units", out.units.size()},
                         {"prefix_units", out.prefix_units.size()},
                         {"cascade", cascade}});
    }
    if (!json_path.empty()) {
      const nlohmann::json j{{"steps", steps}, {"shapes", results}};
      if (json_path == "-") {
        fmt::print("{}\n", j.dump(1));
      } else {
        std::ofstream f(json_path);
        f << j.dump(1) << "\n";
      }
    }
    if (over) {
      fmt::print(stderr, "mlaplanbench: a shape's C-API median exceeds {}x its target\n", max_factor);
      return 1;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlaplanbench: {}\n", e.what());
    return 2;
  }
  return 0;
}
