// AVX2 loops of bf16_convert.h (built with -mavx2; reached only after cpu::hasAvx2Fma()).
#include <immintrin.h>

#include "cpu/bf16_convert.h"
#include "cpu/rowwise_internal.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::cpu::detail {

void widenBf16Avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(dst + i, avx2::loadBf16(src + i));
    _mm256_storeu_ps(dst + i + 8, avx2::loadBf16(src + i + 8));
  }
  for (; i < n; ++i) dst[i] = rowwise::detail::bf16ToFloat(src[i]);
}

void narrowToBf16Avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // Both halves packed at once: packus interleaves 128-bit lanes, permute4x64 puts them in order.
    const __m256i lo = avx2::toBf16Bits(_mm256_loadu_ps(src + i));
    const __m256i hi = avx2::toBf16Bits(_mm256_loadu_ps(src + i + 8));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = rowwise::detail::floatToBf16(src[i]);
}

}  // namespace verifuse::kernels::cpu::detail
