// MFMA execution: gathers the operand registers of all 64 lanes (VGPR or AGPR, or a constant
// SrcC), calls run_mfma (mfma.cpp) and writes D back.
#include <fmt/format.h>

#include <stdexcept>

#include "emulator/exec_common.h"
#include "emulator/mfma.h"

namespace mla::emu {

namespace {

void gather(Wave& w, const Inst& in, unsigned opi, int regs, uint32_t* out) {
  const Operand& o = in.ops[opi];
  if (o.kind == Operand::Const) {  // an inline constant feeds every register of the operand
    for (int i = 0; i < 64 * regs; ++i) out[i] = o.imm;
    return;
  }
  uint32_t t[64];
  for (int r = 0; r < regs; ++r) {
    const uint32_t* p = vsrc(w, in, opi, unsigned(r), t);
    for (int l = 0; l < 64; ++l) out[l * regs + r] = p[l];
  }
}

void exec_mfma(Wave& w, const Inst& in) {
  const MfmaInfo& mi = *in.info->mfma;
  if (w.exec() != ~0ull)
    w.fail("mfma_exec", fmt::format("MFMA issued with EXEC=0x{:016x}; the emulator requires all 64 lanes active", w.exec()));
  if (in.ops[1].width < mi.a_regs || in.ops[2].width < mi.b_regs || in.ops[0].width != mi.cd_regs)
    w.fail("decode", fmt::format("operand widths ({},{},{}) do not match {} ({},{},{})", in.ops[1].width, in.ops[2].width, in.ops[0].width,
                                 mi.name, mi.a_regs, mi.b_regs, mi.cd_regs));
  if (mi.a_regs > 16 || mi.b_regs > 16 || mi.cd_regs > 32) w.fail("unsupported", "MFMA operand wider than modelled");
  alignas(64) uint32_t a[64 * 16], b[64 * 16], c[64 * 32], d[64 * 32];
  gather(w, in, 1, mi.a_regs, a);
  gather(w, in, 2, mi.b_regs, b);
  gather(w, in, 3, mi.cd_regs, c);
  uint32_t sa[64], sb[64];
  bool scaled = mi.scaled;
  if (scaled) {
    if (in.nops < 6) w.fail("decode", "v_mfma_scale without scale operands");
    uint32_t t0[64], t1[64];
    const uint32_t* pa = vsrc(w, in, 4, 0, t0);
    const uint32_t* pb = vsrc(w, in, 5, 0, t1);
    std::memcpy(sa, pa, sizeof sa);
    std::memcpy(sb, pb, sizeof sb);
  }
  MfmaMods mods;
  mods.cbsz = in.cbsz;
  mods.abid = in.abid;
  mods.blgp = in.blgp;
  mods.op_sel = in.op_sel;
  mods.op_sel_hi = in.op_sel_hi;
  try {
    run_mfma(mi, w.gfx(), mods, a, b, c, d, scaled ? sa : nullptr, scaled ? sb : nullptr);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    w.fail("unsupported", e.what());
  }
  for (int r = 0; r < mi.cd_regs; ++r) {
    uint32_t* dst = vdst(w, in, 0, unsigned(r));
    for (int l = 0; l < 64; ++l) dst[l] = d[l * mi.cd_regs + r];
  }
  w.ctr->mfma++;
  w.ctr->mfma_macs += mi.macs;
}

}  // namespace

OpInfo make_mfma_op(const MfmaInfo& mi, Gfx, std::string_view name) {
  OpInfo i;
  i.name = std::string(name);
  i.fn = exec_mfma;
  i.cls = InstClass::MFMA;
  i.ndst = 1;
  i.kind = K_VALU | K_MFMA | (mi.xdl ? uint32_t(K_XDL) : 0u);
  i.mfma = &mi;
  i.passes = uint8_t(mi.passes);
  return i;
}

void register_mfma_ops() {}

}  // namespace mla::emu
