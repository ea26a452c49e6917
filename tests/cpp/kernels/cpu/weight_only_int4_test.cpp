// Int4WeightMatmul (kernels/weight_only.h) against its definition, bit for bit: the dequantized
// weight float32((Q - Z) * S) per row and group (torchao's own arithmetic), a 16-lane float32
// accumulator per output (lane j: the k = j mod 16) summed with fused multiply-adds in ascending
// k, reduced by the fixed tree, then the bias. Shapes:
// one row (decode), rows around the variants' 2-row tiles, columns not a multiple of 8, strided
// rows, several group sizes, codes at -8 and 7, zero points of both signs. The AVX2 and AVX-512
// variants are also compared with each other.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "cpu/weight_only_internal.h"
#include "tier_skip.h"
#include "verifuse/kernels/weight_only.h"

namespace verifuse::kernels {
namespace {

struct Case {
  int64_t rows, n, k, group, ldx;
  std::vector<float> x, scale, bias;
  std::vector<int8_t> codes, zero;
};

Case make(int64_t rows, int64_t n, int64_t k, int64_t group, int64_t ldxExtra, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-8, 7), zp(-8, 7);
  Case c{rows, n, k, group, k + ldxExtra, {}, {}, {}, {}, {}};
  c.x.resize(static_cast<size_t>(std::max<int64_t>(rows, 1) * c.ldx));
  for (float& v : c.x) v = normal(gen);
  c.codes.resize(static_cast<size_t>(n * k));
  for (size_t i = 0; i < c.codes.size(); ++i) {
    // Every fifth code at an end of the range (-8 must not read as 8, nor 7 as -9).
    c.codes[i] = static_cast<int8_t>(i % 5 == 0 ? (i % 10 == 0 ? -8 : 7) : code(gen));
  }
  const int64_t groups = k / group;
  c.scale.resize(static_cast<size_t>(n * groups));
  c.zero.resize(c.scale.size());
  for (size_t i = 0; i < c.scale.size(); ++i) {
    c.scale[i] = 0.01f + 0.05f * std::abs(normal(gen));
    c.zero[i] = static_cast<int8_t>(i % 3 == 0 ? 0 : zp(gen));
  }
  c.bias.resize(static_cast<size_t>(n));
  for (float& v : c.bias) v = normal(gen);
  return c;
}

float dequantized(const Case& c, int64_t n, int64_t k) {
  const int64_t g = n * (c.k / c.group) + k / c.group;
  return (static_cast<float>(c.codes[n * c.k + k]) - static_cast<float>(c.zero[g])) * c.scale[g];
}

std::vector<float> reference(const Case& c, bool withBias) {
  std::vector<float> y(static_cast<size_t>(c.rows * c.n));
  for (int64_t m = 0; m < c.rows; ++m) {
    for (int64_t n = 0; n < c.n; ++n) {
      float v[16] = {};
      for (int64_t k0 = 0; k0 < c.k; k0 += 16) {
        for (int j = 0; j < 16; ++j) v[j] = std::fma(c.x[m * c.ldx + k0 + j], dequantized(c, n, k0 + j), v[j]);
      }
      for (int width = 8; width >= 1; width /= 2) {
        for (int j = 0; j < width; ++j) v[j] = v[j] + v[j + width];
      }
      y[m * c.n + n] = withBias ? v[0] + c.bias[n] : v[0];
    }
  }
  return y;
}

StatusOr<std::unique_ptr<Int4WeightMatmul>> pack(const Case& c) {
  return Int4WeightMatmul::create(c.codes.data(), c.scale.data(), c.zero.data(), c.n, c.k, c.group);
}

TEST(Int4WeightMatmul, MatchesItsDefinitionBitForBit) {
  if (!int4WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  struct Shape { int64_t rows, n, k, group, ldxExtra; };
  const Shape shapes[] = {{1, 896, 896, 32, 0}, {1, 5, 32, 32, 0},   {2, 8, 64, 32, 3},  {3, 17, 128, 64, 0},
                          {4, 33, 256, 128, 1}, {5, 1, 96, 32, 0},   {7, 50, 64, 64, 0}, {16, 129, 192, 32, 5},
                          {1, 4864, 896, 128, 0}, {2, 9, 48, 16, 0}, {3, 23, 80, 16, 2}};
  uint32_t seed = 1;
  for (int variant = 0; variant < 2 * static_cast<int>(std::size(shapes)); ++variant) {
    const Shape& s = shapes[variant / 2];
    const bool symmetric = variant % 2 == 1;  // torchao's default mapping: every zero point 0
    Case c = make(s.rows, s.n, s.k, s.group, s.ldxExtra, seed++);
    if (symmetric) std::fill(c.zero.begin(), c.zero.end(), int8_t{0});
    auto made = pack(c);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    ASSERT_EQ((*made)->symmetric(), symmetric);
    for (bool withBias : {false, true}) {
      std::vector<float> y(static_cast<size_t>(s.rows * s.n), -1.f);
      ASSERT_TRUE((*made)->run(c.x.data(), s.rows, c.ldx, withBias ? c.bias.data() : nullptr, y.data(), s.n).isOk());
      const std::vector<float> want = reference(c, withBias);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
            << "rows " << s.rows << " n " << s.n << " k " << s.k << " group " << s.group << " at " << i << ": "
            << y[i] << " vs " << want[i] << " (" << (*made)->implInfo() << (symmetric ? ", symmetric" : "") << ")";
      }
    }
  }
}

TEST(Int4WeightMatmul, ResultDoesNotDependOnThreadsOrOtherRows) {
  if (!int4WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  const Case c = make(11, 300, 160, 32, 0, 42);
  auto made = pack(c);
  ASSERT_TRUE(made.isOk());
  std::vector<float> all(static_cast<size_t>(c.rows * c.n)), one(static_cast<size_t>(c.n)), two(all.size());
  ASSERT_TRUE((*made)->run(c.x.data(), c.rows, c.ldx, nullptr, all.data(), c.n).isOk());
  ASSERT_TRUE((*made)->run(c.x.data() + 5 * c.ldx, 1, c.ldx, nullptr, one.data(), c.n).isOk());
  EXPECT_EQ(std::memcmp(one.data(), all.data() + 5 * c.n, one.size() * sizeof(float)), 0);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(saved > 1 ? 1 : 2);
  ASSERT_TRUE((*made)->run(c.x.data(), c.rows, c.ldx, nullptr, two.data(), c.n).isOk());
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(two.data(), all.data(), all.size() * sizeof(float)), 0);
}

TEST(Int4WeightMatmul, AvxTwoAndAvx512VariantsGiveTheSameBits) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512 (to compare both variants)");
  for (int64_t rows : {1, 2, 3, 6}) {
    for (bool symmetric : {false, true}) {
      Case c = make(rows, 11, 128, 64, 0, static_cast<uint32_t>(rows));
      if (symmetric) std::fill(c.zero.begin(), c.zero.end(), int8_t{0});
      auto made = pack(c);
      ASSERT_TRUE(made.isOk());
      ASSERT_EQ((*made)->symmetric(), symmetric);
      // Block 1 (columns 8..10) of the packed stream through both variants.
      const int64_t blockWords = (c.k / c.group) * weight_only::int4HeaderWords(symmetric) + c.k;
      const uint32_t* block = (*made)->packedData() + blockWords;
      std::vector<float> a(static_cast<size_t>(rows * 3)), b(a.size());
      weight_only::int4BlockAvx512(c.x.data(), rows, c.ldx, block, 2, 4, symmetric, c.bias.data() + 8, a.data(), 3, 3);
      weight_only::int4BlockAvx2(c.x.data(), rows, c.ldx, block, 2, 4, symmetric, c.bias.data() + 8, b.data(), 3, 3);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "rows " << rows << " " << symmetric;
    }
  }
}

TEST(Int4WeightMatmul, PanelsAreTheDequantizedWeightsBitForBit) {
  if (!int4WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  for (bool symmetric : {false, true}) {
    Case c = make(1, 150, 96, 32, 0, 5);  // 3 panels, the last of 22 columns
    if (symmetric) std::fill(c.zero.begin(), c.zero.end(), int8_t{0});
    auto made = pack(c);
    ASSERT_TRUE(made.isOk());
    std::vector<float> panel(static_cast<size_t>(Int4WeightMatmul::kPanelColumns * c.k), -1.f);
    for (int64_t p = 0; p < 3; ++p) {
      ASSERT_TRUE((*made)->dequantize(p, panel.data()).isOk());
      for (int64_t col = 0; col < Int4WeightMatmul::kPanelColumns; ++col) {
        const int64_t n = p * Int4WeightMatmul::kPanelColumns + col;
        for (int64_t k = 0; k < c.k; ++k) {
          const float want = n < c.n ? dequantized(c, n, k) : 0.f;
          ASSERT_EQ(std::memcmp(&panel[col * c.k + k], &want, sizeof(float)), 0)
              << "column " << n << " k " << k << (symmetric ? " symmetric" : "");
        }
      }
    }
    EXPECT_FALSE((*made)->dequantize(3, panel.data()).isOk());
  }
}

TEST(Int4WeightMatmul, WhatItCannotTakeIsAnError) {
  if (!int4WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  Case c = make(1, 2, 64, 32, 0, 7);
  c.codes[37] = 8;  // not an int4 code: the caller runs the source's composition instead
  EXPECT_EQ(pack(c).status().code(), StatusCode::kInvalidArgument);
  c.codes[37] = -9;
  EXPECT_EQ(pack(c).status().code(), StatusCode::kInvalidArgument);
  c.codes[37] = 0;
  for (int64_t group : {0, 8, 24, 48, 128}) {  // not a multiple of 16 dividing k = 64
    EXPECT_FALSE(Int4WeightMatmul::create(c.codes.data(), c.scale.data(), c.zero.data(), 2, 64, group).isOk());
  }
  auto made = pack(c);
  ASSERT_TRUE(made.isOk());
  float y[2];
  EXPECT_FALSE((*made)->run(c.x.data(), 1, 63, nullptr, y, 2).isOk());  // ldx < k
  EXPECT_FALSE((*made)->run(c.x.data(), -1, 64, nullptr, y, 2).isOk());
  EXPECT_TRUE((*made)->run(c.x.data(), 0, 64, nullptr, y, 2).isOk());
}

TEST(Int4WeightMatmul, BelowAvx2ItIsUnavailableNotWrong) {
  if (int4WeightMatmulAvailable()) GTEST_SKIP() << "tests a tier without AVX2" << cpu::testing::thisRun();
  const Case c = make(1, 1, 32, 32, 0, 3);
  EXPECT_EQ(pack(c).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace verifuse::kernels
