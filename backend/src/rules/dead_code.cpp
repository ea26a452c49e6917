// Dead-code elimination: a node none of whose outputs is read (by a node or as a graph output) is
// erased. The pass sweeps the nodes backwards, so a chain of dead nodes goes in one sweep.
//
//   dead-code   graph(x) = out(x, ...) does not read v = f(x): erasing v's node leaves out unchanged
//
// The IR is functional (aot_autograd's graphs are functionalized: no op writes its inputs), so an
// unread node has no effect; the obligation states the part that can go wrong, the "unread" guard.
#include "rules/families.h"
#include "rules/rule_util.h"

namespace verifuse::rules::families {

namespace {

using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;

std::optional<Match> matchDead(const Graph& g, NodeId id, std::string*) {
  const Node& n = g.node(id);
  for (ValueId out : n.outputs) {
    if (g.isGraphOutput(out) || !g.users(out).empty()) return std::nullopt;  // live: not this pattern
  }
  return Match{id, id, 0};
}

Status eraseDead(Graph& g, const Match& m, FusionRecord&) {
  g.eraseNode(m.anchor);
  return Status::ok();
}

// The graph's output is a function of the values it reads: rest(x) if it does not read the
// node's value v = f(x), rest'(x, v) if it does. Erasing the node leaves a dangling value (any
// value) where v was. The guard "no user reads v" is an assumption; the mutant drops it.
Obligation deadCodeObligation(bool guardDropped) {
  ObligationBuilder ob("dead-code");
  Expr x = ob.var("x");
  Expr read = ob.var("node.output_has_user", verify::Sort::Bool);
  if (!guardDropped) ob.assume(!read);
  Expr v = Expr::apply("dead.op", {x});  // the erased node's value
  Expr dangling = ob.var("erased.output");
  auto out = [&](Expr value) {
    return Expr::ite(read, Expr::apply("graph.rest.reading", {x, value}), Expr::apply("graph.rest", {x}));
  };
  ob.prove("out", out(v), out(dangling));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> deadCode() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "dead-code",
      .summary = "a node whose outputs nothing reads -> erased",
      .math = "out = rest(x) with v = f(x) unread: erasing v's node leaves rest(x)",
      .phase = Phase::kDeadCode,
      .anchors = {},  // every op
      // Any node none of whose outputs has a user or is a graph output.
      .match = matchDead,
      .rewrite = eraseDead,
      .obligation = util::bindNoModel(deadCodeObligation, false),
      .mutants = {{"node-with-user-erased", "a node erased although a user still reads its output",
                   util::bindNoModel(deadCodeObligation, true)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
