// Floating-point formats and VALU transcendentals of gfx942 / gfx950. See numerics.h for the
// interface and docs/emulator-numerics.md for where each rule comes from.
#include "numerics.h"

#include <bit>
#include <cmath>
#include <cstdint>

namespace mla::num {

uint32_t f32_bits(float x) { return std::bit_cast<uint32_t>(x); }
float bits_f32(uint32_t b) { return std::bit_cast<float>(b); }

float flush_denorm(float x) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0) return bits_f32(b & 0x80000000u);
  return x;
}

namespace {

constexpr uint32_t kQuietNan = 0x7fc00000u;

// A small binary float format: sign, `ebits` exponent bits, `mbits` mantissa bits, `bias`.
// Which codes are inf/NaN is decided per family in decode8/encode8.
struct Format {
  int ebits, mbits, bias;
  double max;  // largest finite magnitude
};

constexpr Format kFnuzE4M3{4, 3, 8, 240.0};
constexpr Format kFnuzE5M2{5, 2, 16, 57344.0};
constexpr Format kOcpE4M3{4, 3, 7, 448.0};
constexpr Format kOcpE5M2{5, 2, 15, 57344.0};
constexpr Format kF16{5, 10, 15, 65504.0};

// Result of rounding a finite non-negative magnitude to a format (RNE, subnormals kept).
struct Rounded {
  bool overflow;   // the rounded value is beyond `max`
  uint32_t code;   // exponent and mantissa fields (no sign) when !overflow
};

// Rounds |ax| (finite, >= 0) to the nearest value of `fmt` (ties to even), treating the
// exponent range as unbounded above so that overflow is decided on the rounded value, the way
// IEEE 754 and the OCP 8-bit spec define it (e.g. 464 -> 448 in e4m3fn: a tie rounded to the
// even mantissa, while 465 -> 480 overflows).
Rounded round_to_format(double ax, const Format& fmt) {
  const int emin = 1 - fmt.bias;  // exponent of the smallest normal
  if (ax == 0.0) return {false, 0};
  int e2 = 0;
  std::frexp(ax, &e2);  // ax = f * 2^e2, f in [0.5, 1)
  int e = e2 - 1;       // ax in [2^e, 2^(e+1))
  if (e < emin) e = emin;  // subnormal range: fixed quantum
  const double quantum = std::ldexp(1.0, e - fmt.mbits);
  const double q = ax / quantum;  // exact: power-of-two scaling of a double
  double n = std::floor(q);
  const double frac = q - n;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
  const double r = n * quantum;
  if (r > fmt.max) return {true, 0};
  if (r == 0.0) return {false, 0};
  const double min_normal = std::ldexp(1.0, emin);
  if (r < min_normal) {
    // Subnormal: exponent field 0, mantissa = r / 2^(emin - mbits).
    return {false, static_cast<uint32_t>(r / std::ldexp(1.0, emin - fmt.mbits))};
  }
  int re2 = 0;
  std::frexp(r, &re2);
  const int re = re2 - 1;
  const uint32_t mant = static_cast<uint32_t>(std::ldexp(r, fmt.mbits - re)) - (1u << fmt.mbits);
  const uint32_t efield = static_cast<uint32_t>(re + fmt.bias);
  return {false, (efield << fmt.mbits) | mant};
}

// Largest finite code (no sign) of an 8-bit format.
uint8_t max_code(const Format& fmt, Fp8Fmt f) {
  // FNUZ uses every exponent for finite values: max = all ones (0x7f).
  // OCP e4m3fn: 0x7f is NaN, max is 0x7e. OCP e5m2: exponent 31 is inf/NaN, max is 0x7b.
  if (f == Fp8Fmt::FNUZ) return 0x7f;
  return fmt.ebits == 4 ? 0x7e : 0x7b;
}

float decode8(uint8_t v, const Format& fmt, Fp8Fmt f) {
  const uint32_t sign = v >> 7;
  const uint32_t mmask = (1u << fmt.mbits) - 1;
  const uint32_t emask = (1u << fmt.ebits) - 1;
  const uint32_t efield = (v >> fmt.mbits) & emask;
  const uint32_t mant = v & mmask;
  if (f == Fp8Fmt::FNUZ) {
    // 0x80 ("negative zero") is the only NaN; there is no infinity.
    if (v == 0x80) return bits_f32(0xffc00000u);
  } else if (fmt.ebits == 4) {
    if ((v & 0x7f) == 0x7f) return bits_f32((sign << 31) | kQuietNan);  // e4m3fn: S.1111.111
  } else if (efield == emask) {
    if (mant == 0) return bits_f32((sign << 31) | 0x7f800000u);  // e5m2 infinity
    return bits_f32((sign << 31) | kQuietNan);
  }
  double mag;
  if (efield == 0)
    mag = std::ldexp(static_cast<double>(mant), 1 - fmt.bias - fmt.mbits);
  else
    mag = std::ldexp(static_cast<double>(mant | (1u << fmt.mbits)),
                     static_cast<int>(efield) - fmt.bias - fmt.mbits);
  const float r = static_cast<float>(mag);  // exact: <= 4 significant bits, in f32 normal range
  return sign ? -r : r;
}

uint8_t encode8(float x, const Format& fmt, Fp8Fmt f, bool saturate) {
  const uint32_t b = f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((b >> 31) << 7);
  const bool e5 = fmt.ebits == 5;
  const bool has_inf = f == Fp8Fmt::OCP && e5;
  // The value a non-saturating conversion produces when the magnitude is too large.
  auto overflow_code = [&]() -> uint8_t {
    if (f == Fp8Fmt::FNUZ) return 0x80;              // the NaN; no inf to go to
    if (has_inf) return static_cast<uint8_t>(sign | 0x7c);  // OCP e5m2: +-inf
    return static_cast<uint8_t>(sign | 0x7f);        // OCP e4m3fn: NaN (no inf)
  };
  if (std::isnan(x)) {
    if (f == Fp8Fmt::FNUZ) return 0x80;
    return static_cast<uint8_t>(sign | 0x7f);  // e4m3fn NaN S.1111.111; e5m2 NaN S.11111.11
  }
  if (std::isinf(x)) {
    if (saturate) return static_cast<uint8_t>(sign | max_code(fmt, f));
    return overflow_code();
  }
  const Rounded r = round_to_format(std::fabs(static_cast<double>(x)), fmt);
  if (r.overflow) {
    if (saturate) return static_cast<uint8_t>(sign | max_code(fmt, f));
    return overflow_code();
  }
  if (r.code == 0) {
    // FNUZ has no negative zero (0x80 is NaN): a negative value that rounds to zero is +0.
    return f == Fp8Fmt::FNUZ ? 0x00 : sign;
  }
  return static_cast<uint8_t>(sign | r.code);
}

const Format& fp8_format(Fp8Fmt f) { return f == Fp8Fmt::FNUZ ? kFnuzE4M3 : kOcpE4M3; }
const Format& bf8_format(Fp8Fmt f) { return f == Fp8Fmt::FNUZ ? kFnuzE5M2 : kOcpE5M2; }

// Stochastic rounding as the CDNA3/CDNA4 pseudocode of V_CVT_SR_FP8_F32 / V_CVT_SR_BF8_F32
// writes it: add the top `rbits` bits of the random dword to the 23-bit f32 mantissa, wrapping
// modulo 2^23 (the exponent is not incremented: "wrap around on overflow"), then convert with
// the normal RNE conversion. Literal reading of the ISA text; not checked against hardware or
// golden vectors.
float add_stochastic(float x, uint32_t rnd, int rbits) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;  // inf/NaN unchanged
  const uint32_t mant = ((b & 0x007fffffu) + (rnd >> (32 - rbits))) & 0x007fffffu;
  return bits_f32((b & 0xff800000u) | mant);
}

}  // namespace

float fp8_to_f32(uint8_t v, Fp8Fmt f) { return decode8(v, fp8_format(f), f); }
float bf8_to_f32(uint8_t v, Fp8Fmt f) { return decode8(v, bf8_format(f), f); }

uint8_t f32_to_fp8(float x, Fp8Fmt f, bool clamp) { return encode8(x, fp8_format(f), f, clamp); }
uint8_t f32_to_bf8(float x, Fp8Fmt f, bool clamp) { return encode8(x, bf8_format(f), f, clamp); }

uint8_t f32_to_fp8_sr(float x, uint32_t rnd, Fp8Fmt f, bool clamp) {
  return f32_to_fp8(add_stochastic(x, rnd, 20), f, clamp);  // S1[31:12]
}
uint8_t f32_to_bf8_sr(float x, uint32_t rnd, Fp8Fmt f, bool clamp) {
  return f32_to_bf8(add_stochastic(x, rnd, 21), f, clamp);  // S1[31:11]
}

float bf16_to_f32(uint16_t v) { return bits_f32(static_cast<uint32_t>(v) << 16); }

uint16_t f32_to_bf16_rne(float x) {
  const uint32_t b = f32_bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x0040);  // keep sign/payload, quiet
  // Round to nearest even on the 16 discarded bits; a carry into the exponent is the correct
  // rounding (up to infinity on overflow).
  const uint32_t rounding = 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding) >> 16);
}

float f16_to_f32(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v >> 15) << 31;
  const uint32_t e = (v >> 10) & 0x1f;
  const uint32_t m = v & 0x3ff;
  if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13));  // inf / NaN (payload kept)
  double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                      : std::ldexp(static_cast<double>(m | 0x400), static_cast<int>(e) - 25);
  const float r = static_cast<float>(mag);
  return sign ? -r : r;
}

uint16_t f32_to_f16_rne(float x) {
  const uint32_t b = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7e00 | ((b >> 13) & 0x3ff));
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7c00);
  const Rounded r = round_to_format(std::fabs(static_cast<double>(x)), kF16);
  if (r.overflow) return static_cast<uint16_t>(sign | 0x7c00);
  return static_cast<uint16_t>(sign | r.code);
}

float e8m0_to_f32(uint8_t v) {
  if (v == 0xff) return bits_f32(kQuietNan);
  return static_cast<float>(std::ldexp(1.0, static_cast<int>(v) - 127));  // 2^-127 is an f32 denormal: exact
}
double e8m0_to_f64(uint8_t v) {
  if (v == 0xff) return std::nan("");
  return std::ldexp(1.0, static_cast<int>(v) - 127);
}

// Transcendentals. v_exp_f32, v_log_f32, v_rcp_f32 (and v_rsq_f32, v_sqrt_f32) do not handle
// f32 denormals on gfx9: denormal inputs act as zero and denormal results are flushed to zero,
// whatever MODE.FP_DENORM says. LLVM relies on this: it wraps these instructions in scaling code
// whenever denormals must be honoured (SIISelLowering lowerFEXP2/lowerFLOG2/"v_rcp_f32 does not
// support denormals"), and both reference emulators behave this way. The `denorm` parameter is
// accepted so that callers pass MODE, but does not change the result.
namespace {
float quiet(float x) { return bits_f32(f32_bits(x) | 0x00400000u); }

// Rounds a double result to f32 and flushes an f32-denormal result.
float finish(double r) { return flush_denorm(static_cast<float>(r)); }
}  // namespace

float exp2_f32(float x, bool /*denorm*/) {
  if (std::isnan(x)) return quiet(x);
  x = flush_denorm(x);
  return finish(std::exp2(static_cast<double>(x)));
}

float log2_f32(float x, bool /*denorm*/) {
  if (std::isnan(x)) return quiet(x);
  x = flush_denorm(x);
  if (x == 0.0f) return -INFINITY;  // log(+-0) = -inf (denormals count as zero)
  if (x < 0.0f) return bits_f32(kQuietNan);
  return finish(std::log2(static_cast<double>(x)));
}

float rcp_f32(float x, bool /*denorm*/) {
  if (std::isnan(x)) return quiet(x);
  x = flush_denorm(x);
  return finish(1.0 / static_cast<double>(x));  // 1/+-0 = +-inf, 1/+-inf = +-0
}

float rsq_f32(float x, bool /*denorm*/) {
  if (std::isnan(x)) return quiet(x);
  x = flush_denorm(x);
  if (x < 0.0f) return bits_f32(kQuietNan);
  return finish(1.0 / std::sqrt(static_cast<double>(x)));  // rsq(+-0) = +-inf
}

float sqrt_f32(float x, bool /*denorm*/) {
  if (std::isnan(x)) return quiet(x);
  x = flush_denorm(x);
  if (x < 0.0f) return bits_f32(kQuietNan);
  return finish(std::sqrt(static_cast<double>(x)));
}

}  // namespace mla::num
