// The row engine's AVX-512 kernels: the AVX2 table's loops 16 lanes wide. Same semantics and the
// same roundings, operation for operation: a program without transcendental functions gives the
// AVX2 (and scalar) table's bits exactly, reductions included (the kSum order of 4 x 8 partial
// sums is kept: one zmm holds partial sums 0 and 1, another 2 and 3). Transcendental unary ops run
// the AVX2 formulas on each 8-lane half (identical bits) except exp, sigmoid and silu, which have
// 16-lane versions here (exp identical; sigmoid's first-order correction uses vrcp14ps where AVX2
// uses the 12-bit rcpps: a last-bit difference at most). Reached only after cpu::hasAvx512().
// Why: the interpreter runs every instruction as one pass over an L1-resident chunk, so its loads,
// stores and simple arithmetic are L1 bound; 16 lanes halve the passes (kernels/README.md).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/rowwise_internal.h"
#include "cpu/vecmath_avx2.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::rowwise::detail {

namespace {

namespace v = cpu::avx2;

/// Lanes [0, n) (n clipped to 0..16).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1u);
}

/// 16 floats at p[c..c+16) of which [0, valid) may be read; zeros beyond (never touched).
inline __m512 loadPart(const float* p, int64_t c, int64_t valid) {
  if (c + 16 <= valid) return _mm512_loadu_ps(p + c);
  return _mm512_maskz_loadu_ps(lanes(valid - c), p + c);
}

/// The AVX2 function \p f on both 8-lane halves (the AVX2 table's exact bits).
template <class F>
inline __m512 halves(__m512 x, F f) {
  const __m256 lo = f(_mm512_extractf32x8_ps(x, 0));
  const __m256 hi = f(_mm512_extractf32x8_ps(x, 1));
  return _mm512_insertf32x8(_mm512_zextps256_ps512(lo), hi, 1);
}

inline __m512 splat(float v) { return _mm512_set1_ps(v); }
inline __m512 absBits(__m512 x) { return _mm512_andnot_ps(splat(-0.0f), x); }

/// vecmath_avx2.h's expClamped on 16 lanes (vecmath_avx512.h: the same bits).
inline __m512 expClamped(__m512 x) { return cpu::avx512::detail::expClamped(x); }

/// vecmath_avx2.h's exp (max/min with x second: NaN passes both clamps).
inline __m512 exp(__m512 x) { return expClamped(_mm512_min_ps(splat(89.0f), _mm512_max_ps(splat(-104.0f), x))); }

/// vecmath_avx2.h's sigmoid (sigmoidHiLo with lo = 0), vrcp14ps for rcpps in the correction term.
inline __m512 sigmoid(__m512 x) {
  const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 m = _mm512_or_ps(absBits(x), splat(-0.0f));  // -|x|
  __m512 e = expClamped(_mm512_min_ps(splat(89.0f), _mm512_max_ps(splat(-104.0f), m)));
  // lo = 0: e = fma(e, mlo, e) with mlo = -0 or +0 is e itself.
  const __m512 mlo = _mm512_mask_blend_ps(neg, splat(-0.0f), _mm512_setzero_ps());
  e = _mm512_fmadd_ps(e, mlo, e);
  const __m512 dh = _mm512_add_ps(splat(1.0f), e);
  const __m512 dl = _mm512_sub_ps(e, _mm512_sub_ps(dh, splat(1.0f)));
  const __m512 r = _mm512_div_ps(_mm512_mask_blend_ps(neg, splat(1.0f), e), dh);
  return _mm512_fnmadd_ps(r, _mm512_mul_ps(dl, _mm512_rcp14_ps(dh)), r);
}

/// torch.maximum / torch.minimum: a NaN on either side gives NaN (all bits set, as the AVX2
/// table's or with the unordered mask).
inline __m512 maximum(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), _mm512_max_ps(a, b),
                              _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
}
inline __m512 minimum(__m512 a, __m512 b) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), _mm512_min_ps(a, b),
                              _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
}

using cpu::avx512::detail::toBf16Bits;
inline __m512 roundToBf16(__m512 x) { return _mm512_castsi512_ps(_mm512_slli_epi32(toBf16Bits(x), 16)); }

/// Stores lanes [0, w) of \p x at \p d (w is 16, or 8 for a row's last half vector).
inline void storeLanes(float* d, __m512 x, int64_t w) {
  if (w >= 16) _mm512_storeu_ps(d, x);
  else _mm512_mask_storeu_ps(d, lanes(w), x);
}

template <class F>
inline void unaryLoop(float* d, int64_t ldd, Src a, int64_t rows, int64_t w, F f) {
  for (int64_t r = 0; r < rows; ++r) {
    float* dr = d + r * ldd;
    const float* ar = a.p + r * a.ld;
    int64_t c = 0;
    if (a.valid >= w) {
      for (; c + 16 <= w; c += 16) _mm512_storeu_ps(dr + c, f(_mm512_loadu_ps(ar + c)));
    }
    for (; c < w; c += 16) storeLanes(dr + c, f(loadPart(ar, c, a.valid)), w - c);
  }
}

void unaryB(RowOp op, float f0, float f1, float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
#define VF_UNARY(expr) unaryLoop(d, ldd, a, rows, w, [&]([[maybe_unused]] __m512 x) { return expr; })
#define VF_HALVES(fn) VF_UNARY(halves(x, [&](__m256 h) { return fn; }))
  switch (op) {
    case RowOp::kPow:
      if (f0 == 2.0f) return VF_UNARY(_mm512_mul_ps(x, x));
      if (f0 == 3.0f) return VF_UNARY(_mm512_mul_ps(_mm512_mul_ps(x, x), x));
      if (f0 == 0.5f) return VF_UNARY(_mm512_sqrt_ps(x));
      if (f0 == -0.5f) return VF_UNARY(_mm512_div_ps(splat(1.0f), _mm512_sqrt_ps(x)));
      if (f0 == -1.0f) return VF_UNARY(_mm512_div_ps(splat(1.0f), x));
      if (f0 == -2.0f) return VF_UNARY(_mm512_div_ps(splat(1.0f), _mm512_mul_ps(x, x)));
      if (f0 == 1.0f) return VF_UNARY(x);
      if (f0 == 0.0f) return VF_UNARY(splat(1.0f));
      for (int64_t r = 0; r < rows; ++r)  // general exponent: powf per element (as exact as libm)
        for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = c < a.valid ? std::pow(a.p[r * a.ld + c], f0) : 1.0f;
      return;
    case RowOp::kNeg: return VF_UNARY(_mm512_xor_ps(x, splat(-0.0f)));
    case RowOp::kAbs: return VF_UNARY(absBits(x));
    case RowOp::kExp: return VF_UNARY(exp(x));
    case RowOp::kLog: return VF_HALVES(v::log(h));
    case RowOp::kSqrt: return VF_UNARY(_mm512_sqrt_ps(x));
    case RowOp::kRsqrt: return VF_UNARY(_mm512_div_ps(splat(1.0f), _mm512_sqrt_ps(x)));
    case RowOp::kReciprocal: return VF_UNARY(_mm512_div_ps(splat(1.0f), x));
    case RowOp::kSquare: return VF_UNARY(_mm512_mul_ps(x, x));
    case RowOp::kRelu: return VF_UNARY(_mm512_max_ps(_mm512_setzero_ps(), x));
    case RowOp::kGeluErf: return VF_HALVES(v::geluErf(h));
    case RowOp::kGeluTanh: return VF_HALVES(v::geluTanh(h));
    case RowOp::kSilu: return VF_UNARY(_mm512_mul_ps(x, sigmoid(x)));
    case RowOp::kSigmoid: return VF_UNARY(sigmoid(x));
    case RowOp::kTanh: return VF_HALVES(v::tanh(h));
    case RowOp::kErf: return VF_HALVES(v::erf(h));
    case RowOp::kClamp: return VF_UNARY(_mm512_min_ps(splat(f1), _mm512_max_ps(splat(f0), x)));
    case RowOp::kLeakyRelu: return VF_HALVES(v::leakyRelu(h, f0));
    case RowOp::kHardswish: return VF_HALVES(v::hardswish(h));
    case RowOp::kHardsigmoid: return VF_HALVES(v::hardsigmoid(h));
    case RowOp::kElu: return VF_HALVES(v::elu(h, f0));
    case RowOp::kCastBf16: return VF_UNARY(roundToBf16(x));
    default: return;
  }
#undef VF_HALVES
#undef VF_UNARY
}

template <RowOp OP>
inline __m512 bin(__m512 x, __m512 y) {
  if constexpr (OP == RowOp::kAdd) return _mm512_add_ps(x, y);
  else if constexpr (OP == RowOp::kSub) return _mm512_sub_ps(x, y);
  else if constexpr (OP == RowOp::kMul) return _mm512_mul_ps(x, y);
  else if constexpr (OP == RowOp::kDiv) return _mm512_div_ps(x, y);
  else if constexpr (OP == RowOp::kMax) return maximum(x, y);
  else return minimum(x, y);
}

/// One row operand: a broadcast register or a pointer (the shape is fixed for the whole row, so
/// the branch per vector is resolved by the predictor).
struct RowOperand {
  const float* p;
  __m512 b;
  int64_t valid;
  bool bcast;
  RowOperand(const Src& s, int64_t r)
      : p(s.bcast ? nullptr : s.p + r * s.ld), b(s.bcast ? splat(s.p[r * s.ld]) : _mm512_setzero_ps()),
        valid(s.valid), bcast(s.bcast) {}
  __m512 at(int64_t c) const { return bcast ? b : loadPart(p, c, valid); }
};

template <RowOp OP>
void binaryLoop(float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowOperand A(a, r), B(b, r);
    float* dr = d + r * ldd;
    int64_t c = 0;
    if (!a.bcast && !b.bcast && std::min(a.valid, b.valid) >= w) {  // the common case, no tails
      for (; c + 16 <= w; c += 16) _mm512_storeu_ps(dr + c, bin<OP>(_mm512_loadu_ps(A.p + c), _mm512_loadu_ps(B.p + c)));
    }
    for (; c < w; c += 16) storeLanes(dr + c, bin<OP>(A.at(c), B.at(c)), w - c);
  }
}

void binaryB(RowOp op, float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w) {
  switch (op) {
    case RowOp::kAdd: return binaryLoop<RowOp::kAdd>(d, ldd, a, b, rows, w);
    case RowOp::kSub: return binaryLoop<RowOp::kSub>(d, ldd, a, b, rows, w);
    case RowOp::kMul: return binaryLoop<RowOp::kMul>(d, ldd, a, b, rows, w);
    case RowOp::kDiv: return binaryLoop<RowOp::kDiv>(d, ldd, a, b, rows, w);
    case RowOp::kMax: return binaryLoop<RowOp::kMax>(d, ldd, a, b, rows, w);
    case RowOp::kMin: return binaryLoop<RowOp::kMin>(d, ldd, a, b, rows, w);
    default: return;
  }
}

template <RowOp O1, RowOp O2>
void binary2Loop(bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowOperand A(a, r), B(b, r), C(c, r);
    float* dr = d + r * ldd;
    for (int64_t k = 0; k < w; k += 16) {
      const __m512 first = bin<O1>(A.at(k), B.at(k));
      storeLanes(dr + k, swap2 ? bin<O2>(C.at(k), first) : bin<O2>(first, C.at(k)), w - k);
    }
  }
}

template <RowOp O1>
void binary2Second(RowOp op2, bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows, int64_t w) {
  switch (op2) {
    case RowOp::kAdd: return binary2Loop<O1, RowOp::kAdd>(swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kSub: return binary2Loop<O1, RowOp::kSub>(swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMul: return binary2Loop<O1, RowOp::kMul>(swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kDiv: return binary2Loop<O1, RowOp::kDiv>(swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMax: return binary2Loop<O1, RowOp::kMax>(swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMin: return binary2Loop<O1, RowOp::kMin>(swap2, d, ldd, a, b, c, rows, w);
    default: return;
  }
}

void binary2B(RowOp op1, RowOp op2, bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows,
              int64_t w) {
  switch (op1) {
    case RowOp::kAdd: return binary2Second<RowOp::kAdd>(op2, swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kSub: return binary2Second<RowOp::kSub>(op2, swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMul: return binary2Second<RowOp::kMul>(op2, swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kDiv: return binary2Second<RowOp::kDiv>(op2, swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMax: return binary2Second<RowOp::kMax>(op2, swap2, d, ldd, a, b, c, rows, w);
    case RowOp::kMin: return binary2Second<RowOp::kMin>(op2, swap2, d, ldd, a, b, c, rows, w);
    default: return;
  }
}

void whereB(float* d, int64_t ldd, Src m, Src a, Src b, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowOperand M(m, r), A(a, r), B(b, r);
    for (int64_t c = 0; c < w; c += 16) {
      const __mmask16 keep = _mm512_cmp_ps_mask(M.at(c), _mm512_setzero_ps(), _CMP_NEQ_UQ);
      storeLanes(d + r * ldd + c, _mm512_mask_blend_ps(keep, B.at(c), A.at(c)), w - c);
    }
  }
}

void copyB(float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowOperand A(a, r);
    for (int64_t c = 0; c < w; c += 16) storeLanes(d + r * ldd + c, A.at(c), w - c);
  }
}

/// The kSum combination of the partial sums [p0 | p1] and [p2 | p3] (the AVX2 table's order).
inline float combine(__m512 p01, __m512 p23) {
  const __m256 s01 = _mm256_add_ps(_mm512_extractf32x8_ps(p01, 0), _mm512_extractf32x8_ps(p01, 1));
  const __m256 s23 = _mm256_add_ps(_mm512_extractf32x8_ps(p23, 0), _mm512_extractf32x8_ps(p23, 1));
  const __m256 s = _mm256_add_ps(s01, s23);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // v0+v4 ...
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                         // (v0+v4)+(v2+v6), ...
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/// The tail of a kSum loop at element i (n - i < 32): chunk k of 8 (k = 0..3) adds into partial sum
/// k with zeros beyond n; a chunk that does not start before n adds nothing (as the AVX2 table).
template <class Load>
inline void sumTail(__m512& p01, __m512& p23, int64_t i, int64_t n, Load load) {
  const int64_t left = n - i;
  if (left <= 0) return;
  const __mmask16 add01 = left > 8 ? 0xFFFF : 0x00FF;
  p01 = _mm512_mask_add_ps(p01, add01, p01, load(i, lanes(left)));
  if (left <= 16) return;
  const __mmask16 add23 = left > 24 ? 0xFFFF : 0x00FF;
  p23 = _mm512_mask_add_ps(p23, add23, p23, load(i + 16, lanes(left - 16)));
}

float reduceProductB(RowOp op, const float* a, const float* b, int64_t n) {
  // NOTE: built with -ffp-contract=off: mul then add, never an FMA, as reduce(mul).
  __m512 p01 = _mm512_setzero_ps(), p23 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    p01 = _mm512_add_ps(p01, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
    p23 = _mm512_add_ps(p23, _mm512_mul_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16)));
  }
  sumTail(p01, p23, i, n, [&](int64_t at, __mmask16 m) {
    return _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + at), _mm512_maskz_loadu_ps(m, b + at));
  });
  const float sum = combine(p01, p23);
  return op == RowOp::kMean ? sum / static_cast<float>(n) : sum;
}

float reduceB(RowOp op, const float* x, int64_t n) {
  if (op == RowOp::kSum || op == RowOp::kMean) {
    __m512 p01 = _mm512_setzero_ps(), p23 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      p01 = _mm512_add_ps(p01, _mm512_loadu_ps(x + i));
      p23 = _mm512_add_ps(p23, _mm512_loadu_ps(x + i + 16));
    }
    sumTail(p01, p23, i, n, [&](int64_t at, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x + at); });
    const float sum = combine(p01, p23);
    return op == RowOp::kMean ? sum / static_cast<float>(n) : sum;
  }
  // rowmax / rowmin keep the AVX2 table's order (which of two equal zeros wins depends on it).
  return avx2Kernels().reduce(op, x, n);
}

void loadB(ElemType t, float* d, const void* src, int64_t n, int64_t padTo) {
  int64_t i = 0;
  switch (t) {
    case ElemType::kF32: {
      const float* s = static_cast<const float*>(src);
      for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_loadu_ps(s + i));
      if (i < n) {
        // Zeros in the rest of the last 8-lane group (the AVX2 table's padding).
        const int64_t w = std::min<int64_t>(16, ((n - i) + 7) & ~int64_t{7});
        storeLanes(d + i, _mm512_maskz_loadu_ps(lanes(n - i), s + i), w);
        i += w;
      }
      break;
    }
    case ElemType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + 16 <= n; i += 16) {
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
        _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
      }
      if (i < n) {
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes(n - i), s + i));
        const int64_t w = std::min<int64_t>(16, ((n - i) + 7) & ~int64_t{7});
        storeLanes(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)), w);
        i += w;
      }
      break;
    }
    case ElemType::kBool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (; i + 16 <= n; i += 16) {
        const __mmask16 nz = _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)), _mm_set1_epi8(-1));
        _mm512_storeu_ps(d + i, _mm512_maskz_mov_ps(nz, splat(1.0f)));
      }
      for (; i < n; ++i) d[i] = s[i] != 0 ? 1.0f : 0.0f;
      break;
    }
  }
  for (; i < padTo; ++i) d[i] = 0.0f;
}

void storeB(ElemType t, void* dst, const float* s, bool bcast, int64_t n) {
  int64_t i = 0;
  const __m512 b = bcast ? splat(*s) : _mm512_setzero_ps();
  if (t == ElemType::kF32) {
    float* o = static_cast<float*>(dst);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, bcast ? b : _mm512_loadu_ps(s + i));
    if (i < n) {
      const __mmask16 m = lanes(n - i);
      _mm512_mask_storeu_ps(o + i, m, bcast ? b : _mm512_maskz_loadu_ps(m, s + i));
    }
  } else {
    uint16_t* o = static_cast<uint16_t*>(dst);
    for (; i + 16 <= n; i += 16) {
      const __m512i bits = toBf16Bits(bcast ? b : _mm512_loadu_ps(s + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm512_cvtepi32_epi16(bits));
    }
    if (i < n) {
      const __mmask16 m = lanes(n - i);
      const __m512i bits = toBf16Bits(bcast ? b : _mm512_maskz_loadu_ps(m, s + i));
      _mm256_mask_storeu_epi16(o + i, m, _mm512_cvtepi32_epi16(bits));
    }
  }
}

void rotateHalfB(float* d, const float* x, int64_t n) { avx2Kernels().rotateHalf(d, x, n); }

/// x[c, c + 16) widened to float, lanes outside \p m zero (never read).
template <bool kBf16>
inline __m512 loadRow(const void* x, int64_t c, __mmask16 m) {
  if constexpr (kBf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(x) + c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(x) + c);
  }
}

/// One NormRow row (rowwise_internal.h): the interpreter's instructions in its order. The sums
/// are reduceB's and reduceProductB's (same partial sums, same tail, same combine); the scalars
/// as the per-row scalar instructions compute them (IEEE add, sqrt and divide, correctly rounded
/// in any width).
template <bool kXBf16>
void normRowT(const NormRow& n, const void* x, void* y, const float* w, const float* b, int64_t C) {
  const __mmask16 all = 0xFFFF;
  float mean = 0.0f;
  if (n.layerNorm) {
    __m512 p01 = _mm512_setzero_ps(), p23 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= C; i += 32) {
      p01 = _mm512_add_ps(p01, loadRow<kXBf16>(x, i, all));
      p23 = _mm512_add_ps(p23, loadRow<kXBf16>(x, i + 16, all));
    }
    sumTail(p01, p23, i, C, [&](int64_t at, __mmask16 m) { return loadRow<kXBf16>(x, at, m); });
    mean = combine(p01, p23) / static_cast<float>(C);
  }
  const __m512 vmean = splat(mean);
  // d = x - mean (layer norm) or x (RMSNorm), zero outside the mask (the tail's padding).
  auto centered = [&](int64_t c, __mmask16 m) {
    const __m512 v = loadRow<kXBf16>(x, c, m);
    return n.layerNorm ? _mm512_maskz_sub_ps(m, v, vmean) : v;
  };
  __m512 q01 = _mm512_setzero_ps(), q23 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= C; i += 32) {
    const __m512 d0 = centered(i, all), d1 = centered(i + 16, all);
    q01 = _mm512_add_ps(q01, _mm512_mul_ps(d0, d0));
    q23 = _mm512_add_ps(q23, _mm512_mul_ps(d1, d1));
  }
  sumTail(q01, q23, i, C, [&](int64_t at, __mmask16 m) {
    const __m512 d = centered(at, m);
    return _mm512_mul_ps(d, d);
  });
  const float var = combine(q01, q23) / static_cast<float>(C);
  const __m512 rstd = splat(1.0f / std::sqrt(var + n.eps));
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = lanes(C - c);
    __m512 v = _mm512_mul_ps(centered(c, m), rstd);
    if (n.castMid) v = roundToBf16(v);
    if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + c));
    if (b) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, b + c));
    if (n.outBf16) {
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + c, m, _mm512_cvtepi32_epi16(toBf16Bits(v)));
    } else {
      if (n.castEnd) v = roundToBf16(v);
      _mm512_mask_storeu_ps(static_cast<float*>(y) + c, m, v);
    }
  }
}

void normRowB(const NormRow& n, const void* x, void* y, const float* w, const float* b, int64_t C) {
  if (n.xBf16) normRowT<true>(n, x, y, w, b, C);
  else normRowT<false>(n, x, y, w, b, C);
}

}  // namespace

const IsaKernels& avx512Kernels() {
  static const IsaKernels k{"avx512", unaryB, binaryB, binary2B, whereB, copyB, reduceB, reduceProductB, rotateHalfB, loadB, storeB, normRowB};
  return k;
}

}  // namespace verifuse::kernels::rowwise::detail
