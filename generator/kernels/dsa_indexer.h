// The DSA indexer's kernels (docs/sparse.md "The indexer"): shape facts shared by the config
// checks and the builders.
#pragma once
#include "abi/mla_abi.h"
#include "spec/kernel_spec.h"

namespace mla::gen {

// The logits kernel keeps every query row of its request in registers as MFMA A operands
// (16 VGPRs per 32 rows) beside their weights (as many again): 256 rows is 256 VGPRs of them.
inline constexpr int kMaxIndexerRows = 256;
// Heads rounded up to 8: each group of 8 rows a lane's 32x32 MFMA result holds then belongs to
// one query row, so which row a result register adds into is known when the kernel is built.
inline int indexer_padded_heads(const KernelSpec& s) { return (s.heads + 7) / 8 * 8; }
inline int indexer_rows(const KernelSpec& s) { return s.next_n * indexer_padded_heads(s); }

// The top-k kernel's shape (dsa_topk.cpp), which mlabench's model prices: threads per row, keys
// each thread has in flight in a histogram pass, and 64-key groups each wave has in flight in the
// count and write passes. A row (or segment) of at most kTopkResidentKeys logits is read once:
// each wave's groups stay in registers through every pass.
inline constexpr int kTopkThreads = 1024, kTopkHistKeysPerThread = 16, kTopkGroupsPerWave = 16;
inline constexpr int kTopkResidentKeys = kTopkThreads * kTopkGroupsPerWave;
static_assert(kTopkResidentKeys == abi::kTopkResidentLogits, "the runtime splits rows by it");

}  // namespace mla::gen
