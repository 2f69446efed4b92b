// mlagen: build the kernel catalog from shape configs, list it, print a kernel's assembly,
// or validate configs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <thread>

#include "catalog/catalog.h"
#include "catalog/compile.h"
#include "config/config.h"
#include "kernels/registry.h"

using namespace mla::gen;

namespace {

int cmd_build(const std::vector<std::string>& configs, const std::string& out, int jobs) {
  auto loaded = load_configs(configs);
  BuildOptions opts;
  opts.out_dir = out;
  opts.jobs = jobs;
  opts.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  BuildReport r = build_catalog(loaded, opts);
  std::cerr << fmt::format("mlagen: {} built, {} up to date -> {}/hsa\n", r.built, r.up_to_date, out);
  for (const auto& t : r.kept_targets)
    std::cerr << fmt::format("mlagen: {}/hsa/{}/mla kept as it was: no config of this build targets {} (the runtime "
                             "still loads it; delete it for a catalog of only these configs)\n",
                             out, t, t);
  return 0;
}

int cmd_list(const std::string& dir) {
  auto cats = read_catalog(dir);
  // wg/cu: resident workgroups per CU (catalog occupancy); waves: per workgroup (decode: the
  // producer + consumers = row blocks x token splits).
  fmt::print("{:<8} {:<40} {:>5} {:>5} {:>5} {:>7} {:>5} {:>5} {:>6}  {}\n", "target", "kernel", "vgpr", "agpr", "sgpr",
             "lds", "waves", "wg/cu", "insts", "source");
  for (const auto& c : cats) {
    for (const auto& k : c["kernels"]) {
      const int wg_size = k.value("workgroup_size", 64);
      const std::string wpc =
          k.contains("occupancy") ? std::to_string(k["occupancy"].value("workgroups_per_cu", 0)) : std::string("?");
      fmt::print("{:<8} {:<40} {:>5} {:>5} {:>5} {:>7} {:>5} {:>5} {:>6}  {}\n", c["target"].get<std::string>(),
                 k["name"].get<std::string>(), k["vgprs"].get<int>(), k["agprs"].get<int>(), k["sgprs"].get<int>(),
                 k["lds_bytes"].get<int>(), (wg_size + 63) / 64, wpc, k["instructions"].get<int>(),
                 k["source_config"].get<std::string>());
    }
  }
  return 0;
}

int cmd_asm(const std::string& config, const std::string& kernel, const std::string& target_name) {
  Config c = load_config(config);
  std::vector<const KernelSpec*> matches;
  for (const auto& s : c.kernels)
    if (s.name() == kernel && (target_name.empty() || arch_name(s.arch) == target_name)) matches.push_back(&s);
  if (matches.empty()) {
    std::string names;
    for (const auto& s : c.kernels) names += fmt::format("\n  {} ({})", s.name(), arch_name(s.arch));
    throw std::runtime_error(fmt::format("{}: no kernel named '{}'{}; the config produces:{}", config, kernel,
                                         target_name.empty() ? "" : " for " + target_name, names));
  }
  if (matches.size() > 1)
    throw std::runtime_error(
        fmt::format("{}: kernel '{}' is built for several targets; choose one with --target", config, kernel));
  std::cout << compile_kernel(*matches[0]).asm_text;
  return 0;
}

int cmd_check(const std::vector<std::string>& configs) {
  auto loaded = load_configs(configs);
  for (const auto& c : loaded) {
    fmt::print("{}: {} ({} kernels)\n", c.path, c.deployment, c.kernels.size());
    for (const auto& s : c.kernels)
      fmt::print("  {:<40} {}{}\n", s.name(), arch_name(s.arch), s.implied ? "  (implied)" : "");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mlagen: generate MLA decode kernels for gfx942 / gfx950 from shape configs"};
  app.require_subcommand(1);

  auto* build = app.add_subcommand("build", "Build the catalog (hsa/<gfx>/mla/*.co, catalog.json, mlagen_kernels.csv)");
  std::vector<std::string> build_configs;
  std::string out = "out";
  int jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  build->add_option("configs", build_configs, "Shape config files (JSON)")->required();  // unreadable: a ConfigError (exit 1)
  build->add_option("--out", out, "Output directory")->capture_default_str();
  build->add_option("-j,--jobs", jobs, "Kernels built in parallel")->capture_default_str()->check(CLI::PositiveNumber);

  auto* list = app.add_subcommand("list", "Print a catalog as a table");
  std::string list_dir;
  list->add_option("dir", list_dir, "Catalog directory (the --out of build)")->required();

  auto* asm_cmd = app.add_subcommand("asm", "Print the assembly of one kernel of a config");
  std::string asm_config, asm_kernel, asm_target;
  asm_cmd->add_option("config", asm_config, "Shape config file")->required();
  asm_cmd->add_option("kernel", asm_kernel, "Kernel name (see mlagen check)")->required();
  asm_cmd->add_option("--target", asm_target, "gfx942 or gfx950, when the kernel is built for both");

  auto* check = app.add_subcommand("check", "Validate configs and list the kernels they produce");
  std::vector<std::string> check_configs;
  check->add_option("configs", check_configs, "Shape config files")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*build) return cmd_build(build_configs, out, jobs);
    if (*list) return cmd_list(list_dir);
    if (*asm_cmd) return cmd_asm(asm_config, asm_kernel, asm_target);
    if (*check) return cmd_check(check_configs);
  } catch (const std::exception& e) {
    std::cerr << "mlagen: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
