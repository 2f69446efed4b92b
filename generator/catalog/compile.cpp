#include "catalog/compile.h"

#include <fmt/format.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Support/SHA256.h>

#include <fstream>
#include <sstream>

#include "kernels/registry.h"

namespace mla::gen {

std::string sha256_hex(const std::string& bytes) {
  llvm::SHA256 h;
  h.update(llvm::StringRef(bytes));
  auto digest = h.final();
  std::string out;
  for (uint8_t b : digest) out += fmt::format("{:02x}", b);
  return out;
}

std::string sha256_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return sha256_hex(ss.str());
}

CompiledKernel compile_program(Program program, const PrintOptions& opts, bool schedule) {
  CompiledKernel k;
  if (schedule) k.schedule = schedule_regions(program);
  k.waitcnt = insert_waitcnts(program);
  k.hazards = insert_hazard_nops(program);
  k.resources = kernel_resources(program);
  k.asm_text = print_kernel(program, opts);
  k.asm_sha256 = sha256_hex(k.asm_text);
  k.program = std::move(program);
  return k;
}

CompiledKernel compile_kernel(const KernelSpec& spec, int code_object_version) {
  PrintOptions opts;
  opts.source = spec.source_config;
  opts.code_object_version = code_object_version;
  CompiledKernel k = compile_program(build_program(spec), opts, true);
  k.spec = spec;
  return k;
}

}  // namespace mla::gen
