// Split PV (MlaGeometry::split_pv): the prefix kernel's 6 consumer waves share the PV work of
// their row-block pairs, so each wave reads half of V from LDS instead of all of it.
//
// Consumer c runs QK and the (speculative) softmax of row block c, as every consumer does, then
// publishes its P^T operand (8 bytes per lane) and its rows' rescale factor alpha (1 when no row
// moved its max) in the P share region (lane l at p_share_offset + 48 l + 8 c; the factors 3 KiB
// further). After a barrier it runs PV for the 16 column blocks 16 h .. 16 h + 15 (h = c % 2) of
// its own row block c and of its partner c ^ 1: O^T blocks 0..15 are its own rows, 16..31 its
// partner's, each V^T read feeding both. The partner's O^T half is rescaled here by the
// partner's published alpha (its own half by itself, in the softmax). Every MFMA sees the same
// operands as in the unsplit kernel and accumulates in the same tile order, so O, l and m, and
// the output, are bit-identical to it.
//
// The published P and alpha of tile i are written after the hand-over barrier of tile i - 1
// and read before that of tile i, across the P barrier between: no race. The producers publish
// slot i + 1 at the P barrier of tile i (mla_decode_producer_dma.cpp), so the next tile's first
// K batch is read beside this tile's PV (prepare_tile); the hand-over barrier only frees slot i.
// Row blocks wholly past the unit's rows (PrefixUnit::rows) run no QK (own_on = 0) and no PV for
// them (partner_on = 0), but pass both barriers of every tile.
#include "kernels/mla_decode_consumer.h"

namespace mla::gen::decode {

namespace {
constexpr uint32_t kAlphaOffset = 64 * kPShareLaneBytes;  // the factors follow the P operands
}  // namespace

// After rows() and lds_addresses(): the row-block flags, V's column half, the P share addresses.
void Consumer::split_setup() {
  own_on = ra.sgpr(1, "c_own_rows"), partner_on = ra.sgpr(1, "c_partner_rows");
  SReg par = ra.sgpr(1, "c_partner_row_base"), hbit = ra.sgpr(1, "c_half_bit"), t = ra.sgpr(1, "c_tmp_s");
  // srow = 96 row_group + 16 c (96 is a multiple of 32): bit 4 is c % 2, the partner's row
  // base is srow + 16 - 2 (srow & 16).
  b.s_and_b32(hbit, srow, Imm(16));
  b.s_cmp_lt_u32(srow, k_.unit[abi::prefix_unit::rows]);
  b.s_cselect_b32(own_on, Imm(1), Imm(0));
  b.s_add_u32(par, srow, Imm(16));
  b.s_lshl_b32(t, hbit, Imm(1));
  b.s_sub_u32(par, par, t);
  b.s_cmp_lt_u32(par, k_.unit[abi::prefix_unit::rows]);
  b.s_cselect_b32(partner_on, Imm(1), Imm(0));
  // V^T reads of this wave's half: columns 256 h .. (fp8, one byte each).
  b.s_lshl_b32(t, hbit, Imm(4));
  b.v_add_u32(vbase[0], t, vbase[0]);
  // P share: lane l, row block c at p_share_offset + 48 l + 8 c (k_.wave = 16 c); the partner's
  // 8 - (srow & 16) bytes away.
  p_own = ra.vgpr(1, "c_p_share_own"), p_par = ra.vgpr(1, "c_p_share_partner");
  b.v_mul_u32_u24(p_own, Imm(kPShareLaneBytes), k_.lane);
  b.s_lshr_b32(t, k_.wave, Imm(1));
  b.s_add_u32(t, t, Imm(g.p_share_offset));
  b.v_add_u32(p_own, t, p_own);
  b.s_sub_u32(t, Imm(8), hbit);
  b.v_add_u32(p_par, t, p_own);
  ppar = ra.vgpr(2, "c_p_partner", 2);
  for (SReg r : {par, hbit, t}) ra.release(r);
}

void Consumer::pv_half_mfma(int side, int k) {
  VReg acc = o.sub(4 * (16 * side + k), 4);
  b.mfma(g.pv_mfma, acc, vraw.sub((k % pl.transpose_batch) * pl.transpose_regs, pl.transpose_regs),
         side == 0 ? pop.sub(0, 2) : ppar, acc);
}

// The partner's P^T and alpha, after the P barrier.
void Consumer::read_partner_p() {
  b.ds_read_b64(ppar, p_par);
  b.ds_read_b32(alpha.sub(0, 1), p_par, kAlphaOffset);
}

// O^T of the partner's rows times its alpha (only when one of its rows moved its max).
void Consumer::rescale_partner() {
  for (int r = o.count / 2; r < o.count; r += 2) b.v_pk_mul_f32_bcast_lo(o.sub(r, 2), o.sub(r, 2), alpha);
}

// PV of one side (0: own rows, 1: partner's) over the first batch's column blocks (read
// before the barrier), reading the second batch's behind each MFMA; then the second batch.
void Consumer::pv_half_one_side(int side) {
  const int n = pl.transpose_batch;
  for (int k = 0; k < n; ++k) {
    pv_half_mfma(side, k);
    read_v_transposed(n + k);
  }
  for (int k = n; k < 2 * n; ++k) pv_half_mfma(side, k);
}

// The scalars and LDS addresses of tile `next_iter` of the unit (tb, sslot, the K addresses
// of its first sub-tile), whether it is a full tile this wave computes (fast: present, rows,
// no row's limit inside it), and its first QK batch's K reads. Emitted where the previous
// tile's PV runs, after the P barrier, which publishes slot `next_iter` (the producers publish
// slot i + 1 there): the scalar work and the reads issue beside the PV MFMAs. The reads are
// safe for any tile: the slot lies in the ring, published, and a slow tile reads its K again.
void Consumer::prepare_tile(SReg next_iter) {
  SReg t = ra.sgpr(1, "c_tile_flag");
  b.s_cmp_lt_u32(next_iter, k_.ntiles);
  b.s_cselect_b32(fast, own_on, Imm(0));
  b.s_lshl_b32(tb, next_iter, Imm(log2i(T)));
  b.s_add_u32(tb, tb, k_.kv_start());
  b.s_add_u32(t, tb, Imm(T));
  b.s_cmp_le_u32(t, slim);
  b.s_cselect_b32(t, Imm(1), Imm(0));
  b.s_and_b32(fast, fast, t);
  ra.release(t);
  b.s_and_b32(sslot, next_iter, Imm(g.ring - 1));
  b.s_mul_i32(sslot, sslot, Imm(k_.slot_bytes()));
  for (auto& [gs, addr] : kaddr) b.v_add_u32(addr, sslot, kbase[{gs, 0}]);
  read_qk_batch(0, pl.qk_batches[0]);
}

void Consumer::tile_loop_split() {
  if (k_.s.sparse) throw std::logic_error("mla_decode: split PV (prefix kernels) has no sparse masking");
  const int n = pl.transpose_batch;
  fast = ra.sgpr(1, "c_tile_fast");
  SReg next = ra.sgpr(1, "c_next_tile");
  b.s_mov_b32(k_.iter, Imm(0));
  prepare_tile(k_.iter);  // slot 0 is published by the prologue barrier
  for (VReg v : vaddr) b.v_add_u32(v, sslot, vbase[0]);
  Label loop = b.new_label("consumer_loop");
  b.bind(loop);
  Label slow = b.new_label("tile_slow"), absent = b.new_label("tile_absent"), handed = b.new_label("tile_hand_over");
  Label no_rows = b.new_label("tile_no_rows"), masked = b.new_label("tile_masked"),
        plain = b.new_label("softmax_rescale"), publish = b.new_label("p_publish"), published = b.new_label("p_published");
  Label own_only = b.new_label("pv_own_only"), partner_only = b.new_label("pv_partner_only"),
        partner_rescale = b.new_label("partner_rescale"), partner_ready = b.new_label("partner_ready"),
        pv_done = b.new_label("pv_done");
  b.s_cmp_eq_u32(fast, Imm(0));
  b.s_cbranch_scc1(slow);
  qk_tile(true);
  softmax_speculative(plain);  // reads the first batch of this wave's V half
  b.v_mov_b32(alpha.sub(0, 1), f32(1.0f));
  b.bind(publish);
  b.ds_write_b64(p_own, pop.sub(0, 2));
  b.ds_write_b32(p_own, alpha.sub(0, 1), kAlphaOffset);
  b.bind(published);
  b.s_barrier();  // every row block's P^T and alpha are published, and slot i + 1
  b.s_add_u32(next, k_.iter, Imm(1));
  // Both row blocks of the pair have rows (the steady state): own first, so that the partner's
  // P^T and alpha arrive behind its MFMAs.
  b.s_cmp_eq_u32(own_on, Imm(0));
  b.s_cbranch_scc1(partner_only);
  b.s_cmp_eq_u32(partner_on, Imm(0));
  b.s_cbranch_scc1(own_only);
  read_partner_p();
  for (int k = 0; k < n; ++k) pv_half_mfma(0, k);
  b.v_cmp_gt_f32(vcc, f32(1.0f), alpha.sub(0, 1));
  b.s_cbranch_vccnz(partner_rescale);
  b.bind(partner_ready);
  prepare_tile(next);
  for (int k = 0; k < n; ++k) {
    pv_half_mfma(1, k);
    read_v_transposed(n + k);
  }
  for (int k = n; k < 2 * n; ++k) pv_half_mfma(0, k);
  for (int k = n; k < 2 * n; ++k) pv_half_mfma(1, k);
  b.bind(pv_done);
  for (VReg v : vaddr) b.v_add_u32(v, sslot, vbase[0]);  // the next tile's V (this tile's is read)
  b.s_barrier();  // slot i is free for the producers
  b.bind(handed);
  b.s_add_u32(k_.iter, k_.iter, Imm(1));
  b.s_cmp_lt_u32(k_.iter, k_.nslots);
  b.s_cbranch_scc1(loop);
  Label exit = b.new_label("consumer_loop_exit");
  b.s_branch(exit);

  // Out of line: a tile past the unit's end, a row block without rows, the unit's last partial
  // tile; a tile whose rows move their max; the pair with one row block of rows; the
  // partner's rescale.
  b.bind(slow);
  b.s_cmp_ge_u32(k_.iter, k_.ntiles);
  b.s_cbranch_scc1(absent);
  b.s_cmp_eq_u32(own_on, Imm(0));
  b.s_cbranch_scc1(no_rows);
  b.bind(masked);
  qk_tile();
  scores();
  softmax();
  pack_p();
  pv_transposed_reads(0);
  b.s_branch(publish);
  b.bind(plain);
  tile_max();
  softmax_from_max();
  pack_p();
  b.s_branch(publish);
  b.bind(no_rows);
  pv_transposed_reads(0);
  b.s_branch(published);
  b.bind(own_only);
  prepare_tile(next);
  pv_half_one_side(0);
  b.s_branch(pv_done);
  b.bind(partner_only);
  prepare_tile(next);
  b.s_cmp_eq_u32(partner_on, Imm(0));
  b.s_cbranch_scc1(pv_done);
  read_partner_p();
  {
    Label ready = b.new_label("partner_only_ready");
    b.v_cmp_gt_f32(vcc, f32(1.0f), alpha.sub(0, 1));
    b.s_cbranch_vccz(ready);
    rescale_partner();
    b.bind(ready);
  }
  pv_half_one_side(1);
  b.s_branch(pv_done);
  b.bind(partner_rescale);
  rescale_partner();
  b.s_branch(partner_ready);
  b.bind(absent);
  b.s_barrier();  // the P barrier
  b.s_add_u32(next, k_.iter, Imm(1));
  prepare_tile(next);
  b.s_branch(pv_done);
  b.bind(exit);
  ra.release(next);
}

// Results of a split-PV wave: its own rows' O^T half and lse, and its partner's O^T half with
// the partner's l (published through the factor slots after the loop).
void Consumer::epilogue_split() {
  b.ds_write_b32(p_own, lrun, kAlphaOffset);
  b.s_barrier();  // every row block's l is published (the producers have ended)
  VReg lpar = ra.vgpr(1, "e_partner_sum");
  b.ds_read_b32(lpar, p_par, kAlphaOffset);
  const int side_regs = o.count / 2;  // O^T blocks 0..15: own rows, 16..31: the partner's
  normalise_o(lrun, o.sub(0, side_regs));
  normalise_o(lpar, o.sub(side_regs, side_regs));
  VReg lse = tsum;
  row_lse(lse);

  SReg rsrc = ra.sgpr(4, "e_rsrc"), base = ra.sgpr(2, "e_base"), saved = ra.sgpr(2, "e_exec");
  SReg half = ra.sgpr(1, "e_half_bytes"), delta = ra.sgpr(1, "e_partner_rows");
  VReg off = ra.vgpr(1, "e_offset"), stage = ra.vgpr(4, "e_stage", 4), prow = ra.vgpr(1, "e_partner_row");
  b.s_and_b32(half, srow, Imm(16));
  b.s_lshl_b32(delta, half, Imm(1));
  b.s_sub_u32(delta, Imm(16), delta);  // the partner's rows are 16 - 2 (srow & 16) away
  b.v_add_u32(prow, delta, row);
  b.s_lshl_b32(half, half, Imm(5));  // bf16 columns 256 h ..: 512 h bytes
  // Partial rows as bf16: block k register r holds column 256 h + 16 k + 4 g + r.
  partial_base(base, k_.ptr(mla_decode_args::partial_o), M * kMlaVDim * 4);
  rows_resource(rsrc, base, kMlaVDim * 4);
  for (int side = 0; side < 2; ++side) {
    b.v_mul_u32_u24(off, Imm(kMlaVDim * 4), side == 0 ? row : prow);
    b.v_add_u32(off, half, off);
    store_o_bf16(rsrc, off, stage, o.sub(side * side_regs, side_regs));
  }
  partial_base(base, k_.ptr(mla_decode_args::partial_lse), M * 4);
  rows_resource(rsrc, base, 4);
  write_lse(lse, rsrc, saved, off);
}

}  // namespace mla::gen::decode
