// The co-execution issue model (hand-computed timelines) and the region scheduler: it keeps
// every dependence (checked independently on random programs), moves nothing across region
// ends, and fills an MFMA's shadow with independent work.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>

#include "asm/printer.h"
#include "passes/schedule.h"
#include "program/builder.h"
#include "target/issue_model.h"

using namespace mla::gen;

namespace {

Program make(Arch a) {
  Program p;
  p.name = std::string("schedule_test");
  p.target = &target(a);
  return p;
}

// Tags the last instruction with its program-order id (kept in the comment).
void tag(Program& p, int id) { p.insts.back().comment = std::to_string(id); }

// Registers an instruction reads or writes, as (file, index) units; SCC for every SALU.
struct Units {
  std::vector<std::pair<int, int>> def, use;
};
Units units_of(const Inst& i) {
  Units u;
  auto add = [](std::vector<std::pair<int, int>>& v, const Operand& o) {
    int f = o.kind == Operand::Kind::SGPR ? 0 : o.kind == Operand::Kind::VGPR ? 1 : o.kind == Operand::Kind::AGPR ? 2 : -1;
    if (o.kind == Operand::Kind::Special) f = 3;
    if (f < 0) return;
    for (int k = 0; k < o.count; ++k) v.push_back({f, o.index + k});
  };
  for (const auto& d : i.dst) add(u.def, d);
  for (const auto& s : i.src) add(u.use, s);
  if (i.cls() == OpClass::Salu) {
    u.def.push_back({4, 0});
    u.use.push_back({4, 0});
  }
  return u;
}
bool meets(const std::vector<std::pair<int, int>>& a, const std::vector<std::pair<int, int>>& b) {
  for (auto x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}
bool dependent(const Inst& a, const Inst& b) {
  Units x = units_of(a), y = units_of(b);
  if (meets(x.def, y.use) || meets(x.use, y.def) || meets(x.def, y.def)) return true;
  const bool la = a.is_lds(), lb = b.is_lds();
  if (la && lb && (a.cls() == OpClass::LdsWrite || b.cls() == OpClass::LdsWrite)) return true;
  auto global = [](const Inst& i) { return i.is_vmem() || i.cls() == OpClass::Smem; };
  if (global(a) && global(b)) return true;  // global memory keeps program order
  return false;
}

}  // namespace

TEST_CASE("issue model: MFMA co-execution timelines (LLVM PR 233721 rules)") {
  const Target& t = target(Arch::gfx942);
  const IssueOp mfma = issue_op_of(t, "v_mfma_f32_16x16x16_bf16");  // 4 passes, A = 8 bytes
  REQUIRE(mfma.kind == IssueKind::Mfma);
  CHECK(mfma.passes == 4);
  CHECK(mfma.a_bytes == 8);
  const IssueOp valu = issue_op_of(t, "v_perm_b32"), pk = issue_op_of(t, "v_pk_mul_f32"), ds = issue_op_of(t, "ds_read_b64");
  CHECK(pk.kind == IssueKind::PkF32);
  CHECK(issue_op_of(t, "v_exp_f32").slots == 4);
  CHECK(issue_op_of(t, "s_nop", 3).slots == 4);
  CHECK(issue_op_of(t, "s_waitcnt").kind == IssueKind::Free);
  CHECK_THROWS_WITH(issue_op_of(t, "v_mfma_f32_16x16x128_f8f6f4"), Catch::Contains("not in the target description"));

  SECTION("three VALU fill a 4-pass MFMA's shadow; the next MFMA waits for the pipe") {
    IssueTimeline tl;
    CHECK(tl.issue(mfma) == 0);
    CHECK(tl.issue(valu) == 1);  // 1 + 8 / 16
    CHECK(tl.issue(valu) == 2);
    CHECK(tl.issue(valu) == 3);
    CHECK(tl.issue(mfma) == 4);
    CHECK(tl.issue(mfma) == 8);  // back to back: one per 4 slots
    CHECK(tl.now() == 9);
    CHECK(tl.pipe_free() == 12);
  }
  SECTION("packed f32 waits passes + 2; LDS is not held") {
    IssueTimeline tl;
    tl.issue(mfma);
    CHECK(tl.issue(ds) == 1);
    CHECK(tl.issue(pk) == 6);
    CHECK(tl.issue(valu) == 7);
  }
  SECTION("a 32-byte A source (16x16x128 f8f6f4, 8 passes) holds VALU until slot 3 and packed f32 until 11") {
    const Target& t950 = target(Arch::gfx950);
    IssueOp big = issue_op_of(t950, "v_mfma_f32_16x16x128_f8f6f4");
    CHECK(big.a_bytes == 32);
    IssueTimeline tl;
    tl.issue(big);
    CHECK(tl.earliest(valu) == 3);
    CHECK(tl.earliest(pk) == 11);  // 8 + 2 + 1 (XDL2x)
    CHECK(tl.earliest(ds) == 1);
  }
}

TEST_CASE("scheduler: independent VALU moves into the shadow of an MFMA chain") {
  Program p = make(Arch::gfx942);
  Builder b(p);
  const VReg acc(0, 4), a0(4, 2), b0(6, 2), w(16, 8), x(24, 8);
  int id = 0;
  for (int k = 0; k < 4; ++k) {
    b.v_mfma_f32_16x16x16_bf16(acc, a0, b0, k == 0 ? AccSrc::zero() : AccSrc(acc));
    tag(p, id++);
  }
  for (int k = 0; k < 8; ++k) {
    b.v_add_u32(w[k], x[k], x[(k + 1) % 8]);  // independent of the chain
    tag(p, id++);
  }
  ScheduleStats st = schedule_regions(p);
  CHECK(st.regions == 1);
  CHECK(st.moved > 0);
  CHECK(st.slots_after < st.slots_before);
  // Program order: 4 MFMAs (13 slots to the last issue, pipe busy to 16) then 8 VALU: 21 slots.
  CHECK(st.slots_before == 21);
  CHECK(st.slots_after == 16);  // the chain's pipe time; every VALU hides behind it
  // Every MFMA but the first is preceded by VALU.
  for (size_t i = 1; i < p.insts.size(); ++i)
    if (p.insts[i].cls() == OpClass::Mfma && p.insts[i].comment != "0") CHECK(p.insts[i - 1].is_valu());
}

TEST_CASE("scheduler: random programs keep every dependence, their instructions, and region ends") {
  std::mt19937 rng(20261129);
  for (int trial = 0; trial < 200; ++trial) {
    Program p = make(trial % 2 ? Arch::gfx950 : Arch::gfx942);
    Builder b(p);
    int id = 0;
    std::vector<int> barrier_pos;
    auto v = [&](int n = 1) { return VReg(uint16_t(8 + rng() % 12), uint16_t(n)); };
    const int n = 20 + int(rng() % 40);
    for (int k = 0; k < n; ++k) {
      switch (rng() % 12) {
        case 9: b.buffer_load_dword(v(), v(), SReg(12, 4), Imm(0), 4 * (rng() % 4)); break;
        case 10: b.buffer_store_dword(v(), v(), SReg(12, 4), Imm(0), 4 * (rng() % 4)); break;
        case 11: b.s_load_dword(SReg(uint16_t(4 + rng() % 4), 1), SReg(16, 2), 4 * (rng() % 4)); break;
        case 0: b.v_mfma_f32_16x16x16_bf16(VReg(uint16_t(rng() % 2 * 4), 4), v(2), v(2), AccSrc(VReg(uint16_t(rng() % 2 * 4), 4))); break;
        case 1: b.v_add_u32(v(), v(), v()); break;
        case 2: b.v_exp_f32(v(), v()); break;
        case 3: b.ds_read_b32(v(), v(), 4 * (rng() % 4)); break;
        case 4: b.ds_write_b32(v(), v(), 4 * (rng() % 4)); break;
        case 5: b.s_add_u32(SReg(uint16_t(4 + rng() % 4), 1), SReg(uint16_t(4 + rng() % 4), 1), Imm(1)); break;
        case 6: b.s_cselect_b32(SReg(uint16_t(4 + rng() % 4), 1), SReg(uint16_t(4 + rng() % 4), 1), Imm(3)); break;
        case 7: b.v_mov_b32(v(), SReg(uint16_t(4 + rng() % 4), 1)); break;
        case 8:
          b.s_barrier();
          barrier_pos.push_back(int(p.insts.size()) - 1);
          break;
      }
      tag(p, id++);
    }
    const Program before = p;
    schedule_regions(p);
    REQUIRE(p.insts.size() == before.insts.size());
    std::map<std::string, int> pos;
    for (size_t i = 0; i < p.insts.size(); ++i) pos[p.insts[i].comment] = int(i);
    REQUIRE(pos.size() == before.insts.size());
    for (int bp : barrier_pos) CHECK(p.insts[bp].comment == before.insts[bp].comment);  // region ends stay
    for (size_t i = 0; i < before.insts.size(); ++i)
      for (size_t j = i + 1; j < before.insts.size(); ++j) {
        const Inst &a = before.insts[i], &c = before.insts[j];
        if (dependent(a, c)) {
          INFO("trial " << trial << ": " << format_inst(before, a) << " must stay before " << format_inst(before, c));
          CHECK(pos[a.comment] < pos[c.comment]);
        }
        if (a.cls() == OpClass::Barrier || c.cls() == OpClass::Barrier) CHECK(pos[a.comment] < pos[c.comment]);
      }
  }
}
