// Occupancy from the target description, and how the decode geometry spends it.
#include <catch2/catch.hpp>

#include "kernels/mla_geometry.h"
#include "decode_spec.h"
#include "target/target.h"

using namespace mla::gen;
using mla::gen::test::decode_spec;


TEST_CASE("occupancy: registers, LDS and wave slots each limit the workgroups a CU holds") {
  const Target& t942 = target(Arch::gfx942);  // 64 KiB LDS
  const Target& t950 = target(Arch::gfx950);  // 160 KiB LDS
  // 256 unified VGPRs: 2 waves per SIMD = 8 wave slots; 3-wave workgroups: 2 fit.
  CHECK(occupancy(t950, 256, 0, 192).workgroups_per_cu == 2);
  CHECK(occupancy(t950, 256, 0, 192).limited_by == "registers");
  // 260 rounds up to 264 > 256: one wave per SIMD, 4 slots: one 3-wave workgroup.
  CHECK(occupancy(t950, 260, 0, 192).workgroups_per_cu == 1);
  // A 5-wave workgroup of > 256-register waves cannot launch at all.
  CHECK(occupancy(t950, 280, 0, 320).workgroups_per_cu == 0);
  // LDS: 73728 bytes, 2 fit in 160 KiB; 36864 bytes, 1 fits in 64 KiB.
  CHECK(occupancy(t950, 128, 73728, 192).workgroups_per_cu == 2);
  CHECK(occupancy(t950, 128, 73728, 192).limited_by == "LDS");
  CHECK(occupancy(t942, 128, 36864, 128).workgroups_per_cu == 1);
  // Wave slots: 8 per SIMD at <= 64 registers: 32 per CU, 16-wave workgroups: 2.
  CHECK(occupancy(t942, 64, 0, 1024).workgroups_per_cu == 2);
  CHECK(occupancy(t942, 64, 0, 1024).limited_by == "registers");
}

TEST_CASE("decode geometry: token splits, ring depth and where Q lives follow from LDS and registers") {
  // Kimi-K3 on gfx950: 12 heads fp8/fp8, one row block, two consumers on alternate 32-token
  // tiles of a two-slot ring, Q in AGPRs, V^T by transposing LDS reads.
  MlaGeometry k3 = mla_geometry(decode_spec(Arch::gfx950, DType::fp8, DType::fp8, 12, 1));
  CHECK(k3.row_blocks == 1);
  CHECK(k3.kv_splits == 2);
  CHECK(k3.ring == 2);
  CHECK_FALSE(k3.q_in_lds);
  CHECK(k3.slot_tokens == 64);
  CHECK(k3.lds_row_pad == 16);  // K=128 reads 16 bytes of K per lane
  CHECK(k3.lds_bytes == 2 * 64 * (576 + 16));
  CHECK(k3.v_lds_transpose);
  CHECK(k3.qk_blocks.size() == 6);  // 4 x K=128 f8f6f4 + 2 x K=32
  // gfx942 fp8/fp8: two-slot rings of two 32-token tiles would need 72 KiB: one slot, Q in LDS.
  MlaGeometry f942 = mla_geometry(decode_spec(Arch::gfx942, DType::fp8, DType::fp8, 16, 1));
  CHECK(f942.kv_splits == 2);
  CHECK(f942.ring == 1);
  CHECK(f942.q_in_lds);
  CHECK(f942.lds_row_pad == 16);  // paired K=32 blocks: 16 bytes of K per lane
  CHECK(f942.q_row_pad == 16);
  CHECK(f942.lds_bytes == 64 * (576 + 16) + 16 * (576 + 16));
  CHECK(f942.v_read_columns == 8);
  CHECK_FALSE(f942.v_lds_transpose);
  CHECK(f942.qk_blocks.size() == 18);
  // gfx942 bf16/fp8 (the seed-001 kernel): 16-token tiles over four consumers, one slot, Q in LDS.
  MlaGeometry b942 = mla_geometry(decode_spec(Arch::gfx942, DType::bf16, DType::fp8, 16, 1));
  CHECK(b942.tile_tokens == 16);
  CHECK(b942.kv_splits == 4);
  CHECK(b942.consumers == 4);
  CHECK(b942.ring == 1);
  CHECK(b942.q_in_lds);
  CHECK(b942.lds_bytes <= 65536);
  // ... with Q split into fp8 hi + lo images (QK on fp8 MFMAs, no widening of K); gfx950 has a
  // one-instruction fp8 -> bf16 conversion and keeps bf16 QK; three row blocks of split Q images
  // do not fit gfx942's LDS next to a slot, so Q stays bf16 there.
  CHECK(b942.q_split);
  CHECK(b942.qk_mfma == "v_mfma_f32_16x16x32_fp8_fp8");
  CHECK(b942.q_lds_row == 1200);
  CHECK(b942.lds_bytes == 64 * (576 + 16) + 16 * 1200);
  CHECK_FALSE(mla_geometry(decode_spec(Arch::gfx950, DType::bf16, DType::fp8, 16, 1)).q_split);
  MlaGeometry b942r3 = mla_geometry(decode_spec(Arch::gfx942, DType::bf16, DType::fp8, 12, 4));
  CHECK(b942r3.row_blocks == 3);
  CHECK_FALSE(b942r3.q_split);
  CHECK(mla_geometry(decode_spec(Arch::gfx942, DType::bf16, DType::fp8, 32, 1)).q_split);  // 2 row blocks
  for (auto [heads, qs] : {std::pair{16, 2}, std::pair{32, 3}, std::pair{64, 4}, std::pair{128, 1}}) {
    MlaGeometry g = mla_geometry(decode_spec(Arch::gfx950, DType::bf16, DType::bf16, heads, qs));
    INFO(heads << " heads, qseqlen " << qs);
    CHECK(g.consumers <= 3);  // several row blocks: Q stays in AGPRs, one wave per SIMD
    CHECK(g.consumers == g.row_blocks * g.kv_splits);
    CHECK(g.row_groups * g.rows_per_group >= g.rows);
    CHECK(g.workgroup_size == 64 * (1 + g.consumers));
  }
  // 128 rows = 8 blocks: 3 groups of 3 blocks (one padded) rather than 4 groups of 2.
  MlaGeometry h128 = mla_geometry(decode_spec(Arch::gfx942, DType::bf16, DType::bf16, 128, 1));
  CHECK(h128.row_blocks == 3);
  CHECK(h128.row_groups == 3);
  // 64 rows = 4 blocks: 2 groups either way, 2 blocks each pads nothing.
  MlaGeometry h64 = mla_geometry(decode_spec(Arch::gfx942, DType::bf16, DType::bf16, 64, 1));
  CHECK(h64.row_blocks == 2);
  CHECK(h64.row_groups == 2);
}

TEST_CASE("decode geometry: paired QK blocks share one LDS read and still cover every k index once") {
  struct Case {
    Arch arch;
    DType q, kv;
    int pairs, k_pad, q_pad;
  };
  // gfx942 bf16/fp8 (Q split into fp8 parts): every two K=32 fp8 blocks, 16-byte K reads and
  // 16-byte reads of each Q image.
  // gfx942 fp8/fp8: every two K=32 blocks, 16-byte reads (8 consecutive tokens per 8-lane
  // group in the 8-column-V token order). gfx950 fp8/fp8: the two K=32 rope blocks pair (16
  // bytes, transposing-V token order). bf16/bf16: 8 bf16 = 16 bytes per block already.
  for (const Case& c : {Case{Arch::gfx942, DType::bf16, DType::fp8, 9, 16, 16}, Case{Arch::gfx942, DType::fp8, DType::fp8, 9, 16, 16},
                        Case{Arch::gfx950, DType::fp8, DType::fp8, 1, 16, 16}, Case{Arch::gfx950, DType::bf16, DType::bf16, 0, 16, 16}}) {
    MlaGeometry g = mla_geometry(decode_spec(c.arch, c.q, c.kv, 16, 1));
    INFO(arch_name(c.arch) << " q " << int(c.q) << " kv " << int(c.kv));
    int pairs = 0;
    std::vector<int> seen(kMlaDim, 0);
    for (size_t i = 0; i < g.qk_blocks.size(); ++i) {
      const QkBlock& b = g.qk_blocks[i];
      const int e = b.k / 4;
      if (b.pair_first) {
        ++pairs;
        REQUIRE(i + 1 < g.qk_blocks.size());
        CHECK(g.qk_blocks[i + 1].pair_second);
        CHECK(g.qk_blocks[i + 1].lane_k0 == b.lane_k0 + e);  // the lane's next e indices
        CHECK(b.lane_stride == 2 * e);
      }
      // Lane group g's hardware elements p map to k = lane_k0 + g * lane_stride + p (e <= 16),
      // or 16-element chunks 64 apart (K = 128): every index of 0..575 exactly once overall.
      for (int grp = 0; grp < 4; ++grp)
        for (int p = 0; p < e; ++p) {
          const int k = e <= 16 ? b.lane_k0 + grp * b.lane_stride + p : b.k0 + 16 * (grp + 4 * (p / 16)) + p % 16;
          REQUIRE(k >= 0);
          REQUIRE(k < kMlaDim);
          ++seen[size_t(k)];
        }
    }
    CHECK(pairs == c.pairs);
    CHECK(std::count(seen.begin(), seen.end(), 1) == kMlaDim);
    CHECK(g.lds_row_pad == c.k_pad);
    CHECK(g.q_row_pad == c.q_pad);
  }
}

// Prefix kernels stream KV with LDS DMA where gfx950 has 16-byte LDS DMA and a tile lies in one
// page or pages hold one token (docs/shared-prefix.md): fp8 Q with 6 row blocks, two producers and an 8-slot ring (one
// workgroup per CU), bf16 Q with 3 row blocks, one producer and 4 slots; elsewhere, and in every
// decode kernel, 3 row blocks at most and the producer stages KV in registers.
TEST_CASE("prefix geometry: LDS DMA, its ring and its producers on gfx950 when a tile lies in one page") {
  auto spec = [](Arch a, DType q, DType kv, int page, KernelKind kind = KernelKind::MlaPrefix) {
    KernelSpec s = decode_spec(a, q, kv, 12);
    s.kind = kind;
    s.page_size = page;
    return s;
  };
  // The default prefix kernel (prefix_rows 0; the wide one is the next test case).
  const MlaGeometry f8 = mla_geometry(spec(Arch::gfx950, DType::fp8, DType::fp8, 128));
  CHECK(f8.lds_dma);
  CHECK_FALSE(f8.consumer_dma);
  CHECK(f8.blocks_per_wave == 1);
  CHECK(f8.row_blocks == 6);
  CHECK(f8.rows_per_group == 96);
  CHECK(f8.consumers == 6);
  CHECK(f8.producers == 2);
  CHECK(f8.workgroup_size == 64 * 8);
  CHECK(f8.ring == 8);
  CHECK(f8.stage_slots == 0);
  // A tile is 32 x 592 bytes = 1184 16-byte chunks, 19 loads of 64: the last one writes 32
  // chunks past the tile, into the slot's guard. 8 slots: 152 KiB of gfx950's 160.
  CHECK(f8.slot_bytes == 19 * 1024);
  // Split PV: the P share region after the ring, 64 lanes x 48 bytes of P^T operands and as
  // many of rescale factors (6 row blocks x 8 bytes each): 158 KiB in all.
  CHECK(f8.split_pv);
  CHECK(f8.p_share_offset == 8 * 19 * 1024);
  CHECK(f8.lds_bytes == 8 * 19 * 1024 + 2 * 64 * 48);
  CHECK(f8.to_json().at("split_pv") == true);
  const MlaGeometry capped = mla_geometry([&] {
    KernelSpec s = spec(Arch::gfx950, DType::fp8, DType::fp8, 128);
    s.logit_cap = true;
    return s;
  }());
  CHECK_FALSE(capped.split_pv);  // the soft cap keeps the plain softmax, and PV whole
  CHECK_FALSE(capped.consumer_dma);  // and the 96-row kernel
  CHECK(f8.to_json().at("kv_to_lds") == "lds_dma");
  CHECK(f8.to_json().at("producers") == 2);
  const MlaGeometry b16 = mla_geometry(spec(Arch::gfx950, DType::bf16, DType::bf16, 64));
  CHECK(b16.lds_dma);
  CHECK(b16.row_blocks == 3);
  CHECK(b16.producers == 1);
  CHECK(b16.ring == 4);
  CHECK(b16.workgroup_size == 64 * 4);
  CHECK(b16.slot_bytes == 37 * 1024);  // 32 x 1168 bytes = 36.5 loads
  CHECK(b16.lds_bytes == 4 * 37 * 1024);
  CHECK_FALSE(b16.split_pv);  // 3 row blocks
  // Page 1: the same layout (guard included), each lane's row index from the tile's row vector.
  const MlaGeometry p1 = mla_geometry(spec(Arch::gfx950, DType::fp8, DType::fp8, 1));
  CHECK(p1.lds_dma);
  CHECK(p1.row_blocks == 6);
  CHECK(p1.producers == 2);
  CHECK(p1.slot_bytes == 19 * 1024);
  // Pages of 2..16 fp8 tokens: a strided buffer of pages (stride = page bytes < 16 KiB).
  CHECK(mla_geometry(spec(Arch::gfx950, DType::fp8, DType::fp8, 16)).lds_dma);
  CHECK(mla_geometry(spec(Arch::gfx950, DType::bf16, DType::bf16, 8)).lds_dma);
  // Pages of 16 KiB or more but shorter than a tile (bf16, 16 tokens: the stride does not fit),
  // gfx942 (4-byte LDS DMA only) and decode kernels: registers.
  for (const KernelSpec& s : {spec(Arch::gfx950, DType::bf16, DType::bf16, 16), spec(Arch::gfx942, DType::fp8, DType::fp8, 128),
                              spec(Arch::gfx950, DType::fp8, DType::fp8, 128, KernelKind::MlaDecode)}) {
    const MlaGeometry g = mla_geometry(s);
    CHECK_FALSE(g.lds_dma);
    CHECK(g.row_blocks <= 3);
    CHECK(g.producers == 1);
    CHECK(g.stage_slots >= 1);
    CHECK(g.workgroup_size == 64 * (1 + g.consumers));
    CHECK(g.to_json().at("kv_to_lds") == "registers");
  }
}

TEST_CASE("prefix geometry: the wide kernel holds 192 rows for fp8 Q and KV on gfx950, pages of 16 tokens or more") {
  auto spec = [](Arch a, DType q, DType kv, int page, bool cap = false) {
    KernelSpec s = decode_spec(a, q, kv, 12);
    s.kind = KernelKind::MlaPrefix;
    s.page_size = page;
    s.logit_cap = cap;
    s.prefix_rows = kWidePrefixRows;
    return s;
  };
  for (int page : {16, 64, 128}) {
    CHECK(wide_prefix_fits(spec(Arch::gfx950, DType::fp8, DType::fp8, page)));
    const MlaGeometry g = mla_geometry(spec(Arch::gfx950, DType::fp8, DType::fp8, page));
    CHECK(g.consumer_dma);
    CHECK(g.blocks_per_wave == 3);
    CHECK(g.row_blocks == 12);
    CHECK(g.rows_per_group == 192);
    CHECK(g.consumers == 4);
    CHECK(g.producers == 0);
    CHECK(g.workgroup_size == 256);
    CHECK(g.tile_tokens == 32);
    CHECK(g.slot_tokens == 16);
    // 5 sub-slots of 10 loads of 64 x 16 bytes (16 rows of 592 bytes and a 768-byte guard), then
    // Q of 192 unpadded (swizzled) rows: 161,792 of gfx950's 163,840 bytes.
    CHECK(g.ring == 5);
    CHECK(g.slot_bytes == 10 * 1024);
    CHECK(g.lds_row_bytes == 592);
    CHECK(g.q_swizzle);
    CHECK(g.q_lds_row == 576);
    CHECK(g.q_region_bytes == 192 * 576);
    CHECK(g.lds_bytes == 5 * 10 * 1024 + 192 * 576);
    CHECK(g.lds_dma);
    CHECK_FALSE(g.split_pv);
    CHECK(g.partial_o_bytes == 2);
    CHECK(g.to_json().at("blocks_per_wave") == 3);
    KernelSpec def = spec(Arch::gfx950, DType::fp8, DType::fp8, page);
    def.prefix_rows = 0;
    CHECK_FALSE(mla_geometry(def).consumer_dma);  // the default prefix kernel stays 96 rows
  }
  CHECK(spec(Arch::gfx950, DType::fp8, DType::fp8, 128).name() == "mla_prefix_fp8fp8_h12_qs1_pg128_r192");
  // No wide kernel for pages under a sub-slot, bf16 Q or KV, a soft cap, gfx942: asking for one is
  // an error naming the kernel and what it needs.
  for (const KernelSpec& s : {spec(Arch::gfx950, DType::fp8, DType::fp8, 8), spec(Arch::gfx950, DType::fp8, DType::fp8, 1),
                              spec(Arch::gfx950, DType::bf16, DType::fp8, 128), spec(Arch::gfx950, DType::bf16, DType::bf16, 128),
                              spec(Arch::gfx950, DType::fp8, DType::fp8, 128, true), spec(Arch::gfx942, DType::fp8, DType::fp8, 128)}) {
    CHECK_FALSE(wide_prefix_fits(s));
    CHECK_THROWS_WITH(mla_geometry(s), Catch::Contains(s.name()) && Catch::Contains("needs gfx950, fp8 Q and KV"));
  }
  KernelSpec dec = decode_spec(Arch::gfx950, DType::fp8, DType::fp8, 12);
  dec.prefix_rows = kWidePrefixRows;
  CHECK_THROWS_WITH(mla_geometry(dec), Catch::Contains("prefix_rows = 192"));
}
