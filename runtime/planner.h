// Host-side split planner of MLA decode (docs/planner.md).
//
// The policy, in one pass (FlashMLA's get_decoding_sched_meta, on the host): every workgroup of
// a launch's persistent grid gets an equal payload of the cost model's work (tiles times their
// cost, plus a fixed cost per unit: its fill and the partial it writes). The jobs (requests, or a
// shared prefix and the members' unique parts) are walked in order and cut at tile boundaries
// wherever a workgroup's payload is full, so the splits fall out of the payload. The row groups
// of one split go to neighbouring workgroups of one XCD. Where HBM bounds the launch before the
// CUs do, fewer CUs get work (fewer partials). A request split k ways gets k partial slots,
// which the reduce merges; a cascade plan (a group's prefix read once by the prefix kernel) is
// chosen when the same cost model prices it lower.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "abi/mla_abi.h"
#include "runtime/prefix.h"

namespace mla::rt {

struct Problem;

// The binary tables the kernels read: one WorkUnit per decode workgroup, one PrefixUnit per
// prefix workgroup, one ReduceEntry per split request or cascading member (abi/mla_abi.h,
// shared with the kernel builders).
using abi::ReduceEntry;
using abi::WorkUnit;

// Partial slot p holds partial_o[p][M][512] f32 (normalised within the split) and
// partial_lse[p][M] f32 (natural log of the split's sum of exp(s)), with M = heads*qseqlen and
// row m = r*heads + h for q row r of the request and head h (the row order of q and o).
// Units of the same (request, split) but different row groups share one slot and write
// disjoint rows. The planner guarantees that every unit holds at least one visible token for
// every row it covers (the last split of a request has >= qseqlen tokens), so no partial row
// is empty: partial lse is always finite.

// A read-only view of the caller's array: a std::span<const T>. The planner's inputs borrow the
// batch's arrays, so that a plan update copies nothing: assign a std::span (or pointer and count),
// which must outlive the plan_decode call. Given a std::vector or a braced list instead (tools,
// tests), it keeps a copy of its own (one allocation), so `in.kv_lens = kv_lens_of(problem)` and
// `in.prefix_groups = detect_prefix_groups(...)` cannot dangle.
template <class T>
class InputSpan : public std::span<const T> {
 public:
  InputSpan() = default;
  InputSpan(std::span<const T> s) : std::span<const T>(s) {}
  InputSpan(std::span<T> s) : std::span<const T>(s) {}
  InputSpan(const T* data, size_t count) : std::span<const T>(data, count) {}
  InputSpan(const std::vector<T>& v) : InputSpan(std::vector<T>(v)) {}
  InputSpan(std::vector<T>&& v) : keep_(std::make_shared<const std::vector<T>>(std::move(v))) {
    std::span<const T>::operator=(std::span<const T>(*keep_));
  }
  InputSpan(std::initializer_list<T> l) : InputSpan(std::vector<T>(l)) {}
  // Whether it holds its own copy (assigned from a vector or a list) rather than a view.
  bool owns() const { return keep_ != nullptr; }
  std::vector<T> to_vector() const { return std::vector<T>(this->begin(), this->end()); }

 private:
  std::shared_ptr<const std::vector<T>> keep_;
};

struct PlanInputs {
  // Tokens per request: 0 (an empty request: no work units, splits 0, and a reduce entry with no
  // splits, for which the reduce writes o = 0 and lse = -inf), or >= qseqlen. May be empty.
  InputSpan<int> kv_lens;
  int qseqlen = 1;
  int heads = 16;
  int page_size = 1;             // for WorkUnit::page_base (= sum of ceil(kv_len / page_size) before b)
  int num_cus = abi::facts(abi::Target::gfx942).num_cus;  // set per device: abi::facts(target).num_cus
  int num_xcds = abi::facts(abi::Target::gfx942).num_xcds;  // workgroup i runs on XCD i mod num_xcds
  int workgroups_per_cu = 1;     // decode workgroups resident per CU: the launch's grid is num_cus x this
  int tile_tokens = 16;          // T: the kernel's token tile; cuts are at multiples of T
  int rows_per_group = 16;       // 16*consumer waves: row groups = ceil(M / rows_per_group)
  int kv_bytes_per_token = 576;  // 576 (fp8) or 1152 (bf16): prices partial traffic in tokens
  // The decode launch's cost model (cost_model.h, token-equivalents at its CUs' modeled rate):
  // a unit's fill and the HBM floor's factor. Both 0: tokens and partial bytes only.
  double unit_fill = 0, hbm_factor = 0;
  // Its producer's issue per tile (catalog.json issue_model.producer_cycles_per_tile; 0: not
  // priced): binds where the producer dequantises (fp8_ds_mla, docs/sparse.md).
  double producer_per_tile = 0;
  int q_row_bytes = 0;  // a Q row's bytes (576 x q element bytes): every unit reads its rows' Q
  // Requests sharing a prefix (detected or caller-given, docs/shared-prefix.md), and the prefix
  // kernel's row group size: 0 = the catalog has no prefix kernel for this shape: no cascades.
  InputSpan<PrefixGroup> prefix_groups;
  int prefix_rows_per_group = 0;
  int prefix_workgroups_per_cu = 1;  // prefix workgroups resident per CU
  int prefix_partial_o_bytes = 2;    // the prefix kernel's partial o element: 2 (bf16) or 4 (f32)
  int partial_o_bytes = 4;           // the decode kernel's: 4 (f32), or 2 (bf16: sparse kernels)
  // The prefix launch's cost model (cost_model.h; catalog.json's issue_model of the prefix
  // kernel, in token-equivalents): issue and LDS per tile, the HBM floor, the unit fill, and for
  // a kernel of several row blocks per wave the figures per wave-tile; for a phased kernel (no
  // producer wave) its Q prologue per row and its store factor. All 0: tokens only.
  double prefix_issue_per_block_tile = 0;
  double prefix_lds_per_block_tile = 0, prefix_lds_per_tile = 0;
  int prefix_blocks_per_wave = 1;
  std::vector<double> prefix_wave_tile_issue, prefix_wave_tile_lds;
  double prefix_hbm_factor = 0;
  double prefix_unit_fill = 0;
  double prefix_prologue_per_row = 0, prefix_store_factor = 0;
  // Which groups cascade: as the cost model prices it (default); every group the kernels can
  // cascade (tests, experiments); none (the per-request plan).
  CascadePolicy cascade = CascadePolicy::cost_model;
  // Split partials merged inside the decode launch (docs/mla-decode.md, "In-launch merge"): the
  // plan's reduce entries are then one per request, indexed by request, and an empty request
  // gets a unit of no tokens per row group. Needs cascade == never.
  bool merge_in_launch = false;
  // Workspace capacity (0 = unlimited): a cascade plan needing more is not used. Units count
  // decode and prefix units together.
  int64_t max_units = 0, max_partials = 0;
};

struct Plan {
  // Decode launch: units in table order; workgroup x runs units [unit_ranges[x], unit_ranges[x+1])
  // (abi::LaunchHeader), unit_ranges has num_cus x workgroups_per_cu + 1 entries.
  std::vector<WorkUnit> units;
  std::vector<int32_t> unit_ranges;
  // Prefix launch, the same (abi::PrefixUnit is the same int32[8] as WorkUnit). Empty when no
  // group cascades.
  std::vector<abi::PrefixUnit> prefix_units;
  std::vector<int32_t> prefix_unit_ranges;
  // One per split request, per cascading member and per empty request (num_splits 0: the reduce
  // writes o = 0, lse = -inf), in request order.
  std::vector<ReduceEntry> reduces;
  bool merge_in_launch = false;       // PlanInputs::merge_in_launch: reduces[b] is request b's merge entry
  int num_partials = 0;               // partial slots needed (a cascading group's unused slots included)
  int rows = 0;                       // M = heads * qseqlen
  int row_groups = 0;                 // ceil(M / rows_per_group)
  int rows_per_group = 0;
  int tile_tokens = 0;
  int num_cus = 0;
  int prefix_rows_per_group = 0;      // the prefix kernel's (0: no prefix units)
  // Per request: partials its output merges (1 and not a cascading member = final output
  // written directly); for a cascading member prefix splits + unique splits; 0 for an empty request.
  std::vector<int> splits;
  std::vector<int64_t> cu_tokens;     // KV tokens read per CU by the decode launch (workgroup x on CU x mod num_cus)
  std::vector<int> cu_units;          // decode units per CU
  std::vector<int64_t> prefix_cu_tokens;  // the same for the prefix launch (empty without prefix units)
  std::vector<int> prefix_cu_units;
  double balance = 1.0;               // max / mean of cu_tokens over the CUs with work
  int cus_used = 0;                   // CUs with at least one decode unit
  double predicted_cost = 0.0;        // the cost model's time in token-equivalents (docs/planner.md)
  std::vector<CascadeDecision> prefix_groups;  // the cost model's word on each shared prefix
  int num_xcds = 0;                   // as planned for (PlanInputs::num_xcds)
  // Prefix splits with >= 2 row-group units, and how many of them run on one XCD.
  int prefix_row_group_bundles = 0, prefix_row_group_bundles_one_xcd = 0;

  // A prefix-launch unit that is a member's unique part (qseqlen 1, every request a member)
  // rather than a group's prefix: its rows are one request's M (a group's are >= 2 M).
  bool is_unique_part(const abi::PrefixUnit& u) const { return u.rows == rows; }
  int64_t total_tokens() const;       // KV tokens the two launches read (row groups counted each)
  // Partial buffer sizes in bytes: partial_o = num_partials * M * 512 * 4, partial_lse = num_partials * M * 4.
  size_t partial_o_bytes() const { return size_t(num_partials) * rows * 512 * 4; }
  size_t partial_lse_bytes() const { return size_t(num_partials) * rows * 4; }
  nlohmann::json to_json() const;     // summary for stats.json (no per-unit list)
};

// The planner's working storage, reused from one plan_decode call to the next: after a call
// has sized it (and `out`) for a batch, later calls with as many requests and groups allocate
// nothing (docs/planner.md "Host cost"). One per thread; not copyable.
class PlanScratch {
 public:
  PlanScratch();
  ~PlanScratch();
  PlanScratch(PlanScratch&&) noexcept;
  PlanScratch& operator=(PlanScratch&&) noexcept;
  PlanScratch(const PlanScratch&) = delete;
  PlanScratch& operator=(const PlanScratch&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Plans the split of every request over the GPU into `out`, whose vectors are cleared and
// refilled (their capacity kept). Throws std::invalid_argument on bad inputs (message names the
// field, value and what is allowed) before it changes `out`.
void plan_decode(const PlanInputs& in, Plan& out, PlanScratch& scratch);
// The same into a new plan with its own scratch (tools and tests; allocates).
Plan plan_decode(const PlanInputs& in);

// The kv_len of every request of a problem (reference helper for PlanInputs::kv_lens).
std::vector<int> kv_lens_of(const Problem& p);
// PlanInputs with the problem's side filled in (kv_lens, qseqlen, heads, page_size,
// kv_bytes_per_token); the caller sets the GPU and kernel fields.
PlanInputs plan_inputs_of(const Problem& p);

}  // namespace mla::rt
