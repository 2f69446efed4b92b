// Loader: descriptors and metadata of real code objects; clear errors for bad inputs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "emu_test_util.h"

using namespace mla::emu;
using namespace emutest;

namespace {
const char* kBody = R"(  s_load_dwordx2 s[4:5], s[0:1], 0x0
  s_waitcnt lgkmcnt(0)
  s_endpgm)";

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("loader: descriptor fields of an assembled kernel", "[loader]") {
  KernelOpts o;
  o.vgprs = 40;
  o.agprs = 16;
  o.sgprs = 24;
  o.lds = 4096;
  o.kernarg = 48;
  o.wg_id_y = true;
  auto co = assemble(kernel_src("kd_fields", Gfx::gfx950, kBody, o), Gfx::gfx950, "kd_fields");
  REQUIRE(co->gfx() == Gfx::gfx950);
  REQUIRE(co->kernels().size() == 1);
  const Kernel& k = co->kernel("kd_fields");
  CHECK(k.kd.group_segment_fixed_size == 4096);
  CHECK(k.kd.kernarg_size == 48);
  CHECK(k.kd.accum_offset() == 40);
  CHECK(k.kd.vgpr_alloc() == 56);
  CHECK(k.kd.user_sgpr_count() == 2);
  CHECK(k.kd.user_sgpr(3));  // kernarg segment ptr
  CHECK(k.kd.wg_id(0));
  CHECK(k.kd.wg_id(1));
  CHECK(!k.kd.wg_id(2));
  CHECK(k.kd.float_denorm_mode_32() == 3);
  CHECK(k.entry_address == k.kd_address + k.kd.entry_offset);
  CHECK(co->at(k.entry_address, 4) != nullptr);
}

TEST_CASE("loader: OpenCL code object metadata", "[loader]") {
  std::string p = compile_cl("__kernel void meta(__global float* x, int n, float a) { x[0] = n * a; }", Gfx::gfx942, "meta");
  auto co = CodeObject::load_file(p);
  const Kernel& k = co->kernel("meta");
  REQUIRE(k.has_metadata);
  REQUIRE(k.args.size() >= 3);
  CHECK(k.args[0].value_kind == "global_buffer");
  CHECK(k.args[0].offset == 0);
  CHECK(k.args[1].value_kind == "by_value");
  CHECK(k.args[1].offset == 8);
  CHECK(k.args[2].offset == 12);
  CHECK(co->target_id().find("gfx942") != std::string::npos);
}

TEST_CASE("loader: errors are exceptions with clear messages", "[loader]") {
  std::string path = assemble_file(kernel_src("errk", Gfx::gfx942, kBody), Gfx::gfx942, "errk");
  SECTION("wrong target requested") {
    REQUIRE_THROWS_WITH(CodeObject::load_file(path, Gfx::gfx950), Catch::Contains("built for gfx942 but gfx950 was requested"));
  }
  SECTION("device of another target") {
    Device dev(Gfx::gfx950);
    REQUIRE_THROWS_WITH(dev.dispatch(CodeObject::load_file(path), "errk", {1, 1, 1}, {64, 1, 1}, {}), Catch::Contains("is for gfx942"));
  }
  SECTION("unsupported target") {
    std::string src = kernel_src("old", Gfx::gfx942, kBody);
    src.replace(src.find("gfx942"), 6, "gfx90a");
    std::string p90 = tmp_root() / "old.s";
    std::ofstream(p90) << src;
    std::string out;
    REQUIRE(run_cmd(fmt::format("{} -triple amdgcn-amd-amdhsa -mcpu=gfx90a -filetype=obj {} -o {}/old.o && {} -shared {}/old.o -o {}/old.co",
                                mla::build::kLlvmMc, p90, tmp_root().string(), mla::build::kLdLld, tmp_root().string(), tmp_root().string()),
                    &out) == 0);
    REQUIRE_THROWS_WITH(CodeObject::load_file((tmp_root() / "old.co").string()), Catch::Contains("unsupported target"));
  }
  SECTION("truncated files") {
    auto bytes = read_all(path);
    for (size_t n : {size_t(0), size_t(3), size_t(40), size_t(64), bytes.size() / 4, bytes.size() / 2, bytes.size() - 1}) {
      std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
      INFO("truncated to " << n << " bytes");
      REQUIRE_THROWS_AS(CodeObject::load_bytes(cut, "cut.co"), Error);
    }
  }
  SECTION("not an ELF") {
    std::vector<uint8_t> junk(1000, 0x5a);
    REQUIRE_THROWS_WITH(CodeObject::load_bytes(junk, "junk.co"), Catch::Contains("not an ELF"));
  }
  SECTION("missing file") { REQUIRE_THROWS_WITH(CodeObject::load_file("/nonexistent/x.co"), Catch::Contains("cannot open")); }
  SECTION("missing kernel") {
    auto co = CodeObject::load_file(path);
    REQUIRE_THROWS_WITH(co->kernel("nope"), Catch::Contains("no kernel named 'nope'") && Catch::Contains("errk"));
    Device dev(Gfx::gfx942);
    REQUIRE_THROWS_WITH(dev.dispatch(co, "nope", {1, 1, 1}, {64, 1, 1}, {}), Catch::Contains("no kernel named"));
  }
  SECTION("corrupted bytes never crash") {
    auto bytes = read_all(path);
    uint32_t seed = 12345;
    for (int trial = 0; trial < 200; ++trial) {
      auto b = bytes;
      for (int k = 0; k < 8; ++k) {
        seed = seed * 1664525u + 1013904223u;
        b[(seed >> 8) % b.size()] = uint8_t(seed >> 24);
      }
      try {
        auto co = CodeObject::load_bytes(b, "fuzz.co");
        for (auto& k : co->kernels()) {
          Device dev(co->gfx());
          DispatchOptions opts;
          opts.max_wave_instructions = 10000;
          try { dev.dispatch(co, k.name, {1, 1, 1}, {64, 1, 1}, std::vector<uint8_t>(64, 0), opts); } catch (const Error&) {}
        }
      } catch (const Error&) {
      }
    }
    SUCCEED();
  }
}

// Fuzzing found these (issue #15): metadata msgpack with a map or array as a map key crashed
// LLVM's reader, 127 preloaded kernarg SGPRs ran the initial SGPR writes off the register file.
// Every byte of a real metadata note, replaced by a map, array or long-string header, must give
// a loaded code object or a loader error, never a crash.
TEST_CASE("loader: mutated metadata notes and oversized user SGPR counts are loader errors", "[loader]") {
  const std::string path =
      compile_cl("__kernel void notek(__global int* x) { x[__builtin_amdgcn_workitem_id_x()] = 1; }", Gfx::gfx950, "notek");
  const std::vector<uint8_t> good = read_all(path);
  const std::string key = "amdhsa.kernels";
  auto it = std::search(good.begin(), good.end(), key.begin(), key.end());
  REQUIRE(it != good.end());
  const size_t start = size_t(it - good.begin()) - 2, end = std::min(good.size(), start + 1200);
  int errors = 0, loaded = 0;
  for (size_t i = start; i < end; ++i)
    for (uint8_t b : {uint8_t(0x81), uint8_t(0x91), uint8_t(0xdf), uint8_t(0xdb)}) {
      std::vector<uint8_t> bytes = good;
      bytes[i] = b;
      try {
        CodeObject::load_bytes(bytes, "mutated.co");
        ++loaded;
      } catch (const Error& e) {
        CHECK(e.rule == "loader");
        ++errors;
      }
    }
  CHECK(errors > 0);
  CHECK(loaded > 0);
  // A map key that is a map: the check names it.
  std::vector<uint8_t> bad = good;
  bad[start + 1] = 0x81;  // the first key's string header becomes a one-entry map
  REQUIRE_THROWS_WITH(CodeObject::load_bytes(bad, "bad.co"), Catch::Contains("malformed msgpack metadata note"));
  // 127 preloaded kernarg dwords (kernel descriptor byte 58, bits 6:0).
  std::vector<uint8_t> pre = good;
  auto co = CodeObject::load_bytes(good, "good.co");
  const uint64_t kd = co->kernels().at(0).kd_address;
  bool patched = false;
  for (const auto& s : co->sections())
    if (kd >= s.address && kd + 64 <= s.address + s.bytes.size() && s.file_offset) {
      pre[s.file_offset + (kd - s.address) + 58] = 127;
      patched = true;
    }
  REQUIRE(patched);
  REQUIRE_THROWS_WITH(CodeObject::load_bytes(pre, "preload.co"), Catch::Contains("user SGPRs") && Catch::Contains("at most 16"));
}
