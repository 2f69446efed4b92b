#include "runtime/prefix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>

namespace mla::rt {

namespace {

// The groups of consecutive requests whose first pages agree, through `common(a, b, n)`: how many
// of the first n pages of requests a and b are the same (stops at the first that differs).
template <class Common>
void detect(std::span<const int> kv_lens, int page_size, int qseqlen, int tile_tokens, Common&& common,
            std::vector<PrefixGroup>& out) {
  out.clear();
  const int batch = int(kv_lens.size());
  // Whole pages request b holds (an empty request none: it ends a run).
  auto full_pages = [&](int b) { return std::max(0, kv_lens[size_t(b)] / page_size); };
  // The part every row of request b sees, in whole tiles.
  auto usable = [&](int b, int64_t tokens) {
    tokens = std::min<int64_t>(tokens, int64_t(kv_lens[size_t(b)]) - qseqlen + 1);
    return int(tokens / tile_tokens * tile_tokens);
  };
  for (int b = 0; b < batch;) {
    // A maximal run of consecutive requests with a common leading page; the run's shared pages
    // are the smallest adjacent common prefix (page equality is transitive), so a pair is
    // compared no further than the run's shared pages so far.
    int e = b + 1, pages = 1 << 30;
    while (e < batch) {
      const int n = std::min({full_pages(e - 1), full_pages(e), pages});
      const int c = n > 0 ? common(e - 1, e, n) : 0;
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
}

// How many of the first n ids of x and y agree: compared 256 ids at a time, then 16, then within
// the 16 that differ.
int agreeing_prefix(const int32_t* x, const int32_t* y, int n) {
  int i = 0;
  while (i + 256 <= n && std::memcmp(x + i, y + i, 256 * sizeof(int32_t)) == 0) i += 256;
  while (i + 16 <= n && std::memcmp(x + i, y + i, 16 * sizeof(int32_t)) == 0) i += 16;
  while (i < n && x[i] == y[i]) ++i;
  return i;
}

}  // namespace

void detect_prefix_groups(std::span<const int> kv_lens, int page_size, int qseqlen, int tile_tokens,
                          PageTableView table, std::vector<PrefixGroup>& out) {
  // Row offsets, found in increasing request order (the packed layout sums the pages before).
  int next = 0;
  int64_t at = 0;
  auto row = [&](int b) -> const int32_t* {
    if (table.stride > 0) return table.ids + int64_t(b) * table.stride;
    for (; next < b; ++next) at += (std::max(0, kv_lens[size_t(next)]) + page_size - 1) / page_size;
    return table.ids + at;
  };
  detect(
      kv_lens, page_size, qseqlen, tile_tokens,
      [&](int a, int b, int n) {
        const int32_t* x = row(a);
        return agreeing_prefix(x, row(b), n);
      },
      out);
}

std::vector<PrefixGroup> detect_prefix_groups(std::span<const int> kv_lens, int page_size, int qseqlen,
                                              int tile_tokens, const PageIdOf& page_id) {
  std::vector<PrefixGroup> out;
  detect(
      kv_lens, page_size, qseqlen, tile_tokens,
      [&](int a, int b, int n) {
        int i = 0;
        while (i < n && page_id(a, i) == page_id(b, i)) ++i;
        return i;
      },
      out);
  return out;
}

void check_prefix_groups(std::span<const PrefixGroup> groups, std::span<const int> kv_lens, int page_size,
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
    // count > batch - first, not first + count > batch: a count near INT32_MAX overflowed that
    // sum (fuzz finding, issue #15); first is in 0..batch-1 here.
    if (g.count < 2 || g.count > batch - g.first)
      bad(fmt::format("count = {} (allowed: 2..batch - first = {})", g.count, batch - g.first));
    if (g.first < end) bad(fmt::format("overlaps the previous group, which ends before request {} (groups in batch order, disjoint)", end));
    if (g.shared_tokens < 1 || g.shared_tokens % page_size)
      bad(fmt::format("shared_tokens = {} (allowed: a positive multiple of page_size = {})", g.shared_tokens, page_size));
    for (int b = g.first; b < g.first + g.count; ++b) {
      if (kv_lens[size_t(b)] == 0)
        bad(fmt::format("request {} is empty (kv_lens[{}] = 0): an empty request shares no prefix and is never a "
                        "group member",
                        b, b));
      if (g.shared_tokens > kv_lens[size_t(b)] - qseqlen + 1)
        bad(fmt::format("shared_tokens = {} > kv_lens[{}] - qseqlen + 1 = {} (every row of every member must see the "
                        "whole prefix)",
                        g.shared_tokens, b, kv_lens[size_t(b)] - qseqlen + 1));
    }
    end = g.first + g.count;
  }
}

std::optional<CascadePolicy> parse_cascade_policy(std::string_view s) {
  for (CascadePolicy p : {CascadePolicy::cost_model, CascadePolicy::always, CascadePolicy::never})
    if (s == cascade_policy_name(p)) return p;
  return std::nullopt;
}

std::string_view cascade_policy_name(CascadePolicy p) {
  switch (p) {
    case CascadePolicy::cost_model: return "cost_model";
    case CascadePolicy::always: return "always";
    case CascadePolicy::never: return "never";
  }
  return "?";
}

CascadeDecision decide_cascade(const PrefixGroup& g, const CascadeInputs& in) {
  CascadeDecision d;
  decide_cascade(g, in, d);
  return d;
}

void decide_cascade(const PrefixGroup& g, const CascadeInputs& in, CascadeDecision& d) {
  std::string reason = std::move(d.reason);  // its buffer, reused
  reason.clear();
  d = CascadeDecision{};
  d.group = g;
  const int64_t M = int64_t(in.heads) * in.qseqlen, R = g.count * M;
  d.row_groups = int((M + in.rows_per_group - 1) / in.rows_per_group);
  // Without a prefix kernel the group's rows would be read in the members' row groups.
  d.prefix_row_groups = in.prefix_units_available && in.prefix_rows_per_group > 0
                            ? int((R + in.prefix_rows_per_group - 1) / in.prefix_rows_per_group)
                            : g.count * d.row_groups;
  // Each row group reads the KV of its range once: members read the prefix count * G times,
  // prefix units Gp times.
  d.kv_bytes_saved = (int64_t(g.count) * d.row_groups - d.prefix_row_groups) * g.shared_tokens * in.kv_bytes_per_token;
  auto out = std::back_inserter(reason);
  if (g.count < in.min_requests)
    fmt::format_to(out, "{} requests share the prefix (fewer than {})", g.count, in.min_requests);
  else if (g.shared_tokens < in.min_shared_tokens)
    fmt::format_to(out, "{} shared tokens (fewer than {})", g.shared_tokens, in.min_shared_tokens);
  else if (!in.prefix_units_available)
    reason += "the catalog has no prefix kernel for this shape: every request reads the prefix";
  else if (d.kv_bytes_saved <= 0)
    fmt::format_to(out,
                   "the group's {} rows need {} prefix row groups, no fewer than the members' {} x {}: the "
                   "prefix would be read as often (saves nothing)",
                   R, d.prefix_row_groups, g.count, d.row_groups);
  else
    d.cascade = true, reason += "may cascade: the prefix would be read once for the group";
  d.reason = std::move(reason);
}

nlohmann::json CascadeDecision::to_json() const {
  nlohmann::json j{{"first", group.first},
                   {"count", group.count},
                   {"shared_tokens", group.shared_tokens},
                   {"row_groups", row_groups},
                   {"prefix_row_groups", prefix_row_groups},
                   {"kv_bytes_saved", kv_bytes_saved},
                   {"cascade", cascade},
                   {"reason", reason}};
  if (cost_cascade > 0) {
    j["cost_cascade"] = cost_cascade;
    j["cost_per_request"] = cost_per_request;
    j["prefix_splits"] = prefix_splits;
    j["extra_bytes"] = extra_bytes;
  }
  if (cascade) {
    j["first_slot"] = first_slot;
    j["slots"] = slots;
  }
  return j;
}

}  // namespace mla::rt
