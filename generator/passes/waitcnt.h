// s_waitcnt insertion. A scoreboard over vmcnt and lgkmcnt records, for each register with
// a result still in flight, how many younger in-order operations were issued after it; a
// use or overwrite of that register gets the weakest wait that guarantees the result landed.
//
// Counter facts (gfx9 family, incl. gfx942/gfx950; LLVM SIInsertWaitcnts):
// - vmcnt (6 bits, max 63): buffer/global loads and stores and LDS DMA, returned in order.
// - lgkmcnt (4 bits, max 15): LDS ops return in order; SMEM may return out of order, so a
//   wait on an SMEM result is always lgkmcnt(0), and only LDS ops make an older LDS result
//   "distance" grow.
// - expcnt: exports and GDS only on gfx9 (VMEM store data is read at issue since CI), so
//   the generator's kernels never need it.
// Memory dependencies through LDS: a ds_read/ds_write after an LDS DMA waits for the DMA
// (vmcnt), and s_barrier waits for this wave's LDS writes and LDS DMA so that other waves
// see them after the barrier (s_barrier itself does not wait on gfx90a+: back-off barrier).
// LDS DMA is tracked per region (Inst::dma_regions, e.g. the slots of a ring): a barrier waits
// only for the DMA into the regions it publishes, so that a producer keeps later slots in flight.
#pragma once
#include "program/program.h"

namespace mla::gen {

struct WaitcntStats {
  int inserted = 0;
  int iterations = 0;  // fixed-point sweeps over the CFG
};

WaitcntStats insert_waitcnts(Program& p);

}  // namespace mla::gen
