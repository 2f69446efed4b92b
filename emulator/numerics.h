// Floating-point formats and VALU transcendental semantics of gfx942 (CDNA3) and gfx950 (CDNA4).
//
// Every function here is a pure function of its arguments; the caller (the executor) picks the
// format for the target (FNUZ on gfx942, OCP on gfx950) and passes the MODE denormal bit.
// Where the rules come from and which reference-emulator disagreements were resolved how is
// written down in docs/emulator-numerics.md.
#pragma once
#include <cstdint>

namespace mla::num {

// The two 8-bit float families.
//  FNUZ (gfx942): e4m3 bias 8, max 240; e5m2 bias 16, max 57344. 0x80 is the only NaN, there is
//                 no negative zero and no infinity.
//  OCP  (gfx950): e4m3fn bias 7, max 448, 0x7f/0xff NaN, no infinity; e5m2 bias 15, max 57344,
//                 has +-inf (0x7c/0xfc) and NaNs 0x7d-0x7f/0xfd-0xff.
enum class Fp8Fmt { FNUZ, OCP };

// Decode one byte. Exact (every fp8/bf8 value is representable in f32, subnormals included).
float fp8_to_f32(uint8_t v, Fp8Fmt f);  // e4m3
float bf8_to_f32(uint8_t v, Fp8Fmt f);  // e5m2

// Encode as v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32 do: round to nearest even, 8-bit subnormals kept.
// clamp = saturate: finite values whose rounded magnitude exceeds the format's max (and
// infinities) become +-max. When clear they become the format's overflow value: NaN (0x80) for
// FNUZ, NaN (S.1111.111) for OCP e4m3fn, +-inf for OCP e5m2. The executor should pass
// (instruction clamp bit || MODE.FP16_OVFL); the hardware default (both clear) does not
// saturate. NaN input gives the format's NaN (0x80 FNUZ, sign|0x7f OCP).
uint8_t f32_to_fp8(float x, Fp8Fmt f, bool clamp);
uint8_t f32_to_bf8(float x, Fp8Fmt f, bool clamp);

// Stochastic-rounding encode (v_cvt_sr_fp8_f32 / v_cvt_sr_bf8_f32): `rnd` is the random dword
// the instruction takes as src1. See numerics.cpp for the exact rule.
uint8_t f32_to_fp8_sr(float x, uint32_t rnd, Fp8Fmt f, bool clamp);
uint8_t f32_to_bf8_sr(float x, uint32_t rnd, Fp8Fmt f, bool clamp);

// bf16 and IEEE half.
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16_rne(float x);  // NaN stays NaN (quiet), RNE otherwise
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16_rne(float x);   // IEEE RNE, overflow to inf, NaN quiet

// E8M0 scale (v_mfma_scale_*): 2^(v-127), 0xff = NaN.
float e8m0_to_f32(uint8_t v);
double e8m0_to_f64(uint8_t v);

// Transcendentals as the VALU computes them (single precision, ~1 ulp).
// denorm = MODE.FP_DENORM for f32 (true: denormals kept on input and output; false: flushed).
float exp2_f32(float x, bool denorm);  // v_exp_f32
float log2_f32(float x, bool denorm);  // v_log_f32
float rcp_f32(float x, bool denorm);   // v_rcp_f32
float rsq_f32(float x, bool denorm);   // v_rsq_f32
float sqrt_f32(float x, bool denorm);  // v_sqrt_f32

// Bit helpers.
uint32_t f32_bits(float x);
float bits_f32(uint32_t b);
// Flushes an f32 subnormal to a zero of the same sign.
float flush_denorm(float x);

}  // namespace mla::num
