// IR construction, queries, well-formedness and the printer/parser round trip.
#include <gtest/gtest.h>

#include "verifuse/ir/graph.h"

namespace verifuse::ir {
namespace {

ConstantTensor shapeOnly(const std::string& name, std::vector<int64_t> sizes) {
  ConstantTensor c;
  c.name = name;
  c.sizes = sizes;
  c.strides.assign(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;) c.strides[k - 1] = c.strides[k] * sizes[k];
  return c;
}

/// conv -> batch_norm (3 outputs) -> relu, the shape of every CNN block.
Graph convBnRelu() {
  Graph g;
  ValueId x = g.addInput("x", ValueType::Tensor);
  ConstantId w = g.addConstant(shapeOnly("w", {4, 3, 3, 3}));
  ConstantId b = g.addConstant(shapeOnly("b", {4}));
  NodeId conv = g.addNode("aten::convolution", "",
                          {Arg::value(x), Arg::constant(w), Arg::constant(b), Arg::intList({1, 1}),
                           Arg::intList({1, 1}), Arg::intList({1, 1}), Arg::boolean(false),
                           Arg::intList({0, 0}), Arg::integer(1)},
                          {ValueType::Tensor});
  ConstantId mean = g.addConstant(shapeOnly("mean", {4}));
  ConstantId var = g.addConstant(shapeOnly("var", {4}));
  NodeId bn = g.addNode("aten::_native_batch_norm_legit_no_training", "",
                        {Arg::value(g.node(conv).outputs[0]), Arg::none(), Arg::none(), Arg::constant(mean),
                         Arg::constant(var), Arg::real(0.1), Arg::real(1e-5)},
                        {ValueType::Tensor, ValueType::Tensor, ValueType::Tensor});
  NodeId relu = g.addNode("aten::relu", "", {Arg::value(g.node(bn).outputs[0])}, {ValueType::Tensor});
  g.setOutputs({Arg::value(g.node(relu).outputs[0])});
  return g;
}

TEST(GraphTest, BuildsAndVerifies) {
  Graph g = convBnRelu();
  EXPECT_TRUE(verifyGraph(g).isOk());
  EXPECT_EQ(g.numLiveNodes(), 3u);
  EXPECT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.constants().size(), 4u);
  ValueId convOut = g.node(0).outputs[0];
  EXPECT_EQ(g.users(convOut), std::vector<NodeId>{1});
  EXPECT_FALSE(g.isGraphOutput(convOut));
  EXPECT_TRUE(g.isGraphOutput(g.node(2).outputs[0]));
  EXPECT_EQ(g.value(g.node(1).outputs[2]).outputIndex, 2);
}

TEST(GraphTest, QualifiedNameIncludesOverload) {
  Graph g;
  ValueId x = g.addInput("x", ValueType::Tensor);
  NodeId n = g.addNode("aten::add", "Tensor", {Arg::value(x), Arg::value(x), Arg::integer(1)}, {ValueType::Tensor});
  EXPECT_EQ(g.node(n).qualifiedName(), "aten::add.Tensor");
  EXPECT_EQ(g.users(x), std::vector<NodeId>{n});  // used twice, listed once
}

TEST(GraphTest, VerifyRejectsUseBeforeDefinition) {
  Graph g;
  ValueId x = g.addInput("x", ValueType::Tensor);
  NodeId a = g.addNode("aten::relu", "", {Arg::value(x)}, {ValueType::Tensor});
  NodeId b = g.addNode("aten::relu", "", {Arg::value(g.node(a).outputs[0])}, {ValueType::Tensor});
  // Make the first node read the second node's output: a cycle / use before definition.
  g.mutableNode(a).args[0] = Arg::value(g.node(b).outputs[0]);
  Status s = verifyGraph(g);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidGraph);
  EXPECT_NE(s.message().find("before it is defined"), std::string::npos) << s.message();
}

TEST(GraphTest, VerifyRejectsMissingConstantAndBadOutput) {
  Graph g;
  ValueId x = g.addInput("x", ValueType::Tensor);
  g.addNode("aten::mul", "Tensor", {Arg::value(x), Arg::constant(3)}, {ValueType::Tensor});
  EXPECT_EQ(verifyGraph(g).code(), StatusCode::kInvalidGraph);
  Graph h;
  h.addInput("x", ValueType::Tensor);
  h.setOutputs({Arg::value(42)});
  EXPECT_EQ(verifyGraph(h).code(), StatusCode::kInvalidGraph);
}

TEST(GraphTest, VerifyRejectsDuplicateInputNames) {
  Graph g;
  g.addInput("x", ValueType::Tensor);
  g.addInput("x", ValueType::Tensor);
  EXPECT_EQ(verifyGraph(g).code(), StatusCode::kInvalidGraph);
}

TEST(GraphTest, ReplaceAllUsesAndCompact) {
  Graph g = convBnRelu();
  // Bypass the relu: the graph returns the batch norm output directly.
  ValueId bnOut = g.node(1).outputs[0];
  g.replaceAllUses(g.node(2).outputs[0], bnOut);
  g.eraseNode(2);
  EXPECT_EQ(g.numLiveNodes(), 2u);
  EXPECT_TRUE(g.isGraphOutput(bnOut));
  g.compact();
  EXPECT_EQ(g.nodes().size(), 2u);
  EXPECT_TRUE(verifyGraph(g).isOk());
}

TEST(GraphTest, PrintIsStableAndRoundTrips) {
  Graph g = convBnRelu();
  const std::string text = printGraph(g);
  EXPECT_EQ(text,
            "graph(%x : Tensor) {\n"
            "  %0 : Tensor = aten::convolution(%x, $w, $b, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)\n"
            "  %1 : Tensor, %2 : Tensor, %3 : Tensor = aten::_native_batch_norm_legit_no_training(%0, None, "
            "None, $mean, $var, 0.1, 1e-05)\n"
            "  %4 : Tensor = aten::relu(%1)\n"
            "  return (%4)\n"
            "}\n"
            "constants {\n"
            "  $w : f32[4, 3, 3, 3]\n"
            "  $b : f32[4]\n"
            "  $mean : f32[4]\n"
            "  $var : f32[4]\n"
            "}\n");
  auto parsed = parseGraph(text);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_TRUE(verifyGraph(*parsed).isOk());
  EXPECT_EQ(printGraph(*parsed), text);
}

TEST(GraphTest, PrinterRenumbersAfterErase) {
  Graph g = convBnRelu();
  g.replaceAllUses(g.node(2).outputs[0], g.node(1).outputs[0]);
  g.eraseNode(2);
  const std::string text = printGraph(g);
  EXPECT_NE(text.find("return (%1)"), std::string::npos) << text;
  EXPECT_EQ(text.find("aten::relu"), std::string::npos);
}

TEST(GraphTest, ArgumentKindsRoundTrip) {
  const std::string text =
      "graph(%x : Tensor, %s0 : Int) {\n"
      "  %0 : Int = _operator::mul(%s0, 4)\n"
      "  %1 : Tensor = aten::view(%x, [%0, -1])\n"
      "  %2 : Tensor = aten::_to_copy(%1, dtype(f64), layout(0), device(cpu), false, false, memory_format(2))\n"
      "  %3 : Tensor = aten::div.Tensor_mode(%2, %2, \"floor\")\n"
      "  %4 : Tensor = aten::clamp(%3, -inf, 6.5)\n"
      "  return (%4, %0, None, 2.0, true)\n"
      "}\n";
  auto parsed = parseGraph(text);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
  EXPECT_EQ(printGraph(*parsed), text);
  const Node& toCopy = parsed->node(2);
  EXPECT_EQ(toCopy.args[1].kind, Arg::Kind::DTypeTag);
  EXPECT_EQ(static_cast<DType>(toCopy.args[1].i), DType::Float64);
  EXPECT_EQ(parsed->node(3).overload, "Tensor_mode");
  EXPECT_TRUE(parsed->node(1).args[1].usesValues());
}

TEST(GraphTest, ParserReportsLineAndColumn) {
  auto bad = parseGraph("graph(%x : Tensor) {\n  %0 : Tensor = aten::relu(%y)\n  return (%0)\n}\n");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("%y"), std::string::npos);
  auto undeclared = parseGraph("graph(%x : Tensor) {\n  %0 : Tensor = aten::mul.Tensor(%x, $w)\n  return (%0)\n}\n");
  ASSERT_FALSE(undeclared.isOk());
  EXPECT_NE(undeclared.status().message().find("$w"), std::string::npos);
  EXPECT_FALSE(parseGraph("graph(%x : Tensr) {\n return (%x)\n}\n").isOk());
}

TEST(GraphTest, DoubleFormattingIsShortestExact) {
  Graph g;
  ValueId x = g.addInput("x", ValueType::Tensor);
  g.addNode("aten::leaky_relu", "", {Arg::value(x), Arg::real(0.01)}, {ValueType::Tensor});
  g.addNode("aten::mul", "Scalar", {Arg::value(x), Arg::real(1.0 / 3.0)}, {ValueType::Tensor});
  const std::string text = printGraph(g);
  EXPECT_NE(text.find("0.01)"), std::string::npos) << text;
  auto parsed = parseGraph(text);
  ASSERT_TRUE(parsed.isOk());
  EXPECT_EQ(parsed->node(1).args[1].d, 1.0 / 3.0);
}

TEST(ConstantTensorTest, ContiguityAndNumel) {
  ConstantTensor c = shapeOnly("w", {2, 3, 4});
  EXPECT_EQ(c.numel(), 24);
  EXPECT_TRUE(c.isContiguous());
  c.strides = {1, 2, 6};  // a permuted view
  EXPECT_FALSE(c.isContiguous());
}

}  // namespace
}  // namespace verifuse::ir
