#include "runtime/prefix.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace mla::rt {

std::vector<PrefixGroup> detect_prefix_groups(const std::vector<int>& kv_lens, int page_size, int qseqlen,
                                              int tile_tokens, const PageIdOf& page_id) {
  std::vector<PrefixGroup> out;
  const int batch = int(kv_lens.size());
  // Whole pages request b holds, and the leading pages b and b+1 share.
  auto full_pages = [&](int b) { return kv_lens[size_t(b)] / page_size; };
  auto common = [&](int a, int b) {
    const int n = std::min(full_pages(a), full_pages(b));
    int i = 0;
    while (i < n && page_id(a, i) == page_id(b, i)) ++i;
    return i;
  };
  // The part every row of request b sees, in whole tiles.
  auto usable = [&](int b, int64_t tokens) {
    tokens = std::min<int64_t>(tokens, kv_lens[size_t(b)] - qseqlen + 1);
    return int(tokens / tile_tokens * tile_tokens);
  };
  for (int b = 0; b < batch;) {
    // A maximal run of consecutive requests with a common leading page; the run's shared pages
    // are the smallest adjacent common prefix (page equality is transitive).
    int e = b + 1, pages = 1 << 30;
    while (e < batch) {
      const int c = common(e - 1, e);
      if (c == 0) break;
      pages = std::min(pages, c);
      ++e;
    }
    if (e - b >= 2) {
      int shared = int(std::min<int64_t>(int64_t(pages) * page_size, 1 << 30));
      for (int r = b; r < e; ++r) shared = std::min(shared, usable(r, shared));
      if (shared >= tile_tokens) out.push_back({b, e - b, shared});
    }
    b = e;
  }
  return out;
}

void check_prefix_groups(const std::vector<PrefixGroup>& groups, const std::vector<int>& kv_lens, int page_size,
                         int qseqlen) {
  const int batch = int(kv_lens.size());
  int end = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    const PrefixGroup& g = groups[k];
    auto bad = [&](const std::string& what) {
      throw std::invalid_argument(fmt::format("prefix group {} (first {}, count {}, shared_tokens {}): {}", k, g.first,
                                              g.count, g.shared_tokens, what));
    };
    if (g.first < 0 || g.first >= batch) bad(fmt::format("first = {} (allowed: 0..batch-1 = {})", g.first, batch - 1));
    if (g.count < 2 || g.first + g.count > batch)
      bad(fmt::format("count = {} (allowed: 2..batch - first = {})", g.count, batch - g.first));
    if (g.first < end) bad(fmt::format("overlaps the previous group, which ends before request {} (groups in batch order, disjoint)", end));
    if (g.shared_tokens < 1 || g.shared_tokens % page_size)
      bad(fmt::format("shared_tokens = {} (allowed: a positive multiple of page_size = {})", g.shared_tokens, page_size));
    for (int b = g.first; b < g.first + g.count; ++b)
      if (g.shared_tokens > kv_lens[size_t(b)] - qseqlen + 1)
        bad(fmt::format("shared_tokens = {} > kv_lens[{}] - qseqlen + 1 = {} (every row of every member must see the "
                        "whole prefix)",
                        g.shared_tokens, b, kv_lens[size_t(b)] - qseqlen + 1));
    end = g.first + g.count;
  }
}

CascadeDecision decide_cascade(const PrefixGroup& g, const CascadeInputs& in) {
  CascadeDecision d;
  d.group = g;
  d.kv_bytes_saved = int64_t(g.count - 1) * g.shared_tokens * in.kv_bytes_per_token;
  // Prefix units spread over the GPU (at most one per CU and per 4 tiles of 32 tokens) each
  // write the group's rows as a partial (512 f32 + lse) that the reduce reads back.
  const int64_t rows = int64_t(g.count) * in.heads * in.qseqlen;
  const int64_t units = std::max<int64_t>(1, std::min<int64_t>(in.num_cus, g.shared_tokens / 128));
  d.extra_bytes = units * rows * (512 + 1) * 4 * 2;
  if (g.count < in.min_requests)
    d.reason = fmt::format("{} requests share the prefix (fewer than {})", g.count, in.min_requests);
  else if (g.shared_tokens < in.min_shared_tokens)
    d.reason = fmt::format("{} shared tokens (fewer than {})", g.shared_tokens, in.min_shared_tokens);
  else if (d.kv_bytes_saved <= d.extra_bytes)
    d.reason = fmt::format("re-reading the prefix ({} bytes) costs less than the prefix partials ({} bytes)",
                           d.kv_bytes_saved, d.extra_bytes);
  else if (!in.prefix_units_available)
    d.reason = "would pay, but the catalog has no prefix work units yet (issue #13): every request reads the prefix";
  else
    d.cascade = true, d.reason = "the prefix is read once for the group";
  return d;
}

nlohmann::json CascadeDecision::to_json() const {
  return {{"first", group.first},
          {"count", group.count},
          {"shared_tokens", group.shared_tokens},
          {"kv_bytes_saved", kv_bytes_saved},
          {"extra_bytes", extra_bytes},
          {"cascade", cascade},
          {"reason", reason}};
}

}  // namespace mla::rt
