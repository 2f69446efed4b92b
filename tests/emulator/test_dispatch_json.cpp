// `mlaemu run` JSON dispatches (library entry point and the CLI binary).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

#include "emu_test_util.h"
#include "emulator/dispatch_json.h"
#include "emulator/npy.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const char* kAxpy = R"(
__kernel void axpy(__global const float* x, __global float* y, float a, int n) {
  uint i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < (uint)n) y[i] = a * x[i] + y[i];
}
)";

std::string write_case(const std::string& dir) {
  fs::create_directories(dir);
  std::string co = compile_cl(kAxpy, Gfx::gfx950, "axpy_json");
  std::vector<float> x(100), y(100);
  for (int i = 0; i < 100; ++i) x[i] = float(i), y[i] = 1000.0f - i;
  mla::npy::save(dir + "/x.npy", mla::npy::make<float>("<f4", {100}, x));
  mla::npy::save(dir + "/y.npy", mla::npy::make<float>("<f4", {100}, y));
  nlohmann::json j = {
      {"code_object", co},
      {"kernel", "axpy"},
      {"grid", {2}},
      {"block", {64}},
      {"buffers", {{{"name", "x"}, {"init", "x.npy"}}, {{"name", "y"}, {"init", "y.npy"}, {"size", 512}, {"shape", {128}}, {"fill", 255}}}},
      {"kernarg", {{"fields", {{{"offset", 0}, {"buffer", "x"}}, {{"offset", 8}, {"buffer", "y"}},
                                {{"offset", 16}, {"type", "f32"}, {"value", 2.0}}, {{"offset", 20}, {"type", "i32"}, {"value", 100}}}}}},
      {"options", {{"per_workgroup", true}}},
      {"out_dir", "out"}};
  std::ofstream(dir + "/dispatch.json") << j.dump(2);
  return dir + "/dispatch.json";
}

void check_outputs(const std::string& dir) {
  auto y = mla::npy::load(dir + "/out/y.npy");
  REQUIRE(y.dtype == "<f4");
  REQUIRE(y.shape == std::vector<size_t>{128});
  const float* v = y.as<float>();
  for (int i = 0; i < 100; ++i) CHECK(v[i] == 2.0f * i + 1000.0f - i);
  uint32_t tail;
  std::memcpy(&tail, v + 120, 4);
  CHECK(tail == 0xffffffffu);  // poison fill beyond the initial data stays untouched
  std::ifstream cf(dir + "/out/counters.json");
  auto c = nlohmann::json::parse(cf);
  CHECK(c["workgroups"] == 2);
  CHECK(c["global_write_bytes"] == 400);
  CHECK(c["global_write_distinct_bytes"] == 400);
  CHECK(c["instructions"]["vmem_store"] == 2);
  CHECK(c["per_workgroup"].size() == 2);
}
}  // namespace

TEST_CASE("dispatch json: library entry point", "[json]") {
  std::string dir = (tmp_root() / "json_lib").string();
  auto res = run_dispatch_json(write_case(dir));
  CHECK(res["outputs"].contains("y"));
  check_outputs(dir);
}

TEST_CASE("dispatch json: errors name the problem", "[json]") {
  std::string dir = (tmp_root() / "json_err").string();
  fs::create_directories(dir);
  std::ofstream(dir + "/bad.json") << R"({"kernel": "x", "grid": [1], "block": [64]})";
  REQUIRE_THROWS_WITH(run_dispatch_json(dir + "/bad.json"), Catch::Contains("code_object"));
  std::ofstream(dir + "/bad2.json") << "{ not json";
  REQUIRE_THROWS_WITH(run_dispatch_json(dir + "/bad2.json"), Catch::Contains("invalid JSON"));
}

// Fuzzing found these (issue #15): values that wrapped or were truncated, a kernarg offset that
// corrupted the heap, a buffer name that wrote outside out_dir. Each is now an error naming the
// field, checked before anything runs.
TEST_CASE("dispatch json: out-of-range values and unsafe names are errors naming the field", "[json]") {
  std::string dir = (tmp_root() / "json_ranges").string();
  const std::string good = write_case(dir);
  auto with = [&](auto&& edit) {
    nlohmann::json j;
    {
      std::ifstream f(good);
      f >> j;
    }
    edit(j);
    std::ofstream(dir + "/edited.json") << j.dump(2);
    try {
      run_dispatch_json(dir + "/edited.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using Catch::Contains;
  CHECK_THAT(with([](auto& j) { j["kernarg"]["fields"][0]["offset"] = 4294967290ull; }),
             Contains("'kernarg.fields[0].offset' = 4294967290 (allowed: an integer in 0..65528)"));
  CHECK_THAT(with([](auto& j) { j["kernarg"]["fields"][0]["offset"] = 18446744073709551615ull; }),
             Contains("kernarg.fields[0].offset"));
  CHECK_THAT(with([](auto& j) { j["grid"] = {-1}; }), Contains("'grid[0]' = -1"));
  CHECK_THAT(with([](auto& j) { j["block"] = {1, 641, 6700417}; }), Contains("'block[2]' = 6700417 (allowed: an integer in 1..1024)"));
  CHECK_THAT(with([](auto& j) { j["block"] = {64, 32}; }), Contains("has 2048 items (allowed: at most 1024)"));
  CHECK_THAT(with([](auto& j) { j["buffers"][0]["name"] = "../../x"; }), Contains("buffer name '../../x'"));
  CHECK_THAT(with([](auto& j) { j["buffers"][0]["fill"] = 256; }), Contains("'buffers.x.fill' = 256"));
  CHECK_THAT(with([](auto& j) { j["buffers"][0]["dtype"] = "<u0"; }), Contains("'buffers.x.dtype'"));
  CHECK_THAT(with([](auto& j) { j["kernarg"]["fields"][3]["value"] = 4294967296ull; }),
             Contains("'kernarg.fields[3].value' = 4294967296"));
  CHECK_THAT(with([](auto& j) {
               j["kernarg"]["fields"].push_back({{"offset", 24}, {"type", "u8"}, {"value", 300}});
             }),
             Contains("'kernarg.fields[4].value' = 300 (allowed: an integer in 0..255)"));
  CHECK(with([](auto&) {}) == "no error");
}

TEST_CASE("dispatch json: mlaemu CLI (run, disasm, info, --help)", "[json]") {
  fs::path exe = fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "emulator" / "mlaemu";
  if (!fs::exists(exe)) {
    WARN("mlaemu not built next to the tests (" << exe << "); skipping the CLI test");
    return;
  }
  std::string dir = (tmp_root() / "json_cli").string();
  std::string json = write_case(dir);
  std::string out;
  REQUIRE(run_cmd(exe.string() + " run " + json, &out) == 0);
  check_outputs(dir);
  REQUIRE(run_cmd(exe.string() + " --help", &out) == 0);
  CHECK(out.find("disasm") != std::string::npos);
  REQUIRE(run_cmd(exe.string() + " run --help", &out) == 0);
  CHECK(out.find("--seed") != std::string::npos);
  REQUIRE(run_cmd(exe.string() + " disasm " + (tmp_root() / "axpy_json.co").string(), &out) == 0);
  CHECK(out.find("s_endpgm") != std::string::npos);
  REQUIRE(run_cmd(exe.string() + " info " + (tmp_root() / "axpy_json.co").string(), &out) == 0);
  CHECK(out.find("kernel axpy") != std::string::npos);
  REQUIRE(run_cmd(exe.string() + " check " + (tmp_root() / "axpy_json.co").string(), &out) == 0);
  CHECK(out.find("0 problem(s)") != std::string::npos);
  CHECK(run_cmd(exe.string() + " disasm /nonexistent.co", &out) != 0);
  CHECK(out.find("cannot open") != std::string::npos);
}
