// mlacheck (bench/check.h): every decode kernel of a catalog on one device, against the fp64
// reference, the emulator, the model and (when it imports) aiter.
#include "bench/check.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/bench.h"
#include "catalog/compile.h"  // gen::sha256_file
#include "codeobj/tools.h"    // gen::run_tool
#include "runtime/catalog.h"
#include "runtime/mla_runtime.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

namespace mla::bench {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// MI300X and MI355X both have a 256 MB Infinity Cache (the last-level cache): the timed inputs
// rotate over enough copies that two passes of them exceed it.
constexpr double kLlcBytes = 256.0 * 1024 * 1024;

void check_call(mla_status s, const std::string& what) {
  if (s != MLA_SUCCESS)
    throw std::runtime_error(fmt::format("mlacheck: {} failed: {} ({})", what, mla_status_name(s), mla_last_error()));
}

struct Device {
  mla_device* dev = nullptr;
  mla_context* ctx = nullptr;
  mla_device_info info{};
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() {
    mla_context_destroy(ctx);
    mla_device_close(dev);
  }
};

// Device memory freed when the scope ends.
struct Buffer {
  mla_device* dev = nullptr;
  uint64_t ptr = 0;
  size_t bytes = 0;
  Buffer(mla_device* d, size_t n, const std::string& what) : dev(d), bytes(n) {
    check_call(mla_malloc(dev, std::max<size_t>(n, 4), &ptr), fmt::format("mla_malloc {} ({} bytes)", what, n));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (ptr) mla_free(dev, ptr);
  }
  void upload(const void* src, size_t n, const std::string& what) {
    check_call(mla_memcpy_h2d(dev, ptr, src, n), "copy " + what + " to the device");
  }
};

struct Plan {
  mla_plan* plan = nullptr;
  ~Plan() { mla_plan_destroy(plan); }
};

rt::Target target_of(const std::string& t) { return rt::parse_target(t, "target"); }

rt::DecodeShape shape_of_kernel(const rt::CatalogKernel& k) {
  rt::DecodeShape s;
  s.target = target_of(k.target);
  s.q_dtype = rt::parse_dtype(k.shape.at("q_dtype").get<std::string>(), "q_dtype");
  s.kv_dtype = rt::parse_dtype(k.shape.at("kv_dtype").get<std::string>(), "kv_dtype");
  s.heads = k.shape.at("heads").get<int>();
  s.qseqlen = k.shape.at("qseqlen").get<int>();
  s.page_size = k.shape.at("page_size").get<int>();
  s.return_lse = k.shape.value("return_lse", false);
  s.logit_cap = k.shape.value("logit_cap", false);
  return s;
}

mla_shape api_shape(const rt::DecodeShape& s) {
  mla_shape sh{};
  sh.q_dtype = s.q_dtype == rt::DType::fp8 ? MLA_DTYPE_FP8 : MLA_DTYPE_BF16;
  sh.kv_dtype = s.kv_dtype == rt::DType::fp8 ? MLA_DTYPE_FP8 : MLA_DTYPE_BF16;
  sh.heads = s.heads;
  sh.qseqlen = s.qseqlen;
  sh.page_size = s.page_size;
  sh.return_lse = s.return_lse ? 1 : 0;
  sh.logit_cap = s.logit_cap ? 1 : 0;
  return sh;
}

// A problem as the C API runs it: the reference's problem (requests with KV) and the API's batch,
// which may hold empty requests (kv_len 0) between them.
struct CheckProblem {
  std::string label;
  rt::Problem p;
  std::vector<int32_t> api_lens;     // the batch given to mla_plan_update
  std::vector<int> api_to_problem;   // request of p, or -1 for an empty request
  std::vector<mla_prefix_group> groups;
  std::vector<uint8_t> q_bytes;      // [api rows, heads, 576]
  std::vector<int32_t> kv_indices;   // packed, API order
};

// The plan's workspace, with the step's tables and the problem's scales uploaded into it.
std::unique_ptr<Buffer> upload_plan(const Device& d, const Plan& plan, const CheckProblem& c) {
  size_t ws_bytes = 0;
  check_call(mla_plan_workspace_size(plan.plan, &ws_bytes), "mla_plan_workspace_size");
  auto ws = std::make_unique<Buffer>(d.dev, ws_bytes, "workspace");
  check_call(mla_plan_upload(d.ctx, plan.plan, ws->ptr, ws_bytes, float(c.p.q_scale), float(c.p.kv_scale), nullptr),
             "mla_plan_upload");
  return ws;
}

CheckProblem make_check_problem(const std::string& label, const rt::DecodeShape& s, const std::vector<int>& lens,
                                const std::vector<int>& empty_before, const std::vector<rt::ProblemParams::Shared>& shared,
                                uint64_t seed) {
  rt::ProblemParams pp = problem_params(s, lens, seed, shared);
  pp.logit_cap = s.logit_cap ? 30.0 : 0.0;
  if (s.q_dtype == rt::DType::fp8 && s.kv_dtype == rt::DType::fp8) pp.q_scale = 0.75, pp.kv_scale = 1.5;
  pp.extra_pages = 3;
  CheckProblem c;
  c.label = label;
  c.p = rt::make_random_problem(pp);
  const size_t row_bytes = size_t(s.heads) * rt::kQkDim * rt::elem_bytes(s.q_dtype);
  auto add_empty = [&] {
    c.api_lens.push_back(0);
    c.api_to_problem.push_back(-1);
    // The empty request's q rows: values of the same kind (copied from the problem's first row), never read.
    for (int r = 0; r < s.qseqlen; ++r)
      c.q_bytes.insert(c.q_bytes.end(), c.p.q.bytes.begin(), c.p.q.bytes.begin() + long(row_bytes));
  };
  for (int b = 0; b < c.p.batch(); ++b) {
    for (int e : empty_before)
      if (e == b) add_empty();
    c.api_lens.push_back(c.p.kv_len(b));
    c.api_to_problem.push_back(b);
    const size_t at = size_t(b) * s.qseqlen * row_bytes;
    c.q_bytes.insert(c.q_bytes.end(), c.p.q.bytes.begin() + long(at), c.p.q.bytes.begin() + long(at + s.qseqlen * row_bytes));
    for (int pg = c.p.kv_indptr[b]; pg < c.p.kv_indptr[b + 1]; ++pg) c.kv_indices.push_back(c.p.kv_indices[size_t(pg)]);
  }
  for (int e : empty_before)
    if (e >= c.p.batch()) add_empty();
  for (const auto& sh : shared) {
    // The group's requests in API order (no empty request inside a group here).
    int first = -1;
    for (size_t i = 0; i < c.api_to_problem.size(); ++i)
      if (c.api_to_problem[i] == sh.first) first = int(i);
    c.groups.push_back({first, sh.count, sh.tokens});
  }
  return c;
}

struct RunOutput {
  std::vector<uint16_t> o;  // [api rows, heads, 512] bf16 bits
  std::vector<float> lse;   // [api rows, heads] (return_lse)
  mla_plan_info info{};
  json prefix_groups;       // the planner's decision on each group (mla_plan_describe_json)
};

// One decode of the problem on a device through the C API: outputs poisoned first (o 0xFFFF,
// lse NaN), cascade policy `always` when the problem has groups (every group the kernels can cascade).
RunOutput run_on(Device& d, const mla_selection& sel, const rt::DecodeShape& s, const CheckProblem& c) {
  const int batch = int(c.api_lens.size());
  int64_t tokens = 0;
  for (int l : c.api_lens) tokens += l;
  check_call(mla_context_set_option(d.ctx, MLA_OPTION_CASCADE, c.groups.empty() ? 0 : 1), "mla_context_set_option CASCADE");
  Plan plan;
  check_call(mla_plan_create(d.ctx, &sel, batch, std::max<int64_t>(tokens, 1), &plan.plan), "mla_plan_create");
  if (c.groups.empty())
    check_call(mla_plan_update(d.ctx, plan.plan, c.api_lens.data(), batch, 0), "mla_plan_update");
  else
    check_call(mla_plan_update_shared(d.ctx, plan.plan, c.api_lens.data(), batch, 0, nullptr, c.groups.data(),
                                      int(c.groups.size())),
               "mla_plan_update_shared");
  const auto ws = upload_plan(d, plan, c);
  const size_t rows = size_t(batch) * s.qseqlen;
  Buffer q(d.dev, c.q_bytes.size(), "q"), kv(d.dev, c.p.kv.bytes.size(), "kv");
  Buffer idx(d.dev, c.kv_indices.size() * 4, "kv_indices");
  Buffer o(d.dev, rows * s.heads * rt::kVDim * 2, "o"), lse(d.dev, rows * s.heads * 4, "lse");
  q.upload(c.q_bytes.data(), c.q_bytes.size(), "q");
  kv.upload(c.p.kv.bytes.data(), c.p.kv.bytes.size(), "kv");
  if (!c.kv_indices.empty()) idx.upload(c.kv_indices.data(), c.kv_indices.size() * 4, "kv_indices");
  check_call(mla_memset(d.dev, o.ptr, 0xFF, o.bytes), "poison o");
  check_call(mla_memset(d.dev, lse.ptr, 0xFF, lse.bytes), "poison lse");
  mla_decode_args a{};
  a.q = q.ptr;
  a.kv = kv.ptr;
  a.num_pages = c.p.num_pages();
  a.kv_indices = idx.ptr;
  a.o = o.ptr;
  a.lse = s.return_lse ? lse.ptr : 0;
  a.sm_scale = float(c.p.sm_scale);
  a.q_scale = float(c.p.q_scale);
  a.kv_scale = float(c.p.kv_scale);
  a.logit_cap = float(c.p.logit_cap);
  check_call(mla_decode(d.ctx, plan.plan, &a, ws->ptr, ws->bytes, nullptr), "mla_decode");
  check_call(mla_stream_synchronize(d.dev, nullptr), "mla_stream_synchronize");
  RunOutput r;
  r.o.resize(rows * s.heads * rt::kVDim);
  check_call(mla_memcpy_d2h(d.dev, r.o.data(), o.ptr, o.bytes), "copy o back");
  if (s.return_lse) {
    r.lse.resize(rows * s.heads);
    check_call(mla_memcpy_d2h(d.dev, r.lse.data(), lse.ptr, lse.bytes), "copy lse back");
  }
  check_call(mla_plan_get_info(plan.plan, &r.info), "mla_plan_get_info");
  if (!c.groups.empty())
    if (const char* js = mla_plan_describe_json(plan.plan)) r.prefix_groups = json::parse(js).value("prefix_groups", json::array());
  return r;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Thresholds of the project's accuracy tests (tests/integration): bf16 q d <= 1e-5, max error
// <= 1e-2 max|ref|, lse within 1e-3; fp8 q d <= 3e-3, max error <= 5e-2 max|ref|, lse within
// 0.0625 with fp8 P (its row sum adds the fp8-rounded P), else 1e-2.
struct Tolerance {
  double d, rel, lse;
};
Tolerance tolerance_for(const rt::DecodeShape& s) {
  const bool bf16_q = s.q_dtype == rt::DType::bf16;
  const bool fp8_p = s.q_dtype == rt::DType::fp8 && s.kv_dtype == rt::DType::fp8;
  return {bf16_q ? 1e-5 : 3e-3, bf16_q ? 1e-2 : 5e-2, bf16_q ? 1e-3 : fp8_p ? 0.0625 : 1e-2};
}

// The reference comparison of one run: the problem's rows against run_reference, the empty
// requests' rows against o = 0, lse = -inf.
json compare_with_reference(const rt::DecodeShape& s, const CheckProblem& c, const RunOutput& r, bool& pass) {
  const size_t row_o = size_t(s.heads) * rt::kVDim, row_l = size_t(s.heads);
  std::vector<uint16_t> o;
  std::vector<float> lse;
  size_t empty_bad = 0, empty_rows = 0;
  for (size_t i = 0; i < c.api_to_problem.size(); ++i)
    for (int row = 0; row < s.qseqlen; ++row) {
      const size_t api_row = i * s.qseqlen + size_t(row);
      if (c.api_to_problem[i] >= 0) {
        o.insert(o.end(), r.o.begin() + long(api_row * row_o), r.o.begin() + long((api_row + 1) * row_o));
        if (s.return_lse)
          lse.insert(lse.end(), r.lse.begin() + long(api_row * row_l), r.lse.begin() + long((api_row + 1) * row_l));
      } else {
        ++empty_rows;
        for (size_t k = 0; k < row_o; ++k) {
          const uint16_t b = r.o[api_row * row_o + k];
          if (b != 0x0000 && b != 0x8000) ++empty_bad;
        }
        if (s.return_lse)
          for (size_t k = 0; k < row_l; ++k) {
            const float v = r.lse[api_row * row_l + k];
            if (!(std::isinf(v) && v < 0)) ++empty_bad;
          }
      }
    }
  const ref::Reference want = ref::run_reference(c.p);
  const ref::Compare cmp = ref::compare(want, o, s.return_lse ? &lse : nullptr);
  const Tolerance t = tolerance_for(s);
  pass = cmp.passes(t.d, t.rel, t.lse) && empty_bad == 0;
  json j{{"d", cmp.d},
         {"max_abs_err", cmp.max_abs_err},
         {"max_abs_ref", cmp.max_abs_ref},
         {"max_rel_err", cmp.max_abs_ref > 0 ? cmp.max_abs_err / cmp.max_abs_ref : 0.0},
         {"unwritten", cmp.unwritten},
         {"nonfinite", cmp.nonfinite},
         {"empty_request_rows", empty_rows},
         {"empty_request_values_not_zero_or_minus_inf", empty_bad},
         {"tolerance", {{"d", t.d}, {"max_rel_err", t.rel}, {"lse_abs", t.lse}}},
         {"summary", cmp.summary()},
         {"pass", pass}};
  if (cmp.lse_checked) j["lse_max_abs_err"] = cmp.lse_max_abs_err;
  return j;
}

// The device's output against the emulator's for the same code objects and inputs.
json compare_outputs(const RunOutput& dev, const RunOutput& emu) {
  size_t differ = 0;
  double max_diff = 0;
  for (size_t i = 0; i < dev.o.size(); ++i)
    if (dev.o[i] != emu.o[i]) {
      ++differ;
      const double a = bf16_to_float(dev.o[i]), b = bf16_to_float(emu.o[i]);
      max_diff = std::max(max_diff, std::isfinite(a) && std::isfinite(b) ? std::fabs(a - b) : INFINITY);
    }
  double lse_diff = 0;
  size_t lse_differ = 0;
  for (size_t i = 0; i < dev.lse.size(); ++i)
    if (std::memcmp(&dev.lse[i], &emu.lse[i], 4) != 0) {
      ++lse_differ;
      const double a = dev.lse[i], b = emu.lse[i];
      lse_diff = std::max(lse_diff, std::isfinite(a) && std::isfinite(b) ? std::fabs(a - b) : INFINITY);
    }
  json j{{"o_elements", dev.o.size()}, {"o_elements_differing", differ}, {"o_max_abs_diff", max_diff}};
  if (!dev.lse.empty()) j.update({{"lse_differing", lse_differ}, {"lse_max_abs_diff", lse_diff}});
  return j;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Times the decode of `lens` (no empty request): `sets` copies of q / kv / o rotated, warm-up,
// then `runs` timed calls, each the host clock around mla_decode + mla_stream_synchronize.
json time_kernel(Device& d, const mla_selection& sel, const rt::DecodeShape& s, const std::vector<int>& lens, int runs,
                 int warmup, int rotate, bool on_hardware, uint64_t seed) {
  CheckProblem c = make_check_problem("timed", s, lens, {}, {}, seed);
  const int batch = int(lens.size());
  int64_t tokens = 0;
  for (int l : lens) tokens += l;
  check_call(mla_context_set_option(d.ctx, MLA_OPTION_CASCADE, 0), "mla_context_set_option CASCADE");
  Plan plan;
  check_call(mla_plan_create(d.ctx, &sel, batch, tokens, &plan.plan), "mla_plan_create (timing)");
  check_call(mla_plan_update(d.ctx, plan.plan, c.api_lens.data(), batch, 0), "mla_plan_update (timing)");
  const auto ws = upload_plan(d, plan, c);
  const size_t rows = size_t(batch) * s.qseqlen;
  const size_t set_bytes = c.q_bytes.size() + c.p.kv.bytes.size() + rows * s.heads * (rt::kVDim * 2 + 4);
  const int sets = rotate > 0 ? rotate : on_hardware ? int(std::ceil(2.0 * kLlcBytes / double(set_bytes))) + 1 : 1;
  Buffer idx(d.dev, c.kv_indices.size() * 4, "kv_indices");
  idx.upload(c.kv_indices.data(), c.kv_indices.size() * 4, "kv_indices");
  std::vector<std::unique_ptr<Buffer>> q, kv, o, lse;
  for (int i = 0; i < sets; ++i) {
    q.push_back(std::make_unique<Buffer>(d.dev, c.q_bytes.size(), "q"));
    q.back()->upload(c.q_bytes.data(), c.q_bytes.size(), "q");
    kv.push_back(std::make_unique<Buffer>(d.dev, c.p.kv.bytes.size(), "kv"));
    kv.back()->upload(c.p.kv.bytes.data(), c.p.kv.bytes.size(), "kv");
    o.push_back(std::make_unique<Buffer>(d.dev, rows * s.heads * rt::kVDim * 2, "o"));
    lse.push_back(std::make_unique<Buffer>(d.dev, rows * s.heads * 4, "lse"));
  }
  auto launch = [&](int i) {
    const size_t k = size_t(i % sets);
    mla_decode_args a{};
    a.q = q[k]->ptr;
    a.kv = kv[k]->ptr;
    a.num_pages = c.p.num_pages();
    a.kv_indices = idx.ptr;
    a.o = o[k]->ptr;
    a.lse = s.return_lse ? lse[k]->ptr : 0;
    a.sm_scale = float(c.p.sm_scale);
    a.q_scale = float(c.p.q_scale);
    a.kv_scale = float(c.p.kv_scale);
    a.logit_cap = float(c.p.logit_cap);
    check_call(mla_decode(d.ctx, plan.plan, &a, ws->ptr, ws->bytes, nullptr), "mla_decode (timing)");
  };
  for (int i = 0; i < warmup; ++i) launch(i);
  check_call(mla_stream_synchronize(d.dev, nullptr), "mla_stream_synchronize");
  std::vector<double> us;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    launch(warmup + i);
    check_call(mla_stream_synchronize(d.dev, nullptr), "mla_stream_synchronize");
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  const double kvb = rt::elem_bytes(s.kv_dtype), qb = rt::elem_bytes(s.q_dtype);
  double min_bytes = double(c.kv_indices.size()) * 4 + double(rows) * s.heads * (rt::kQkDim * qb + rt::kVDim * 2);
  for (int l : lens) min_bytes += double(l) * rt::kQkDim * kvb;
  const double med = median(us);
  return {{"kv_lens", lens.size() > 4 ? json(fmt::format("{} x {}", lens[0], lens.size())) : json(lens)},
          {"runs", runs},
          {"warmup", warmup},
          {"input_sets", sets},
          {"input_set_bytes", set_bytes},
          {"median_us", med},
          {"min_us", us.empty() ? 0 : *std::min_element(us.begin(), us.end())},
          {"min_bytes", min_bytes},
          {"tbps_at_median", med > 0 ? min_bytes / (med * 1e-6) / 1e12 : 0},
          {"timing", "host clock around mla_decode + mla_stream_synchronize (includes the launches' host cost)"}};
}

// The model's time for the timed batch: mlabench's measured counters (one full-scale emulator run
// up to full_scale_tokens, else its scaled runs) priced by its machine model, for the plan the
// runtime makes on the model machine's CUs.
json model_for(const rt::DecodeShape& s, const std::string& catalog_dir, const std::vector<int>& lens,
               int64_t full_scale_tokens, int device_cus) {
  use_catalog(s, catalog_dir);
  BenchShape bs;
  bs.name = "mlacheck";
  bs.set = "cli";
  bs.shape = s;
  bs.kv_lens = lens;
  MeasureOptions mo;
  mo.run_mca = false;
  mo.verbose = true;  // the scaled runs' progress (seconds to minutes per kernel)
  mo.full_scale_max_tokens = full_scale_tokens;
  const ShapeResult r = measure_shape(bs, mo);
  const Machine m = machine_for(s.target);
  json j{{"modeled_us", r.modeled.total_s * 1e6},
         {"bound", r.modeled.bound},
         {"modeled_tbps", r.modeled_tbps},
         {"hbm_ceiling", m.ceiling_text()},
         {"model_cus", m.cus},
         {"counters", r.full_scale ? "emulator, full scale" : "emulator, scaled runs extrapolated with the full plan"},
         {"units", r.units}};
  if (device_cus != m.cus)
    j["note"] = fmt::format("the device has {} CUs, the model's machine {}: the runtime's plan on the device differs "
                            "from the modeled one", device_cus, m.cus);
  return j;
}

// ROCm: the HIP runtime in the process (hipRuntimeGetVersion / hipDriverGetVersion of the
// libamdhip64 the runtime loaded) and the installation's .info/version.
json rocm_info() {
  json j;
  struct Found {
    std::string path;
  } found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "libamdhip64")) {
          static_cast<Found*>(data)->path = info->dlpi_name;
          return 1;
        }
        return 0;
      },
      &found);
  if (!found.path.empty()) {
    j["libamdhip64"] = found.path;
    if (void* h = dlopen(found.path.c_str(), RTLD_NOLOAD | RTLD_LAZY)) {
      using Fn = int (*)(int*);
      for (const char* f : {"hipRuntimeGetVersion", "hipDriverGetVersion"}) {
        int v = 0;
        auto fn = reinterpret_cast<Fn>(dlsym(h, f));
        if (!fn)
          j[f] = "not exported";
        else if (fn(&v) == 0)
          j[f] = v;
        else
          j[f] = "failed";
      }
      dlclose(h);
    }
  }
  std::vector<std::string> roots;
  if (const char* r = std::getenv("ROCM_PATH")) roots.push_back(r);
  roots.push_back("/opt/rocm");
  for (const auto& r : roots) {
    std::ifstream f(r + "/.info/version");
    std::string v;
    if (f && std::getline(f, v)) {
      j["rocm_version"] = v;
      j["rocm_path"] = r;
      break;
    }
  }
  if (!j.contains("rocm_version")) j["rocm_version"] = "unknown (no .info/version under $ROCM_PATH or /opt/rocm)";
  return j;
}

// co_sha256 of every kernel in the catalog's catalog.json files (what mlagen recorded).
std::map<std::string, std::string> recorded_sha256(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& d : fs::directory_iterator(fs::path(dir) / "hsa")) {
    const fs::path cj = d.path() / "mla" / "catalog.json";
    if (!fs::exists(cj)) continue;
    const json cat = json::parse(std::ifstream(cj));
    for (const auto& k : cat.at("kernels"))
      m[cat.at("target").get<std::string>() + "/" + k.at("name").get<std::string>()] = k.value("co_sha256", "");
  }
  return m;
}

json kernel_file(const rt::CatalogKernel& k, const std::map<std::string, std::string>& recorded) {
  const std::string sha = gen::sha256_file(k.co_path);
  auto it = recorded.find(k.target + "/" + k.name);
  const std::string rec = it == recorded.end() ? "" : it->second;
  return {{"name", k.name}, {"co", k.co_path}, {"sha256", sha}, {"catalog_sha256", rec}, {"matches_catalog", sha == rec}};
}

std::string aiter_probe(const CheckOptions& o) {
  if (o.python3.empty() || o.aiter_script.empty()) return "no Python interpreter configured";
  const gen::ToolResult r = gen::run_tool({o.python3, o.aiter_script, "--probe"});
  if (r.exit_code == 0) return "";
  std::string why = r.out + r.err;
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  return why.empty() ? fmt::format("the probe exited {}", r.exit_code) : why;
}

}  // namespace

std::vector<int> check_lengths(int page_size, int tile_tokens, int qseqlen, int max_len, uint64_t seed) {
  const int P = page_size, T = tile_tokens;
  std::vector<int> c = {qseqlen, P - 1, P, P + 1, 2 * P + 1, T - 1, T, T + 1, 2 * T + 1, max_len};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 2; ++i) c.push_back(std::uniform_int_distribution<int>(qseqlen, max_len)(rng));
  std::set<int> keep;
  for (int l : c)
    if (l >= qseqlen && l <= max_len && l >= 1) keep.insert(l);
  return {keep.begin(), keep.end()};
}

nlohmann::json run_check(const CheckOptions& opt) {
  CheckOptions o = opt;
  const bool hip = o.backend == "hip";
  if (!hip && o.backend != "emulator")
    throw std::invalid_argument(fmt::format("--backend {}: allowed: hip, emulator", o.backend));
  if (o.max_len < 1) throw std::invalid_argument(fmt::format("--max-len {}: must be >= 1", o.max_len));
  if (o.max_kernels < 0) throw std::invalid_argument(fmt::format("--max-kernels {}: must be >= 0 (0: all)", o.max_kernels));
  if (o.runs == -1) o.runs = hip ? 100 : 3;
  if (o.warmup == -1) o.warmup = hip ? 10 : 1;
  if (o.runs < 1) throw std::invalid_argument(fmt::format("--runs {}: must be >= 1", o.runs));
  if (o.warmup < 0) throw std::invalid_argument(fmt::format("--warmup {}: must be >= 0", o.warmup));
  if (o.rotate < 0) throw std::invalid_argument(fmt::format("--rotate {}: must be >= 0 (0: automatic)", o.rotate));
  for (int l : o.time_lens)
    if (l < 1) throw std::invalid_argument(fmt::format("--time-lens: a length of {}; each must be >= 1", l));
  if (o.seed == 0) o.seed = std::random_device{}() | 1;
  if (o.catalog_dir.empty()) {
    const char* env = std::getenv("MLA_CATALOG_DIR");
    o.catalog_dir = env && *env ? env : "out";
  }
  const rt::Catalog cat = rt::Catalog::open(o.catalog_dir);  // CatalogError names the directory

  // The device (and, on HIP, an emulator device of the same target for the cross-check).
  Device dev;
  if (hip) {
    if (mla_device_open(MLA_BACKEND_HIP, o.device, nullptr, &dev.dev) != MLA_SUCCESS)
      throw std::runtime_error(fmt::format("mlacheck --backend hip: no HIP device {} ({}). On a machine without an AMD GPU "
                                           "use --backend emulator.",
                                           o.device, mla_last_error()));
  } else {
    rt::parse_target(o.target, "--target");
    check_call(mla_device_open(MLA_BACKEND_EMULATOR, 0, o.target.c_str(), &dev.dev), "mla_device_open (emulator)");
  }
  check_call(mla_device_get_info(dev.dev, &dev.info), "mla_device_get_info");
  check_call(mla_context_create(dev.dev, cat.dir().c_str(), &dev.ctx), "mla_context_create");
  const std::string target = dev.info.target;
  const bool test_device = std::strstr(dev.info.name, "test device") != nullptr;
  const bool on_hardware = hip && !test_device;
  std::unique_ptr<Device> emu;
  if (hip) {
    emu = std::make_unique<Device>();
    check_call(mla_device_open(MLA_BACKEND_EMULATOR, 0, target.c_str(), &emu->dev), "mla_device_open (emulator, cross-check)");
    check_call(mla_device_get_info(emu->dev, &emu->info), "mla_device_get_info");
    check_call(mla_context_create(emu->dev, cat.dir().c_str(), &emu->ctx), "mla_context_create (emulator)");
  }
  if (o.time_lens.empty()) o.time_lens = hip && !test_device ? std::vector<int>(16, 8192) : std::vector<int>(2, o.max_len);

  // The kernels: decode kernels of the device's target, filtered.
  std::vector<const rt::CatalogKernel*> kernels;
  size_t of_target = 0;
  for (const auto& k : cat.kernels()) {
    if (k.kind != "mla_decode" || k.target != target) continue;
    ++of_target;
    bool keep = o.kernels.empty();
    for (const auto& f : o.kernels) keep = keep || k.name.find(f) != std::string::npos;
    if (keep) kernels.push_back(&k);
  }
  if (of_target == 0)
    throw std::runtime_error(fmt::format("mlacheck: the catalog {} has no decode kernel for the device's target {} "
                                         "(build one: mlagen build configs/*.json --out DIR)",
                                         cat.dir(), target));
  if (kernels.empty()) {
    std::string names;
    for (const auto& k : cat.kernels())
      if (k.kind == "mla_decode" && k.target == target) names += (names.empty() ? "" : ", ") + k.name;
    throw std::invalid_argument(fmt::format("--kernels {}: matches no decode kernel of {} in {}; allowed: substrings of {}",
                                            fmt::join(o.kernels, ","), target, cat.dir(), names));
  }
  std::sort(kernels.begin(), kernels.end(), [](auto* a, auto* b) { return a->name < b->name; });
  if (o.max_kernels > 0 && int(kernels.size()) > o.max_kernels) kernels.resize(size_t(o.max_kernels));

  std::string aiter_reason = !hip ? "not run: aiter's mla_decode_fwd needs a GPU (emulator backend)"
                             : test_device ? "not run: the HIP test device is not a GPU aiter can use"
                             : !o.aiter    ? "not run (--no-aiter)"
                                           : "";
  if (aiter_reason.empty()) {
    const std::string why = aiter_probe(o);
    if (!why.empty()) aiter_reason = "not run: aiter could not be imported (" + why + ")";
  }

  const std::string timing_kind =
      on_hardware ? "measured on the GPU"
      : hip       ? "HIP test device: wall time of the emulator behind libamdhip64 on the CPU, not hardware"
                  : "emulator: wall time of the CPU emulator, not hardware";
  json report;
  report["tool"] = "mlacheck";
  report["date_utc"] = [] {
    std::time_t t = std::time(nullptr);
    char b[32];
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return std::string(b);
  }();
  report["device"] = {{"backend", hip ? "hip" : "emulator"},
                      {"target", target},
                      {"name", dev.info.name},
                      {"num_cus", dev.info.num_cus},
                      {"hardware", on_hardware}};
  report["rocm"] = hip ? rocm_info() : json{{"rocm_version", "not used (emulator backend)"}};
  report["catalog"] = cat.dir();
  report["options"] = {{"kernels", o.kernels}, {"max_kernels", o.max_kernels}, {"max_len", o.max_len},
                       {"time_lens", o.time_lens}, {"runs", o.runs}, {"warmup", o.warmup}, {"rotate", o.rotate},
                       {"seed", o.seed}, {"model", o.model}};
  report["timing_kind"] = timing_kind;
  report["aiter"] = aiter_reason.empty() ? json{{"available", true}} : json{{"available", false}, {"reason", aiter_reason}};
  report["kernels_of_target"] = of_target;
  report["kernels"] = json::array();
  const auto recorded = recorded_sha256(cat.dir());

  int passed = 0, failed = 0;
  for (size_t ki = 0; ki < kernels.size(); ++ki) {
    const rt::CatalogKernel& k = *kernels[ki];
    const auto t0 = std::chrono::steady_clock::now();
    fmt::print(stderr, "mlacheck: [{}/{}] {}\n", ki + 1, kernels.size(), k.name);
    const rt::DecodeShape s = shape_of_kernel(k);
    json kj{{"name", k.name}, {"shape", s.describe()}};
    bool kernel_pass = true;
    try {
      const rt::Selection rsel = cat.select(s);
      mla_shape sh = api_shape(s);
      mla_selection sel{};
      check_call(mla_select(dev.ctx, &sh, MLA_SELECT_EXACT, &sel), "mla_select " + s.describe());
      if (k.name != sel.decode_kernel)
        throw std::runtime_error(fmt::format("mla_select chose {} for {}'s shape", sel.decode_kernel, k.name));
      kj["files"] = json::array({kernel_file(rsel.decode, recorded), kernel_file(rsel.reduce, recorded)});
      if (rsel.prefix) kj["files"].push_back(kernel_file(*rsel.prefix, recorded));
      for (const auto& f : kj["files"])
        if (!f["matches_catalog"].get<bool>()) kernel_pass = false;

      // The problems: every length of check_lengths with two empty requests among them; a
      // second batch of long requests only; a shared prefix where the kernel has a prefix variant.
      const int T = k.launch.tile_tokens, P = s.page_size;
      const uint64_t seed = o.seed + 1000 * ki;
      std::vector<CheckProblem> problems;
      const std::vector<int> lens = check_lengths(P, T, s.qseqlen, o.max_len, seed);
      problems.push_back(make_check_problem("lengths at page and tile edges, 2 empty requests", s, lens,
                                            {0, int(lens.size() / 2)}, {}, seed + 1));
      if (rsel.prefix) {
        // Whole pages and at least two tiles (a prefix under a tile is read per request: nothing to cascade).
        const int shared = (std::max(2 * T, o.max_len / 2) + P - 1) / P * P;
        std::mt19937_64 rng(seed + 2);
        std::vector<int> sl;
        for (int i = 0; i < 3; ++i) sl.push_back(shared + std::uniform_int_distribution<int>(s.qseqlen, std::max(s.qseqlen, o.max_len / 4))(rng));
        problems.push_back(make_check_problem(fmt::format("3 requests sharing {} tokens (cascade policy always)", shared), s, sl, {3}, {{0, 3, shared}},
                                              seed + 3));
      }
      kj["problems"] = json::array();
      for (const auto& c : problems) {
        fmt::print(stderr, "  {}: kv_lens {}\n", c.label, fmt::join(c.api_lens, ","));
        const RunOutput r = run_on(dev, sel, s, c);
        bool pass = false;
        json pj{{"label", c.label}, {"kv_lens", c.api_lens}};
        pj["reference"] = compare_with_reference(s, c, r, pass);
        std::vector<std::string> why;
        if (!pass) why.push_back("outside the reference's tolerance, or an empty request's o / lse not 0 / -inf");
        pj["units"] = {{"decode", r.info.num_units}, {"prefix", r.info.num_prefix_units}, {"reduce", r.info.num_reduce_entries}};
        if (!c.groups.empty()) {
          pj["cascaded"] = r.info.num_prefix_units > 0;
          pj["planner_decision"] = r.prefix_groups;
          if (r.info.num_prefix_units == 0) {
            // The planner may decline even under policy `always` where a cascade cannot save a
            // read (e.g. 96 heads x 3 rows: the group's rows need as many prefix row groups as
            // its members' own); then the prefix kernel has no work for this shape, which is
            // reported, not failed. A group it decided to cascade must have prefix units.
            std::string reason;
            bool decided = false;
            for (const auto& g : r.prefix_groups) reason += g.value("reason", ""), decided = decided || g.value("cascade", false);
            if (decided || r.prefix_groups.empty())
              why.push_back(fmt::format("the planner cascades the group but the plan has no prefix units ({})", reason));
            else
              pj["cascade_not_applicable"] = "the planner does not cascade this shape's group: " + reason;
          }
        }
        if (emu) {
          const RunOutput e = run_on(*emu, sel, s, c);
          pj["vs_emulator"] = compare_outputs(r, e);
          if (pj["vs_emulator"]["o_elements_differing"].get<size_t>() != 0)
            why.push_back(fmt::format("{} o elements differ from the emulator's", pj["vs_emulator"]["o_elements_differing"].get<size_t>()));
        } else {
          pj["vs_emulator"] = "the run is the emulator's";
        }
        pass = why.empty();
        pj["pass"] = pass;
        if (!pass) pj["failures"] = why;
        fmt::print(stderr, "    {}: {}{}\n", pass ? "pass" : "FAIL", pj["reference"]["summary"].get<std::string>(),
                   why.empty() ? "" : fmt::format(" ({})", fmt::join(why, "; ")));
        kernel_pass = kernel_pass && pass;
        kj["problems"].push_back(pj);
      }

      fmt::print(stderr, "  timing: {} requests, {} runs ({})\n", o.time_lens.size(), o.runs, timing_kind);
      kj["timing"] = time_kernel(dev, sel, s, o.time_lens, o.runs, o.warmup, o.rotate, on_hardware, seed + 4);
      kj["timing"]["kind"] = timing_kind;
      if (o.model) {
        fmt::print(stderr, "  model: the same batch on the machine model\n");
        kj["model"] = model_for(s, cat.dir(), o.time_lens, o.model_full_scale_tokens, dev.info.num_cus);
      } else {
        kj["model"] = {{"not_run", "not run (--no-model)"}};
      }
      if (aiter_reason.empty()) {
        json req{{"q_dtype", rt::name(s.q_dtype)}, {"kv_dtype", rt::name(s.kv_dtype)}, {"heads", s.heads},
                 {"qseqlen", s.qseqlen}, {"page_size", s.page_size}, {"kv_lens", o.time_lens}, {"runs", o.runs},
                 {"warmup", o.warmup}, {"target", target}};
        const std::string req_path = (fs::path(o.out_dir) / "aiter_request.json").string();
        std::ofstream(req_path) << req.dump() << "\n";
        const gen::ToolResult r = gen::run_tool({o.python3, o.aiter_script, "--request", req_path});
        try {
          kj["aiter"] = r.exit_code == 0 ? json::parse(r.out) : json{{"not_run", "failed: " + r.err}};
        } catch (const std::exception& e) {
          kj["aiter"] = {{"not_run", std::string("unreadable output: ") + e.what()}};
        }
      } else {
        kj["aiter"] = {{"not_run", aiter_reason}};
      }
    } catch (const std::exception& e) {
      kernel_pass = false;
      kj["error"] = e.what();
      fmt::print(stderr, "  ERROR: {}\n", e.what());
    }
    kj["pass"] = kernel_pass;
    kj["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    (kernel_pass ? passed : failed) += 1;
    report["kernels"].push_back(kj);
  }
  report["summary"] = {{"kernels", kernels.size()}, {"passed", passed}, {"failed", failed}};
  fs::create_directories(o.out_dir);
  std::ofstream(fs::path(o.out_dir) / "report.json") << report.dump(2) << "\n";
  std::ofstream(fs::path(o.out_dir) / "report.md") << check_markdown(report);
  return report;
}

std::string check_markdown(const nlohmann::json& r) {
  std::string md = "# mlacheck report\n\n";
  const auto& d = r.at("device");
  md += fmt::format("- device: {} ({}, {} CUs, backend {}{})\n", d.at("name").get<std::string>(), d.at("target").get<std::string>(),
                    d.at("num_cus").get<int>(), d.at("backend").get<std::string>(), d.at("hardware").get<bool>() ? ", hardware" : ", not hardware");
  const auto& rocm = r.at("rocm");
  md += fmt::format("- ROCm: {}", rocm.value("rocm_version", json("unknown")).dump());
  if (rocm.contains("hipRuntimeGetVersion")) md += fmt::format(", hipRuntimeGetVersion {}", rocm["hipRuntimeGetVersion"].dump());
  if (rocm.contains("libamdhip64")) md += fmt::format(", {}", rocm["libamdhip64"].get<std::string>());
  md += "\n";
  md += fmt::format("- catalog: {}\n- date (UTC): {}, seed {}\n", r.at("catalog").get<std::string>(), r.at("date_utc").get<std::string>(),
                    r.at("options").at("seed").get<uint64_t>());
  md += fmt::format("- times: {}\n", r.at("timing_kind").get<std::string>());
  md += fmt::format("- model: mlabench's machine model (**modeled**, never a measurement)\n");
  md += fmt::format("- aiter: {}\n", r.at("aiter").value("available", false) ? "imported" : r.at("aiter").at("reason").get<std::string>());
  md += fmt::format("- kernels: {} checked of the target's {}: {} pass, {} fail\n\n", r.at("summary").at("kernels").get<size_t>(),
                    r.at("kernels_of_target").get<size_t>(), r.at("summary").at("passed").get<int>(),
                    r.at("summary").at("failed").get<int>());
  md += "| kernel | problems pass | worst d | worst max error (% of max\\|ref\\|) | max \\|device - emulator\\| | timed batch | median us | **modeled** us | aiter us | pass |\n";
  md += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& k : r.at("kernels")) {
    int np = 0, nt = 0;
    double worst_d = 0, worst_rel = 0, worst_diff = 0;
    bool emu_checked = false;
    for (const auto& p : k.value("problems", json::array())) {
      ++nt;
      np += p.at("pass").get<bool>();
      worst_d = std::max(worst_d, p.at("reference").at("d").get<double>());
      worst_rel = std::max(worst_rel, p.at("reference").at("max_rel_err").get<double>());
      if (p.at("vs_emulator").is_object()) {
        emu_checked = true;
        worst_diff = std::max(worst_diff, p.at("vs_emulator").at("o_max_abs_diff").get<double>());
      }
    }
    auto num = [](const json& j, const char* key, const char* f) {
      return j.is_object() && j.contains(key) && j[key].is_number() ? fmt::format(fmt::runtime(f), j[key].get<double>()) : std::string("-");
    };
    const json timing = k.value("timing", json());
    md += fmt::format("| {} | {}/{} | {:.2e} | {:.2f} | {} | {} | {} | {} | {} | {} |\n", k.at("name").get<std::string>(), np, nt, worst_d,
                      100 * worst_rel, emu_checked ? fmt::format("{:.3g}", worst_diff) : std::string("(is the emulator)"),
                      timing.is_object() ? timing.at("kv_lens").dump() : "-", num(timing, "median_us", "{:.1f}"),
                      num(k.value("model", json()), "modeled_us", "{:.1f}"), num(k.value("aiter", json()), "median_us", "{:.1f}"),
                      k.at("pass").get<bool>() ? "yes" : "**no**");
  }
  md += "\nProblems per kernel (kv lengths as given to mla_plan_update; 0 = an empty request, whose o must be 0 and lse -inf):\n\n";
  md += "| kernel | problem | kv_lens | d | max error % | units decode / prefix / reduce | pass |\n|---|---|---|---|---|---|---|\n";
  for (const auto& k : r.at("kernels")) {
    if (k.contains("error")) md += fmt::format("| {} | error | {} | | | | **no** |\n", k.at("name").get<std::string>(), k.at("error").get<std::string>());
    for (const auto& p : k.value("problems", json::array())) {
      const auto& ref = p.at("reference");
      md += fmt::format("| {} | {} | {} | {:.2e} | {:.2f} | {} / {} / {} | {} |\n", k.at("name").get<std::string>(),
                        p.at("label").get<std::string>(), fmt::join(p.at("kv_lens").get<std::vector<int>>(), ","), ref.at("d").get<double>(),
                        100 * ref.at("max_rel_err").get<double>(), p.at("units").at("decode").get<int>(), p.at("units").at("prefix").get<int>(),
                        p.at("units").at("reduce").get<int>(), p.at("pass").get<bool>() ? "yes" : "**no**");
    }
  }
  for (const auto& k : r.at("kernels"))
    for (const auto& p : k.value("problems", json::array()))
      if (p.contains("cascade_not_applicable"))
        md += fmt::format("\n{}: {}: {}\n", k.at("name").get<std::string>(), p.at("label").get<std::string>(),
                          p.at("cascade_not_applicable").get<std::string>());
  md += "\nCode objects (sha256 of the files run; `matches` compares with the sha256 mlagen recorded in catalog.json):\n\n";
  md += "| kernel | sha256 | matches |\n|---|---|---|\n";
  std::set<std::string> seen;
  for (const auto& k : r.at("kernels"))
    for (const auto& f : k.value("files", json::array()))
      if (seen.insert(f.at("name").get<std::string>()).second)
        md += fmt::format("| {} | `{}` | {} |\n", f.at("name").get<std::string>(), f.at("sha256").get<std::string>(),
                          f.at("matches_catalog").get<bool>() ? "yes" : "**no**");
  return md;
}

}  // namespace mla::bench
