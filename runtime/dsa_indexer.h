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
// The top-k kernel of the target and its launch (one workgroup per row).
const CatalogKernel& indexer_topk_kernel(const Catalog& cat, Target target);
DecodeOp indexer_topk_op(const CatalogKernel& kernel, const mla_indexer_topk_args& a);

}  // namespace mla::rt
