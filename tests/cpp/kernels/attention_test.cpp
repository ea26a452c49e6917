// The attention kernel (kernels/include/verifuse/kernels/attention.h) against a double-precision
// reference: permuted and padded q/k/v layouts, masks of every broadcast shape transformers use,
// KV != S, S not a multiple of the block, B > 1, H > 1, logsumexp, and the refusals.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "verifuse/kernels/attention.h"
#include "verifuse/kernels/cpu_features.h"
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

/// The double-precision reference of one output row (b, h, i): out[d] for d < D, and the row's
/// max and sum of exp(x - max) (its logsumexp is max + log(sum)).
struct ReferenceRow {
  std::vector<double> out;
  double mx = -INFINITY, sum = 0;
};
ReferenceRow referenceRow(const Buf& q, const Buf& k, const Buf& v, const std::vector<float>& mask, const Strides& ms,
                          int64_t b, int64_t h, int64_t i, int64_t kvHead, int64_t KV, int64_t D, double scale,
                          bool causal) {
  ReferenceRow r;
  std::vector<double> sc(static_cast<size_t>(KV));
  for (int64_t j = 0; j < KV; ++j) {
    double a = 0;
    for (int64_t d = 0; d < D; ++d) a += double(at(q, b, h, i, d)) * at(k, b, kvHead, j, d);
    a *= scale;
    if (!mask.empty()) a += mask[static_cast<size_t>(b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3])];
    if (causal && j > i) a = -INFINITY;
    sc[static_cast<size_t>(j)] = a;
    r.mx = std::max(r.mx, a);
  }
  for (double& a : sc) r.sum += (a = std::exp(a - r.mx));
  r.out.resize(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) {
    double acc = 0;
    for (int64_t j = 0; j < KV; ++j) acc += sc[static_cast<size_t>(j)] * at(v, b, kvHead, j, d);
    r.out[static_cast<size_t>(d)] = acc / r.sum;
  }
  return r;
}

class AttentionTest : public ::testing::TestWithParam<Case> {};

void checkAgainstReference(const Case& c, const char* tiles);

// With the own f32 tiles (on an AVX-512 CPU) and with oneDNN's matmuls (VERIFUSE_ATTENTION_TILES=0).
TEST_P(AttentionTest, MatchesReference) {
  for (const char* tiles : {"1", "0"}) {
    SCOPED_TRACE(std::string("VERIFUSE_ATTENTION_TILES=") + tiles);
    checkAgainstReference(GetParam(), tiles);
  }
}

void checkAgainstReference(const Case& c, const char* tiles) {
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
  setenv("VERIFUSE_ATTENTION_TILES", tiles, 1);
  auto kern = createAttention(p);
  unsetenv("VERIFUSE_ATTENTION_TILES");
  ASSERT_TRUE(kern.isOk()) << kern.status().toString();
  const bool ownTiles = std::string(tiles) == "1" && cpu::hasAvx512();
  EXPECT_EQ((*kern)->implInfo().find("own f32 tiles") != std::string::npos, ownTiles) << (*kern)->implInfo();
  const int64_t created = primitiveCreationCount();
  for (int rep = 0; rep < 2; ++rep) {  // a second call reuses the primitives and gives the same bits
    Status s = (*kern)->execute(q.data.data(), k.data.data(), v.data.data(), c.mask ? mask.data() : nullptr,
                                o.data.data(), c.lse ? lse.data() : nullptr);
    ASSERT_TRUE(s.isOk()) << s.toString();
  }
  EXPECT_EQ(primitiveCreationCount(), created);

  double worst = 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.S; ++i) {
        const ReferenceRow ref = referenceRow(q, k, v, mask, ms, b, h, i, h / group, c.KV, c.D, p.scale, c.causal);
        for (int64_t d = 0; d < c.D; ++d) {
          const double want = ref.out[static_cast<size_t>(d)];
          const float got = at(o, b, h, i, d);
          ASSERT_TRUE(std::isfinite(got)) << b << "," << h << "," << i << "," << d;
          worst = std::max(worst, std::abs(got - want));
        }
        if (c.lse) {
          const double want = ref.mx + std::log(ref.sum);
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

// ---- bf16 ----------------------------------------------------------------------------------------

uint16_t toBf16(float x) {  // round to nearest even (finite inputs only here)
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float fromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct Bf16Case {
  const char* name;
  int64_t B, H, S, KV, D;
  Order order;
  int mask;  // as Case::mask: 0 none, 2 [B,1,1,KV], 4 [B,H,S,KV], 5 T5's permuted position bias
  int64_t blockRows;
  bool causal = false;
  int64_t kvHeads = 0;
};

/// Runs one bf16 case with VERIFUSE_ATTENTION_TILES set to \p tiles (and \p widen:
/// AttentionParams::widenBf16, float32 matmuls on widened data); returns the output (floats) and
/// the kernel's implInfo.
std::pair<std::vector<float>, std::string> runBf16(const Bf16Case& c, const char* tiles, const Buf& q, const Buf& k,
                                                   const Buf& v, const std::vector<float>& mask, const Strides& ms,
                                                   const Strides& os, bool widen = false) {
  auto bits = [](const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = toBf16(x[i]);
    return h;
  };
  const std::vector<uint16_t> qh = bits(q.data), kh = bits(k.data), vh = bits(v.data), mh = bits(mask);
  std::vector<uint16_t> out(static_cast<size_t>(c.B * c.H * c.S * c.D), 0x7FC0);  // NaN
  AttentionParams p;
  p.batch = c.B, p.heads = c.H, p.seq = c.S, p.kvSeq = c.KV, p.headDim = c.D, p.valueDim = c.D;
  p.qStrides = q.strides, p.kStrides = k.strides, p.vStrides = v.strides, p.outStrides = os;
  p.hasMask = c.mask != 0, p.maskStrides = ms;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  p.causal = c.causal, p.kvHeads = c.kvHeads, p.blockRows = c.blockRows;
  p.bf16 = true;
  p.widenBf16 = widen;
  setenv("VERIFUSE_ATTENTION_TILES", tiles, 1);
  auto kern = createAttention(p);
  unsetenv("VERIFUSE_ATTENTION_TILES");
  EXPECT_TRUE(kern.isOk()) << kern.status().toString();
  if (!kern.isOk()) return {};
  for (int rep = 0; rep < 2; ++rep) {
    Status s = (*kern)->execute(qh.data(), kh.data(), vh.data(), c.mask ? mh.data() : nullptr, out.data(), nullptr);
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  std::vector<float> got(out.size());
  for (size_t i = 0; i < out.size(); ++i) got[i] = fromBf16(out[i]);
  return {got, (*kern)->implInfo()};
}

class AttentionBf16Test : public ::testing::TestWithParam<Bf16Case> {};

// bf16 q, k, v and mask against a double reference on the same bf16 values, with the own tiles
// (on an AVX512-BF16 CPU), with oneDNN's matmuls, and widened (float32 matmuls on the widened
// values, the probabilities rounded to bf16 in place: what CPUs without bf16 instructions run). Tolerance, derived: the probabilities are
// rounded to bf16 (relative 2^-9 each, so the weighted sum of |v| <= 1 moves by <= 2^-9) and the
// output once (2^-9 of |out| <= 1), the f32 sums add far less: 2^-8 in all; the two kernels sum in
// different orders, so they may differ by one bf16 rounding step of the output (2^-8 near 1) plus
// a probability's rounding flipped by a last-bit difference in its score.
TEST_P(AttentionBf16Test, MatchesReferenceWithOwnTilesAndOnednn) {
  const Bf16Case& c = GetParam();
  auto roundAll = [](Buf b) {
    for (float& x : b.data) x = fromBf16(toBf16(x));
    return b;
  };
  const Buf q = roundAll(makeBuf(c.B, c.H, c.S, c.D, c.order, 1));
  const int64_t HK = c.kvHeads ? c.kvHeads : c.H, group = c.H / HK;
  const Buf k = roundAll(makeBuf(c.B, HK, c.KV, c.D, c.order, 2));
  const Buf v = roundAll(makeBuf(c.B, HK, c.KV, c.D, c.order, 3));
  const Strides os = c.order == Order::kBHRC ? Strides{c.H * c.S * c.D, c.S * c.D, c.D, 1}
                                             : Strides{c.S * c.H * c.D, c.D, c.H * c.D, 1};
  std::vector<float> mask;
  Strides ms{};
  if (c.mask) {
    const int64_t mb = c.mask == 5 ? 1 : c.B, mh = c.mask == 4 || c.mask == 5 ? c.H : 1, msq = c.mask == 2 ? 1 : c.S;
    mask.resize(static_cast<size_t>(mb * mh * msq * c.KV));
    std::mt19937 gen(9);
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    for (float& x : mask) x = fromBf16(toBf16(dist(gen)));
    for (int64_t r = 0; r < mh * msq; ++r) mask[static_cast<size_t>(r * c.KV + c.KV - 1)] = -3.3895314e38f;  // bf16 lowest
    ms = {mb > 1 ? mh * msq * c.KV : 0, mh > 1 ? msq * c.KV : 0, msq > 1 ? c.KV : 0, 1};
    if (c.mask == 5) ms = {0, 1, c.KV * c.H, c.H};
  }
  const auto [own, ownImpl] = runBf16(c, "1", q, k, v, mask, ms, os);
  const auto [dnn, dnnImpl] = runBf16(c, "0", q, k, v, mask, ms, os);
  const auto [wid, widImpl] = runBf16(c, "1", q, k, v, mask, ms, os, /*widen=*/true);
  ASSERT_FALSE(own.empty());
  ASSERT_FALSE(dnn.empty());
  ASSERT_FALSE(wid.empty());
  EXPECT_NE(widImpl.find("f32 on bf16io"), std::string::npos) << widImpl;
  EXPECT_EQ(widImpl.find("own"), std::string::npos) << widImpl;
  if (cpu::hasAvx512Bf16()) {
    EXPECT_NE(ownImpl.find("own bf16 tiles"), std::string::npos) << ownImpl;
  }
  EXPECT_EQ(dnnImpl.find("own"), std::string::npos) << dnnImpl;

  double worstOwn = 0, worstDnn = 0, worstApart = 0, worstWid = 0, worstWidApart = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.S; ++i) {
        const ReferenceRow ref = referenceRow(q, k, v, mask, ms, b, h, i, h / group, c.KV, c.D, scale, c.causal);
        for (int64_t d = 0; d < c.D; ++d) {
          const double want = ref.out[static_cast<size_t>(d)];
          const size_t at0 = static_cast<size_t>(b * os[0] + h * os[1] + i * os[2] + d);
          ASSERT_TRUE(std::isfinite(own[at0]) && std::isfinite(dnn[at0]) && std::isfinite(wid[at0]))
              << b << "," << h << "," << i << "," << d;
          worstOwn = std::max(worstOwn, std::abs(own[at0] - want));
          worstWid = std::max(worstWid, std::abs(wid[at0] - want));
          worstWidApart = std::max(worstWidApart, double(std::abs(own[at0] - wid[at0])));
          worstDnn = std::max(worstDnn, std::abs(dnn[at0] - want));
          worstApart = std::max(worstApart, double(std::abs(own[at0] - dnn[at0])));
        }
      }
  EXPECT_LT(worstOwn, 1.0 / 256) << ownImpl;
  EXPECT_LT(worstDnn, 1.0 / 256) << dnnImpl;
  EXPECT_LT(worstApart, 1.0 / 128);
  EXPECT_LT(worstWid, 1.0 / 256) << widImpl;
  EXPECT_LT(worstWidApart, 1.0 / 128);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionBf16Test,
    ::testing::Values(
        // BERT's head shape: one 128-row block, 8 key panels, 4 value panels.
        Bf16Case{"BertHead", 2, 3, 128, 128, 64, Order::kBRHC, 2, 0},
        // Odd head dim (the last pair half-empty), odd KV (a half-empty value pair and key panel).
        Bf16Case{"OddDimOddKv", 1, 2, 13, 21, 7, Order::kBRHC, 0, 0},
        // Head dim 80: a 4-panel and a 1-panel value group, the last panel partly written; row
        // tails of every height 1..7 over several blocks.
        Bf16Case{"Dim80Tails", 1, 2, 47, 33, 80, Order::kPaddedBRHC, 4, 8},
        Bf16Case{"Dim96RowTails", 1, 1, 29, 50, 96, Order::kBHRC, 0, 0},
        // Causal with blocks of 17 rows: each block multiplies only the keys its rows see, and
        // its last row sees a key just past a 16-key panel (key 16, 33, ...).
        Bf16Case{"CausalBlocks", 2, 2, 70, 70, 64, Order::kBRHC, 0, 17, true},
        Bf16Case{"CausalGroupedQuery", 1, 4, 40, 40, 32, Order::kBHRC, 0, 8, true, 2},
        // T5: the position bias left in its permuted layout (gathered per row), no scale in T5
        // itself but the kernel's scale is independent of it.
        Bf16Case{"PermutedBias", 2, 4, 33, 33, 64, Order::kBRHC, 5, 0}),
    [](const ::testing::TestParamInfo<Bf16Case>& i) { return std::string(i.param.name); });

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
