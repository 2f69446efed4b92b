// The "form" of a decoded instruction: its opcode plus every encoding or modifier choice whose
// semantics an emulator must get right separately (DPP control, SDWA selects, op_sel, neg/abs,
// MFMA operands in AGPRs, LDS-DMA, clamp/omod). Two instructions of one form exercise the
// same semantics; the provenance table (docs/emulator-provenance.md) names its hardware-anchored
// evidence per form, and the aiter oracle records which forms a run executed.
#pragma once
#include <string>

#include "emulator/inst.h"

namespace mla::emu {

// e.g. "v_mov_b32 dpp:quad_perm", "v_cvt_f32_fp8 sdwa:src0_sel:BYTE_2",
// "v_pk_fma_f32 op_sel_hi:0b100", "v_mfma_f32_16x16x32_bf16 acc:cd", "buffer_load_dword lds".
std::string inst_form(const Inst& in);

}  // namespace mla::emu
