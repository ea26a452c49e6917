// 16-lane AVX-512 versions of the vector math the own GEMM's epilogue spends its time in (GELU with
// erf, the BERT/ViT/Whisper/ConvNeXt activation): the same formulas and coefficients as
// vecmath_avx2.h, operation for operation, so the two agree except where vecmath_avx2.h uses the
// 12-bit reciprocal estimate (rcpps) and this file the 14-bit one (vrcp14ps), both refined the same
// way: results may differ in the last bit or two (the accuracy bounds of vecmath_test.cpp hold for
// both). Measured: the AVX2 version on both halves of a zmm made the GELU epilogue cost 20-25% of a
// BERT-size GEMM; this one halves that.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "vecmath_avx512.h needs -mavx512f -mavx512dq (include it only from *_avx512.cpp files)"
#endif

#include <immintrin.h>

#include "cpu/vecmath_avx2.h"  // the coefficients

namespace verifuse::kernels::cpu::avx512 {

#define VF_VEC512_INLINE inline __attribute__((always_inline))

namespace detail {

namespace c = avx2::detail;

VF_VEC512_INLINE __m512 splat(float v) { return _mm512_set1_ps(v); }
VF_VEC512_INLINE __m512 absBits(__m512 x) { return _mm512_andnot_ps(_mm512_set1_ps(-0.0f), x); }
VF_VEC512_INLINE __m512 signBit(__m512 x) { return _mm512_and_ps(_mm512_set1_ps(-0.0f), x); }
template <int N>
VF_VEC512_INLINE __m512 horner(__m512 x, const float (&k)[N]) {
  __m512 r = _mm512_set1_ps(k[N - 1]);
  for (int i = N - 2; i >= 0; --i) r = _mm512_fmadd_ps(r, x, _mm512_set1_ps(k[i]));
  return r;
}

/// vecmath_avx2.h's toBf16Bits on 16 lanes: float -> bf16 bit patterns in the low 16 bits of each
/// lane, rounded to nearest even as torch does; NaN -> 0x7FC0.
VF_VEC512_INLINE __m512i toBf16Bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, _mm512_set1_epi32(0x7FC0));
}

/// vecmath_avx2.h's expClamped, the final p * 2^n by vscalefps (one rounding, as vecmath's two
/// normal powers of two: the same bits, checked over all 2^32 inputs; 11 instructions fewer).
VF_VEC512_INLINE __m512 expClamped(__m512 x) {
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, splat(c::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, splat(c::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, splat(c::kLn2Lo), r);
  __m512 p = horner(r, c::kExpP);
  p = _mm512_add_ps(splat(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(r, r), p, r));
  return _mm512_scalef_ps(p, n);
}

/// vecmath_avx2.h's erfcLarge (vrcp14ps for rcpps).
VF_VEC512_INLINE __m512 erfcLarge(__m512 a, __m512 sHi, __m512 sLo) {
  __m512 d = _mm512_add_ps(a, splat(2.0f));
  __m512 rd = _mm512_rcp14_ps(d);
  rd = _mm512_fmadd_ps(rd, _mm512_fnmadd_ps(d, rd, splat(1.0f)), rd);
  __m512 q = _mm512_mul_ps(_mm512_sub_ps(a, splat(2.0f)), rd);
  __m512 dh = _mm512_fmadd_ps(a, splat(2.0f), splat(1.0f));
  __m512 dl = _mm512_fmadd_ps(a, splat(2.0f), _mm512_sub_ps(splat(1.0f), dh));
  __m512 cx = _mm512_div_ps(horner(q, c::kErfcxP), dh);
  cx = _mm512_fnmadd_ps(cx, _mm512_mul_ps(dl, _mm512_rcp14_ps(dh)), cx);
  __m512 e = expClamped(_mm512_max_ps(splat(-104.0f), _mm512_sub_ps(_mm512_setzero_ps(), sHi)));
  e = _mm512_fnmadd_ps(e, sLo, e);
  return _mm512_mul_ps(e, cx);
}

}  // namespace detail

/// vecmath_avx2.h's geluErf: 0.5 x (1 + erf(x / sqrt 2)), torch's GELU (approximate="none").
VF_VEC512_INLINE __m512 geluErf(__m512 x) {
  using namespace detail;
  constexpr float kRsqrt2 = 0.70710678118654752f;
  __m512 xc = _mm512_min_ps(absBits(x), splat(c::kErfcxMax * 1.41421356f));
  __m512 ac = _mm512_mul_ps(xc, splat(kRsqrt2));
  __m512 x2 = _mm512_mul_ps(xc, xc);
  __m512 sHi = _mm512_mul_ps(x2, splat(0.5f));
  __m512 sLo = _mm512_mul_ps(_mm512_fmsub_ps(xc, xc, x2), splat(0.5f));
  __m512 t = _mm512_mul_ps(erfcLarge(ac, sHi, sLo), splat(0.5f));
  __m512 phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                                    _mm512_sub_ps(splat(1.0f), t), t);
  __m512 z = _mm512_mul_ps(x, splat(kRsqrt2));
  __m512 az = absBits(z);
  __m512 erfSmall = _mm512_or_ps(_mm512_fmadd_ps(az, horner(_mm512_mul_ps(az, az), c::kErfHalfP), az), signBit(z));
  __m512 phiSmall = _mm512_mul_ps(splat(0.5f), _mm512_add_ps(splat(1.0f), erfSmall));
  phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(az, splat(c::kErfcSplit), _CMP_LE_OQ), phi, phiSmall);
  return _mm512_mul_ps(x, phi);
}

/// exp(y) for |y| <= 104: expClamped's reduction and polynomial, then 2^n by vscalefps, exact
/// down to denormals without expClamped's two-step power of two (n = round(y log2 e)).
VF_VEC512_INLINE __m512 expScalef(__m512 y) {
  using namespace detail;
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(y, splat(c::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, splat(c::kLn2Hi), y);
  r = _mm512_fnmadd_ps(n, splat(c::kLn2Lo), r);
  const __m512 p = _mm512_add_ps(splat(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(r, r), horner(r, c::kExpP), r));
  return _mm512_scalef_ps(p, n);
}

/// GELU (erf) for a result that is rounded to bf16 next (the bf16 GEMM's epilogue): half the
/// operations of geluErf. Phi(x) = 0.5 erfc(-x / sqrt 2) from Abramowitz & Stegun 7.1.26,
/// erfc(a) = t P(t) exp(-a^2), t = 1 / (1 + p a), |error| <= 1.5e-7 for a >= 0; with float32's
/// rounding of the polynomial the result is within 3e-7 |x| of the exact GELU (vecmath_test.cpp
/// measures 2.8e-7 |x|, bounds it by 4e-7 |x|): far below bf16's rounding (2^-8 relative) wherever
/// |GELU(x)| > 2^-12 |x|, and in the far negative tail smaller than the error of eager's own
/// vectorised erf (torch gives -1.19e-6 for GELU(-5), exact -1.43e-6).
/// x < -13 gives -0 (|GELU| < 1e-37 there); +inf gives +inf, -inf and NaN give NaN, as geluErf.
/// Why not geluErf: with bf16's multiply-adds twice as fast, its ~65 operations per vector cost
/// the GEMM 15% at K = 768 (measured: 455 vs 525 GFLOP/s at 128 x 768 x 3072, Zen 5).
VF_VEC512_INLINE __m512 geluErfForBf16(__m512 x) {
  using namespace detail;
  constexpr float kRsqrt2 = 0.70710678118654752f;
  constexpr float kP = 0.3275911f;
  constexpr float kA[] = {0.254829592f, -0.284496736f, 1.421413741f, -1.453152027f, 1.061405429f};
  const __m512 a = _mm512_min_ps(absBits(_mm512_mul_ps(x, splat(kRsqrt2))), splat(10.0f));  // NaN -> 10
  const __m512 d = _mm512_fmadd_ps(a, splat(kP), splat(1.0f));
  __m512 t = _mm512_rcp14_ps(d);
  t = _mm512_fmadd_ps(t, _mm512_fnmadd_ps(d, t, splat(1.0f)), t);
  const __m512 poly = _mm512_mul_ps(t, horner(t, kA));
  // exp(-a^2), a <= 10: n >= -145.
  const __m512 e = expScalef(_mm512_mul_ps(a, _mm512_sub_ps(_mm512_setzero_ps(), a)));
  const __m512 halfErfc = _mm512_mul_ps(_mm512_mul_ps(poly, e), splat(0.5f));
  const __mmask16 negative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512 phi = _mm512_mask_blend_ps(negative, _mm512_sub_ps(splat(1.0f), halfErfc), halfErfc);
  phi = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(-13.0f), _CMP_LT_OQ), phi, _mm512_setzero_ps());
  return _mm512_mul_ps(x, phi);
}

/// GELU (tanh approximation, GPT-2's "gelu_new") for a result rounded to bf16 next: x sigmoid(z),
/// z = 2 sqrt(2/pi) (x + 0.044715 x^3), the same function as 0.5 x (1 + tanh(z / 2)), in float32
/// with one exp and a refined reciprocal (about 20 operations; the 8-lane geluTanh of the float32
/// kernels evaluates z in double, at 38 operations per 8 lanes on both halves). Within 1e-6 |x|
/// of the exact value (vecmath_test.cpp's bound; it measures 1.3e-7 |x|). z is clamped to [-88, 88] so exp(-z) stays finite; -inf
/// gives NaN, as geluTanh and torch (-inf * 0).
VF_VEC512_INLINE __m512 geluTanhForBf16(__m512 x) {
  using namespace detail;
  constexpr float kC1 = 1.5957691216057307f;             // 2 sqrt(2/pi)
  constexpr float kC3 = 1.5957691216057307f * 0.044715f;
  __m512 z = _mm512_mul_ps(x, _mm512_fmadd_ps(_mm512_mul_ps(x, x), splat(kC3), splat(kC1)));
  z = _mm512_min_ps(_mm512_max_ps(z, splat(-88.0f)), splat(88.0f));  // NaN -> -88 (x keeps it)
  const __m512 d = _mm512_add_ps(splat(1.0f), expScalef(_mm512_sub_ps(_mm512_setzero_ps(), z)));  // n in [-127, 127]
  __m512 q = _mm512_rcp14_ps(d);
  q = _mm512_fmadd_ps(q, _mm512_fnmadd_ps(d, q, splat(1.0f)), q);
  const __m512 out = _mm512_mul_ps(x, q);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, splat(-__builtin_inff()), _CMP_EQ_OQ), out,
                              splat(__builtin_nanf("")));
}

}  // namespace verifuse::kernels::cpu::avx512
