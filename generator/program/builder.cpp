#include "program/builder.h"

#include <fmt/format.h>

namespace mla::gen {

Builder::Builder(Program& program) : p_(program), ra_(*program.target) {
  kernarg_ = ra_.reserve_sgpr(0, 2, "kernarg_ptr");
  int next = p_.user_sgpr_count();
  const bool enabled[3] = {p_.abi.workgroup_id_x, p_.abi.workgroup_id_y, p_.abi.workgroup_id_z};
  for (int d = 0; d < 3; ++d)
    if (enabled[d]) wg_id_[d] = ra_.reserve_sgpr(next++, 1, fmt::format("workgroup_id_{}", "xyz"[d]));
  v0_ = ra_.reserve_vgpr(0, 1, "workitem_ids");
}

SReg Builder::workgroup_id(int dim) const {
  if (dim < 0 || dim > 2 || !wg_id_[dim].valid())
    throw std::logic_error(fmt::format("workgroup id {} is not enabled in the kernel ABI", dim));
  return wg_id_[dim];
}

Label Builder::new_label(const std::string& name) {
  Label l{int(p_.label_names.size())};
  p_.label_names.push_back(fmt::format(".L{}_{}", name, l.id));
  return l;
}

void Builder::bind(Label l) {
  Inst i;
  i.info = &op_info(".label");
  i.target = l.id;
  p_.insts.push_back(std::move(i));
}

Inst& Builder::emit(std::string_view mnemonic, std::initializer_list<Operand> dst, std::initializer_list<Operand> src,
                    Mods mods) {
  Inst i;
  i.info = &op_info(mnemonic);
  i.dst = dst;
  i.src = src;
  i.mods = std::move(mods);
  i.comment = std::move(pending_comment_);
  pending_comment_.clear();
  p_.insts.push_back(std::move(i));
  return p_.insts.back();
}

void Builder::comment(std::string text) { pending_comment_ = std::move(text); }

void Builder::s_barrier_publishing(uint8_t dma_regions) {
  emit("s_barrier", {}, {}).dma_regions = dma_regions;
  if (barrier_counter_.count == 0) return;
  s_cselect_b32(barrier_scratch_, Imm(1), Imm(0));  // SCC, saved
  s_add_u32(barrier_counter_, barrier_counter_, Imm(1));
  s_cmp_lg_u32(barrier_scratch_, Imm(0));           // SCC, restored
}

void Builder::check_width(std::string_view what, int got, int want, const char* operand) {
  if (got != want)
    throw std::invalid_argument(
        fmt::format("{}: operand '{}' covers {} registers, the instruction needs {}", what, operand, got, want));
}

void Builder::sop(std::string_view m, SReg d, int width, std::initializer_list<SSrc> srcs) {
  check_width(m, d.count, width, "dst");
  Inst& i = emit(m, {Operand::of(d)}, {});
  for (const auto& s : srcs) i.src.push_back(s.op);
}

void Builder::vop(std::string_view m, VReg d, std::initializer_list<VSrc> srcs) {
  check_width(m, d.count, 1, "dst");
  Inst& i = emit(m, {Operand::of(d)}, {});
  for (const auto& s : srcs) i.src.push_back(s.op);
}

void Builder::vop(std::string_view m, VReg d, std::initializer_list<VSrc> srcs, SSrc extra) {
  vop(m, d, srcs);
  p_.insts.back().src.push_back(extra.op);
}

void Builder::vop_s(std::string_view m, SReg d, std::initializer_list<VSrc> srcs) {
  check_width(m, d.count, 1, "dst");
  Inst& i = emit(m, {Operand::of(d)}, {});
  for (const auto& s : srcs) i.src.push_back(s.op);
}

void Builder::v_cmp_lt_u32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_lt_u32", {d.op}, {a.op, b.op}); }
void Builder::v_cmp_gt_u32(SSrc d, VSrc a, VSrc b) { emit("v_cmp_gt_u32", {d.op}, {a.op, b.op}); }

void Builder::v_cvt_pk_f32_fp8(VReg d2, VReg a, int word_sel) {
  check_width("v_cvt_pk_f32_fp8", d2.count, 2, "dst");
  if (word_sel != 0 && word_sel != 1) throw std::invalid_argument("v_cvt_pk_f32_fp8: word_sel must be 0 or 1");
  // The VOP3 op_sel form is not accepted by llvm-mc for this opcode on gfx9; SDWA selects the word.
  if (word_sel)
    emit("v_cvt_pk_f32_fp8_sdwa", {Operand::of(d2)}, {Operand::of(a)}, Mods{.src0_sel = SdwaSel::WORD_1});
  else
    emit("v_cvt_pk_f32_fp8", {Operand::of(d2)}, {Operand::of(a)});
}

void Builder::v_accvgpr_read_b32(VReg d, AReg a) {
  check_width("v_accvgpr_read_b32", d.count, 1, "dst");
  emit("v_accvgpr_read_b32", {Operand::of(d)}, {Operand::of(a)});
}

void Builder::v_accvgpr_write_b32(AReg d, VSrc a) {
  check_width("v_accvgpr_write_b32", d.count, 1, "dst");
  emit("v_accvgpr_write_b32", {Operand::of(d)}, {a.op});
}

void Builder::mfma(std::string_view mnemonic, AccReg d, AVReg a, AVReg b, AccSrc c, Mods mods) {
  auto shape = target().find_mfma(mnemonic);
  if (!shape)
    throw std::invalid_argument(fmt::format("{} is not available on {}", mnemonic, target().name));
  check_width(mnemonic, d.op.count, shape->cd_regs, "dst");
  if (c.op.kind != Operand::Kind::Imm) check_width(mnemonic, c.op.count, shape->cd_regs, "src2");
  check_width(mnemonic, a.op.count, shape->a_regs, "src0");
  check_width(mnemonic, b.op.count, shape->b_regs, "src1");
  emit(mnemonic, {d.op}, {a.op, b.op, c.op}, std::move(mods));
}

void Builder::v_pk_mul_f32_bcast_lo(VReg d2, VReg a2, VReg b2) {
  check_width("v_pk_mul_f32", d2.count, 2, "dst");
  check_width("v_pk_mul_f32", a2.count, 2, "src0");
  check_width("v_pk_mul_f32", b2.count, 2, "src1");
  emit("v_pk_mul_f32", {Operand::of(d2)}, {Operand::of(a2), Operand::of(b2)}, Mods{.op_sel_hi = {2, 0b01}});
}

void Builder::pk_fma_f32_(VReg d2, VReg a2, Operand b2, int b_count, VReg c2, bool b_bcast, bool c_bcast) {
  check_width("v_pk_fma_f32", d2.count, 2, "dst");
  check_width("v_pk_fma_f32", a2.count, 2, "src0");
  check_width("v_pk_fma_f32", b_count, 2, "src1");
  check_width("v_pk_fma_f32", c2.count, 2, "src2");
  Mods mods;
  if (b_bcast || c_bcast) mods.op_sel_hi = {3, uint8_t(1 | (b_bcast ? 0 : 2) | (c_bcast ? 0 : 4))};
  emit("v_pk_fma_f32", {Operand::of(d2)}, {Operand::of(a2), b2, Operand::of(c2)}, mods);
}

void Builder::v_pk_fma_f32(VReg d2, VReg a2, VReg b2, VReg c2, bool b_bcast, bool c_bcast) {
  pk_fma_f32_(d2, a2, Operand::of(b2), b2.count, c2, b_bcast, c_bcast);
}

void Builder::v_pk_fma_f32(VReg d2, VReg a2, SReg b2, VReg c2, bool b_bcast, bool c_bcast) {
  pk_fma_f32_(d2, a2, Operand::of(b2), b2.count, c2, b_bcast, c_bcast);
}

void Builder::v_cvt_pk_fp8_f32(VReg d, VSrc a, VSrc b, int word) {
  check_width("v_cvt_pk_fp8_f32", d.count, 1, "dst");
  if (word != 0 && word != 1) throw std::invalid_argument("v_cvt_pk_fp8_f32: word must be 0 or 1");
  // Writing word 1 keeps word 0: the destination is also read.
  Inst& i = emit("v_cvt_pk_fp8_f32", {Operand::of(d)}, {a.op, b.op}, word ? Mods{.op_sel = {3, 0b100}} : Mods{});
  if (word) {
    i.src.push_back(Operand::of(d));
    i.printed_src = 2;
  }
}

namespace {
Mods mubuf_mods(uint32_t offset, bool lds = false) { return Mods{.offen = true, .offset = offset, .lds = lds}; }
Mods offset_mods(uint32_t offset) { return Mods{.offset = offset}; }
}  // namespace

void Builder::global_load(std::string_view m, VReg d, int width, VReg addr64, uint32_t offset) {
  check_width(m, d.count, width, "vdst");
  check_width(m, addr64.count, 2, "vaddr");
  if (offset > 4095) throw std::invalid_argument(fmt::format("{}: offset {} exceeds 12 bits", m, offset));
  emit(m, {Operand::of(d)}, {Operand::of(addr64), Operand{Operand::Kind::Special, 0xff, 0, 0}},
       offset_mods(offset));
}

void Builder::global_load_dword(VReg d, VReg offset32, SReg base64, uint32_t offset) {
  check_width("global_load_dword", d.count, 1, "vdst");
  check_width("global_load_dword", offset32.count, 1, "vaddr");
  check_width("global_load_dword", base64.count, 2, "saddr");
  emit("global_load_dword", {Operand::of(d)}, {Operand::of(offset32), Operand::of(base64)},
       offset_mods(offset));
}

void Builder::global_store_dword(VReg offset32, VReg data, SReg base64, uint32_t offset) {
  check_width("global_store_dword", data.count, 1, "vdata");
  check_width("global_store_dword", offset32.count, 1, "vaddr");
  check_width("global_store_dword", base64.count, 2, "saddr");
  emit("global_store_dword", {}, {Operand::of(offset32), Operand::of(data), Operand::of(base64)}, offset_mods(offset));
}

void Builder::global_atomic_add_u32_rtn(VReg old, VReg offset32, VReg data, SReg base64) {
  check_width("global_atomic_add", old.count, 1, "vdst");
  check_width("global_atomic_add", offset32.count, 1, "vaddr");
  check_width("global_atomic_add", data.count, 1, "vdata");
  check_width("global_atomic_add", base64.count, 2, "saddr");
  Mods m;
  m.sc0 = true;
  emit("global_atomic_add", {Operand::of(old)}, {Operand::of(offset32), Operand::of(data), Operand::of(base64)}, m);
}

void Builder::buffer_wbl2_sc1() {
  Mods m;
  m.sc1 = true;
  emit("buffer_wbl2", {}, {}, m);
}

void Builder::buffer_inv_sc1() {
  Mods m;
  m.sc1 = true;
  emit("buffer_inv", {}, {}, m);
}

void Builder::s_waitcnt_vmcnt0() { emit("s_waitcnt", {}, {}).vmcnt = 0; }

void Builder::smem(std::string_view m, SReg d, int width, SReg base, uint32_t offset) {
  check_width(m, d.count, width, "dst");
  check_width(m, base.count, 2, "base");
  emit(m, {Operand::of(d)}, {Operand::of(base), Operand::of(Imm(offset))});
}

void Builder::branch(std::string_view m, Label l) {
  if (l.id < 0) throw std::invalid_argument(fmt::format("{}: label was never created", m));
  emit(m, {}, {}).target = l.id;
}


void Builder::mubuf_load(std::string_view m, VReg d, int width, VReg vaddr, SReg rsrc, SSrc soffset,
                         uint32_t offset) {
  check_width(m, d.count, width, "vdata");
  check_width(m, rsrc.count, 4, "srsrc");
  if (offset > 4095) throw std::invalid_argument(fmt::format("{}: offset {} exceeds 12 bits", m, offset));
  emit(m, {Operand::of(d)}, {Operand::of(vaddr), Operand::of(rsrc), soffset.op}, mubuf_mods(offset));
}

void Builder::mubuf_store(std::string_view m, VReg data, int width, VReg vaddr, SReg rsrc, SSrc soffset,
                          uint32_t offset) {
  check_width(m, data.count, width, "vdata");
  check_width(m, rsrc.count, 4, "srsrc");
  if (offset > 4095) throw std::invalid_argument(fmt::format("{}: offset {} exceeds 12 bits", m, offset));
  emit(m, {}, {Operand::of(data), Operand::of(vaddr), Operand::of(rsrc), soffset.op}, mubuf_mods(offset));
}

void Builder::buffer_load_dword_lds(VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset) {
  check_width("buffer_load_dword lds", rsrc.count, 4, "srsrc");
  emit("buffer_load_dword_lds", {}, {Operand::of(vaddr), Operand::of(rsrc), soffset.op}, mubuf_mods(offset, true));
}

// The target, resource and regions of a 16-byte LDS-DMA buffer load.
void Builder::check_lds_dma_b128(std::string_view m, SReg rsrc, uint8_t dma_regions) {
  if (!target().has_lds_dma_b128) throw std::logic_error(fmt::format("{}: {} has no 16-byte LDS DMA", m, target().name));
  check_width(m, rsrc.count, 4, "srsrc");
  if (dma_regions == 0) throw std::invalid_argument(fmt::format("{}: an LDS DMA writes at least one region", m));
}

void Builder::buffer_load_dwordx4_lds(VReg vaddr, SReg rsrc, SSrc soffset, uint32_t offset, uint8_t dma_regions) {
  check_lds_dma_b128("buffer_load_dwordx4 lds", rsrc, dma_regions);
  check_width("buffer_load_dwordx4 lds", vaddr.count, 1, "vaddr");
  if (offset > 4095) throw std::invalid_argument(fmt::format("buffer_load_dwordx4 lds: offset {} exceeds 12 bits", offset));
  emit("buffer_load_dwordx4_lds", {}, {Operand::of(vaddr), Operand::of(rsrc), soffset.op}, mubuf_mods(offset, true)).dma_regions =
      dma_regions;
}

void Builder::buffer_load_dwordx4_idxen_lds(VReg vaddr2, SReg rsrc, SSrc soffset, uint8_t dma_regions) {
  check_lds_dma_b128("buffer_load_dwordx4 idxen lds", rsrc, dma_regions);
  check_width("buffer_load_dwordx4 idxen lds", vaddr2.count, 2, "vaddr");
  Mods m = mubuf_mods(0, true);
  m.idxen = true;
  emit("buffer_load_dwordx4_lds", {}, {Operand::of(vaddr2), Operand::of(rsrc), soffset.op}, m).dma_regions = dma_regions;
}

void Builder::ds_read(std::string_view m, VReg d, int width, VReg addr, uint32_t offset) {
  check_width(m, d.count, width, "vdst");
  if (offset > 65535) throw std::invalid_argument(fmt::format("{}: offset {} exceeds 16 bits", m, offset));
  emit(m, {Operand::of(d)}, {Operand::of(addr)}, offset_mods(offset)).dma_regions = lds_access_regions_;
}

void Builder::ds_read_b64_tr_b8(VReg d, VReg addr, uint32_t offset) {
  if (!target().has_lds_transpose) throw std::logic_error(fmt::format("ds_read_b64_tr_b8: {} has no LDS transpose reads", target().name));
  ds_read("ds_read_b64_tr_b8", d, 2, addr, offset);
}

void Builder::ds_read_b64_tr_b16(VReg d, VReg addr, uint32_t offset) {
  if (!target().has_lds_transpose) throw std::logic_error(fmt::format("ds_read_b64_tr_b16: {} has no LDS transpose reads", target().name));
  ds_read("ds_read_b64_tr_b16", d, 2, addr, offset);
}

void Builder::ds_write(std::string_view m, VReg addr, VReg data, int width, uint32_t offset) {
  check_width(m, data.count, width, "data");
  if (offset > 65535) throw std::invalid_argument(fmt::format("{}: offset {} exceeds 16 bits", m, offset));
  emit(m, {}, {Operand::of(addr), Operand::of(data)}, offset_mods(offset)).dma_regions = lds_access_regions_;
}

void Builder::make_strided_buffer_resource(SReg rsrc4, SReg base2, SSrc num_records, int stride) {
  if (stride <= 0 || stride >= (1 << 14)) throw std::invalid_argument(fmt::format("make_strided_buffer_resource: stride {} (allowed 1..16383)", stride));
  make_buffer_resource(rsrc4, base2, num_records);
  s_or_b32(rsrc4[1], rsrc4[1], Imm(stride << 16));
}

void Builder::make_buffer_resource(SReg rsrc4, SReg base2, SSrc num_records) {
  check_width("make_buffer_resource", rsrc4.count, 4, "rsrc");
  check_width("make_buffer_resource", base2.count, 2, "base");
  // V# word0 = base[31:0]; word1 = base[47:32] | stride(0) << 16; word2 = num_records;
  // word3: DST_SEL_XYZW = (4,5,6,7), NUM_FORMAT = float(7), DATA_FORMAT = 32(4) -> 0x00027000
  // as gfx9 compilers emit for raw buffers.
  s_mov_b32(rsrc4[0], base2[0]);
  s_and_b32(rsrc4[1], base2[1], Imm(0xffff));
  s_mov_b32(rsrc4[2], num_records);
  s_mov_b32(rsrc4[3], Imm(0x00027000));
}

}  // namespace mla::gen
