// The decode kernel's producer (wave 0): it only streams the unit's KV, page ids first, then
// token rows, from memory through registers into the LDS ring. D register sets of staged rows
// (MlaGeometry::stage_slots) keep D slots of loads in flight; barriers hand slots to the
// consumers (one per slot with two slots, two with one).
#include <algorithm>

#include "kernels/mla_decode_kernel.h"
#include "kernels/mla_reduce.h"

namespace mla::gen::decode {

namespace {

class Producer {
 public:
  explicit Producer(Kernel& k)
      : k_(k), b(k.b), ra(k.b.regs()), T(k.g.tile_tokens), S(k.g.kv_splits), lanes_per_token(64 / T),
        E(k.g.lds_row_bytes), chunk(k.g.kv_row_bytes / lanes_per_token), dsm(k.s.kv_ds_mla),
        cpl(kMlaVDim / kDsMlaTile / lanes_per_token), loads(dsm ? 10 * cpl : chunk / 16), D(k.g.stage_slots) {
    if (chunk % 16 != 0) throw std::logic_error("mla_decode: token row does not split into 16-byte lane chunks");
    if (dsm && cpl < 1) throw std::logic_error("mla_decode: fp8_ds_mla needs a scale tile per lane");
  }

  void emit() {
    lane_offsets();
    registers();
    prologue();
    steady_loop();
    release();
  }

 private:
  // The producer's token swizzle for its ds_write_b128s: lane pair/quad q (lanes_per_token lanes
  // each, in one quad for the page-id DPP) writes token perm(q), perm a permutation of q's bits.
  // The first permutation (identity first) under which every 8-lane, 128-byte write group is
  // conflict-free in the emulator's bank model wins; none: the one with the fewest conflicts.
  std::vector<int> write_token_bits() const {
    const int nbits = log2i(T);
    std::vector<int> perm(static_cast<size_t>(nbits)), best;
    for (int i = 0; i < nbits; ++i) perm[size_t(i)] = i;
    int best_cost = 1 << 30;
    do {
      int cost = 0;
      for (int grp = 0; grp < 8; ++grp) {  // 8 lanes of 16 bytes per 128-byte group
        int banks[32] = {};
        for (int l = 8 * grp; l < 8 * grp + 8; ++l) {
          const int q = l / lanes_per_token, part = l % lanes_per_token;
          int token = 0;
          for (int i = 0; i < nbits; ++i) token |= ((q >> i) & 1) << perm[size_t(i)];
          const int dword = (token * E + part * chunk) / 4;
          for (int i = 0; i < 4; ++i) ++banks[(dword + i) % 32];
        }
        cost += *std::max_element(banks, banks + 32);
      }
      if (cost < best_cost) best_cost = cost, best = perm;
      if (cost == 8) break;  // one clock per group
    } while (std::next_permutation(perm.begin(), perm.end()));
    return best;
  }

  // The lane's token in a tile (swizzled), its part of the row, and its LDS offset.
  void lane_offsets() {
    vt = ra.vgpr(1, "p_token_in_tile"), part_off = ra.vgpr(1, "p_part_offset"), lds_off = ra.vgpr(1, "p_lds_offset");
    b.v_lshrrev_b32(vt, Imm(log2i(lanes_per_token)), k_.lane);
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
    b.v_and_b32(part_off, Imm(lanes_per_token - 1), k_.lane);
    if (dsm) return ds_mla_offsets();
    b.v_mul_u32_u24(part_off, Imm(chunk), part_off);
    b.v_mul_u32_u24(lds_off, Imm(E), vt);
    b.v_add_u32(lds_off, lds_off, part_off);
  }

  // fp8_ds_mla: lane j of a token takes its latent tiles [j cpl, (j + 1) cpl) (128 e4m3fn bytes
  // each, in memory at j 128 cpl: part_off), their scales and the j-th part of the rope (32 cpl
  // bytes); it writes them as bf16 at LDS byte j 256 cpl of the row (lds_off) and rope byte 1024 +
  // 32 cpl j. The scales and the rope in memory, and the rope in LDS, lie a lane-dependent
  // (positive) distance past those bases.
  void ds_mla_offsets() {
    const VReg j = part_off;
    sc_rel = ra.vgpr(1, "p_scale_offset"), rope_rel = ra.vgpr(1, "p_rope_offset");
    rope_lds_rel = ra.vgpr(1, "p_rope_lds_offset");
    b.v_mul_u32_u24(sc_rel, Imm(kDsMlaTile * cpl - 4 * cpl), j);
    b.v_sub_u32(sc_rel, Imm(kDsMlaScaleOffset), sc_rel);
    b.v_mul_u32_u24(rope_rel, Imm(kDsMlaTile * cpl - 32 * cpl), j);
    b.v_sub_u32(rope_rel, Imm(kDsMlaRopeOffset), rope_rel);
    b.v_mul_u32_u24(rope_lds_rel, Imm(2 * kDsMlaTile * cpl - 32 * cpl), j);
    b.v_sub_u32(rope_lds_rel, Imm(2 * kMlaVDim), rope_lds_rel);
    b.v_mul_u32_u24(lds_off, Imm(E), vt);
    b.v_mul_u32_u24(j, Imm(2 * kDsMlaTile * cpl), j);
    b.v_add_u32(lds_off, lds_off, j);
    b.v_lshrrev_b32(j, Imm(1), j);  // part_off: j 128 cpl
  }

  void registers() {
    last_tok = ra.sgpr(1, "p_last_token"), row_bytes = ra.sgpr(1, "p_row_bytes");
    b.s_mov_b32(row_bytes, Imm(k_.g.kv_mem_row_bytes));  // VOP3 (v_mul_*_u32) takes no literal on gfx9
    // v_addc_co_u32 reads VCC already: the kv base's high half must come from a VGPR.
    kv_hi = ra.vgpr(1, "p_kv_base_hi");
    b.v_mov_b32(kv_hi, k_.ptr(mla_decode_args::kv)[1]);
    b.s_sub_u32(last_tok, k_.kv_end(), Imm(1));
    // Per tile of the slot (S of them): its page ids, tokens and staged rows.
    // D register sets of staged rows: slot k lands in set k % D, so D slots are in flight.
    data.resize(size_t(D));
    if (k_.g.page_id_per_tile) sidx_addr = ra.sgpr(2, "p_page_id_addr", 2), cur_page = ra.sgpr(1, "p_page_id_current"),
                                   page_carried = ra.sgpr(1, "p_page_carried");
    for (int s = 0; s < S; ++s) {
      if (k_.g.page_id_per_tile) sidx.push_back(ra.sgpr(1, fmt::format("p_page_id{}", s)));
      else idx.push_back(ra.vgpr(1, fmt::format("p_page_id{}", s)));
      tok.push_back(ra.vgpr(1, fmt::format("p_token{}", s)));
      for (int d = 0; d < D; ++d) data[size_t(d)].push_back(ra.vgpr(4 * loads, fmt::format("p_tile_data{}_{}", d, s), 4));
    }
    // fp8_ds_mla: per register set and tile, the lane's latent tiles' scales; the conversion's
    // scratch (4 f32, 4 bf16 dwords out, the scale pair, 3 for the gfx942 byte fix-up and rounding).
    if (dsm) {
      dscale.resize(size_t(D));
      for (int d = 0; d < D; ++d)
        for (int s = 0; s < S; ++s) dscale[size_t(d)].push_back(ra.vgpr(cpl, fmt::format("p_tile_scales{}_{}", d, s)));
      cf = ra.vgpr(4, "p_dsm_f32", 2), cout = ra.vgpr(4, "p_dsm_bf16", 4), cs = ra.vgpr(2, "p_dsm_scale", 2);
      cx = ra.vgpr(3, "p_dsm_tmp");
      if (!b.target().has_cvt_pk_bf16) {
        k7fff = ra.sgpr(1, "p_k7fff"), kperm = ra.sgpr(1, "p_kperm"), exact = ra.sgpr(2, "p_dsm_exact", 2);
        b.s_mov_b32(k7fff, Imm(0x7fff));
        b.s_mov_b32(kperm, Imm(0x07060302));
      }
    }
    // Sparse: per register set and tile, the lane's token's score bias (0, or -inf when masked).
    if (k_.s.sparse) {
      bias.resize(size_t(D));
      for (int d = 0; d < D; ++d)
        for (int s = 0; s < S; ++s) bias[size_t(d)].push_back(ra.vgpr(1, fmt::format("p_bias{}_{}", d, s)));
      zero = ra.vgpr(1, "p_zero"), ninf = ra.vgpr(1, "p_neg_inf");  // v_cndmask reads VCC: no literal too
      b.v_mov_b32(zero, Imm(0));
      b.v_mov_b32(ninf, Imm(int64_t(kNegInf)));
    }
    addr = ra.vgpr(2, "p_addr");
    for (int s = 0; s < S; ++s) taddr.push_back(ra.vgpr(2, fmt::format("p_tile_addr{}", s), 2));
    tile = ra.sgpr(1, "p_tile"), slot = ra.sgpr(1, "p_slot");
    saved_exec0 = ra.sgpr(2, "p_saved_exec_index");
    first_lane = ra.vgpr(1, "p_first_lane_of_token");
    b.v_and_b32(first_lane, Imm(lanes_per_token - 1), k_.lane);
    saved_exec = ra.sgpr(2, "p_saved_exec"), tile_end = ra.sgpr(1, "p_tile_end");
    slot_index = ra.sgpr(1, "p_slot_index");
  }

  // Page id of this lane's token in tile `tile` (clamped to the unit's last token, so that
  // every lane computes a valid address). Only the first lane of each token, and only for
  // tokens of the unit, reads the id: the others get it from that lane by DPP. Pages of at
  // least a tile: one scalar load per page, by the unit's first tile in it (tile_address
  // carries the id on to the page's other tiles); a tile past the unit's end loads nothing
  // (its row loads are masked off, so the id it is given is never used).
  void load_index(int s) {
    b.s_lshl_b32(slot, tile, Imm(log2i(T)));
    b.s_add_u32(slot, slot, k_.kv_start());
    if (k_.g.page_id_per_tile) {
      b.v_add_u32(tok[s], slot, vt);
      b.v_min_u32(tok[s], last_tok, tok[s]);
      page_continues(slot);
      k_.load_page_id_unless_carried(sidx[size_t(s)], slot, page_carried, slot, sidx_addr);
      return;
    }
    b.v_add_u32(tok[s], slot, vt);
    b.v_cmp_gt_u32(vcc, k_.kv_end(), tok[s]);
    b.v_cmp_eq_u32(saved_exec0, Imm(0), first_lane);
    b.s_and_b64(vcc, vcc, saved_exec0);
    b.v_min_u32(tok[s], last_tok, tok[s]);
    b.v_lshrrev_b32(addr[0], Imm(log2i(k_.s.page_size)), tok[s]);
    b.v_add_u32(addr[0], k_.page_base(), addr[0]);
    b.v_lshlrev_b32(addr[0], Imm(2), addr[0]);
    b.s_and_saveexec_b64(saved_exec0, vcc);
    b.global_load_dword(idx[s], addr[0], k_.ptr(mla_decode_args::kv_indices));
    b.s_mov_exec(saved_exec0);
  }

  void page_continues(SReg start) { k_.page_continues(start, page_carried); }

  void share_index(int s) {
    if (lanes_per_token == 2) b.v_mov_b32_quad_perm(idx[s], idx[s], 0, 0, 2, 2);
    else if (lanes_per_token == 4) b.v_mov_b32_quad_perm(idx[s], idx[s], 0, 0, 0, 0);
    else throw std::logic_error("mla_decode: lanes per token must be 2 or 4");
  }

  // Token row = page_id * page_size + token % page_size; byte = row * 576 * kv bytes + part
  // offset (the LDS copy of a row is lds_row_pad bytes longer).
  // Addresses of every tile of a slot first, then the loads: the page ids were fetched a slot
  // earlier, and reading them all before any row load keeps the waitcnt pass from making a
  // tile's loads wait for the previous tile's.
  void tile_address(int s) {
    VReg a = taddr[s];
    if (k_.g.page_id_per_tile) {
      // The page's id: fetched by this tile, or carried from the previous tile of the page.
      b.s_lshl_b32(slot, tile, Imm(log2i(T)));
      b.s_add_u32(slot, slot, k_.kv_start());
      page_continues(slot);
      b.s_cmp_eq_u32(page_carried, Imm(0));
      b.s_cselect_b32(cur_page, sidx[size_t(s)], cur_page);
      b.v_mov_b32(a[0], cur_page);
      b.v_lshlrev_b32(a[0], Imm(log2i(k_.s.page_size)), a[0]);
    } else {
      share_index(s);
      if (k_.s.sparse) sparse_bias(s);
      b.v_lshlrev_b32(a[0], Imm(log2i(k_.s.page_size)), idx[s]);
    }
    if (k_.s.page_size > 1) {
      b.v_and_b32(a[1], Imm(k_.s.page_size - 1), tok[s]);
      b.v_add_u32(a[0], a[0], a[1]);
    }
    b.v_mul_hi_u32(a[1], row_bytes, a[0]);
    b.v_mul_lo_u32(a[0], row_bytes, a[0]);
    b.v_add_co_u32(a[0], vcc, a[0], part_off);
    b.v_addc_co_u32(a[1], vcc, a[1], Imm(0), vcc);
    b.v_add_co_u32(a[0], vcc, k_.ptr(mla_decode_args::kv)[0], a[0]);
    b.v_addc_co_u32(a[1], vcc, kv_hi, a[1], vcc);
  }

  // Sparse (DSA): an index is a cache slot; -1, or any index at or past kv_slots (unsigned), is
  // masked: its row is never loaded (zeros in LDS) and the consumers add the -inf bias the
  // producer writes beside the row to its score. The lane's bias goes with its tile's register set.
  void sparse_bias(int s) {
    b.v_cmp_gt_u32(vcc, k_.argf(mla_decode_args::kv_slots), idx[s]);
    b.v_cndmask_b32(bias[size_t(set)][s], ninf, zero, vcc);
  }

  // In the unit's last, partial tile the lanes past kv_end load nothing (no byte is read that
  // the plan does not need) and their LDS rows are written as zeros: the consumers mask those
  // tokens' scores, and a zero V keeps 0 * V finite.
  void load_data(int s) {
    auto row_loads = [&] {
      if (dsm) return ds_mla_loads(s);
      for (int q = 0; q < loads; ++q) b.global_load_dwordx4(data[size_t(set)][s].sub(4 * q, 4), taddr[s], uint32_t(16 * q));
    };
    b.s_lshl_b32(tile_end, tile, Imm(log2i(T)));
    b.s_add_u32(tile_end, tile_end, k_.kv_start());
    Label partial_tile = b.new_label("partial_tile"), loaded = b.new_label("loaded");
    if (k_.s.sparse) {  // lanes of the unit whose index is valid load; a tile where not all do is partial
      b.v_add_u32(addr[0], tile_end, vt);
      b.v_cmp_gt_u32(vcc, k_.kv_end(), addr[0]);
      b.v_cmp_eq_u32(saved_exec, Imm(0), bias[size_t(set)][s]);
      b.s_and_b64(vcc, vcc, saved_exec);
      b.emit("s_andn2_b64", {Operand::of(saved_exec)}, {Operand::of(exec), Operand::of(vcc)});
    } else {
      b.s_add_u32(tile_end, tile_end, Imm(T));
      b.s_cmp_gt_u32(tile_end, k_.kv_end());
    }
    b.s_cbranch_scc1(partial_tile);
    row_loads();
    b.s_branch(loaded);
    b.bind(partial_tile);
    for (int r = 0; r < data[size_t(set)][s].count; ++r) b.v_mov_b32(data[size_t(set)][s][r], Imm(0));
    for (int r = 0; dsm && r < cpl; ++r) b.v_mov_b32(dscale[size_t(set)][s][r], Imm(0));
    if (!k_.s.sparse) {
      b.s_sub_u32(tile_end, tile_end, Imm(T));  // tile start
      b.v_add_u32(addr[0], tile_end, vt);  // the unclamped token (tok[s] is the next slot's by now)
      b.v_cmp_gt_u32(vcc, k_.kv_end(), addr[0]);
    }
    b.s_and_saveexec_b64(saved_exec, vcc);
    row_loads();
    b.s_mov_exec(saved_exec);
    b.bind(loaded);
  }

  // fp8_ds_mla row loads: the lane's latent tiles (at taddr), their scales, its part of the rope.
  void ds_mla_loads(int s) {
    const VReg d = data[size_t(set)][s];
    for (int q = 0; q < 8 * cpl; ++q) b.global_load_dwordx4(d.sub(4 * q, 4), taddr[s], uint32_t(16 * q));
    auto at = [&](VReg rel) {
      b.v_add_co_u32(addr[0], vcc, taddr[s][0], rel);
      b.v_addc_co_u32(addr[1], vcc, taddr[s][1], Imm(0), vcc);
    };
    at(sc_rel);
    for (int k = 0; k < cpl; ++k) b.global_load_dword(dscale[size_t(set)][s].sub(k, 1), addr, uint32_t(4 * k));
    at(rope_rel);
    for (int q = 0; q < 2 * cpl; ++q) b.global_load_dwordx4(d.sub(32 * cpl + 4 * q, 4), addr, uint32_t(16 * q));
  }

  // gfx942 reads fp8 as e4m3fnuz, whose value of every e4m3fn byte is half the e4m3fn one
  // (exponent bias 8 against 7), except 0x80 (e4m3fn -0, e4m3fnuz NaN) and 0x7f / 0xff (e4m3fn
  // NaN, e4m3fnuz +-240): those bytes of x become 0x00 and 0x80 in x' (the scale is doubled).
  // Per byte, m = b & 0x7f never carries into the next byte: bit 7 of m + 0x7f is set unless
  // m = 0 (the sign is kept), bit 7 of m + 1 only for m = 0x7f (m + 1 = 0x80, e4m3fnuz NaN).
  VReg fnuz_bytes(VReg x) {
    const VReg m = cx.sub(0, 1), t = cx.sub(1, 1), out = cx.sub(2, 1);
    b.v_and_b32(m, Imm(0x7f7f7f7f), x);
    b.v_add_u32(out, Imm(0x7f7f7f7f), m);
    b.v_and_b32(out, out, x);
    b.v_and_b32(out, Imm(int64_t(0x80808080u)), out);  // the signs of nonzero magnitudes
    b.v_add_u32(t, Imm(0x01010101), m);
    b.v_lshrrev_b32(t, Imm(7), t);
    b.v_and_b32(t, Imm(0x01010101), t);  // 1 at NaN bytes
    b.v_add_u32(m, m, t);                // NaN bytes: 0x7f -> 0x80
    b.v_or_b32(out, out, m);
    return out;
  }

  // Whether every lane's scales of tile s make each product value x scale a bf16 number, so
  // that rounding to bf16 is a truncation (gfx942, which rounds with integer ops): an e4m3 value
  // has 4 significant bits, so a scale of at most 4 (mantissa bits 0-19 zero) gives at most 8,
  // and a scale of 0 or of magnitude >= 2^-111 keeps every nonzero product a normal f32
  // (>= 2^-9 x 2^-111). DeepSeek's power-of-two scales are such scales. Leaves scc = 1 when some
  // lane's are not (the rounding path).
  void ds_mla_exact_scales(int s) {
    b.s_mov_b64(exact, exec);
    for (int k = 0; k < cpl; ++k) {
      const VReg sc = dscale[size_t(set)][s].sub(k, 1), t = cx.sub(0, 1);
      b.v_and_b32(t, Imm(0x000fffff), sc);
      b.v_cmp_eq_u32(vcc, Imm(0), t);
      b.s_and_b64(exact, exact, vcc);
      b.v_and_b32(t, Imm(0x7fffffff), sc);
      b.v_add_u32(t, Imm(-1), t);  // 0 -> 0xffffffff
      b.v_cmp_lt_u32(vcc, Imm(0x07fffffe), t);  // |sc| - 1 >= 2^-111's bits - 1
      b.s_and_b64(exact, exact, vcc);
    }
    b.emit("s_andn2_b64", {Operand::of(exact)}, {Operand::of(exec), Operand::of(exact)});
  }

  // fp8_ds_mla rows to the bf16 rows the consumers read: latent value x its tile's scale, rounded
  // to bf16 (nearest even), 8 values per ds_write_b128; the rope as it is. On gfx942 a tile whose
  // scales make every product a bf16 number (ds_mla_exact_scales) takes the products' high halves.
  void ds_mla_write(int s) {
    if (b.target().has_cvt_pk_bf16) {
      ds_mla_latent(s, false);
    } else {
      Label round = b.new_label("dsmla_round"), done = b.new_label("dsmla_done");
      ds_mla_exact_scales(s);
      b.s_cbranch_scc1(round);
      ds_mla_latent(s, true);
      b.s_branch(done);
      b.bind(round);
      ds_mla_latent(s, false);
      b.bind(done);
    }
    const VReg d = data[size_t(set)][s];
    b.v_add_u32(addr[1], rope_lds_rel, addr[0]);
    for (int q = 0; q < 2 * cpl; ++q) b.ds_write_b128(addr[1], d.sub(32 * cpl + 4 * q, 4), uint32_t(s * T * E + 16 * q));
  }

  // The latent values of tile s: truncated to bf16 when `exact` (every product is a bf16 number).
  void ds_mla_latent(int s, bool exact) {
    const VReg d = data[size_t(set)][s];
    const bool fnuz = b.target().fp8 == Fp8Format::FNUZ;
    for (int k = 0; k < cpl; ++k) {
      const VReg sc = dscale[size_t(set)][s].sub(k, 1);
      if (fnuz) b.v_add_f32(cs[0], sc, sc);  // e4m3fnuz reads half the value
      else b.v_mov_b32(cs[0], sc);
      for (int g = 0; g < 16; ++g) {  // 8 values: two dwords of e4m3fn
        for (int w = 0; w < 2; ++w) {
          VReg x = d.sub(32 * k + 2 * g + w, 1);
          if (fnuz) x = fnuz_bytes(x);
          b.v_cvt_pk_f32_fp8(cf.sub(0, 2), x, 0);
          b.v_cvt_pk_f32_fp8(cf.sub(2, 2), x, 1);
          b.v_pk_mul_f32_bcast_lo(cf.sub(0, 2), cf.sub(0, 2), cs);
          b.v_pk_mul_f32_bcast_lo(cf.sub(2, 2), cf.sub(2, 2), cs);
          for (int h = 0; h < 2; ++h) {
            if (exact) b.v_perm_b32(cout[2 * w + h], cf[2 * h + 1], cf[2 * h], kperm);
            else emit_pack_bf16_rne(b, cout[2 * w + h], cf[2 * h], cf[2 * h + 1], cx[0], cx[1], k7fff, kperm);
          }
        }
        b.ds_write_b128(addr[0], cout, uint32_t(s * T * E + 2 * (kDsMlaTile * k + 8 * g)));
      }
    }
  }

  // Tile s of slot `slot_index` goes to LDS slot slot_index % 2, tile position s.
  void write_tile(int s) {
    if (k_.g.ring == 2) {
      b.s_and_b32(slot, slot_index, Imm(1));
      b.s_mul_i32(slot, slot, Imm(k_.slot_bytes()));
      b.v_add_u32(addr[0], slot, lds_off);
    } else {
      b.v_mov_b32(addr[0], lds_off);
    }
    if (dsm) ds_mla_write(s);
    for (int q = 0; q < (dsm ? 0 : loads); ++q)
      b.ds_write_b128(addr[0], data[size_t(set)][s].sub(4 * q, 4), uint32_t(s * T * E + 16 * q));
    if (k_.s.sparse) {  // the token's bias, by its first lane, in the row's LDS padding
      b.v_cmp_eq_u32(vcc, Imm(0), first_lane);
      b.s_and_saveexec_b64(saved_exec, vcc);
      b.ds_write_b32(addr[0], bias[size_t(set)][s], uint32_t(s * T * E + k_.g.kv_row_bytes));
      b.s_mov_exec(saved_exec);
    }
  }

  // The tiles of slot `slot_index` that exist (tile = slot * S + s < n_tiles) are written.
  void write_slot() {
    for (int s = 0; s < S; ++s) {
      b.s_lshl_b32(tile, slot_index, Imm(log2i(S)));
      if (s) b.s_add_u32(tile, tile, Imm(s));
      b.s_cmp_ge_u32(tile, k_.ntiles);
      k_.unless_scc1([&] { write_tile(s); });
    }
  }

  // slot_index = plus (prologue: no base) or iter + plus.
  void at_slot(const SReg* base, int plus) {
    if (!base) b.s_mov_b32(slot_index, Imm(plus));
    else b.s_add_u32(slot_index, *base, Imm(plus));
  }

  // Page ids, addresses and loads run for every tile of a slot, present or not: a tile past
  // the unit's end has no lane below kv_end, so its loads are masked off (they read nothing)
  // yet count in vmcnt like the others. Every path through an iteration then issues the
  // same loads, and the waitcnt pass can leave a whole slot in flight.
  template <class F>
  void all_tiles(F&& body) {
    for (int s = 0; s < S; ++s) {
      b.s_lshl_b32(tile, slot_index, Imm(log2i(S)));
      if (s) b.s_add_u32(tile, tile, Imm(s));
      body(s);
    }
  }

  void page_ids(const SReg* base, int plus) {
    at_slot(base, plus);
    all_tiles([&](int s) { load_index(s); });
  }

  // A slot's addresses (from page ids fetched a slot earlier), then the next slot's page ids,
  // then this slot's row loads into `set`: waiting for those page ids later does not wait
  // for these rows (vmcnt counts in issue order).
  void fetch(const SReg* base, int plus) {
    at_slot(base, plus);
    all_tiles([&](int s) { tile_address(s); });
    page_ids(base, plus + 1);
    at_slot(base, plus);
    all_tiles([&](int s) { load_data(s); });
  }

  // Slots 0..D-1 loaded, slot 0 written to LDS, slot D's loads and slot D+1's page ids in
  // flight; then the barriers that pair with the consumers' Q setup.
  void prologue() {
    page_ids(nullptr, 0);
    for (int q = 0; q < D; ++q) {
      set = q;
      fetch(nullptr, q);
    }
    set = 0;
    at_slot(nullptr, 0);
    write_slot();
    fetch(nullptr, D);
    b.s_barrier();
    if (S > 1 && !k_.g.q_in_lds) b.s_barrier();  // the consumers move Q from LDS slot 1 into AGPRs in between
    if (k_.g.q_split) b.s_barrier();             // the consumers split Q into its fp8 images in between
  }

  // Iteration i: write slot i+1, load slot i+1+D into the set it frees (and fetch page ids
  // of slot i+2+D), then hand over. With a one-slot ring, the write waits for a first
  // barrier (the consumers have read slot i). Unrolled D times, so that the register set is static.
  void steady_loop() {
    b.s_mov_b32(k_.iter, Imm(0));
    Label loop = b.new_label("producer_loop"), done = b.new_label("producer_done");
    b.bind(loop);
    for (int c = 0; c < D; ++c) {
      set = (c + 1) % D;
      if (k_.g.ring == 1) b.s_barrier();  // one slot: the consumers are done reading slot i
      at_slot(&k_.iter, 1);
      write_slot();
      fetch(&k_.iter, 1 + D);
      b.s_barrier();
      b.s_add_u32(k_.iter, k_.iter, Imm(1));
      b.s_cmp_lt_u32(k_.iter, k_.nslots);
      if (c + 1 < D) b.s_cbranch_scc0(done);
    }
    b.s_cbranch_scc1(loop);
    b.bind(done);
    k_.end_unit();
  }

  void release() {
    for (VReg r : {vt, part_off, lds_off, addr, kv_hi, first_lane}) ra.release(r);
    for (int s = 0; s < S; ++s)
      for (VReg r : {tok[s], taddr[s]}) ra.release(r);
    for (VReg r : idx) ra.release(r);
    for (auto& d : data)
      for (VReg r : d) ra.release(r);
    for (auto& d : bias)
      for (VReg r : d) ra.release(r);
    for (auto& d : dscale)
      for (VReg r : d) ra.release(r);
    if (dsm) {
      for (VReg r : {cf, cout, cs, cx, sc_rel, rope_rel, rope_lds_rel}) ra.release(r);
      if (!b.target().has_cvt_pk_bf16) ra.release(k7fff), ra.release(kperm), ra.release(exact);
    }
    if (k_.s.sparse) ra.release(zero), ra.release(ninf);
    for (SReg r : {last_tok, row_bytes, tile, slot, saved_exec, tile_end, saved_exec0, slot_index}) ra.release(r);
    for (SReg r : sidx) ra.release(r);
    if (k_.g.page_id_per_tile) ra.release(sidx_addr), ra.release(cur_page), ra.release(page_carried);
  }

  Kernel& k_;
  Builder& b;
  RegAllocator& ra;
  const int T, S, lanes_per_token, E, chunk;
  const bool dsm;  // fp8_ds_mla rows (KernelSpec::kv_ds_mla)
  const int cpl, loads, D;  // cpl: fp8_ds_mla scale tiles per lane
  VReg vt, part_off, lds_off, kv_hi, addr, first_lane;
  SReg last_tok, row_bytes, tile, slot, saved_exec0, saved_exec, tile_end, slot_index;
  std::vector<VReg> idx, tok, taddr;      // per tile of a slot
  std::vector<SReg> sidx;                 // per tile: its page id (page_id_per_tile)
  SReg sidx_addr, cur_page, page_carried;
  std::vector<std::vector<VReg>> data;    // [register set][tile]: staged rows
  std::vector<std::vector<VReg>> bias;    // sparse: [register set][tile]: the lane's token's score bias
  VReg zero, ninf;                        // sparse: 0, -inf
  std::vector<std::vector<VReg>> dscale;  // fp8_ds_mla: [register set][tile]: the lane's tiles' scales
  VReg cf, cout, cs, cx, sc_rel, rope_rel, rope_lds_rel;  // fp8_ds_mla: conversion scratch, lane offsets
  SReg k7fff, kperm;                      // fp8_ds_mla on gfx942: bf16 rounding constants
  SReg exact;                             // fp8_ds_mla on gfx942: lanes whose products are bf16 numbers
  int set = 0;                            // the register set the next load_data / write_tile use
};

}  // namespace

void emit_producer(Kernel& k) {
  if (k.g.lds_dma) emit_producer_dma(k);
  else Producer(k).emit();
}

}  // namespace mla::gen::decode
