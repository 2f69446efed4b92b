// The MLA reduce kernel: merges the split partials of one request row into the final o.
//
// Grid (the plan's reduce capacity, M rows), one wave per workgroup; workgroup x merges entry x of
// the launch's table (abi::LaunchHeader) or exits when the step has fewer; lane l owns columns 8l .. 8l+7. An
// entry's partials are slots first + k * stride (abi::ReduceEntry); the first bf16_splits of them
// hold bf16 o (a prefix kernel's), widened exactly to f32, the rest f32. The splits are summed in
// order k = 0, 1, ... either way, so entries without bf16 partials sum exactly as before.
//   lse* = max_k lse_k;  w_k = exp(lse_k - lse*);  o = sum_k w_k o_k / sum_k w_k;
//   lse = lse* + ln(sum_k w_k).
// Partials are normalised within their split (decode wrote o_k = sum p v / sum p), so the
// weights are exactly the splits' shares of the softmax denominator.
#include <fmt/format.h>

#include "kernels/kernargs.h"
#include "kernels/mla_geometry.h"
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
}  // namespace

void build_mla_reduce(Program& p, const KernelSpec& s) {
  namespace A = mla_reduce_args;
  auto& abi = p.abi;
  declare_kernargs(p, abi::kReduceArgs, s);
  abi.max_workgroup_size = 64;
  abi.workgroup_id_y = true;
  const int M = s.heads * s.qseqlen;

  Builder b(p);
  auto& ra = b.regs();
  SReg args = ra.sgpr(10, "kernargs");
  b.s_load_dwordx8(args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx2(args.sub(8, 2), b.kernarg_ptr(), 32);
  auto ptr = [&](uint32_t off) { return args.sub(int(off / 4), 2); };
  static_assert(abi::reduce_entry::dwords == 8, "the reduce kernel loads a ReduceEntry as 8 dwords");
  // The launch's header (abi::LaunchHeader): the grid's x is the plan's capacity; workgroups past
  // this step's entry count exit at once.
  SReg header = ra.sgpr(2, "launch_header", 2);
  b.s_load_dwordx2(header, ptr(A::reduce_map), 0);
  Label has_entry = b.new_label("has_entry");
  b.s_cmp_lt_u32(b.workgroup_id(0), header[abi::launch_header::count]);
  b.s_cbranch_scc1(has_entry);
  b.s_endpgm();
  b.bind(has_entry);
  SReg eaddr = ra.sgpr(2, "entry_addr"), entry = ra.sgpr(8, "entry", 4);
  b.s_lshl_b32(eaddr[0], b.workgroup_id(0), Imm(5));
  b.s_add_u32(eaddr[0], header[abi::launch_header::entries_offset], eaddr[0]);
  b.s_add_u32(eaddr[0], ptr(A::reduce_map)[0], eaddr[0]);
  b.s_addc_u32(eaddr[1], ptr(A::reduce_map)[1], Imm(0));
  ra.release(header);
  b.s_load_dwordx8(entry, eaddr, 0);
  namespace E = abi::reduce_entry;
  SReg qo_row = entry[E::qo_row], first = entry[E::first_partial], splits = entry[E::num_splits],
       stride = entry[E::partial_stride], bf16_splits = entry[E::bf16_splits];
  SReg row = b.workgroup_id(1);

  // lse of split k at partial_lse + ((first + k * stride) * M + row) * 4, read through a scalar
  // pointer (stride 1, or a prefix group's request count: its members' slots interleave).
  SReg lse_ptr = ra.sgpr(2, "lse_ptr"), k = ra.sgpr(1, "split"), t = ra.sgpr(2, "t"), lse_k = ra.sgpr(1, "lse_k");
  auto lse_address = [&] {
    b.s_mul_i32(t[0], k, stride);
    b.s_add_u32(t[0], first, t[0]);
    b.s_mul_i32(t[0], t[0], Imm(M));
    b.s_add_u32(t[0], t[0], row);
    b.s_lshl_b32(t[0], t[0], Imm(2));
    b.s_add_u32(lse_ptr[0], ptr(A::partial_lse)[0], t[0]);
    b.s_addc_u32(lse_ptr[1], ptr(A::partial_lse)[1], Imm(0));
  };
  VReg vmax = ra.vgpr(1, "lse_max");
  b.v_mov_b32(vmax, Imm(int64_t(0xff800000u)));
  b.s_mov_b32(k, Imm(0));
  // A request with no KV (num_splits 0) merges nothing: lse* stays -inf, the sums 0.
  Label max_loop = b.new_label("max_loop"), max_done = b.new_label("max_done");
  b.s_cmp_eq_u32(splits, Imm(0));
  b.s_cbranch_scc1(max_done);
  b.bind(max_loop);
  lse_address();
  b.s_load_dword(lse_k, lse_ptr, 0);
  b.v_max_f32(vmax, lse_k, vmax);
  b.s_add_u32(k, k, Imm(1));
  b.s_cmp_lt_u32(k, splits);
  b.s_cbranch_scc1(max_loop);
  b.bind(max_done);

  // Weighted sum of the partial rows.
  SReg rsrc = ra.sgpr(4, "rsrc"), base = ra.sgpr(2, "base");
  VReg col_off = ra.vgpr(1, "col_offset"), w = ra.vgpr(1, "weight"), wsum = ra.vgpr(1, "weight_sum");
  VReg acc = ra.vgpr(8, "acc", 4), part = ra.vgpr(8, "partial", 4);
  b.v_lshlrev_b32(col_off, Imm(5), b.workitem_ids());  // 8 f32 per lane
  for (int i = 0; i < 8; ++i) b.v_mov_b32(acc[i], Imm(0));
  b.v_mov_b32(wsum, Imm(0));
  // Split k's row base: partial_o + ((first + k * stride) * M + row) * 2048 = lse offset * 512;
  // a bf16 row fills its first 1024 bytes (lane l's 8 columns at 16 l, 2 per dword, low first).
  VReg col_off16 = ra.vgpr(1, "col_offset_bf16");
  b.v_lshlrev_b32(col_off16, Imm(4), b.workitem_ids());
  auto sum_loop = [&](bool bf16, SReg end) {
    Label loop = b.new_label(bf16 ? "sum_loop_bf16" : "sum_loop"), skip = b.new_label(bf16 ? "sum_bf16_done" : "sum_done");
    b.s_cmp_ge_u32(k, end);  // none of this kind (a member with no unique part has no f32 split)
    b.s_cbranch_scc1(skip);
    b.bind(loop);
    lse_address();
    b.s_load_dword(lse_k, lse_ptr, 0);
    b.s_lshl_b32(t[0], t[0], Imm(9));
    b.s_add_u32(base[0], ptr(A::partial_o)[0], t[0]);
    b.s_addc_u32(base[1], ptr(A::partial_o)[1], Imm(0));
    b.make_buffer_resource(rsrc, base, Imm(kMlaVDim * 4));
    if (bf16) {
      // bf16 -> f32 is exact: the bf16 bits are the f32's high half.
      b.buffer_load_dwordx4(part.sub(4, 4), col_off16, rsrc, Imm(0));
      for (int i = 0; i < 4; ++i) {
        b.v_lshlrev_b32(part[2 * i], Imm(16), part[4 + i]);
        b.v_and_b32(part[2 * i + 1], Imm(int64_t(0xffff0000u)), part[4 + i]);
      }
    } else {
      b.buffer_load_dwordx4(part.sub(0, 4), col_off, rsrc, Imm(0));
      b.buffer_load_dwordx4(part.sub(4, 4), col_off, rsrc, Imm(0), 16);
    }
    b.v_sub_f32(w, lse_k, vmax);
    b.v_mul_f32(w, FImm{kLog2e}, w);
    b.v_exp_f32(w, w);
    b.v_add_f32(wsum, wsum, w);
    for (int i = 0; i < 8; ++i) b.v_fma_f32(acc[i], w, part[i], acc[i]);
    b.s_add_u32(k, k, Imm(1));
    b.s_cmp_lt_u32(k, end);
    b.s_cbranch_scc1(loop);
    b.bind(skip);
  };
  b.s_mov_b32(k, Imm(0));
  sum_loop(true, bf16_splits);
  sum_loop(false, splits);

  // o = acc / wsum as bf16 (round to nearest even), lse = lse* + ln(wsum).
  VReg inv = ra.vgpr(1, "inv"), packed = ra.vgpr(4, "packed", 4), t0 = ra.vgpr(1, "t0"), t1 = ra.vgpr(1, "t1");
  b.v_rcp_f32(inv, wsum);
  {  // No KV: o = 0 (not 0 * rcp(0) = NaN); lse = -inf + ln(0) = -inf.
    Label nonempty = b.new_label("nonempty");
    b.s_cmp_lg_u32(splits, Imm(0));
    b.s_cbranch_scc1(nonempty);
    b.v_mov_b32(inv, Imm(0));
    b.bind(nonempty);
  }
  for (int i = 0; i < 8; ++i) b.v_mul_f32(acc[i], acc[i], inv);
  SReg k7fff = ra.sgpr(1, "k_7fff"), kperm = ra.sgpr(1, "k_perm_hi16");
  b.s_mov_b32(k7fff, Imm(0x7fff));
  b.s_mov_b32(kperm, Imm(0x07060302));
  for (int i = 0; i < 4; ++i) {
    if (b.target().has_cvt_pk_bf16) {
      b.v_cvt_pk_bf16_f32(packed[i], acc[2 * i], acc[2 * i + 1]);
    } else {
      b.v_bfe_u32(t0, acc[2 * i], Imm(16), Imm(1));
      b.v_add3_u32(t0, acc[2 * i], k7fff, t0);
      b.v_bfe_u32(t1, acc[2 * i + 1], Imm(16), Imm(1));
      b.v_add3_u32(t1, acc[2 * i + 1], k7fff, t1);
      b.v_perm_b32(packed[i], t1, t0, kperm);
    }
  }
  // Final row = qo_row * heads + row.
  b.s_mul_i32(t[0], qo_row, Imm(s.heads));
  b.s_add_u32(t[0], t[0], row);
  b.s_lshl_b32(t[1], t[0], Imm(10));  // * 512 * 2 bytes
  b.s_add_u32(base[0], ptr(A::o)[0], t[1]);
  b.s_addc_u32(base[1], ptr(A::o)[1], Imm(0));
  b.make_buffer_resource(rsrc, base, Imm(kMlaVDim * 2));
  b.v_lshlrev_b32(col_off, Imm(4), b.workitem_ids());  // 8 bf16 per lane
  b.buffer_store_dwordx4(packed, col_off, rsrc, Imm(0));
  if (s.return_lse) {
    b.v_log_f32(t0, wsum);
    b.v_mul_f32(t0, FImm{kLn2}, t0);
    b.v_add_f32(t0, vmax, t0);
    b.s_lshl_b32(t[1], t[0], Imm(2));
    b.s_add_u32(base[0], ptr(A::lse)[0], t[1]);
    b.s_addc_u32(base[1], ptr(A::lse)[1], Imm(0));
    b.make_buffer_resource(rsrc, base, Imm(4));  // only lane 0's offset 0 is in range
    b.v_lshlrev_b32(col_off, Imm(2), b.workitem_ids());
    b.buffer_store_dword(t0, col_off, rsrc, Imm(0));
  }
  b.s_endpgm();
}

}  // namespace mla::gen
