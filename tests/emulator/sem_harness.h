// One-wave harness for per-instruction semantic tests: inputs in v[10:13], outputs v[20:27].
#pragma once
#include <vector>

#include "emu_test_util.h"

namespace emutest {

struct WaveRun {
  std::vector<uint32_t> out;  // [64][8]: v20..v27 of each lane
  mla::emu::Counters counters;
  uint32_t at(int lane, int reg) const { return out[lane * 8 + reg]; }
  float f(int lane, int reg) const { return bitsf(at(lane, reg)); }
};

// `in`: [64][4] dwords loaded into v[10:13]; s[4:5] = input pointer, s[6:7] = output pointer,
// s[8:9] = pointer to `extra` (a second buffer, e.g. for memory tests), s[2] = workgroup id.
inline WaveRun run_wave(mla::emu::Gfx gfx, const std::string& name, const std::string& body, const std::vector<uint32_t>& in,
                        const std::vector<uint32_t>& extra = std::vector<uint32_t>(256, 0), KernelOpts o = {},
                        mla::emu::DispatchOptions opts = {}) {
  if (o.vgprs == 32) o.vgprs = 64;
  if (o.sgprs == 32) o.sgprs = 64;
  std::string full = R"(  s_load_dwordx4 s[4:7], s[0:1], 0x0
  s_load_dwordx2 s[8:9], s[0:1], 0x10
  v_lshlrev_b32 v1, 4, v0
  v_lshlrev_b32 v2, 5, v0
  s_waitcnt lgkmcnt(0)
  global_load_dwordx4 v[10:13], v1, s[4:5]
  s_waitcnt vmcnt(0)
  v_mov_b32 v20, 0
  v_mov_b32 v21, 0
  v_mov_b32 v22, 0
  v_mov_b32 v23, 0
  v_mov_b32 v24, 0
  v_mov_b32 v25, 0
  v_mov_b32 v26, 0
  v_mov_b32 v27, 0
)" + body + R"(
  s_mov_b64 exec, -1
  s_nop 7
  s_nop 7
  s_nop 7
  v_lshlrev_b32 v2, 5, v0
  s_nop 1
  global_store_dwordx4 v2, v[20:23], s[6:7]
  global_store_dwordx4 v2, v[24:27], s[6:7] offset:16
  s_waitcnt vmcnt(0)
  s_endpgm)";
  std::string tag = name + (gfx == mla::emu::Gfx::gfx942 ? "_942" : "_950");
  auto co = assemble(kernel_src(tag, gfx, full, o), gfx, tag);
  mla::emu::Device dev(gfx);
  uint64_t pin = dev.alloc(64 * 16), pout = dev.alloc(64 * 32, 256, "out", 0xee), px = dev.alloc(extra.size() * 4, 256, "extra");
  std::vector<uint32_t> inp = in;
  inp.resize(256, 0);
  dev.write(pin, inp.data(), 64 * 16);
  dev.write(px, extra.data(), extra.size() * 4);
  mla::emu::KernargBuilder kb;
  kb.put<uint64_t>(0, pin).put<uint64_t>(8, pout).put<uint64_t>(16, px);
  WaveRun r;
  r.counters = dev.dispatch(co, tag, {1, 1, 1}, {64, 1, 1}, kb.bytes, opts);
  r.out = dev.read_vector<uint32_t>(pout, 64 * 8);
  return r;
}

inline std::vector<uint32_t> ramp_inputs(uint32_t seed = 1) {
  std::vector<uint32_t> v(256);
  uint32_t x = seed * 2654435761u + 12345;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = x;
  }
  return v;
}

}  // namespace emutest
