// The rules and their proofs, in both directions:
//  - a rule cannot be declared without its obligation (compile time) or without a mutant
//    (declaration time), and the built-in declarations are all complete;
//  - every rule the pipeline uses is Proved (bounded instances too) and every mutant Refuted with a
//    counterexample, and `python -m verifuse prove` (passes::pipelineRuleProofs) proves exactly
//    the pipeline's rules, no more, no fewer;
//  - every rule applies in at least one golden case (tests/golden/rules);
//  - canonicalization, no-op removal and dead code are rules under the proof gate;
//  - near misses: which rule almost applied where, and why.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/verify/catalog.h"

namespace fs = std::filesystem;

namespace verifuse::rules {
namespace {

// ---- declarations ---------------------------------------------------------------------------------

std::optional<Match> noMatch(const ir::Graph&, ir::NodeId, std::string*) { return std::nullopt; }
Status noRewrite(ir::Graph&, const Match&, FusionRecord&) { return Status::ok(); }
verify::Obligation trivial(const verify::sem::DotModel&) {
  verify::ObligationBuilder ob("trivial");
  ob.prove("out", verify::Expr::var("x"), verify::Expr::var("x"));
  return ob.build();
}

template <typename D>
concept DeclarableWithoutObligation = requires {
  D{.id = "x", .summary = "s", .math = "m", .phase = Phase::kFusion, .match = noMatch, .rewrite = noRewrite};
};
template <typename D>
concept DeclarableWithObligation = requires {
  D{.id = "x", .summary = "s", .math = "m", .phase = Phase::kFusion, .match = noMatch, .rewrite = noRewrite,
    .obligation = trivial};
};
// A rule written without its obligation does not compile; with one it does.
static_assert(!DeclarableWithoutObligation<RuleDeclaration>);
static_assert(DeclarableWithObligation<RuleDeclaration>);
// Rules come only from Rule::declare.
static_assert(!std::is_default_constructible_v<Rule>);

RuleDeclaration complete() {
  return {.id = "test-rule",
          .summary = "s",
          .math = "x = x",
          .phase = Phase::kFusion,
          .anchors = {"aten::relu"},
          .match = noMatch,
          .rewrite = noRewrite,
          .obligation = trivial,
          .mutants = {{"wrong", "x = y", trivial}}};
}

TEST(RuleDeclarationTest, IncompleteDeclarationsAreRefused) {
  ASSERT_TRUE(Rule::declare(complete()).isOk());
  RuleDeclaration noMutant = complete();
  noMutant.mutants.clear();
  auto a = Rule::declare(std::move(noMutant));
  ASSERT_FALSE(a.isOk());
  EXPECT_NE(a.status().message().find("no mutant"), std::string::npos) << a.status().toString();

  RuleDeclaration emptyFactory = complete();
  emptyFactory.obligation = verify::ObligationFactory{};  // compiles, but is refused
  EXPECT_FALSE(Rule::declare(std::move(emptyFactory)).isOk());

  RuleDeclaration badId = complete();
  badId.id = "Test_Rule";
  EXPECT_FALSE(Rule::declare(std::move(badId)).isOk());

  RuleDeclaration noMath = complete();
  noMath.math = "";
  EXPECT_FALSE(Rule::declare(std::move(noMath)).isOk());

  RuleDeclaration mutantWithoutFactory = complete();
  mutantWithoutFactory.mutants[0].build = nullptr;
  EXPECT_FALSE(Rule::declare(std::move(mutantWithoutFactory)).isOk());
}

TEST(RuleDeclarationTest, BuiltinRulesAreCompleteAndInPhaseOrder) {
  auto rules = builtinRules();
  ASSERT_TRUE(rules.isOk()) << rules.status().toString();
  EXPECT_GE(rules->size(), 31u);
  std::set<std::string> ids;
  for (size_t k = 0; k < rules->size(); ++k) {
    const Rule& r = (*rules)[k];
    EXPECT_TRUE(ids.insert(r.id()).second) << r.id();
    EXPECT_FALSE(r.proof().mutants.empty()) << r.id();
    EXPECT_FALSE(r.math().empty()) << r.id();
    EXPECT_FALSE(r.summary().empty()) << r.id();
    EXPECT_EQ(r.proof().ruleId, r.id());
    // Only dead code and common subexpressions look at every op.
    if (r.phase() != Phase::kDeadCode && r.id() != "common-subexpression") EXPECT_FALSE(r.anchors().empty()) << r.id();
    if (k) EXPECT_LE((*rules)[k - 1].phase(), r.phase()) << r.id();
  }
  // The two obligations that had no rule before: dropout-eval-identity is the eval-dropout rule
  // now; conv-bn-relu-fold (the composition of conv-bn-fold and conv-relu-postop) is gone.
  EXPECT_TRUE(ids.count("dropout-eval-identity"));
  EXPECT_FALSE(ids.count("conv-bn-relu-fold"));
  for (const char* id :
       {"canonicalize-convolution", "canonicalize-addmm", "canonicalize-mm", "canonicalize-linear",
        "collapse-linear-view-pair", "remove-alias", "remove-clone", "remove-identity-view", "collapse-view-pair",
        "dead-code", "conv-bn-fold", "linear-bn-fold", "bn-to-scale-shift", "per-channel-mul-fold",
        "per-channel-div-fold", "per-channel-add-fold", "residual-add-sum-postop", "residual-add-relu",
        "conv-relu-postop", "conv-elu-postop"}) {
    EXPECT_TRUE(ids.count(id)) << id;
  }
}

TEST(RuleDeclarationTest, TransformerRulesRunInTheirPhases) {
  auto rules = builtinRules();
  ASSERT_TRUE(rules.isOk());
  std::map<std::string, size_t> at;
  for (size_t k = 0; k < rules->size(); ++k) at[(*rules)[k].id()] = k;
  auto phase = [&](const std::string& id) { return (*rules)[at.at(id)].phase(); };
  // Canonicalization rewrites Conv1D, recognizes written-out activations and eager attention
  // (before dead code removes what they no longer read, and before any post-op rule runs).
  for (const char* id : {"canonicalize-addmm-kn", "gelu-tanh-recognize", "gelu-erf-recognize", "silu-recognize",
                         "attention-to-sdpa"}) {
    EXPECT_EQ(phase(id), Phase::kCanonicalize) << id;
  }
  EXPECT_LT(at["canonicalize-addmm"], at["canonicalize-addmm-kn"]);
  EXPECT_EQ(phase("remove-dense-clone"), Phase::kNoOps);
  // Projections are concatenated first in the fusion phase: after the N-d linears' views are
  // collapsed, before anything attaches to a linear.
  EXPECT_EQ(phase("qkv-concat"), Phase::kFusion);
  for (const auto& [id, k] : at) {
    if (phase(id) == Phase::kFusion && id != "qkv-concat") EXPECT_LT(at["qkv-concat"], k) << id;
  }
  // Row fusion runs last, in its own pass: the linear/conv post-ops are attached by then.
  EXPECT_EQ(phase("row-fusion"), Phase::kRowFusion);
  for (const auto& [id, k] : at) {
    if (id != "row-fusion") EXPECT_LT(k, at["row-fusion"]) << id;
  }
}

// ---- proofs, both directions ----------------------------------------------------------------------

const verify::ProveReport& report() {
  static const verify::ProveReport r = [] {
    auto proofs = passes::pipelineRuleProofs();
    EXPECT_TRUE(proofs.isOk());
    return verify::proveAll(proofs.isOk() ? *proofs : std::vector<verify::RuleProof>{});
  }();
  return r;
}

std::vector<std::string> pipelineIds() {
  std::vector<std::string> ids;
  auto rules = passes::pipelineRules();
  if (rules.isOk()) {
    for (const Rule& r : *rules) ids.push_back(r.id());
  }
  return ids;
}

TEST(RuleProofsTest, ProveProvesExactlyThePipelinesRules) {
  // `python -m verifuse prove` proves pipelineRuleProofs(): the same rules, same order, nothing else.
  std::vector<std::string> proved;
  for (const verify::RuleResult& r : report().rules) proved.push_back(r.ruleId);
  EXPECT_EQ(proved, pipelineIds());
  auto rules = builtinRules();
  ASSERT_TRUE(rules.isOk());
  EXPECT_EQ(pipelineIds().size(), rules->size());
}

TEST(RuleProofsTest, EveryRuleProvedAndEveryMutantRefutedWithACounterexample) {
  size_t mutants = 0, withDot = 0;
  for (const verify::RuleResult& r : report().rules) {
    EXPECT_EQ(r.verdict.kind, verify::VerdictKind::Proved) << r.ruleId << ": " << r.verdict.summary();
    EXPECT_FALSE(r.mutants.empty()) << r.ruleId << " has no mutant";
    if (!r.bounded.empty()) {
      ++withDot;
      EXPECT_EQ(r.bounded.size(), 4u) << r.ruleId;
      for (const auto& i : r.bounded) EXPECT_TRUE(i.verdict.proved()) << r.ruleId << " " << i.model;
    }
    for (const verify::MutantResult& m : r.mutants) {
      ++mutants;
      EXPECT_TRUE(m.killed()) << r.ruleId << "/" << m.name << ": " << m.verdict.summary();
      EXPECT_EQ(m.verdict.messageClass, verify::MessageClass::ValueMismatch) << r.ruleId << "/" << m.name;
      EXPECT_NE(m.verdict.counterexample.sourceValue, m.verdict.counterexample.targetValue) << r.ruleId << "/" << m.name;
    }
    EXPECT_TRUE(r.ok()) << r.ruleId;
  }
  EXPECT_GE(mutants, 45u);
  EXPECT_GE(withDot, 5u);
  for (const auto& a : report().axioms) EXPECT_TRUE(a.verdict.proved()) << a.axiom << " " << a.model;
  EXPECT_TRUE(report().ok()) << report().toText();
  std::printf("%s", report().toText().c_str());
}

const verify::MutantResult* findMutant(const std::string& rule, const std::string& mutant) {
  for (const verify::RuleResult& r : report().rules) {
    if (r.ruleId != rule) continue;
    for (const verify::MutantResult& m : r.mutants) {
      if (m.name == mutant) return &m;
    }
  }
  return nullptr;
}

TEST(RuleProofsTest, StructuralRulesHaveTheirMutantsRefuted) {
  // The bugs canonicalization, no-op removal and dead code could have, each Refuted.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"canonicalize-convolution", "transposed-conv-taken"},
      {"canonicalize-convolution", "groups-dropped"},
      {"canonicalize-convolution", "padding-dilation-swapped"},
      {"canonicalize-addmm", "bias-dropped"},
      {"canonicalize-addmm", "weight-not-transposed"},
      {"canonicalize-addmm", "beta-alpha-unchecked"},
      {"canonicalize-mm", "weight-not-transposed"},
      {"canonicalize-linear", "bias-dropped"},
      {"canonicalize-linear", "weight-transposed"},
      {"collapse-linear-view-pair", "permute-collapsed-as-view"},
      {"collapse-linear-view-pair", "output-view-unchecked"},
      {"remove-alias", "permute-taken-as-alias"},
      {"remove-clone", "clone-dropped-before-view"},
      {"dropout-eval-identity", "dropout-training-mode"},
      {"remove-identity-view", "shape-compared-by-numel"},
      {"collapse-view-pair", "permute-collapsed-as-view"},
      {"dead-code", "node-with-user-erased"},
      {"cat-skip-empty", "non-empty-input-dropped"},
      {"sdpa-grouped-kv", "kv-heads-interleaved"},
      {"sdpa-grouped-kv", "repeat-on-another-axis"},
      {"common-subexpression", "different-op-merged"},
      {"common-subexpression", "different-args-merged"},
      {"common-subexpression", "random-op-merged"},
      {"common-subexpression", "graph-output-merged"},
      {"remove-dense-clone", "overlapping-input-clone-dropped"},
      // The transformer rules.
      {"canonicalize-addmm-kn", "weight-not-transposed"},
      {"canonicalize-addmm-kn", "bias-dropped"},
      {"canonicalize-addmm-kn", "beta-alpha-unchecked"},
      {"gelu-tanh-recognize", "half-missing"},
      {"gelu-tanh-recognize", "cubic-coefficient-wrong"},
      {"gelu-tanh-recognize", "erf-instead-of-tanh"},
      {"gelu-erf-recognize", "division-form-accepted"},
      {"silu-recognize", "sigmoid-of-other-operand"},
      {"attention-to-sdpa", "scale-one-over-d"},
      {"attention-to-sdpa", "softmax-wrong-axis"},
      {"attention-to-sdpa", "mask-after-softmax"},
      {"attention-to-sdpa", "key-transpose-dropped"},
      {"attention-to-sdpa", "div-scale-not-inverted"},
      {"attention-to-sdpa", "second-mask-dropped"},
      {"qkv-concat", "bias-of-another-projection"},
      {"qkv-concat", "column-offset-off-by-one"},
      // Row fusion (the translation table and the composed norms, softmax, rotary).
      {"row-fusion", "rms-eps-dropped"},
      {"row-fusion", "rms-eps-outside-rsqrt"},
      {"row-fusion", "reduction-wrong-axis"},
      {"row-fusion", "rotary-sign-flipped"},
      {"row-fusion", "rotary-halves-swapped"},
      {"row-fusion", "softmax-wrong-axis"},
      {"row-fusion", "mask-after-softmax"},
      {"row-fusion", "gelu-erf-tanh-swapped"},
      {"row-fusion", "layer-norm-without-mean"},
  };
  for (const auto& [rule, mutant] : expected) {
    const verify::MutantResult* m = findMutant(rule, mutant);
    ASSERT_NE(m, nullptr) << rule << "/" << mutant;
    EXPECT_TRUE(m->killed()) << rule << "/" << mutant << ": " << m->verdict.summary();
  }
  // Counterexamples speak IR: the dead node's user reads a dangling value.
  const verify::MutantResult* dead = findMutant("dead-code", "node-with-user-erased");
  std::set<std::string> names;
  for (const auto& [n, v] : dead->verdict.counterexample.values) names.insert(n);
  EXPECT_TRUE(names.count("erased.output")) << dead->verdict.counterexample.toString();
  EXPECT_TRUE(names.count("node.output_has_user"));
}

TEST(RuleProofsTest, BiasNotRescaledCounterexampleNamesIrVariables) {
  const verify::MutantResult* m = findMutant("conv-bn-fold", "bias-not-rescaled");
  ASSERT_NE(m, nullptr);
  std::set<std::string> names;
  for (const auto& [n, v] : m->verdict.counterexample.values) names.insert(n);
  EXPECT_TRUE(names.count("bn.running_mean[o]")) << m->verdict.counterexample.toString();
  EXPECT_TRUE(names.count("conv.bias[o]"));
  EXPECT_TRUE(names.count("bn.eps"));
}

TEST(RuleProofsTest, PlantedBugIsRefutedAndIsNotABuiltinRule) {
  auto planted = plantedBugRule();
  ASSERT_TRUE(planted.isOk()) << planted.status().toString();
  verify::ProveAllOptions options;
  options.maxK = 2;
  const verify::RuleResult r = verify::proveRule(planted->proof(), options);
  EXPECT_EQ(r.verdict.kind, verify::VerdictKind::Refuted);
  EXPECT_FALSE(r.ok());
  const auto ids = pipelineIds();
  EXPECT_EQ(std::find(ids.begin(), ids.end(), planted->id()), ids.end());
  EXPECT_EQ(plantedBugProof().ruleId, planted->id());
}

// ---- every rule applies somewhere -----------------------------------------------------------------

std::string readFile(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

passes::PipelineOptions recording(std::vector<std::string>* consulted) {
  passes::PipelineOptions o;
  o.verify = passes::VerifyLevel::kRules;
  o.proveRule = [consulted](const Rule& r) {
    consulted->push_back(r.id());
    passes::ProofOutcome out;
    out.verdict = "Proved";
    out.admitted = true;
    return out;
  };
  return o;
}

TEST(RuleCoverageTest, EveryRuleAppliesInSomeGoldenCase) {
  const fs::path dir = fs::path(VERIFUSE_SOURCE_DIR) / "tests/golden/rules";
  std::set<std::string> applied, consulted;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".vfir" || name.find(".after.") != std::string::npos) continue;
    auto g = ir::parseGraph(readFile(e.path()));
    ASSERT_TRUE(g.isOk()) << name << ": " << g.status().toString();
    std::vector<std::string> asked;
    auto r = passes::runPipeline(*g, recording(&asked));
    ASSERT_TRUE(r.isOk()) << name << ": " << r.status().toString();
    for (const auto& [rule, n] : r->rewrites) applied.insert(rule);
    consulted.insert(asked.begin(), asked.end());
  }
  const auto ids = pipelineIds();
  // Every rule the pipeline consulted is one `prove` proves, and every such rule applies somewhere.
  for (const std::string& id : consulted) EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  for (const std::string& id : ids) EXPECT_TRUE(applied.count(id)) << id << " applies in no golden case";
}

// ---- structural rules under the proof gate --------------------------------------------------------

ir::Graph parse(const std::string& text) {
  auto g = ir::parseGraph(text);
  EXPECT_TRUE(g.isOk()) << g.status().toString();
  return std::move(g).value();
}

size_t countOps(const ir::Graph& g, const std::string& op) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += !node.erased && node.op == op;
  return n;
}

const char* kAddmmGraph = R"(graph(%x : Tensor[4, 8]) {
  %0 : Tensor[8, 3] = aten::permute($w, [1, 0])
  %1 : Tensor[4, 3] = aten::addmm($b, %x, %0, 1, 1)
  %2 : Tensor[4, 3] = aten::detach(%1)
  %3 : Tensor[4, 3] = aten::relu(%2)
  return (%3)
}
constants {
  $w : f32[3, 8]
  $b : f32[3]
}
)";

TEST(StructuralRulesTest, CanonicalizationAppliesOnlyWhenItsProofAdmitsIt) {
  for (bool admitAddmm : {true, false}) {
    ir::Graph g = parse(kAddmmGraph);
    passes::PipelineOptions o;
    o.verify = passes::VerifyLevel::kRules;
    o.proveRule = [admitAddmm](const Rule& r) {
      passes::ProofOutcome out;
      out.admitted = admitAddmm || r.id() != "canonicalize-addmm";
      out.verdict = out.admitted ? "Proved" : "Refuted";
      return out;
    };
    auto r = passes::runPipeline(g, o);
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_EQ(countOps(g, "aten::addmm"), admitAddmm ? 0u : 1u);
    EXPECT_EQ(countOps(g, kLinearOp), admitAddmm ? 1u : 0u);
    EXPECT_EQ(countOps(g, "aten::detach"), 0u);  // remove-alias is admitted either way
    EXPECT_EQ(r->rewrites.count("canonicalize-addmm"), admitAddmm ? 1u : 0u);
    EXPECT_EQ(r->rewrites.at("remove-alias"), 1);
    EXPECT_EQ(r->passChanges.count("canonicalize"), admitAddmm ? 1u : 0u);
    // Each gated rule is proved once, in first-match order: canonicalization first.
    ASSERT_FALSE(r->proofs.empty());
    EXPECT_EQ(r->proofs[0].rule, "canonicalize-addmm");
  }
}

TEST(StructuralRulesTest, UngatedPassesStillRunTheirRules) {
  ir::Graph g = parse(kAddmmGraph);
  auto changed = passes::canonicalizeFusedOps(g);
  ASSERT_TRUE(changed.isOk());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(countOps(g, kLinearOp), 1u);
  auto noOps = passes::removeNoOps(g);
  ASSERT_TRUE(noOps.isOk());
  EXPECT_TRUE(*noOps);
  auto dead = passes::eliminateDeadCode(g);  // the permute is dead now
  ASSERT_TRUE(dead.isOk());
  EXPECT_TRUE(*dead);
  EXPECT_EQ(countOps(g, "aten::permute"), 0u);
  auto again = passes::eliminateDeadCode(g);
  ASSERT_TRUE(again.isOk());
  EXPECT_FALSE(*again);
}

// ---- near misses ------------------------------------------------------------------------------------

passes::PipelineOptions unverified() {
  passes::PipelineOptions o;
  o.verify = passes::VerifyLevel::kOff;
  return o;
}

TEST(NearMissTest, GuardFailuresAreListedWithTheirReasons) {
  ir::Graph g = parse(R"(graph(%x : Tensor[1, 2, 4, 4], %t : Tensor[2, 3]) {
  %0 : Tensor[1, 3, 4, 4] = aten::convolution(%x, $w, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)
  %1 : Tensor[1, 3, 4, 4] = aten::clamp(%0, 2.0, 1.0)
  %2 : Tensor[2, 3] = aten::clone(%t, None)
  %3 : Tensor[2, 3] = aten::sigmoid(%2)
  %4 : Tensor[1, 3, 4, 4] = aten::convolution(%1, $w2, None, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)
  %5 : Tensor[1, 3, 4, 4], %6 : Tensor, %7 : Tensor = aten::_native_batch_norm_legit_no_training(%4, $g, $b, $m, $v, 0.1, 1e-05)
  %8 : Tensor[1, 3, 4, 4] = aten::relu(%5)
  return (%8, %3)
}
constants {
  $w : f32[3, 2, 1, 1]
  $w2 : f32[3, 3, 1, 1]
  $g : f32[3]
  $b : f32[3]
  $m : f32[3]
  $v : f32[3]
}
)");
  auto r = passes::runPipeline(g, unverified());
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  std::vector<std::string> seen;
  for (const passes::NearMiss& m : r->nearMisses) {
    seen.push_back(m.rule + " @ " + m.op + ": " + m.reason);
    EXPECT_FALSE(m.name.empty());
    EXPECT_FALSE(g.node(m.node).erased);
  }
  const std::vector<std::string> expected = {
      "conv-clamp-postop @ aten::clamp: clamp with min > max (torch returns max, oneDNN's clip min)",
      "remove-clone @ aten::clone: a reader (aten::sigmoid) may depend on the clone's layout",
      "remove-dense-clone @ aten::clone: the clone's input is not known to be a fresh dense tensor (a view may "
      "rely on the copy's layout)",
  };
  // conv-bn-fold and conv-relu-postop applied in the end: no near miss left for them.
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(r->nearMissesOmitted, 0);
}

TEST(NearMissTest, ListIsBoundedAndDeterministic) {
  std::string text = "graph(%x : Tensor[2, 3]) {\n";
  const int n = 250;
  for (int k = 0; k < n; ++k) {
    text += "  %" + std::to_string(2 * k) + " : Tensor[2, 3] = aten::clone(" +
            (k ? "%" + std::to_string(2 * k - 1) : std::string("%x")) + ", memory_format(0))\n";
    text += "  %" + std::to_string(2 * k + 1) + " : Tensor[2, 3] = aten::sigmoid(%" + std::to_string(2 * k) + ")\n";
  }
  text += "  return (%" + std::to_string(2 * n - 1) + ")\n}\n";
  ir::Graph a = parse(text), b = parse(text);
  auto ra = passes::runPipeline(a, unverified());
  auto rb = passes::runPipeline(b, unverified());
  ASSERT_TRUE(ra.isOk() && rb.isOk());
  ASSERT_EQ(ra->nearMisses.size(), passes::kMaxNearMisses);
  EXPECT_EQ(ra->nearMissesOmitted, n - static_cast<int>(passes::kMaxNearMisses));
  for (size_t k = 0; k < ra->nearMisses.size(); ++k) {
    EXPECT_EQ(ra->nearMisses[k].rule, "remove-clone");
    EXPECT_EQ(ra->nearMisses[k].node, rb->nearMisses[k].node);
    EXPECT_EQ(ra->nearMisses[k].reason, rb->nearMisses[k].reason);
    if (k) EXPECT_LT(ra->nearMisses[k - 1].node, ra->nearMisses[k].node);  // graph order
  }
}

}  // namespace
}  // namespace verifuse::rules
