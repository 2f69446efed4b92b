// Memory instructions: scalar loads (SMEM), buffer (MUBUF), global/flat, LDS (DS).
//
// Data is read/written when the instruction issues; the destination registers stay locked in
// the waitcnt scoreboard until an s_waitcnt covers the operation (see executor.cpp).
#include <algorithm>
#include <bit>
#include <fmt/format.h>

#include "emulator/exec_common.h"

namespace mla::emu {

namespace {

// ------------------------------------------------------------------------------------------
// SMEM
// ------------------------------------------------------------------------------------------
void s_load(Wave& w, const Inst& in) {
  unsigned n = in.info->data;
  uint64_t base = sread64(w, in.ops[1]);
  uint64_t off = in.nops > 2 ? uint64_t(int64_t(int32_t(sread(w, in.ops[2])))) : 0;
  if (in.nops > 2 && in.ops[2].kind == Operand::Const) off = uint64_t(int64_t(int32_t(in.ops[2].imm)));
  uint64_t addr = (base + off + int64_t(in.offset)) & ~uint64_t(3);
  const uint8_t* p = gmem(w, addr, 4 * n, false);
  for (unsigned i = 0; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, p + 4 * i, 4);
    swrite(w, in.ops[0], v, i);
  }
  push_pending(w, Queue::LGKM, true, false);
}
void s_buffer_load(Wave& w, const Inst& in) {
  unsigned n = in.info->data;
  uint32_t d0 = sread(w, in.ops[1], 0), d1 = sread(w, in.ops[1], 1), nrec = sread(w, in.ops[1], 2);
  uint64_t base = d0 | (uint64_t(d1 & 0xffff) << 32);
  uint64_t off = in.nops > 2 ? (in.ops[2].kind == Operand::Const ? in.ops[2].imm : sread(w, in.ops[2])) : 0;
  off = (off + in.offset) & ~uint64_t(3);
  for (unsigned i = 0; i < n; ++i) {
    uint32_t v = 0;
    if (off + 4 * i + 4 <= nrec) std::memcpy(&v, gmem(w, base + off + 4 * i, 4, false), 4);
    swrite(w, in.ops[0], v, i);
  }
  push_pending(w, Queue::LGKM, true, false);
}
void s_dcache(Wave& w, const Inst&) { push_pending(w, Queue::LGKM, true, false); }

// ------------------------------------------------------------------------------------------
// Lane data movement helpers
// ------------------------------------------------------------------------------------------
// `bytes` per lane: 1, 2 (sub-dword, zero/sign extended by `sext`), 4, 8, 12, 16.
inline void lane_to_regs(Wave& w, const Inst& in, int lane, const uint8_t* src, unsigned bytes, bool sext) {
  if (bytes < 4) {
    uint32_t v = bytes == 1 ? (sext ? uint32_t(int32_t(int8_t(src[0]))) : src[0])
                            : (sext ? uint32_t(int32_t(int16_t(src[0] | src[1] << 8))) : uint32_t(src[0] | src[1] << 8));
    vdst(w, in, 0, 0)[lane] = v;
    return;
  }
  for (unsigned d = 0; d < bytes / 4; ++d) std::memcpy(&vdst(w, in, 0, d)[lane], src + 4 * d, 4);
}
inline void regs_to_lane(Wave& w, const Inst& in, unsigned opi, int lane, uint8_t* dst, unsigned bytes) {
  uint32_t t[64];
  if (bytes < 4) {
    uint32_t v = vsrc(w, in, opi, 0, t)[lane];
    std::memcpy(dst, &v, bytes);
    return;
  }
  for (unsigned d = 0; d < bytes / 4; ++d) {
    uint32_t v = vsrc(w, in, opi, d, t)[lane];
    std::memcpy(dst + 4 * d, &v, 4);
  }
}

// ------------------------------------------------------------------------------------------
// MUBUF
// ------------------------------------------------------------------------------------------
struct Vsharp {
  uint64_t base;
  uint32_t stride, num_records;
  bool add_tid, swizzle;
};
Vsharp vsharp(const Wave& w, const Operand& o) {
  uint32_t d0 = sread(w, o, 0), d1 = sread(w, o, 1), d2 = sread(w, o, 2), d3 = sread(w, o, 3);
  Vsharp v;
  v.base = d0 | (uint64_t(d1 & 0xffff) << 32);
  v.stride = (d1 >> 16) & 0x3fff;
  v.swizzle = (d1 >> 31) & 1;
  v.num_records = d2;
  v.add_tid = (d3 >> 23) & 1;
  return v;
}

// data = in.info->data bytes per lane; data2 bit0 = sign extend; K_STORE / F_LDS
void buffer_op(Wave& w, const Inst& in) {
  const bool store = in.info->kind & K_STORE;
  const bool lds = in.flags & F_LDS;
  const unsigned bytes = in.info->data;
  const bool sext = in.info->data2 & 1;
  // Operands: vdata, vaddr|off, srsrc, soffset
  unsigned vi = lds ? (in.nops == 3 ? 99 : 1) : 1;  // "buffer_load_dword v1, s[4:7], 0 ... lds" may omit vdata
  unsigned ri = 2, si = 3;
  if (lds && in.nops == 3) { vi = 0; ri = 1; si = 2; }
  if (lds && in.nops == 4) { vi = 1; ri = 2; si = 3; }
  if (in.ops[ri].kind != Operand::SGPR || in.ops[ri].width != 4) w.fail("decode", "buffer resource operand is not an SGPR quad");
  Vsharp vs = vsharp(w, in.ops[ri]);
  if (vs.swizzle) w.fail("unsupported", "swizzled buffer resources (V# swizzle_enable) are not modelled");
  uint32_t soff = sread(w, in.ops[si]);
  uint64_t mask = w.exec();
  uint32_t t0[64], t1[64];
  const uint32_t* va0 = nullptr;
  const uint32_t* va1 = nullptr;
  bool offen = in.flags & F_OFFEN, idxen = in.flags & F_IDXEN;
  if ((offen || idxen) && in.ops[vi].kind != Operand::None) {
    va0 = vsrc(w, in, vi, 0, t0);
    if (offen && idxen) va1 = vsrc(w, in, vi, 1, t1);
  }
  uint32_t lds_base = 0;
  PendingOp* pend = nullptr;
  if (lds) lds_base = (w.s[kSgprM0] & 0x3ffff) + uint32_t(in.offset);
  if (lds && bytes < 4) w.fail("unsupported", "sub-dword LDS DMA (lane stride in LDS) is not modelled");
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint32_t index = 0, voff = 0;
    if (idxen) index = va0[l];
    if (offen) voff = idxen ? va1[l] : va0[l];
    // Range check (CDNA, per rocjitsu PR ROCm/rocm-systems#10928, checked against gfx950):
    // soffset + inst_offset + voffset must end within num_records, per dword; only IDXEN uses
    // the index check on a strided buffer; ADD_TID_ENABLE adds tid*stride and is not checked.
    uint64_t off = uint64_t(uint32_t(voff + uint32_t(in.offset))) + soff;
    uint64_t addr = vs.base + off + uint64_t(vs.stride) * index;
    if (vs.add_tid) addr += uint64_t(vs.stride) * l;
    uint8_t buf[16] = {};
    bool all_in = vs.add_tid || (idxen && vs.stride != 0 ? index < vs.num_records : off + bytes <= vs.num_records);
    if (all_in) {  // fast path: the whole access is in range
      if (store) {
        uint8_t tmp[16];
        regs_to_lane(w, in, 0, l, tmp, bytes);
        std::memcpy(gmem(w, addr, bytes, true), tmp, bytes);
      } else {
        std::memcpy(buf, gmem(w, addr, bytes, false), bytes);
        if (lds) std::memcpy(lds_access(w, lds_base + l * bytes, bytes, true), buf, bytes);
        else lane_to_regs(w, in, l, buf, bytes, sext);
      }
      continue;
    }
    for (unsigned d = 0; d < (bytes + 3) / 4; ++d) {
      unsigned db = bytes < 4 ? bytes : 4;
      bool oor = false;
      if (!vs.add_tid) {
        if (idxen && vs.stride != 0) oor = index >= vs.num_records;
        else oor = off + 4 * d + db > vs.num_records;
      }
      if (oor) continue;  // loads return 0 (LDS DMA writes 0), stores are dropped
      if (store) {
        uint8_t tmp[16];
        regs_to_lane(w, in, 0, l, tmp, bytes);
        std::memcpy(gmem(w, addr + 4 * d, db, true), tmp + 4 * d, db);
      } else {
        std::memcpy(buf + 4 * d, gmem(w, addr + 4 * d, db, false), db);
      }
    }
    if (!store) {
      if (lds) std::memcpy(lds_access(w, lds_base + l * bytes, bytes, true), buf, bytes);
      else lane_to_regs(w, in, l, buf, bytes, sext);
    }
  }
  if (store) push_pending(w, Queue::VM, false, false);
  else {
    PendingOp& op = push_pending(w, Queue::VM, false, lds);
    pend = &op;
    count_vm_load(w, op, uint64_t(std::popcount(mask)) * bytes);
    if (lds) {
      op.lds_lo = lds_base;
      op.lds_hi = lds_base + 64 * bytes;
      op.lds_write = true;
      register_dma(w, op);
    }
  }
  (void)pend;
}

// ------------------------------------------------------------------------------------------
// Global / flat
// ------------------------------------------------------------------------------------------
void global_op(Wave& w, const Inst& in) {
  const bool store = in.info->kind & K_STORE;
  const bool lds = in.info->kind & K_LDS_DMA;
  const unsigned bytes = in.info->data;
  const bool sext = in.info->data2 & 1;
  const bool flat = in.info->data2 & 2;
  // load: vdst, vaddr, saddr ; store: vaddr, vdata, saddr ; lds: vaddr, saddr
  unsigned ai = store ? 0 : lds ? 0 : 1;
  unsigned si = store ? 2 : lds ? 1 : 2;
  bool has_saddr = !flat && in.nops > si && in.ops[si].kind == Operand::SGPR;
  uint64_t sbase = has_saddr ? sread64(w, in.ops[si]) : 0;
  uint64_t mask = w.exec();
  uint32_t t0[64], t1[64];
  const uint32_t* a0 = vsrc(w, in, ai, 0, t0);
  const uint32_t* a1 = has_saddr ? nullptr : vsrc(w, in, ai, 1, t1);
  uint32_t lds_base = lds ? (w.s[kSgprM0] & 0x3ffff) + uint32_t(in.offset) : 0;
  if (lds && bytes < 4) w.fail("unsupported", "sub-dword LDS DMA (lane stride in LDS) is not modelled");
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint64_t addr = has_saddr ? sbase + a0[l] : (uint64_t(a1[l]) << 32 | a0[l]);
    addr += int64_t(in.offset);
    if (store) {
      uint8_t tmp[16];
      regs_to_lane(w, in, 1, l, tmp, bytes);
      std::memcpy(gmem(w, addr, bytes, true), tmp, bytes);
    } else {
      const uint8_t* p = gmem(w, addr, bytes, false);
      if (lds) std::memcpy(lds_access(w, lds_base + l * bytes, bytes, true), p, bytes);
      else lane_to_regs(w, in, l, p, bytes, sext);
    }
  }
  if (store) push_pending(w, Queue::VM, false, false);
  else {
    PendingOp& op = push_pending(w, Queue::VM, false, lds);
    count_vm_load(w, op, uint64_t(std::popcount(mask)) * bytes);
    if (lds) {
      op.lds_lo = lds_base;
      op.lds_hi = lds_base + 64 * bytes;
      op.lds_write = true;
      register_dma(w, op);
    }
  }
}

// Atomics (global_atomic_* / flat_atomic_*, 32-bit): data = operation, data2 bit0 = returns the
// pre-op value (sc0 on gfx940+; decoder adds "_rtn"), bit1 = flat (64-bit VGPR address only).
// Each active lane reads, combines and writes in lane order (the order among lanes of one
// instruction is not specified by the ISA; it only matters for swap/cmpswap on one address).
// An atomic is performed coherently at agent scope (AMDGPUUsage "Memory Model GFX942": an
// agent-scope atomicrmw needs no cache bits; check_memory_model treats it as in memory).
enum AtomicOp : uint32_t { A_ADD, A_SUB, A_SWAP, A_CMPSWAP, A_SMIN, A_UMIN, A_SMAX, A_UMAX, A_AND, A_OR, A_XOR, A_INC, A_DEC };
void global_atomic(Wave& w, const Inst& in) {
  const bool rtn = in.info->data2 & 1, flat = in.info->data2 & 2;
  const AtomicOp op = AtomicOp(in.info->data);
  // rtn: vdst, vaddr, vdata, saddr ; no rtn: vaddr, vdata, saddr
  const unsigned ai = rtn ? 1 : 0, di = ai + 1, si = ai + 2;
  const bool has_saddr = !flat && in.nops > si && in.ops[si].kind == Operand::SGPR;
  const uint64_t sbase = has_saddr ? sread64(w, in.ops[si]) : 0;
  const uint64_t mask = w.exec();
  uint32_t t0[64], t1[64], t2[64], t3[64];
  const uint32_t* a0 = vsrc(w, in, ai, 0, t0);
  const uint32_t* a1 = has_saddr ? nullptr : vsrc(w, in, ai, 1, t1);
  const uint32_t* d0 = vsrc(w, in, di, 0, t2);
  const uint32_t* d1 = op == A_CMPSWAP ? vsrc(w, in, di, 1, t3) : nullptr;
  uint32_t old_vals[64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    uint64_t addr = (has_saddr ? sbase + a0[l] : (uint64_t(a1[l]) << 32 | a0[l])) + int64_t(in.offset);
    uint32_t old;
    std::memcpy(&old, gmem(w, addr, 4, false), 4);
    const uint32_t s = d0[l];
    uint32_t v = old;
    switch (op) {
      case A_ADD: v = old + s; break;
      case A_SUB: v = old - s; break;
      case A_SWAP: v = s; break;
      case A_CMPSWAP: v = old == d1[l] ? s : old; break;  // DATA[0] = src, DATA[1] = cmp
      case A_SMIN: v = uint32_t(std::min(int32_t(old), int32_t(s))); break;
      case A_UMIN: v = std::min(old, s); break;
      case A_SMAX: v = uint32_t(std::max(int32_t(old), int32_t(s))); break;
      case A_UMAX: v = std::max(old, s); break;
      case A_AND: v = old & s; break;
      case A_OR: v = old | s; break;
      case A_XOR: v = old ^ s; break;
      case A_INC: v = old >= s ? 0 : old + 1; break;
      case A_DEC: v = (old == 0 || old > s) ? s : old - 1; break;
    }
    std::memcpy(gmem(w, addr, 4, true), &v, 4);
    old_vals[l] = old;
  }
  if (rtn) {
    uint32_t* dst = vdst(w, in, 0);
    for (int l = 0; l < 64; ++l)
      if ((mask >> l) & 1) dst[l] = old_vals[l];
    PendingOp& p = push_pending(w, Queue::VM, false, false);
    count_vm_load(w, p, uint64_t(std::popcount(mask)) * 4);
  } else {
    push_pending(w, Queue::VM, false, false);
  }
}

// buffer_wbl2 / buffer_inv (gfx940+). With sc1 (agent or system scope: AMDGPUUsage "Memory Model
// GFX942", the agent-scope release is `buffer_wbl2 sc1`, the acquire `buffer_inv sc1`) they write
// back this XCD's dirty L2 lines / invalidate its L2: check_memory_model records the release for
// the workgroup, the acquire for the running workgroup. Without sc1 (wave or workgroup scope) they
// do nothing across XCDs. Both are vector-memory operations counted by vmcnt.
void buffer_wbl2(Wave& w, const Inst& in) {
  DispatchState& d = *w.ds;
  if ((in.flags & F_SC1) && d.coh) d.wg_release[d.wg_linear] = d.wave_insts + 1;
  push_pending(w, Queue::VM, false, false);
}
void buffer_inv(Wave& w, const Inst& in) {
  DispatchState& d = *w.ds;
  if ((in.flags & F_SC1) && d.coh) d.wg_acquire = d.wave_insts + 1;
  push_pending(w, Queue::VM, false, false);
}

// ------------------------------------------------------------------------------------------
// DS
// ------------------------------------------------------------------------------------------
// The bank model of WorkgroupCounters::lds_bank_cycles (counters.h).
void count_lds_banks(Wave& w, const uint32_t* addrs, uint64_t mask, unsigned bytes) {
  const unsigned dwords = std::max(1u, bytes / 4), group = std::max(1u, 128u / (4 * dwords));
  for (unsigned g0 = 0; g0 < 64; g0 += group) {
    uint32_t seen[64 * 4];
    unsigned n = 0, per_bank[32] = {};
    bool any = false;
    for (unsigned l = g0; l < g0 + group && l < 64; ++l) {
      if (!((mask >> l) & 1)) continue;
      any = true;
      for (unsigned i = 0; i < dwords; ++i) {
        const uint32_t dw = addrs[l] / 4 + i;
        bool dup = false;
        for (unsigned k = 0; k < n && !dup; ++k) dup = seen[k] == dw;
        if (dup) continue;
        seen[n++] = dw;
        ++per_bank[dw % 32];
      }
    }
    if (!any) continue;
    w.ctr->lds_bank_cycles += *std::max_element(per_bank, per_bank + 32);
    w.ctr->lds_ideal_cycles += 1;
  }
}

void record_lds_op(Wave& w, PendingOp& op, const uint32_t* addrs, uint64_t mask, unsigned bytes, bool write) {
  op.lds_write = write;
  op.lds_bytes = uint8_t(bytes);
  for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) op.lds_addrs.push_back(addrs[l]);
  count_lds_banks(w, addrs, mask, bytes);
}

void ds_read(Wave& w, const Inst& in) {
  const unsigned bytes = in.info->data;
  const bool sext = in.info->data2 & 1;
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* a = vsrc(w, in, 1, 0, t);
  uint32_t addrs[64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    addrs[l] = a[l] + uint32_t(in.offset);
    lane_to_regs(w, in, l, lds_access(w, addrs[l], bytes, false), bytes, sext);
  }
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  record_lds_op(w, op, addrs, mask, bytes, false);
}
// ds_read2 / ds_write2 record both elements' addresses like two accesses of one op, so that
// an op still outstanding at a barrier is re-recorded in the new epoch (lds_race) and the bank
// model counts both; until 2026-12-04 they recorded neither (no catalog or aiter MLA kernel uses
// them; LLVM emits them for adjacent LDS words, so foreign code objects do).
void ds_read2(Wave& w, const Inst& in) {  // data = element bytes (4/8), data2 = offset scale
  const unsigned eb = in.info->data, scale = in.info->data2;
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* a = vsrc(w, in, 1, 0, t);
  uint32_t addrs[2][64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    for (int k = 0; k < 2; ++k) {
      addrs[k][l] = a[l] + uint32_t(k ? in.offset1 : in.offset) * scale;
      const uint8_t* p = lds_access(w, addrs[k][l], eb, false);
      for (unsigned d = 0; d < eb / 4; ++d) std::memcpy(&vdst(w, in, 0, k * (eb / 4) + d)[l], p + 4 * d, 4);
    }
  }
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  for (const uint32_t* e : addrs) record_lds_op(w, op, e, mask, eb, false);
}
void ds_write(Wave& w, const Inst& in) {
  const unsigned bytes = in.info->data;
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* a = vsrc(w, in, 0, 0, t);
  uint32_t addrs[64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    addrs[l] = a[l] + uint32_t(in.offset);
    uint8_t tmp[16];
    regs_to_lane(w, in, 1, l, tmp, bytes);
    std::memcpy(lds_access(w, addrs[l], bytes, true), tmp, bytes);
  }
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  record_lds_op(w, op, addrs, mask, bytes, true);
}
void ds_write2(Wave& w, const Inst& in) {
  const unsigned eb = in.info->data, scale = in.info->data2;
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* a = vsrc(w, in, 0, 0, t);
  uint32_t addrs[2][64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    for (int k = 0; k < 2; ++k) {
      uint8_t tmp[16];
      regs_to_lane(w, in, 1 + k, l, tmp, eb);
      addrs[k][l] = a[l] + uint32_t(k ? in.offset1 : in.offset) * scale;
      std::memcpy(lds_access(w, addrs[k][l], eb, true), tmp, eb);
    }
  }
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  for (const uint32_t* e : addrs) record_lds_op(w, op, e, mask, eb, true);
}
// ds_add_u32 vaddr, vdata / ds_add_rtn_u32 vdst, vaddr, vdata: MEM[vaddr + offset] += vdata (32-bit
// wrap), the rtn form returning the value before the add. Lanes act in lane order (no source
// fixes the order among lanes of one instruction; addition commutes, so only the rtn values of
// lanes sharing an address depend on it). ISA3/ISA4 'LDS & GDS' DS_ADD_U32 / DS_ADD_RTN_U32.
template <bool RTN>
void ds_add(Wave& w, const Inst& in) {
  uint64_t mask = w.exec();
  uint32_t t0[64], t1[64];
  const uint32_t* a = vsrc(w, in, RTN ? 1 : 0, 0, t0);
  const uint32_t* d = vsrc(w, in, RTN ? 2 : 1, 0, t1);
  uint32_t addrs[64], old[64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    addrs[l] = a[l] + uint32_t(in.offset);
    uint8_t* m = lds_access_atomic(w, addrs[l], 4);
    uint32_t v;
    std::memcpy(&v, m, 4);
    old[l] = v;
    v += d[l];
    std::memcpy(m, &v, 4);
  }
  if (RTN) {
    uint32_t* dst = vdst(w, in, 0);
    for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) dst[l] = old[l];
  }
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  record_lds_op(w, op, addrs, mask, 4, true);
  op.lds_atomic = true;
}
// ds_bpermute_b32 vdst, vaddr, vdata: lane l reads vdata of lane ((vaddr+offset)/4)%64.
template <bool BACK>
void ds_permute(Wave& w, const Inst& in) {
  uint64_t mask = w.exec();
  uint32_t t0[64], t1[64];
  const uint32_t* a = vsrc(w, in, 1, 0, t0);
  const uint32_t* d = vsrc(w, in, 2, 0, t1);
  uint32_t res[64];
  uint32_t* dst = vdst(w, in, 0);
  for (int l = 0; l < 64; ++l) res[l] = BACK ? 0 : dst[l];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    unsigned s = ((a[l] + uint32_t(in.offset)) >> 2) & 63;
    if (BACK) res[l] = ((mask >> s) & 1) ? d[s] : 0;
    else res[s] = d[l];
  }
  for (int l = 0; l < 64; ++l) if ((mask >> l) & 1) dst[l] = res[l];
  push_pending(w, Queue::LGKM, false, false);
}

// gfx950 transpose reads (ds_read_b64_tr_b4/b8/b16, ds_read_b96_tr_b6). `ebits` element width,
// `rowbytes` bytes each lane's address names (its "row"). Per 16-lane group (g = L >> 4,
// l = L & 15; n = log2(elements per lane): b16 2, b8 3, b4 4, b6 4):
//   element r of lane L = element (l & (2^n - 1)) of row[16 g + (l >> n) + (r << (4 - n))]
// Hardware-anchored (docs/emulator.md, "LDS transpose reads"): rocRoller's gfx950 GPU test
// TransposeLoadsTest.cpp, Triton's chooseLLDsReadB64TrLayout, CK's load_tile_transpose.hpp,
// rocjitsu's upstream fixes (ROCm/rocm-systems PR 10589 b8, PR 10175 b16). The first version
// here copied rocjitsu's interpreter, which those sources contradict.
// An active lane whose element comes from an inactive lane's row is an error: that lane named no
// address, and no source says what the hardware returns.
void ds_read_tr(Wave& w, const Inst& in) {
  const unsigned ebits = in.info->data, rowbytes = in.info->data2;
  const unsigned nelem = rowbytes * 8 / ebits, n = nelem == 4 ? 2 : nelem == 8 ? 3 : 4;
  uint64_t mask = w.exec();
  uint32_t t[64];
  const uint32_t* a = vsrc(w, in, 1, 0, t);
  uint8_t rows[64][12] = {};
  uint32_t addrs[64];
  for (int l = 0; l < 64; ++l) {
    if (!((mask >> l) & 1)) continue;
    addrs[l] = a[l] + uint32_t(in.offset);
    std::memcpy(rows[l], lds_access(w, addrs[l], rowbytes, false), rowbytes);
  }
  auto get = [&](int lane, unsigned e) -> uint32_t {
    uint32_t v = 0;
    for (unsigned b = 0; b < ebits; ++b) {
      unsigned bit = e * ebits + b;
      v |= uint32_t((rows[lane][bit >> 3] >> (bit & 7)) & 1) << b;
    }
    return v;
  };
  uint8_t out[64][12] = {};
  for (int L = 0; L < 64; ++L) {
    if (!((mask >> L) & 1)) continue;
    const unsigned g = unsigned(L) >> 4, l = unsigned(L) & 15;
    for (unsigned r = 0; r < nelem; ++r) {
      const unsigned src = 16 * g + (l >> n) + (r << (4 - n)), c = l & ((1u << n) - 1);
      if (!((mask >> src) & 1))
        throw Error("undefined", fmt::format("{}: lane {} reads element {} of inactive lane {}'s row (undefined)",
                                        in.info->name, L, c, src));
      const uint32_t v = get(int(src), c);
      for (unsigned b = 0; b < ebits; ++b) {
        unsigned bit = r * ebits + b;
        out[L][bit >> 3] |= uint8_t(((v >> b) & 1) << (bit & 7));
      }
    }
  }
  for (int L = 0; L < 64; ++L)
    if ((mask >> L) & 1)
      for (unsigned d = 0; d < rowbytes / 4; ++d) std::memcpy(&vdst(w, in, 0, d)[L], out[L] + 4 * d, 4);
  PendingOp& op = push_pending(w, Queue::LGKM, false, true);
  record_lds_op(w, op, addrs, mask, rowbytes, false);
}

void add(std::string name, Handler fn, InstClass cls, uint8_t ndst, uint32_t kind, uint32_t data, uint32_t data2 = 0) {
  OpInfo i;
  i.name = name;
  i.fn = fn;
  i.cls = cls;
  i.ndst = ndst;
  i.kind = kind;
  i.data = data;
  i.data2 = data2;
  add_op(i);
}

}  // namespace

void register_vmem_ops() {
  const InstClass SM = InstClass::SMEM, VL = InstClass::VMEM_LOAD, VS = InstClass::VMEM_STORE, LD = InstClass::LDS;
  add("s_load_dword", s_load, SM, 1, K_SMEM | K_LOAD, 1);
  add("s_load_dwordx2", s_load, SM, 1, K_SMEM | K_LOAD, 2);
  add("s_load_dwordx4", s_load, SM, 1, K_SMEM | K_LOAD, 4);
  add("s_load_dwordx8", s_load, SM, 1, K_SMEM | K_LOAD, 8);
  add("s_load_dwordx16", s_load, SM, 1, K_SMEM | K_LOAD, 16);
  add("s_buffer_load_dword", s_buffer_load, SM, 1, K_SMEM | K_LOAD, 1);
  add("s_buffer_load_dwordx2", s_buffer_load, SM, 1, K_SMEM | K_LOAD, 2);
  add("s_buffer_load_dwordx4", s_buffer_load, SM, 1, K_SMEM | K_LOAD, 4);
  add("s_buffer_load_dwordx8", s_buffer_load, SM, 1, K_SMEM | K_LOAD, 8);
  add("s_dcache_wb", s_dcache, SM, 0, K_SMEM, 0);
  add("s_dcache_inv", s_dcache, SM, 0, K_SMEM, 0);
  const uint32_t BL = K_VMEM | K_LOAD, BS = K_VMEM | K_STORE;
  struct { const char* sfx; unsigned bytes; unsigned sext; } ld[] = {
      {"ubyte", 1, 0}, {"sbyte", 1, 1}, {"ushort", 2, 0}, {"sshort", 2, 1}, {"dword", 4, 0},
      {"dwordx2", 8, 0}, {"dwordx3", 12, 0}, {"dwordx4", 16, 0}};
  for (auto& e : ld) {
    add(fmt::format("buffer_load_{}", e.sfx), buffer_op, VL, 1, BL, e.bytes, e.sext);
    add(fmt::format("global_load_{}", e.sfx), global_op, VL, 1, BL | K_FLAT, e.bytes, e.sext);
    add(fmt::format("flat_load_{}", e.sfx), global_op, VL, 1, BL | K_FLAT, e.bytes, e.sext | 2);
  }
  struct { const char* sfx; unsigned bytes; } st[] = {{"byte", 1}, {"short", 2}, {"dword", 4}, {"dwordx2", 8}, {"dwordx3", 12}, {"dwordx4", 16}};
  for (auto& e : st) {
    add(fmt::format("buffer_store_{}", e.sfx), buffer_op, VS, 0, BS, e.bytes);
    add(fmt::format("global_store_{}", e.sfx), global_op, VS, 0, BS | K_FLAT, e.bytes);
    add(fmt::format("flat_store_{}", e.sfx), global_op, VS, 0, BS | K_FLAT, e.bytes, 2);
  }
  for (auto& e : ld) {  // LDS DMA forms
    add(fmt::format("global_load_lds_{}", e.sfx), global_op, VL, 0, BL | K_FLAT | K_LDS_DMA, e.bytes, e.sext);
  }
  struct { const char* op; AtomicOp code; } at[] = {
      {"add", A_ADD}, {"sub", A_SUB}, {"swap", A_SWAP}, {"cmpswap", A_CMPSWAP}, {"smin", A_SMIN}, {"umin", A_UMIN},
      {"smax", A_SMAX}, {"umax", A_UMAX}, {"and", A_AND}, {"or", A_OR}, {"xor", A_XOR}, {"inc", A_INC}, {"dec", A_DEC}};
  for (auto& e : at)
    for (const char* pfx : {"global", "flat"}) {
      const uint32_t fl = pfx[0] == 'f' ? 2 : 0;
      add(fmt::format("{}_atomic_{}", pfx, e.op), global_atomic, VS, 0, K_VMEM | K_FLAT | K_ATOMIC, e.code, fl);
      add(fmt::format("{}_atomic_{}_rtn", pfx, e.op), global_atomic, VL, 1, K_VMEM | K_FLAT | K_ATOMIC | K_LOAD, e.code, fl | 1);
    }
  add("buffer_wbl2", buffer_wbl2, VS, 0, K_VMEM, 0);
  add("buffer_inv", buffer_inv, VS, 0, K_VMEM, 0);
  add("ds_read_b32", ds_read, LD, 1, K_LDS | K_LOAD, 4);
  add("ds_read_b64", ds_read, LD, 1, K_LDS | K_LOAD, 8);
  add("ds_read_b96", ds_read, LD, 1, K_LDS | K_LOAD, 12);
  add("ds_read_b128", ds_read, LD, 1, K_LDS | K_LOAD, 16);
  add("ds_read_u8", ds_read, LD, 1, K_LDS | K_LOAD, 1);
  add("ds_read_i8", ds_read, LD, 1, K_LDS | K_LOAD, 1, 1);
  add("ds_read_u16", ds_read, LD, 1, K_LDS | K_LOAD, 2);
  add("ds_read_i16", ds_read, LD, 1, K_LDS | K_LOAD, 2, 1);
  add("ds_read2_b32", ds_read2, LD, 1, K_LDS | K_LOAD, 4, 4);
  add("ds_read2_b64", ds_read2, LD, 1, K_LDS | K_LOAD, 8, 8);
  add("ds_read2st64_b32", ds_read2, LD, 1, K_LDS | K_LOAD, 4, 256);
  add("ds_read2st64_b64", ds_read2, LD, 1, K_LDS | K_LOAD, 8, 512);
  add("ds_write_b32", ds_write, LD, 0, K_LDS | K_STORE, 4);
  add("ds_write_b64", ds_write, LD, 0, K_LDS | K_STORE, 8);
  add("ds_write_b96", ds_write, LD, 0, K_LDS | K_STORE, 12);
  add("ds_write_b128", ds_write, LD, 0, K_LDS | K_STORE, 16);
  add("ds_write_b8", ds_write, LD, 0, K_LDS | K_STORE, 1);
  add("ds_write_b16", ds_write, LD, 0, K_LDS | K_STORE, 2);
  add("ds_write2_b32", ds_write2, LD, 0, K_LDS | K_STORE, 4, 4);
  add("ds_write2_b64", ds_write2, LD, 0, K_LDS | K_STORE, 8, 8);
  add("ds_write2st64_b32", ds_write2, LD, 0, K_LDS | K_STORE, 4, 256);
  add("ds_write2st64_b64", ds_write2, LD, 0, K_LDS | K_STORE, 8, 512);
  add("ds_add_u32", ds_add<false>, LD, 0, K_LDS | K_STORE, 4);
  add("ds_add_rtn_u32", ds_add<true>, LD, 1, K_LDS | K_LOAD | K_STORE, 4);
  add("ds_bpermute_b32", ds_permute<true>, LD, 1, K_LDS | K_LOAD, 0);
  add("ds_permute_b32", ds_permute<false>, LD, 1, K_LDS | K_LOAD, 0);
  add("ds_read_b64_tr_b8", ds_read_tr, LD, 1, K_LDS | K_LOAD, 8, 8);
  add("ds_read_b64_tr_b16", ds_read_tr, LD, 1, K_LDS | K_LOAD, 16, 8);
  add("ds_read_b64_tr_b4", ds_read_tr, LD, 1, K_LDS | K_LOAD, 4, 8);
  add("ds_read_b96_tr_b6", ds_read_tr, LD, 1, K_LDS | K_LOAD, 6, 12);
}

}  // namespace mla::emu
