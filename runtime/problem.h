// An MLA decode problem on disk: problem.json + NumPy tensors (docs/problem-format.md).
//
// Loading validates everything up front (shapes, dtypes, index ranges, page ids, kv lengths)
// so that neither a kernel nor the reference ever reads outside a tensor: every error is a
// ProblemError whose message names the file, the field, the value and what is allowed.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "abi/mla_abi.h"

namespace mla::rt {

// The contract's vocabulary (abi/mla_abi.h).
using abi::kQkDim;
using abi::kVDim;
using Target = abi::Target;
using DType = abi::DType;

const char* name(Target t);
const char* name(DType d);
// Parse "gfx942"/"gfx950" and "fp8"/"bf16"; throw ProblemError naming `what` and the value.
Target parse_target(const std::string& s, const std::string& what);
DType parse_dtype(const std::string& s, const std::string& what);
inline int elem_bytes(DType d) { return abi::dtype_bytes(d); }

struct ProblemError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Raw element bits of one tensor, C order, little-endian, exactly as in the .npy payload.
struct RawTensor {
  std::vector<size_t> shape;
  int elem_bytes = 1;          // 1: fp8 (uint8), 2: bf16 (uint16)
  std::vector<uint8_t> bytes;  // count() * elem_bytes

  size_t count() const;
  // Element i as raw bits (fp8 code in the low byte, or bf16 bits).
  uint16_t bits(size_t i) const {
    return elem_bytes == 1 ? bytes[i] : uint16_t(bytes[2 * i] | (bytes[2 * i + 1] << 8));
  }
  void set_bits(size_t i, uint16_t v) {
    if (elem_bytes == 1) {
      bytes[i] = uint8_t(v);
    } else {
      bytes[2 * i] = uint8_t(v);
      bytes[2 * i + 1] = uint8_t(v >> 8);
    }
  }
};

struct Problem {
  // problem.json
  Target target = Target::gfx942;
  DType q_dtype = DType::fp8, kv_dtype = DType::fp8;
  int heads = 16;
  int qseqlen = 1;
  int page_size = 1;
  double sm_scale = 0.0, q_scale = 1.0, kv_scale = 1.0;
  double logit_cap = 0.0;  // 0 = off
  bool return_lse = false;
  // Sparse attention (DSA, problem.json "attention": "sparse"): qseqlen and page_size are 1; request
  // b is one query row whose kv_indices row holds cache slots, any of which may be -1 or past the
  // cache (masked: not attended to, never read). A row whose every slot is masked has o = 0 and
  // lse = -inf.
  bool sparse = false;
  // problem.json "kv_dtype": "fp8_ds_mla": kv holds FlashMLA's 656-byte entries (abi::kDsMlaRowBytes:
  // 512 e4m3fn on every target, four f32 scales, 64 bf16 rope) as raw bytes [num_pages, page_size,
  // 656]; kv_dtype is fp8; sparse only, with bf16 q.
  bool kv_ds_mla = false;
  int kv_row_elems() const { return kv_ds_mla ? abi::kDsMlaRowBytes : kQkDim; }

  // Tensors
  RawTensor q;   // [batch*qseqlen, heads, 576]
  RawTensor kv;  // [num_pages, page_size, 576] (fp8_ds_mla: 656 bytes)
  std::vector<int32_t> qo_indptr;          // [batch+1]
  std::vector<int32_t> kv_indptr;          // [batch+1], prefix sums of pages per request
  std::vector<int32_t> kv_indices;         // [kv_indptr[batch]] page ids
  std::vector<int32_t> kv_last_page_lens;  // [batch], 1..page_size

  int batch() const { return int(kv_last_page_lens.size()); }
  int rows() const { return batch() * qseqlen; }  // q / o rows
  int num_pages() const { return kv.shape.empty() ? 0 : int(kv.shape[0]); }
  int pages_of(int b) const { return kv_indptr[b + 1] - kv_indptr[b]; }
  // Tokens of request b: (pages - 1) * page_size + last_page_len.
  int kv_len(int b) const { return (pages_of(b) - 1) * page_size + kv_last_page_lens[b]; }
  // Page id holding token t of request b (slot t % page_size).
  int page_of(int b, int t) const { return kv_indices[size_t(kv_indptr[b]) + size_t(t / page_size)]; }
  // Sparse: whether token t of request b is masked (its slot is -1 or past the cache).
  bool masked(int b, int t) const {
    if (!sparse) return false;
    const int32_t s = kv_indices[size_t(kv_indptr[b]) + size_t(t)];
    return s < 0 || s >= num_pages();
  }
  // Index of kv element (token t of request b, dim d) in kv.bits().
  size_t kv_elem(int b, int t, int d) const {
    return (size_t(page_of(b, t)) * page_size + size_t(t % page_size)) * size_t(kv_row_elems()) + size_t(d);
  }
  size_t q_elem(int row, int head, int d) const { return (size_t(row) * heads + head) * kQkDim + d; }

  nlohmann::json metadata_json() const;  // the problem.json content
};

// Loads and validates `dir`/problem.json and the .npy inputs. Throws ProblemError.
Problem load_problem(const std::string& dir);
// Checks an in-memory problem with the same rules as load_problem (`where` prefixes messages).
void validate_problem(const Problem& p, const std::string& where = "problem");
// Writes problem.json and the input .npy files (creates `dir`).
void save_problem(const std::string& dir, const Problem& p);

// Outputs: o.npy [rows, heads, 512] bf16 bits, lse.npy [rows, heads] f32 (if lse != nullptr),
// stats.json. Sizes are checked against the problem.
void save_outputs(const std::string& dir, const Problem& p, const std::vector<uint16_t>& o_bits,
                  const std::vector<float>* lse, const nlohmann::json& stats);
struct Outputs {
  std::vector<uint16_t> o_bits;
  std::vector<float> lse;  // empty when lse.npy is absent
  bool has_lse = false;
};
Outputs load_outputs(const std::string& dir, const Problem& p);

struct ProblemParams {
  Target target = Target::gfx942;
  int heads = 16;
  int qseqlen = 1;
  DType q_dtype = DType::fp8, kv_dtype = DType::fp8;
  int page_size = 1;
  std::vector<int> kv_lens;  // one per request, each >= qseqlen
  uint64_t seed = 1;
  double sm_scale = 0.07216878364870322;  // 1/sqrt(192)
  double q_scale = 1.0, kv_scale = 1.0;
  double logit_cap = 0.0;
  bool return_lse = false;
  int extra_pages = 0;  // unused pages, so page ids are not simply 0..used-1
  // Sparse (DSA): kv_lens[b] is row b's index count (its top-k); the cache holds sparse_pool slots
  // (0: half the total index count, so rows share slots; < 0: the index count, every row's slots
  // its own, as different requests' are); each row's slots are distinct and drawn at random, and a fraction sparse_masked of its entries, at random positions, are -1 or a slot
  // past the cache (half each, some of them INT32_MAX). qseqlen and page_size must be 1.
  bool sparse = false;
  int sparse_pool = 0;
  double sparse_masked = 0.0;
  // fp8_ds_mla (sparse, bf16 q): each 128-value tile of a latent row is N(0,1) times 2^U{-1,0,1}, 1%
  // of its values +0 and 1% -0 (e4m3fn 0x80); its scale is amax / 448, rounded up to a power of two
  // (as DeepSeek writes them) when ds_mla_pow2_scales, else kept as it is (as SGLang writes them).
  bool kv_ds_mla = false;
  bool ds_mla_pow2_scales = true;
  // Shared prefixes: requests first .. first+count-1 hold the same first `tokens / page_size`
  // pages (tokens a multiple of page_size, within every member's whole pages).
  struct Shared {
    int first = 0, count = 0, tokens = 0;
  };
  std::vector<Shared> shared;
  // Peaked scores (docs/accuracy.md): in every request, each (query row, head) gets `peak_tokens`
  // tokens whose key is that query scaled, k = a q (then rounded to the KV dtype), with `a` putting
  // the token's score at ln(tokens the row sees) + U(0, peak_spread). The tokens are distinct,
  // visible to every row of the request, and drawn at random; a request with fewer tokens than
  // rows x heads x peak_tokens peaks only the first (row, head) pairs it has tokens for. With N(0,1)
  // keys elsewhere (mean exp(score) e^1.5 at sm_scale 1/sqrt(192)), 4 such tokens hold a median
  // 84% of their query's softmax mass at spread 3 (60% at spread 1, 68K tokens): the softmax
  // concentrates on a few tokens, as in engines' decode.
  // 0 = flat scores (no token aligned). Not combinable with `shared`.
  int peak_tokens = 0;
  double peak_spread = 3.0;
};

// Q and KV ~ N(0,1) encoded into the target's fp8 / bf16 (round to nearest even, saturating),
// pages handed out in a shuffled order. Unused slots of last pages and unused pages hold random
// values too, so a kernel that reads past kv_len produces a visibly wrong result.
Problem make_random_problem(const ProblemParams& params);

// Encoders (round to nearest even, saturate to the format's max finite value; NaN stays NaN).
// fp8 is FNUZ e4m3 on gfx942 (bias 8, max 240) and OCP e4m3fn on gfx950 (bias 7, max 448).
uint8_t encode_fp8(double x, Target t);
uint16_t encode_bf16(double x);
uint16_t encode(double x, DType d, Target t);

}  // namespace mla::rt
