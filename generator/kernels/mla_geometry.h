// The geometry of an MLA decode kernel: how a KernelSpec maps onto waves, tiles, LDS and
// MFMA shapes. The builder, the catalog (which records it for the runtime) and the planner
// all read this one description.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "spec/kernel_spec.h"

namespace mla::gen {

inline constexpr int kMlaDim = abi::kQkDim;   // latent 512 + rope 64
inline constexpr int kMlaVDim = abi::kVDim;   // o covers the latent part
using abi::kDsMlaRowBytes, abi::kDsMlaScaleOffset, abi::kDsMlaRopeOffset, abi::kDsMlaTile;
inline constexpr int kRowsPerWave = 16; // one 16-row MFMA block per consumer wave
inline constexpr int kPShareLaneBytes = 48;  // split PV: 6 row blocks x 8 bytes per lane
inline constexpr int kPShareBytes = 2 * 64 * kPShareLaneBytes;  // P^T operands, then rescale factors
// LDS rows are padded against bank conflicts (32 banks of 4 bytes): unpadded, 576- and 1152-byte
// rows are 16 and 0 banks apart, so the 16 rows a 16-lane group reads at one offset share 2 (or
// 1) banks. Rows read 8 bytes per lane: +8 bytes (18 / 2 banks apart: 16 lanes x 2 banks cover
// all 32). Rows read 16 bytes per lane (K=128 f8f6f4, bf16 K=32, paired blocks): +16 bytes (20 /
// 4 banks apart: 8 lanes x 4 banks cover all 32). Token rows by the widest K read
// (MlaGeometry::lds_row_pad), Q rows by the widest Q read (MlaGeometry::q_row_pad).

// One MFMA of S^T = K Q^T over k = k0..k0+k-1 of the 576 (16 tokens x 16 rows).
//
// Which k indices a lane feeds is ours to choose, as long as K and Q agree (the dot product
// does not care about the order of k). A 16x16 operand gives lane group g = lane / 16 its
// k/4 = e hardware elements; for e <= 16 the lane feeds k indices lane_k0 + g * lane_stride +
// p, p < e. Alone, a block uses lane_k0 = k0 and lane_stride = e. Two consecutive blocks of
// the same k are *paired* when one LDS read of 2e elements per lane holds both blocks'
// operands (2e x the wider of the K and Q element sizes <= 16 bytes): lane group g then feeds
// 2e contiguous indices k0 + 2e g .. +2e-1 of the pair, the first e to the first block
// (lane_k0 = k0) and the next e to the second (lane_k0 = k0 + e), lane_stride = 2e. The pair
// still covers its 8e indices once each; it halves the K and Q LDS reads of those blocks.
struct QkBlock {
  std::string mfma;
  int k0 = 0, k = 0;
  int lane_k0 = 0, lane_stride = 0;
  bool pair_first = false;   // this block and the next are read together
  bool pair_second = false;
};

struct MlaGeometry {
  int rows = 0;            // M = heads * qseqlen rows per request (a partial slot's rows)
  // Prefix kernel (KernelKind::MlaPrefix): a unit's rows are a prefix group's R = count * M
  // rows (a runtime value, PrefixUnit::rows), always the most row blocks a workgroup holds.
  bool prefix = false;
  // Bytes per element of the partial o it writes: 4 (f32) for decode kernels; 2 (bf16) for the
  // prefix kernel, whose partials (every split writes all R rows of a group) are most of its
  // and the reduce's traffic (docs/shared-prefix.md "Partials").
  int partial_o_bytes = 4;
  int row_blocks = 0;      // 16-row blocks per workgroup
  int kv_splits = 1;       // S: consumer waves per row block, each on its own T tokens of a slot
  int consumers = 0;       // consumer waves per workgroup = row_blocks * kv_splits
  int rows_per_group = 0;  // 16 * row_blocks
  int row_groups = 0;      // workgroups per (request, kv range)
  int tile_tokens = 0;     // T: tokens per consumer tile = k of the PV MFMA (the planner's cut unit)
  int slot_tokens = 0;     // S * T: tokens per ring slot (one barrier each)
  int ring = 2;            // LDS slots in the ring (1: two barriers per slot)
  bool q_in_lds = false;   // Q operands read from LDS every tile instead of held in AGPRs
  int q_region_bytes = 0;  // LDS after the ring holding the row blocks' Q (q_in_lds)
  // bf16 q split into fp8 hi and lo images in LDS (see mla_geometry): QK on fp8 MFMAs, two per
  // block, and no widening of K.
  bool q_split = false;
  int q_lds_row = 0;       // LDS stride of a Q row (q_in_lds or the copy through a slot)
  int q_lo_offset = 0;     // split: byte offset of the lo image within a row
  int stage_slots = 1;     // D: slots the producer keeps in flight in registers (1 or 2; 0 with LDS DMA)
  // The producer streams KV straight into the ring with 16-byte LDS DMA (buffer_load_dwordx4
  // ... lds) instead of staging it in registers: ring - 1 slots in flight, one tag per slot
  // (mla_decode_producer_dma.cpp).
  bool lds_dma = false;
  // Producer waves: 1, or 2 with LDS DMA where one workgroup fills a CU (6 row blocks): they
  // stream alternate slots, each keeping up to 62 loads in flight (vmcnt's limit). The second
  // producer is the last wave, so the consumers stay waves 1..consumers.
  int producers = 1;
  // Split PV (6 row blocks with two producers): consumer c runs QK and the softmax of row block c,
  // publishes its P^T operand and rescale factor in LDS (p_share_offset: 64 lanes x 48 bytes of
  // P, then 64 x 48 of factors, 8 bytes per row block each), and after a barrier runs PV for the
  // 256 columns 256 (c % 2) .. +255 of row blocks c and c ^ 1: each wave reads half of V
  // (docs/shared-prefix.md "Split PV").
  bool split_pv = false;
  int p_share_offset = 0;
  // The wide prefix kernel (docs/shared-prefix.md "192 rows per workgroup"): each consumer wave
  // holds `blocks_per_wave` row blocks (3: O^T of 48 rows in 256 AGPRs + 128 VGPRs, one wave per
  // SIMD), there is no producer wave (producers = 0), and the consumers stream the KV themselves
  // with LDS DMA into a ring of `ring` sub-slots of slot_tokens = 16 tokens (two per tile). Q of
  // all rows lives in LDS, rows of 576 bytes with a chunk swizzle instead of a pad (q_swizzle).
  int blocks_per_wave = 1;
  bool consumer_dma = false;
  bool q_swizzle = false;
  int merge_bytes = 0;     // LDS per split merged at the end (O^T of 16 rows, m, l): S > 1 only
  int q_bytes = 1, kv_bytes = 1;  // element sizes
  int p_bytes = 1;         // P (and V as the PV MFMA reads it): fp8 or bf16
  int kv_row_bytes = 0;    // bytes of one token row as the consumers read it (576 x kv bytes)
  int kv_mem_row_bytes = 0;  // bytes of one token row in memory: kv_row_bytes, or 656 for fp8_ds_mla
  int lds_row_pad = 8;     // 8, or 16 when the K operand reads 16 bytes per lane
  int q_row_pad = 8;       // the same for the Q image's rows, by the Q read width
  int v_read_columns = 0;  // V without transposing reads: columns per token per LDS read (8)
  int lds_row_bytes = 0;   // LDS stride of a token row: kv_row_bytes + lds_row_pad
  // LDS bytes from one ring slot to the next: S * T * lds_row_bytes, plus (LDS DMA) the bytes the
  // last 64-lane load of a tile writes past the tile's rows, which no wave reads.
  int slot_bytes = 0;
  int lds_bytes = 0;       // ring * slot_bytes + q_region_bytes
  // The persistent walk's meeting point (mla_decode.cpp, "Persistent walk"): one dword per wave
  // after the layout above, 16-byte aligned. The workgroup allocates lds_alloc_bytes().
  int unit_sync_offset = 0;
  int waves() const { return workgroup_size / 64; }
  int lds_alloc_bytes() const { return unit_sync_offset + 4 * waves(); }
  std::string qk_mfma, pv_mfma;
  int qk_k = 0, pv_k = 0;  // K of each MFMA (qk: of the first, widest QK block)
  std::vector<QkBlock> qk_blocks;  // covering k = 0..575
  int workgroup_size = 0;  // 64 * (producers + consumers): wave 0 is the (first) producer
  // V^T operands come straight from LDS with ds_read_b64_tr_b8/_b16 (gfx950) instead of
  // row reads transposed with v_perm_b32; the O^T blocks then hold 16 consecutive columns.
  bool v_lds_transpose = false;
  // Pages of at least a tile (page_size >= T): a tile lies in one page, so the producer reads one
  // page id per tile with a scalar load instead of one per token.
  bool page_id_per_tile = false;

  nlohmann::json to_json() const;
};

// Whether the wide prefix kernel (KernelSpec::prefix_rows = 192) exists for the spec's shape:
// gfx950, fp8 Q and KV, no soft cap, pages of at least 16 tokens (docs/shared-prefix.md).
inline constexpr int kWidePrefixRows = 192;
bool wide_prefix_fits(const KernelSpec& spec);

// Throws std::invalid_argument naming the spec if the target cannot hold the kernel.
MlaGeometry mla_geometry(const KernelSpec& spec);

// Kernel argument byte offsets of the decode and reduce kernels (the contract's tables).
namespace mla_decode_args = abi::decode_args;
namespace mla_reduce_args = abi::reduce_args;

}  // namespace mla::gen
