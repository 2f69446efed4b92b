// Dispatch: device memory, wave setup per AMDGPUUsage, the wave scheduler, and the strictness
// checkers (waitcnt scoreboard, hazard wait states, LDS races, bounds).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <iostream>
#include <numeric>
#include <ostream>

#include "abi/mla_abi.h"
#include "emulator/exec_common.h"
#include "emulator/hazards.h"

namespace mla::emu {

// ------------------------------------------------------------------------------------------
// Device memory
// ------------------------------------------------------------------------------------------

Device::Device(Gfx gfx) : gfx_(gfx) {}
Device::~Device() = default;

uint64_t Device::alloc(size_t bytes, size_t align, std::string name, uint8_t fill) {
  if (align < 4 || (align & (align - 1))) throw Error("dispatch", fmt::format("alloc: alignment {} is not a power of two >= 4", align));
  uint64_t base = (next_ + align - 1) & ~uint64_t(align - 1);
  auto a = std::make_unique<Allocation>();
  a->base = base;
  a->name = name.empty() ? fmt::format("alloc@0x{:x}", base) : std::move(name);
  a->data.assign(bytes, fill);
  // Guard gap of at least 64 KiB (unmapped) after each allocation.
  next_ = base + std::max<size_t>(bytes, 1) + 65536;
  next_ = (next_ + 4095) & ~uint64_t(4095);
  allocs_[base] = std::move(a);
  return base;
}

void Device::free(uint64_t base) {
  auto it = allocs_.find(base);
  if (it == allocs_.end()) throw Error("dispatch", fmt::format("free: 0x{:x} is not an allocation", base));
  if (last_ == it->second.get()) last_ = nullptr;
  allocs_.erase(it);
}

Allocation* Device::find(uint64_t addr, size_t n) {
  if (last_ && addr >= last_->base && addr + n <= last_->base + last_->data.size() && addr + n >= addr) return last_;
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return nullptr;
  --it;
  Allocation* a = it->second.get();
  if (addr + n > a->base + a->data.size() || addr + n < addr) return nullptr;
  last_ = a;
  return a;
}
const Allocation* Device::find(uint64_t addr, size_t n) const { return const_cast<Device*>(this)->find(addr, n); }

const Allocation* Device::nearest_below(uint64_t addr) const {
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return nullptr;
  return std::prev(it)->second.get();
}

void Device::write(uint64_t addr, const void* src, size_t n) {
  Allocation* a = find(addr, n);
  if (!a) throw Error("out_of_bounds", fmt::format("host write of {} bytes at 0x{:x} is outside every allocation", n, addr));
  if (n) std::memcpy(a->data.data() + (addr - a->base), src, n);
}
void Device::read(uint64_t addr, void* dst, size_t n) const {
  const Allocation* a = find(addr, n);
  if (!a) throw Error("out_of_bounds", fmt::format("host read of {} bytes at 0x{:x} is outside every allocation", n, addr));
  if (n) std::memcpy(dst, a->data.data() + (addr - a->base), n);
}

// ------------------------------------------------------------------------------------------
// Errors
// ------------------------------------------------------------------------------------------

void Wave::fail(const char* rule, const std::string& msg) const {
  const Inst* in = pc < prog->insts.size() ? &prog->insts[pc] : nullptr;
  std::string where = fmt::format("kernel {}, workgroup ({},{},{}), wave {}, pc 0x{:x} (+0x{:x})", prog->kernel->name, wg->id[0],
                                  wg->id[1], wg->id[2], id, in ? in->pc : 0, in ? in->pc - prog->kernel->entry_address : 0);
  std::string ctx;
  unsigned n = std::min<unsigned>(nrecent, 8);
  for (unsigned i = n; i > 0; --i) {
    const Inst& r = prog->insts[recent[(nrecent - i) % 8]];
    ctx += fmt::format("\n    +0x{:x}: {}", r.pc - prog->kernel->entry_address, r.text);
  }
  if (!ctx.empty()) ctx = "\n  previous instructions of this wave:" + ctx;
  throw Error(rule, fmt::format("{}, `{}`: {}: {}{}", where, in ? in->text : "<end of code>", rule, msg, ctx));
}

void Wave::violation(const char* rule, const std::string& msg, const char* relaxed_value, int64_t distance) {
  DispatchState& d = *ds;
  if (!d.opts.relaxed) fail(rule, msg);
  // One occurrence per executed instruction and rule (a hazard may name several registers).
  if (d.last_violation_wave == this && d.last_violation_inst == ninst_in_wave && d.last_violation_rule == rule) return;
  d.last_violation_wave = this;
  d.last_violation_inst = ninst_in_wave;
  d.last_violation_rule = rule;
  auto key = std::make_pair(std::string(rule), pc);
  auto note = [&](Finding& f) {
    if (distance < 0) return;
    f.min_distance = f.min_distance < 0 ? distance : std::min(f.min_distance, distance);
    f.max_distance = std::max(f.max_distance, distance);
  };
  auto it = d.finding_index.find(key);
  if (it != d.finding_index.end()) { d.findings[it->second].count++; note(d.findings[it->second]); return; }
  const Inst& in = prog->insts[pc];
  Finding f;
  f.rule = rule;
  f.pc = in.pc - prog->kernel->entry_address;
  f.text = in.text;
  f.message = fmt::format("kernel {}, workgroup ({},{},{}), wave {}, pc 0x{:x} (+0x{:x}), `{}`: {}: {}", prog->kernel->name, wg->id[0],
                          wg->id[1], wg->id[2], id, in.pc, f.pc, in.text, rule, msg);
  f.count = 1;
  note(f);
  d.finding_index.emplace(key, d.findings.size());
  std::ostream& os = d.opts.warnings ? *d.opts.warnings : std::cerr;
  os << fmt::format("mlaemu: warning [{}] (relaxed, reported once per rule and pc): {}; relaxed: {}\n", rule, f.message, relaxed_value);
  d.findings.push_back(std::move(f));
}

void exec_unsupported(Wave& w, const Inst& in) {
  if (!in.bad_reg_msg.empty()) w.fail("unsupported", "the emulator cannot parse this instruction (" + in.bad_reg_msg + ")");
  auto sp = in.text.find(' ');
  w.fail("unsupported", fmt::format("instruction '{}' is not supported by the emulator", in.text.substr(0, sp)));
}
void exec_undecodable(Wave& w, const Inst& in) { w.fail("decode", "bytes do not decode as a " + std::string(gfx_name(w.gfx())) + " instruction"); }

// ------------------------------------------------------------------------------------------
// Operand helpers
// ------------------------------------------------------------------------------------------

unsigned vgpr_index_relocated(Wave& w, const Inst& in, unsigned opi) {
  unsigned idx = in.ops[opi].index;
  if (w.gpr_idx_on) {
    unsigned nd = in.info ? in.info->ndst : 1;
    unsigned bit = opi < nd ? 3 : std::min(opi - nd, 2u);
    if (w.gpr_idx_mode & (1u << bit)) {
      idx += w.s[kSgprM0] & 0xff;
      if (idx + in.ops[opi].width > w.nvgpr)
        w.fail("register_range", fmt::format("s_set_gpr_idx relocates v{} to v{}, beyond the {} VGPRs allocated", in.ops[opi].index, idx, w.nvgpr));
    }
  }
  return idx;
}

// ------------------------------------------------------------------------------------------
// Memory access helpers
// ------------------------------------------------------------------------------------------

static inline void mark_bits(std::vector<uint64_t>& map, size_t off, unsigned n) {
  while (n) {
    unsigned bit = off & 63, take = std::min<unsigned>(n, 64 - bit);
    uint64_t m = take == 64 ? ~0ull : (((1ull << take) - 1) << bit);
    map[off >> 6] |= m;
    off += take;
    n -= take;
  }
}

// ------------------------------------------------------------------------------------------
// Memory model across XCDs (check_memory_model; docs/emulator.md, "Memory model")
// ------------------------------------------------------------------------------------------
// Each XCD's L2 is a write-back cache that is not coherent with the other XCDs' (AMDGPUUsage,
// "Memory Model GFX942"). Workgroups run one after another, so what decides whether a load on
// XCD r may see stale data written on XCD k != r is only: did the bytes reach memory (the
// writer's workgroup executed `buffer_wbl2 sc1` after the store, or the store itself was
// coherent at agent scope: sc1, or an atomic), and may r's L2 hold an older copy (no
// `buffer_inv sc1` of the reader's workgroup after that release, and the load itself not
// coherent at agent scope: sc1, or an atomic). Kernel boundaries write back and invalidate (the
// packet processor's end-of-kernel release and start-of-kernel acquire): the shadow lives for
// one dispatch.

static inline bool coherent_at_agent(const Inst& in) {
  return (in.flags & F_SC1) || (in.info && (in.info->kind & K_ATOMIC));
}

static void coh_write(Wave& w, Allocation& a, size_t off, unsigned n) {
  DispatchState& d = *w.ds;
  if (a.coh_stamp != d.coh_serial) {
    if (a.coh_pages.empty()) a.coh_pages.resize((a.data.size() + 4095) / 4096);
    a.coh_stamp = d.coh_serial;
  }
  const uint64_t now = d.wave_insts + 1;
  if (d.coh_last_time != now || d.coh_writes.empty()) {
    const Inst& in = w.cur();
    d.coh_writes.push_back({now, d.wg_linear, w.pc, uint16_t(w.id), uint16_t(d.wg_xcd), coherent_at_agent(in)});
    d.coh_last_time = now;
  }
  if (d.coh_writes.size() >= 0xFFFFFFF0u - d.coh_base)
    w.fail("dispatch", "more store instructions in one dispatch than the memory-model shadow numbers (2^32)");
  const uint32_t rec = d.coh_base + uint32_t(d.coh_writes.size());
  while (n) {  // page by page
    auto& pg = a.coh_pages[off >> 12];
    if (!pg) pg = std::make_unique<uint32_t[]>(4096);  // value-initialised: zeros
    const unsigned in_page = std::min<unsigned>(n, unsigned(4096 - (off & 4095)));
    std::fill_n(pg.get() + (off & 4095), in_page, rec);
    off += in_page;
    n -= in_page;
  }
}

static void coh_read(Wave& w, const Allocation& a, size_t off, unsigned n) {
  DispatchState& d = *w.ds;
  uint32_t judged = 0;  // the record of the bytes before (same write, same verdict)
  for (unsigned i = 0; i < n; ++i) {
    const size_t o = off + i;
    const uint32_t* pg = a.coh_pages[o >> 12].get();
    if (!pg) continue;
    const uint32_t rec = pg[o & 4095];
    if (rec <= d.coh_base || rec == judged) continue;  // an earlier dispatch's, or judged
    judged = rec;
    const DispatchState::CohWrite& wr = d.coh_writes[rec - d.coh_base - 1];
    if (wr.xcd == d.wg_xcd) continue;  // one L2: coherent
    const uint64_t rel = wr.through ? wr.time : d.wg_release[wr.wg] > wr.time ? d.wg_release[wr.wg] : 0;
    const Inst& in = w.cur();
    if (rel && (coherent_at_agent(in) || d.wg_acquire > rel)) continue;
    const Inst& win = w.prog->insts[wr.inst];
    const unsigned gx = d.grid.x, gy = d.grid.y;
    std::string what = fmt::format(
        "global byte 0x{:x} (buffer '{}' + 0x{:x}) was written in this dispatch by workgroup ({},{},{}) on XCD {}, wave {}, at pc 0x{:x} "
        "(+0x{:x}) `{}`, and this workgroup runs on XCD {}: ",
        a.base + o, a.name, o, wr.wg % gx, (wr.wg / gx) % gy, wr.wg / (gx * gy), wr.xcd, wr.wave, win.pc,
        win.pc - w.prog->kernel->entry_address, win.text, d.wg_xcd);
    if (!rel)
      what += fmt::format("the writer did not release it (no `buffer_wbl2 sc1` of its workgroup after the store, and the store is neither "
                          "sc1 nor an atomic), so on hardware it may still sit in XCD {}'s L2 (the agent-scope release of AMDGPUUsage "
                          "'Memory Model GFX942': buffer_wbl2 sc1; s_waitcnt vmcnt(0); then the releasing store or atomic)",
                          wr.xcd);
    else
      what += fmt::format("this workgroup did not acquire it (no `buffer_inv sc1` of this workgroup after the writer's release, and the "
                          "load is neither sc1 nor an atomic), so on hardware XCD {}'s L2 may hold a stale copy (the agent-scope acquire "
                          "of AMDGPUUsage 'Memory Model GFX942': the acquiring load or atomic; s_waitcnt vmcnt(0); buffer_inv sc1)",
                          d.wg_xcd);
    w.violation("memory_model", what, "the load sees the written bytes (the emulator has one memory and no caches)");
    return;  // one report per access
  }
}

uint8_t* gmem(Wave& w, uint64_t addr, unsigned n, bool write) {
  Allocation* a = w.ds->dev->find(addr, n);
  if (!a) {
    // Name the nearest allocation below to help.
    const Allocation* near = w.ds->dev->nearest_below(addr);
    std::string hint = near ? fmt::format(" (the nearest allocation below is '{}' [0x{:x}, 0x{:x}): {} bytes past its end)", near->name, near->base,
                                          near->base + near->data.size(), addr + n - (near->base + near->data.size()))
                            : "";
    w.fail("out_of_bounds", fmt::format("{} of {} bytes at 0x{:x} is outside every allocation{}", write ? "store" : "load", n, addr, hint));
  }
  size_t off = addr - a->base;
  if (a->internal) return a->data.data() + off;
  if (w.ds->coh) {
    if (write) coh_write(w, *a, off, n);
    else if (a->coh_stamp == w.ds->coh_serial) coh_read(w, *a, off, n);  // written in this dispatch
  }
  bool distinct = w.ds->opts.count_distinct;
  if (write) {
    w.ctr->global_write_bytes += n;
    a->write_bytes += n;
    if (distinct) {
      if (a->write_map.empty()) a->write_map.assign((a->data.size() + 63) / 64, 0);
      mark_bits(a->write_map, off, n);
    }
  } else {
    w.ctr->global_read_bytes += n;
    a->read_bytes += n;
    if (distinct) {
      if (a->read_map.empty()) a->read_map.assign((a->data.size() + 63) / 64, 0);
      mark_bits(a->read_map, off, n);
    }
  }
  return a->data.data() + off;
}

struct DmaRange {
  Wave* wave;
  uint64_t seq;
  uint32_t lo, hi;
};
static thread_local std::vector<DmaRange> g_dma;

static constexpr const char* kRaceRelaxed =
    "the accesses take effect in the order the emulator's scheduler issued them (one ordering the hardware may also pick)";

enum class LdsKind { read, write, atomic };

static uint8_t other_wave(uint8_t recorded, uint8_t me) { return recorded == 0xff ? (me == 0 ? 1 : 0) : recorded; }

static void lds_race_record(Wave& w, uint32_t addr, unsigned n, LdsKind kind, uint32_t epoch) {
  auto& sh = w.ds->shadow;
  uint8_t me = uint8_t(w.id);
  bool reported = false;  // one finding per access, not per byte
  const char* what = kind == LdsKind::read ? "read" : kind == LdsKind::write ? "written" : "updated by an atomic";
  for (unsigned i = 0; i < n; ++i) {
    LdsShadow& e = sh[addr + i];
    // Which other access of this epoch conflicts: a plain write with anything; a plain read with
    // writes and atomics; an atomic with plain reads and writes (not with other atomics).
    const bool w_other = e.wepoch == epoch && e.wwave != me;
    const bool r_other = e.repoch == epoch && e.rwave != me;
    const bool a_other = e.aepoch == epoch && e.awave != me;
    const char* against = nullptr;
    uint8_t by = 0;
    if (w_other) against = "written", by = e.wwave;
    else if (kind != LdsKind::read && r_other) against = "read", by = other_wave(e.rwave, me);
    else if (kind != LdsKind::atomic && a_other) against = "updated by an atomic", by = other_wave(e.awave, me);
    if (!reported && against) {
      reported = true;
      w.violation("lds_race", fmt::format("LDS byte 0x{:x} is {} by wave {} and {} by wave {} with no s_barrier between",
                                          addr + i, what, w.id, against, by), kRaceRelaxed);
    }
    if (kind == LdsKind::write) {
      e.wepoch = epoch;
      e.wwave = me;
    } else if (kind == LdsKind::read) {
      if (e.repoch == epoch && e.rwave != me) e.rwave = 0xff;
      else { e.repoch = epoch; e.rwave = me; }
    } else {
      if (e.aepoch == epoch && e.awave != me) e.awave = 0xff;
      else { e.aepoch = epoch; e.awave = me; }
    }
  }
}

static uint8_t* lds_access_kind(Wave& w, uint32_t addr, unsigned n, LdsKind kind) {
  DispatchState& ds = *w.ds;
  const bool reads = kind != LdsKind::write, writes = kind != LdsKind::read;
  if (uint64_t(addr) + n > ds.lds_size)
    w.fail("out_of_bounds", fmt::format("LDS {} of {} bytes at 0x{:x} is beyond the {} bytes the kernel allocates (group_segment_fixed_size)",
                                        kind == LdsKind::atomic ? "atomic" : writes ? "write" : "read", n, addr, ds.lds_size));
  if (!g_dma.empty() && ds.opts.check_lds_dma)
    for (auto& d : g_dma)
      if (addr < d.hi && addr + n > d.lo) {
        w.violation("lds_dma", fmt::format("LDS bytes [0x{:x},0x{:x}) are still being written by an outstanding LDS-DMA load of wave {} "
                                           "(not yet covered by s_waitcnt vmcnt)", std::max(addr, d.lo), std::min(addr + n, d.hi), d.wave->id),
                    "the DMA's bytes are already in LDS (the emulator writes them when the load issues), as if it had completed");
        break;
      }
  if (writes) w.ctr->lds_write_bytes += n;
  if (reads) w.ctr->lds_read_bytes += n;
  if (ds.opts.check_lds_uninit) {
    // Every write marks its bytes, LDS-DMA lanes included (an out-of-range lane writes zeros:
    // docs/emulator-provenance.md); a read of a byte no access of this workgroup wrote sees
    // whatever an earlier workgroup on the CU left there (an atomic reads first).
    uint8_t* mark = ds.lds_written.data() + addr;
    if (reads)
      if (const void* z = std::memchr(mark, 0, n))
        w.violation("lds_uninit",
                    fmt::format("LDS byte 0x{:x} is read before this workgroup wrote it (LDS is not initialised when a "
                                "workgroup starts: it holds what an earlier workgroup left)",
                                addr + uint32_t(static_cast<const uint8_t*>(z) - mark)),
                    "the read sees zeros (the emulator clears LDS when a workgroup starts)");
    if (writes) std::memset(mark, 1, n);
  }
  if (ds.opts.check_lds_race && ds.wg->waves.size() > 1) lds_race_record(w, addr, n, kind, ds.epoch);
  return ds.wg->lds.data() + addr;
}

uint8_t* lds_access(Wave& w, uint32_t addr, unsigned n, bool write) {
  return lds_access_kind(w, addr, n, write ? LdsKind::write : LdsKind::read);
}

uint8_t* lds_access_atomic(Wave& w, uint32_t addr, unsigned n) { return lds_access_kind(w, addr, n, LdsKind::atomic); }

// ------------------------------------------------------------------------------------------
// Waitcnt scoreboard
// ------------------------------------------------------------------------------------------

PendingOp& push_pending(Wave& w, Queue q, bool smem, bool lds) {
  const Inst& in = w.cur();
  auto& queue = q == Queue::VM ? w.vmq : w.lgkmq;
  PendingOp op;
  op.seq = w.next_seq++;
  op.inst_index = w.pc;
  op.issue_clock = w.clock + w.stall;
  op.smem = smem;
  op.lds = lds;
  for (auto& r : in.writes) {
    if (op.nregs < 2) op.regs[op.nregs++] = r;
    for (unsigned i = 0; i < r.count; ++i) w.pend[r.first + i]++;
  }
  queue.push_back(std::move(op));
  return queue.back();
}

void count_vm_load(Wave& w, PendingOp& op, uint64_t bytes) {
  op.vm_load_bytes = uint32_t(bytes);
  w.vm_load_outstanding += bytes;
  w.ctr->vm_load_peak_wave_bytes = std::max(w.ctr->vm_load_peak_wave_bytes, w.vm_load_outstanding);
  if (w.wg) {
    w.wg->vm_load_outstanding += bytes;
    w.ctr->vm_load_peak_wg_bytes = std::max(w.ctr->vm_load_peak_wg_bytes, w.wg->vm_load_outstanding);
  }
}

static void retire(Wave& w, PendingOp& op) {
  if (op.vm_load_bytes) {
    w.vm_load_outstanding -= op.vm_load_bytes;
    if (w.wg) w.wg->vm_load_outstanding -= op.vm_load_bytes;
    op.vm_load_bytes = 0;
  }
  for (unsigned k = 0; k < op.nregs; ++k)
    for (unsigned i = 0; i < op.regs[k].count; ++i) w.pend[op.regs[k].first + i]--;
  if (op.lds && op.lds_hi > op.lds_lo)
    std::erase_if(g_dma, [&](const DmaRange& d) { return d.wave == &w && d.seq == op.seq; });
}

void register_dma(Wave& w, PendingOp& op) { g_dma.push_back({&w, op.seq, op.lds_lo, op.lds_hi}); }

// Relaxed mode, latency model: a wave waiting on a load that has not landed yet stalls until it
// lands, so the loads issued after it are that much closer to landing at the next read.
static void stall_until_landed(Wave& w, const PendingOp& op, bool vm) {
  const DispatchOptions& o = w.ds->opts;
  if (!o.relaxed || o.early_read != DispatchOptions::EarlyRead::latency) return;
  uint64_t lat = vm ? o.vmem_latency : op.smem ? o.smem_latency : o.lds_latency;
  uint64_t now = w.clock + w.stall;
  if (op.issue_clock + lat > now) w.stall += op.issue_clock + lat - now;
}

void wait_counts(Wave& w, unsigned vm, unsigned lgkm) {
  while (w.vmq.size() > vm) { stall_until_landed(w, w.vmq.front(), true); retire(w, w.vmq.front()); w.vmq.pop_front(); }
  if (w.lgkmq.size() > lgkm) {
    bool has_smem = std::any_of(w.lgkmq.begin(), w.lgkmq.end(), [](const PendingOp& o) { return o.smem; });
    if (has_smem && lgkm > 0) return;  // out-of-order returns: only lgkmcnt(0) proves anything
    while (w.lgkmq.size() > lgkm) { stall_until_landed(w, w.lgkmq.front(), false); retire(w, w.lgkmq.front()); w.lgkmq.pop_front(); }
  }
}

static std::string reg_name(unsigned id) {
  if (id < kVgprBase) {
    if (id == kSgprVcc) return "vcc_lo";
    if (id == kSgprVcc + 1) return "vcc_hi";
    if (id == kSgprExec) return "exec_lo";
    if (id == kSgprExec + 1) return "exec_hi";
    if (id == kSgprM0) return "m0";
    return fmt::format("s{}", id);
  }
  if (id < kAgprBase) return fmt::format("v{}", id - kVgprBase);
  return fmt::format("a{}", id - kAgprBase);
}

static const PendingOp* find_pending(const Wave& w, unsigned reg, bool* in_vm) {
  for (auto* q : {&w.vmq, &w.lgkmq})
    for (auto& op : *q)
      for (unsigned k = 0; k < op.nregs; ++k)
        if (reg >= op.regs[k].first && reg < unsigned(op.regs[k].first + op.regs[k].count)) {
          if (in_vm) *in_vm = q == &w.vmq;
          return &op;
        }
  return nullptr;
}

static bool landed(const Wave& w, const PendingOp& op, bool vm);

static void pending_fail(Wave& w, unsigned reg, const char* what, bool read) {
  bool vm = false;
  const PendingOp* op = find_pending(w, reg, &vm);
  std::string src = op ? fmt::format("`{}` at pc 0x{:x}", w.prog->insts[op->inst_index].text, w.prog->insts[op->inst_index].pc) : "a load";
  w.violation("waitcnt", fmt::format("{} {} while {} still has it outstanding (no s_waitcnt {} covers it yet)", what, reg_name(reg), src,
                                     vm ? "vmcnt" : "lgkmcnt"),
              !read ? "the load's result landed before this write; the register holds what this instruction writes"
              : !op || landed(w, *op, vm)
                  ? "the read sees the load's data (the load landed before the read, as on hardware whose timing worked out)"
                  : "the read sees the register's previous value (the load has not landed yet: the read issued within the load's "
                    "latency); the load's data lands after this instruction",
              read && op ? int64_t(w.clock + w.stall - op->issue_clock) : -1);
}

// A register's storage: 1 dword (SGPR) or 64 lanes (VGPR/AGPR) in the unified numbering.
static uint32_t* reg_storage(Wave& w, unsigned id, unsigned& lanes) {
  if (id < kVgprBase) { lanes = 1; return &w.s[id]; }
  lanes = 64;
  if (id < kAgprBase) return w.vreg(id - kVgprBase);
  return w.areg(id - kAgprBase);
}

// The contents `reg` had before `op` (relaxed mode, EarlyRead::previous_value), or nullptr.
static const uint32_t* old_value(Wave& w, const PendingOp& op, unsigned reg) {
  size_t off = 0;
  for (unsigned k = 0; k < op.nregs; ++k)
    for (unsigned i = 0; i < op.regs[k].count; ++i) {
      unsigned id = op.regs[k].first + i, lanes;
      reg_storage(w, id, lanes);
      if (id == reg) return off + lanes <= op.old_vals.size() ? &op.old_vals[off] : nullptr;
      off += lanes;
    }
  return nullptr;
}

// Relaxed mode: has `op` landed by now (EarlyRead::latency), or never before its waitcnt (previous_value)?
static bool landed(const Wave& w, const PendingOp& op, bool vm) {
  const DispatchOptions& o = w.ds->opts;
  if (o.early_read == DispatchOptions::EarlyRead::loaded_value) return true;
  if (o.early_read == DispatchOptions::EarlyRead::previous_value) return false;
  uint64_t lat = vm ? o.vmem_latency : op.smem ? o.smem_latency : o.lds_latency;
  return w.clock + w.stall - op.issue_clock >= lat;
}

// Registers whose load has not landed yet (relaxed, previous_value): swapped in for one instruction.
struct EarlyReadSwap {
  unsigned reg;
  std::array<uint32_t, 64> loaded;
};

static void check_pending(Wave& w, const Inst& in, std::vector<EarlyReadSwap>* early) {
  bool reported = false;
  for (auto& r : in.reads)
    for (unsigned i = 0; i < r.count; ++i) {
      unsigned reg = r.first + i;
      if (!w.pend[reg]) continue;
      if (!reported) { pending_fail(w, reg, "reads", true); reported = true; }
      if (!early) continue;  // loaded_value: the register already holds the load's data
      bool vm = false;
      const PendingOp* op = find_pending(w, reg, &vm);
      if (op && landed(w, *op, vm)) continue;
      const uint32_t* old = op ? old_value(w, *op, reg) : nullptr;
      if (!old || std::any_of(early->begin(), early->end(), [&](const EarlyReadSwap& e) { return e.reg == reg; })) continue;
      unsigned lanes;
      uint32_t* p = reg_storage(w, reg, lanes);
      EarlyReadSwap e;
      e.reg = reg;
      std::memcpy(e.loaded.data(), p, lanes * 4);
      std::memcpy(p, old, lanes * 4);
      early->push_back(e);
    }
  if (in.writes.empty()) return;
  uint32_t k = in.info ? in.info->kind : 0;
  for (auto& r : in.writes)
    for (unsigned i = 0; i < r.count; ++i) {
      unsigned reg = r.first + i;
      if (!w.pend[reg]) continue;
      bool vm = false;
      const PendingOp* op = find_pending(w, reg, &vm);
      // In-order returns of the same counter may overwrite each other (VMEM after VMEM, LDS after LDS).
      bool ok = op && ((vm && (k & K_VMEM) && (k & K_LOAD)) || (!vm && !op->smem && (k & K_LDS) && (k & K_LOAD)));
      if (!ok) { pending_fail(w, reg, "overwrites", false); return; }
    }
}

// ------------------------------------------------------------------------------------------
// Dispatch
// ------------------------------------------------------------------------------------------

class Executor {
 public:
  static Counters run(Device& dev, std::shared_ptr<const CodeObject> co, std::string_view kname, Dim3 grid, Dim3 block,
                      std::vector<uint8_t> kernarg, const DispatchOptions& opts);
};

static void step(Wave& w) {
  DispatchState& ds = *w.ds;
  if (w.pc >= w.prog->insts.size()) w.fail("decode", "execution ran past the end of the kernel's code");
  const Inst& in = w.prog->insts[w.pc];
  if (in.bad_regs) w.fail("register_range", in.bad_reg_msg);
  // Relaxed mode, EarlyRead::previous_value: loads keep the destination's previous contents so that
  // a read before the covering s_waitcnt sees them (swapped in for that one instruction).
  const bool prev_mode = ds.opts.relaxed && ds.opts.check_waitcnt && ds.opts.early_read != DispatchOptions::EarlyRead::loaded_value;
  thread_local std::vector<EarlyReadSwap> early;
  thread_local std::vector<uint32_t> snap;
  early.clear();
  if (ds.opts.check_waitcnt) check_pending(w, in, prev_mode ? &early : nullptr);
  const bool snap_load = prev_mode && in.info && (in.info->kind & K_LOAD) && !in.writes.empty();
  if (snap_load) {
    snap.clear();
    unsigned nr = 0;
    for (auto& r : in.writes) {
      if (nr++ >= 2) break;  // push_pending keeps the first two ranges
      for (unsigned i = 0; i < r.count; ++i) {
        unsigned lanes;
        uint32_t* p = reg_storage(w, r.first + i, lanes);
        snap.insert(snap.end(), p, p + lanes);
      }
    }
  }
  if (ds.opts.check_hazards && in.info) check_hazards(w, in);
  uint32_t here = w.pc;
  w.next_pc = here + 1;
  if (ds.opts.trace)
    *ds.opts.trace << fmt::format("wg {},{},{} wave {} +0x{:x}: {}\n", w.wg->id[0], w.wg->id[1], w.wg->id[2], w.id,
                                  in.pc - w.prog->kernel->entry_address, in.text);
  in.fn(w, in);
  if (!early.empty())  // the load lands after this instruction
    for (auto& e : early) {
      unsigned lanes;
      uint32_t* p = reg_storage(w, e.reg, lanes);
      std::memcpy(p, e.loaded.data(), lanes * 4);
    }
  if (snap_load)
    for (auto* q : {&w.vmq, &w.lgkmq})
      if (!q->empty() && q->back().seq + 1 == w.next_seq && q->back().inst_index == here) q->back().old_vals = snap;
  if (ds.exec_counts) ds.exec_counts[here]++;
  w.recent[w.nrecent++ % 8] = here;
  if (in.info && ds.opts.check_hazards) record_hazards(w, in);
  w.pc = w.next_pc;
  if (in.info) {
    w.ctr->insts[size_t(in.info->cls)]++;
    w.clock += in.info->cls == InstClass::NOP && in.text.rfind("s_nop", 0) == 0 ? uint64_t(in.simm & 0xf) + 1 : 1;
  }
  w.ctr->wave_insts++;
  if (++ds.wave_insts > ds.opts.max_wave_instructions)
    w.fail("runaway", fmt::format("more than {} wave-instructions executed", ds.opts.max_wave_instructions));
  if (++w.ninst_in_wave > ds.opts.max_instructions_per_wave)
    w.fail("runaway", fmt::format("this wave executed more than {} instructions (DispatchOptions::max_instructions_per_wave)",
                                  ds.opts.max_instructions_per_wave));
}

static void fill_hidden_args(const Kernel& k, std::vector<uint8_t>& ka, size_t provided, Dim3 grid, Dim3 block, uint32_t dynamic_lds) {
  auto put = [&](uint32_t off, uint64_t v, uint32_t size) {
    if (off < provided || off + size > ka.size()) return;
    std::memcpy(ka.data() + off, &v, std::min<uint32_t>(size, 8));
  };
  unsigned dims = grid.z * block.z > 1 ? 3 : grid.y * block.y > 1 ? 2 : 1;
  for (auto& a : k.args) {
    const std::string& v = a.value_kind;
    if (v == "hidden_block_count_x") put(a.offset, grid.x, 4);
    else if (v == "hidden_block_count_y") put(a.offset, grid.y, 4);
    else if (v == "hidden_block_count_z") put(a.offset, grid.z, 4);
    else if (v == "hidden_group_size_x") put(a.offset, block.x, 2);
    else if (v == "hidden_group_size_y") put(a.offset, block.y, 2);
    else if (v == "hidden_group_size_z") put(a.offset, block.z, 2);
    else if (v == "hidden_grid_dims") put(a.offset, dims, 2);
    else if (v == "hidden_dynamic_lds_size") put(a.offset, dynamic_lds, 4);
  }
}

Counters Executor::run(Device& dev, std::shared_ptr<const CodeObject> co, std::string_view kname, Dim3 grid, Dim3 block,
                       std::vector<uint8_t> kernarg, const DispatchOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  if (co->gfx() != dev.gfx())
    throw Error("dispatch", fmt::format("code object {} is for {} but the device is {}", co->name(), gfx_name(co->gfx()), gfx_name(dev.gfx())));
  const Kernel& k = co->kernel(kname);
  auto key = std::make_pair(co.get(), std::string(kname));
  auto pit = dev.programs_.find(key);
  if (pit == dev.programs_.end()) pit = dev.programs_.emplace(key, build_program(co, k)).first;
  const Program& prog = *pit->second;

  unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024)
    throw Error("dispatch", fmt::format("workgroup size {}x{}x{} is invalid (1..1024 work-items)", block.x, block.y, block.z));
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw Error("dispatch", "grid has a zero dimension");
  if (k.kd.private_segment_fixed_size > 0)
    throw Error("unsupported", fmt::format("kernel {} uses {} bytes of scratch; the emulator has no private segment", k.name,
                                           k.kd.private_segment_fixed_size));

  DispatchState ds;
  ds.dev = &dev;
  ds.prog = &prog;
  ds.kernel = &k;
  ds.opts = opts;
  ds.gfx = co->gfx();
  ds.grid = grid;
  ds.block = block;
  ds.rng.seed(opts.random_seed);
  if (opts.exec_counts) {
    if (opts.exec_counts->size() < prog.insts.size()) opts.exec_counts->resize(prog.insts.size(), 0);
    ds.exec_counts = opts.exec_counts->data();
  }
  ds.lds_size = k.kd.group_segment_fixed_size + opts.dynamic_lds;
  unsigned max_lds = ds.gfx == Gfx::gfx950 ? 160 * 1024 : 64 * 1024;
  if (ds.lds_size > max_lds) throw Error("dispatch", fmt::format("kernel {} needs {} bytes of LDS; {} has {}", k.name, ds.lds_size, gfx_name(ds.gfx), max_lds));

  // Kernarg segment.
  size_t provided = kernarg.size();
  size_t kasize = std::max<size_t>({provided, k.kd.kernarg_size, k.metadata_kernarg_size});
  if (kasize > (1u << 20)) throw Error("dispatch", fmt::format("kernel {}: kernarg segment of {} bytes is implausible", k.name, kasize));
  kernarg.resize(kasize, 0);
  fill_hidden_args(k, kernarg, provided, grid, block, opts.dynamic_lds);
  ds.kernarg_addr = dev.alloc(std::max<size_t>(kasize, 4), 256, "kernarg");
  dev.find(ds.kernarg_addr, 1)->internal = true;
  dev.write(ds.kernarg_addr, kernarg.data(), kernarg.size());
  if (k.kd.user_sgpr(1)) {
    ds.packet_addr = dev.alloc(64, 64, "dispatch_packet");
    dev.find(ds.packet_addr, 1)->internal = true;
    uint8_t pkt[64] = {};
    auto p16 = [&](int o, uint16_t v) { std::memcpy(pkt + o, &v, 2); };
    auto p32 = [&](int o, uint32_t v) { std::memcpy(pkt + o, &v, 4); };
    auto p64 = [&](int o, uint64_t v) { std::memcpy(pkt + o, &v, 8); };
    p16(2, uint16_t(block.z > 1 ? 3 : block.y > 1 || grid.y > 1 ? 2 : 1));
    p16(4, uint16_t(block.x)); p16(6, uint16_t(block.y)); p16(8, uint16_t(block.z));
    p32(12, grid.x * block.x); p32(16, grid.y * block.y); p32(20, grid.z * block.z);
    p32(28, ds.lds_size);
    p64(32, k.kd_address);
    p64(40, ds.kernarg_addr);
    dev.write(ds.packet_addr, pkt, 64);
  }
  // Distinct-byte maps.
  for (auto& [b, a] : dev.allocs_) {
    a->read_map.clear();
    a->write_map.clear();
    a->read_bytes = a->write_bytes = 0;
  }
  // Workgroup order (DispatchOptions::workgroup_order / workgroup_order_seed) and the memory model.
  const uint64_t nwg = uint64_t(grid.x) * grid.y * grid.z;
  if (nwg > (1ull << 32)) throw Error("dispatch", fmt::format("grid of {} workgroups is implausible", nwg));
  std::vector<uint32_t> order;
  if (!opts.workgroup_order.empty()) {
    order = opts.workgroup_order;
    std::vector<uint8_t> seen(nwg, 0);
    bool ok = order.size() == nwg;
    for (size_t i = 0; ok && i < order.size(); ++i) ok = order[i] < nwg && !seen[order[i]]++;
    if (!ok) throw Error("dispatch", fmt::format("workgroup_order ({} entries) is not a permutation of the {} linear workgroup ids", order.size(), nwg));
  } else if (opts.workgroup_order_seed) {
    order.resize(nwg);
    std::iota(order.begin(), order.end(), 0u);
    std::mt19937_64 orng(opts.workgroup_order_seed);
    std::shuffle(order.begin(), order.end(), orng);
  }
  ds.coh = opts.check_memory_model;
  ds.num_xcds = opts.num_xcds ? opts.num_xcds : unsigned(abi::facts(ds.gfx == Gfx::gfx942 ? abi::Target::gfx942 : abi::Target::gfx950).num_xcds);
  if (ds.coh) {
    ds.wg_release.assign(nwg, 0);
    if (dev.coh_next_ > 0xF0000000u) {  // record numbers run out: forget earlier dispatches' (released anyway)
      for (auto& [b, a] : dev.allocs_) { a->coh_pages.clear(); a->coh_stamp = 0; }
      dev.coh_next_ = 0;
    }
    ds.coh_base = dev.coh_next_;
    ds.coh_serial = ++dev.coh_serial_;
  }
  if (opts.check_lds_race) ds.shadow.assign(std::max(ds.lds_size, 1u), LdsShadow{});
  if (opts.check_lds_uninit) ds.lds_written.assign(std::max(ds.lds_size, 1u), 0);
  g_dma.clear();

  Counters out;
  unsigned nwaves = (threads + 63) / 64;
  Workgroup wg;
  wg.lds.assign(ds.lds_size, 0);
  for (unsigned i = 0; i < nwaves; ++i) {
    auto w = std::make_unique<Wave>();
    w->vfile.assign(size_t(prog.accum_offset + prog.nagpr) * 64, opts.poison);
    w->hist.assign(kNumRegIds, RegHist{});
    w->pend.assign(kNumRegIds, 0);
    wg.waves.push_back(std::move(w));
  }
  ds.wg = &wg;
  uint32_t epoch_counter = 1;
  const auto& kd = k.kd;

  auto clear_coh = [&] {  // the kernel boundary: this dispatch's records become earlier ones
    if (ds.coh) dev.coh_next_ = ds.coh_base + uint32_t(ds.coh_writes.size()) + 1;
  };
  try {
        for (uint64_t wi_ = 0; wi_ < nwg; ++wi_) {
          const uint32_t lin = order.empty() ? uint32_t(wi_) : order[wi_];
          const unsigned gx = lin % grid.x, gy = (lin / grid.x) % grid.y, gz = lin / (grid.x * grid.y);
          ds.wg_linear = lin;
          ds.wg_xcd = lin % ds.num_xcds;
          ds.wg_acquire = 0;
          wg.id[0] = gx; wg.id[1] = gy; wg.id[2] = gz;
          wg.ctr = WorkgroupCounters{};
          wg.vm_load_outstanding = 0;
          wg.ctr.id[0] = gx; wg.ctr.id[1] = gy; wg.ctr.id[2] = gz;
          wg.ctr.waves = nwaves;
          std::fill(wg.lds.begin(), wg.lds.end(), 0);
          std::fill(ds.lds_written.begin(), ds.lds_written.end(), 0);
          ds.epoch = ++epoch_counter;
          for (unsigned wi = 0; wi < nwaves; ++wi) {
            Wave& w = *wg.waves[wi];
            w.wg = &wg; w.ds = &ds; w.prog = &prog; w.id = wi; w.ctr = &wg.ctr;
            w.nvgpr = prog.nvgpr; w.nagpr = prog.nagpr; w.accum_offset = prog.accum_offset; w.nsgpr = prog.nsgpr;
            std::fill(std::begin(w.s), std::end(w.s), opts.poison);
            std::fill(w.vfile.begin(), w.vfile.end(), opts.poison);
            std::fill(w.hist.begin(), w.hist.end(), RegHist{});
            std::fill(w.pend.begin(), w.pend.end(), 0);
            w.vmq.clear(); w.lgkmq.clear();
            w.vm_load_outstanding = 0;
            w.nrecent = 0;
            w.ninst_in_wave = 0;
            w.scc = false; w.pc = prog.entry; w.done = false; w.at_barrier = false;
            w.gpr_idx_on = false; w.gpr_idx_mode = 0;
            w.clock = 100;  // far from any writer
            w.stall = 0;
            unsigned dm = kd.float_denorm_mode_32();
            w.denorm32 = dm != 0;
            w.denorm16 = kd.float_denorm_mode_16_64() != 0;
            w.ieee = kd.ieee_mode();
            w.dx10_clamp = kd.dx10_clamp();
            w.fp16_ovfl = (kd.rsrc1 >> 26) & 1;
            // User SGPRs.
            unsigned s = 0;
            auto put = [&](uint64_t v, unsigned n) { for (unsigned j = 0; j < n; ++j) w.s[s++] = j < 2 ? uint32_t(v >> (32 * j)) : 0; };
            if (kd.user_sgpr(0)) put(0, 4);
            if (kd.user_sgpr(1)) put(ds.packet_addr, 2);
            if (kd.user_sgpr(2)) put(0, 2);
            if (kd.user_sgpr(3)) put(ds.kernarg_addr, 2);
            if (kd.user_sgpr(4)) put(0, 2);
            if (kd.user_sgpr(5)) put(0, 2);
            if (kd.user_sgpr(6)) put(0, 1);
            for (unsigned j = 0; j < kd.preload_length(); ++j) {
              uint32_t v = 0;
              size_t off = (kd.preload_offset() + j) * 4;
              if (off + 4 <= kernarg.size()) std::memcpy(&v, kernarg.data() + off, 4);
              w.s[s++] = v;
            }
            s = std::max(s, kd.user_sgpr_count());
            if (kd.wg_id(0)) w.s[s++] = gx;
            if (kd.wg_id(1)) w.s[s++] = gy;
            if (kd.wg_id(2)) w.s[s++] = gz;
            if (kd.wg_info()) w.s[s++] = 0;
            if (kd.enable_private_segment()) w.s[s++] = 0;
            // VGPR v0: packed work-item ids; EXEC: live lanes.
            uint64_t exec = 0;
            uint32_t* v0 = w.vreg(0);
            for (unsigned l = 0; l < 64; ++l) {
              unsigned t = wi * 64 + l;
              if (t >= threads) continue;
              exec |= 1ull << l;
              unsigned x = t % block.x, y = (t / block.x) % block.y, z = t / (block.x * block.y);
              v0[l] = x | (y << 10) | (z << 20);
            }
            w.set_exec(exec);
            w.set_vcc(0);
          }
          // Schedule.
          size_t rr = 0;
          std::vector<Wave*> runnable;
          runnable.reserve(nwaves);
          for (;;) {
            runnable.clear();
            unsigned alive = 0;
            for (auto& wp : wg.waves) {
              if (wp->done) continue;
              ++alive;
              if (!wp->at_barrier) runnable.push_back(wp.get());
            }
            if (alive == 0) break;
            if (runnable.empty()) {
              // Barrier release.
              ds.epoch = ++epoch_counter;
              for (auto& wp : wg.waves) {
                if (wp->done) continue;
                wp->at_barrier = false;
                if (opts.check_lds_race) barrier_rerecord(*wp);
              }
              continue;
            }
            Wave* w;
            if (opts.random_seed) w = runnable[ds.rng() % runnable.size()];
            else { w = runnable[rr % runnable.size()]; ++rr; }
            for (unsigned q = 0; q < std::max(1u, opts.quantum) && !w->done && !w->at_barrier; ++q) step(*w);
          }
          for (auto& wp : wg.waves) {  // s_endpgm retires everything
            while (!wp->vmq.empty()) { retire(*wp, wp->vmq.front()); wp->vmq.pop_front(); }
            while (!wp->lgkmq.empty()) { retire(*wp, wp->lgkmq.front()); wp->lgkmq.pop_front(); }
          }
          out.total.add(wg.ctr);
          if (opts.per_workgroup) out.per_workgroup.push_back(wg.ctr);
          out.workgroups++;
        }
  } catch (...) {
    clear_coh();
    g_dma.clear();
    dev.free(ds.kernarg_addr);
    if (ds.packet_addr) dev.free(ds.packet_addr);
    throw;
  }
  clear_coh();
  dev.free(ds.kernarg_addr);
  if (ds.packet_addr) dev.free(ds.packet_addr);
  for (auto& [b, a] : dev.allocs_) {
    BufferTraffic t{a->name, a->read_bytes, 0, a->write_bytes, 0};
    for (auto x : a->read_map) t.read_distinct += __builtin_popcountll(x);
    for (auto x : a->write_map) t.written_distinct += __builtin_popcountll(x);
    out.global_read_distinct += t.read_distinct;
    out.global_write_distinct += t.written_distinct;
    if (t.read || t.written) out.buffers.push_back(std::move(t));
    a->read_map.clear(); a->read_map.shrink_to_fit();
    a->write_map.clear(); a->write_map.shrink_to_fit();
  }
  out.findings = std::move(ds.findings);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// Accesses of LDS operations still outstanding when a barrier releases also belong to the new
// epoch: other waves may touch the same bytes right after the barrier.
void barrier_rerecord(Wave& w) {
  for (auto& op : w.lgkmq)
    if (op.lds && !op.lds_addrs.empty())
      for (uint32_t a : op.lds_addrs)
        lds_race_record(w, a, op.lds_bytes,
                        op.lds_atomic ? LdsKind::atomic : op.lds_write ? LdsKind::write : LdsKind::read, w.ds->epoch);
  for (auto& op : w.vmq)
    if (op.lds && op.lds_hi > op.lds_lo) lds_race_record(w, op.lds_lo, op.lds_hi - op.lds_lo, LdsKind::write, w.ds->epoch);
}

Counters Device::dispatch(std::shared_ptr<const CodeObject> co, std::string_view kernel, Dim3 grid, Dim3 block,
                          std::vector<uint8_t> kernarg, const DispatchOptions& opts) {
  return Executor::run(*this, std::move(co), kernel, grid, block, std::move(kernarg), opts);
}

}  // namespace mla::emu
