#include "runtime/planner.h"

#include "runtime/problem.h"

#include <fmt/format.h>

#include <cmath>
#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <tuple>

namespace mla::rt {

namespace {

void check_inputs(const PlanInputs& in) {
  auto fail = [](const std::string& msg) { throw std::invalid_argument("plan_decode: " + msg); };
  if (in.kv_lens.empty()) fail("kv_lens is empty (allowed: one entry per request, at least one request)");
  if (in.qseqlen < 1) fail(fmt::format("qseqlen = {} (allowed: >= 1)", in.qseqlen));
  if (in.heads < 1) fail(fmt::format("heads = {} (allowed: >= 1)", in.heads));
  if (in.page_size < 1) fail(fmt::format("page_size = {} (allowed: >= 1)", in.page_size));
  if (in.num_cus < 1) fail(fmt::format("num_cus = {} (allowed: >= 1)", in.num_cus));
  if (in.num_xcds < 1) fail(fmt::format("num_xcds = {} (allowed: >= 1)", in.num_xcds));
  if (in.workgroups_per_cu < 1) fail(fmt::format("workgroups_per_cu = {} (allowed: >= 1)", in.workgroups_per_cu));
  if (in.tile_tokens < 1) fail(fmt::format("tile_tokens = {} (allowed: >= 1)", in.tile_tokens));
  if (in.rows_per_group < 1) fail(fmt::format("rows_per_group = {} (allowed: >= 1, 16 * consumer waves)", in.rows_per_group));
  if (in.min_tiles_per_split < 1) fail(fmt::format("min_tiles_per_split = {} (allowed: >= 1)", in.min_tiles_per_split));
  if (in.kv_bytes_per_token < 1) fail(fmt::format("kv_bytes_per_token = {} (allowed: >= 1)", in.kv_bytes_per_token));
  if (in.max_rounds < 1) fail(fmt::format("max_rounds = {} (allowed: >= 1)", in.max_rounds));
  if (in.prefix_rows_per_group < 0)
    fail(fmt::format("prefix_rows_per_group = {} (allowed: >= 0, 0 = no prefix kernel)", in.prefix_rows_per_group));
  if (in.prefix_workgroups_per_cu < 1)
    fail(fmt::format("prefix_workgroups_per_cu = {} (allowed: >= 1)", in.prefix_workgroups_per_cu));
  if (in.prefix_partial_o_bytes != 2 && in.prefix_partial_o_bytes != 4)
    fail(fmt::format("prefix_partial_o_bytes = {} (allowed: 2 for bf16 partials, 4 for f32)", in.prefix_partial_o_bytes));
  for (auto [name, v] : {std::pair<const char*, double>{"prefix_issue_per_block_tile", in.prefix_issue_per_block_tile},
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
  if (in.max_units < 0) fail(fmt::format("max_units = {} (allowed: >= 0, 0 = unlimited)", in.max_units));
  if (in.max_partials < 0) fail(fmt::format("max_partials = {} (allowed: >= 0, 0 = unlimited)", in.max_partials));
  for (size_t b = 0; b < in.kv_lens.size(); ++b)
    if (in.kv_lens[b] < in.qseqlen)
      fail(fmt::format("kv_lens[{}] = {} < qseqlen = {} (allowed: kv_len >= qseqlen)", b, in.kv_lens[b], in.qseqlen));
  try {
    check_prefix_groups(in.prefix_groups, in.kv_lens, in.page_size, in.qseqlen);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

// One piece of work the planner splits into token ranges: a whole request, a cascading member's
// unique part [shared_tokens, kv_len), or a cascading group's prefix [0, shared_tokens) over all
// its members' rows. Each split of a job becomes one unit per row group.
struct Job {
  enum Kind { request, unique, prefix } kind = request;
  int b = 0;          // the request (for a prefix: the group's first request)
  int group = -1;     // index into the cascading groups (unique, prefix)
  int start = 0;      // tokens [start, start + len) of the request; start % T == 0
  int len = 0;
  int kv_len = 0;     // the request's tokens (WorkUnit::kv_len); for a prefix the rows R
  int rows = 0;       // M, or R = count * M for a prefix
  int rows_per_group = 0;
  int G = 0;          // row groups: ceil(rows / rows_per_group)
  int tiles = 0, cap = 1;
  bool forced_partial = false;  // writes a partial even unsplit (merged with the prefix)
  int rows_in_group(int g) const { return std::min(rows_per_group, rows - g * rows_per_group); }
};

// The jobs of one kernel launch and how its CUs are modelled.
struct Launch {
  const PlanInputs& in;
  int M;
  int workgroups_per_cu;
  std::vector<Job> jobs;
  bool prefix_kernel = false;  // the prefix launch (its partials: PlanInputs::prefix_partial_o_bytes)
};

// Whether the launch is priced with the prefix kernel's machine model (PlanInputs).
bool issue_modeled(const Launch& L) {
  return L.prefix_kernel && L.in.prefix_issue_per_block_tile > 0 && L.in.prefix_hbm_factor > 0;
}

// A job's weight per token when splits are apportioned: 1 (tokens), or, in an issue-modeled
// launch, the larger of a unit's memory and its issue per token (a full row group's computing
// blocks on the SIMDs its waves occupy).
// A unit's issue share and its CU's LDS time per tile with `blocks` computing row blocks, its
// workgroup one of `resident` on the CU: one block per wave, every block's wave passes every
// tile (the SIMDs shared as the waves of resident workgroups fill them); several blocks per wave
// (PlanInputs::prefix_blocks_per_wave), the blocks fill the waves in order and each wave issues
// its own loop (the busiest wave sets the time while every wave has a SIMD).
std::pair<double, double> tile_issue_and_lds(const PlanInputs& in, int blocks, int resident) {
  const int bpw = in.prefix_blocks_per_wave;
  if (bpw == 1)
    return {blocks * in.prefix_issue_per_block_tile / std::min(4, blocks * resident),
            in.prefix_lds_per_tile + blocks * in.prefix_lds_per_block_tile};
  double sum = 0, most = 0, lds = in.prefix_lds_per_tile;
  for (int left = blocks; left > 0; left -= bpw) {
    const int b = std::min(bpw, left);
    sum += in.prefix_wave_tile_issue[size_t(b - 1)];
    most = std::max(most, in.prefix_wave_tile_issue[size_t(b - 1)]);
    lds += in.prefix_wave_tile_lds[size_t(b - 1)];
  }
  return {std::max(sum / 4, most / resident), lds};
}

double job_weight(const Launch& L, const Job& j) {
  if (!issue_modeled(L)) return 1.0;
  const int blocks = (std::min(j.rows_per_group, j.rows) + 15) / 16;
  const auto [issue, lds] = tile_issue_and_lds(L.in, blocks, L.workgroups_per_cu);
  return std::max(1.0, std::max(issue, lds) / L.in.tile_tokens);
}

// Token ranges of a job cut into `s` splits of whole tiles, sizes differing by at most one tile
// (the larger ones last). If the last split of a causal job would hold fewer than qseqlen tokens
// (possible only with 1-tile splits and a short last tile), fewer splits are used: then every
// split has a token visible to every query row, so no partial row is empty. A prefix has no
// causal limit, so any non-empty split has visible tokens.
std::vector<std::pair<int, int>> cut_job(const PlanInputs& in, const Job& job, int s) {
  const int T = in.tile_tokens, n = job.tiles, end = job.start + job.len;
  for (;; --s) {
    std::vector<std::pair<int, int>> r;
    int base = n / s, extra = n % s, tile = 0;
    for (int j = 0; j < s; ++j) {
      int nt = base + (j >= s - extra ? 1 : 0);
      r.emplace_back(job.start + tile * T, int(std::min<int64_t>(end, job.start + int64_t(tile + nt) * T)));
      tile += nt;
    }
    if (s == 1 || job.kind == Job::prefix || r.back().second - r.back().first >= in.qseqlen) return r;
  }
}

// Most splits per job: splits of >= min_tiles tiles, relaxed to single tiles when the preferred
// length would leave CUs idle (too few tiles overall).
void set_caps(Launch& L) {
  auto caps = [&](int min_tiles) {
    int64_t units = 0;
    for (Job& j : L.jobs) {
      j.cap = std::max(1, j.tiles / min_tiles);
      units += int64_t(j.cap) * j.G;
    }
    return units;
  };
  if (caps(L.in.min_tiles_per_split) < L.in.num_cus) caps(1);
}

int64_t units_of(const Launch& L, const std::vector<int>& s) {
  int64_t u = 0;
  for (size_t j = 0; j < L.jobs.size(); ++j) u += int64_t(s[j]) * L.jobs[j].G;
  return u;
}

// Split counts for about `slots` units: start from `base` splits, then repeatedly give one more
// split to the growing job whose current splits are largest (tokens / split, times the job's
// per-token weight), so unit sizes even out across jobs. Each increment adds the job's G units;
// a job whose increment no longer fits drops out.
std::vector<int> apportion(const Launch& L, int64_t slots, std::vector<int> s, const std::vector<char>& grow) {
  int64_t units = units_of(L, s);
  using Item = std::pair<double, int>;  // (size per split, job)
  std::priority_queue<Item> heap;
  for (int j = 0; j < int(L.jobs.size()); ++j)
    if (grow[size_t(j)] && s[size_t(j)] < L.jobs[size_t(j)].cap)
      heap.emplace(job_weight(L, L.jobs[size_t(j)]) * L.jobs[size_t(j)].len / s[size_t(j)], j);
  while (!heap.empty()) {
    auto [size, j] = heap.top();
    heap.pop();
    const Job& job = L.jobs[size_t(j)];
    if (units + job.G > slots) continue;
    ++s[size_t(j)];
    units += job.G;
    if (s[size_t(j)] < job.cap) heap.emplace(job_weight(L, job) * job.len / s[size_t(j)], j);
  }
  return s;
}

// A unit before partial slots are numbered: they depend on both launches (a cascading group's
// slots interleave its prefix and unique splits), the cost only on whether a partial is written.
struct Raw {
  WorkUnit u;  // partial: -1 or 0 (writes one)
  int tokens;
  int rows;
  int job, split;
};

struct Candidate {
  std::vector<int> splits;  // per job
  std::vector<Raw> units;   // launch order
  std::vector<int64_t> cu_tokens;
  std::vector<int> cu_units;
  double cost = 0.0;        // this launch plus the reduce's reading of its partials
};

const double kPartialRowBytes = 512.0 * 4 + 4;  // partial o row + lse (a decode kernel's: f32)
// A partial row of the launch's kernel: the prefix kernel's o may be bf16.
double partial_row_bytes(const Launch& L) {
  return L.prefix_kernel ? 512.0 * L.in.prefix_partial_o_bytes + 4 : kPartialRowBytes;
}
const double kFinalRowBytes = 512.0 * 2;        // bf16 o row

// A unit's share of its CU's time, in token-equivalents: its memory stream (KV tokens and the
// partial or final rows it writes) and, when the launch is issue-modeled, its hot-loop issue
// and LDS time: each computing row block's consumer wave passes every tile (the prefix
// kernel's waves of row blocks wholly past the unit's rows take none), the waves of `resident`
// workgroups sharing a CU's 4 SIMDs and its one LDS.
struct UnitCost {
  double mem = 0;
  double block_tiles = 0;  // tiles x computing blocks x issue per block-tile
  int blocks = 1;
  double tiles = 0;
  const PlanInputs* in = nullptr;  // several blocks per wave: tile_issue_and_lds
  double lds = 0;  // the CU's LDS time: tiles x (the producer's write + computing blocks' reads)
  double hbm = 0;  // what it moves from HBM: a prefix split's tokens once for its G row groups
  // A phased prefix kernel (PlanInputs::prefix_store_factor > 0): its prologue (the unit fill or
  // its Q rows' loads, the larger) and its partial stores, which run before and after its stream.
  double serial = 0;
  double issue(int resident) const {
    if (in && in->prefix_blocks_per_wave > 1) return tiles * tile_issue_and_lds(*in, blocks, resident).first;
    return block_tiles / std::min(4, blocks * resident);
  }
};
UnitCost unit_cost(const Launch& L, const Raw& x) {
  const PlanInputs& in = L.in;
  UnitCost c;
  const double row_bytes = x.u.partial >= 0 ? partial_row_bytes(L) : kFinalRowBytes;
  const double writes = x.rows * row_bytes / in.kv_bytes_per_token;
  c.mem = x.tokens + writes;
  if (!issue_modeled(L)) return c;
  if (in.prefix_store_factor > 0) {
    c.mem = x.tokens;
    c.serial = std::max(in.prefix_unit_fill, x.rows * in.prefix_prologue_per_row) + writes * in.prefix_store_factor;
  }
  c.blocks = (x.rows + 15) / 16;
  const double tiles = std::ceil(double(x.tokens) / in.tile_tokens);
  c.block_tiles = tiles * c.blocks * in.prefix_issue_per_block_tile;
  c.tiles = tiles;
  c.in = &in;
  c.lds = in.prefix_blocks_per_wave > 1 ? tiles * tile_issue_and_lds(in, c.blocks, 1).second
                                        : tiles * (in.prefix_lds_per_tile + c.blocks * in.prefix_lds_per_block_tile);
  c.hbm = double(x.tokens) / L.jobs[size_t(x.job)].G + writes;
  return c;
}
// The measure that orders units and balances CUs (see build()).
double weight(const Launch& L, const UnitCost& c) {
  return c.serial + std::max({c.mem, c.issue(L.workgroups_per_cu), c.lds});
}

// Builds the units of the given split counts, assigns them to CUs and orders them for launch.
//
// Model: the dispatcher hands workgroup i to CU i mod C (round-robin in launch order). So the
// launch order is built in rounds of C units, one unit per CU per round: units are sorted
// longest first and, within each round, the longest unit of the round goes to the CU with the
// least work so far (LPT restricted to one unit per CU per round); long and short units
// interleave and per-CU sums even out. Only the last round may be partial: the CUs it feeds are
// relabelled 0..n-1 so that position i of that round still lands on CU i mod C. "Longest" and
// "work" are tokens, or, in an issue-modeled prefix launch, max(memory, issue, LDS) (a CU's
// memory stream, its waves' issue and its LDS overlap; the largest bounds it).
Candidate build(const Launch& L, std::vector<int> splits) {
  const PlanInputs& in = L.in;
  const int C = in.num_cus;
  const bool modeled = issue_modeled(L);
  Candidate c;
  std::vector<Raw> raw;
  for (int ji = 0; ji < int(L.jobs.size()); ++ji) {
    const Job& job = L.jobs[size_t(ji)];
    auto ranges = cut_job(in, job, splits[size_t(ji)]);
    const int s = splits[size_t(ji)] = int(ranges.size());
    const bool partial = s > 1 || job.forced_partial;
    for (int j = 0; j < s; ++j)
      for (int g = 0; g < job.G; ++g) {
        // page_base and qo_row are filled in when the plan is assembled.
        WorkUnit u{0, 0, ranges[size_t(j)].first, ranges[size_t(j)].second, job.kv_len, partial ? 0 : -1, g, job.b};
        raw.push_back({u, ranges[size_t(j)].second - ranges[size_t(j)].first, job.rows_in_group(g), ji, j});
      }
  }
  c.splits = std::move(splits);

  // Longest first (stable: ties keep job order).
  std::vector<UnitCost> cost;
  for (const Raw& x : raw) cost.push_back(unit_cost(L, x));
  std::vector<size_t> order(raw.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return modeled ? weight(L, cost[a]) > weight(L, cost[b]) : raw[a].tokens > raw[b].tokens;
  });
  {
    std::vector<Raw> r;
    std::vector<UnitCost> k;
    for (size_t i : order) r.push_back(raw[i]), k.push_back(cost[i]);
    raw = std::move(r);
    cost = std::move(k);
  }
  const int N = int(raw.size());
  c.cu_tokens.assign(C, 0);
  c.cu_units.assign(C, 0);
  if (N == 0) return c;
  const int rounds = (N + C - 1) / C;
  std::vector<double> load(C, 0), load_mem(C, 0), load_issue(C, 0), load_lds(C, 0), load_serial(C, 0);
  std::vector<int> cu_order(C);
  std::vector<std::vector<int>> round_cu(rounds);  // round_cu[r][j]: CU of the j-th unit of round r
  for (int r = 0; r < rounds; ++r) {
    std::iota(cu_order.begin(), cu_order.end(), 0);
    std::stable_sort(cu_order.begin(), cu_order.end(), [&](int a, int b) { return load[a] < load[b]; });
    int n = std::min(C, N - r * C);
    for (int j = 0; j < n; ++j) {
      int cu = cu_order[j];
      const int i = r * C + j;
      if (modeled) {
        load_mem[cu] += cost[size_t(i)].mem;
        load_issue[cu] += cost[size_t(i)].issue(L.workgroups_per_cu);
        load_lds[cu] += cost[size_t(i)].lds;
        load_serial[cu] += cost[size_t(i)].serial;
        load[cu] = load_serial[cu] + std::max({load_mem[cu], load_issue[cu], load_lds[cu]});
      } else {
        load[cu] += raw[size_t(i)].tokens;
      }
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
  std::vector<double> cu_time(C, 0.0);
  double hbm = 0.0;
  for (int r = 0; r < rounds; ++r)
    for (size_t j = 0; j < round_cu[r].size(); ++j) {
      const size_t i = size_t(r) * C + j;
      const Raw& x = raw[i];
      int cu = label[round_cu[r][j]];
      c.units[size_t(r) * C + cu] = x;
      c.cu_tokens[cu] += x.tokens;
      c.cu_units[cu] += 1;
      cu_time[cu] += cost[i].mem;
      hbm += cost[i].hbm;
    }
  // Issue-modeled: a CU's units run their waves' issue at its residency and pass every tile
  // through its one LDS (SIMDs and LDS bound apart), both overlapping its memory stream.
  std::vector<double> issue(C, 0.0), lds(C, 0.0), serial(C, 0.0);
  for (int r = 0; modeled && r < rounds; ++r)
    for (size_t j = 0; j < round_cu[r].size(); ++j) {
      const int cu = label[round_cu[r][j]];
      issue[cu] += cost[size_t(r) * C + j].issue(std::min(c.cu_units[cu], L.workgroups_per_cu));
      lds[cu] += cost[size_t(r) * C + j].lds;
      serial[cu] += cost[size_t(r) * C + j].serial;
    }
  // A CU running fewer workgroups than it can hold streams at a proportionally lower rate
  // (fewer loads in flight): memory time = work * wpc / min(units, wpc). Issue-modeled, its
  // units also run back to back, each first waiting for its page ids and first KV rows
  // (resident ones overlap that fill), and the largest of memory, issue and LDS bounds it; the
  // launch moves its HBM bytes at the HBM bandwidth however well its CUs balance.
  double worst = 0.0;
  for (int cu = 0; cu < C; ++cu) {
    if (c.cu_units[cu] == 0) continue;
    const double occ = double(std::min(c.cu_units[cu], L.workgroups_per_cu)) / L.workgroups_per_cu;
    double t = cu_time[cu] / occ;
    // (Phased: each unit's fill is in its prologue, one unit at a time.)
    if (modeled)
      t = (in.prefix_store_factor > 0 ? serial[cu] : in.prefix_unit_fill * std::ceil(double(c.cu_units[cu]) / L.workgroups_per_cu)) +
          std::max({t, issue[cu], lds[cu]});
    worst = std::max(worst, t);
  }
  if (modeled) worst = std::max(worst, in.prefix_hbm_factor * hbm / C);
  // The reduce kernel reads every partial and writes the final rows, spread over all CUs. A
  // cascading member's final rows are priced with its group (cascade_reduce_final).
  double reduce_bytes = 0.0;
  for (size_t ji = 0; ji < L.jobs.size(); ++ji) {
    const Job& job = L.jobs[ji];
    if (job.kind == Job::request && c.splits[ji] > 1)
      reduce_bytes += double(c.splits[ji]) * L.M * kPartialRowBytes + L.M * kFinalRowBytes;
    else if (job.kind != Job::request)
      reduce_bytes += double(c.splits[ji]) * job.rows * partial_row_bytes(L);
  }
  // (In an issue-modeled launch the reduce, too, streams at the HBM bandwidth.)
  c.cost = worst + reduce_bytes / in.kv_bytes_per_token / C * (modeled ? in.prefix_hbm_factor : 1.0);
  return c;
}

// The cheapest candidate of a launch: k units per CU for k = floor(units at one split / C) (no
// split when the jobs already fill the GPU) up to max_rounds more; ties to fewer units. An
// issue-modeled launch also tries its prefixes' splits fixed at r whole rounds of units (r = 1..3),
// the other jobs (members' unique parts) apportioned over the rounds after them: a prefix split
// costs a partial of every row of its group, a unique part's split only of its M rows, so the
// cheap splits fill in around the dear ones.
Candidate search(Launch& L) {
  const int64_t C = L.in.num_cus;
  set_caps(L);
  const size_t J = L.jobs.size();
  const std::vector<int> ones(J, 1);
  const int64_t k_lo = std::max<int64_t>(1, units_of(L, ones) / C);
  Candidate best;
  bool have = false;
  auto consider = [&](int64_t k_from, const std::vector<int>& base, const std::vector<char>& grow) {
    std::vector<int> prev;
    for (int64_t k = k_from; k <= k_from + L.in.max_rounds; ++k) {
      std::vector<int> s = apportion(L, k * C, base, grow);
      if (!prev.empty() && s == prev) {
        // Saturated: no more splits possible; larger k changes nothing.
        if (units_of(L, s) < k * C) break;
        continue;
      }
      prev = s;
      Candidate c = build(L, std::move(s));
      if (!have || c.cost < best.cost * (1.0 - 1e-9)) {
        best = std::move(c);
        have = true;
      }
    }
  };
  consider(k_lo, ones, std::vector<char>(J, 1));
  if (issue_modeled(L)) {
    std::vector<char> prefixes(J, 0), others(J, 0);
    for (size_t j = 0; j < J; ++j) (L.jobs[j].kind == Job::prefix ? prefixes : others)[j] = 1;
    const bool mixed = std::count(prefixes.begin(), prefixes.end(), 1) > 0 && std::count(others.begin(), others.end(), 1) > 0;
    for (int64_t r = 1; mixed && r <= 3; ++r) {
      const std::vector<int> base = apportion(L, r * C, ones, prefixes);
      consider(std::max<int64_t>(r + 1, units_of(L, base) / C + 1), base, others);
    }
  }
  return best;
}

// The per-CU summary of a launch.
void summarise(const Candidate& c, int num_cus, double& balance, int& cus_used) {
  int64_t mx = 0, sum = 0;
  cus_used = 0;
  for (int cu = 0; cu < num_cus; ++cu) {
    mx = std::max(mx, c.cu_tokens[size_t(cu)]);
    sum += c.cu_tokens[size_t(cu)];
    cus_used += c.cu_units[size_t(cu)] > 0;
  }
  balance = sum > 0 ? double(mx) * num_cus / double(sum) : 1.0;
}

// XCD placement of the prefix launch. The row-group units of one prefix split read the same KV
// range; when they run in the same round on one XCD, its L2 serves the later reads (AMD's aiter
// remaps attention workgroups that share KV onto one XCD for the same reason). Workgroup i runs
// on XCD i mod X, and position i of the launch order is (round i / C, CU label i mod C), so with
// C a multiple of X a CU label's XCD is label mod X in every round. Relabelling the CUs is a
// renaming (each CU keeps its units, so the balance and the cost are unchanged) that may permute
// the labels 0..n-1 fed by a partial last round among themselves and the others among
// themselves. The labels joined by a split's same-round units form components; each component
// goes whole to one residue class mod X where both of its pools have room (largest first),
// otherwise its labels go one by one. Returns {bundles, bundles on one XCD}.
std::pair<int, int> place_row_groups_by_xcd(const Launch& L, Candidate& c) {
  const int C = L.in.num_cus, X = L.in.num_xcds, N = int(c.units.size());
  if (N == 0) return {0, 0};
  const int rounds = (N + C - 1) / C, n_last = N - (rounds - 1) * C;
  // Same-round units of one split (job, split) with more than one row group.
  std::map<std::tuple<int, int, int>, std::vector<int>> bundle;  // (round, job, split) -> labels
  for (int i = 0; i < N; ++i) {
    const Raw& x = c.units[size_t(i)];
    if (L.jobs[size_t(x.job)].G > 1) bundle[{i / C, x.job, x.split}].push_back(i % C);
  }
  // Bundles of >= 2 units, and those whose units' workgroups (round r, label l: r C + l) share an XCD.
  auto count_one_xcd = [&](const std::vector<int>& label) {
    std::pair<int, int> r{0, 0};
    for (const auto& [key, labels] : bundle) {
      if (labels.size() < 2) continue;
      const int64_t round_base = int64_t(std::get<0>(key)) * C;
      auto xcd = [&](int l) { return (round_base + label[size_t(l)]) % X; };
      ++r.first;
      r.second += std::all_of(labels.begin(), labels.end(), [&](int l) { return xcd(l) == xcd(labels[0]); });
    }
    return r;
  };
  std::vector<int> label(static_cast<size_t>(C));
  std::iota(label.begin(), label.end(), 0);
  if (X <= 1 || C % X != 0) return count_one_xcd(label);

  std::vector<int> parent(static_cast<size_t>(C));
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int a) {
    while (parent[size_t(a)] != a) a = parent[size_t(a)] = parent[size_t(parent[size_t(a)])];
    return a;
  };
  for (const auto& [key, labels] : bundle)
    for (int l : labels) parent[size_t(find(l))] = find(labels[0]);
  std::map<int, std::vector<int>> comp;  // root -> old labels, ascending
  for (int l = 0; l < C; ++l) comp[find(l)].push_back(l);
  std::vector<std::vector<int>> comps;
  for (auto& [root, ls] : comp) comps.push_back(std::move(ls));
  std::stable_sort(comps.begin(), comps.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });

  // Free labels per (pool, residue class), ascending: pool 0 = 0..n_last-1, pool 1 = the rest.
  std::vector<std::deque<int>> free_labels(2 * size_t(X));
  for (int l = 0; l < C; ++l) free_labels[size_t((l < n_last ? 0 : X) + l % X)].push_back(l);
  auto pool = [&](int l) { return l < n_last ? 0 : X; };
  for (const auto& ls : comps) {
    int need[2] = {0, 0};
    for (int l : ls) ++need[pool(l) ? 1 : 0];
    int best = -1;
    size_t best_room = 0;
    for (int k = 0; k < X; ++k) {
      const size_t a = free_labels[size_t(k)].size(), b = free_labels[size_t(X + k)].size();
      if (a >= size_t(need[0]) && b >= size_t(need[1]) && (best < 0 || a + b > best_room)) best = k, best_room = a + b;
    }
    for (int l : ls) {
      int k = best;
      if (k < 0) {  // no class holds the whole component: the fullest class of the label's pool
        k = 0;
        for (int j = 1; j < X; ++j)
          if (free_labels[size_t(pool(l) + j)].size() > free_labels[size_t(pool(l) + k)].size()) k = j;
      }
      auto& q = free_labels[size_t(pool(l) + k)];
      label[size_t(l)] = q.front();
      q.pop_front();
    }
  }
  std::vector<Raw> units(c.units.size());
  std::vector<int64_t> cu_tokens(size_t(C), 0);
  std::vector<int> cu_units(size_t(C), 0);
  for (int i = 0; i < N; ++i) units[size_t((i / C) * C + label[size_t(i % C)])] = c.units[size_t(i)];
  for (int l = 0; l < C; ++l) {
    cu_tokens[size_t(label[size_t(l)])] = c.cu_tokens[size_t(l)];
    cu_units[size_t(label[size_t(l)])] = c.cu_units[size_t(l)];
  }
  const auto counted = count_one_xcd(label);
  c.units = std::move(units);
  c.cu_tokens = std::move(cu_tokens);
  c.cu_units = std::move(cu_units);
  return counted;
}

// Numbers the partial slots in request order and fills the units' slots, page bases and q rows.
// A split request gets consecutive slots; a cascading group gets base slot B and slot
// B + k * count + i for member i's k-th partial (k < kp: prefix split k, written by the prefix
// units with partial = B + k * count; else unique split k - kp), so every member's partials are
// one arithmetic progression of stride count for the reduce.
Plan assemble(const PlanInputs& in, const std::vector<PrefixGroup>& cascading, const Launch& decode,
              Candidate dec, const Launch& prefix, Candidate pre) {
  const int batch = int(in.kv_lens.size()), M = decode.M, q = in.qseqlen;
  std::vector<int> page_base(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) page_base[size_t(b) + 1] = page_base[size_t(b)] + (in.kv_lens[size_t(b)] + in.page_size - 1) / in.page_size;
  // Each request's job of its own tokens: a lone request's or a member's unique part, in the
  // decode launch or (qseqlen 1, every request a member: cascade_plan) in the prefix launch;
  // job -1: a member without unique tokens.
  struct Own {
    bool in_prefix = false;
    int job = -1;
  };
  std::vector<Own> own(static_cast<size_t>(batch));
  for (size_t j = 0; j < decode.jobs.size(); ++j) own[size_t(decode.jobs[j].b)] = {false, int(j)};
  for (size_t j = 0; j < prefix.jobs.size(); ++j)
    if (prefix.jobs[j].kind == Job::unique) own[size_t(prefix.jobs[j].b)] = {true, int(j)};
  auto own_splits = [&](int b) {
    const Own& o = own[size_t(b)];
    return o.job < 0 ? 0 : o.in_prefix ? pre.splits[size_t(o.job)] : dec.splits[size_t(o.job)];
  };
  std::vector<int> dec_slot(decode.jobs.size(), -1), pre_slot(prefix.jobs.size(), -1);  // slot of split 0
  std::vector<int> dec_stride(decode.jobs.size(), 1), pre_stride(prefix.jobs.size(), 1);

  Plan p;
  p.splits.assign(size_t(batch), 1);
  std::vector<int> group_at(size_t(batch), -1);
  for (size_t gi = 0; gi < cascading.size(); ++gi) group_at[size_t(cascading[gi].first)] = int(gi);
  int next = 0;
  for (int b = 0; b < batch;) {
    const int gi = group_at[size_t(b)];
    if (gi < 0) {
      const int j = own[size_t(b)].job, s = dec.splits[size_t(j)];
      p.splits[size_t(b)] = s;
      if (s > 1) {
        p.reduces.push_back({b * q, next, s, 1, 0, {}});
        dec_slot[size_t(j)] = next;
        next += s;
      }
      ++b;
      continue;
    }
    const PrefixGroup& g = cascading[size_t(gi)];
    const int kp = pre.splits[size_t(gi)];
    int U = 0;
    for (int i = 0; i < g.count; ++i) U = std::max(U, own_splits(g.first + i));
    const int B = next;
    pre_slot[size_t(gi)] = B;
    pre_stride[size_t(gi)] = g.count;
    for (int i = 0; i < g.count; ++i) {
      const int r = g.first + i, u = own_splits(r);
      const Own& o = own[size_t(r)];
      if (o.job >= 0) {
        (o.in_prefix ? pre_slot : dec_slot)[size_t(o.job)] = B + kp * g.count + i;
        (o.in_prefix ? pre_stride : dec_stride)[size_t(o.job)] = g.count;
      }
      // The prefix kernel's partials (its splits of the prefix, and of the unique part when it
      // runs that too) are bf16 where its geometry says so; they come first.
      const int bf16 = in.prefix_partial_o_bytes == 2 ? kp + (o.in_prefix ? u : 0) : 0;
      p.splits[size_t(r)] = kp + u;
      p.reduces.push_back({r * q, B + i, kp + u, g.count, bf16, {}});
    }
    next = B + (kp + U) * g.count;
    b = g.first + g.count;
  }
  p.num_partials = next;

  p.units.reserve(dec.units.size());
  for (const Raw& x : dec.units) {
    WorkUnit u = x.u;
    u.qo_row = u.batch * q;
    u.page_base = page_base[size_t(u.batch)];
    if (u.partial >= 0) u.partial = dec_slot[size_t(x.job)] + x.split * dec_stride[size_t(x.job)];
    p.units.push_back(u);
  }
  for (const Raw& x : pre.units) {
    const Job& job = prefix.jobs[size_t(x.job)];
    p.prefix_units.push_back(abi::PrefixUnit{job.b * q, page_base[size_t(job.b)], x.u.kv_start, x.u.kv_end, job.rows,
                                             pre_slot[size_t(x.job)] + x.split * pre_stride[size_t(x.job)],
                                             x.u.row_group, job.b});
  }
  p.rows = M;
  p.row_groups = (M + in.rows_per_group - 1) / in.rows_per_group;
  p.rows_per_group = in.rows_per_group;
  p.prefix_rows_per_group = prefix.jobs.empty() ? 0 : in.prefix_rows_per_group;
  p.tile_tokens = in.tile_tokens;
  p.num_cus = in.num_cus;
  p.num_xcds = in.num_xcds;
  summarise(dec, in.num_cus, p.balance, p.cus_used);
  p.cu_tokens = std::move(dec.cu_tokens);
  p.cu_units = std::move(dec.cu_units);
  // The launches run one after the other on one stream: their times add. The reduce writes
  // every cascading member's final rows.
  double cascade_reduce_final = 0.0;
  for (const PrefixGroup& g : cascading) cascade_reduce_final += double(g.count) * M * kFinalRowBytes;
  p.predicted_cost = dec.cost;
  if (!prefix.jobs.empty()) {
    p.prefix_cu_tokens = std::move(pre.cu_tokens);
    p.prefix_cu_units = std::move(pre.cu_units);
    // (The final rows at the HBM bandwidth too where the prefix launch is issue-modeled.)
    p.predicted_cost += pre.cost + cascade_reduce_final / in.kv_bytes_per_token / in.num_cus *
                                       (issue_modeled(prefix) ? in.prefix_hbm_factor : 1.0);
  }
  return p;
}

Launch decode_launch(const PlanInputs& in, int M) {
  return Launch{in, M, in.workgroups_per_cu, {}};
}

Job request_job(const PlanInputs& in, int M, int b, int start, Job::Kind kind) {
  Job j;
  j.kind = kind;
  j.b = b;
  j.start = start;
  j.len = in.kv_lens[size_t(b)] - start;
  j.kv_len = in.kv_lens[size_t(b)];
  j.rows = M;
  j.rows_per_group = in.rows_per_group;
  j.G = (M + in.rows_per_group - 1) / in.rows_per_group;
  j.tiles = (j.len + in.tile_tokens - 1) / in.tile_tokens;
  j.forced_partial = kind == Job::unique;
  return j;
}

// The plan with the given groups cascaded: members' unique parts and the other requests in the
// decode launch, the groups' prefixes in the prefix launch.
Plan cascade_plan(const PlanInputs& in, int M, const std::vector<PrefixGroup>& groups) {
  Launch decode = decode_launch(in, M), prefix{in, M, in.prefix_workgroups_per_cu, {}, true};
  std::vector<int> shared(in.kv_lens.size(), 0);
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const PrefixGroup& g = groups[gi];
    for (int b = g.first; b < g.first + g.count; ++b) shared[size_t(b)] = g.shared_tokens;
    Job j;
    j.kind = Job::prefix;
    j.b = g.first;
    j.group = int(gi);
    j.len = g.shared_tokens;
    j.rows = j.kv_len = g.count * M;
    j.rows_per_group = in.prefix_rows_per_group;
    j.G = (j.rows + in.prefix_rows_per_group - 1) / in.prefix_rows_per_group;
    j.tiles = (j.len + in.tile_tokens - 1) / in.tile_tokens;
    j.forced_partial = true;
    prefix.jobs.push_back(j);
  }
  // At qseqlen 1 the decode kernel's causal rule (t < kv_len) is the prefix kernel's (the unit's
  // end), so when every request is a member the unique parts run in the prefix launch too, as
  // units of one member's M rows: one attention launch instead of two (docs/planner.md).
  const bool one_launch = in.qseqlen == 1 && std::all_of(shared.begin(), shared.end(), [](int t) { return t > 0; });
  for (int b = 0; b < int(in.kv_lens.size()); ++b) {
    if (shared[size_t(b)] == 0) {
      decode.jobs.push_back(request_job(in, M, b, 0, Job::request));
    } else if (in.kv_lens[size_t(b)] > shared[size_t(b)]) {
      Job j = request_job(in, M, b, shared[size_t(b)], Job::unique);
      if (one_launch) {
        j.rows_per_group = in.prefix_rows_per_group;
        j.G = (j.rows + j.rows_per_group - 1) / j.rows_per_group;
        prefix.jobs.push_back(j);
      } else {
        decode.jobs.push_back(j);
      }
    }
  }
  Candidate dec = search(decode), pre = search(prefix);
  const auto [bundles, one_xcd] = place_row_groups_by_xcd(prefix, pre);
  Plan p = assemble(in, groups, decode, std::move(dec), prefix, std::move(pre));
  p.prefix_row_group_bundles = bundles;
  p.prefix_row_group_bundles_one_xcd = one_xcd;
  return p;
}

}  // namespace

int64_t Plan::total_tokens() const {
  int64_t t = 0;
  for (const auto& u : units) t += u.kv_end - u.kv_start;
  for (const auto& u : prefix_units) t += u.kv_end - u.kv_start;
  return t;
}

nlohmann::json Plan::to_json() const {
  int64_t mx = 0, mn = cu_tokens.empty() ? 0 : cu_tokens[0], decode_tokens = 0;
  for (int64_t t : cu_tokens) {
    mx = std::max(mx, t);
    mn = std::min(mn, t);
    decode_tokens += t;
  }
  int max_units = cu_units.empty() ? 0 : *std::max_element(cu_units.begin(), cu_units.end());
  int split_requests = 0;
  for (int s : splits) split_requests += s > 1;
  int unique_parts = 0, prefix_cus = 0;
  for (const auto& u : prefix_units) unique_parts += is_unique_part(u);
  for (int n : prefix_cu_units) prefix_cus += n > 0;
  return nlohmann::json{
      {"units", units.size()},
      {"prefix_units", prefix_units.size()},
      {"prefix_unique_part_units", unique_parts},  // members' unique parts run by the prefix kernel
      {"prefix_cus_used", prefix_cus},
      {"prefix_rows_per_group", prefix_rows_per_group},
      {"num_xcds", num_xcds},
      {"prefix_row_group_bundles", prefix_row_group_bundles},
      {"prefix_row_group_bundles_one_xcd", prefix_row_group_bundles_one_xcd},
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
      {"cu_tokens_mean", num_cus ? double(decode_tokens) / num_cus : 0.0},
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
  const int M = in.heads * in.qseqlen;
  // The per-request plan: every request whole in the decode launch.
  Launch decode = decode_launch(in, M), no_prefix{in, M, 1, {}};
  for (int b = 0; b < int(in.kv_lens.size()); ++b) decode.jobs.push_back(request_job(in, M, b, 0, Job::request));
  Candidate dec = search(decode);
  Plan per_request = assemble(in, {}, decode, std::move(dec), no_prefix, Candidate{});

  CascadeInputs ci{.heads = in.heads,
                   .qseqlen = in.qseqlen,
                   .kv_bytes_per_token = in.kv_bytes_per_token,
                   .num_cus = in.num_cus,
                   .rows_per_group = in.rows_per_group,
                   .prefix_rows_per_group = in.prefix_rows_per_group,
                   .prefix_units_available = in.prefix_rows_per_group > 0,
                   // `always`: every group the kernels can cascade, however short its prefix.
                   .min_shared_tokens = in.cascade == CascadePolicy::always ? 1 : CascadeInputs{}.min_shared_tokens};
  auto cut_note = [&](const PrefixGroup& given) {
    return fmt::format(" (shared_tokens {} cut to whole {}-token tiles)", given.shared_tokens, in.tile_tokens);
  };
  std::vector<CascadeDecision> decisions;
  std::vector<PrefixGroup> passing;
  std::vector<size_t> passing_at;  // decision index of each passing group
  for (const PrefixGroup& given : in.prefix_groups) {
    // Units cut at whole tiles: a caller-given prefix is cut to whole tiles (the rest of its
    // last tile is read with each member's unique part). Detected groups are whole tiles already.
    PrefixGroup g = given;
    g.shared_tokens = given.shared_tokens / in.tile_tokens * in.tile_tokens;
    CascadeDecision d = decide_cascade(g, ci);
    if (g.shared_tokens != given.shared_tokens) d.reason += cut_note(given);
    // A unique part of 1 .. qseqlen-1 tokens would leave row 0 without a visible token in it
    // (an empty partial row); such a member keeps the prefix in its own units.
    for (int b = g.first; d.cascade && b < g.first + g.count; ++b) {
      const int unique = in.kv_lens[size_t(b)] - g.shared_tokens;
      if (unique > 0 && unique < in.qseqlen) {
        d.cascade = false;
        d.reason = fmt::format("request {} has {} unique tokens, fewer than qseqlen = {}: its first query row would "
                               "see none of them",
                               b, unique, in.qseqlen);
      }
    }
    if (d.cascade && in.cascade == CascadePolicy::never)
      d.cascade = false, d.reason = "the caller turned cascades off (cascade policy: never)";
    if (d.cascade) passing.push_back(g), passing_at.push_back(decisions.size());
    decisions.push_back(std::move(d));
  }
  if (passing.empty()) {
    per_request.prefix_groups = std::move(decisions);
    return per_request;
  }

  // Which groups cascade: all or none, whichever the model prices lower, then single groups
  // toggled while that lowers the cost (ties: fewer cascades), so each group's decision is the
  // cheaper of the chosen plan with and without it. Plans are cached by the set of groups.
  const int n = int(passing.size());
  struct Priced {
    Plan plan;
    std::string over;  // why the workspace cannot hold it ("": it fits)
  };
  std::map<std::vector<bool>, Priced> cache;
  auto priced = [&](const std::vector<bool>& set) -> const Priced& {
    auto it = cache.find(set);
    if (it != cache.end()) return it->second;
    Priced pr;
    std::vector<PrefixGroup> groups;
    for (int gi = 0; gi < n; ++gi)
      if (set[size_t(gi)]) groups.push_back(passing[size_t(gi)]);
    if (groups.empty()) {
      pr.plan = per_request;
    } else {
      pr.plan = cascade_plan(in, M, groups);
      const int64_t units = int64_t(pr.plan.units.size() + pr.plan.prefix_units.size());
      if (in.max_units > 0 && units > in.max_units)
        pr.over = fmt::format("the workspace holds {} units; the cascade needs {}", in.max_units, units);
      else if (in.max_partials > 0 && pr.plan.num_partials > in.max_partials)
        pr.over = fmt::format("the workspace holds {} partials; the cascade needs {}", in.max_partials,
                              pr.plan.num_partials);
    }
    return cache.emplace(set, std::move(pr)).first->second;
  };
  auto cost = [&](const std::vector<bool>& set) {
    const Priced& pr = priced(set);
    return pr.over.empty() ? pr.plan.predicted_cost : std::numeric_limits<double>::infinity();
  };
  auto count = [](const std::vector<bool>& set) { return std::count(set.begin(), set.end(), true); };
  const std::vector<bool> none(size_t(n), false), all(size_t(n), true);
  // `always`: all groups, unless the workspace cannot hold the cascade (then none, and why).
  const bool forced = in.cascade == CascadePolicy::always;
  std::vector<bool> set = forced ? (std::isfinite(cost(all)) ? all : none) : cost(all) < cost(none) ? all : none;
  // Toggling costs n plans per sweep: bounded for batches with many groups.
  const bool toggle = n <= 8 && !forced;
  for (bool improved = toggle && n > 1; improved;) {
    improved = false;
    for (int gi = 0; gi < n; ++gi) {
      std::vector<bool> t = set;
      t[size_t(gi)] = !t[size_t(gi)];
      const double ct = cost(t), cs = cost(set);
      if (ct < cs || (ct == cs && count(t) < count(set))) set = std::move(t), improved = true;
    }
  }
  for (int gi = 0; gi < n; ++gi) {
    std::vector<bool> with = toggle ? set : all, without = toggle ? set : none;
    with[size_t(gi)] = true;
    without[size_t(gi)] = false;
    const Priced &w = priced(with), &wo = priced(without);
    CascadeDecision& d = decisions[passing_at[size_t(gi)]];
    const PrefixGroup& g = passing[size_t(gi)];
    d.cascade = set[size_t(gi)];
    d.cost_cascade = w.plan.predicted_cost;
    d.cost_per_request = wo.plan.predicted_cost;
    if (d.cascade && !wo.over.empty())
      d.reason = "cascade kept: without it " + wo.over;
    else if (d.cascade && forced)
      d.reason = fmt::format("cascade asked for (policy always); modeled {:.1f} vs {:.1f} token-equivalents per request",
                             d.cost_cascade, d.cost_per_request);
    else if (d.cascade)
      d.reason = fmt::format("cascade modeled cheaper: {:.1f} vs {:.1f} token-equivalents", d.cost_cascade,
                             d.cost_per_request);
    else if (!w.over.empty())
      d.reason = w.over;
    else
      d.reason = fmt::format("per-request plan modeled cheaper: {:.1f} vs {:.1f} token-equivalents",
                             d.cost_per_request, d.cost_cascade);
    const PrefixGroup& given = in.prefix_groups[passing_at[size_t(gi)]];
    if (g.shared_tokens != given.shared_tokens) d.reason += cut_note(given);
    // The slot layout of the plan with the group cascaded (prefix split k writes B + k * count).
    d.prefix_splits = 0;
    int first_slot = -1;
    for (const abi::PrefixUnit& u : w.plan.prefix_units)
      if (u.first_request == g.first && u.kv_start < g.shared_tokens) {  // the group's, not a member's unique part
        d.prefix_splits += u.row_group == 0;
        first_slot = first_slot < 0 ? u.partial : std::min(first_slot, u.partial);
      }
    d.extra_bytes = int64_t(d.prefix_splits) * g.count * M * (512 * int64_t(in.prefix_partial_o_bytes) + 4) * 2;
    if (d.cascade) {
      d.first_slot = first_slot;
      int U = 0;
      for (int b = g.first; b < g.first + g.count; ++b) U = std::max(U, w.plan.splits[size_t(b)] - d.prefix_splits);
      d.slots = (d.prefix_splits + U) * g.count;
    }
  }
  Plan chosen = std::move(cache.at(set).plan);
  chosen.prefix_groups = std::move(decisions);
  return chosen;
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
