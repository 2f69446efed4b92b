// The pipeline end to end: config -> program -> passes -> .s -> llvm-mc -> ld.lld -> .co, and
// the LLVM tools' view of the result agrees with the generator's own.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "asm/printer.h"
#include "catalog/catalog.h"
#include "catalog/compile.h"
#include "codeobj/assemble.h"
#include "codeobj/tools.h"
#include "config/config.h"
#include "test_util.h"

using namespace mla::gen;
namespace fs = std::filesystem;

namespace {

std::vector<KernelSpec> pipeline_specs() {
  return load_config(std::string(mla::build::kSourceDir) + "/configs/pipeline_smoke.json").kernels;
}

// Mnemonic without the encoding suffix llvm-objdump adds (_e32, _e64, _sdwa, _dpp).
std::string strip_encoding(std::string text) {
  static const std::regex suffix(R"(^(\S+?)_(e32|e64|sdwa|dpp)\b)");
  return std::regex_replace(text, suffix, "$1");
}

std::string squeeze(std::string s) {
  static const std::regex ws(R"(\s+)");
  s = std::regex_replace(s, ws, " ");
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Instruction text from `llvm-objdump -d`: "\tv_add_u32_e32 v1, v2, v3  // 000000001000: 68020502"
std::vector<std::string> objdump_insts(const std::string& co, const Target& t) {
  ToolResult r = run_tool({llvm_objdump_path(), "-d", fmt::format("--mcpu={}", t.name), co});
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '\t') continue;
    auto c = line.find("//");
    out.push_back(squeeze(strip_encoding(line.substr(1, c == std::string::npos ? std::string::npos : c - 1))));
  }
  return out;
}

std::string notes(const std::string& co) {
  ToolResult r = run_tool({llvm_readelf_path(), "--notes", co});
  REQUIRE(r.exit_code == 0);
  return r.out;
}

}  // namespace

TEST_CASE("pipeline: llvm-objdump shows exactly the instruction stream the generator emitted") {
  TempDir dir;
  for (const auto& spec : pipeline_specs()) {
    INFO(spec.name() << " " << arch_name(spec.arch));
    CompiledKernel k = compile_kernel(spec);
    std::string co = (dir.path / (spec.name() + "_" + std::string(arch_name(spec.arch)) + ".co")).string();
    assemble_code_object(k.asm_text, *k.program.target, co);
    auto dumped = objdump_insts(co, *k.program.target);
    std::vector<std::string> ours;
    for (const auto& i : k.program.insts)
      if (i.cls() != OpClass::Label) ours.push_back(format_inst(k.program, i));
    REQUIRE(dumped.size() >= ours.size());
    for (size_t n = 0; n < ours.size(); ++n) {
      INFO("instruction " << n << ": generator '" << ours[n] << "' objdump '" << dumped[n] << "'");
      const Inst* inst = nullptr;
      for (const auto& i : k.program.insts)
        if (i.cls() != OpClass::Label && &i - &k.program.insts[0] >= 0 && format_inst(k.program, i) == ours[n]) {
          inst = &i;
          break;
        }
      if (inst && (inst->cls() == OpClass::Branch || inst->cls() == OpClass::CondBranch)) {
        // Branch targets print as offsets in objdump: compare the mnemonic.
        CHECK(dumped[n].substr(0, dumped[n].find(' ')) == ours[n].substr(0, ours[n].find(' ')));
      } else {
        CHECK(dumped[n] == squeeze(strip_encoding(ours[n])));
      }
    }
    // Anything after our stream is padding that the linker adds (s_code_end / s_nop fill).
    for (size_t n = ours.size(); n < dumped.size(); ++n) CHECK_THAT(dumped[n], Catch::StartsWith("s_"));
  }
}

TEST_CASE("pipeline: llvm-readelf --notes shows exactly the metadata the generator declared") {
  TempDir dir;
  for (const auto& spec : pipeline_specs()) {
    INFO(spec.name() << " " << arch_name(spec.arch));
    CompiledKernel k = compile_kernel(spec);
    std::string co = (dir.path / (spec.name() + ".co")).string();
    assemble_code_object(k.asm_text, *k.program.target, co);
    std::string n = notes(co);
    CHECK_THAT(n, Catch::Contains(fmt::format("amdhsa.target:   'amdgcn-amd-amdhsa--{}'", k.program.target->target_id)));
    CHECK_THAT(n, Catch::Contains(fmt::format(".name:           {}\n", spec.name())));
    CHECK_THAT(n, Catch::Contains(fmt::format(".symbol:         {}.kd", spec.name())));
    CHECK_THAT(n, Catch::Contains(fmt::format(".kernarg_segment_size: {}\n", k.program.abi.kernarg_size)));
    CHECK_THAT(n, Catch::Contains(fmt::format(".group_segment_fixed_size: {}\n", k.resources.lds_bytes)));
    CHECK_THAT(n, Catch::Contains(fmt::format(".vgpr_count:     {}\n", k.resources.next_free_vgpr)));
    CHECK_THAT(n, Catch::Contains(fmt::format(".agpr_count:     {}\n", k.resources.agprs)));
    CHECK_THAT(n, Catch::Contains(fmt::format(".sgpr_count:     {}\n", k.resources.sgpr_count)));
    // Every argument, in order, with its offset, size and kind.
    std::regex arg_re(R"(- (?:\.address_space:\s+global\s+)?\.name:\s+(\S+)\s+\.offset:\s+(\d+)\s+\.size:\s+(\d+)\s+\.value_kind:\s+(\S+))");
    std::vector<std::tuple<std::string, int, int, std::string>> found;
    for (std::sregex_iterator it(n.begin(), n.end(), arg_re), end; it != end; ++it)
      found.emplace_back((*it)[1], std::stoi((*it)[2]), std::stoi((*it)[3]), (*it)[4]);
    REQUIRE(found.size() == k.program.abi.args.size());
    for (size_t i = 0; i < found.size(); ++i) {
      const auto& a = k.program.abi.args[i];
      CHECK(found[i] == std::make_tuple(a.name, int(a.offset), int(a.size), a.value_kind));
    }
  }
}

TEST_CASE("pipeline: the generated .s declares the full target ID and code object v5") {
  for (const auto& spec : pipeline_specs()) {
    CompiledKernel k = compile_kernel(spec);
    CHECK_THAT(k.asm_text, Catch::Contains(fmt::format(".amdgcn_target \"amdgcn-amd-amdhsa--{}:sramecc+:xnack-\"", arch_name(spec.arch))));
    CHECK_THAT(k.asm_text, Catch::Contains(".amdhsa_code_object_version 5"));
    CHECK_THAT(k.asm_text, Catch::Contains(fmt::format(".amdhsa_accum_offset {}", k.resources.accum_offset)));
  }
}

TEST_CASE("pipeline: register counts come from what the program uses") {
  KernelSpec s;
  s.kind = KernelKind::MfmaTile;
  s.arch = Arch::gfx950;
  CompiledKernel k = compile_kernel(s);
  CHECK(k.resources.agprs == 4);  // one 16x16 f32 accumulator tile
  CHECK(k.resources.accum_offset % 4 == 0);
  CHECK(k.resources.accum_offset >= k.resources.vgprs);
  CHECK(k.resources.next_free_vgpr == k.resources.accum_offset + 4);
}
