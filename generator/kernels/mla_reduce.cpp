// The MLA reduce kernel: merges the split partials of one request row into the final o.
//
// Grid (the plan's reduce capacity, M rows), one workgroup of kReduceWaves waves per row;
// workgroup x merges entry x of the launch's table (abi::LaunchHeader) or exits when the step has
// fewer. An entry's partials are slots first + k * stride (abi::ReduceEntry); the first bf16_splits
// of them hold bf16 o (a prefix kernel's, or a sparse decode kernel's), widened exactly to f32, the rest f32.
// Latency: a row's S splits are cut into contiguous ranges of R = reduce_range_splits(S) (whole
// sum chunks), one per wave. A wave's loads come in chunks, every load of a chunk in flight at
// once (lanes carry the chunk's lse, an LDS round trip hands them to every lane): ceil(R / 64)
// rounds for its lse maximum, ceil(R / 16) (+1 where its range crosses from bf16 to f32) for its
// weighted sum; the waves meet twice in LDS (the maximum, then wave 0 adds the ranges' sums in
// range order). 4 rounds at S = 304 (32K x1), 2 at S <= 128 (docs/performance.md, "The reduce's latency").
//   lse* = max_k lse_k;  w_k = exp(lse_k - lse*);  o = sum_k w_k o_k / sum_k w_k;
//   lse = lse* + ln(sum_k w_k).
// Each range sums in split order from 0, the ranges' sums are added in order: the in-launch merge
// (emit_partial_merge_block) adds in the same order, so the two are equal bit for bit.
// Partials are normalised within their split (decode wrote o_k = sum p v / sum p), so the
// weights are exactly the splits' shares of the softmax denominator.
//
// The builder is a plan plus one emitter per phase, as the decode builder is: ReducePlan (what
// the spec decides; ReduceLds, the LDS layout) is computed first, then class Reduce emits, one
// method per phase in program order:
//   arguments       kernel arguments, the wave and the lane;
//   fetch_entry     wave 0 copies the launch entry into LDS, every wave reads it (or ends);
//   wave_range      this wave's splits [lo, hi);
//   addresses       the LDS hand-over addresses, the lse and partial-row buffer resources
//                   (and the chunk loops' registers);
//   lse_max         lse* over the wave's range, then over the waves through LDS;
//   weighted_sum    the range's sums of w_k o_k and w_k, its bf16 splits then its f32 splits;
//   combine_ranges  waves 1..7 hand their sums to wave 0, which adds them in range order;
//   store           o as bf16, and lse.
// The helpers the reduce shares with the in-launch merge come before it, the in-launch merge
// (emit_partial_merge_block) after it.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/kernargs.h"
#include "kernels/mla_geometry.h"
#include "kernels/mla_reduce.h"
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr uint32_t kNegFltMax = 0xff7fffffu;
}  // namespace

void emit_weight_max(Builder& b, VReg max) { b.v_max_f32(max, Imm(int64_t(kNegFltMax)), max); }

void emit_safe_inverse(Builder& b, VReg inv, VReg wsum) {
  b.v_rcp_f32(inv, wsum);
  b.v_cmp_gt_f32(vcc, wsum, Imm(0));
  b.v_cndmask_b32(inv, Imm(0), inv, vcc);
}

void emit_pack_bf16_rne(Builder& b, VReg d, VReg lo, VReg hi, VReg t0, VReg t1, SReg k7fff, SReg kperm) {
  if (b.target().has_cvt_pk_bf16) return b.v_cvt_pk_bf16_f32(d, lo, hi);
  b.v_bfe_u32(t0, lo, Imm(16), Imm(1));
  b.v_add3_u32(t0, lo, k7fff, t0);
  b.v_bfe_u32(t1, hi, Imm(16), Imm(1));
  b.v_add3_u32(t1, hi, k7fff, t1);
  b.v_perm_b32(d, t1, t0, kperm);
}

void emit_split_weight(Builder& b, VReg w, VReg wsum, VSrc lse_k, VReg max) {
  b.v_sub_f32(w, lse_k, max);
  b.v_mul_f32(w, FImm{kLog2e}, w);
  b.v_exp_f32(w, w);
  b.v_add_f32(wsum, wsum, w);
}

int reduce_load_rounds(int splits, int bf16_splits) {
  const int range = reduce_range_splits(splits);
  auto chunks = [](int n, int size) { return (std::max(0, n) + size - 1) / size; };
  int most = 0;
  for (int lo = 0; lo < splits; lo += range) {
    const int hi = std::min(lo + range, splits), b16 = std::max(0, std::min(hi, bf16_splits) - lo);
    most = std::max(most, chunks(hi - lo, kReduceLseChunk) + chunks(b16, kReduceSumChunk) +
                              chunks(hi - lo - b16, kReduceSumChunk));
  }
  return most;
}

void emit_reduce_range_splits(Builder& b, SReg r, SReg splits) {
  static_assert(kReduceWaves == 8 && kReduceSumChunk == 16, "the shifts below");
  b.s_add_u32(r, splits, Imm(kReduceWaves - 1));
  b.s_lshr_b32(r, r, Imm(3));
  b.s_add_u32(r, r, Imm(kReduceSumChunk - 1));
  b.s_and_b32(r, r, Imm(int64_t(~uint32_t(kReduceSumChunk - 1))));
}

namespace {

namespace A = mla_reduce_args;
namespace E = abi::reduce_entry;

// LDS of the reduce kernel, in bytes: per wave 64 f32 handed from lanes to every lane (bcast);
// the waves' maxima; the launch entry (wave 0 reads it from memory, the others from here, so a
// row's bytes are one wave's); the ranges' sums (8 f32 and a weight sum per lane) for wave 0.
struct ReduceLds {
  static constexpr uint32_t bcast = 0, max_slots = bcast + kReduceWaves * 256, entry = max_slots + 4 * kReduceWaves;
  static constexpr uint32_t acc = entry + 48, wsum = acc + kReduceWaves * 2048, bytes = wsum + kReduceWaves * 256;
  static_assert(acc % 16 == 0 && entry % 16 == 0 && max_slots % 16 == 0, "ds_*_b128 alignment");
};

// Every decision of the reduce kernel, a value computed from the spec before any instruction is
// emitted; the emitter below only executes it. The split ranges, chunk sizes and LDS layout are
// the same for every shape (mla_reduce.h, ReduceLds); what a spec changes is here.
struct ReducePlan {
  int heads = 0;             // request row r's final row is qo_row * heads + r
  int rows = 0;              // M = heads * qseqlen rows per partial slot
  bool return_lse = false;   // the merged lse is stored too
  uint32_t workgroup_size = 64 * kReduceWaves;
  uint32_t lds_bytes = ReduceLds::bytes;
  int lse_slot_bytes() const { return rows * 4; }  // one slot's lse, an f32 per row
};

ReducePlan reduce_plan(const KernelSpec& s) {
  ReducePlan p;
  p.heads = s.heads;
  p.rows = s.heads * s.qseqlen;
  p.return_lse = s.return_lse;
  return p;
}

// The kernel arguments and launch facts, before the builder reads them.
Program& declare_abi(Program& p, const KernelSpec& s, const ReducePlan& pl) {
  declare_kernargs(p, abi::kReduceArgs, s);
  p.abi.max_workgroup_size = pl.workgroup_size;
  p.abi.lds_bytes = pl.lds_bytes;
  p.abi.workgroup_id_y = true;
  return p;
}

// The reduce kernel's emitter: one method per phase, in program order (emit()). Register
// allocation order is emission order, so the phases run in the order emit() calls them.
class Reduce {
 public:
  Reduce(Program& p, const KernelSpec& s) : pl(reduce_plan(s)), b(declare_abi(p, s, pl)), ra(b.regs()) {}

  void emit() {
    arguments();
    fetch_entry();
    wave_range();
    addresses();
    lse_max();
    weighted_sum();
    combine_ranges();
    store();
  }

 private:
  SReg ptr(uint32_t off) const { return args.sub(int(off / 4), 2); }
  // The workgroup's abi::ReduceEntry, one SGPR per field, and its row of the request.
  SReg qo_row() const { return entry[E::qo_row]; }
  SReg first() const { return entry[E::first_partial]; }
  SReg splits() const { return entry[E::num_splits]; }
  SReg stride() const { return entry[E::partial_stride]; }
  SReg bf16_splits() const { return entry[E::bf16_splits]; }
  SReg row() const { return b.workgroup_id(1); }

  // Kernel arguments; the wave and the lane.
  void arguments() {
    args = ra.sgpr(10, "kernargs");
    b.s_load_dwordx8(args.sub(0, 8), b.kernarg_ptr(), 0);
    b.s_load_dwordx2(args.sub(8, 2), b.kernarg_ptr(), 32);
    lane = ra.vgpr(1, "lane"), t0 = ra.vgpr(1, "t0"), t1 = ra.vgpr(1, "t1");
    wave = ra.sgpr(1, "wave"), saved = ra.sgpr(2, "saved_exec");
    b.v_lshrrev_b32(t0, Imm(6), b.workitem_ids());
    b.v_readfirstlane_b32(wave, t0);
    b.v_and_b32(lane, Imm(63), b.workitem_ids());
  }

  // The workgroup's entry, in SGPRs of every wave (wave 0 fetches it, entry_to_lds); the
  // workgroup ends here when the step has no entry for it.
  void fetch_entry() {
    zero = ra.vgpr(1, "zero");
    VReg ent = ra.vgpr(12, "entry_lds", 4);
    b.v_mov_b32(zero, Imm(0));
    entry = ra.sgpr(8, "entry", 4), has = ra.sgpr(1, "has_entry");
    entry_to_lds(ent);
    b.s_barrier();
    b.ds_read_b128(ent.sub(0, 4), zero, ReduceLds::entry);
    b.ds_read_b128(ent.sub(4, 4), zero, ReduceLds::entry + 16);
    b.ds_read_b32(ent[8], zero, ReduceLds::entry + 32);
    for (int i = 0; i < 8; ++i) b.v_readfirstlane_b32(entry[i], ent[i]);
    b.v_readfirstlane_b32(has, ent[8]);
    ra.release(ent);
    Label has_entry = b.new_label("has_entry");
    b.s_cmp_eq_u32(has, Imm(1));
    b.s_cbranch_scc1(has_entry);
    b.s_endpgm();  // every wave of the workgroup, past its only barrier
    b.bind(has_entry);
  }

  // Wave 0: the launch's header (abi::LaunchHeader; the grid's x is the plan's capacity,
  // workgroups past this step's entry count exit) and this workgroup's entry, into LDS.
  void entry_to_lds(VReg ent) {
    Label not_first = b.new_label("not_wave0"), no_entry = b.new_label("no_entry");
    b.s_cmp_lg_u32(wave, Imm(0));
    b.s_cbranch_scc1(not_first);
    SReg header = ra.sgpr(2, "launch_header", 2), eaddr = ra.sgpr(2, "entry_addr");
    b.s_load_dwordx2(header, ptr(A::reduce_map), 0);
    b.s_mov_b32(has, Imm(0));
    b.s_cmp_lt_u32(b.workgroup_id(0), header[abi::launch_header::count]);
    b.s_cbranch_scc0(no_entry);
    b.s_mov_b32(has, Imm(1));
    b.s_lshl_b32(eaddr[0], b.workgroup_id(0), Imm(5));
    b.s_add_u32(eaddr[0], header[abi::launch_header::entries_offset], eaddr[0]);
    b.s_add_u32(eaddr[0], ptr(A::reduce_map)[0], eaddr[0]);
    b.s_addc_u32(eaddr[1], ptr(A::reduce_map)[1], Imm(0));
    static_assert(abi::reduce_entry::dwords == 8, "the reduce kernel loads a ReduceEntry as 8 dwords");
    b.s_load_dwordx8(entry, eaddr, 0);
    for (int i = 0; i < 8; ++i) b.v_mov_b32(ent[i], entry[i]);
    b.bind(no_entry);
    b.v_mov_b32(ent[8], has);
    b.s_mov_b64(saved, exec);
    b.s_mov_exec(Imm(1));
    b.ds_write_b128(zero, ent.sub(0, 4), ReduceLds::entry);
    b.ds_write_b128(zero, ent.sub(4, 4), ReduceLds::entry + 16);
    b.ds_write_b32(zero, ent[8], ReduceLds::entry + 32);
    b.s_mov_exec(saved);
    ra.release(header), ra.release(eaddr);
    b.bind(not_first);
  }

  // This wave's splits: [lo, hi) = [wave R, min((wave + 1) R, S)), empty past S.
  void wave_range() {
    range = ra.sgpr(1, "range"), lo = ra.sgpr(1, "range_lo"), hi = ra.sgpr(1, "range_hi");
    emit_reduce_range_splits(b, range, splits());
    b.s_mul_i32(lo, wave, range);
    b.s_min_u32(lo, lo, splits());
    b.s_add_u32(hi, lo, range);
    b.s_min_u32(hi, hi, splits());
  }

  void addresses() {
    // Lane l owns columns 8l .. 8l+7 of the row and carries split c + l of a chunk's lse; this
    // wave's 64 LDS words hand a chunk's values from lanes to every lane.
    lds_base = ra.vgpr(1, "lds_base"), lds_lane = ra.vgpr(1, "lds_lane");
    t = ra.sgpr(2, "t");
    b.s_lshl_b32(t[0], wave, Imm(8));
    b.v_mov_b32(lds_base, t[0]);
    b.v_lshlrev_b32(lds_lane, Imm(2), lane);
    b.v_add_u32(lds_lane, t[0], lds_lane);

    // Split k's slot is first + k * stride: its lse at partial_lse + ((first + k stride) M + row) 4,
    // its o row at partial_o + the same index * 2048 (a bf16 row in its first 1024 bytes).
    base = ra.sgpr(2, "base"), lrsrc = ra.sgpr(4, "lse_rsrc"), prsrc = ra.sgpr(4, "part_rsrc");
    lse_step = ra.sgpr(1, "lse_step"), o_step = ra.sgpr(1, "o_step");
    b.s_mul_i32(lse_step, stride(), Imm(pl.lse_slot_bytes()));
    b.s_lshl_b32(o_step, lse_step, Imm(9));
    b.s_mul_i32(t[0], first(), Imm(pl.rows));
    b.s_add_u32(t[0], t[0], row());  // index of split 0's row
    b.s_lshl_b32(t[1], t[0], Imm(2));
    b.s_add_u32(base[0], ptr(A::partial_lse)[0], t[1]);
    b.s_addc_u32(base[1], ptr(A::partial_lse)[1], Imm(0));
    b.make_buffer_resource(lrsrc, base, Imm(int64_t(0xffffffffu)));  // every lane's load is masked to a real split
    b.s_lshl_b32(t[1], t[0], Imm(11));
    b.s_lshr_b32(t[0], t[0], Imm(21));
    b.s_add_u32(base[0], ptr(A::partial_o)[0], t[1]);
    b.s_addc_u32(base[1], ptr(A::partial_o)[1], t[0]);
    b.make_buffer_resource(prsrc, base, Imm(int64_t(0xffffffffu)));

    // The chunk loops' registers (load_lse_chunk, the broadcast, a chunk's partial rows).
    n = ra.sgpr(1, "chunk_n"), k = ra.sgpr(1, "split"), soff = ra.sgpr(1, "soffset");
    lse_v = ra.vgpr(1, "lse_chunk");
    data = ra.vgpr(8 * kReduceSumChunk, "partials", 4), wts = ra.vgpr(kReduceSumChunk, "lane_values", 4);
  }

  // lse of splits c + l for lanes l < n = min(size, end - c) (others -inf), one load: lse_v.
  void load_lse_chunk(SReg c, SReg end, int size) {
    b.s_sub_u32(n, end, c);
    b.s_min_u32(n, n, Imm(size));
    b.v_mov_b32(lse_v, Imm(int64_t(0xff800000u)));
    b.v_add_u32(t0, c, lane);
    b.v_mul_lo_u32(t0, t0, lse_step);
    b.v_cmp_gt_u32(vcc, n, lane);
    b.s_and_saveexec_b64(saved, vcc);
    b.buffer_load_dword(lse_v, t0, lrsrc, Imm(0));
    b.s_mov_exec(saved);
  }

  // Every lane gets lanes from .. from+15's values of v (written by broadcast_write) in wts.
  void broadcast_write(VReg v) { b.ds_write_b32(lds_lane, v); }
  void broadcast_read(int from) {
    for (int q = 0; q < kReduceSumChunk / 4; ++q) b.ds_read_b128(wts.sub(4 * q, 4), lds_base, uint32_t(4 * from + 16 * q));
  }

  // lse* = max_k lse_k (exact: the order of the maxima does not matter): this wave's range, then
  // the waves' maxima through LDS. A request with no KV (num_splits 0) merges nothing: lse* stays
  // -inf, the sums 0.
  void lse_max() {
    vmax = ra.vgpr(1, "lse_max");
    b.v_mov_b32(vmax, Imm(int64_t(0xff800000u)));
    Label max_done = b.new_label("max_done");
    VReg lane_max = ra.vgpr(1, "lane_max");
    b.v_mov_b32(lane_max, Imm(int64_t(0xff800000u)));
    b.s_mov_b32(k, lo);
    b.s_cmp_ge_u32(k, hi);
    b.s_cbranch_scc1(max_done);
    Label loop = b.new_label("max_loop");
    b.bind(loop);
    load_lse_chunk(k, hi, kReduceLseChunk);
    b.v_max_f32(lane_max, lse_v, lane_max);
    b.s_add_u32(k, k, Imm(kReduceLseChunk));
    b.s_cmp_lt_u32(k, hi);
    b.s_cbranch_scc1(loop);
    b.bind(max_done);
    broadcast_write(lane_max);
    for (int from = 0; from < 64; from += kReduceSumChunk) {
      broadcast_read(from);
      for (int j = 0; j < kReduceSumChunk; j += 2) b.v_max3_f32(vmax, wts[j], wts[j + 1], vmax);
    }
    b.s_mov_b64(saved, exec);
    b.s_mov_exec(Imm(1));
    b.s_lshl_b32(t[0], wave, Imm(2));
    b.v_mov_b32(t0, t[0]);
    b.ds_write_b32(t0, vmax, ReduceLds::max_slots);
    b.s_mov_exec(saved);
    b.s_barrier();
    static_assert(kReduceWaves == 8, "two ds_read_b128 of the waves' maxima");
    b.ds_read_b128(wts.sub(0, 4), zero, ReduceLds::max_slots);
    b.ds_read_b128(wts.sub(4, 4), zero, ReduceLds::max_slots + 16);
    for (int j = 0; j < kReduceWaves; j += 2) b.v_max3_f32(vmax, wts[j], wts[j + 1], vmax);
    emit_weight_max(b, vmax);
    ra.release(lane_max);
  }

  // This range's weighted sum in split order, a chunk of up to 16 splits' loads in flight: its
  // bf16 splits [lo, min(bf16_splits, hi)), then its f32 splits [max(lo, bf16_splits), hi).
  void weighted_sum() {
    acc = ra.vgpr(8, "acc", 4), wsum = ra.vgpr(1, "weight_sum");
    off32 = ra.vgpr(1, "col_offset"), off16 = ra.vgpr(1, "col_offset_bf16");
    b.v_lshlrev_b32(off32, Imm(5), lane);  // 8 f32 per lane
    b.v_lshlrev_b32(off16, Imm(4), lane);  // 8 bf16 per lane
    for (int i = 0; i < 8; ++i) b.v_mov_b32(acc[i], Imm(0));
    b.v_mov_b32(wsum, Imm(0));
    SReg end = ra.sgpr(1, "bf16_end");
    b.s_mov_b32(k, lo);
    b.s_min_u32(end, bf16_splits(), hi);
    sum_splits(true, end);
    b.s_cmp_gt_u32(bf16_splits(), k);  // k = max(k, bf16_splits)
    b.s_cselect_b32(k, bf16_splits(), k);
    sum_splits(false, hi);
    ra.release(end);
  }

  // Splits k .. end - 1 of one kind (bf16 or f32 partials) into acc and wsum, chunk by chunk.
  void sum_splits(bool bf16, SReg end) {
    const std::string kind = bf16 ? "_bf16" : "";
    Label loop = b.new_label("sum_loop" + kind), skip = b.new_label("sum_done" + kind);
    b.s_cmp_ge_u32(k, end);  // none of this kind in the range
    b.s_cbranch_scc1(skip);
    b.bind(loop);
    load_lse_chunk(k, end, kReduceSumChunk);
    b.s_mul_i32(soff, k, o_step);
    Label loaded = b.new_label("chunk_loaded" + kind), summed = b.new_label("chunk_summed" + kind);
    load_partials(bf16, loaded);
    // The weights w_k = exp(lse_k - lse*), lane l computing split k + l's (emit_split_weight's
    // arithmetic, so the in-launch merge's sums are the same bit for bit).
    b.v_sub_f32(t1, lse_v, vmax);
    b.v_mul_f32(t1, FImm{kLog2e}, t1);
    b.v_exp_f32(t1, t1);
    broadcast_write(t1);
    broadcast_read(0);
    add_partials(bf16, summed);
    b.s_add_u32(k, k, n);
    b.s_cmp_lt_u32(k, end);
    b.s_cbranch_scc1(loop);
    b.bind(skip);
  }

  // The chunk's n partial rows (the lane's 8 columns), every load in flight; binds `loaded`.
  void load_partials(bool bf16, Label loaded) {
    for (int j = 0; j < kReduceSumChunk; ++j) {
      if (j) {
        b.s_cmp_le_u32(n, Imm(j));
        b.s_cbranch_scc1(loaded);
        b.s_add_u32(soff, soff, o_step);
      }
      VReg part = data.sub(8 * j, 8);
      // bf16 -> f32 is exact: the bf16 bits are the f32's high half (widened in add_partials).
      if (bf16) {
        b.buffer_load_dwordx4(part.sub(4, 4), off16, prsrc, soff);
      } else {
        b.buffer_load_dwordx4(part.sub(0, 4), off32, prsrc, soff);
        b.buffer_load_dwordx4(part.sub(4, 4), off32, prsrc, soff, 16);
      }
    }
    b.bind(loaded);
  }

  // acc += w_j o_j and wsum += w_j over the chunk's n splits in split order; binds `summed`.
  void add_partials(bool bf16, Label summed) {
    for (int j = 0; j < kReduceSumChunk; ++j) {
      if (j) {
        b.s_cmp_le_u32(n, Imm(j));
        b.s_cbranch_scc1(summed);
      }
      VReg part = data.sub(8 * j, 8);
      if (bf16) {
        for (int i = 0; i < 4; ++i) {
          b.v_lshlrev_b32(part[2 * i], Imm(16), part[4 + i]);
          b.v_and_b32(part[2 * i + 1], Imm(int64_t(0xffff0000u)), part[4 + i]);
        }
      }
      b.v_add_f32(wsum, wsum, wts[j]);
      for (int i = 0; i < 8; ++i) b.v_fma_f32(acc[i], wts[j], part[i], acc[i]);
    }
    b.bind(summed);
  }

  // Waves 1..7 hand their range's sums to wave 0 and end; wave 0 adds the non-empty ranges'
  // sums to its own in range order (a range is non-empty iff w R < S).
  void combine_ranges() {
    VReg off = ra.vgpr(1, "sum_offset");
    b.s_lshl_b32(t[0], wave, Imm(11));
    b.v_lshlrev_b32(off, Imm(5), lane);
    b.v_add_u32(off, t[0], off);
    Label wave0 = b.new_label("combine");
    b.s_cmp_eq_u32(wave, Imm(0));
    b.s_cbranch_scc1(wave0);
    b.ds_write_b128(off, acc.sub(0, 4), ReduceLds::acc);
    b.ds_write_b128(off, acc.sub(4, 4), ReduceLds::acc + 16);
    b.ds_write_b32(lds_lane, wsum, ReduceLds::wsum);  // lds_lane = wave 256 + lane 4
    b.s_barrier();
    b.s_endpgm();
    b.bind(wave0);
    b.s_barrier();
    Label combined = b.new_label("combined");
    for (int w = 1; w < kReduceWaves; ++w) {
      b.s_mul_i32(t[0], range, Imm(w));
      b.s_cmp_ge_u32(t[0], splits());
      b.s_cbranch_scc1(combined);
      b.ds_read_b128(data.sub(0, 4), off, ReduceLds::acc + 2048 * w);
      b.ds_read_b128(data.sub(4, 4), off, ReduceLds::acc + 2048 * w + 16);
      b.ds_read_b32(data[8], lds_lane, ReduceLds::wsum + 256 * w);
      for (int i = 0; i < 8; ++i) b.v_add_f32(acc[i], acc[i], data[i]);
      b.v_add_f32(wsum, wsum, data[8]);
    }
    b.bind(combined);
    ra.release(off);
  }

  // o = acc / wsum as bf16 (round to nearest even), lse = lse* + ln(wsum).
  void store() {
    VReg inv = ra.vgpr(1, "inv"), packed = ra.vgpr(4, "packed", 4);
    emit_safe_inverse(b, inv, wsum);
    for (int i = 0; i < 8; ++i) b.v_mul_f32(acc[i], acc[i], inv);
    SReg k7fff = ra.sgpr(1, "k_7fff"), kperm = ra.sgpr(1, "k_perm_hi16");
    b.s_mov_b32(k7fff, Imm(0x7fff));
    b.s_mov_b32(kperm, Imm(0x07060302));
    for (int i = 0; i < 4; ++i) emit_pack_bf16_rne(b, packed[i], acc[2 * i], acc[2 * i + 1], t0, t1, k7fff, kperm);
    // Final row = qo_row * heads + row.
    b.s_mul_i32(t[0], qo_row(), Imm(pl.heads));
    b.s_add_u32(t[0], t[0], row());
    b.s_lshl_b32(t[1], t[0], Imm(10));  // * 512 * 2 bytes
    b.s_add_u32(base[0], ptr(A::o)[0], t[1]);
    b.s_addc_u32(base[1], ptr(A::o)[1], Imm(0));
    b.make_buffer_resource(prsrc, base, Imm(kMlaVDim * 2));
    b.buffer_store_dwordx4(packed, off16, prsrc, Imm(0));
    if (pl.return_lse) store_lse();
    b.s_endpgm();
  }

  // lse = lse* + ln(wsum) at lse + final row * 4 (t[0] holds the final row).
  void store_lse() {
    b.v_log_f32(t0, wsum);
    b.v_mul_f32(t0, FImm{kLn2}, t0);
    b.v_add_f32(t0, vmax, t0);
    b.s_lshl_b32(t[1], t[0], Imm(2));
    b.s_add_u32(base[0], ptr(A::lse)[0], t[1]);
    b.s_addc_u32(base[1], ptr(A::lse)[1], Imm(0));
    b.make_buffer_resource(prsrc, base, Imm(4));  // only lane 0's offset 0 is in range
    b.v_lshlrev_b32(t1, Imm(2), lane);
    b.buffer_store_dword(t0, t1, prsrc, Imm(0));
  }

  const ReducePlan pl;
  Builder b;
  RegAllocator& ra;
  SReg args, wave, saved, entry, has;           // arguments, fetch_entry
  SReg range, lo, hi;                           // wave_range
  SReg t, base, lrsrc, prsrc, lse_step, o_step;  // addresses
  SReg n, k, soff;                              // addresses: the chunk loops'
  VReg lane, t0, t1, zero, lds_base, lds_lane;
  VReg lse_v, data, wts, vmax, acc, wsum, off32, off16;
};

}  // namespace

void build_mla_reduce(Program& p, const KernelSpec& s) { Reduce(p, s).emit(); }

}  // namespace mla::gen

namespace mla::gen {

void emit_partial_merge_block(Builder& b, const KernelSpec& s, const PartialMergeBlock& a) {
  auto& ra = b.regs();
  const int M = s.heads * s.qseqlen;
  if (a.scratch.count < kMergeBlockVgprs || a.scratch.first % 4)
    throw std::logic_error(fmt::format("merge block: scratch v[{}:{}] (need {} VGPRs, the first 4-aligned)",
                                       a.scratch.first, a.scratch.first + a.scratch.count - 1, kMergeBlockVgprs));
  VReg data = a.scratch.sub(0, 32), acc = a.scratch.sub(32, 32);
  VReg vmax = a.scratch[64], wsum = a.scratch[65], w = a.scratch[66], lse_k = a.scratch[67];
  VReg lse_off = a.scratch[68], part_off = a.scratch[69], t0 = a.scratch[70], t1 = a.scratch[71];
  VReg packed = a.scratch.sub(72, 4), racc = a.scratch.sub(76, 32), rwsum = a.scratch[108];
  SReg k = ra.sgpr(1, "mb_split"), slot = ra.sgpr(1, "mb_slot"), t = ra.sgpr(2, "mb_t");
  SReg range = ra.sgpr(1, "mb_range"), rend = ra.sgpr(1, "mb_range_end");
  SReg lrsrc = ra.sgpr(4, "mb_lse_rsrc"), prsrc = ra.sgpr(4, "mb_part_rsrc"), base = ra.sgpr(2, "mb_base");
  SReg k7fff = ra.sgpr(1, "mb_7fff"), kperm = ra.sgpr(1, "mb_perm_hi16");
  // The lane's row of the request (rows >= M: every load and store out of its resource's range).
  b.v_lshrrev_b32(t0, Imm(2), a.lane);
  b.v_add_u32(t0, a.srow, t0);
  b.v_lshlrev_b32(lse_off, Imm(2), t0);              // row * 4 in a slot's lse
  b.v_lshlrev_b32(part_off, Imm(11), t0);            // row * 2048 in a slot's o
  b.v_and_b32(t1, Imm(3), a.lane);
  b.v_lshlrev_b32(t1, Imm(a.bf16 ? 6 : 7), t1);      // + 32 (l % 4) columns * 4 (bf16: 2) bytes
  b.v_add_u32(part_off, part_off, t1);
  // Split k's slot and its resources: lse at partial_lse + slot * M * 4, o at partial_o + slot * M * 2048.
  auto split_resources = [&] {
    b.s_mul_i32(slot, k, a.stride);
    b.s_add_u32(slot, a.first, slot);
    b.s_mul_i32(t[0], slot, Imm(M * 4));
    b.s_add_u32(base[0], a.partial_lse[0], t[0]);
    b.s_addc_u32(base[1], a.partial_lse[1], Imm(0));
    b.make_buffer_resource(lrsrc, base, Imm(M * 4));
    b.s_mul_i32(t[0], slot, Imm(M * kMlaVDim * 4));
    b.s_mul_hi_u32(t[1], slot, Imm(M * kMlaVDim * 4));
    b.s_add_u32(base[0], a.partial_o[0], t[0]);
    b.s_addc_u32(base[1], a.partial_o[1], t[1]);
    b.make_buffer_resource(prsrc, base, Imm(M * kMlaVDim * 4));
  };
  // lse* = max_k lse_k per row.
  b.v_mov_b32(vmax, Imm(int64_t(0xff800000u)));
  b.s_mov_b32(k, Imm(0));
  Label max_loop = b.new_label("mb_max_loop");
  b.bind(max_loop);
  split_resources();
  b.buffer_load_dword(lse_k, lse_off, lrsrc, Imm(0));
  b.v_max_f32(vmax, lse_k, vmax);
  b.s_add_u32(k, k, Imm(1));
  b.s_cmp_lt_u32(k, a.splits);
  b.s_cbranch_scc1(max_loop);
  emit_weight_max(b, vmax);
  b.s_mov_b32(k7fff, Imm(0x7fff));
  b.s_mov_b32(kperm, Imm(0x07060302));
  emit_reduce_range_splits(b, range, a.splits);
  for (int pass = 0; pass < 4; ++pass) {
    // Columns 128 pass + 32 (l % 4) .. + 31: acc = sum_k w_k o_k, wsum = sum_k w_k, in the
    // reduce kernel's order: each range of reduce_range_splits(S) splits in split order, the
    // ranges' sums added in range order.
    auto sum_range = [&](VReg sum, VReg weights) {  // splits k .. rend - 1 (at least one)
      Label loop = b.new_label("mb_sum_loop");
      b.bind(loop);
      split_resources();
      b.buffer_load_dword(lse_k, lse_off, lrsrc, Imm(0));
      if (a.bf16) {  // 32 bf16 into data[16..31], widened in place to data[0..31] (exact)
        for (int j = 0; j < 4; ++j)
          b.buffer_load_dwordx4(data.sub(16 + 4 * j, 4), part_off, prsrc, Imm(0), uint32_t(256 * pass + 16 * j));
        for (int i = 0; i < 16; ++i) {
          b.v_lshlrev_b32(data[2 * i], Imm(16), data[16 + i]);
          b.v_and_b32(data[2 * i + 1], Imm(int64_t(0xffff0000u)), data[16 + i]);
        }
      } else {
        for (int j = 0; j < 8; ++j)
          b.buffer_load_dwordx4(data.sub(4 * j, 4), part_off, prsrc, Imm(0), uint32_t(512 * pass + 16 * j));
      }
      emit_split_weight(b, w, weights, lse_k, vmax);
      for (int i = 0; i < 32; ++i) b.v_fma_f32(sum[i], w, data[i], sum[i]);
      b.s_add_u32(k, k, Imm(1));
      b.s_cmp_lt_u32(k, rend);
      b.s_cbranch_scc1(loop);
    };
    for (int i = 0; i < 32; ++i) b.v_mov_b32(acc[i], Imm(0));
    b.v_mov_b32(wsum, Imm(0));
    b.s_mov_b32(k, Imm(0));
    b.s_min_u32(rend, range, a.splits);
    sum_range(acc, wsum);
    Label next = b.new_label("mb_next_range"), ranges_done = b.new_label("mb_ranges_done");
    b.bind(next);
    b.s_cmp_ge_u32(k, a.splits);
    b.s_cbranch_scc1(ranges_done);
    for (int i = 0; i < 32; ++i) b.v_mov_b32(racc[i], Imm(0));
    b.v_mov_b32(rwsum, Imm(0));
    b.s_add_u32(rend, k, range);
    b.s_min_u32(rend, rend, a.splits);
    sum_range(racc, rwsum);
    for (int i = 0; i < 32; ++i) b.v_add_f32(acc[i], acc[i], racc[i]);
    b.v_add_f32(wsum, wsum, rwsum);
    b.s_branch(next);
    b.bind(ranges_done);
    // o = acc / wsum as bf16 (round to nearest even) at o + (qo_row * heads + row) * 1024.
    emit_safe_inverse(b, w, wsum);
    for (int i = 0; i < 32; ++i) b.v_mul_f32(acc[i], acc[i], w);
    b.s_mul_i32(t[0], a.qo_row, Imm(s.heads * kMlaVDim * 2));
    b.s_add_u32(base[0], a.o[0], t[0]);
    b.s_addc_u32(base[1], a.o[1], Imm(0));
    b.make_buffer_resource(prsrc, base, Imm(M * kMlaVDim * 2));
    if (a.bf16) {  // the bf16 row: row * 1024 + the same column bytes
      b.v_lshrrev_b32(t0, Imm(11), part_off);
      b.v_lshlrev_b32(t0, Imm(10), t0);
      b.v_sub_u32(t0, part_off, t0);
    } else {
      b.v_lshrrev_b32(t0, Imm(1), part_off);  // the bf16 row: half the f32 offset
    }
    for (int q = 0; q < 4; ++q) {
      for (int i = 0; i < 4; ++i) {
        emit_pack_bf16_rne(b, packed[i], acc[8 * q + 2 * i], acc[8 * q + 2 * i + 1], t1, w, k7fff, kperm);
      }
      b.buffer_store_dwordx4(packed, t0, prsrc, Imm(0), uint32_t(256 * pass + 16 * q));
    }
    if (pass == 3 && s.return_lse) {
      // lse = lse* + ln(wsum): lanes with l % 4 == 0, at lse + (qo_row * heads + row) * 4.
      b.v_log_f32(t1, wsum);
      b.v_mul_f32(t1, FImm{kLn2}, t1);
      b.v_add_f32(t1, vmax, t1);
      b.s_mul_i32(t[0], a.qo_row, Imm(s.heads * 4));
      b.s_add_u32(base[0], a.lse[0], t[0]);
      b.s_addc_u32(base[1], a.lse[1], Imm(0));
      b.make_buffer_resource(prsrc, base, Imm(M * 4));
      SReg saved = ra.sgpr(2, "mb_exec");
      b.v_and_b32(t0, Imm(3), a.lane);
      b.v_cmp_eq_u32(vcc, Imm(0), t0);
      b.s_and_saveexec_b64(saved, vcc);
      b.buffer_store_dword(t1, lse_off, prsrc, Imm(0));
      b.s_mov_exec(saved);
      ra.release(saved);
    }
  }
  for (SReg r : {k, slot, t, range, rend, lrsrc, prsrc, base, k7fff, kperm}) ra.release(r);
}

}  // namespace mla::gen
