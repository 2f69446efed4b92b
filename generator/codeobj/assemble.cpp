#include "codeobj/assemble.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "codeobj/tools.h"

namespace mla::gen {

namespace fs = std::filesystem;

void assemble_code_object(const std::string& asm_text, const Target& t, const std::string& co_path) {
  fs::path co(co_path);
  fs::path s_path = co;
  s_path.replace_extension(".s");
  fs::path o_path = co;
  o_path.replace_extension(".o");
  {
    std::ofstream f(s_path);
    f << asm_text;
    if (!f) throw std::runtime_error(fmt::format("cannot write {}", s_path.string()));
  }
  // The target ID's features (sramecc+, xnack-) must match the .amdgcn_target directive.
  std::string id(t.target_id);
  std::string mattr;
  for (size_t pos = id.find(':'); pos != std::string::npos; pos = id.find(':', pos + 1)) {
    size_t end = id.find(':', pos + 1);
    std::string feat = id.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
    char sign = feat.back();
    feat.pop_back();
    mattr += fmt::format("{}{}{}", mattr.empty() ? "" : ",", sign, feat);
  }
  ToolResult mc = run_tool({llvm_mc_path(), "-triple=amdgcn-amd-amdhsa", fmt::format("-mcpu={}", t.name),
                            fmt::format("-mattr={}", mattr), "-filetype=obj", s_path.string(), "-o", o_path.string()});
  if (mc.exit_code != 0)
    throw std::runtime_error(fmt::format("llvm-mc failed on {} (exit {}):\n{}", s_path.string(), mc.exit_code, mc.err));
  ToolResult ld = run_tool({ld_lld_path(), "-shared", "--no-undefined", o_path.string(), "-o", co.string()});
  fs::remove(o_path);
  if (ld.exit_code != 0)
    throw std::runtime_error(fmt::format("ld.lld failed on {} (exit {}):\n{}", o_path.string(), ld.exit_code, ld.err));
  fs::remove(s_path);
}

}  // namespace mla::gen
