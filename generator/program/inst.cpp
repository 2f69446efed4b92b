#include "program/inst.h"

#include <fmt/format.h>

#include <stdexcept>
#include <unordered_map>

namespace mla::gen {

namespace {

using C = OpClass;

// The opcodes the builders may emit. Adding one here is the only step needed to use it
// through Builder::emit; typed builder methods wrap the common ones.
const OpInfo kOps[] = {
    // Scalar ALU (SCC written where the ISA says so).
    {"s_mov_b32", C::Salu, 0},
    {"s_mov_b64", C::Salu, 0},
    {"s_movk_i32", C::Salu, 0},
    {"s_add_u32", C::Salu, kDefScc},
    {"s_addc_u32", C::Salu, kDefScc | kUseScc},
    {"s_add_i32", C::Salu, kDefScc},
    {"s_sub_u32", C::Salu, kDefScc},
    {"s_subb_u32", C::Salu, kDefScc | kUseScc},
    {"s_sub_i32", C::Salu, kDefScc},
    {"s_mul_i32", C::Salu, 0},
    {"s_mul_hi_u32", C::Salu, 0},
    {"s_lshl_b32", C::Salu, kDefScc},
    {"s_lshr_b32", C::Salu, kDefScc},
    {"s_ashr_i32", C::Salu, kDefScc},
    {"s_lshl_b64", C::Salu, kDefScc},
    {"s_and_b32", C::Salu, kDefScc},
    {"s_or_b32", C::Salu, kDefScc},
    {"s_xor_b32", C::Salu, kDefScc},
    {"s_and_b64", C::Salu, kDefScc},
    {"s_or_b64", C::Salu, kDefScc},
    {"s_andn2_b64", C::Salu, kDefScc},
    {"s_min_u32", C::Salu, kDefScc},
    {"s_max_u32", C::Salu, kDefScc},
    {"s_min_i32", C::Salu, kDefScc},
    {"s_max_i32", C::Salu, kDefScc},
    {"s_bfe_u32", C::Salu, kDefScc},
    {"s_cselect_b32", C::Salu, kUseScc},
    {"s_cselect_b64", C::Salu, kUseScc},
    {"s_cmp_eq_u32", C::Salu, kDefScc},
    {"s_cmp_lg_u32", C::Salu, kDefScc},
    {"s_cmp_lt_u32", C::Salu, kDefScc},
    {"s_cmp_le_u32", C::Salu, kDefScc},
    {"s_cmp_gt_u32", C::Salu, kDefScc},
    {"s_cmp_ge_u32", C::Salu, kDefScc},
    {"s_cmp_lt_i32", C::Salu, kDefScc},
    {"s_cmp_ge_i32", C::Salu, kDefScc},
    {"s_and_saveexec_b64", C::Salu, kDefScc | kUseExec | kDefExec},
    {"s_bcnt1_i32_b64", C::Salu, kDefScc},
    // Scalar memory.
    {"s_load_dword", C::Smem, 0},
    {"s_load_dwordx2", C::Smem, 0},
    {"s_load_dwordx4", C::Smem, 0},
    {"s_load_dwordx8", C::Smem, 0},
    // Control.
    {"s_branch", C::Branch, 0},
    {"s_cbranch_scc0", C::CondBranch, kUseScc},
    {"s_cbranch_scc1", C::CondBranch, kUseScc},
    {"s_cbranch_vccz", C::CondBranch, kUseVcc},
    {"s_cbranch_vccnz", C::CondBranch, kUseVcc},
    {"s_cbranch_execz", C::CondBranch, kUseExec},
    {"s_cbranch_execnz", C::CondBranch, kUseExec},
    {"s_waitcnt", C::Waitcnt, 0},
    {"s_nop", C::Nop, 0},
    {"s_barrier", C::Barrier, 0},
    {"s_endpgm", C::EndPgm, 0},
    {"s_setprio", C::Other, 0},
    {"s_sleep", C::Other, 0},
    {".label", C::Label, 0},
    // Vector ALU.
    {"v_mov_b32", C::Valu, kUseExec},
    {"v_add_u32", C::Valu, kUseExec},
    {"v_sub_u32", C::Valu, kUseExec},
    {"v_subrev_u32", C::Valu, kUseExec},
    {"v_add3_u32", C::Valu, kUseExec},
    {"v_add_co_u32", C::Valu, kUseExec},
    {"v_addc_co_u32", C::Valu, kUseExec},
    {"v_and_b32", C::Valu, kUseExec},
    {"v_or_b32", C::Valu, kUseExec},
    {"v_xor_b32", C::Valu, kUseExec},
    {"v_lshlrev_b32", C::Valu, kUseExec},
    {"v_lshrrev_b32", C::Valu, kUseExec},
    {"v_ashrrev_i32", C::Valu, kUseExec},
    {"v_lshl_add_u32", C::Valu, kUseExec},
    {"v_lshl_or_b32", C::Valu, kUseExec},
    {"v_lshlrev_b64", C::Valu, kUseExec},
    {"v_lshl_add_u64", C::Valu, kUseExec},
    {"v_mul_lo_u32", C::Valu, kUseExec},
    {"v_mul_hi_u32", C::Valu, kUseExec},
    {"v_mul_u32_u24", C::Valu, kUseExec},
    {"v_mad_u32_u24", C::Valu, kUseExec},
    {"v_bfe_u32", C::Valu, kUseExec},
    {"v_perm_b32", C::Valu, kUseExec},
    {"v_cndmask_b32", C::Valu, kUseExec},
    {"v_cmp_eq_u32", C::Valu, kUseExec},
    {"v_cmp_ne_u32", C::Valu, kUseExec},
    {"v_cmp_lt_u32", C::Valu, kUseExec},
    {"v_cmp_le_u32", C::Valu, kUseExec},
    {"v_cmp_gt_u32", C::Valu, kUseExec},
    {"v_cmp_ge_u32", C::Valu, kUseExec},
    {"v_cmp_lt_i32", C::Valu, kUseExec},
    {"v_min_u32", C::Valu, kUseExec},
    {"v_max_u32", C::Valu, kUseExec},
    {"v_max3_u32", C::Valu, kUseExec},
    {"v_med3_i32", C::Valu, kUseExec},
    {"v_cmp_gt_i32", C::Valu, kUseExec},
    {"v_cmp_lt_f32", C::Valu, kUseExec},
    {"v_cmp_gt_f32", C::Valu, kUseExec},
    {"v_add_f32", C::Valu, kUseExec},
    {"v_sub_f32", C::Valu, kUseExec},
    {"v_mul_f32", C::Valu, kUseExec},
    {"v_fma_f32", C::Valu, kUseExec},
    {"v_fmac_f32", C::Valu, kUseExec},
    {"v_max_f32", C::Valu, kUseExec},
    {"v_min_f32", C::Valu, kUseExec},
    {"v_max3_f32", C::Valu, kUseExec},
    {"v_pk_mul_f32", C::Valu, kUseExec},
    {"v_pk_add_f32", C::Valu, kUseExec},
    {"v_pk_fma_f32", C::Valu, kUseExec},
    {"v_exp_f32", C::ValuTrans, kUseExec},
    {"v_log_f32", C::ValuTrans, kUseExec},
    {"v_rcp_f32", C::ValuTrans, kUseExec},
    {"v_cvt_f32_u32", C::Valu, kUseExec},
    {"v_cvt_u32_f32", C::Valu, kUseExec},
    {"v_cvt_f32_i32", C::Valu, kUseExec},
    {"v_cvt_pk_f32_fp8", C::Valu, kUseExec},
    {"v_cvt_pk_f32_fp8_sdwa", C::Valu, kUseExec},  // SDWA form: src0_sel:WORD_1 picks bytes [3:2]
    {"v_cvt_pk_f32_bf8", C::Valu, kUseExec},
    {"v_cvt_f32_fp8", C::Valu, kUseExec},
    {"v_cvt_pk_fp8_f32", C::Valu, kUseExec},
    {"v_cvt_pk_bf16_f32", C::Valu, kUseExec},
    {"v_readfirstlane_b32", C::Valu, kUseExec | kReadlane},
    {"v_readlane_b32", C::Valu, kReadlane},
    {"v_mbcnt_lo_u32_b32", C::Valu, kUseExec},
    {"v_mbcnt_hi_u32_b32", C::Valu, kUseExec},
    {"v_writelane_b32", C::Valu, kWritelane},
    {"v_accvgpr_read_b32", C::Valu, kUseExec | kAccRead},
    {"v_accvgpr_write_b32", C::Valu, kUseExec | kAccWrite},
    {"v_permlane16_swap_b32", C::Valu, kUseExec | kPermlane},
    {"v_permlane32_swap_b32", C::Valu, kUseExec | kPermlane},
    // Matrix (XDL).
    {"v_mfma_f32_16x16x32_fp8_fp8", C::Mfma, kUseExec},
    {"v_mfma_f32_32x32x16_fp8_fp8", C::Mfma, kUseExec},
    {"v_mfma_f32_16x16x16_bf16", C::Mfma, kUseExec},
    {"v_mfma_f32_32x32x8_bf16", C::Mfma, kUseExec},
    {"v_mfma_f32_16x16x32_bf16", C::Mfma, kUseExec},
    {"v_mfma_f32_32x32x16_bf16", C::Mfma, kUseExec},
    {"v_mfma_f32_16x16x128_f8f6f4", C::Mfma, kUseExec},
    {"v_mfma_f32_32x32x64_f8f6f4", C::Mfma, kUseExec},
    // Vector memory.
    {"buffer_load_dword", C::VmemLoad, kUseExec},
    {"buffer_load_dwordx2", C::VmemLoad, kUseExec},
    {"buffer_load_dwordx4", C::VmemLoad, kUseExec},
    {"buffer_load_ubyte", C::VmemLoad, kUseExec},
    {"buffer_store_dword", C::VmemStore, kUseExec},
    {"buffer_store_dwordx2", C::VmemStore, kUseExec},
    {"buffer_store_dwordx4", C::VmemStore, kUseExec},
    {"buffer_store_short", C::VmemStore, kUseExec},
    {"buffer_load_dword_lds", C::LdsDma, kUseExec | kUseM0},  // printed "buffer_load_dword ... lds"
    {"buffer_load_dwordx4_lds", C::LdsDma, kUseExec | kUseM0},  // printed "buffer_load_dwordx4 ... lds"
    {"global_load_dword", C::VmemLoad, kUseExec},
    {"global_load_dwordx2", C::VmemLoad, kUseExec},
    {"global_load_dwordx4", C::VmemLoad, kUseExec},
    {"global_store_dword", C::VmemStore, kUseExec},
    {"global_store_dwordx2", C::VmemStore, kUseExec},
    {"global_store_dwordx4", C::VmemStore, kUseExec},
    {"global_store_short", C::VmemStore, kUseExec},
    {"global_load_lds_dword", C::LdsDma, kUseExec | kUseM0},
    // The returning form (sc0): a load of the pre-op value, counted in vmcnt.
    {"global_atomic_add", C::VmemLoad, kUseExec},
    // Cache write-back / invalidate (gfx940+): no registers, counted in vmcnt like a store.
    {"buffer_wbl2", C::VmemStore, 0},
    {"buffer_inv", C::VmemStore, 0},
    {"global_load_lds_dwordx4", C::LdsDma, kUseExec | kUseM0},
    // LDS.
    {"ds_read_b32", C::LdsRead, kUseExec},
    {"ds_read_b64", C::LdsRead, kUseExec},
    {"ds_read_b128", C::LdsRead, kUseExec},
    {"ds_read_b64_tr_b8", C::LdsRead, kUseExec},
    {"ds_read_b64_tr_b16", C::LdsRead, kUseExec},
    {"ds_bpermute_b32", C::LdsRead, kUseExec | kLdsCrossbar},
    {"ds_write_b32", C::LdsWrite, kUseExec},
    {"ds_write_b64", C::LdsWrite, kUseExec},
    {"ds_write_b128", C::LdsWrite, kUseExec},
    // LDS atomic add (no return): ordered like a write.
    {"ds_add_u32", C::LdsWrite, kUseExec},
};

}  // namespace

const OpInfo& op_info(std::string_view mnemonic) {
  static const std::unordered_map<std::string_view, const OpInfo*> table = [] {
    std::unordered_map<std::string_view, const OpInfo*> t;
    for (const auto& op : kOps) t.emplace(op.name, &op);
    return t;
  }();
  auto it = table.find(mnemonic);
  if (it == table.end())
    throw std::invalid_argument(fmt::format("opcode '{}' is not in the generator's opcode table", mnemonic));
  return *it->second;
}

}  // namespace mla::gen
