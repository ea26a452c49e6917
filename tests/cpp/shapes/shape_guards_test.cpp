// Shape guards (backend/src/shape_guards), torch-free: the assumptions a planned graph relies on,
// which of them Dynamo's facts entail (verifier/shapes: own reasoning, then Z3), the added guards
// (minimized), the exported shape program, and the per-call check of the added guards.
#include <gtest/gtest.h>

#include <algorithm>

#include "verifuse/ir/graph.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/shape_guards/shape_guards.h"
#include "verifuse/shapes/shape_analysis.h"

namespace verifuse::shape_guards {
namespace {

using ir::SymExpr;
using Kind = SymExpr::Kind;

// A small CNN as the driver plans it: conv (fused), max pool, adaptive pool, flatten, linear.
const char* kCnn =
    "graph(%x : Tensor[x_size0, 3, x_size2, x_size2]) {\n"
    "  %0 : Tensor[x_size0, 4, (-2 + x_size2), (-2 + x_size2)] = verifuse::conv(%x, $w, None, [1, 1], [0, 0], "
    "[1, 1], 1, \"relu\")\n"
    "  %1 : Tensor[x_size0, 4, (1 + ((-4 + x_size2) // 2)), (1 + ((-4 + x_size2) // 2))], %2 : Tensor = "
    "aten::max_pool2d_with_indices(%0, [2, 2], [2, 2], [0, 0], [1, 1], false)\n"
    "  %3 : Tensor[x_size0, 4, 1, 1]{4, 1, 1, 1} = aten::_adaptive_avg_pool2d(%1, [1, 1])\n"
    "  %4 : Int{x_size0} = aten::sym_size.int(%x, 0)\n"
    "  %5 : Tensor[x_size0, 4] = aten::view(%3, [%4, 4])\n"
    "  %6 : Tensor[x_size0, 10] = verifuse::linear(%5, $fc, None, \"\")\n"
    "  return (%6)\n"
    "}\n"
    "constants {\n"
    "  $w : f32[4, 3, 3, 3]\n"
    "  $fc : f32[10, 4]\n"
    "}\n";

ir::Graph parse(const char* text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

const Assumption* find(const std::vector<Assumption>& as, const std::string& text) {
  for (const Assumption& a : as) {
    if (a.text == text) return &a;
  }
  return nullptr;
}

DynamoFact fact(const std::string& source, const std::string& text) {
  auto e = SymExpr::parse(text);
  EXPECT_TRUE(e.isOk()) << text;
  return DynamoFact{source, *e, "", ""};
}

DynamoFacts cnnFacts(const std::vector<std::string>& conditions) {
  DynamoFacts f;
  f.dynamic = true;
  f.symbols = {{"x_size0", "L['x'].size()[0]", 2}, {"x_size2", "L['x'].size()[2]", 32}};
  for (const std::string& c : conditions) f.facts.push_back(fact("guard", c));
  return f;
}

TEST(ShapeGuardsTest, DerivesTheAssumptionsOfThePlannedOps) {
  ir::Graph g = parse(kCnn);
  int statics = 0;
  auto as = deriveAssumptions(g, {{"x_size0", 2}, {"x_size2", 32}}, &statics);
  std::vector<std::pair<std::string, std::string>> got;
  for (const Assumption& a : as) got.emplace_back(a.kind, a.text);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"positive size", "x_size0 >= 1"},
      {"positive size", "x_size2 >= 1"},
      {"convolution window fits", "x_size2 >= 3"},
      {"pooling window fits", "(-2 + x_size2) >= 2"},
      {"pooling input non-empty", "(1 + ((-4 + x_size2) // 2)) >= 1"},
      {"view keeps element count", "(4 * x_size0) == (4 * x_size0)"},
  };
  EXPECT_EQ(got, want);
  // Static ones are counted: conv channels 3 == 3, linear K 4 == 4.
  EXPECT_EQ(statics, 2);
  // One assumption per condition, every node that needs it.
  EXPECT_EQ(find(as, "x_size2 >= 1")->nodes, (std::vector<std::string>{"x.size(2)", "x.size(3)"}));
  EXPECT_EQ(find(as, "x_size2 >= 3")->nodes, (std::vector<std::string>{"verifuse::conv#0"}));
}

TEST(ShapeGuardsTest, SymbolicSizesSurviveTheRulesAndNameThePlannedOps) {
  // The ATen graph as lowered: convolution, batch-norm-free relu, addmm through a permuted weight.
  ir::Graph g = parse(
      "graph(%x : Tensor[x_size0, 3, x_size2, x_size2]) {\n"
      "  %0 : Tensor[x_size0, 4, (-2 + x_size2), (-2 + x_size2)] = aten::convolution(%x, $w, None, [1, 1], [0, 0], "
      "[1, 1], false, [0, 0], 1)\n"
      "  %1 : Tensor[x_size0, 4, (-2 + x_size2), (-2 + x_size2)] = aten::relu(%0)\n"
      "  %2 : Tensor[x_size0, 4, 1, 1] = aten::_adaptive_avg_pool2d(%1, [1, 1])\n"
      "  %3 : Tensor[x_size0, 4] = aten::view(%2, [-1, 4])\n"
      "  %4 : Tensor[4, 10] = aten::permute($fc, [1, 0])\n"
      "  %5 : Tensor[x_size0, 10] = aten::addmm($b, %3, %4, 1, 1)\n"
      "  return (%5)\n"
      "}\n"
      "constants {\n"
      "  $w : f32[4, 3, 3, 3]\n"
      "  $fc : f32[10, 4]\n"
      "  $b : f32[10]\n"
      "}\n");
  passes::PipelineOptions options;
  options.verify = passes::VerifyLevel::kOff;
  auto ran = passes::runPipeline(g, options);
  ASSERT_TRUE(ran.isOk()) << ran.status().toString();
  g.compact();
  int statics = 0;
  auto as = deriveAssumptions(g, {{"x_size0", 2}, {"x_size2", 8}}, &statics);
  const Assumption* window = find(as, "x_size2 >= 3");
  ASSERT_NE(window, nullptr);
  ASSERT_EQ(window->nodes.size(), 1u);
  EXPECT_EQ(window->nodes[0].rfind("verifuse::conv#", 0), 0u) << window->nodes[0];  // canonicalized, relu fused
  // The pooled sizes of the fused conv's output are still expressions after the rewrite.
  ASSERT_NE(find(as, "(-2 + x_size2) >= 1"), nullptr);
  // linear K = 4 against the weight's: static, like the conv's channels.
  EXPECT_EQ(statics, 2);
}

TEST(ShapeGuardsTest, ViewsMergeOnlyContiguousDims) {
  ir::Graph g = parse(
      "graph(%x : Tensor[x_size0, x_size1, 8], %y : Tensor[x_size0, 8, x_size1]{(8 * x_size1), 1, 8}) {\n"
      "  %0 : Int{x_size1} = aten::sym_size.int(%x, 1)\n"
      "  %1 : Int{(8 * x_size1)} = _operator::mul(%0, 8)\n"
      "  %2 : Int{x_size0} = aten::sym_size.int(%x, 0)\n"
      "  %3 : Tensor[x_size0, (8 * x_size1)] = aten::view(%x, [%2, %1])\n"
      "  %4 : Tensor[x_size0, (8 * x_size1)] = aten::view(%y, [%2, %1])\n"
      "  %5 : Tensor[x_size0, (8 * x_size1)] = aten::view(%y, [%2, -1])\n"
      "  return (%3, %4, %5)\n"
      "}\n");
  // %x's contiguous strides are not printed, so give them by hand.
  g.mutableValue(g.inputs()[0]).symStrides = {*SymExpr::parse("8 * x_size1"), SymExpr::integer(8),
                                              SymExpr::integer(1)};
  int statics = 0;
  auto as = deriveAssumptions(g, {{"x_size0", 2}, {"x_size1", 5}}, &statics);
  const Assumption* contiguous = find(as, "((8 == 8) or (x_size1 == 1))");
  ASSERT_NE(contiguous, nullptr);
  EXPECT_EQ(contiguous->kind, "view merges contiguous dims");
  const Assumption* transposed = find(as, "((1 == (8 * x_size1)) or (8 == 1))");
  ASSERT_NE(transposed, nullptr);
  EXPECT_EQ(transposed->nodes, (std::vector<std::string>{"aten::view#4"}));  // not the -1 view
  ASSERT_NE(find(as, "(8 * x_size0 * x_size1) == (8 * x_size0 * x_size1)"), nullptr);

  DynamoFacts f;
  f.dynamic = true;
  f.symbols = {{"x_size0", "", 2}, {"x_size1", "", 5}};
  ShapeGuardReport r = analyzeShapeGuards(g, {0, 1}, f);
  ASSERT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(find(r.assumptions, contiguous->text)->how, "structural");
  EXPECT_FALSE(find(r.assumptions, transposed->text)->entailed);
  ASSERT_NE(r.check, nullptr);
  // The transposed view can never be a view of its input: every call runs eagerly.
  EXPECT_EQ(r.check->check({2, 5}).code(), StatusCode::kShapeGuardFailed);
}

TEST(ShapeGuardsTest, EntailedAssumptionsNeedNoGuard) {
  ir::Graph g = parse(kCnn);
  ShapeGuardReport r = analyzeShapeGuards(g, {0}, cnnFacts({"x_size0 >= 0", "x_size2 >= 4"}));
  ASSERT_TRUE(r.error.empty()) << r.error;
  ASSERT_EQ(r.assumptions.size(), 6u);
  for (const Assumption& a : r.assumptions) {
    SCOPED_TRACE(a.text);
    if (a.text == "x_size0 >= 1") {
      EXPECT_FALSE(a.entailed);
      EXPECT_NE(a.how.find("(counterexample)"), std::string::npos) << a.how;
      EXPECT_NE(std::find(a.counterexample.begin(), a.counterexample.end(), std::make_pair(std::string("x_size0"), int64_t{0})),
                a.counterexample.end());
    } else {
      EXPECT_TRUE(a.entailed) << a.how;
    }
  }
  EXPECT_EQ(find(r.assumptions, "(4 * x_size0) == (4 * x_size0)")->how, "structural");
  EXPECT_EQ(find(r.assumptions, "x_size2 >= 3")->how.rfind("verifuse-shapes:", 0), 0u);
  ASSERT_EQ(r.addedGuards.size(), 1u);
  EXPECT_EQ(r.addedGuards[0].text, "x_size0 >= 1");
  EXPECT_TRUE(r.addedGuards[0].checkedAtRuntime);
  EXPECT_EQ(r.staticAssumptions, 2);
  EXPECT_EQ(r.guards.size(), 2u);
  EXPECT_EQ(r.guards[0].text, "x_size0 >= 0");
}

TEST(ShapeGuardsTest, AddedGuardsImpliedByOthersAreNotChecked) {
  ir::Graph g = parse(kCnn);
  ShapeGuardReport r = analyzeShapeGuards(g, {0}, cnnFacts({"x_size0 >= 0", "x_size2 >= 0"}));
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::vector<std::string> checked, covered;
  for (const AddedGuard& a : r.addedGuards) (a.checkedAtRuntime ? checked : covered).push_back(a.text);
  EXPECT_EQ(checked, (std::vector<std::string>{"x_size0 >= 1", "x_size2 >= 1", "x_size2 >= 3", "(-2 + x_size2) >= 2"}));
  EXPECT_EQ(covered, (std::vector<std::string>{"(1 + ((-4 + x_size2) // 2)) >= 1"}));
  EXPECT_NE(find(r.assumptions, covered[0])->how.find("; implied by the other added guards"), std::string::npos);

  // The per-call check: bindings read x's dims 0 and 2 from argument 0.
  ASSERT_NE(r.check, nullptr);
  ASSERT_EQ(r.check->bindings().size(), 2u);
  EXPECT_EQ(r.check->bindings()[0].name, "x_size0");
  EXPECT_EQ(r.check->bindings()[1].dim, 2);
  EXPECT_TRUE(r.check->check({1, 4}).isOk());
  Status empty = r.check->check({0, 32});
  EXPECT_EQ(empty.code(), StatusCode::kShapeGuardFailed);
  EXPECT_EQ(empty.message(), "shape guard failed: x_size0 >= 1 (positive size)");
  EXPECT_EQ(r.check->check({2, 3}).message(), "shape guard failed: (-2 + x_size2) >= 2 (pooling window fits)");
}

TEST(ShapeGuardsTest, ShapeProgramIsTheCorpusFormat) {
  ir::Graph g = parse(kCnn);
  ShapeGuardReport r = analyzeShapeGuards(g, {0}, cnnFacts({"x_size0 >= 0", "x_size2 >= 0"}));
  const std::string& p = r.smt2;
  EXPECT_EQ(p.rfind("; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions\n", 0), 0u);
  EXPECT_NE(p.find("(declare-const x_size0 Int)\n(set-info :example-x_size0 2)\n"), std::string::npos);
  EXPECT_NE(p.find("; guard: x_size0 >= 0\n(define-fun guard_0 () Bool (>= x_size0 0))\n(assert guard_0)\n"),
            std::string::npos);
  EXPECT_NE(p.find("(define-fun assume_0 () Bool (>= x_size0 1))"), std::string::npos);
  EXPECT_NE(p.find("(define-fun output0_size1 () Int 10)"), std::string::npos);
  EXPECT_NE(p.find("(get-value (x_size0 x_size2))"), std::string::npos);
  // The engine reads it back: satisfiable, and the assumption implied by the others is redundant.
  shapes::ShapeOptions options;
  options.redundant = true;
  auto rep = shapes::analyzeShapeProgram(p, options);
  ASSERT_TRUE(rep.isOk()) << rep.status().toString();
  EXPECT_EQ(rep->verdict, shapes::Verdict::kSat);
  EXPECT_FALSE(rep->redundant.empty());
}

TEST(ShapeGuardsTest, UnboundSymbolsCannotBeChecked) {
  ir::Graph g = parse(
      "graph(%x : Tensor[x_size0]) {\n"
      "  %0 : Int{u0} = aten::_local_scalar_dense(%x)\n"
      "  %1 : Tensor[u0] = aten::view(%x, [%0])\n"
      "  return (%1)\n"
      "}\n");
  DynamoFacts f;
  f.dynamic = true;
  f.symbols = {{"u0", "", std::nullopt}, {"x_size0", "", 4}};
  f.facts.push_back(fact("var_to_range", "x_size0 >= 1"));
  f.facts.push_back(DynamoFact{"guard", SymExpr(), "Eq(s0, FloatPow(u0, 0.5))", "FloatPow: x"});
  ShapeGuardReport r = analyzeShapeGuards(g, {0}, f);
  ASSERT_TRUE(r.error.empty()) << r.error;
  const Assumption* numel = find(r.assumptions, "x_size0 == u0");
  ASSERT_NE(numel, nullptr);
  EXPECT_FALSE(numel->entailed);
  EXPECT_NE(numel->how.find("no runtime check possible: no input size binds u0"), std::string::npos) << numel->how;
  ASSERT_EQ(r.addedGuards.size(), 1u);
  EXPECT_FALSE(r.addedGuards[0].checkedAtRuntime);
  EXPECT_EQ(r.check, nullptr);
  ASSERT_EQ(r.guards.size(), 2u);
  EXPECT_EQ(r.guards[1].skipped, "FloatPow: x");
  EXPECT_EQ(r.guards[1].text, "Eq(s0, FloatPow(u0, 0.5))");
}

TEST(ShapeGuardsTest, SmtTextUsesFloorSemantics) {
  auto e = [](const char* t) { return *SymExpr::parse(t); };
  EXPECT_EQ(toSmt(e("(x // 2) >= -1")), "(>= (div x 2) (- 1))");
  EXPECT_EQ(toSmt(e("x // y")), "(ite (> y 0) (div x y) (div (- x) (- y)))");
  EXPECT_EQ(toSmt(e("x % y")), "(- x (* y (ite (> y 0) (div x y) (div (- x) (- y)))))");
  EXPECT_EQ(toSmt(e("max(x, y, 3) != x ** 2")),
            "(not (= (ite (>= (ite (>= 3 x) 3 x) y) (ite (>= 3 x) 3 x) y) (* x x)))");
}

TEST(GuardCheckTest, EvaluatesGuardsOnTheBoundValues) {
  std::vector<SymbolBinding> bindings = {{"n", 1, -1}, {"h", 0, 2}};
  std::vector<GuardCheck::Guard> guards = {
      {*SymExpr::parse("((h - 1) // n) % 3 == 0 or max(h, n) > 100"), "first"},
      {*SymExpr::parse("h * h * h * h >= 16"), "second"},
  };
  GuardCheck check(bindings, guards);
  EXPECT_TRUE(check.check({1, 4}).isOk());       // (3 // 1) % 3 == 0
  EXPECT_TRUE(check.check({1, 101}).isOk());     // max > 100
  EXPECT_EQ(check.check({1, 5}).message(), "first");
  EXPECT_EQ(check.check({2, 6}).message(), "first");        // (5 // 2) % 3 == 2
  EXPECT_TRUE(check.check({-2, 7}).isOk());                 // (6 // -2) % 3 = -3 % 3 = 0
  EXPECT_EQ(check.check({0, 7}).code(), StatusCode::kShapeGuardFailed);  // division by zero: fails
  EXPECT_EQ(check.check({1, 1}).message(), "second");
  // Overflow in a guard counts as a violation, never as a pass.
  GuardCheck big({{"h", 0, 0}}, {{*SymExpr::parse("h * h * h > 0"), "overflow"}});
  EXPECT_EQ(big.check({int64_t{1} << 40}).message(), "overflow");
  // Deeper than the stack machine: evaluated as a tree, same answer.
  SymExpr sum = SymExpr::symbol("h");
  for (int k = 0; k < 80; ++k) sum = SymExpr::make(Kind::kMax, {SymExpr::symbol("h"), SymExpr::make(Kind::kAdd, {sum, SymExpr::integer(1)})});
  GuardCheck deep({{"h", 0, 0}}, {{SymExpr::make(Kind::kGe, {sum, SymExpr::integer(80)}), "deep"}});
  EXPECT_TRUE(deep.check({0}).isOk());
  EXPECT_EQ(deep.check({-1}).message(), "deep");
}

}  // namespace
}  // namespace verifuse::shape_guards
