// The int8 rules (backend/src/rules/quantized.cpp, issue 17): under the proof gate, the planted
// int8 bug (a dropped source zero point) is Refuted and never applies, and the guards refuse zero
// scales and reduced ranges with a reason. Goldens: tests/golden/rules/{int8_pt2e,neg_int8}.vfir.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/planted_int8.h"
#include "verifuse/rules/rules.h"
#include "verifuse/verify/catalog.h"

namespace fs = std::filesystem;

namespace verifuse::passes {
namespace {

ir::Graph golden(const std::string& name) {
  std::ifstream f(fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules" / name);
  std::stringstream ss;
  ss << f.rdbuf();
  auto g = ir::parseGraph(ss.str());
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

ProofOutcome proveWithZ3(const rules::Rule& rule) {
  verify::ProveAllOptions options;
  options.checkAxioms = false;
  const verify::RuleResult r = verify::proveRule(rule.proof(), options);
  ProofOutcome out;
  out.verdict = verify::verdictKindName(r.verdict.kind);
  out.message = r.verdict.summary() + " " + r.verdict.counterexample.toString();
  out.admitted = r.ok();
  return out;
}

PipelineOptions gated() {
  PipelineOptions o;
  o.verify = VerifyLevel::kRules;
  o.proveRule = proveWithZ3;
  return o;
}

size_t liveOps(const ir::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += !node.erased && node.op == op;
  return n;
}

TEST(Int8RulesTest, PlantedDroppedZeroPointIsRefutedAndNeverApplies) {
  ir::Graph g = golden("int8_pt2e.vfir");
  auto planted = rules::plantedInt8DroppedZeroPointRule();
  ASSERT_TRUE(planted.isOk()) << planted.status().toString();
  PipelineOptions o = gated();
  o.extraRules.push_back(std::move(planted).value());
  auto r = runPipeline(g, o);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  auto proof = std::find_if(r->proofs.begin(), r->proofs.end(),
                            [](const ProofOutcome& p) { return p.rule == "test-planted-int8-dropped-zero-point"; });
  ASSERT_NE(proof, r->proofs.end());
  EXPECT_EQ(proof->verdict, "Refuted") << proof->message;
  EXPECT_FALSE(proof->admitted);
  EXPECT_NE(proof->message.find("x.zero_point"), std::string::npos) << proof->message;
  EXPECT_EQ(r->rewrites.count("test-planted-int8-dropped-zero-point"), 0u);
  // The correct rules rewrote the chain instead.
  EXPECT_EQ(r->rewrites["int8-conv-dequant"], 1);
  EXPECT_EQ(r->rewrites["int8-requantize"], 1);
  EXPECT_EQ(liveOps(g, "verifuse::qconv"), 1u);
  EXPECT_EQ(liveOps(g, "aten::convolution"), 0u);
  auto ids = rules::builtinRules();
  ASSERT_TRUE(ids.isOk());
  for (const rules::Rule& rule : *ids) EXPECT_NE(rule.id(), "test-planted-int8-dropped-zero-point");
}

TEST(Int8RulesTest, RefusedWithReasons) {
  ir::Graph g = golden("neg_int8.vfir");
  auto r = runPipeline(g, gated());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  std::vector<std::string> reasons;
  for (const NearMiss& m : r->nearMisses) reasons.push_back(m.rule + ": " + m.reason);
  auto has = [&](const std::string& needle) {
    return std::any_of(reasons.begin(), reasons.end(), [&](const std::string& s) { return s.find(needle) != std::string::npos; });
  };
  EXPECT_TRUE(has("int8-conv-dequant: scale 0.000000 is zero, negative, NaN or infinite: no integer meaning"));
  EXPECT_EQ(liveOps(g, "verifuse::qconv"), 1u);  // only the well-formed conv
  EXPECT_EQ(liveOps(g, "aten::convolution"), 1u);
  // The reduced-range requantization and the relu between different parameters are not absorbed:
  // the qconv keeps its f32 result, the relu stays; their quantizes run on the quantize kernel
  // (int8-quantize-kernel, which takes any range within the dtype), so no near miss is left there.
  for (const auto& node : g.nodes()) {
    if (!node.erased && node.op == "verifuse::qconv") EXPECT_EQ(node.args[16].kind, ir::Arg::Kind::None);
  }
  EXPECT_EQ(liveOps(g, "aten::relu"), 1u);
  EXPECT_EQ(liveOps(g, "aten::clamp_min"), 0u);
  EXPECT_EQ(liveOps(g, "verifuse::quantize"), 4u);
  EXPECT_EQ(liveOps(g, "quantized_decomposed::quantize_per_tensor"), 1u);  // the zero scale's
}

}  // namespace
}  // namespace verifuse::passes
