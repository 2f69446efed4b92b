// Instructions: an opcode table keyed by mnemonic, and the instruction record the passes
// read and rewrite. The table says what each opcode is (class, implicit registers, which
// wait counter it increments); the operands say what it touches.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "program/reg.h"

namespace mla::gen {

enum class OpClass : uint8_t {
  Salu,
  Smem,        // scalar loads: lgkmcnt, may return out of order
  Valu,
  ValuTrans,   // transcendental VALU (v_exp/v_log/v_rcp): extra read-after-write hazard
  Mfma,        // XDL matrix ops (v_mfma_*)
  VmemLoad,    // buffer/global loads into VGPRs: vmcnt
  VmemStore,   // buffer/global stores: vmcnt
  LdsDma,      // buffer/global loads that write LDS directly (M0 holds the LDS base): vmcnt
  LdsRead,     // ds_read*: lgkmcnt, in order
  LdsWrite,    // ds_write*: lgkmcnt, in order
  Branch,      // s_branch
  CondBranch,  // s_cbranch_*
  Waitcnt,
  Nop,
  Barrier,
  EndPgm,
  Label,       // pseudo: a branch target
  Other,       // s_setprio, s_sleep ...
};

enum OpFlags : uint32_t {
  kDefScc = 1u << 0,
  kUseScc = 1u << 1,
  kUseVcc = 1u << 2,
  kUseExec = 1u << 3,
  kDefExec = 1u << 4,
  kUseM0 = 1u << 5,
  kReadlane = 1u << 6,   // v_readlane/v_readfirstlane: VALU that writes an SGPR from a lane
  kWritelane = 1u << 7,  // v_writelane: lane select is an SGPR
  kPermlane = 1u << 8,   // v_permlane*_swap: writes both operands
  kAccRead = 1u << 9,    // v_accvgpr_read
  kAccWrite = 1u << 10,  // v_accvgpr_write
  kCvtScale = 1u << 11,
  kLdsCrossbar = 1u << 12,  // ds_bpermute: a DS instruction that touches no LDS memory
};

struct OpInfo {
  std::string_view name;
  OpClass cls;
  uint32_t flags;
};

// Looks up an opcode; throws std::invalid_argument naming it if the table lacks it.
const OpInfo& op_info(std::string_view mnemonic);

// Bits of a VOP3 / VOP3P select modifier, one per listed operand: op_sel:[b0,b1,...].
struct SelBits {
  uint8_t count = 0;  // operands listed; 0: the modifier is absent
  uint8_t bits = 0;   // bit i = operand i
  bool bit(int i) const { return i < count && ((bits >> i) & 1); }
  bool operator==(const SelBits&) const = default;
};

// SDWA operand select (absent: the whole dword).
enum class SdwaSel : uint8_t { none, BYTE_0, BYTE_1, BYTE_2, BYTE_3, WORD_0, WORD_1 };

// Modifiers, typed: builders set fields, the passes read them, and only the printer
// (asm/printer.cpp) renders them as text.
struct Mods {
  bool offen = false;        // MUBUF: the VGPR address is an offset into the resource
  bool idxen = false;        // MUBUF: the (first) VGPR address is a record index (x stride)
  uint32_t offset = 0;       // MUBUF / FLAT / DS immediate byte offset (0: not printed)
  bool lds = false;          // MUBUF: the load writes LDS at M0 (LDS DMA)
  // gfx940 cache policy bits (AMDGPUUsage "Memory Model GFX942"): sc0 on an atomic returns the
  // pre-op value; sc1 on buffer_wbl2 / buffer_inv makes them agent-scope release / acquire.
  bool sc0 = false, sc1 = false;
  SelBits op_sel{};          // VOP3: high halves (last bit: the destination's, where listed)
  SelBits op_sel_hi{};       // VOP3P: operand of the high half (0 = broadcast the low one)
  // DPP quad_perm (lane l of each quad reads lane quad_perm[l % 4]), all rows and banks on.
  SdwaSel src0_sel = SdwaSel::none;  // SDWA: the part of src0 read
  SdwaSel dst_sel = SdwaSel::none;   // SDWA: the part of the destination written
  bool dpp_quad_perm = false;
  uint8_t quad_perm[4] = {0, 1, 2, 3};
  bool operator==(const Mods&) const = default;
  bool is_dpp() const { return dpp_quad_perm; }
};

struct Inst {
  const OpInfo* info = nullptr;
  std::vector<Operand> dst;  // registers written, printed first
  std::vector<Operand> src;  // registers and constants read
  Mods mods;
  int target = -1;           // branch target label, or this label's id for OpClass::Label
  // s_waitcnt counts (-1: no wait on that counter) and s_nop count.
  int vmcnt = -1, lgkmcnt = -1, expcnt = -1;
  int nops = 0;
  // Source operands beyond this many are read by the hardware but not spelled in the
  // assembly (e.g. the kept half of a destination written with op_sel); -1 = print all.
  int printed_src = -1;
  // LDS-DMA ordering (passes/waitcnt.h). An LDS-DMA load names the LDS regions it writes, a
  // barrier the regions whose DMA writes other waves read after it: one bit per region (at
  // most 8, e.g. the slots of a ring), an LDS access (ds_read / ds_write) the regions it may
  // alias. All bits, the default, is always safe: a barrier or an LDS access then waits for
  // every outstanding LDS DMA of the wave.
  uint8_t dma_regions = 0xff;
  // Extra source operands that are implicitly read by the hardware but not printed
  // (e.g. the data VGPRs of a store are printed as src already; M0 for LDS DMA is a flag).
  std::string comment;

  OpClass cls() const { return info->cls; }
  std::string_view name() const { return info->name; }
  bool has(uint32_t flag) const { return (info->flags & flag) != 0; }
  bool is_vmem() const {
    return cls() == OpClass::VmemLoad || cls() == OpClass::VmemStore || cls() == OpClass::LdsDma;
  }
  bool is_lds() const { return cls() == OpClass::LdsRead || cls() == OpClass::LdsWrite; }
  bool is_valu() const { return cls() == OpClass::Valu || cls() == OpClass::ValuTrans; }
};

}  // namespace mla::gen
