// Int8WeightMatmul's AVX2 variant (weight_only.h): a 16-column block is two ymm halves, weights
// widened in registers (vpmovsxbd, vcvtdq2ps), one fused multiply-add per row per half per k.
#include <immintrin.h>

#include <algorithm>

#include "cpu/weight_only_internal.h"

namespace verifuse::kernels::weight_only {

namespace {

constexpr int64_t kBlock = 16;

// R rows x B blocks (2B ymm) of accumulators, each summing in ascending k (the AVX-512 variant's
// order: the two variants give the same bits).
struct Avx2 {
  template <int R, int B>
  static void tile(const float* x, int64_t ldx, const int8_t* w, int64_t kStride, int64_t k, float* y, int64_t ldy,
                   int64_t cols) {
    __m256 acc[R][2 * B];
    for (int r = 0; r < R; ++r) {
      for (int h = 0; h < 2 * B; ++h) acc[r][h] = _mm256_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      __m256 wv[2 * B];
      for (int b = 0; b < B; ++b) {
        const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kk * kStride + b * kBlock));
        wv[2 * b] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
        wv[2 * b + 1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8)));
      }
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(x + r * ldx + kk);
        for (int h = 0; h < 2 * B; ++h) acc[r][h] = _mm256_fmadd_ps(xv, wv[h], acc[r][h]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int h = 0; h < 2 * B; ++h) {
        const int64_t left = cols - h * 8;
        if (left <= 0) break;
        float* dst = y + r * ldy + h * 8;
        if (left >= 8) {
          _mm256_storeu_ps(dst, acc[r][h]);
        } else {
          alignas(32) float tmp[8];
          _mm256_store_ps(tmp, acc[r][h]);
          std::copy(tmp, tmp + left, dst);
        }
      }
    }
  }
};

}  // namespace

void groupAvx2(const float* x, int64_t rows, int64_t ldx, const int8_t* w, int64_t blocks, int64_t k, float* y,
               int64_t ldy, int64_t cols) {
  int64_t m = 0;
  // 16 ymm: 4 rows x 1 block = 8 accumulators + 2 weights + a broadcast for the bulk; one row
  // takes 2 blocks (4 independent chains) so a decode step is not bound by the FMA latency.
  for (; m + 4 <= rows; m += 4) rowsOf<Avx2, 4, 1>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols);
  switch (rows - m) {
    case 3: rowsOf<Avx2, 3, 1>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 2: rowsOf<Avx2, 2, 1>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 1: rowsOf<Avx2, 1, 2>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    default: break;
  }
}

}  // namespace verifuse::kernels::weight_only
