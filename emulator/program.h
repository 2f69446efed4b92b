// A decoded kernel: the instructions from its entry to the end of its code, ready to execute.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulator/code_object.h"
#include "emulator/inst.h"

namespace mla::emu {

struct Program {
  std::shared_ptr<const CodeObject> co;
  const Kernel* kernel = nullptr;
  Gfx gfx = Gfx::gfx942;
  std::vector<Inst> insts;
  std::unordered_map<uint64_t, uint32_t> index_of;  // pc -> instruction index
  uint32_t entry = 0;
  // Allocation from the descriptor.
  unsigned nvgpr = 0, nagpr = 0, accum_offset = 0, nsgpr = 0;
  uint32_t index_at(uint64_t pc) const;  // throws Error("decode") for a pc that is not an instruction start
};

// Decodes `kernel` of `co` (all bytes from its entry to the end of its function symbol, or to
// the next kernel / end of section) with LLVM's AMDGPU disassembler. Unknown encodings and
// unsupported instructions become trap instructions that raise a clear error when executed.
std::shared_ptr<const Program> build_program(std::shared_ptr<const CodeObject> co, const Kernel& kernel);

// Plain disassembly of every executable section: one line per instruction
// "<address>: <text>" (LLVM's printer) — what `mlaemu disasm` prints.
struct DisasmLine {
  uint64_t address;
  std::vector<uint8_t> bytes;
  std::string text;  // empty when the bytes do not decode
  std::string symbol;  // non-empty at a symbol (kernel) start
};
std::vector<DisasmLine> disassemble(const CodeObject& co);

// Low-level: decode raw bytes into LLVM-printed text (for tests and tools).
std::string decode_text(Gfx gfx, const uint8_t* bytes, size_t n, uint64_t address, unsigned* size);

}  // namespace mla::emu
