// What the runtime needs to know about a code object before handing it to a device: its gfx
// target (ELF e_flags), its kernels and each kernel's kernarg segment and argument list (the
// AMDGPU metadata note). Read with libelf and msgpack-cxx, so checking a code object needs
// neither LLVM nor the emulator; the bytes are untrusted (a catalog is just files).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mla::rt {

struct CodeObjectArg {
  std::string name;  // "" when the metadata gives none (hidden arguments)
  uint32_t offset = 0, size = 0;
  std::string value_kind;
};

struct CodeObjectKernel {
  std::string name;
  uint32_t kernarg_segment_size = 0;
  std::vector<CodeObjectArg> args;
};

struct CodeObjectInfo {
  std::string target;  // "gfx942", or "unknown-mach-0x.." for a mach the runtime does not name
  std::vector<CodeObjectKernel> kernels;  // those of the metadata note that have a <name>.kd symbol
  const CodeObjectKernel* kernel(const std::string& name) const;  // nullptr if absent
};

// The gfx target of an ELF code object from its header (e_flags mach), e.g. "gfx942"; throws
// RtError(CODE_OBJECT) if `bytes` is not a little-endian ELF64 for AMDGPU.
std::string elf_gfx_target(std::span<const uint8_t> bytes, const std::string& path);

// Target, kernels and their metadata; RtError(CODE_OBJECT) naming `path` for anything malformed
// (no metadata note, notes outside the file or misaligned, msgpack that is not the AMDGPU schema).
CodeObjectInfo read_code_object_info(std::span<const uint8_t> bytes, const std::string& path);

}  // namespace mla::rt
