// The DSA indexer reference against hand computations, its cache layout byte by byte, the top-k
// reference and checker on crafted rows, and the random problem generator's promises.
#include <catch2/catch.hpp>

#include "runtime/problem.h"
#include "tests/reference/dsa_indexer_reference.h"
#include "tests/reference/mla_reference.h"

#include <cmath>
#include <cstring>
#include <set>

using namespace mla;

namespace {

// The fp8 codes of the values the hand case uses, from the format definitions (sign, 4 exponent
// bits, 3 mantissa bits): e4m3fnuz has bias 8, e4m3fn bias 7.
struct Codes {
  uint8_t one, two, four, half, minus_one;
};
Codes codes(rt::Target t) {
  return t == rt::Target::gfx942 ? Codes{0x40, 0x48, 0x50, 0x38, 0xC0} : Codes{0x38, 0x40, 0x48, 0x30, 0xB8};
}

double decode(uint8_t c, rt::Target t) {
  return t == rt::Target::gfx942 ? ref::decode_fp8_fnuz(c) : ref::decode_fp8_ocp(c);
}

// Byte offsets of token o of block blk, written from the header's layout (not the library's code).
size_t values_at(const ref::IndexerProblem& p, int64_t blk, int o) {
  return size_t(blk) * p.block_size * 132 + o * 128;
}
size_t scale_at(const ref::IndexerProblem& p, int64_t blk, int o) {
  return size_t(blk) * p.block_size * 132 + p.block_size * 128 + o * 4;
}
float read_scale(const ref::IndexerProblem& p, size_t at) {
  float s;
  std::memcpy(&s, &p.kv_cache[at], 4);
  return s;
}
void write_scale(ref::IndexerProblem& p, size_t at, float s) { std::memcpy(&p.kv_cache[at], &s, 4); }

// Token t of request b: (block, offset in block).
std::pair<int64_t, int> where(const ref::IndexerProblem& p, int b, int t) {
  return {p.block_table[size_t(b) * p.block_table_stride + t / p.block_size], t % p.block_size};
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST_CASE("dsa indexer reference: 2 heads, 2 tokens, by hand", "[dsa-indexer]") {
  const rt::Target target = GENERATE(rt::Target::gfx942, rt::Target::gfx950);
  const Codes c = codes(target);
  ref::IndexerProblem p;
  p.target = target;
  p.batch = p.next_n = 1, p.heads = 2, p.block_size = 1;
  p.max_context_len = 2, p.block_table_stride = 2, p.num_blocks = 2;
  p.context_lens = {2};
  p.block_table = {1, 0};  // token 0 in block 1, token 1 in block 0
  p.q.assign(2 * 128, 0x00);
  p.kv_cache.assign(2 * 132, 0x00);
  // q head 0 = (1, 2, 0, ...), head 1 = (-1, 0, 0.5, 0, ...); w = (0.25, -0.5).
  p.q[0] = c.one, p.q[1] = c.two;
  p.q[128 + 0] = c.minus_one, p.q[128 + 2] = c.half;
  p.weights = {0.25f, -0.5f};
  // k0 = (2, 0.5, 1, 0, ...) scale 0.5 at block 1; k1 = (1, -1, 4, 0, ...) scale 2 at block 0.
  p.kv_cache[132 + 0] = c.two, p.kv_cache[132 + 1] = c.half, p.kv_cache[132 + 2] = c.one;
  write_scale(p, 132 + 128, 0.5f);
  p.kv_cache[0] = c.one, p.kv_cache[1] = c.minus_one, p.kv_cache[2] = c.four;
  write_scale(p, 128, 2.0f);

  const std::vector<double> l = ref::indexer_logits_reference(p);
  REQUIRE(l.size() == 2);
  // Token 0: head 0 dot 1*2 + 2*0.5 = 3, head 1 dot -1*2 + 0.5*1 = -1.5 -> ReLU 0:
  // 0.5 * (3*0.25 + 0) = 0.375 (without the ReLU it would be 0.5 * (0.75 + 0.75) = 0.75).
  CHECK(l[0] == 0.375);
  // Token 1: head 0 dot 1*1 + 2*(-1) = -1 -> 0, head 1 dot -1*1 + 0.5*4 = 1, negative weight:
  // 2 * (0 + 1*(-0.5)) = -1.
  CHECK(l[1] == -1.0);
}

TEST_CASE("dsa indexer reference: rows and tokens sit at the documented offsets", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.target = GENERATE(rt::Target::gfx942, rt::Target::gfx950);
  prm.batch = 2, prm.next_n = 2, prm.heads = 8, prm.block_size = 16;
  prm.context_lens = {37, 50};
  prm.seed = 7;
  const ref::IndexerProblem base = ref::make_indexer_problem(prm);
  const std::vector<double> l0 = ref::indexer_logits_reference(base);
  const size_t width = size_t(base.max_context_len);
  REQUIRE(l0.size() == 4 * width);

  SECTION("token 33 of request 1: only its column of rows 2 and 3 changes") {
    ref::IndexerProblem p = base;
    const auto [blk, o] = where(p, 1, 33);
    for (int d = 0; d < 128; ++d) p.kv_cache[values_at(p, blk, o) + d] = rt::encode_fp8(d % 2 ? 3.0 : -1.5, p.target);
    write_scale(p, scale_at(p, blk, o), 0.75f);
    const std::vector<double> l = ref::indexer_logits_reference(p);
    for (size_t r = 0; r < 4; ++r)
      for (size_t t = 0; t < width; ++t) {
        INFO("row " << r << " token " << t);
        if (t == 33 && r >= 2)
          CHECK(l[r * width + t] != l0[r * width + t]);
        else
          CHECK(same(l[r * width + t], l0[r * width + t]));
      }
  }
  SECTION("q and weights of request 1, row 1 (r = 3): only row 3 changes") {
    ref::IndexerProblem p = base;
    for (int d = 0; d < 128; ++d) p.q[((3 * 8) + 5) * 128 + d] = rt::encode_fp8(d % 3 ? 2.0 : -1.0, p.target);
    p.weights[3 * 8 + 5] = 4.0f;
    const std::vector<double> l = ref::indexer_logits_reference(p);
    int changed = 0;
    for (size_t r = 0; r < 4; ++r)
      for (size_t t = 0; t < width; ++t) {
        if (r == 3)
          changed += !same(l[r * width + t], l0[r * width + t]);
        else
          CHECK(same(l[r * width + t], l0[r * width + t]));
      }
    CHECK(changed > 0);
  }
  SECTION("positions past a request's end are NaN and its unused slots are never read") {
    ref::IndexerProblem p = base;
    // Request 0's last block holds tokens 32..47, of which 37..47 are past its end.
    const auto [blk, o] = where(p, 0, 36);
    for (int s = o + 1; s < p.block_size; ++s) {
      std::memset(&p.kv_cache[values_at(p, blk, s)], 0x11, 128);
      write_scale(p, scale_at(p, blk, s), 1e30f);
    }
    const std::vector<double> l = ref::indexer_logits_reference(p);
    for (size_t i = 0; i < l.size(); ++i) CHECK(same(l[i], l0[i]));
    for (size_t r = 0; r < 2; ++r)
      for (size_t t = 0; t < width; ++t) CHECK(std::isnan(l0[r * width + t]) == (t >= 37));
  }
}

TEST_CASE("dsa indexer reference: a block id outside the pool is refused", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.context_lens = {100};
  ref::IndexerProblem p = ref::make_indexer_problem(prm);
  p.block_table[1] = -1;
  CHECK_THROWS_WITH(ref::indexer_logits_reference(p), Catch::Contains("block_table[0][1] = -1"));
  p.block_table[1] = int32_t(p.num_blocks);
  CHECK_THROWS_WITH(ref::indexer_logits_reference(p), Catch::Contains("outside [0, num_blocks"));
}

TEST_CASE("dsa indexer reference: the causal end of MTP rows", "[dsa-indexer]") {
  CHECK(ref::indexer_row_end(10, 3, 0) == 8);
  CHECK(ref::indexer_row_end(10, 3, 1) == 9);
  CHECK(ref::indexer_row_end(10, 3, 2) == 10);
  CHECK(ref::indexer_row_end(1, 3, 0) == 0);  // clamped
  CHECK(ref::indexer_row_end(1, 3, 2) == 1);
  CHECK(ref::indexer_row_end(5, 1, 0) == 5);
}

TEST_CASE("dsa indexer top-k: reference and checker on a crafted row", "[dsa-indexer]") {
  // Positions 3 and 4 tie at 2.0 across the 3rd place; position 6 is the largest but past end 6.
  const std::vector<double> row = {0.5, 3.0, -1.0, 2.0, 2.0, 7.0, 9.0};
  const int end = 6, k = 3;
  CHECK(ref::topk_reference(row, end, k) == std::vector<int32_t>{5, 1, 3});
  auto check = [&](std::vector<int32_t> got) { return ref::check_topk_row(got, row, end, k, 0.0); };
  CHECK(check({5, 1, 3}) == "");
  CHECK(check({3, 5, 1}) == "");  // any order
  CHECK(check({5, 4, 1}) == "");  // the tie swapped
  // Wrong sets: one selected below the k-th largest, one above it missing.
  CHECK_THAT(check({5, 1, 0}), Catch::Contains("index 0") && Catch::Contains("is selected"));
  CHECK_THAT(check({5, 3, 4}), Catch::Contains("index 1") && Catch::Contains("is missing"));
  CHECK_THAT(check({5, 1, 5}), Catch::Contains("entry 2 = 5 duplicates entry 0"));
  CHECK_THAT(check({6, 5, 1}), Catch::Contains("entry 0 = 6 is outside [0, end 6)"));
  CHECK_THAT(check({5, 1, -7}), Catch::Contains("is outside"));
  CHECK_THAT(check({5, 1}), Catch::Contains("2 entries, expected k = 3"));
  CHECK_THAT(check({5, 1, -1}), Catch::Contains("2 valid entries"));
}

TEST_CASE("dsa indexer top-k: a short row is padded with -1 at the tail", "[dsa-indexer]") {
  const std::vector<double> row = {1.0, 4.0, 2.0};
  CHECK(ref::topk_reference(row, 2, 4) == std::vector<int32_t>{1, 0, -1, -1});
  CHECK(ref::check_topk_row(std::vector<int32_t>{0, 1, -1, -1}, row, 2, 4, 0.0) == "");
  CHECK_THAT(ref::check_topk_row(std::vector<int32_t>{-1, 0, 1, -1}, row, 2, 4, 0.0),
             Catch::Contains("entry 1 = 0 follows -1 padding"));
  CHECK_THAT(ref::check_topk_row(std::vector<int32_t>{0, -1, -1, -1}, row, 2, 4, 0.0),
             Catch::Contains("1 valid entries, expected min(k 4, end 2) = 2"));
  CHECK(ref::topk_reference(row, 0, 2) == std::vector<int32_t>{-1, -1});
  CHECK(ref::check_topk_row(std::vector<int32_t>{-1, -1}, row, 0, 2, 0.0) == "");
}

TEST_CASE("dsa indexer top-k: near-ties within the tolerance may go either way", "[dsa-indexer]") {
  const std::vector<double> row = {1.0, 1.0005, 0.5};
  CHECK(ref::topk_reference(row, 3, 1) == std::vector<int32_t>{1});
  CHECK(ref::check_topk_row(std::vector<int32_t>{0}, row, 3, 1, 1e-3) == "");
  CHECK_THAT(ref::check_topk_row(std::vector<int32_t>{0}, row, 3, 1, 1e-4),
             Catch::Contains("index 0") && Catch::Contains("is selected"));
  CHECK_THAT(ref::check_topk_row(std::vector<int32_t>{2}, row, 3, 1, 1e-3), Catch::Contains("index 2"));
}

TEST_CASE("dsa indexer generator: sizes, block ids, fp8 codes and scales", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.target = GENERATE(rt::Target::gfx942, rt::Target::gfx950);
  prm.batch = 3, prm.next_n = 2, prm.heads = 4, prm.block_size = GENERATE(1, 8, 64);
  prm.context_lens = {65, 0, 130};
  prm.extra_blocks = 2;
  prm.seed = 11;
  const ref::IndexerProblem p = ref::make_indexer_problem(prm);
  const int bs = prm.block_size;
  const int64_t used = (65 + bs - 1) / bs + (130 + bs - 1) / bs;

  CHECK(p.target == prm.target);
  CHECK(p.context_lens == std::vector<int32_t>{65, 0, 130});
  CHECK(p.max_context_len == 130);
  CHECK(p.block_table_stride == (130 + bs - 1) / bs);
  CHECK(p.num_blocks == used + 2);
  CHECK(p.q.size() == size_t(3 * 2 * 4 * 128));
  CHECK(p.weights.size() == size_t(3 * 2 * 4));
  CHECK(p.kv_cache.size() == size_t(p.num_blocks) * bs * 132);
  REQUIRE(p.block_table.size() == size_t(3 * p.block_table_stride));

  std::set<int32_t> ids;
  for (int b = 0; b < 3; ++b)
    for (int j = 0; j < p.block_table_stride; ++j) {
      const int32_t id = p.block_table[size_t(b) * p.block_table_stride + j];
      if (j < (p.context_lens[b] + bs - 1) / bs) {
        CHECK((id >= 0 && id < p.num_blocks));
        ids.insert(id);
      } else {
        CHECK(id == -1);
      }
    }
  CHECK(int64_t(ids.size()) == used);  // distinct

  for (uint8_t v : p.q) CHECK_FALSE(std::isnan(decode(v, p.target)));
  // Each token's amax is quantised onto the writer's ceiling exactly: 224 (gfx942), 448 (gfx950).
  const double ceiling = p.target == rt::Target::gfx942 ? 224.0 : 448.0;
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < p.context_lens[b]; ++t) {
      const auto [blk, o] = where(p, b, t);
      double amax = 0.0;
      for (int d = 0; d < 128; ++d) {
        const double v = decode(p.kv_cache[values_at(p, blk, o) + d], p.target);
        REQUIRE_FALSE(std::isnan(v));
        amax = std::max(amax, std::fabs(v));
      }
      CHECK(amax == ceiling);
      const float s = read_scale(p, scale_at(p, blk, o));
      CHECK((std::isfinite(s) && s > 0.0f));
    }
  // Blocks no request uses are random bytes, not zeros.
  for (int64_t blk = 0; blk < p.num_blocks; ++blk) {
    if (ids.count(int32_t(blk))) continue;
    int nonzero = 0;
    for (int i = 0; i < bs * 132; ++i) nonzero += p.kv_cache[size_t(blk) * bs * 132 + i] != 0;
    CHECK(nonzero > bs * 132 / 2);
  }
}

TEST_CASE("dsa indexer generator: reproducible from its seed", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.context_lens = {200};
  const ref::IndexerProblem a = ref::make_indexer_problem(prm), b = ref::make_indexer_problem(prm);
  CHECK(a.q == b.q);
  CHECK(a.kv_cache == b.kv_cache);
  CHECK(a.weights == b.weights);
  CHECK(a.block_table == b.block_table);
  prm.seed = 2;
  const ref::IndexerProblem c = ref::make_indexer_problem(prm);
  CHECK(a.q != c.q);
  CHECK(a.kv_cache != c.kv_cache);
}

TEST_CASE("dsa indexer generator: tie groups give exactly equal logits", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.target = GENERATE(rt::Target::gfx942, rt::Target::gfx950);
  prm.batch = 2, prm.next_n = 2, prm.heads = 16, prm.block_size = 4;
  prm.context_lens = {40, 23};
  prm.seed = 5;
  // The number of logits of a row equal to an earlier one of the same row.
  auto repeats = [](const ref::IndexerProblem& p) {
    const std::vector<double> l = ref::indexer_logits_reference(p);
    std::vector<int> out;
    for (int r = 0; r < p.batch * p.next_n; ++r) {
      const int len = p.context_lens[r / p.next_n];
      const double* row = &l[size_t(r) * p.max_context_len];
      out.push_back(len - int(std::set<double>(row, row + len).size()));
    }
    return out;
  };
  const ref::IndexerProblem plain = ref::make_indexer_problem(prm);
  CHECK(repeats(plain) == std::vector<int>{0, 0, 0, 0});
  prm.tie_groups = 3;
  const ref::IndexerProblem tied = ref::make_indexer_problem(prm);
  for (int n : repeats(tied)) CHECK(n >= 3);  // each group adds 1 to 3 copies
  // The same problem otherwise: only token bytes were overwritten.
  CHECK(tied.q == plain.q);
  CHECK(tied.weights == plain.weights);
  CHECK(tied.block_table == plain.block_table);
}

TEST_CASE("dsa indexer generator: bad parameters are named", "[dsa-indexer]") {
  ref::IndexerParams prm;
  prm.context_lens = {10};
  prm.block_size = 3;
  CHECK_THROWS_WITH(ref::make_indexer_problem(prm), Catch::Contains("block_size 3"));
  prm.block_size = 64;
  prm.batch = 2;
  CHECK_THROWS_WITH(ref::make_indexer_problem(prm), Catch::Contains("1 context_lens for batch 2"));
  prm.batch = 1;
  prm.context_lens = {-1};
  CHECK_THROWS_WITH(ref::make_indexer_problem(prm), Catch::Contains("context_lens[0] = -1"));
}
