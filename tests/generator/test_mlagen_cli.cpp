// The mlagen command line: build (parallel, incremental, atomic), list, asm, check, --help.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "catalog/compile.h"
#include "codeobj/tools.h"
#include "test_util.h"

using namespace mla::gen;
namespace fs = std::filesystem;

namespace {

ToolResult mlagen(std::vector<std::string> args) {
  args.insert(args.begin(), MLAGEN_EXE);
  return run_tool(args);
}

std::string config_path(const std::string& name) { return std::string(mla::build::kSourceDir) + "/configs/" + name; }

}  // namespace

TEST_CASE("mlagen build writes the catalog, and a second run rebuilds nothing") {
  TempDir dir;
  std::string out = (dir.path / "out").string();
  ToolResult r = mlagen({"build", config_path("pipeline_smoke.json"), config_path("kimi_k3_tp8_gfx950.json"), "--out", out, "-j", "2"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("[16/16]"));
  CHECK_THAT(r.err, Catch::Contains("16 built, 0 up to date"));
  for (const char* gfx : {"gfx942", "gfx950"}) {
    fs::path mla = fs::path(out) / "hsa" / gfx / "mla";
    std::ifstream f(mla / "catalog.json");
    nlohmann::json cat;
    f >> cat;
    CHECK(cat["target"] == gfx);
    REQUIRE(cat["kernels"].size() == (std::string(gfx) == "gfx950" ? 13u : 3u));  // K3: 4 decode (lse or not), 2 reduce, 2 prefix, merge
    for (const auto& k : cat["kernels"]) {
      fs::path co = mla / k["co"].get<std::string>();
      REQUIRE(fs::exists(co));
      CHECK(k["co_sha256"] == sha256_file(co.string()));
      CHECK(k["target_id"] == std::string(gfx) + ":sramecc+:xnack-");
      CHECK(k["generator_version"] == MLA_GENERATOR_VERSION);
      CHECK_THAT(k["source_config"].get<std::string>(), Catch::StartsWith(std::string(mla::build::kSourceDir) + "/configs/"));
      CHECK(k["args"].size() >= 3);
      // The scheduler never makes a region slower in its model, and it moves the decode kernels.
      const auto& sch = k["schedule"];
      CHECK(sch["modeled_issue_slots_scheduled"].get<int>() <= sch["modeled_issue_slots_program_order"].get<int>());
      if (k["name"].get<std::string>().rfind("mla_decode", 0) == 0) {
        CHECK(sch["instructions_moved"].get<int>() > 0);
        CHECK(sch["modeled_issue_slots_scheduled"].get<int>() < sch["modeled_issue_slots_program_order"].get<int>());
        // Every decode kernel records its plan (kernels/mla_decode_plan.h).
        REQUIRE(k.contains("decode_plan"));
        CHECK_THAT(k["decode_plan"]["v_path"].get<std::string>(),
                   Catch::StartsWith(std::string(gfx) == "gfx950" ? "ds_read_b64_tr_b" : "8-column reads"));
      }
    }
    // Our csv index is not aiter's mla_asm.csv (docs/engines.md "The catalog and aiter's tree"):
    // its own name, and none of the columns aiter's hsa/codegen.py keys on.
    CHECK_FALSE(fs::exists(mla / "mla_asm.csv"));
    std::ifstream csv(mla / "mlagen_kernels.csv");
    REQUIRE(csv.good());
    std::string header;
    std::getline(csv, header);
    CHECK(header == "kernel,code_object,q_dtype,kv_dtype,heads,qseqlen,page_size,lse,softcap");
    for (const char* aiter_key : {"knl_name", "co_name", "qType", "kvType", "Gqa", "qSeqLen"})
      CHECK(("," + header + ",").find(std::string(",") + aiter_key + ",") == std::string::npos);
    std::string rows((std::istreambuf_iterator<char>(csv)), std::istreambuf_iterator<char>());
    if (std::string(gfx) == "gfx950")
      CHECK(rows == "mla_decode_fp8fp8_h12_qs1_pg1,mla_decode_fp8fp8_h12_qs1_pg1.co,fp8,fp8,12,1,1,0,0\n"
                    "mla_decode_fp8fp8_h12_qs1_pg1_lse,mla_decode_fp8fp8_h12_qs1_pg1_lse.co,fp8,fp8,12,1,1,1,0\n"
                    "mla_decode_fp8fp8_h12_qs1_pg128,mla_decode_fp8fp8_h12_qs1_pg128.co,fp8,fp8,12,1,128,0,0\n"
                    "mla_decode_fp8fp8_h12_qs1_pg128_lse,mla_decode_fp8fp8_h12_qs1_pg128_lse.co,fp8,fp8,12,1,128,1,0\n");
    else
      CHECK(rows.empty());  // pipeline kernels are not MLA kernels
    // No staging leftovers.
    for (const auto& e : fs::directory_iterator(out)) CHECK(e.path().filename().string().rfind(".staging", 0) != 0);
  }
  auto mtime = fs::last_write_time(fs::path(out) / "hsa/gfx942/mla/pipe_vector_copy_b32.co");
  ToolResult again = mlagen({"build", config_path("pipeline_smoke.json"), config_path("kimi_k3_tp8_gfx950.json"), "--out", out, "-j", "2"});
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.err, Catch::Contains("0 built, 16 up to date"));
  CHECK(fs::exists(fs::path(out) / "hsa/gfx942/mla/pipe_vector_copy_b32.co"));
  CHECK_THAT(again.err, !Catch::Contains("kept as it was"));
  (void)mtime;
  // A build of fewer targets leaves the others' catalogs in place, and says so.
  ToolResult k3 = mlagen({"build", config_path("kimi_k3_tp8_gfx950.json"), "--out", out, "-j", "2"});
  REQUIRE(k3.exit_code == 0);
  CHECK_THAT(k3.err, Catch::Contains("0 built, 10 up to date"));
  CHECK_THAT(k3.err, Catch::Contains(out + "/hsa/gfx942/mla kept as it was: no config of this build targets gfx942"));
  CHECK_THAT(k3.err, !Catch::Contains("gfx950/mla kept"));
  CHECK(fs::exists(fs::path(out) / "hsa/gfx942/mla/catalog.json"));

  ToolResult list = mlagen({"list", out});
  REQUIRE(list.exit_code == 0);
  CHECK_THAT(list.out, Catch::Contains("pipe_mfma_16x16x32_fp8"));
  CHECK_THAT(list.out, Catch::Contains("mla_decode_fp8fp8_h12_qs1_pg128"));
  CHECK_THAT(list.out, Catch::Contains("wg/cu"));  // occupancy from catalog.json
}

TEST_CASE("mlagen build with a bad config exits non-zero and leaves nothing in out/") {
  TempDir dir;
  std::string bad = dir.write("bad.json", R"({"deployment": "x", "kernels": [{"target": "gfx950", "heads": 200, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1}]})");
  std::string out = (dir.path / "out").string();
  ToolResult r = mlagen({"build", config_path("pipeline_smoke.json"), bad, "--out", out});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains(bad + ": kernels[0].heads: 200 is not supported"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("mlagen build: a kernel the assembler rejects names its assembly where it is kept") {
  TempDir dir;
  std::string fake = dir.write("fake-llvm-mc", "#!/bin/sh\necho 'error: rejected by the test' >&2\nexit 3\n");
  fs::permissions(fake, fs::perms::owner_all);
  std::string out = (dir.path / "out").string();
  setenv("MLA_LLVM_MC", fake.c_str(), 1);
  ToolResult r = mlagen({"build", config_path("pipeline_smoke.json"), "--out", out});
  unsetenv("MLA_LLVM_MC");
  INFO(r.err);
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("rejected by the test"));
  const fs::path kept = fs::path(out) / "failed" / "gfx942_pipe_vector_copy_b32.s";
  CHECK_THAT(r.err, Catch::Contains("its assembly is kept at " + kept.string()));
  CHECK(fs::exists(kept));
  CHECK_FALSE(fs::exists(fs::path(out) / "hsa"));
}

TEST_CASE("mlagen: a missing config is an error like any other (file named, exit 1)") {
  TempDir dir;
  const std::string missing = (dir.path / "nope.json").string();
  for (const char* cmd : {"build", "check"}) {
    std::vector<std::string> args{cmd, missing};
    if (std::string(cmd) == "build") args.insert(args.end(), {"--out", (dir.path / "out").string()});
    ToolResult r = mlagen(args);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Catch::Contains(missing + ": cannot read config file"));
  }
}

TEST_CASE("mlagen build over an existing catalog keeps it when a config is bad") {
  TempDir dir;
  std::string out = (dir.path / "out").string();
  REQUIRE(mlagen({"build", config_path("pipeline_smoke.json"), "--out", out}).exit_code == 0);
  std::string before = sha256_file(out + "/hsa/gfx950/mla/catalog.json");
  std::string bad = dir.write("dup.json", R"({"deployment": "x", "kernels": [{"kind": "vector_copy", "target": "gfx950"}]})");
  ToolResult r = mlagen({"build", config_path("pipeline_smoke.json"), bad, "--out", out});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("pipe_vector_copy_b32"));
  CHECK_THAT(r.err, Catch::Contains("also produced by"));
  CHECK(sha256_file(out + "/hsa/gfx950/mla/catalog.json") == before);
}

TEST_CASE("mlagen check, asm and --help") {
  ToolResult check = mlagen({"check", config_path("deepseek_v3_tp8.json")});
  REQUIRE(check.exit_code == 0);
  CHECK_THAT(check.out, Catch::Contains("mla_decode_fp8fp8_h16_qs2_pg64"));
  CHECK_THAT(check.out, Catch::Contains("mla_decode_bf16bf16_h16_qs1_pg64_lse"));

  ToolResult a = mlagen({"asm", config_path("pipeline_smoke.json"), "pipe_fp8_dequant_f32", "--target", "gfx942"});
  REQUIRE(a.exit_code == 0);
  CHECK_THAT(a.out, Catch::Contains("v_cvt_pk_f32_fp8"));
  CHECK_THAT(a.out, Catch::Contains("gfx942:sramecc+:xnack-"));
  ToolResult ambiguous = mlagen({"asm", config_path("pipeline_smoke.json"), "pipe_fp8_dequant_f32"});
  CHECK(ambiguous.exit_code != 0);
  CHECK_THAT(ambiguous.err, Catch::Contains("--target"));
  ToolResult missing = mlagen({"asm", config_path("pipeline_smoke.json"), "nope"});
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.err, Catch::Contains("pipe_vector_copy_b32"));

  for (const char* sub : {"build", "list", "asm", "check"}) {
    ToolResult h = mlagen({sub, "--help"});
    CHECK(h.exit_code == 0);
    CHECK_THAT(h.out, Catch::Contains("Usage"));
  }
}
