#include "passes/waitcnt.h"

#include <algorithm>
#include <array>

#include "passes/cfg.h"
#include "program/effects.h"

namespace mla::gen {

namespace {

// Largest counts a wait can name: vmcnt(63) / lgkmcnt(15) mean "no wait". As in LLVM's
// SIInsertWaitcnts, an operation with more younger operations than that is not assumed to
// have retired (the counters do not tell); it is waited for with the largest real count,
// which suffices because completion is in order.
constexpr int kMaxVmWait = 62;
constexpr int kMaxLgkmWait = 14;

// Scoreboard slots: SGPRs, VGPRs, AGPRs, then pseudo-registers for LDS memory: one per LDS-DMA
// region (Inst::dma_regions) and one for this wave's ds_writes.
constexpr int kDmaRegions = 8;
constexpr int kS = 0, kV = 128, kA = kV + 256, kLdsDma = kA + 256, kLdsWrite = kLdsDma + kDmaRegions, kSlots = kLdsWrite + 1;

template <class F>
void for_each_dma_region(uint8_t regions, F&& f) {
  for (int r = 0; r < kDmaRegions; ++r)
    if ((regions >> r) & 1) f(kLdsDma + r);
}

struct Slot {
  int8_t vm = -1;    // younger vm ops issued since the write; -1 = nothing pending
  int8_t lgkm = -1;  // younger LDS ops since the write; -1 = nothing pending
  bool smem = false; // pending lgkm result comes from SMEM (out of order: needs lgkmcnt(0))
  bool operator==(const Slot&) const = default;
};

struct State {
  std::array<Slot, kSlots> slot{};
  // Some SMEM result is outstanding. SMEM returns out of order with the LDS operations that share
  // lgkmcnt, so while one is, only lgkmcnt(0) proves an LDS result landed (LLVM's
  // SIInsertWaitcnts treats a counter with mixed pending event types the same way; the emulator
  // refuses anything weaker).
  bool smem_pending = false;
  bool operator==(const State&) const = default;

  void join(const State& o) {
    smem_pending = smem_pending || o.smem_pending;
    for (int i = 0; i < kSlots; ++i) {
      Slot& a = slot[i];
      const Slot& b = o.slot[i];
      if (b.vm >= 0) a.vm = a.vm < 0 ? b.vm : std::min(a.vm, b.vm);
      if (b.lgkm >= 0) a.lgkm = a.lgkm < 0 ? b.lgkm : std::min(a.lgkm, b.lgkm);
      a.smem = a.smem || b.smem;
    }
  }
};

struct Wait {
  int vm = -1, lgkm = -1;
  bool any() const { return vm >= 0 || lgkm >= 0; }
  void need_vm(int n) { vm = vm < 0 ? n : std::min(vm, n); }
  void need_lgkm(int n) { lgkm = lgkm < 0 ? n : std::min(lgkm, n); }
};

// Scoreboard slots of a register range (program/effects.h); SCC has none.
template <class F>
void for_each_slot(const RegRange& r, F&& f) {
  int base;
  switch (r.file) {
    case File::S: base = kS; break;
    case File::V: base = kV; break;
    case File::A: base = kA; break;
    default: return;
  }
  for (int k = r.first; k < r.first + r.count; ++k) f(base + k);
}

// The registers a load writes its result into: its destination operands.
template <class F>
void for_each_result_slot(const Inst& inst, F&& f) {
  for (const RegEffect& d : effects_of(inst).defs)
    if (d.role == RegEffect::Dst) for_each_slot(d.reg, f);
}

void require(const State& s, int slot, Wait& w) {
  const Slot& x = s.slot[slot];
  if (x.vm >= 0) w.need_vm(x.vm);
  if (x.lgkm >= 0) w.need_lgkm(x.smem || s.smem_pending ? 0 : x.lgkm);
}

// The wait an instruction needs before it may issue.
Wait needed(const State& s, const Inst& inst) {
  Wait w;
  const Effects fx = effects_of(inst);
  for (const RegEffect& u : fx.uses) for_each_slot(u.reg, [&](int slot) { require(s, slot, w); });
  for (const RegEffect& d : fx.defs)
    for_each_slot(d.reg, [&](int slot) {
      // Write after write: a load into a register that an older load of the same in-order
      // queue still targets lands after it, so no wait is needed (as LLVM's SIInsertWaitcnts).
      const Slot& x = s.slot[slot];
      if (inst.cls() == OpClass::VmemLoad && x.lgkm < 0) return;
      if (inst.cls() == OpClass::LdsRead && x.vm < 0 && !x.smem) return;
      require(s, slot, w);
    });
  // This wave's own LDS accesses wait for its LDS DMA into the regions they may touch (the
  // regions are not addresses: Inst::dma_regions, all of them unless the builder was told
  // otherwise); ds_bpermute moves data between lanes and reads no LDS memory.
  if (inst.is_lds() && !inst.has(kLdsCrossbar)) for_each_dma_region(inst.dma_regions, [&](int slot) { require(s, slot, w); });
  // A wave ends with no LDS DMA in flight: the workgroup's LDS may be reallocated once its
  // waves have ended, and an outstanding DMA would still write it.
  if (inst.cls() == OpClass::EndPgm) for_each_dma_region(0xff, [&](int slot) { require(s, slot, w); });
  // A barrier hands LDS to the other waves: this wave's LDS writes (and the DMA into the regions
  // the barrier publishes) must have landed, and its LDS reads must have been performed, before
  // another wave may write what they read (the memory model's workgroup release: lgkmcnt(0) for
  // LDS). Reads whose results are still pending are outstanding reads. DMA into regions the
  // barrier does not publish stays in flight: the kernel's protocol says no other wave touches
  // them before a later barrier publishes them (the emulator's lds_dma rule checks it).
  if (inst.cls() == OpClass::Barrier) {
    for_each_dma_region(inst.dma_regions, [&](int slot) { require(s, slot, w); });
    require(s, kLdsWrite, w);
    for (int k = kV; k < kLdsDma; ++k)
      if (!s.slot[k].smem && s.slot[k].lgkm >= 0) require(s, k, w);
  }
  return w;
}

void apply_wait(State& s, int vm, int lgkm) {
  if (s.smem_pending && lgkm > 0) lgkm = -1;  // proves nothing about lgkm results (see State)
  if (lgkm == 0) s.smem_pending = false;
  for (auto& x : s.slot) {
    if (vm >= 0 && x.vm >= vm) x.vm = -1;
    if (lgkm >= 0 && x.lgkm >= 0 && (lgkm == 0 || (!x.smem && x.lgkm >= lgkm))) {
      x.lgkm = -1;
      x.smem = false;
    }
  }
}

void issue(State& s, const Inst& inst) {
  switch (inst.cls()) {
    case OpClass::VmemLoad:
    case OpClass::VmemStore:
    case OpClass::LdsDma:
      for (auto& x : s.slot)
        if (x.vm >= 0) x.vm = int8_t(std::min(x.vm + 1, kMaxVmWait));
      if (inst.cls() == OpClass::VmemLoad)
        for_each_result_slot(inst, [&](int slot) { s.slot[slot].vm = 0; });
      if (inst.cls() == OpClass::LdsDma) for_each_dma_region(inst.dma_regions, [&](int slot) { s.slot[slot].vm = 0; });
      break;
    case OpClass::LdsRead:
    case OpClass::LdsWrite:
      for (auto& x : s.slot)
        if (x.lgkm >= 0 && !x.smem) x.lgkm = int8_t(std::min(x.lgkm + 1, kMaxLgkmWait));
      if (inst.cls() == OpClass::LdsRead)
        for_each_result_slot(inst, [&](int slot) { s.slot[slot].lgkm = 0, s.slot[slot].smem = false; });
      else
        s.slot[kLdsWrite].lgkm = 0, s.slot[kLdsWrite].smem = false;
      break;
    case OpClass::Smem:
      for_each_result_slot(inst, [&](int slot) { s.slot[slot].lgkm = 0, s.slot[slot].smem = true; });
      s.smem_pending = true;
      break;
    default: break;
  }
}

// Runs a block from `in`; if `out_insts` is given, emits the block with waits inserted.
State run_block(const Program& p, const Cfg::Block& b, State s, std::vector<Inst>* out_insts, int* inserted) {
  for (int i = b.begin; i < b.end; ++i) {
    const Inst& inst = p.insts[i];
    if (inst.cls() == OpClass::Waitcnt) {  // explicit waits already in the program count too
      apply_wait(s, inst.vmcnt, inst.lgkmcnt);
      if (out_insts) out_insts->push_back(inst);
      continue;
    }
    Wait w = needed(s, inst);
    if (w.any()) {
      apply_wait(s, w.vm, w.lgkm);
      if (out_insts) {
        Inst wi;
        wi.info = &op_info("s_waitcnt");
        wi.vmcnt = w.vm;
        wi.lgkmcnt = w.lgkm;
        out_insts->push_back(std::move(wi));
        ++*inserted;
      }
    }
    issue(s, inst);
    if (out_insts) out_insts->push_back(inst);
  }
  return s;
}

}  // namespace

WaitcntStats insert_waitcnts(Program& p) {
  static_assert(kV - kS >= 102, "SGPR slots must cover the addressable SGPRs");
  WaitcntStats stats;
  Cfg cfg = build_cfg(p);
  // States only gain pending entries or shrink distances: the fixed point exists.
  const std::vector<State> in = solve_forward<State>(
      cfg, [&](const Cfg::Block& blk, State s) { return run_block(p, blk, std::move(s), nullptr, nullptr); }, false,
      stats.iterations);
  std::vector<Inst> result;
  result.reserve(p.insts.size() + 16);
  for (size_t b = 0; b < cfg.blocks.size(); ++b) run_block(p, cfg.blocks[b], in[b], &result, &stats.inserted);
  p.insts = std::move(result);
  return stats;
}

}  // namespace mla::gen
