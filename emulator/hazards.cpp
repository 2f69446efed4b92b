// Hazard (wait-state) rules for gfx942 / gfx950.
//
// The wave keeps a wait-state clock: every instruction adds 1, `s_nop N` adds N+1 (as LLVM's
// GCNHazardRecognizer counts them). For each register the last writer (kind, MFMA passes, its
// destination range) and the clock just after it issued are remembered; a reader or writer
// that comes fewer wait states after it than the rule needs is an error. Numbers (LLVM
// GCNHazardRecognizer.cpp: checkMAIHazards90A, checkMAIVALUHazards, checkVALUHazards,
// checkVMEMHazards, checkDPPHazards, checkRWLaneHazards, checkReadM0Hazards, checkSetRegHazards;
// rocRoller Scheduling/Observers/WaitState/MFMA/XDLWrite94x.hpp, XDLReadSrcC94x.hpp,
// VALUWrite.hpp; LLVM PRs 117263 / 126132 / 126732 / 117287 for gfx950):
//
//   writer                          reader                               gfx942        gfx950
//   VALU write VGPR                 MFMA reads it (any source)           2             2
//   VALU write EXEC                 MFMA                                 4             4
//   XDL  write (P passes)           MFMA SrcC, exactly the same regs     2 if P==2 else 0
//   XDL  write                      MFMA SrcC, overlapping               P+1           P+2
//   SMFMA(non-XDL) write            non-XDL MFMA SrcC, overlapping       P             P
//   XDL  write                      MFMA SrcA/B                          P+3           P+3 (+1 if P>2)
//   SMFMA write                     MFMA SrcA/B                          P+2           P+2
//   XDL  write                      VALU / VMEM / LDS read, or VALU/load
//                                   write of the same register (WAW)     P+3           P+3 (+1 if P>2)
//   SMFMA write                     same                                 P+2           P+2
//   XDL  reads SrcC (P passes)      VALU writes that register (WAR)      P=2:1 4:3 8:7 16:15
//   VALU transcendental write       non-transcendental VALU read         1             1
//   VALU partial write (SDWA dst_sel / op_sel[3])  VALU read             1             1
//   VALU write VGPR                 DPP reads it as src0                 2             2
//   VALU write EXEC                 DPP                                  5             5
//   VALU write SGPR                 v_readlane/v_writelane lane select   4             4
//   VALU write VGPR                 v_permlane*_swap reads it            -             2
//   VALU write SGPR                 VMEM reads it (address, rsrc, soffset) 5           5
//   SALU write M0                   LDS-DMA (buffer/global load ... lds)  1            1
//   >64-bit store (FLAT; MUBUF with non-SGPR soffset) reads data VGPRs,
//                                   VALU overwrites them                  2            2
//   s_setreg                        s_getreg/s_setreg of the same hwreg   2            2
#include <fmt/format.h>

#include "emulator/exec_common.h"
#include "emulator/hazards.h"

namespace mla::emu {

namespace {

inline bool valu_kind(uint8_t k) { return k == W_VALU || k == W_TRANS || k == W_DSTSEL; }
inline bool mfma_kind(uint8_t k) { return k == W_XDL || k == W_SMFMA; }

std::string rname(unsigned id) {
  if (id < kVgprBase) {
    if (id == kSgprExec || id == kSgprExec + 1) return "exec";
    if (id == kSgprVcc || id == kSgprVcc + 1) return "vcc";
    if (id == kSgprM0) return "m0";
    return fmt::format("s{}", id);
  }
  if (id < kAgprBase) return fmt::format("v{}", id - kVgprBase);
  return fmt::format("a{}", id - kAgprBase);
}

constexpr const char* kHazardRelaxed =
    "the read sees the producer's result (the emulator writes results at issue), as if the wait states had elapsed";

void hz(Wave& w, unsigned reg, const RegHist& h, int need, int have, const char* what) {
  const Inst& wr = w.prog->insts[h.wpc_index];
  w.violation("hazard", fmt::format("{} ({} written by `{}` at pc 0x{:x}): needs {} wait states, has {}", what, rname(reg), wr.text, wr.pc,
                                    need, have), kHazardRelaxed);
}

int mfma_read_need(const RegHist& h, bool gfx950) {  // VALU/VMEM/LDS read or WAW after MFMA
  if (h.wkind == W_XDL) return h.passes + 3 + (gfx950 && h.passes > 2 ? 1 : 0);
  return h.passes + 2;
}

int srcc_war_need(int passes) {
  switch (passes) {
    case 2: return 1;
    case 4: return 3;
    case 8: return 7;
    default: return 15;
  }
}

}  // namespace

void check_hazards(Wave& w, const Inst& in) {
  const OpInfo& I = *in.info;
  const uint32_t k = I.kind;
  const bool gfx950 = w.gfx() == Gfx::gfx950;
  const bool is_mfma = k & K_MFMA;
  const bool is_valu = (k & K_VALU) && !is_mfma;
  const bool is_vmem = k & K_VMEM;
  const bool is_mem = k & (K_VMEM | K_LDS);
  if (!(is_mfma || is_valu || is_mem || (k & (K_SETREG | K_GETREG)))) return;
  const uint64_t now = w.clock;
  auto since = [&](uint64_t c) -> int64_t { return int64_t(now) - int64_t(c); };
  const bool dpp = in.flags & F_DPP;

  // EXEC written by VALU.
  if (is_mfma || dpp) {
    for (unsigned r = kSgprExec; r < kSgprExec + 2; ++r) {
      const RegHist& h = w.hist[r];
      if (!valu_kind(h.wkind)) continue;
      int need = is_mfma ? 4 : 5;
      if (since(h.wclock) < need) hz(w, r, h, need, int(since(h.wclock)), is_mfma ? "VALU write of EXEC then MFMA" : "VALU write of EXEC then DPP");
    }
  }
  bool first_src = true;
  for (const RegRange& r : in.reads) {
    bool is_src0 = false;
    if (r.role == RegRange::Src && first_src) { is_src0 = true; first_src = false; }
    for (unsigned i = 0; i < r.count; ++i) {
      unsigned reg = r.first + i;
      const RegHist& h = w.hist[reg];
      if (h.wkind == W_NONE) continue;
      int64_t ws = since(h.wclock);
      if (ws >= 24) continue;
      if (is_mfma) {
        if (valu_kind(h.wkind) && ws < 2) hz(w, reg, h, 2, int(ws), "VALU write then MFMA read");
        if (mfma_kind(h.wkind)) {
          int need;
          const char* what;
          if (r.role == RegRange::SrcC) {
            if (h.dst_first == r.first && h.dst_count == r.count) { need = h.passes == 2 ? 2 : 0; what = "MFMA write then MFMA SrcC read (same registers)"; }
            else if ((k & K_XDL) && h.wkind == W_SMFMA) { need = 0; what = ""; }
            else { need = h.wkind == W_XDL ? h.passes + 1 + (gfx950 ? 1 : 0) : h.passes; what = "MFMA write then MFMA SrcC read (overlapping)"; }
          } else {
            need = h.wkind == W_XDL ? h.passes + 3 + (gfx950 && h.passes > 2 ? 1 : 0) : h.passes + 2;
            what = "MFMA write then MFMA SrcA/SrcB read";
          }
          if (ws < need) hz(w, reg, h, need, int(ws), what);
        }
        continue;
      }
      if (is_valu || is_mem) {
        if (mfma_kind(h.wkind)) {
          int need = mfma_read_need(h, gfx950);
          if (ws < need) hz(w, reg, h, need, int(ws), is_valu ? "MFMA write then VALU read" : "MFMA write then memory-instruction read");
        }
      }
      if (is_valu) {
        if (h.wkind == W_TRANS && !(k & K_TRANS) && ws < 1) hz(w, reg, h, 1, int(ws), "transcendental VALU write then VALU read");
        if (h.wkind == W_DSTSEL && ws < 1) hz(w, reg, h, 1, int(ws), "partial (dst_sel/op_sel) VALU write then VALU read");
        if (dpp && is_src0 && reg >= kVgprBase && valu_kind(h.wkind) && ws < 2) hz(w, reg, h, 2, int(ws), "VALU write then DPP read");
        if ((k & K_RWLANE) && r.role == RegRange::LaneSel && valu_kind(h.wkind) && ws < 4)
          hz(w, reg, h, 4, int(ws), "VALU write of SGPR then v_readlane/v_writelane lane select");
        if ((k & K_PERMLANE) && gfx950 && reg >= kVgprBase && valu_kind(h.wkind) && ws < 2)
          hz(w, reg, h, 2, int(ws), "VALU write then v_permlane*_swap read");
      }
      if (is_vmem && reg < kVgprBase && valu_kind(h.wkind) && ws < 5) hz(w, reg, h, 5, int(ws), "VALU write of SGPR then VMEM read");
      if ((k & K_LDS_DMA) && reg == kSgprM0 && h.wkind == W_SALU && ws < 1) hz(w, reg, h, 1, int(ws), "SALU write of M0 then LDS DMA");
    }
  }
  if (is_valu || is_mem) {
    for (const RegRange& r : in.writes)
      for (unsigned i = 0; i < r.count; ++i) {
        unsigned reg = r.first + i;
        const RegHist& h = w.hist[reg];
        if (mfma_kind(h.wkind)) {
          int64_t ws = since(h.wclock);
          int need = mfma_read_need(h, gfx950);
          if (ws < need) hz(w, reg, h, need, int(ws), "MFMA write then VALU/load write of the same register");
        }
        if (h.srcc_clock) {
          int64_t ws = since(h.srcc_clock);
          int need = srcc_war_need(h.srcc_passes);
          if (ws < need)
            w.violation("hazard", fmt::format("XDL MFMA reads {} as SrcC, then it is overwritten: needs {} wait states, has {}", rname(reg), need, ws),
                        "the MFMA read its SrcC before this write (the emulator reads operands at issue)");
        }
        if (is_valu && h.store_clock) {
          int64_t ws = since(h.store_clock);
          if (ws < 2)
            w.violation("hazard", fmt::format("a >64-bit store reads {} as data, then a VALU overwrites it: needs 2 wait states, has {}", rname(reg), ws),
                        "the store read its data before this write (the emulator stores at issue)");
        }
      }
  }
  if (k & (K_SETREG | K_GETREG)) {
    unsigned id = unsigned(in.simm) & 0x3f;
    if (w.mode_clock_setreg[id] && since(w.mode_clock_setreg[id]) < 2)
      w.violation("hazard", fmt::format("s_setreg of hwreg {} then s_getreg/s_setreg of it: needs 2 wait states, has {}", id,
                                        since(w.mode_clock_setreg[id])),
                  "the hwreg holds the value s_setreg wrote (applied at issue)");
  }
}

void record_hazards(Wave& w, const Inst& in) {
  const OpInfo& I = *in.info;
  const uint32_t k = I.kind;
  const uint64_t after = w.clock + 1;
  uint8_t kind;
  if (k & K_MFMA) kind = (k & K_XDL) ? W_XDL : W_SMFMA;
  else if (k & K_VALU) {
    // LLVM getDstSelForwardingOperand: SDWA with dst_sel != DWORD, or a VOP3 whose op_sel
    // destination bit selects the high half (v_cvt_pk_fp8_f32 op_sel:[_,_,1]).
    unsigned nsrc = in.nops - I.ndst;
    bool partial = ((in.flags & F_SDWA) && in.dst_sel != 6) || ((k & K_DST_OPSEL) && ((in.op_sel >> nsrc) & 1));
    kind = partial ? W_DSTSEL : (k & K_TRANS) ? W_TRANS : W_VALU;
  } else if (k & K_SALU) kind = W_SALU;
  else kind = W_OTHER;
  for (const RegRange& r : in.writes)
    for (unsigned i = 0; i < r.count; ++i) {
      RegHist& h = w.hist[r.first + i];
      h.wkind = kind;
      h.wclock = after;
      h.passes = I.passes;
      h.dst_first = r.first;
      h.dst_count = r.count;
      h.wpc_index = w.pc;
    }
  if (k & K_CMPX)
    for (unsigned r = kSgprExec; r < kSgprExec + 2; ++r) {
      RegHist& h = w.hist[r];
      h.wkind = W_VALU; h.wclock = after; h.wpc_index = w.pc; h.passes = 0; h.dst_first = kSgprExec; h.dst_count = 2;
    }
  if ((k & K_MFMA) && (k & K_XDL))
    for (const RegRange& r : in.reads)
      if (r.role == RegRange::SrcC)
        for (unsigned i = 0; i < r.count; ++i) { w.hist[r.first + i].srcc_clock = after; w.hist[r.first + i].srcc_passes = I.passes; }
  if ((k & K_STORE) && (k & K_VMEM)) {
    bool soff_sgpr = !(k & K_FLAT) && in.nops > 3 && in.ops[3].kind == Operand::SGPR;
    for (const RegRange& r : in.reads)
      if (r.role == RegRange::Data && r.count > 2 && !soff_sgpr)
        for (unsigned i = 0; i < r.count; ++i) w.hist[r.first + i].store_clock = after;
  }
  if (k & K_SETREG) w.mode_clock_setreg[unsigned(in.simm) & 0x3f] = after;
}

}  // namespace mla::emu
