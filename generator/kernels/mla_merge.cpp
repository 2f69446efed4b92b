// merge_attn_states (vLLM's names, abi::merge_args): the (o, lse) of the same rows over two
// disjoint KV ranges merged into the attention over both, the step decode context parallelism
// takes after the engine gathers each rank's (o, lse). Per row (one wave per workgroup, lane l
// owns columns 8l .. 8l+7, as the reduce kernel):
//   m = max(lse_p, lse_s);  w_p = exp(lse_p - m), w_s = exp(lse_s - m);
//   o = (w_p o_p + w_s o_s) / (w_p + w_s);  lse = m + ln(w_p + w_s).
// A row whose two lse are -inf (no token on either side) gets o = 0 and lse = -inf.
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

void build_mla_merge(Program& p) {
  namespace A = abi::merge_args;
  auto& abi = p.abi;
  KernelSpec none;
  declare_kernargs(p, abi::kMergeArgs, none);
  abi.max_workgroup_size = 64;

  Builder b(p);
  auto& ra = b.regs();
  SReg args = ra.sgpr(14, "kernargs");
  b.s_load_dwordx8(args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx4(args.sub(8, 4), b.kernarg_ptr(), 32);
  b.s_load_dwordx2(args.sub(12, 2), b.kernarg_ptr(), 48);
  auto ptr = [&](uint32_t off) { return args.sub(int(off / 4), 2); };
  SReg row = b.workgroup_id(0);

  // The two lse of the row, through scalar pointers.
  SReg t = ra.sgpr(2, "t"), lp_ptr = ra.sgpr(2, "prefix_lse_ptr"), ls_ptr = ra.sgpr(2, "suffix_lse_ptr");
  SReg lp = ra.sgpr(1, "prefix_lse"), ls = ra.sgpr(1, "suffix_lse");
  b.s_lshl_b32(t[0], row, Imm(2));
  b.s_add_u32(lp_ptr[0], ptr(A::prefix_lse)[0], t[0]);
  b.s_addc_u32(lp_ptr[1], ptr(A::prefix_lse)[1], Imm(0));
  b.s_add_u32(ls_ptr[0], ptr(A::suffix_lse)[0], t[0]);
  b.s_addc_u32(ls_ptr[1], ptr(A::suffix_lse)[1], Imm(0));
  b.s_load_dword(lp, lp_ptr, 0);
  b.s_load_dword(ls, ls_ptr, 0);

  // Row bases (512 bf16 = 1024 bytes per row) and the lane's 16 bytes of each input.
  SReg rsrc_p = ra.sgpr(4, "rsrc_prefix"), rsrc_s = ra.sgpr(4, "rsrc_suffix"), base = ra.sgpr(2, "base");
  VReg col = ra.vgpr(1, "col_offset");
  b.v_lshlrev_b32(col, Imm(4), b.workitem_ids());
  b.s_lshl_b32(t[0], row, Imm(10));
  b.s_lshr_b32(t[1], row, Imm(22));
  auto row_resource = [&](SReg rsrc, uint32_t off) {
    b.s_add_u32(base[0], ptr(off)[0], t[0]);
    b.s_addc_u32(base[1], ptr(off)[1], t[1]);
    b.make_buffer_resource(rsrc, base, Imm(kMlaVDim * 2));
  };
  row_resource(rsrc_p, A::prefix_output);
  row_resource(rsrc_s, A::suffix_output);
  VReg po = ra.vgpr(4, "prefix_o", 4), so = ra.vgpr(4, "suffix_o", 4);
  b.buffer_load_dwordx4(po, col, rsrc_p, Imm(0));
  b.buffer_load_dwordx4(so, col, rsrc_s, Imm(0));

  // Weights: m clamped to -FLT_MAX so that two -inf give weights 0 (not NaN), then 1 / sum (0
  // for an empty row).
  VReg m = ra.vgpr(1, "max_lse"), wp = ra.vgpr(1, "w_prefix"), ws = ra.vgpr(1, "w_suffix"), wsum = ra.vgpr(1, "w_sum");
  VReg inv = ra.vgpr(1, "inv");
  b.v_mov_b32(m, ls);
  b.v_max_f32(m, lp, m);
  b.v_mov_b32(inv, Imm(int64_t(kNegFltMax)));
  b.v_max_f32(m, m, inv);
  b.v_sub_f32(wp, lp, m);
  b.v_mul_f32(wp, FImm{kLog2e}, wp);
  b.v_exp_f32(wp, wp);
  b.v_sub_f32(ws, ls, m);
  b.v_mul_f32(ws, FImm{kLog2e}, ws);
  b.v_exp_f32(ws, ws);
  b.v_add_f32(wsum, wp, ws);
  b.v_rcp_f32(inv, wsum);
  b.v_cmp_gt_f32(vcc, wsum, Imm(0));
  b.v_cndmask_b32(inv, Imm(0), inv, vcc);
  b.v_mul_f32(wp, wp, inv);
  b.v_mul_f32(ws, ws, inv);

  // o = w_p o_p + w_s o_s per column (bf16 widened exactly: its bits are an f32's high half),
  // rounded back to bf16 to nearest even.
  VReg lo = ra.vgpr(1, "lo"), hi = ra.vgpr(1, "hi"), x = ra.vgpr(1, "x"), packed = ra.vgpr(4, "packed", 4);
  VReg t0 = ra.vgpr(1, "t0"), t1 = ra.vgpr(1, "t1");
  SReg k7fff = ra.sgpr(1, "k_7fff"), kperm = ra.sgpr(1, "k_perm_hi16"), khi = ra.sgpr(1, "k_hi16");
  b.s_mov_b32(k7fff, Imm(0x7fff));
  b.s_mov_b32(kperm, Imm(0x07060302));
  b.s_mov_b32(khi, Imm(int64_t(0xffff0000u)));
  for (int i = 0; i < 4; ++i) {
    b.v_lshlrev_b32(lo, Imm(16), po[i]);
    b.v_lshlrev_b32(x, Imm(16), so[i]);
    b.v_mul_f32(lo, wp, lo);
    b.v_fma_f32(lo, ws, x, lo);
    b.v_and_b32(hi, khi, po[i]);
    b.v_and_b32(x, khi, so[i]);
    b.v_mul_f32(hi, wp, hi);
    b.v_fma_f32(hi, ws, x, hi);
    emit_pack_bf16_rne(b, packed[i], lo, hi, t0, t1, k7fff, kperm);
  }
  SReg rsrc_o = ra.sgpr(4, "rsrc_out");
  row_resource(rsrc_o, A::output);
  b.buffer_store_dwordx4(packed, col, rsrc_o, Imm(0));

  // lse = m + ln(sum), when output_lse is given (lane 0 only: the buffer holds one float).
  Label no_lse = b.new_label("no_lse");
  b.s_or_b32(t[0], ptr(A::output_lse)[0], ptr(A::output_lse)[1]);
  b.s_cmp_eq_u32(t[0], Imm(0));
  b.s_cbranch_scc1(no_lse);
  b.v_log_f32(x, wsum);
  b.v_mul_f32(x, FImm{kLn2}, x);
  b.v_add_f32(x, m, x);
  b.s_lshl_b32(t[0], row, Imm(2));
  b.s_add_u32(base[0], ptr(A::output_lse)[0], t[0]);
  b.s_addc_u32(base[1], ptr(A::output_lse)[1], Imm(0));
  b.make_buffer_resource(rsrc_o, base, Imm(4));
  b.v_lshlrev_b32(col, Imm(2), b.workitem_ids());
  b.buffer_store_dword(x, col, rsrc_o, Imm(0));
  b.bind(no_lse);
  b.s_endpgm();
}

}  // namespace mla::gen
