#include "kernels/mla_decode_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace mla::gen {

namespace {

// A one-slot ring releases its slot before PV when the tile's raw V fits this many VGPRs: V is
// then read with the QK work, and the producer writes the next slot while PV runs.
constexpr int kEarlyReleaseVRegs = 32;
// Operand VGPRs of one QK batch: unified VGPRs + AGPRs must stay <= 256 for two waves per
// SIMD. The Q split reads two Q operands per K operand: 8 each (K + Q in 24 VGPRs) leaves room
// for the raw V of the whole tile and half of it widened.
constexpr int kBatchOperandRegs = 24, kBatchOperandRegsSplit = 8;
// PV groups whose MFMAs run after the slot hand-over, beside the next tile's first reads.
constexpr int kTailGroups = 2;
// Transposing V reads: 16-column blocks read ahead of their MFMAs.
constexpr int kTransposeBatch = 8;

int lane_elems(const QkBlock& blk) { return blk.k / 4; }

// Blocks in batches of at most `limit` operand registers; a pair stays in one batch (its
// operands are one read into consecutive registers).
std::vector<QkBatch> qk_batches(const std::vector<QkBlock>& blocks, int raw_bytes, int op_bytes, int limit) {
  auto raw_regs_of = [&](const QkBlock& blk) { return std::max(1, lane_elems(blk) * raw_bytes / 4); };
  auto op_regs_of = [&](const QkBlock& blk) { return lane_elems(blk) * op_bytes / 4; };
  std::vector<QkBatch> out(1);
  int op_regs = 0;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const int unit = op_regs_of(blocks[bi]) + (blocks[bi].pair_first ? op_regs_of(blocks[bi + 1]) : 0);
    if (!blocks[bi].pair_second && op_regs + unit > limit && !out.back().blocks.empty()) out.emplace_back(), op_regs = 0;
    QkBatch& bt = out.back();
    bt.blocks.push_back(int(bi));
    bt.raw_offset.push_back(bt.raw_regs);
    bt.op_offset.push_back(bt.op_regs);
    bt.raw_regs += raw_regs_of(blocks[bi]);
    bt.op_regs += op_regs_of(blocks[bi]);
    op_regs += op_regs_of(blocks[bi]);
  }
  return out;
}

}  // namespace

MlaDecodePlan mla_decode_plan(const KernelSpec& s, const MlaGeometry& g) {
  MlaDecodePlan p;
  const int kvb = g.kv_bytes, qb = g.q_bytes, sub_tiles = g.tile_tokens / 16;
  const bool split = g.q_split, tr = g.v_lds_transpose;
  if (!tr && g.v_read_columns != 8)
    throw std::logic_error(fmt::format("{}: the token order assumes 8-column V reads without LDS transposes", s.name()));
  if (tr && g.pv_k != 32) throw std::logic_error(fmt::format("{}: LDS transpose reads need a 32-token PV tile", s.name()));

  // QK.
  p.q_operand_bytes = split ? 1 : qb;
  p.widen_k = !split && qb == 2 && kvb == 1;
  p.qk_path = split ? "fp8, bf16 Q split hi + lo" : p.widen_k ? "bf16, fp8 K widened" : qb == 1 ? "fp8" : "bf16";
  int q_regs = 0;
  for (const QkBlock& blk : g.qk_blocks) {
    p.q_agpr_offset.push_back(q_regs);
    q_regs += lane_elems(blk) * p.q_operand_bytes / 4;
  }
  p.q_agprs = g.q_in_lds ? 0 : q_regs;
  p.batch_operand_limit = split ? kBatchOperandRegsSplit : kBatchOperandRegs;
  p.qk_batches = qk_batches(g.qk_blocks, kvb, p.q_operand_bytes, p.batch_operand_limit);
  int raw_max = 0, op_max = 0;
  for (const QkBatch& bt : p.qk_batches) raw_max = std::max(raw_max, bt.raw_regs), op_max = std::max(op_max, bt.op_regs);
  p.k_raw_regs = std::max(raw_max, 8);
  p.k_op_regs = op_max;
  p.token_order_rotated = tr;

  // PV.
  p.pv_tokens_per_lane = g.pv_k / 4;
  p.v_operand_regs = p.pv_tokens_per_lane * g.p_bytes / 4;
  p.widen_v = g.p_bytes == 2 && kvb == 1;
  p.v_path = tr ? std::string(kvb == 1 ? "ds_read_b64_tr_b8" : "ds_read_b64_tr_b16") + (p.widen_v ? ", fp8 widened to bf16" : "")
           : p.widen_v ? "8-column reads, fp8 widened to bf16 through f32 + v_perm"
                       : "8-column reads, v_perm byte transpose";
  p.transpose_batch = tr ? kTransposeBatch : 0;
  p.transpose_regs = tr ? p.pv_tokens_per_lane * kvb / 4 : 0;
  p.v_halves = tr ? 1 : g.v_read_columns / 4;
  p.v_blocks = tr ? 0 : kMlaVDim / (16 * g.v_read_columns);
  p.v_block_regs = p.pv_tokens_per_lane * kvb * p.v_halves;
  p.v_group_regs = 4 * p.v_operand_regs;
  p.sum_rounded_p = g.p_bytes == 1;

  // Slot hand-over and read-ahead.
  p.early_release = g.ring == 1 && !tr && p.v_blocks * p.v_block_regs <= kEarlyReleaseVRegs;
  p.prewiden = p.early_release && p.widen_v && p.v_blocks % 2 == 0;
  p.v_raw_sets = p.prewiden ? p.v_blocks / 2 : p.early_release ? p.v_blocks : 1;
  p.fixed_addresses = g.ring == 1 && sub_tiles == 1;
  p.prefetch = p.prewiden && p.fixed_addresses && g.q_in_lds;
  p.tail_groups = p.prefetch ? kTailGroups : 0;
  p.transpose_scratch = p.widen_k || (tr && p.widen_v) || (!tr && !p.widen_v);

  // Register budget.
  p.o_regs = 4 * (kMlaVDim / 16);
  p.score_regs = 4 * sub_tiles;
  p.score_lo_regs = split ? 4 * sub_tiles : 0;
  p.q_lds_op_regs = g.q_in_lds ? (split ? 2 : 1) * op_max : 0;
  p.p_regs = std::max(2, g.pv_k / 4 * g.p_bytes / 4);
  p.v_raw_regs = tr ? p.transpose_batch * p.transpose_regs : p.v_block_regs * p.v_raw_sets;
  p.v_widened_regs = p.prewiden ? p.v_blocks / 2 * p.v_halves * p.v_group_regs : 0;
  p.v_transposed_regs = p.prewiden ? 0 : tr ? (p.widen_v ? 2 * p.v_operand_regs : 2) : p.v_group_regs;
  p.v_f32_regs = p.widen_v && !tr ? 8 : 0;
  // The speculative softmax runs in the split-PV loop (mla_decode_consumer_split.cpp). Its P
  // (f32, 8 registers) goes through the raw V registers, free until PV's transposing reads; fp8
  // P only (its rounded sum), no soft cap, no Q split.
  p.speculative_softmax = g.split_pv;
  if (g.split_pv && !(tr && !split && !s.logit_cap && g.p_bytes == 1 && sub_tiles == 2 && !p.early_release &&
                      !p.prefetch && p.v_raw_regs >= 8))
    throw std::logic_error(fmt::format("{}: split PV needs the speculative softmax's layout", s.name()));
  return p;
}

nlohmann::json MlaDecodePlan::to_json() const {
  nlohmann::json batches = nlohmann::json::array();
  for (const QkBatch& bt : qk_batches) batches.push_back({{"blocks", bt.blocks}, {"raw_regs", bt.raw_regs}, {"op_regs", bt.op_regs}});
  return {{"qk_path", qk_path},
          {"q_operand", q_agprs ? "agprs" : "lds"},
          {"q_agprs", q_agprs},
          {"batch_operand_limit", batch_operand_limit},
          {"qk_batches", batches},
          {"k_raw_regs", k_raw_regs},
          {"k_op_regs", k_op_regs},
          {"token_order", token_order_rotated ? "h(x, st) = (x + st) % 4" : "h(x, st) = x"},
          {"v_path", v_path},
          {"pv_tokens_per_lane", pv_tokens_per_lane},
          {"v_blocks", v_blocks},
          {"v_raw_sets", v_raw_sets},
          {"early_release", early_release},
          {"prewiden", prewiden},
          {"fixed_addresses", fixed_addresses},
          {"prefetch", prefetch},
          {"tail_groups", tail_groups},
          {"sum_rounded_p", sum_rounded_p},
          {"speculative_softmax", speculative_softmax},
          {"vgpr_budget",
           {{"o", o_regs},
            {"scores", score_regs},
            {"scores_lo", score_lo_regs},
            {"k_raw", k_raw_regs},
            {"k_widened", widen_k ? k_op_regs : 0},
            {"q_from_lds", q_lds_op_regs},
            {"p", p_regs},
            {"v_raw", v_raw_regs},
            {"v_widened", v_widened_regs},
            {"v_transposed", v_transposed_regs},
            {"v_f32", v_f32_regs},
            {"scratch", transpose_scratch ? 4 : 0}}}};
}

}  // namespace mla::gen
