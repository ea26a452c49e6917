// The attention kernel's row step (kernels/src/cpu/attention_rows.h) on whichever ISA path this CPU
// takes (AVX-512, AVX2 or scalar), against a double reference: every length up to 40 (masked
// tails), a long row, -inf mask entries, a fully masked row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/attention_rows.h"
#include "cpu/rowwise_internal.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {
namespace {

using RowFn = float (*)(float*, const float*, int64_t, float, float*);

float viaDispatch(float* s, const float* mask, int64_t n, float scale, float* sum) {
  return attentionSoftmaxRow(s, mask, 1, n, scale, sum);
}

float avx512F32(float* s, const float* mask, int64_t n, float scale, float* sum) {
  return detail::attentionSoftmaxRowAvx512(s, mask, n, scale, sum, nullptr, false);
}

/// Every path this CPU can run: the dispatcher's choice, and each ISA variant directly.
std::vector<std::pair<const char*, RowFn>> paths() {
  std::vector<std::pair<const char*, RowFn>> out = {{"dispatch", viaDispatch}};
  if (hasAvx2Fma()) out.emplace_back("avx2", detail::attentionSoftmaxRowAvx2);
  if (hasAvx512() && hasAvx2Fma()) out.emplace_back("avx512", avx512F32);
  return out;
}

void checkAgainstDouble(RowFn fn) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<int64_t> lengths;
  for (int64_t n = 1; n <= 40; ++n) lengths.push_back(n);
  lengths.push_back(1500);
  for (int64_t n : lengths) {
    for (bool withMask : {false, true}) {
      std::vector<float> s(static_cast<size_t>(n)), mask(static_cast<size_t>(n));
      for (float& x : s) x = dist(gen);
      for (float& x : mask) x = dist(gen);
      if (withMask && n > 2) mask[1] = ninf;  // a masked key
      std::vector<float> orig = s;
      float sum = -1;
      const float scale = 0.37f;
      const float mx = fn(s.data(), withMask ? mask.data() : nullptr, n, scale, &sum);
      float wantMax = ninf;
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        x[j] = orig[j] * scale;  // two roundings, as the kernel
        if (withMask) x[j] += mask[j];
        wantMax = std::fmax(wantMax, x[j]);
      }
      ASSERT_EQ(mx, wantMax) << n;
      double wantSum = 0;
      for (int64_t j = 0; j < n; ++j) {
        // x - max rounded to float as the kernel does; exp itself within ~1 ulp (vecmath's 0.95).
        const double e = std::exp(static_cast<double>(x[j] - wantMax));
        wantSum += e;
        ASSERT_NEAR(s[j], e, 1.2e-7 * e + 1e-45) << "n " << n << " j " << j;
      }
      EXPECT_NEAR(sum, wantSum, 1e-6 * wantSum) << n;
    }
  }
}

TEST(AttentionRows, MatchesDoubleReference) {
  for (const auto& [name, fn] : paths()) {
    SCOPED_TRACE(name);
    checkAgainstDouble(fn);
  }
}

TEST(AttentionRows, Bf16ProbabilitiesAreTheFloatOnesRoundedToNearestEven) {
  // bf16 attention: the row step writes P in bf16 itself; each value must be the float path's
  // value rounded to nearest even (what the reorder of the f32 tile gave), the same max and sum.
  // On AVX-512 the bf16 probabilities come from a cheaper exp (expForBf16Probabilities, within
  // 2^-17 of exp): there a value may be the other bf16 neighbour when the float one lies within
  // 2^-17 of a rounding midpoint (a few in a thousand), and the sum is within 2^-16 relative.
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  const float ninf = -std::numeric_limits<float>::infinity();
  const bool cheaperExp = hasAvx512();
  int sumsDiffer = 0;
  for (int64_t n : {1, 7, 16, 17, 31, 33, 128, 1500}) {
    for (bool withMask : {false, true}) {
      std::vector<float> s(static_cast<size_t>(n)), mask(static_cast<size_t>(n));
      for (float& x : s) x = dist(gen);
      for (float& x : mask) x = dist(gen);
      if (withMask && n > 2) mask[1] = ninf;
      std::vector<float> f32 = s, scratch = s;
      std::vector<uint16_t> bf(static_cast<size_t>(n), 0xFFFF);
      float sumF = -1, sumB = -1;
      const float* m = withMask ? mask.data() : nullptr;
      const float mxF = attentionSoftmaxRow(f32.data(), m, 1, n, 0.37f, &sumF);
      for (bool exact : {false, true}) {
        scratch = s;
        const float mxB = attentionSoftmaxRow(scratch.data(), m, 1, n, 0.37f, &sumB, bf.data(), exact);
        EXPECT_EQ(mxF, mxB);
        if (cheaperExp) {
          EXPECT_NEAR(sumB, sumF, std::ldexp(sumF, -16));
          sumsDiffer += sumB != sumF;
        } else {
          EXPECT_EQ(sumF, sumB);
        }
        int64_t neighbours = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float f = f32[static_cast<size_t>(j)];
          uint32_t u;
          std::memcpy(&u, &f, 4);
          const uint16_t want = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
          const uint16_t got = bf[static_cast<size_t>(j)];
          if (got == want) continue;
          ASSERT_TRUE(cheaperExp) << "n " << n << " j " << j << " exact " << exact;
          // The other neighbour: f within 2^-17 of the midpoint between the two.
          const uint32_t gotBits = static_cast<uint32_t>(got) << 16, wantBits = static_cast<uint32_t>(want) << 16;
          float gotF, wantF;
          std::memcpy(&gotF, &gotBits, 4);
          std::memcpy(&wantF, &wantBits, 4);
          ASSERT_LE(std::fabs(f - 0.5f * (gotF + wantF)), std::ldexp(f, -17)) << "n " << n << " j " << j;
          ++neighbours;
        }
        EXPECT_LE(neighbours * 100, n + 99) << "n " << n;  // at most ~1%
      }
    }
  }
  // The cheaper exp is the one in use: its sums are not the float path's bits.
  if (cheaperExp) EXPECT_GT(sumsDiffer, 8);
  std::vector<float> s(20, 1.f), mask(20, ninf);
  std::vector<uint16_t> bf(20, 0xFFFF);
  float sum = -1;
  EXPECT_EQ(attentionSoftmaxRow(s.data(), mask.data(), 1, 20, 1.f, &sum, bf.data()), ninf);
  for (uint16_t v : bf) EXPECT_EQ(v, 0);  // a fully masked row: zeros, as the f32 path
}

TEST(AttentionRows, Bf16DenormalProbabilitiesAreKeptOnlyWhenExact) {
  // Weights exp(-90) ~ 8e-40 are bf16 denormals: the exact rounding keeps them; the AVX512-BF16
  // conversion (the default on such CPUs) flushes them to zero, and every normal weight is the same.
  std::vector<float> s(40);
  for (size_t j = 0; j < s.size(); ++j) s[j] = j % 2 ? -90.f : -0.25f * static_cast<float>(j);
  std::vector<uint16_t> exact(s.size()), fast(s.size());
  float sum;
  std::vector<float> scratch = s;
  attentionSoftmaxRow(scratch.data(), nullptr, 1, static_cast<int64_t>(s.size()), 1.f, &sum, exact.data(), true);
  scratch = s;
  attentionSoftmaxRow(scratch.data(), nullptr, 1, static_cast<int64_t>(s.size()), 1.f, &sum, fast.data());
  const bool flushes = hasAvx512() && hasAvx512Bf16();
  for (size_t j = 0; j < s.size(); ++j) {
    if (j % 2 == 0) {
      EXPECT_EQ(fast[j], exact[j]) << j;
    } else {
      EXPECT_GT(exact[j], 0) << j;            // a denormal, not zero
      EXPECT_LT(exact[j], 0x0080) << j;
      EXPECT_EQ(fast[j], flushes ? 0 : exact[j]) << j;
    }
  }
}

TEST(AttentionRows, Bf16MaskIsReadAsItsWidenedFloats) {
  // The row step reading a bf16 mask row gives the bits of the float row step on the widened mask.
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  for (int64_t n : {1, 15, 16, 17, 128, 301}) {
    std::vector<float> s(static_cast<size_t>(n)), wide(static_cast<size_t>(n));
    std::vector<uint16_t> mask(static_cast<size_t>(n));
    for (float& x : s) x = dist(gen);
    for (int64_t j = 0; j < n; ++j) {
      mask[static_cast<size_t>(j)] = j == n / 2 ? uint16_t{0xFF7F} : rowwise::detail::floatToBf16(dist(gen));  // bf16 lowest
      wide[static_cast<size_t>(j)] = rowwise::detail::bf16ToFloat(mask[static_cast<size_t>(j)]);
    }
    for (bool bf16Out : {false, true}) {
      std::vector<float> a = s, b = s;
      std::vector<uint16_t> pa(static_cast<size_t>(n)), pb(static_cast<size_t>(n));
      float sa, sb;
      const float ma = attentionSoftmaxRow(a.data(), wide.data(), 1, n, 0.3f, &sa, bf16Out ? pa.data() : nullptr);
      const float mb = attentionSoftmaxRowBf16Mask(b.data(), mask.data(), n, 0.3f, &sb, bf16Out ? pb.data() : nullptr);
      EXPECT_EQ(ma, mb);
      EXPECT_EQ(sa, sb);
      if (bf16Out) EXPECT_EQ(pa, pb) << n;
      else EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << n;
    }
  }
}

TEST(AttentionRows, ScaledOutputRowsRoundToNearestEvenLikeTorch) {
  std::mt19937 gen(6);
  std::uniform_real_distribution<float> dist(-3.f, 3.f);
  for (int64_t n : {1, 16, 33, 64, 80}) {
    std::vector<float> from(static_cast<size_t>(n));
    for (float& x : from) x = dist(gen);
    from[0] = std::nanf("");
    if (n > 2) from[1] = 1e-39f;  // a denormal product stays a (bf16) denormal
    const float r = 0.73f;
    std::vector<float> f(static_cast<size_t>(n) + 1, -7.f);
    std::vector<uint16_t> h(static_cast<size_t>(n) + 1, 0xABCD);
    attentionScaleRow(from.data(), r, n, f.data());
    attentionScaleRowToBf16(from.data(), r, n, h.data());
    for (int64_t j = 0; j < n; ++j) {
      const float want = from[static_cast<size_t>(j)] * r;
      if (j == 0) {
        EXPECT_TRUE(std::isnan(f[0]));
      } else {
        EXPECT_EQ(f[static_cast<size_t>(j)], want) << j;
      }
      EXPECT_EQ(h[static_cast<size_t>(j)], rowwise::detail::floatToBf16(want)) << j;
    }
    EXPECT_EQ(f[static_cast<size_t>(n)], -7.f);  // nothing written past the row
    EXPECT_EQ(h[static_cast<size_t>(n)], 0xABCD);
  }
}

TEST(AttentionRows, FullyMaskedRowIsZero) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t n : {3, 17, 33}) {
    std::vector<float> s(static_cast<size_t>(n), 1.f), mask(static_cast<size_t>(n), ninf);
    float sum = -1;
    EXPECT_EQ(attentionSoftmaxRow(s.data(), mask.data(), 1, n, 1.f, &sum), ninf);
    EXPECT_EQ(sum, 0.f);
    for (float v : s) EXPECT_EQ(v, 0.f);
  }
}

TEST(AttentionRows, BroadcastMaskValue) {
  // maskStride 0: one mask value for the whole row (a [.., 1] mask); the scalar path takes it.
  std::vector<float> s = {1.f, 2.f, 3.f};
  const float m = -0.5f;
  float sum = 0;
  const float mx = attentionSoftmaxRow(s.data(), &m, 0, 3, 1.f, &sum);
  EXPECT_EQ(mx, 2.5f);
  EXPECT_NEAR(sum, std::exp(-2.0) + std::exp(-1.0) + 1.0, 1e-6);
}

}  // namespace
}  // namespace verifuse::kernels::cpu
