// The C API (runtime/mla_runtime.h) through the emulator backend: open, select, plan, launch,
// read outputs, compared with the fp64 reference; the kernarg bytes a HIP launch would send are
// the bytes the emulator dispatched; bad input gives an error code and message (no crash); the
// HIP backend fails cleanly with no GPU; examples/mla_example runs on the emulator.
#include <map>
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "abi/mla_abi.h"
#include "catalog/catalog.h"
#include "config/config.h"
#include "runtime/code_object_info.h"
#include "runtime/emulator_backend.h"
#include "runtime/mla_runtime.h"
#include "tests/runtime/capi_check.h"
#include "runtime/mla_runtime_internal.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

using namespace mla;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A catalog of one gfx942 fp8/fp8 decode kernel with 16 heads and page size 16 (+ its reduce).
std::string build_catalog(int qseqlen) {
  std::string d = (fs::temp_directory_path() / fmt::format("mla-rt-capi-{}-qs{}", getpid(), qseqlen)).string();
  std::string cfg = fmt::format(R"({{"deployment": "capi", "kernels": [{{"kind": "mla_decode", "target": "gfx942",
      "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "qseqlen": {}, "page_size": 16, "return_lse": false,
      "logit_cap": false}}]}})", qseqlen);
  fs::remove_all(d);  // a directory of an earlier process with this pid may hold another catalog
  gen::BuildOptions o;
  o.out_dir = d;
  o.jobs = 2;
  gen::build_catalog({gen::parse_config(cfg, "capi.json")}, o);
  return d;
}

// The process's main catalog: qseqlen 1.
const std::string& catalog_dir() {
  static std::string dir = build_catalog(1);
  return dir;
}

// A copy of the catalog that a test may damage.
std::string catalog_copy(const std::string& tag) {
  std::string d = (fs::temp_directory_path() / fmt::format("mla-rt-capi-{}-{}", getpid(), tag)).string();
  fs::remove_all(d);
  fs::copy(catalog_dir(), d, fs::copy_options::recursive);
  return d;
}

std::string decode_co(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().rfind("mla_decode", 0) == 0 && e.path().extension() == ".co")
      return e.path().string();
  FAIL("no decode .co in " << dir);
  return {};
}

// The backend the C API cases run on: the emulator; or, with MLA_TEST_BACKEND=hip, the runtime's
// HIP backend on the HIP test device (tests/hip_test_device, registered there a second time).
mla_backend test_backend() {
  const char* b = std::getenv("MLA_TEST_BACKEND");
  return b && std::string(b) == "hip" ? MLA_BACKEND_HIP : MLA_BACKEND_EMULATOR;
}

mla_shape shape16(int heads = 16) { return mla_shape{MLA_DTYPE_FP8, MLA_DTYPE_FP8, heads, 1, 16, 0, 0}; }

// An emulator device, a context on `dir`, a selection, a plan, device tensors of a problem.
struct Session {
  mla_device* dev = nullptr;
  mla_context* ctx = nullptr;
  mla_plan* plan = nullptr;
  mla_selection sel{};
  rt::Problem prob;
  mla_decode_args args{};
  uint64_t ws = 0;
  size_t ws_bytes = 0;

  explicit Session(const std::string& dir = catalog_dir()) {
    OK(mla_device_open(test_backend(), 0, "gfx942", &dev));
    OK(mla_context_create(dev, dir.c_str(), &ctx));
    OK(mla_context_set_option(ctx, MLA_OPTION_NUM_CUS, 16));  // small grids keep the emulator fast
  }
  ~Session() {
    mla_plan_destroy(plan);
    mla_context_destroy(ctx);
    mla_device_close(dev);
  }
  // The step's tables into the workspace (once per plan update), host scales 1.
  void upload_tables() { OK(mla_plan_upload(ctx, plan, ws, ws_bytes, 1.0f, 1.0f, nullptr)); }
  uint64_t upload(const void* p, size_t n) {
    uint64_t a = 0;
    OK(mla_malloc(dev, n, &a));
    OK(mla_memcpy_h2d(dev, a, p, n));
    return a;
  }
  // Selects for `heads`, plans the problem's batch, uploads everything.
  void prepare(std::vector<int> lens, int heads = 16, unsigned flags = MLA_SELECT_EXACT, uint64_t seed = 7,
               int qseqlen = 1) {
    rt::ProblemParams pp;
    pp.target = rt::Target::gfx942;
    pp.heads = heads;
    pp.qseqlen = qseqlen;
    pp.page_size = 16;
    pp.kv_lens = lens;
    pp.seed = seed;
    pp.extra_pages = 3;
    prob = rt::make_random_problem(pp);
    mla_shape s = shape16(heads);
    s.qseqlen = qseqlen;
    OK(mla_select(ctx, &s, flags, &sel));
    OK(mla_plan_create(ctx, &sel, 8, 4096, &plan));
    OK(mla_plan_workspace_size(plan, &ws_bytes));
    OK(mla_malloc(dev, ws_bytes, &ws));
    std::vector<int32_t> l(lens.begin(), lens.end());
    OK(mla_plan_update(ctx, plan, l.data(), int(l.size()), 0));
    upload_tables();
    args = mla_decode_args{};
    args.q = upload(prob.q.bytes.data(), prob.q.bytes.size());
    args.kv = upload(prob.kv.bytes.data(), prob.kv.bytes.size());
    args.num_pages = prob.num_pages();
    args.kv_indices = upload(prob.kv_indices.data(), prob.kv_indices.size() * 4);
    OK(mla_malloc(dev, size_t(prob.rows()) * heads * 512 * 2, &args.o));
    OK(mla_memset(dev, args.o, 0xff, size_t(prob.rows()) * heads * 512 * 2));
    args.sm_scale = float(prob.sm_scale);
    args.q_scale = args.kv_scale = 1.0f;
  }
  std::vector<uint16_t> read_o() {
    std::vector<uint16_t> o(size_t(prob.rows()) * prob.heads * 512);
    OK(mla_memcpy_d2h(dev, o.data(), args.o, o.size() * 2));
    return o;
  }
  ref::Compare check_against_reference() {
    auto cmp = ref::compare(ref::run_reference(prob), read_o(), nullptr);
    INFO(cmp.summary());
    CHECK(cmp.clean());
    CHECK(cmp.d < 3e-3);
    CHECK(cmp.max_abs_err <= 0.05 * cmp.max_abs_ref);
    return cmp;
  }
};

std::string exe_dir() { return fs::read_symlink("/proc/self/exe").parent_path().string(); }

// Runs a command, returns (exit status, stdout+stderr).
std::pair<int, std::string> run(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(f);
  std::array<char, 512> buf{};
  while (fgets(buf.data(), buf.size(), f)) out += buf.data();
  int st = pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace

TEST_CASE("C API: open, list, select, plan, decode, read outputs (emulator backend)", "[runtime][capi]") {
  Session s;
  size_t n = 0;
  OK(mla_kernel_count(s.ctx, &n));
  REQUIRE(n == 4);  // decode, reduce, prefix, merge_attn_states
  bool saw_decode = false;
  for (size_t i = 0; i < n; ++i) {
    mla_kernel_info k;
    OK(mla_kernel_get(s.ctx, i, &k));
    if (std::string(k.kind) == "mla_decode") {
      saw_decode = true;
      CHECK(k.heads == 16);
      CHECK(k.page_size == 16);
      CHECK(std::string(k.target) == "gfx942");
    }
  }
  CHECK(saw_decode);
  mla_device_info di;
  OK(mla_device_get_info(s.dev, &di));
  CHECK(std::string(di.target) == "gfx942");
  CHECK(di.num_cus == 304);

  s.prepare({70, 200, 33, 16});
  CHECK(s.sel.fallback == MLA_FALLBACK_NONE);
  CHECK(std::string(s.sel.decode_kernel) == "mla_decode_fp8fp8_h16_qs1_pg16");
  CHECK(std::string(s.sel.prefix_kernel) == "mla_prefix_fp8fp8_h16_qs1_pg16");
  mla_plan_info pi;
  OK(mla_plan_get_info(s.plan, &pi));
  CHECK(pi.batch == 4);
  CHECK(pi.num_cus == 16);
  CHECK(pi.num_reduce_entries >= 1);  // 16 CUs for 4 requests: some are split
  const mla_work_unit* units;
  const mla_reduce_entry* reds;
  const int32_t* splits;
  size_t nu = 0, nr = 0;
  OK(mla_plan_get_tables(s.plan, &units, &nu, &reds, &nr, &splits));
  CHECK(int(nu) == pi.num_units);
  int64_t tokens = 0;
  for (size_t i = 0; i < nu; ++i) tokens += units[i].kv_end - units[i].kv_start;
  CHECK(tokens == 70 + 200 + 33 + 16);
  // qseqlen 1: a reduce entry's request is its qo_row; a split request's slots are consecutive.
  for (size_t i = 0; i < nr; ++i) {
    CHECK(splits[reds[i].qo_row] == reds[i].num_splits);
    CHECK(reds[i].partial_stride == 1);
  }

  OK(mla_context_set_option(s.ctx, MLA_OPTION_VALIDATE, 1));
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  OK(mla_stream_synchronize(s.dev, nullptr));
  s.check_against_reference();
  const std::vector<uint16_t> packed = s.read_o();

  SECTION("the same plan object re-planned for another batch reuses the workspace") {
    std::vector<int32_t> lens = {500, 17};
    OK(mla_plan_update(s.ctx, s.plan, lens.data(), 2, 0));
    s.upload_tables();
    size_t ws2 = 0;
    OK(mla_plan_workspace_size(s.plan, &ws2));
    CHECK(ws2 == s.ws_bytes);
    rt::ProblemParams pp;
    pp.page_size = 16;
    pp.kv_lens = {500, 17};
    pp.seed = 9;
    s.prob = rt::make_random_problem(pp);
    s.args.q = s.upload(s.prob.q.bytes.data(), s.prob.q.bytes.size());
    s.args.kv = s.upload(s.prob.kv.bytes.data(), s.prob.kv.bytes.size());
    s.args.num_pages = s.prob.num_pages();
    s.args.kv_indices = s.upload(s.prob.kv_indices.data(), s.prob.kv_indices.size() * 4);
    OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
    s.check_against_reference();
  }
  SECTION("a vLLM-style block table [batch, stride] gives the same bytes") {
    const int stride = 16;
    std::vector<int32_t> table(size_t(4) * stride, -1);  // unused entries: invalid on purpose
    for (int b = 0; b < 4; ++b)
      for (int j = 0; j < s.prob.pages_of(b); ++j) table[size_t(b) * stride + j] = s.prob.kv_indices[s.prob.kv_indptr[b] + j];
    s.args.kv_indices = s.upload(table.data(), table.size() * 4);
    std::vector<int32_t> lens = {70, 200, 33, 16};
    OK(mla_plan_update(s.ctx, s.plan, lens.data(), 4, stride));
    s.upload_tables();
    OK(mla_memset(s.dev, s.args.o, 0xff, packed.size() * 2));
    OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
    CHECK(s.read_o() == packed);
  }
}

TEST_CASE("C API: the kernarg bytes a HIP launch sends are the bytes the emulator dispatches",
          "[runtime][capi][emulator]") {
  Session s;
  s.prepare({300, 40});
  OK(mla_context_set_option(s.ctx, MLA_OPTION_RECORD_LAUNCHES, 1));
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  auto log = rt::emulator_of(s.dev)->take_log();
  auto ops = rt::decode_ops_of(s.ctx, s.plan, &s.args, s.ws);
  std::vector<const rt::DecodeOp*> launches;
  for (const auto& op : ops)
    if (op.kind == rt::DecodeOp::Launch) launches.push_back(&op);
  REQUIRE(launches.size() == 3);  // decode, prefix and reduce: every launch on its capacity grid
  for (const auto& op : ops) CHECK(op.kind == rt::DecodeOp::Launch);  // nothing else: no table copy
  REQUIRE(log.size() == launches.size());
  for (size_t i = 0; i < log.size(); ++i) {
    const rt::DecodeOp& op = *launches[i];
    rt::HipKernargConfig cfg;
    rt::hip_kernarg_config(op.kernarg, cfg);  // what hipModuleLaunchKernel receives as `extra`
    REQUIRE(cfg.extra[0] == reinterpret_cast<void*>(1));  // HIP_LAUNCH_PARAM_BUFFER_POINTER
    REQUIRE(cfg.extra[2] == reinterpret_cast<void*>(2));  // HIP_LAUNCH_PARAM_BUFFER_SIZE
    REQUIRE(cfg.extra[4] == reinterpret_cast<void*>(3));  // HIP_LAUNCH_PARAM_END
    const size_t size = *static_cast<size_t*>(cfg.extra[3]);
    const auto* bytes = static_cast<const uint8_t*>(cfg.extra[1]);
    std::vector<uint8_t> hip(bytes, bytes + size);
    CHECK(log[i].kernel == op.kernel->name);
    CHECK(log[i].grid.x == op.grid.x);
    CHECK(log[i].grid.y == op.grid.y);
    CHECK(log[i].block.x == op.block.x);
    CHECK(hip == log[i].kernarg);
    CHECK(size == op.kernel->kernarg_size);
  }
  // The decode kernarg holds the caller's pointers where the code object declares them.
  const rt::CatalogKernel& dk = *launches[0]->kernel;
  auto at = [&](const char* name) {
    uint64_t v;
    std::memcpy(&v, log[0].kernarg.data() + dk.arg(name).offset, 8);
    return v;
  };
  CHECK(at("q") == s.args.q);
  CHECK(at("kv") == s.args.kv);
  CHECK(at("kv_indices") == s.args.kv_indices);
  CHECK(at("o") == s.args.o);
  CHECK(at("work") == s.ws + 32);  // the decode launch's header: the workspace's step tables, after the scales
  CHECK(at("q_scale") == s.ws);       // no device pointer given: the uploaded host value
  CHECK(at("kv_scale") == s.ws + 4);
}

TEST_CASE("C API: shared prefixes are detected from a host page table, or taken from the caller", "[runtime][capi]") {
  Session s;
  s.prepare({300, 320, 290, 100});  // page 16: give requests 0-2 the same first 16 pages (256 tokens)
  for (int b = 1; b < 3; ++b)
    for (int i = 0; i < 16; ++i) s.prob.kv_indices[size_t(s.prob.kv_indptr[b] + i)] = s.prob.kv_indices[size_t(i)];
  OK(mla_memcpy_h2d(s.dev, s.args.kv_indices, s.prob.kv_indices.data(), s.prob.kv_indices.size() * 4));
  std::vector<int32_t> lens{300, 320, 290, 100};
  OK(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, s.prob.kv_indices.data(), nullptr, 0));
  s.upload_tables();
  const char* text = mla_plan_describe_json(s.plan);
  REQUIRE(text);
  auto j = nlohmann::json::parse(text);
  REQUIRE(j["prefix_groups"].size() == 1);
  CHECK(j["prefix_groups"][0]["first"] == 0);
  CHECK(j["prefix_groups"][0]["count"] == 3);
  CHECK(j["prefix_groups"][0]["shared_tokens"] == 256);
  CHECK(j["prefix_groups"][0]["cascade"] == false);
  // The cost model's word (16 CUs, 256 shared tokens): whichever it is, the output is exact.
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  s.check_against_reference();
  // Cascade asked for: the prefix kernel reads the 256 tokens once for the three requests.
  OK(mla_context_set_option(s.ctx, MLA_OPTION_CASCADE, 1));
  OK(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, s.prob.kv_indices.data(), nullptr, 0));
  s.upload_tables();
  j = nlohmann::json::parse(mla_plan_describe_json(s.plan));
  CHECK(j["prefix_groups"][0]["cascade"] == true);
  mla_plan_info info;
  OK(mla_plan_get_info(s.plan, &info));
  CHECK(info.num_prefix_units > 0);
  {
    // The prefix units as the prefix kernel reads them: the group's 3 x 16 rows, its first
    // request, ranges inside the 256 shared tokens that cover them once per row group.
    const mla_prefix_unit* pu = nullptr;
    size_t npu = 0;
    OK(mla_plan_get_prefix_units(s.plan, &pu, &npu));
    REQUIRE(npu == size_t(info.num_prefix_units));
    std::map<int, int> covered;  // row group -> tokens
    for (size_t i = 0; i < npu; ++i) {
      CHECK(pu[i].first_request == 0);
      CHECK(pu[i].qo_row == 0);
      CHECK(pu[i].page_base == s.prob.kv_indptr[0]);
      CHECK(pu[i].rows == 3 * 16);
      CHECK((0 <= pu[i].kv_start && pu[i].kv_start < pu[i].kv_end && pu[i].kv_end <= 256));
      CHECK((pu[i].partial >= 0 && pu[i].partial + 2 < info.num_partials));  // rows 0..47 -> slots partial + 0..2
      covered[pu[i].row_group] += pu[i].kv_end - pu[i].kv_start;
    }
    for (const auto& [group, tokens] : covered) CHECK(tokens == 256);
    CHECK(mla_plan_get_prefix_units(nullptr, &pu, &npu) == MLA_ERROR_INVALID_ARGUMENT);
  }
  OK(mla_memset(s.dev, s.args.o, 0xff, size_t(s.prob.rows()) * 16 * 512 * 2));  // poison: a row not written fails
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  s.check_against_reference();
  FAILS(mla_context_set_option(s.ctx, MLA_OPTION_CASCADE, 3), MLA_ERROR_INVALID_ARGUMENT,
        "MLA_OPTION_CASCADE = 3 (allowed: 0 cost model, 1 always, 2 never)");
  OK(mla_context_set_option(s.ctx, MLA_OPTION_CASCADE, 0));
  // Caller-given groups win; bad ones are an error naming the group and field.
  mla_prefix_group g{1, 2, 128};
  OK(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, nullptr, &g, 1));
  s.upload_tables();
  j = nlohmann::json::parse(mla_plan_describe_json(s.plan));
  CHECK(j["prefix_groups"][0]["first"] == 1);
  g = {3, 2, 128};
  FAILS(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, nullptr, &g, 1), MLA_ERROR_INVALID_ARGUMENT,
        "prefix group 0 (first 3, count 2, shared_tokens 128): count = 2 (allowed: 2..batch - first = 1)");
  FAILS(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, nullptr, nullptr, 2), MLA_ERROR_INVALID_ARGUMENT,
        "num_groups = 2 with groups NULL");
  // No page table, no groups: an empty list, and no prefix units.
  OK(mla_plan_update_shared(s.ctx, s.plan, lens.data(), 4, 0, nullptr, nullptr, 0));
  s.upload_tables();
  CHECK(nlohmann::json::parse(mla_plan_describe_json(s.plan))["prefix_groups"].empty());
  {
    size_t npu = 99;
    OK(mla_plan_get_prefix_units(s.plan, nullptr, &npu));
    CHECK(npu == 0);
  }
  CHECK(mla_plan_describe_json(nullptr) == nullptr);
}

TEST_CASE("C API: padded fallback only when allowed, reported, and correct", "[runtime][capi]") {
  Session s;
  mla_shape sh = shape16(12);
  mla_selection sel;
  FAILS(mla_select(s.ctx, &sh, MLA_SELECT_EXACT, &sel), MLA_ERROR_NO_KERNEL, "MLA_SELECT_ALLOW_PADDING");
  CHECK_THAT(mla_last_error(), Contains("heads=12"));
  s.prepare({90, 33}, 12, MLA_SELECT_ALLOW_PADDING);
  CHECK(s.sel.fallback == MLA_FALLBACK_PADDED);
  CHECK(s.sel.kernel_heads == 16);
  CHECK_THAT(s.sel.note, Contains("PADDED"));
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  s.check_against_reference();
}

TEST_CASE("C API: padding heads and query rows together keeps the causal limits", "[runtime][capi]") {
  // Only a qseqlen-2 kernel: a 12-head, qseqlen-1 shape runs as the last row of each request.
  static const std::string dir = build_catalog(2);
  Session s(dir);
  s.prepare({90, 2, 47}, 12, MLA_SELECT_ALLOW_PADDING);
  CHECK(s.sel.fallback == MLA_FALLBACK_PADDED);
  CHECK(s.sel.kernel_heads == 16);
  CHECK(s.sel.kernel_qseqlen == 2);
  OK(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr));
  s.check_against_reference();
  std::vector<int32_t> lens = {1};  // too short for the padded kernel's 2 rows
  FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), 1, 0), MLA_ERROR_INVALID_ARGUMENT, "too short to pad");
}

TEST_CASE("C API: bad input is an error code and a message", "[runtime][capi][errors]") {
  SECTION("unknown catalog directory, unset MLA_CATALOG_DIR, and the variable when set") {
    mla_device* dev = nullptr;
    OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", &dev));
    mla_context* ctx = nullptr;
    FAILS(mla_context_create(dev, "/nonexistent/mla-catalog", &ctx), MLA_ERROR_CATALOG, "/nonexistent/mla-catalog");
    CHECK(ctx == nullptr);
    unsetenv("MLA_CATALOG_DIR");
    FAILS(mla_context_create(dev, nullptr, &ctx), MLA_ERROR_CATALOG, "MLA_CATALOG_DIR");
    setenv("MLA_CATALOG_DIR", catalog_dir().c_str(), 1);
    OK(mla_context_create(dev, nullptr, &ctx));
    unsetenv("MLA_CATALOG_DIR");
    mla_context_destroy(ctx);
    mla_device_close(dev);
  }
  SECTION("emulator target and backend enums") {
    mla_device* dev = nullptr;
    FAILS(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx90a", &dev), MLA_ERROR_INVALID_ARGUMENT, "gfx90a");
    FAILS(mla_device_open(mla_backend(7), 0, nullptr, &dev), MLA_ERROR_INVALID_ARGUMENT, "backend = 7");
    CHECK(dev == nullptr);
    // Every C enum holds any non-negative int (its _MAX_ENUM entry), so these are checked values,
    // not undefined conversions (issue #15); the runtime names each.
    static_assert(sizeof(mla_dtype) == 4 && sizeof(mla_option) == 4 && sizeof(mla_backend) == 4);
    Session s;
    mla_shape sh = shape16();
    sh.q_dtype = mla_dtype(1000);
    mla_selection sel;
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.q_dtype = 1000 is not a dtype");
    FAILS(mla_context_set_option(s.ctx, mla_option(0x12345), 1), MLA_ERROR_INVALID_ARGUMENT, "option 74565 is not an mla_option");
    // A negative int, as a C caller may store one (fuzz finding, issue #15: the runtime loaded it
    // through the C++ enum type, undefined behaviour that UBSan reports). Set through the bits,
    // as in C; the runtime reads every enum as its int bits.
    auto as_enum = [](auto& e, int32_t bits) { std::memcpy(&e, &bits, sizeof bits); };
    as_enum(sh.q_dtype, -2129812794);  // the fuzzer's value (2165154502 as unsigned)
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.q_dtype = -2129812794 is not a dtype");
    sh = shape16();
    as_enum(sh.kv_dtype, -1);
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.kv_dtype = -1 is not a dtype");
    // (By-value enum arguments are read the same way; C++ cannot pass a negative one without
    // that undefined load in the caller, so only C callers can, and only fields are tested here.)
    sh = shape16();
    OK(mla_select(s.ctx, &sh, 0, &sel));
    as_enum(sel.fallback, -1);
    mla_plan* plan = nullptr;
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "fallback = -1");
    CHECK(plan == nullptr);
  }
  SECTION("a forged or stale selection is checked field by field against the kernels it names") {
    Session s;
    mla_shape sh = shape16();
    mla_selection good;
    OK(mla_select(s.ctx, &sh, 0, &good));
    mla_plan* plan = nullptr;
    auto forged = [&](auto&& edit) {
      mla_selection sel = good;
      edit(sel);
      return sel;
    };
    mla_selection sel = forged([](mla_selection& x) { x.shape.page_size = 64; });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "has page_size = 16, the shape 64");
    sel = forged([](mla_selection& x) { x.shape.return_lse = 1; });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "has return_lse = 0, the shape 1");
    sel = forged([](mla_selection& x) { x.shape.q_dtype = MLA_DTYPE_BF16; });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "has q_dtype = fp8, the shape bf16");
    sel = forged([](mla_selection& x) { x.shape.heads = 8; });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "cannot run heads 8 qseqlen 1 (fallback NONE: exact)");
    sel = forged([](mla_selection& x) { x.fallback = mla_fallback(9); });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "fallback = 9");
    sel = forged([](mla_selection& x) { std::memset(x.decode_kernel, 'x', sizeof x.decode_kernel); });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "not NUL-terminated within 128 bytes");
    sel = forged([](mla_selection& x) { std::strcpy(x.prefix_kernel, x.decode_kernel); });
    FAILS(mla_plan_create(s.ctx, &sel, 4, 0, &plan), MLA_ERROR_INVALID_ARGUMENT, "prefix kernel");
    CHECK(plan == nullptr);
    sel = forged([](mla_selection& x) { x.prefix_kernel[0] = 0; });  // no prefix kernel: allowed
    OK(mla_plan_create(s.ctx, &sel, 4, 0, &plan));
    mla_plan_destroy(plan);
  }
  SECTION("merge_attn_states: pointers and sizes are checked before any launch") {
    Session s;
    mla_merge_args m{};
    FAILS(mla_merge_attn_states(s.ctx, &m, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.output is a null device pointer");
    uint64_t buf = 0;
    OK(mla_malloc(s.dev, 4096, &buf));
    m.output = m.prefix_output = m.prefix_lse = m.suffix_output = m.suffix_lse = buf;
    m.num_tokens = 1;
    FAILS(mla_merge_attn_states(s.ctx, &m, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.num_heads = 0 (allowed: 1..1024)");
    m.num_heads = 16;
    m.num_tokens = int64_t(1) << 40;
    FAILS(mla_merge_attn_states(s.ctx, &m, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.num_tokens = 1099511627776");
    FAILS(mla_merge_attn_states(s.ctx, nullptr, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args");
  }
  SECTION("null pointers") {
    FAILS(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", nullptr), MLA_ERROR_INVALID_ARGUMENT, "NULL");
    mla_context* ctx = nullptr;
    FAILS(mla_context_create(nullptr, catalog_dir().c_str(), &ctx), MLA_ERROR_INVALID_ARGUMENT, "dev is NULL");
    Session s;
    mla_selection sel;
    FAILS(mla_select(s.ctx, nullptr, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape is NULL");
    mla_shape sh = shape16();
    FAILS(mla_select(s.ctx, &sh, 0, nullptr), MLA_ERROR_INVALID_ARGUMENT, "out is NULL");
    FAILS(mla_plan_create(s.ctx, nullptr, 1, 0, &s.plan), MLA_ERROR_INVALID_ARGUMENT, "sel is NULL");
    FAILS(mla_decode(s.ctx, nullptr, nullptr, 0, 0, nullptr), MLA_ERROR_INVALID_ARGUMENT, "plan is NULL");
    // A device address outside every allocation: the emulator backend checks it itself; on HIP
    // the runtime reports the call and HIP's error.
    const bool hip = test_backend() == MLA_BACKEND_HIP;
    FAILS(mla_memcpy_h2d(s.dev, 0x1234, &sh, sizeof sh), hip ? MLA_ERROR_BACKEND : MLA_ERROR_INVALID_ARGUMENT,
          hip ? "hipMemcpy" : "not inside one allocation");
    uint64_t p = 0;
    FAILS(mla_memcpy_d2h(s.dev, &sh, 0, sizeof sh), MLA_ERROR_INVALID_ARGUMENT, "null device pointer");
    FAILS(mla_malloc(s.dev, 16, nullptr), MLA_ERROR_INVALID_ARGUMENT, "out_ptr is NULL");
    OK(mla_malloc(s.dev, 16, &p));
    FAILS(mla_memcpy_d2h(s.dev, &sh, p, 4096), hip ? MLA_ERROR_BACKEND : MLA_ERROR_INVALID_ARGUMENT,
          hip ? "hipErrorInvalidValue" : "not inside one allocation");
    FAILS(mla_free(s.dev, p + 4), hip ? MLA_ERROR_BACKEND : MLA_ERROR_INVALID_ARGUMENT,
          hip ? "hipFree" : "not an allocation");

    s.prepare({40});
    mla_decode_args a = s.args;
    a.q = 0;
    FAILS(mla_decode(s.ctx, s.plan, &a, s.ws, s.ws_bytes, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.q");
    a = s.args;
    a.kv_indices = 0;
    FAILS(mla_decode(s.ctx, s.plan, &a, s.ws, s.ws_bytes, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.kv_indices");
    a = s.args;
    a.q_stride_row = 16 * 576 * 2;
    FAILS(mla_decode(s.ctx, s.plan, &a, s.ws, s.ws_bytes, nullptr), MLA_ERROR_INVALID_ARGUMENT, "args.q_stride_row");
    FAILS(mla_decode(s.ctx, s.plan, &s.args, 0, s.ws_bytes, nullptr), MLA_ERROR_INVALID_ARGUMENT, "workspace");
    FAILS(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes - 1, nullptr), MLA_ERROR_CAPACITY, "workspace_bytes");
    FAILS(mla_plan_update(s.ctx, s.plan, nullptr, 1, 0), MLA_ERROR_INVALID_ARGUMENT, "kv_lens is NULL");
  }
  SECTION("a shape with no kernel names the closest") {
    Session s;
    mla_selection sel;
    mla_shape sh = shape16(32);
    FAILS(mla_select(s.ctx, &sh, MLA_SELECT_ALLOW_PADDING, &sel), MLA_ERROR_NO_KERNEL,
          "mla_decode_fp8fp8_h16_qs1_pg16 (gfx942): differs in heads 16 (asked 32)");
    sh = shape16();
    sh.kv_dtype = MLA_DTYPE_BF16;
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_NO_KERNEL, "no decode kernel");
    CHECK_THAT(mla_last_error(), Contains("differs in kv_dtype fp8 (asked bf16)"));
    sh = shape16();
    sh.page_size = 12;
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "page_size = 12");
    sh = shape16();
    sh.q_dtype = mla_dtype(5);
    FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.q_dtype");
    // A gfx950 device sees no gfx942 kernel.
    mla_device* d950;
    mla_context* c950;
    OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx950", &d950));
    OK(mla_context_create(d950, catalog_dir().c_str(), &c950));
    sh = shape16();
    FAILS(mla_select(c950, &sh, 0, &sel), MLA_ERROR_NO_KERNEL, "gfx950");
    mla_context_destroy(c950);
    mla_device_close(d950);
  }
  SECTION("negative, short and overflowing kv lengths; capacity") {
    Session s;
    mla_shape sh = shape16();
    OK(mla_select(s.ctx, &sh, 0, &s.sel));
    OK(mla_plan_create(s.ctx, &s.sel, 4, 0, &s.plan));
    mla_decode_args a{};
    FAILS(mla_decode(s.ctx, s.plan, &a, 0, 0, nullptr), MLA_ERROR_INVALID_ARGUMENT, "mla_plan_update first");
    std::vector<int32_t> lens = {40, -5};
    FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), 2, 0), MLA_ERROR_INVALID_ARGUMENT, "kv_lens[1] = -5");
    lens = {0};
    OK(mla_plan_update(s.ctx, s.plan, lens.data(), 1, 0));  // a request with no KV (issue #31)
    lens = {INT32_MAX, INT32_MAX, INT32_MAX};
    FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), 3, 0), MLA_ERROR_INVALID_ARGUMENT, "kv_lens[0] = 2147483647");
    CHECK_THAT(mla_last_error(), Contains("2^30"));
    lens = {16, 16, 16, 16};  // a block table of stride 2^29: the last row starts at entry 3*2^29
    FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), 4, 1 << 29), MLA_ERROR_INVALID_ARGUMENT,
          "page table has 1610612737 entries");
    lens = {100, 200};
    FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), 2, 4), MLA_ERROR_INVALID_ARGUMENT, "block_table_stride = 4");
    OK(mla_plan_update(s.ctx, s.plan, nullptr, 0, 0));  // an empty batch
    FAILS(mla_plan_update(s.ctx, s.plan, lens.data(), -1, 0), MLA_ERROR_INVALID_ARGUMENT, "batch = -1");
    std::vector<int32_t> many(5, 300);
    FAILS(mla_plan_update(s.ctx, s.plan, many.data(), 5, 0), MLA_ERROR_CAPACITY, "max_batch = 4");
    mla_plan* small = nullptr;
    OK(mla_plan_create(s.ctx, &s.sel, 4, 1000, &small));
    FAILS(mla_plan_update(s.ctx, small, many.data(), 4, 0), MLA_ERROR_CAPACITY, "max_total_tokens");
    mla_plan_destroy(small);
    FAILS(mla_plan_create(s.ctx, &s.sel, 0, 0, &small), MLA_ERROR_INVALID_ARGUMENT, "max_batch = 0");
    FAILS(mla_plan_create(s.ctx, &s.sel, 4, -1, &small), MLA_ERROR_INVALID_ARGUMENT, "max_total_tokens = -1");
  }
  SECTION("num_pages whose token count overflows 64 bits is refused (fuzz finding, issue #15)") {
    Session s;
    s.prepare({60, 30});
    mla_decode_args a = s.args;
    a.num_pages = (int64_t(1) << 62) + 1;  // x page_size 16 wraps to 16 in int64
    FAILS(mla_decode(s.ctx, s.plan, &a, s.ws, s.ws_bytes, nullptr), MLA_ERROR_INVALID_ARGUMENT,
          "allowed: < 2^32 tokens");
  }
  SECTION("page ids beyond num_pages: validation mode names the entry; without it the emulator faults") {
    Session s;
    s.prepare({60, 30});
    std::vector<int32_t> idx = s.prob.kv_indices;
    idx[5] = int32_t(s.prob.num_pages()) + 100000;
    OK(mla_memcpy_h2d(s.dev, s.args.kv_indices, idx.data(), idx.size() * 4));
    OK(mla_context_set_option(s.ctx, MLA_OPTION_VALIDATE, 1));
    FAILS(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr), MLA_ERROR_OUT_OF_RANGE,
          fmt::format("kv_indices[5] = {} is not a page id", idx[5]));
    CHECK_THAT(mla_last_error(), Contains("request 1"));
    idx[5] = -1;
    OK(mla_memcpy_h2d(s.dev, s.args.kv_indices, idx.data(), idx.size() * 4));
    FAILS(mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr), MLA_ERROR_OUT_OF_RANGE, "kv_indices[5] = -1");
    idx[5] = int32_t(s.prob.num_pages()) + 100000;
    OK(mla_memcpy_h2d(s.dev, s.args.kv_indices, idx.data(), idx.size() * 4));
    OK(mla_context_set_option(s.ctx, MLA_OPTION_VALIDATE, 0));
    mla_status st = mla_decode(s.ctx, s.plan, &s.args, s.ws, s.ws_bytes, nullptr);
    INFO(mla_last_error());
    CHECK(st == MLA_ERROR_BACKEND);  // the emulator's bounds check (on hardware: a memory fault)
  }
  SECTION("corrupt, truncated and wrong-target code objects; argument layout mismatch") {
    {
      std::string d = catalog_copy("corrupt");
      { std::ofstream(decode_co(d), std::ios::binary | std::ios::trunc) << "this is not an ELF file"; }
      Session s(d);
      mla_shape sh = shape16();
      OK(mla_select(s.ctx, &sh, 0, &s.sel));  // selection reads only catalog.json
      FAILS(mla_plan_create(s.ctx, &s.sel, 1, 0, &s.plan), MLA_ERROR_CODE_OBJECT, "not a code object");
      CHECK(s.plan == nullptr);
    }
    {
      std::string d = catalog_copy("truncated");
      std::string co = decode_co(d);
      fs::resize_file(co, 200);  // a valid ELF header, nothing behind it
      Session s(d);
      mla_shape sh = shape16();
      OK(mla_select(s.ctx, &sh, 0, &s.sel));
      FAILS(mla_plan_create(s.ctx, &s.sel, 1, 0, &s.plan), MLA_ERROR_CODE_OBJECT, co);
    }
    {
      std::string d = catalog_copy("target");
      std::string co = decode_co(d);
      {
        std::fstream f(co, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(48);
        f.put(char(0x4f));  // e_flags mach: gfx950
      }
      Session s(d);
      mla_shape sh = shape16();
      OK(mla_select(s.ctx, &sh, 0, &s.sel));
      FAILS(mla_plan_create(s.ctx, &s.sel, 1, 0, &s.plan), MLA_ERROR_TARGET_MISMATCH, "built for gfx950, the device is gfx942");
    }
    {
      std::string d = catalog_copy("args");
      fs::path cj = fs::path(d) / "hsa" / "gfx942" / "mla" / "catalog.json";
      nlohmann::json j;
      { std::ifstream(cj) >> j; }
      for (auto& k : j["kernels"])
        if (k["shape"]["kind"] == "mla_decode")
          for (auto& a : k["args"])
            if (a["name"] == "kv_scale") a["offset"] = a["offset"].get<int>() + 4;
      { std::ofstream(cj) << j.dump(1); }
      Session s(d);
      mla_shape sh = shape16();
      OK(mla_select(s.ctx, &sh, 0, &s.sel));
      FAILS(mla_plan_create(s.ctx, &s.sel, 1, 0, &s.plan), MLA_ERROR_KERNARG_MISMATCH, "'kv_scale'");
    }
    {
      std::string d = catalog_copy("json");
      { std::ofstream(fs::path(d) / "hsa" / "gfx942" / "mla" / "catalog.json") << "{ not json"; }
      mla_device* dev;
      mla_context* ctx = nullptr;
      OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", &dev));
      FAILS(mla_context_create(dev, d.c_str(), &ctx), MLA_ERROR_CATALOG, "catalog.json");
      mla_device_close(dev);
    }
    {
      // The launch geometry is parsed once, when the catalog opens: a missing field is named there.
      std::string d = catalog_copy("geometry");
      fs::path cj = fs::path(d) / "hsa" / "gfx942" / "mla" / "catalog.json";
      nlohmann::json j;
      { std::ifstream(cj) >> j; }
      for (auto& k : j["kernels"])
        if (k["shape"]["kind"] == "mla_decode") k["geometry"].erase("tile_tokens");
      { std::ofstream(cj) << j.dump(1); }
      mla_device* dev;
      mla_context* ctx = nullptr;
      OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", &dev));
      FAILS(mla_context_create(dev, d.c_str(), &ctx), MLA_ERROR_CATALOG, "geometry.tile_tokens is missing");
      mla_device_close(dev);
    }
    // A prefix kernel's modeled issue (the planner prices the prefix launch by it) is required,
    // each figure a positive number.
    for (const char* bad : {"absent", "zero"}) {
      std::string d = catalog_copy(std::string("issue-") + bad);
      fs::path cj = fs::path(d) / "hsa" / "gfx942" / "mla" / "catalog.json";
      nlohmann::json j;
      { std::ifstream(cj) >> j; }
      int prefixes = 0;
      for (auto& k : j["kernels"])
        if (k["shape"]["kind"] == "mla_prefix") {
          ++prefixes;
          REQUIRE(k["issue_model"]["cycles_per_block_tile"].get<double>() > 0);
          if (std::string(bad) == "absent") k.erase("issue_model");
          else k["issue_model"]["cycles_per_block_tile"] = 0;
        }
      REQUIRE(prefixes > 0);
      { std::ofstream(cj) << j.dump(1); }
      mla_device* dev;
      mla_context* ctx = nullptr;
      OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", &dev));
      FAILS(mla_context_create(dev, d.c_str(), &ctx), MLA_ERROR_CATALOG,
            std::string(bad) == "absent" ? "no issue_model" : "issue_model.cycles_per_block_tile = 0 (allowed: a finite number > 0)");
      mla_device_close(dev);
    }
  }
}

namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
T get_le(const std::vector<uint8_t>& b, size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}
template <class T>
void put_le(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// Offset of the first PT_NOTE program header (ELF64: e_phoff at 32, e_phentsize at 54, e_phnum at 56).
size_t note_phdr(const std::vector<uint8_t>& b) {
  const uint64_t phoff = get_le<uint64_t>(b, 32);
  const uint16_t phent = get_le<uint16_t>(b, 54), phnum = get_le<uint16_t>(b, 56);
  for (uint16_t i = 0; i < phnum; ++i)
    if (get_le<uint32_t>(b, phoff + size_t(i) * phent) == 4 /* PT_NOTE */) return phoff + size_t(i) * phent;
  FAIL("no PT_NOTE program header");
  return 0;
}

// The code-object reader on `b`: its info, or the RtError's status and message.
std::string read_outcome(const std::vector<uint8_t>& b, mla_status* status) {
  try {
    rt::read_code_object_info(b, "co");
    *status = MLA_SUCCESS;
    return "";
  } catch (const rt::RtError& e) {
    *status = e.status;
    return e.what();
  }
}

}  // namespace

// Sparse shapes (docs/sparse.md): each query row is a request, so qseqlen and page_size are 1;
// fp8_ds_mla is FlashMLA's sparse cache, read with bf16 q only. Each refusal names its field.
TEST_CASE("C API: sparse shapes and fp8_ds_mla are refused outside their rules, each named", "[runtime][capi][errors]") {
  Session s;
  mla_selection sel;
  auto sparse = [] {
    mla_shape sh = shape16();
    sh.page_size = 1, sh.sparse = 1;
    return sh;
  };
  mla_shape sh = sparse();
  sh.page_size = 16;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.page_size = 16 with shape.sparse");
  sh = sparse(), sh.qseqlen = 2;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.qseqlen = 2 with shape.sparse");
  sh = sparse(), sh.logit_cap = 1;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.logit_cap = 1 with shape.sparse");
  sh = sparse(), sh.sparse = 2;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.sparse = 2 (allowed: 0, 1)");
  sh = sparse(), sh.q_dtype = MLA_DTYPE_BF16, sh.kv_dtype = MLA_DTYPE_FP8_DS_MLA, sh.sparse = 0;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "MLA_DTYPE_FP8_DS_MLA needs shape.sparse = 1");
  sh = sparse(), sh.kv_dtype = MLA_DTYPE_FP8_DS_MLA;  // fp8 q
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.q_dtype = MLA_DTYPE_BF16");
  sh = sparse(), sh.q_dtype = MLA_DTYPE_FP8_DS_MLA;
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_INVALID_ARGUMENT, "shape.q_dtype = 2 is not a dtype");
  // A valid sparse shape the test catalog has no kernel for: the closest dense kernel differs in
  // its attention.
  sh = sparse();
  FAILS(mla_select(s.ctx, &sh, 0, &sel), MLA_ERROR_NO_KERNEL, "attention dense (asked sparse)");
}

TEST_CASE("code objects: libelf and msgpack read the target and kernel arguments and reject hostile bytes",
          "[runtime][codeobject]") {
  const std::vector<uint8_t> good = read_bytes(decode_co(catalog_dir()));
  const rt::CodeObjectInfo info = rt::read_code_object_info(good, "co");
  CHECK(info.target == "gfx942");
  REQUIRE(info.kernels.size() == 1);
  const rt::CodeObjectKernel& k = info.kernels[0];
  CHECK(k.name == "mla_decode_fp8fp8_h16_qs1_pg16");
  REQUIRE(k.args.size() == std::size(abi::kDecodeArgs));
  for (size_t i = 0; i < k.args.size(); ++i) {
    CHECK(k.args[i].name == abi::kDecodeArgs[i].name);
    CHECK(k.args[i].offset == abi::kDecodeArgs[i].offset);
    CHECK(k.args[i].size == abi::kDecodeArgs[i].size);
  }
  CHECK(k.kernarg_segment_size >= k.args.back().offset + k.args.back().size);

  mla_status st;
  const size_t ph = note_phdr(good);
  SECTION("note segment alignment other than 4 or 8") {
    auto b = good;
    put_le<uint64_t>(b, ph + 48, 2);
    CHECK_THAT(read_outcome(b, &st), Contains("note segment alignment 2"));
    CHECK(st == MLA_ERROR_CODE_OBJECT);
  }
  SECTION("note segment past the end of the file") {
    auto b = good;
    put_le<uint64_t>(b, ph + 32, uint64_t(1) << 40);
    CHECK_THAT(read_outcome(b, &st), Contains("outside"));
    CHECK(st == MLA_ERROR_CODE_OBJECT);
  }
  SECTION("a note whose descriptor size overruns the segment") {
    auto b = good;
    put_le<uint32_t>(b, get_le<uint64_t>(good, ph + 8) + 4, 0x7fffffff);  // first note's n_descsz
    read_outcome(b, &st);
    CHECK(st == MLA_ERROR_CODE_OBJECT);
  }
  SECTION("malformed msgpack in the metadata note") {
    auto b = good;
    const uint8_t name[] = {'A', 'M', 'D', 'G', 'P', 'U', 0};
    auto it = std::search(b.begin() + get_le<uint64_t>(good, ph + 8), b.end(), std::begin(name), std::end(name));
    REQUIRE(it != b.end());
    size_t desc = size_t(it - b.begin()) + 8;  // name padded to 4 bytes
    b[desc] = 0xc1;                            // the one byte msgpack never uses
    CHECK_THAT(read_outcome(b, &st), Contains("msgpack"));
    CHECK(st == MLA_ERROR_CODE_OBJECT);
  }
  SECTION("every truncation and random byte flips: an answer or RtError(CODE_OBJECT), never a crash") {
    for (size_t n = 0; n < good.size(); n += 1 + n / 16) {
      std::vector<uint8_t> b(good.begin(), good.begin() + ptrdiff_t(n));
      read_outcome(b, &st);  // losing only the section headers still leaves a readable note
      CHECK((st == MLA_SUCCESS || st == MLA_ERROR_CODE_OBJECT));
    }
    std::mt19937 rng(14);
    for (int i = 0; i < 300; ++i) {
      auto b = good;
      for (int j = 0; j < 8; ++j) b[rng() % std::min<size_t>(b.size(), 4096)] = uint8_t(rng());
      read_outcome(b, &st);
      CHECK((st == MLA_SUCCESS || st == MLA_ERROR_CODE_OBJECT));
    }
  }
}

TEST_CASE("HIP backend: with no AMD GPU, opening the device fails cleanly", "[runtime][hip]") {
  mla_device* dev = nullptr;
  mla_status st = mla_device_open(MLA_BACKEND_HIP, 0, nullptr, &dev);
  std::string msg = mla_last_error();
  INFO(mla_status_name(st) << ": " << msg);
  if (st == MLA_SUCCESS) {
    WARN("an AMD GPU is present; the no-GPU path is not exercised");
    mla_device_close(dev);
    return;
  }
  CHECK(st == MLA_ERROR_NO_DEVICE);
  CHECK(dev == nullptr);
  if (rt::hip_backend_available()) {
    CHECK_THAT(msg, Contains("no AMD GPU found"));
    CHECK_THAT(msg, Contains("hipErrorNoDevice"));
  }
  // The example program on the HIP backend: a clear message and a non-zero exit.
  auto [code, out] = run(exe_dir() + "/../examples/mla_example --catalog " + catalog_dir());
  INFO(out);
  CHECK(code == 1);
  CHECK_THAT(out, Contains("MLA_ERROR_NO_DEVICE"));
}

TEST_CASE("examples/mla_example runs one batch on the emulator backend", "[runtime][example]") {
  auto [code, out] = run(fmt::format("MLA_CATALOG_DIR={} MLA_EMULATOR_TARGET=gfx942 {}/../examples/mla_example --emulator",
                                     catalog_dir(), exe_dir()));
  INFO(out);
  CHECK(code == 0);
  CHECK_THAT(out, Contains("mla_decode_fp8fp8_h16_qs1_pg16"));
  CHECK_THAT(out, Contains("0 non-finite"));
  CHECK_THAT(out, Contains("ok"));
}
