#include "oracle/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "oracle/aiter_oracle.h"

namespace mla::oracle {

int SweepCase::max_len() const { return kv_lens.empty() ? 0 : *std::max_element(kv_lens.begin(), kv_lens.end()); }

std::vector<int> sweep_full_lengths() {
  std::set<int> s = {1, 2, 3, 4};
  std::vector<int> edges = {16, 32, 64};
  for (int k : {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64}) edges.push_back(128 * k);
  for (int m : edges)
    for (int d : {-1, 0, 1})
      if (m + d >= 1 && m + d <= kSweepMaxLen) s.insert(m + d);
  return {s.begin(), s.end()};
}

namespace {

// Short requests of every chunk-edge kind, for the batch-64 cases (cheap: ~13K tokens).
const std::vector<int> kShortMix = {1, 2, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 383, 384, 385, 513};

std::vector<int> cycle(const std::vector<int>& lens, int batch) {
  std::vector<int> v(batch);
  for (int i = 0; i < batch; ++i) v[i] = lens[i % lens.size()];
  return v;
}

std::vector<SweepCase> sampled_cases() {
  // Each case probes one edge. gfx942's kernels hand out 64-token chunks round robin, gfx950's
  // 128 (split s takes chunks s, s+S, ...); aiter's reduce reads min(S, ceil(len / mgc)) splits,
  // mgc 64 / 32 / 16 by shape (docs/aiter-oracle.md).
  return {
      {1, {1}, "one token, one split"},
      {1, {8192}, "longest request, one split (64 / 128 loop iterations)"},
      {2, {129}, "second chunk holds one token (gfx950)"},
      {3, {1537}, "uneven chunks per split, tail of one token"},
      {4, {1536}, "3 chunks per split (gfx950), the longest kv_split 4 length that passed before the v_cvt_u32_f32 fix"},
      {4, {1600}, "issue #34's case: split 0 gets a 4th chunk of 64 tokens (gfx950)"},
      {4, {385}, "3 chunks of 128 + 1: split 3 holds one token (gfx950); the reduce reads 4 splits"},
      {4, {4096}, "8 chunks per split (gfx950), 16 (gfx942)"},
      {5, {2049}, "odd kv_split, one-token tail"},
      {8, {4097}, "kv_split 8, one-token tail"},
      {16, {8192}, "the largest kv_split on the longest request"},
      {16, {1025}, "kv_split 16 with fewer 128-token chunks than splits (gfx950)"},
      {4, {1, 64, 65, 511, 512, 1536, 2048}, "batch 7, mixed lengths, every split non-empty on the long ones"},
      {1, cycle(kShortMix, 64), "batch 64 of short requests (chunk edges), one split"},
      {16, cycle(kShortMix, 64), "batch 64 of short requests, kv_split 16 (most splits empty)"},
  };
}

}  // namespace

std::vector<SweepCase> sweep_cases(const std::string& preset, uint64_t seed) {
  if (preset == "sampled") return sampled_cases();
  if (preset != "full") throw OracleError(fmt::format("--sweep '{}': unknown preset (allowed: full, sampled)", preset));
  const std::vector<int> lens = sweep_full_lengths();
  std::vector<SweepCase> out;
  for (int S = 1; S <= kSweepMaxSplit; ++S)
    for (int B : {1, 8, kSweepMaxBatch}) {
      if (B == 1) {
        for (int L : lens) out.push_back({S, {L}, ""});
        continue;
      }
      std::vector<int> sh = lens;
      std::mt19937_64 rng(seed * 1000003u + uint64_t(S) * 131u + uint64_t(B));
      std::shuffle(sh.begin(), sh.end(), rng);
      for (size_t i = 0; i < sh.size(); i += size_t(B)) {
        SweepCase c{S, {}, ""};
        for (int j = 0; j < B; ++j) c.kv_lens.push_back(sh[(i + size_t(j)) % sh.size()]);
        out.push_back(std::move(c));
      }
    }
  return out;
}

std::vector<SweepCase> filter_cases(const std::vector<SweepCase>& cases, const std::vector<int>& kv_splits, int max_len) {
  std::vector<SweepCase> out;
  for (auto& c : cases) {
    if (!kv_splits.empty() && std::find(kv_splits.begin(), kv_splits.end(), c.kv_split) == kv_splits.end()) continue;
    if (max_len > 0 && c.max_len() > max_len) continue;
    out.push_back(c);
  }
  return out;
}

void check_cli_values(const std::vector<int>& batches, const std::vector<int>& kv_lens, const std::vector<int>& kv_splits) {
  for (int b : batches)
    if (b < 1 || b > kSweepMaxBatch)
      throw OracleError(fmt::format("--batch {}: must be 1..{} (requests per launch)", b, kSweepMaxBatch));
  for (int l : kv_lens)
    if (l < 1 || l > 1'000'000)
      throw OracleError(fmt::format("--kv-lens: {} tokens is not allowed (1..1000000 tokens per request; aiter's mla.py does not "
                                    "launch the decode kernel on an empty request)", l));
  for (int s : kv_splits)
    if (s < 1 || s > kSweepMaxSplit)
      throw OracleError(fmt::format("--kv-split {}: must be 1..{} (aiter's get_meta_param caps num_kv_splits at 16)", s, kSweepMaxSplit));
}

std::vector<int> batch_lengths(const std::vector<int>& kv_lens, int batch) {
  if (kv_lens.empty()) throw OracleError("no request lengths (--kv-lens)");
  return batch <= 0 ? kv_lens : cycle(kv_lens, batch);
}

std::string summarize(const std::vector<SweepOutcome>& outcomes) {
  // Group by kernel, target, kv_split, batch class; within a group sort by longest request and
  // merge neighbours with the same outcome.
  using Key = std::tuple<std::string, std::string, int, bool>;
  std::map<Key, std::vector<const SweepOutcome*>> groups;
  std::vector<Key> order;
  for (auto& o : outcomes) {
    Key k{o.kernel, o.target, o.kv_split, o.batch > 1};
    if (!groups.count(k)) order.push_back(k);
    groups[k].push_back(&o);
  }
  std::string s = "| kernel | target | kv_split | batch | longest request (tokens) | runs | result |\n|---|---|---|---|---|---|---|\n";
  for (auto& k : order) {
    auto v = groups[k];
    std::stable_sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->max_len < b->max_len; });
    std::set<int> batches;
    for (auto* o : v) batches.insert(o->batch);
    std::string bs = fmt::format("{}", fmt::join(batches, ", "));
    for (size_t i = 0; i < v.size();) {
      size_t j = i;
      while (j + 1 < v.size() && v[j + 1]->pass == v[i]->pass) ++j;
      std::string range = v[i]->max_len == v[j]->max_len ? fmt::format("{}", v[i]->max_len)
                                                         : fmt::format("{}..{}", v[i]->max_len, v[j]->max_len);
      std::string result = v[i]->pass ? "pass" : "FAIL: " + v[i]->detail;
      if (!v[i]->pass && j > i) {
        // Name the range of the failures' details when they differ.
        bool same = true;
        for (size_t t = i; t <= j; ++t) same &= v[t]->detail == v[i]->detail;
        if (!same) result = fmt::format("FAIL: {} .. {}", v[i]->detail, v[j]->detail);
      }
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", std::get<0>(k), std::get<1>(k), std::get<2>(k), bs, range, j - i + 1, result);
      i = j + 1;
    }
  }
  return s;
}

}  // namespace mla::oracle
