// The operator schema table: named slots read the right argument, rows are well formed, and the
// by-name lookup agrees with the generated enums. (tests/python/test_op_schema.py checks the ATen
// rows against torch's own schemas.)
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>

#include "verifuse/ir/op_schema.h"

namespace verifuse::ir {
namespace {

Node convolutionNode() {
  Node n;
  n.op = "aten::convolution";
  n.args = {Arg::value(0),        Arg::constant(1),     Arg::none(),          Arg::intList({1, 1}), Arg::intList({2, 2}),
            Arg::intList({1, 1}), Arg::boolean(false), Arg::intList({0, 0}), Arg::integer(3)};
  return n;
}

TEST(OpSchema, NamedSlotsReadTheirArguments) {
  const Node n = convolutionNode();
  EXPECT_TRUE(hasOperands<Convolution>(n));
  EXPECT_EQ(operand(n, Convolution::weight), Arg::constant(1));
  EXPECT_EQ(operand(n, Convolution::groups), Arg::integer(3));
  EXPECT_EQ(operand(n, Convolution::padding), Arg::intList({2, 2}));
  EXPECT_EQ(selfOperand(n), Arg::value(0));
  EXPECT_EQ(*namedOperand(n, "groups"), Arg::integer(3));
  EXPECT_EQ(namedOperand(n, "post_ops"), nullptr);
  EXPECT_FALSE(hasOperands<FusedConv>(n));
}

TEST(OpSchema, ByNameAgreesWithTheEnumsForFusedOps) {
  Node conv;
  conv.op = "verifuse::conv";
  conv.args.resize(FusedConv::kArity + 2);  // two residuals
  Node linear;
  linear.op = "verifuse::linear";
  linear.args.resize(FusedLinear::kArity);
  EXPECT_EQ(operandIndex(conv, "post_ops"), size_t{FusedConv::post_ops});
  EXPECT_EQ(operandIndex(linear, "post_ops"), size_t{FusedLinear::post_ops});
  EXPECT_EQ(variadicOperands<FusedConv>(conv).size(), 2u);
  EXPECT_TRUE(variadicOperands<FusedLinear>(linear).empty());
  Node q;
  q.op = "verifuse::qconv";
  EXPECT_EQ(operandIndex(q, "y_scale"), size_t{QConv::y_scale});
  q.op = "verifuse::qlinear";
  EXPECT_EQ(operandIndex(q, "y_scale"), size_t{QLinear::y_scale});
}

TEST(OpSchema, OperandsAreBuiltByName) {
  Node n;
  n.op = "verifuse::linear";
  n.args = OperandsOf<FusedLinear>()
               .set(FusedLinear::weight, Arg::constant(2))
               .set(FusedLinear::x, Arg::value(1))
               .set(FusedLinear::post_ops, Arg::string("sum(1)"))
               .append(Arg::value(3))
               .take();
  ASSERT_EQ(n.args.size(), size_t{FusedLinear::kArity} + 1);
  EXPECT_EQ(operand(n, FusedLinear::x), Arg::value(1));
  EXPECT_EQ(operand(n, FusedLinear::weight), Arg::constant(2));
  EXPECT_EQ(operand(n, FusedLinear::bias).kind, Arg::Kind::None);
  EXPECT_EQ(variadicOperands<FusedLinear>(n).front(), Arg::value(3));
}

TEST(OpSchema, RowsAreWellFormed) {
  std::set<std::string_view> ops, names;
  for (const OpSchemaInfo& row : opSchemas()) {
    EXPECT_TRUE(names.insert(row.schema).second) << row.schema;
    if (!row.op.empty()) EXPECT_TRUE(ops.insert(row.op).second) << row.op;
    std::set<std::string_view> operands(row.operands.begin(), row.operands.end());
    EXPECT_EQ(operands.size(), row.operands.size()) << row.schema << ": an operand named twice";
    for (std::string_view o : row.operands) EXPECT_FALSE(o.empty()) << row.schema;
  }
  EXPECT_EQ(findOpSchema("aten::convolution")->operands.size(), size_t{Convolution::kArity});
  EXPECT_EQ(findOpSchema("verifuse::qconv")->operands.size(), size_t{QConv::kArity});
  EXPECT_EQ(findOpSchema("aten::no_such_op"), nullptr);
}

TEST(OpSchema, RowwiseProgramIsTheLastOperand) {
  Node n;
  n.op = "verifuse::rowwise";
  n.args = {Arg::value(0), Arg::value(1), Arg::string("program")};
  ASSERT_NE(rowwiseProgram(n), nullptr);
  EXPECT_EQ(rowwiseProgram(n)->s, "program");
  EXPECT_EQ(rowwiseInputs(n).size(), 2u);
  n.args.pop_back();
  EXPECT_EQ(rowwiseProgram(n), nullptr);
}

TEST(OpSchema, ASlotOfAnotherOperatorIsRefused) {
  const Node n = convolutionNode();
  EXPECT_THROW((void)operand(n, Addmm::mat2), std::logic_error);
}

}  // namespace
}  // namespace verifuse::ir
