// gemm::runBf16, both variants (AVX512-BF16 where the CPU has it, and the widening AVX2 one on every
// AVX2 CPU), against a double-precision loop over the same bf16-rounded inputs. The kernel
// accumulates in float32 (each product of two bf16 is exact in float32, each addition rounds
// once), then rounds the result to bf16 once; so the tolerance is derived, not guessed:
//   |c - ref| <= 2^-8·|ref|  (the final bf16 rounding, half an ulp of 8 significant bits)
//              + K·2^-24·Σ|a·b| (K float32 additions, each within half an ulp of the running sum)
//              + the same terms for the post-ops' float32 vector math (a few ulp: 2^-20·|ref|).
// A wrong K order, a dropped pair, a misplaced column or the odd-K tail breaks it by far more.
// The widening variants (AVX2, AVX-512) are also held bit for bit to what gemm.h says they compute:
// a scalar float32 FMA chain over k in order and one rounding (GemmBf16Widening.*), and, for the
// post-ops with transcendental functions, bf16(gemm::run() on the widened operands) with the float32
// kernel of the same width.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tier_skip.h"
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

/// Selects \p v for runBf16 (and the float32 run() of the same width), or skips the test where the
/// CPU lacks it.
void useVariant(Bf16Variant v) {
  if (!cpu::hasAvx2Fma()) VF_CPU_SKIP("AVX2+FMA");
  ASSERT_TRUE(availableBf16());  // every AVX2 CPU runs bf16 (widened where it has no bf16 instructions)
  if (v != Bf16Variant::kAvx2Widening && !cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
  if (v == Bf16Variant::kAvx512Bf16 && !cpu::hasAvx512Bf16()) VF_CPU_SKIP("AVX512-BF16");
  setMaxIsa(v == Bf16Variant::kAvx2Widening ? Isa::kAvx2 : Isa::kAvx512);
  setMaxBf16Variant(v);
  ASSERT_EQ(activeBf16Variant(), v);
}
void restoreVariants() {
  setMaxIsa(Isa::kAvx512);
  setMaxBf16Variant(Bf16Variant::kAvx512Bf16);
}

/// Every tolerance test runs once per variant; a variant this CPU lacks is skipped.
class GemmBf16Test : public ::testing::TestWithParam<Bf16Variant> {
 protected:
  void SetUp() override {
    saved_ = omp_get_max_threads();
    useVariant(GetParam());
  }
  void TearDown() override {
    omp_set_num_threads(saved_);
    restoreVariants();
  }
  int saved_ = 1;
};

std::string variantLabel(const ::testing::TestParamInfo<Bf16Variant>& info) {
  switch (info.param) {
    case Bf16Variant::kAvx512Bf16: return "avx512_bf16";
    case Bf16Variant::kAvx512Widening: return "avx512_widening";
    case Bf16Variant::kAvx2Widening: break;
  }
  return "avx2_widening";
}

TEST_P(GemmBf16Test, Shapes) {
  // Odd K (the lone last k), N not a multiple of 16 / 48, 1..4 rows (4-panel tiles, a group of 3
  // cut to a pair + one), tiles of 5..8 rows, more rows than a row block (> 192).
  // AVX2: 1..5 rows (the decode tiles: 1 x 64, 2 x 32, 3..5 x 16), 6+ rows in tiles of near-equal
  // height, K over several 256-blocks (partial sums), more rows than a 144-row block.
  const int64_t shapes[][3] = {{1, 1, 1},   {1, 7, 17},    {2, 40, 97},  {3, 64, 48},
                               {4, 33, 80}, {5, 128, 64},  {8, 96, 48},  {13, 31, 47},
                               {64, 768, 96}, {200, 65, 130}, {1, 3000, 20},
                               {389, 20, 48},  // row blocks 136 + 136 + 117
                               {7, 601, 33}, {1, 520, 200}, {2, 777, 70}};
  for (const auto& s : shapes) {
    for (WeightOrder order : {WeightOrder::kNK, WeightOrder::kKN}) {
      Case c{s[0], s[1], s[2], order};
      runCase(c, 1);
    }
  }
}

TEST_P(GemmBf16Test, PostOps) {
  Case c{37, 200, 70};
  c.ops = {elt(Activation::kGeluErf)};
  runCase(c, 1);
  c.ops = {elt(Activation::kGeluTanh)};  // GPT-2's gelu_new
  runCase(c, 1);
  c.ops = {elt(Activation::kRelu)};
  c.bias = false;
  runCase(c, 1);
}

TEST_P(GemmBf16Test, InPlaceResidualSum) {
  Case c{29, 300, 100};
  c.ops = {sumOp(1.f)};
  c.inPlaceSum = true;
  runCase(c, 1);
  c.ops = {sumOp(-0.5f)};  // a sum alone takes the inlined epilogue: its scale must be applied there
  runCase(c, 1);
  c.ops = {sumOp(0.5f), elt(Activation::kRelu)};
  runCase(c, 2);
}

TEST_P(GemmBf16Test, AnyThreadCountIsBitIdentical) {
  Case c{96, 300, 200};
  c.ops = {elt(Activation::kGeluErf)};
  EXPECT_EQ(runCase(c, 1), runCase(c, 2));
}

TEST_P(GemmBf16Test, PackedLayoutIsTheDocumentedOne) {
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

TEST_P(GemmBf16Test, RejectsBadArguments) {
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


INSTANTIATE_TEST_SUITE_P(Variants, GemmBf16Test,
                         ::testing::Values(Bf16Variant::kAvx2Widening, Bf16Variant::kAvx512Widening,
                                           Bf16Variant::kAvx512Bf16),
                         variantLabel);

// ---- the widening variants, bit for bit ----------------------------------------------------------

/// runBf16 on a widening variant (AVX2 on any AVX2 CPU, AVX-512 on any AVX-512 CPU, selected by
/// setMaxIsa / setMaxBf16Variant whatever bf16 instructions the CPU has).
class GemmBf16Widening : public ::testing::TestWithParam<Bf16Variant> {
 protected:
  void SetUp() override {
    saved_ = omp_get_max_threads();
    useVariant(GetParam());
  }
  void TearDown() override {
    omp_set_num_threads(saved_);
    restoreVariants();
  }
  int saved_ = 1;
};

/// Operands of one bit-exact case: bf16 a (row stride k + 3), weights already bf16 values (as
/// float, [n, k]), float32 bias, bf16 c holding the residual (row stride n + 5).
struct Exact {
  int64_t m, k, n;
  std::vector<uint16_t> a, c, residual;
  std::vector<float> w, bias;
  int64_t lda, ldc;
};

Exact makeExact(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  Exact e{m, k, n, {}, {}, {}, {}, {}, k + 3, n + 5};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  e.a.resize(static_cast<size_t>(m * e.lda));
  for (auto& v : e.a) v = bf16Of(dist(rng));
  e.w.resize(static_cast<size_t>(n * k));
  for (auto& v : e.w) v = floatOf(bf16Of(dist(rng)));
  // Tiny values too: bf16 denormals are kept by this variant (products of denormals underflow
  // exactly as float32 does).
  if (!e.w.empty()) e.w[0] = floatOf(0x0005);
  if (e.a.size() > 1) e.a[1] = 0x8003;
  e.bias.resize(static_cast<size_t>(n));
  for (auto& v : e.bias) v = dist(rng);
  e.c.resize(static_cast<size_t>(m * e.ldc));
  for (auto& v : e.c) v = bf16Of(dist(rng));
  e.residual = e.c;
  return e;
}

/// gemm.h's kAvx2Widening numerics written out in scalar float32: the FMA chain over k in order
/// from +0, + bias, the post-ops this oracle knows (relu, clamp, leaky_relu, linear, sum), one
/// rounding to bf16.
uint16_t oracle(const Exact& e, int64_t i, int64_t j, bool bias, const std::vector<PostOp>& ops) {
  float acc = 0.f;
  for (int64_t k = 0; k < e.k; ++k) acc = std::fmaf(floatOf(e.a[i * e.lda + k]), e.w[j * e.k + k], acc);
  if (bias) acc = acc + e.bias[j];
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kSum) {
      acc = std::fmaf(op.scale, floatOf(e.residual[i * e.ldc + j]), acc);
      continue;
    }
    switch (op.act) {
      case Activation::kRelu: acc = 0.f > acc ? 0.f : acc; break;  // maxps(0, x): NaN and -0 kept
      case Activation::kClamp: acc = op.alpha > acc ? op.alpha : acc; acc = op.beta < acc ? op.beta : acc; break;
      case Activation::kLeakyRelu: acc = acc > 0.f ? acc : acc * op.alpha; break;
      case Activation::kLinear: acc = std::fmaf(op.alpha, acc, op.beta); break;
      default: ADD_FAILURE() << "oracle: post-op not written out"; break;
    }
  }
  return bf16Of(acc);
}

/// Runs the widening variant on \p e (in place on e.c) with \p threads.
void runExact(Exact& e, bool bias, const std::vector<PostOp>& ops, bool inPlaceSum, int threads) {
  auto packed = packWeightsBf16(e.w.data(), e.k, e.n, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  Epilogue ep;
  ep.bias = bias ? e.bias.data() : nullptr;
  ep.postOps = ops;
  omp_set_num_threads(threads);
  const Status s = runBf16(e.a.data(), e.m, e.lda, *packed.value(), e.c.data(), e.ldc, ep,
                           inPlaceSum ? e.c.data() : nullptr, inPlaceSum ? e.ldc : 0);
  ASSERT_TRUE(s.isOk()) << s.toString();
}

TEST_P(GemmBf16Widening, EqualsTheScalarFmaChainAndOneRounding) {
  // Decode tiles (1..5 rows, N not a multiple of 64/32/16), the wide path's tile heights, odd K
  // (the packed zero row), K over several blocks (float32 partial sums between them), several row
  // blocks, and 2 threads (split over columns, or rows).
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 9, 70},   {2, 31, 33},   {3, 64, 20},  {4, 257, 50},
                               {5, 700, 17},  {6, 5, 16},   {7, 129, 40},  {11, 513, 47}, {23, 96, 96},
                               {64, 768, 48}, {150, 33, 30}, {300, 300, 35}};
  const std::vector<std::vector<PostOp>> epilogues = {
      {}, {elt(Activation::kRelu)}, {sumOp(1.f)}, {sumOp(-0.5f), elt(Activation::kClamp, -0.5f, 1.5f)},
      {elt(Activation::kLeakyRelu, 0.1f), elt(Activation::kLinear, 0.7f, -0.25f)}};
  uint32_t seed = 1;
  for (const auto& sh : shapes) {
    for (size_t ei = 0; ei < epilogues.size(); ++ei) {
      for (int threads : {1, 2}) {
        Exact e = makeExact(sh[0], sh[1], sh[2], seed++);
        const bool bias = ei % 2 == 0;
        bool sum = false;
        for (const PostOp& op : epilogues[ei]) sum = sum || op.kind == PostOp::Kind::kSum;
        runExact(e, bias, epilogues[ei], sum, threads);
        int bad = 0;
        for (int64_t i = 0; i < e.m; ++i) {
          for (int64_t j = 0; j < e.ldc; ++j) {
            const uint16_t want = j < e.n ? oracle(e, i, j, bias, epilogues[ei]) : e.residual[i * e.ldc + j];
            if (e.c[i * e.ldc + j] != want && bad++ < 3) {
              ADD_FAILURE() << "m=" << e.m << " k=" << e.k << " n=" << e.n << " epilogue " << ei << " threads "
                            << threads << ": c[" << i << "][" << j << "] = 0x" << std::hex << e.c[i * e.ldc + j]
                            << ", want 0x" << want << std::dec;
            }
          }
        }
      }
    }
  }
}

TEST_P(GemmBf16Widening, NanAndOverflowRoundAsTorch) {
  Exact e = makeExact(7, 40, 20, 99);
  e.a[2 * e.lda + 5] = 0x7FC1;  // a NaN in row 2: the whole row is NaN -> 0x7FC0
  e.a[4 * e.lda + 0] = bf16Of(3.0e38f);
  e.w[3 * e.k + 0] = floatOf(bf16Of(3.0e38f));  // row 4, column 3 overflows to inf
  runExact(e, true, {}, false, 1);
  for (int64_t j = 0; j < e.n; ++j) {
    EXPECT_EQ(e.c[2 * e.ldc + j], 0x7FC0) << j;
    EXPECT_EQ(e.c[4 * e.ldc + j], oracle(e, 4, j, true, {})) << j;
  }
  EXPECT_EQ(e.c[4 * e.ldc + 3], 0x7F80);
}

TEST_P(GemmBf16Widening, EqualsTheFloat32KernelOnWidenedOperands) {
  // The post-ops with transcendental functions: run()'s float32 kernel of the same width (AVX2 or
  // AVX-512, as setMaxIsa selected it) on the widened operands, then one rounding, bit for bit.
  const std::vector<std::vector<PostOp>> epilogues = {
      {elt(Activation::kGeluErf)}, {elt(Activation::kGeluTanh)}, {elt(Activation::kSilu)},
      {elt(Activation::kSigmoid)}, {elt(Activation::kTanh)}, {elt(Activation::kElu, 0.8f)},
      {elt(Activation::kHardswish)}, {elt(Activation::kHardsigmoid)}, {sumOp(1.f), elt(Activation::kGeluErf)}};
  const int64_t shapes[][3] = {{1, 300, 100}, {3, 77, 40}, {37, 600, 70}};
  uint32_t seed = 11;
  for (const auto& sh : shapes) {
    for (const auto& ops : epilogues) {
      Exact e = makeExact(sh[0], sh[1], sh[2], seed++);
      bool sum = false;
      for (const PostOp& op : ops) sum = sum || op.kind == PostOp::Kind::kSum;
      runExact(e, true, ops, sum, 1);
      // float32: the same operands widened
      std::vector<float> a32(e.a.size()), c32(e.residual.size());
      for (size_t x = 0; x < a32.size(); ++x) a32[x] = floatOf(e.a[x]);
      for (size_t x = 0; x < c32.size(); ++x) c32[x] = floatOf(e.residual[x]);
      auto packed = packWeights(e.w.data(), e.k, e.n, WeightOrder::kNK);
      ASSERT_TRUE(packed.isOk());
      Epilogue ep;
      ep.bias = e.bias.data();
      ep.postOps = ops;
      ASSERT_EQ(activeIsa(), GetParam() == Bf16Variant::kAvx2Widening ? Isa::kAvx2 : Isa::kAvx512);
      ASSERT_TRUE(run(a32.data(), e.m, e.lda, *packed.value(), c32.data(), e.ldc, ep, sum ? c32.data() : nullptr,
                      sum ? e.ldc : 0)
                      .isOk());
      int bad = 0;
      for (int64_t i = 0; i < e.m; ++i) {
        for (int64_t j = 0; j < e.n; ++j) {
          const uint16_t want = bf16Of(c32[i * e.ldc + j]);
          if (e.c[i * e.ldc + j] != want && bad++ < 3) {
            ADD_FAILURE() << "m=" << e.m << " post-op " << static_cast<int>(ops.back().act) << ": c[" << i << "][" << j
                          << "] = 0x" << std::hex << e.c[i * e.ldc + j] << ", want 0x" << want << std::dec;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GemmBf16Widening,
                         ::testing::Values(Bf16Variant::kAvx2Widening, Bf16Variant::kAvx512Widening), variantLabel);

}  // namespace
}  // namespace verifuse::kernels::gemm
