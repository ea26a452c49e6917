// The executor on small graphs, compared with direct ATen calls.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <thread>

#include "verifuse/kernels/rowwise.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/runtime/plan_set.h"

namespace verifuse::runtime {
namespace {

using ir::Arg;
using ir::Graph;
using ir::ValueType;

ir::ConstantTensor constantOf(const std::string& name, const at::Tensor& t) {
  ir::ConstantTensor c;
  c.name = name;
  c.sizes = t.sizes().vec();
  c.strides = t.strides().vec();
  c.dtype = static_cast<ir::DType>(static_cast<int8_t>(t.scalar_type()));
  c.data = t.data_ptr();
  c.owner = std::make_shared<at::Tensor>(t);
  c.ownerKind = ir::ConstantOwner::AtTensor;
  return c;
}

std::shared_ptr<const CompiledGraph> mustCompile(Graph g, std::vector<int32_t> inputIndex,
                                                 std::vector<FrozenInput> frozen, int32_t numArgs) {
  auto cg = compileGraph(std::move(g), std::move(inputIndex), std::move(frozen), numArgs);
  EXPECT_TRUE(cg.isOk()) << cg.status().toString();
  return cg.isOk() ? cg.value() : nullptr;
}

struct ConvRelu {
  at::Tensor w = at::randn({8, 3, 3, 3});
  at::Tensor b = at::randn({8});
  Graph graph() {
    Graph g;
    auto x = g.addInput("x", ValueType::Tensor);
    auto cw = g.addConstant(constantOf("w", w));
    auto cb = g.addConstant(constantOf("b", b));
    auto conv = g.addNode("aten::convolution", "",
                          {Arg::value(x), Arg::constant(cw), Arg::constant(cb), Arg::intList({1, 1}), Arg::intList({1, 1}),
                           Arg::intList({1, 1}), Arg::boolean(false), Arg::intList({0, 0}), Arg::integer(1)},
                          {ValueType::Tensor});
    auto relu = g.addNode("aten::relu", "", {Arg::value(g.node(conv).outputs[0])}, {ValueType::Tensor});
    g.setOutputs({Arg::value(g.node(relu).outputs[0])});
    return g;
  }
  at::Tensor reference(const at::Tensor& x) { return at::relu(at::conv2d(x, w, b, {1, 1}, {1, 1})); }
};

TEST(ExecutorTest, ConvReluMatchesAten) {
  ConvRelu m;
  // Argument list as AOT passes it: [w, b, x]; w and b are frozen.
  auto cg = mustCompile(m.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  ASSERT_TRUE(cg);
  at::Tensor x = at::randn({2, 3, 10, 10});
  auto out = cg->run({m.w, m.b, x});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_TRUE(at::allclose((*out)[0].toTensor(), m.reference(x)));
  EXPECT_EQ(cg->stats().dispatcherSteps, 2u);
}

TEST(ExecutorTest, DetectsStaleWeights) {
  ConvRelu m;
  auto cg = mustCompile(m.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  ASSERT_TRUE(cg);
  at::Tensor x = at::randn({1, 3, 5, 5});
  EXPECT_TRUE(cg->run({m.w, m.b, x}).isOk());
  // In-place update (what load_state_dict does): same tensor, new version.
  m.b.add_(1.0);
  auto stale = cg->run({m.w, m.b, x});
  ASSERT_FALSE(stale.isOk());
  EXPECT_EQ(stale.status().code(), StatusCode::kWeightsModified);  // that plan can never match again
  EXPECT_NE(stale.status().message().find("modified in place"), std::string::npos);
  // A different tensor object in the weight's place.
  auto cg2 = mustCompile(m.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  auto replaced = cg2->run({m.w.clone(), m.b, x});
  ASSERT_FALSE(replaced.isOk());
  EXPECT_EQ(replaced.status().code(), StatusCode::kStaleWeights);
}

/// The plan set's policy (runtime/plan_set.h), decided from status codes: a plan per set of
/// weights, switching to a kept one, dropping one whose weights were modified in place, asking for
/// a plan it does not have.
TEST(PlanSetTest, SwitchesKeptPlansAndAsksForMissingOnes) {
  ConvRelu a, b;  // two copies of one model: the same graph, other weights
  auto planA = mustCompile(a.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  auto planB = mustCompile(b.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  ASSERT_TRUE(planA && planB);
  at::Tensor x = at::randn({1, 3, 6, 6});
  PlanSet set(planA, 2);
  ASSERT_TRUE(set.run({a.w, a.b, x}).isOk());
  // B's weights: no plan for them yet.
  auto missing = set.run({b.w, b.b, x});
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kStaleWeights);
  set.add(planB);
  auto outB = set.run({b.w, b.b, x});
  ASSERT_TRUE(outB.isOk());
  EXPECT_TRUE(at::allclose((*outB)[0].toTensor(), b.reference(x)));
  // Back to A: the kept plan, not a new one.
  auto outA = set.run({a.w, a.b, x});
  ASSERT_TRUE(outA.isOk());
  EXPECT_TRUE(at::allclose((*outA)[0].toTensor(), a.reference(x)));
  EXPECT_EQ(set.current(), planA);
  EXPECT_EQ(set.switches(), 1u);
  EXPECT_EQ(set.size(), 2u);
  // A modified in place: its plan can never match again and is dropped; B's stays.
  a.b.add_(1.0);
  auto stale = set.run({a.w, a.b, x});
  ASSERT_FALSE(stale.isOk());
  EXPECT_EQ(stale.status().code(), StatusCode::kStaleWeights);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(set.current(), planB);
  // Nothing asks for an exact plan here, and none is set: running it alone says so.
  auto exact = set.runExact({b.w, b.b, x});
  ASSERT_FALSE(exact.isOk());
  EXPECT_EQ(exact.status().code(), StatusCode::kNeedsExactPlan);
}

TEST(ExecutorTest, AtenErrorsComeBackAsStatus) {
  ConvRelu m;
  auto cg = mustCompile(m.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  auto bad = cg->run({m.w, m.b, at::randn({1, 4, 5, 5})});  // 4 channels, conv wants 3
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("channels"), std::string::npos) << bad.status().message();
  auto wrongArity = cg->run({m.w, m.b});
  EXPECT_FALSE(wrongArity.isOk());
}

TEST(ExecutorTest, SymbolicSizesAndBuiltins) {
  // view(x, [s0, s0 * 8 // 3]) with s0 a runtime int, plus sym_size on a tensor.
  Graph g;
  auto s0 = g.addInput("s0", ValueType::Int);
  auto x = g.addInput("x", ValueType::Tensor);
  auto mul = g.addNode("_operator::mul", "", {Arg::value(s0), Arg::integer(8)}, {ValueType::Int});
  auto div = g.addNode("_operator::floordiv", "", {Arg::value(g.node(mul).outputs[0]), Arg::integer(3)}, {ValueType::Int});
  auto view = g.addNode("aten::view", "",
                        {Arg::value(x), Arg::makeList({Arg::value(s0), Arg::value(g.node(div).outputs[0])})},
                        {ValueType::Tensor});
  auto size = g.addNode("aten::sym_size", "int", {Arg::value(g.node(view).outputs[0]), Arg::integer(1)}, {ValueType::Int});
  g.setOutputs({Arg::value(g.node(view).outputs[0]), Arg::value(g.node(size).outputs[0])});
  auto cg = mustCompile(std::move(g), {0, 1}, {}, 2);
  ASSERT_TRUE(cg);
  at::Tensor in = at::arange(24, at::kFloat);
  auto out = cg->run({c10::IValue(int64_t{3}), in});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ((*out)[0].toTensor().sizes(), at::IntArrayRef({3, 8}));
  EXPECT_EQ((*out)[1].toInt(), 8);
  EXPECT_EQ(cg->stats().builtinSteps, 3u);
}

TEST(ExecutorTest, ListReturnsUnpackAndTensorListArgs) {
  Graph g;
  auto x = g.addInput("x", ValueType::Tensor);
  auto split = g.addNode("aten::split", "Tensor", {Arg::value(x), Arg::integer(2), Arg::integer(1)},
                         {ValueType::Tensor, ValueType::Tensor});
  const auto& parts = g.node(split).outputs;
  auto cat = g.addNode("aten::cat", "", {Arg::makeList({Arg::value(parts[1]), Arg::value(parts[0])}), Arg::integer(1)},
                       {ValueType::Tensor});
  g.setOutputs({Arg::value(g.node(cat).outputs[0]), Arg::none()});
  auto cg = mustCompile(std::move(g), {0}, {}, 1);
  ASSERT_TRUE(cg);
  at::Tensor in = at::randn({3, 4});
  auto out = cg->run({in});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  auto ref = at::cat({in.narrow(1, 2, 2), in.narrow(1, 0, 2)}, 1);
  EXPECT_TRUE(at::equal((*out)[0].toTensor(), ref));
  EXPECT_TRUE((*out)[1].isNone());
}

TEST(ExecutorTest, TypedArgumentsConvert) {
  // _to_copy(x, dtype=f64, ...) with dtype/layout/device/memory_format arguments.
  Graph g;
  auto x = g.addInput("x", ValueType::Tensor);
  auto copy = g.addNode("aten::_to_copy", "",
                        {Arg::value(x), Arg::dtype(ir::DType::Float64), Arg::layout(0), Arg::device("cpu"), Arg::none(),
                         Arg::boolean(false), Arg::none()},
                        {ValueType::Tensor});
  auto add = g.addNode("aten::add", "Tensor", {Arg::value(g.node(copy).outputs[0]), Arg::value(g.node(copy).outputs[0]), Arg::integer(2)},
                       {ValueType::Tensor});
  g.setOutputs({Arg::value(g.node(add).outputs[0])});
  auto cg = mustCompile(std::move(g), {0}, {}, 1);
  ASSERT_TRUE(cg);
  at::Tensor in = at::randn({5});
  auto out = cg->run({in});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ((*out)[0].toTensor().scalar_type(), at::kDouble);
  EXPECT_TRUE(at::allclose((*out)[0].toTensor(), in.to(at::kDouble) * 3));
}

TEST(ExecutorTest, NumbersForTensorArgumentsAreWrappedLikeEager) {
  // x / 5.0 traces to aten::div.Tensor(x, 5.0); s0 * x traces to aten::mul.Tensor(x, s0).
  Graph g;
  auto x = g.addInput("x", ValueType::Tensor);
  auto s0 = g.addInput("s0", ValueType::Int);
  auto div = g.addNode("aten::div", "Tensor", {Arg::value(x), Arg::real(5.0)}, {ValueType::Tensor});
  auto mul = g.addNode("aten::mul", "Tensor", {Arg::value(g.node(div).outputs[0]), Arg::value(s0)}, {ValueType::Tensor});
  g.setOutputs({Arg::value(g.node(mul).outputs[0])});
  auto cg = mustCompile(std::move(g), {0, 1}, {}, 2);
  ASSERT_TRUE(cg);
  at::Tensor in = at::randn({4, 3});
  auto out = cg->run({in, c10::IValue(int64_t{3})});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  // Wrapped numbers do not promote: the result stays float32, as in eager.
  EXPECT_EQ((*out)[0].toTensor().scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose((*out)[0].toTensor(), in / 5.0 * 3));
}

TEST(ExecutorTest, RejectsUnknownOperatorsAndBadArity) {
  Graph g;
  auto x = g.addInput("x", ValueType::Tensor);
  g.addNode("aten::no_such_op", "", {Arg::value(x)}, {ValueType::Tensor});
  auto cg = compileGraph(std::move(g), {0}, {}, 1);
  ASSERT_FALSE(cg.isOk());
  EXPECT_EQ(cg.status().code(), StatusCode::kUnsupported);

  Graph h;
  auto y = h.addInput("y", ValueType::Tensor);
  h.addNode("aten::add", "Tensor", {Arg::value(y), Arg::value(y)}, {ValueType::Tensor});  // alpha missing
  auto ch = compileGraph(std::move(h), {0}, {}, 1);
  ASSERT_FALSE(ch.isOk());
  EXPECT_EQ(ch.status().code(), StatusCode::kInvalidGraph);

  Graph k;
  auto z = k.addInput("z", ValueType::Tensor);
  k.addNode("aten::relu_", "", {Arg::value(z)}, {ValueType::Tensor});
  auto ck = compileGraph(std::move(k), {0}, {}, 1);
  ASSERT_FALSE(ck.isOk());
  EXPECT_EQ(ck.status().code(), StatusCode::kUnsupported);
}

TEST(ExecutorTest, ConcurrentRunsMatchSerial) {
  ConvRelu m;
  auto cg = mustCompile(m.graph(), {2}, {{0, 0}, {1, 1}}, 3);
  ASSERT_TRUE(cg);
  std::vector<at::Tensor> inputs, expected;
  for (int k = 0; k < 4; ++k) {
    inputs.push_back(at::randn({1, 3, 12, 12}));
    expected.push_back((*cg->run({m.w, m.b, inputs.back()}))[0].toTensor());
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        auto out = cg->run({m.w, m.b, inputs[t]});
        if (!out.isOk() || !at::equal((*out)[0].toTensor(), expected[t])) mismatches[t]++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace verifuse::runtime

namespace verifuse::runtime {
namespace {

/// layer_norm(x + r) * g (no beta) as the row-fusion rules write it into the IR, and a second
/// output (the residual sum) the next block would read.
Graph rowwiseLayerNormGraph(const std::vector<int64_t>& shape, const std::string& program) {
  Graph g;
  auto x = g.addInput("x", ValueType::Tensor);
  auto r = g.addInput("r", ValueType::Tensor);
  auto gamma = g.addInput("g", ValueType::Tensor);
  auto n = g.addNode("verifuse::rowwise", "", {Arg::value(x), Arg::value(r), Arg::value(gamma), Arg::string(program)},
                     {ValueType::Tensor, ValueType::Tensor});
  for (ir::ValueId v : g.node(n).outputs) g.mutableValue(v).setShape(shape);
  g.setOutputs({Arg::value(g.node(n).outputs[0]), Arg::value(g.node(n).outputs[1])});
  return g;
}

TEST(ExecutorRowwise, LayerNormOfResidualSumOnBothEngines) {
  kernels::rowwise::LayerNormSpec spec;
  spec.eps = 1e-5f;
  spec.beta = false;
  spec.residual = true;
  spec.storeSum = true;
  const std::string program = kernels::rowwise::layerNormProgram(spec).toString();
  const std::vector<int64_t> shape = {2, 5, 48};
  at::Tensor x = at::randn(shape), r = at::randn(shape), gamma = at::randn({48});
  at::Tensor h = x + r;
  at::Tensor expected = at::layer_norm(h, {48}, gamma, {}, 1e-5);
  for (bool onednn : {true, false}) {
    CompileOptions options;
    options.useOnednn = onednn;  // false: the "aten" engine policy interprets the program op by op
    auto cg = compileGraph(rowwiseLayerNormGraph(shape, program), {0, 1, 2}, {}, 3, options);
    ASSERT_TRUE(cg.isOk()) << cg.status().toString();
    ASSERT_EQ((*cg)->partitions().size(), 1u);
    EXPECT_EQ((*cg)->partitions()[0].engine, onednn ? "rowwise" : "aten");
    const int64_t before = engineRunCounts()[onednn ? "rowwise" : "aten"];
    auto out = (*cg)->run({x, r, gamma});
    ASSERT_TRUE(out.isOk()) << out.status().toString();
    EXPECT_EQ(engineRunCounts()[onednn ? "rowwise" : "aten"], before + 1);
    EXPECT_TRUE(at::allclose((*out)[0].toTensor(), expected, 1e-4, 1e-5)) << (*out)[0].toTensor() - expected;
    EXPECT_TRUE(at::equal((*out)[1].toTensor(), h));
  }
}

TEST(ExecutorRowwise, BadProgramIsAnError) {
  auto cg = compileGraph(rowwiseLayerNormGraph({2, 4}, "%0 = load in0\n%1 = frobnicate %0\nstore out0, %1\n"),
                         {0, 1, 2}, {}, 3);
  ASSERT_FALSE(cg.isOk());
  EXPECT_NE(cg.status().toString().find("frobnicate"), std::string::npos) << cg.status().toString();
}

}  // namespace
}  // namespace verifuse::runtime

namespace verifuse::runtime {
namespace {

/// A tensor graph input of a static shape and dtype.
ir::ValueId typedInput(Graph& g, const std::string& name, std::vector<int64_t> shape, ir::DType dtype) {
  auto v = g.addInput(name, ValueType::Tensor);
  g.mutableValue(v).setShape(std::move(shape));
  g.mutableValue(v).dtype = dtype;
  return v;
}

ir::ValueId shaped(Graph& g, ir::NodeId n, std::vector<int64_t> shape, ir::DType dtype) {
  ir::Value& v = g.mutableValue(g.node(n).outputs[0]);
  v.setShape(std::move(shape));
  v.dtype = dtype;
  return v.id;
}

/// x + exp(|j - i| * 0.5) (T5's relative-position bias has this form: aranges, a subtraction, a
/// row program over the distances), and sum(expand(arange(6), [n, 6])) with n large.
Graph relativeBiasGraph(int64_t bigRows) {
  using ir::DType;
  Graph g;
  auto x = typedInput(g, "x", {6, 6}, DType::Float32);
  auto arange = g.addNode("aten::arange", "start_step",
                          {Arg::integer(0), Arg::integer(6), Arg::integer(1), Arg::dtype(DType::Int64), Arg::none(),
                           Arg::none(), Arg::none()},
                          {ValueType::Tensor});
  auto a = shaped(g, arange, {6}, DType::Int64);
  auto row = shaped(g, g.addNode("aten::unsqueeze", "", {Arg::value(a), Arg::integer(0)}, {ValueType::Tensor}), {1, 6}, DType::Int64);
  auto col = shaped(g, g.addNode("aten::unsqueeze", "", {Arg::value(a), Arg::integer(1)}, {ValueType::Tensor}), {6, 1}, DType::Int64);
  auto rel = shaped(g, g.addNode("aten::sub", "Tensor", {Arg::value(row), Arg::value(col), Arg::integer(1)}, {ValueType::Tensor}),
                    {6, 6}, DType::Int64);
  auto dist = shaped(g, g.addNode("aten::abs", "", {Arg::value(rel)}, {ValueType::Tensor}), {6, 6}, DType::Int64);
  auto f = shaped(g, g.addNode("aten::_to_copy", "", {Arg::value(dist), Arg::dtype(DType::Float32), Arg::none(), Arg::none(),
                                                      Arg::none(), Arg::boolean(false), Arg::none()},
                               {ValueType::Tensor}),
                  {6, 6}, DType::Float32);
  auto bias = shaped(g, g.addNode("verifuse::rowwise", "",
                                  {Arg::value(f), Arg::string("%0 = load in0\n%1 = const 0.5\n%2 = mul %0, %1\n%3 = exp %2\nstore out0, %3\n")},
                                  {ValueType::Tensor}),
                     {6, 6}, DType::Float32);
  auto sum = shaped(g, g.addNode("aten::add", "Tensor", {Arg::value(x), Arg::value(bias), Arg::integer(1)}, {ValueType::Tensor}),
                    {6, 6}, DType::Float32);
  auto big = shaped(g, g.addNode("aten::expand", "", {Arg::value(a), Arg::intList({bigRows, 6}), Arg::boolean(false)},
                                 {ValueType::Tensor}),
                    {bigRows, 6}, DType::Int64);
  auto total = shaped(g, g.addNode("aten::sum", "", {Arg::value(big), Arg::none()}, {ValueType::Tensor}), {}, DType::Int64);
  g.setOutputs({Arg::value(sum), Arg::value(total)});
  return g;
}

TEST(ExecutorConstantFolding, ChainsOverConstantsRunOnceAtPlanTime) {
  const int64_t bigRows = (int64_t{64} << 20) / 48 + 1;  // the expand's 6 x int64 rows pass 64 MB
  auto cg = mustCompile(relativeBiasGraph(bigRows), {0}, {}, 1);
  ASSERT_TRUE(cg);
  // arange, both unsqueezes, sub, abs, the cast and the row program: folded; the add reads x.
  const std::vector<std::string> engines = cg->nodeEngines();
  EXPECT_EQ(engines, (std::vector<std::string>{"constant", "constant", "constant", "constant", "constant", "constant",
                                               "constant", "dispatcher", "dispatcher", "dispatcher"}));
  EXPECT_EQ(cg->stats().constantFoldedSteps, 7u);
  EXPECT_TRUE(cg->partitions().empty());  // the row program left the plan's partitions
  at::Tensor x = at::randn({6, 6});
  at::Tensor a = at::arange(6, at::kLong);
  at::Tensor expected = x + at::exp(at::mul((a.unsqueeze(0) - a.unsqueeze(1)).abs().to(at::kFloat), 0.5));
  const int64_t rowRuns = engineRunCounts()["rowwise"], atenRuns = engineRunCounts()["aten"];
  auto out = cg->run({x});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_TRUE(at::equal((*out)[0].toTensor(), expected)) << (*out)[0].toTensor() - expected;
  EXPECT_EQ((*out)[1].toTensor().item<int64_t>(), 15 * bigRows);
  // Nothing of the folded row program runs per call, on either engine.
  EXPECT_EQ(engineRunCounts()["rowwise"], rowRuns);
  EXPECT_EQ(engineRunCounts()["aten"], atenRuns);
}

/// T5's masked position bias: where(keep, permute(bias, [2, 0, 1]).unsqueeze(0), lowest), then (with
/// \p cloned) clone(memory_format=contiguous), as the graph output.
Graph maskedPermutedBiasGraph(bool cloned) {
  using ir::DType;
  Graph g;
  auto keep = typedInput(g, "keep", {2, 1, 4, 4}, DType::Bool);
  auto table = g.addConstant(constantOf("bias", at::arange(48, at::kFloat).reshape({4, 4, 3})));
  auto perm = shaped(g, g.addNode("aten::permute", "", {Arg::constant(table), Arg::intList({2, 0, 1})}, {ValueType::Tensor}),
                     {3, 4, 4}, DType::Float32);
  auto bias = shaped(g, g.addNode("aten::unsqueeze", "", {Arg::value(perm), Arg::integer(0)}, {ValueType::Tensor}),
                     {1, 3, 4, 4}, DType::Float32);
  auto lowest = shaped(g, g.addNode("aten::scalar_tensor", "", {Arg::real(-3.0e38), Arg::dtype(DType::Float32), Arg::none(),
                                                                 Arg::none(), Arg::none()},
                                    {ValueType::Tensor}),
                       {}, DType::Float32);
  auto masked = shaped(g, g.addNode("aten::where", "self", {Arg::value(keep), Arg::value(bias), Arg::value(lowest)},
                                    {ValueType::Tensor}),
                       {2, 3, 4, 4}, DType::Float32);
  if (!cloned) {
    g.setOutputs({Arg::value(masked)});
    return g;
  }
  auto copy = shaped(g, g.addNode("aten::clone", "", {Arg::value(masked), Arg::memoryFormat(0)}, {ValueType::Tensor}),
                     {2, 3, 4, 4}, DType::Float32);
  g.setOutputs({Arg::value(copy)});
  return g;
}

TEST(ExecutorConstantFolding, AFoldedViewWhoseLayoutNoOneSeesIsStoredContiguous) {
  at::Tensor keep = at::rand({2, 1, 4, 4}) > 0.3;
  at::Tensor bias = at::arange(48, at::kFloat).reshape({4, 4, 3}).permute({2, 0, 1}).unsqueeze(0);
  at::Tensor expected = at::where(keep, bias, at::scalar_tensor(-3.0e38, at::kFloat));
  // where() then a contiguous clone: the bias is kept contiguous (the where writes dense rows).
  auto cg = mustCompile(maskedPermutedBiasGraph(true), {0}, {}, 1);
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->stats().foldedMadeContiguous, 1u);
  auto out = cg->run({keep});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_TRUE(at::equal((*out)[0].toTensor(), expected));
  EXPECT_TRUE((*out)[0].toTensor().is_contiguous());
  // The where's own result is the output: its strides follow the bias's, as eager's do.
  auto seen = mustCompile(maskedPermutedBiasGraph(false), {0}, {}, 1);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->stats().foldedMadeContiguous, 0u);
  auto out2 = seen->run({keep});
  ASSERT_TRUE(out2.isOk()) << out2.status().toString();
  EXPECT_TRUE(at::equal((*out2)[0].toTensor(), expected));
  EXPECT_EQ((*out2)[0].toTensor().strides(), expected.strides());
}

/// max_pool2d_with_indices(x, 3, 2, 1) of a [1, 8, 10, 10] input, then relu(values): outputs the
/// relu, the values themselves and (with \p indices) the indices.
Graph maxPoolGraph(bool indices) {
  using ir::DType;
  Graph g;
  auto x = typedInput(g, "x", {1, 8, 10, 10}, DType::Float32);
  auto pool = g.addNode("aten::max_pool2d_with_indices", "",
                        {Arg::value(x), Arg::intList({3, 3}), Arg::intList({2, 2}), Arg::intList({1, 1}),
                         Arg::intList({1, 1}), Arg::boolean(false)},
                        {ValueType::Tensor, ValueType::Tensor});
  ir::Value& values = g.mutableValue(g.node(pool).outputs[0]);
  values.setShape({1, 8, 5, 5});
  values.dtype = DType::Float32;
  ir::Value& idx = g.mutableValue(g.node(pool).outputs[1]);
  idx.setShape({1, 8, 5, 5});
  idx.dtype = DType::Int64;
  auto relu = shaped(g, g.addNode("aten::relu", "", {Arg::value(g.node(pool).outputs[0])}, {ValueType::Tensor}),
                     {1, 8, 5, 5}, DType::Float32);
  std::vector<Arg> outs = {Arg::value(relu), Arg::value(g.node(pool).outputs[0])};
  if (indices) outs.push_back(Arg::value(g.node(pool).outputs[1]));
  g.setOutputs(outs);
  return g;
}

TEST(ExecutorPooling, MaxPoolOfAnNchwInputRunsChannelsLastWithEagersValuesIndicesAndStrides) {
  for (bool indices : {false, true}) {
    auto cg = mustCompile(maxPoolGraph(indices), {0}, {}, 1);
    ASSERT_TRUE(cg);
    EXPECT_EQ(cg->stats().channelsLastPools, 1u);
    for (at::Tensor x : {at::randn({1, 8, 10, 10}), at::randn({1, 8, 10, 10}).contiguous(at::MemoryFormat::ChannelsLast)}) {
      auto [values, where] = at::max_pool2d_with_indices(x, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false);
      auto out = cg->run({x});
      ASSERT_TRUE(out.isOk()) << out.status().toString();
      const at::Tensor relu = (*out)[0].toTensor(), got = (*out)[1].toTensor();
      EXPECT_TRUE(at::equal(relu, at::relu(values)));
      EXPECT_TRUE(at::equal(got, values));
      EXPECT_EQ(got.strides(), values.strides());
      EXPECT_EQ(relu.strides(), at::relu(values).strides());
      if (indices) {
        EXPECT_TRUE(at::equal((*out)[2].toTensor(), where));
        EXPECT_EQ((*out)[2].toTensor().strides(), where.strides());
      }
    }
  }
}

/// The planner's passes each report whether they changed the plan (planner/planner.h): a graph
/// with a folded chain changes it by folding, one with a max pool by its layout, and neither is
/// partitioned, tuned or packed.
TEST(PlannerPasses, EachReportsWhetherItChangedThePlan) {
  auto folded = mustCompile(relativeBiasGraph(4), {0}, {}, 1);
  ASSERT_TRUE(folded);
  EXPECT_EQ(folded->stats().planPassesChanged,
            (std::vector<std::string>{"mark plan-time nodes", "evaluate plan-time nodes", "build steps",
                                      "keep folded values", "plan lifetimes"}));
  auto pooled = mustCompile(maxPoolGraph(false), {0}, {}, 1);
  ASSERT_TRUE(pooled);
  EXPECT_EQ(pooled->stats().planPassesChanged,
            (std::vector<std::string>{"build steps", "assign layouts", "plan lifetimes"}));
}

// A static KV cache's step as aot_autograd hands it over: the cache (argument 0) updated by a
// functional index_put at the positions of argument 2, the update returned first (the runtime
// wrapper copies it back into argument 0), and a reader of the updated cache.
struct CacheUpdate {
  bool readOldValue = false;  // a second reader of the input's old value
  bool accumulate = false;
  Graph graph() const {
    Graph g;
    auto cache = g.addInput("cache", ValueType::Tensor);
    auto rows = g.addInput("rows", ValueType::Tensor);
    auto pos = g.addInput("pos", ValueType::Tensor);
    auto put = g.addNode("aten::index_put", "",
                         {Arg::value(cache), Arg::makeList({Arg::value(pos)}), Arg::value(rows), Arg::boolean(accumulate)},
                         {ValueType::Tensor});
    const auto updated = g.node(put).outputs[0];
    auto twice = g.addNode("aten::mul", "Scalar", {Arg::value(updated), Arg::real(2.0)}, {ValueType::Tensor});
    std::vector<Arg> outs = {Arg::value(updated), Arg::value(g.node(twice).outputs[0])};
    if (readOldValue) {
      auto old = g.addNode("aten::neg", "", {Arg::value(cache)}, {ValueType::Tensor});
      outs.push_back(Arg::value(g.node(old).outputs[0]));
    }
    g.setOutputs(outs);
    return g;
  }
  std::shared_ptr<const CompiledGraph> compile(bool writtenBack = true) const {
    CompileOptions options;
    if (writtenBack) options.writtenBackInputs = {{0, 0}};
    auto cg = compileGraph(graph(), {0, 1, 2}, {}, 3, options);
    EXPECT_TRUE(cg.isOk()) << cg.status().toString();
    return cg.isOk() ? cg.value() : nullptr;
  }
};

TEST(PlannerInputWrites, AWrittenBackCacheIsUpdatedInPlaceAndReturnedItself) {
  auto cg = CacheUpdate{}.compile();
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->stats().inPlaceWrites, 1u);
  at::Tensor cache = at::randn({6, 4});
  const at::Tensor before = cache.clone();
  const at::Tensor rows = at::randn({2, 4});
  const at::Tensor pos = at::tensor({1, 4}, at::kLong);
  auto out = cg->run({cache, rows, pos});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  const at::Tensor expected = before.index_put({pos}, rows);
  // The update is the caller's tensor (aot's copy back is then a no-op), holding eager's values.
  EXPECT_TRUE((*out)[0].toTensor().is_same(cache));
  EXPECT_TRUE(at::equal(cache, expected));
  EXPECT_TRUE(at::equal((*out)[1].toTensor(), expected * 2.0));
}

TEST(PlannerInputWrites, NotInPlaceWithoutWriteBackOrWithAnotherReaderOrAccumulating) {
  for (const auto& [name, cg] : std::vector<std::pair<std::string, std::shared_ptr<const CompiledGraph>>>{
           {"no write-back", CacheUpdate{}.compile(false)},
           {"old value read", CacheUpdate{true, false}.compile()},
           {"accumulating", CacheUpdate{false, true}.compile()}}) {
    ASSERT_TRUE(cg) << name;
    EXPECT_EQ(cg->stats().inPlaceWrites, 0u) << name;
    at::Tensor cache = at::randn({6, 4});
    const at::Tensor before = cache.clone();
    auto out = cg->run({cache, at::randn({2, 4}), at::tensor({1, 4}, at::kLong)});
    ASSERT_TRUE(out.isOk()) << name << ": " << out.status().toString();
    EXPECT_FALSE((*out)[0].toTensor().is_same(cache)) << name;
    EXPECT_TRUE(at::equal(cache, before)) << name << ": the input was written";
  }
}

TEST(PlannerInputWrites, ACacheSharingStorageWithAnotherArgumentTakesTheFunctionalForm) {
  auto cg = CacheUpdate{}.compile();
  ASSERT_TRUE(cg);
  at::Tensor cache = at::randn({6, 4});
  const at::Tensor before = cache.clone();
  // The rows are a view of the cache itself: writing the cache first would change them.
  const at::Tensor rows = cache.narrow(0, 0, 2);
  const at::Tensor pos = at::tensor({1, 4}, at::kLong);
  auto out = cg->run({cache, rows, pos});
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_FALSE((*out)[0].toTensor().is_same(cache));
  EXPECT_TRUE(at::equal(cache, before));
  EXPECT_TRUE(at::equal((*out)[0].toTensor(), before.index_put({pos}, before.narrow(0, 0, 2))));
}

}  // namespace
}  // namespace verifuse::runtime
