// .s text -> relocatable object (llvm-mc) -> code object (ld.lld -shared).
#pragma once
#include <string>

#include "target/target.h"

namespace mla::gen {

// Assembles and links `asm_text` for `t` into `co_path`. Temporary files live next to
// co_path. Throws std::runtime_error carrying the tool's diagnostics on failure.
void assemble_code_object(const std::string& asm_text, const Target& t, const std::string& co_path);

}  // namespace mla::gen
