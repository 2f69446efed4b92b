// Typed register ranges and operands. A VGPR range cannot be passed where an SGPR is
// required: the builder's parameter types reject it at compile time (as in Xbyak).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <variant>

#include <fmt/format.h>

namespace mla::gen {

enum class RegFile : uint8_t { S, V, A };

template <RegFile F>
struct Reg {
  uint16_t first = 0;
  uint16_t count = 0;  // number of 32-bit registers

  constexpr Reg() = default;
  constexpr Reg(uint16_t f, uint16_t c) : first(f), count(c) {}

  // One 32-bit register of the range.
  Reg operator[](int i) const {
    if (i < 0 || i >= count) throw std::out_of_range(fmt::format("register index {} outside range of {}", i, count));
    return Reg(uint16_t(first + i), 1);
  }
  // A sub-range [i, i+n).
  Reg sub(int i, int n) const {
    if (i < 0 || n <= 0 || i + n > count)
      throw std::out_of_range(fmt::format("sub-range [{}, {}) outside range of {}", i, i + n, count));
    return Reg(uint16_t(first + i), uint16_t(n));
  }
  bool valid() const { return count > 0; }
};

using SReg = Reg<RegFile::S>;
using VReg = Reg<RegFile::V>;
using AReg = Reg<RegFile::A>;

// Hardware registers with fixed names.
enum class SpecialId : uint8_t { vcc, vcc_lo, vcc_hi, exec, exec_lo, exec_hi, m0, scc };
struct Special {
  SpecialId id;
};
inline constexpr Special vcc{SpecialId::vcc};
inline constexpr Special vcc_lo{SpecialId::vcc_lo};
inline constexpr Special vcc_hi{SpecialId::vcc_hi};
inline constexpr Special exec{SpecialId::exec};
inline constexpr Special exec_lo{SpecialId::exec_lo};
inline constexpr Special m0{SpecialId::m0};

// An immediate; the printer emits it as an inline constant or a literal.
struct Imm {
  int64_t value;
  constexpr Imm(int64_t v) : value(v) {}
};
// A 32-bit float immediate, printed as its bit pattern (exact).
struct FImm {
  float value;
};

// Generic operand, as held by instructions.
struct Operand {
  enum class Kind : uint8_t { None, SGPR, VGPR, AGPR, Special, Imm, Label };
  Kind kind = Kind::None;
  uint16_t index = 0;  // register index, SpecialId or label id
  uint16_t count = 1;  // registers covered
  int64_t imm = 0;

  static Operand of(SReg r) { return {Kind::SGPR, r.first, r.count, 0}; }
  static Operand of(VReg r) { return {Kind::VGPR, r.first, r.count, 0}; }
  static Operand of(AReg r) { return {Kind::AGPR, r.first, r.count, 0}; }
  static Operand of(Special s) {
    uint16_t n = (s.id == SpecialId::vcc || s.id == SpecialId::exec) ? 2 : 1;
    return {Kind::Special, uint16_t(s.id), n, 0};
  }
  static Operand of(Imm i) { return {Kind::Imm, 0, 1, i.value}; }
  static Operand of(FImm f) {
    uint32_t bits;
    __builtin_memcpy(&bits, &f.value, 4);
    return {Kind::Imm, 0, 1, int64_t(bits)};
  }
  bool is_reg() const { return kind == Kind::SGPR || kind == Kind::VGPR || kind == Kind::AGPR; }
};

// Scalar source: SGPR, special register or immediate (never a VGPR).
struct SSrc {
  Operand op;
  SSrc(SReg r) : op(Operand::of(r)) {}
  SSrc(Special s) : op(Operand::of(s)) {}
  SSrc(Imm i) : op(Operand::of(i)) {}
  SSrc(int v) : op(Operand::of(Imm(v))) {}
  SSrc(unsigned v) : op(Operand::of(Imm(v))) {}
  SSrc(FImm f) : op(Operand::of(f)) {}
};

// Vector source: VGPR, SGPR, special register or immediate.
struct VSrc {
  Operand op;
  VSrc(VReg r) : op(Operand::of(r)) {}
  VSrc(SReg r) : op(Operand::of(r)) {}
  VSrc(Special s) : op(Operand::of(s)) {}
  VSrc(Imm i) : op(Operand::of(i)) {}
  VSrc(int v) : op(Operand::of(Imm(v))) {}
  VSrc(unsigned v) : op(Operand::of(Imm(v))) {}
  VSrc(FImm f) : op(Operand::of(f)) {}
};

// MFMA accumulator / destination: AGPR or VGPR (gfx90a and later accept both).
struct AccReg {
  Operand op;
  AccReg(VReg r) : op(Operand::of(r)) {}
  AccReg(AReg r) : op(Operand::of(r)) {}
};

// MFMA A/B operand: VGPR or AGPR (gfx90a and later read both).
struct AVReg {
  Operand op;
  AVReg(VReg r) : op(Operand::of(r)) {}
  AVReg(AReg r) : op(Operand::of(r)) {}
};

// MFMA accumulator input: a register range or the inline constant 0 (a fresh accumulation).
struct AccSrc {
  Operand op;
  AccSrc(VReg r) : op(Operand::of(r)) {}
  AccSrc(AReg r) : op(Operand::of(r)) {}
  static AccSrc zero() { return AccSrc(Operand::of(Imm(0))); }

 private:
  explicit AccSrc(Operand o) : op(o) {}
};

// Labels are objects, bound once.
struct Label {
  int id = -1;
};

}  // namespace mla::gen
