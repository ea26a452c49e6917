// vecmath_avx2.h against double-precision references: max ulp error over sweeps of the whole float
// range (every 4096th bit pattern, both signs) plus dense sweeps where the formulas switch, and
// eager PyTorch's edge cases (NaN, +-inf, -0, overflow / underflow, saturation).
#include "vecmath_eval.h"

#include "verifuse/kernels/cpu_features.h"
#include "tier_skip.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace verifuse::kernels::cpu::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kMax = std::numeric_limits<float>::max();
constexpr float kDenorm = std::numeric_limits<float>::denorm_min();

#define SKIP_WITHOUT_AVX2() \
  if (!hasAvx2Fma()) VF_CPU_SKIP("AVX2+FMA+F16C")

/// Every `stride`-th float bit pattern (both signs), without NaNs, plus dense linear sweeps.
std::vector<float> inputs(uint32_t stride, std::initializer_list<std::pair<float, float>> dense = {},
                          int densePoints = 20000) {
  std::vector<float> xs;
  for (uint64_t b = 0; b < (1ull << 32); b += stride) {
    float x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (!std::isnan(x)) xs.push_back(x);
  }
  for (auto [lo, hi] : dense)
    for (int i = 0; i <= densePoints; ++i) xs.push_back(lo + (hi - lo) * static_cast<float>(i) / densePoints);
  for (float x : {0.0f, -0.0f, kDenorm, -kDenorm, 1e-30f, -1e-30f, kMax, -kMax, kInf, -kInf}) xs.push_back(x);
  return xs;
}

/// |got - ref| in units of the float spacing at |ref| (2^-149 below the normal range); a
/// mismatch in inf/NaN-ness counts as infinite error.
double ulpError(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0.0 : kInf;
  float rf = static_cast<float>(ref);
  if (std::isinf(rf)) return got == rf ? 0.0 : kInf;
  if (!std::isfinite(got)) return kInf;
  int e = ref == 0.0 ? -126 : std::max(std::ilogb(ref), -126);
  return std::fabs(static_cast<double>(got) - ref) / std::ldexp(1.0, e - 23);
}

struct Worst {
  double ulp = 0;
  float x = 0;
  float got = 0;
  double ref = 0;
};

/// Absolute error allowed on top of the ulp bound: x * f(x) with f(x) below the normal range has
/// f rounded to a multiple of 2^-149 (silu, GELU in their far negative tails).
using Slack = std::function<double(double)>;
const Slack kNoSlack = [](double) { return 0.0; };
const Slack kDenormalFactor = [](double x) { return std::fabs(x) * 0x1p-149; };

Worst measure(VecFn fn, const std::function<double(double)>& ref, const std::vector<float>& xs, float p0 = 0,
              float p1 = 0, const Slack& slack = kNoSlack) {
  std::vector<float> ys(xs.size());
  evalAvx2(fn, xs.data(), ys.data(), xs.size(), p0, p1);
  Worst w;
  for (size_t i = 0; i < xs.size(); ++i) {
    double r = ref(static_cast<double>(xs[i]));
    double u = ulpError(ys[i], r);
    if (std::isfinite(u) && u > 0) {
      double s = slack(xs[i]);
      u *= std::max(0.0, 1.0 - s / std::fabs(static_cast<double>(ys[i]) - r));
    }
    if (u > w.ulp || std::isnan(u)) w = {u, xs[i], ys[i], r};
  }
  return w;
}

std::string describe(const Worst& w) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "max %.3f ulp at x=%.9g (%a): got %.9g, want %.17g", w.ulp, w.x, w.x, w.got, w.ref);
  return buf;
}

#define EXPECT_ULP(fn, ref, xs, bound, ...)                      \
  do {                                                           \
    Worst w_ = measure(fn, ref, xs, ##__VA_ARGS__);              \
    EXPECT_LE(w_.ulp, bound) << #fn << ": " << describe(w_);     \
    std::printf("  %-22s %s\n", #fn, describe(w_).c_str());      \
  } while (0)

float eval1(VecFn fn, float x, float p0 = 0, float p1 = 0) {
  float y;
  evalAvx2(fn, &x, &y, 1, p0, p1);
  return y;
}

/// Bitwise equality (NaN matches any NaN).
::testing::AssertionResult same(float got, float want) {
  if (std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << " (" << std::hexfloat << got << "), want " << want;
}

double sigmoidRef(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
double geluErfRef(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
double geluTanhRef(double x) {
  double u2 = 2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x * sigmoidRef(u2);
}

TEST(Vecmath, Exp) {
  SKIP_WITHOUT_AVX2();
  EXPECT_ULP(VecFn::kExp, [](double x) { return std::exp(x); }, inputs(4096, {{-104.0f, -86.0f}, {-1.0f, 1.0f}, {86.0f, 89.0f}}), 1.0);
  EXPECT_TRUE(same(eval1(VecFn::kExp, -kInf), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kExp, kInf), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kExp, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kExp, -0.0f), 1.0f));
  EXPECT_TRUE(same(eval1(VecFn::kExp, std::bit_cast<float>(0x42B17218u)), kInf));   // just above ln(FLT_MAX)
  EXPECT_TRUE(std::isfinite(eval1(VecFn::kExp, std::bit_cast<float>(0x42B17217u))));  // just below
  EXPECT_TRUE(same(eval1(VecFn::kExp, -104.0f), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kExp, -1000.0f), 0.0f));
  EXPECT_GT(eval1(VecFn::kExp, -100.0f), 0.0f);  // denormal, not flushed (torch: 3.7835e-44)
}

// The attention row step's exp for bf16 probabilities: within 2^-17 relative of exp on [-87, 0]
// (the row max's own score gives ~1), masked keys (-inf) and far-below scores weigh 0 or a
// denormal, NaN stays NaN; and it is a different function from the float32 exp (which the float32
// row step keeps).
TEST(Vecmath, ExpForBf16Probabilities) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  std::vector<float> xs;
  for (auto v : inputs(4096, {{-87.0f, 0.0f}, {-1.0f, 0.0f}, {-0.01f, 0.0f}})) {
    if (std::isfinite(v) && v <= 0.0f && v >= -87.0f) xs.push_back(v);
  }
  ASSERT_GT(xs.size(), 10000u);
  std::vector<float> got(xs.size()), accurate(xs.size());
  evalAvx512(VecFn::kExpForBf16Probabilities, xs.data(), got.data(), xs.size());
  evalAvx512(VecFn::kExp, xs.data(), accurate.data(), xs.size());
  double worst = 0;
  int differs = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(static_cast<double>(xs[i]));
    const double rel = std::fabs(got[i] - want) / want;
    worst = std::max(worst, rel);
    ASSERT_LE(rel, std::ldexp(1.0, -17)) << "x=" << xs[i] << " got " << got[i] << " want " << want;
    differs += got[i] != accurate[i];
  }
  EXPECT_GT(differs, 100);
  std::printf("  expForBf16Probabilities: max relative error %.3g\n", worst);
  float specials[] = {-kInf, kNaN, -0.0f, -104.0f, -1000.0f}, out[5];
  evalAvx512(VecFn::kExpForBf16Probabilities, specials, out, 5);
  EXPECT_LT(out[0], 1e-44f);
  EXPECT_GE(out[0], 0.0f);
  EXPECT_TRUE(same(out[1], kNaN));
  EXPECT_NEAR(out[2], 1.0f, 1e-6f);
  EXPECT_LT(out[3], 1e-44f);
  EXPECT_LT(out[4], 1e-44f);
}

TEST(Vecmath, Expm1) {
  SKIP_WITHOUT_AVX2();
  EXPECT_ULP(VecFn::kExpm1, [](double x) { return std::expm1(x); }, inputs(4096, {{-1.0f, 1.0f}, {-0.01f, 0.01f}, {16.0f, 18.0f}}), 1.5);
  EXPECT_TRUE(same(eval1(VecFn::kExpm1, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kExpm1, -kInf), -1.0f));
  EXPECT_TRUE(same(eval1(VecFn::kExpm1, kInf), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kExpm1, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kExpm1, 89.0f), kInf));
}

TEST(Vecmath, Log) {
  SKIP_WITHOUT_AVX2();
  EXPECT_ULP(VecFn::kLog, [](double x) { return std::log(x); }, inputs(4096, {{0.5f, 2.0f}, {0.99f, 1.01f}}), 1.5);
  EXPECT_TRUE(same(eval1(VecFn::kLog, 0.0f), -kInf));
  EXPECT_TRUE(same(eval1(VecFn::kLog, -0.0f), -kInf));
  EXPECT_TRUE(same(eval1(VecFn::kLog, -1.0f), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kLog, -kInf), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kLog, kInf), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kLog, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kLog, 1.0f), 0.0f));
  EXPECT_NEAR(eval1(VecFn::kLog, kDenorm), std::log(static_cast<double>(kDenorm)), 1e-5);
}

TEST(Vecmath, ErfAndErfc) {
  SKIP_WITHOUT_AVX2();
  auto xs = inputs(4096, {{-5.0f, 5.0f}, {0.4f, 1.0f}, {-1.0f, -0.4f}, {9.0f, 10.5f}});
  EXPECT_ULP(VecFn::kErf, [](double x) { return std::erf(x); }, xs, 1.5);
  EXPECT_ULP(VecFn::kErfc, [](double x) { return std::erfc(x); }, xs, 3.5);
  for (float s : {1.0f, -1.0f}) {
    EXPECT_TRUE(same(eval1(VecFn::kErf, s * kInf), s));
    EXPECT_TRUE(same(eval1(VecFn::kErf, s * 4.0f), s));  // saturated
    EXPECT_TRUE(same(eval1(VecFn::kErf, s * kMax), s));
  }
  EXPECT_TRUE(same(eval1(VecFn::kErf, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kErf, 0.0f), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kErf, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kErfc, kInf), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kErfc, -kInf), 2.0f));
  EXPECT_TRUE(same(eval1(VecFn::kErfc, kNaN), kNaN));
}

TEST(Vecmath, Tanh) {
  SKIP_WITHOUT_AVX2();
  EXPECT_ULP(VecFn::kTanh, [](double x) { return std::tanh(x); }, inputs(4096, {{-2.0f, 2.0f}, {0.5f, 0.75f}, {8.5f, 9.5f}}), 2.0);
  for (float s : {1.0f, -1.0f}) {
    EXPECT_TRUE(same(eval1(VecFn::kTanh, s * kInf), s));
    EXPECT_TRUE(same(eval1(VecFn::kTanh, s * 20.0f), s));
  }
  EXPECT_TRUE(same(eval1(VecFn::kTanh, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kTanh, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kTanh, -kDenorm), -kDenorm));
}

TEST(Vecmath, SigmoidAndSilu) {
  SKIP_WITHOUT_AVX2();
  auto xs = inputs(4096, {{-20.0f, 20.0f}, {-104.0f, -85.0f}});
  EXPECT_ULP(VecFn::kSigmoid, sigmoidRef, xs, 2.0);
  EXPECT_ULP(VecFn::kSilu, [](double x) { return x * sigmoidRef(x); }, xs, 3.5, 0.0f, 0.0f, kDenormalFactor);
  EXPECT_TRUE(same(eval1(VecFn::kSigmoid, -kInf), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSigmoid, kInf), 1.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSigmoid, -0.0f), 0.5f));
  EXPECT_TRUE(same(eval1(VecFn::kSigmoid, kNaN), kNaN));
  EXPECT_TRUE(same(eval1(VecFn::kSilu, -kInf), kNaN));  // torch: -inf / (1 + inf) = NaN
  EXPECT_TRUE(same(eval1(VecFn::kSilu, kInf), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kSilu, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSilu, -200.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSilu, kNaN), kNaN));
}

TEST(Vecmath, Gelu) {
  SKIP_WITHOUT_AVX2();
  auto xs = inputs(4096, {{-15.0f, 15.0f}, {-1.5f, 1.5f}});
  EXPECT_ULP(VecFn::kGeluErf, geluErfRef, xs, 4.5, 0.0f, 0.0f, kDenormalFactor);
  EXPECT_ULP(VecFn::kGeluTanh, geluTanhRef, xs, 3.5, 0.0f, 0.0f, kDenormalFactor);
  std::vector<float> pos;
  for (float x : xs)
    if (x >= 0) pos.push_back(x);
  EXPECT_ULP(VecFn::kGeluErf, geluErfRef, pos, 2.0);
  EXPECT_ULP(VecFn::kGeluTanh, geluTanhRef, pos, 2.5);
  for (VecFn fn : {VecFn::kGeluErf, VecFn::kGeluTanh}) {
    EXPECT_TRUE(same(eval1(fn, -kInf), kNaN));  // torch: -inf * 0
    EXPECT_TRUE(same(eval1(fn, kInf), kInf));
    EXPECT_TRUE(same(eval1(fn, kNaN), kNaN));
    EXPECT_TRUE(same(eval1(fn, -0.0f), -0.0f));
    EXPECT_TRUE(same(eval1(fn, 0.0f), 0.0f));
    EXPECT_TRUE(same(eval1(fn, 100.0f), 100.0f));
    EXPECT_TRUE(same(eval1(fn, kMax), kMax));
    EXPECT_EQ(eval1(fn, -100.0f), 0.0f);
  }
  // The two approximations differ (catches one silently standing in for the other).
  EXPECT_GT(std::fabs(eval1(VecFn::kGeluErf, 1.0f) - eval1(VecFn::kGeluTanh, 1.0f)), 1e-5f);
}

// The 16-lane GELU of the AVX-512 GEMM epilogue: the same bounds and edge cases, and within two
// ulp of the 8-lane one everywhere (they differ only by the reciprocal estimate's precision).
TEST(Vecmath, Avx512ExpScalesLikeTheTwoStepPowerOfTwo) {
  // vecmath_avx512.h's expClamped (the GEMM epilogues', the row engine's and the attention row
  // step's exp) scales p by 2^n with one vscalefps; vecmath_avx2.h multiplies
  // by two normal powers of two. Both round once, so every result must be the same bits: every
  // 61st float bit pattern (all signs, exponents, NaN and inf), denormal results and overflow included.
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  const size_t chunk = 1 << 20;
  std::vector<float> x(chunk), a(chunk), b(chunk);
  uint64_t pattern = 0, checked = 0;
  while (pattern < (uint64_t{1} << 32)) {
    size_t n = 0;
    for (; n < chunk && pattern < (uint64_t{1} << 32); ++n, pattern += 61) {
      const uint32_t u = static_cast<uint32_t>(pattern);
      std::memcpy(&x[n], &u, 4);
    }
    evalAvx2(VecFn::kExp, x.data(), a.data(), n);
    evalAvx512(VecFn::kExp, x.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << "exp(" << x[i] << ")";
    }
    checked += n;
  }
  EXPECT_GT(checked, uint64_t{70000000});
}

TEST(Vecmath, GeluErfAvx512) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  auto xs = inputs(4096, {{-15.0f, 15.0f}, {-1.5f, 1.5f}});
  std::vector<float> wide(xs.size()), narrow(xs.size());
  evalAvx512(VecFn::kGeluErf, xs.data(), wide.data(), xs.size());
  evalAvx2(VecFn::kGeluErf, xs.data(), narrow.data(), xs.size());
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = geluErfRef(xs[i]);
    double u = ulpError(wide[i], want);
    if (std::isfinite(u) && u > 0) {  // measure()'s denormal slack
      u *= std::max(0.0, 1.0 - kDenormalFactor(xs[i]) / std::fabs(static_cast<double>(wide[i]) - want));
    }
    worst = std::max(worst, u);
    if (same(wide[i], narrow[i])) continue;  // (inf, NaN included)
    // 4 ulp, plus the denormal slack of the far negative tail (x times a subnormal Phi(x)). The
    // two forms refine different reciprocal estimates (rcpps here, vrcp14ps there), and rcpps's
    // bits are the CPU vendor's: 2 ulp held on AMD Zen 4, an Intel Sapphire Rapids gave 2.08 ulp
    // at x = -9.32. Each form is within its own accuracy bound of the reference (checked above and
    // in GeluErf), so they may differ by up to the sum of the two.
    const double apart = std::fabs(static_cast<double>(wide[i]) - narrow[i]);
    const double allowed = 4.0 * std::ldexp(std::fabs(narrow[i]), -23) + 2.0 * kDenormalFactor(xs[i]);
    EXPECT_LE(apart, allowed) << "x=" << xs[i] << " avx512 " << wide[i] << " avx2 " << narrow[i];
  }
  EXPECT_LE(worst, 4.5);
  const float specials[] = {-kInf, kInf, kNaN, -0.0f, 0.0f, 100.0f, kMax, -100.0f};
  float out[8];
  evalAvx512(VecFn::kGeluErf, specials, out, 8);
  EXPECT_TRUE(same(out[0], kNaN));
  EXPECT_TRUE(same(out[1], kInf));
  EXPECT_TRUE(same(out[2], kNaN));
  EXPECT_TRUE(same(out[3], -0.0f));
  EXPECT_TRUE(same(out[4], 0.0f));
  EXPECT_TRUE(same(out[5], 100.0f));
  EXPECT_TRUE(same(out[6], kMax));
  EXPECT_EQ(out[7], 0.0f);
}

/// Inputs for the bf16 GELUs: random in wide and narrow ranges, plus every piece end of their
/// tables (multiples of 1/2 in [-7, 7]) and its float neighbours.
std::vector<float> bf16GeluInputs() {
  auto xs = inputs(4096, {{-15.0f, 15.0f}, {-1.5f, 1.5f}, {-4.0f, -3.0f}, {-6.75f, -5.25f}, {5.25f, 6.75f}});
  for (int h = -14; h <= 14; ++h) {
    const float end = 0.5f * static_cast<float>(h);
    xs.insert(xs.end(), {std::nextafter(end, -kInf), end, std::nextafter(end, kInf)});
  }
  return xs;
}

/// The accuracy bounds of the bf16 GEMM's GELUs on inputs \p xs (results \p got of \p fn, which
/// produced them): |error| <= absPerX |x| everywhere, and <= 2^relExp relative for x > -3 (not
/// deep in the negative tail). Returns the largest |error| / |x|.
double expectBf16GeluBounds(const std::vector<float>& xs, const std::vector<float>& got, double (*ref)(double),
                            double absPerX, int relExp) {
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], want = ref(x);
    if (!std::isfinite(x) || x == 0) continue;
    const double err = std::fabs(got[i] - want);
    if (std::fabs(x) > 1e-30) worst = std::max(worst, err / std::fabs(x));  // not x/2 underflowing
    EXPECT_LE(err, absPerX * std::fabs(x) + 1e-44) << "x=" << x << " got " << got[i] << " want " << want;
    if (x > -3.0) EXPECT_LE(err, std::ldexp(std::fabs(want), relExp) + 1e-44) << "x=" << x;
  }
  return worst;
}

/// \p fn on {-inf, inf, NaN, -0, 0, 100, max, -100}: the first seven checked (geluErf's
/// specials), the last returned (the tail's exact value differs between the forms).
float expectBf16GeluSpecials(VecFn fn) {
  const float specials[] = {-kInf, kInf, kNaN, -0.0f, 0.0f, 100.0f, kMax, -100.0f};
  float out[8];
  evalAvx512(fn, specials, out, 8);
  EXPECT_TRUE(same(out[0], kNaN));
  EXPECT_TRUE(same(out[1], kInf));
  EXPECT_TRUE(same(out[2], kNaN));
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_EQ(out[4], 0.0f);
  EXPECT_TRUE(same(out[5], 100.0f));
  EXPECT_TRUE(same(out[6], kMax));
  return out[7];
}

// The bf16 GEMM's GELU (a table of degree-5 pieces, vecmath_avx512.h): within 2.5e-7 |x| of the
// exact value everywhere (the fit's 3.2e-8 on phi plus float32 rounding of the coefficients and the
// multiply-adds; it measures 1.1e-7), and within 2^-16 relative wherever the result is not deep in
// the negative tail (a bf16 result rounds at 2^-8); the same specials as geluErf. The inputs include
// the pieces' ends (every half unit, the clamps at -6.5 and 6). It is a different formula from
// geluErf (the float32 kernels' GELU must not silently become this one).
TEST(Vecmath, GeluErfForBf16) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  auto xs = bf16GeluInputs();
  std::vector<float> got(xs.size());
  evalAvx512(VecFn::kGeluErfForBf16, xs.data(), got.data(), xs.size());
  const double worst = expectBf16GeluBounds(xs, got, geluErfRef, 2.5e-7, -16);
  std::vector<float> precise(xs.size());
  evalAvx512(VecFn::kGeluErf, xs.data(), precise.data(), xs.size());
  int differsFromPrecise = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isfinite(xs[i]) && xs[i] != 0) differsFromPrecise += precise[i] != got[i];
  }
  EXPECT_GT(differsFromPrecise, 100);
  std::printf("  geluErfForBf16: max |error| / |x| = %.3g\n", worst);
  EXPECT_EQ(expectBf16GeluSpecials(VecFn::kGeluErfForBf16), 0.0f);
}

// The bf16 GEMM's GELU (tanh), the same table form with the tanh form's phi: the same bounds and
// geluTanh's specials.
TEST(Vecmath, GeluTanhForBf16) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  auto xs = bf16GeluInputs();
  std::vector<float> got(xs.size());
  evalAvx512(VecFn::kGeluTanhForBf16, xs.data(), got.data(), xs.size());
  const double worst = expectBf16GeluBounds(xs, got, geluTanhRef, 2.5e-7, -16);
  std::printf("  geluTanhForBf16: max |error| / |x| = %.3g\n", worst);
  // Not the erf form (the two differ by about 1e-4 at x = 2).
  float erfForm, tanhForm;
  const float two = 2.0f;
  evalAvx512(VecFn::kGeluErfForBf16, &two, &erfForm, 1);
  evalAvx512(VecFn::kGeluTanhForBf16, &two, &tanhForm, 1);
  EXPECT_GT(std::fabs(erfForm - tanhForm), 5e-5f);
  EXPECT_LE(std::fabs(expectBf16GeluSpecials(VecFn::kGeluTanhForBf16)), 1e-35f);  // -100 sigmoid(-88...): 0 or a few 1e-37
}

TEST(Vecmath, Elu) {
  SKIP_WITHOUT_AVX2();
  for (float alpha : {1.0f, 0.5f}) {
    EXPECT_ULP(VecFn::kElu, [alpha](double x) { return x > 0 ? x : alpha * std::expm1(x); },
               inputs(4096, {{-2.0f, 2.0f}}), 2.0, alpha);
  }
  EXPECT_TRUE(same(eval1(VecFn::kElu, -kInf, 1.0f), -1.0f));
  EXPECT_TRUE(same(eval1(VecFn::kElu, kInf, 1.0f), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kElu, -0.0f, 1.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kElu, kNaN, 1.0f), kNaN));
}

TEST(Vecmath, SqrtRsqrtReciprocalAreTorchExact) {
  SKIP_WITHOUT_AVX2();
  auto xs = inputs(4099);
  std::vector<float> s(xs.size()), r(xs.size()), q(xs.size());
  evalAvx2(VecFn::kSqrt, xs.data(), s.data(), xs.size());
  evalAvx2(VecFn::kRsqrt, xs.data(), r.data(), xs.size());
  evalAvx2(VecFn::kReciprocal, xs.data(), q.data(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_TRUE(same(s[i], std::sqrt(xs[i]))) << xs[i];
    ASSERT_TRUE(same(r[i], 1.0f / std::sqrt(xs[i]))) << xs[i];  // torch.rsqrt's formula
    ASSERT_TRUE(same(q[i], 1.0f / xs[i])) << xs[i];
    if (xs[i] > 0) ASSERT_LE(ulpError(r[i], 1.0 / std::sqrt(static_cast<double>(xs[i]))), 1.5) << xs[i];
  }
  EXPECT_TRUE(same(eval1(VecFn::kRsqrt, -0.0f), -kInf));
  EXPECT_TRUE(same(eval1(VecFn::kRsqrt, 0.0f), kInf));
  EXPECT_TRUE(same(eval1(VecFn::kRsqrt, kInf), 0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSqrt, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kSqrt, -1.0f), kNaN));
}

TEST(Vecmath, PiecewiseLinearActivationsMatchTorchBitwise) {
  SKIP_WITHOUT_AVX2();
  std::vector<float> xs = {-kInf, -7.0f, -3.0f, -2.5f, -1.0f, -kDenorm, -0.0f, 0.0f, kDenorm, 0.3f, 2.9f, 3.0f, 6.5f, kInf, kNaN};
  for (float x : xs) {
    SCOPED_TRACE(x);
    EXPECT_TRUE(same(eval1(VecFn::kRelu, x), (x < 0) ? 0.0f : x));  // keeps -0 and NaN
    EXPECT_TRUE(same(eval1(VecFn::kLeakyRelu, x, 0.01f), x > 0 ? x : x * 0.01f));
    float r6 = std::isnan(x) ? x : std::min(std::max(x + 3.0f, 0.0f), 6.0f);
    EXPECT_TRUE(same(eval1(VecFn::kHardswish, x), x * r6 / 6.0f));
    EXPECT_TRUE(same(eval1(VecFn::kHardsigmoid, x), r6 / 6.0f));
    float c = std::isnan(x) ? x : (x < -1.0f ? -1.0f : (x > 2.0f ? 2.0f : x));
    EXPECT_TRUE(same(eval1(VecFn::kClamp, x, -1.0f, 2.0f), c));
  }
  EXPECT_TRUE(same(eval1(VecFn::kRelu, -0.0f), -0.0f));
  EXPECT_TRUE(same(eval1(VecFn::kClamp, -0.0f, 0.0f, 1.0f), -0.0f));  // torch.clamp(-0., 0, 1) = -0.
  EXPECT_TRUE(same(eval1(VecFn::kHardswish, -kInf), kNaN));          // torch: -inf * 0 / 6
}

TEST(Vecmath, MaximumMinimumPropagateNaN) {
  SKIP_WITHOUT_AVX2();
  float a[8] = {kNaN, 1.0f, 2.0f, -1.0f, kInf, -kInf, 0.0f, kNaN};
  float b[8] = {1.0f, kNaN, 3.0f, -2.0f, 1.0f, 1.0f, 0.5f, kNaN};
  float mx[8], mn[8];
  maxMinAvx2(true, a, b, mx, 8);
  maxMinAvx2(false, a, b, mn, 8);
  for (int i = 0; i < 8; ++i) {
    bool nan = std::isnan(a[i]) || std::isnan(b[i]);
    EXPECT_TRUE(same(mx[i], nan ? kNaN : std::max(a[i], b[i]))) << i;
    EXPECT_TRUE(same(mn[i], nan ? kNaN : std::min(a[i], b[i]))) << i;
  }
}

/// c10::detail::round_to_nearest_even.
uint16_t bf16Ref(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

TEST(Vecmath, Bf16ConversionsMatchTorch) {
  SKIP_WITHOUT_AVX2();
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> widened(65536);
  loadBf16Avx2(all.data(), widened.data(), all.size());
  for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), i << 16);

  std::vector<float> xs;
  for (uint64_t b = 0; b < (1ull << 32); b += 65521) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  for (uint32_t t : {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3F808001u, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,
                     0xFF800000u, 0x7FC00001u, 0xFFFFFFFFu, 0x00000001u, 0x80008000u})
    xs.push_back(std::bit_cast<float>(t));
  while (xs.size() % 8) xs.push_back(1.0f);
  std::vector<uint16_t> narrowed(xs.size());
  storeBf16Avx2(xs.data(), narrowed.data(), xs.size());
  std::vector<float> rounded(xs.size());
  evalAvx2(VecFn::kRoundBf16, xs.data(), rounded.data(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(narrowed[i], bf16Ref(xs[i])) << std::hex << std::bit_cast<uint32_t>(xs[i]);
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), static_cast<uint32_t>(bf16Ref(xs[i])) << 16);
  }
}

}  // namespace
}  // namespace verifuse::kernels::cpu::testing
