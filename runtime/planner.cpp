#include "runtime/planner.h"

#include "runtime/problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <queue>
#include <stdexcept>

namespace mla::rt {

namespace {

void check_inputs(const PlanInputs& in) {
  auto fail = [](const std::string& msg) { throw std::invalid_argument("plan_decode: " + msg); };
  if (in.kv_lens.empty()) fail("kv_lens is empty (allowed: one entry per request, at least one request)");
  if (in.qseqlen < 1) fail(fmt::format("qseqlen = {} (allowed: >= 1)", in.qseqlen));
  if (in.heads < 1) fail(fmt::format("heads = {} (allowed: >= 1)", in.heads));
  if (in.page_size < 1) fail(fmt::format("page_size = {} (allowed: >= 1)", in.page_size));
  if (in.num_cus < 1) fail(fmt::format("num_cus = {} (allowed: >= 1)", in.num_cus));
  if (in.workgroups_per_cu < 1) fail(fmt::format("workgroups_per_cu = {} (allowed: >= 1)", in.workgroups_per_cu));
  if (in.tile_tokens < 1) fail(fmt::format("tile_tokens = {} (allowed: >= 1)", in.tile_tokens));
  if (in.rows_per_group < 1) fail(fmt::format("rows_per_group = {} (allowed: >= 1, 16 * consumer waves)", in.rows_per_group));
  if (in.min_tiles_per_split < 1) fail(fmt::format("min_tiles_per_split = {} (allowed: >= 1)", in.min_tiles_per_split));
  if (in.kv_bytes_per_token < 1) fail(fmt::format("kv_bytes_per_token = {} (allowed: >= 1)", in.kv_bytes_per_token));
  if (in.max_rounds < 1) fail(fmt::format("max_rounds = {} (allowed: >= 1)", in.max_rounds));
  for (size_t b = 0; b < in.kv_lens.size(); ++b)
    if (in.kv_lens[b] < in.qseqlen)
      fail(fmt::format("kv_lens[{}] = {} < qseqlen = {} (allowed: kv_len >= qseqlen)", b, in.kv_lens[b], in.qseqlen));
  try {
    check_prefix_groups(in.prefix_groups, in.kv_lens, in.page_size, in.qseqlen);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

// Everything a candidate plan is built from.
struct Shape {
  const PlanInputs& in;
  int batch, M, G;
  std::vector<int> tiles;  // ceil(kv_len / T)
  std::vector<int> cap;    // most splits per request
  int rows_in_group(int g) const { return std::min(in.rows_per_group, M - g * in.rows_per_group); }
};

// Token ranges of request b cut into `s` splits of whole tiles, sizes differing by at most one
// tile (the larger ones last). If the last split would hold fewer than qseqlen tokens (possible
// only with 1-tile splits and a short last tile), fewer splits are used: then every split has a
// token visible to every query row, so no partial row is empty.
std::vector<std::pair<int, int>> cut_request(const Shape& sh, int b, int s) {
  const int T = sh.in.tile_tokens, len = sh.in.kv_lens[b], n = sh.tiles[b];
  for (;; --s) {
    std::vector<std::pair<int, int>> r;
    int base = n / s, extra = n % s, tile = 0;
    for (int j = 0; j < s; ++j) {
      int nt = base + (j >= s - extra ? 1 : 0);
      r.emplace_back(tile * T, int(std::min<int64_t>(len, int64_t(tile + nt) * T)));
      tile += nt;
    }
    if (s == 1 || r.back().second - r.back().first >= sh.in.qseqlen) return r;
  }
}

// Split counts for about `slots` units: start from one split per request, then repeatedly give
// one more split to the request whose current splits are longest (largest tokens / split), so
// unit sizes even out across requests. Each increment adds G units (one per row group).
std::vector<int> apportion(const Shape& sh, int64_t slots) {
  std::vector<int> s(sh.batch, 1);
  int64_t units = int64_t(sh.batch) * sh.G;
  using Item = std::pair<double, int>;  // (tokens per split, request)
  std::priority_queue<Item> heap;
  for (int b = 0; b < sh.batch; ++b)
    if (sh.cap[b] > 1) heap.emplace(double(sh.in.kv_lens[b]), b);
  while (!heap.empty() && units + sh.G <= slots) {
    auto [size, b] = heap.top();
    heap.pop();
    ++s[b];
    units += sh.G;
    if (s[b] < sh.cap[b]) heap.emplace(double(sh.in.kv_lens[b]) / s[b], b);
  }
  return s;
}

struct Candidate {
  std::vector<int> splits;
  std::vector<WorkUnit> units;  // launch order
  std::vector<int64_t> cu_tokens;
  std::vector<int> cu_units;
  double cost = 0.0;
};

// Builds the units of the given split counts, assigns them to CUs and orders them for launch.
//
// Model: the dispatcher hands workgroup i to CU i mod C (round-robin in launch order). So the
// launch order is built in rounds of C units, one unit per CU per round: units are sorted
// longest first and, within each round, the longest unit of the round goes to the CU with the
// least work so far (LPT restricted to one unit per CU per round); long and short units
// interleave and per-CU sums even out. Only the last round may be partial: the CUs it feeds are
// relabelled 0..n-1 so that position i of that round still lands on CU i mod C.
Candidate build(const Shape& sh, std::vector<int> splits) {
  const PlanInputs& in = sh.in;
  const int C = in.num_cus;
  Candidate c;
  struct Raw {
    WorkUnit u;
    int tokens;
  };
  std::vector<Raw> raw;
  int first_partial = 0, page_base = 0;
  for (int b = 0; b < sh.batch; ++b) {
    auto ranges = cut_request(sh, b, splits[b]);
    splits[b] = int(ranges.size());
    for (int j = 0; j < splits[b]; ++j)
      for (int g = 0; g < sh.G; ++g) {
        WorkUnit u{b * in.qseqlen, page_base, ranges[j].first, ranges[j].second, in.kv_lens[b],
                   splits[b] == 1 ? -1 : first_partial + j, g, b};
        raw.push_back({u, ranges[j].second - ranges[j].first});
      }
    if (splits[b] > 1) first_partial += splits[b];
    page_base += (in.kv_lens[b] + in.page_size - 1) / in.page_size;
  }
  c.splits = std::move(splits);

  std::stable_sort(raw.begin(), raw.end(), [](const Raw& a, const Raw& b) { return a.tokens > b.tokens; });
  const int N = int(raw.size());
  const int rounds = (N + C - 1) / C;
  std::vector<int64_t> load(C, 0);
  std::vector<int> cu_order(C);
  std::vector<std::vector<int>> round_cu(rounds);  // round_cu[r][j]: CU of the j-th unit of round r
  for (int r = 0; r < rounds; ++r) {
    std::iota(cu_order.begin(), cu_order.end(), 0);
    std::stable_sort(cu_order.begin(), cu_order.end(), [&](int a, int b) { return load[a] < load[b]; });
    int n = std::min(C, N - r * C);
    for (int j = 0; j < n; ++j) {
      int cu = cu_order[j];
      load[cu] += raw[r * C + j].tokens;
      round_cu[r].push_back(cu);
    }
  }
  // Labels: CUs fed by the (possibly partial) last round first, in that round's order.
  std::vector<int> label(C, -1);
  int next = 0;
  for (int cu : round_cu[rounds - 1]) label[cu] = next++;
  for (int cu = 0; cu < C; ++cu)
    if (label[cu] < 0) label[cu] = next++;
  c.units.resize(N);
  c.cu_tokens.assign(C, 0);
  c.cu_units.assign(C, 0);
  std::vector<double> cu_time(C, 0.0);
  const double unit_bytes_per_row_partial = 512.0 * 4 + 4;  // partial o row + lse
  const double unit_bytes_per_row_final = 512.0 * 2;        // bf16 o row
  for (int r = 0; r < rounds; ++r)
    for (size_t j = 0; j < round_cu[r].size(); ++j) {
      const Raw& x = raw[r * C + j];
      int cu = label[round_cu[r][j]];
      c.units[size_t(r) * C + cu] = x.u;
      c.cu_tokens[cu] += x.tokens;
      c.cu_units[cu] += 1;
      double row_bytes = x.u.partial >= 0 ? unit_bytes_per_row_partial : unit_bytes_per_row_final;
      cu_time[cu] += x.tokens + sh.rows_in_group(x.u.row_group) * row_bytes / in.kv_bytes_per_token;
    }
  // A CU running fewer workgroups than it can hold streams at a proportionally lower rate
  // (fewer loads in flight): time = work * wpc / min(units, wpc).
  double worst = 0.0;
  for (int cu = 0; cu < C; ++cu) {
    if (c.cu_units[cu] == 0) continue;
    double occ = double(std::min(c.cu_units[cu], in.workgroups_per_cu)) / in.workgroups_per_cu;
    worst = std::max(worst, cu_time[cu] / occ);
  }
  // The reduce kernel reads every partial and writes the final rows, spread over all CUs.
  double reduce_bytes = 0.0;
  for (int b = 0; b < sh.batch; ++b)
    if (c.splits[b] > 1) reduce_bytes += double(c.splits[b]) * sh.M * unit_bytes_per_row_partial + sh.M * unit_bytes_per_row_final;
  c.cost = worst + reduce_bytes / in.kv_bytes_per_token / C;
  return c;
}

}  // namespace

int64_t Plan::total_tokens() const {
  int64_t t = 0;
  for (const auto& u : units) t += u.kv_end - u.kv_start;
  return t;
}

nlohmann::json Plan::to_json() const {
  int64_t mx = 0, mn = cu_tokens.empty() ? 0 : cu_tokens[0];
  for (int64_t t : cu_tokens) {
    mx = std::max(mx, t);
    mn = std::min(mn, t);
  }
  int max_units = cu_units.empty() ? 0 : *std::max_element(cu_units.begin(), cu_units.end());
  int split_requests = int(reduces.size());
  return nlohmann::json{
      {"units", units.size()},
      {"reduce_entries", reduces.size()},
      {"split_requests", split_requests},
      {"num_partials", num_partials},
      {"partial_bytes", partial_o_bytes() + partial_lse_bytes()},
      {"rows", rows},
      {"row_groups", row_groups},
      {"rows_per_group", rows_per_group},
      {"tile_tokens", tile_tokens},
      {"num_cus", num_cus},
      {"cus_used", cus_used},
      {"splits", splits},
      {"total_tokens", total_tokens()},
      {"cu_tokens_max", mx},
      {"cu_tokens_min", mn},
      {"cu_tokens_mean", num_cus ? double(total_tokens()) / num_cus : 0.0},
      {"cu_units_max", max_units},
      {"balance", balance},
      {"predicted_cost_tokens", predicted_cost},
      {"prefix_groups", [&] {
         nlohmann::json g = nlohmann::json::array();
         for (const CascadeDecision& d : prefix_groups) g.push_back(d.to_json());
         return g;
       }()},
  };
}

Plan plan_decode(const PlanInputs& in) {
  check_inputs(in);
  Shape sh{in, int(in.kv_lens.size()), in.heads * in.qseqlen, 0, {}, {}};
  sh.G = (sh.M + in.rows_per_group - 1) / in.rows_per_group;
  const int64_t C = in.num_cus;
  auto caps = [&](int min_tiles) {
    int64_t units = 0;
    for (int b = 0; b < sh.batch; ++b) {
      sh.cap[b] = std::max(1, sh.tiles[b] / min_tiles);
      units += int64_t(sh.cap[b]) * sh.G;
    }
    return units;
  };
  sh.tiles.resize(sh.batch);
  sh.cap.resize(sh.batch);
  for (int b = 0; b < sh.batch; ++b) sh.tiles[b] = (in.kv_lens[b] + in.tile_tokens - 1) / in.tile_tokens;
  // Every CU should get work: if the preferred minimum split length leaves CUs idle, allow
  // single-tile splits.
  if (caps(in.min_tiles_per_split) < C) caps(1);

  // Candidates: k units per CU for k = floor(B*G / C) (no split when the batch already fills the
  // GPU) up to max_rounds more; the cheapest by the cost model wins, ties to fewer units.
  const int64_t k_lo = std::max<int64_t>(1, int64_t(sh.batch) * sh.G / C);
  Candidate best;
  bool have = false;
  std::vector<int> prev;
  for (int64_t k = k_lo; k <= k_lo + in.max_rounds; ++k) {
    std::vector<int> s = apportion(sh, k * C);
    if (have && s == prev) {
      // Saturated: no more splits possible; larger k changes nothing.
      if (std::accumulate(s.begin(), s.end(), int64_t(0)) * sh.G < k * C) break;
      continue;
    }
    prev = s;
    Candidate c = build(sh, std::move(s));
    if (!have || c.cost < best.cost * (1.0 - 1e-9)) {
      best = std::move(c);
      have = true;
    }
  }

  Plan p;
  p.rows = sh.M;
  p.row_groups = sh.G;
  p.rows_per_group = in.rows_per_group;
  p.tile_tokens = in.tile_tokens;
  p.num_cus = in.num_cus;
  p.units = std::move(best.units);
  p.splits = std::move(best.splits);
  p.cu_tokens = std::move(best.cu_tokens);
  p.cu_units = std::move(best.cu_units);
  p.predicted_cost = best.cost;
  int first = 0;
  for (int b = 0; b < sh.batch; ++b)
    if (p.splits[b] > 1) {
      p.reduces.push_back({b * in.qseqlen, first, p.splits[b], 1});
      first += p.splits[b];
    }
  p.num_partials = first;
  int64_t mx = 0, sum = 0;
  for (int cu = 0; cu < in.num_cus; ++cu) {
    mx = std::max(mx, p.cu_tokens[cu]);
    sum += p.cu_tokens[cu];
    p.cus_used += p.cu_units[cu] > 0;
  }
  p.balance = sum > 0 ? double(mx) * in.num_cus / double(sum) : 1.0;
  CascadeInputs ci{.heads = in.heads,
                   .qseqlen = in.qseqlen,
                   .kv_bytes_per_token = in.kv_bytes_per_token,
                   .num_cus = in.num_cus,
                   .prefix_units_available = in.prefix_units_available};
  for (const PrefixGroup& g : in.prefix_groups) {
    p.prefix_groups.push_back(decide_cascade(g, ci));
    if (p.prefix_groups.back().cascade)
      throw std::logic_error("plan_decode: prefix work units are not built yet (docs/shared-prefix.md)");
  }
  return p;
}

std::vector<int> kv_lens_of(const Problem& p) {
  std::vector<int> v(p.batch());
  for (int b = 0; b < p.batch(); ++b) v[b] = p.kv_len(b);
  return v;
}

PlanInputs plan_inputs_of(const Problem& p) {
  PlanInputs in;
  in.kv_lens = kv_lens_of(p);
  in.qseqlen = p.qseqlen;
  in.heads = p.heads;
  in.page_size = p.page_size;
  in.kv_bytes_per_token = kQkDim * elem_bytes(p.kv_dtype);
  return in;
}

}  // namespace mla::rt
