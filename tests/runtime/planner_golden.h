// Planner inputs of many kinds (random shapes, and mlaplanbench's shapes as the runtime builds
// their inputs) and a fingerprint of a plan's tables, for comparing two plans of one input.
#pragma once
#include "runtime/planner.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace mla::golden {

inline std::vector<rt::PlanInputs> shapes() {
  std::vector<rt::PlanInputs> out;
  auto base = [](std::vector<int> lens, int heads, int cus, int T, int rpg) {
    rt::PlanInputs in;
    in.kv_lens = std::move(lens);
    in.heads = heads;
    in.num_cus = cus;
    in.tile_tokens = T;
    in.rows_per_group = rpg;
    return in;
  };
  out.push_back(base({32768}, 16, 304, 16, 16));
  out.push_back(base(std::vector<int>(16, 68000), 12, 256, 32, 16));
  out.push_back(base({100000, 20, 30}, 16, 64, 16, 16));
  out.push_back(base({5000, 300}, 128, 64, 16, 64));
  out.push_back(base(std::vector<int>(304, 4096), 16, 304, 16, 16));
  std::mt19937 rng(777);
  auto pick = [&](std::initializer_list<int> xs) { return *(xs.begin() + rng() % xs.size()); };
  for (int iter = 0; iter < 40; ++iter) {
    rt::PlanInputs in;
    in.qseqlen = pick({1, 2, 3, 4});
    in.heads = pick({8, 12, 16, 128});
    in.page_size = pick({1, 64, 128});
    in.num_cus = pick({304, 256, 7, 40});
    in.workgroups_per_cu = pick({1, 2});
    in.tile_tokens = pick({16, 32, 64});
    in.rows_per_group = pick({16, 32, 64});
    const int batch = pick({1, 2, 5, 16, 64});
    const int maxlen = pick({8, 100, 5000, 70000});
    std::vector<int> lens;
    for (int b = 0; b < batch; ++b) lens.push_back(in.qseqlen + int(rng() % uint32_t(maxlen)));
    in.kv_lens = std::move(lens);  // (PlanInputs keeps its own copy of a vector)
    out.push_back(std::move(in));
  }
  return out;
}

// The inputs the runtime builds (plan_inputs_for) for the decode kernels of mlaplanbench's shapes
// (bench/plan_bench.cpp; issue #31's host-cost targets), with the default catalog's figures as
// they were when the planner was made allocation-free (2026-12-04): Kimi-K3 on gfx950 (12
// heads, fp8, pages 1 and 128, 256 CUs; the prefix kernel's issue model) and Kimi-K2.7 on
// gfx942 (16 heads, bf16 q / fp8 kv, page 1, 304 CUs). No workspace cap.
inline rt::PlanInputs k3_inputs(int page) {
  rt::PlanInputs in;
  in.heads = 12, in.page_size = page, in.num_cus = 256, in.num_xcds = 8, in.workgroups_per_cu = 2;
  in.tile_tokens = 32, in.rows_per_group = 16, in.kv_bytes_per_token = 576;
  in.prefix_rows_per_group = 96, in.prefix_workgroups_per_cu = 1, in.prefix_partial_o_bytes = 2;
  if (page == 1) {
    in.prefix_issue_per_block_tile = 0x1.891eb851eb853p+5, in.prefix_lds_per_block_tile = 0x1.3cccccccccccdp+3;
    in.prefix_lds_per_tile = 0x1.aa3d70a3d70a5p+2, in.prefix_hbm_factor = 0x1.53bd1676640a7p+1, in.prefix_unit_fill = 108;
  } else {
    in.prefix_issue_per_block_tile = 0x1.97ae147ae147ap+5, in.prefix_lds_per_block_tile = 0x1.4888888888888p+3;
    in.prefix_lds_per_tile = 0x1.ba06d3a06d3ap+2, in.prefix_hbm_factor = 0x1.6052502eec7c9p+1, in.prefix_unit_fill = 112;
  }
  return in;
}
inline rt::PlanInputs k27_inputs() {
  rt::PlanInputs in;
  in.heads = 16, in.page_size = 1, in.num_cus = 304, in.num_xcds = 8, in.workgroups_per_cu = 1;
  in.tile_tokens = 16, in.rows_per_group = 16, in.kv_bytes_per_token = 576;
  in.prefix_rows_per_group = 48, in.prefix_workgroups_per_cu = 1, in.prefix_partial_o_bytes = 2;
  in.prefix_issue_per_block_tile = 0x1.c3dfb572cea47p+3, in.prefix_lds_per_block_tile = 0x1.14dbf86a314dcp+0;
  in.prefix_lds_per_tile = 0x1.20b9830fa872p-1, in.prefix_hbm_factor = 0x1.62b9c027836fp-1;
  in.prefix_unit_fill = 0x1.038e38e38e38ep+4;
  return in;
}

struct BenchShape {
  std::string name;
  rt::PlanInputs in;
};
// mlaplanbench's shapes at step `step` (every request `step` tokens longer). K3: ~68.4K tokens per
// request, plain, with the caller's group (63,911 shared tokens: page 1; whole pages, 63,872:
// page 128) and with the group the page table gives (whole pages cut to 32-token tiles: 63,904
// and 63,872).
inline std::vector<BenchShape> bench_shapes(int step = 0) {
  std::vector<BenchShape> out;
  for (int page : {1, 128})
    for (int batch : {16, 24})
      for (int g = 0; g < 3; ++g) {
        rt::PlanInputs in = k3_inputs(page);
        std::vector<int> lens;
        for (int b = 0; b < batch; ++b) lens.push_back(68430 + b % 5 + step);
        in.kv_lens = lens;
        const int given = page == 1 ? 63911 : 63872, detected = page == 1 ? 63904 : 63872;
        if (g > 0) in.prefix_groups = std::vector<rt::PrefixGroup>{{0, batch, g == 1 ? given : detected}};
        out.push_back({"K3 c" + std::to_string(batch) + " pg" + std::to_string(page) +
                           (g == 0 ? "" : g == 1 ? " group given" : " group detected"),
                       in});
      }
  for (int ctx : {32768, 65536, 131072, 262144})
    for (int batch : {1, 2, 4, 8, 16}) {
      rt::PlanInputs in = k27_inputs();
      in.kv_lens = std::vector<int>(size_t(batch), ctx + step);
      out.push_back({"seed001 " + std::to_string(ctx / 1024) + "K x" + std::to_string(batch), in});
    }
  for (int batch : {64, 256}) {
    rt::PlanInputs a = k27_inputs(), k = k3_inputs(128);
    a.kv_lens = std::vector<int>(size_t(batch), 8192 + step);
    k.kv_lens = std::vector<int>(size_t(batch), 8192 + step);
    out.push_back({"seed001 8K x" + std::to_string(batch), a});
    out.push_back({"K3 8K x" + std::to_string(batch) + " pg128", k});
  }
  return out;
}

// FNV-1a over the bytes the kernels read and the per-CU prediction.
inline uint64_t fingerprint(const rt::Plan& p) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const void* data, size_t n) {
    const auto* c = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  };
  add(p.units.data(), p.units.size() * sizeof(rt::WorkUnit));
  add(p.unit_ranges.data(), p.unit_ranges.size() * sizeof(int32_t));
  // An entry's first four fields as the int32[4] ReduceEntry was, when pinned; the rest (the
  // bf16 split count and the reserved dwords) only when not all zero, which changes the hash.
  for (const rt::ReduceEntry& e : p.reduces) {
    add(&e, 4 * sizeof(int32_t));
    if (e.bf16_splits || e.reserved[0] || e.reserved[1] || e.reserved[2])
      add(&e.bf16_splits, sizeof e - 4 * sizeof(int32_t));
  }
  add(p.splits.data(), p.splits.size() * sizeof(int));
  add(&p.num_partials, sizeof p.num_partials);
  add(p.cu_tokens.data(), p.cu_tokens.size() * sizeof(int64_t));
  add(p.cu_units.data(), p.cu_units.size() * sizeof(int));
  return h;
}

// The same over both launches' tables (prefix units and their per-CU prediction too) and every
// reduce entry's bytes.
inline uint64_t fingerprint_all(const rt::Plan& p) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const void* data, size_t n) {
    const auto* c = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  };
  add(p.units.data(), p.units.size() * sizeof(rt::WorkUnit));
  add(p.unit_ranges.data(), p.unit_ranges.size() * sizeof(int32_t));
  add(p.prefix_units.data(), p.prefix_units.size() * sizeof(abi::PrefixUnit));
  add(p.prefix_unit_ranges.data(), p.prefix_unit_ranges.size() * sizeof(int32_t));
  add(p.reduces.data(), p.reduces.size() * sizeof(rt::ReduceEntry));
  add(p.splits.data(), p.splits.size() * sizeof(int));
  add(&p.num_partials, sizeof p.num_partials);
  add(p.cu_tokens.data(), p.cu_tokens.size() * sizeof(int64_t));
  add(p.cu_units.data(), p.cu_units.size() * sizeof(int));
  add(p.prefix_cu_tokens.data(), p.prefix_cu_tokens.size() * sizeof(int64_t));
  add(p.prefix_cu_units.data(), p.prefix_cu_units.size() * sizeof(int));
  return h;
}

}  // namespace mla::golden
