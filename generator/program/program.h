// A Program is one kernel: its ABI (arguments, LDS, launch setup) and its instruction
// list. Builders append to it; passes rewrite it; the printer turns it into .s text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "program/inst.h"
#include "target/target.h"

namespace mla::gen {

// One kernel argument as declared in .amdgpu_metadata.
struct KernelArg {
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 0;
  std::string value_kind;      // "global_buffer" or "by_value"
  std::string address_space;   // "global" for buffers, empty for by_value
  std::string type_name;       // informative, e.g. "uint8_t*", "float", "int32_t"
};

// Launch set-up that the kernel descriptor encodes and the initial register state follows
// (LLVM AMDGPUUsage "Initial Kernel Execution State"): the kernarg pointer in s[0:1], then
// the enabled workgroup IDs in the next SGPRs, work-item IDs packed in v0.
struct KernelAbi {
  std::vector<KernelArg> args;
  uint32_t kernarg_size = 0;
  uint32_t lds_bytes = 0;
  uint32_t max_workgroup_size = 256;
  bool workgroup_id_x = true, workgroup_id_y = false, workgroup_id_z = false;
  int workitem_id_dims = 1;  // 1: x only; 2: x,y; 3: x,y,z (packed in v0)

  // Appends an argument at the next offset aligned to its size; returns it.
  const KernelArg& add_buffer(const std::string& name, const std::string& type_name);
  const KernelArg& add_value(const std::string& name, uint32_t size, const std::string& type_name);
  const KernelArg* find(const std::string& name) const;
};

// Register use, computed from the instructions (not declared by hand).
struct RegisterUse {
  int sgprs = 0;  // next free SGPR
  int vgprs = 0;  // next free architectural VGPR
  int agprs = 0;  // next free AGPR
  bool uses_vcc = false;
  int accum_offset() const { return vgprs == 0 ? 4 : (vgprs + 3) / 4 * 4; }
};

struct Program {
  std::string name;
  const Target* target = nullptr;
  KernelAbi abi;
  std::vector<Inst> insts;
  std::vector<std::string> label_names;
  // First SGPRs holding system values at entry, fixed by the ABI.
  int user_sgpr_count() const { return 2; }  // kernarg segment pointer

  RegisterUse register_use() const;
};

}  // namespace mla::gen
