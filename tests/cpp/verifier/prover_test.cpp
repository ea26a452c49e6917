// The prover: every verdict kind, counterexamples, definedness, vacuity, never-throw.
#include <gtest/gtest.h>

#include <thread>

#include "verifuse/verify/prover.h"
#include "verifuse/verify/semantics.h"

namespace verifuse::verify {
namespace {

Obligation simple(const std::string& name, Expr source, Expr target, std::vector<Expr> assumptions = {}) {
  ObligationBuilder ob(name);
  for (Expr& a : assumptions) ob.assume(a);
  ob.prove("out", std::move(source), std::move(target));
  return ob.build();
}

// x³ + y³ = z³ has no positive integer solution; Z3 cannot show it quickly.
Obligation fermatCubes() {
  ObligationBuilder ob("fermat-3");
  Expr x = ob.var("x", Sort::Int), y = ob.var("y", Sort::Int), z = ob.var("z", Sort::Int);
  ob.assume(x > Expr::integer(0)).assume(y > Expr::integer(0)).assume(z > Expr::integer(0));
  Expr hit = x * x * x + y * y * y == z * z * z;
  ob.prove("out", Expr::ite(hit, 1, 0), 0);
  return ob.build();
}

TEST(Prover, ProvedIdentity) {
  Expr a = Expr::var("a"), b = Expr::var("b");
  Verdict v = prove(simple("comm", a * b + 1, 1 + b * a));
  EXPECT_EQ(v.kind, VerdictKind::Proved) << v.summary();
  EXPECT_TRUE(v.proved());
  EXPECT_TRUE(v.counterexample.empty());
}

TEST(Prover, RefutedWithCounterexample) {
  Expr a = Expr::var("conv.out[o]");
  Verdict v = prove(simple("bad", a * 2, a + 1));
  ASSERT_EQ(v.kind, VerdictKind::Refuted) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::ValueMismatch);
  EXPECT_TRUE(v.refutedWithCounterexample());
  ASSERT_EQ(v.counterexample.values.size(), 1u);
  EXPECT_EQ(v.counterexample.values[0].first, "conv.out[o]");
  EXPECT_NE(v.counterexample.values[0].second, "1");
  EXPECT_EQ(v.counterexample.goal, "out");
  EXPECT_NE(v.counterexample.sourceValue, v.counterexample.targetValue);
  EXPECT_NE(v.summary().find("Value mismatch"), std::string::npos);
}

TEST(Prover, GeluVariantsAreDistinct) {
  Expr y = Expr::var("y");
  Verdict v = prove(simple("gelu", sem::geluErf(y), sem::geluTanh(y)));
  EXPECT_TRUE(v.refutedWithCounterexample()) << v.summary();
  // The counterexample shows the UF values it picked.
  bool sawGelu = false;
  for (const auto& [n, val] : v.counterexample.values) sawGelu |= n.find("gelu_erf") != std::string::npos;
  EXPECT_TRUE(sawGelu) << v.counterexample.toString();
}

TEST(Prover, TimeoutOnHardNonlinearQuery) {
  ProveOptions opts;
  opts.timeoutMs = 50;
  Verdict v = prove(fermatCubes(), opts);
  EXPECT_EQ(v.kind, VerdictKind::Timeout) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::SolverTimeout);
  EXPECT_FALSE(v.proved());
  EXPECT_LT(v.seconds, 3.0);
}

TEST(Prover, UnknownWhenResourceLimitExhausted) {
  ProveOptions opts;
  opts.timeoutMs = 5000;
  opts.resourceLimit = 20000;
  Verdict v = prove(fermatCubes(), opts);
  EXPECT_EQ(v.kind, VerdictKind::Unknown) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::SolverUnknown);
  EXPECT_FALSE(v.proved());
}

TEST(Prover, UnsupportedConstructs) {
  Expr x = Expr::var("x");
  Verdict v = prove(simple("sqrt", Expr::sqrt(x * x), x, {x >= 0}));
  EXPECT_EQ(v.kind, VerdictKind::Unsupported) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::NotEncodable);
  EXPECT_NE(v.detail.find("fresh variable"), std::string::npos) << v.detail;

  // One UF name used with two signatures.
  Verdict v2 = prove(simple("arity", Expr::apply("f", {x}), Expr::apply("f", {x, x})));
  EXPECT_EQ(v2.kind, VerdictKind::Unsupported) << v2.summary();

  // Arithmetic on the uninterpreted Tensor sort.
  Verdict v3 = prove(simple("tensor", Expr::var("W", Sort::Tensor) + 1, x));
  EXPECT_EQ(v3.kind, VerdictKind::Unsupported) << v3.summary();

  // One name with two sorts.
  Verdict v4 = prove(simple("sorts", Expr::var("n", Sort::Int) + Expr::var("n"), x));
  EXPECT_EQ(v4.kind, VerdictKind::Unsupported) << v4.summary();

  // No goals.
  Verdict v5 = prove(ObligationBuilder("empty").build());
  EXPECT_EQ(v5.kind, VerdictKind::Unsupported) << v5.summary();
}

TEST(Prover, VacuousPreconditionIsAnErrorNotAProof) {
  Expr x = Expr::var("x");
  // Any goal, even a false one, "holds" under a false precondition.
  Verdict v = prove(simple("vacuous", x, x + 1, {x > 1, x < 0}));
  EXPECT_EQ(v.kind, VerdictKind::Refuted) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::PreconditionAlwaysFalse);
  EXPECT_TRUE(v.isVacuous());
  EXPECT_FALSE(v.proved());
  EXPECT_FALSE(v.refutedWithCounterexample());  // a vacuous mutant would not count as killed

  // Vacuity through a fresh variable: rsqrt of a quantity assumed negative.
  ObligationBuilder ob("vacuous-fresh");
  Expr var = ob.var("bn.running_var[c]");
  ob.assume(var < 0);
  Expr r = sem::rsqrt(ob, var, "rsqrt(var)");
  ob.prove("out", r * 0, 0);
  EXPECT_TRUE(prove(ob.build()).isVacuous());

  // Vacuity through inconsistent axioms.
  ObligationBuilder ob2("vacuous-axioms");
  Expr t = Expr::var("t");
  ob2.axiom(Expr::forAll({t}, Expr::apply("f", {t}) > t));
  ob2.axiom(Expr::forAll({t}, Expr::apply("f", {t}) < t));
  ob2.prove("out", x, x + 1);
  EXPECT_TRUE(prove(ob2.build()).isVacuous());
}

TEST(Prover, DivisionDefinedness) {
  Expr x = Expr::var("x"), d = Expr::var("d");
  // The source divides by d, so d != 0 is known and the target may divide by it too.
  EXPECT_EQ(prove(simple("src-div", x / d * d, x)).kind, VerdictKind::Proved);
  // The target divides by d where the source is defined for every d.
  Verdict v = prove(simple("tgt-div", x, x * d / d));
  EXPECT_EQ(v.kind, VerdictKind::Refuted) << v.summary();
  EXPECT_EQ(v.messageClass, MessageClass::TargetLessDefined);
  EXPECT_TRUE(v.refutedWithCounterexample());
  // ...unless a guard says d != 0.
  EXPECT_EQ(prove(simple("tgt-div-guarded", x, x * d / d, {d != 0})).kind, VerdictKind::Proved);
}

TEST(Prover, BatchNormRsqrtTrickProvesFold) {
  ObligationBuilder ob("scale-shift");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "c");
  sem::assumeBatchNorm(ob, bn);
  Expr x = ob.var("x");
  Expr s = bn.gamma * sem::batchNormRsqrt(ob, bn);
  ob.prove("out", sem::batchNormEval(ob, x, bn), x * s + (bn.beta - bn.mean * s));
  Obligation o = ob.build();
  EXPECT_EQ(o.fresh.size(), 1u);  // the same rsqrt is introduced once
  EXPECT_EQ(prove(o).kind, VerdictKind::Proved);
}

TEST(Prover, OneDnnParameterizations) {
  Expr y = Expr::var("y");
  using namespace sem;
  EXPECT_TRUE(prove(simple("hs", hardswish(y), onednn::eltwiseHardswish(y, Expr::rational(1, 6), Expr::rational(1, 2)))).proved());
  EXPECT_TRUE(prove(simple("hsig", hardsigmoid(y), onednn::eltwiseHardsigmoid(y, Expr::rational(1, 6), Expr::rational(1, 2)))).proved());
  EXPECT_TRUE(prove(simple("relu6", relu6(y), onednn::eltwiseClip(y, 0, 6))).proved());
  EXPECT_TRUE(prove(simple("silu", silu(y), onednn::eltwiseSwish(y, 1))).proved());
  EXPECT_TRUE(prove(simple("leaky", leakyRelu(y, Expr::decimal("0.01")), onednn::eltwiseRelu(y, Expr::rational(1, 100)))).proved());
  EXPECT_TRUE(prove(simple("elu", elu(y, 1), onednn::eltwiseElu(y, 1))).proved());
  EXPECT_TRUE(prove(simple("sum", add(y, Expr::var("z"), 2), onednn::sumPostOp(Expr::var("z"), y, 2))).proved());
  EXPECT_TRUE(prove(simple("hs-alpha", hardswish(y), onednn::eltwiseHardswish(y, Expr::rational(1, 5), Expr::rational(1, 2)))).refutedWithCounterexample());
}

TEST(Prover, BoolAndIntGoals) {
  Expr i = Expr::var("i", Sort::Int), flag = Expr::var("training", Sort::Bool);
  EXPECT_TRUE(prove(simple("int", i + Expr::integer(1), Expr::integer(1) + i)).proved());
  EXPECT_TRUE(prove(simple("bool", flag && Expr::boolean(true), flag)).proved());
  EXPECT_TRUE(prove(simple("bool-bad", flag, !flag)).refutedWithCounterexample());
  // Int promotes to Real in mixed arithmetic.
  EXPECT_TRUE(prove(simple("mixed", i + Expr::rational(1, 2), Expr::rational(1, 2) + i)).proved());
}

TEST(Prover, ConcurrentProofsUseSeparateContexts) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      Expr a = Expr::var("a");
      ok[t] = prove(simple("t", (a + t) * (a - t), a * a - t * t)).proved() ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 1) << t;
}

TEST(Prover, QueryCounterAdvances) {
  uint64_t before = solverQueryCount();
  (void)prove(simple("count", Expr::var("a"), Expr::var("a")));
  EXPECT_GE(solverQueryCount(), before + 2);  // vacuity + value
  EXPECT_FALSE(solverVersion().empty());
}

}  // namespace
}  // namespace verifuse::verify
