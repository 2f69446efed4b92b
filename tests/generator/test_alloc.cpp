// The tagged register allocator and the typed builder.
#include <catch2/catch.hpp>

#include <type_traits>

#include "program/builder.h"

using namespace mla::gen;

// A wrong register class does not compile: these are the builder's parameter types.
static_assert(!std::is_constructible_v<SSrc, VReg>, "a VGPR must not be a scalar source");
static_assert(!std::is_constructible_v<SSrc, AReg>, "an AGPR must not be a scalar source");
static_assert(!std::is_constructible_v<VSrc, AReg>, "an AGPR is not a VALU source");
static_assert(!std::is_constructible_v<AccReg, SReg>, "an MFMA accumulator is a VGPR or AGPR");
static_assert(std::is_constructible_v<VSrc, SReg> && std::is_constructible_v<VSrc, VReg>);
static_assert(!std::is_invocable_v<decltype(&Builder::s_mov_b32), Builder&, VReg, SSrc>,
              "s_mov_b32 must not take a VGPR destination");

TEST_CASE("allocator: SGPR limit names the tag and what holds the registers") {
  for (Arch a : {Arch::gfx942, Arch::gfx950}) {
    RegAllocator ra(target(a));
    ra.sgpr(96, "big_table");
    try {
      ra.sgpr(8, "page_indices");
      FAIL("expected RegAllocError");
    } catch (const RegAllocError& e) {
      std::string m = e.what();
      CHECK_THAT(m, Catch::Contains("page_indices"));
      CHECK_THAT(m, Catch::Contains("big_table[0:95]"));
      CHECK_THAT(m, Catch::Contains("of 102"));
    }
    CHECK(ra.sgpr(6, "fits").first == 96);
  }
}

TEST_CASE("allocator: VGPR and AGPR limits are the target's 256 each") {
  RegAllocator ra(target(Arch::gfx950));
  VReg v = ra.vgpr(256, "all_vgprs");
  CHECK(v.count == 256);
  CHECK_THROWS_AS(ra.vgpr(1, "one_more"), RegAllocError);
  AReg a = ra.agpr(256, "all_agprs");
  CHECK(a.count == 256);
  CHECK_THROWS_AS(ra.agpr(1, "one_more"), RegAllocError);
}

TEST_CASE("allocator: VGPR exhaustion names the tag") {
  RegAllocator ra(target(Arch::gfx942));
  for (int i = 0; i < 4; ++i) ra.vgpr(64, "tile" + std::to_string(i));
  CHECK_THROWS_WITH(ra.vgpr(1, "softmax_max"), Catch::Contains("softmax_max") && Catch::Contains("VGPR"));
  AReg acc = ra.agpr(128, "acc_lo");
  CHECK(acc.first == 0);
  ra.agpr(128, "acc_hi");
  CHECK_THROWS_WITH(ra.agpr(4, "acc_extra"), Catch::Contains("acc_extra") && Catch::Contains("AGPR"));
}

TEST_CASE("allocator: tuples are aligned and released registers are reused") {
  RegAllocator ra(target(Arch::gfx942));
  SReg one = ra.sgpr(1, "one");
  SReg quad = ra.sgpr(4, "rsrc");
  CHECK(one.first == 0);
  CHECK(quad.first % 4 == 0);
  VReg v1 = ra.vgpr(1, "v1");
  VReg pair = ra.vgpr(2, "pair");
  CHECK(pair.first % 2 == 0);
  ra.release(v1);
  CHECK(ra.vgpr(1, "again").first == v1.first);
}

TEST_CASE("builder: wrong operand widths are errors naming the instruction") {
  Program p;
  p.name = "t";
  p.target = &target(Arch::gfx950);
  Builder b(p);
  auto& ra = b.regs();
  VReg v1 = ra.vgpr(1, "v1");
  SReg s2 = ra.sgpr(2, "s2");
  CHECK_THROWS_WITH(b.buffer_load_dwordx4(v1, v1, s2, Imm(0)), Catch::Contains("buffer_load_dwordx4"));
  CHECK_THROWS_WITH(b.s_load_dwordx2(ra.sgpr(1, "x"), b.kernarg_ptr(), 0), Catch::Contains("s_load_dwordx2"));
  AReg acc = ra.agpr(4, "acc");
  CHECK_THROWS_WITH(b.mfma("v_mfma_f32_16x16x32_fp8_fp8", acc, v1, v1, acc), Catch::Contains("src0"));
  Program q;
  q.name = "u";
  q.target = &target(Arch::gfx942);
  Builder b942(q);
  VReg a8 = b942.regs().vgpr(8, "a");
  CHECK_THROWS_WITH(b942.v_mfma_f32_16x16x128_f8f6f4(acc, a8, a8, acc), Catch::Contains("not available on gfx942"));
}
