// gemm::run against two references: (1) the documented float32 semantics, bit for bit (one FMA
// chain over k = 0..K-1 per element, then + bias, then each post-op with the kernel's roundings),
// and (2) a double-precision loop within a tolerance derived from K, so a wrong formula cannot
// hide behind a reference that shares it.
#pragma GCC optimize("fp-contract=off")  // the float reference rounds after every operation

#include "verifuse/kernels/gemm.h"
#include "postops.h"
#include "verifuse/kernels/cpu_features.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "vecmath_eval.h"
#include "tier_skip.h"

namespace verifuse::kernels::gemm {
namespace {

using cpu::testing::VecFn;

/// The shared vector math (cpu/vecmath_avx2.h) on one value: the transcendental activations'
/// float32 results the kernel must reproduce bit for bit.
/// The AVX-512 kernel evaluates GELU (erf) with vecmath_avx512.h (16 lanes): its reference is that.
float vecmath(VecFn fn, float x, float p0 = 0.f) {
  float y = 0.f;
  if (fn == VecFn::kGeluErf && activeIsa() == Isa::kAvx512) {
    cpu::testing::evalAvx512(fn, &x, &y, 1);
    return y;
  }
  cpu::testing::evalAvx2(fn, &x, &y, 1, p0);
  return y;
}

using kernels::testing::elt;
using kernels::testing::sumOp;
using kernels::testing::binOp;

constexpr float kSentinel = -12345.5f;

/// One problem with its inputs and references.
struct Problem {
  int64_t m, k, n, lda, ldc, ldr;
  WeightOrder order;
  std::vector<float> a, w, bias, residual;
  std::vector<std::vector<float>> operands;  // one per binary post-op, dense [d0, d1]
  std::vector<PostOp> ops;
  bool useBias = true;

  /// B[k][n] from the caller's weights.
  float weight(int64_t kk, int64_t nn) const {
    return order == WeightOrder::kNK ? w[nn * k + kk] : w[kk * n + nn];
  }
  float operandAt(size_t which, const PostOp& op, int64_t i, int64_t j) const {
    const auto& d = op.binaryDims;
    return operands[which][(d[0] == 1 ? 0 : i) * d[1] + (d[1] == 1 ? 0 : j)];
  }
};

Problem makeProblem(int64_t m, int64_t k, int64_t n, WeightOrder order, int64_t padA = 0,
                    int64_t padC = 0, int64_t padR = 0, std::vector<PostOp> ops = {},
                    uint32_t seed = 1) {
  Problem p{m, k, n, k + padA, n + padC, n + padR, order, {}, {}, {}, {}, {}, std::move(ops)};
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(m * 31 + k * 17 + n));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  p.a.resize(m * p.lda);
  for (float& v : p.a) v = u(rng);
  p.w.resize(k * n);
  for (float& v : p.w) v = u(rng);
  p.bias.resize(n);
  for (float& v : p.bias) v = u(rng) * 2.f;
  p.residual.resize(m * p.ldr);
  for (float& v : p.residual) v = u(rng) * 3.f;
  for (const PostOp& op : p.ops) {
    if (op.kind != PostOp::Kind::kBinary) continue;
    std::vector<float> o(op.binaryDims[0] * op.binaryDims[1]);
    // Away from 0 so division is well conditioned; both signs so max/min choose both sides.
    for (float& v : o) v = (u(rng) < 0 ? -1.f : 1.f) * (0.25f + std::fabs(u(rng)) * 3.f);
    p.operands.push_back(std::move(o));
  }
  return p;
}

/// maxps / minps: the second operand when either is NaN.
float maxps(float x, float y) { return x > y ? x : y; }
float minps(float x, float y) { return x < y ? x : y; }

/// The documented float32 result of element (i, j), given the residual as it was before the call.
float floatReference(const Problem& p, int64_t i, int64_t j) {
  float acc = 0.f;
  for (int64_t kk = 0; kk < p.k; ++kk) acc = std::fma(p.a[i * p.lda + kk], p.weight(kk, j), acc);
  float y = p.useBias ? acc + p.bias[j] : acc;
  size_t which = 0;
  for (const PostOp& op : p.ops) {
    switch (op.kind) {
      case PostOp::Kind::kSum: y = std::fma(op.scale, p.residual[i * p.ldr + j], y); break;
      case PostOp::Kind::kBinary: {
        const float o = p.operandAt(which++, op, i, j);
        const bool nan = std::isnan(y) || std::isnan(o);
        switch (op.binaryAlg) {
          case BinaryAlg::kAdd: y = y + o; break;
          case BinaryAlg::kSub: y = y - o; break;
          case BinaryAlg::kMul: y = y * o; break;
          case BinaryAlg::kDiv: y = y / o; break;
          case BinaryAlg::kMax: y = nan ? y + o : maxps(y, o); break;
          case BinaryAlg::kMin: y = nan ? y + o : minps(y, o); break;
        }
        break;
      }
      case PostOp::Kind::kEltwise:
        switch (op.act) {
          case Activation::kRelu: y = maxps(0.f, y); break;
          case Activation::kLeakyRelu: y = y > 0.f ? y : y * op.alpha; break;
          case Activation::kClamp: y = minps(op.beta, maxps(op.alpha, y)); break;
          case Activation::kLinear: y = std::fma(op.alpha, y, op.beta); break;
          case Activation::kHardswish: y = y * minps(6.f, maxps(0.f, y + 3.f)) / 6.f; break;
          case Activation::kHardsigmoid: y = minps(6.f, maxps(0.f, y + 3.f)) / 6.f; break;
          case Activation::kGeluErf: y = vecmath(VecFn::kGeluErf, y); break;
          case Activation::kGeluTanh: y = vecmath(VecFn::kGeluTanh, y); break;
          case Activation::kSilu: y = vecmath(VecFn::kSilu, y); break;
          case Activation::kSigmoid: y = vecmath(VecFn::kSigmoid, y); break;
          case Activation::kTanh: y = vecmath(VecFn::kTanh, y); break;
          case Activation::kElu: y = vecmath(VecFn::kElu, y, op.alpha); break;
        }
        break;
    }
  }
  return y;
}

/// Exact-real semantics in double, with a bound on how far a float32 computation may be off:
/// returns {value, bound}. The GEMM bound is (K + 2)·eps·Σ|a||b| (+ the bias rounding); each
/// post-op is Lipschitz with a constant L (scales the incoming bound) and adds its own rounding.
std::pair<double, double> doubleReference(const Problem& p, int64_t i, int64_t j) {
  constexpr double eps = std::numeric_limits<float>::epsilon();
  double y = 0, mag = 0;
  for (int64_t kk = 0; kk < p.k; ++kk) {
    const double t = static_cast<double>(p.a[i * p.lda + kk]) * p.weight(kk, j);
    y += t;
    mag += std::fabs(t);
  }
  double bound = (p.k + 2) * eps * mag;
  if (p.useBias) {
    y += p.bias[j];
    bound += eps * (std::fabs(y) + std::fabs(p.bias[j]));
  }
  size_t which = 0;
  for (const PostOp& op : p.ops) {
    double lipschitz = 1, ulps = 2;
    switch (op.kind) {
      case PostOp::Kind::kSum: y += op.scale * static_cast<double>(p.residual[i * p.ldr + j]); break;
      case PostOp::Kind::kBinary: {
        const double o = p.operandAt(which++, op, i, j);
        switch (op.binaryAlg) {
          case BinaryAlg::kAdd: y += o; break;
          case BinaryAlg::kSub: y -= o; break;
          case BinaryAlg::kMul: y *= o; lipschitz = std::fabs(o); break;
          case BinaryAlg::kDiv: y /= o; lipschitz = 1 / std::fabs(o); break;
          case BinaryAlg::kMax: y = std::max(y, o); break;
          case BinaryAlg::kMin: y = std::min(y, o); break;
        }
        break;
      }
      case PostOp::Kind::kEltwise:
        switch (op.act) {
          case Activation::kRelu: y = std::max(0.0, y); break;
          case Activation::kLeakyRelu:
            y = y > 0 ? y : y * op.alpha;
            lipschitz = std::max(1.0, std::fabs(static_cast<double>(op.alpha)));
            break;
          case Activation::kClamp: y = std::min<double>(op.beta, std::max<double>(op.alpha, y)); break;
          case Activation::kLinear:
            y = op.alpha * y + op.beta;
            lipschitz = std::fabs(op.alpha);
            break;
          case Activation::kHardswish:
            y = y * std::min(6.0, std::max(0.0, y + 3)) / 6;
            lipschitz = 1.5;
            break;
          case Activation::kHardsigmoid:
            y = std::min(6.0, std::max(0.0, y + 3)) / 6;
            lipschitz = 1.0 / 6;
            break;
          // The vector math is within 4 ulp of these (vecmath_avx2.h); Lipschitz constants:
          // gelu <= 1.13, silu <= 1.1, sigmoid 1/4, tanh 1, elu max(1, alpha).
          case Activation::kGeluErf:
            y = 0.5 * y * (1 + std::erf(y / std::sqrt(2.0)));
            lipschitz = 1.2;
            ulps = 8;
            break;
          case Activation::kGeluTanh:
            y = 0.5 * y * (1 + std::tanh(std::sqrt(2 / M_PI) * (y + 0.044715 * y * y * y)));
            lipschitz = 1.2;
            ulps = 8;
            break;
          case Activation::kSilu:
            y = y / (1 + std::exp(-y));
            lipschitz = 1.1;
            ulps = 4;
            break;
          case Activation::kSigmoid:
            y = 1 / (1 + std::exp(-y));
            lipschitz = 0.25;
            ulps = 4;
            break;
          case Activation::kTanh:
            y = std::tanh(y);
            ulps = 4;
            break;
          case Activation::kElu:
            y = y > 0 ? y : op.alpha * std::expm1(y);
            lipschitz = std::max(1.0, std::fabs(static_cast<double>(op.alpha)));
            ulps = 4;
            break;
        }
        break;
    }
    bound = bound * lipschitz + ulps * eps * (std::fabs(y) + 1e-30);
  }
  return {y, bound};
}

bool sameFloat(float x, float y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  uint32_t bx, by;
  std::memcpy(&bx, &x, 4);
  std::memcpy(&by, &y, 4);
  return bx == by;
}

/// Checks \p c (ldc-strided, padding still kSentinel) against both references (\p floatChain
/// false: only the double-precision bound, which holds for any summation order, e.g. MKL's).
void expectMatches(const Problem& p, const std::vector<float>& c, const std::string& what, bool floatChain = true) {
  int bad = 0;
  for (int64_t i = 0; i < p.m && bad < 5; ++i) {
    for (int64_t j = 0; j < p.ldc && bad < 5; ++j) {
      const float got = c[i * p.ldc + j];
      if (j >= p.n) {
        if (!sameFloat(got, kSentinel)) {
          ADD_FAILURE() << what << ": wrote padding (" << i << "," << j << ")";
          ++bad;
        }
        continue;
      }
      if (floatChain && !sameFloat(got, floatReference(p, i, j))) {
        ADD_FAILURE() << what << ": (" << i << "," << j << ") = " << got << ", float32 chain "
                      << floatReference(p, i, j);
        ++bad;
      }
      const auto [exact, bound] = doubleReference(p, i, j);
      if (!(std::fabs(got - exact) <= bound)) {
        ADD_FAILURE() << what << ": (" << i << "," << j << ") = " << got << ", exact " << exact
                      << ", bound " << bound;
        ++bad;
      }
    }
  }
}

std::string describe(const Problem& p) {
  return "m=" + std::to_string(p.m) + " k=" + std::to_string(p.k) + " n=" + std::to_string(p.n) +
         (p.order == WeightOrder::kNK ? " NK" : " KN") + " lda=" + std::to_string(p.lda) +
         " ldc=" + std::to_string(p.ldc);
}

std::vector<const float*> operandPointers(const Problem& p) {
  std::vector<const float*> out;
  for (const auto& o : p.operands) out.push_back(o.data());
  return out;
}

/// Packs, runs into a sentinel-filled c and checks. \returns c.
std::vector<float> runAndCheck(const Problem& p) {
  auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
  EXPECT_TRUE(packed.isOk()) << packed.status().toString();
  if (!packed.isOk()) return {};
  std::vector<float> c(p.m * p.ldc, kSentinel);
  Epilogue ep;
  ep.bias = p.useBias ? p.bias.data() : nullptr;
  ep.postOps = p.ops;
  const auto operands = operandPointers(p);
  const Status s = run(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep,
                       p.residual.data(), p.ldr, operands);
  EXPECT_TRUE(s.isOk()) << s.toString();
  expectMatches(p, c, describe(p));
  return c;
}

/// Every test runs once per kernel variant (AVX2, AVX-512): both must pass the same bit-exact
/// checks. A variant this CPU lacks is skipped.
class GemmIsaTest {
 protected:
  void setUpIsa(Isa isa) {
    if (!available()) VF_CPU_SKIP("AVX2+FMA");
    if (isa == Isa::kAvx512 && !cpu::hasAvx512()) VF_CPU_SKIP("AVX-512");
    setMaxIsa(isa);
    ASSERT_EQ(activeIsa(), isa);
    savedThreads_ = omp_get_max_threads();
  }
  void tearDownIsa() {
    omp_set_num_threads(savedThreads_);
    setMaxIsa(Isa::kAvx512);
  }
  int savedThreads_ = 1;
};

std::string isaLabel(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

class GemmTest : public GemmIsaTest, public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override { setUpIsa(GetParam()); }
  void TearDown() override { tearDownIsa(); }
};
INSTANTIATE_TEST_SUITE_P(Isa, GemmTest, ::testing::Values(Isa::kAvx2, Isa::kAvx512),
                         [](const auto& info) { return isaLabel(info.param); });

// ---- shapes --------------------------------------------------------------------------------------

struct ShapeCase {
  int64_t m, k, n, padA, padC;
};
// Edges: 1, primes, not multiples of 6 (rows) or 16 (columns), K = 1, several K blocks (> 256),
// more rows than one row block (> 144), N < 16, groups of 1..4 panels for the tail rows.
const ShapeCase kShapes[] = {
    {1, 1, 1, 0, 0},      {1, 7, 1, 0, 0},     {1, 1, 17, 0, 0},     {2, 3, 5, 1, 3},
    {5, 1, 16, 0, 0},     {6, 16, 16, 0, 0},   {7, 17, 33, 2, 1},    {13, 31, 47, 0, 5},
    {1, 768, 100, 0, 0},  {1, 64, 64, 0, 0},   {1, 5, 80, 3, 0},     {2, 40, 97, 0, 0},
    {3, 256, 65, 0, 0},   {4, 257, 64, 1, 0},  {5, 513, 31, 0, 2},   {6, 1000, 16, 0, 0},
    {11, 9, 129, 0, 0},   {17, 300, 70, 7, 9}, {37, 41, 200, 0, 0},  {64, 64, 64, 0, 0},
    {145, 20, 50, 0, 0},  {150, 600, 37, 4, 4}, {300, 33, 17, 0, 0}, {1, 3000, 20, 0, 0},
    {2, 2, 1000, 0, 0},   {8, 513, 257, 0, 16},
    // AVX-512 kernel: groups of 3 panels cut to 1 (n = 64) and 2 (n = 80), 5..8-row tiles, more
    // rows than one row block (> 192) with several K blocks.
    {9, 50, 64, 0, 0},    {5, 30, 80, 2, 0},   {200, 770, 200, 3, 1},
    // Row blocks rounded up to multiples of 8: 389 rows as 136 + 136 + 117.
    {389, 20, 48, 0, 0},
    // Decode rows on the AVX-512 kernel's decodeRows: over several K blocks, spans of 32 panels
    // with a 3-panel group at the end (35 panels) and a last span of 5 panels (69), the epilogue
    // after parked chains; weights above 1 MiB one panel at a time (the first two, and one K
    // block: the last two), smaller ones in 4-panel tiles (the middle two).
    {1, 600, 560, 0, 0},  {3, 700, 1100, 2, 1}, {2, 520, 40, 0, 0},  {4, 300, 530, 0, 3},
    {1, 200, 1500, 0, 0}, {4, 256, 1201, 1, 2},
};

class GemmShapes : public GemmIsaTest,
                   public ::testing::TestWithParam<std::tuple<int, WeightOrder, Isa>> {
 protected:
  void SetUp() override { setUpIsa(std::get<2>(GetParam())); }
  void TearDown() override { tearDownIsa(); }
};

TEST_P(GemmShapes, MatchesBothReferences) {
  const ShapeCase& s = kShapes[std::get<0>(GetParam())];
  const Problem p = makeProblem(s.m, s.k, s.n, std::get<1>(GetParam()), s.padA, s.padC);
  runAndCheck(p);
}

INSTANTIATE_TEST_SUITE_P(
    All, GemmShapes,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kShapes))),
                       ::testing::Values(WeightOrder::kNK, WeightOrder::kKN),
                       ::testing::Values(Isa::kAvx2, Isa::kAvx512)),
    [](const auto& info) {
      const ShapeCase& s = kShapes[std::get<0>(info.param)];
      return "m" + std::to_string(s.m) + "_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) +
             (std::get<1>(info.param) == WeightOrder::kNK ? "_NK" : "_KN") + "_" +
             isaLabel(std::get<2>(info.param));
    });

TEST_P(GemmTest, WithoutBias) {
  Problem p = makeProblem(13, 300, 37, WeightOrder::kNK, 1, 2);
  p.useBias = false;
  runAndCheck(p);
}

TEST_P(GemmTest, LargeK) {
  runAndCheck(makeProblem(7, 5000, 40, WeightOrder::kKN));
}

// ---- post-ops ------------------------------------------------------------------------------------

struct PostOpCase {
  std::string name;
  std::vector<PostOp> ops;
};

std::vector<PostOpCase> postOpCases(int64_t m, int64_t n) {
  std::vector<PostOpCase> cases = {
      {"relu", {elt(Activation::kRelu)}},
      {"leaky_relu", {elt(Activation::kLeakyRelu, 0.1f)}},
      {"leaky_relu_negative_slope", {elt(Activation::kLeakyRelu, -2.f)}},
      {"clamp", {elt(Activation::kClamp, -0.5f, 0.75f)}},
      {"relu6", {elt(Activation::kClamp, 0.f, 6.f)}},
      {"linear", {elt(Activation::kLinear, 0.125f, 0.5f)}},
      {"hardswish", {elt(Activation::kHardswish)}},
      {"hardsigmoid", {elt(Activation::kHardsigmoid)}},
      {"gelu_erf", {elt(Activation::kGeluErf)}},
      {"gelu_tanh", {elt(Activation::kGeluTanh)}},
      {"silu", {elt(Activation::kSilu)}},
      {"sigmoid", {elt(Activation::kSigmoid)}},
      {"tanh", {elt(Activation::kTanh)}},
      {"elu", {elt(Activation::kElu, 1.f)}},
      {"elu_alpha", {elt(Activation::kElu, 0.5f)}},
      {"transformer_mlp", {elt(Activation::kGeluErf), sumOp(1.f)}},
      {"swiglu_gate", {elt(Activation::kSilu), binOp(BinaryAlg::kMul, {m, n})}},
      {"sum", {sumOp(1.f)}},
      {"sum_scaled", {sumOp(0.5f)}},
      {"chain",
       {elt(Activation::kLinear, 0.5f, -0.25f), elt(Activation::kRelu), sumOp(1.f),
        binOp(BinaryAlg::kMul, {1, n}), elt(Activation::kHardswish),
        binOp(BinaryAlg::kAdd, {m, n}), elt(Activation::kClamp, -1.f, 2.f)}},
  };
  const std::pair<BinaryAlg, const char*> algs[] = {
      {BinaryAlg::kAdd, "add"}, {BinaryAlg::kSub, "sub"}, {BinaryAlg::kMul, "mul"},
      {BinaryAlg::kDiv, "div"}, {BinaryAlg::kMax, "max"}, {BinaryAlg::kMin, "min"}};
  const std::pair<std::vector<int64_t>, const char*> dims[] = {
      {{1, n}, "per_column"}, {{m, n}, "full"}, {{m, 1}, "per_row"}, {{1, 1}, "scalar"}};
  for (const auto& [alg, algName] : algs) {
    for (const auto& [d, dimName] : dims) {
      cases.push_back({std::string("binary_") + algName + "_" + dimName, {binOp(alg, d)}});
    }
  }
  return cases;
}

TEST_P(GemmTest, EverySupportedPostOp) {
  // Pre-activations span about ±5, so every kink (0, ±3, clamp bounds) is crossed. K = 70: one K
  // block; K = 600: three (the epilogue after partial sums stored in c).
  for (const int64_t k : {70, 600}) {
    for (const auto& pc : postOpCases(13, 37)) {
      SCOPED_TRACE(pc.name + " k=" + std::to_string(k));
      for (const PostOp& op : pc.ops) EXPECT_TRUE(supportsPostOp(op)) << pc.name;
      const float scale = k == 600 ? 0.35f : 1.f;
      Problem p = makeProblem(13, k, 37, WeightOrder::kNK, 3, 5, 2, pc.ops);
      for (float& v : p.w) v *= scale;
      runAndCheck(p);
    }
  }
}

TEST_P(GemmTest, PostOpsPropagateNaN) {
  Problem p = makeProblem(7, 20, 19, WeightOrder::kKN, 0, 0, 0,
                          {elt(Activation::kRelu), binOp(BinaryAlg::kMax, {1, 19}),
                           binOp(BinaryAlg::kMin, {7, 19}), elt(Activation::kHardswish),
                           elt(Activation::kClamp, -1.f, 1.f)});
  p.a[2 * p.lda + 3] = std::numeric_limits<float>::quiet_NaN();  // row 2 all NaN
  p.operands[0][5] = std::numeric_limits<float>::quiet_NaN();     // column 5 all NaN
  p.operands[1][4 * 19 + 11] = std::numeric_limits<float>::quiet_NaN();
  auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
  ASSERT_TRUE(packed.isOk());
  std::vector<float> c(p.m * p.ldc, kSentinel);
  Epilogue ep{p.bias.data(), p.ops};
  const auto operands = operandPointers(p);
  ASSERT_TRUE(run(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep, nullptr, 0,
                  operands).isOk());
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      const bool nan = i == 2 || j == 5 || (i == 4 && j == 11);
      EXPECT_EQ(std::isnan(c[i * p.ldc + j]), nan) << i << "," << j;
      if (!nan) EXPECT_TRUE(sameFloat(c[i * p.ldc + j], floatReference(p, i, j))) << i << "," << j;
    }
  }
}

TEST_P(GemmTest, EveryActivationIsSupported) {
  for (int a = 0; a <= static_cast<int>(Activation::kLinear); ++a) {
    EXPECT_TRUE(supportsPostOp(elt(static_cast<Activation>(a)))) << a;
  }
  EXPECT_TRUE(supportsPostOp(sumOp(1.f)));
  EXPECT_TRUE(supportsPostOp(binOp(BinaryAlg::kDiv, {1, 1})));
}

// ---- aliasing ------------------------------------------------------------------------------------

TEST_P(GemmTest, InPlaceResidualSum) {
  // c == residual (same stride, wider than N): one K block and three, one thread and two; 61 rows
  // and 2 (decode-sized: on AVX-512 its K blocks run outer, the chains parked between them).
  for (const int64_t k : {100, 700}) {
    for (const int threads : {1, 2}) {
      for (const int64_t m : {61, 2}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " threads=" + std::to_string(threads) + " m=" + std::to_string(m));
        omp_set_num_threads(threads);
        Problem p = makeProblem(m, k, 150, WeightOrder::kNK, 0, 3, 3,
                                {elt(Activation::kRelu), sumOp(1.f), elt(Activation::kClamp, -2.f, 2.f)});
        auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
        ASSERT_TRUE(packed.isOk());
        if (m == 61) EXPECT_EQ(threadsFor(p.m, *packed.value()), threads);
        std::vector<float> c = p.residual;  // ldr == ldc
        for (int64_t i = 0; i < p.m; ++i) {
          for (int64_t j = p.n; j < p.ldc; ++j) c[i * p.ldc + j] = kSentinel;
        }
        Epilogue ep{p.bias.data(), p.ops};
        ASSERT_TRUE(run(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep, c.data(),
                        p.ldc).isOk());
        expectMatches(p, c, "in-place sum");
      }
    }
  }
}

TEST_P(GemmTest, InPlaceFullBinaryOperand) {
  for (const int64_t k : {50, 600}) {
    Problem p = makeProblem(9, k, 40, WeightOrder::kKN, 0, 0, 0,
                            {binOp(BinaryAlg::kMul, {9, 40}), binOp(BinaryAlg::kAdd, {1, 40})});
    auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
    ASSERT_TRUE(packed.isOk());
    std::vector<float> c = p.operands[0];
    Epilogue ep{p.bias.data(), p.ops};
    const float* operands[] = {c.data(), p.operands[1].data()};
    ASSERT_TRUE(run(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep, nullptr, 0,
                    operands).isOk());
    expectMatches(p, c, "in-place binary k=" + std::to_string(k));
  }
}

// ---- threads -------------------------------------------------------------------------------------

TEST_P(GemmTest, AnyThreadCountIsBitIdentical) {
  // Split over N (many panels) and over M (one panel), each with several K blocks and edge tiles.
  const ShapeCase cases[] = {{100, 600, 300, 1, 2}, {400, 300, 16, 0, 0}, {12, 257, 1000, 0, 0},
                             {1, 600, 1400, 0, 0}};  // a decode row, weights streamed one panel at a time
  for (const ShapeCase& s : cases) {
    Problem p = makeProblem(s.m, s.k, s.n, WeightOrder::kNK, s.padA, s.padC, 0,
                            {elt(Activation::kHardswish), sumOp(0.5f)});
    auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
    ASSERT_TRUE(packed.isOk());
    Epilogue ep{p.bias.data(), p.ops};
    std::vector<float> first;
    for (const int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      ASSERT_EQ(threadsFor(p.m, *packed.value()), threads) << describe(p);
      std::vector<float> c(p.m * p.ldc, kSentinel);
      ASSERT_TRUE(run(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep,
                      p.residual.data(), p.ldr).isOk());
      if (first.empty()) {
        expectMatches(p, c, describe(p));
        first = c;
      } else {
        EXPECT_EQ(std::memcmp(first.data(), c.data(), c.size() * 4), 0)
            << describe(p) << " with " << threads << " threads";
      }
    }
  }
}

TEST_P(GemmTest, SmallProblemsStayOnOneThread) {
  omp_set_num_threads(2);
  std::vector<float> w(64 * 64, 1.f);
  auto packed = packWeights(w.data(), 64, 64, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk());
  EXPECT_EQ(threadsFor(1, *packed.value()), 1);
  EXPECT_EQ(threadsFor(128, *packed.value()), 2);
}

TEST_P(GemmTest, ConcurrentCallsShareOnePackedWeights) {
  Problem p = makeProblem(30, 200, 90, WeightOrder::kNK);
  auto packed = packWeights(p.w.data(), p.k, p.n, p.order);
  ASSERT_TRUE(packed.isOk());
  const Epilogue ep{p.bias.data(), {}};
  std::vector<std::vector<float>> outs(8, std::vector<float>(p.m * p.ldc, kSentinel));
  int failures = 0;
#pragma omp parallel for num_threads(4) reduction(+ : failures)
  for (int r = 0; r < 8; ++r) {
    failures += !run(p.a.data(), p.m, p.lda, *packed.value(), outs[r].data(), p.ldc, ep).isOk();
  }
  EXPECT_EQ(failures, 0);
  expectMatches(p, outs[0], "concurrent");
  for (int r = 1; r < 8; ++r) EXPECT_EQ(outs[r], outs[0]) << r;
}

// ---- packing, arguments --------------------------------------------------------------------------

TEST_P(GemmTest, PackedLayoutIsTheDocumentedOne) {
  for (const WeightOrder order : {WeightOrder::kNK, WeightOrder::kKN}) {
    const int64_t k = 600, n = 37;
    Problem p = makeProblem(1, k, n, order);
    auto packed = packWeights(p.w.data(), k, n, order);
    ASSERT_TRUE(packed.isOk());
    const PackedWeights& b = *packed.value();
    EXPECT_EQ(b.k(), k);
    EXPECT_EQ(b.n(), n);
    EXPECT_EQ(b.nPadded(), 48);
    EXPECT_EQ(b.bytes(), static_cast<size_t>(k * 48 * 4));
    EXPECT_EQ(b.kBlock(), 200);  // 600 = 3 equal blocks of at most 256
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t k0 = kk / b.kBlock() * b.kBlock(), kb = std::min(b.kBlock(), k - k0);
      for (int64_t nn = 0; nn < b.nPadded(); ++nn) {
        const float got = b.data()[k0 * b.nPadded() + nn / 16 * kb * 16 + (kk - k0) * 16 + nn % 16];
        ASSERT_EQ(got, nn < n ? p.weight(kk, nn) : 0.f) << kk << "," << nn;
      }
    }
  }
  // Full panels of [N, K] weights are transposed 8 rows at a time: K blocks that are not a
  // multiple of 8 (a scalar tail), one K block and several, a partial last panel or none.
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{13, 48}, {257, 33}, {4, 16}, {771, 64}, {8, 17}}) {
    Problem p = makeProblem(1, k, n, WeightOrder::kNK);
    auto packed = packWeights(p.w.data(), k, n, WeightOrder::kNK);
    ASSERT_TRUE(packed.isOk());
    const PackedWeights& b = *packed.value();
    for (int64_t kk = 0; kk < k; ++kk) {
      const int64_t k0 = kk / b.kBlock() * b.kBlock(), kb = std::min(b.kBlock(), k - k0);
      for (int64_t nn = 0; nn < b.nPadded(); ++nn) {
        const float got = b.data()[k0 * b.nPadded() + nn / 16 * kb * 16 + (kk - k0) * 16 + nn % 16];
        ASSERT_EQ(got, nn < n ? p.weight(kk, nn) : 0.f) << "k=" << k << " n=" << n << " at " << kk << "," << nn;
      }
    }
  }
}

TEST_P(GemmTest, EmptyMIsANoOp) {
  std::vector<float> w(8 * 4, 1.f);
  auto packed = packWeights(w.data(), 8, 4, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk());
  EXPECT_TRUE(run(nullptr, 0, 8, *packed.value(), nullptr, 4, Epilogue{}).isOk());
  std::vector<float> c(4, kSentinel);
  std::vector<float> a(8, 1.f);
  EXPECT_TRUE(run(a.data(), 0, 8, *packed.value(), c.data(), 4, Epilogue{}).isOk());
  for (float v : c) EXPECT_EQ(v, kSentinel);
}

TEST_P(GemmTest, RejectsBadArguments) {
  const int64_t m = 3, k = 8, n = 5;
  std::vector<float> a(m * k, 1.f), w(k * n, 1.f), c(m * n, 0.f), r(m * n, 0.f), bias(n, 0.f);
  auto packed = packWeights(w.data(), k, n, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk());
  const PackedWeights& b = *packed.value();
  const Epilogue plain;
  auto code = [](const Status& s) { return s.code(); };
  EXPECT_EQ(code(run(a.data(), -1, k, b, c.data(), n, plain)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run(a.data(), m, k - 1, b, c.data(), n, plain)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n - 1, plain)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run(nullptr, m, k, b, c.data(), n, plain)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run(a.data(), m, k, b, nullptr, n, plain)), StatusCode::kInvalidArgument);
  const Epilogue withSum{nullptr, {sumOp(1.f)}};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, withSum)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, withSum, r.data(), n - 1)),
            StatusCode::kInvalidArgument);
  // residual overlapping c without being c
  EXPECT_EQ(code(run(a.data(), 2, k, b, c.data(), n, withSum, c.data() + 1, n)),
            StatusCode::kInvalidArgument);
  // c overlapping a, or the bias
  EXPECT_EQ(code(run(a.data(), 1, k, b, a.data() + 4, n, plain)), StatusCode::kInvalidArgument);
  const Epilogue biasInC{c.data() + 2, {}};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, biasInC)), StatusCode::kInvalidArgument);
  // binary operands: count, null, dims
  const Epilogue withBinary{nullptr, {binOp(BinaryAlg::kAdd, {1, n})}};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, withBinary)), StatusCode::kInvalidArgument);
  const float* nullOperand[] = {nullptr};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, withBinary, nullptr, 0, nullOperand)),
            StatusCode::kInvalidArgument);
  const float* operand[] = {r.data()};
  const Epilogue badDims{nullptr, {binOp(BinaryAlg::kAdd, {2, n})}};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, badDims, nullptr, 0, operand)),
            StatusCode::kUnimplemented);
  const Epilogue rank3{nullptr, {binOp(BinaryAlg::kAdd, {1, 1, n})}};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, rank3, nullptr, 0, operand)),
            StatusCode::kUnimplemented);
  const Epilogue tooMany{nullptr, std::vector<PostOp>(17, elt(Activation::kRelu))};
  EXPECT_EQ(code(run(a.data(), m, k, b, c.data(), n, tooMany)), StatusCode::kUnimplemented);
  // a correct call on the same buffers works (the checks above are not vacuous)
  EXPECT_TRUE(run(a.data(), m, k, b, c.data(), n, withBinary, nullptr, 0, operand).isOk());
  EXPECT_EQ(c[0], 8.f + r[0]);

  EXPECT_EQ(packWeights(nullptr, k, n, WeightOrder::kNK).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(packWeights(w.data(), 0, n, WeightOrder::kNK).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(packWeights(w.data(), k, 0, WeightOrder::kKN).status().code(),
            StatusCode::kInvalidArgument);
}


// ---- MKL's packed sgemm (runMkl) -----------------------------------------------------------------
//
// MKL sums in its own order, so only the double-precision reference's bound applies (it holds for
// any summation order); the epilogue and the aliasing rules are run()'s. MKL comes from torch's
// libtorch_cpu, loaded here as the Python process has it.

/// Loads libtorch_cpu (the path CMake found) once, before the first mklAvailable().
bool loadTorchMkl() {
  static const bool loaded = dlopen(VERIFUSE_TEST_TORCH_CPU_LIBRARY, RTLD_NOW | RTLD_GLOBAL) != nullptr;
  return loaded;
}

class MklGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(loadTorchMkl()) << dlerror();
    if (!mklAvailable()) GTEST_SKIP() << "MKL unavailable: " << mklUnavailableReason();
    savedThreads_ = omp_get_max_threads();
  }
  void TearDown() override { omp_set_num_threads(savedThreads_); }

  /// Packs for p.m rows, runs into a sentinel-filled c (or \p c0 when given) and checks.
  std::vector<float> runMklAndCheck(const Problem& p, const std::string& what) {
    auto packed = packWeightsMkl(p.w.data(), p.k, p.n, p.order, p.m);
    EXPECT_TRUE(packed.isOk()) << packed.status().toString();
    if (!packed.isOk()) return {};
    EXPECT_EQ(packed.value()->m(), p.m);
    EXPECT_GE(packed.value()->bytes(), static_cast<size_t>(p.k * p.n * 4));
    std::vector<float> c(p.m * p.ldc, kSentinel);
    Epilogue ep{p.useBias ? p.bias.data() : nullptr, p.ops};
    const auto operands = operandPointers(p);
    const Status s = runMkl(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep, p.residual.data(), p.ldr,
                            operands);
    EXPECT_TRUE(s.isOk()) << s.toString();
    expectMatches(p, c, what, /*floatChain=*/false);
    return c;
  }
  int savedThreads_ = 1;
};

TEST_F(MklGemmTest, ShapesMatchTheDoubleReference) {
  // Edge sizes, padded strides, one decode row and transformer widths (K = 768 with N = 1024 and
  // GPT-2's 2304), each with both weight orders.
  const ShapeCase cases[] = {{1, 1, 1, 0, 0},    {2, 3, 5, 1, 3},     {7, 17, 33, 2, 1}, {13, 31, 47, 0, 5},
                             {1, 768, 100, 0, 0}, {17, 300, 70, 7, 9}, {150, 600, 37, 4, 4},
                             {16, 768, 1024, 0, 0}, {24, 768, 2304, 3, 0}};
  for (const ShapeCase& sc : cases) {
    for (const WeightOrder order : {WeightOrder::kNK, WeightOrder::kKN}) {
      const Problem p = makeProblem(sc.m, sc.k, sc.n, order, sc.padA, sc.padC);
      runMklAndCheck(p, describe(p));
    }
  }
}

TEST_F(MklGemmTest, EveryPostOpAsRunAppliesIt) {
  for (const int64_t threads : {1, 2}) {
    omp_set_num_threads(static_cast<int>(threads));
    for (const auto& pc : postOpCases(13, 37)) {
      Problem p = makeProblem(13, 600, 37, WeightOrder::kNK, 3, 5, 2, pc.ops);
      for (float& v : p.w) v *= 0.35f;  // pre-activations about ±5: every kink is crossed
      runMklAndCheck(p, pc.name + " threads=" + std::to_string(threads));
    }
  }
  Problem noBias = makeProblem(9, 40, 21, WeightOrder::kKN);
  noBias.useBias = false;
  runMklAndCheck(noBias, "without bias or post-ops");
}

TEST_F(MklGemmTest, InPlaceResidualAndBinaryOperand) {
  // c is the residual (and the full binary operand): each must be read before MKL's product
  // overwrites c, which a product written straight into c would break.
  for (const int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Problem p = makeProblem(61, 700, 150, WeightOrder::kNK, 0, 3, 3,
                            {elt(Activation::kRelu), sumOp(1.f), elt(Activation::kClamp, -2.f, 2.f)});
    auto packed = packWeightsMkl(p.w.data(), p.k, p.n, p.order, p.m);
    ASSERT_TRUE(packed.isOk());
    std::vector<float> c = p.residual;  // ldr == ldc
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = p.n; j < p.ldc; ++j) c[i * p.ldc + j] = kSentinel;
    }
    Epilogue ep{p.bias.data(), p.ops};
    ASSERT_TRUE(runMkl(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep, c.data(), p.ldc).isOk());
    expectMatches(p, c, "in-place sum threads=" + std::to_string(threads), false);
  }
  Problem q = makeProblem(9, 600, 40, WeightOrder::kKN, 0, 0, 0,
                          {binOp(BinaryAlg::kMul, {9, 40}), binOp(BinaryAlg::kAdd, {1, 40})});
  auto packed = packWeightsMkl(q.w.data(), q.k, q.n, q.order, q.m);
  ASSERT_TRUE(packed.isOk());
  std::vector<float> c = q.operands[0];
  Epilogue ep{q.bias.data(), q.ops};
  const float* operands[] = {c.data(), q.operands[1].data()};
  ASSERT_TRUE(runMkl(q.a.data(), q.m, q.lda, *packed.value(), c.data(), q.ldc, ep, nullptr, 0, operands).isOk());
  expectMatches(q, c, "in-place binary", false);
}

TEST_F(MklGemmTest, TakesOnlyThePackedRowCountAndRunsChecks) {
  const Problem p = makeProblem(8, 64, 32, WeightOrder::kNK);
  auto packed = packWeightsMkl(p.w.data(), p.k, p.n, p.order, p.m);
  ASSERT_TRUE(packed.isOk());
  std::vector<float> c(p.m * p.ldc, kSentinel);
  const Epilogue ep{p.bias.data(), {}};
  EXPECT_EQ(runMkl(p.a.data(), 7, p.lda, *packed.value(), c.data(), p.ldc, ep).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(runMkl(p.a.data(), 0, p.lda, *packed.value(), c.data(), p.ldc, ep).isOk());  // m = 0: no-op
  EXPECT_TRUE(sameFloat(c[0], kSentinel));
  EXPECT_EQ(runMkl(p.a.data(), p.m, p.k - 1, *packed.value(), c.data(), p.ldc, ep).code(),
            StatusCode::kInvalidArgument);  // run()'s checks: lda < k
  EXPECT_EQ(runMkl(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, Epilogue{nullptr, {sumOp(1.f)}}).code(),
            StatusCode::kInvalidArgument);  // a sum post-op without its residual
  EXPECT_EQ(packWeightsMkl(nullptr, p.k, p.n, p.order, p.m).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(packWeightsMkl(p.w.data(), p.k, p.n, p.order, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(runMkl(p.a.data(), p.m, p.lda, *packed.value(), c.data(), p.ldc, ep).isOk());
  expectMatches(p, c, "after the refused calls", false);
}

}  // namespace
}  // namespace verifuse::kernels::gemm
