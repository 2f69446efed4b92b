// Instruction scheduling inside straight-line regions, for MFMA co-execution.
//
// A region is a maximal run of ALU and memory instructions between control flow, barriers,
// waits, s_nop and EXEC writes; nothing moves across a region's ends. Inside a region the pass
// keeps every dependence and reorders by list scheduling on the issue model of
// target/issue_model.h: the next instruction is the ready one that can issue earliest (an MFMA
// first on a tie, so the matrix pipe stays busy, then the longest latency path to the region's
// end, then program order). Registers are already allocated, so the pass changes no register
// and no register pressure; it only moves independent work (fp8 widening, LDS reads, softmax
// arithmetic) into the slots a running MFMA leaves free.
//
// Dependences kept:
//   registers     read-after-write, write-after-read, write-after-write on every SGPR, VGPR and
//                 AGPR range and on VCC, M0 and SCC (every SALU counts as reading and writing
//                 SCC: conservative, SALU order is kept);
//   LDS           an LDS write or LDS DMA stays ordered with every other LDS access;
//   global        VMEM loads, VMEM stores, LDS DMA and SMEM keep their program order.
// It runs before the waitcnt and hazard passes, which then count and pad the new order.
#pragma once
#include "program/program.h"

namespace mla::gen {

struct ScheduleStats {
  int regions = 0;        // regions of two or more instructions
  int moved = 0;          // instructions whose position in their region changed
  int slots_before = 0;   // sum over regions of the modeled issue slots, program order
  int slots_after = 0;    // the same after scheduling
};

ScheduleStats schedule_regions(Program& p);

}  // namespace mla::gen
