// Int4WeightMatmul's AVX-512 variant (weight_only.h): per group and column a 16-entry table of
// dequantized weights (float32((u - (Z + 8)) * S), u = 0..15) in one zmm; a 64-byte vector holds
// 16 k of the block's 8 columns, column c in bits 4c..4c+3 of each lane, and vpermps reads an
// index's low 4 bits, so column c's weights are one shift and one lookup away.
#include <immintrin.h>

#include "cpu/weight_only_internal.h"
#include "verifuse/kernels/weight_only.h"

namespace verifuse::kernels::weight_only {

namespace {

constexpr int kColumns = static_cast<int>(Int4WeightMatmul::kColumns);
constexpr int64_t kPrefetchWords = 16 * 64;  // 4 KB ahead

// The 16 lanes of v summed by the fixed tree (j, j + 8), (j, j + 4), (j, j + 2), (j, j + 1).
inline float reduceTree(__m512 v) {
  const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

// R rows x the block's 8 columns: 8R accumulators, 8 tables. Symmetric: u - 8 is a constant
// vector (the same numbers as u - (Z + 8) with Z = 0), so a table is one multiply.
template <int R, bool Symmetric>
void tile(const float* x, int64_t ldx, const uint32_t* block, int64_t groups, int64_t vectorsPerGroup,
          const float* bias, float* y, int64_t ldy, int64_t cols) {
  __m512 acc[R][kColumns];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kColumns; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const uint32_t* p = block;
  int64_t k0 = 0;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const float* scale = reinterpret_cast<const float*>(p);
    const float* zero = scale + kColumns;
    __m512 table[kColumns];
    for (int c = 0; c < kColumns; ++c) {
      const __m512 centred = _mm512_sub_ps(iota, _mm512_set1_ps(Symmetric ? 8.f : zero[c]));
      table[c] = _mm512_mul_ps(centred, _mm512_set1_ps(scale[c]));
    }
    p += int4HeaderWords(Symmetric);
    for (int64_t v = 0; v < vectorsPerGroup; ++v, k0 += Int4WeightMatmul::kChunk, p += kInt4VectorWords) {
      _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchWords), _MM_HINT_T0);
      const __m512i words = _mm512_loadu_si512(p);
      __m512 xv[R];
      for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + k0);
      for (int c = 0; c < kColumns; ++c) {
        const __m512 w = _mm512_permutexvar_ps(c == 0 ? words : _mm512_srli_epi32(words, 4 * c), table[c]);
        for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], w, acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < cols; ++c) {
      const float sum = reduceTree(acc[r][c]);
      y[r * ldy + c] = bias ? sum + bias[c] : sum;
    }
  }
}

template <bool Symmetric>
void rowsOfBlock(const float* x, int64_t rows, int64_t ldx, const uint32_t* block, int64_t groups,
                 int64_t vectorsPerGroup, const float* bias, float* y, int64_t ldy, int64_t cols) {
  int64_t m = 0;
  // 2 rows: 16 accumulators, 8 tables, 2 x vectors, the words and a weight (28 zmm).
  for (; m + 2 <= rows; m += 2) {
    tile<2, Symmetric>(x + m * ldx, ldx, block, groups, vectorsPerGroup, bias, y + m * ldy, ldy, cols);
  }
  if (m < rows) tile<1, Symmetric>(x + m * ldx, ldx, block, groups, vectorsPerGroup, bias, y + m * ldy, ldy, cols);
}

}  // namespace

void int4BlockAvx512(const float* x, int64_t rows, int64_t ldx, const uint32_t* block, int64_t groups,
                     int64_t vectorsPerGroup, bool symmetric, const float* bias, float* y, int64_t ldy, int64_t cols) {
  auto rowsOf = symmetric ? rowsOfBlock<true> : rowsOfBlock<false>;
  rowsOf(x, rows, ldx, block, groups, vectorsPerGroup, bias, y, ldy, cols);
}

}  // namespace verifuse::kernels::weight_only
