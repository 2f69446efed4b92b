// mlacheck: one command for a user with a GPU (issue #34). For every decode kernel of the device's
// target in a catalog: random problems of the kernel's shape (several kv lengths, empty requests,
// page and tile edges, a shared prefix where the kernel has a prefix variant) checked against the
// fp64 reference and, on HIP, against the emulator's output for the same code objects and inputs;
// a timing (warm-up, median of runs, inputs rotated past the last-level cache) beside the model's
// time for the same plan (mlabench's model) and, when it imports, aiter's mla_decode_fwd. Writes
// report.json and report.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mla::bench {

struct CheckOptions {
  std::string backend = "hip";     // "hip" or "emulator"
  std::string target = "gfx950";   // emulator only: the emulated device's target
  int device = 0;                  // hip: the HIP device ordinal
  std::string catalog_dir;         // "" : $MLA_CATALOG_DIR, else ./out
  std::string out_dir = "mlacheck-report";
  std::vector<std::string> kernels;  // substrings of kernel names to keep (empty: all)
  int max_kernels = 0;             // 0: no limit
  int max_len = 2048;              // longest request of the check problems (the emulator cross-check runs them on the CPU)
  std::vector<int> time_lens;      // the timed batch (empty: hip 8192 x 16, emulator max_len x 2)
  int runs = -1;                   // -1: hip 100, emulator 3
  int warmup = -1;                 // -1: hip 10, emulator 1
  int rotate = 0;                  // input sets of the timing (0: enough to exceed 2x the LLC on hip, 1 on the emulator)
  bool model = true;               // the model's time for the timed plan (mlabench)
  int64_t model_full_scale_tokens = 65536;  // the model's counters from one full-scale emulator run up to this
  bool aiter = true;               // try aiter's mla_decode_fwd (hip only)
  uint64_t seed = 0;               // 0: a fresh seed (printed and reported)
  std::string python3;             // interpreter for the aiter side
  std::string aiter_script;        // bench/mlacheck_aiter.py
};

// The lengths of the check problems for a kernel of this page size, token tile and query rows:
// page and tile edges (P-1, P, P+1, T-1, T, T+1, 2T+1), qseqlen itself, max_len and random ones,
// each in [qseqlen, max_len]; sorted, no repeats (empty requests are added by the caller).
std::vector<int> check_lengths(int page_size, int tile_tokens, int qseqlen, int max_len, uint64_t seed);

// Runs the whole check; returns the report (also written to out_dir). Throws std::invalid_argument
// for bad options and std::runtime_error when the device or catalog cannot be opened.
nlohmann::json run_check(const CheckOptions& o);

// The report as markdown (report.md).
std::string check_markdown(const nlohmann::json& report);

}  // namespace mla::bench
