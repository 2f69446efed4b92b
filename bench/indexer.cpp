// mlabench --set dsa-indexer (bench/indexer.h): counters of one-workgroup emulator runs of each
// logits kernel, extrapolated to the shape, priced by the machine model. The model is stated in
// docs/sparse.md "The indexer: performance"; every time here is modeled.
#include "bench/indexer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <random>

#include <fmt/format.h>

#include "catalog/asm_facts.h"
#include "catalog/catalog.h"
#include "catalog/compile.h"
#include "config/config.h"
#include "emulator/code_object.h"
#include "emulator/device.h"
#include "kernels/dsa_indexer.h"
#include "runtime/dsa_indexer.h"
#include "runtime/mla_runtime_internal.h"

namespace mla::bench {

namespace {

constexpr int kSampleTokens[2] = {512, 1024};  // the two one-workgroup runs
constexpr int kTopK = 2048, kDsMlaBytes = abi::kDsMlaRowBytes;

// A DSA layer's launches as run: the logits, the top-k (one or two), and sparse MLA's two (its
// decode and reduce launches: the serving runtime's grids are fixed by capacity, no prefix launch).
int dsa_launches(const IndexerResult& x) { return 1 + (x.topk_segments > 1 ? 2 : 1) + 2; }

// The top-k kernel per row (measured: two one-row runs at each pair of kTopkSample lengths): bytes
// read per logit and per row, of rows held in registers (<= gen::kTopkResidentKeys) and of rows
// streamed through every pass.
constexpr int kTopkSample[2][2] = {{8192, 16384}, {32768, 65536}};  // whole loop iterations of every pass
struct TopkRates {
  double read_per_logit[2] = {}, read_per_row[2] = {};  // [0] resident, [1] streamed
};

// What a kernel costs per token and per workgroup (measured), and its hot loop (modeled).
struct KernelRates {
  std::string name;
  int resident = 1;
  double read_tok = 0, read_wg = 0, hbm_tok = 0, hbm_wg = 0, write_tok = 0;
  double tile_cycles = 0, inflight_per_wave = 0;
};

emu::Counters sample_run(const rt::CatalogKernel& k, const IndexerShape& s, int tokens) {
  emu::Device dev(s.target == rt::Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950);
  std::mt19937_64 rng(uint64_t(tokens) * 31 + uint64_t(s.heads));
  auto random_bytes = [&](size_t n, const char* name) {
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = uint8_t(rng() & 0x7e);  // positive finite fp8 codes in both flavours
    const uint64_t p = dev.alloc(n, 256, name);
    dev.write(p, v.data(), n);
    return p;
  };
  const int blocks = (tokens + s.block_size - 1) / s.block_size + 1;
  mla_indexer_logits_args a{};
  a.batch = 1, a.next_n = s.next_n, a.heads = s.heads, a.block_size = s.block_size;
  a.max_context_len = tokens, a.logits_stride = tokens, a.num_blocks = blocks, a.block_table_stride = blocks;
  a.q = random_bytes(size_t(s.next_n) * s.heads * abi::kIndexerDim, "q");
  a.kv_cache = random_bytes(size_t(blocks) * s.block_size * abi::kIndexerTokenBytes, "kv_cache");
  std::vector<float> w(size_t(s.next_n) * s.heads, 0.125f);
  a.weights = dev.alloc(w.size() * 4, 256, "weights");
  dev.write(a.weights, w.data(), w.size() * 4);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int i = 0; i < blocks; ++i) table[size_t(i)] = (i * 7 + 3) % blocks;  // scattered block ids, all in range
  a.block_table = dev.alloc(table.size() * 4, 256, "block_table");
  dev.write(a.block_table, table.data(), table.size() * 4);
  a.context_lens = dev.alloc(4, 256, "context_lens");
  dev.write(a.context_lens, &tokens, 4);
  a.logits = dev.alloc(size_t(s.next_n) * tokens * 4, 256, "logits");
  const rt::DecodeOp op = rt::indexer_logits_op(k, a, tokens);  // one workgroup
  return dev.dispatch(emu::CodeObject::load_file(k.co_path), k.name, {op.grid.x, op.grid.y, op.grid.z},
                      {op.block.x, 1, 1}, op.kernarg);
}

KernelRates rates_of(const rt::Catalog& cat, const IndexerShape& s, bool verbose) {
  const rt::CatalogKernel& k = rt::indexer_logits_kernel(cat, s.target, s.heads, s.next_n, s.block_size);
  KernelRates r;
  r.name = k.name;
  r.resident = k.resident_workgroups_per_cu;
  emu::Counters c[2];
  for (int i = 0; i < 2; ++i) c[i] = sample_run(k, s, kSampleTokens[i]);
  const double dt = kSampleTokens[1] - kSampleTokens[0];
  auto line = [&](double y0, double y1, double& per_tok, double& per_wg) {
    per_tok = (y1 - y0) / dt;
    per_wg = y0 - per_tok * kSampleTokens[0];
  };
  line(double(c[0].total.global_read_bytes), double(c[1].total.global_read_bytes), r.read_tok, r.read_wg);
  line(double(c[0].global_read_distinct), double(c[1].global_read_distinct), r.hbm_tok, r.hbm_wg);
  double write_wg = 0;
  line(double(c[0].total.global_write_bytes), double(c[1].total.global_write_bytes), r.write_tok, write_wg);
  // In the steady loop a wave waits on tile t with the next two tiles' loads in flight (and one
  // tile's block ids): two tiles' bytes (the setup's query loads, a larger peak, happen once).
  r.inflight_per_wave = 2 * r.read_tok * abi::kIndexerTileTokens;
  gen::KernelSpec spec;
  spec.kind = gen::KernelKind::DsaIndexerLogits;
  spec.arch = s.target;
  spec.heads = s.heads;
  spec.next_n = s.next_n;
  spec.page_size = s.block_size;
  const gen::HotLoop h = gen::analyze_hot_loop(gen::compile_kernel(spec).asm_text, gen_target(s.target), ".Ltile_loop_");
  r.tile_cycles = h.coissue_cycles / 3;  // the loop is unrolled by three tiles
  if (verbose)
    fmt::print(stderr,
               "mlabench: {} {}: read {:.1f} B/token + {:.0f} B/workgroup (distinct {:.1f} + {:.0f}), written {:.1f} "
               "B/token, {:.0f} co-issue cycles per tile, {:.0f} B in flight per wave\n",
               rt::name(s.target), k.name, r.read_tok, r.read_wg, r.hbm_tok, r.hbm_wg, r.write_tok, r.tile_cycles,
               r.inflight_per_wave);
  return r;
}

TopkRates topk_rates(const rt::Catalog& cat, rt::Target t, bool verbose) {
  const rt::CatalogKernel& k = rt::indexer_topk_kernel(cat, t);
  auto co = emu::CodeObject::load_file(k.co_path);
  TopkRates r;
  for (int kind = 0; kind < 2; ++kind) {
    double reads[2];
    for (int i = 0; i < 2; ++i) {
      const int len = kTopkSample[kind][i];
      emu::Device dev(t == rt::Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950);
      std::vector<float> logits(static_cast<size_t>(len));
      std::mt19937_64 rng{static_cast<uint64_t>(len)};
      for (auto& x : logits) x = float(int64_t(rng() >> 11) % 2000001 - 1000000) * 1e-3f;
      mla_indexer_topk_args a{};
      a.num_rows = 1, a.next_n = 1, a.topk = kTopK, a.logits_stride = len, a.indices_stride = kTopK;
      a.logits = dev.alloc(logits.size() * 4, 256, "logits");
      dev.write(a.logits, logits.data(), logits.size() * 4);
      a.seq_lens = dev.alloc(4, 256, "seq_lens");
      dev.write(a.seq_lens, &len, 4);
      a.indices = dev.alloc(size_t(kTopK) * 4, 256, "indices");
      const rt::DecodeOp op = rt::indexer_topk_ops(k, a, rt::TopkSplit{})[0];  // one launch: one row
      const emu::Counters c = dev.dispatch(co, k.name, {op.grid.x, op.grid.y, 1}, {op.block.x, 1, 1}, op.kernarg);
      reads[i] = double(c.total.global_read_bytes);
    }
    r.read_per_logit[kind] = (reads[1] - reads[0]) / (kTopkSample[kind][1] - kTopkSample[kind][0]);
    r.read_per_row[kind] = reads[0] - r.read_per_logit[kind] * kTopkSample[kind][0];
    if (verbose)
      fmt::print(stderr, "mlabench: {} {}: {} rows read {:.1f} B per logit + {:.0f} B per row\n", rt::name(t), k.name,
                 kind ? "streamed" : "resident", r.read_per_logit[kind], r.read_per_row[kind]);
  }
  return r;
}

// The top-k model (docs/sparse.md "The indexer: performance"): one workgroup per row, rows over
// the CUs in rounds; a row's five passes each stream its logits through one CU at the rate its
// loads in flight allow (Little's law at the loaded HBM latency: threads x keys per thread x 4 B in
// a histogram pass, waves x groups x 256 B in the count and write passes, the kernel's constants),
// at most the CU's L2 port; plus one dependent trip per pass (the digit search and its barriers).
// A row of at most kTopkResidentKeys logits is read once, as the count pass reads (its passes
// then work on registers), and keeps the five dependent trips.
double topk_row_s(const Machine& m, const TopkRates& r, int len, double& read_bytes) {
  const double row_bytes = double(len) * 4;
  const int kind = len <= gen::kTopkResidentKeys ? 0 : 1;
  read_bytes = r.read_per_logit[kind] * len + r.read_per_row[kind];
  const double port = m.cu_port_bytes_per_clk * m.clock_hz;
  const double hist_inflight = double(gen::kTopkThreads) * gen::kTopkHistKeysPerThread * 4;
  const double emit_inflight = double(gen::kTopkThreads / 64) * gen::kTopkGroupsPerWave * 64 * 4;
  const double hist_rate = std::min(port, hist_inflight / m.little_latency_s);
  const double emit_rate = std::min(port, emit_inflight / m.little_latency_s);
  if (kind == 0) return row_bytes / emit_rate + 5 * m.trip_s();
  return 3 * row_bytes / hist_rate + 2 * row_bytes / emit_rate + 5 * m.trip_s();
}

const rt::Catalog& indexer_catalog(rt::Target t, const std::vector<IndexerShape>& shapes) {
  static std::map<rt::Target, std::unique_ptr<rt::Catalog>> cats;
  if (auto it = cats.find(t); it != cats.end()) return *it->second;
  std::string entries;
  std::set<std::tuple<int, int, int>> seen;
  for (const auto& s : shapes)
    if (s.target == t && seen.insert({s.heads, s.next_n, s.block_size}).second)
      entries += fmt::format(R"({}{{"kind": "dsa_indexer_logits", "target": "{}", "heads": {}, "next_n": {}, "block_size": {}}})",
                             entries.empty() ? "" : ", ", rt::name(t), s.heads, s.next_n, s.block_size);
  const std::string dir =
      (std::filesystem::temp_directory_path() / fmt::format("mlabench-indexer-{}-{}", getpid(), rt::name(t))).string();
  std::filesystem::remove_all(dir);
  gen::BuildOptions opts;
  opts.out_dir = dir;
  opts.jobs = 2;
  gen::build_catalog({gen::parse_config(fmt::format(R"({{"deployment": "mlabench", "kernels": [{}]}})", entries),
                                        "mlabench-indexer.json")},
                     opts);
  return *cats.emplace(t, std::make_unique<rt::Catalog>(rt::Catalog::open(dir))).first->second;
}

// The model (docs/sparse.md "The indexer: performance"): a launch, one workgroup's fill (kernel
// arguments, length, query rows and block ids, then KV: two unit fills of dependent trips), then
// the largest of the HBM time (distinct bytes: the cache once, a request's query rows and weights
// once per XCD that runs its workgroups), the busiest CU's issue (its workgroups' tiles over
// min(4, waves) SIMDs) and Little's law on the streamed bytes its resident waves keep in flight.
IndexerResult model(const Machine& m, const KernelRates& r, const IndexerShape& s) {
  IndexerResult x;
  x.shape = s;
  x.kernel = r.name;
  x.resident_per_cu = r.resident;
  x.chunk_tokens = rt::indexer_chunk_tokens(s.batch, s.context, m.cus, r.resident);
  const int per_req = (s.context + x.chunk_tokens - 1) / x.chunk_tokens;
  x.workgroups = s.batch * per_req;
  const double tokens = double(s.batch) * s.context;
  const int xcds = abi::facts(s.target).num_xcds;
  x.read_bytes = tokens * r.read_tok + x.workgroups * r.read_wg;
  x.hbm_read_bytes = tokens * r.hbm_tok + double(s.batch) * std::min(per_req, xcds) * r.hbm_wg;
  x.write_bytes = tokens * r.write_tok;
  x.logits_bytes = tokens * s.next_n * 4;
  x.cache_bytes = tokens * abi::kIndexerTokenBytes;
  x.tile_cycles = r.tile_cycles;
  x.inflight_per_wave = r.inflight_per_wave;
  x.hbm_s = (x.hbm_read_bytes + x.write_bytes) / m.hbm_bytes_per_s;
  const int wg_per_cu = (x.workgroups + m.cus - 1) / m.cus;
  const int waves = std::min(wg_per_cu, r.resident);
  const double tiles_per_wg = double(x.chunk_tokens) / abi::kIndexerTileTokens;
  x.issue_s = wg_per_cu * tiles_per_wg * r.tile_cycles / std::min(4, waves) / m.clock_hz;
  // The streamed bytes (per token); a workgroup's query rows and weights load at once in its
  // prologue, inside the fill.
  const double cu_bytes = tokens * r.read_tok / std::min(x.workgroups, m.cus);
  x.latency_s = cu_bytes / (waves * r.inflight_per_wave / m.little_latency_s);
  x.fixed_s = m.launch_s + 2 * m.unit_fill_s;
  const double body = std::max({x.hbm_s, x.issue_s, x.latency_s});
  x.bound = body == x.hbm_s ? "HBM" : body == x.issue_s ? "issue" : "bytes in flight";
  x.total_s = x.fixed_s + body;
  return x;
}

}  // namespace

std::vector<IndexerShape> dsa_indexer_shapes() {
  std::vector<IndexerShape> v;
  for (rt::Target t : {rt::Target::gfx950, rt::Target::gfx942})
    for (auto [model, heads] : {std::pair{"V3.2 TP8", 64}, {"GLM-5 TP8", 32}})
      for (int nn : {1, 2})
        for (int ctx_k : {8, 32, 64, 128})
          for (int batch : {1, 16, 64})
            v.push_back({fmt::format("{} h{} nn{} {}K x{}", model, heads, nn, ctx_k, batch), t, heads, nn, 64, batch,
                         ctx_k * 1024});
  return v;
}

std::vector<IndexerResult> measure_indexer(const std::vector<IndexerShape>& shapes, bool verbose) {
  std::map<std::tuple<rt::Target, int, int, int>, KernelRates> rates;
  std::map<rt::Target, TopkRates> topk;
  std::vector<IndexerResult> out;
  for (const auto& s : shapes) {
    const auto key = std::tuple{s.target, s.heads, s.next_n, s.block_size};
    const rt::Catalog& cat = indexer_catalog(s.target, shapes);
    if (!rates.count(key)) rates[key] = rates_of(cat, s, verbose);
    if (!topk.count(s.target)) topk[s.target] = topk_rates(cat, s.target, verbose);
    const Machine m = machine_for(s.target);
    IndexerResult x = model(m, rates[key], s);
    // Row i of a request has context - next_n + i + 1 logits; the longest sets the round's time.
    // The runtime's split: one launch, or each row's segments then the row over their candidates.
    const int rows = s.batch * s.next_n;
    const rt::TopkSplit split = rt::indexer_topk_split(rows, s.context, kTopK, m.cus);
    const double launch = m.launch_s + m.unit_fill_s;
    double bytes = 0, bytes2 = 0;
    if (s.context <= kTopK) {
      x.topk_row_s = m.trip_s();
      x.topk_s = launch + x.topk_row_s;
    } else if (split.segments < 2) {
      x.topk_row_s = topk_row_s(m, topk[s.target], s.context, bytes);
      x.topk_read_bytes = bytes * rows;
      x.topk_s = launch + std::ceil(double(rows) / m.cus) * x.topk_row_s;
    } else {
      const double seg_s = topk_row_s(m, topk[s.target], split.segment_tokens, bytes);
      const double cand_s = topk_row_s(m, topk[s.target], split.segments * kTopK, bytes2);
      x.topk_row_s = seg_s + cand_s;
      x.topk_read_bytes = (bytes * split.segments + bytes2) * rows;
      x.topk_s = 2 * launch + std::ceil(double(rows) * split.segments / m.cus) * seg_s +
                 std::ceil(double(rows) / m.cus) * cand_s;
    }
    x.topk_segments = split.segments;
    out.push_back(x);
  }
  return out;
}

nlohmann::json IndexerResult::to_json() const {
  return {{"shape", shape.name},
          {"target", rt::name(shape.target)},
          {"heads", shape.heads},
          {"next_n", shape.next_n},
          {"block_size", shape.block_size},
          {"batch", shape.batch},
          {"context", shape.context},
          {"kernel", kernel},
          {"chunk_tokens", chunk_tokens},
          {"workgroups", workgroups},
          {"read_bytes", read_bytes},
          {"hbm_read_bytes", hbm_read_bytes},
          {"write_bytes", write_bytes},
          {"cache_bytes", cache_bytes},
          {"logits_bytes_written", logits_bytes},
          {"logits_bytes_read_back", logits_bytes},
          {"tile_cycles_modeled", tile_cycles},
          {"inflight_bytes_per_wave", inflight_per_wave},
          {"modeled_s", total_s},
          {"hbm_s", hbm_s},
          {"issue_s", issue_s},
          {"latency_s", latency_s},
          {"fixed_s", fixed_s},
          {"bound", bound},
          {"hbm_fraction", hbm_fraction()},
          {"topk_modeled_s", topk_s},
          {"topk_row_modeled_s", topk_row_s},
          {"topk_read_bytes", topk_read_bytes},
          {"topk_segments", topk_segments},
          {"dsa_launches", dsa_launches(*this)}};
}

std::string indexer_markdown(const std::vector<IndexerResult>& r) {
  std::string md =
      "## DSA indexer logits (modeled from emulator counters; docs/sparse.md \"The indexer: performance\")\n\n"
      "Bandwidth reached = bytes moved at HBM (the cache, query rows, weights, block ids and the logits written) / "
      "the modeled time, launch included, as a share of the achievable ceiling; the cache-only column counts the "
      "cache's bytes alone. The target (>= 0.85) applies where a step reads >= 256 MB of cache. Logits MB: written "
      "here and read back by the top-k. DSA layer MB: cache + logits written + the top-k's reads + sparse MLA's "
      "min(2048, context) x 656 B per query row; DSA launches: the layer's as run (logits, top-k, sparse MLA's decode "
      "and reduce).\n\n"
      "Top-k us: the dsa_topk_per_row_decode launches (one workgroup per row or segment: up to 16K logits read "
      "once, a longer row five times; with S > 1 segments, each row's S segments, then the row over their S x 2048 "
      "candidates; modeled). "
      "Indexer us: logits + top-k.\n\n"
      "| target | shape | chunk | workgroups | cache MB | HBM bytes / cache | logits MB | modeled us | HBM us | fixed "
      "us | bandwidth reached | cache-only | bound | top-k S | top-k us | indexer us | DSA layer MB | DSA launches |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& x : r) {
    const double rows = double(x.shape.batch) * x.shape.next_n;
    const double sparse = rows * std::min(kTopK, x.shape.context) * kDsMlaBytes;
    const double cache_only = x.cache_bytes / machine_for(x.shape.target).hbm_bytes_per_s / x.total_s;
    const std::string mark = x.cache_bytes < 256e6 ? "" : x.hbm_fraction() >= 0.85 ? " (>= 0.85)" : " (**< 0.85**)";
    md += fmt::format("| {} | {} | {} | {} | {:.1f} | {:.3f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.2f}{} | {:.2f} | {} | "
                      "{} | {:.1f} | {:.1f} | {:.1f} | {} |\n",
                      rt::name(x.shape.target), x.shape.name, x.chunk_tokens, x.workgroups, x.cache_bytes / 1e6,
                      (x.hbm_read_bytes + x.write_bytes) / x.cache_bytes, x.logits_bytes / 1e6, x.total_s * 1e6,
                      x.hbm_s * 1e6, x.fixed_s * 1e6, x.hbm_fraction(), mark, cache_only, x.bound, x.topk_segments,
                      x.topk_s * 1e6,
                      (x.total_s + x.topk_s) * 1e6, (x.cache_bytes + x.logits_bytes + x.topk_read_bytes + sparse) / 1e6,
                      dsa_launches(x));
  }
  return md;
}

std::vector<IndexerHostCost> measure_indexer_host_costs(const std::vector<IndexerShape>& shapes, int steps) {
  std::vector<IndexerHostCost> out;
  for (const auto& s : shapes) {
    const rt::Catalog& cat = indexer_catalog(s.target, shapes);
    mla_device* dev = nullptr;
    mla_context* ctx = nullptr;
    auto check = [](mla_status st, const char* what) {
      if (st != MLA_SUCCESS) throw std::runtime_error(fmt::format("indexer host costs: {}: {}", what, mla_last_error()));
    };
    check(mla_device_open(MLA_BACKEND_EMULATOR, 0, std::string(rt::name(s.target)).c_str(), &dev), "mla_device_open");
    check(mla_context_create(dev, cat.dir().c_str(), &ctx), "mla_context_create");
    // Device addresses are never dereferenced on this path: any non-null values.
    const uint64_t p = 0x1000;
    mla_indexer_logits_args a{};
    a.logits = a.q = a.kv_cache = a.weights = a.context_lens = a.block_table = p;
    a.batch = s.batch, a.next_n = s.next_n, a.heads = s.heads, a.block_size = s.block_size;
    a.max_context_len = s.context, a.block_table_stride = (s.context + s.block_size - 1) / s.block_size;
    a.logits_stride = s.context, a.num_blocks = int64_t(s.batch) * a.block_table_stride;
    mla_indexer_topk_args t{};
    t.logits = t.seq_lens = t.indices = t.block_table = p;
    t.num_rows = s.batch * s.next_n, t.next_n = s.next_n, t.topk = kTopK, t.logits_stride = s.context;
    t.indices_stride = kTopK, t.block_table_stride = a.block_table_stride, t.page_size = s.block_size;
    check(mla_indexer_topk_workspace_size(ctx, &t, &t.workspace_bytes), "mla_indexer_topk_workspace_size");
    t.workspace = t.workspace_bytes ? p : 0;
    IndexerHostCost h{s};
    size_t n = 0;
    h.logits_us = median_us(50, steps, [&](int) { n += rt::indexer_logits_ops_of(ctx, &a).size(); });
    h.topk_us = median_us(50, steps, [&](int) { n += rt::indexer_topk_ops_of(ctx, &t).size(); });
    if (n == 0) throw std::logic_error("indexer host costs: no operations");
    mla_context_destroy(ctx);
    mla_device_close(dev);
    out.push_back(h);
  }
  return out;
}

std::string indexer_host_costs_markdown(const std::vector<IndexerHostCost>& v) {
  std::string md =
      "\n### Host work per call (measured on this machine, median us: checks, catalog lookup, split, kernarg "
      "packing; the launch enqueue not included)\n\n| target | shape | mla_indexer_logits | mla_indexer_topk |\n"
      "|---|---|---|---|\n";
  for (const auto& h : v)
    md += fmt::format("| {} | {} | {:.2f} | {:.2f} |\n", rt::name(h.shape.target), h.shape.name, h.logits_us, h.topk_us);
  return md;
}

std::string write_indexer_report(const std::string& out_dir) {
  std::filesystem::create_directories(out_dir);
  const auto shapes = dsa_indexer_shapes();
  const auto r = measure_indexer(shapes, true);
  std::vector<IndexerShape> host_shapes;  // one per target x model x next_n, at 128K x1 and x64
  for (const auto& s : shapes)
    if (s.context == 128 * 1024 && (s.batch == 1 || s.batch == 64)) host_shapes.push_back(s);
  const std::string md = indexer_markdown(r) + indexer_host_costs_markdown(measure_indexer_host_costs(host_shapes, 2000));
  nlohmann::json j = nlohmann::json::array();
  for (const auto& x : r) j.push_back(x.to_json());
  std::ofstream(out_dir + "/indexer.md") << md;
  std::ofstream(out_dir + "/indexer.json") << j.dump(2) << "\n";
  fmt::print(stderr, "mlabench: wrote {0}/indexer.md, {0}/indexer.json\n", out_dir);
  return md;
}

}  // namespace mla::bench
