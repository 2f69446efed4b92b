// fp64 CPU reference of MLA decode, the oracle the kernels are compared against.
//
// It decodes fp8 (FNUZ e4m3 on gfx942, OCP e4m3fn on gfx950) and bf16 with its own decoders,
// written from the format definitions, and deliberately does not use emulator/numerics (code
// under test). Semantics: docs/problem-format.md.
#pragma once
#include "runtime/planner.h"
#include "runtime/problem.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mla::ref {

// Decoders of raw bits (independent of runtime/ and emulator/ encoders).
double decode_fp8_fnuz(uint8_t bits);  // gfx942: bias 8, max 240, 0x80 = NaN, no -0, no inf
double decode_fp8_ocp(uint8_t bits);   // gfx950: bias 7, max 448, 0x7f/0xff = NaN, no inf
double decode_bf16(uint16_t bits);
double decode(uint16_t bits, rt::DType d, rt::Target t);

// Round to the nearest bf16 (ties to even), as a double / as bits.
double bf16_round(double x);
uint16_t bf16_bits(double x);

struct Reference {
  int rows = 0, heads = 0;
  std::vector<double> o;    // [rows][heads][512]
  std::vector<double> lse;  // [rows][heads], natural log of sum_t exp(s_t) over visible tokens
  double o_at(int row, int head, int d) const { return o[(size_t(row) * heads + head) * 512 + d]; }
  double lse_at(int row, int head) const { return lse[size_t(row) * heads + head]; }
};

// s_t = sm_scale*q_scale*kv_scale*<q, kv[t, 0:576]>, s = cap*tanh(s/cap) if cap != 0, softmax over
// the visible tokens [0, kv_len - qseqlen + r + 1) of query row r, o = kv_scale * sum_t p_t kv[t, 0:512].
struct ReferenceOptions {
  // fp8_ds_mla: each dequantised latent value (e4m3fn x scale) rounded to bf16 (nearest even), as
  // FlashMLA's reference does (tests/quant.py dequantize_k_cache writes a bf16 cache) and its
  // kernels (sm90 sparse_fp8 dequant.h: bf16 products). Default: exact.
  bool ds_mla_bf16 = false;
};
Reference run_reference(const rt::Problem& p, const ReferenceOptions& opt = {});
// The scores s_t above of request b, [r*heads + h][t] over all its kv_len tokens (row r's softmax
// sees the first kv_len - qseqlen + r + 1).
std::vector<double> scores(const rt::Problem& p, int b);

// What the decode kernel must leave in the partial buffers for a plan, and the merge of them.
// partial_o[p][m][512] is normalised within the split, partial_lse[p][m] is the natural log of
// the split's sum of exp(s) (planner.h); rows m = r*heads + h of the request. `merged` is the
// reduce's result in the layout of Reference (requests with one split copy the direct result).
struct SplitReference {
  int num_partials = 0, rows_per_request = 0;
  std::vector<double> partial_o;    // [num_partials][M][512]
  std::vector<double> partial_lse;  // [num_partials][M]
  Reference merged;
};
SplitReference run_split_reference(const rt::Problem& p, const rt::Plan& plan);

// Poison value kernels' outputs are pre-filled with: a bf16 0xFFFF left in o means "not written".
inline constexpr uint16_t kUnwrittenBf16 = 0xFFFF;

struct Compare {
  size_t count = 0;           // o elements compared
  double d = 0.0;             // aiter's metric 1 - 2*sum(x*y)/sum(x^2+y^2) over finite written elements
  double max_abs_err = 0.0;   // max |o - ref|
  double max_abs_ref = 0.0;   // max |ref|
  size_t unwritten = 0;       // o elements still 0xFFFF
  size_t nonfinite = 0;       // other NaN / inf in o
  long first_bad = -1;        // flat index of the first unwritten or non-finite element
  bool lse_checked = false;
  double lse_max_abs_err = 0.0;
  size_t lse_nonfinite = 0;

  bool clean() const { return unwritten == 0 && nonfinite == 0 && lse_nonfinite == 0; }
  // clean, d <= max_d, max_abs_err <= max_rel * max_abs_ref, lse error <= max_lse_err (if checked)
  bool passes(double max_d, double max_rel, double max_lse_err = 1e-2) const;
  std::string summary() const;
};

Compare compare(const Reference& ref, const std::vector<uint16_t>& o_bf16_bits, const std::vector<float>* lse);

}  // namespace mla::ref
