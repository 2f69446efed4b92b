// The "form" of a decoded instruction: its opcode plus every encoding or modifier choice whose
// semantics an emulator must get right separately (DPP control, SDWA selects, op_sel, neg/abs,
// MFMA operands in AGPRs or an inline-constant SrcC, the MUBUF/global address mode (offen,
// idxen, saddr), LDS-DMA, clamp/omod). Two instructions of one form exercise the
// same semantics; the provenance table (docs/emulator-provenance.md) names its hardware-anchored
// evidence per form, and the aiter oracle records which forms a run executed.
#pragma once
#include <map>
#include <string>

#include "emulator/inst.h"

namespace mla::emu {

// e.g. "v_mov_b32 dpp:quad_perm", "v_cvt_f32_fp8 sdwa:src0_sel:BYTE_2",
// "v_pk_fma_f32 op_sel_hi:0b100", "v_mfma_f32_16x16x32_bf16 acc:cd", "v_mfma_f32_16x16x32_fp8_fp8 c:imm",
// "buffer_load_dword offen lds", "global_load_dword saddr".
std::string inst_form(const Inst& in);

struct Program;
// Every form of a decoded kernel with its number of (static) instructions. Trap instructions
// (bytes that do not decode, unsupported opcodes) count as "<decode>" / "<unsupported: MNEMONIC>".
std::map<std::string, unsigned> forms_of(const Program& prog);

}  // namespace mla::emu
