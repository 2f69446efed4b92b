// Every decision of the decode kernel's consumer that is not the workgroup geometry: which QK
// and V paths run, when the slot is released, what is read ahead, and how many registers each
// piece takes. A pure value computed from the spec and its geometry before any code is
// emitted; the builder (mla_decode.cpp) only executes it, catalog.json records it
// (`decode_plan`), and tests/generator/test_decode_plan.cpp checks it per shape family.
// docs/mla-decode.md ("The decode plan") explains each field.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "kernels/mla_geometry.h"

namespace mla::gen {

// A batch of QK blocks: read their K (and, Q in LDS, Q) operands, then run their MFMAs. The
// registers of one batch are fixed views into k_raw / k_op / q_op at these offsets.
struct QkBatch {
  std::vector<int> blocks;        // indices into MlaGeometry::qk_blocks, ascending
  std::vector<int> raw_offset;    // per block: first register in k_raw
  std::vector<int> op_offset;     // per block: first register in k_op (and q_op)
  int raw_regs = 0, op_regs = 0;  // registers the batch takes in k_raw / k_op
};

struct MlaDecodePlan {
  // QK path.
  std::string qk_path;           // "fp8", "bf16", "bf16, fp8 K widened", "fp8, bf16 Q split hi + lo"
  bool widen_k = false;          // fp8 K widened to bf16 in registers for a bf16 QK (no Q split)
  int q_operand_bytes = 1;       // bytes of one Q operand element (1 with the Q split)
  std::vector<int> q_agpr_offset;  // per QK block: first AGPR of its Q operand (Q held in AGPRs)
  int q_agprs = 0;               // AGPRs holding Q (0 when Q is read from LDS every tile)
  int batch_operand_limit = 0;   // operand VGPRs one QK batch may take (24; 8 with the Q split)
  std::vector<QkBatch> qk_batches;
  int k_raw_regs = 0;            // raw K of the widest batch (>= 8: merge_splits' staging)
  int k_op_regs = 0;             // operands of the widest batch (widened K; Q from LDS per part)

  // Token order: S^T sub-tile st, row i = 4x + r holds token 16 st + 4 h(x, st) + r.
  bool token_order_rotated = false;  // h = (x + st) % 4 (transposing V reads); else h = x

  // V path.
  std::string v_path;            // how PV's A operand (V^T) is made, in words
  int pv_tokens_per_lane = 0;    // tokens per lane of the PV A operand (pv_k / 4)
  int v_operand_regs = 0;        // A operand registers of one 16-column block
  bool widen_v = false;          // fp8 V widened to bf16 for a bf16 PV
  int transpose_batch = 0;       // transposing reads: 16-column blocks read ahead of their MFMAs
  int transpose_regs = 0;        // registers of one transposing read group (one block)
  int v_halves = 1;              // 4-column groups per V read (8-column reads: 2)
  int v_blocks = 0;              // V reads per token row (512 / (16 * columns per read))
  int v_block_regs = 0;          // raw registers of one such read for the lane's tokens
  int v_raw_sets = 1;            // raw V register sets held at once
  int v_group_regs = 0;          // A operands of one 4-column group (four 16-column blocks)
  // The row sum l adds the P that PV uses: with fp8 P, the rounded values (converted back), so
  // that O / l and the split merge's weights exp(lse) = l describe the same P.
  bool sum_rounded_p = false;
  // Speculative softmax (the split-PV prefix kernel, full tiles): P = exp2(x - m) is computed
  // with the running max m beside the QK MFMAs and kept when no lane's scores pass m + slack
  // (the usual case: the lazy rescale's uniform branch); otherwise, and on the unit's masked
  // last tile, the tile takes the plain path. Same arithmetic in the same order either way: the
  // output is bit-identical.
  bool speculative_softmax = false;

  // Slot hand-over and read-ahead (one-slot ring).
  bool early_release = false;    // the slot is released before PV (raw V fits 32 VGPRs)
  bool prewiden = false;         // the first half of V is widened beside the QK MFMAs
  bool fixed_addresses = false;  // one slot, one sub-tile: LDS addresses set once before the loop
  bool prefetch = false;         // the next tile's first QK batch and V half read across tiles
  int tail_groups = 0;           // PV groups whose MFMAs run after the hand-over barrier
  bool transpose_scratch = false;  // 4 scratch VGPRs for K widening / V widening / v_perm

  // Register budget of the consumer's arrays (VGPRs unless named agprs); the rest are scalars
  // and addresses of a few registers each.
  int o_regs = 0, score_regs = 0, score_lo_regs = 0, q_lds_op_regs = 0, p_regs = 0;
  int v_raw_regs = 0, v_widened_regs = 0, v_transposed_regs = 0, v_f32_regs = 0;

  nlohmann::json to_json() const;
};

// Throws std::logic_error when the spec's geometry leaves a decision without a valid choice.
MlaDecodePlan mla_decode_plan(const KernelSpec& spec, const MlaGeometry& g);

}  // namespace mla::gen
