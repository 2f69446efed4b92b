// The wide prefix kernel (MlaGeometry::consumer_dma, blocks_per_wave = 3; docs/shared-prefix.md
// "192 rows per workgroup"): one workgroup holds all 192 rows of a K3 c16 prefix group, so the
// group's prefix is read from memory once, not once per 96 rows.
//
// Shape. O^T of 192 rows in f32 is 384 KiB, 75% of a CU's registers: 4 waves, one per SIMD, each
// with 3 row blocks (48 rows): O^T of blocks 0 and 1 in the 256 AGPRs (MFMA C/D), block 2 in 128
// VGPRs. A fifth wave cannot launch (every wave of a dispatch gets the same allocation), so there
// is no producer: every wave issues its share of the KV stream with LDS DMA (nothing staged in
// registers) and computes.
//
// LDS (gfx950, 160 KiB): a ring of 5 sub-slots of 16 token rows (592-byte rows: the pad keeps the
// K reads conflict-free; 10 DMA loads of 64 x 16 bytes, the last 768 bytes a guard that no wave
// reads) = 51,200 bytes, then Q of the 192 rows, 576 bytes each = 110,592 bytes (loaded by LDS
// DMA, every load in flight: copy_q). A tile (32 tokens) is two sub-slots, tile i in sub-slots 2i
// and 2i + 1 (ring position s mod 5), so while a tile is computed three sub-slots are in flight. Q rows carry no pad: the 16-byte chunk c of
// row r sits at chunk c ^ ((r >> 1) & 3) (a swizzle within each group of 4 chunks), which makes
// the 16-byte Q reads of 8 consecutive rows cover all 32 banks.
//
// The DMA of a tile: 20 loads (10 per sub-slot); wave w issues 5 of them, always with the same 3
// lane-offset registers: load w and 4 + w of the first sub-slot, load w and 4 + w of the second,
// and load 8 + (w & 1) of the first sub-slot (waves 0, 1) or of the second (waves 2, 3).
//
// Ring protocol, one barrier per tile. After tile i's compute, the barrier (a) hands tile i's two
// positions back (every wave has read them) and (b) publishes tile i + 1's sub-slots 2i + 2 and
// 2i + 3. Then every wave refills tile i's positions with sub-slots 2i + 5 (first, region A) and
// 2i + 6 (second, region B; the swapped load of waves 2 and 3 is tagged A). Sub-slot 2i + 3 was
// the first sub-slot of iteration i - 1, so (b) needs this wave's latest region-A loads done: the
// waitcnt pass waits for them (vmcnt counts in order, so every older load is done too) and
// leaves the loads of 2i + 4 and later in flight. The prologue issues sub-slots 0, 1 (region C,
// published by the barrier before tile 0), 2, 3 (region A) and 4 (region B). LDS reads in the
// loop touch only published sub-slots and Q, so they are tagged with no DMA region
// (Builder::set_lds_access_regions): they do not wait for the DMA in flight. The emulator's
// lds_dma rule checks this (a read of bytes whose DMA is outstanding fails the run).
//
// Rows. Wave w owns rows 48w .. 48w + 47 of the unit's row group; nb = its row blocks with rows
// (0..3). Each nb has its own loop (nb = 3 is `consumer_loop`, the one the hot-loop analysis
// reads), so a unit with fewer rows (a member's unique part: 12 rows, one block) computes only
// them; a wave without rows only streams and passes the barriers.
//
// Per tile and row block, the arithmetic is the prefix kernel's plain path (mla_decode_consumer.cpp):
// S^T = K Q^T on MFMA (K=128 f8f6f4 over the latent 512, K=32 over the rope 64), online softmax
// with the lazy rescale, fp8 P, O^T += V^T P^T with V^T from transposing LDS reads; each V^T read
// and each K read feeds the wave's 3 row blocks.
#include "kernels/mla_decode_consumer.h"

namespace mla::gen::decode {

namespace {

constexpr uint32_t kOutOfRange = 0x80000000u;  // a raw-buffer offset past any sub-slot's num_records
constexpr int kLoadsPerSubSlot = 10;
constexpr uint8_t kRegionA = 1, kRegionB = 2, kRegionFirst = 4;
constexpr int kBlocks = 3;       // row blocks per wave
constexpr int kWaveRows = 48;

class Wide {
 public:
  explicit Wide(Kernel& k)
      : k_(k), b(k.b), ra(k.b.regs()), g(k.g), E(k.g.lds_row_bytes), R(k.g.kv_row_bytes), page(k.s.page_size),
        q_region(k.g.ring * k.g.slot_bytes) {
    if (g.blocks_per_wave != kBlocks || g.consumers != 4 || g.tile_tokens != 32 || g.slot_tokens != 16 ||
        g.ring != 5 || g.kv_bytes != 1 || g.q_bytes != 1 || g.p_bytes != 1 || !g.v_lds_transpose || g.qk_blocks.size() != 6 ||
        g.qk_k != 128 || g.slot_bytes != 16 * 64 * kLoadsPerSubSlot || page < 16)
      throw std::logic_error("mla_prefix_wide: the geometry is not the wide prefix kernel's");
  }

  void emit() {
    constants();
    rows();
    copy_q();
    addresses();
    dma_setup();
    state();
    prologue();
    Label l2 = b.new_label("wide_rows2"), l1 = b.new_label("wide_rows1"), l0 = b.new_label("wide_rows0");
    b.s_cmp_lt_u32(nb, Imm(3));
    b.s_cbranch_scc1(l2);
    loop_and_epilogue(3);
    b.bind(l2);
    b.s_cmp_lt_u32(nb, Imm(2));
    b.s_cbranch_scc1(l1);
    loop_and_epilogue(2);
    b.bind(l1);
    b.s_cmp_lt_u32(nb, Imm(1));
    b.s_cbranch_scc1(l0);
    loop_and_epilogue(1);
    b.bind(l0);
    loop_and_epilogue(0);
  }

 private:
  // ---- Set-up ----
  void constants() {
    for (uint32_t v : k_.wanted) {
      SReg r = ra.sgpr(1, fmt::format("c_const_{:x}", v));
      b.s_mov_b32(r, Imm(v));
      k_.consts[v] = r;
    }
  }

  // srow = row_group * 192 + 48 w; nb = this wave's row blocks with rows (0..3).
  void rows() {
    srow = ra.sgpr(1, "w_row_base"), nb = ra.sgpr(1, "w_blocks");
    SReg t = ra.sgpr(1, "w_tmp");
    const SReg rows_r = k_.unit[abi::prefix_unit::rows];
    b.s_mul_i32(srow, k_.row_group(), Imm(g.rows_per_group));
    b.s_mul_i32(t, k_.wave, Imm(kWaveRows));
    b.s_add_u32(srow, srow, t);
    b.s_sub_u32(t, rows_r, srow);
    b.s_cmp_le_u32(rows_r, srow);
    b.s_cselect_b32(t, Imm(0), t);
    b.s_add_u32(t, t, Imm(15));
    b.s_lshr_b32(t, t, Imm(4));
    b.s_min_u32(nb, t, Imm(kBlocks));
    ra.release(t);
    j = ra.vgpr(1, "w_lane_row"), gg = ra.vgpr(1, "w_lane_group");
    b.v_and_b32(j, Imm(15), k_.lane);
    b.v_lshrrev_b32(gg, Imm(4), k_.lane);
  }

  // The wave's 48 Q rows from memory into LDS by LDS DMA, all 27 loads in flight at once (with
  // the ring's first sub-slots behind them; the barrier that publishes tile 0 waits for them:
  // region kRegionFirst). A load's LDS bytes are fixed by the hardware (M0 + 16 x lane), so the
  // swizzle moves to the memory side: LDS piece p (row p / 36, chunk p % 36) holds the row's
  // chunk (p % 36) ^ ((row >> 1) & 3), i.e. memory piece p ^ ((row >> 1) & 3) (36 is a multiple
  // of 4, so the xor stays in the row). Rows past the unit's R are outside the buffer and read
  // as zeros (an out-of-range LDS-DMA lane writes zeros: docs/emulator-provenance.md).
  void copy_q() {
    SReg rsrc = ra.sgpr(4, "w_q_rsrc", 4), base = ra.sgpr(2, "w_q_base", 2), t = ra.sgpr(2, "w_q_tmp", 2);
    b.s_mul_i32(t[0], k_.qo_row(), Imm(k_.s.heads * kMlaDim));
    b.s_mul_hi_u32(t[1], k_.qo_row(), Imm(k_.s.heads * kMlaDim));
    b.s_add_u32(base[0], k_.ptr(mla_decode_args::q)[0], t[0]);
    b.s_addc_u32(base[1], k_.ptr(mla_decode_args::q)[1], t[1]);
    b.s_mul_i32(t[0], k_.unit[abi::prefix_unit::rows], Imm(kMlaDim));
    b.make_buffer_resource(rsrc, base, t[0]);
    SReg gbase = t[0], lbase = t[1], m0v = base[0];
    b.s_mul_i32(gbase, srow, Imm(kMlaDim));
    b.s_mul_i32(lbase, k_.wave, Imm(kWaveRows * kMlaDim));
    b.s_add_u32(lbase, lbase, Imm(q_region));
    constexpr int kPieces = kWaveRows * kMlaDim / 16;
    const int rounds = kPieces / 64;
    static_assert(kPieces % 64 == 0, "the wave's Q pieces fill whole rounds");
    const auto [mul, shift] = exact_divider(kMlaDim / 16, kPieces);
    VReg p = ra.vgpr(1, "w_q_piece"), row = ra.vgpr(1, "w_q_row"), goff = ra.vgpr(2, "w_q_off");
    for (int r = 0; r < rounds; ++r) {
      const VReg off = goff.sub(r % 2, 1);  // two, so a load's offset is not rewritten right behind it
      b.v_add_u32(p, Imm(64 * r), k_.lane);
      b.v_mul_u32_u24(row, Imm(int64_t(mul)), p);
      b.v_lshrrev_b32(row, Imm(shift), row);
      b.v_bfe_u32(row, row, Imm(1), Imm(2));
      b.v_xor_b32(row, p, row);
      b.v_lshl_add_u32(off, row, Imm(4), gbase);
      b.s_add_u32(m0v, lbase, Imm(1024 * r));
      b.s_mov_m0(m0v);
      b.buffer_load_dwordx4_lds(off, rsrc, Imm(0), 0, kRegionFirst);
    }
    for (VReg v : {p, row, goff}) ra.release(v);
    for (SReg s : {rsrc, base, t}) ra.release(s);
  }

  // kbase[st]: the lane's K row in a sub-slot (token 4 h(j/4, st) + j % 4, h(x, st) = (x + st) % 4:
  // the token order of the transposing V reads) and its 16 g bytes; qbase: the lane's Q row j of
  // row block 0 with its swizzled chunk g; vrel: the transposing V read's row within a sub-slot
  // (mla_decode_consumer_io.cpp, transpose_read_base, without the 16 st rows: sub-tile st is the
  // tile's sub-slot st, at its own ring position).
  void addresses() {
    VReg t = ra.vgpr(1, "w_tmp_v"), u = ra.vgpr(1, "w_tmp_v2");
    for (int st = 0; st < 2; ++st) {
      kbase[st] = ra.vgpr(1, fmt::format("w_k_base_s{}", st));
      kaddr[st] = ra.vgpr(1, fmt::format("w_k_addr_s{}", st));
      b.v_lshrrev_b32(t, Imm(2), j);
      if (st) b.v_add_u32(t, Imm(st), t);
      b.v_and_b32(t, Imm(3), t);
      b.v_lshlrev_b32(t, Imm(2), t);
      b.v_and_b32(u, Imm(3), j);
      b.v_add_u32(t, t, u);
      b.v_mul_u32_u24(kbase[st], Imm(E), t);
      b.v_lshl_add_u32(kbase[st], gg, Imm(4), kbase[st]);
    }
    qbase = ra.vgpr(1, "w_q_addr");
    SReg s = ra.sgpr(1, "w_tmp_s");
    b.s_mul_i32(s, k_.wave, Imm(kWaveRows * kMlaDim));
    b.s_add_u32(s, s, Imm(q_region));
    b.v_bfe_u32(t, j, Imm(1), Imm(2));
    b.v_xor_b32(t, gg, t);
    b.v_lshlrev_b32(t, Imm(4), t);
    b.v_mul_u32_u24(qbase, Imm(kMlaDim), j);
    b.v_add_u32(qbase, qbase, t);
    b.v_add_u32(qbase, s, qbase);
    ra.release(s);
    // vrel = (4 ((l/16 + st) % 4) + r) E + 8 (l & 1), st = bit 3 of l, r = bits 1..2.
    vrel = ra.vgpr(1, "w_v_rel"), vaddr = ra.vgpr(1, "w_v_addr");
    b.v_bfe_u32(u, k_.lane, Imm(3), Imm(1));
    b.v_add_u32(t, gg, u);
    b.v_and_b32(t, Imm(3), t);
    b.v_lshlrev_b32(t, Imm(2), t);
    b.v_bfe_u32(u, k_.lane, Imm(1), Imm(2));
    b.v_add_u32(t, t, u);
    b.v_mul_u32_u24(vrel, Imm(E), t);
    b.v_and_b32(t, Imm(1), k_.lane);
    b.v_lshl_add_u32(vrel, t, Imm(3), vrel);
    ra.release(t);
    ra.release(u);
    st_lanes = ra.sgpr(2, "w_sub_tile1_lanes", 2);  // lanes whose transposing-read row is in sub-slot 1
    b.s_mov_b32(st_lanes[0], Imm(int64_t(0xff00ff00u)));
    b.s_mov_b32(st_lanes[1], Imm(int64_t(0xff00ff00u)));
  }

  // The lane offsets of this wave's 3 distinct DMA loads of a sub-slot (load index L: chunk c =
  // 64 L + lane is token c / 37, chunk c % 37 of the LDS image; the pad chunk and chunks past the
  // image read nothing) and their M0 offsets 1024 L.
  void dma_setup() {
    const int C = E / 16, chunks = 16 * C;
    const auto [mul, shift] = exact_divider(C, 64 * kLoadsPerSubSlot);
    VReg c = ra.vgpr(1, "w_dma_chunk"), t = ra.vgpr(1, "w_dma_token"), q = ra.vgpr(1, "w_dma_part"), oob = ra.vgpr(1, "w_dma_oob");
    SReg L = ra.sgpr(1, "w_dma_load");
    b.v_mov_b32(oob, Imm(int64_t(kOutOfRange)));
    for (int k = 0; k < 3; ++k) {
      offs[k] = ra.vgpr(1, fmt::format("w_dma_offset{}", k));
      m0off[k] = ra.sgpr(1, fmt::format("w_dma_m0_{}", k));
      if (k == 2) {
        b.s_and_b32(L, k_.wave, Imm(1));
        b.s_add_u32(L, L, Imm(8));
      } else {
        b.s_add_u32(L, k_.wave, Imm(4 * k));
      }
      b.s_lshl_b32(m0off[k], L, Imm(10));
      b.s_lshl_b32(L, L, Imm(6));
      b.v_add_u32(c, L, k_.lane);
      b.v_mul_u32_u24(t, Imm(int64_t(mul)), c);
      b.v_lshrrev_b32(t, Imm(shift), t);
      b.v_mul_u32_u24(q, Imm(C), t);
      b.v_sub_u32(q, c, q);
      b.v_mul_u32_u24(offs[k], Imm(R), t);
      b.v_lshl_add_u32(offs[k], q, Imm(4), offs[k]);
      b.v_cmp_eq_u32(vcc, Imm(R / 16), q);  // the pad chunk
      b.v_cndmask_b32(offs[k], offs[k], oob, vcc);
      b.v_cmp_gt_u32(vcc, Imm(chunks), c);  // past the image: the guard
      b.v_cndmask_b32(offs[k], oob, offs[k], vcc);
    }
    for (VReg v : {c, t, q, oob}) ra.release(v);
    ra.release(L);
    low_half = ra.sgpr(1, "w_low_half");  // waves 0, 1: the swapped load is the first sub-slot's
    b.s_cmp_lt_u32(k_.wave, Imm(2));
    b.s_cselect_b32(low_half, Imm(1), Imm(0));
    rs_a = ra.sgpr(4, "w_rsrc_first", 4), rs_b = ra.sgpr(4, "w_rsrc_second", 4), rs_2 = ra.sgpr(4, "w_rsrc_swapped", 4);
    id_a = ra.sgpr(1, "w_page_first"), id_b = ra.sgpr(1, "w_page_second"), id_prev = ra.sgpr(1, "w_page_last");
    ld_a = ra.sgpr(1, "w_page_load_first"), ld_b = ra.sgpr(1, "w_page_load_second");
    fa = ra.sgpr(1, "w_page_new_first"), fb = ra.sgpr(1, "w_page_new_second");
    start = ra.sgpr(1, "w_sub_slot_start"), sa = ra.sgpr(1, "w_tmp_a"), sb = ra.sgpr(1, "w_tmp_b");
    addr = ra.sgpr(2, "w_page_addr", 2), base = ra.sgpr(2, "w_kv_base", 2);
    p0 = ra.sgpr(1, "w_pos0"), p1 = ra.sgpr(1, "w_pos1"), tb = ra.sgpr(1, "w_tile_base");
    s2 = ra.sgpr(1, "w_second_start"), pos2 = ra.sgpr(1, "w_pos_swapped");
  }

  // Loop state: O^T (blocks 0, 1 in AGPRs, 2 in VGPRs), scores, P, softmax state, operands.
  void state() {
    oa = ra.agpr(2 * 128, "w_o_blocks01", 4);
    o2 = ra.vgpr(128, "w_o_block2", 4);
    for (int r = 0; r < 2 * 128; ++r) b.v_accvgpr_write_b32(oa[r], Imm(0));
    for (int r = 0; r < 128; ++r) b.v_mov_b32(o2[r], Imm(0));
    for (int rb = 0; rb < kBlocks; ++rb) {
      sacc[rb] = ra.vgpr(8, fmt::format("w_scores{}", rb), 4);
      pop[rb] = ra.vgpr(2, fmt::format("w_p{}", rb), 2);
      mrun[rb] = ra.vgpr(1, fmt::format("w_max{}", rb));
      lrun[rb] = ra.vgpr(1, fmt::format("w_sum{}", rb));
      tmax2[rb] = ra.vgpr(2, fmt::format("w_tile_max{}", rb), 2);
      tt[rb] = ra.vgpr(1, fmt::format("w_tmp{}", rb));
      b.v_mov_b32(mrun[rb], Imm(int64_t(kNegFltMax)));
      b.v_mov_b32(lrun[rb], Imm(0));
      b.v_mov_b32(tmax2[rb][1], Imm(0));
    }
    ops = ra.vgpr(40, "w_operands", 4);
    alpha = ra.vgpr(2, "w_alpha", 2);
    b.v_mov_b32(alpha[1], Imm(0));
    xscale2 = ra.vgpr(2, "w_x_scale", 2);
    b.v_mov_b32(xscale2[1], Imm(0));
    // sm_scale * q_scale * kv_scale, multiplied in that order (abi kDecodeArgs).
    b.v_mov_b32(xscale2[0], k_.q_scale);
    b.v_mul_f32(xscale2[0], k_.argf(mla_decode_args::sm_scale), xscale2[0]);
    b.v_mul_f32(xscale2[0], k_.kv_scale, xscale2[0]);
    b.v_mul_f32(xscale2[0], f32(kLog2e), xscale2[0]);
    neg_inf = ra.vgpr(1, "w_neg_inf"), mslack = ra.vgpr(1, "w_max_slack"), tsum = ra.vgpr(1, "w_tile_sum");
    moved = ra.vgpr(1, "w_max_moved");
    b.v_mov_b32(neg_inf, Imm(int64_t(kNegInf)));
    perm16 = ra.vgpr(1, "w_perm16"), perm32 = ra.vgpr(1, "w_perm32");
    b.v_xor_b32(perm16, Imm(16), k_.lane);
    b.v_lshlrev_b32(perm16, Imm(2), perm16);
    b.v_xor_b32(perm32, Imm(32), k_.lane);
    b.v_lshlrev_b32(perm32, Imm(2), perm32);
  }

  // ---- The KV stream ----
  // id = kv_indices[page_base + min(start, kv_end - 1) / page] (a scalar load).
  void fetch_page_id(SReg id, SReg s) {
    b.s_sub_u32(sa, k_.kv_end(), Imm(1));
    b.s_min_u32(sa, s, sa);
    b.s_lshr_b32(sa, sa, Imm(log2i(page)));
    b.s_add_u32(sa, sa, k_.page_base());
    b.s_lshl_b32(sa, sa, Imm(2));
    b.s_add_u32(addr[0], k_.ptr(mla_decode_args::kv_indices)[0], sa);
    b.s_addc_u32(addr[1], k_.ptr(mla_decode_args::kv_indices)[1], Imm(0));
    b.s_load_dword(id, addr, 0);
  }

  // Page ids are read once per page and wave: a sub-slot that starts a page (before the unit's
  // end) loads its page's id into `ld` (flag = 1); the others (flag = 0) are in the page of the
  // sub-slot before them (pages of 16 tokens or more hold whole sub-slots).
  void fetch_if_new(SReg ld, SReg flag, SReg s) {
    b.s_and_b32(sa, s, Imm(page - 1));
    b.s_cmp_eq_u32(sa, Imm(0));
    b.s_cselect_b32(flag, Imm(1), Imm(0));
    b.s_cmp_ge_u32(s, k_.kv_end());
    b.s_cselect_b32(flag, Imm(0), flag);
    b.s_cmp_eq_u32(flag, Imm(0));
    k_.unless_scc1([&] { fetch_page_id(ld, s); });
  }

  // The page ids of the pair about to be prepared: the first sub-slot's is loaded or the previous
  // sub-slot's, the second's loaded or the first's.
  void resolve_ids() {
    b.s_cmp_lg_u32(fa, Imm(0));
    b.s_cselect_b32(id_a, ld_a, id_prev);
    b.s_cmp_lg_u32(fb, Imm(0));
    b.s_cselect_b32(id_b, ld_b, id_a);
    b.s_mov_b32(id_prev, id_b);
  }

  // The page ids of the pair at `start` (the loop's next iteration).
  void fetch_pair_ids() {
    fetch_if_new(ld_a, fa, start);
    b.s_add_u32(s2, start, Imm(16));
    fetch_if_new(ld_b, fb, s2);
  }

  // A raw buffer over the sub-slot's rows: from row id * page + s % page, clamp(kv_end - s, 0, 16) rows.
  void sub_slot_resource(SReg rsrc, SReg s, SReg id) {
    b.s_lshl_b32(sa, id, Imm(log2i(page)));
    b.s_and_b32(sb, s, Imm(page - 1));
    b.s_add_u32(sa, sa, sb);
    b.s_mul_i32(base[0], sa, Imm(R));
    b.s_mul_hi_u32(base[1], sa, Imm(R));
    b.s_add_u32(base[0], base[0], k_.ptr(mla_decode_args::kv)[0]);
    b.s_addc_u32(base[1], base[1], k_.ptr(mla_decode_args::kv)[1]);
    b.s_sub_u32(sa, k_.kv_end(), s);
    b.s_cmp_ge_u32(s, k_.kv_end());
    b.s_cselect_b32(sa, Imm(0), sa);
    b.s_min_u32(sa, sa, Imm(16));
    b.s_mul_i32(sa, sa, Imm(R));
    b.make_buffer_resource(rsrc, base, sa);
  }

  void dma(int k, SReg pos, SReg rsrc, uint8_t region) {
    b.s_add_u32(sa, pos, m0off[k]);
    b.s_mov_m0(sa);
    b.buffer_load_dwordx4_lds(offs[k], rsrc, Imm(0), 0, region);
  }

  // The buffer resources of sub-slots `start` (first) and start + 16 (second, its page id in
  // id_b) and of this wave's swapped load, whose ring position goes to pos2: scalar work that
  // needs no barrier (the steady loop does it beside the PV MFMAs).
  void prepare_pair(SReg pa, SReg pb) {
    sub_slot_resource(rs_a, start, id_a);
    b.s_add_u32(sb, start, Imm(16));
    b.s_mov_b32(s2, sb);
    sub_slot_resource(rs_b, s2, id_b);
    b.s_cmp_lg_u32(low_half, Imm(0));
    for (int r = 0; r < 4; ++r) b.s_cselect_b32(rs_2[r], rs_a[r], rs_b[r]);
    b.s_cselect_b32(pos2, pa, pb);
  }

  // This wave's 5 loads of the prepared pair: loads w and 4 + w of each sub-slot (at ring
  // positions pa, pb), and the swapped load 8 + (w & 1) (tagged with the first's region).
  void issue_pair(SReg pa, SReg pb, uint8_t first_region, uint8_t second_region) {
    dma(0, pa, rs_a, first_region);
    dma(1, pa, rs_a, first_region);
    dma(2, pos2, rs_2, first_region);
    dma(0, pb, rs_b, second_region);
    dma(1, pb, rs_b, second_region);
  }

  // Sub-slots 0..4; the page ids of iteration 0's (5, 6); the barrier that publishes tile 0.
  void prologue() {
    b.s_mov_b32(start, k_.kv_start());
    fetch_page_id(id_prev, start);  // the unit's first page
    b.s_mov_b32(fa, Imm(0));
    b.s_add_u32(s2, start, Imm(16));
    fetch_if_new(ld_b, fb, s2);
    resolve_ids();
    b.s_mov_b32(p0, Imm(0));
    b.s_mov_b32(p1, Imm(g.slot_bytes));
    prepare_pair(p0, p1);
    issue_pair(p0, p1, kRegionFirst, kRegionFirst);
    b.s_add_u32(start, start, Imm(32));
    fetch_pair_ids();
    resolve_ids();
    b.s_mov_b32(p0, Imm(2 * g.slot_bytes));
    b.s_mov_b32(p1, Imm(3 * g.slot_bytes));
    prepare_pair(p0, p1);
    issue_pair(p0, p1, kRegionA, kRegionA);
    // Sub-slot 4 alone: loads w and 4 + w of every wave, 8 + w of waves 0 and 1.
    b.s_add_u32(start, start, Imm(32));
    fetch_if_new(ld_a, fa, start);
    b.s_cmp_lg_u32(fa, Imm(0));
    b.s_cselect_b32(id_a, ld_a, id_prev);
    b.s_mov_b32(id_prev, id_a);
    sub_slot_resource(rs_a, start, id_a);
    b.s_mov_b32(p0, Imm(4 * g.slot_bytes));
    dma(0, p0, rs_a, kRegionB);
    dma(1, p0, rs_a, kRegionB);
    {
      Label skip = b.new_label("wide_prologue_high");
      b.s_cmp_eq_u32(low_half, Imm(0));
      b.s_cbranch_scc1(skip);
      dma(2, p0, rs_a, kRegionB);
      b.bind(skip);
    }
    b.s_add_u32(start, start, Imm(16));
    fetch_pair_ids();
    b.s_mov_b32(p0, Imm(0));
    b.s_mov_b32(p1, Imm(g.slot_bytes));
    b.s_mov_b32(tb, k_.kv_start());
    b.s_barrier_publishing(kRegionFirst);  // Q is in LDS, sub-slots 0 and 1 (tile 0) too
  }

  // p = (p + 2 sub-slots) mod the ring.
  void advance(SReg p) {
    b.s_add_u32(p, p, Imm(2 * g.slot_bytes));
    b.s_sub_u32(sa, p, Imm(g.ring * g.slot_bytes));
    b.s_cmp_ge_u32(p, Imm(g.ring * g.slot_bytes));
    b.s_cselect_b32(p, sa, p);
  }

  // ---- The tile ----
  VReg kop(int st) const { return ops.sub(24 + 8 * st, 8); }
  VReg qop(int rb) const { return ops.sub(8 * rb, 8); }
  AccReg oblk(int rb, int n) const {
    if (rb < 2) return AccReg(oa.sub(128 * rb + 4 * n, 4));
    return AccReg(o2.sub(4 * n, 4));
  }
  AccSrc oblk_src(int rb, int n) const {
    if (rb < 2) return AccSrc(oa.sub(128 * rb + 4 * n, 4));
    return AccSrc(o2.sub(4 * n, 4));
  }

  // S^T = K Q^T: per read group (the 4 K=128 blocks, then the paired K=32 blocks over the rope),
  // the Q operands of the nb row blocks, the K operands of both sub-tiles, then the MFMAs.
  void qk(int n) {
    for (int grp = 0; grp < 5; ++grp) {
      const bool pair = grp == 4;
      const uint32_t k0 = uint32_t(pair ? 512 : 128 * grp);
      const int reads = pair ? 1 : 2;
      for (int rb = 0; rb < n; ++rb)
        for (int c = 0; c < reads; ++c) b.ds_read_b128(qop(rb).sub(4 * c, 4), qbase, uint32_t(rb * 16 * kMlaDim) + k0 + 64 * c);
      for (int st = 0; st < 2; ++st)
        for (int c = 0; c < reads; ++c) b.ds_read_b128(kop(st).sub(4 * c, 4), kaddr[st], k0 + 64 * c);
      for (int st = 0; st < 2; ++st)
        for (int rb = 0; rb < n; ++rb) {
          VReg d = sacc[rb].sub(4 * st, 4);
          if (!pair) {
            b.mfma(g.qk_mfma, d, kop(st), qop(rb), grp == 0 ? AccSrc::zero() : AccSrc(d));
          } else {
            b.mfma(g.qk_blocks[4].mfma, d, kop(st).sub(0, 2), qop(rb).sub(0, 2), AccSrc(d));
            b.mfma(g.qk_blocks[5].mfma, d, kop(st).sub(2, 2), qop(rb).sub(2, 2), AccSrc(d));
          }
        }
    }
  }

  // The unit's last tile may end inside: scores of tokens at or past kv_end become -inf (token
  // 16 st + 4 ((g + st) % 4) + r of the lane, the order of the P^T operand).
  void mask(int n) {
    SReg tend = sa;
    b.s_add_u32(tend, tb, Imm(g.tile_tokens));
    b.s_cmp_le_u32(tend, k_.kv_end());
    k_.unless_scc1([&] {
      const VReg rem = ops.sub(24, 1), tok = ops.sub(25, 1), base_tok = ops.sub(26, 1);
      b.s_sub_u32(sb, k_.kv_end(), tb);
      b.v_mov_b32(rem, sb);
      for (int st = 0; st < 2; ++st) {
        if (st) b.v_add_u32(base_tok, Imm(st), gg);
        else b.v_mov_b32(base_tok, gg);
        b.v_and_b32(base_tok, Imm(3), base_tok);
        b.v_lshlrev_b32(base_tok, Imm(2), base_tok);
        for (int r = 0; r < 4; ++r) {
          b.v_add_u32(tok, Imm(16 * st + r), base_tok);
          b.v_cmp_gt_i32(vcc, rem, tok);
          for (int rb = 0; rb < n; ++rb) b.v_cndmask_b32(sacc[rb][4 * st + r], neg_inf, sacc[rb][4 * st + r], vcc);
        }
      }
    });
  }

  // O^T of row block rb times alpha (the lazy rescale; rare).
  void rescale_o(int rb) {
    if (rb == 2) {
      for (int r = 0; r < 128; r += 2) b.v_pk_mul_f32_bcast_lo(o2.sub(r, 2), o2.sub(r, 2), alpha);
      return;
    }
    const VReg t = ops.sub(24, 16);
    for (int r0 = 0; r0 < 128; r0 += 16) {
      for (int r = 0; r < 16; ++r) b.v_accvgpr_read_b32(t[r], oa[128 * rb + r0 + r]);
      for (int r = 0; r < 16; r += 2) b.v_pk_mul_f32_bcast_lo(t.sub(r, 2), t.sub(r, 2), alpha);
      for (int r = 0; r < 16; ++r) b.v_accvgpr_write_b32(oa[128 * rb + r0 + r], t[r]);
    }
  }

  // Online softmax of the nb row blocks, first half: the tile max over the lane's 8 tokens and
  // the row's 4 lane groups, the row's new reference max m' (the lazy rescale: m moves only when
  // the tile max passes m + kRescaleSlack), and VCC set in a lane if some row block's row moved. The steady path (no row moved) then runs P and PV with no branch between them, one
  // scheduling region: each block's P arithmetic beside the previous blocks' PV MFMAs.
  void tile_max(int n) {
    for (int rb = 0; rb < n; ++rb) {
      const VReg sc = sacc[rb], m = tmax2[rb].sub(0, 1);
      b.v_max3_f32(m, sc[0], sc[1], sc[2]);
      for (int e = 3; e < 8; ++e) b.v_max_f32(m, m, sc[e]);
    }
    for (VReg perm : {perm16, perm32}) {
      for (int rb = 0; rb < n; ++rb) b.ds_bpermute_b32(tt[rb], perm, tmax2[rb].sub(0, 1));
      for (int rb = 0; rb < n; ++rb) b.v_max_f32(tmax2[rb].sub(0, 1), tmax2[rb].sub(0, 1), tt[rb]);
    }
    b.v_mov_b32(moved, Imm(0));
    for (int rb = 0; rb < n; ++rb) {
      const VReg m = tmax2[rb].sub(0, 1);
      b.v_mul_f32(m, xscale2[0], m);
      b.v_add_f32(mslack, f32(kRescaleSlack), mrun[rb]);
      b.v_cmp_gt_f32(vcc, m, mslack);
      b.v_cndmask_b32(m, mrun[rb], m, vcc);
      b.v_cndmask_b32(moved, moved, xscale2[0], vcc);  // a positive marker (the score scale)
    }
    b.v_cmp_gt_f32(vcc, moved, Imm(0));
  }

  // Out of line (rare): O^T and l of every row block times alpha = exp2(m - m') (1 exactly for
  // rows that keep their max).
  void rescale(int n) {
    for (int rb = 0; rb < n; ++rb) {
      b.v_sub_f32(alpha[0], mrun[rb], tmax2[rb].sub(0, 1));
      b.v_exp_f32(alpha[0], alpha[0]);
      rescale_o(rb);
      b.v_mul_f32(lrun[rb], lrun[rb], alpha[0]);
    }
  }

  // Second half for row block rb: m = m', P = exp2(s x - m) rounded to fp8 (the PV operand),
  // l += the rounded P (converted back exactly).
  void probabilities(int rb) {
    const VReg m = tmax2[rb].sub(0, 1), sc = sacc[rb];
    b.v_mov_b32(mrun[rb], m);
    b.v_sub_f32(m, f32(0.0f), m);
    for (int e = 0; e < 8; e += 2) b.v_pk_fma_f32(sc.sub(e, 2), sc.sub(e, 2), xscale2, tmax2[rb], true, true);
    for (int e = 0; e < 8; ++e) b.v_exp_f32(sc[e], sc[e]);
    for (int st = 0; st < 2; ++st) {
      b.v_cvt_pk_fp8_f32(pop[rb][st], sc[4 * st + 0], sc[4 * st + 1], 0);
      b.v_cvt_pk_fp8_f32(pop[rb][st], sc[4 * st + 2], sc[4 * st + 3], 1);
    }
    for (int st = 0; st < 2; ++st) {
      b.v_cvt_pk_f32_fp8(sc.sub(4 * st, 2), pop[rb][st], 0);
      b.v_cvt_pk_f32_fp8(sc.sub(4 * st + 2, 2), pop[rb][st], 1);
    }
    b.v_add_f32(tt[rb], sc[0], sc[1]);
    for (int e = 2; e < 8; ++e) b.v_add_f32(tt[rb], tt[rb], sc[e]);
    b.v_add_f32(lrun[rb], lrun[rb], tt[rb]);
  }

  // O^T += V^T P^T over the 32 column blocks, in two halves of 16: the half's transposing reads
  // (32 VGPRs), then its MFMAs row block by row block, each V^T read feeding the nb blocks. Row
  // block rb's P is made just before its first MFMAs, so its arithmetic issues beside the MFMAs
  // of the blocks before it (the scheduler interleaves them).
  void pv(int n) {
    constexpr int kHalf = 16;
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < kHalf; ++c) b.ds_read_b64_tr_b8(ops.sub(2 * c, 2), vaddr, uint32_t(16 * (kHalf * h + c)));
      for (int rb = 0; rb < n; ++rb) {
        if (h == 0) probabilities(rb);
        for (int c = 0; c < kHalf; ++c) {
          const int blk = kHalf * h + c;
          b.mfma(g.pv_mfma, oblk(rb, blk), ops.sub(2 * c, 2), pop[rb], oblk_src(rb, blk));
        }
      }
    }
  }

  void tile_addresses() {
    b.v_add_u32(kaddr[0], p0, kbase[0]);
    b.v_add_u32(kaddr[1], p1, kbase[1]);
    b.v_mov_b32(vaddr, p1);
    b.v_mov_b32(tsum, p0);  // VOP2 reads one scalar besides VCC: both positions in VGPRs
    b.emit("s_mov_b64", {Operand::of(vcc)}, {Operand::of(st_lanes)});
    b.v_cndmask_b32(vaddr, tsum, vaddr, vcc);
    b.v_add_u32(vaddr, vaddr, vrel);
  }

  void loop_and_epilogue(int n) {
    Label loop = b.new_label(n == 3 ? "consumer_loop" : fmt::format("wide_loop_b{}", n));
    Label done = b.new_label(fmt::format("wide_loop_b{}_done", n));
    b.s_mov_b32(k_.iter, Imm(0));
    b.s_cmp_eq_u32(k_.ntiles, Imm(0));
    b.s_cbranch_scc1(done);
    b.bind(loop);
    b.set_lds_access_regions(0);  // published sub-slots and Q only (see the header)
    Label slow = b.new_label("softmax_rescale"), back = b.new_label("rescaled");
    if (n > 0) {
      tile_addresses();
      qk(n);
      mask(n);
      tile_max(n);
      b.s_cbranch_vccnz(slow);
      b.bind(back);
    }
    // start: the first token of sub-slot 2i + 5, p0 / p1: tile i's ring positions.
    resolve_ids();
    prepare_pair(p0, p1);
    if (n > 0) pv(n);
    b.set_lds_access_regions(0xff);
    b.s_barrier_publishing(kRegionA);  // tile i's positions are free; tile i + 1 is published
    issue_pair(p0, p1, kRegionA, kRegionB);
    advance(p0);
    advance(p1);
    b.s_add_u32(start, start, Imm(32));
    fetch_pair_ids();
    b.s_add_u32(tb, tb, Imm(g.tile_tokens));
    b.s_add_u32(k_.iter, k_.iter, Imm(1));
    b.s_cmp_lt_u32(k_.iter, k_.ntiles);
    b.s_cbranch_scc1(loop);
    b.bind(done);
    if (n > 0) epilogue(n);
    k_.end_unit();
    if (n > 0) {  // out of line: a tile where some row's max moved
      b.bind(slow);
      rescale(n);
      b.s_branch(back);
    }
  }

  // ---- Results: each row block's partial rows (bf16 o, f32 lse) ----
  void epilogue(int n) {
    for (int rb = 0; rb < n; ++rb) {
      b.ds_bpermute_b32(tt[rb], perm16, lrun[rb]);
      b.v_add_f32(lrun[rb], lrun[rb], tt[rb]);
      b.ds_bpermute_b32(tt[rb], perm32, lrun[rb]);
      b.v_add_f32(lrun[rb], lrun[rb], tt[rb]);
    }
    SReg rsrc = ra.sgpr(4, "e_rsrc", 4), lrsrc = ra.sgpr(4, "e_lse_rsrc", 4), t = ra.sgpr(2, "e_tmp", 2), ebase = ra.sgpr(2, "e_base", 2);
    SReg saved = ra.sgpr(2, "e_exec", 2);
    const int M = g.rows;
    auto slot_resource = [&](SReg rs, uint32_t ptr_arg, int slot_bytes, int row_bytes) {
      b.s_mul_i32(t[0], k_.partial(), Imm(slot_bytes));
      b.s_mul_hi_u32(t[1], k_.partial(), Imm(slot_bytes));
      b.s_add_u32(ebase[0], k_.ptr(ptr_arg)[0], t[0]);
      b.s_addc_u32(ebase[1], k_.ptr(ptr_arg)[1], t[1]);
      b.s_mul_i32(t[0], k_.unit[abi::prefix_unit::rows], Imm(row_bytes));
      b.make_buffer_resource(rs, ebase, t[0]);
    };
    slot_resource(rsrc, mla_decode_args::partial_o, M * kMlaVDim * 4, kMlaVDim * 4);
    slot_resource(lrsrc, mla_decode_args::partial_lse, M * 4, 4);
    const VReg off = ops.sub(0, 1), row = ops.sub(1, 1), lse = ops.sub(2, 1), x = ops.sub(4, 4), pk = ops.sub(8, 2);
    for (int rb = 0; rb < n; ++rb) {
      // inv = kv_scale / l (0 for a row without a visible token), lse = (m + log2 l) ln 2.
      b.v_rcp_f32(alpha[0], lrun[rb]);
      b.v_mul_f32(alpha[0], k_.kv_scale, alpha[0]);
      b.v_cmp_gt_f32(vcc, lrun[rb], Imm(0));
      b.v_cndmask_b32(alpha[0], Imm(0), alpha[0], vcc);
      b.v_log_f32(lse, lrun[rb]);
      b.v_add_f32(lse, mrun[rb], lse);
      b.v_mul_f32(lse, f32(kLn2), lse);
      b.s_add_u32(t[0], srow, Imm(16 * rb));
      b.v_add_u32(row, t[0], j);
      // Block k register r holds column 16 k + 4 g + r: 4 consecutive bf16 per block.
      b.v_mul_u32_u24(off, Imm(kMlaVDim * 4), row);
      b.v_lshl_add_u32(off, gg, Imm(3), off);
      for (int blk = 0; blk < kMlaVDim / 16; ++blk) {
        if (rb < 2) {
          for (int r = 0; r < 4; ++r) b.v_accvgpr_read_b32(x[r], oa[128 * rb + 4 * blk + r]);
        } else {
          for (int r = 0; r < 4; ++r) b.v_mov_b32(x[r], o2[4 * blk + r]);
        }
        b.v_pk_mul_f32_bcast_lo(x.sub(0, 2), x.sub(0, 2), alpha);
        b.v_pk_mul_f32_bcast_lo(x.sub(2, 2), x.sub(2, 2), alpha);
        b.v_cvt_pk_bf16_f32(pk[0], x[0], x[1]);
        b.v_cvt_pk_bf16_f32(pk[1], x[2], x[3]);
        b.buffer_store_dwordx2(pk, off, rsrc, Imm(0), uint32_t(32 * blk));
      }
      b.v_lshlrev_b32(off, Imm(2), row);
      b.v_cmp_eq_u32(vcc, Imm(0), gg);
      b.s_and_saveexec_b64(saved, vcc);
      b.buffer_store_dword(lse, off, lrsrc, Imm(0));
      b.s_mov_exec(saved);
    }
    for (SReg s : {rsrc, lrsrc, t, ebase, saved}) ra.release(s);
  }

  Kernel& k_;
  Builder& b;
  RegAllocator& ra;
  const MlaGeometry& g;
  const int E, R, page, q_region;

  SReg srow, nb, st_lanes, low_half;
  VReg j, gg, qbase, vrel, vaddr;
  VReg kbase[2], kaddr[2];
  VReg offs[3];
  SReg m0off[3];
  SReg rs_a, rs_b, rs_2, id_a, id_b, id_prev, ld_a, ld_b, fa, fb, start, sa, sb, addr, base, p0, p1, tb, s2, pos2;
  AReg oa;
  VReg o2, ops, alpha, xscale2, neg_inf, mslack, tsum, moved, perm16, perm32;
  VReg sacc[kBlocks], pop[kBlocks], mrun[kBlocks], lrun[kBlocks], tmax2[kBlocks], tt[kBlocks];
};

}  // namespace

void emit_wide_prefix(Kernel& k) { Wide(k).emit(); }

}  // namespace mla::gen::decode
