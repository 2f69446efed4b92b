// The fp64 reference against hand computations: tiny problems, the causal rule, the soft cap,
// scales, page indirection, decoders and the comparison metric.
#include <catch2/catch.hpp>

#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

#include <cmath>

using namespace mla;

namespace {

// A bf16/bf16 problem with `heads` heads, qseqlen `qs` and one request of `len` tokens,
// page size 1, pages in reverse order; all values zero until set.
rt::Problem blank(int heads, int qs, int len) {
  rt::Problem p;
  p.target = rt::Target::gfx942;
  p.q_dtype = p.kv_dtype = rt::DType::bf16;
  p.heads = heads;
  p.qseqlen = qs;
  p.page_size = 1;
  p.sm_scale = 1.0;
  p.q.shape = {size_t(qs), size_t(heads), 576};
  p.q.elem_bytes = 2;
  p.q.bytes.assign(p.q.count() * 2, 0);
  p.kv.shape = {size_t(len), 1, 576};
  p.kv.elem_bytes = 2;
  p.kv.bytes.assign(p.kv.count() * 2, 0);
  p.qo_indptr = {0, qs};
  p.kv_indptr = {0, len};
  for (int t = 0; t < len; ++t) p.kv_indices.push_back(len - 1 - t);
  p.kv_last_page_lens = {1};
  return p;
}

void set_q(rt::Problem& p, int row, int head, int d, double v) { p.q.set_bits(p.q_elem(row, head, d), rt::encode_bf16(v)); }
void set_kv(rt::Problem& p, int t, int d, double v) { p.kv.set_bits(p.kv_elem(0, t, d), rt::encode_bf16(v)); }

}  // namespace

TEST_CASE("reference: 2 tokens, 1 head, by hand", "[reference]") {
  rt::Problem p = blank(1, 1, 2);
  // q = (1, 0.5, 0...), k0 = (1, 2, ...), k1 = (0.5, -1, ...) plus a rope dim.
  set_q(p, 0, 0, 0, 1.0);
  set_q(p, 0, 0, 1, 0.5);
  set_q(p, 0, 0, 570, 2.0);
  set_kv(p, 0, 0, 1.0);
  set_kv(p, 0, 1, 2.0);
  set_kv(p, 0, 570, 0.25);  // rope part counts in the score, not in o
  set_kv(p, 1, 0, 0.5);
  set_kv(p, 1, 1, -1.0);
  set_kv(p, 1, 7, 3.0);
  p.sm_scale = 0.5;
  p.q_scale = 2.0;
  p.kv_scale = 0.75;
  rt::validate_problem(p);
  ref::Reference r = ref::run_reference(p);
  const double scale = 0.5 * 2.0 * 0.75;
  double s0 = scale * (1.0 * 1.0 + 0.5 * 2.0 + 2.0 * 0.25);  // 0.75 * 2.5
  double s1 = scale * (1.0 * 0.5 + 0.5 * -1.0);             // 0
  double p0 = std::exp(s0) / (std::exp(s0) + std::exp(s1)), p1 = 1.0 - p0;
  CHECK(r.lse_at(0, 0) == Approx(std::log(std::exp(s0) + std::exp(s1))).epsilon(1e-14));
  CHECK(r.o_at(0, 0, 0) == Approx(0.75 * (p0 * 1.0 + p1 * 0.5)).epsilon(1e-14));
  CHECK(r.o_at(0, 0, 1) == Approx(0.75 * (p0 * 2.0 + p1 * -1.0)).epsilon(1e-14));
  CHECK(r.o_at(0, 0, 7) == Approx(0.75 * p1 * 3.0).epsilon(1e-14));
  CHECK(r.o_at(0, 0, 2) == 0.0);
  CHECK(r.o.size() == 512);
}

TEST_CASE("reference: causal rule within the step", "[reference]") {
  // qseqlen 2, kv_len 3: row 0 sees tokens 0..1, row 1 sees 0..2.
  rt::Problem p = blank(1, 2, 3);
  for (int r = 0; r < 2; ++r) set_q(p, r, 0, 0, 1.0);
  double k[3] = {1.0, 2.0, 3.0}, v[3] = {10.0, 20.0, 40.0};
  for (int t = 0; t < 3; ++t) {
    set_kv(p, t, 0, k[t]);
    set_kv(p, t, 5, v[t]);
  }
  rt::validate_problem(p);
  ref::Reference r = ref::run_reference(p);
  double e0 = std::exp(1.0), e1 = std::exp(2.0), e2 = std::exp(3.0);
  // Row 0: tokens 0, 1. dim 0 holds k (it is also part of V), dim 5 holds v.
  CHECK(r.o_at(0, 0, 5) == Approx((e0 * 10 + e1 * 20) / (e0 + e1)).epsilon(1e-14));
  CHECK(r.o_at(0, 0, 0) == Approx((e0 * 1 + e1 * 2) / (e0 + e1)).epsilon(1e-14));
  CHECK(r.lse_at(0, 0) == Approx(std::log(e0 + e1)).epsilon(1e-14));
  // Row 1: tokens 0, 1, 2.
  CHECK(r.o_at(1, 0, 5) == Approx((e0 * 10 + e1 * 20 + e2 * 40) / (e0 + e1 + e2)).epsilon(1e-14));
  CHECK(r.lse_at(1, 0) == Approx(std::log(e0 + e1 + e2)).epsilon(1e-14));
}

TEST_CASE("reference: soft cap s = cap * tanh(s / cap)", "[reference]") {
  rt::Problem p = blank(2, 1, 2);
  set_q(p, 0, 0, 0, 4.0);
  set_q(p, 0, 1, 0, -1.0);
  set_kv(p, 0, 0, 1.0);
  set_kv(p, 1, 0, 2.0);
  set_kv(p, 1, 3, 1.0);
  p.logit_cap = 5.0;
  ref::Reference r = ref::run_reference(p);
  for (int h = 0; h < 2; ++h) {
    double qv = h == 0 ? 4.0 : -1.0;
    double s0 = 5.0 * std::tanh(qv * 1.0 / 5.0), s1 = 5.0 * std::tanh(qv * 2.0 / 5.0);
    double p1 = std::exp(s1) / (std::exp(s0) + std::exp(s1));
    CHECK(r.o_at(0, h, 3) == Approx(p1).epsilon(1e-14));
    CHECK(r.o_at(0, h, 0) == Approx((1 - p1) * 1.0 + p1 * 2.0).epsilon(1e-14));
    CHECK(r.lse_at(0, h) == Approx(std::log(std::exp(s0) + std::exp(s1))).epsilon(1e-14));
  }
  // Without the cap the first head's weights differ visibly.
  p.logit_cap = 0.0;
  ref::Reference u = ref::run_reference(p);
  CHECK(u.o_at(0, 0, 3) == Approx(std::exp(8.0) / (std::exp(4.0) + std::exp(8.0))).epsilon(1e-14));
  CHECK(std::fabs(u.o_at(0, 0, 3) - r.o_at(0, 0, 3)) > 1e-3);
}

TEST_CASE("reference: page indirection, page sizes and batch rows", "[reference]") {
  // The same tokens laid out with page size 1 and page size 16 give the same result.
  rt::ProblemParams prm;
  prm.target = rt::Target::gfx950;
  prm.heads = 3;
  prm.qseqlen = 2;
  prm.page_size = 16;
  prm.kv_lens = {37, 2};
  prm.extra_pages = 4;
  rt::Problem a = rt::make_random_problem(prm);
  rt::Problem b = a;
  b.page_size = 1;
  b.kv.shape = {0, 1, 576};
  b.kv.bytes.clear();
  b.kv_indices.clear();
  b.kv_indptr = {0};
  for (int r = 0; r < a.batch(); ++r) {
    for (int t = 0; t < a.kv_len(r); ++t) {
      b.kv_indices.push_back(int(b.kv.shape[0]));
      b.kv.shape[0]++;
      for (int d = 0; d < 576; ++d) {
        uint16_t bits = a.kv.bits(a.kv_elem(r, t, d));
        b.kv.bytes.push_back(uint8_t(bits));
      }
    }
    b.kv_indptr.push_back(int(b.kv_indices.size()));
    b.kv_last_page_lens[r] = 1;
  }
  rt::validate_problem(b);
  ref::Reference ra = ref::run_reference(a), rb = ref::run_reference(b);
  CHECK(ra.o == rb.o);
  CHECK(ra.lse == rb.lse);
  CHECK(ra.rows == 4);
}

TEST_CASE("reference: decoders from the format definitions", "[reference][numerics]") {
  // FNUZ e4m3 (gfx942): bias 8.
  CHECK(ref::decode_fp8_fnuz(0x7f) == 240.0);
  CHECK(ref::decode_fp8_fnuz(0xff) == -240.0);
  CHECK(ref::decode_fp8_fnuz(0x40) == 1.0);
  CHECK(ref::decode_fp8_fnuz(0x08) == std::ldexp(1.0, -7));
  CHECK(ref::decode_fp8_fnuz(0x01) == std::ldexp(1.0, -10));
  CHECK(std::isnan(ref::decode_fp8_fnuz(0x80)));
  CHECK(ref::decode_fp8_fnuz(0x00) == 0.0);
  // OCP e4m3fn (gfx950): bias 7.
  CHECK(ref::decode_fp8_ocp(0x7e) == 448.0);
  CHECK(std::isnan(ref::decode_fp8_ocp(0x7f)));
  CHECK(std::isnan(ref::decode_fp8_ocp(0xff)));
  CHECK(ref::decode_fp8_ocp(0x38) == 1.0);
  CHECK(ref::decode_fp8_ocp(0x01) == std::ldexp(1.0, -9));
  CHECK(ref::decode_fp8_ocp(0x80) == 0.0);
  CHECK(std::signbit(ref::decode_fp8_ocp(0x80)));
  CHECK(ref::decode_fp8_ocp(0xb8) == -1.0);
  // bf16
  CHECK(ref::decode_bf16(0x3f80) == 1.0);
  CHECK(ref::decode_bf16(0xc040) == -3.0);
}

TEST_CASE("reference: bf16_round ties to even", "[reference][numerics]") {
  CHECK(ref::bf16_round(1.0 + std::ldexp(1.0, -8)) == 1.0);
  CHECK(ref::bf16_round(1.0 + 3 * std::ldexp(1.0, -8)) == 1.0 + std::ldexp(1.0, -6));
  CHECK(ref::bf16_round(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)) == 1.0 + std::ldexp(1.0, -7));
  CHECK(ref::bf16_round(-2.5) == -2.5);
  CHECK(ref::bf16_bits(1.0) == 0x3f80);
  CHECK(std::isinf(ref::bf16_round(1e39)));
  // A double just above a tie must not be rounded twice (through float) to the even side.
  double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  CHECK(ref::bf16_round(x) == 1.0 + std::ldexp(1.0, -7));
}

TEST_CASE("reference: compare metric, unwritten and NaN detection", "[reference]") {
  rt::ProblemParams prm;
  prm.heads = 2;
  prm.kv_lens = {50};
  prm.return_lse = true;
  rt::Problem p = rt::make_random_problem(prm);
  ref::Reference r = ref::run_reference(p);
  std::vector<uint16_t> o(r.o.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = ref::bf16_bits(r.o[i]);
  std::vector<float> lse(r.lse.begin(), r.lse.end());
  ref::Compare c = ref::compare(r, o, &lse);
  CHECK(c.clean());
  CHECK(c.d < 1e-5);
  CHECK(c.d >= 0.0);
  CHECK(c.max_abs_err <= c.max_abs_ref * std::ldexp(1.0, -8));
  CHECK(c.lse_max_abs_err < 1e-6);
  CHECK(c.passes(3e-5, 0.01));

  // d by hand on a 2-element case: x = (1, 0), y = (0, 1) -> d = 1; x = y -> 0.
  ref::Reference tiny;
  tiny.rows = 1;
  tiny.heads = 1;
  tiny.o.assign(512, 0.0);
  tiny.o[1] = 1.0;
  tiny.lse = {0.0};
  std::vector<uint16_t> t(512, 0);
  t[0] = 0x3f80;
  CHECK(ref::compare(tiny, t, nullptr).d == Approx(1.0));
  t[0] = 0;
  t[1] = 0x4000;  // x = 2 y: d = 1 - 4/5
  CHECK(ref::compare(tiny, t, nullptr).d == Approx(0.2));

  o[5] = ref::kUnwrittenBf16;
  o[9] = 0x7fc0;
  lse[1] = std::nanf("");
  c = ref::compare(r, o, &lse);
  CHECK(c.unwritten == 1);
  CHECK(c.nonfinite == 1);
  CHECK(c.first_bad == 5);
  CHECK(c.lse_nonfinite == 1);
  CHECK_FALSE(c.clean());
  CHECK_FALSE(c.passes(1.0, 1.0));
  CHECK_THAT(c.summary(), Catch::Matchers::Contains("unwritten=1"));
}

TEST_CASE("reference: split partials merged by the reduce equal the direct result", "[reference][planner]") {
  struct Case {
    int heads, qs, page, T, rpg, cus;
    std::vector<int> lens;
    double cap;
  };
  for (const Case& c : {Case{4, 1, 16, 16, 16, 8, {200, 37, 5}, 0.0}, Case{3, 3, 1, 16, 4, 16, {95, 3, 64}, 0.0},
                        Case{2, 4, 64, 16, 16, 5, {300, 33}, 2.0}, Case{8, 2, 16, 32, 16, 40, {17 * 32 + 1, 100}, 0.0}}) {
    rt::ProblemParams prm;
    prm.heads = c.heads;
    prm.qseqlen = c.qs;
    prm.page_size = c.page;
    prm.kv_lens = c.lens;
    prm.logit_cap = c.cap;
    prm.target = rt::Target::gfx950;
    prm.q_dtype = rt::DType::bf16;
    rt::Problem p = rt::make_random_problem(prm);
    rt::PlanInputs in = rt::plan_inputs_of(p);
    in.tile_tokens = c.T;
    in.rows_per_group = c.rpg;
    in.num_cus = c.cus;
    rt::Plan plan = rt::plan_decode(in);
    INFO(plan.to_json().dump());
    REQUIRE(plan.num_partials > 0);
    ref::SplitReference sr = ref::run_split_reference(p, plan);
    ref::Reference direct = ref::run_reference(p);
    REQUIRE(sr.merged.o.size() == direct.o.size());
    double err = 0, lerr = 0;
    for (size_t i = 0; i < direct.o.size(); ++i) err = std::max(err, std::fabs(sr.merged.o[i] - direct.o[i]));
    for (size_t i = 0; i < direct.lse.size(); ++i) lerr = std::max(lerr, std::fabs(sr.merged.lse[i] - direct.lse[i]));
    CHECK(err < 1e-12);
    CHECK(lerr < 1e-12);
    for (double l : sr.partial_lse) CHECK(std::isfinite(l));
  }
}
