// Helpers for the emulator tests: assemble .s / compile OpenCL into code objects in a temp dir.
#pragma once
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "emulator/code_object.h"
#include "emulator/device.h"
#include "mla/build_paths.h"

namespace emutest {

namespace fs = std::filesystem;
using mla::emu::Gfx;

inline const fs::path& tmp_root() {
  static fs::path p = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("mla_emu_test_{}", ::getpid());
    fs::create_directories(d);
    return d;
  }();
  return p;
}

inline int run_cmd(const std::string& cmd, std::string* output = nullptr) {
  std::string full = cmd + " > " + (tmp_root() / "cmd.log").string() + " 2>&1";
  int rc = std::system(full.c_str());
  if (output) {
    std::ifstream f(tmp_root() / "cmd.log");
    output->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return rc;
}

// Assembles `src` for `gfx` and links it; returns the .co path. Throws std::runtime_error with
// the assembler's output on failure.
inline std::string assemble_file(const std::string& src, Gfx gfx, const std::string& name) {
  fs::path dir = tmp_root();
  fs::path s = dir / (name + ".s"), o = dir / (name + ".o"), co = dir / (name + ".co");
  std::ofstream(s) << src;
  std::string out;
  if (run_cmd(fmt::format("{} -triple amdgcn-amd-amdhsa -mcpu={} -filetype=obj {} -o {}", mla::build::kLlvmMc,
                          mla::emu::gfx_name(gfx), s.string(), o.string()), &out))
    throw std::runtime_error("llvm-mc failed:\n" + out);
  if (run_cmd(fmt::format("{} -shared {} -o {}", mla::build::kLdLld, o.string(), co.string()), &out))
    throw std::runtime_error("ld.lld failed:\n" + out);
  return co.string();
}
inline std::shared_ptr<const mla::emu::CodeObject> assemble(const std::string& src, Gfx gfx, const std::string& name) {
  return mla::emu::CodeObject::load_file(assemble_file(src, gfx, name));
}

struct KernelOpts {
  unsigned vgprs = 32, agprs = 0, sgprs = 32, lds = 0, kernarg = 64;
  bool wg_id_x = true, wg_id_y = false;
  int denorm32 = 3;
  std::string extra;  // more .amdhsa_* lines
};

// A complete .s with one kernel `name` whose body is `body` (kernarg pointer in s[0:1],
// workgroup id x in s2 when enabled, v0 = packed work-item id).
inline std::string kernel_src(const std::string& name, Gfx gfx, const std::string& body, const KernelOpts& o = {}) {
  unsigned accum = (o.vgprs + 3) / 4 * 4;
  return fmt::format(R"(.amdgcn_target "amdgcn-amd-amdhsa--{gfx}"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body}
.size {name}, .-{name}

.rodata
.p2align 6
.amdhsa_kernel {name}
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_system_sgpr_workgroup_id_x {wgx}
  .amdhsa_system_sgpr_workgroup_id_y {wgy}
  .amdhsa_next_free_vgpr {nv}
  .amdhsa_next_free_sgpr {ns}
  .amdhsa_accum_offset {acc}
  .amdhsa_kernarg_size {ka}
  .amdhsa_group_segment_fixed_size {lds}
  .amdhsa_float_denorm_mode_32 {dm}
  .amdhsa_float_denorm_mode_16_64 3
  .amdhsa_dx10_clamp 1
  .amdhsa_ieee_mode 1
{extra}
.end_amdhsa_kernel
)",
                     fmt::arg("gfx", mla::emu::gfx_name(gfx)), fmt::arg("name", name), fmt::arg("body", body),
                     fmt::arg("wgx", o.wg_id_x ? 1 : 0), fmt::arg("wgy", o.wg_id_y ? 1 : 0), fmt::arg("nv", accum + o.agprs),
                     fmt::arg("ns", o.sgprs), fmt::arg("acc", accum), fmt::arg("ka", o.kernarg), fmt::arg("lds", o.lds),
                     fmt::arg("dm", o.denorm32), fmt::arg("extra", o.extra));
}

// Compiles OpenCL C with clang-22 for `gfx`; returns the .co path.
inline std::string compile_cl(const std::string& src, Gfx gfx, const std::string& name) {
  fs::path dir = tmp_root();
  fs::path cl = dir / (name + ".cl"), co = dir / (name + ".co");
  std::ofstream(cl) << src;
  std::string out;
  if (run_cmd(fmt::format("{} -target amdgcn-amd-amdhsa -mcpu={} -nogpulib -O2 -x cl {} -o {}", mla::build::kClang,
                          mla::emu::gfx_name(gfx), cl.string(), co.string()), &out))
    throw std::runtime_error("clang failed:\n" + out);
  return co.string();
}

// Compiles OpenCL C 2.0 with clang-22 for `gfx` to assembly text (to edit, then assemble()).
// `flags`: more clang options (e.g. -cl-denorms-are-zero).
inline std::string compile_cl_asm(const std::string& src, Gfx gfx, const std::string& name, const std::string& flags = "") {
  fs::path dir = tmp_root();
  fs::path cl = dir / (name + ".cl"), s = dir / (name + ".s");
  std::ofstream(cl) << src;
  std::string out;
  if (run_cmd(fmt::format("{} -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu={} -nogpulib -O2 {} -S {} -o {}", mla::build::kClang,
                          mla::emu::gfx_name(gfx), flags, cl.string(), s.string()), &out))
    throw std::runtime_error("clang failed:\n" + out);
  std::ifstream f(s);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline uint32_t fbits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }
inline float bitsf(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }

}  // namespace emutest
