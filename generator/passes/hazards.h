// Hazard NOP insertion: the wait states that gfx942 / gfx950 require software to insert
// between dependent instructions (LLVM GCNHazardRecognizer; CDNA3/CDNA4 ISA "Manually
// Inserted Wait States"). Each rule is one small documented item in passes/hazards/,
// carrying its table; this pass walks the program (across CFG edges, loops included) and
// inserts the fewest s_nop wait states that satisfy every rule.
#pragma once
#include <string>
#include <vector>

#include "program/program.h"

namespace mla::gen {

struct HazardStats {
  int nops_inserted = 0;      // s_nop instructions added
  int wait_states_added = 0;  // total wait states they provide
  std::vector<std::string> rules_hit;  // one entry per insertion: "<rule name> @ <instruction>"
  int iterations = 0;         // fixed-point sweeps over the CFG
};

HazardStats insert_hazard_nops(Program& p);

}  // namespace mla::gen
