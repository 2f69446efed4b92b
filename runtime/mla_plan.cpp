// Plans and their workspace (mla_runtime.h's mla_plan_*): a plan made from a selection, its update
// per step (the host-side planning into the plan's own storage), what it describes, and the upload
// of its step tables into a workspace.
#include "runtime/mla_runtime.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_capi_internal.h"
#include "runtime/mla_runtime_internal.h"
#include "runtime/planner.h"
#include "runtime/problem.h"

static_assert(sizeof(mla_work_unit) == sizeof(WorkUnit), "mla_work_unit mirrors WorkUnit");
static_assert(sizeof(mla_reduce_entry) == sizeof(ReduceEntry) &&
                  offsetof(mla_reduce_entry, bf16_splits) == offsetof(ReduceEntry, bf16_splits),
              "mla_reduce_entry mirrors ReduceEntry");
static_assert(sizeof(mla_prefix_unit) == sizeof(mla::abi::PrefixUnit) && offsetof(mla_prefix_unit, rows) == offsetof(mla::abi::PrefixUnit, rows) &&
                  offsetof(mla_prefix_unit, first_request) == offsetof(mla::abi::PrefixUnit, first_request),
              "mla_prefix_unit mirrors mla::abi::PrefixUnit");

namespace {

const CatalogKernel& find_kernel(const mla_context* ctx, const char (&name)[128], const char* kind,
                                 const std::string& target) {
  // A name field that fills its array without a terminator is not a name (and strlen would run on).
  if (!std::memchr(name, 0, sizeof name)) bad(fmt::format("selection's {} kernel name is not NUL-terminated within 128 bytes", kind));
  for (const auto& k : ctx->cat.kernels())
    if (k.name == name && k.kind == kind && k.target == target) return k;
  bad(fmt::format("selection names {} kernel '{}', which the catalog {} does not hold for {}", kind, name,
                  ctx->cat.dir(), target));
}

// A selection is only names: a stale or forged one could name kernels of another shape, which
// would read and write out of bounds on the device. Each field of the named kernels is checked
// against the caller's shape: exact, or (a padded selection) heads and qseqlen at least the
// caller's; the reduce kernel must be the decode kernel's.
void check_selection(const Selection& ks, const DecodeShape& s, const mla_selection& sel) {
  const auto& d = ks.decode.shape;
  auto mismatch = [&](const char* field, const std::string& kernel_has, const std::string& shape_has) {
    bad(fmt::format("selection: decode kernel {} has {} = {}, the shape {} (allowed: the kernel mla_select names for "
                    "this shape)",
                    ks.decode.name, field, kernel_has, shape_has));
  };
  if (d.value("q_dtype", "") != name(s.q_dtype)) mismatch("q_dtype", d.value("q_dtype", ""), std::string(name(s.q_dtype)));
  if (d.value("kv_dtype", "") != s.kv_name()) mismatch("kv_dtype", d.value("kv_dtype", ""), s.kv_name());
  if (d.value("attention", "dense") != (s.sparse ? "sparse" : "dense"))
    mismatch("attention", d.value("attention", "dense"), s.sparse ? "sparse" : "dense");
  if (d.value("page_size", 0) != s.page_size)
    mismatch("page_size", std::to_string(d.value("page_size", 0)), std::to_string(s.page_size));
  if (d.value("return_lse", false) != s.return_lse)
    mismatch("return_lse", d.value("return_lse", false) ? "1" : "0", s.return_lse ? "1" : "0");
  if (d.value("logit_cap", false) != s.logit_cap)
    mismatch("logit_cap", d.value("logit_cap", false) ? "1" : "0", s.logit_cap ? "1" : "0");
  const int kh = d.value("heads", 0), kq = d.value("qseqlen", 0);
  const bool padded = sel.fallback == MLA_FALLBACK_PADDED;
  if (padded ? (kh < s.heads || kq < s.qseqlen) : (kh != s.heads || kq != s.qseqlen))
    bad(fmt::format("selection: decode kernel {} (heads {}, qseqlen {}) cannot run heads {} qseqlen {} ({})", ks.decode.name,
                    kh, kq, s.heads, s.qseqlen, padded ? "a padded kernel needs at least the shape's" : "fallback NONE: exact"));
  const auto& r = ks.reduce.shape;
  if (r.value("heads", 0) != kh || r.value("qseqlen", 0) != kq || r.value("return_lse", false) != s.return_lse)
    bad(fmt::format("selection: reduce kernel {} is not the reduce kernel of {} (heads {}, qseqlen {}, lse {})",
                    ks.reduce.name, ks.decode.name, kh, kq, s.return_lse ? 1 : 0));
}

}  // namespace

namespace mla::rt {

const Plan& plan_of(const mla_plan* plan) { return plan->plan; }

}  // namespace mla::rt

extern "C" {

mla_status mla_plan_create(mla_context* ctx, const mla_selection* sel, int max_batch, int64_t max_total_tokens,
                           mla_plan** out) {
  return guard([&] {
    need(ctx, "ctx");
    need(sel, "sel");
    need(out, "out (mla_plan**)");
    *out = nullptr;
    if (max_batch < 1 || max_batch > (1 << 20)) bad(fmt::format("max_batch = {} (allowed: 1..{})", max_batch, 1 << 20));
    if (max_total_tokens < 0 || max_total_tokens > (int64_t(1) << 40))
      bad(fmt::format("max_total_tokens = {} (allowed: 0..2^40, 0 = unbounded)", max_total_tokens));
    DecodeShape s = to_shape(ctx, sel->shape);
    std::string t = name(s.target);
    Selection ks{find_kernel(ctx, sel->decode_kernel, "mla_decode", t), find_kernel(ctx, sel->reduce_kernel, "mla_reduce", t),
                 std::nullopt};
    if (!std::memchr(sel->prefix_kernel, 0, sizeof sel->prefix_kernel) || sel->prefix_kernel[0]) {
      ks.prefix = find_kernel(ctx, sel->prefix_kernel, "mla_prefix", t);
      // The default prefix kernel (mla_select's), or the shape's wide one named by the caller.
      if (!prefix_matches(*ks.prefix, ks.decode, ks.prefix->shape.value("prefix_rows", 0)))
        bad(fmt::format("selection: prefix kernel {} is not the prefix kernel of decode kernel {} (allowed: \"\" or the "
                        "one mla_select names)",
                        ks.prefix->name, ks.decode.name));
    }
    const int32_t fallback_bits = enum_bits(sel->fallback);
    if (fallback_bits != MLA_FALLBACK_NONE && fallback_bits != MLA_FALLBACK_PADDED)
      bad(fmt::format("selection: fallback = {} (allowed: MLA_FALLBACK_NONE, MLA_FALLBACK_PADDED)", fallback_bits));
    check_selection(ks, s, *sel);
    auto p = std::make_unique<mla_plan>();
    p->k = selected_kernels(ks, s);
    // A plan made with cascades off never has prefix units: it launches no prefix kernel (the
    // launches of a plan are fixed at creation, for graph capture).
    if (ctx->cascade == CascadePolicy::never) p->k.prefix.reset();
    if (ctx->merge_in_launch && ctx->cascade != CascadePolicy::never)
      bad("MLA_OPTION_MERGE = 1 with MLA_OPTION_CASCADE != 2 (allowed: cascades off, set MLA_OPTION_CASCADE 2 before "
          "mla_plan_create; a cascade's prefix partials are merged by the reduce launch)");
    p->merge_in_launch = ctx->merge_in_launch;
    // Load and check both code objects now (per-device cache): target, metadata vs catalog.
    ctx->dev->be->ensure_module(p->k.decode);
    ctx->dev->be->ensure_module(p->k.reduce);
    if (p->k.prefix) ctx->dev->be->ensure_module(*p->k.prefix);
    p->max_batch = max_batch;
    p->max_tokens = max_total_tokens;
    p->num_cus = ctx->planned_cus();
    p->wpc = ctx->wpc;
    p->ws = workspace_layout(p->k, max_batch, max_total_tokens, p->num_cus, p->wpc,
                             p->merge_in_launch);
    if (p->ws.total > (size_t(1) << 46))
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace of {} bytes for max_batch {} max_total_tokens {}: too "
                                                    "large (give a token bound)",
                                                    p->ws.total, max_batch, max_total_tokens));
    // The grids are 32-bit per dimension.
    if (p->ws.max_units > (size_t(1) << 31))
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("{} work units for max_batch {} max_total_tokens {}: too many for "
                                                    "one launch (give a token bound)",
                                                    p->ws.max_units, max_batch, max_total_tokens));
    p->be = ctx->dev->be.get();
    p->tables = static_cast<uint8_t*>(p->be->host_alloc(p->ws.tables_bytes));
    p->tables_used = pack_step_tables(Plan{}, 1.0f, 1.0f, p->ws, p->tables);
    p->kv_lens.reserve(size_t(max_batch));
    p->next_lens.reserve(size_t(max_batch));
    p->groups.reserve(size_t(max_batch / 2 + 1));
    p->inputs = plan_inputs_for(p->k, {}, p->num_cus, p->wpc);
    p->inputs.max_units = int64_t(p->ws.max_units);
    p->inputs.max_partials = int64_t(p->ws.max_partials);
    p->inputs.merge_in_launch = p->merge_in_launch;
    *out = p.release();
  });
}

void mla_plan_destroy(mla_plan* plan) { delete plan; }

mla_status mla_plan_workspace_size(const mla_plan* plan, size_t* out) {
  return guard([&] {
    need(plan, "plan");
    need(out, "out_bytes");
    *out = plan->ws.total;
  });
}

namespace {

// The host-side planning of mla_plan_update(_shared). `groups` (caller-given, or nullptr) wins
// over `host_pages` (a host page table to detect groups in, or nullptr).
void update_plan(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride,
                 const int32_t* host_pages, const std::span<const PrefixGroup>* groups) {
  {
    need(ctx, "ctx");
    need(plan, "plan");
    if (batch > 0) need(kv_lens, "kv_lens");
    if (batch < 0 || batch > plan->max_batch) {
      if (batch > plan->max_batch)
        throw RtError(MLA_ERROR_CAPACITY, fmt::format("batch = {} exceeds the plan's max_batch = {}", batch, plan->max_batch));
      bad(fmt::format("batch = {} (allowed: 0..max_batch = {})", batch, plan->max_batch));
    }
    if (stride < 0) bad(fmt::format("block_table_stride = {} (allowed: 0 = packed, or > 0)", stride));
    const SelectedKernels& k = plan->k;
    int64_t tokens = 0, entries = 0;
    std::vector<int>& lens = plan->next_lens;  // reserved for max_batch at creation: no allocation
    lens.clear();
    for (int b = 0; b < batch; ++b) {
      int64_t v = kv_lens[b];
      // 0: a request with no KV (a padded graph batch, a context-parallel rank without its
      // tokens): o = 0 and lse = -inf.
      if (v < 0 || (v > 0 && v < k.qseqlen))
        bad(fmt::format("kv_lens[{}] = {} (allowed: 0 for a request with no KV, or >= qseqlen = {}; a request holds "
                        "its own query rows)",
                        b, v, k.qseqlen));
      if (v > 0 && v < k.kqseqlen)
        bad(fmt::format("kv_lens[{}] = {} < {} = the padded kernel's qseqlen (kernel {}): too short to pad", b, v,
                        k.kqseqlen, k.decode.name));
      if (v > (int64_t(1) << 30))
        bad(fmt::format("kv_lens[{}] = {} (allowed: qseqlen..2^30 tokens: the kernels count tokens in 32 bits)", b, v));
      int64_t pages = (v + k.page_size - 1) / k.page_size;
      if (stride > 0 && pages > stride)
        bad(fmt::format("kv_lens[{}] = {} needs {} pages > block_table_stride = {}", b, v, pages, stride));
      tokens += v;
      entries = stride > 0 ? (pages ? int64_t(b) * stride + pages : entries) : entries + pages;
      lens.push_back(int(v));
    }
    // The kernel addresses the page table with 32-bit byte offsets: entries * 4 < 2^32.
    if (entries >= (int64_t(1) << 30))
      bad(fmt::format("the batch's page table has {} entries (allowed: < 2^30; total tokens {})", entries, tokens));
    if (plan->max_tokens > 0 && tokens > plan->max_tokens)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("the batch holds {} kv tokens, more than the plan's max_total_tokens "
                                                    "= {}",
                                                    tokens, plan->max_tokens));
    PlanInputs& in = plan->inputs;
    in.kv_lens = std::span<const int>(lens);
    in.prefix_groups = {};
    if (groups) {
      in.prefix_groups = *groups;
    } else if (host_pages) {
      detect_prefix_groups(lens, k.page_size, k.qseqlen, in.tile_tokens, PageTableView{host_pages, stride}, plan->groups);
      in.prefix_groups = std::span<const PrefixGroup>(plan->groups);
    }
    // A merging plan stays without cascades whatever the option says now (its launches are fixed).
    in.cascade = plan->merge_in_launch ? CascadePolicy::never : ctx->cascade;
    Plan& p = plan->next;
    plan_decode(in, p, plan->scratch);
    in.kv_lens = {};  // no view outlives the call
    in.prefix_groups = {};
    if (stride > 0) {
      for (auto& u : p.units) u.page_base = u.batch * stride;
      for (auto& u : p.prefix_units) u.page_base = u.first_request * stride;
    }
    if (p.units.size() + p.prefix_units.size() > plan->ws.max_units || size_t(p.num_partials) > plan->ws.max_partials ||
        p.reduces.size() > plan->ws.max_reduces)
      throw RtError(MLA_ERROR_INTERNAL,
                    fmt::format("plan ({} units, {} partials) exceeds the workspace capacity ({} units, {} partials)",
                                p.units.size(), p.num_partials, plan->ws.max_units, plan->ws.max_partials));
    std::swap(plan->plan, plan->next);
    plan->batch = batch;
    plan->bt_stride = stride;
    plan->kv_lens.swap(lens);
    plan->table_entries = entries;
    plan->json.clear();
    plan->tables_used = pack_step_tables(plan->plan, 1.0f, 1.0f, plan->ws, plan->tables);
    ++plan->updates;
  }
}

}  // namespace

mla_status mla_plan_update(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride) {
  return guard([&] { update_plan(ctx, plan, kv_lens, batch, stride, nullptr, nullptr); });
}

mla_status mla_plan_update_shared(mla_context* ctx, mla_plan* plan, const int32_t* kv_lens, int batch, int32_t stride,
                                  const int32_t* host_kv_indices, const mla_prefix_group* groups, int num_groups) {
  return guard([&] {
    if (num_groups < 0 || (num_groups > 0 && !groups))
      bad(fmt::format("num_groups = {} with groups {} (allowed: groups NULL and 0, or num_groups >= 0 entries)", num_groups,
                      groups ? "set" : "NULL"));
    if (groups) {
      need(plan, "plan");
      // Into the plan's reserved vector: no allocation at a steady group count.
      plan->groups.clear();
      for (int i = 0; i < num_groups; ++i) plan->groups.push_back({groups[i].first, groups[i].count, groups[i].shared_tokens});
      const std::span<const PrefixGroup> g(plan->groups);
      update_plan(ctx, plan, kv_lens, batch, stride, nullptr, &g);
    } else {
      update_plan(ctx, plan, kv_lens, batch, stride, host_kv_indices, nullptr);
    }
  });
}

const char* mla_plan_describe_json(const mla_plan* plan) {
  const char* out = nullptr;
  mla_status st = guard([&] {
    need(plan, "plan");
    auto* p = const_cast<mla_plan*>(plan);
    if (p->json.empty()) p->json = p->plan.to_json().dump();
    out = p->json.c_str();
  });
  return st == MLA_SUCCESS ? out : nullptr;
}

mla_status mla_plan_get_info(const mla_plan* plan, mla_plan_info* out) {
  return guard([&] {
    need(plan, "plan");
    need(out, "out");
    *out = mla_plan_info{};
    out->batch = plan->batch;
    out->max_batch = plan->max_batch;
    out->max_total_tokens = plan->max_tokens;
    out->num_units = int(plan->plan.units.size());
    out->num_prefix_units = int(plan->plan.prefix_units.size());
    out->num_reduce_entries = int(plan->plan.reduces.size());
    out->num_partials = plan->plan.num_partials;
    out->num_cus = plan->num_cus;
    out->balance = plan->plan.balance;
    out->workspace_bytes = plan->ws.total;
    const LaunchGrids g = launch_grids(plan->k, plan->ws);
    out->num_launches = g.launches;
    auto put = [](unsigned (&dst)[3], const Dim3& d) { dst[0] = d.x, dst[1] = d.y, dst[2] = d.z; };
    put(out->decode_grid, g.decode);
    put(out->prefix_grid, g.prefix);
    put(out->reduce_grid, g.reduce);
    out->upload_bytes = plan->tables_used;
  });
}

mla_status mla_plan_get_tables(const mla_plan* plan, const mla_work_unit** units, size_t* num_units,
                               const mla_reduce_entry** reduces, size_t* num_reduces, const int32_t** splits) {
  return guard([&] {
    need(plan, "plan");
    const Plan& p = plan->plan;
    if (units) *units = reinterpret_cast<const mla_work_unit*>(p.units.data());
    if (num_units) *num_units = p.units.size();
    if (reduces) *reduces = reinterpret_cast<const mla_reduce_entry*>(p.reduces.data());
    if (num_reduces) *num_reduces = p.reduces.size();
    if (splits) *splits = reinterpret_cast<const int32_t*>(p.splits.data());
  });
}

mla_status mla_plan_get_prefix_units(const mla_plan* plan, const mla_prefix_unit** units, size_t* num_units) {
  return guard([&] {
    need(plan, "plan");
    const Plan& p = plan->plan;
    if (units) *units = reinterpret_cast<const mla_prefix_unit*>(p.prefix_units.data());
    if (num_units) *num_units = p.prefix_units.size();
  });
}

mla_status mla_plan_upload(mla_context* ctx, mla_plan* plan, uint64_t workspace, size_t workspace_bytes,
                           float q_scale, float kv_scale, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(plan, "plan");
    if (plan->updates == 0) bad("the plan has no batch yet: call mla_plan_update first");
    if (!workspace) bad("workspace is a null device pointer");
    if (workspace_bytes < plan->ws.total)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace_bytes = {} < {} (mla_plan_workspace_size)",
                                                    workspace_bytes, plan->ws.total));
    for (auto [v, field] : {std::pair{q_scale, "q_scale"}, {kv_scale, "kv_scale"}})
      if (!std::isfinite(v) || !(v > 0))
        bad(fmt::format("{} = {} (allowed: finite, > 0; the host value the kernels read when mla_decode_args gives "
                        "no device pointer)",
                        field, v));
    std::memcpy(plan->tables + step_tables::scales, &q_scale, 4);
    std::memcpy(plan->tables + step_tables::scales + 4, &kv_scale, 4);
    // Into the plan's reused operations (assigned in place: nothing is allocated after the
    // first upload into a workspace).
    std::vector<DecodeOp>& ops = plan->upload_ops;
    const bool zero = plan->k.padded() && plan->zeroed_ws != workspace;
    const bool zero_counters = plan->ws.merge_in_launch && plan->counters_ws != workspace;
    ops.resize(1 + (zero ? 1 : 0) + (zero_counters ? 1 : 0));
    if (zero_counters) {
      // The in-launch merge's arrival counters start at 0; every merge resets its own, so one
      // zeroing per workspace serves every later launch (stream-ordered, before the first).
      DecodeOp& z = ops[zero ? 1 : 0];
      z.kind = DecodeOp::Memset;
      z.dst = workspace + plan->ws.counters;
      z.bytes = plan->ws.counters_bytes;
      z.value = 0;
      z.what = "zero the merge counters (once per workspace)";
    }
    if (zero) {
      // The padding rows and heads of q are never written by mla_decode's copies: zero them once
      // per workspace (stream-ordered, before the first decode that reads them).
      DecodeOp& z = ops[0];
      z.kind = DecodeOp::Memset;
      z.dst = workspace + plan->ws.q_pad;
      z.bytes = plan->ws.q_pad_bytes;
      z.value = 0;
      z.what = "zero padded q (once per workspace)";
    }
    DecodeOp& up = ops.back();
    up.kind = DecodeOp::H2D;
    up.dst = workspace + plan->ws.tables;
    up.host = plan->tables;
    up.bytes = plan->tables_used;
    up.what = "upload the step tables";
    ctx->dev->be->run(ops, stream);
    if (plan->k.padded()) plan->zeroed_ws = workspace;
    if (plan->ws.merge_in_launch) plan->counters_ws = workspace;
    plan->uploaded_update = plan->updates;
    plan->uploaded_ws = workspace;
    plan->uploaded_q_scale = q_scale;
    plan->uploaded_kv_scale = kv_scale;
  });
}

}  // extern "C"
