// The DSA indexer's logits kernels end to end: config -> catalog -> C API (mla_indexer_logits) ->
// the emulator under its strict checks, against the fp64 reference (tests/reference).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "catalog/catalog.h"
#include "mla_harness.h"
#include "config/config.h"
#include "reference/dsa_indexer_reference.h"
#include "runtime/dsa_indexer.h"
#include "runtime/mla_runtime.h"

using namespace mla;

namespace {

#define OK(call) REQUIRE((call) == MLA_SUCCESS)

struct Shape {
  int heads, next_n, block_size;
  bool operator<(const Shape& o) const {
    return std::tie(heads, next_n, block_size) < std::tie(o.heads, o.next_n, o.block_size);
  }
};

// One catalog per target with every shape the tests use, built once per process.
const std::string& catalog_dir(rt::Target t) {
  static std::map<rt::Target, std::string> dirs;
  if (auto it = dirs.find(t); it != dirs.end()) return it->second;
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("mla-indexer-{}-{}", getpid(), rt::name(t))).string();
  std::filesystem::remove_all(dir);
  const std::string cfg = fmt::format(
      R"({{"deployment": "indexer e2e", "kernels": [
        {{"kind": "dsa_indexer_logits", "target": "{0}", "heads": [64, 32], "next_n": [1, 2, 4], "block_size": [1, 64]}},
        {{"kind": "dsa_indexer_logits", "target": "{0}", "heads": 12, "next_n": 3, "block_size": 16}},
        {{"kind": "dsa_indexer_logits", "target": "{0}", "heads": 5, "next_n": 1, "block_size": 2}}]}})",
      rt::name(t));
  gen::BuildOptions opts;
  opts.out_dir = dir;
  opts.jobs = 2;
  gen::build_catalog({gen::parse_config(cfg, "indexer-e2e.json")}, opts);
  return dirs.emplace(t, dir).first->second;
}

struct Session {
  mla_device* dev = nullptr;
  mla_context* ctx = nullptr;
  explicit Session(rt::Target t) {
    OK(mla_device_open(MLA_BACKEND_EMULATOR, 0, std::string(rt::name(t)).c_str(), &dev));
    OK(mla_context_create(dev, catalog_dir(t).c_str(), &ctx));
  }
  ~Session() {
    mla_context_destroy(ctx);
    mla_device_close(dev);
  }
  template <class T>
  uint64_t upload(const std::vector<T>& v) {
    uint64_t p = 0;
    OK(mla_malloc(dev, std::max<size_t>(1, v.size()) * sizeof(T), &p));
    if (!v.empty()) OK(mla_memcpy_h2d(dev, p, v.data(), v.size() * sizeof(T)));
    return p;
  }
};

constexpr uint32_t kPoison = 0x7fc0dead;  // a NaN no kernel computes

// A call that must fail with `what` in mla_last_error().
void refused(mla_status status, const char* what) {
  REQUIRE(status != MLA_SUCCESS);
  CHECK_THAT(std::string(mla_last_error()), Catch::Contains(what));
}

struct Run {
  std::vector<float> logits;  // [batch * next_n][stride]
  int64_t stride = 0;
};

// block_base > 0: the cache is placed block_base blocks into a larger device cache (block ids
// shifted by it), so block offsets pass 2^31 bytes.
Run run_logits(Session& s, const ref::IndexerProblem& p, int64_t extra_stride = 3, int64_t block_base = 0) {
  Run r;
  r.stride = p.max_context_len + extra_stride;
  const size_t n = size_t(p.batch) * size_t(p.next_n) * size_t(r.stride);
  std::vector<uint32_t> poison(n, kPoison);
  mla_indexer_logits_args a{};
  a.logits = s.upload(poison);
  a.q = s.upload(p.q);
  if (block_base == 0) {
    a.kv_cache = s.upload(p.kv_cache);
  } else {
    const size_t block_bytes = size_t(p.block_size) * ref::kIndexerTokenBytes;
    OK(mla_malloc(s.dev, (size_t(block_base) + size_t(p.num_blocks)) * block_bytes, &a.kv_cache));
    OK(mla_memcpy_h2d(s.dev, a.kv_cache + uint64_t(block_base) * block_bytes, p.kv_cache.data(), p.kv_cache.size()));
  }
  a.weights = s.upload(p.weights);
  a.context_lens = s.upload(p.context_lens);
  std::vector<int32_t> table = p.block_table;
  for (int32_t& x : table)
    if (x >= 0) x += int32_t(block_base);
  a.block_table = s.upload(table);
  a.batch = p.batch;
  a.next_n = p.next_n;
  a.heads = p.heads;
  a.block_size = p.block_size;
  a.block_table_stride = p.block_table_stride;
  a.max_context_len = p.max_context_len;
  a.logits_stride = r.stride;
  a.num_blocks = p.num_blocks + block_base;
  OK(mla_indexer_logits(s.ctx, &a, nullptr));
  OK(mla_stream_synchronize(s.dev, nullptr));
  r.logits.resize(n);
  OK(mla_memcpy_d2h(s.dev, r.logits.data(), a.logits, n * sizeof(float)));
  return r;
}

// Every logit before a row's end within 1e-5 of max|ref| of its row (the issue's bound); every
// position past it untouched.
void check_logits(const ref::IndexerProblem& p, const Run& r, const std::set<std::pair<int, int>>& minus_inf = {}) {
  const std::vector<double> want = ref::indexer_logits_reference(p);
  for (int row = 0; row < p.batch * p.next_n; ++row) {
    const int b = row / p.next_n, len = std::min(p.context_lens[size_t(b)], p.max_context_len);
    double amax = 0;
    for (int t = 0; t < len; ++t)
      if (!minus_inf.count({b, t})) amax = std::max(amax, std::fabs(want[size_t(row) * p.max_context_len + t]));
    for (int t = 0; t < r.stride; ++t) {
      const float got = r.logits[size_t(row) * size_t(r.stride) + size_t(t)];
      INFO(fmt::format("row {} (request {}, query {}) token {} of {}", row, b, row % p.next_n, t, len));
      if (t >= len) {
        uint32_t bits;
        std::memcpy(&bits, &got, 4);
        REQUIRE(bits == kPoison);
      } else if (minus_inf.count({b, t})) {
        REQUIRE((std::isinf(got) && got < 0));
      } else {
        const double w = want[size_t(row) * p.max_context_len + t];
        REQUIRE(std::fabs(double(got) - w) <= 1e-5 * amax + 1e-30);
      }
    }
  }
}

struct Case {
  int heads, next_n, block_size;
  std::vector<int> lens;
  int num_cus;  // MLA_OPTION_NUM_CUS: few CUs give chunks of many tiles, 0 (304 / 256) one tile each
};
// Heads 64 / 32 (DeepSeek-V3.2, GLM-5) at block sizes 64 and 1, MTP rows 1-4; a head count that
// is no multiple of 4 or 8 (padding rows and weights); lengths at tile, block and chunk edges
// (chunks of one tile up to whole requests, ending mid-chunk), 1 token, and an empty request.
const Case kCases[] = {
    {64, 1, 64, {1500, 37, 64, 0}, 1}, {64, 2, 1, {200, 33, 1}, 0}, {32, 4, 64, {129, 96}, 2},
    {32, 1, 1, {513, 31}, 3},          {12, 3, 16, {100, 17}, 1},  {5, 1, 2, {65, 2, 40}, 0},
    {64, 4, 1, {70}, 1},               {32, 2, 64, {640, 32}, 5},
};

void run_case(rt::Target t, int i) {
  const Case& c = kCases[i];
  ref::IndexerParams pp;
  pp.target = t;
  pp.batch = int(c.lens.size());
  pp.next_n = c.next_n;
  pp.heads = c.heads;
  pp.block_size = c.block_size;
  pp.context_lens = c.lens;
  pp.seed = 4400 + uint64_t(i) * 7 + (t == rt::Target::gfx950 ? 1 : 0);
  const ref::IndexerProblem p = ref::make_indexer_problem(pp);
  Session s(t);
  OK(mla_context_set_option(s.ctx, MLA_OPTION_NUM_CUS, c.num_cus));
  check_logits(p, run_logits(s, p));
}

}  // namespace

#define INDEXER_CASE(i)                                                                      \
  TEST_CASE("indexer logits e2e " #i " gfx942") { run_case(rt::Target::gfx942, i); } \
  TEST_CASE("indexer logits e2e " #i " gfx950") { run_case(rt::Target::gfx950, i); }
INDEXER_CASE(0)
INDEXER_CASE(1)
INDEXER_CASE(2)
INDEXER_CASE(3)
INDEXER_CASE(4)
INDEXER_CASE(5)
INDEXER_CASE(6)
INDEXER_CASE(7)

TEST_CASE("indexer logits: a block id outside the cache is never read and scores -inf, lengths past max_context_len "
          "are cut there") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    INFO(rt::name(t));
    ref::IndexerParams pp;
    pp.target = t;
    pp.batch = 2;
    pp.heads = 32;
    pp.next_n = 2;
    pp.block_size = 1;
    pp.context_lens = {90, 50};
    pp.seed = 77;
    ref::IndexerProblem p = ref::make_indexer_problem(pp);
    std::set<std::pair<int, int>> bad;
    for (int tok : {0, 31, 32, 89}) {  // request 0: first and last of tiles, the very last token
      p.block_table[size_t(tok)] = tok == 31 ? -7 : int32_t(p.num_blocks + tok);
      bad.insert({0, tok});
    }
    // The reference refuses unreadable blocks: give it a copy with readable ones at the bad
    // positions (their logits are not compared).
    ref::IndexerProblem readable = p;
    for (auto [b, tok] : bad) readable.block_table[size_t(b * p.block_table_stride + tok)] = 0;
    Session s(t);
    Run r = run_logits(s, p);
    check_logits(readable, r, bad);
    // max_context_len below a request's length: nothing is written past it.
    p.context_lens[1] = 50;
    readable.max_context_len = p.max_context_len = 60;
    p.context_lens[0] = 90;  // longer than max_context_len: cut at 60 (the reference's length)
    readable.context_lens[0] = 60;
    Run cut = run_logits(s, p);
    check_logits(readable, cut, bad);
  }
}

TEST_CASE("indexer logits: a cache past 2^31 bytes (block offsets beyond 32-bit arithmetic)") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    INFO(rt::name(t));
    {
      const int block = 64;  // every block size takes the same 64-bit address path
      ref::IndexerParams pp;
      pp.target = t;
      pp.batch = 2;
      pp.next_n = 2;
      pp.heads = 32;
      pp.block_size = block;
      pp.context_lens = {300, 45};
      pp.seed = 91 + uint64_t(block);
      const ref::IndexerProblem p = ref::make_indexer_problem(pp);
      // 260,000 blocks of 8,448 bytes: every block read lies past 2^31 bytes (2.2e9) of the cache.
      const int64_t base = 260000;
      Session s(t);
      check_logits(p, run_logits(s, p, 3, base));
    }
  }
}

TEST_CASE("indexer logits: bad arguments are refused with the field named, before any launch") {
  Session s(rt::Target::gfx942);
  mla_indexer_logits_args a{};
  auto fails = [&](const char* what) { refused(mla_indexer_logits(s.ctx, &a, nullptr), what); };
  fails("args.logits is a null device pointer");
  uint64_t buf = 0;
  OK(mla_malloc(s.dev, 4096, &buf));
  a.logits = a.q = a.kv_cache = a.weights = a.context_lens = a.block_table = buf;
  a.batch = 1, a.next_n = 1, a.heads = 64, a.block_size = 64, a.max_context_len = 64, a.block_table_stride = 1;
  a.logits_stride = 64, a.num_blocks = 1;
  a.next_n = 5;
  fails("args.next_n = 5 (allowed: 1..4)");
  a.next_n = 1;
  a.block_size = 48;
  fails("args.block_size = 48");
  a.block_size = 64;
  a.logits_stride = 63;
  fails("args.logits_stride = 63");
  a.logits_stride = 64;
  a.block_table_stride = 0;
  fails("args.block_table_stride = 0 < ceil(max_context_len / block_size) = 1");
  a.block_table_stride = (1 << 28) + 1;
  fails("args.block_table_stride = 268435457 (allowed: at most 2^28");
  a.block_table_stride = 1;
  a.heads = 48;
  fails("no dsa_indexer_logits_fp8_h48_nn1_pg64 kernel");
}

TEST_CASE("indexer chunk size: one round over the device, a whole number of tiles") {
  CHECK(rt::indexer_chunk_tokens(1, 8192, 304, 2) == 32);           // 256 tiles over 608 slots: one each
  CHECK(rt::indexer_chunk_tokens(1, 100, 1, 1) == 128);             // never past the longest row's tiles
  CHECK(rt::indexer_chunk_tokens(64, 131072, 304, 2) == 13824);     // 64 x 4096 tiles over 608 slots: 432 each
  CHECK(rt::indexer_chunk_tokens(16, 131072, 256, 1) == 8192);
}

namespace {

// Top-k of random logit rows through mla_indexer_topk: lengths from the causal ends of next_n
// rows, logits drawn from `levels` distinct values (few levels: many ties at the k-th value) or
// continuous, -inf among them, poison past each row's end (never read).
struct TopkRun {
  std::vector<float> logits;
  std::vector<int32_t> seq_lens, indices;
  int rows = 0, next_n = 1, topk = 0;
  int64_t stride = 0, out_stride = 0;
  std::vector<std::map<int32_t, int32_t>> position_of;  // per request: cache slot -> position (slot mode)
  bool two_stage = false;  // the runtime split the rows into segments (a workspace was asked)
};

// page > 0: the rows hold cache slots through a random block table of that page size.
TopkRun run_topk(Session& s, std::vector<int32_t> seq_lens, int next_n, int topk, int levels, uint64_t seed,
                 int page = 0) {
  TopkRun r;
  r.seq_lens = std::move(seq_lens);
  r.next_n = next_n;
  r.topk = topk;
  r.rows = int(r.seq_lens.size()) * next_n;
  int maxlen = 1;
  for (int l : r.seq_lens) maxlen = std::max(maxlen, l);
  r.stride = (maxlen + 5 + 3) / 4 * 4;  // a multiple of 4 (the kernel reads 4 logits at a time), with slack
  r.out_stride = topk + 3;
  std::mt19937_64 rng(seed);
  r.logits.assign(size_t(r.rows) * size_t(r.stride), std::numeric_limits<float>::quiet_NaN());
  for (int row = 0; row < r.rows; ++row) {
    const int end = ref::indexer_row_end(r.seq_lens[size_t(row / next_n)], next_n, row % next_n);
    for (int t = 0; t < end; ++t) {
      const uint64_t x = rng();
      float v = levels > 0 ? float(int(x % uint64_t(levels)) - levels / 2) * 0.25f
                           : float(int64_t(x >> 11) % 2000001 - 1000000) * 1e-3f;
      if (x % 97 == 0) v = -std::numeric_limits<float>::infinity();
      r.logits[size_t(row) * size_t(r.stride) + size_t(t)] = v;
    }
  }
  std::vector<int32_t> poison(size_t(r.rows) * size_t(r.out_stride), 0x5a5a5a5a);
  mla_indexer_topk_args a{};
  a.logits = s.upload(r.logits);
  a.seq_lens = s.upload(r.seq_lens);
  a.indices = s.upload(poison);
  a.num_rows = r.rows;
  a.next_n = next_n;
  a.topk = topk;
  a.logits_stride = r.stride;
  a.indices_stride = r.out_stride;
  if (page > 0) {
    // Distinct random blocks for every request's pages; -1 past a request's pages.
    const int per_req = int((r.stride + page - 1) / page);
    std::vector<int32_t> ids(size_t(r.seq_lens.size()) * size_t(per_req));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i) + 5;
    std::shuffle(ids.begin(), ids.end(), rng);
    r.position_of.resize(r.seq_lens.size());
    for (size_t b = 0; b < r.seq_lens.size(); ++b)
      for (int t = 0; t < r.seq_lens[b]; ++t)
        r.position_of[b][ids[b * size_t(per_req) + size_t(t / page)] * page + t % page] = t;
    a.block_table = s.upload(ids);
    a.block_table_stride = per_req;
    a.page_size = page;
  }
  uint64_t ws = 0;
  OK(mla_indexer_topk_workspace_size(s.ctx, &a, &ws));
  if (ws) {
    OK(mla_malloc(s.dev, ws, &a.workspace));
    a.workspace_bytes = ws;
  }
  r.two_stage = ws > 0;
  const mla_status st = mla_indexer_topk(s.ctx, &a, nullptr);
  INFO(mla_last_error());
  REQUIRE(st == MLA_SUCCESS);
  OK(mla_stream_synchronize(s.dev, nullptr));
  r.indices.resize(poison.size());
  OK(mla_memcpy_d2h(s.dev, r.indices.data(), a.indices, poison.size() * 4));
  return r;
}

// Every row: the reference's set exactly (ties at the k-th value resolved to the lowest
// positions, as the kernel documents), checked by the tolerant checker too; positions past topk
// untouched.
void check_topk(const TopkRun& r) {
  for (int row = 0; row < r.rows; ++row) {
    const int end = ref::indexer_row_end(r.seq_lens[size_t(row / r.next_n)], r.next_n, row % r.next_n);
    std::vector<double> logits(static_cast<size_t>(end));
    for (int t = 0; t < end; ++t) logits[size_t(t)] = r.logits[size_t(row) * size_t(r.stride) + size_t(t)];
    std::vector<int32_t> got(r.indices.begin() + row * r.out_stride, r.indices.begin() + row * r.out_stride + r.topk);
    INFO(fmt::format("row {} of {}, length {}, topk {}", row, r.rows, end, r.topk));
    if (!r.position_of.empty())  // slots back to positions: a slot of no token of the request fails
      for (int32_t& x : got)
        if (x != -1) {
          const auto& m = r.position_of[size_t(row / r.next_n)];
          auto it = m.find(x);
          REQUIRE(it != m.end());
          x = it->second;
        }
    REQUIRE(ref::check_topk_row(got, logits, end, r.topk, 0.0) == "");
    std::vector<int32_t> want = ref::topk_reference(logits, end, r.topk);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    REQUIRE(got == want);
    for (int64_t c = r.topk; c < r.out_stride; ++c) REQUIRE(r.indices[size_t(row * r.out_stride + c)] == 0x5a5a5a5a);
  }
}

}  // namespace

TEST_CASE("indexer top-k: the k largest per row, ties to the lowest positions, short rows padded with -1") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    INFO(rt::name(t));
    Session s(t);
    // Rows shorter than, equal to and one past k; long rows over the four waves' quarters;
    // next_n 2 causal ends; continuous values, heavy ties (4 and 40 levels), -inf.
    check_topk(run_topk(s, {100, 2048, 2049, 5000, 0, 1}, 1, 2048, 0, 1));
    check_topk(run_topk(s, {300, 257, 64, 1000}, 2, 64, 4, 2));
    check_topk(run_topk(s, {3000, 700}, 2, 256, 40, 3));
    check_topk(run_topk(s, {1500}, 4, 1, 0, 4));
    // Cache slots through a block table, at page sizes 64 and 1, short and long rows (rows past
    // 16K positions run in two launches: stage 2 looks the positions up, then their slots).
    check_topk(run_topk(s, {3000, 100, 2049}, 1, 2048, 0, 5, 64));
    check_topk(run_topk(s, {700, 40}, 2, 64, 6, 6, 1));
    const TopkRun slots = run_topk(s, {20000, 300}, 1, 256, 0, 11, 64);
    CHECK(slots.two_stage);
    check_topk(slots);
  }
}

TEST_CASE("indexer top-k: the same input gives the same rows, in the same order, in one launch or two") {
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    Session s(t);
    TopkRun a = run_topk(s, {20000, 900, 20000}, 1, 512, 8, 9);
    TopkRun b = run_topk(s, {20000, 900, 20000}, 1, 512, 8, 9);
    CHECK(a.two_stage);  // 3 rows of 20008 positions at topk 512: segments held in registers
    CHECK(a.indices == b.indices);
    check_topk(a);
    // One CU to plan for (more than four rounds of segments): one launch, one workgroup per row
    // (streamed); the same rows, in the same order.
    OK(mla_context_set_option(s.ctx, MLA_OPTION_NUM_CUS, 1));
    TopkRun c = run_topk(s, {20000, 900, 20000}, 1, 512, 8, 9);
    CHECK_FALSE(c.two_stage);
    CHECK(a.indices == c.indices);
    // Rows past kTopkResidentKeys (16K) logits are streamed five times, shorter ones (and here
    // every segment and candidate row) held in registers: the same rows either way, heavy ties.
    OK(mla_context_set_option(s.ctx, MLA_OPTION_NUM_CUS, 0));
    TopkRun d = run_topk(s, {40000, 16385, 16384}, 1, 2048, 40, 10);
    CHECK(d.two_stage);
    check_topk(d);
    OK(mla_context_set_option(s.ctx, MLA_OPTION_NUM_CUS, 1));
    TopkRun e = run_topk(s, {40000, 16385, 16384}, 1, 2048, 40, 10);
    CHECK_FALSE(e.two_stage);
    check_topk(e);
    CHECK(d.indices == e.indices);
    // Two launches need their workspace: refused without it.
    mla_indexer_topk_args x{};
    OK(mla_context_set_option(s.ctx, MLA_OPTION_NUM_CUS, 0));
    uint64_t buf = 0;
    OK(mla_malloc(s.dev, 1 << 16, &buf));
    x.logits = x.seq_lens = x.indices = buf;
    x.num_rows = 2, x.next_n = 1, x.topk = 512, x.logits_stride = 20008, x.indices_stride = 512;
    REQUIRE(mla_indexer_topk(s.ctx, &x, nullptr) == MLA_ERROR_CAPACITY);
    CHECK_THAT(std::string(mla_last_error()), Catch::Contains("mla_indexer_topk_workspace_size"));
  }
}

TEST_CASE("indexer top-k: bad arguments are refused with the field named") {
  Session s(rt::Target::gfx942);
  mla_indexer_topk_args a{};
  auto fails = [&](const char* what) { refused(mla_indexer_topk(s.ctx, &a, nullptr), what); };
  fails("args.logits is a null device pointer");
  uint64_t buf = 0;
  OK(mla_malloc(s.dev, 4096, &buf));
  a.logits = a.seq_lens = a.indices = buf;
  a.num_rows = 3, a.next_n = 2, a.topk = 16, a.logits_stride = 100, a.indices_stride = 16;
  fails("args.num_rows = 3 (allowed: 1..2^24, a multiple of next_n = 2)");
  a.num_rows = 4;
  a.indices_stride = 15;
  fails("args.indices_stride = 15");
  a.indices_stride = 16;
  a.logits_stride = 102;
  fails("args.logits_stride = 102 (allowed: a multiple of 4");
  a.logits_stride = 100;
  a.next_n = 9;
  fails("args.next_n = 9");
}

// The whole DSA decode step: the indexer's logits, its top-2048 written as cache slots through
// the block table, and sparse MLA (FlashMLA's fp8_ds_mla cache, 16 heads) over those slots. The
// slots equal the fp64 reference's selection row by row (continuous scores: no tie within the
// logits' error), so the attention's fp64 reference over them is the reference of the step.
TEST_CASE("DSA step: indexer rows feed sparse MLA and match the fp64 reference of the whole step") {
  constexpr int kTopk = 2048;
  for (rt::Target t : {rt::Target::gfx942, rt::Target::gfx950}) {
    INFO(rt::name(t));
    ref::IndexerParams ip;
    ip.target = t;
    ip.batch = 2;
    ip.next_n = 2;
    ip.heads = 32;
    ip.block_size = 64;
    ip.context_lens = {2600, 1500};  // one row set longer than the top-k, one shorter (-1 padded)
    ip.seed = t == rt::Target::gfx942 ? 61 : 62;
    const ref::IndexerProblem p = ref::make_indexer_problem(ip);
    Session s(t);
    const Run logits = run_logits(s, p, 0);
    mla_indexer_topk_args a{};
    std::vector<int32_t> poison(size_t(p.batch * p.next_n) * kTopk, 0x5a5a5a5a);
    a.logits = s.upload(logits.logits);
    a.seq_lens = s.upload(p.context_lens);
    a.indices = s.upload(poison);
    a.block_table = s.upload(p.block_table);
    a.num_rows = p.batch * p.next_n;
    a.next_n = p.next_n;
    a.topk = kTopk;
    a.block_table_stride = p.block_table_stride;
    a.page_size = p.block_size;
    a.logits_stride = logits.stride;
    a.indices_stride = kTopk;
    OK(mla_indexer_topk(s.ctx, &a, nullptr));
    OK(mla_stream_synchronize(s.dev, nullptr));
    std::vector<int32_t> slots(poison.size());
    OK(mla_memcpy_d2h(s.dev, slots.data(), a.indices, slots.size() * 4));

    const std::vector<double> want = ref::indexer_logits_reference(p);
    for (int row = 0; row < a.num_rows; ++row) {
      const int b = row / p.next_n, end = ref::indexer_row_end(p.context_lens[size_t(b)], p.next_n, row % p.next_n);
      std::span<const double> w(want.data() + size_t(row) * size_t(p.max_context_len), size_t(end));
      std::vector<int32_t> ref_slots = ref::topk_reference(w, end, kTopk);
      for (int32_t& x : ref_slots)
        if (x >= 0) x = p.block_table[size_t(b * p.block_table_stride + x / p.block_size)] * p.block_size + x % p.block_size;
      std::vector<int32_t> got(slots.begin() + row * kTopk, slots.begin() + (row + 1) * kTopk);
      std::sort(got.begin(), got.end());
      std::sort(ref_slots.begin(), ref_slots.end());
      INFO("row " << row << ", length " << end);
      REQUIRE(got == ref_slots);
    }

    rt::ProblemParams mp;
    mp.target = t;
    mp.heads = 16;
    mp.q_dtype = rt::DType::bf16;
    mp.kv_dtype = rt::DType::fp8;
    mp.kv_ds_mla = true;
    mp.sparse = true;
    mp.kv_lens = std::vector<int>(size_t(a.num_rows), kTopk);
    mp.sparse_pool = int(p.num_blocks) * p.block_size;  // the MLA cache: the same blocks, 64 slots each
    mp.return_lse = true;
    mp.seed = ip.seed;
    test::check_accuracy(test::run_e2e(mp, {}, [&](rt::Problem& prob) { prob.kv_indices = slots; }));
  }
}
