// Code objects: any bytes through the loader (ELF, symbols, kernel descriptors, metadata note),
// then the whole text through LLVM's disassembler and each kernel into a Program (the decoder
// validates before LLVM sees bytes). Every problem must be an mla::emu::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "emulator/code_object.h"
#include "emulator/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mla::emu;
  std::shared_ptr<const CodeObject> co;
  try {
    co = CodeObject::load_bytes(std::vector<uint8_t>(data, data + size), "fuzz.co");
  } catch (const Error&) {
    return 0;
  }
  try {
    (void)disassemble(*co);
  } catch (const Error&) {
  }
  for (const Kernel& k : co->kernels()) {
    try {
      (void)build_program(co, k);
    } catch (const Error&) {
    }
  }
  return 0;
}
