// Execution state: waves, workgroups, the running dispatch. Handlers (exec_*.cpp) operate on a
// Wave; the scheduler (executor.cpp) interleaves the waves of one workgroup.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "emulator/counters.h"
#include "emulator/error.h"
#include "emulator/gfx.h"
#include "emulator/inst.h"

namespace mla::emu {

class Device;
struct Program;
struct Workgroup;
struct DispatchState;

// One outstanding memory operation (waitcnt scoreboard).
struct PendingOp {
  uint64_t seq = 0;
  uint32_t inst_index = 0;
  uint64_t issue_clock = 0;             // the wave's clock + stall when the load issued
  bool smem = false, lds = false;       // kind (vm queue entries: lds = LDS-DMA)
  RegRange regs[2];                     // destination registers (unified ids)
  uint8_t nregs = 0;
  // LDS footprint (for barrier-crossing race accounting and DMA visibility).
  bool lds_write = false;
  bool lds_atomic = false;               // DS: a read-modify-write (ds_add_u32 / ds_add_rtn_u32)
  uint32_t lds_lo = 0, lds_hi = 0;      // DMA: contiguous range written at completion
  std::vector<uint32_t> lds_addrs;      // DS: per active lane byte address
  uint8_t lds_bytes = 0;                // DS: bytes per lane
  // Relaxed mode with EarlyRead::previous_value: the destination registers' contents before
  // the load (regs[0..nregs) in order; 1 dword per SGPR, 64 per VGPR/AGPR).
  std::vector<uint32_t> old_vals;
  // Measurement only (WorkgroupCounters::vm_load_peak_*): bytes a vector-memory load brings
  // (active lanes x bytes per lane, LDS-DMA included); 0 for stores and LGKM operations.
  uint32_t vm_load_bytes = 0;
};

// Per-register hazard history.
enum WriterKind : uint8_t { W_NONE = 0, W_VALU, W_TRANS, W_DSTSEL, W_XDL, W_SMFMA, W_SALU, W_OTHER };
struct RegHist {
  uint64_t wclock = 0;       // wait-state clock just after the last writer issued
  uint64_t srcc_clock = 0;   // after the last XDL MFMA that read this register as SrcC
  uint64_t store_clock = 0;  // after the last >64-bit store that read this register as data
  uint16_t dst_first = 0;    // the last writer's destination range (MFMA SrcC "same" check)
  uint8_t dst_count = 0;
  uint8_t wkind = W_NONE;
  uint8_t passes = 0, srcc_passes = 0;
  uint32_t wpc_index = 0;    // instruction index of the last writer (messages)
};

struct Wave {
  // Identity.
  Workgroup* wg = nullptr;
  DispatchState* ds = nullptr;
  const Program* prog = nullptr;
  unsigned id = 0;            // wave index in the workgroup
  // Architectural state.
  uint32_t s[kNumSgprSlots] = {};
  bool scc = false;
  std::vector<uint32_t> vfile;  // unified VGPR/AGPR file, register-major: [reg][64]
  unsigned nvgpr = 0, nagpr = 0, accum_offset = 0, nsgpr = 0;
  uint32_t pc = 0;            // instruction index in prog
  uint32_t next_pc = 0;       // set by branch handlers
  bool done = false, at_barrier = false;
  bool gpr_idx_on = false;
  uint8_t gpr_idx_mode = 0;   // bit0 src0, bit1 src1, bit2 src2, bit3 dst
  uint32_t hwreg[64] = {};
  uint64_t mode_clock_setreg[64] = {};
  bool denorm32 = true, denorm16 = true, ieee = true, dx10_clamp = true, fp16_ovfl = false;
  // Strictness state.
  uint64_t clock = 0;         // wait-state clock
  // Relaxed mode, EarlyRead::latency: wait states spent stalled at s_waitcnt until the retired
  // load landed (issue time + latency); the load-landing time is clock + stall.
  uint64_t stall = 0;
  std::vector<RegHist> hist;  // kNumRegIds
  std::vector<uint8_t> pend;  // kNumRegIds: outstanding load writes
  std::deque<PendingOp> vmq, lgkmq;
  uint64_t vm_load_outstanding = 0;  // measurement only: bytes of the vmq's loads not yet retired
  uint64_t next_seq = 1;
  uint32_t ninst_in_wave = 0;
  uint32_t recent[8] = {};    // indices of the last executed instructions (error context)
  uint32_t nrecent = 0;
  // Counters of this wave's workgroup (aliases into wg).
  WorkgroupCounters* ctr = nullptr;

  uint64_t exec() const { return s[kSgprExec] | (uint64_t(s[kSgprExec + 1]) << 32); }
  void set_exec(uint64_t e) { s[kSgprExec] = uint32_t(e); s[kSgprExec + 1] = uint32_t(e >> 32); }
  uint64_t vcc() const { return s[kSgprVcc] | (uint64_t(s[kSgprVcc + 1]) << 32); }
  void set_vcc(uint64_t e) { s[kSgprVcc] = uint32_t(e); s[kSgprVcc + 1] = uint32_t(e >> 32); }
  uint32_t* vreg(unsigned i) { return &vfile[size_t(i) * 64]; }
  uint32_t* areg(unsigned i) { return &vfile[size_t(accum_offset + i) * 64]; }
  Gfx gfx() const;
  const Inst& cur() const;
  // Throws Error(rule, "...kernel, workgroup, wave, pc, instruction: rule: msg").
  [[noreturn]] void fail(const char* rule, const std::string& msg) const;
  // A timing/race rule violated: fail() in strict mode; in relaxed mode a finding (warned once
  // per rule and pc) and execution goes on. `relaxed_value` says what the emulator does then.
  // `distance`: for waitcnt reads, wait states since the load issued (else -1).
  void violation(const char* rule, const std::string& msg, const char* relaxed_value, int64_t distance = -1);
};

// LDS shadow entry (race detection), one per byte.
struct LdsShadow {
  uint32_t wepoch = 0, repoch = 0, aepoch = 0;  // last plain write, plain read, atomic (ds_add_*)
  uint8_t wwave = 0, rwave = 0, awave = 0;      // their wave (0xff: several read / several atomics)
};

struct Workgroup {
  unsigned id[3] = {0, 0, 0};
  std::vector<uint8_t> lds;
  std::vector<std::unique_ptr<Wave>> waves;
  WorkgroupCounters ctr;
  uint64_t vm_load_outstanding = 0;  // measurement only: the sum of its waves' outstanding load bytes
};

}  // namespace mla::emu
