// dsa_indexer_logits_fp8_h<H>_nn<N>_pg<P>: the DSA lightning indexer's scores, DeepGEMM's
// fp8_paged_mqa_logits (docs/sparse.md "The indexer"):
//   logits[b * N + i][t] = k_scale[t] * sum_h max(0, q[b, i, h] . k[t]) * w[b * N + i, h]
// for t < min(context_lens[b], max_context_len); nothing is written past that.
//
// One wave per workgroup; workgroup (c, b) scores tokens [c * chunk, (c + 1) * chunk) of request
// b, 32 tokens per loop iteration, for all N query rows at once: each cached token is read once.
// The query rows (N groups of H heads, each padded to Hp = round_up(H, 8)) are the A operand of
// v_mfma_f32_32x32x16_fp8_fp8 and stay in AGPRs; the 32 tokens of a tile are the B operand. The
// MFMA's K index is permuted the same way in both: lane half g (lanes 32g .. 32g + 31) holds
// dims [64g, 64g + 64) of its row, step s its bytes [8s, 8s + 8). A lane's result register j of
// row block mb is query row 32 mb + 8 (j / 4) + 4 g + j % 4 of token (lane % 32): with Hp a
// multiple of 8 the rows 8 (j / 4) .. + 7 of a block belong to one query row i, known when the
// kernel is built, so ReLU times the row's weight adds into that row's partial in place. The two
// lane halves' partials meet through one ds_bpermute, and lanes 0-31 store the tile.
//
// Cache (DeepGEMM's layout): block blk holds P x 128 fp8 (the target's flavour) at blk * P * 132,
// then P f32 scales. Block ids come from block_table one tile ahead of the KV loads, which run
// two tiles ahead of the MFMAs; a block id at or past num_blocks is never read (its logits -inf).
#include <fmt/format.h>

#include "abi/mla_abi.h"
#include "kernels/dsa_indexer.h"
#include "kernels/kernargs.h"
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {

namespace A = abi::indexer_args;
constexpr int kTile = abi::kIndexerTileTokens;
constexpr int kDim = abi::kIndexerDim, kTokenBytes = abi::kIndexerTokenBytes;
constexpr uint32_t kNegInf = 0xff800000u;
// A buffer offset past every record count here: the load returns zeros (padding rows, weights).
constexpr uint32_t kOutOfRange = 0x80000000u;
// i = (m * magic) >> 20 divides a row m < kMaxIndexerRows by Hp exactly (checked at build).
constexpr int kDivShift = 20;
// Tile slots: the tile computed and kSlots - 1 tiles of KV in flight behind it.
constexpr int kSlots = 3;

int log2_exact(int x) {
  int l = 0;
  while ((1 << l) < x) ++l;
  if ((1 << l) != x) throw std::logic_error(fmt::format("{} is not a power of two", x));
  return l;
}

class IndexerLogits {
 public:
  IndexerLogits(Program& p, const KernelSpec& s)
      : b(p), ra(b.regs()), s(s), H(s.heads), N(s.next_n), P(s.page_size), Hp(indexer_padded_heads(s)),
        MB((indexer_rows(s) + 31) / 32) {}
  void build();

 private:
  // One of the two tile slots: the KV bytes of the lane's half row, its token's scale, the
  // block id (loaded one tile earlier) and which lanes' blocks lie inside the cache.
  struct Slot {
    VReg k, scale, block, addr;
    SReg in_cache;
  };
  SReg arg(uint32_t off) { return args.sub(int(off / 4), 1); }
  SReg ptr(uint32_t off) { return args.sub(int(off / 4), 2); }
  void setup();
  void row_base(SReg dst, SReg base_ptr, SSrc row, SSrc row_bytes);
  void load_queries();
  void load_weights();
  void issue_block_id(SReg t, Slot& sl);
  void issue_kv(SReg t, Slot& sl);
  void compute(SReg t, Slot& sl);
  void tile_loop();

  Builder b;
  RegAllocator& ra;
  const KernelSpec& s;
  const int H, N, P, Hp, MB;
  SReg args, len, t_end, t_last, t, tn, tmp2, kv_block_bytes, num_blocks, lanes_lo, lanes_all, bt_base;
  std::vector<SReg> out_base;  // per query row i: logits + (b * N + i) * logits_stride * 4
  VReg lane, tok, half, perm, neg_inf, kv_hi, vtmp, vtmp2, vtmp3;
  AReg q;                      // MB x 16 AGPRs: the A operands
  VReg w;                      // MB x 16 VGPRs: each result register's weight
  VReg acc[2], part;           // two result blocks in flight; N row partials
  Slot slot[kSlots];
  Label done;
};

void IndexerLogits::build() {
  setup();
  load_queries();
  load_weights();
  tile_loop();
  b.bind(done);
  b.s_endpgm();
}

// dst = base_ptr + row * row_bytes as 64 bits.
void IndexerLogits::row_base(SReg dst, SReg base_ptr, SSrc row, SSrc row_bytes) {
  b.s_mul_i32(tmp2[0], row, row_bytes);
  b.s_mul_hi_u32(tmp2[1], row, row_bytes);
  b.s_add_u32(dst[0], base_ptr[0], tmp2[0]);
  b.s_addc_u32(dst[1], base_ptr[1], tmp2[1]);
}

void IndexerLogits::setup() {
  args = ra.sgpr(18, "kernargs", 4);
  b.s_load_dwordx8(args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx8(args.sub(8, 8), b.kernarg_ptr(), 32);
  b.s_load_dwordx2(args.sub(16, 2), b.kernarg_ptr(), 64);
  SReg chunk = b.workgroup_id(0), req = b.workgroup_id(1);
  tmp2 = ra.sgpr(2, "tmp2", 2);
  len = ra.sgpr(1, "context_len");
  b.s_lshl_b32(tmp2[0], req, Imm(2));
  b.s_add_u32(tmp2[0], ptr(A::context_lens)[0], tmp2[0]);
  b.s_addc_u32(tmp2[1], ptr(A::context_lens)[1], Imm(0));
  b.s_load_dword(len, tmp2, 0);
  // The tokens this workgroup scores: [t, t_end), with a negative length read as 0.
  t = ra.sgpr(1, "t"), t_end = ra.sgpr(1, "t_end"), t_last = ra.sgpr(1, "t_last"), tn = ra.sgpr(1, "t_next");
  b.s_cmp_lt_i32(len, Imm(0));
  b.s_cselect_b32(len, Imm(0), len);
  b.s_min_u32(len, len, arg(A::max_context_len));
  b.s_mul_i32(t, chunk, arg(A::chunk_tokens));
  b.s_add_u32(t_end, t, arg(A::chunk_tokens));
  b.s_min_u32(t_end, t_end, len);
  done = b.new_label("done");
  b.s_cmp_ge_u32(t, t_end);
  b.s_cbranch_scc1(done);
  b.s_sub_u32(t_last, t_end, Imm(1));

  lane = b.workitem_ids();
  tok = ra.vgpr(1, "token_lane"), half = ra.vgpr(1, "lane_half"), perm = ra.vgpr(1, "perm_other_half");
  b.v_and_b32(tok, Imm(kTile - 1), lane);
  b.v_lshrrev_b32(half, Imm(5), lane);
  b.v_xor_b32(perm, Imm(32), lane);
  b.v_lshlrev_b32(perm, Imm(2), perm);
  neg_inf = ra.vgpr(1, "neg_inf");
  b.v_mov_b32(neg_inf, Imm(int64_t(kNegInf)));
  vtmp = ra.vgpr(1, "vtmp"), vtmp2 = ra.vgpr(1, "vtmp2"), vtmp3 = ra.vgpr(1, "vtmp3");

  kv_hi = ra.vgpr(1, "kv_cache_hi");
  b.v_mov_b32(kv_hi, ptr(A::kv_cache)[1]);
  kv_block_bytes = ra.sgpr(1, "kv_block_bytes");
  b.s_mov_b32(kv_block_bytes, Imm(P * kTokenBytes));
  num_blocks = arg(A::num_blocks);
  lanes_lo = ra.sgpr(2, "lanes_0_31", 2), lanes_all = ra.sgpr(2, "lanes_all", 2);
  b.s_mov_b32(lanes_lo[0], Imm(-1));
  b.s_mov_b32(lanes_lo[1], Imm(0));
  b.s_mov_b64(lanes_all, Imm(-1));
  bt_base = ra.sgpr(2, "block_table_row", 2);
  b.s_lshl_b32(tn, arg(A::block_table_stride), Imm(2));
  row_base(bt_base, ptr(A::block_table), req, tn);
  b.s_lshl_b32(tn, arg(A::logits_stride), Imm(2));
  SReg row = ra.sgpr(1, "query_row");
  b.s_mul_i32(row, req, Imm(N));
  for (int i = 0; i < N; ++i) {
    out_base.push_back(ra.sgpr(2, fmt::format("logits_row{}", i), 2));
    row_base(out_base.back(), ptr(A::logits), row, tn);
    if (i + 1 < N) b.s_add_u32(row, row, Imm(1));
  }
  ra.release(row);
}

// The A operands: lane (m % 32, half g) of row block mb holds query row m = 32 mb + lane % 32
// (query i = m / Hp, head h = m % Hp), dims [64g, 64g + 64); padding rows load zeros.
void IndexerLogits::load_queries() {
  const int magic = ((1 << kDivShift) + Hp - 1) / Hp;
  for (int m = 0; m < 32 * MB; ++m)
    if ((m * magic) >> kDivShift != m / Hp) throw std::logic_error(fmt::format("row division by {} inexact", Hp));
  SReg rsrc = ra.sgpr(4, "q_rsrc", 4), base = ra.sgpr(2, "q_base", 2);
  row_base(base, ptr(A::q), b.workgroup_id(1), Imm(N * H * kDim));
  b.make_buffer_resource(rsrc, base, Imm(N * H * kDim));
  q = ra.agpr(16 * MB, "q_operands", 4);
  VReg staged = ra.vgpr(16, "q_staged", 4), m = ra.vgpr(1, "q_row"), i = ra.vgpr(1, "q_query"), off = ra.vgpr(1, "q_offset");
  for (int mb = 0; mb < MB; ++mb) {
    b.v_add_u32(m, Imm(32 * mb), tok);
    b.v_mul_u32_u24(i, Imm(magic), m);  // a literal only as src0
    b.v_lshrrev_b32(i, Imm(kDivShift), i);
    b.v_mul_u32_u24(vtmp, Imm(Hp), i);
    b.v_sub_u32(vtmp, m, vtmp);  // head
    b.v_mul_u32_u24(off, Imm(H), i);
    b.v_add_u32(off, off, vtmp);
    b.v_lshlrev_b32(off, Imm(7), off);
    b.v_lshl_add_u32(off, half, Imm(6), off);
    b.v_mov_b32(vtmp2, Imm(int64_t(kOutOfRange)));
    b.v_cmp_gt_u32(vcc, Imm(H), vtmp);
    b.v_cndmask_b32(off, vtmp2, off, vcc);
    b.v_cmp_gt_u32(vcc, Imm(N), i);
    b.v_cndmask_b32(off, vtmp2, off, vcc);
    for (int k = 0; k < 4; ++k) b.buffer_load_dwordx4(staged.sub(4 * k, 4), off, rsrc, Imm(0), uint32_t(16 * k));
    for (int r = 0; r < 16; ++r) b.v_accvgpr_write_b32(q[16 * mb + r], staged[r]);
  }
  ra.release(staged);
  ra.release(m);
  ra.release(i);
  ra.release(off);
  ra.release(rsrc);
  ra.release(base);
}

// Register j of row block mb is query row 32 mb + 8 (j / 4) + 4 g + j % 4: its weight, or 0 for a
// padding head. Rows of a query past N are never added (tile_loop skips them).
void IndexerLogits::load_weights() {
  SReg rsrc = ra.sgpr(4, "w_rsrc", 4), base = ra.sgpr(2, "w_base", 2);
  row_base(base, ptr(A::weights), b.workgroup_id(1), Imm(N * H * 4));
  b.make_buffer_resource(rsrc, base, Imm(N * H * 4));
  w = ra.vgpr(16 * MB, "weights", 4);
  VReg off = ra.vgpr(1, "w_offset");
  b.v_mov_b32(vtmp2, Imm(int64_t(kOutOfRange)));
  for (int mb = 0; mb < MB; ++mb)
    for (int g = 0; g < 4; ++g) {
      const int row0 = 32 * mb + 8 * g, i = row0 / Hp, h0 = row0 % Hp;
      if (i >= N) continue;
      // With H a multiple of 4 a lane's 4 heads are all real or all padding: one dwordx4.
      const int per_load = H % 4 == 0 ? 4 : 1;
      for (int jj = 0; jj < 4; jj += per_load) {
        // (VOP3 takes no literal on these targets: the constants go through VOP2 adds.)
        b.v_lshlrev_b32(off, Imm(4), half);
        b.v_add_u32(off, Imm((i * H + h0 + jj) * 4), off);
        if (h0 + jj + 4 >= H) {  // the upper lane half may be padding
          b.v_lshlrev_b32(vtmp, Imm(2), half);
          b.v_add_u32(vtmp, Imm(h0 + jj), vtmp);
          b.v_cmp_gt_u32(vcc, Imm(H), vtmp);
          b.v_cndmask_b32(off, vtmp2, off, vcc);
        }
        if (per_load == 4) b.buffer_load_dwordx4(w.sub(16 * mb + 4 * g, 4), off, rsrc, Imm(0));
        else b.buffer_load_dword(w[16 * mb + 4 * g + jj], off, rsrc, Imm(0));
      }
    }
  ra.release(off);
  ra.release(rsrc);
  ra.release(base);
}

// Block ids of tile t (clamped to the last token: a tile past the end reads a real entry): lanes
// 0-31 load their token's, then every lane takes its token's from the lower half.
void IndexerLogits::issue_block_id(SReg tt, Slot& sl) {
  b.v_add_u32(vtmp, tt, tok);
  b.v_min_u32(vtmp, t_last, vtmp);
  b.v_lshrrev_b32(vtmp, Imm(log2_exact(P)), vtmp);
  b.v_lshlrev_b32(vtmp, Imm(2), vtmp);
  b.s_mov_exec(lanes_lo);
  b.global_load_dword(sl.block, vtmp, bt_base);
  b.s_mov_exec(lanes_all);
}

// The tile's KV: lane (token o, half g) loads 64 bytes at kv + blk * P * 132 + (o % P) * 128 + 64 g
// and its token's scale at kv + blk * P * 132 + P * 128 + (o % P) * 4 (64-bit addresses: a cache
// may pass 4 GiB).
void IndexerLogits::issue_kv(SReg tt, Slot& sl) {
  b.v_and_b32(vtmp3, Imm(kTile - 1), lane);
  b.v_lshlrev_b32(vtmp3, Imm(2), vtmp3);
  b.ds_bpermute_b32(sl.block, vtmp3, sl.block);
  b.v_cmp_gt_u32(sl.in_cache, num_blocks, sl.block);
  b.v_cndmask_b32(sl.block, Imm(0), sl.block, sl.in_cache);
  b.v_add_u32(vtmp, tt, tok);
  b.v_min_u32(vtmp, t_last, vtmp);
  b.v_and_b32(vtmp, Imm(P - 1), vtmp);  // offset in the block
  b.v_mul_lo_u32(sl.addr[0], sl.block, kv_block_bytes);
  b.v_mul_hi_u32(sl.addr[1], sl.block, kv_block_bytes);
  b.v_add_co_u32(sl.addr[0], vcc, ptr(A::kv_cache)[0], sl.addr[0]);
  b.v_addc_co_u32(sl.addr[1], vcc, kv_hi, sl.addr[1], vcc);  // vcc is the one constant-bus read
  // The scale's address first (from the block's), then the values'.
  b.v_lshlrev_b32(vtmp2, Imm(2), vtmp);
  b.v_add_u32(vtmp2, Imm(P * kDim), vtmp2);
  b.v_add_co_u32(sl.addr[2], vcc, sl.addr[0], vtmp2);
  b.v_addc_co_u32(sl.addr[3], vcc, sl.addr[1], Imm(0), vcc);
  b.global_load_dword(sl.scale, sl.addr.sub(2, 2));
  b.v_lshlrev_b32(vtmp2, Imm(7), vtmp);
  b.v_lshl_add_u32(vtmp2, half, Imm(6), vtmp2);
  b.v_add_co_u32(sl.addr[0], vcc, sl.addr[0], vtmp2);
  b.v_addc_co_u32(sl.addr[1], vcc, sl.addr[1], Imm(0), vcc);
  for (int k = 0; k < 4; ++k) b.global_load_dwordx4(sl.k.sub(4 * k, 4), sl.addr.sub(0, 2), uint32_t(16 * k));
}

// Scores of tile t: per row block, 8 MFMAs over the dims, then ReLU times weight into the query
// rows' partials; the halves' partials summed, times the token's scale, stored by lanes 0-31.
void IndexerLogits::compute(SReg tt, Slot& sl) {
  std::vector<bool> started(size_t(N), false);
  for (int mb = 0; mb < MB; ++mb) {
    VReg a = acc[mb % 2];
    for (int st = 0; st < 8; ++st)
      b.v_mfma_f32_32x32x16_fp8_fp8(a, q.sub(16 * mb + 2 * st, 2), sl.k.sub(2 * st, 2),
                                    st == 0 ? AccSrc::zero() : AccSrc(a));
    for (int j = 0; j < 16; ++j) {
      const int i = (32 * mb + 8 * (j / 4)) / Hp;
      if (i >= N) continue;
      b.v_max_f32(vtmp, Imm(0), a[j]);
      if (!started[size_t(i)]) b.v_mul_f32(part[i], w[16 * mb + j], vtmp);
      else b.v_fma_f32(part[i], w[16 * mb + j], vtmp, part[i]);
      started[size_t(i)] = true;
    }
  }
  for (int i = 0; i < N; ++i) {
    b.ds_bpermute_b32(vtmp, perm, part[i]);
    b.v_add_f32(part[i], part[i], vtmp);
    b.v_mul_f32(part[i], part[i], sl.scale);
    b.v_cndmask_b32(part[i], neg_inf, part[i], sl.in_cache);
  }
  // Lanes 0 .. min(t_end - t, 32) - 1 store their token of every query row.
  SReg n = ra.sgpr(1, "tile_count"), saved = ra.sgpr(2, "saved_exec", 2);
  b.s_sub_u32(n, t_end, tt);
  b.s_min_u32(n, n, Imm(kTile));
  b.v_cmp_gt_u32(vcc, n, lane);
  b.s_and_saveexec_b64(saved, vcc);
  b.v_add_u32(vtmp, tt, tok);
  b.v_lshlrev_b32(vtmp, Imm(2), vtmp);
  for (int i = 0; i < N; ++i) b.global_store_dword(vtmp, part[i], out_base[size_t(i)]);
  b.s_mov_exec(saved);
  ra.release(n);
  ra.release(saved);
}

// Unrolled by kSlots so that each slot has its own registers. Per iteration: the block ids of
// tile t + kSlots, then the KV of tile t + kSlots - 1, then tile t: block ids one tile ahead of
// their KV, the KV kSlots - 1 tiles ahead of the MFMAs (the vector memory counter completes in
// order, so each wait leaves the loads behind it in flight). Two tiles in flight per wave: one
// would keep too few bytes in flight for the HBM at the occupancy these registers allow
// (docs/sparse.md "The indexer: performance"). The loads ahead are issued even past the end
// (clamped to the last token, in bounds): a branch around them would leave the waitcnt pass a
// path with fewer loads in flight, and its wait would then drain the tiles ahead.
void IndexerLogits::tile_loop() {
  for (int x = 0; x < kSlots; ++x) {
    slot[x].k = ra.vgpr(16, fmt::format("kv{}", x), 4);
    slot[x].scale = ra.vgpr(1, fmt::format("k_scale{}", x));
    slot[x].block = ra.vgpr(1, fmt::format("block{}", x));
    slot[x].addr = ra.vgpr(4, fmt::format("kv_addr{}", x), 2);
    slot[x].in_cache = ra.sgpr(2, fmt::format("in_cache{}", x), 2);
  }
  for (int x = 0; x < 2; ++x) acc[x] = ra.vgpr(16, fmt::format("scores{}", x), 4);
  part = ra.vgpr(N, "row_partials");
  Label loop = b.new_label("tile_loop");
  for (int x = 0; x < kSlots; ++x) {
    b.s_add_u32(tn, t, Imm(x * kTile));
    issue_block_id(tn, slot[x]);
  }
  for (int x = 0; x + 1 < kSlots; ++x) {
    b.s_add_u32(tn, t, Imm(x * kTile));
    issue_kv(tn, slot[x]);
  }
  b.bind(loop);
  for (int x = 0; x < kSlots; ++x) {
    b.s_add_u32(tn, t, Imm(kSlots * kTile));
    issue_block_id(tn, slot[x]);
    b.s_add_u32(tn, t, Imm((kSlots - 1) * kTile));
    issue_kv(tn, slot[(x + kSlots - 1) % kSlots]);
    compute(t, slot[x]);
    b.s_add_u32(t, t, Imm(kTile));
    b.s_cmp_lt_u32(t, t_end);
    // The last tile's test is the back-branch (the hot-loop analysis finds the loop by it).
    if (x + 1 < kSlots) b.s_cbranch_scc0(done);
    else b.s_cbranch_scc1(loop);
  }
}

}  // namespace

void build_dsa_indexer_logits(Program& p, const KernelSpec& s) {
  if (indexer_rows(s) > kMaxIndexerRows || s.next_n < 1 || s.heads < 1)
    throw std::logic_error(fmt::format("{}: {} query rows (at most {})", s.name(), indexer_rows(s), kMaxIndexerRows));
  p.abi.workgroup_id_y = true;
  declare_kernargs(p, abi::kIndexerArgs, s);
  p.abi.max_workgroup_size = 64;
  IndexerLogits(p, s).build();
}

}  // namespace mla::gen
