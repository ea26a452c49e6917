// The row engine's scalar kernels (baseline ISA): the fallback on CPUs without AVX2 and the tests'
// oracle. Transcendental functions are evaluated in double and rounded once (correctly rounded in
// practice); arithmetic, comparisons, casts, the summation order and torch's special cases are the
// same as the AVX2 kernels, so the two differ only by the few-ulp error of vecmath_avx2.h.
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/rowwise_internal.h"

namespace verifuse::kernels::rowwise::detail {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double sigmoidD(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

float powScalar(float x, float p) {
  if (p == 2.0f) return x * x;
  if (p == 3.0f) return x * x * x;
  if (p == 0.5f) return std::sqrt(x);
  if (p == -0.5f) return 1.0f / std::sqrt(x);
  if (p == -1.0f) return 1.0f / x;
  if (p == -2.0f) return 1.0f / (x * x);
  if (p == 1.0f) return x;
  if (p == 0.0f) return 1.0f;
  return std::pow(x, p);
}

float load1(ElemType t, const void* src, int64_t i) {
  switch (t) {
    case ElemType::kF32: return static_cast<const float*>(src)[i];
    case ElemType::kBF16: return bf16ToFloat(static_cast<const uint16_t*>(src)[i]);
    case ElemType::kBool: return static_cast<const uint8_t*>(src)[i] != 0 ? 1.0f : 0.0f;
  }
  return 0.0f;
}

}  // namespace

float scalarUnary(RowOp op, float f0, float f1, float x) {
  const double d = x;
  switch (op) {
    case RowOp::kPow: return powScalar(x, f0);
    case RowOp::kNeg: return -x;
    case RowOp::kAbs: return std::fabs(x);
    case RowOp::kExp: return static_cast<float>(std::exp(d));
    case RowOp::kLog: return static_cast<float>(std::log(d));
    case RowOp::kSqrt: return std::sqrt(x);
    case RowOp::kRsqrt: return 1.0f / std::sqrt(x);
    case RowOp::kReciprocal: return 1.0f / x;
    case RowOp::kSquare: return x * x;
    case RowOp::kRelu: return x < 0.0f ? 0.0f : x;
    case RowOp::kGeluErf: return static_cast<float>(0.5 * d * std::erfc(-d * M_SQRT1_2));
    case RowOp::kGeluTanh: {
      if (std::isnan(d)) return x;
      // Beyond +-12 the result is x or (-)0 in float; +-inf stay unclamped so that -inf gives
      // -inf * 0 = NaN, as torch.
      double xc = std::isinf(d) ? d : std::fmin(12.0, std::fmax(-12.0, d));
      double u2 = 2.0 * std::sqrt(2.0 / M_PI) * (xc + 0.044715 * xc * xc * xc);
      return static_cast<float>(d * sigmoidD(u2));
    }
    case RowOp::kSilu: return static_cast<float>(d * sigmoidD(d));
    case RowOp::kSigmoid: return static_cast<float>(sigmoidD(d));
    case RowOp::kTanh: return static_cast<float>(std::tanh(d));
    case RowOp::kErf: return static_cast<float>(std::erf(d));
    case RowOp::kClamp: {
      float y = x < f0 ? f0 : x;
      return y > f1 ? f1 : y;
    }
    case RowOp::kLeakyRelu: return x > 0.0f ? x : x * f0;
    case RowOp::kHardswish:
    case RowOp::kHardsigmoid: {
      float r6 = x + 3.0f;
      r6 = r6 < 0.0f ? 0.0f : r6;
      r6 = r6 > 6.0f ? 6.0f : r6;
      return op == RowOp::kHardswish ? x * r6 / 6.0f : r6 / 6.0f;
    }
    case RowOp::kElu: return x > 0.0f || std::isnan(x) ? x : static_cast<float>(std::expm1(d)) * f0;
    case RowOp::kCastBf16: return bf16ToFloat(floatToBf16(x));
    default: return kNaN;
  }
}

float scalarBinary(RowOp op, float a, float b) {
  switch (op) {
    case RowOp::kAdd: return a + b;
    case RowOp::kSub: return a - b;
    case RowOp::kMul: return a * b;
    case RowOp::kDiv: return a / b;
    case RowOp::kMax: return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b);
    case RowOp::kMin: return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b);
    default: return kNaN;
  }
}

namespace {

inline float at(const Src& s, int64_t r, int64_t c) {
  if (s.bcast) return s.p[r * s.ld];
  return c < s.valid ? s.p[r * s.ld + c] : 0.0f;
}

void unaryS(RowOp op, float f0, float f1, float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = scalarUnary(op, f0, f1, at(a, r, c));
}

void binaryS(RowOp op, float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = scalarBinary(op, at(a, r, c), at(b, r, c));
}

void binary2S(RowOp op1, RowOp op2, bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows,
              int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < w; ++k) {
      const float t = scalarBinary(op1, at(a, r, k), at(b, r, k));
      d[r * ldd + k] = swap2 ? scalarBinary(op2, at(c, r, k), t) : scalarBinary(op2, t, at(c, r, k));
    }
}

void whereS(float* d, int64_t ldd, Src m, Src a, Src b, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = at(m, r, c) != 0.0f ? at(a, r, c) : at(b, r, c);
}

void copyS(float* d, int64_t ldd, Src a, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) d[r * ldd + c] = at(a, r, c);
}

float reduceS(RowOp op, const float* x, int64_t n) {
  if (op == RowOp::kSum || op == RowOp::kMean) {
    float p[4][8] = {};
    for (int64_t i = 0; i < n; ++i) p[(i / 8) % 4][i % 8] += x[i];
    float v[8];
    for (int l = 0; l < 8; ++l) v[l] = (p[0][l] + p[1][l]) + (p[2][l] + p[3][l]);
    float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    return op == RowOp::kMean ? s / static_cast<float>(n) : s;
  }
  const bool isMax = op == RowOp::kRowMax;
  float m = isMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = scalarBinary(isMax ? RowOp::kMax : RowOp::kMin, m, x[i]);
  return m;
}

float reduceProductS(RowOp op, const float* a, const float* b, int64_t n) {
  float p[4][8] = {};
  for (int64_t i = 0; i < n; ++i) p[(i / 8) % 4][i % 8] += a[i] * b[i];
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = (p[0][l] + p[1][l]) + (p[2][l] + p[3][l]);
  float s = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
  return op == RowOp::kMean ? s / static_cast<float>(n) : s;
}

void rotateHalfS(float* d, const float* x, int64_t n) {
  const int64_t h = n / 2;
  for (int64_t i = 0; i < h; ++i) {
    d[i] = -x[i + h];
    d[i + h] = x[i];
  }
}

void loadS(ElemType t, float* d, const void* src, int64_t n, int64_t padTo) {
  if (t == ElemType::kF32) {
    std::memcpy(d, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = load1(t, src, i);
  }
  for (int64_t i = n; i < padTo; ++i) d[i] = 0.0f;
}

void storeS(ElemType t, void* dst, const float* s, bool bcast, int64_t n) {
  if (t == ElemType::kF32) {
    float* o = static_cast<float*>(dst);
    if (bcast) {
      for (int64_t i = 0; i < n; ++i) o[i] = *s;
    } else {
      std::memcpy(o, s, static_cast<size_t>(n) * sizeof(float));
    }
  } else {
    uint16_t* o = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) o[i] = floatToBf16(bcast ? *s : s[i]);
  }
}

}  // namespace

const IsaKernels& scalarKernels() {
  static const IsaKernels k{"scalar", unaryS, binaryS, binary2S, whereS, copyS, reduceS, reduceProductS, rotateHalfS, loadS, storeS, nullptr};
  return k;
}

}  // namespace verifuse::kernels::rowwise::detail
