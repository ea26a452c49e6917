// bfloat16 GEMM on AVX2+FMA CPUs without bf16 instructions (built with -mavx2 -mfma; reached only
// after gemm::availableBf16(), when activeBf16Variant() is kAvx2Widening). c[M,N] (bf16) =
// bf16(epilogue(a[M,K] (bf16) · B)) with B packed once in bf16 (PackedWeightsBf16, the same pair
// layout the AVX512-BF16 kernel reads): the weights stream from memory at half the bytes of
// float32, and every value is widened to float32 in the kernel (bf16 -> f32 is a 16-bit shift,
// exact), so the arithmetic is the float32 kernel's.
//
// Numerics (gemm.h, runBf16): exactly gemm::run()'s AVX2 float32 computation on the widened
// operands (the FMA chain over k = 0..K-1 from +0, + bias, the post-ops with the AVX2 vector
// math, the residual widened), then one rounding to bf16 (nearest even, NaN -> 0x7FC0).
//
// Two loop structures:
//  - M >= 6 ("wide"): gemm_avx2.cpp's blocking (row blocks of <= 144 rows, 16-panel column
//    blocks, K blocks of <= 256), with each K block of a B panel widened once into a 16 KiB
//    float32 buffer in L1 and then read by every row tile of the block: the micro-kernel is the
//    float32 one (6x16, 12 accumulators), so the compute-bound speed is the float32 kernel's and
//    the widening costs one pass over B per row block (1/144 of the multiply-adds at most). The
//    tiles of a row block have near-equal heights (5 and 6 rows for 128 rows) rather than 6-row
//    tiles and a short tail. Partial sums between K blocks go through a per-thread float32
//    buffer (c is bf16).
//  - M <= 5 (decode, memory-bound): the whole K in registers, B read straight from the packed
//    bf16 panels and widened in registers (one shift for the even k of a pair, one and for the
//    odd k), 1 x 64, 2 x 32 or 3..5 x 16 tiles; no software prefetch (the panels are long
//    contiguous runs the hardware prefetcher follows, as in the float32 kernel's decode tiles).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::gemm::detail {
namespace {

/// Row tiles of the wide path are at most this tall (6 x 16: 12 accumulators, as gemm_avx2.cpp).
constexpr int64_t kMR = 6;
/// Largest row block: its widened A (144 x 256 x 4 B = 144 KiB per K block) stays in L2.
constexpr int64_t kMCMax = 144;
/// Largest K block (even): a widened panel block (256 x 16 x 4 B = 16 KiB) stays in L1.
constexpr int64_t kKCMax = 256;
/// Panels per column block: the float32 partial sums (<= 144 x 256 x 4 B) stay in L2.
constexpr int64_t kNCPanels = 16;
constexpr int64_t kAccLd = kNCPanels * 16;
/// bf16 lanes per packed pair row: 16 columns x (k, k + 1).
constexpr int64_t kPairLanes = 32;

/// One call's output side: c (bf16), the float32 bias, the post-ops and the bf16 residual.
struct CtxB {
  uint16_t* c;
  int64_t ldc;
  int64_t n;
  const float* bias;
  const EpiOp* ops;
  int nOps;
  const uint16_t* residual;
  int64_t ldr;
};

// ---- epilogue ------------------------------------------------------------------------------------

VF_GEMM_INLINE __m256 loadBf16Cols(const uint16_t* p, int64_t count) {
  if (count == 8) return cpu::avx2::loadBf16(p);
  alignas(16) uint16_t t[8] = {};
  std::memcpy(t, p, static_cast<size_t>(count) * 2);
  return cpu::avx2::loadBf16(t);
}

VF_GEMM_INLINE void storeBf16Cols(uint16_t* p, __m256 y, int64_t count) {
  if (count == 8) {
    cpu::avx2::storeBf16(p, y);
    return;
  }
  alignas(16) uint16_t t[8];
  cpu::avx2::storeBf16(t, y);
  std::memcpy(p, t, static_cast<size_t>(count) * 2);
}

/// c[row0.., col0..] = bf16(post-ops(buf + bias)) for rows x cols: the float32 kernel's epilogue
/// (the same operations in the same order, so the same float32 values) with the bf16 residual
/// widened and one rounding at the store. The residual element is read before c's is written
/// (the in-place residual add).
void epilogueBf16(const CtxB& x, const float* buf, int64_t ldb, int64_t rows, int64_t cols, int64_t row0,
                  int64_t col0) {
  const int64_t nv = (cols + 7) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = row0 + r;
    uint16_t* crow = x.c + i * x.ldc;
    for (int64_t v = 0; v < nv; ++v) {
      const int64_t j = col0 + 8 * v;
      const int64_t count = std::min<int64_t>(8, cols - 8 * v);
      const bool full = count == 8;
      const __m256i mask = maskOf(count);
      __m256 y = _mm256_load_ps(buf + r * ldb + 8 * v);
      if (x.bias != nullptr) y = _mm256_add_ps(y, loadCols(x.bias + j, full, mask));
      for (int o = 0; o < x.nOps; ++o) {
        const EpiOp& e = x.ops[o];
        if (e.kind == EpiOp::Kind::kSum) {
          y = _mm256_fmadd_ps(_mm256_set1_ps(e.alpha), loadBf16Cols(x.residual + i * x.ldr + j, count), y);
        } else {
          y = applyOp(e, y, i, j, full, mask);
        }
      }
      storeBf16Cols(crow + j, y, count);
    }
  }
}

// ---- packing: A and B widened ---------------------------------------------------------------------

/// 8x8 transpose of r[0..7] (rows) into the columns, stored as 8 floats at dst + q·MR for q < 8 in
/// increasing q: each store's last 8 - MR floats are overwritten by the next column (the caller's
/// buffer has 8 floats of slack after the last one).
template <int MR>
VF_GEMM_INLINE void storeColumns(__m256 (&r)[8], float* dst) {
  transposeStore8x8(r, dst, MR);
}

/// dst[kk·MR + i] = float(a[i·lda + kFrom + kk]) for i < MR, kk < kb; 0 where kFrom + kk >= K (the
/// zero row an odd K is padded with). Writes up to 8 floats past dst + MR·kb (see storeColumns).
template <int MR>
void packTileA(const uint16_t* a, int64_t lda, int64_t kFrom, int64_t kb, int64_t K, float* __restrict dst) {
  const int64_t inside = std::max<int64_t>(0, std::min(kb, K - kFrom));
  int64_t kk = 0;
  if constexpr (MR == 1) {
    for (; kk + 8 <= inside; kk += 8) _mm256_storeu_ps(dst + kk, cpu::avx2::loadBf16(a + kFrom + kk));
  } else {
    const __m256 zero = _mm256_setzero_ps();
    for (; kk + 8 <= inside; kk += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = i < MR ? cpu::avx2::loadBf16(a + i * lda + kFrom + kk) : zero;
      storeColumns<MR>(r, dst + kk * MR);
    }
  }
  for (; kk < kb; ++kk) {
    const bool in = kk < inside;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint32_t bits = in ? static_cast<uint32_t>(a[i * lda + kFrom + kk]) << 16 : 0u;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      dst[kk * MR + i] = f;
    }
  }
}

using PackFn = void (*)(const uint16_t*, int64_t, int64_t, int64_t, int64_t, float*);
constexpr std::array<PackFn, kMR> kPackTileA = {&packTileA<1>, &packTileA<2>, &packTileA<3>,
                                                &packTileA<4>, &packTileA<5>, &packTileA<6>};

/// One K block of one packed B panel (\p pairs pair rows of 16 columns) widened to float32 rows
/// [2·pairs][16]: the even k of a pair is the bf16 shifted into the high half, the odd k the bf16
/// already there with the low half cleared.
VF_GEMM_INLINE void widenPanel(const uint16_t* __restrict src, int64_t pairs, float* __restrict dst) {
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
#pragma GCC unroll 2
  for (int64_t p = 0; p < pairs; ++p) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + kPairLanes * p));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + kPairLanes * p + 16));
    float* d = dst + 32 * p;
    _mm256_store_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)));
    _mm256_store_ps(d + 8, _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)));
    _mm256_store_ps(d + 16, _mm256_castsi256_ps(_mm256_and_si256(v0, high)));
    _mm256_store_ps(d + 24, _mm256_castsi256_ps(_mm256_and_si256(v1, high)));
  }
}

// ---- wide path (M >= 6) ----------------------------------------------------------------------------

/// out[MR, 16] (row stride ldOut) = cIn (or +0) + a · b over kc steps: gemm_avx2.cpp's
/// micro-kernel (one FMA per k and accumulator, k in order). \p a: [kc][MR]; \p b: [kc][16]
/// floats, 32-byte aligned. With PREFETCH, the first \p pfLines steps each prefetch one cache line
/// (\p pf + 64·k bytes) into L2.
template <int MR, bool PREFETCH>
VF_GEMM_INLINE void micro(int64_t kc, const float* __restrict a, const float* __restrict b, const float* cIn,
                          int64_t ldIn, float* out, int64_t ldOut, const char* pf, int64_t pfLines) {
  __m256 acc[MR][2];
  if (cIn != nullptr) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = _mm256_loadu_ps(cIn + i * ldIn);
      acc[i][1] = _mm256_loadu_ps(cIn + i * ldIn + 8);
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  }
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    const __m256 b0 = _mm256_load_ps(b + 16 * k), b1 = _mm256_load_ps(b + 16 * k + 8);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + k * MR + i);
      acc[i][0] = _mm256_fmadd_ps(av, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(av, b1, acc[i][1]);
    }
  };
  int64_t k = 0;
  if constexpr (PREFETCH) {
    const int64_t withPrefetch = std::min(pfLines, kc);
#pragma GCC unroll 4
    for (; k < withPrefetch; ++k) {
      _mm_prefetch(pf + 64 * k, _MM_HINT_T1);
      step(k);
    }
  }
#pragma GCC unroll 4
  for (; k < kc; ++k) step(k);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(out + i * ldOut, acc[i][0]);
    _mm256_storeu_ps(out + i * ldOut + 8, acc[i][1]);
  }
}

/// One MR x 16 tile for one K block: partial sums into \p acc (row stride kAccLd, all 16 columns)
/// unless \p last, then the epilogue into c.
template <int MR>
__attribute__((noinline)) void tileWide(const CtxB& x, const float* a, const float* bW, int64_t kb, float* acc,
                                        int64_t row0, int64_t col0, int64_t cols, bool first, bool last,
                                        const char* pf, int64_t pfLines) {
  if (!first) {  // the partial sums this tile reads next time come from rows no prefetcher follows
    const float* below = acc + MR * kAccLd;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(below + i * kAccLd), _MM_HINT_T0);
  }
  const float* cIn = first ? nullptr : acc;
  if (!last) {
    if (pfLines > 0) {
      micro<MR, true>(kb, a, bW, cIn, kAccLd, acc, kAccLd, pf, pfLines);
    } else {
      micro<MR, false>(kb, a, bW, cIn, kAccLd, acc, kAccLd, nullptr, 0);
    }
    return;
  }
  alignas(32) float buf[MR * 16];
  if (pfLines > 0) {
    micro<MR, true>(kb, a, bW, cIn, kAccLd, buf, 16, pf, pfLines);
  } else {
    micro<MR, false>(kb, a, bW, cIn, kAccLd, buf, 16, nullptr, 0);
  }
  epilogueBf16(x, buf, 16, MR, cols, row0, col0);
}

using TileWideFn = void (*)(const CtxB&, const float*, const float*, int64_t, float*, int64_t, int64_t, int64_t,
                            bool, bool, const char*, int64_t);
constexpr std::array<TileWideFn, kMR> kTileWide = {&tileWide<1>, &tileWide<2>, &tileWide<3>,
                                                   &tileWide<4>, &tileWide<5>, &tileWide<6>};

/// Rows [m0, m1) x panels [p0, p1) of c. \returns false if scratch allocation failed.
bool computeRegionWide(const ProblemBf16& p, const CtxB& x, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedWeightsBf16& B = *p.b;
  const int64_t K = B.k(), N = B.n();
  const int64_t kp = 2 * B.kPairs();  // K padded to even: the pad row of B and column of A are 0
  const int64_t panelStride = B.kPairs() * kPairLanes;
  const int64_t nKB = (kp + kKCMax - 1) / kKCMax;
  const int64_t kbMax = ((kp + nKB - 1) / nKB + 1) / 2 * 2;
  const bool severalBlocks = kp > kbMax;
  const int64_t rows = m1 - m0;
  const int64_t nIC = (rows + kMCMax - 1) / kMCMax;
  const int64_t mc = (rows + nIC - 1) / nIC;

  // Scratch: widened A of a row block (+ storeColumns' slack), one widened B panel block, and the
  // partial sums of a row block x column block.
  const size_t aFloats = static_cast<size_t>(mc * kp) + 8;
  const size_t wFloats = static_cast<size_t>(kbMax * 16);
  const size_t accFloats = severalBlocks ? static_cast<size_t>(mc * kAccLd) : 0;
  const size_t aRound = (aFloats + 15) / 16 * 16, wRound = (wFloats + 15) / 16 * 16;
  float* scratch = tlsScratch.get(aRound + wRound + accFloats);
  if (scratch == nullptr) return false;
  float* aPack = scratch;
  float* wPanel = scratch + aRound;
  float* accBlock = severalBlocks ? wPanel + wRound : nullptr;

  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcur = std::min(mc, m1 - ic);
    const int64_t nTiles = (mcur + kMR - 1) / kMR;
    // Widen this row block of A for all of K: block k0 at aPack + k0·mcur, its tile t (rows r0..r1)
    // at + r0·kb (packed in increasing order: each pack's slack is overwritten by the next).
    for (int64_t k0 = 0; k0 < kp; k0 += kbMax) {
      const int64_t kb = std::min(kbMax, kp - k0);
      for (int64_t t = 0; t < nTiles; ++t) {
        const int64_t r0 = mcur * t / nTiles, r1 = mcur * (t + 1) / nTiles;
        kPackTileA[r1 - r0 - 1](p.a + (ic + r0) * p.lda, p.lda, k0, kb, K, aPack + k0 * mcur + r0 * kb);
      }
    }
    for (int64_t jc = p0; jc < p1; jc += kNCPanels) {
      const int64_t jcEnd = std::min(p1, jc + kNCPanels);
      for (int64_t k0 = 0; k0 < kp; k0 += kbMax) {
        const int64_t kb = std::min(kbMax, kp - k0);
        const bool first = k0 == 0, last = k0 + kb == kp;
        const float* aBlock = aPack + k0 * mcur;
        for (int64_t j = jc; j < jcEnd; ++j) {
          widenPanel(B.data() + j * panelStride + k0 * 16, kb / 2, wPanel);
          // The next panel block widened here (the next panel's, else the next K block's first):
          // each tile prefetches its share of its lines into L2, paced by its K loop.
          const uint16_t* next = j + 1 < jcEnd ? B.data() + (j + 1) * panelStride + k0 * 16
                                 : !last       ? B.data() + jc * panelStride + (k0 + kb) * 16
                                               : nullptr;
          const int64_t nextLines = next == nullptr ? 0 : std::min(kbMax, kp - (j + 1 < jcEnd ? k0 : k0 + kb)) / 2;
          const int64_t cols = std::min<int64_t>(16, N - j * 16);
          for (int64_t t = 0; t < nTiles; ++t) {
            const int64_t r0 = mcur * t / nTiles, r1 = mcur * (t + 1) / nTiles;
            const int64_t l0 = nextLines * t / nTiles, l1 = nextLines * (t + 1) / nTiles;
            float* acc = severalBlocks ? accBlock + r0 * kAccLd + (j - jc) * 16 : nullptr;
            kTileWide[r1 - r0 - 1](x, aBlock + r0 * kb, wPanel, kb, acc, ic + r0, j * 16, cols, first, last,
                                   next == nullptr ? nullptr : reinterpret_cast<const char*>(next) + 64 * l0,
                                   l1 - l0);
          }
        }
      }
    }
  }
  return true;
}

// ---- decode path (M <= 5) --------------------------------------------------------------------------

/// An MR x 16·NP tile over the whole K: B read from the packed bf16 panels and widened in
/// registers, a from its widened [kp][MR] copy, one FMA per k and accumulator in k order.
template <int MR, int NP>
__attribute__((noinline)) void tileStream(const CtxB& x, const float* __restrict a, const uint16_t* __restrict b,
                                          int64_t panelStride, int64_t pairs, int64_t row0, int64_t col0,
                                          int64_t cols) {
  __m256 acc[MR][2 * NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * NP; ++v) acc[i][v] = _mm256_setzero_ps();
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
#pragma GCC unroll 2
  for (int64_t p = 0; p < pairs; ++p) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      const uint16_t* src = b + q * panelStride + kPairLanes * p;
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 16));
      const __m256 e0 = _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16));
      const __m256 e1 = _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + 2 * p * MR + i);
        acc[i][2 * q] = _mm256_fmadd_ps(av, e0, acc[i][2 * q]);
        acc[i][2 * q + 1] = _mm256_fmadd_ps(av, e1, acc[i][2 * q + 1]);
      }
      const __m256 o0 = _mm256_castsi256_ps(_mm256_and_si256(v0, high));
      const __m256 o1 = _mm256_castsi256_ps(_mm256_and_si256(v1, high));
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + (2 * p + 1) * MR + i);
        acc[i][2 * q] = _mm256_fmadd_ps(av, o0, acc[i][2 * q]);
        acc[i][2 * q + 1] = _mm256_fmadd_ps(av, o1, acc[i][2 * q + 1]);
      }
    }
  }
  alignas(32) float buf[MR * 16 * NP];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * NP; ++v) _mm256_store_ps(buf + i * 16 * NP + 8 * v, acc[i][v]);
  epilogueBf16(x, buf, 16 * NP, MR, cols, row0, col0);
}

using TileStreamFn = void (*)(const CtxB&, const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t, int64_t);

/// Panels [p0, p1) of the m (<= 5) rows.
bool computeRegionStream(const ProblemBf16& p, const CtxB& x, int64_t m, int64_t p0, int64_t p1) {
  const PackedWeightsBf16& B = *p.b;
  const int64_t K = B.k(), N = B.n(), pairs = B.kPairs(), kp = 2 * pairs;
  const int64_t panelStride = pairs * kPairLanes;
  float* aPack = tlsScratch.get(static_cast<size_t>(m * kp) + 8);
  if (aPack == nullptr) return false;
  kPackTileA[m - 1](p.a, p.lda, 0, kp, K, aPack);
  // Tiles wide enough for 8+ independent FMA chains where the rows allow it.
  static constexpr TileStreamFn kOne[5] = {&tileStream<1, 1>, &tileStream<2, 1>, &tileStream<3, 1>,
                                           &tileStream<4, 1>, &tileStream<5, 1>};
  const int64_t np = m == 1 ? 4 : m == 2 ? 2 : 1;
  for (int64_t g = p0; g < p1;) {
    const int64_t left = p1 - g;
    const uint16_t* b = B.data() + g * panelStride;
    const int64_t col0 = g * 16;
    if (np == 4 && left >= 4) {
      tileStream<1, 4>(x, aPack, b, panelStride, pairs, 0, col0, std::min<int64_t>(64, N - col0));
      g += 4;
    } else if (np >= 2 && left >= 2) {
      if (m == 1) {
        tileStream<1, 2>(x, aPack, b, panelStride, pairs, 0, col0, std::min<int64_t>(32, N - col0));
      } else {
        tileStream<2, 2>(x, aPack, b, panelStride, pairs, 0, col0, std::min<int64_t>(32, N - col0));
      }
      g += 2;
    } else {
      kOne[m - 1](x, aPack, b, panelStride, pairs, 0, col0, std::min<int64_t>(16, N - col0));
      g += 1;
    }
  }
  return true;
}

}  // namespace

Status runBf16Avx2(const ProblemBf16& p) {
  const CtxB x{p.c, p.ldc, p.b->n(), p.bias, p.ops, p.nOps, p.residual, p.ldr};
  const int64_t panels = (p.b->n() + 15) / 16;
  bool ok;
  if (p.m < kMR) {
    // Decode-sized: every thread takes all the rows and its share of the panels (groups of 4).
    ok = splitOverThreads(p.threads, p.m, kMR, panels, 4, [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
      (void)m0;
      (void)m1;
      return computeRegionStream(p, x, p.m, q0, q1);
    });
  } else {
    ok = splitOverThreads(p.threads, p.m, kMR, panels, 1, [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
      return computeRegionWide(p, x, m0, m1, q0, q1);
    });
  }
  return ok ? Status::ok() : internalError("gemm (bf16): out of scratch memory");
}

}  // namespace verifuse::kernels::gemm::detail
