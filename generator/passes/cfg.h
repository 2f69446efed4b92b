// Control-flow graph over a Program's linear instruction list. Blocks start at labels and
// after branches; passes iterate over it to a fixed point (loops are back edges, not special cases).
#pragma once
#include <optional>
#include <vector>

#include "program/program.h"

namespace mla::gen {

struct Cfg {
  struct Block {
    int begin = 0, end = 0;  // instruction index range [begin, end)
    std::vector<int> succ, pred;
  };
  std::vector<Block> blocks;
};

// Throws std::logic_error if a branch targets a label that is never bound.
Cfg build_cfg(const Program& p);

// Forward dataflow to a fixed point over the CFG, for the waitcnt and hazard passes. `State`
// has join() and ==; `transfer(block, in)` gives the state at the block's end. A block's entry
// state is the join of its predecessors' exit states (a block no path has reached yet adds
// nothing; the program entry starts from State{}). With `accumulate`, a block's exit state is
// joined with what it was, so it only grows even where the transfer alone would not be
// monotone. Loops are back edges like any other; a finite lattice makes this terminate.
// Returns the entry state of every block; `iterations` counts the sweeps.
template <class State, class Transfer>
std::vector<State> solve_forward(const Cfg& cfg, Transfer&& transfer, bool accumulate, int& iterations) {
  const size_t nb = cfg.blocks.size();
  std::vector<std::optional<State>> out(nb);
  auto in_state = [&](size_t b) {
    State s;
    for (int pred : cfg.blocks[b].pred)
      if (out[size_t(pred)]) s.join(*out[size_t(pred)]);
    return s;
  };
  for (bool changed = true; changed;) {
    changed = false;
    ++iterations;
    for (size_t b = 0; b < nb; ++b) {
      State s = transfer(cfg.blocks[b], in_state(b));
      if (accumulate && out[b]) {
        State t = *out[b];
        t.join(s);
        s = std::move(t);
      }
      if (!out[b] || !(*out[b] == s)) {
        out[b] = std::move(s);
        changed = true;
      }
    }
  }
  std::vector<State> in(nb);
  for (size_t b = 0; b < nb; ++b) in[b] = in_state(b);
  return in;
}

}  // namespace mla::gen
