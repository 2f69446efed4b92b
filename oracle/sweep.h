// The oracle's sweep (issue #34, docs/aiter-oracle.md "Sweep"): which problems `mlaoracle --sweep`
// runs each aiter kernel on, and how the results are summarised. Pure functions (no aiter, no
// emulator), so the enumeration and the summary are unit-tested in CI.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mla::oracle {

// One problem of the sweep: kv_split and the tokens of each request (batch = kv_lens.size()).
struct SweepCase {
  int kv_split = 1;
  std::vector<int> kv_lens;
  std::string why;  // what edge it probes (sampled preset), empty in the full grid
  int batch() const { return int(kv_lens.size()); }
  int max_len() const;
};

inline constexpr int kSweepMaxLen = 8192, kSweepMaxSplit = 16, kSweepMaxBatch = 64;

// Request lengths of the full sweep, 1..8192: 1-4 and every edge m-1, m, m+1 of the
// page/chunk sizes 16, 32, 64 and of 128 x {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64} (aiter's
// kernels hand out 64- (gfx942) or 128-token (gfx950) chunks round robin; the reduce counts
// splits in 16/32/64-token units), clipped to 8192. Sorted, unique.
std::vector<int> sweep_full_lengths();

// "full": kv_split 1..16 x batch {1, 8, 64} x sweep_full_lengths(): at batch 1 one case per
// length; at batch B > 1 the lengths, shuffled with `seed`, are cut into groups of B (the last
// group wraps around), so every length appears in some batch. "sampled": a fixed list of cases,
// each probing one edge (SweepCase::why). Throws OracleError for another name.
std::vector<SweepCase> sweep_cases(const std::string& preset, uint64_t seed = 1);

// Keeps the cases whose kv_split is in `kv_splits` (empty: all) and whose longest request is at
// most `max_len` (0: no limit).
std::vector<SweepCase> filter_cases(const std::vector<SweepCase>& cases, const std::vector<int>& kv_splits, int max_len);

// Validates --batch / --kv-lens / --kv-split values: batch 1..64, lengths 1..1'000'000 (0 is
// an empty request: aiter's kernels are not launched on those by mla.py, so not here either),
// kv_split 1..16. Throws OracleError naming the option, the value and what is allowed.
void check_cli_values(const std::vector<int>& batches, const std::vector<int>& kv_lens, const std::vector<int>& kv_splits);

// Requests of a non-sweep run: the --kv-lens list as given when no --batch; with --batch B, B
// requests whose lengths cycle through the list.
std::vector<int> batch_lengths(const std::vector<int>& kv_lens, int batch);

// One sweep result, as the summary needs it.
struct SweepOutcome {
  std::string kernel, target;
  int kv_split = 1, batch = 1, max_len = 0, min_len = 0;
  bool pass = false;
  std::string detail;  // failure: "d 1.4e-01, max err 75%" or the emulator's error rule
};

// The summary table (markdown): one row per kernel x target x kv_split x batch-class (1 or > 1)
// x run of consecutive lengths (sorted by longest request) with the same outcome: "| kernel |
// target | kv_split | batch | lengths | runs | result |", the first failure's detail in result.
std::string summarize(const std::vector<SweepOutcome>& outcomes);

}  // namespace mla::oracle
