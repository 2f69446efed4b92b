#include "target/issue_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mla::gen {

namespace {
bool starts(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
}  // namespace

IssueOp issue_op_of(const Target& t, std::string_view m, int nop_count) {
  IssueOp op;
  if (starts(m, "v_mfma")) {
    auto sh = t.find_mfma(m);
    if (!sh) throw std::invalid_argument("issue model: MFMA " + std::string(m) + " is not in the target description");
    op.kind = IssueKind::Mfma;
    op.passes = sh->passes;
    op.a_bytes = 4 * std::max(sh->a_regs, sh->b_regs);
    return op;
  }
  if (m == "s_waitcnt" || m.empty() || m.back() == ':') {
    op.kind = IssueKind::Free;
    op.slots = 0;
    return op;
  }
  if (m == "s_nop") {
    op.kind = IssueKind::Nop;
    op.slots = nop_count + 1;
    return op;
  }
  if (starts(m, "v_")) {
    for (std::string_view pk : {"v_pk_add_f32", "v_pk_fma_f32", "v_pk_mul_f32", "v_pk_mov_b32"})
      if (m == pk) {
        op.kind = IssueKind::PkF32;
        return op;
      }
    for (std::string_view q : {"v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_", "v_cos_", "v_mul_hi_u32",
                               "v_mul_lo_u32", "v_mad_u64_u32", "v_mul_hi_i32"})
      if (starts(m, q)) {
        op.kind = IssueKind::ValuQuarter;
        op.slots = 4;
        return op;
      }
    if (m.find("_f64") != std::string_view::npos) {
      op.kind = IssueKind::ValuQuarter;
      op.slots = 4;
      return op;
    }
    op.kind = IssueKind::Valu;
    return op;
  }
  return op;  // LDS, VMEM, SALU, SMEM, branch, barrier: one slot, not held by MFMA
}

int IssueTimeline::earliest(const IssueOp& op) const {
  switch (op.kind) {
    case IssueKind::Mfma: return std::max(t_, pipe_free_);
    case IssueKind::Valu:
    case IssueKind::ValuQuarter: return std::max(t_, valu_ok_);
    case IssueKind::PkF32: return std::max({t_, valu_ok_, pk_ok_});
    default: return t_;
  }
}

int IssueTimeline::issue(const IssueOp& op, int not_before) {
  const int s = std::max(earliest(op), not_before);
  switch (op.kind) {
    case IssueKind::Mfma:
      pipe_free_ = s + op.passes;
      valu_ok_ = std::max(valu_ok_, s + 1 + op.a_bytes / 16);
      pk_ok_ = std::max(pk_ok_, s + op.passes + 2 + (op.a_bytes >= 16 ? 1 : 0));
      t_ = s + 1;
      break;
    case IssueKind::Free: t_ = s; break;
    default: t_ = s + op.slots; break;
  }
  return s;
}

}  // namespace mla::gen
