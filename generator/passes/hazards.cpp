// Hazard NOP insertion. The state at a program point is the list of recent instructions that
// may still be producers of a hazard, each with the wait states issued since it; a producer is
// forgotten once it lies further back than the longest wait any rule asks for (the horizon).
// Before each instruction the pass asks every rule (passes/hazards/rules.h) about every pending
// producer and inserts s_nop for the largest shortfall. The state joins over CFG predecessors
// (every producer of any path, at its nearest distance: the worst case) and the pass iterates to
// a fixed point, so loops are back edges like any other; the program entry has no producers.
//
// Counting (as LLVM's SIInstrInfo::getNumWaitStates): every instruction is 1 wait state, an
// s_nop is its count (s_nop N-1 = N), labels are 0. Wait states already in the program (other
// instructions, existing s_nop) count, so the pass only adds what is missing.
#include "passes/hazards.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "asm/printer.h"
#include "passes/cfg.h"
#include "passes/hazards/rules.h"

namespace mla::gen {

namespace {

int wait_states_of(const Inst& i) {
  if (i.cls() == OpClass::Label) return 0;
  if (i.cls() == OpClass::Nop) return std::max(i.nops, 1);
  return 1;
}

// A possible producer: its index in the input program and the wait states issued after it.
struct Pending {
  int inst;
  int since;
  bool operator==(const Pending&) const = default;
};

struct State {
  std::vector<Pending> pending;  // sorted by inst, one entry per producer
  bool operator==(const State&) const = default;

  // Worst case over two paths: every producer of either, at the nearer distance.
  void join(const State& o) {
    for (const Pending& q : o.pending) {
      auto it = std::lower_bound(pending.begin(), pending.end(), q.inst,
                                 [](const Pending& a, int inst) { return a.inst < inst; });
      if (it != pending.end() && it->inst == q.inst)
        it->since = std::min(it->since, q.since);
      else
        pending.insert(it, q);
    }
  }
  // `ws` wait states pass; producers at or beyond the horizon can no longer cause a hazard.
  void advance(int ws, int horizon) {
    for (Pending& q : pending) q.since += ws;
    std::erase_if(pending, [horizon](const Pending& q) { return q.since >= horizon; });
  }
  void issue(int inst) { join(State{{Pending{inst, 0}}}); }
};

struct Need {
  int wait_states = 0;
  std::string_view rule;
};

Need needed(const Program& p, const State& s, const Inst& consumer) {
  Need need;
  for (const Pending& q : s.pending)
    for (const auto& rule : hazard_rules::all()) {
      int shortfall = rule.required(*p.target, p.insts[q.inst], consumer) - q.since;
      if (shortfall > need.wait_states) need = {shortfall, rule.name};
    }
  return need;
}

// Runs one block from `in`. With `out`, appends the block's instructions with the s_nop it needs.
State run_block(const Program& p, const Cfg::Block& b, State s, int horizon, std::vector<Inst>* out,
                HazardStats* stats) {
  const int max_per_nop = std::max(1, p.target->hazards.max_wait_states_per_nop);
  for (int i = b.begin; i < b.end; ++i) {
    const Inst& inst = p.insts[i];
    if (inst.cls() != OpClass::Label && inst.cls() != OpClass::Nop) {
      Need need = needed(p, s, inst);
      if (need.wait_states > 0) {
        s.advance(need.wait_states, horizon);
        if (out) {
          for (int left = need.wait_states; left > 0; left -= max_per_nop) {
            Inst nop;
            nop.info = &op_info("s_nop");
            nop.nops = std::min(left, max_per_nop);
            nop.comment = fmt::format("hazard: {}", need.rule);
            out->push_back(std::move(nop));
            ++stats->nops_inserted;
          }
          stats->wait_states_added += need.wait_states;
          stats->rules_hit.push_back(fmt::format("{} @ {}", need.rule, format_inst(p, inst)));
        }
      }
    }
    if (out) out->push_back(inst);
    s.advance(wait_states_of(inst), horizon);
    if (inst.cls() != OpClass::Label && inst.cls() != OpClass::Nop) s.issue(i);
  }
  return s;
}

}  // namespace

HazardStats insert_hazard_nops(Program& p) {
  HazardStats stats;
  if (!p.target) throw std::logic_error(fmt::format("kernel {}: hazard pass needs a target", p.name));
  const int horizon = hazard_rules::horizon(*p.target);
  Cfg cfg = build_cfg(p);
  // Exit states accumulate (joined with what they were), so every state only gains producers or
  // nearer distances, a finite lattice: the sweep terminates. The final emission then sees, at
  // every block entry, a state at least as bad as any real path into it.
  const std::vector<State> in = solve_forward<State>(
      cfg, [&](const Cfg::Block& blk, State s) { return run_block(p, blk, std::move(s), horizon, nullptr, nullptr); },
      true, stats.iterations);
  std::vector<Inst> result;
  result.reserve(p.insts.size() + p.insts.size() / 4);
  for (size_t b = 0; b < cfg.blocks.size(); ++b) run_block(p, cfg.blocks[b], in[b], horizon, &result, &stats);
  p.insts = std::move(result);
  return stats;
}

}  // namespace mla::gen
