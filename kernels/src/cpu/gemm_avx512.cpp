// AVX-512 single-precision GEMM with fused epilogues (built with -mavx512f...; reached only after
// cpu::hasAvx512()). Same packed B and the same FMA chains as the AVX2 kernel (gemm_avx2.cpp): each
// c[i][j] is one FMA chain over k = 0..K-1 from +0, then bias, then the post-ops, so the two give
// bit-identical results, except that GELU (erf) runs here on the 16-lane vecmath_avx512.h, which
// may differ from the 8-lane one in the last bit or two (see there).
//
//   thread t owns rows [m0, m1) x panels [p0, p1) of c (disjoint, deterministic split)
//   for ic in [m0, m1) step MC (<= 192)         row block
//     for each group of 3 B panels (48 columns; over all of K: 3 x K x 64 B, streamed from L2)
//       for each row tile (<= 8 rows, tiles of near-equal height)
//         MR x 48 micro-kernel over the whole K, A read in place (broadcasts from the rows of a)
//         + bias and post-ops straight from the registers: c is written once
//
// Micro-kernel: MR x 3 zmm accumulators (8 x 3 = 24 of 32 registers) + 3 B vectors; one K step =
// 3 aligned B loads, MR broadcasts of A, 3·MR FMAs. The whole K stays in registers (no partial
// sums through c, unlike the AVX2 kernel): with 24 FMAs per 3 B loads the B stream from L2 is far
// below its bandwidth, so B need not sit in L1. 8 rows (not 12 x 2 panels) because the rows'
// pointers, B's and k must fit the 16 general registers: 12 rows spilled 3 pointers per step.
// While a group's tiles run, each one prefetches its share of the next group's panels into L2.
// Measured (Zen 5, 1 thread, kernels/bench/gemm_bench, interleaved with oneDNN 3.2's packed
// inner product): 220-245 GFLOP/s (86-96% of the 255 GFLOP/s FMA peak) on BERT/ViT/GPT-2/Llama/
// Whisper shapes, up to 22% faster than oneDNN; without the prefetch 5-15% slower on N or K >= 2304.
// Tiles of near-equal height (e.g. 197 rows = 25 tiles of 7-8) keep every tile near 24 FMA chains
// instead of leaving a thin remainder tile.
//
// Small M (decode, M <= 4): an MR x 48 tile has too few FMA chains to hide the FMA latency, so
// those rows take MR x 64 tiles (4 panels), like the AVX2 kernel's tail tiles.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"
#include "cpu/gemm_shared_avx512.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::gemm::detail {
namespace {

/// Tallest row tile.
constexpr int64_t kMRMax = 8;
/// Panels per tile (3 x 16 columns): 8 x 3 = 24 accumulators, and few enough pointers (8 rows of A,
/// B, k) to stay in general registers.
constexpr int64_t kNP = 3;
/// Largest row block. Between two uses of a B line pass one tile's rows of A and the rest of the
/// group's panels (3·K·64 B): well inside the 1 MiB L2 for K <= 4096 whatever the block; the block
/// only bounds how far apart a group's first and last tiles read the same B line.
constexpr int64_t kMCMax = 192;

// ---- micro-kernel --------------------------------------------------------------------------------

/// out[MR, 16·NP] (row stride ldOut) = a[MR rows, K] · B[K, NP panels], the whole K in registers.
/// \p a: row i at a + i·lda (unpacked); \p b: the first panel of the group in K block 0 of the
/// packed weights (the group's NP panels are contiguous inside each K block; block k0 starts
/// k0·nPad floats after block 0, and its panels are kb·16 floats apart).
template <int MR, int NP, typename Finish>
VF_GEMM_INLINE void micro(const float* __restrict a, int64_t lda, const float* __restrict b,
                          int64_t K, int64_t KB, int64_t nPad, int64_t panel, int64_t pfPanel,
                          int64_t pfPart, int64_t pfParts, Finish&& finish) {
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k0 = 0; k0 < K; k0 += KB) {
    const int64_t kb = std::min(KB, K - k0);
    const float* bb = b + k0 * nPad + panel * kb * 16;
    const float* ab = a + k0;
    const int64_t bStride = kb * 16;
    auto step = [&](int64_t k) __attribute__((always_inline)) { kStep<MR, NP>(acc, ab, lda, bb, bStride, k); };
    int64_t k = 0;
    if (pfParts > 0) {
      // This tile's share of the next group's lines in this K block (NP·kb lines, contiguous),
      // one per K step: paced by the kernel, and spread over the group's tiles.
      const int64_t lines = NP * kb;
      const int64_t l0 = lines * pfPart / pfParts, l1 = lines * (pfPart + 1) / pfParts;
      const float* pf = b + k0 * nPad + pfPanel * kb * 16 + 16 * l0;
      const int64_t n = std::min(l1 - l0, kb);
#pragma GCC unroll 4
      for (; k < n; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + 16 * k), _MM_HINT_T1);
        step(k);
      }
    }
#pragma GCC unroll 4
    for (; k < kb; ++k) step(k);
  }
  finish(acc);
}

/// c[row][j .. j + count) = post-ops(y + bias), count <= 16. GELU (erf) runs 16 lanes wide
/// (vecmath_avx512.h); the other post-ops on the two 8-float halves with the shared AVX2 epilogue
/// math (applyOp), so they give the AVX2 kernel's results bit for bit. Only called out of line
/// (finishBuffer, finishPartialVector): inlined into every tile, the GELU's constants crowded the
/// K loop's registers and the whole GEMM ran at half speed (measured 104 vs 200 GFLOP/s at
/// 128x768x3072).
VF_GEMM_INLINE void finishVector(const Ctx& x, __m512 y, int64_t row, int64_t j, int64_t count) {
  const bool full = count == 16;
  const __mmask16 k = full ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
  float* dst = x.c + row * x.ldc + j;
  if (x.bias != nullptr) {
    y = _mm512_add_ps(y, full ? _mm512_loadu_ps(x.bias + j) : _mm512_maskz_loadu_ps(k, x.bias + j));
  }
  for (int o = 0; o < x.nOps; ++o) {
    const EpiOp& e = x.ops[o];
    if (e.kind == EpiOp::Kind::kGeluErf) {
      y = cpu::avx512::geluErf(y);
      continue;
    }
    const int64_t loCount = std::min<int64_t>(8, count), hiCount = std::max<int64_t>(0, count - 8);
    __m256 lo = _mm512_castps512_ps256(y), hi = _mm512_extractf32x8_ps(y, 1);
    lo = applyOp(e, lo, row, j, loCount == 8, maskOf(loCount));
    if (hiCount > 0) hi = applyOp(e, hi, row, j + 8, hiCount == 8, maskOf(hiCount));
    y = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  }
  if (full) {
    _mm512_storeu_ps(dst, y);
  } else {
    _mm512_mask_storeu_ps(dst, k, y);
  }
}

/// The post-ops finishInRegisters does not keep inline (GELU, the other eltwise ops, binaries)
/// over a finished tile parked in \p buf (rows x \p ld floats, bias not yet added), one
/// out-of-line call per tile: the loop keeps the post-ops' constants in registers and overlaps the
/// vectors' long dependency chains (GELU's erf), which one call per vector did not (the bf16
/// kernel's GELU epilogue went 411 -> 455 GFLOP/s at 128x768x3072 with this alone). The buffer is
/// stored and reloaded as whole zmm, which store forwarding handles (finishInRegisters' NOTE).
__attribute__((noinline)) void finishBuffer(const Ctx& x, const float* buf, int64_t ld, int rows, int64_t row0,
                                            int64_t col0, int64_t cols) {
  for (int i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; j += 16) {
      finishVector(x, _mm512_load_ps(buf + i * ld + j), row0 + i, col0 + j, std::min<int64_t>(16, cols - j));
    }
  }
}

/// A last partial vector of a tile whose other vectors finished inline.
__attribute__((noinline)) void finishPartialVector(const Ctx& x, __m512 y, int64_t row, int64_t j, int64_t count) {
  finishVector(x, y, row, j, count);
}

/// Stores a finished tile: bias and post-ops applied straight from the registers (no trip through
/// a stack buffer: storing a zmm and reloading its halves as ymm stalls store forwarding, which
/// cost 30% at K = 96); only the real columns (cols of 16·NP) are written.
template <int MR, int NP>
VF_GEMM_INLINE void finishInRegisters(const Ctx& x, __m512 (&acc)[MR][NP], int64_t row0,
                                      int64_t col0, int64_t cols) {
  // The common cases inline: bias only, and bias + residual sum (the transformer's output
  // projections); anything else through finishBuffer. NOTE: the accumulators reach the buffer
  // through finishTileVectors' slow path; a loop of its own storing them left them in memory
  // through the K loop (half the speed).
  const bool sumOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kSum;
  // ReLU (conv/linear + ReLU) inline too: through the buffer it cost 3.5% of a bf16
  // 1024 x 768 x 3072 linear, which oneDNN's post-op does not. max(0, y) as applyOp's relu.
  const bool reluOnly = x.nOps == 1 && x.ops[0].kind == EpiOp::Kind::kRelu;
  const bool inlined = x.nOps == 0 || sumOnly || reluOnly;
  alignas(64) float buf[MR][NP * 16];
  finishTileVectors<MR, NP>(
      acc, row0, col0, cols, x.bias, inlined,
      [&](__m512 y, int64_t row, int64_t j) __attribute__((always_inline)) {
        if (sumOnly) {
          const EpiOp& e = x.ops[0];
          const float* r = e.src + (row - e.rowOff) * e.ld + (j - e.colOff);
          y = _mm512_fmadd_ps(_mm512_set1_ps(e.alpha), _mm512_loadu_ps(r), y);
        }
        if (reluOnly) y = _mm512_max_ps(_mm512_setzero_ps(), y);
        _mm512_storeu_ps(x.c + row * x.ldc + j, y);
      },
      [&](__m512 y, int64_t row, int64_t j, int64_t count) __attribute__((always_inline)) {
        if (inlined) {
          finishPartialVector(x, y, row, j, count);
        } else {
          _mm512_store_ps(&buf[row - row0][j - col0], y);
        }
      });
  if (!inlined) finishBuffer(x, &buf[0][0], NP * 16, MR, row0, col0, cols);
}

// ---- tiles ---------------------------------------------------------------------------------------

/// Asks for the lines of the full-size operands (residual sums, element-wise binaries) that the
/// tile's epilogue will read. NOTE: without it each epilogue load missed the caches: tiles walk
/// down the rows of a 48-column group, which no hardware prefetcher follows, and a residual sum cost
/// 20-50% on wide or short-K shapes (Whisper 1500x384x1536: 169 against 243 GFLOP/s). Issued before
/// the K loop, which hides their latency.
template <int MR>
VF_GEMM_INLINE void prefetchOperands(const Ctx& x, int64_t row0, int64_t col0, int64_t cols) {
  for (int o = 0; o < x.nOps; ++o) {
    const EpiOp& e = x.ops[o];
    if (e.src == nullptr || e.bcast != EpiOp::Bcast::kFull) continue;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const float* r = e.src + (row0 + i - e.rowOff) * e.ld + (col0 - e.colOff);
      for (int64_t j = 0; j < cols; j += 16) _mm_prefetch(reinterpret_cast<const char*>(r + j), _MM_HINT_T0);
    }
  }
}

/// One MR x (16·NP) tile of c at (row0, col0), panels [panel, panel + NP): the product over all of
/// K, then bias and post-ops; cols <= 16·NP are real columns. \p a points at row row0 of A.
/// Meanwhile it prefetches part \p pfPart of \p pfParts of the group starting at panel \p pfPanel
/// (pfParts == 0: none).
template <int MR, int NP>
__attribute__((noinline)) void tile(const Ctx& x, const float* a, int64_t lda,
                                    const PackedWeights& B, int64_t panel, int64_t row0,
                                    int64_t cols, int64_t pfPanel, int64_t pfPart, int64_t pfParts) {
  prefetchOperands<MR>(x, row0, panel * 16, cols);
  micro<MR, NP>(a, lda, B.data(), B.k(), B.kBlock(), B.nPadded(), panel, pfPanel, pfPart, pfParts,
                [&](__m512 (&acc)[MR][NP]) __attribute__((always_inline)) {
                  finishInRegisters<MR, NP>(x, acc, row0, panel * 16, cols);
                });
}

/// One K block of a decode-sized MR x (16·NP) tile: the FMA chains continue from \p part (MR x NP
/// vectors, parked there after the previous block; zero for the first), run over block \p k0's
/// steps and are parked again, or, after the last block, finished like tile()'s. Parking a float
/// and reloading it is exact, so each c[i][j] is still the one FMA chain over k = 0..K-1 that
/// tile() computes: the same bits.
template <int MR, int NP>
__attribute__((noinline)) void tileKBlock(const Ctx& x, const float* a, int64_t lda, const PackedWeights& B,
                                          int64_t panel, int64_t k0, int64_t row0, int64_t cols, float* part) {
  const int64_t K = B.k(), nPad = B.nPadded();
  const int64_t kb = std::min(B.kBlock(), K - k0);
  const bool last = k0 + kb >= K;
  if (last) prefetchOperands<MR>(x, row0, panel * 16, cols);
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) acc[i][v] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part + (i * NP + v) * 16);
  const float* bb = B.data() + k0 * nPad + panel * kb * 16;
  const float* ab = a + k0;
  const int64_t bStride = kb * 16;
#pragma GCC unroll 4
  for (int64_t k = 0; k < kb; ++k) kStep<MR, NP>(acc, ab, lda, bb, bStride, k);
  if (last) {
    finishInRegisters<MR, NP>(x, acc, row0, panel * 16, cols);
    return;
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < NP; ++v) _mm512_store_ps(part + (i * NP + v) * 16, acc[i][v]);
}

using TileFn = void (*)(const Ctx&, const float*, int64_t, const PackedWeights&, int64_t, int64_t,
                        int64_t, int64_t, int64_t, int64_t);
using KBlockTileFn = void (*)(const Ctx&, const float*, int64_t, const PackedWeights&, int64_t, int64_t, int64_t,
                              int64_t, float*);

template <int NP, int... MRs>
constexpr auto makeKBlockTileTable(std::integer_sequence<int, MRs...>) {
  return std::array<KBlockTileFn, sizeof...(MRs)>{&tileKBlock<MRs + 1, NP>...};
}
/// kKBlockTilesNP[r - 1]: one K block of the r-row decode tile over NP panels (r <= 4).
constexpr auto kKBlockTiles1 = makeKBlockTileTable<1>(std::make_integer_sequence<int, 4>{});
constexpr auto kKBlockTiles2 = makeKBlockTileTable<2>(std::make_integer_sequence<int, 4>{});
constexpr auto kKBlockTiles4 = makeKBlockTileTable<4>(std::make_integer_sequence<int, 4>{});

/// Panels of a decode-sized block that take their K blocks together (decodeRows).
constexpr int64_t kDecodeSpanPanels = 32;
/// Packed weights above this many bytes are streamed one panel at a time by decode rows.
constexpr size_t kDecodeStreamBytes = size_t{1} << 20;

/// Decode-sized rows (at most 4) [row0, row0 + rows) x panels [p0, p1): K blocks outer, then spans
/// of kDecodeSpanPanels panels, the tiles' FMA chains parked in a small buffer between blocks
/// (tileKBlock; the same bits as tile() over the whole K). Two reasons:
///  - A K block holds the whole N, so tile() — all K blocks of one 64-column tile, then the next
///    tile — reads its weights as K-block-count runs of 4·kb·64 B (57 KB at K = 896) far apart,
///    the hardware prefetcher starting over at each; here a span's K block is one run of
///    32·kb·64 B (458 KB).
///  - \p streamed (weights above kDecodeStreamBytes, which a decode step reads from memory, not a
///    cache): one panel per tile, so the loads walk that run strictly in address order instead of
///    four interleaved streams 14 KB apart. One FMA chain per row then bounds a tile at 64 bytes
///    per FMA latency (~60 GB/s at 1 row), twice the memory's read rate but below the 4-panel
///    tile's rate on weights in L2, which keep 4-panel tiles.
/// NOTE (measured, Zen 4, 1 thread, verifuse_gemm_bench, medians; "read" = a plain read of the
/// packed weights): 1x896x151936 (Qwen2.5-0.5B's lm_head, 545 MB) 22.0 GB/s as tile() -> 23.5 in
/// 4-panel spans -> 28-31 one panel at a time (read 29-32); 1x896x9728 (its gate/up) 21 -> 30-34 ->
/// 43-45 (read 44-50); 1x2048x8192 26-30 -> 31-34 (read 33); 2x896x9728 24-28 -> 38; 4x2048x8192
/// 21-22 -> 28 (read 30). From L2, one panel is slower (1x896x896 72 against 85 GB/s, 1x256x1024
/// 70 against 92), hence the size threshold. Spans of 8 panels were slower, of 128 no faster than
/// 32, and 2-panel tiles slower than either; software prefetching 8 or 32 steps ahead slower still.
void decodeRows(const Ctx& x, const Problem& p, int64_t row0, int64_t rows, int64_t p0, int64_t p1, bool streamed) {
  const PackedWeights& B = *p.b;
  const int64_t N = B.n(), K = B.k(), KB = B.kBlock();
  constexpr int64_t kSlot = 4 * 4 * 16;  // floats of one 4-panel tile's parked chains (MR <= 4)
  alignas(64) float part[(kDecodeSpanPanels / 4) * kSlot];
  const float* a = p.a + row0 * p.lda;
  for (int64_t s = p0; s < p1; s += kDecodeSpanPanels) {
    const int64_t s1 = std::min(p1, s + kDecodeSpanPanels);
    for (int64_t k0 = 0; k0 < K; k0 += KB) {
      for (int64_t g = s; g < s1; g += 4) {
        const int64_t gp = std::min<int64_t>(4, s1 - g);
        const int64_t cols = std::min<int64_t>(16 * gp, N - g * 16);
        float* slot = part + (g - s) / 4 * kSlot;
        if (streamed) {
          for (int64_t q = 0; q < gp; ++q) {
            kKBlockTiles1[rows - 1](x, a, p.lda, B, g + q, k0, row0, std::min<int64_t>(16, cols - 16 * q),
                                    slot + q * kSlot / 4);
          }
          continue;
        }
        switch (gp) {
          case 4: kKBlockTiles4[rows - 1](x, a, p.lda, B, g, k0, row0, cols, slot); break;
          case 3:  // as tile(): a pair, then one panel
            kKBlockTiles2[rows - 1](x, a, p.lda, B, g, k0, row0, 32, slot);
            kKBlockTiles1[rows - 1](x, a, p.lda, B, g + 2, k0, row0, cols - 32, slot + kSlot / 2);
            break;
          case 2: kKBlockTiles2[rows - 1](x, a, p.lda, B, g, k0, row0, cols, slot); break;
          default: kKBlockTiles1[rows - 1](x, a, p.lda, B, g, k0, row0, cols, slot); break;
        }
      }
    }
  }
}

template <int NP, int... MRs>
constexpr auto makeTileTable(std::integer_sequence<int, MRs...>) {
  return std::array<TileFn, sizeof...(MRs)>{&tile<MRs + 1, NP>...};
}
/// kTilesNP[r - 1]: the r-row tile over NP panels.
constexpr auto kTiles1 = makeTileTable<1>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles2 = makeTileTable<2>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles3 = makeTileTable<3>(std::make_integer_sequence<int, kMRMax>{});
constexpr auto kTiles4 = makeTileTable<4>(std::make_integer_sequence<int, 4>{});

// ---- per-thread work -----------------------------------------------------------------------------

/// Computes rows [m0, m1) x panels [p0, p1) of c. \returns false if scratch allocation failed.
bool computeRegion(const Problem& p, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const PackedWeights& B = *p.b;
  const int64_t N = B.n();
  const int64_t n0 = p0 * 16, n1 = std::min(N, p1 * 16);

  const int64_t rows = m1 - m0;
  const int64_t nIC = (rows + kMCMax - 1) / kMCMax;
  // Multiples of 8 rows as in the bf16 kernel (level here: float32 is not limited by the tile's loads).
  const int64_t mc = ((rows + nIC - 1) / nIC + kMRMax - 1) / kMRMax * kMRMax;

  // Each tile writes c once, after its whole K: an operand that is c itself is read element by
  // element before that element is written, so no copies are needed (severalBlocks = false).
  EpiOp ops[kMaxEpiOps];
  if (prepareOperands(p, m0, m1, n0, n1, false, 0, ops) == nullptr) return false;
  const Ctx x{p.c, p.ldc, N, p.bias, ops, p.nOps};

  for (int64_t ic = m0; ic < m1; ic += mc) {
    const int64_t mcur = std::min(mc, m1 - ic);
    // Decode-sized blocks take 4-panel tiles; otherwise tiles of near-equal height <= kMRMax.
    const bool wide = mcur <= 4;
    if (wide && (B.k() > B.kBlock() || B.bytes() > kDecodeStreamBytes)) {
      decodeRows(x, p, ic, mcur, p0, p1, B.bytes() > kDecodeStreamBytes);
      continue;
    }
    const int64_t group = wide ? 4 : kNP;
    const int64_t nTiles = wide ? 1 : (mcur + kMRMax - 1) / kMRMax;
    for (int64_t g = p0; g < p1; g += group) {
      const int64_t gp = std::min(group, p1 - g);
      const int64_t cols = std::min<int64_t>(16 * gp, N - g * 16);
      // The next group (the first of the region for the last one: the next row block's).
      // Decode-sized tiles prefetch nothing: they stream the weights once, which the hardware
      // prefetchers follow better alone (1x512x32000, Llama's lm_head: 38 -> 48 GB/s, the plain
      // read's 49; 1x512x1536 96 -> 103; M = 2-4 level or slightly faster).
      const int64_t next = g + gp < p1 ? g + gp : p0;
      const int64_t pfParts = !wide && (g + gp < p1 || ic + mcur < m1) ? nTiles : 0;
      for (int64_t t = 0; t < nTiles; ++t) {
        const int64_t r0 = mcur * t / nTiles, r1 = mcur * (t + 1) / nTiles;
        const int64_t mr = r1 - r0;
        const float* a = p.a + (ic + r0) * p.lda;
        if (wide && gp == 3) {  // a 4-panel group cut short: a pair, then one panel
          kTiles2[mr - 1](x, a, p.lda, B, g, ic + r0, 32, next, t, pfParts);
          kTiles1[mr - 1](x, a, p.lda, B, g + 2, ic + r0, cols - 32, 0, 0, 0);
          continue;
        }
        switch (gp) {
          case 4: kTiles4[mr - 1](x, a, p.lda, B, g, ic + r0, cols, next, t, pfParts); break;
          case 3: kTiles3[mr - 1](x, a, p.lda, B, g, ic + r0, cols, next, t, pfParts); break;
          case 2: kTiles2[mr - 1](x, a, p.lda, B, g, ic + r0, cols, next, t, pfParts); break;
          default: kTiles1[mr - 1](x, a, p.lda, B, g, ic + r0, cols, next, t, pfParts); break;
        }
      }
    }
  }
  return true;
}

}  // namespace

Status runAvx512(const Problem& p) {
  // Panels split in whole tile groups, so no thread gets a short group mid-matrix.
  const bool ok = splitOverThreads(p.threads, p.m, kMRMax, (p.b->n() + 15) / 16, kNP,
                                   [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
                                     return computeRegion(p, m0, m1, q0, q1);
                                   });
  return ok ? Status::ok() : internalError("gemm: out of scratch memory");
}

}  // namespace verifuse::kernels::gemm::detail
