// Running the LLVM tools (llvm-mc, ld.lld, llvm-objdump, llvm-readelf) as subprocesses.
// Paths are found at configure time and may be overridden with MLA_LLVM_MC, MLA_LD_LLD,
// MLA_LLVM_OBJDUMP, MLA_LLVM_READELF in the environment.
#pragma once
#include <string>
#include <vector>

namespace mla::gen {

struct ToolResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs argv[0] with the arguments (no shell), capturing stdout and stderr.
ToolResult run_tool(const std::vector<std::string>& argv);

std::string llvm_mc_path();
std::string ld_lld_path();
std::string llvm_objdump_path();
std::string llvm_readelf_path();

}  // namespace mla::gen
