// MLA decode end to end through the emulator, against the fp64 reference.
#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>

#include "mla_harness.h"

using namespace mla;

namespace {

rt::ProblemParams params(rt::Target t, rt::DType q, rt::DType kv, int heads, int qs, int page, std::vector<int> lens,
                         uint64_t seed) {
  rt::ProblemParams p;
  p.target = t;
  p.q_dtype = q;
  p.kv_dtype = kv;
  p.heads = heads;
  p.qseqlen = qs;
  p.page_size = page;
  p.kv_lens = std::move(lens);
  p.seed = seed;
  p.extra_pages = 3;
  return p;
}

// fp8 accuracy as aiter's tests accept it, tightened to what aiter's own kernel achieves.
void check(const test::E2E& e) {
  INFO(e.cmp.summary());
  CHECK(e.cmp.clean());
  CHECK(e.cmp.d < 2e-3);
  CHECK(e.cmp.max_abs_err <= 0.05 * e.cmp.max_abs_ref);
}

}  // namespace

TEST_CASE("mla e2e: fp8/fp8 16 heads, one short request, gfx942") {
  auto e = test::run_e2e(params(rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 1, 1, {40}, 1));
  check(e);
}

TEST_CASE("mla e2e: probe", "[.probe]") {
  struct C { rt::Target t; rt::DType q, kv; int h, qs, pg; std::vector<int> lens; bool lse; double cap; };
  std::vector<C> cases = {
      {rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 1, 1, {40}, false, 0},
      {rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 128, {1000, 17}, true, 0},
      {rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1, 16, {129, 2}, false, 0},
      {rt::Target::gfx942, rt::DType::bf16, rt::DType::bf16, 16, 2, 64, {300}, true, 0},
      {rt::Target::gfx950, rt::DType::bf16, rt::DType::bf16, 8, 4, 1, {130, 4}, false, 0},
      {rt::Target::gfx950, rt::DType::bf16, rt::DType::fp8, 32, 3, 256, {4099}, false, 30.0},
  };
  int n = 0;
  for (auto& c : cases) {
    auto p = params(c.t, c.q, c.kv, c.h, c.qs, c.pg, c.lens, 7 + n++);
    p.return_lse = c.lse;
    p.logit_cap = c.cap;
    auto t0 = std::chrono::steady_clock::now();
    auto e = test::run_e2e(p);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << rt::shape_of(e.problem).describe() << " lens=" << c.lens[0] << ": " << e.cmp.summary() << " units="
              << e.result.plan.units.size() << " reduces=" << e.result.plan.reduces.size() << " wave_insts="
              << e.result.decode.total.wave_insts << " " << sec << " s\n";
  }
}
