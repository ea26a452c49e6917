// The pass pipeline (see pipeline.h): canonicalization, no-op removal, proof-gated fusion rules,
// dead-code elimination.
#include "verifuse/passes/pipeline.h"

#include <chrono>
#include <set>

#include "rules/graph_util.h"

namespace verifuse::passes {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
namespace u = rules::util;

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

bool isIntList(const Arg& a, std::initializer_list<int64_t> expected) {
  auto v = a.asIntList();
  return v.isOk() && *v == std::vector<int64_t>(expected);
}

/// W[N, K] for a transposed constant weight: permute(W, [1, 0]) or t(W).
const ir::ConstantTensor* transposedWeight(const Graph& g, const Arg& a, Arg* weight) {
  const Node* p = u::producerOf(g, a);
  if (!p) return nullptr;
  const bool permute = p->op == "aten::permute" && p->args.size() == 2 && isIntList(p->args[1], {1, 0});
  const bool t = (p->op == "aten::t" || p->op == "aten::numpy_T") && p->args.size() == 1;
  if (!permute && !t) return nullptr;
  const ir::ConstantTensor* w = u::f32Constant(g, p->args[0]);
  if (!w || w->sizes.size() != 2) return nullptr;
  *weight = p->args[0];
  return w;
}

bool validBias(const Graph& g, const Arg& b, int64_t n) {
  if (b.kind == Arg::Kind::None) return true;
  const ir::ConstantTensor* c = u::f32Constant(g, b);
  return c && c->sizes.size() == 1 && c->sizes[0] == n;
}

/// view / reshape / _unsafe_view of a graph value to a size list.
bool isView(const Node* n) {
  return n && (n->op == "aten::view" || n->op == "aten::reshape" || n->op == "aten::_unsafe_view") &&
         n->args.size() == 2 && n->args[0].isValue();
}

void toLinear(Node& n, Arg x, Arg w, Arg b) {
  n.op = rules::kLinearOp;
  n.overload = "";
  n.args = {std::move(x), std::move(w), std::move(b), Arg::string("")};
}

}  // namespace

StatusOr<bool> canonicalizeFusedOps(Graph& g) {
  bool changed = false;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& n = g.nodes()[k];
    if (n.erased) continue;
    if (n.op == "aten::convolution" && n.args.size() == 9 && n.args[0].isValue()) {
      const ir::ConstantTensor* w = u::f32Constant(g, n.args[1]);
      const bool transposed = n.args[6].kind == Arg::Kind::Bool && n.args[6].i != 0;
      auto stride = n.args[3].asIntList(), padding = n.args[4].asIntList(), dilation = n.args[5].asIntList();
      if (!w || transposed || w->sizes.size() < 3 || w->sizes.size() > 5 || !stride.isOk() || !padding.isOk() ||
          !dilation.isOk() || n.args[8].kind != Arg::Kind::Int || !validBias(g, n.args[2], w->sizes[0])) {
        continue;
      }
      Node& m = g.mutableNode(n.id);
      std::vector<Arg> args = {m.args[0], m.args[1], m.args[2], m.args[3], m.args[4], m.args[5], m.args[8],
                               Arg::string("")};
      m.op = rules::kConvOp;
      m.overload = "";
      m.args = std::move(args);
      changed = true;
    } else if (n.op == "aten::addmm" && n.args.size() == 5 && n.args[1].isValue()) {
      Arg weight;
      const ir::ConstantTensor* w = transposedWeight(g, n.args[2], &weight);
      auto beta = u::numberArg(n.args[3]), alpha = u::numberArg(n.args[4]);
      if (!w || !beta || !alpha || *beta != 1.0 || *alpha != 1.0 || !validBias(g, n.args[0], w->sizes[0]) ||
          n.args[0].kind == Arg::Kind::None) {
        continue;
      }
      Node& m = g.mutableNode(n.id);
      toLinear(m, m.args[1], weight, m.args[0]);
      changed = true;
    } else if (n.op == "aten::mm" && n.args.size() == 2 && n.args[0].isValue()) {
      Arg weight;
      if (!transposedWeight(g, n.args[1], &weight)) continue;
      Node& m = g.mutableNode(n.id);
      toLinear(m, m.args[0], weight, Arg::none());
      changed = true;
    } else if (n.op == "aten::linear" && n.args.size() == 3 && n.args[0].isValue()) {
      const ir::ConstantTensor* w = u::f32Constant(g, n.args[1]);
      if (!w || w->sizes.size() != 2 || !validBias(g, n.args[2], w->sizes[0])) continue;
      Node& m = g.mutableNode(n.id);
      toLinear(m, m.args[0], m.args[1], m.args[2]);
      changed = true;
    }
  }
  // An N-d linear is traced as view(x, [M, K]) -> linear -> view(y, [..., N]); verifuse::linear
  // takes x[..., K] directly, so the flattening view pair disappears and post-ops can follow.
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& lin = g.nodes()[k];
    if (lin.erased || lin.op != rules::kLinearOp || !lin.args[rules::kLinearPostOpsArg].s.empty()) continue;
    const Node* flatten = u::producerOf(g, lin.args[0]);
    if (!isView(flatten) || !u::hasSingleUse(g, lin.outputs[0])) continue;
    const auto* xShape = u::staticShape(g, u::valueOf(flatten->args[0]));
    const auto users = g.users(lin.outputs[0]);
    const Node* unflatten = &g.node(users[0]);
    if (!xShape || xShape->size() < 2 || !isView(unflatten)) continue;
    auto outSize = unflatten->args[1].asIntList();
    const int64_t n = g.constants()[static_cast<size_t>(lin.args[1].i)].sizes[0];
    std::vector<int64_t> expected(xShape->begin(), xShape->end() - 1);
    expected.push_back(n);
    if (!outSize.isOk() || *outSize != expected) continue;
    const ValueId x = u::valueOf(flatten->args[0]);
    const ValueId unflattened = unflatten->outputs[0];
    const NodeId unflattenId = unflatten->id;
    Node& m = g.mutableNode(lin.id);
    m.args[0] = Arg::value(x);
    g.mutableValue(m.outputs[0]).setShape(expected);
    g.replaceAllUses(unflattened, m.outputs[0]);
    g.eraseNode(unflattenId);
    changed = true;
  }
  return changed;
}

StatusOr<bool> removeNoOps(Graph& g) {
  bool changed = false;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const Node& n = g.nodes()[k];
    if (n.erased || n.outputs.size() != 1 || n.args.empty() || !n.args[0].isValue()) continue;
    const ValueId out = n.outputs[0];
    // A graph output must stay a fresh tensor (eager returns one), so no-ops feeding outputs stay.
    if (g.isGraphOutput(out)) continue;
    ValueId replacement = ir::kNoValue;
    const ValueId in = u::valueOf(n.args[0]);
    if (n.op == "aten::detach" || n.op == "aten::alias" || n.op == "aten::lift_fresh_copy") {
      replacement = in;
    } else if (n.op == "aten::clone") {
      // clone fixes strides (x.contiguous() is a clone with memory_format=contiguous) and a later
      // view may rely on them: drop it only when every reader chooses its own output layout.
      bool freshReaders = true;
      for (NodeId user : g.users(out)) {
        const Node& r = g.node(user);
        // Element-wise ops keep their input's strides, so only conv/linear (which choose their own
        // output layout) qualify.
        freshReaders &= rules::isFusedOp(r);
      }
      if (freshReaders) replacement = in;
    } else if (n.op == "aten::dropout" && n.args.size() == 3 && n.args[2].kind == Arg::Kind::Bool && n.args[2].i == 0) {
      replacement = in;
    } else if (isView(&n)) {
      auto size = n.args[1].asIntList();
      if (!size.isOk()) continue;
      // view(x, x.shape) is x; view(view(y, s1), y.shape) is y.
      const auto* inShape = u::staticShape(g, in);
      if (inShape && *inShape == *size) {
        replacement = in;
      } else {
        const Node* p = u::producerOf(g, n.args[0]);
        if (isView(p)) {
          const auto* srcShape = u::staticShape(g, u::valueOf(p->args[0]));
          if (srcShape && *srcShape == *size) replacement = u::valueOf(p->args[0]);
        }
      }
    }
    if (replacement == ir::kNoValue) continue;
    g.replaceAllUses(out, replacement);
    g.eraseNode(n.id);
    changed = true;
  }
  return changed;
}

StatusOr<bool> eliminateDeadCode(Graph& g) {
  bool changed = false;
  for (size_t k = g.nodes().size(); k-- > 0;) {
    const Node& n = g.nodes()[k];
    if (n.erased) continue;
    bool live = false;
    for (ValueId out : n.outputs) live |= g.isGraphOutput(out) || !g.users(out).empty();
    if (live) continue;
    g.eraseNode(n.id);
    changed = true;
  }
  return changed;
}

namespace {

std::string describeNode(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (rules::isFusedOp(n)) {
    std::string ops = n.args[rules::postOpsArgIndex(n)].s;
    return n.op + (ops.empty() ? "" : "[" + ops + "]");
  }
  return n.qualifiedName();
}

class RuleDriver {
 public:
  RuleDriver(const PipelineOptions& options, PipelineResult& result) : options_(options), result_(result) {}

  /// Whether \p rule may apply; proves it on first use.
  const ProofOutcome& gate(const rules::Rule& rule) {
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

  /// Tries every rule at every node once; returns whether anything was rewritten.
  StatusOr<bool> sweep(Graph& g, const std::vector<const rules::Rule*>& ruleList) {
    bool changed = false;
    for (size_t k = 0; k < g.nodes().size(); ++k) {
      for (const rules::Rule* rule : ruleList) {
        if (g.nodes()[k].erased) break;
        auto match = rule->match(g, g.nodes()[k].id);
        if (!match || refused_.count({rule->id(), g.nodes()[k].id})) continue;
        result_.rulesMatched++;
        const ProofOutcome& outcome = gate(*rule);
        if (!outcome.admitted) {
          result_.rulesRefused++;
          refused_.insert({rule->id(), g.nodes()[k].id});
          continue;
        }
        rules::FusionRecord record;
        record.rule = rule->id();
        record.proofVerdict = outcome.verdict;
        std::vector<NodeId> touched = {match->anchor};
        if (match->consumer != match->anchor) touched.push_back(match->consumer);
        for (NodeId id : touched) record.nodes.push_back(describeNode(g, id));
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
            refused_.insert({rule->id(), g.nodes()[k].id});
            refusedInstances_.push_back(record);
            continue;
          }
        } else if (record.fold.kind == rules::FoldRecord::Kind::kNone) {
          record.instance.verdict = "exact";  // post-op mapping: no constants change
        }
        if (validates) g = std::move(copy);
        result_.rulesApplied++;
        result_.fusions.push_back(std::move(record));
        changed = true;
      }
    }
    return changed;
  }

  const std::vector<rules::FusionRecord>& refusedInstances() const { return refusedInstances_; }

 private:
  const PipelineOptions& options_;
  PipelineResult& result_;
  std::map<std::string, size_t> outcomes_;
  std::set<std::pair<std::string, NodeId>> refused_;
  std::vector<rules::FusionRecord> refusedInstances_;
};

}  // namespace

StatusOr<PipelineResult> runPipeline(Graph& graph, const PipelineOptions& options) {
  PipelineResult result;
  VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext("before the pipeline"));
  if (!options.fuse) return result;
  auto runPass = [&](const char* name, StatusOr<bool> (*pass)(Graph&)) -> StatusOr<bool> {
    VF_ASSIGN_OR_RETURN(bool changed, pass(graph));
    VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext(std::string("after pass ") + name));
    if (changed) result.passChanges[name]++;
    return changed;
  };
  VF_RETURN_IF_ERROR(runPass("canonicalize", canonicalizeFusedOps).status());
  VF_RETURN_IF_ERROR(runPass("remove-no-ops", removeNoOps).status());
  VF_RETURN_IF_ERROR(runPass("dead-code", eliminateDeadCode).status());

  VF_ASSIGN_OR_RETURN(std::vector<rules::Rule> builtin, rules::fusionRules(verify::builtinRuleProofs()));
  std::vector<const rules::Rule*> ruleList;
  for (const rules::Rule& r : options.extraRules) ruleList.push_back(&r);
  for (const rules::Rule& r : builtin) ruleList.push_back(&r);
  RuleDriver driver(options, result);
  for (int iteration = 0; iteration < options.maxIterations; ++iteration) {
    VF_ASSIGN_OR_RETURN(bool changed, driver.sweep(graph, ruleList));
    VF_RETURN_IF_ERROR(ir::verifyGraph(graph).withContext("after the fusion rules"));
    if (changed) result.passChanges["fusion-rules"]++;
    VF_ASSIGN_OR_RETURN(bool cleaned, runPass("remove-no-ops", removeNoOps));
    VF_ASSIGN_OR_RETURN(bool dead, runPass("dead-code", eliminateDeadCode));
    if (!changed && !cleaned && !dead) break;
  }
  for (const rules::FusionRecord& r : driver.refusedInstances()) {
    result.fusions.push_back(r);
  }
  return result;
}

}  // namespace verifuse::passes
