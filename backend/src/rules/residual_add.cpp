// Residual add: conv/linear output + a tensor of the same shape becomes oneDNN's sum post-op.
//
//   residual-add-sum-postop   add(y, z, alpha) = y + alpha*z = sum post-op (dst_prev = z, scale = alpha)
//                             add(z, y, alpha) with alpha == 1 likewise (scale 1)
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
namespace sem = verify::sem;
namespace u = util;

bool sameKnownShape(const Graph& g, ValueId a, ValueId b) {
  const auto* sa = u::knownShape(g, a);
  const auto* sb = u::knownShape(g, b);
  if (!sa || !sb || sa->size() != sb->size()) return false;
  for (size_t d = 0; d < sa->size(); ++d) {
    // Symbolic sizes are checked again at run time (the executor falls back to ATen on mismatch).
    if ((*sa)[d] >= 0 && (*sb)[d] >= 0 && (*sa)[d] != (*sb)[d]) return false;
  }
  return true;
}

std::optional<Match> matchResidualAdd(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.op != "aten::add" || n.overload != "Tensor" || n.args.size() != 3) return std::nullopt;
  auto alpha = u::numberArg(n.args[2]);
  if (!alpha) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const Node* p = u::singleUseFusedProducer(g, n.args[static_cast<size_t>(k)]);
    if (!p) continue;
    const Arg& other = n.args[static_cast<size_t>(1 - k)];
    if (!other.isValue() || g.value(u::valueOf(other)).type != ir::ValueType::Tensor) continue;
    // y + alpha * r is a sum post-op with scale alpha; r + alpha * y only when alpha == 1.
    if (k == 1 && *alpha != 1.0) {
      u::why(whyNot, "r + alpha*y with alpha != 1 scales the conv/linear output, not the residual");
      continue;
    }
    bool hasSum = false;
    for (const PostOpSpec& s : u::postOpsOf(*p)) hasSum |= s.kind == "sum";
    if (hasSum) {
      u::why(whyNot, "the conv/linear already has a residual (one sum post-op per op)");
      continue;
    }
    if (!sameKnownShape(g, p->outputs[0], u::valueOf(other))) {
      u::why(whyNot, "residual shape differs from (or is not known to equal) the output shape");
      continue;
    }
    return Match{p->id, id, k};
  }
  return std::nullopt;
}

Status rewriteResidualAdd(Graph& g, const Match& m, FusionRecord&) {
  // The fused op moves to the add's position: the residual may be computed after the producer,
  // and every input of the producer is defined before it, hence before the add.
  const Node producer = g.node(m.anchor);
  Node& add = g.mutableNode(m.consumer);
  const Arg residual = add.args[static_cast<size_t>(1 - m.operand)];
  const double scale = m.operand == 0 ? *u::numberArg(add.args[2]) : 1.0;
  std::vector<PostOpSpec> chain = u::postOpsOf(producer);
  chain.push_back(PostOpSpec{"sum", {scale}});
  add.op = producer.op;
  add.overload = producer.overload;
  add.args = producer.args;
  add.args[postOpsArgIndex(add)] = Arg::string(formatPostOps(chain));
  add.args.push_back(residual);
  g.eraseNode(m.anchor);
  return Status::ok();
}

enum class SumBug { None, WrongScale, SwappedAlphaUnchecked };

// add(y, z, alpha) = y + alpha*z = sum post-op with dst_prev = z (the residual), scale = alpha.
// add(z, y, alpha') = z + alpha'*y is rewritten with scale 1, under the guard alpha' == 1.
Obligation residualSum(SumBug bug) {
  ObligationBuilder ob("residual-add-sum-postop");
  Expr y = ob.var("conv.out[o]"), z = ob.var("residual[o]"), alpha = ob.var("add.alpha");
  Expr swappedAlpha = ob.var("add.alpha[residual-first]");
  if (bug != SumBug::SwappedAlphaUnchecked) ob.assume(swappedAlpha == 1);
  ob.prove("out[o]", sem::add(y, z, alpha), sem::onednn::sumPostOp(z, y, bug == SumBug::WrongScale ? Expr(1) : alpha));
  ob.prove("out[o] (residual first)", sem::add(z, y, swappedAlpha), sem::onednn::sumPostOp(z, y, 1));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> residualAdd() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "residual-add-sum-postop",
      .summary = "conv/linear + residual -> sum post-op",
      .math = "add(y, z, alpha) = sum post-op: alpha*z + y (dst_prev = z); add(z, y, 1) likewise",
      .phase = Phase::kFusion,
      .anchors = {"aten::add"},
      // add.Tensor(%y, %z, alpha) where %y is a single-use conv/linear with no sum post-op yet and
      // %z a tensor of the same known shape (or %z first with alpha == 1).
      .match = matchResidualAdd,
      .rewrite = rewriteResidualAdd,
      .obligation = u::bindNoModel(residualSum, SumBug::None),
      .mutants = {{"sum-scale-wrong", "sum post-op scale 1 instead of alpha", u::bindNoModel(residualSum, SumBug::WrongScale)},
                  {"residual-first-alpha-unchecked", "z + alpha*y fused as sum(1) for any alpha",
                   u::bindNoModel(residualSum, SumBug::SwappedAlphaUnchecked)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
