// The MLA decode kernel: one workgroup per work unit (request, kv range, row group).
//
// Wave 0 is the producer: it only streams the unit's KV (page indices, then token rows) from
// memory through registers into an LDS ring of one or two slots; a slot holds S tiles of T
// tokens. Waves 1..C are consumers: consumer c owns row block c / S (16 query rows) and tile
// c % S of every slot, and only computes: S^T = K Q^T on MFMA, online softmax with a lazy
// rescale, O^T += V^T P^T on MFMA. The S consumers of a row block merge their states in LDS at
// the end. Barriers hand slots between producer and consumers (one per slot with two slots,
// two with one).
//
// Register layouts (16x16 MFMAs; lane l, j = l % 16, g = l / 16):
//   S^T sub-tile st (ST of them):    D[i][j = row], i = 4g + r holding token
//                                    16 st + 4 h(g, st) + r (h per V path: see token_group)
//                                    -> lane holds row j.
//   P^T as the B operand of PV:      B[k = KL*g + p][j = row], p = 4 st + r: the same token, so
//                                    every lane feeds PV with its own softmax values.
//   V^T as the A operand of PV:      A[i = column][k]: gfx950 transposing LDS reads, or 8 columns
//                                    per token read from LDS and transposed with v_perm_b32.
//   O^T block:                       D[i = column][j = row]; the lane owns row j (column mapping
//                                    per V path: see transpose_read_base and the epilogue).
// See docs/mla-decode.md for the geometry rules, the schedule and the LDS layout.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/mla_decode_plan.h"
#include "kernels/mla_geometry.h"
#include "kernels/registry.h"
#include "program/builder.h"

namespace mla::gen {

namespace {

constexpr uint32_t kNegFltMax = 0xff7fffffu;  // -FLT_MAX: running max start, finite so exp2 never sees -inf - -inf
constexpr uint32_t kNegInf = 0xff800000u;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Growth of a row's max (log2 units) tolerated before the running max and O^T are rescaled:
// P <= 2^7 = 128 stays inside both fp8 formats (e4m3 448, gfx942 e4m3fnuz 240), and O^T (f32)
// grows by at most 128x.
constexpr float kRescaleSlack = 7.0f;
// The Q split's lo image holds (q s - hi) 2^kQLoShift: |q s - hi| <= 4 (half an fp8 ulp below
// 128), so lo stays <= 128, and it loses only below 2^-7 instead of 2^-2 (fp8 denormals).
constexpr int kQLoShift = 5;
constexpr uint32_t kQLoInvBits = uint32_t(127 - kQLoShift) << 23;  // 2^-kQLoShift as f32 bits

int log2i(int v) {
  int r = 0;
  while ((1 << r) < v) ++r;
  if ((1 << r) != v) throw std::logic_error(fmt::format("{} is not a power of two", v));
  return r;
}

FImm f32(float v) { return FImm{v}; }

// Byte selectors for v_perm_b32 (D.byte[i] = {S0, S1}.byte[sel.byte[i]], S1 = bytes 0-3).
uint32_t sel(int b0, int b1, int b2, int b3) { return uint32_t(b0) | b1 << 8 | b2 << 16 | uint32_t(b3) << 24; }

class MlaDecodeBuilder {
 public:
  MlaDecodeBuilder(Program& p, const KernelSpec& s) : p_(p), s_(s), g_(mla_geometry(s)), pl_(mla_decode_plan(s, g_)) {
    auto& abi = p_.abi;
    namespace A = mla_decode_args;
    abi.add_buffer("q", s.q_dtype == DType::fp8 ? "const uint8_t*" : "const uint16_t*");
    abi.add_buffer("kv", s.kv_dtype == DType::fp8 ? "const uint8_t*" : "const uint16_t*");
    abi.add_buffer("kv_indices", "const int32_t*");
    abi.add_buffer("work", "const int32_t*");
    abi.add_buffer("o", "uint16_t*");
    abi.add_buffer("lse", "float*");
    abi.add_buffer("partial_o", "float*");
    abi.add_buffer("partial_lse", "float*");
    abi.add_value("scale", 4, "float");
    abi.add_value("kv_scale", 4, "float");
    abi.add_value("logit_cap", 4, "float");
    abi.add_value("reserved", 4, "uint32_t");
    if (abi.kernarg_size != A::size || abi.find("scale")->offset != A::scale)
      throw std::logic_error("mla_decode: kernarg layout drifted from mla_decode_args");
    abi.max_workgroup_size = uint32_t(g_.workgroup_size);
    abi.lds_bytes = uint32_t(g_.lds_bytes);
  }

  void build() {
    Builder b(p_);
    b_ = &b;
    auto& ra = b.regs();
    // Kernel arguments and this workgroup's work unit (8 int32).
    args_ = ra.sgpr(int(mla_decode_args::size / 4), "kernargs");
    b.s_load_dwordx8(args_.sub(0, 8), b.kernarg_ptr(), 0);
    b.s_load_dwordx8(args_.sub(8, 8), b.kernarg_ptr(), 32);
    b.s_load_dwordx4(args_.sub(16, 4), b.kernarg_ptr(), 64);
    SReg uaddr = ra.sgpr(2, "unit_addr");
    b.s_lshl_b32(uaddr[0], b.workgroup_id(0), Imm(5));
    b.s_add_u32(uaddr[0], args_[6], uaddr[0]);
    b.s_addc_u32(uaddr[1], args_[7], Imm(0));
    unit_ = ra.sgpr(8, "work_unit");
    b.s_load_dwordx8(unit_, uaddr, 0);
    ra.release(uaddr);
    // n_tiles = ceil((kv_end - kv_start) / T)
    ntiles_ = ra.sgpr(1, "n_tiles");
    b.s_sub_u32(ntiles_, kv_end(), kv_start());
    b.s_add_u32(ntiles_, ntiles_, Imm(g_.tile_tokens - 1));
    b.s_lshr_b32(ntiles_, ntiles_, Imm(log2i(g_.tile_tokens)));
    // n_slots = ceil(n_tiles / S): the loop count (one barrier each) of every wave.
    nslots_ = ra.sgpr(1, "n_slots");
    b.s_add_u32(nslots_, ntiles_, Imm(g_.kv_splits - 1));
    b.s_lshr_b32(nslots_, nslots_, Imm(log2i(g_.kv_splits)));
    // Wave role from the work-item id (uniform per wave).
    VReg tmp = ra.vgpr(1, "tmp");
    wave_ = ra.sgpr(1, "wave_id");
    b.v_lshrrev_b32(tmp, Imm(6), b.workitem_ids());
    b.v_readfirstlane_b32(wave_, tmp);
    lane_ = ra.vgpr(1, "lane");
    b.v_and_b32(lane_, Imm(63), b.workitem_ids());
    ra.release(tmp);
    iter_ = ra.sgpr(1, "tile_iter");
    Label consumer = b.new_label("consumer");
    b.s_cmp_lg_u32(wave_, Imm(0));
    b.s_cbranch_scc1(consumer);
    producer();
    b.bind(consumer);
    consumer_wave();
  }

 private:
  SReg ptr(uint32_t offset) const { return args_.sub(int(offset / 4), 2); }
  SReg argf(uint32_t offset) const { return args_[int(offset / 4)]; }
  SReg qo_row() const { return unit_[0]; }
  SReg page_base() const { return unit_[1]; }
  SReg kv_start() const { return unit_[2]; }
  SReg kv_end() const { return unit_[3]; }
  SReg kv_len() const { return unit_[4]; }
  SReg partial() const { return unit_[5]; }
  SReg row_group() const { return unit_[6]; }

  int slot_bytes() const { return g_.slot_tokens * g_.lds_row_bytes; }

  // The producer's token swizzle for its ds_write_b128s: lane pair/quad q (lanes_per_token lanes
  // each, in one quad for the page-id DPP) writes token perm(q), perm a permutation of q's bits.
  // The first permutation (identity first) under which every 8-lane, 128-byte write group is
  // conflict-free in the emulator's bank model wins; none: the one with the fewest conflicts.
  std::vector<int> write_token_bits() const {
    const int lpt = 64 / g_.tile_tokens, chunk = g_.kv_row_bytes / lpt, nbits = log2i(g_.tile_tokens);
    std::vector<int> perm(static_cast<size_t>(nbits)), best;
    for (int i = 0; i < nbits; ++i) perm[size_t(i)] = i;
    int best_cost = 1 << 30;
    do {
      int cost = 0;
      for (int grp = 0; grp < 8; ++grp) {  // 8 lanes of 16 bytes per 128-byte group
        int banks[32] = {};
        for (int l = 8 * grp; l < 8 * grp + 8; ++l) {
          const int q = l / lpt, part = l % lpt;
          int token = 0;
          for (int i = 0; i < nbits; ++i) token |= ((q >> i) & 1) << perm[size_t(i)];
          const int dword = (token * g_.lds_row_bytes + part * chunk) / 4;
          for (int i = 0; i < 4; ++i) ++banks[(dword + i) % 32];
        }
        cost += *std::max_element(banks, banks + 32);
      }
      if (cost < best_cost) best_cost = cost, best = perm;
      if (cost == 8) break;  // one clock per group
    } while (std::next_permutation(perm.begin(), perm.end()));
    return best;
  }

  // An LDS read of dst.count (1, 2 or 4) dwords.
  void ds_read_dwords(VReg dst, VReg addr, uint32_t off) {
    if (dst.count == 1) b_->ds_read_b32(dst, addr, off);
    else if (dst.count == 2) b_->ds_read_b64(dst, addr, off);
    else if (dst.count == 4) b_->ds_read_b128(dst, addr, off);
    else throw std::logic_error(fmt::format("mla_decode: no LDS read of {} dwords", dst.count));
  }

  // Emits `body` behind a branch that skips it when SCC is 1.
  template <class F>
  void unless_scc1(F&& body) {
    Label skip = b_->new_label("skip");
    b_->s_cbranch_scc1(skip);
    body();
    b_->bind(skip);
  }

  // ------------------------------------------------------------------ producer
  void producer() {
    Builder& b = *b_;
    auto& ra = b.regs();
    const int T = g_.tile_tokens, S = g_.kv_splits, lanes_per_token = 64 / T, E = g_.lds_row_bytes;
    const int chunk = g_.kv_row_bytes / lanes_per_token, loads = chunk / 16;
    if (chunk % 16 != 0) throw std::logic_error("mla_decode: token row does not split into 16-byte lane chunks");
    VReg vt = ra.vgpr(1, "p_token_in_tile"), part_off = ra.vgpr(1, "p_part_offset"),
         lds_off = ra.vgpr(1, "p_lds_offset");
    b.v_lshrrev_b32(vt, Imm(log2i(lanes_per_token)), lane_);
    const std::vector<int> bits = write_token_bits();
    bool identity = true;
    for (size_t i = 0; i < bits.size(); ++i) identity = identity && bits[i] == int(i);
    if (!identity) {
      // Token = bit i of q moved to bit bits[i] (see write_token_bits).
      VReg t = part_off, u = lds_off;
      b.v_mov_b32(t, Imm(0));
      for (size_t i = 0; i < bits.size(); ++i) {
        b.v_bfe_u32(u, vt, Imm(int(i)), Imm(1));
        b.v_lshl_or_b32(t, u, Imm(bits[i]), t);
      }
      b.v_mov_b32(vt, t);
    }
    b.v_and_b32(part_off, Imm(lanes_per_token - 1), lane_);
    b.v_mul_u32_u24(part_off, Imm(chunk), part_off);
    b.v_mul_u32_u24(lds_off, Imm(E), vt);
    b.v_add_u32(lds_off, lds_off, part_off);
    SReg last_tok = ra.sgpr(1, "p_last_token"), row_bytes = ra.sgpr(1, "p_row_bytes");
    b.s_mov_b32(row_bytes, Imm(g_.kv_row_bytes));  // VOP3 (v_mul_*_u32) takes no literal on gfx9
    // v_addc_co_u32 reads VCC already: the kv base's high half must come from a VGPR.
    VReg kv_hi = ra.vgpr(1, "p_kv_base_hi");
    b.v_mov_b32(kv_hi, ptr(mla_decode_args::kv)[1]);
    b.s_sub_u32(last_tok, kv_end(), Imm(1));
    // Per tile of the slot (S of them): its page ids, tokens and staged rows.
    // D register sets of staged rows: slot k lands in set k % D, so D slots are in flight.
    const int D = g_.stage_slots;
    std::vector<VReg> idx, tok;
    std::vector<std::vector<VReg>> data(D);
    for (int s = 0; s < S; ++s) {
      idx.push_back(ra.vgpr(1, fmt::format("p_page_id{}", s)));
      tok.push_back(ra.vgpr(1, fmt::format("p_token{}", s)));
      for (int d = 0; d < D; ++d) data[d].push_back(ra.vgpr(4 * loads, fmt::format("p_tile_data{}_{}", d, s), 4));
    }
    int set = 0;  // the register set the next load_data / write_tile use
    VReg addr = ra.vgpr(2, "p_addr");
    std::vector<VReg> taddr;  // per tile: its lane's global row address
    for (int s = 0; s < S; ++s) taddr.push_back(ra.vgpr(2, fmt::format("p_tile_addr{}", s), 2));
    SReg tile = ra.sgpr(1, "p_tile"), slot = ra.sgpr(1, "p_slot");

    // Page id of this lane's token in tile `tile` (clamped to the unit's last token, so that
    // every lane computes a valid address). Only the first lane of each token, and only for
    // tokens of the unit, reads the id: the others get it from that lane by DPP.
    SReg saved_exec0 = ra.sgpr(2, "p_saved_exec_index");
    VReg first_lane = ra.vgpr(1, "p_first_lane_of_token");
    b.v_and_b32(first_lane, Imm(lanes_per_token - 1), lane_);
    auto load_index = [&](int s) {
      b.s_lshl_b32(slot, tile, Imm(log2i(T)));
      b.s_add_u32(slot, slot, kv_start());
      b.v_add_u32(tok[s], slot, vt);
      b.v_cmp_gt_u32(vcc, kv_end(), tok[s]);
      b.v_cmp_eq_u32(saved_exec0, Imm(0), first_lane);
      b.s_and_b64(vcc, vcc, saved_exec0);
      b.v_min_u32(tok[s], last_tok, tok[s]);
      b.v_lshrrev_b32(addr[0], Imm(log2i(s_.page_size)), tok[s]);
      b.v_add_u32(addr[0], page_base(), addr[0]);
      b.v_lshlrev_b32(addr[0], Imm(2), addr[0]);
      b.s_and_saveexec_b64(saved_exec0, vcc);
      b.global_load_dword(idx[s], addr[0], ptr(mla_decode_args::kv_indices));
      b.s_mov_exec(saved_exec0);
    };
    auto share_index = [&](int s) {
      if (lanes_per_token == 2) b.v_mov_b32_quad_perm(idx[s], idx[s], 0, 0, 2, 2);
      else if (lanes_per_token == 4) b.v_mov_b32_quad_perm(idx[s], idx[s], 0, 0, 0, 0);
      else throw std::logic_error("mla_decode: lanes per token must be 2 or 4");
    };
    // Token row = page_id * page_size + token % page_size; byte = row * 576 * kv bytes + part
    // offset (the LDS copy of a row is lds_row_pad bytes longer).
    // In the unit's last, partial tile the lanes past kv_end load nothing (no byte is read
    // that the plan does not need) and their LDS rows are written as zeros: the consumers
    // mask those tokens' scores, and a zero V keeps 0 * V finite.
    SReg saved_exec = ra.sgpr(2, "p_saved_exec"), tile_end = ra.sgpr(1, "p_tile_end");
    // Addresses of every tile of a slot first, then the loads: the page ids were fetched a slot
    // earlier, and reading them all before any row load keeps the waitcnt pass from making a
    // tile's loads wait for the previous tile's.
    auto tile_address = [&](int s) {
      VReg a = taddr[s];
      share_index(s);
      b.v_lshlrev_b32(a[0], Imm(log2i(s_.page_size)), idx[s]);
      if (s_.page_size > 1) {
        b.v_and_b32(a[1], Imm(s_.page_size - 1), tok[s]);
        b.v_add_u32(a[0], a[0], a[1]);
      }
      b.v_mul_hi_u32(a[1], row_bytes, a[0]);
      b.v_mul_lo_u32(a[0], row_bytes, a[0]);
      b.v_add_co_u32(a[0], vcc, a[0], part_off);
      b.v_addc_co_u32(a[1], vcc, a[1], Imm(0), vcc);
      b.v_add_co_u32(a[0], vcc, ptr(mla_decode_args::kv)[0], a[0]);
      b.v_addc_co_u32(a[1], vcc, kv_hi, a[1], vcc);
    };
    auto load_data = [&](int s) {
      auto loads_ = [&] {
        for (int k = 0; k < loads; ++k) b.global_load_dwordx4(data[set][s].sub(4 * k, 4), taddr[s], uint32_t(16 * k));
      };
      b.s_lshl_b32(tile_end, tile, Imm(log2i(T)));
      b.s_add_u32(tile_end, tile_end, kv_start());
      b.s_add_u32(tile_end, tile_end, Imm(T));
      b.s_cmp_gt_u32(tile_end, kv_end());
      Label partial_tile = b.new_label("partial_tile"), loaded = b.new_label("loaded");
      b.s_cbranch_scc1(partial_tile);
      loads_();
      b.s_branch(loaded);
      b.bind(partial_tile);
      for (int r = 0; r < data[set][s].count; ++r) b.v_mov_b32(data[set][s][r], Imm(0));
      b.s_sub_u32(tile_end, tile_end, Imm(T));  // tile start
      b.v_add_u32(addr[0], tile_end, vt);  // the unclamped token (tok[s] is the next slot's by now)
      b.v_cmp_gt_u32(vcc, kv_end(), addr[0]);
      b.s_and_saveexec_b64(saved_exec, vcc);
      loads_();
      b.s_mov_exec(saved_exec);
      b.bind(loaded);
    };
    // Tile s of slot `slot_index` goes to LDS slot slot_index % 2, tile position s.
    auto write_tile = [&](SReg slot_index, int s) {
      if (g_.ring == 2) {
        b.s_and_b32(slot, slot_index, Imm(1));
        b.s_mul_i32(slot, slot, Imm(slot_bytes()));
        b.v_add_u32(addr[0], slot, lds_off);
      } else {
        b.v_mov_b32(addr[0], lds_off);
      }
      for (int k = 0; k < loads; ++k)
        b.ds_write_b128(addr[0], data[set][s].sub(4 * k, 4), uint32_t(s * T * E + 16 * k));
    };
    // For each tile s of slot `slot_index` that exists (tile = slot * S + s < n_tiles): body(s).
    SReg slot_index = ra.sgpr(1, "p_slot_index");
    auto for_tiles_of = [&](auto&& body) {
      for (int s = 0; s < S; ++s) {
        b.s_lshl_b32(tile, slot_index, Imm(log2i(S)));
        if (s) b.s_add_u32(tile, tile, Imm(s));
        b.s_cmp_ge_u32(tile, ntiles_);
        unless_scc1([&] { body(s); });
      }
    };

    // slot_index = plus (prologue: no base) or iter + plus.
    auto at_slot = [&](const SReg* base, int plus) {
      if (!base) b.s_mov_b32(slot_index, Imm(plus));
      else b.s_add_u32(slot_index, *base, Imm(plus));
    };
    // Page ids, addresses and loads run for every tile of a slot, present or not: a tile past
    // the unit's end has no lane below kv_end, so its loads are masked off (they read nothing)
    // yet count in vmcnt like the others. Every path through an iteration then issues the
    // same loads, and the waitcnt pass can leave a whole slot in flight.
    auto all_tiles = [&](auto&& body) {
      for (int s = 0; s < S; ++s) {
        b.s_lshl_b32(tile, slot_index, Imm(log2i(S)));
        if (s) b.s_add_u32(tile, tile, Imm(s));
        body(s);
      }
    };
    // A slot's addresses (from page ids fetched a slot earlier), then the next slot's page ids,
    // then this slot's row loads into `set`: waiting for those page ids later does not wait
    // for these rows (vmcnt counts in issue order).
    auto page_ids = [&](const SReg* base, int plus) {
      at_slot(base, plus);
      all_tiles(load_index);
    };
    auto fetch = [&](const SReg* base, int plus) {
      at_slot(base, plus);
      all_tiles(tile_address);
      page_ids(base, plus + 1);
      at_slot(base, plus);
      all_tiles(load_data);
    };
    // Prologue: slots 0..D-1 loaded, slot 0 written to LDS, slot D's loads and slot D+1's page
    // ids in flight.
    page_ids(nullptr, 0);
    for (int k = 0; k < D; ++k) {
      set = k;
      fetch(nullptr, k);
    }
    set = 0;
    at_slot(nullptr, 0);
    for_tiles_of([&](int s) { write_tile(slot_index, s); });
    fetch(nullptr, D);
    b.s_barrier();
    if (S > 1 && !g_.q_in_lds) b.s_barrier();  // the consumers move Q from LDS slot 1 into AGPRs in between
    if (g_.q_split) b.s_barrier();             // the consumers split Q into its fp8 images in between

    // Iteration i: write slot i+1, load slot i+1+D into the set it frees (and fetch page ids
    // of slot i+2+D), then hand over. With a one-slot ring, the write waits for a first
    // barrier (the consumers have read slot i). Unrolled D times, so that the register set is static.
    b.s_mov_b32(iter_, Imm(0));
    Label loop = b.new_label("producer_loop"), done = b.new_label("producer_done");
    b.bind(loop);
    for (int c = 0; c < D; ++c) {
      set = (c + 1) % D;
      if (g_.ring == 1) b.s_barrier();  // one slot: the consumers are done reading slot i
      at_slot(&iter_, 1);
      for_tiles_of([&](int s) { write_tile(slot_index, s); });
      fetch(&iter_, 1 + D);
      b.s_barrier();
      b.s_add_u32(iter_, iter_, Imm(1));
      b.s_cmp_lt_u32(iter_, nslots_);
      if (c + 1 < D) b.s_cbranch_scc0(done);
    }
    b.s_cbranch_scc1(loop);
    b.bind(done);
    b.s_endpgm();
    for (VReg r : {vt, part_off, lds_off, addr, kv_hi, first_lane}) ra.release(r);
    for (int s = 0; s < S; ++s)
      for (VReg r : {idx[s], tok[s], taddr[s]}) ra.release(r);
    for (auto& d : data)
      for (VReg r : d) ra.release(r);
    for (SReg r : {last_tok, row_bytes, tile, slot, saved_exec, tile_end, saved_exec0, slot_index}) ra.release(r);
  }

  // ------------------------------------------------------------------ consumer
  void consumer_wave() {
    Builder& b = *b_;
    auto& ra = b.regs();
    const int T = g_.tile_tokens, E = g_.lds_row_bytes, kvb = g_.kv_bytes, qb = g_.q_bytes;
    const int M = g_.rows, sub_tiles = T / 16;
    const bool split = g_.q_split;                  // bf16 Q as fp8 hi + lo images (QK on fp8 MFMAs)
    const int qob = pl_.q_operand_bytes;            // bytes of one Q operand element
    const bool widen_k = pl_.widen_k;               // fp8 K widened to bf16 for a bf16 QK
    // Q operand (AGPRs) of each QK block: k/4 elements per lane, qob bytes each.
    const auto& blocks = g_.qk_blocks;
    const std::vector<int>& qa_off = pl_.q_agpr_offset;

    // v_perm_b32 is VOP3: its byte selectors (and other VOP3 constants) live in SGPRs.
    // (and the Q copy's q / P multiplier and piece count, VOP3 / VOPC operands too).
    const uint32_t qP = uint32_t(kMlaDim * qb / 8);
    std::vector<uint32_t> consts{sel(4, 0, 6, 2), sel(5, 1, 7, 3), sel(0, 1, 4, 5), sel(2, 3, 6, 7), 0x7fffu,
                                 q_piece_divider(qb).first, uint32_t(kRowsPerWave) * qP};
    if (split) consts.insert(consts.end(), {0xffff0000u, 254u});  // split_q's bf16 high half, exponent bound
    // Split: 2^-kQLoShift as the low SGPR of a pair (the high one 0), broadcast by a packed fma.
    SReg lo_inv2 = split ? ra.sgpr(2, "c_lo_inv_scale", 2) : SReg{};
    if (split) {
      b.s_mov_b32(lo_inv2[0], Imm(int64_t(kQLoInvBits)));
      b.s_mov_b32(lo_inv2[1], Imm(0));
    }
    for (uint32_t v : consts) {
      if (consts_.count(v)) continue;
      SReg k = ra.sgpr(1, fmt::format("c_const_{:x}", v));
      b.s_mov_b32(k, Imm(v));
      consts_[v] = k;
    }
    VReg j = ra.vgpr(1, "c_row_lane"), g4 = ra.vgpr(1, "c_group_x4"), row = ra.vgpr(1, "c_row");
    b.v_and_b32(j, Imm(15), lane_);
    b.v_lshrrev_b32(g4, Imm(4), lane_);
    b.v_lshlrev_b32(g4, Imm(2), g4);
    // Consumer c = wave - 1 owns row block c / S and takes tile c % S of every slot.
    // Row of the request this lane owns: row_group * rows_per_group + 16 * (c / S) + j.
    SReg srow = ra.sgpr(1, "c_row_base");
    split_ = ra.sgpr(1, "c_split");
    b.s_sub_u32(wave_, wave_, Imm(1));
    b.s_and_b32(split_, wave_, Imm(g_.kv_splits - 1));
    b.s_lshr_b32(wave_, wave_, Imm(log2i(g_.kv_splits)));
    b.s_mul_i32(srow, row_group(), Imm(g_.rows_per_group));
    b.s_lshl_b32(wave_, wave_, Imm(4));
    b.s_add_u32(srow, srow, wave_);
    b.v_add_u32(row, srow, j);

    // Q rows of this request: buffer over exactly M rows, so padded rows read zeros.
    SReg qrsrc = ra.sgpr(4, "c_q_rsrc"), base = ra.sgpr(2, "c_base");
    request_base(base, ptr(mla_decode_args::q), kMlaDim * qb);
    b.make_buffer_resource(qrsrc, base, Imm(M * kMlaDim * qb));
    // Lane (j, g) offsets of the k layouts in use: g * gstride elements (see lane_chunks).
    VReg gq = ra.vgpr(1, "c_tmp");
    std::map<int, VReg> qg;  // gstride -> Q byte offset of the lane's row and g term
    for (const auto& blk : blocks) {
      const int gs = gstride(blk);
      if (qg.count(gs)) continue;
      VReg v = ra.vgpr(1, fmt::format("c_q_offset_g{}", gs));
      b.v_mul_u32_u24(v, Imm(gs * qob / 4), g4);  // (4g) * gs*qob/4 = g * gs * qob
      qg[gs] = v;
    }
    AReg qa = g_.q_in_lds ? AReg{} : ra.agpr(pl_.q_agprs, "c_q_operand", 2);
    VReg qstage = ra.vgpr(4, "c_q_stage", 4);
    // Moves chunk bytes of every QK block into the AGPRs, read with `read(dst, gstride, byte
    // offset)` (global memory or the LDS image of Q).
    // A pair's two blocks are one read (their AGPRs are consecutive).
    auto fill_q = [&](auto&& read) {
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        if (blocks[bi].pair_second) continue;
        int reg = qa_off[bi];
        for (const Chunk& c : lane_chunks(blocks[bi])) {
          const int n = c.len * qb / 4 * (blocks[bi].pair_first ? 2 : 1);
          VReg st = qstage.sub(0, n);
          read(st, gstride(blocks[bi]), uint32_t(c.elem_off * qb));
          for (int r = 0; r < n; ++r) b.v_accvgpr_write_b32(qa[reg + r], st[r]);
          reg += n;
        }
      }
    };
    const int S = g_.kv_splits;
    if (S == 1 && !g_.q_in_lds) {
      VReg qrow = ra.vgpr(1, "c_q_row_offset");
      b.v_mul_u32_u24(qrow, Imm(kMlaDim * qb), row);
      for (auto& [gs, v] : qg) b.v_add_u32(v, qrow, v);
      ra.release(qrow);
      fill_q([&](VReg dst, int gs, uint32_t off) {
        if (dst.count == 1) b.buffer_load_dword(dst, qg[gs], qrsrc, Imm(0), off);
        else if (dst.count == 2) b.buffer_load_dwordx2(dst, qg[gs], qrsrc, Imm(0), off);
        else b.buffer_load_dwordx4(dst, qg[gs], qrsrc, Imm(0), off);
      });
      b.s_barrier();  // pairs with the producer's prologue barrier: slot 0 holds the first tiles
    } else {
      // The S consumers of a row block share Q through LDS (slot 1 of the ring, which the
      // producer first writes after its second barrier; or, Q in LDS, a region of its own after
      // the ring), so each Q byte is read from memory once per workgroup: the consumers copy
      // the block's 16 rows (row-major, as in memory) in 8-byte pieces, consumer s taking
      // pieces s*64 + lane of every round; after the barrier each reads its operands.
      const int area = kRowsPerWave * g_.q_lds_row;
      SReg qarea = ra.sgpr(1, "c_q_lds_base");
      b.s_lshr_b32(qarea, wave_, Imm(4));  // wave_ = 16 * row block
      b.s_mul_i32(qarea, qarea, Imm(area));
      b.s_add_u32(qarea, qarea, Imm(g_.q_in_lds ? g_.ring * slot_bytes() : slot_bytes()));
      // Piece q = round * 64S + 64s + lane of the block's 16 rows (P pieces per row): memory byte
      // 8q from the block's first row; LDS byte 8(q + (pad / 8) (q / P)) (rows padded by pad =
      // q_lds_row - 576 q bytes). q / P by multiply and shift, checked exact over the range here.
      const int P = kMlaDim * qb / 8, pieces = kRowsPerWave * P, per_round = 64 * S;
      const int rounds = (pieces + per_round - 1) / per_round;
      const auto [mul, shift] = q_piece_divider(qb);
      if (rounds * per_round > kRowsPerWave * P + 64 * 4)
        throw std::logic_error("mla_decode: Q pieces beyond the divider's range");
      const int pad8 = (g_.q_lds_row - kMlaDim * qb) / 8;
      if (pad8 < 1 || g_.q_lds_row != kMlaDim * qb + 8 * pad8)
        throw std::logic_error("mla_decode: Q rows are padded by a multiple of 8 bytes");
      VReg piece = ra.vgpr(1, "c_q_piece"), glin = ra.vgpr(1, "c_q_piece_global"), lds = ra.vgpr(1, "c_q_piece_lds");
      SReg t = ra.sgpr(1, "c_q_tmp"), saved = ra.sgpr(2, "c_q_exec");
      b.s_lshl_b32(t, split_, Imm(6));
      b.v_add_u32(piece, t, lane_);
      b.v_lshlrev_b32(glin, Imm(3), piece);
      b.s_mul_i32(t, srow, Imm(kMlaDim * qb));  // the row block's first row, in bytes
      b.v_add_u32(glin, t, glin);
      for (int k = 0; k < rounds; ++k) {
        VReg st = qstage.sub(2 * (k % 2), 2);
        if (k) {
          b.v_add_u32(piece, Imm(per_round), piece);
          b.v_add_u32(glin, Imm(8 * per_round), glin);
        }
        b.v_mul_u32_u24(lds, K(mul), piece);
        b.v_lshrrev_b32(lds, Imm(shift), lds);
        if (pad8 > 1) b.v_mul_u32_u24(lds, Imm(pad8), lds);
        b.v_add_u32(lds, piece, lds);
        b.v_lshlrev_b32(lds, Imm(3), lds);
        b.v_add_u32(lds, qarea, lds);
        const bool tail = (k + 1) * per_round > pieces;
        if (tail) {
          b.v_cmp_gt_u32(vcc, K(uint32_t(pieces)), piece);
          b.s_and_saveexec_b64(saved, vcc);
        }
        b.buffer_load_dwordx2(st, glin, qrsrc, Imm(0));
        b.ds_write_b64(lds, st);
        if (tail) b.s_mov_exec(saved);
      }
      b.s_barrier();  // pairs with the producer's prologue barrier
      if (split) {
        split_q(qarea);
        b.s_barrier();  // every row's fp8 images and inverse scale are written
      }
      VReg qrow = ra.vgpr(1, "c_q_row_offset");
      b.v_mul_u32_u24(qrow, Imm(g_.q_lds_row), j);
      b.v_add_u32(qrow, qarea, qrow);
      if (split) {
        q_inv_scale_ = ra.vgpr(1, "c_q_inv_scale");  // 1/s of this lane's row j
        b.ds_read_b32(q_inv_scale_, qrow, uint32_t(g_.q_lds_row - 4));
      }
      for (auto& [gs, v] : qg) b.v_add_u32(v, qrow, v);  // Q in LDS: the loop reads through these
      if (!g_.q_in_lds) {
        fill_q([&](VReg dst, int gs, uint32_t off) {
          ds_read_dwords(dst, qg[gs], off);
        });
        b.s_barrier();  // Q is in every consumer's AGPRs: slot 1 is the producer's again
      }
      for (VReg r : {piece, glin, lds, qrow}) ra.release(r);
      ra.release(qarea);
      ra.release(t);
      ra.release(saved);
    }
    if (!g_.q_in_lds)
      for (auto& [gs, v] : qg) ra.release(v);
    ra.release(qstage);
    ra.release(qrsrc);

    // Visible-token limit of this lane's row: min(kv_end, kv_len - qseqlen + 1 + row / heads).
    VReg lim = ra.vgpr(1, "c_limit");
    row_div_heads(lim, row);
    SReg slim = ra.sgpr(1, "c_limit_base");
    b.s_sub_u32(slim, kv_len(), Imm(s_.qseqlen - 1));
    b.v_add_u32(lim, slim, lim);
    b.v_min_u32(lim, kv_end(), lim);
    // Scalar: the smallest limit over all rows (row 0); tiles below it need no mask.
    b.s_min_u32(slim, slim, kv_end());

    // Scales (uniform): x = s * scale * log2(e) feeds exp2.
    // xscale is the low register of a pair (the high one 0): the packed fma of the exponent
    // broadcasts it.
    VReg xscale2 = ra.vgpr(2, "c_x_scale", 2), xscale = xscale2.sub(0, 1);
    VReg cap_out = s_.logit_cap ? ra.vgpr(1, "c_cap_out") : VReg{};
    b.v_mov_b32(xscale2[1], Imm(0));
    b.v_mov_b32(xscale, argf(mla_decode_args::scale));
    if (s_.logit_cap) {
      // tanh(s / cap) = 1 - 2 / (exp2(2 * log2e * s / cap) + 1); x = cap * log2e * tanh.
      b.v_rcp_f32(cap_out, argf(mla_decode_args::logit_cap));
      b.v_mul_f32(xscale, xscale, cap_out);
      b.v_mul_f32(xscale, f32(2 * kLog2e), xscale);
      b.v_mov_b32(cap_out, argf(mla_decode_args::logit_cap));
      b.v_mul_f32(cap_out, f32(kLog2e), cap_out);
    } else {
      b.v_mul_f32(xscale, f32(kLog2e), xscale);
    }
    if (split) {  // the scores come from q s: undo s (a power of two, exact)
      b.v_mul_f32(xscale, xscale, q_inv_scale_);
      ra.release(q_inv_scale_);
    }
    // ds_bpermute addresses of the lanes 16 and 32 away (the other row groups of the same row).
    VReg perm16 = ra.vgpr(1, "c_perm16"), perm32 = ra.vgpr(1, "c_perm32");
    b.v_xor_b32(perm16, Imm(16), lane_);
    b.v_lshlrev_b32(perm16, Imm(2), perm16);
    b.v_xor_b32(perm32, Imm(32), lane_);
    b.v_lshlrev_b32(perm32, Imm(2), perm32);

    // Accumulators: O^T blocks (32 x 4 VGPRs), running max and sum (alpha needs a pair).
    VReg o = ra.vgpr(pl_.o_regs, "c_o_acc", 4);
    for (int r = 0; r < o.count; ++r) b.v_mov_b32(o[r], Imm(0));
    VReg mrun = ra.vgpr(1, "c_max"), lrun = ra.vgpr(1, "c_sum"), alpha = ra.vgpr(2, "c_alpha", 2);
    b.v_mov_b32(mrun, Imm(int64_t(kNegFltMax)));
    b.v_mov_b32(lrun, Imm(0));
    b.v_mov_b32(alpha[1], Imm(0));

    // LDS addresses: K operand row j plus the lane's g term of each k layout in use; V reads
    // token 4g, columns Vc j (or the transposing reads' rows).
    // Token order: S^T sub-tile st, row i = 4x + r holds token 16 st + 4 h(x, st) + r, so the
    // lane of group g holds, for p = 4 st + r, token 16 st + 4 h(g, st) + r. h keeps the LDS
    // reads conflict-free in the bank model: the 16 rows of an 8-byte K read group are distinct
    // modulo 16 for any h that permutes 0..3, and a 16-byte K read group (8 lanes) wants 8
    // consecutive tokens. With transposing V reads, h = (x + st) % 4, so the 8 tokens of a lane
    // group's PV k values fall in distinct rows modulo 8; 8-column V reads move one row's 128
    // contiguous bytes per lane group, conflict-free in any order, so there h(x) = x.
    auto token_group = [&](VReg dst, VReg x, int st) {  // dst = 4 h(x, st), x in 0..3
      if (pl_.token_order_rotated) {
        b.v_add_u32(dst, Imm(st), x);
        b.v_and_b32(dst, Imm(3), dst);
      } else {
        b.v_mov_b32(dst, x);
      }
      b.v_lshlrev_b32(dst, Imm(2), dst);
    };
    VReg rj = ra.vgpr(1, "c_k_row"), xj = ra.vgpr(1, "c_k_row_group");
    std::map<std::pair<int, int>, VReg> kbase;  // (gstride, st) -> LDS base in the slot
    std::map<int, VReg> kaddr;                  // gstride -> address of the current sub-tile
    for (int st = 0; st < sub_tiles; ++st) {
      b.v_lshrrev_b32(xj, Imm(2), j);
      token_group(rj, xj, st);
      b.v_and_b32(xj, Imm(3), j);
      b.v_add_u32(rj, rj, xj);                      // 4 h(j/4, st) + j%4 (+ 16 st: immediate)
      for (const auto& blk : blocks) {
        const int gs = gstride(blk);
        if (kbase.count({gs, st})) continue;
        VReg base = ra.vgpr(1, fmt::format("c_k_base_g{}_s{}", gs, st));
        b.v_mul_u32_u24(base, Imm(E), rj);
        b.v_mul_u32_u24(gq, Imm(gs * kvb / 4), g4);
        b.v_add_u32(base, base, gq);
        kbase[{gs, st}] = base;
        if (!kaddr.count(gs)) kaddr[gs] = ra.vgpr(1, fmt::format("c_k_addr_g{}", gs));
      }
    }
    // gtok[st] = 4 h(g, st): the lane's first token of sub-tile st, less 16 st.
    std::vector<VReg> gtok;
    b.v_lshrrev_b32(xj, Imm(4), lane_);  // g
    for (int st = 0; st < sub_tiles; ++st) {
      gtok.push_back(ra.vgpr(1, fmt::format("c_group_token_s{}", st)));
      token_group(gtok.back(), xj, st);
    }
    ra.release(rj);
    ra.release(xj);
    // V: per sub-tile base (the transposing b8 read needs one: its source lanes carry st).
    const bool tr_b8 = g_.v_lds_transpose && kvb == 1;
    std::vector<VReg> vbase, vaddr;
    for (int st = 0; st < (tr_b8 ? 1 : sub_tiles); ++st) {
      vbase.push_back(ra.vgpr(1, fmt::format("c_v_base_s{}", st)));
      vaddr.push_back(ra.vgpr(1, fmt::format("c_v_addr_s{}", st)));
      if (g_.v_lds_transpose) {
        transpose_read_base(vbase.back(), gq, kvb, st);
      } else {
        // Tokens 16 st + gtok[st] + r (16 st + r in the immediate offset), columns Vc j.
        b.v_mul_u32_u24(vbase.back(), Imm(E), gtok[st]);
        b.v_mul_u32_u24(gq, Imm(g_.v_read_columns * kvb), j);
        b.v_add_u32(vbase.back(), vbase.back(), gq);
      }
    }

    VReg sacc = ra.vgpr(pl_.score_regs, "c_scores", 4);
    VReg slo = split ? ra.vgpr(pl_.score_lo_regs, "c_scores_lo", 4) : VReg{};  // K lo^T, apart
    // K operands are read ahead per batch of QK blocks (MlaDecodePlan::qk_batches); with fp8 K
    // widened to bf16, the raw bytes take half as many registers again.
    const int op_max = pl_.k_op_regs;
    VReg kraw = ra.vgpr(pl_.k_raw_regs, "c_k_raw", 2);  // >= 8: staging of merge_splits
    VReg kop = widen_k ? ra.vgpr(op_max, "c_k_bf16", 2) : kraw;
    const int q_parts = split ? 2 : 1;  // split: the hi operands, then the lo operands
    VReg qop = g_.q_in_lds ? ra.vgpr(pl_.q_lds_op_regs, "c_q_from_lds", 2) : VReg{};
    const int pb = g_.p_bytes;
    const int p_regs = g_.pv_k / 4 * pb / 4;         // P^T operand registers
    VReg pop = ra.vgpr(pl_.p_regs, "c_p_operand", 2);
    const int v_regs_per_token = kvb;                // 4 columns: 1 dword (fp8) or 2 (bf16)
    const int klpv = pl_.pv_tokens_per_lane;         // tokens per lane in PV
    const int x_regs = pl_.v_operand_regs;           // A operand registers per column
    const bool widen_v = pl_.widen_v;                // fp8 V widened to bf16 for a bf16 PV
    // v_perm path: raw rows, then 4 transposed columns. LDS-transpose path: the A operands of
    // a batch of 16-column blocks (8 tokens x kvb bytes per lane each), read ahead.
    // One-slot ring (MlaDecodePlan): early release reads all of V with the QK work and releases
    // the slot before PV; prewiden widens the first half of V beside the QK MFMAs, the second
    // half beside the PV MFMAs (its raw rows reuse the first half's raw registers, its widened
    // operands the first half's once their MFMAs have read them).
    const bool tr = g_.v_lds_transpose;
    const int tr_batch = pl_.transpose_batch, tr_regs = pl_.transpose_regs;
    const int vhalves = pl_.v_halves;  // 4-column groups per V read
    const int Vc = g_.v_read_columns;
    const int v_nb = pl_.v_blocks, v_nb_regs = pl_.v_block_regs;
    const bool early_release = pl_.early_release, prewiden = pl_.prewiden;
    const int group_regs = pl_.v_group_regs;  // A operands of one 4-column group (four 16-column blocks)
    VReg vraw = ra.vgpr(pl_.v_raw_regs, "c_v_raw", 2);
    VReg vwide = prewiden ? ra.vgpr(pl_.v_widened_regs, "c_v_widened", 2) : VReg{};
    // V rows of column block nb (token slot p: 16 st + gtok[st] + p % 4, in vaddr[st]).
    auto read_v = [&](int nb, VReg dst) {
      for (int p = 0; p < klpv; ++p) {
        const int st = p / 4;
        const uint32_t off = uint32_t((16 * st + p % 4) * E + 16 * Vc * nb * kvb);
        ds_read_dwords(dst.sub(p * v_regs_per_token * vhalves, v_regs_per_token * vhalves), vaddr[st], off);
      }
    };
    VReg xop = prewiden ? VReg{} : ra.vgpr(pl_.v_transposed_regs, "c_v_transposed", 2);
    // fp8 V for a bf16 PV without transposing reads: each token pair's 4 columns widened to f32,
    // then one v_perm per output dword takes the two bf16 halves (8 VALU per 4x4 block fewer
    // than transposing bytes first and widening after).
    VReg vf32 = pl_.v_f32_regs ? ra.vgpr(pl_.v_f32_regs, "c_v_f32", 2) : xop;
    // Scratch of the K widening, the LDS-transpose V widening and the v_perm V transpose (not
    // needed by split Q with the f32-detour V widening).
    VReg xt = pl_.transpose_scratch ? ra.vgpr(4, "c_transpose_tmp", 2) : VReg{};
    // tmax is the low register of a pair (the high one 0), broadcast as -m by the packed fma.
    VReg tmax2 = ra.vgpr(2, "c_tile_max", 2), tmax = tmax2.sub(0, 1);
    VReg tsum = ra.vgpr(1, "c_tile_sum"), tt = ra.vgpr(1, "c_tmp2");
    b.v_mov_b32(tmax2[1], Imm(0));
    // -inf in a VGPR: v_cndmask already reads VCC, and gfx9 allows one scalar/literal read.
    VReg neg_inf = ra.vgpr(1, "c_neg_inf"), mslack = ra.vgpr(1, "c_max_slack");
    b.v_mov_b32(neg_inf, Imm(int64_t(kNegInf)));
    SReg tb = ra.sgpr(1, "c_tile_base"), sslot = ra.sgpr(1, "c_slot");

    // A batch of QK blocks: its K (and, Q in LDS, Q) operand reads, then its MFMAs (widening K
    // first where Q is bf16 and the cache fp8). Registers per batch are fixed: kraw / kop / qop.
    auto op_regs_of = [&](const QkBlock& blk) { return lane_elems(blk) * qob / 4; };
    auto batch_regs_of = [&](const QkBatch& bt, std::vector<VReg>& raw, std::vector<VReg>& op, std::vector<VReg>* qv) {
      for (size_t c = 0; c < bt.blocks.size(); ++c) {
        const QkBlock& blk = blocks[size_t(bt.blocks[c])];
        raw.push_back(kraw.sub(bt.raw_offset[c], std::max(1, lane_elems(blk) * kvb / 4)));
        op.push_back(widen_k ? kop.sub(bt.op_offset[c], op_regs_of(blk)) : raw.back());
        for (int part = 0; part < (g_.q_in_lds ? q_parts : 0); ++part)
          qv[part].push_back(qop.sub(part * op_max + bt.op_offset[c], op_regs_of(blk)));
      }
    };
    auto read_qk_batch = [&](int st, const QkBatch& bt) {
      std::vector<VReg> raw, op, qv[2];
      batch_regs_of(bt, raw, op, qv);
      for (size_t c = 0; c < bt.blocks.size(); ++c) {
        const QkBlock& blk = blocks[size_t(bt.blocks[c])];
        if (blk.pair_second) continue;  // a pair's K (and Q) is one read into both blocks' registers
        int reg = 0, rq = 0;
        for (const Chunk& ch : lane_chunks(blk)) {
          const int n = std::max(1, ch.len * kvb / 4) * (blk.pair_first ? 2 : 1);
          ds_read_dwords(kraw.sub(raw[c].first - kraw.first + reg, n), kaddr[gstride(blk)],
                         uint32_t(16 * st * E + ch.elem_off * kvb));
          reg += n;
          const int nq = ch.len * qob / 4 * (blk.pair_first ? 2 : 1);
          for (int part = 0; part < (g_.q_in_lds ? q_parts : 0); ++part)
            ds_read_dwords(qop.sub(qv[part][c].first - qop.first + rq, nq), qg[gstride(blk)],
                           uint32_t(ch.elem_off * qob + part * g_.q_lo_offset));
          rq += nq;
        }
      }
    };
    auto qk_batch = [&](int st, const QkBatch& bt) {
      std::vector<VReg> raw, op, qv[2];
      batch_regs_of(bt, raw, op, qv);
      VReg sdst = sacc.sub(4 * st, 4);
      if (widen_k)
        for (size_t c = 0; c < bt.blocks.size(); ++c) widen_fp8_to_bf16(op[c], raw[c], xt);
      for (size_t c = 0; c < bt.blocks.size(); ++c) {
        const int bi = bt.blocks[c];
        AccSrc acc = bi == 0 ? AccSrc::zero() : AccSrc(sdst);
        if (g_.q_in_lds) b.mfma(blocks[bi].mfma, sdst, op[c], qv[0][c], acc);
        else b.mfma(blocks[bi].mfma, sdst, op[c], qa.sub(qa_off[bi], op_regs_of(blocks[bi])), acc);
        if (split) b.mfma(blocks[bi].mfma, slo.sub(4 * st, 4), op[c], qv[1][c], bi == 0 ? AccSrc::zero() : AccSrc(slo.sub(4 * st, 4)));
      }
    };
    // LDS addresses of this wave's tile in the slot: with one slot and one sub-tile they do not
    // change from tile to tile, and are set once before the loop.
    const bool fixed_addresses = pl_.fixed_addresses;
    // Read ahead (fixed addresses, Q in LDS, V half widened with QK): the next tile's first QK
    // batch and the first half of its V are read while the previous tile's last PV MFMAs run,
    // after the barrier that hands the slot over; the tile before the loop reads them there.
    const bool prefetch = pl_.prefetch;
    auto read_ahead = [&] {
      read_qk_batch(0, pl_.qk_batches[0]);
      for (int nb = 0; nb < v_nb / 2; ++nb) read_v(nb, vraw.sub(nb * v_nb_regs, v_nb_regs));
    };
    auto tile_addresses = [&](bool k_too) {
      if (g_.ring == 2) {
        b.s_and_b32(sslot, iter_, Imm(1));
        b.s_mul_i32(sslot, sslot, Imm(slot_bytes()));
      } else {
        b.s_mov_b32(sslot, Imm(0));
      }
      if (g_.kv_splits > 1) {
        SReg pos = ra.sgpr(1, "c_tile_pos");
        b.s_mul_i32(pos, split_, Imm(T * E));
        b.s_add_u32(sslot, sslot, pos);
        ra.release(pos);
      }
      for (size_t v = 0; v < vbase.size(); ++v) b.v_add_u32(vaddr[v], sslot, vbase[v]);
      if (k_too)
        for (auto& [gs, addr] : kaddr) b.v_add_u32(addr, sslot, kbase[{gs, 0}]);
    };
    b.s_mov_b32(iter_, Imm(0));
    if (fixed_addresses) tile_addresses(true);
    if (prefetch) {  // this wave's first tile (tile `split`), if the unit has it
      b.s_cmp_ge_u32(split_, ntiles_);
      unless_scc1(read_ahead);
    }
    Label loop = b.new_label("consumer_loop");
    b.bind(loop);
    // This wave's tile: slot iter, tile position split (absent at the unit's end: skip to the
    // barrier, which every wave passes once per slot).
    Label absent = b.new_label("tile_absent");
    b.s_lshl_b32(tb, iter_, Imm(log2i(g_.kv_splits)));
    b.s_add_u32(tb, tb, split_);
    b.s_cmp_ge_u32(tb, ntiles_);
    b.s_cbranch_scc1(absent);
    b.s_lshl_b32(tb, tb, Imm(log2i(T)));
    b.s_add_u32(tb, tb, kv_start());
    if (!fixed_addresses) tile_addresses(false);

    // S^T = K Q^T per 16-token sub-tile.
    for (int st = 0; st < sub_tiles; ++st) {
      if (!fixed_addresses)
        for (auto& [gs, addr] : kaddr) b.v_add_u32(addr, sslot, kbase[{gs, st}]);
      for (size_t k = 0; k < pl_.qk_batches.size(); ++k) {
        if (!(prefetch && k == 0)) read_qk_batch(st, pl_.qk_batches[k]);  // batch 0 was read ahead
        qk_batch(st, pl_.qk_batches[k]);
      }
    }

    if (prewiden) {
      if (!prefetch)
        for (int nb = 0; nb < v_nb / 2; ++nb) read_v(nb, vraw.sub(nb * v_nb_regs, v_nb_regs));
      for (int nb = 0; nb < v_nb / 2; ++nb)
        for (int half = 0; half < vhalves; ++half)
          widen_v_group(vraw.sub(nb * v_nb_regs, v_nb_regs), half, vwide.sub((nb * vhalves + half) * group_regs, group_regs), vf32);
      for (int nb = v_nb / 2; nb < v_nb; ++nb) read_v(nb, vraw.sub((nb - v_nb / 2) * v_nb_regs, v_nb_regs));
    } else if (early_release) {
      for (int nb = 0; nb < v_nb; ++nb) read_v(nb, vraw.sub(nb * v_nb_regs, v_nb_regs));
    }
    // Split: S^T = K (q s)^T = K hi^T + 2^-kQLoShift K lo^T (two scores per packed fma).
    for (int e = 0; e < (split ? 4 * sub_tiles : 0); e += 2)
      b.v_pk_fma_f32(sacc.sub(e, 2), slo.sub(e, 2), lo_inv2, sacc.sub(e, 2), true, false);
    // Scores in exp2 units (x = s xscale), masked beyond the row's limit. Without the soft cap
    // the scores stay unscaled until the exponent (xscale > 0, so the max commutes with it):
    // the row max is scaled once and each p takes one fma, exp2(fma(s, xscale, -m)).
    const bool cap = s_.logit_cap;
    for (int e = 0; e < (cap ? 4 * sub_tiles : 0); ++e) {
      b.v_mul_f32(tt, xscale, sacc[e]);
      b.v_exp_f32(tt, tt);
      b.v_add_f32(tt, f32(1.0f), tt);
      b.v_rcp_f32(tt, tt);
      b.v_fma_f32(tt, tt, f32(-2.0f), f32(1.0f));
      b.v_mul_f32(sacc[e], cap_out, tt);
    }
    b.v_add_f32(mslack, f32(kRescaleSlack), mrun);  // m + slack (independent of the tile)
    SReg tend = ra.sgpr(1, "c_tile_end");
    b.s_add_u32(tend, tb, Imm(T));
    b.s_cmp_le_u32(tend, slim);
    ra.release(tend);
    unless_scc1([&] {
      // lim - tb compared with the token offset 16s + 4g + r of each score.
      b.v_sub_u32(tt, lim, tb);
      for (int st = 0; st < sub_tiles; ++st)
        for (int r = 0; r < 4; ++r) {
          b.v_add_u32(tsum, Imm(16 * st + r), gtok[st]);
          b.v_cmp_gt_i32(vcc, tt, tsum);
          b.v_cndmask_b32(sacc[4 * st + r], neg_inf, sacc[4 * st + r], vcc);
        }
    });

    // Online softmax: tile max over the lane's tokens, then over the 4 lane groups.
    b.v_max3_f32(tmax, sacc[0], sacc[1], sacc[2]);
    for (int e = 3; e < 4 * sub_tiles; ++e) b.v_max_f32(tmax, tmax, sacc[e]);
    b.ds_bpermute_b32(tt, perm16, tmax);
    b.v_max_f32(tmax, tmax, tt);
    b.ds_bpermute_b32(tt, perm32, tmax);
    b.v_max_f32(tmax, tmax, tt);
    if (!cap) b.v_mul_f32(tmax, xscale, tmax);
    // Lazy rescale: the reference max m moves only when a row's max grows by more than
    // kRescaleSlack (log2 units), so P = exp2(x - m) <= 2^7 and, on most tiles, no row
    // moves and the rescale (alpha = exp2(m - m'), O^T and l times alpha) is skipped by a
    // uniform branch. The result is exact either way: l and O carry the same factor, and
    // lse = m + log(l).
    b.v_cmp_gt_f32(vcc, tmax, mslack);
    b.v_cndmask_b32(tmax, mrun, tmax, vcc);        // the row's new reference max
    Label rescaled = b.new_label("rescaled");
    b.s_cbranch_vccz(rescaled);
    b.v_sub_f32(alpha[0], mrun, tmax);
    b.v_exp_f32(alpha[0], alpha[0]);               // 1 for rows that keep theirs
    for (int r = 0; r < o.count; r += 2) b.v_pk_mul_f32_bcast_lo(o.sub(r, 2), o.sub(r, 2), alpha);
    b.v_mul_f32(lrun, lrun, alpha[0]);
    b.bind(rescaled);
    b.v_mov_b32(mrun, tmax);
    if (!cap) {
      b.v_sub_f32(tmax, f32(0.0f), tmax);  // -m
      for (int e = 0; e < 4 * sub_tiles; e += 2)
        b.v_pk_fma_f32(sacc.sub(e, 2), sacc.sub(e, 2), xscale2, tmax2, true, true);  // s xscale - m
    }
    for (int e = 0; e < 4 * sub_tiles; ++e) {
      if (cap) b.v_sub_f32(sacc[e], sacc[e], tmax);
      b.v_exp_f32(sacc[e], sacc[e]);
    }
    b.v_add_f32(tsum, sacc[0], sacc[1]);
    for (int e = 2; e < 4 * sub_tiles; ++e) b.v_add_f32(tsum, tsum, sacc[e]);
    b.v_add_f32(lrun, lrun, tsum);

    // P^T operand: the lane's own probabilities, p = 4 st + r (token 16 st + 4((g+st)%4) + r).
    if (pb == 1) {
      for (int st = 0; st < sub_tiles; ++st) {
        b.v_cvt_pk_fp8_f32(pop[st], sacc[4 * st + 0], sacc[4 * st + 1], 0);
        b.v_cvt_pk_fp8_f32(pop[st], sacc[4 * st + 2], sacc[4 * st + 3], 1);
      }
    } else {
      for (int e = 0; e < 4 * sub_tiles; e += 2) pack_bf16(pop[e / 2], sacc[e], sacc[e + 1], tt, tsum);
    }
    if (early_release) b.s_barrier();  // the slot is read (V is in registers): the producer may write

    if (tr) {
      // O^T += V^T P^T, block n = columns 16n..16n+15: one transposing read per block (two
      // for bf16 V), a batch of reads ahead of its MFMAs.
      for (int b0 = 0; b0 < kMlaVDim / 16; b0 += tr_batch) {
        for (int c = 0; c < tr_batch; ++c) {
          const uint32_t col = uint32_t(16 * (b0 + c) * kvb);
          VReg dst = vraw.sub(c * tr_regs, tr_regs);
          if (kvb == 1) {
            b.ds_read_b64_tr_b8(dst, vaddr[0], col);
          } else {
            b.ds_read_b64_tr_b16(dst.sub(0, 2), vaddr[0], col);
            b.ds_read_b64_tr_b16(dst.sub(2, 2), vaddr[1], col);
          }
        }
        for (int c = 0; c < tr_batch; ++c) {
          VReg a = vraw.sub(c * tr_regs, tr_regs);
          if (widen_v) {
            VReg w = xop.sub((c % 2) * x_regs, x_regs);
            widen_fp8_to_bf16(w, a, xt);
            a = w;
          }
          VReg acc = o.sub(4 * (b0 + c), 4);
          b.mfma(g_.pv_mfma, acc, a, pop.sub(0, p_regs), acc);
        }
      }
    }
    // O^T += V^T P^T: per token, one LDS read of Vc = 4 or 8 columns; each 4-column group
    // makes four 16-column blocks (block n = 4 (Vc/4 nb + half) + q holds columns
    // 16 Vc nb + Vc i + 4 half + q of lane row i).
    // Read ahead: the MFMAs of the last pl_.tail_groups groups run after the slot hand-over
    // barrier, beside the next tile's reads (when the unit has a next tile for this wave); their
    // operands are made before it.
    // A 4-column group of PV: its A operands (widened or transposed V), then its four MFMAs.
    auto pv_operands = [&](int nb, int half) {
      const int set = prewiden ? nb - v_nb / 2 : early_release ? nb : 0;  // raw set (prewiden: nb >= v_nb / 2)
      const VReg vnb = vraw.sub(std::max(set, 0) * v_nb_regs, v_nb_regs);
      VReg x = xop;
      if (prewiden) {
        const int grp = nb * vhalves + half, held = v_nb / 2 * vhalves;
        x = vwide.sub((grp % held) * group_regs, group_regs);
        if (grp >= held) widen_v_group(vnb, half, x, vf32);
      } else if (widen_v) {
        widen_v_group(vnb, half, x, vf32);
      } else {
        std::vector<VReg> tok;  // token slot p's 4 columns of this group
        for (int p = 0; p < klpv; ++p) tok.push_back(vnb.sub((p * vhalves + half) * v_regs_per_token, v_regs_per_token));
        transpose_v(xop, tok, xt, klpv, kvb);
      }
      return x;
    };
    auto pv_mfmas = [&](int nb, int half, VReg x) {
      for (int q = 0; q < 4; ++q) {
        VReg acc = o.sub(4 * (4 * (vhalves * nb + half) + q), 4);
        b.mfma(g_.pv_mfma, acc, x.sub(q * x_regs, x_regs), pop.sub(0, p_regs), acc);
      }
    };
    const int groups = v_nb * vhalves, tail = pl_.tail_groups;
    std::vector<VReg> tail_ops;  // the tail groups' operands, made before the barrier
    for (int grp = 0; grp < groups; ++grp) {
      const int nb = grp / vhalves, half = grp % vhalves;
      if (half == 0 && !early_release) read_v(nb, vraw.sub(0, v_nb_regs));
      VReg x = pv_operands(nb, half);
      if (grp < groups - tail) pv_mfmas(nb, half, x);
      else tail_ops.push_back(x);
    }
    auto pv_tail = [&] {
      for (int grp = groups - tail; grp < groups; ++grp)
        pv_mfmas(grp / vhalves, grp % vhalves, tail_ops[size_t(grp - (groups - tail))]);
    };
    Label tile_done = b.new_label("tile_done");
    if (prefetch) {
      b.s_barrier();  // the producer has written slot i+1
      SReg next = ra.sgpr(1, "c_next_tile");
      b.s_lshl_b32(next, iter_, Imm(log2i(g_.kv_splits)));
      b.s_add_u32(next, next, split_);
      b.s_add_u32(next, next, Imm(g_.kv_splits));
      b.s_cmp_ge_u32(next, ntiles_);
      ra.release(next);
      Label plain = b.new_label("tail_plain"), joined = b.new_label("tail_done");
      b.s_cbranch_scc1(plain);
      read_ahead();  // the tail's operands are made: the raw V registers are free
      pv_tail();
      b.s_branch(joined);
      b.bind(plain);
      pv_tail();
      b.bind(joined);
      b.s_branch(tile_done);
    }

    Label written = b.new_label("slot_written");
    if (early_release && !prefetch) b.s_branch(written);  // the slot was released before PV
    b.bind(absent);
    b.s_barrier();  // slot i%2 is free for the producer
    b.bind(written);
    if (g_.ring == 1) b.s_barrier();  // one slot: the producer has written slot i+1
    b.bind(tile_done);
    b.s_add_u32(iter_, iter_, Imm(1));
    b.s_cmp_lt_u32(iter_, nslots_);
    b.s_cbranch_scc1(loop);

    // Row sum over the 4 lane groups.
    b.ds_bpermute_b32(tt, perm16, lrun);
    b.v_add_f32(lrun, lrun, tt);
    b.ds_bpermute_b32(tt, perm32, lrun);
    b.v_add_f32(lrun, lrun, tt);
    if (g_.kv_splits > 1) merge_splits(o, mrun, lrun, alpha, kop, tt, tsum);
    epilogue(o, mrun, lrun, alpha, row, j, g4, perm16, perm32, tt, tsum);
    b.s_endpgm();
  }

  // The S consumers of a row block hold (m, l, O^T) of disjoint tokens, relative to their own
  // reference max m. Splits 1..S-1 store theirs in LDS (free after the last barrier: ring and
  // Q region; lane-major, so every lane reads back its own) and split 0 folds them in:
  // m' = max(m0, ms), a = exp2(m0 - m'), b = exp2(ms - m'), l' = a l0 + b ls, O' = a O0 + b Os.
  // Writer w = row block * (S-1) + split - 1 uses region w % F in round w / F, F = regions
  // that fit; a writer ends after its round's first barrier, and a second barrier keeps the
  // next round's writers off the regions until split 0 has read them. (S_BARRIER: "if some
  // waves in the threadgroup have already terminated, this waits on only the surviving waves",
  // AMD CDNA3 ISA; the producer ends early the same way.)
  void merge_splits(VReg o, VReg mrun, VReg lrun, VReg alpha, VReg tmp, VReg t0, VReg t1) {
    Builder& b = *b_;
    auto& ra = b.regs();
    const int S = g_.kv_splits, R = g_.merge_bytes, o_bytes = kRowsPerWave * kMlaVDim * 4;
    const int F = g_.lds_bytes / R, W = g_.row_blocks * (S - 1), rounds = (W + F - 1) / F;
    if (F < 1 || tmp.count < 8) throw std::logic_error("mla_decode: no room for the merge of the splits");
    SReg widx = ra.sgpr(1, "m_writer"), region = ra.sgpr(1, "m_region"), other = ra.sgpr(1, "m_other");
    VReg addr = ra.vgpr(1, "m_addr");
    b.s_lshr_b32(widx, wave_, Imm(4));  // wave_ = 16 * row block
    b.s_mul_i32(widx, widx, Imm(S - 1));
    b.s_add_u32(widx, widx, split_);
    b.s_sub_u32(widx, widx, Imm(1));     // meaningless for split 0, never used there
    auto region_of = [&](SReg w, int round) {  // region = (w - round*F) * R; addr = region + 16 lane
      b.s_sub_u32(region, w, Imm(round * F));
      b.s_mul_i32(region, region, Imm(R));
      b.v_lshlrev_b32(addr, Imm(4), lane_);
      b.v_add_u32(addr, region, addr);
    };
    // SCC = 1 unless round*F <= w < (round+1)*F.
    auto outside_round = [&](SReg w, int round, Label skip) {
      b.s_cmp_lt_u32(w, Imm(round * F));
      b.s_cbranch_scc1(skip);
      b.s_cmp_ge_u32(w, Imm((round + 1) * F));
      b.s_cbranch_scc1(skip);
    };
    for (int k = 0; k < rounds; ++k) {
      Label not_writer = b.new_label("merge_not_writer"), no_merge = b.new_label("merge_done");
      b.s_cmp_eq_u32(split_, Imm(0));
      b.s_cbranch_scc1(not_writer);
      outside_round(widx, k, not_writer);
      // Writer: O^T as 32 x 16 bytes per lane (offset 1024 n), then m and l (4 bytes per lane).
      region_of(widx, k);
      for (int n = 0; n < o.count / 4; ++n) b.ds_write_b128(addr, o.sub(4 * n, 4), uint32_t(1024 * n));
      b.v_lshlrev_b32(t0, Imm(2), lane_);
      b.v_add_u32(t0, region, t0);
      b.ds_write_b32(t0, mrun, uint32_t(o_bytes));
      b.ds_write_b32(t0, lrun, uint32_t(o_bytes + 256));
      b.s_barrier();
      b.s_endpgm();

      b.bind(not_writer);
      b.s_barrier();
      b.s_cmp_lg_u32(split_, Imm(0));
      b.s_cbranch_scc1(no_merge);
      for (int sp = 1; sp < S; ++sp) {
        Label absent = b.new_label("merge_skip");
        b.s_lshr_b32(other, wave_, Imm(4));
        b.s_mul_i32(other, other, Imm(S - 1));
        b.s_add_u32(other, other, Imm(sp - 1));
        outside_round(other, k, absent);
        region_of(other, k);
        b.v_lshlrev_b32(t0, Imm(2), lane_);
        b.v_add_u32(t0, region, t0);
        b.ds_read_b32(t1, t0, uint32_t(o_bytes));              // ms
        b.ds_read_b32(alpha[1], t0, uint32_t(o_bytes + 256));  // ls
        b.v_max_f32(t0, mrun, t1);                             // m'
        b.v_sub_f32(mrun, mrun, t0);
        b.v_exp_f32(alpha[0], mrun);                           // a
        b.v_sub_f32(t1, t1, t0);
        b.v_exp_f32(t1, t1);                                   // b
        b.v_mov_b32(mrun, t0);
        b.v_mul_f32(alpha[1], alpha[1], t1);
        b.v_fma_f32(lrun, lrun, alpha[0], alpha[1]);
        b.v_mov_b32(alpha[1], t1);  // alpha = (a, b)
        for (int n0 = 0; n0 < o.count / 4; n0 += 2) {
          b.ds_read_b128(tmp.sub(0, 4), addr, uint32_t(1024 * n0));
          b.ds_read_b128(tmp.sub(4, 4), addr, uint32_t(1024 * (n0 + 1)));
          for (int r = 0; r < 8; ++r) {
            VReg acc = o.sub(4 * n0 + r, 1);
            b.v_mul_f32(acc, alpha[0], acc);
            b.v_fma_f32(acc, tmp[r], alpha[1], acc);
          }
        }
        b.bind(absent);
      }
      b.bind(no_merge);
      if (k + 1 < rounds) b.s_barrier();
    }
    b.v_mov_b32(alpha[1], Imm(0));
    for (SReg r : {widx, region, other}) ra.release(r);
    ra.release(addr);
  }


  // Per-lane k layout of a 16x16 MFMA operand (emulator/mfma.cpp, 'Operand layout'): E = k/4
  // elements per lane of group g = lane / 16; E <= 16: lane_k0 + lane_stride g + p (k0 + E g +
  // p unless paired, see QkBlock); E > 16 (K=128 f8f6f4):
  // k0 + 16 (g + 4 (p / 16)) + p % 16, i.e. 16-element chunks 64 apart. lane_chunks gives the
  // chunks without the lane's g term (g * gstride elements).
  struct Chunk {
    int elem_off, len;
  };
  static int lane_elems(const QkBlock& blk) { return blk.k / 4; }
  static int gstride(const QkBlock& blk) { return blk.lane_stride; }
  static std::vector<Chunk> lane_chunks(const QkBlock& blk) {
    const int e = lane_elems(blk);
    if (e <= 16) return {{blk.lane_k0, e}};  // a paired block: lane_k0 / lane_stride of the pair
    std::vector<Chunk> v;
    for (int c = 0; c < e / 16; ++c) v.push_back({blk.k0 + 64 * c, 16});
    return v;
  }

  // LDS byte address of this lane's 8-byte row for the transposing V reads (block 0). A
  // 16x16xK=32 A operand wants, in lane L, column L%16 and the tokens of k = 8(L/16) + p,
  // p = 4 st + r, which the P^T operand maps to token 16 st + 4((L/16 + st) % 4) + r.
  // The reads (hardware rule, docs/emulator.md "LDS transpose reads"; G = L/16, l = L%16):
  //   ds_read_b64_tr_b8:  byte p of lane L = byte l%8 of the row of lane 16G + 2p + l/8
  //   ds_read_b64_tr_b16: half r of lane L = half l%4 of the row of lane 16G + 4r + l/4
  // (one b16 read per sub-tile st). Solving for the row each source lane s (m = s%16) holds:
  //   b8:  p = m/2 (st = m/8, r = (m/2)%4): token 16 st + 4((s/16 + st) % 4) + r, columns 8(m%2) .. +7
  //   b16 (read st), r = m/4:               token 16 st + 4((s/16 + st) % 4) + r, columns 4(m%4) .. +3
  // Each 16-lane group names the same 16 rows as under the rocjitsu-interpreter mapping this
  // replaced, in another lane order: the bank model's cost is unchanged.
  void transpose_read_base(VReg base, VReg tmp, int kvb, int st) {
    Builder& b = *b_;
    const int E = g_.lds_row_bytes;
    b.v_lshrrev_b32(base, Imm(4), lane_);              // s/16
    if (kvb == 1) {
      b.v_bfe_u32(tmp, lane_, Imm(3), Imm(1));         // st = m/8
      b.v_add_u32(base, base, tmp);
      b.v_and_b32(base, Imm(3), base);
      b.v_lshlrev_b32(base, Imm(2), base);             // 4((s/16 + st) % 4)
      b.v_lshlrev_b32(tmp, Imm(4), tmp);
      b.v_add_u32(base, base, tmp);                    // + 16 st
    } else {
      if (st) b.v_add_u32(base, Imm(st), base);
      b.v_and_b32(base, Imm(3), base);
      b.v_lshlrev_b32(base, Imm(2), base);             // 4((s/16 + st) % 4)
      if (st) b.v_add_u32(base, Imm(16 * st), base);   // + 16 st
    }
    b.v_bfe_u32(tmp, lane_, Imm(kvb == 1 ? 1 : 2), Imm(2));
    b.v_add_u32(base, base, tmp);                      // + r
    b.v_mul_u32_u24(base, Imm(E), base);
    b.v_and_b32(tmp, Imm(kvb == 1 ? 1 : 3), lane_);
    b.v_lshlrev_b32(tmp, Imm(3), tmp);                 // 8 bytes per column group
    b.v_add_u32(base, base, tmp);
  }

  // base = ptr + qo_row * heads * row_bytes (64-bit, scalar).
  void request_base(SReg base, SReg ptr64, int row_bytes) {
    Builder& b = *b_;
    SReg t = b.regs().sgpr(2, "c_offset64");
    b.s_mul_i32(t[0], qo_row(), Imm(s_.heads * row_bytes));
    b.s_mul_hi_u32(t[1], qo_row(), Imm(s_.heads * row_bytes));
    b.s_add_u32(base[0], ptr64[0], t[0]);
    b.s_addc_u32(base[1], ptr64[1], t[1]);
    b.regs().release(t);
  }

  // (mul, shift) with (q * mul) >> shift == q / P for every piece index q of the Q copy (P =
  // 8-byte pieces of a Q row; q < 16 P + one round of 4 consumers); v_mul_u32_u24 keeps the low
  // 32 bits, so q * mul must stay below 2^32.
  static std::pair<uint32_t, int> q_piece_divider(int qb) {
    const uint32_t P = uint32_t(kMlaDim * qb / 8), n = uint32_t(kRowsPerWave) * P + 64 * 4;
    for (int shift = 16; shift < 32; ++shift) {
      const uint32_t mul = uint32_t(((uint64_t(1) << shift) + P - 1) / P);
      bool exact = mul < (1u << 24) && uint64_t(n) * mul < (uint64_t(1) << 32);
      for (uint32_t q = 0; exact && q < uint32_t(n); ++q) exact = (uint64_t(q) * mul) >> shift == q / P;
      if (exact) return {mul, shift};
    }
    throw std::logic_error(fmt::format("mla_decode: no multiply-shift divides by {} below {}", P, n));
  }

  // d = row / heads, exact for row < 16 * rows_per_group * row_groups.
  void row_div_heads(VReg d, VReg row) {
    Builder& b = *b_;
    const int h = s_.heads;
    if ((h & (h - 1)) == 0) {
      b.v_lshrrev_b32(d, Imm(log2i(h)), row);
      return;
    }
    const uint32_t mul = (65536u + uint32_t(h) - 1) / uint32_t(h);
    for (int r = 0; r < g_.row_groups * g_.rows_per_group; ++r)
      if (int((uint32_t(r) * mul) >> 16) != r / h)
        throw std::logic_error(fmt::format("row / {} by multiply-shift is inexact at row {}", h, r));
    b.v_mul_u32_u24(d, Imm(mul), row);
    b.v_lshrrev_b32(d, Imm(16), d);
  }

  // fp8 V for a bf16 PV (8-column reads, 4-column group `half` of the raw rows `raw`): the A
  // operands of four 16-column blocks into dst (4 x x_regs). Each token pair's 4 columns are
  // widened to f32 (vf32: 8 registers), then one v_perm_b32 per dword takes the two bf16 halves:
  // column q, dword w = [bf16 V(token slot 2w, q), bf16 V(token slot 2w + 1, q)].
  void widen_v_group(VReg raw, int half, VReg dst, VReg vf32) {
    Builder& b = *b_;
    const int klpv = g_.pv_k / 4, vhalves = g_.v_read_columns / 4, x_regs = klpv * g_.p_bytes / 4;
    for (int w = 0; w < klpv / 2; ++w) {
      for (int h = 0; h < 2; ++h) {
        const VReg tok = raw[(2 * w + h) * vhalves + half];  // token slot 2w + h, this group (fp8: 1 dword)
        b.v_cvt_pk_f32_fp8(vf32.sub(4 * h, 2), tok, 0);
        b.v_cvt_pk_f32_fp8(vf32.sub(4 * h + 2, 2), tok, 1);
      }
      for (int q = 0; q < 4; ++q) b.v_perm_b32(dst[q * x_regs + w], vf32[4 + q], vf32[q], K(sel(2, 3, 6, 7)));
    }
  }

  // Four fp8 bytes -> four bf16 (exact: every fp8 e4m3 value is a bf16 value). src: 1 dword
  // (4 bytes) or 2 dwords (8 bytes); dst: 2 or 4 registers.
  void widen_fp8_to_bf16(VReg dst, VReg src, VReg tmp4) {
    Builder& b = *b_;
    for (int w = 0; w < src.count; ++w) {
      b.v_cvt_pk_f32_fp8(tmp4.sub(0, 2), src[w], 0);
      b.v_cvt_pk_f32_fp8(tmp4.sub(2, 2), src[w], 1);
      b.v_perm_b32(dst[2 * w], tmp4[1], tmp4[0], K(sel(2, 3, 6, 7)));
      b.v_perm_b32(dst[2 * w + 1], tmp4[3], tmp4[2], K(sel(2, 3, 6, 7)));
    }
  }

  // The Q split (MlaGeometry::q_split), once per unit, after the row block's 16 bf16 rows are
  // in LDS (row r at qarea + r R, R = q_lds_row). Consumer s of S takes rows s 16/S .. +16/S-1,
  // four at a time: lane group g = lane / 16 takes the four's row g, its lane j = lane % 16 the
  // 8-byte pieces (4 bf16) j + 16 p, p < 9, of the row's 144. Per row:
  //   m = max |q| (over the lane's 36 values, then the 16 lanes by ds_bpermute), e its biased
  //   exponent; s = 2^(133 - e), the exponent clamped to 1..254, so m s lies in [64, 128)
  //   (within e4m3fnuz's 240 and e4m3's 448 after rounding);
  //   hi = fp8(q s), lo = fp8((q s - hi) 2^kQLoShift): exact (see mla_geometry) but for
  //   elements below 2^-14 of the row's max, whose lo needs bits under e4m3fnuz's denormal
  //   step (2^-10): it is rounded, by at most 2^-22 of the row's max;
  //   hi over the row's bytes 0..575, lo over q_lo_offset.., 1/s (bits (254 - c) << 23) in the
  //   last dword, written by lane j = 0.
  // Every lane reads all of its pieces before the first write, a wave's DS operations execute
  // in order and every row belongs to one wave: the in-place rewrite cannot race.
  void split_q(SReg qarea) {
    Builder& b = *b_;
    auto& ra = b.regs();
    const int R = g_.q_lds_row, rows_per_wave = kRowsPerWave / g_.kv_splits;
    constexpr int kPieces = kMlaDim * 2 / 8 / 16;  // 9 pieces per lane and row
    VReg rd = ra.vgpr(1, "c_qs_read"), wr = ra.vgpr(1, "c_qs_write"), t = ra.vgpr(1, "c_qs_tmp");
    VReg m = ra.vgpr(1, "c_qs_max"), c = ra.vgpr(1, "c_qs_exp");
    VReg d = ra.vgpr(2 * kPieces, "c_qs_bf16", 2), x = ra.vgpr(2, "c_qs_f32", 2), bk = ra.vgpr(2, "c_qs_back", 2);
    VReg sc = ra.vgpr(2, "c_qs_scale", 2), hi = ra.vgpr(1, "c_qs_hi"), lo = ra.vgpr(1, "c_qs_lo");
    SReg srow = ra.sgpr(1, "c_qs_row"), saved = ra.sgpr(2, "c_qs_exec");
    // Row base of lane group g: qarea + (s rows_per_wave + g) R; reads at + 8j, writes at + 4j.
    b.s_mul_i32(srow, split_, Imm(rows_per_wave));
    b.v_lshrrev_b32(t, Imm(4), lane_);
    b.v_add_u32(t, srow, t);
    b.v_mul_u32_u24(t, Imm(R), t);
    b.v_add_u32(t, qarea, t);
    b.v_and_b32(rd, Imm(15), lane_);
    b.v_lshlrev_b32(wr, Imm(2), rd);
    b.v_add_u32(wr, t, wr);
    b.v_lshlrev_b32(rd, Imm(3), rd);
    b.v_add_u32(rd, t, rd);
    b.v_mov_b32(sc[1], Imm(0));
    VReg lo_scale = ra.vgpr(2, "c_qs_lo_scale", 2);
    b.v_mov_b32(lo_scale[0], f32(float(1 << kQLoShift)));
    b.v_mov_b32(lo_scale[1], Imm(0));
    for (int grp = 0; grp < rows_per_wave / 4; ++grp) {
      const uint32_t base = uint32_t(4 * grp * R);
      for (int p = 0; p < kPieces; ++p) b.ds_read_b64(d.sub(2 * p, 2), rd, base + uint32_t(128 * p));
      // Largest magnitude: the 15 magnitude bits of each bf16 compare as integers.
      b.v_mov_b32(m, Imm(0));
      for (int w = 0; w < d.count; ++w) {
        b.v_bfe_u32(x[0], d[w], Imm(0), Imm(15));
        b.v_bfe_u32(x[1], d[w], Imm(16), Imm(15));
        b.v_max3_u32(m, m, x[0], x[1]);
      }
      for (int k : {1, 2, 4, 8}) {  // over the row's 16 lanes
        b.v_xor_b32(t, Imm(k), lane_);
        b.v_lshlrev_b32(t, Imm(2), t);
        b.ds_bpermute_b32(x[0], t, m);
        b.v_max_u32(m, m, x[0]);
      }
      b.v_lshrrev_b32(c, Imm(7), m);              // e
      b.v_sub_u32(c, Imm(133 + 127), c);          // exponent field of s = 2^(6 - (e - 127))
      b.v_med3_i32(c, c, Imm(1), K(254));
      b.v_lshlrev_b32(sc[0], Imm(23), c);
      for (int p = 0; p < kPieces; ++p) {
        for (int h = 0; h < 2; ++h) {  // dword h of the piece: bf16 values 2h, 2h + 1
          const VReg w = d[2 * p + h];
          b.v_lshlrev_b32(x[0], Imm(16), w);
          b.v_and_b32(x[1], K(0xffff0000u), w);
          b.v_pk_mul_f32_bcast_lo(x, x, sc);        // q s
          b.v_cvt_pk_fp8_f32(hi, x[0], x[1], h);
          b.v_cvt_pk_f32_fp8(bk, hi, h);
          b.v_sub_f32(x[0], x[0], bk[0]);
          b.v_sub_f32(x[1], x[1], bk[1]);
          b.v_pk_mul_f32_bcast_lo(x, x, lo_scale);  // (q s - hi) 2^kQLoShift, exact
          b.v_cvt_pk_fp8_f32(lo, x[0], x[1], h);
        }
        b.ds_write_b32(wr, hi, base + uint32_t(64 * p));
        b.ds_write_b32(wr, lo, base + uint32_t(g_.q_lo_offset + 64 * p));
      }
      // 1/s = 2^(c' - 127) with c' = 254 - c, from the row's first lane.
      b.v_sub_u32(c, K(254), c);
      b.v_lshlrev_b32(c, Imm(23), c);
      b.v_and_b32(t, Imm(15), lane_);
      b.v_cmp_eq_u32(vcc, Imm(0), t);
      b.s_and_saveexec_b64(saved, vcc);
      b.ds_write_b32(wr, c, base + uint32_t(R - 4));
      b.s_mov_exec(saved);
    }
    for (VReg r : {rd, wr, t, m, c, d, x, bk, sc, lo_scale, hi, lo}) ra.release(r);
    ra.release(srow);
    ra.release(saved);
  }

  // Two f32 -> packed bf16 (round to nearest even); gfx942 has no conversion instruction.
  void pack_bf16(VReg d, VReg lo, VReg hi, VReg t0, VReg t1) {
    Builder& b = *b_;
    if (b.target().has_cvt_pk_bf16) {
      b.v_cvt_pk_bf16_f32(d, lo, hi);
      return;
    }
    // bits + 0x7fff + ((bits >> 16) & 1), keep the high half.
    b.v_bfe_u32(t0, lo, Imm(16), Imm(1));
    b.v_add3_u32(t0, lo, K(0x7fff), t0);
    b.v_bfe_u32(t1, hi, Imm(16), Imm(1));
    b.v_add3_u32(t1, hi, K(0x7fff), t1);
    b.v_perm_b32(d, t1, t0, K(sel(2, 3, 6, 7)));
  }

  // tok[p] holds, per token slot p (klpv of them), 4 consecutive columns (1 dword for fp8,
  // 2 for bf16). Produce for each column q the A operand: klpv elements in token order.
  void transpose_v(VReg x, const std::vector<VReg>& tok, VReg t, int klpv, int kvb) {
    Builder& b = *b_;
    const int x_regs = klpv * kvb / 4;
    if (kvb == 1) {
      // 4x4 byte transposes: tokens (4 dwords) x columns (bytes) -> columns x tokens.
      for (int grp = 0; grp < klpv / 4; ++grp) {
        const VReg d[4] = {tok[4 * grp][0], tok[4 * grp + 1][0], tok[4 * grp + 2][0], tok[4 * grp + 3][0]};
        b.v_perm_b32(t[0], d[0], d[1], K(sel(4, 0, 6, 2)));  // [d0.b0 d1.b0 d0.b2 d1.b2]
        b.v_perm_b32(t[1], d[0], d[1], K(sel(5, 1, 7, 3)));  // [d0.b1 d1.b1 d0.b3 d1.b3]
        b.v_perm_b32(t[2], d[2], d[3], K(sel(4, 0, 6, 2)));
        b.v_perm_b32(t[3], d[2], d[3], K(sel(5, 1, 7, 3)));
        b.v_perm_b32(x[0 * x_regs + grp], t[2], t[0], K(sel(0, 1, 4, 5)));  // column 0
        b.v_perm_b32(x[2 * x_regs + grp], t[2], t[0], K(sel(2, 3, 6, 7)));  // column 2
        b.v_perm_b32(x[1 * x_regs + grp], t[3], t[1], K(sel(0, 1, 4, 5)));  // column 1
        b.v_perm_b32(x[3 * x_regs + grp], t[3], t[1], K(sel(2, 3, 6, 7)));  // column 3
      }
    } else {
      // bf16: token p holds columns 0,1 in dword 0 and 2,3 in dword 1. Output dword w of
      // column q = [token 2w col q, token 2w+1 col q].
      for (int q = 0; q < 4; ++q)
        for (int w = 0; w < x_regs; ++w) {
          VReg lo_tok = tok[2 * w], hi_tok = tok[2 * w + 1];
          int h = (q % 2) * 2;
          b.v_perm_b32(x[q * x_regs + w], hi_tok[q / 2], lo_tok[q / 2], K(sel(h, h + 1, 4 + h, 5 + h)));
        }
    }
  }

  void epilogue(VReg o, VReg mrun, VReg lrun, VReg alpha, VReg row, VReg j, VReg g4, VReg perm16, VReg perm32,
                VReg t0, VReg t1) {
    Builder& b = *b_;
    auto& ra = b.regs();
    const int M = g_.rows, Vc = g_.v_read_columns;
    // inv = kv_scale / l (0 for a row with no visible token in this unit); lse in natural log.
    b.v_rcp_f32(alpha[0], lrun);
    b.v_mul_f32(alpha[0], argf(mla_decode_args::kv_scale), alpha[0]);
    b.v_cmp_gt_f32(vcc, lrun, Imm(0));
    b.v_cndmask_b32(alpha[0], Imm(0), alpha[0], vcc);
    for (int r = 0; r < o.count; r += 2) b.v_pk_mul_f32_bcast_lo(o.sub(r, 2), o.sub(r, 2), alpha);
    VReg lse = t1;
    b.v_log_f32(lse, lrun);
    b.v_add_f32(lse, mrun, lse);
    b.v_mul_f32(lse, f32(kLn2), lse);

    // Byte offset of column 16g of this lane's row (relative to the row-group base).
    SReg rsrc = ra.sgpr(4, "e_rsrc"), base = ra.sgpr(2, "e_base"), saved = ra.sgpr(2, "e_exec");
    VReg off = ra.vgpr(1, "e_offset"), stage = ra.vgpr(4, "e_stage", 4);
    Label partial_path = b.new_label("write_partial"), done = b.new_label("written");
    b.s_cmp_lt_i32(partial(), Imm(0));
    b.s_cbranch_scc0(partial_path);
    {
      // Final output: bf16 o[(qo_row * heads + row) * 512 + col].
      request_base(base, ptr(mla_decode_args::o), kMlaVDim * 2);
      b.make_buffer_resource(rsrc, base, Imm(M * kMlaVDim * 2));
      b.v_mul_u32_u24(off, Imm(kMlaVDim * 2), row);
      if (g_.v_lds_transpose) {
        // Block n register r holds column 16n + 4g + r: 4 consecutive bf16 per block.
        b.v_lshlrev_b32(t0, Imm(1), g4);
        b.v_add_u32(off, off, t0);
        for (int n = 0; n < kMlaVDim / 16; ++n) {
          pack_bf16(stage[0], o[4 * n + 0], o[4 * n + 1], t0, stage[2]);
          pack_bf16(stage[1], o[4 * n + 2], o[4 * n + 3], t0, stage[2]);
          b.buffer_store_dwordx2(stage.sub(0, 2), off, rsrc, Imm(0), uint32_t(32 * n));
        }
      } else {
        b.v_mul_u32_u24(t0, Imm(2 * Vc), g4);  // 4 Vc g columns * 2 bytes
        b.v_add_u32(off, off, t0);
      }
      for (int nb = 0; nb < (g_.v_lds_transpose ? 0 : kMlaVDim / (16 * Vc)); ++nb)
        for (int r = 0; r < 4; ++r) {
          // Columns 16 Vc nb + Vc (4g + r) + c, c = 0..Vc-1, live in O block Vc nb + c, register r.
          VReg bf = ra.vgpr(Vc / 2, "e_bf16_columns");
          for (int c = 0; c < Vc; c += 2)
            pack_bf16(bf[c / 2], o[4 * (Vc * nb + c) + r], o[4 * (Vc * nb + c + 1) + r], t0, stage[2]);
          if (Vc == 4) b.buffer_store_dwordx2(bf, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r) * 2));
          else b.buffer_store_dwordx4(bf, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r) * 2));
          ra.release(bf);
        }
      if (s_.return_lse) {
        request_base(base, ptr(mla_decode_args::lse), 4);
        b.make_buffer_resource(rsrc, base, Imm(M * 4));
        write_lse(lse, row, g4, rsrc, saved, off);
      }
      b.s_branch(done);
    }
    b.bind(partial_path);
    {
      // Partial slot p: partial_o[(p * M + row) * 512 + col] f32, partial_lse[p * M + row].
      partial_base(base, ptr(mla_decode_args::partial_o), M * kMlaVDim * 4);
      b.make_buffer_resource(rsrc, base, Imm(M * kMlaVDim * 4));
      b.v_mul_u32_u24(off, Imm(kMlaVDim * 4), row);
      if (g_.v_lds_transpose) {
        // Block n: columns 16n + 4g .. +3, stored straight from the accumulators.
        b.v_lshlrev_b32(t0, Imm(2), g4);
        b.v_add_u32(off, off, t0);
        for (int n = 0; n < kMlaVDim / 16; ++n)
          b.buffer_store_dwordx4(o.sub(4 * n, 4), off, rsrc, Imm(0), uint32_t(64 * n));
      } else {
        b.v_mul_u32_u24(t0, Imm(4 * Vc), g4);  // 4 Vc g columns * 4 bytes
        b.v_add_u32(off, off, t0);
      }
      for (int nb = 0; nb < (g_.v_lds_transpose ? 0 : kMlaVDim / (16 * Vc)); ++nb)
        for (int r = 0; r < 4; ++r)
          for (int c0 = 0; c0 < Vc; c0 += 4) {
            for (int q = 0; q < 4; ++q) b.v_mov_b32(stage[q], o[4 * (Vc * nb + c0 + q) + r]);
            b.buffer_store_dwordx4(stage, off, rsrc, Imm(0), uint32_t((16 * Vc * nb + Vc * r + c0) * 4));
          }
      partial_base(base, ptr(mla_decode_args::partial_lse), M * 4);
      b.make_buffer_resource(rsrc, base, Imm(M * 4));
      write_lse(lse, row, g4, rsrc, saved, off);
    }
    b.bind(done);
  }

  // base = ptr + partial * slot_bytes (64-bit).
  void partial_base(SReg base, SReg ptr64, int slot_bytes) {
    Builder& b = *b_;
    SReg t = b.regs().sgpr(2, "e_offset64");
    b.s_mul_i32(t[0], partial(), Imm(slot_bytes));
    b.s_mul_hi_u32(t[1], partial(), Imm(slot_bytes));
    b.s_add_u32(base[0], ptr64[0], t[0]);
    b.s_addc_u32(base[1], ptr64[1], t[1]);
    b.regs().release(t);
  }

  // One lane per row (group 0) stores the row's lse.
  void write_lse(VReg lse, VReg row, VReg g4, SReg rsrc, SReg saved, VReg off) {
    Builder& b = *b_;
    b.v_lshlrev_b32(off, Imm(2), row);
    b.v_cmp_eq_u32(vcc, Imm(0), g4);
    b.s_and_saveexec_b64(saved, vcc);
    b.buffer_store_dword(lse, off, rsrc, Imm(0));
    b.s_mov_exec(saved);
  }

  // An SGPR holding `v` (set up at the consumer's start).
  SReg K(uint32_t v) const {
    auto it = consts_.find(v);
    if (it == consts_.end()) throw std::logic_error(fmt::format("mla_decode: constant 0x{:x} not in an SGPR", v));
    return it->second;
  }

  std::map<uint32_t, SReg> consts_;
  Program& p_;
  const KernelSpec& s_;
  MlaGeometry g_;
  MlaDecodePlan pl_;  // every consumer decision, computed before emission
  Builder* b_ = nullptr;
  SReg args_, unit_, ntiles_, nslots_, wave_, iter_, split_;
  VReg lane_;
  VReg q_inv_scale_;  // split: 1/s of the lane's Q row, from split_q's LDS dword
};

}  // namespace

void build_mla_decode(Program& p, const KernelSpec& spec) { MlaDecodeBuilder(p, spec).build(); }

}  // namespace mla::gen
