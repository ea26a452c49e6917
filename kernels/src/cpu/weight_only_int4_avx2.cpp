// Int4WeightMatmul's AVX2 variant (weight_only.h): the AVX-512 variant's arithmetic on 8-lane
// halves. A dequantized weight is float32((u - (Z + 8)) * S) computed per lane (the table entry
// the AVX-512 variant looks up, by the same two operations), and each 16-lane accumulator is two
// ymm, so both variants give the same bits.
#include <immintrin.h>

#include "cpu/weight_only_internal.h"
#include "verifuse/kernels/weight_only.h"

namespace verifuse::kernels::weight_only {

namespace {

constexpr int kColumns = static_cast<int>(Int4WeightMatmul::kColumns);
constexpr int kPass = 4;  // columns per pass over the block: 8 accumulators, 16 ymm in all

// The 16 lanes (lo = lanes 0..7, hi = 8..15) summed by the AVX-512 variant's tree.
inline float reduceTree(__m256 lo, __m256 hi) {
  const __m256 h8 = _mm256_add_ps(lo, hi);
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_shuffle_ps(h2, h2, 1)));
}

// One row, columns c0 .. c0 + 3 of the block: accumulators [column][half]. The weight of a lane is
// (float(u) - (Z + 8)) * S. Symmetric blocks (Z = 0) take Q itself instead of u - 8 (the same
// number): u ^ 8 is Q's two's-complement nibble, which a left and an arithmetic right shift
// sign-extend, so the subtraction goes and the mask with it (5 operations per 8 weights, not 6).
template <bool Symmetric>
void pass(const float* x, const uint32_t* block, int64_t groups, int64_t vectorsPerGroup, int c0, float out[kPass]) {
  __m256 acc[kPass][2];
  for (int c = 0; c < kPass; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  const __m256i nibble = _mm256_set1_epi32(0xF), recentre = _mm256_set1_epi32(static_cast<int>(0x88888888u));
  const uint32_t* p = block;
  int64_t k0 = 0;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const float* scale = reinterpret_cast<const float*>(p);
    const float* zero = scale + kColumns;  // (not read when symmetric: its header has no zero points)
    p += int4HeaderWords(Symmetric);
    for (int64_t v = 0; v < vectorsPerGroup; ++v, k0 += Int4WeightMatmul::kChunk, p += kInt4VectorWords) {
      for (int half = 0; half < 2; ++half) {
        const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8 * half));
        const __m256 xv = _mm256_loadu_ps(x + k0 + 8 * half);
        const __m256i codes = Symmetric ? _mm256_xor_si256(words, recentre) : words;
        for (int c = 0; c < kPass; ++c) {
          const int col = c0 + c;
          __m256 w;
          if constexpr (Symmetric) {
            const __m256i q = _mm256_srai_epi32(_mm256_slli_epi32(codes, 28 - 4 * col), 28);
            w = _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_broadcast_ss(scale + col));
          } else {
            const __m256i u = _mm256_and_si256(_mm256_srli_epi32(codes, 4 * col), nibble);
            w = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(u), _mm256_broadcast_ss(zero + col)),
                              _mm256_broadcast_ss(scale + col));
          }
          acc[c][half] = _mm256_fmadd_ps(xv, w, acc[c][half]);
        }
      }
    }
  }
  for (int c = 0; c < kPass; ++c) out[c] = reduceTree(acc[c][0], acc[c][1]);
}

}  // namespace

void int4BlockAvx2(const float* x, int64_t rows, int64_t ldx, const uint32_t* block, int64_t groups,
                   int64_t vectorsPerGroup, bool symmetric, const float* bias, float* y, int64_t ldy, int64_t cols) {
  // Row by row, two passes of 4 columns: the block (4 bytes per k plus the headers) stays in L1
  // between passes; this variant is bound by the per-lane dequantization, not by reading weights.
  for (int64_t m = 0; m < rows; ++m) {
    float sums[kColumns];
    for (int c0 = 0; c0 < kColumns; c0 += kPass) {
      if (c0 >= cols) continue;
      (symmetric ? pass<true> : pass<false>)(x + m * ldx, block, groups, vectorsPerGroup, c0, sums + c0);
    }
    for (int64_t c = 0; c < cols; ++c) y[m * ldy + c] = bias ? sums[c] + bias[c] : sums[c];
  }
}

void int4PanelAvx2(const uint32_t* block, int64_t groups, int64_t groupSize, bool symmetric, int64_t k, float* out) {
  const uint32_t* p = block;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const float* scale = reinterpret_cast<const float*>(p);
    const float* header = scale + kColumns;
    p += int4HeaderWords(symmetric);
    for (int c = 0; c < kColumns; ++c) {
      const float zero = symmetric ? 8.f : header[c], s = scale[c];
      float* row = out + c * k + gi * groupSize;
      // (u - (Z + 8)) * S: the kernels' two float32 operations (-ffp-contract cannot fuse them).
      for (int64_t j = 0; j < groupSize; ++j) row[j] = (static_cast<float>((p[j] >> (4 * c)) & 0xFu) - zero) * s;
    }
    p += groupSize;
  }
}

}  // namespace verifuse::kernels::weight_only
