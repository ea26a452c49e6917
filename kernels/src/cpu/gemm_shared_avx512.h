// Pieces shared by the AVX-512 GEMM kernels (gemm_avx512.cpp, float32; gemm_bf16_avx512.cpp,
// bf16; gemm_bf16_widening_avx512.cpp): the float32 K step, how a finished tile leaves the
// registers. Included only by files built with at least
// -mavx512f; internal linkage on purpose, as in gemm_shared_avx2.h.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "cpu/gemm_shared_avx2.h"  // VF_GEMM_INLINE

namespace verifuse::kernels::gemm::detail {
namespace {

/// One K step of an MR x (16·NP) tile: NP aligned B loads (the group's panels \p bStride floats
/// apart), MR broadcasts of A, MR·NP FMAs into the chains.
template <int MR, int NP>
VF_GEMM_INLINE void kStep(__m512 (&acc)[MR][NP], const float* __restrict ab, int64_t lda,
                          const float* __restrict bb, int64_t bStride, int64_t k) {
  __m512 bv[NP];
#pragma GCC unroll 8
  for (int q = 0; q < NP; ++q) bv[q] = _mm512_load_ps(bb + q * bStride + 16 * k);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const __m512 av = _mm512_set1_ps(ab[i * lda + k]);
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
  }
}

/// Hands each vector of a finished MR x (16·NP) tile at (row0, col0) to its epilogue, only the
/// real columns (cols of 16·NP). Full vectors take \p fast(y + bias, row, j) when \p inlined (the
/// epilogues a kernel keeps inline: bias only, bias + residual sum); the rest take
/// \p slow(y, row, j, count), out of line (its constants would crowd the K loop's registers).
template <int MR, int NP, typename Fast, typename Slow>
VF_GEMM_INLINE void finishTileVectors(__m512 (&acc)[MR][NP], int64_t row0, int64_t col0, int64_t cols,
                                      const float* bias, bool inlined, Fast&& fast, Slow&& slow) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) {
      const int64_t count = std::min<int64_t>(16, cols - 16 * v);
      if (count <= 0) break;
      const int64_t row = row0 + i, j = col0 + 16 * v;
      if (inlined && count == 16) {
        __m512 y = acc[i][v];
        if (bias != nullptr) y = _mm512_add_ps(y, _mm512_loadu_ps(bias + j));
        fast(y, row, j);
        continue;
      }
      slow(acc[i][v], row, j, count);
    }
  }
}

}  // namespace
}  // namespace verifuse::kernels::gemm::detail
