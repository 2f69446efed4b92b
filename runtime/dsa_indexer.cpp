// The DSA indexer's C API (mla_indexer_logits): argument checks, the catalog kernel of the
// shape, its chunk size and its one launch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "abi/mla_abi.h"
#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/dsa_indexer.h"
#include "runtime/mla_capi_internal.h"
#include "runtime/mla_runtime.h"
#include "runtime/mla_runtime_internal.h"

namespace mla::rt {

int indexer_chunk_tokens(int batch, int max_context_len, int num_cus, int resident_per_cu) {
  const int tile = abi::kIndexerTileTokens;
  // One round of workgroups over the device at full residency. Small steps get chunks of one tile:
  // the bytes a wave keeps in flight are few, so only many waves reach the HBM (Little's law);
  // their query rows are re-read from the L2 (docs/sparse.md "The indexer: performance").
  const int64_t slots = int64_t(std::max(1, num_cus)) * std::max(1, resident_per_cu);
  const int64_t tiles = (int64_t(max_context_len) + tile - 1) / tile;
  const int64_t per_wg = (int64_t(batch) * tiles + slots - 1) / slots;
  return int(std::min(per_wg, tiles) * tile);
}

DecodeOp indexer_logits_op(const CatalogKernel& kernel, const mla_indexer_logits_args& a, int chunk_tokens) {
  KernargPacker mk(kernel);
  mk.ptr("logits", a.logits).ptr("q", a.q).ptr("kv_cache", a.kv_cache).ptr("weights", a.weights);
  mk.ptr("context_lens", a.context_lens).ptr("block_table", a.block_table);
  mk.u32("block_table_stride", uint32_t(a.block_table_stride)).u32("logits_stride", uint32_t(a.logits_stride));
  mk.u32("chunk_tokens", uint32_t(chunk_tokens)).u32("max_context_len", uint32_t(a.max_context_len));
  mk.u32("num_blocks", uint32_t(a.num_blocks)).u32("reserved", 0);
  DecodeOp op;
  op.kind = DecodeOp::Launch;
  op.kernel = &kernel;
  op.grid = {unsigned((a.max_context_len + chunk_tokens - 1) / chunk_tokens), unsigned(a.batch), 1};
  op.block = {unsigned(kernel.workgroup_size), 1, 1};
  op.kernarg = mk.finish();
  op.what = "indexer_logits";
  return op;
}

const CatalogKernel& indexer_logits_kernel(const Catalog& cat, Target target, int heads, int next_n, int block_size) {
  const std::string t(name(target));
  for (const auto& c : cat.kernels())
    if (c.kind == "dsa_indexer_logits" && c.target == t && c.shape.value("heads", 0) == heads &&
        c.shape.value("next_n", 0) == next_n && c.shape.value("block_size", 0) == block_size)
      return c;
  throw RtError(MLA_ERROR_NO_KERNEL,
                fmt::format("{}: no dsa_indexer_logits_fp8_h{}_nn{}_pg{} kernel for {} (add an entry "
                            "{{\"kind\": \"dsa_indexer_logits\", \"heads\": {}, \"next_n\": {}, \"block_size\": {}}} "
                            "to a config and rebuild the catalog)",
                            cat.dir(), heads, next_n, block_size, t, heads, next_n, block_size));
}

const CatalogKernel& indexer_topk_kernel(const Catalog& cat, Target target) {
  const std::string t(name(target));
  for (const auto& c : cat.kernels())
    if (c.kind == "dsa_topk" && c.target == t) return c;
  throw RtError(MLA_ERROR_NO_KERNEL, fmt::format("{}: no dsa_topk_per_row_decode kernel for {} (every dsa_indexer_logits "
                                                 "config entry implies it: rebuild the catalog)",
                                                 cat.dir(), t));
}

TopkSplit indexer_topk_split(int rows, int64_t logits_stride, int topk, int num_cus) {
  TopkSplit t;
  constexpr int64_t R = abi::kTopkResidentLogits;
  if (logits_stride <= R || topk % 4) return t;
  auto cut = [&](int64_t s) {  // segments of a multiple of 4 positions (the kernel reads 4 logits at a time)
    t.segment_tokens = int((logits_stride + s - 1) / s + 3) / 4 * 4;
    t.segments = int((logits_stride + t.segment_tokens - 1) / t.segment_tokens);
    return t;
  };
  const int by_cus = std::max(1, num_cus) / std::max(1, rows);
  const int by_balance = int(std::sqrt(double(logits_stride) / double(std::max(1, topk))));
  // Resident: from the fewest segments of at most R positions to the most whose candidates fit R,
  // the balanced count where it lies between, within four rounds of the CUs and no more rounds
  // than the fewest take (modeled: a streamed row reads its logits five times, a resident segment
  // once but with the same five dependent steps; docs/sparse.md "The indexer: performance").
  const int64_t cus = std::max(1, num_cus), fewest = (logits_stride + R - 1) / R;
  const int64_t rounds = (int64_t(std::max(1, rows)) * fewest + cus - 1) / cus;
  const int64_t most = std::min<int64_t>(R / topk, std::min<int64_t>(rounds, 4) * cus / std::max(1, rows));
  if (fewest <= most) return cut(std::clamp<int64_t>(by_balance, fewest, most));
  const int s = std::min({by_cus, by_balance, 64});
  // Two launches pay from three segments up (modeled: at 8K x 1 two segments cost more than the
  // second launch saves); stage 2 reads its candidates 4 at a time: whole groups of 4 per segment.
  if (s < 3) return t;
  return cut(s);
}

std::vector<DecodeOp> indexer_topk_ops(const CatalogKernel& kernel, const mla_indexer_topk_args& a,
                                       const TopkSplit& split) {
  // b = row / next_n as mul_hi(row, ceil(2^32 / next_n)): exact for next_n <= 8 and rows < 2^26.
  const uint32_t magic = a.next_n == 1 ? 0 : uint32_t(((uint64_t(1) << 32) + uint64_t(a.next_n) - 1) / uint64_t(a.next_n));
  uint32_t page_log2 = 0;
  while (a.block_table && (1 << page_log2) < a.page_size) ++page_log2;
  const uint64_t cand_pos = a.workspace, cand_vals = a.workspace + split.workspace_bytes(a.num_rows, a.topk) / 2;
  auto op_of = [&](uint32_t stage, unsigned grid_x, bool slots) {
    KernargPacker mk(kernel);
    mk.ptr("logits", a.logits).ptr("seq_lens", a.seq_lens).ptr("indices", a.indices);
    mk.ptr("block_table", slots ? a.block_table : 0);
    mk.ptr("cand_vals", stage ? cand_vals : 0).ptr("cand_pos", stage ? cand_pos : 0);
    mk.u32("next_n", uint32_t(a.next_n)).u32("row_div_magic", magic).u32("logits_stride", uint32_t(a.logits_stride));
    mk.u32("indices_stride", uint32_t(a.indices_stride)).u32("topk", uint32_t(a.topk));
    mk.u32("block_table_stride", uint32_t(a.block_table ? a.block_table_stride : 0)).u32("page_size_log2", page_log2);
    mk.u32("segment_tokens", uint32_t(split.segment_tokens)).u32("segments", uint32_t(split.segments));
    mk.u32("stage", stage);
    DecodeOp op;
    op.kind = DecodeOp::Launch;
    op.kernel = &kernel;
    op.grid = {grid_x, unsigned(a.num_rows), 1};
    op.block = {unsigned(kernel.workgroup_size), 1, 1};
    op.kernarg = mk.finish();
    op.what = stage == 1 ? "indexer_topk_segments" : "indexer_topk";
    return op;
  };
  if (split.segments < 2) return {op_of(0, 1, true)};
  // Stage 1 writes positions (slots, if asked, are the last stage's).
  return {op_of(1, unsigned(split.segments), false), op_of(2, 1, true)};
}

}  // namespace mla::rt

namespace {

// Block-table rows are addressed with 32-bit byte offsets (stride x 4).
constexpr int kMaxTableStride = 1 << 28;

// pointers: whether the device pointers are checked too (not for the workspace size).
void check_topk_args(const mla_indexer_topk_args* a, bool pointers) {
  using mla::rt::capi::bad;  // MLA_ERROR_INVALID_ARGUMENT
  if (pointers)
    for (auto [ptr, field] : {std::pair{a->logits, "logits"}, {a->seq_lens, "seq_lens"}, {a->indices, "indices"}})
      if (!ptr) bad(fmt::format("args.{} is a null device pointer", field));
  if (a->next_n < 1 || a->next_n > 8) bad(fmt::format("args.next_n = {} (allowed: 1..8)", a->next_n));
  if (a->num_rows < 1 || a->num_rows > (1 << 24) || a->num_rows % a->next_n)
    bad(fmt::format("args.num_rows = {} (allowed: 1..2^24, a multiple of next_n = {})", a->num_rows, a->next_n));
  if (a->topk < 1 || a->topk > 65536) bad(fmt::format("args.topk = {} (allowed: 1..65536)", a->topk));
  if (a->logits_stride < 4 || a->logits_stride > (int64_t(1) << 30) || a->logits_stride % 4)
    bad(fmt::format("args.logits_stride = {} (allowed: a multiple of 4 in 4..2^30: the kernel reads 4 logits at a "
                    "time; DeepGEMM's logits rows are 256-aligned)",
                    a->logits_stride));
  if (a->indices_stride < a->topk || a->indices_stride > (int64_t(1) << 30))
    bad(fmt::format("args.indices_stride = {} (allowed: topk = {} .. 2^30)", a->indices_stride, a->topk));
  if (a->block_table) {
    if (a->page_size < 1 || a->page_size > (1 << 20) || (a->page_size & (a->page_size - 1)))
      bad(fmt::format("args.page_size = {} (allowed with a block_table: a power of two, 1..2^20)", a->page_size));
    const int64_t blocks = (a->logits_stride + a->page_size - 1) / a->page_size;
    if (a->block_table_stride > kMaxTableStride)
      bad(fmt::format("args.block_table_stride = {} (allowed: at most 2^28: the kernel's byte offsets are 32-bit)",
                      a->block_table_stride));
    if (a->block_table_stride < blocks)
      bad(fmt::format("args.block_table_stride = {} < ceil(logits_stride / page_size) = {} (a row's positions reach "
                      "logits_stride)",
                      a->block_table_stride, blocks));
  }
}

void check_indexer_args(const mla_indexer_logits_args* a) {
  using mla::rt::capi::bad;  // MLA_ERROR_INVALID_ARGUMENT
  for (auto [ptr, field] : {std::pair{a->logits, "logits"}, {a->q, "q"}, {a->kv_cache, "kv_cache"},
                            {a->weights, "weights"}, {a->context_lens, "context_lens"},
                            {a->block_table, "block_table"}})
    if (!ptr) bad(fmt::format("args.{} is a null device pointer", field));
  if (a->batch < 1 || a->batch > 65535) bad(fmt::format("args.batch = {} (allowed: 1..65535)", a->batch));
  if (a->next_n < 1 || a->next_n > 4) bad(fmt::format("args.next_n = {} (allowed: 1..4)", a->next_n));
  if (a->heads < 1 || a->heads > 128) bad(fmt::format("args.heads = {} (allowed: 1..128)", a->heads));
  if (a->block_size < 1 || a->block_size > 64 || (a->block_size & (a->block_size - 1)))
    bad(fmt::format("args.block_size = {} (allowed: 1, 2, 4, .., 64)", a->block_size));
  if (a->max_context_len < 1) bad(fmt::format("args.max_context_len = {} (allowed: >= 1)", a->max_context_len));
  const int64_t blocks_needed = (int64_t(a->max_context_len) + a->block_size - 1) / a->block_size;
  if (a->block_table_stride > kMaxTableStride)
    bad(fmt::format("args.block_table_stride = {} (allowed: at most 2^28: the kernel's byte offsets are 32-bit)",
                    a->block_table_stride));
  if (a->block_table_stride < blocks_needed)
    bad(fmt::format("args.block_table_stride = {} < ceil(max_context_len / block_size) = {}", a->block_table_stride,
                    blocks_needed));
  if (a->logits_stride < a->max_context_len || a->logits_stride > (int64_t(1) << 30))
    bad(fmt::format("args.logits_stride = {} (allowed: max_context_len = {} .. 2^30)", a->logits_stride,
                    a->max_context_len));
  if (a->num_blocks < 1 || a->num_blocks > INT32_MAX)
    bad(fmt::format("args.num_blocks = {} (allowed: 1..2^31-1)", a->num_blocks));
}

}  // namespace

namespace mla::rt {

std::vector<DecodeOp> indexer_topk_ops_of(mla_context* ctx, const mla_indexer_topk_args* args) {
  using namespace capi;
  need(ctx, "ctx");
  need(args, "args");
  check_topk_args(args, true);
  const auto split = indexer_topk_split(args->num_rows, args->logits_stride, args->topk, ctx->planned_cus());
  const uint64_t need_bytes = split.workspace_bytes(args->num_rows, args->topk);
  if (need_bytes && (!args->workspace || args->workspace_bytes < need_bytes))
    throw RtError(MLA_ERROR_CAPACITY, fmt::format("args.workspace: {} bytes at 0x{:x}, {} needed (mla_indexer_topk_workspace_size: "
                                                  "{} rows over {} segments of {} positions)",
                                                  args->workspace_bytes, args->workspace, need_bytes, args->num_rows,
                                                  split.segments, split.segment_tokens));
  return indexer_topk_ops(indexer_topk_kernel(ctx->cat, device_target(ctx)), *args, split);
}

std::vector<DecodeOp> indexer_logits_ops_of(mla_context* ctx, const mla_indexer_logits_args* args) {
  using namespace capi;
  need(ctx, "ctx");
  need(args, "args");
  check_indexer_args(args);
  const auto& k = indexer_logits_kernel(ctx->cat, device_target(ctx), args->heads, args->next_n, args->block_size);
  const int chunk = indexer_chunk_tokens(args->batch, args->max_context_len, ctx->planned_cus(), k.resident_workgroups_per_cu);
  return {indexer_logits_op(k, *args, chunk)};
}

}  // namespace mla::rt

extern "C" mla_status mla_indexer_topk_workspace_size(const mla_context* ctx, const mla_indexer_topk_args* args,
                                                      uint64_t* out_bytes) {
  using namespace mla::rt::capi;
  return guard([&] {
    need(ctx, "ctx");
    need(args, "args");
    need(out_bytes, "out_bytes");
    check_topk_args(args, false);
    *out_bytes = mla::rt::indexer_topk_split(args->num_rows, args->logits_stride, args->topk, ctx->planned_cus())
                     .workspace_bytes(args->num_rows, args->topk);
  });
}

extern "C" mla_status mla_indexer_topk(mla_context* ctx, const mla_indexer_topk_args* args, void* stream) {
  using namespace mla::rt::capi;
  return guard([&] {
    const auto ops = mla::rt::indexer_topk_ops_of(ctx, args);
    ctx->dev->be->ensure_module(*ops.front().kernel);
    ctx->dev->be->run(ops, stream);
  });
}

extern "C" mla_status mla_indexer_logits(mla_context* ctx, const mla_indexer_logits_args* args, void* stream) {
  using namespace mla::rt::capi;
  return guard([&] {
    const auto ops = mla::rt::indexer_logits_ops_of(ctx, args);
    ctx->dev->be->ensure_module(*ops.front().kernel);
    ctx->dev->be->run(ops, stream);
  });
}
