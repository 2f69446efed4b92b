// mlaemu: command-line front end of the emulator.
//   mlaemu disasm X.co            print every instruction (LLVM's syntax) with addresses
//   mlaemu info X.co              kernels, descriptors, metadata arguments
//   mlaemu forms X.co             instruction forms (emulator/inst_form.h) per kernel, with counts
//   mlaemu run DISPATCH.json      run a dispatch described in JSON (docs/emulator.md)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <iostream>

#include "emulator/code_object.h"
#include "emulator/dispatch_json.h"
#include "emulator/inst_form.h"
#include "emulator/program.h"

using namespace mla::emu;

int main(int argc, char** argv) {
  CLI::App app{"mlaemu: CPU emulator of gfx942 / gfx950 code objects (strict: waitcnt, hazards, LDS races, bounds)"};
  app.require_subcommand(1);
  std::string co_path, json_path, out_dir;
  auto* dis = app.add_subcommand("disasm", "Disassemble a code object with LLVM's AMDGPU disassembler");
  dis->add_option("code_object", co_path, "path to the .co")->required();
  bool bytes = false;
  dis->add_flag("--bytes", bytes, "also print the encoding bytes");
  auto* info = app.add_subcommand("info", "Show kernels, descriptors and metadata of a code object");
  info->add_option("code_object", co_path, "path to the .co")->required();
  auto* check = app.add_subcommand("check", "List instructions of each kernel that the emulator cannot execute or that exceed the descriptor's register allocation");
  check->add_option("code_object", co_path, "path to the .co")->required();
  auto* forms = app.add_subcommand("forms", "List the instruction forms (docs/emulator-provenance.md) of each kernel: kernel, count, form");
  forms->add_option("code_object", co_path, "path to the .co")->required();
  auto* run = app.add_subcommand("run", "Run a dispatch described by a JSON file");
  run->add_option("dispatch", json_path, "dispatch JSON (see docs/emulator.md)")->required();
  run->add_option("-o,--out", out_dir, "output directory for buffers (.npy) and counters.json (default: from the JSON or '.')");
  uint64_t seed = 0;
  unsigned quantum = 0;
  bool no_hazards = false, no_waitcnt = false, no_race = false, no_lds_dma = false, no_lds_uninit = false, per_wg = false, relaxed = false;
  run->add_option("--seed", seed, "random wave interleaving with this seed (0 = round robin)");
  run->add_option("--quantum", quantum, "instructions per wave turn (default 1)");
  run->add_flag("--no-hazard-check", no_hazards, "disable wait-state checks");
  run->add_flag("--no-waitcnt-check", no_waitcnt, "disable the waitcnt scoreboard");
  run->add_flag("--no-lds-race-check", no_race, "disable LDS race detection");
  run->add_flag("--no-lds-dma-check", no_lds_dma, "disable the check that LDS bytes of an outstanding LDS-DMA load are not touched");
  run->add_flag("--no-lds-uninit-check", no_lds_uninit, "disable the check that no LDS byte is read before its workgroup wrote it");
  bool no_memory_model = false;
  uint64_t wg_order_seed = 0;
  run->add_flag("--no-memory-model-check", no_memory_model,
                "disable the check that a load of global bytes another XCD wrote in this dispatch follows the writer's release "
                "(buffer_wbl2 sc1) and the reader's acquire (buffer_inv sc1)");
  run->add_option("--workgroup-order-seed", wg_order_seed, "run the workgroups in a random order with this seed (0 = linear order)");
  run->add_flag("--relaxed", relaxed,
                "report each waitcnt/hazard/LDS-race/LDS-DMA/LDS-uninit/memory-model violation once (per rule and pc) as a warning on stderr and go on; "
                "out-of-bounds accesses and unsupported instructions stay errors (docs/emulator.md, 'Relaxed mode')");
  run->add_flag("--per-workgroup", per_wg, "include per-workgroup counters");
  bool trace = false;
  run->add_flag("--trace", trace, "print every executed instruction to stderr");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*dis) {
      auto co = CodeObject::load_file(co_path);
      for (auto& l : disassemble(*co)) {
        if (!l.symbol.empty()) fmt::print("\n{:016x} <{}>:\n", l.address, l.symbol);
        std::string enc;
        if (bytes)
          for (size_t i = 0; i + 3 < l.bytes.size() + 3 && i < l.bytes.size(); i += 4) {
            uint32_t v = 0;
            std::memcpy(&v, l.bytes.data() + i, std::min<size_t>(4, l.bytes.size() - i));
            enc += fmt::format(" {:08X}", v);
          }
        fmt::print("  {:<60} // {:012X}:{}\n", l.text.empty() ? "<invalid>" : l.text, l.address, enc);
      }
      return 0;
    }
    if (*info) {
      auto co = CodeObject::load_file(co_path);
      fmt::print("target {}\n", co->target_id());
      for (auto& k : co->kernels()) {
        auto& d = k.kd;
        fmt::print("kernel {}: entry 0x{:x} kd 0x{:x} vgprs {} (accum_offset {}) sgprs {} lds {} kernarg {} user_sgprs {} "
                   "wg_id {}{}{} workitem_id {} denorm32 {} rsrc1 0x{:08x} rsrc2 0x{:08x} rsrc3 0x{:08x} props 0x{:04x}\n",
                   k.name, k.entry_address, k.kd_address, d.vgpr_alloc(), d.accum_offset(), d.sgpr_alloc(), d.group_segment_fixed_size,
                   d.kernarg_size, d.user_sgpr_count(), d.wg_id(0), d.wg_id(1), d.wg_id(2), d.vgpr_workitem_id(), d.float_denorm_mode_32(),
                   d.rsrc1, d.rsrc2, d.rsrc3, d.code_properties);
        for (auto& a : k.args)
          fmt::print("  arg {:<24} offset {:4} size {:3} {} {}\n", a.name.empty() ? "-" : a.name, a.offset, a.size, a.value_kind, a.address_space);
      }
      return 0;
    }
    if (*forms) {
      auto co = CodeObject::load_file(co_path);
      for (auto& k : co->kernels())
        for (auto& [form, n] : forms_of(*build_program(co, k))) fmt::print("{}\t{}\t{}\n", k.name, n, form);
      return 0;
    }
    if (*check) {
      auto co = CodeObject::load_file(co_path);
      int problems = 0;
      for (auto& k : co->kernels()) {
        auto prog = build_program(co, k);
        for (auto& in : prog->insts) {
          if (in.text == "s_code_end") break;
          std::string why = !in.info ? "not supported by the emulator" : in.bad_regs ? in.bad_reg_msg : "";
          if (in.info && in.bad_regs) why = in.bad_reg_msg;
          if (why.empty()) continue;
          ++problems;
          fmt::print("{} +0x{:x}: {}: {}\n", k.name, in.pc - k.entry_address, in.text, why);
        }
      }
      fmt::print("{} problem(s)\n", problems);
      return problems ? 1 : 0;
    }
    if (*run) {
      RunOverrides ov;
      ov.out_dir = out_dir;
      if (seed) ov.seed = seed;
      if (quantum) ov.quantum = quantum;
      ov.no_hazards = no_hazards;
      ov.no_waitcnt = no_waitcnt;
      ov.no_race = no_race;
      ov.no_lds_dma = no_lds_dma;
      ov.no_lds_uninit = no_lds_uninit;
      ov.no_memory_model = no_memory_model;
      if (wg_order_seed) ov.workgroup_order_seed = wg_order_seed;
      ov.relaxed = relaxed;
      ov.per_workgroup = per_wg;
      ov.trace = trace;
      auto result = run_dispatch_json(json_path, ov);
      fmt::print("{}\n", result.dump(2));
      return 0;
    }
  } catch (const Error& e) {
    fmt::print(stderr, "mlaemu: error [{}]: {}\n", e.rule, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlaemu: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
