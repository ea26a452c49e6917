// row-fusion beyond its golden cases (row_fusion_*.vfir, neg_row_fusion.vfir): the node it makes
// (inputs, program text, outputs), members read outside the chain (an extra output when read after
// the sink, the chain stops when read before), near misses with their reasons, the rule's phase
// (after every fusion rule, so post-ops are attached first), and its proof under Z3 with the
// mutants the issue lists.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/verify/catalog.h"

namespace fs = std::filesystem;

namespace verifuse::passes {
namespace {

using ir::Graph;

std::string readFile(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Graph parse(const std::string& text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

Graph golden(const std::string& name) { return parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules" / name)); }

PipelineOptions admitted() {
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = [](const rules::Rule&) {
    ProofOutcome out;
    out.verdict = "Proved";
    out.admitted = true;
    return out;
  };
  return o;
}

std::vector<const ir::Node*> liveOps(const Graph& g, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const ir::Node& n : g.nodes()) {
    if (!n.erased && n.op == op) out.push_back(&n);
  }
  return out;
}

std::vector<std::string> nearMisses(const PipelineResult& r) {
  std::vector<std::string> out;
  for (const NearMiss& m : r.nearMisses) {
    if (m.rule == "row-fusion") out.push_back(m.op + ": " + m.reason);
  }
  return out;
}

bool anyContains(const std::vector<std::string>& texts, const std::string& part) {
  return std::any_of(texts.begin(), texts.end(), [&](const std::string& t) { return t.find(part) != std::string::npos; });
}

TEST(RowFusionTest, LlamaPiecesBecomeThreeNodes) {
  Graph g = golden("row_fusion_llama.vfir");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rewrites["row-fusion"], 3);
  auto rows = liveOps(g, "verifuse::rowwise");
  ASSERT_EQ(rows.size(), 3u) << ir::printGraph(g);
  // RMSNorm: x and the weight (a constant, read in place), eps inside the rsqrt.
  const ir::Node& rms = *rows[0];
  ASSERT_EQ(rms.args.size(), 3u);
  EXPECT_TRUE(rms.args[0].isValue());
  EXPECT_TRUE(rms.args[1].isConstant());
  const std::string& prog = rms.args.back().s;
  EXPECT_NE(prog.find("mean"), std::string::npos) << prog;
  EXPECT_LT(prog.find("add"), prog.find("rsqrt")) << prog;
  // Rotary: q, cos, sin; rotate_half replaced the slices, neg and cat.
  EXPECT_NE(rows[1]->args.back().s.find("rotate_half"), std::string::npos);
  EXPECT_TRUE(liveOps(g, "aten::slice").empty());
  EXPECT_TRUE(liveOps(g, "aten::cat").empty());
  EXPECT_NE(rows[2]->args.back().s.find("silu"), std::string::npos);
  // The projection keeps its linear.
  EXPECT_EQ(liveOps(g, "verifuse::linear").size(), 1u);
  for (const ir::Node* n : rows) EXPECT_EQ(g.value(n->outputs[0]).dtype, ir::DType::Float32);
}

TEST(RowFusionTest, LinearKeepsItsResidualPostOp) {
  Graph g = golden("row_fusion_bert.vfir");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->rewrites["residual-add-sum-postop"], 1);
  EXPECT_EQ(r->rewrites["row-fusion"], 2);
  auto lin = liveOps(g, "verifuse::linear");
  ASSERT_EQ(lin.size(), 1u);
  EXPECT_EQ(lin[0]->args[3].s, "sum(1)");
  EXPECT_TRUE(liveOps(g, "aten::native_layer_norm").empty()) << ir::printGraph(g);
}

// h = x + y is read by the layer norm (in the chain) and by a later add: an extra output.
TEST(RowFusionTest, MemberReadAfterTheSinkIsStored) {
  Graph g = parse(R"(graph(%x : Tensor<f32>[2, 8], %y : Tensor<f32>[2, 8], %z : Tensor<f32>[2, 8]) {
  %0 : Tensor<f32>[2, 8] = aten::add.Tensor(%x, %y, 1)
  %1 : Tensor<f32>[2, 8], %2 : Tensor<f32>[2, 1], %3 : Tensor<f32>[2, 1] = aten::native_layer_norm(%0, [8], None, None, 1e-05)
  %4 : Tensor<f32>[2, 8] = aten::mm(%1, %z)
  %5 : Tensor<f32>[2, 8] = aten::add.Tensor(%0, %4, 1)
  return (%5)
}
)");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  auto rows = liveOps(g, "verifuse::rowwise");
  ASSERT_EQ(rows.size(), 1u) << ir::printGraph(g);
  ASSERT_EQ(rows[0]->outputs.size(), 2u);
  EXPECT_NE(rows[0]->args.back().s.find("store out1"), std::string::npos);
  // The later add reads the stored sum.
  auto adds = liveOps(g, "aten::add");
  ASSERT_EQ(adds.size(), 1u) << ir::printGraph(g);
  EXPECT_EQ(adds[0]->args[0].i, rows[0]->outputs[1]);
  EXPECT_TRUE(ir::verifyGraph(g).isOk());
}

// The sum is read by an op before the chain's sink (which the sink depends on): storing it would
// define it too late, so the chain stops there and the sum stays on ATen.
TEST(RowFusionTest, MemberReadBeforeTheSinkStopsTheChain) {
  Graph g = parse(R"(graph(%x : Tensor<f32>[2, 8], %y : Tensor<f32>[2, 8], %w : Tensor<f32>[8, 8]) {
  %0 : Tensor<f32>[2, 8] = aten::add.Tensor(%x, %y, 1)
  %1 : Tensor<f32>[2, 8] = aten::exp(%0)
  %2 : Tensor<f32>[2, 8] = aten::mm(%0, %w)
  %3 : Tensor<f32>[2, 8] = aten::mul.Tensor(%1, %2)
  %4 : Tensor<f32>[2, 8] = aten::tanh(%3)
  return (%4)
}
)");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(ir::verifyGraph(g).isOk());
  EXPECT_EQ(liveOps(g, "aten::add").size(), 1u) << ir::printGraph(g);
  auto rows = liveOps(g, "verifuse::rowwise");
  ASSERT_EQ(rows.size(), 1u) << ir::printGraph(g);
  EXPECT_EQ(rows[0]->outputs.size(), 1u);
}

TEST(RowFusionTest, NearMissesNameTheirReasons) {
  Graph g = golden("neg_row_fusion.vfir");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const auto misses = nearMisses(*r);
  EXPECT_TRUE(anyContains(misses, "mean over dim 0, not the last dim")) << ::testing::PrintToString(misses);
  EXPECT_TRUE(anyContains(misses, "where whose mask is not a bool tensor")) << ::testing::PrintToString(misses);
  EXPECT_TRUE(anyContains(misses, "_safe_softmax")) << ::testing::PrintToString(misses);
  // Index arithmetic (int64) and dtype-less values are not near misses: not this rule's pattern.
  EXPECT_FALSE(anyContains(misses, "not float32")) << ::testing::PrintToString(misses);
  EXPECT_EQ(liveOps(g, "aten::mean").size(), 1u);
  EXPECT_EQ(liveOps(g, "verifuse::rowwise").size(), 1u) << ir::printGraph(g);
}

TEST(RowFusionTest, DynamicShapesAreANearMiss) {
  Graph g = parse(R"(graph(%x : Tensor<f32>[?, 8]) {
  %0 : Tensor<f32>[?, 8] = aten::_softmax(%x, -1, false)
  return (%0)
}
)");
  auto r = runPipeline(g, admitted());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_TRUE(liveOps(g, "verifuse::rowwise").empty());
  EXPECT_TRUE(anyContains(nearMisses(*r), "dynamic shapes")) << ::testing::PrintToString(nearMisses(*r));
}

TEST(RowFusionTest, RunsInItsOwnPhaseAfterEveryFusionRule) {
  auto rules = rules::builtinRules();
  ASSERT_TRUE(rules.isOk());
  ASSERT_EQ(rules->back().id(), "row-fusion");
  EXPECT_EQ(rules->back().phase(), rules::Phase::kRowFusion);
  EXPECT_STREQ(rules::passName(rules::Phase::kRowFusion), "row-fusion");
}

TEST(RowFusionTest, ProvedAndEveryMutantRefuted) {
  auto rules = rules::builtinRules();
  ASSERT_TRUE(rules.isOk());
  const rules::Rule& rule = rules->back();
  verify::ProveAllOptions options;
  options.checkAxioms = false;
  const verify::RuleResult r = verify::proveRule(rule.proof(), options);
  EXPECT_TRUE(r.ok()) << r.verdict.summary();
  std::set<std::string> killed;
  for (const verify::MutantResult& m : r.mutants) {
    EXPECT_TRUE(m.killed()) << m.name << ": " << m.verdict.summary();
    if (m.killed()) killed.insert(m.name);
  }
  for (const char* name : {"rms-eps-dropped", "rms-eps-outside-rsqrt", "reduction-wrong-axis", "rotary-sign-flipped",
                           "rotary-halves-swapped", "softmax-wrong-axis", "mask-after-softmax", "gelu-erf-tanh-swapped",
                           "layer-norm-without-mean"}) {
    EXPECT_TRUE(killed.count(name)) << name;
  }
}

}  // namespace
}  // namespace verifuse::passes
