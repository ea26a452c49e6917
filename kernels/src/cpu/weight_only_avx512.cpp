// Int8WeightMatmul's AVX-512 variant (weight_only.h): 16 columns per zmm, weights widened in
// registers (vpmovsxbd, vcvtdq2ps), one fused multiply-add per row per block per k.
#include <immintrin.h>

#include "cpu/weight_only_internal.h"

namespace verifuse::kernels::weight_only {

namespace {

constexpr int64_t kBlock = 16;

// R rows x B blocks of accumulators. Each accumulator sums in ascending k; B independent chains
// per row hide the FMA latency when R is small (a decode step has one row). Block b's 16 weights
// of step kk are at w + kk * kStride + b * 16 (the group's blocks interleaved per k: one stream).
struct Avx512 {
  template <int R, int B>
  static void tile(const float* x, int64_t ldx, const int8_t* w, int64_t kStride, int64_t k, float* y, int64_t ldy,
                   int64_t cols) {
    __m512 acc[R][B];
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < k; ++kk) {
      __m512 wv[B];
      for (int b = 0; b < B; ++b) {
        const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + kk * kStride + b * kBlock));
        wv[b] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes));
      }
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_set1_ps(x[r * ldx + kk]);
        for (int b = 0; b < B; ++b) acc[r][b] = _mm512_fmadd_ps(xv, wv[b], acc[r][b]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < B; ++b) {
        const int64_t left = cols - b * kBlock;
        if (left <= 0) break;
        const __mmask16 mask = left >= kBlock ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
        _mm512_mask_storeu_ps(y + r * ldy + b * kBlock, mask, acc[r][b]);
      }
    }
  }
};

}  // namespace

void groupAvx512(const float* x, int64_t rows, int64_t ldx, const int8_t* w, int64_t blocks, int64_t k, float* y,
                 int64_t ldy, int64_t cols) {
  int64_t m = 0;
  // 6 rows x 4 blocks: 24 accumulators, 4 widened weights, a broadcast (32 zmm).
  for (; m + 6 <= rows; m += 6) rowsOf<Avx512, 6, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols);
  switch (rows - m) {
    case 5: rowsOf<Avx512, 5, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 4: rowsOf<Avx512, 4, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 3: rowsOf<Avx512, 3, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 2: rowsOf<Avx512, 2, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    case 1: rowsOf<Avx512, 1, 4>(x + m * ldx, ldx, w, blocks, k, y + m * ldy, ldy, cols); break;
    default: break;
  }
}

}  // namespace verifuse::kernels::weight_only
