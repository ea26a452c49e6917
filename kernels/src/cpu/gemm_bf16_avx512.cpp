// bfloat16 GEMM with fused epilogues on AVX512-BF16 (built with -mavx512bf16; reached only after
// gemm::availableBf16()). c[M,N] (bf16) = epilogue(a[M,K] (bf16) · B) with B packed once in bf16.
//
// Same loop structure as the float32 AVX-512 kernel (gemm_avx512.cpp): groups of 3 panels of 16
// columns, row tiles of <= 8 rows of near-equal height, the whole K in 24 zmm accumulators, A read
// in place, the next group prefetched while a group's tiles run. The difference is the step: one
// vdpbf16ps multiplies a pair of bf16 (k, k+1) of A (broadcast as one 32-bit lane) with the packed
// pairs of 16 columns of B and adds both products to the float32 accumulator, so a K step pair
// costs what one float32 step does: twice the multiply-adds per cycle.
//
// Numerics: float32 accumulation, one bf16 rounding (round to nearest even) of the final value
// after bias and post-ops, like oneDNN's bf16 inner product whose place it takes (not eager's
// separate bf16 ops, which round after each op; the bf16 tolerances cover that).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"
#include "cpu/gemm_shared_avx512.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::gemm::detail {
namespace {

constexpr int64_t kMRMax = 8;
constexpr int64_t kNP = 3;
constexpr int64_t kMCMax = 192;

/// Bf16 lanes per packed panel row: 16 columns x a (k, k+1) pair.
constexpr int64_t kPairLanes = 32;

// ---- micro-kernel --------------------------------------------------------------------------------

VF_GEMM_INLINE __m512i broadcastPair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

/// finish(acc[MR][NP]) with acc = a[MR rows, K] · B over the whole K (float32).
/// \p b: the first panel of the group ([kPairs][16][2] bf16 each, \p panelStride lanes apart).
template <int MR, int NP, typename Finish>
VF_GEMM_INLINE void micro(const uint16_t* __restrict a, int64_t lda, int64_t K,
                          const uint16_t* __restrict b, int64_t panelStride, const uint16_t* pf,
                          int64_t pfLines, Finish&& finish) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_setzero_ps();
  auto step = [&](int64_t p, auto loadA) __attribute__((always_inline)) {
    __m512i bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      bv[q] = _mm512_load_si512(reinterpret_cast<const void*>(b + q * panelStride + kPairLanes * p));
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512i av = loadA(i);
#pragma GCC unroll 8
      for (int v = 0; v < NP; ++v) {
        acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)av, (__m512bh)bv[v]);
      }
    }
  };
  const int64_t pairs = K / 2;
  int64_t p = 0;
  const int64_t withPrefetch = std::min(pfLines, pairs);
#pragma GCC unroll 2
  for (; p < withPrefetch; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(pf + kPairLanes * p), _MM_HINT_T1);
    step(p, [&](int i) __attribute__((always_inline)) { return broadcastPair(a + i * lda + 2 * p); });
  }
#pragma GCC unroll 4
  for (; p < pairs; ++p) {
    step(p, [&](int i) __attribute__((always_inline)) { return broadcastPair(a + i * lda + 2 * p); });
  }
  if (K % 2 != 0) {  // the last k alone: (a[K-1], 0) against the packed (B[K-1], 0) pairs
    step(p, [&](int i) __attribute__((always_inline)) {
      return _mm512_set1_epi32(static_cast<int32_t>(a[i * lda + K - 1]));
    });
  }
  finish(acc);
}

// ---- epilogue ------------------------------------------------------------------------------------

/// One call's output side: c, the float32 bias, the post-ops (eltwise or a sum with a bf16
/// residual).
struct CtxBf16 {
  uint16_t* c;
  int64_t ldc;
  int64_t n;
  const float* bias;
  const EpiOp* ops;
  int nOps;
  const uint16_t* residual;
  int64_t ldr;
};


/// c[row][j .. j + count) = bf16(post-ops(y + bias)), count <= 16. GELU (erf and tanh) 16 lanes
/// wide (vecmath_avx512.h, the forms for a bf16 result), the other eltwise ops on the two 8-float halves (applyOp), sum with the bf16
/// residual widened exactly. Called only out of line (finishBufferBf16, finishPartialVectorBf16),
/// like the float32 kernel's: the K loop keeps its registers.
VF_GEMM_INLINE void finishVectorBf16(const CtxBf16& x, __m512 y, int64_t i, int64_t j, int64_t count) {
  const bool full = count == 16;
  const __mmask16 k = full ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
  if (x.bias != nullptr) {
    y = _mm512_add_ps(y, full ? _mm512_loadu_ps(x.bias + j) : _mm512_maskz_loadu_ps(k, x.bias + j));
  }
  for (int o = 0; o < x.nOps; ++o) {
    const EpiOp& e = x.ops[o];
    if (e.kind == EpiOp::Kind::kSum) {
      const uint16_t* r = x.residual + i * x.ldr + j;
      const __m256i h = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)) : _mm256_maskz_loadu_epi16(k, r);
      const __m512 rv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      y = _mm512_fmadd_ps(_mm512_set1_ps(e.alpha), rv, y);
    } else if (e.kind == EpiOp::Kind::kGeluErf) {
      y = cpu::avx512::geluErfForBf16(y);
    } else if (e.kind == EpiOp::Kind::kGeluTanh) {
      y = cpu::avx512::geluTanhForBf16(y);
    } else {
      const int64_t loCount = std::min<int64_t>(8, count), hiCount = std::max<int64_t>(0, count - 8);
      __m256 lo = _mm512_castps512_ps256(y), hi = _mm512_extractf32x8_ps(y, 1);
      lo = applyOp(e, lo, i, j, loCount == 8, maskOf(loCount));
      if (hiCount > 0) hi = applyOp(e, hi, i, j + 8, hiCount == 8, maskOf(hiCount));
      y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    }
  }
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(y);
  uint16_t* dst = x.c + i * x.ldc + j;
  if (full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
  } else {
    _mm256_mask_storeu_epi16(dst, k, h);
  }
}

/// The post-ops finishInRegistersBf16 does not keep inline (the other eltwise ops, chains of
/// several) over a finished tile parked in \p buf (rows x \p ld floats, bias not yet added), one
/// out-of-line call per tile: the loop keeps the post-ops' constants in registers and overlaps the
/// vectors' long dependency chains, which one call per vector did not (BERT's fc + GELU at 128 x
/// 768 x 3072 on Zen 5, when GELU still came this way: 411 -> 455 GFLOP/s).
__attribute__((noinline)) void finishBufferBf16(const CtxBf16& x, const float* buf, int64_t ld, int rows,
                                                int64_t row0, int64_t col0, int64_t cols) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; j += 16) {
      finishVectorBf16(x, _mm512_load_ps(buf + i * ld + j), row0 + i, col0 + j, std::min<int64_t>(16, cols - j));
    }
  }
}

/// A last partial vector of a tile whose other vectors finished inline.
__attribute__((noinline)) void finishPartialVectorBf16(const CtxBf16& x, __m512 y, int64_t i, int64_t j,
                                                       int64_t count) {
  finishVectorBf16(x, y, i, j, count);
}

/// Stores a finished tile straight from the registers. The common cases inline, with the same
/// operations as finishVectorBf16 (so the same bits): bias only, and bias + residual sum (the
/// transformer's output projections). The others go through finishBufferBf16. NOTE: bias-only
/// and sum tiles went through a stack buffer and one out-of-line call per vector once, which cost a
/// third of the time at K <= 512 (the bf16 K loop is twice as fast as float32's, so the epilogue
/// weighs twice as much); they stay in the registers.
template <int MR, int NP>
VF_GEMM_INLINE void finishInRegistersBf16(const CtxBf16& x, __m512 (&acc)[MR][NP], int64_t row0,
                                          int64_t col0, int64_t cols) {
  const bool sumOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kSum;
  // ReLU (conv/linear + ReLU) inline too: through the buffer it cost 3.5% of a bf16
  // 1024 x 768 x 3072 linear, which oneDNN's post-op does not. max(0, y) as applyOp's relu.
  const bool reluOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kRelu;
  // GELU alone (fc1 of BERT/ViT/GPT-2) inline too since it became a table-driven polynomial
  // (vecmath_avx512.h): through the buffer it cost 2-3% of a bf16 1576 x 768 x 3072 linear.
  const bool geluErfOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kGeluErf;
  const bool geluTanhOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kGeluTanh;
  const bool inlined = x.nOps == 0 || sumOnly || reluOnly || geluErfOnly || geluTanhOnly;
  alignas(64) float buf[MR][NP * 16];
  finishTileVectors<MR, NP>(
      acc, row0, col0, cols, x.bias, inlined,
      [&](__m512 y, int64_t row, int64_t j) __attribute__((always_inline)) {
        if (sumOnly) {
          const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.residual + row * x.ldr + j));
          const __m512 rv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          y = _mm512_fmadd_ps(_mm512_set1_ps(x.ops[0].alpha), rv, y);
        }
        if (reluOnly) y = _mm512_max_ps(_mm512_setzero_ps(), y);
        if (geluErfOnly) y = cpu::avx512::geluErfForBf16(y);
        if (geluTanhOnly) y = cpu::avx512::geluTanhForBf16(y);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(x.c + row * x.ldc + j), (__m256i)_mm512_cvtneps_pbh(y));
      },
      [&](__m512 y, int64_t row, int64_t j, int64_t count) __attribute__((always_inline)) {
        if (inlined) {
          finishPartialVectorBf16(x, y, row, j, count);
        } else {
          _mm512_store_ps(&buf[row - row0][j - col0], y);
        }
      });
  if (!inlined) finishBufferBf16(x, &buf[0][0], NP * 16, MR, row0, col0, cols);
}

// ---- tiles ---------------------------------------------------------------------------------------

template <int MR, int NP>
__attribute__((noinline)) void tile(const CtxBf16& x, const uint16_t* a, int64_t lda,
                                    const PackedWeightsBf16& B, int64_t panel, int64_t row0,
                                    int64_t cols, const uint16_t* pf, int64_t pfLines) {
  const int64_t panelStride = B.kPairs() * kPairLanes;
  if (x.residual != nullptr) {
    // The residual lines the epilogue reads (tiles walk down the rows, which no hardware
    // prefetcher follows): asked for before the K loop, as the float32 kernel does.
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const uint16_t* r = x.residual + (row0 + i) * x.ldr + panel * 16;
      for (int64_t j = 0; j < cols; j += 32) _mm_prefetch(reinterpret_cast<const char*>(r + j), _MM_HINT_T0);
    }
  }
  micro<MR, NP>(a, lda, B.k(), B.data() + panel * panelStride, panelStride, pf, pfLines,
                [&](__m512 (&acc)[MR][NP]) __attribute__((always_inline)) {
                  finishInRegistersBf16<MR, NP>(x, acc, row0, panel * 16, cols);
                });
}

using TileFn = void (*)(const CtxBf16&, const uint16_t*, int64_t, const PackedWeightsBf16&, int64_t,
                        int64_t, int64_t, const uint16_t*, int64_t);

template <int NP, int... MRs>
constexpr auto makeTileTable(std::integer_sequence<int, MRs...>) {
  return std::array<TileFn, sizeof...(MRs)>{&tile<MRs + 1, NP>...};
}
constexpr auto kTiles1 = makeTileTable<1>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles2 = makeTileTable<2>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles3 = makeTileTable<3>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles4 = makeTileTable<4>(std::make_integer_sequence<int, 4>{});

// ---- per-thread work -----------------------------------------------------------------------------

void computeRegion(const ProblemBf16& p, const CtxBf16& x, int64_t m0, int64_t m1, int64_t p0,
                   int64_t p1) {
  const PackedWeightsBf16& B = *p.b;
  const int64_t N = B.n();
  const int64_t panelStride = B.kPairs() * kPairLanes;
  const int64_t rows = m1 - m0;
  const int64_t nIC = (rows + kMCMax - 1) / kMCMax;
  // Blocks of a multiple of 8 rows, so that every tile but the last block's is 8 rows tall: 1024
  // rows as 6 blocks of 171 made tiles of 7 and 8 rows (1024x512x2048: 216 -> 220 GFLOP/s, 1024x768x768
  // 221 -> 224, alternated runs; level where the blocks were multiples of 8 already).
  const int64_t mc = ((rows + nIC - 1) / nIC + kMRMax - 1) / kMRMax * kMRMax;
  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcur = std::min(mc, m1 - ic);
    const bool wide = mcur <= 4;
    const int64_t group = wide ? 4 : kNP;
    const int64_t nTiles = wide ? 1 : (mcur + kMRMax - 1) / kMRMax;
    for (int64_t g = p0; g < p1; g += group) {
      const int64_t gp = std::min(group, p1 - g);
      const int64_t cols = std::min<int64_t>(16 * gp, N - g * 16);
      // The next group's panels are contiguous: each tile prefetches its share of their lines.
      // Not for decode-sized tiles, as in the float32 kernel (1x512x32000: 37 -> 45 GFLOP/s).
      const bool more = g + gp < p1 || ic + mcur < m1;
      const int64_t next = g + gp < p1 ? g + gp : p0;
      const int64_t lines = more && !wide ? std::min(group, p1 - next) * B.kPairs() : 0;
      const uint16_t* nextData = B.data() + next * panelStride;
      for (int64_t t = 0; t < nTiles; ++t) {
        const int64_t r0 = mcur * t / nTiles, r1 = mcur * (t + 1) / nTiles;
        const int64_t mr = r1 - r0;
        const int64_t l0 = lines * t / nTiles, l1 = lines * (t + 1) / nTiles;
        const uint16_t* pf = nextData + kPairLanes * l0;
        const uint16_t* a = p.a + (ic + r0) * p.lda;
        if (wide && gp == 3) {  // a 4-panel group cut short: a pair, then one panel
          kTiles2[mr - 1](x, a, p.lda, B, g, ic + r0, 32, pf, l1 - l0);
          kTiles1[mr - 1](x, a, p.lda, B, g + 2, ic + r0, cols - 32, nullptr, 0);
          continue;
        }
        switch (gp) {
          case 4: kTiles4[mr - 1](x, a, p.lda, B, g, ic + r0, cols, pf, l1 - l0); break;
          case 3: kTiles3[mr - 1](x, a, p.lda, B, g, ic + r0, cols, pf, l1 - l0); break;
          case 2: kTiles2[mr - 1](x, a, p.lda, B, g, ic + r0, cols, pf, l1 - l0); break;
          default: kTiles1[mr - 1](x, a, p.lda, B, g, ic + r0, cols, pf, l1 - l0); break;
        }
      }
    }
  }
}

}  // namespace

Status runBf16Avx512(const ProblemBf16& p) {
  const CtxBf16 x{p.c, p.ldc, p.b->n(), p.bias, p.ops, p.nOps, p.residual, p.ldr};
  splitOverThreads(p.threads, p.m, kMRMax, (p.b->n() + 15) / 16, kNP,
                   [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
                     computeRegion(p, x, m0, m1, q0, q1);
                     return true;
                   });
  return Status::ok();
}

}  // namespace verifuse::kernels::gemm::detail
