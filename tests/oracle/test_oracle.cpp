// The aiter oracle without aiter: its CLI errors, the launch-ABI packing, the split merge, and
// the whole run/compare path on a stand-in kernel compiled here from OpenCL C that follows
// aiter's launch ABI (asm_mla.cu KernelArgs) and split conventions, placed in a fake aiter tree.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "emulator/emu_test_util.h"
#include "bench/aiter_side.h"
#include "oracle/aiter_oracle.h"
#include "oracle/sweep.h"

using namespace mla;
using namespace mla::oracle;
using namespace emutest;

namespace {

// aiter's packed launch struct (one 16-byte slot per field) and bf16 helpers, for the stand-ins.
const char* kAbiPrelude = R"(
#pragma OPENCL FP_CONTRACT OFF
typedef struct __attribute__((packed)) {
  ulong ptr_R, p0; ulong ptr_LSE, p1; ulong ptr_Q, p2; ulong ptr_KV, p3; ulong ptr_LTP, p4;
  ulong ptr_LTD, p5; ulong ptr_LTL, p6;
  float scalar; uint p7[3]; uint s_MQA, p8[3]; uint s_kv_split, p9[3]; uint s_Q_Bs, p10[3];
  uint s_Bs, p11[3]; uint s_log2_plen, p12[3];
  ulong ptr_QTP, p13; ulong ptr_STP, p14; ulong ptr_RP, p15; ulong ptr_QSCALE, p16; ulong ptr_KVSCALE, p17;
  uint out_16_nosplit, p18[3]; ulong ptr_LSEP, p19; ulong ptr_GKVTP, p20; uint cp_world, p21[3]; uint cp_rank, p22[3];
} Args;

static float bf(ushort b) { return as_float((uint)b << 16); }
static ushort to_bf(float f) { uint u = as_uint(f); u += 0x7fff + ((u >> 16) & 1); return (ushort)(u >> 16); }
)";

// Naive MLA decode with aiter's ABI: one packed struct, a 16-byte slot per field; grid
// (1, batch, kv_split) x 256; thread t: head t/16, output dims 32*(t%16) .. +31; split s takes
// 64-token chunks s, s+S, ...; kv_split == 1 writes bf16 o, else fp32 partials + natural-log LSE.
const std::string kStandIn = std::string(kAbiPrelude) + R"(

__kernel void stand_in_mla(Args a) {
  uint t = __builtin_amdgcn_workitem_id_x();
  uint b = __builtin_amdgcn_workgroup_id_y(), s = __builtin_amdgcn_workgroup_id_z();
  uint h = t / 16, d0 = (t % 16) * 32, S = a.s_kv_split;
  __global const int* indptr = (__global const int*)a.ptr_LTP;
  __global const int* indices = (__global const int*)a.ptr_LTD;
  __global const ushort* q = (__global const ushort*)(a.ptr_Q + (ulong)b * a.s_Q_Bs) + h * 576;
  __global const uchar* kv = (__global const uchar*)a.ptr_KV;
  int len = indptr[b + 1] - indptr[b];
  float m = -__builtin_inff(), l = 0.0f, acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  for (int tok = 0; tok < len; ++tok) {
    if ((uint)(tok / 64) % S != s) continue;
    __global const ushort* k = (__global const ushort*)(kv + (ulong)indices[indptr[b] + tok] * a.s_Bs);
    float dot = 0.0f;
    for (int i = 0; i < 576; ++i) dot += bf(q[i]) * bf(k[i]);
    float x = dot * a.scalar, mn = __builtin_fmaxf(m, x), c = __builtin_expf(m - mn), p = __builtin_expf(x - mn);
    l = l * c + p;
    for (int i = 0; i < 32; ++i) acc[i] = acc[i] * c + p * bf(k[d0 + i]);
    m = mn;
  }
  if (l == 0.0f) return;  // an empty split leaves its outputs unwritten
  float inv = __builtin_amdgcn_rcpf(l);
  if (a.out_16_nosplit) {
    __global ushort* o = (__global ushort*)a.ptr_R + ((ulong)b * 16 + h) * 512 + d0;
    for (int i = 0; i < 32; ++i) o[i] = to_bf(acc[i] * inv);
  } else {
    __global float* o = (__global float*)a.ptr_R + (((ulong)b * S + s) * 16 + h) * 512 + d0;
    for (int i = 0; i < 32; ++i) o[i] = acc[i] * inv;
    if (t % 16 == 0) ((__global float*)a.ptr_LSE)[((ulong)b * S + s) * 16 + h] = m + __builtin_amdgcn_logf(l) * 0.693147180559945f;
  }
}
)";

// The persistent variant: workgroup x runs work item x of aiter's metadata (ptr_STP -> {work_indptr,
// work_info_set}; MlaWorkInfo = batch, partial_qo_loc, qo_start, qo_end, kv_start, kv_end, ...):
// partial_qo_loc -1 writes bf16 o through ptr_RP, else fp32 partial rows + LSE at partial_qo_loc.
const std::string kStandInPs = std::string(kAbiPrelude) + R"(

__kernel void stand_in_mla_ps(Args a) {
  uint t = __builtin_amdgcn_workitem_id_x(), wg = __builtin_amdgcn_workgroup_id_x();
  __global const ulong* meta = (__global const ulong*)a.ptr_STP;
  __global const int* work_indptr = (__global const int*)meta[0];
  __global const int* item = (__global const int*)meta[1] + 8 * work_indptr[wg];
  int partial = item[1], row = item[2], kv0 = item[4], kv1 = item[5];
  uint h = t / 16, d0 = (t % 16) * 32;
  __global const int* indices = (__global const int*)a.ptr_LTD;
  __global const ushort* q = (__global const ushort*)(a.ptr_Q + (ulong)row * a.s_Q_Bs) + h * 576;
  __global const uchar* kv = (__global const uchar*)a.ptr_KV;
  float m = -__builtin_inff(), l = 0.0f, acc[32];
  for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
  for (int tok = kv0; tok < kv1; ++tok) {
    __global const ushort* k = (__global const ushort*)(kv + (ulong)indices[tok] * a.s_Bs);
    float dot = 0.0f;
    for (int i = 0; i < 576; ++i) dot += bf(q[i]) * bf(k[i]);
    float x = dot * a.scalar, mn = __builtin_fmaxf(m, x), c = __builtin_expf(m - mn), p = __builtin_expf(x - mn);
    l = l * c + p;
    for (int i = 0; i < 32; ++i) acc[i] = acc[i] * c + p * bf(k[d0 + i]);
    m = mn;
  }
  float inv = __builtin_amdgcn_rcpf(l);
  if (partial < 0) {
    __global ushort* o = (__global ushort*)a.ptr_RP + ((ulong)row * 16 + h) * 512 + d0;
    for (int i = 0; i < 32; ++i) o[i] = to_bf(acc[i] * inv);
  } else {
    __global float* o = (__global float*)a.ptr_R + ((ulong)partial * 16 + h) * 512 + d0;
    for (int i = 0; i < 32; ++i) o[i] = acc[i] * inv;
    if (t % 16 == 0) ((__global float*)a.ptr_LSE)[(ulong)partial * 16 + h] = m + __builtin_amdgcn_logf(l) * 0.693147180559945f;
  }
}
)";

// A fake aiter checkout holding the stand-ins as gfx942 bf16/bf16 qh16 decode kernels.
std::string fake_aiter_dir() {
  static std::string dir = [] {
    fs::path root = tmp_root() / "fake_aiter";
    fs::path mla = root / "hsa" / "gfx942" / "mla";
    fs::create_directories(mla);
    std::string co = compile_cl(kStandIn, Gfx::gfx942, "stand_in_mla");
    fs::copy_file(co, mla / "stand_in_mla.co", fs::copy_options::overwrite_existing);
    std::string co_ps = compile_cl(kStandInPs, Gfx::gfx942, "stand_in_mla_ps");
    fs::copy_file(co_ps, mla / "stand_in_mla_ps.co", fs::copy_options::overwrite_existing);
    std::ofstream(mla / "mla_asm.csv") << "qType,kvType,Gqa,ps,qSeqLen,prefill,causal,lse,knl_name,co_name\n"
                                       << "bf16,bf16,16,0,1,0,1,0,stand_in_mla,stand_in_mla.co\n"
                                       << "bf16,bf16,16,1,1,0,1,0,stand_in_mla_ps,stand_in_mla_ps.co\n"
                                       << "bf16,bf16,16,0,0,1,0,0,some_prefill,some_prefill.co\n";
    return root.string();
  }();
  return dir;
}

}  // namespace

// For test_engine_accuracy.cpp (the same executable).
std::string oracle_stand_in_aiter_dir() { return fake_aiter_dir(); }

TEST_CASE("oracle: no aiter directory is a clear error", "[oracle]") {
  std::string out;
  CHECK(run_cmd(fmt::format("env -u AITER_DIR {}", MLAORACLE_EXE), &out) != 0);
  CHECK(out.find("no aiter directory: pass --aiter-dir DIR or set AITER_DIR") != std::string::npos);
  fs::path empty = tmp_root() / "not_aiter";
  fs::create_directories(empty);
  CHECK(run_cmd(fmt::format("{} --aiter-dir {}", MLAORACLE_EXE, empty.string()), &out) != 0);
  CHECK(out.find("has no hsa/gfx942/mla/mla_asm.csv nor hsa/gfx950/mla/mla_asm.csv") != std::string::npos);
  CHECK(run_cmd(fmt::format("env AITER_DIR={} {}", empty.string(), MLAORACLE_EXE), &out) != 0);
  CHECK(out.find(empty.string()) != std::string::npos);
  REQUIRE_THROWS_AS(resolve_aiter_dir(empty.string()), OracleError);
}

TEST_CASE("oracle: launch arguments are packed one 16-byte slot per field (asm_mla.cu KernelArgs)", "[oracle]") {
  AiterArgs a;
  a.ptr_R = 0x1111;
  a.ptr_LSE = 0x2222;
  a.ptr_Q = 0x3333;
  a.ptr_KV = 0x4444;
  a.ptr_LTP = 0x5555;
  a.ptr_LTD = 0x6666;
  a.ptr_LTL = 0x7777;
  a.scalar = 0.125f;
  a.s_MQA = 16;
  a.s_kv_split = 4;
  a.s_Q_Bs = 9216;
  a.s_Bs = 576;
  a.s_log2_plen = 3;
  a.ptr_QTP = 0x8888;
  a.ptr_STP = 0x9999;
  a.ptr_RP = 0xaaaa;
  a.ptr_QSCALE = 0xbbbb;
  a.ptr_KVSCALE = 0xcccc;
  a.out_16_nosplit = 1;
  a.ptr_LSEP = 0xdddd;
  a.ptr_GKVTP = 0xeeee;
  a.s_cp_world_size = 2;
  a.s_cp_rank = 1;
  auto b = pack_args(a);
  REQUIRE(b.size() == 368);
  auto u64 = [&](size_t o) { uint64_t v; std::memcpy(&v, b.data() + o, 8); return v; };
  auto u32 = [&](size_t o) { uint32_t v; std::memcpy(&v, b.data() + o, 4); return v; };
  const uint64_t ptrs[][2] = {{0x00, 0x1111}, {0x10, 0x2222}, {0x20, 0x3333}, {0x30, 0x4444}, {0x40, 0x5555},
                              {0x50, 0x6666}, {0x60, 0x7777}, {0xD0, 0x8888}, {0xE0, 0x9999}, {0xF0, 0xaaaa},
                              {0x100, 0xbbbb}, {0x110, 0xcccc}, {0x130, 0xdddd}, {0x140, 0xeeee}};
  for (auto& p : ptrs) CHECK(u64(p[0]) == p[1]);
  float f;
  std::memcpy(&f, b.data() + 0x70, 4);
  CHECK(f == 0.125f);
  const uint32_t vals[][2] = {{0x80, 16}, {0x90, 4}, {0xA0, 9216}, {0xB0, 576}, {0xC0, 3}, {0x120, 1}, {0x150, 2}, {0x160, 1}};
  for (auto& v : vals) CHECK(u32(v[0]) == v[1]);
  // Padding between the fields is zero.
  for (size_t slot = 0; slot < 368; slot += 16)
    for (size_t i = 8; i < 16; ++i) CHECK(b[slot + i] == 0);
}

TEST_CASE("oracle: split merge as aiter's reduce (running max, exp(lse - max) weights)", "[oracle]") {
  // One row, one head, two splits: o_s constant per split, lse 0 and log 3: weights 1/4, 3/4.
  std::vector<float> po(2 * 512), pl = {0.0f, std::log(3.0f)};
  for (int d = 0; d < 512; ++d) po[d] = 1.0f, po[512 + d] = 5.0f;
  Merged m = merge_splits(po, pl, 1, 2, 1, {2});
  for (int d = 0; d < 512; ++d) CHECK(m.o[d] == Approx(0.25 * 1 + 0.75 * 5));
  CHECK(m.lse[0] == Approx(std::log(4.0)));
  // Only the valid splits take part.
  Merged one = merge_splits(po, pl, 1, 2, 1, {1});
  CHECK(one.o[0] == Approx(1.0));
  CHECK(one.lse[0] == Approx(0.0).margin(1e-6));
}

TEST_CASE("oracle: catalog parsing and what the oracle can run", "[oracle]") {
  auto cat = load_catalog(fake_aiter_dir(), Gfx::gfx942);
  REQUIRE(cat.size() == 3);
  CHECK(cat[0].stem() == "stand_in_mla");
  CHECK(cat[0].q_type == "bf16");
  CHECK(cat[0].gqa == 16);
  CHECK(cat[0].qseqlen == 1);
  CHECK(cat[0].cprr == 0);  // gfx942 catalogs have no cprr column
  CHECK(unsupported_reason(cat[0]).empty());
  CHECK(cat[1].ps == 1);
  CHECK(unsupported_reason(cat[1]).empty());  // persistent kernels get aiter's work metadata
  CHECK(unsupported_reason(cat[2]).find("prefill") != std::string::npos);
  REQUIRE_THROWS_WITH(load_catalog(fake_aiter_dir(), Gfx::gfx950), Catch::Contains("cannot open"));
}

TEST_CASE("oracle: a stand-in kernel with aiter's ABI runs to the reference (kv_split 1 and 2)", "[oracle]") {
  auto cat = load_catalog(fake_aiter_dir(), Gfx::gfx942);
  for (int split : {1, 2}) {
    RunConfig cfg;
    cfg.kv_split = split;
    cfg.kv_lens = {70, 130};
    RunResult r = run_kernel(cat[0], cfg);
    INFO(r.error);
    REQUIRE(r.ran);
    CHECK(r.pass);
    CHECK(r.d < 1e-5);
    CHECK(r.max_err_pct < 1.0);
    CHECK(r.unwritten == 0);
    CHECK(r.findings.empty());  // clang's waitcnts and NOPs are clean
    CHECK(r.wave_insts > 0);
    CHECK(!r.forms.empty());
    if (split == 1) {
      CHECK(r.output_layout == "bf16 o");
      CHECK(r.lse_err < 0);
    } else {
      CHECK(r.split_chunk == 64);
      CHECK(r.lse_err >= 0);
      CHECK(r.lse_err < 1e-4);
    }
  }
}

TEST_CASE("oracle: a persistent stand-in runs from aiter's work metadata (one item, four items per request)", "[oracle]") {
  auto cat = load_catalog(fake_aiter_dir(), Gfx::gfx942);
  REQUIRE(cat[1].stem() == "stand_in_mla_ps");
  for (int split : {1, 4}) {
    RunConfig cfg;
    cfg.kv_split = split;
    cfg.kv_lens = {130, 600};  // split 4: 1 item (the 2-token tail folded in) and 4 items of 128-token-aligned ranges
    RunResult r = run_kernel(cat[1], cfg);
    INFO(r.error);
    REQUIRE(r.ran);
    CHECK(r.pass);
    CHECK(r.d < 1e-5);
    CHECK(r.unwritten == 0);
    CHECK(r.output_layout.find("persistent") != std::string::npos);
    CHECK(r.written.count(split == 1 ? "o" : "partial_o") == 1);
  }
}

TEST_CASE("oracle: mlaoracle CLI table, --json and --forms-out on the stand-in", "[oracle]") {
  fs::path j = tmp_root() / "oracle.json", f = tmp_root() / "forms.json";
  std::string out;
  REQUIRE(run_cmd(fmt::format("{} --aiter-dir {} --target gfx942 --kernel 'stand_in_ml?' --kv-split 2 --kv-lens 70,130 --json {} "
                              "--forms-out {}",
                              MLAORACLE_EXE, fake_aiter_dir(), j.string(), f.string()),
                  &out) == 0);
  CHECK(out.find("| stand_in_mla | gfx942 | 2 |") != std::string::npos);
  CHECK(out.find("| pass |") != std::string::npos);
  auto res = nlohmann::json::parse(std::ifstream(j));
  REQUIRE(res["runs"].size() == 1);
  CHECK(res["runs"][0]["pass"] == true);
  CHECK(res["runs"][0]["split_chunk_tokens"] == 64);
  auto forms = nlohmann::json::parse(std::ifstream(f));
  REQUIRE(forms["runs"].size() == 1);
  CHECK(forms["runs"][0]["forms"].size() > 5);
  CHECK(forms["runs"][0]["forms"].contains("s_endpgm"));
}

TEST_CASE("oracle: mlabench's aiter side fits a persistent stand-in and predicts a held-out run", "[oracle]") {
  // bench/aiter_side.cpp on the stand-in (no aiter): four scaled runs of 128-token items, the fit
  // per item and per token, then a run it did not see (two requests of 384 and 640 tokens in two
  // splits: 4 items, 1024 tokens) predicted from the fit.
  bench::AiterSideOptions o;
  o.unit_tokens = 128;
  const bench::AiterKernelFit f =
      bench::measure_aiter_kernel(fake_aiter_dir(), rt::Target::gfx942, "stand_in_mla_ps", o);
  REQUIRE(f.samples.size() == 4);
  for (const auto& x : f.samples) CHECK(x.pass);
  CHECK(f.waves_per_wg == 4);
  CHECK(f.fit_residual < 0.02);
  CHECK(f.facts.read_per_token > 576 * 2);  // at least every K byte once (each lane reads the row)
  CHECK(f.inflight_peak_wg > 0);
  CHECK(f.inflight_peak_wg >= f.inflight_peak_wave);
  CHECK(f.issue_per_token > 0);
  CHECK(f.facts.write_final_unit == 16 * 512 * 2);       // bf16 o through ptr_RP
  CHECK(f.facts.write_partial_unit == 16 * 512 * 4 + 16 * 4);  // fp32 partial o + lse
  auto cat = load_catalog(fake_aiter_dir(), Gfx::gfx942);
  RunConfig cfg;
  cfg.kv_split = 2;
  cfg.kv_lens = {384, 640};
  cfg.qseqlen = 1;
  RunResult r = run_kernel(cat[1], cfg);
  REQUIRE(r.ran);
  CHECK(r.work_items == 4);
  double read = 0;
  for (const auto& b : r.counters.buffers)
    if (b.name != "kernarg") read += double(b.read);
  const double predicted = f.facts.read_per_unit * 4 + f.facts.read_per_token * 1024;
  INFO("held-out read " << read << " B, predicted " << predicted << " B");
  CHECK(std::fabs(predicted / read - 1) < 0.01);
}

TEST_CASE("oracle sweep: the full grid's lengths are the page and chunk edges of 1..8192", "[oracle][sweep]") {
  auto lens = sweep_full_lengths();
  REQUIRE(std::is_sorted(lens.begin(), lens.end()));
  CHECK(std::adjacent_find(lens.begin(), lens.end()) == lens.end());
  CHECK(lens.front() == 1);
  CHECK(lens.back() == 8192);
  for (int want : {1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 127, 128, 129, 383, 384, 385, 1535, 1536, 1537, 4095, 4096, 4097, 8191})
    CHECK(std::find(lens.begin(), lens.end(), want) != lens.end());
  CHECK(std::find(lens.begin(), lens.end(), 8193) == lens.end());
  CHECK(std::find(lens.begin(), lens.end(), 1600) == lens.end());  // not an edge
}

TEST_CASE("oracle sweep: the full grid covers kv_split 1-16, batch 1/8/64 and every length in each", "[oracle][sweep]") {
  const auto lens = sweep_full_lengths();
  const size_t n = lens.size();
  auto cases = sweep_cases("full", 1);
  CHECK(cases.size() == 16 * (n + (n + 7) / 8 + (n + 63) / 64));
  for (int S = 1; S <= 16; ++S)
    for (int B : {1, 8, 64}) {
      INFO("kv_split " << S << " batch " << B);
      std::set<int> seen;
      int ncase = 0;
      for (auto& c : cases)
        if (c.kv_split == S && c.batch() == B) {
          ++ncase;
          seen.insert(c.kv_lens.begin(), c.kv_lens.end());
        }
      CHECK(ncase == int(B == 1 ? n : (n + B - 1) / B));
      CHECK(seen == std::set<int>(lens.begin(), lens.end()));
    }
  for (auto& c : cases) {
    CHECK(c.batch() >= 1);
    CHECK(c.batch() <= 64);
  }
  // The seed shuffles the batches, nothing else.
  auto other = sweep_cases("full", 2);
  REQUIRE(other.size() == cases.size());
  bool differs = false;
  for (size_t i = 0; i < cases.size(); ++i) {
    CHECK(other[i].kv_split == cases[i].kv_split);
    CHECK(other[i].batch() == cases[i].batch());
    differs |= other[i].kv_lens != cases[i].kv_lens;
  }
  CHECK(differs);
}

TEST_CASE("oracle sweep: the sampled preset names each edge it probes, within the full grid's bounds", "[oracle][sweep]") {
  auto cases = sweep_cases("sampled");
  REQUIRE(cases.size() == 15);
  bool issue_case = false, batch64 = false, split16 = false;
  for (auto& c : cases) {
    CHECK(!c.why.empty());
    CHECK(c.kv_split >= 1);
    CHECK(c.kv_split <= 16);
    CHECK(c.batch() <= 64);
    CHECK(c.max_len() <= 8192);
    issue_case |= c.kv_split == 4 && c.kv_lens == std::vector<int>{1600};
    batch64 |= c.batch() == 64;
    split16 |= c.kv_split == 16;
  }
  CHECK(issue_case);
  CHECK(batch64);
  CHECK(split16);
  auto f = filter_cases(cases, {4}, 2000);
  REQUIRE(f.size() == 3);  // 1536, 1600, 385, and not 4096 nor the batch of 7 (2048)
  for (auto& c : f) CHECK(c.kv_split == 4);
  CHECK(filter_cases(cases, {}, 0).size() == cases.size());
  CHECK(filter_cases(cases, {7}, 0).empty());
  REQUIRE_THROWS_WITH(sweep_cases("everything"), Catch::Contains("--sweep 'everything': unknown preset (allowed: full, sampled)"));
}

TEST_CASE("oracle sweep: option values are checked and a batch cycles through the lengths", "[oracle][sweep]") {
  CHECK_NOTHROW(check_cli_values({1, 64}, {1, 8192}, {1, 16}));
  REQUIRE_THROWS_WITH(check_cli_values({0}, {}, {}), Catch::Contains("--batch 0: must be 1..64"));
  REQUIRE_THROWS_WITH(check_cli_values({65}, {}, {}), Catch::Contains("--batch 65: must be 1..64"));
  REQUIRE_THROWS_WITH(check_cli_values({}, {12, 0}, {}), Catch::Contains("--kv-lens: 0 tokens is not allowed"));
  REQUIRE_THROWS_WITH(check_cli_values({}, {-3}, {}), Catch::Contains("--kv-lens: -3 tokens"));
  REQUIRE_THROWS_WITH(check_cli_values({}, {}, {17}), Catch::Contains("--kv-split 17: must be 1..16"));
  REQUIRE_THROWS_WITH(check_cli_values({}, {}, {0}), Catch::Contains("--kv-split 0: must be 1..16"));
  CHECK(batch_lengths({5, 7}, 5) == std::vector<int>{5, 7, 5, 7, 5});
  CHECK(batch_lengths({5, 7, 9}, 0) == std::vector<int>{5, 7, 9});
  CHECK(batch_lengths({300}, 3) == std::vector<int>{300, 300, 300});
}

TEST_CASE("oracle sweep: the summary merges neighbouring lengths with one outcome per kernel, target, kv_split", "[oracle][sweep]") {
  std::vector<SweepOutcome> o = {
      {"k", "gfx950", 4, 1, 1536, 1536, true, ""},
      {"k", "gfx950", 4, 1, 385, 385, false, "d 1.0e+00, max err 100%, 8192 unwritten"},
      {"k", "gfx950", 4, 1, 4096, 4096, true, ""},
      {"k", "gfx950", 4, 1, 1600, 1600, true, ""},
      {"k", "gfx950", 4, 7, 2048, 1, true, ""},
      {"k", "gfx942", 4, 1, 385, 385, true, ""},
      {"k", "gfx950", 16, 1, 1025, 1025, false, "d 5.0e-01, max err 80%"},
      {"k", "gfx950", 16, 1, 8192, 8192, false, "d 2.0e-01, max err 60%"},
  };
  std::string s = summarize(o);
  CHECK(s.find("| k | gfx950 | 4 | 1 | 385 | 1 | FAIL: d 1.0e+00, max err 100%, 8192 unwritten |") != std::string::npos);
  CHECK(s.find("| k | gfx950 | 4 | 1 | 1536..4096 | 3 | pass |") != std::string::npos);
  CHECK(s.find("| k | gfx950 | 4 | 7 | 2048 | 1 | pass |") != std::string::npos);
  CHECK(s.find("| k | gfx942 | 4 | 1 | 385 | 1 | pass |") != std::string::npos);
  CHECK(s.find("| k | gfx950 | 16 | 1 | 1025..8192 | 2 | FAIL: d 5.0e-01, max err 80% .. d 2.0e-01, max err 60% |") != std::string::npos);
}

TEST_CASE("oracle sweep: mlaoracle --sweep, --batch and their errors", "[oracle][sweep]") {
  std::string out;
  // Listing the cases needs no aiter.
  REQUIRE(run_cmd(fmt::format("env -u AITER_DIR {} --sweep sampled --list-cases", MLAORACLE_EXE), &out) == 0);
  CHECK(out.find("kv_split  4 batch  1 lens 1600  # issue #34's case") != std::string::npos);
  REQUIRE(run_cmd(fmt::format("env -u AITER_DIR {} --sweep full --kv-split 3 --max-len 100 --list-cases", MLAORACLE_EXE), &out) == 0);
  CHECK(out.find("kv_split  3 batch  1 lens 65\n") != std::string::npos);
  CHECK(out.find("lens 129") == std::string::npos);
  CHECK(out.find("kv_split  4") == std::string::npos);
  struct Bad {
    const char* args;
    const char* msg;
  };
  for (auto [args, msg] : {Bad{"--sweep most", "--sweep 'most': unknown preset (allowed: full, sampled)"},
                           Bad{"--sweep full --kv-lens 5", "--sweep sets the lengths and the batch: drop --kv-lens / --batch"},
                           Bad{"--sweep full --batch 2", "--sweep sets the lengths and the batch"},
                           Bad{"--batch 0 --kv-lens 5", "--batch 0: must be 1..64"},
                           Bad{"--kv-split 17", "--kv-split 17: must be 1..16"},
                           Bad{"--kv-lens 0,4", "--kv-lens: 0 tokens is not allowed"},
                           Bad{"--list-cases", "--list-cases and --max-len need --sweep"},
                           Bad{"--sweep sampled --kv-split 7", "--sweep sampled: no case left after --kv-split / --max-len"}}) {
    INFO(args);
    CHECK(run_cmd(fmt::format("{} --aiter-dir {} {}", MLAORACLE_EXE, fake_aiter_dir(), args), &out) != 0);
    CHECK(out.find(msg) != std::string::npos);
  }
  // The sweep on the stand-in: kv_split 2, the one sampled case of at most 200 tokens (129).
  fs::path j = tmp_root() / "sweep.json", sum = tmp_root() / "sweep_summary.md";
  REQUIRE(run_cmd(fmt::format("{} --aiter-dir {} --target gfx942 --kernel stand_in_mla --sweep sampled --kv-split 2 --max-len 200 "
                              "--json {} --summary {}",
                              MLAORACLE_EXE, fake_aiter_dir(), j.string(), sum.string()),
                  &out) == 0);
  CHECK(out.find("| stand_in_mla | gfx942 | 2 | 129 |") != std::string::npos);
  CHECK(out.find("Summary (sweep 'sampled', 1 runs, 0 failed)") != std::string::npos);
  CHECK(out.find("mlaoracle: [1/1]") != std::string::npos);  // progress on stderr (merged here)
  auto res = nlohmann::json::parse(std::ifstream(j));
  REQUIRE(res["runs"].size() == 1);
  CHECK(res["sweep"] == "sampled");
  CHECK(res["runs"][0]["kv_lens"] == std::vector<int>{129});
  CHECK(res["runs"][0]["pass"] == true);
  std::ifstream sf(sum);
  std::string summary((std::istreambuf_iterator<char>(sf)), std::istreambuf_iterator<char>());
  CHECK(summary.find("| stand_in_mla | gfx942 | 2 | 1 | 129 | 1 | pass |") != std::string::npos);
  // --batch: 3 requests cycling through the lengths.
  REQUIRE(run_cmd(fmt::format("{} --aiter-dir {} --target gfx942 --kernel stand_in_mla --kv-split 1 --kv-lens 70,20 --batch 3 --json {}",
                              MLAORACLE_EXE, fake_aiter_dir(), j.string()),
                  &out) == 0);
  CHECK(out.find("| stand_in_mla | gfx942 | 1 | 3: 20..70 |") != std::string::npos);
  res = nlohmann::json::parse(std::ifstream(j));
  CHECK(res["runs"][0]["kv_lens"] == std::vector<int>{70, 20, 70});
}

// kn_get_mla_metadata_v1_0 (aiter csrc/kernels/mla/metadata/v1_0_device.cuh), worked by hand:
// payload = ceil(ceil(len / 128) / S) x 128 tokens; a tail of 1-4 tokens joins the item before.
TEST_CASE("oracle: persistent work items follow get_mla_metadata_v1_0, a 1-4 token tail folded in", "[oracle]") {
  using R = std::vector<std::pair<int, int>>;
  CHECK(persistent_item_ranges(129, 2) == R{{0, 129}});
  CHECK(persistent_item_ranges(130, 2) == R{{0, 130}});
  CHECK(persistent_item_ranges(133, 2) == R{{0, 128}, {128, 133}});
  CHECK(persistent_item_ranges(385, 4) == R{{0, 128}, {128, 256}, {256, 385}});
  CHECK(persistent_item_ranges(260, 4) == R{{0, 128}, {128, 260}});
  CHECK(persistent_item_ranges(421, 4) == R{{0, 128}, {128, 256}, {256, 384}, {384, 421}});
  CHECK(persistent_item_ranges(1600, 4) == R{{0, 512}, {512, 1024}, {1024, 1536}, {1536, 1600}});
  CHECK(persistent_item_ranges(2049, 5) == R{{0, 512}, {512, 1024}, {1024, 1536}, {1536, 2049}});
  CHECK(persistent_item_ranges(3, 4) == R{{0, 3}});
  CHECK(persistent_item_ranges(8192, 16).size() == 16);
  CHECK(persistent_item_ranges(1025, 16).size() == 8);
  CHECK(persistent_item_ranges(1025, 16).back() == std::pair<int, int>{896, 1025});
}
