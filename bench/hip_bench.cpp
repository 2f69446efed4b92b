// Hardware mode: times the shapes on an AMD GPU through the runtime's C API (HIP backend).
// Without a GPU (or without HIP) it fails with a clear message; nothing is timed here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/bench.h"
#include "runtime/mla_runtime.h"

namespace mla::bench {

namespace {
void check(mla_status s, const char* what) {
  if (s != MLA_SUCCESS)
    throw std::runtime_error(fmt::format("mlabench --backend hip: {} failed: {} ({})", what, mla_status_name(s),
                                         mla_last_error()));
}
struct InputSet {
  uint64_t q = 0, kv = 0, idx = 0, o = 0;
};
}  // namespace

nlohmann::json hip_bench(const std::vector<BenchShape>& shapes, const HipOptions& o, std::string& table) {
  if (o.runs < 100) throw std::invalid_argument("mlabench --backend hip: --runs must be >= 100");
  mla_device* dev = nullptr;
  if (mla_device_open(MLA_BACKEND_HIP, 0, nullptr, &dev) != MLA_SUCCESS)
    throw std::runtime_error(fmt::format(
        "mlabench --backend hip: no AMD GPU available ({}). Hardware timing needs an MI300X (gfx942) or MI355X "
        "(gfx950); nothing was timed. Without hardware use the default emulator backend (measured counters + "
        "modeled times).",
        mla_last_error()));
  mla_device_info info{};
  check(mla_device_get_info(dev, &info), "mla_device_get_info");
  const Machine m = machine_for(std::string(info.target) == "gfx950" ? rt::Target::gfx950 : rt::Target::gfx942);
  nlohmann::json out = nlohmann::json::array();
  table = "| shape | median us (measured) | TB/s | % of HBM datasheet peak | % of the model's achievable ceiling |\n|---|---|---|---|---|\n";
  std::mt19937_64 rng(1);
  for (const auto& bs : shapes) {
    if (std::string(rt::name(bs.shape.target)) != info.target) continue;
    const std::string dir = o.catalog_dir.empty() ? catalog_for(bs.shape).dir() : o.catalog_dir;
    mla_context* ctx = nullptr;
    check(mla_context_create(dev, dir.c_str(), &ctx), "mla_context_create");
    mla_shape sh{};
    sh.q_dtype = bs.shape.q_dtype == rt::DType::fp8 ? MLA_DTYPE_FP8 : MLA_DTYPE_BF16;
    sh.kv_dtype = bs.shape.kv_dtype == rt::DType::fp8 ? MLA_DTYPE_FP8 : MLA_DTYPE_BF16;
    sh.heads = bs.shape.heads;
    sh.qseqlen = bs.shape.qseqlen;
    sh.page_size = bs.shape.page_size;
    mla_selection sel{};
    check(mla_select(ctx, &sh, MLA_SELECT_EXACT, &sel), "mla_select");
    const int batch = int(bs.kv_lens.size());
    mla_plan* plan = nullptr;
    check(mla_plan_create(ctx, &sel, batch, bs.total_tokens(), &plan), "mla_plan_create");
    check(mla_plan_update(ctx, plan, bs.kv_lens.data(), batch, 0), "mla_plan_update");
    size_t ws_bytes = 0;
    check(mla_plan_workspace_size(plan, &ws_bytes), "mla_plan_workspace_size");
    uint64_t ws = 0;
    check(mla_malloc(dev, ws_bytes, &ws), "mla_malloc workspace");
    check(mla_plan_upload(ctx, plan, ws, ws_bytes, 1.0f, 1.0f, nullptr), "mla_plan_upload");
    // Inputs rotated over enough copies that the working set exceeds 2x the last-level cache
    // (256 MiB), so the caches do not flatter.
    const size_t kvb = bs.shape.kv_dtype == rt::DType::fp8 ? 1 : 2, qb = bs.shape.q_dtype == rt::DType::fp8 ? 1 : 2;
    std::vector<int32_t> idx;
    for (int len : bs.kv_lens)
      for (int p = 0; p < (len + bs.shape.page_size - 1) / bs.shape.page_size; ++p) idx.push_back(int32_t(idx.size()));
    const size_t pages = idx.size(), rows = size_t(batch) * bs.shape.qseqlen;
    const size_t kv_bytes = pages * bs.shape.page_size * 576 * kvb, q_bytes = rows * bs.shape.heads * 576 * qb;
    const size_t o_bytes = rows * bs.shape.heads * 512 * 2;
    const int sets = o.rotate > 0 ? o.rotate : std::max(2, int(std::ceil(2.0 * 256 * 1024 * 1024 / double(kv_bytes))) + 1);
    std::vector<InputSet> in(static_cast<size_t>(sets));
    std::vector<uint8_t> host(std::max(kv_bytes, q_bytes));
    for (auto& s : in) {
      for (auto& b : host) b = uint8_t(rng() & 0x3f);  // small finite values in both fp8 and bf16
      check(mla_malloc(dev, kv_bytes, &s.kv), "mla_malloc kv");
      check(mla_memcpy_h2d(dev, s.kv, host.data(), kv_bytes), "copy kv");
      check(mla_malloc(dev, q_bytes, &s.q), "mla_malloc q");
      check(mla_memcpy_h2d(dev, s.q, host.data(), q_bytes), "copy q");
      check(mla_malloc(dev, idx.size() * 4, &s.idx), "mla_malloc kv_indices");
      check(mla_memcpy_h2d(dev, s.idx, idx.data(), idx.size() * 4), "copy kv_indices");
      check(mla_malloc(dev, o_bytes, &s.o), "mla_malloc o");
    }
    auto args_for = [&](const InputSet& s) {
      mla_decode_args a{};
      a.q = s.q;
      a.kv = s.kv;
      a.num_pages = int64_t(pages);
      a.kv_indices = s.idx;
      a.o = s.o;
      a.sm_scale = 0.07216878364870322f;
      a.q_scale = a.kv_scale = 1.0f;
      return a;
    };
    for (int i = 0; i < o.warmup; ++i) {
      auto a = args_for(in[size_t(i) % in.size()]);
      check(mla_decode(ctx, plan, &a, ws, ws_bytes, nullptr), "mla_decode");
    }
    check(mla_stream_synchronize(dev, nullptr), "synchronize");
    std::vector<double> us;
    for (int i = 0; i < o.runs; ++i) {
      auto a = args_for(in[size_t(i) % in.size()]);
      auto t0 = std::chrono::steady_clock::now();
      check(mla_decode(ctx, plan, &a, ws, ws_bytes, nullptr), "mla_decode");
      check(mla_stream_synchronize(dev, nullptr), "synchronize");
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2];
    const double min_bytes = double(bs.total_tokens()) * 576 * kvb + double(idx.size()) * 4 + double(q_bytes + o_bytes);
    const double tbps = min_bytes / (med * 1e-6) / 1e12;
    table += fmt::format("| {} | {:.2f} | {:.2f} | {:.1f}% | {:.1f}% |\n", bs.name, med, tbps, 100 * tbps * 1e12 / m.hbm_peak_bytes_per_s,
                         100 * tbps * 1e12 / m.hbm_bytes_per_s);
    out.push_back({{"name", bs.name}, {"median_us", med}, {"runs", o.runs}, {"warmup", o.warmup},
                   {"input_sets", sets}, {"tbps", tbps}, {"pct_hbm_peak", 100 * tbps * 1e12 / m.hbm_peak_bytes_per_s},
                   {"pct_hbm_achievable", 100 * tbps * 1e12 / m.hbm_bytes_per_s},
                   {"timing", "host clock around mla_decode + stream synchronize (includes launch overhead)"}});
    for (auto& s : in) {
      mla_free(dev, s.kv);
      mla_free(dev, s.q);
      mla_free(dev, s.idx);
      mla_free(dev, s.o);
    }
    mla_free(dev, ws);
    mla_plan_destroy(plan);
    mla_context_destroy(ctx);
  }
  mla_device_close(dev);
  return out;
}

}  // namespace mla::bench
