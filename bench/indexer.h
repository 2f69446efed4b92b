// mlabench --set dsa-indexer: the DSA indexer's logits kernels (dsa_indexer_logits_*) priced by
// the machine model from emulator counters (docs/sparse.md "The indexer: performance").
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"

namespace mla::bench {

struct IndexerShape {
  std::string name;  // e.g. "V3.2 TP8 h64 nn2 128K x64"
  rt::Target target = rt::Target::gfx950;
  int heads = 64, next_n = 1, block_size = 64, batch = 1, context = 8192;
};
// The issue's shapes: DeepSeek-V3.2 TP8 (64 heads) and GLM-5 TP8 (32 heads), contexts 8K-128K,
// batch 1 / 16 / 64, next_n 1 / 2, block size 64, on MI355X and MI300X.
std::vector<IndexerShape> dsa_indexer_shapes();

struct IndexerResult {
  IndexerShape shape;
  std::string kernel;
  int chunk_tokens = 0, workgroups = 0, resident_per_cu = 0;
  // Measured on the emulator (two one-workgroup runs), extrapolated linearly to the shape:
  // bytes read per token and per workgroup, distinct (HBM) and as issued (L2 included).
  double read_bytes = 0, hbm_read_bytes = 0, write_bytes = 0;
  double logits_bytes = 0;      // written by this kernel and read back by the top-k (not built yet)
  double cache_bytes = 0;       // the indexer cache's own bytes (tokens x 132)
  double tile_cycles = 0;       // co-issue cycles per 32-token tile (the hot loop, modeled)
  double inflight_per_wave = 0; // bytes a wave keeps in flight: one tile's (measured per token)
  // Modeled: launch + one workgroup's fill + the largest of HBM, issue and Little's-law time.
  double hbm_s = 0, issue_s = 0, latency_s = 0, fixed_s = 0, total_s = 0;
  std::string bound;
  // The top-k launch (dsa_topk_per_row_decode, one workgroup per row; modeled): its time, its
  // per-row time, and its logits bytes read (five passes over each row).
  double topk_s = 0, topk_row_s = 0, topk_read_bytes = 0;
  int topk_segments = 1;  // the runtime's split (1: one launch)
  // The share of the achievable HBM ceiling the bytes moved reach over the modeled time.
  double hbm_fraction() const { return hbm_s / total_s; }
  nlohmann::json to_json() const;
};

std::vector<IndexerResult> measure_indexer(const std::vector<IndexerShape>& shapes, bool verbose);
std::string indexer_markdown(const std::vector<IndexerResult>& r);
// The host work of one mla_indexer_logits / mla_indexer_topk call (checks, the catalog lookup,
// the split, kernarg packing; the launch enqueue not included), measured: median us per shape.
struct IndexerHostCost {
  IndexerShape shape;
  double logits_us = 0, topk_us = 0;
};
std::vector<IndexerHostCost> measure_indexer_host_costs(const std::vector<IndexerShape>& shapes, int steps);
std::string indexer_host_costs_markdown(const std::vector<IndexerHostCost>& v);
// Every dsa_indexer_shapes() shape measured and written to out_dir/indexer.md and indexer.json;
// returns the markdown.
std::string write_indexer_report(const std::string& out_dir);

}  // namespace mla::bench
