// Tests of emulator/mfma: every modelled MFMA on every target where it exists against a plain
// double matrix product built from the lane registers with the layout written out here, the
// modifier checks, the instruction table, and the golden mfma_* vectors.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "emulator/mfma.h"
#include "emulator/npy.h"
#include "emulator/numerics.h"
#include "mla/build_paths.h"

using namespace mla;
using emu::Gfx;
using emu::MfmaElem;
using emu::MfmaInfo;
using emu::MfmaMods;

namespace {

float fbits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// ---- The operand layout, written from the ISA-level description (golden README notes,
// ROCm matrix instruction calculator), in the forward direction: where does element (row, k)
// of A (or (k, col) of B) live, and which lane/register holds D[i][j].
struct Slot {
  int lane, index;  // index = element number within the lane's operand, low bits first
};
// dim = M for A, N for B; idx = row of A / column of B.
Slot ab_slot(int dim, int K, int idx, int k) {
  const int groups = 64 / dim;             // lane groups of `dim` lanes
  const int per_lane = K / groups;         // elements of K per lane
  if (per_lane <= 16) return {idx + dim * (k / per_lane), k % per_lane};
  // gfx950 K=128 (16x16) / K=64 (32x32) with 8-bit inputs: 16-element chunks of K go to the
  // lane groups in turn: 16x16x128: k = 16(l/16) + 64(p/16) + p%16; 32x32x64: 16(l/32) + 32(p/16) + p%16.
  return {idx + dim * ((k / 16) % groups), 16 * (k / (16 * groups)) + k % 16};
}
struct DSlot {
  int lane, reg;
};
DSlot d_slot(int M, int N, int i, int j) {
  if (M == 16 && N == 16) return {j + 16 * (i / 4), i % 4};  // D[i=4(l/16)+r][j=l%16]
  if (M == 32 && N == 32) return {j + 32 * ((i / 4) % 2), 4 * (i / 8) + i % 4};  // i=8(r/4)+4(l/32)+r%4
  throw std::logic_error("unexpected MFMA shape");
}

int elem_bits(MfmaElem e) { return (e == MfmaElem::bf16 || e == MfmaElem::f16) ? 16 : 8; }

uint32_t get_elem(const std::vector<uint32_t>& regs, int nregs, Slot s, int ebits) {
  const int bit = s.index * ebits;
  return (regs[size_t(s.lane) * nregs + bit / 32] >> (bit % 32)) & ((1u << ebits) - 1);
}
void put_elem(std::vector<uint32_t>& regs, int nregs, Slot s, int ebits, uint32_t v) {
  const int bit = s.index * ebits;
  uint32_t& w = regs[size_t(s.lane) * nregs + bit / 32];
  const uint32_t mask = ((1u << ebits) - 1) << (bit % 32);
  w = (w & ~mask) | ((v << (bit % 32)) & mask);
}

num::Fp8Fmt family(Gfx g) { return g == Gfx::gfx942 ? num::Fp8Fmt::FNUZ : num::Fp8Fmt::OCP; }

double decode(MfmaElem e, uint32_t raw, Gfx g) {
  switch (e) {
    case MfmaElem::fp8: return num::fp8_to_f32(uint8_t(raw), family(g));
    case MfmaElem::bf8: return num::bf8_to_f32(uint8_t(raw), family(g));
    case MfmaElem::bf16: return num::bf16_to_f32(uint16_t(raw));
    case MfmaElem::f16: return num::f16_to_f32(uint16_t(raw));
    case MfmaElem::i8: return double(int8_t(raw));
    default: throw std::logic_error("decode");
  }
}

MfmaElem format_elem(int sel) { return sel == 0 ? MfmaElem::fp8 : MfmaElem::bf8; }

// Reference D = A*B + C from the registers, with |a||b| + |c| magnitudes for the tolerance.
struct Reference {
  std::vector<double> d, mag;  // [M][N]
};

Reference reference(const MfmaInfo& info, Gfx g, const MfmaMods& mods, const std::vector<uint32_t>& a,
                    const std::vector<uint32_t>& b, const std::vector<uint32_t>& c,
                    const std::vector<uint32_t>* sa, const std::vector<uint32_t>* sb) {
  const int M = info.m, N = info.n, K = info.k;
  MfmaElem ae = info.a_elem, be = info.b_elem;
  if (ae == MfmaElem::f8f6f4) {
    ae = format_elem(mods.cbsz);
    be = format_elem(mods.blgp);
  }
  const int a_byte = (mods.op_sel & 1) | ((mods.op_sel_hi & 1) << 1);
  const int b_byte = ((mods.op_sel >> 1) & 1) | (((mods.op_sel_hi >> 1) & 1) << 1);
  auto scale = [](const std::vector<uint32_t>& s, int lane, int byte) {
    const int e = int((s[lane] >> (8 * byte)) & 0xff);
    return e == 255 ? NAN : std::pow(2.0, e - 127);
  };
  Reference r;
  r.d.resize(size_t(M) * N);
  r.mag.resize(size_t(M) * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double sum = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        double x = decode(ae, get_elem(a, info.a_regs, ab_slot(M, K, i, k), elem_bits(ae)), g);
        double y = decode(be, get_elem(b, info.b_regs, ab_slot(N, K, j, k), elem_bits(be)), g);
        if (info.scaled) {
          // Scale of row i / column j for K-block k/32 is in lane i + M*(k/32) / j + N*(k/32).
          x *= scale(*sa, i + M * (k / 32), a_byte);
          y *= scale(*sb, j + N * (k / 32), b_byte);
        }
        sum += x * y;
        mag += std::fabs(x * y);
      }
      const DSlot s = d_slot(M, N, i, j);
      const uint32_t cw = c[size_t(s.lane) * info.cd_regs + s.reg];
      const double cv = info.int_acc ? double(int32_t(cw)) : double(fbits(cw));
      r.d[size_t(i) * N + j] = sum + cv;
      r.mag[size_t(i) * N + j] = mag + std::fabs(cv);
    }
  return r;
}

// Compares D registers with expected values: NaN positions and infinities exactly, finite values
// within 1e-5 of the magnitude of the terms (README tolerance). Returns the number of mismatches.
int compare(const MfmaInfo& info, const std::vector<uint32_t>& got, const std::vector<double>& want,
            const std::vector<double>& mag, const std::string& what) {
  int bad = 0;
  for (int i = 0; i < info.m; ++i)
    for (int j = 0; j < info.n; ++j) {
      const DSlot s = d_slot(info.m, info.n, i, j);
      const uint32_t gw = got[size_t(s.lane) * info.cd_regs + s.reg];
      const double w = want[size_t(i) * info.n + j], m = mag[size_t(i) * info.n + j];
      bool ok;
      double gv;
      if (info.int_acc) {
        gv = double(int32_t(gw));
        ok = int32_t(gw) == int32_t(int64_t(w));
      } else {
        gv = fbits(gw);
        if (std::isnan(w)) ok = std::isnan(gv);
        else if (std::isinf(w) || std::isinf(float(w))) ok = gv == double(float(w));
        else ok = std::isfinite(gv) && std::fabs(gv - w) <= 1e-5 * m + 1e-37;
      }
      if (!ok && ++bad <= 5)
        UNSCOPED_INFO(fmt::format("{}: D[{}][{}] (lane {} reg {}) got {} (0x{:08x}) want {} (|terms| {})",
                                  what, i, j, s.lane, s.reg, gv, gw, w, m));
    }
  return bad;
}

// Random finite code of an element type, signs mixed, never a NaN/inf code.
uint32_t random_code(MfmaElem e, Gfx g, std::mt19937& rng) {
  for (;;) {
    switch (e) {
      case MfmaElem::i8: return rng() & 0xff;
      case MfmaElem::bf16: {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        return num::f32_to_bf16_rne(nd(rng));
      }
      case MfmaElem::f16: {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        return num::f32_to_f16_rne(nd(rng));
      }
      default: {
        const uint32_t v = rng() & 0xff;
        if (std::isfinite(decode(e, v, g))) return v;
      }
    }
  }
}

std::vector<Gfx> targets_of(const MfmaInfo& info) {
  std::vector<Gfx> t;
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950})
    if (emu::mfma_on_target(info, g)) t.push_back(g);
  return t;
}

// ---- Golden vectors.
std::string golden(const std::string& file) { return std::string(build::kGoldenDir) + "/" + file; }

std::vector<uint32_t> load_u32(const std::string& file, size_t cols) {
  npy::Array a = npy::load(golden(file));
  if (a.dtype != "<u4" || a.shape.size() != 2 || a.shape[0] != 64 || a.shape[1] != cols)
    throw std::runtime_error(fmt::format("{}: expected <u4 [64, {}]", file, cols));
  return std::vector<uint32_t>(a.as<uint32_t>(), a.as<uint32_t>() + a.count());
}

}  // namespace

// -------------------------------------------------------------------------------------------
TEST_CASE("mfma: instruction table", "[mfma]") {
  for (const MfmaInfo& info : emu::all_mfmas()) {
    INFO(info.name);
    CHECK(info.macs == uint64_t(info.m) * info.n * info.k * info.blocks);
    CHECK(info.xdl);
    CHECK(info.cd_regs * 64 == info.m * info.n);
    const int ebits = info.a_elem == MfmaElem::f8f6f4 ? 8 : elem_bits(info.a_elem);
    CHECK(info.a_regs * 32 * 64 == info.m * info.k * ebits);
    CHECK(info.b_regs * 32 * 64 == info.n * info.k * ebits);
    CHECK(!targets_of(info).empty());
  }
  auto passes = [](const char* n, Gfx g) {
    const MfmaInfo* i = emu::find_mfma(n, g);
    REQUIRE(i);
    return i->passes;
  };
  for (Gfx g : {Gfx::gfx942, Gfx::gfx950}) {
    CHECK(passes("v_mfma_f32_16x16x32_fp8_fp8", g) == 4);
    CHECK(passes("v_mfma_f32_32x32x16_bf8_fp8", g) == 8);
    CHECK(passes("v_mfma_f32_16x16x16_bf16", g) == 4);
    CHECK(passes("v_mfma_f32_32x32x8_bf16", g) == 8);
  }
  CHECK(passes("v_mfma_f32_16x16x32_bf16", Gfx::gfx950) == 4);
  CHECK(passes("v_mfma_f32_32x32x16_bf16", Gfx::gfx950) == 8);
  CHECK(passes("v_mfma_f32_16x16x128_f8f6f4", Gfx::gfx950) == 8);
  CHECK(passes("v_mfma_f32_32x32x64_f8f6f4", Gfx::gfx950) == 16);
  CHECK(passes("v_mfma_scale_f32_16x16x128_f8f6f4", Gfx::gfx950) == 8);
  CHECK(passes("v_mfma_scale_f32_32x32x64_f8f6f4", Gfx::gfx950) == 16);
  const MfmaInfo* f = emu::find_mfma("v_mfma_f32_16x16x128_f8f6f4", Gfx::gfx950);
  CHECK(emu::mfma_passes(*f, MfmaMods{.cbsz = 4, .blgp = 4}) == 4);  // fp4 x fp4
  CHECK(emu::mfma_passes(*f, MfmaMods{.cbsz = 0, .blgp = 4}) == 8);  // fp8 x fp4
  // gfx950-only instructions do not exist on gfx942; unknown names are not found.
  CHECK(emu::find_mfma("v_mfma_f32_16x16x128_f8f6f4", Gfx::gfx942) == nullptr);
  CHECK(emu::find_mfma("v_mfma_f32_16x16x32_bf16", Gfx::gfx942) == nullptr);
  CHECK(emu::find_mfma("v_mfma_scale_f32_32x32x64_f8f6f4", Gfx::gfx942) == nullptr);
  CHECK(emu::find_mfma("v_mfma_f32_16x16x32_fp8_fp8_e64", Gfx::gfx942) == nullptr);
  CHECK(emu::find_mfma("v_mfma_f64_16x16x4_f64", Gfx::gfx950) == nullptr);
}

TEST_CASE("mfma: every MFMA on every target matches a double matrix product", "[mfma]") {
  int runs = 0;
  for (const MfmaInfo& info : emu::all_mfmas())
    for (Gfx g : targets_of(info)) {
      std::vector<MfmaMods> variants;
      if (info.a_elem == MfmaElem::f8f6f4) {
        for (int cb : {0, 1})
          for (int bl : {0, 1}) {
            MfmaMods m{.cbsz = cb, .blgp = bl};
            if (info.scaled) {  // exercise every scale byte for A and for B
              m.op_sel = (cb ? 1 : 0) | (bl ? 0 : 2);
              m.op_sel_hi = (cb ^ bl) ? 3 : 0;
            }
            variants.push_back(m);
          }
      } else {
        variants.push_back(MfmaMods{});
      }
      for (const MfmaMods& mods : variants) {
        std::mt19937 rng(uint32_t(std::hash<std::string_view>{}(info.name)) + uint32_t(g) * 7919u +
                         uint32_t(mods.cbsz * 2 + mods.blgp));
        MfmaElem ae = info.a_elem, be = info.b_elem;
        if (ae == MfmaElem::f8f6f4) {
          ae = format_elem(mods.cbsz);
          be = format_elem(mods.blgp);
        }
        std::vector<uint32_t> a(64 * size_t(info.a_regs)), b(64 * size_t(info.b_regs)),
            c(64 * size_t(info.cd_regs)), d(c.size(), 0xdeadbeefu), sa(64), sb(64);
        for (int i = 0; i < info.m; ++i)
          for (int k = 0; k < info.k; ++k)
            put_elem(a, info.a_regs, ab_slot(info.m, info.k, i, k), elem_bits(ae), random_code(ae, g, rng));
        for (int j = 0; j < info.n; ++j)
          for (int k = 0; k < info.k; ++k)
            put_elem(b, info.b_regs, ab_slot(info.n, info.k, j, k), elem_bits(be), random_code(be, g, rng));
        std::normal_distribution<float> nd(0.0f, 4.0f);
        for (auto& w : c) w = info.int_acc ? uint32_t(int32_t(rng() % 20001) - 10000) : bits(nd(rng));
        for (int l = 0; l < 64; ++l) {  // four different E8M0 bytes per scale VGPR, 2^-7 .. 2^7
          sa[l] = sb[l] = 0;
          for (int byte = 0; byte < 4; ++byte) {
            sa[l] |= uint32_t(120 + rng() % 15) << (8 * byte);
            sb[l] |= uint32_t(120 + rng() % 15) << (8 * byte);
          }
        }
        emu::run_mfma(info, g, mods, a.data(), b.data(), c.data(), d.data(), sa.data(), sb.data());
        const Reference ref = reference(info, g, mods, a, b, c, &sa, &sb);
        const std::string what = fmt::format("{} on {} cbsz {} blgp {} op_sel {} op_sel_hi {}", info.name,
                                             emu::gfx_name(g), mods.cbsz, mods.blgp, mods.op_sel, mods.op_sel_hi);
        INFO(what);
        CHECK(compare(info, d, ref.d, ref.mag, what) == 0);
        // In-place accumulation (d aliases c) gives the same result.
        std::vector<uint32_t> acc = c;
        emu::run_mfma(info, g, mods, a.data(), b.data(), acc.data(), acc.data(), sa.data(), sb.data());
        CHECK(acc == d);
        ++runs;
      }
    }
  // 14 instructions on both targets + 10 on gfx950 only, f8f6f4 ones with 4 format pairs.
  CHECK(runs == 14 * 2 + 6 + 4 * 4);
}

TEST_CASE("mfma: a single non-zero element lands where the layout says", "[mfma]") {
  // One A element and one B element set to 1.0 (all else 0, C = 0): exactly one D element is 1.
  for (const MfmaInfo& info : emu::all_mfmas()) {
    if (info.scaled || info.int_acc) continue;
    for (Gfx g : targets_of(info)) {
      const MfmaElem ae = info.a_elem == MfmaElem::f8f6f4 ? MfmaElem::fp8 : info.a_elem;
      const MfmaElem be = info.b_elem == MfmaElem::f8f6f4 ? MfmaElem::fp8 : info.b_elem;
      auto one_of = [&](MfmaElem e) -> uint32_t {
        switch (e) {
          case MfmaElem::bf16: return 0x3f80u;
          case MfmaElem::f16: return 0x3c00u;
          case MfmaElem::bf8: return g == Gfx::gfx942 ? 0x40u : 0x3cu;  // bias 16 / 15
          default: return g == Gfx::gfx942 ? 0x40u : 0x38u;             // e4m3: bias 8 / 7
        }
      };
      const uint32_t one_a = one_of(ae), one_b = one_of(be);
      REQUIRE(decode(ae, one_a, g) == 1.0);
      REQUIRE(decode(be, one_b, g) == 1.0);
      for (auto [i, j, k] : {std::tuple{0, 0, 0}, std::tuple{info.m - 1, 1, info.k - 1},
                             std::tuple{5, info.n - 2, info.k / 2 + 3}, std::tuple{info.m / 2 + 1, 3, 17 % info.k}}) {
        std::vector<uint32_t> a(64 * size_t(info.a_regs)), b(64 * size_t(info.b_regs)), c(64 * size_t(info.cd_regs)),
            d(c.size());
        put_elem(a, info.a_regs, ab_slot(info.m, info.k, i, k), elem_bits(ae), one_a);
        put_elem(b, info.b_regs, ab_slot(info.n, info.k, j, k), elem_bits(be), one_b);
        emu::run_mfma(info, g, MfmaMods{}, a.data(), b.data(), c.data(), d.data());
        const DSlot s = d_slot(info.m, info.n, i, j);
        INFO(fmt::format("{} on {}: A[{}][{}] * B[{}][{}]", info.name, emu::gfx_name(g), i, k, k, j));
        for (int l = 0; l < 64; ++l)
          for (int r = 0; r < info.cd_regs; ++r)
            CHECK(fbits(d[size_t(l) * info.cd_regs + r]) == ((l == s.lane && r == s.reg) ? 1.0f : 0.0f));
      }
    }
  }
}

TEST_CASE("mfma: unsupported modifiers are errors naming the instruction", "[mfma]") {
  std::vector<uint32_t> a(64 * 8), b(64 * 8), c(64 * 16), d(64 * 16), s(64, 0x7f7f7f7fu);
  auto run = [&](const char* name, MfmaMods m, bool scales = true) {
    const MfmaInfo* info = emu::find_mfma(name, Gfx::gfx950);
    REQUIRE(info);
    emu::run_mfma(*info, Gfx::gfx950, m, a.data(), b.data(), c.data(), d.data(), scales ? s.data() : nullptr,
                  scales ? s.data() : nullptr);
  };
  CHECK_THROWS_WITH(run("v_mfma_f32_16x16x128_f8f6f4", MfmaMods{.cbsz = 4}),
                    Catch::Contains("v_mfma_f32_16x16x128_f8f6f4") && Catch::Contains("cbsz:4") &&
                        Catch::Contains("fp4"));
  CHECK_THROWS_WITH(run("v_mfma_scale_f32_32x32x64_f8f6f4", MfmaMods{.blgp = 2}),
                    Catch::Contains("blgp:2") && Catch::Contains("fp6"));
  CHECK_THROWS_WITH(run("v_mfma_f32_16x16x32_fp8_fp8", MfmaMods{.cbsz = 1}),
                    Catch::Contains("v_mfma_f32_16x16x32_fp8_fp8") && Catch::Contains("cbsz:1"));
  CHECK_THROWS_WITH(run("v_mfma_f32_32x32x16_bf16", MfmaMods{.abid = 1}), Catch::Contains("abid:1"));
  CHECK_THROWS_WITH(run("v_mfma_f32_16x16x32_bf16", MfmaMods{.blgp = 3}), Catch::Contains("blgp:3"));
  CHECK_THROWS_WITH(run("v_mfma_f32_16x16x128_f8f6f4", MfmaMods{.op_sel = 1}), Catch::Contains("op_sel:1"));
  CHECK_THROWS_WITH(run("v_mfma_scale_f32_16x16x128_f8f6f4", MfmaMods{}, false),
                    Catch::Contains("v_mfma_scale_f32_16x16x128_f8f6f4") && Catch::Contains("scale"));
  const MfmaInfo* only950 = emu::find_mfma("v_mfma_f32_16x16x32_bf16", Gfx::gfx950);
  CHECK_THROWS_WITH(emu::run_mfma(*only950, Gfx::gfx942, MfmaMods{}, a.data(), b.data(), c.data(), d.data()),
                    Catch::Contains("gfx942"));
}

TEST_CASE("mfma: golden mfma_* vectors", "[mfma][golden]") {
  std::ifstream in(golden("cases.json"));
  REQUIRE(in);
  const nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  int checked = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    if (name.rfind("mfma", 0) != 0) continue;
    const Gfx g = c["target"].get<std::string>() == "gfx942" ? Gfx::gfx942 : Gfx::gfx950;
    const MfmaInfo* info = emu::find_mfma(c["instruction"].get<std::string>(), g);
    INFO(name);
    REQUIRE(info);
    const auto a = load_u32(name + ".in0.npy", info->a_regs), b = load_u32(name + ".in1.npy", info->b_regs),
               cc = load_u32(name + ".in2.npy", info->cd_regs);
    std::vector<uint32_t> sa, sb;
    if (info->scaled) {  // in3: reg 0 = scale A, reg 1 = scale B (E8M0 in byte 0, op_sel = 0)
      const auto s = load_u32(name + ".in3.npy", 2);
      for (int l = 0; l < 64; ++l) {
        sa.push_back(s[2 * l]);
        sb.push_back(s[2 * l + 1]);
      }
    }
    // Reference output. rocjitsu (out.npy) where it produced one. The unscaled f8f6f4 cases were
    // NOT PRODUCED by rocjitsu: 16x16x128 uses tinygrad's output (checked against NumPy); the
    // 32x32x64 tinygrad output uses tinygrad's known-wrong 32x32 C/D layout, so it is compared
    // with the unit-scale rocjitsu case, which has identical inputs (same in0..in2 bytes).
    std::string ref_file = name + ".out.npy";
    if (c["agreement"] == "NOT PRODUCED") {
      if (info->m == 16) {
        ref_file = name + ".out_tinygrad.npy";
      } else {
        std::string twin = name;
        twin.replace(0, std::string("mfma_f32_").size(), "mfma_scale_f32_");
        twin.replace(twin.find("_special") != std::string::npos ? twin.find("_special") : twin.find("_normal"), 0,
                     "_unitscale");
        for (int i = 0; i < 3; ++i)
          REQUIRE(load_u32(fmt::format("{}.in{}.npy", twin, i), i == 2 ? info->cd_regs : info->a_regs) ==
                  load_u32(fmt::format("{}.in{}.npy", name, i), i == 2 ? info->cd_regs : info->a_regs));
        ref_file = twin + ".out.npy";
      }
    }
    const auto want = load_u32(ref_file, info->cd_regs);
    std::vector<uint32_t> d(want.size());
    emu::run_mfma(*info, g, MfmaMods{}, a.data(), b.data(), cc.data(), d.data(), sa.empty() ? nullptr : sa.data(),
                  sb.empty() ? nullptr : sb.data());
    // Tolerance magnitudes from the test's own double model of the same registers.
    const Reference ref = reference(*info, g, MfmaMods{}, a, b, cc, &sa, &sb);
    std::vector<double> want_d(size_t(info->m) * info->n);
    for (int i = 0; i < info->m; ++i)
      for (int j = 0; j < info->n; ++j) {
        const DSlot s = d_slot(info->m, info->n, i, j);
        want_d[size_t(i) * info->n + j] = fbits(want[size_t(s.lane) * info->cd_regs + s.reg]);
      }
    INFO("reference " << ref_file);
    CHECK(compare(*info, d, want_d, ref.mag, name + " vs " + ref_file) == 0);
    CHECK(compare(*info, d, ref.d, ref.mag, name + " vs test model") == 0);
    ++checked;
  }
  CHECK(checked == 22);
}
