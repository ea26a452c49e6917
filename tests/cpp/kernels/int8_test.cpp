// Int8 conv / linear kernels (kernels/int8.h) against an exact integer reference: the s32
// accumulator with the source zero point, the folded scale, relu / clamp / sum post-ops, requantization
// with round-half-even and saturation. The kernel scales in float32, so a code may differ from the
// exact rational result by one step at a rounding boundary; the test allows that and requires
// almost all codes to match.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/int8.h"

namespace verifuse::kernels {
namespace {

/// The weights these tests give oneDNN's kernels: every s8 where the tier's kernels sum u8 x s8
/// products without an s16 step (VNNI, AMX); below, [-64, 63], where two products of codes up to 255
/// stay inside s16 (255 * 128 = 32640), so the kernel computes what int8.h says. Full-range weights
/// below VNNI are the saturation tests' (OnednnBelowVnniSaturatesAsDeclared) and the widening
/// kernel's (cpu/int8_widening_test.cpp).
bool fullRangeWeights() { return capabilities().onednnInt8WithoutSaturation(); }
int8_t weightOf(int v) { return static_cast<int8_t>(fullRangeWeights() ? v : (v + 128) / 2 - 64); }

struct Case {
  bool conv = true;
  int64_t n = 2, c = 8, h = 7, w = 7, o = 16, k = 3, groups = 1;
  Int8Type dst = Int8Type::kU8;
  bool relu = false, sum = false;
  bool clamp = false;  ///< clip to [clampLo, clampHi] (ReLU6-like, after relu/sum)
  float clampLo = 0.f, clampHi = 6.f;
};

/// Exact reference in double: y = sx*sw[o]*acc + b, post-ops, requantization (half to even).
std::vector<double> reference(const Case& t, const std::vector<uint8_t>& x, const std::vector<int8_t>& w,
                              const std::vector<float>& b, const Int8Params& p, const std::vector<uint8_t>& residual,
                              std::vector<int64_t>* outDims) {
  *outDims = int8OutputDims(p);
  std::vector<double> out;
  const int64_t cg = t.c / t.groups, og = t.o / t.groups;
  const int64_t pad = t.conv ? t.k / 2 : 0;
  const int64_t oh = t.conv ? (*outDims)[2] : 1, ow = t.conv ? (*outDims)[3] : 1, n = t.conv ? t.n : t.n;
  for (int64_t b0 = 0; b0 < n; ++b0)
    for (int64_t oc = 0; oc < t.o; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          int64_t acc = 0;
          if (t.conv) {
            const int64_t g = oc / og;
            for (int64_t ic = 0; ic < cg; ++ic)
              for (int64_t u = 0; u < t.k; ++u)
                for (int64_t v = 0; v < t.k; ++v) {
                  const int64_t y = i + u - pad, z = j + v - pad;
                  if (y < 0 || z < 0 || y >= t.h || z >= t.w) continue;  // zero padding of the centred input
                  const int64_t xi = ((b0 * t.c + g * cg + ic) * t.h + y) * t.w + z;
                  const int64_t wi = ((oc * cg + ic) * t.k + u) * t.k + v;
                  acc += static_cast<int64_t>(w[wi]) * (static_cast<int64_t>(x[xi]) - p.srcZeroPoint);
                }
          } else {
            for (int64_t ic = 0; ic < t.c; ++ic) {
              acc += static_cast<int64_t>(w[oc * t.c + ic]) * (static_cast<int64_t>(x[b0 * t.c + ic]) - p.srcZeroPoint);
            }
          }
          double yv = static_cast<double>(p.srcScale) * p.weightScales[oc] * static_cast<double>(acc) + b[oc];
          const size_t flat = out.size();
          if (t.sum) yv += p.sumScale * (static_cast<double>(residual[flat]) - p.sumZeroPoint);
          if (t.relu) yv = std::max(yv, 0.0);
          if (t.clamp) yv = std::min(std::max(yv, static_cast<double>(t.clampLo)), static_cast<double>(t.clampHi));
          if (t.dst == Int8Type::kF32) {
            out.push_back(yv);
          } else {
            const double lo = t.dst == Int8Type::kU8 ? 0 : -128, hi = t.dst == Int8Type::kU8 ? 255 : 127;
            out.push_back(std::min(hi, std::max(lo, std::nearbyint(yv / p.dstScale) + p.dstZeroPoint)));
          }
        }
  return out;
}

void run(const Case& t) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
  const int64_t cg = t.c / t.groups;
  std::vector<uint8_t> x(static_cast<size_t>(t.conv ? t.n * t.c * t.h * t.w : t.n * t.c));
  for (auto& v : x) v = static_cast<uint8_t>(u8(rng));
  std::vector<int8_t> w(static_cast<size_t>(t.conv ? t.o * cg * t.k * t.k : t.o * t.c));
  for (auto& v : w) v = weightOf(s8(rng));
  std::vector<float> b(static_cast<size_t>(t.o)), ws(static_cast<size_t>(t.o));
  for (int64_t o = 0; o < t.o; ++o) {
    b[o] = 0.01f * static_cast<float>(o % 7 - 3);
    ws[o] = 0.001f * static_cast<float>(1 + o % 5);
  }
  Int8Params p;
  p.conv = t.conv;
  p.srcDims = t.conv ? std::vector<int64_t>{t.n, t.c, t.h, t.w} : std::vector<int64_t>{t.n, t.c};
  p.srcStrides = t.conv ? std::vector<int64_t>{t.c * t.h * t.w, t.h * t.w, t.w, 1} : std::vector<int64_t>{t.c, 1};
  p.weightDims = t.conv ? std::vector<int64_t>{t.o, cg, t.k, t.k} : std::vector<int64_t>{t.o, t.c};
  if (t.conv) {
    p.padL = {t.k / 2, t.k / 2};
    p.groups = t.groups;
  }
  p.srcType = Int8Type::kU8;
  p.dstType = t.dst;
  p.weights = w.data();
  p.bias = b.data();
  p.srcScale = 0.02f;
  p.srcZeroPoint = 100;
  p.weightScales = ws;
  p.dstScale = 0.05f;
  p.dstZeroPoint = t.dst == Int8Type::kS8 ? -3 : 5;
  if (t.sum) p.postOps.push_back(Int8Params::PostOp::kSum);
  if (t.relu) p.postOps.push_back(Int8Params::PostOp::kRelu);
  if (t.clamp) {
    p.postOps.push_back(Int8Params::PostOp::kClamp);
    p.clampLo = t.clampLo;
    p.clampHi = t.clampHi;
  }
  p.sumScale = 0.04f;
  p.sumZeroPoint = 17;
  std::vector<int64_t> dims = int8OutputDims(p);
  int64_t numel = 1;
  for (int64_t d : dims) numel *= d;
  std::vector<uint8_t> residual(static_cast<size_t>(numel));
  for (auto& v : residual) v = static_cast<uint8_t>(u8(rng));
  std::vector<int64_t> refDims;
  std::vector<double> ref = reference(t, x, w, b, p, residual, &refDims);
  auto k = createInt8(p);
  ASSERT_TRUE(k.isOk()) << k.status().toString();
  std::vector<uint8_t> outBytes(static_cast<size_t>(numel) * (t.dst == Int8Type::kF32 ? 4 : 1));
  if (t.sum) outBytes.assign(residual.begin(), residual.end());
  ASSERT_TRUE((*k)->execute({x.data()}, outBytes.data()).isOk());
  int64_t exact = 0;
  for (int64_t i = 0; i < numel; ++i) {
    double got;
    if (t.dst == Int8Type::kF32) got = reinterpret_cast<const float*>(outBytes.data())[i];
    else if (t.dst == Int8Type::kU8) got = outBytes[static_cast<size_t>(i)];
    else got = static_cast<int8_t>(outBytes[static_cast<size_t>(i)]);
    if (t.dst == Int8Type::kF32) {
      ASSERT_NEAR(got, ref[static_cast<size_t>(i)], 1e-4 * std::max(1.0, std::abs(ref[static_cast<size_t>(i)]))) << i;
      ++exact;
    } else {
      ASSERT_LE(std::abs(got - ref[static_cast<size_t>(i)]), 1.0) << i;
      exact += got == ref[static_cast<size_t>(i)];
    }
  }
  EXPECT_GE(static_cast<double>(exact), 0.99 * static_cast<double>(numel));
}

TEST(Int8KernelTest, ConvDequantizedF32) { run(Case{.dst = Int8Type::kF32}); }
TEST(Int8KernelTest, ConvRequantizedU8WithRelu) { run(Case{.relu = true}); }
TEST(Int8KernelTest, ConvRequantizedS8Grouped) { run(Case{.groups = 2, .dst = Int8Type::kS8}); }
TEST(Int8KernelTest, ConvClampPostOp) {
  // ReLU6 into u8 and a hardtanh with a negative bound into s8: the bounds cut inside the output's
  // range (dst scale 0.05: ReLU6 codes 5..125), so clamped and unclamped codes differ.
  run(Case{.clamp = true});
  run(Case{.dst = Int8Type::kS8, .clamp = true, .clampLo = -1.f, .clampHi = 1.f});
  run(Case{.dst = Int8Type::kF32, .clamp = true, .clampLo = -0.5f, .clampHi = 0.25f});
}

/// A 2x4 by 4x4 linear over \p w (16 weights), unit scales: for the refusal tests.
Int8Params tinyLinear(const std::vector<int8_t>& w) {
  Int8Params p;
  p.conv = false;
  p.srcDims = {2, 4};
  p.srcStrides = {4, 1};
  p.weightDims = {4, 4};
  p.weights = w.data();
  p.weightScales = {1, 1, 1, 1};
  return p;
}

TEST(Int8KernelTest, RefusesClampWithMinAboveMax) {
  std::vector<int8_t> w(16, 1);
  Int8Params p = tinyLinear(w);
  p.postOps = {Int8Params::PostOp::kClamp};
  p.clampLo = 1.f;
  p.clampHi = 0.f;  // torch gives hi everywhere, oneDNN's clip lo: not a kernel
  EXPECT_FALSE(createInt8(p).isOk());
  p.clampHi = 2.f;
  EXPECT_TRUE(createInt8(p).isOk());
}

TEST(Int8KernelTest, ConvSumThenRelu) { run(Case{.relu = true, .sum = true}); }
TEST(Int8KernelTest, LinearU8AndF32) {
  run(Case{.conv = false, .n = 5, .c = 64, .o = 24});
  run(Case{.conv = false, .n = 5, .c = 64, .o = 24, .dst = Int8Type::kF32});
}

TEST(Int8KernelTest, ProbeRefusesAKernelWhosePackedWeightsDifferFromTheFormula) {
  // A kernel made from one weight tensor, probed against another that differs in one element (or
  // against other scales): the probe names the output channel. Its own parameters pass.
  for (bool conv : {true, false}) {
    for (Int8Type dst : {Int8Type::kF32, Int8Type::kU8}) {
      const int64_t o = 16, c = 32;
      std::vector<int8_t> w(static_cast<size_t>(conv ? o * c * 9 : o * c));
      for (size_t i = 0; i < w.size(); ++i) w[i] = weightOf(static_cast<int>((i * 37) % 255) - 127);
      Int8Params p;
      p.conv = conv;
      p.srcDims = conv ? std::vector<int64_t>{1, c, 6, 6} : std::vector<int64_t>{4, c};
      p.srcStrides = conv ? std::vector<int64_t>{c * 36, 36, 6, 1} : std::vector<int64_t>{c, 1};
      p.weightDims = conv ? std::vector<int64_t>{o, c, 3, 3} : std::vector<int64_t>{o, c};
      if (conv) p.padL = {1, 1};
      p.dstType = dst;
      p.weights = w.data();
      p.srcScale = 0.02f;
      p.srcZeroPoint = 128;
      p.weightScales.assign(static_cast<size_t>(o), 0.01f);
      p.dstScale = 0.2f;  // u8 results around the zero point 128, none saturated
      p.dstZeroPoint = 128;
      auto k = createInt8Unprobed(p);
      ASSERT_TRUE(k.isOk()) << k.status().toString();
      EXPECT_TRUE(probeInt8Kernel(p, **k).isOk());
      // One weight of channel 5 changed by 100 (a layout scramble changes thousands): at least
      // two u8 steps wherever its source code is 20 or more from the zero point.
      std::vector<int8_t> other = w;
      int8_t& changed = other[static_cast<size_t>(5 * (conv ? c * 9 : c) + 4)];
      changed = static_cast<int8_t>(changed > 0 ? changed - 100 : changed + 100);
      Int8Params q = p;
      q.weights = other.data();
      Status bad = probeInt8Kernel(q, **k);
      EXPECT_FALSE(bad.isOk()) << (conv ? "conv " : "linear ") << int8TypeName(dst);
      EXPECT_NE(bad.toString().find("output channel 5"), std::string::npos) << bad.toString();
      q = p;
      q.weightScales[9] = 0.02f;
      EXPECT_FALSE(probeInt8Kernel(q, **k).isOk());
    }
  }
}

TEST(Int8KernelTest, S32AccumulatorIsExact) {
  // aten::_int_mm's semantics: the bare s32 sum, u8 and s8 activations, K large enough that the
  // sums pass 2^24 (a float32 detour would round them).
  for (Int8Type src : {Int8Type::kU8, Int8Type::kS8}) {
    const int64_t m = 5, k = 1024, n = 24;
    std::vector<uint8_t> x(static_cast<size_t>(m * k));
    std::vector<int8_t> w(static_cast<size_t>(n * k));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(src == Int8Type::kU8 ? 255 - i % 7 : 127 - i % 5);
    for (size_t i = 0; i < w.size(); ++i) w[i] = weightOf(i % 3 == 0 ? -128 : 127);
    Int8Params p;
    p.conv = false;
    p.srcDims = {m, k};
    p.srcStrides = {k, 1};
    p.weightDims = {n, k};
    p.srcType = src;
    p.dstType = Int8Type::kS32;
    p.weights = w.data();
    p.weightScales.assign(static_cast<size_t>(n), 1.f);
    auto kernel = createInt8(p);  // probed: exact equality required
    ASSERT_TRUE(kernel.isOk()) << kernel.status().toString();
    std::vector<int32_t> out(static_cast<size_t>(m * n));
    ASSERT_TRUE((*kernel)->execute({x.data()}, out.data()).isOk());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t xv = src == Int8Type::kU8 ? int64_t(x[i * k + kk]) : int64_t(static_cast<int8_t>(x[i * k + kk]));
          acc += xv * w[j * k + kk];
        }
        ASSERT_EQ(out[static_cast<size_t>(i * n + j)], acc) << i << "," << j;
      }
    }
  }
  // Scales, a bias or a zero point have no place in the bare accumulator.
  std::vector<int8_t> w(16, 1);
  Int8Params bad = tinyLinear(w);
  bad.dstType = Int8Type::kS32;
  bad.weightScales = {1, 1, 2, 1};
  EXPECT_FALSE(createInt8(bad).isOk());
}

TEST(Int8KernelTest, OnednnArithmeticFollowsTheTier) {
  for (Int8Type src : {Int8Type::kU8, Int8Type::kS8}) {
    const IntDotArithmetic a = onednnInt8Arithmetic(src);
    EXPECT_EQ(a.source, src == Int8Type::kS8 ? IntDotArithmetic::Source::kCodesPlus128 : IntDotArithmetic::Source::kCodes);
    if (capabilities().onednnInt8WithoutSaturation()) {
      EXPECT_EQ(a.variant, "onednn:vpdpbusd");
      EXPECT_EQ(a.groupSize, 4);
      EXPECT_FALSE(a.groupSaturates);
    } else {
      EXPECT_EQ(a.variant, "onednn:vpmaddubsw");
      EXPECT_EQ(a.groupSize, 2);
      EXPECT_EQ(a.groupBits, 16);
      EXPECT_TRUE(a.groupSaturates);
    }
  }
}

TEST(Int8KernelTest, OnednnBelowVnniSaturatesAsDeclaredAndTheProbeSeesIt) {
  // Weights +127 next to +127 and codes 255: two products sum to 64770. oneDNN's kernels below VNNI
  // clamp that to 32767 (what onednnInt8Arithmetic declares there); with VNNI or AMX they are
  // exact. The probe's extreme codes must see the difference: a kernel that saturates is refused.
  const int64_t k = 64, n = 16;
  std::vector<int8_t> w(static_cast<size_t>(n * k), 127);
  for (size_t i = 0; i < w.size(); i += 4) w[i] = -128;
  Int8Params p;
  p.conv = false;
  p.srcDims = {4, k};
  p.srcStrides = {k, 1};
  p.weightDims = {n, k};
  p.dstType = Int8Type::kS32;
  p.weights = w.data();
  p.weightScales.assign(static_cast<size_t>(n), 1.f);
  auto unprobed = createInt8Unprobed(p);
  ASSERT_TRUE(unprobed.isOk()) << unprobed.status().toString();
  std::vector<uint8_t> x(static_cast<size_t>(4 * k), 255);
  std::vector<int32_t> out(static_cast<size_t>(4 * n));
  ASSERT_TRUE((*unprobed)->execute({x.data()}, out.data()).isOk());
  int64_t exact = 0;
  for (int64_t i = 0; i < k; ++i) exact += 255 * int64_t(w[static_cast<size_t>(i)]);
  const Status probed = probeInt8Kernel(p, **unprobed);
  if (capabilities().onednnInt8WithoutSaturation()) {
    EXPECT_EQ(out[0], exact);
    EXPECT_TRUE(probed.isOk()) << probed.toString();
  } else {
    EXPECT_LT(out[0], exact) << "below VNNI the s16 pair sums clamp at 32767";
    EXPECT_FALSE(probed.isOk());
    EXPECT_NE(probed.toString().find("int8 probe"), std::string::npos) << probed.toString();
    EXPECT_FALSE(createInt8(p).isOk());
  }
}

TEST(Int8KernelTest, RefusesBadScales) {
  std::vector<int8_t> w(16, 1);
  Int8Params p = tinyLinear(w);
  p.weightScales = {1, 1, 0, 1};
  EXPECT_FALSE(createInt8(p).isOk());
  p.weightScales = {1, 1, 1, 1};
  p.srcScale = std::nanf("");
  EXPECT_FALSE(createInt8(p).isOk());
  p.srcScale = 1;
  EXPECT_TRUE(createInt8(p).isOk());
}

}  // namespace
}  // namespace verifuse::kernels
