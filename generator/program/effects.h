// What an instruction reads and writes: one model for every pass (waitcnt, hazards, the
// scheduler). Registers are ranges of one register file; the special registers live in the
// SGPR file at their hardware numbers (vcc = s[106:107], m0 = s124, exec = s[126:127]) so that
// "writes vcc" and "reads vcc_lo" overlap, and SCC is a file of its own. Explicit effects come
// from the operands in printed order; implicit ones from the opcode table's flags (EXEC read
// by every VALU and memory op, VCC by v_cndmask / v_addc, M0 by LDS DMA, SCC by SALU).
#pragma once
#include <optional>
#include <vector>

#include "program/inst.h"

namespace mla::gen {

enum class File : uint8_t { S, V, A, Scc };

struct RegRange {
  File file;
  int first, count;
  bool overlaps(const RegRange& o) const { return file == o.file && first < o.first + o.count && o.first < first + count; }
  bool same(const RegRange& o) const { return file == o.file && first == o.first && count == o.count; }
};

inline constexpr RegRange kVccRange{File::S, 106, 2}, kM0Range{File::S, 124, 1}, kExecRange{File::S, 126, 2},
    kSccRange{File::Scc, 0, 1};

// The register range of an operand; nullopt for constants and labels.
std::optional<RegRange> reg_range(const Operand& o);

struct RegEffect {
  RegRange reg;
  // Role of the register: an operand of the instruction (its index in dst / src), or an
  // implicit register (-1) the opcode reads or writes without naming it.
  enum Role : uint8_t { Dst, Src, Implicit } role;
  int operand = -1;
};

struct Effects {
  std::vector<RegEffect> defs, uses;

  // Ranges, optionally only the operands' (no implicit registers) or one file.
  std::vector<RegRange> def_ranges(bool with_implicit = true) const;
  std::vector<RegRange> use_ranges(bool with_implicit = true) const;
};

// Defs: the destinations, both operands of a permlane swap, EXEC (kDefExec) and SCC
// (kDefScc). Uses: the sources, both operands of a permlane swap, and EXEC / VCC / M0 / SCC
// where the opcode table says so.
Effects effects_of(const Inst& i);

bool any_overlap(const std::vector<RegRange>& a, const std::vector<RegRange>& b);
bool any_overlap(const std::vector<RegRange>& a, const RegRange& b);
std::vector<RegRange> only(std::vector<RegRange> v, File f);

}  // namespace mla::gen
