// MFMA (matrix fused multiply-add) instructions of gfx942 / gfx950, computed for a whole wave64.
//
// Pure functions: the executor reads the operand registers of all 64 lanes into lane-major
// arrays (a[lane * a_regs + r]), calls run_mfma, and writes d back. Operand layouts, pass counts
// and numerics, with their sources, are in docs/emulator-numerics.md.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "emulator/gfx.h"

namespace mla::emu {

// Element type of an MFMA source operand.
enum class MfmaElem {
  fp8,     // 8-bit e4m3 in the target's family (FNUZ on gfx942, OCP on gfx950)
  bf8,     // 8-bit e5m2 in the target's family
  bf16,
  f16,
  i8,      // signed 8-bit integer (D and C are i32)
  f8f6f4,  // gfx950 f8f6f4: format chosen by cbsz (A) / blgp (B)
};

struct MfmaInfo {
  std::string_view name;  // LLVM mnemonic without _e64, e.g. "v_mfma_f32_16x16x32_fp8_fp8"
  int m, n, k, blocks;
  int a_regs, b_regs, cd_regs;  // VGPRs per lane (f8f6f4: the 8-bit-format register count)
  // MAI pipeline passes (issue cycles / 4) as LLVM's hazard recognizer counts them
  // (GCNHazardRecognizer::getMFMAPipelineWaitStates). For f8f6f4 this is the count with an
  // 8-bit A or B format; mfma_passes() gives the count for any cbsz/blgp.
  int passes;
  bool xdl;       // executes on the XDL (matrix core) pipe, per LLVM's is_gfx940_xdl
  uint64_t macs;  // m * n * k * blocks
  MfmaElem a_elem, b_elem;
  bool scaled;    // v_mfma_scale_*: E8M0 scales for A and B
  bool int_acc;   // i32 accumulation (i8 inputs)
};

// mnemonic as LLVM prints it without an _e64 suffix. nullptr if the instruction does not exist
// on `target` or the emulator does not model it.
const MfmaInfo* find_mfma(std::string_view mnemonic, Gfx target);

// Every modelled MFMA (for tests and listings).
std::span<const MfmaInfo> all_mfmas();
// Whether `info` exists on `target`.
bool mfma_on_target(const MfmaInfo& info, Gfx target);

struct MfmaMods {
  int cbsz = 0, abid = 0, blgp = 0;  // f8f6f4: cbsz/blgp = A/B format: 0 fp8 e4m3, 1 bf8 e5m2,
                                     // 2 fp6 e2m3, 3 fp6 e3m2, 4 fp4 e2m1 (2-4 unsupported)
  int op_sel = 0, op_sel_hi = 0;     // v_mfma_scale: bit 0 = scale A, bit 1 = scale B;
                                     // scale byte = op_sel bit | op_sel_hi bit << 1
};

// MAI passes of `info` with these modifiers (f8f6f4 with only fp6/fp4 formats runs in half the
// passes of the 8-bit formats).
int mfma_passes(const MfmaInfo& info, const MfmaMods& mods);

// Computes one MFMA for a whole wave64. a: [64][a_regs], b: [64][b_regs], c: [64][cd_regs]
// (f32 or i32 bits), d (out): [64][cd_regs]; scale_a/scale_b: [64] (v_mfma_scale only: the
// scale VGPR of each lane). d may alias c. Throws std::runtime_error naming the instruction and
// the modifier if the combination is not supported (e.g. cbsz/abid/blgp broadcast on a
// non-f8f6f4 MFMA, fp6/fp4 formats, op_sel on a non-scale MFMA, missing scale operands).
void run_mfma(const MfmaInfo& info, Gfx target, const MfmaMods& mods, const uint32_t* a,
              const uint32_t* b, const uint32_t* c, uint32_t* d, const uint32_t* scale_a = nullptr,
              const uint32_t* scale_b = nullptr);

}  // namespace mla::emu
