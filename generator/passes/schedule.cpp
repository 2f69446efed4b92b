#include "passes/schedule.h"

#include <algorithm>
#include <optional>

#include "passes/hazards/rules.h"
#include "program/effects.h"
#include "target/issue_model.h"

namespace mla::gen {

namespace {

bool writes_exec(const Inst& i) { return any_overlap(effects_of(i).def_ranges(), kExecRange); }

bool schedulable(const Inst& i) {
  switch (i.cls()) {
    case OpClass::Salu:
    case OpClass::Smem:
    case OpClass::Valu:
    case OpClass::ValuTrans:
    case OpClass::Mfma:
    case OpClass::VmemLoad:
    case OpClass::VmemStore:
    case OpClass::LdsDma:
    case OpClass::LdsRead:
    case OpClass::LdsWrite: return !writes_exec(i);
    default: return false;
  }
}

struct Node {
  std::vector<RegRange> defs, uses;  // program/effects.h
  IssueOp op;
  std::vector<std::pair<int, int>> succ;  // (node, latency in slots)
  int npred = 0;
  int height = 0;
  int ready = 0;  // slot at which every predecessor's result is available
};

bool global_mem(OpClass c) {
  return c == OpClass::VmemLoad || c == OpClass::VmemStore || c == OpClass::LdsDma || c == OpClass::Smem;
}
bool lds_access(OpClass c) { return c == OpClass::LdsRead || c == OpClass::LdsWrite || c == OpClass::LdsDma; }
bool lds_writer(OpClass c) { return c == OpClass::LdsWrite || c == OpClass::LdsDma; }

// Slots from the producer's issue until a read-after-write consumer may use its result
// (latency estimates for ordering only; waitcnt and hazard passes enforce the real rules).
int raw_latency(const Inst& prod, const Node& pn, const Inst& cons) {
  switch (prod.cls()) {
    case OpClass::Mfma:
      // An accumulation chain (this result as the next MFMA's SrcC, same tuple) follows the
      // matrix pipe directly; any other reader waits for the result.
      if (cons.cls() == OpClass::Mfma && cons.src.size() >= 3 && !prod.dst.empty() &&
          cons.src[2].kind == prod.dst[0].kind && cons.src[2].index == prod.dst[0].index &&
          cons.src[2].count == prod.dst[0].count)
        return 1;
      return pn.op.passes + 4;
    case OpClass::ValuTrans: return 2;
    case OpClass::LdsRead: return 16;           // ~64 clocks
    case OpClass::Smem: return 50;              // ~200 clocks
    case OpClass::VmemLoad:
    case OpClass::LdsDma: return 125;           // ~500 clocks
    default: return 1;
  }
}

// Modeled slots of the region issued in `order` (each instruction also waits for its
// predecessors' results by the latency estimates).
int modeled_slots(const std::vector<Node>& n, const std::vector<int>& order) {
  IssueTimeline tl;
  std::vector<int> ready(n.size(), 0);
  for (int k : order) {
    const int slot = tl.issue(n[k].op, ready[k]);
    for (auto [s, lat] : n[k].succ) ready[s] = std::max(ready[s], slot + lat);
  }
  return std::max(tl.now(), tl.pipe_free());
}

// Schedules insts[b, e); returns the new order (indices into insts) and the stats.
std::vector<int> schedule_region(const Program& p, int b, int e, ScheduleStats& st) {
  const int n = e - b;
  std::vector<Node> nodes(n);
  for (int k = 0; k < n; ++k) {
    const Inst& in = p.insts[b + k];
    Node& x = nodes[k];
    const Effects fx = effects_of(in);
    x.defs = fx.def_ranges();
    x.uses = fx.use_ranges();
    // A policy, not an effect: SALU instructions stay in program order (each is taken to read
    // and write SCC).
    if (in.cls() == OpClass::Salu) {
      x.uses.push_back(kSccRange);
      x.defs.push_back(kSccRange);
    }
    x.op = issue_op_of(*p.target, in.name());
  }
  for (int j = 0; j < n; ++j) {
    const Inst& ij = p.insts[b + j];
    for (int i = 0; i < j; ++i) {
      const Inst& ii = p.insts[b + i];
      int lat = -1;
      if (any_overlap(nodes[i].defs, nodes[j].uses)) lat = raw_latency(ii, nodes[i], ij);
      if (any_overlap(nodes[i].uses, nodes[j].defs) || any_overlap(nodes[i].defs, nodes[j].defs)) lat = std::max(lat, 1);
      if (lds_access(ii.cls()) && lds_access(ij.cls()) && (lds_writer(ii.cls()) || lds_writer(ij.cls())))
        lat = std::max(lat, 1);
      if (global_mem(ii.cls()) && global_mem(ij.cls())) lat = std::max(lat, 1);
      if (lat >= 0) {
        // A pair the hazard rules constrain needs their wait states in between (or s_nop).
        for (const auto& rule : hazard_rules::all()) lat = std::max(lat, rule.required(*p.target, ii, ij) + 1);
        nodes[i].succ.push_back({j, lat});
        ++nodes[j].npred;
      }
    }
  }
  for (int k = n - 1; k >= 0; --k)
    for (auto [s, lat] : nodes[k].succ) nodes[k].height = std::max(nodes[k].height, nodes[s].height + lat);

  std::vector<int> order;
  std::vector<int> ready;
  for (int k = 0; k < n; ++k)
    if (nodes[k].npred == 0) ready.push_back(k);
  IssueTimeline tl;
  while (!ready.empty()) {
    int best = -1, best_start = 0;
    for (int k : ready) {
      const int start = std::max(tl.earliest(nodes[k].op), nodes[k].ready);
      const bool better = [&] {
        if (best < 0) return true;
        if (start != best_start) return start < best_start;
        const bool km = nodes[k].op.kind == IssueKind::Mfma, bm = nodes[best].op.kind == IssueKind::Mfma;
        if (km != bm) return km;
        if (nodes[k].height != nodes[best].height) return nodes[k].height > nodes[best].height;
        return k < best;
      }();
      if (better) best = k, best_start = start;
    }
    const int slot = tl.issue(nodes[best].op, nodes[best].ready);
    order.push_back(best);
    std::erase(ready, best);
    for (auto [s, lat] : nodes[best].succ) {
      nodes[s].ready = std::max(nodes[s].ready, slot + lat);
      if (--nodes[s].npred == 0) ready.push_back(s);
    }
  }
  if (int(order.size()) != n) throw std::logic_error("schedule: dependence cycle in a straight-line region");

  // Keep program order unless the schedule is modeled faster (never make a region slower).
  std::vector<int> identity(n);
  for (int k = 0; k < n; ++k) identity[k] = k;
  const int before = modeled_slots(nodes, identity), after = modeled_slots(nodes, order);
  ++st.regions;
  st.slots_before += before;
  if (after >= before) {
    st.slots_after += before;
    for (int& k : identity) k += b;
    return identity;
  }
  st.slots_after += after;
  for (int k = 0; k < n; ++k) {
    if (order[k] != k) ++st.moved;
    order[k] += b;
  }
  return order;
}

}  // namespace

ScheduleStats schedule_regions(Program& p) {
  ScheduleStats st;
  std::vector<Inst> out;
  out.reserve(p.insts.size());
  const int N = int(p.insts.size());
  for (int i = 0; i < N;) {
    if (!schedulable(p.insts[i])) {
      out.push_back(p.insts[i++]);
      continue;
    }
    int e = i;
    while (e < N && schedulable(p.insts[e])) ++e;
    if (e - i >= 2) {
      for (int k : schedule_region(p, i, e, st)) out.push_back(p.insts[k]);
    } else {
      out.push_back(p.insts[i]);
    }
    i = e;
  }
  p.insts = std::move(out);
  return st;
}

}  // namespace mla::gen
