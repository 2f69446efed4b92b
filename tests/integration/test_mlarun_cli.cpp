// mlarun end to end: make-problem, run through a catalog built by mlagen, outputs checked
// against the reference; and the errors a user meets.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "codeobj/tools.h"
#include "generator/test_util.h"
#include "mla/build_paths.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

using namespace mla;
namespace fs = std::filesystem;

namespace {

using Dir = TempDir;

gen::ToolResult run(std::string exe, std::vector<std::string> args) {
  args.insert(args.begin(), std::move(exe));
  return gen::run_tool(args);
}

// A catalog with one Kimi-K3 shape, built once.
const std::string& k3_catalog() {
  static Dir dir;
  static std::string out = [] {
    std::string cfg = std::string(mla::build::kSourceDir) + "/configs/kimi_k3_tp8_gfx950.json";
    std::string o = (dir.path / "out").string();
    auto r = run(MLAGEN_EXE, {"build", cfg, "--out", o, "-j", "2"});
    if (r.exit_code != 0) throw std::runtime_error(r.err);
    return o;
  }();
  return out;
}

}  // namespace

TEST_CASE("mlarun: make-problem, run on the catalog, outputs match the reference") {
  Dir d;
  std::string prob = (d.path / "p").string();
  auto mk = run(MLARUN_EXE, {"make-problem", prob, "--target", "gfx950", "--heads", "12", "--dtype", "fp8/fp8",
                             "--page-size", "128", "--kv-lens", "300,17,129", "--seed", "3"});
  INFO(mk.err);
  REQUIRE(mk.exit_code == 0);
  auto r = run(MLARUN_EXE, {"--catalog", k3_catalog(), "--problem", prob});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("mla_decode_fp8fp8_h12_qs1_pg128"));
  rt::Problem p = rt::load_problem(prob);
  rt::Outputs out = rt::load_outputs(prob, p);
  ref::Compare c = ref::compare(ref::run_reference(p), out.o_bits, nullptr);
  INFO(c.summary());
  CHECK(c.clean());
  CHECK(c.d < 2e-3);
  std::ifstream sf(prob + "/stats.json");
  nlohmann::json stats;
  sf >> stats;
  CHECK(stats["kernels"]["decode"] == "mla_decode_fp8fp8_h12_qs1_pg128");
  CHECK(stats["plan"].contains("units"));
  // The persistent grid: every resident workgroup of the device (the planner's workgroups).
  CHECK(stats["decode"]["workgroups"] >= stats["plan"]["cus_used"]);
  CHECK(stats["decode"].contains("global_read_distinct_bytes"));
}

TEST_CASE("mlarun: the catalog can come from MLA_CATALOG_DIR") {
  Dir d;
  std::string prob = (d.path / "p").string();
  REQUIRE(run(MLARUN_EXE, {"make-problem", prob, "--target", "gfx950", "--heads", "12", "--page-size", "1",
                           "--kv-lens", "40"}).exit_code == 0);
  setenv("MLA_CATALOG_DIR", k3_catalog().c_str(), 1);
  auto r = run(MLARUN_EXE, {"--problem", prob});
  unsetenv("MLA_CATALOG_DIR");
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("mlarun: no fitting kernel is an error that names the closest kernels") {
  Dir d;
  std::string prob = (d.path / "p").string();
  REQUIRE(run(MLARUN_EXE, {"make-problem", prob, "--target", "gfx950", "--heads", "16", "--page-size", "128",
                           "--kv-lens", "40"}).exit_code == 0);
  auto r = run(MLARUN_EXE, {"--catalog", k3_catalog(), "--problem", prob});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("no decode kernel for gfx950 q=fp8 kv=fp8 heads=16"));
  CHECK_THAT(r.err, Catch::Contains("Closest:"));
  CHECK_THAT(r.err, Catch::Contains("mla_decode_fp8fp8_h12_qs1_pg128 (gfx950)"));
}

TEST_CASE("mlarun: bad arguments are clear errors") {
  Dir d;
  auto bad_lens = run(MLARUN_EXE, {"make-problem", (d.path / "x").string(), "--kv-lens", "12,abc"});
  CHECK(bad_lens.exit_code == 1);
  CHECK_THAT(bad_lens.err, Catch::Contains("--kv-lens: 'abc' is not a positive token count"));
  auto bad_dtype = run(MLARUN_EXE, {"make-problem", (d.path / "x").string(), "--kv-lens", "12", "--dtype", "fp8"});
  CHECK(bad_dtype.exit_code == 1);
  CHECK_THAT(bad_dtype.err, Catch::Contains("fp8/fp8, bf16/fp8, bf16/bf16"));
  auto no_problem = run(MLARUN_EXE, {"--catalog", k3_catalog(), "--problem", (d.path / "missing").string()});
  CHECK(no_problem.exit_code == 1);
  CHECK_THAT(no_problem.err, Catch::Contains("missing"));
  auto no_catalog = run(MLARUN_EXE, {"--catalog", (d.path / "nowhere").string(), "--problem", (d.path / "x").string()});
  CHECK(no_catalog.exit_code == 1);
  CHECK_THAT(no_catalog.err, Catch::Contains("not a catalog directory"));
}
