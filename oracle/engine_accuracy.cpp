#include "oracle/engine_accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>

#include "runtime/emulator_backend.h"

namespace mla::oracle {

std::vector<EngineFamily> engine_families() {
  using rt::DType;
  using rt::Target;
  // Requests of 2 tokens to 68K (Kimi-K3's long context): one batch per family, so one
  // reference and one launch per kernel. qseqlen > 1 needs kv_len >= qseqlen.
  auto lens = [](int qs) { return std::vector<int>{std::max(2, qs), 611, 8190, 68000}; };
  struct Shape {
    Target t;
    DType q, kv;
    int heads, qs;
    const char* who;
  };
  const Shape shapes[] = {
      {Target::gfx950, DType::fp8, DType::fp8, 12, 1, "Kimi-K3 TP8, MI355X (native 12 heads; aiter: padded to 16)"},
      {Target::gfx950, DType::fp8, DType::fp8, 16, 1, "DeepSeek-V3 TP8 / 12 heads padded, MI355X"},
      {Target::gfx942, DType::fp8, DType::fp8, 16, 1, "DeepSeek-V3 TP8, MI300X"},
      {Target::gfx950, DType::fp8, DType::fp8, 16, 2, "MTP 1 draft token, MI355X"},
      {Target::gfx942, DType::fp8, DType::fp8, 16, 2, "MTP 1 draft token, MI300X"},
      {Target::gfx950, DType::fp8, DType::fp8, 16, 4, "MTP padded to 4 rows, MI355X"},
      {Target::gfx942, DType::fp8, DType::fp8, 16, 4, "MTP padded to 4 rows, MI300X"},
      {Target::gfx950, DType::bf16, DType::fp8, 16, 1, "bf16 q, fp8 KV cache (vLLM), MI355X"},
      {Target::gfx942, DType::bf16, DType::fp8, 16, 1, "Kimi-K2.7 TP4, MI300X"},
  };
  std::vector<EngineFamily> out;
  uint64_t seed = 3201;
  for (const Shape& s : shapes)
    for (bool peaked : {false, true}) {
      EngineFamily f;
      f.target = s.t;
      f.q_dtype = s.q;
      f.kv_dtype = s.kv;
      f.heads = s.heads;
      f.qseqlen = s.qs;
      f.peaked = peaked;
      f.peak_tokens = peaked ? kPeakTokens : 0;
      f.peak_spread = kPeakSpread;
      f.kv_lens = lens(s.qs);
      f.seed = seed++;
      f.who = s.who;
      f.name = fmt::format("{} {}/{} h{} qs{} {}", rt::name(s.t), rt::name(s.q), rt::name(s.kv), s.heads, s.qs,
                           peaked ? "peaked" : "flat");
      out.push_back(std::move(f));
    }
  return out;
}

rt::ProblemParams engine_problem_params(const EngineFamily& f) {
  rt::ProblemParams p;
  p.target = f.target;
  p.q_dtype = f.q_dtype;
  p.kv_dtype = f.kv_dtype;
  p.heads = f.heads;
  p.qseqlen = f.qseqlen;
  p.page_size = 1;
  p.kv_lens = f.kv_lens;
  p.seed = f.seed;
  p.return_lse = true;
  p.extra_pages = 7;
  p.peak_tokens = f.peaked ? f.peak_tokens : 0;
  p.peak_spread = f.peak_spread;
  return p;
}

Figures figures_of(const ref::Reference& want, const std::vector<uint16_t>& o_bits, const std::vector<float>& lse) {
  ref::Compare c = ref::compare(want, o_bits, nullptr);
  Figures f;
  f.d = c.d;
  f.max_err_pct = c.max_abs_ref > 0 ? 100.0 * c.max_abs_err / c.max_abs_ref : 0.0;
  f.unwritten = c.unwritten;
  f.nonfinite = c.nonfinite;
  if (!lse.empty()) {
    if (lse.size() != want.lse.size())
      throw std::invalid_argument(fmt::format("figures_of: lse has {} rows, the reference {}", lse.size(), want.lse.size()));
    for (size_t i = 0; i < lse.size(); ++i) {
      if (std::isnan(lse[i])) continue;  // no lse for this row
      ++f.lse_rows;
      if (!std::isfinite(lse[i])) {
        ++f.nonfinite;
        continue;
      }
      f.lse_err = std::max(f.lse_err, std::fabs(double(lse[i]) - want.lse[i]));
    }
  }
  return f;
}

Figures figures_of(const ref::Reference& want, const ref::Reference& got) {
  if (got.o.size() != want.o.size() || got.lse.size() != want.lse.size())
    throw std::invalid_argument("figures_of: the model's layout differs from the reference's");
  Figures f;
  double xy = 0, xx_yy = 0, max_ref = 0, max_err = 0;
  for (size_t i = 0; i < want.o.size(); ++i) {
    const double x = got.o[i], y = want.o[i];
    xy += x * y;
    xx_yy += x * x + y * y;
    max_ref = std::max(max_ref, std::fabs(y));
    max_err = std::max(max_err, std::fabs(x - y));
  }
  f.d = xx_yy > 0 ? 1.0 - 2.0 * xy / xx_yy : 0.0;
  f.max_err_pct = max_ref > 0 ? 100.0 * max_err / max_ref : 0.0;
  f.lse_err = 0;
  for (size_t i = 0; i < want.lse.size(); ++i) f.lse_err = std::max(f.lse_err, std::fabs(got.lse[i] - want.lse[i]));
  f.lse_rows = want.lse.size();
  return f;
}

FpModel fp8_p_model(const rt::Problem& p) {
  const int H = p.heads, Q = p.qseqlen;
  FpModel out;
  for (ref::Reference* r : {&out.rounded_sum, &out.exact_sum}) {
    r->rows = p.rows();
    r->heads = H;
    r->o.assign(size_t(r->rows) * H * 512, 0.0);
    r->lse.assign(size_t(r->rows) * H, 0.0);
  }
  // fp8 e4m3's 3 mantissa bits, round to nearest even, exponent unbounded.
  auto round_p = [](double x) {
    if (x == 0) return 0.0;
    const double quantum = std::ldexp(1.0, std::ilogb(x) - 3);
    return std::nearbyint(x / quantum) * quantum;
  };
  std::vector<double> v(512);
  for (int b = 0; b < p.batch(); ++b) {
    const int len = p.kv_len(b), row0 = p.qo_indptr[b];
    std::vector<double> s = ref::scores(p, b);
    std::vector<double> sum8(size_t(Q) * H, 0.0), sum(size_t(Q) * H, 0.0);
    for (int m = 0; m < Q * H; ++m) {
      double* sm = &s[size_t(m) * len];
      const int vis = len - Q + m / H + 1;
      double mx = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < vis; ++t) mx = std::max(mx, sm[t]);
      for (int t = 0; t < vis; ++t) {
        const double e = std::exp(sm[t] - mx);
        sum[m] += e;
        sm[t] = round_p(e);
        sum8[m] += sm[t];
      }
      const size_t at = size_t(row0 + m / H) * H + m % H;
      out.rounded_sum.lse[at] = mx + std::log(sum8[m]);
      out.exact_sum.lse[at] = mx + std::log(sum[m]);
    }
    for (int t = 0; t < len; ++t) {
      for (int d = 0; d < 512; ++d) v[d] = ref::decode(p.kv.bits(p.kv_elem(b, t, d)), p.kv_dtype, p.target);
      for (int m = 0; m < Q * H; ++m) {
        if (t >= len - Q + m / H + 1) continue;
        const double p8 = s[size_t(m) * len + t] * p.kv_scale;
        if (p8 == 0) continue;
        const size_t at = (size_t(row0 + m / H) * H + m % H) * 512;
        const double w8 = p8 / sum8[m], w = p8 / sum[m];
        double *o8 = &out.rounded_sum.o[at], *o = &out.exact_sum.o[at];
        for (int d = 0; d < 512; ++d) {
          o8[d] += w8 * v[d];
          o[d] += w * v[d];
        }
      }
    }
  }
  return out;
}

double median_top_mass(const rt::Problem& p, int b, int k) {
  const int H = p.heads, Q = p.qseqlen;
  if (b < 0 || b >= p.batch()) throw std::invalid_argument(fmt::format("median_top_mass: request {} of {}", b, p.batch()));
  std::vector<double> shares;
  {
    const int len = p.kv_len(b);
    std::vector<double> s = ref::scores(p, b);
    for (int m = 0; m < Q * H; ++m) {
      const int vis = len - Q + m / H + 1;
      std::vector<double> e(s.begin() + size_t(m) * len, s.begin() + size_t(m) * len + vis);
      const double mx = *std::max_element(e.begin(), e.end());
      double total = 0;
      for (double& x : e) total += (x = std::exp(x - mx));
      const int kk = std::min(k, vis);
      std::partial_sort(e.begin(), e.begin() + kk, e.end(), std::greater<double>());
      double top = 0;
      for (int i = 0; i < kk; ++i) top += e[i];
      shares.push_back(top / total);
    }
  }
  std::sort(shares.begin(), shares.end());
  return shares.empty() ? 0.0 : shares[shares.size() / 2];
}

const AiterKernel* aiter_kernel_for(const EngineFamily& f, const std::vector<AiterKernel>& catalog) {
  const emu::Gfx gfx = f.target == rt::Target::gfx942 ? emu::Gfx::gfx942 : emu::Gfx::gfx950;
  const AiterKernel* best = nullptr;
  for (const AiterKernel& k : catalog) {
    if (k.gfx != gfx || !k.ps || k.prefill || !k.causal || k.lse || k.cprr) continue;
    if (k.q_type != rt::name(f.q_dtype) || k.kv_type != rt::name(f.kv_dtype)) continue;
    if (k.gqa < f.heads || std::max(1, k.qseqlen) < f.qseqlen || !unsupported_reason(k).empty()) continue;
    if (!best || std::pair(k.gqa, k.qseqlen) < std::pair(best->gqa, best->qseqlen)) best = &k;
  }
  return best;
}

EngineRow run_engine_family(const EngineFamily& f, const EngineOptions& opts) {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  EngineRow row;
  row.family = f;
  rt::Problem p = rt::make_random_problem(engine_problem_params(f));
  auto t0 = clock::now();
  const ref::Reference want = ref::run_reference(p);
  row.seconds_reference = secs(t0);
  {
    FpModel m = fp8_p_model(p);
    row.model = figures_of(want, m.rounded_sum);
    row.model_exact_sum = figures_of(want, m.exact_sum);
  }
  int longest = 0;
  for (int b = 0; b < p.batch(); ++b)
    if (p.kv_len(b) > p.kv_len(longest)) longest = b;
  row.top_share = median_top_mass(p, longest, kPeakTokens);  // the same k for flat families

  if (opts.ours) {
    // Our lse variant where the catalog has one (bf16 q has none in the default catalog).
    rt::Problem mine = p;
    std::optional<rt::Selection> sel;
    for (bool lse : {true, false}) {
      mine.return_lse = lse;
      try {
        sel = opts.ours->select(rt::shape_of(mine));
        break;
      } catch (const std::exception& e) {
        row.ours_error = e.what();
      }
    }
    if (sel) {
      row.ours_error.clear();
      row.ours_kernel = sel->decode.name;
      try {
        t0 = clock::now();
        rt::DecodeResult r = rt::run_decode_on_emulator(mine, *sel);
        row.seconds_ours = secs(t0);
        row.ours = figures_of(want, r.o, mine.return_lse ? r.lse : std::vector<float>{});
        row.ours_ran = true;
      } catch (const std::exception& e) {
        row.ours_error = e.what();
      }
    }
  }

  if (!opts.aiter.empty()) {
    const AiterKernel* k = aiter_kernel_for(f, opts.aiter);
    if (!k) {
      row.aiter_error = "no persistent aiter kernel of this shape";
    } else {
      row.aiter_kernel = k->stem();
      RunConfig cfg;
      cfg.kv_split = opts.aiter_kv_split;
      cfg.problem = &p;
      cfg.reference = &want;
      cfg.keep_outputs = true;
      t0 = clock::now();
      try {
        RunResult r = run_kernel(*k, cfg);
        row.seconds_aiter = secs(t0);
        row.aiter_findings = r.findings;
        if (r.ran) {
          row.aiter_ran = true;
          row.aiter = figures_of(want, r.o_bits, r.lse);
        } else {
          row.aiter_error = r.error_rule + ": " + r.error;
        }
      } catch (const std::exception& e) {
        row.aiter_error = e.what();
      }
    }
  }
  return row;
}

}  // namespace mla::oracle
