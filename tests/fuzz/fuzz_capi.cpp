// The C API's select / plan / update path on the emulator backend, against the small catalog
// that the build makes with mlagen (capi_catalog.json). The fuzz bytes are decoded into a shape,
// selection flags, a plan's capacity, context options, and a few batches (kv lengths, page-table
// stride, host page tables and caller groups); planning only, no decode dispatch (too slow).
//
// Findings are crashes, sanitizer reports, and plans that break the tables' contract: a unit (or prefix unit)
// outside its request, or a count that disagrees with mla_plan_get_info. Every error must be a
// status with a message; the API never throws or aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "runtime/mla_runtime.h"

namespace {

mla_device* device() {
  static mla_device* dev = [] {
    mla_device* d = nullptr;
    if (mla_device_open(MLA_BACKEND_EMULATOR, 0, "gfx942", &d) != MLA_SUCCESS) {
      std::fprintf(stderr, "fuzz_capi: mla_device_open: %s\n", mla_last_error());
      std::abort();
    }
    return d;
  }();
  return dev;
}

[[noreturn]] void contract_broken(const char* what) {
  std::fprintf(stderr, "fuzz_capi: plan contract broken: %s\n", what);
  __builtin_trap();
}

// Mostly values the catalog has or their neighbours; sometimes any int.
int pick(FuzzedDataProvider& in, std::initializer_list<int> likely) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  if (k < 200) return likely.begin()[k % likely.size()];
  return in.ConsumeIntegral<int32_t>();
}

int32_t kv_len_of(FuzzedDataProvider& in) {
  const uint8_t k = in.ConsumeIntegral<uint8_t>();
  if (k < 160) return in.ConsumeIntegralInRange<int32_t>(1, 300);
  if (k < 230) return in.ConsumeIntegralInRange<int32_t>(1, 20000);
  return in.ConsumeIntegral<int32_t>();
}

// Stores `bits` in an enum field as a C caller may (any int; a C++ conversion of an int outside
// the enumerators' range would be undefined behaviour here, in the harness).
template <class E>
void set_enum(E& field, int32_t bits) {
  std::memcpy(&field, &bits, sizeof bits);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A host copy of the page table in the layout the stride names, exactly as large as the batch
// needs (so a read past it is caught), or empty when that layout cannot be built here.
std::vector<int32_t> page_table(FuzzedDataProvider& in, const std::vector<int32_t>& lens, int page_size,
                                int32_t stride) {
  if (page_size < 1) return {};
  std::vector<int64_t> start(lens.size()), pages(lens.size());
  int64_t need = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    if (lens[b] < 1) return {};
    pages[b] = ceil_div(lens[b], page_size);
    start[b] = stride > 0 ? int64_t(b) * stride : need;
    if (stride > 0 && pages[b] > stride) return {};
    need = std::max(need, start[b] + pages[b]);
  }
  if (need < 1 || need > (1 << 16)) return {};
  std::vector<int32_t> t(size_t(need), 0);
  // Each row either copies a leading run of the previous row's ids (a shared prefix) or gets
  // fresh ids; sometimes an arbitrary id.
  int32_t next = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    int64_t copied = 0;
    if (b > 0 && in.ConsumeBool())
      copied = std::min(pages[b], int64_t(in.ConsumeIntegralInRange<int32_t>(0, int32_t(std::min<int64_t>(pages[b], pages[b - 1])))));
    for (int64_t i = 0; i < pages[b]; ++i) {
      int32_t& id = t[size_t(start[b] + i)];
      if (i < copied) id = t[size_t(start[b - 1] + i)];
      else if (in.ConsumeIntegral<uint8_t>() < 8) id = in.ConsumeIntegral<int32_t>();
      else id = next++;
    }
  }
  return t;
}

void check_plan(const mla_plan* plan, const std::vector<int32_t>& lens) {
  mla_plan_info info{};
  if (mla_plan_get_info(plan, &info) != MLA_SUCCESS) contract_broken("mla_plan_get_info failed after an update");
  const mla_work_unit* units = nullptr;
  const mla_reduce_entry* reduces = nullptr;
  const int32_t* splits = nullptr;
  size_t nu = 0, nr = 0;
  if (mla_plan_get_tables(plan, &units, &nu, &reduces, &nr, &splits) != MLA_SUCCESS) contract_broken("get_tables failed");
  if (info.batch != int(lens.size())) contract_broken("info.batch != batch");
  if (nu != size_t(info.num_units)) contract_broken("units != info.num_units");
  if (nr != size_t(info.num_reduce_entries)) contract_broken("reduces != info.num_reduce_entries");
  for (size_t i = 0; i < nu; ++i) {
    const mla_work_unit& u = units[i];
    if (u.batch < 0 || u.batch >= info.batch) contract_broken("unit batch outside the batch");
    if (u.kv_len != lens[size_t(u.batch)]) contract_broken("unit kv_len != its request's");
    if (!(0 <= u.kv_start && u.kv_start < u.kv_end && u.kv_end <= u.kv_len)) contract_broken("unit token range");
  }
  const mla_prefix_unit* pu = nullptr;
  size_t npu = 0;
  if (mla_plan_get_prefix_units(plan, &pu, &npu) != MLA_SUCCESS) contract_broken("get_prefix_units failed");
  if (npu != size_t(info.num_prefix_units)) contract_broken("prefix units != info.num_prefix_units");
  for (size_t i = 0; i < npu; ++i) {
    const mla_prefix_unit& u = pu[i];
    if (u.first_request < 0 || u.first_request >= info.batch) contract_broken("prefix unit's first request outside the batch");
    if (!(0 <= u.kv_start && u.kv_start < u.kv_end && u.kv_end <= lens[size_t(u.first_request)]))
      contract_broken("prefix unit token range outside its first request");
    if (u.rows < 1 || u.partial < 0 || u.partial >= info.num_partials) contract_broken("prefix unit rows or slot");
  }
  for (size_t i = 0; i < nr; ++i) {
    if (reduces[i].num_splits == 0) {  // a request with no KV (o = 0, lse = -inf)
      if (std::find(lens.begin(), lens.end(), 0) == lens.end()) contract_broken("an empty reduce entry without an empty request");
      continue;
    }
    if (reduces[i].num_splits < 2 || reduces[i].first_partial < 0 ||
        int64_t(reduces[i].first_partial) + int64_t(reduces[i].num_splits - 1) * reduces[i].partial_stride >= info.num_partials)
      contract_broken("reduce entry outside the partials");
  }
  for (size_t i = 0; i < nr; ++i)
    if (reduces[i].bf16_splits < 0 || reduces[i].bf16_splits > reduces[i].num_splits || reduces[i].reserved[0] ||
        reduces[i].reserved[1] || reduces[i].reserved[2])
      contract_broken("reduce entry's bf16 splits or reserved dwords");
  const char* json = mla_plan_describe_json(plan);
  if (!json) contract_broken("describe_json failed after an update");
  (void)std::strlen(json);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  // One context for the process (opening the catalog per input took most of the time); each
  // input starts from the default options, so it replays alone exactly as in the run.
  static mla_context* const ctx = [] {
    mla_context* c = nullptr;
    if (mla_context_create(device(), MLA_FUZZ_CATALOG_DIR, &c) != MLA_SUCCESS) {
      std::fprintf(stderr, "fuzz_capi: mla_context_create: %s\n", mla_last_error());
      std::abort();
    }
    return c;
  }();
  for (mla_option o : {MLA_OPTION_VALIDATE, MLA_OPTION_NUM_CUS, MLA_OPTION_WORKGROUPS_PER_CU, MLA_OPTION_RECORD_LAUNCHES,
                       MLA_OPTION_CASCADE})
    if (mla_context_set_option(ctx, o, 0) != MLA_SUCCESS) contract_broken("resetting an option to its default failed");
  const int num_options = in.ConsumeIntegralInRange(0, 3);
  for (int i = 0; i < num_options; ++i) {
    const int opt = pick(in, {MLA_OPTION_NUM_CUS, MLA_OPTION_WORKGROUPS_PER_CU, MLA_OPTION_CASCADE, MLA_OPTION_VALIDATE});
    const int64_t value = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 400) : in.ConsumeIntegral<int64_t>();
    // By value: C++ can pass only the enumerators' range 0..0x7fffffff (fields take any int below).
    (void)mla_context_set_option(ctx, mla_option(opt & 0x7fffffff), value);
  }
  mla_shape shape{};
  set_enum(shape.q_dtype, pick(in, {MLA_DTYPE_FP8, MLA_DTYPE_FP8, MLA_DTYPE_BF16}));
  set_enum(shape.kv_dtype, pick(in, {MLA_DTYPE_FP8, MLA_DTYPE_FP8, MLA_DTYPE_BF16}));
  shape.heads = pick(in, {16, 16, 8, 12, 1, 32, 128, 0});
  shape.qseqlen = pick(in, {1, 1, 2, 3, 4, 0});
  shape.page_size = pick(in, {16, 1, 64, 0, 3});
  shape.return_lse = pick(in, {0, 0, 1});
  shape.logit_cap = pick(in, {0, 0, 1});
  const unsigned flags = in.ConsumeBool() ? MLA_SELECT_ALLOW_PADDING : in.ConsumeIntegral<unsigned>() & 3u;
  mla_selection sel{};
  if (mla_select(ctx, &shape, flags, &sel) != MLA_SUCCESS) return 0;
  // A caller may hand back a selection it changed; the plan must refuse what does not fit.
  if (in.ConsumeIntegral<uint8_t>() < 16) {
    sel.kernel_heads = pick(in, {16, 8, 32, 0});
    sel.kernel_qseqlen = pick(in, {1, 2, 4, 0});
    sel.shape.heads = pick(in, {16, 12, 1, 0});
    sel.shape.page_size = pick(in, {16, 1, 32});
    set_enum(sel.fallback, pick(in, {0, 1, 2}));
  }
  const int max_batch = pick(in, {1, 4, 16, 64, 0});
  const int64_t max_tokens = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<int64_t>(-1, 1 << 20);
  mla_plan* plan = nullptr;
  if (mla_plan_create(ctx, &sel, max_batch, max_tokens, &plan) != MLA_SUCCESS) return 0;
  size_t ws = 0;
  (void)mla_plan_workspace_size(plan, &ws);
  const int updates = in.ConsumeIntegralInRange(1, 3);
  for (int step = 0; step < updates && in.remaining_bytes() > 0; ++step) {
    const int batch = in.ConsumeBool() ? in.ConsumeIntegralInRange(1, std::max(1, std::min(max_batch, 64)) + 1)
                                       : in.ConsumeIntegralInRange(-1, 300);
    std::vector<int32_t> lens(size_t(std::max(batch, 0)));
    for (auto& l : lens) l = kv_len_of(in);
    const int32_t stride = in.ConsumeBool() ? 0 : pick(in, {64, 1, 20, 1 << 29, -1});
    const int mode = in.ConsumeIntegralInRange(0, 3);
    std::vector<int32_t> table;
    std::vector<mla_prefix_group> groups;
    int num_groups = 0;
    if (mode == 1) table = page_table(in, lens, shape.page_size, stride);
    if (mode == 2) {
      num_groups = in.ConsumeIntegralInRange(0, 4);
      groups.resize(size_t(num_groups));
      for (auto& g : groups) {
        g.first = pick(in, {0, 1, 2, -1});
        g.count = pick(in, {2, 3, 1, 0});
        g.shared_tokens = pick(in, {16, 32, 64, 1, 0, 48});
      }
      if (in.ConsumeIntegral<uint8_t>() < 8) num_groups = -in.ConsumeIntegralInRange(1, 5);
    }
    mla_status st;
    if (mode == 0) {
      st = mla_plan_update(ctx, plan, lens.empty() ? nullptr : lens.data(), batch, stride);
    } else {
      st = mla_plan_update_shared(ctx, plan, lens.empty() ? nullptr : lens.data(), batch, stride,
                                  table.empty() ? nullptr : table.data(), mode == 2 ? groups.data() : nullptr,
                                  num_groups);
    }
    if (st == MLA_SUCCESS) check_plan(plan, lens);
    else if (std::strlen(mla_last_error()) == 0) contract_broken("a failed call left no message");
  }
  size_t ws_after = 0;
  if (mla_plan_workspace_size(plan, &ws_after) == MLA_SUCCESS && ws_after != ws) contract_broken("workspace size changed");
  mla_plan_destroy(plan);
  return 0;
}
