// Target description: everything that differs between gfx942 (MI300X) and gfx950 (MI355X)
// lives here as data. Builders and passes ask the Target; they never test the arch name.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mla::gen {

enum class Arch { gfx942, gfx950 };

enum class Fp8Format { FNUZ, OCP };  // gfx942: e4m3 FNUZ (bias 8); gfx950: OCP e4m3fn (bias 7)

struct MfmaShape {
  std::string_view mnemonic;  // e.g. "v_mfma_f32_16x16x32_fp8_fp8"
  int m, n, k;
  int a_regs, b_regs, cd_regs;  // 32-bit registers per lane
  int passes;                   // 4-cycle passes; sets the XDL hazard windows
};

struct Target {
  Arch arch;
  std::string_view name;       // "gfx942"
  std::string_view target_id;  // "gfx942:sramecc+:xnack-"
  int num_cus;
  uint32_t lds_bytes;          // per workgroup (= per CU)
  int max_sgprs;               // addressable s0..s(max-1) for allocation
  int max_vgprs;               // architectural VGPRs v0..v255
  int max_agprs;               // accumulation registers a0..a255
  int unified_vgprs;           // accum_offset + agprs must fit in this
  Fp8Format fp8;
  double hbm_bytes_per_s;
  bool has_lds_transpose;      // ds_read_b64_tr_b8 / _b16 (gfx950)
  bool has_global_load_lds_x4; // global_load_lds_dwordx4 (gfx950)
  std::vector<MfmaShape> mfma;

  // Number of 4-cycle passes of an MFMA by mnemonic; nullopt if the target lacks it.
  std::optional<MfmaShape> find_mfma(std::string_view mnemonic) const;
};

const Target& target(Arch arch);
// Parses "gfx942" / "gfx950"; nullopt otherwise.
std::optional<Arch> parse_arch(std::string_view name);
std::string_view arch_name(Arch arch);

}  // namespace mla::gen
