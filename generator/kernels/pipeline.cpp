// Pipeline kernels: small but real kernels that carry a config through every stage
// (builder, waitcnt and hazard passes, printer, llvm-mc, ld.lld, catalog) and that the
// emulator checks for what they compute.
#include <fmt/format.h>

#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {
constexpr int kWaveLanes = 64;

// The common head of the two streaming kernels: arguments (out*, in*, n, <value>), loaded,
// and raw buffer resources over `out` (out_bytes_per_n * n bytes) and `in` (in_bytes_per_n * n).
struct StreamArgs {
  SReg values;  // [0] = n, [1] = the fourth argument
  SReg out_rsrc, in_rsrc;
};

StreamArgs stream_args(Program& p, Builder& b, const char* out_type, const char* in_type, const char* value_name,
                       const char* value_type, int out_bytes_log2, int in_bytes_log2) {
  auto& abi = p.abi;
  abi.add_buffer("out", out_type);
  abi.add_buffer("in", in_type);
  abi.add_value("n", 4, "uint32_t");
  abi.add_value(value_name, 4, value_type);
  abi.max_workgroup_size = 256;
  auto& ra = b.regs();
  StreamArgs a{ra.sgpr(2, "n_value"), ra.sgpr(4, "out_rsrc"), ra.sgpr(4, "in_rsrc")};
  SReg ptrs = ra.sgpr(4, "out_in_ptrs"), bytes = ra.sgpr(1, "bytes");
  b.s_load_dwordx4(ptrs, b.kernarg_ptr(), 0);
  b.s_load_dwordx2(a.values, b.kernarg_ptr(), 16);
  b.s_lshl_b32(bytes, a.values[0], Imm(out_bytes_log2));
  b.make_buffer_resource(a.out_rsrc, ptrs.sub(0, 2), bytes);
  b.s_lshl_b32(bytes, a.values[0], Imm(in_bytes_log2));
  b.make_buffer_resource(a.in_rsrc, ptrs.sub(2, 2), bytes);
  ra.release(ptrs);
  ra.release(bytes);
  return a;
}
}  // namespace

// out[i] = in[i] for i < n, dword granular. Grid-stride over tiles of 256 dwords: workgroup
// w handles tiles w, w + num_groups, ...; buffer range checking (num_records = 4n) returns 0
// for the tail lanes' loads and drops their stores, so there is no per-lane branch.
// Args: out (u32*), in (u32*), n (u32), num_groups (u32). Block 256.
void build_vector_copy(Program& p) {
  Builder b(p);
  auto& ra = b.regs();
  auto [counts, out_rsrc, in_rsrc] = stream_args(p, b, "uint32_t*", "const uint32_t*", "num_groups", "uint32_t", 2, 2);
  // Tile loop: tile = workgroup_id; byte offset of the tile = tile * 1024.
  SReg tile = ra.sgpr(1, "tile"), num_tiles = ra.sgpr(1, "num_tiles"), tile_off = ra.sgpr(1, "tile_offset");
  b.s_add_u32(num_tiles, counts[0], Imm(255));
  b.s_lshr_b32(num_tiles, num_tiles, Imm(8));
  b.s_mov_b32(tile, b.workgroup_id(0));
  VReg lane_off = ra.vgpr(1, "lane_offset"), addr = ra.vgpr(1, "addr"), data = ra.vgpr(1, "data");
  b.v_lshlrev_b32(lane_off, Imm(2), b.workitem_ids());
  Label loop = b.new_label("tile_loop"), done = b.new_label("done");
  b.s_cmp_ge_u32(tile, num_tiles);
  b.s_cbranch_scc1(done);
  b.bind(loop);
  // The tile offset goes into the VGPR address: vaddr + inst_offset is range-checked on every
  // generation, while whether soffset is included differs between GCN and CDNA documentation.
  b.s_lshl_b32(tile_off, tile, Imm(10));
  b.v_add_u32(addr, tile_off, lane_off);
  b.buffer_load_dword(data, addr, in_rsrc, Imm(0));
  b.buffer_store_dword(data, addr, out_rsrc, Imm(0));
  b.s_add_u32(tile, tile, counts[1]);
  b.s_cmp_lt_u32(tile, num_tiles);
  b.s_cbranch_scc1(loop);
  b.bind(done);
  b.s_endpgm();
}

// out[i] = fp8_to_f32(in[i]) * scale, with fp8 in the target's format (FNUZ e4m3 on
// gfx942, OCP e4m3fn on gfx950). Each lane converts 4 bytes with two v_cvt_pk_f32_fp8.
// Args: out (f32*), in (u8*), n (u32, bytes, multiple of 4), scale (f32). Block 256,
// grid = ceil(n / 1024).
void build_fp8_dequant(Program& p) {
  Builder b(p);
  auto& ra = b.regs();
  auto [nscale, out_rsrc, in_rsrc] = stream_args(p, b, "float*", "const uint8_t*", "scale", "float", 2, 0);
  // Lane byte offset into `in`: (workgroup * 256 + lane) * 4; into `out`: 4x that.
  VReg in_off = ra.vgpr(1, "in_offset"), out_off = ra.vgpr(1, "out_offset");
  SReg wg_base = ra.sgpr(1, "wg_base");
  b.s_lshl_b32(wg_base, b.workgroup_id(0), Imm(10));
  b.v_lshlrev_b32(in_off, Imm(2), b.workitem_ids());
  b.v_add_u32(in_off, wg_base, in_off);
  b.v_lshlrev_b32(out_off, Imm(2), in_off);
  VReg packed = ra.vgpr(1, "fp8x4"), f = ra.vgpr(4, "f32x4");
  b.buffer_load_dword(packed, in_off, in_rsrc, Imm(0));
  b.v_cvt_pk_f32_fp8(f.sub(0, 2), packed, 0);
  b.v_cvt_pk_f32_fp8(f.sub(2, 2), packed, 1);
  for (int i = 0; i < 4; ++i) b.v_mul_f32(f[i], nscale[1], f[i]);
  b.buffer_store_dwordx4(f, out_off, out_rsrc, Imm(0));
  b.s_endpgm();
}

// D[16][16] (f32, row-major) = A[16][32] (fp8, row-major) * B[32][16], with B given
// transposed (Bt[16][32], row-major) so that each lane's 8 k-values are contiguous.
// One wave; operand layout of v_mfma_f32_16x16x32_fp8_fp8 (gfx942 and gfx950):
//   A: lane l holds A[l%16][8*(l/16) + p], p = 0..7;  B: B[8*(l/16) + p][l%16];
//   D: lane l holds D[4*(l/16) + r][l%16], r = 0..3.
// Args: d (f32*), a (u8*), bt (u8*). Block 64, grid 1.
void build_mfma_tile(Program& p) {
  auto& abi = p.abi;
  abi.add_buffer("d", "float*");
  abi.add_buffer("a", "const uint8_t*");
  abi.add_buffer("bt", "const uint8_t*");
  abi.max_workgroup_size = kWaveLanes;
  Builder b(p);
  auto& ra = b.regs();
  SReg ptrs = ra.sgpr(8, "d_a_bt_ptrs");
  b.s_load_dwordx4(ptrs.sub(0, 4), b.kernarg_ptr(), 0);
  b.s_load_dwordx2(ptrs.sub(4, 2), b.kernarg_ptr(), 16);
  SReg d_rsrc = ra.sgpr(4, "d_rsrc"), a_rsrc = ra.sgpr(4, "a_rsrc"), b_rsrc = ra.sgpr(4, "bt_rsrc");
  b.make_buffer_resource(d_rsrc, ptrs.sub(0, 2), Imm(16 * 16 * 4));
  b.make_buffer_resource(a_rsrc, ptrs.sub(2, 2), Imm(16 * 32));
  b.make_buffer_resource(b_rsrc, ptrs.sub(4, 2), Imm(16 * 32));
  // Operand offset: (l%16)*32 + 8*(l/16).
  VReg row = ra.vgpr(1, "row"), grp = ra.vgpr(1, "group"), off = ra.vgpr(1, "operand_offset");
  b.v_and_b32(row, Imm(15), b.workitem_ids());
  b.v_lshrrev_b32(grp, Imm(4), b.workitem_ids());
  b.v_lshlrev_b32(off, Imm(5), row);
  b.v_lshl_add_u32(off, grp, Imm(3), off);
  VReg av = ra.vgpr(2, "a_operand"), bv = ra.vgpr(2, "b_operand");
  b.buffer_load_dwordx2(av, off, a_rsrc, Imm(0));
  b.buffer_load_dwordx2(bv, off, b_rsrc, Imm(0));
  AReg acc = ra.agpr(4, "acc");
  for (int r = 0; r < 4; ++r) b.v_accvgpr_write_b32(acc[r], Imm(0));
  b.v_mfma_f32_16x16x32_fp8_fp8(acc, av, bv, acc);
  // Result offset for r: ((4*(l/16) + r) * 16 + l%16) * 4 = grp*256 + row*4 + r*64.
  VReg doff = ra.vgpr(1, "d_offset"), dv = ra.vgpr(4, "d_values");
  b.v_lshlrev_b32(doff, Imm(2), row);
  b.v_lshl_add_u32(doff, grp, Imm(8), doff);
  for (int r = 0; r < 4; ++r) b.v_accvgpr_read_b32(dv[r], acc[r]);
  for (int r = 0; r < 4; ++r) b.buffer_store_dword(dv[r], doff, d_rsrc, Imm(0), uint32_t(r * 64));
  b.s_endpgm();
}

}  // namespace mla::gen
