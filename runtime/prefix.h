// Shared-prefix groups (issue #13, docs/shared-prefix.md): consecutive requests whose page
// lists begin with the same page ids. Detected on the host from a copy of the page table, or
// passed by the caller (vLLM's common_prefix_len, SGLang's radix tree know them already), and
// priced by a cost model that says whether reading the prefix once per group would pay.
//
// Today the catalog has no prefix work units, so a group is reported (Plan::prefix_groups,
// stats.json) and every request still runs as before; the decision says why.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mla::rt {

struct PrefixGroup {
  int first = 0;          // first request of the group
  int count = 0;          // requests first .. first + count - 1 (>= 2)
  int shared_tokens = 0;  // tokens 0 .. shared_tokens - 1 are the same pages in every member
  bool operator==(const PrefixGroup&) const = default;
};

// The page id of page `i` of request `b` (only asked for pages the request has).
using PageIdOf = std::function<int32_t(int b, int i)>;

// Groups of consecutive requests sharing their leading pages. Only whole pages every member
// holds count (a partially shared page belongs to the unique parts); the shared part is cut to
// a multiple of `tile_tokens` and to what every row of every member sees (the causal limit:
// kv_len - qseqlen + 1), and a group needs >= 2 members and >= one tile of sharing.
std::vector<PrefixGroup> detect_prefix_groups(const std::vector<int>& kv_lens, int page_size, int qseqlen,
                                              int tile_tokens, const PageIdOf& page_id);

// Caller-given groups, checked against the batch: throws std::invalid_argument naming the
// group, the field, the value and what is allowed (members in the batch, no overlap, count >= 2,
// 0 < shared_tokens <= every member's kv_len - qseqlen + 1, a multiple of page_size).
void check_prefix_groups(const std::vector<PrefixGroup>& groups, const std::vector<int>& kv_lens, int page_size,
                         int qseqlen);

// What the cost model says of one group.
struct CascadeDecision {
  PrefixGroup group;
  int64_t kv_bytes_saved = 0;   // prefix bytes not re-read: (count - 1) * shared * bytes per token
  int64_t extra_bytes = 0;      // prefix partials (write + read): rows of the group * 513 f32 * 2 per prefix unit
  bool cascade = false;         // read the prefix once for the group
  std::string reason;
  nlohmann::json to_json() const;
};

struct CascadeInputs {
  int heads = 16, qseqlen = 1;
  int kv_bytes_per_token = 576;
  int num_cus = 256;
  bool prefix_units_available = false;  // the catalog has prefix work units for this shape
  int min_shared_tokens = 256;          // shorter prefixes run per request (vLLM's cascade uses 256)
  int min_requests = 2;
};

CascadeDecision decide_cascade(const PrefixGroup& g, const CascadeInputs& in);

}  // namespace mla::rt
