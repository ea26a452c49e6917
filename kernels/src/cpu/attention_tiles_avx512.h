// Internal to the attention tiles (attention_tiles_avx512.cpp, attention_tiles_bf16_avx512.cpp;
// include only from files built with AVX-512 flags): the register-tile loops both element types
// share. A Step policy says what one reduction step reads and does:
//   using T;                         element type of a and b
//   static constexpr int64_t kRow;   elements per packed row of one panel (one 64-byte zmm)
//   static constexpr int64_t kK;     reduction indices per step (1 for float32, a pair for bf16)
//   loadB(const T*) -> B,  broadcast(const T* aRow, int64_t step) -> A,
//   broadcastTail(const T* aRow, int64_t step) -> A (a lone last index; bf16 only),
//   madd(__m512 acc, A, B) -> __m512.
// A Store receives each finished 16-lane sum: store(row, panel, sums).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace verifuse::kernels::cpu::tiles {

/// Where a tile's float32 sums go: the score tile as they are (lds >= panels·16).
struct StoreScores {
  float* s;
  int64_t lds;
  __attribute__((always_inline)) void operator()(int64_t i, int64_t panel, __m512 y) const {
    _mm512_storeu_ps(s + i * lds + 16 * panel, y);
  }
};

/// Rows i0..i0+MR-1, panels q0..q0+NP-1 of a · B: a's row i at a + i·lda, steps reduction steps
/// (and one lone index when tail), B's panels panelStride elements apart.
template <typename Step, int MR, int NP, typename Store>
__attribute__((always_inline)) inline void tile(const typename Step::T* __restrict a, int64_t lda, int64_t steps,
                                                bool tail, const typename Step::T* __restrict b, int64_t panelStride,
                                                const Store& store, int64_t i0, int64_t q0) {
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) acc[i][q] = _mm512_setzero_ps();
  auto step = [&](int64_t p, auto loadA) __attribute__((always_inline)) {
    decltype(Step::loadB(b)) bv[NP];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) bv[q] = Step::loadB(b + q * panelStride + Step::kRow * p);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const auto av = loadA(i);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) acc[i][q] = Step::madd(acc[i][q], av, bv[q]);
    }
  };
#pragma GCC unroll 4
  for (int64_t p = 0; p < steps; ++p) {
    step(p, [&](int i) __attribute__((always_inline)) { return Step::broadcast(a + i * lda, p); });
  }
  if (tail) {
    step(steps, [&](int i) __attribute__((always_inline)) { return Step::broadcastTail(a + i * lda, steps); });
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) store(i0 + i, q0 + q, acc[i][q]);
}

/// Every row of a (n rows) against NP panels, in tiles of MRMax rows and one shorter tile.
template <typename Step, int MRMax, int NP, typename Store>
void rowTiles(const typename Step::T* a, int64_t lda, int64_t n, int64_t steps, bool tail, const typename Step::T* b,
              int64_t panelStride, const Store& store, int64_t q0) {
  int64_t i = 0;
  for (; i + MRMax <= n; i += MRMax) {
    tile<Step, MRMax, NP>(a + i * lda, lda, steps, tail, b, panelStride, store, i, q0);
  }
  const int64_t rest = n - i;
  if (rest == 0) return;
  a += i * lda;
  switch (rest) {
#define VF_TAIL(R)                                                                             \
  case R:                                                                                      \
    if constexpr (R < MRMax) tile<Step, R, NP>(a, lda, steps, tail, b, panelStride, store, i, q0); \
    break;
    VF_TAIL(1) VF_TAIL(2) VF_TAIL(3) VF_TAIL(4) VF_TAIL(5) VF_TAIL(6) VF_TAIL(7)
#undef VF_TAIL
    default:
      break;
  }
}

/// a[n rows] · B over groups of up to NPMax panels, each sum to store.
template <typename Step, int MRMax, int NPMax, typename Store>
void matmul(const typename Step::T* a, int64_t lda, int64_t n, int64_t steps, bool tail, const typename Step::T* b,
            int64_t panelStride, int64_t panels, const Store& store) {
  for (int64_t q0 = 0; q0 < panels; q0 += NPMax) {
    const typename Step::T* bg = b + q0 * panelStride;
    switch (std::min<int64_t>(NPMax, panels - q0)) {
      case 1: rowTiles<Step, MRMax, 1>(a, lda, n, steps, tail, bg, panelStride, store, q0); break;
      case 2: rowTiles<Step, MRMax, 2>(a, lda, n, steps, tail, bg, panelStride, store, q0); break;
      case 3: rowTiles<Step, MRMax, 3>(a, lda, n, steps, tail, bg, panelStride, store, q0); break;
      default:
        if constexpr (NPMax >= 4) rowTiles<Step, MRMax, 4>(a, lda, n, steps, tail, bg, panelStride, store, q0);
        break;
    }
  }
}

/// Mask of the lanes of panel \p panel that lie below \p count columns.
inline __mmask16 panelMask(int64_t count, int64_t panel) {
  const int64_t left = count - 16 * panel;
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

}  // namespace verifuse::kernels::cpu::tiles
