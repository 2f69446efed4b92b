// Static facts of the generated attention assembly, read from its text: the consumer hot loop
// on the co-issue model (target/issue_model.h) and the producer's bytes in flight. The catalog
// records them for the prefix kernels (catalog.json "issue_model"), where the runtime's planner
// balances its launch by them (docs/planner.md "Issue-aware prefix launch"); mlabench prices
// every kernel with them (docs/performance.md). Every cycle figure here is modeled.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "target/target.h"

namespace mla::gen {

struct HotLoop {
  std::vector<std::string> insts;  // steady-state path of one tile (full tile)
  std::vector<int> coissue_slots;  // issue slot of each of insts in the steady (third) iteration
  double issue_cycles = 0;         // per-target table (docs/performance.md): a serial sum, upper bound
  // Steady-state cycles per iteration on the co-execution issue model (target/issue_model.h:
  // MFMAs run in the matrix pipe while independent instructions issue; modeled).
  double coissue_cycles = 0;
  double lds_bytes = 0;            // bytes the wave moves through LDS per iteration (64 lanes)
  double ring_stall_cycles = 0;    // one-slot ring: modeled wait for the producer's LDS write (modeled_ring_stall_cycles)
  // Co-issue cycles from the path's first s_barrier (the slot's release) to its second (the
  // next slot written), or to the iteration's end: the consumer work that overlaps the
  // producer's write of the next slot.
  double after_release_cycles = 0;
  double mfma_cycles = 0, valu_cycles = 0, lds_cycles = 0, salu_cycles = 0, nop_cycles = 0;
  int mfma = 0, valu = 0, lds = 0, salu = 0;
  double mca_cycles = -1;          // llvm-mca's estimate per iteration (-1: not run; mlabench runs it)
  nlohmann::json to_json() const;
};

// The consumer loop `.Lconsumer_loop_*` .. its back-branch, forward-skipped blocks excluded
// (the masked-tile path a full tile branches over). Throws std::runtime_error for a loop it has
// no steady-state rule for.
// `loop` names another loop of the same shape (the wide prefix kernel's loops for waves of 1
// and 2 row blocks, `.Lwide_loop_b1_` / `.Lwide_loop_b2_`), or the decode producer's
// `.Lproducer_loop_` (one iteration: stage_slots slots of kv_splits tiles each, full tiles).
HotLoop analyze_hot_loop(const std::string& asm_text, const Target& t, const std::string& loop = ".Lconsumer_loop_");

// A kernel whose waves stream the KV themselves and compute (MlaGeometry::consumer_dma: no
// producer wave) runs in three phases one after the other: a prologue that loads Q and the
// ring's first slots with every load in flight, the steady loop, an epilogue that stores the
// partial rows. Per workgroup (`waves` x one wave's static replay, conditional branches taken
// as falling through): the peak load bytes outstanding before the first s_barrier, and the peak
// store bytes outstanding from the consumer loop's end to s_endpgm (at most 63 operations a
// wave: vmcnt counts stores too on gfx9). Throws std::runtime_error when a phase is missing.
struct KernelPhases {
  double prologue_load_bytes = 0, epilogue_store_bytes = 0;
  nlohmann::json to_json() const {
    return {{"prologue_inflight_bytes", prologue_load_bytes}, {"epilogue_inflight_bytes", epilogue_store_bytes}};
  }
};
KernelPhases kernel_phases_inflight(const std::string& asm_text, int waves);

// One-slot ring: per slot, the producer writes the next slot to LDS (slot bytes at the CU's LDS
// bandwidth of 128 bytes per clock, modeled) between the consumers' two barriers; the consumers
// wait for whatever of that write their work after the first barrier does not cover. 0 for
// rings of two or more slots.
double modeled_ring_stall_cycles(const HotLoop& h, int ring, int slot_tokens, int lds_row_bytes);

// Peak global-load bytes outstanding per workgroup in the producers' steady state (full
// tiles): per producer loop, a static replay of its loads and s_waitcnt vmcnt(N) over three
// iterations, summed over the loops; at most 63 loads count per wave (what a 6-bit vmcnt holds).
// A kernel whose consumer waves stream the KV themselves (MlaGeometry::consumer_dma) has no
// producer loop: `consumer_dma_waves` > 0 replays its consumer loop and counts that many waves.
double producer_inflight_bytes(const std::string& asm_text, int consumer_dma_waves = 0);

// Issue cycles of one wave64 instruction on one SIMD (docs/performance.md, "Issue table"):
// MFMA = passes x 4 (passes from the target description); VALU = 4 (16 lanes x 4 cycles),
// transcendental and 32-bit integer multiply = 16 (quarter rate); LDS = max(4, bytes/128);
// SALU, VMEM, branch, barrier = 4 (one issue slot); s_nop N = 4 (N+1); s_waitcnt = 0 (its
// stall is memory latency, not issue).
double issue_cycles_of(const std::string& inst_line, const Target& t);

// catalog.json's "issue_model" of an attention kernel: its hot loop's modeled cycles per
// block-tile (one token tile through one row block's consumer wave), the CU's LDS clocks per
// block-tile (that wave's reads) and per tile (the producer's write of its rows) at 128 bytes
// per clock, its producers' bytes in flight, and the target's machine constants the planner
// prices them with. Per wave-tile with b computing row blocks (b = 1..blocks_per_wave:
// `wave_tile_cycles[b - 1]`, `wave_tile_lds_clocks[b - 1]`): one wave's tile, the figures the
// planner prices a kernel of several row blocks per wave with (its loops for 1, 2, 3 blocks).
struct IssueModelShape {
  int ring = 0, slot_tokens = 0, tile_tokens = 0, lds_row_bytes = 0;
  int blocks_per_wave = 1;
  int consumer_dma_waves = 0;  // waves that stream the KV (no producer loop), 0 with producers
  // A decode kernel's register-staging producer: its loop's cycles per tile (stage_slots slots of
  // slot_tokens / tile_tokens tiles an iteration) go into producer_cycles_per_tile; 0: not priced.
  int producer_stage_slots = 0;
};
nlohmann::json issue_model_json(const std::string& asm_text, const Target& t, const IssueModelShape& shape);

}  // namespace mla::gen
