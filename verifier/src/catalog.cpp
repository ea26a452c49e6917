// The built-in catalogue of rule obligations and their mutants.
//
// Each family is a plain function `Obligation f(const DotModel&, Bug)` so that the fusion engineer
// can move it next to its rule (backend/src/rules/...) and keep the RuleProof entry there; nothing
// in this file is needed by the prover itself.
#include "verifuse/verify/catalog.h"

namespace verifuse::verify {

namespace {

using sem::DotModel;
using sem::TensorTerm;

// --- conv/linear + BN folding -------------------------------------------------------------------
// Math:  BN(dot(W,X) + b) = gamma*(dot(W,X) + b - mean)*r + beta,  r = 1/sqrt(var + eps)
//                         = dot(s*W, X) + (b - mean)*s + beta,     s = gamma*r   (per output channel o)
enum class BnBug { None, EpsDropped, BiasNotRescaled, WrongChannelAxis, TrainingMode };

Obligation bnFold(const std::string& id, const std::string& layer, const DotModel& m, BnBug bug) {
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

  Expr s = bn.gamma * sem::batchNormRsqrt(ob, bn);
  Expr weightScale = s;
  Expr bias = (b - bn.mean) * s + bn.beta;
  switch (bug) {
    case BnBug::EpsDropped: {
      Expr r0 = sem::rsqrt(ob, bn.var, "rsqrt(bn.running_var[o])");
      weightScale = bn.gamma * r0;
      bias = (b - bn.mean) * weightScale + bn.beta;
      break;
    }
    case BnBug::BiasNotRescaled:
      bias = b + bn.beta - s * bn.mean;
      break;
    case BnBug::WrongChannelAxis: {
      // The weight is scaled by the BN parameters of input channel i instead of output channel o.
      sem::BatchNormParams in = sem::batchNormParams("bn", "i");
      sem::assumeBatchNorm(ob, in);
      weightScale = in.gamma * sem::batchNormRsqrt(ob, in);
      break;
    }
    default:
      break;
  }
  Expr target = m.linear(ob, m.scale(weightScale, w), x, bias);
  ob.prove("out[o]", source, target);
  return ob.build();
}

RuleProof bnFoldRule(const std::string& id, const std::string& layer) {
  auto make = [id, layer](BnBug bug) {
    return [id, layer, bug](const DotModel& m) { return bnFold(id, layer, m, bug); };
  };
  RuleProof r;
  r.ruleId = id;
  r.math = "BN(" + layer + "(x,W,b)) = " + layer +
           "(x, W*s, (b-mean)*s + beta), s = gamma/sqrt(var+eps), per output channel";
  r.build = make(BnBug::None);
  r.usesDot = true;
  r.mutants = {
      {"eps-dropped", "scale computed as gamma/sqrt(var) (eps forgotten)", make(BnBug::EpsDropped)},
      {"bias-not-rescaled", "b' = b + beta - gamma*s*mean (conv bias not multiplied by s)",
       make(BnBug::BiasNotRescaled)},
      {"wrong-channel-axis", "weight scaled by the BN parameters of the input channel",
       make(BnBug::WrongChannelAxis)},
      {"training-mode-bn", "folding a training-mode BN (batch statistics != running statistics)",
       make(BnBug::TrainingMode)},
  };
  return r;
}

// bn-to-scale-shift: BN(x) = x*s + (beta - mean*s), s = gamma*r.
enum class ScaleShiftBug { None, EpsDropped, ShiftSign };

Obligation bnScaleShift(ScaleShiftBug bug) {
  ObligationBuilder ob("bn-to-scale-shift");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "c");
  sem::assumeBatchNorm(ob, bn);
  Expr x = ob.var("x[c]");
  Expr r = bug == ScaleShiftBug::EpsDropped ? sem::rsqrt(ob, bn.var, "rsqrt(bn.running_var[c])")
                                            : sem::batchNormRsqrt(ob, bn);
  Expr scale = bn.gamma * r;
  Expr shift = bug == ScaleShiftBug::ShiftSign ? bn.beta + bn.mean * scale : bn.beta - bn.mean * scale;
  ob.prove("out[c]", sem::batchNormEval(ob, x, bn), x * scale + shift);
  return ob.build();
}

// conv-bn-relu-fold: relu(BN(conv(x))) = oneDNN conv' with eltwise_relu(alpha=0).
Obligation bnReluFold(const DotModel& m, bool biasBug) {
  ObligationBuilder ob("conv-bn-relu-fold");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "o");
  sem::assumeBatchNorm(ob, bn);
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]");
  Expr source = sem::relu(sem::batchNormEval(ob, m.linear(ob, w, x, b), bn));
  Expr s = bn.gamma * sem::batchNormRsqrt(ob, bn);
  Expr bias = biasBug ? b + bn.beta - s * bn.mean : (b - bn.mean) * s + bn.beta;
  ob.prove("out[o]", source, sem::onednn::eltwiseRelu(m.linear(ob, m.scale(s, w), x, bias), 0));
  return ob.build();
}

// --- post-ops: PyTorch activation == oneDNN eltwise attribute ------------------------------------
// The convolution is unchanged by these rules; y is one element of its (pre-activation) output.
using Unary = std::function<Expr(ObligationBuilder&, Expr)>;

ObligationFactory postOp(const std::string& id, Unary torchOp, Unary onednnOp) {
  return [id, torchOp, onednnOp](const DotModel&) {
    ObligationBuilder ob(id);
    Expr y = ob.var("conv.out[o]");
    ob.prove("out[o]", torchOp(ob, y), onednnOp(ob, y));
    return ob.build();
  };
}

RuleProof postOpRule(const std::string& id, const std::string& math, Unary torchOp, Unary onednnOp,
                     std::vector<std::tuple<std::string, std::string, Unary>> mutants) {
  RuleProof r;
  r.ruleId = id;
  r.math = math;
  r.build = postOp(id, torchOp, onednnOp);
  for (auto& [name, description, wrong] : mutants) {
    r.mutants.push_back({name, description, postOp(id, torchOp, wrong)});
  }
  return r;
}

Expr q(long long n, long long d) { return Expr::rational(n, d); }

std::vector<RuleProof> postOpRules() {
  namespace dnnl = sem::onednn;
  std::vector<RuleProof> rules;
  rules.push_back(postOpRule(
      "conv-relu-postop", "relu(y) = eltwise_relu(y, alpha=0)",
      [](ObligationBuilder&, Expr y) { return sem::relu(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 0); },
      {{"relu-alpha-wrong", "eltwise_relu with alpha=1 (identity)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 1); }}}));
  rules.push_back(postOpRule(
      "conv-leaky-relu-postop", "leaky_relu(y, slope) = eltwise_relu(y, alpha=slope)",
      [](ObligationBuilder& ob, Expr y) { return sem::leakyRelu(y, ob.var("negative_slope")); },
      [](ObligationBuilder& ob, Expr y) { return dnnl::eltwiseRelu(y, ob.var("negative_slope")); },
      {{"leaky-alpha-dropped", "eltwise_relu with alpha=0 (plain relu)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 0); }}}));
  rules.push_back(postOpRule(
      "conv-gelu-erf-postop", "gelu(y, approximate='none') = eltwise_gelu_erf(y)",
      [](ObligationBuilder&, Expr y) { return sem::geluErf(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluErf(y); },
      {{"gelu-variant-swapped", "mapped to eltwise_gelu_tanh",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluTanh(y); }}}));
  rules.push_back(postOpRule(
      "conv-gelu-tanh-postop", "gelu(y, approximate='tanh') = eltwise_gelu_tanh(y)",
      [](ObligationBuilder&, Expr y) { return sem::geluTanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluTanh(y); },
      {{"gelu-variant-swapped", "mapped to eltwise_gelu_erf",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluErf(y); }}}));
  rules.push_back(postOpRule(
      "conv-silu-postop", "silu(y) = y*sigmoid(y) = eltwise_swish(y, alpha=1)",
      [](ObligationBuilder&, Expr y) { return sem::silu(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseSwish(y, 1); },
      {{"swish-alpha-wrong", "eltwise_swish with alpha=2",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseSwish(y, 2); }},
       {"mapped-to-logistic", "mapped to eltwise_logistic",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); }}}));
  rules.push_back(postOpRule(
      "conv-sigmoid-postop", "sigmoid(y) = eltwise_logistic(y)",
      [](ObligationBuilder&, Expr y) { return sem::sigmoid(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); },
      {{"mapped-to-tanh", "mapped to eltwise_tanh",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseTanh(y); }}}));
  rules.push_back(postOpRule(
      "conv-tanh-postop", "tanh(y) = eltwise_tanh(y)",
      [](ObligationBuilder&, Expr y) { return sem::tanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseTanh(y); },
      {{"mapped-to-logistic", "mapped to eltwise_logistic",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); }}}));
  rules.push_back(postOpRule(
      "conv-hardswish-postop", "y*clamp(y+3,0,6)/6 = eltwise_hardswish(y, alpha=1/6, beta=1/2)",
      [](ObligationBuilder&, Expr y) { return sem::hardswish(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 6), q(1, 2)); },
      {{"hardswish-alpha-wrong", "eltwise_hardswish with alpha=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 3), q(1, 2)); }},
       {"hardswish-beta-wrong", "eltwise_hardswish with beta=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 6), q(1, 3)); }}}));
  rules.push_back(postOpRule(
      "conv-hardsigmoid-postop", "clamp(y/6+1/2,0,1) = eltwise_hardsigmoid(y, alpha=1/6, beta=1/2)",
      [](ObligationBuilder&, Expr y) { return sem::hardsigmoid(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardsigmoid(y, q(1, 6), q(1, 2)); },
      {{"hardsigmoid-alpha-wrong", "eltwise_hardsigmoid with alpha=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardsigmoid(y, q(1, 3), q(1, 2)); }}}));
  {
    // clamp(y, lo, hi) = eltwise_clip(lo, hi) needs the guard lo <= hi: for lo > hi torch returns hi,
    // oneDNN returns lo.
    auto build = [](bool guard, int hiOffset) -> ObligationFactory {
      return [guard, hiOffset](const DotModel&) {
        ObligationBuilder ob("conv-clamp-postop");
        Expr y = ob.var("conv.out[o]"), lo = ob.var("clamp.min"), hi = ob.var("clamp.max");
        if (guard) ob.assume(lo <= hi);
        ob.prove("out[o]", sem::clamp(y, lo, hi), sem::onednn::eltwiseClip(y, lo, hi + hiOffset));
        return ob.build();
      };
    };
    RuleProof r;
    r.ruleId = "conv-clamp-postop";
    r.math = "clamp(y, lo, hi) = eltwise_clip(y, lo, hi)  if lo <= hi";
    r.build = build(true, 0);
    r.mutants = {{"clamp-bound-off-by-one", "eltwise_clip(lo, hi+1)", build(true, 1)},
                 {"clamp-guard-dropped", "no lo <= hi guard (torch gives hi, oneDNN lo)", build(false, 0)}};
    rules.push_back(r);
  }
  rules.push_back(postOpRule(
      "conv-relu6-postop", "relu6(y) = hardtanh(y,0,6) = eltwise_clip(y, 0, 6)",
      [](ObligationBuilder&, Expr y) { return sem::relu6(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, 0, 6); },
      {{"clamp-bound-off-by-one", "eltwise_clip(0, 5)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, 0, 5); }}}));
  rules.push_back(postOpRule(
      "conv-hardtanh-postop", "hardtanh(y, -1, 1) = eltwise_clip(y, -1, 1)",
      [](ObligationBuilder&, Expr y) { return sem::hardtanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, -1, 1); },
      {{"clamp-bound-off-by-one", "eltwise_clip(-2, 1)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, -2, 1); }}}));
  rules.push_back(postOpRule(
      "conv-elu-postop", "elu(y, alpha) = eltwise_elu(y, alpha)",
      [](ObligationBuilder& ob, Expr y) { return sem::elu(y, ob.var("elu.alpha")); },
      [](ObligationBuilder& ob, Expr y) { return dnnl::eltwiseElu(y, ob.var("elu.alpha")); },
      {{"elu-alpha-dropped", "eltwise_elu with alpha=1",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseElu(y, 1); }}}));
  return rules;
}

// --- residual add -------------------------------------------------------------------------------
// add(y, z, alpha) = y + alpha*z = sum post-op with dst_prev = z (the residual), scale = alpha.
Obligation residualSum(bool wrongScale) {
  ObligationBuilder ob("residual-add-sum-postop");
  Expr y = ob.var("conv.out[o]"), z = ob.var("residual[o]"), alpha = ob.var("add.alpha");
  ob.prove("out[o]", sem::add(y, z, alpha), sem::onednn::sumPostOp(z, y, wrongScale ? Expr(1) : alpha));
  return ob.build();
}

// relu(y + z) = post-ops [sum(scale=1), eltwise_relu(0)], in that order.
Obligation residualRelu(bool swapped) {
  ObligationBuilder ob("residual-add-relu");
  Expr y = ob.var("conv.out[o]"), z = ob.var("residual[o]");
  Expr target = swapped ? sem::onednn::sumPostOp(z, sem::onednn::eltwiseRelu(y, 0), 1)
                        : sem::onednn::eltwiseRelu(sem::onednn::sumPostOp(z, y, 1), 0);
  ob.prove("out[o]", sem::relu(sem::add(y, z)), target);
  return ob.build();
}

// --- per-channel binary folds -------------------------------------------------------------------
enum class FoldBug { None, BiasNotScaled, WrongChannelAxis, Dropped };

// (dot(W,X) + b) * c[o] = dot(c[o]*W, X) + b*c[o]
Obligation mulFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-mul-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), c = ob.var("mul.other[o]"), ci = ob.var("mul.other[i]");
  Expr source = m.linear(ob, w, x, b) * c;
  Expr wscale = bug == FoldBug::WrongChannelAxis ? ci : c;
  Expr bias = bug == FoldBug::BiasNotScaled ? b : b * c;
  ob.prove("out[o]", source, m.linear(ob, m.scale(wscale, w), x, bias));
  return ob.build();
}

// dot(W,X) + b + a[o] = dot(W,X) + (b + a[o])
Obligation addFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-add-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), a = ob.var("add.other[o]"), ai = ob.var("add.other[i]");
  Expr source = m.linear(ob, w, x, b) + a;
  Expr bias = bug == FoldBug::WrongChannelAxis ? b + ai : bug == FoldBug::Dropped ? b : b + a;
  ob.prove("out[o]", source, m.linear(ob, w, x, bias));
  return ob.build();
}

// (dot(W,X) + b) / d[o] = dot((1/d[o])*W, X) + b/d[o]; the source's division makes d[o] != 0 a
// definedness condition, which the target inherits.
Obligation divFold(const DotModel& m, FoldBug bug) {
  ObligationBuilder ob("per-channel-div-fold");
  TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), d = ob.var("div.other[o]");
  Expr source = m.linear(ob, w, x, b) / d;
  Expr bias = bug == FoldBug::BiasNotScaled ? b : b / d;
  ob.prove("out[o]", source, m.linear(ob, m.scale(1 / d, w), x, bias));
  return ob.build();
}

// --- dropout ------------------------------------------------------------------------------------
// Eval-mode dropout is the identity. The mutant uses training semantics: keep ? x/(1-p) : 0.
Obligation dropout(bool training) {
  ObligationBuilder ob("dropout-eval-identity");
  Expr x = ob.var("x"), p = ob.var("dropout.p"), keep = ob.var("dropout.mask", Sort::Bool);
  ob.assume(p >= 0).assume(p < 1);
  Expr source = training ? sem::dropoutTrain(x, p, keep) : sem::dropoutEval(x);
  ob.prove("out", source, x);
  return ob.build();
}

template <typename F, typename... A>
ObligationFactory bind(F f, A... args) {
  return [f, args...](const DotModel& m) { return f(m, args...); };
}

template <typename F, typename... A>
ObligationFactory bindNoModel(F f, A... args) {
  return [f, args...](const DotModel&) { return f(args...); };
}

}  // namespace

std::vector<RuleProof> builtinRuleProofs() {
  std::vector<RuleProof> rules;
  rules.push_back(bnFoldRule("conv-bn-fold", "conv"));
  rules.push_back(bnFoldRule("linear-bn-fold", "linear"));
  rules.push_back({"bn-to-scale-shift",
                   "BN(x) = x*s + (beta - mean*s), s = gamma/sqrt(var+eps)",
                   bindNoModel(bnScaleShift, ScaleShiftBug::None),
                   false,
                   {{"eps-dropped", "s = gamma/sqrt(var)", bindNoModel(bnScaleShift, ScaleShiftBug::EpsDropped)},
                    {"shift-sign-wrong", "shift = beta + mean*s", bindNoModel(bnScaleShift, ScaleShiftBug::ShiftSign)}}});
  rules.push_back({"conv-bn-relu-fold",
                   "relu(BN(conv(x))) = conv'(x) with eltwise_relu(0), conv' the BN-folded conv",
                   bind(bnReluFold, false),
                   true,
                   {{"bias-not-rescaled", "b' = b + beta - s*mean", bind(bnReluFold, true)}}});
  for (RuleProof& r : postOpRules()) rules.push_back(std::move(r));
  rules.push_back({"residual-add-sum-postop",
                   "add(y, z, alpha) = sum post-op: alpha*z + y (dst_prev = z)",
                   bindNoModel(residualSum, false),
                   false,
                   {{"sum-scale-wrong", "sum post-op scale 1 instead of alpha", bindNoModel(residualSum, true)}}});
  rules.push_back({"residual-add-relu",
                   "relu(y + z) = post-ops [sum(1), eltwise_relu(0)]",
                   bindNoModel(residualRelu, false),
                   false,
                   {{"postop-order-swapped", "[eltwise_relu, sum]: z + relu(y)", bindNoModel(residualRelu, true)}}});
  rules.push_back({"per-channel-mul-fold",
                   "(conv(x,W,b)) * c[o] = conv(x, c[o]*W, c[o]*b)",
                   bind(mulFold, FoldBug::None),
                   true,
                   {{"bias-not-scaled", "b' = b", bind(mulFold, FoldBug::BiasNotScaled)},
                    {"wrong-channel-axis", "W scaled by c[i] (input channel)", bind(mulFold, FoldBug::WrongChannelAxis)}}});
  rules.push_back({"per-channel-add-fold",
                   "conv(x,W,b) + a[o] = conv(x, W, b + a[o])",
                   bind(addFold, FoldBug::None),
                   true,
                   {{"wrong-channel-axis", "b' = b + a[i]", bind(addFold, FoldBug::WrongChannelAxis)},
                    {"add-dropped", "b' = b", bind(addFold, FoldBug::Dropped)}}});
  rules.push_back({"per-channel-div-fold",
                   "conv(x,W,b) / d[o] = conv(x, W/d[o], b/d[o])   (d[o] != 0 from the source)",
                   bind(divFold, FoldBug::None),
                   true,
                   {{"bias-not-divided", "b' = b", bind(divFold, FoldBug::BiasNotScaled)}}});
  rules.push_back({"dropout-eval-identity",
                   "dropout(x, p, train=False) = x",
                   bindNoModel(dropout, false),
                   false,
                   {{"dropout-training-mode", "training dropout: mask ? x/(1-p) : 0 is not the identity",
                     bindNoModel(dropout, true)}}});
  return rules;
}

}  // namespace verifuse::verify
