// Internal to the decode builder: the consumer wave's emitter. Consumer c (waves 1..C) owns
// row block c / S (16 query rows) and tile c % S of every slot, and only computes: S^T = K Q^T
// on MFMA, online softmax with a lazy rescale, O^T += V^T P^T on MFMA; the S consumers of a
// row block merge their states in LDS at the end. Every decision comes from the geometry and
// the plan (Kernel::g, Kernel::pl); each method below emits one phase, in program order
// (mla_decode_consumer.cpp: set-up and the tile loop; mla_decode_consumer_io.cpp: Q in,
// split merge and results out). Register allocation order is emission order, so phases run
// in the order emit() calls them.
#pragma once
#include <map>
#include <vector>

#include "kernels/mla_decode_kernel.h"

namespace mla::gen::decode {

constexpr uint32_t kNegFltMax = 0xff7fffffu;  // -FLT_MAX: running max start, finite so exp2 never sees -inf - -inf
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Growth of a row's max (log2 units) tolerated before the running max and O^T are rescaled:
// P <= 2^7 = 128 stays inside both fp8 formats (e4m3 448, gfx942 e4m3fnuz 240), and O^T (f32)
// grows by at most 128x.
constexpr float kRescaleSlack = 7.0f;
// The Q split's lo image holds (q s - hi) 2^kQLoShift: |q s - hi| <= 4 (half an fp8 ulp below
// 128), so lo stays <= 128, and it loses only below 2^-7 instead of 2^-2 (fp8 denormals).
constexpr int kQLoShift = 5;
constexpr uint32_t kQLoInvBits = uint32_t(127 - kQLoShift) << 23;  // 2^-kQLoShift as f32 bits

class Consumer {
 public:
  explicit Consumer(Kernel& k);
  void emit();

 private:
  // Per-lane k layout of a 16x16 MFMA operand (emulator/mfma.cpp, 'Operand layout'): E = k/4
  // elements per lane of group g = lane / 16; E <= 16: lane_k0 + lane_stride g + p (k0 + E g +
  // p unless paired, see QkBlock); E > 16 (K=128 f8f6f4): k0 + 16 (g + 4 (p / 16)) + p % 16,
  // i.e. 16-element chunks 64 apart. lane_chunks gives the chunks without the lane's g term
  // (g * gstride elements).
  struct Chunk {
    int elem_off, len;
  };
  static int lane_elems(const QkBlock& blk) { return blk.k / 4; }
  static int gstride(const QkBlock& blk) { return blk.lane_stride; }
  static std::vector<Chunk> lane_chunks(const QkBlock& blk);
  int op_regs_of(const QkBlock& blk) const { return lane_elems(blk) * pl.q_operand_bytes / 4; }

  // Set-up (mla_decode_consumer.cpp).
  void constants();
  void rows();
  void limits_and_scales();
  void accumulators();
  void token_group(VReg dst, VReg x, int st);
  void lds_addresses();
  void loop_registers();
  // Q in (mla_decode_consumer_io.cpp).
  void load_q();
  template <class Read>
  void fill_q(VReg qstage, Read&& read);
  void copy_q_through_lds(SReg qrsrc, VReg qstage);
  void split_q(SReg qarea);
  static std::pair<uint32_t, int> q_piece_divider(int qb);
  void rows_resource(SReg rsrc, SReg base, int bytes);
  void request_base(SReg base, SReg ptr64, int row_bytes);
  void row_div_heads(VReg d, VReg row_reg);
  void transpose_read_base(VReg base, VReg tmp, int kvb, int st);
  // The tile loop (mla_decode_consumer.cpp).
  void tile_loop();
  void tile_addresses(bool k_too);
  void batch_regs_of(const QkBatch& bt, std::vector<VReg>& raw, std::vector<VReg>& op, std::vector<VReg>* qv);
  void read_qk_batch(int st, const QkBatch& bt);
  void qk_batch(int st, const QkBatch& bt);
  void read_v(int nb, VReg dst);
  void read_ahead();
  void qk_tile(bool first_batch_read = false);
  void v_beside_qk();
  void scores();
  VReg read_bias();
  void softmax();
  void tile_max();
  void softmax_from_max();
  void softmax_speculative(Label plain);
  void pack_p();
  void row_sum();
  void pv_transposed();
  void pv_transposed_reads(int b0);
  void read_v_transposed(int block);
  VReg pv_operands(int nb, int half);
  void pv_mfmas(int nb, int half, VReg x);
  void pv_rows();
  void hand_over(Label absent);
  void widen_v_group(VReg raw, int half, VReg dst, VReg vf32);
  void widen_fp8_to_bf16(VReg dst, VReg src, VReg tmp4);
  void transpose_v(VReg x, const std::vector<VReg>& tok, VReg t, int klpv, int kvb);
  void pack_bf16(VReg d, VReg lo, VReg hi, VReg t0, VReg t1);
  // Split PV (mla_decode_consumer_split.cpp).
  void split_setup();
  void tile_loop_split();
  void prepare_tile(SReg next_iter);
  void pv_half_mfma(int side, int k);
  void pv_half_one_side(int side);
  void read_partner_p();
  void rescale_partner();
  void epilogue_split();
  // Results out (mla_decode_consumer_io.cpp).
  void merge_splits();
  void epilogue();
  void merge_in_launch();
  void partial_base(SReg base, SReg ptr64, int slot_bytes);
  void store_o_bf16(SReg rsrc, VReg off, VReg stage, VReg blocks = {});
  void normalise_o(VReg l, VReg blocks);
  void row_lse(VReg lse);
  void write_lse(VReg lse, SReg rsrc, SReg saved, VReg off);

  Kernel& k_;
  Builder& b;
  RegAllocator& ra;
  const MlaGeometry& g;
  const MlaDecodePlan& pl;
  const std::vector<QkBlock>& blocks;
  const int T, E, kvb, qb, M, sub_tiles;
  const bool split;  // bf16 Q as fp8 hi + lo images (QK on fp8 MFMAs)

  // Registers, by the phase that allocates them.
  SReg lo_inv2;                     // constants: split, 2^-kQLoShift as the low half of a pair
  VReg j, g4, row;                  // rows: lane row j, 4 * lane group, the request row
  SReg srow, split_;                // rows: the row block's first row, this wave's token split
  VReg gq;                          // Q in: scratch, alive to the end of set-up
  std::map<int, VReg> qg;           // Q in: gstride -> Q byte offset of the lane's row and g term
  AReg qa;                          // Q in: Q operands (Q held in AGPRs)
  VReg q_inv_scale;                 // Q in, split: 1/s of the lane's row
  VReg lim;                         // limits: the row's visible-token limit
  SReg slim;                        //   the smallest limit of the unit's rows
  VReg xscale2, xscale, cap_out;    // scales: exp2 units per score (pair), soft cap
  VReg perm16, perm32;              // ds_bpermute addresses of lanes l^16, l^32
  VReg o, mrun, lrun, alpha;        // accumulators: O^T, running max and sum, rescale pair
  std::map<std::pair<int, int>, VReg> kbase;  // LDS addresses: (gstride, st) -> K base in the slot
  std::map<int, VReg> kaddr;                  //   gstride -> address of the current sub-tile
  std::vector<VReg> gtok;                     //   4 h(g, st) per sub-tile
  std::vector<VReg> vbase, vaddr;             //   V bases and current addresses
  VReg sacc, slo, kraw, kop, qop, pop;        // loop: scores (hi, lo), K raw/operands, Q from LDS, P^T
  VReg vraw, vwide, xop, vf32, xt;            //   V raw, widened, A operands, f32 detour, scratch
  VReg tmax2, tmax, tsum, tt, neg_inf, mslack, negm;
  SReg tb, sslot;                             //   tile base token, slot byte offset
  std::vector<VReg> tail_ops;                 //   read-ahead: the tail groups' operands
  SReg own_on, partner_on, fast;              // split PV: this row block and its partner have rows; a full tile
  VReg p_own, p_par, ppar;                    //   P share addresses, the partner's P^T operand
};

}  // namespace mla::gen::decode
