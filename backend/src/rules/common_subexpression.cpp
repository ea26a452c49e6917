// Common-subexpression elimination: a node that repeats an earlier node (same operator and
// overload, the same arguments bit for bit) reads the earlier node's outputs instead and goes.
//
//   common-subexpression   v1 = f(a), v2 = f(a)  =>  v2 := v1     for f deterministic
//
// Why: transformers builds the same mask and position terms in every layer. T5 turns its boolean
// mask into an additive one with a where() per layer (six identical [1, 8, 128, 128] passes per
// call), BERT and GPT-2 make a scalar -inf and a where() per layer. The sweep runs in graph order,
// so once the scalars are merged the where()s reading them are identical too and go in the same
// sweep.
//
// The IR is functional (no op writes its inputs), so a deterministic op's outputs depend only on
// its arguments. The guards are the three ways that can fail: a different op, different arguments,
// an op with hidden inputs (random number state, uninitialized memory); and a fourth for the
// graph's interface: eager returns a fresh tensor per graph output, so a repeat that is a graph
// output stays (else two outputs would share storage).
#include <algorithm>
#include <cstring>

#include "rules/families.h"
#include "rules/rule_util.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::Sort;

/// Ops whose outputs are not a function of their arguments: random draws, uninitialized memory,
/// in-place writes (a trailing underscore), side effects. Matched as substrings of the op name.
bool hasHiddenInputsOrEffects(const Node& n) {
  if (n.outputs.empty()) return true;  // asserts and other effect-only ops
  if (!n.op.empty() && n.op.back() == '_') return true;
  static const char* const kWords[] = {"rand",    "bernoulli", "dropout", "normal", "uniform", "multinomial",
                                       "poisson", "exponential", "geometric", "cauchy", "empty", "_assert",
                                       "constrain", "print", "record", "copy_"};
  for (const char* word : kWords) {
    if (n.op.find(word) != std::string::npos) return true;
  }
  return false;
}

/// Argument equality bit for bit: Arg::operator== takes -0.0 for 0.0 (and NaN for NaN), which
/// where(mask, x, -0.0) and where(mask, x, 0.0) must not.
bool sameBits(const Arg& a, const Arg& b) {
  if (a.kind != b.kind || a.i != b.i || a.s != b.s || a.list.size() != b.list.size()) return false;
  if (std::memcmp(&a.d, &b.d, sizeof(double)) != 0) return false;
  for (size_t k = 0; k < a.list.size(); ++k) {
    if (!sameBits(a.list[k], b.list[k])) return false;
  }
  return true;
}

bool sameCall(const Node& a, const Node& b) {
  if (a.op != b.op || a.overload != b.overload || a.args.size() != b.args.size() ||
      a.outputs.size() != b.outputs.size()) {
    return false;
  }
  return std::equal(a.args.begin(), a.args.end(), b.args.begin(), sameBits);  // every operand, pairwise
}

std::optional<Match> matchRepeat(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (hasHiddenInputsOrEffects(n)) return std::nullopt;
  // An earlier copy comes after the last of its inputs' producers: start the search there.
  std::vector<ValueId> reads;
  for (const Arg& a : n.args) a.collectValues(reads);
  NodeId from = 0;
  for (ValueId v : reads) from = std::max(from, g.value(v).producer + 1);
  for (NodeId k = from; k < id; ++k) {
    const Node& earlier = g.node(k);
    if (earlier.erased || !sameCall(earlier, n)) continue;
    for (ValueId out : n.outputs) {
      if (g.isGraphOutput(out)) {
        return util::why(whyNot, "repeats an earlier node but is a graph output (kept fresh, as eager returns it)"),
               std::nullopt;
      }
    }
    return Match{k, id, 0};
  }
  return std::nullopt;
}

Status readEarlierCopy(Graph& g, const Match& m, FusionRecord&) {
  const Node& earlier = g.node(m.anchor);
  const std::vector<ValueId> repeat = g.node(m.consumer).outputs;
  for (size_t k = 0; k < repeat.size(); ++k) g.replaceAllUses(repeat[k], earlier.outputs[k]);
  g.eraseNode(m.consumer);
  return Status::ok();
}

enum class Dropped { kNone, kSameOp, kSameArgs, kDeterministic, kNotGraphOutput };

// The two calls: v1 = op1(a1, s1), v2 = op2(a2, s2), where s is what an op reads besides its
// arguments (random state, uninitialized memory); a deterministic op ignores it. The graph's
// result reads both, rest(v1, v2); after the rewrite it reads rest(v1, v1). A repeat that is a graph
// output also shows its storage: eager's is a fresh buffer, the rewrite's the earlier node's.
Obligation repeatObligation(Dropped dropped) {
  ObligationBuilder ob("common-subexpression");
  Expr a1 = ob.var("earlier.args"), a2 = ob.var("repeat.args");
  Expr s1 = ob.var("earlier.hidden_inputs"), s2 = ob.var("repeat.hidden_inputs");
  Expr sameOp = ob.var("same_op_and_overload", Sort::Bool);
  Expr deterministic = ob.var("op_is_deterministic", Sort::Bool);
  Expr isOutput = ob.var("repeat.is_graph_output", Sort::Bool);
  if (dropped != Dropped::kSameOp) ob.assume(sameOp);
  if (dropped != Dropped::kSameArgs) ob.assume(a1 == a2);
  if (dropped != Dropped::kDeterministic) ob.assume(deterministic);
  if (dropped != Dropped::kNotGraphOutput) ob.assume(!isOutput);
  auto call = [&](const std::string& op, Expr args, Expr hidden) {
    return Expr::ite(deterministic, Expr::apply(op + ".of_args", {args}), Expr::apply(op, {args, hidden}));
  };
  Expr v1 = call("earlier.op", a1, s1);
  Expr v2 = Expr::ite(sameOp, call("earlier.op", a2, s2), call("repeat.op", a2, s2));
  ob.prove("out", Expr::apply("graph.rest", {v1, v2}), Expr::apply("graph.rest", {v1, v1}));
  // Storage of the graph outputs: eager returns distinct buffers (b1 != b2).
  Expr b1 = ob.var("earlier.buffer", Sort::Int), b2 = ob.var("repeat.buffer", Sort::Int);
  ob.assume(b1 != b2);
  Expr none = Expr::integer(-1);
  ob.prove("output_storage", Expr::ite(isOutput, b2, none), Expr::ite(isOutput, b1, none));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> commonSubexpressions() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "common-subexpression",
      .summary = "a node repeating an earlier one (same op, same arguments) -> reads the earlier node's outputs",
      .math = "v1 = f(a), v2 = f(a) with f deterministic: rest(v1, v2) = rest(v1, v1)",
      .phase = Phase::kNoOps,
      .anchors = {},  // every op
      .match = matchRepeat,
      .rewrite = readEarlierCopy,
      .obligation = util::bindNoModel(repeatObligation, Dropped::kNone),
      .mutants = {{"different-op-merged", "a node merged into an earlier node of another op",
                   util::bindNoModel(repeatObligation, Dropped::kSameOp)},
                  {"different-args-merged", "a node merged into an earlier call with other arguments",
                   util::bindNoModel(repeatObligation, Dropped::kSameArgs)},
                  {"random-op-merged", "two draws of a random op merged into one",
                   util::bindNoModel(repeatObligation, Dropped::kDeterministic)},
                  {"graph-output-merged", "a repeat that is a graph output merged (two outputs share storage)",
                   util::bindNoModel(repeatObligation, Dropped::kNotGraphOutput)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
