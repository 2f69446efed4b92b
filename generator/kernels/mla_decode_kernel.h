// Internal to the decode builder (mla_decode*.cpp): what the producer and consumer emitters
// share. The kernel's shape of work is in mla_decode.cpp's header comment; its decisions are
// the geometry (mla_geometry.h) and the plan (mla_decode_plan.h), both computed before any
// instruction is emitted.
#pragma once
#include <fmt/format.h>

#include <map>
#include <stdexcept>

#include "kernels/mla_decode_plan.h"
#include "kernels/mla_geometry.h"
#include "program/builder.h"

namespace mla::gen::decode {

constexpr uint32_t kNegInf = 0xff800000u;  // -inf as f32 bits: a masked score

inline int log2i(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  if ((1 << r) != v) throw std::logic_error(fmt::format("{} is not a power of two", v));
  return r;
}

inline FImm f32(float v) { return FImm{v}; }

// x / d as (x * mul) >> shift, exact for every x < limit, with x * mul < 2^32 and mul < 2^24
// (v_mul_u32_u24). Throws if no shift works.
inline std::pair<uint32_t, int> exact_divider(int d, int limit) {
  for (int shift = 8; shift < 32; ++shift) {
    const uint64_t mul = ((uint64_t(1) << shift) + uint64_t(d) - 1) / uint64_t(d);
    if (mul >= (1u << 24) || uint64_t(limit) * mul >= (uint64_t(1) << 32)) break;
    bool exact = true;
    for (int x = 0; x < limit && exact; ++x) exact = int((uint64_t(x) * mul) >> shift) == x / d;
    if (exact) return {uint32_t(mul), shift};
  }
  throw std::logic_error(fmt::format("mla_decode: no exact divider by {} below {}", d, limit));
}

// Byte selectors for v_perm_b32 (D.byte[i] = {S0, S1}.byte[sel.byte[i]], S1 = bytes 0-3).
inline uint32_t sel(int b0, int b1, int b2, int b3) { return uint32_t(b0) | b1 << 8 | b2 << 16 | uint32_t(b3) << 24; }

// The kernel being built: its spec, geometry and plan, the builder, and the registers every
// wave sets up before the roles split (kernel arguments, the work unit, loop counts, lane).
struct Kernel {
  Kernel(Program& p, const KernelSpec& s);

  Program& p;
  const KernelSpec& s;
  const MlaGeometry g;
  const MlaDecodePlan pl;
  Builder b;

  SReg args, unit, ntiles, nslots, wave, iter;
  SReg q_scale, kv_scale;  // the f32 values behind the q_scale / kv_scale arguments
  // Where every wave goes when its part of the unit is done (end_unit), and the two VGPRs the
  // meeting point there uses (mla_decode.cpp, emit_unit_sync).
  Label unit_end;
  VReg sync_v;
  void end_unit() { b.s_branch(unit_end); }
  VReg lane;
  // SGPR constants (VOP3 operands take no literal on gfx9), requested where they are used with
  // K(). The kernel is emitted twice (build_mla_decode): the first emission only learns which
  // constants the consumer asks for, in first-use order (`wanted`); the second sets them once
  // at the consumer's start, where they stay live for the whole wave.
  bool learning_constants = false;
  std::vector<uint32_t> wanted;
  std::map<uint32_t, SReg> consts;

  SReg ptr(uint32_t offset) const { return args.sub(int(offset / 4), 2); }
  SReg argf(uint32_t offset) const { return args[int(offset / 4)]; }
  // The work unit (abi::WorkUnit, one SGPR per field).
  SReg qo_row() const { return unit[abi::work_unit::qo_row]; }
  SReg page_base() const { return unit[abi::work_unit::page_base]; }
  SReg kv_start() const { return unit[abi::work_unit::kv_start]; }
  SReg kv_end() const { return unit[abi::work_unit::kv_end]; }
  SReg kv_len() const { return unit[abi::work_unit::kv_len]; }
  SReg partial() const { return unit[abi::work_unit::partial]; }
  SReg row_group() const { return unit[abi::work_unit::row_group]; }

  int slot_bytes() const { return g.slot_bytes; }

  // An SGPR holding `v` from the consumer's start on.
  SReg K(uint32_t v) {
    auto it = consts.find(v);
    if (it != consts.end()) return it->second;
    if (!learning_constants) throw std::logic_error(fmt::format("mla_decode: constant 0x{:x} was not learned", v));
    wanted.push_back(v);
    return consts[v] = b.regs().sgpr(1, fmt::format("c_const_{:x}", v));
  }

  // An LDS read of dst.count (1, 2 or 4) dwords.
  void ds_read_dwords(VReg dst, VReg addr, uint32_t off) {
    if (dst.count == 1) b.ds_read_b32(dst, addr, off);
    else if (dst.count == 2) b.ds_read_b64(dst, addr, off);
    else if (dst.count == 4) b.ds_read_b128(dst, addr, off);
    else throw std::logic_error(fmt::format("mla_decode: no LDS read of {} dwords", dst.count));
  }

  // Pages of at least a tile: `carried` = 0 when the tile starting at token `start` is the
  // unit's first tile in its page (it fetches the page id), else nonzero (the id is at hand).
  void page_continues(SReg start, SReg carried) {
    b.s_and_b32(carried, start, Imm(s.page_size - 1));
    b.s_cmp_eq_u32(start, kv_start());
    b.s_cselect_b32(carried, Imm(0), carried);
  }

  // dst = kv_indices[page_base + start / page_size], a scalar load, unless `carried` is nonzero
  // (the id is at hand) or the tile at `start` lies past the unit's end (carried is then set).
  // tmp receives the index (it may be start itself); addr the load's address.
  void load_page_id_unless_carried(SReg dst, SReg start, SReg carried, SReg tmp, SReg addr) {
    b.s_cmp_ge_u32(start, kv_end());
    b.s_cselect_b32(carried, Imm(1), carried);  // past the end: no load either
    b.s_cmp_lg_u32(carried, Imm(0));
    unless_scc1([&] {
      b.s_lshr_b32(tmp, start, Imm(log2i(s.page_size)));
      b.s_add_u32(tmp, page_base(), tmp);
      b.s_lshl_b32(tmp, tmp, Imm(2));
      b.s_add_u32(addr[0], ptr(mla_decode_args::kv_indices)[0], tmp);
      b.s_addc_u32(addr[1], ptr(mla_decode_args::kv_indices)[1], Imm(0));
      b.s_load_dword(dst, addr, 0);
    });
  }

  // Emits `body` behind a branch that skips it when SCC is 1.
  template <class F>
  void unless_scc1(F&& body) {
    Label skip = b.new_label("skip");
    b.s_cbranch_scc1(skip);
    body();
    b.bind(skip);
  }
};

void emit_producer(Kernel& k);      // registers staging (mla_decode_producer.cpp)
void emit_producer_dma(Kernel& k, int index = 0);  // LDS DMA, producer `index` (mla_decode_producer_dma.cpp)
void emit_consumer(Kernel& k);
void emit_wide_prefix(Kernel& k);   // every wave of the wide prefix kernel (mla_prefix_wide.cpp)

}  // namespace mla::gen::decode
