// fp64 CPU reference of the DeepSeek Sparse Attention (DSA) "lightning indexer" at decode, and a
// random problem generator for it: the oracle an indexer kernel's logits and top-k are checked
// against.
//
// Math (DeepSeek-V3.2-Exp inference/model.py Indexer, DeepGEMM fp8_paged_mqa_logits): for query
// row r = b*next_n + i of request b and token t < context_lens[b],
//   logits[r][t] = k_scale[b, t] * sum_{h < heads} max(0, <q[b, i, h, :], k[b, t, :]>) * w[r, h]
// with q and k fp8 (e4m3fnuz on gfx942, e4m3fn on gfx950) decoded by mla_reference.h's own
// decoders, w and k_scale f32, every operation in double.
//
// Layouts (little-endian, packed):
//   q            [batch][next_n][heads][128] fp8 bytes
//   kv_cache     num_blocks blocks of block_size tokens, kIndexerTokenBytes per token: block blk
//                starts at byte blk*block_size*132 and holds block_size*128 fp8 bytes first (token o
//                at +o*128), then block_size f32 scales (token o's at +block_size*128 + o*4).
//   weights      [batch*next_n][heads] f32
//   context_lens [batch] int32
//   block_table  [batch][block_table_stride] int32: token t of request b is at offset t % block_size
//                of block block_table[b][t / block_size]
#pragma once
#include "runtime/problem.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mla::ref {

inline constexpr int kIndexerDim = 128;                     // index head dim
inline constexpr int kIndexerTokenBytes = kIndexerDim + 4;  // fp8 values + f32 scale
inline constexpr int kIndexerMaxBlockSize = 64;             // block_size: 1, 2, 4, ..., 64

struct IndexerProblem {
  rt::Target target = rt::Target::gfx942;  // fp8 flavour of q and k
  int batch = 0, next_n = 0, heads = 0, block_size = 0;
  int max_context_len = 0;     // >= every context_lens[b]
  int block_table_stride = 0;  // >= ceil(max_context_len / block_size)
  int64_t num_blocks = 0;
  std::vector<uint8_t> q, kv_cache;
  std::vector<float> weights;
  std::vector<int32_t> context_lens, block_table;
};

struct IndexerParams {
  rt::Target target = rt::Target::gfx942;
  int batch = 1, next_n = 1, heads = 64, block_size = 64;
  std::vector<int> context_lens;  // one per request
  int extra_blocks = 3;           // blocks of the pool no request uses
  uint64_t seed = 1;
  // > 0: per request, that many groups of 2 to 4 tokens (fewer when the request is too short)
  // whose k rows (values and scale) are exact copies of the group's first token, so their logits
  // tie exactly in every row: material for top-k tie handling.
  int tie_groups = 0;
};

// A random problem, every draw from std::mt19937_64(seed) through portable transforms (the same
// bytes on every standard library):
// - the whole kv_cache starts as random bytes, so unused blocks, the slots past a request's end in
//   its last block and their scales hold garbage (fp8 NaN codes included): a kernel that reads them
//   gets a visibly wrong result;
// - q = 2*N(0,1) encoded to fp8 (saturating);
// - token k rows x = N(0,1)*spread, spread uniform in [0.5, 4] per token, stored as
//   fp8(x / scale) with the f32 scale = amax(|x|) / 224 on gfx942 (vLLM's ROCm cache writer stays
//   below FNUZ's 240) or / 448 on gfx950;
// - weights 0.125*N(0,1), both signs;
// - the pool's block ids (sum of ceil(len / block_size) + extra_blocks) handed out in a random
//   permutation; block_table entries past a request's blocks are -1 (never to be read).
// Throws std::invalid_argument naming the bad parameter.
IndexerProblem make_indexer_problem(const IndexerParams& params);

// The logits above, [batch*next_n][max_context_len]; positions t >= context_lens[b] are NaN.
// Validates the problem first (sizes, lengths, block ids of the tokens read) and throws
// std::invalid_argument naming what is wrong: the reference never reads outside a vector.
std::vector<double> indexer_logits_reference(const IndexerProblem& p);

// The causal end of row i of a request of length len with next_n query rows per step (MTP): the
// last row sees every token, row i the first len - next_n + i + 1 (clamped to [0, len]).
int indexer_row_end(int len, int next_n, int i);

// Top-k of one row over positions [0, end): indices by (logit desc, index asc), min(k, end) of
// them, padded with -1 to k entries.
std::vector<int32_t> topk_reference(std::span<const double> row, int end, int k);

// Checks a kernel's top-k row of k entries against the reference logits of that row. Convention
// (vLLM's top_k_per_row_decode): min(k, end) valid indices in any order, then -1 padding to k; a
// -1 before a valid index is an error. The selected set must equal the reference's except among
// positions whose logit is within tol_abs of the min(k, end)-th largest (ties: either may be
// chosen); no duplicates; every index in [0, end). Returns "" when the row is right, else a
// message naming the first problem found.
std::string check_topk_row(std::span<const int32_t> got, std::span<const double> row, int end, int k, double tol_abs);

}  // namespace mla::ref
