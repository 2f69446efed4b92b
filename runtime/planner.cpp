#include "runtime/planner.h"

#include "runtime/cost_model.h"
#include "runtime/problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

namespace mla::rt {

namespace {

void check_inputs(const PlanInputs& in) {
  auto fail = [](const std::string& msg) { throw std::invalid_argument("plan_decode: " + msg); };
  auto at_least = [&](const char* name, int64_t v, int64_t lo, const char* also = "") {
    if (v < lo) fail(fmt::format("{} = {} (allowed: >= {}{})", name, v, lo, also));
  };
  at_least("qseqlen", in.qseqlen, 1);
  at_least("heads", in.heads, 1);
  at_least("page_size", in.page_size, 1);
  if (in.num_cus < 1 || in.num_cus > 65536) fail(fmt::format("num_cus = {} (allowed: 1..65536)", in.num_cus));
  at_least("num_xcds", in.num_xcds, 1);
  at_least("workgroups_per_cu", in.workgroups_per_cu, 1);
  at_least("tile_tokens", in.tile_tokens, 1);
  at_least("rows_per_group", in.rows_per_group, 1, ", 16 * consumer waves");
  at_least("kv_bytes_per_token", in.kv_bytes_per_token, 1);
  at_least("q_row_bytes", in.q_row_bytes, 0);
  at_least("prefix_rows_per_group", in.prefix_rows_per_group, 0, ", 0 = no prefix kernel");
  at_least("prefix_workgroups_per_cu", in.prefix_workgroups_per_cu, 1);
  at_least("max_units", in.max_units, 0, ", 0 = unlimited");
  at_least("max_partials", in.max_partials, 0, ", 0 = unlimited");
  if (in.merge_in_launch && in.cascade != CascadePolicy::never)
    fail("merge_in_launch with cascades allowed (allowed: cascade never; a cascade's prefix partials are merged by the "
         "reduce launch)");
  if (in.prefix_partial_o_bytes != 2 && in.prefix_partial_o_bytes != 4)
    fail(fmt::format("prefix_partial_o_bytes = {} (allowed: 2 for bf16 partials, 4 for f32)", in.prefix_partial_o_bytes));
  // A cascade's entry lists its prefix partials first: bf16 ones can only precede f32 ones.
  if (in.partial_o_bytes != 4 && (in.partial_o_bytes != 2 || (in.prefix_rows_per_group > 0 && in.prefix_partial_o_bytes != 2)))
    fail(fmt::format("partial_o_bytes = {} with prefix_partial_o_bytes = {} (allowed: 4, or 2 with no prefix kernel or "
                     "a bf16 one)", in.partial_o_bytes, in.prefix_partial_o_bytes));
  for (auto [name, v] : {std::pair<const char*, double>{"unit_fill", in.unit_fill},
                         {"hbm_factor", in.hbm_factor},
                         {"producer_per_tile", in.producer_per_tile},
                         {"prefix_issue_per_block_tile", in.prefix_issue_per_block_tile},
                         {"prefix_lds_per_block_tile", in.prefix_lds_per_block_tile},
                         {"prefix_lds_per_tile", in.prefix_lds_per_tile},
                         {"prefix_hbm_factor", in.prefix_hbm_factor},
                         {"prefix_unit_fill", in.prefix_unit_fill},
                         {"prefix_prologue_per_row", in.prefix_prologue_per_row},
                         {"prefix_store_factor", in.prefix_store_factor}})
    if (!(v >= 0) || !std::isfinite(v)) fail(fmt::format("{} = {} (allowed: a finite number >= 0)", name, v));
  if (in.prefix_blocks_per_wave < 1 || (in.prefix_blocks_per_wave > 1 &&
                                       (in.prefix_wave_tile_issue.size() != size_t(in.prefix_blocks_per_wave) ||
                                        in.prefix_wave_tile_lds.size() != size_t(in.prefix_blocks_per_wave))))
    fail(fmt::format("prefix_blocks_per_wave = {} with {} / {} wave-tile figures (allowed: 1, or b > 1 with b issue and "
                     "b LDS figures)",
                     in.prefix_blocks_per_wave, in.prefix_wave_tile_issue.size(), in.prefix_wave_tile_lds.size()));
  for (const auto* v : {&in.prefix_wave_tile_issue, &in.prefix_wave_tile_lds})
    for (double x : *v)
      if (!(x > 0) || !std::isfinite(x)) fail(fmt::format("a prefix wave-tile figure = {} (allowed: finite, > 0)", x));
  if ((in.prefix_prologue_per_row > 0) != (in.prefix_store_factor > 0) ||
      (in.prefix_store_factor > 0 && (in.prefix_workgroups_per_cu != 1 || !(in.prefix_issue_per_block_tile > 0))))
    fail(fmt::format("prefix_prologue_per_row = {}, prefix_store_factor = {} with prefix_workgroups_per_cu = {} (allowed: "
                     "both 0, or both > 0 with one prefix workgroup per CU and the issue model)",
                     in.prefix_prologue_per_row, in.prefix_store_factor, in.prefix_workgroups_per_cu));
  if ((in.prefix_issue_per_block_tile > 0) != (in.prefix_hbm_factor > 0))
    fail(fmt::format("prefix_issue_per_block_tile = {} and prefix_hbm_factor = {} (allowed: both > 0, the prefix "
                     "launch's issue model, or both 0, none)",
                     in.prefix_issue_per_block_tile, in.prefix_hbm_factor));
  for (size_t b = 0; b < in.kv_lens.size(); ++b)
    if (in.kv_lens[b] < 0 || (in.kv_lens[b] > 0 && in.kv_lens[b] < in.qseqlen))
      fail(fmt::format("kv_lens[{}] = {} < qseqlen = {} (allowed: 0, an empty request, or kv_len >= qseqlen)", b,
                       in.kv_lens[b], in.qseqlen));
  try {
    check_prefix_groups(in.prefix_groups, in.kv_lens, in.page_size, in.qseqlen);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

// A piece of work the walk cuts into token ranges: a whole request, a cascading member's unique
// part [start, kv_len), or a group's prefix [0, len) over all its members' rows (rows = count M).
// Each split of a job is one unit per row group, on neighbouring workgroups.
struct Job {
  enum Kind { request, unique, prefix } kind = request;
  int b = 0;            // the request (a prefix: the group's first request)
  int start = 0, end = 0, kv_len = 0, rows = 0, G = 1, tiles = 0;
  // A unit's cost model (cost_model.h, token-equivalents): fill + max(tiles x T + memory,
  // tiles x issue).
  double fill = 0, memory = 0, issue = 0, T = 1;
  double cost(int t) const { return fill + std::max(t * T + memory, t * issue); }
  int fit(double budget) const {  // the most tiles whose cost is within budget
    const double b = budget - fill + 1e-9 * std::max(1.0, budget);
    return int(std::floor(std::min((b - memory) / T, issue > 0 ? b / issue : 1e18)));
  }
  // k pieces of all its tiles (the walk's estimate of a job cut k ways).
  double cost_cut(double k) const { return k * fill + std::max(tiles * T + k * memory, tiles * issue); }
  int splits = 0, slot = -1, stride = 1;  // after the walk: pieces; partial slot of split 0, stride
  bool causal() const { return kind != prefix; }
  bool partial() const { return kind != request || splits > 1; }
};
struct Piece {
  int job, t0, t1, split, slot;  // tiles [t0, t1) of the job; its first workgroup in walk order
};

// One launch: its jobs, cost model and grid, and what the walk made of them.
struct Launch {
  LaunchModel m;
  int cus = 1, wpc = 1, xcds = 1;
  std::vector<Job> jobs;
  std::vector<Piece> pieces;
  std::vector<int> order;      // walk position -> workgroup
  std::vector<int> base, deferred;  // the workgroups in XCD order; those a gang skipped
  std::vector<double> cu_load;  // per CU, token-equivalents (the walk's, price's)
  std::vector<double> rem;      // per walk position: payload left
  std::vector<int> job_order;   // the walk's order of the jobs: most row groups first
  std::vector<double> cum;      // the running total of their work before each, as a fraction
  double cost = 0, hbm_tokens = 0;
  double payload = 0, cmax = 0, estimate = 0, partial_bytes = 0;  // prepare(): the walk's payload, its price
  int narrowest = 1;
  int slots() const { return cus * wpc; }
};

// How many CUs get work: all, unless the launch's HBM floor binds first. Then the CUs' time
// (the work over a CUs, plus a cut's fixed cost per workgroup) meets the floor (the distinct
// tokens and rows moved, plus a partial per workgroup): the root a* of A a^2 + B a - W = 0. The
// reduce then waits on the most-split job's rounds (a step in its splits): the largest a below
// a* with one round fewer is taken when the model prices it lower.
int active_cus(const Launch& L, double work, double fixed, double distinct, double partial) {
  if (L.m.hbm_factor <= 0) return L.cus;
  const double A = L.m.hbm_factor * L.wpc * partial / L.cus, B = L.m.hbm_factor * distinct / L.cus - L.wpc * fixed;
  const double root = A > 0 ? (-B + std::sqrt(B * B + 4 * A * work)) / (2 * A) : B > 0 ? work / B : L.cus;
  const int a = std::clamp(int(std::ceil(root)), 1, L.cus);
  // The most-split job's splits: the gangs its stretch of the running total [cum[i], cum[i + 1])
  // touches (the walk's cuts track the running total).
  auto splits = [&](int cus) {
    int most = 0;
    for (size_t i = 0; i + 1 < L.cum.size(); ++i) {
      const double gangs = double(cus) * L.wpc / L.jobs[size_t(L.job_order[i])].G;
      most = std::max(most, int(std::ceil(L.cum[i + 1] * gangs - 1e-6) - std::floor(L.cum[i] * gangs + 1e-6)));
    }
    return most;
  };
  auto time = [&](int cus) {
    return std::max(work / cus + L.wpc * fixed, L.m.floor(distinct + cus * L.wpc * partial, L.cus)) +
           L.m.reduce_time(splits(cus));
  };
  // The reduce's rounds step every 128 splits (LaunchModel::reduce_rounds): the most-split job at
  // the last multiple of 128 below its count takes a round fewer.
  const int most = splits(a), fewer = (most - 1) / 128 * 128;
  if (fewer < 128) return a;
  int below = std::max(1, int(int64_t(a) * fewer / most));  // the most CUs with at most `fewer`
  while (below > 1 && splits(below) > fewer) --below;
  while (below + 1 < a && splits(below + 1) <= fewer) ++below;
  return below < a && time(below) < time(a) ? below : a;
}

// One pass of the walk (FlashMLA's) at `payload` per workgroup: each gang in turn takes whole
// jobs while they fit and then cuts the next at the last tile that fits. A job of G row groups
// runs on G neighbouring workgroups of one XCD at once (a gang), which share one payload; gangs
// narrow only (jobs by row groups, widest first), so a narrower job continues inside a wider
// gang's workgroups. What a gang leaves unused (less than a tile) carries to the next, so that
// the cuts track the running total. Returns the work the workgroups took past their payload.
double cut(Launch& L, double payload, int qseqlen, int narrowest, double cmax) {
  L.pieces.clear(), L.order.clear(), L.deferred.clear(), L.rem.clear();
  L.cu_load.assign(size_t(L.cus), 0.0);
  for (Job& j : L.jobs) j.splits = 0;
  const int n = int(L.base.size()), X = L.cus % L.xcds == 0 ? L.xcds : 1;
  const double eps = 1e-9 * payload;
  size_t next = 0, next_deferred = 0;  // into base and deferred
  auto left = [&] { return int(n - next + L.deferred.size() - next_deferred); };
  auto append = [&](int w) {  // the next w workgroups; a gang that would cross into the next XCD
    // starts there when narrower jobs follow, which take the workgroups it skipped
    auto xcd = [&](size_t i) { return L.base[i] % X; };
    if (w > narrowest)
      while (next + size_t(w) <= size_t(n) && xcd(next) != xcd(next + size_t(w) - 1)) L.deferred.push_back(L.base[next++]);
    for (int k = 0; k < w; ++k) {
      L.order.push_back(next < size_t(n) ? L.base[next++] : L.deferred[next_deferred++]);
      L.rem.push_back(payload);
    }
  };
  // Jobs all of one width never skip a workgroup: the walk's order is the base order.
  if (narrowest == std::min(L.jobs[size_t(L.job_order.front())].G, n)) {
    L.order.assign(L.base.begin(), L.base.end()), L.rem.assign(size_t(n), payload);
    next = size_t(n);
  }
  int s = 0;
  bool used = false;  // the current gang holds a piece
  for (const int ji : L.job_order) {
    Job& j = L.jobs[size_t(ji)];
    const int w = std::min(j.G, n), per = (j.G + w - 1) / w;  // units of a piece per workgroup
    // A causal job's last split keeps a token for every query row (no empty partial row): no
    // cut leaves one short last tile behind.
    auto hides_rows = [&](int at) { return j.causal() && at == j.tiles - 1 && j.end - (j.start + at * L.m.tile_tokens) < qseqlen; };
    for (int t = 0; t < j.tiles;) {
      const int have = int(L.order.size()) - s;
      if (have < w && left() >= w - have) append(w - have);
      if (int(L.order.size()) - s < w) s = int(L.order.size()) - w;  // out of workgroups: the last gang takes the rest
      const bool last_gang = int(L.order.size()) - s - w + left() < w;
      const double remain = L.rem[size_t(s)];
      const int rest = j.tiles - t;
      int take = rest;
      if (!last_gang && remain + eps < per * j.cost(rest)) {
        take = std::min(rest - 1, j.fit(remain / per));
        if (take >= 1 && hides_rows(t + take)) --take;
        if (take < 1 && !used) take = hides_rows(t + 1) ? rest : 1;  // a gang always takes a tile
      }
      if (take >= 1) {
        L.pieces.push_back({ji, t, t + take, j.splits++, s});
        const double c = per * j.cost(take);
        for (int k = 0; k < w; ++k) L.cu_load[size_t(L.order[size_t(s + k)] % L.cus)] += c, L.rem[size_t(s + k)] -= c;
        t += take, used = true;
      }
      if (t < j.tiles) {  // the next gang; a fresh one takes what this one left
        const double carry = std::clamp(L.rem[size_t(s)], 0.0, per * cmax);
        s += w;
        if (int(L.order.size()) - s < w && left() >= w - (int(L.order.size()) - s)) append(w - (int(L.order.size()) - s));
        used = s + w <= int(L.order.size()) && L.rem[size_t(s)] < payload - eps;  // inside a wider gang's workgroups
        for (int k = 0; !used && k < w && s + k < int(L.order.size()); ++k) L.rem[size_t(s + k)] += carry;
      }
    }
  }
  double over = 0;  // what the last gang took past its payload, over all its workgroups
  for (double r : L.rem) over += std::max(0.0, -r);
  return over;
}

// Prepares a launch's walk: how many CUs get work, the walk order of its workgroups and jobs, and
// the payload, which prices the launch before any cut (the cascade decision compares these).
void prepare(Launch& L) {
  L.pieces.clear(), L.order.clear(), L.base.clear();
  L.cu_load.assign(size_t(L.cus), 0.0);
  double work = 0, fixed = 0, distinct = 0, partial = 0, cmax = 0;
  int narrowest = 1 << 30;
  L.estimate = L.partial_bytes = 0;
  for (Job& j : L.jobs) {
    work += j.G * j.cost(j.tiles), fixed = std::max(fixed, j.fill + j.memory), cmax = std::max({cmax, j.T, j.issue});
    distinct += (j.end - j.start) + j.rows * L.m.partial_row_bytes / L.m.kv_bytes_per_token;
    partial = std::max(partial, double(j.rows) / j.G * L.m.partial_row_bytes / L.m.kv_bytes_per_token);
    narrowest = std::min(narrowest, j.G);
    j.splits = 0;
  }
  L.hbm_tokens = distinct;
  if (L.jobs.empty()) return;
  L.job_order.resize(L.jobs.size());
  for (size_t ji = 0; ji < L.jobs.size(); ++ji) L.job_order[ji] = int(ji);
  std::sort(L.job_order.begin(), L.job_order.end(), [&](int x, int y) {  // (std::stable_sort allocates)
    return L.jobs[size_t(x)].G != L.jobs[size_t(y)].G ? L.jobs[size_t(x)].G > L.jobs[size_t(y)].G : x < y;
  });
  L.cum.assign(1, 0.0);  // the running total of the jobs' work in walk order, as a fraction
  for (const int ji : L.job_order) {
    const Job& j = L.jobs[size_t(ji)];
    L.cum.push_back(L.cum.back() + j.G * j.cost(j.tiles) / work);
  }
  // The workgroups of the active CUs XCD by XCD (workgroup x runs on CU x mod cus, XCD x mod
  // xcds), each CU's together.
  const int a = active_cus(L, work, fixed, distinct, partial), X = L.cus % L.xcds == 0 ? L.xcds : 1;
  for (int x = 0; x < X; ++x)
    for (int c = x; c < a; c += X)
      for (int k = 0; k < L.wpc; ++k) L.base.push_back(c + k * L.cus);
  const int n = int(L.base.size());
  // Storage for any lengths of this batch (each workgroup's walk cuts at most once): a later step
  // allocates nothing.
  L.pieces.reserve(L.jobs.size() + size_t(n)), L.order.reserve(size_t(n)), L.rem.reserve(size_t(n));
  L.deferred.reserve(size_t(n));
  // Each workgroup's share of the tiles and of the fixed costs of the pieces the walk will cut
  // (each job's gangs, from the running total).
  double total = 0;
  for (size_t i = 0; i < L.job_order.size(); ++i) {
    const Job& j = L.jobs[size_t(L.job_order[i])];
    const double gangs = double(n) / j.G;
    const double pieces = std::max(1.0, std::ceil(L.cum[i + 1] * gangs - 1e-6) - std::floor(L.cum[i] * gangs + 1e-6));
    total += j.G * j.cost_cut(pieces);
    if (j.kind != Job::request || pieces > 1) L.partial_bytes += pieces * j.rows * L.m.partial_row_bytes;
  }
  // Jobs all of one width w use whole gangs only: n rounded down to a multiple of w.
  int widest = 0;
  for (const Job& j : L.jobs) widest = std::max(widest, std::min(j.G, n));
  const int usable = widest == std::min(narrowest, n) ? n / widest * widest : n;
  L.payload = total / usable, L.narrowest = narrowest, L.cmax = cmax;
  L.estimate = std::max(L.payload * L.wpc, L.m.floor(distinct + L.partial_bytes / L.m.kv_bytes_per_token, L.cus));
}

// The walk at the prepared payload (again at a payload raised by the overflow's share, should
// the estimate of the pieces' fixed costs have come out short).
void walk(Launch& L, int qseqlen) {
  if (L.jobs.empty()) return;
  const int n = int(L.base.size());
  double payload = L.payload;
  for (int pass = 0; pass < 3; ++pass) {
    const double over = cut(L, payload, qseqlen, L.narrowest, L.cmax);
    if (over <= L.cmax) break;  // within a tile: the running total's rounding
    payload += over / n;
  }
}

// The launch's cost: its busiest CU or its HBM floor (partials written by split jobs included).
void price(Launch& L) {
  const std::vector<double>& cu = L.cu_load;
  double writes = 0;
  for (const Job& j : L.jobs)
    if (j.partial()) writes += double(j.splits - 1) * j.rows * L.m.partial_row_bytes / L.m.kv_bytes_per_token;
  L.cost = std::max(*std::max_element(cu.begin(), cu.end()), L.m.floor(L.hbm_tokens + writes, L.cus));
  if (L.jobs.empty()) L.cost = 0;
}

// The launches' cost models from the inputs, filled in place (no allocation once sized).
void decode_model(const PlanInputs& in, LaunchModel& m) {
  m.tile_tokens = in.tile_tokens, m.kv_bytes_per_token = in.kv_bytes_per_token, m.resident = in.workgroups_per_cu;
  m.partial_row_bytes = 512.0 * in.partial_o_bytes + 4;
  m.unit_fill = in.unit_fill, m.hbm_factor = in.hbm_factor, m.q_row_bytes = in.q_row_bytes;
  m.issue_per_block_tile = m.lds_per_block_tile = m.lds_per_tile = m.prologue_per_row = m.store_factor = 0;
  m.blocks_per_wave = 1;
  m.wave_tile_issue.clear(), m.wave_tile_lds.clear();
  m.producer_per_tile = in.producer_per_tile;
}
void prefix_model(const PlanInputs& in, LaunchModel& m) {
  decode_model(in, m);
  m.resident = in.prefix_workgroups_per_cu;
  m.producer_per_tile = 0;
  m.partial_row_bytes = 512.0 * in.prefix_partial_o_bytes + 4;
  m.unit_fill = in.prefix_unit_fill, m.hbm_factor = in.prefix_hbm_factor;
  m.issue_per_block_tile = in.prefix_issue_per_block_tile;
  m.lds_per_block_tile = in.prefix_lds_per_block_tile, m.lds_per_tile = in.prefix_lds_per_tile;
  m.blocks_per_wave = in.prefix_blocks_per_wave;
  m.wave_tile_issue.assign(in.prefix_wave_tile_issue.begin(), in.prefix_wave_tile_issue.end());
  m.wave_tile_lds.assign(in.prefix_wave_tile_lds.begin(), in.prefix_wave_tile_lds.end());
  m.prologue_per_row = in.prefix_prologue_per_row, m.store_factor = in.prefix_store_factor;
}

Job make_job(const Launch& L, Job::Kind kind, int b, int start, int end, int kv_len, int rows, int rpg) {
  Job j{.kind = kind, .b = b, .start = start, .end = end, .kv_len = kv_len, .rows = rows};
  j.G = (rows + rpg - 1) / rpg;
  j.tiles = (end - start + L.m.tile_tokens - 1) / L.m.tile_tokens;
  j.T = L.m.tile_tokens;
  j.issue = L.m.tile_issue(std::min(rows, rpg));
  j.fill = L.m.unit_fill_of(std::min(rows, rpg), true);
  j.memory = L.m.unit_memory(std::min(rows, rpg), true);
  return j;
}

// One plan the cascade decision prices: the groups it cascades (none: the per-request plan).
struct Candidate {
  std::vector<PrefixGroup> cascading;
  Launch decode, prefix;
  std::vector<int> group_first, group_unique;  // per cascading group: slot B, most unique splits U
  int num_partials = 0;
  double estimate = 0, cost = 0;  // the cost model's price before the walk, and of the walked plan
  std::string over;  // why the workspace cannot hold it ("": it fits)
};

// Partial slots in request order: a split request's are consecutive; a cascading group's start
// at B, member i's k-th partial at B + k * count + i (k < kp: prefix split k), so that each
// member's partials are one progression of stride count for the reduce.
void number_slots(const PlanInputs& in, Candidate& c, std::vector<int>& own, std::vector<int>& group_at) {
  const int batch = int(in.kv_lens.size());
  own.assign(size_t(batch), -1);  // the job of a request's own tokens: +1 + index, - (1 + index) in the prefix launch
  for (size_t j = 0; j < c.decode.jobs.size(); ++j) own[size_t(c.decode.jobs[j].b)] = int(j) + 1;
  for (size_t j = 0; j < c.prefix.jobs.size(); ++j)
    if (c.prefix.jobs[j].kind == Job::unique) own[size_t(c.prefix.jobs[j].b)] = -int(j) - 2;
  auto own_job = [&](int b) -> Job* {
    const int o = own[size_t(b)];
    return o > 0 ? &c.decode.jobs[size_t(o - 1)] : o < -1 ? &c.prefix.jobs[size_t(-o - 2)] : nullptr;
  };
  group_at.assign(size_t(batch), -1);
  for (size_t gi = 0; gi < c.cascading.size(); ++gi) group_at[size_t(c.cascading[gi].first)] = int(gi);
  c.group_first.assign(c.cascading.size(), -1), c.group_unique.assign(c.cascading.size(), 0);
  int next = 0;
  for (int b = 0; b < batch;) {
    const int gi = group_at[size_t(b)];
    if (gi < 0) {
      if (Job* j = own_job(b); j && j->splits > 1) j->slot = next, next += j->splits;
      ++b;
      continue;
    }
    const PrefixGroup& g = c.cascading[size_t(gi)];
    Job& pj = c.prefix.jobs[size_t(gi)];
    int U = 0;
    for (int i = 0; i < g.count; ++i)
      if (const Job* j = own_job(g.first + i)) U = std::max(U, j->splits);
    pj.slot = next, pj.stride = g.count;
    for (int i = 0; i < g.count; ++i)
      if (Job* j = own_job(g.first + i)) j->slot = next + pj.splits * g.count + i, j->stride = g.count;
    c.group_first[size_t(gi)] = next, c.group_unique[size_t(gi)] = U;
    next += (pj.splits + U) * g.count;
    b = g.first + g.count;
  }
  c.num_partials = next;
}

struct Scratch {
  std::vector<int> shared, own, group_at, cursor, page_base;
};

// Builds the plan that cascades c.cascading (none: the per-request plan): its jobs, each launch
// prepared, and its estimated cost.
void plan_candidate(const PlanInputs& in, Candidate& c, Scratch& sc) {
  const int batch = int(in.kv_lens.size()), M = in.heads * in.qseqlen;
  decode_model(in, c.decode.m), prefix_model(in, c.prefix.m);
  c.decode.cus = c.prefix.cus = in.num_cus, c.decode.xcds = c.prefix.xcds = in.num_xcds;
  c.decode.wpc = in.workgroups_per_cu, c.prefix.wpc = in.prefix_workgroups_per_cu;
  c.decode.jobs.clear(), c.prefix.jobs.clear();
  sc.shared.assign(size_t(batch), 0);
  for (size_t gi = 0; gi < c.cascading.size(); ++gi) {
    const PrefixGroup& g = c.cascading[gi];
    for (int b = g.first; b < g.first + g.count; ++b) sc.shared[size_t(b)] = g.shared_tokens;
    c.prefix.jobs.push_back(
        make_job(c.prefix, Job::prefix, g.first, 0, g.shared_tokens, g.count * M, g.count * M, in.prefix_rows_per_group));
  }
  // At qseqlen 1 the decode kernel's causal rule (t < kv_len) is the prefix kernel's (the unit's
  // end): when every request is a member, the unique parts run in the prefix launch too, as
  // units of one row group (one attention launch instead of two, docs/planner.md).
  bool one_launch = in.qseqlen == 1 && !c.cascading.empty() && M <= in.prefix_rows_per_group;
  for (int b = 0; one_launch && b < batch; ++b) one_launch = sc.shared[size_t(b)] > 0 || in.kv_lens[size_t(b)] == 0;
  for (int b = 0; b < batch; ++b) {
    const int len = in.kv_lens[size_t(b)], sh = sc.shared[size_t(b)];
    if (len == 0 || len == sh) continue;  // an empty request, or a member without unique tokens
    Launch& L = one_launch ? c.prefix : c.decode;
    L.jobs.push_back(make_job(L, sh ? Job::unique : Job::request, b, sh, len, len, M,
                              one_launch ? in.prefix_rows_per_group : in.rows_per_group));
  }
  prepare(c.decode), prepare(c.prefix);
  // The reduce reads every partial and writes the merged rows, over all CUs at the HBM's rate.
  double finals = 0;
  for (const PrefixGroup& g : c.cascading) finals += double(g.count) * M * kFinalRowBytes;
  for (int len : in.kv_lens) finals += (len == 0) * M * kFinalRowBytes;
  const double reduce_rate = 1.0 / in.kv_bytes_per_token / in.num_cus * std::max(1.0, in.hbm_factor);
  c.estimate = c.decode.estimate + c.prefix.estimate + (c.decode.partial_bytes + c.prefix.partial_bytes + finals) * reduce_rate;
  c.over.clear();
}

// Walks and prices a candidate plan: its launches' cuts, partial slots and workspace needs.
void walk_candidate(const PlanInputs& in, Candidate& c, Scratch& sc) {
  const int M = in.heads * in.qseqlen;
  walk(c.decode, in.qseqlen), walk(c.prefix, in.qseqlen);
  price(c.decode), price(c.prefix);
  number_slots(in, c, sc.own, sc.group_at);
  double reduce = 0;
  for (const Launch* L : {&c.decode, &c.prefix})
    for (const Job& j : L->jobs)
      if (j.partial()) reduce += j.splits * j.rows * L->m.partial_row_bytes + (j.kind == Job::request) * j.rows * kFinalRowBytes;
  for (const PrefixGroup& g : c.cascading) reduce += double(g.count) * M * kFinalRowBytes;
  for (int len : in.kv_lens) reduce += (len == 0) * M * kFinalRowBytes;
  c.cost = c.decode.cost + c.prefix.cost + reduce / in.kv_bytes_per_token / in.num_cus * std::max(1.0, in.hbm_factor);
  c.over.clear();
  int64_t units = 0;
  for (const Launch* L : {&c.decode, &c.prefix})
    for (const Piece& p : L->pieces) units += L->jobs[size_t(p.job)].G;
  if (!c.cascading.empty() && in.max_units > 0 && units > in.max_units)
    fmt::format_to(std::back_inserter(c.over), "the workspace holds {} units; the cascade needs {}", in.max_units, units);
  else if (!c.cascading.empty() && in.max_partials > 0 && c.num_partials > in.max_partials)
    fmt::format_to(std::back_inserter(c.over), "the workspace holds {} partials; the cascade needs {}", in.max_partials,
                   c.num_partials);
}

// A launch's units into the table, workgroup by workgroup (ranges[x] .. ranges[x + 1]), and its
// per-CU tokens and units. `unit(job, piece, row group)` makes one entry.
template <class U, class F>
void emit_launch(const Launch& L, std::vector<U>& units, std::vector<int32_t>& ranges, std::vector<int64_t>& cu_tokens,
                 std::vector<int>& cu_units, std::vector<int>& cursor, size_t extra, F&& unit) {
  const size_t S = size_t(L.slots()), C = size_t(L.cus);
  const int n = int(L.base.size());
  ranges.assign(S + 1, 0);
  size_t bound = S;  // units: a piece per job, and one more per workgroup a cut starts
  for (const Job& j : L.jobs) bound += size_t(j.G) * (1 + size_t(std::max(1, j.G / std::max(1, n))));
  units.reserve(bound + extra);
  // Units per workgroup: a piece's G row groups go round its gang of w workgroups.
  for (const Piece& p : L.pieces) {
    const Job& j = L.jobs[size_t(p.job)];
    for (int g = 0, k = 0, w = std::min(j.G, n); g < j.G; ++g, k = k + 1 == w ? 0 : k + 1) ++ranges[size_t(L.order[size_t(p.slot + k)]) + 1];
  }
  for (size_t x = 0; x < S; ++x) ranges[x + 1] += ranges[x];
  cursor.assign(ranges.begin(), ranges.end() - 1);
  units.resize(size_t(ranges[S]));
  cu_tokens.assign(C, 0), cu_units.assign(C, 0);
  for (const Piece& p : L.pieces) {
    const Job& j = L.jobs[size_t(p.job)];
    U u = unit(p, j);  // row group 0's; the others differ in row_group only
    const int tokens = u.kv_end - u.kv_start;
    for (int g = 0, k = 0, w = std::min(j.G, n); g < j.G; ++g, k = k + 1 == w ? 0 : k + 1) {
      const size_t x = size_t(L.order[size_t(p.slot + k)]);
      u.row_group = g;
      units[size_t(cursor[x]++)] = u;
      cu_tokens[x % C] += tokens, ++cu_units[x % C];
    }
  }
}

// The chosen candidate as the plan.
void emit(const PlanInputs& in, Candidate& c, Scratch& sc, Plan& p) {
  const int batch = int(in.kv_lens.size()), M = in.heads * in.qseqlen, q = in.qseqlen, T = in.tile_tokens;
  number_slots(in, c, sc.own, sc.group_at);
  std::vector<int>& page_base = sc.page_base;  // pages before request b
  page_base.assign(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) page_base[size_t(b) + 1] = page_base[size_t(b)] + (in.kv_lens[size_t(b)] + in.page_size - 1) / in.page_size;
  auto range = [&](const Piece& x, const Job& j) {
    return std::pair{j.start + x.t0 * T, std::min(j.end, j.start + x.t1 * T)};
  };
  auto slot = [](const Piece& x, const Job& j) { return j.partial() ? j.slot + x.split * j.stride : -1; };
  const size_t empty_units = in.merge_in_launch ? size_t(batch) * size_t((M + in.rows_per_group - 1) / in.rows_per_group) : 0;
  emit_launch(c.decode, p.units, p.unit_ranges, p.cu_tokens, p.cu_units, sc.cursor, empty_units, [&](const Piece& x, const Job& j) {
    const auto [s, e] = range(x, j);
    return WorkUnit{j.b * q, page_base[size_t(j.b)], s, e, j.kv_len, slot(x, j), 0, j.b};
  });
  if (in.merge_in_launch) {  // an empty request's rows: a unit of no tokens per row group writes o = 0, lse = -inf
    const int G = (M + in.rows_per_group - 1) / in.rows_per_group;
    for (int b = 0; b < batch; ++b)
      for (int g = 0; in.kv_lens[size_t(b)] == 0 && g < G; ++g) {
        p.units.push_back(WorkUnit{b * q, page_base[size_t(b)], 0, 0, 0, -1, g, b});
        ++p.unit_ranges.back();  // the last workgroup runs them
      }
  }
  p.prefix_units.clear(), p.prefix_unit_ranges.clear(), p.prefix_cu_tokens.clear(), p.prefix_cu_units.clear();
  if (!c.prefix.jobs.empty())
    emit_launch(c.prefix, p.prefix_units, p.prefix_unit_ranges, p.prefix_cu_tokens, p.prefix_cu_units, sc.cursor, 0,
                [&](const Piece& x, const Job& j) {
                  const auto [s, e] = range(x, j);
                  return abi::PrefixUnit{j.b * q, page_base[size_t(j.b)], s, e, j.rows, slot(x, j), 0, j.b};
                });
  // Reduce entries in request order (merge_in_launch: one per request, read by the decode kernel).
  p.splits.assign(size_t(batch), 0), p.reduces.clear(), p.reduces.reserve(size_t(batch));
  std::vector<int>& own = sc.own;  // number_slots' index of each request's own job
  for (int b = 0, gi = 0; b < batch; ++b) {
    const Job* j = own[size_t(b)] > 0 ? &c.decode.jobs[size_t(own[size_t(b)] - 1)]
                   : own[size_t(b)] < -1 ? &c.prefix.jobs[size_t(-own[size_t(b)] - 2)] : nullptr;
    while (gi < int(c.cascading.size()) && c.cascading[size_t(gi)].first + c.cascading[size_t(gi)].count <= b) ++gi;
    const bool member = gi < int(c.cascading.size()) && c.cascading[size_t(gi)].first <= b;
    const int u = j ? j->splits : 0;
    if (member) {
      const PrefixGroup& g = c.cascading[size_t(gi)];
      const bool unique_bf16 = own[size_t(b)] < -1 || in.partial_o_bytes == 2;  // in the prefix launch, or bf16 decode
      const int kp = c.prefix.jobs[size_t(gi)].splits, bf16 = in.prefix_partial_o_bytes == 2 ? kp + (unique_bf16 ? u : 0) : 0;
      p.splits[size_t(b)] = kp + u;
      p.reduces.push_back({b * q, c.group_first[size_t(gi)] + b - g.first, kp + u, g.count, bf16, {}});
    } else {
      p.splits[size_t(b)] = u;
      const int bf16 = in.partial_o_bytes == 2 ? u : 0;
      if (u > 1) p.reduces.push_back({b * q, j->slot, u, 1, bf16, {}});
      else if (u == 0 || in.merge_in_launch) p.reduces.push_back({b * q, 0, u, 1, bf16, {}});
    }
  }
  // Prefix splits of >= 2 row-group units, and those whose units share an XCD.
  p.prefix_row_group_bundles = p.prefix_row_group_bundles_one_xcd = 0;
  for (const Piece& x : c.prefix.pieces) {
    const Job& j = c.prefix.jobs[size_t(x.job)];
    const int w = std::min(j.G, int(c.prefix.base.size()));
    if (j.G < 2) continue;
    bool one = true;
    for (int g = 1; g < w; ++g) one &= c.prefix.order[size_t(x.slot + g)] % in.num_xcds == c.prefix.order[size_t(x.slot)] % in.num_xcds;
    ++p.prefix_row_group_bundles, p.prefix_row_group_bundles_one_xcd += one;
  }
  p.merge_in_launch = in.merge_in_launch;
  p.num_partials = c.num_partials;
  p.rows = M, p.row_groups = (M + in.rows_per_group - 1) / in.rows_per_group, p.rows_per_group = in.rows_per_group;
  p.prefix_rows_per_group = c.prefix.jobs.empty() ? 0 : in.prefix_rows_per_group;
  p.tile_tokens = T, p.num_cus = in.num_cus, p.num_xcds = in.num_xcds;
  int64_t most = 0, sum = 0;
  p.cus_used = 0;
  for (int64_t t : p.cu_tokens) most = std::max(most, t), sum += t, p.cus_used += t > 0;
  p.balance = sum > 0 ? double(most) * p.cus_used / double(sum) : 1.0;
  p.predicted_cost = c.cost;
}

// Whether each caller's group may cascade (prefix.h's decide_cascade, tiles, short unique parts,
// the policy): the passing groups, their decisions' indices in `d`.
void decide_groups(const PlanInputs& in, std::vector<CascadeDecision>& d, std::vector<PrefixGroup>& passing,
                   std::vector<size_t>& at) {
  CascadeInputs ci{.heads = in.heads, .qseqlen = in.qseqlen, .kv_bytes_per_token = in.kv_bytes_per_token,
                   .num_cus = in.num_cus, .rows_per_group = in.rows_per_group,
                   .prefix_rows_per_group = in.prefix_rows_per_group,
                   .prefix_units_available = in.prefix_rows_per_group > 0,
                   .min_shared_tokens = in.cascade == CascadePolicy::always ? 1 : CascadeInputs{}.min_shared_tokens};
  d.resize(in.prefix_groups.size()), passing.clear(), at.clear();
  for (size_t k = 0; k < in.prefix_groups.size(); ++k) {
    PrefixGroup g = in.prefix_groups[k];
    g.shared_tokens = g.shared_tokens / in.tile_tokens * in.tile_tokens;  // whole tiles
    decide_cascade(g, ci, d[k]);
    if (g.shared_tokens != in.prefix_groups[k].shared_tokens)
      fmt::format_to(std::back_inserter(d[k].reason), " (shared_tokens {} cut to whole {}-token tiles)",
                     in.prefix_groups[k].shared_tokens, in.tile_tokens);
    for (int b = g.first; d[k].cascade && b < g.first + g.count; ++b) {
      const int unique = in.kv_lens[size_t(b)] - g.shared_tokens;
      if (unique > 0 && unique < in.qseqlen) {
        d[k].cascade = false, d[k].reason.clear();
        fmt::format_to(std::back_inserter(d[k].reason), "request {} has {} unique tokens, fewer than qseqlen = {}: its "
                       "first query row would see none of them", b, unique, in.qseqlen);
      }
    }
    if (d[k].cascade && in.cascade == CascadePolicy::never)
      d[k].cascade = false, d[k].reason = "the caller turned cascades off (cascade policy: never)";
    if (d[k].cascade) passing.push_back(g), at.push_back(k);
  }
}

}  // namespace

struct PlanScratch::Impl {
  Candidate per_request, cascade;
  Scratch sc;
  std::vector<PrefixGroup> passing;
  std::vector<size_t> at;
};
PlanScratch::PlanScratch() : impl_(std::make_unique<Impl>()) {}
PlanScratch::~PlanScratch() = default;
PlanScratch::PlanScratch(PlanScratch&&) noexcept = default;
PlanScratch& PlanScratch::operator=(PlanScratch&&) noexcept = default;

void plan_decode(const PlanInputs& in, Plan& out, PlanScratch& scratch) {
  check_inputs(in);
  PlanScratch::Impl& s = scratch.impl();
  decide_groups(in, out.prefix_groups, s.passing, s.at);
  s.per_request.cascading.clear();
  plan_candidate(in, s.per_request, s.sc);
  if (s.passing.empty()) {
    walk_candidate(in, s.per_request, s.sc);
    return emit(in, s.per_request, s.sc, out);
  }
  // All passing groups cascade or none: whichever the cost model prices lower before any cut
  // (`always`: all), unless the workspace cannot hold the cascade. Only the chosen plan is walked.
  s.cascade.cascading = s.passing;
  plan_candidate(in, s.cascade, s.sc);
  const bool forced = in.cascade == CascadePolicy::always;
  bool use = forced || s.cascade.estimate < s.per_request.estimate;
  if (use) walk_candidate(in, s.cascade, s.sc), use = s.cascade.over.empty();
  if (!use) walk_candidate(in, s.per_request, s.sc);
  for (size_t gi = 0; gi < s.passing.size(); ++gi) {
    CascadeDecision& d = out.prefix_groups[s.at[gi]];
    d.cascade = use, d.cost_cascade = s.cascade.estimate, d.cost_per_request = s.per_request.estimate;
    d.prefix_splits = use ? s.cascade.prefix.jobs[gi].splits : 0;
    d.extra_bytes = int64_t(d.prefix_splits) * s.passing[gi].count * in.heads * in.qseqlen *
                    (512 * int64_t(in.prefix_partial_o_bytes) + 4) * 2;
    d.first_slot = use ? s.cascade.group_first[gi] : -1;
    d.slots = use ? (d.prefix_splits + s.cascade.group_unique[gi]) * s.passing[gi].count : 0;
    auto to = std::back_inserter(d.reason);
    d.reason.clear();
    if (!s.cascade.over.empty() && !use) d.reason += s.cascade.over;
    else if (forced) fmt::format_to(to, "cascade asked for (policy always); modeled {:.1f} vs {:.1f} token-equivalents per request", d.cost_cascade, d.cost_per_request);
    else if (use) fmt::format_to(to, "cascade modeled cheaper: {:.1f} vs {:.1f} token-equivalents", d.cost_cascade, d.cost_per_request);
    else fmt::format_to(to, "per-request plan modeled cheaper: {:.1f} vs {:.1f} token-equivalents", d.cost_per_request, d.cost_cascade);
    const PrefixGroup& given = in.prefix_groups[s.at[gi]];
    if (given.shared_tokens != s.passing[gi].shared_tokens)
      fmt::format_to(to, " (shared_tokens {} cut to whole {}-token tiles)", given.shared_tokens, in.tile_tokens);
  }
  emit(in, use ? s.cascade : s.per_request, s.sc, out);
}

Plan plan_decode(const PlanInputs& in) {
  PlanScratch scratch;
  Plan p;
  plan_decode(in, p, scratch);
  return p;
}

int64_t Plan::total_tokens() const {
  int64_t t = 0;
  for (const auto& u : units) t += u.kv_end - u.kv_start;
  for (const auto& u : prefix_units) t += u.kv_end - u.kv_start;
  return t;
}

nlohmann::json Plan::to_json() const {
  int64_t mx = 0, mn = cu_tokens.empty() ? 0 : cu_tokens[0], decode_tokens = 0;
  for (int64_t t : cu_tokens) mx = std::max(mx, t), mn = std::min(mn, t), decode_tokens += t;
  int split_requests = 0, unique_parts = 0, prefix_cus = 0;
  for (int s : splits) split_requests += s > 1;
  for (const auto& u : prefix_units) unique_parts += is_unique_part(u);
  for (int n : prefix_cu_units) prefix_cus += n > 0;
  nlohmann::json groups = nlohmann::json::array();
  for (const CascadeDecision& d : prefix_groups) groups.push_back(d.to_json());
  return nlohmann::json{{"units", units.size()}, {"prefix_units", prefix_units.size()},
                        {"prefix_unique_part_units", unique_parts}, {"prefix_cus_used", prefix_cus},
                        {"prefix_rows_per_group", prefix_rows_per_group}, {"num_xcds", num_xcds},
                        {"prefix_row_group_bundles", prefix_row_group_bundles},
                        {"prefix_row_group_bundles_one_xcd", prefix_row_group_bundles_one_xcd},
                        {"reduce_entries", reduces.size()}, {"merge_in_launch", merge_in_launch},
                        {"split_requests", split_requests}, {"num_partials", num_partials},
                        {"partial_bytes", partial_o_bytes() + partial_lse_bytes()}, {"rows", rows},
                        {"row_groups", row_groups}, {"rows_per_group", rows_per_group}, {"tile_tokens", tile_tokens},
                        {"num_cus", num_cus}, {"cus_used", cus_used}, {"splits", splits},
                        {"total_tokens", total_tokens()}, {"cu_tokens_max", mx}, {"cu_tokens_min", mn},
                        {"cu_tokens_mean", num_cus ? double(decode_tokens) / num_cus : 0.0},
                        {"cu_units_max", cu_units.empty() ? 0 : *std::max_element(cu_units.begin(), cu_units.end())},
                        {"balance", balance}, {"predicted_cost_tokens", predicted_cost}, {"prefix_groups", groups}};
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
