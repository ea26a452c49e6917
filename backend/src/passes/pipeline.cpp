// The pass manager (see pipeline.h): every pass is a phase of proof-gated rules
// (backend/src/rules/), swept over the nodes in a fixed order.
#include "verifuse/passes/pipeline.h"

#include <map>
#include <set>

#include "verifuse/kernels/int8.h"
#include "verifuse/verify/int_dot.h"

namespace verifuse::passes {

using ir::Graph;
using ir::Node;
using ir::NodeId;

ir::ConstantId addHostConstant(Graph& graph, const std::string& baseName, std::vector<int64_t> sizes,
                               std::vector<float> values) {
  std::set<std::string> names;
  for (const auto& c : graph.constants()) names.insert(c.name);
  std::string name = baseName;
  for (int k = 1; names.count(name); ++k) name = baseName + "_" + std::to_string(k);
  ir::ConstantTensor c;
  c.name = name;
  c.sizes = std::move(sizes);
  c.strides.assign(c.sizes.size(), 1);
  for (size_t k = c.sizes.size(); k-- > 1;) c.strides[k - 1] = c.strides[k] * c.sizes[k];
  c.dtype = ir::DType::Float32;
  if (!values.empty()) {
    auto buffer = std::make_shared<std::vector<float>>(std::move(values));
    c.data = buffer->data();
    c.owner = buffer;
    c.ownerKind = ir::ConstantOwner::HostBuffer;
  }
  return graph.addConstant(std::move(c));
}

namespace {

using rules::Phase;
using rules::Rule;

std::string describeNode(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (rules::isFusedOp(n)) {
    const std::string& ops = ir::namedOperand(n, "post_ops")->s;  // the post-op list's text
    return n.op + (ops.empty() ? "" : "[" + ops + "]");
  }
  return n.qualifiedName();
}

std::string nodeName(const Graph& g, const Node& n) {
  if (n.outputs.empty()) return "";
  const ir::Value& v = g.value(n.outputs[0]);
  return "%" + (v.name.empty() ? std::to_string(v.id) : v.name);
}

/// The rules of one run in order: each phase's extra rules, then its built-in ones.
class RuleList {
 public:
  RuleList(const std::vector<Rule>& extra, const std::vector<Rule>& builtin) {
    for (Phase phase : {Phase::kCanonicalize, Phase::kCanonicalizeViews, Phase::kNoOps, Phase::kDeadCode,
                        Phase::kFusion, Phase::kRowFusion}) {
      for (const std::vector<Rule>* list : {&extra, &builtin}) {
        for (const Rule& r : *list) {
          if (r.phase() != phase) continue;
          order_[&r] = all_.size();
          all_.push_back(&r);
        }
      }
    }
  }
  std::vector<const Rule*> phase(Phase phase) const {
    std::vector<const Rule*> out;
    for (const Rule* r : all_) {
      if (r->phase() == phase) out.push_back(r);
    }
    return out;
  }
  size_t order(const Rule* r) const { return order_.at(r); }

 private:
  std::vector<const Rule*> all_;
  std::map<const Rule*, size_t> order_;
};

class RuleDriver {
 public:
  RuleDriver(const PipelineOptions& options, const RuleList& rules, PipelineResult& result)
      : options_(options), rules_(rules), result_(result) {}

  /// Whether \p rule may apply; proves it on first use.
  const ProofOutcome& gate(const Rule& rule) {
    auto it = outcomes_.find(rule.id());
    if (it != outcomes_.end()) return result_.proofs[it->second];
    ProofOutcome outcome;
    if (options_.verify == VerifyLevel::kOff || !options_.proveRule) {
      outcome.rule = rule.id();
      outcome.verdict = "not-verified";
      outcome.admitted = options_.verify == VerifyLevel::kOff;
      if (!outcome.admitted) outcome.message = "no prover configured";
    } else {
      outcome = options_.proveRule(rule);
      outcome.rule = rule.id();
    }
    result_.proofs.push_back(outcome);
    outcomes_[rule.id()] = result_.proofs.size() - 1;
    return result_.proofs.back();
  }

  /// Tries every rule of \p phase at every node once (backwards for dead code); returns whether
  /// anything was rewritten.
  StatusOr<bool> sweep(Graph& g, Phase phase) {
    const std::vector<const Rule*> ruleList = rules_.phase(phase);
    bool changed = false;
    if (phase == Phase::kDeadCode) {
      for (size_t k = g.nodes().size(); k-- > 0;) {
        VF_ASSIGN_OR_RETURN(bool c, tryRules(g, k, ruleList));
        changed |= c;
      }
    } else {
      for (size_t k = 0; k < g.nodes().size(); ++k) {
        VF_ASSIGN_OR_RETURN(bool c, tryRules(g, k, ruleList));
        changed |= c;
      }
    }
    return changed;
  }

  const std::vector<rules::FusionRecord>& refusedInstances() const { return refusedInstances_; }

  /// The near misses that still describe \p g, in graph order then rule order.
  void finish(const Graph& g) {
    for (const auto& [key, miss] : nearMisses_) {
      const Node& n = g.node(miss.node);
      if (n.erased || n.qualifiedName() != miss.op) continue;
      if (result_.nearMisses.size() < kMaxNearMisses) {
        result_.nearMisses.push_back(miss);
      } else {
        result_.nearMissesOmitted++;
      }
    }
  }

 private:
  StatusOr<bool> tryRules(Graph& g, size_t k, const std::vector<const Rule*>& ruleList) {
    bool changed = false;
    for (const Rule* rule : ruleList) {
      if (g.nodes()[k].erased) break;
      const NodeId id = g.nodes()[k].id;
      if (!rule->anchoredAt(g.nodes()[k])) continue;
      const auto key = std::make_pair(id, rules_.order(rule));
      std::string whyNot;
      auto match = rule->match(g, id, &whyNot);
      if (!match) {
        if (whyNot.empty()) {
          nearMisses_.erase(key);
        } else {
          const Node& n = g.node(id);
          nearMisses_[key] = NearMiss{rule->id(), id, n.qualifiedName(), nodeName(g, n), whyNot};
        }
        continue;
      }
      nearMisses_.erase(key);
      if (refused_.count({rule->id(), id})) continue;
      if (rule->phase() < Phase::kFusion) {
        // Structural rules (canonicalize, no-ops, dead code): gated by their proofs, no record.
        if (!gate(*rule).admitted) {
          refused_.insert({rule->id(), id});
          continue;
        }
        rules::FusionRecord unused;
        VF_RETURN_IF_ERROR(rule->rewrite(g, *match, unused).withContext("rule " + rule->id()));
        result_.rewrites[rule->id()]++;
        changed = true;
        continue;
      }
      result_.rulesMatched++;
      const ProofOutcome& outcome = gate(*rule);
      if (!outcome.admitted) {
        result_.rulesRefused++;
        refused_.insert({rule->id(), id});
        continue;
      }
      rules::FusionRecord record;
      record.rule = rule->id();
      record.proofVerdict = outcome.verdict;
      std::vector<NodeId> touched = {match->anchor};
      if (match->consumer != match->anchor) touched.push_back(match->consumer);
      for (NodeId t : touched) record.nodes.push_back(describeNode(g, t));
      // A rule that folds constants rewrites a copy, validates the instance, then commits: a
      // refuted instance leaves the graph exactly as it was. Post-op mappings change no constants
      // (their proof is the whole story) and rewrite in place.
      const bool validates = options_.verify == VerifyLevel::kInstances && options_.validateInstance &&
                             rule->foldsConstants();
      Graph copy;
      if (validates) copy = g;
      Graph& trial = validates ? copy : g;
      VF_RETURN_IF_ERROR(rule->rewrite(trial, *match, record).withContext("rule " + rule->id()));
      record.result = trial.node(match->consumer).erased ? match->anchor : match->consumer;
      if (options_.verify == VerifyLevel::kInstances && options_.validateInstance &&
          record.fold.kind != rules::FoldRecord::Kind::kNone) {
        record.instance = options_.validateInstance(trial, record);
        if (record.instance.verdict != "Proved") {
          result_.rulesRefused++;
          record.applied = false;
          refused_.insert({rule->id(), id});
          refusedInstances_.push_back(record);
          continue;
        }
      } else if (record.fold.kind == rules::FoldRecord::Kind::kNone) {
        record.instance.verdict = "exact";  // post-op mapping: no constants change
      }
      if (validates) g = std::move(copy);
      result_.rulesApplied++;
      result_.rewrites[rule->id()]++;
      result_.fusions.push_back(std::move(record));
      changed = true;
    }
    return changed;
  }

  const PipelineOptions& options_;
  const RuleList& rules_;
  PipelineResult& result_;
  std::map<std::string, size_t> outcomes_;
  std::set<std::pair<std::string, NodeId>> refused_;
  std::vector<rules::FusionRecord> refusedInstances_;
  std::map<std::pair<NodeId, size_t>, NearMiss> nearMisses_;  ///< (node, rule order) → latest reason
};

/// Runs the sweeps of one pass and re-verifies the graph; returns whether it changed anything.
StatusOr<bool> runPass(Graph& g, RuleDriver& driver, std::initializer_list<Phase> sweeps, PipelineResult* result) {
  bool changed = false;
  for (Phase phase : sweeps) {
    VF_ASSIGN_OR_RETURN(bool c, driver.sweep(g, phase));
    changed |= c;
  }
  const char* name = rules::passName(*sweeps.begin());
  VF_RETURN_IF_ERROR(ir::verifyGraph(g).withContext(std::string("after pass ") + name));
  if (changed && result) result->passChanges[name]++;
  return changed;
}

/// The passes of \p sweeps with their rules applied ungated.
StatusOr<bool> runUngated(Graph& g, std::initializer_list<Phase> sweeps) {
  VF_ASSIGN_OR_RETURN(std::vector<Rule> builtin, pipelineRules());
  PipelineOptions options;
  options.verify = VerifyLevel::kOff;
  PipelineResult result;
  RuleList list({}, builtin);
  RuleDriver driver(options, list, result);
  return runPass(g, driver, sweeps, nullptr);
}

}  // namespace

StatusOr<std::vector<Rule>> pipelineRules() { return rules::builtinRules(); }

StatusOr<std::vector<verify::RuleProof>> pipelineRuleProofs() {
  VF_ASSIGN_OR_RETURN(std::vector<Rule> rules, pipelineRules());
  return rules::proofsOf(rules);
}

StatusOr<std::vector<verify::RuleProof>> kernelArithmeticProofs() {
  return verify::intDotProofs(kernels::int8ArithmeticDeclarations());
}

StatusOr<bool> canonicalizeFusedOps(Graph& g) { return runUngated(g, {Phase::kCanonicalize, Phase::kCanonicalizeViews}); }
StatusOr<bool> removeNoOps(Graph& g) { return runUngated(g, {Phase::kNoOps}); }
StatusOr<bool> eliminateDeadCode(Graph& g) { return runUngated(g, {Phase::kDeadCode}); }

StatusOr<PipelineResult> runPipeline(Graph& graph, const PipelineOptions& options) {
  PipelineResult result;
  VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext("before the pipeline"));
  if (!options.fuse) return result;
  VF_ASSIGN_OR_RETURN(std::vector<Rule> builtin, pipelineRules());
  RuleList rules(options.extraRules, builtin);
  RuleDriver driver(options, rules, result);
  VF_RETURN_IF_ERROR(runPass(graph, driver, {Phase::kCanonicalize, Phase::kCanonicalizeViews}, &result).status());
  VF_RETURN_IF_ERROR(runPass(graph, driver, {Phase::kNoOps}, &result).status());
  VF_RETURN_IF_ERROR(runPass(graph, driver, {Phase::kDeadCode}, &result).status());
  for (int iteration = 0; iteration < options.maxIterations; ++iteration) {
    VF_ASSIGN_OR_RETURN(bool changed, driver.sweep(graph, Phase::kFusion));
    VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext("after the fusion rules"));
    if (changed) result.passChanges["fusion-rules"]++;
    VF_ASSIGN_OR_RETURN(bool cleaned, runPass(graph, driver, {Phase::kNoOps}, &result));
    VF_ASSIGN_OR_RETURN(bool dead, runPass(graph, driver, {Phase::kDeadCode}, &result));
    if (!changed && !cleaned && !dead) break;
  }
  // Row fusion once the post-ops are attached: what is left of the elementwise chains.
  VF_ASSIGN_OR_RETURN(bool rows, driver.sweep(graph, Phase::kRowFusion));
  VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext("after row fusion"));
  if (rows) {
    result.passChanges["row-fusion"]++;
    VF_RETURN_IF_ERROR(runPass(graph, driver, {Phase::kDeadCode}, &result).status());
  }
  for (const rules::FusionRecord& r : driver.refusedInstances()) {
    result.fusions.push_back(r);
  }
  driver.finish(graph);
  return result;
}

}  // namespace verifuse::passes
