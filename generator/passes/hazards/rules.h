// The manually inserted wait-state rules of gfx942 (CDNA3) and gfx950 (CDNA4), one item per
// producer -> consumer pair, named producer_then_consumer (as Mesa ACO's aco_insert_NOPs.cpp
// names its hazards). Each item's comment is its table: architecture, first instruction, second
// instruction, wait states, and where the number comes from. The numbers themselves are target
// data (Target::hazards, target/target.cpp); a rule only decides whether a pair is related and
// which number applies.
//
// `required(target, producer, consumer)` returns the wait states that must lie between the two
// instructions if the consumer issues after the producer: 0 when the pair is not a hazard.
// The walker (passes/hazards.cpp) subtracts the wait states that already lie between them.
//
// Sources (all read for facts, cross-checked with llc 22 `-run-pass=post-RA-hazard-rec`):
//   [L] LLVM llvm/lib/Target/AMDGPU/GCNHazardRecognizer.cpp (checkMAIHazards90A,
//       checkMAIVALUHazards, checkVALUHazards, checkVMEMHazards, checkDPPHazards,
//       checkRWLaneHazards, checkReadM0Hazards, checkPermlaneHazards, checkVALUHazardsHelper)
//   [P] LLVM PR 126132: gfx950 XDL writes need one more wait state than gfx942
//   [R] ROCm rocRoller Scheduling/Observers/WaitState/MFMA/XDLWrite94x.hpp, XDLReadSrcC94x.hpp,
//       VALUWrite.hpp (gfx94x tables)
//   [T] LLVM tests mai-hazards-gfx940.mir, mai-hazards-gfx950.mir
// "passes" of an XDL instruction = Target::find_mfma(mnemonic)->passes.
#pragma once
#include <span>
#include <string_view>

#include "program/inst.h"
#include "target/target.h"

namespace mla::gen::hazard_rules {

// ---------------------------------------------------------------- XDL (MFMA) producers

/// xdl_write_then_srcc_same: accumulation chain, SrcC is exactly the producer's destination tuple.
/// | arch   | 1st instruction      | 2nd instruction                 | 2 / 4 / 8 / 16 passes |
/// | gfx942 | v_mfma* writes D     | v_mfma* reads SrcC == D (same)  | 2 / 0 / 0 / 0         |
/// | gfx950 | v_mfma* writes D     | v_mfma* reads SrcC == D (same)  | 2 / 0 / 0 / 0         |
/// [L] checkMAIHazards90A, FullReg: GFX940_SMFMA4x4WritesVGPRFullSrcCWaitStates; [R] XDLWrite94x.
struct XdlWriteThenSrcCSame {
  static constexpr std::string_view name = "xdl_write_then_srcc_same";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_write_then_srcc_overlapped: SrcC overlaps the producer's destination but is not the same tuple.
/// | arch   | 1st instruction      | 2nd instruction                    | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL writes D         | XDL reads SrcC overlapping D       | 3 / 5 / 9 / 17        |
/// | gfx950 | XDL writes D         | XDL reads SrcC overlapping D       | 4 / 6 / 10 / 18       |
/// [L] GFX940_XDL_N_PassWritesVGPROverlappedXDLOrSMFMASrcCWaitStates = passes + 1 (+1 gfx950).
struct XdlWriteThenSrcCOverlapped {
  static constexpr std::string_view name = "xdl_write_then_srcc_overlapped";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_write_then_mfma_srcab: the next MFMA multiplies the result (SrcA or SrcB).
/// | arch   | 1st instruction      | 2nd instruction              | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL writes D         | v_mfma* reads D as SrcA/B    | 5 / 7 / 11 / 19       |
/// | gfx950 | XDL writes D         | v_mfma* reads D as SrcA/B    | 5 / 8 / 12 / 20       |
/// [L] GFX940_XDL_N_PassWritesVGPROverlappedSrcABWaitStates = passes + 3 (+1 gfx950 if > 2 passes); [P].
struct XdlWriteThenMfmaSrcAB {
  static constexpr std::string_view name = "xdl_write_then_mfma_srcab";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_write_then_valu_read: a VALU (v_accvgpr_read, v_readlane, v_permlane*, ...) reads the result.
/// | arch   | 1st instruction      | 2nd instruction        | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL writes D         | v_* reads D            | 5 / 7 / 11 / 19       |
/// | gfx950 | XDL writes D         | v_* reads D            | 5 / 8 / 12 / 20       |
/// [L] checkMAIVALUHazards, GFX940_XDL_N_PassWriteVgprVALUMemExpReadWaitStates; [P]; [R].
struct XdlWriteThenValuRead {
  static constexpr std::string_view name = "xdl_write_then_valu_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_write_then_mem_read: VMEM, LDS or LDS-DMA reads the result (address or store data).
/// | arch   | 1st instruction      | 2nd instruction                     | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL writes D         | buffer*/global*/ds* reads D         | 5 / 7 / 11 / 19       |
/// | gfx950 | XDL writes D         | buffer*/global*/ds* reads D         | 5 / 8 / 12 / 20       |
/// [L] checkMAIVALUHazards (IsMemOrExport), same helper as the VALU read; [P]; [R].
struct XdlWriteThenMemRead {
  static constexpr std::string_view name = "xdl_write_then_mem_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_write_then_overwrite: WAW, a VALU / VMEM load / LDS read writes a register the XDL writes.
/// | arch   | 1st instruction      | 2nd instruction                      | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL writes D         | v_* / buffer_load / ds_read writes D | 5 / 7 / 11 / 19       |
/// | gfx950 | XDL writes D         | v_* / buffer_load / ds_read writes D | 5 / 8 / 12 / 20       |
/// [L] checkMAIVALUHazards defs loop, GFX940_XDL_N_PassWriteVgprVALUWawWaitStates; [P].
struct XdlWriteThenOverwrite {
  static constexpr std::string_view name = "xdl_write_then_overwrite";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// xdl_srcc_read_then_overwrite: WAR, the accumulator input is overwritten while the XDL reads it.
/// | arch   | 1st instruction       | 2nd instruction                      | 2 / 4 / 8 / 16 passes |
/// | gfx942 | XDL reads SrcC = C    | v_* / buffer_load / ds_read writes C | 1 / 3 / 7 / 15        |
/// | gfx950 | XDL reads SrcC = C    | v_* / buffer_load / ds_read writes C | 1 / 3 / 7 / 15        |
/// [L] checkMAIVALUHazards IsSMFMAReadAsCFn: SMFMA4x4 / GFX940_XDL4Pass / SMFMA16x16 / SMFMA32x32
///     ReadVgprVALUWarWaitStates; [R] XDLReadSrcC94x.
struct XdlSrcCReadThenOverwrite {
  static constexpr std::string_view name = "xdl_srcc_read_then_overwrite";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

// ---------------------------------------------------------------- VALU producers, MFMA consumers

/// valu_write_vgpr_then_mfma_read: VALU (incl. v_accvgpr_write/read, trans) result feeds an MFMA.
/// | arch          | 1st instruction               | 2nd instruction              | wait states |
/// | gfx942/gfx950 | v_* (not MFMA) writes VGPR/AGPR | v_mfma* reads it (A, B or C) | 2           |
/// [L] checkMAIHazards90A LegacyVALUNotDotWritesVGPRWaitStates; [R] VALUWrite.
struct ValuWriteVgprThenMfmaRead {
  static constexpr std::string_view name = "valu_write_vgpr_then_mfma_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_exec_then_mfma
/// | arch          | 1st instruction        | 2nd instruction | wait states |
/// | gfx942/gfx950 | v_* (not MFMA) writes EXEC | v_mfma*     | 4           |
/// [L] checkMAIHazards90A VALUWritesExecWaitStates.
struct ValuWriteExecThenMfma {
  static constexpr std::string_view name = "valu_write_exec_then_mfma";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

// ---------------------------------------------------------------- VALU producers, VALU consumers

/// trans_write_then_valu_read (hasTransForwardingHazard: gfx940+)
/// | arch          | 1st instruction                  | 2nd instruction                 | wait states |
/// | gfx942/gfx950 | v_exp/v_log/v_rcp writes VGPR    | non-transcendental VALU reads it | 1          |
/// [L] checkVALUHazards TransDefWaitstates. A transcendental consumer needs none.
struct TransWriteThenValuRead {
  static constexpr std::string_view name = "trans_write_then_valu_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_dst_sel_write_then_valu_use (hasDstSelForwardingHazard: gfx940+)
/// | arch          | 1st instruction                                      | 2nd instruction        | wait states |
/// | gfx942/gfx950 | VALU writing a 16-bit half (VOP3 op_sel dst bit, SDWA dst_sel != DWORD) | VALU reads or writes that VGPR | 1 |
/// [L] checkVALUHazards Shift16DefWaitstates, getDstSelForwardingOperand.
struct ValuDstSelWriteThenValuUse {
  static constexpr std::string_view name = "valu_dst_sel_write_then_valu_use";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_sgpr_then_valu_read (hasVDecCoExecHazard: gfx940+, no interlock)
/// | arch          | 1st instruction                           | 2nd instruction                | wait states |
/// | gfx942/gfx950 | VALU writes SGPR/VCC (v_cmp, v_readlane...) | VALU reads that SGPR/VCC     | 2           |
/// [L] checkVALUHazards VALUWriteSGPRVALUReadWaitstates.
struct ValuWriteSgprThenValuRead {
  static constexpr std::string_view name = "valu_write_sgpr_then_valu_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_vgpr_then_readlane (gfx940+)
/// | arch          | 1st instruction   | 2nd instruction                              | wait states |
/// | gfx942/gfx950 | VALU writes VGPR  | v_readlane/v_readfirstlane reads it (src0)   | 1           |
/// [L] checkVALUHazards VALUWriteVGPRReadlaneRead.
struct ValuWriteVgprThenReadlane {
  static constexpr std::string_view name = "valu_write_vgpr_then_readlane";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_exec_then_rwlane (gfx940+)
/// | arch          | 1st instruction   | 2nd instruction                               | wait states |
/// | gfx942/gfx950 | VALU writes EXEC  | v_readlane / v_readfirstlane / v_writelane    | 4           |
/// [L] checkVALUHazards VALUWriteEXECRWLane.
struct ValuWriteExecThenRwlane {
  static constexpr std::string_view name = "valu_write_exec_then_rwlane";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_sgpr_then_lane_select
/// | arch          | 1st instruction       | 2nd instruction                                  | wait states |
/// | gfx942/gfx950 | VALU writes SGPR/VCC  | v_readlane/v_writelane uses it as lane select    | 4           |
/// [L] checkRWLaneHazards RWLaneWaitStates; ISA "VALU writes SGPR -> V_{READ,WRITE}LANE lane select".
struct ValuWriteSgprThenLaneSelect {
  static constexpr std::string_view name = "valu_write_sgpr_then_lane_select";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_exec_then_dpp / any_write_vgpr_then_dpp_read
/// | arch          | 1st instruction            | 2nd instruction         | wait states |
/// | gfx942/gfx950 | VALU writes EXEC           | DPP VALU                | 5           |
/// | gfx942/gfx950 | any instruction writes VGPR| DPP VALU reads it       | 2           |
/// [L] checkDPPHazards DppExecWaitStates, DppVgprWaitStates (the VGPR producer may be anything).
struct ValuWriteExecThenDpp {
  static constexpr std::string_view name = "valu_write_exec_then_dpp";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};
struct AnyWriteVgprThenDppRead {
  static constexpr std::string_view name = "any_write_vgpr_then_dpp_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// valu_write_vgpr_then_permlane_swap / vcmpx_write_exec_then_permlane_swap (gfx950 only)
/// | arch   | 1st instruction                | 2nd instruction                       | wait states |
/// | gfx950 | VALU (incl. MFMA) writes VGPR  | v_permlane16/32_swap reads it         | 2           |
/// | gfx950 | v_cmp*/v_cmpx writes EXEC      | v_permlane16/32_swap                  | 4           |
/// | gfx942 | (no v_permlane*_swap)          |                                       | -           |
/// [L] checkPermlaneHazards VALUWritesVDstWaitStates, VCmpXWritesExecWaitStates; [T] mai-hazards-gfx950.mir.
struct ValuWriteVgprThenPermlaneSwap {
  static constexpr std::string_view name = "valu_write_vgpr_then_permlane_swap";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};
struct VcmpxWriteExecThenPermlaneSwap {
  static constexpr std::string_view name = "vcmpx_write_exec_then_permlane_swap";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

// ---------------------------------------------------------------- memory consumers / producers

/// valu_write_sgpr_then_vmem_read
/// | arch          | 1st instruction            | 2nd instruction                                          | wait states |
/// | gfx942/gfx950 | VALU writes SGPR/VCC/EXEC  | VMEM reads it (rsrc, soffset, saddr; EXEC implicitly)    | 5           |
/// [L] checkVMEMHazards VmemSgprWaitStates (the uses include the implicit EXEC read).
struct ValuWriteSgprThenVmemRead {
  static constexpr std::string_view name = "valu_write_sgpr_then_vmem_read";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// salu_write_m0_then_lds_dma (hasReadM0LdsDmaHazard: gfx9)
/// | arch          | 1st instruction  | 2nd instruction                                       | wait states |
/// | gfx942/gfx950 | SALU writes M0   | buffer_load ... lds / global_load_lds_* (M0 = LDS base) | 1         |
/// [L] checkReadM0Hazards ReadM0WaitStates; ISA "SALU writes M0 -> LDS DMA".
struct SaluWriteM0ThenLdsDma {
  static constexpr std::string_view name = "salu_write_m0_then_lds_dma";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

/// wide_store_then_valu_write_data (has12DWordStoreHazard)
/// | arch          | 1st instruction                                                    | 2nd instruction               | wait states |
/// | gfx942/gfx950 | store of > 64 bits: global_store_dwordx3/x4, buffer_store_dwordx3/x4 with an immediate soffset | VALU writes its data VGPRs | 2 |
/// [L] createsVALUHazard + checkVALUHazardsHelper VALUWaitStates (gfx940: 2). A buffer store whose
/// soffset is an SGPR does not create the hazard.
struct WideStoreThenValuWriteData {
  static constexpr std::string_view name = "wide_store_then_valu_write_data";
  static int required(const Target&, const Inst& producer, const Inst& consumer);
};

// ---------------------------------------------------------------- the list

struct Rule {
  std::string_view name;
  int (*required)(const Target&, const Inst& producer, const Inst& consumer);
};

// Every rule, in the order of docs/hazards.md.
std::span<const Rule> all();

// The longest wait any rule can ask for on `t`: a producer further back than this is forgotten.
int horizon(const Target& t);

}  // namespace mla::gen::hazard_rules
