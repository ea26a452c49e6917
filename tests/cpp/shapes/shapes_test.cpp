// Shape-program analysis: parser errors, propagation decisions, sat/unsat, redundancy, samples.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "verifuse/shapes/shape_analysis.h"
#include "verifuse/shapes/shape_problem.h"

namespace verifuse::shapes {
namespace {

ShapeReport analyze(const std::string& text, ShapeOptions opt = {}) {
  auto r = analyzeShapeProgram(text, opt);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  return r.isOk() ? r.value() : ShapeReport{};
}

std::string errorOf(const std::string& text) {
  auto r = analyzeShapeProgram(text, {});
  EXPECT_FALSE(r.isOk());
  return r.isOk() ? "" : r.status().message();
}

std::map<std::string, std::string> modelOf(const ShapeReport& r) {
  std::map<std::string, std::string> m;
  for (auto& v : r.model) m[v.name] = v.value;
  return m;
}

std::vector<size_t> redundantIndices(const ShapeReport& r) {
  std::vector<size_t> v;
  for (auto& a : r.redundant) v.push_back(a.index);
  return v;
}

std::string dataFile(const std::string& name) {
  const char* root = std::getenv("VERIFUSE_SOURCE_DIR");
  std::string dir = root ? root : VERIFUSE_SOURCE_DIR;
  std::ifstream in(dir + "/tests/data/smtlib/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- parser errors ---------------------------------------------------------------------------

TEST(ShapesParser, UnknownSymbolNamesLineAndColumn) {
  std::string msg = errorOf("(declare-const x Int)\n(assert (>= x 0))\n(assert (= x (+ y 1)))\n");
  EXPECT_NE(msg.find("line 3, column 17"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown symbol 'y'"), std::string::npos) << msg;
}

TEST(ShapesParser, UnbalancedParenthesis) {
  std::string msg = errorOf("(declare-const x Int)\n(assert (>= x 0)\n(check-sat)\n");
  EXPECT_NE(msg.find("line 2, column 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never closed"), std::string::npos) << msg;
}

TEST(ShapesParser, StrayCloseParenthesis) {
  std::string msg = errorOf("(declare-const x Int))\n");
  EXPECT_NE(msg.find("line 1, column 22"), std::string::npos) << msg;
}

TEST(ShapesParser, SortErrors) {
  EXPECT_NE(errorOf("(declare-const x Int)\n(assert (+ x 1))").find("Bool"), std::string::npos);
  EXPECT_NE(errorOf("(declare-const b Bool)\n(assert (< b 1))").find("line 2"), std::string::npos);
  EXPECT_NE(errorOf("(declare-const s String)").find("unsupported sort"), std::string::npos);
  EXPECT_NE(errorOf("(declare-fun f (Int) Int)").find("not supported"), std::string::npos);
  EXPECT_NE(errorOf("(declare-const x Int)\n(declare-const x Int)").find("already declared"), std::string::npos);
  EXPECT_NE(errorOf("(frobnicate)").find("unknown command"), std::string::npos);
  EXPECT_NE(errorOf("(push 1)").find("not supported"), std::string::npos);
  EXPECT_NE(errorOf("(declare-const x Int)\n(assert (div x))").find("argument"), std::string::npos);
}

TEST(ShapesParser, GarbageNeverCrashes) {
  for (std::string s : std::vector<std::string>{"(", ")", "(((", "\"abc", "|x", "(assert)", "(assert (let ((x)) x))", "(define-fun f)",
                        "(declare-const x Int)(assert (= x 99999999999999999999999999999999999999999999))",
                        std::string(100000, '(')}) {
    auto r = analyzeShapeProgram(s, {});
    EXPECT_FALSE(r.isOk()) << s.substr(0, 40);
  }
}

TEST(ShapesParser, NegativeLiteralsLetAndPrelude) {
  ShapeReport r = analyze(
      "(define-fun max2 ((x Int) (y Int)) Int (ite (> x y) x y))\n"
      "(declare-const x Int)\n(assert (let ((y (+ x -1))) (= (max2 y 0) 4)))\n");
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(modelOf(r)["x"], "5");
  EXPECT_TRUE(r.model_checked);
}

TEST(ShapesParser, ConstantMayShareAFunctionName) {
  // The corpus defines `(define-fun ceil () Int (ceil truediv))` after the prelude's ceil.
  ShapeReport r = analyze(
      "(define-fun ceil ((x Real)) Int (ite (= (to_int x) x) (to_int x) (+ (to_int x) 1)))\n"
      "(declare-const n Int)\n(define-fun ceil () Int (ceil (/ (to_real n) 2.0)))\n(assert (= ceil 3))\n");
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_TRUE(r.model_checked);
}

// ---- own reasoning ---------------------------------------------------------------------------

TEST(ShapesReasoning, EqualityPropagationDecidesWithoutSolver) {
  ShapeReport r = analyze(
      "(declare-const a Int)(declare-const b Int)(declare-const c Int)\n"
      "(assert (= a 4))(assert (= b (* a 3)))(assert (= c (+ b a)))\n"
      "(assert (= (* c 2) 32))(assert (= (div c 3) 5))(assert (= (mod (* a b) 5) 3))\n");
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(r.solver_calls, 0);
  EXPECT_EQ(r.decided_without_solver, 6u);
  auto m = modelOf(r);
  EXPECT_EQ(m["a"], "4");
  EXPECT_EQ(m["b"], "12");
  EXPECT_EQ(m["c"], "16");
}

TEST(ShapesReasoning, BoundsDecideComparisons) {
  ShapeReport r = analyze(
      "(declare-const n Int)\n(assert (>= n 0))(assert (not (= n 0)))\n"
      "(assert (> n 0))(assert (>= (* 2 n) 1))(assert (< (div n 2) (+ n 1)))\n");
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(r.solver_calls, 0);
  EXPECT_EQ(modelOf(r)["n"], "1");
}

TEST(ShapesReasoning, UnsatByPropagation) {
  ShapeReport r = analyze(dataFile("linear_unsat.smt2"));
  EXPECT_EQ(r.verdict, Verdict::kUnsat);
  EXPECT_EQ(r.decided_by, "reasoning");
  EXPECT_EQ(r.solver_calls, 0);
}

TEST(ShapesReasoning, IntegralityConflict) {
  ShapeReport r = analyze("(declare-const x Int)(assert (= (* 2 x) 7))");
  EXPECT_EQ(r.verdict, Verdict::kUnsat);
  EXPECT_EQ(r.solver_calls, 0);
}

TEST(ShapesReasoning, RealsAndToInt) {
  ShapeReport r = analyze(
      "(declare-const x Int)\n(assert (= (to_int (/ (to_real x) 2.0)) 3))(assert (> x 6))\n");
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(modelOf(r)["x"], "7");
  EXPECT_TRUE(r.model_checked);
}

// ---- solver on the residual -------------------------------------------------------------------

TEST(ShapesSolver, NonlinearSatNeedsZ3) {
  ShapeReport r = analyze(dataFile("nonlinear_sat.smt2"));
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(r.decided_by, "z3-residual");
  EXPECT_TRUE(r.model_checked);
  auto m = modelOf(r);
  long a = std::stol(m["a_size0"]), b = std::stol(m["a_size1"]);
  EXPECT_EQ(a * b, 768);
  EXPECT_EQ(a % 16, 0);
  EXPECT_GT(b, a);
}

TEST(ShapesSolver, NonlinearUnsat) {
  ShapeReport r = analyze(dataFile("nonlinear_unsat.smt2"));
  EXPECT_EQ(r.verdict, Verdict::kUnsat);
}

TEST(ShapesSolver, PlainZ3Mode) {
  ShapeOptions opt;
  opt.use_reasoning = false;
  ShapeReport r = analyze(dataFile("conv_divmod_sat.smt2"), opt);
  EXPECT_EQ(r.verdict, Verdict::kSat);
  EXPECT_EQ(r.decided_by, "z3-full");
  EXPECT_TRUE(r.model_checked);
}

// ---- redundancy ------------------------------------------------------------------------------

TEST(ShapesRedundancy, PrefixMode) {
  ShapeOptions opt;
  opt.redundant = true;
  ShapeReport r = analyze(dataFile("redundancy_chain.smt2"), opt);
  EXPECT_EQ(redundantIndices(r), (std::vector<size_t>{2, 4, 6, 7}));
  EXPECT_EQ(r.redundant[0].line, 7);
  EXPECT_EQ(r.redundant[0].text, "(assert (>= n 0))");
}

TEST(ShapesRedundancy, OthersMode) {
  ShapeOptions opt;
  opt.redundant = true;
  opt.mode = RedundancyMode::kOthers;
  ShapeReport r = analyze(dataFile("redundancy_chain.smt2"), opt);
  EXPECT_EQ(redundantIndices(r), (std::vector<size_t>{0, 2, 4, 5, 6, 7}));
}

TEST(ShapesRedundancy, Z3DecidesWhatReasoningCannot) {
  ShapeOptions opt;
  opt.redundant = true;
  // x*y = 12 with 1 < x < y forces x in {2, 3}: x < 4 needs nonlinear reasoning.
  ShapeReport r = analyze(
      "(declare-const x Int)(declare-const y Int)\n"
      "(assert (= (* x y) 12))(assert (> x 1))(assert (> y x))(assert (< x 4))\n", opt);
  ASSERT_EQ(redundantIndices(r), (std::vector<size_t>{3}));
  EXPECT_EQ(r.redundant[0].by, "z3");
}

// ---- samples ---------------------------------------------------------------------------------

TEST(ShapesSamples, VerdictsOnCheckedInPrograms) {
  std::map<std::string, Verdict> expect = {
      {"contiguous_sat.smt2", Verdict::kSat}, {"conv_divmod_sat.smt2", Verdict::kSat},
      {"reals_ceil_sat.smt2", Verdict::kSat}, {"nonlinear_sat.smt2", Verdict::kSat},
      {"boolean_forms.smt2", Verdict::kSat},  {"redundancy_chain.smt2", Verdict::kSat},
      {"linear_unsat.smt2", Verdict::kUnsat}, {"nonlinear_unsat.smt2", Verdict::kUnsat},
  };
  for (auto& [file, verdict] : expect) {
    for (bool hints : {true, false}) {
      ShapeOptions opt;
      opt.use_hints = hints;
      opt.redundant = true;
      ShapeReport r = analyze(dataFile(file), opt);
      EXPECT_EQ(r.verdict, verdict) << file;
      if (verdict == Verdict::kSat) EXPECT_TRUE(r.model_checked) << file;
      std::string json = toJson(r, file);
      EXPECT_NE(json.find("\"verdict\": \"" + std::string(verdictName(verdict)) + "\""), std::string::npos);
    }
  }
}

TEST(ShapesSamples, InvalidFilesReportLines) {
  EXPECT_NE(errorOf(dataFile("invalid_unbalanced.smt2")).find("line 2"), std::string::npos);
  EXPECT_NE(errorOf(dataFile("invalid_unknown_symbol.smt2")).find("line 3"), std::string::npos);
}

// Programs built in C++ (ShapeProblem) are analyzed like their text.
TEST(ShapesProblem, BuiltProgramAgreesWithItsText) {
  ShapeProblem p;
  auto x = p.declareInt("x", 6);
  auto y = p.declareInt("y");
  EXPECT_EQ(p.declareInt("x"), x);  // declared once
  // y = x div 2, x >= 4, not (y*y >= 9): x in {4, 5}
  std::vector<ShapeProblem::Term> asserts = {p.eq(y, p.div(x, p.integer(2))), p.ge(x, p.integer(4)),
                                            p.notOf(p.ge(p.mul({y, y}), p.integer(9)))};
  auto built = analyzeShapeProblem(p, asserts, ShapeOptions{});
  ASSERT_TRUE(built.isOk()) << built.status().toString();
  EXPECT_EQ(built->verdict, Verdict::kSat);
  std::map<std::string, std::string> model;
  for (const auto& m : built->model) model[m.name] = m.value;
  const int64_t vx = std::stoll(model.at("x"));
  EXPECT_TRUE(vx == 4 || vx == 5) << vx;
  EXPECT_TRUE(built->model_checked);
  // x >= 6 added: unsat, as the same program written as text.
  asserts.push_back(p.ge(x, p.integer(6)));
  auto unsat = analyzeShapeProblem(p, asserts, ShapeOptions{});
  ASSERT_TRUE(unsat.isOk());
  EXPECT_EQ(unsat->verdict, Verdict::kUnsat);
  std::string text = "(declare-const x Int)(declare-const y Int)";
  for (auto a : asserts) text += "(assert " + p.toSmt(a) + ")";
  auto fromText = analyzeShapeProgram(text, ShapeOptions{});
  ASSERT_TRUE(fromText.isOk()) << fromText.status().toString() << "\n" << text;
  EXPECT_EQ(fromText->verdict, Verdict::kUnsat);
  // Prefix redundancy names the built asserts by their text.
  ShapeOptions redundant;
  redundant.redundant = true;
  auto red = analyzeShapeProblem(p, {p.ge(x, p.integer(4)), p.ge(x, p.integer(1))}, redundant);
  ASSERT_TRUE(red.isOk());
  ASSERT_EQ(red->redundant.size(), 1u);
  EXPECT_EQ(red->redundant[0].index, 1u);
  EXPECT_EQ(red->redundant[0].text, "(assert (<= 1 x))");
}

TEST(ShapesProblem, SortErrorsAreReportedNotCrashed) {
  ShapeProblem p;
  auto x = p.declareInt("x");
  auto bad = p.add({x, p.boolean(true)});
  EXPECT_NE(p.error().find("'+' needs Int terms"), std::string::npos);
  auto r = analyzeShapeProblem(p, {p.eq(bad, x)}, ShapeOptions{});
  EXPECT_FALSE(r.isOk());
  ShapeProblem q;
  auto y = q.declareInt("y");
  auto notBool = analyzeShapeProblem(q, {y}, ShapeOptions{});
  EXPECT_FALSE(notBool.isOk());
}

}  // namespace
}  // namespace verifuse::shapes
