// The merge of a row block's split partials inside the decode launch, by the wave that completes
// the block (docs/mla-decode.md, "In-launch merge"); the reduce kernel (mla_reduce.cpp) does the
// same arithmetic per row in its own launch.
#pragma once
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

// Two f32 as one dword of bf16 (round to nearest even; lo in the low half): v_cvt_pk_bf16_f32
// where the target has it, else from the bits (t0, t1 scratch; k7fff = 0x7fff, kperm =
// 0x07060302, the high halves' selector).
void emit_pack_bf16_rne(Builder& b, VReg d, VReg lo, VReg hi, VReg t0, VReg t1, SReg k7fff, SReg kperm);
// A split's merge weight w = exp(lse_k - max) (exp2 of the log2e-scaled difference), added to wsum.
void emit_split_weight(Builder& b, VReg w, VReg wsum, VSrc lse_k, VReg max);
// Splits whose partials are all empty (lse -inf: a sparse row whose slots in them are all masked):
// the max the weights are taken against is at least -FLT_MAX, so that they come out 0, not
// exp(-inf - -inf) = NaN; lse = max + ln(wsum) is then -inf. Finite maxima are unchanged.
void emit_weight_max(Builder& b, VReg max);
// inv = 1 / wsum, or 0 when wsum is 0 (no token: o = 0, not 0 * inf).
void emit_safe_inverse(Builder& b, VReg inv, VReg wsum);

// The reduce's split ranges: a row's S splits are cut into ranges of reduce_range_splits(S) =
// ceil(ceil(S / 8) / 16) * 16 splits (whole sum chunks), one per wave of the reduce kernel; a
// range's lse are read 64 per load, its partial rows 16 splits in flight. Each range sums in split
// order, and the ranges' sums are added in range order, by the reduce and the in-launch merge
// alike (bit for bit the same result).
inline constexpr int kReduceWaves = 8, kReduceLseChunk = 64, kReduceSumChunk = 16;
constexpr int reduce_range_splits(int splits) {
  return ((splits + kReduceWaves - 1) / kReduceWaves + kReduceSumChunk - 1) / kReduceSumChunk * kReduceSumChunk;
}
// The reduce kernel's dependent rounds of loads for one entry of `splits` partials, the first
// `bf16_splits` of them bf16, after the entry's own fetch: its longest wave's lse loads (64 per
// load) and partial-row chunks (16 in flight, per kind). mlabench prices each round at one
// dependent memory trip (docs/performance.md, "The reduce's latency").
int reduce_load_rounds(int splits, int bf16_splits);
// r = reduce_range_splits(splits), in SGPRs.
void emit_reduce_range_splits(Builder& b, SReg r, SReg splits);

// The merge of a 16-row block's split partials by one wave (the decode kernel's in-launch merge):
// lane l takes row srow + l / 4 and, in each of 4 passes over the splits, its 32 contiguous columns
// 128 p + 32 (l % 4), 8 loads in flight per split. The arithmetic is the reduce kernel's in the same
// order (max of the splits' lse; then the weighted sum of each range in split order, the ranges'
// sums in range order), so the result is the same bit for bit. f32 partials only (decode kernels'). Rows past M read nothing and store nothing.
struct PartialMergeBlock {
  SReg partial_o, partial_lse, o, lse;   // 64-bit pointers (lse: with return_lse)
  SReg qo_row, first, splits, stride;    // the request's abi::ReduceEntry fields (splits >= 1)
  SReg srow;                             // first row of the block in the request's M rows
  VReg lane;                             // 0..63
  VReg scratch;                          // >= kMergeBlockVgprs VGPRs, the first 4-aligned
  bool bf16 = false;                     // the partials' o is bf16 (the first 1024 bytes of each 2048-byte row)
};
inline constexpr int kMergeBlockVgprs = 109;
void emit_partial_merge_block(Builder& b, const KernelSpec& s, const PartialMergeBlock& a);

}  // namespace mla::gen
