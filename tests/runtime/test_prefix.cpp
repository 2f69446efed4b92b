// Shared-prefix groups: detection from the page table, caller-given groups, the cost model.
#include <catch2/catch.hpp>

#include <climits>

#include "runtime/planner.h"
#include "runtime/prefix.h"
#include "runtime/problem.h"

using namespace mla;
using Catch::Contains;

namespace {

// A packed page table: request b's page i is table[b][i].
struct Table {
  std::vector<std::vector<int32_t>> pages;
  rt::PageIdOf id() const {
    return [this](int b, int i) { return pages[size_t(b)][size_t(i)]; };
  }
};

}  // namespace

TEST_CASE("prefix groups: consecutive requests with the same leading whole pages", "[prefix]") {
  // page_size 4, tile 4: requests 0-2 share pages {7, 8} (8 tokens); 1 and 2 also share 9;
  // request 3 is alone; 4-5 share page 3 only.
  Table t{{{7, 8, 1}, {7, 8, 9, 2}, {7, 8, 9, 4}, {5, 6}, {3, 10}, {3, 11, 12}}};
  const std::vector<int> lens{12, 16, 15, 8, 8, 9};
  auto g = rt::detect_prefix_groups(lens, 4, 1, 4, t.id());
  REQUIRE(g.size() == 2);
  CHECK(g[0] == rt::PrefixGroup{0, 3, 8});  // the smallest adjacent common prefix: 2 pages
  CHECK(g[1] == rt::PrefixGroup{4, 2, 4});
}

TEST_CASE("prefix groups: a partially held page is not shared / the tile, and the causal limit, cut", "[prefix]") {
  // page_size 16, tile 32. Requests 0 and 1 point at the same 3 pages, but request 1 holds only
  // 40 tokens: its third page is partial, so 2 whole pages (32 tokens) are shared.
  Table t{{{1, 2, 3, 4}, {1, 2, 3}}};
  CHECK(rt::detect_prefix_groups(std::vector<int>{64, 40}, 16, 1, 32, t.id()) == std::vector<rt::PrefixGroup>{{0, 2, 32}});
  // Three whole pages (48 tokens) shared, cut to one 32-token tile.
  CHECK(rt::detect_prefix_groups(std::vector<int>{64, 48}, 16, 1, 32, t.id()) == std::vector<rt::PrefixGroup>{{0, 2, 32}});
  // qseqlen 4 at 34 tokens: every row sees tokens < 34 - 4 + 1 = 31 only: less than a tile.
  Table u{{{1, 2, 3}, {1, 2, 3}}};
  CHECK(rt::detect_prefix_groups(std::vector<int>{48, 34}, 16, 4, 16, u.id()) == std::vector<rt::PrefixGroup>{{0, 2, 16}});
  CHECK(rt::detect_prefix_groups(std::vector<int>{48, 34}, 16, 4, 32, u.id()).empty());
  // Different first pages: no group.
  Table v{{{1, 2}, {2, 1}}};
  CHECK(rt::detect_prefix_groups(std::vector<int>{32, 32}, 16, 1, 16, v.id()).empty());
}

TEST_CASE("prefix groups: a generated problem's shared pages are found", "[prefix]") {
  rt::ProblemParams prm;
  prm.target = rt::Target::gfx950;
  prm.heads = 12;
  prm.page_size = 64;
  prm.kv_lens = {700, 1000, 900, 500, 640, 800, 333};
  prm.shared = {{0, 3, 640}, {4, 2, 576}};  // two groups; request 3 and 6 alone
  prm.extra_pages = 2;
  const rt::Problem p = rt::make_random_problem(prm);
  auto id = [&](int b, int i) { return p.kv_indices[size_t(p.kv_indptr[b] + i)]; };
  CHECK(rt::detect_prefix_groups(rt::kv_lens_of(p), 64, 1, 32, id) ==
        std::vector<rt::PrefixGroup>{{0, 3, 640}, {4, 2, 576}});
}

TEST_CASE("prefix groups: caller-given groups are checked against the batch", "[prefix]") {
  const std::vector<int> lens{100, 200, 300, 64};
  CHECK_NOTHROW(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{0, 3, 96}}, lens, 16, 1));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{2, 3, 32}}, lens, 16, 1), Contains("count = 3 (allowed: 2..batch - first = 2)"));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{0, 1, 32}}, lens, 16, 1), Contains("count = 1"));
  // Fuzzing found it (issue #15): first + count overflowed int (the fuzzer's first 2, count
  // INT32_MAX, through mla_plan_update_shared); now an error naming the count.
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{2, INT32_MAX, 32}}, lens, 16, 1),
                    Contains("count = 2147483647 (allowed: 2..batch - first = 2)"));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{3, INT32_MAX - 2, 16}}, lens, 16, 1), Contains("count = 2147483645"));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{0, 2, 40}}, lens, 16, 1), Contains("multiple of page_size = 16"));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{0, 2, 32}, {1, 2, 32}}, lens, 16, 1), Contains("overlaps the previous group"));
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{2, 2, 64}}, lens, 16, 2),
                    Contains("shared_tokens = 64 > kv_lens[3] - qseqlen + 1 = 63"));
  // The planner checks them up front.
  rt::PlanInputs in;
  in.kv_lens = lens;
  in.page_size = 16;
  in.prefix_groups = {{3, 2, 32}};
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("plan_decode: prefix group 0") && Contains("count = 2"));
}

TEST_CASE("prefix groups: the cost model keeps short prefixes and small groups per request", "[prefix]") {
  rt::CascadeInputs ci{.heads = 12, .qseqlen = 1, .kv_bytes_per_token = 576, .num_cus = 256};
  auto d = rt::decide_cascade({0, 16, 128}, ci);
  CHECK_FALSE(d.cascade);
  CHECK_THAT(d.reason, Contains("128 shared tokens (fewer than 256)"));
  // K3 c16: 63,911 shared tokens (whole 128-token pages: 63,872) for 16 requests.
  d = rt::decide_cascade({0, 16, 63872}, ci);
  CHECK_FALSE(d.cascade);  // no prefix kernel in this catalog
  CHECK_THAT(d.reason, Contains("no prefix kernel"));
  CHECK(d.kv_bytes_saved == 0);
  ci.prefix_units_available = true;
  d = rt::decide_cascade({0, 16, 63872}, ci);
  CHECK(d.cascade);
  // 12 rows per member in one 16-row group: 16 reads of the prefix, against 192 / 48 = 4.
  CHECK(d.row_groups == 1);
  CHECK(d.prefix_row_groups == 4);
  CHECK(d.kv_bytes_saved == int64_t(16 - 4) * 63872 * 576);
  // 128 heads in 48-row groups: 3 row groups per member, 256 / 48 -> 6 for two: saves nothing.
  rt::CascadeInputs wide{.heads = 128, .qseqlen = 1, .kv_bytes_per_token = 576, .num_cus = 256,
                         .rows_per_group = 48, .prefix_rows_per_group = 48, .prefix_units_available = true};
  d = rt::decide_cascade({0, 2, 512}, wide);
  CHECK_FALSE(d.cascade);
  CHECK(d.kv_bytes_saved == 0);
  CHECK_THAT(d.reason, Contains("saves nothing"));
  // Three such members: 9 row groups against ceil(384 / 48) = 8.
  d = rt::decide_cascade({0, 3, 512}, wide);
  CHECK(d.cascade);
  CHECK(d.kv_bytes_saved == int64_t(1) * 512 * 576);
}

TEST_CASE("prefix groups: reported by the plan, which is otherwise unchanged", "[prefix]") {
  rt::PlanInputs in;
  in.kv_lens = {4096, 4200, 4300, 1000};
  in.heads = 12;
  in.page_size = 128;
  in.tile_tokens = 32;
  in.num_cus = 256;
  const rt::Plan plain = rt::plan_decode(in);
  in.prefix_groups = {{0, 3, 3968}};
  const rt::Plan with = rt::plan_decode(in);
  REQUIRE(with.units.size() == plain.units.size());
  for (size_t u = 0; u < plain.units.size(); ++u) {
    CHECK(with.units[u].kv_start == plain.units[u].kv_start);
    CHECK(with.units[u].kv_end == plain.units[u].kv_end);
    CHECK(with.units[u].batch == plain.units[u].batch);
  }
  const auto j = with.to_json();
  REQUIRE(j["prefix_groups"].size() == 1);
  CHECK(j["prefix_groups"][0]["count"] == 3);
  CHECK(j["prefix_groups"][0]["shared_tokens"] == 3968);
  CHECK(j["prefix_groups"][0]["cascade"] == false);
  CHECK(plain.to_json()["prefix_groups"].empty());
}

namespace {

// The page table of `t` packed (request b's pages after those of the requests before it, each
// ceil(kv_len / page) long) and as a [batch, stride] table (the unused tail of a row -1).
std::vector<int32_t> packed(const Table& t, const std::vector<int>& lens, int page) {
  std::vector<int32_t> v;
  for (size_t b = 0; b < lens.size(); ++b)
    for (int i = 0; i < (lens[b] + page - 1) / page; ++i) v.push_back(t.pages[b][size_t(i)]);
  return v;
}
std::vector<int32_t> strided(const Table& t, const std::vector<int>& lens, int page, int stride) {
  std::vector<int32_t> v(lens.size() * size_t(stride), -1);
  for (size_t b = 0; b < lens.size(); ++b)
    for (int i = 0; i < (lens[b] + page - 1) / page; ++i) v[b * size_t(stride) + size_t(i)] = t.pages[b][size_t(i)];
  return v;
}

}  // namespace

TEST_CASE("prefix groups: a host page table, packed or strided, gives the groups the page ids give", "[prefix]") {
  // The first test's table (page 4, tile 4), with an empty request (no page) in the middle of a
  // run: it ends the run, so requests 0-2 and 4-5 group and 3 (after the empty one) stays alone.
  Table t{{{7, 8, 1}, {7, 8, 9, 2}, {7, 8, 9, 4}, {}, {7, 8, 5}, {3, 10}, {3, 11, 12}}};
  const std::vector<int> lens{12, 16, 15, 0, 12, 8, 9};
  const auto expected = std::vector<rt::PrefixGroup>{{0, 3, 8}, {5, 2, 4}};
  CHECK(rt::detect_prefix_groups(lens, 4, 1, 4, t.id()) == expected);
  std::vector<rt::PrefixGroup> out{{9, 9, 9}};  // cleared first
  const auto p = packed(t, lens, 4);
  rt::detect_prefix_groups(lens, 4, 1, 4, rt::PageTableView{p.data(), 0}, out);
  CHECK(out == expected);
  const auto s = strided(t, lens, 4, 5);
  rt::detect_prefix_groups(lens, 4, 1, 4, rt::PageTableView{s.data(), 5}, out);
  CHECK(out == expected);
  // Without the empty request, 4 joins 0-2 (7, 8 lead its pages too).
  Table u{{{7, 8, 1}, {7, 8, 9, 2}, {7, 8, 9, 4}, {7, 8, 5}, {3, 10}, {3, 11, 12}}};
  const std::vector<int> ulens{12, 16, 15, 12, 8, 9};
  const auto up = packed(u, ulens, 4);
  rt::detect_prefix_groups(ulens, 4, 1, 4, rt::PageTableView{up.data(), 0}, out);
  CHECK(out == std::vector<rt::PrefixGroup>{{0, 4, 8}, {4, 2, 4}});
  // Empty requests never group, even next to each other; nor does one before a group.
  Table e{{{}, {}, {5, 6}, {5, 6}}};
  const std::vector<int> elens{0, 0, 8, 8};
  const auto ep = packed(e, elens, 4);
  rt::detect_prefix_groups(elens, 4, 1, 4, rt::PageTableView{ep.data(), 0}, out);
  CHECK(out == std::vector<rt::PrefixGroup>{{2, 2, 8}});
}

TEST_CASE("prefix groups: detection reads page ids up to the first that differs, and no further than the run shares",
          "[prefix]") {
  // Every page id detection asks for, through the callback (the table version runs the same
  // search over the table's rows).
  std::vector<std::pair<int, int>> asked;
  auto recorder = [&](const Table& t) -> rt::PageIdOf {
    return [&asked, &t](int b, int i) {
      asked.emplace_back(b, i);
      return t.pages[size_t(b)][size_t(i)];
    };
  };
  // Requests 0 and 1 hold 10 pages each and agree on the first 3: pages 0..3 of each are read
  // (page 3 differs), never pages 4..9.
  Table a{{{1, 2, 3, 40, 41, 42, 43, 44, 45, 46}, {1, 2, 3, 50, 51, 52, 53, 54, 55, 56}}};
  CHECK(rt::detect_prefix_groups(std::vector<int>{10, 10}, 1, 1, 1, recorder(a)) ==
        std::vector<rt::PrefixGroup>{{0, 2, 3}});
  for (const auto& [b, i] : asked) CHECK(i <= 3);
  CHECK(asked.size() == 8);
  // A run of three: 0 and 1 share 2 pages, so 1 and 2 (which share 6) are compared on their
  // first 2 pages only: the group shares the smallest adjacent prefix.
  asked.clear();
  Table r{{{1, 2, 9, 9, 9, 9, 9}, {1, 2, 3, 4, 5, 6, 7}, {1, 2, 3, 4, 5, 6, 8}}};
  CHECK(rt::detect_prefix_groups(std::vector<int>{7, 7, 7}, 1, 1, 1, recorder(r)) ==
        std::vector<rt::PrefixGroup>{{0, 3, 2}});
  for (const auto& [b, i] : asked) CHECK(i <= 2);
  size_t pair12 = 0;
  for (const auto& [b, i] : asked) pair12 += b == 2;
  CHECK(pair12 == 2);
}

TEST_CASE("prefix groups: mlaplanbench's page table gives the groups its planner inputs use", "[prefix]") {
  // K3 c16: every row shares 63,911 page ids at page 1 (499 whole pages of 128 at page 128); the
  // rest of each row its own. Detection cuts to 32-token tiles: 63,904 / 63,872 shared tokens
  // (golden::bench_shapes' detected groups).
  for (int page : {1, 128}) {
    const int batch = 16, stride = (68434 + page - 1) / page, shared_pages = 63911 / page;
    std::vector<int> lens;
    for (int b = 0; b < batch; ++b) lens.push_back(68430 + b % 5);
    std::vector<int32_t> table(size_t(batch) * size_t(stride));
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < stride; ++i)
        table[size_t(b) * size_t(stride) + size_t(i)] = i < shared_pages ? i : shared_pages + b * stride + i;
    std::vector<rt::PrefixGroup> out;
    rt::detect_prefix_groups(lens, page, 1, 32, rt::PageTableView{table.data(), stride}, out);
    CHECK(out == std::vector<rt::PrefixGroup>{{0, batch, page == 1 ? 63904 : 63872}});
  }
}

TEST_CASE("prefix groups: a caller's group with an empty request is refused", "[prefix]") {
  const std::vector<int> lens{100, 0, 300};
  CHECK_THROWS_WITH(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{{0, 2, 16}}, lens, 16, 1),
                    Contains("request 1 is empty (kv_lens[1] = 0): an empty request shares no prefix and is never a "
                             "group member"));
  CHECK_NOTHROW(rt::check_prefix_groups(std::vector<rt::PrefixGroup>{}, lens, 16, 1));
  rt::PlanInputs in;
  in.kv_lens = lens;
  in.page_size = 16;
  in.prefix_groups = {{1, 2, 16}};
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("plan_decode: prefix group 0") && Contains("request 1 is empty"));
}
