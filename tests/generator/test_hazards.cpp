// Hazard NOP insertion: for every rule on both targets, a pair that needs N wait states gets
// exactly N (and N-1 instructions in between leave exactly 1), the pair N instructions apart
// gets none, a pair on other registers gets none; plus loops (back edges), branch joins,
// existing s_nop and long waits split over several s_nop.
//
// Every expected number is a literal from the ISA tables, with its source:
//   [L]   LLVM GCNHazardRecognizer.cpp (function / constant named beside the number)
//   [llc] the same number measured with llc 22 -run-pass=post-RA-hazard-rec (docs/hazards.md)
//   [P]   LLVM PR 126132 (gfx950: XDL writes need one more wait state)
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "asm/printer.h"
#include "passes/hazards.h"
#include "program/builder.h"

using namespace mla::gen;

namespace {

using Emit = std::function<void(Builder&)>;

Program make(Arch a) {
  Program p;
  p.name = std::string("t");  // not = "t": GCC 12 -Wrestrict false positive (its bug 105329)
  p.target = &target(a);
  return p;
}

VReg v(int first, int count = 1) { return VReg(uint16_t(first), uint8_t(count)); }
AReg acc(int first, int count = 1) { return AReg(uint16_t(first), uint8_t(count)); }
SReg s(int first, int count = 1) { return SReg(uint16_t(first), uint8_t(count)); }
Operand op(VReg r) { return Operand::of(r); }
Operand op(SReg r) { return Operand::of(r); }

// An instruction no rule cares about: one wait state of independent work.
void filler(Builder& b) { b.s_mov_b32(s(90), 0); }

struct Result {
  HazardStats stats;
  int before_consumer = 0;  // wait states of the s_nop run right before the consumer
  std::vector<std::string> lines;
};

// Runs the pass over `body` + s_endpgm; the consumer is the last instruction of `body`.
Result run(Arch a, const Emit& body) {
  Program p = make(a);
  Builder b(p);
  body(b);
  b.s_endpgm();
  Result r;
  r.stats = insert_hazard_nops(p);
  int i = int(p.insts.size()) - 2;  // the consumer (s_endpgm is last)
  for (--i; i >= 0 && p.insts[i].cls() == OpClass::Nop; --i) r.before_consumer += p.insts[i].nops;
  for (const auto& inst : p.insts) r.lines.push_back(format_inst(p, inst));
  return r;
}

// Wait states inserted between producer and consumer with `gap` fillers between them.
int pair(Arch a, const Emit& producer, int gap, const Emit& consumer) {
  Result r = run(a, [&](Builder& b) {
    producer(b);
    for (int k = 0; k < gap; ++k) filler(b);
    consumer(b);
  });
  INFO(fmt::format("{}", fmt::join(r.lines, "\n")));
  CHECK(r.before_consumer == r.stats.wait_states_added);  // all of it sits right before the consumer
  return r.stats.wait_states_added;
}

// The four properties of one rule instance: adjacent -> N, N-1 apart -> 1, N apart -> 0, and a
// consumer on other registers -> 0.
void check_rule(Arch a, const Emit& producer, const Emit& consumer, const Emit& unrelated, int expected) {
  CAPTURE(arch_name(a), expected);
  CHECK(pair(a, producer, 0, consumer) == expected);
  if (expected > 0) {
    CHECK(pair(a, producer, expected - 1, consumer) == 1);
    CHECK(pair(a, producer, expected, consumer) == 0);
  }
  CHECK(pair(a, producer, 0, unrelated) == 0);
}

// ---- XDL expectations per MFMA and target. Passes from LLVM 22's schedule model (measured);
// columns: SrcC same, SrcC overlapped, SrcA/B, VALU read, VMEM/LDS read, overwrite (WAW),
// SrcC read then overwrite (WAR).
//   gfx942: same 2p:2 else 0; overlapped passes+1; SrcA/B, VALU, mem, WAW passes+3; WAR 1/3/7/15 [L]
//   gfx950: overlapped passes+2; SrcA/B, VALU, mem, WAW passes+4 for > 2 passes [L][P]
struct XdlExpect {
  std::string_view mnemonic;
  Arch arch;
  int same, overlapped, srcab, valu_read, mem_read, overwrite, war;
};
const XdlExpect kXdl[] = {
    // gfx942 [L] [llc]
    {"v_mfma_f32_16x16x32_fp8_fp8", Arch::gfx942, 0, 5, 7, 7, 7, 7, 3},    // 4 passes
    {"v_mfma_f32_32x32x16_fp8_fp8", Arch::gfx942, 0, 9, 11, 11, 11, 11, 7},  // 8 passes
    {"v_mfma_f32_16x16x16_bf16", Arch::gfx942, 0, 5, 7, 7, 7, 7, 3},       // 4 passes
    {"v_mfma_f32_32x32x8_bf16", Arch::gfx942, 0, 9, 11, 11, 11, 11, 7},    // 8 passes
    // gfx950 [L] [P] [llc]
    {"v_mfma_f32_16x16x32_fp8_fp8", Arch::gfx950, 0, 6, 8, 8, 8, 8, 3},    // 4 passes
    {"v_mfma_f32_32x32x16_fp8_fp8", Arch::gfx950, 0, 10, 12, 12, 12, 12, 7},  // 8 passes
    {"v_mfma_f32_16x16x16_bf16", Arch::gfx950, 0, 6, 8, 8, 8, 8, 3},       // 4 passes
    {"v_mfma_f32_32x32x8_bf16", Arch::gfx950, 0, 10, 12, 12, 12, 12, 7},   // 8 passes
    {"v_mfma_f32_16x16x32_bf16", Arch::gfx950, 0, 6, 8, 8, 8, 8, 3},       // 4 passes
    {"v_mfma_f32_32x32x16_bf16", Arch::gfx950, 0, 10, 12, 12, 12, 12, 7},  // 8 passes
    {"v_mfma_f32_16x16x128_f8f6f4", Arch::gfx950, 0, 10, 12, 12, 12, 12, 7},  // 8 passes (fp8)
    {"v_mfma_f32_32x32x64_f8f6f4", Arch::gfx950, 0, 18, 20, 20, 20, 20, 15},  // 16 passes (fp8)
};

// One MFMA of `mn`: D = v[d..], A = v[a..], B = v[120..], C = v[c..].
void mfma(Builder& b, std::string_view mn, int d, int a, int c) {
  auto shape = *b.target().find_mfma(mn);
  b.mfma(mn, v(d, shape.cd_regs), v(a, shape.a_regs), v(120, shape.b_regs), v(c, shape.cd_regs));
}

}  // namespace

TEST_CASE("hazards: every target MFMA has an expectation row") {
  for (Arch a : {Arch::gfx942, Arch::gfx950})
    for (const auto& m : target(a).mfma) {
      bool found = false;
      for (const auto& e : kXdl) found |= e.arch == a && e.mnemonic == m.mnemonic;
      CHECK(found);
    }
}

TEST_CASE("hazards: xdl_write_then_srcc_same (accumulation chain)") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    check_rule(
        e.arch, [&](Builder& b) { mfma(b, mn, 0, 100, 0); }, [&](Builder& b) { mfma(b, mn, 0, 100, 0); },
        [&](Builder& b) { mfma(b, mn, 200, 100, 200); }, e.same);
  }
}

TEST_CASE("hazards: xdl_write_then_srcc_overlapped") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    check_rule(
        e.arch, [&](Builder& b) { mfma(b, mn, 0, 100, 0); }, [&](Builder& b) { mfma(b, mn, 40, 100, 2); },
        [&](Builder& b) { mfma(b, mn, 40, 100, 200); }, e.overlapped);
  }
}

TEST_CASE("hazards: xdl_write_then_mfma_srcab") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    check_rule(
        e.arch, [&](Builder& b) { mfma(b, mn, 0, 100, 0); }, [&](Builder& b) { mfma(b, mn, 40, 0, 200); },
        [&](Builder& b) { mfma(b, mn, 40, 100, 200); }, e.srcab);
  }
}

TEST_CASE("hazards: xdl_write_then_valu_read (VGPR and AGPR accumulators)") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    auto prod = [&](Builder& b) { mfma(b, mn, 0, 100, 0); };
    check_rule(
        e.arch, prod, [](Builder& b) { b.v_mov_b32(v(90), v(1)); }, [](Builder& b) { b.v_mov_b32(v(90), v(30)); },
        e.valu_read);
    // AGPR destination read back with v_accvgpr_read: same table [L] (v_accvgpr_read is a VALU).
    auto prod_acc = [&](Builder& b) {
      auto shape = *b.target().find_mfma(mn);
      b.mfma(mn, acc(0, shape.cd_regs), v(100, shape.a_regs), v(120, shape.b_regs), acc(0, shape.cd_regs));
    };
    check_rule(
        e.arch, prod_acc, [](Builder& b) { b.v_accvgpr_read_b32(v(5), acc(1)); },
        [](Builder& b) { b.v_accvgpr_read_b32(v(5), acc(40)); }, e.valu_read);
  }
}

TEST_CASE("hazards: xdl_write_then_mem_read (LDS data, VMEM address and store data)") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    auto prod = [&](Builder& b) { mfma(b, mn, 0, 100, 0); };
    check_rule(
        e.arch, prod, [](Builder& b) { b.ds_write_b32(v(90), v(1)); }, [](Builder& b) { b.ds_write_b32(v(90), v(30)); },
        e.mem_read);
    check_rule(
        e.arch, prod, [](Builder& b) { b.buffer_load_dword(v(91), v(1), s(4, 4), 0); },
        [](Builder& b) { b.buffer_load_dword(v(91), v(30), s(4, 4), 0); }, e.mem_read);
    check_rule(
        e.arch, prod, [](Builder& b) { b.buffer_store_dword(v(1), v(90), s(4, 4), s(8)); },
        [](Builder& b) { b.buffer_store_dword(v(30), v(90), s(4, 4), s(8)); }, e.mem_read);
  }
}

TEST_CASE("hazards: xdl_write_then_overwrite (VALU, LDS load, v_accvgpr_write)") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    auto prod = [&](Builder& b) { mfma(b, mn, 0, 100, 0); };
    check_rule(
        e.arch, prod, [](Builder& b) { b.v_mov_b32(v(1), v(90)); }, [](Builder& b) { b.v_mov_b32(v(30), v(90)); },
        e.overwrite);
    check_rule(
        e.arch, prod, [](Builder& b) { b.ds_read_b32(v(1), v(90)); }, [](Builder& b) { b.ds_read_b32(v(30), v(90)); },
        e.overwrite);
  }
  // AGPR destination overwritten by v_accvgpr_write: gfx942 7, gfx950 8 (4 passes) [L][llc]
  for (auto [a, n] : {std::pair{Arch::gfx942, 7}, std::pair{Arch::gfx950, 8}}) {
    auto prod = [](Builder& b) { b.mfma("v_mfma_f32_16x16x32_fp8_fp8", acc(0, 4), v(100, 2), v(110, 2), acc(0, 4)); };
    check_rule(
        a, prod, [](Builder& b) { b.v_accvgpr_write_b32(acc(1), v(5)); },
        [](Builder& b) { b.v_accvgpr_write_b32(acc(40), v(5)); }, n);
  }
}

TEST_CASE("hazards: xdl_srcc_read_then_overwrite (WAR on the accumulator input)") {
  for (const auto& e : kXdl) {
    CAPTURE(e.mnemonic);
    auto mn = e.mnemonic;
    auto prod = [&](Builder& b) { mfma(b, mn, 40, 100, 0); };  // reads SrcC = v[0..]
    check_rule(
        e.arch, prod, [](Builder& b) { b.v_mov_b32(v(1), v(90)); }, [](Builder& b) { b.v_mov_b32(v(30), v(90)); },
        e.war);
    check_rule(
        e.arch, prod, [](Builder& b) { b.ds_read_b32(v(1), v(90)); }, [](Builder& b) { b.ds_read_b32(v(30), v(90)); },
        e.war);
  }
}

TEST_CASE("hazards: valu_write_vgpr_then_mfma_read") {
  const char* mn = "v_mfma_f32_16x16x32_fp8_fp8";
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 2 on both targets: [L] checkMAIHazards90A LegacyVALUNotDotWritesVGPRWaitStates; [llc]
    check_rule(
        a, [](Builder& b) { b.v_mov_b32(v(101), v(90)); },
        [&](Builder& b) { b.mfma(mn, v(0, 4), v(100, 2), v(110, 2), v(0, 4)); },
        [&](Builder& b) { b.mfma(mn, v(0, 4), v(102, 2), v(110, 2), v(0, 4)); }, 2);
    // v_accvgpr_write feeding SrcC: 2 [L] (v_accvgpr_write is a legacy VALU on gfx940+); [llc]
    check_rule(
        a, [](Builder& b) { b.v_accvgpr_write_b32(acc(1), v(5)); },
        [&](Builder& b) { b.mfma(mn, acc(0, 4), v(100, 2), v(110, 2), acc(0, 4)); },
        [&](Builder& b) { b.mfma(mn, acc(8, 4), v(100, 2), v(110, 2), acc(8, 4)); }, 2);
    // A transcendental result feeding an MFMA: 2 (this rule; the 1 of the trans rule is smaller) [llc]
    check_rule(
        a, [](Builder& b) { b.v_exp_f32(v(101), v(90)); },
        [&](Builder& b) { b.mfma(mn, v(0, 4), v(100, 2), v(110, 2), v(0, 4)); },
        [&](Builder& b) { b.mfma(mn, v(0, 4), v(102, 2), v(110, 2), v(0, 4)); }, 2);
  }
}

namespace {
void cmp_to_exec(Builder& b) { b.emit("v_cmp_eq_u32", {Operand::of(exec)}, {op(v(1)), op(v(2))}); }
void cmp_to_sgpr(Builder& b) { b.emit("v_cmp_eq_u32", {op(s(20, 2))}, {op(v(1)), op(v(2))}); }
}  // namespace

TEST_CASE("hazards: valu_write_exec_then_mfma") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 4 on both: [L] checkMAIHazards90A VALUWritesExecWaitStates; [llc]
    check_rule(
        a, cmp_to_exec, [](Builder& b) { b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4)); },
        [](Builder& b) { b.v_mov_b32(v(3), 0); }, 4);
  }
}

TEST_CASE("hazards: trans_write_then_valu_read") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 1 on both: [L] checkVALUHazards TransDefWaitstates (hasTransForwardingHazard = gfx940+); [llc]
    check_rule(
        a, [](Builder& b) { b.v_exp_f32(v(1), v(0)); }, [](Builder& b) { b.v_add_f32(v(2), v(1), v(1)); },
        [](Builder& b) { b.v_add_f32(v(2), v(3), v(3)); }, 1);
    // A transcendental consumer and an LDS store need none [L][llc]
    CHECK(pair(a, [](Builder& b) { b.v_exp_f32(v(1), v(0)); }, 0, [](Builder& b) { b.v_log_f32(v(2), v(1)); }) == 0);
    CHECK(pair(a, [](Builder& b) { b.v_exp_f32(v(1), v(0)); }, 0, [](Builder& b) { b.ds_write_b32(v(3), v(1)); }) == 0);
  }
}

TEST_CASE("hazards: valu_dst_sel_write_then_valu_use") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 1 on both: [L] checkVALUHazards Shift16DefWaitstates (op_sel dst bit); [llc]
    auto prod = [](Builder& b) { b.emit("v_cvt_pk_fp8_f32", {op(v(1))}, {op(v(2)), op(v(3))}, Mods{.op_sel = {3, 0b100}}); };
    check_rule(
        a, prod, [](Builder& b) { b.v_mov_b32(v(4), v(1)); }, [](Builder& b) { b.v_mov_b32(v(4), v(7)); }, 1);
    // Writing the low half (op_sel dst bit 0) is not a hazard [llc]
    CHECK(pair(a, [](Builder& b) { b.emit("v_cvt_pk_fp8_f32", {op(v(1))}, {op(v(2)), op(v(3))}); }, 0,
               [](Builder& b) { b.v_mov_b32(v(4), v(1)); }) == 0);
  }
}

TEST_CASE("hazards: valu_write_sgpr_then_valu_read (SGPR pair and VCC)") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 2 on both: [L] checkVALUHazards VALUWriteSGPRVALUReadWaitstates (hasVDecCoExecHazard); [llc]
    check_rule(
        a, cmp_to_sgpr, [](Builder& b) { b.v_cndmask_b32(v(5), v(3), v(4), s(20, 2)); },
        [](Builder& b) { b.v_cndmask_b32(v(5), v(3), v(4), s(22, 2)); }, 2);
    check_rule(
        a, [](Builder& b) { b.v_cmp_lt_u32(vcc, v(1), v(2)); },
        [](Builder& b) { b.v_cndmask_b32(v(5), v(3), v(4), vcc); },
        [](Builder& b) { b.v_cndmask_b32(v(5), v(3), v(4), s(22, 2)); }, 2);
    // An SALU reading the SGPR is interlocked: none [llc]
    CHECK(pair(a, [](Builder& b) { b.v_readfirstlane_b32(s(4), v(0)); }, 0,
               [](Builder& b) { b.s_add_u32(s(5), s(4), 1); }) == 0);
  }
}

TEST_CASE("hazards: valu_write_vgpr_then_readlane") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 1 on both: [L] checkVALUHazards VALUWriteVGPRReadlaneRead; [llc]
    check_rule(
        a, [](Builder& b) { b.v_mov_b32(v(5), 0); }, [](Builder& b) { b.v_readfirstlane_b32(s(6), v(5)); },
        [](Builder& b) { b.v_readfirstlane_b32(s(6), v(7)); }, 1);
  }
}

TEST_CASE("hazards: valu_write_exec_then_rwlane") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 4 on both: [L] checkVALUHazards VALUWriteEXECRWLane; [llc]
    check_rule(
        a, cmp_to_exec, [](Builder& b) { b.v_readfirstlane_b32(s(6), v(5)); },
        [](Builder& b) { b.v_mov_b32(v(6), v(5)); }, 4);
    check_rule(
        a, cmp_to_exec, [](Builder& b) { b.emit("v_writelane_b32", {op(v(6))}, {Operand::of(Imm(0)), op(s(7))}); },
        [](Builder& b) { b.v_mov_b32(v(6), v(5)); }, 4);
  }
}

TEST_CASE("hazards: valu_write_sgpr_then_lane_select") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 4 on both: [L] checkRWLaneHazards RWLaneWaitStates; [llc]
    auto prod = [](Builder& b) { b.v_readfirstlane_b32(s(7), v(1)); };
    check_rule(
        a, prod, [](Builder& b) { b.emit("v_readlane_b32", {op(s(6))}, {op(v(5)), op(s(7))}); },
        [](Builder& b) { b.emit("v_readlane_b32", {op(s(6))}, {op(v(5)), op(s(8))}); }, 4);
    check_rule(
        a, prod, [](Builder& b) { b.emit("v_writelane_b32", {op(v(6))}, {Operand::of(Imm(0)), op(s(7))}); },
        [](Builder& b) { b.emit("v_writelane_b32", {op(v(6))}, {Operand::of(Imm(0)), op(s(8))}); }, 4);
  }
}

namespace {
const Mods kDpp{.dpp_quad_perm = true, .quad_perm = {1, 0, 3, 2}};
}

TEST_CASE("hazards: valu_write_exec_then_dpp and any_write_vgpr_then_dpp_read") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 5 on both: [L] checkDPPHazards DppExecWaitStates; [llc]
    check_rule(
        a, cmp_to_exec, [](Builder& b) { b.emit("v_mov_b32", {op(v(2))}, {op(v(3))}, kDpp); },
        [](Builder& b) { b.v_mov_b32(v(2), v(3)); }, 5);
    // 2 on both: [L] checkDPPHazards DppVgprWaitStates; [llc]
    check_rule(
        a, [](Builder& b) { b.v_mov_b32(v(1), 0); }, [](Builder& b) { b.emit("v_mov_b32", {op(v(2))}, {op(v(1))}, kDpp); },
        [](Builder& b) { b.emit("v_mov_b32", {op(v(2))}, {op(v(3))}, kDpp); }, 2);
    // Any producer counts, an LDS load too: the s_waitcnt between is one wait state, 1 more is needed [llc]
    CHECK(pair(a,
               [](Builder& b) {
                 b.ds_read_b32(v(1), v(90));
                 b.emit("s_waitcnt", {}, {}).lgkmcnt = 0;
               },
               0, [](Builder& b) { b.emit("v_mov_b32", {op(v(2))}, {op(v(1))}, kDpp); }) == 1);
  }
}

TEST_CASE("hazards: permlane swap rules (gfx950 only)") {
  auto swap = [](Builder& b) { b.emit("v_permlane32_swap_b32", {op(v(0))}, {op(v(1))}); };
  auto swap16 = [](Builder& b) { b.emit("v_permlane16_swap_b32", {op(v(0))}, {op(v(1))}); };
  // gfx950: 2 [L] checkPermlaneHazards VALUWritesVDstWaitStates; [llc] (either operand)
  check_rule(
      Arch::gfx950, [](Builder& b) { b.v_mov_b32(v(1), 0); }, swap, [](Builder& b) { b.v_mov_b32(v(2), v(1)); }, 2);
  check_rule(
      Arch::gfx950, [](Builder& b) { b.v_mov_b32(v(0), 0); }, swap16, [](Builder& b) { b.v_mov_b32(v(2), v(1)); }, 2);
  // gfx950: 4 [L] VCmpXWritesExecWaitStates; [T] mai-hazards-gfx950.mir (S_NOP 3); [llc]
  check_rule(Arch::gfx950, cmp_to_exec, swap16, [](Builder& b) { b.v_mov_b32(v(2), v(3)); }, 4);
  // gfx942 has no v_permlane*_swap: its table holds 0 for both rules
  CHECK(pair(Arch::gfx942, [](Builder& b) { b.v_mov_b32(v(7), 0); }, 0,
             [](Builder& b) { b.emit("v_permlane32_swap_b32", {op(v(7))}, {op(v(8))}); }) == 0);
}

TEST_CASE("hazards: valu_write_sgpr_then_vmem_read (rsrc, soffset, EXEC)") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 5 on both: [L] checkVMEMHazards VmemSgprWaitStates; [llc] (LLVM 22 applies it to gfx9)
    check_rule(
        a, [](Builder& b) { b.v_readfirstlane_b32(s(8), v(0)); },
        [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), s(8)); },
        [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), s(9)); }, 5);
    check_rule(
        a, [](Builder& b) { b.v_readfirstlane_b32(s(6), v(0)); },
        [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), 0); },
        [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(12, 4), 0); }, 5);
    // EXEC is an implicit VMEM read [llc]
    check_rule(
        a, cmp_to_exec, [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), 0); },
        [](Builder& b) { b.s_mov_b32(s(10), 0); }, 5);
    // An SALU write of the SGPR needs none [llc]
    CHECK(pair(a, [](Builder& b) { b.s_mov_b32(s(8), 0); }, 0,
               [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), s(8)); }) == 0);
  }
}

TEST_CASE("hazards: salu_write_m0_then_lds_dma") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 1 on both: [L] checkReadM0Hazards ReadM0WaitStates (hasReadM0LdsDmaHazard); [llc]
    check_rule(
        a, [](Builder& b) { b.emit("s_mov_b32", {Operand::of(m0)}, {Operand::of(Imm(0))}); },
        [](Builder& b) { b.buffer_load_dword_lds(v(2), s(4, 4), 0); },
        [](Builder& b) { b.buffer_load_dword(v(1), v(2), s(4, 4), 0); }, 1);
  }
}

TEST_CASE("hazards: wide_store_then_valu_write_data") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    // 2 on both: [L] createsVALUHazard + checkVALUHazardsHelper (gfx940: 2); [llc] (immediate soffset)
    check_rule(
        a, [](Builder& b) { b.buffer_store_dwordx4(v(2, 4), v(0), s(4, 4), 0); },
        [](Builder& b) { b.v_mov_b32(v(3), 0); }, [](Builder& b) { b.v_mov_b32(v(7), 0); }, 2);
    // An SGPR soffset and a 64-bit store do not create it [L][llc]
    CHECK(pair(a, [](Builder& b) { b.buffer_store_dwordx4(v(2, 4), v(0), s(4, 4), s(8)); }, 0,
               [](Builder& b) { b.v_mov_b32(v(3), 0); }) == 0);
    CHECK(pair(a, [](Builder& b) { b.buffer_store_dwordx2(v(2, 2), v(0), s(4, 4), 0); }, 0,
               [](Builder& b) { b.v_mov_b32(v(3), 0); }) == 0);
  }
}

// ---------------------------------------------------------------- control flow

TEST_CASE("hazards: the program entry is infinitely far from any producer") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    Result r = run(a, [](Builder& b) { b.v_mov_b32(v(90), v(1)); });
    CHECK(r.stats.wait_states_added == 0);
  }
}

TEST_CASE("hazards: loop back edge, producer at the loop end, consumer at the loop top") {
  // 16x16x32 fp8 (4 passes): VALU read needs 7 (gfx942) / 8 (gfx950) [L][P]. On the back edge
  // s_cmp + s_cbranch lie between (2 wait states): 5 / 6 more. From the entry: nothing.
  for (auto [a, n] : {std::pair{Arch::gfx942, 5}, std::pair{Arch::gfx950, 6}}) {
    Result r = run(a, [](Builder& b) {
      Label top = b.new_label("top");
      b.bind(top);
      b.v_mov_b32(v(90), v(1));  // consumer
      b.v_add_u32(v(91), v(92), v(93));
      b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));  // producer
      b.s_cmp_lt_u32(s(1), s(2));
      b.s_cbranch_scc1(top);
    });
    INFO(fmt::format("{}", fmt::join(r.lines, "\n")));
    CHECK(r.stats.wait_states_added == n);
    REQUIRE(r.lines.size() >= 3);
    CHECK(r.lines[1] == fmt::format("s_nop {}", n - 1));  // right after the label, before the consumer
    CHECK(r.lines[2] == "v_mov_b32 v90, v1");
  }
}

TEST_CASE("hazards: branch join takes the worst predecessor") {
  // Taken path: only the s_cbranch between (1); fall-through path: 4. 16x16x32 fp8 SrcA/B needs
  // 7 (gfx942) / 8 (gfx950) [L][P], so the join needs 6 / 7.
  for (auto [a, n] : {std::pair{Arch::gfx942, 6}, std::pair{Arch::gfx950, 7}}) {
    Result r = run(a, [](Builder& b) {
      Label skip = b.new_label("skip");
      b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));
      b.s_cbranch_scc1(skip);
      b.v_mov_b32(v(50), 0);
      b.v_mov_b32(v(51), 0);
      b.v_mov_b32(v(52), 0);
      b.bind(skip);
      b.v_mfma_f32_16x16x32_fp8_fp8(v(40, 4), v(0, 2), v(110, 2), v(60, 4));
    });
    INFO(fmt::format("{}", fmt::join(r.lines, "\n")));
    CHECK(r.stats.wait_states_added == n);
    CHECK(r.before_consumer == n);
  }
}

TEST_CASE("hazards: a longer fall-through path alone needs less") {
  // Same as above without the branch: 4 wait states lie between, 7 - 4 = 3 (gfx942) [L].
  Result r = run(Arch::gfx942, [](Builder& b) {
    b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));
    b.s_mov_b32(s(90), 0);
    b.v_mov_b32(v(50), 0);
    b.v_mov_b32(v(51), 0);
    b.v_mov_b32(v(52), 0);
    b.v_mfma_f32_16x16x32_fp8_fp8(v(40, 4), v(0, 2), v(110, 2), v(60, 4));
  });
  CHECK(r.stats.wait_states_added == 3);
}

TEST_CASE("hazards: existing s_nop wait states count") {
  // 16x16x32 fp8 then VALU read: 7 on gfx942 [L]; an s_nop 2 (3 wait states) leaves 4.
  Result r = run(Arch::gfx942, [](Builder& b) {
    b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));
    b.emit("s_nop", {}, {}).nops = 3;
    b.v_mov_b32(v(90), v(1));
  });
  CHECK(r.stats.wait_states_added == 4);
  CHECK(r.stats.nops_inserted == 1);
}

TEST_CASE("hazards: waits longer than one s_nop are split") {
  // gfx950 32x32x64 f8f6f4 (16 passes) then SrcA read: 20 [L][P]; s_nop holds at most 16.
  Result r = run(Arch::gfx950, [](Builder& b) {
    b.mfma("v_mfma_f32_32x32x64_f8f6f4", v(0, 16), v(100, 8), v(120, 8), v(0, 16));
    b.mfma("v_mfma_f32_32x32x64_f8f6f4", v(40, 16), v(0, 8), v(120, 8), v(200, 16));
  });
  CHECK(r.stats.wait_states_added == 20);
  CHECK(r.stats.nops_inserted == 2);
  CHECK(r.before_consumer == 20);
  REQUIRE(r.stats.rules_hit.size() == 1);
  CHECK(r.stats.rules_hit[0].rfind("xdl_write_then_mfma_srcab @ ", 0) == 0);
}

TEST_CASE("hazards: a chain of accumulating MFMAs needs no wait, the read after it does") {
  // SrcC same: 0 for 4 passes [L]; the last MFMA then a VALU read: 7 / 8 [L][P].
  for (auto [a, n] : {std::pair{Arch::gfx942, 7}, std::pair{Arch::gfx950, 8}}) {
    Result r = run(a, [](Builder& b) {
      for (int k = 0; k < 4; ++k) b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));
      b.v_mov_b32(v(90), v(3));
    });
    CHECK(r.stats.wait_states_added == n);
    CHECK(r.before_consumer == n);
  }
}

TEST_CASE("hazards: a loop whose body is all hazards reaches a fixed point") {
  // Two accumulations into different tiles, each read back at the loop top: the pass must settle
  // and the emitted loop must satisfy its own back edge (checked by re-running: nothing more added).
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    Program p = make(a);
    Builder b(p);
    Label top = b.new_label("top");
    b.bind(top);
    b.v_mov_b32(v(90), v(1));
    b.v_mov_b32(v(91), v(41));
    b.v_mfma_f32_16x16x32_fp8_fp8(v(0, 4), v(100, 2), v(110, 2), v(0, 4));
    b.v_mfma_f32_32x32x16_fp8_fp8(v(40, 16), v(100, 2), v(110, 2), v(40, 16));
    b.s_cbranch_scc1(top);
    b.s_endpgm();
    HazardStats first = insert_hazard_nops(p);
    CHECK(first.wait_states_added > 0);
    HazardStats again = insert_hazard_nops(p);
    CHECK(again.wait_states_added == 0);
  }
}

TEST_CASE("hazards: the same s_nop as LLVM on clang-compiled kernels (docs/hazards.md)") {
  // clang-22 -O2 -x cl, __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8 twice into one accumulator,
  // then v_pk_add_f32 on the result: LLVM emits no wait between the MFMAs and s_nop 6 (gfx942) /
  // s_nop 7 (gfx950) before the v_pk_add_f32.
  for (auto [a, n] : {std::pair{Arch::gfx942, 7}, std::pair{Arch::gfx950, 8}}) {
    Result r = run(a, [](Builder& b) {
      b.v_mfma_f32_16x16x32_fp8_fp8(v(2, 4), v(6, 2), v(8, 2), v(2, 4));
      b.v_mfma_f32_16x16x32_fp8_fp8(v(2, 4), v(6, 2), v(8, 2), v(2, 4));
      b.emit("v_pk_add_f32", {op(v(4, 2))}, {op(v(4, 2)), op(v(4, 2))});
    });
    INFO(fmt::format("{}", fmt::join(r.lines, "\n")));
    CHECK(r.lines[2] == fmt::format("s_nop {}", n - 1));
    CHECK(r.stats.wait_states_added == n);
  }
  // gfx950, __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4 (fp8) then v_exp_f32 of a result
  // lane and v_add_f32 of the exp: LLVM emits s_nop 11 before v_exp_f32 and s_nop 0 before v_add.
  Result r = run(Arch::gfx950, [](Builder& b) {
    b.v_mfma_f32_16x16x128_f8f6f4(v(2, 4), v(2, 8), v(10, 8), v(20, 4));
    b.v_exp_f32(v(2), v(2));
    b.v_add_f32(v(3), v(3), v(2));
  });
  INFO(fmt::format("{}", fmt::join(r.lines, "\n")));
  REQUIRE(r.lines.size() == 6);
  CHECK(r.lines[1] == "s_nop 11");
  CHECK(r.lines[3] == "s_nop 0");
}
