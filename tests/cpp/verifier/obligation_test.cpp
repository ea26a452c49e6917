// The obligation language: construction, canonical printing, builder, Z3-free public headers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "verifuse/verify/obligation.h"
#include "verifuse/verify/semantics.h"

namespace verifuse::verify {
namespace {

TEST(Obligation, ConstantsAreNormalizedRationals) {
  EXPECT_EQ(Expr::rational(2, 4).str(), "1/2");
  EXPECT_EQ(Expr::rational(3, -6).str(), "-1/2");
  EXPECT_EQ(Expr::decimal("0.044715").str(), "8943/200000");
  EXPECT_EQ(Expr::decimal("-1.5").str(), "-3/2");
  EXPECT_EQ(Expr(7).str(), "7");
  EXPECT_EQ(Expr::integer(7).str(), "7i");
  EXPECT_EQ(Expr::boolean(true).str(), "true");
}

TEST(Obligation, CanonicalFormIsDeterministicAndSortAware) {
  Expr x = Expr::var("bn.running_var[o]"), n = Expr::var("n", Sort::Int);
  EXPECT_EQ((x + Expr::rational(1, 100000)).str(), "(+ |bn.running_var[o]| 1/100000)");
  EXPECT_EQ(n.str(), "|n|:Int");
  EXPECT_EQ((x / 2).sort(), Sort::Real);
  EXPECT_EQ((n + n).sort(), Sort::Int);
  EXPECT_EQ((n + x).sort(), Sort::Real);
  EXPECT_EQ((x < 1).sort(), Sort::Bool);
  EXPECT_EQ(Expr::apply("dot", {Expr::var("W", Sort::Tensor), Expr::var("X", Sort::Tensor)}).str(),
            "(dot |W|:Tensor |X|:Tensor)");
  EXPECT_TRUE((x * 2).structurallyEqual(x * 2));
  EXPECT_FALSE((x * 2).structurallyEqual(2 * x));
}

TEST(Obligation, BuilderCollectsAssumptionsFreshAxiomsGoals) {
  ObligationBuilder ob("bn-to-scale-shift");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "c");
  sem::assumeBatchNorm(ob, bn);
  Expr x = ob.var("x[c]");
  Expr r1 = sem::batchNormRsqrt(ob, bn);
  Expr r2 = sem::batchNormRsqrt(ob, bn);
  EXPECT_TRUE(r1.structurallyEqual(r2));
  sem::DotModel::symbolic().require(ob);
  sem::DotModel::symbolic().require(ob);
  ob.prove("out[c]", sem::batchNormEval(ob, x, bn), x);
  Obligation o = ob.build();
  EXPECT_EQ(o.name, "bn-to-scale-shift");
  EXPECT_EQ(o.assumptions.size(), 2u);
  EXPECT_EQ(o.fresh.size(), 1u);
  EXPECT_EQ(o.fresh[0].constraints.size(), 2u);
  EXPECT_EQ(o.axioms.size(), 2u);
  ASSERT_EQ(o.goals.size(), 1u);
  EXPECT_EQ(o.goals[0].label, "out[c]");
  EXPECT_EQ(o.canonical(), ob.build().canonical());
  EXPECT_NE(o.canonical().find("(fresh |rsqrt(bn.running_var[c]+bn.eps)|"), std::string::npos) << o.canonical();
}

TEST(Obligation, DotModelExplicitSums) {
  sem::DotModel m = sem::DotModel::explicitSum(3);
  EXPECT_EQ(m.describe(), "K=3");
  sem::TensorTerm w = m.tensor("W"), x = m.tensor("X");
  ASSERT_EQ(w.elements.size(), 3u);
  EXPECT_EQ(w.elements[2].str(), "|W[2]|");
  EXPECT_EQ(m.dot(w, x).str(), "(+ (+ (* |W[0]| |X[0]|) (* |W[1]| |X[1]|)) (* |W[2]| |X[2]|))");
  EXPECT_EQ(sem::DotModel::symbolic().describe(), "dot-uf");
  EXPECT_EQ(sem::dotAxioms().size(), sem::dotAxiomNames().size());
}

TEST(Obligation, SemanticsShapes) {
  Expr y = Expr::var("y");
  EXPECT_EQ(sem::relu(y).str(), "(max |y| 0)");
  EXPECT_EQ(sem::silu(y).str(), "(* |y| (sigmoid |y|))");
  EXPECT_FALSE(sem::geluErf(y).structurallyEqual(sem::geluTanh(y)));
  EXPECT_EQ(sem::onednn::sumPostOp(Expr::var("prev"), y, 1).str(), "(+ (* 1 |prev|) |y|)");
}

// Rules in backend/ include these headers: they must never pull in Z3.
TEST(Obligation, PublicHeadersAreZ3Free) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(VERIFUSE_SOURCE_DIR) / "verifier" / "include" / "verifuse" / "verify";
  int headers = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    ++headers;
    EXPECT_EQ(text.str().find("#include <z3"), std::string::npos) << entry.path();
    EXPECT_EQ(text.str().find("#include \"z3"), std::string::npos) << entry.path();
  }
  EXPECT_GE(headers, 6);
}

}  // namespace
}  // namespace verifuse::verify
