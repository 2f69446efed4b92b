// The opcode table: base mnemonic (LLVM's spelling without _e32/_e64/_sdwa/_dpp) -> handler and
// the static facts the checkers need. Each exec_*.cpp registers its family.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "emulator/gfx.h"
#include "emulator/inst.h"

namespace mla::emu {

struct MfmaInfo;

// OpInfo::kind bits.
enum : uint32_t {
  K_SALU = 1u << 0, K_VALU = 1u << 1, K_TRANS = 1u << 2, K_MFMA = 1u << 3, K_XDL = 1u << 4,
  K_VMEM = 1u << 5,   // MUBUF or FLAT/global
  K_FLAT = 1u << 6,   // FLAT/global/scratch encodings
  K_LDS = 1u << 7,    // DS instructions
  K_SMEM = 1u << 8,
  K_LOAD = 1u << 9, K_STORE = 1u << 10,
  K_WRITES_SCC = 1u << 11, K_READS_SCC = 1u << 12,
  K_LDS_DMA = 1u << 13,  // buffer/global load into LDS (reads M0)
  K_READS_VCC = 1u << 14, K_WRITES_VCC = 1u << 15,  // implicit VCC (e32 forms handled by text)
  K_FLOAT = 1u << 16,    // VALU float op: abs/neg input modifiers are float modifiers
  K_NO_EXEC = 1u << 17,  // VALU that ignores EXEC (readlane, permlane swaps write all lanes? no)
  K_RWLANE = 1u << 18,   // v_readlane / v_writelane (lane select hazard)
  K_PERMLANE = 1u << 19, // v_permlane*_swap (gfx950)
  K_ACCVGPR = 1u << 20,  // v_accvgpr_read/write/mov
  K_SETREG = 1u << 21, K_GETREG = 1u << 22,
  K_WRITES_M0_IMPL = 1u << 23,
  K_CMPX = 1u << 24,     // writes EXEC
  K_READS_DST = 1u << 25, // destination is also a source (v_fmac, v_mac, tied forms)
  K_BRANCH = 1u << 26,
  K_DST_OPSEL = 1u << 27, // op_sel's destination bit selects the written half (tied destination)
  K_SWAP = 1u << 28,      // v_swap_b32: both operands are read and written
  K_ATOMIC = 1u << 29,    // global/flat atomic read-modify-write
};

struct OpInfo {
  std::string name;
  Handler fn = nullptr;
  InstClass cls = InstClass::OTHER;
  uint8_t ndst = 0;     // leading printed operands that are destinations
  uint32_t kind = 0;
  uint32_t data = 0;    // per-op constant for shared handlers (e.g. dwords, compare code)
  uint32_t data2 = 0;
  const MfmaInfo* mfma = nullptr;
  uint8_t passes = 0;
};

// Registration API used by exec_*.cpp.
void add_op(const OpInfo& info);
// Lookup (after all families are registered). Returns nullptr when unsupported.
const OpInfo* find_op(std::string_view base_mnemonic, Gfx gfx);

void register_salu_ops();
void register_valu_ops();
void register_vmem_ops();
void register_mfma_ops();

}  // namespace mla::emu
