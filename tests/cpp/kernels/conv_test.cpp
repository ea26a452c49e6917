// Convolution kernels against a direct-loop reference: geometry, layouts, post-ops, bf16.
#include <gtest/gtest.h>

#include "reference.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels {
namespace {
using namespace testing;

struct ConvCase {
  std::string name;
  Dims src, weight;
  Dims stride, padL, padR, dilation;
  int64_t groups = 1;
  bool bias = true;
};

ConvParams makeParams(const ConvCase& c, const std::vector<float>& w, const std::vector<float>& b) {
  ConvParams p;
  p.srcDims = c.src;
  p.weightDims = c.weight;
  p.weights = w.data();
  p.bias = c.bias ? b.data() : nullptr;
  p.stride = c.stride;
  p.padL = c.padL;
  p.padR = c.padR;
  p.dilation = c.dilation;
  p.groups = c.groups;
  return p;
}

/// Reference conv for a case, honouring asymmetric padding by computing the output dims from
/// padL + padR and reading with padL.
std::vector<float> refFor(const ConvCase& c, const ConvParams& p, const std::vector<float>& x,
                          const std::vector<float>& w, const std::vector<float>& b) {
  const size_t ns = c.src.size() - 2;
  RefConvGeom g;
  g.stride = c.stride.empty() ? Dims(ns, 1) : c.stride;
  g.padL = c.padL.empty() ? Dims(ns, 0) : c.padL;
  g.dilation = c.dilation.empty() ? Dims(ns, 1) : c.dilation;
  g.groups = c.groups;
  return refConv(x, c.src, w, c.weight, c.bias ? b.data() : nullptr, g, convOutputDims(p));
}

const ConvCase kCases[] = {
    {"k3_pad1", {2, 8, 9, 9}, {16, 8, 3, 3}, {}, {1, 1}, {}, {}, 1, true},
    {"k3_stride2_nobias", {1, 8, 11, 10}, {8, 8, 3, 3}, {2, 2}, {1, 1}, {}, {}, 1, false},
    {"k3_asym_pad", {1, 4, 8, 8}, {8, 4, 3, 3}, {1, 1}, {0, 1}, {2, 1}, {}, 1, true},
    {"k3_dilated2", {1, 4, 12, 12}, {8, 4, 3, 3}, {1, 1}, {2, 2}, {}, {2, 2}, 1, true},
    {"k3_dilated_strided", {1, 4, 13, 12}, {4, 4, 3, 3}, {2, 1}, {1, 2}, {}, {2, 3}, 1, true},
    {"grouped4", {1, 16, 7, 7}, {32, 4, 3, 3}, {}, {1, 1}, {}, {}, 4, true},
    {"depthwise", {2, 16, 8, 8}, {16, 1, 3, 3}, {}, {1, 1}, {}, {}, 16, true},
    {"depthwise_mult2_s2", {1, 8, 9, 9}, {16, 1, 5, 5}, {2, 2}, {2, 2}, {}, {}, 8, false},
    {"pointwise", {2, 24, 5, 6}, {12, 24, 1, 1}, {}, {}, {}, {}, 1, true},
    {"k7_s2_stem", {1, 3, 20, 20}, {8, 3, 7, 7}, {2, 2}, {3, 3}, {}, {}, 1, false},
    {"conv1d", {2, 6, 17}, {10, 6, 5}, {2}, {2}, {}, {}, 1, true},
    {"conv1d_dilated_grouped", {1, 8, 20}, {8, 4, 3}, {1}, {2}, {}, {2}, 2, true},
    {"conv3d", {1, 4, 5, 6, 7}, {8, 4, 3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {}, {}, 1, true},
    {"conv3d_strided_asym", {1, 4, 6, 7, 8}, {4, 4, 2, 3, 3}, {2, 1, 2}, {0, 1, 1}, {1, 0, 1}, {}, 1, false},
};

using ConvFormatParam = std::tuple<ConvCase, Format>;

class ConvGeometryTest : public ::testing::TestWithParam<ConvFormatParam> {};

TEST_P(ConvGeometryTest, MatchesReference) {
  const auto& [c, fmt] = GetParam();
  auto x = randomVec(numel(c.src), 1);
  auto w = randomVec(numel(c.weight), 2);
  auto b = randomVec(c.weight[0], 3);
  ConvParams p = makeParams(c, w, b);
  p.srcFormat = fmt;
  p.dstFormat = fmt;
  VF_ASSERT_OK_AND_ASSIGN(auto k, createConv(p));
  auto want = refFor(c, p, x, w, b);
  EXPECT_EQ(k->dstLayout().dims(), convOutputDims(p));
  if (fmt == Format::kPlain) {
    EXPECT_TRUE(k->srcLayout().isContiguous()) << k->srcLayout().toString();
    EXPECT_TRUE(k->dstLayout().isContiguous()) << k->dstLayout().toString();
  }
  expectClose(runAnyLayout(*k, x), want, 1e-4f, 1e-4f, c.name + " " + k->implInfo());
}

std::string convName(const ::testing::TestParamInfo<ConvFormatParam>& info) {
  const Format f = std::get<1>(info.param);
  return std::get<0>(info.param).name +
         (f == Format::kPlain ? "_plain" : f == Format::kAny ? "_any" : "_nhwc");
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvGeometryTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Format::kPlain, Format::kAny,
                                                              Format::kChannelsLast)),
                         convName);

// ---- post-ops -----------------------------------------------------------------------------------

struct PostOpCase {
  std::string name;
  std::vector<PostOp> ops;
};

const Dims kPoSrc = {2, 8, 6, 6}, kPoW = {16, 8, 3, 3}, kPoDst = {2, 16, 6, 6};

const PostOpCase kPostOpCases[] = {
    {"relu", {PostOp::relu()}},
    {"leaky_relu_0_1", {PostOp::leakyRelu(0.1f)}},
    {"gelu_erf", {PostOp::geluErf()}},
    {"gelu_tanh", {PostOp::geluTanh()}},
    {"silu", {PostOp::silu()}},
    {"sigmoid", {PostOp::sigmoid()}},
    {"tanh", {PostOp::tanh()}},
    {"hardswish", {PostOp::hardswish()}},
    {"hardsigmoid", {PostOp::hardsigmoid()}},
    {"clamp_m0_5_0_3", {PostOp::clamp(-0.5f, 0.3f)}},
    {"relu6", {PostOp::clamp(0.f, 6.f)}},
    {"elu_0_7", {PostOp::elu(0.7f)}},
    {"linear_scale", {PostOp::linear(0.25f, 1.f)}},
    {"sum", {PostOp::sum()}},
    {"sum_scaled_then_relu", {PostOp::sum(0.5f), PostOp::relu()}},
    {"binary_add_per_channel", {PostOp::binary(BinaryAlg::kAdd, {1, 16, 1, 1})}},
    {"binary_mul_full", {PostOp::binary(BinaryAlg::kMul, kPoDst)}},
    {"bn_like_chain",
     {PostOp::binary(BinaryAlg::kMul, {1, 16, 1, 1}), PostOp::binary(BinaryAlg::kAdd, {1, 16, 1, 1}),
      PostOp::hardswish()}},
    {"residual_add_relu", {PostOp::binary(BinaryAlg::kAdd, kPoDst), PostOp::relu()}},
};

using PostOpParam = std::tuple<PostOpCase, Format>;
class ConvPostOpTest : public ::testing::TestWithParam<PostOpParam> {};

TEST_P(ConvPostOpTest, MatchesReference) {
  const auto& [c, fmt] = GetParam();
  // Pre-activation values span about [-8, 8], covering hardswish's and clamp's kinks.
  auto x = randomVec(numel(kPoSrc), 11);
  auto w = randomVec(numel(kPoW), 12);
  auto b = randomVec(16, 13);
  ConvParams p;
  p.srcDims = kPoSrc;
  p.weightDims = kPoW;
  p.weights = w.data();
  p.bias = b.data();
  p.padL = {1, 1};
  p.postOps = c.ops;
  p.srcFormat = fmt;
  p.dstFormat = fmt;
  VF_ASSERT_OK_AND_ASSIGN(auto k, createConv(p));
  std::vector<std::vector<float>> operands;
  uint32_t seed = 20;
  for (const PostOp& op : c.ops) {
    if (op.kind == PostOp::Kind::kBinary) operands.push_back(randomVec(numel(op.binaryDims), seed++));
  }
  auto prior = randomVec(numel(kPoDst), 30, -2.f, 2.f);
  auto want = refConv(x, kPoSrc, w, kPoW, b.data(), {{1, 1}, {1, 1}, {1, 1}, 1}, kPoDst);
  float lo = *std::min_element(want.begin(), want.end());
  float hi = *std::max_element(want.begin(), want.end());
  ASSERT_LT(lo, -3.5f);  // the post-ops are exercised on both sides of their kinks
  ASSERT_GT(hi, 3.5f);
  refPostOps(c.ops, kPoDst, want, prior, operands);
  auto got = runAnyLayout(*k, x, operands, &prior);
  expectClose(got, want, 2e-4f, 1e-4f, c.name + " " + k->implInfo());
  EXPECT_EQ(k->inputLayouts().size(), 1 + operands.size());
}

INSTANTIATE_TEST_SUITE_P(
    PostOps, ConvPostOpTest,
    ::testing::Combine(::testing::ValuesIn(kPostOpCases), ::testing::Values(Format::kPlain, Format::kAny)),
    [](const ::testing::TestParamInfo<PostOpParam>& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) == Format::kPlain ? "_plain" : "_any");
    });

TEST(ConvPostOp, WrongParametersAreDetectable) {
  // The tests above would catch a wrong mapping: the alternatives differ measurably.
  EXPECT_GT(std::fabs(refActivation(Activation::kHardswish, 1.f) - 1.f * (1.f / 5.f + 0.5f)), 1e-3f);
  EXPECT_GT(std::fabs(refActivation(Activation::kGeluErf, 2.f) - refActivation(Activation::kGeluTanh, 2.f)),
            1e-5f);
  EXPECT_NE(refActivation(Activation::kLeakyRelu, -1.f, 0.1f), refActivation(Activation::kLeakyRelu, -1.f, 0.01f));
}

TEST(ConvPostOp, BinaryOperandMustBroadcast) {
  auto w = randomVec(numel(kPoW), 1);
  ConvParams p;
  p.srcDims = kPoSrc;
  p.weightDims = kPoW;
  p.weights = w.data();
  p.padL = {1, 1};
  p.postOps = {PostOp::binary(BinaryAlg::kAdd, {1, 8, 1, 1})};
  auto k = createConv(p);
  ASSERT_FALSE(k.isOk());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
}

// ---- chaining and bf16 --------------------------------------------------------------------------

TEST(Conv, ChainKeepsBlockedLayout) {
  // conv1 (dst any) -> conv2 (src = conv1's dst layout) with no reorder in between.
  const Dims x1 = {1, 16, 10, 10}, w1 = {32, 16, 3, 3}, w2 = {32, 32, 3, 3};
  auto x = randomVec(numel(x1), 1);
  auto wa = randomVec(numel(w1), 2, -0.2f, 0.2f);
  auto wb = randomVec(numel(w2), 3, -0.2f, 0.2f);
  ConvParams p1;
  p1.srcDims = x1;
  p1.weightDims = w1;
  p1.weights = wa.data();
  p1.padL = {1, 1};
  p1.dstFormat = Format::kAny;
  p1.postOps = {PostOp::relu()};
  VF_ASSERT_OK_AND_ASSIGN(auto k1, createConv(p1));
  ConvParams p2;
  p2.srcDims = k1->dstLayout().dims();
  p2.weightDims = w2;
  p2.weights = wb.data();
  p2.padL = {1, 1};
  p2.srcLayout = k1->dstLayout();
  VF_ASSERT_OK_AND_ASSIGN(auto k2, createConv(p2));
  EXPECT_EQ(k2->srcLayout(), k1->dstLayout());
  std::vector<float> mid(k1->dstLayout().byteSize() / 4), out(k2->dstLayout().byteSize() / 4);
  VF_ASSERT_OK(k1->execute({x.data()}, mid.data()));
  VF_ASSERT_OK(k2->execute({mid.data()}, out.data()));
  RefConvGeom g{{1, 1}, {1, 1}, {1, 1}, 1};
  auto r1 = refConv(x, x1, wa, w1, nullptr, g, {1, 32, 10, 10});
  for (float& v : r1) v = std::max(v, 0.f);
  auto r2 = refConv(r1, {1, 32, 10, 10}, wb, w2, nullptr, g, {1, 32, 10, 10});
  expectClose(out, r2, 1e-4f, 1e-4f, "chain " + k1->dstLayout().toString());
}

TEST(Conv, Bf16ComputeIsCloseToF32) {
  VF_SKIP_UNLESS(capabilities().onednnNativeBf16(), "oneDNN on native bf16 (avx512_bf16 or AMX)");
  const Dims xs = {2, 16, 9, 9}, ws = {32, 16, 3, 3}, ds = {2, 32, 9, 9};
  auto x = randomVec(numel(xs), 1);
  auto w = randomVec(numel(ws), 2);
  auto b = randomVec(32, 3);
  for (Format fmt : {Format::kPlain, Format::kAny}) {
    ConvParams p;
    p.srcDims = xs;
    p.weightDims = ws;
    p.weights = w.data();
    p.bias = b.data();
    p.padL = {1, 1};
    p.postOps = {PostOp::relu()};
    p.compute = ComputeType::kBF16;
    p.srcFormat = fmt;
    p.dstFormat = fmt;
    VF_ASSERT_OK_AND_ASSIGN(auto k, createConv(p));
    EXPECT_EQ(k->srcLayout().dtype(), DataType::kF32);
    EXPECT_EQ(k->dstLayout().dtype(), DataType::kF32);
    // Reference on bf16-rounded inputs: only accumulation order differs then.
    std::vector<float> xr(x), wr(w);
    for (float& v : xr) v = roundBf16(v);
    for (float& v : wr) v = roundBf16(v);
    auto want = refConv(xr, xs, wr, ws, b.data(), {{1, 1}, {1, 1}, {1, 1}, 1}, ds);
    for (float& v : want) v = std::max(v, 0.f);
    auto got = runAnyLayout(*k, x);
    expectClose(got, want, 1e-3f, 1e-3f, "bf16 " + k->implInfo());
    auto exact = refConv(x, xs, w, ws, b.data(), {{1, 1}, {1, 1}, {1, 1}, 1}, ds);
    for (float& v : exact) v = std::max(v, 0.f);
    expectClose(got, exact, 5e-2f, 2e-2f, "bf16 vs f32");
    // With a plain f32 dst oneDNN v3.2 picks its bf16 GEMM-based conv ("x64:gemm:jit"); with
    // "any" it picks a brgemm bf16 kernel named after the ISA (avx512_core_bf16, or AMX's).
    std::cout << "[ info ] bf16 conv " << (fmt == Format::kAny ? "any" : "plain") << ": "
              << k->implInfo() << "\n";
    if (fmt == Format::kAny) {
      EXPECT_TRUE(isNativeBf16Impl(k->implInfo())) << "expected a native bf16 implementation, got " << k->implInfo();
    }
  }
}

// ---- a bf16 model's convolution on float32 kernels (widened) --------------------------------------

/// Dense NCHW floats as a channels-last bf16 buffer (each value rounded to nearest even), and back.
std::vector<uint16_t> toChannelsLastBf16(const std::vector<float>& x, const Dims& d) {
  const int64_t N = d[0], C = d[1], HW = numel(d) / (N * C);
  std::vector<uint16_t> out(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < HW; ++s) {
        const float r = roundBf16(x[(n * C + c) * HW + s]);
        uint32_t u;
        std::memcpy(&u, &r, 4);
        out[(n * HW + s) * C + c] = static_cast<uint16_t>(u >> 16);
      }
  return out;
}
std::vector<float> fromChannelsLastBf16(const std::vector<uint16_t>& x, const Dims& d) {
  const int64_t N = d[0], C = d[1], HW = numel(d) / (N * C);
  std::vector<float> out(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < HW; ++s) {
        const uint32_t u = static_cast<uint32_t>(x[(n * HW + s) * C + c]) << 16;
        std::memcpy(&out[(n * C + c) * HW + s], &u, 4);
      }
  return out;
}

// ConvParams::widenBf16: bf16 in and out on oneDNN's float32 convolution (what a bf16 model's
// convolutions run on where oneDNN has no bf16 instructions; forced here so every CPU tests it).
// Reference: double sums over the bf16 source and the weights rounded to bf16 (as the native kernel
// packs them: here weights that are not bf16 values, like a folded batch norm's), + bias, the
// post-ops, one rounding to bf16. Tolerance, derived: the result is within half a bf16 ulp
// (2^-9·|ref|) of a float32 value within K·2^-24·sum|x·w| of ref; one bf16 ulp (2^-8·|ref|) plus
// that covers it.
TEST(Conv, Bf16IoWidenedOnFloat32Kernels) {
  struct Case {
    const char* name;
    Dims xs, ws;
    int64_t groups;
    int64_t pad;
    bool sum;
  };
  const Case cases[] = {{"k3_sum_relu", {2, 16, 9, 9}, {32, 16, 3, 3}, 1, 1, true},
                        {"pointwise_relu", {1, 24, 7, 6}, {40, 24, 1, 1}, 1, 0, false},
                        {"depthwise", {1, 16, 8, 8}, {16, 1, 3, 3}, 16, 1, false},
                        {"stem_3ch", {1, 3, 16, 16}, {8, 3, 7, 7}, 1, 3, false}};
  for (const Case& c : cases) {
    const int64_t outC = c.ws[0];
    const Dims ds = {c.xs[0], outC, c.xs[2] + 2 * c.pad - c.ws[2] + 1, c.xs[3] + 2 * c.pad - c.ws[3] + 1};
    auto x = randomVec(numel(c.xs), 1);
    auto w = randomVec(numel(c.ws), 2);  // float32 values: the kernel rounds them to bf16
    auto b = randomVec(outC, 3);
    auto r = randomVec(numel(ds), 4, -2.f, 2.f);
    for (float& v : x) v = roundBf16(v);
    for (float& v : r) v = roundBf16(v);
    ConvParams p;
    p.srcDims = c.xs;
    p.weightDims = c.ws;
    p.weights = w.data();
    p.bias = b.data();
    p.padL = {c.pad, c.pad};
    p.groups = c.groups;
    p.postOps = c.sum ? std::vector<PostOp>{PostOp::sum(0.5f), PostOp::relu()} : std::vector<PostOp>{PostOp::relu()};
    p.srcFormat = Format::kChannelsLast;
    p.dstFormat = Format::kAny;  // dense channels-last on this path
    p.io = DataType::kBF16;
    p.widenBf16 = true;
    VF_ASSERT_OK_AND_ASSIGN(auto k, createConv(p));
    EXPECT_NE(k->implInfo().find("f32 on bf16io"), std::string::npos) << k->implInfo();
    EXPECT_EQ(k->srcLayout(), Layout::channelsLast(c.xs, DataType::kBF16));
    EXPECT_EQ(k->dstLayout(), Layout::channelsLast(ds, DataType::kBF16));
    const std::vector<uint16_t> xh = toChannelsLastBf16(x, c.xs);
    std::vector<uint16_t> out = toChannelsLastBf16(r, ds);  // the residual, for the sum
    for (int rep = 0; rep < 2 && !c.sum; ++rep) VF_ASSERT_OK(k->execute({xh.data()}, out.data()));
    if (c.sum) VF_ASSERT_OK(k->execute({xh.data()}, out.data()));
    const std::vector<float> got = fromChannelsLastBf16(out, ds);

    std::vector<float> wr(w);
    for (float& v : wr) v = roundBf16(v);
    RefConvGeom g{{1, 1}, {c.pad, c.pad}, {1, 1}, c.groups};
    const auto ref = refConv(x, c.xs, wr, c.ws, b.data(), g, ds);
    std::vector<float> absx(x), absw(wr);
    for (float& v : absx) v = std::fabs(v);
    for (float& v : absw) v = std::fabs(v);
    const auto mag = refConv(absx, c.xs, absw, c.ws, nullptr, g, ds);
    const int64_t K = numel(c.ws) / outC;
    int bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      double want = ref[i];
      if (c.sum) want += 0.5 * r[i];
      want = std::max(want, 0.0);
      const double tol = std::ldexp(std::fabs(want), -8) + K * std::ldexp(mag[i] + (c.sum ? std::fabs(r[i]) : 0.f), -24) + 1e-30;
      if (!(std::fabs(got[i] - want) <= tol) && bad++ < 5) {
        ADD_FAILURE() << c.name << " [" << i << "] = " << got[i] << ", want " << want << " (tolerance " << tol << ")";
      }
      // bf16 values, not float32 ones
      EXPECT_EQ(got[i], roundBf16(got[i])) << c.name << " [" << i << "]";
    }
  }
}

TEST(Conv, Bf16IoWithoutNativeBf16IsWidened) {
  // Without bf16 instructions (an AVX2 or AVX-512 tier), a bf16 model's convolution takes the
  // widened path by itself (oneDNN v3.2 has no bf16 convolution there); with them, the native one.
  auto w = randomVec(8 * 4 * 3 * 3, 2);
  ConvParams p;
  p.srcDims = {1, 4, 6, 6};
  p.weightDims = {8, 4, 3, 3};
  p.weights = w.data();
  p.padL = {1, 1};
  p.srcFormat = p.dstFormat = Format::kChannelsLast;
  p.io = DataType::kBF16;
  VF_ASSERT_OK_AND_ASSIGN(auto k, createConv(p));
  const bool widened = k->implInfo().find("f32 on bf16io") != std::string::npos;
  EXPECT_EQ(widened, !capabilities().onednnNativeBf16()) << k->implInfo() << "; " << capabilities().summary();
  if (!widened) EXPECT_TRUE(isNativeBf16Impl(k->implInfo())) << k->implInfo();
}

TEST(Conv, InvalidChannelsAreRejected) {
  auto w = randomVec(16 * 3 * 3 * 3, 1);
  ConvParams p;
  p.srcDims = {1, 8, 8, 8};
  p.weightDims = {16, 3, 3, 3};
  p.weights = w.data();
  p.groups = 2;
  auto k = createConv(p);
  ASSERT_FALSE(k.isOk());
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verifuse::kernels
