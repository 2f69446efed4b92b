// Turns a Program (after the passes) into assembly text for llvm-mc, through templates/.
#pragma once
#include <string>

#include "program/program.h"

namespace mla::gen {

struct PrintOptions {
  std::string source;            // config file the kernel came from (for the header comment)
  int code_object_version = 5;
};

// One operand as llvm-mc spells it: s[4:5], v7, a[0:3], vcc, 0x3f800000, 12.
std::string format_operand(const Operand& op);
// Modifiers as LLVM spells them (leading space per modifier; empty when none).
std::string format_mods(const Mods& m);
// One instruction line (no indentation), e.g. "v_add_u32 v1, v2, v3".
std::string format_inst(const Program& p, const Inst& inst);
// The instruction stream only (what llvm-objdump will show), one instruction per line.
std::string print_body(const Program& p);
// The whole .s file.
std::string print_kernel(const Program& p, const PrintOptions& opts);

// Values the descriptor and metadata declare, computed from the program.
struct KernelResources {
  int next_free_sgpr, next_free_vgpr, accum_offset, agprs, vgprs, sgpr_count;
  bool reserve_vcc;
  uint32_t lds_bytes;
};
KernelResources kernel_resources(const Program& p);

}  // namespace mla::gen
