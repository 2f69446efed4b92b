#include "kernels/mla_geometry.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace mla::gen {

nlohmann::json MlaGeometry::to_json() const {
  return {{"rows", rows},
          {"prefix", prefix},
          {"partial_o_bytes", partial_o_bytes},
          {"row_blocks", row_blocks},
          {"kv_splits", kv_splits},
          {"consumers", consumers},
          {"rows_per_group", rows_per_group},
          {"row_groups", row_groups},
          {"tile_tokens", tile_tokens},
          {"slot_tokens", slot_tokens},
          {"ring", ring},
          {"stage_slots", stage_slots},
          {"kv_to_lds", lds_dma ? "lds_dma" : "registers"},
          {"producers", producers},
          {"q_in_lds", q_in_lds},
          {"kv_row_bytes", kv_row_bytes},
          {"kv_mem_row_bytes", kv_mem_row_bytes},
          {"lds_row_pad", lds_row_pad},
          {"q_row_pad", q_row_pad},
          {"q_split", q_split},
          {"q_lds_row", q_lds_row},
          {"v_read_columns", v_read_columns},
          {"lds_row_bytes", lds_row_bytes},
          {"slot_bytes", slot_bytes},
          {"lds_bytes", lds_bytes},
          {"unit_sync_offset", unit_sync_offset},
          {"split_pv", split_pv},
          {"blocks_per_wave", blocks_per_wave},
          {"consumer_dma", consumer_dma},
          {"q_swizzle", q_swizzle},
          {"qk_mfma", qk_mfma},
          {"qk_blocks", int(qk_blocks.size())},
          {"pv_mfma", pv_mfma},
          {"p_bytes", p_bytes},
          {"workgroup_size", workgroup_size},
          {"v_operand", v_lds_transpose ? "lds_transpose" : "v_perm"},
          {"page_ids", page_id_per_tile ? "one per tile (scalar)" : "one per token"}};
}


namespace {

// At most 3 consumer waves: with the producer, one wave per SIMD, which launches whatever the
// register count (a wave of more than 256 unified VGPRs cannot share a SIMD). Beyond 3 blocks,
// the fewest row groups (each re-reads the KV), then the fewest padded blocks.
//
// A prefix kernel's rows are a whole prefix group's (known only at run time, usually many
// blocks): 3 row blocks, so that the prefix is read once per 48 rows; 6 (96 rows) where the
// producer streams with LDS DMA (prefix_dma_candidate) and Q is fp8: its 36 AGPRs of Q keep a
// consumer within 256 unified registers, so 6 consumers and the producer share the 4 SIMDs two
// by two (the catalog build checks the occupancy), and the DMA ring keeps the bytes in flight
// that two 3-block workgroups per CU had. 96 rows divide K3's 192 (c16) and 288 (c24).
constexpr int kPrefixDmaRowBlocks = 6;

// Pages the LDS-DMA producer streams: a tile in one page, or pages under 16 KiB (a strided buffer
// of pages: the V# stride field has 14 bits).
bool dma_pages(const KernelSpec& s, const MlaGeometry& g) {
  return s.page_size >= g.tile_tokens || s.page_size * kMlaDim * g.kv_bytes < (1 << 14);
}

// Prefix kernels on targets with 16-byte LDS DMA whose pages the DMA producer streams
// (lds_dma_ring decides; a mismatch is a logic error below).
bool prefix_dma_candidate(const MlaGeometry& g, const KernelSpec& s, const Target& t) {
  return g.prefix && t.has_lds_dma_b128 && dma_pages(s, g) && !g.q_split;
}

void row_blocks(MlaGeometry& g, const KernelSpec& s, const Target& t) {
  g.rows = s.heads * s.qseqlen;
  g.prefix = s.kind == KernelKind::MlaPrefix;
  const int blocks = (g.rows + kRowsPerWave - 1) / kRowsPerWave;
  g.row_blocks = g.prefix ? (prefix_dma_candidate(g, s, t) && s.q_dtype == DType::fp8 ? kPrefixDmaRowBlocks : 3)
                          : std::min(3, blocks);
  if (blocks > 3 && !g.prefix) {
    auto cost = [&](int r) { return std::pair{(blocks + r - 1) / r, r * ((blocks + r - 1) / r) - blocks}; };
    g.row_blocks = cost(2) < cost(3) ? 2 : 3;
  }
  g.rows_per_group = kRowsPerWave * g.row_blocks;
  g.row_groups = (g.rows + g.rows_per_group - 1) / g.rows_per_group;
}

// The MFMAs of QK^T and PV, the QK blocks over k = 0..575, and how V^T is read.
void mfmas(MlaGeometry& g, const KernelSpec& s, const Target& t) {
  // The bf16 16x16 MFMA with the largest K the target offers.
  auto bf16_mfma = [&]() -> std::pair<std::string, int> {
    if (t.find_mfma("v_mfma_f32_16x16x32_bf16")) return {"v_mfma_f32_16x16x32_bf16", 32};
    return {"v_mfma_f32_16x16x16_bf16", 16};
  };
  // QK^T: fp8 x fp8 when both are fp8 (gfx950: K=128 f8f6f4 over the latent 512, at twice
  // the rate of K=32, and K=32 over the rope 64); otherwise bf16 (fp8 K widened exactly).
  if (s.q_dtype == DType::fp8 || g.q_split) {
    g.qk_mfma = "v_mfma_f32_16x16x32_fp8_fp8", g.qk_k = 32;
    if (t.find_mfma("v_mfma_f32_16x16x128_f8f6f4")) g.qk_mfma = "v_mfma_f32_16x16x128_f8f6f4", g.qk_k = 128;
  } else {
    std::tie(g.qk_mfma, g.qk_k) = bf16_mfma();
  }
  for (int k0 = 0; k0 < kMlaDim;) {
    QkBlock blk{g.qk_mfma, k0, g.qk_k};
    if (k0 + g.qk_k > kMlaDim) blk = {"v_mfma_f32_16x16x32_fp8_fp8", k0, 32};  // fp8 only: 576 = 4*128 + 2*32
    blk.lane_k0 = k0;
    blk.lane_stride = std::min(blk.k / 4, 16);
    g.qk_blocks.push_back(blk);
    k0 += blk.k;
  }
  // PV: fp8 P for fp8 q with an fp8 cache (as aiter does); bf16 P whenever q is bf16, with an
  // fp8 V widened exactly to bf16 in registers, because rounding P to fp8 alone costs the
  // bf16 path its accuracy (d ~ 2e-5 instead of ~1e-6).
  if (s.q_dtype == DType::fp8 && s.kv_dtype == DType::fp8) {
    g.pv_mfma = "v_mfma_f32_16x16x32_fp8_fp8", g.pv_k = 32, g.p_bytes = 1;
  } else {
    std::tie(g.pv_mfma, g.pv_k) = bf16_mfma();
    g.p_bytes = 2;
  }
  g.tile_tokens = g.pv_k;
  // V^T: gfx950's transposing LDS reads (32-token PV tiles); otherwise 8 columns per token per
  // LDS read (8 bytes of fp8 or 16 of bf16: one row's 128 contiguous bytes per lane group, so
  // conflict-free in any token order), transposed in registers.
  g.v_lds_transpose = t.has_lds_transpose && g.pv_k == 32;
  g.v_read_columns = g.v_lds_transpose ? 0 : 8;
}

// Pair consecutive blocks whose two operands fit one LDS read per lane (see QkBlock), then pad
// the token and Q rows by the widest read. A paired K read of 16 bytes (8 lanes per 128-byte
// group) is conflict-free when each 8-lane group reads 8 consecutive tokens: so are the token
// orders of the transposing-V and the 8-column V reads; 4-column V reads would want tokens 8
// apart in a group (K <= 8 bytes).
void pair_blocks_and_pad(MlaGeometry& g, const KernelSpec& s) {
  const int q_op_bytes = g.q_split ? 1 : g.q_bytes;  // bytes of one Q operand element
  const int elem_bytes = std::max(g.kv_bytes, q_op_bytes);
  const bool tr_order = g.v_lds_transpose || g.v_read_columns == 8;
  for (size_t i = 0; i + 1 < g.qk_blocks.size(); ++i) {
    QkBlock &a = g.qk_blocks[i], &b = g.qk_blocks[i + 1];
    const int e = a.k / 4;
    if (a.pair_second || b.k != a.k || e > 16 || 2 * e * elem_bytes > 16) continue;
    if (2 * e * g.kv_bytes > 8 && !tr_order) continue;
    a.pair_first = b.pair_second = true;
    a.lane_stride = b.lane_stride = 2 * e;
    b.lane_k0 = a.k0 + e;
    ++i;
  }
  // Token rows (Q rows) are padded by 16 bytes when some K (Q) read takes 16 bytes per lane.
  int k_read_bytes = 0, q_read_bytes = 0;
  for (const QkBlock& blk : g.qk_blocks) {
    const int elems = std::min(blk.k / 4, 16) * (blk.pair_first ? 2 : 1);
    k_read_bytes = std::max(k_read_bytes, elems * g.kv_bytes);
    q_read_bytes = std::max(q_read_bytes, elems * q_op_bytes);
  }
  g.lds_row_pad = k_read_bytes >= 16 ? 16 : 8;
  g.q_row_pad = q_read_bytes >= 16 ? 16 : 8;
  // A Q row's LDS stride. Split: the hi and lo images of a row side by side, lo at 600 bytes,
  // stride 1200 (150 and 300 dwords, 22 and 12 banks modulo 32): the 16-byte reads of 8
  // consecutive rows cover all 32 banks in either image. The row's bf16 copy (1152 bytes) is
  // staged in the same place first, and its inverse scale sits in the last dword.
  if (g.q_split) {
    if (g.q_row_pad != 16) throw std::logic_error(fmt::format("{}: the Q split expects 16-byte Q reads", s.name()));
    g.q_lo_offset = 600;
    g.q_lds_row = 2 * g.q_lo_offset;
  } else {
    g.q_lds_row = kMlaDim * g.q_bytes + g.q_row_pad;
  }
  g.kv_row_bytes = kMlaDim * g.kv_bytes;
  g.kv_mem_row_bytes = s.kv_ds_mla ? kDsMlaRowBytes : g.kv_row_bytes;
  g.lds_row_bytes = g.kv_row_bytes + g.lds_row_pad;
}

// Split each slot's tokens over S consumer waves per row block (S in 4, 2, 1), so that a
// tile's MFMA and VALU work spreads over the SIMDs. The first layout that fits wins, in the
// order: more splits; a two-slot ring (the producer fills one slot while the consumers read
// the other) before a one-slot ring (two barriers per slot, the consumers wait while the
// producer writes); Q in AGPRs before Q in LDS (read again every tile). Constraints:
//  - at most 3 consumer waves, so that with the producer each wave has its own SIMD whatever
//    its register count; 4 (one row block) only with Q in LDS, which frees the 36-72 AGPRs
//    of Q so that two waves can share a SIMD (the catalog build checks the count);
//  - ring (+ Q) within the target's LDS, the producer's staging registers for one slot
//    (S*T*E / 256 dwords per lane) within 144 VGPRs;
//  - splits sharing Q in AGPRs copy it through LDS slot 1: a two-slot ring, Q within a slot;
//  - the merge of the splits (16 x 512 f32 + m, l per split, in rounds) within the LDS.
bool splits_and_ring(MlaGeometry& g, const Target& t) {
  const int q_share = kRowsPerWave * g.q_lds_row;
  const int tile_bytes = g.tile_tokens * g.lds_row_bytes;
  g.merge_bytes = kRowsPerWave * kMlaVDim * 4 + 2 * 64 * 4;
  for (int sp : {4, 2, 1})
    for (int ring : {2, 1})
      for (bool qlds : {false, true}) {
        if (g.q_split && !qlds) continue;  // the split happens in the LDS image
        const int consumers = g.row_blocks * sp;
        const bool dma_rows = g.row_blocks == kPrefixDmaRowBlocks && g.prefix;  // one consumer per row block
        if (dma_rows ? sp > 1 || qlds : consumers > (qlds && g.row_blocks == 1 ? 4 : 3)) continue;
        if (ring == 1 && sp > 1 && !qlds) continue;
        const int ring_bytes = ring * sp * tile_bytes;
        const int q_region = qlds ? g.row_blocks * q_share : 0;
        if (uint32_t(ring_bytes + q_region) > t.lds_bytes) continue;
        if (sp > 1 && sp * g.tile_tokens * g.kv_row_bytes > 144 * 256) continue;
        if (sp > 1 && !qlds && g.row_blocks * q_share > sp * tile_bytes) continue;
        if (sp > 1 && ring_bytes + q_region < g.merge_bytes) continue;
        g.kv_splits = sp, g.ring = ring, g.q_in_lds = qlds, g.q_region_bytes = q_region;
        return true;
      }
  return false;
}

// Prefix kernels stream KV with 16-byte LDS DMA where the target has it (gfx950) and the producer's
// case holds: one consumer per row block (no split merge, no Q through a ring slot), Q in AGPRs,
// 16-byte-aligned LDS rows, and a tile in one page (its rows contiguous in memory: one buffer
// resource per tile) or pages under 16 KiB (a strided buffer of pages, each lane's page id from
// the tile's vector of them: fp8 up to 16 tokens, bf16 up to 8). The ring then has kDmaRing
// slots, kDmaRing - 1 of them in flight, when they fit the LDS (fp8: 4 x 19 KiB, two workgroups
// per CU on gfx950). A tile's LDS image is 16-byte chunks, 64 per load: the last load's lanes
// past the image write into a guard after the slot (no lane ever writes bytes another load of
// the tile writes).
// With 6 row blocks one workgroup fills a CU: two producer waves (the 8th wave slot) stream
// alternate slots of an 8-slot ring (152 KiB; each producer's vmcnt holds up to 62 loads, 3.3
// of its slots, so up to 6.5 slots are in flight), as many bytes in flight per CU as
// two 3-block workgroups with one producer and 4 slots each.
// Decode kernels keep the register producer, so their code objects stay as they are.
constexpr int kDmaRing = 4, kDmaRingTwoProducers = 8;
void lds_dma_ring(MlaGeometry& g, const KernelSpec& s, const Target& t) {
  if (!g.prefix || !t.has_lds_dma_b128 || !dma_pages(s, g) || g.kv_splits != 1 || g.q_in_lds || g.q_split ||
      g.lds_row_bytes % 16 != 0)
    return;
  const int chunks = g.slot_tokens * g.lds_row_bytes / 16;
  const int slot = 16 * 64 * ((chunks + 63) / 64);
  const int producers = g.row_blocks == kPrefixDmaRowBlocks ? 2 : 1;
  const int ring = producers == 2 ? kDmaRingTwoProducers : kDmaRing;
  const int bytes = ring * slot + g.q_region_bytes;
  if (uint32_t(bytes) > t.lds_bytes) return;
  g.lds_dma = true;
  g.ring = ring;
  g.producers = producers;
  g.stage_slots = 0;
  g.slot_bytes = slot;
  g.lds_bytes = bytes;
  g.workgroup_size = 64 * (g.producers + g.consumers);
  // Split PV runs on the speculative softmax (MlaDecodePlan::speculative_softmax): fp8 P, no soft cap.
  if (producers == 2 && g.row_blocks == 6 && !s.logit_cap && g.p_bytes == 1 &&
      uint32_t(bytes + kPShareBytes) <= t.lds_bytes) {
    g.split_pv = true;
    g.p_share_offset = bytes;
    g.lds_bytes = bytes + kPShareBytes;
  }
}

// The wide prefix kernel (mla_prefix_wide.cpp): 192 rows per workgroup, so that a K3 c16 group's
// prefix is read once (issue #13). Where: gfx950 (16-byte LDS DMA, transposing LDS reads), fp8 Q
// and KV (Q of 192 rows fits the LDS only as fp8), no soft cap, pages of at least a 16-token
// sub-slot (one page per sub-slot: one buffer resource each). Per CU (one workgroup):
//  - registers: O^T of 48 rows per wave = 384 of the 512 a wave may hold (4 waves, one per SIMD);
//  - LDS: a ring of 5 sub-slots of 16 token rows (592-byte rows, conflict-free K reads; 10 DMA
//    loads of 64 x 16 bytes each, the last 768 bytes a guard no wave reads) = 51,200 bytes, then
//    Q of 192 rows x 576 bytes = 110,592 bytes: 161,792 of 163,840. Two sub-slots are one tile;
//    three stay in flight while a tile is computed.
constexpr int kWideRowBlocks = kWidePrefixRows / kRowsPerWave, kWideBlocksPerWave = 3, kWideRing = 5, kWideSubSlotTokens = 16;
constexpr int kWideDmaLoadsPerSubSlot = 10;
bool wide_shape(const KernelSpec& s, const Target& t) {
  return s.kind == KernelKind::MlaPrefix && t.has_lds_dma_b128 && t.has_lds_transpose && s.q_dtype == DType::fp8 &&
         s.kv_dtype == DType::fp8 && !s.logit_cap && s.page_size >= kWideSubSlotTokens;
}
bool wide_prefix(MlaGeometry& g, const KernelSpec& s, const Target& t) {
  if (s.prefix_rows != kWidePrefixRows) return false;
  if (!wide_shape(s, t) || g.q_split || g.tile_tokens != 2 * kWideSubSlotTokens || g.lds_row_bytes % 16)
    throw std::invalid_argument(fmt::format("{} ({}): the wide prefix kernel (192 rows) needs gfx950, fp8 Q and KV, no "
                                            "soft cap and pages of at least {} tokens",
                                            s.name(), t.name, kWideSubSlotTokens));
  const int slot = 16 * 64 * kWideDmaLoadsPerSubSlot;
  const int q_region = kWideRowBlocks * kRowsPerWave * kMlaDim;
  if (slot < kWideSubSlotTokens * g.lds_row_bytes || uint32_t(kWideRing * slot + q_region) > t.lds_bytes)
    throw std::logic_error(fmt::format("{}: the wide prefix kernel's ring and Q do not fit {} bytes of LDS", s.name(),
                                       t.lds_bytes));
  g.row_blocks = kWideRowBlocks;
  g.blocks_per_wave = kWideBlocksPerWave;
  g.consumers = kWideRowBlocks / kWideBlocksPerWave;
  g.rows_per_group = kRowsPerWave * g.row_blocks;
  g.row_groups = (g.rows + g.rows_per_group - 1) / g.rows_per_group;
  g.kv_splits = 1;
  g.merge_bytes = 0;
  g.slot_tokens = kWideSubSlotTokens;
  g.ring = kWideRing;
  g.slot_bytes = slot;
  g.q_in_lds = true;
  g.q_swizzle = true;
  g.q_row_pad = 0;
  g.q_lds_row = kMlaDim;
  g.q_region_bytes = q_region;
  g.lds_bytes = kWideRing * slot + q_region;
  g.lds_dma = true;
  g.consumer_dma = true;
  g.producers = 0;
  g.stage_slots = 0;
  g.workgroup_size = 64 * g.consumers;
  g.page_id_per_tile = true;
  return true;
}

// The geometry with or without the Q split; nullopt when no LDS layout fits.
std::optional<MlaGeometry> geometry_for(const KernelSpec& s, bool q_split) {
  const Target& t = target(s.arch);
  MlaGeometry g;
  g.q_split = q_split;
  g.q_bytes = s.q_dtype == DType::fp8 ? 1 : 2;
  g.kv_bytes = s.kv_dtype == DType::fp8 ? 1 : 2;
  g.prefix = s.kind == KernelKind::MlaPrefix;
  // bf16 partial o (f32 lse) for the prefix kernel and for sparse decode: a sparse split at small
  // batches holds one or two tiles, so its f32 partial (16 rows x 2 KB) would outweigh its KV
  // (32 x 656 B a tile). The reduce and the in-launch merge read either (docs/sparse.md).
  g.partial_o_bytes = g.prefix || s.sparse ? 2 : 4;
  mfmas(g, s, t);
  row_blocks(g, s, t);
  pair_blocks_and_pad(g, s);
  if (wide_prefix(g, s, t)) return g;
  if (!splits_and_ring(g, t)) return std::nullopt;
  if (g.kv_splits == 1) g.merge_bytes = 0;
  g.consumers = g.row_blocks * g.kv_splits;
  g.slot_tokens = g.kv_splits * g.tile_tokens;
  g.slot_bytes = g.slot_tokens * g.lds_row_bytes;
  g.lds_bytes = g.ring * g.slot_bytes + g.q_region_bytes;
  // Two slots staged in the producer's registers when they fit the same 144-VGPR budget: twice
  // the bytes in flight (Little's law asks ~34 KiB per CU on MI300X, ~61 KiB on MI355X).
  // fp8_ds_mla stages its 656-byte entries raw (the bf16 rows are made at the LDS write): 82
  // VGPRs a set at 32 tokens, two sets within the 234 the bf16 consumers take anyway.
  g.stage_slots = 2 * g.slot_tokens * g.kv_mem_row_bytes <= (s.kv_ds_mla ? 176 : 144) * 256 ? 2 : 1;
  g.workgroup_size = 64 * (1 + g.consumers);
  g.page_id_per_tile = s.page_size >= g.tile_tokens;
  lds_dma_ring(g, s, t);
  if (g.row_blocks == kPrefixDmaRowBlocks && g.prefix && !g.lds_dma)
    throw std::logic_error(fmt::format("{}: 6 prefix row blocks need the LDS-DMA producer", s.name()));
  if (uint32_t(g.lds_bytes) > t.lds_bytes)
    throw std::invalid_argument(fmt::format("{} ({}): LDS ring of {} bytes exceeds the target's {}", s.name(),
                                            t.name, g.lds_bytes, t.lds_bytes));
  return g;
}

}  // namespace

bool wide_prefix_fits(const KernelSpec& s) { return wide_shape(s, target(s.arch)); }

namespace {
// Places the persistent walk's per-wave arrival dwords after the layout.
MlaGeometry with_unit_sync(MlaGeometry g, const KernelSpec& s, const Target& t) {
  g.unit_sync_offset = (g.lds_bytes + 15) & ~15;
  if (uint32_t(g.lds_alloc_bytes()) > t.lds_bytes)
    throw std::invalid_argument(fmt::format("{} ({}): LDS layout of {} bytes and {} arrival dwords exceed the target's {}",
                                            s.name(), t.name, g.lds_bytes, g.waves(), t.lds_bytes));
  return g;
}
}  // namespace

MlaGeometry mla_geometry(const KernelSpec& s) {
  if (s.prefix_rows != 0 && (s.kind != KernelKind::MlaPrefix || s.prefix_rows != kWidePrefixRows))
    throw std::invalid_argument(fmt::format("{}: prefix_rows = {} (allowed: 0, or {} for a prefix kernel)", s.name(),
                                            s.prefix_rows, kWidePrefixRows));
  const Target& t = target(s.arch);
  // bf16 q with an fp8 cache on a target that widens fp8 to bf16 at one VALU per value
  // (gfx942): split Q once per unit into fp8 hi + lo parts and run QK on fp8 MFMAs, K straight
  // from LDS. Exact: a bf16 significand has 8 bits, hi = fp8(q s) takes the top 4 (rounded) and
  // the remainder q s - hi fits the 4 bits of lo; s is a power of two per row putting the row's
  // largest |q| in [64, 128) (see mla_decode.cpp, split_q). The split needs Q in LDS; where that
  // does not fit (3 row blocks on gfx942), Q stays bf16 and K is widened.
  if (s.q_dtype == DType::bf16 && s.kv_dtype == DType::fp8 && !t.has_cvt_pk_bf16_fp8)
    if (auto g = geometry_for(s, true)) return with_unit_sync(*g, s, t);
  if (auto g = geometry_for(s, false)) return with_unit_sync(*g, s, t);
  throw std::invalid_argument(
      fmt::format("{} ({}): no LDS layout fits the target's {} bytes", s.name(), t.name, t.lds_bytes));
}

}  // namespace mla::gen
