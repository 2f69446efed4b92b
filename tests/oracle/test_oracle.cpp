// The aiter oracle without aiter: its CLI errors, the launch-ABI packing, the split merge, and
// the whole run/compare path on a stand-in kernel compiled here from OpenCL C that follows
// aiter's launch ABI (asm_mla.cu KernelArgs) and split conventions, placed in a fake aiter tree.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "emulator/emu_test_util.h"
#include "bench/aiter_side.h"
#include "oracle/aiter_oracle.h"

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
    cfg.kv_lens = {130, 600};  // split 4: 1 and 4 items of 128-token-aligned ranges
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
