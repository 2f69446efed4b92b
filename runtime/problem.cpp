#include "runtime/problem.h"

#include "emulator/npy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;

namespace mla::rt {

const char* name(Target t) { return t == Target::gfx942 ? "gfx942" : "gfx950"; }
const char* name(DType d) { return d == DType::fp8 ? "fp8" : "bf16"; }

Target parse_target(const std::string& s, const std::string& what) {
  if (s == "gfx942") return Target::gfx942;
  if (s == "gfx950") return Target::gfx950;
  throw ProblemError(fmt::format("{}: target '{}' is not supported (allowed: \"gfx942\", \"gfx950\")", what, s));
}

DType parse_dtype(const std::string& s, const std::string& what) {
  if (s == "fp8") return DType::fp8;
  if (s == "bf16") return DType::bf16;
  throw ProblemError(fmt::format("{}: dtype '{}' is not supported (allowed: \"fp8\", \"bf16\")", what, s));
}

size_t RawTensor::count() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Encoders. One routine for every small float format: round |x| to the format's grid at its
// own exponent (the grid of the smallest normal exponent below it: subnormals), then saturate.
namespace {

struct MiniFloat {
  int exp_bits, man_bits, bias;
  double max;         // largest finite value
  uint16_t nan_code;  // the code NaN inputs map to
  bool neg_zero;      // false for FNUZ: -0 encodes as +0 (0x80 is NaN there)
};

const MiniFloat kFnuzE4M3{4, 3, 8, 240.0, 0x80, false};
const MiniFloat kOcpE4M3{4, 3, 7, 448.0, 0x7f, true};
const MiniFloat kBf16{8, 7, 127, std::ldexp(2.0 - std::ldexp(1.0, -7), 127), 0x7fc0, true};

uint16_t encode_minifloat(double x, const MiniFloat& f) {
  if (std::isnan(x)) return f.nan_code;
  const int sign_shift = f.exp_bits + f.man_bits;
  const uint16_t sign = std::signbit(x) ? uint16_t(1u << sign_shift) : 0;
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  double a = std::fabs(x);
  double v = 0.0;
  if (a != 0.0) {
    if (std::isinf(a)) {
      v = f.max;
    } else {
      int e = std::max(std::ilogb(a), emin);
      double quantum = std::ldexp(1.0, e - f.man_bits);
      v = std::nearbyint(a / quantum) * quantum;  // default rounding mode: ties to even
      v = std::min(v, f.max);                     // saturate
    }
  }
  if (v == 0.0) return f.neg_zero ? sign : 0;
  int e = std::ilogb(v);
  uint32_t field, man;
  if (e < emin) {
    field = 0;
    man = uint32_t(std::ldexp(v, f.man_bits - emin));
  } else {
    field = uint32_t(e + f.bias);
    man = uint32_t(std::ldexp(v, f.man_bits - e)) - (1u << f.man_bits);
  }
  return uint16_t(sign | (field << f.man_bits) | man);
}

// The inverse, for codes encode_minifloat produces (finite; NaN codes are never decoded here).
double decode_minifloat(uint16_t bits, const MiniFloat& f) {
  const int sign_shift = f.exp_bits + f.man_bits;
  const uint32_t field = (bits >> f.man_bits) & ((1u << f.exp_bits) - 1), man = bits & ((1u << f.man_bits) - 1);
  const double mag = field == 0 ? std::ldexp(double(man), 1 - f.bias - f.man_bits)
                                : std::ldexp(double(man | (1u << f.man_bits)), int(field) - f.bias - f.man_bits);
  return (bits >> sign_shift) & 1 ? -mag : mag;
}

double decode_value(uint16_t bits, DType d, Target t) {
  return decode_minifloat(bits, d == DType::bf16 ? kBf16 : t == Target::gfx942 ? kFnuzE4M3 : kOcpE4M3);
}

}  // namespace

uint8_t encode_fp8(double x, Target t) {
  return uint8_t(encode_minifloat(x, t == Target::gfx942 ? kFnuzE4M3 : kOcpE4M3));
}
uint16_t encode_bf16(double x) { return encode_minifloat(x, kBf16); }
uint16_t encode(double x, DType d, Target t) { return d == DType::fp8 ? encode_fp8(x, t) : encode_bf16(x); }

// ---------------------------------------------------------------------------------------------
// problem.json

nlohmann::json Problem::metadata_json() const {
  return nlohmann::json{{"target", name(target)},   {"q_dtype", name(q_dtype)},
                        {"kv_dtype", kv_ds_mla ? "fp8_ds_mla" : name(kv_dtype)},
                        {"heads", heads},           {"qseqlen", qseqlen},       {"page_size", page_size},
                        {"sm_scale", sm_scale},     {"q_scale", q_scale},       {"kv_scale", kv_scale},
                        {"logit_cap", logit_cap},   {"return_lse", return_lse},
                        {"attention", sparse ? "sparse" : "dense"}};
}

namespace {

const char* const kFields[] = {"target", "sm_scale", "q_dtype",   "q_scale",   "kv_dtype",   "kv_scale",
                               "heads",  "qseqlen",  "page_size", "logit_cap", "return_lse", "attention"};

std::string allowed_fields() {
  std::string s;
  for (const char* f : kFields) s += fmt::format("{}{}", s.empty() ? "" : ", ", f);
  return s;
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end()) throw ProblemError(fmt::format("{}: field '{}' is missing (required: {})", file, key, allowed_fields()));
  return *it;
}

std::string get_string(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto& v = field(j, key, file);
  if (!v.is_string()) throw ProblemError(fmt::format("{}: field '{}' = {} must be a string", file, key, v.dump()));
  return v.get<std::string>();
}

int get_int(const nlohmann::json& j, const char* key, const std::string& file, int lo, int hi) {
  const auto& v = field(j, key, file);
  if (!v.is_number_integer())
    throw ProblemError(fmt::format("{}: field '{}' = {} must be an integer in [{}, {}]", file, key, v.dump(), lo, hi));
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) throw ProblemError(fmt::format("{}: field '{}' = {} is out of range (allowed: {}..{})", file, key, x, lo, hi));
  return int(x);
}

double get_number(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto& v = field(j, key, file);
  if (!v.is_number()) throw ProblemError(fmt::format("{}: field '{}' = {} must be a number", file, key, v.dump()));
  return v.get<double>();
}

bool get_bool(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto& v = field(j, key, file);
  if (!v.is_boolean()) throw ProblemError(fmt::format("{}: field '{}' = {} must be true or false", file, key, v.dump()));
  return v.get<bool>();
}

bool is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Metadata checks shared by the JSON loader and validate_problem.
void check_metadata(const Problem& p, const std::string& file) {
  if (p.heads < 1 || p.heads > 1024) throw ProblemError(fmt::format("{}: field 'heads' = {} is out of range (allowed: 1..1024)", file, p.heads));
  if (p.qseqlen < 1 || p.qseqlen > 64)
    throw ProblemError(fmt::format("{}: field 'qseqlen' = {} is out of range (allowed: 1..64)", file, p.qseqlen));
  if (!is_pow2(p.page_size) || p.page_size > 256)
    throw ProblemError(fmt::format("{}: field 'page_size' = {} is not allowed (allowed: 1 or a power of two up to 256)", file, p.page_size));
  auto positive = [&](const char* key, double v) {
    if (!std::isfinite(v) || v <= 0.0)
      throw ProblemError(fmt::format("{}: field '{}' = {} must be a finite number > 0", file, key, v));
  };
  positive("sm_scale", p.sm_scale);
  positive("q_scale", p.q_scale);
  positive("kv_scale", p.kv_scale);
  if (!std::isfinite(p.logit_cap) || p.logit_cap < 0.0)
    throw ProblemError(fmt::format("{}: field 'logit_cap' = {} must be a finite number >= 0 (0 = off)", file, p.logit_cap));
  if (p.kv_ds_mla && (!p.sparse || p.q_dtype != DType::bf16 || p.kv_dtype != DType::fp8))
    throw ProblemError(fmt::format("{}: kv_dtype 'fp8_ds_mla' needs attention 'sparse' and q_dtype bf16", file));
  if (p.sparse && (p.qseqlen != 1 || p.page_size != 1 || p.logit_cap != 0.0))
    throw ProblemError(fmt::format("{}: attention 'sparse' needs qseqlen 1, page_size 1 and logit_cap 0 (has {}, {}, {}): "
                                   "every request is one query row over its own cache slots",
                                   file, p.qseqlen, p.page_size, p.logit_cap));
}

Problem parse_metadata(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) throw ProblemError(fmt::format("{}: must hold a JSON object with the fields {}", file, allowed_fields()));
  for (const auto& [key, value] : j.items()) {
    if (std::find_if(std::begin(kFields), std::end(kFields), [&](const char* f) { return key == f; }) == std::end(kFields))
      throw ProblemError(fmt::format("{}: unknown field '{}' (allowed: {})", file, key, allowed_fields()));
  }
  Problem p;
  p.target = parse_target(get_string(j, "target", file), file + ": field 'target'");
  p.q_dtype = parse_dtype(get_string(j, "q_dtype", file), file + ": field 'q_dtype'");
  const std::string kvd = get_string(j, "kv_dtype", file);
  p.kv_ds_mla = kvd == "fp8_ds_mla";
  p.kv_dtype = p.kv_ds_mla ? DType::fp8 : parse_dtype(kvd, file + ": field 'kv_dtype' (or fp8_ds_mla)");
  p.heads = get_int(j, "heads", file, 1, 1024);
  p.qseqlen = get_int(j, "qseqlen", file, 1, 64);
  p.page_size = get_int(j, "page_size", file, 1, 256);
  p.sm_scale = get_number(j, "sm_scale", file);
  p.q_scale = get_number(j, "q_scale", file);
  p.kv_scale = get_number(j, "kv_scale", file);
  p.logit_cap = get_number(j, "logit_cap", file);
  p.return_lse = get_bool(j, "return_lse", file);
  if (j.contains("attention")) {  // optional: "dense" when absent
    const std::string a = get_string(j, "attention", file);
    if (a != "dense" && a != "sparse")
      throw ProblemError(fmt::format("{}: field 'attention' = \"{}\" (allowed: dense, sparse)", file, a));
    p.sparse = a == "sparse";
  }
  check_metadata(p, file);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Tensor checks

std::string shape_str(const std::vector<size_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::string npy_dtype(DType d) { return d == DType::fp8 ? "|u1" : "<u2"; }

// Accept '|u1' and '<u1' (both are a byte); everything else must match exactly.
bool dtype_matches(const std::string& have, const std::string& want) {
  if (want == "|u1") return have == "|u1" || have == "<u1";
  return have == want;
}

npy::Array load_npy(const std::string& dir, const std::string& file) {
  fs::path path = fs::path(dir) / file;
  if (!fs::exists(path)) throw ProblemError(fmt::format("{}: missing (a problem directory holds problem.json, q.npy, kv.npy, "
                                                        "qo_indptr.npy, kv_indptr.npy, kv_indices.npy, kv_last_page_lens.npy)",
                                                        path.string()));
  try {
    return npy::load(path.string());
  } catch (const std::exception& e) {
    throw ProblemError(e.what());
  }
}

void expect_dtype(const npy::Array& a, const std::string& want, const std::string& file, const std::string& what) {
  if (!dtype_matches(a.dtype, want))
    throw ProblemError(fmt::format("{}: dtype '{}' is not allowed (expected '{}': {})", file, a.dtype, want, what));
}

std::vector<int32_t> load_int32_vector(const std::string& dir, const std::string& file) {
  npy::Array a = load_npy(dir, file);
  const std::string f = (fs::path(dir) / file).string();
  expect_dtype(a, "<i4", f, "int32");
  if (a.shape.size() != 1)
    throw ProblemError(fmt::format("{}: shape {} must be 1-D", f, shape_str(a.shape)));
  std::vector<int32_t> v(a.count());
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), v.size() * sizeof(int32_t));
  return v;
}

RawTensor to_raw(npy::Array a, DType d) {
  RawTensor t;
  t.shape = std::move(a.shape);
  t.elem_bytes = elem_bytes(d);
  t.bytes = std::move(a.data);
  return t;
}

// Checks the index arrays and tensor shapes of a problem whose metadata is already valid.
void check_tensors(const Problem& p, const std::string& where) {
  auto file = [&](const char* f) { return where.empty() ? std::string(f) : fmt::format("{}/{}", where, f); };
  // qo_indptr defines the batch.
  if (p.qo_indptr.size() < 2)
    throw ProblemError(fmt::format("{}: length {} must be batch+1 >= 2 (at least one request)", file("qo_indptr.npy"), p.qo_indptr.size()));
  const int batch = int(p.qo_indptr.size()) - 1;
  if (p.qo_indptr[0] != 0)
    throw ProblemError(fmt::format("{}: qo_indptr[0] = {} must be 0", file("qo_indptr.npy"), p.qo_indptr[0]));
  for (int b = 0; b < batch; ++b) {
    int64_t d = int64_t(p.qo_indptr[b + 1]) - p.qo_indptr[b];
    if (d != p.qseqlen)
      throw ProblemError(fmt::format("{}: qo_indptr[{}] - qo_indptr[{}] = {} must equal qseqlen = {} (decode: every request has qseqlen query rows)",
                                     file("qo_indptr.npy"), b + 1, b, d, p.qseqlen));
  }
  // q
  std::vector<size_t> q_shape{size_t(batch) * p.qseqlen, size_t(p.heads), size_t(kQkDim)};
  if (p.q.shape != q_shape)
    throw ProblemError(fmt::format("{}: shape {} must be [batch*qseqlen, heads, 576] = {} (batch = {} from qo_indptr.npy)",
                                   file("q.npy"), shape_str(p.q.shape), shape_str(q_shape), batch));
  if (p.q.elem_bytes != elem_bytes(p.q_dtype) || p.q.bytes.size() != p.q.count() * p.q.elem_bytes)
    throw ProblemError(fmt::format("{}: {} bytes of {}-byte elements do not match q_dtype {}", file("q.npy"), p.q.bytes.size(), p.q.elem_bytes, name(p.q_dtype)));
  // kv
  const size_t row = size_t(p.kv_row_elems());
  if (p.kv.shape.size() != 3 || p.kv.shape[0] < 1 || p.kv.shape[1] != size_t(p.page_size) || p.kv.shape[2] != row)
    throw ProblemError(fmt::format("{}: shape {} must be [num_pages >= 1, page_size = {}, {}]", file("kv.npy"),
                                   shape_str(p.kv.shape), p.page_size, row));
  if (p.kv.shape[0] > size_t(INT32_MAX))
    throw ProblemError(fmt::format("{}: {} pages exceed the int32 page id range", file("kv.npy"), p.kv.shape[0]));
  if (p.kv.elem_bytes != elem_bytes(p.kv_dtype) || p.kv.bytes.size() != p.kv.count() * p.kv.elem_bytes)
    throw ProblemError(fmt::format("{}: {} bytes of {}-byte elements do not match kv_dtype {}", file("kv.npy"), p.kv.bytes.size(), p.kv.elem_bytes, name(p.kv_dtype)));
  const int64_t num_pages = int64_t(p.kv.shape[0]);
  // kv_indptr
  if (p.kv_indptr.size() != size_t(batch) + 1)
    throw ProblemError(fmt::format("{}: length {} must be batch+1 = {} (batch from qo_indptr.npy)", file("kv_indptr.npy"), p.kv_indptr.size(), batch + 1));
  if (p.kv_indptr[0] != 0) throw ProblemError(fmt::format("{}: kv_indptr[0] = {} must be 0", file("kv_indptr.npy"), p.kv_indptr[0]));
  for (int b = 0; b < batch; ++b) {
    if (p.kv_indptr[b + 1] < p.kv_indptr[b])
      throw ProblemError(fmt::format("{}: kv_indptr[{}] = {} < kv_indptr[{}] = {} (must be non-decreasing: prefix sums of pages per request)",
                                     file("kv_indptr.npy"), b + 1, p.kv_indptr[b + 1], b, p.kv_indptr[b]));
    if (p.kv_indptr[b + 1] == p.kv_indptr[b])
      throw ProblemError(fmt::format("{}: request {} has 0 pages (kv_indptr[{}] = kv_indptr[{}] = {}); every request needs kv_len >= qseqlen >= 1",
                                     file("kv_indptr.npy"), b, b + 1, b, p.kv_indptr[b]));
  }
  // kv_indices
  if (p.kv_indices.size() != size_t(p.kv_indptr[batch]))
    throw ProblemError(fmt::format("{}: length {} must equal kv_indptr[{}] = {}", file("kv_indices.npy"), p.kv_indices.size(), batch, p.kv_indptr[batch]));
  for (size_t i = 0; i < p.kv_indices.size() && !p.sparse; ++i) {  // sparse: any slot, masked unless in the cache
    if (p.kv_indices[i] < 0 || p.kv_indices[i] >= num_pages)
      throw ProblemError(fmt::format("{}: kv_indices[{}] = {} is not a page id (allowed: 0..{}, num_pages = {} from kv.npy)",
                                     file("kv_indices.npy"), i, p.kv_indices[i], num_pages - 1, num_pages));
  }
  // kv_last_page_lens and kv lengths
  if (p.kv_last_page_lens.size() != size_t(batch))
    throw ProblemError(fmt::format("{}: length {} must be batch = {}", file("kv_last_page_lens.npy"), p.kv_last_page_lens.size(), batch));
  for (int b = 0; b < batch; ++b) {
    int32_t last = p.kv_last_page_lens[b];
    if (last < 1 || last > p.page_size)
      throw ProblemError(fmt::format("{}: kv_last_page_lens[{}] = {} is out of range (allowed: 1..page_size = {})",
                                     file("kv_last_page_lens.npy"), b, last, p.page_size));
    int64_t kv_len = int64_t(p.kv_indptr[b + 1] - p.kv_indptr[b] - 1) * p.page_size + last;
    if (kv_len > INT32_MAX)
      throw ProblemError(fmt::format("{}: request {} has kv_len {} > int32 max", file("kv_indptr.npy"), b, kv_len));
    if (kv_len < p.qseqlen)
      throw ProblemError(fmt::format("{}: request {} has kv_len = (pages {} - 1) * page_size {} + last_page_len {} = {} < qseqlen = {} "
                                     "(the step's own tokens must be in the cache: kv_len >= qseqlen)",
                                     file("kv_last_page_lens.npy"), b, p.kv_indptr[b + 1] - p.kv_indptr[b], p.page_size, last, kv_len,
                                     p.qseqlen));
  }
}

}  // namespace

void validate_problem(const Problem& p, const std::string& where) {
  check_metadata(p, where.empty() ? "problem.json" : where + "/problem.json");
  check_tensors(p, where);
}

Problem load_problem(const std::string& dir) {
  if (!fs::is_directory(dir)) throw ProblemError(fmt::format("{}: not a directory (a problem is a directory with problem.json and .npy inputs)", dir));
  fs::path json_path = fs::path(dir) / "problem.json";
  const std::string jfile = json_path.string();
  std::ifstream in(json_path);
  if (!in) throw ProblemError(fmt::format("{}: missing or unreadable", jfile));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw ProblemError(fmt::format("{}: not valid JSON: {}", jfile, e.what()));
  }
  Problem p = parse_metadata(j, jfile);

  auto tensor = [&](const char* file, DType d) {
    npy::Array a = load_npy(dir, file);
    std::string f = (fs::path(dir) / file).string();
    expect_dtype(a, npy_dtype(d), f, fmt::format("raw {} bits", name(d)));
    return to_raw(std::move(a), d);
  };
  auto ints = [&](const char* file) { return load_int32_vector(dir, file); };
  p.qo_indptr = ints("qo_indptr.npy");
  p.kv_indptr = ints("kv_indptr.npy");
  p.kv_indices = ints("kv_indices.npy");
  p.kv_last_page_lens = ints("kv_last_page_lens.npy");
  p.q = tensor("q.npy", p.q_dtype);
  p.kv = tensor("kv.npy", p.kv_dtype);
  check_tensors(p, dir);
  return p;
}

namespace {

void save_npy(const fs::path& path, npy::Array a) {
  try {
    npy::save(path.string(), a);
  } catch (const std::exception& e) {
    throw ProblemError(e.what());
  }
}

npy::Array raw_array(const RawTensor& t) {
  npy::Array a;
  a.dtype = t.elem_bytes == 1 ? "|u1" : "<u2";
  a.shape = t.shape;
  a.data = t.bytes;
  return a;
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ProblemError(fmt::format("{}: cannot create directory: {}", dir, ec.message()));
}

}  // namespace

void save_problem(const std::string& dir, const Problem& p) {
  validate_problem(p, dir);
  make_dir(dir);
  {
    std::ofstream out(fs::path(dir) / "problem.json");
    if (!out) throw ProblemError(fmt::format("{}/problem.json: cannot write", dir));
    out << p.metadata_json().dump(2) << "\n";
  }
  fs::path d(dir);
  save_npy(d / "q.npy", raw_array(p.q));
  save_npy(d / "kv.npy", raw_array(p.kv));
  auto ivec = [](const std::vector<int32_t>& v) { return npy::make<int32_t>("<i4", {v.size()}, v); };
  save_npy(d / "qo_indptr.npy", ivec(p.qo_indptr));
  save_npy(d / "kv_indptr.npy", ivec(p.kv_indptr));
  save_npy(d / "kv_indices.npy", ivec(p.kv_indices));
  save_npy(d / "kv_last_page_lens.npy", ivec(p.kv_last_page_lens));
}

void save_outputs(const std::string& dir, const Problem& p, const std::vector<uint16_t>& o_bits, const std::vector<float>* lse,
                  const nlohmann::json& stats) {
  const size_t rows = size_t(p.rows()), heads = size_t(p.heads);
  if (o_bits.size() != rows * heads * kVDim)
    throw ProblemError(fmt::format("save_outputs: o has {} elements, expected rows {} x heads {} x 512 = {}", o_bits.size(), rows, heads,
                                   rows * heads * kVDim));
  if (lse && lse->size() != rows * heads)
    throw ProblemError(fmt::format("save_outputs: lse has {} elements, expected rows {} x heads {} = {}", lse->size(), rows, heads, rows * heads));
  make_dir(dir);
  fs::path d(dir);
  save_npy(d / "o.npy", npy::make<uint16_t>("<u2", {rows, heads, size_t(kVDim)}, o_bits));
  if (lse) save_npy(d / "lse.npy", npy::make<float>("<f4", {rows, heads}, *lse));
  std::ofstream out(d / "stats.json");
  if (!out) throw ProblemError(fmt::format("{}/stats.json: cannot write", dir));
  out << stats.dump(2) << "\n";
}

Outputs load_outputs(const std::string& dir, const Problem& p) {
  const size_t rows = size_t(p.rows()), heads = size_t(p.heads);
  Outputs out;
  npy::Array o = load_npy(dir, "o.npy");
  std::string of = (fs::path(dir) / "o.npy").string();
  expect_dtype(o, "<u2", of, "bf16 bits");
  std::vector<size_t> want{rows, heads, size_t(kVDim)};
  if (o.shape != want) throw ProblemError(fmt::format("{}: shape {} must be [rows, heads, 512] = {}", of, shape_str(o.shape), shape_str(want)));
  out.o_bits.resize(o.count());
  std::memcpy(out.o_bits.data(), o.data.data(), o.data.size());
  fs::path lp = fs::path(dir) / "lse.npy";
  if (fs::exists(lp)) {
    npy::Array l = load_npy(dir, "lse.npy");
    expect_dtype(l, "<f4", lp.string(), "float32 natural-log lse");
    std::vector<size_t> lw{rows, heads};
    if (l.shape != lw) throw ProblemError(fmt::format("{}: shape {} must be [rows, heads] = {}", lp.string(), shape_str(l.shape), shape_str(lw)));
    out.lse.resize(l.count());
    std::memcpy(out.lse.data(), l.data.data(), l.data.size());
    out.has_lse = true;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Random problems

namespace {

// Standard normal from a 64-bit engine by Box-Muller: portable (std::normal_distribution's
// algorithm differs between standard libraries, and problems should be reproducible).
struct Normal {
  std::mt19937_64 eng;
  bool have = false;
  double spare = 0.0;
  explicit Normal(uint64_t seed) : eng(seed) {}
  double uniform01() { return (double(eng() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double operator()() {
    if (have) {
      have = false;
      return spare;
    }
    double r = std::sqrt(-2.0 * std::log(uniform01()));
    double phi = 2.0 * M_PI * uniform01();
    spare = r * std::sin(phi);
    have = true;
    return r * std::cos(phi);
  }
};

void fill_normal(RawTensor& t, DType d, Target target, Normal& rng) {
  const size_t n = t.count();
  t.elem_bytes = elem_bytes(d);
  t.bytes.assign(n * t.elem_bytes, 0);
  for (size_t i = 0; i < n; ++i) t.set_bits(i, encode(rng(), d, target));
}

// ProblemParams::kv_ds_mla: each row's 4 latent tiles quantised to e4m3fn (OCP, on every target)
// with their scales, and the rope in bf16.
void fill_ds_mla(RawTensor& t, bool pow2, Normal& rng) {
  t.elem_bytes = 1;
  t.bytes.assign(t.count(), 0);
  const size_t rows = t.count() / abi::kDsMlaRowBytes;
  double v[abi::kDsMlaTile];
  for (size_t r = 0; r < rows; ++r) {
    uint8_t* e = &t.bytes[r * abi::kDsMlaRowBytes];
    for (int tile = 0; tile < kVDim / abi::kDsMlaTile; ++tile) {
      const double mag = std::ldexp(1.0, int(rng.eng() % 3) - 1);
      double amax = 0;
      for (double& x : v) {
        const uint64_t u = rng.eng() % 100;
        x = u == 0 ? 0.0 : u == 1 ? -0.0 : rng() * mag;
        amax = std::max(amax, std::fabs(x));
      }
      float scale = float(std::max(amax, 1e-30) / 448.0);
      if (pow2) scale = std::ldexp(1.0f, int(std::ceil(std::log2(double(scale)))));
      std::memcpy(e + abi::kDsMlaScaleOffset + 4 * tile, &scale, 4);
      for (int i = 0; i < abi::kDsMlaTile; ++i)
        e[abi::kDsMlaTile * tile + i] = v[i] == 0.0 ? (std::signbit(v[i]) ? 0x80 : 0x00) : encode_fp8(v[i] / scale, Target::gfx950);
    }
    for (int i = 0; i < kQkDim - kVDim; ++i) {
      const uint16_t bits = encode_bf16(rng());
      e[abi::kDsMlaRopeOffset + 2 * i] = uint8_t(bits), e[abi::kDsMlaRopeOffset + 2 * i + 1] = uint8_t(bits >> 8);
    }
  }
}

// ProblemParams::peak_tokens. A separate generator (seeded from the seed) so that a peaked problem
// is the flat problem of the same seed with some keys replaced.
void add_peaks(Problem& p, const ProblemParams& prm, const std::string& where) {
  if (!prm.shared.empty()) throw ProblemError(where + ": peak_tokens > 0 with shared prefixes (allowed: one or the other)");
  if (!(prm.peak_spread >= 0) || !std::isfinite(prm.peak_spread))
    throw ProblemError(fmt::format("{}: peak_spread = {} (allowed: finite, >= 0)", where, prm.peak_spread));
  const double scale = p.sm_scale * p.q_scale * p.kv_scale;  // > 0: check_metadata
  Normal rng(prm.seed ^ 0x5eed5eed5eed5eedull);
  for (int b = 0; b < p.batch(); ++b) {
    const int len = p.kv_len(b), seen_by_all = len - p.qseqlen + 1;
    std::vector<int> tokens(seen_by_all);
    for (int t = 0; t < seen_by_all; ++t) tokens[t] = t;
    for (int i = seen_by_all - 1; i > 0; --i) std::swap(tokens[i], tokens[rng.eng() % uint64_t(i + 1)]);
    size_t next = 0;
    for (int r = 0; r < p.qseqlen; ++r)
      for (int h = 0; h < p.heads; ++h)
        for (int j = 0; j < prm.peak_tokens && next < tokens.size(); ++j) {
          const int row = p.qo_indptr[b] + r, t = tokens[next++];
          double qq = 0;
          for (int d = 0; d < kQkDim; ++d) {
            const double x = decode_value(p.q.bits(p.q_elem(row, h, d)), p.q_dtype, p.target);
            qq += x * x;
          }
          if (qq == 0) continue;
          const double score = std::log(double(len - p.qseqlen + r + 1)) + prm.peak_spread * rng.uniform01();
          const double a = score / (scale * qq);
          for (int d = 0; d < kQkDim; ++d)
            p.kv.set_bits(p.kv_elem(b, t, d),
                          encode(a * decode_value(p.q.bits(p.q_elem(row, h, d)), p.q_dtype, p.target), p.kv_dtype, p.target));
        }
  }
}

}  // namespace

namespace {

// The sparse cache's slots: sparse_pool, or half the index count (rows share slots); at least
// every row's count, whose slots are distinct.
int64_t sparse_pool(const ProblemParams& prm, int64_t used, const std::string& where) {
  const int64_t longest = *std::max_element(prm.kv_lens.begin(), prm.kv_lens.end());
  const int64_t pool = prm.sparse_pool > 0 ? prm.sparse_pool : prm.sparse_pool < 0 ? used : std::max(longest, used / 2);
  if (pool < longest)
    throw ProblemError(fmt::format("{}: sparse_pool = {} slots is fewer than a row's {} distinct slots", where, pool, longest));
  if (!(prm.sparse_masked >= 0.0 && prm.sparse_masked <= 1.0))
    throw ProblemError(fmt::format("{}: sparse_masked = {} (allowed: 0..1)", where, prm.sparse_masked));
  return pool;
}

// Each row's slots: distinct, at random from the pool (a partial shuffle of `perm`), then a
// fraction sparse_masked of its entries masked at random positions: -1, or a slot past the cache.
void sparse_rows(Problem& p, const ProblemParams& prm, std::vector<int32_t>& perm, Normal& rng) {
  const int64_t pool = int64_t(perm.size());
  p.kv_indices.clear();
  size_t first = 0;  // sparse_pool < 0: row b takes the next kv_lens[b] slots of the shuffled pool
  for (size_t b = 0; b < prm.kv_lens.size(); ++b) {
    const int n = prm.kv_lens[b];
    if (prm.sparse_pool >= 0) {
      first = 0;
      for (int i = 0; i < n; ++i) std::swap(perm[size_t(i)], perm[size_t(i) + rng.eng() % uint64_t(pool - i)]);
    }
    for (int i = 0; i < n; ++i) {
      int32_t s = perm[first + size_t(i)];
      if (double(rng.eng() % 1000000) < prm.sparse_masked * 1e6) {
        const uint64_t kind = rng.eng() % 4;
        s = kind < 2 ? -1 : kind == 2 ? int32_t(pool + int64_t(rng.eng() % 1000)) : INT32_MAX;
      }
      p.kv_indices.push_back(s);
    }
    first += size_t(n);
  }
}

}  // namespace

Problem make_random_problem(const ProblemParams& prm) {
  const std::string where = "make_random_problem";
  if (prm.kv_lens.empty()) throw ProblemError(where + ": kv_lens is empty (need at least one request)");
  if (prm.extra_pages < 0) throw ProblemError(fmt::format("{}: extra_pages = {} must be >= 0", where, prm.extra_pages));
  Problem p;
  p.target = prm.target;
  p.q_dtype = prm.q_dtype;
  p.kv_dtype = prm.kv_ds_mla ? DType::fp8 : prm.kv_dtype;
  p.kv_ds_mla = prm.kv_ds_mla;
  p.heads = prm.heads;
  p.qseqlen = prm.qseqlen;
  p.page_size = prm.page_size;
  p.sm_scale = prm.sm_scale;
  p.q_scale = prm.q_scale;
  p.kv_scale = prm.kv_scale;
  p.logit_cap = prm.logit_cap;
  p.return_lse = prm.return_lse;
  p.sparse = prm.sparse;
  check_metadata(p, where);
  if (prm.sparse && (!prm.shared.empty() || prm.peak_tokens > 0))
    throw ProblemError(where + ": sparse problems have no shared prefixes or peaked scores");

  const int batch = int(prm.kv_lens.size());
  p.qo_indptr.resize(batch + 1);
  p.kv_indptr.resize(batch + 1);
  p.kv_last_page_lens.resize(batch);
  int64_t used = 0;
  for (int b = 0; b < batch; ++b) {
    int len = prm.kv_lens[b];
    if (len < prm.qseqlen)
      throw ProblemError(fmt::format("{}: kv_lens[{}] = {} < qseqlen = {} (allowed: kv_len >= qseqlen)", where, b, len, prm.qseqlen));
    int pages = (len + prm.page_size - 1) / prm.page_size;
    p.qo_indptr[b + 1] = (b + 1) * prm.qseqlen;
    used += pages;
    if (used > INT32_MAX) throw ProblemError(fmt::format("{}: {} pages exceed the int32 range", where, used));
    p.kv_indptr[b + 1] = int32_t(used);
    p.kv_last_page_lens[b] = len - (pages - 1) * prm.page_size;
  }
  const int64_t num_pages = prm.sparse ? sparse_pool(prm, used, where) : used + prm.extra_pages;

  // Page ids: a shuffled permutation of all pages, the first `used` handed out in order, so
  // requests own scattered, non-sequential pages and some pages are never referenced.
  Normal rng(prm.seed);
  std::vector<int32_t> perm(num_pages);
  for (int64_t i = 0; i < num_pages; ++i) perm[i] = int32_t(i);
  for (int64_t i = num_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.eng() % uint64_t(i + 1)]);  // Fisher-Yates
  if (prm.sparse) sparse_rows(p, prm, perm, rng);
  else p.kv_indices.assign(perm.begin(), perm.begin() + used);
  for (size_t k = 0; k < prm.shared.size(); ++k) {
    const ProblemParams::Shared& sh = prm.shared[k];
    auto bad = [&](const std::string& what) {
      throw ProblemError(fmt::format("{}: shared[{}] (first {}, count {}, tokens {}): {}", where, k, sh.first, sh.count,
                                     sh.tokens, what));
    };
    if (sh.first < 0 || sh.count < 2 || sh.first + sh.count > batch)
      bad(fmt::format("requests outside the batch (allowed: first >= 0, count >= 2, first + count <= {})", batch));
    if (sh.tokens < prm.page_size || sh.tokens % prm.page_size)
      bad(fmt::format("tokens must be a positive multiple of page_size = {}", prm.page_size));
    const int pages = sh.tokens / prm.page_size;
    for (int b = sh.first; b < sh.first + sh.count; ++b) {
      if (sh.tokens > prm.kv_lens[b]) bad(fmt::format("kv_lens[{}] = {} is shorter than the prefix", b, prm.kv_lens[b]));
      for (int i = 0; i < pages; ++i) p.kv_indices[size_t(p.kv_indptr[b] + i)] = p.kv_indices[size_t(p.kv_indptr[sh.first] + i)];
    }
  }

  p.q.shape = {size_t(batch) * prm.qseqlen, size_t(prm.heads), size_t(kQkDim)};
  p.kv.shape = {size_t(num_pages), size_t(prm.page_size), size_t(p.kv_row_elems())};
  fill_normal(p.q, prm.q_dtype, prm.target, rng);
  if (p.kv_ds_mla) fill_ds_mla(p.kv, prm.ds_mla_pow2_scales, rng);
  else fill_normal(p.kv, prm.kv_dtype, prm.target, rng);
  if (prm.peak_tokens > 0) add_peaks(p, prm, where);
  check_tensors(p, where);
  return p;
}

}  // namespace mla::rt
