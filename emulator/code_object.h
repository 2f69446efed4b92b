// Loading gfx942 / gfx950 code objects (.co, ELF64 AMDGPU, code object v4+/v5).
//
// A CodeObject holds the ELF image, its target, the kernels found through their `NAME.kd`
// symbols (64-byte kernel descriptors, decoded per LLVM AMDGPUUsage "Kernel Descriptor"),
// and the argument list of each kernel from the NT_AMDGPU_METADATA note (msgpack) when present.
// Every problem (not an ELF, wrong machine, truncated, missing kernel) throws
// mla::emu::Error with a message naming the file and the problem.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/error.h"
#include "emulator/gfx.h"

namespace mla::emu {

struct KernelDescriptor {
  uint32_t group_segment_fixed_size = 0;
  uint32_t private_segment_fixed_size = 0;
  uint32_t kernarg_size = 0;
  int64_t entry_offset = 0;  // kernel code entry, relative to the descriptor's address
  uint32_t rsrc1 = 0, rsrc2 = 0, rsrc3 = 0;
  uint16_t code_properties = 0;
  uint16_t kernarg_preload = 0;

  // Decoded fields.
  unsigned vgpr_alloc() const;      // total VGPR+AGPR per lane, granulated ((g+1)*8)
  unsigned sgpr_alloc() const;      // granulated SGPRs ((g+1)*16), capped at 102 by the executor
  unsigned accum_offset() const;    // first AGPR in the unified file ((rsrc3[5:0]+1)*4)
  unsigned user_sgpr_count() const; // rsrc2[5:1]
  bool enable_private_segment() const { return rsrc2 & 1; }
  bool wg_id(int dim) const { return (rsrc2 >> (7 + dim)) & 1; }
  bool wg_info() const { return (rsrc2 >> 10) & 1; }
  unsigned vgpr_workitem_id() const { return (rsrc2 >> 11) & 3; }
  unsigned float_denorm_mode_32() const { return (rsrc1 >> 16) & 3; }
  unsigned float_denorm_mode_16_64() const { return (rsrc1 >> 18) & 3; }
  bool dx10_clamp() const { return (rsrc1 >> 21) & 1; }
  bool ieee_mode() const { return (rsrc1 >> 23) & 1; }
  bool user_sgpr(int bit) const { return (code_properties >> bit) & 1; }
  unsigned preload_length() const { return kernarg_preload & 0x7f; }
  unsigned preload_offset() const { return kernarg_preload >> 7; }
};

struct KernelArg {
  std::string name, value_kind, address_space, type_name;
  uint32_t offset = 0, size = 0;
};

struct Kernel {
  std::string name;
  uint64_t kd_address = 0;     // virtual address of NAME.kd
  uint64_t entry_address = 0;  // virtual address of the first instruction
  uint64_t code_size = 0;      // size of the NAME function symbol (0 if unknown)
  KernelDescriptor kd;
  std::vector<KernelArg> args;  // from metadata; empty when the object has none
  bool has_metadata = false;
  uint32_t metadata_kernarg_size = 0, wavefront_size = 64;
};

struct Section {
  std::string name;
  uint64_t address = 0;
  uint64_t file_offset = 0;  // where the bytes sit in the ELF file
  std::vector<uint8_t> bytes;
  bool executable = false;
};

class CodeObject {
 public:
  // Throws Error on any problem. `expect` (optional) is the target the caller needs.
  static std::shared_ptr<const CodeObject> load_file(const std::string& path,
                                                     std::optional<Gfx> expect = std::nullopt);
  static std::shared_ptr<const CodeObject> load_bytes(std::vector<uint8_t> bytes, std::string name,
                                                      std::optional<Gfx> expect = std::nullopt);

  const std::string& name() const { return name_; }
  Gfx gfx() const { return gfx_; }
  const std::string& target_id() const { return target_id_; }  // e.g. amdgcn-amd-amdhsa--gfx950
  const std::vector<Kernel>& kernels() const { return kernels_; }
  // Throws Error listing the available kernels when `name` is not there.
  const Kernel& kernel(std::string_view name) const;
  const std::vector<Section>& sections() const { return sections_; }
  // Bytes at a virtual address inside a loaded section, or nullptr.
  const uint8_t* at(uint64_t address, size_t n) const;

 private:
  std::string name_;
  Gfx gfx_ = Gfx::gfx942;
  std::string target_id_;
  std::vector<Kernel> kernels_;
  std::vector<Section> sections_;
};

}  // namespace mla::emu
