// Split planner: coverage, tile alignment, partial slots, round-robin balance at the seed shapes.
#include <catch2/catch.hpp>

#include "runtime/backend.h"
#include "runtime/planner.h"
#include "runtime/problem.h"
#include "tests/runtime/planner_golden.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <set>
#include <span>
#include <string>
#include <tuple>

using namespace mla;
using Catch::Matchers::Contains;

// Allocation counting for "a second update allocates nothing" (AllocWindow).
#include "tests/alloc_count.h"

namespace {

// Per-CU tokens of a launch from its workgroup ranges (workgroup x runs units [ranges[x],
// ranges[x + 1]) on CU x mod C), checking that the ranges cover the table in order.
template <class U>
std::vector<int64_t> cu_tokens_of(int C, const std::vector<int32_t>& ranges, const std::vector<U>& units) {
  std::vector<int64_t> cu(size_t(C), 0);
  if (ranges.empty()) {
    CHECK(units.empty());
    return cu;
  }
  REQUIRE(ranges.front() == 0);
  REQUIRE(size_t(ranges.back()) == units.size());
  for (size_t x = 0; x + 1 < ranges.size(); ++x) {
    REQUIRE(ranges[x] <= ranges[x + 1]);
    for (int32_t i = ranges[x]; i < ranges[x + 1]; ++i) cu[x % size_t(C)] += units[size_t(i)].kv_end - units[size_t(i)].kv_start;
  }
  return cu;
}

// Checks every structural promise of a plan against its inputs.
void check_plan(const rt::PlanInputs& in, const rt::Plan& p) {
  const int B = int(in.kv_lens.size()), M = in.heads * in.qseqlen, T = in.tile_tokens;
  const int G = (M + in.rows_per_group - 1) / in.rows_per_group;
  REQUIRE(p.rows == M);
  REQUIRE(p.row_groups == G);
  REQUIRE(int(p.splits.size()) == B);

  // (request, row group) -> token ranges; (request, split start) -> partial slot.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> ranges;
  std::map<std::pair<int, int>, int> slot_of;
  std::vector<int> page_base(B + 1, 0);
  for (int b = 0; b < B; ++b) page_base[b + 1] = page_base[b] + (in.kv_lens[b] + in.page_size - 1) / in.page_size;
  for (const auto& u : p.units) {
    REQUIRE(u.batch >= 0);
    REQUIRE(u.batch < B);
    REQUIRE(u.row_group >= 0);
    REQUIRE(u.row_group < G);
    const int len = in.kv_lens[u.batch];
    CHECK(u.qo_row == u.batch * in.qseqlen);
    CHECK(u.page_base == page_base[u.batch]);
    CHECK(u.kv_len == len);
    REQUIRE(u.kv_start < u.kv_end);
    REQUIRE(u.kv_end <= len);
    // Whole tiles except the last unit of a request.
    CHECK(u.kv_start % T == 0);
    CHECK((u.kv_end % T == 0 || u.kv_end == len));
    ranges[{u.batch, u.row_group}].push_back({u.kv_start, u.kv_end});
    if (p.splits[u.batch] == 1) {
      CHECK(u.partial == -1);
    } else {
      CHECK(u.partial >= 0);
      CHECK(u.partial < p.num_partials);
      auto [it, inserted] = slot_of.insert({{u.batch, u.kv_start}, u.partial});
      CHECK(it->second == u.partial);  // row groups of one split share its slot
    }
  }
  // Every (request, row group, token) exactly once; the last split has >= qseqlen tokens. An
  // empty request has no unit and no split.
  for (int b = 0; b < B; ++b)
    for (int g = 0; g < G; ++g) {
      auto r = ranges[{b, g}];
      std::sort(r.begin(), r.end());
      REQUIRE(int(r.size()) == p.splits[b]);
      if (in.kv_lens[b] == 0) {
        CHECK(r.empty());
        continue;
      }
      int at = 0;
      for (auto [s, e] : r) {
        CHECK(s == at);
        at = e;
      }
      CHECK(at == in.kv_lens[b]);
      CHECK(r.back().second - r.back().first >= in.qseqlen);
    }
  // Partial slots: distinct per split, consecutive in token order, matching the reduce entries.
  std::set<int> slots;
  for (auto& [k, s] : slot_of) slots.insert(s);
  CHECK(int(slots.size()) == p.num_partials);
  int expect_first = 0;
  size_t e = 0;
  for (int b = 0; b < B; ++b) {
    if (p.splits[b] == 1) continue;
    REQUIRE(e < p.reduces.size());
    const auto& r = p.reduces[e++];
    if (in.kv_lens[b] == 0) {  // merges no partial: the reduce writes o = 0, lse = -inf
      CHECK(r.qo_row == b * in.qseqlen);
      CHECK((r.first_partial == 0 && r.num_splits == 0 && r.partial_stride == 1 && r.bf16_splits == 0));
      continue;
    }
    CHECK(r.partial_stride == 1);
    CHECK(r.qo_row == b * in.qseqlen);
    CHECK(r.num_splits == p.splits[b]);
    CHECK(r.first_partial == expect_first);
    int j = 0, prev = -1;
    for (auto& [k, s] : slot_of)
      if (k.first == b) {
        CHECK(s == r.first_partial + j++);
        CHECK(k.second > prev);
        prev = k.second;
      }
    expect_first += p.splits[b];
  }
  CHECK(e == p.reduces.size());
  CHECK(p.num_partials == expect_first);
  // One range per workgroup of the persistent grid; the per-CU work is what they give.
  CHECK(p.unit_ranges.size() == size_t(in.num_cus * in.workgroups_per_cu) + 1);
  CHECK(cu_tokens_of(in.num_cus, p.unit_ranges, p.units) == p.cu_tokens);
}

rt::PlanInputs inputs(std::vector<int> kv_lens, int heads, int num_cus, int qseqlen = 1) {
  rt::PlanInputs in;
  in.kv_lens = std::move(kv_lens);
  in.heads = heads;
  in.qseqlen = qseqlen;
  in.num_cus = num_cus;
  in.tile_tokens = 16;
  in.rows_per_group = 16;
  return in;
}

}  // namespace

TEST_CASE("planner: structural properties over many random shapes", "[planner]") {
  std::mt19937 rng(12345);
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  for (int iter = 0; iter < 150; ++iter) {
    rt::PlanInputs in;
    in.qseqlen = pick({1, 2, 3, 4});
    in.heads = pick({8, 12, 16, 32, 64, 128});
    in.page_size = pick({1, 16, 64, 256});
    in.num_cus = pick({304, 256, 7, 40});
    in.workgroups_per_cu = pick({1, 2});
    in.tile_tokens = pick({16, 32, 64});
    in.rows_per_group = pick({16, 32, 64});
    int batch = pick({1, 2, 5, 16, 64, 300});
    int maxlen = pick({8, 100, 5000, 70000});
    std::vector<int> lens;
    for (int b = 0; b < batch; ++b) lens.push_back(in.qseqlen + int(rng() % uint32_t(maxlen)));
    in.kv_lens = lens;
    INFO("iter " << iter << " batch " << batch << " maxlen " << maxlen << " heads " << in.heads << " qs " << in.qseqlen << " T "
                 << in.tile_tokens << " rpg " << in.rows_per_group << " cus " << in.num_cus);
    rt::Plan p = rt::plan_decode(in);
    check_plan(in, p);
  }
}

TEST_CASE("planner: the last split keeps a visible token for every query row", "[planner]") {
  // kv_len = 1 tile + 1 token, single-tile splits allowed: the 1-token tail alone would hide
  // it from rows 0..2 of qseqlen 4, so it is merged into the previous split.
  rt::PlanInputs in = inputs({16 * 40 + 1}, 16, 304, 4);
  rt::Plan p = rt::plan_decode(in);
  check_plan(in, p);
  CHECK(p.splits[0] > 1);
}

TEST_CASE("planner: batch 1 at 32K spreads over every CU", "[planner]") {
  for (int cus : {304, 256})
    for (int wpc : {1, 2}) {
      rt::PlanInputs in = inputs({32768}, 16, cus);
      in.workgroups_per_cu = wpc;
      rt::Plan p = rt::plan_decode(in);
      check_plan(in, p);
      INFO("cus " << cus << " wpc " << wpc << " " << p.to_json().dump());
      CHECK(p.cus_used == cus);
      CHECK(p.splits[0] >= cus);
      CHECK(p.balance <= 1.05);
      REQUIRE(p.reduces.size() == 1);
      CHECK(p.reduces[0].num_splits == p.splits[0]);
    }
}

TEST_CASE("planner: balance <= 1.05 at the seed shapes", "[planner]") {
  SECTION("Kimi-K3 TP8 on MI355X: 12 heads, c16 and c24 at kv_len ~68.4K, 256 CUs") {
    for (int batch : {16, 24}) {
      std::vector<int> lens;
      for (int b = 0; b < batch; ++b) lens.push_back(68430 + b % 5);
      rt::PlanInputs in = inputs(lens, 12, 256);
      rt::Plan p = rt::plan_decode(in);
      check_plan(in, p);
      INFO("c" << batch << " " << p.to_json().dump());
      CHECK(p.balance <= 1.05);
      CHECK(p.cus_used == 256);
    }
  }
  SECTION("seed-001 table: 32K..256K x c1..c16, 16 heads, 304 CUs") {
    for (int ctx : {32768, 65536, 131072, 262144})
      for (int batch : {1, 2, 4, 8, 16}) {
        rt::PlanInputs in = inputs(std::vector<int>(batch, ctx), 16, 304);
        rt::Plan p = rt::plan_decode(in);
        check_plan(in, p);
        INFO("ctx " << ctx << " c" << batch << " " << p.to_json().dump());
        CHECK(p.balance <= 1.05);
        CHECK(p.cus_used == 304);
      }
  }
  SECTION("T = 32 (the fp8 kernels' PV tile): balance where tiles allow, quantisation optimum below") {
    for (int batch : {16, 24}) {
      rt::PlanInputs in = inputs(std::vector<int>(batch, 68432), 12, 256);
      in.tile_tokens = 32;
      rt::Plan p = rt::plan_decode(in);
      check_plan(in, p);
      CHECK(p.balance <= 1.05);
    }
    for (int ctx : {32768, 65536, 131072, 262144})
      for (int batch : {1, 2, 4, 8, 16}) {
        rt::PlanInputs in = inputs(std::vector<int>(batch, ctx), 16, 304);
        in.tile_tokens = 32;
        rt::Plan p = rt::plan_decode(in);
        check_plan(in, p);
        INFO("ctx " << ctx << " c" << batch << " " << p.to_json().dump());
        CHECK(p.cus_used == 304);
        int64_t tiles = int64_t(ctx) * batch / 32, max_tokens = *std::max_element(p.cu_tokens.begin(), p.cu_tokens.end());
        if (int64_t(ctx) * batch >= 65536) CHECK(p.balance <= 1.05);
        // Never worse than whole tiles allow: ceil(tiles / CUs) tiles on the busiest CU.
        CHECK(max_tokens <= (tiles + 303) / 304 * 32);
      }
  }
  SECTION("bf16/fp8 Kimi-K2.7 shape with 2 workgroups per CU and 64-row groups") {
    for (int batch : {1, 8, 16}) {
      rt::PlanInputs in = inputs(std::vector<int>(batch, 65536), 16, 304);
      in.workgroups_per_cu = 2;
      in.rows_per_group = 64;
      rt::Plan p = rt::plan_decode(in);
      check_plan(in, p);
      INFO("c" << batch << " " << p.to_json().dump());
      CHECK(p.balance <= 1.05);
    }
  }
}

TEST_CASE("planner: requests that fit whole get partial -1 and no reduce entry", "[planner]") {
  // 304 equal requests on 304 CUs: one unit each, nothing to merge.
  rt::PlanInputs in = inputs(std::vector<int>(304, 4096), 16, 304);
  rt::Plan p = rt::plan_decode(in);
  check_plan(in, p);
  CHECK(p.units.size() == 304);
  CHECK(p.reduces.empty());
  CHECK(p.num_partials == 0);
  for (const auto& u : p.units) CHECK(u.partial == -1);
  CHECK(p.balance == Approx(1.0));

  // Mixed: short requests stay whole, the long one is split.
  rt::PlanInputs mixed = inputs({100000, 20, 30}, 16, 64);
  rt::Plan q = rt::plan_decode(mixed);
  check_plan(mixed, q);
  CHECK(q.splits[1] == 1);
  CHECK(q.splits[2] == 1);
  CHECK(q.splits[0] > 1);
  CHECK(q.reduces.size() == 1);
}

TEST_CASE("planner: row groups each cover all tokens and share partial slots", "[planner]") {
  rt::PlanInputs in = inputs({5000, 300}, 128, 64, 2);  // M = 256 rows, 64 per group -> 4 groups
  in.rows_per_group = 64;
  rt::Plan p = rt::plan_decode(in);
  check_plan(in, p);
  CHECK(p.row_groups == 4);
  CHECK(p.units.size() % 4 == 0);
}

TEST_CASE("planner: bad inputs are rejected with the field and value", "[planner]") {
  rt::PlanInputs in = inputs({10, 2}, 16, 304, 3);
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("kv_lens[1] = 2 < qseqlen = 3 (allowed: 0, an empty request, or kv_len >= qseqlen)"));
  in = inputs({10, -1}, 16, 304);
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("kv_lens[1] = -1"));
  in = inputs({100}, 16, 0);
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("num_cus = 0"));
  in = inputs({100}, 16, 70000);
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("num_cus = 70000 (allowed: 1..65536)"));
  in = inputs({100}, 16, 304);
  in.tile_tokens = 0;
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("tile_tokens = 0"));
  in = inputs({100}, 16, 304);
  in.prefix_hbm_factor = -1;
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("prefix_hbm_factor = -1 (allowed: a finite number >= 0)"));
  in.prefix_hbm_factor = 0;
  in.prefix_unit_fill = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("prefix_unit_fill = nan"));
  in.prefix_unit_fill = 0;
  in.prefix_issue_per_block_tile = 55;  // without the HBM factor: half a model
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("prefix_issue_per_block_tile = 55 and prefix_hbm_factor = 0"));
}

TEST_CASE("planner: plan_inputs_of and to_json", "[planner]") {
  rt::ProblemParams prm;
  prm.page_size = 16;
  prm.kv_lens = {40, 17, 300};
  prm.qseqlen = 2;
  prm.heads = 8;
  prm.kv_dtype = rt::DType::bf16;
  rt::Problem prob = rt::make_random_problem(prm);
  CHECK(rt::kv_lens_of(prob) == prm.kv_lens);
  rt::PlanInputs in = rt::plan_inputs_of(prob);
  CHECK(in.kv_bytes_per_token == 1152);
  in.num_cus = 8;
  rt::Plan p = rt::plan_decode(in);
  check_plan(in, p);
  // page_base matches the problem's kv_indptr.
  for (const auto& u : p.units) CHECK(u.page_base == prob.kv_indptr[u.batch]);
  auto j = p.to_json();
  CHECK(j["units"] == p.units.size());
  CHECK(j["num_partials"] == p.num_partials);
  CHECK(j["splits"].size() == 3);
  CHECK(j.contains("balance"));
}

TEST_CASE("planner inputs: workgroups per CU default to the decode kernel's occupancy", "[planner]") {
  rt::SelectedKernels k;
  k.kheads = 16, k.kqseqlen = 1, k.page_size = 1;
  k.decode.name = "mla_decode_test";
  k.decode.launch.tile_tokens = 32, k.decode.launch.rows_per_group = 16;
  k.decode.resident_workgroups_per_cu = 2;
  // The kernel's target sets the XCD count (the prefix launch's placement); no target, no plan.
  CHECK_THROWS_WITH(rt::plan_inputs_for(k, {1000}, 256, 0), Catch::Contains("mla_decode_test: target ''"));
  k.decode.target = "gfx950";
  CHECK_THROWS_WITH(rt::plan_inputs_for(k, {1000}, 256, 0),
                    Catch::Contains("geometry.partial_o_bytes = 0") && Catch::Contains("allowed: 4 for f32"));
  k.decode.launch.partial_o_bytes = 4;
  CHECK(rt::plan_inputs_for(k, {1000}, 256, 0).num_xcds == 8);
  CHECK(rt::plan_inputs_for(k, {1000}, 256, 0).workgroups_per_cu == 2);  // 0: from catalog.json
  CHECK(rt::plan_inputs_for(k, {1000}, 256, 3).workgroups_per_cu == 3);  // an explicit override wins
  // A prefix kernel without its modeled hot loop (catalog.json issue_model) is named.
  rt::SelectedKernels kp = k;
  kp.prefix = rt::CatalogKernel{};
  kp.prefix->name = "mla_prefix_test";
  kp.prefix->launch.rows_per_group = 96, kp.prefix->launch.partial_o_bytes = 2;
  CHECK_THROWS_WITH(rt::plan_inputs_for(kp, {1000}, 256, 0),
                    Catch::Contains("mla_prefix_test: no issue_model"));
  // With two resident workgroups the planner fills each CU with two units of a long request.
  const rt::Plan p = rt::plan_decode(rt::plan_inputs_for(k, {256 * 2 * 32 * 8}, 256, 0));
  CHECK(p.units.size() >= 2 * 256);
}

TEST_CASE("contract: a decode kernel's argument list must be the contract's table", "[runtime]") {
  rt::CatalogKernel k;
  k.name = "mla_decode_test", k.kind = "mla_decode", k.co_path = "x.co";
  for (const auto& f : mla::abi::kDecodeArgs) k.args.push_back({std::string(f.name), f.offset, f.size, ""});
  CHECK_NOTHROW(rt::check_contract_args(k));
  k.args[9].offset += 4;  // kv_scale
  try {
    rt::check_contract_args(k);
    FAIL("no error");
  } catch (const rt::RtError& e) {
    CHECK(e.status == MLA_ERROR_KERNARG_MISMATCH);
    CHECK_THAT(e.what(), Catch::Contains(fmt::format("'kv_scale' at {}", mla::abi::decode_args::kv_scale + 4)) &&
                             Catch::Contains(fmt::format("says 'kv_scale' at {}", mla::abi::decode_args::kv_scale)));
  }
  k.args.pop_back();
  const size_t n = std::size(mla::abi::kDecodeArgs);
  CHECK_THROWS_WITH(rt::check_contract_args(k),
                    Catch::Contains(fmt::format("{} arguments, the contract (abi/mla_abi.h) {}", n - 1, n)));
}

namespace {

// {bundles, bundles on one XCD} of a plan's prefix launch (see check_any_plan).
std::pair<int, int> xcd_bundles(const rt::PlanInputs& in, const rt::Plan& p) {
  std::map<std::tuple<int, int, int, int>, std::vector<size_t>> bundle;  // split -> its units' workgroups
  for (size_t x = 0; x + 1 < p.prefix_unit_ranges.size(); ++x)
    for (int32_t i = p.prefix_unit_ranges[x]; i < p.prefix_unit_ranges[x + 1]; ++i) {
      const auto& u = p.prefix_units[size_t(i)];  // a group's prefix split or a member's unique-part split
      bundle[{u.first_request, u.kv_start, u.kv_end, u.partial}].push_back(x);
    }
  std::pair<int, int> r{0, 0};
  for (const auto& [key, wg] : bundle) {
    if (wg.size() < 2) continue;
    ++r.first;
    r.second += std::all_of(wg.begin(), wg.end(), [&](size_t x) { return x % in.num_xcds == wg[0] % in.num_xcds; });
  }
  return r;
}

// An independent check of any plan (cascading or not) against the contract of abi/mla_abi.h
// and docs/planner.md: coverage of every (request, row, token) exactly once, slot layout,
// reduce entries, visibility, field formulas and the per-CU prediction of both launches.
void check_any_plan(const rt::PlanInputs& in, const rt::Plan& p) {
  const int B = int(in.kv_lens.size()), H = in.heads, Q = in.qseqlen, M = H * Q, T = in.tile_tokens;
  const int rpg = in.rows_per_group;
  std::vector<int> page_base(B + 1, 0);
  for (int b = 0; b < B; ++b) page_base[b + 1] = page_base[b] + (in.kv_lens[b] + in.page_size - 1) / in.page_size;
  // Cascading groups, from the decisions; every request's group (-1: none).
  std::vector<int> group_of(B, -1);
  std::vector<rt::CascadeDecision> cascading;
  for (const auto& d : p.prefix_groups)
    if (d.cascade) {
      for (int b = d.group.first; b < d.group.first + d.group.count; ++b) group_of[b] = int(cascading.size());
      cascading.push_back(d);
    }
  CHECK(cascading.empty() == p.prefix_units.empty());

  // Per (request, row): token intervals with the slot written (-1: final o).
  struct Piece {
    int start, end, slot;
    bool prefix = false;  // written by a prefix unit (bf16 o when in.prefix_partial_o_bytes == 2)
  };
  std::vector<std::vector<std::vector<Piece>>> pieces(B, std::vector<std::vector<Piece>>(M));
  std::map<std::pair<int, int>, int> slot_row_writes;  // (slot, row m) -> units writing it
  std::map<int, int> slot_owner;                       // slot -> request
  auto write = [&](int b, int m, int s, int e, int slot, bool prefix = false) {
    pieces[b][m].push_back({s, e, slot, prefix});
    if (slot < 0) return;
    CHECK(slot < p.num_partials);
    slot_row_writes[{slot, m}] += 1;
    auto [it, fresh] = slot_owner.insert({slot, b});
    CHECK(it->second == b);  // a slot belongs to one request
  };

  for (const auto& u : p.units) {
    REQUIRE(u.batch >= 0);
    REQUIRE(u.batch < B);
    const int b = u.batch, len = in.kv_lens[b];
    CHECK(u.qo_row == b * Q);
    CHECK(u.page_base == page_base[b]);
    CHECK(u.kv_len == len);
    REQUIRE(u.kv_start < u.kv_end);
    REQUIRE(u.kv_end <= len);
    CHECK(u.kv_start % T == 0);
    CHECK((u.kv_end % T == 0 || u.kv_end == len));
    REQUIRE(u.row_group >= 0);
    REQUIRE(u.row_group * rpg < M);
    if (group_of[b] >= 0) {
      CHECK(u.partial >= 0);                                                // (c) merged with the prefix
      CHECK(u.kv_start >= cascading[size_t(group_of[b])].group.shared_tokens);  // (d) unique part only
    }
    const int m0 = u.row_group * rpg, m1 = std::min(M, m0 + rpg);
    // Visibility: the unit's first row (q row m0 / heads) sees a token of the range.
    CHECK(u.kv_start < len - Q + m0 / H + 1);
    for (int m = m0; m < m1; ++m) write(b, m, u.kv_start, u.kv_end, u.partial);
  }
  // The members' unique parts run in the prefix launch exactly when qseqlen is 1 and every
  // request but the empty ones is a cascading member (docs/planner.md "Cascade plans": one
  // attention launch).
  bool one_launch = Q == 1 && !cascading.empty() && M <= in.prefix_rows_per_group;
  for (int b = 0; b < B; ++b) one_launch = one_launch && (group_of[b] >= 0 || in.kv_lens[b] == 0);
  if (one_launch) CHECK(p.units.empty());
  for (const auto& u : p.prefix_units) {
    REQUIRE(p.prefix_rows_per_group > 0);
    const int first = u.first_request;
    REQUIRE(first >= 0);
    REQUIRE(first < B);
    REQUIRE(group_of[first] >= 0);
    const auto& d = cascading[size_t(group_of[first])];
    if (u.kv_start >= d.group.shared_tokens) {
      // A member's unique part: its M rows, all to one slot, no row past its own tokens.
      REQUIRE(one_launch);
      const int len = in.kv_lens[first];
      CHECK(u.qo_row == first * Q);
      CHECK(u.page_base == page_base[first]);
      CHECK(u.rows == M);
      CHECK(u.row_group == 0);
      REQUIRE(u.kv_start < u.kv_end);
      REQUIRE(u.kv_end <= len);
      CHECK(u.kv_start % T == 0);
      CHECK((u.kv_end % T == 0 || u.kv_end == len));
      CHECK(u.partial >= 0);
      for (int m = 0; m < M; ++m) write(first, m, u.kv_start, u.kv_end, u.partial, true);
      continue;
    }
    REQUIRE(d.group.first == first);
    const int count = d.group.count, shared = d.group.shared_tokens, R = count * M;
    CHECK(u.qo_row == first * Q);
    CHECK(u.page_base == page_base[first]);
    CHECK(u.rows == R);
    REQUIRE(u.kv_start < u.kv_end);
    REQUIRE(u.kv_end <= shared);
    CHECK(u.kv_start % T == 0);
    CHECK((u.kv_end % T == 0 || u.kv_end == shared));
    CHECK(u.partial >= 0);  // (c)
    REQUIRE(u.row_group >= 0);
    REQUIRE(u.row_group * p.prefix_rows_per_group < R);
    const int r0 = u.row_group * p.prefix_rows_per_group, r1 = std::min(R, r0 + p.prefix_rows_per_group);
    for (int r = r0; r < r1; ++r) write(first + r / M, r % M, u.kv_start, u.kv_end, u.partial + r / M, true);
  }
  // (a) every (request, row, token) once; (b) a row's slots are distinct.
  for (int b = 0; b < B; ++b)
    for (int m = 0; m < M; ++m) {
      if (in.kv_lens[b] == 0) {  // an empty request: nothing reads it
        CHECK(pieces[b][m].empty());
        continue;
      }
      auto v = pieces[b][m];
      std::sort(v.begin(), v.end(), [](const Piece& x, const Piece& y) { return x.start < y.start; });
      int at = 0;
      for (const Piece& x : v) {
        CHECK(x.start == at);
        at = x.end;
      }
      REQUIRE(at == in.kv_lens[b]);
    }
  for (const auto& [k, n] : slot_row_writes) CHECK(n == 1);

  // Reduce entries, in request order: exactly the slots written for each row of the request.
  size_t e = 0;
  for (int b = 0; b < B; ++b) {
    std::set<int> written;
    bool final_o = false;
    for (const Piece& x : pieces[b][0]) x.slot < 0 ? void(final_o = true) : void(written.insert(x.slot));
    for (int m = 1; m < M; ++m) {
      std::set<int> w;
      for (const Piece& x : pieces[b][m])
        if (x.slot >= 0) w.insert(x.slot);
      CHECK(w == written);
    }
    if (final_o) {
      CHECK(written.empty());
      CHECK(pieces[b][0].size() == 1);
      CHECK(p.splits[b] == 1);
      continue;
    }
    REQUIRE(e < p.reduces.size());
    const auto& r = p.reduces[e++];
    CHECK(r.qo_row == b * Q);
    if (in.kv_lens[b] == 0) {  // an empty request: an entry that merges no partial (o = 0, lse = -inf)
      CHECK(group_of[b] < 0);
      CHECK(p.splits[b] == 0);
      CHECK((r.first_partial == 0 && r.num_splits == 0 && r.partial_stride == 1 && r.bf16_splits == 0));
      continue;
    }
    std::set<int> listed;
    for (int k = 0; k < r.num_splits; ++k) listed.insert(r.first_partial + k * r.partial_stride);
    CHECK(int(listed.size()) == r.num_splits);
    CHECK(listed == written);
    CHECK(p.splits[b] == r.num_splits);
    CHECK((r.reserved[0] == 0 && r.reserved[1] == 0 && r.reserved[2] == 0));
    if (group_of[b] < 0) {
      CHECK(r.partial_stride == 1);
      CHECK(r.num_splits >= 2);
      CHECK(r.bf16_splits == 0);
    } else {
      // The documented layout: member i's k-th partial at B + k * count + i.
      const auto& d = cascading[size_t(group_of[b])];
      CHECK(r.partial_stride == d.group.count);
      CHECK(r.first_partial == d.first_slot + (b - d.group.first));
      CHECK(r.num_splits >= d.prefix_splits);
      CHECK(r.first_partial + (r.num_splits - 1) * r.partial_stride < d.first_slot + d.slots);
      // Token order: the prefix splits first, then the unique splits.
      std::vector<Piece> v = pieces[b][0];
      std::sort(v.begin(), v.end(), [](const Piece& x, const Piece& y) { return x.start < y.start; });
      for (size_t k = 0; k < v.size(); ++k) CHECK(v[k].slot == r.first_partial + int(k) * r.partial_stride);
      // The reduce reads partials k < bf16_splits as bf16: exactly the prefix kernel's (when it
      // writes bf16), which come first.
      for (size_t k = 0; k < v.size(); ++k)
        CHECK((int(k) < r.bf16_splits) == (v[k].prefix && in.prefix_partial_o_bytes == 2));
    }
  }
  CHECK(e == p.reduces.size());
  // Groups' slot ranges are disjoint and within num_partials.
  for (const auto& d : cascading) CHECK(d.first_slot + d.slots <= p.num_partials);

  // The per-CU work of each launch is what its workgroup ranges give.
  CHECK(cu_tokens_of(in.num_cus, p.unit_ranges, p.units) == p.cu_tokens);
  if (!p.prefix_units.empty()) {
    CHECK(p.prefix_unit_ranges.size() == size_t(in.num_cus * in.prefix_workgroups_per_cu) + 1);
    CHECK(cu_tokens_of(in.num_cus, p.prefix_unit_ranges, p.prefix_units) == p.prefix_cu_tokens);
  }
  int64_t tokens = 0;
  for (const auto& u : p.units) tokens += u.kv_end - u.kv_start;
  for (const auto& u : p.prefix_units) tokens += u.kv_end - u.kv_start;
  CHECK(p.total_tokens() == tokens);
  // XCD placement, counted from the workgroup ranges alone: a prefix split's row-group units
  // (same group, tokens and partial slot) form a bundle; it is on one XCD when their workgroups
  // agree mod num_xcds (workgroup x runs on XCD x mod X).
  const auto [bundles, one_xcd] = xcd_bundles(in, p);
  CHECK(p.num_xcds == in.num_xcds);
  CHECK(p.prefix_row_group_bundles == bundles);
  CHECK(p.prefix_row_group_bundles_one_xcd == one_xcd);
}

// The recorded costs agree with the choice (no capacity caps).
void check_choice(const rt::Plan& p) {
  for (const auto& d : p.prefix_groups) {
    if (d.cost_cascade == 0) continue;  // not priced: decide_cascade ruled it out
    INFO(d.to_json().dump());
    CHECK(d.cascade == (d.cost_cascade < d.cost_per_request));
    // The decision compares the cost model's prices before the walk; where every workgroup holds
    // many tiles, the walked plan's price is within 20% of its own (with a few, whole tiles and a
    // piece's fixed cost are a large share of a workgroup).
    if (p.total_tokens() >= int64_t(64) * p.tile_tokens * p.num_cus)
      CHECK(p.predicted_cost == Approx(d.cascade ? d.cost_cascade : d.cost_per_request).epsilon(0.2));
    CHECK_THAT(d.reason, Contains(d.cascade ? "cascade modeled cheaper" : "per-request plan modeled cheaper"));
  }
}

rt::PlanInputs k3_like() {
  rt::PlanInputs in;
  in.heads = 12;
  in.qseqlen = 1;
  in.kv_lens = std::vector<int>(16, 68000);
  in.num_cus = 256;
  in.tile_tokens = 32;
  in.rows_per_group = 16;
  in.prefix_rows_per_group = 48;
  in.kv_bytes_per_token = 576;
  in.page_size = 128;
  in.prefix_groups = {{0, 16, 63872}};
  return in;
}

// The prefix launch's issue model as plan_inputs_for derives it from a gfx950 fp8 prefix
// kernel's catalog.json figures (cycles and LDS clocks per block-tile, 148 LDS clocks per tile,
// 126 KiB in flight over 2 us, 2.4 GHz, 6 TB/s, 1 us fill) at 256 CUs.
rt::PlanInputs with_prefix_model(rt::PlanInputs in, double cycles_per_block_tile, double lds_per_block_tile) {
  const double rate = 129024.0 / 2e-6;  // bytes/s a CU streams (Little's law)
  in.prefix_issue_per_block_tile = cycles_per_block_tile / 2.4e9 * rate / 576;
  in.prefix_lds_per_block_tile = lds_per_block_tile / 2.4e9 * rate / 576;
  in.prefix_lds_per_tile = 148 / 2.4e9 * rate / 576;
  in.prefix_hbm_factor = 256 * rate / 6e12;
  in.prefix_unit_fill = 1e-6 * rate / 576;
  return in;
}

}  // namespace

TEST_CASE("planner cascade: K3-like c16 reads the shared prefix once", "[planner][cascade]") {
  const rt::PlanInputs in = k3_like();
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  check_choice(p);
  REQUIRE(p.prefix_groups.size() == 1);
  const auto& d = p.prefix_groups[0];
  CHECK(d.cascade);
  CHECK(d.prefix_row_groups == 4);
  CHECK(d.prefix_splits >= 1);
  // Every request is a member at qseqlen 1: the unique parts run in the prefix launch too.
  CHECK(p.units.empty());
  size_t group_units = 0;
  for (const auto& u : p.prefix_units) group_units += u.rows == 16 * 12;
  CHECK(group_units == size_t(d.prefix_splits) * 4);
  CHECK(p.prefix_units.size() > group_units);
  CHECK(p.reduces.size() == 16);
  CHECK(p.prefix_rows_per_group == 48);
  // Prefix tokens read 4 times (row groups) instead of 16.
  CHECK(p.total_tokens() == int64_t(63872) * 4 + int64_t(16) * (68000 - 63872));
  const auto j = p.to_json();
  CHECK(j["prefix_units"] == p.prefix_units.size());
  CHECK(j["prefix_unique_part_units"] == p.prefix_units.size() - group_units);
  CHECK(j["prefix_cus_used"] >= 250);  // the walk may end a gang or two before the last workgroups
  CHECK(j["cus_used"] == 0);  // no decode launch
  CHECK(j["prefix_groups"][0]["prefix_splits"] == d.prefix_splits);
  CHECK(j["prefix_groups"][0]["slots"] == d.slots);
  CHECK(j["prefix_groups"][0]["cost_cascade"].get<double>() < j["prefix_groups"][0]["cost_per_request"].get<double>());
  // Without a prefix kernel: the per-request plan, bit for bit.
  rt::PlanInputs no_kernel = in;
  no_kernel.prefix_rows_per_group = 0;
  rt::PlanInputs no_groups = in;
  no_groups.prefix_groups = {};
  const rt::Plan q = rt::plan_decode(no_kernel);
  CHECK_FALSE(q.prefix_groups[0].cascade);
  CHECK_THAT(q.prefix_groups[0].reason, Contains("no prefix kernel"));
  CHECK(golden::fingerprint(q) == golden::fingerprint(rt::plan_decode(no_groups)));
  CHECK(q.predicted_cost == Approx(d.cost_per_request).epsilon(0.1));
}

namespace {

// The workgroup of each prefix unit (its index in the ranges).
std::vector<size_t> prefix_workgroups(const rt::Plan& p) {
  std::vector<size_t> wg(p.prefix_units.size());
  for (size_t x = 0; x + 1 < p.prefix_unit_ranges.size(); ++x)
    for (int32_t i = p.prefix_unit_ranges[x]; i < p.prefix_unit_ranges[x + 1]; ++i) wg[size_t(i)] = x;
  return wg;
}

// The prefix launch's modeled time in token-equivalents, evaluated from the plan's units alone
// with the model docs/planner.md states ("Issue-aware prefix launch"): unit in workgroup x on CU x mod C,
// one resident workgroup; per CU fill x units + max(memory, issue, LDS); at least the HBM floor.
double prefix_launch_time(const rt::PlanInputs& in, const rt::Plan& p) {
  const int C = in.num_cus, T = in.tile_tokens;
  const double row_teq = (512.0 * in.prefix_partial_o_bytes + 4) / in.kv_bytes_per_token;
  std::vector<double> mem(size_t(C), 0), issue(size_t(C), 0), lds(size_t(C), 0), n(size_t(C), 0);
  std::map<std::pair<int, int>, int> groups;  // (first request, row group): the group's row groups
  for (const auto& u : p.prefix_units) groups[{u.first_request, 0}] = std::max(groups[{u.first_request, 0}], u.row_group + 1);
  double hbm = 0;
  const std::vector<size_t> wg = prefix_workgroups(p);
  for (size_t i = 0; i < p.prefix_units.size(); ++i) {
    const auto& u = p.prefix_units[i];
    const int cu = int(wg[i] % size_t(C));
    const int rows = std::min(p.prefix_rows_per_group, u.rows - u.row_group * p.prefix_rows_per_group);
    const int blocks = (rows + 15) / 16, tokens = u.kv_end - u.kv_start;
    const double tiles = (tokens + T - 1) / T;
    mem[size_t(cu)] += tokens + rows * row_teq;
    issue[size_t(cu)] += tiles * blocks * in.prefix_issue_per_block_tile / std::min(4, blocks);
    lds[size_t(cu)] += tiles * (in.prefix_lds_per_tile + blocks * in.prefix_lds_per_block_tile);
    n[size_t(cu)] += 1;
    const int G = p.is_unique_part(u) ? 1 : groups[{u.first_request, 0}];
    hbm += double(tokens) / G + rows * row_teq;
  }
  double worst = in.prefix_hbm_factor * hbm / C;
  for (int cu = 0; cu < C; ++cu)
    worst = std::max(worst, in.prefix_unit_fill * n[size_t(cu)] +
                                std::max({mem[size_t(cu)], issue[size_t(cu)], lds[size_t(cu)]}));
  return worst;
}

}  // namespace

namespace {

// A phased wide prefix kernel's modeled launch + reduce in token-equivalents, from the plan's
// units alone with the model docs/planner.md states ("Issue-aware prefix launch", phased
// kernels): unit i on CU i mod C, one workgroup per CU; a unit's computing blocks fill its
// waves 3 at a time, a wave of b blocks issues wave_tile_issue[b - 1] a tile, the busiest wave
// or a quarter of the sum sets the tile; per CU: the units' prologues (fill or Q rows, the
// larger) and partial stores, + max(tokens, issue, LDS); at least the HBM floor; the reduce
// moves every partial row and the members' final rows at the HBM bandwidth.
double phased_wide_cost(const rt::PlanInputs& in, const rt::Plan& p) {
  const int C = in.num_cus, T = in.tile_tokens;
  const double row_teq = (512.0 * in.prefix_partial_o_bytes + 4) / in.kv_bytes_per_token;
  std::vector<double> mem(size_t(C), 0), issue(size_t(C), 0), lds(size_t(C), 0), serial(size_t(C), 0);
  std::map<int, int> groups;  // first request: the group's row groups
  for (const auto& u : p.prefix_units) groups[u.first_request] = std::max(groups[u.first_request], u.row_group + 1);
  double hbm = 0, reduce_rows = 0;
  const std::vector<size_t> wg = prefix_workgroups(p);
  for (size_t i = 0; i < p.prefix_units.size(); ++i) {
    const auto& u = p.prefix_units[i];
    const size_t cu = wg[i] % size_t(C);
    const int rows = std::min(p.prefix_rows_per_group, u.rows - u.row_group * p.prefix_rows_per_group);
    const int tokens = u.kv_end - u.kv_start;
    const double tiles = (tokens + T - 1) / T;
    double sum = 0, most = 0, l = in.prefix_lds_per_tile;
    for (int left = (rows + 15) / 16; left > 0; left -= 3) {
      const int b = std::min(3, left);
      sum += in.prefix_wave_tile_issue[size_t(b - 1)];
      most = std::max(most, in.prefix_wave_tile_issue[size_t(b - 1)]);
      l += in.prefix_wave_tile_lds[size_t(b - 1)];
    }
    mem[cu] += tokens;
    issue[cu] += tiles * std::max(sum / 4, most);
    lds[cu] += tiles * l;
    serial[cu] += std::max(in.prefix_unit_fill, rows * in.prefix_prologue_per_row) + rows * row_teq * in.prefix_store_factor;
    hbm += double(tokens) / (p.is_unique_part(u) ? 1 : groups[u.first_request]) + rows * row_teq;
    reduce_rows += rows;
  }
  double worst = in.prefix_hbm_factor * hbm / C;
  for (size_t cu = 0; cu < size_t(C); ++cu) worst = std::max(worst, serial[cu] + std::max({mem[cu], issue[cu], lds[cu]}));
  const double members = double(p.reduces.size());
  const double reduce_bytes = reduce_rows * (512.0 * in.prefix_partial_o_bytes + 4) + members * p.rows * 1024.0;
  return worst + reduce_bytes / in.kv_bytes_per_token / C * in.prefix_hbm_factor;
}

}  // namespace

// The wide prefix kernel (192 rows, 3 row blocks per wave, no producer) as plan_inputs_for
// derives it from the catalog (28 KiB of ring in flight, 160 KiB in the prologue, 125 KiB of
// stores in the epilogue, 2 us, 2.4 GHz, 6 TB/s, 1 us fill) at K3 c16: the plan's predicted
// cost is the phased model's, evaluated independently from its units.
TEST_CASE("planner cascade: a phased prefix kernel's plan costs its prologues and stores apart from its stream", "[planner][cascade]") {
  rt::PlanInputs in = k3_like();
  in.kv_lens = std::vector<int>(16, 63872 + 4523);
  in.prefix_rows_per_group = 192;
  in.prefix_partial_o_bytes = 2;
  const double rate = 28672.0 / 2e-6, teq = [&] { return 2.4e9 / rate * 576; }();  // clocks per token-equivalent
  in.prefix_issue_per_block_tile = 1201 / teq;
  in.prefix_lds_per_block_tile = 100 / teq;
  in.prefix_lds_per_tile = 148 / teq;
  in.prefix_blocks_per_wave = 3;
  in.prefix_wave_tile_issue = {1300 / teq, 2500 / teq, 3603 / teq};
  in.prefix_wave_tile_lds = {150 / teq, 250 / teq, 350 / teq};
  in.prefix_hbm_factor = 256 * rate / 6e12;
  in.prefix_unit_fill = 1e-6 * rate / 576;
  const double q_rate = 163840.0 / 2e-6, store_rate = std::min(64 * 2.4e9, 128000.0 / 2e-6);
  in.prefix_prologue_per_row = 576.0 / q_rate * rate / 576;
  in.prefix_store_factor = rate / store_rate;
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  REQUIRE(p.prefix_groups.at(0).cascade);
  CHECK(p.units.empty());
  // The planner sums each unit's larger of memory, issue and LDS on its CU; the model takes the
  // larger of their sums: the plan's cost bounds the model's time of its own units from above.
  CHECK(p.predicted_cost >= phased_wide_cost(in, p) * (1 - 1e-9));
  CHECK(p.predicted_cost <= phased_wide_cost(in, p) * 1.15);
  // The same figures without the phases price Q not at all and the partial stores in the stream
  // at the ring's 28 KiB in flight (here 4.5x slower than the epilogue's port-bound stores): the
  // launch the planner saw before the phases, dearer.
  rt::PlanInputs flat = in;
  flat.prefix_prologue_per_row = flat.prefix_store_factor = 0;
  CHECK(rt::plan_decode(flat).predicted_cost > p.predicted_cost);
  // Phases need the issue model and one workgroup per CU, and come in pairs.
  rt::PlanInputs bad = in;
  bad.prefix_store_factor = 0;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("prefix_store_factor = 0"));
  bad = in;
  bad.prefix_workgroups_per_cu = 2;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("one prefix workgroup per CU"));
  bad = in;
  bad.prefix_prologue_per_row = -1;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("prefix_prologue_per_row = -1"));
}

// K3 c16 with the prefix kernel's modeled issue (the catalog's figures for
// mla_prefix_fp8fp8_h12_qs1_pg128 at 256 CUs: 1,184 cycles per block-tile at 2.4 GHz, LDS clocks
// 276 per block-tile and 148 per tile, 126 KiB in flight over 2 us, 6 TB/s): a unit of 6 computing row blocks issues ~2.6x its own memory time,
// a unique part of one block ~1.7x, so balancing tokens alone leaves the prefix units' CUs the
// slowest. The issue-aware plan must be faster on the stated model than the token-balanced one.
TEST_CASE("planner cascade: an issue-modeled prefix launch balances issue as well as bytes", "[planner][cascade]") {
  rt::PlanInputs in = k3_like();
  in.kv_lens = std::vector<int>(16, 63872 + 4523);
  in.prefix_rows_per_group = 96;
  in.prefix_partial_o_bytes = 2;
  const rt::PlanInputs modeled = with_prefix_model(in, 1184, 276);
  rt::PlanInputs tokens_only = modeled;  // the same model prices it; the planner does not see it
  tokens_only.prefix_issue_per_block_tile = tokens_only.prefix_hbm_factor = tokens_only.prefix_unit_fill = 0;
  tokens_only.prefix_lds_per_block_tile = tokens_only.prefix_lds_per_tile = 0;
  const rt::Plan a = rt::plan_decode(modeled), b = rt::plan_decode(tokens_only);
  check_any_plan(modeled, a);
  check_choice(a);
  REQUIRE(a.prefix_groups.at(0).cascade);
  REQUIRE(b.prefix_groups.at(0).cascade);
  const double ta = prefix_launch_time(modeled, a), tb = prefix_launch_time(modeled, b);
  INFO("modeled " << ta << " vs token-balanced " << tb << " token-equivalents");
  CHECK(ta < tb);
  // Every unit of the issue-aware plan is in it, and the balance it claims is the model's: its
  // predicted cost holds this launch's time (plus the reduce's, which is >= 0).
  CHECK(a.predicted_cost >= ta * (1 - 1e-9));
  // Decode launches never use the model: without a group the plan is the same, bit for bit.
  rt::PlanInputs lone = modeled, lone_plain = tokens_only;
  lone.prefix_groups = {};
  lone_plain.prefix_groups = {};
  CHECK(golden::fingerprint(rt::plan_decode(lone)) == golden::fingerprint(rt::plan_decode(lone_plain)));
}

TEST_CASE("planner cascade: 128 heads in 48-row groups save nothing", "[planner][cascade]") {
  rt::PlanInputs in;
  in.heads = 128;
  in.kv_lens = {20000, 21000, 3000};
  in.num_cus = 256;
  in.tile_tokens = 32;
  in.rows_per_group = 48;
  in.prefix_rows_per_group = 48;
  in.page_size = 64;
  in.prefix_groups = {{0, 2, 19968}};
  const rt::Plan p = rt::plan_decode(in);
  check_any_plan(in, p);
  REQUIRE(p.prefix_groups.size() == 1);
  CHECK_FALSE(p.prefix_groups[0].cascade);
  CHECK(p.prefix_groups[0].kv_bytes_saved == 0);
  CHECK_THAT(p.prefix_groups[0].reason, Contains("saves nothing"));
  in.prefix_groups = {};
  CHECK(golden::fingerprint(p) == golden::fingerprint(rt::plan_decode(in)));
}

TEST_CASE("planner cascade: a short shared prefix next to long lone requests / the choice follows the costs",
          "[planner][cascade]") {
  for (int cus : {256, 64})
    for (int heads : {16, 128}) {
      rt::PlanInputs in;
      in.heads = heads;
      in.kv_lens = {300, 400, 60000, 50000};
      in.num_cus = cus;
      in.tile_tokens = 32;
      in.rows_per_group = 16;
      in.prefix_rows_per_group = 48;
      in.page_size = 128;
      in.prefix_groups = {{0, 2, 256}};
      const rt::Plan p = rt::plan_decode(in);
      INFO("cus " << cus << " heads " << heads << " " << p.to_json().dump());
      check_any_plan(in, p);
      check_choice(p);
      REQUIRE(p.prefix_groups[0].cost_cascade > 0);
      CHECK(p.predicted_cost ==
            Approx(std::min(p.prefix_groups[0].cost_cascade, p.prefix_groups[0].cost_per_request)).epsilon(0.1));
    }
}

TEST_CASE("planner cascade: mixed batches (two groups, lone requests, qseqlen 1..4, pages 1/64/128)",
          "[planner][cascade]") {
  for (int qs : {1, 2, 3, 4})
    for (int page : {1, 64, 128})
      for (int cus : {256, 40}) {
        rt::PlanInputs in;
        in.heads = 16;
        in.qseqlen = qs;
        in.page_size = page;
        in.num_cus = cus;
        in.tile_tokens = 32;
        in.rows_per_group = 16;
        in.prefix_rows_per_group = 48;
        const int s1 = 65536, s2 = 32768;  // multiples of every page size and of T
        // A lone request, group 1 (4 members; with qseqlen 1 one has no unique token), a lone
        // request, group 2 (3 members), a lone request.
        in.kv_lens = {5000 + qs, s1 + (qs == 1 ? 0 : qs), s1 + 777, s1 + 40, s1 + 3000, 12000,
                      s2 + 31 + qs, s2 + 100, s2 + 5000, 77};
        in.prefix_groups = {{1, 4, s1}, {6, 3, s2}};
        const rt::Plan p = rt::plan_decode(in);
        INFO("qs " << qs << " page " << page << " cus " << cus << " " << p.to_json().dump());
        check_any_plan(in, p);
        check_choice(p);
        REQUIRE(p.prefix_groups.size() == 2);
        CHECK(p.prefix_groups[0].cascade);
        CHECK(p.prefix_groups[1].cascade);
        // page_base of every prefix unit is its first member's kv_indptr.
        int base1 = (in.kv_lens[0] + page - 1) / page, base2 = base1;
        for (int b = 1; b < 6; ++b) base2 += (in.kv_lens[b] + page - 1) / page;
        for (const auto& u : p.prefix_units) CHECK(u.page_base == (u.first_request == 1 ? base1 : base2));
        if (qs == 1) {
          // Request 1 has no unique token: no decode unit, its partials are the prefix splits.
          for (const auto& u : p.units) CHECK(u.batch != 1);
          CHECK(p.reduces[size_t(p.splits[0] > 1)].num_splits == p.prefix_groups[0].prefix_splits);
        }
      }
}

// XCD placement (docs/planner.md): AMD's dispatcher runs workgroup i on XCD i mod 8, each XCD
// with its own L2. The row-group units of one prefix split read the same KV; the planner renames
// CUs so that those running in one round land on one XCD. A renaming changes no cost: the same
// units per CU, the same predicted cost, only the launch order differs.
TEST_CASE("planner cascade: a prefix split's row groups run on one XCD, at no cost to the balance", "[planner][cascade]") {
  for (int count : {16, 24}) {  // K3 c16 (2 row groups of 96) and c24 (3), the issue-modeled launch
    rt::PlanInputs in = k3_like();
    in.kv_lens = std::vector<int>(size_t(count), 63872 + 4523);
    in.prefix_groups = {{0, count, 63872}};
    in.prefix_rows_per_group = 96;
    in.prefix_partial_o_bytes = 2;
    in = with_prefix_model(in, 1092, 220);
    REQUIRE(in.num_xcds == 8);
    const rt::Plan p = rt::plan_decode(in);
    INFO("count " << count << ": " << p.to_json().dump());
    check_any_plan(in, p);
    REQUIRE(p.prefix_groups.at(0).cascade);
    const int splits = p.prefix_groups[0].prefix_splits;
    const auto [bundles, one_xcd] = xcd_bundles(in, p);
    CHECK(bundles == splits);  // one round: every split's G units run together
    CHECK(one_xcd == bundles);
    CHECK(p.prefix_row_group_bundles_one_xcd == splits);
    CHECK(p.to_json()["prefix_row_group_bundles_one_xcd"] == splits);
    // Without the placement (one XCD, as a device whose CUs do not divide into its XCDs is
    // treated) the plan holds the same units on the same per-CU loads at the same cost.
    rt::PlanInputs one = in;
    one.num_xcds = 1;
    const rt::Plan q = rt::plan_decode(one);
    CHECK(q.predicted_cost == p.predicted_cost);
    auto sorted = [](std::vector<int64_t> v) {
      std::sort(v.begin(), v.end());
      return v;
    };
    CHECK(sorted(q.prefix_cu_tokens) == sorted(p.prefix_cu_tokens));
    auto key = [](const abi::PrefixUnit& u) {
      return std::tuple(u.qo_row, u.kv_start, u.kv_end, u.rows, u.partial, u.row_group, u.first_request);
    };
    std::multiset<decltype(key(p.prefix_units[0]))> a, b;
    for (const auto& u : p.prefix_units) a.insert(key(u));
    for (const auto& u : q.prefix_units) b.insert(key(u));
    CHECK(a == b);
    // ... and without it the LPT order alone leaves most bundles across XCDs.
    const auto [qb, qone] = xcd_bundles(in, q);
    CHECK(qb == splits);
    CHECK(qone < splits / 2);
  }
  // 7 CUs (an emulator test's count) do not divide into 8 XCDs: no placement, counted honestly.
  rt::PlanInputs small = k3_like();
  small.num_cus = 7;
  const rt::Plan s = rt::plan_decode(small);
  check_any_plan(small, s);
  // A bad XCD count is an input error naming the field.
  rt::PlanInputs bad = k3_like();
  bad.num_xcds = 0;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("num_xcds = 0"));
}

TEST_CASE("planner cascade: random batches with groups keep every promise", "[planner][cascade]") {
  std::mt19937 rng(4242);
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  int cascaded = 0;
  for (int iter = 0; iter < 120; ++iter) {
    rt::PlanInputs in;
    in.qseqlen = pick({1, 2, 3, 4});
    in.heads = pick({8, 12, 16, 128});
    in.page_size = pick({1, 64, 128});
    in.num_cus = pick({256, 304, 40, 7});
    in.workgroups_per_cu = pick({1, 2});
    in.tile_tokens = pick({16, 32, 64});
    in.rows_per_group = pick({16, 32, 48});
    in.prefix_rows_per_group = pick({48, 64, 96});
    in.prefix_partial_o_bytes = pick({2, 4});
    if (rng() % 2) {  // the prefix launch's issue model (PlanInputs), or none
      in.prefix_issue_per_block_tile = pick({8, 55, 160});
      in.prefix_lds_per_block_tile = pick({0, 13});
      in.prefix_lds_per_tile = pick({0, 7});
      in.prefix_hbm_factor = pick({1, 3});
      in.prefix_unit_fill = pick({0, 112});
    }
    const int batch = pick({2, 3, 8, 24});
    const int shared = pick({1, 4, 40, 500}) * 128;  // a multiple of every page size and tile
    const int first = int(rng() % uint32_t(batch - 1)), count = 2 + int(rng() % uint32_t(batch - first - 1));
    std::vector<int> lens;
    for (int b = 0; b < batch; ++b) {
      const bool member = b >= first && b < first + count;
      const int extra = pick({0, 1, 5, 300, 20000});
      int len = (member ? shared : 0) + in.qseqlen + extra;
      if (member && in.qseqlen == 1 && extra == 0) len = shared;  // no unique token
      lens.push_back(len);
    }
    in.kv_lens = lens;
    in.prefix_groups = {{first, count, shared}};
    const nlohmann::json shape{{"lens", lens}, {"qs", in.qseqlen}, {"heads", in.heads}, {"T", in.tile_tokens},
                               {"rpg", in.rows_per_group}, {"prpg", in.prefix_rows_per_group}, {"cus", in.num_cus},
                               {"group", {first, count, shared}}};
    INFO("iter " << iter << " " << shape.dump());
    const rt::Plan p = rt::plan_decode(in);
    check_any_plan(in, p);
    check_choice(p);
    cascaded += p.prefix_groups[0].cascade;
  }
  CHECK(cascaded >= 20);
}

TEST_CASE("planner cascade: a cascade that exceeds the workspace is not used", "[planner][cascade]") {
  rt::PlanInputs in = k3_like();
  const rt::Plan free = rt::plan_decode(in);
  REQUIRE(free.prefix_groups[0].cascade);
  rt::PlanInputs capped = in;
  capped.max_units = int64_t(free.units.size() + free.prefix_units.size()) - 1;
  rt::Plan p = rt::plan_decode(capped);
  check_any_plan(capped, p);
  CHECK_FALSE(p.prefix_groups[0].cascade);
  CHECK_THAT(p.prefix_groups[0].reason,
             Contains(fmt::format("the workspace holds {} units; the cascade needs {}", capped.max_units,
                                  capped.max_units + 1)));
  CHECK(p.prefix_units.empty());
  capped = in;
  capped.max_partials = free.num_partials - 1;
  p = rt::plan_decode(capped);
  CHECK_FALSE(p.prefix_groups[0].cascade);
  CHECK_THAT(p.prefix_groups[0].reason, Contains("partials; the cascade needs"));
  capped.max_partials = free.num_partials;
  CHECK(rt::plan_decode(capped).prefix_groups[0].cascade);
  rt::PlanInputs bad = in;
  bad.max_units = -1;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("max_units = -1"));
  bad = in;
  bad.prefix_rows_per_group = -3;
  CHECK_THROWS_WITH(rt::plan_decode(bad), Contains("prefix_rows_per_group = -3"));
}

TEST_CASE("planner cascade: a unique part's last split keeps a visible token for every query row",
          "[planner][cascade]") {
  // qseqlen 4, unique parts of one tile + 1 token, single-tile splits allowed on many CUs: the
  // 1-token tail alone would hide it from rows 0..2, so it stays with the previous tile.
  rt::PlanInputs in = k3_like();
  in.qseqlen = 4;
  in.kv_lens = std::vector<int>(16, 63872 + 33);
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  check_choice(p);
  REQUIRE(p.prefix_groups[0].cascade);
  for (const auto& u : p.units) CHECK(u.kv_end - u.kv_start == 33);
  // A member whose unique part is shorter than qseqlen does not cascade (its row 0 would see none of it).
  std::vector<int> lens = in.kv_lens.to_vector();
  lens[3] = 63872 + 3;
  in.kv_lens = lens;
  const rt::Plan q = rt::plan_decode(in);
  check_any_plan(in, q);
  CHECK_FALSE(q.prefix_groups[0].cascade);
  CHECK_THAT(q.prefix_groups[0].reason, Contains("request 3 has 3 unique tokens, fewer than qseqlen = 4"));
}

TEST_CASE("planner cascade: the passing groups cascade together or not at all, whichever costs less",
          "[planner][cascade]") {
  // The K3-like group (pays) and two short requests sharing 256 tokens next to it.
  rt::PlanInputs in = k3_like();
  std::vector<int> lens = in.kv_lens.to_vector();
  lens.push_back(300);
  lens.push_back(320);
  in.kv_lens = lens;
  in.prefix_groups = {{0, 16, 63872}, {16, 2, 256}};
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  check_choice(p);
  REQUIRE(p.prefix_groups.size() == 2);
  CHECK(p.prefix_groups[0].cascade);
  CHECK(p.prefix_groups[1].cascade == p.prefix_groups[0].cascade);
  // One comparison: the plan with both groups against the plan with none.
  rt::PlanInputs none = in;
  none.prefix_groups = {};
  CHECK(p.predicted_cost < rt::plan_decode(none).predicted_cost);
  for (const auto& d : p.prefix_groups) CHECK(d.cost_per_request == Approx(rt::plan_decode(none).predicted_cost).epsilon(0.02));
}

TEST_CASE("planner cascade: a caller-given prefix that ends inside a tile is cut to whole tiles", "[planner][cascade]") {
  rt::PlanInputs in = k3_like();
  in.page_size = 16;
  in.prefix_groups = {{0, 16, 63872 + 16}};  // whole pages, half a 32-token tile past 63,872
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  REQUIRE(p.prefix_groups[0].cascade);
  CHECK(p.prefix_groups[0].group.shared_tokens == 63872);
  CHECK_THAT(p.prefix_groups[0].reason, Contains("(shared_tokens 63888 cut to whole 32-token tiles)"));
  for (const auto& u : p.prefix_units) CHECK((u.kv_end <= 63872 || (u.rows == 12 && u.kv_start >= 63872)));
  for (const auto& u : p.units) CHECK(u.kv_start >= 63872);
}

namespace {

// A plan's whole content, for comparing two plans of the same inputs.
std::string plan_image(const rt::Plan& p) {
  return fmt::format("{:016x} {} {}", golden::fingerprint_all(p), p.predicted_cost, p.to_json().dump());
}

// Inputs of many kinds (the golden shapes, mlaplanbench's, random batches with groups, empty
// requests and empty batches), each with its vectors kept alive by the caller.
std::vector<rt::PlanInputs> varied_inputs() {
  std::vector<rt::PlanInputs> v;
  for (const auto& in : golden::shapes()) v.push_back(in);
  for (const auto& s : golden::bench_shapes(3)) v.push_back(s.in);
  std::mt19937 rng(31);
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  for (int iter = 0; iter < 60; ++iter) {
    rt::PlanInputs in = golden::k3_inputs(pick({1, 128}));
    in.num_cus = pick({256, 40, 7});
    in.prefix_rows_per_group = pick({0, 48, 96});
    in.cascade = rt::CascadePolicy(pick({0, 0, 1, 2}));
    const int batch = pick({0, 1, 3, 8, 24});
    std::vector<int> lens;
    std::vector<rt::PrefixGroup> groups;
    for (int b = 0; b < batch;) {
      const int kind = pick({0, 0, 1, 2});  // a lone request, an empty one, a group
      if (kind == 2 && b + 2 <= batch) {
        const int count = 2 + int(rng() % uint32_t(std::min(4, batch - b - 1))), shared = pick({2, 40, 500}) * 128;
        for (int i = 0; i < count; ++i) lens.push_back(shared + pick({0, 1, 700, 9000}));
        groups.push_back({b, count, shared});
        b += count;
      } else {
        lens.push_back(kind == 1 ? 0 : 1 + int(rng() % 70000));
        ++b;
      }
    }
    in.kv_lens = lens;
    in.prefix_groups = groups;
    v.push_back(in);
  }
  return v;
}

}  // namespace

TEST_CASE("planner: plans into reused storage equal fresh plans, whatever came before", "[planner][cascade]") {
  // One scratch and one plan for every input in turn (batches growing, shrinking, with and
  // without groups): each result is the plan a fresh call makes.
  const auto all = varied_inputs();
  rt::PlanScratch scratch;
  rt::Plan p;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < all.size(); ++i) {
      const size_t k = pass == 0 ? i : all.size() - 1 - i;  // and in the reverse order
      INFO("input " << k << " pass " << pass);
      rt::plan_decode(all[k], p, scratch);
      const rt::Plan fresh = rt::plan_decode(all[k]);
      CHECK(plan_image(p) == plan_image(fresh));
      check_any_plan(all[k], p);
    }
  // A bad input throws before the plan changes.
  rt::PlanInputs bad = all[0];
  bad.tile_tokens = 0;
  const std::string before = plan_image(p);
  CHECK_THROWS_WITH(rt::plan_decode(bad, p, scratch), Contains("tile_tokens = 0"));
  CHECK(plan_image(p) == before);
}

TEST_CASE("planner: a second update at the same capacity allocates nothing", "[planner][cascade]") {
  // The counter sees allocations in its window.
  {
    AllocWindow w;
    std::vector<int> v(10);
    CHECK(w.close() == 1);
  }
  // Decode steps of mlaplanbench's kinds of batch, plus empty requests and two groups: the first
  // update sizes the storage, the next ones (every request a token longer, then 131 tokens)
  // allocate nothing, and still plan what a fresh call plans.
  std::vector<std::pair<std::string, rt::PlanInputs>> cases;
  for (const auto& s : golden::bench_shapes())
    if (s.name == "K3 c16 pg128 group given" || s.name == "K3 c24 pg1" || s.name == "K3 c24 pg1 group detected" ||
        s.name == "seed001 32K x16" || s.name == "seed001 8K x256" || s.name == "K3 8K x64 pg128")
      cases.emplace_back(s.name, s.in);
  rt::PlanInputs mixed = golden::k3_inputs(128);
  mixed.kv_lens = std::vector<int>{0, 70000, 70100, 70200, 0, 9000, 9100, 5, 0};
  mixed.prefix_groups = std::vector<rt::PrefixGroup>{{1, 3, 65536}, {5, 2, 8192}};
  cases.emplace_back("empty requests and two groups", mixed);
  rt::PlanInputs empty = golden::k3_inputs(1);
  cases.emplace_back("no requests", empty);
  for (auto& [name, base] : cases) {
    INFO(name);
    rt::PlanScratch scratch;
    rt::Plan p;
    std::vector<int> lens = base.kv_lens.to_vector();
    const std::vector<rt::PrefixGroup> groups = base.prefix_groups.to_vector();
    rt::PlanInputs in = base;
    in.kv_lens = std::span<const int>(lens);  // views: the update copies nothing
    in.prefix_groups = std::span<const rt::PrefixGroup>(groups);
    rt::plan_decode(in, p, scratch);
    for (int step = 1; step <= 8; ++step) {
      for (int& len : lens) len += len > 0 ? (step <= 4 ? 1 : 131) : 0;
      size_t allocations = 0;
      {
        AllocWindow w;
        rt::plan_decode(in, p, scratch);
        allocations = w.close();
      }
      INFO("step " << step);
      CHECK(allocations == 0);
      CHECK(plan_image(p) == plan_image(rt::plan_decode(in)));
    }
  }
}

TEST_CASE("planner: empty requests take no units and a reduce entry that merges nothing", "[planner][cascade]") {
  // 0 = an empty request (no KV yet): no unit reads it, its split count is 0, and its reduce
  // entry {b * qseqlen, 0, 0, 1, 0} (in request order) makes the reduce write o = 0, lse = -inf.
  for (int qs : {1, 3}) {
    rt::PlanInputs in = inputs({0, 50000, 0, 300, 3000, 0}, 16, 64, qs);
    const rt::Plan p = rt::plan_decode(in);
    INFO("qseqlen " << qs << " " << p.to_json().dump());
    check_plan(in, p);
    check_any_plan(in, p);
    for (const auto& u : p.units) CHECK((u.batch != 0 && u.batch != 2 && u.batch != 5));
    CHECK(p.splits[0] == 0);
    CHECK(p.splits[2] == 0);
    CHECK(p.splits[5] == 0);
    std::vector<int> entry_rows;
    for (const auto& r : p.reduces) entry_rows.push_back(r.qo_row);
    CHECK(std::is_sorted(entry_rows.begin(), entry_rows.end()));  // request order
    size_t empties = 0;
    for (const auto& r : p.reduces)
      if (r.num_splits == 0) {
        ++empties;
        CHECK((r.qo_row == 0 || r.qo_row == 2 * qs || r.qo_row == 5 * qs));
        CHECK((r.first_partial == 0 && r.partial_stride == 1 && r.bf16_splits == 0));
      }
    CHECK(empties == 3);
    // The other requests are planned as the batch without the empty ones: the same units (request
    // indices and q rows shifted; page bases equal, an empty request holds no page), the same
    // slots, and the cost plus the empty requests' final rows (3 x M x 1024 bytes over the CUs).
    rt::PlanInputs dense = inputs({50000, 300, 3000}, 16, 64, qs);
    const rt::Plan d = rt::plan_decode(dense);
    const int index[] = {1, 3, 4};
    REQUIRE(p.units.size() == d.units.size());
    for (size_t i = 0; i < p.units.size(); ++i) {
      rt::WorkUnit u = d.units[i];
      u.batch = index[u.batch];
      u.qo_row = u.batch * qs;
      CHECK(std::memcmp(&u, &p.units[i], sizeof u) == 0);
    }
    CHECK(p.num_partials == d.num_partials);
    CHECK(p.cu_tokens == d.cu_tokens);
    CHECK(p.predicted_cost == Approx(d.predicted_cost + 3.0 * 16 * qs * 1024 / 576 / 64).epsilon(1e-12));
  }
  // Every request empty: no unit, one entry per request. No request at all: an empty plan.
  rt::PlanInputs all_empty = inputs({0, 0, 0}, 16, 304);
  rt::Plan p = rt::plan_decode(all_empty);
  check_plan(all_empty, p);
  CHECK(p.units.empty());
  CHECK(p.prefix_units.empty());
  CHECK(p.splits == std::vector<int>{0, 0, 0});
  REQUIRE(p.reduces.size() == 3);
  for (int b = 0; b < 3; ++b) {
    const auto& r = p.reduces[size_t(b)];
    CHECK((r.qo_row == b && r.first_partial == 0 && r.num_splits == 0 && r.partial_stride == 1 && r.bf16_splits == 0));
  }
  CHECK(p.num_partials == 0);
  CHECK(p.cus_used == 0);
  p = rt::plan_decode(inputs({}, 16, 304));
  CHECK(p.units.empty());
  CHECK(p.prefix_units.empty());
  CHECK(p.reduces.empty());
  CHECK(p.splits.empty());
  CHECK(p.num_partials == 0);
  CHECK(p.predicted_cost == 0.0);
  CHECK(p.to_json()["reduce_entries"] == 0);
}

TEST_CASE("planner cascade: empty requests beside a group neither join it nor keep its one launch from it", "[planner][cascade]") {
  // K3-like members with empty requests around them: the group still cascades in one attention
  // launch at qseqlen 1 (every request with tokens is a member), the empty requests get their
  // entries, and page bases skip them (0 pages).
  rt::PlanInputs in = k3_like();
  std::vector<int> lens{0};
  for (int b = 0; b < 16; ++b) lens.push_back(68000);
  lens.push_back(0);
  in.kv_lens = lens;
  in.prefix_groups = {{1, 16, 63872}};
  const rt::Plan p = rt::plan_decode(in);
  INFO(p.to_json().dump());
  check_any_plan(in, p);
  check_choice(p);
  REQUIRE(p.prefix_groups.at(0).cascade);
  CHECK(p.units.empty());  // one attention launch
  CHECK(p.reduces.size() == 18);
  CHECK(p.reduces.front().num_splits == 0);
  CHECK(p.reduces.back().num_splits == 0);
  CHECK(p.splits.front() == 0);
  CHECK(p.splits.back() == 0);
  for (const auto& u : p.prefix_units) CHECK(u.page_base == (u.first_request - 1) * (68000 / 128 + 1));
  // A group that names an empty request is refused.
  in.prefix_groups = {{0, 3, 128}};
  CHECK_THROWS_WITH(rt::plan_decode(in), Contains("request 0 is empty (kv_lens[0] = 0)"));
}

TEST_CASE("prefix groups: detection into a reused vector and the groups' check allocate nothing", "[prefix]") {
  const int batch = 24, page = 1, stride = 70000;
  std::vector<int> lens;
  for (int b = 0; b < batch; ++b) lens.push_back(68430 + b % 5);
  std::vector<int32_t> table(size_t(batch) * size_t(stride));
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < stride; ++i) table[size_t(b) * size_t(stride) + size_t(i)] = i < 63911 ? i : 63911 + b * stride + i;
  std::vector<rt::PrefixGroup> groups;
  rt::detect_prefix_groups(lens, page, 1, 32, rt::PageTableView{table.data(), stride}, groups);
  REQUIRE(groups == std::vector<rt::PrefixGroup>{{0, batch, 63904}});
  size_t allocations = 0;
  {
    AllocWindow w;
    rt::detect_prefix_groups(lens, page, 1, 32, rt::PageTableView{table.data(), stride}, groups);
    rt::check_prefix_groups(groups, lens, page, 1);
    allocations = w.close();
  }
  CHECK(allocations == 0);
  CHECK(groups == std::vector<rt::PrefixGroup>{{0, batch, 63904}});
}

// The C API plans into a workspace sized once (workspace_layout): it must hold the cascade the
// cost model chooses at Kimi-K3 c16 and c24 (the catalog's gfx950 figures of 2026-12-06: fp8,
// 12 heads, page 128, 96-row prefix kernel, 2 decode workgroups per CU), or serving falls back to
// the per-request plan, 4x slower (modeled).
TEST_CASE("planner inputs: the runtime's workspace holds K3's cascade", "[planner][cascade]") {
  rt::SelectedKernels k;
  k.kheads = 12, k.kqseqlen = 1, k.page_size = 128;
  k.q_dtype = k.kv_dtype = rt::DType::fp8;
  k.decode.name = "mla_decode_k3", k.decode.target = "gfx950";
  k.decode.launch.tile_tokens = 32, k.decode.launch.rows_per_group = 16, k.decode.launch.partial_o_bytes = 4;
  k.decode.resident_workgroups_per_cu = 2;
  rt::IssueModel im;
  im.cycles_per_block_tile = 1092, im.lds_clocks_per_block_tile = 220, im.lds_clocks_per_tile = 148;
  im.clock_hz = 2.4e9, im.little_latency_s = 2e-6, im.cu_port_bytes_per_clk = 64, im.unit_fill_s = 1e-6;
  im.hbm_bytes_per_s = 6.09e12, im.producer_inflight_bytes = 37376;
  k.decode.issue_model = im;
  k.prefix = rt::CatalogKernel{};
  k.prefix->name = "mla_prefix_k3", k.prefix->target = "gfx950";
  k.prefix->launch.rows_per_group = 96, k.prefix->launch.partial_o_bytes = 2, k.prefix->launch.tile_tokens = 32;
  k.prefix->resident_workgroups_per_cu = 1;
  im.producer_inflight_bytes = 129024;
  k.prefix->issue_model = im;
  for (int count : {16, 24}) {
    std::vector<int> lens;
    for (int b = 0; b < count; ++b) lens.push_back(68430 + b % 5);
    const rt::WorkspaceLayout ws = rt::workspace_layout(k, count, 0, 256, 0);
    rt::PlanInputs in = rt::plan_inputs_for(k, lens, 256, 0);
    in.max_units = int64_t(ws.max_units), in.max_partials = int64_t(ws.max_partials);
    in.prefix_groups = {{0, count, 63872}};
    const rt::Plan p = rt::plan_decode(in);
    INFO("c" << count << ": " << p.prefix_groups.at(0).to_json().dump() << ", workspace " << ws.max_units
             << " units, " << ws.max_partials << " partials");
    check_any_plan(in, p);
    CHECK(p.prefix_groups.at(0).cascade);
    CHECK(p.units.size() + p.prefix_units.size() <= ws.max_units);
    CHECK(size_t(p.num_partials) <= ws.max_partials);
  }
}

// A decode kernel's producer issue (cost_model.h producer_per_tile; fp8_ds_mla's dequantising
// producer, docs/sparse.md): where it binds, a unit's cost is its tiles' issue, the HBM floor no
// longer lets CUs idle, and the plan spreads the tiles over every CU; below the tile's token time
// it changes nothing (the dense kernels' producers).
TEST_CASE("planner: a binding producer spreads the work over every CU, one below the tile time changes nothing",
          "[planner]") {
  rt::PlanInputs in = inputs(std::vector<int>(64, 2048), 16, 304);
  in.unit_fill = 40, in.hbm_factor = 1.5;  // the HBM floor binds first: fewer CUs get work
  const rt::Plan memory = rt::plan_decode(in);
  check_plan(in, memory);
  CHECK(memory.cus_used < 304);
  in.producer_per_tile = 0.5 * in.tile_tokens;  // below a tile's token time: the same plan
  const rt::Plan cheap = rt::plan_decode(in);
  CHECK(cheap.unit_ranges == memory.unit_ranges);
  CHECK(cheap.cu_tokens == memory.cu_tokens);
  in.producer_per_tile = 4.0 * in.tile_tokens;  // 4x a tile's token time: issue-bound
  const rt::Plan bound = rt::plan_decode(in);
  check_plan(in, bound);
  INFO(bound.to_json().dump());
  CHECK(bound.cus_used >= 300);
  in.producer_per_tile = -1;
  CHECK_THROWS_WITH(rt::plan_decode(in), Catch::Contains("producer_per_tile = -1 (allowed: a finite number >= 0)"));
}
