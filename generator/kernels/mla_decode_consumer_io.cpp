// The consumer's way in and out (mla_decode_consumer.h): Q into AGPRs or LDS (and the Q split),
// address helpers, the merge of a row block's token splits, and the epilogue that writes the
// final output or a partial.
#include "kernels/mla_decode_consumer.h"
#include "kernels/mla_reduce.h"

namespace mla::gen::decode {

// Moves chunk bytes of every QK block into the AGPRs, read with `read(dst, gstride, byte
// offset)` (global memory or the LDS image of Q). A pair's two blocks are one read (their AGPRs
// are consecutive).
template <class Read>
void Consumer::fill_q(VReg qstage, Read&& read) {
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    if (blocks[bi].pair_second) continue;
    int reg = pl.q_agpr_offset[bi];
    for (const Chunk& c : lane_chunks(blocks[bi])) {
      const int n = c.len * qb / 4 * (blocks[bi].pair_first ? 2 : 1);
      VReg st = qstage.sub(0, n);
      read(st, gstride(blocks[bi]), uint32_t(c.elem_off * qb));
      for (int r = 0; r < n; ++r) b.v_accvgpr_write_b32(qa[reg + r], st[r]);
      reg += n;
    }
  }
}

// Q of this lane's row: into AGPRs (straight from memory with one split, through LDS with
// several), or into LDS only (Q read every tile), split into fp8 images where planned.
void Consumer::load_q() {
  // Q rows of this request (prefix: of the group): buffer over exactly its rows, so padded rows
  // read zeros.
  SReg qrsrc = ra.sgpr(4, "c_q_rsrc"), base = ra.sgpr(2, "c_base");
  request_base(base, k_.ptr(mla_decode_args::q), kMlaDim * qb);
  rows_resource(qrsrc, base, kMlaDim * qb);
  // Lane (j, g) offsets of the k layouts in use: g * gstride elements (see lane_chunks).
  gq = ra.vgpr(1, "c_tmp");
  for (const auto& blk : blocks) {
    const int gs = gstride(blk);
    if (qg.count(gs)) continue;
    VReg v = ra.vgpr(1, fmt::format("c_q_offset_g{}", gs));
    b.v_mul_u32_u24(v, Imm(gs * pl.q_operand_bytes / 4), g4);  // (4g) * gs*qob/4 = g * gs * qob
    qg[gs] = v;
  }
  qa = g.q_in_lds ? AReg{} : ra.agpr(pl.q_agprs, "c_q_operand", 2);
  VReg qstage = ra.vgpr(4, "c_q_stage", 4);
  if (g.kv_splits == 1 && !g.q_in_lds) {
    VReg qrow = ra.vgpr(1, "c_q_row_offset");
    b.v_mul_u32_u24(qrow, Imm(kMlaDim * qb), row);
    for (auto& [gs, v] : qg) b.v_add_u32(v, qrow, v);
    ra.release(qrow);
    fill_q(qstage, [&](VReg dst, int gs, uint32_t off) {
      if (dst.count == 1) b.buffer_load_dword(dst, qg[gs], qrsrc, Imm(0), off);
      else if (dst.count == 2) b.buffer_load_dwordx2(dst, qg[gs], qrsrc, Imm(0), off);
      else b.buffer_load_dwordx4(dst, qg[gs], qrsrc, Imm(0), off);
    });
    b.s_barrier();  // pairs with the producer's prologue barrier: slot 0 holds the first tiles
  } else {
    copy_q_through_lds(qrsrc, qstage);
  }
  if (!g.q_in_lds)
    for (auto& [gs, v] : qg) ra.release(v);
  ra.release(qstage);
  ra.release(qrsrc);
}

// The S consumers of a row block share Q through LDS (slot 1 of the ring, which the producer
// first writes after its second barrier; or, Q in LDS, a region of its own after the ring), so
// each Q byte is read from memory once per workgroup: the consumers copy the block's 16 rows
// (row-major, as in memory) in 8-byte pieces, consumer s taking pieces s*64 + lane of every
// round; after the barrier each reads its operands.
void Consumer::copy_q_through_lds(SReg qrsrc, VReg qstage) {
  const int S = g.kv_splits;
  const int area = kRowsPerWave * g.q_lds_row;
  SReg qarea = ra.sgpr(1, "c_q_lds_base");
  b.s_lshr_b32(qarea, k_.wave, Imm(4));  // wave = 16 * row block
  b.s_mul_i32(qarea, qarea, Imm(area));
  b.s_add_u32(qarea, qarea, Imm(g.q_in_lds ? g.ring * k_.slot_bytes() : k_.slot_bytes()));
  // Piece q = round * 64S + 64s + lane of the block's 16 rows (P pieces per row): memory byte
  // 8q from the block's first row; LDS byte 8(q + (pad / 8) (q / P)) (rows padded by pad =
  // q_lds_row - 576 q bytes). q / P by multiply and shift, checked exact over the range here.
  const int P = kMlaDim * qb / 8, pieces = kRowsPerWave * P, per_round = 64 * S;
  const int rounds = (pieces + per_round - 1) / per_round;
  const auto [mul, shift] = q_piece_divider(qb);
  if (rounds * per_round > kRowsPerWave * P + 64 * 4)
    throw std::logic_error("mla_decode: Q pieces beyond the divider's range");
  const int pad8 = (g.q_lds_row - kMlaDim * qb) / 8;
  if (pad8 < 1 || g.q_lds_row != kMlaDim * qb + 8 * pad8)
    throw std::logic_error("mla_decode: Q rows are padded by a multiple of 8 bytes");
  VReg piece = ra.vgpr(1, "c_q_piece"), glin = ra.vgpr(1, "c_q_piece_global"), lds = ra.vgpr(1, "c_q_piece_lds");
  SReg t = ra.sgpr(1, "c_q_tmp"), saved = ra.sgpr(2, "c_q_exec");
  b.s_lshl_b32(t, split_, Imm(6));
  b.v_add_u32(piece, t, k_.lane);
  b.v_lshlrev_b32(glin, Imm(3), piece);
  b.s_mul_i32(t, srow, Imm(kMlaDim * qb));  // the row block's first row, in bytes
  b.v_add_u32(glin, t, glin);
  for (int k = 0; k < rounds; ++k) {
    VReg st = qstage.sub(2 * (k % 2), 2);
    if (k) {
      b.v_add_u32(piece, Imm(per_round), piece);
      b.v_add_u32(glin, Imm(8 * per_round), glin);
    }
    b.v_mul_u32_u24(lds, k_.K(mul), piece);
    b.v_lshrrev_b32(lds, Imm(shift), lds);
    if (pad8 > 1) b.v_mul_u32_u24(lds, Imm(pad8), lds);
    b.v_add_u32(lds, piece, lds);
    b.v_lshlrev_b32(lds, Imm(3), lds);
    b.v_add_u32(lds, qarea, lds);
    const bool tail = (k + 1) * per_round > pieces;
    if (tail) {
      b.v_cmp_gt_u32(vcc, k_.K(uint32_t(pieces)), piece);
      b.s_and_saveexec_b64(saved, vcc);
    }
    b.buffer_load_dwordx2(st, glin, qrsrc, Imm(0));
    b.ds_write_b64(lds, st);
    if (tail) b.s_mov_exec(saved);
  }
  b.s_barrier();  // pairs with the producer's prologue barrier
  if (split) {
    split_q(qarea);
    b.s_barrier();  // every row's fp8 images and inverse scale are written
  }
  VReg qrow = ra.vgpr(1, "c_q_row_offset");
  b.v_mul_u32_u24(qrow, Imm(g.q_lds_row), j);
  b.v_add_u32(qrow, qarea, qrow);
  if (split) {
    q_inv_scale = ra.vgpr(1, "c_q_inv_scale");  // 1/s of this lane's row j
    b.ds_read_b32(q_inv_scale, qrow, uint32_t(g.q_lds_row - 4));
  }
  for (auto& [gs, v] : qg) b.v_add_u32(v, qrow, v);  // Q in LDS: the loop reads through these
  if (!g.q_in_lds) {
    fill_q(qstage, [&](VReg dst, int gs, uint32_t off) {
      k_.ds_read_dwords(dst, qg[gs], off);
    });
    b.s_barrier();  // Q is in every consumer's AGPRs: slot 1 is the producer's again
  }
  for (VReg r : {piece, glin, lds, qrow}) ra.release(r);
  ra.release(qarea);
  ra.release(t);
  ra.release(saved);
}

// The Q split (MlaGeometry::q_split), once per unit, after the row block's 16 bf16 rows are
// in LDS (row r at qarea + r R, R = q_lds_row). Consumer s of S takes rows s 16/S .. +16/S-1,
// four at a time: lane group g = lane / 16 takes the four's row g, its lane j = lane % 16 the
// 8-byte pieces (4 bf16) j + 16 p, p < 9, of the row's 144. Per row:
//   m = max |q| (over the lane's 36 values, then the 16 lanes by ds_bpermute), e its biased
//   exponent; s = 2^(133 - e), the exponent clamped to 1..254, so m s lies in [64, 128)
//   (within e4m3fnuz's 240 and e4m3's 448 after rounding);
//   hi = fp8(q s), lo = fp8((q s - hi) 2^kQLoShift): exact (see mla_geometry) but for
//   elements below 2^-14 of the row's max, whose lo needs bits under e4m3fnuz's denormal
//   step (2^-10): it is rounded, by at most 2^-22 of the row's max;
//   hi over the row's bytes 0..575, lo over q_lo_offset.., 1/s (bits (254 - c) << 23) in the
//   last dword, written by lane j = 0.
// Every lane reads all of its pieces before the first write, a wave's DS operations execute
// in order and every row belongs to one wave: the in-place rewrite cannot race.
void Consumer::split_q(SReg qarea) {
  const int R = g.q_lds_row, rows_per_wave = kRowsPerWave / g.kv_splits;
  constexpr int kPieces = kMlaDim * 2 / 8 / 16;  // 9 pieces per lane and row
  VReg rd = ra.vgpr(1, "c_qs_read"), wr = ra.vgpr(1, "c_qs_write"), t = ra.vgpr(1, "c_qs_tmp");
  VReg m = ra.vgpr(1, "c_qs_max"), c = ra.vgpr(1, "c_qs_exp");
  VReg d = ra.vgpr(2 * kPieces, "c_qs_bf16", 2), x = ra.vgpr(2, "c_qs_f32", 2), bk = ra.vgpr(2, "c_qs_back", 2);
  VReg sc = ra.vgpr(2, "c_qs_scale", 2), hi = ra.vgpr(1, "c_qs_hi"), lo = ra.vgpr(1, "c_qs_lo");
  SReg srow = ra.sgpr(1, "c_qs_row"), saved = ra.sgpr(2, "c_qs_exec");
  // Row base of lane group g: qarea + (s rows_per_wave + g) R; reads at + 8j, writes at + 4j.
  b.s_mul_i32(srow, split_, Imm(rows_per_wave));
  b.v_lshrrev_b32(t, Imm(4), k_.lane);
  b.v_add_u32(t, srow, t);
  b.v_mul_u32_u24(t, Imm(R), t);
  b.v_add_u32(t, qarea, t);
  b.v_and_b32(rd, Imm(15), k_.lane);
  b.v_lshlrev_b32(wr, Imm(2), rd);
  b.v_add_u32(wr, t, wr);
  b.v_lshlrev_b32(rd, Imm(3), rd);
  b.v_add_u32(rd, t, rd);
  b.v_mov_b32(sc[1], Imm(0));
  VReg lo_scale = ra.vgpr(2, "c_qs_lo_scale", 2);
  b.v_mov_b32(lo_scale[0], f32(float(1 << kQLoShift)));
  b.v_mov_b32(lo_scale[1], Imm(0));
  for (int grp = 0; grp < rows_per_wave / 4; ++grp) {
    const uint32_t base = uint32_t(4 * grp * R);
    for (int p = 0; p < kPieces; ++p) b.ds_read_b64(d.sub(2 * p, 2), rd, base + uint32_t(128 * p));
    // Largest magnitude: the 15 magnitude bits of each bf16 compare as integers.
    b.v_mov_b32(m, Imm(0));
    for (int w = 0; w < d.count; ++w) {
      b.v_bfe_u32(x[0], d[w], Imm(0), Imm(15));
      b.v_bfe_u32(x[1], d[w], Imm(16), Imm(15));
      b.v_max3_u32(m, m, x[0], x[1]);
    }
    for (int k : {1, 2, 4, 8}) {  // over the row's 16 lanes
      b.v_xor_b32(t, Imm(k), k_.lane);
      b.v_lshlrev_b32(t, Imm(2), t);
      b.ds_bpermute_b32(x[0], t, m);
      b.v_max_u32(m, m, x[0]);
    }
    b.v_lshrrev_b32(c, Imm(7), m);              // e
    b.v_sub_u32(c, Imm(133 + 127), c);          // exponent field of s = 2^(6 - (e - 127))
    b.v_med3_i32(c, c, Imm(1), k_.K(254));
    b.v_lshlrev_b32(sc[0], Imm(23), c);
    for (int p = 0; p < kPieces; ++p) {
      for (int h = 0; h < 2; ++h) {  // dword h of the piece: bf16 values 2h, 2h + 1
        const VReg w = d[2 * p + h];
        b.v_lshlrev_b32(x[0], Imm(16), w);
        b.v_and_b32(x[1], k_.K(0xffff0000u), w);
        b.v_pk_mul_f32_bcast_lo(x, x, sc);        // q s
        b.v_cvt_pk_fp8_f32(hi, x[0], x[1], h);
        b.v_cvt_pk_f32_fp8(bk, hi, h);
        b.v_sub_f32(x[0], x[0], bk[0]);
        b.v_sub_f32(x[1], x[1], bk[1]);
        b.v_pk_mul_f32_bcast_lo(x, x, lo_scale);  // (q s - hi) 2^kQLoShift, exact
        b.v_cvt_pk_fp8_f32(lo, x[0], x[1], h);
      }
      b.ds_write_b32(wr, hi, base + uint32_t(64 * p));
      b.ds_write_b32(wr, lo, base + uint32_t(g.q_lo_offset + 64 * p));
    }
    // 1/s = 2^(c' - 127) with c' = 254 - c, from the row's first lane.
    b.v_sub_u32(c, k_.K(254), c);
    b.v_lshlrev_b32(c, Imm(23), c);
    b.v_and_b32(t, Imm(15), k_.lane);
    b.v_cmp_eq_u32(vcc, Imm(0), t);
    b.s_and_saveexec_b64(saved, vcc);
    b.ds_write_b32(wr, c, base + uint32_t(R - 4));
    b.s_mov_exec(saved);
  }
  for (VReg r : {rd, wr, t, m, c, d, x, bk, sc, lo_scale, hi, lo}) ra.release(r);
  ra.release(srow);
  ra.release(saved);
}


std::vector<Consumer::Chunk> Consumer::lane_chunks(const QkBlock& blk) {
  const int e = lane_elems(blk);
  if (e <= 16) return {{blk.lane_k0, e}};  // a paired block: lane_k0 / lane_stride of the pair
  std::vector<Chunk> v;
  for (int c = 0; c < e / 16; ++c) v.push_back({blk.k0 + 64 * c, 16});
  return v;
}

// LDS byte address of this lane's 8-byte row for the transposing V reads (block 0). A
// 16x16xK=32 A operand wants, in lane L, column L%16 and the tokens of k = 8(L/16) + p,
// p = 4 st + r, which the P^T operand maps to token 16 st + 4((L/16 + st) % 4) + r.
// The reads (hardware rule, docs/emulator.md "LDS transpose reads"; G = L/16, l = L%16):
//   ds_read_b64_tr_b8:  byte p of lane L = byte l%8 of the row of lane 16G + 2p + l/8
//   ds_read_b64_tr_b16: half r of lane L = half l%4 of the row of lane 16G + 4r + l/4
// (one b16 read per sub-tile st). Solving for the row each source lane s (m = s%16) holds:
//   b8:  p = m/2 (st = m/8, r = (m/2)%4): token 16 st + 4((s/16 + st) % 4) + r, columns 8(m%2) .. +7
//   b16 (read st), r = m/4:               token 16 st + 4((s/16 + st) % 4) + r, columns 4(m%4) .. +3
// Each 16-lane group names the same 16 rows as under the rocjitsu-interpreter mapping this
// replaced, in another lane order: the bank model's cost is unchanged.
void Consumer::transpose_read_base(VReg base, VReg tmp, int kvb, int st) {
  const int E = g.lds_row_bytes;
  b.v_lshrrev_b32(base, Imm(4), k_.lane);              // s/16
  if (kvb == 1) {
    b.v_bfe_u32(tmp, k_.lane, Imm(3), Imm(1));         // st = m/8
    b.v_add_u32(base, base, tmp);
    b.v_and_b32(base, Imm(3), base);
    b.v_lshlrev_b32(base, Imm(2), base);             // 4((s/16 + st) % 4)
    b.v_lshlrev_b32(tmp, Imm(4), tmp);
    b.v_add_u32(base, base, tmp);                    // + 16 st
  } else {
    if (st) b.v_add_u32(base, Imm(st), base);
    b.v_and_b32(base, Imm(3), base);
    b.v_lshlrev_b32(base, Imm(2), base);             // 4((s/16 + st) % 4)
    if (st) b.v_add_u32(base, Imm(16 * st), base);   // + 16 st
  }
  b.v_bfe_u32(tmp, k_.lane, Imm(kvb == 1 ? 1 : 2), Imm(2));
  b.v_add_u32(base, base, tmp);                      // + r
  b.v_mul_u32_u24(base, Imm(E), base);
  b.v_and_b32(tmp, Imm(kvb == 1 ? 1 : 3), k_.lane);
  b.v_lshlrev_b32(tmp, Imm(3), tmp);                 // 8 bytes per column group
  b.v_add_u32(base, base, tmp);
}

// A buffer over the unit's rows at `bytes` per row from `base`: the M rows of a request, or a
// prefix group's R (PrefixUnit::rows).
void Consumer::rows_resource(SReg rsrc, SReg base, int bytes) {
  if (!g.prefix) return b.make_buffer_resource(rsrc, base, Imm(M * bytes));
  SReg n = ra.sgpr(1, "c_rows_bytes");
  b.s_mul_i32(n, k_.unit[abi::prefix_unit::rows], Imm(bytes));
  b.make_buffer_resource(rsrc, base, n);
  ra.release(n);
}

// base = ptr + qo_row * heads * row_bytes (64-bit, scalar).
void Consumer::request_base(SReg base, SReg ptr64, int row_bytes) {
  SReg t = ra.sgpr(2, "c_offset64");
  b.s_mul_i32(t[0], k_.qo_row(), Imm(k_.s.heads * row_bytes));
  b.s_mul_hi_u32(t[1], k_.qo_row(), Imm(k_.s.heads * row_bytes));
  b.s_add_u32(base[0], ptr64[0], t[0]);
  b.s_addc_u32(base[1], ptr64[1], t[1]);
  ra.release(t);
}

// (mul, shift) with (q * mul) >> shift == q / P for every piece index q of the Q copy (P =
// 8-byte pieces of a Q row; q < 16 P + one round of 4 consumers); v_mul_u32_u24 keeps the low
// 32 bits, so q * mul must stay below 2^32.
std::pair<uint32_t, int> Consumer::q_piece_divider(int qb) {
  const uint32_t P = uint32_t(kMlaDim * qb / 8), n = uint32_t(kRowsPerWave) * P + 64 * 4;
  for (int shift = 16; shift < 32; ++shift) {
    const uint32_t mul = uint32_t(((uint64_t(1) << shift) + P - 1) / P);
    bool exact = mul < (1u << 24) && uint64_t(n) * mul < (uint64_t(1) << 32);
    for (uint32_t q = 0; exact && q < uint32_t(n); ++q) exact = (uint64_t(q) * mul) >> shift == q / P;
    if (exact) return {mul, shift};
  }
  throw std::logic_error(fmt::format("mla_decode: no multiply-shift divides by {} below {}", P, n));
}

// d = row / heads, exact for row < 16 * rows_per_group * row_groups.
void Consumer::row_div_heads(VReg d, VReg row_reg) {
  const int h = k_.s.heads;
  if ((h & (h - 1)) == 0) {
    b.v_lshrrev_b32(d, Imm(log2i(h)), row_reg);
    return;
  }
  const uint32_t mul = (65536u + uint32_t(h) - 1) / uint32_t(h);
  for (int r = 0; r < g.row_groups * g.rows_per_group; ++r)
    if (int((uint32_t(r) * mul) >> 16) != r / h)
      throw std::logic_error(fmt::format("row / {} by multiply-shift is inexact at row {}", h, r));
  b.v_mul_u32_u24(d, Imm(mul), row_reg);
  b.v_lshrrev_b32(d, Imm(16), d);
}


// The S consumers of a row block hold (m, l, O^T) of disjoint tokens, relative to their own
// reference max m. Splits 1..S-1 store theirs in LDS (free after the last barrier: ring and
// Q region; lane-major, so every lane reads back its own) and split 0 folds them in:
// m' = max(m0, ms), a = exp2(m0 - m'), b = exp2(ms - m'), l' = a l0 + b ls, O' = a O0 + b Os.
// Writer w = row block * (S-1) + split - 1 uses region w % F in round w / F, F = regions
// that fit; a writer leaves for the unit's meeting point after its round's first barrier (it
// takes part in the later barriers there: mla_decode.cpp, emit_unit_sync), and a second barrier
// keeps the next round's writers off the regions until split 0 has read them. The producer
// leaves for the meeting point after its ring the same way.
void Consumer::merge_splits() {
  const VReg tmp = kop, t0 = tt, t1 = tsum;
  const int S = g.kv_splits, R = g.merge_bytes, o_bytes = kRowsPerWave * kMlaVDim * 4;
  const int F = g.lds_bytes / R, W = g.row_blocks * (S - 1), rounds = (W + F - 1) / F;
  if (F < 1 || tmp.count < 8) throw std::logic_error("mla_decode: no room for the merge of the splits");
  SReg widx = ra.sgpr(1, "m_writer"), region = ra.sgpr(1, "m_region"), other = ra.sgpr(1, "m_other");
  VReg addr = ra.vgpr(1, "m_addr");
  b.s_lshr_b32(widx, k_.wave, Imm(4));  // wave = 16 * row block
  b.s_mul_i32(widx, widx, Imm(S - 1));
  b.s_add_u32(widx, widx, split_);
  b.s_sub_u32(widx, widx, Imm(1));     // meaningless for split 0, never used there
  auto region_of = [&](SReg w, int round) {  // region = (w - round*F) * R; addr = region + 16 lane
    b.s_sub_u32(region, w, Imm(round * F));
    b.s_mul_i32(region, region, Imm(R));
    b.v_lshlrev_b32(addr, Imm(4), k_.lane);
    b.v_add_u32(addr, region, addr);
  };
  // SCC = 1 unless round*F <= w < (round+1)*F.
  auto outside_round = [&](SReg w, int round, Label skip) {
    b.s_cmp_lt_u32(w, Imm(round * F));
    b.s_cbranch_scc1(skip);
    b.s_cmp_ge_u32(w, Imm((round + 1) * F));
    b.s_cbranch_scc1(skip);
  };
  for (int k = 0; k < rounds; ++k) {
    Label not_writer = b.new_label("merge_not_writer"), no_merge = b.new_label("merge_done");
    b.s_cmp_eq_u32(split_, Imm(0));
    b.s_cbranch_scc1(not_writer);
    outside_round(widx, k, not_writer);
    // Writer: O^T as 32 x 16 bytes per lane (offset 1024 n), then m and l (4 bytes per lane).
    region_of(widx, k);
    for (int n = 0; n < o.count / 4; ++n) b.ds_write_b128(addr, o.sub(4 * n, 4), uint32_t(1024 * n));
    b.v_lshlrev_b32(t0, Imm(2), k_.lane);
    b.v_add_u32(t0, region, t0);
    b.ds_write_b32(t0, mrun, uint32_t(o_bytes));
    b.ds_write_b32(t0, lrun, uint32_t(o_bytes + 256));
    b.s_barrier();
    k_.end_unit();

    b.bind(not_writer);
    b.s_barrier();
    b.s_cmp_lg_u32(split_, Imm(0));
    b.s_cbranch_scc1(no_merge);
    for (int sp = 1; sp < S; ++sp) {
      Label absent = b.new_label("merge_skip");
      b.s_lshr_b32(other, k_.wave, Imm(4));
      b.s_mul_i32(other, other, Imm(S - 1));
      b.s_add_u32(other, other, Imm(sp - 1));
      outside_round(other, k, absent);
      region_of(other, k);
      b.v_lshlrev_b32(t0, Imm(2), k_.lane);
      b.v_add_u32(t0, region, t0);
      b.ds_read_b32(t1, t0, uint32_t(o_bytes));              // ms
      b.ds_read_b32(alpha[1], t0, uint32_t(o_bytes + 256));  // ls
      b.v_max_f32(t0, mrun, t1);                             // m'
      b.v_sub_f32(mrun, mrun, t0);
      b.v_exp_f32(alpha[0], mrun);                           // a
      b.v_sub_f32(t1, t1, t0);
      b.v_exp_f32(t1, t1);                                   // b
      b.v_mov_b32(mrun, t0);
      b.v_mul_f32(alpha[1], alpha[1], t1);
      b.v_fma_f32(lrun, lrun, alpha[0], alpha[1]);
      b.v_mov_b32(alpha[1], t1);  // alpha = (a, b)
      for (int n0 = 0; n0 < o.count / 4; n0 += 2) {
        b.ds_read_b128(tmp.sub(0, 4), addr, uint32_t(1024 * n0));
        b.ds_read_b128(tmp.sub(4, 4), addr, uint32_t(1024 * (n0 + 1)));
        for (int r = 0; r < 8; ++r) {
          VReg acc = o.sub(4 * n0 + r, 1);
          b.v_mul_f32(acc, alpha[0], acc);
          b.v_fma_f32(acc, tmp[r], alpha[1], acc);
        }
      }
      b.bind(absent);
    }
    b.bind(no_merge);
    if (k + 1 < rounds) b.s_barrier();
  }
  b.v_mov_b32(alpha[1], Imm(0));
  for (SReg r : {widx, region, other}) ra.release(r);
  ra.release(addr);
}



void Consumer::epilogue() {
  if (g.split_pv) return epilogue_split();
  const VReg t0 = tt, t1 = tsum;
  const int Vc = g.v_read_columns;
  normalise_o(lrun, o);
  VReg lse = t1;
  row_lse(lse);

  // Byte offset of column 16g of this lane's row (relative to the row-group base).
  SReg rsrc = ra.sgpr(4, "e_rsrc"), base = ra.sgpr(2, "e_base"), saved = ra.sgpr(2, "e_exec");
  VReg off = ra.vgpr(1, "e_offset"), stage = ra.vgpr(4, "e_stage", 4);
  Label partial_path = b.new_label("write_partial"), done = b.new_label("written");
  if (!g.prefix) {  // a prefix unit always writes a partial
    b.s_cmp_lt_i32(k_.partial(), Imm(0));
    b.s_cbranch_scc0(partial_path);
    // Final output: bf16 o[(qo_row * heads + row) * 512 + col].
    request_base(base, k_.ptr(mla_decode_args::o), kMlaVDim * 2);
    b.make_buffer_resource(rsrc, base, Imm(M * kMlaVDim * 2));
    b.v_mul_u32_u24(off, Imm(kMlaVDim * 2), row);
    store_o_bf16(rsrc, off, stage);
    if (k_.s.return_lse) {
      request_base(base, k_.ptr(mla_decode_args::lse), 4);
      b.make_buffer_resource(rsrc, base, Imm(M * 4));
      write_lse(lse, rsrc, saved, off);
    }
    b.s_branch(done);
  }
  b.bind(partial_path);
  {
    // Partial slot p: partial_o[(p * M + row) * 512 + col] f32, partial_lse[p * M + row]; a
    // bf16 partial (g.partial_o_bytes == 2) fills the first 1024 bytes of the same 2048-byte row.
    // A prefix unit's R rows run on from its slot into the next ones (member i's in slot + i).
    partial_base(base, k_.ptr(mla_decode_args::partial_o), M * kMlaVDim * 4);
    rows_resource(rsrc, base, kMlaVDim * 4);
    b.v_mul_u32_u24(off, Imm(kMlaVDim * 4), row);
    if (g.partial_o_bytes == 2) {
      store_o_bf16(rsrc, off, stage);
    } else if (g.v_lds_transpose) {
      // Block n: columns 16n + 4g .. +3, stored straight from the accumulators.
      b.v_lshlrev_b32(t0, Imm(2), g4);
      b.v_add_u32(off, off, t0);
      for (int n = 0; n < kMlaVDim / 16; ++n)
        b.buffer_store_dwordx4(o.sub(4 * n, 4), off, rsrc, Imm(0), uint32_t(64 * n));
    } else {
      b.v_mul_u32_u24(t0, Imm(4 * Vc), g4);  // 4 Vc g columns * 4 bytes
      b.v_add_u32(off, off, t0);
    }
    for (int nb = 0; nb < (g.v_lds_transpose || g.partial_o_bytes == 2 ? 0 : kMlaVDim / (16 * Vc)); ++nb)
      for (int r = 0; r < 4; ++r)
        for (int c0 = 0; c0 < Vc; c0 += 4) {
          for (int q = 0; q < 4; ++q) b.v_mov_b32(stage[q], o[4 * (Vc * nb + c0 + q) + r]);
          b.buffer_store_dwordx4(stage, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r + c0) * 4));
        }
    partial_base(base, k_.ptr(mla_decode_args::partial_lse), M * 4);
    rows_resource(rsrc, base, 4);
    write_lse(lse, rsrc, saved, off);
    if (!g.prefix) {
      for (SReg r : {rsrc, base, saved}) ra.release(r);
      for (VReg r : {off, stage}) ra.release(r);
      merge_in_launch();
    }
  }
  b.bind(done);
}

// In-launch merge (docs/mla-decode.md): with the decode header's merge_offset set, this row
// block's split arrives at its counter (one per request and 16-row block) after its partial is
// released at agent scope, and the split that completes the count (acquire) merges the block's
// rows from every split's partial into o (and lse), then resets the counter for the next launch.
// No workgroup waits for another: the last to arrive does the work.
void Consumer::merge_in_launch() {
  namespace H = abi::launch_header;
  namespace E = abi::reduce_entry;
  const int M = k_.s.heads * k_.s.qseqlen;
  const int blocks = (M + g.rows_per_group - 1) / g.rows_per_group * (g.rows_per_group / 16);
  SReg work = k_.ptr(mla_decode_args::work);
  SReg hdr = ra.sgpr(2, "m_header", 2);
  b.s_load_dwordx2(hdr, work, uint32_t(4 * H::merge_offset));
  static_assert(H::counters_offset == H::merge_offset + 1, "one x2 load");
  Label skip = b.new_label("merge_skip");
  b.s_cmp_eq_u32(hdr[0], Imm(0));
  b.s_cbranch_scc1(skip);
  // The request's merge entry (abi::ReduceEntry at header + merge_offset + 32 b).
  SReg addr = ra.sgpr(2, "m_addr"), entry = ra.sgpr(8, "m_entry", 4);
  SReg batch = k_.unit[abi::work_unit::batch];
  b.s_lshl_b32(addr[0], batch, Imm(5));
  b.s_add_u32(addr[0], hdr[0], addr[0]);
  b.s_add_u32(addr[0], work[0], addr[0]);
  b.s_addc_u32(addr[1], work[1], Imm(0));
  b.s_load_dwordx8(entry, addr, 0);
  // This block's counter: header + counters_offset + 4 (b * blocks + srow / 16).
  SReg counters = ra.sgpr(2, "m_counters"), idx = ra.sgpr(1, "m_index"), saved = ra.sgpr(2, "m_exec");
  b.s_add_u32(counters[0], work[0], hdr[1]);
  b.s_addc_u32(counters[1], work[1], Imm(0));
  b.s_mul_i32(idx, batch, Imm(blocks));
  b.s_lshr_b32(addr[0], srow, Imm(4));
  b.s_add_u32(idx, idx, addr[0]);
  b.s_lshl_b32(idx, idx, Imm(2));
  // VGPRs: O^T is dead once stored (the next unit sets it up again).
  VReg voff = o[kMergeBlockVgprs], one = o[kMergeBlockVgprs + 1], old = o[kMergeBlockVgprs + 2];
  b.v_mov_b32(voff, idx);
  b.v_mov_b32(one, Imm(1));
  // Release: every partial store of this wave reaches the agent before the arrival counts.
  b.buffer_wbl2_sc1();
  b.s_waitcnt_vmcnt0();
  b.s_mov_b64(saved, exec);
  b.s_mov_exec(Imm(1));  // lane 0 arrives for the wave
  b.global_atomic_add_u32_rtn(old, voff, one, counters);
  b.s_waitcnt_vmcnt0();
  b.buffer_inv_sc1();  // acquire: the other splits' partials, released before their arrivals
  b.s_mov_exec(saved);
  SReg arrived = ra.sgpr(1, "m_arrived");
  b.v_readfirstlane_b32(arrived, old);
  b.s_add_u32(arrived, arrived, Imm(1));
  b.s_cmp_lg_u32(arrived, entry[E::num_splits]);
  b.s_cbranch_scc1(skip);  // not the last split of this block
  {
    PartialMergeBlock a;
    a.partial_o = k_.ptr(mla_decode_args::partial_o), a.partial_lse = k_.ptr(mla_decode_args::partial_lse);
    a.o = k_.ptr(mla_decode_args::o), a.lse = k_.ptr(mla_decode_args::lse);
    a.qo_row = entry[E::qo_row], a.first = entry[E::first_partial], a.splits = entry[E::num_splits];
    a.stride = entry[E::partial_stride];
    a.srow = srow;
    a.lane = k_.lane;
    a.scratch = o.sub(0, kMergeBlockVgprs);
    a.bf16 = g.partial_o_bytes == 2;
    emit_partial_merge_block(b, k_.s, a);
    // The counter back to 0 for the next launch (nothing reads it in this one).
    b.s_mov_exec(Imm(1));
    b.v_mov_b32(one, Imm(0));
    b.global_store_dword(voff, one, counters);
    b.s_mov_exec(saved);
  }
  b.bind(skip);
  for (SReg r : {hdr, addr, entry, counters, idx, saved, arrived}) ra.release(r);
}

// O^T blocks times inv = kv_scale / l (0 for a row with no visible token in this unit).
void Consumer::normalise_o(VReg l, VReg blocks) {
  b.v_rcp_f32(alpha[0], l);
  b.v_mul_f32(alpha[0], k_.kv_scale, alpha[0]);
  b.v_cmp_gt_f32(vcc, l, Imm(0));
  b.v_cndmask_b32(alpha[0], Imm(0), alpha[0], vcc);
  for (int r = 0; r < blocks.count; r += 2) b.v_pk_mul_f32_bcast_lo(blocks.sub(r, 2), blocks.sub(r, 2), alpha);
}

// The lane row's lse in natural log: (m + log2 l) ln 2.
void Consumer::row_lse(VReg lse) {
  b.v_log_f32(lse, lrun);
  b.v_add_f32(lse, mrun, lse);
  b.v_mul_f32(lse, f32(kLn2), lse);
}

// O as bf16 (round to nearest even) at off + 2 x column of rsrc: off is this lane's row base.
// With transposing V reads, `blocks` (all of O^T unless split PV stores a half) are consecutive
// 16-column blocks from off's column on.
void Consumer::store_o_bf16(SReg rsrc, VReg off, VReg stage, VReg blocks) {
  const VReg t0 = tt;
  const int Vc = g.v_read_columns;
  if (!blocks.count) blocks = o;
  if (g.v_lds_transpose) {
    // Block n register r holds column 16n + 4g + r: 4 consecutive bf16 per block.
    b.v_lshlrev_b32(t0, Imm(1), g4);
    b.v_add_u32(off, off, t0);
    for (int n = 0; n < blocks.count / 4; ++n) {
      pack_bf16(stage[0], blocks[4 * n + 0], blocks[4 * n + 1], t0, stage[2]);
      pack_bf16(stage[1], blocks[4 * n + 2], blocks[4 * n + 3], t0, stage[2]);
      b.buffer_store_dwordx2(stage.sub(0, 2), off, rsrc, Imm(0), uint32_t(32 * n));
    }
  } else {
    b.v_mul_u32_u24(t0, Imm(2 * Vc), g4);  // 4 Vc g columns * 2 bytes
    b.v_add_u32(off, off, t0);
  }
  for (int nb = 0; nb < (g.v_lds_transpose ? 0 : kMlaVDim / (16 * Vc)); ++nb)
    for (int r = 0; r < 4; ++r) {
      // Columns 16 Vc nb + Vc (4g + r) + c, c = 0..Vc-1, live in O block Vc nb + c, register r.
      VReg bf = ra.vgpr(Vc / 2, "e_bf16_columns");
      for (int c = 0; c < Vc; c += 2)
        pack_bf16(bf[c / 2], o[4 * (Vc * nb + c) + r], o[4 * (Vc * nb + c + 1) + r], t0, stage[2]);
      if (Vc == 4) b.buffer_store_dwordx2(bf, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r) * 2));
      else b.buffer_store_dwordx4(bf, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r) * 2));
      ra.release(bf);
    }
}

// base = ptr + partial * slot_bytes (64-bit).
void Consumer::partial_base(SReg base, SReg ptr64, int slot_bytes) {
  SReg t = ra.sgpr(2, "e_offset64");
  b.s_mul_i32(t[0], k_.partial(), Imm(slot_bytes));
  b.s_mul_hi_u32(t[1], k_.partial(), Imm(slot_bytes));
  b.s_add_u32(base[0], ptr64[0], t[0]);
  b.s_addc_u32(base[1], ptr64[1], t[1]);
  ra.release(t);
}

// One lane per row (group 0) stores the row's lse.
void Consumer::write_lse(VReg lse, SReg rsrc, SReg saved, VReg off) {
  b.v_lshlrev_b32(off, Imm(2), row);
  b.v_cmp_eq_u32(vcc, Imm(0), g4);
  b.s_and_saveexec_b64(saved, vcc);
  b.buffer_store_dword(lse, off, rsrc, Imm(0));
  b.s_mov_exec(saved);
}


}  // namespace mla::gen::decode
