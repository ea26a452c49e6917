// AVX2 row step of the attention kernel: scale + mask + max, then exp(x - max) and the sum.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "cpu/attention_rows.h"
#include "cpu/rowwise_internal.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::cpu::detail {

namespace {
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
inline float hsum(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  m = _mm_add_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}
}  // namespace

float attentionSoftmaxRowAvx2(float* s, const float* mask, int64_t n, float scale, float* sum) {
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  // x = s * scale + mask, rounded twice as ATen's CPU kernel does (no fused multiply-add).
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
    if (mask) x = _mm256_add_ps(x, _mm256_loadu_ps(mask + j));
    _mm256_storeu_ps(s + j, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  float mx = hmax(vmax);
  for (; j < n; ++j) {
    float x = s[j] * scale;
    if (mask) x += mask[j];
    s[j] = x;
    mx = std::fmax(mx, x);
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    // exp(-inf - -inf) would be NaN: a fully masked row has no weight anywhere.
    for (j = 0; j < n; ++j) s[j] = 0.f;
    *sum = 0.f;
    return mx;
  }
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    __m256 e = avx2::exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float total = hsum(acc);
  for (; j < n; ++j) {
    __m256 e = avx2::exp(_mm256_set1_ps(s[j] - mx));
    s[j] = _mm256_cvtss_f32(e);
    total += s[j];
  }
  *sum = total;
  return mx;
}

void attentionRoundRowToBf16Avx2(float* s, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, avx2::roundToBf16(_mm256_loadu_ps(s + j)));
  for (; j < n; ++j) s[j] = rowwise::detail::bf16ToFloat(rowwise::detail::floatToBf16(s[j]));
}

}  // namespace verifuse::kernels::cpu::detail
