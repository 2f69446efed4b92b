// Builds MLA kernels for a shape into a temporary catalog (the product's own path: config ->
// mlagen's build_catalog -> catalog.json), then runs problems through the runtime's emulator
// backend and compares with the fp64 reference.
#pragma once
#include <catch2/catch.hpp>
#include <functional>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <memory>
#include <string>

#include "catalog/catalog.h"
#include "config/config.h"
#include "tests/reference/mla_reference.h"
#include "runtime/catalog.h"
#include "runtime/emulator_backend.h"

namespace mla::test {

// One temporary catalog per distinct shape, built once per test process.
inline const rt::Catalog& catalog_for(const rt::DecodeShape& s) {
  static std::map<std::string, std::unique_ptr<rt::Catalog>> cache;
  std::string key = s.describe();
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  std::string dir = (std::filesystem::temp_directory_path() /
                     fmt::format("mla-e2e-{}-{}", getpid(), cache.size())).string();
  const std::string rows = s.sparse ? R"("attention": "sparse")"
                                     : fmt::format(R"("qseqlen": {}, "page_size": {}, "logit_cap": {})", s.qseqlen,
                                                   s.page_size, s.logit_cap ? "true" : "false");
  std::string cfg = fmt::format(
      R"({{"deployment": "e2e", "kernels": [{{"kind": "mla_decode", "target": "{}", "heads": {}, "q_dtype": "{}",
          "kv_dtype": "{}", {}, "return_lse": {}}}]}})",
      rt::name(s.target), s.heads, rt::name(s.q_dtype), s.kv_name(), rows, s.return_lse ? "true" : "false");
  // A fresh directory: one an earlier process of the same pid left may hold another catalog
  // (another generator's), which the build would keep beside this shape's kernels.
  std::filesystem::remove_all(dir);
  gen::BuildOptions opts;
  opts.out_dir = dir;
  opts.jobs = 2;
  gen::build_catalog({gen::parse_config(cfg, "e2e.json")}, opts);
  auto [it, _] = cache.emplace(key, std::make_unique<rt::Catalog>(rt::Catalog::open(dir)));
  return *it->second;
}

struct E2E {
  rt::Problem problem;
  rt::DecodeResult result;
  ref::Compare cmp;
};

// edit: changes the random problem (e.g. its Q values) before the run and the reference.
// prefix_rows: the prefix kernel to select (rt::DecodeShape::prefix_rows: 0 default, 192 wide).
inline E2E run_e2e(const rt::ProblemParams& params, const rt::EmulatorRunOptions& opts = {},
                   const std::function<void(rt::Problem&)>& edit = {}, int prefix_rows = 0) {
  E2E e;
  e.problem = rt::make_random_problem(params);
  if (edit) edit(e.problem);
  const rt::Catalog& cat = catalog_for(rt::shape_of(e.problem));
  rt::DecodeShape shape = rt::shape_of(e.problem);
  shape.prefix_rows = prefix_rows;
  e.result = rt::run_decode_on_emulator(e.problem, cat.select(shape), opts);
  ref::Reference want = ref::run_reference(e.problem);
  e.cmp = ref::compare(want, e.result.o, e.problem.return_lse ? &e.result.lse : nullptr);
  return e;
}

// The e2e bounds (test_mla_decode.cpp and test_sparse_decode.cpp): bf16 q d <= 1e-5, max error
// <= 1e-2 max|ref|, lse within 1e-3; fp8 q d <= 3e-3, max error <= 5e-2 max|ref|. Global bytes read
// within 1.03x of what the plan needs. fp8 P: lse = m + log(l) with l the sum of the fp8-rounded P
// that O is normalised by (MlaDecodePlan::sum_rounded_p): the weight that merges this O exactly; it
// differs from the exact log-sum-exp by the rounding of P, at most log(1 + 2^-4) = 0.0606 (e4m3
// RNE), so the lse bound is 0.0625 there. A row with no token (o = 0, lse = -inf) compares equal.
inline void check_accuracy(const E2E& e) {
  INFO(rt::shape_of(e.problem).describe() << ": " << e.cmp.summary());
  INFO("traffic: " << e.result.traffic.to_json().dump());
  CHECK(e.cmp.clean());
  const bool bf16_q = e.problem.q_dtype == rt::DType::bf16;
  CHECK(e.cmp.d <= (bf16_q ? 1e-5 : 3e-3));
  CHECK(e.cmp.max_abs_err <= (bf16_q ? 1e-2 : 5e-2) * e.cmp.max_abs_ref);
  const bool fp8_p = e.problem.q_dtype == rt::DType::fp8 && e.problem.kv_dtype == rt::DType::fp8;
  if (e.problem.return_lse) CHECK(e.cmp.lse_max_abs_err <= (bf16_q ? 1e-3 : fp8_p ? 0.0625 : 1e-2));
  CHECK(e.result.traffic.ratio() <= 1.03);
}

}  // namespace mla::test
