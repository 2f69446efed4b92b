// Shapes and a fingerprint that pin the per-request plan (no cascading group) bit for bit: the
// expected fingerprints in test_planner.cpp were computed with the planner before cascade plans
// existed (commit dbee26c), so any change to the per-request path shows up here.
#pragma once
#include "runtime/planner.h"

#include <cstdint>
#include <cstring>
#include <random>
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
    in.min_tiles_per_split = pick({1, 2, 4});
    const int batch = pick({1, 2, 5, 16, 64});
    const int maxlen = pick({8, 100, 5000, 70000});
    for (int b = 0; b < batch; ++b) in.kv_lens.push_back(in.qseqlen + int(rng() % uint32_t(maxlen)));
    out.push_back(std::move(in));
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

}  // namespace mla::golden
