// The pipeline kernels of the catalog, run on the emulator under its strict checks and
// compared with values computed here, independently of both generator and emulator.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "catalog/compile.h"
#include "codeobj/assemble.h"
#include "config/config.h"
#include "emulator/device.h"
#include "kernels/mla_reduce.h"
#include "abi/mla_abi.h"
#include "mla/build_paths.h"

using namespace mla;
namespace fs = std::filesystem;

namespace {

struct Built {
  std::shared_ptr<const emu::CodeObject> co;
  std::string name;
  unsigned workgroup_size = 64;  // the kernel's max_flat_workgroup_size
};

// Builds one pipeline kernel for `arch` into a temp file and loads it.
Built build_kernel(gen::KernelKind kind, gen::Arch arch, int heads = 0, int qseqlen = 1, bool return_lse = false) {
  gen::KernelSpec s;
  s.kind = kind;
  s.arch = arch;
  s.heads = heads;
  s.qseqlen = qseqlen;
  s.return_lse = return_lse;
  gen::CompiledKernel k = gen::compile_kernel(s);
  fs::path dir = fs::temp_directory_path() / fmt::format("mla-it-{}", getpid());
  fs::create_directories(dir);
  std::string co = (dir / fmt::format("{}_{}.co", s.name(), gen::arch_name(arch))).string();
  gen::assemble_code_object(k.asm_text, *k.program.target, co);
  return {emu::CodeObject::load_file(co), s.name(), k.program.abi.max_workgroup_size};
}

emu::Gfx gfx_of(gen::Arch a) { return a == gen::Arch::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950; }

// e4m3 decode written from the format definitions: FNUZ (gfx942) has bias 8, no infinities,
// no negative zero, 0x80 = NaN; OCP e4m3fn (gfx950) has bias 7, 0x7f/0xff = NaN.
double e4m3_value(uint8_t b, bool fnuz) {
  int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
  if (fnuz && b == 0x80) return NAN;
  if (!fnuz && (b & 0x7f) == 0x7f) return NAN;
  int bias = fnuz ? 8 : 7;
  double mag = exp == 0 ? std::ldexp(man / 8.0, 1 - bias) : std::ldexp(1.0 + man / 8.0, exp - bias);
  return sign ? -mag : mag;
}

// bf16 of an f32, rounded to nearest even (written here from the format, not the kernels').
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
double bf16_value(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return double(f);
}

const gen::Arch kArchs[] = {gen::Arch::gfx942, gen::Arch::gfx950};

}  // namespace

TEST_CASE("integration: vector copy copies exactly n dwords, grid-stride, and writes nothing else") {
  for (gen::Arch arch : kArchs) {
    INFO(gen::arch_name(arch));
    Built k = build_kernel(gen::KernelKind::VectorCopy, arch);
    emu::Device dev(gfx_of(arch));
    const uint32_t n = 3 * 256 * 2 + 77;  // 7 tiles for 3 workgroups, with a ragged tail
    std::mt19937 rng(1234);
    std::vector<uint32_t> in(n);
    for (auto& v : in) v = rng();
    uint64_t d_in = dev.alloc(n * 4, 256, "in");
    uint64_t d_out = dev.alloc(n * 4 + 64, 256, "out", 0xcd);  // poisoned, with slack past n
    dev.write(d_in, in.data(), n * 4);
    emu::KernargBuilder ka;
    ka.put<uint64_t>(0, d_out).put<uint64_t>(8, d_in).put<uint32_t>(16, n).put<uint32_t>(20, 3);
    emu::Counters c = dev.dispatch(k.co, k.name, {3, 1, 1}, {256, 1, 1}, ka.bytes);
    auto out = dev.read_vector<uint32_t>(d_out, n + 16);
    for (uint32_t i = 0; i < n; ++i) REQUIRE(out[i] == in[i]);
    for (uint32_t i = n; i < n + 16; ++i) CHECK(out[i] == 0xcdcdcdcdu);
    CHECK(c.total.global_write_bytes == uint64_t(n) * 4);
  }
}

TEST_CASE("integration: fp8 dequant decodes every byte value in the target's fp8 format") {
  for (gen::Arch arch : kArchs) {
    INFO(gen::arch_name(arch));
    Built k = build_kernel(gen::KernelKind::Fp8Dequant, arch);
    emu::Device dev(gfx_of(arch));
    const uint32_t n = 2048;  // every byte value 8 times, shuffled
    std::vector<uint8_t> in(n);
    for (uint32_t i = 0; i < n; ++i) in[i] = uint8_t(i);
    std::shuffle(in.begin(), in.end(), std::mt19937(7));
    const float scale = 0.375f;
    uint64_t d_in = dev.alloc(n, 256, "in");
    uint64_t d_out = dev.alloc(n * 4, 256, "out", 0xff);
    dev.write(d_in, in.data(), n);
    emu::KernargBuilder ka;
    float sc = scale;
    ka.put<uint64_t>(0, d_out).put<uint64_t>(8, d_in).put<uint32_t>(16, n).put<float>(20, sc);
    dev.dispatch(k.co, k.name, {n / 1024, 1, 1}, {256, 1, 1}, ka.bytes);
    auto out = dev.read_vector<float>(d_out, n);
    bool fnuz = arch == gen::Arch::gfx942;
    for (uint32_t i = 0; i < n; ++i) {
      double want = e4m3_value(in[i], fnuz) * scale;
      INFO("byte 0x" << std::hex << int(in[i]));
      if (std::isnan(want))
        CHECK(std::isnan(out[i]));
      else
        CHECK(out[i] == float(want));  // exact: fp8 times a power-of-two-ish scale fits f32
    }
  }
}

TEST_CASE("integration: one MFMA tile equals the plain matrix product") {
  for (gen::Arch arch : kArchs) {
    INFO(gen::arch_name(arch));
    Built k = build_kernel(gen::KernelKind::MfmaTile, arch);
    emu::Device dev(gfx_of(arch));
    bool fnuz = arch == gen::Arch::gfx942;
    std::mt19937 rng(99);
    // Finite fp8 values only (no NaN bytes), both signs.
    auto draw = [&] {
      for (;;) {
        uint8_t b = uint8_t(rng());
        if (!std::isnan(e4m3_value(b, fnuz)) && std::fabs(e4m3_value(b, fnuz)) < 64) return b;
      }
    };
    std::vector<uint8_t> a(16 * 32), bt(16 * 32);
    for (auto& x : a) x = draw();
    for (auto& x : bt) x = draw();
    uint64_t d_a = dev.alloc(a.size(), 256, "a"), d_b = dev.alloc(bt.size(), 256, "bt");
    uint64_t d_d = dev.alloc(16 * 16 * 4, 256, "d", 0xee);
    dev.write(d_a, a.data(), a.size());
    dev.write(d_b, bt.data(), bt.size());
    emu::KernargBuilder ka;
    ka.put<uint64_t>(0, d_d).put<uint64_t>(8, d_a).put<uint64_t>(16, d_b);
    emu::Counters c = dev.dispatch(k.co, k.name, {1, 1, 1}, {64, 1, 1}, ka.bytes);
    auto d = dev.read_vector<float>(d_d, 256);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double want = 0, mag = 0;
        for (int kk = 0; kk < 32; ++kk) {
          double p = e4m3_value(a[i * 32 + kk], fnuz) * e4m3_value(bt[j * 32 + kk], fnuz);
          want += p;
          mag += std::fabs(p);
        }
        INFO("D[" << i << "][" << j << "]");
        CHECK(std::fabs(d[i * 16 + j] - want) <= 1e-6 * mag + 1e-30);
      }
    CHECK(c.total.mfma_macs == 16u * 16u * 32u);
  }
}

// merge_attn_states (abi::merge_args) against the merge computed here in double precision from
// the same bf16 / f32 inputs: random rows, rows with one side empty (lse -inf), and a row with
// both sides empty (o 0, lse -inf); with and without output_lse.
TEST_CASE("integration: merge_attn_states merges two (o, lse) by lse weights") {
  for (gen::Arch arch : kArchs)
    for (bool with_lse : {true, false}) {
      INFO(gen::arch_name(arch) << (with_lse ? " with output_lse" : " without output_lse"));
      Built k = build_kernel(gen::KernelKind::MlaMerge, arch);
      emu::Device dev(gfx_of(arch));
      const uint32_t rows = 3 * 12 + 1;
      std::mt19937 rng(99 + int(arch));
      std::normal_distribution<float> n01;
      std::uniform_real_distribution<float> lse_d(-6.f, 6.f);
      std::vector<uint16_t> po(rows * 512), so(rows * 512);
      std::vector<float> pl(rows), sl(rows);
      for (auto& v : po) v = bf16_bits(n01(rng));
      for (auto& v : so) v = bf16_bits(n01(rng));
      for (uint32_t r = 0; r < rows; ++r) pl[r] = lse_d(rng), sl[r] = lse_d(rng);
      pl[3] = -INFINITY;                    // only the suffix saw tokens
      sl[5] = -INFINITY;                    // only the prefix
      pl[rows - 1] = sl[rows - 1] = -INFINITY;  // neither
      uint64_t d_po = dev.alloc(po.size() * 2, 256, "prefix_output"), d_so = dev.alloc(so.size() * 2, 256, "suffix_output");
      uint64_t d_pl = dev.alloc(rows * 4, 256, "prefix_lse"), d_sl = dev.alloc(rows * 4, 256, "suffix_lse");
      uint64_t d_o = dev.alloc(rows * 512 * 2, 256, "output", 0xff);
      uint64_t d_ol = with_lse ? dev.alloc(rows * 4, 256, "output_lse", 0xff) : 0;
      dev.write(d_po, po.data(), po.size() * 2);
      dev.write(d_so, so.data(), so.size() * 2);
      dev.write(d_pl, pl.data(), rows * 4);
      dev.write(d_sl, sl.data(), rows * 4);
      namespace A = abi::merge_args;
      emu::KernargBuilder ka;
      ka.put<uint64_t>(A::output, d_o).put<uint64_t>(A::prefix_output, d_po).put<uint64_t>(A::prefix_lse, d_pl);
      ka.put<uint64_t>(A::suffix_output, d_so).put<uint64_t>(A::suffix_lse, d_sl).put<uint64_t>(A::output_lse, d_ol);
      ka.put<uint32_t>(A::rows, rows).put<uint32_t>(A::reserved, 0);
      dev.dispatch(k.co, k.name, {rows, 1, 1}, {64, 1, 1}, ka.bytes);
      auto o = dev.read_vector<uint16_t>(d_o, rows * 512);
      std::vector<float> ol = with_lse ? dev.read_vector<float>(d_ol, rows) : std::vector<float>();
      double worst = 0;
      for (uint32_t r = 0; r < rows; ++r) {
        const double a = pl[r], s = sl[r], m = std::max(a, s);
        const double wa = std::isinf(m) ? 0 : std::exp(a - m), ws = std::isinf(m) ? 0 : std::exp(s - m);
        for (int c = 0; c < 512; ++c) {
          const size_t i = size_t(r) * 512 + size_t(c);
          const double want = wa + ws > 0 ? (wa * bf16_value(po[i]) + ws * bf16_value(so[i])) / (wa + ws) : 0.0;
          const double got = bf16_value(o[i]);
          // bf16 rounding of the result (half an ulp, 2^-9 relative) plus f32 arithmetic.
          const double err = std::abs(got - want), tol = std::ldexp(std::abs(want), -8) + 1e-6;
          worst = std::max(worst, err / (std::abs(want) + 1e-30));
          if (err > tol) FAIL_CHECK("row " << r << " col " << c << ": got " << got << ", want " << want);
        }
        if (with_lse) {
          const double want_lse = wa + ws > 0 ? m + std::log(wa + ws) : -INFINITY;
          if (std::isinf(want_lse)) CHECK(std::isinf(ol[r]));
          else CHECK(std::abs(ol[r] - want_lse) <= 1e-5 * std::max(1.0, std::abs(want_lse)));
        }
      }
      CHECK(worst <= std::ldexp(1.0, -8));
      CHECK(worst > 0);  // the bf16 rounding shows: the comparison sees the kernel's output
    }
}

// The reduce kernel (abi::ReduceEntry) against the merge computed here in double precision from
// the same partials: entries with f32 partials only (a split request), bf16 partials then f32
// ones at a stride (a cascading member: its prefix splits, then its unique ones), and bf16 only
// (a member whose whole KV is the prefix). A bf16 partial fills the first 1024 bytes of its
// 2048-byte row; the other half holds garbage that must not be read.
TEST_CASE("integration: the reduce merges f32 and bf16 partials by lse weights") {
  const int heads = 12, qs = 2, M = heads * qs;
  for (gen::Arch arch : kArchs) {
    INFO(gen::arch_name(arch));
    Built k = build_kernel(gen::KernelKind::MlaReduce, arch, heads, qs, true);
    emu::Device dev(gfx_of(arch));
    // {qo_row, first_partial, num_splits, partial_stride, bf16_splits}
    // Entry 8 is a request with no KV (num_splits 0): o = 0, lse = -inf. The kernel cuts a row's
    // splits into 8 waves' ranges of reduce_range_splits(S) (whole chunks of 16 partial rows in
    // flight, 64 lse per load). 70 splits, 20 of them bf16: 5 ranges of 16, the second crossing
    // from bf16 to f32, a last range of 6, 3 waves with none. 600 splits, 100 of them bf16: 8
    // ranges of 80 (two lse loads and 5 sum chunks each), the second crossing the kinds, the last
    // of 40.
    static_assert(gen::reduce_range_splits(70) == 16 && gen::reduce_range_splits(600) == 80);
    const std::vector<abi::ReduceEntry> entries = {{0, 0, 3, 1, 0, {}},     {2, 3, 5, 3, 2, {}},  {4, 4, 4, 3, 4, {}},
                                                   {6, 5, 2, 3, 1, {}},     {8, 0, 0, 1, 0, {}},  {12, 16, 70, 1, 20, {}},
                                                   {14, 86, 600, 1, 100, {}}};
    int slots = 0;
    for (const auto& e : entries) slots = std::max(slots, e.first_partial + (e.num_splits - 1) * e.partial_stride + 1);
    std::mt19937 rng(7 + int(arch));
    std::normal_distribution<float> n01;
    std::uniform_real_distribution<float> lse_d(-5.f, 5.f);
    std::vector<float> po(size_t(slots) * M * 512), pl(size_t(slots) * M);
    for (auto& v : po) v = n01(rng);
    for (auto& v : pl) v = lse_d(rng);
    std::vector<bool> is_bf16(size_t(slots), false);
    for (const auto& e : entries)
      for (int kk = 0; kk < e.bf16_splits; ++kk) is_bf16[size_t(e.first_partial + kk * e.partial_stride)] = true;
    // A bf16 slot: row m's 512 bf16 in its first 1024 bytes (the values it stands for kept in po).
    std::vector<uint8_t> image(po.size() * 4);
    std::memcpy(image.data(), po.data(), image.size());
    for (int p = 0; p < slots; ++p)
      if (is_bf16[size_t(p)])
        for (int m = 0; m < M; ++m) {
          float* row = &po[(size_t(p) * M + m) * 512];
          uint16_t* out = reinterpret_cast<uint16_t*>(&image[(size_t(p) * M + m) * 2048]);
          for (int c = 0; c < 512; ++c) {
            out[c] = bf16_bits(row[c]);
            row[c] = float(bf16_value(out[c]));
          }
        }
    const int requests = 16;  // q rows: entries cover 0..9 and 12..15, rows 10 and 11 stay unwritten
    // The table as the step's upload writes it: its LaunchHeader, then the entries.
    std::vector<uint8_t> table(32 + entries.size() * sizeof(abi::ReduceEntry), 0);
    const abi::LaunchHeader header{int32_t(entries.size()), 32, {}};
    std::memcpy(table.data(), &header, 32);
    std::memcpy(table.data() + 32, entries.data(), entries.size() * sizeof(abi::ReduceEntry));
    uint64_t d_map = dev.alloc(table.size(), 256, "reduce_map");
    uint64_t d_po = dev.alloc(image.size(), 256, "partial_o"), d_pl = dev.alloc(pl.size() * 4, 256, "partial_lse");
    uint64_t d_o = dev.alloc(size_t(requests) * heads * 512 * 2, 256, "o", 0xff);
    uint64_t d_l = dev.alloc(size_t(requests) * heads * 4, 256, "lse", 0xff);
    dev.write(d_map, table.data(), table.size());
    dev.write(d_po, image.data(), image.size());
    dev.write(d_pl, pl.data(), pl.size() * 4);
    namespace A = abi::reduce_args;
    emu::KernargBuilder ka;
    ka.put<uint64_t>(A::reduce_map, d_map).put<uint64_t>(A::partial_o, d_po).put<uint64_t>(A::partial_lse, d_pl);
    ka.put<uint64_t>(A::o, d_o).put<uint64_t>(A::lse, d_l);
    // A grid of the capacity: the workgroups past the header's count exit without a write.
    dev.dispatch(k.co, k.name, {uint32_t(entries.size() + 3), uint32_t(M), 1}, {k.workgroup_size, 1, 1}, ka.bytes);
    auto o = dev.read_vector<uint16_t>(d_o, size_t(requests) * heads * 512);
    auto ol = dev.read_vector<float>(d_l, size_t(requests) * heads);
    double worst = 0;
    for (int m = 0; m < M; ++m) {  // q rows 10 and 11: never written
      const size_t row = size_t(10) * heads + size_t(m);
      CHECK(o[row * 512] == 0xffff);
      CHECK(std::isnan(ol[row]));
    }
    for (const auto& e : entries)
      for (int m = 0; m < M; ++m) {
        if (e.num_splits == 0) {
          const size_t row = size_t(e.qo_row) * heads + size_t(m);
          for (int c = 0; c < 512; ++c) CHECK(o[row * 512 + size_t(c)] == 0);
          CHECK((std::isinf(ol[row]) && ol[row] < 0));
          continue;
        }
        double mx = -INFINITY;
        for (int kk = 0; kk < e.num_splits; ++kk) mx = std::max(mx, double(pl[size_t(e.first_partial + kk * e.partial_stride) * M + m]));
        double wsum = 0;
        std::vector<double> want(512, 0.0), mag(512, 0.0);
        for (int kk = 0; kk < e.num_splits; ++kk) {
          const size_t pk = size_t(e.first_partial + kk * e.partial_stride) * M + m;
          const double w = std::exp(pl[pk] - mx);
          wsum += w;
          for (int c = 0; c < 512; ++c) {
            want[size_t(c)] += w * po[pk * 512 + size_t(c)];
            mag[size_t(c)] += w * std::abs(po[pk * 512 + size_t(c)]);
          }
        }
        const size_t row = size_t(e.qo_row) * heads + size_t(m);
        for (int c = 0; c < 512; ++c) {
          const double wv = want[size_t(c)] / wsum, got = bf16_value(o[row * 512 + size_t(c)]);
          // bf16 rounding of the result (half an ulp, 2^-9 relative) plus f32 arithmetic: a sum of
          // S terms errs by at most about S ulps of the terms' magnitude (and the weights' own).
          const double err = std::abs(got - wv);
          const double f32_sum = 2.0 * e.num_splits * std::ldexp(mag[size_t(c)] / wsum, -23);
          // Relative to the terms' weighted magnitude: 600 random terms cancel to near 0 in places.
          worst = std::max(worst, err / (mag[size_t(c)] / wsum));
          if (err > std::ldexp(std::abs(wv), -8) + 1e-6 + f32_sum)
            FAIL_CHECK("entry qo_row " << e.qo_row << " row " << m << " col " << c << ": got " << got << ", want " << wv);
        }
        CHECK(std::abs(ol[row] - (mx + std::log(wsum))) <= 1e-5 * std::max(1.0, std::abs(mx)));
      }
    CHECK(worst <= std::ldexp(1.0, -8));
    CHECK(worst > 0);
  }
}
