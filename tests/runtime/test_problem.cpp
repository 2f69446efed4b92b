// Problem files: save/load round trip, validation messages, random problems, encoders.
#include <catch2/catch.hpp>

#include "emulator/npy.h"
#include "runtime/problem.h"
#include "tests/reference/mla_reference.h"

#include <nlohmann/json.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using namespace mla;
using Catch::Matchers::Contains;

namespace {

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() / ("mla_rt_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string file(const char* f) const { return (path / f).string(); }
};

rt::ProblemParams small_params() {
  rt::ProblemParams p;
  p.target = rt::Target::gfx942;
  p.heads = 4;
  p.qseqlen = 2;
  p.page_size = 16;
  p.kv_lens = {37, 16, 5};
  p.extra_pages = 3;
  p.seed = 7;
  return p;
}

// Saves a valid small problem into a fresh dir; tests then break one file and expect a message.
struct SavedProblem {
  TempDir dir;
  rt::Problem p;
  SavedProblem() : p(rt::make_random_problem(small_params())) { rt::save_problem(dir.str(), p); }
  void write_ints(const char* file, const std::vector<int32_t>& v) {
    npy::save(dir.file(file), npy::make<int32_t>("<i4", {v.size()}, v));
  }
  nlohmann::json json() {
    std::ifstream in(dir.file("problem.json"));
    return nlohmann::json::parse(in);
  }
  void write_json(const nlohmann::json& j) { std::ofstream(dir.file("problem.json")) << j.dump(2); }
  void load() { rt::load_problem(dir.str()); }
};

}  // namespace

TEST_CASE("problem: save/load round trip keeps every field and tensor", "[problem]") {
  for (auto target : {rt::Target::gfx942, rt::Target::gfx950})
    for (auto [qd, kd] : {std::pair{rt::DType::fp8, rt::DType::fp8}, {rt::DType::bf16, rt::DType::fp8}, {rt::DType::bf16, rt::DType::bf16}}) {
      rt::ProblemParams prm = small_params();
      prm.target = target;
      prm.q_dtype = qd;
      prm.kv_dtype = kd;
      prm.logit_cap = 30.0;
      prm.return_lse = true;
      prm.q_scale = 0.5;
      prm.kv_scale = 1.25;
      rt::Problem a = rt::make_random_problem(prm);
      TempDir dir;
      rt::save_problem(dir.str(), a);
      rt::Problem b = rt::load_problem(dir.str());
      CHECK(b.target == a.target);
      CHECK(b.q_dtype == a.q_dtype);
      CHECK(b.kv_dtype == a.kv_dtype);
      CHECK(b.heads == a.heads);
      CHECK(b.qseqlen == a.qseqlen);
      CHECK(b.page_size == a.page_size);
      CHECK(b.sm_scale == a.sm_scale);
      CHECK(b.q_scale == a.q_scale);
      CHECK(b.kv_scale == a.kv_scale);
      CHECK(b.logit_cap == a.logit_cap);
      CHECK(b.return_lse == a.return_lse);
      CHECK(b.q.shape == a.q.shape);
      CHECK(b.q.elem_bytes == a.q.elem_bytes);
      CHECK(b.q.bytes == a.q.bytes);
      CHECK(b.kv.shape == a.kv.shape);
      CHECK(b.kv.bytes == a.kv.bytes);
      CHECK(b.qo_indptr == a.qo_indptr);
      CHECK(b.kv_indptr == a.kv_indptr);
      CHECK(b.kv_indices == a.kv_indices);
      CHECK(b.kv_last_page_lens == a.kv_last_page_lens);
      // The on-disk dtypes are the raw-bit types of the format.
      CHECK(npy::load(dir.file("q.npy")).dtype == (qd == rt::DType::fp8 ? "|u1" : "<u2"));
      CHECK(npy::load(dir.file("kv_indices.npy")).dtype == "<i4");
    }
}

TEST_CASE("problem: outputs round trip (o bits, lse, stats)", "[problem]") {
  rt::Problem p = rt::make_random_problem(small_params());
  TempDir dir;
  std::vector<uint16_t> o(size_t(p.rows()) * p.heads * 512);
  for (size_t i = 0; i < o.size(); ++i) o[i] = uint16_t(i * 7);
  std::vector<float> lse(size_t(p.rows()) * p.heads, 1.5f);
  rt::save_outputs(dir.str(), p, o, &lse, nlohmann::json{{"kernel", "x"}});
  rt::Outputs out = rt::load_outputs(dir.str(), p);
  CHECK(out.o_bits == o);
  REQUIRE(out.has_lse);
  CHECK(out.lse == lse);
  CHECK(npy::load(dir.file("o.npy")).shape == std::vector<size_t>{size_t(p.rows()), size_t(p.heads), 512});
  CHECK(fs::exists(dir.file("stats.json")));
  std::vector<uint16_t> short_o(10);
  CHECK_THROWS_WITH(rt::save_outputs(dir.str(), p, short_o, nullptr, {}), Contains("o has 10 elements"));
}

TEST_CASE("problem: validation names the file, field, value and what is allowed", "[problem]") {
  SECTION("bad q shape") {
    SavedProblem s;
    npy::Array q = npy::load(s.dir.file("q.npy"));
    q.shape[1] = 3;  // heads 4 in problem.json
    q.data.resize(q.count());
    npy::save(s.dir.file("q.npy"), q);
    CHECK_THROWS_WITH(s.load(), Contains("q.npy") && Contains("shape [6, 3, 576]") && Contains("[batch*qseqlen, heads, 576] = [6, 4, 576]"));
  }
  SECTION("bad kv shape (page size)") {
    SavedProblem s;
    npy::Array kv = npy::load(s.dir.file("kv.npy"));
    kv.shape = {kv.shape[0] * 2, 8, 576};
    npy::save(s.dir.file("kv.npy"), kv);
    CHECK_THROWS_WITH(s.load(), Contains("kv.npy") && Contains("page_size = 16"));
  }
  SECTION("page id >= num_pages") {
    SavedProblem s;
    auto idx = s.p.kv_indices;
    idx[2] = s.p.num_pages();
    s.write_ints("kv_indices.npy", idx);
    CHECK_THROWS_WITH(s.load(), Contains("kv_indices.npy") && Contains(fmt::format("kv_indices[2] = {}", s.p.num_pages())) &&
                                    Contains(fmt::format("allowed: 0..{}", s.p.num_pages() - 1)));
  }
  SECTION("negative page id") {
    SavedProblem s;
    auto idx = s.p.kv_indices;
    idx[0] = -1;
    s.write_ints("kv_indices.npy", idx);
    CHECK_THROWS_WITH(s.load(), Contains("kv_indices[0] = -1"));
  }
  SECTION("last page len 0") {
    SavedProblem s;
    auto last = s.p.kv_last_page_lens;
    last[1] = 0;
    s.write_ints("kv_last_page_lens.npy", last);
    CHECK_THROWS_WITH(s.load(), Contains("kv_last_page_lens.npy") && Contains("kv_last_page_lens[1] = 0") && Contains("allowed: 1..page_size = 16"));
  }
  SECTION("last page len > page_size") {
    SavedProblem s;
    auto last = s.p.kv_last_page_lens;
    last[0] = 17;
    s.write_ints("kv_last_page_lens.npy", last);
    CHECK_THROWS_WITH(s.load(), Contains("kv_last_page_lens[0] = 17") && Contains("allowed: 1..page_size = 16"));
  }
  SECTION("kv_len < qseqlen") {
    SavedProblem s;  // request 2 has kv_len 5 in one page; qseqlen 2
    auto last = s.p.kv_last_page_lens;
    last[2] = 1;
    s.write_ints("kv_last_page_lens.npy", last);
    CHECK_THROWS_WITH(s.load(), Contains("request 2 has kv_len") && Contains("= 1 < qseqlen = 2"));
  }
  SECTION("bad dtype name") {
    SavedProblem s;
    auto j = s.json();
    j["q_dtype"] = "fp16";
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("problem.json") && Contains("q_dtype") && Contains("'fp16'") && Contains("allowed: \"fp8\", \"bf16\""));
  }
  SECTION("bad target") {
    SavedProblem s;
    auto j = s.json();
    j["target"] = "gfx90a";
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("target 'gfx90a'") && Contains("\"gfx942\", \"gfx950\""));
  }
  SECTION("missing and unknown fields, wrong JSON types") {
    SavedProblem s;
    auto j = s.json();
    j.erase("sm_scale");
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("field 'sm_scale' is missing"));
    j = s.p.metadata_json();
    j["pagesize"] = 16;
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("unknown field 'pagesize'") && Contains("allowed:"));
    j = s.p.metadata_json();
    j["return_lse"] = 1;
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("'return_lse' = 1 must be true or false"));
    j = s.p.metadata_json();
    j["page_size"] = 48;
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("'page_size' = 48") && Contains("power of two up to 256"));
    j = s.p.metadata_json();
    j["logit_cap"] = -1.0;
    s.write_json(j);
    CHECK_THROWS_WITH(s.load(), Contains("'logit_cap' = -1"));
  }
  SECTION("index arrays: dtype, monotone indptr, qseqlen rows per request") {
    SavedProblem s;
    npy::save(s.dir.file("kv_indptr.npy"), npy::make<int64_t>("<i8", {4}, std::vector<int64_t>{0, 3, 4, 5}));
    CHECK_THROWS_WITH(s.load(), Contains("kv_indptr.npy") && Contains("dtype '<i8'") && Contains("'<i4'"));
    s.write_ints("kv_indptr.npy", {0, 3, 2, 5});
    CHECK_THROWS_WITH(s.load(), Contains("kv_indptr[2] = 2 < kv_indptr[1] = 3"));
    s.write_ints("kv_indptr.npy", s.p.kv_indptr);
    s.write_ints("qo_indptr.npy", {0, 2, 3, 6});
    CHECK_THROWS_WITH(s.load(), Contains("qo_indptr[2] - qo_indptr[1] = 1 must equal qseqlen = 2"));
  }
  SECTION("fp8 dtype but uint16 q") {
    SavedProblem s;
    npy::Array q = npy::load(s.dir.file("q.npy"));
    std::vector<uint16_t> v(q.count());
    npy::save(s.dir.file("q.npy"), npy::make<uint16_t>("<u2", q.shape, v));
    CHECK_THROWS_WITH(s.load(), Contains("q.npy") && Contains("dtype '<u2'") && Contains("'|u1'"));
  }
  SECTION("missing file") {
    SavedProblem s;
    fs::remove(s.dir.file("kv_indices.npy"));
    CHECK_THROWS_WITH(s.load(), Contains("kv_indices.npy: missing"));
  }
}

TEST_CASE("problem: make_random_problem respects kv_lens and page sizes", "[problem]") {
  for (int page_size : {1, 16, 64, 128, 256}) {
    rt::ProblemParams prm;
    prm.heads = 8;
    prm.qseqlen = 3;
    prm.page_size = page_size;
    prm.kv_lens = {3, page_size + 3, 3 * page_size, 2 * page_size + 5, 300};
    prm.extra_pages = 5;
    prm.seed = uint64_t(page_size);
    rt::Problem p = rt::make_random_problem(prm);
    INFO("page_size " << page_size);
    REQUIRE(p.batch() == 5);
    int used = 0;
    for (int b = 0; b < p.batch(); ++b) {
      CHECK(p.kv_len(b) == prm.kv_lens[b]);
      CHECK(p.pages_of(b) == (prm.kv_lens[b] + page_size - 1) / page_size);
      CHECK(p.kv_last_page_lens[b] >= 1);
      CHECK(p.kv_last_page_lens[b] <= page_size);
      used += p.pages_of(b);
    }
    CHECK(p.num_pages() == used + 5);
    // Partial last pages occur (5 % page_size etc.), page ids are distinct and not sequential.
    if (page_size > 1) CHECK(p.kv_last_page_lens[0] == 3);
    std::set<int> ids(p.kv_indices.begin(), p.kv_indices.end());
    CHECK(ids.size() == p.kv_indices.size());
    bool sequential = true;
    for (size_t i = 0; i < p.kv_indices.size(); ++i) sequential &= p.kv_indices[i] == int(i);
    CHECK_FALSE(sequential);
    CHECK(p.qo_indptr.back() == 5 * 3);
    rt::validate_problem(p);
  }
}

TEST_CASE("problem: random values are N(0,1) in the target's format, never all zero", "[problem]") {
  for (auto target : {rt::Target::gfx942, rt::Target::gfx950})
    for (auto d : {rt::DType::fp8, rt::DType::bf16}) {
      rt::ProblemParams prm;
      prm.target = target;
      prm.q_dtype = prm.kv_dtype = d;
      prm.heads = 16;
      prm.kv_lens = {2000};
      rt::Problem p = rt::make_random_problem(prm);
      double sum = 0, sum2 = 0;
      size_t n = p.kv.count(), nan = 0;
      for (size_t i = 0; i < n; ++i) {
        double x = ref::decode(p.kv.bits(i), d, target);
        if (std::isnan(x)) ++nan;
        sum += x;
        sum2 += x * x;
      }
      CHECK(nan == 0);
      CHECK(std::fabs(sum / n) < 0.01);
      CHECK(std::fabs(sum2 / n - 1.0) < 0.03);
      // Different seeds give different data.
      prm.seed = 2;
      CHECK(rt::make_random_problem(prm).kv.bytes != p.kv.bytes);
    }
}

TEST_CASE("problem: make_random_problem rejects bad parameters", "[problem]") {
  rt::ProblemParams prm;
  prm.qseqlen = 4;
  prm.kv_lens = {10, 3};
  CHECK_THROWS_WITH(rt::make_random_problem(prm), Contains("kv_lens[1] = 3 < qseqlen = 4"));
  prm.kv_lens = {};
  CHECK_THROWS_WITH(rt::make_random_problem(prm), Contains("kv_lens is empty"));
  prm.kv_lens = {10};
  prm.page_size = 3;
  CHECK_THROWS_WITH(rt::make_random_problem(prm), Contains("'page_size' = 3"));
  // Peaked scores (docs/accuracy.md).
  prm = {};
  prm.kv_lens = {300, 300};
  prm.peak_tokens = 2;
  prm.shared = {{0, 2, 64}};
  CHECK_THROWS_WITH(rt::make_random_problem(prm), Contains("peak_tokens > 0 with shared prefixes"));
  prm.shared.clear();
  prm.peak_spread = -1;
  CHECK_THROWS_WITH(rt::make_random_problem(prm), Contains("peak_spread = -1 (allowed: finite, >= 0)"));
}

// A peak token's score is ln(tokens the row sees) + U(0, spread) for its own (row, head); the fp64
// reference's scores (its own decoders) find it there, within the rounding of the key to fp8.
TEST_CASE("problem: peaked scores put peak_tokens keys per (row, head) at ln(len) + U(0, spread)", "[problem]") {
  rt::ProblemParams prm;
  prm.target = rt::Target::gfx942;
  prm.heads = 3;
  prm.qseqlen = 2;
  prm.kv_lens = {500};
  prm.peak_tokens = 2;
  prm.peak_spread = 1.0;
  prm.sm_scale = 0.02;  // other scores ~N(0, 0.48^2): far below the peaks at >= ln(499) = 6.2
  rt::Problem p = rt::make_random_problem(prm);
  const double scale = p.sm_scale * p.q_scale * p.kv_scale;
  for (int r = 0; r < 2; ++r)
    for (int h = 0; h < 3; ++h) {
      const double base = std::log(500.0 - 2 + r + 1);
      int peaks = 0;
      for (int t = 0; t < 499; ++t) {
        double s = 0;
        for (int d = 0; d < 576; ++d)
          s += ref::decode(p.q.bits(p.q_elem(r, h, d)), p.q_dtype, p.target) * ref::decode(p.kv.bits(p.kv_elem(0, t, d)), p.kv_dtype, p.target);
        s *= scale;
        if (s > base - 0.1) {
          CHECK(s < base + 1.1);
          ++peaks;
        }
      }
      INFO("row " << r << " head " << h);
      CHECK(peaks == 2);
    }
}

TEST_CASE("encoders: every finite code round-trips through the reference decoders", "[problem][numerics]") {
  for (auto target : {rt::Target::gfx942, rt::Target::gfx950}) {
    for (int c = 0; c < 256; ++c) {
      double v = ref::decode(uint16_t(c), rt::DType::fp8, target);
      if (std::isnan(v)) continue;
      uint8_t back = rt::encode_fp8(v, target);
      // FNUZ has no -0: only +0 exists; OCP keeps 0x80 as -0.
      INFO("target " << rt::name(target) << " code " << c << " value " << v);
      CHECK(back == c);
    }
  }
  for (uint32_t c = 0; c < 0x10000; c += 7) {
    double v = ref::decode_bf16(uint16_t(c));
    if (std::isnan(v) || std::isinf(v)) continue;
    CHECK(rt::encode_bf16(v) == c);
  }
}

TEST_CASE("encoders: round to nearest even, saturate, NaN codes", "[problem][numerics]") {
  using rt::Target;
  // FNUZ: 1.0 = 0x40 (e=8), grid step at 1.0 is 1/8: 1+1/16 ties to 1.0 (even), 1+3/16 to 1.25.
  CHECK(rt::encode_fp8(1.0, Target::gfx942) == 0x40);
  CHECK(rt::encode_fp8(1.0 + 1.0 / 16, Target::gfx942) == 0x40);
  CHECK(rt::encode_fp8(1.0 + 3.0 / 16, Target::gfx942) == 0x42);
  CHECK(rt::encode_fp8(1.0, Target::gfx950) == 0x38);
  // Saturation to the format max, NaN codes, zero.
  CHECK(rt::encode_fp8(1e6, Target::gfx942) == 0x7f);   // 240
  CHECK(rt::encode_fp8(-1e6, Target::gfx942) == 0xff);  // -240
  CHECK(rt::encode_fp8(1e6, Target::gfx950) == 0x7e);   // 448
  CHECK(rt::encode_fp8(-460.0, Target::gfx950) == 0xfe);
  CHECK(rt::encode_fp8(std::nan(""), Target::gfx942) == 0x80);
  CHECK(rt::encode_fp8(std::nan(""), Target::gfx950) == 0x7f);
  CHECK(rt::encode_fp8(-0.0, Target::gfx942) == 0x00);
  CHECK(rt::encode_fp8(-0.0, Target::gfx950) == 0x80);
  // Subnormals: FNUZ smallest 2^-10, OCP 2^-9; half of it ties to 0 (even).
  CHECK(rt::encode_fp8(std::ldexp(1.0, -10), Target::gfx942) == 0x01);
  CHECK(rt::encode_fp8(std::ldexp(1.0, -11), Target::gfx942) == 0x00);
  CHECK(rt::encode_fp8(std::ldexp(1.5, -10), Target::gfx942) == 0x02);
  CHECK(rt::encode_fp8(std::ldexp(1.0, -9), Target::gfx950) == 0x01);
  // bf16
  CHECK(rt::encode_bf16(1.0) == 0x3f80);
  CHECK(rt::encode_bf16(1.0 + std::ldexp(1.0, -8)) == 0x3f80);
  CHECK(rt::encode_bf16(1.0 + 3 * std::ldexp(1.0, -8)) == 0x3f82);
  CHECK(rt::encode_bf16(-2.0) == 0xc000);
  CHECK(rt::encode_bf16(1e300) == 0x7f7f);  // saturating
}

// Fuzzing found these (issue #15): headers that read before a buffer, and element counts that
// overflow; each is an error naming the file.
TEST_CASE("npy: malformed headers and overflowing shapes are errors naming the file", "[problem]") {
  TempDir dir;
  auto write = [&](const std::string& header) {
    std::string h = header;
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes.push_back(char(h.size() & 0xff));
    bytes.push_back(char(h.size() >> 8));
    bytes += h;
    std::ofstream(dir.file("x.npy"), std::ios::binary) << bytes << std::string(16, '\0');
    return dir.file("x.npy");
  };
  auto error_of = [&](const std::string& header) {
    try {
      npy::load(write(header));
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string f = dir.file("x.npy");
  CHECK_THAT(error_of("{'descr'"), Contains(f) && Contains("no ':' after 'descr'"));
  CHECK_THAT(error_of("{'descr':"), Contains(f) && Contains("no value for 'descr'"));
  CHECK_THAT(error_of("{'descr': '<u4"), Contains(f) && Contains("not closed"));
  CHECK_THAT(error_of("{'descr': '<u4', 'fortran_order': False, 'shape': (4,"), Contains("not closed by ')'"));
  CHECK_THAT(error_of("{'descr': '<u4', 'fortran_order': False, 'shape': (x4,), }"), Contains("shape entry 'x4'"));
  CHECK_THAT(error_of("{'descr': '<u4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }"),
             Contains(f) && Contains("overflows"));
  CHECK_THAT(error_of("{'descr': '<u0', 'fortran_order': False, 'shape': (4,), }"), Contains("dtype '<u0'"));
  CHECK_THAT(error_of("{'descr': '<u4', 'fortran_order': False, 'shape': (400000000000000000,), }"),
             Contains(f) && Contains("truncated .npy payload"));
  CHECK_THAT(error_of("{'descr': '>u2', 'fortran_order': False, 'shape': (4,), }"),
             Contains("not little-endian (allowed: '|u1', '<u2', '<i4', '<u4', '<f4')"));
  CHECK(error_of("{'descr': '<u4', 'fortran_order': False, 'shape': (4,), }") == "no error");
}
