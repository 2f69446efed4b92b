// MLA decode end to end through the emulator, against the fp64 reference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

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

// The bounds of test::check_accuracy (mla_harness.h; the merge test below checks what the fp8-P
// lse is for), and the page ids read once per page.
void check(const test::E2E& e) {
  test::check_accuracy(e);
  INFO(rt::shape_of(e.problem).describe());
  // Pages of at least a tile: one page id per page (issue #15), not one per token; a prefix
  // kernel with two producer waves (MlaGeometry::producers) reads each page's id once per producer,
  // the wide prefix kernel (its 4 consumers stream the KV) once per consumer.
  const auto j = e.result.traffic.to_json();
  if (e.problem.page_size >= e.result.plan.tile_tokens) {
    int producers = 1;
    if (e.result.ran_prefix) {
      rt::DecodeShape shape = rt::shape_of(e.problem);
      shape.prefix_rows = e.result.plan.prefix_rows_per_group == 192 ? 192 : 0;  // the kernel that ran
      const rt::Selection sel = test::catalog_for(shape).select(shape);
      REQUIRE(sel.prefix->name == e.result.prefix_kernel);
      producers = sel.prefix->geometry.value("consumer_dma", false) ? sel.prefix->launch.consumers
                                                                    : sel.prefix->geometry.value("producers", 1);
    }
    const int64_t read = j["kv_indices"]["read"].get<int64_t>(), needed = j["kv_indices"]["needed"].get<int64_t>();
    CHECK(read >= needed);
    CHECK(read <= producers * needed);
    if (producers == 1) CHECK(read == needed);
  }
}

// The sweep: every axis value on each target (not the full cross product). kv lengths 1, 2,
// 15, 16, 17, 127, 128, 129, 1000 and 4099; page sizes 1..256 with partial last pages; heads
// 8..128 native (12 is not padded); qseqlen 1..4 with the causal rule; lse and soft-cap.
struct Case {
  rt::DType q, kv;
  int heads, qseqlen, page;
  std::vector<int> lens;
  bool lse = false;
  double cap = 0;
};

const Case kSweep[] = {
    {rt::DType::fp8, rt::DType::fp8, 8, 1, 1, {1, 2, 15}},
    {rt::DType::fp8, rt::DType::fp8, 12, 1, 128, {16, 17, 1000}, true},
    {rt::DType::fp8, rt::DType::fp8, 16, 2, 16, {127, 128, 129}},
    {rt::DType::bf16, rt::DType::fp8, 16, 1, 64, {4099}},
    {rt::DType::bf16, rt::DType::fp8, 32, 3, 256, {129, 300}, false, 50.0},
    {rt::DType::bf16, rt::DType::bf16, 64, 4, 1, {17, 64}},
    {rt::DType::bf16, rt::DType::bf16, 128, 1, 16, {1000}, true},
    {rt::DType::fp8, rt::DType::fp8, 128, 2, 64, {2, 200}, false, 30.0},
    {rt::DType::bf16, rt::DType::fp8, 12, 4, 128, {4, 129}, true},
};

void run_case(rt::Target t, int index) {
  const Case& c = kSweep[index];
  auto p = params(t, c.q, c.kv, c.heads, c.qseqlen, c.page, c.lens, 100 + uint64_t(index));
  p.return_lse = c.lse;
  p.logit_cap = c.cap;
  auto e = test::run_e2e(p);
  INFO(rt::shape_of(e.problem).describe());
  check(e);
}

}  // namespace

#define SWEEP(i)                                                                                       \
  TEST_CASE("mla e2e sweep " #i " gfx942") { run_case(rt::Target::gfx942, i); }                      \
  TEST_CASE("mla e2e sweep " #i " gfx950") { run_case(rt::Target::gfx950, i); }
SWEEP(0)
SWEEP(1)
SWEEP(2)
SWEEP(3)
SWEEP(4)
SWEEP(5)
SWEEP(6)
SWEEP(7)
SWEEP(8)

// Native shapes (issue #15): every head count 1..128 and qseqlen 1..8 builds without padding in
// memory; the ones users ask for are checked here against the reference on both targets, with
// kv_len = qseqlen (the causal limit inside the step) and page boundaries +-1.
struct NativeCase {
  rt::DType q, kv;
  int heads, qseqlen, page;
};
const NativeCase kNative[] = {
    {rt::DType::fp8, rt::DType::fp8, 1, 1, 16},   {rt::DType::fp8, rt::DType::fp8, 2, 1, 16},
    {rt::DType::fp8, rt::DType::fp8, 4, 2, 16},   {rt::DType::fp8, rt::DType::fp8, 20, 1, 64},
    {rt::DType::fp8, rt::DType::fp8, 24, 1, 64},  {rt::DType::fp8, rt::DType::fp8, 40, 1, 1},
    {rt::DType::fp8, rt::DType::fp8, 48, 1, 128}, {rt::DType::fp8, rt::DType::fp8, 96, 1, 64},
    {rt::DType::bf16, rt::DType::fp8, 24, 5, 64}, {rt::DType::bf16, rt::DType::fp8, 16, 6, 16},
    {rt::DType::bf16, rt::DType::fp8, 12, 7, 16}, {rt::DType::fp8, rt::DType::fp8, 16, 8, 64},
    {rt::DType::bf16, rt::DType::bf16, 48, 8, 16}, {rt::DType::bf16, rt::DType::bf16, 96, 3, 1},
};

TEST_CASE("mla e2e: heads 1..128 and qseqlen 1..8 run natively against the reference") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950})
    for (const NativeCase& c : kNative) {
      std::vector<int> lens{c.qseqlen, std::max(c.qseqlen, c.page - 1), std::max(c.qseqlen, c.page + 1), 300};
      auto p = params(t, c.q, c.kv, c.heads, c.qseqlen, c.page, lens, 700 + uint64_t(c.heads * 9 + c.qseqlen));
      auto e = test::run_e2e(p);
      INFO(rt::shape_of(e.problem).describe());
      check(e);
      // The kernel is the shape's own: no padded rows in memory.
      CHECK(e.result.decode_kernel.find(fmt::format("_h{}_qs{}_", c.heads, c.qseqlen)) != std::string::npos);
    }
}

TEST_CASE("mla e2e: many short requests with qseqlen 1 in one batch") {
  std::vector<int> lens;
  for (int i = 0; i < 24; ++i) lens.push_back(1 + (i * 37) % 90);
  auto e = test::run_e2e(params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 16, 1, 1, lens, 5));
  check(e);
}

TEST_CASE("mla e2e: one 32K request spreads over the GPU and writes through the reduce") {
  auto e = test::run_e2e(params(rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1, 64, {32768}, 6));
  check(e);
  // As many CUs as the HBM floor leaves worth feeding (the catalog's cost model: 256 here, a
  // reduce round fewer than 304 splits), each with one unit.
  CHECK(e.result.plan.cus_used >= 200);
  CHECK(e.result.plan.units.size() == size_t(e.result.plan.cus_used));
  CHECK(e.result.ran_reduce);
  CHECK(e.result.decode.workgroups == 304);  // the persistent grid: one workgroup per CU
}

TEST_CASE("mla e2e: a single-split request writes its final output directly, no reduce") {
  rt::EmulatorRunOptions opts;
  opts.num_cus = 1;
  opts.workgroups_per_cu = 1;
  auto e = test::run_e2e(params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 16, 1, 16, {100}, 8), opts);
  check(e);
  CHECK(e.result.plan.units.size() == 1);
  CHECK_FALSE(e.result.ran_reduce);
}

TEST_CASE("mla e2e: random wave interleaving gives the same bits") {
  // Two row blocks with a two-slot ring; four token splits with a one-slot ring, Q in LDS and
  // a merge in three rounds (gfx942 bf16/fp8); two splits on gfx950.
  for (auto p : {params(rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 2, 16, {77, 130}, 9),
                 params(rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1, 16, {300, 45}, 9),
                 params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 1, {300, 45}, 9)}) {
    rt::EmulatorRunOptions one_cu;
    one_cu.num_cus = 1;  // long units: many slots
    auto a = test::run_e2e(p, one_cu);
    rt::EmulatorRunOptions opts = one_cu;
    opts.dispatch.random_seed = 1234;
    auto b = test::run_e2e(p, opts);
    check(b);
    CHECK(a.result.o == b.result.o);
  }
}

// The persistent walk (mla_decode.cpp, emit_unit_sync): a grid of 3 workgroups walks every unit
// of the step, so each workgroup runs several units back to back and its waves meet after each
// one, whichever wave ends its part first (the producer after its ring, merge writers after
// their round, split-0 consumers last). Every kernel form: two row blocks with a two-slot ring,
// four splits with a one-slot ring and a merge in three rounds, two splits, the LDS-DMA prefix
// kernel with two producers and the wide prefix kernel; under random wave orders. The output
// matches the reference and, bit for bit, the run with one workgroup per unit.
TEST_CASE("mla e2e: a persistent grid of 3 workgroups walks every unit, under random wave orders") {
  struct Run {
    rt::ProblemParams p;
    int prefix_rows = 0;
  };
  std::vector<Run> runs = {{params(rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 2, 16, {77, 130, 40}, 21)},
                           {params(rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1, 16, {300, 45}, 22)},
                           {params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 1, {300, 45}, 23)}};
  for (int rows : {0, 192}) {
    Run r{params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 128, {900, 1000, 1100, 300}, 24), rows};
    r.p.shared = {{0, 3, 768}};
    r.p.return_lse = true;
    runs.push_back(r);
  }
  for (const Run& r : runs) {
    rt::EmulatorRunOptions one;
    one.num_cus = 8;  // several units per request
    one.cascade = rt::CascadePolicy::always;
    auto a = test::run_e2e(r.p, one, {}, r.prefix_rows);
    check(a);
    const size_t units = a.result.plan.units.size() + a.result.plan.prefix_units.size();
    for (uint32_t seed : {0u, 3u}) {
      rt::EmulatorRunOptions opts = one;
      opts.persistent_grid = 3;
      opts.dispatch.random_seed = seed;
      auto b = test::run_e2e(r.p, opts, {}, r.prefix_rows);
      INFO(rt::shape_of(b.problem).describe() << ", prefix rows " << r.prefix_rows << ", wave seed " << seed << ", "
                                              << units << " units");
      CHECK(units > 3);  // more units than the grid's workgroups
      CHECK(b.result.decode.workgroups == 3);
      if (b.result.ran_prefix) CHECK(b.result.prefix.workgroups == 3);
      CHECK(b.result.ran_prefix == (r.p.shared.size() > 0));
      check(b);
      CHECK(a.result.o == b.result.o);
      CHECK(a.result.lse == b.result.lse);
    }
  }
}

TEST_CASE("mla e2e: each KV byte is read once per unit, and nothing else but indices, Q, work and partials") {
  auto e = test::run_e2e(params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 16, 1, 1, {1000, 333}, 10));
  check(e);
  // Token rows touched: every token of every unit once (the last tile re-reads a valid row
  // for its masked tail lanes, counted in distinct bytes once).
  const uint64_t kv_bytes = uint64_t(1000 + 333) * 576;
  CHECK(e.result.decode.global_read_distinct >= kv_bytes);
  CHECK(e.result.decode.global_read_distinct <= kv_bytes + 64 * 1024);
}

// Kimi-K3 TP8 on MI355X scaled down 100x: 16 requests of ~684 tokens (~68.4K in the seed),
// 12 native heads and 16 heads, page size 1 (token indices) and 128.
TEST_CASE("mla e2e: scaled-down Kimi-K3, 12 and 16 heads, fp8/fp8 gfx950, batch 16, page sizes 1 and 128") {
  for (int heads : {12, 16})
    for (int page : {1, 128}) {
      std::vector<int> lens;
      for (int i = 0; i < 16; ++i) lens.push_back(680 + (i * 7) % 9);
      auto e = test::run_e2e(params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, heads, 1, page, lens, 11));
      check(e);
      CHECK(e.problem.batch() == 16);
    }
}

// Scores ~7x the usual spread: row maxima keep jumping by more than the kernel's rescale
// slack (7 in log2 units), so the lazy O rescale is taken on some tiles and skipped on others,
// and P reaches up to 2^7 before the next rescale; fp8 P must not saturate (e4m3fnuz: 240).
TEST_CASE("mla e2e: peaked scores exercise the lazy rescale on every target and dtype pair") {
  for (auto t : {rt::Target::gfx942, rt::Target::gfx950})
    for (auto [q, kv] : {std::pair{rt::DType::fp8, rt::DType::fp8}, std::pair{rt::DType::bf16, rt::DType::fp8},
                         std::pair{rt::DType::bf16, rt::DType::bf16}}) {
      rt::EmulatorRunOptions opts;
      opts.num_cus = 2;  // long units: many tiles after the first
      auto p = params(t, q, kv, 16, 1, 16, {900, 517}, 12);
      p.sm_scale = 0.5;
      p.return_lse = true;
      auto e = test::run_e2e(p, opts);
      check(e);
    }
}

// gfx942 runs bf16 q against an fp8 cache on fp8 MFMAs, with Q split into fp8 hi + lo images
// scaled by a power of two per row (MlaGeometry::q_split); gfx950 widens K instead. Q here
// spans 2^-20 .. 1 within every row and whole rows are scaled by 2^-12 .. 2^5, so the row
// scale, the exponent clamp and lo parts that fall to fp8 denormals are all exercised; the
// result must stay as accurate as any bf16-q kernel (it fails with the lo part dropped:
// d = 6.6e-4).
TEST_CASE("mla e2e: bf16 q over a wide dynamic range stays exact through the fp8 Q split") {
  for (auto t : {rt::Target::gfx942, rt::Target::gfx950}) {
    auto p = params(t, rt::DType::bf16, rt::DType::fp8, 16, 1, 1, {700, 45}, 21);
    p.return_lse = true;
    auto e = test::run_e2e(p, {}, [](rt::Problem& prob) {
      std::mt19937_64 rng(77);
      const size_t n = prob.q.count();
      for (size_t i = 0; i < n; ++i) {
        const size_t row = i / 576;
        const int row_exp = int(row % 18) - 12;             // whole rows: 2^-12 .. 2^5
        const int elem_exp = -int(rng() % 21);             // elements: 2^-20 .. 1
        const double x = ref::decode_bf16(prob.q.bits(i)) * std::ldexp(1.0, row_exp + elem_exp);
        prob.q.set_bits(i, rt::encode_bf16(x));
      }
    });
    check(e);
    // lo kept at 2^5 of its scale; stored unscaled, denormal lo parts cost 30x more (1.7e-4).
    CHECK(e.cmp.lse_max_abs_err <= 2e-5);
  }
}

// Shared prefixes (issue #13, docs/shared-prefix.md): groups found in the page table, each
// group's prefix read by the prefix kernel once per 48 (or 96) of its rows, the members' unique parts by
// the decode kernel, merged by the reduce. `always` makes every group cascade whatever the cost
// model says (these prefixes are too short for it to pay); exactness is the point here.
struct SharedCase {
  rt::DType q, kv;
  int heads, qseqlen, page;
  std::vector<int> lens;
  std::vector<rt::ProblemParams::Shared> shared;
  bool lse = false;
  double cap = 0;
};

std::vector<SharedCase> shared_cases() {
  std::vector<SharedCase> v;
  const auto f8 = rt::DType::fp8, b16 = rt::DType::bf16;
  // Two groups (3 and 2 requests) and a lone request between them; at page 1 prefixes that are
  // not a multiple of the 32-token tile (the planner cuts them to whole tiles).
  for (int page : {1, 64, 128})
    v.push_back({f8, f8, 12, 1, page, {1300, 1411, 1200, 777, 600, 513},
                 page == 1 ? std::vector<rt::ProblemParams::Shared>{{0, 3, 1000}, {4, 2, 300}}
                           : std::vector<rt::ProblemParams::Shared>{{0, 3, 1152}, {4, 2, 384}}});
  // 24 requests in one group: 288 rows, six 48-row (three 96-row) prefix units per token range.
  std::vector<int> lens24;
  for (int i = 0; i < 24; ++i) lens24.push_back(300 + 7 * i);
  v.push_back({f8, f8, 12, 1, 64, lens24, {{0, 24, 256}}});
  // bf16 q over fp8 KV, qseqlen 4, lse; bf16/bf16, qseqlen 3, soft cap.
  v.push_back({b16, f8, 16, 4, 64, {900, 1000, 700, 650}, {{0, 3, 640}}, true});
  v.push_back({b16, b16, 8, 3, 1, {700, 800, 333}, {{0, 2, 512}}, false, 30.0});
  // bf16 q over fp8 KV at qseqlen 1, every request a member, lse: one attention launch.
  v.push_back({b16, f8, 16, 1, 64, {900, 1000, 700}, {{0, 3, 640}}, true});
  // Members whose whole KV is the prefix (no unique part: the prefix partial alone is the output).
  v.push_back({f8, f8, 16, 1, 1, {1024, 1024, 1100}, {{0, 3, 1024}}, true});
  // K3 c16 in small: 192 rows, every request a member, so at qseqlen 1 the unique parts (not
  // whole tiles) run in the prefix launch too, on one row block of the prefix kernel's 3 or 6.
  std::vector<int> lens16;
  for (int i = 0; i < 16; ++i) lens16.push_back(1792 + 23 + 37 * i);
  v.push_back({f8, f8, 12, 1, 128, lens16, {{0, 16, 1792}}});
  return v;
}

TEST_CASE("mla e2e: shared prefixes are read once per prefix row group (48, 96 or 192 rows), exactly") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950})
    for (const SharedCase& c : shared_cases())
    for (int rows : {0, 192}) {
      // 192: the wide prefix kernel, where it exists (gfx950 fp8/fp8, pages of 16 or more, no cap).
      const bool wide = rows == 192;
      if (wide && !(t == rt::Target::gfx950 && c.q == rt::DType::fp8 && c.kv == rt::DType::fp8 && c.page >= 16 &&
                    c.cap == 0))
        continue;
      auto p = params(t, c.q, c.kv, c.heads, c.qseqlen, c.page, c.lens, 900 + uint64_t(c.lens.size() + c.page));
      p.shared = c.shared;
      p.return_lse = c.lse;
      p.logit_cap = c.cap;
      rt::EmulatorRunOptions opts;
      opts.cascade = rt::CascadePolicy::always;
      auto e = test::run_e2e(p, opts, {}, rows);
      INFO(rt::shape_of(e.problem).describe() << ", " << c.lens.size() << " requests, prefix rows " << rows);
      check(e);
      const rt::Plan& plan = e.result.plan;
      REQUIRE(plan.prefix_groups.size() == c.shared.size());
      for (const auto& d : plan.prefix_groups) {
        INFO(d.to_json().dump());
        CHECK(d.cascade);
      }
      CHECK(e.result.ran_prefix);
      CHECK_FALSE(plan.prefix_units.empty());
      // qseqlen 1 and every request a member: one attention launch (the prefix kernel's), the
      // members' unique parts among its units.
      int members = 0;
      for (const auto& g : c.shared) members += g.count;
      const bool one_launch = c.qseqlen == 1 && members == int(c.lens.size());
      CHECK(plan.units.empty() == one_launch);
      CHECK(e.result.ran_decode == !plan.units.empty());
      int unique_units = 0;
      for (const auto& u : plan.prefix_units) unique_units += plan.is_unique_part(u);
      CHECK((unique_units > 0) == one_launch);  // every one-launch case has a member with unique tokens
      // The KV bytes the kernels read: each group's prefix once per prefix row group, every other
      // token once per row group of its request (tile-rounded prefixes move up to a tile per group).
      const int M = c.heads * c.qseqlen;
      const int64_t T = plan.tile_tokens, kvb = int64_t(rt::kQkDim) * (c.kv == rt::DType::fp8 ? 1 : 2);
      int64_t want = 0, all = 0;
      for (int l : c.lens) all += l;
      want = all * plan.row_groups;
      for (const auto& g : c.shared) {
        const int64_t P = plan.prefix_rows_per_group, shared = g.tokens / T * T, Gp = (int64_t(g.count) * M + P - 1) / P;
        want -= int64_t(g.count) * plan.row_groups * shared - Gp * shared;
      }
      const auto j = e.result.traffic.to_json();
      CHECK(j["kv"]["read"].get<int64_t>() == want * kvb);
      // Requests of one row group and groups of one prefix row group: every KV byte is read once.
      bool once = plan.row_groups == 1;
      for (const auto& g : c.shared) once = once && g.count * M <= plan.prefix_rows_per_group;
      // 3 row blocks; 6 where gfx950 streams an fp8-Q prefix with LDS DMA; 12 with the wide kernel
      // (docs/shared-prefix.md).
      const bool dma6 = t == rt::Target::gfx950 && c.q == rt::DType::fp8 && (c.page >= T || c.page * kvb < (1 << 14));
      CHECK(plan.prefix_rows_per_group == (wide ? 192 : dma6 ? 96 : 48));
      if (once) CHECK(e.result.stats()["kv_read_over_distinct"].get<double>() <= 1.25);
    }
}

// gfx950 prefix kernels at pages of a tile or more, or of under 16 KiB (a strided buffer of pages), stream KV with LDS DMA
// (mla_decode_producer_dma.cpp):
// fp8 Q with 6 row blocks and two producer waves on an 8-slot ring, bf16 Q with 3 row blocks and
// one producer on a 4-slot ring, ring - 1 slots in flight. With the GPU's CU count the planner cuts a
// short prefix into units of a tile or two, which never wrap the ring; with 2 CUs every prefix
// unit holds tens of tiles, so each ring slot is refilled many times while the consumers read
// the others. The emulator's lds_dma and lds_race rules fail the run if a slot is read before
// its DMA is waited for and published by a barrier (checked by mutation: publishing the slot
// just read instead of the next one fails with lds_dma), under round robin and random wave
// interleavings; the output must match the reference and the DMA keep > 2 slots in flight.
TEST_CASE("mla e2e: the LDS-DMA prefix producer refills its ring across long prefix units") {
  struct DmaCase {
    rt::DType q, kv;
    int heads, page;
    std::vector<int> lens;
    int shared;
    int qseqlen = 1;
    bool lse = false;
  };
  const auto f8 = rt::DType::fp8, b16 = rt::DType::bf16;
  for (const DmaCase& c : {DmaCase{f8, f8, 12, 128, {2000, 2100, 2200, 900}, 1792}, DmaCase{f8, f8, 12, 1, {1900, 2000, 2100, 700}, 1700},
                           DmaCase{f8, f8, 16, 64, {1500, 1600}, 1408}, DmaCase{b16, b16, 16, 64, {900, 1000}, 768},
                           DmaCase{b16, b16, 8, 1, {800, 900}, 700}, DmaCase{f8, f8, 12, 16, {5000, 4900, 5100}, 4800},
                           DmaCase{b16, b16, 8, 8, {1200, 1300}, 1104}, DmaCase{f8, f8, 16, 64, {1400, 1500}, 1280, 2, true}})
    for (uint32_t seed : {0u, 7u})
    for (int rows : {0, 192}) {
      // 192: the wide kernel (its 4 consumer waves stream a ring of 5 sub-slots of 16 tokens).
      const bool wide = rows == 192;
      if (wide && !(c.q == f8 && c.kv == f8 && c.page >= 16)) continue;
      auto p = params(rt::Target::gfx950, c.q, c.kv, c.heads, c.qseqlen, c.page, c.lens, 40 + seed);
      p.return_lse = c.lse;
      p.shared = {{0, 3, c.shared}};
      if (c.lens.size() < 3) p.shared = {{0, 2, c.shared}};
      rt::EmulatorRunOptions opts;
      opts.cascade = rt::CascadePolicy::always;
      opts.num_cus = 2;
      opts.dispatch.random_seed = seed;
      auto e = test::run_e2e(p, opts, {}, rows);
      INFO(rt::shape_of(e.problem).describe() << ", wave seed " << seed << ", prefix rows " << rows);
      check(e);
      REQUIRE(e.result.ran_prefix);
      const rt::Catalog& cat = test::catalog_for(rt::shape_of(e.problem));
      rt::DecodeShape shape = rt::shape_of(e.problem);
      shape.prefix_rows = rows;
      const rt::Selection sel = cat.select(shape);
      REQUIRE(sel.prefix);
      const bool fp8 = c.q == f8;
      CHECK(sel.prefix->geometry.at("kv_to_lds") == "lds_dma");
      CHECK(sel.prefix->geometry.at("ring") == (wide ? 5 : fp8 ? 8 : 4));
      CHECK(sel.prefix->geometry.at("producers") == (wide ? 0 : fp8 ? 2 : 1));
      CHECK(sel.prefix->geometry.at("consumer_dma") == wide);
      CHECK(e.result.plan.prefix_rows_per_group == (wide ? 192 : fp8 ? 96 : 48));
      const int T = e.result.plan.tile_tokens;
      int most_tiles = 0;
      for (const auto& u : e.result.plan.prefix_units) most_tiles = std::max(most_tiles, (u.kv_end - u.kv_start) / T);
      // Every ring slot is refilled at least once (the wide kernel's ring is 2.5 tiles).
      CHECK(most_tiles >= (wide ? 8 : fp8 ? 16 : 8));
      // Bytes in flight per workgroup: fp8 more than 5 tiles (two producers), bf16 more than 2 (37
      // loads a slot, vmcnt holds 62); the wide kernel more than 4 of its 16-token sub-slots.
      const double slot = double(T) * sel.prefix->launch.lds_row_bytes;
      CHECK(double(e.result.prefix.total.vm_load_peak_wg_bytes) > (wide ? 2.0 : fp8 ? 5.0 : 2.0) * slot);
    }
}

// The gfx950 fp8 prefix kernel's speculative softmax (MlaDecodePlan::speculative_softmax): a
// full tile keeps P = exp2(x - m) computed with the running max when no lane's scores pass
// m + slack, else redoes the tile on the plain path. Peaked scores (as in the lazy-rescale case
// above) over long units (2 CUs) take both paths many times, and units whose last tile is
// partial the masked one; the output must match the reference, with lse, under both wave
// orders. (Checked by mutation: taking the speculative P when a lane passes, or checking only
// the first sub-tile's scores, fails here.)
// The same peaked scores run the wide kernel (prefix rows 192), whose softmax takes one
// out-of-line branch when some row's max moves and rescales O^T in AGPRs (row blocks 0, 1) and
// VGPRs (row block 2).
TEST_CASE("mla e2e: the prefix kernel's speculative softmax takes its plain path when a row's max moves") {
  for (uint32_t seed : {0u, 5u})
    for (double scale : {0.5, 0.12})
    for (int rows : {0, 192}) {
      auto p = params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 128, {2100, 1900, 2050, 777}, 60 + seed);
      p.sm_scale = scale;
      p.return_lse = true;
      p.shared = {{0, 3, 1792}};
      rt::EmulatorRunOptions opts;
      opts.cascade = rt::CascadePolicy::always;
      opts.num_cus = 2;
      opts.dispatch.random_seed = seed;
      auto e = test::run_e2e(p, opts, {}, rows);
      INFO("sm_scale " << scale << ", wave seed " << seed << ", prefix rows " << rows);
      check(e);
      CHECK(e.result.ran_prefix);
      CHECK(e.result.plan.prefix_rows_per_group == (rows ? 192 : 96));
    }
}

// Without sharing the prefix kernel never runs and the output is the per-request plan's, bit
// for bit, whether or not the catalog has a prefix kernel.
TEST_CASE("mla e2e: batches without sharing are bit-identical with and without the prefix kernel") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    auto prm = params(t, rt::DType::fp8, rt::DType::fp8, 12, 1, 64, {1300, 700, 2000}, 31);
    const rt::Problem prob = rt::make_random_problem(prm);
    const rt::Catalog& cat = test::catalog_for(rt::shape_of(prob));
    rt::Selection with = cat.select(rt::shape_of(prob)), without = with;
    REQUIRE(with.prefix);
    without.prefix.reset();
    auto a = rt::run_decode_on_emulator(prob, with), b = rt::run_decode_on_emulator(prob, without);
    CHECK_FALSE(a.ran_prefix);
    CHECK(a.plan.prefix_units.empty());
    CHECK(a.o == b.o);
    CHECK(std::memcmp(a.o.data(), b.o.data(), a.o.size() * 2) == 0);
  }
}

// fp8/fp8 accuracy at every head count (issue #15): d <= 2e-4 and max error <= 2.5% of max|ref|
// on N(0,1) inputs, for short requests that run as one work unit and long ones split over
// the GPU, three seeds each.
TEST_CASE("mla e2e: fp8/fp8 accuracy bound at every head count, single-unit and split requests") {
  double worst_d = 0, worst_err = 0;
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950})
    for (int heads : {1, 8, 12, 16, 24, 32, 64, 96, 128})
      for (uint64_t seed : {1, 2, 3}) {
        // Seeds 1-2: the GPU's CUs (every request split over many units); seed 3: 2 CUs (the
        // short requests one unit each, the long one in a few).
        auto p = params(t, rt::DType::fp8, rt::DType::fp8, heads, 1, 16, {40, 200, 3000}, 5000 + seed * 131 + uint64_t(heads));
        rt::EmulatorRunOptions opts;
        if (seed == 3) opts.num_cus = 2;
        auto e = test::run_e2e(p, opts);
        INFO(rt::shape_of(e.problem).describe() << " seed " << seed << ": " << e.cmp.summary());
        CHECK(e.cmp.clean());
        CHECK(e.cmp.d <= 2e-4);
        CHECK(e.cmp.max_abs_err <= 0.025 * e.cmp.max_abs_ref);
        worst_d = std::max(worst_d, e.cmp.d);
        worst_err = std::max(worst_err, e.cmp.max_abs_err / e.cmp.max_abs_ref);
      }
  WARN("fp8/fp8 worst d " << worst_d << ", worst max error " << 100 * worst_err << "% of max|ref|");
}

// What the lse output is for (decode context parallelism, vLLM's merge_attn_states): the
// (o, lse) of two halves of a request's KV, run as two problems, merge by lse into the whole's
// attention. With fp8 P the lse is the log of the sum of the rounded P that o is normalised by,
// so the merge weights match the normalisers exactly.
TEST_CASE("mla e2e: fp8 (o, lse) of two halves of the KV merge to the whole request") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    auto prm = params(t, rt::DType::fp8, rt::DType::fp8, 16, 1, 1, {2048}, 77);
    prm.return_lse = true;
    const rt::Problem whole = rt::make_random_problem(prm);
    auto half = [&](int from, int to) {  // page size 1: page i is token i
      rt::Problem h = whole;
      h.kv_indices.assign(whole.kv_indices.begin() + from, whole.kv_indices.begin() + to);
      h.kv_indptr = {0, to - from};
      rt::validate_problem(h, "half");
      return h;
    };
    const rt::Problem a = half(0, 1000), b = half(1000, 2048);
    const rt::Catalog& cat = test::catalog_for(rt::shape_of(whole));
    const auto ra = rt::run_decode_on_emulator(a, cat.select(rt::shape_of(a)), {});
    const auto rb = rt::run_decode_on_emulator(b, cat.select(rt::shape_of(b)), {});
    const ref::Reference want = ref::run_reference(whole);
    auto bf = [](uint16_t x) {
      const uint32_t u = uint32_t(x) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return double(f);
    };
    double sxy = 0, sxx = 0, max_err = 0, max_ref = 0;
    for (int h = 0; h < 16; ++h) {
      const double la = ra.lse[size_t(h)], lb = rb.lse[size_t(h)], m = std::max(la, lb);
      const double wa = std::exp(la - m), wb = std::exp(lb - m);
      for (int d = 0; d < 512; ++d) {
        const size_t i = size_t(h) * 512 + size_t(d);
        const double x = (wa * bf(ra.o[i]) + wb * bf(rb.o[i])) / (wa + wb), y = want.o_at(0, h, d);
        sxy += x * y, sxx += x * x + y * y;
        max_err = std::max(max_err, std::abs(x - y)), max_ref = std::max(max_ref, std::abs(y));
      }
    }
    const double dd = 1 - 2 * sxy / sxx;
    INFO(rt::name(t) << ": merged d = " << dd << ", max error " << 100 * max_err / max_ref << "% of max|ref|");
    CHECK(dd <= 2e-4);
    CHECK(max_err <= 0.025 * max_ref);
  }
}

// In-launch merge (docs/mla-decode.md): the split that arrives last at a row block's counter merges
// the block, in the decode launch; no reduce launch runs. The merge is the reduce kernel's
// arithmetic in the same order, so the output equals the two-launch plan's bit for bit. Under
// random workgroup orders any split can be last, and the emulator's memory-model rule (on by
// default) flags a partial read across XCDs without the writer's release and the reader's
// acquire. Kernel forms: two row blocks (qseqlen 2), four splits with a one-slot ring, 12 heads
// in one block with lse, and a request of more than 16 splits with lse (two of the reduce's
// ranges: summing them as one range changes the lse bits, and this test fails); the persistent
// walk (3 workgroups) and one workgroup per unit. (Empty
// requests, which problem files cannot hold: tests/runtime, "MLA_OPTION_MERGE".)
TEST_CASE("mla e2e: the merge in the decode launch, under random workgroup orders and XCDs") {
  std::vector<rt::ProblemParams> runs = {params(rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 2, 16, {77, 130, 40}, 31),
                                         params(rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1, 16, {300, 45}, 32),
                                         params(rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 1, 1, {300, 45, 129}, 33),
                                         params(rt::Target::gfx942, rt::DType::fp8, rt::DType::fp8, 16, 1, 16, {1200, 90}, 34)};
  runs[2].return_lse = runs[3].return_lse = true;
  for (size_t r = 0; r < runs.size(); ++r) {
    const rt::ProblemParams& p = runs[r];
    rt::EmulatorRunOptions two;
    // Several splits per request; the last run over 40 CUs: more than 16 splits, more than one
    // of the reduce's ranges (reduce_range_splits), whose sums both merges add in range order.
    two.num_cus = r == 3 ? 40 : 8;
    two.cascade = rt::CascadePolicy::never;
    auto a = test::run_e2e(p, two);
    check(a);
    REQUIRE(a.result.ran_reduce);
    if (r == 3) REQUIRE(a.result.plan.splits[0] > 16);
    for (int grid : {0, 3})
      for (uint64_t order : {1u, 2u, 5u}) {
        rt::EmulatorRunOptions one = two;
        one.merge_in_launch = true;
        one.persistent_grid = grid;
        one.dispatch.workgroup_order_seed = order;
        one.dispatch.random_seed = uint32_t(order);
        auto b = test::run_e2e(p, one);
        INFO(rt::shape_of(b.problem).describe() << ", grid " << grid << ", workgroup order " << order << ": "
                                                << b.cmp.summary());
        CHECK(b.result.plan.merge_in_launch);
        CHECK_FALSE(b.result.ran_reduce);
        CHECK(b.result.reduce.workgroups == 0);
        CHECK(b.cmp.clean());
        CHECK(a.result.o == b.result.o);
        CHECK(a.result.lse == b.result.lse);
      }
  }
}
