// mla_decode (mla_runtime.h): its arguments checked against the plan and the uploaded step, then
// the launch sequence of the plan's kernels (decode_ops); and mla_merge_attn_states.
#include "runtime/mla_runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_capi_internal.h"
#include "runtime/mla_runtime_internal.h"

namespace {

void check_stride(int64_t given, int64_t want, const char* field, const char* meaning) {
  if (given != 0 && given != want)
    bad(fmt::format("args.{} = {} (allowed: 0 or {} = {}; the kernels read contiguous tensors: make it contiguous "
                    "first)",
                    field, given, want, meaning));
}

void check_scale(float v, const char* field, bool positive) {
  if (!std::isfinite(v) || (positive ? !(v > 0) : v < 0))
    bad(fmt::format("args.{} = {} (allowed: finite, {})", field, v, positive ? "> 0" : ">= 0"));
}

// Checks the arguments; returns the tensors the kernels get.
DeviceTensors check_args(const mla_plan* plan, const mla_decode_args* a) {
  const SelectedKernels& k = plan->k;
  if (plan->updates == 0) bad("the plan has no batch yet: call mla_plan_update first");
  if (!a->q) bad("args.q is a null device pointer");
  if (!a->kv) bad("args.kv is a null device pointer");
  if (!a->kv_indices) bad("args.kv_indices is a null device pointer");
  if (!a->o) bad("args.o is a null device pointer");
  if (k.return_lse && !a->lse) bad("args.lse is a null device pointer but the shape asks for lse (return_lse = 1)");
  const int64_t H = k.heads, P = k.page_size;
  check_stride(a->q_stride_row, H * kQkDim, "q_stride_row", "heads*576");
  check_stride(a->q_stride_head, kQkDim, "q_stride_head", "576");
  if (k.kv_ds_mla) {  // fp8_ds_mla: bytes
    check_stride(a->kv_stride_page, P * mla::abi::kDsMlaRowBytes, "kv_stride_page", "page_size*656 (fp8_ds_mla bytes)");
    check_stride(a->kv_stride_token, mla::abi::kDsMlaRowBytes, "kv_stride_token", "656 (fp8_ds_mla bytes)");
  } else {
    check_stride(a->kv_stride_page, P * kQkDim, "kv_stride_page", "page_size*576");
    check_stride(a->kv_stride_token, kQkDim, "kv_stride_token", "576");
  }
  check_stride(a->o_stride_row, H * kVDim, "o_stride_row", "heads*512");
  check_stride(a->o_stride_head, kVDim, "o_stride_head", "512");
  if (a->num_pages < 1) bad(fmt::format("args.num_pages = {} (allowed: >= 1, the pages in kv)", a->num_pages));
  if (a->num_pages > (int64_t(1) << 32) / P)  // not num_pages * P: that overflows for num_pages near 2^63
    bad(fmt::format("args.num_pages = {} x page_size {} tokens (allowed: < 2^32 tokens: 32-bit token rows)",
                    a->num_pages, P));
  check_scale(a->sm_scale, "sm_scale", true);
  if (k.logit_cap) check_scale(a->logit_cap, "logit_cap", true);
  DeviceTensors t;
  t.q = a->q;
  t.kv = a->kv;
  t.kv_indices = a->kv_indices;
  t.o = a->o;
  t.lse = k.return_lse ? a->lse : 0;
  t.q_scale = a->q_scale_ptr;
  t.kv_scale = a->kv_scale_ptr;
  t.sm_scale = a->sm_scale;
  t.logit_cap = k.logit_cap ? a->logit_cap : 0.0f;
  t.kv_slots = uint32_t(a->num_pages * P);  // < 2^32 (checked above)
  return t;
}

// The step's tables must be in the workspace before the kernels read them: uploaded by
// mla_plan_upload after the plan's last update, into this workspace. A scale without a device
// pointer is read from the workspace, where the upload wrote its host value: the two must agree.
void check_uploaded(const mla_plan* plan, const mla_decode_args* a, uint64_t workspace) {
  if (plan->uploaded_update != plan->updates)
    bad(plan->uploaded_update == 0
            ? "the plan's tables were never uploaded: call mla_plan_upload after mla_plan_update (once per step)"
            : "the plan was updated after its last mla_plan_upload: upload the new step's tables first");
  if (plan->uploaded_ws != workspace)
    bad(fmt::format("workspace 0x{:x} is not the one the step's tables were uploaded to (0x{:x}): pass the same "
                    "workspace to mla_plan_upload and mla_decode",
                    workspace, plan->uploaded_ws));
  auto host_scale = [&](uint64_t ptr, float v, float uploaded, const char* field, const char* ptr_field) {
    if (ptr) return;
    check_scale(v, field, true);
    if (v != uploaded)
      bad(fmt::format("args.{} = {} but the workspace holds {} from mla_plan_upload (args.{} is 0, so the kernels read "
                      "the uploaded value): upload this value, or give a device pointer",
                      field, v, uploaded, ptr_field));
  };
  host_scale(a->q_scale_ptr, a->q_scale, plan->uploaded_q_scale, "q_scale", "q_scale_ptr");
  host_scale(a->kv_scale_ptr, a->kv_scale, plan->uploaded_kv_scale, "kv_scale", "kv_scale_ptr");
}

// The scales the kernels read: the caller's device pointers, else the workspace's uploaded values.
void scales_of(DeviceTensors& t, uint64_t workspace, const WorkspaceLayout& ws) {
  const uint64_t at = workspace + ws.tables + step_tables::scales;
  if (!t.q_scale) t.q_scale = at;
  if (!t.kv_scale) t.kv_scale = at + 4;
}

// Validation mode: every page id the plan will read must be in 0..num_pages-1. Only those ids
// are read back: a packed table whole (every entry is used), a block table row by row (the
// used pages of each request, not the stride's worth).
void validate_indices(mla_context* ctx, const mla_plan* plan, const mla_decode_args* a) {
  if (plan->k.sparse) return;  // -1 and slots past the cache are masked by the kernel, by contract
  const int P = plan->k.page_size;
  std::vector<int32_t> idx;
  int64_t base = 0;
  for (int b = 0; b < plan->batch; ++b) {
    const int64_t pages = (plan->kv_lens[size_t(b)] + P - 1) / P;
    if (pages == 0) continue;  // a request with no KV reads no page id
    if (plan->bt_stride > 0) base = int64_t(b) * plan->bt_stride;
    idx.resize(size_t(pages));
    ctx->dev->be->d2h(idx.data(), a->kv_indices + uint64_t(base) * sizeof(int32_t), idx.size() * sizeof(int32_t));
    for (int64_t j = 0; j < pages; ++j) {
      int32_t v = idx[size_t(j)];
      if (v < 0 || v >= a->num_pages)
        throw RtError(MLA_ERROR_OUT_OF_RANGE,
                      fmt::format("kv_indices[{}] = {} is not a page id (allowed: 0..{}, num_pages = {}); request {}, "
                                  "page {} of {} (tokens {}..{})",
                                  base + j, v, a->num_pages - 1, a->num_pages, b, j, pages, j * P,
                                  std::min<int64_t>((j + 1) * P, plan->kv_lens[size_t(b)]) - 1));
    }
    if (plan->bt_stride == 0) base += pages;
  }
}

}  // namespace

namespace mla::rt {

std::vector<DecodeOp> decode_ops_of(mla_context*, const mla_plan* plan, const mla_decode_args* args,
                                    uint64_t workspace) {
  DeviceTensors t = check_args(plan, args);
  scales_of(t, workspace, plan->ws);
  return decode_ops(plan->k, plan->ws, plan->batch, t, workspace_addrs(workspace, plan->ws));
}

}  // namespace mla::rt

extern "C" mla_status mla_decode(mla_context* ctx, const mla_plan* plan, const mla_decode_args* args,
                                 uint64_t workspace, size_t workspace_bytes, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(plan, "plan");
    need(args, "args");
    DeviceTensors t = check_args(plan, args);
    if (!workspace) bad("workspace is a null device pointer");
    if (workspace_bytes < plan->ws.total)
      throw RtError(MLA_ERROR_CAPACITY, fmt::format("workspace_bytes = {} < {} (mla_plan_workspace_size)",
                                                    workspace_bytes, plan->ws.total));
    check_uploaded(plan, args, workspace);
    if (plan->batch == 0) return;  // nothing to launch
    if (ctx->validate) validate_indices(ctx, plan, args);
    scales_of(t, workspace, plan->ws);
    ctx->dev->be->run(decode_ops(plan->k, plan->ws, plan->batch, t, workspace_addrs(workspace, plan->ws)), stream);
  });
}

extern "C" mla_status mla_merge_attn_states(mla_context* ctx, const mla_merge_args* args, void* stream) {
  return guard([&] {
    need(ctx, "ctx");
    need(args, "args");
    for (auto [ptr, field] : {std::pair{args->output, "output"}, {args->prefix_output, "prefix_output"},
                              {args->prefix_lse, "prefix_lse"}, {args->suffix_output, "suffix_output"},
                              {args->suffix_lse, "suffix_lse"}})
      if (!ptr) bad(fmt::format("args.{} is a null device pointer", field));
    if (args->num_heads < 1 || args->num_heads > 1024)
      bad(fmt::format("args.num_heads = {} (allowed: 1..1024)", args->num_heads));
    // One workgroup per row: the grid's x is 32-bit.
    if (args->num_tokens < 1 || args->num_tokens > (int64_t(1) << 31) / args->num_heads)
      bad(fmt::format("args.num_tokens = {} (allowed: 1..2^31 / num_heads = {})", args->num_tokens,
                      (int64_t(1) << 31) / args->num_heads));
    const std::string t(name(device_target(ctx)));
    const CatalogKernel* k = nullptr;
    for (const auto& c : ctx->cat.kernels())
      if (c.kind == "mla_merge" && c.target == t) k = &c;
    if (!k)
      throw RtError(MLA_ERROR_NO_KERNEL, fmt::format("{}: no mla_merge_attn_states kernel for {} (it is built with "
                                                     "every decode shape: rebuild the catalog)",
                                                     ctx->cat.dir(), t));
    ctx->dev->be->ensure_module(*k);
    MergeTensors m{args->output, args->prefix_output, args->prefix_lse, args->suffix_output, args->suffix_lse,
                   args->output_lse, uint32_t(args->num_tokens * args->num_heads)};
    ctx->dev->be->run({merge_op(*k, m)}, stream);
  });
}
