// Shared-prefix groups (issue #13, docs/shared-prefix.md): consecutive requests whose page
// lists begin with the same page ids. Detected on the host from a copy of the page table, or
// passed by the caller (vLLM's common_prefix_len, SGLang's radix tree know them already), and
// priced by a cost model that says whether reading the prefix once per group would pay.
//
// A group cascades (its prefix read once by prefix units, docs/planner.md "Cascade plans") when
// the catalog has a prefix kernel and the planner models the cascade plan cheaper; every group
// is reported with the decision and why (Plan::prefix_groups, stats.json).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

namespace mla::rt {

enum class CascadePolicy { cost_model, always, never };
// "cost_model", "always", "never"; nullopt for anything else.
std::optional<CascadePolicy> parse_cascade_policy(std::string_view s);
std::string_view cascade_policy_name(CascadePolicy p);

struct PrefixGroup {
  int first = 0;          // first request of the group
  int count = 0;          // requests first .. first + count - 1 (>= 2)
  int shared_tokens = 0;  // tokens 0 .. shared_tokens - 1 are the same pages in every member
  bool operator==(const PrefixGroup&) const = default;
};

// The page id of page `i` of request `b` (only asked for pages the request has).
using PageIdOf = std::function<int32_t(int b, int i)>;

// A host copy of the page table (mla_plan_update_shared's host_kv_indices): request b's page i
// is ids[row(b) + i], where row(b) = b * stride, or with stride 0 (packed) the pages of the
// requests before b: the sum of their ceil(kv_len / page_size).
struct PageTableView {
  const int32_t* ids = nullptr;
  int64_t stride = 0;
};

// Groups of consecutive requests sharing their leading pages. Only whole pages every member
// holds count (a partially shared page belongs to the unique parts); the shared part is cut to
// a multiple of `tile_tokens` and to what every row of every member sees (the causal limit:
// kv_len - qseqlen + 1), and a group needs >= 2 members and >= one tile of sharing. An empty
// request (kv_len 0) holds no page: it is never a member (it ends a run).
//
// Page ids are compared, never tokens: each request of a run with its neighbour, up to their
// first differing page and no further than the run's shared pages so far (the group shares the
// smallest adjacent common prefix; page equality is transitive), so the work is at most the
// members' shared pages. Writes the groups into `out` (cleared; its capacity kept, so nothing is
// allocated once it has held the batch's groups).
void detect_prefix_groups(std::span<const int> kv_lens, int page_size, int qseqlen, int tile_tokens,
                          PageTableView table, std::vector<PrefixGroup>& out);
// The same through a page-id callback, one call per page compared (tools and tests).
std::vector<PrefixGroup> detect_prefix_groups(std::span<const int> kv_lens, int page_size, int qseqlen,
                                              int tile_tokens, const PageIdOf& page_id);

// Caller-given groups, checked against the batch: throws std::invalid_argument naming the
// group, the field, the value and what is allowed (members in the batch, no overlap, count >= 2,
// no empty member, 0 < shared_tokens <= every member's kv_len - qseqlen + 1, a multiple of
// page_size). Allocates only to throw.
void check_prefix_groups(std::span<const PrefixGroup> groups, std::span<const int> kv_lens, int page_size,
                         int qseqlen);

// What the cost model says of one group. decide_cascade fills the first part (whether the group
// may cascade at all); plan_decode fills the rest from the two plans it prices.
struct CascadeDecision {
  PrefixGroup group;
  int row_groups = 0;           // G per member in the decode kernel: ceil(M / rows_per_group)
  int prefix_row_groups = 0;    // Gp in the prefix kernel: ceil(count * M / prefix_rows_per_group)
  int64_t kv_bytes_saved = 0;   // prefix bytes not re-read: (count * G - Gp) * shared * bytes per token
  bool cascade = false;         // read the prefix once for the group (after plan_decode: in the plan)
  std::string reason;
  // Set by plan_decode when both plans were priced (token-equivalents, docs/planner.md).
  double cost_cascade = 0.0, cost_per_request = 0.0;
  int64_t extra_bytes = 0;      // prefix partials written and read back: prefix_splits * count * M * (512 * o bytes + 4) * 2
  int prefix_splits = 0;        // kp of the cascade plan
  int first_slot = -1;          // B: the group's slots are B .. B + slots - 1 (cascade only)
  int slots = 0;                // (kp + max unique splits) * count
  nlohmann::json to_json() const;
};

struct CascadeInputs {
  int heads = 16, qseqlen = 1;
  int kv_bytes_per_token = 576;
  int num_cus = 256;
  int rows_per_group = 16;              // the decode kernel's
  int prefix_rows_per_group = 48;       // the prefix kernel's (used when prefix_units_available)
  bool prefix_units_available = false;  // the catalog has prefix work units for this shape
  int min_shared_tokens = 256;          // shorter prefixes run per request (vLLM's cascade uses 256)
  int min_requests = 2;
};

// Whether the group may cascade: enough requests and tokens, fewer prefix row groups than the
// members' (else the prefix is read as often), a prefix kernel. plan_decode then prices it.
CascadeDecision decide_cascade(const PrefixGroup& g, const CascadeInputs& in);
// The same into `d`, every field set; d.reason is rewritten in place (its capacity kept).
void decide_cascade(const PrefixGroup& g, const CascadeInputs& in, CascadeDecision& d);

}  // namespace mla::rt
