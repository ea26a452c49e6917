// gemm::runBf16 against a double-precision loop over the same bf16-rounded inputs. The kernel
// accumulates in float32 (vdpbf16ps: each product of two bf16 is exact in float32, each addition
// rounds once), then rounds the result to bf16 once; so the tolerance is derived, not guessed:
//   |c - ref| <= 2^-8·|ref|  (the final bf16 rounding, half an ulp of 8 significant bits)
//              + K·2^-24·Σ|a·b| (K float32 additions, each within half an ulp of the running sum)
//              + the same terms for the post-ops' float32 vector math (a few ulp: 2^-20·|ref|).
// A wrong K order, a dropped pair, a misplaced column or the odd-K tail breaks it by far more.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/gemm.h"
#include "postops.h"

namespace verifuse::kernels::gemm {
namespace {

uint16_t bf16Of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (f != f) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float floatOf(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct Case {
  int64_t m, k, n;
  WeightOrder order = WeightOrder::kNK;
  bool bias = true;
  std::vector<PostOp> ops;
  bool inPlaceSum = false;
};

using kernels::testing::elt;
using kernels::testing::sumOp;

double gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

/// Runs \p c with \p threads and checks it; \returns the bf16 output (for bit-identity checks).
std::vector<uint16_t> runCase(const Case& c, int threads, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const int64_t lda = c.k + 3, ldc = c.n + 5;
  std::vector<uint16_t> a(static_cast<size_t>(c.m * lda));
  for (auto& v : a) v = bf16Of(dist(rng));
  std::vector<float> w(static_cast<size_t>(c.k * c.n));
  for (auto& v : w) v = dist(rng);
  std::vector<float> bias(static_cast<size_t>(c.n));
  for (auto& v : bias) v = dist(rng);
  std::vector<uint16_t> out(static_cast<size_t>(c.m * ldc));
  for (auto& v : out) v = bf16Of(dist(rng));  // the residual, when summed in place
  const std::vector<uint16_t> residual = out;

  auto packed = packWeightsBf16(w.data(), c.k, c.n, c.order);
  EXPECT_TRUE(packed.isOk()) << packed.status().toString();
  if (!packed.isOk()) return {};
  Epilogue ep;
  ep.bias = c.bias ? bias.data() : nullptr;
  ep.postOps = c.ops;
  omp_set_num_threads(threads);
  const Status s = runBf16(a.data(), c.m, lda, *packed.value(), out.data(), ldc, ep,
                           c.inPlaceSum ? out.data() : nullptr, c.inPlaceSum ? ldc : 0);
  EXPECT_TRUE(s.isOk()) << s.toString();

  const std::string what = "m=" + std::to_string(c.m) + " k=" + std::to_string(c.k) +
                           " n=" + std::to_string(c.n) + " threads=" + std::to_string(threads);
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float wv = c.order == WeightOrder::kNK ? w[j * c.k + kk] : w[kk * c.n + j];
        const double prod = static_cast<double>(floatOf(a[i * lda + kk])) * floatOf(bf16Of(wv));
        ref += prod;
        mag += std::fabs(prod);
      }
      if (c.bias) ref += bias[j];
      for (const PostOp& op : c.ops) {
        if (op.kind == PostOp::Kind::kSum) {
          ref += op.scale * static_cast<double>(floatOf(residual[i * ldc + j]));
        } else if (op.act == Activation::kRelu) {
          ref = std::max(ref, 0.0);
        } else if (op.act == Activation::kGeluErf) {
          ref = gelu(ref);
        } else if (op.act == Activation::kGeluTanh) {
          ref = geluTanh(ref);
        }
      }
      const double got = floatOf(out[i * ldc + j]);
      const double tol = std::ldexp(std::fabs(ref), -8) + c.k * std::ldexp(mag, -24) +
                         std::ldexp(std::fabs(ref) + mag, -20) + 1e-30;
      if (!(std::fabs(got - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << what << " c[" << i << "][" << j << "] = " << got << ", want " << ref
                      << " (tolerance " << tol << ")";
      }
    }
    // Padding between rows of c is never written.
    for (int64_t j = c.n; j < ldc && i + 1 < c.m; ++j) {
      if (out[i * ldc + j] != residual[i * ldc + j] && bad++ < 5) {
        ADD_FAILURE() << what << " wrote padding c[" << i << "][" << j << "]";
      }
    }
  }
  return out;
}

class GemmBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!availableBf16()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    saved_ = omp_get_max_threads();
  }
  void TearDown() override { omp_set_num_threads(saved_); }
  int saved_ = 1;
};

TEST_F(GemmBf16Test, Shapes) {
  // Odd K (the lone last k), N not a multiple of 16 / 48, 1..4 rows (4-panel tiles, a group of 3
  // cut to a pair + one), tiles of 5..8 rows, more rows than a row block (> 192).
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 7, 17},    {2, 40, 97},  {3, 64, 48},
                               {4, 33, 80}, {5, 128, 64},  {8, 96, 48},  {13, 31, 47},
                               {64, 768, 96}, {200, 65, 130}, {1, 3000, 20},
                               {389, 20, 48}};  // row blocks 136 + 136 + 117
  for (const auto& s : shapes) {
    for (WeightOrder order : {WeightOrder::kNK, WeightOrder::kKN}) {
      Case c{s[0], s[1], s[2], order};
      runCase(c, 1);
    }
  }
}

TEST_F(GemmBf16Test, PostOps) {
  Case c{37, 200, 70};
  c.ops = {elt(Activation::kGeluErf)};
  runCase(c, 1);
  c.ops = {elt(Activation::kGeluTanh)};  // GPT-2's gelu_new
  runCase(c, 1);
  c.ops = {elt(Activation::kRelu)};
  c.bias = false;
  runCase(c, 1);
}

TEST_F(GemmBf16Test, InPlaceResidualSum) {
  Case c{29, 300, 100};
  c.ops = {sumOp(1.f)};
  c.inPlaceSum = true;
  runCase(c, 1);
  c.ops = {sumOp(-0.5f)};  // a sum alone takes the inlined epilogue: its scale must be applied there
  runCase(c, 1);
  c.ops = {sumOp(0.5f), elt(Activation::kRelu)};
  runCase(c, 2);
}

TEST_F(GemmBf16Test, AnyThreadCountIsBitIdentical) {
  Case c{96, 300, 200};
  c.ops = {elt(Activation::kGeluErf)};
  EXPECT_EQ(runCase(c, 1), runCase(c, 2));
}

TEST_F(GemmBf16Test, PackedLayoutIsTheDocumentedOne) {
  const int64_t k = 5, n = 20;
  std::vector<float> w(k * n);
  for (int64_t i = 0; i < k * n; ++i) w[i] = static_cast<float>(i + 1);  // exact in bf16
  auto packed = packWeightsBf16(w.data(), k, n, WeightOrder::kKN);
  ASSERT_TRUE(packed.isOk());
  const PackedWeightsBf16& b = *packed.value();
  ASSERT_EQ(b.kPairs(), 3);
  ASSERT_EQ(b.nPadded(), 32);
  for (int64_t kk = 0; kk < 2 * b.kPairs(); ++kk) {
    for (int64_t nn = 0; nn < b.nPadded(); ++nn) {
      const float want = kk < k && nn < n ? w[kk * n + nn] : 0.f;
      EXPECT_EQ(floatOf(b.data()[(nn / 16) * b.kPairs() * 32 + (kk / 2) * 32 + (nn % 16) * 2 + kk % 2]), want)
          << kk << "," << nn;
    }
  }
  // Rounding to nearest even, NaN kept.
  const float odd[2] = {1.0f + 3.0f / 256, std::nanf("")};
  auto r = packWeightsBf16(odd, 2, 1, WeightOrder::kKN);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r.value()->data()[0], bf16Of(1.0f + 4.0f / 256));
  EXPECT_EQ(r.value()->data()[1], 0x7FC0);
}

TEST_F(GemmBf16Test, RejectsBadArguments) {
  const float w[4] = {1, 2, 3, 4};
  auto packed = packWeightsBf16(w, 2, 2, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk());
  uint16_t a[4] = {}, c[4] = {};
  Epilogue ep;
  EXPECT_EQ(runBf16(a, 2, 1, *packed.value(), c, 2, ep).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runBf16(a, 2, 2, *packed.value(), a, 2, ep).code(), StatusCode::kInvalidArgument);
  ep.postOps = {sumOp(1.f)};
  EXPECT_EQ(runBf16(a, 2, 2, *packed.value(), c, 2, ep).code(), StatusCode::kInvalidArgument);
  PostOp bin;
  bin.kind = PostOp::Kind::kBinary;
  bin.binaryDims = {1, 2};
  ep.postOps = {bin};
  EXPECT_EQ(runBf16(a, 2, 2, *packed.value(), c, 2, ep).code(), StatusCode::kUnimplemented);
  EXPECT_FALSE(packWeightsBf16(nullptr, 2, 2, WeightOrder::kNK).isOk());
  EXPECT_TRUE(runBf16(a, 0, 2, *packed.value(), c, 2, Epilogue{}).isOk());
}

}  // namespace
}  // namespace verifuse::kernels::gemm
