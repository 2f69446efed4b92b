// The contract between the generator (which builds the kernels) and the runtime (which plans
// and launches them), in one header-only place with no LLVM and no emulator: targets and their
// facts, dtypes, dimensions, the binary tables the kernels read (work units, reduce entries)
// and the kernel-argument tables. The generator declares each kernel's arguments by iterating
// these tables and the runtime packs them by the same names; the emulator keeps its own enums
// on purpose (an oracle that shares no code with what it checks) and converts at its backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mla::abi {

enum class Target : uint8_t { gfx942, gfx950 };
enum class DType : uint8_t { fp8, bf16 };

constexpr int dtype_bytes(DType d) { return d == DType::fp8 ? 1 : 2; }
constexpr std::string_view dtype_name(DType d) { return d == DType::fp8 ? "fp8" : "bf16"; }

// Facts about a target that both sides need. Everything else about a target (MFMA menu,
// wait states, register files) is the generator's target description (generator/target).
struct TargetFacts {
  Target target;
  std::string_view name;       // "gfx942"
  std::string_view target_id;  // the code objects' target ID
  std::string_view product;    // "MI300X"
  int num_cus;                 // compute units of the product
  // XCDs (chiplets, each with its own L2): the dispatcher hands workgroup i to XCD i mod
  // num_xcds, round-robin (AMD's aiter, aiter/ops/triton/utils/_triton/pid_preprocessing.py
  // remap_workgroup_spatial, which remaps attention workgroups that share KV onto one XCD's L2).
  int num_xcds;
  uint32_t lds_bytes;          // per CU (= the most one workgroup may use)
  bool fp8_fnuz;               // fp8 e4m3 is FNUZ (bias 8, max 240, 0x80 NaN); else OCP e4m3fn (bias 7, max 448)
};
inline constexpr TargetFacts kTargets[] = {
    {.target = Target::gfx942, .name = "gfx942", .target_id = "gfx942:sramecc+:xnack-", .product = "MI300X",
     .num_cus = 304, .num_xcds = 8, .lds_bytes = 64 * 1024, .fp8_fnuz = true},
    {.target = Target::gfx950, .name = "gfx950", .target_id = "gfx950:sramecc+:xnack-", .product = "MI355X",
     .num_cus = 256, .num_xcds = 8, .lds_bytes = 160 * 1024, .fp8_fnuz = false},
};
constexpr const TargetFacts& facts(Target t) { return kTargets[t == Target::gfx942 ? 0 : 1]; }
constexpr std::string_view target_name(Target t) { return facts(t).name; }
constexpr std::optional<Target> parse_target(std::string_view s) {
  for (const TargetFacts& f : kTargets)
    if (f.name == s) return f.target;
  return std::nullopt;
}

// Width of one KV entry (512 latent + 64 rope) and of the value / output part.
inline constexpr int kQkDim = 576;
inline constexpr int kVDim = 512;
// FlashMLA's fp8_ds_mla entry (the sparse cache of DeepSeek-V3.2): bytes [0, 512) e4m3fn latent,
// [512, 528) four f32 scales (latent element i is scaled by scale[i / 128]), [528, 656) 64 bf16
// rope values.
inline constexpr int kDsMlaRowBytes = 656, kDsMlaScaleOffset = 512, kDsMlaRopeOffset = 528, kDsMlaTile = 128;

// One workgroup of the decode kernel: int32[8], in the work-unit table after its LaunchHeader in
// launch order (workgroup id x reads unit x). The kernel loads it into 8 SGPRs: field i is dword i.
struct WorkUnit {
  int32_t qo_row;     // first q row of the request (= qo_indptr[b]); the unit covers q rows qo_row .. qo_row+qseqlen-1
  int32_t page_base;  // kv_indptr[b]: token t of the request is in page kv_indices[page_base + t / page_size]
  int32_t kv_start;   // token range [kv_start, kv_end) within the request, kv_start < kv_end;
  int32_t kv_end;     //   kv_start is a multiple of tile_tokens, and so is kv_end unless kv_end == kv_len
  int32_t kv_len;     // the request's total tokens (causal limits use it: row r sees tokens < kv_len - qseqlen + r + 1)
  int32_t partial;    // -1: the unit covers the whole request and writes final o (and lse); else the partial slot
  int32_t row_group;  // rows [row_group*rows_per_group, ...) of the M = heads*qseqlen rows of the request
  int32_t batch;      // request index b
};
static_assert(sizeof(WorkUnit) == 8 * sizeof(int32_t), "WorkUnit is int32[8]");
// Dword index of each WorkUnit field (the kernel's SGPR of it).
namespace work_unit {
inline constexpr int qo_row = offsetof(WorkUnit, qo_row) / 4, page_base = offsetof(WorkUnit, page_base) / 4,
                     kv_start = offsetof(WorkUnit, kv_start) / 4, kv_end = offsetof(WorkUnit, kv_end) / 4,
                     kv_len = offsetof(WorkUnit, kv_len) / 4, partial = offsetof(WorkUnit, partial) / 4,
                     row_group = offsetof(WorkUnit, row_group) / 4, batch = offsetof(WorkUnit, batch) / 4;
inline constexpr int dwords = sizeof(WorkUnit) / 4;
}  // namespace work_unit

// One workgroup of the prefix kernel (mla_prefix_*, docs/shared-prefix.md): the rows of every
// member of a prefix group (count requests x M rows, contiguous in q since the members are
// consecutive requests) over a token range of the shared prefix, with no causal limit (every
// row sees the whole prefix). Same int32[8] and loader as WorkUnit; two fields mean other things.
struct PrefixUnit {
  int32_t qo_row;         // first q row of the group's first member
  int32_t page_base;      // the first member's kv_indptr: the prefix is its first pages
  int32_t kv_start;       // token range [kv_start, kv_end) of the prefix, kv_start a multiple of
  int32_t kv_end;         //   tile_tokens, and so is kv_end unless it ends the prefix
  int32_t rows;           // R = count * M rows of the group: q rows qo_row * heads + 0 .. R-1
  int32_t partial;        // slot of member 0: row r is written to slot partial + r / M, row r % M
  int32_t row_group;      // rows [row_group * rows_per_group, ...) of the R
  int32_t first_request;  // the group's first request (block-table page bases)
};
static_assert(sizeof(PrefixUnit) == sizeof(WorkUnit), "a PrefixUnit is read like a WorkUnit");
static_assert(offsetof(PrefixUnit, rows) == offsetof(WorkUnit, kv_len) &&
                  offsetof(PrefixUnit, first_request) == offsetof(WorkUnit, batch) &&
                  offsetof(PrefixUnit, partial) == offsetof(WorkUnit, partial) &&
                  offsetof(PrefixUnit, row_group) == offsetof(WorkUnit, row_group),
              "PrefixUnit shares WorkUnit's dwords");
namespace prefix_unit {
inline constexpr int rows = offsetof(PrefixUnit, rows) / 4, first_request = offsetof(PrefixUnit, first_request) / 4;
}  // namespace prefix_unit

// One per request whose output merges several partials (a split request, or a member of a
// prefix group read once for the group): int32[8], in the reduce buffer (workgroups of the
// reduce kernel index it). The request's partials are slots first_partial + k * partial_stride
// for k = 0 .. num_splits - 1 (stride 1 for a split request; a prefix group's members
// interleave their slots, stride = the group's request count, see PrefixUnit). Partials
// k < bf16_splits hold o as bf16 (a prefix kernel's or a sparse decode kernel's, half the
// bytes), the others f32 (a dense decode kernel's): both at the same row offsets, row m of slot p at byte
// (p * M + m) * 2048 of partial_o, a bf16 row filling the first 1024 bytes.
struct ReduceEntry {
  int32_t qo_row;          // first q row of the request: final o rows qo_row .. qo_row+qseqlen-1
  int32_t first_partial;   // first partial slot
  int32_t num_splits;      // >= 1 (1 only for a prefix-group member: its one partial normalised into o); 0: a
                           // request with no KV (o = 0, lse = -inf)
  int32_t partial_stride;  // >= 1: slot distance between consecutive partials
  int32_t bf16_splits;     // 0 .. num_splits: the first bf16_splits partials are bf16
  int32_t reserved[3];     // 0
};
static_assert(sizeof(ReduceEntry) == 8 * sizeof(int32_t), "ReduceEntry is int32[8]");
namespace reduce_entry {
inline constexpr int qo_row = offsetof(ReduceEntry, qo_row) / 4, first_partial = offsetof(ReduceEntry, first_partial) / 4,
                     num_splits = offsetof(ReduceEntry, num_splits) / 4,
                     partial_stride = offsetof(ReduceEntry, partial_stride) / 4,
                     bf16_splits = offsetof(ReduceEntry, bf16_splits) / 4;
inline constexpr int dwords = sizeof(ReduceEntry) / 4;
}  // namespace reduce_entry

// A kernel argument: a pointer (8 bytes) or a 4-byte value, at its byte offset in the
// kernarg segment. `type` is the C type the code object's metadata names.
struct KernargField {
  std::string_view name;
  bool pointer;
  std::string_view type;  // "" for pointers whose element type depends on the shape (q, kv)
  uint32_t offset;
  uint32_t size;
};

// The header of one launch's table in the workspace (issue #31): the grid is fixed by the
// plan's capacity and the device, so a kernel learns from this header, which the step's one
// upload writes, which entries its workgroups take. Entry i (a WorkUnit, PrefixUnit or
// ReduceEntry, 32 bytes) is at header + entries_offset + i * 32. The launch's `work` /
// `reduce_map` argument points at its header: the kernargs, and so a captured graph, stay the
// same from step to step.
//
// The decode and prefix launches are persistent: workgroup x takes the entries
// [ranges[x], ranges[x + 1]) one after the other, where ranges is int32[stride + 1] at header +
// ranges_offset (the planner's slots: each workgroup's run of units, as FlashMLA's and aiter's
// schedulers hand each CTA its own list). The reduce launch takes entry x in workgroup x, below
// count.
struct LaunchHeader {
  int32_t count;           // entries of this step (0: every workgroup exits)
  int32_t entries_offset;  // bytes from this header to entry 0 (> 0, a multiple of 32)
  int32_t stride;          // the launch's workgroups in x (> 0)
  // Decode launch with the merge in the launch (docs/mla-decode.md, "In-launch merge"), else 0:
  int32_t merge_offset;    // bytes from this header to the merge entries: abi::ReduceEntry of request b at + 32 b
  int32_t counters_offset; // bytes from this header to the arrival counters: uint32 per (request, 16-row block)
  int32_t ranges_offset;   // decode and prefix launches: bytes from this header to int32 ranges[stride + 1]
  int32_t reserved[2];     // 0
};
static_assert(sizeof(LaunchHeader) == 32, "LaunchHeader is int32[8]");
namespace launch_header {
inline constexpr int count = offsetof(LaunchHeader, count) / 4, entries_offset = offsetof(LaunchHeader, entries_offset) / 4,
                     stride = offsetof(LaunchHeader, stride) / 4, merge_offset = offsetof(LaunchHeader, merge_offset) / 4,
                     counters_offset = offsetof(LaunchHeader, counters_offset) / 4,
                     ranges_offset = offsetof(LaunchHeader, ranges_offset) / 4;
}  // namespace launch_header

// The decode kernel's arguments (the kernel reads them at these offsets). q_scale and kv_scale
// point at one f32 each, read on the device at every launch (as aiter's kernels read theirs):
// a scale that changes on the device needs no new kernargs. The kernel's score scale is
// sm_scale * q_scale * kv_scale (two f32 multiplies in that order), its output scale kv_scale.
namespace decode_args {
inline constexpr uint32_t q = 0x00, kv = 0x08, kv_indices = 0x10, work = 0x18, o = 0x20, lse = 0x28,
                          partial_o = 0x30, partial_lse = 0x38, q_scale = 0x40, kv_scale = 0x48, sm_scale = 0x50,
                          logit_cap = 0x54, kv_slots = 0x58, reserved = 0x5c, size = 0x60;
}
inline constexpr KernargField kDecodeArgs[] = {
    {"q", true, "", decode_args::q, 8},
    {"kv", true, "", decode_args::kv, 8},
    {"kv_indices", true, "const int32_t*", decode_args::kv_indices, 8},
    {"work", true, "const int32_t*", decode_args::work, 8},
    {"o", true, "uint16_t*", decode_args::o, 8},
    {"lse", true, "float*", decode_args::lse, 8},
    {"partial_o", true, "float*", decode_args::partial_o, 8},
    {"partial_lse", true, "float*", decode_args::partial_lse, 8},
    {"q_scale", true, "const float*", decode_args::q_scale, 8},
    {"kv_scale", true, "const float*", decode_args::kv_scale, 8},
    {"sm_scale", false, "float", decode_args::sm_scale, 4},
    {"logit_cap", false, "float", decode_args::logit_cap, 4},
    // Token slots of the cache (num_pages * page_size). Sparse kernels mask an index >= kv_slots
    // (and -1) and never load it; dense kernels do not read it.
    {"kv_slots", false, "uint32_t", decode_args::kv_slots, 4},
    {"reserved", false, "uint32_t", decode_args::reserved, 4},
};

// The reduce kernel's arguments (reduce_map points at a LaunchHeader). A ReduceEntry with
// num_splits 0 is a request with no KV: the kernel writes o = 0 and lse = -inf for it.
namespace reduce_args {
inline constexpr uint32_t reduce_map = 0x00, partial_o = 0x08, partial_lse = 0x10, o = 0x18, lse = 0x20, size = 0x28;
}
inline constexpr KernargField kReduceArgs[] = {
    {"reduce_map", true, "const int32_t*", reduce_args::reduce_map, 8},
    {"partial_o", true, "const float*", reduce_args::partial_o, 8},
    {"partial_lse", true, "const float*", reduce_args::partial_lse, 8},
    {"o", true, "uint16_t*", reduce_args::o, 8},
    {"lse", true, "float*", reduce_args::lse, 8},
};

// merge_attn_states (vLLM's names): o = (w_p prefix_output + w_s suffix_output) / (w_p + w_s),
// w = exp(lse - max lse), per row of 512 bf16; lse [rows] f32 natural log, rows = tokens * heads
// (row t * heads + h, the layout of the decode kernel's o and lse); output_lse may be 0.
namespace merge_args {
inline constexpr uint32_t output = 0x00, prefix_output = 0x08, prefix_lse = 0x10, suffix_output = 0x18,
                          suffix_lse = 0x20, output_lse = 0x28, rows = 0x30, reserved = 0x34, size = 0x38;
}
inline constexpr KernargField kMergeArgs[] = {
    {"output", true, "uint16_t*", merge_args::output, 8},
    {"prefix_output", true, "const uint16_t*", merge_args::prefix_output, 8},
    {"prefix_lse", true, "const float*", merge_args::prefix_lse, 8},
    {"suffix_output", true, "const uint16_t*", merge_args::suffix_output, 8},
    {"suffix_lse", true, "const float*", merge_args::suffix_lse, 8},
    {"output_lse", true, "float*", merge_args::output_lse, 8},
    {"rows", false, "uint32_t", merge_args::rows, 4},
    {"reserved", false, "uint32_t", merge_args::reserved, 4},
};

// The DSA indexer's logits (dsa_indexer_logits_*, docs/sparse.md "The indexer"): DeepGEMM's
// fp8_paged_mqa_logits. Grid (ceil(max_context_len / chunk_tokens), batch): workgroup (c, b)
// scores tokens [c * chunk_tokens, (c + 1) * chunk_tokens) of request b for its next_n rows.
namespace indexer_args {
inline constexpr uint32_t logits = 0x00, q = 0x08, kv_cache = 0x10, weights = 0x18, context_lens = 0x20,
                          block_table = 0x28, block_table_stride = 0x30, logits_stride = 0x34, chunk_tokens = 0x38,
                          max_context_len = 0x3c, num_blocks = 0x40, reserved = 0x44, size = 0x48;
}
inline constexpr KernargField kIndexerArgs[] = {
    {"logits", true, "float*", indexer_args::logits, 8},
    {"q", true, "const uint8_t*", indexer_args::q, 8},
    {"kv_cache", true, "const uint8_t*", indexer_args::kv_cache, 8},
    {"weights", true, "const float*", indexer_args::weights, 8},
    {"context_lens", true, "const int32_t*", indexer_args::context_lens, 8},
    {"block_table", true, "const int32_t*", indexer_args::block_table, 8},
    {"block_table_stride", false, "uint32_t", indexer_args::block_table_stride, 4},
    {"logits_stride", false, "uint32_t", indexer_args::logits_stride, 4},
    {"chunk_tokens", false, "uint32_t", indexer_args::chunk_tokens, 4},
    {"max_context_len", false, "uint32_t", indexer_args::max_context_len, 4},
    {"num_blocks", false, "uint32_t", indexer_args::num_blocks, 4},
    {"reserved", false, "uint32_t", indexer_args::reserved, 4},
};
// The DSA indexer's top-k (dsa_topk_per_row_decode, docs/sparse.md "The indexer"): vLLM's
// top_k_per_row_decode. Grid (segments, rows): row r = b * next_n + i has length
// seq_lens[b] - next_n + i + 1; row_div_magic = ceil(2^32 / next_n) (0 for next_n 1) gives b.
// stage 0: one workgroup per row selects over its logits. stage 1: workgroup (s, r) selects the
// top-k of positions [s * segment_tokens, (s + 1) * segment_tokens) into cand_pos / cand_vals
// (row r * segments + s, topk entries: positions, or -1 and the lowest key); stage 2: one
// workgroup per row selects over its segments x topk candidates. With a block_table the rows hold
// cache slots, block_table[b][t >> page_size_log2] << page_size_log2 | (t & (page - 1)), the form
// sparse MLA reads; without (0), positions t.
namespace topk_args {
inline constexpr uint32_t logits = 0x00, seq_lens = 0x08, indices = 0x10, block_table = 0x18, cand_vals = 0x20,
                          cand_pos = 0x28, next_n = 0x30, row_div_magic = 0x34, logits_stride = 0x38,
                          indices_stride = 0x3c, topk = 0x40, block_table_stride = 0x44, page_size_log2 = 0x48,
                          segment_tokens = 0x4c, segments = 0x50, stage = 0x54, size = 0x58;
}
inline constexpr KernargField kTopkArgs[] = {
    {"logits", true, "const float*", topk_args::logits, 8},
    {"seq_lens", true, "const int32_t*", topk_args::seq_lens, 8},
    {"indices", true, "int32_t*", topk_args::indices, 8},
    {"block_table", true, "const int32_t*", topk_args::block_table, 8},
    {"cand_vals", true, "float*", topk_args::cand_vals, 8},
    {"cand_pos", true, "int32_t*", topk_args::cand_pos, 8},
    {"next_n", false, "uint32_t", topk_args::next_n, 4},
    {"row_div_magic", false, "uint32_t", topk_args::row_div_magic, 4},
    {"logits_stride", false, "uint32_t", topk_args::logits_stride, 4},
    {"indices_stride", false, "uint32_t", topk_args::indices_stride, 4},
    {"topk", false, "uint32_t", topk_args::topk, 4},
    {"block_table_stride", false, "uint32_t", topk_args::block_table_stride, 4},
    {"page_size_log2", false, "uint32_t", topk_args::page_size_log2, 4},
    {"segment_tokens", false, "uint32_t", topk_args::segment_tokens, 4},
    {"segments", false, "uint32_t", topk_args::segments, 4},
    {"stage", false, "uint32_t", topk_args::stage, 4},
};
// DeepGEMM's indexer cache: a block of block_size tokens holds block_size x 128 fp8 values, then
// block_size f32 scales (not a scale after each token).
inline constexpr int kIndexerDim = 128, kIndexerTokenBytes = 132;
// Tokens a workgroup scores per loop iteration (one 32-column MFMA tile); chunk_tokens is a
// multiple of it.
inline constexpr int kIndexerTileTokens = 32;
// The top-k kernel reads a row (or segment) of at most this many logits once and keeps it in
// registers through its passes; a longer one it reads five times (runtime/dsa_indexer.h's split).
inline constexpr int kTopkResidentLogits = 16384;

// Each table is dense, in offset order, and ends at its size.
template <size_t N>
constexpr bool dense(const KernargField (&t)[N], uint32_t size) {
  uint32_t at = 0;
  for (const KernargField& f : t) {
    if (f.offset != at) return false;
    at += f.size;
  }
  return at == size;
}
static_assert(dense(kDecodeArgs, decode_args::size), "decode kernargs are dense");
static_assert(dense(kReduceArgs, reduce_args::size), "reduce kernargs are dense");
static_assert(dense(kMergeArgs, merge_args::size), "merge kernargs are dense");
static_assert(dense(kIndexerArgs, indexer_args::size), "indexer kernargs are dense");
static_assert(dense(kTopkArgs, topk_args::size), "top-k kernargs are dense");

}  // namespace mla::abi
