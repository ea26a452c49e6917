// Int8WeightMatmul (kernels/weight_only.h) against its definition: y[m, n] = sum_k x[m, k] *
// float(W[n, k]) summed in ascending k with fused multiply-adds (std::fma in float, the kernel's
// exact arithmetic), so the kernel must match it bit for bit on every shape: rows of one (decode),
// row counts around the kernels' passes, columns that are not a multiple of 16, strided rows,
// weights at -128 and 127. The AVX2 and AVX-512 groups are also compared with each other.
#include "verifuse/kernels/weight_only.h"
#include "cpu/weight_only_internal.h"
#include "tier_skip.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace verifuse::kernels {
namespace {

std::vector<float> reference(const std::vector<float>& x, int64_t rows, int64_t ldx, const std::vector<int8_t>& w,
                             int64_t n, int64_t k) {
  std::vector<float> y(static_cast<size_t>(rows * n));
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t c = 0; c < n; ++c) {
      float acc = 0.f;
      for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(x[m * ldx + kk], static_cast<float>(w[c * k + kk]), acc);
      y[m * n + c] = acc;
    }
  }
  return y;
}

struct Inputs {
  std::vector<float> x;
  std::vector<int8_t> w;
};

Inputs make(int64_t rows, int64_t ldx, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> code(-128, 127);
  Inputs in;
  in.x.resize(static_cast<size_t>(std::max<int64_t>(rows, 1) * ldx));
  for (float& v : in.x) v = normal(gen);
  in.w.resize(static_cast<size_t>(n * k));
  for (size_t i = 0; i < in.w.size(); ++i) {
    // Every seventh weight at an end of the range: -128 must widen to -128.0, not 128.0.
    in.w[i] = static_cast<int8_t>(i % 7 == 0 ? (i % 14 == 0 ? -128 : 127) : code(gen));
  }
  return in;
}

TEST(Int8WeightMatmul, MatchesItsDefinitionBitForBit) {
  if (!int8WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  struct Shape { int64_t rows, n, k, ldxExtra; };
  const Shape shapes[] = {{1, 896, 896, 0},  {1, 17, 5, 0},   {2, 33, 64, 3},  {3, 16, 1, 0},   {4, 100, 37, 0},
                          {5, 48, 130, 1},   {6, 64, 64, 0},  {7, 50, 20, 0},  {13, 129, 96, 5}, {128, 151, 200, 0},
                          {1, 4864, 896, 0}, {9, 1, 300, 0}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const int64_t ldx = s.k + s.ldxExtra;
    Inputs in = make(s.rows, ldx, s.n, s.k, seed++);
    auto made = Int8WeightMatmul::create(in.w.data(), s.n, s.k);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    std::vector<float> y(static_cast<size_t>(s.rows * s.n), -1.f);
    ASSERT_TRUE((*made)->run(in.x.data(), s.rows, ldx, y.data(), s.n).isOk());
    const std::vector<float> want = reference(in.x, s.rows, ldx, in.w, s.n, s.k);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(std::memcmp(&y[i], &want[i], sizeof(float)), 0)
          << "rows " << s.rows << " n " << s.n << " k " << s.k << " at " << i << ": " << y[i] << " vs " << want[i]
          << " (" << (*made)->implInfo() << ")";
    }
  }
}

TEST(Int8WeightMatmul, ResultDoesNotDependOnThreadsOrOtherRows) {
  if (!int8WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  const int64_t rows = 11, n = 300, k = 77;
  Inputs in = make(rows, k, n, k, 42);
  auto made = Int8WeightMatmul::create(in.w.data(), n, k);
  ASSERT_TRUE(made.isOk());
  std::vector<float> all(static_cast<size_t>(rows * n)), one(static_cast<size_t>(n)), two(all.size());
  ASSERT_TRUE((*made)->run(in.x.data(), rows, k, all.data(), n).isOk());
  ASSERT_TRUE((*made)->run(in.x.data() + 5 * k, 1, k, one.data(), n).isOk());
  EXPECT_EQ(std::memcmp(one.data(), all.data() + 5 * n, one.size() * sizeof(float)), 0);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(saved > 1 ? 1 : 2);
  ASSERT_TRUE((*made)->run(in.x.data(), rows, k, two.data(), n).isOk());
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(two.data(), all.data(), all.size() * sizeof(float)), 0);
}

TEST(Int8WeightMatmul, AvxTwoAndAvx512VariantsGiveTheSameBits) {
  if (!cpu::hasAvx512()) VF_CPU_SKIP("AVX-512 (to compare both variants)");
  const int64_t n = 40, k = 123;
  for (int64_t rows : {1, 2, 3, 5, 6, 8, 13}) {
    Inputs in = make(rows, k, n, k, static_cast<uint32_t>(rows));
    auto made = Int8WeightMatmul::create(in.w.data(), n, k);
    ASSERT_TRUE(made.isOk());
    std::vector<float> viaRun(static_cast<size_t>(rows * n)), via2(viaRun.size());
    ASSERT_TRUE((*made)->run(in.x.data(), rows, k, viaRun.data(), n).isOk());
    // The same packed layout (one group of 3 blocks, [k][48]) through the AVX2 variant.
    std::vector<int8_t> packed(static_cast<size_t>(3 * k * 16), 0);
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t kk = 0; kk < k; ++kk) packed[kk * 48 + c] = in.w[c * k + kk];
    }
    weight_only::groupAvx2(in.x.data(), rows, k, packed.data(), 3, k, via2.data(), n, n);
    EXPECT_EQ(std::memcmp(viaRun.data(), via2.data(), viaRun.size() * sizeof(float)), 0) << "rows " << rows;
  }
}

TEST(Int8WeightMatmul, BadArgumentsAreErrors) {
  if (!int8WeightMatmulAvailable()) VF_CPU_SKIP("AVX2 + FMA");
  const int8_t w[4] = {1, 2, 3, 4};
  EXPECT_FALSE(Int8WeightMatmul::create(w, 0, 4).isOk());
  EXPECT_FALSE(Int8WeightMatmul::create(nullptr, 1, 4).isOk());
  auto made = Int8WeightMatmul::create(w, 1, 4);
  ASSERT_TRUE(made.isOk());
  float x[4] = {}, y[1] = {};
  EXPECT_FALSE((*made)->run(x, 1, 3, y, 1).isOk());  // ldx < k
  EXPECT_FALSE((*made)->run(x, -1, 4, y, 1).isOk());
  EXPECT_TRUE((*made)->run(x, 0, 4, y, 1).isOk());
}

TEST(Int8WeightMatmul, BelowAvx2ItIsUnavailableNotWrong) {
  if (int8WeightMatmulAvailable()) GTEST_SKIP() << "tests a tier without AVX2" << cpu::testing::thisRun();
  const int8_t w[4] = {1, 2, 3, 4};
  auto made = Int8WeightMatmul::create(w, 1, 4);
  ASSERT_FALSE(made.isOk());
  EXPECT_EQ(made.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace verifuse::kernels
