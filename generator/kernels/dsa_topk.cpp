// dsa_topk_per_row_decode: vLLM's top_k_per_row_decode over the indexer's logits (docs/sparse.md
// "The indexer"). One workgroup per row r = b * next_n + i, whose length is
// len = seq_lens[b] - next_n + i + 1 (the causal end of MTP row i). Output: topk indices into the
// row, the set of the topk largest logits; a row of len <= topk gets 0 .. len - 1, then -1.
//
// Exact radix select on the f32 logits as order-preserving u32 keys, 11 + 11 + 10 bits:
// - per digit, a histogram of the keys that match the digits found so far (LDS, ds_add_u32 by
//   every thread), then wave 0 finds the bin holding the topk-th largest: lane l sums 32 (16)
//   bins, a suffix scan across lanes (ds_bpermute) picks the lane, a scan inside it the bin;
// - after the last digit the topk-th largest key K and how many of the keys equal to K to take
//   are known; each wave then counts, in its contiguous quarter of the row, the keys above K and
//   equal to K, and writes its indices at positions that follow index order: the keys above K
//   first, then the first (by index) keys equal to K. The same input gives the same rows.
// A row of at most kTopkResidentKeys (16K) logits is read once: each wave loads its quarter's 16
// groups of 64 into registers and every pass works on them. A longer row is read five times
// (three histograms, the count, the write), from the L2 in the steady state (the logits were just
// written). With a block table each written position t
// becomes its cache slot (the selected ones' block ids are read; nothing else is).
//
// Stages (abi::topk_args): 0 as above; 1, workgroup (s, r) selects the top-k of segment s of row r
// into candidate row r * segments + s (positions and logits; a short segment copies its
// elements, then -1 and the lowest key); 2, row r selects over its segments' candidates and writes
// the positions they hold. Exact with the same rows in the same order as stage 0: an element of
// the row's top-k (by value, then lowest position) is in its segment's, and the candidates equal
// to the row's topk-th value lie in position order (segments in order; in a segment, the keys above
// its own topk-th value in position order, then its ties).
#include <fmt/format.h>

#include "abi/mla_abi.h"
#include "kernels/dsa_indexer.h"
#include "kernels/kernargs.h"
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {

namespace A = abi::topk_args;
// 16 waves, each thread 16 keys in flight in a histogram pass (4 dwordx4) and each wave 16 groups
// of 64 in the count and write passes: one row per CU reads at the rate its loads in flight allow
// (Little's law; docs/sparse.md "The indexer: performance").
constexpr int kThreads = kTopkThreads, kWaves = kThreads / 64, kUnroll = kTopkHistKeysPerThread / 4,
              kGroups = kTopkGroupsPerWave;
struct Digit {
  int shift, width;
};
constexpr Digit kDigits[3] = {{21, 11}, {10, 11}, {0, 10}};
constexpr uint32_t kHistBytes = 2048 * 4;
// LDS after the histogram: the found digit and count (2 dwords), then per wave its counts above
// and equal to the key (2 dwords each).
constexpr uint32_t kFound = kHistBytes, kWaveCounts = kHistBytes + 8, kLdsBytes = kWaveCounts + 8 * kWaves;

class TopK {
 public:
  TopK(Program& p) : b(p), ra(b.regs()) {}
  void build();

 private:
  SReg arg(uint32_t off) { return args.sub(int(off / 4), 1); }
  SReg ptr(uint32_t off) { return args.sub(int(off / 4), 2); }
  void setup();
  void short_row();
  void load_key(VReg key, VReg idx, SReg end);
  void order_key(VReg key);  // f32 bits to order-preserving u32 bits, in place
  void histogram(int pass);
  // A histogram pass over the wave's groups held in registers (a resident row).
  void histogram_resident(int pass, const std::vector<VReg>& keys, const std::vector<VReg>& idxs);
  void clear_histogram();
  // Counts `key` in its bin of digit `pass` where the lanes of m1 hold a key of the row that
  // matches the prefix found so far (m1 is clobbered).
  void histogram_add(int pass, VReg key);
  void find_digit(int pass);
  void quarter_range();  // "quarter": each wave's share of the row, [seg_begin, seg_end)
  // The count and write passes: over the groups given (a resident row), else loading them.
  void count_quarter(const std::vector<VReg>* keys = nullptr, const std::vector<VReg>* idxs = nullptr);
  void write_quarter(const std::vector<VReg>* keys = nullptr, const std::vector<VReg>* idxs = nullptr);
  // Per 64-key group of the wave's quarter: keys above K into `gt`, equal to K into `eq` (SGPR
  // pairs, inactive lanes and lanes past the end 0).
  void classify(VReg idx, VReg k_loaded, SReg gt, SReg eq);
  // Lane 0 writes two SGPRs to LDS at addr, addr + 4 (the wave's result for the others).
  void write_pair(VReg addr, SReg first, SReg second);
  // The keys of the wave's kGroups groups of 64 from j (positions past seg_end not loaded).
  void load_groups(std::vector<VReg>& keys, std::vector<VReg>& idxs);
  // body(keys, idxs) over the wave's groups: those given (a resident row), else loaded set by set
  // over [seg_begin, seg_end) (an empty quarter branches to `empty`).
  template <class F>
  void over_groups(const std::vector<VReg>* keys, const std::vector<VReg>* idxs, Label empty, const char* name, F&& body);
  // v1_ = what the row holds for position idx (lanes of `lanes`): idx, or its cache slot.
  void index_value(VReg idx, SReg lanes);

  Builder b;
  RegAllocator& ra;
  SReg args, row, len, row_len, k, offset, lookup, val_base, pos_base, prefix, pmask, rem, wave, tmp, in_base, out_base, bt_base, page_mask, seg_begin,
      seg_end, j;
  SReg m1, m2, saved;
  VReg tid, lane, one, zero, v0_, v1_, v2_;
  Label done;
};

void TopK::build() {
  setup();
  short_row();
  Label streamed = b.new_label("streamed");
  b.s_cmp_gt_u32(len, Imm(kTopkResidentKeys));
  b.s_cbranch_scc1(streamed);
  {  // Resident: one read of the row, every pass from registers.
    quarter_range();
    std::vector<VReg> keys, idxs;
    b.s_mov_b32(j, seg_begin);
    load_groups(keys, idxs);
    for (int pass = 0; pass < 3; ++pass) {
      histogram_resident(pass, keys, idxs);
      find_digit(pass);
    }
    count_quarter(&keys, &idxs);
    write_quarter(&keys, &idxs);
    for (int u = 0; u < kGroups; ++u) ra.release(keys[u]), ra.release(idxs[u]);
    b.s_branch(done);
  }
  b.bind(streamed);
  for (int pass = 0; pass < 3; ++pass) {
    histogram(pass);
    find_digit(pass);
  }
  quarter_range();
  count_quarter();
  write_quarter();
  b.bind(done);
  b.s_endpgm();
}

void TopK::setup() {
  args = ra.sgpr(22, "kernargs", 4);
  b.s_load_dwordx8(args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx8(args.sub(8, 8), b.kernarg_ptr(), 32);
  b.s_load_dwordx4(args.sub(16, 4), b.kernarg_ptr(), 64);
  b.s_load_dwordx2(args.sub(20, 2), b.kernarg_ptr(), 80);
  row = b.workgroup_id(1);
  tmp = ra.sgpr(2, "tmp", 2);
  SReg req = ra.sgpr(1, "request");
  // b = row / next_n: the magic multiply, or the row itself for next_n 1 (magic 0).
  b.s_mul_hi_u32(req, row, arg(A::row_div_magic));
  b.s_cmp_eq_u32(arg(A::row_div_magic), Imm(0));
  b.s_cselect_b32(req, row, req);
  len = ra.sgpr(1, "len"), row_len = ra.sgpr(1, "row_len"), k = arg(A::topk);
  b.s_lshl_b32(tmp[0], req, Imm(2));
  b.s_add_u32(tmp[0], ptr(A::seq_lens)[0], tmp[0]);
  b.s_addc_u32(tmp[1], ptr(A::seq_lens)[1], Imm(0));
  b.s_load_dword(row_len, tmp, 0);
  // row_len = seq_len - next_n + i + 1 = seq_len - (b + 1) * next_n + row + 1, negative as 0, at
  // most the logits row.
  b.s_add_u32(tmp[0], req, Imm(1));
  b.s_mul_i32(tmp[0], tmp[0], arg(A::next_n));
  b.s_sub_i32(tmp[0], row, tmp[0]);
  b.s_add_i32(tmp[0], tmp[0], Imm(1));
  b.s_add_i32(row_len, row_len, tmp[0]);
  b.s_cmp_lt_i32(row_len, Imm(0));
  b.s_cselect_b32(row_len, Imm(0), row_len);
  b.s_min_u32(row_len, row_len, arg(A::logits_stride));
  // The request's block-table row (used only when block_table is not null).
  bt_base = ra.sgpr(2, "block_table_row", 2), page_mask = ra.sgpr(1, "page_mask");
  b.s_lshl_b32(tmp[1], arg(A::block_table_stride), Imm(2));
  b.s_mul_i32(tmp[0], req, tmp[1]);
  b.s_mul_hi_u32(tmp[1], req, tmp[1]);
  b.s_add_u32(bt_base[0], ptr(A::block_table)[0], tmp[0]);
  b.s_addc_u32(bt_base[1], ptr(A::block_table)[1], tmp[1]);
  b.s_lshl_b32(page_mask, Imm(1), arg(A::page_size_log2));
  b.s_sub_u32(page_mask, page_mask, Imm(1));
  ra.release(req);
  in_base = ra.sgpr(2, "logits_row", 2), out_base = ra.sgpr(2, "indices_row", 2);
  val_base = ra.sgpr(2, "cand_vals_row", 2), pos_base = ra.sgpr(2, "cand_pos_row", 2);
  offset = ra.sgpr(1, "position_offset"), lookup = ra.sgpr(1, "lookup");
  auto row_base = [&](SReg dst, SReg base, SSrc r, SSrc stride_elems) {
    b.s_lshl_b32(tmp[1], stride_elems, Imm(2));
    b.s_mul_i32(tmp[0], r, tmp[1]);
    b.s_mul_hi_u32(tmp[1], r, tmp[1]);
    b.s_add_u32(dst[0], base[0], tmp[0]);
    b.s_addc_u32(dst[1], base[1], tmp[1]);
  };
  // Stage 0: the row's logits, all of it, into the indices row.
  row_base(in_base, ptr(A::logits), row, arg(A::logits_stride));
  row_base(out_base, ptr(A::indices), row, arg(A::indices_stride));
  b.s_mov_b32(len, row_len);
  b.s_mov_b32(offset, Imm(0));
  b.s_mov_b32(lookup, Imm(0));
  Label stage_set = b.new_label("stage_set"), stage2 = b.new_label("stage2");
  b.s_cmp_eq_u32(arg(A::stage), Imm(0));
  b.s_cbranch_scc1(stage_set);
  b.s_cmp_eq_u32(arg(A::stage), Imm(2));
  b.s_cbranch_scc1(stage2);
  // Stage 1: segment s of the row, [s * segment_tokens, ...) cut at the row's length, into
  // candidate row r * segments + s (positions and values).
  SReg seg = ra.sgpr(1, "segment_row");
  b.s_mul_i32(offset, b.workgroup_id(0), arg(A::segment_tokens));
  b.s_sub_i32(len, row_len, offset);
  b.s_cmp_lt_i32(len, Imm(0));
  b.s_cselect_b32(len, Imm(0), len);
  b.s_min_u32(len, len, arg(A::segment_tokens));
  b.s_lshl_b32(tmp[0], offset, Imm(2));
  b.s_add_u32(in_base[0], in_base[0], tmp[0]);
  b.s_addc_u32(in_base[1], in_base[1], Imm(0));
  b.s_mul_i32(seg, row, arg(A::segments));
  b.s_add_u32(seg, seg, b.workgroup_id(0));
  row_base(out_base, ptr(A::cand_pos), seg, k);
  row_base(val_base, ptr(A::cand_vals), seg, k);
  b.s_branch(stage_set);
  // Stage 2: a row longer than topk selects over its segments x topk candidates, writing the
  // positions they hold (a shorter row writes 0 .. len - 1 as in stage 0).
  b.bind(stage2);
  b.s_cmp_le_u32(row_len, k);
  b.s_cbranch_scc1(stage_set);
  b.s_mul_i32(seg, row, arg(A::segments));
  row_base(in_base, ptr(A::cand_vals), seg, k);
  row_base(pos_base, ptr(A::cand_pos), seg, k);
  b.s_mul_i32(len, arg(A::segments), k);
  b.s_mov_b32(lookup, Imm(1));
  ra.release(seg);
  b.bind(stage_set);
  tid = b.workitem_ids();
  lane = ra.vgpr(1, "lane"), one = ra.vgpr(1, "one"), zero = ra.vgpr(4, "zeros", 4);
  v0_ = ra.vgpr(1, "v_a"), v1_ = ra.vgpr(1, "v_b"), v2_ = ra.vgpr(1, "v_c");
  b.v_and_b32(lane, Imm(63), tid);
  b.v_mov_b32(one, Imm(1));
  for (int i = 0; i < 4; ++i) b.v_mov_b32(zero[i], Imm(0));
  wave = ra.sgpr(1, "wave");
  b.v_lshrrev_b32(v0_, Imm(6), tid);
  b.v_readfirstlane_b32(wave, v0_);
  prefix = ra.sgpr(1, "prefix"), pmask = ra.sgpr(1, "prefix_mask"), rem = ra.sgpr(1, "remaining");
  b.s_mov_b32(prefix, Imm(0));
  b.s_mov_b32(pmask, Imm(0));
  b.s_mov_b32(rem, k);
  m1 = ra.sgpr(2, "mask1", 2), m2 = ra.sgpr(2, "mask2", 2), saved = ra.sgpr(2, "saved_exec", 2);
  j = ra.sgpr(1, "j");
  seg_begin = ra.sgpr(1, "seg_begin"), seg_end = ra.sgpr(1, "seg_end");
  done = b.new_label("done");
}

// len <= topk: indices 0 .. len - 1, then -1 (vLLM's contract for a short row).
void TopK::short_row() {
  Label select = b.new_label("select");
  b.s_cmp_gt_u32(len, k);
  b.s_cbranch_scc1(select);
  b.s_mov_b32(j, Imm(0));
  Label loop = b.new_label("short_loop");
  b.bind(loop);
  b.v_add_u32(v0_, j, tid);
  b.v_cmp_gt_u32(m2, len, v0_);
  index_value(v0_, m2);
  b.v_cndmask_b32(v1_, Imm(-1), v1_, m2);
  b.v_cmp_gt_u32(vcc, k, v0_);
  b.s_and_saveexec_b64(saved, vcc);
  b.v_lshlrev_b32(v2_, Imm(2), v0_);
  b.global_store_dword(v2_, v1_, out_base);
  b.s_mov_exec(saved);
  // Stage 1: the candidates' values beside their positions, the lowest key (0xffffffff) after.
  Label no_values = b.new_label("short_no_values");
  b.s_cmp_lg_u32(arg(A::stage), Imm(1));
  b.s_cbranch_scc1(no_values);
  b.v_mov_b32(v1_, Imm(-1));
  b.s_and_saveexec_b64(saved, m2);
  b.global_load_dword(v1_, v2_, in_base);
  b.s_mov_exec(saved);
  b.s_and_saveexec_b64(saved, vcc);
  b.global_store_dword(v2_, v1_, val_base);
  b.s_mov_exec(saved);
  b.bind(no_values);
  b.s_add_u32(j, j, Imm(kThreads));
  b.s_cmp_lt_u32(j, k);
  b.s_cbranch_scc1(loop);
  b.s_branch(done);
  b.bind(select);
}

// key = the order-preserving bits of logits[idx] (idx clamped to `limit`: a lane past the end
// reads a real element; callers mask it): x >= 0 sets the sign bit, x < 0 inverts every bit.
void TopK::load_key(VReg k_out, VReg idx, SReg end) {
  // Only lanes before `end` load (no traffic past it); the others' keys are stale and masked by
  // the callers.
  b.v_cmp_gt_u32(vcc, end, idx);
  b.s_and_saveexec_b64(saved, vcc);
  b.v_lshlrev_b32(v2_, Imm(2), idx);
  b.global_load_dword(k_out, v2_, in_base);
  b.s_mov_exec(saved);
  order_key(k_out);
}
void TopK::order_key(VReg key) {
  b.v_ashrrev_i32(v2_, Imm(31), key);
  b.v_or_b32(v2_, Imm(int64_t(0x80000000u)), v2_);
  b.v_xor_b32(key, v2_, key);
}
void TopK::histogram(int pass) {
  clear_histogram();
  // Per iteration each thread loads kUnroll x 4 consecutive keys (one dwordx4 each): a vector
  // that starts before the end may run past it, into the row's stride (a multiple of 4, so in
  // bounds; its lanes past the end are masked); one that starts past the end is not loaded.
  std::vector<VReg> keys, idxs;
  for (int u = 0; u < kUnroll; ++u) {
    keys.push_back(ra.vgpr(4, fmt::format("hkey{}", u), 4));
    idxs.push_back(ra.vgpr(1, fmt::format("hidx{}", u)));
  }
  VReg addr = ra.vgpr(2, "haddr", 2), base_hi = ra.vgpr(1, "logits_row_hi");
  b.v_mov_b32(base_hi, in_base[1]);
  b.v_lshlrev_b32(v1_, Imm(2), tid);
  b.s_mov_b32(j, Imm(0));
  Label loop = b.new_label(fmt::format("hist_loop{}", pass));
  b.bind(loop);
  for (int u = 0; u < kUnroll; ++u) {
    b.v_add_u32(idxs[u], j, v1_);
    if (u) b.v_add_u32(idxs[u], Imm(u * 4 * kThreads), idxs[u]);
    b.v_lshlrev_b32(v2_, Imm(2), idxs[u]);
    b.v_add_co_u32(addr[0], vcc, in_base[0], v2_);
    b.v_addc_co_u32(addr[1], vcc, base_hi, Imm(0), vcc);  // vcc is the one constant-bus read
    b.v_cmp_gt_u32(vcc, len, idxs[u]);
    b.s_and_saveexec_b64(saved, vcc);
    b.global_load_dwordx4(keys[u], addr, 0);
    b.s_mov_exec(saved);
  }
  for (int u = 0; u < kUnroll; ++u)
    for (int e = 0; e < 4; ++e) {
      VReg key = keys[u][e];
      order_key(key);
      b.v_add_u32(v0_, Imm(e), idxs[u]);
      b.v_cmp_gt_u32(m1, len, v0_);
      histogram_add(pass, key);
    }
  b.s_add_u32(j, j, Imm(kUnroll * 4 * kThreads));
  b.s_cmp_lt_u32(j, len);
  b.s_cbranch_scc1(loop);
  for (int u = 0; u < kUnroll; ++u) {
    ra.release(keys[u]);
    ra.release(idxs[u]);
  }
  ra.release(addr);
  ra.release(base_hi);
  b.s_barrier();
}

void TopK::histogram_resident(int pass, const std::vector<VReg>& keys, const std::vector<VReg>& idxs) {
  clear_histogram();
  for (int u = 0; u < kGroups; ++u) {
    b.v_cmp_gt_u32(m1, seg_end, idxs[u]);
    histogram_add(pass, keys[u]);
  }
  b.s_barrier();
}

// Each thread zeroes 2 bins.
void TopK::clear_histogram() {
  static_assert(kHistBytes == 8 * kThreads);
  b.v_lshlrev_b32(v0_, Imm(3), tid);
  b.ds_write_b64(v0_, zero.sub(0, 2), 0);
  b.s_barrier();
}

void TopK::histogram_add(int pass, VReg key) {
  const Digit d = kDigits[pass];
  if (pass > 0) {
    b.v_xor_b32(v0_, prefix, key);
    b.v_and_b32(v0_, pmask, v0_);
    b.v_cmp_eq_u32(m2, Imm(0), v0_);
    b.s_and_b64(m1, m1, m2);
  }
  b.v_bfe_u32(v0_, key, Imm(d.shift), Imm(d.width));
  b.v_lshlrev_b32(v0_, Imm(2), v0_);
  b.s_and_saveexec_b64(saved, m1);
  b.ds_add_u32(v0_, one);
  b.s_mov_exec(saved);
}

// Wave 0: the bin of the histogram holding the rem-th largest matching key; every wave then
// reads the digit and the count still to take inside it, and extends the prefix.
void TopK::find_digit(int pass) {
  const Digit d = kDigits[pass];
  const int per = (1 << d.width) / 64;  // bins per lane
  Label not_wave0 = b.new_label(fmt::format("not_wave0_{}", pass));
  b.s_cmp_lg_u32(wave, Imm(0));
  b.s_cbranch_scc1(not_wave0);
  VReg c = ra.vgpr(per, "bins", 4), sum = ra.vgpr(1, "bin_sum"), suf = ra.vgpr(1, "suffix");
  b.v_lshlrev_b32(v0_, Imm(2 + (per == 32 ? 5 : 4)), lane);
  for (int q = 0; q < per / 4; ++q) b.ds_read_b128(c.sub(4 * q, 4), v0_, uint32_t(16 * q));
  b.v_add_u32(sum, c[0], c[1]);
  for (int q = 2; q < per; ++q) b.v_add_u32(sum, sum, c[q]);
  // Suffix sums across lanes: suf[l] = sum of sum[l'] for l' >= l.
  b.v_mov_b32(suf, sum);
  for (int s = 1; s < 64; s *= 2) {
    b.v_add_u32(v0_, Imm(s), lane);
    b.v_lshlrev_b32(v0_, Imm(2), v0_);
    b.ds_bpermute_b32(v1_, v0_, suf);
    b.v_cmp_gt_u32(vcc, Imm(64 - s), lane);
    b.v_cndmask_b32(v1_, Imm(0), v1_, vcc);
    b.v_add_u32(suf, suf, v1_);
  }
  // Lanes whose suffix still holds rem keys are a prefix 0 .. L of the wave.
  SReg L = ra.sgpr(1, "lane_found"), sL = ra.sgpr(1, "suffix_found"), t1 = ra.sgpr(1, "t1");
  b.v_cmp_le_u32(m1, rem, suf);
  b.s_bcnt1_i32_b64(L, m1);
  b.s_sub_u32(L, L, Imm(1));
  b.v_readlane_b32(sL, suf, L);
  b.v_readlane_b32(t1, sum, L);
  b.s_sub_u32(sL, sL, t1);    // keys in the bins above lane L's
  b.s_sub_u32(t1, rem, sL);   // still to take from lane L's bins
  // Inside each lane (lane L's is the one read): the bin where the running sum from the top
  // reaches t1, and the count above it.
  VReg acc = ra.vgpr(1, "running"), dig = ra.vgpr(1, "digit_low"), above = ra.vgpr(1, "above");
  b.v_mov_b32(acc, Imm(0));
  b.v_mov_b32(dig, Imm(0));
  b.v_mov_b32(above, Imm(0));
  for (int q = per - 1; q >= 0; --q) {
    b.v_mov_b32(v1_, acc);
    b.v_add_u32(acc, acc, c[q]);
    b.v_cmp_le_u32(m1, t1, acc);
    b.v_cmp_gt_u32(m2, t1, v1_);
    b.s_and_b64(m1, m1, m2);
    b.v_cndmask_b32(dig, dig, Imm(q), m1);
    b.v_cndmask_b32(above, above, v1_, m1);
  }
  SReg dlo = ra.sgpr(1, "digit_found"), ab = ra.sgpr(1, "above_found");
  b.v_readlane_b32(dlo, dig, L);
  b.v_readlane_b32(ab, above, L);
  b.s_mul_i32(L, L, Imm(per));
  b.s_add_u32(dlo, dlo, L);
  b.s_sub_u32(t1, t1, ab);
  b.v_mov_b32(v0_, Imm(int64_t(kFound)));
  write_pair(v0_, dlo, t1);
  for (SReg r : {L, sL, t1, dlo, ab}) ra.release(r);
  for (VReg r : {c, sum, suf, acc, dig, above}) ra.release(r);
  b.bind(not_wave0);
  b.s_barrier();
  b.v_mov_b32(v0_, Imm(int64_t(kFound)));
  b.ds_read_b32(v1_, v0_);
  b.ds_read_b32(v2_, v0_, 4);
  SReg found = ra.sgpr(1, "found");
  b.v_readfirstlane_b32(found, v1_);
  b.v_readfirstlane_b32(rem, v2_);
  b.s_lshl_b32(found, found, Imm(d.shift));
  b.s_or_b32(prefix, prefix, found);
  b.s_or_b32(pmask, pmask, Imm(int64_t(((1u << d.width) - 1) << d.shift)));
  ra.release(found);
  // The next histogram's clear must not overtake the reads of the found digit.
  b.s_barrier();
}

void TopK::index_value(VReg idx, SReg lanes) {
  b.v_add_u32(v1_, offset, idx);
  Label direct = b.new_label("direct"), positions = b.new_label("positions");
  b.s_cmp_eq_u32(lookup, Imm(0));
  b.s_cbranch_scc1(direct);
  // Stage 2: the position candidate idx holds.
  b.s_and_saveexec_b64(tmp, lanes);
  b.v_lshlrev_b32(v2_, Imm(2), idx);
  b.global_load_dword(v1_, v2_, pos_base);
  b.s_mov_exec(tmp);
  b.bind(direct);
  b.s_or_b32(tmp[0], ptr(A::block_table)[0], ptr(A::block_table)[1]);
  b.s_cmp_eq_u32(tmp[0], Imm(0));
  b.s_cbranch_scc1(positions);
  b.s_and_saveexec_b64(tmp, lanes);
  b.v_lshrrev_b32(v2_, arg(A::page_size_log2), v1_);
  b.v_lshlrev_b32(v2_, Imm(2), v2_);
  b.global_load_dword(v2_, v2_, bt_base);
  b.v_lshlrev_b32(v2_, arg(A::page_size_log2), v2_);
  b.v_and_b32(v1_, page_mask, v1_);
  b.v_or_b32(v1_, v1_, v2_);
  b.s_mov_exec(tmp);
  b.bind(positions);
}

void TopK::write_pair(VReg addr, SReg first, SReg second) {
  b.v_mov_b32(v1_, first);
  b.v_mov_b32(v2_, second);
  b.v_cmp_eq_u32(vcc, Imm(0), lane);
  b.s_and_saveexec_b64(saved, vcc);
  b.ds_write_b32(addr, v1_);
  b.ds_write_b32(addr, v2_, 4);
  b.s_mov_exec(saved);
}

void TopK::load_groups(std::vector<VReg>& keys, std::vector<VReg>& idxs) {
  for (int u = 0; u < kGroups; ++u) {
    keys.push_back(ra.vgpr(1, fmt::format("group_key{}", u)));
    idxs.push_back(ra.vgpr(1, fmt::format("group_index{}", u)));
    b.v_add_u32(idxs[u], j, lane);
    if (u) b.v_add_u32(idxs[u], Imm(64 * u), idxs[u]);
    load_key(keys[u], idxs[u], seg_end);
  }
}

template <class F>
void TopK::over_groups(const std::vector<VReg>* keys_in, const std::vector<VReg>* idxs_in, Label empty, const char* name,
                       F&& body) {
  if (keys_in) return body(*keys_in, *idxs_in);
  Label loop = b.new_label(name);
  b.s_mov_b32(j, seg_begin);
  b.s_cmp_ge_u32(j, seg_end);
  b.s_cbranch_scc1(empty);
  b.bind(loop);
  std::vector<VReg> keys, idxs;
  load_groups(keys, idxs);
  body(keys, idxs);
  for (int u = 0; u < kGroups; ++u) ra.release(keys[u]), ra.release(idxs[u]);
  b.s_add_u32(j, j, Imm(64 * kGroups));
  b.s_cmp_lt_u32(j, seg_end);
  b.s_cbranch_scc1(loop);
}

void TopK::classify(VReg idx, VReg k_loaded, SReg gt, SReg eq) {
  b.v_cmp_gt_u32(m1, seg_end, idx);
  b.v_cmp_lt_u32(gt, prefix, k_loaded);
  b.s_and_b64(gt, gt, m1);
  b.v_cmp_eq_u32(eq, prefix, k_loaded);
  b.s_and_b64(eq, eq, m1);
}

// Each wave's share of the row: [wave * q, min((wave + 1) * q, len)), q = len / kWaves rounded
// up to 64 x kGroups (one set of groups per wave for a resident row).
void TopK::quarter_range() {
  constexpr int span = 64 * kGroups * kWaves, span_log2 = 14, q_log2 = 10;
  static_assert(span == 1 << span_log2 && 64 * kGroups == 1 << q_log2 && span == kTopkResidentKeys);
  b.s_add_u32(seg_end, len, Imm(span - 1));
  b.s_lshr_b32(seg_end, seg_end, Imm(span_log2));
  b.s_lshl_b32(seg_end, seg_end, Imm(q_log2));  // q
  b.s_mul_i32(seg_begin, wave, seg_end);
  b.s_add_u32(seg_end, seg_begin, seg_end);
  b.s_min_u32(seg_end, seg_end, len);
}

// The wave's counts of keys above and equal to K go to LDS.
void TopK::count_quarter(const std::vector<VReg>* resident_keys, const std::vector<VReg>* resident_idxs) {
  SReg gt = ra.sgpr(2, "above_mask", 2), eq = ra.sgpr(2, "equal_mask", 2), cg = ra.sgpr(1, "count_above"),
       ce = ra.sgpr(1, "count_equal"), c = ra.sgpr(1, "count");
  b.s_mov_b32(cg, Imm(0));
  b.s_mov_b32(ce, Imm(0));
  auto count = [&](const std::vector<VReg>& keys, const std::vector<VReg>& idxs) {
    for (int u = 0; u < kGroups; ++u) {
      classify(idxs[u], keys[u], gt, eq);
      b.s_bcnt1_i32_b64(c, gt);
      b.s_add_u32(cg, cg, c);
      b.s_bcnt1_i32_b64(c, eq);
      b.s_add_u32(ce, ce, c);
    }
  };
  Label skip = b.new_label("count_done");
  over_groups(resident_keys, resident_idxs, skip, "count_loop", count);
  b.bind(skip);
  b.s_lshl_b32(c, wave, Imm(3));
  b.s_add_u32(c, c, Imm(kWaveCounts));
  b.v_mov_b32(v0_, c);
  write_pair(v0_, cg, ce);
  for (SReg r : {gt, eq, cg, ce, c}) ra.release(r);
  b.s_barrier();
}

// The positions: keys above K at [sum of the earlier waves' above-counts + running count), keys
// equal to K at topk - rem + [earlier waves' equal-counts + running count) while below rem.
void TopK::write_quarter(const std::vector<VReg>* resident_keys, const std::vector<VReg>* resident_idxs) {
  SReg base_gt = ra.sgpr(1, "base_above"), base_eq = ra.sgpr(1, "base_equal"), kgt = ra.sgpr(1, "count_above_all");
  SReg c = ra.sgpr(1, "count"), gt = ra.sgpr(2, "above_mask", 2), eq = ra.sgpr(2, "equal_mask", 2);
  b.s_mov_b32(base_gt, Imm(0));
  b.s_mov_b32(base_eq, Imm(0));
  b.v_mov_b32(v0_, Imm(int64_t(kWaveCounts)));
  for (int w = 0; w + 1 < kWaves; ++w) {
    b.ds_read_b32(v1_, v0_, uint32_t(8 * w));
    b.ds_read_b32(v2_, v0_, uint32_t(8 * w + 4));
    b.v_readfirstlane_b32(c, v1_);
    b.s_cmp_lt_u32(Imm(w), wave);
    b.s_cselect_b32(c, c, Imm(0));
    b.s_add_u32(base_gt, base_gt, c);
    b.v_readfirstlane_b32(c, v2_);
    b.s_cmp_lt_u32(Imm(w), wave);
    b.s_cselect_b32(c, c, Imm(0));
    b.s_add_u32(base_eq, base_eq, c);
  }
  b.s_sub_u32(kgt, k, rem);
  // One group of 64 keys, in index order.
  auto group = [&](VReg idx, VReg k_loaded) {
    classify(idx, k_loaded, gt, eq);
    // Above K: position base_gt + the lanes below this one; equal to K: the first rem of them by
    // index, at topk - rem + (base_eq + the lanes below).
    VReg pos_gt = ra.vgpr(1, "pos_above"), pos_eq = ra.vgpr(1, "pos_equal");
    b.v_mbcnt_lo(pos_gt, gt[0], Imm(0));
    b.v_mbcnt_hi(pos_gt, gt[1], pos_gt);
    b.v_add_u32(pos_gt, base_gt, pos_gt);
    b.v_lshlrev_b32(pos_gt, Imm(2), pos_gt);
    b.v_mbcnt_lo(pos_eq, eq[0], Imm(0));
    b.v_mbcnt_hi(pos_eq, eq[1], pos_eq);
    b.v_add_u32(pos_eq, base_eq, pos_eq);
    b.v_cmp_gt_u32(m1, rem, pos_eq);
    b.s_and_b64(m1, m1, eq);
    b.v_add_u32(pos_eq, kgt, pos_eq);
    b.v_lshlrev_b32(pos_eq, Imm(2), pos_eq);
    b.s_or_b64(m2, gt, m1);
    index_value(idx, m2);
    b.s_and_saveexec_b64(saved, gt);
    b.global_store_dword(pos_gt, v1_, out_base);
    b.s_mov_exec(saved);
    b.s_and_saveexec_b64(saved, m1);
    b.global_store_dword(pos_eq, v1_, out_base);
    b.s_mov_exec(saved);
    // Stage 1: each candidate's logit beside it (the key's inverse: x >= 0 had its sign bit set,
    // x < 0 every bit inverted).
    Label no_values = b.new_label("no_values");
    b.s_cmp_lg_u32(arg(A::stage), Imm(1));
    b.s_cbranch_scc1(no_values);
    b.v_ashrrev_i32(v2_, Imm(31), k_loaded);
    b.v_xor_b32(v2_, Imm(-1), v2_);
    b.v_or_b32(v2_, Imm(int64_t(0x80000000u)), v2_);
    b.v_xor_b32(v2_, v2_, k_loaded);
    b.s_and_saveexec_b64(saved, gt);
    b.global_store_dword(pos_gt, v2_, val_base);
    b.s_mov_exec(saved);
    b.s_and_saveexec_b64(saved, m1);
    b.global_store_dword(pos_eq, v2_, val_base);
    b.s_mov_exec(saved);
    b.bind(no_values);
    ra.release(pos_gt);
    ra.release(pos_eq);
    b.s_bcnt1_i32_b64(c, gt);
    b.s_add_u32(base_gt, base_gt, c);
    b.s_bcnt1_i32_b64(c, eq);
    b.s_add_u32(base_eq, base_eq, c);
  };
  over_groups(resident_keys, resident_idxs, done, "write_loop",
              [&](const std::vector<VReg>& keys, const std::vector<VReg>& idxs) {
                for (int u = 0; u < kGroups; ++u) group(idxs[size_t(u)], keys[size_t(u)]);
              });
  for (SReg r : {base_gt, base_eq, kgt, c, gt, eq}) ra.release(r);
}

}  // namespace

void build_dsa_topk(Program& p, const KernelSpec& s) {
  p.abi.workgroup_id_y = true;
  declare_kernargs(p, abi::kTopkArgs, s);
  p.abi.max_workgroup_size = kThreads;
  p.abi.lds_bytes = kLdsBytes;
  TopK(p).build();
}

}  // namespace mla::gen
