#include "tests/reference/dsa_indexer_reference.h"

#include "tests/reference/mla_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

namespace mla::ref {

namespace {

// Draws from std::mt19937_64 through transforms written here (Box-Muller, multiply-shift):
// std::normal_distribution / std::shuffle differ between standard libraries, and a problem must be
// the same bytes everywhere its seed is quoted.
struct Rng {
  std::mt19937_64 eng;
  bool have = false;
  double spare = 0.0;
  explicit Rng(uint64_t seed) : eng(seed) {}
  double uniform01() { return (double(eng() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {
    if (have) {
      have = false;
      return spare;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform01())), phi = 2.0 * M_PI * uniform01();
    spare = r * std::sin(phi);
    have = true;
    return r * std::cos(phi);
  }
  uint64_t below(uint64_t n) { return uint64_t((unsigned __int128)eng() * n >> 64); }  // [0, n)
  template <class T>
  void permute(std::vector<T>& v) {  // Fisher-Yates
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
};

size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
bool valid_block_size(int bs) { return bs >= 1 && bs <= kIndexerMaxBlockSize && (bs & (bs - 1)) == 0; }

// Where token o of block blk keeps its 128 fp8 values and its f32 scale (header's layout).
size_t value_offset(const IndexerProblem& p, int64_t blk, int o) {
  return size_t(blk) * p.block_size * kIndexerTokenBytes + size_t(o) * kIndexerDim;
}
size_t scale_offset(const IndexerProblem& p, int64_t blk, int o) {
  return size_t(blk) * p.block_size * kIndexerTokenBytes + size_t(p.block_size) * kIndexerDim + size_t(o) * 4;
}
// The byte offsets of token t of request b: (values, scale).
std::pair<size_t, size_t> token_offsets(const IndexerProblem& p, int b, int t) {
  const int64_t blk = p.block_table[size_t(b) * p.block_table_stride + t / p.block_size];
  return {value_offset(p, blk, t % p.block_size), scale_offset(p, blk, t % p.block_size)};
}

void check_params(const IndexerParams& prm) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("make_indexer_problem: " + what); };
  if (prm.batch < 1 || prm.next_n < 1 || prm.heads < 1)
    bad(fmt::format("batch {}, next_n {}, heads {} must all be >= 1", prm.batch, prm.next_n, prm.heads));
  if (!valid_block_size(prm.block_size)) bad(fmt::format("block_size {} (allowed: 1, 2, 4, ..., 64)", prm.block_size));
  if (prm.context_lens.size() != size_t(prm.batch))
    bad(fmt::format("{} context_lens for batch {} (one per request)", prm.context_lens.size(), prm.batch));
  for (size_t b = 0; b < prm.context_lens.size(); ++b)
    if (prm.context_lens[b] < 0) bad(fmt::format("context_lens[{}] = {} is negative", b, prm.context_lens[b]));
  if (prm.extra_blocks < 0 || prm.tie_groups < 0)
    bad(fmt::format("extra_blocks {} and tie_groups {} must be >= 0", prm.extra_blocks, prm.tie_groups));
}

// Hands out the pool's blocks in a random order; entries past a request's blocks stay -1.
void place_blocks(IndexerProblem& p, Rng& rng) {
  std::vector<int32_t> ids(size_t(p.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  rng.permute(ids);
  p.block_table.assign(size_t(p.batch) * p.block_table_stride, -1);
  size_t next = 0;
  for (int b = 0; b < p.batch; ++b)
    for (size_t j = 0; j < ceil_div(p.context_lens[b], p.block_size); ++j)
      p.block_table[size_t(b) * p.block_table_stride + j] = ids[next++];
}

// One token's k row: x = N(0,1)*spread quantised against its own amax, so the largest |value|
// lands on the writer's fp8 ceiling (224 on gfx942, as vLLM's ROCm cache writer; 448 on gfx950).
void write_token(IndexerProblem& p, size_t values, size_t scale_at, Rng& rng) {
  const double ceiling = p.target == rt::Target::gfx942 ? 224.0 : 448.0;
  const double spread = 0.5 + 3.5 * rng.uniform01();
  double x[kIndexerDim], amax = 0.0;
  for (double& v : x) {
    v = rng.normal() * spread;
    amax = std::max(amax, std::fabs(v));
  }
  // The f32 scale is what the kernel reads: quantise against it, not against the double.
  const float scale = float(amax / ceiling);
  for (int d = 0; d < kIndexerDim; ++d) p.kv_cache[values + d] = rt::encode_fp8(x[d] / double(scale), p.target);
  std::memcpy(&p.kv_cache[scale_at], &scale, 4);
}

// IndexerParams::tie_groups, from a generator of its own so that a tied problem is the untied
// problem of the same seed with some tokens overwritten by copies.
void add_ties(IndexerProblem& p, const IndexerParams& prm) {
  Rng rng(prm.seed ^ 0x7469655f67726f75ull);
  for (int b = 0; b < p.batch; ++b) {
    std::vector<int> tokens(size_t(p.context_lens[b]));
    std::iota(tokens.begin(), tokens.end(), 0);
    rng.permute(tokens);
    size_t next = 0;
    for (int g = 0; g < prm.tie_groups && tokens.size() - next >= 2; ++g) {
      const size_t size = std::min<size_t>(2 + rng.below(3), tokens.size() - next);
      const auto [src_values, src_scale] = token_offsets(p, b, tokens[next]);
      for (size_t j = 1; j < size; ++j) {
        const auto [values, scale_at] = token_offsets(p, b, tokens[next + j]);
        std::memcpy(&p.kv_cache[values], &p.kv_cache[src_values], kIndexerDim);
        std::memcpy(&p.kv_cache[scale_at], &p.kv_cache[src_scale], 4);
      }
      next += size;
    }
  }
}

void validate(const IndexerProblem& p) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("indexer_logits_reference: " + what); };
  if (p.batch < 1 || p.next_n < 1 || p.heads < 1 || p.max_context_len < 0 || p.num_blocks < 0)
    bad(fmt::format("batch {}, next_n {}, heads {} must be >= 1, max_context_len {} and num_blocks {} >= 0", p.batch,
                    p.next_n, p.heads, p.max_context_len, p.num_blocks));
  if (!valid_block_size(p.block_size)) bad(fmt::format("block_size {} (allowed: 1, 2, 4, ..., 64)", p.block_size));
  if (size_t(std::max(p.block_table_stride, 0)) < ceil_div(p.max_context_len, p.block_size))
    bad(fmt::format("block_table_stride {} < ceil(max_context_len {} / block_size {})", p.block_table_stride,
                    p.max_context_len, p.block_size));
  const size_t rows = size_t(p.batch) * p.next_n;
  auto expect = [&](const char* name, size_t got, size_t want) {
    if (got != want) bad(fmt::format("{} has {} elements, expected {}", name, got, want));
  };
  expect("q", p.q.size(), rows * p.heads * kIndexerDim);
  expect("kv_cache", p.kv_cache.size(), size_t(p.num_blocks) * p.block_size * kIndexerTokenBytes);
  expect("weights", p.weights.size(), rows * p.heads);
  expect("context_lens", p.context_lens.size(), size_t(p.batch));
  expect("block_table", p.block_table.size(), size_t(p.batch) * p.block_table_stride);
  for (int b = 0; b < p.batch; ++b) {
    const int len = p.context_lens[b];
    if (len < 0 || len > p.max_context_len)
      bad(fmt::format("context_lens[{}] = {} outside [0, max_context_len {}]", b, len, p.max_context_len));
    for (size_t j = 0; j < ceil_div(len, p.block_size); ++j) {
      const int32_t blk = p.block_table[size_t(b) * p.block_table_stride + j];
      if (blk < 0 || blk >= p.num_blocks)
        bad(fmt::format("block_table[{}][{}] = {} outside [0, num_blocks {})", b, j, blk, p.num_blocks));
    }
  }
}

}  // namespace

IndexerProblem make_indexer_problem(const IndexerParams& prm) {
  check_params(prm);
  IndexerProblem p;
  p.target = prm.target;
  p.batch = prm.batch, p.next_n = prm.next_n, p.heads = prm.heads, p.block_size = prm.block_size;
  p.context_lens.assign(prm.context_lens.begin(), prm.context_lens.end());
  p.max_context_len = *std::max_element(prm.context_lens.begin(), prm.context_lens.end());
  // At least one column, so that a batch of empty requests still has a (-1) table to pass.
  p.block_table_stride = int(std::max<size_t>(1, ceil_div(p.max_context_len, p.block_size)));
  p.num_blocks = prm.extra_blocks;
  for (int len : prm.context_lens) p.num_blocks += int64_t(ceil_div(len, p.block_size));

  Rng rng(prm.seed);
  // Garbage everywhere first: what no token writes below stays random, never zero-filled.
  p.kv_cache.resize(size_t(p.num_blocks) * p.block_size * kIndexerTokenBytes);
  for (size_t i = 0; i < p.kv_cache.size(); i += 8) {
    const uint64_t w = rng.eng();
    std::memcpy(&p.kv_cache[i], &w, std::min<size_t>(8, p.kv_cache.size() - i));
  }
  place_blocks(p, rng);
  p.q.resize(size_t(p.batch) * p.next_n * p.heads * kIndexerDim);
  for (uint8_t& v : p.q) v = rt::encode_fp8(2.0 * rng.normal(), p.target);
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.context_lens[b]; ++t) {
      const auto [values, scale_at] = token_offsets(p, b, t);
      write_token(p, values, scale_at, rng);
    }
  p.weights.resize(size_t(p.batch) * p.next_n * p.heads);
  for (float& w : p.weights) w = float(0.125 * rng.normal());
  add_ties(p, prm);
  return p;
}

std::vector<double> indexer_logits_reference(const IndexerProblem& p) {
  validate(p);
  double table[256];
  for (int c = 0; c < 256; ++c)
    table[c] = p.target == rt::Target::gfx942 ? decode_fp8_fnuz(uint8_t(c)) : decode_fp8_ocp(uint8_t(c));
  std::vector<double> q(p.q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = table[p.q[i]];

  const size_t width = size_t(p.max_context_len);
  std::vector<double> logits(size_t(p.batch) * p.next_n * width, std::numeric_limits<double>::quiet_NaN());
  double k[kIndexerDim];
  for (int b = 0; b < p.batch; ++b)
    for (int t = 0; t < p.context_lens[b]; ++t) {
      const auto [values, scale_at] = token_offsets(p, b, t);
      for (int d = 0; d < kIndexerDim; ++d) k[d] = table[p.kv_cache[values + d]];
      float scale;
      std::memcpy(&scale, &p.kv_cache[scale_at], 4);
      for (int i = 0; i < p.next_n; ++i) {
        const size_t r = size_t(b) * p.next_n + i;
        double sum = 0.0;
        for (int h = 0; h < p.heads; ++h) {
          const double* qh = &q[(r * p.heads + h) * kIndexerDim];
          double dot = 0.0;
          for (int d = 0; d < kIndexerDim; ++d) dot += qh[d] * k[d];
          sum += std::max(dot, 0.0) * double(p.weights[r * p.heads + h]);
        }
        logits[r * width + t] = double(scale) * sum;
      }
    }
  return logits;
}

int indexer_row_end(int len, int next_n, int i) { return std::clamp(len - next_n + i + 1, 0, len); }

std::vector<int32_t> topk_reference(std::span<const double> row, int end, int k) {
  if (end < 0 || size_t(end) > row.size() || k < 0)
    throw std::invalid_argument(
        fmt::format("topk_reference: end {} outside [0, row size {}] or k {} < 0", end, row.size(), k));
  // NaN has no place in an order: the sort below would be undefined.
  for (int t = 0; t < end; ++t) {
    if (std::isnan(row[t]))
      throw std::invalid_argument(fmt::format("topk_reference: row[{}] is NaN inside [0, end {})", t, end));
  }
  std::vector<int32_t> idx(static_cast<size_t>(end));
  std::iota(idx.begin(), idx.end(), 0);
  const size_t n = std::min<size_t>(size_t(k), idx.size());
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  idx.resize(n);
  idx.resize(size_t(k), -1);
  return idx;
}

std::string check_topk_row(std::span<const int32_t> got, std::span<const double> row, int end, int k, double tol_abs) {
  const std::vector<int32_t> want = topk_reference(row, end, k);
  if (got.size() != size_t(k)) return fmt::format("{} entries, expected k = {}", got.size(), k);
  const size_t n = std::min(k, end);
  // Structure first: indices in range, each once, -1 only as the tail (vLLM pads short rows so).
  std::vector<int> seen_at(size_t(end), -1);
  size_t valid = 0;
  for (size_t j = 0; j < got.size(); ++j) {
    const int32_t g = got[j];
    if (g == -1) continue;
    if (g < 0 || g >= end) return fmt::format("entry {} = {} is outside [0, end {})", j, g, end);
    if (seen_at[g] >= 0) return fmt::format("entry {} = {} duplicates entry {}", j, g, seen_at[g]);
    if (valid != j) return fmt::format("entry {} = {} follows -1 padding (padding must be the tail)", j, g);
    seen_at[g] = int(j);
    ++valid;
  }
  if (valid != n) return fmt::format("{} valid entries, expected min(k {}, end {}) = {}", valid, k, end, n);
  if (n == 0) return "";
  // The set: above the n-th largest by more than tol must be in, below it by more must be out;
  // within tol either way (ties at the boundary), the count above keeps the size right.
  const double kth = row[want[n - 1]];
  for (int t = 0; t < end; ++t) {
    const bool in = seen_at[t] >= 0;
    if (!in && row[t] > kth + tol_abs)
      return fmt::format("index {} (logit {}) is missing: above the k-th largest {} by more than {}", t, row[t], kth,
                         tol_abs);
    if (in && row[t] < kth - tol_abs)
      return fmt::format("index {} (logit {}, entry {}) is selected: below the k-th largest {} by more than {}", t,
                         row[t], seen_at[t], kth, tol_abs);
  }
  return "";
}

}  // namespace mla::ref
