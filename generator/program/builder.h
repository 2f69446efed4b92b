// The instruction builder: mnemonics are methods with typed operands (SReg, VReg, AReg,
// SSrc, VSrc, AccReg), labels are objects. A wrong register class does not compile;
// a wrong width throws at generation time naming the instruction and operand.
#pragma once
#include <initializer_list>
#include <string>

#include "program/alloc.h"
#include "program/program.h"

namespace mla::gen {

class Builder {
 public:
  // Sets up the ABI registers: kernarg pointer s[0:1], then the enabled workgroup IDs,
  // and v0 holding the packed work-item IDs.
  Builder(Program& program);

  Program& program() { return p_; }
  const Target& target() const { return *p_.target; }
  RegAllocator& regs() { return ra_; }

  SReg kernarg_ptr() const { return kernarg_; }
  SReg workgroup_id(int dim) const;  // 0 = x, 1 = y, 2 = z
  VReg workitem_ids() const { return v0_; }

  // Labels.
  Label new_label(const std::string& name);
  void bind(Label l);

  // Generic emission for opcodes without a typed method.
  Inst& emit(std::string_view mnemonic, std::initializer_list<Operand> dst, std::initializer_list<Operand> src,
             Mods mods = {});
  void comment(std::string text);  // attaches to the next instruction

  // ---- Scalar ALU ----
  void s_mov_b32(SReg d, SSrc a) { sop("s_mov_b32", d, 1, {a}); }
  void s_mov_b64(SReg d, SSrc a) { sop("s_mov_b64", d, 2, {a}); }
  void s_add_u32(SReg d, SSrc a, SSrc b) { sop("s_add_u32", d, 1, {a, b}); }
  void s_addc_u32(SReg d, SSrc a, SSrc b) { sop("s_addc_u32", d, 1, {a, b}); }
  void s_add_i32(SReg d, SSrc a, SSrc b) { sop("s_add_i32", d, 1, {a, b}); }
  void s_sub_u32(SReg d, SSrc a, SSrc b) { sop("s_sub_u32", d, 1, {a, b}); }
  void s_subb_u32(SReg d, SSrc a, SSrc b) { sop("s_subb_u32", d, 1, {a, b}); }
  void s_sub_i32(SReg d, SSrc a, SSrc b) { sop("s_sub_i32", d, 1, {a, b}); }
  void s_mul_i32(SReg d, SSrc a, SSrc b) { sop("s_mul_i32", d, 1, {a, b}); }
  void s_mul_hi_u32(SReg d, SSrc a, SSrc b) { sop("s_mul_hi_u32", d, 1, {a, b}); }
  void s_lshl_b32(SReg d, SSrc a, SSrc b) { sop("s_lshl_b32", d, 1, {a, b}); }
  void s_lshr_b32(SReg d, SSrc a, SSrc b) { sop("s_lshr_b32", d, 1, {a, b}); }
  void s_and_b32(SReg d, SSrc a, SSrc b) { sop("s_and_b32", d, 1, {a, b}); }
  void s_or_b32(SReg d, SSrc a, SSrc b) { sop("s_or_b32", d, 1, {a, b}); }
  void s_and_b64(SSrc d, SSrc a, SSrc b) { emit("s_and_b64", {d.op}, {a.op, b.op}); }
  void s_or_b64(SSrc d, SSrc a, SSrc b) { emit("s_or_b64", {d.op}, {a.op, b.op}); }
  void s_min_u32(SReg d, SSrc a, SSrc b) { sop("s_min_u32", d, 1, {a, b}); }
  void s_max_u32(SReg d, SSrc a, SSrc b) { sop("s_max_u32", d, 1, {a, b}); }
  void s_cselect_b32(SReg d, SSrc a, SSrc b) { sop("s_cselect_b32", d, 1, {a, b}); }
  void s_cmp_eq_u32(SSrc a, SSrc b) { emit("s_cmp_eq_u32", {}, {a.op, b.op}); }
  void s_cmp_lg_u32(SSrc a, SSrc b) { emit("s_cmp_lg_u32", {}, {a.op, b.op}); }
  void s_cmp_lt_u32(SSrc a, SSrc b) { emit("s_cmp_lt_u32", {}, {a.op, b.op}); }
  void s_cmp_ge_u32(SSrc a, SSrc b) { emit("s_cmp_ge_u32", {}, {a.op, b.op}); }
  void s_cmp_le_u32(SSrc a, SSrc b) { emit("s_cmp_le_u32", {}, {a.op, b.op}); }
  void s_cmp_gt_u32(SSrc a, SSrc b) { emit("s_cmp_gt_u32", {}, {a.op, b.op}); }
  void s_cmp_lt_i32(SSrc a, SSrc b) { emit("s_cmp_lt_i32", {}, {a.op, b.op}); }

  // ---- Scalar memory ----
  void s_load_dword(SReg d, SReg base, uint32_t offset) { smem("s_load_dword", d, 1, base, offset); }
  void s_load_dwordx2(SReg d, SReg base, uint32_t offset) { smem("s_load_dwordx2", d, 2, base, offset); }
  void s_load_dwordx4(SReg d, SReg base, uint32_t offset) { smem("s_load_dwordx4", d, 4, base, offset); }
  void s_load_dwordx8(SReg d, SReg base, uint32_t offset) { smem("s_load_dwordx8", d, 8, base, offset); }

  // ---- Control ----
  void s_branch(Label l) { branch("s_branch", l); }
  void s_cbranch_scc0(Label l) { branch("s_cbranch_scc0", l); }
  void s_cbranch_scc1(Label l) { branch("s_cbranch_scc1", l); }
  void s_cbranch_vccz(Label l) { branch("s_cbranch_vccz", l); }
  void s_cbranch_vccnz(Label l) { branch("s_cbranch_vccnz", l); }
  void s_cbranch_execz(Label l) { branch("s_cbranch_execz", l); }
  void s_barrier() { s_barrier_publishing(0xff); }
  // A barrier after which the other waves read only these LDS-DMA regions of this wave's
  // (Inst::dma_regions): the waitcnt pass leaves DMA into the other regions in flight.
  void s_barrier_publishing(uint8_t dma_regions);
  // From here on, every s_barrier is followed by counter += 1, with SCC preserved through
  // `scratch` (a barrier may sit between an s_cmp and its branch). A persistent kernel counts its
  // barriers so that waves that finish a work unit early can meet the others (mla_decode.cpp).
  void count_barriers(SReg counter, SReg scratch) { barrier_counter_ = counter, barrier_scratch_ = scratch; }
  void s_endpgm() { emit("s_endpgm", {}, {}); }
  // The LDS-DMA regions the following ds_read / ds_write may touch (Inst::dma_regions; default
  // all): the waitcnt pass makes an LDS access wait for this wave's DMA into those regions only.
  // A kernel whose waves issue DMA and read LDS in the same loop (the wide prefix kernel) names
  // the regions a read may alias: none for data a barrier has published.
  void set_lds_access_regions(uint8_t regions) { lds_access_regions_ = regions; }
  void s_setprio(int prio) { emit("s_setprio", {}, {Operand::of(Imm(prio))}); }

  // ---- Vector ALU ----
  void v_mov_b32(VReg d, VSrc a) { vop("v_mov_b32", d, {a}); }
  // d[l] = a[lane chosen within l's quad]: DPP quad_perm, all rows and banks enabled.
  void v_mov_b32_quad_perm(VReg d, VReg a, int l0, int l1, int l2, int l3) {
    vop("v_mov_b32", d, {a});
    Mods& m = p_.insts.back().mods;
    m.dpp_quad_perm = true;
    for (int k = 0; int l : {l0, l1, l2, l3}) m.quad_perm[k++] = uint8_t(l);
  }
  void v_add_u32(VReg d, VSrc a, VSrc b) { vop("v_add_u32", d, {a, b}); }
  void v_sub_u32(VReg d, VSrc a, VSrc b) { vop("v_sub_u32", d, {a, b}); }
  void v_add3_u32(VReg d, VSrc a, VSrc b, VSrc c) { vop("v_add3_u32", d, {a, b, c}); }
  void v_and_b32(VReg d, VSrc a, VSrc b) { vop("v_and_b32", d, {a, b}); }
  void v_or_b32(VReg d, VSrc a, VSrc b) { vop("v_or_b32", d, {a, b}); }
  void v_xor_b32(VReg d, VSrc a, VSrc b) { vop("v_xor_b32", d, {a, b}); }
  void v_lshlrev_b32(VReg d, VSrc shift, VSrc a) { vop("v_lshlrev_b32", d, {shift, a}); }
  void v_ashrrev_i32(VReg d, VSrc shift, VSrc a) { vop("v_ashrrev_i32", d, {shift, a}); }
  void v_lshrrev_b32(VReg d, VSrc shift, VSrc a) { vop("v_lshrrev_b32", d, {shift, a}); }
  void v_lshl_add_u32(VReg d, VSrc a, VSrc shift, VSrc b) { vop("v_lshl_add_u32", d, {a, shift, b}); }
  void v_lshl_or_b32(VReg d, VSrc a, VSrc shift, VSrc b) { vop("v_lshl_or_b32", d, {a, shift, b}); }
  void v_mul_lo_u32(VReg d, VSrc a, VSrc b) { vop("v_mul_lo_u32", d, {a, b}); }
  void v_mul_u32_u24(VReg d, VSrc a, VSrc b) { vop("v_mul_u32_u24", d, {a, b}); }
  void v_bfe_u32(VReg d, VSrc a, VSrc off, VSrc width) { vop("v_bfe_u32", d, {a, off, width}); }
  void v_perm_b32(VReg d, VSrc a, VSrc b, VSrc sel) { vop("v_perm_b32", d, {a, b, sel}); }
  // mask: VCC or an SGPR pair holding a per-lane condition.
  void v_cndmask_b32(VReg d, VSrc if_false, VSrc if_true, SSrc mask) { vop("v_cndmask_b32", d, {if_false, if_true}, mask); }
  // Compares write a lane mask: VCC or an SGPR pair.
  void v_cmp_lt_u32(SSrc d, VSrc a, VSrc b);
  void v_cmp_gt_u32(SSrc d, VSrc a, VSrc b);
  void v_cmp_le_u32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_le_u32", {d.op}, {a.op, b.op}); }
  void v_cmp_gt_i32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_gt_i32", {d.op}, {a.op, b.op}); }
  void v_cmp_gt_f32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_gt_f32", {d.op}, {a.op, b.op}); }
  void v_cmp_eq_u32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_eq_u32", {d.op}, {a.op, b.op}); }
  void v_max3_f32(VReg d, VSrc a, VSrc b, VSrc c) { vop("v_max3_f32", d, {a, b, c}); }
  void v_min_u32(VReg d, VSrc a, VSrc b) { vop("v_min_u32", d, {a, b}); }
  void v_max_u32(VReg d, VSrc a, VSrc b) { vop("v_max_u32", d, {a, b}); }
  void v_max3_u32(VReg d, VSrc a, VSrc b, VSrc c) { vop("v_max3_u32", d, {a, b, c}); }
  void v_med3_i32(VReg d, VSrc a, VSrc b, VSrc c) { vop("v_med3_i32", d, {a, b, c}); }
  void v_mul_hi_u32(VReg d, VSrc a, VSrc b) { vop("v_mul_hi_u32", d, {a, b}); }
  void v_add_co_u32(VReg d, SSrc carry_out, VSrc a, VSrc b) { emit("v_add_co_u32", {Operand::of(d), carry_out.op}, {a.op, b.op}); }
  void v_addc_co_u32(VReg d, SSrc carry_out, VSrc a, VSrc b, SSrc carry_in) {
    emit("v_addc_co_u32", {Operand::of(d), carry_out.op}, {a.op, b.op, carry_in.op});
  }
  // d2 = a2 * (b2.lo, b2.lo): both halves scaled by the low half of b (op_sel_hi:[1,0]).
  void v_pk_mul_f32_bcast_lo(VReg d2, VReg a2, VReg b2);
  // d2 = a2 * b2 + c2 on two f32 lanes; a source marked bcast feeds its low register to both
  // lanes (op_sel_hi 0; its high register is still named, so it must hold a value). b2 may be
  // an SGPR pair.
  void v_pk_fma_f32(VReg d2, VReg a2, VReg b2, VReg c2, bool b_bcast, bool c_bcast);
  void v_pk_fma_f32(VReg d2, VReg a2, SReg b2, VReg c2, bool b_bcast, bool c_bcast);
  // Two f32 to two fp8 (target format) in word `word` (0: bytes [1:0], 1: bytes [3:2]) of d;
  // the other word of d is kept.
  void v_cvt_pk_fp8_f32(VReg d, VSrc a, VSrc b, int word);
  // Two f32 to two bf16, round to nearest even (gfx950).
  void v_cvt_pk_bf16_f32(VReg d, VSrc lo, VSrc hi) { vop("v_cvt_pk_bf16_f32", d, {lo, hi}); }
  void s_and_saveexec_b64(SReg saved, SSrc mask) { sop("s_and_saveexec_b64", saved, 2, {mask}); }
  void s_mov_exec(SSrc v) { emit("s_mov_b64", {Operand::of(exec)}, {v.op}); }
  void s_mov_m0(SSrc v) { emit("s_mov_b32", {Operand::of(m0)}, {v.op}); }
  void v_add_f32(VReg d, VSrc a, VSrc b) { vop("v_add_f32", d, {a, b}); }
  void v_sub_f32(VReg d, VSrc a, VSrc b) { vop("v_sub_f32", d, {a, b}); }
  void v_mul_f32(VReg d, VSrc a, VSrc b) { vop("v_mul_f32", d, {a, b}); }
  void v_fma_f32(VReg d, VSrc a, VSrc b, VSrc c) { vop("v_fma_f32", d, {a, b, c}); }
  void v_max_f32(VReg d, VSrc a, VSrc b) { vop("v_max_f32", d, {a, b}); }
  void v_exp_f32(VReg d, VSrc a) { vop("v_exp_f32", d, {a}); }
  void v_log_f32(VReg d, VSrc a) { vop("v_log_f32", d, {a}); }
  void v_rcp_f32(VReg d, VSrc a) { vop("v_rcp_f32", d, {a}); }
  void v_cvt_f32_u32(VReg d, VSrc a) { vop("v_cvt_f32_u32", d, {a}); }
  // Two fp8 (target format) from bytes [1:0] (word_sel 0) or [3:2] (word_sel 1) to two f32.
  void v_cvt_pk_f32_fp8(VReg d2, VReg a, int word_sel);
  void v_readfirstlane_b32(SReg d, VReg a) { vop_s("v_readfirstlane_b32", d, {VSrc(a)}); }
  void v_readlane_b32(SReg d, VReg a, SReg lane) { vop_s("v_readlane_b32", d, {VSrc(a), VSrc(lane)}); }
  // d = the set bits of mask below this lane (lo: lanes 0-31 of a 64-bit mask's low half, hi: the
  // high half for lanes 32-63) + add.
  void v_mbcnt_lo(VReg d, SReg mask_lo, VSrc add) { vop("v_mbcnt_lo_u32_b32", d, {VSrc(mask_lo), add}); }
  void v_mbcnt_hi(VReg d, SReg mask_hi, VSrc add) { vop("v_mbcnt_hi_u32_b32", d, {VSrc(mask_hi), add}); }
  void s_bcnt1_i32_b64(SReg d, SSrc mask) { sop("s_bcnt1_i32_b64", d, 1, {mask}); }
  void v_accvgpr_read_b32(VReg d, AReg a);
  void v_accvgpr_write_b32(AReg d, VSrc a);

  // ---- Matrix ----
  // d = a * b + c on the XDL unit; the target must offer the mnemonic (Target::mfma).
  void mfma(std::string_view mnemonic, AccReg d, AVReg a, AVReg b, AccSrc c, Mods mods = {});
  void v_mfma_f32_16x16x32_fp8_fp8(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_16x16x32_fp8_fp8", d, a, b, c); }
  void v_mfma_f32_16x16x128_f8f6f4(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_16x16x128_f8f6f4", d, a, b, c); }
  void v_mfma_f32_16x16x16_bf16(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_16x16x16_bf16", d, a, b, c); }
  void v_mfma_f32_32x32x16_fp8_fp8(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_32x32x16_fp8_fp8", d, a, b, c); }
  void v_mfma_f32_32x32x8_bf16(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_32x32x8_bf16", d, a, b, c); }
  void v_mfma_f32_16x16x32_bf16(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_16x16x32_bf16", d, a, b, c); }
  void v_mfma_f32_32x32x64_f8f6f4(AccReg d, AVReg a, AVReg b, AccSrc c) { mfma("v_mfma_f32_32x32x64_f8f6f4", d, a, b, c); }

  // ---- Vector memory (MUBUF: raw buffer resource, per-lane byte offset in vaddr) ----
  void buffer_load_dword(VReg d, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_load("buffer_load_dword", d, 1, vaddr, rsrc, soffset, offset); }
  void buffer_load_dwordx2(VReg d, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_load("buffer_load_dwordx2", d, 2, vaddr, rsrc, soffset, offset); }
  void buffer_load_dwordx4(VReg d, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_load("buffer_load_dwordx4", d, 4, vaddr, rsrc, soffset, offset); }
  void buffer_store_dword(VReg data, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_store("buffer_store_dword", data, 1, vaddr, rsrc, soffset, offset); }
  void buffer_store_dwordx2(VReg data, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_store("buffer_store_dwordx2", data, 2, vaddr, rsrc, soffset, offset); }
  void buffer_store_dwordx4(VReg data, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0) { mubuf_store("buffer_store_dwordx4", data, 4, vaddr, rsrc, soffset, offset); }
  // Loads one dword per lane straight into LDS at M0 + lane*4 + offset.
  void buffer_load_dword_lds(VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0);
  // Loads 16 bytes per lane straight into LDS at M0 + lane*16 + offset (gfx950; lanes whose
  // dwords fall outside the resource's num_records read nothing). `dma_regions`: the LDS
  // regions it writes (Inst::dma_regions).
  void buffer_load_dwordx4_lds(VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset = 0, uint8_t dma_regions = 0xff);

  // ---- Global memory (64-bit per-lane address, or SGPR base + 32-bit per-lane offset) ----
  void global_load_dword(VReg d, VReg addr64, uint32_t offset = 0) { global_load("global_load_dword", d, 1, addr64, offset); }
  void global_load_dwordx2(VReg d, VReg addr64, uint32_t offset = 0) { global_load("global_load_dwordx2", d, 2, addr64, offset); }
  void global_load_dwordx4(VReg d, VReg addr64, uint32_t offset = 0) { global_load("global_load_dwordx4", d, 4, addr64, offset); }
  void global_load_dword(VReg d, VReg offset32, SReg base64, uint32_t offset = 0);
  void global_store_dword(VReg offset32, VReg data, SReg base64, uint32_t offset = 0);
  // old = the dword at base64 + offset32 before adding data (sc0: returns), performed at agent
  // scope (AMDGPUUsage "Memory Model GFX942": an agent-scope atomicrmw carries no other bit).
  void global_atomic_add_u32_rtn(VReg old, VReg offset32, VReg data, SReg base64);
  // Agent-scope release and acquire (AMDGPUUsage, "AMDHSA Memory Model Code Sequences GFX942"):
  // release = buffer_wbl2 sc1; s_waitcnt vmcnt(0), before the releasing atomic; acquire = the
  // atomic, s_waitcnt vmcnt(0), buffer_inv sc1.
  void buffer_wbl2_sc1();
  void buffer_inv_sc1();
  // An explicit wait for every vector memory operation of the wave (memory ordering, which the
  // waitcnt pass's register scoreboard does not see).
  void s_waitcnt_vmcnt0();

  // ---- LDS ----
  // Lane l reads `data` of lane (addr[l] / 4) % 64 (the LDS crossbar; no LDS memory is touched).
  void ds_bpermute_b32(VReg d, VReg addr, VReg data) { emit("ds_bpermute_b32", {Operand::of(d)}, {Operand::of(addr), Operand::of(data)}); }
  void ds_read_b32(VReg d, VReg addr, uint32_t offset = 0) { ds_read("ds_read_b32", d, 1, addr, offset); }
  void ds_read_b64(VReg d, VReg addr, uint32_t offset = 0) { ds_read("ds_read_b64", d, 2, addr, offset); }
  void ds_read_b128(VReg d, VReg addr, uint32_t offset = 0) { ds_read("ds_read_b128", d, 4, addr, offset); }
  // gfx950 transposing reads: each lane gets one element of 8 (b8) or 4 (b16) other lanes' 8-byte
  // rows (CDNA4 ISA, 'LDS transpose loads'; the emulator's ds_read_tr is checked against golden vectors).
  void ds_read_b64_tr_b8(VReg d, VReg addr, uint32_t offset = 0);
  void ds_read_b64_tr_b16(VReg d, VReg addr, uint32_t offset = 0);
  void ds_write_b32(VReg addr, VReg data, uint32_t offset = 0) { ds_write("ds_write_b32", addr, data, 1, offset); }
  // MEM[addr + offset] += data, atomically among the workgroup's waves (no value returned).
  void ds_add_u32(VReg addr, VReg data, uint32_t offset = 0) { ds_write("ds_add_u32", addr, data, 1, offset); }
  void ds_write_b64(VReg addr, VReg data, uint32_t offset = 0) { ds_write("ds_write_b64", addr, data, 2, offset); }
  void ds_write_b128(VReg addr, VReg data, uint32_t offset = 0) { ds_write("ds_write_b128", addr, data, 4, offset); }

  // Builds a raw buffer resource (V#) in 4 SGPRs: base address from a 64-bit SGPR pair,
  // stride 0, num_records = size_bytes, data format as the gfx9 ISA requires for raw dword access.
  void make_buffer_resource(SReg rsrc4, SReg base2, SSrc num_records);
  // The same with a record stride (bytes, < 2^14): idxen addresses base + stride * index + offset,
  // and an index >= num_records is out of range.
  void make_strided_buffer_resource(SReg rsrc4, SReg base2, SSrc num_records, int stride);
  // 16 bytes per lane at base + stride * index + offset (vaddr = {index, offset}) straight into
  // LDS at M0 + lane*16 (gfx950); lanes whose index is out of range read nothing.
  void buffer_load_dwordx4_idxen_lds(VReg vaddr2, SReg rsrc, SSrc soffset, uint8_t dma_regions = 0xff);

 private:
  void pk_fma_f32_(VReg d2, VReg a2, Operand b2, int b_count, VReg c2, bool b_bcast, bool c_bcast);
  void check_width(std::string_view what, int got, int want, const char* operand);
  void sop(std::string_view m, SReg d, int width, std::initializer_list<SSrc> srcs);
  void vop(std::string_view m, VReg d, std::initializer_list<VSrc> srcs);
  void vop(std::string_view m, VReg d, std::initializer_list<VSrc> srcs, SSrc extra);
  void vop_s(std::string_view m, SReg d, std::initializer_list<VSrc> srcs);
  void smem(std::string_view m, SReg d, int width, SReg base, uint32_t offset);
  void branch(std::string_view m, Label l);
  void mubuf_load(std::string_view m, VReg d, int width, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset);
  void mubuf_store(std::string_view m, VReg data, int width, VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset);
  void ds_read(std::string_view m, VReg d, int width, VReg addr, uint32_t offset);
  void global_load(std::string_view m, VReg d, int width, VReg addr64, uint32_t offset);
  void ds_write(std::string_view m, VReg addr, VReg data, int width, uint32_t offset);
  void check_lds_dma_b128(std::string_view m, SReg rsrc, uint8_t dma_regions);

  Program& p_;
  RegAllocator ra_;
  SReg kernarg_;
  SReg wg_id_[3];
  VReg v0_;
  std::string pending_comment_;
  uint8_t lds_access_regions_ = 0xff;
  SReg barrier_counter_, barrier_scratch_;  // count == 0: barriers are not counted
};

}  // namespace mla::gen
