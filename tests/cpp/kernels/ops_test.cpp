// Pooling, eltwise, binary, softmax, layer norm and concat against reference loops.
#include <gtest/gtest.h>

#include "reference.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels {
namespace {
using namespace testing;

// ---- pooling ------------------------------------------------------------------------------------

struct PoolCase {
  std::string name;
  PoolAlg alg;
  Dims src, kernel, stride, pad, dilation;
  bool ceil;
  Dims expectOut;  // torch's output spatial dims (checked by hand against torch's formula)
};

/// torch semantics: max ignores padding; avg divides by the window clipped to input+pad
/// (include) or to the input (exclude). Symmetric padding.
std::vector<float> refPool(const PoolCase& c, const std::vector<float>& x, const Dims& od) {
  const int ns = static_cast<int>(c.src.size()) - 2;
  auto pad3 = [&](const Dims& v, int64_t fill) {
    Dims r(3, fill);
    for (int i = 0; i < ns; ++i) r[3 - ns + i] = v.empty() ? fill : (v.size() == 1 ? v[0] : v[i]);
    return r;
  };
  Dims X = pad3(Dims(c.src.begin() + 2, c.src.end()), 1), O = pad3(Dims(od.begin() + 2, od.end()), 1);
  Dims K = pad3(c.kernel, 1), S = pad3(c.stride.empty() ? c.kernel : c.stride, 1), P = pad3(c.pad, 0),
       D = pad3(c.dilation, 1);
  std::vector<float> y(static_cast<size_t>(numel(od)));
  const int64_t NC = c.src[0] * c.src[1];
  for (int64_t nc = 0; nc < NC; ++nc)
    for (int64_t o0 = 0; o0 < O[0]; ++o0)
      for (int64_t o1 = 0; o1 < O[1]; ++o1)
        for (int64_t o2 = 0; o2 < O[2]; ++o2) {
          double acc = c.alg == PoolAlg::kMax ? -INFINITY : 0.0;
          int64_t cnt = 0, padCnt = 1;
          int64_t o[3] = {o0, o1, o2};
          for (int d = 0; d < 3; ++d) {  // torch's include-pad divisor: window clipped to in+pad
            int64_t st = o[d] * S[d] - P[d];
            int64_t en = std::min(st + (K[d] - 1) * D[d] + 1, X[d] + P[d]);
            padCnt *= en - st;
          }
          for (int64_t k0 = 0; k0 < K[0]; ++k0)
            for (int64_t k1 = 0; k1 < K[1]; ++k1)
              for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                int64_t i0 = o0 * S[0] - P[0] + k0 * D[0], i1 = o1 * S[1] - P[1] + k1 * D[1],
                        i2 = o2 * S[2] - P[2] + k2 * D[2];
                if (i0 < 0 || i0 >= X[0] || i1 < 0 || i1 >= X[1] || i2 < 0 || i2 >= X[2]) continue;
                float v = x[((nc * X[0] + i0) * X[1] + i1) * X[2] + i2];
                if (c.alg == PoolAlg::kMax) acc = std::max<double>(acc, v);
                else acc += v;
                ++cnt;
              }
          if (c.alg == PoolAlg::kAvgExcludePad) acc /= cnt;
          if (c.alg == PoolAlg::kAvgIncludePad) acc /= padCnt;
          y[((nc * O[0] + o0) * O[1] + o1) * O[2] + o2] = static_cast<float>(acc);
        }
  return y;
}

const PoolCase kPoolCases[] = {
    {"max_2x2_s2", PoolAlg::kMax, {2, 3, 8, 8}, {2, 2}, {}, {}, {}, false, {4, 4}},
    {"max_3x3_s2_p1", PoolAlg::kMax, {1, 4, 9, 10}, {3, 3}, {2, 2}, {1, 1}, {}, false, {5, 5}},
    {"max_3x3_s2_ceil", PoolAlg::kMax, {1, 4, 10, 10}, {3, 3}, {2, 2}, {}, {}, true, {5, 5}},
    {"max_3x3_s2_p1_ceil", PoolAlg::kMax, {1, 4, 10, 11}, {3, 3}, {2, 2}, {1, 1}, {}, true, {6, 6}},
    {"max_dilated", PoolAlg::kMax, {1, 2, 11, 11}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, false, {9, 9}},
    {"avg_incl_pad", PoolAlg::kAvgIncludePad, {1, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {}, false, {4, 4}},
    {"avg_excl_pad", PoolAlg::kAvgExcludePad, {1, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1}, {}, false, {4, 4}},
    {"avg_excl_pad_ceil", PoolAlg::kAvgExcludePad, {1, 3, 8, 8}, {3, 3}, {2, 2}, {}, {}, true, {4, 4}},
    {"avg_incl_pad_ceil_inside", PoolAlg::kAvgIncludePad, {1, 3, 9, 9}, {3, 3}, {2, 2}, {1, 1}, {}, true, {5, 5}},
    {"max1d", PoolAlg::kMax, {2, 3, 15}, {4}, {3}, {}, {}, true, {5}},
    {"avg3d", PoolAlg::kAvgExcludePad, {1, 2, 6, 6, 6}, {2, 2, 2}, {}, {}, {}, false, {3, 3, 3}},
    {"max3d_p1", PoolAlg::kMax, {1, 2, 5, 6, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {}, false, {3, 3, 4}},
};

using PoolParam = std::tuple<PoolCase, Format>;
class PoolTest : public ::testing::TestWithParam<PoolParam> {};

TEST_P(PoolTest, MatchesReference) {
  const auto& [c, srcFmt] = GetParam();
  auto x = randomVec(numel(c.src), 5);
  PoolParams p;
  p.alg = c.alg;
  p.src = srcFmt == Format::kChannelsLast ? Layout::channelsLast(c.src) : Layout::contiguous(c.src);
  p.kernel = c.kernel;
  p.stride = c.stride;
  p.padL = c.pad;
  p.dilation = c.dilation;
  p.ceilMode = c.ceil;
  Dims od = poolOutputDims(p);
  ASSERT_EQ(Dims(od.begin() + 2, od.end()), c.expectOut);
  VF_ASSERT_OK_AND_ASSIGN(auto k, createPool(p));
  EXPECT_EQ(k->dstLayout().dims(), od);
  expectClose(runAnyLayout(*k, x), refPool(c, x, od), 1e-5f, 1e-5f, c.name + " " + k->implInfo());
}

INSTANTIATE_TEST_SUITE_P(Cases, PoolTest,
                         ::testing::Combine(::testing::ValuesIn(kPoolCases),
                                            ::testing::Values(Format::kPlain, Format::kChannelsLast)),
                         [](const ::testing::TestParamInfo<PoolParam>& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) == Format::kPlain ? "_plain" : "_nhwc");
                         });

TEST(Pool, AvgIncludePadCeilPastPaddingIsUnsupported) {
  PoolParams p;
  p.alg = PoolAlg::kAvgIncludePad;
  p.src = Layout::contiguous({1, 1, 8, 8});
  p.kernel = {3, 3};
  p.stride = {2, 2};
  p.ceilMode = true;  // last window starts at 6 and reads 6..8: past the (zero) padding
  auto k = createPool(p);
  ASSERT_FALSE(k.isOk());
  EXPECT_EQ(k.status().code(), StatusCode::kUnsupported) << k.status().toString();
}

TEST(Pool, AdaptiveAvg) {
  Dims s = {2, 3, 8, 12};
  auto x = randomVec(numel(s), 1);
  VF_ASSERT_OK_AND_ASSIGN(auto k, createAdaptiveAvgPool(Layout::contiguous(s), {2, 3}, Format::kPlain));
  PoolCase c{"adaptive", PoolAlg::kAvgExcludePad, s, {4, 4}, {4, 4}, {}, {}, false, {2, 3}};
  expectClose(runDense(*k, {x.data()}), refPool(c, x, {2, 3, 2, 3}), 1e-5f, 1e-5f);
  VF_ASSERT_OK_AND_ASSIGN(auto g, createAdaptiveAvgPool(Layout::contiguous(s), {1, 1}, Format::kPlain));
  auto got = runDense(*g, {x.data()});
  for (int64_t i = 0; i < 6; ++i) {
    double m = 0;
    for (int64_t j = 0; j < 96; ++j) m += x[i * 96 + j];
    EXPECT_NEAR(got[i], m / 96, 1e-5);
  }
  auto bad = createAdaptiveAvgPool(Layout::contiguous(s), {3, 5});
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnsupported);
}

// ---- eltwise ------------------------------------------------------------------------------------

struct EltCase {
  std::string name;
  Activation act;
  float alpha, beta;
};

class EltwiseTest : public ::testing::TestWithParam<EltCase> {};

TEST_P(EltwiseTest, MatchesTorchDefinition) {
  const EltCase& c = GetParam();
  Dims d = {3, 7, 50};
  auto x = randomVec(numel(d), 3, -6.f, 6.f);
  VF_ASSERT_OK_AND_ASSIGN(auto k, createEltwise(Layout::contiguous(d), c.act, c.alpha, c.beta));
  std::vector<float> want(x);
  for (float& v : want) v = refActivation(c.act, v, c.alpha, c.beta);
  expectClose(runDense(*k, {x.data()}), want, 2e-6f, 2e-6f, c.name + " " + k->implInfo());
}

INSTANTIATE_TEST_SUITE_P(
    Activations, EltwiseTest,
    ::testing::Values(EltCase{"relu", Activation::kRelu, 0, 0},
                      EltCase{"leaky_relu_0_2", Activation::kLeakyRelu, 0.2f, 0},
                      EltCase{"gelu_erf", Activation::kGeluErf, 0, 0},
                      EltCase{"gelu_tanh", Activation::kGeluTanh, 0, 0},
                      EltCase{"silu", Activation::kSilu, 0, 0},
                      EltCase{"sigmoid", Activation::kSigmoid, 0, 0},
                      EltCase{"tanh", Activation::kTanh, 0, 0},
                      EltCase{"hardswish", Activation::kHardswish, 0, 0},
                      EltCase{"hardsigmoid", Activation::kHardsigmoid, 0, 0},
                      EltCase{"hardtanh", Activation::kClamp, -1.f, 1.f},
                      EltCase{"clamp_0_2_4_5", Activation::kClamp, 0.2f, 4.5f},
                      EltCase{"elu_1_5", Activation::kElu, 1.5f, 0},
                      EltCase{"linear", Activation::kLinear, -0.5f, 2.f}),
    [](const auto& info) { return info.param.name; });

TEST(Eltwise, GeluErfAndTanhAreDistinguished) {
  // The two gelu variants differ by up to ~2e-4 near |x| = 2..3; the kernels must follow the one
  // asked for, more closely than the variants differ.
  Dims d = {1000};
  std::vector<float> x(1000);
  for (int i = 0; i < 1000; ++i) x[i] = -4.f + 8.f * i / 999.f;
  VF_ASSERT_OK_AND_ASSIGN(auto erfK, createEltwise(Layout::contiguous(d), Activation::kGeluErf));
  VF_ASSERT_OK_AND_ASSIGN(auto tanhK, createEltwise(Layout::contiguous(d), Activation::kGeluTanh));
  auto ge = runDense(*erfK, {x.data()}), gt = runDense(*tanhK, {x.data()});
  std::vector<float> re(x), rt(x);
  for (float& v : re) v = refActivation(Activation::kGeluErf, v);
  for (float& v : rt) v = refActivation(Activation::kGeluTanh, v);
  const float variantGap = maxAbsDiff(re, rt);
  EXPECT_GT(variantGap, 1e-4f);
  EXPECT_LT(maxAbsDiff(ge, re), variantGap / 10);
  EXPECT_LT(maxAbsDiff(gt, rt), variantGap / 10);
  EXPECT_GT(maxAbsDiff(ge, gt), variantGap / 2);
}

// ---- binary -------------------------------------------------------------------------------------

struct BinCase {
  std::string name;
  BinaryAlg alg;
  Dims a, b;
};

class BinaryTest : public ::testing::TestWithParam<BinCase> {};

TEST_P(BinaryTest, MatchesReferenceWithBroadcast) {
  const BinCase& c = GetParam();
  auto a = randomVec(numel(c.a), 1, 0.5f, 2.f), b = randomVec(numel(c.b), 2, 0.5f, 2.f);
  VF_ASSERT_OK_AND_ASSIGN(auto k, createBinary(c.alg, Layout::contiguous(c.a), Layout::contiguous(c.b)));
  Dims ad = c.a, bd = c.b;
  const size_t r = std::max(ad.size(), bd.size());
  while (ad.size() < r) ad.insert(ad.begin(), 1);
  while (bd.size() < r) bd.insert(bd.begin(), 1);
  Dims od(r);
  for (size_t i = 0; i < r; ++i) od[i] = std::max(ad[i], bd[i]);
  EXPECT_EQ(k->outputLayout().dims(), od);
  std::vector<float> want(static_cast<size_t>(numel(od)));
  for (int64_t i = 0; i < numel(od); ++i) {
    want[i] = refBinary(c.alg, a[broadcastIndex(od, ad, i)], b[broadcastIndex(od, bd, i)]);
  }
  expectClose(runDense(*k, {a.data(), b.data()}), want, 1e-6f, 1e-6f, c.name + " " + k->implInfo());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BinaryTest,
    ::testing::Values(BinCase{"add_same", BinaryAlg::kAdd, {2, 3, 4}, {2, 3, 4}},
                      BinCase{"mul_per_channel", BinaryAlg::kMul, {2, 5, 3, 3}, {1, 5, 1, 1}},
                      BinCase{"sub_rank_broadcast", BinaryAlg::kSub, {2, 3, 4}, {4}},
                      BinCase{"sub_lhs_broadcast", BinaryAlg::kSub, {1, 4}, {3, 4}},
                      BinCase{"div_lhs_broadcast", BinaryAlg::kDiv, {3, 1}, {3, 5}},
                      BinCase{"add_lhs_broadcast_swapped", BinaryAlg::kAdd, {5}, {2, 5}},
                      BinCase{"max_both_broadcast", BinaryAlg::kMax, {3, 1}, {1, 4}},
                      BinCase{"min_scalar", BinaryAlg::kMin, {2, 6}, {1}}),
    [](const auto& info) { return info.param.name; });

TEST(Binary, ExpandedViewWithZeroStrides) {
  // torch's x.expand(3, 4) of a [1, 4] tensor has strides {0, 1}: no copy needed.
  std::vector<float> row = randomVec(4, 1), full = randomVec(12, 2);
  Layout expanded = Layout::plain({3, 4}, {0, 1});
  ASSERT_FALSE(expanded.empty());
  EXPECT_TRUE(expanded.isPlain());
  VF_ASSERT_OK_AND_ASSIGN(auto k, createBinary(BinaryAlg::kSub, expanded, Layout::contiguous({3, 4})));
  std::vector<float> want(12);
  for (int i = 0; i < 12; ++i) want[i] = row[i % 4] - full[i];
  expectClose(runDense(*k, {row.data(), full.data()}), want, 0.f, 0.f, k->implInfo());
  // Overlapping non-zero strides cannot be described: empty layout, rejected by factories.
  Layout bad = Layout::plain({2, 3, 4}, {1, 1, 1});
  EXPECT_TRUE(bad.empty());
  auto r = createEltwise(bad, Activation::kRelu);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// ---- softmax, layer norm, concat ----------------------------------------------------------------

TEST(Softmax, AxisAndLog) {
  Dims d = {2, 5, 7};
  auto x = randomVec(numel(d), 1, -4.f, 4.f);
  for (int axis : {1, -1, 0}) {
    for (bool lg : {false, true}) {
      VF_ASSERT_OK_AND_ASSIGN(auto k, createSoftmax(Layout::contiguous(d), axis, lg));
      int ax = axis < 0 ? axis + 3 : axis;
      auto strides = rowMajorStrides(d);
      std::vector<float> want(x.size());
      for (int64_t i = 0; i < numel(d); ++i) {
        int64_t pos = (i / strides[ax]) % d[ax];
        int64_t base = i - pos * strides[ax];
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < d[ax]; ++j) mx = std::max<double>(mx, x[base + j * strides[ax]]);
        for (int64_t j = 0; j < d[ax]; ++j) s += std::exp(x[base + j * strides[ax]] - mx);
        want[i] = lg ? float(x[i] - mx - std::log(s)) : float(std::exp(x[i] - mx) / s);
      }
      expectClose(runDense(*k, {x.data()}), want, 1e-5f, 1e-5f,
                  "axis " + std::to_string(axis) + (lg ? " log" : ""));
    }
  }
}

TEST(LayerNorm, LastDimWithAndWithoutAffine) {
  Dims d = {3, 4, 32};
  auto x = randomVec(numel(d), 1, -3.f, 5.f);
  auto gamma = randomVec(32, 2), beta = randomVec(32, 3);
  for (bool affine : {false, true}) {
    VF_ASSERT_OK_AND_ASSIGN(auto k, createLayerNorm(Layout::contiguous(d), 1e-5f,
                                                    affine ? gamma.data() : nullptr,
                                                    affine ? beta.data() : nullptr));
    std::vector<float> want(x.size());
    for (int64_t r = 0; r < 12; ++r) {
      double m = 0, v = 0;
      for (int j = 0; j < 32; ++j) m += x[r * 32 + j];
      m /= 32;
      for (int j = 0; j < 32; ++j) v += (x[r * 32 + j] - m) * (x[r * 32 + j] - m);
      v /= 32;
      for (int j = 0; j < 32; ++j) {
        double y = (x[r * 32 + j] - m) / std::sqrt(v + 1e-5);
        want[r * 32 + j] = float(affine ? y * gamma[j] + beta[j] : y);
      }
    }
    expectClose(runDense(*k, {x.data()}), want, 1e-5f, 1e-4f, affine ? "affine" : "plain");
  }
}

TEST(Concat, ChannelAndBatchAxes) {
  Dims a = {2, 3, 4}, b = {2, 5, 4};
  auto xa = randomVec(numel(a), 1), xb = randomVec(numel(b), 2);
  VF_ASSERT_OK_AND_ASSIGN(auto k, createConcat({Layout::contiguous(a), Layout::contiguous(b)}, 1));
  EXPECT_EQ(k->outputLayout().dims(), (Dims{2, 8, 4}));
  std::vector<float> want;
  for (int n = 0; n < 2; ++n) {
    want.insert(want.end(), xa.begin() + n * 12, xa.begin() + (n + 1) * 12);
    want.insert(want.end(), xb.begin() + n * 20, xb.begin() + (n + 1) * 20);
  }
  expectClose(runDense(*k, {xa.data(), xb.data()}), want, 0.f, 0.f, "axis 1");
  VF_ASSERT_OK_AND_ASSIGN(auto k0, createConcat({Layout::contiguous(a), Layout::contiguous(a)}, 0));
  std::vector<float> want0(xa);
  want0.insert(want0.end(), xa.begin(), xa.end());
  expectClose(runDense(*k0, {xa.data(), xa.data()}), want0, 0.f, 0.f, "axis 0");
  EXPECT_FALSE(createConcat({Layout::contiguous(a), Layout::contiguous({3, 3, 4})}, 1).isOk());
}

}  // namespace
}  // namespace verifuse::kernels
