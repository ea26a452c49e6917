// AVX2+FMA vector math on __m256 (8 floats) for verifuse's own CPU kernels: exp, expm1, log, erf,
// erfc, tanh, sigmoid, silu, GELU (erf and tanh), ELU, sqrt/rsqrt, the piecewise-linear
// activations, torch-style NaN-propagating max/min and bf16 <-> f32 conversion.
//
// Header-only; include it only from *_avx2.cpp files (built with -mavx2 -mfma -mf16c) and call it
// only after cpu::hasAvx2Fma() said yes.
//
// Accuracy: max error vs double-precision references, measured by
// tests/cpp/kernels/cpu/vecmath_test.cpp over every 4096th float bit pattern (the whole range, both
// signs) plus dense sweeps where the formulas switch; the test asserts bounds a little above these:
//   exp 0.95 ulp, expm1 1.4, log 0.82, erf 0.96, tanh 1.3, sigmoid 1.7, elu 0.84,
//   erfc 3.2, silu 2.9, geluTanh 3.1 (2.1 for x >= 0), geluErf 3.8 (1.5 for x >= 0),
//   incl. GELU's negative tail, where the textbook 0.5x(1+erf) / 0.5x(1+tanh) forms cancel;
//   sqrt exact (IEEE), rsqrt = 1/sqrt(x) (two roundings, <= 1.5 ulp, as torch.rsqrt computes it).
// Products of two rounded factors (silu = x * sigmoid, GELU, erfc = exp * erfcx) are the ones
// above 2 ulp.
// Cost (min TSC ticks per 8 floats, L1-resident, this Zen 3 under load, +-15% run to run): exp 10,
// log 18, tanh 19, silu 20, erf 30-35, geluTanh 38, geluErf 35-42, erfc 37-40. geluErf costs
// ~1.5x torch's (whose erf is a cheaper ~1e-7-absolute approximation); accuracy in the tails is
// what the extra work buys.
// Denormal results are produced (not flushed); errors there are absolute (a few 2^-149).
//
// Edge cases follow eager PyTorch: NaN in -> NaN out (the payload/sign of a NaN is not kept);
// exp overflows to +inf and underflows to 0; erf/tanh saturate to +-1 and keep -0; sigmoid(-inf)
// = 0; silu(-inf) = geluErf(-inf) = geluTanh(-inf) = NaN (as torch: -inf * 0); relu/clamp keep -0
// and propagate NaN; maximum/minimum propagate a NaN from either side; log(0) = log(-0) = -inf,
// log(x<0) = NaN, rsqrt(-0) = -inf. Where the exact result is tiny, torch's float formulas may
// give 0 (sigmoid(-100), silu(-100)) and these give the correctly rounded tiny value.
//
// Polynomial coefficients come from vecmath_fit.py (near-minimax fits, rounded to float32).
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error "vecmath_avx2.h needs -mavx2 -mfma (include it only from *_avx2.cpp files)"
#endif

#include <immintrin.h>

#include <cstdint>

namespace verifuse::kernels::cpu::avx2 {

#define VF_VEC_INLINE inline __attribute__((always_inline))

namespace detail {

VF_VEC_INLINE __m256 splat(float v) { return _mm256_set1_ps(v); }
VF_VEC_INLINE __m256 absBits(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
VF_VEC_INLINE __m256 signBit(__m256 x) { return _mm256_and_ps(_mm256_set1_ps(-0.0f), x); }
/// Horner evaluation c[0] + c[1] x + ... + c[N-1] x^(N-1).
template <int N>
VF_VEC_INLINE __m256 horner(__m256 x, const float (&c)[N]) {
  __m256 r = _mm256_set1_ps(c[N - 1]);
  for (int i = N - 2; i >= 0; --i) r = _mm256_fmadd_ps(r, x, _mm256_set1_ps(c[i]));
  return r;
}
/// 2^n for integer-valued float n in [-126, 127].
VF_VEC_INLINE __m256 pow2i(__m256 n) {
  __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}

constexpr float kLn2Hi = 0.693145751953125f;        // 0x1.62e4p-1: n * kLn2Hi is exact for |n| < 2^10
constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln2 - kLn2Hi
constexpr float kLog2e = 1.44269504088896341f;

// exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2 (vecmath_fit.py: fit_exp, rel err 3.1e-9).
constexpr float kExpP[] = {0.4999999403953552f, 0.1666652113199234f, 0.04166838899254799f,
                           0.008368710055947304f, 0.001381461275741458f};
// expm1(r) = r + r^2/2 + r^3 P(r), |r| <= ln2/2 (fit_expm1, rel err 3.9e-10).
constexpr float kExpm1P[] = {0.1666666567325592f, 0.041666481643915176f, 0.0083334194496274f,
                             0.00139332446269691f, 0.0001982412941288203f};
// log(1+f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2)-1, sqrt(2)-1] (fit_log, rel err 5.8e-9).
constexpr float kLogP[] = {0.3333333134651184f, -0.2500081956386566f, 0.20001226663589478f,
                           -0.16623356938362122f, 0.14201758801937103f, -0.13160182535648346f,
                           0.12761574983596802f, -0.07634492963552475f};
// erf(x) = x + x P(x^2), |x| <= kErfSplit (fit_erf_small, rel err 4.1e-10).
constexpr float kErfSplit = 0.921875f;
constexpr float kErfP[] = {0.12837916612625122f, -0.37612634897232056f, 0.11283695697784424f,
                           -0.026859398931264877f, 0.005201033316552639f, -0.0008142715669237077f,
                           8.370141586055979e-05f};
// The same for |x| <= kErfcSplit with one term less (fit_erf_small(5, 0.5), rel err 1.4e-9).
constexpr float kErfHalfP[] = {0.12837916612625122f, -0.37612608075141907f, 0.11282823234796524f,
                               -0.026757191866636276f, 0.004718002397567034f};
// (1 + 2a) erfcx(a) = (1 + 2a) exp(a^2) erfc(a) = P(q), q = (a-2)/(a+2), a in [0, 10.1]
// (fit_erfcx, rel err 9.3e-10; P stays in [1, 1.28], so its float evaluation does not cancel).
// erfc and GELU use it for |x| > kErfcSplit, erf for |x| > kErfSplit; below, the odd erf polynomial.
constexpr float kErfcSplit = 0.5f;
constexpr float kErfcxMax = 10.1f;  // erfc(10.1) < 2^-150: rounds to 0
constexpr float kErfcxP[] = {1.2769783735275269f, -0.09276381880044937f, -0.16603052616119385f,
                             0.16405105590820312f, -0.05421781167387962f, -0.008030956611037254f,
                             0.008708939887583256f, 0.0012529526138678193f, -0.0014202690217643976f,
                             -0.0004008624528069049f, 0.0001688028423814103f, 7.91622296674177e-05f};
// tanh(x) = x + x^3 P(x^2), |x| <= kTanhSplit (fit_tanh_small, rel err 4.4e-9).
constexpr float kTanhSplit = 0.625f;
constexpr float kTanhP[] = {-0.3333328068256378f, 0.13331441581249237f, -0.05373971536755562f,
                            0.0206390880048275f, -0.005704987328499556f};

/// exp(x) for x already clamped to [-104, 89] (NaN passes through).
VF_VEC_INLINE __m256 expClamped(__m256 x) {
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, splat(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, splat(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, splat(kLn2Lo), r);
  __m256 p = horner(r, kExpP);
  // 1 + (r + r^2 P): the only rounding that matters is the last add (~0.5 ulp).
  p = _mm256_add_ps(splat(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r));
  // n in [-150, 129]: scale in two steps so that both factors are normal and the only rounding is
  // the last multiply (correct overflow to inf and gradual underflow to denormals / 0).
  __m256 n1 = _mm256_round_ps(_mm256_mul_ps(n, splat(0.5f)), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m256 n2 = _mm256_sub_ps(n, n1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2i(n1)), pow2i(n2));
}

/// |v| = hi + lo (lo tiny): exp(-|v|) with the low part applied as a first-order correction,
/// then the logistic function 1/(1+exp(-v)) without cancellation on either side.
VF_VEC_INLINE __m256 sigmoidHiLo(__m256 hi, __m256 lo) {
  __m256 neg = _mm256_cmp_ps(hi, _mm256_setzero_ps(), _CMP_LT_OQ);
  __m256 m = _mm256_or_ps(absBits(hi), splat(-0.0f));                  // -|hi|
  __m256 mlo = _mm256_blendv_ps(_mm256_xor_ps(lo, splat(-0.0f)), lo, neg);  // low part of -|v|
  __m256 e = expClamped(_mm256_min_ps(splat(89.0f), _mm256_max_ps(splat(-104.0f), m)));
  e = _mm256_fmadd_ps(e, mlo, e);
  // r = (v < 0 ? e : 1) / (1 + e) with one division; 1 + e = dh + dl exactly (e <= 1) and the
  // quotient corrected to first order in dl (the 12-bit reciprocal estimate is enough for dl / dh).
  __m256 dh = _mm256_add_ps(splat(1.0f), e);
  __m256 dl = _mm256_sub_ps(e, _mm256_sub_ps(dh, splat(1.0f)));
  __m256 r = _mm256_div_ps(_mm256_blendv_ps(splat(1.0f), e, neg), dh);
  return _mm256_fnmadd_ps(r, _mm256_mul_ps(dl, _mm256_rcp_ps(dh)), r);
}

/// erfc(a) for a >= 0 given a and a^2 = s_hi + s_lo (split so exp(-a^2) stays accurate
/// where a^2 is large); a is clamped to kErfcxMax by the caller (or is NaN).
VF_VEC_INLINE __m256 erfcLarge(__m256 a, __m256 sHi, __m256 sLo) {
  // q = (a - 2) / (a + 2) from the reciprocal estimate and one Newton step (~1 ulp; P is smooth,
  // so q's error hardly shows, and the divider is kept for the quotient below).
  __m256 d = _mm256_add_ps(a, splat(2.0f));
  __m256 rd = _mm256_rcp_ps(d);
  rd = _mm256_fmadd_ps(rd, _mm256_fnmadd_ps(d, rd, splat(1.0f)), rd);
  __m256 q = _mm256_mul_ps(_mm256_sub_ps(a, splat(2.0f)), rd);
  // erfcx(a) = P(q) / (1 + 2a), with 1 + 2a = dh + dl exactly and the division corrected to first
  // order in dl (dl / dh needs only a few bits: the 12-bit reciprocal estimate is enough).
  __m256 dh = _mm256_fmadd_ps(a, splat(2.0f), splat(1.0f));
  __m256 dl = _mm256_fmadd_ps(a, splat(2.0f), _mm256_sub_ps(splat(1.0f), dh));
  __m256 cx = _mm256_div_ps(horner(q, kErfcxP), dh);
  cx = _mm256_fnmadd_ps(cx, _mm256_mul_ps(dl, _mm256_rcp_ps(dh)), cx);
  __m256 e = expClamped(_mm256_max_ps(splat(-104.0f), _mm256_sub_ps(_mm256_setzero_ps(), sHi)));
  e = _mm256_fnmadd_ps(e, sLo, e);  // exp(-sHi - sLo) = exp(-sHi) (1 - sLo)
  return _mm256_mul_ps(e, cx);
}

/// erf(a) for a = |x| >= 0 (or NaN), small and large branches blended.
VF_VEC_INLINE __m256 erfAbs(__m256 a) {
  __m256 s = _mm256_mul_ps(a, a);
  __m256 small = _mm256_fmadd_ps(a, horner(s, kErfP), a);
  __m256 ac = _mm256_min_ps(a, splat(kErfcxMax));
  __m256 sHi = _mm256_mul_ps(ac, ac);
  __m256 sLo = _mm256_fmsub_ps(ac, ac, sHi);
  __m256 large = _mm256_sub_ps(splat(1.0f), erfcLarge(ac, sHi, sLo));
  return _mm256_blendv_ps(small, large, _mm256_cmp_ps(a, splat(kErfSplit), _CMP_GT_OQ));
}

}  // namespace detail

/// e^x. Overflows to +inf for x > 88.7228, underflows through denormals to 0 below -103.97.
VF_VEC_INLINE __m256 exp(__m256 x) {
  // max/min with x second: a NaN x passes through both clamps.
  return detail::expClamped(_mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x)));
}

/// e^x - 1 without cancellation near 0 (torch's elu uses expm1).
VF_VEC_INLINE __m256 expm1(__m256 x) {
  using namespace detail;
  __m256 xc = _mm256_min_ps(splat(20.0f), _mm256_max_ps(splat(-30.0f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, splat(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, splat(kLn2Hi), xc);
  r = _mm256_fnmadd_ps(n, splat(kLn2Lo), r);
  __m256 q = _mm256_fmadd_ps(horner(r, kExpm1P), r, splat(0.5f));
  __m256 p = _mm256_fmadd_ps(q, _mm256_mul_ps(r, r), r);  // expm1(r)
  __m256 t = pow2i(n);                                    // n in [-44, 29]
  // e^x - 1 = 2^n expm1(r) + (2^n - 1); 2^n - 1 is exact for n <= 24.
  __m256 res = _mm256_fmadd_ps(t, p, _mm256_sub_ps(t, splat(1.0f)));
  // Large x: -1 is below half an ulp of e^x, use exp (which also overflows correctly).
  res = _mm256_blendv_ps(res, exp(x), _mm256_cmp_ps(x, splat(17.0f), _CMP_GT_OQ));
  // Tiny |x| (incl. -0 and denormals): expm1(x) rounds to x.
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(absBits(x), splat(0x1p-25f), _CMP_LT_OQ));
}

/// Natural log. log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf; denormal inputs exact-scaled.
VF_VEC_INLINE __m256 log(__m256 x) {
  using namespace detail;
  __m256 denorm = _mm256_cmp_ps(x, splat(0x1p-126f), _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, splat(0x1p23f)), denorm);
  __m256 eAdj = _mm256_and_ps(denorm, splat(-23.0f));
  __m256i bits = _mm256_castps_si256(xs);
  __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007FFFFF)),
                                                 _mm256_set1_epi32(0x3F800000)));  // [1, 2)
  __m256 big = _mm256_cmp_ps(m, splat(1.41421356f), _CMP_GT_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, splat(0.5f)), big);
  e = _mm256_add_ps(_mm256_add_ps(e, eAdj), _mm256_and_ps(big, splat(1.0f)));
  __m256 f = _mm256_sub_ps(m, splat(1.0f));
  __m256 f2 = _mm256_mul_ps(f, f);
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(f2, f), horner(f, kLogP));
  y = _mm256_fmadd_ps(e, splat(kLn2Lo), y);
  y = _mm256_fnmadd_ps(f2, splat(0.5f), y);
  __m256 res = _mm256_fmadd_ps(e, splat(kLn2Hi), _mm256_add_ps(f, y));
  res = _mm256_blendv_ps(res, splat(__builtin_nanf("")), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  res = _mm256_blendv_ps(res, splat(-__builtin_inff()), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  // +inf and NaN return themselves.
  return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, splat(__builtin_inff()), _CMP_NLT_UQ));
}

/// Error function; odd (erf(-0) = -0), saturates to +-1.
VF_VEC_INLINE __m256 erf(__m256 x) {
  return _mm256_or_ps(detail::erfAbs(detail::absBits(x)), detail::signBit(x));
}

/// Complementary error function 1 - erf(x), accurate in the tail (erfc(10) = 2.1e-45).
VF_VEC_INLINE __m256 erfc(__m256 x) {
  using namespace detail;
  __m256 ac = _mm256_min_ps(absBits(x), splat(kErfcxMax));  // NaN -> kErfcxMax, blended back below
  __m256 sHi = _mm256_mul_ps(ac, ac);
  __m256 e = erfcLarge(ac, sHi, _mm256_fmsub_ps(ac, ac, sHi));  // erfc(|x|)
  __m256 r = _mm256_blendv_ps(e, _mm256_sub_ps(splat(2.0f), e), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  // |x| <= kErfcSplit: 1 - erf(x) from the odd polynomial (P(q) loses ~2 ulp as a -> 0).
  __m256 a = absBits(x);
  __m256 erfSmall = _mm256_or_ps(_mm256_fmadd_ps(a, horner(_mm256_mul_ps(a, a), kErfHalfP), a), signBit(x));
  r = _mm256_blendv_ps(r, _mm256_sub_ps(splat(1.0f), erfSmall), _mm256_cmp_ps(a, splat(kErfcSplit), _CMP_LE_OQ));
  return _mm256_blendv_ps(r, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/// Hyperbolic tangent; odd, saturates to +-1.
VF_VEC_INLINE __m256 tanh(__m256 x) {
  using namespace detail;
  __m256 a = absBits(x);
  __m256 s = _mm256_mul_ps(a, a);
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, s), horner(s, kTanhP), a);
  // tanh(a) = 1 - 2 / (e^{2a} + 1); tanh(9.1) rounds to 1.
  __m256 e = expClamped(_mm256_mul_ps(_mm256_min_ps(a, splat(9.1f)), splat(2.0f)));
  __m256 large = _mm256_sub_ps(splat(1.0f), _mm256_div_ps(splat(2.0f), _mm256_add_ps(e, splat(1.0f))));
  __m256 r = _mm256_blendv_ps(small, large, _mm256_cmp_ps(a, splat(kTanhSplit), _CMP_GT_OQ));
  return _mm256_or_ps(r, signBit(x));
}

/// Logistic function 1 / (1 + e^-x); for x < 0 computed as e^x / (1 + e^x) (no overflow, the
/// correctly rounded tiny value where torch's formula gives 0).
VF_VEC_INLINE __m256 sigmoid(__m256 x) { return detail::sigmoidHiLo(x, _mm256_setzero_ps()); }

/// x * sigmoid(x) (torch.nn.functional.silu; silu(-inf) = NaN like torch).
VF_VEC_INLINE __m256 silu(__m256 x) { return _mm256_mul_ps(x, sigmoid(x)); }

/// 0.5 x (1 + erf(x / sqrt 2)) (GELU, approximate="none"), evaluated as x * Phi(x) with
/// t = erfc(|x| / sqrt 2) / 2 and Phi = x < 0 ? t : 1 - t, the exponent x^2/2 split into two floats
/// (no cancellation in the negative tail); for |x / sqrt 2| <= 0.5, Phi = (1 + erf(x / sqrt 2)) / 2.
VF_VEC_INLINE __m256 geluErf(__m256 x) {
  using namespace detail;
  constexpr float kRsqrt2 = 0.70710678118654752f;
  __m256 xc = _mm256_min_ps(absBits(x), splat(kErfcxMax * 1.41421356f));  // NaN -> clamp; x keeps it
  __m256 ac = _mm256_mul_ps(xc, splat(kRsqrt2));
  __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 sHi = _mm256_mul_ps(x2, splat(0.5f));
  __m256 sLo = _mm256_mul_ps(_mm256_fmsub_ps(xc, xc, x2), splat(0.5f));
  __m256 t = _mm256_mul_ps(erfcLarge(ac, sHi, sLo), splat(0.5f));
  __m256 phi = _mm256_blendv_ps(_mm256_sub_ps(splat(1.0f), t), t, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  // |z| <= kErfcSplit: Phi = 0.5 (1 + erf(z)) from the odd polynomial (P(q) loses ~2 ulp as z -> 0).
  __m256 z = _mm256_mul_ps(x, splat(kRsqrt2));
  __m256 az = absBits(z);
  __m256 erfSmall = _mm256_or_ps(_mm256_fmadd_ps(az, horner(_mm256_mul_ps(az, az), kErfHalfP), az), signBit(z));
  __m256 phiSmall = _mm256_mul_ps(splat(0.5f), _mm256_add_ps(splat(1.0f), erfSmall));
  phi = _mm256_blendv_ps(phi, phiSmall, _mm256_cmp_ps(az, splat(kErfcSplit), _CMP_LE_OQ));
  return _mm256_mul_ps(x, phi);
}

/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GELU, approximate="tanh"), evaluated as
/// x * sigmoid(2u) with the argument 2u computed in double: no cancellation in the negative tail.
VF_VEC_INLINE __m256 geluTanh(__m256 x) {
  using namespace detail;
  constexpr double kC1 = 1.5957691216057307;           // 2 sqrt(2/pi)
  constexpr double kC3 = 1.5957691216057307 * 0.044715;
  __m256 xc = _mm256_min_ps(splat(12.0f), _mm256_max_ps(splat(-12.0f), x));  // NaN passes
  auto arg = [&](__m128 h, __m128& hi, __m128& lo) {
    __m256d d = _mm256_cvtps_pd(h);
    __m256d v = _mm256_mul_pd(d, _mm256_fmadd_pd(_mm256_mul_pd(d, d), _mm256_set1_pd(kC3), _mm256_set1_pd(kC1)));
    hi = _mm256_cvtpd_ps(v);
    lo = _mm256_cvtpd_ps(_mm256_sub_pd(v, _mm256_cvtps_pd(hi)));
  };
  __m128 h0, l0, h1, l1;
  arg(_mm256_castps256_ps128(xc), h0, l0);
  arg(_mm256_extractf128_ps(xc, 1), h1, l1);
  __m256 hi = _mm256_insertf128_ps(_mm256_castps128_ps256(h0), h1, 1);
  __m256 lo = _mm256_insertf128_ps(_mm256_castps128_ps256(l0), l1, 1);
  return _mm256_mul_ps(x, sigmoidHiLo(hi, lo));
}

/// torch.nn.functional.elu with scale 1: x > 0 ? x : alpha * expm1(x).
VF_VEC_INLINE __m256 elu(__m256 x, float alpha) {
  __m256 neg = _mm256_mul_ps(expm1(x), _mm256_set1_ps(alpha));
  return _mm256_blendv_ps(x, neg, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OQ));
}

/// IEEE square root (correctly rounded; sqrt(-0) = -0, negative -> NaN).
VF_VEC_INLINE __m256 sqrt(__m256 x) { return _mm256_sqrt_ps(x); }

/// 1 / sqrt(x), computed exactly as torch.rsqrt does (full-precision divide, not the 12-bit
/// _mm256_rsqrt_ps estimate): rsqrt(0) = inf, rsqrt(-0) = -inf, rsqrt(inf) = 0.
VF_VEC_INLINE __m256 rsqrt(__m256 x) { return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(x)); }

/// 1 / x.
VF_VEC_INLINE __m256 reciprocal(__m256 x) { return _mm256_div_ps(_mm256_set1_ps(1.0f), x); }

/// max(x, 0) as torch.relu: keeps -0 and NaN.
VF_VEC_INLINE __m256 relu(__m256 x) { return _mm256_max_ps(_mm256_setzero_ps(), x); }

/// x > 0 ? x : x * slope.
VF_VEC_INLINE __m256 leakyRelu(__m256 x, float slope) {
  return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_set1_ps(slope)), x,
                          _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
}

/// torch.clamp(x, lo, hi) = min(max(x, lo), hi); NaN propagates, -0 is kept.
VF_VEC_INLINE __m256 clamp(__m256 x, float lo, float hi) {
  return _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x));
}

/// x * min(max(x + 3, 0), 6) / 6, in torch's order of operations.
VF_VEC_INLINE __m256 hardswish(__m256 x) {
  __m256 r6 = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, _mm256_set1_ps(3.0f))));
  return _mm256_div_ps(_mm256_mul_ps(x, r6), _mm256_set1_ps(6.0f));
}

/// min(max(x + 3, 0), 6) / 6.
VF_VEC_INLINE __m256 hardsigmoid(__m256 x) {
  __m256 r6 = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, _mm256_set1_ps(3.0f))));
  return _mm256_div_ps(r6, _mm256_set1_ps(6.0f));
}

/// torch.maximum / torch.minimum: a NaN on either side gives NaN.
VF_VEC_INLINE __m256 maximum(__m256 a, __m256 b) {
  return _mm256_or_ps(_mm256_max_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
VF_VEC_INLINE __m256 minimum(__m256 a, __m256 b) {
  return _mm256_or_ps(_mm256_min_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

/// 8 bf16 values (uint16 bit patterns) to float (exact).
VF_VEC_INLINE __m256 loadBf16(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/// float -> bf16 bit patterns in the low 16 bits of each lane, rounded to nearest even as torch
/// does (c10::round_to_nearest_even): NaN -> 0x7FC0, overflow -> inf.
VF_VEC_INLINE __m256i toBf16Bits(__m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), nan);
}

/// Stores 8 floats as bf16 (round to nearest even).
VF_VEC_INLINE void storeBf16(uint16_t* p, __m256 x) {
  __m256i b = toBf16Bits(x);
  __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

/// x rounded to bf16 and back (torch's x.to(bfloat16).to(float32)).
VF_VEC_INLINE __m256 roundToBf16(__m256 x) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(toBf16Bits(x), 16));
}

#undef VF_VEC_INLINE

}  // namespace verifuse::kernels::cpu::avx2
