// Per-channel constant folds: a conv/linear output multiplied, divided or shifted by a constant
// that varies only along the output-channel axis folds into the weight and bias.
//
//   per-channel-mul-fold   (dot(W,X) + b) * c[o] = dot(c[o]*W, X) + b*c[o]
//   per-channel-div-fold   (dot(W,X) + b) / d[o] = dot(W/d[o], X) + b/d[o]
//   per-channel-add-fold   dot(W,X) + b + alpha*a[o] = dot(W,X) + (b + alpha*a[o])
//
// The folds are fold_arithmetic.h's FoldTerms: the rewrite evaluates them in double, the instance
// check recomputes them, and the obligations below prove them over the reals.
#include "rules/families.h"
#include "rules/rule_util.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Binary;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::sem::DotModel;
using verify::sem::TensorTerm;
namespace sem = verify::sem;
namespace u = util;

enum class ChannelOp { kMul, kAdd, kDiv };

/// Per-output-channel factors of a constant operand: nullopt if it broadcasts along any other axis
/// (a scale on the wrong axis cannot be folded into the weights).
std::optional<std::vector<double>> channelFactors(const Graph& g, const Node& fused, const Arg& operand,
                                                  std::string* whyNot) {
  const int64_t channels = u::outChannels(g, fused);
  if (auto v = u::numberArg(operand)) return std::vector<double>(static_cast<size_t>(channels), *v);
  // A bf16 producer's bf16 operand (the guard in matchChannelFold) is widened exactly (toDoubles).
  const bool bf16Producer =
      g.constants().at(static_cast<size_t>(u::fusedWeight(fused).i)).dtype == ir::DType::BFloat16;
  const ir::ConstantTensor* c = bf16Producer ? u::floatConstant(g, operand) : u::f32Constant(g, operand);
  if (!c) {
    if (operand.isConstant()) u::why(whyNot, "the constant is not a contiguous float32 (or a bf16 model's bfloat16) tensor");
    return std::nullopt;
  }
  int rank = 0;
  int axis = u::channelAxis(g, fused, &rank);
  if (axis < 0) {
    u::why(whyNot, "the producer's output-channel axis is unknown (unbatched conv or unknown rank)");
    return std::nullopt;
  }
  if (static_cast<int>(c->sizes.size()) > rank) {
    u::why(whyNot, "constant has more dims than the output");
    return std::nullopt;
  }
  // Right-align the constant's dims against the output's.
  const int offset = rank - static_cast<int>(c->sizes.size());
  for (int d = 0; d < static_cast<int>(c->sizes.size()); ++d) {
    int outDim = d + offset;
    int64_t size = c->sizes[static_cast<size_t>(d)];
    if (size == 1) continue;
    if (outDim != axis || size != channels) {
      u::why(whyNot, "constant varies along an axis other than the output channels");
      return std::nullopt;
    }
  }
  if (!c->data) return std::vector<double>(static_cast<size_t>(channels), 1.0);  // parsed graph: shapes only
  std::vector<double> vals = u::toDoubles(c);
  if (vals.size() == 1) return std::vector<double>(static_cast<size_t>(channels), vals[0]);
  return vals;
}

/// mul/add/div(self, other): the operand on side \p k (0: self, 1: other) and the one opposite.
const Arg& sideOperand(const Node& n, int k) { return operand(n, k == 0 ? Binary::self : Binary::other); }
const Arg& oppositeOperand(const Node& n, int k) { return operand(n, k == 0 ? Binary::other : Binary::self); }

MatchFn matchChannelFold(ChannelOp op) {
  return [op](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    const Node& n = g.node(id);
    const bool isMul = op == ChannelOp::kMul && n.op == "aten::mul" && n.overload == "Tensor";
    const bool isAdd = op == ChannelOp::kAdd && n.op == "aten::add" && n.overload == "Tensor";
    const bool isDiv = op == ChannelOp::kDiv && n.op == "aten::div" && n.overload == "Tensor";
    if (!isMul && !isAdd && !isDiv) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      if (isDiv && k == 1) break;  // c / y is not a per-channel scale of y
      const Node* p = u::singleUseFusedProducer(g, sideOperand(n, k));
      if (!p) continue;
      // The other operand must be a number or a constant (a tensor is the residual add's case).
      const Arg& other = oppositeOperand(n, k);
      if (!u::numberArg(other) && !other.isConstant()) continue;
      if (!hasNoFusedPostOps(*p)) return u::why(whyNot, "producer has post-ops"), std::nullopt;
      if (std::string problem = u::foldableWeightProblem(g, *p); !problem.empty()) {
        return u::why(whyNot, problem), std::nullopt;
      }
      // A bf16 producer times a float32 tensor is float32 in eager (type promotion); folded, it
      // would stay bf16. Numbers and bf16 tensors (a bf16 model's own parameters: ConvNeXt's
      // layer scale) keep the bf16 result, as eager does.
      const bool bf16Producer =
          g.constants()[static_cast<size_t>(u::fusedWeight(*p).i)].dtype == ir::DType::BFloat16;
      const bool bf16Operand =
          other.isConstant() && g.constants()[static_cast<size_t>(other.i)].dtype == ir::DType::BFloat16;
      if (bf16Producer && !u::numberArg(other) && !bf16Operand) {
        return u::why(whyNot, "a bfloat16 producer with a float32 tensor operand (eager promotes to float32)"),
               std::nullopt;
      }
      if (isAdd) {
        auto alpha = u::numberArg(operand(n, ir::Add::alpha));
        if (!alpha) return u::why(whyNot, "add's alpha is not a number"), std::nullopt;
        if (k == 1 && *alpha != 1.0) {
          return u::why(whyNot, "c + alpha*y with alpha != 1 scales the output, not a shift"), std::nullopt;
        }
      }
      if (!channelFactors(g, *p, other, whyNot)) return std::nullopt;
      return Match{p->id, id, k};
    }
    return std::nullopt;
  };
}

RewriteFn rewriteChannelFold(ChannelOp op) {
  return [op](Graph& g, const Match& m, FusionRecord& rec) -> Status {
    const Node& n = g.node(m.consumer);
    const Arg other = oppositeOperand(n, m.operand);
    auto factors = channelFactors(g, g.node(m.anchor), other, nullptr);
    if (!factors) return internalError("channel fold no longer matches");
    const FoldRecord::Kind kind = op == ChannelOp::kMul   ? FoldRecord::Kind::kChannelMul
                                  : op == ChannelOp::kAdd ? FoldRecord::Kind::kChannelAdd
                                                          : FoldRecord::Kind::kChannelDiv;
    const double alpha = op == ChannelOp::kAdd ? *u::numberArg(operand(n, ir::Add::alpha)) : 1.0;
    const Node& p = g.node(m.anchor);
    const bool makeBias = op == ChannelOp::kAdd;
    u::FoldedConstants folded = u::foldPerChannel(g, p, channelOpFold(kind, *factors, alpha), makeBias);
    Node& pm = g.mutableNode(m.anchor);
    rec.fold.kind = kind;
    rec.fold.weight = u::argConstant(u::fusedWeight(pm));
    rec.fold.bias = u::argConstant(u::fusedBias(pm));
    rec.fold.operand = u::argConstant(other);
    rec.fold.scalar = other.isConstant() ? alpha : *u::numberArg(other);
    if (op == ChannelOp::kAdd && !other.isConstant()) rec.fold.scalar = alpha * *u::numberArg(other);
    rec.fold.foldedWeight = folded.weight;
    rec.fold.foldedBias = folded.bias;
    u::fusedWeight(pm) = Arg::constant(folded.weight);
    if (folded.bias >= 0) u::fusedBias(pm) = Arg::constant(folded.bias);
    return u::replaceWithProducer(g, m);
  };
}

// ---- obligations -------------------------------------------------------------------------------------

enum class FoldBug { None, BiasNotScaled, WrongChannelAxis, Dropped, AlphaIgnored, SwappedAlphaIgnored };

// (dot(W,X) + b) * c[o] = dot(c[o]*W, X) + b*c[o]   (mul commutes: c * y is the same)
Obligation mulFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-mul-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), c = ob.var("mul.other[o]"), ci = ob.var("mul.other[i]");
  Expr source = m.linear(ob, w, x, b) * c;
  // The rewrite's own fold (fold_arithmetic.h), or the mutant's change to it.
  FoldTerms<Expr> fold = channelMulTerms<Expr>(c, 1, 0);
  if (bug == FoldBug::WrongChannelAxis) fold.scale = ci;
  if (bug == FoldBug::BiasNotScaled) fold.biasScale = 1;
  ob.prove("out[o]", source, m.linear(ob, m.scale(fold.scale, w), x, fold.bias(b)));
  return ob.build();
}

// add(y, a, alpha) = y + alpha*a[o]:  dot(W,X) + b + alpha*a[o] = dot(W,X) + (b + alpha*a[o]).
// add(a, y, alpha) = a[o] + alpha*y is folded only when alpha == 1 (the guard).
Obligation addFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-add-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), a = ob.var("add.other[o]"), ai = ob.var("add.other[i]");
  Expr alpha = ob.var("add.alpha"), swappedAlpha = ob.var("add.alpha[constant-first]");
  if (bug != FoldBug::SwappedAlphaIgnored) ob.assume(swappedAlpha == 1);
  Expr y = m.linear(ob, w, x, b);
  // The rewrite's own fold (fold_arithmetic.h), or the mutant's change to it.
  FoldTerms<Expr> fold = channelAddTerms<Expr>(a, alpha, 1);
  if (bug == FoldBug::WrongChannelAxis) fold.shift = alpha * ai;
  if (bug == FoldBug::Dropped) fold.shift = 0;
  if (bug == FoldBug::AlphaIgnored) fold.shift = a;
  ob.prove("out[o]", sem::add(y, a, alpha), m.linear(ob, m.scale(fold.scale, w), x, fold.bias(b)));
  // add(a, y, 1): the rewrite passes the constant on with alpha 1
  const FoldTerms<Expr> constantFirst = channelAddTerms<Expr>(a, 1, 1);
  ob.prove("out[o] (constant first)", sem::add(a, y, swappedAlpha),
           m.linear(ob, m.scale(constantFirst.scale, w), x, constantFirst.bias(b)));
  return ob.build();
}

// (dot(W,X) + b) / d[o] = dot((1/d[o])*W, X) + b/d[o]; the source's division makes d[o] != 0 a
// definedness condition, which the target inherits.
Obligation divFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-div-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), d = ob.var("div.other[o]");
  Expr source = m.linear(ob, w, x, b) / d;
  // The rewrite's own fold (fold_arithmetic.h), or the mutant's change to it.
  FoldTerms<Expr> fold = channelDivTerms<Expr>(d, 1, 0);
  if (bug == FoldBug::BiasNotScaled) fold.biasScale = 1;
  ob.prove("out[o]", source, m.linear(ob, m.scale(fold.scale, w), x, fold.bias(b)));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> perChannelFolds() {
  std::vector<RuleDeclaration> rules;
  // Pattern of all three: <op>.Tensor(%y, c) (mul and add also c first) where %y is a single-use
  // conv/linear without post-ops with a constant float32 weight, and c is a number or a float32
  // constant whose only non-1 dim is the output-channel axis (right-aligned against the output).
  rules.push_back({
      .id = "per-channel-mul-fold",
      .summary = "conv/linear * per-channel constant -> scaled weight and bias",
      .math = "(conv(x,W,b)) * c[o] = conv(x, c[o]*W, c[o]*b)",
      .phase = Phase::kFusion,
      .anchors = {"aten::mul"},
      .match = matchChannelFold(ChannelOp::kMul),
      .rewrite = rewriteChannelFold(ChannelOp::kMul),
      .obligation = u::bind(mulFold, FoldBug::None),
      .mutants = {{"bias-not-scaled", "b' = b", u::bind(mulFold, FoldBug::BiasNotScaled)},
                  {"wrong-channel-axis", "W scaled by c[i] (input channel)", u::bind(mulFold, FoldBug::WrongChannelAxis)}},
      .usesDot = true,
      .foldsConstants = true,
  });
  rules.push_back({
      .id = "per-channel-div-fold",
      .summary = "conv/linear / per-channel constant -> scaled weight and bias",
      .math = "conv(x,W,b) / d[o] = conv(x, W/d[o], b/d[o])   (d[o] != 0 from the source)",
      .phase = Phase::kFusion,
      .anchors = {"aten::div"},
      .match = matchChannelFold(ChannelOp::kDiv),
      .rewrite = rewriteChannelFold(ChannelOp::kDiv),
      .obligation = u::bind(divFold, FoldBug::None),
      .mutants = {{"bias-not-divided", "b' = b", u::bind(divFold, FoldBug::BiasNotScaled)}},
      .usesDot = true,
      .foldsConstants = true,
  });
  rules.push_back({
      .id = "per-channel-add-fold",
      .summary = "conv/linear + per-channel constant -> shifted bias",
      .math = "conv(x,W,b) + alpha*a[o] = conv(x, W, b + alpha*a[o]);  a[o] + conv(x,W,b) likewise (alpha = 1)",
      .phase = Phase::kFusion,
      .anchors = {"aten::add"},
      .match = matchChannelFold(ChannelOp::kAdd),
      .rewrite = rewriteChannelFold(ChannelOp::kAdd),
      .obligation = u::bind(addFold, FoldBug::None),
      .mutants = {{"wrong-channel-axis", "b' = b + alpha*a[i]", u::bind(addFold, FoldBug::WrongChannelAxis)},
                  {"add-dropped", "b' = b", u::bind(addFold, FoldBug::Dropped)},
                  {"alpha-ignored", "b' = b + a (add's alpha dropped)", u::bind(addFold, FoldBug::AlphaIgnored)},
                  {"constant-first-alpha-unchecked", "a + alpha*y folded as a shift for any alpha",
                   u::bind(addFold, FoldBug::SwappedAlphaIgnored)}},
      .usesDot = true,
      .foldsConstants = true,
  });
  return rules;
}

}  // namespace verifuse::rules::families
