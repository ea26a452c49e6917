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
