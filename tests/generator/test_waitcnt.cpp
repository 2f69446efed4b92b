// waitcnt insertion: the weakest s_waitcnt that makes each use safe, straight-line and
// across loop back edges, with SMEM returning out of order.
#include <catch2/catch.hpp>

#include "asm/printer.h"
#include "passes/waitcnt.h"
#include "program/builder.h"

using namespace mla::gen;

namespace {

struct Fixture {
  Program p;
  Builder b;
  explicit Fixture(Arch a = Arch::gfx942) : p(make(a)), b(p) {}
  static Program make(Arch a) {
    Program p;
    p.name = "t";
    p.target = &target(a);
    return p;
  }
  // The printed program after the pass, one instruction per line, labels dropped.
  std::vector<std::string> run() {
    insert_waitcnts(p);
    std::vector<std::string> lines;
    for (const auto& i : p.insts)
      if (i.cls() != OpClass::Label) lines.push_back(format_inst(p, i));
    return lines;
  }
};

// The line before the first line that starts with `inst`.
std::string before(const std::vector<std::string>& lines, const std::string& inst, int nth = 0) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(inst, 0) == 0 && nth-- == 0) return i ? lines[i - 1] : "";
  FAIL("no line starts with " << inst);
  return {};
}

int count_waits(const std::vector<std::string>& lines) {
  return int(std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("s_waitcnt", 0) == 0; }));
}

}  // namespace

TEST_CASE("waitcnt: a scalar load result is waited for with lgkmcnt(0) before its use") {
  Fixture f;
  SReg s = f.b.regs().sgpr(2, "x");
  VReg v = f.b.regs().vgpr(1, "y");
  f.b.s_load_dwordx2(s, f.b.kernarg_ptr(), 0);
  f.b.v_mov_b32(v, s[0]);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_mov_b32") == "s_waitcnt lgkmcnt(0)");
  CHECK(count_waits(lines) == 1);
}

TEST_CASE("waitcnt: in-order vector loads get the weakest vmcnt") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c"), d = ra.vgpr(1, "d");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.buffer_load_dword(c, addr, rsrc, Imm(0), 4);
  f.b.buffer_load_dword(d, addr, rsrc, Imm(0), 8);
  f.b.v_mov_b32(addr, a);  // two younger loads may still be in flight
  f.b.v_add_u32(addr, addr, c);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_mov_b32") == "s_waitcnt vmcnt(2)");
  CHECK(before(lines, "v_add_u32") == "s_waitcnt vmcnt(1)");
  CHECK(count_waits(lines) == 2);  // d is never read: no wait for it
}

TEST_CASE("waitcnt: SMEM returns out of order, so any SMEM result needs lgkmcnt(0)") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg x = ra.sgpr(2, "x"), y = ra.sgpr(2, "y"), z = ra.sgpr(1, "z");
  f.b.s_load_dwordx2(x, f.b.kernarg_ptr(), 0);
  f.b.s_load_dwordx2(y, f.b.kernarg_ptr(), 8);
  f.b.s_mov_b32(z, x[0]);  // the older load: a count of 1 would not be enough
  f.b.s_endpgm();
  CHECK(before(f.run(), "s_mov_b32") == "s_waitcnt lgkmcnt(0)");
}

TEST_CASE("waitcnt: an SMEM pending behind LDS reads makes their wait lgkmcnt(0) (out-of-order returns)") {
  Fixture f;
  auto& ra = f.b.regs();
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c"), d = ra.vgpr(1, "d");
  SReg s = ra.sgpr(2, "s");
  f.b.ds_read_b32(a, addr);
  f.b.ds_read_b32(c, addr, 4);
  f.b.s_load_dwordx2(s, f.b.kernarg_ptr(), 0);
  f.b.v_mov_b32(d, a);  // the SMEM may return before a: only lgkmcnt(0) proves a landed
  f.b.v_mov_b32(d, c);  // ... and c with it: no second wait
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_mov_b32", 0) == "s_waitcnt lgkmcnt(0)");
  CHECK(before(lines, "v_mov_b32", 1) == "v_mov_b32 v4, v2");
  CHECK(count_waits(lines) == 1);
}

TEST_CASE("waitcnt: LDS reads return in order, so without SMEM pending the weakest lgkmcnt holds") {
  Fixture f;
  auto& ra = f.b.regs();
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c"), d = ra.vgpr(1, "d");
  f.b.ds_read_b32(a, addr);
  f.b.ds_read_b32(c, addr, 4);
  f.b.v_mov_b32(d, a);  // c (an LDS op) stays behind a
  f.b.v_mov_b32(d, c);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_mov_b32", 0) == "s_waitcnt lgkmcnt(1)");
  CHECK(before(lines, "v_mov_b32", 1) == "s_waitcnt lgkmcnt(0)");
}

TEST_CASE("waitcnt: overwriting a register with a load in flight waits for the load (WAW)") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.v_mov_b32(a, Imm(1));
  f.b.s_endpgm();
  CHECK(before(f.run(), "v_mov_b32") == "s_waitcnt vmcnt(0)");
}

TEST_CASE("waitcnt: stores count on vmcnt, so they widen the distance of older loads") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.buffer_store_dword(c, addr, rsrc, Imm(0), 64);
  f.b.v_mov_b32(c, a);
  f.b.s_endpgm();
  CHECK(before(f.run(), "v_mov_b32") == "s_waitcnt vmcnt(1)");
}

TEST_CASE("waitcnt: a load issued at the end of a loop is waited for at the top via the back edge") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc"), n = ra.sgpr(1, "n");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c"), acc = ra.vgpr(1, "acc");
  f.b.v_mov_b32(a, Imm(0));
  f.b.v_mov_b32(acc, Imm(0));
  f.b.s_mov_b32(n, Imm(4));
  Label loop = f.b.new_label("loop");
  f.b.bind(loop);
  f.b.v_add_u32(acc, acc, a);                        // reads a from the previous iteration
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));      // a: one younger load follows
  f.b.buffer_load_dword(c, addr, rsrc, Imm(0), 4);   // c is never read
  f.b.s_sub_u32(n, n, Imm(1));
  f.b.s_cmp_lg_u32(n, Imm(0));
  f.b.s_cbranch_scc1(loop);
  f.b.s_endpgm();
  auto lines = f.run();
  // Entry: a is ready (v_mov). Back edge: a is one load older than c -> vmcnt(1).
  CHECK(before(lines, "v_add_u32") == "s_waitcnt vmcnt(1)");
  CHECK(count_waits(lines) == 1);
}

TEST_CASE("waitcnt: a loop-carried load joined with a pending preheader load takes the stronger wait") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc"), n = ra.sgpr(1, "n");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c"), acc = ra.vgpr(1, "acc");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));  // entry: a is the youngest load (distance 0)
  f.b.s_mov_b32(n, Imm(4));
  Label loop = f.b.new_label("loop");
  f.b.bind(loop);
  f.b.v_add_u32(acc, acc, a);
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.buffer_load_dword(c, addr, rsrc, Imm(0), 4);
  f.b.s_sub_u32(n, n, Imm(1));
  f.b.s_cmp_lg_u32(n, Imm(0));
  f.b.s_cbranch_scc1(loop);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_add_u32") == "s_waitcnt vmcnt(0)");
}

TEST_CASE("waitcnt: s_barrier waits for this wave's LDS writes and LDS DMA") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a");
  f.b.ds_write_b32(addr, a);
  f.b.s_barrier();
  f.b.buffer_load_dword_lds(addr, rsrc, Imm(0));
  f.b.s_barrier();
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "s_barrier", 0) == "s_waitcnt lgkmcnt(0)");
  CHECK(before(lines, "s_barrier", 1) == "s_waitcnt vmcnt(0)");
}

TEST_CASE("waitcnt: s_barrier waits for this wave's outstanding LDS reads, not for older ones") {
  Fixture f;
  auto& ra = f.b.regs();
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(2, "a"), c = ra.vgpr(1, "c");
  f.b.ds_read_b64(a, addr);
  f.b.ds_read_b32(c, addr, 8);
  f.b.v_add_u32(c, c, c);  // needs the second (younger) read: lgkmcnt(0)
  f.b.ds_read_b64(a, addr, 16);
  f.b.s_barrier();         // another wave may now overwrite bytes 16..23
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_add_u32") == "s_waitcnt lgkmcnt(0)");
  CHECK(before(lines, "s_barrier") == "s_waitcnt lgkmcnt(0)");
}

// A ring producer: DMA into slot 0 then slot 1; the barrier that hands over slot 0 leaves slot 1's
// two loads in flight, an unannotated barrier waits for all, and a wave ends with none in flight.
TEST_CASE("waitcnt: a barrier waits only for the LDS-DMA regions it publishes") {
  Fixture f(Arch::gfx950);
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr");
  for (uint8_t region : {uint8_t(1), uint8_t(2)})
    for (int k = 0; k < 2; ++k) f.b.buffer_load_dwordx4_lds(addr, rsrc, Imm(0), 0, region);
  f.b.s_barrier_publishing(1);
  f.b.s_barrier_publishing(1);  // already waited for: no second wait
  f.b.buffer_load_dwordx4_lds(addr, rsrc, Imm(0), 0, 1);
  f.b.s_barrier_publishing(2);  // slot 1's loads are older than the new slot-0 load
  f.b.buffer_load_dwordx4_lds(addr, rsrc, Imm(0), 0, 4);
  f.b.s_barrier();
  f.b.buffer_load_dwordx4_lds(addr, rsrc, Imm(0), 0, 8);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "s_barrier", 0) == "s_waitcnt vmcnt(2)");
  CHECK(before(lines, "s_barrier", 1) == "s_barrier");
  CHECK(before(lines, "s_barrier", 2) == "s_waitcnt vmcnt(1)");
  CHECK(before(lines, "s_barrier", 3) == "s_waitcnt vmcnt(0)");
  CHECK(before(lines, "s_endpgm") == "s_waitcnt vmcnt(0)");
  CHECK(count_waits(lines) == 4);
}

// ds_bpermute reads no LDS memory: it does not wait for LDS DMA (a ds_read does), only for the
// vector load that wrote its source.
TEST_CASE("waitcnt: ds_bpermute waits for its source, not for LDS DMA") {
  Fixture f(Arch::gfx950);
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), src = ra.vgpr(1, "src"), d = ra.vgpr(1, "d"), pair = ra.vgpr(2, "pair", 2);
  f.b.global_load_dword(src, addr, f.b.kernarg_ptr());
  f.b.buffer_load_dwordx4_idxen_lds(pair, rsrc, Imm(0), 1);
  f.b.buffer_load_dwordx4_lds(addr, rsrc, Imm(0), 0, 2);
  f.b.ds_bpermute_b32(d, addr, src);
  f.b.ds_read_b32(d, addr);
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "ds_bpermute_b32") == "s_waitcnt vmcnt(2)");
  CHECK(before(lines, "ds_read_b32") == "s_waitcnt vmcnt(0)");  // the DMA; the bpermute's d lands in order
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
          return l.find(" idxen offen lds") != std::string::npos && l.rfind("buffer_load_dwordx4 v[", 0) == 0;
        }) == 1);
}

TEST_CASE("builder: 16-byte LDS DMA exists only where the target has it") {
  Fixture f(Arch::gfx942);
  auto& ra = f.b.regs();
  CHECK_THROWS_WITH(f.b.buffer_load_dwordx4_lds(ra.vgpr(1, "a"), ra.sgpr(4, "r"), Imm(0)),
                    Catch::Contains("gfx942 has no 16-byte LDS DMA"));
}

TEST_CASE("waitcnt: an LDS read after LDS DMA waits for the DMA") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a");
  f.b.buffer_load_dword_lds(addr, rsrc, Imm(0));
  f.b.ds_read_b32(a, addr);
  f.b.s_endpgm();
  CHECK(before(f.run(), "ds_read_b32") == "s_waitcnt vmcnt(0)");
}

TEST_CASE("waitcnt: independent instructions get no wait") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a"), c = ra.vgpr(1, "c");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.v_mov_b32(c, addr);
  f.b.s_endpgm();
  CHECK(count_waits(f.run()) == 0);
}

TEST_CASE("waitcnt: a load overwriting a register with an older load of the same queue in flight needs no wait") {
  Fixture f;
  auto& ra = f.b.regs();
  SReg rsrc = ra.sgpr(4, "rsrc"), s = ra.sgpr(1, "s");
  VReg addr = ra.vgpr(1, "addr"), a = ra.vgpr(1, "a");
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0));
  f.b.buffer_load_dword(a, addr, rsrc, Imm(0), 4);  // in order: lands after the first
  f.b.s_load_dword(s, f.b.kernarg_ptr(), 0);
  f.b.ds_read_b32(a, addr);  // a different queue: must wait for both loads
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "buffer_load_dword", 1).rfind("buffer_load_dword", 0) == 0);
  CHECK(before(lines, "ds_read_b32") == "s_waitcnt vmcnt(0)");
}

TEST_CASE("waitcnt: more LDS reads in flight than lgkmcnt can count are waited for with lgkmcnt(14)") {
  Fixture f;
  auto& ra = f.b.regs();
  VReg addr = ra.vgpr(1, "addr"), d = ra.vgpr(40, "d"), x = ra.vgpr(1, "x");
  for (int i = 0; i < 20; ++i) f.b.ds_read_b64(d.sub(2 * i, 2), addr, uint32_t(8 * i));
  f.b.v_mov_b32(x, d[0]);   // 19 younger reads: the counter cannot express it; 14 is enough
  f.b.v_mov_b32(x, d[12]);  // 13 younger reads
  f.b.s_endpgm();
  auto lines = f.run();
  CHECK(before(lines, "v_mov_b32", 0) == "s_waitcnt lgkmcnt(14)");
  CHECK(before(lines, "v_mov_b32", 1) == "s_waitcnt lgkmcnt(13)");
}
