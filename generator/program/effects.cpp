#include "program/effects.h"

#include <algorithm>

namespace mla::gen {

std::optional<RegRange> reg_range(const Operand& o) {
  switch (o.kind) {
    case Operand::Kind::SGPR: return RegRange{File::S, o.index, o.count};
    case Operand::Kind::VGPR: return RegRange{File::V, o.index, o.count};
    case Operand::Kind::AGPR: return RegRange{File::A, o.index, o.count};
    case Operand::Kind::Special:
      switch (SpecialId(o.index)) {
        case SpecialId::vcc: return kVccRange;
        case SpecialId::vcc_lo: return RegRange{File::S, 106, 1};
        case SpecialId::vcc_hi: return RegRange{File::S, 107, 1};
        case SpecialId::exec: return kExecRange;
        case SpecialId::exec_lo: return RegRange{File::S, 126, 1};
        case SpecialId::exec_hi: return RegRange{File::S, 127, 1};
        case SpecialId::m0: return kM0Range;
        case SpecialId::scc: return kSccRange;
      }
      return std::nullopt;  // "off" and other non-registers
    default: return std::nullopt;
  }
}

namespace {

void add_operands(std::vector<RegEffect>& out, const std::vector<Operand>& ops, RegEffect::Role role) {
  for (size_t k = 0; k < ops.size(); ++k)
    if (auto r = reg_range(ops[k])) out.push_back({*r, role, int(k)});
}

std::vector<RegRange> ranges(const std::vector<RegEffect>& v, bool with_implicit) {
  std::vector<RegRange> r;
  for (const RegEffect& e : v)
    if (with_implicit || e.role != RegEffect::Implicit) r.push_back(e.reg);
  return r;
}

}  // namespace

Effects effects_of(const Inst& i) {
  Effects e;
  add_operands(e.defs, i.dst, RegEffect::Dst);
  add_operands(e.uses, i.src, RegEffect::Src);
  if (i.has(kPermlane)) {  // a swap reads and writes both of its VGPR operands
    for (size_t k = 0; k < i.src.size(); ++k)
      if (i.src[k].kind == Operand::Kind::VGPR) e.defs.push_back({*reg_range(i.src[k]), RegEffect::Src, int(k)});
    add_operands(e.uses, i.dst, RegEffect::Dst);
  }
  if (i.has(kDefExec)) e.defs.push_back({kExecRange, RegEffect::Implicit});
  if (i.has(kDefScc)) e.defs.push_back({kSccRange, RegEffect::Implicit});
  if (i.has(kUseExec)) e.uses.push_back({kExecRange, RegEffect::Implicit});
  if (i.has(kUseVcc)) e.uses.push_back({kVccRange, RegEffect::Implicit});
  if (i.has(kUseM0)) e.uses.push_back({kM0Range, RegEffect::Implicit});
  if (i.has(kUseScc)) e.uses.push_back({kSccRange, RegEffect::Implicit});
  return e;
}

std::vector<RegRange> Effects::def_ranges(bool with_implicit) const { return ranges(defs, with_implicit); }
std::vector<RegRange> Effects::use_ranges(bool with_implicit) const { return ranges(uses, with_implicit); }

bool any_overlap(const std::vector<RegRange>& a, const std::vector<RegRange>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.overlaps(y)) return true;
  return false;
}
bool any_overlap(const std::vector<RegRange>& a, const RegRange& b) {
  return std::any_of(a.begin(), a.end(), [&](const RegRange& x) { return x.overlaps(b); });
}

std::vector<RegRange> only(std::vector<RegRange> v, File f) {
  std::erase_if(v, [f](const RegRange& r) { return r.file != f; });
  return v;
}

}  // namespace mla::gen
