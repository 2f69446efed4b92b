// The MLA decode kernel: one workgroup per work unit (request, kv range, row group).
//
// Wave 0 is the producer (mla_decode_producer.cpp): it only streams the unit's KV (page
// indices, then token rows) from memory through registers into an LDS ring of one or two
// slots; a slot holds S tiles of T tokens. Waves 1..C are consumers (mla_decode_consumer.h):
// consumer c owns row block c / S (16 query rows) and tile c % S of every slot, and only
// computes: S^T = K Q^T on MFMA, online softmax with a lazy rescale, O^T += V^T P^T on MFMA.
// The S consumers of a row block merge their states in LDS at the end. Barriers hand slots
// between producer and consumers (one per slot with two slots, two with one).
//
// Every decision is data computed before emission: the workgroup geometry (mla_geometry.h)
// and the consumer's plan (mla_decode_plan.h). See docs/mla-decode.md for the geometry rules,
// the plan, the schedule and the LDS layout.
#include "kernels/kernargs.h"
#include "kernels/mla_decode_consumer.h"
#include "kernels/registry.h"

namespace mla::gen {

namespace decode {

namespace {

// The kernel arguments (mla_decode_args) and launch facts, before the builder reads them.
Program& declare_abi(Program& p, const KernelSpec& s, const MlaGeometry& g) {
  declare_kernargs(p, abi::kDecodeArgs, s);
  auto& abi = p.abi;
  abi.max_workgroup_size = uint32_t(g.workgroup_size);
  abi.lds_bytes = uint32_t(g.lds_bytes);
  return p;
}

// Kernel arguments, this workgroup's work unit (8 int32), the loop counts and the wave's role:
// what every wave sets up before the roles split.
void emit_kernel(Kernel& k) {
  Builder& b = k.b;
  auto& ra = b.regs();
  k.args = ra.sgpr(int(mla_decode_args::size / 4), "kernargs");
  static_assert(mla_decode_args::size == 0x58, "kernargs: two x8, one x4 and one x2 load");
  b.s_load_dwordx8(k.args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx8(k.args.sub(8, 8), b.kernarg_ptr(), 32);
  b.s_load_dwordx4(k.args.sub(16, 4), b.kernarg_ptr(), 64);
  b.s_load_dwordx2(k.args.sub(20, 2), b.kernarg_ptr(), 80);
  // The launch's header (abi::LaunchHeader): the grid is the plan's capacity, and workgroups
  // past this step's unit count exit at once (every wave alike, before any barrier).
  SReg header = ra.sgpr(2, "launch_header", 2);
  static_assert(abi::launch_header::count == 0 && abi::launch_header::entries_offset == 1, "one x2 load");
  b.s_load_dwordx2(header, k.ptr(mla_decode_args::work), 0);
  Label has_unit = b.new_label("has_unit");
  b.s_cmp_lt_u32(b.workgroup_id(0), header[0]);
  b.s_cbranch_scc1(has_unit);
  b.s_endpgm();
  b.bind(has_unit);
  SReg uaddr = ra.sgpr(2, "unit_addr");
  static_assert(abi::work_unit::dwords == 8, "one s_load_dwordx8 per work unit");
  b.s_lshl_b32(uaddr[0], b.workgroup_id(0), Imm(5));
  b.s_add_u32(uaddr[0], header[1], uaddr[0]);
  b.s_add_u32(uaddr[0], k.ptr(mla_decode_args::work)[0], uaddr[0]);
  b.s_addc_u32(uaddr[1], k.ptr(mla_decode_args::work)[1], Imm(0));
  ra.release(header);
  k.unit = ra.sgpr(8, "work_unit");
  b.s_load_dwordx8(k.unit, uaddr, 0);
  ra.release(uaddr);
  // The scales, read on the device at every launch (abi kDecodeArgs).
  k.q_scale = ra.sgpr(1, "q_scale");
  k.kv_scale = ra.sgpr(1, "kv_scale");
  b.s_load_dword(k.q_scale, k.ptr(mla_decode_args::q_scale), 0);
  b.s_load_dword(k.kv_scale, k.ptr(mla_decode_args::kv_scale), 0);
  // n_tiles = ceil((kv_end - kv_start) / T)
  k.ntiles = ra.sgpr(1, "n_tiles");
  b.s_sub_u32(k.ntiles, k.kv_end(), k.kv_start());
  b.s_add_u32(k.ntiles, k.ntiles, Imm(k.g.tile_tokens - 1));
  b.s_lshr_b32(k.ntiles, k.ntiles, Imm(log2i(k.g.tile_tokens)));
  // n_slots = ceil(n_tiles / S): the loop count (one barrier each) of every wave.
  k.nslots = ra.sgpr(1, "n_slots");
  b.s_add_u32(k.nslots, k.ntiles, Imm(k.g.kv_splits - 1));
  b.s_lshr_b32(k.nslots, k.nslots, Imm(log2i(k.g.kv_splits)));
  // Wave role from the work-item id (uniform per wave).
  VReg tmp = ra.vgpr(1, "tmp");
  k.wave = ra.sgpr(1, "wave_id");
  b.v_lshrrev_b32(tmp, Imm(6), b.workitem_ids());
  b.v_readfirstlane_b32(k.wave, tmp);
  k.lane = ra.vgpr(1, "lane");
  b.v_and_b32(k.lane, Imm(63), b.workitem_ids());
  ra.release(tmp);
  k.iter = ra.sgpr(1, "tile_iter");
  if (k.g.consumer_dma) return emit_wide_prefix(k);  // no producer wave: every wave streams and computes
  Label consumer = b.new_label("consumer");
  b.s_cmp_lg_u32(k.wave, Imm(0));
  b.s_cbranch_scc1(consumer);
  emit_producer(k);
  b.bind(consumer);
  if (k.g.producers == 2) {  // the last wave is the second producer (MlaGeometry::producers)
    Label consumers = b.new_label("consumers");
    b.s_cmp_lg_u32(k.wave, Imm(k.g.consumers + 1));
    b.s_cbranch_scc1(consumers);
    emit_producer_dma(k, 1);
    b.bind(consumers);
  }
  emit_consumer(k);
}

}  // namespace

Kernel::Kernel(Program& prog, const KernelSpec& spec)
    : p(prog), s(spec), g(mla_geometry(spec)), pl(mla_decode_plan(spec, g)), b(declare_abi(prog, spec, g)) {}

void emit_consumer(Kernel& k) { Consumer(k).emit(); }

}  // namespace decode

void build_mla_decode(Program& p, const KernelSpec& spec) {
  std::vector<uint32_t> constants;
  {
    Program scratch = p;  // the first emission only learns the consumer's SGPR constants
    decode::Kernel k(scratch, spec);
    k.learning_constants = true;
    decode::emit_kernel(k);
    constants = k.wanted;
  }
  decode::Kernel k(p, spec);
  k.wanted = constants;
  decode::emit_kernel(k);
}

}  // namespace mla::gen
