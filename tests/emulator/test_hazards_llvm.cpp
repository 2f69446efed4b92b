// Cross-check of the wait-state rules against LLVM: clang-22 places the minimum s_nop that its
// hazard recognizer needs. The unmodified kernels must pass; with any one of those s_nop made one
// wait state shorter, the emulator must report a hazard (so its rules are neither weaker nor
// stronger than LLVM's on these patterns).
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "emu_test_util.h"
#include "emulator/program.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const char* kChain = R"(
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half half4 __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
__kernel void chain(__global const half4* a, __global float4v* out, __global float16v* out2) {
  uint l = __builtin_amdgcn_workitem_id_x();
  half4 x = a[l];
  float4v acc = __builtin_amdgcn_mfma_f32_16x16x16f16(x, x, (float4v)0, 0, 0, 0);
  float4v acc3 = __builtin_amdgcn_mfma_f32_16x16x16f16(x, x, acc, 0, 0, 0);
  float16v acc2 = __builtin_amdgcn_mfma_f32_32x32x8f16(x, x, (float16v)0, 0, 0, 0);
  float16v acc4 = __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_astype(acc2.lo.lo.lo, half4), x, acc2, 0, 0, 0);
  long fa = __builtin_astype(acc3.xy, long);
  float4v acc5 = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(fa, fa, acc3, 0, 0, 0);
  out[l] = acc5 + acc3.x;
  out2[l] = acc4 * acc.y;
}
)";
const char* kChainBf16 = R"(
typedef short short4 __attribute__((ext_vector_type(4)));
typedef float float4v __attribute__((ext_vector_type(4)));
typedef float float16v __attribute__((ext_vector_type(16)));
__kernel void chainbf(__global const short4* a, __global float4v* out, __global float16v* out2, int k) {
  uint l = __builtin_amdgcn_workitem_id_x();
  short4 x = a[l];
  float4v acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, x, (float4v)0, 0, 0, 0);
  float16v acc2 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(x, x, (float16v)0, 0, 0, 0);
  x.x = (short)acc.x;
  acc2 = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(x, x, acc2, 0, 0, 0);
  acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(x, x, acc2.lo.lo, 0, 0, 0);
  out[l] = acc;
  out2[l] = acc2 + (float)k;
}
)";
const char* kMisc = R"(
__kernel void misc(__global float* x, __global int* y, __global float* z) {
  uint l = __builtin_amdgcn_workitem_id_x();
  int v = y[l] + 1;
  int d = __builtin_amdgcn_mov_dpp(v, 0x1b, 0xf, 0xf, false);
  int lane = __builtin_amdgcn_readfirstlane(v) & 63;
  int r = __builtin_amdgcn_readlane(d, lane);
  float e = __builtin_amdgcn_exp2f(x[l]);
  float f = e * 3.0f;
  z[l] = f + (float)r;
  __global float* p = (__global float*)((__global char*)z + (__builtin_amdgcn_readfirstlane(v) & 4));
  p[l + 64] = f;
}
)";

struct Case {
  const char* src;
  const char* kernel;
  unsigned nbuf;
};

void run(const std::vector<uint8_t>& bytes, Gfx g, const char* kernel, unsigned nbuf) {
  auto co = CodeObject::load_bytes(bytes, kernel, g);
  Device dev(g);
  KernargBuilder kb;
  for (unsigned i = 0; i < nbuf; ++i) kb.put<uint64_t>(8 * i, dev.alloc(64 * 64 * 4, 256, "", 0x3c));
  kb.put<int32_t>(8 * nbuf, 3);
  dev.dispatch(co, kernel, {1, 1, 1}, {64, 1, 1}, kb.bytes);
}
}  // namespace

TEST_CASE("hazards: LLVM's own s_nop placement is exactly what the emulator requires", "[hazards]") {
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    for (Case c : {Case{kChain, "chain", 3}, Case{kChainBf16, "chainbf", 3}, Case{kMisc, "misc", 3}}) {
      std::string path = compile_cl(c.src, g, std::string(c.kernel) + "_" + gfx_name(g).data());
      std::ifstream f(path, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      INFO(c.kernel << " on " << gfx_name(g));
      REQUIRE_NOTHROW(run(bytes, g, c.kernel, c.nbuf));
      auto co = CodeObject::load_bytes(bytes, c.kernel, g);
      auto prog = build_program(co, co->kernel(c.kernel));
      const Section* text = nullptr;
      for (auto& s : co->sections())
        if (s.executable) text = &s;
      REQUIRE(text);
      auto it = std::search(bytes.begin(), bytes.end(), text->bytes.begin(), text->bytes.end());
      REQUIRE(it != bytes.end());
      size_t file_off = size_t(it - bytes.begin());
      int patched = 0;
      for (auto& in : prog->insts) {
        if (in.text == "s_endpgm") break;
        if (in.text.rfind("s_nop ", 0) != 0 || (in.simm & 0xf) == 0) continue;
        auto b = bytes;
        size_t off = file_off + (in.pc - text->address);
        REQUIRE(b[off] == uint8_t(in.simm & 0xff));
        b[off] = uint8_t(b[off] - 1);
        INFO("s_nop at pc 0x" << std::hex << in.pc << " shortened to " << std::dec << (in.simm - 1));
        try {
          run(b, g, c.kernel, c.nbuf);
          FAIL("the shortened s_nop was not reported");
        } catch (const Error& e) {
          CHECK(e.rule == "hazard");
        }
        ++patched;
      }
      if (std::string(c.kernel) != "misc") CHECK(patched > 0);
      WARN(c.kernel << " on " << gfx_name(g) << ": " << patched << " LLVM s_nop shortened, each reported");
    }
  }
}
