// The attention kernel (kernels/include/verifuse/kernels/attention.h) against a double-precision
// reference: permuted and padded q/k/v layouts, masks of every broadcast shape transformers use,
// KV != S, S not a multiple of the block, B > 1, H > 1, logsumexp, and the refusals.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "verifuse/kernels/attention.h"
#include "verifuse/kernels/kernel.h"

namespace verifuse::kernels {
namespace {

using Strides = std::array<int64_t, 4>;

/// A [B,H,R,C] tensor stored in one of a few physical orders, with optional row padding.
struct Buf {
  std::vector<float> data;
  Strides strides{};
};

enum class Order { kBHRC, kBRHC /* permuted view of [B,R,H,C] */, kPaddedBRHC /* [B,R,H,C+3] */ };

Buf makeBuf(int64_t B, int64_t H, int64_t R, int64_t C, Order order, uint32_t seed) {
  Buf b;
  const int64_t Cp = order == Order::kPaddedBRHC ? C + 3 : C;
  b.data.resize(static_cast<size_t>(B * H * R * Cp));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& x : b.data) x = dist(gen);
  if (order == Order::kBHRC) b.strides = {H * R * C, R * C, C, 1};
  else b.strides = {R * H * Cp, Cp, H * Cp, 1};
  return b;
}

float at(const Buf& b, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return b.data[static_cast<size_t>(i0 * b.strides[0] + i1 * b.strides[1] + i2 * b.strides[2] + i3 * b.strides[3])];
}

struct Case {
  const char* name;
  int64_t B, H, S, KV, D;
  Order order;
  /// Mask shape (before broadcasting to [B,H,S,KV]): 0 none, 1 [B,1,S,KV], 2 [B,1,1,KV], 3 [1,1,S,KV],
  /// 4 [B,H,S,KV]; keys not adjacent: 5 [1,H,S,KV] stored [S,KV,H] (T5's position bias permuted to
  /// heads first), 6 [B,1,S,KV] stored [B,KV,S] (transposed).
  int mask;
  bool lse;
  int64_t blockRows;
  bool causal = false;
  int64_t kvHeads = 0;  ///< grouped-query attention: k and v have fewer heads
};

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, MatchesReference) {
  const Case& c = GetParam();
  Buf q = makeBuf(c.B, c.H, c.S, c.D, c.order, 1);
  const int64_t HK = c.kvHeads ? c.kvHeads : c.H, group = c.H / HK;
  Buf k = makeBuf(c.B, HK, c.KV, c.D, c.order, 2);
  Buf v = makeBuf(c.B, HK, c.KV, c.D, c.order, 3);
  // Output as ATen lays it out: dense in q's dim order.
  Buf o;
  o.data.assign(static_cast<size_t>(c.B * c.H * c.S * c.D), std::nanf(""));
  o.strides = c.order == Order::kBHRC ? Strides{c.H * c.S * c.D, c.S * c.D, c.D, 1}
                                      : Strides{c.S * c.H * c.D, c.D, c.H * c.D, 1};
  std::vector<float> mask;
  Strides ms{};
  if (c.mask) {
    const int64_t mb = c.mask == 3 || c.mask == 5 ? 1 : c.B, mh = c.mask == 4 || c.mask == 5 ? c.H : 1,
                  msq = c.mask == 2 ? 1 : c.S;
    mask.resize(static_cast<size_t>(mb * mh * msq * c.KV));
    std::mt19937 gen(9);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    for (float& x : mask) x = dist(gen);
    // A padding-style entry: every row's last key gets the most negative float (transformers).
    for (int64_t r = 0; r < mh * msq; ++r) mask[static_cast<size_t>(r * c.KV + c.KV - 1)] = std::numeric_limits<float>::lowest();
    ms = {mb > 1 ? mh * msq * c.KV : 0, mh > 1 ? msq * c.KV : 0, msq > 1 ? c.KV : 0, 1};
    if (c.mask == 5) ms = {0, 1, c.KV * c.H, c.H};
    if (c.mask == 6) ms = {c.KV * c.S, 0, 1, c.S};
  }
  std::vector<float> lse(static_cast<size_t>(c.B * c.H * c.S), std::nanf(""));
  const std::array<int64_t, 3> ls{c.S * c.H, 1, c.H};  // ATen's: [B,S,H] transposed

  AttentionParams p;
  p.batch = c.B, p.heads = c.H, p.seq = c.S, p.kvSeq = c.KV, p.headDim = c.D, p.valueDim = c.D;
  p.qStrides = q.strides, p.kStrides = k.strides, p.vStrides = v.strides, p.outStrides = o.strides;
  p.hasMask = c.mask != 0, p.maskStrides = ms;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  p.logsumexp = c.lse, p.lseStrides = ls;
  p.causal = c.causal;
  p.kvHeads = c.kvHeads;
  p.blockRows = c.blockRows;
  auto kern = createAttention(p);
  ASSERT_TRUE(kern.isOk()) << kern.status().toString();
  const int64_t created = primitiveCreationCount();
  for (int rep = 0; rep < 2; ++rep) {  // a second call reuses the primitives and gives the same bits
    Status s = (*kern)->execute(q.data.data(), k.data.data(), v.data.data(), c.mask ? mask.data() : nullptr,
                                o.data.data(), c.lse ? lse.data() : nullptr);
    ASSERT_TRUE(s.isOk()) << s.toString();
  }
  EXPECT_EQ(primitiveCreationCount(), created);

  double worst = 0;
  std::vector<double> sc(static_cast<size_t>(c.KV));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.S; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < c.KV; ++j) {
          double a = 0;
          for (int64_t d = 0; d < c.D; ++d) a += double(at(q, b, h, i, d)) * at(k, b, h / group, j, d);
          a *= p.scale;
          if (c.mask) a += mask[static_cast<size_t>(b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3])];
          if (c.causal && j > i) a = -INFINITY;
          sc[static_cast<size_t>(j)] = a;
          mx = std::max(mx, a);
        }
        double sum = 0;
        for (double& a : sc) sum += (a = std::exp(a - mx));
        for (int64_t d = 0; d < c.D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < c.KV; ++j) acc += sc[static_cast<size_t>(j)] * at(v, b, h / group, j, d);
          const double want = acc / sum;
          const float got = at(o, b, h, i, d);
          ASSERT_TRUE(std::isfinite(got)) << b << "," << h << "," << i << "," << d;
          worst = std::max(worst, std::abs(got - want));
        }
        if (c.lse) {
          const double want = mx + std::log(sum);
          const float got = lse[static_cast<size_t>(b * ls[0] + h * ls[1] + i * ls[2])];
          EXPECT_NEAR(got, want, 1e-5 * (1 + std::abs(want))) << b << "," << h << "," << i;
        }
      }
  EXPECT_LT(worst, 2e-6) << (*kern)->implInfo();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(
        Case{"Contiguous", 1, 1, 16, 16, 8, Order::kBHRC, 0, false, 0},
        Case{"PermutedBertMask", 2, 3, 13, 13, 16, Order::kBRHC, 2, true, 0},
        Case{"PaddedRowsKvNeS", 2, 2, 37, 21, 8, Order::kPaddedBRHC, 1, true, 8},
        Case{"TailBlock", 1, 2, 45, 50, 16, Order::kBRHC, 3, false, 16},
        Case{"FullMask", 2, 2, 9, 11, 4, Order::kBHRC, 4, true, 4},
        Case{"OneRowBlocks", 1, 3, 5, 7, 8, Order::kBRHC, 1, false, 1},
        Case{"LongKv", 1, 2, 70, 300, 32, Order::kBRHC, 0, true, 0},
        Case{"Causal", 2, 2, 37, 37, 16, Order::kBRHC, 0, true, 8, true},
        Case{"CausalMaskKvLonger", 1, 3, 20, 29, 8, Order::kPaddedBRHC, 1, true, 16, true},
        Case{"CausalKvShorter", 1, 2, 30, 12, 8, Order::kBHRC, 2, false, 8, true},
        Case{"GroupedQuery", 2, 4, 12, 12, 16, Order::kBRHC, 0, true, 0, true, 2},
        Case{"GroupedQueryOneKvHead", 1, 3, 10, 14, 8, Order::kBHRC, 1, false, 4, false, 1},
        Case{"PermutedBiasMask", 1, 4, 19, 19, 8, Order::kBRHC, 5, true, 8},
        Case{"TransposedMaskCausal", 2, 2, 21, 17, 8, Order::kBHRC, 6, false, 8, true}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

TEST(AttentionKernel, RefusesWhatItCannotRun) {
  AttentionParams p;
  p.batch = p.heads = 1, p.seq = p.kvSeq = 4, p.headDim = p.valueDim = 4;
  p.qStrides = p.kStrides = p.vStrides = p.outStrides = {16, 16, 4, 1};
  p.qStrides = {16, 16, 1, 4};  // head dim not dense
  EXPECT_EQ(createAttention(p).status().code(), StatusCode::kUnimplemented);
  p.qStrides = {16, 16, 4, 1};
  p.heads = 3, p.kvHeads = 2;  // heads not a multiple of kv heads
  EXPECT_EQ(createAttention(p).status().code(), StatusCode::kInvalidArgument);
  p.heads = 1, p.kvHeads = 0;
  p.seq = 0;
  EXPECT_EQ(createAttention(p).status().code(), StatusCode::kInvalidArgument);
}

TEST(AttentionKernel, FullyMaskedRowIsZeroLikeAten) {
  // Every key masked with -inf: no weight anywhere; ATen's CPU flash kernel (2.13) writes a zero
  // row and logsumexp 0 (measured), not NaN.
  AttentionParams p;
  p.batch = p.heads = 1, p.seq = 2, p.kvSeq = 3, p.headDim = p.valueDim = 8;
  p.qStrides = {16, 16, 8, 1};
  p.kStrides = p.vStrides = {24, 24, 8, 1};
  p.outStrides = {16, 16, 8, 1};
  p.hasMask = true;
  p.maskStrides = {0, 0, 3, 1};
  p.logsumexp = true;
  p.lseStrides = {2, 1, 1};
  std::vector<float> q(16, 0.5f), kv(24, 0.25f), out(16, std::nanf("")), lse(2, std::nanf(""));
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> mask = {-inf, -inf, -inf, 0.f, 0.f, 0.f};
  auto kern = createAttention(p);
  ASSERT_TRUE(kern.isOk()) << kern.status().toString();
  ASSERT_TRUE((*kern)->execute(q.data(), kv.data(), kv.data(), mask.data(), out.data(), lse.data()).isOk());
  for (int d = 0; d < 8; ++d) EXPECT_EQ(out[d], 0.f);
  EXPECT_FLOAT_EQ(out[8], 0.25f);
  EXPECT_EQ(lse[0], 0.f);
  EXPECT_NEAR(lse[1], 1.f + std::log(3.f), 1e-6);  // scale 1: q·k = 8 * 0.5 * 0.25
}

}  // namespace
}  // namespace verifuse::kernels
