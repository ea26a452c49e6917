// Test-only bridge to vecmath_avx2.h: the AVX2 functions applied to arrays, compiled in
// vecmath_eval_avx2.cpp (AVX2 flags) so the test bodies stay baseline code that can skip.
#pragma once

#include <cstddef>
#include <cstdint>

namespace verifuse::kernels::cpu::testing {

enum class VecFn {
  kExp, kExpm1, kLog, kErf, kErfc, kTanh, kSigmoid, kSilu, kGeluErf, kGeluTanh, kElu, kSqrt, kRsqrt,
  kReciprocal, kRelu, kLeakyRelu, kClamp, kHardswish, kHardsigmoid, kRoundBf16,
  kGeluErfForBf16, kGeluTanhForBf16, kExpForBf16Probabilities,  // AVX-512 only (evalAvx512)
};

/// y[i] = fn(x[i]; p0, p1) for i < n (any n; the tail goes through a padded vector).
void evalAvx2(VecFn fn, const float* x, float* y, size_t n, float p0 = 0.0f, float p1 = 0.0f);
/// The same with vecmath_avx512.h (GELU erf and its bf16-epilogue form; any other fn runs evalAvx2).
/// Only after cpu::hasAvx512().
void evalAvx512(VecFn fn, const float* x, float* y, size_t n);
/// y[i] = maximum(a[i], b[i]) (or minimum), torch semantics.
void maxMinAvx2(bool isMax, const float* a, const float* b, float* y, size_t n);
/// bf16 bits -> float and float -> bf16 bits, n a multiple of 8.
void loadBf16Avx2(const uint16_t* x, float* y, size_t n);
void storeBf16Avx2(const float* x, uint16_t* y, size_t n);

}  // namespace verifuse::kernels::cpu::testing
