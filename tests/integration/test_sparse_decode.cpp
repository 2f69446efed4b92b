// Sparse MLA decode (DSA) end to end through the emulator, against the fp64 reference: each
// query row attends to its own row of cache slots, -1 and slots past the cache masked.
#include <catch2/catch.hpp>

#include <array>
#include <climits>
#include <cstring>
#include <random>

#include "mla_harness.h"

using namespace mla;

namespace {

rt::ProblemParams sparse_params(rt::Target t, rt::DType q, rt::DType kv, int heads, std::vector<int> topk,
                                double masked, uint64_t seed) {
  rt::ProblemParams p;
  p.target = t;
  p.q_dtype = q;
  p.kv_dtype = kv;
  p.heads = heads;
  p.sparse = true;
  p.kv_lens = std::move(topk);
  p.sparse_masked = masked;
  p.seed = seed;
  p.return_lse = true;
  return p;
}

// The dense e2e bounds (test::check_accuracy). Masked slots are never read: the KV bytes the
// traffic bound counts as needed are the unmasked tokens'.
void check(const test::E2E& e) { test::check_accuracy(e); }


// The sweep: every axis value on each target. Heads 1..128 natively; fp8/fp8 (per-tensor
// scales), bf16/bf16 and bf16 q over an fp8 cache; rows of 1..2048 slots with 0-60% masked
// (-1, slots just past the cache and INT32_MAX at random positions); lse on and off.
struct Case {
  rt::DType q, kv;
  int heads;
  std::vector<int> topk;
  double masked;
  bool lse;
};
const Case kSweep[] = {
    {rt::DType::fp8, rt::DType::fp8, 16, {256, 100, 33, 1}, 0.3, true},
    {rt::DType::bf16, rt::DType::bf16, 16, {64, 64, 64}, 0.6, false},
    {rt::DType::bf16, rt::DType::fp8, 16, {2048}, 0.1, true},
    {rt::DType::fp8, rt::DType::fp8, 1, {129, 17}, 0.5, true},
    {rt::DType::bf16, rt::DType::bf16, 8, {300}, 0.0, true},
    {rt::DType::fp8, rt::DType::fp8, 64, {200, 31}, 0.25, false},
    {rt::DType::bf16, rt::DType::fp8, 128, {100, 40}, 0.3, true},
    {rt::DType::fp8, rt::DType::fp8, 128, {64}, 0.2, true},
};

void run_case(rt::Target t, int index) {
  const Case& c = kSweep[index];
  auto p = sparse_params(t, c.q, c.kv, c.heads, c.topk, c.masked, 300 + uint64_t(index));
  p.return_lse = c.lse;
  check(test::run_e2e(p));
}

}  // namespace

#define SPARSE_SWEEP(i)                                                                   \
  TEST_CASE("sparse e2e sweep " #i " gfx942") { run_case(rt::Target::gfx942, i); } \
  TEST_CASE("sparse e2e sweep " #i " gfx950") { run_case(rt::Target::gfx950, i); }
SPARSE_SWEEP(0)
SPARSE_SWEEP(1)
SPARSE_SWEEP(2)
SPARSE_SWEEP(3)
SPARSE_SWEEP(4)
SPARSE_SWEEP(5)
SPARSE_SWEEP(6)
SPARSE_SWEEP(7)

// Rows the kernel must not turn into NaN: every slot masked (o = 0, lse = -inf), masked slots
// only at the head of a long row (whole tiles, and whole splits of it, masked: their partials
// are empty and merge to nothing), one valid slot at the very end. Split over 8 CUs and walked
// by a persistent grid of 3 workgroups under random wave orders, in-launch merge or reduce.
TEST_CASE("sparse e2e: empty rows, masked leading tiles and splits, merged in the launch or by the reduce") {
  auto edit = [](rt::Problem& p) {
    const int32_t n = p.kv_indptr[1];  // row 0: every slot masked
    for (int32_t i = 0; i < n; ++i) p.kv_indices[size_t(i)] = i % 2 ? -1 : INT32_MAX;
    for (int32_t i = p.kv_indptr[1]; i < p.kv_indptr[1] + 1500; ++i) p.kv_indices[size_t(i)] = -1;  // row 1's head
    for (int32_t i = p.kv_indptr[2]; i + 1 < p.kv_indptr[3]; ++i) p.kv_indices[size_t(i)] = -1;     // row 2: its last slot
  };
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950})
    for (bool in_launch : {false, true}) {
      rt::EmulatorRunOptions opts;
      opts.num_cus = 8;
      opts.merge_in_launch = in_launch;
      opts.cascade = rt::CascadePolicy::never;
      auto a = test::run_e2e(sparse_params(t, rt::DType::fp8, rt::DType::fp8, 16, {300, 2048, 700}, 0.0, 11), opts, edit);
      INFO("merge in launch " << in_launch);
      check(a);
      CHECK(a.result.plan.units.size() > 3);
      for (int i = 0; i < 16 * 512; ++i) REQUIRE(a.result.o[size_t(i)] == 0);  // row 0: o = +0
      for (int h = 0; h < 16; ++h) CHECK(a.result.lse[size_t(h)] == -std::numeric_limits<float>::infinity());
      opts.persistent_grid = 3;
      opts.dispatch.random_seed = 5;
      auto b = test::run_e2e(sparse_params(t, rt::DType::fp8, rt::DType::fp8, 16, {300, 2048, 700}, 0.0, 11), opts, edit);
      check(b);
      CHECK(a.result.o == b.result.o);
      CHECK(a.result.lse == b.result.lse);
    }
}

// FlashMLA's fp8_ds_mla cache (656-byte entries: e4m3fn latent with a f32 scale per 128 values,
// bf16 rope), bf16 q, against the exact fp64 reference: the bounds d <= 2e-5, max error <=
// 1% of max|ref|, lse within 2e-3 with power-of-two scales (DeepSeek's: the dequantised values are
// bf16 numbers). With arbitrary scales (SGLang's amax / 448) the producer's bf16 rounding of each
// value x scale (as FlashMLA's kernels and reference round it, docs/sparse.md) moves lse up to ~1e-2
// from the exact one: checked within 2e-2 there, and within 2e-3 of the reference that rounds the
// dequantised values to bf16 as FlashMLA's does. The e4m3fn bytes read right on gfx942 too, whose
// MFMA fp8 is e4m3fnuz: 1% of the latent bytes are 0x80 (-0 in e4m3fn, NaN in e4m3fnuz) and the
// largest codes occur in every tile.
TEST_CASE("sparse e2e: fp8_ds_mla entries, power-of-two and arbitrary scales, both targets") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950})
    for (bool pow2 : {true, false})
      for (int heads : {16, 128}) {
        auto p = sparse_params(t, rt::DType::bf16, rt::DType::fp8, heads, {300, 64, 2048}, 0.2, 40 + heads + pow2);
        p.kv_ds_mla = true;
        p.ds_mla_pow2_scales = pow2;
        if (heads == 128) p.kv_lens = {200, 33};
        auto e = test::run_e2e(p);
        INFO(rt::shape_of(e.problem).describe() << (pow2 ? ", power-of-two scales" : ", arbitrary scales") << ": "
                                                << e.cmp.summary());
        INFO("traffic: " << e.result.traffic.to_json().dump());
        size_t zero_neg = 0;
        for (size_t r = 0; r < e.problem.kv.bytes.size() / 656; ++r)
          for (int i = 0; i < 512; ++i) zero_neg += e.problem.kv.bytes[r * 656 + size_t(i)] == 0x80;
        CHECK(zero_neg > 100);
        CHECK(e.cmp.clean());
        CHECK(e.cmp.d <= 2e-5);
        CHECK(e.cmp.max_abs_err <= 1e-2 * e.cmp.max_abs_ref);
        CHECK(e.cmp.lse_max_abs_err <= (pow2 ? 2e-3 : 2e-2));
        CHECK(e.result.traffic.ratio() <= 1.03);
        if (!pow2) {
          const ref::Compare r = ref::compare(ref::run_reference(e.problem, {.ds_mla_bf16 = true}), e.result.o, &e.result.lse);
          INFO("against the bf16-dequantised reference: " << r.summary());
          CHECK(r.lse_max_abs_err <= 2e-3);
          CHECK(r.d <= 2e-5);
        }
      }
}

// The dequantised fp8_ds_mla values bit for bit: every row's scores are 0 for one entry and
// about -2700 for the others (rope 0 against -1024, q's latent 0), so o is that entry's bf16 latent
// row exactly: each value x its tile's scale in f32, rounded to bf16 (nearest even). gfx942 takes
// a tile's products' high halves when every lane's scales make them bf16 numbers (at most 4
// significant bits, 0 or >= 2^-111) and rounds otherwise; the rows put such scales beside others
// in one tile, both ways round, and the e4m3fn bytes cover every code but the NaNs, which make
// their rows non-finite.
TEST_CASE("sparse e2e: fp8_ds_mla values dequantised bit for bit, exact-scale and rounding paths") {
  struct Row {
    std::array<float, 4> observed;  // the attended entry's tile scales
    bool others_pow2;               // the other entries': power-of-two or arbitrary
    int nan_byte;                   // 0: none; else a latent byte of the attended entry set to it
  };
  const float odd = 0.0123456789f;  // 24 significant bits
  const Row rows[] = {
      {{odd, 3.0f * odd, odd / 7.0f, 1.1f}, true, 0},                 // rounding beside power-of-two tiles
      {{0.25f, 1.0f / 1024, 8.0f, 0x1p-20f}, true, 0},                // exact
      {{1.875f * 0.5f, 1.5f * 4.0f, 1.25f, 1.125f / 256}, true, 0},   // 4 significant bits: exact
      {{1.0625f, 1.0625f * 0x1p-6f, 0.5f, 2.0f}, true, 0},            // 5 bits in two tiles
      {{0.0f, 0x1p-111f, 0x1p-112f * 1.5f, 0x1p20f}, true, 0},        // 0 and the exponent bound
      {{0.5f, odd, 0.25f, 0.125f}, true, 0},                          // one lane's tile rounds
      {{0.5f, 0.25f, 2.0f, 1.0f}, false, 0},                          // exact values, rounding path
      {{0.5f, 0.25f, 2.0f, 1.0f}, true, 0x7f},                        // e4m3fn NaN
      {{odd, 0.25f, 2.0f, 1.0f}, true, 0xff},
  };
  const int n = int(std::size(rows));
  std::vector<int> attended(static_cast<size_t>(n));
  auto edit = [&](rt::Problem& p) {
    std::mt19937 rng(7);
    auto entry = [&](int b, int t) { return &p.kv.bytes[p.kv_elem(b, t, 0)]; };
    auto put_f32 = [](uint8_t* at, float v) { std::memcpy(at, &v, 4); };
    auto put_bf16 = [](uint8_t* at, uint16_t v) { at[0] = uint8_t(v), at[1] = uint8_t(v >> 8); };
    for (size_t i = 0; i < p.q.count(); ++i) p.q.set_bits(i, (i % 576) < 512 ? 0 : 0x3f80);  // latent 0, rope 1
    for (int b = 0; b < n; ++b) {
      const int len = p.kv_len(b);
      attended[size_t(b)] = (37 * b + 5) % len;
      for (int t = 0; t < len; ++t) {
        uint8_t* e = entry(b, t);
        const bool mine = t == attended[size_t(b)];
        for (int i = 0; i < 512; ++i) {
          uint8_t v = mine ? uint8_t((i * 7 + b * 29) % 256) : uint8_t(rng());
          if ((v & 0x7f) == 0x7f) v ^= 1;  // no NaN but where a row asks for one
          e[i] = v;
        }
        if (mine && rows[b].nan_byte) e[200] = uint8_t(rows[b].nan_byte);
        for (int k = 0; k < 4; ++k) {
          const int ex = int(rng() % 16) - 8;
          const float other = rows[b].others_pow2 ? std::ldexp(1.0f, ex) : std::ldexp(1.0f + float(rng() % 1000000) / 1e6f, ex);
          put_f32(e + abi::kDsMlaScaleOffset + 4 * k, mine ? rows[b].observed[size_t(k)] : other);
        }
        for (int i = 0; i < 64; ++i) put_bf16(e + abi::kDsMlaRopeOffset + 2 * i, mine ? 0 : 0xc480);  // -1024
      }
    }
  };
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    auto p = sparse_params(t, rt::DType::bf16, rt::DType::fp8, 16, std::vector<int>(size_t(n), 96), 0.0, 91);
    p.kv_ds_mla = true;
    p.sparse_pool = -1;  // every row's slots its own
    const auto e = test::run_e2e(p, {}, edit);
    INFO(rt::shape_of(e.problem).describe());
    for (int b = 0; b < n; ++b) {
      const uint8_t* ent = &e.problem.kv.bytes[e.problem.kv_elem(b, attended[size_t(b)], 0)];
      size_t wrong = 0, nonfinite = 0, first = 512;
      for (int h = 0; h < 16; ++h)
        for (int i = 0; i < 512; ++i) {
          float scale;
          std::memcpy(&scale, ent + abi::kDsMlaScaleOffset + 4 * (i / 128), 4);
          const float v = float(ref::decode_fp8_ocp(ent[i])) * scale;  // f32, as the producer multiplies
          const uint16_t got = e.result.o[(size_t(b) * 16 + size_t(h)) * 512 + size_t(i)];
          const uint16_t want = ref::bf16_bits(v);
          nonfinite += (got & 0x7f80) == 0x7f80;
          // -0 comes out +0: o = 1 x (-0) + 0 x (the other entries' values)
          if (got != want && !(want == 0x8000 && got == 0) && !rows[b].nan_byte) ++wrong, first = std::min(first, size_t(i));
        }
      INFO("row " << b << ": " << wrong << " values differ, the first at latent " << first);
      if (first < 512) {
        float scale;
        std::memcpy(&scale, ent + abi::kDsMlaScaleOffset + 4 * (first / 128), 4);
        INFO("byte " << int(ent[first]) << " scale " << scale << " got " << e.result.o[size_t(b) * 16 * 512 + first]
                     << " want " << ref::bf16_bits(float(ref::decode_fp8_ocp(ent[first])) * scale));
        CHECK(wrong == 0);
      }
      if (rows[b].nan_byte) CHECK(nonfinite > 0);
      else CHECK(wrong == 0);
    }
  }
}

// A slot listed twice in a row is two tokens of the softmax (FlashMLA's reference attends each
// index entry): row 0 repeats one slot 40 times, row 1 lists every slot twice.
TEST_CASE("sparse e2e: duplicate slots are attended once per entry") {
  auto edit = [](rt::Problem& p) {
    for (int32_t i = p.kv_indptr[0]; i < p.kv_indptr[0] + 40; ++i) p.kv_indices[size_t(i)] = p.kv_indices[0];
    for (int32_t i = p.kv_indptr[1] + 1; i < p.kv_indptr[2]; i += 2) p.kv_indices[size_t(i)] = p.kv_indices[size_t(i - 1)];
  };
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    auto p = sparse_params(t, rt::DType::bf16, rt::DType::bf16, 16, {100, 130}, 0.0, 17);
    auto e = test::run_e2e(p, {}, edit);
    check(e);
  }
}
