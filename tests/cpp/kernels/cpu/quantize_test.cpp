// quantize_per_tensor's kernel (verifuse/kernels/quantize.h) against a reference written here from
// torch's composition clamp(round(x * (1/scale)) + zero_point, qmin, qmax), round half to even:
// the scalar loop and the AVX-512 variant must give the same codes bit for bit, at ties, at the
// range ends, for +-inf, huge values and NaN (code 0, as torch's conversion gives), and for every
// length around the 16-lane step (the masked tail).
#include "verifuse/kernels/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verifuse/kernels/cpu_features.h"
#include "tier_skip.h"

namespace verifuse::kernels {
namespace {

/// Round half to even without the FPU's rounding mode: floor, then the tie rule spelled out.
float roundHalfEven(float t) {
  const double f = std::floor(static_cast<double>(t)), d = static_cast<double>(t) - f;
  if (d > 0.5) return static_cast<float>(f + 1);
  if (d < 0.5) return static_cast<float>(f);
  return std::fmod(f, 2.0) == 0 ? static_cast<float>(f) : static_cast<float>(f + 1);
}

int reference(float x, const QuantizeParams& p) {
  const float t = x * p.invScale;  // one float32 product, as torch
  if (std::isnan(t)) return 0;
  if (std::isinf(t)) return t > 0 ? static_cast<int>(p.qmax) : static_cast<int>(p.qmin);
  const float v = roundHalfEven(t) + p.zeroPoint;
  return static_cast<int>(std::fmin(std::fmax(v, p.qmin), p.qmax));
}

std::vector<float> inputs(float scale) {
  std::vector<float> x;
  for (int k = -300; k < 300; ++k) {
    x.push_back(static_cast<float>(k) * scale);
    x.push_back((static_cast<float>(k) + 0.5f) * scale);  // ties (where the float32 product is exact)
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {inf, -inf, 1e30f, -1e30f, std::numeric_limits<float>::quiet_NaN(), 0.f, -0.f}) x.push_back(v);
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.f, 10.f);
  for (int k = 0; k < 1000; ++k) x.push_back(n(rng));
  return x;
}

std::vector<int> run(void (*fn)(const float*, int64_t, const QuantizeParams&, void*), const std::vector<float>& x,
                     int64_t n, const QuantizeParams& p) {
  std::vector<uint8_t> out(static_cast<size_t>(n) + 16, 0xAB);  // guard bytes past the end
  fn(x.data(), n, p, out.data());
  for (size_t k = static_cast<size_t>(n); k < out.size(); ++k) EXPECT_EQ(out[k], 0xAB) << "wrote past element " << n;
  std::vector<int> codes;
  for (int64_t k = 0; k < n; ++k) {
    codes.push_back(p.u8 ? out[static_cast<size_t>(k)] : static_cast<int8_t>(out[static_cast<size_t>(k)]));
  }
  return codes;
}

struct Case {
  float scale;
  int zeroPoint, qmin, qmax;
  bool u8;
};

class QuantizeKernel : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeKernel, ScalarAndAvx512MatchTorchsComposition) {
  const Case c = GetParam();
  QuantizeParams p;
  p.invScale = static_cast<float>(1.0 / c.scale);
  p.zeroPoint = static_cast<float>(c.zeroPoint);
  p.qmin = static_cast<float>(c.qmin);
  p.qmax = static_cast<float>(c.qmax);
  p.u8 = c.u8;
  const std::vector<float> x = inputs(c.scale);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<int> want;
  for (float v : x) want.push_back(reference(v, p));
  EXPECT_EQ(run(detail::quantizeF32Scalar, x, n, p), want);
  EXPECT_EQ(run(quantizeF32, x, n, p), want);
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512 (the vector variant)");
  EXPECT_EQ(run(detail::quantizeF32Avx512, x, n, p), want);
  for (int64_t len = 0; len <= 40; ++len) {  // every tail length, from the start of the input
    std::vector<int> prefix(want.begin(), want.begin() + len);
    EXPECT_EQ(run(detail::quantizeF32Avx512, x, len, p), prefix) << "length " << len;
  }
  // The NaN and infinities inside a full 16-lane step (not only in the tail).
  std::vector<float> special(x.end() - 1007, x.end() - 1000);
  special.resize(32, 1.5f * c.scale);
  std::vector<int> specialWant;
  for (float v : special) specialWant.push_back(reference(v, p));
  EXPECT_EQ(run(detail::quantizeF32Avx512, special, 32, p), specialWant);
}

INSTANTIATE_TEST_SUITE_P(Ranges, QuantizeKernel,
                         ::testing::Values(Case{0.05f, 7, 0, 255, true}, Case{0.1f, -3, -128, 127, false},
                                           Case{0.02f, 0, 0, 127, true}, Case{1.f, 128, 0, 255, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.u8 ? "u8_" : "s8_") + std::to_string(info.index);
                         });

}  // namespace
}  // namespace verifuse::kernels
