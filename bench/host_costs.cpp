// mlabench's host costs (issue #31 item 8): what a serving step costs the host, measured through
// the C API on the emulator device with each shape's catalog (docs/serving-runtime.md).
//
// Per shape: mla_plan_update (and, for a shape with a shared prefix, mla_plan_update_shared with
// the caller's group and with detection from a host page table), step after step with every
// request one token longer, as decode grows them; mla_plan_upload and its bytes; the runtime's
// host work per mla_decode call (argument checks and kernarg packing: decode_ops_of, everything
// mla_decode does but hand the launches to the backend, whose HIP enqueue is not measured here);
// the launches per layer; and the Python layer (bench/python_host_cost.py, run by mlabench).
// Medians of wall-clock microseconds on this machine: measured, not modeled.
#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/bench.h"
#include "runtime/backend.h"
#include "runtime/mla_runtime.h"
#include "runtime/mla_runtime_internal.h"

namespace mla::bench {

namespace {

using Clock = std::chrono::steady_clock;

void check(mla_status s, const char* what) {
  if (s != MLA_SUCCESS)
    throw std::runtime_error(fmt::format("mlabench host costs: {}: {} ({})", what, mla_last_error(), mla_status_name(s)));
}


mla_dtype c_dtype(rt::DType d) { return d == rt::DType::bf16 ? MLA_DTYPE_BF16 : MLA_DTYPE_FP8; }

}  // namespace

std::vector<BenchShape> host_cost_shapes(const std::vector<BenchShape>& measured) {
  std::vector<BenchShape> v = measured;
  // Issue #31's large batches: 64 and 256 requests of 8K tokens on both seeds' kernels.
  for (int batch : {64, 256})
    for (const BenchShape& like : {seed001_shapes().front(), seed000_shapes().back()}) {
      BenchShape s = like;
      s.name = fmt::format("{} 8K x{}", like.set == "seed-001" ? "seed001" : "K3 pg128", batch);
      s.set = "host";
      s.kv_lens.assign(size_t(batch), 8192);
      s.concurrency = batch;
      s.shared.reset();
      s.pub_aiter_us.reset();
      s.pub_ours_us.reset();
      v.push_back(s);
    }
  return v;
}

std::vector<HostCost> measure_host_costs(const std::vector<BenchShape>& shapes, int steps) {
  std::vector<HostCost> out;
  for (const BenchShape& bs : shapes) {
    const rt::DecodeShape& s = bs.shape;
    const std::string dir = catalog_for(s).dir();
    mla_device* dev = nullptr;
    check(mla_device_open(MLA_BACKEND_EMULATOR, 0, std::string(rt::name(s.target)).c_str(), &dev), "mla_device_open");
    std::unique_ptr<mla_device, void (*)(mla_device*)> dev_owner(dev, mla_device_close);
    mla_context* ctx = nullptr;
    check(mla_context_create(dev, dir.c_str(), &ctx), "mla_context_create");
    std::unique_ptr<mla_context, void (*)(mla_context*)> ctx_owner(ctx, mla_context_destroy);
    const mla_shape shape{c_dtype(s.q_dtype), c_dtype(s.kv_dtype), s.heads, s.qseqlen, s.page_size, 0, 0};
    mla_selection sel;
    check(mla_select(ctx, &shape, MLA_SELECT_EXACT, &sel), "mla_select");
    const int B = int(bs.kv_lens.size());
    mla_plan* plan = nullptr;
    check(mla_plan_create(ctx, &sel, B, 0, &plan), "mla_plan_create");
    std::unique_ptr<mla_plan, void (*)(mla_plan*)> plan_owner(plan, mla_plan_destroy);
    size_t ws_bytes = 0;
    check(mla_plan_workspace_size(plan, &ws_bytes), "mla_plan_workspace_size");
    uint64_t ws = 0;
    check(mla_malloc(dev, ws_bytes, &ws), "mla_malloc workspace");

    HostCost h;
    h.name = bs.name;
    h.batch = B;
    h.total_tokens = bs.total_tokens();
    std::vector<int32_t> lens(bs.kv_lens.begin(), bs.kv_lens.end());
    auto step_lens = [&](int step) {
      for (int b = 0; b < B; ++b) lens[size_t(b)] = bs.kv_lens[size_t(b)] + step;
    };
    const int warmup = 5;
    h.update_us = median_us(warmup, steps, [&](int i) {
      step_lens(i);
      check(mla_plan_update(ctx, plan, lens.data(), B, 0), "mla_plan_update");
    });
    if (bs.shared) {
      // A vLLM-style block table whose rows begin with the group's shared pages.
      const int P = s.page_size;
      const int64_t stride = (*std::max_element(bs.kv_lens.begin(), bs.kv_lens.end()) + warmup + steps + P) / P;
      const int64_t shared_pages = bs.shared->shared_tokens / P;
      std::vector<int32_t> table(size_t(B) * size_t(stride));
      for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < stride; ++i)
          table[size_t(b) * size_t(stride) + size_t(i)] = int32_t(i < shared_pages ? i : shared_pages + b * stride + i);
      const mla_prefix_group g{bs.shared->first, bs.shared->count, bs.shared->shared_tokens};
      h.update_given_us = median_us(warmup, steps, [&](int i) {
        step_lens(i);
        check(mla_plan_update_shared(ctx, plan, lens.data(), B, int32_t(stride), nullptr, &g, 1),
              "mla_plan_update_shared (given)");
      });
      h.update_detected_us = median_us(warmup, steps, [&](int i) {
        step_lens(i);
        check(mla_plan_update_shared(ctx, plan, lens.data(), B, int32_t(stride), table.data(), nullptr, 0),
              "mla_plan_update_shared (detected)");
      });
      h.cascade = std::string(mla_plan_describe_json(plan)).find("\"cascade\":true") != std::string::npos;
    }
    h.upload_us = median_us(warmup, steps, [&](int) {
      check(mla_plan_upload(ctx, plan, ws, ws_bytes, 1.0f, 1.0f, nullptr), "mla_plan_upload");
    });
    mla_plan_info info;
    check(mla_plan_get_info(plan, &info), "mla_plan_get_info");
    h.upload_bytes = info.upload_bytes;
    h.launches = info.num_launches;
    h.decode_grid = info.decode_grid[0];
    // The decode call's host work, on stand-in tensors (nothing is launched).
    mla_decode_args a{};
    a.q = a.kv = a.kv_indices = a.o = ws;
    a.num_pages = 1;
    a.sm_scale = 0.0721f;
    a.q_scale = a.kv_scale = 1.0f;
    size_t ops = 0;
    h.decode_host_us = median_us(warmup, steps * 4, [&](int) { ops = rt::decode_ops_of(ctx, plan, &a, ws).size(); });
    if (int(ops) != h.launches) throw std::runtime_error(fmt::format("{}: {} operations, {} launches", bs.name, ops, h.launches));
    out.push_back(h);
  }
  return out;
}

nlohmann::json HostCost::to_json() const {
  nlohmann::json j{{"name", name},
                   {"batch", batch},
                   {"total_tokens", total_tokens},
                   {"plan_update_us", update_us},
                   {"upload_us", upload_us},
                   {"upload_bytes", upload_bytes},
                   {"decode_host_us_c", decode_host_us},
                   {"launches_per_layer", launches},
                   {"decode_grid", decode_grid}};
  if (update_given_us > 0) j["plan_update_shared_given_us"] = update_given_us, j["cascade"] = cascade;
  if (update_detected_us > 0) j["plan_update_shared_detected_us"] = update_detected_us;
  if (python_update_us > 0) j["python_update_us"] = python_update_us;
  if (python_decode_us > 0) j["python_decode_us"] = python_decode_us;
  if (python_update_over_c_us > 0) j["python_update_over_c_us"] = python_update_over_c_us;
  if (python_decode_gpu_us > 0) j["python_decode_gpu_us"] = python_decode_gpu_us;
  return j;
}

std::string host_costs_markdown(const std::vector<HostCost>& v) {
  auto us = [](double x) { return x > 0 ? fmt::format("{:.1f}", x) : std::string("-"); };
  std::string t =
      "### Host costs (measured on this machine, median us; issue #31)\n\n"
      "| shape | batch | plan update | update, group given | update, group detected | upload (bytes) | "
      "mla_decode host, C | Python update (over the C calls) | Python decode: host arrays / GPU path | launches / layer "
      "| decode grid |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const HostCost& h : v)
    t += fmt::format("| {} | {} | {} | {} | {} | {} ({}) | {} | {} ({}) | {} / {} | {} | {} |\n", h.name, h.batch,
                     us(h.update_us), us(h.update_given_us), us(h.update_detected_us), us(h.upload_us), h.upload_bytes,
                     us(h.decode_host_us), us(h.python_update_us), us(h.python_update_over_c_us), us(h.python_decode_us),
                     us(h.python_decode_gpu_us), h.launches, h.decode_grid);
  t += "\nplan update: `mla_plan_update`, every request one token longer each step; upload: `mla_plan_upload` "
       "(on the emulator a host copy into its memory; on HIP one async copy from page-locked memory); "
       "mla_decode host, C: the runtime's checks and kernarg packing per layer (the HIP runtime's own launch "
       "enqueue not included); Python: `MlaDecodeMetadata.update()` and `mla_decode_fwd(..., metadata=)` with the "
       "C decode and copies stubbed (bench/python_host_cost.py): in parentheses update()'s own cost over its two C "
       "calls; the decode on host arrays (the emulator's path: it scans fp8 q for NaN bytes and stages) and on the path "
       "a GPU tensor takes (data_ptr()s, no scan).\n";
  return t;
}

}  // namespace mla::bench
