#include "tests/reference/mla_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace mla::ref {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// value = (-1)^s * 2^(E - bias) * (1 + M/8) for E > 0, 2^(1 - bias) * M/8 for E = 0.
double e4m3(uint8_t bits, int bias) {
  int s = bits >> 7, e = (bits >> 3) & 0xf, m = bits & 7;
  double mag = e == 0 ? std::ldexp(m / 8.0, 1 - bias) : std::ldexp(1.0 + m / 8.0, e - bias);
  return s ? -mag : mag;
}

}  // namespace

double decode_fp8_fnuz(uint8_t bits) {
  if (bits == 0x80) return kNaN;  // the only NaN; there is no -0 and no inf
  return e4m3(bits, 8);
}

double decode_fp8_ocp(uint8_t bits) {
  if ((bits & 0x7f) == 0x7f) return kNaN;  // S.1111.111; no inf
  return e4m3(bits, 7);
}

double decode_bf16(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double decode(uint16_t bits, rt::DType d, rt::Target t) {
  if (d == rt::DType::bf16) return decode_bf16(bits);
  return t == rt::Target::gfx942 ? decode_fp8_fnuz(uint8_t(bits)) : decode_fp8_ocp(uint8_t(bits));
}

uint16_t bf16_bits(double x) {
  if (std::isnan(x)) return 0x7fc0;
  // Round |x| on the bf16 grid of its binade (8 significant bits; subnormal grid below 2^-126)
  // directly from double, ties to even: no double rounding through float.
  double a = std::fabs(x), v = a;
  if (a != 0.0 && std::isfinite(a)) {
    int e = std::max(std::ilogb(a), -126);
    double quantum = std::ldexp(1.0, e - 7);
    v = std::nearbyint(a / quantum) * quantum;
  }
  float f = float(std::signbit(x) ? -v : v);  // exact: v is a bf16 value (or overflows to inf)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

double bf16_round(double x) { return decode_bf16(bf16_bits(x)); }

namespace {

// Element d of token t's fp8_ds_mla entry: latent d < 512 is its e4m3fn byte (OCP on every target,
// as FlashMLA writes it) times its 128-value tile's f32 scale; rope d >= 512 is bf16.
double ds_mla_value(const rt::Problem& p, int b, int t, int d, bool bf16) {
  const uint8_t* e = &p.kv.bytes[p.kv_elem(b, t, 0)];
  if (d >= 512) return decode_bf16(uint16_t(e[528 + 2 * (d - 512)] | (e[529 + 2 * (d - 512)] << 8)));
  float scale;
  std::memcpy(&scale, e + 512 + 4 * (d / 128), 4);
  const double v = decode_fp8_ocp(e[d]) * double(scale);
  return bf16 ? bf16_round(v) : v;
}

// Decoders by table: every raw code once (fp8: 256 codes; bf16: decoded on the fly).
struct Decoders {
  std::vector<double> qt, kt;
  explicit Decoders(const rt::Problem& p, bool ds_mla_bf16 = false)
      : qt(table(p.q_dtype, p.target)), kt(table(p.kv_dtype, p.target)), ds_mla_bf16(ds_mla_bf16) {}
  bool ds_mla_bf16;
  static std::vector<double> table(rt::DType d, rt::Target target) {
    std::vector<double> t;
    if (d == rt::DType::fp8) {
      t.resize(256);
      for (int c = 0; c < 256; ++c) t[c] = decode(uint16_t(c), d, target);
    }
    return t;
  }
  double q(const rt::Problem& p, size_t i) const { return qt.empty() ? decode_bf16(p.q.bits(i)) : qt[p.q.bits(i)]; }
  double kv(const rt::Problem& p, size_t i) const { return kt.empty() ? decode_bf16(p.kv.bits(i)) : kt[p.kv.bits(i)]; }
  double kv(const rt::Problem& p, int b, int t, int d) const {
    return p.kv_ds_mla ? ds_mla_value(p, b, t, d, ds_mla_bf16) : kv(p, p.kv_elem(b, t, d));
  }
};

double kv_value(const rt::Problem& p, int b, int t, int d) {
  return p.kv_ds_mla ? ds_mla_value(p, b, t, d, false) : decode(p.kv.bits(p.kv_elem(b, t, d)), p.kv_dtype, p.target);
}

std::vector<double> scores_with(const rt::Problem& p, int b, const Decoders& dec) {
  const int H = p.heads, Q = p.qseqlen, len = p.kv_len(b), row0 = p.qo_indptr[b];
  const double scale = p.sm_scale * p.q_scale * p.kv_scale;
  std::vector<double> qv(size_t(Q) * H * 576), kv(576), s(size_t(Q) * H * len);
  for (int r0 = 0; r0 < Q; ++r0)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < 576; ++d) qv[(size_t(r0) * H + h) * 576 + d] = dec.q(p, p.q_elem(row0 + r0, h, d));
  for (int t = 0; t < len; ++t) {
    if (p.masked(b, t)) {  // sparse: -1 or past the cache, never read
      for (int m = 0; m < Q * H; ++m) s[size_t(m) * len + t] = -std::numeric_limits<double>::infinity();
      continue;
    }
    for (int d = 0; d < 576; ++d) kv[d] = dec.kv(p, b, t, d);
    for (int m = 0; m < Q * H; ++m) {
      const double* q = &qv[size_t(m) * 576];
      double acc = 0.0;
      for (int d = 0; d < 576; ++d) acc += q[d] * kv[d];
      double x = scale * acc;
      if (p.logit_cap != 0.0) x = p.logit_cap * std::tanh(x / p.logit_cap);
      s[size_t(m) * len + t] = x;
    }
  }
  return s;
}

}  // namespace

std::vector<double> scores(const rt::Problem& p, int b) { return scores_with(p, b, Decoders(p)); }

Reference run_reference(const rt::Problem& p, const ReferenceOptions& opt) {
  const int H = p.heads, Q = p.qseqlen;
  Reference r;
  r.rows = p.rows();
  r.heads = H;
  r.o.assign(size_t(r.rows) * H * 512, 0.0);
  r.lse.assign(size_t(r.rows) * H, 0.0);
  const Decoders dec(p, opt.ds_mla_bf16);
  std::vector<double> kv(576), s;
  for (int b = 0; b < p.batch(); ++b) {
    const int len = p.kv_len(b), row0 = p.qo_indptr[b];
    // Pass 1: scores of every (row, head) against every token (invisible ones are skipped later).
    s = scores_with(p, b, dec);
    // Softmax per row over its visible prefix; lse = max + log(sum exp(s - max)).
    std::vector<int> visible(Q);
    for (int r0 = 0; r0 < Q; ++r0) visible[r0] = len - Q + r0 + 1;
    for (int m = 0; m < Q * H; ++m) {
      double* sm = &s[size_t(m) * len];
      int vis = visible[m / H];
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < vis; ++t) mx = std::max(mx, sm[t]);
      if (mx == -std::numeric_limits<double>::infinity()) {  // every token masked: o = 0, lse = -inf
        std::fill(sm, sm + vis, 0.0);
        r.lse[size_t(row0 + m / H) * H + m % H] = mx;
        continue;
      }
      double sum = 0.0;
      for (int t = 0; t < vis; ++t) {
        sm[t] = std::exp(sm[t] - mx);
        sum += sm[t];
      }
      for (int t = 0; t < vis; ++t) sm[t] /= sum;
      r.lse[size_t(row0 + m / H) * H + m % H] = mx + std::log(sum);
    }
    // Pass 2: o = kv_scale * sum_t p_t * v_t.
    for (int t = 0; t < len; ++t) {
      if (p.masked(b, t)) continue;
      for (int d = 0; d < 512; ++d) kv[d] = dec.kv(p, b, t, d);
      for (int m = 0; m < Q * H; ++m) {
        if (t >= visible[m / H]) continue;
        double pt = s[size_t(m) * len + t] * p.kv_scale;
        double* o = &r.o[(size_t(row0 + m / H) * H + m % H) * 512];
        for (int d = 0; d < 512; ++d) o[d] += pt * kv[d];
      }
    }
  }
  return r;
}

namespace {

// Softmax-weighted sum of one (request, q row, head) over tokens [t0, t1) (already clipped to
// the visible range, non-empty): o normalised, returns lse = log(sum exp(s)).
double attend_range(const rt::Problem& p, int b, int r, int h, int t0, int t1, double* o) {
  const double scale = p.sm_scale * p.q_scale * p.kv_scale;
  const int row = p.qo_indptr[b] + r;
  std::vector<double> q(576), s(size_t(t1 - t0));
  for (int d = 0; d < 576; ++d) q[d] = decode(p.q.bits(p.q_elem(row, h, d)), p.q_dtype, p.target);
  double mx = -std::numeric_limits<double>::infinity();
  for (int t = t0; t < t1; ++t) {
    double acc = 0.0;
    for (int d = 0; d < 576; ++d) acc += q[d] * kv_value(p, b, t, d);
    double x = scale * acc;
    if (p.logit_cap != 0.0) x = p.logit_cap * std::tanh(x / p.logit_cap);
    s[t - t0] = x;
    mx = std::max(mx, x);
  }
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::fill(o, o + 512, 0.0);
  for (int t = t0; t < t1; ++t) {
    double w = s[t - t0] / sum * p.kv_scale;
    for (int d = 0; d < 512; ++d) o[d] += w * kv_value(p, b, t, d);
  }
  return mx + std::log(sum);
}

}  // namespace

SplitReference run_split_reference(const rt::Problem& p, const rt::Plan& plan) {
  const int H = p.heads, Q = p.qseqlen, M = H * Q;
  if (plan.rows != M) throw std::invalid_argument(fmt::format("run_split_reference: plan has {} rows, the problem {}", plan.rows, M));
  SplitReference sr;
  sr.num_partials = plan.num_partials;
  sr.rows_per_request = M;
  sr.partial_o.assign(size_t(plan.num_partials) * M * 512, 0.0);
  sr.partial_lse.assign(size_t(plan.num_partials) * M, 0.0);
  Reference& out = sr.merged;
  out.rows = p.rows();
  out.heads = H;
  out.o.assign(size_t(out.rows) * H * 512, 0.0);
  out.lse.assign(size_t(out.rows) * H, 0.0);
  for (const rt::WorkUnit& u : plan.units) {
    const int m0 = u.row_group * plan.rows_per_group, m1 = std::min(M, m0 + plan.rows_per_group);
    for (int m = m0; m < m1; ++m) {
      const int r = m / H, h = m % H;
      const int t1 = std::min(u.kv_end, u.kv_len - Q + r + 1);
      if (t1 <= u.kv_start) throw std::logic_error("run_split_reference: a unit has a row with no visible token");
      if (u.partial < 0) {
        const size_t i = size_t(u.qo_row + r) * H + h;
        out.lse[i] = attend_range(p, u.batch, r, h, u.kv_start, t1, &out.o[i * 512]);
      } else {
        const size_t i = size_t(u.partial) * M + m;
        sr.partial_lse[i] = attend_range(p, u.batch, r, h, u.kv_start, t1, &sr.partial_o[i * 512]);
      }
    }
  }
  // Reduce: o = sum_k w_k o_k / sum_k w_k with w_k = exp(lse_k - max lse).
  for (const rt::ReduceEntry& e : plan.reduces)
    for (int m = 0; m < M; ++m) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int k = 0; k < e.num_splits; ++k) mx = std::max(mx, sr.partial_lse[size_t(e.first_partial + k) * M + m]);
      double wsum = 0.0;
      const size_t i = size_t(e.qo_row + m / H) * H + m % H;
      for (int k = 0; k < e.num_splits; ++k) {
        const size_t pk = size_t(e.first_partial + k) * M + m;
        double w = std::exp(sr.partial_lse[pk] - mx);
        wsum += w;
        for (int d = 0; d < 512; ++d) out.o[i * 512 + d] += w * sr.partial_o[pk * 512 + d];
      }
      for (int d = 0; d < 512; ++d) out.o[i * 512 + d] /= wsum;
      out.lse[i] = mx + std::log(wsum);
    }
  return sr;
}

bool Compare::passes(double max_d, double max_rel, double max_lse_err) const {
  if (!clean() || !(d <= max_d) || !(max_abs_err <= max_rel * max_abs_ref)) return false;
  return !lse_checked || lse_max_abs_err <= max_lse_err;
}

std::string Compare::summary() const {
  std::string s = fmt::format("d={:.3e} max_abs_err={:.4g} max|ref|={:.4g} ({:.3f}%) unwritten={} nonfinite={}", d, max_abs_err,
                              max_abs_ref, max_abs_ref > 0 ? 100.0 * max_abs_err / max_abs_ref : 0.0, unwritten, nonfinite);
  if (first_bad >= 0) s += fmt::format(" first_bad={}", first_bad);
  if (lse_checked) s += fmt::format(" lse_max_abs_err={:.3e} lse_nonfinite={}", lse_max_abs_err, lse_nonfinite);
  return s;
}

Compare compare(const Reference& ref, const std::vector<uint16_t>& o_bits, const std::vector<float>* lse) {
  if (o_bits.size() != ref.o.size())
    throw std::invalid_argument(fmt::format("compare: o has {} elements, the reference {}", o_bits.size(), ref.o.size()));
  if (lse && lse->size() != ref.lse.size())
    throw std::invalid_argument(fmt::format("compare: lse has {} elements, the reference {}", lse->size(), ref.lse.size()));
  Compare c;
  c.count = o_bits.size();
  double xy = 0.0, xx_yy = 0.0;
  for (size_t i = 0; i < o_bits.size(); ++i) {
    double y = ref.o[i];
    c.max_abs_ref = std::max(c.max_abs_ref, std::fabs(y));
    if (o_bits[i] == kUnwrittenBf16) {
      ++c.unwritten;
      if (c.first_bad < 0) c.first_bad = long(i);
      continue;
    }
    double x = decode_bf16(o_bits[i]);
    if (!std::isfinite(x)) {
      ++c.nonfinite;
      if (c.first_bad < 0) c.first_bad = long(i);
      continue;
    }
    xy += x * y;
    xx_yy += x * x + y * y;
    c.max_abs_err = std::max(c.max_abs_err, std::fabs(x - y));
  }
  c.d = xx_yy > 0 ? 1.0 - 2.0 * xy / xx_yy : 0.0;
  if (lse) {
    c.lse_checked = true;
    for (size_t i = 0; i < lse->size(); ++i) {
      double x = (*lse)[i];
      if (x == -std::numeric_limits<double>::infinity() && ref.lse[i] == x) continue;  // a row with no token
      if (!std::isfinite(x)) {
        ++c.lse_nonfinite;
        continue;
      }
      c.lse_max_abs_err = std::max(c.lse_max_abs_err, std::fabs(x - ref.lse[i]));
    }
  }
  return c;
}

}  // namespace mla::ref
