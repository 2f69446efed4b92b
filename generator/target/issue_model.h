// Issue timeline of one wave on one SIMD, in issue slots of 4 clocks (one wave64 VALU op on a
// 16-lane SIMD), with MFMA co-execution: an MFMA runs in the matrix core for its passes while
// the wave goes on issuing independent instructions. The rules (docs/performance.md):
//
//   MFMA (XDL)  issues when the matrix pipe is free; the pipe is then busy for `passes` slots
//               (a stream of MFMAs runs at one per `passes` slots).
//   VALU        after an XDL, not before slot 1 + (A source bytes per lane) / 16;
//   v_pk_{add,fma,mul}_f32, v_pk_mov_b32
//               not before slot passes + 2 (+1 when the A source is 16 bytes or more, "XDL2x").
//               Slots count from the MFMA's issue. Source: LLVM PR 233721 (AMDGPU
//               getVALUIssueCycle / getPackedVALUIssueCycle), fit to ATT thread traces on MI308X
//               (gfx942) and MI350X (gfx950).
//   VALU        1 slot; transcendental, 32-bit integer multiply and f64: 4 slots (quarter rate).
//   LDS, VMEM, SALU, SMEM, branch, barrier
//               1 slot each, not held by an MFMA (only VALU is). LDS *bandwidth* is a CU-wide
//               resource and is accounted apart (bytes / 128 per clock), not here.
//   s_nop N     N + 1 slots.  s_waitcnt, labels: 0 (a wait is memory latency, not issue).
//
// It is a model: it knows no data latency (the caller's dependences and the hazard pass's
// s_nop carry those), no instruction-buffer refills and no other waves on the SIMD.
#pragma once
#include <string_view>

#include "target/target.h"

namespace mla::gen {

enum class IssueKind { Mfma, Valu, ValuQuarter, PkF32, Other, Nop, Free };

struct IssueOp {
  IssueKind kind = IssueKind::Other;
  int passes = 0;   // Mfma
  int a_bytes = 0;  // Mfma: widest A/B source, bytes per lane
  int slots = 1;    // Nop: wait states
};

// Classifies an instruction by mnemonic (and, for s_nop, its count) on target `t`. Throws
// std::invalid_argument for an MFMA the target description lacks.
IssueOp issue_op_of(const Target& t, std::string_view mnemonic, int nop_count = 0);

class IssueTimeline {
 public:
  // Slot at which `op` would issue if it came next (the state is not changed).
  int earliest(const IssueOp& op) const;
  // Issues `op` at max(earliest, not_before); returns its slot.
  int issue(const IssueOp& op, int not_before = 0);
  // First slot after everything issued so far (the MFMA pipe may still be busy).
  int now() const { return t_; }
  int pipe_free() const { return pipe_free_; }

 private:
  int t_ = 0, pipe_free_ = 0, valu_ok_ = 0, pk_ok_ = 0;
};

}  // namespace mla::gen
