// The decode plan (kernels/mla_decode_plan.h) per shape family, computed without emitting code.
#include <catch2/catch.hpp>

#include <numeric>

#include "kernels/mla_decode_plan.h"
#include "decode_spec.h"
#include "target/target.h"

using namespace mla::gen;
using mla::gen::test::decode_spec;

namespace {


MlaDecodePlan plan_of(const KernelSpec& s) { return mla_decode_plan(s, mla_geometry(s)); }

}  // namespace

TEST_CASE("decode plan: Kimi-K3 on gfx950 (fp8/fp8, 12 heads) transposes V in LDS, Q in AGPRs") {
  auto p = plan_of(decode_spec(Arch::gfx950, DType::fp8, DType::fp8, 12));
  CHECK(p.qk_path == "fp8");
  CHECK(p.v_path == "ds_read_b64_tr_b8");
  CHECK(p.token_order_rotated);  // h = (x + st) % 4: the transposing reads' rows stay conflict-free
  CHECK(p.q_agprs > 0);
  CHECK(p.transpose_batch == 8);
  CHECK(p.transpose_regs == 2);  // 8 tokens x 1 byte per lane
  // Two-slot ring: the slot is released after PV, nothing is read across tiles.
  CHECK_FALSE(p.early_release);
  CHECK_FALSE(p.prefetch);
  CHECK(p.tail_groups == 0);
}

TEST_CASE("decode plan: gfx950 bf16 V uses the 16-bit transposing read, fp8 K is widened for bf16 q") {
  auto bb = plan_of(decode_spec(Arch::gfx950, DType::bf16, DType::bf16, 16));
  CHECK(bb.v_path == "ds_read_b64_tr_b16");
  CHECK(bb.transpose_regs == 4);  // 8 tokens x 2 bytes per lane
  CHECK_FALSE(bb.widen_k);
  auto bf = plan_of(decode_spec(Arch::gfx950, DType::bf16, DType::fp8, 16));
  CHECK(bf.qk_path == "bf16, fp8 K widened");  // gfx950 converts fp8 -> bf16: no Q split
  CHECK(bf.widen_k);
  CHECK(bf.widen_v);
  CHECK(bf.transpose_scratch);
}

TEST_CASE("decode plan: gfx942 bf16/fp8 (seed 001) splits Q, releases the slot early and reads ahead") {
  auto p = plan_of(decode_spec(Arch::gfx942, DType::bf16, DType::fp8, 16));
  CHECK(p.qk_path == "fp8, bf16 Q split hi + lo");
  CHECK(p.q_operand_bytes == 1);
  CHECK(p.q_agprs == 0);               // Q read from LDS every tile
  CHECK(p.batch_operand_limit == 8);   // K + two Q images in 24 VGPRs
  CHECK(p.early_release);              // raw V of the tile (32 VGPRs) fits
  CHECK(p.prewiden);
  CHECK(p.fixed_addresses);
  CHECK(p.prefetch);
  CHECK(p.tail_groups == 2);
  CHECK(p.v_raw_sets == p.v_blocks / 2);
  CHECK_FALSE(p.token_order_rotated);  // 8-column V reads are conflict-free in any order
}

TEST_CASE("decode plan: gfx942 fp8/fp8 keeps one raw V set (64 VGPRs would not fit the early release)") {
  auto p = plan_of(decode_spec(Arch::gfx942, DType::fp8, DType::fp8, 16));
  CHECK(p.v_blocks * p.v_block_regs > 32);
  CHECK_FALSE(p.early_release);
  CHECK_FALSE(p.prefetch);
  CHECK(p.v_raw_sets == 1);
  CHECK(p.v_path == "8-column reads, v_perm byte transpose");
}

TEST_CASE("decode plan: QK batches cover every block once, in order, within the operand limit") {
  for (Arch a : {Arch::gfx942, Arch::gfx950})
    for (auto [q, kv] : {std::pair{DType::fp8, DType::fp8}, {DType::bf16, DType::fp8}, {DType::bf16, DType::bf16}})
      for (int heads : {8, 12, 16, 32, 64, 128}) {
        const KernelSpec s = decode_spec(a, q, kv, heads, heads >= 64 ? 2 : 1);
        const MlaGeometry g = mla_geometry(s);
        const MlaDecodePlan p = mla_decode_plan(s, g);
        INFO(s.name());
        std::vector<int> seen;
        int raw_max = 0;
        for (const QkBatch& bt : p.qk_batches) {
          REQUIRE_FALSE(bt.blocks.empty());
          int raw = 0, op = 0;
          for (size_t c = 0; c < bt.blocks.size(); ++c) {
            const QkBlock& blk = g.qk_blocks[size_t(bt.blocks[c])];
            CHECK(bt.raw_offset[c] == raw);  // registers of a batch are consecutive views
            CHECK(bt.op_offset[c] == op);
            raw += std::max(1, blk.k / 4 * g.kv_bytes / 4);
            op += blk.k / 4 * p.q_operand_bytes / 4;
            seen.push_back(bt.blocks[c]);
          }
          CHECK(bt.raw_regs == raw);
          CHECK(bt.op_regs == op);
          // Over the limit only as one pair or block that cannot be cut.
          if (bt.op_regs > p.batch_operand_limit) CHECK(bt.blocks.size() <= 2);
          // A pair is one LDS read: never split across batches.
          CHECK_FALSE(g.qk_blocks[size_t(bt.blocks.front())].pair_second);
          CHECK_FALSE(g.qk_blocks[size_t(bt.blocks.back())].pair_first);
          raw_max = std::max(raw_max, raw);
        }
        std::vector<int> all(g.qk_blocks.size());
        std::iota(all.begin(), all.end(), 0);
        CHECK(seen == all);
        CHECK(p.k_raw_regs == std::max(raw_max, 8));
        // Q in AGPRs: one operand per block, back to back.
        if (!g.q_in_lds) {
          int off = 0;
          for (size_t bi = 0; bi < g.qk_blocks.size(); ++bi) {
            CHECK(p.q_agpr_offset[bi] == off);
            off += g.qk_blocks[bi].k / 4 * p.q_operand_bytes / 4;
          }
          CHECK(p.q_agprs == off);
        } else {
          CHECK(p.q_agprs == 0);
        }
        // Read-ahead needs every condition it relies on.
        if (p.prefetch) CHECK((p.prewiden && p.fixed_addresses && g.q_in_lds && p.early_release));
        CHECK(p.token_order_rotated == g.v_lds_transpose);
        CHECK(p.o_regs == 128);  // O^T of 16 rows x 512 columns, f32, over 64 lanes
      }
}

TEST_CASE("decode plan: recorded as JSON with every decision named") {
  auto j = plan_of(decode_spec(Arch::gfx942, DType::bf16, DType::fp8, 16)).to_json();
  for (const char* k : {"qk_path", "v_path", "token_order", "early_release", "prewiden", "fixed_addresses", "prefetch",
                        "tail_groups", "qk_batches", "vgpr_budget", "q_agprs"})
    CHECK(j.contains(k));
  CHECK(j["qk_batches"].size() == 5);
  CHECK(j["vgpr_budget"]["o"] == 128);
}

// The speculative softmax (docs/mla-decode.md "Speculative softmax"): only where the prefix
// kernel's P is fp8 from transposing V reads, without a soft cap; decode kernels keep the plain
// path (their code objects are unchanged by it).
TEST_CASE("decode plan: the gfx950 fp8 prefix kernel speculates its softmax, nothing else does") {
  auto prefix = [](Arch a, DType q, DType kv, int page, bool cap = false) {
    KernelSpec s = decode_spec(a, q, kv, 12);
    s.kind = KernelKind::MlaPrefix;
    s.page_size = page;
    s.logit_cap = cap;
    return plan_of(s);
  };
  for (int page : {1, 128}) {
    const MlaDecodePlan p = prefix(Arch::gfx950, DType::fp8, DType::fp8, page);
    CHECK(p.speculative_softmax);
    CHECK(p.v_raw_regs >= 8);  // the speculative P's f32 registers
    CHECK(p.sum_rounded_p);
    CHECK_FALSE(prefix(Arch::gfx950, DType::fp8, DType::fp8, page, true).speculative_softmax);  // soft cap
    CHECK_FALSE(prefix(Arch::gfx950, DType::bf16, DType::bf16, page).speculative_softmax);      // bf16 P
    CHECK_FALSE(prefix(Arch::gfx942, DType::fp8, DType::fp8, page).speculative_softmax);        // no LDS transpose
  }
  for (Arch a : {Arch::gfx942, Arch::gfx950})
    for (auto [q, kv] : {std::pair{DType::fp8, DType::fp8}, {DType::bf16, DType::fp8}, {DType::bf16, DType::bf16}})
      for (int heads : {12, 16, 128}) CHECK_FALSE(plan_of(decode_spec(a, q, kv, heads, heads >= 64 ? 2 : 1)).speculative_softmax);
}
