// Batch-norm folding: eval batch norm after a conv/linear folds into its weight and bias; a batch
// norm with nothing to fold into becomes one per-channel multiply-add.
//
//   conv-bn-fold, linear-bn-fold   BN(dot(W,X) + b) = dot(s*W, X) + (b - mean)*s + beta
//   bn-to-scale-shift              BN(x) = x*s + (beta - mean*s)
//                                  with s = gamma/sqrt(var + eps), per channel
//
// The folds are fold_arithmetic.h's FoldTerms: the rewrite evaluates them in double, the
// instance check recomputes them, and the obligations below prove them over the reals.
#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/passes/pipeline.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::ConstantId;
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

using ir::BatchNormNoTraining;
using ir::NativeBatchNorm;

const std::vector<std::string> kBatchNormOps = {std::string(BatchNormNoTraining::kOp),
                                                std::string(NativeBatchNorm::kOp)};

// ---- pattern pieces --------------------------------------------------------------------------------

struct BatchNormArgs {
  Arg input, gamma, beta, mean, var;
  double eps = 0;
};

/// The operands both batch-norm schemas name alike (weight is gamma, bias is beta); eps as a number.
template <class BatchNorm>
std::optional<double> readBatchNorm(const Node& n, BatchNormArgs& bn) {
  bn.input = operand(n, BatchNorm::input);
  bn.gamma = operand(n, BatchNorm::weight);
  bn.beta = operand(n, BatchNorm::bias);
  bn.mean = operand(n, BatchNorm::running_mean);
  bn.var = operand(n, BatchNorm::running_var);
  return u::numberArg(operand(n, BatchNorm::eps));
}

/// Eval-mode batch norm with constant statistics; nullopt (with a reason) otherwise.
std::optional<BatchNormArgs> evalBatchNorm(const Graph& g, const Node& n, std::string* whyNot) {
  BatchNormArgs bn;
  std::optional<double> eps;
  if (n.op == BatchNormNoTraining::kOp && ir::hasOperands<BatchNormNoTraining>(n)) {
    eps = readBatchNorm<BatchNormNoTraining>(n, bn);
  } else if (n.op == NativeBatchNorm::kOp && ir::hasOperands<NativeBatchNorm>(n)) {
    const Arg& training = operand(n, NativeBatchNorm::training);
    if (training.kind != Arg::Kind::Bool || training.i != 0) {
      u::why(whyNot, "batch norm in training mode (batch statistics, not running statistics)");
      return std::nullopt;
    }
    eps = readBatchNorm<NativeBatchNorm>(n, bn);
  } else {
    return std::nullopt;
  }
  if (!eps) {
    u::why(whyNot, "batch norm eps is not a constant");
    return std::nullopt;
  }
  bn.eps = *eps;
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    if (!g.users(n.outputs[k]).empty() || g.isGraphOutput(n.outputs[k])) {
      u::why(whyNot, "batch norm's saved statistics are used");
      return std::nullopt;
    }
  }
  // float32, or a bf16 model's bfloat16 (read widened, exactly).
  const ir::ConstantTensor* mean = u::floatConstant(g, bn.mean);
  const ir::ConstantTensor* var = u::floatConstant(g, bn.var);
  if (!mean || !var) {
    u::why(whyNot, "batch norm running statistics are not frozen float32 or bfloat16 constants");
    return std::nullopt;
  }
  for (const Arg* a : {&bn.gamma, &bn.beta}) {
    if (a->kind != Arg::Kind::None && !u::floatConstant(g, *a)) {
      u::why(whyNot, "batch norm weight/bias are not frozen float32 or bfloat16 constants");
      return std::nullopt;
    }
  }
  return bn;
}

int64_t batchNormChannels(const Graph& g, const BatchNormArgs& bn) {
  return g.constants()[static_cast<size_t>(bn.mean.i)].numel();
}

/// The batch norm's fold from its constants (fold_arithmetic.h): scale s[o] = gamma[o] /
/// sqrt(var[o] + eps), shift t[o] = beta[o] - mean[o] * s[o]; no channels when they have no data.
ChannelFold batchNormConstantsFold(const Graph& g, const BatchNormArgs& bn) {
  return batchNormFold(u::toDoubles(u::floatConstant(g, bn.gamma)), u::toDoubles(u::floatConstant(g, bn.beta)),
                       u::toDoubles(u::floatConstant(g, bn.mean)), u::toDoubles(u::floatConstant(g, bn.var)), bn.eps);
}

// ---- conv-bn-fold / linear-bn-fold ------------------------------------------------------------------

MatchFn matchBatchNormFold(std::string fusedOp) {
  return [fusedOp](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    const Node& n = g.node(id);
    // Only a batch norm after this kind of fused op is this fold's pattern.
    const Node* producer = n.args.empty() ? nullptr : u::producerOf(g, ir::selfOperand(n));  // its input
    if (!producer || producer->op != fusedOp) return std::nullopt;
    auto bn = evalBatchNorm(g, n, whyNot);
    if (!bn) return std::nullopt;
    const Node* p = u::singleUseFusedProducer(g, bn->input);
    if (!p) return u::why(whyNot, "the " + fusedOp + " output has other users"), std::nullopt;
    if (!hasNoFusedPostOps(*p)) {
      u::why(whyNot, "the producer already has post-ops");
      return std::nullopt;
    }
    if (std::string problem = u::foldableWeightProblem(g, *p); !problem.empty()) {
      u::why(whyNot, problem);
      return std::nullopt;
    }
    int rank = 0;
    int axis = u::channelAxis(g, *p, &rank);
    // Batch norm normalizes dim 1; the fold is per output channel, so dim 1 must be the channel axis.
    if (axis != 1) {
      u::why(whyNot, "batch norm's channel axis (1) is not the producer's output-channel axis");
      return std::nullopt;
    }
    if (batchNormChannels(g, *bn) != u::outChannels(g, *p)) {
      u::why(whyNot, "batch norm channel count differs from the producer's output channels");
      return std::nullopt;
    }
    return Match{p->id, id, 0};
  };
}

RewriteFn rewriteBatchNormFold(bool epsForgotten) {
  return [epsForgotten](Graph& g, const Match& m, FusionRecord& rec) -> Status {
    const Node& n = g.node(m.consumer);
    auto bn = evalBatchNorm(g, n, nullptr);
    if (!bn) return internalError("batch norm no longer matches");
    BatchNormArgs args = *bn;
    if (epsForgotten) args.eps = 0;  // the planted bug
    // W' = W * s, b' = (b - mean) * s + beta = b * s + t
    const Node& p = g.node(m.anchor);
    u::FoldedConstants folded = u::foldPerChannel(g, p, batchNormConstantsFold(g, args), /*makeBias=*/true);
    Node& pm = g.mutableNode(m.anchor);
    rec.fold.kind = FoldRecord::Kind::kBatchNorm;
    rec.fold.weight = u::argConstant(u::fusedWeight(pm));
    rec.fold.bias = u::argConstant(u::fusedBias(pm));
    rec.fold.gamma = u::argConstant(bn->gamma);
    rec.fold.beta = u::argConstant(bn->beta);
    rec.fold.mean = u::argConstant(bn->mean);
    rec.fold.var = u::argConstant(bn->var);
    rec.fold.eps = bn->eps;
    rec.fold.foldedWeight = folded.weight;
    rec.fold.foldedBias = folded.bias;
    u::fusedWeight(pm) = Arg::constant(folded.weight);
    u::fusedBias(pm) = Arg::constant(folded.bias);
    return u::replaceWithProducer(g, m);
  };
}

// Math:  BN(dot(W,X) + b) = gamma*(dot(W,X) + b - mean)*r + beta,  r = 1/sqrt(var + eps)
//                         = dot(s*W, X) + (b - mean)*s + beta,     s = gamma*r   (per output channel o)
enum class BnBug { None, EpsDropped, BiasNotRescaled, WrongChannelAxis, TrainingMode };

Obligation bnFold(const DotModel& m, const std::string& id, const std::string& layer, BnBug bug) {
  ObligationBuilder ob(id);
  sem::BatchNormParams bn = sem::batchNormParams("bn", "o");
  sem::assumeBatchNorm(ob, bn);
  TensorTerm w = m.tensor(layer + ".weight[o]");
  TensorTerm x = m.tensor("x[window]");
  Expr b = ob.var(layer + ".bias[o]");
  Expr y = m.linear(ob, w, x, b);

  Expr source;
  if (bug == BnBug::TrainingMode) {
    // Training-mode BN normalizes with the batch statistics, not the running ones.
    sem::BatchNormParams batch = bn;
    batch.mean = ob.var("batch_mean[o]");
    batch.var = ob.var("batch_var[o]");
    ob.assume(batch.var >= 0);
    source = sem::batchNormEval(ob, y, batch);
  } else {
    source = sem::batchNormEval(ob, y, bn);
  }

  // The rewrite's own fold (fold_arithmetic.h) with s = gamma / sqrt(var + eps), or the mutant's
  // change to it.
  FoldTerms<Expr> fold = batchNormTerms<Expr>(bn.gamma * sem::batchNormRsqrt(ob, bn), bn.beta, bn.mean);
  switch (bug) {
    case BnBug::EpsDropped:
      fold = batchNormTerms<Expr>(bn.gamma * sem::rsqrt(ob, bn.var, "rsqrt(bn.running_var[o])"), bn.beta, bn.mean);
      break;
    case BnBug::BiasNotRescaled:  // b' = b + beta - s*mean
      fold.biasScale = 1;
      break;
    case BnBug::WrongChannelAxis: {
      // The weight is scaled by the BN parameters of input channel i instead of output channel o.
      sem::BatchNormParams in = sem::batchNormParams("bn", "i");
      sem::assumeBatchNorm(ob, in);
      fold.scale = in.gamma * sem::batchNormRsqrt(ob, in);
      break;
    }
    default:
      break;
  }
  Expr target = m.linear(ob, m.scale(fold.scale, w), x, fold.bias(b));
  ob.prove("out[o]", source, target);
  return ob.build();
}

RuleDeclaration bnFoldRule(const std::string& id, const std::string& fusedOp, const std::string& layer) {
  auto obligation = [id, layer](BnBug bug) { return u::bind(bnFold, id, layer, bug); };
  return {
      .id = id,
      .summary = layer + " + eval batch norm -> " + layer + " with folded weight and bias",
      .math = "BN(" + layer + "(x,W,b)) = " + layer +
              "(x, W*s, (b-mean)*s + beta), s = gamma/sqrt(var+eps), per output channel",
      .phase = Phase::kFusion,
      .anchors = kBatchNormOps,
      // batch_norm(<fusedOp>(%x, $W, $b?, ...), $gamma?, $beta?, $mean, $var, eps): eval mode, the
      // fused op has one user and no post-ops, constant float32 weights, channel axis 1, C equal.
      .match = matchBatchNormFold(fusedOp),
      .rewrite = rewriteBatchNormFold(/*epsForgotten=*/false),
      .obligation = obligation(BnBug::None),
      .mutants = {{"eps-dropped", "scale computed as gamma/sqrt(var) (eps forgotten)", obligation(BnBug::EpsDropped)},
                  {"bias-not-rescaled", "b' = b + beta - gamma*s*mean (conv bias not multiplied by s)",
                   obligation(BnBug::BiasNotRescaled)},
                  {"wrong-channel-axis", "weight scaled by the BN parameters of the input channel",
                   obligation(BnBug::WrongChannelAxis)},
                  {"training-mode-bn", "folding a training-mode BN (batch statistics != running statistics)",
                   obligation(BnBug::TrainingMode)}},
      .usesDot = true,
      .foldsConstants = true,
  };
}

// ---- bn-to-scale-shift ---------------------------------------------------------------------------

std::optional<Match> matchStandaloneBatchNorm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  auto bn = evalBatchNorm(g, n, whyNot);
  if (!bn) return std::nullopt;
  if (!bn->input.isValue()) return std::nullopt;
  // Its float32 scale/shift constants would promote a bf16 model's activations to float32.
  if (g.constants()[static_cast<size_t>(bn->mean.i)].dtype != ir::DType::Float32 ||
      g.value(u::valueOf(bn->input)).dtype == ir::DType::BFloat16) {
    u::why(whyNot, "a bfloat16 batch norm without a producer to fold into stays as it is");
    return std::nullopt;
  }
  const auto* shape = u::knownShape(g, u::valueOf(bn->input));
  if (!shape || shape->size() < 2) {
    u::why(whyNot, "batch norm input rank unknown");
    return std::nullopt;
  }
  if ((*shape)[1] >= 0 && (*shape)[1] != batchNormChannels(g, *bn)) {
    u::why(whyNot, "batch norm channel count differs from the input's dim 1");
    return std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteStandaloneBatchNorm(Graph& g, const Match& m, FusionRecord& rec) {
  auto bn = evalBatchNorm(g, g.node(m.anchor), nullptr);
  if (!bn) return internalError("batch norm no longer matches");
  const ChannelFold fold = batchNormConstantsFold(g, *bn);
  const int64_t c = batchNormChannels(g, *bn);
  const size_t rank = g.value(u::valueOf(bn->input)).shape.size();
  // [C, 1, ..., 1]: broadcasts along dim 1 of an N-d input (right-aligned).
  std::vector<int64_t> sizes(rank - 1, 1);
  sizes[0] = c;
  std::vector<float> sv(fold.scale.begin(), fold.scale.end()), tv(fold.shift.begin(), fold.shift.end());
  std::string base = g.constants()[static_cast<size_t>(bn->mean.i)].name;
  ConstantId scale = passes::addHostConstant(g, base + "_bn_scale", sizes, std::move(sv));
  ConstantId shift = passes::addHostConstant(g, base + "_bn_shift", sizes, std::move(tv));
  rec.fold.kind = FoldRecord::Kind::kBatchNorm;
  rec.fold.gamma = u::argConstant(bn->gamma);
  rec.fold.beta = u::argConstant(bn->beta);
  rec.fold.mean = u::argConstant(bn->mean);
  rec.fold.var = u::argConstant(bn->var);
  rec.fold.eps = bn->eps;
  rec.fold.foldedWeight = scale;
  rec.fold.foldedBias = shift;
  Node& n = g.mutableNode(m.anchor);
  // addcmul(shift, x, scale, 1) = shift + x * scale: one pass over x, like batch norm itself.
  n.op = "aten::addcmul";
  n.overload = "";
  n.args = ir::OperandsOf<ir::Addcmul>()
               .set(ir::Addcmul::self, Arg::constant(shift))
               .set(ir::Addcmul::tensor1, bn->input)
               .set(ir::Addcmul::tensor2, Arg::constant(scale))
               .set(ir::Addcmul::value, Arg::integer(1))
               .take();
  n.outputs.resize(1);
  return Status::ok();
}

enum class ScaleShiftBug { None, EpsDropped, ShiftSign };

// BN(x) = x*s + (beta - mean*s), s = gamma*r.
Obligation bnScaleShift(ScaleShiftBug bug) {
  ObligationBuilder ob("bn-to-scale-shift");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "c");
  sem::assumeBatchNorm(ob, bn);
  Expr x = ob.var("x[c]");
  Expr r = bug == ScaleShiftBug::EpsDropped ? sem::rsqrt(ob, bn.var, "rsqrt(bn.running_var[c])")
                                            : sem::batchNormRsqrt(ob, bn);
  // The rewrite's scale and shift constants (fold_arithmetic.h), or the mutant's.
  FoldTerms<Expr> fold = batchNormTerms<Expr>(bn.gamma * r, bn.beta, bn.mean);
  if (bug == ScaleShiftBug::ShiftSign) fold.shift = bn.beta + bn.mean * fold.scale;
  ob.prove("out[c]", sem::batchNormEval(ob, x, bn), x * fold.scale + fold.shift);
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> batchNormFolds() {
  return {bnFoldRule("conv-bn-fold", kConvOp, "conv"), bnFoldRule("linear-bn-fold", kLinearOp, "linear")};
}

std::vector<RuleDeclaration> batchNormScaleShift() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "bn-to-scale-shift",
      .summary = "eval batch norm -> addcmul(shift, x, scale)",
      .math = "BN(x) = x*s + (beta - mean*s), s = gamma/sqrt(var+eps)",
      .phase = Phase::kFusion,
      .anchors = kBatchNormOps,
      // batch_norm(%x, ...) in eval mode with constant statistics and a known rank >= 2, channel
      // count equal to dim 1 of x: a batch norm that no conv/linear absorbed.
      .match = matchStandaloneBatchNorm,
      .rewrite = rewriteStandaloneBatchNorm,
      .obligation = u::bindNoModel(bnScaleShift, ScaleShiftBug::None),
      .mutants = {{"eps-dropped", "s = gamma/sqrt(var)", u::bindNoModel(bnScaleShift, ScaleShiftBug::EpsDropped)},
                  {"shift-sign-wrong", "shift = beta + mean*s", u::bindNoModel(bnScaleShift, ScaleShiftBug::ShiftSign)}},
      .foldsConstants = true,
  });
  return rules;
}

RuleDeclaration plantedBatchNormFoldWithoutEps() {
  // The eps-dropped mutant of conv-bn-fold, presented as if it were a rule: its rewrite really
  // drops eps, and its obligation is that (wrong) math, so the proof comes out Refuted.
  auto obligation = [](BnBug bug) { return u::bind(bnFold, std::string("conv-bn-fold"), std::string("conv"), bug); };
  return {
      .id = "test-planted-conv-bn-fold-without-eps",
      .summary = "TEST ONLY: conv + batch norm folded without eps (deliberately wrong)",
      .math = "BN(conv(x,W,b)) = conv(x, W*gamma/sqrt(var), ...)  (WRONG: eps dropped)",
      .phase = Phase::kFusion,
      .anchors = kBatchNormOps,
      .match = matchBatchNormFold(kConvOp),
      .rewrite = rewriteBatchNormFold(/*epsForgotten=*/true),
      .obligation = obligation(BnBug::EpsDropped),
      .mutants = {{"bias-not-rescaled", "b' = b + beta - gamma*s*mean", obligation(BnBug::BiasNotRescaled)}},
      .usesDot = true,
      .foldsConstants = true,
  };
}

}  // namespace verifuse::rules::families
