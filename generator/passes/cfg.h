// Control-flow graph over a Program's linear instruction list. Blocks start at labels and
// after branches; passes iterate over it to a fixed point (loops are back edges, not special cases).
#pragma once
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

}  // namespace mla::gen
