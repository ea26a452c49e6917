// The row engine's AVX2+FMA kernels: 8-wide loops over a tile's rows, one loop per instruction
// (the op is chosen once per call, never per element). Math from vecmath_avx2.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/rowwise_internal.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::rowwise::detail {

namespace {

namespace v = cpu::avx2;

/// Lanes [0, n) of a vector are valid (n in 1..8).
inline __m256i tailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// 8 floats at p[c..c+8) of which [0, valid) may be read; zeros beyond.
inline __m256 loadPart(const float* p, int64_t c, int64_t valid) {
  if (c + 8 <= valid) return _mm256_loadu_ps(p + c);
  if (c >= valid) return _mm256_setzero_ps();
  return _mm256_maskload_ps(p + c, tailMask(valid - c));
}

/// Columns [0, full) need no tail handling (full is a multiple of 8).
inline int64_t fullCols(int64_t w, int64_t valid) { return std::min(w, valid) & ~int64_t{7}; }

template <class F>
inline void unaryLoop(float* d, int64_t ldd, Src a, int64_t rows, int64_t w, F f) {
  const int64_t full = fullCols(w, a.valid);
  for (int64_t r = 0; r < rows; ++r) {
    float* dr = d + r * ldd;
    const float* ar = a.p + r * a.ld;
    int64_t c = 0;
    for (; c < full; c += 8) _mm256_storeu_ps(dr + c, f(_mm256_loadu_ps(ar + c)));
    for (; c < w; c += 8) _mm256_storeu_ps(dr + c, f(loadPart(ar, c, a.valid)));
  }
}

void unaryA(RowOp op, float f0, float f1, float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
#define VF_UNARY(expr) unaryLoop(d, ldd, a, rows, w, [&]([[maybe_unused]] __m256 x) { return expr; })
  switch (op) {
    case RowOp::kPow:
      if (f0 == 2.0f) return VF_UNARY(_mm256_mul_ps(x, x));
      if (f0 == 3.0f) return VF_UNARY(_mm256_mul_ps(_mm256_mul_ps(x, x), x));
      if (f0 == 0.5f) return VF_UNARY(v::sqrt(x));
      if (f0 == -0.5f) return VF_UNARY(v::rsqrt(x));
      if (f0 == -1.0f) return VF_UNARY(v::reciprocal(x));
      if (f0 == -2.0f) return VF_UNARY(v::reciprocal(_mm256_mul_ps(x, x)));
      if (f0 == 1.0f) return VF_UNARY(x);
      if (f0 == 0.0f) return VF_UNARY(_mm256_set1_ps(1.0f));
      for (int64_t r = 0; r < rows; ++r)  // general exponent: powf per element (as exact as libm)
        for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = c < a.valid ? std::pow(a.p[r * a.ld + c], f0) : 1.0f;
      return;
    case RowOp::kNeg: return VF_UNARY(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));
    case RowOp::kAbs: return VF_UNARY(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x));
    case RowOp::kExp: return VF_UNARY(v::exp(x));
    case RowOp::kLog: return VF_UNARY(v::log(x));
    case RowOp::kSqrt: return VF_UNARY(v::sqrt(x));
    case RowOp::kRsqrt: return VF_UNARY(v::rsqrt(x));
    case RowOp::kReciprocal: return VF_UNARY(v::reciprocal(x));
    case RowOp::kSquare: return VF_UNARY(_mm256_mul_ps(x, x));
    case RowOp::kRelu: return VF_UNARY(v::relu(x));
    case RowOp::kGeluErf: return VF_UNARY(v::geluErf(x));
    case RowOp::kGeluTanh: return VF_UNARY(v::geluTanh(x));
    case RowOp::kSilu: return VF_UNARY(v::silu(x));
    case RowOp::kSigmoid: return VF_UNARY(v::sigmoid(x));
    case RowOp::kTanh: return VF_UNARY(v::tanh(x));
    case RowOp::kErf: return VF_UNARY(v::erf(x));
    case RowOp::kClamp: return VF_UNARY(v::clamp(x, f0, f1));
    case RowOp::kLeakyRelu: return VF_UNARY(v::leakyRelu(x, f0));
    case RowOp::kHardswish: return VF_UNARY(v::hardswish(x));
    case RowOp::kHardsigmoid: return VF_UNARY(v::hardsigmoid(x));
    case RowOp::kElu: return VF_UNARY(v::elu(x, f0));
    case RowOp::kCastBf16: return VF_UNARY(v::roundToBf16(x));
    default: return;
  }
#undef VF_UNARY
}

/// The three operand shapes of a binary op, chosen once per row.
template <class F>
inline void binaryLoop(float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w, F f) {
  for (int64_t r = 0; r < rows; ++r) {
    float* dr = d + r * ldd;
    if (!a.bcast && !b.bcast) {
      const float* ar = a.p + r * a.ld;
      const float* br = b.p + r * b.ld;
      const int64_t full = fullCols(w, std::min(a.valid, b.valid));
      int64_t c = 0;
      for (; c < full; c += 8) _mm256_storeu_ps(dr + c, f(_mm256_loadu_ps(ar + c), _mm256_loadu_ps(br + c)));
      for (; c < w; c += 8) _mm256_storeu_ps(dr + c, f(loadPart(ar, c, a.valid), loadPart(br, c, b.valid)));
    } else if (a.bcast && !b.bcast) {
      const __m256 va = _mm256_set1_ps(a.p[r * a.ld]);
      const float* br = b.p + r * b.ld;
      const int64_t full = fullCols(w, b.valid);
      int64_t c = 0;
      for (; c < full; c += 8) _mm256_storeu_ps(dr + c, f(va, _mm256_loadu_ps(br + c)));
      for (; c < w; c += 8) _mm256_storeu_ps(dr + c, f(va, loadPart(br, c, b.valid)));
    } else if (!a.bcast) {
      const float* ar = a.p + r * a.ld;
      const __m256 vb = _mm256_set1_ps(b.p[r * b.ld]);
      const int64_t full = fullCols(w, a.valid);
      int64_t c = 0;
      for (; c < full; c += 8) _mm256_storeu_ps(dr + c, f(_mm256_loadu_ps(ar + c), vb));
      for (; c < w; c += 8) _mm256_storeu_ps(dr + c, f(loadPart(ar, c, a.valid), vb));
    } else {
      const __m256 val = f(_mm256_set1_ps(a.p[r * a.ld]), _mm256_set1_ps(b.p[r * b.ld]));
      for (int64_t c = 0; c < w; c += 8) _mm256_storeu_ps(dr + c, val);
    }
  }
}

void binaryA(RowOp op, float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w) {
#define VF_BINARY(expr) binaryLoop(d, ldd, a, b, rows, w, [](__m256 x, __m256 y) { return expr; })
  switch (op) {
    case RowOp::kAdd: return VF_BINARY(_mm256_add_ps(x, y));
    case RowOp::kSub: return VF_BINARY(_mm256_sub_ps(x, y));
    case RowOp::kMul: return VF_BINARY(_mm256_mul_ps(x, y));
    case RowOp::kDiv: return VF_BINARY(_mm256_div_ps(x, y));
    case RowOp::kMax: return VF_BINARY(v::maximum(x, y));
    case RowOp::kMin: return VF_BINARY(v::minimum(x, y));
    default: return;
  }
#undef VF_BINARY
}

inline __m256 loadSrc(const Src& s, int64_t r, int64_t c) {
  return s.bcast ? _mm256_set1_ps(s.p[r * s.ld]) : loadPart(s.p + r * s.ld, c, s.valid);
}

template <RowOp OP>
inline __m256 bin(__m256 x, __m256 y) {
  if constexpr (OP == RowOp::kAdd) return _mm256_add_ps(x, y);
  else if constexpr (OP == RowOp::kSub) return _mm256_sub_ps(x, y);
  else if constexpr (OP == RowOp::kMul) return _mm256_mul_ps(x, y);
  else if constexpr (OP == RowOp::kDiv) return _mm256_div_ps(x, y);
  else if constexpr (OP == RowOp::kMax) return v::maximum(x, y);
  else return v::minimum(x, y);
}

/// One row operand of a fused loop: a broadcast register or a pointer (branch per vector is
/// resolved by the predictor: the shape is fixed for the whole row).
struct RowOperand {
  const float* p;
  __m256 b;
  int64_t valid;
  bool bcast;
  RowOperand(const Src& s, int64_t r)
      : p(s.bcast ? nullptr : s.p + r * s.ld), b(s.bcast ? _mm256_set1_ps(s.p[r * s.ld]) : _mm256_setzero_ps()),
        valid(s.valid), bcast(s.bcast) {}
  __m256 at(int64_t c) const { return bcast ? b : (c + 8 <= valid ? _mm256_loadu_ps(p + c) : loadPart(p, c, valid)); }
};

template <RowOp O1, RowOp O2>
void binary2Loop(bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r) {
    const RowOperand A(a, r), B(b, r), C(c, r);
    float* dr = d + r * ldd;
    if (swap2) {
      for (int64_t k = 0; k < w; k += 8) _mm256_storeu_ps(dr + k, bin<O2>(C.at(k), bin<O1>(A.at(k), B.at(k))));
    } else {
      for (int64_t k = 0; k < w; k += 8) _mm256_storeu_ps(dr + k, bin<O2>(bin<O1>(A.at(k), B.at(k)), C.at(k)));
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

void binary2A(RowOp op1, RowOp op2, bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows,
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

void whereA(float* d, int64_t ldd, Src m, Src a, Src b, int64_t rows, int64_t w) {
  // Not a hot path in transformer graphs beyond the boolean attention mask (one pass): operand
  // shapes are tested per vector, which the branch predictor resolves per row.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; c += 8) {
      __m256 keep = _mm256_cmp_ps(loadSrc(m, r, c), _mm256_setzero_ps(), _CMP_NEQ_UQ);
      _mm256_storeu_ps(d + r * ldd + c, _mm256_blendv_ps(loadSrc(b, r, c), loadSrc(a, r, c), keep));
    }
}

void copyA(float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; c += 8) _mm256_storeu_ps(d + r * ldd + c, loadSrc(a, r, c));
}

/// The kSum combination of the 4 x 8 partial sums.
inline float combine(const __m256 (&p)[4]) {
  __m256 s = _mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3]));
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // v0+v4 ...
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));                                         // (v0+v4)+(v2+v6), ...
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

float reduceProductA(RowOp op, const float* a, const float* b, int64_t n) {
  // NOTE: this file is built with -ffp-contract=off: mul then add, never an FMA, as reduce(mul).
  __m256 p[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k)
      p[k] = _mm256_add_ps(p[k], _mm256_mul_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k)));
  for (int k = 0; i < n; i += 8, ++k)
    p[k] = _mm256_add_ps(p[k], _mm256_mul_ps(loadPart(a, i, n), loadPart(b, i, n)));
  const float sum = combine(p);
  return op == RowOp::kMean ? sum / static_cast<float>(n) : sum;
}

float reduceA(RowOp op, const float* x, int64_t n) {
  if (op == RowOp::kSum || op == RowOp::kMean) {
    // Partial sum (i/8)%4, lane i%8 (see RowOp::kSum); the scalar kernel does the same.
    __m256 p[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      p[0] = _mm256_add_ps(p[0], _mm256_loadu_ps(x + i));
      p[1] = _mm256_add_ps(p[1], _mm256_loadu_ps(x + i + 8));
      p[2] = _mm256_add_ps(p[2], _mm256_loadu_ps(x + i + 16));
      p[3] = _mm256_add_ps(p[3], _mm256_loadu_ps(x + i + 24));
    }
    for (int k = 0; i < n; i += 8, ++k) {
      __m256 t = n - i >= 8 ? _mm256_loadu_ps(x + i) : _mm256_maskload_ps(x + i, tailMask(n - i));
      p[k] = _mm256_add_ps(p[k], t);
    }
    const float sum = combine(p);
    return op == RowOp::kMean ? sum / static_cast<float>(n) : sum;
  }
  const bool isMax = op == RowOp::kRowMax;
  const __m256 fill = _mm256_set1_ps(isMax ? -INFINITY : INFINITY);
  __m256 m = fill;
  for (int64_t i = 0; i < n; i += 8) {
    __m256 t = n - i >= 8 ? _mm256_loadu_ps(x + i) : _mm256_blendv_ps(fill, _mm256_maskload_ps(x + i, tailMask(n - i)), _mm256_castsi256_ps(tailMask(n - i)));
    m = isMax ? v::maximum(m, t) : v::minimum(m, t);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float r = lanes[0];
  for (int l = 1; l < 8; ++l) r = scalarBinary(isMax ? RowOp::kMax : RowOp::kMin, r, lanes[l]);
  return r;
}

void rotateHalfA(float* d, const float* x, int64_t n) {
  const int64_t h = n / 2;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= h; i += 8) {
    _mm256_storeu_ps(d + i, _mm256_xor_ps(_mm256_loadu_ps(x + h + i), sign));
    _mm256_storeu_ps(d + h + i, _mm256_loadu_ps(x + i));
  }
  for (; i < h; ++i) {
    d[i] = -x[h + i];
    d[h + i] = x[i];
  }
}

void loadA(ElemType t, float* d, const void* src, int64_t n, int64_t padTo) {
  int64_t i = 0;
  switch (t) {
    case ElemType::kF32: {
      const float* s = static_cast<const float*>(src);
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(s + i));
      if (i < n) {
        _mm256_storeu_ps(d + i, _mm256_maskload_ps(s + i, tailMask(n - i)));  // zeros in the rest
        i += 8;
      }
      break;
    }
    case ElemType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, v::loadBf16(s + i));
      for (; i < n; ++i) d[i] = bf16ToFloat(s[i]);
      break;
    }
    case ElemType::kBool: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (; i + 8 <= n; i += 8) {
        int64_t bytes;
        std::memcpy(&bytes, s + i, 8);
        __m256i w = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes));
        __m256 nz = _mm256_castsi256_ps(_mm256_cmpgt_epi32(w, _mm256_setzero_si256()));
        _mm256_storeu_ps(d + i, _mm256_and_ps(nz, _mm256_set1_ps(1.0f)));
      }
      for (; i < n; ++i) d[i] = s[i] != 0 ? 1.0f : 0.0f;
      break;
    }
  }
  for (; i < padTo; ++i) d[i] = 0.0f;
}

void storeA(ElemType t, void* dst, const float* s, bool bcast, int64_t n) {
  int64_t i = 0;
  const __m256 b = bcast ? _mm256_set1_ps(*s) : _mm256_setzero_ps();
  if (t == ElemType::kF32) {
    float* o = static_cast<float*>(dst);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, bcast ? b : _mm256_loadu_ps(s + i));
    if (i < n) {
      __m256i m = tailMask(n - i);
      _mm256_maskstore_ps(o + i, m, bcast ? b : _mm256_maskload_ps(s + i, m));
    }
  } else {
    uint16_t* o = static_cast<uint16_t*>(dst);
    for (; i + 8 <= n; i += 8) v::storeBf16(o + i, bcast ? b : _mm256_loadu_ps(s + i));
    for (; i < n; ++i) o[i] = floatToBf16(bcast ? *s : s[i]);
  }
}

}  // namespace

const IsaKernels& avx2Kernels() {
  static const IsaKernels k{"avx2", unaryA, binaryA, binary2A, whereA, copyA, reduceA, reduceProductA, rotateHalfA, loadA, storeA, nullptr};
  return k;
}

}  // namespace verifuse::kernels::rowwise::detail
