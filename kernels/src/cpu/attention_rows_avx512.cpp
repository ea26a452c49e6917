// AVX-512 row step of the attention kernel (16 floats a vector, masked tails): vecmath's exp
// (vecmath_avx512.h: vecmath_avx2.h's range reduction and polynomial, the same bits, < 1 ulp) for
// float32 probabilities; for probabilities rounded to bf16 next, expForBf16Probabilities (2^-17
// relative, 9 operations instead of 15).
// Why a second ISA: on this Zen 5 the row step is the part of attention outside oneDNN, and
// 512-bit vectors run at full width.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/attention_rows.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::cpu::detail {

namespace {

inline __m512 splat(float v) { return _mm512_set1_ps(v); }

/// vecmath's exp on 16 floats (vecmath_avx512.h; operand order of the clamps as vecmath_avx2.h's
/// exp: NaN passes through).
inline __m512 exp512(__m512 x) {
  return avx512::detail::expClamped(_mm512_min_ps(splat(89.0f), _mm512_max_ps(splat(-104.0f), x)));
}

// Horizontal max / sum through two 256-bit halves (GCC 12 warns about its own
// _mm512_reduce_max_ps / _mm512_reduce_add_ps: -Wmaybe-uninitialized inside the intrinsics).
inline __m128 halves(__m512 v, __m128 (*op)(__m128, __m128), __m256 (*op8)(__m256, __m256)) {
  __m256 h = op8(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 m = op(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  m = op(m, _mm_movehl_ps(m, m));
  return op(m, _mm_shuffle_ps(m, m, 1));
}
inline float hmax(__m512 v) { return _mm_cvtss_f32(halves(v, _mm_max_ps, _mm256_max_ps)); }
inline float hsum(__m512 v) { return _mm_cvtss_f32(halves(v, _mm_add_ps, _mm256_add_ps)); }

}  // namespace

namespace {

/// The probabilities in bf16 by the manual rounding (exact: denormals kept) or, on AVX512-BF16 CPUs,
/// by vcvtneps2bf16: one instruction instead of seven, the same round to nearest even, but it
/// flushes denormal results (weights below 2^-126, of a row whose largest weight is 1) to zero.
template <bool kCvtne>
inline void storeBf16(uint16_t* out, __mmask16 k, __m512 e) {
  if constexpr (kCvtne) {
    _mm256_mask_storeu_epi16(out, k, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  } else {
    _mm256_mask_storeu_epi16(out, k, _mm512_cvtepi32_epi16(avx512::detail::toBf16Bits(e)));
  }
}

/// 16 mask values as floats: f32 as stored, bf16 widened exactly (its bits are the float's top half).
inline __m512 loadMask(const float* m, __mmask16 k) { return _mm512_maskz_loadu_ps(k, m); }
inline __m512 loadMask(const uint16_t* m, __mmask16 k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, m)), 16));
}

template <bool kCvtne, typename MaskT>
float softmaxRow(float* s, const MaskT* mask, int64_t n, float scale, float* sum, uint16_t* bf16Out) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const __m512 vs = splat(scale);
  __m512 vmax = splat(ninf);
  // x = s * scale + mask, rounded twice as ATen's CPU kernel does (no fused multiply-add).
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + j), vs);
    if (mask) x = _mm512_add_ps(x, loadMask(mask + j, k));
    _mm512_mask_storeu_ps(s + j, k, x);
    vmax = _mm512_mask_max_ps(vmax, k, vmax, x);
  }
  const float mx = hmax(vmax);
  if (mx == ninf) {
    // exp(-inf - -inf) would be NaN: a fully masked row has no weight anywhere.
    for (int64_t j = 0; j < n; ++j) s[j] = 0.f;
    if (bf16Out) std::fill(bf16Out, bf16Out + n, uint16_t{0});
    *sum = 0.f;
    return mx;
  }
  const __m512 vm = splat(mx);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm);
    // Probabilities rounded to bf16 next take the cheaper exp (2^-17 relative, vecmath_avx512.h);
    // the sum adds the unrounded values in both cases.
    const __m512 e = bf16Out ? avx512::detail::expForBf16Probabilities(x) : exp512(x);
    if (bf16Out) storeBf16<kCvtne>(bf16Out + j, k, e);
    else _mm512_mask_storeu_ps(s + j, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  *sum = hsum(acc);
  return mx;
}

}  // namespace

float attentionSoftmaxRowAvx512(float* s, const float* mask, int64_t n, float scale, float* sum, uint16_t* bf16Out,
                                bool cvtneBf16) {
  return cvtneBf16 && bf16Out ? softmaxRow<true>(s, mask, n, scale, sum, bf16Out)
                              : softmaxRow<false>(s, mask, n, scale, sum, bf16Out);
}

float attentionSoftmaxRowBf16MaskAvx512(float* s, const uint16_t* mask, int64_t n, float scale, float* sum,
                                        uint16_t* bf16Out, bool cvtneBf16) {
  return cvtneBf16 && bf16Out ? softmaxRow<true>(s, mask, n, scale, sum, bf16Out)
                              : softmaxRow<false>(s, mask, n, scale, sum, bf16Out);
}

void attentionScaleRowAvx512(const float* from, float r, int64_t n, float* to) {
  const __m512 vr = splat(r);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    _mm512_mask_storeu_ps(to + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, from + j), vr));
  }
}

void attentionScaleRowToBf16Avx512(const float* from, float r, int64_t n, uint16_t* to) {
  const __m512 vr = splat(r);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    storeBf16<false>(to + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, from + j), vr));
  }
}

}  // namespace verifuse::kernels::cpu::detail
