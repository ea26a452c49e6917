// The built-in catalogue: every rule Proved (symbolically and for K = 1..4), every mutant Refuted
// with a counterexample, every dot axiom validated on small shapes.
#include <gtest/gtest.h>

#include <set>

#include "verifuse/verify/catalog.h"

namespace verifuse::verify {
namespace {

const ProveReport& report() {
  static const ProveReport r = proveAll(builtinRuleProofs());
  return r;
}

TEST(Catalog, RuleIdsAreUniqueKebabCase) {
  std::set<std::string> ids;
  for (const RuleProof& r : builtinRuleProofs()) {
    EXPECT_TRUE(ids.insert(r.ruleId).second) << "duplicate " << r.ruleId;
    for (char c : r.ruleId) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') << r.ruleId;
    EXPECT_FALSE(r.mutants.empty()) << r.ruleId << " has no mutant";
    EXPECT_FALSE(r.math.empty()) << r.ruleId;
  }
  for (const char* required :
       {"conv-bn-fold", "linear-bn-fold", "bn-to-scale-shift", "conv-relu-postop", "conv-leaky-relu-postop",
        "conv-gelu-erf-postop", "conv-gelu-tanh-postop", "conv-silu-postop", "conv-sigmoid-postop",
        "conv-tanh-postop", "conv-hardswish-postop", "conv-hardsigmoid-postop", "conv-clamp-postop",
        "conv-elu-postop", "residual-add-sum-postop", "residual-add-relu", "per-channel-mul-fold",
        "per-channel-add-fold", "dropout-eval-identity"}) {
    EXPECT_TRUE(ids.count(required)) << required;
  }
}

TEST(Catalog, EveryRuleProved) {
  for (const RuleResult& r : report().rules) {
    EXPECT_EQ(r.verdict.kind, VerdictKind::Proved) << r.ruleId << ": " << r.verdict.summary();
  }
}

TEST(Catalog, EveryRuleProvedByBoundedInstantiation) {
  int withDot = 0;
  for (const RuleResult& r : report().rules) {
    if (r.bounded.empty()) continue;
    ++withDot;
    EXPECT_EQ(r.bounded.size(), 4u) << r.ruleId;
    for (const InstanceResult& i : r.bounded) {
      EXPECT_EQ(i.verdict.kind, VerdictKind::Proved) << r.ruleId << " " << i.model << ": " << i.verdict.summary();
    }
  }
  EXPECT_GE(withDot, 5);
}

TEST(Catalog, EveryMutantRefutedWithCounterexample) {
  size_t mutants = 0;
  for (const RuleResult& r : report().rules) {
    for (const MutantResult& m : r.mutants) {
      ++mutants;
      EXPECT_TRUE(m.killed()) << r.ruleId << "/" << m.name << ": " << m.verdict.summary();
      EXPECT_EQ(m.verdict.messageClass, MessageClass::ValueMismatch) << r.ruleId << "/" << m.name;
      EXPECT_FALSE(m.verdict.counterexample.goal.empty()) << r.ruleId << "/" << m.name;
      EXPECT_NE(m.verdict.counterexample.sourceValue, m.verdict.counterexample.targetValue);
    }
  }
  EXPECT_GE(mutants, 25u);
}

TEST(Catalog, DotAxiomsValidatedOnSmallShapes) {
  ASSERT_EQ(report().axioms.size(), 2u * 4u);
  for (const AxiomResult& a : report().axioms) {
    EXPECT_EQ(a.verdict.kind, VerdictKind::Proved) << a.axiom << " " << a.model << ": " << a.verdict.summary();
  }
}

TEST(Catalog, ReportIsOkAndSerializes) {
  EXPECT_TRUE(report().ok()) << report().toText();
  std::string json = report().toJson();
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_NE(json.find("\"rule\":\"conv-bn-fold\""), std::string::npos);
  EXPECT_NE(json.find("\"counterexample\""), std::string::npos);
  EXPECT_NE(json.find("\"ok\":true"), std::string::npos);
  std::printf("%s", report().toText().c_str());
}

TEST(Catalog, BiasNotRescaledCounterexampleNamesIrVariables) {
  for (const RuleResult& r : report().rules) {
    if (r.ruleId != "conv-bn-fold") continue;
    for (const MutantResult& m : r.mutants) {
      if (m.name != "bias-not-rescaled") continue;
      std::set<std::string> names;
      for (const auto& [n, v] : m.verdict.counterexample.values) names.insert(n);
      EXPECT_TRUE(names.count("bn.running_mean[o]")) << m.verdict.counterexample.toString();
      EXPECT_TRUE(names.count("conv.bias[o]"));
      EXPECT_TRUE(names.count("bn.eps"));
      return;
    }
  }
  FAIL() << "conv-bn-fold/bias-not-rescaled not found";
}

}  // namespace
}  // namespace verifuse::verify
