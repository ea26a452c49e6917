// Symbolic sizes (ir::SymExpr): canonical forms, Python semantics of // and %, text round trips,
// and symbolic shapes in the IR's text form.
#include <gtest/gtest.h>

#include <map>

#include "verifuse/ir/graph.h"
#include "verifuse/ir/sym_expr.h"

namespace verifuse::ir {
namespace {

using Kind = SymExpr::Kind;

SymExpr sym(const char* name) { return SymExpr::symbol(name); }
SymExpr num(int64_t v) { return SymExpr::integer(v); }
SymExpr mk(Kind k, std::vector<SymExpr> args) { return SymExpr::make(k, std::move(args)); }

std::optional<int64_t> eval(const SymExpr& e, const std::map<std::string, int64_t>& env) {
  return e.evaluate([&](const std::string& s) -> std::optional<int64_t> {
    auto it = env.find(s);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST(SymExprTest, SumsAndProductsAreCanonical) {
  SymExpr x = sym("x_size0"), y = sym("x_size1");
  // Constants folded and first; like terms collected; symbols ordered by name.
  EXPECT_EQ((y + x + 3 + (-5)).toString(), "(-2 + x_size0 + x_size1)");
  EXPECT_EQ((x + x).toString(), "(2 * x_size0)");
  EXPECT_EQ((x + (-1 * x)).toString(), "0");
  EXPECT_EQ((num(32) * y * x).toString(), "(32 * x_size0 * x_size1)");
  EXPECT_EQ((y * x * y * num(4)).toString(), "(4 * x_size0 * (x_size1 ** 2))");
  // A constant times a sum distributes (sympy's form); a window's slack folds into the sum.
  EXPECT_EQ((2 * (x + 1)).toString(), "(2 + (2 * x_size0))");
  SymExpr out = mk(Kind::kFloorDiv, {x + (-1), num(2)}) + 1;
  EXPECT_EQ(out.toString(), "(1 + ((-1 + x_size0) // 2))");
  EXPECT_EQ((out + 2).toString(), "(3 + ((-1 + x_size0) // 2))");
  EXPECT_EQ(mk(Kind::kPow, {x, num(0)}).toString(), "1");
  EXPECT_EQ(mk(Kind::kMax, {num(3), x, num(5), x}).toString(), "max(5, x_size0)");
  EXPECT_EQ(mk(Kind::kFloorDiv, {x, num(1)}), x);
  EXPECT_EQ(mk(Kind::kMod, {num(-7), num(3)}).toString(), "2");
  EXPECT_EQ(mk(Kind::kFloorDiv, {num(-7), num(2)}).toString(), "-4");
}

TEST(SymExprTest, ConditionsStayAsBuilt) {
  SymExpr x = sym("x");
  EXPECT_EQ(mk(Kind::kEq, {x, x}).toString(), "(x == x)");  // not folded: an assumption stays visible
  EXPECT_EQ(mk(Kind::kOr, {mk(Kind::kEq, {x, num(3)}), mk(Kind::kEq, {x, num(1)})}).toString(),
            "((x == 3) or (x == 1))");
  EXPECT_FALSE(mk(Kind::kAdd, {x, mk(Kind::kEq, {x, x})}).valid());  // arithmetic on a condition
  EXPECT_FALSE(mk(Kind::kAnd, {x, x}).valid());
  EXPECT_FALSE(mk(Kind::kPow, {x, x}).valid());
  EXPECT_FALSE(SymExpr().valid());
  EXPECT_EQ(SymExpr().toString(), "?");
}

TEST(SymExprTest, EvaluatesWithPythonSemantics) {
  SymExpr a = sym("a"), b = sym("b");
  const SymExpr fd = mk(Kind::kFloorDiv, {a, b}), md = mk(Kind::kMod, {a, b});
  for (int64_t va : {-7, -1, 0, 1, 5, 13}) {
    for (int64_t vb : {-3, -1, 1, 2, 4}) {
      std::map<std::string, int64_t> env{{"a", va}, {"b", vb}};
      int64_t q = va / vb;
      if ((va % vb != 0) && ((va < 0) != (vb < 0))) --q;
      EXPECT_EQ(*eval(fd, env), q) << va << " // " << vb;
      EXPECT_EQ(*eval(md, env), va - q * vb) << va << " % " << vb;
    }
  }
  EXPECT_FALSE(eval(fd, {{"a", 1}, {"b", 0}}).has_value());  // division by zero
  EXPECT_FALSE(eval(a, {}).has_value());                     // unknown symbol
  EXPECT_FALSE(eval(num(INT64_MAX) * a, {{"a", 2}}).has_value());  // overflow
  EXPECT_EQ(*eval(mk(Kind::kGe, {a + 2, num(3)}), {{"a", 1}}), 1);
  EXPECT_EQ(*eval(mk(Kind::kNot, {mk(Kind::kLt, {a, num(0)})}), {{"a", -1}}), 0);
}

TEST(SymExprTest, SamePolynomialExpands) {
  SymExpr x = sym("x"), y = sym("y");
  EXPECT_TRUE(SymExpr::samePolynomial((x + 1) * (y + 1), x * y + x + y + 1));
  EXPECT_TRUE(SymExpr::samePolynomial(num(96) * x * y, num(3) * y * num(32) * x));
  SymExpr d = mk(Kind::kFloorDiv, {x, num(2)});
  EXPECT_TRUE(SymExpr::samePolynomial(2 * (d + 1), (2 * d) + 2));
  EXPECT_FALSE(SymExpr::samePolynomial(x, y));
  EXPECT_FALSE(SymExpr::samePolynomial(mk(Kind::kEq, {x, x}), mk(Kind::kEq, {x, x})));
}

TEST(SymExprTest, TextRoundTrips) {
  for (const char* text : {"(1 + ((-7 + x_size2) // 2))", "((2 + x_size2) >= 3)", "max(5, (x % 3))",
                           "(((32 * x_size1) == (32 * x_size1)) or (x_size0 == 1))", "(not (x != 2))",
                           "((a >= 5) and (b >= 5))", "(4 * x_size0 * (x_size1 ** 2))", "True", "-3"}) {
    auto e = SymExpr::parse(text);
    ASSERT_TRUE(e.isOk()) << text << ": " << e.status().toString();
    EXPECT_EQ(e->toString(), text);
  }
  // Subtraction and unary minus are read as sums with -1.
  EXPECT_EQ(SymExpr::parse("x - 2*y")->toString(), "(x + (-2 * y))");
  EXPECT_EQ(SymExpr::parse("-(x // 2)")->toString(), "(-1 * (x // 2))");
  EXPECT_EQ(SymExpr::parse("x ** 2 * 3")->toString(), "(3 * (x ** 2))");
  size_t used = 0;
  auto prefix = SymExpr::parsePrefix("max(a, b), 3]", &used);
  ASSERT_TRUE(prefix.isOk());
  EXPECT_EQ(used, 9u);
  EXPECT_FALSE(SymExpr::parse("x +").isOk());
  EXPECT_FALSE(SymExpr::parse("(x").isOk());
  EXPECT_FALSE(SymExpr::parse("x ** y").isOk());
  EXPECT_NE(SymExpr::parse("x y").status().message().find("column 3"), std::string::npos);
}

TEST(SymbolicShapeTextTest, SizesStridesAndIntValuesRoundTrip) {
  const std::string text =
      "graph(%s0 : Int{x_size0}, %x : Tensor[x_size0, 3, (-4 + x_size2), 8]) {\n"
      "  %0 : Tensor[x_size0, 8, 3, (-4 + x_size2)]{(-96 + (24 * x_size2)), 1, 8, 24} = aten::permute(%x, [0, 3, 1, 2])\n"
      "  %1 : Int{(8 * x_size0)} = _operator::mul(%s0, 8)\n"
      "  %2 : Tensor[x_size0, ?] = aten::view(%x, [%s0, -1])\n"
      "  return (%0, %1, %2)\n"
      "}\n";
  auto g = parseGraph(text);
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  EXPECT_EQ(printGraph(*g), text);
  const Value& x = g->value(g->inputs()[1]);
  EXPECT_EQ(x.shape, (std::vector<int64_t>{-1, 3, -1, 8}));
  EXPECT_EQ(x.dim(2).toString(), "(-4 + x_size2)");
  EXPECT_EQ(x.dim(1).toString(), "3");
  EXPECT_TRUE(x.symStrides.empty());
  EXPECT_EQ(g->value(g->inputs()[0]).symValue.toString(), "x_size0");
  // Contiguous strides are recorded but not printed.
  Graph h;
  ValueId in = h.addInput("x", ValueType::Tensor);
  h.mutableValue(in).setSymShape({sym("n"), num(4)});
  h.mutableValue(in).symStrides = {num(4), num(1)};
  h.setOutputs({Arg::value(in)});
  EXPECT_EQ(printGraph(h), "graph(%x : Tensor[n, 4]) {\n  return (%x)\n}\n");
  // A static shape set again drops the symbolic sizes.
  h.mutableValue(in).setShape({2, 4});
  EXPECT_TRUE(h.value(in).symShape.empty());
  EXPECT_FALSE(parseGraph("graph(%x : Tensor[(x == 1)]) {\n  return (%x)\n}\n").isOk());
  EXPECT_FALSE(parseGraph("graph(%x : Tensor[2]{1, 2}) {\n  return (%x)\n}\n").isOk());
}

}  // namespace
}  // namespace verifuse::ir
