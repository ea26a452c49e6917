// bfloat16 GEMM on AVX-512 CPUs without AVX512-BF16 (Skylake-SP, Cascade Lake, Ice Lake: built with
// -mavx512f...; reached only when activeBf16Variant() is kAvx512Widening). c[M,N] (bf16) =
// bf16(epilogue(a[M,K] (bf16) · B)) with B packed once in bf16 (PackedWeightsBf16, the pair layout
// all bf16 variants read), every value widened to float32 in the kernel (exact).
//
// Numerics (gemm.h, runBf16): exactly gemm::run()'s AVX-512 float32 computation on the widened
// operands (the FMA chain over k = 0..K-1 from +0, + bias, the post-ops: GELU (erf) 16 lanes wide
// with vecmath_avx512.h, the others with the AVX2 vector math on each half, the residual widened),
// then one rounding to bf16 (nearest even, NaN -> 0x7FC0). It differs from the AVX2 widening
// variant only where run()'s two variants do (GELU erf, within 2 ulp before the rounding).
//
// Loop structure: the float32 AVX-512 kernel's (gemm_avx512.cpp): row blocks of <= 192 rows, groups
// of 3 panels (48 columns), tiles of <= 8 rows of near-equal height with the whole K in 24 zmm
// accumulators, the next group prefetched by the tiles of this one. The row block of A is widened
// once into a float32 copy (row-major, K padded to even with 0), which the tiles then read as the
// float32 kernel reads A (a broadcast per row and k). Each group of B panels is widened once per
// row block into a float32 buffer ([panel][k][16], 3·K·64 B, in L2 as the float32 kernel's groups
// are) that the group's tiles read with the float32 micro-kernel's loads: measured (SPR capped to
// avx512, 1 thread, 128x768x3072) 106 GFLOP/s when the tiles widened B in registers (a shift and an
// and per pair row and panel, on the port the FMAs need: 87% of the float32 kernel's 121), level
// with the float32 kernel with the buffer. Decode-sized blocks (<= 4 rows) stream B once: they
// widen in registers (the even k of a pair: the lane shifted left by 16; the odd k: the lane with
// its low half cleared), take 4-panel tiles and prefetch nothing, as the float32 kernel.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"
#include "cpu/gemm_shared_avx512.h"
#include "cpu/vecmath_avx2.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::gemm::detail {
namespace {

constexpr int64_t kMRMax = 8;
constexpr int64_t kNP = 3;
constexpr int64_t kMCMax = 192;
/// bf16 lanes per packed pair row: 16 columns x (k, k + 1).
constexpr int64_t kPairLanes = 32;

/// One call's output side: c (bf16), the float32 bias, the post-ops and the bf16 residual.
struct CtxW {
  uint16_t* c;
  int64_t ldc;
  int64_t n;
  const float* bias;
  const EpiOp* ops;
  int nOps;
  const uint16_t* residual;
  int64_t ldr;
};

// ---- micro-kernel --------------------------------------------------------------------------------

/// acc[MR][NP] = a[MR rows, kp] · B over the whole kp, then finish(acc): the float32 kernel's
/// micro-kernel on a widened group. \p a: widened rows (row stride \p lda floats); \p bw: the
/// group's widened panels ([kp][16] floats each, \p wStride floats apart, 64-byte aligned); the
/// first \p pfLines K steps each prefetch one line of \p pf (64 B apart) into L2.
template <int MR, int NP, typename Finish>
VF_GEMM_INLINE void microWidened(const float* __restrict a, int64_t lda, int64_t kp, const float* __restrict bw,
                                 int64_t wStride, const uint16_t* pf, int64_t pfLines, Finish&& finish) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_setzero_ps();
  auto step = [&](int64_t k) __attribute__((always_inline)) { kStep<MR, NP>(acc, a, lda, bw, wStride, k); };
  int64_t k = 0;
  const int64_t withPrefetch = std::min(pfLines, kp);
#pragma GCC unroll 4
  for (; k < withPrefetch; ++k) {
    _mm_prefetch(reinterpret_cast<const char*>(pf + kPairLanes * k), _MM_HINT_T1);
    step(k);
  }
#pragma GCC unroll 4
  for (; k < kp; ++k) step(k);
  finish(acc);
}

/// The same with B read from the packed bf16 panels and widened in registers (decode-sized tiles):
/// \p b: the first panel of the group (\p panelStride bf16 apart).
template <int MR, int NP, typename Finish>
VF_GEMM_INLINE void micro(const float* __restrict a, int64_t lda, int64_t pairs, const uint16_t* __restrict b,
                          int64_t panelStride, const uint16_t* pf, int64_t pfLines, Finish&& finish) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    __m512i raw[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      raw[q] = _mm512_load_si512(reinterpret_cast<const void*>(b + q * panelStride + kPairLanes * p));
    }
    __m512 bv[NP];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) bv[q] = _mm512_castsi512_ps(_mm512_slli_epi32(raw[q], 16));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + 2 * p]);
#pragma GCC unroll 8
      for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) bv[q] = _mm512_castsi512_ps(_mm512_and_si512(raw[q], high));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 av = _mm512_set1_ps(a[i * lda + 2 * p + 1]);
#pragma GCC unroll 8
      for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
    }
  };
  int64_t p = 0;
  const int64_t withPrefetch = std::min(pfLines, pairs);
#pragma GCC unroll 2
  for (; p < withPrefetch; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(pf + kPairLanes * p), _MM_HINT_T1);
    step(p);
  }
#pragma GCC unroll 2
  for (; p < pairs; ++p) step(p);
  finish(acc);
}

// ---- epilogue ------------------------------------------------------------------------------------

/// c[row][j .. j + count) = bf16(post-ops(y + bias)), count <= 16: gemm_avx512.cpp's finishVector
/// (the same operations, so the same float32 values) with the bf16 residual widened, then one
/// rounding. The residual element is read before c's is written (the in-place residual add).
VF_GEMM_INLINE void finishVector(const CtxW& x, __m512 y, int64_t row, int64_t j, int64_t count) {
  const bool full = count == 16;
  const __mmask16 k = full ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
  if (x.bias != nullptr) {
    y = _mm512_add_ps(y, full ? _mm512_loadu_ps(x.bias + j) : _mm512_maskz_loadu_ps(k, x.bias + j));
  }
  for (int o = 0; o < x.nOps; ++o) {
    const EpiOp& e = x.ops[o];
    if (e.kind == EpiOp::Kind::kGeluErf) {
      y = cpu::avx512::geluErf(y);
      continue;
    }
    if (e.kind == EpiOp::Kind::kSum) {
      const uint16_t* r = x.residual + row * x.ldr + j;
      const __m256i h = full ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r)) : _mm256_maskz_loadu_epi16(k, r);
      const __m512 rv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      y = _mm512_fmadd_ps(_mm512_set1_ps(e.alpha), rv, y);
      continue;
    }
    const int64_t loCount = std::min<int64_t>(8, count), hiCount = std::max<int64_t>(0, count - 8);
    __m256 lo = _mm512_castps512_ps256(y), hi = _mm512_extractf32x8_ps(y, 1);
    lo = applyOp(e, lo, row, j, loCount == 8, maskOf(loCount));
    if (hiCount > 0) hi = applyOp(e, hi, row, j + 8, hiCount == 8, maskOf(hiCount));
    y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }
  const __m256i h = _mm512_cvtepi32_epi16(cpu::avx512::detail::toBf16Bits(y));
  uint16_t* dst = x.c + row * x.ldc + j;
  if (full) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), h);
  } else {
    _mm256_mask_storeu_epi16(dst, k, h);
  }
}

/// A finished tile parked in \p buf (rows x \p ld floats, bias not yet added), one out-of-line
/// call per tile (the post-ops' constants stay out of the K loop's registers).
__attribute__((noinline)) void finishBuffer(const CtxW& x, const float* buf, int64_t ld, int rows, int64_t row0,
                                            int64_t col0, int64_t cols) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; j += 16) {
      finishVector(x, _mm512_load_ps(buf + i * ld + j), row0 + i, col0 + j, std::min<int64_t>(16, cols - j));
    }
  }
}

// ---- tiles ---------------------------------------------------------------------------------------

template <int MR>
VF_GEMM_INLINE void prefetchResidual(const CtxW& x, int64_t row0, int64_t col0, int64_t cols) {
  if (x.residual == nullptr) return;  // the residual lines the epilogue reads (rows no prefetcher follows)
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const uint16_t* r = x.residual + (row0 + i) * x.ldr + col0;
    for (int64_t j = 0; j < cols; j += 32) _mm_prefetch(reinterpret_cast<const char*>(r + j), _MM_HINT_T0);
  }
}

template <int MR, int NP>
VF_GEMM_INLINE void finishTile(const CtxW& x, __m512 (&acc)[MR][NP], int64_t row0, int64_t col0, int64_t cols) {
  alignas(64) float buf[MR][NP * 16];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) _mm512_store_ps(&buf[i][16 * v], acc[i][v]);
  finishBuffer(x, &buf[0][0], NP * 16, MR, row0, col0, cols);
}

/// An MR x (16·NP) tile of a decode-sized block, B widened in registers.
template <int MR, int NP>
__attribute__((noinline)) void tile(const CtxW& x, const float* a, int64_t lda, const PackedWeightsBf16& B,
                                    int64_t panel, int64_t row0, int64_t cols, const uint16_t* pf, int64_t pfLines) {
  const int64_t panelStride = B.kPairs() * kPairLanes;
  prefetchResidual<MR>(x, row0, panel * 16, cols);
  micro<MR, NP>(a, lda, B.kPairs(), B.data() + panel * panelStride, panelStride, pf, pfLines,
                [&](__m512 (&acc)[MR][NP]) __attribute__((always_inline)) {
                  finishTile<MR, NP>(x, acc, row0, panel * 16, cols);
                });
}

/// An MR x (16·NP) tile over a widened group \p bw (panels \p wStride floats apart).
template <int MR, int NP>
__attribute__((noinline)) void tileWidened(const CtxW& x, const float* a, int64_t lda, int64_t kp, const float* bw,
                                           int64_t wStride, int64_t col0, int64_t row0, int64_t cols,
                                           const uint16_t* pf, int64_t pfLines) {
  prefetchResidual<MR>(x, row0, col0, cols);
  microWidened<MR, NP>(a, lda, kp, bw, wStride, pf, pfLines, [&](__m512 (&acc)[MR][NP]) __attribute__((always_inline)) {
    finishTile<MR, NP>(x, acc, row0, col0, cols);
  });
}

using TileFn = void (*)(const CtxW&, const float*, int64_t, const PackedWeightsBf16&, int64_t, int64_t, int64_t,
                        const uint16_t*, int64_t);
using TileWidenedFn = void (*)(const CtxW&, const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                               int64_t, const uint16_t*, int64_t);

template <int NP, int... MRs>
constexpr auto makeTileTable(std::integer_sequence<int, MRs...>) {
  return std::array<TileFn, sizeof...(MRs)>{&tile<MRs + 1, NP>...};
}
template <int NP, int... MRs>
constexpr auto makeWidenedTable(std::integer_sequence<int, MRs...>) {
  return std::array<TileWidenedFn, sizeof...(MRs)>{&tileWidened<MRs + 1, NP>...};
}
constexpr auto kTiles1 = makeTileTable<1>(std::make_integer_sequence<int, 4>{});
constexpr auto kTiles2 = makeTileTable<2>(std::make_integer_sequence<int, 4>{});
constexpr auto kTiles4 = makeTileTable<4>(std::make_integer_sequence<int, 4>{});
constexpr auto kWidened1 = makeWidenedTable<1>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kWidened2 = makeWidenedTable<2>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kWidened3 = makeWidenedTable<3>(std::make_integer_sequence<int, kMRMax>{});

/// Panels [g, g + gp) of B (all of kp) widened into \p out: panel q at out + q·kp·16, row k of it
/// the 16 columns' values of k.
void widenGroup(const PackedWeightsBf16& B, int64_t g, int64_t gp, float* __restrict out) {
  const int64_t pairs = B.kPairs(), kp = 2 * pairs;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t q = 0; q < gp; ++q) {
    const uint16_t* src = B.data() + (g + q) * pairs * kPairLanes;
    float* dst = out + q * kp * 16;
#pragma GCC unroll 4
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512i v = _mm512_load_si512(reinterpret_cast<const void*>(src + kPairLanes * p));
      _mm512_store_ps(dst + 32 * p, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
      _mm512_store_ps(dst + 32 * p + 16, _mm512_castsi512_ps(_mm512_and_si512(v, high)));
    }
  }
}

/// rows x kp floats (row stride kp) = the bf16 rows of a (row stride lda) widened, 0 past K.
void widenRows(const uint16_t* a, int64_t lda, int64_t rows, int64_t K, int64_t kp, float* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* src = a + i * lda;
    float* dst = out + i * kp;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + k));
      _mm512_storeu_ps(dst + k, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    if (k < K) {
      const __mmask16 m = static_cast<__mmask16>((1u << (K - k)) - 1u);
      const __m256i h = _mm256_maskz_loadu_epi16(m, src + k);
      _mm512_mask_storeu_ps(dst + k, m, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
    for (k = K; k < kp; ++k) dst[k] = 0.f;
  }
}

/// Rows [m0, m1) x panels [p0, p1) of c. \returns false if scratch allocation failed.
bool computeRegion(const ProblemBf16& p, const CtxW& x, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedWeightsBf16& B = *p.b;
  const int64_t N = B.n(), K = B.k(), kp = 2 * B.kPairs();
  const int64_t panelStride = B.kPairs() * kPairLanes;
  const int64_t rows = m1 - m0;
  const int64_t nIC = (rows + kMCMax - 1) / kMCMax;
  const int64_t mc = ((rows + nIC - 1) / nIC + kMRMax - 1) / kMRMax * kMRMax;
  // Scratch: the row block of A widened, then one group of B widened (64-byte aligned).
  const size_t aFloats = (static_cast<size_t>(std::min(mc, rows) * kp) + 15) / 16 * 16;
  float* aWide = tlsScratch.get(aFloats + static_cast<size_t>(kNP * kp * 16));
  if (aWide == nullptr) return false;
  float* bWide = aWide + aFloats;
  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcur = std::min(mc, m1 - ic);
    widenRows(p.a + ic * p.lda, p.lda, mcur, K, kp, aWide);
    const bool wide = mcur <= 4;
    const int64_t group = wide ? 4 : kNP;
    const int64_t nTiles = wide ? 1 : (mcur + kMRMax - 1) / kMRMax;
    for (int64_t g = p0; g < p1; g += group) {
      const int64_t gp = std::min(group, p1 - g);
      const int64_t cols = std::min<int64_t>(16 * gp, N - g * 16);
      // The next group's panels are contiguous: each tile prefetches its share of their lines.
      const bool more = g + gp < p1 || ic + mcur < m1;
      const int64_t next = g + gp < p1 ? g + gp : p0;
      const int64_t lines = more && !wide ? std::min(group, p1 - next) * B.kPairs() : 0;
      const uint16_t* nextData = B.data() + next * panelStride;
      if (!wide) widenGroup(B, g, gp, bWide);
      for (int64_t t = 0; t < nTiles; ++t) {
        const int64_t r0 = mcur * t / nTiles, r1 = mcur * (t + 1) / nTiles;
        const int64_t mr = r1 - r0;
        const int64_t l0 = lines * t / nTiles, l1 = lines * (t + 1) / nTiles;
        const uint16_t* pf = nextData + kPairLanes * l0;
        const float* a = aWide + r0 * kp;
        if (!wide) {
          const int64_t ws = kp * 16;
          switch (gp) {
            case 3: kWidened3[mr - 1](x, a, kp, kp, bWide, ws, g * 16, ic + r0, cols, pf, l1 - l0); break;
            case 2: kWidened2[mr - 1](x, a, kp, kp, bWide, ws, g * 16, ic + r0, cols, pf, l1 - l0); break;
            default: kWidened1[mr - 1](x, a, kp, kp, bWide, ws, g * 16, ic + r0, cols, pf, l1 - l0); break;
          }
          continue;
        }
        if (gp == 3) {  // a 4-panel group cut short: a pair, then one panel
          kTiles2[mr - 1](x, a, kp, B, g, ic + r0, 32, pf, l1 - l0);
          kTiles1[mr - 1](x, a, kp, B, g + 2, ic + r0, cols - 32, nullptr, 0);
          continue;
        }
        switch (gp) {
          case 4: kTiles4[mr - 1](x, a, kp, B, g, ic + r0, cols, pf, l1 - l0); break;
          case 2: kTiles2[mr - 1](x, a, kp, B, g, ic + r0, cols, pf, l1 - l0); break;
          default: kTiles1[mr - 1](x, a, kp, B, g, ic + r0, cols, pf, l1 - l0); break;
        }
      }
    }
  }
  return true;
}

}  // namespace

Status runBf16WideningAvx512(const ProblemBf16& p) {
  const CtxW x{p.c, p.ldc, p.b->n(), p.bias, p.ops, p.nOps, p.residual, p.ldr};
  const bool ok = splitOverThreads(p.threads, p.m, kMRMax, (p.b->n() + 15) / 16, kNP,
                                   [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
                                     return computeRegion(p, x, m0, m1, q0, q1);
                                   });
  return ok ? Status::ok() : internalError("gemm (bf16): out of scratch memory");
}

}  // namespace verifuse::kernels::gemm::detail
