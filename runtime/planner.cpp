#include "runtime/planner.h"

#include "runtime/problem.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace mla::rt {

namespace {

void check_inputs(const PlanInputs& in) {
  auto fail = [](const std::string& msg) { throw std::invalid_argument("plan_decode: " + msg); };
  if (in.qseqlen < 1) fail(fmt::format("qseqlen = {} (allowed: >= 1)", in.qseqlen));
  if (in.heads < 1) fail(fmt::format("heads = {} (allowed: >= 1)", in.heads));
  if (in.page_size < 1) fail(fmt::format("page_size = {} (allowed: >= 1)", in.page_size));
  if (in.num_cus < 1 || in.num_cus > 65536) fail(fmt::format("num_cus = {} (allowed: 1..65536)", in.num_cus));
  if (in.num_xcds < 1) fail(fmt::format("num_xcds = {} (allowed: >= 1)", in.num_xcds));
  if (in.workgroups_per_cu < 1) fail(fmt::format("workgroups_per_cu = {} (allowed: >= 1)", in.workgroups_per_cu));
  if (in.tile_tokens < 1) fail(fmt::format("tile_tokens = {} (allowed: >= 1)", in.tile_tokens));
  if (in.rows_per_group < 1) fail(fmt::format("rows_per_group = {} (allowed: >= 1, 16 * consumer waves)", in.rows_per_group));
  if (in.min_tiles_per_split < 1) fail(fmt::format("min_tiles_per_split = {} (allowed: >= 1)", in.min_tiles_per_split));
  if (in.kv_bytes_per_token < 1) fail(fmt::format("kv_bytes_per_token = {} (allowed: >= 1)", in.kv_bytes_per_token));
  if (in.max_rounds < 1) fail(fmt::format("max_rounds = {} (allowed: >= 1)", in.max_rounds));
  if (in.merge_in_launch && in.cascade != CascadePolicy::never)
    fail("merge_in_launch with cascades allowed (allowed: cascade never; a cascade's prefix partials are merged by the "
         "reduce launch)");
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
    if (in.kv_lens[b] < 0 || (in.kv_lens[b] > 0 && in.kv_lens[b] < in.qseqlen))
      fail(fmt::format("kv_lens[{}] = {} < qseqlen = {} (allowed: 0, an empty request, or kv_len >= qseqlen)", b,
                       in.kv_lens[b], in.qseqlen));
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
  const PlanInputs* inputs = nullptr;
  int M = 0;
  int workgroups_per_cu = 1;
  std::vector<Job> jobs;
  bool prefix_kernel = false;  // the prefix launch (its partials: PlanInputs::prefix_partial_o_bytes)
  const PlanInputs& in() const { return *inputs; }
  void reset(const PlanInputs& i, int m, int wpc, bool prefix) {
    inputs = &i, M = m, workgroups_per_cu = wpc, prefix_kernel = prefix;
    jobs.clear();
  }
};

// Whether the launch is priced with the prefix kernel's machine model (PlanInputs).
bool issue_modeled(const Launch& L) {
  return L.prefix_kernel && L.in().prefix_issue_per_block_tile > 0 && L.in().prefix_hbm_factor > 0;
}

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

// A job's weight per token when splits are apportioned: 1 (tokens), or, in an issue-modeled
// launch, the larger of a unit's memory and its issue per token (a full row group's computing
// blocks on the SIMDs its waves occupy).
double job_weight(const Launch& L, const Job& j) {
  if (!issue_modeled(L)) return 1.0;
  const int blocks = (std::min(j.rows_per_group, j.rows) + 15) / 16;
  const auto [issue, lds] = tile_issue_and_lds(L.in(), blocks, L.workgroups_per_cu);
  return std::max(1.0, std::max(issue, lds) / L.in().tile_tokens);
}

// A job's token range cut into `s` splits of whole tiles, sizes differing by at most one tile
// (the larger ones last): split j starts at tile j * base + max(0, j - (s - extra)). If the last
// split of a causal job would hold fewer than qseqlen tokens (possible only with 1-tile splits
// and a short last tile), fewer splits are used: then every split has a token visible to every
// query row, so no partial row is empty. A prefix has no causal limit, so any non-empty split
// has visible tokens.
struct Cut {
  int s = 1, base = 0, extra = 0;
  int start = 0, end = 0, T = 1;
  int first_tile(int j) const { return j * base + std::max(0, j - (s - extra)); }
  std::pair<int, int> range(int j) const {
    const int t0 = first_tile(j), nt = base + (j >= s - extra ? 1 : 0);
    return {start + t0 * T, int(std::min<int64_t>(end, start + int64_t(t0 + nt) * T))};
  }
};
Cut cut_job(const PlanInputs& in, const Job& job, int s) {
  const int n = job.tiles;
  for (;; --s) {
    const Cut c{s, n / s, n % s, job.start, job.start + job.len, in.tile_tokens};
    if (s == 1 || job.kind == Job::prefix) return c;
    const auto [a, b] = c.range(s - 1);
    if (b - a >= in.qseqlen) return c;
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
  if (caps(L.in().min_tiles_per_split) < L.in().num_cus) caps(1);
}

int64_t units_of(const Launch& L, std::span<const int> s) {
  int64_t u = 0;
  for (size_t j = 0; j < L.jobs.size(); ++j) u += int64_t(s[j]) * L.jobs[j].G;
  return u;
}

// Split counts for about `slots` units (apportion): start from `base` splits, then repeatedly give
// one more split to the growing job whose current splits are largest (tokens / split, times the
// job's per-token weight), so unit sizes even out across jobs. Each increment adds the job's G
// units; a job whose increment no longer fits drops out.
//
// The greedy takes the increments in one fixed order (size desc, then job index desc, as a
// max-heap of (size, job) pairs pops them), so for a growing budget it is kept as a state:
// advance() takes increments while the next one fits ("clean": the increments any larger budget
// takes first), and finish() continues from there as the one-shot greedy does (dropping the jobs
// that do not fit, possibly adding jobs with fewer row groups), on a copy when the clean state
// must stay. Two shortcuts take the same increments without popping each: a job whose next size
// still tops the rest takes that increment at once; and while every growing job has the same
// split count s and each one's next size (at s + 1) is below every job's size at s (requests of
// similar lengths), a whole round of increments, one per job, is taken when it fits: their order
// within the round does not change the result.
struct Greedy {
  using Item = std::pair<double, int>;  // (size per split, job)
  std::vector<int> s;
  std::vector<double> num;   // per job: weight x tokens, so a split's size is num / s
  std::vector<int> growing;  // jobs that may take another split, ascending
  std::vector<Item> heap;    // (num / s, job) of the growing jobs while not `layered`
  int64_t units = 0;
  int min_g = 1;             // the fewest row groups of a growing job (at start)
  // Layered: every growing job has s == layer_s (the heap is not kept); their row groups sum to layer_g.
  bool layered = false;
  int layer_s = 0;
  int64_t layer_g = 0;
  // Heap mode, entered from a layer at split count behind_s: growing jobs still at behind_s (-1:
  // some job went past behind_s + 1, so the layers no longer line up).
  int behind_s = 0, behind = -1;

  void start(const Launch& L, std::span<const int> base, std::span<const char> grow) {
    const size_t J = L.jobs.size();
    num.resize(J);
    for (size_t j = 0; j < J; ++j) num[j] = job_weight(L, L.jobs[j]) * L.jobs[j].len;
    s.assign(base.begin(), base.end());
    units = units_of(L, s);
    growing.clear();
    min_g = std::numeric_limits<int>::max();
    bool same = true;
    for (size_t j = 0; j < J; ++j)
      if (grow[j] && s[j] < L.jobs[j].cap) {
        if (!growing.empty() && s[j] != s[size_t(growing.front())]) same = false;
        growing.push_back(int(j));
        min_g = std::min(min_g, L.jobs[j].G);
      }
    if (same && growing.size() >= 2) {
      layered = true;
      layer_s = s[size_t(growing.front())];
      layer_g = 0;
      for (int j : growing) layer_g += L.jobs[size_t(j)].G;
    } else {
      layered = false;
      behind = -1;
      build_heap();
    }
  }
  void build_heap() {
    heap.clear();
    for (int j : growing) heap.emplace_back(num[size_t(j)] / s[size_t(j)], j);
    std::make_heap(heap.begin(), heap.end());
  }
  void drop_growing(int j) { growing.erase(std::find(growing.begin(), growing.end(), j)); }
  // The heap with its top replaced by `x` (the max-heap std::push_heap / pop_heap keep).
  void replace_top(Item x) {
    const size_t n = heap.size();
    size_t i = 0;
    for (;;) {
      size_t c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && heap[c] < heap[c + 1]) ++c;
      if (!(x < heap[c])) break;
      heap[i] = heap[c];
      i = c;
    }
    heap[i] = x;
  }
  // Whole rounds of increments (layered), if one fits and goes first: first as many rounds as fit
  // and leave every job growing, each going first (its smallest size above the next round's
  // largest, a check per round), in one pass; else one round, after which jobs may reach their cap.
  bool take_layer(const Launch& L, int64_t slots) {
    if (units + layer_g > slots) return false;
    double lo = std::numeric_limits<double>::infinity(), hi_all = -1, hi = -1;  // smallest num; largest (that grows on)
    int64_t rounds_cap = std::numeric_limits<int64_t>::max();
    for (int j : growing) {
      const double v = num[size_t(j)];
      lo = std::min(lo, v);
      hi_all = std::max(hi_all, v);
      if (layer_s + 1 < L.jobs[size_t(j)].cap) hi = std::max(hi, v);
      rounds_cap = std::min<int64_t>(rounds_cap, L.jobs[size_t(j)].cap - layer_s);
    }
    const int64_t limit = std::min((slots - units) / layer_g, rounds_cap - 1);
    int64_t m = 0;
    while (m < limit && lo / double(layer_s + m) > hi_all / double(layer_s + m + 1)) ++m;
    if (m > 0) {
      for (int j : growing) s[size_t(j)] += int(m);
      units += layer_g * m;
      layer_s += int(m);
      return true;
    }
    if (hi >= 0 && !(lo / layer_s > hi / (layer_s + 1))) return false;
    for (int j : growing) ++s[size_t(j)];
    units += layer_g;
    ++layer_s;
    if (hi < 0 || rounds_cap == 1) {
      std::erase_if(growing, [&](int j) { return s[size_t(j)] >= L.jobs[size_t(j)].cap; });
      layer_g = 0;
      for (int j : growing) layer_g += L.jobs[size_t(j)].G;
    }
    return true;
  }
  // Takes the increments that fit.
  void advance(const Launch& L, int64_t slots) {
    for (;;) {
      if (layered) {
        if (growing.empty()) return;
        if (take_layer(L, slots)) continue;
        layered = false;
        behind_s = layer_s;
        behind = int(growing.size());
        build_heap();
      }
      if (heap.empty()) return;
      const int j = heap.front().second;
      const Job& job = L.jobs[size_t(j)];
      if (units + job.G > slots) return;
      // The top job takes increments while its next size stays above the rest's largest (what
      // popping it and pushing it back would give).
      Item second{-1.0, -1};
      if (heap.size() > 1) second = heap[1];
      if (heap.size() > 2 && second < heap[2]) second = heap[2];
      // Increments n = 1 + the split counts s0 + 1 .. t whose size tops `second` (sizes fall as s
      // grows), at most up to the cap and the budget.
      const int s0 = s[size_t(j)];
      auto above = [&](int64_t sp) { return second < Item(num[size_t(j)] / double(sp), j); };
      int64_t t = job.cap;
      if (second.first >= 0) {
        const double q = num[size_t(j)] / second.first;
        t = q < double(job.cap) ? int64_t(q) : int64_t(job.cap);
        while (t + 1 <= job.cap && above(t + 1)) ++t;
        while (t > s0 && !above(t)) --t;
      }
      const int64_t n = std::min({int64_t(job.cap) - s0, (slots - units) / job.G, 1 + std::max<int64_t>(0, t - s0)});
      s[size_t(j)] = int(s0 + n);
      units += n * job.G;
      if (s[size_t(j)] < job.cap) {
        replace_top(Item(num[size_t(j)] / s[size_t(j)], j));
      } else {
        const Item last = heap.back();
        heap.pop_back();
        if (!heap.empty()) replace_top(last);
        drop_growing(j);
      }
      // Back to whole rounds once every growing job has caught up with the round.
      if (behind >= 0) {
        if (s0 != behind_s || s[size_t(j)] > behind_s + 1) {
          behind = -1;
        } else if (--behind == 0 && growing.size() >= 2) {
          layered = true;
          layer_s = behind_s + 1;
          layer_g = 0;
          for (int g : growing) layer_g += L.jobs[size_t(g)].G;
        }
      }
    }
  }
  // Whether finish() could still add an increment after advance().
  bool tail_possible(int64_t slots) const { return !growing.empty() && units + min_g <= slots; }
  void finish(const Launch& L, int64_t slots) {
    if (layered) layered = false, behind = -1, build_heap();
    while (!heap.empty()) {
      const int j = heap.front().second;
      std::pop_heap(heap.begin(), heap.end());
      heap.pop_back();
      if (units + L.jobs[size_t(j)].G > slots) continue;
      const Job& job = L.jobs[size_t(j)];
      ++s[size_t(j)];
      units += job.G;
      if (s[size_t(j)] < job.cap) {
        heap.emplace_back(num[size_t(j)] / s[size_t(j)], j);
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
};

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
  void reserve(size_t units_bound, size_t jobs, size_t cus) {
    splits.reserve(jobs);
    units.reserve(units_bound);
    cu_tokens.reserve(cus);
    cu_units.reserve(cus);
  }
};

const double kPartialRowBytes = 512.0 * 4 + 4;  // partial o row + lse (a decode kernel's: f32)
// A partial row of the launch's kernel: the prefix kernel's o may be bf16.
double partial_row_bytes(const Launch& L) {
  return L.prefix_kernel ? 512.0 * L.in().prefix_partial_o_bytes + 4 : kPartialRowBytes;
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
  const PlanInputs& in = L.in();
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


// The reduce kernel reads every partial and writes the final rows, spread over all CUs. A
// cascading member's final rows are priced with its group (cascade_reduce_final).
double reduce_bytes_of(const Launch& L, std::span<const int> splits) {
  double reduce_bytes = 0.0;
  for (size_t ji = 0; ji < L.jobs.size(); ++ji) {
    const Job& job = L.jobs[ji];
    if (job.kind == Job::request && splits[ji] > 1)
      reduce_bytes += double(splits[ji]) * L.M * kPartialRowBytes + L.M * kFinalRowBytes;
    else if (job.kind != Job::request)
      reduce_bytes += double(splits[ji]) * job.rows * partial_row_bytes(L);
  }
  return reduce_bytes;
}

// The six unit classes of a job (tokens: a split of `base` tiles, of `base` + 1, the last split;
// rows: a full row group, the last one): every unit of a class has the same cost and sort key.
constexpr int kClasses = 6;
int size_class(const Cut& cut, int j) { return j == cut.s - 1 ? 2 : j >= cut.s - cut.extra ? 1 : 0; }

// A candidate's split counts evaluated (its cost), with what materialize() needs to emit its
// units: their cut, class tables and launch positions.
struct Eval {
  std::vector<int> splits;  // per job, as cut
  std::vector<Cut> cuts;
  std::vector<int> rep;            // the job whose classes a job shares (itself, or an equal one before it)
  std::vector<UnitCost> cls_cost;  // per job and class
  std::vector<double> cls_key, cls_issue;
  std::vector<int> cls_tokens, cls_rank;
  std::vector<int> rank_start;     // first sorted position of each rank
  std::vector<int> round_cu;       // sorted position r * C + j (round r's j-th unit) runs on this CU
  std::vector<int> label;          // CU -> its label in the launch order
  std::vector<int64_t> cu_tokens;
  std::vector<int> cu_units;
  int n_units = 0;
  double cost = 0.0;
  // Capacity for any candidate of a launch (units_bound), so that no call that follows
  // allocates, whichever buffer a candidate lands in.
  void reserve(size_t units_bound, size_t jobs, size_t cus) {
    splits.reserve(jobs), cuts.reserve(jobs), rep.reserve(jobs);
    cls_cost.reserve(jobs * kClasses), cls_key.reserve(jobs * kClasses), cls_issue.reserve(jobs * kClasses);
    cls_tokens.reserve(jobs * kClasses), cls_rank.reserve(jobs * kClasses), rank_start.reserve(jobs * kClasses + 1);
    round_cu.reserve(units_bound), label.reserve(cus), cu_tokens.reserve(cus), cu_units.reserve(cus);
  }
  void swap(Eval& o) noexcept {
    splits.swap(o.splits), cuts.swap(o.cuts), rep.swap(o.rep), cls_cost.swap(o.cls_cost), cls_key.swap(o.cls_key);
    cls_issue.swap(o.cls_issue), cls_tokens.swap(o.cls_tokens), cls_rank.swap(o.cls_rank);
    rank_start.swap(o.rank_start), round_cu.swap(o.round_cu), label.swap(o.label), cu_tokens.swap(o.cu_tokens);
    cu_units.swap(o.cu_units), std::swap(n_units, o.n_units), std::swap(cost, o.cost);
  }
};

// What evaluate(), materialize() and search() reuse from one call to the next.
struct BuildScratch {
  std::vector<std::pair<double, int>> keys;  // (key, class) of the classes that occur
  std::vector<int> next, sorted_cls;         // sorted position -> unit class
  std::vector<double> load, load_mem, load_issue, load_lds, load_serial;
  std::vector<std::pair<double, int>> cu_order;
  std::vector<int64_t> key, merged_key, tok;
  std::vector<int> cu_n;
  std::vector<int> run_start;
  std::vector<double> cu_time, issue, lds, serial;
  // Lower bounds of a launch's cost (search): per job, what does not depend on its splits.
  std::vector<double> job_issue, job_lds, job_serial_split;
  // place_row_groups_by_xcd
  struct BundleUnit {
    int round, job, split, label, i;
  };
  std::vector<BundleUnit> bundle;
  std::vector<int> label, parent, root, comp_label, comp_start, fl_label, fl_start, fl_next;
  struct Comp {
    int root, start, size;
  };
  std::vector<Comp> comps;
  std::vector<Raw> units_tmp;
  std::vector<int64_t> tok_tmp;
  std::vector<int> n_tmp;
  // search
  Greedy greedy, tail;
  std::vector<int> prev, base, ones, pending;
  std::vector<char> grow_all, grow_prefix, grow_other;
  Eval work, best;
};

// The units of the given split counts, assigned to CUs and ordered for launch, priced
// (evaluate), and emitted (materialize, for the candidate search() keeps).
//
// Model: the dispatcher hands workgroup i to CU i mod C (round-robin in launch order). So the
// launch order is built in rounds of C units, one unit per CU per round: units are sorted
// longest first and, within each round, the longest unit of the round goes to the CU with the
// least work so far (LPT restricted to one unit per CU per round); long and short units
// interleave and per-CU sums even out. Only the last round may be partial: the CUs it feeds are
// relabelled 0..n-1 so that position i of that round still lands on CU i mod C. "Longest" and
// "work" are tokens, or, in an issue-modeled prefix launch, max(memory, issue, LDS) (a CU's
// memory stream, its waves' issue and its LDS overlap; the largest bounds it).
//
// Units of one class (above) share their cost: it is computed once per class, and the stable
// longest-first sort (ties keep the order of generation: job, split, row group) is a counting
// sort over the ranks of the classes' keys.
void evaluate(const Launch& L, std::span<const int> splits, Eval& e, BuildScratch& bs) {
  const PlanInputs& in = L.in();
  const int C = in.num_cus;
  const bool modeled = issue_modeled(L);
  const int J = int(L.jobs.size());
  e.splits.assign(splits.begin(), splits.end());
  e.cuts.resize(size_t(J));
  e.rep.resize(size_t(J));
  e.cls_cost.resize(size_t(J) * kClasses);
  e.cls_key.resize(size_t(J) * kClasses);
  e.cls_issue.resize(size_t(J) * kClasses);
  e.cls_tokens.resize(size_t(J) * kClasses);
  e.cls_rank.assign(size_t(J) * kClasses, -1);
  bs.keys.clear();
  int64_t n_units = 0;
  for (int ji = 0; ji < J; ++ji) {
    const Job& job = L.jobs[size_t(ji)];
    const Cut cut = e.cuts[size_t(ji)] = cut_job(in, job, splits[size_t(ji)]);
    e.splits[size_t(ji)] = cut.s;
    n_units += int64_t(cut.s) * job.G;
    const bool partial = cut.s > 1 || job.forced_partial;
    // Splits of each size class: base tiles (not last), base + 1 (not last), the last.
    const int n_base = cut.s - cut.extra - (cut.extra == 0 ? 1 : 0), n_more = cut.extra > 0 ? cut.extra - 1 : 0;
    const auto [la, lb] = cut.range(cut.s - 1);
    // A job whose classes are the previous job's (the same splits, last split, rows and row
    // groups: equal requests) shares its costs and ranks.
    if (ji > 0) {
      const Job& pj = L.jobs[size_t(ji) - 1];
      const Cut& pc = e.cuts[size_t(ji) - 1];
      const auto [pa, pb] = pc.range(pc.s - 1);
      if (pc.s == cut.s && pc.base == cut.base && pc.extra == cut.extra && pb - pa == lb - la && pj.rows == job.rows &&
          pj.rows_per_group == job.rows_per_group && pj.G == job.G && (pc.s > 1 || pj.forced_partial) == partial) {
        e.rep[size_t(ji)] = e.rep[size_t(ji) - 1];
        continue;
      }
    }
    e.rep[size_t(ji)] = ji;
    for (int sc = 0; sc < 3; ++sc) {
      if ((sc == 0 && n_base <= 0) || (sc == 1 && n_more <= 0)) continue;
      const int tokens = sc == 0 ? cut.base * cut.T : sc == 1 ? (cut.base + 1) * cut.T : lb - la;
      for (int rc = 0; rc < 2; ++rc) {
        if (rc == 0 && job.G == 1) continue;  // the only row group is the last
        const int k = ji * kClasses + sc * 2 + rc;
        const int rows = job.rows_in_group(rc == 1 ? job.G - 1 : 0);
        const Raw proto{WorkUnit{0, 0, 0, 0, job.kv_len, partial ? 0 : -1, 0, job.b}, tokens, rows, ji, 0};
        const UnitCost uc = unit_cost(L, proto);
        e.cls_cost[size_t(k)] = uc;
        e.cls_tokens[size_t(k)] = tokens;
        e.cls_issue[size_t(k)] = modeled ? uc.issue(L.workgroups_per_cu) : 0.0;
        e.cls_key[size_t(k)] = modeled ? weight(L, uc) : double(tokens);
        bs.keys.emplace_back(e.cls_key[size_t(k)], k);
      }
    }
  }
  // Ranks of the distinct keys, largest first; each rank's first position in the sorted order
  // from its classes' unit counts.
  std::sort(bs.keys.begin(), bs.keys.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  int ranks = 0;
  for (size_t i = 0; i < bs.keys.size(); ++i) {
    if (i > 0 && bs.keys[i].first != bs.keys[i - 1].first) ++ranks;
    e.cls_rank[size_t(bs.keys[i].second)] = ranks;
  }
  ranks += bs.keys.empty() ? 0 : 1;
  e.rank_start.assign(size_t(ranks) + 1, 0);
  for (int ji = 0; ji < J; ++ji) {
    const Job& job = L.jobs[size_t(ji)];
    const Cut& cut = e.cuts[size_t(ji)];
    const int n_sc[3] = {cut.s - cut.extra - (cut.extra == 0 ? 1 : 0), cut.extra > 0 ? cut.extra - 1 : 0, 1};
    for (int sc = 0; sc < 3; ++sc)
      for (int rc = 0; rc < 2; ++rc) {
        const int n = n_sc[sc] * (rc == 1 ? 1 : job.G - 1);
        if (n > 0) e.rank_start[size_t(e.cls_rank[size_t(e.rep[size_t(ji)] * kClasses + sc * 2 + rc)]) + 1] += n;
      }
  }
  for (int r = 0; r < ranks; ++r) e.rank_start[size_t(r) + 1] += e.rank_start[size_t(r)];
  const int N = e.n_units = int(n_units);
  bs.sorted_cls.resize(size_t(N));
  bs.next.assign(e.rank_start.begin(), e.rank_start.end());
  for (int ji = 0; ji < J; ++ji) {
    const Job& job = L.jobs[size_t(ji)];
    const Cut& cut = e.cuts[size_t(ji)];
    const int k0 = e.rep[size_t(ji)] * kClasses;
    for (int j = 0; j < cut.s; ++j) {
      const int k1 = k0 + size_class(cut, j) * 2;
      for (int g = 0; g < job.G - 1; ++g) bs.sorted_cls[size_t(bs.next[size_t(e.cls_rank[size_t(k1)])]++)] = k1;
      bs.sorted_cls[size_t(bs.next[size_t(e.cls_rank[size_t(k1 + 1)])]++)] = k1 + 1;
    }
  }

  e.cu_tokens.assign(size_t(C), 0);
  e.cu_units.assign(size_t(C), 0);
  e.cost = 0.0;
  e.round_cu.resize(size_t(N));
  e.label.resize(size_t(C));
  if (N == 0) return;
  auto cost_of = [&](int i) -> const UnitCost& { return e.cls_cost[size_t(bs.sorted_cls[size_t(i)])]; };

  const int rounds = (N + C - 1) / C;
  // Per CU (its index here; labelled below): tokens, units, memory time; the launch's HBM bytes.
  bs.tok.assign(size_t(C), 0);
  bs.cu_n.assign(size_t(C), 0);
  bs.cu_time.assign(size_t(C), 0.0);
  double hbm = 0.0;
  if (modeled) {
    bs.load.assign(size_t(C), 0);
    bs.load_mem.assign(size_t(C), 0);
    bs.load_issue.assign(size_t(C), 0);
    bs.load_lds.assign(size_t(C), 0);
    bs.load_serial.assign(size_t(C), 0);
    bs.cu_order.resize(size_t(C));
  } else {
    bs.key.resize(size_t(C));
  }
  for (int r = 0; r < rounds; ++r) {
    // The CUs by work so far, least first (ties: lower CU first); round 0 finds them all idle.
    const int n = std::min(C, N - r * C);
    if (!modeled) {
      // Token loads are integers: the key tokens * 2^16 + CU orders them. After a full round the
      // CUs that took units of one size are still in order among themselves: merging those runs
      // sorts them.
      if (r == 0) {
        for (int cu = 0; cu < C; ++cu) bs.key[size_t(cu)] = cu;
      } else {
        for (auto& x : bs.key) x = bs.tok[size_t(x & 0xffff)] << 16 | (x & 0xffff);
        const size_t runs = bs.run_start.size();
        if (runs <= 8) {
          int at[8], end[8];
          for (size_t q = 0; q < runs; ++q) at[q] = bs.run_start[q], end[q] = q + 1 < runs ? bs.run_start[q + 1] : C;
          bs.merged_key.resize(size_t(C));
          for (int o = 0; o < C; ++o) {
            size_t pick = runs;
            for (size_t q = 0; q < runs; ++q)
              if (at[q] < end[q] && (pick == runs || bs.key[size_t(at[q])] < bs.key[size_t(at[pick])])) pick = q;
            bs.merged_key[size_t(o)] = bs.key[size_t(at[pick]++)];
          }
          bs.key.swap(bs.merged_key);
        } else if (n == C) {
          std::sort(bs.key.begin(), bs.key.end());
        } else {
          std::partial_sort(bs.key.begin(), bs.key.begin() + n, bs.key.end());
        }
      }
      bs.run_start.clear();
      for (int j = 0; j < n; ++j) {
        const int cu = int(bs.key[size_t(j)] & 0xffff), i = r * C + j, k = bs.sorted_cls[size_t(i)];
        const int t = e.cls_tokens[size_t(k)];
        if (j == 0 || t != e.cls_tokens[size_t(bs.sorted_cls[size_t(i) - 1])]) bs.run_start.push_back(j);
        bs.tok[size_t(cu)] += t;
        bs.cu_n[size_t(cu)] += 1;
        bs.cu_time[size_t(cu)] += e.cls_cost[size_t(k)].mem;
        e.round_cu[size_t(i)] = cu;
      }
      continue;
    }
    if (r == 0) {
      for (int cu = 0; cu < C; ++cu) bs.cu_order[size_t(cu)] = {0.0, cu};
    } else {
      for (int cu = 0; cu < C; ++cu) bs.cu_order[size_t(cu)] = {bs.load[size_t(cu)], cu};
      if (n == C)
        std::sort(bs.cu_order.begin(), bs.cu_order.end());
      else
        std::partial_sort(bs.cu_order.begin(), bs.cu_order.begin() + n, bs.cu_order.end());
    }
    for (int j = 0; j < n; ++j) {
      const int cu = bs.cu_order[size_t(j)].second, i = r * C + j, k = bs.sorted_cls[size_t(i)];
      const UnitCost& uc = e.cls_cost[size_t(k)];
      bs.load_mem[size_t(cu)] += uc.mem;
      bs.load_issue[size_t(cu)] += e.cls_issue[size_t(k)];
      bs.load_lds[size_t(cu)] += uc.lds;
      bs.load_serial[size_t(cu)] += uc.serial;
      bs.load[size_t(cu)] = bs.load_serial[size_t(cu)] +
                            std::max({bs.load_mem[size_t(cu)], bs.load_issue[size_t(cu)], bs.load_lds[size_t(cu)]});
      bs.tok[size_t(cu)] += e.cls_tokens[size_t(k)];
      bs.cu_n[size_t(cu)] += 1;
      bs.cu_time[size_t(cu)] += uc.mem;
      e.round_cu[size_t(i)] = cu;
    }
  }
  // HBM bytes, summed in launch order (round by round).
  if (modeled)
    for (int i = 0; i < N; ++i) hbm += e.cls_cost[size_t(bs.sorted_cls[size_t(i)])].hbm;
  // Labels: CUs fed by the (possibly partial) last round first, in that round's order.
  std::fill(e.label.begin(), e.label.end(), -1);
  int next = 0;
  for (int i = (rounds - 1) * C; i < N; ++i) e.label[size_t(e.round_cu[size_t(i)])] = next++;
  for (int cu = 0; cu < C; ++cu) {
    if (e.label[size_t(cu)] < 0) e.label[size_t(cu)] = next++;
    e.cu_tokens[size_t(e.label[size_t(cu)])] = bs.tok[size_t(cu)];
    e.cu_units[size_t(e.label[size_t(cu)])] = bs.cu_n[size_t(cu)];
  }
  // Issue-modeled: a CU's units run their waves' issue at its residency and pass every tile
  // through its one LDS (SIMDs and LDS bound apart), both overlapping its memory stream.
  if (modeled) {
    bs.issue.assign(size_t(C), 0.0);
    bs.lds.assign(size_t(C), 0.0);
    bs.serial.assign(size_t(C), 0.0);
    for (int i = 0; i < N; ++i) {
      const int cu = e.round_cu[size_t(i)];
      const UnitCost& uc = cost_of(i);
      bs.issue[size_t(cu)] += uc.issue(std::min(bs.cu_n[size_t(cu)], L.workgroups_per_cu));
      bs.lds[size_t(cu)] += uc.lds;
      bs.serial[size_t(cu)] += uc.serial;
    }
  }
  // A CU running fewer workgroups than it can hold streams at a proportionally lower rate
  // (fewer loads in flight): memory time = work * wpc / min(units, wpc). Issue-modeled, its
  // units also run back to back, each first waiting for its page ids and first KV rows
  // (resident ones overlap that fill), and the largest of memory, issue and LDS bounds it; the
  // launch moves its HBM bytes at the HBM bandwidth however well its CUs balance.
  double worst = 0.0;
  for (int cu = 0; cu < C; ++cu) {
    if (bs.cu_n[size_t(cu)] == 0) continue;
    const double occ = double(std::min(bs.cu_n[size_t(cu)], L.workgroups_per_cu)) / L.workgroups_per_cu;
    double t = bs.cu_time[size_t(cu)] / occ;
    // (Phased: each unit's fill is in its prologue, one unit at a time.)
    if (modeled)
      t = (in.prefix_store_factor > 0
               ? bs.serial[size_t(cu)]
               : in.prefix_unit_fill * std::ceil(double(bs.cu_n[size_t(cu)]) / L.workgroups_per_cu)) +
          std::max({t, bs.issue[size_t(cu)], bs.lds[size_t(cu)]});
    worst = std::max(worst, t);
  }
  if (modeled) worst = std::max(worst, in.prefix_hbm_factor * hbm / C);
  // (In an issue-modeled launch the reduce, too, streams at the HBM bandwidth.)
  e.cost = worst + reduce_bytes_of(L, e.splits) / in.kv_bytes_per_token / C * (modeled ? in.prefix_hbm_factor : 1.0);
}

// The evaluated candidate's units in launch order: each unit to its sorted position, then to
// position round * C + label of its CU.
void materialize(const Launch& L, const Eval& e, Candidate& c, BuildScratch& bs) {
  const int C = L.in().num_cus, N = e.n_units, J = int(L.jobs.size());
  c.splits.assign(e.splits.begin(), e.splits.end());
  c.cu_tokens.assign(e.cu_tokens.begin(), e.cu_tokens.end());
  c.cu_units.assign(e.cu_units.begin(), e.cu_units.end());
  c.cost = e.cost;
  c.units.resize(size_t(N));
  bs.next.assign(e.rank_start.begin(), e.rank_start.end());
  for (int ji = 0; ji < J; ++ji) {
    const Job& job = L.jobs[size_t(ji)];
    const Cut& cut = e.cuts[size_t(ji)];
    const bool partial = cut.s > 1 || job.forced_partial;
    const int k0 = e.rep[size_t(ji)] * kClasses;
    for (int j = 0; j < cut.s; ++j) {
      const auto [a, b] = cut.range(j);
      const int k1 = k0 + size_class(cut, j) * 2;
      for (int g = 0; g < job.G; ++g) {
        // page_base and qo_row are filled in when the plan is assembled.
        const int k = g == job.G - 1 ? k1 + 1 : k1;
        const int i = bs.next[size_t(e.cls_rank[size_t(k)])]++;
        const int cu = e.label[size_t(e.round_cu[size_t(i)])];
        c.units[size_t(i / C) * size_t(C) + size_t(cu)] =
            Raw{WorkUnit{0, 0, a, b, job.kv_len, partial ? 0 : -1, g, job.b}, b - a, job.rows_in_group(g), ji, j};
      }
    }
  }
}

// A lower bound of evaluate(L, splits).cost that needs no units (search() skips a candidate that
// cannot win): the busiest CU takes at least the mean over all CUs of what its units add up to,
// whatever the assignment (a CU's time is at least its memory, issue or LDS total, with the
// fill or phases added, and more when it holds fewer units than it can run at once), and an
// issue-modeled launch at least its HBM floor; the reduce term is exact. Without the occupancy
// factor it grows with every split added, so it also ends the search once it passes the best
// cost found.
void prepare_bounds(const Launch& L, BuildScratch& bs) {
  const PlanInputs& in = L.in();
  const size_t J = L.jobs.size();
  bs.job_issue.assign(J, 0.0);
  bs.job_lds.assign(J, 0.0);
  bs.job_serial_split.assign(J, 0.0);
  if (!issue_modeled(L)) return;
  const double prb = partial_row_bytes(L);
  for (size_t ji = 0; ji < J; ++ji) {
    const Job& job = L.jobs[ji];
    // Every split's units hold whole tiles of the job (the last maybe partial): their tiles add up
    // to the job's, whatever the split count.
    for (int g = 0; g < job.G; ++g) {
      const int rows = job.rows_in_group(g), blocks = (rows + 15) / 16;
      const auto [issue, lds] = tile_issue_and_lds(in, blocks, L.workgroups_per_cu);
      bs.job_issue[ji] += double(job.tiles) * issue;
      bs.job_lds[ji] += double(job.tiles) *
                        (in.prefix_blocks_per_wave > 1 ? tile_issue_and_lds(in, blocks, 1).second
                                                       : in.prefix_lds_per_tile + blocks * in.prefix_lds_per_block_tile);
      if (in.prefix_store_factor > 0)
        bs.job_serial_split[ji] += std::max(in.prefix_unit_fill, rows * in.prefix_prologue_per_row) +
                                   rows * prb / in.kv_bytes_per_token * in.prefix_store_factor;
    }
  }
}

double lower_bound(const Launch& L, std::span<const int> splits, const BuildScratch& bs, bool occupancy) {
  const PlanInputs& in = L.in();
  const int C = in.num_cus;
  const bool modeled = issue_modeled(L), phased = modeled && in.prefix_store_factor > 0;
  double mem = 0, hbm = 0, serial = 0, issue = 0, lds = 0, reduce = 0;
  int64_t units = 0;
  const double prb = partial_row_bytes(L);
  for (size_t ji = 0; ji < L.jobs.size(); ++ji) {
    const Job& job = L.jobs[ji];
    const int s = cut_job(in, job, splits[ji]).s;
    const bool partial = s > 1 || job.forced_partial;
    const double writes = job.rows * (partial ? prb : kFinalRowBytes) / in.kv_bytes_per_token;  // one split, all row groups
    mem += double(job.G) * job.len + (phased ? 0.0 : s * writes);
    hbm += job.len + s * writes;
    serial += s * bs.job_serial_split[ji];
    issue += bs.job_issue[ji];
    lds += bs.job_lds[ji];
    units += int64_t(s) * job.G;
    if (job.kind == Job::request && s > 1)
      reduce += double(s) * L.M * kPartialRowBytes + L.M * kFinalRowBytes;
    else if (job.kind != Job::request)
      reduce += double(s) * job.rows * prb;
  }
  // With occupancy: a CU holds at most one unit per round, so at most R = ceil(units / C) units,
  // and streams its memory at most at min(R, wpc) / wpc of its rate. (Without it the bound grows
  // with every split added.)
  if (occupancy && units > 0) {
    const int64_t R = (units + C - 1) / C;
    mem *= double(L.workgroups_per_cu) / double(std::min<int64_t>(R, L.workgroups_per_cu));
  }
  const double reduce_term = reduce / in.kv_bytes_per_token / C * (modeled ? in.prefix_hbm_factor : 1.0);
  if (!modeled) return mem / C + reduce_term;
  const double fill = phased ? serial : in.prefix_unit_fill * double(units) / L.workgroups_per_cu;
  return std::max(in.prefix_hbm_factor * hbm / C, (fill + std::max({mem, issue, lds})) / C) + reduce_term;
}

// Whether a candidate whose cost is at least `bound` cannot beat `best` (build()'s test: a
// candidate wins when it is cheaper than best by more than a relative 1e-9). The bound is summed
// in another order than build() sums: 1e-12 covers the rounding.
bool cannot_win(double bound, double best) { return bound * (1 - 1e-12) >= best * (1.0 - 1e-9); }

// Capacity that bounds the units of any candidate search() evaluates: apportion stays within
// k * C units for k <= max(k_lo, 4, one-split units / C + 1) + max_rounds (or at the one-split
// units). It depends on the batch and the launch's row groups only, not on the lengths, so
// storage reserved with it serves every later step of a batch.
size_t units_bound(const Launch& L) {
  const int64_t C = L.in().num_cus;
  int64_t ones = 0;
  for (const Job& j : L.jobs) ones += j.G;
  const int64_t k_hi = std::max<int64_t>({1, ones / C, 4, ones / C + 1}) + L.in().max_rounds;
  return size_t(std::max(ones, k_hi * C));
}

// The cheapest candidate of a launch: k units per CU for k = floor(units at one split / C) (no
// split when the jobs already fill the GPU) up to max_rounds more; ties to fewer units. An
// issue-modeled launch also tries its prefixes' splits fixed at r whole rounds of units (r = 1..3),
// the other jobs (members' unique parts) apportioned over the rounds after them: a prefix split
// costs a partial of every row of its group, a unique part's split only of its M rows, so the
// cheap splits fill in around the dear ones.
//
// The candidates are exactly those of building every k; a candidate whose lower bound (above)
// cannot beat the best so far is not built, and the k of a series stop once the bound of the
// increments every larger k makes too (the greedy's clean state) cannot.
void search(Launch& L, Eval& best, BuildScratch& bs) {
  const int64_t C = L.in().num_cus;
  set_caps(L);
  const size_t J = L.jobs.size();
  const size_t bound = units_bound(L);
  for (Eval* e : {&best, &bs.work, &bs.best}) e->reserve(bound, J, size_t(C));
  bs.sorted_cls.reserve(bound), bs.keys.reserve(J * kClasses), bs.next.reserve(J * kClasses + 1);
  bs.bundle.reserve(bound), bs.units_tmp.reserve(bound);
  bs.pending.reserve(J), bs.prev.reserve(J), bs.base.reserve(J), bs.run_start.reserve(size_t(C));
  bs.fl_start.reserve(bound + 1);
  for (Greedy* g : {&bs.greedy, &bs.tail}) g->s.reserve(J), g->num.reserve(J), g->growing.reserve(J), g->heap.reserve(J);
  prepare_bounds(L, bs);
  bs.ones.assign(J, 1);
  const int64_t k_lo = std::max<int64_t>(1, units_of(L, bs.ones) / C);
  bool have = false;
  // A first candidate whose CUs would run fewer units than they hold is not evaluated until the
  // second is: when the second costs less than the first's lower bound, it would replace the first
  // anyway (the search keeps the first candidate, then any cheaper by a relative 1e-9), and the
  // first is never evaluated.
  bool pending = false;
  double pending_bound = 0;
  auto accept = [&] {
    if (!have || bs.work.cost < bs.best.cost * (1.0 - 1e-9)) {
      bs.best.swap(bs.work);
      have = true;
    }
  };
  auto resolve_pending = [&] {
    if (!pending) return;
    pending = false;
    evaluate(L, bs.pending, bs.best, bs);
    have = true;
  };
  auto consider = [&](int64_t k_from, std::span<const int> base, std::span<const char> grow) {
    Greedy& g = bs.greedy;
    g.start(L, base, grow);
    bool have_prev = false;
    for (int64_t k = k_from; k <= k_from + L.in().max_rounds; ++k) {
      const int64_t slots = k * C;
      g.advance(L, slots);
      if (have && cannot_win(lower_bound(L, g.s, bs, false), bs.best.cost)) break;  // nor any larger k
      const Greedy* s = &g;
      if (g.tail_possible(slots)) {
        bs.tail = g;
        bs.tail.finish(L, slots);
        s = &bs.tail;
      }
      if (have_prev && s->s == bs.prev) {
        // Saturated: no more splits possible; larger k changes nothing.
        if (units_of(L, s->s) < slots) break;
        continue;
      }
      bs.prev = s->s;
      have_prev = true;
      const double bound = lower_bound(L, s->s, bs, true);
      if (have && cannot_win(bound, bs.best.cost)) continue;
      if (!have && !pending && bound > lower_bound(L, s->s, bs, false) * (1 + 1e-6)) {
        // (Only a first candidate whose CUs hold fewer units than they can run at once: its
        // occupancy bound may exceed what the next candidate costs.)
        pending = true;
        pending_bound = bound;
        bs.pending = s->s;
        continue;
      }
      evaluate(L, s->s, bs.work, bs);
      if (pending) {
        if (bs.work.cost < pending_bound * (1 - 1e-12) * (1.0 - 1e-9))
          pending = false;  // the second replaces the first, whatever the first costs
        else
          resolve_pending();
      }
      accept();
    }
  };
  bs.grow_all.assign(J, 1);
  consider(k_lo, bs.ones, bs.grow_all);
  resolve_pending();
  if (issue_modeled(L)) {
    bs.grow_prefix.assign(J, 0);
    bs.grow_other.assign(J, 0);
    for (size_t j = 0; j < J; ++j) (L.jobs[j].kind == Job::prefix ? bs.grow_prefix : bs.grow_other)[j] = 1;
    const bool mixed = std::count(bs.grow_prefix.begin(), bs.grow_prefix.end(), 1) > 0 &&
                       std::count(bs.grow_other.begin(), bs.grow_other.end(), 1) > 0;
    for (int64_t r = 1; mixed && r <= 3; ++r) {
      Greedy& g = bs.tail;  // the one-shot apportion of the prefixes over r rounds
      g.start(L, bs.ones, bs.grow_prefix);
      g.advance(L, r * C);
      g.finish(L, r * C);
      bs.base = g.s;
      consider(std::max<int64_t>(r + 1, units_of(L, bs.base) / C + 1), bs.base, bs.grow_other);
    }
  }
  best = bs.best;  // a copy: each buffer keeps its role, and its capacity, from call to call
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
// goes whole to one residue class mod X where both of its pools have room (largest first, ties
// by the component's root label), otherwise its labels go one by one. Returns {bundles, bundles
// on one XCD}.
std::pair<int, int> place_row_groups_by_xcd(const Launch& L, Candidate& c, BuildScratch& bs) {
  const int C = L.in().num_cus, X = L.in().num_xcds, N = int(c.units.size());
  if (N == 0) return {0, 0};
  const int rounds = (N + C - 1) / C, n_last = N - (rounds - 1) * C;
  // Same-round units of one split (job, split) with more than one row group, by (round, job,
  // split), each bundle's units in launch order.
  // (Round by round, a counting sort by the job's first split among jobs of several row groups +
  // split, of S such splits; stable, so each bundle's units stay in launch order.)
  bs.n_tmp.assign(L.jobs.size() + 1, 0);
  for (size_t j = 0; j < L.jobs.size(); ++j)
    bs.n_tmp[j + 1] = bs.n_tmp[j] + (L.jobs[j].G > 1 ? c.splits[j] : 0);
  const int S = bs.n_tmp[L.jobs.size()];
  bs.bundle.clear();
  for (int r = 0; r < rounds; ++r) {
    const int i0 = r * C, i1 = std::min(N, i0 + C);
    bs.fl_start.assign(size_t(S) + 1, 0);
    int n = 0;
    for (int i = i0; i < i1; ++i) {
      const Raw& x = c.units[size_t(i)];
      if (L.jobs[size_t(x.job)].G > 1) ++bs.fl_start[size_t(bs.n_tmp[size_t(x.job)] + x.split) + 1], ++n;
    }
    for (int k = 0; k < S; ++k) bs.fl_start[size_t(k) + 1] += bs.fl_start[size_t(k)];
    const size_t base = bs.bundle.size();
    bs.bundle.resize(base + size_t(n));
    for (int i = i0; i < i1; ++i) {
      const Raw& x = c.units[size_t(i)];
      if (L.jobs[size_t(x.job)].G > 1)
        bs.bundle[base + size_t(bs.fl_start[size_t(bs.n_tmp[size_t(x.job)] + x.split)]++)] = {r, x.job, x.split, i % C, i};
    }
  }
  auto same = [](const BuildScratch::BundleUnit& a, const BuildScratch::BundleUnit& b) {
    return a.round == b.round && a.job == b.job && a.split == b.split;
  };
  // Bundles of >= 2 units, and those whose units' workgroups (round r, label l: r C + l) share an XCD.
  auto count_one_xcd = [&](const std::vector<int>& label) {
    std::pair<int, int> r{0, 0};
    for (size_t a = 0; a < bs.bundle.size();) {
      size_t e = a + 1;
      while (e < bs.bundle.size() && same(bs.bundle[e], bs.bundle[a])) ++e;
      if (e - a >= 2) {
        const int64_t round_base = int64_t(bs.bundle[a].round) * C;
        auto xcd = [&](int l) { return (round_base + label[size_t(l)]) % X; };
        ++r.first;
        bool one = true;
        for (size_t k = a; k < e; ++k) one = one && xcd(bs.bundle[k].label) == xcd(bs.bundle[a].label);
        r.second += one;
      }
      a = e;
    }
    return r;
  };
  bs.label.resize(size_t(C));
  std::iota(bs.label.begin(), bs.label.end(), 0);
  if (X <= 1 || C % X != 0) return count_one_xcd(bs.label);

  bs.parent.resize(size_t(C));
  std::iota(bs.parent.begin(), bs.parent.end(), 0);
  auto find = [&](int a) {
    while (bs.parent[size_t(a)] != a) a = bs.parent[size_t(a)] = bs.parent[size_t(bs.parent[size_t(a)])];
    return a;
  };
  for (size_t a = 0; a < bs.bundle.size();) {
    size_t e = a + 1;
    while (e < bs.bundle.size() && same(bs.bundle[e], bs.bundle[a])) ++e;
    for (size_t k = a; k < e; ++k) {
      const int r0 = find(bs.bundle[a].label);
      bs.parent[size_t(find(bs.bundle[k].label))] = r0;
    }
    a = e;
  }
  // Components: labels by root, ascending; then the largest first (ties: lower root first).
  bs.root.resize(size_t(C));
  bs.comp_start.assign(size_t(C) + 1, 0);
  for (int l = 0; l < C; ++l) bs.root[size_t(l)] = find(l), ++bs.comp_start[size_t(bs.root[size_t(l)]) + 1];
  for (int r = 0; r < C; ++r) bs.comp_start[size_t(r) + 1] += bs.comp_start[size_t(r)];
  bs.comp_label.resize(size_t(C));
  bs.n_tmp.assign(bs.comp_start.begin(), bs.comp_start.end() - 1);
  for (int l = 0; l < C; ++l) bs.comp_label[size_t(bs.n_tmp[size_t(bs.root[size_t(l)])]++)] = l;
  // (A counting sort by size, roots ascending within a size.)
  bs.n_tmp.assign(size_t(C) + 2, 0);
  for (int r = 0; r < C; ++r) ++bs.n_tmp[size_t(C - (bs.comp_start[size_t(r) + 1] - bs.comp_start[size_t(r)])) + 1];
  for (int k = 0; k <= C; ++k) bs.n_tmp[size_t(k) + 1] += bs.n_tmp[size_t(k)];
  bs.comps.reserve(size_t(C));
  bs.comps.resize(size_t(C) - size_t(bs.n_tmp[size_t(C) + 1] - bs.n_tmp[size_t(C)]));  // components (size >= 1)
  for (int r = 0; r < C; ++r) {
    const int size = bs.comp_start[size_t(r) + 1] - bs.comp_start[size_t(r)];
    if (size > 0) bs.comps[size_t(bs.n_tmp[size_t(C - size)]++)] = {r, bs.comp_start[size_t(r)], size};
  }

  // Free labels per (pool, residue class), ascending: pool 0 = 0..n_last-1, pool 1 = the rest.
  auto pool = [&](int l) { return l < n_last ? 0 : X; };
  bs.fl_start.assign(2 * size_t(X) + 1, 0);
  for (int l = 0; l < C; ++l) ++bs.fl_start[size_t(pool(l) + l % X) + 1];
  for (int k = 0; k < 2 * X; ++k) bs.fl_start[size_t(k) + 1] += bs.fl_start[size_t(k)];
  bs.fl_label.resize(size_t(C));
  bs.fl_next.assign(bs.fl_start.begin(), bs.fl_start.end() - 1);
  for (int l = 0; l < C; ++l) bs.fl_label[size_t(bs.fl_next[size_t(pool(l) + l % X)]++)] = l;
  bs.fl_next.assign(bs.fl_start.begin(), bs.fl_start.end() - 1);  // the next free label of each class
  auto room = [&](int k) { return size_t(bs.fl_start[size_t(k) + 1] - bs.fl_next[size_t(k)]); };
  for (const auto& comp : bs.comps) {
    int need[2] = {0, 0};
    for (int q = comp.start; q < comp.start + comp.size; ++q) ++need[pool(bs.comp_label[size_t(q)]) ? 1 : 0];
    int best = -1;
    size_t best_room = 0;
    for (int k = 0; k < X; ++k) {
      const size_t a = room(k), b = room(X + k);
      if (a >= size_t(need[0]) && b >= size_t(need[1]) && (best < 0 || a + b > best_room)) best = k, best_room = a + b;
    }
    for (int q = comp.start; q < comp.start + comp.size; ++q) {
      const int l = bs.comp_label[size_t(q)];
      int k = best;
      if (k < 0) {  // no class holds the whole component: the fullest class of the label's pool
        k = 0;
        for (int j = 1; j < X; ++j)
          if (room(pool(l) + j) > room(pool(l) + k)) k = j;
      }
      bs.label[size_t(l)] = bs.fl_label[size_t(bs.fl_next[size_t(pool(l) + k)]++)];
    }
  }
  bs.units_tmp.resize(size_t(N));
  bs.tok_tmp.assign(size_t(C), 0);
  bs.n_tmp.assign(size_t(C), 0);
  for (int i = 0; i < N; ++i) bs.units_tmp[size_t((i / C) * C + bs.label[size_t(i % C)])] = c.units[size_t(i)];
  for (int l = 0; l < C; ++l) {
    bs.tok_tmp[size_t(bs.label[size_t(l)])] = c.cu_tokens[size_t(l)];
    bs.n_tmp[size_t(bs.label[size_t(l)])] = c.cu_units[size_t(l)];
  }
  const auto counted = count_one_xcd(bs.label);
  std::copy(bs.units_tmp.begin(), bs.units_tmp.end(), c.units.begin());
  std::copy(bs.tok_tmp.begin(), bs.tok_tmp.end(), c.cu_tokens.begin());
  std::copy(bs.n_tmp.begin(), bs.n_tmp.end(), c.cu_units.begin());
  return counted;
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

// One plan the cascade decision prices: the groups it cascades (none: the per-request plan), its
// two launches' best candidates, and its partial slots.
struct PricedSet {
  uint64_t key = 0;                    // the set of passing groups it cascades (plan_decode)
  std::vector<PrefixGroup> cascading;  // those groups, in batch order
  Launch decode, prefix;
  Eval dec, pre;  // the launches' best candidates, evaluated (materialized when the set is chosen)
  // Partial slots (number_slots): of each job's split 0 and its stride, and of each cascading
  // group its first slot B and its members' most unique splits U.
  std::vector<int> dec_slot, dec_stride, pre_slot, pre_stride, group_first, group_unique;
  int num_partials = 0;
  double cost = 0.0;  // predicted_cost
  std::string over;   // why the workspace cannot hold it ("": it fits)
};

struct Own {
  bool in_prefix = false;
  int job = -1;
};

}  // namespace

struct PlanScratch::Impl {
  BuildScratch bs;
  Candidate dec, pre;  // the chosen set's launches, materialized
  std::vector<std::unique_ptr<PricedSet>> pool;  // sets priced in this call: pool[0 .. used)
  size_t used = 0;
  std::vector<int> shared, page_base, group_at;
  std::vector<Own> own;
  std::vector<PrefixGroup> passing;
  std::vector<size_t> passing_at;
};

namespace {

constexpr uint64_t kAllGroups = ~uint64_t(0);  // every passing group, when there are too many to toggle
bool in_set(uint64_t key, size_t gi) { return key == kAllGroups || (gi < 64 && (key >> gi) & 1); }

// Numbers the partial slots in request order. A split request gets consecutive slots; a cascading
// group gets base slot B and slot B + k * count + i for member i's k-th partial (k < kp: prefix
// split k, written by the prefix units with partial = B + k * count; else unique split k - kp),
// so every member's partials are one arithmetic progression of stride count for the reduce. An
// empty request has no partial and no split: its reduce entry merges none (o = 0, lse = -inf).
// With `out`, also its splits and reduce entries.
void number_slots(const PlanInputs& in, PricedSet& ps, PlanScratch::Impl& sc, Plan* out) {
  const int batch = int(in.kv_lens.size()), q = in.qseqlen;
  const Launch &decode = ps.decode, &prefix = ps.prefix;
  const Eval &dec = ps.dec, &pre = ps.pre;
  // Each request's job of its own tokens: a lone request's or a member's unique part, in the
  // decode launch or (qseqlen 1, every request a member: cascade_plan) in the prefix launch;
  // job -1: a member without unique tokens, or an empty request.
  sc.own.assign(size_t(batch), Own{});
  for (size_t j = 0; j < decode.jobs.size(); ++j) sc.own[size_t(decode.jobs[j].b)] = {false, int(j)};
  for (size_t j = 0; j < prefix.jobs.size(); ++j)
    if (prefix.jobs[j].kind == Job::unique) sc.own[size_t(prefix.jobs[j].b)] = {true, int(j)};
  auto own_splits = [&](int b) {
    const Own& o = sc.own[size_t(b)];
    return o.job < 0 ? 0 : o.in_prefix ? pre.splits[size_t(o.job)] : dec.splits[size_t(o.job)];
  };
  ps.dec_slot.assign(decode.jobs.size(), -1), ps.pre_slot.assign(prefix.jobs.size(), -1);  // slot of split 0
  ps.dec_stride.assign(decode.jobs.size(), 1), ps.pre_stride.assign(prefix.jobs.size(), 1);
  ps.group_first.assign(ps.cascading.size(), -1), ps.group_unique.assign(ps.cascading.size(), 0);
  if (out) {
    out->splits.assign(size_t(batch), 1);
    out->reduces.clear();
    out->reduces.reserve(size_t(batch));  // at most one entry per request
  }
  sc.group_at.assign(size_t(batch), -1);
  for (size_t gi = 0; gi < ps.cascading.size(); ++gi) sc.group_at[size_t(ps.cascading[gi].first)] = int(gi);
  int next = 0;
  for (int b = 0; b < batch;) {
    const int gi = sc.group_at[size_t(b)];
    if (gi < 0) {
      if (in.kv_lens[size_t(b)] == 0) {
        if (out) {
          out->splits[size_t(b)] = 0;
          out->reduces.push_back({b * q, 0, 0, 1, 0, {}});
        }
        ++b;
        continue;
      }
      const int j = sc.own[size_t(b)].job, s = dec.splits[size_t(j)];
      if (out) out->splits[size_t(b)] = s;
      if (s > 1) {
        if (out) out->reduces.push_back({b * q, next, s, 1, 0, {}});
        ps.dec_slot[size_t(j)] = next;
        next += s;
      } else if (out && in.merge_in_launch) {
        out->reduces.push_back({b * q, 0, 1, 1, 0, {}});  // reduces[b]: read by no unit (it writes o itself)
      }
      ++b;
      continue;
    }
    const PrefixGroup& g = ps.cascading[size_t(gi)];
    const int kp = pre.splits[size_t(gi)];
    int U = 0;
    for (int i = 0; i < g.count; ++i) U = std::max(U, own_splits(g.first + i));
    const int B = next;
    ps.group_first[size_t(gi)] = B;
    ps.group_unique[size_t(gi)] = U;
    ps.pre_slot[size_t(gi)] = B;
    ps.pre_stride[size_t(gi)] = g.count;
    for (int i = 0; i < g.count; ++i) {
      const int r = g.first + i, u = own_splits(r);
      const Own& o = sc.own[size_t(r)];
      if (o.job >= 0) {
        (o.in_prefix ? ps.pre_slot : ps.dec_slot)[size_t(o.job)] = B + kp * g.count + i;
        (o.in_prefix ? ps.pre_stride : ps.dec_stride)[size_t(o.job)] = g.count;
      }
      // The prefix kernel's partials (its splits of the prefix, and of the unique part when it
      // runs that too) are bf16 where its geometry says so; they come first.
      const int bf16 = in.prefix_partial_o_bytes == 2 ? kp + (o.in_prefix ? u : 0) : 0;
      if (out) {
        out->splits[size_t(r)] = kp + u;
        out->reduces.push_back({r * q, B + i, kp + u, g.count, bf16, {}});
      }
    }
    next = B + (kp + U) * g.count;
    b = g.first + g.count;
  }
  ps.num_partials = next;
}

// The set's predicted cost: the launches run one after the other on one stream, so their times
// add; the reduce writes every cascading member's final rows, and every empty request's
// (o = 0, lse = -inf).
void price(const PlanInputs& in, PricedSet& ps) {
  const int M = ps.decode.M;
  double cascade_reduce_final = 0.0;
  for (const PrefixGroup& g : ps.cascading) cascade_reduce_final += double(g.count) * M * kFinalRowBytes;
  ps.cost = ps.dec.cost;
  if (!ps.prefix.jobs.empty()) {
    // (The final rows at the HBM bandwidth too where the prefix launch is issue-modeled.)
    ps.cost += ps.pre.cost + cascade_reduce_final / in.kv_bytes_per_token / in.num_cus *
                                 (issue_modeled(ps.prefix) ? in.prefix_hbm_factor : 1.0);
  }
  int empty = 0;
  for (int len : in.kv_lens) empty += len == 0;
  if (empty > 0) ps.cost += double(empty) * M * kFinalRowBytes / in.kv_bytes_per_token / in.num_cus;
}

// Fills `p` with the set's units (dec, pre: its launches' candidates, materialized), tables and
// summary (its partial slots numbered).
void assemble(const PlanInputs& in, PricedSet& ps, const Candidate& dec, const Candidate& pre, PlanScratch::Impl& sc,
              Plan& p) {
  const int batch = int(in.kv_lens.size()), M = ps.decode.M, q = in.qseqlen;
  sc.page_base.assign(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b)
    sc.page_base[size_t(b) + 1] = sc.page_base[size_t(b)] + (in.kv_lens[size_t(b)] + in.page_size - 1) / in.page_size;
  number_slots(in, ps, sc, &p);
  p.num_partials = ps.num_partials;
  p.units.clear();
  for (const Raw& x : dec.units) {
    WorkUnit u = x.u;
    u.qo_row = u.batch * q;
    u.page_base = sc.page_base[size_t(u.batch)];
    if (u.partial >= 0) u.partial = ps.dec_slot[size_t(x.job)] + x.split * ps.dec_stride[size_t(x.job)];
    p.units.push_back(u);
  }
  if (in.merge_in_launch) {
    // No reduce launch writes an empty request's rows: a unit of no tokens per row group does
    // (its rows see no token: o = 0, lse = -inf, as the reduce writes them).
    const int groups = (M + in.rows_per_group - 1) / in.rows_per_group;
    for (int b = 0; b < batch; ++b)
      if (in.kv_lens[size_t(b)] == 0)
        for (int g = 0; g < groups; ++g) p.units.push_back(WorkUnit{b * q, sc.page_base[size_t(b)], 0, 0, 0, -1, g, b});
  }
  p.merge_in_launch = in.merge_in_launch;
  p.prefix_units.clear();
  for (const Raw& x : pre.units) {
    const Job& job = ps.prefix.jobs[size_t(x.job)];
    p.prefix_units.push_back(abi::PrefixUnit{job.b * q, sc.page_base[size_t(job.b)], x.u.kv_start, x.u.kv_end,
                                             job.rows, ps.pre_slot[size_t(x.job)] + x.split * ps.pre_stride[size_t(x.job)],
                                             x.u.row_group, job.b});
  }
  p.rows = M;
  p.row_groups = (M + in.rows_per_group - 1) / in.rows_per_group;
  p.rows_per_group = in.rows_per_group;
  p.prefix_rows_per_group = ps.prefix.jobs.empty() ? 0 : in.prefix_rows_per_group;
  p.tile_tokens = in.tile_tokens;
  p.num_cus = in.num_cus;
  p.num_xcds = in.num_xcds;
  summarise(dec, in.num_cus, p.balance, p.cus_used);
  p.cu_tokens.assign(dec.cu_tokens.begin(), dec.cu_tokens.end());
  p.cu_units.assign(dec.cu_units.begin(), dec.cu_units.end());
  if (!ps.prefix.jobs.empty()) {
    p.prefix_cu_tokens.assign(pre.cu_tokens.begin(), pre.cu_tokens.end());
    p.prefix_cu_units.assign(pre.cu_units.begin(), pre.cu_units.end());
  } else {
    p.prefix_cu_tokens.clear();
    p.prefix_cu_units.clear();
  }
  p.predicted_cost = ps.cost;
}

// Prices the plan that cascades `ps.cascading` (none: the per-request plan): members' unique parts
// and the other requests in the decode launch, the groups' prefixes in the prefix launch.
void plan_set(const PlanInputs& in, int M, PricedSet& ps, PlanScratch::Impl& sc) {
  ps.decode.reset(in, M, in.workgroups_per_cu, false);
  ps.prefix.reset(in, M, in.prefix_workgroups_per_cu, true);
  const int batch = int(in.kv_lens.size());
  ps.decode.jobs.reserve(size_t(batch));
  ps.prefix.jobs.reserve(size_t(batch) + ps.cascading.size());
  sc.shared.assign(size_t(batch), 0);
  for (size_t gi = 0; gi < ps.cascading.size(); ++gi) {
    const PrefixGroup& g = ps.cascading[gi];
    for (int b = g.first; b < g.first + g.count; ++b) sc.shared[size_t(b)] = g.shared_tokens;
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
    ps.prefix.jobs.push_back(j);
  }
  // At qseqlen 1 the decode kernel's causal rule (t < kv_len) is the prefix kernel's (the unit's
  // end), so when every request is a member (an empty request has no work: it does not count)
  // the unique parts run in the prefix launch too, as units of one member's M rows: one
  // attention launch instead of two (docs/planner.md).
  bool one_launch = in.qseqlen == 1 && !ps.cascading.empty();
  for (int b = 0; one_launch && b < batch; ++b) one_launch = sc.shared[size_t(b)] > 0 || in.kv_lens[size_t(b)] == 0;
  for (int b = 0; b < batch; ++b) {
    if (in.kv_lens[size_t(b)] == 0) continue;  // an empty request: no work
    if (sc.shared[size_t(b)] == 0) {
      ps.decode.jobs.push_back(request_job(in, M, b, 0, Job::request));
    } else if (in.kv_lens[size_t(b)] > sc.shared[size_t(b)]) {
      Job j = request_job(in, M, b, sc.shared[size_t(b)], Job::unique);
      if (one_launch) {
        j.rows_per_group = in.prefix_rows_per_group;
        j.G = (j.rows + j.rows_per_group - 1) / j.rows_per_group;
        ps.prefix.jobs.push_back(j);
      } else {
        ps.decode.jobs.push_back(j);
      }
    }
  }
  search(ps.decode, ps.dec, sc.bs);
  if (ps.prefix.jobs.empty()) {
    ps.pre.splits.clear();
    ps.pre.n_units = 0;
    ps.pre.cu_tokens.clear();
    ps.pre.cu_units.clear();
    ps.pre.cost = 0.0;
  } else {
    search(ps.prefix, ps.pre, sc.bs);
  }
  number_slots(in, ps, sc, nullptr);
  price(in, ps);
  ps.over.clear();
  if (ps.over.capacity() < 256) ps.over.reserve(256);
  if (!ps.cascading.empty()) {
    const int64_t units = int64_t(ps.dec.n_units) + ps.pre.n_units;
    auto out = std::back_inserter(ps.over);
    if (in.max_units > 0 && units > in.max_units)
      fmt::format_to(out, "the workspace holds {} units; the cascade needs {}", in.max_units, units);
    else if (in.max_partials > 0 && ps.num_partials > in.max_partials)
      fmt::format_to(out, "the workspace holds {} partials; the cascade needs {}", in.max_partials, ps.num_partials);
  }
}

// The chosen set as the plan: its launches' units materialized, the prefix launch placed by XCD.
void emit(const PlanInputs& in, PricedSet& ps, PlanScratch::Impl& sc, Plan& out) {
  const size_t dec_bound = units_bound(ps.decode);
  sc.dec.reserve(dec_bound, ps.decode.jobs.size(), size_t(in.num_cus));
  out.units.reserve(dec_bound);
  materialize(ps.decode, ps.dec, sc.dec, sc.bs);
  std::pair<int, int> bundles{0, 0};
  if (ps.prefix.jobs.empty()) {
    sc.pre.units.clear();
  } else {
    const size_t pre_bound = units_bound(ps.prefix);
    sc.pre.reserve(pre_bound, ps.prefix.jobs.size(), size_t(in.num_cus));
    out.prefix_units.reserve(pre_bound);
    materialize(ps.prefix, ps.pre, sc.pre, sc.bs);
    bundles = place_row_groups_by_xcd(ps.prefix, sc.pre, sc.bs);
  }
  assemble(in, ps, sc.dec, sc.pre, sc, out);
  out.prefix_row_group_bundles = bundles.first;
  out.prefix_row_group_bundles_one_xcd = bundles.second;
}

}  // namespace

PlanScratch::PlanScratch() : impl_(std::make_unique<Impl>()) {}
PlanScratch::~PlanScratch() = default;
PlanScratch::PlanScratch(PlanScratch&&) noexcept = default;
PlanScratch& PlanScratch::operator=(PlanScratch&&) noexcept = default;

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
      {"merge_in_launch", merge_in_launch},
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

void plan_decode(const PlanInputs& in, Plan& out, PlanScratch& scratch) {
  check_inputs(in);
  PlanScratch::Impl& sc = scratch.impl();
  const int M = in.heads * in.qseqlen;
  sc.used = 0;
  // The plan of a set of passing groups, priced once per call.
  auto priced = [&](uint64_t key) -> PricedSet& {
    for (size_t i = 0; i < sc.used; ++i)
      if (sc.pool[i]->key == key) return *sc.pool[i];
    if (sc.used == sc.pool.size()) sc.pool.push_back(std::make_unique<PricedSet>());
    PricedSet& ps = *sc.pool[sc.used++];
    ps.key = key;
    ps.cascading.clear();
    for (size_t gi = 0; gi < sc.passing.size(); ++gi)
      if (key != 0 && in_set(key, gi)) ps.cascading.push_back(sc.passing[gi]);
    plan_set(in, M, ps, sc);
    return ps;
  };
  // The per-request plan: every request whole in the decode launch.
  sc.passing.clear();
  sc.passing_at.clear();
  priced(0);

  CascadeInputs ci{.heads = in.heads,
                   .qseqlen = in.qseqlen,
                   .kv_bytes_per_token = in.kv_bytes_per_token,
                   .num_cus = in.num_cus,
                   .rows_per_group = in.rows_per_group,
                   .prefix_rows_per_group = in.prefix_rows_per_group,
                   .prefix_units_available = in.prefix_rows_per_group > 0,
                   // `always`: every group the kernels can cascade, however short its prefix.
                   .min_shared_tokens = in.cascade == CascadePolicy::always ? 1 : CascadeInputs{}.min_shared_tokens};
  auto cut_note = [&](const PrefixGroup& given, std::string& reason) {
    fmt::format_to(std::back_inserter(reason), " (shared_tokens {} cut to whole {}-token tiles)", given.shared_tokens,
                   in.tile_tokens);
  };
  std::vector<CascadeDecision>& decisions = out.prefix_groups;
  decisions.resize(in.prefix_groups.size());
  for (size_t k = 0; k < in.prefix_groups.size(); ++k) {
    const PrefixGroup& given = in.prefix_groups[k];
    CascadeDecision& d = decisions[k];
    if (d.reason.capacity() < 256) d.reason.reserve(256);
    // Units cut at whole tiles: a caller-given prefix is cut to whole tiles (the rest of its
    // last tile is read with each member's unique part). Detected groups are whole tiles already.
    PrefixGroup g = given;
    g.shared_tokens = given.shared_tokens / in.tile_tokens * in.tile_tokens;
    decide_cascade(g, ci, d);
    if (g.shared_tokens != given.shared_tokens) cut_note(given, d.reason);
    // A unique part of 1 .. qseqlen-1 tokens would leave row 0 without a visible token in it
    // (an empty partial row); such a member keeps the prefix in its own units.
    for (int b = g.first; d.cascade && b < g.first + g.count; ++b) {
      const int unique = in.kv_lens[size_t(b)] - g.shared_tokens;
      if (unique > 0 && unique < in.qseqlen) {
        d.cascade = false;
        d.reason.clear();
        fmt::format_to(std::back_inserter(d.reason),
                       "request {} has {} unique tokens, fewer than qseqlen = {}: its first query row would "
                       "see none of them",
                       b, unique, in.qseqlen);
      }
    }
    if (d.cascade && in.cascade == CascadePolicy::never)
      d.cascade = false, d.reason = "the caller turned cascades off (cascade policy: never)";
    if (d.cascade) sc.passing.push_back(g), sc.passing_at.push_back(k);
  }
  if (sc.passing.empty()) {
    emit(in, *sc.pool[0], sc, out);
    return;
  }

  // Which groups cascade: all or none, whichever the model prices lower, then single groups
  // toggled while that lowers the cost (ties: fewer cascades), so each group's decision is the
  // cheaper of the chosen plan with and without it. Plans are priced once per set of groups.
  const size_t n = sc.passing.size();
  const bool toggle = n <= 8 && in.cascade != CascadePolicy::always;  // toggling costs n plans per sweep
  const uint64_t all = n <= 8 ? (uint64_t(1) << n) - 1 : kAllGroups, none = 0;
  auto cost = [&](uint64_t set) {
    const PricedSet& ps = priced(set);
    return ps.over.empty() ? ps.cost : std::numeric_limits<double>::infinity();
  };
  auto count = [&](uint64_t set) { return set == kAllGroups ? int(n) : std::popcount(set); };
  // `always`: all groups, unless the workspace cannot hold the cascade (then none, and why).
  const bool forced = in.cascade == CascadePolicy::always;
  uint64_t set = forced ? (std::isfinite(cost(all)) ? all : none) : cost(all) < cost(none) ? all : none;
  for (bool improved = toggle && n > 1; improved;) {
    improved = false;
    for (size_t gi = 0; gi < n; ++gi) {
      const uint64_t t = set ^ (uint64_t(1) << gi);
      const double ct = cost(t), cs = cost(set);
      if (ct < cs || (ct == cs && count(t) < count(set))) set = t, improved = true;
    }
  }
  for (size_t gi = 0; gi < n; ++gi) {
    const uint64_t with = toggle ? set | (uint64_t(1) << gi) : all, without = toggle ? set & ~(uint64_t(1) << gi) : none;
    const PricedSet &w = priced(with), &wo = priced(without);
    CascadeDecision& d = decisions[sc.passing_at[gi]];
    const PrefixGroup& g = sc.passing[gi];
    d.cascade = in_set(set, gi) && set != none;
    d.cost_cascade = w.cost;
    d.cost_per_request = wo.cost;
    d.reason.clear();
    auto out_reason = std::back_inserter(d.reason);
    if (d.cascade && !wo.over.empty())
      d.reason += "cascade kept: without it ", d.reason += wo.over;
    else if (d.cascade && forced)
      fmt::format_to(out_reason, "cascade asked for (policy always); modeled {:.1f} vs {:.1f} token-equivalents per request",
                     d.cost_cascade, d.cost_per_request);
    else if (d.cascade)
      fmt::format_to(out_reason, "cascade modeled cheaper: {:.1f} vs {:.1f} token-equivalents", d.cost_cascade,
                     d.cost_per_request);
    else if (!w.over.empty())
      d.reason += w.over;
    else
      fmt::format_to(out_reason, "per-request plan modeled cheaper: {:.1f} vs {:.1f} token-equivalents",
                     d.cost_per_request, d.cost_cascade);
    const PrefixGroup& given = in.prefix_groups[sc.passing_at[gi]];
    if (g.shared_tokens != given.shared_tokens) cut_note(given, d.reason);
    // The slot layout of the plan with the group cascaded (prefix split k writes B + k * count).
    size_t ci_with = 0;  // the group's index among the with-plan's cascading groups
    for (size_t k = 0; k < gi; ++k) ci_with += in_set(with, k);
    d.prefix_splits = w.pre.splits[ci_with];
    d.extra_bytes = int64_t(d.prefix_splits) * g.count * M * (512 * int64_t(in.prefix_partial_o_bytes) + 4) * 2;
    if (d.cascade) {
      d.first_slot = w.group_first[ci_with];
      d.slots = (d.prefix_splits + w.group_unique[ci_with]) * g.count;
    }
  }
  emit(in, priced(set), sc, out);
}

Plan plan_decode(const PlanInputs& in) {
  PlanScratch scratch;
  Plan p;
  plan_decode(in, p, scratch);
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
