#include "target/target.h"

#include <algorithm>

namespace mla::gen {

namespace {

// MFMA menus. Pass counts from LLVM's SISchedule.td / GCNHazardRecognizer (gfx940 and gfx950
// XDL write latencies), each measured with llc 22 (docs/hazards.md): 16x16 fp8 K=32 = 4 passes,
// 32x32 fp8 K=16 = 8, 16x16x16 bf16 = 4, 32x32x8 bf16 = 8 (both targets); gfx950 16x16x32 bf16 = 4,
// 32x32x16 bf16 = 8, 16x16x128 f8f6f4 = 8 and 32x32x64 f8f6f4 = 16 with fp8/bf8 operands (fp6/fp4
// operands take fewer passes; the fp8 count is the conservative one for hazards).
const std::vector<MfmaShape> kMfma942 = {
    {"v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, 2, 2, 16, 8},
    {"v_mfma_f32_16x16x16_bf16", 16, 16, 16, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x8_bf16", 32, 32, 8, 2, 2, 16, 8},
};

const std::vector<MfmaShape> kMfma950 = {
    {"v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, 2, 2, 16, 8},
    {"v_mfma_f32_16x16x16_bf16", 16, 16, 16, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x8_bf16", 32, 32, 8, 2, 2, 16, 8},
    // Passes corrected from 8 / 16 (hazards): LLVM 22's gfx950 schedule model gives these 4 and 8
    // passes (llc -mcpu=gfx950 -run-pass=post-RA-hazard-rec asks 8 / 12 wait states before a
    // dependent SrcA read = passes + 3 + 1; see docs/hazards.md).
    {"v_mfma_f32_16x16x32_bf16", 16, 16, 32, 4, 4, 4, 4},
    {"v_mfma_f32_32x32x16_bf16", 32, 32, 16, 4, 4, 16, 8},
    {"v_mfma_f32_16x16x128_f8f6f4", 16, 16, 128, 8, 8, 4, 8},
    {"v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64, 8, 8, 16, 16},
};

// ---- HazardNumbers (GCNHazardRecognizer.cpp; every value re-measured with llc 22, docs/hazards.md) ----
// XDL tables, columns = producer passes 2 / 4 / 8 / 16:
//   SrcC same         gfx940 "GFX940_SMFMA4x4WritesVGPRFullSrcCWaitStates" = 2 for 2 passes, else 0
//   SrcC overlapped   GFX940_XDL_N_PassWritesVGPROverlappedXDLOrSMFMASrcCWaitStates = passes + 1 (+1 gfx950)
//   SrcA/B            GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates = passes + 3 (+1 gfx950 if > 2 passes)
//   VALU/mem read     GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates   = passes + 3 (+1 gfx950 if > 2 passes)
//   overwrite (WAW)   GFX940_XDL_N_PassWriteVgprVALUWawWaitStates          = passes + 3 (+1 gfx950 if > 2 passes)
//   SrcC read (WAR)   SMFMA4x4 / GFX940_XDL4Pass / SMFMA16x16 / SMFMA32x32 ReadVgprVALUWarWaitStates = 1/3/7/15
const HazardNumbers kHazards942{
    /*xdl_write_then_srcc_same=*/{2, 0, 0, 0},
    /*xdl_write_then_srcc_overlapped=*/{3, 5, 9, 17},
    /*xdl_write_then_srcab=*/{5, 7, 11, 19},
    /*xdl_write_then_valu_read=*/{5, 7, 11, 19},
    /*xdl_write_then_mem_read=*/{5, 7, 11, 19},
    /*xdl_write_then_overwrite=*/{5, 7, 11, 19},
    /*xdl_srcc_read_then_overwrite=*/{1, 3, 7, 15},
    /*valu_write_vgpr_then_mfma_read=*/2,       // checkMAIHazards90A LegacyVALUNotDotWritesVGPRWaitStates
    /*valu_write_exec_then_mfma=*/4,            // checkMAIHazards90A VALUWritesExecWaitStates
    /*trans_write_then_valu_read=*/1,           // checkVALUHazards TransDefWaitstates (hasTransForwardingHazard)
    /*valu_dst_sel_write_then_valu_use=*/1,     // checkVALUHazards Shift16DefWaitstates (hasDstSelForwardingHazard)
    /*valu_write_sgpr_then_valu_read=*/2,       // checkVALUHazards VALUWriteSGPRVALUReadWaitstates (hasVDecCoExecHazard)
    /*valu_write_vgpr_then_readlane=*/1,        // checkVALUHazards VALUWriteVGPRReadlaneRead
    /*valu_write_exec_then_rwlane=*/4,          // checkVALUHazards VALUWriteEXECRWLane
    /*valu_write_sgpr_then_lane_select=*/4,     // checkRWLaneHazards RWLaneWaitStates
    /*valu_write_sgpr_then_vmem_read=*/5,       // checkVMEMHazards VmemSgprWaitStates
    /*any_write_vgpr_then_dpp_read=*/2,         // checkDPPHazards DppVgprWaitStates
    /*valu_write_exec_then_dpp=*/5,             // checkDPPHazards DppExecWaitStates
    /*salu_write_m0_then_lds_dma=*/1,           // checkReadM0Hazards ReadM0WaitStates (hasReadM0LdsDmaHazard)
    /*wide_store_then_valu_write_data=*/2,      // checkVALUHazardsHelper VALUWaitStates (gfx940: 2)
    /*valu_write_vgpr_then_permlane_swap=*/0,   // gfx942 has no v_permlane*_swap
    /*vcmpx_write_exec_then_permlane_swap=*/0,
    /*max_wait_states_per_nop=*/16,             // CDNA3 ISA S_NOP: SIMM16[3:0] + 1 wait states
};
// gfx950 = gfx942 plus one wait state after XDL writes (PR 126132) and the permlane-swap rules.
const HazardNumbers kHazards950{
    /*xdl_write_then_srcc_same=*/{2, 0, 0, 0},
    /*xdl_write_then_srcc_overlapped=*/{4, 6, 10, 18},
    /*xdl_write_then_srcab=*/{5, 8, 12, 20},
    /*xdl_write_then_valu_read=*/{5, 8, 12, 20},
    /*xdl_write_then_mem_read=*/{5, 8, 12, 20},
    /*xdl_write_then_overwrite=*/{5, 8, 12, 20},
    /*xdl_srcc_read_then_overwrite=*/{1, 3, 7, 15},
    /*valu_write_vgpr_then_mfma_read=*/2,
    /*valu_write_exec_then_mfma=*/4,
    /*trans_write_then_valu_read=*/1,
    /*valu_dst_sel_write_then_valu_use=*/1,
    /*valu_write_sgpr_then_valu_read=*/2,
    /*valu_write_vgpr_then_readlane=*/1,
    /*valu_write_exec_then_rwlane=*/4,
    /*valu_write_sgpr_then_lane_select=*/4,
    /*valu_write_sgpr_then_vmem_read=*/5,
    /*any_write_vgpr_then_dpp_read=*/2,
    /*valu_write_exec_then_dpp=*/5,
    /*salu_write_m0_then_lds_dma=*/1,
    /*wide_store_then_valu_write_data=*/2,
    /*valu_write_vgpr_then_permlane_swap=*/2,   // checkPermlaneHazards VALUWritesVDstWaitStates
    /*vcmpx_write_exec_then_permlane_swap=*/4,  // checkPermlaneHazards VCmpXWritesExecWaitStates
    /*max_wait_states_per_nop=*/16,
};

// Name, target ID, CU count, LDS and fp8 format from the contract (abi::facts); the rest here.
Target describe(Arch arch, double hbm_peak, double hbm_achievable, std::string_view hbm_source, MachineModel machine,
               bool cdna4, std::vector<MfmaShape> mfma, HazardNumbers hazards) {
  const abi::TargetFacts& f = abi::facts(arch);
  return Target{.arch = arch,
                .name = f.name,
                .target_id = f.target_id,
                .num_cus = f.num_cus,
                .lds_bytes = f.lds_bytes,
                .max_sgprs = 102,
                .max_vgprs = 256,
                .max_agprs = 256,
                .unified_vgprs = 512,
                .fp8 = f.fp8_fnuz ? Fp8Format::FNUZ : Fp8Format::OCP,
                .hbm_peak_bytes_per_s = hbm_peak,
                .hbm_achievable_bytes_per_s = hbm_achievable,
                .hbm_achievable_source = hbm_source,
                .machine = machine,
                .has_lds_transpose = cdna4,
                .has_lds_dma_b128 = cdna4,
                .has_cvt_pk_bf16 = cdna4,
                .has_cvt_pk_bf16_fp8 = cdna4,
                .mfma = std::move(mfma),
                .hazards = hazards};
}
// The performance model's machine constants (assumed): the peak engine clock (2.1 GHz MI300X,
// 2.4 GHz MI355X, AMD's product pages), a loaded HBM latency of ~2 us for Little's law (DESIGN.md),
// a 64-byte-per-clock L2 -> CU read port, and a work unit's fill: its page ids, then its first
// KV rows, two dependent ~500 ns trips. The kernel's fixed time is fitted (below).
//
// Fitted figures: `mlabench --calibrate --aiter-dir DIR` on aiter's tuned GEMM tables at
// kCalibrationAiterCommit (docs/performance.md "Calibration on aiter's tuned tables"): the
// memory-bound rows (2MNK / bytes <= 32 FLOP/B) of the target's CU count, fitted on the even FNV
// half to t = t0 + bytes / BW (t0 from rows <= 4 MB, BW from rows >= 256 MB), rounded to 3 digits.
// MI355X (gfx950, 256 CUs): 877 rows, 58 of them >= 256 MB: BW 6.09 TB/s, t0 4.47 us.
// MI300X (gfx942, 304 CUs): 51 rows, none >= 256 MB: BW not fitted (BabelStream's 4.1 TB/s
// stays), t0 3.11 us with it.
constexpr MachineModel kMachine942{
    .clock_hz = 2.1e9, .little_latency_s = 2e-6, .cu_port_bytes_per_clk = 64, .unit_fill_s = 1e-6,
    .kernel_fixed_s = 3.11e-6,
    .kernel_fixed_source = "fitted: aiter's tuned GEMM tables at e4048607, 8 rows <= 4 MB on MI300X (304 CUs), "
                           "median of t - bytes / 4.1 TB/s"};
constexpr MachineModel kMachine950{
    .clock_hz = 2.4e9, .little_latency_s = 2e-6, .cu_port_bytes_per_clk = 64, .unit_fill_s = 1e-6,
    .kernel_fixed_s = 4.47e-6,
    .kernel_fixed_source = "fitted: aiter's tuned GEMM tables at e4048607, 165 rows <= 4 MB on MI355X (256 CUs), "
                           "median of t - bytes / BW"};
// Achievable HBM bandwidth. MI300X: BabelStream measures Copy 4.11 / Triad 4.09 TB/s of the 5.3
// TB/s datasheet peak (DESIGN.md, "Facts about users, peers and limits"); aiter's tables have no
// MI300X row above 256 MB to fit. MI355X: fitted (above); it replaces the former 6.0 TB/s estimate.
const Target kGfx942 = describe(Arch::gfx942, 5.3e12, 4.1e12,
                                "measured: BabelStream on MI300X, Copy 4.11 / Triad 4.09 TB/s", kMachine942, false, kMfma942,
                                kHazards942);
const Target kGfx950 = describe(Arch::gfx950, 8.0e12, 6.09e12,
                                "fitted: aiter's tuned GEMM tables at e4048607, 58 rows >= 256 MB on MI355X, t = t0 + bytes / BW",
                                kMachine950, true, kMfma950, kHazards950);

}  // namespace

std::optional<MfmaShape> Target::find_mfma(std::string_view mnemonic) const {
  for (const auto& m : mfma)
    if (m.mnemonic == mnemonic) return m;
  return std::nullopt;
}

const Target& target(Arch arch) { return arch == Arch::gfx942 ? kGfx942 : kGfx950; }

std::optional<Arch> parse_arch(std::string_view name) {
  if (name == "gfx942") return Arch::gfx942;
  if (name == "gfx950") return Arch::gfx950;
  return std::nullopt;
}

std::string_view arch_name(Arch arch) { return target(arch).name; }

Occupancy occupancy(const Target& t, int unified_vgprs_per_wave, uint32_t lds_bytes, int workgroup_size) {
  constexpr int kSimds = 4, kRegsPerSimd = 512, kGranule = 8, kWavesPerSimd = 8;
  const int regs = (std::max(1, unified_vgprs_per_wave) + kGranule - 1) / kGranule * kGranule;
  const int waves_per_wg = (std::max(1, workgroup_size) + 63) / 64;
  // The dispatcher places each wave on any SIMD with room, so wave slots pool over the CU.
  const int waves_per_simd = std::min(kWavesPerSimd, kRegsPerSimd / regs);
  const int by_regs = kSimds * waves_per_simd / waves_per_wg;
  const int by_waves = kSimds * kWavesPerSimd / waves_per_wg;
  const int by_lds = lds_bytes ? int(t.lds_bytes / lds_bytes) : by_waves + 1;
  Occupancy o;
  o.workgroups_per_cu = std::min({by_regs, by_waves, by_lds});  // 0: the workgroup cannot launch
  o.limited_by = o.workgroups_per_cu == by_regs ? "registers" : o.workgroups_per_cu == by_lds ? "LDS" : "waves";
  return o;
}

}  // namespace mla::gen
