// Wait-state (hazard) checks of gfx942 / gfx950: the manually inserted s_nop rules that LLVM's
// GCNHazardRecognizer enforces. See hazards.cpp for the rule table and its sources.
#pragma once
#include "emulator/inst.h"

namespace mla::emu {
struct Wave;
void check_hazards(Wave& w, const Inst& in);   // before execution: throws Error("hazard")
void record_hazards(Wave& w, const Inst& in);  // after execution: remembers writers/readers
}  // namespace mla::emu
