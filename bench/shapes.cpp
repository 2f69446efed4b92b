// The benchmark shapes of the two seeds, and command-line shapes.
#include <random>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/bench.h"

namespace mla::bench {

int64_t BenchShape::total_tokens() const {
  int64_t n = 0;
  for (int l : kv_lens) n += l;
  return n;
}

namespace {
struct Pub {
  int ctx_k, cc;
  double aiter, ours;
};
// Seed 001's own table (MI300X, bf16 q, fp8 KV), microseconds: published figures, not ours.
const Pub kPublished[] = {
    {32, 1, 184.96, 27.08},   {32, 2, 186.46, 30.19},   {32, 4, 187.35, 42.27},   {32, 8, 190.50, 59.17},
    {32, 16, 230.71, 119.45}, {64, 1, 351.79, 29.73},   {64, 8, 361.86, 121.04},  {64, 16, 449.94, 225.54},
    {128, 1, 684.64, 41.71},  {128, 8, 711.21, 229.23}, {128, 16, 890.29, 451.39}, {256, 1, 1356.62, 59.21},
    {256, 8, 1427.36, 455.81}, {256, 16, 1783.90, 921.25},
};

BenchShape seed_shape(std::string name, const char* set, rt::Target target, rt::DType q, rt::DType kv, int heads,
                      int page_size) {
  BenchShape s;
  s.name = std::move(name);
  s.set = set;
  s.shape.target = target;
  s.shape.q_dtype = q;
  s.shape.kv_dtype = kv;
  s.shape.heads = heads;
  s.shape.page_size = page_size;
  return s;
}
}  // namespace

std::vector<BenchShape> seed001_shapes() {
  std::vector<BenchShape> v;
  for (int ctx : {32, 64, 128, 256})
    for (int cc : {1, 2, 4, 8, 16}) {
      BenchShape s = seed_shape(fmt::format("{}K x{}", ctx, cc), "seed-001", rt::Target::gfx942, rt::DType::bf16,
                                rt::DType::fp8, 16, 1);
      s.kv_lens.assign(size_t(cc), ctx * 1024);
      s.ctx_k = ctx;
      s.concurrency = cc;
      for (const Pub& p : kPublished)
        if (p.ctx_k == ctx && p.cc == cc) {
          s.pub_aiter_us = p.aiter;
          s.pub_ours_us = p.ours;
        }
      v.push_back(s);
    }
  return v;
}

std::vector<BenchShape> seed000_shapes() {
  std::vector<BenchShape> v;
  for (int cc : {16, 24})
    for (int page : {1, 128}) {
      BenchShape s = seed_shape(fmt::format("K3 c{} pg{}", cc, page), "seed-000", rt::Target::gfx950, rt::DType::fp8,
                                rt::DType::fp8, 12, page);
      // The seed's late steps: c16 68,433..68,437 (sum 1,094,960); c24 68,429..68,438.
      for (int i = 0; i < cc; ++i) s.kv_lens.push_back(cc == 16 ? 68433 + (i * 3) % 5 : 68429 + (i * 7) % 10);
      s.concurrency = cc;
      // The seed's real sharing: every request begins with the same 63,911 tokens (the rest,
      // 4,518..4,527 tokens, its own); the page tables share whole pages only (63,872 = 499
      // pages at page 128). The per-request rows are the plan without it.
      s.shared = rt::PrefixGroup{0, cc, 63911 / page * page};
      v.push_back(s);
    }
  return v;
}

std::vector<BenchShape> mixed_shapes() {
  std::vector<BenchShape> v;
  // Lengths uniform in 1K..128K (a fixed seed: the same batch every run), seed 001's kernel.
  std::mt19937 rng(42);
  for (int batch : {8, 32, 128}) {
    BenchShape s = seed_shape(fmt::format("1K-128K x{}", batch), "mixed", rt::Target::gfx942, rt::DType::bf16,
                              rt::DType::fp8, 16, 1);
    for (int b = 0; b < batch; ++b) s.kv_lens.push_back(std::uniform_int_distribution<int>(1024, 131072)(rng));
    s.concurrency = batch;
    v.push_back(s);
  }
  BenchShape one = seed_shape("256K + 63 x 2K", "mixed", rt::Target::gfx942, rt::DType::bf16, rt::DType::fp8, 16, 1);
  one.kv_lens.push_back(262144);
  one.kv_lens.insert(one.kv_lens.end(), 63, 2048);
  one.concurrency = 64;
  v.push_back(one);
  // Kimi-K3 c16 (no shared prefix) whose 4 longest requests are 10x the others.
  BenchShape k3 = seed_shape("K3 c16, 4 x 10 longer", "mixed", rt::Target::gfx950, rt::DType::fp8, rt::DType::fp8, 12, 128);
  for (int b = 0; b < 16; ++b) k3.kv_lens.push_back(b % 4 == 0 ? 68430 : 6843);
  k3.concurrency = 16;
  v.push_back(k3);
  return v;
}

std::vector<BenchShape> sparse_shapes() {
  std::vector<BenchShape> v;
  for (auto [model, heads] : {std::pair{"V3.2 TP8 / GLM-5 TP4", 16}, std::pair{"GLM-5 TP8", 8}})
    for (int sq : {1, 2})
      for (int batch : {1, 4, 16, 64, 128}) {
        BenchShape s = seed_shape(fmt::format("{} x{} sq{}", model, batch, sq), "sparse", rt::Target::gfx950,
                                  rt::DType::bf16, rt::DType::fp8, heads, 1);
        s.shape.sparse = true;
        s.shape.kv_ds_mla = true;
        s.shape.return_lse = false;
        s.kv_lens.assign(size_t(batch * sq), 2048);  // every row: its top-2048 slots
        s.concurrency = batch;
        v.push_back(s);
      }
  // MI300X: the fp8_ds_mla kernel at 16 heads (its producer dequantises through e4m3fnuz).
  for (int batch : {1, 16, 64}) {
    BenchShape s = seed_shape(fmt::format("MI300X V3.2 TP8 x{} sq1", batch), "sparse", rt::Target::gfx942,
                              rt::DType::bf16, rt::DType::fp8, 16, 1);
    s.shape.sparse = s.shape.kv_ds_mla = true;
    s.kv_lens.assign(size_t(batch), 2048);
    s.concurrency = batch;
    v.push_back(s);
  }
  // aiter's own form (vLLM's ROCm backend: fp8 q and 576-byte fp8 entries, per-tensor scales) at
  // 16 heads: the same bytes per slot as aiter's expanded problem.
  for (int batch : {1, 16, 64, 128}) {
    BenchShape s = seed_shape(fmt::format("16 heads fp8/fp8 x{} sq1", batch), "sparse", rt::Target::gfx950,
                              rt::DType::fp8, rt::DType::fp8, 16, 1);
    s.shape.sparse = true;
    s.kv_lens.assign(size_t(batch), 2048);
    s.concurrency = batch;
    v.push_back(s);
  }
  return v;
}

std::vector<PublishedGroup> seed001_published_groups() {
  return {{"32Kx8 64Kx4 128Kx2 256Kx1", 59.09, 59.21, 190.5, 1356.6},
          {"64Kx16 128Kx8 256Kx4", 225.5, 229.8, 449.9, 1365.9},
          {"128Kx16 256Kx8", 451.4, 455.8, 890.3, 1427.4}};
}

// TARGET:Q/KV:hHEADS:pgPAGE:LENS where LENS is "LENxCOUNT" or a comma list.
BenchShape parse_shape(const std::string& spec) {
  std::vector<std::string> f;
  std::stringstream ss(spec);
  for (std::string x; std::getline(ss, x, ':');) f.push_back(x);
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format(
        "--shape '{}': {} (expected TARGET:Q/KV:hHEADS[:qsQSEQLEN]:pgPAGE:LENS, e.g. gfx950:fp8/fp8:h12:pg128:68435x16, "
        "gfx950:fp8/fp8:h128:qs4:pg1:8192x8 or gfx942:bf16/fp8:h16:pg1:32768,1000)",
        spec, why));
  };
  if (f.size() != 5 && f.size() != 6) throw bad("needs 5 or 6 fields separated by ':'");
  if (f.size() == 5) f.insert(f.begin() + 3, "qs1");
  BenchShape s;
  s.set = "cli";
  s.name = spec;
  try {
    s.shape.target = rt::parse_target(f[0], "target");
    auto slash = f[1].find('/');
    if (slash == std::string::npos) throw bad("dtype pair must be Q/KV");
    s.shape.q_dtype = rt::parse_dtype(f[1].substr(0, slash), "q dtype");
    s.shape.kv_dtype = rt::parse_dtype(f[1].substr(slash + 1), "kv dtype");
  } catch (const rt::ProblemError& e) {
    throw bad(e.what());
  }
  // A whole positive number, or the error names the field and what it holds.
  auto number = [&](const std::string& text, const std::string& field) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || text.empty() || v < 1 || v > (1L << 30))
      throw bad(fmt::format("{} '{}' is not a whole number >= 1", field, text));
    return int(v);
  };
  if (f[2].size() < 2 || f[2][0] != 'h') throw bad("heads field must be hN");
  if (f[3].size() < 3 || f[3].rfind("qs", 0) != 0) throw bad("query-rows field must be qsN");
  if (f[4].size() < 3 || f[4].rfind("pg", 0) != 0) throw bad("page field must be pgN");
  s.shape.heads = number(f[2].substr(1), "heads");
  s.shape.qseqlen = number(f[3].substr(2), "qseqlen");
  s.shape.page_size = number(f[4].substr(2), "page size");
  // What the generator builds (generator/config): heads 1..128, qseqlen 1..8, page 1 or a power of two up to 256.
  if (s.shape.heads > 128) throw bad(fmt::format("heads {} (allowed: 1..128)", s.shape.heads));
  if (s.shape.qseqlen > 8) throw bad(fmt::format("qseqlen {} (allowed: 1..8)", s.shape.qseqlen));
  if (s.shape.page_size > 256 || (s.shape.page_size & (s.shape.page_size - 1)) != 0)
    throw bad(fmt::format("page size {} (allowed: 1 or a power of two up to 256)", s.shape.page_size));
  const std::string& lens = f[5];
  if (auto x = lens.find('x'); x != std::string::npos) {
    const int len = number(lens.substr(0, x), "kv length"), n = number(lens.substr(x + 1), "request count");
    s.kv_lens.assign(size_t(n), len);
    s.concurrency = n;
  } else {
    std::stringstream ls(lens);
    for (std::string x; std::getline(ls, x, ',');) s.kv_lens.push_back(number(x, "kv length"));
    s.concurrency = int(s.kv_lens.size());
  }
  for (int len : s.kv_lens)
    if (len < s.shape.qseqlen)
      throw bad(fmt::format("kv length {} < qseqlen {} (a request holds its step's own tokens)", len, s.shape.qseqlen));
  if (s.kv_lens.empty()) throw bad("no kv lengths");
  return s;
}

}  // namespace mla::bench
