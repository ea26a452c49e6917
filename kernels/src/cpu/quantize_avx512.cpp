// quantize_per_tensor on AVX-512 (quantize.h): 16 lanes per step, the tail under a mask. Reached
// only after cpu::hasAvx512(). Compiled with -ffp-contract=off (CMakeLists.txt): the product and
// the zero-point add are the two separate float32 roundings torch performs.
#include <immintrin.h>

#include "verifuse/kernels/quantize.h"

namespace verifuse::kernels::detail {

namespace {

inline __m512i codes(__m512 x, __m512 inv, __m512 zp, __m512 lo, __m512 hi) {
  const __m512 r = _mm512_roundscale_ps(_mm512_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 v = _mm512_add_ps(r, zp);
  // max/min return their second operand when either is NaN: clamp first, then NaN lanes -> 0.
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_maskz_mov_epi32(static_cast<__mmask16>(~nan), _mm512_cvtps_epi32(c));
}

}  // namespace

void quantizeF32Avx512(const float* src, int64_t n, const QuantizeParams& p, void* dst) {
  const __m512 inv = _mm512_set1_ps(p.invScale), zp = _mm512_set1_ps(p.zeroPoint);
  const __m512 lo = _mm512_set1_ps(p.qmin), hi = _mm512_set1_ps(p.qmax);
  // The codes are integers within the dtype's range, so keeping the low byte (vpmovdb) is exact
  // for u8 and s8 alike.
  auto* out = static_cast<char*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i c = codes(_mm512_loadu_ps(src + i), inv, zp, lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(c));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512i c = codes(_mm512_maskz_loadu_ps(m, src + i), inv, zp, lo, hi);
    _mm512_mask_cvtepi32_storeu_epi8(out + i, m, c);
  }
}

}  // namespace verifuse::kernels::detail
