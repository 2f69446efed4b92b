#include "passes/hazards/rules.h"

#include "program/effects.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mla::gen::hazard_rules {

namespace {

// ---- Registers an instruction touches (program/effects.h, the model every pass shares).
using Range = RegRange;
constexpr Range kVcc = kVccRange, kM0 = kM0Range, kExec = kExecRange;

std::optional<Range> range_of(const Operand& o) { return reg_range(o); }
bool overlap(const Range& a, const Range& b) { return a.overlaps(b); }
bool same(const Range& a, const Range& b) { return a.same(b); }

// Registers written: destinations, EXEC for kDefExec, SCC, and both operands of a permlane swap.
std::vector<Range> writes(const Inst& i) { return effects_of(i).def_ranges(); }
// Registers read as written in the instruction (no implicit ones; a swap reads both operands).
std::vector<Range> explicit_reads(const Inst& i) { return effects_of(i).use_ranges(false); }
// Registers read, including the implicit EXEC / VCC / M0 (and SCC) reads the opcode table records.
std::vector<Range> reads(const Inst& i) { return effects_of(i).use_ranges(); }

std::vector<Range> vector_regs(std::vector<Range> v) {
  std::erase_if(v, [](const Range& r) { return r.file != File::V && r.file != File::A; });
  return v;
}

// ---- Instruction kinds, in LLVM's terms.
bool is_xdl(const Inst& i) { return i.cls() == OpClass::Mfma; }
// "Legacy" VALU: a vector ALU instruction that is not an MFMA (v_accvgpr_* included).
bool is_valu(const Inst& i) { return i.is_valu(); }
// LLVM's SIInstrInfo::isVALU: every vector ALU instruction, MFMA included.
bool is_any_valu(const Inst& i) { return i.is_valu() || is_xdl(i); }
bool is_mem(const Inst& i) { return i.is_vmem() || i.is_lds(); }
bool is_salu(const Inst& i) { return i.cls() == OpClass::Salu; }
bool is_real(const Inst& i) { return i.cls() != OpClass::Label && i.cls() != OpClass::Nop; }
bool is_rwlane(const Inst& i) { return i.name() == "v_readlane_b32" || i.name() == "v_writelane_b32"; }
bool is_dpp(const Inst& i) { return is_valu(i) && i.mods.is_dpp(); }

// The MFMA's pass count from the target's menu; an MFMA the target lacks is a generator bug.
int passes(const Target& t, const Inst& mfma) {
  auto shape = t.find_mfma(mfma.name());
  if (!shape)
    throw std::logic_error(fmt::format("hazards: {} is not in the {} MFMA menu, its pass count is unknown",
                                       mfma.name(), t.name));
  return shape->passes;
}

// MFMA operands: dst[0] = D, src = {A, B, C}.
std::optional<Range> mfma_dst(const Inst& i) { return i.dst.empty() ? std::nullopt : range_of(i.dst[0]); }
std::optional<Range> mfma_src(const Inst& i, int k) {
  return int(i.src.size()) > k ? range_of(i.src[k]) : std::nullopt;
}


// A VALU that writes only one 16-bit half of its destination (the result is shifted on forwarding):
// VOP3 op_sel with the destination bit (the last of [src..., dst]) set, or SDWA dst_sel other than DWORD.
bool writes_dst_half(const Inst& i) {
  if (!is_any_valu(i) || i.dst.empty()) return false;
  if (i.mods.dst_sel != SdwaSel::none) return true;
  const SelBits& sel = i.mods.op_sel;
  if (sel.count == 0 || !sel.bit(sel.count - 1)) return false;
  if (sel.count == int(i.src.size()) + 1) return true;        // [src0.., dst]
  if (i.name().starts_with("v_pk_")) return false;            // VOP3P: one bit per source, none for dst
  return true;                                                // unknown layout: assume the dst bit
}

// The data VGPRs of a store wider than 64 bits that creates the store-data hazard, if any:
// global_* (FLAT) always; buffer_* (MUBUF) only when soffset (the last operand) is not a register.
std::optional<Range> wide_store_data(const Inst& i) {
  if (i.cls() != OpClass::VmemStore) return std::nullopt;
  const bool mubuf = i.name().starts_with("buffer_");
  if (mubuf && !i.src.empty() && i.src.back().kind != Operand::Kind::Imm) return std::nullopt;
  for (const auto& o : i.src)  // the address is 1 (MUBUF) or 2 (FLAT) VGPRs; data is 3 or 4
    if (o.kind == Operand::Kind::VGPR && o.count > 2) return range_of(o);
  return std::nullopt;
}

const HazardNumbers& n(const Target& t) { return t.hazards; }

}  // namespace

// ---------------------------------------------------------------- XDL producers

int XdlWriteThenSrcCSame::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !is_xdl(c)) return 0;
  auto d = mfma_dst(p), src_c = mfma_src(c, 2);
  if (!d || !src_c || !same(*d, *src_c)) return 0;
  return n(t).xdl_write_then_srcc_same.at(passes(t, p));
}

int XdlWriteThenSrcCOverlapped::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !is_xdl(c)) return 0;
  auto d = mfma_dst(p), src_c = mfma_src(c, 2);
  if (!d || !src_c || !overlap(*d, *src_c) || same(*d, *src_c)) return 0;
  return n(t).xdl_write_then_srcc_overlapped.at(passes(t, p));
}

int XdlWriteThenMfmaSrcAB::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !is_xdl(c)) return 0;
  auto d = mfma_dst(p);
  if (!d) return 0;
  for (int k : {0, 1})
    if (auto s = mfma_src(c, k); s && overlap(*d, *s)) return n(t).xdl_write_then_srcab.at(passes(t, p));
  return 0;
}

int XdlWriteThenValuRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !is_valu(c)) return 0;
  auto d = mfma_dst(p);
  if (!d || !any_overlap(explicit_reads(c), *d)) return 0;
  return n(t).xdl_write_then_valu_read.at(passes(t, p));
}

int XdlWriteThenMemRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !is_mem(c)) return 0;
  auto d = mfma_dst(p);
  if (!d || !any_overlap(explicit_reads(c), *d)) return 0;
  return n(t).xdl_write_then_mem_read.at(passes(t, p));
}

int XdlWriteThenOverwrite::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !(is_valu(c) || is_mem(c))) return 0;
  auto d = mfma_dst(p);
  if (!d || !any_overlap(writes(c), *d)) return 0;
  return n(t).xdl_write_then_overwrite.at(passes(t, p));
}

int XdlSrcCReadThenOverwrite::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_xdl(p) || !(is_valu(c) || is_mem(c))) return 0;
  auto src_c = mfma_src(p, 2);
  if (!src_c || !any_overlap(writes(c), *src_c)) return 0;
  return n(t).xdl_srcc_read_then_overwrite.at(passes(t, p));
}

// ---------------------------------------------------------------- VALU producers

int ValuWriteVgprThenMfmaRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_valu(p) || !is_xdl(c)) return 0;
  if (!any_overlap(vector_regs(writes(p)), explicit_reads(c))) return 0;
  return n(t).valu_write_vgpr_then_mfma_read;
}

int ValuWriteExecThenMfma::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_valu(p) || !is_xdl(c) || !any_overlap(writes(p), kExec)) return 0;
  return n(t).valu_write_exec_then_mfma;
}

int TransWriteThenValuRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (p.cls() != OpClass::ValuTrans || !is_any_valu(c) || c.cls() == OpClass::ValuTrans) return 0;
  if (!any_overlap(writes(p), explicit_reads(c))) return 0;
  return n(t).trans_write_then_valu_read;
}

int ValuDstSelWriteThenValuUse::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(c) || !writes_dst_half(p)) return 0;
  std::vector<Range> touched = reads(c);
  for (const auto& w : writes(c)) touched.push_back(w);
  if (!any_overlap(only(writes(p), File::V), touched)) return 0;
  return n(t).valu_dst_sel_write_then_valu_use;
}

int ValuWriteSgprThenValuRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !is_any_valu(c)) return 0;
  std::vector<Range> r = only(explicit_reads(c), File::S);
  if (c.has(kUseVcc)) r.push_back(kVcc);
  if (!any_overlap(only(writes(p), File::S), r)) return 0;
  return n(t).valu_write_sgpr_then_valu_read;
}

int ValuWriteVgprThenReadlane::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !c.has(kReadlane) || c.src.empty()) return 0;
  auto src0 = range_of(c.src[0]);
  if (!src0 || !any_overlap(writes(p), *src0)) return 0;
  return n(t).valu_write_vgpr_then_readlane;
}

int ValuWriteExecThenRwlane::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !(c.has(kReadlane) || c.has(kWritelane))) return 0;
  if (!any_overlap(writes(p), kExec)) return 0;
  return n(t).valu_write_exec_then_rwlane;
}

int ValuWriteSgprThenLaneSelect::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !is_rwlane(c) || c.src.size() < 2) return 0;
  auto select = range_of(c.src[1]);
  if (!select || select->file != File::S || !any_overlap(writes(p), *select)) return 0;
  return n(t).valu_write_sgpr_then_lane_select;
}

int ValuWriteExecThenDpp::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !is_dpp(c) || !any_overlap(writes(p), kExec)) return 0;
  return n(t).valu_write_exec_then_dpp;
}

int AnyWriteVgprThenDppRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_real(p) || !is_dpp(c)) return 0;
  if (!any_overlap(only(writes(p), File::V), only(explicit_reads(c), File::V))) return 0;
  return n(t).any_write_vgpr_then_dpp_read;
}

int ValuWriteVgprThenPermlaneSwap::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !c.has(kPermlane)) return 0;
  if (!any_overlap(only(writes(p), File::V), only(explicit_reads(c), File::V))) return 0;
  return n(t).valu_write_vgpr_then_permlane_swap;
}

int VcmpxWriteExecThenPermlaneSwap::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_valu(p) || !p.name().starts_with("v_cmp") || !c.has(kPermlane)) return 0;
  if (!any_overlap(writes(p), kExec)) return 0;
  return n(t).vcmpx_write_exec_then_permlane_swap;
}

// ---------------------------------------------------------------- memory

int ValuWriteSgprThenVmemRead::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(p) || !c.is_vmem()) return 0;
  if (!any_overlap(only(writes(p), File::S), only(reads(c), File::S))) return 0;
  return n(t).valu_write_sgpr_then_vmem_read;
}

int SaluWriteM0ThenLdsDma::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_salu(p) || c.cls() != OpClass::LdsDma || !any_overlap(writes(p), kM0)) return 0;
  return n(t).salu_write_m0_then_lds_dma;
}

int WideStoreThenValuWriteData::required(const Target& t, const Inst& p, const Inst& c) {
  if (!is_any_valu(c)) return 0;
  auto data = wide_store_data(p);
  if (!data || !any_overlap(writes(c), *data)) return 0;
  return n(t).wide_store_then_valu_write_data;
}

// ---------------------------------------------------------------- the list

namespace {
template <class R>
constexpr Rule rule() {
  return Rule{R::name, &R::required};
}
constexpr Rule kRules[] = {
    rule<XdlWriteThenSrcCSame>(),          rule<XdlWriteThenSrcCOverlapped>(),
    rule<XdlWriteThenMfmaSrcAB>(),         rule<XdlWriteThenValuRead>(),
    rule<XdlWriteThenMemRead>(),           rule<XdlWriteThenOverwrite>(),
    rule<XdlSrcCReadThenOverwrite>(),      rule<ValuWriteVgprThenMfmaRead>(),
    rule<ValuWriteExecThenMfma>(),         rule<TransWriteThenValuRead>(),
    rule<ValuDstSelWriteThenValuUse>(),    rule<ValuWriteSgprThenValuRead>(),
    rule<ValuWriteVgprThenReadlane>(),     rule<ValuWriteExecThenRwlane>(),
    rule<ValuWriteSgprThenLaneSelect>(),   rule<ValuWriteExecThenDpp>(),
    rule<AnyWriteVgprThenDppRead>(),       rule<ValuWriteVgprThenPermlaneSwap>(),
    rule<VcmpxWriteExecThenPermlaneSwap>(), rule<ValuWriteSgprThenVmemRead>(),
    rule<SaluWriteM0ThenLdsDma>(),         rule<WideStoreThenValuWriteData>(),
};
}  // namespace

std::span<const Rule> all() { return kRules; }

int horizon(const Target& t) {
  const HazardNumbers& h = t.hazards;
  int m = 0;
  for (const XdlPassTable* x : {&h.xdl_write_then_srcc_same, &h.xdl_write_then_srcc_overlapped, &h.xdl_write_then_srcab,
                                &h.xdl_write_then_valu_read, &h.xdl_write_then_mem_read, &h.xdl_write_then_overwrite,
                                &h.xdl_srcc_read_then_overwrite})
    m = std::max({m, x->pass2, x->pass4, x->pass8, x->pass16});
  for (int v : {h.valu_write_vgpr_then_mfma_read, h.valu_write_exec_then_mfma, h.trans_write_then_valu_read,
                h.valu_dst_sel_write_then_valu_use, h.valu_write_sgpr_then_valu_read, h.valu_write_vgpr_then_readlane,
                h.valu_write_exec_then_rwlane, h.valu_write_sgpr_then_lane_select, h.valu_write_sgpr_then_vmem_read,
                h.any_write_vgpr_then_dpp_read, h.valu_write_exec_then_dpp, h.salu_write_m0_then_lds_dma,
                h.wide_store_then_valu_write_data, h.valu_write_vgpr_then_permlane_swap,
                h.vcmpx_write_exec_then_permlane_swap})
    m = std::max(m, v);
  return m;
}

}  // namespace mla::gen::hazard_rules
