// Accuracy on problems shaped like the serving engines' (issue #32 item 7, docs/accuracy.md).
//
// A family is one engine shape (target, dtypes, heads, query rows) over a batch of requests of
// 2 to 68K tokens, with flat scores (Q, KV ~ N(0,1)) or peaked ones (a few keys per query along
// that query, rt::ProblemParams::peak_tokens). For each family `mlaoracle --engine-accuracy`
// runs our kernel (the catalog's, on the emulator), aiter's (through the oracle's launch, the same
// inputs, 12 heads zero-padded to 16 as SGLang and ATOM pad them) and a float64 model that rounds
// only P to fp8, each against the fp64 reference.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "oracle/aiter_oracle.h"
#include "runtime/catalog.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

namespace mla::oracle {

struct EngineFamily {
  std::string name;      // "gfx950 fp8/fp8 h12 qs1 peaked"
  std::string who;       // the deployment that sends this shape
  rt::Target target = rt::Target::gfx950;
  rt::DType q_dtype = rt::DType::fp8, kv_dtype = rt::DType::fp8;
  int heads = 16, qseqlen = 1;
  bool peaked = false;
  int peak_tokens = 0;  // peaked: rt::ProblemParams::peak_tokens / peak_spread
  double peak_spread = 0;
  std::vector<int> kv_lens;
  uint64_t seed = 1;
};

// The peaked families' tokens per (query row, head) and their score spread (rt::ProblemParams).
inline constexpr int kPeakTokens = 4;
inline constexpr double kPeakSpread = 1.0;

// The families of docs/accuracy.md's table, in its order.
std::vector<EngineFamily> engine_families();
// The problem of a family (page size 1, sm_scale 1/sqrt(192), scales 1, lse asked for).
rt::ProblemParams engine_problem_params(const EngineFamily& f);

struct Figures {
  double d = 0, max_err_pct = 0;  // d = 1 - 2 sum(xy)/sum(x^2+y^2); max |o - ref| as % of max |ref|
  double lse_err = -1;            // max |lse - ref| over the rows that have one; < 0: none has
  size_t lse_rows = 0;            // rows compared for lse_err
  size_t unwritten = 0, nonfinite = 0;
};
// bf16 o bits [rows][heads][512] and lse [rows][heads] (empty, or NaN for rows without one).
Figures figures_of(const ref::Reference& want, const std::vector<uint16_t>& o_bits, const std::vector<float>& lse);
// A float64 result in the reference's layout (the model).
Figures figures_of(const ref::Reference& want, const ref::Reference& got);

// The explanation: everything in float64 as the reference, except that each P = exp(s - max s)
// (max over the tokens the row sees) has its mantissa rounded to fp8 e4m3's 3 bits (nearest
// even; the exponent unbounded: no underflow, no saturation, so the result does not depend on
// the power of two P is scaled by). PV uses the rounded P; the row sum l adds the rounded P
// (`rounded_sum`, as our kernels do) or the exact one (`exact_sum`):
// o = kv_scale * sum P8 v / l, lse = max s + ln l. No soft cap.
struct FpModel {
  ref::Reference rounded_sum, exact_sum;
};
FpModel fp8_p_model(const rt::Problem& p);

// How concentrated the softmax is: per (row, head) of request b, the share of the softmax mass
// held by its `k` largest probabilities; the median over its rows x heads (fp64 scores).
double median_top_mass(const rt::Problem& p, int b, int k);

// aiter's kernel for a family, as the engines reach it through get_mla_metadata_v1: persistent
// (`_ps`), causal, the family's dtypes, neither the lse nor the context-parallel variant, the
// smallest gqa >= heads (16: the engines pad 12 heads to 16) and the smallest qSeqLen >= qseqlen
// (bf16 q over fp8 KV has only a qSeqLen-4 kernel; asm_mla.cu runs qseqlen 1 on it). Null if none.
const AiterKernel* aiter_kernel_for(const EngineFamily& f, const std::vector<AiterKernel>& catalog);

struct EngineOptions {
  const rt::Catalog* ours = nullptr;  // our catalog; null: our side is not run
  std::vector<AiterKernel> aiter;     // aiter's catalog rows (both targets); empty: aiter is not run
  // Work items per request of aiter's persistent launch (its metadata's split count; requests are
  // cut at 128-token boundaries, oracle::persistent_item_ranges).
  int aiter_kv_split = 16;
};

struct EngineRow {
  EngineFamily family;
  double top_share = 0;  // median share of the softmax mass in the kPeakTokens largest P, longest request
  std::string ours_kernel, ours_error;  // error: empty when it ran
  bool ours_ran = false;
  Figures ours;
  std::string aiter_kernel, aiter_error;
  bool aiter_ran = false;
  Figures aiter;
  std::map<std::string, uint64_t> aiter_findings;
  Figures model, model_exact_sum;  // fp8_p_model: l from the rounded P, from the exact P
  double seconds_ours = 0, seconds_aiter = 0, seconds_reference = 0;
};

// One family: the problem, the reference, the fp8-P model, ours and aiter's (each when asked).
// Never throws for a kernel that fails to run or is missing (the row says why).
EngineRow run_engine_family(const EngineFamily& f, const EngineOptions& opts);

}  // namespace mla::oracle
