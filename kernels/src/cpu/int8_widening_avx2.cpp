// The widening int8 kernels on AVX2 (built with -mavx2 -mfma -mf16c; reached only after
// int8WideningAvailable()). int8_widening.h says what they compute and why they are exact.
//
// Implicit GEMM (every convolution but depthwise, and linear), per group g:
//   rows = output pixels (n, oh, ow), K = (kh, kw, c) of the group's input channels, columns =
//   the group's output channels in panels of 16 (weights prepacked as (k, k+1) s16 pairs).
//   thread t owns rows [m0, m1) x panels [q0, q1) (disjoint, so no thread sums for another and
//   the result does not depend on the thread count; integer sums are exact in any order anyway)
//   for each row block of at most MC rows:
//     pack A: im2col straight from the u8/s8 codes: x - zx as s16, [rows][lda], 0 where the window
//             reads padding (exactly eager's zero padding of the dequantized input)
//     for each block of panels (<= NB, one group):
//       for each 6-row tile: for each panel: 6x16 micro-kernel over the whole K (12 s32
//         accumulators in ymm), then the epilogue straight from the registers.
//   A tile's rows (6 x K x 2 bytes) stay in L1 across the block's panels; the panels stream from
//   L2, one 64-byte line per k pair.
// Micro-kernel step (one k pair, 16 columns): 2 aligned B loads, then per row one 32-bit
// broadcast of (x_k, x_k+1), vpmaddwd against both B vectors (two products per s32 lane) and
// vpaddd into the accumulators (inline asm: see kLoop).
//
// Depthwise (groups == C == O), vectorised over 8 channels: each input row a thread needs is
// prepared once into a ring of rows as pairs P[iw] = (x[iw] - zx, x[iw + dilation] - zx) in s16
// per channel, with 0 where the window reads padding. An output pixel then takes, per kernel row,
// ceil(kw / 2) loads of P (taps (kw, kw + 1) at once; an odd last tap against a zero weight) and
// as many vpmaddwd + vpaddd: no shuffles and no border tests in the main loop.
//
// Epilogue (int8_widening_internal.h's recipes): relu / clamp chains are one clamp, a leading sum
// and bounds one more fma; u8/s8 outputs carry 1 / dstScale in their per-channel factors, so
// requantizing is one rounding, the zero point and one pack per 16 columns.
//
// Sources whose channels are not contiguous (NCHW, a column-major linear input) are first
// converted once per call into a dense NHWC buffer (GEMM: x - zx as s16; depthwise: the codes).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "cpu/int8_widening_internal.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::int8w {
namespace {

#define VF_I8W_INLINE inline __attribute__((always_inline))

constexpr int64_t kMR = 6;
/// Budgets (bytes) of a packed A row block and of a block of weight panels: both stay in L2
/// (2 MiB on Sapphire Rapids, 512 KiB on Zen 3) while the tiles go by.
constexpr int64_t kABlockBytes = 256 << 10;
constexpr int64_t kBBlockBytes = 512 << 10;

// ---- per-thread scratch --------------------------------------------------------------------------

/// A thread's growing, 64-byte aligned buffer; freed at thread exit.
struct Scratch {
  void* p = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(p); }
  void* get(size_t bytes) {
    if (bytes > cap) {
      std::free(p);
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      p = std::aligned_alloc(64, rounded);
      cap = p != nullptr ? rounded : 0;
    }
    return p;
  }
};
/// The packed A row block of the thread running a region.
thread_local Scratch tlsPack;
/// The calling thread's converted source (shared by the call's threads).
thread_local Scratch tlsSource;

// ---- epilogue ------------------------------------------------------------------------------------

/// The call's constants for the epilogue.
struct Epi {
  const float* scales;  ///< per packed column: srcScale * weightScale (general recipe, f32 output)
  const float* biases;
  const float* scalesFast;  ///< the recipes' factors: divided by dstScale for u8/s8 outputs
  const float* biasesFast;
  PostOpKind ops[kMaxPostOps];
  int nOps;
  bool hasBounds;  ///< the recipes' clamp is not (-inf, inf)
  __m256 clampLo, clampHi, sumScale, invDst, qLo, qHi;
  __m256 boundLo, boundHi, sumScaleFast;
  __m256i sumZp, dstZp;
};

Epi makeEpi(const Plan& p) {
  Epi e;
  const bool codes = p.dst == DstKind::kU8 || p.dst == DstKind::kS8;
  e.scales = p.scales;
  e.biases = p.biases;
  e.scalesFast = codes ? p.scalesOverDst : p.scales;
  e.biasesFast = codes ? p.biasesOverDst : p.biases;
  for (int i = 0; i < p.nPostOps; ++i) e.ops[i] = p.postOps[i];
  e.nOps = p.nPostOps;
  e.hasBounds = !(p.boundLo == -__builtin_inff() && p.boundHi == __builtin_inff());
  e.clampLo = _mm256_set1_ps(p.clampLo);
  e.clampHi = _mm256_set1_ps(p.clampHi);
  e.sumScale = _mm256_set1_ps(p.sumScale);
  e.sumZp = _mm256_set1_epi32(p.sumZeroPoint);
  e.invDst = _mm256_set1_ps(p.invDstScale);
  e.dstZp = _mm256_set1_epi32(p.dstZeroPoint);
  // Clamping y / dstScale to [lo - zp, hi - zp] before rounding is saturating after it (the
  // bounds are integers), and keeps the conversion to s32 in range.
  const double lo = p.dst == DstKind::kU8 ? 0 : -128, hi = p.dst == DstKind::kU8 ? 255 : 127;
  e.qLo = _mm256_set1_ps(static_cast<float>(lo - p.dstZeroPoint));
  e.qHi = _mm256_set1_ps(static_cast<float>(hi - p.dstZeroPoint));
  e.boundLo = _mm256_set1_ps(p.boundLo);
  e.boundHi = _mm256_set1_ps(p.boundHi);
  e.sumScaleFast = _mm256_set1_ps(codes ? p.sumScaleOverDst : p.sumScale);
  return e;
}

VF_I8W_INLINE __m256i maskOf(int count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// Eight residual codes (u8 or s8) widened to s32.
template <DstKind D>
VF_I8W_INLINE __m256i widenCodes(__m128i bytes) {
  return D == DstKind::kU8 ? _mm256_cvtepu8_epi32(bytes) : _mm256_cvtepi8_epi32(bytes);
}

/// y -> post-ops; \p residual: the 8 residual codes (only read by a sum post-op).
template <DstKind D>
VF_I8W_INLINE __m256 postOps(const Epi& e, __m256 y, __m128i residual) {
  namespace vm = cpu::avx2;
  for (int i = 0; i < e.nOps; ++i) {
    switch (e.ops[i]) {
      case PostOpKind::kRelu: y = vm::relu(y); break;
      case PostOpKind::kClamp: y = _mm256_min_ps(_mm256_max_ps(y, e.clampLo), e.clampHi); break;
      case PostOpKind::kGeluErf: y = vm::geluErf(y); break;
      case PostOpKind::kGeluTanh: y = vm::geluTanh(y); break;
      case PostOpKind::kSum: {
        if constexpr (D == DstKind::kU8 || D == DstKind::kS8) {
          const __m256i r = _mm256_sub_epi32(widenCodes<D>(residual), e.sumZp);
          y = _mm256_fmadd_ps(e.sumScale, _mm256_cvtepi32_ps(r), y);
        }
        break;
      }
    }
  }
  return y;
}

/// Codes: saturate(nearbyint(y / dstScale) + zp) as 8 bytes in the low half.
template <DstKind D>
VF_I8W_INLINE __m128i requantize(const Epi& e, __m256 y) {
  __m256 q = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(y, e.invDst), e.qLo), e.qHi);
  const __m256i qi = _mm256_add_epi32(_mm256_cvtps_epi32(q), e.dstZp);  // MXCSR: nearest, ties to even
  const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
  return D == DstKind::kU8 ? _mm_packus_epi16(w16, w16) : _mm_packs_epi16(w16, w16);
}

VF_I8W_INLINE __m128i loadBytes(const void* p, int valid) {
  if (valid == 8) return _mm_loadl_epi64(static_cast<const __m128i*>(p));
  alignas(16) uint8_t buf[16] = {};
  std::memcpy(buf, p, static_cast<size_t>(valid));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}

VF_I8W_INLINE void storeBytes(void* p, __m128i v, int valid) {
  if (valid == 8) {
    _mm_storel_epi64(static_cast<__m128i*>(p), v);
    return;
  }
  alignas(16) uint8_t buf[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(buf), v);
  std::memcpy(p, buf, static_cast<size_t>(valid));
}

/// Finishes 8 adjacent output channels of one output element row whose dense output sits at
/// \p out (element stride 1 between channels): s32 -> f32, scale, bias, post-ops, requantization,
/// store. \p col: packed column of the first; \p valid: how many of the 8 are real (1..8).
template <DstKind D>
VF_I8W_INLINE void finish8(const Epi& e, __m256i acc, int64_t col, void* out, int valid) {
  if constexpr (D == DstKind::kS32) {
    if (valid == 8) {
      _mm256_storeu_si256(static_cast<__m256i*>(out), acc);
    } else {
      _mm256_maskstore_epi32(static_cast<int*>(out), maskOf(valid), acc);
    }
    return;
  } else {
    __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_loadu_ps(e.scales + col), _mm256_loadu_ps(e.biases + col));
    __m128i residual = _mm_setzero_si128();
    if constexpr (D != DstKind::kF32) {
      for (int i = 0; i < e.nOps; ++i) {
        if (e.ops[i] == PostOpKind::kSum) residual = loadBytes(out, valid);
      }
    }
    y = postOps<D>(e, y, residual);
    if constexpr (D == DstKind::kF32) {
      if (valid == 8) {
        _mm256_storeu_ps(static_cast<float*>(out), y);
      } else {
        _mm256_maskstore_ps(static_cast<float*>(out), maskOf(valid), y);
      }
    } else {
      storeBytes(out, requantize<D>(e, y), valid);
    }
  }
}

constexpr size_t elementBytes(DstKind d) { return d == DstKind::kU8 || d == DstKind::kS8 ? 1 : 4; }

/// The same for an output whose channels are \p channelStride elements apart (NCHW): through a
/// small buffer, element by element.
template <DstKind D>
void finish8Strided(const Epi& e, __m256i acc, int64_t col, char* out, int64_t channelStride, int valid) {
  constexpr size_t es = elementBytes(D);
  alignas(32) char buf[32];
  const int64_t step = channelStride * static_cast<int64_t>(es);
  for (int i = 0; i < valid; ++i) std::memcpy(buf + i * es, out + i * step, es);  // the residual, if any
  finish8<D>(e, acc, col, buf, valid);
  for (int i = 0; i < valid; ++i) std::memcpy(out + i * step, buf + i * es, es);
}

/// y of 8 columns under recipe R (kBounds / kSumBounds): acc * scale + bias, the residual's
/// term, the bounds. For u8/s8 outputs in units of dstScale (the factors are folded).
template <DstKind D, Recipe R>
VF_I8W_INLINE __m256 recipeY(const Epi& e, __m256i acc, __m256 scale, __m256 bias, __m256i residual) {
  __m256 y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), scale, bias);
  if constexpr (R == Recipe::kSumBounds) {
    y = _mm256_fmadd_ps(e.sumScaleFast, _mm256_cvtepi32_ps(_mm256_sub_epi32(residual, e.sumZp)), y);
  }
  // max(lo, y) then min(hi, y): a NaN passes, as torch's relu / clamp.
  if (e.hasBounds) y = _mm256_min_ps(e.boundHi, _mm256_max_ps(e.boundLo, y));
  return y;
}

/// 16 codes from two rows of 8 values already in units of dstScale and within the code range:
/// round (nearest, ties to even), + zp, packed in column order.
template <DstKind D>
VF_I8W_INLINE __m128i codes16(const Epi& e, __m256 y0, __m256 y1) {
  const __m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(y0), e.dstZp);
  const __m256i q1 = _mm256_add_epi32(_mm256_cvtps_epi32(y1), e.dstZp);
  // packs: lane 0 = q0[0..3] q1[0..3], lane 1 = q0[4..7] q1[4..7]; then bytes; then the dwords
  // in column order.
  __m256i t = _mm256_packs_epi32(q0, q1);
  t = D == DstKind::kU8 ? _mm256_packus_epi16(t, t) : _mm256_packs_epi16(t, t);
  t = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));
  return _mm256_castsi256_si128(t);
}

/// Writes \p n (1..16) output elements of one channels-last row at \p out from the two 8-column
/// accumulators, under recipe R; \p col: the packed column of the first.
template <DstKind D, Recipe R>
VF_I8W_INLINE void finishRow16(const Epi& e, __m256i acc0, __m256i acc1, __m256 s0, __m256 s1, __m256 b0, __m256 b1,
                               char* out, int n) {
  if constexpr (D == DstKind::kS32) {
    if (n == 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), acc1);
    } else {
      _mm256_maskstore_epi32(reinterpret_cast<int*>(out), maskOf(std::min(n, 8)), acc0);
      if (n > 8) _mm256_maskstore_epi32(reinterpret_cast<int*>(out + 32), maskOf(n - 8), acc1);
    }
    return;
  } else {
    __m256i r0 = _mm256_setzero_si256(), r1 = r0;
    if constexpr (R == Recipe::kSumBounds) {
      __m128i bytes;
      if (n == 16) {
        bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(out));
      } else {
        alignas(16) uint8_t buf[16] = {};
        std::memcpy(buf, out, static_cast<size_t>(n));
        bytes = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
      }
      r0 = widenCodes<D>(bytes);
      r1 = widenCodes<D>(_mm_unpackhi_epi64(bytes, bytes));
    }
    const __m256 y0 = recipeY<D, R>(e, acc0, s0, b0, r0);
    const __m256 y1 = recipeY<D, R>(e, acc1, s1, b1, r1);
    if constexpr (D == DstKind::kF32) {
      float* o = reinterpret_cast<float*>(out);
      if (n == 16) {
        _mm256_storeu_ps(o, y0);
        _mm256_storeu_ps(o + 8, y1);
      } else {
        _mm256_maskstore_ps(o, maskOf(std::min(n, 8)), y0);
        if (n > 8) _mm256_maskstore_ps(o + 8, maskOf(n - 8), y1);
      }
    } else {
      const __m128i c = codes16<D>(e, y0, y1);
      if (n == 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out), c);
      } else {
        alignas(16) uint8_t buf[16];
        _mm_store_si128(reinterpret_cast<__m128i*>(buf), c);
        std::memcpy(out, buf, static_cast<size_t>(n));
      }
    }
  }
}

// ---- GEMM ----------------------------------------------------------------------------------------

/// One call's view for the GEMM workers.
struct GemmCtx {
  const Plan* p;
  Epi epi;
  const void* src;        ///< the codes, or the converted s16 source (x - zx, NHWC dense)
  bool srcConverted;      ///< src is that s16 buffer
  int64_t sN, sC, sH, sW; ///< element strides of src
  char* dst;
  int64_t rows;           ///< batch * outHeight * outWidth
  int64_t lda;            ///< packed A row stride (elements): >= K + 16 (see convertRun)
  const void* srcEnd;     ///< one past the last source element (codes may be read up to here)
};

/// Writes the MR x 16 tile \p acc (rows m0.., panel columns from packed column \p col, output
/// channels from \p o0, \p valid of the 16 real).
template <int MR, DstKind D, Recipe R>
VF_I8W_INLINE void finishTile(const GemmCtx& x, __m256i (&acc)[MR][2], int64_t m0, int64_t col, int64_t o0, int valid) {
  const Plan& p = *x.p;
  constexpr size_t es = elementBytes(D);
  const int v0 = std::min(valid, 8), v1 = valid - v0;
  if (R != Recipe::kGeneral && p.dstChannelsLast) {
    // A local copy: the stores through char* below could alias x.epi, and would make the compiler
    // reload every constant after each store.
    const Epi e = x.epi;
    const __m256 s0 = _mm256_loadu_ps(e.scalesFast + col), s1 = _mm256_loadu_ps(e.scalesFast + col + 8);
    const __m256 b0 = _mm256_loadu_ps(e.biasesFast + col), b1 = _mm256_loadu_ps(e.biasesFast + col + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      char* out = x.dst + ((m0 + i) * p.outChannels + o0) * static_cast<int64_t>(es);
      finishRow16<D, R>(e, acc[i][0], acc[i][1], s0, s1, b0, b1, out, valid);
    }
  } else if (p.dstChannelsLast) {
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      char* out = x.dst + ((m0 + i) * p.outChannels + o0) * static_cast<int64_t>(es);
      finish8<D>(x.epi, acc[i][0], col, out, v0);
      if (v1 > 0) finish8<D>(x.epi, acc[i][1], col + 8, out + 8 * es, v1);
    }
  } else {
    const int64_t plane = p.outHeight * p.outWidth;
    for (int i = 0; i < MR; ++i) {
      const int64_t m = m0 + i, n = m / plane, pix = m % plane;
      char* out = x.dst + ((n * p.outChannels + o0) * plane + pix) * static_cast<int64_t>(es);
      finish8Strided<D>(x.epi, acc[i][0], col, out, plane, v0);
      if (v1 > 0) finish8Strided<D>(x.epi, acc[i][1], col + 8, out + 8 * plane * static_cast<int64_t>(es), plane, v1);
    }
  }
}

// One k pair of an MR x 16 tile: per row i, broadcast (x_k, x_k+1) from ADDR, vpmaddwd against
// both B vectors, vpaddd into c<i>0 / c<i>1 (ymm14 / ymm15 are the temporaries). Rows 0-2 are
// at r0 + {0, 1, 2} * ld bytes, rows 3-5 at r3 + {0, 1, 2} * ld.
#define VF_I8W_ROW(i, ADDR)                       \
  "vpbroadcastd " ADDR ", %%ymm15\n\t"            \
  "vpmaddwd %[b0], %%ymm15, %%ymm14\n\t"          \
  "vpmaddwd %[b1], %%ymm15, %%ymm15\n\t"          \
  "vpaddd %%ymm14, %[c" #i "0], %[c" #i "0]\n\t" \
  "vpaddd %%ymm15, %[c" #i "1], %[c" #i "1]\n\t"
#define VF_I8W_ROW0 VF_I8W_ROW(0, "(%[r0])")
#define VF_I8W_ROW1 VF_I8W_ROW(1, "(%[r0],%[ld])")
#define VF_I8W_ROW2 VF_I8W_ROW(2, "(%[r0],%[ld],2)")
#define VF_I8W_ROW3 VF_I8W_ROW(3, "(%[r3])")
#define VF_I8W_ROW4 VF_I8W_ROW(4, "(%[r3],%[ld])")
#define VF_I8W_ROW5 VF_I8W_ROW(5, "(%[r3],%[ld],2)")
#define VF_I8W_ACC(i) [c##i##0] "+x"(c##i##0), [c##i##1] "+x"(c##i##1)
#define VF_I8W_IN [r0] "r"(r0 + kp), [r3] "r"(r3 + kp), [ld] "r"(ld), [b0] "x"(b0), [b1] "x"(b1)

/// acc = the MR x 16 products of \p a (MR packed rows, stride lda) and the panel \p b over the
/// whole K. NOTE: one asm statement per k pair with all accumulators as operands: GCC 12 spills or
/// shuffles the accumulators of the intrinsic form (and of one asm statement per row) on every
/// step, as 12 accumulators + 2 B vectors + the broadcast + one product take all 16 ymm
/// registers. Measured in isolation: 23 GMAC/s with intrinsics, 36 with this form.
template <int MR>
VF_I8W_INLINE void kLoop(int64_t kPairs, const int16_t* a, int64_t lda, const int16_t* b, __m256i (&acc)[MR][2]) {
  const __m256i z = _mm256_setzero_si256();
  __m256i c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
  const auto* r0 = reinterpret_cast<const int32_t*>(a);
  const int32_t* r3 = r0 + 3 * (lda / 2);
  const int64_t ld = lda * 2;
#pragma GCC unroll 4
  for (int64_t kp = 0; kp < kPairs; ++kp) {
    const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32 * kp));
    const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32 * kp + 16));
    // The rows are read through r0 / r3 without a memory operand or clobber: they were written
    // before this (noinline) tile was called and nothing here writes memory.
    if constexpr (MR == 6) {
      asm(VF_I8W_ROW0 VF_I8W_ROW1 VF_I8W_ROW2 VF_I8W_ROW3 VF_I8W_ROW4 VF_I8W_ROW5
          : VF_I8W_ACC(0), VF_I8W_ACC(1), VF_I8W_ACC(2), VF_I8W_ACC(3), VF_I8W_ACC(4), VF_I8W_ACC(5)
          : VF_I8W_IN
          : "xmm14", "xmm15");
    } else if constexpr (MR == 5) {
      asm(VF_I8W_ROW0 VF_I8W_ROW1 VF_I8W_ROW2 VF_I8W_ROW3 VF_I8W_ROW4
          : VF_I8W_ACC(0), VF_I8W_ACC(1), VF_I8W_ACC(2), VF_I8W_ACC(3), VF_I8W_ACC(4)
          : VF_I8W_IN
          : "xmm14", "xmm15");
    } else if constexpr (MR == 4) {
      asm(VF_I8W_ROW0 VF_I8W_ROW1 VF_I8W_ROW2 VF_I8W_ROW3
          : VF_I8W_ACC(0), VF_I8W_ACC(1), VF_I8W_ACC(2), VF_I8W_ACC(3)
          : VF_I8W_IN
          : "xmm14", "xmm15");
    } else if constexpr (MR == 3) {
      asm(VF_I8W_ROW0 VF_I8W_ROW1 VF_I8W_ROW2
          : VF_I8W_ACC(0), VF_I8W_ACC(1), VF_I8W_ACC(2)
          : VF_I8W_IN
          : "xmm14", "xmm15");
    } else if constexpr (MR == 2) {
      asm(VF_I8W_ROW0 VF_I8W_ROW1 : VF_I8W_ACC(0), VF_I8W_ACC(1) : VF_I8W_IN : "xmm14", "xmm15");
    } else {
      asm(VF_I8W_ROW0 : VF_I8W_ACC(0) : VF_I8W_IN : "xmm14", "xmm15");
    }
  }
  const __m256i all[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = all[i][0];
    acc[i][1] = all[i][1];
  }
}
#undef VF_I8W_ROW
#undef VF_I8W_ROW0
#undef VF_I8W_ROW1
#undef VF_I8W_ROW2
#undef VF_I8W_ROW3
#undef VF_I8W_ROW4
#undef VF_I8W_ROW5
#undef VF_I8W_ACC
#undef VF_I8W_IN

/// One MR x 16 tile over the whole K: \p a = MR packed rows (stride lda), \p b = one panel.
template <int MR, DstKind D, Recipe R>
__attribute__((noinline)) void tile(const GemmCtx& x, const int16_t* a, const int16_t* b, int64_t m0, int64_t col,
                                    int64_t o0, int valid) {
  __m256i acc[MR][2];
  kLoop<MR>(x.p->kPairs, a, x.lda, b, acc);
  finishTile<MR, D, R>(x, acc, m0, col, o0, valid);
}

template <class T>
VF_I8W_INLINE __m256i widen16(const T* s) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  if constexpr (std::is_same_v<T, uint8_t>) return _mm256_cvtepu8_epi16(v);
  return _mm256_cvtepi8_epi16(v);
}

/// d[0..n) = s[0..n) - zx as s16 (T: u8 / s8 codes), or a copy (T = int16_t: converted already).
/// NOTE: codes go 16 at a time, so up to 15 elements past d + n are written (garbage) and up to
/// 15 codes past s + n read, as long as they lie before \p end (else the rest goes one by one).
/// Callers write a row's runs in increasing order (a later run overwrites the spill) and leave
/// 16 elements of slack after the row's K elements. Stem-like runs (7 x 3 channels = 21) took a
/// quarter of the stem's time with a scalar tail.
template <class T>
VF_I8W_INLINE void convertRun(const T* s, int64_t n, int16_t* d, __m256i zx16, int32_t zx, const T* end) {
  if constexpr (std::is_same_v<T, int16_t>) {
    std::memcpy(d, s, static_cast<size_t>(n) * sizeof(int16_t));
  } else {
    int64_t i = 0;
    for (; i < n && s + i + 16 <= end; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_sub_epi16(widen16(s + i), zx16));
    }
    for (; i < n; ++i) d[i] = static_cast<int16_t>(static_cast<int32_t>(s[i]) - zx);
  }
}

/// Packs the A rows [m0, m0 + rows) of group \p g: row r at dst + r * lda, K in (kh, kw, c)
/// order, the pad element of an odd K zero.
template <class T>
void packA(const GemmCtx& x, const T* src, int64_t g, int64_t m0, int64_t rows, int16_t* dst) {
  const Plan& p = *x.p;
  const int32_t zx = x.srcConverted ? 0 : p.srcZeroPoint;
  const __m256i zx16 = _mm256_set1_epi16(static_cast<int16_t>(zx));
  const int64_t cg = p.groupChannels, kw = p.kernelW, plane = p.outHeight * p.outWidth;
  const int64_t run = kw * cg;  // one kernel row's K elements
  // One kernel row's (kw, c) elements are one run of the source when the window is dense along
  // W, all channels belong to the group and the pixels' channels are adjacent.
  const bool rowIsOneRun = p.dilationW == 1 && p.groups == 1 && x.sW == cg;
  const T* end = static_cast<const T*>(x.srcEnd);
  // The first row's pixel, then one step per row (no divisions per row: they cost the stem ~15%).
  int64_t n = m0 / plane, oh = m0 % plane / p.outWidth, ow = m0 % p.outWidth;
  for (int64_t r = 0; r < rows; ++r, ++ow) {
    if (ow == p.outWidth) {
      ow = 0;
      if (++oh == p.outHeight) {
        oh = 0;
        ++n;
      }
    }
    int16_t* d = dst + r * x.lda;
    const T* image = src + n * x.sN + g * cg * x.sC;
    const int64_t iw0 = ow * p.strideW - p.padLeft;
    const bool wInside = iw0 >= 0 && iw0 + (kw - 1) * p.dilationW < p.width;
    for (int64_t kh = 0; kh < p.kernelH; ++kh, d += run) {
      const int64_t ih = oh * p.strideH - p.padTop + kh * p.dilationH;
      if (ih < 0 || ih >= p.height) {
        std::memset(d, 0, static_cast<size_t>(run) * sizeof(int16_t));
        continue;
      }
      const T* line = image + ih * x.sH;
      if (rowIsOneRun && wInside) {
        convertRun(line + iw0 * x.sW, run, d, zx16, zx, end);
        continue;
      }
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t iw = iw0 + j * p.dilationW;
        if (iw < 0 || iw >= p.width) {
          std::memset(d + j * cg, 0, static_cast<size_t>(cg) * sizeof(int16_t));
        } else {
          convertRun(line + iw * x.sW, cg, d + j * cg, zx16, zx, end);
        }
      }
    }
    if (p.k % 2 != 0) dst[r * x.lda + p.k] = 0;
  }
}

template <DstKind D, Recipe R>
void tailTile(const GemmCtx& x, int mr, const int16_t* a, const int16_t* b, int64_t m0, int64_t col, int64_t o0,
              int valid) {
  switch (mr) {
    case 1: tile<1, D, R>(x, a, b, m0, col, o0, valid); break;
    case 2: tile<2, D, R>(x, a, b, m0, col, o0, valid); break;
    case 3: tile<3, D, R>(x, a, b, m0, col, o0, valid); break;
    case 4: tile<4, D, R>(x, a, b, m0, col, o0, valid); break;
    case 5: tile<5, D, R>(x, a, b, m0, col, o0, valid); break;
    default: break;
  }
}

/// Rows [m0, m1) x global panels [q0, q1) (panel q = group q / panels, panel q % panels).
/// \returns false if scratch allocation failed.
template <DstKind D, Recipe R>
bool gemmRegion(const GemmCtx& x, int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
  const Plan& p = *x.p;
  const int64_t rowBytes = x.lda * 2;
  const int64_t mcMax = std::max<int64_t>(kMR, kABlockBytes / rowBytes / kMR * kMR);
  const int64_t nRows = m1 - m0;
  const int64_t nBlocks = (nRows + mcMax - 1) / mcMax;
  const int64_t mc = ((nRows + nBlocks - 1) / nBlocks + kMR - 1) / kMR * kMR;
  auto* aPack = static_cast<int16_t*>(tlsPack.get(static_cast<size_t>(mc * rowBytes) + 64));
  if (aPack == nullptr) return false;
  const int64_t panelElems = p.kPairs * kPanelWidth * 2;
  const int64_t nb = std::max<int64_t>(1, kBBlockBytes / (panelElems * 2));

  for (int64_t mb = m0; mb < m1; mb += mc) {
    const int64_t rows = std::min(mc, m1 - mb);
    const int64_t full = rows / kMR, tail = rows % kMR;
    int64_t packedGroup = -1;
    for (int64_t qb = q0; qb < q1;) {
      const int64_t g = qb / p.panels;
      const int64_t qe = std::min({q1, (g + 1) * p.panels, qb + nb});
      if (g != packedGroup) {
        if (x.srcConverted) {
          packA(x, static_cast<const int16_t*>(x.src), g, mb, rows, aPack);
        } else if (p.srcSigned) {
          packA(x, static_cast<const int8_t*>(x.src), g, mb, rows, aPack);
        } else {
          packA(x, static_cast<const uint8_t*>(x.src), g, mb, rows, aPack);
        }
        packedGroup = g;
      }
      for (int64_t t = 0; t <= full; ++t) {
        const int mr = t < full ? static_cast<int>(kMR) : static_cast<int>(tail);
        if (mr == 0) break;
        const int16_t* a = aPack + t * kMR * x.lda;
        const int64_t rowStart = mb + t * kMR;
        for (int64_t q = qb; q < qe; ++q) {
          const int64_t j = q % p.panels;
          const int16_t* b = p.weights + q * panelElems;
          const int64_t col = q * kPanelWidth;
          const int64_t o0 = g * p.groupOutChannels + j * kPanelWidth;
          const int valid = static_cast<int>(std::min<int64_t>(kPanelWidth, p.groupOutChannels - j * kPanelWidth));
          if (mr == kMR) {
            tile<kMR, D, R>(x, a, b, rowStart, col, o0, valid);
          } else {
            tailTile<D, R>(x, mr, a, b, rowStart, col, o0, valid);
          }
        }
      }
      qb = qe;
    }
  }
  return true;
}

// ---- threads -------------------------------------------------------------------------------------

/// [begin, end) of part \p i of \p total units cut into \p parts near-equal contiguous pieces.
VF_I8W_INLINE int64_t cut(int64_t total, int parts, int i) { return total * i / parts; }

/// How \p nt threads split rowTiles x panels: the split with the least work on the busiest
/// thread, counted in tile-panels plus half a tile-panel per row tile for packing its A rows
/// (every thread packs the rows it owns, for all its panels: splitting N duplicates the packing).
/// Without that term the stem (2091 row tiles x 4 panels) split N on a near tie, each thread
/// packed the whole im2col and 2 threads ran 1.1x one thread's speed instead of 1.6x.
void chooseGrid(int nt, int64_t rowTiles, int64_t panels, int* tm, int* tn) {
  double best = -1;
  for (int a = nt; a >= 1; --a) {
    if (nt % a != 0) continue;
    const int b = nt / a;
    if (a > rowTiles || b > panels) continue;
    const double work = static_cast<double>((rowTiles + a - 1) / a) * (static_cast<double>((panels + b - 1) / b) + 0.5);
    if (best < 0 || work < best) {
      best = work;
      *tm = a;
      *tn = b;
    }
  }
  if (best < 0) *tm = *tn = 1;
}

template <DstKind D, Recipe R>
Status runGemm(const GemmCtx& x, int threads) {
  const Plan& p = *x.p;
  const int64_t panels = p.groups * p.panels;
  if (threads == 1) {
    return gemmRegion<D, R>(x, 0, x.rows, 0, panels) ? Status::ok() : internalError("int8 widening: out of scratch memory");
  }
  const int64_t rowTiles = (x.rows + kMR - 1) / kMR;
  std::atomic<bool> ok{true};
#pragma omp parallel num_threads(threads)
  {
    const int team = omp_get_num_threads(), tid = omp_get_thread_num();
    int tm = 1, tn = 1;
    chooseGrid(team, rowTiles, panels, &tm, &tn);
    if (tid < tm * tn) {
      const int im = tid / tn, in = tid % tn;
      const int64_t m0 = std::min(x.rows, cut(rowTiles, tm, im) * kMR);
      const int64_t m1 = std::min(x.rows, cut(rowTiles, tm, im + 1) * kMR);
      const int64_t q0 = cut(panels, tn, in), q1 = cut(panels, tn, in + 1);
      if (m0 < m1 && q0 < q1 && !gemmRegion<D, R>(x, m0, m1, q0, q1)) ok = false;
    }
  }
  return ok ? Status::ok() : internalError("int8 widening: out of scratch memory");
}

// ---- source conversion ---------------------------------------------------------------------------

/// dst[n][h][w][c] = src(n, c, h, w) - zx as s16 (or the code itself when \p keepCodes: bytes),
/// for sources whose channels are not adjacent. Parallel over (n, h) lines.
template <class T, class Out>
void toChannelsLast(const Plan& p, const T* src, Out* dst, int32_t zx, int threads) {
  const int64_t lines = p.batch * p.height;
  const int64_t C = p.channels, W = p.width;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t n = line / p.height, h = line % p.height;
    const T* s = src + n * p.srcStrideN + h * p.srcStrideH;
    Out* d = dst + line * W * C;
    // Channel-major reads (each channel's row is contiguous in NCHW), scattered writes.
    for (int64_t c = 0; c < C; ++c) {
      const T* sc = s + c * p.srcStrideC;
      for (int64_t w = 0; w < W; ++w) d[w * C + c] = static_cast<Out>(static_cast<int32_t>(sc[w * p.srcStrideW]) - zx);
    }
  }
}

// ---- depthwise ----------------------------------------------------------------------------------

struct DwCtx {
  const Plan* p;
  Epi epi;
  const uint8_t* src;  ///< codes (u8 or s8 bytes), channels adjacent, at these strides
  int64_t sN, sH, sW;
  char* dst;
  int64_t blocks;     ///< ceil(C / 8)
  int64_t positions;  ///< prepared pairs per row and block: (OW - 1) * sw + (KW - 1) * dw + 1
  int64_t slots;      ///< rows in the ring: kernelH * dilationH (the rows one output row reads
                      ///< are distinct modulo it)
};

/// Prepares input row \p ih of image \p n into \p row: [position][block][8 channels][2] s16,
/// position q holding (x[iw] - zx, x[iw + dw] - zx) for iw = q - padLeft, 0 outside the image.
template <bool SIGNED>
void prepareRow(const DwCtx& x, int64_t n, int64_t ih, int16_t* row) {
  const Plan& p = *x.p;
  const int64_t C = p.channels, dw = p.dilationW, fullBlocks = C / kDwBlock;
  const __m256i zx16 = _mm256_set1_epi16(static_cast<int16_t>(p.srcZeroPoint));
  // Padding reads these zero-point codes (x - zx = 0 exactly).
  alignas(16) uint8_t zxCodes[kDwBlock];
  std::memset(zxCodes, static_cast<uint8_t>(p.srcZeroPoint), sizeof zxCodes);
  const uint8_t* line = x.src + n * x.sN + ih * x.sH;
  auto* out = reinterpret_cast<__m256i*>(row);
  auto pairOf = [&](const uint8_t* a, const uint8_t* b) {
    const __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
    return _mm256_sub_epi16(SIGNED ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v), zx16);
  };
  // Positions whose two pixels are both inside the row: no tests, 16 channels per step.
  const int64_t interiorBegin = std::min(x.positions, p.padLeft);
  const int64_t interiorEnd = std::max(interiorBegin, std::min(x.positions, p.width - dw + p.padLeft));
  const int64_t pairBlocks = fullBlocks / 2 * 2;
  for (int64_t q = 0; q < x.positions; ++q, out += x.blocks) {
    const int64_t iw0 = q - p.padLeft, iw1 = iw0 + dw;
    const uint8_t* a = line + iw0 * x.sW;
    const uint8_t* b = line + iw1 * x.sW;
    int64_t blk = 0;
    if (q >= interiorBegin && q < interiorEnd) {
      for (; blk < pairBlocks; blk += 2) {
        const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + blk * kDwBlock));
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + blk * kDwBlock));
        const __m128i lo = _mm_unpacklo_epi8(va, vb), hi = _mm_unpackhi_epi8(va, vb);
        out[blk] = _mm256_sub_epi16(SIGNED ? _mm256_cvtepi8_epi16(lo) : _mm256_cvtepu8_epi16(lo), zx16);
        out[blk + 1] = _mm256_sub_epi16(SIGNED ? _mm256_cvtepi8_epi16(hi) : _mm256_cvtepu8_epi16(hi), zx16);
      }
      for (; blk < fullBlocks; ++blk) out[blk] = pairOf(a + blk * kDwBlock, b + blk * kDwBlock);
    } else {
      const bool in0 = iw0 >= 0 && iw0 < p.width, in1 = iw1 >= 0 && iw1 < p.width;
      for (; blk < fullBlocks; ++blk) {
        out[blk] = pairOf(in0 ? a + blk * kDwBlock : zxCodes, in1 ? b + blk * kDwBlock : zxCodes);
      }
    }
    if (blk < x.blocks) {  // the last channels: never read past the pixel
      const bool in0 = iw0 >= 0 && iw0 < p.width, in1 = iw1 >= 0 && iw1 < p.width;
      const size_t valid = static_cast<size_t>(C - blk * kDwBlock);
      alignas(16) uint8_t t0[kDwBlock], t1[kDwBlock];
      std::memcpy(t0, zxCodes, kDwBlock);
      std::memcpy(t1, zxCodes, kDwBlock);
      if (in0) std::memcpy(t0, a + blk * kDwBlock, valid);
      if (in1) std::memcpy(t1, b + blk * kDwBlock, valid);
      out[blk] = pairOf(t0, t1);
    }
  }
}

/// 8 channels of one output pixel: the sum over kernel rows i and pairs j of the prepared pair at
/// rows[i] + j * jStride times the block's weight i * RP + j (KH, RP = 0: \p kh, \p rp at run time).
template <int KH, int RP>
VF_I8W_INLINE __m256i depthwiseAcc(const __m256i* const* rows, int64_t jStride, const __m256i* w, int64_t kh,
                                   int64_t rp) {
  const int64_t nKh = KH > 0 ? KH : kh, nRp = RP > 0 ? RP : rp;
  __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int64_t i = 0; i < nKh; ++i) {
#pragma GCC unroll 4
    for (int64_t j = 0; j < nRp; ++j) {
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_load_si256(rows[i] + j * jStride),
                                                    _mm256_load_si256(w + i * nRp + j)));
    }
  }
  return acc;
}

/// One output row: every pixel, every channel (blocks innermost, two at a time), channels-last.
/// \p rowBase: per kernel row, its prepared input row (a zero row where the window is outside).
template <int KH, int RP, DstKind D, Recipe R>
__attribute__((noinline)) void depthwiseRow(const DwCtx& x, const __m256i* const* rowBase, char* outRow) {
  const Plan& p = *x.p;
  // A local copy: the stores through char* below could alias x.epi, and would make the compiler
  // reload every constant after each store.
  const Epi e = x.epi;
  constexpr int64_t es = static_cast<int64_t>(elementBytes(D));
  const int64_t C = p.channels, blocks = x.blocks, kh = p.kernelH, rp = p.dwRowPairs;
  const int64_t nKh = KH > 0 ? KH : kh, wStride = nKh * (RP > 0 ? RP : rp);
  const int64_t jStride = 2 * p.dilationW * blocks;
  const int64_t pairsEnd = C / (2 * kDwBlock) * 2;  // blocks handled two at a time (16 channels)
  const auto* weights = reinterpret_cast<const __m256i*>(p.dwWeights);
  const __m256i* rows[kMaxDwTaps];
  for (int64_t ow = 0; ow < p.outWidth; ++ow) {
    const int64_t at = ow * p.strideW * blocks;
    for (int64_t i = 0; i < nKh; ++i) rows[i] = rowBase[i] + at;
    char* out = outRow + ow * C * es;
    const __m256i* w = weights;
    int64_t b = 0;
    if constexpr (R != Recipe::kGeneral) {
      for (; b < pairsEnd; b += 2, w += 2 * wStride) {
        const __m256i acc0 = depthwiseAcc<KH, RP>(rows, jStride, w, kh, rp);
        for (int64_t i = 0; i < nKh; ++i) ++rows[i];
        const __m256i acc1 = depthwiseAcc<KH, RP>(rows, jStride, w + wStride, kh, rp);
        for (int64_t i = 0; i < nKh; ++i) ++rows[i];
        const int64_t c0 = b * kDwBlock;
        finishRow16<D, R>(e, acc0, acc1, _mm256_loadu_ps(e.scalesFast + c0), _mm256_loadu_ps(e.scalesFast + c0 + 8),
                          _mm256_loadu_ps(e.biasesFast + c0), _mm256_loadu_ps(e.biasesFast + c0 + 8), out + c0 * es, 16);
      }
    }
    for (; b < blocks; ++b, w += wStride) {
      const __m256i acc = depthwiseAcc<KH, RP>(rows, jStride, w, kh, rp);
      for (int64_t i = 0; i < nKh; ++i) ++rows[i];
      const int64_t c0 = b * kDwBlock;
      const int valid = static_cast<int>(std::min<int64_t>(kDwBlock, C - c0));
      if constexpr (R == Recipe::kGeneral) {
        finish8<D>(e, acc, c0, out + c0 * es, valid);
      } else {
        const __m256 zero = _mm256_setzero_ps();
        finishRow16<D, R>(e, acc, _mm256_setzero_si256(), _mm256_loadu_ps(e.scalesFast + c0), zero,
                          _mm256_loadu_ps(e.biasesFast + c0), zero, out + c0 * es, valid);
      }
    }
  }
}

/// Output rows [r0, r1) (r = n * outHeight + oh), all channels, channels-last output.
template <DstKind D, Recipe R>
bool depthwiseRows(const DwCtx& x, int64_t r0, int64_t r1) {
  const Plan& p = *x.p;
  const int64_t C = p.channels, kh = p.kernelH;
  constexpr size_t es = elementBytes(D);
  const int64_t rowElems = x.positions * x.blocks * kDwBlock * 2;
  // The ring's rows, then one row of zeros (for kernel rows outside the image).
  auto* ring = static_cast<int16_t*>(tlsPack.get(static_cast<size_t>((x.slots + 1) * rowElems) * sizeof(int16_t) + 64));
  if (ring == nullptr) return false;
  int16_t* zeros = ring + x.slots * rowElems;
  std::memset(zeros, 0, static_cast<size_t>(rowElems) * sizeof(int16_t));
  int64_t tags[kMaxDwRingRows];  // image row held by each slot (n * height + ih), -1: none
  for (int64_t i = 0; i < x.slots; ++i) tags[i] = -1;
  const __m256i* rowBase[kMaxDwTaps];
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t n = r / p.outHeight, oh = r % p.outHeight;
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t ih = oh * p.strideH - p.padTop + i * p.dilationH;
      const int16_t* row = zeros;  // a padding row contributes 0
      if (ih >= 0 && ih < p.height) {
        const int64_t slot = ih % x.slots, tag = n * p.height + ih;
        int16_t* held = ring + slot * rowElems;
        if (tags[slot] != tag) {
          if (p.srcSigned) {
            prepareRow<true>(x, n, ih, held);
          } else {
            prepareRow<false>(x, n, ih, held);
          }
          tags[slot] = tag;
        }
        row = held;
      }
      rowBase[i] = reinterpret_cast<const __m256i*>(row);
    }
    char* outRow = x.dst + r * p.outWidth * C * static_cast<int64_t>(es);
    if (kh == 3 && p.dwRowPairs == 2) {
      depthwiseRow<3, 2, D, R>(x, rowBase, outRow);
    } else if (kh == 5 && p.dwRowPairs == 3) {
      depthwiseRow<5, 3, D, R>(x, rowBase, outRow);
    } else {
      depthwiseRow<0, 0, D, R>(x, rowBase, outRow);
    }
  }
  return true;
}

template <DstKind D, Recipe R>
Status runDepthwise(const DwCtx& x, int threads, char* userDst) {
  const Plan& p = *x.p;
  const int64_t rows = p.batch * p.outHeight;
  std::atomic<bool> ok{true};
  if (threads == 1) {
    ok = depthwiseRows<D, R>(x, 0, rows);
  } else {
#pragma omp parallel num_threads(threads)
    {
      const int team = omp_get_num_threads(), tid = omp_get_thread_num();
      if (!depthwiseRows<D, R>(x, cut(rows, team, tid), cut(rows, team, tid + 1))) ok = false;
    }
  }
  if (!ok) return internalError("int8 widening: out of scratch memory");
  if (x.dst != userDst) {
    // An NCHW output was computed channels-last into scratch: transpose it out.
    constexpr size_t es = elementBytes(D);
    const int64_t plane = p.outHeight * p.outWidth, C = p.channels;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t nc = 0; nc < p.batch * C; ++nc) {
      const int64_t n = nc / C, c = nc % C;
      const char* from = x.dst + (n * plane * C + c) * static_cast<int64_t>(es);
      char* to = userDst + nc * plane * static_cast<int64_t>(es);
      for (int64_t i = 0; i < plane; ++i) std::memcpy(to + i * es, from + i * C * es, es);
    }
  }
  return Status::ok();
}

template <DstKind D, Recipe R>
Status runTyped(const Plan& p, const void* src, void* dst, int threads) {
  const bool channelsAdjacent = p.srcStrideC == 1 || p.channels == 1;
  if (p.depthwise) {
    DwCtx x{&p, makeEpi(p), static_cast<const uint8_t*>(src), p.srcStrideN, p.srcStrideH, p.srcStrideW,
            static_cast<char*>(dst), 0, 0, 0};
    x.blocks = (p.channels + kDwBlock - 1) / kDwBlock;
    x.positions = (p.outWidth - 1) * p.strideW + (p.kernelW - 1) * p.dilationW + 1;
    x.slots = p.kernelH * p.dilationH;
    // Scratch shared by the call's threads: the codes made channels-last, an NCHW output's
    // channels-last staging (the ring rows are each thread's own).
    const size_t srcBytes = channelsAdjacent ? 0 : static_cast<size_t>(p.batch * p.height * p.width * p.channels);
    const size_t dstBytes = p.dstChannelsLast ? 0
                                              : static_cast<size_t>(p.batch * p.outHeight * p.outWidth * p.channels) *
                                                    elementBytes(D);
    auto* shared = static_cast<char*>(tlsSource.get(srcBytes + dstBytes + 64));
    if (shared == nullptr) return internalError("int8 widening: out of scratch memory");
    if (!channelsAdjacent) {
      toChannelsLast(p, static_cast<const uint8_t*>(src), reinterpret_cast<uint8_t*>(shared), 0, threads);
      x.src = reinterpret_cast<const uint8_t*>(shared);
      x.sN = p.height * p.width * p.channels;
      x.sH = p.width * p.channels;
      x.sW = p.channels;
    }
    if (!p.dstChannelsLast) {
      char* staging = shared + (srcBytes + 63) / 64 * 64;
      if constexpr (R == Recipe::kSumBounds || R == Recipe::kGeneral) {
        // The residual's codes, channels-last, where the kernel reads them.
        if (std::find(p.postOps, p.postOps + p.nPostOps, PostOpKind::kSum) != p.postOps + p.nPostOps) {
          constexpr size_t es = elementBytes(D);
          const int64_t plane = p.outHeight * p.outWidth, C = p.channels;
          for (int64_t nc = 0; nc < p.batch * C; ++nc) {
            const int64_t n = nc / C, c = nc % C;
            const char* from = static_cast<const char*>(dst) + nc * plane * static_cast<int64_t>(es);
            char* to = staging + (n * plane * C + c) * static_cast<int64_t>(es);
            for (int64_t i = 0; i < plane; ++i) std::memcpy(to + i * C * es, from + i * es, es);
          }
        }
      }
      x.dst = staging;
    }
    return runDepthwise<D, R>(x, threads, static_cast<char*>(dst));
  }
  GemmCtx x{&p, makeEpi(p), src, false, p.srcStrideN, p.srcStrideC, p.srcStrideH, p.srcStrideW,
            static_cast<char*>(dst), p.batch * p.outHeight * p.outWidth, 0, nullptr};
  // Packed A rows: K + 16 elements of slack (convertRun) rounded up to 16 (32-byte rows), plus
  // one cache line when the stride is a multiple of 1 KiB (the six rows of a tile would share L1
  // sets).
  x.lda = (2 * p.kPairs + 16 + 15) / 16 * 16;
  if ((x.lda * 2) % 1024 == 0) x.lda += 32;
  const int64_t lastElement = (p.batch - 1) * p.srcStrideN + (p.channels - 1) * p.srcStrideC +
                              (p.height - 1) * p.srcStrideH + (p.width - 1) * p.srcStrideW;
  x.srcEnd = static_cast<const uint8_t*>(src) + lastElement + 1;
  if (!channelsAdjacent) {
    const int64_t elems = p.batch * p.height * p.width * p.channels;
    auto* converted = static_cast<int16_t*>(tlsSource.get(static_cast<size_t>(elems) * sizeof(int16_t)));
    if (converted == nullptr) return internalError("int8 widening: out of scratch memory");
    if (p.srcSigned) {
      toChannelsLast(p, static_cast<const int8_t*>(src), converted, p.srcZeroPoint, threads);
    } else {
      toChannelsLast(p, static_cast<const uint8_t*>(src), converted, p.srcZeroPoint, threads);
    }
    x.src = converted;
    x.srcConverted = true;
    x.sC = 1;
    x.sW = p.channels;
    x.sH = p.width * p.channels;
    x.sN = p.height * p.width * p.channels;
  }
  return runGemm<D, R>(x, threads);
}

template <DstKind D>
Status runRecipe(const Plan& p, const void* src, void* dst, int threads) {
  switch (p.recipe) {
    case Recipe::kBounds: return runTyped<D, Recipe::kBounds>(p, src, dst, threads);
    case Recipe::kSumBounds:
      if constexpr (D == DstKind::kU8 || D == DstKind::kS8) return runTyped<D, Recipe::kSumBounds>(p, src, dst, threads);
      break;
    case Recipe::kGeneral:
      if constexpr (D != DstKind::kS32) return runTyped<D, Recipe::kGeneral>(p, src, dst, threads);
      break;
  }
  return internalError("int8 widening: no such epilogue for this output type");
}

}  // namespace

Status runAvx2(const Plan& p, const void* src, void* dst, int threads) {
  switch (p.dst) {
    case DstKind::kF32: return runRecipe<DstKind::kF32>(p, src, dst, threads);
    case DstKind::kU8: return runRecipe<DstKind::kU8>(p, src, dst, threads);
    case DstKind::kS8: return runRecipe<DstKind::kS8>(p, src, dst, threads);
    case DstKind::kS32: return runRecipe<DstKind::kS32>(p, src, dst, threads);
  }
  return internalError("int8 widening: unknown output type");
}

}  // namespace verifuse::kernels::int8w
