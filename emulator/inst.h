// The emulator's compact decoded instruction form.
//
// The decoder (decoder.cpp) turns each MCInst that LLVM's AMDGPU disassembler produces into an
// Inst: a handler pointer plus positional operands (in the order the LLVM printer shows them)
// and the modifiers. Register files are addressed in one unified number space (RegId) so the
// strictness checkers can treat every register alike.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mla::emu {

// Unified register numbering: SGPR file (incl. VCC=106, M0=124, EXEC=126) | VGPRs | AGPRs.
constexpr unsigned kSgprBase = 0, kNumSgprSlots = 128;
constexpr unsigned kVgprBase = 128, kMaxVgpr = 512;
constexpr unsigned kAgprBase = kVgprBase + kMaxVgpr, kMaxAgpr = 256;
constexpr unsigned kNumRegIds = kAgprBase + kMaxAgpr;
constexpr unsigned kSgprVcc = 106, kSgprM0 = 124, kSgprExec = 126, kSgprFlatScratch = 102,
                   kSgprXnackMask = 104;

struct Operand {
  enum Kind : uint8_t {
    None,     // absent / "off"
    SGPR,     // incl. vcc, exec, m0, flat_scratch (mapped into the SGPR slots above)
    VGPR,
    AGPR,
    Const,    // inline constant or literal; value in imm (32-bit view) and imm64 (64-bit view)
    SCC,      // src_scc
    VCCZ,     // src_vccz
    EXECZ,    // src_execz
    LdsDirect,
    Special,  // src_shared_base etc. (value in imm64)
  };
  Kind kind = None;
  uint8_t width = 1;     // in dwords
  uint16_t index = 0;    // register number within its file
  bool neg = false, abs = false, sext = false, literal = false;
  uint32_t imm = 0;      // Const: 32-bit value
  uint64_t imm64 = 0;    // Const: 64-bit value (f64 pattern for float text, sign-extended ints)
  bool is_reg() const { return kind == SGPR || kind == VGPR || kind == AGPR; }
  bool is_vector() const { return kind == VGPR || kind == AGPR; }
  unsigned reg_id() const {
    return kind == SGPR ? kSgprBase + index : kind == VGPR ? kVgprBase + index : kAgprBase + index;
  }
};

// Counter classes (counters.h) of an instruction.
enum class InstClass : uint8_t {
  SALU, VALU, SMEM, VMEM_LOAD, VMEM_STORE, LDS, MFMA, BRANCH, WAITCNT, NOP, BARRIER, OTHER
};

struct Wave;
struct Inst;
using Handler = void (*)(Wave&, const Inst&);

// Instruction flags (Inst::flags).
enum : uint32_t {
  F_OFFEN = 1u << 0, F_IDXEN = 1u << 1, F_GLC = 1u << 2, F_SLC = 1u << 3, F_LDS = 1u << 4,
  F_SC0 = 1u << 5, F_SC1 = 1u << 6, F_NT = 1u << 7, F_CLAMP = 1u << 8, F_BOUND_CTRL = 1u << 9,
  F_FI = 1u << 10, F_SDWA = 1u << 11, F_DPP = 1u << 12, F_VOP3 = 1u << 13, F_GDS = 1u << 14,
  F_TFE = 1u << 15, F_DST_SEXT = 1u << 16,
};

// Register use of an instruction, for the waitcnt scoreboard and the hazard checker.
struct RegRange {
  uint16_t first = 0;  // unified RegId
  uint8_t count = 0;
  uint8_t role = 0;    // see Role
  enum Role : uint8_t { Src = 0, SrcA, SrcB, SrcC, Dst, Addr, Data, LaneSel, Rsrc };
};

struct OpInfo;  // opcode table entry (opcodes.h)

struct Inst {
  Handler fn = nullptr;
  const OpInfo* info = nullptr;
  uint64_t pc = 0;    // virtual address
  uint8_t size = 0;   // bytes
  uint8_t nops = 0;
  Operand ops[6];
  uint32_t flags = 0;
  int32_t offset = 0, offset1 = 0;  // memory offsets (ds: offset0/offset1)
  uint8_t omod = 0;                 // 0 none, 1 mul:2, 2 mul:4, 3 div:2
  uint8_t op_sel = 0, op_sel_hi = 0, neg_lo = 0, neg_hi = 0;  // bit i = source i (bit 3 = dst)
  bool has_op_sel_hi = false;
  // DPP
  uint16_t dpp_ctrl = 0;  // encoded as in the DPP word (quad_perm 0x00-0xff, row_shl 0x101.., ...)
  uint8_t row_mask = 0xf, bank_mask = 0xf;
  // SDWA selects: 0..3 BYTE_n, 4 WORD_0, 5 WORD_1, 6 DWORD; dst_unused 0 pad,1 sext,2 preserve
  uint8_t dst_sel = 6, dst_unused = 0, src0_sel = 6, src1_sel = 6;
  // MFMA modifiers
  uint8_t cbsz = 0, abid = 0, blgp = 0;
  int64_t simm2 = 0;  // second raw immediate (s_setreg_imm32: value; s_set_gpr_idx_on: mode)
  int64_t simm = 0;  // raw immediate of SOPP/SOPK-like instructions (waitcnt, nop, branch...)
  int32_t target = -1;  // branch target instruction index (resolved after decoding)
  std::vector<RegRange> reads, writes;  // filled by the decoder from the opcode table
  bool bad_regs = false;                // an operand is outside the descriptor's allocation
  std::string bad_reg_msg;
  std::string text;  // LLVM's printed form, for messages and disassembly
};

}  // namespace mla::emu
