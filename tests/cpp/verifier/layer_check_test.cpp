// End-to-end layer check with concrete weights: a correct fold is Proved, folds with the
// classic bugs (eps dropped, wrong channel, wrong sign) are Refuted with a distinguishing input
// that the test re-evaluates itself, and impossible or non-finite layers are Unsupported.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "verifuse/verify/layer_check.h"

namespace verifuse::verify {
namespace {

struct Layer {
  std::vector<float> w, b, fw, fb;
  FoldedLayer spec;
};

/// A C x K layer with random weights and a batch norm folded in double then rounded to float,
/// as the rules do. \p epsInFold and \p channelShift plant bugs.
Layer bnLayer(int64_t C, int64_t K, double epsInFold = 1e-5, int64_t channelShift = 0, unsigned seed = 1) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.2f, 2.f);
  Layer L;
  L.w.resize(static_cast<size_t>(C * K));
  L.b.resize(static_cast<size_t>(C));
  for (float& v : L.w) v = n(gen);
  for (float& v : L.b) v = n(gen);
  FoldedLayer& s = L.spec;
  s.fold = FoldedLayer::Fold::kBatchNorm;
  s.channels = C;
  s.fanIn = K;
  s.eps = 1e-5;
  for (int64_t o = 0; o < C; ++o) {
    s.gamma.push_back(u(gen));
    s.beta.push_back(n(gen));
    s.mean.push_back(n(gen));
    s.var.push_back(u(gen));
  }
  L.fw.resize(L.w.size());
  L.fb.resize(L.b.size());
  for (int64_t o = 0; o < C; ++o) {
    const size_t src = static_cast<size_t>((o + channelShift) % C);
    const double scale = s.gamma[src] / std::sqrt(s.var[src] + epsInFold);
    for (int64_t i = 0; i < K; ++i) L.fw[static_cast<size_t>(o * K + i)] = static_cast<float>(L.w[static_cast<size_t>(o * K + i)] * scale);
    L.fb[static_cast<size_t>(o)] = static_cast<float>((L.b[static_cast<size_t>(o)] - s.mean[src]) * scale + s.beta[src]);
  }
  s.weight = L.w.data();
  s.bias = L.b.data();
  s.foldedWeight = L.fw.data();
  s.foldedBias = L.fb.data();
  s.inputName = "conv1.in";
  s.outputName = "conv1.out";
  return L;
}

double value(const Counterexample& c, const std::string& name) {
  for (const auto& [k, v] : c.values) {
    if (k == name) return std::stod(v);
  }
  ADD_FAILURE() << "no value for " << name;
  return 0;
}

TEST(LayerCheck, CorrectBatchNormFoldIsProved) {
  Layer L = bnLayer(8, 27);
  LayerCheckResult r = checkFoldedLayer(L.spec);
  EXPECT_EQ(r.verdict.kind, VerdictKind::Proved) << r.verdict.summary();
  EXPECT_EQ(r.queries, 1);  // one LRA search for the whole layer, nothing to confirm
  EXPECT_GT(r.maxTolerance, 0);
}

TEST(LayerCheck, LinearWith4096WeightsIsProved) {
  // 64 x 64: the largest layer the compile-time check takes (ResNet-50's first 1x1 conv).
  Layer L = bnLayer(64, 64);
  LayerCheckResult r = checkFoldedLayer(L.spec);
  EXPECT_EQ(r.verdict.kind, VerdictKind::Proved) << r.verdict.summary();
  std::printf("64x64 layer: %.3f s, %lld queries\n", r.verdict.seconds, static_cast<long long>(r.queries));
}

TEST(LayerCheck, EpsDroppedIsRefutedWithAnInputThatReallyDiffers) {
  Layer L = bnLayer(4, 9, /*epsInFold=*/0.0);
  LayerCheckResult r = checkFoldedLayer(L.spec);
  ASSERT_EQ(r.verdict.kind, VerdictKind::Refuted) << r.verdict.summary();
  EXPECT_EQ(r.verdict.messageClass, MessageClass::ValueMismatch);
  const Counterexample& c = r.verdict.counterexample;
  EXPECT_NE(c.goal.find("conv1.out channel"), std::string::npos) << c.goal;
  // Re-evaluate the counterexample in double: the layers differ by more than float rounding.
  const int64_t o = static_cast<int64_t>(value(c, "channel"));
  double fused = L.fb[static_cast<size_t>(o)], pre = L.b[static_cast<size_t>(o)];
  double l1 = std::fabs(fused);
  for (int64_t i = 0; i < 9; ++i) {
    l1 += std::fabs(L.fw[static_cast<size_t>(o * 9 + i)]);
    double xi = value(c, "conv1.in[" + std::to_string(i) + "]");
    EXPECT_LE(std::fabs(xi), 1.0);
    fused += L.fw[static_cast<size_t>(o * 9 + i)] * xi;
    pre += L.w[static_cast<size_t>(o * 9 + i)] * xi;
  }
  const FoldedLayer& s = L.spec;
  const size_t oc = static_cast<size_t>(o);
  double unfused = s.gamma[oc] * (pre - s.mean[oc]) / std::sqrt(s.var[oc] + s.eps) + s.beta[oc];
  EXPECT_GT(std::fabs(fused - unfused), LayerCheckOptions{}.relTolerance * l1 * 0.999);
  EXPECT_NEAR(std::stod(c.targetValue), fused, 1e-6 * (1 + std::fabs(fused)));
  EXPECT_NEAR(std::stod(c.sourceValue.substr(0, c.sourceValue.size() - 1)), unfused, 1e-6 * (1 + std::fabs(unfused)));
}

TEST(LayerCheck, WrongChannelIsRefuted) {
  Layer L = bnLayer(4, 9, 1e-5, /*channelShift=*/1);
  EXPECT_EQ(checkFoldedLayer(L.spec).verdict.kind, VerdictKind::Refuted);
}

TEST(LayerCheck, OneUlpOffInOneWeightIsStillProved) {
  // Float rounding is what the tolerance is for: one folded weight one ulp away is not a bug.
  Layer L = bnLayer(2, 16);
  L.fw[3] = std::nextafter(L.fw[3], 1e9f);
  EXPECT_EQ(checkFoldedLayer(L.spec).verdict.kind, VerdictKind::Proved);
}

TEST(LayerCheck, PerChannelMulDivAddFolds) {
  const int64_t C = 3, K = 5;
  std::vector<float> w(C * K), b(C), fw(C * K), fb(C);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.7f;
  for (size_t o = 0; o < b.size(); ++o) b[o] = 0.3f * static_cast<float>(o) - 0.2f;
  const std::vector<double> f = {0.5, -3.0, 1.25};
  for (auto fold : {FoldedLayer::Fold::kMul, FoldedLayer::Fold::kDiv, FoldedLayer::Fold::kAdd}) {
    for (int64_t o = 0; o < C; ++o) {
      const double k = fold == FoldedLayer::Fold::kMul ? f[o] : fold == FoldedLayer::Fold::kDiv ? 1.0 / f[o] : 1.0;
      for (int64_t i = 0; i < K; ++i) fw[o * K + i] = static_cast<float>(w[o * K + i] * k);
      fb[o] = static_cast<float>(fold == FoldedLayer::Fold::kAdd ? b[o] + f[o] : b[o] * k);
    }
    FoldedLayer s;
    s.fold = fold;
    s.channels = C;
    s.fanIn = K;
    s.weight = w.data();
    s.bias = b.data();
    s.foldedWeight = fw.data();
    s.foldedBias = fb.data();
    s.factor = f;
    EXPECT_EQ(checkFoldedLayer(s).verdict.kind, VerdictKind::Proved) << static_cast<int>(fold);
    fb[1] = -fb[1] + 1.0f;  // a wrong bias
    EXPECT_EQ(checkFoldedLayer(s).verdict.kind, VerdictKind::Refuted) << static_cast<int>(fold);
  }
}

TEST(LayerCheck, StandaloneBatchNormAsScaleShift) {
  // No weight: the folded "weight" is the scale vector and the bias the shift (fanIn 1).
  FoldedLayer s;
  s.channels = 2;
  s.fanIn = 1;
  s.mean = {0.5, -1.0};
  s.var = {4.0, 0.25};
  s.gamma = {2.0, 1.0};
  s.beta = {0.0, 3.0};
  s.eps = 0;
  std::vector<float> scale = {1.0f, 2.0f}, shift = {-0.5f, 5.0f};
  s.foldedWeight = scale.data();
  s.foldedBias = shift.data();
  EXPECT_EQ(checkFoldedLayer(s).verdict.kind, VerdictKind::Proved);
  shift[1] = 5.5f;
  EXPECT_EQ(checkFoldedLayer(s).verdict.kind, VerdictKind::Refuted);
}

TEST(LayerCheck, ImpossibleOrNonFiniteLayersAreUnsupported) {
  Layer L = bnLayer(2, 4);
  L.spec.var[1] = -1.0;  // var + eps < 0: no 1/sqrt, no semantics to compare against
  LayerCheckResult r = checkFoldedLayer(L.spec);
  EXPECT_EQ(r.verdict.kind, VerdictKind::Unsupported);
  EXPECT_NE(r.verdict.detail.find("var + eps"), std::string::npos) << r.verdict.detail;
  Layer M = bnLayer(2, 4);
  M.w[0] = std::nanf("");
  EXPECT_EQ(checkFoldedLayer(M.spec).verdict.kind, VerdictKind::Unsupported);
  FoldedLayer empty;
  EXPECT_EQ(checkFoldedLayer(empty).verdict.kind, VerdictKind::Unsupported);
}

TEST(LayerCheck, QueriesAreCounted) {
  const uint64_t before = layerCheckQueryCount();
  Layer L = bnLayer(3, 4);
  checkFoldedLayer(L.spec);
  EXPECT_EQ(layerCheckQueryCount() - before, 1u);
}

}  // namespace
}  // namespace verifuse::verify
