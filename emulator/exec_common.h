// Shared helpers for instruction handlers (exec_*.cpp) and the executor.
#pragma once
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "emulator/device.h"
#include "emulator/opcodes.h"
#include "emulator/program.h"
#include "emulator/wave.h"

namespace mla::emu {

struct DispatchState {
  Device* dev = nullptr;
  const Program* prog = nullptr;
  const Kernel* kernel = nullptr;
  DispatchOptions opts;
  Gfx gfx = Gfx::gfx942;
  Dim3 grid, block;
  uint64_t kernarg_addr = 0, packet_addr = 0;
  Workgroup* wg = nullptr;
  uint32_t epoch = 1;  // LDS epoch (bumped at every barrier release and workgroup start)
  std::vector<LdsShadow> shadow;
  std::vector<uint8_t> lds_written;  // check_lds_uninit: 1 where the workgroup wrote the byte
  unsigned lds_size = 0;
  uint64_t wave_insts = 0;
  std::mt19937_64 rng;
  // Relaxed mode: (rule, instruction index) -> index into `findings`.
  std::map<std::pair<std::string, uint32_t>, size_t> finding_index;
  uint64_t* exec_counts = nullptr;
  const Wave* last_violation_wave = nullptr;
  uint32_t last_violation_inst = 0;
  std::string last_violation_rule;  // DispatchOptions::exec_counts, sized to the program
  std::vector<Finding> findings;
  // check_memory_model (docs/emulator.md, "Memory model"): one record per wave-instruction that
  // wrote global memory; a byte's shadow (Allocation::coh_pages) names its last record.
  struct CohWrite {
    uint64_t time;   // ds.wave_insts + 1 when the store executed
    uint32_t wg;     // writer's linear workgroup id
    uint32_t inst;   // writer's instruction index
    uint16_t wave;
    uint16_t xcd;
    bool through;    // coherent at agent scope (sc1 store, atomic): in memory, released
  };
  bool coh = false;
  unsigned num_xcds = 8;
  uint32_t wg_linear = 0, wg_xcd = 0;            // the running workgroup
  uint64_t wg_acquire = 0;                        // its last buffer_inv sc1 (time; 0 = none)
  std::vector<uint64_t> wg_release;               // per linear workgroup: its last buffer_wbl2 sc1 (0 = none)
  std::vector<CohWrite> coh_writes;               // record number coh_base + 1 + index
  uint64_t coh_last_time = 0;                     // time of coh_writes.back() (one record per instruction)
  uint64_t coh_serial = 0;                        // this dispatch (Allocation::coh_stamp)
  uint32_t coh_base = 0;                          // record numbers <= coh_base: earlier dispatches
};

inline Gfx Wave::gfx() const { return ds->gfx; }
inline const Inst& Wave::cur() const { return prog->insts[pc]; }

// ---- scalar operands ----
inline uint32_t sread(const Wave& w, const Operand& o, unsigned k = 0) {
  switch (o.kind) {
    case Operand::SGPR: return w.s[o.index + k];
    case Operand::Const: return k == 0 ? o.imm : uint32_t(o.imm64 >> 32);
    case Operand::SCC: return k == 0 ? uint32_t(w.scc) : 0;
    case Operand::VCCZ: return k == 0 ? uint32_t(w.vcc() == 0) : 0;
    case Operand::EXECZ: return k == 0 ? uint32_t(w.exec() == 0) : 0;
    case Operand::Special: return k == 0 ? uint32_t(o.imm64) : uint32_t(o.imm64 >> 32);
    default: return 0;
  }
}
inline uint64_t sread64(const Wave& w, const Operand& o) {
  if (o.kind == Operand::Const) return o.imm64;
  return uint64_t(sread(w, o, 0)) | (uint64_t(sread(w, o, 1)) << 32);
}
inline void swrite(Wave& w, const Operand& o, uint32_t v, unsigned k = 0) {
  if (o.kind == Operand::SGPR) w.s[o.index + k] = v;
}
inline void swrite64(Wave& w, const Operand& o, uint64_t v) {
  swrite(w, o, uint32_t(v), 0);
  swrite(w, o, uint32_t(v >> 32), 1);
}

// ---- vector operands ----
// VGPR index of operand `opi` after s_set_gpr_idx_on relocation.
unsigned vgpr_index_relocated(Wave& w, const Inst& in, unsigned opi);
inline unsigned vgpr_index(Wave& w, const Inst& in, unsigned opi) {
  return w.gpr_idx_on ? vgpr_index_relocated(w, in, opi) : in.ops[opi].index;
}
// 64-lane view of dword k of operand opi (VGPR/AGPR directly, scalars broadcast into tmp).
inline const uint32_t* vsrc(Wave& w, const Inst& in, unsigned opi, unsigned k, uint32_t* tmp) {
  const Operand& o = in.ops[opi];
  if (o.kind == Operand::VGPR) return w.vreg(vgpr_index(w, in, opi) + k);
  if (o.kind == Operand::AGPR) return w.areg(o.index + k);
  uint32_t v = sread(w, o, k);
  for (int l = 0; l < 64; ++l) tmp[l] = v;
  return tmp;
}
inline uint32_t* vdst(Wave& w, const Inst& in, unsigned opi, unsigned k = 0) {
  const Operand& o = in.ops[opi];
  if (o.kind == Operand::AGPR) return w.areg(o.index + k);
  return w.vreg(vgpr_index(w, in, opi) + k);
}

// ---- memory ----
// Global memory: pointer to [addr, addr+n) inside an allocation or a fault ("out_of_bounds").
uint8_t* gmem(Wave& w, uint64_t addr, unsigned n, bool write);
// LDS: bounds check + race bookkeeping; returns the byte pointer.
uint8_t* lds_access(Wave& w, uint32_t addr, unsigned n, bool write);
// An LDS atomic's access (ds_add_*): read then written in one operation. Atomics of different
// waves on the same bytes within one barrier epoch do not race with each other (the hardware
// serialises them, in an order no source fixes); against a plain read or write they do.
uint8_t* lds_access_atomic(Wave& w, uint32_t addr, unsigned n);

// ---- waitcnt scoreboard ----
enum class Queue { VM, LGKM };
// Registers the outstanding operation of the current instruction; its destination registers
// become unreadable until a covering s_waitcnt.
PendingOp& push_pending(Wave& w, Queue q, bool smem, bool lds);

// Retires outstanding operations until at most vm / lgkm remain (s_waitcnt semantics).
void wait_counts(Wave& w, unsigned vm, unsigned lgkm);
// Measurement only: records `bytes` of a vector-memory load as outstanding until `op` retires
// (WorkgroupCounters::vm_load_peak_*).
void count_vm_load(Wave& w, PendingOp& op, uint64_t bytes);
// Marks the LDS range of an LDS-DMA op as invisible until its vmcnt retires.
void register_dma(Wave& w, PendingOp& op);
void barrier_rerecord(Wave& w);

// Floats.
inline float f32(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t b32(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }
inline double f64(uint64_t b) { double f; std::memcpy(&f, &b, 8); return f; }
inline uint64_t b64(double f) { uint64_t b; std::memcpy(&b, &f, 8); return b; }

}  // namespace mla::emu
