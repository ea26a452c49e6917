// Applies vecmath_avx2.h functions to arrays for vecmath_test.cpp (built with the AVX2 flags).
#include "cpu/vecmath_avx2.h"

#include "vecmath_eval.h"

#include <cstring>

namespace verifuse::kernels::cpu::testing {

namespace {

__m256 apply(VecFn fn, __m256 x, float p0, float p1) {
  namespace v = avx2;
  switch (fn) {
    case VecFn::kExp: return v::exp(x);
    case VecFn::kExpm1: return v::expm1(x);
    case VecFn::kLog: return v::log(x);
    case VecFn::kErf: return v::erf(x);
    case VecFn::kErfc: return v::erfc(x);
    case VecFn::kTanh: return v::tanh(x);
    case VecFn::kSigmoid: return v::sigmoid(x);
    case VecFn::kSilu: return v::silu(x);
    case VecFn::kGeluErf: return v::geluErf(x);
    case VecFn::kGeluTanh: return v::geluTanh(x);
    case VecFn::kElu: return v::elu(x, p0);
    case VecFn::kSqrt: return v::sqrt(x);
    case VecFn::kRsqrt: return v::rsqrt(x);
    case VecFn::kReciprocal: return v::reciprocal(x);
    case VecFn::kRelu: return v::relu(x);
    case VecFn::kLeakyRelu: return v::leakyRelu(x, p0);
    case VecFn::kClamp: return v::clamp(x, p0, p1);
    case VecFn::kHardswish: return v::hardswish(x);
    case VecFn::kHardsigmoid: return v::hardsigmoid(x);
    case VecFn::kRoundBf16: return v::roundToBf16(x);
  }
  return x;
}

}  // namespace

void evalAvx2(VecFn fn, const float* x, float* y, size_t n, float p0, float p1) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, apply(fn, _mm256_loadu_ps(x + i), p0, p1));
  if (i < n) {
    float in[8] = {}, out[8];
    std::memcpy(in, x + i, (n - i) * sizeof(float));
    _mm256_storeu_ps(out, apply(fn, _mm256_loadu_ps(in), p0, p1));
    std::memcpy(y + i, out, (n - i) * sizeof(float));
  }
}

void maxMinAvx2(bool isMax, const float* a, const float* b, float* y, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    _mm256_storeu_ps(y + i, isMax ? avx2::maximum(va, vb) : avx2::minimum(va, vb));
  }
}

void loadBf16Avx2(const uint16_t* x, float* y, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, avx2::loadBf16(x + i));
}

void storeBf16Avx2(const float* x, uint16_t* y, size_t n) {
  for (size_t i = 0; i + 8 <= n; i += 8) avx2::storeBf16(y + i, _mm256_loadu_ps(x + i));
}

}  // namespace verifuse::kernels::cpu::testing
