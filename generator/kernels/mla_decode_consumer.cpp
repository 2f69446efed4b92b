// The consumer's set-up and tile loop (mla_decode_consumer.h).
//
// Register layouts (16x16 MFMAs; lane l, j = l % 16, g = l / 16):
//   S^T sub-tile st (ST of them):    D[i][j = row], i = 4g + r holding token
//                                    16 st + 4 h(g, st) + r (h: MlaDecodePlan::token_order_rotated)
//                                    -> lane holds row j.
//   P^T as the B operand of PV:      B[k = KL*g + p][j = row], p = 4 st + r: the same token, so
//                                    every lane feeds PV with its own softmax values.
//   V^T as the A operand of PV:      A[i = column][k]: gfx950 transposing LDS reads, or 8 columns
//                                    per token read from LDS and transposed with v_perm_b32.
//   O^T block:                       D[i = column][j = row]; the lane owns row j (column mapping
//                                    per V path: see transpose_read_base and the epilogue).
#include "kernels/mla_decode_consumer.h"

namespace mla::gen::decode {

Consumer::Consumer(Kernel& k)
    : k_(k), b(k.b), ra(k.b.regs()), g(k.g), pl(k.pl), blocks(k.g.qk_blocks), T(k.g.tile_tokens),
      E(k.g.lds_row_bytes), kvb(k.g.kv_bytes), qb(k.g.q_bytes), M(k.g.rows), sub_tiles(k.g.tile_tokens / 16),
      split(k.g.q_split) {}

void Consumer::emit() {
  constants();
  rows();
  load_q();
  limits_and_scales();
  accumulators();
  lds_addresses();
  loop_registers();
  if (g.split_pv) split_setup();
  tile_loop();
  // Row sum over the 4 lane groups.
  b.ds_bpermute_b32(tt, perm16, lrun);
  b.v_add_f32(lrun, lrun, tt);
  b.ds_bpermute_b32(tt, perm32, lrun);
  b.v_add_f32(lrun, lrun, tt);
  if (g.kv_splits > 1) merge_splits();
  epilogue();
  k_.end_unit();
}

// The SGPR constants the phases ask for with K() (v_perm selectors, the Q copy's divider,
// ...), set once here; and, with the Q split, 2^-kQLoShift.
void Consumer::constants() {
  // Split: 2^-kQLoShift as the low SGPR of a pair (the high one 0), broadcast by a packed fma.
  lo_inv2 = split ? ra.sgpr(2, "c_lo_inv_scale", 2) : SReg{};
  if (split) {
    b.s_mov_b32(lo_inv2[0], Imm(int64_t(kQLoInvBits)));
    b.s_mov_b32(lo_inv2[1], Imm(0));
  }
  for (uint32_t v : k_.wanted) {
    SReg r = ra.sgpr(1, fmt::format("c_const_{:x}", v));
    b.s_mov_b32(r, Imm(v));
    k_.consts[v] = r;
  }
}

// Consumer c = wave - 1 owns row block c / S and takes tile c % S of every slot.
// Row of the request this lane owns: row_group * rows_per_group + 16 * (c / S) + j.
void Consumer::rows() {
  j = ra.vgpr(1, "c_row_lane"), g4 = ra.vgpr(1, "c_group_x4"), row = ra.vgpr(1, "c_row");
  b.v_and_b32(j, Imm(15), k_.lane);
  b.v_lshrrev_b32(g4, Imm(4), k_.lane);
  b.v_lshlrev_b32(g4, Imm(2), g4);
  srow = ra.sgpr(1, "c_row_base");
  split_ = ra.sgpr(1, "c_split");
  b.s_sub_u32(k_.wave, k_.wave, Imm(1));
  b.s_and_b32(split_, k_.wave, Imm(g.kv_splits - 1));
  b.s_lshr_b32(k_.wave, k_.wave, Imm(log2i(g.kv_splits)));
  b.s_mul_i32(srow, k_.row_group(), Imm(g.rows_per_group));
  b.s_lshl_b32(k_.wave, k_.wave, Imm(4));
  b.s_add_u32(srow, srow, k_.wave);
  b.v_add_u32(row, srow, j);
  if (g.prefix && !g.split_pv) {  // split PV: such a wave still runs PV for its partner (split_setup)
    // A row block wholly past the unit's R rows (a member's unique part has M <= 16 rows, the
    // last row group of a group may be partly filled) computes nothing: its wave takes no tile
    // (every slot is `absent`: only the barriers), so the MFMAs run for the rows that exist.
    // Its rows' stores fall outside the partial buffer's R rows and are dropped, as before.
    b.s_cmp_ge_u32(srow, k_.unit[abi::prefix_unit::rows]);
    b.s_cselect_b32(k_.ntiles, Imm(0), k_.ntiles);
  }
}

void Consumer::limits_and_scales() {
  lim = ra.vgpr(1, "c_limit");
  if (g.prefix) {
    // Every row of a prefix group sees the whole prefix: the limit is the unit's end.
    slim = ra.sgpr(1, "c_limit_base");
    b.v_mov_b32(lim, k_.kv_end());
    b.s_mov_b32(slim, k_.kv_end());
  } else {
    // Visible-token limit of this lane's row: min(kv_end, kv_len - qseqlen + 1 + row / heads).
    row_div_heads(lim, row);
    slim = ra.sgpr(1, "c_limit_base");
    b.s_sub_u32(slim, k_.kv_len(), Imm(k_.s.qseqlen - 1));
    b.v_add_u32(lim, slim, lim);
    b.v_min_u32(lim, k_.kv_end(), lim);
    // Scalar: the smallest limit over all rows (row 0); tiles below it need no mask.
    b.s_min_u32(slim, slim, k_.kv_end());
  }

  // Scales (uniform): x = s * scale * log2(e) feeds exp2. xscale is the low register of a pair
  // (the high one 0): the packed fma of the exponent broadcasts it.
  xscale2 = ra.vgpr(2, "c_x_scale", 2), xscale = xscale2.sub(0, 1);
  cap_out = k_.s.logit_cap ? ra.vgpr(1, "c_cap_out") : VReg{};
  b.v_mov_b32(xscale2[1], Imm(0));
  // sm_scale * q_scale * kv_scale, multiplied in that order (abi kDecodeArgs).
  b.v_mov_b32(xscale, k_.q_scale);
  b.v_mul_f32(xscale, k_.argf(mla_decode_args::sm_scale), xscale);
  b.v_mul_f32(xscale, k_.kv_scale, xscale);
  if (k_.s.logit_cap) {
    // tanh(s / cap) = 1 - 2 / (exp2(2 * log2e * s / cap) + 1); x = cap * log2e * tanh.
    b.v_rcp_f32(cap_out, k_.argf(mla_decode_args::logit_cap));
    b.v_mul_f32(xscale, xscale, cap_out);
    b.v_mul_f32(xscale, f32(2 * kLog2e), xscale);
    b.v_mov_b32(cap_out, k_.argf(mla_decode_args::logit_cap));
    b.v_mul_f32(cap_out, f32(kLog2e), cap_out);
  } else {
    b.v_mul_f32(xscale, f32(kLog2e), xscale);
  }
  if (split) {  // the scores come from q s: undo s (a power of two, exact)
    b.v_mul_f32(xscale, xscale, q_inv_scale);
    ra.release(q_inv_scale);
  }
  // ds_bpermute addresses of the lanes 16 and 32 away (the other row groups of the same row).
  perm16 = ra.vgpr(1, "c_perm16"), perm32 = ra.vgpr(1, "c_perm32");
  b.v_xor_b32(perm16, Imm(16), k_.lane);
  b.v_lshlrev_b32(perm16, Imm(2), perm16);
  b.v_xor_b32(perm32, Imm(32), k_.lane);
  b.v_lshlrev_b32(perm32, Imm(2), perm32);
}

// O^T blocks (32 x 4 VGPRs), running max and sum (alpha needs a pair).
void Consumer::accumulators() {
  o = ra.vgpr(pl.o_regs, "c_o_acc", 4);
  for (int r = 0; r < o.count; ++r) b.v_mov_b32(o[r], Imm(0));
  mrun = ra.vgpr(1, "c_max"), lrun = ra.vgpr(1, "c_sum"), alpha = ra.vgpr(2, "c_alpha", 2);
  b.v_mov_b32(mrun, Imm(int64_t(kNegFltMax)));
  b.v_mov_b32(lrun, Imm(0));
  b.v_mov_b32(alpha[1], Imm(0));
}

// dst = 4 h(x, st), x in 0..3. Token order: S^T sub-tile st, row i = 4x + r holds token
// 16 st + 4 h(x, st) + r, so the lane of group g holds, for p = 4 st + r, token 16 st +
// 4 h(g, st) + r. h keeps the LDS reads conflict-free in the bank model: the 16 rows of an
// 8-byte K read group are distinct modulo 16 for any h that permutes 0..3, and a 16-byte K read
// group (8 lanes) wants 8 consecutive tokens. With transposing V reads, h = (x + st) % 4, so
// the 8 tokens of a lane group's PV k values fall in distinct rows modulo 8; 8-column V reads
// move one row's 128 contiguous bytes per lane group, conflict-free in any order: h(x) = x.
void Consumer::token_group(VReg dst, VReg x, int st) {
  if (pl.token_order_rotated) {
    b.v_add_u32(dst, Imm(st), x);
    b.v_and_b32(dst, Imm(3), dst);
  } else {
    b.v_mov_b32(dst, x);
  }
  b.v_lshlrev_b32(dst, Imm(2), dst);
}

// LDS addresses: K operand row j plus the lane's g term of each k layout in use; V reads
// token 4g, columns Vc j (or the transposing reads' rows).
void Consumer::lds_addresses() {
  VReg rj = ra.vgpr(1, "c_k_row"), xj = ra.vgpr(1, "c_k_row_group");
  for (int st = 0; st < sub_tiles; ++st) {
    b.v_lshrrev_b32(xj, Imm(2), j);
    token_group(rj, xj, st);
    b.v_and_b32(xj, Imm(3), j);
    b.v_add_u32(rj, rj, xj);  // 4 h(j/4, st) + j%4 (+ 16 st: immediate)
    for (const auto& blk : blocks) {
      const int gs = gstride(blk);
      if (kbase.count({gs, st})) continue;
      VReg base = ra.vgpr(1, fmt::format("c_k_base_g{}_s{}", gs, st));
      b.v_mul_u32_u24(base, Imm(E), rj);
      b.v_mul_u32_u24(gq, Imm(gs * kvb / 4), g4);
      b.v_add_u32(base, base, gq);
      kbase[{gs, st}] = base;
      if (!kaddr.count(gs)) kaddr[gs] = ra.vgpr(1, fmt::format("c_k_addr_g{}", gs));
    }
  }
  // gtok[st] = 4 h(g, st): the lane's first token of sub-tile st, less 16 st.
  b.v_lshrrev_b32(xj, Imm(4), k_.lane);  // g
  for (int st = 0; st < sub_tiles; ++st) {
    gtok.push_back(ra.vgpr(1, fmt::format("c_group_token_s{}", st)));
    token_group(gtok.back(), xj, st);
  }
  ra.release(rj);
  ra.release(xj);
  // V: per sub-tile base (the transposing b8 read needs one: its source lanes carry st).
  const bool tr_b8 = g.v_lds_transpose && kvb == 1;
  for (int st = 0; st < (tr_b8 ? 1 : sub_tiles); ++st) {
    vbase.push_back(ra.vgpr(1, fmt::format("c_v_base_s{}", st)));
    vaddr.push_back(ra.vgpr(1, fmt::format("c_v_addr_s{}", st)));
    if (g.v_lds_transpose) {
      transpose_read_base(vbase.back(), gq, kvb, st);
    } else {
      // Tokens 16 st + gtok[st] + r (16 st + r in the immediate offset), columns Vc j.
      b.v_mul_u32_u24(vbase.back(), Imm(E), gtok[st]);
      b.v_mul_u32_u24(gq, Imm(g.v_read_columns * kvb), j);
      b.v_add_u32(vbase.back(), vbase.back(), gq);
    }
  }
}

// The loop's arrays, sized by the plan (MlaDecodePlan::vgpr_budget).
void Consumer::loop_registers() {
  sacc = ra.vgpr(pl.score_regs, "c_scores", 4);
  slo = split ? ra.vgpr(pl.score_lo_regs, "c_scores_lo", 4) : VReg{};  // K lo^T, apart
  kraw = ra.vgpr(pl.k_raw_regs, "c_k_raw", 2);  // >= 8: staging of merge_splits
  kop = pl.widen_k ? ra.vgpr(pl.k_op_regs, "c_k_bf16", 2) : kraw;
  qop = g.q_in_lds ? ra.vgpr(pl.q_lds_op_regs, "c_q_from_lds", 2) : VReg{};
  pop = ra.vgpr(pl.p_regs, "c_p_operand", 2);
  vraw = ra.vgpr(pl.v_raw_regs, "c_v_raw", 2);
  vwide = pl.prewiden ? ra.vgpr(pl.v_widened_regs, "c_v_widened", 2) : VReg{};
  xop = pl.prewiden ? VReg{} : ra.vgpr(pl.v_transposed_regs, "c_v_transposed", 2);
  // fp8 V for a bf16 PV without transposing reads: each token pair's 4 columns widened to f32,
  // then one v_perm per output dword takes the two bf16 halves (8 VALU per 4x4 block fewer
  // than transposing bytes first and widening after).
  vf32 = pl.v_f32_regs ? ra.vgpr(pl.v_f32_regs, "c_v_f32", 2) : xop;
  // Scratch of the K widening, the LDS-transpose V widening and the v_perm V transpose.
  xt = pl.transpose_scratch ? ra.vgpr(4, "c_transpose_tmp", 2) : VReg{};
  // tmax is the low register of a pair (the high one 0), broadcast as -m by the packed fma.
  tmax2 = ra.vgpr(2, "c_tile_max", 2), tmax = tmax2.sub(0, 1);
  tsum = ra.vgpr(1, "c_tile_sum"), tt = ra.vgpr(1, "c_tmp2");
  b.v_mov_b32(tmax2[1], Imm(0));
  // -inf in a VGPR: v_cndmask already reads VCC, and gfx9 allows one scalar/literal read.
  neg_inf = ra.vgpr(1, "c_neg_inf"), mslack = ra.vgpr(1, "c_max_slack");
  negm = pl.speculative_softmax ? ra.vgpr(1, "c_neg_max") : VReg{};  // -m of the speculative P
  b.v_mov_b32(neg_inf, Imm(int64_t(kNegInf)));
  tb = ra.sgpr(1, "c_tile_base"), sslot = ra.sgpr(1, "c_slot");
}

// One iteration per slot: this wave's tile (slot iter, tile position split; absent at the
// unit's end: skip to the barrier, which every wave passes once per slot).
void Consumer::tile_loop() {
  if (g.split_pv) return tile_loop_split();
  b.s_mov_b32(k_.iter, Imm(0));
  if (pl.fixed_addresses) tile_addresses(true);
  if (pl.prefetch) {  // this wave's first tile (tile `split`), if the unit has it
    b.s_cmp_ge_u32(split_, k_.ntiles);
    k_.unless_scc1([&] { read_ahead(); });
  }
  Label loop = b.new_label("consumer_loop");
  b.bind(loop);
  Label absent = b.new_label("tile_absent");
  b.s_lshl_b32(tb, k_.iter, Imm(log2i(g.kv_splits)));
  b.s_add_u32(tb, tb, split_);
  b.s_cmp_ge_u32(tb, k_.ntiles);
  b.s_cbranch_scc1(absent);
  b.s_lshl_b32(tb, tb, Imm(log2i(T)));
  b.s_add_u32(tb, tb, k_.kv_start());
  if (!pl.fixed_addresses) tile_addresses(false);
  qk_tile();
  v_beside_qk();
  scores();
  softmax();
  pack_p();
  if (pl.early_release) b.s_barrier();  // the slot is read (V is in registers): the producer may write
  if (g.v_lds_transpose) pv_transposed();
  pv_rows();
  hand_over(absent);
  b.s_add_u32(k_.iter, k_.iter, Imm(1));
  b.s_cmp_lt_u32(k_.iter, k_.nslots);
  b.s_cbranch_scc1(loop);
}

// LDS addresses of this wave's tile in the slot: with one slot and one sub-tile they do not
// change from tile to tile, and are set once before the loop (MlaDecodePlan::fixed_addresses).
void Consumer::tile_addresses(bool k_too) {
  if (g.ring >= 2) {  // a power of two (geometry)
    b.s_and_b32(sslot, k_.iter, Imm(g.ring - 1));
    b.s_mul_i32(sslot, sslot, Imm(k_.slot_bytes()));
  } else {
    b.s_mov_b32(sslot, Imm(0));
  }
  if (g.kv_splits > 1) {
    SReg pos = ra.sgpr(1, "c_tile_pos");
    b.s_mul_i32(pos, split_, Imm(T * E));
    b.s_add_u32(sslot, sslot, pos);
    ra.release(pos);
  }
  for (size_t v = 0; v < vbase.size(); ++v) b.v_add_u32(vaddr[v], sslot, vbase[v]);
  if (k_too)
    for (auto& [gs, addr] : kaddr) b.v_add_u32(addr, sslot, kbase[{gs, 0}]);
}

// A batch of QK blocks (MlaDecodePlan::qk_batches): its K (and, Q in LDS, Q) operand
// registers, fixed views into kraw / kop / qop.
void Consumer::batch_regs_of(const QkBatch& bt, std::vector<VReg>& raw, std::vector<VReg>& op, std::vector<VReg>* qv) {
  const int q_parts = split ? 2 : 1;  // split: the hi operands, then the lo operands
  for (size_t c = 0; c < bt.blocks.size(); ++c) {
    const QkBlock& blk = blocks[size_t(bt.blocks[c])];
    raw.push_back(kraw.sub(bt.raw_offset[c], std::max(1, lane_elems(blk) * kvb / 4)));
    op.push_back(pl.widen_k ? kop.sub(bt.op_offset[c], op_regs_of(blk)) : raw.back());
    for (int part = 0; part < (g.q_in_lds ? q_parts : 0); ++part)
      qv[part].push_back(qop.sub(part * pl.k_op_regs + bt.op_offset[c], op_regs_of(blk)));
  }
}

void Consumer::read_qk_batch(int st, const QkBatch& bt) {
  const int q_parts = split ? 2 : 1;
  const int qob = pl.q_operand_bytes;
  std::vector<VReg> raw, op, qv[2];
  batch_regs_of(bt, raw, op, qv);
  for (size_t c = 0; c < bt.blocks.size(); ++c) {
    const QkBlock& blk = blocks[size_t(bt.blocks[c])];
    if (blk.pair_second) continue;  // a pair's K (and Q) is one read into both blocks' registers
    int reg = 0, rq = 0;
    for (const Chunk& ch : lane_chunks(blk)) {
      const int n = std::max(1, ch.len * kvb / 4) * (blk.pair_first ? 2 : 1);
      k_.ds_read_dwords(kraw.sub(raw[c].first - kraw.first + reg, n), kaddr[gstride(blk)],
                        uint32_t(16 * st * E + ch.elem_off * kvb));
      reg += n;
      const int nq = ch.len * qob / 4 * (blk.pair_first ? 2 : 1);
      for (int part = 0; part < (g.q_in_lds ? q_parts : 0); ++part)
        k_.ds_read_dwords(qop.sub(qv[part][c].first - qop.first + rq, nq), qg[gstride(blk)],
                          uint32_t(ch.elem_off * qob + part * g.q_lo_offset));
      rq += nq;
    }
  }
}

// Its MFMAs, widening K first where Q is bf16 and the cache fp8.
void Consumer::qk_batch(int st, const QkBatch& bt) {
  std::vector<VReg> raw, op, qv[2];
  batch_regs_of(bt, raw, op, qv);
  VReg sdst = sacc.sub(4 * st, 4);
  if (pl.widen_k)
    for (size_t c = 0; c < bt.blocks.size(); ++c) widen_fp8_to_bf16(op[c], raw[c], xt);
  for (size_t c = 0; c < bt.blocks.size(); ++c) {
    const int bi = bt.blocks[c];
    AccSrc acc = bi == 0 ? AccSrc::zero() : AccSrc(sdst);
    if (g.q_in_lds) b.mfma(blocks[bi].mfma, sdst, op[c], qv[0][c], acc);
    else b.mfma(blocks[bi].mfma, sdst, op[c], qa.sub(pl.q_agpr_offset[bi], op_regs_of(blocks[bi])), acc);
    if (split) b.mfma(blocks[bi].mfma, slo.sub(4 * st, 4), op[c], qv[1][c], bi == 0 ? AccSrc::zero() : AccSrc(slo.sub(4 * st, 4)));
  }
}

// V rows of column block nb (token slot p: 16 st + gtok[st] + p % 4, in vaddr[st]).
void Consumer::read_v(int nb, VReg dst) {
  const int regs = kvb * pl.v_halves;  // one token's columns of the read: 4 columns are 1 dword (fp8) or 2 (bf16)
  for (int p = 0; p < pl.pv_tokens_per_lane; ++p) {
    const int st = p / 4;
    const uint32_t off = uint32_t((16 * st + p % 4) * E + 16 * g.v_read_columns * nb * kvb);
    k_.ds_read_dwords(dst.sub(p * regs, regs), vaddr[st], off);
  }
}

// Read ahead (MlaDecodePlan::prefetch): the next tile's first QK batch and the first half of
// its V, read while the previous tile's last PV MFMAs run after the hand-over barrier.
void Consumer::read_ahead() {
  read_qk_batch(0, pl.qk_batches[0]);
  for (int nb = 0; nb < pl.v_blocks / 2; ++nb) read_v(nb, vraw.sub(nb * pl.v_block_regs, pl.v_block_regs));
}

// S^T = K Q^T per 16-token sub-tile.
void Consumer::qk_tile(bool first_batch_read) {
  for (int st = 0; st < sub_tiles; ++st) {
    if (!pl.fixed_addresses)
      for (auto& [gs, addr] : kaddr) b.v_add_u32(addr, sslot, kbase[{gs, st}]);
    for (size_t q = 0; q < pl.qk_batches.size(); ++q) {
      // Batch 0 was read ahead (the plan's prefetch; split PV: sub-tile 0's, during the last PV).
      if (!(pl.prefetch && q == 0) && !(first_batch_read && st == 0 && q == 0)) read_qk_batch(st, pl.qk_batches[q]);
      qk_batch(st, pl.qk_batches[q]);
    }
  }
}

// Early release: all of V is read with the QK work; prewiden also widens its first half.
void Consumer::v_beside_qk() {
  const int v_nb = pl.v_blocks, v_nb_regs = pl.v_block_regs, vhalves = pl.v_halves, group_regs = pl.v_group_regs;
  if (pl.prewiden) {
    if (!pl.prefetch)
      for (int nb = 0; nb < v_nb / 2; ++nb) read_v(nb, vraw.sub(nb * v_nb_regs, v_nb_regs));
    for (int nb = 0; nb < v_nb / 2; ++nb)
      for (int half = 0; half < vhalves; ++half)
        widen_v_group(vraw.sub(nb * v_nb_regs, v_nb_regs), half, vwide.sub((nb * vhalves + half) * group_regs, group_regs), vf32);
    for (int nb = v_nb / 2; nb < v_nb; ++nb) read_v(nb, vraw.sub((nb - v_nb / 2) * v_nb_regs, v_nb_regs));
  } else if (pl.early_release) {
    for (int nb = 0; nb < v_nb; ++nb) read_v(nb, vraw.sub(nb * v_nb_regs, v_nb_regs));
  }
}

// Scores in exp2 units (x = s xscale), masked beyond the row's limit. Without the soft cap the
// scores stay unscaled until the exponent (xscale > 0, so the max commutes with it): the row
// max is scaled once and each p takes one fma, exp2(fma(s, xscale, -m)).
void Consumer::scores() {
  const VReg bias = k_.s.sparse ? read_bias() : VReg{};
  // Split: S^T = K (q s)^T = K hi^T + 2^-kQLoShift K lo^T (two scores per packed fma).
  for (int e = 0; e < (split ? 4 * sub_tiles : 0); e += 2)
    b.v_pk_fma_f32(sacc.sub(e, 2), slo.sub(e, 2), lo_inv2, sacc.sub(e, 2), true, false);
  for (int e = 0; e < bias.count; ++e) b.v_add_f32(sacc[e], sacc[e], bias[e]);  // -inf: masked
  const bool cap = k_.s.logit_cap;
  for (int e = 0; e < (cap ? 4 * sub_tiles : 0); ++e) {
    b.v_mul_f32(tt, xscale, sacc[e]);
    b.v_exp_f32(tt, tt);
    b.v_add_f32(tt, f32(1.0f), tt);
    b.v_rcp_f32(tt, tt);
    b.v_fma_f32(tt, tt, f32(-2.0f), f32(1.0f));
    b.v_mul_f32(sacc[e], cap_out, tt);
  }
  b.v_add_f32(mslack, f32(kRescaleSlack), mrun);  // m + slack (independent of the tile)
  SReg tend = ra.sgpr(1, "c_tile_end");
  b.s_add_u32(tend, tb, Imm(T));
  b.s_cmp_le_u32(tend, slim);
  ra.release(tend);
  k_.unless_scc1([&] {
    // lim - tb compared with the token offset 16s + 4g + r of each score.
    b.v_sub_u32(tt, lim, tb);
    for (int st = 0; st < sub_tiles; ++st)
      for (int r = 0; r < 4; ++r) {
        b.v_add_u32(tsum, Imm(16 * st + r), gtok[st]);
        b.v_cmp_gt_i32(vcc, tt, tsum);
        b.v_cndmask_b32(sacc[4 * st + r], neg_inf, sacc[4 * st + r], vcc);
      }
  });
}

// Sparse: score + bias of its token (0, or -inf for a masked index), which the producer wrote
// beside the token's row in the slot (token 16 st + gtok[st] + r of this wave's tile). The raw K
// registers are free once the tile's QK MFMAs have issued; they hold the biases until the adds.
VReg Consumer::read_bias() {
  if (pl.k_raw_regs < 4 * sub_tiles) throw std::logic_error("mla_decode: sparse biases need 4 raw K registers per sub-tile");
  const VReg bias = kraw.sub(0, 4 * sub_tiles);
  for (int st = 0; st < sub_tiles; ++st) {
    b.v_mul_u32_u24(tt, Imm(E), gtok[st]);
    b.v_add_u32(tt, sslot, tt);
    for (int r = 0; r < 4; ++r) b.ds_read_b32(bias[4 * st + r], tt, uint32_t((16 * st + r) * E + g.kv_row_bytes));
  }
  return bias;
}

// Online softmax: tile max over the lane's tokens, then over the 4 lane groups; the lazy
// rescale; P = exp2(x - m) and the row sum.
void Consumer::softmax() {
  tile_max();
  softmax_from_max();
}

// The tile's row max (scaled to exp2 units without the soft cap) in tmax.
void Consumer::tile_max() {
  b.v_max3_f32(tmax, sacc[0], sacc[1], sacc[2]);
  for (int e = 3; e < 4 * sub_tiles; ++e) b.v_max_f32(tmax, tmax, sacc[e]);
  b.ds_bpermute_b32(tt, perm16, tmax);
  b.v_max_f32(tmax, tmax, tt);
  b.ds_bpermute_b32(tt, perm32, tmax);
  b.v_max_f32(tmax, tmax, tt);
  if (!k_.s.logit_cap) b.v_mul_f32(tmax, xscale, tmax);
}

// MlaDecodePlan::speculative_softmax, a full tile (no mask) after its QK: P = exp2(x - m) with
// the running max m, packed and summed into the raw V registers (free until PV), all in the
// MFMA shadow of the QK (one scheduling region with it: no branch between); then PV's first
// transposing reads. If no row's max passes m + slack (vccz: the lazy rescale's usual case), m
// stays and the tile goes on into PV; else `plain` (out of line) redoes the tile's softmax from
// the tile max on, from the scores. Either way the same operations on the same values in the
// same order as the plain path (fma(s, xscale, -m) as the packed fma computes it per element;
// the sum p0 + ... + p7 from the left): the output is bit-identical to it.
void Consumer::softmax_speculative(Label plain) {
  b.v_add_f32(mslack, f32(kRescaleSlack), mrun);
  b.v_sub_f32(negm, f32(0.0f), mrun);
  // The second half of the raw V registers: the first batch's reads into the first half (its
  // first MFMAs' operands) need not wait for the sum.
  const VReg p = vraw.sub(vraw.count - 8, 8);
  for (int e = 0; e < 8; ++e) {
    b.v_fma_f32(p[e], sacc[e], xscale, negm);
    b.v_exp_f32(p[e], p[e]);
  }
  for (int st = 0; st < 2; ++st) {
    b.v_cvt_pk_fp8_f32(pop[st], p[4 * st], p[4 * st + 1], 0);
    b.v_cvt_pk_fp8_f32(pop[st], p[4 * st + 2], p[4 * st + 3], 1);
    b.v_cvt_pk_f32_fp8(p.sub(4 * st, 2), pop[st], 0);
    b.v_cvt_pk_f32_fp8(p.sub(4 * st + 2, 2), pop[st], 1);
  }
  b.v_add_f32(tsum, p[0], p[1]);
  for (int e = 2; e < 8; ++e) b.v_add_f32(tsum, tsum, p[e]);
  // Whether any row's max passes m + slack needs no reduction over the row's 4 lane groups: a
  // row's max passes iff one of its lanes' maxes does (x scale is monotone), so vcc over the
  // lanes' own maxes is zero exactly when the plain path's vcc over the row maxes is.
  b.v_max3_f32(tmax, sacc[0], sacc[1], sacc[2]);
  for (int e = 3; e < 8; ++e) b.v_max_f32(tmax, tmax, sacc[e]);
  b.v_mul_f32(tmax, xscale, tmax);
  b.v_cmp_gt_f32(vcc, tmax, mslack);
  pv_transposed_reads(0);
  b.s_cbranch_vccnz(plain);
  b.v_add_f32(lrun, lrun, tsum);
}

// From the tile max on: the lazy rescale, P = exp2(x - m) and (unrounded P) the row sum.
void Consumer::softmax_from_max() {
  const bool cap = k_.s.logit_cap;
  // Lazy rescale: the reference max m moves only when a row's max grows by more than
  // kRescaleSlack (log2 units), so P = exp2(x - m) <= 2^7 and, on most tiles, no row moves and
  // the rescale (alpha = exp2(m - m'), O^T and l times alpha) is skipped by a uniform branch.
  // The result is exact either way: l and O carry the same factor, and lse = m + log(l).
  b.v_cmp_gt_f32(vcc, tmax, mslack);
  b.v_cndmask_b32(tmax, mrun, tmax, vcc);  // the row's new reference max
  if (g.split_pv) b.v_mov_b32(alpha[0], f32(1.0f));  // published as is when no row moves
  Label rescaled = b.new_label("rescaled");
  b.s_cbranch_vccz(rescaled);
  b.v_sub_f32(alpha[0], mrun, tmax);
  b.v_exp_f32(alpha[0], alpha[0]);  // 1 for rows that keep theirs
  // Split PV: this wave's O^T of its own rows (the partner's half is rescaled by the partner).
  for (int r = 0; r < (g.split_pv ? o.count / 2 : o.count); r += 2) b.v_pk_mul_f32_bcast_lo(o.sub(r, 2), o.sub(r, 2), alpha);
  b.v_mul_f32(lrun, lrun, alpha[0]);
  b.bind(rescaled);
  b.v_mov_b32(mrun, tmax);
  if (!cap) {
    b.v_sub_f32(tmax, f32(0.0f), tmax);  // -m
    for (int e = 0; e < 4 * sub_tiles; e += 2)
      b.v_pk_fma_f32(sacc.sub(e, 2), sacc.sub(e, 2), xscale2, tmax2, true, true);  // s xscale - m
  }
  for (int e = 0; e < 4 * sub_tiles; ++e) {
    if (cap) b.v_sub_f32(sacc[e], sacc[e], tmax);
    b.v_exp_f32(sacc[e], sacc[e]);
  }
  if (!pl.sum_rounded_p) row_sum();  // bf16 P: the packing below uses tsum as scratch
}

// l += the lane's P of this tile (its 4 lane groups are summed once, at the end).
void Consumer::row_sum() {
  b.v_add_f32(tsum, sacc[0], sacc[1]);
  for (int e = 2; e < 4 * sub_tiles; ++e) b.v_add_f32(tsum, tsum, sacc[e]);
  b.v_add_f32(lrun, lrun, tsum);
}

// P^T operand: the lane's own probabilities, p = 4 st + r (token 16 st + 4 h(g, st) + r).
void Consumer::pack_p() {
  if (g.p_bytes == 1) {
    for (int st = 0; st < sub_tiles; ++st) {
      b.v_cvt_pk_fp8_f32(pop[st], sacc[4 * st + 0], sacc[4 * st + 1], 0);
      b.v_cvt_pk_fp8_f32(pop[st], sacc[4 * st + 2], sacc[4 * st + 3], 1);
    }
    if (pl.sum_rounded_p) {  // back to f32, exactly (every fp8 value is an f32), for l
      for (int st = 0; st < sub_tiles; ++st) {
        b.v_cvt_pk_f32_fp8(sacc.sub(4 * st, 2), pop[st], 0);
        b.v_cvt_pk_f32_fp8(sacc.sub(4 * st + 2, 2), pop[st], 1);
      }
      row_sum();
    }
  } else {
    for (int e = 0; e < 4 * sub_tiles; e += 2) pack_bf16(pop[e / 2], sacc[e], sacc[e + 1], tt, tsum);
  }
}

// The transposing read of 16-column block `block`'s V^T operand into its raw register set
// (block % transpose_batch).
void Consumer::read_v_transposed(int block) {
  const uint32_t col = uint32_t(16 * block * kvb);
  VReg dst = vraw.sub(block % pl.transpose_batch * pl.transpose_regs, pl.transpose_regs);
  if (kvb == 1) {
    b.ds_read_b64_tr_b8(dst, vaddr[0], col);
  } else {
    b.ds_read_b64_tr_b16(dst.sub(0, 2), vaddr[0], col);
    b.ds_read_b64_tr_b16(dst.sub(2, 2), vaddr[1], col);
  }
}

// The transposing reads of blocks b0..b0 + transpose_batch - 1 (b0 a multiple of the batch).
void Consumer::pv_transposed_reads(int b0) {
  for (int c = 0; c < pl.transpose_batch; ++c) read_v_transposed(b0 + c);
}

// O^T += V^T P^T, block n = columns 16n..16n+15: one transposing read per block (two for bf16
// V), a batch of reads ahead of its MFMAs.
void Consumer::pv_transposed() {
  const int tr_batch = pl.transpose_batch, tr_regs = pl.transpose_regs, x_regs = pl.v_operand_regs;
  const int p_regs = g.pv_k / 4 * g.p_bytes / 4;
  for (int b0 = 0; b0 < kMlaVDim / 16; b0 += tr_batch) {
    pv_transposed_reads(b0);
    for (int c = 0; c < tr_batch; ++c) {
      VReg a = vraw.sub(c * tr_regs, tr_regs);
      if (pl.widen_v) {
        VReg w = xop.sub((c % 2) * x_regs, x_regs);
        widen_fp8_to_bf16(w, a, xt);
        a = w;
      }
      VReg acc = o.sub(4 * (b0 + c), 4);
      b.mfma(g.pv_mfma, acc, a, pop.sub(0, p_regs), acc);
    }
  }
}

// A 4-column group of PV (8-column reads): its A operands (widened or transposed V).
VReg Consumer::pv_operands(int nb, int half) {
  const int v_nb = pl.v_blocks, vhalves = pl.v_halves, group_regs = pl.v_group_regs;
  const int set = pl.prewiden ? nb - v_nb / 2 : pl.early_release ? nb : 0;  // raw set (prewiden: nb >= v_nb / 2)
  const VReg vnb = vraw.sub(std::max(set, 0) * pl.v_block_regs, pl.v_block_regs);
  VReg x = xop;
  if (pl.prewiden) {
    const int grp = nb * vhalves + half, held = v_nb / 2 * vhalves;
    x = vwide.sub((grp % held) * group_regs, group_regs);
    if (grp >= held) widen_v_group(vnb, half, x, vf32);
  } else if (pl.widen_v) {
    widen_v_group(vnb, half, x, vf32);
  } else {
    std::vector<VReg> tok;  // token slot p's 4 columns of this group
    for (int p = 0; p < pl.pv_tokens_per_lane; ++p) tok.push_back(vnb.sub((p * vhalves + half) * kvb, kvb));
    transpose_v(xop, tok, xt, pl.pv_tokens_per_lane, kvb);
  }
  return x;
}

// ... then its four MFMAs.
void Consumer::pv_mfmas(int nb, int half, VReg x) {
  const int p_regs = g.pv_k / 4 * g.p_bytes / 4;
  for (int q = 0; q < 4; ++q) {
    VReg acc = o.sub(4 * (4 * (pl.v_halves * nb + half) + q), 4);
    b.mfma(g.pv_mfma, acc, x.sub(q * pl.v_operand_regs, pl.v_operand_regs), pop.sub(0, p_regs), acc);
  }
}

// O^T += V^T P^T with 8-column reads: per token, one LDS read of Vc = 8 columns; each 4-column
// group makes four 16-column blocks (block n = 4 (Vc/4 nb + half) + q holds columns 16 Vc nb +
// Vc i + 4 half + q of lane row i). With read-ahead, the MFMAs of the last tail_groups groups
// run after the slot hand-over barrier, beside the next tile's reads; their operands are made
// before it.
void Consumer::pv_rows() {
  const int groups = pl.v_blocks * pl.v_halves, tail = pl.tail_groups;
  tail_ops.clear();
  for (int grp = 0; grp < groups; ++grp) {
    const int nb = grp / pl.v_halves, half = grp % pl.v_halves;
    if (half == 0 && !pl.early_release) read_v(nb, vraw.sub(0, pl.v_block_regs));
    VReg x = pv_operands(nb, half);
    if (grp < groups - tail) pv_mfmas(nb, half, x);
    else tail_ops.push_back(x);
  }
}

// The slot goes back to the producer: after PV (two slots), or before PV with the early
// release; with read-ahead, the hand-over barrier comes before the tail's MFMAs.
void Consumer::hand_over(Label absent) {
  const int groups = pl.v_blocks * pl.v_halves, tail = pl.tail_groups;
  auto pv_tail = [&] {
    for (int grp = groups - tail; grp < groups; ++grp)
      pv_mfmas(grp / pl.v_halves, grp % pl.v_halves, tail_ops[size_t(grp - (groups - tail))]);
  };
  Label tile_done = b.new_label("tile_done");
  if (pl.prefetch) {
    b.s_barrier();  // the producer has written slot i+1
    SReg next = ra.sgpr(1, "c_next_tile");
    b.s_lshl_b32(next, k_.iter, Imm(log2i(g.kv_splits)));
    b.s_add_u32(next, next, split_);
    b.s_add_u32(next, next, Imm(g.kv_splits));
    b.s_cmp_ge_u32(next, k_.ntiles);
    ra.release(next);
    Label plain = b.new_label("tail_plain"), joined = b.new_label("tail_done");
    b.s_cbranch_scc1(plain);
    read_ahead();  // the tail's operands are made: the raw V registers are free
    pv_tail();
    b.s_branch(joined);
    b.bind(plain);
    pv_tail();
    b.bind(joined);
    b.s_branch(tile_done);
  }
  Label written = b.new_label("slot_written");
  if (pl.early_release && !pl.prefetch) b.s_branch(written);  // the slot was released before PV
  b.bind(absent);
  b.s_barrier();  // slot i%2 is free for the producer
  b.bind(written);
  if (g.ring == 1) b.s_barrier();  // one slot: the producer has written slot i+1
  b.bind(tile_done);
}

// fp8 V for a bf16 PV (8-column reads, 4-column group `half` of the raw rows `raw`): the A
// operands of four 16-column blocks into dst (4 x x_regs). Each token pair's 4 columns are
// widened to f32 (vf32: 8 registers), then one v_perm_b32 per dword takes the two bf16 halves:
// column q, dword w = [bf16 V(token slot 2w, q), bf16 V(token slot 2w + 1, q)].
void Consumer::widen_v_group(VReg raw, int half, VReg dst, VReg vf) {
  const int klpv = g.pv_k / 4, vhalves = g.v_read_columns / 4, x_regs = klpv * g.p_bytes / 4;
  for (int w = 0; w < klpv / 2; ++w) {
    for (int h = 0; h < 2; ++h) {
      const VReg tok = raw[(2 * w + h) * vhalves + half];  // token slot 2w + h, this group (fp8: 1 dword)
      b.v_cvt_pk_f32_fp8(vf.sub(4 * h, 2), tok, 0);
      b.v_cvt_pk_f32_fp8(vf.sub(4 * h + 2, 2), tok, 1);
    }
    for (int q = 0; q < 4; ++q) b.v_perm_b32(dst[q * x_regs + w], vf[4 + q], vf[q], k_.K(sel(2, 3, 6, 7)));
  }
}

// Four fp8 bytes -> four bf16 (exact: every fp8 e4m3 value is a bf16 value). src: 1 dword
// (4 bytes) or 2 dwords (8 bytes); dst: 2 or 4 registers.
void Consumer::widen_fp8_to_bf16(VReg dst, VReg src, VReg tmp4) {
  for (int w = 0; w < src.count; ++w) {
    b.v_cvt_pk_f32_fp8(tmp4.sub(0, 2), src[w], 0);
    b.v_cvt_pk_f32_fp8(tmp4.sub(2, 2), src[w], 1);
    b.v_perm_b32(dst[2 * w], tmp4[1], tmp4[0], k_.K(sel(2, 3, 6, 7)));
    b.v_perm_b32(dst[2 * w + 1], tmp4[3], tmp4[2], k_.K(sel(2, 3, 6, 7)));
  }
}

// tok[p] holds, per token slot p (klpv of them), 4 consecutive columns (1 dword for fp8,
// 2 for bf16). Produce for each column q the A operand: klpv elements in token order.
void Consumer::transpose_v(VReg x, const std::vector<VReg>& tok, VReg t, int klpv, int kb) {
  const int x_regs = klpv * kb / 4;
  if (kb == 1) {
    // 4x4 byte transposes: tokens (4 dwords) x columns (bytes) -> columns x tokens.
    for (int grp = 0; grp < klpv / 4; ++grp) {
      const VReg d[4] = {tok[4 * grp][0], tok[4 * grp + 1][0], tok[4 * grp + 2][0], tok[4 * grp + 3][0]};
      b.v_perm_b32(t[0], d[0], d[1], k_.K(sel(4, 0, 6, 2)));  // [d0.b0 d1.b0 d0.b2 d1.b2]
      b.v_perm_b32(t[1], d[0], d[1], k_.K(sel(5, 1, 7, 3)));  // [d0.b1 d1.b1 d0.b3 d1.b3]
      b.v_perm_b32(t[2], d[2], d[3], k_.K(sel(4, 0, 6, 2)));
      b.v_perm_b32(t[3], d[2], d[3], k_.K(sel(5, 1, 7, 3)));
      b.v_perm_b32(x[0 * x_regs + grp], t[2], t[0], k_.K(sel(0, 1, 4, 5)));  // column 0
      b.v_perm_b32(x[2 * x_regs + grp], t[2], t[0], k_.K(sel(2, 3, 6, 7)));  // column 2
      b.v_perm_b32(x[1 * x_regs + grp], t[3], t[1], k_.K(sel(0, 1, 4, 5)));  // column 1
      b.v_perm_b32(x[3 * x_regs + grp], t[3], t[1], k_.K(sel(2, 3, 6, 7)));  // column 3
    }
  } else {
    // bf16: token p holds columns 0,1 in dword 0 and 2,3 in dword 1. Output dword w of
    // column q = [token 2w col q, token 2w+1 col q].
    for (int q = 0; q < 4; ++q)
      for (int w = 0; w < x_regs; ++w) {
        VReg lo_tok = tok[2 * w], hi_tok = tok[2 * w + 1];
        int h = (q % 2) * 2;
        b.v_perm_b32(x[q * x_regs + w], hi_tok[q / 2], lo_tok[q / 2], k_.K(sel(h, h + 1, 4 + h, 5 + h)));
      }
  }
}

// Two f32 -> packed bf16 (round to nearest even); gfx942 has no conversion instruction.
void Consumer::pack_bf16(VReg d, VReg lo, VReg hi, VReg t0, VReg t1) {
  if (b.target().has_cvt_pk_bf16) {
    b.v_cvt_pk_bf16_f32(d, lo, hi);
    return;
  }
  // bits + 0x7fff + ((bits >> 16) & 1), keep the high half.
  b.v_bfe_u32(t0, lo, Imm(16), Imm(1));
  b.v_add3_u32(t0, lo, k_.K(0x7fff), t0);
  b.v_bfe_u32(t1, hi, Imm(16), Imm(1));
  b.v_add3_u32(t1, hi, k_.K(0x7fff), t1);
  b.v_perm_b32(d, t1, t0, k_.K(sel(2, 3, 6, 7)));
}

}  // namespace mla::gen::decode
