// Foreign code: OpenCL C compiled by clang-22 (its waitcnts and hazard NOPs placed by LLVM)
// must run clean under every strict check and compute the right answer, on both targets.
#include <catch2/catch.hpp>

#include <cmath>

#include "emu_test_util.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const char* kStencil = R"(
__kernel void stencil(__global const float* a, __global float* out, float alpha, int n) {
  __local float tile[256];
  uint lid = __builtin_amdgcn_workitem_id_x();
  uint gid = __builtin_amdgcn_workgroup_id_x() * 256 + lid;
  tile[lid] = gid < (uint)n ? a[gid] : 0.0f;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  float s = tile[lid] * alpha + tile[(lid + 1) & 255];
  for (int i = 0; i < 4; ++i) s = __builtin_fmaxf(s, tile[(lid + 7 * i) & 255]);
  if (gid < (uint)n) out[gid] = s;
}
)";

const char* kReduce = R"(
__kernel void rowsum(__global const int* m, __global int* out, __global float* fout, int cols) {
  __local int part[64];
  uint lid = __builtin_amdgcn_workitem_id_x();
  uint row = __builtin_amdgcn_workgroup_id_x();
  int acc = 0;
  for (int c = lid; c < cols; c += 64) acc += m[row * cols + c] * (c % 3 - 1);
  part[lid] = acc;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  for (uint s = 32; s > 0; s >>= 1) {
    if (lid < s) part[lid] += part[lid + s];
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  }
  if (lid == 0) { out[row] = part[0]; fout[row] = __builtin_amdgcn_rcpf((float)part[0] + 0.5f); }
}
)";

// MFMA chains with VALU in between: LLVM places the XDL wait states; the emulator must agree.
const char* kMfma = R"(
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half4 __attribute__((ext_vector_type(4)));
typedef int int2v __attribute__((ext_vector_type(2)));
typedef float float4v __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
__kernel void mm(__global const half4* a, __global const half4* b, __global float4v* out, __global float16v* out2, int iters) {
  uint l = __builtin_amdgcn_workitem_id_x();
  half4 x = a[l], y = b[l];
  float4v acc = 0;
  float16v acc2 = 0;
  for (int i = 0; i < iters; ++i) {
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, y, acc, 0, 0, 0);
    acc2 = __builtin_amdgcn_mfma_f32_32x32x8f16(x, y, acc2, 0, 0, 0);
    int2v xi = __builtin_astype(x, int2v);
    xi ^= ((int)acc.x & 0x00010001);
    x = __builtin_astype(xi, half4);
  }
  out[l] = acc * 2.0f;
  out2[l] = acc2 + acc.y;
}
)";
}  // namespace

TEST_CASE("opencl: MFMA chains compiled by clang-22 satisfy the hazard checker", "[opencl]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    auto co = CodeObject::load_file(compile_cl(kMfma, g, std::string("mm_") + gfx_name(g).data()));
    for (int iters : {1, 6}) {
      Device dev(g);
      uint64_t pa = dev.alloc(512, 256, "a", 0x3c), pb = dev.alloc(512, 256, "b", 0x38), po = dev.alloc(1024), po2 = dev.alloc(4096);
      KernargBuilder kb;
      kb.put<uint64_t>(0, pa).put<uint64_t>(8, pb).put<uint64_t>(16, po).put<uint64_t>(24, po2).put<int32_t>(32, iters);
      Counters c = dev.dispatch(co, "mm", {1, 1, 1}, {64, 1, 1}, kb.bytes);
      CHECK(c.total.mfma == uint64_t(2 * iters));
      if (iters == 1) {
        // half 0x3c3c = 1 + 60/1024, 0x3838 = 0.5 * (1 + 56/1024)
        double x = 1.0 + 60.0 / 1024, y = 0.5 * (1.0 + 56.0 / 1024);
        auto o = dev.read_vector<float>(po, 256);
        auto o2 = dev.read_vector<float>(po2, 1024);
        for (float v : o) CHECK(v == Approx(2 * 16 * x * y).epsilon(1e-6));
        for (float v : o2) CHECK(v == Approx(8 * x * y + 16 * x * y).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("opencl: clang-22 kernels run clean and correct on both targets", "[opencl]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    std::string tag = gfx_name(g).data();
    SECTION(std::string("stencil ") + tag) {
      auto co = CodeObject::load_file(compile_cl(kStencil, g, "stencil_" + tag));
      const int n = 1000;
      std::vector<float> a(n);
      for (int i = 0; i < n; ++i) a[i] = float(i % 37) * 0.37f - 5.0f;
      for (uint64_t seed : {0, 7}) {
        Device dev(g);
        uint64_t pa = dev.alloc(n * 4), po = dev.alloc(n * 4, 256, "out", 0xff);
        dev.write(pa, a.data(), n * 4);
        KernargBuilder kb;
        kb.put<uint64_t>(0, pa).put<uint64_t>(8, po).put<float>(16, 1.5f).put<int32_t>(20, n);
        DispatchOptions opts;
        opts.random_seed = seed;
        Counters c = dev.dispatch(co, "stencil", {4, 1, 1}, {256, 1, 1}, kb.bytes, opts);
        auto o = dev.read_vector<float>(po, n);
        for (int wg = 0; wg < 4; ++wg) {
          float t[256];
          for (int l = 0; l < 256; ++l) t[l] = wg * 256 + l < n ? a[wg * 256 + l] : 0.0f;
          for (int l = 0; l < 256; ++l) {
            int gid = wg * 256 + l;
            if (gid >= n) continue;
            float s = std::fma(t[l], 1.5f, t[(l + 1) & 255]);
            float s2 = t[l] * 1.5f + t[(l + 1) & 255];
            for (int i = 0; i < 4; ++i) { s = std::max(s, t[(l + 7 * i) & 255]); s2 = std::max(s2, t[(l + 7 * i) & 255]); }
            INFO("gid " << gid);
            CHECK((o[gid] == s || o[gid] == s2));
          }
        }
        CHECK(c.workgroups == 4);
        CHECK(c.total.barriers == 16);
        CHECK(c.global_write_distinct == uint64_t(n) * 4);
        CHECK(c.total.global_read_bytes == uint64_t(n) * 4);  // kernarg reads are not global traffic
        CHECK(c.global_read_distinct == uint64_t(n) * 4);
      }
    }
    SECTION(std::string("reduction ") + tag) {
      auto co = CodeObject::load_file(compile_cl(kReduce, g, "rowsum_" + tag));
      const int rows = 5, cols = 300;
      std::vector<int32_t> m(rows * cols);
      for (int i = 0; i < rows * cols; ++i) m[i] = (i * 7919) % 201 - 100;
      Device dev(g);
      uint64_t pm = dev.alloc(m.size() * 4), po = dev.alloc(rows * 4), pf = dev.alloc(rows * 4);
      dev.write(pm, m.data(), m.size() * 4);
      KernargBuilder kb;
      kb.put<uint64_t>(0, pm).put<uint64_t>(8, po).put<uint64_t>(16, pf).put<int32_t>(24, cols);
      dev.dispatch(co, "rowsum", {rows, 1, 1}, {64, 1, 1}, kb.bytes);
      auto o = dev.read_vector<int32_t>(po, rows);
      auto f = dev.read_vector<float>(pf, rows);
      for (int r = 0; r < rows; ++r) {
        int ref = 0;
        for (int c = 0; c < cols; ++c) ref += m[r * cols + c] * (c % 3 - 1);
        CHECK(o[r] == ref);
        CHECK(f[r] == Approx(1.0f / (float(ref) + 0.5f)).epsilon(1e-6));
      }
    }
  }
}

namespace {
// LDS atomics as clang-22 lowers a relaxed atomic add on __local ints (__atomic_fetch_add): ds_add_u32 when the old
// value is unused (the histogram), ds_add_rtn_u32 when it is (each item's slot among those of its
// bin). The result is the CPU's histogram whatever the waves' order; the slots of each bin are a
// permutation of 0 .. count - 1.
const char* kHistogram = R"(
__kernel void hist(__global const uint* keys, __global uint* counts, __global uint* slots, int n) {
  __local uint bins[64];
  __local uint fill[64];
  uint lid = __builtin_amdgcn_workitem_id_x();
  if (lid < 64) { bins[lid] = 0; fill[lid] = 0; }
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  for (int i = lid; i < n; i += 256) __atomic_fetch_add(&bins[keys[i] & 63], 1u, __ATOMIC_RELAXED);
  for (int i = lid; i < n; i += 256) slots[i] = __atomic_fetch_add(&fill[keys[i] & 63], 1u, __ATOMIC_RELAXED);
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
  if (lid < 64) counts[lid] = bins[lid];
}
)";
}  // namespace

TEST_CASE("opencl: LDS atomics (ds_add_u32, ds_add_rtn_u32) as clang-22 lowers an atomic add on __local", "[opencl]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    INFO(gfx_name(g));
    const std::string name = std::string("hist_") + gfx_name(g).data();
    const std::string text = compile_cl_asm(kHistogram, g, name);
    CHECK(text.find("ds_add_u32") != std::string::npos);
    CHECK(text.find("ds_add_rtn_u32") != std::string::npos);
    auto co = CodeObject::load_file(compile_cl(kHistogram, g, name));
    const int n = 3000;
    std::vector<uint32_t> keys(n);
    for (int i = 0; i < n; ++i) keys[i] = uint32_t(i) * 2654435761u >> 7;
    for (uint64_t seed : {0, 3, 11}) {
      Device dev(g);
      uint64_t pk = dev.alloc(n * 4), pc = dev.alloc(256, 256, "counts", 0xee), ps = dev.alloc(n * 4, 256, "slots", 0xee);
      dev.write(pk, keys.data(), n * 4);
      KernargBuilder kb;
      kb.put<uint64_t>(0, pk).put<uint64_t>(8, pc).put<uint64_t>(16, ps).put<int32_t>(24, n);
      DispatchOptions opts;
      opts.random_seed = seed;
      dev.dispatch(co, "hist", {1, 1, 1}, {256, 1, 1}, kb.bytes, opts);
      auto counts = dev.read_vector<uint32_t>(pc, 64);
      auto slots = dev.read_vector<uint32_t>(ps, n);
      std::vector<uint32_t> want(64, 0);
      std::vector<std::vector<uint32_t>> seen(64);
      for (int i = 0; i < n; ++i) {
        ++want[keys[i] & 63];
        seen[keys[i] & 63].push_back(slots[i]);
      }
      for (int b = 0; b < 64; ++b) {
        CHECK(counts[b] == want[b]);
        std::sort(seen[b].begin(), seen[b].end());
        for (uint32_t s = 0; s < seen[b].size(); ++s) REQUIRE(seen[b][s] == s);
      }
    }
  }
}
