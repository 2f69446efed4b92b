// The calibration on aiter's tuned tables (bench/calibrate.h) on small tables written here; CI has
// no aiter checkout. Expected values are computed by hand (in the comments) or by the law the
// synthetic rows were generated from, never by the code under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>

#include "bench/bench.h"
#include "bench/calibrate.h"
#include "target/target.h"

using namespace mla::bench;
using namespace mla::bench::cal;

namespace {

const char* kBlockscaleHeader = "gfx,cu_num,M,N,K,libtype,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n";
const char* kBf16Header =
    "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,err_ratio,tflops,bw\n";
const char* kBlockscaleKernel =
    "a8w8_blockscale_1x128x128_256x16x64x256_16x16_16x16_1x1_16x16x1_16x16x1_1x16x1x16_4_1x1_intrawave_v1";

TunedRow row(const std::string& family, int64_t m, int64_t n, int64_t k, const std::string& kernel = "", int split_k = 0) {
  TunedRow r;
  r.file = "t.csv", r.gfx = "gfx950", r.cu_num = 256, r.m = m, r.n = n, r.k = k, r.kernel = kernel, r.split_k = split_k;
  r.family = family, r.us = 10;
  if (family == "bf16") r.w_bytes = r.a_bytes = r.out_bytes = 2;
  else r.w_bytes = r.a_bytes = family == "a4w4 blockscale" ? 0.5 : 1, r.out_bytes = 2;
  return r;
}

}  // namespace

TEST_CASE("calibrate: a tuned GEMM table parses into rows with the family's element sizes") {
  Tables t;
  parse_tuned_csv("a8w8_blockscale_tuned_gemm.csv",
                  std::string(kBlockscaleHeader) + "gfx950,256,1,2048,3072,ck,8,2,4.8294," + kBlockscaleKernel +
                      ",2.61,1304.22,0.0\r\ngfx942,304,16,7168,2048,ck,8,0,9.5,a8w8_blockscale_cktile_32x128x128_1x4x1_16x16x64_intrawave_0x1x0_4,1,1,0\n",
                  t);
  parse_tuned_csv("dsv3_bf16_tuned_gemm.csv",
                  std::string(kBf16Header) +
                      "gfx950,256,1,151936,4096,False,torch.bfloat16,torch.float32,False,False,triton,0,0,182.8682,auto,0.0,6.81,6808.03\n",
                  t);
  REQUIRE(t.rows.size() == 3);
  CHECK(t.files == std::vector<std::string>{"a8w8_blockscale_tuned_gemm.csv", "dsv3_bf16_tuned_gemm.csv"});
  const TunedRow& a = t.rows[0];
  CHECK(a.gfx == "gfx950");
  CHECK(a.cu_num == 256);
  CHECK((a.m == 1 && a.n == 2048 && a.k == 3072));
  CHECK(a.split_k == 2);
  CHECK(a.us == 4.8294);
  CHECK(a.kernel == kBlockscaleKernel);
  CHECK(a.line == 2);
  CHECK(a.family == "a8w8 blockscale");
  CHECK((a.w_bytes == 1 && a.a_bytes == 1 && a.out_bytes == 2));
  CHECK(t.rows[1].line == 3);
  CHECK(t.rows[1].kernel.find("cktile") != std::string::npos);  // the \r of a CRLF line is not part of a field
  const TunedRow& b = t.rows[2];
  CHECK(b.family == "bf16");
  CHECK((b.w_bytes == 2 && b.a_bytes == 2 && b.out_bytes == 4));  // outdtype torch.float32
  CHECK(b.us == 182.8682);
}

TEST_CASE("calibrate: tables that are not plain GEMMs are skipped with the reason") {
  Tables t;
  parse_tuned_csv("tuned_fmoe.csv", "cu_num,token,model_dim,inter_dim,expert,topk,us\n256,1,7168,256,256,8,20.5\n", t);
  parse_tuned_csv("a8w8_tuned_batched_gemm.csv",
                  "gfx,cu_num,B,M,N,K,kernelId,splitK,us,kernelName\ngfx942,304,16,32,1280,8192,28,0,68.9,x\n", t);
  parse_tuned_csv("fp16_tuned_gemm.csv", "gfx,cu_num,M,N,K,kernelId,splitK,us,kernelName\ngfx942,304,1,1,1,0,0,5,x\n", t);
  CHECK(t.rows.empty());
  CHECK(t.files.empty());
  REQUIRE(t.skipped.size() == 3);
  CHECK(t.skipped[0].reason == "not a GEMM table (no gfx column)");
  CHECK(t.skipped[0].rows == 1);
  CHECK_THAT(t.skipped[1].reason, Catch::Contains("batched"));
  CHECK_THAT(t.skipped[2].reason, Catch::Contains("element sizes unknown"));
}

TEST_CASE("calibrate: a malformed value names the file, line, field and value") {
  Tables t;
  const auto bad = [&](const std::string& line) {
    parse_tuned_csv("a8w8_blockscale_tuned_gemm.csv", std::string(kBlockscaleHeader) + "gfx950,256,1,2048,3072,ck,8,2,4.8,k,1,1,0\n" + line, t);
  };
  CHECK_THROWS_WITH(bad("gfx950,256,1,2048,3072,ck,8,2,4.8us,k,1,1,0\n"),
                    Catch::Contains("a8w8_blockscale_tuned_gemm.csv line 3: field us is '4.8us'"));
  CHECK_THROWS_WITH(bad("gfx950,2x6,1,2048,3072,ck,8,2,4.8,k,1,1,0\n"), Catch::Contains("line 3: field cu_num is '2x6'"));
  CHECK_THROWS_WITH(bad("gfx950,256,1,2048,3072,ck,8,2,4.8,k,1,1\n"), Catch::Contains("line 3: 12 fields (allowed: 13"));
  CHECK_THROWS_WITH(bad("gfx950,256,0,2048,3072,ck,8,2,4.8,k,1,1,0\n"), Catch::Contains("line 3: gfx 'gfx950', cu_num 256, M 0"));
  CHECK_THROWS_WITH(parse_tuned_csv("bf16_tuned_gemm.csv",
                                    std::string(kBf16Header) +
                                        "gfx950,256,1,64,7168,False,torch.int8,torch.bfloat16,False,False,asm,1,14,5.2,k,0,0,0\n",
                                    t),
                    Catch::Contains("bf16_tuned_gemm.csv line 2: field dtype is 'torch.int8' (allowed: torch.bfloat16"));
}

TEST_CASE("calibrate: bytes moved are weights + activations + output + scales, by hand") {
  // bf16, M = 1, N = 151936, K = 4096, bf16 out: 151936 x 4096 x 2 = 1,244,659,712 weights,
  // 4096 x 2 = 8,192 activations, 151936 x 2 = 303,872 output.
  CHECK(row_bytes(row("bf16", 1, 151936, 4096)) == 1244971776.0);
  // a8w8 blockscale, M = 1, N = 2048, K = 3072: 6,291,456 + 3,072 + 4,096 (bf16 out) + f32 scales
  // 4 x (16 x 24 weight blocks + 1 x 24) = 1,632.
  CHECK(row_bytes(row("a8w8 blockscale", 1, 2048, 3072)) == 6300256.0);
  // a8w8 rowwise, M = 2, N = 1280, K = 8192: 10,485,760 + 16,384 + 5,120 + 4 x (2 + 1280) = 5,128.
  CHECK(row_bytes(row("a8w8 rowwise", 2, 1280, 8192)) == 10512392.0);
  // a4w4, M = 1, N = 512, K = 4096: 1,048,576 + 2,048 + 1,024 + e8m0 (1 + 512) x 128 = 65,664.
  CHECK(row_bytes(row("a4w4 blockscale", 1, 512, 4096)) == 1117312.0);
}

TEST_CASE("calibrate: the memory-bound filter keeps intensity <= 32 FLOP/B") {
  // fp8: intensity ~ 2M (one byte per weight): M = 16 in, M = 17 out (34 FLOP/B over 1.003 B per weight).
  CHECK(memory_bound(row("a8w8 blockscale", 16, 7168, 4096)));
  CHECK_FALSE(memory_bound(row("a8w8 blockscale", 17, 7168, 4096)));
  // bf16: intensity ~ M: 32 in, 33 out.
  CHECK(memory_bound(row("bf16", 32, 8192, 8192)));
  CHECK_FALSE(memory_bound(row("bf16", 33, 8192, 8192)));
  // fp4: intensity ~ 4M: 8 in, 9 out.
  CHECK(memory_bound(row("a4w4 blockscale", 8, 8192, 8192)));
  CHECK_FALSE(memory_bound(row("a4w4 blockscale", 9, 8192, 8192)));
  // 2 x 16 x 7168 x 4096 = 939,524,096 FLOP over 29,360,128 + 65,536 + 229,376 + 4 x (56 x 32 + 16 x 32)
  // = 29,664,256 B: 31.67 FLOP/B.
  CHECK(row_intensity(row("a8w8 blockscale", 16, 7168, 4096)) == Approx(939524096.0 / 29664256.0).epsilon(1e-12));
}

TEST_CASE("calibrate: the grid comes from a composable_kernel name's tile and KBatch = 2^splitK") {
  // 256x16x64x256: M 1 -> 1 tile, N 2048 / 64 = 32 tiles, splitK 2 -> 4: 128 workgroups.
  CHECK(row_grid(row("a8w8 blockscale", 1, 2048, 3072, kBlockscaleKernel, 2)) == 128);
  // rowwise 256x16x64x512, M 1, N 1280: 20 tiles, splitK 0.
  CHECK(row_grid(row("a8w8 rowwise", 1, 1280, 8192,
                     "a8w8_rowwise_256x16x64x512_16x16_1x1_32x8x1_32x8x1_1x16x1x16_4x4x1_1x1_intrawave_v3", 0)) == 20);
  // bpreshuffle 256x16x128x256, M 20 -> 2 tiles, N 1000 -> 8 tiles, splitK 1 -> 2: 32.
  CHECK(row_grid(row("a8w8 rowwise", 20, 1000, 4096,
                     "a8w8_bpreshuffle_256x16x128x256_16x16_16x16_16x16x1_16x16x1_1x16x1x16_8x8x1_1x2_intrawave_v3", 1)) == 32);
  // blockscale_bpreshuffle 256x64x64x256 (scale block first), M 16 -> 1, N 512 -> 8, splitK 3 -> 8: 64.
  CHECK(row_grid(row("a8w8 blockscale", 16, 512, 7168,
                     "a8w8_blockscale_bpreshuffle_1x128x128_256x64x64x256_16x16_16x16_16x16x1_16x16x1_1x32x1x8_8_2x1_intrawave_v1",
                     3)) == 64);
  // No tile in the name, or a family whose split-K is not 2^splitK: no grid.
  CHECK_FALSE(row_grid(row("a8w8 blockscale", 8, 2048, 3072, "a8w8_blockscale_cktile_32x128x128_1x4x1_16x16x64_intrawave_0x1x0_4", 3)));
  CHECK_FALSE(row_grid(row("a8w8 rowwise", 8, 2048, 3072, "a8w8_bpreshuffle_cktile_16x64x256x1x4x1x16x16x64_default", 0)));
  CHECK_FALSE(row_grid(row("bf16", 1, 256, 5120, "_ZN5aiter39bf16gemm_fp32bf16_tn_64x64_splitk_cleanE", 13)));
  CHECK_FALSE(row_grid(row("bf16", 1, 151936, 4096, "auto", 0)));
  CHECK_FALSE(row_grid(row("a4w4 blockscale", 1, 512, 4096, "_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128E", 0)));
}

TEST_CASE("calibrate: the fit half is FNV-1a 64 of file,gfx,cu_num,M,N,K, even") {
  // Computed apart (Python): FNV-1a 64 of "t.csv,gfx950,256,1,2048,3072" = 0x0227862f3f34a820 (even),
  // of "t.csv,gfx950,256,2,2048,3072" = 0xb10c30122460c589 (odd).
  TunedRow a = row("a8w8 blockscale", 1, 2048, 3072), b = row("a8w8 blockscale", 2, 2048, 3072);
  CHECK(in_fit_half(a));
  CHECK_FALSE(in_fit_half(b));
  a.us = 99, a.kernel = "other", a.line = 7;  // the measurement does not move a shape between halves
  CHECK(in_fit_half(a));
}

TEST_CASE("calibrate: the fit recovers t0, BW and the per-CU rate of a synthetic table") {
  const double t0 = 3e-6, bw = 5e12, rcu = 40e9;
  std::vector<Sample> s;
  // Tiny and large rows stream at BW (no grid: wide launches); middle rows with a grid are per-CU bound.
  for (int i = 1; i <= 9; ++i) s.push_back({0.4e6 * i, t0 + 0.4e6 * i / bw, 0, 256});
  for (int i = 0; i < 12; ++i) s.push_back({300e6 + 150e6 * i, t0 + (300e6 + 150e6 * i) / bw, 0, 256});
  for (int g : {8, 16, 24, 32, 48, 64}) {
    const double bytes = 20e6 + 1e5 * g;
    s.push_back({bytes, t0 + std::max(bytes / bw, bytes / (g * rcu)), g, 256});
  }
  // A grid wider than the CUs: 256 busy, BW-bound.
  s.push_back({50e6, t0 + 50e6 / bw, 1000, 256});
  const Fit f = fit_samples(s, FitOptions{});
  CHECK(f.rows == 28);
  CHECK(f.tiny_rows == 9);
  CHECK(f.large_rows == 12);
  CHECK(f.grid_rows == 7);
  CHECK(f.bw_fitted);
  CHECK(f.t0_s == Approx(t0).epsilon(1e-9));
  CHECK(f.bw == Approx(bw).epsilon(1e-9));
  CHECK(f.r_cu == Approx(rcu).epsilon(1e-6));
  // t0 + max(20.8 MB / 5 TB/s, 20.8 MB / (8 x 40 GB/s)) = 3 us + 65 us.
  CHECK(f.predict({20.8e6, 0, 8, 256}, true) == Approx(68e-6).epsilon(1e-6));
  CHECK(f.predict({20.8e6, 0, 8, 256}, false) == Approx(3e-6 + 4.16e-6).epsilon(1e-6));
  const ErrorStats e = relative_errors(f, s, true);
  CHECK(e.n == 28);
  CHECK(e.median_abs < 1e-6);

  // Fewer large rows than min_large_rows: BW stays the fixed figure; t0 = median(t - bytes / fixed).
  std::vector<Sample> few(s.begin(), s.begin() + 9);
  FitOptions o;
  o.fixed_bw = 4e12;
  const Fit g = fit_samples(few, o);
  CHECK_FALSE(g.bw_fitted);
  CHECK(g.bw == 4e12);
  // The median tiny row is 2.0 MB: 3 us + 2e6 / 5e12 - 2e6 / 4e12 = 3 us - 0.1 us.
  CHECK(g.t0_s == Approx(2.9e-6).epsilon(1e-9));
}

TEST_CASE("calibrate: held-out errors are median, 90th percentile and signed median of model / measured - 1") {
  Fit f;
  f.t0_s = 1e-6, f.bw = 1e12;  // 1 MB -> 2 us modeled
  const std::vector<Sample> s{{1e6, 2e-6, 0, 256}, {1e6, 4e-6, 0, 256}, {1e6, 1e-6, 0, 256}, {1e6, 2.5e-6, 0, 256}};
  // errors: 0, -0.5, +1, -0.2 -> median (-0.2 + 0) / 2 = -0.1; |e| 0, 0.2, 0.5, 1: median 0.35, p90 (rank 4) 1.
  const ErrorStats e = relative_errors(f, s, false);
  CHECK(e.n == 4);
  CHECK(e.median == Approx(-0.1));
  CHECK(e.median_abs == Approx(0.35));
  CHECK(e.p90_abs == Approx(1.0));
}

TEST_CASE("calibrate: an aiter folder's tables, end to end, per target and on the held-out half") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("mla_calibrate_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "aiter/configs/model_configs");
  // Synthetic law per target, bytes computed here (bf16: 2NK + 2MK + 2MN):
  // gfx950 / 256: t0 4 us, 6.5 TB/s; gfx942 / 80 (not a model target): t0 7 us, 3.5 TB/s.
  struct Law {
    const char* gfx;
    int cus;
    double t0, bw;
  };
  const Law laws[] = {{"gfx950", 256, 4e-6, 6.5e12}, {"gfx942", 80, 7e-6, 3.5e12}};
  std::string bf16 = kBf16Header;
  int rows = 0;
  for (const Law& l : laws)
    for (int n : {1024, 2048, 4096, 65536, 131072, 151936, 163840, 196608})
      for (int k : {256, 512, 1024, 2048, 4096, 7168})
        for (int m : {1, 2, 4, 8}) {
          const double bytes = 2.0 * n * k + 2.0 * m * k + 2.0 * m * n;
          bf16 += fmt::format("{},{},{},{},{},False,torch.bfloat16,torch.bfloat16,False,False,triton,0,0,{:.6f},auto,0,0,0\n",
                              l.gfx, l.cus, m, n, k, 1e6 * (l.t0 + bytes / l.bw));
          ++rows;
        }
  // M = 64 bf16 rows (intensity ~64) are not memory-bound: a wrong time there must not matter.
  bf16 += "gfx950,256,64,8192,8192,False,torch.bfloat16,torch.bfloat16,False,False,triton,0,0,1.0,auto,0,0,0\n";
  std::ofstream(dir / "aiter/configs/model_configs/x_bf16_tuned_gemm.csv") << bf16;
  std::ofstream(dir / "aiter/configs/bf16_untuned_gemm.csv") << "M,N,K\n1,2,3\n";  // not a tuned table: not read
  std::ofstream(dir / "aiter/configs/tuned_fmoe.csv") << "cu_num,token,us\n256,1,3\n";
  const Tables t = read_tuned_tables(dir.string());
  CHECK(t.files == std::vector<std::string>{"x_bf16_tuned_gemm.csv"});
  CHECK(int(t.rows.size()) == rows + 1);
  REQUIRE(t.skipped.size() == 1);
  const Calibration c = calibrate(t, dir.string(), "abc", nullptr);
  REQUIRE(c.targets.size() == 2);
  const TargetCalibration& a = c.targets[0];  // the model target first
  CHECK(a.gfx == "gfx950");
  CHECK(a.model_target);
  CHECK(a.rows_total == rows / 2 + 1);
  CHECK(a.rows_memory_bound == rows / 2);
  CHECK(a.fit_rows + a.held_out_rows == rows / 2);
  CHECK(a.fit.bw_fitted);
  CHECK(a.fit.t0_s == Approx(4e-6).epsilon(1e-5));  // the csv keeps 6 decimals of us
  CHECK(a.fit.bw == Approx(6.5e12).epsilon(1e-5));
  CHECK(a.held_out.at(0).name == "all");
  CHECK(a.held_out.at(0).bytes_only.n == a.held_out_rows);
  CHECK(a.held_out.at(0).bytes_only.p90_abs < 1e-5);
  const TargetCalibration& b = c.targets[1];
  CHECK(b.gfx == "gfx942");
  CHECK_FALSE(b.model_target);
  CHECK(b.fit.t0_s == Approx(7e-6).epsilon(1e-5));
  CHECK(b.fit.bw == Approx(3.5e12).epsilon(1e-5));
  const std::string md = c.markdown();
  CHECK_THAT(md, Catch::Contains("commit abc"));
  CHECK_THAT(md, Catch::Contains("| gfx942 (not a model target) | 80 |"));
  CHECK(c.to_json().at("targets").size() == 2);
  CHECK_THROWS_WITH(read_tuned_tables((dir / "nothing").string()), Catch::Contains("no aiter/configs/*tuned*.csv"));
  fs::remove_all(dir);
}

TEST_CASE("calibrate: the machine model uses the committed figures of the last fit, with their source") {
  // docs/performance.md "Calibration on aiter's tuned tables": the last fit (aiter e4048607).
  const auto& t950 = mla::gen::target(mla::gen::Arch::gfx950);
  const auto& t942 = mla::gen::target(mla::gen::Arch::gfx942);
  CHECK(mla::gen::kCalibrationAiterCommit == "e4048607a535ace3a2b51ded31b1c8c2d45c0879");
  CHECK(t950.hbm_achievable_bytes_per_s == 6.09e12);
  CHECK(std::string(t950.hbm_achievable_source).rfind("fitted", 0) == 0);
  CHECK_THAT(std::string(t950.hbm_achievable_source), Catch::Contains("e4048607"));
  // gfx942 at 304 CUs: no table row above 256 MB, so BabelStream's measurement stays.
  CHECK(t942.hbm_achievable_bytes_per_s == 4.1e12);
  CHECK(std::string(t942.hbm_achievable_source).rfind("measured", 0) == 0);
  CHECK(t950.machine.kernel_fixed_s == 4.47e-6);
  CHECK(t942.machine.kernel_fixed_s == 3.11e-6);
  for (const auto* t : {&t942, &t950}) {
    CHECK_THAT(std::string(t->machine.kernel_fixed_source), Catch::Contains("e4048607"));
    const Machine m = machine_for(t->arch == mla::gen::Arch::gfx942 ? mla::rt::Target::gfx942 : mla::rt::Target::gfx950);
    CHECK(m.hbm_bytes_per_s == t->hbm_achievable_bytes_per_s);
    CHECK(m.launch_s == Approx(t->machine.kernel_fixed_s - t->machine.unit_fill_s).epsilon(1e-12));
    CHECK(m.launch_source == t->machine.kernel_fixed_source);
  }
}
