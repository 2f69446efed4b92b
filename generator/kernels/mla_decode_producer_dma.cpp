// The producer(s) (wave 0, and the last wave where there are two) of a kernel whose geometry
// streams KV with LDS DMA (MlaGeometry::lds_dma, gfx950 prefix kernels): token rows go from memory straight into a ring of N slots with
// buffer_load_dwordx4 ... lds, so nothing is staged in registers and N - 1 slots stay in flight
// (the register producer, mla_decode_producer.cpp, holds at most 2 slots in 144 VGPRs).
//
// Semantics the layout rests on (gfx950; hardware evidence in docs/emulator-provenance.md):
// - lane l of an LDS-DMA load writes its 16 bytes at M0 + inst_offset + 16 l (aiter's gfx950
//   kernels run `buffer_load_dwordx4 offen lds` to the reference in the emulator:
//   docs/aiter-oracle-forms.json);
// - a raw buffer's lanes whose dwords lie past num_records read nothing from memory and write
//   zeros to their LDS bytes (Triton's AMD lowering of masked loads to LDS relies on it). Those
//   lanes fill the rows' pad chunks, a slot's guard and an absent tile's slot, which no wave
//   reads, and the rows past a unit's end in its last tile (below), which the consumers read.
//
// A tile's T rows lie in one page, so they are contiguous in memory: one buffer resource per
// tile, based at its first row, with num_records = its valid rows x row bytes. Its LDS image is
// T padded rows of C = lds_row_bytes / 16 chunks (data chunks, then the pad chunk). Load j of a
// tile covers the image's chunks c = base_j + lane: token c / C, chunk c % C, a constant offset
// per lane (p_chunk_offset{j}, set once); pad lanes, and the last load's lanes past the image
// (they write the slot's guard, MlaGeometry::slot_bytes), get an offset past any tile and read
// nothing. EXEC stays all ones. Rows past the unit's end are outside num_records: a group's
// prefix units hold whole tiles (the planner cuts the shared part to a multiple of the tile),
// a member's unique part in the prefix launch ends inside its last tile, whose rows past the end
// are zeros in LDS (their scores are masked, P = 0 meets V = 0, not stale bytes that may be NaN);
// a tile past the end has num_records 0 and reads nothing, but is issued like the others so that
// every path counts the same loads.
//
// Pages shorter than a tile (page 1 is vLLM's K3 layout) use the same chunk layout, but a tile's
// rows are scattered over pages: the loads address a strided buffer over the whole cache (stride
// = a page's bytes, `buffer_load_dwordx4 idxen offen lds`: base + stride * index + offset, 64-bit
// in hardware), with vaddr = {page id, (token % page) x row bytes + 16 x chunk}. Lane t of a
// vector of the tile's page ids (p_tile_rows{r}, loaded from kv_indices) holds token t's, and
// each load's indices come from it by ds_bpermute (a constant source lane per lane and load);
// pad and guard lanes, and tokens past the unit's end, take the vector's lane 63, whose id is
// 0xffffffff: out of range, read nothing. The page ids of the slot that next reuses a ring slot
// are loaded right after that slot's DMA: waiting for them (vmcnt is in order) then waits only
// for DMA that is waited for anyway.
//
// Ring protocol, one barrier per slot as the consumers have it: the prologue issues slots
// 0..N-1 and publishes slot 0; iteration i publishes slot i + 1 (the waitcnt pass waits only for
// that slot's DMA: Inst::dma_regions, one region per ring slot) and then issues slot i + N into
// the ring slot the consumers just released. The loop is unrolled N times so that every ring
// slot, its LDS base and its region are constants. With two producers (MlaGeometry::producers)
// producer p owns the slots x with x % 2 == p: it issues only those, publishes only those (its
// other barriers wait for nothing), and carries a page id from its own previous tile.
#include <algorithm>

#include "kernels/mla_decode_kernel.h"

namespace mla::gen::decode {

namespace {

// Raw buffer offset that no tile's num_records reaches (at most 32 rows x 1152 bytes).
constexpr uint32_t kOutOfRange = 0x80000000u;

class DmaProducer {
 public:
  DmaProducer(Kernel& k, int index)
      : k_(k), b(k.b), ra(k.b.regs()), T(k.g.tile_tokens), N(k.g.ring), R(k.g.kv_row_bytes),
        C(k.g.lds_row_bytes / 16), chunks(T * C), L((chunks + 63) / 64), P(k.g.producers), me(index),
        scattered(!k.g.page_id_per_tile), page(k.s.page_size) {
    const MlaGeometry& g = k.g;
    if (scattered && (T > 63 || page * R >= (1 << 14)))
      throw std::logic_error("mla_decode: scattered LDS DMA needs a page of fewer than 16 KiB (the buffer stride)");
    if (P < 1 || P > 2 || me < 0 || me >= P || N % P)
      throw std::logic_error("mla_decode: LDS-DMA producers are 1 or 2, each owning every other ring slot");
    if (g.kv_splits != 1 || g.lds_row_bytes % 16 || R % 16 || chunks < 64)
      throw std::logic_error("mla_decode: the LDS-DMA producer needs one tile per slot and 16-byte rows");
    if (N < 2 || N > 8 || (N & (N - 1)))
      throw std::logic_error("mla_decode: the LDS-DMA ring has 2, 4 or 8 slots (one DMA region each)");
    if (16 * 64 * L > k.slot_bytes()) throw std::logic_error("mla_decode: the LDS-DMA slot has no room for its last load");
    if (scattered && T != 32) throw std::logic_error("mla_decode: scattered LDS DMA assumes 32-token tiles");
  }

  void emit() {
    chunk_offsets();
    registers();
    prologue();
    steady_loop();
    release();  // the consumers' registers start where the producer's did
  }

 private:
  int base_chunk(int j) const { return 64 * j; }
  int slot_lds(int ring_slot) const { return ring_slot * k_.slot_bytes(); }
  uint8_t region(int ring_slot) const { return uint8_t(1u << ring_slot); }
  bool mine(int ring_slot) const { return ring_slot % P == me; }

  // p_chunk_offset{j}[lane] = token * R + 16 * chunk for chunk c = base_j + lane of the tile's
  // LDS image (c = token * C + chunk); pad chunks and chunks past the image get kOutOfRange.
  // Scattered rows: p_chunk_index{j} = {page id (set per tile), (token % page) * R + 16 * chunk},
  // and p_chunk_source{j} = 4 * the lane of the page-id vector holding the token's (63: none).
  void chunk_offsets() {
    const auto [mul, shift] = exact_divider(C, 64 * L);
    VReg c = ra.vgpr(1, "p_chunk"), t = ra.vgpr(1, "p_chunk_token"), q = ra.vgpr(1, "p_chunk_part");
    VReg oob = ra.vgpr(1, "p_out_of_range");
    b.v_mov_b32(oob, Imm(scattered ? 4 * 63 : int64_t(kOutOfRange)));
    for (int j = 0; j < L; ++j) {
      VReg off, src;
      if (scattered) {
        VReg pair = ra.vgpr(2, fmt::format("p_chunk_index{}", j), 2);
        indices.push_back(pair);
        off = pair[1];
        src = ra.vgpr(1, fmt::format("p_chunk_source{}", j));
        sources.push_back(src);
      } else {
        off = ra.vgpr(1, fmt::format("p_chunk_offset{}", j));
        offsets.push_back(off);
      }
      b.v_add_u32(c, Imm(base_chunk(j)), k_.lane);
      b.v_mul_u32_u24(t, Imm(int64_t(mul)), c);
      b.v_lshrrev_b32(t, Imm(shift), t);
      b.v_mul_u32_u24(q, Imm(C), t);
      b.v_sub_u32(q, c, q);
      VReg out = scattered ? src : off;
      if (scattered) {  // off = (t % page) * R + 16 q
        if (page > 1) {
          b.v_and_b32(off, Imm(page - 1), t);
          b.v_mul_u32_u24(off, Imm(R), off);
          b.v_lshl_add_u32(off, q, Imm(4), off);
        } else {
          b.v_lshlrev_b32(off, Imm(4), q);
        }
        b.v_lshlrev_b32(src, Imm(2), t);
      } else {
        b.v_mul_u32_u24(off, Imm(R), t);
        b.v_lshl_add_u32(off, q, Imm(4), off);
      }
      b.v_cmp_eq_u32(vcc, Imm(R / 16), q);  // the pad chunk
      b.v_cndmask_b32(out, out, oob, vcc);
      if (64 * (j + 1) > chunks) {  // past the image: the slot's guard
        b.v_cmp_gt_u32(vcc, Imm(chunks), c);
        b.v_cndmask_b32(out, oob, out, vcc);
      }
    }
    for (VReg r : {c, t, q, oob}) ra.release(r);
  }

  void registers() {
    rsrc = ra.sgpr(4, "p_tile_rsrc", 4);
    if (scattered) {
      // One resource for the whole cache: pages of page x R bytes, any 32-bit page id in range.
      SReg kv = k_.ptr(mla_decode_args::kv);
      b.make_strided_buffer_resource(rsrc, kv, Imm(-1), page * R);
      for (int r = 0; r < N; ++r)
        if (mine(r)) rows.push_back(ra.vgpr(1, fmt::format("p_tile_rows{}", r)));
      row_off = ra.vgpr(1, "p_row_id_offset");
      saved_exec = ra.sgpr(2, "p_saved_exec", 2);
    } else {
      base = ra.sgpr(2, "p_tile_base", 2);
      valid = ra.sgpr(1, "p_tile_valid");
      next_page = ra.sgpr(1, "p_next_page_id"), cur_page = ra.sgpr(1, "p_page_id"), carried = ra.sgpr(1, "p_page_carried");
      id_addr = ra.sgpr(2, "p_page_id_addr", 2);
    }
    start = ra.sgpr(1, "p_tile_start"), x = ra.sgpr(1, "p_slot_index");
  }

  // start = kv_start + x * T: the first token of slot x's tile.
  void tile_start() {
    b.s_lshl_b32(start, x, Imm(log2i(T)));
    b.s_add_u32(start, start, k_.kv_start());
  }

  // The page id of slot x's tile into next_page, when the tile is the unit's first in its page
  // and lies before the unit's end (otherwise the id at hand is carried, or none is needed).
  void fetch_page_id() {
    tile_start();
    page_continues();
    k_.load_page_id_unless_carried(next_page, start, carried, valid, id_addr);
  }

  // carried = 0 when the tile at `start` is this producer's first in its page (it fetches the
  // page id), else nonzero. Two producers: the previous tile this one streamed is 2 tiles back,
  // so a tile fetches when it starts within 2 tiles of its page's or the unit's start.
  void page_continues() {
    if (P == 1) return k_.page_continues(start, carried);
    b.s_and_b32(carried, start, Imm(k_.s.page_size - 1));
    b.s_cmp_lt_u32(carried, Imm(P * T));
    b.s_cselect_b32(carried, Imm(0), carried);
    b.s_sub_u32(valid, start, k_.kv_start());
    b.s_cmp_lt_u32(valid, Imm(P * T));
    b.s_cselect_b32(carried, Imm(0), carried);
  }

  // Scattered rows: lane t of ring slot r's vector = the page id of slot x's token t,
  // 0xffffffff for lanes past the tile or the unit's end (one masked vector load).
  VReg& row_vector(int ring_slot) { return rows[size_t(ring_slot / P)]; }
  void fetch_rows(int ring_slot) {
    VReg v = row_vector(ring_slot);
    tile_start();
    b.v_mov_b32(v, Imm(-1));
    b.v_add_u32(row_off, start, k_.lane);
    b.v_cmp_gt_u32(vcc, k_.kv_end(), row_off);
    b.emit("s_mov_b32", {Operand::of(vcc_hi)}, {Operand::of(Imm(0))});  // lanes 32..63: no token
    b.s_and_saveexec_b64(saved_exec, vcc);
    if (page > 1) b.v_lshrrev_b32(row_off, Imm(log2i(page)), row_off);
    b.v_add_u32(row_off, k_.page_base(), row_off);
    b.v_lshlrev_b32(row_off, Imm(2), row_off);
    b.global_load_dword(v, row_off, k_.ptr(mla_decode_args::kv_indices));
    b.s_mov_exec(saved_exec);
  }

  // Scattered rows: each load's row indices from the slot's row vector, then the loads.
  void issue_scattered(int ring_slot) {
    VReg v = row_vector(ring_slot);
    for (int j = 0; j < L; ++j) b.ds_bpermute_b32(indices[size_t(j)].sub(0, 1), sources[size_t(j)], v);
    for (int j = 0; j < L; ++j) {
      b.s_mov_m0(Imm(slot_lds(ring_slot) + 16 * base_chunk(j)));
      b.buffer_load_dwordx4_idxen_lds(indices[size_t(j)], rsrc, Imm(0), region(ring_slot));
    }
  }

  // Slot x's tile into ring slot `ring_slot`, then what this producer's next tile needs: the page
  // ids of the slot that next reuses the ring slot (scattered), or the page id of its next slot.
  void issue(int ring_slot) {
    if (scattered) {
      issue_scattered(ring_slot);
      b.s_add_u32(x, x, Imm(N));
      fetch_rows(ring_slot);
      return;
    }
    issue_tile(ring_slot);
    b.s_add_u32(x, x, Imm(P));
    fetch_page_id();
  }

  // Slot x's tile (rows contiguous in one page) into ring slot `ring_slot`: its buffer resource,
  // then L loads.
  void issue_tile(int ring_slot) {
    tile_start();
    page_continues();
    b.s_cmp_eq_u32(carried, Imm(0));
    b.s_cselect_b32(cur_page, next_page, cur_page);
    // First row = page id * page size + start % page size; base = kv + row * R (64-bit).
    b.s_lshl_b32(valid, cur_page, Imm(log2i(k_.s.page_size)));
    b.s_and_b32(carried, start, Imm(k_.s.page_size - 1));
    b.s_add_u32(valid, valid, carried);
    b.s_mul_i32(base[0], valid, Imm(R));
    b.s_mul_hi_u32(base[1], valid, Imm(R));
    b.s_add_u32(base[0], base[0], k_.ptr(mla_decode_args::kv)[0]);
    b.s_addc_u32(base[1], base[1], k_.ptr(mla_decode_args::kv)[1]);
    // Valid rows: clamp(kv_end - start, 0, T).
    b.s_sub_u32(valid, k_.kv_end(), start);
    b.s_cmp_ge_u32(start, k_.kv_end());
    b.s_cselect_b32(valid, Imm(0), valid);
    b.s_min_u32(valid, valid, Imm(T));
    b.s_mul_i32(valid, valid, Imm(R));
    b.make_buffer_resource(rsrc, base, valid);
    for (int j = 0; j < L; ++j) {
      b.s_mov_m0(Imm(slot_lds(ring_slot) + 16 * base_chunk(j)));
      b.buffer_load_dwordx4_lds(offsets[size_t(j)], rsrc, Imm(0), 0, region(ring_slot));
    }
  }

  // Slots 0..N-1 issued (page ids one slot ahead), slot 0 published: pairs with the consumers'
  // barrier after their Q setup.
  void prologue() {
    if (scattered) {  // every own slot's page ids first: the first DMA waits only for them
      for (int r = 0; r < N; ++r)
        if (mine(r)) {
          b.s_mov_b32(x, Imm(r));
          fetch_rows(r);
        }
    } else {  // the page id of this producer's first tile
      b.s_mov_b32(x, Imm(me));
      fetch_page_id();
    }
    for (int r = 0; r < N; ++r) {
      if (!mine(r)) continue;
      b.s_mov_b32(x, Imm(r));
      issue(r);
    }
    b.s_barrier_publishing(mine(0) ? region(0) : 0);
  }

  // Iteration i (copy c = i % N): the consumers are done with slot i (ring slot c) and read slot
  // i + 1 next: publish it, then refill ring slot c with slot i + N.
  void steady_loop() {
    b.s_mov_b32(k_.iter, Imm(0));
    Label loop = b.new_label("producer_loop"), done = b.new_label("producer_done");
    b.bind(loop);
    for (int c = 0; c < N; ++c) {
      // Split PV: the P barrier (the consumers' P^T of slot i is in LDS) publishes slot i + 1, so
      // that the consumers read its first K batch beside slot i's PV; the hand-over barrier
      // then only frees slot i.
      const uint8_t next = mine((c + 1) % N) ? region((c + 1) % N) : 0;
      if (k_.g.split_pv) b.s_barrier_publishing(next);
      b.s_barrier_publishing(k_.g.split_pv ? 0 : next);
      if (mine(c)) {
        b.s_add_u32(x, k_.iter, Imm(N));
        issue(c);
      }
      b.s_add_u32(k_.iter, k_.iter, Imm(1));
      b.s_cmp_lt_u32(k_.iter, k_.nslots);
      if (c + 1 < N) b.s_cbranch_scc0(done);
    }
    b.s_cbranch_scc1(loop);
    b.bind(done);
    k_.end_unit();  // the meeting point's barriers wait for the DMA still in flight
  }

  void release() {
    for (VReg r : offsets) ra.release(r);
    for (VReg r : indices) ra.release(r);
    for (VReg r : sources) ra.release(r);
    for (VReg r : rows) ra.release(r);
    if (scattered) ra.release(row_off), ra.release(saved_exec);
    else
      for (SReg r : {base, valid, next_page, cur_page, carried, id_addr}) ra.release(r);
    for (SReg r : {rsrc, start, x}) ra.release(r);
  }

  Kernel& k_;
  Builder& b;
  RegAllocator& ra;
  const int T, N, R, C, chunks, L;
  const int P, me;  // producers, and which one this is
  const bool scattered;  // pages shorter than a tile: the tile's rows are in several pages
  const int page;
  std::vector<VReg> indices, sources, rows;  // scattered: per load {row index, offset}, its source lane; per own ring slot
  VReg row_off;
  SReg saved_exec;
  std::vector<VReg> offsets;  // per load of a tile: the lanes' byte offsets in the tile's rows
  SReg rsrc, base, start, valid, x, next_page, cur_page, carried, id_addr;
};

}  // namespace

void emit_producer_dma(Kernel& k, int index) { DmaProducer(k, index).emit(); }

}  // namespace mla::gen::decode
