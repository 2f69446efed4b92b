// Target description: everything that differs between gfx942 (MI300X) and gfx950 (MI355X)
// lives here as data. Builders and passes ask the Target; they never test the arch name.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "abi/mla_abi.h"

namespace mla::gen {

// The targets are the contract's (abi/mla_abi.h), as are the facts the runtime shares.
using Arch = abi::Target;

enum class Fp8Format { FNUZ, OCP };  // gfx942: e4m3 FNUZ (bias 8); gfx950: OCP e4m3fn (bias 7)

struct MfmaShape {
  std::string_view mnemonic;  // e.g. "v_mfma_f32_16x16x32_fp8_fp8"
  int m, n, k;
  int a_regs, b_regs, cd_regs;  // 32-bit registers per lane
  int passes;                   // 4-cycle passes; sets the XDL hazard windows
};

// ---- HazardNumbers: manually inserted wait states (the only hazard data of a target) ----
// Numbers from LLVM llvm/lib/Target/AMDGPU/GCNHazardRecognizer.cpp (gfx940 and gfx950 paths;
// gfx950's extra XDL wait state: LLVM PR 126132), cross-checked against llc 22 run as
// `-run-pass=post-RA-hazard-rec` on MIR for both targets (docs/hazards.md). The rules that read
// them live in passes/hazards/rules.h, one documented item per pair.

// Wait states after an XDL (MFMA) instruction, by its pass count (2, 4, 8 or 16 passes).
struct XdlPassTable {
  int pass2, pass4, pass8, pass16;
  // Pass counts other than 2/4/8 round up to the next column (never under-waits).
  int at(int passes) const { return passes <= 2 ? pass2 : passes <= 4 ? pass4 : passes <= 8 ? pass8 : pass16; }
};

struct HazardNumbers {
  // XDL write -> MFMA reads the same register tuple as SrcC (accumulation chain).
  XdlPassTable xdl_write_then_srcc_same;
  // XDL write -> XDL reads an overlapping (not identical) tuple as SrcC.
  XdlPassTable xdl_write_then_srcc_overlapped;
  // XDL write -> MFMA reads it as SrcA/SrcB.
  XdlPassTable xdl_write_then_srcab;
  // XDL write -> VALU (incl. v_accvgpr_read, v_readlane, permlane) reads it.
  XdlPassTable xdl_write_then_valu_read;
  // XDL write -> VMEM / LDS / LDS-DMA reads it (address or store data).
  XdlPassTable xdl_write_then_mem_read;
  // XDL write -> VALU / VMEM load / LDS read writes it again (WAW).
  XdlPassTable xdl_write_then_overwrite;
  // XDL reads SrcC -> VALU / VMEM load / LDS read overwrites it (WAR).
  XdlPassTable xdl_srcc_read_then_overwrite;
  int valu_write_vgpr_then_mfma_read;     // VALU (not MFMA) writes VGPR/AGPR -> MFMA reads it
  int valu_write_exec_then_mfma;          // VALU writes EXEC -> MFMA
  int trans_write_then_valu_read;         // v_exp/v_log/v_rcp writes -> non-trans VALU reads
  int valu_dst_sel_write_then_valu_use;   // VALU writes a 16-bit half (op_sel dst / SDWA) -> VALU touches it
  int valu_write_sgpr_then_valu_read;     // VALU writes SGPR/VCC -> VALU reads it
  int valu_write_vgpr_then_readlane;      // VALU writes VGPR -> v_readlane/v_readfirstlane reads it
  int valu_write_exec_then_rwlane;        // VALU writes EXEC -> v_readlane/v_readfirstlane/v_writelane
  int valu_write_sgpr_then_lane_select;   // VALU writes SGPR -> v_readlane/v_writelane lane select
  int valu_write_sgpr_then_vmem_read;     // VALU writes SGPR/EXEC -> VMEM reads it (rsrc, soffset, saddr, exec)
  int any_write_vgpr_then_dpp_read;       // any write of a VGPR -> DPP reads it
  int valu_write_exec_then_dpp;           // VALU writes EXEC -> DPP
  int salu_write_m0_then_lds_dma;         // SALU writes M0 -> LDS DMA (buffer/global load ... lds)
  int wide_store_then_valu_write_data;    // >64-bit store -> VALU overwrites its data VGPRs
  int valu_write_vgpr_then_permlane_swap; // VALU writes VGPR -> v_permlane16/32_swap reads it (0: no such op)
  int vcmpx_write_exec_then_permlane_swap;// v_cmp* writes EXEC -> v_permlane16/32_swap (0: no such op)
  int max_wait_states_per_nop;            // s_nop simm16[3:0] + 1
};

// Machine constants of the performance model (docs/performance.md "Machine model"): assumed
// figures, not measured here, except kernel_fixed_s (fitted on aiter's measured tables).
// mlabench prices every launch with them, and the catalog records them beside each prefix
// kernel's modeled hot loop for the runtime's planner.
struct MachineModel {
  double clock_hz;               // peak engine clock
  double little_latency_s;       // loaded HBM latency for Little's law (DESIGN.md: ~2 us)
  double cu_port_bytes_per_clk;  // L2 -> CU read port, per CU
  double unit_fill_s;            // per work unit: page id then KV row, 2 dependent ~500 ns trips
  // The fixed device time of a kernel launch (a tiny kernel's time; mlabench models a launch as
  // kernel_fixed_s - unit_fill_s plus its CUs' work), with where it comes from.
  double kernel_fixed_s;
  std::string_view kernel_fixed_source;
};
// The last fit of the machine model on aiter's tuned GEMM tables (`mlabench --calibrate --aiter-dir
// DIR`, bench/calibrate.h): the aiter commit whose tables it read.
inline constexpr std::string_view kCalibrationAiterCommit = "e4048607a535ace3a2b51ded31b1c8c2d45c0879";

struct Target {
  Arch arch;
  std::string_view name;       // "gfx942"
  std::string_view target_id;  // "gfx942:sramecc+:xnack-"
  int num_cus;
  uint32_t lds_bytes;          // per workgroup (= per CU)
  int max_sgprs;               // addressable s0..s(max-1) for allocation
  int max_vgprs;               // architectural VGPRs v0..v255
  int max_agprs;               // accumulation registers a0..a255
  int unified_vgprs;           // accum_offset + agprs must fit in this
  Fp8Format fp8;
  // HBM bandwidth: the datasheet peak, and the achievable figure the performance model prices
  // memory at (AMD calls the peak not achievable), with where that figure comes from.
  double hbm_peak_bytes_per_s;
  double hbm_achievable_bytes_per_s;
  std::string_view hbm_achievable_source;
  MachineModel machine;
  bool has_lds_transpose;      // ds_read_b64_tr_b8 / _b16 (gfx950)
  bool has_lds_dma_b128;       // 16-byte LDS DMA: buffer_load_dwordx4 ... lds, global_load_lds_dwordx4 (gfx950)
  bool has_cvt_pk_bf16;        // v_cvt_pk_bf16_f32 (gfx950); gfx942 rounds to bf16 with integer ops
  // v_cvt_scalef32_pk_bf16_fp8 (gfx950): fp8 -> bf16 in one VALU per two values. gfx942 widens
  // through f32 (v_cvt_pk_f32_fp8 + v_perm_b32, one VALU per value), so its bf16-q decode
  // splits Q into two fp8 parts instead of widening K (MlaGeometry::q_split).
  bool has_cvt_pk_bf16_fp8;
  std::vector<MfmaShape> mfma;
  HazardNumbers hazards;       // manually inserted wait states (see HazardNumbers)

  // Number of 4-cycle passes of an MFMA by mnemonic; nullopt if the target lacks it.
  std::optional<MfmaShape> find_mfma(std::string_view mnemonic) const;
};

const Target& target(Arch arch);

// Workgroups of one kernel a CU holds at once, and what limits it. CDNA3/CDNA4: 4 SIMDs per
// CU, each with 512 unified VGPRs per lane allocated in granules of 8 and at most 8 waves;
// the CU's LDS is shared by its workgroups (AMD CDNA3 ISA, 'Occupancy'; AMDGPUUsage).
struct Occupancy {
  int workgroups_per_cu = 1;    // 0: one workgroup does not fit a CU
  std::string_view limited_by;  // "LDS", "registers", "waves"
};
Occupancy occupancy(const Target& t, int unified_vgprs_per_wave, uint32_t lds_bytes, int workgroup_size);
// Parses "gfx942" / "gfx950"; nullopt otherwise.
std::optional<Arch> parse_arch(std::string_view name);
std::string_view arch_name(Arch arch);

}  // namespace mla::gen
