#include "target/target.h"

namespace mla::gen {

namespace {

// MFMA menus. Pass counts from LLVM's SISchedule.td / GCNHazardRecognizer (gfx940 and gfx950
// XDL write latencies): 16x16 fp8 K=32 = 4 passes, 32x32 fp8 K=16 = 8 passes, 16x16x16 bf16 =
// 4 (gfx942: 8 cycles? kept at 4 passes = 16 cycles, conservative for hazards), gfx950
// 16x16x128 f8f6f4 = 8 passes, 32x32x64 = 16 passes, 16x16x32 bf16 = 8, 32x32x16 bf16 = 16.
const std::vector<MfmaShape> kMfma942 = {
    {"v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, 2, 2, 16, 8},
    {"v_mfma_f32_16x16x16_bf16", 16, 16, 16, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x8_bf16", 32, 32, 8, 2, 2, 16, 8},
};

const std::vector<MfmaShape> kMfma950 = {
    {"v_mfma_f32_16x16x32_fp8_fp8", 16, 16, 32, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x16_fp8_fp8", 32, 32, 16, 2, 2, 16, 8},
    {"v_mfma_f32_16x16x16_bf16", 16, 16, 16, 2, 2, 4, 4},
    {"v_mfma_f32_32x32x8_bf16", 32, 32, 8, 2, 2, 16, 8},
    {"v_mfma_f32_16x16x32_bf16", 16, 16, 32, 4, 4, 4, 8},
    {"v_mfma_f32_32x32x16_bf16", 32, 32, 16, 4, 4, 16, 16},
    {"v_mfma_f32_16x16x128_f8f6f4", 16, 16, 128, 8, 8, 4, 8},
    {"v_mfma_f32_32x32x64_f8f6f4", 32, 32, 64, 8, 8, 16, 16},
};

const Target kGfx942{Arch::gfx942, "gfx942", "gfx942:sramecc+:xnack-", 304, 64 * 1024, 102, 256, 256, 512,
                     Fp8Format::FNUZ, 5.3e12, false, false, kMfma942};
const Target kGfx950{Arch::gfx950, "gfx950", "gfx950:sramecc+:xnack-", 256, 160 * 1024, 102, 256, 256, 512,
                     Fp8Format::OCP, 8.0e12, true, true, kMfma950};

}  // namespace

std::optional<MfmaShape> Target::find_mfma(std::string_view mnemonic) const {
  for (const auto& m : mfma)
    if (m.mnemonic == mnemonic) return m;
  return std::nullopt;
}

const Target& target(Arch arch) { return arch == Arch::gfx942 ? kGfx942 : kGfx950; }

std::optional<Arch> parse_arch(std::string_view name) {
  if (name == "gfx942") return Arch::gfx942;
  if (name == "gfx950") return Arch::gfx950;
  return std::nullopt;
}

std::string_view arch_name(Arch arch) { return target(arch).name; }

}  // namespace mla::gen
