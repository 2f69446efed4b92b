// The DSA indexer's launches (docs/sparse.md "The indexer"): the logits kernel of a shape from the
// catalog, its chunk size and its launch.
#pragma once
#include "runtime/backend.h"
#include "runtime/catalog.h"
#include "runtime/mla_runtime.h"

namespace mla::rt {

// Tokens per workgroup of the logits kernel: one round of workgroups over the device
// (num_cus x resident_per_cu), a multiple of abi::kIndexerTileTokens. A function of the capacity
// only (batch, max_context_len).
int indexer_chunk_tokens(int batch, int max_context_len, int num_cus, int resident_per_cu);
// The catalog's dsa_indexer_logits kernel of the shape (MLA_ERROR_NO_KERNEL naming the config entry
// to add otherwise).
const CatalogKernel& indexer_logits_kernel(const Catalog& cat, Target target, int heads, int next_n, int block_size);
DecodeOp indexer_logits_op(const CatalogKernel& kernel, const mla_indexer_logits_args& a, int chunk_tokens);
// The top-k kernel of the target.
const CatalogKernel& indexer_topk_kernel(const Catalog& cat, Target target);
// How the top-k runs: one launch (segments 1), or two: each row's `segments` segments of
// segment_tokens positions, then the row over their candidates (segments x topk entries of 8
// bytes per row in the workspace); from the capacity only, with topk a multiple of 4.
// - A row of at most abi::kTopkResidentLogits positions: one launch (read once, kept in registers).
// - Else, where segments of at most that many positions can have candidates that fit it too within
//   four rounds of the CUs (and no more rounds than the fewest take), such segments (S = sqrt(stride / topk) where it lies between): every
//   workgroup reads its logits once.
// - Else, where a row is much longer than topk (stage 1 reads stride / S per workgroup, stage 2
//   S x topk: S = sqrt(stride / topk) balances them) and the rows leave CUs for the segments
//   (S <= num_cus / rows), from 3 segments up.
struct TopkSplit {
  int segments = 1;
  int segment_tokens = 0;
  uint64_t workspace_bytes(int rows, int topk) const {
    return segments > 1 ? uint64_t(rows) * uint64_t(segments) * uint64_t(topk) * 8 : 0;
  }
};
TopkSplit indexer_topk_split(int rows, int64_t logits_stride, int topk, int num_cus);
// The launches of mla_indexer_topk (args checked; workspace as the split asks).
std::vector<DecodeOp> indexer_topk_ops(const CatalogKernel& kernel, const mla_indexer_topk_args& a, const TopkSplit& split);

}  // namespace mla::rt
