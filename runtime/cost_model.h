// The planner's cost model of one launch (docs/planner.md "Cost model"), all of it modeled.
//
// Time is counted in token-equivalents: the time one CU takes to stream one KV token at its
// modeled rate (its resident workgroups' bytes in flight over the loaded latency, at most its
// read port: modeled_cu_stream_rate). A unit of `tiles` tiles costs its CU
//   fill + max(memory, issue):
//   fill    its wait for its page ids and first rows (a phased kernel: its Q prologue and its
//           partial stores, which run apart from its stream),
//   memory  tiles x T tokens, its Q rows and the rows it writes (partial or final), in tokens,
//   issue   tiles x the larger of its consumer waves' issue and the CU's LDS time per tile,
// as mlabench prices a CU; the units of a CU add. A launch costs at least its HBM floor:
// hbm_factor x (the tokens and written rows it moves from HBM) / CUs, hbm_factor = CUs x rate /
// HBM bandwidth.
#pragma once
#include <algorithm>
#include <vector>

namespace mla::rt {

inline constexpr double kPartialRowBytes = 512.0 * 4 + 4;  // a decode kernel's partial: f32 o row + lse
inline constexpr double kFinalRowBytes = 512.0 * 2;         // a bf16 o row

struct LaunchModel {
  int tile_tokens = 16;
  int kv_bytes_per_token = 576;
  int resident = 1;                      // workgroups per CU (they share its 4 SIMDs)
  double partial_row_bytes = kPartialRowBytes;
  double unit_fill = 0, hbm_factor = 0;  // 0, 0: no fill, no HBM floor
  double q_row_bytes = 0;                // a unit reads its Q rows (through the CU's port)
  // Issue and LDS (0: not modeled, memory only). Per tile of one computing row block (16 rows).
  double issue_per_block_tile = 0, lds_per_block_tile = 0, lds_per_tile = 0;
  int blocks_per_wave = 1;  // > 1: the figures per wave-tile with b = 1..blocks_per_wave blocks
  std::vector<double> wave_tile_issue, wave_tile_lds;
  double prologue_per_row = 0, store_factor = 0;  // a phased kernel (both > 0)
  // A decode kernel's producer issue per tile (0: not priced): one producer wave per resident
  // workgroup, each on its own SIMD (fp8_ds_mla's producer dequantises, docs/sparse.md).
  double producer_per_tile = 0;

  // Token-equivalents per tile of a unit of `rows` rows: its consumer waves' issue or the CU's
  // LDS time, whichever is longer (0: not modeled).
  double tile_issue(int rows) const {
    return std::max(consumer_issue(rows), producer_per_tile / std::min(4, resident));
  }
  double consumer_issue(int rows) const {
    const int blocks = (rows + 15) / 16;
    if (blocks_per_wave > 1 && !wave_tile_issue.empty()) {
      double sum = 0, most = 0, lds = lds_per_tile;
      for (int left = blocks; left > 0; left -= blocks_per_wave) {
        const size_t b = size_t(std::min(blocks_per_wave, left) - 1);
        sum += wave_tile_issue[b], most = std::max(most, wave_tile_issue[b]), lds += wave_tile_lds[b];
      }
      return std::max({sum / 4, most / resident, lds});
    }
    if (issue_per_block_tile <= 0) return 0;
    return std::max(blocks * issue_per_block_tile / std::min(4, blocks * resident), lds_per_tile + blocks * lds_per_block_tile);
  }
  // A unit's fill: its first rows' wait, or a phased kernel's prologue and stores.
  double unit_fill_of(int rows, bool partial) const {
    if (store_factor > 0) return std::max(unit_fill, rows * prologue_per_row) + writes(rows, partial) * store_factor;
    return unit_fill;
  }
  // A unit's memory besides its tiles: its Q rows and its writes (a phased kernel's: in its fill).
  double unit_memory(int rows, bool partial) const {
    return store_factor > 0 ? 0 : writes(rows, partial) + rows * q_row_bytes / kv_bytes_per_token;
  }
  double writes(int rows, bool partial) const {
    return rows * (partial ? partial_row_bytes : kFinalRowBytes) / kv_bytes_per_token;
  }
  // The reduce's dependent memory trips after its fill, each half a fill (mlabench's trip), for
  // a request of `splits` partials (generator/kernels/mla_reduce.h reduce_load_rounds: 8 waves, each
  // a range of whole 16-row chunks, its lse 64 per load; a test holds the two equal).
  static int reduce_rounds(int splits) {
    if (splits < 2) return 0;
    const int range = ((splits + 7) / 8 + 15) / 16 * 16;
    return (range + 63) / 64 + (range + 15) / 16;
  }
  double reduce_time(int max_splits) const { return max_splits < 2 ? 0 : unit_fill * (1 + 0.5 * reduce_rounds(max_splits)); }
  // The HBM floor of moving `tokens` (KV tokens and written rows in tokens) over `cus` CUs.
  double floor(double tokens, int cus) const { return hbm_factor * tokens / cus; }
};

}  // namespace mla::rt
