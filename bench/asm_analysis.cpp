// The bench's side of the static facts of the generated assembly (generator/catalog/asm_facts.h):
// the same analysis the catalog records, plus llvm-mca's estimate of the hot loop.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "bench/bench.h"
#include "mla/build_paths.h"
#include "target/target.h"

namespace mla::bench {

const gen::Target& gen_target(rt::Target t) {
  return gen::target(t == rt::Target::gfx942 ? gen::Arch::gfx942 : gen::Arch::gfx950);
}

double issue_cycles_of(const std::string& line, rt::Target t) { return gen::issue_cycles_of(line, gen_target(t)); }

HotLoop analyze_hot_loop(const std::string& asm_text, rt::Target t, bool run_mca) {
  HotLoop h = gen::analyze_hot_loop(asm_text, gen_target(t));
  if (run_mca) {
    // llvm-mca on the same straight-line path (its scheduling model, dispatch width 1).
    namespace fs = std::filesystem;
    fs::path f = fs::temp_directory_path() / fmt::format("mlabench-mca-{}.s", getpid());
    {
      std::ofstream o(f);
      for (const auto& l : h.insts) o << l << "\n";
    }
    const int iters = 20;
    std::string cmd = fmt::format("{} -mtriple=amdgcn-amd-amdhsa -mcpu={} -iterations={} {} 2>/dev/null",
                                  mla::build::kLlvmMca, rt::name(t), iters, f.string());
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[512];
      while (fgets(buf, sizeof buf, p)) {
        std::string s(buf);
        if (s.starts_with("Total Cycles:")) h.mca_cycles = std::stod(s.substr(13)) / iters;
      }
      pclose(p);
    }
    fs::remove(f);
  }
  return h;
}

void print_hot_loop(const std::string& kernel, const HotLoop& h) {
  fmt::print(stderr, "mlabench: hot loop of {}, steady iteration (co-issue slot, instruction; modeled):\n", kernel);
  for (size_t k = 0; k < h.insts.size(); ++k)
    fmt::print(stderr, "  {:5d}  {}\n", h.coissue_slots[k] - h.coissue_slots[0], h.insts[k]);
}

}  // namespace mla::bench
