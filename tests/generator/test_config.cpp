// Config validation: every bad input names the file, the field, the value and what is allowed.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "config/config.h"
#include "test_util.h"

using namespace mla::gen;

namespace {

std::string entry(const std::string& fields) {
  return R"({"deployment": "t", "kernels": [{ )" + fields + "}]}";
}

const std::string kGood = R"("target": "gfx950", "heads": 12, "q_dtype": "fp8", "kv_dtype": "fp8", "qseqlen": 1, "page_size": [1, 128])";

// Parses and returns the ConfigError message (fails the test if there is none).
std::string error_of(const std::string& text, const std::string& path = "configs/bad.json") {
  try {
    parse_config(text, path);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError for: " << text);
  return {};
}

}  // namespace

TEST_CASE("a good config expands lists into kernels with shape names") {
  Config c = parse_config(entry(kGood), "configs/k3.json");
  REQUIRE(c.kernels.size() == 7);
  CHECK(c.kernels[0].name() == "mla_decode_fp8fp8_h12_qs1_pg1");
  CHECK(c.kernels[1].name() == "mla_decode_fp8fp8_h12_qs1_pg128");
  CHECK(c.kernels[1].arch == Arch::gfx950);
  CHECK(c.kernels[1].source_config == "configs/k3.json");
  // Both page sizes share one implied reduce kernel; each has its implied prefix kernel.
  CHECK(c.kernels[2].name() == "mla_reduce_h12_qs1");
  CHECK(c.kernels[2].implied);
  CHECK(c.kernels[3].name() == "mla_prefix_fp8fp8_h12_qs1_pg1");
  // One merge_attn_states kernel per target.
  CHECK(c.kernels[4].name() == "mla_merge_attn_states");
  CHECK(c.kernels[4].kind == KernelKind::MlaMerge);
  CHECK(c.kernels[5].name() == "mla_prefix_fp8fp8_h12_qs1_pg128");
  CHECK(c.kernels[5].kind == KernelKind::MlaPrefix);
  CHECK(c.kernels[5].implied);
  // Page 128 (not 1: pages under a 16-token sub-slot) also implies the wide prefix kernel.
  CHECK(c.kernels[6].name() == "mla_prefix_fp8fp8_h12_qs1_pg128_r192");
  CHECK(c.kernels[6].prefix_rows == 192);
  CHECK(c.kernels[6].implied);
}

TEST_CASE("every field takes a list: the kernels are the cross product") {
  Config c = parse_config(entry(R"("target": ["gfx942", "gfx950"], "heads": [8, 32], "q_dtype": "bf16", "kv_dtype": ["fp8", "bf16"], "qseqlen": 2, "page_size": 16, "return_lse": [false, true])"),
                          "configs/x.json");
  std::set<std::string> names;
  int decode = 0;
  for (const auto& k : c.kernels)
    if (k.kind == KernelKind::MlaDecode) ++decode, names.insert(fmt::format("{}@{}", k.name(), arch_name(k.arch)));
  CHECK(decode == 2 * 2 * 2 * 2);
  CHECK(names.count("mla_decode_bf16fp8_h32_qs2_pg16_lse@gfx942"));
  CHECK(names.count("mla_decode_bf16bf16_h8_qs2_pg16@gfx950"));
  // The pair rule holds for every combination.
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": ["bf16", "fp8"], "kv_dtype": ["fp8", "bf16"], "page_size": 1)")),
             Catch::Contains("q_dtype fp8 with kv_dtype bf16 is not supported"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": [16, 129], "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].heads: 129 is not supported (allowed: 1..128)"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": [], "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].heads: empty list"));
}

TEST_CASE("variant knobs appear in the kernel name") {
  Config c = parse_config(entry(R"("target": "gfx942", "heads": 16, "q_dtype": "bf16", "kv_dtype": "fp8", "qseqlen": 4, "page_size": 16, "return_lse": true, "logit_cap": true)"), "x.json");
  REQUIRE(c.kernels.size() == 4);
  CHECK(c.kernels[0].name() == "mla_decode_bf16fp8_h16_qs4_pg16_lse_softcap");
  CHECK(c.kernels[1].name() == "mla_reduce_h16_qs4_lse");
  CHECK(c.kernels[2].name() == "mla_prefix_bf16fp8_h16_qs4_pg16_softcap");  // partials carry their lse always
}

TEST_CASE("unknown key is named with the allowed keys") {
  std::string e = error_of(entry(kGood + R"(, "hedas": 12)"));
  CHECK_THAT(e, Catch::Contains("configs/bad.json"));
  CHECK_THAT(e, Catch::Contains("kernels[0].hedas"));
  CHECK_THAT(e, Catch::Contains("unknown key"));
  CHECK_THAT(e, Catch::Contains("heads"));
}

TEST_CASE("unknown top-level key is named") {
  std::string e = error_of(R"({"deployment": "t", "kernel": []})");
  CHECK_THAT(e, Catch::Contains("kernel: unknown key"));
}

TEST_CASE("heads outside 1..128 are rejected with the allowed range / 7 heads build natively") {
  for (const char* h : {"0", "129", "-3"}) {
    std::string e = error_of(entry(fmt::format(R"("target": "gfx950", "heads": {}, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)", h)));
    CHECK_THAT(e, Catch::Contains("kernels[0].heads"));
    CHECK_THAT(e, Catch::Contains(std::string(h) + " is not supported (allowed: 1..128)"));
  }
  Config c = parse_config(entry(R"("target": "gfx950", "heads": [7, 96], "q_dtype": "fp8", "kv_dtype": "fp8", "qseqlen": [5, 8], "page_size": 1)"), "x.json");
  CHECK(c.kernels[0].name() == "mla_decode_fp8fp8_h7_qs5_pg1");
  CHECK(c.kernels[3].name() == "mla_decode_fp8fp8_h96_qs8_pg1");
}

TEST_CASE("logit_cap is a switch in a config / a cap value is refused with where the value goes") {
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1, "logit_cap": 30.0)")),
             Catch::Contains("kernels[0].logit_cap: 30.0 is not a boolean (allowed: true, false: true builds the _softcap kernel"));
  Config c = parse_config(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1, "logit_cap": true)"), "x.json");
  CHECK(c.kernels[0].name() == "mla_decode_fp8fp8_h16_qs1_pg1_softcap");
}

TEST_CASE("fp8 q with bf16 kv is rejected with the allowed pairs") {
  std::string e = error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "bf16", "page_size": 1)"));
  CHECK_THAT(e, Catch::Contains("kernels[0]"));
  CHECK_THAT(e, Catch::Contains("fp8/fp8, bf16/fp8, bf16/bf16"));
}

TEST_CASE("page size 3 is rejected with the allowed sizes") {
  std::string e = error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": [1, 3])"));
  CHECK_THAT(e, Catch::Contains("kernels[0].page_size"));
  CHECK_THAT(e, Catch::Contains("3 is not supported"));
  CHECK_THAT(e, Catch::Contains("1, 2, 4, 8, 16, 32, 64, 128, 256"));
}

TEST_CASE("unknown target is rejected with the allowed targets") {
  std::string e = error_of(entry(R"("target": "gfx90a", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].target"));
  CHECK_THAT(e, Catch::Contains("\"gfx90a\""));
  CHECK_THAT(e, Catch::Contains("gfx942, gfx950"));
}

TEST_CASE("qseqlen outside 1..4, wrong types, missing fields and bad JSON are named") {
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "qseqlen": 9, "page_size": 1)")),
             Catch::Contains("kernels[0].qseqlen: 9 is not supported (allowed: 1..8)"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": "12", "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].heads: \"12\" is not an integer"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].heads: missing"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp4", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].q_dtype: \"fp4\" is not supported (allowed: fp8, bf16)"));
  CHECK_THAT(error_of(entry(R"("kind": "mla_prefill", "target": "gfx950")")), Catch::Contains("kernels[0].kind"));
  CHECK_THAT(error_of(R"({"deployment": "t", "kernels": [)"), Catch::Contains("configs/bad.json: not valid JSON"));
  CHECK_THAT(error_of(R"({"deployment": "t", "kernels": []})"), Catch::Contains("kernels: missing or empty"));
}

// Fuzzing found these (issue #15): a value that narrows to an allowed one, and a number that
// overflows the parser, each named with file and field instead of a wrong kernel or an escape.
TEST_CASE("integers out of range are rejected before narrowing / overflowing numbers name the file") {
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 4294967304, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("configs/bad.json: kernels[0].heads: 4294967304 is not supported (allowed: 1..128)"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": -4294967284, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("kernels[0].heads: -4294967284 is not supported"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 16, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 18446744073709551617)")),
             Catch::Contains("kernels[0].page_size"));
  CHECK_THAT(error_of(entry(R"("target": "gfx950", "heads": 1e400, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)")),
             Catch::Contains("configs/bad.json: not valid JSON") && Catch::Contains("1e400"));
}

TEST_CASE("two entries of one config producing the same kernel are rejected") {
  std::string text = R"({"deployment": "t", "kernels": [{ )" + kGood + "}, {" + kGood + "}]}";
  std::string e = error_of(text);
  CHECK_THAT(e, Catch::Contains("kernels[1]"));
  CHECK_THAT(e, Catch::Contains("mla_decode_fp8fp8_h12_qs1_pg1 for gfx950 is also produced by kernels[0]"));
}

TEST_CASE("two configs implying the same reduce kernel are not in conflict") {
  TempDir dir;
  std::string a = dir.write("a.json", entry(R"("target": "gfx950", "heads": 12, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 1)"));
  std::string b = dir.write("b.json", entry(R"("target": "gfx950", "heads": 12, "q_dtype": "fp8", "kv_dtype": "fp8", "page_size": 128)"));
  auto configs = load_configs({a, b});
  CHECK(configs.size() == 2);
}

TEST_CASE("two configs producing the same kernel name are rejected, naming both files") {
  TempDir dir;
  std::string a = dir.write("a.json", entry(kGood));
  std::string b = dir.write("b.json", entry(kGood));
  try {
    load_configs({a, b});
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains(a));
    CHECK_THAT(msg, Catch::Contains(b));
    CHECK_THAT(msg, Catch::Contains("mla_decode_fp8fp8_h12_qs1_pg1"));
  }
}

TEST_CASE("the shipped configs are valid and cover the deployments") {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(mla::build::kSourceDir) + "/configs"))
    files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  auto configs = load_configs(files);
  bool k3 = false, k27 = false, ds942 = false, ds950 = false, dsa942 = false, dsa950 = false;
  for (const auto& c : configs)
    for (const auto& s : c.kernels) {
      if (!s.is_mla()) continue;
      k3 |= s.arch == Arch::gfx950 && s.heads == 12 && s.q_dtype == DType::fp8 && s.kv_dtype == DType::fp8 &&
            s.qseqlen == 1 && s.page_size == 128;
      k27 |= s.arch == Arch::gfx942 && s.heads == 16 && s.q_dtype == DType::bf16 && s.kv_dtype == DType::fp8;
      ds942 |= s.arch == Arch::gfx942 && s.heads == 16 && c.deployment.find("DeepSeek") != std::string::npos;
      ds950 |= s.arch == Arch::gfx950 && s.heads == 16 && c.deployment.find("DeepSeek") != std::string::npos;
      // DSA: FlashMLA's fp8_ds_mla at V3.2 TP8's 16 heads and GLM-5 TP8's 8, both targets.
      const bool dsa = s.kind == KernelKind::MlaDecode && s.sparse && s.kv_ds_mla && (s.heads == 16 || s.heads == 8);
      dsa942 |= dsa && s.arch == Arch::gfx942;
      dsa950 |= dsa && s.arch == Arch::gfx950;
    }
  CHECK(k3);
  CHECK(k27);
  CHECK(ds942);
  CHECK(ds950);
  CHECK(dsa942);
  CHECK(dsa950);
}

TEST_CASE("sparse attention: one kernel per heads and dtypes, its reduce implied, no prefix kernel") {
  Config c = parse_config(entry(R"("target": ["gfx942", "gfx950"], "heads": [16, 128], "q_dtype": "bf16",
                                   "kv_dtype": "fp8", "attention": "sparse", "return_lse": true)"),
                          "configs/v32.json");
  std::set<std::string> names;
  for (const KernelSpec& k : c.kernels) {
    names.insert(k.name());
    if (k.kind == KernelKind::MlaDecode) {
      CHECK(k.sparse);
      CHECK(k.page_size == 1);
      CHECK(k.qseqlen == 1);
      CHECK(k.to_json()["attention"] == "sparse");
    }
    CHECK(k.kind != KernelKind::MlaPrefix);
  }
  CHECK(names == std::set<std::string>{"mla_decode_bf16fp8_h16_sparse_lse", "mla_decode_bf16fp8_h128_sparse_lse",
                                       "mla_reduce_h16_qs1_lse", "mla_reduce_h128_qs1_lse"});
  CHECK(c.kernels.size() == 8);  // both targets
  CHECK(parse_config(entry(kGood), "k.json").kernels[0].to_json()["attention"] == "dense");
}

TEST_CASE("sparse attention: page_size, qseqlen > 1, a soft cap and unknown attention kinds are refused, named") {
  const std::string base = R"("target": "gfx950", "heads": 16, "q_dtype": "bf16", "kv_dtype": "bf16", )";
  std::string e = error_of(entry(base + R"("attention": "sparse", "page_size": 64)"));
  CHECK_THAT(e, Catch::Contains("configs/bad.json") && Catch::Contains("kernels[0].page_size") &&
                    Catch::Contains("block * page_block_size + offset"));
  e = error_of(entry(base + R"("attention": "sparse", "qseqlen": 2)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].qseqlen") && Catch::Contains("2 with attention") && Catch::Contains("allowed: 1"));
  CHECK_NOTHROW(parse_config(entry(base + R"("attention": "sparse", "qseqlen": 1)"), "ok.json"));
  e = error_of(entry(base + R"("attention": "sparse", "logit_cap": true)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].logit_cap") && Catch::Contains("allowed: false"));
  e = error_of(entry(base + R"("attention": "mixed", "page_size": 1)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].attention") && Catch::Contains("dense") && Catch::Contains("sparse"));
  e = error_of(entry(base + R"("attention": "dense")"));
  CHECK_THAT(e, Catch::Contains("kernels[0].page_size") && Catch::Contains("missing"));
}

TEST_CASE("the DSA indexer: heads x next_n x block_size logits kernels, the top-k implied once per target") {
  Config c = parse_config(entry(R"("kind": "dsa_indexer_logits", "target": ["gfx942", "gfx950"], "heads": [64, 12],
                                   "next_n": [1, 4], "block_size": [1, 64])"),
                          "configs/idx.json");
  std::set<std::string> names;
  int topk = 0;
  for (const KernelSpec& k : c.kernels) {
    names.insert(k.name());
    if (k.kind == KernelKind::DsaTopk) {
      ++topk;
      CHECK(k.implied);
    }
  }
  CHECK(topk == 2);  // one per target
  CHECK(names.count("dsa_indexer_logits_fp8_h64_nn4_pg64"));
  CHECK(names.count("dsa_indexer_logits_fp8_h12_nn1_pg1"));
  CHECK(names.count("dsa_topk_per_row_decode"));
  CHECK(c.kernels.size() == 2 * 8 + 2);
  // Defaults: next_n 1, block size 64 (DeepGEMM's).
  Config d = parse_config(entry(R"("kind": "dsa_indexer_logits", "target": "gfx950", "heads": 32)"), "d.json");
  CHECK(d.kernels[0].name() == "dsa_indexer_logits_fp8_h32_nn1_pg64");
}

TEST_CASE("the DSA indexer: rows past the registers, next_n, block sizes and decode keys are refused, named") {
  const std::string base = R"("kind": "dsa_indexer_logits", "target": "gfx950", )";
  std::string e = error_of(entry(base + R"("heads": 128, "next_n": 4)"));
  CHECK_THAT(e, Catch::Contains("kernels[0]") && Catch::Contains("512 query rows") && Catch::Contains("at most 256"));
  e = error_of(entry(base + R"("heads": 64, "next_n": 5)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].next_n") && Catch::Contains("1..4"));
  e = error_of(entry(base + R"("heads": 64, "block_size": 48)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].block_size") && Catch::Contains("48 is not supported"));
  e = error_of(entry(base + R"("heads": 64, "page_size": 64)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].page_size") && Catch::Contains("unknown key"));
  e = error_of(entry(base + R"("next_n": 2)"));
  CHECK_THAT(e, Catch::Contains("kernels[0].heads") && Catch::Contains("missing"));
}
