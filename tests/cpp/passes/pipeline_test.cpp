// The pass pipeline and the fusion rules.
//  - Golden before/after IR: tests/golden/rules/NAME.vfir runs through the pipeline and must print
//    exactly as NAME.after.vfir (VERIFUSE_UPDATE_GOLDEN=1 rewrites the .after files for review).
//    Files named neg_* are negative cases: what must NOT fuse.
//  - Numeric folds on real constant data, the proof gate (a refuted rule never applies, the
//    planted bug), the instance gate and determinism. The rules' declarations and proofs:
//    rules_test.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <tuple>

#include <algorithm>
#include <cmath>
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

std::string stripHeader(const std::string& content) {
  std::istringstream in(content);
  std::string line, body;
  bool header = true;
  while (std::getline(in, line)) {
    if (header && line.rfind("//", 0) == 0) continue;
    header = false;
    body += line + "\n";
  }
  return body;
}

PipelineOptions unverified() {
  PipelineOptions o;
  o.verify = VerifyLevel::kOff;
  return o;
}

TEST(RulesGoldenTest, BeforeAfter) {
  const fs::path dir = fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".vfir" && name.find(".after.") == std::string::npos) cases.push_back(e.path());
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 8u) << "golden rule cases missing";
  const bool update = std::getenv("VERIFUSE_UPDATE_GOLDEN") != nullptr;
  for (const fs::path& before : cases) {
    SCOPED_TRACE(before.filename().string());
    auto g = ir::parseGraph(readFile(before));
    ASSERT_TRUE(g.isOk()) << g.status().toString();
    auto result = runPipeline(*g, unverified());
    ASSERT_TRUE(result.isOk()) << result.status().toString();
    std::string header = "// " + before.filename().string() + " after the pipeline. Fusions:";
    for (const auto& f : result->fusions) header += " " + f.rule;
    header += "\n";
    const std::string printed = ir::printGraph(*g);
    fs::path after = before;
    after.replace_extension(".after.vfir");
    if (update) {
      std::ofstream(after) << header << printed;
      continue;
    }
    ASSERT_TRUE(fs::exists(after)) << after << " missing (run with VERIFUSE_UPDATE_GOLDEN=1)";
    EXPECT_EQ(printed, stripHeader(readFile(after)));
    // The result must itself be a valid, re-parsable graph.
    auto reparsed = ir::parseGraph(printed);
    ASSERT_TRUE(reparsed.isOk()) << reparsed.status().toString();
  }
}

size_t countOps(const Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += !node.erased && node.op == op;
  return n;
}

std::string fusedPostOps(const Graph& g) {
  for (const auto& node : g.nodes()) {
    if (!node.erased && rules::isFusedOp(node)) return ir::namedOperand(node, "post_ops")->s;
  }
  return "<none>";
}

Graph parse(const std::string& text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

TEST(RulesTest, ResidualBlockFusesEverything) {
  Graph g = parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules/residual_block.vfir"));
  auto r = runPipeline(g, unverified());
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(countOps(g, rules::kConvOp), 2u);
  EXPECT_EQ(countOps(g, "aten::_native_batch_norm_legit_no_training"), 0u);
  EXPECT_EQ(countOps(g, "aten::add"), 0u);
  EXPECT_EQ(countOps(g, "aten::relu"), 0u);
  std::vector<std::string> rulesApplied;
  for (const auto& f : r->fusions) rulesApplied.push_back(f.rule);
  EXPECT_EQ(rulesApplied, (std::vector<std::string>{"conv-bn-fold", "conv-relu-postop", "conv-bn-fold",
                                                    "residual-add-sum-postop", "residual-add-relu"}));
}

TEST(RulesTest, ClampWithReversedBoundsIsNotFused) {
  Graph g = parse(R"(graph(%x : Tensor[1, 2, 4, 4]) {
  %0 : Tensor[1, 3, 4, 4] = aten::convolution(%x, $w, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)
  %1 : Tensor[1, 3, 4, 4] = aten::clamp(%0, 2.0, 1.0)
  return (%1)
}
constants {
  $w : f32[3, 2, 1, 1]
}
)");
  ASSERT_TRUE(runPipeline(g, unverified()).isOk());
  EXPECT_EQ(countOps(g, "aten::clamp"), 1u);
  EXPECT_EQ(fusedPostOps(g), "");
}

TEST(RulesTest, GeluVariantsStayDistinct) {
  for (const char* approx : {"none", "tanh"}) {
    Graph g = parse(std::string(R"(graph(%x : Tensor[4, 8]) {
  %0 : Tensor[8, 3] = aten::permute($w, [1, 0])
  %1 : Tensor[4, 3] = aten::mm(%x, %0)
  %2 : Tensor[4, 3] = aten::gelu(%1, ")") + approx + R"(")
  return (%2)
}
constants {
  $w : f32[3, 8]
}
)");
    ASSERT_TRUE(runPipeline(g, unverified()).isOk());
    EXPECT_EQ(fusedPostOps(g), std::string(approx) == "none" ? "gelu_erf" : "gelu_tanh");
  }
}

TEST(RulesTest, PostOpStringRoundTrips) {
  std::vector<rules::PostOpSpec> ops = {{"sum", {0.5}}, {"relu", {}}, {"clamp", {-1.5, 6}}, {"leaky_relu", {0.01}},
                                        {"elu", {1.25}}};
  auto text = rules::formatPostOps(ops);
  auto back = rules::parsePostOps(text);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(*back, ops);
  EXPECT_FALSE(rules::parsePostOps("relu,bogus").isOk());
  EXPECT_FALSE(rules::parsePostOps("clamp(1)").isOk());
}

// ---- numeric folds on real data -----------------------------------------------------------------

struct OwnedConstant {
  std::shared_ptr<std::vector<float>> data;
};

ir::ConstantId addData(Graph& g, const std::string& name, std::vector<int64_t> sizes, std::vector<float> v) {
  return addHostConstant(g, name, std::move(sizes), std::move(v));
}

const float* constantData(const Graph& g, const ir::Arg& a) {
  // Folded weights are lazy: materialize them (kept alive for the test's duration).
  static std::vector<std::shared_ptr<std::vector<float>>> keep;
  std::shared_ptr<std::vector<float>> k;
  const float* p = g.constants()[static_cast<size_t>(a.i)].floatData(k);
  if (k) keep.push_back(k);
  return p;
}

TEST(RulesTest, ConvBatchNormFoldMatchesTheFormula) {
  Graph g;
  ir::ValueId x = g.addInput("x", ir::ValueType::Tensor);
  g.mutableValue(x).setShape({1, 2, 3, 3});
  const std::vector<float> w = {1, 2, 3, 4, -1, -2, 0.5f, 0.25f};  // [2, 2, 1, 2]
  auto cw = addData(g, "w", {2, 2, 1, 2}, w);
  auto cb = addData(g, "b", {2}, {0.5f, -0.5f});
  auto gamma = addData(g, "gamma", {2}, {2.0f, 0.5f});
  auto beta = addData(g, "beta", {2}, {0.1f, 0.2f});
  auto mean = addData(g, "mean", {2}, {1.0f, -1.0f});
  auto var = addData(g, "var", {2}, {4.0f, 0.25f});
  auto conv = g.addNode("aten::convolution", "",
                        {ir::Arg::value(x), ir::Arg::constant(cw), ir::Arg::constant(cb), ir::Arg::intList({1, 1}),
                         ir::Arg::intList({0, 0}), ir::Arg::intList({1, 1}), ir::Arg::boolean(false),
                         ir::Arg::intList({0, 0}), ir::Arg::integer(1)},
                        {ir::ValueType::Tensor});
  ir::ValueId y = g.node(conv).outputs[0];
  g.mutableValue(y).setShape({1, 2, 3, 2});
  auto bn = g.addNode("aten::_native_batch_norm_legit_no_training", "",
                      {ir::Arg::value(y), ir::Arg::constant(gamma), ir::Arg::constant(beta), ir::Arg::constant(mean),
                       ir::Arg::constant(var), ir::Arg::real(0.1), ir::Arg::real(1e-5)},
                      {ir::ValueType::Tensor, ir::ValueType::Tensor, ir::ValueType::Tensor});
  g.setOutputs({ir::Arg::value(g.node(bn).outputs[0])});
  auto r = runPipeline(g, unverified());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_EQ(r->fusions.size(), 1u);
  EXPECT_EQ(r->fusions[0].rule, "conv-bn-fold");
  const ir::Node& fused = g.node(conv);
  ASSERT_EQ(fused.op, rules::kConvOp);
  const float* fw = constantData(g, fused.args[1]);
  const float* fb = constantData(g, fused.args[2]);
  const double gm[2] = {2.0, 0.5}, bt[2] = {0.1, 0.2}, mu[2] = {1.0, -1.0}, vr[2] = {4.0, 0.25}, b[2] = {0.5, -0.5};
  for (int o = 0; o < 2; ++o) {
    double s = gm[o] / std::sqrt(vr[o] + 1e-5);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(fw[o * 4 + i], w[static_cast<size_t>(o * 4 + i)] * s, 1e-6);
    EXPECT_NEAR(fb[o], (b[o] - mu[o]) * s + bt[o], 1e-6);
  }
  // The original constants are untouched (they are the model's parameters).
  EXPECT_EQ(constantData(g, ir::Arg::constant(cw))[0], 1.0f);
  // The folded weight is computed on demand, not stored by the rewrite.
  EXPECT_EQ(g.constants()[static_cast<size_t>(fused.args[1].i)].data, nullptr);
  EXPECT_TRUE(g.constants()[static_cast<size_t>(fused.args[1].i)].hasData());
}

Graph convBnWithData() {
  Graph g;
  ir::ValueId x = g.addInput("x", ir::ValueType::Tensor);
  g.mutableValue(x).setShape({1, 3, 4, 4});
  std::vector<float> w(16 * 3 * 9);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i)) * 0.3f;
  std::vector<float> stat(16), var(16);
  for (size_t i = 0; i < 16; ++i) {
    stat[i] = 0.1f * static_cast<float>(i) - 0.7f;
    var[i] = 1e-4f + 0.05f * static_cast<float>(i);  // tiny variances: eps matters
  }
  auto cw = addData(g, "w", {16, 3, 3, 3}, w);
  auto gm = addData(g, "gamma", {16}, stat), bt = addData(g, "beta", {16}, stat);
  auto mu = addData(g, "mean", {16}, stat), vr = addData(g, "var", {16}, var);
  auto conv = g.addNode("aten::convolution", "",
                        {ir::Arg::value(x), ir::Arg::constant(cw), ir::Arg::none(), ir::Arg::intList({1, 1}),
                         ir::Arg::intList({1, 1}), ir::Arg::intList({1, 1}), ir::Arg::boolean(false),
                         ir::Arg::intList({0, 0}), ir::Arg::integer(1)},
                        {ir::ValueType::Tensor});
  g.mutableValue(g.node(conv).outputs[0]).setShape({1, 16, 4, 4});
  auto bn = g.addNode("aten::_native_batch_norm_legit_no_training", "",
                      {ir::Arg::value(g.node(conv).outputs[0]), ir::Arg::constant(gm), ir::Arg::constant(bt),
                       ir::Arg::constant(mu), ir::Arg::constant(vr), ir::Arg::real(0.1), ir::Arg::real(1e-3)},
                      {ir::ValueType::Tensor, ir::ValueType::Tensor, ir::ValueType::Tensor});
  g.setOutputs({ir::Arg::value(g.node(bn).outputs[0])});
  return g;
}

ProofOutcome admitAll(const rules::Rule&) {
  ProofOutcome out;
  out.verdict = "Proved";
  out.admitted = true;
  return out;
}

/// Instance validation on, every rule admitted (the proof gate is tested separately).
PipelineOptions instanceOptions() {
  PipelineOptions o;
  o.verify = VerifyLevel::kInstances;
  o.proveRule = admitAll;
  o.validateInstance = validateFoldInstance;
  return o;
}

TEST(InstanceValidationTest, CorrectFoldIsProvedWithABound) {
  Graph g = convBnWithData();
  PipelineOptions o = instanceOptions();
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk());
  ASSERT_EQ(r->fusions.size(), 1u);
  EXPECT_TRUE(r->fusions[0].applied);
  EXPECT_EQ(r->fusions[0].instance.verdict, "Proved") << r->fusions[0].instance.detail;
  EXPECT_GT(r->fusions[0].instance.maxErrorBound, 0.0);
  EXPECT_LE(r->fusions[0].instance.maxError, r->fusions[0].instance.maxErrorBound);
  // 432 weights: the layer also gets the end-to-end Z3 check with its concrete weights.
  EXPECT_EQ(r->fusions[0].instance.layerVerdict, "Proved") << r->fusions[0].instance.layerDetail;
}

TEST(InstanceValidationTest, LayerCheckRespectsSizeLimitAndBudget) {
  for (auto [maxWeights, budget, expected] : {std::tuple<int64_t, int64_t, const char*>{4096, 0, "skipped"},
                                              {100, INT64_MAX, "skipped"},
                                              {4096, 432, "Proved"}}) {
    Graph g = convBnWithData();
    auto policy = std::make_shared<LayerCheckPolicy>();
    policy->maxLayerWeights = maxWeights;
    policy->weightBudget = budget;
    PipelineOptions o = instanceOptions();
    o.validateInstance = [policy](const Graph& graph, const rules::FusionRecord& rec) {
      return validateFoldInstanceWithPolicy(graph, rec, *policy);
    };
    auto r = runPipeline(g, o);
    ASSERT_TRUE(r.isOk());
    ASSERT_EQ(r->fusions.size(), 1u);
    EXPECT_TRUE(r->fusions[0].applied);  // a skipped layer check does not block the fold
    EXPECT_EQ(r->fusions[0].instance.layerVerdict, expected) << maxWeights << " " << budget;
  }
}

TEST(InstanceValidationTest, PlantedBugInstanceIsRefutedEvenIfItsProofWereAdmitted) {
  // Defence in depth: even with the rule gate bypassed, the instance check catches eps dropped.
  Graph g = convBnWithData();
  PipelineOptions o = instanceOptions();
  auto planted = rules::plantedBugRule();
  ASSERT_TRUE(planted.isOk());
  o.extraRules.push_back(std::move(planted).value());
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk());
  ASSERT_GE(r->fusions.size(), 2u);
  bool sawRefused = false, sawGood = false;
  for (const auto& f : r->fusions) {
    if (f.rule == "test-planted-conv-bn-fold-without-eps") {
      EXPECT_FALSE(f.applied);
      EXPECT_EQ(f.instance.verdict, "Refuted");
      // The end-to-end check finds an input that tells the layers apart, independently.
      EXPECT_EQ(f.instance.layerVerdict, "Refuted") << f.instance.layerDetail;
      EXPECT_NE(f.instance.layerDetail.find("channel"), std::string::npos) << f.instance.layerDetail;
      sawRefused = true;
    }
    if (f.rule == "conv-bn-fold" && f.applied) sawGood = true;
  }
  EXPECT_TRUE(sawRefused);
  EXPECT_TRUE(sawGood);
}

// ---- the proof gate ------------------------------------------------------------------------------

ProofOutcome proveWithZ3(const rules::Rule& rule) {
  verify::ProveAllOptions options;
  options.maxK = 2;
  options.checkAxioms = false;
  const verify::RuleResult r = verify::proveRule(rule.proof(), options);
  ProofOutcome out;
  out.verdict = verify::verdictKindName(r.verdict.kind);
  out.message = r.verdict.summary() + " " + r.verdict.counterexample.toString();
  out.admitted = r.ok();
  return out;
}

TEST(RulesTest, PlantedBugIsRefusedAndTheCorrectRuleStillApplies) {
  Graph g = parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules/conv_bn_relu.vfir"));
  auto planted = rules::plantedBugRule();
  ASSERT_TRUE(planted.isOk()) << planted.status().toString();
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = proveWithZ3;
  o.extraRules.push_back(std::move(planted).value());
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  // Canonicalization's rules are proved first (they match first); the planted rule is the first
  // fusion rule tried at the batch norm.
  auto planted_proof = std::find_if(r->proofs.begin(), r->proofs.end(), [](const ProofOutcome& p) {
    return p.rule == "test-planted-conv-bn-fold-without-eps";
  });
  ASSERT_NE(planted_proof, r->proofs.end());
  auto good_proof = std::find_if(r->proofs.begin(), r->proofs.end(),
                                 [](const ProofOutcome& p) { return p.rule == "conv-bn-fold"; });
  EXPECT_LT(planted_proof, good_proof);
  EXPECT_EQ(planted_proof->verdict, "Refuted");
  EXPECT_FALSE(planted_proof->admitted);
  EXPECT_NE(planted_proof->message.find("bn.eps"), std::string::npos) << planted_proof->message;
  for (const auto& p : r->proofs) {
    if (p.rule != planted_proof->rule) EXPECT_TRUE(p.admitted) << p.rule << ": " << p.message;
  }
  for (const auto& f : r->fusions) EXPECT_NE(f.rule, "test-planted-conv-bn-fold-without-eps");
  ASSERT_FALSE(r->fusions.empty());
  EXPECT_EQ(r->fusions[0].rule, "conv-bn-fold");
  EXPECT_EQ(r->fusions[0].proofVerdict, "Proved");
  EXPECT_GE(r->rulesRefused, 1);
}

TEST(RulesTest, UnknownVerdictNeverApplies) {
  Graph g = parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules/conv_bn_relu.vfir"));
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = [](const rules::Rule&) {
    ProofOutcome out;
    out.verdict = "Timeout";
    out.admitted = false;
    return out;
  };
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->fusions.empty());
  EXPECT_EQ(countOps(g, "aten::_native_batch_norm_legit_no_training"), 1u);
  // Canonicalization is a rule with an obligation too: without a Proved verdict it does not apply.
  EXPECT_EQ(countOps(g, rules::kConvOp), 0u);
  EXPECT_EQ(countOps(g, "aten::convolution"), 1u);
  EXPECT_TRUE(r->passChanges.empty());
  for (const auto& p : r->proofs) EXPECT_FALSE(p.admitted) << p.rule;
}

TEST(RulesTest, RefutedInstanceLeavesTheGraphUnchanged) {
  Graph g = parse(readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules/conv_bn_relu.vfir"));
  PipelineOptions o;
  o.verify = VerifyLevel::kInstances;
  o.proveRule = [](const rules::Rule&) {
    ProofOutcome out;
    out.verdict = "Proved";
    out.admitted = true;
    return out;
  };
  o.validateInstance = [](const Graph&, const rules::FusionRecord&) {
    rules::InstanceCheck c;
    c.verdict = "Refuted";
    return c;
  };
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk());
  // conv-bn-fold and the scale/shift fallback are refused; post-ops (exact) still apply.
  EXPECT_EQ(countOps(g, "aten::_native_batch_norm_legit_no_training"), 1u);
  for (const auto& f : r->fusions) {
    if (f.fold.kind != rules::FoldRecord::Kind::kNone) EXPECT_FALSE(f.applied) << f.rule;
  }
}

TEST(RulesTest, PipelineIsDeterministic) {
  const std::string text = readFile(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules/residual_block.vfir");
  Graph a = parse(text), b = parse(text);
  ASSERT_TRUE(runPipeline(a, unverified()).isOk());
  ASSERT_TRUE(runPipeline(b, unverified()).isOk());
  EXPECT_EQ(ir::printGraph(a), ir::printGraph(b));
}

}  // namespace
}  // namespace verifuse::passes
