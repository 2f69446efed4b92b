// The MLA decode kernel: a persistent walk over work units (request, kv range, row group):
// workgroup x takes units [ranges[x], ranges[x + 1]) of the step's table (abi::LaunchHeader), so the grid
// is fixed by the device, never by the step's lengths. Per unit:
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
  abi.lds_bytes = uint32_t(g.lds_alloc_bytes());
  return p;
}

// The persistent walk's meeting point, where every wave of the workgroup arrives after its part
// of a unit (its role's code branches here instead of ending). Waves end a unit after different
// numbers of barriers (the producer after its ring, a merge writer after its round), and a
// hardware barrier has no identity: it releases when every wave that has not ended has arrived.
// So a wave that is done keeps taking part in the others' barriers until all are done:
// - every wave counts its barriers (Builder::count_barriers): all counts are equal at each
//   release, since each release takes one s_barrier of every wave;
// - at its arrival a wave writes its count into its dword of LDS, only after an even count (it
//   first takes one more barrier if the count is odd), and reads every wave's dword only after
//   an odd count: writes and reads are always a barrier apart, so every wave reads the same
//   values and makes the same decision;
// - after an odd release n, the unit is done when every dword holds a count in [start, n), start
//   being the count when the unit began (values from earlier units are below it); else the wave
//   takes one more barrier and waits again.
// The whole meeting costs one or two barriers past the last wave's arrival.
void emit_unit_sync(Kernel& k, SReg nbar, SReg unit_start, SReg tmp) {
  Builder& b = k.b;
  const uint32_t base = uint32_t(k.g.unit_sync_offset);
  VReg addr = k.sync_v.sub(0, 1), val = k.sync_v.sub(1, 1);
  b.bind(k.unit_end);
  b.set_lds_access_regions(0xff);
  b.s_mov_exec(Imm(-1));  // a role may end with lanes off
  Label even = b.new_label("unit_sync_even"), wait = b.new_label("unit_sync_wait"), done = b.new_label("unit_done");
  b.s_and_b32(tmp, nbar, Imm(1));
  b.s_cbranch_scc0(even);
  b.s_barrier();
  b.bind(even);
  b.v_lshrrev_b32(addr, Imm(6), b.workitem_ids());  // this wave's dword
  b.v_lshlrev_b32(addr, Imm(2), addr);
  b.v_add_u32(addr, Imm(base), addr);
  b.v_mov_b32(val, nbar);
  b.ds_write_b32(addr, val);
  b.bind(wait);
  b.s_barrier();                                     // an odd count: read every wave's dword
  b.v_and_b32(addr, Imm(63), b.workitem_ids());      // lane l reads wave min(l, waves - 1)'s
  b.v_min_u32(addr, Imm(k.g.waves() - 1), addr);
  b.v_lshlrev_b32(addr, Imm(2), addr);
  b.v_add_u32(addr, Imm(base), addr);
  b.ds_read_b32(val, addr);
  b.v_sub_u32(val, val, unit_start);                 // counts of this unit: [0, nbar - start)
  b.s_sub_u32(tmp, nbar, unit_start);
  b.s_sub_u32(tmp, tmp, Imm(1));
  b.v_cmp_lt_u32(vcc, tmp, val);                     // lanes whose wave has not arrived
  b.s_cbranch_vccz(done);
  b.s_barrier();
  b.s_branch(wait);
  b.bind(done);
  b.s_mov_b32(unit_start, nbar);
}

// Kernel arguments and the launch header, then the persistent walk over the work units: each
// unit's entry (8 int32), the loop counts and the wave's role; the roles' code; the meeting point.
void emit_kernel(Kernel& k) {
  Builder& b = k.b;
  auto& ra = b.regs();
  k.args = ra.sgpr(int(mla_decode_args::size / 4), "kernargs");
  static_assert(mla_decode_args::size == 0x60, "kernargs: three x8 loads");
  b.s_load_dwordx8(k.args.sub(0, 8), b.kernarg_ptr(), 0);
  b.s_load_dwordx8(k.args.sub(8, 8), b.kernarg_ptr(), 32);
  b.s_load_dwordx8(k.args.sub(16, 8), b.kernarg_ptr(), 64);
  // The launch's header (abi::LaunchHeader): this workgroup takes units [ranges[x], ranges[x + 1])
  // of the table; every wave alike (the same range), so all of them leave the loop together.
  SReg header = ra.sgpr(2, "launch_header", 2);
  b.s_load_dword(header[0], k.ptr(mla_decode_args::work), 4 * abi::launch_header::entries_offset);
  b.s_load_dword(header[1], k.ptr(mla_decode_args::work), 4 * abi::launch_header::ranges_offset);
  SReg x = ra.sgpr(2, "unit_range", 2);  // x[0]: this unit's index, x[1]: the end of the workgroup's run
  {
    SReg raddr = ra.sgpr(2, "range_addr", 2);
    b.s_lshl_b32(raddr[0], b.workgroup_id(0), Imm(2));
    b.s_add_u32(raddr[0], header[1], raddr[0]);
    b.s_add_u32(raddr[0], k.ptr(mla_decode_args::work)[0], raddr[0]);
    b.s_addc_u32(raddr[1], k.ptr(mla_decode_args::work)[1], Imm(0));
    b.s_load_dwordx2(x, raddr, 0);
    ra.release(raddr);
  }
  SReg nbar = ra.sgpr(1, "barriers"), unit_start = ra.sgpr(1, "unit_barriers");
  SReg sync_tmp = ra.sgpr(1, "barrier_scc");
  b.s_mov_b32(nbar, Imm(0));
  b.s_mov_b32(unit_start, Imm(0));
  b.count_barriers(nbar, sync_tmp);
  k.unit_end = b.new_label("unit_end");
  // Two VGPRs the meeting point uses; every VGPR but v0 is dead there, so the roles reuse them.
  k.sync_v = ra.vgpr(2, "unit_sync");
  {  // this wave's arrival dword: no count yet (~0 is outside every unit's range)
    b.v_lshrrev_b32(k.sync_v[0], Imm(6), b.workitem_ids());
    b.v_lshlrev_b32(k.sync_v[0], Imm(2), k.sync_v[0]);
    b.v_add_u32(k.sync_v[0], Imm(uint32_t(k.g.unit_sync_offset)), k.sync_v[0]);
    b.v_mov_b32(k.sync_v[1], Imm(-1));
    b.ds_write_b32(k.sync_v[0], k.sync_v[1]);
  }
  ra.release(k.sync_v);
  Label next_unit = b.new_label("next_unit"), has_unit = b.new_label("has_unit");
  b.bind(next_unit);
  b.s_cmp_lt_u32(x[0], x[1]);
  b.s_cbranch_scc1(has_unit);
  b.s_endpgm();
  b.bind(has_unit);
  SReg uaddr = ra.sgpr(2, "unit_addr");
  static_assert(abi::work_unit::dwords == 8, "one s_load_dwordx8 per work unit");
  b.s_lshl_b32(uaddr[0], x[0], Imm(5));
  b.s_add_u32(uaddr[0], header[0], uaddr[0]);
  b.s_add_u32(uaddr[0], k.ptr(mla_decode_args::work)[0], uaddr[0]);
  b.s_addc_u32(uaddr[1], k.ptr(mla_decode_args::work)[1], Imm(0));
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
  if (k.g.consumer_dma) {
    emit_wide_prefix(k);  // no producer wave: every wave streams and computes
  } else {
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
  emit_unit_sync(k, nbar, unit_start, sync_tmp);
  b.s_add_u32(x[0], x[0], Imm(1));
  b.s_branch(next_unit);
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
