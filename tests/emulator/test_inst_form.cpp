// inst_form: the form key of the provenance table (docs/emulator-provenance.md). Each modifier
// or operand path whose semantics an emulator must get right separately is its own form; a
// different register number or constant is not.
#include <catch2/catch.hpp>

#include "emu_test_util.h"
#include "emulator/inst_form.h"
#include "emulator/program.h"

using namespace mla::emu;
using namespace emutest;

namespace {

// The form of each instruction of `body` (one kernel, s_endpgm appended), in order.
std::vector<std::string> forms_of_body(const std::string& body, Gfx gfx, const std::string& name) {
  KernelOpts o;
  o.agprs = 8;
  auto co = assemble(kernel_src(name, gfx, body + "\ns_endpgm\n", o), gfx, name);
  auto prog = build_program(co, co->kernel(name));
  std::vector<std::string> out;
  for (const auto& in : prog->insts) out.push_back(in.info ? inst_form(in) : "<trap: " + in.text + ">");
  REQUIRE(!out.empty());
  out.pop_back();  // s_endpgm
  return out;
}

}  // namespace

TEST_CASE("inst_form: MFMA operands in AGPRs and an inline-constant SrcC are separate forms") {
  auto f = forms_of_body(R"(
    v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[4:5], v[6:7], v[0:3]
    v_mfma_f32_16x16x32_fp8_fp8 v[8:11], v[4:5], v[6:7], 0
    v_mfma_f32_16x16x32_fp8_fp8 a[0:3], v[4:5], v[6:7], a[0:3]
    v_mfma_f32_16x16x32_fp8_fp8 v[0:3], v[4:5], a[6:7], 0)",
                         Gfx::gfx942, "form_mfma");
  REQUIRE(f.size() == 4);
  CHECK(f[0] == "v_mfma_f32_16x16x32_fp8_fp8");
  CHECK(f[1] == "v_mfma_f32_16x16x32_fp8_fp8 c:imm");
  CHECK(f[2] == "v_mfma_f32_16x16x32_fp8_fp8 acc:dc");
  CHECK(f[3] == "v_mfma_f32_16x16x32_fp8_fp8 acc:b c:imm");
}

TEST_CASE("inst_form: buffer offen/idxen and global saddr are separate forms / offsets are not") {
  auto f = forms_of_body(R"(
    buffer_load_dword v1, v2, s[4:7], 0 offen offset:16
    buffer_load_dword v1, v2, s[4:7], 0 offen
    buffer_load_dword v1, off, s[4:7], 0
    buffer_load_dword v1, v2, s[4:7], 0 idxen
    global_load_dword v1, v2, s[4:5] offset:8
    global_load_dword v1, v[2:3], off)",
                         Gfx::gfx942, "form_mem");
  REQUIRE(f.size() == 6);
  CHECK(f[0] == "buffer_load_dword offen");
  CHECK(f[1] == f[0]);
  CHECK(f[2] == "buffer_load_dword");
  CHECK(f[3] == "buffer_load_dword idxen");
  CHECK(f[4] == "global_load_dword saddr");
  CHECK(f[5] == "global_load_dword");
}

TEST_CASE("inst_form: op_sel_hi bits (bit 0 = src0), SDWA selects and DPP families are keyed") {
  auto f = forms_of_body(R"(
    v_pk_mul_f32 v[0:1], v[2:3], v[4:5] op_sel_hi:[1,0]
    v_pk_mul_f32 v[0:1], v[2:3], v[4:5]
    v_pk_fma_f32 v[0:1], v[2:3], v[4:5], v[6:7] op_sel_hi:[1,0,1]
    v_cvt_pk_f32_fp8_sdwa v[0:1], v2 src0_sel:WORD_1
    v_cvt_pk_f32_fp8 v[0:1], v2
    v_mov_b32_dpp v0, v1 quad_perm:[0,0,2,2] row_mask:0xf bank_mask:0xf
    v_mov_b32_dpp v0, v1 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf
    v_mov_b32_dpp v0, v1 row_shr:1 row_mask:0xf bank_mask:0x5)",
                         Gfx::gfx942, "form_mod");
  REQUIRE(f.size() == 8);
  CHECK(f[0] == "v_pk_mul_f32 op_sel_hi:0b1");
  CHECK(f[1] == "v_pk_mul_f32");
  CHECK(f[2] == "v_pk_fma_f32 op_sel_hi:0b101");
  CHECK(f[3] == "v_cvt_pk_f32_fp8 sdwa:src0_sel:WORD_1");
  CHECK(f[4] == "v_cvt_pk_f32_fp8");
  CHECK(f[5] == "v_mov_b32 dpp:quad_perm");
  CHECK(f[6] == f[5]);
  CHECK(f[7] == "v_mov_b32 dpp:row_shr dpp_masks");
}
