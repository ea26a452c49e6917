// AVX2+FMA single-precision GEMM with fused epilogues (built with -mavx2 -mfma; reached only after
// cpu::hasAvx2Fma()). BLIS/GotoBLAS structure, for c[M,N] = epilogue(a[M,K] · B):
//
//   thread t owns rows [m0, m1) x panels [p0, p1) of c (disjoint, deterministic split)
//   for ic in [m0, m1) step MC (<= 144)         row block
//     pack A[ic.., all K] into 6-row panels     per K block: [k][6] interleaved, tail rows [k][mr]
//     for jc in [p0, p1) step NC (16 panels)    column block: its c (MC x 256) stays in L2
//       for k0 in K step KC (<= 256, fixed when packing B)
//         for each group of 4 B panels (64 columns)
//           for each panel (KC x 16, 16 KiB: stays in L1 while the row block's tiles pass)
//             for each 6-row tile: 6x16 micro-kernel (each prefetches its share of the next panel)
//           tail rows (mr < 6): an mr x (16·np) micro-kernel over the group (np = 4, 2, 2, 1, 1)
//
// Micro-kernel: mr x 16·np accumulators in ymm registers (6x16: 12 accumulators + 2 B vectors + 1
// broadcast = 15 of 16 registers), one K step = 2·np aligned B loads, mr broadcasts of A, 2·mr·np
// FMAs, unrolled by 4 (about 95% of the FMA peak with its operands in L1). The first K block
// starts from zero, the next ones from the partial sums stored in c, so each c[i][j] is a single
// FMA chain over k = 0..K-1 (see gemm.h: bit-identical for any blocking or thread count). After
// the last K block the tile goes to a stack buffer and the epilogue (bias, post-ops) writes c
// once, reading a residual/operand element before writing that element.
//
// NOTE (measured): the tail kernels of a decode step (M < 6) get no software prefetch: the 1x64
// kernel is load-bound (9 loads per 8 FMAs) and the hardware prefetcher already streams its 4
// panels; adding prefetches of the next panels cut it from ~55 to ~40 GB/s on L3-resident weights.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"

namespace verifuse::kernels::gemm::detail {
namespace {

constexpr int64_t kMR = 6;
/// B panels per group: the tail rows' micro-kernels span up to 4 panels to keep 8+ FMA chains.
constexpr int64_t kGroup = 4;
/// Packed weights above this many bytes are streamed one panel at a time by decode rows.
constexpr size_t kDecodeStreamBytes = size_t{1} << 20;
/// Largest row block: 144 x 256 x 4 B = 144 KiB of packed A per K block in L2.
constexpr int64_t kMCMax = 144;
/// Panels per column block (256 columns): the c block (up to 144 x 256 x 4 B = 144 KiB) stays in
/// L2 while its K blocks go by, so partial sums do not travel to L3 and back. Measured on Zen 3:
/// 8..32 are within noise of each other, unblocked N is 5-10% slower for N >= 3072.
constexpr int64_t kNCPanels = 16;

// ---- micro-kernel --------------------------------------------------------------------------------

/// out[MR, 16·NP] (row stride ldOut) = cIn (or 0) + a_panel · b_panels over kc steps.
/// \p a: packed [kc][MR]; \p b: NP panels of [kc][16], \p bStride floats apart (64-byte aligned).
/// With PREFETCH, the first \p pfLines K steps each also prefetch one cache line (\p pf, pf + 16,
/// ...) into L2: paced at the kernel's speed, so the prefetches never crowd out its own loads.
template <int MR, int NP, bool PREFETCH = false>
VF_GEMM_INLINE void micro(int64_t kc, const float* __restrict a, const float* __restrict b,
                          int64_t bStride, const float* cIn, int64_t ldIn, float* out,
                          int64_t ldOut, const float* pf = nullptr, int64_t pfLines = 0) {
  constexpr int NV = 2 * NP;
  __m256 acc[MR][NV];
  if (cIn != nullptr) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_loadu_ps(cIn + i * ldIn + 8 * v);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    __m256 bv[NV];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
      bv[2 * q] = _mm256_load_ps(b + q * bStride + 16 * k);
      bv[2 * q + 1] = _mm256_load_ps(b + q * bStride + 16 * k + 8);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 av = _mm256_broadcast_ss(a + k * MR + i);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(av, bv[v], acc[i][v]);
    }
  };
  int64_t k = 0;
  if constexpr (PREFETCH) {
    const int64_t withPrefetch = std::min(pfLines, kc);
#pragma GCC unroll 4
    for (; k < withPrefetch; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + 16 * k), _MM_HINT_T1);
      step(k);
    }
  }
#pragma GCC unroll 4
  for (; k < kc; ++k) step(k);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + i * ldOut + 8 * v, acc[i][v]);
}

// ---- packing A -----------------------------------------------------------------------------------

/// dst[k·MR + i] = a[i·lda + k] for i < MR, k < kc.
template <int MR>
void packPanel(const float* a, int64_t lda, int64_t kc, float* __restrict dst) {
  int64_t k0 = 0;
  if constexpr (MR == 6) {
    // 8 columns at a time: an 8x8 transpose of the 6 rows (+2 zero rows); column k is stored as 8
    // floats at dst + 6k, whose last 2 (zeros) the next column overwrites. NOTE: so this writes up
    // to 2 floats past dst + 6·kc (the caller's buffer has that slack; later panels overwrite it).
    const __m256 zero = _mm256_setzero_ps();
    for (; k0 + 8 <= kc; k0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_ps(a + i * lda + k0);
      r[6] = zero;
      r[7] = zero;
      transposeStore8x8(r, dst + k0 * 6, 6);
    }
  }
  const float* rows[MR];
  for (int i = 0; i < MR; ++i) rows[i] = a + i * lda;
  for (int64_t k = k0; k < kc; ++k) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) dst[k * MR + i] = rows[i][k];
  }
}

void packTail(const float* a, int64_t lda, int64_t rows, int64_t kc, float* dst) {
  switch (rows) {
    case 2: packPanel<2>(a, lda, kc, dst); break;
    case 3: packPanel<3>(a, lda, kc, dst); break;
    case 4: packPanel<4>(a, lda, kc, dst); break;
    case 5: packPanel<5>(a, lda, kc, dst); break;
    default: break;  // 1 row: the row itself is the packed panel
  }
}

// ---- tiles ---------------------------------------------------------------------------------------

/// One MR x (16·NP) tile of c at (row0, col0) for one K block; cols <= 16·NP are real columns.
/// \p pf / \p pfLines: cache lines of a coming B panel to prefetch meanwhile (see micro()). When
/// c holds partial sums (!first), the c rows of the tile below are prefetched too (they are read
/// by the next call).
template <int MR, int NP>
__attribute__((noinline)) void tile(const Ctx& x, const float* a, const float* b, int64_t kb,
                                    int64_t row0, int64_t col0, int64_t cols, bool first,
                                    bool last, const float* pf = nullptr, int64_t pfLines = 0) {
  constexpr int64_t W = 16 * NP;
  float* c = x.c + row0 * x.ldc + col0;
  const bool full = cols == W;
  if (!first) {
    const float* below = c + MR * x.ldc;
    for (int i = 0; i < MR; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(below + i * x.ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(below + i * x.ldc + W - 1), _MM_HINT_T0);
    }
  }
  if (full && !last) {
    if (pfLines > 0) {
      micro<MR, NP, true>(kb, a, b, kb * 16, first ? nullptr : c, x.ldc, c, x.ldc, pf, pfLines);
    } else {
      micro<MR, NP>(kb, a, b, kb * 16, first ? nullptr : c, x.ldc, c, x.ldc);
    }
    return;
  }
  alignas(32) float buf[MR * W];
  const float* cIn = nullptr;
  int64_t ldIn = 0;
  if (!first) {
    if (full) {
      cIn = c;
      ldIn = x.ldc;
    } else {
      for (int i = 0; i < MR; ++i) {
        std::memcpy(buf + i * W, c + i * x.ldc, cols * sizeof(float));
        std::fill(buf + i * W + cols, buf + (i + 1) * W, 0.f);
      }
      cIn = buf;
      ldIn = W;
    }
  }
  if (pfLines > 0) {
    micro<MR, NP, true>(kb, a, b, kb * 16, cIn, ldIn, buf, W, pf, pfLines);
  } else {
    micro<MR, NP>(kb, a, b, kb * 16, cIn, ldIn, buf, W);
  }
  if (last) {
    epilogue(x, buf, W, MR, cols, row0, col0);
  } else {
    for (int i = 0; i < MR; ++i) std::memcpy(c + i * x.ldc, buf + i * W, cols * sizeof(float));
  }
}

/// The MR (< 6) tail rows against panels [g, g + gp) of one K block.
template <int MR>
void tailRows(const Ctx& x, const float* a, const float* bBlock, int64_t kb, int64_t row0,
              int64_t g, int64_t gp, bool first, bool last, bool streamed) {
  int64_t q = 0;
  while (q < gp) {
    const int64_t j = g + q;
    const float* b = bBlock + j * kb * 16;
    const int64_t col0 = j * 16;
    const int64_t left = gp - q;
    if (streamed) {
      tile<MR, 1>(x, a, b, kb, row0, col0, std::min<int64_t>(16, x.n - col0), first, last);
      q += 1;
    } else if (MR == 1 && left >= 4) {
      tile<MR, 4>(x, a, b, kb, row0, col0, std::min<int64_t>(64, x.n - col0), first, last);
      q += 4;
    } else if (MR <= 3 && left >= 2) {
      tile<MR, 2>(x, a, b, kb, row0, col0, std::min<int64_t>(32, x.n - col0), first, last);
      q += 2;
    } else {
      tile<MR, 1>(x, a, b, kb, row0, col0, std::min<int64_t>(16, x.n - col0), first, last);
      q += 1;
    }
  }
}

// ---- per-thread work -----------------------------------------------------------------------------

/// Computes rows [m0, m1) x panels [p0, p1) of c. \returns false if scratch allocation failed.
bool computeRegion(const Problem& p, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedWeights& B = *p.b;
  const int64_t K = B.k(), N = B.n(), nPad = B.nPadded(), KB = B.kBlock();
  const int64_t n0 = p0 * 16, n1 = std::min(N, p1 * 16);
  const bool severalBlocks = K > KB;

  const int64_t rows = m1 - m0;
  const int64_t nIC = (rows + kMCMax - 1) / kMCMax;
  const int64_t mc = ((rows + nIC - 1) / nIC + kMR - 1) / kMR * kMR;

  EpiOp ops[kMaxEpiOps];
  const size_t aFloats = static_cast<size_t>(mc * K) + 8;  // + packPanel's overhang
  float* scratch = prepareOperands(p, m0, m1, n0, n1, severalBlocks, aFloats, ops);
  if (scratch == nullptr) return false;
  float* aPack = scratch;
  const Ctx x{p.c, p.ldc, N, p.bias, ops, p.nOps};

  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcur = std::min(mc, m1 - ic);
    const int64_t nFull = mcur / kMR, tail = mcur % kMR;
    // Pack this row block of A for all of K: block k0 at aPack + k0·mc (read once per jc block).
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      const int64_t kb = std::min(KB, K - k0);
      const float* aSrc = p.a + ic * p.lda + k0;
      float* dst = aPack + k0 * mc;
      for (int64_t t = 0; t < nFull; ++t) {
        packPanel<kMR>(aSrc + t * kMR * p.lda, p.lda, kb, dst + t * kMR * kb);
      }
      if (tail > 1) packTail(aSrc + nFull * kMR * p.lda, p.lda, tail, kb, dst + nFull * kMR * kb);
    }
    const int64_t tailRow0 = ic + nFull * kMR;
    // Decode rows over weights above 1 MiB (read from memory in a decode step): one panel per
    // tile, the loads in address order through the column block's K block, instead of 2 or 4
    // streams kb·64 B apart. Zen 4 capped to AVX2, 1 thread, verifuse_gemm_bench: 1x896x151936
    // 23-24 -> 29-31 GB/s, 1x896x9728 28-30 -> 41, 1x2048x8192 22-27 -> 25-32; 4 rows already
    // took one panel (level); from L2 it is slower (1x896x896 75-81 -> 63), hence the threshold.
    const bool streamed = nFull == 0 && B.bytes() > kDecodeStreamBytes;
    for (int64_t jc = p0; jc < p1; jc += kNCPanels) {
      const int64_t jcEnd = std::min(p1, jc + kNCPanels);
      for (int64_t k0 = 0; k0 < K; k0 += KB) {
        const int64_t kb = std::min(KB, K - k0);
        const bool first = k0 == 0, last = k0 + kb == K;
        const float* aBlock = aPack + k0 * mc;
        const float* aTail =
            tail == 1 ? p.a + tailRow0 * p.lda + k0 : aBlock + nFull * kMR * kb;
        const float* bBlock = B.data() + k0 * nPad;
        // The panel after the last one of this block: the first of the next K block.
        const float* afterBlock =
            last ? nullptr : B.data() + (k0 + kb) * nPad + jc * std::min(KB, K - k0 - kb) * 16;
        for (int64_t g = jc; g < jcEnd; g += kGroup) {
          const int64_t gp = std::min(kGroup, jcEnd - g);
          for (int64_t j = g; j < g + gp; ++j) {
            const float* b = bBlock + j * kb * 16;
            const int64_t cols = std::min<int64_t>(16, N - j * 16);
            // Tile t prefetches lines [t·kb/nFull, (t+1)·kb/nFull) of the next panel into L2,
            // one per K step: spread over the row block and paced by the kernel. Measured (thread
            // CPU time, interleaved): vs the whole panel during the first tile's K loop +2-4% at N
            // or K >= 3072; vs issuing a tile's share in a burst before it, 6..32 rows x 768 x
            // 3072 go from 37-62 to 56-74 GFLOP/s and large M is unchanged.
            const float* next = j + 1 < jcEnd ? b + kb * 16 : afterBlock;
            for (int64_t t = 0; t < nFull; ++t) {
              const int64_t l0 = t * kb / nFull, l1 = (t + 1) * kb / nFull;
              tile<kMR, 1>(x, aBlock + t * kMR * kb, b, kb, ic + t * kMR, j * 16, cols, first,
                           last, next != nullptr ? next + 16 * l0 : nullptr,
                           next != nullptr ? l1 - l0 : 0);
            }
          }
          switch (tail) {
            case 1: tailRows<1>(x, aTail, bBlock, kb, tailRow0, g, gp, first, last, streamed); break;
            case 2: tailRows<2>(x, aTail, bBlock, kb, tailRow0, g, gp, first, last, streamed); break;
            case 3: tailRows<3>(x, aTail, bBlock, kb, tailRow0, g, gp, first, last, streamed); break;
            case 4: tailRows<4>(x, aTail, bBlock, kb, tailRow0, g, gp, first, last, streamed); break;
            case 5: tailRows<5>(x, aTail, bBlock, kb, tailRow0, g, gp, first, last, streamed); break;
            default: break;
          }
        }
      }
    }
  }
  return true;
}

}  // namespace

Status runAvx2(const Problem& p) {
  const bool ok = splitOverThreads(p.threads, p.m, kMR, (p.b->n() + 15) / 16, 1,
                                   [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
                                     return computeRegion(p, m0, m1, q0, q1);
                                   });
  return ok ? Status::ok() : internalError("gemm: out of scratch memory");
}

void packPanelNkAvx2(const float* w, int64_t k, int64_t n0, int64_t k0, int64_t kb, float* panel) {
  // Packing BERT-base's linears for own GEMM was 0.27 s of a warm plan's 0.33 s with one float
  // moved at a time; eight rows transposed in registers move a 32-byte vector per store.
  int64_t kk = 0;
  for (; kk + 8 <= kb; kk += 8) {
    for (int64_t h = 0; h < 2; ++h) {
      const float* src = w + (n0 + 8 * h) * k + k0 + kk;
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * k);
      transposeStore8x8(r, panel + kk * kNR + 8 * h, kNR);
    }
  }
  for (; kk < kb; ++kk) {
    for (int64_t c = 0; c < kNR; ++c) panel[kk * kNR + c] = w[(n0 + c) * k + k0 + kk];
  }
}

}  // namespace verifuse::kernels::gemm::detail
