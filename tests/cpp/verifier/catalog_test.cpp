// proveAll and checkRuleProofs (catalog.h) on example rule proofs: Proved symbolically and for
// K = 1..4, mutants Refuted with a counterexample, dot axioms validated on small shapes, a wrong
// rule refuted on a concrete shape, malformed lists refused, the report's JSON and text. The
// pipeline's own rules are proved in tests/cpp/passes/rules_test.cpp (the verifier owns none).
#include <gtest/gtest.h>

#include <set>

#include "example_rule_proofs.h"
#include "verifuse/verify/catalog.h"

namespace verifuse::verify {
namespace {

const ProveReport& report() {
  static const ProveReport r = proveAll(examples::exampleRuleProofs());
  return r;
}

TEST(Catalog, ExamplesAreWellFormed) { EXPECT_TRUE(checkRuleProofs(examples::exampleRuleProofs()).isOk()); }

TEST(Catalog, MalformedListsAreRefused) {
  auto good = examples::exampleRuleProofs();
  auto expectRefused = [](std::vector<RuleProof> proofs, const std::string& what) {
    Status s = checkRuleProofs(proofs);
    EXPECT_FALSE(s.isOk()) << what;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
  };
  auto duplicate = good;
  duplicate.push_back(good[0]);
  expectRefused(duplicate, "duplicate id");
  auto noMutant = good;
  noMutant[1].mutants.clear();
  expectRefused(noMutant, "no mutant");
  auto badId = good;
  badId[0].ruleId = "Not_Kebab";
  expectRefused(badId, "id");
  auto noFactory = good;
  noFactory[2].build = nullptr;
  expectRefused(noFactory, "no obligation");
  auto noMath = good;
  noMath[2].math.clear();
  expectRefused(noMath, "no math");
  auto twinMutants = good;
  twinMutants[2].mutants.push_back(twinMutants[2].mutants[0]);
  expectRefused(twinMutants, "mutant twice");
  EXPECT_TRUE(isKebabCase("conv-bn-fold"));
  EXPECT_FALSE(isKebabCase("conv--bn"));
  EXPECT_FALSE(isKebabCase("-conv"));
}

TEST(Catalog, EveryRuleProved) {
  ASSERT_EQ(report().rules.size(), 3u);
  for (const RuleResult& r : report().rules) {
    EXPECT_EQ(r.verdict.kind, VerdictKind::Proved) << r.ruleId << ": " << r.verdict.summary();
  }
}

TEST(Catalog, DotRulesProvedByBoundedInstantiation) {
  int withDot = 0;
  for (const RuleResult& r : report().rules) {
    if (r.bounded.empty()) continue;
    ++withDot;
    EXPECT_EQ(r.bounded.size(), 4u) << r.ruleId;
    for (const InstanceResult& i : r.bounded) {
      EXPECT_EQ(i.verdict.kind, VerdictKind::Proved) << r.ruleId << " " << i.model << ": " << i.verdict.summary();
    }
  }
  EXPECT_EQ(withDot, 2);
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
  EXPECT_EQ(mutants, 3u);
}

TEST(Catalog, DotAxiomsValidatedOnSmallShapes) {
  ASSERT_EQ(report().axioms.size(), 2u * 4u);
  for (const AxiomResult& a : report().axioms) {
    EXPECT_EQ(a.verdict.kind, VerdictKind::Proved) << a.axiom << " " << a.model << ": " << a.verdict.summary();
  }
}

TEST(Catalog, WrongRuleIsRefutedOnAConcreteShapeAndNotOk) {
  // A rule whose own obligation is its mutant's: refuted on K = 1 with a witness, never ok().
  RuleProof wrong = examples::exampleRuleProofs()[0];
  wrong.ruleId = "example-wrong";
  wrong.build = wrong.mutants[0].build;
  RuleResult r = proveRule(wrong);
  EXPECT_EQ(r.verdict.kind, VerdictKind::Refuted);
  EXPECT_FALSE(r.verdict.counterexample.empty());
  EXPECT_FALSE(r.ok());
  ProveReport rep = proveAll({wrong}, ProveAllOptions{.maxK = 1, .checkAxioms = false});
  EXPECT_FALSE(rep.ok());
  EXPECT_NE(rep.toText().find("FAILED"), std::string::npos);
}

TEST(Catalog, AVacuousMutantIsNotKilled) {
  // A mutant whose assumptions contradict each other is "Refuted" as vacuous, not with a witness.
  RuleProof p = examples::exampleRuleProofs()[2];
  p.mutants = {{"vacuous", "assumes x > 0 and x < 0", [](const sem::DotModel&) {
                  ObligationBuilder ob("vacuous");
                  Expr x = ob.var("x");
                  ob.assume(x > 0).assume(x < 0);
                  ob.prove("out", x, x + 1);
                  return ob.build();
                }}};
  RuleResult r = proveRule(p);
  ASSERT_EQ(r.mutants.size(), 1u);
  EXPECT_FALSE(r.mutants[0].killed());
  EXPECT_FALSE(r.ok());
}

TEST(Catalog, ReportIsOkAndSerializes) {
  EXPECT_TRUE(report().ok()) << report().toText();
  std::string json = report().toJson();
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_NE(json.find("\"rule\":\"example-conv-bn-relu-fold\""), std::string::npos);
  EXPECT_NE(json.find("\"counterexample\""), std::string::npos);
  EXPECT_NE(json.find("\"ok\":true"), std::string::npos);
  EXPECT_FALSE(proveAll({}).ok());  // nothing proved is not ok
  std::printf("%s", report().toText().c_str());
}

TEST(Catalog, CounterexampleNamesIrVariables) {
  const RuleResult& r = report().rules[0];
  ASSERT_EQ(r.ruleId, "example-conv-bn-relu-fold");
  const MutantResult& m = r.mutants.at(0);
  std::set<std::string> names;
  for (const auto& [n, v] : m.verdict.counterexample.values) names.insert(n);
  EXPECT_TRUE(names.count("bn.running_mean[o]")) << m.verdict.counterexample.toString();
  EXPECT_TRUE(names.count("conv.bias[o]"));
}

}  // namespace
}  // namespace verifuse::verify
