// Calibration of the machine model on aiter's tuned GEMM tables (issue #34 item 1,
// docs/performance.md "Calibration on aiter's tuned tables").
//
// aiter's tuners time every GEMM shape on hardware (aiter/test_common.py `perftest`: device time
// from the torch profiler, mean of 101 runs, inputs rotated past the caches) and keep the fastest
// kernel per shape in aiter/configs/*tuned*.csv. A row whose arithmetic intensity is far below
// the machine balance is a stream of known bytes, so its time says what the hardware streams:
//   t = t0 + max(bytes / BW, bytes / (busy CUs x r_cu))
// t0: the fixed device time of a kernel; BW: the achievable HBM bandwidth; r_cu: what one busy CU
// streams in these kernels (their own bytes in flight; reported, not a machine constant).
// The tables are read from a user's aiter checkout and never committed; the figures the model
// uses are committed in generator/target with the aiter commit they came from.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mla::bench::cal {

// One row of a tuned GEMM table, as read.
struct TunedRow {
  std::string file;   // the table's file name ("bf16_tuned_gemm.csv")
  int line = 0;       // 1-based line in that file
  std::string gfx;    // "gfx942"
  int cu_num = 0;
  int64_t m = 0, n = 0, k = 0;
  std::string kernel;  // kernelName
  int split_k = 0;     // the table's splitK column (its meaning depends on the kernel family)
  double us = 0;       // measured device time
  // Element bytes: weights (N x K), activations (M x K), output (M x N), from the table family.
  double w_bytes = 0, a_bytes = 0, out_bytes = 0;
  std::string family;  // "bf16", "a8w8 rowwise", "a8w8 blockscale", "a4w4 blockscale"
};

// A table that is not used, and why.
struct SkippedTable {
  std::string file, reason;
  int rows = 0;
};

struct Tables {
  std::vector<TunedRow> rows;
  std::vector<SkippedTable> skipped;
  std::vector<std::string> files;  // tables read
  int untimed = 0;                 // rows with us 0 or inf (aiter's mark of a shape it did not time)
};

// Parses one table's text. Tables without the GEMM columns (gfx, cu_num, M, N, K, kernelName,
// splitK, us), batched tables (a B column) and families whose element sizes are unknown go to
// `skipped`; a malformed value of a used table is an error naming the file, line, field and value.
void parse_tuned_csv(const std::string& file_name, const std::string& text, Tables& out);
// DIR/aiter/configs/*tuned*.csv and DIR/aiter/configs/model_configs/*tuned*.csv (not *untuned*),
// in sorted order. Throws if the folder holds no tuned table.
Tables read_tuned_tables(const std::string& aiter_dir);

// The memory-bound criterion: arithmetic intensity 2MNK / bytes <= kMaxIntensity FLOP/B, at least
// 7.7x below the lowest dense machine balance of either target (MI300X bf16: 1307 TFLOP/s over
// 5.3 TB/s = 247 FLOP/B). For bf16 that is M <= 32, for fp8 M <= 16, for fp4 M <= 8.
constexpr double kMaxIntensity = 32;
double row_bytes(const TunedRow& r);  // weights + activations + output + scales
double row_intensity(const TunedRow& r);
bool memory_bound(const TunedRow& r);

// The workgroups of a row's launch where its kernel name gives the tile and its family the split-K:
// composable_kernel's a8w8_rowwise / a8w8_bpreshuffle / a8w8_blockscale[_bpreshuffle] instances
// (BLOCK x MPerBlock x NPerBlock x KPerBlock; KBatch = 2^splitK, aiter's gemm_a8w8*.cu), grid =
// ceil(M / MPerBlock) x ceil(N / NPerBlock) x KBatch. nullopt otherwise (asm, triton, hipBLASLt,
// flydsl, ck_tile: not used for per-CU figures).
std::optional<int64_t> row_grid(const TunedRow& r);

// The deterministic half: FNV-1a 64 of "file,gfx,cu_num,M,N,K"; even = fit, odd = held out.
bool in_fit_half(const TunedRow& r);

// One stream of a table row, as the fit sees it.
struct Sample {
  double bytes = 0, t_s = 0;
  int64_t grid = 0;  // 0: unknown
  int cus = 0;
};

struct FitOptions {
  double tiny_bytes = 4e6;      // t0 = median over rows up to this of (t - bytes / BW)
  double large_bytes = 256e6;   // BW from rows at least this (the 256 MB Infinity Cache of both targets)
  int min_large_rows = 10;      // fewer large rows: BW is not fitted (fixed_bw is used)
  double fixed_bw = 0;          // the bandwidth used for t0 when BW is not fitted
};

struct Fit {
  int rows = 0, tiny_rows = 0, large_rows = 0, grid_rows = 0;
  double t0_s = 0;
  double bw = 0;            // bytes per second
  bool bw_fitted = false;   // false: fixed_bw (too few large rows)
  double r_cu = 0;          // bytes per second per busy CU (0: no rows with a grid)
  double predict(const Sample& s, bool per_cu) const;
};
// t0 = median over tiny rows of (t - bytes / BW); 1/BW = the least-squares slope of (t - t0) over
// bytes on the large rows, weighted by 1/t^2 (relative error); alternated until both settle. r_cu
// minimises the squared relative error of t0 + max(bytes / BW, bytes / (busy x r_cu)) over the
// rows with a grid (a scan over 1e8..1e12 B/s, then a golden-section refinement).
Fit fit_samples(const std::vector<Sample>& samples, const FitOptions& o);

struct ErrorStats {
  int n = 0;
  double median_abs = 0, p90_abs = 0, median = 0;  // of model / measured - 1
};
ErrorStats relative_errors(const Fit& f, const std::vector<Sample>& samples, bool per_cu);

// One target (gfx, cu_num) of the tables: its fit on one half and its error on the other.
struct TargetCalibration {
  std::string gfx;
  int cu_num = 0;
  bool model_target = false;  // gfx942 at 304 CUs or gfx950 at 256 (the others are reported apart)
  int rows_total = 0, rows_memory_bound = 0, fit_rows = 0, held_out_rows = 0;
  Fit fit;
  // Held-out error by subset: all, tiny, large, with a grid; bytes only and with busy CUs.
  struct Subset {
    std::string name;
    ErrorStats bytes_only, per_cu;
  };
  std::vector<Subset> held_out;
  // Measured bandwidth (bytes / t) by bytes band, median, all memory-bound rows: the ramp.
  struct Band {
    double lo = 0, hi = 0;
    int n = 0;
    double median_bw = 0, max_bw = 0, model_bw = 0;  // model_bw: bytes / (fit at the band's median bytes)
  };
  std::vector<Band> bands;
};

struct Calibration {
  std::string aiter_dir, aiter_commit;  // commit: empty when DIR is not a git checkout
  int tables = 0, rows = 0, untimed = 0;
  std::vector<SkippedTable> skipped;
  std::vector<TargetCalibration> targets;
  nlohmann::json to_json() const;
  std::string markdown() const;
};
// fixed_bw(gfx, cu_num): the bandwidth t0 is fitted with where the tables have too few large rows
// (the target description's measured figure for the model targets).
Calibration calibrate(const Tables& t, const std::string& aiter_dir, const std::string& aiter_commit,
                      double (*fixed_bw)(const std::string& gfx, int cu_num));
// aiter_commit empty: DIR's git HEAD (aiter_commit_of).
Calibration calibrate_aiter_dir(const std::string& aiter_dir, const std::string& aiter_commit = "");
// HEAD of DIR's git checkout, or "" when it is not one (or git is missing).
std::string aiter_commit_of(const std::string& aiter_dir);

}  // namespace mla::bench::cal
