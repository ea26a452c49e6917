// Rule::declare (a rule is its whole declaration, or nothing) and the built-in rules in pipeline
// order: the only list of rules there is. `python -m verifuse prove` proves proofsOf(builtinRules()).
#include <algorithm>
#include <set>

#include "rules/families.h"
#include "verifuse/rules/planted_int8.h"

namespace verifuse::rules {

const char* passName(Phase phase) {
  switch (phase) {
    case Phase::kCanonicalize:
    case Phase::kCanonicalizeViews: return "canonicalize";
    case Phase::kNoOps: return "remove-no-ops";
    case Phase::kDeadCode: return "dead-code";
    case Phase::kFusion: return "fusion-rules";
    case Phase::kRowFusion: return "row-fusion";
  }
  return "?";
}

StatusOr<Rule> Rule::declare(RuleDeclaration d) {
  Rule r;
  r.proof_.ruleId = d.id.get();
  r.proof_.math = d.math.get();
  r.proof_.build = d.obligation.get();
  r.proof_.usesDot = d.usesDot;
  r.proof_.mutants = std::move(d.mutants);
  r.summary_ = d.summary.get();
  r.phase_ = d.phase.get();
  r.anchors_ = std::move(d.anchors);
  r.match_ = d.match.get();
  r.rewrite_ = d.rewrite.get();
  r.foldsConstants_ = d.foldsConstants;
  // The obligation side: id, math, factory, mutants (shared with the prover's own check).
  VF_RETURN_IF_ERROR(verify::checkRuleProofs({r.proof_}));
  const std::string who = "rule '" + r.id() + "'";
  if (r.summary_.empty()) return invalidArgument(who + " has no summary");
  if (!r.match_ || !r.rewrite_) return invalidArgument(who + " has no match or rewrite function");
  for (const std::string& op : r.anchors_) {
    if (op.empty()) return invalidArgument(who + " has an empty anchor op");
  }
  return r;
}

bool Rule::anchoredAt(const ir::Node& n) const {
  return anchors_.empty() || std::find(anchors_.begin(), anchors_.end(), n.op) != anchors_.end();
}

StatusOr<std::vector<Rule>> builtinRules() {
  namespace f = families;
  std::vector<RuleDeclaration> all;
  for (auto family : {f::canonicalizeOps, f::activationRecognition, f::attentionRecognition, f::canonicalizeViews,
                      f::noOps, f::attentionGroupedKv, f::commonSubexpressions, f::deadCode,
                      // Fusion: projections concatenated before anything attaches to them; the
                      // int8 chains (their ops are never verifuse::conv/linear, so the float rules
                      // below cannot take them).
                      f::qkvConcat, f::quantizedInt8, f::batchNormFolds,
                      f::perChannelFolds, f::residualAdd, f::activationPostOps,
                      // Last: a batch norm nothing could absorb becomes one per-channel multiply-add.
                      f::batchNormScaleShift,
                      // Its own pass after the fusion fixpoint: the post-ops are attached by then.
                      f::rowFusion}) {
    for (RuleDeclaration& d : family()) all.push_back(std::move(d));
  }
  std::vector<Rule> rules;
  std::set<std::string> ids;
  for (RuleDeclaration& d : all) {
    VF_ASSIGN_OR_RETURN(Rule r, Rule::declare(std::move(d)));
    if (!ids.insert(r.id()).second) return invalidArgument("rule '" + r.id() + "' is declared twice");
    rules.push_back(std::move(r));
  }
  // The pass manager runs the phases in order; a family listed out of phase order would be a bug.
  for (size_t k = 1; k < rules.size(); ++k) {
    if (rules[k].phase() < rules[k - 1].phase()) {
      return internalError("rule '" + rules[k].id() + "' is listed after a later phase's rule");
    }
  }
  return rules;
}

std::vector<verify::RuleProof> proofsOf(const std::vector<Rule>& rules) {
  std::vector<verify::RuleProof> proofs;
  proofs.reserve(rules.size());
  for (const Rule& r : rules) proofs.push_back(r.proof());
  return proofs;
}

StatusOr<Rule> plantedBugRule() { return Rule::declare(families::plantedBatchNormFoldWithoutEps()); }

StatusOr<Rule> plantedBugRule(const std::vector<verify::RuleProof>&) { return plantedBugRule(); }

StatusOr<Rule> plantedAttentionBugRule() { return Rule::declare(families::plantedAttentionScaleOneOverD()); }

StatusOr<Rule> plantedInt8DroppedZeroPointRule() { return Rule::declare(families::plantedInt8DroppedZeroPoint()); }

verify::RuleProof plantedBugProof() {
  auto rule = plantedBugRule();
  return rule.isOk() ? rule->proof() : verify::RuleProof{};
}

}  // namespace verifuse::rules
