// Kernel arguments from the generator-runtime contract (abi/mla_abi.h).
#pragma once
#include <span>

#include "abi/mla_abi.h"
#include "program/program.h"
#include "spec/kernel_spec.h"

namespace mla::gen {

// Declares a kernel's arguments by iterating the contract's table (q and kv point to the spec's
// element types) and checks that the program's layout is exactly the table's.
void declare_kernargs(Program& p, std::span<const abi::KernargField> table, const KernelSpec& s);

}  // namespace mla::gen
