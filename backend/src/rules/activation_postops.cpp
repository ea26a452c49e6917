// Activation post-ops: an activation whose input is a single-use conv/linear joins that op's
// post-op chain, as the oneDNN eltwise attribute it is lowered to. Each rule proves that the
// PyTorch activation equals its exact oneDNN parameterization, element by element (y is one
// element of the fused op's output so far; post-ops compose in order).
//
//   relu(y) = eltwise_relu(y, 0)         gelu(y, 'none') = eltwise_gelu_erf(y)   ...
//   relu(y + z) = [sum(1), eltwise_relu(0)]   (residual-add-relu: relu after a sum post-op)
#include <limits>
#include <tuple>

#include "rules/families.h"
#include "rules/rule_util.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::hasOperands;
using ir::operand;
using verify::Expr;
using verify::ObligationBuilder;
using verify::ObligationFactory;
using verify::sem::DotModel;
namespace sem = verify::sem;
namespace dnnl = verify::sem::onednn;
namespace u = util;

const std::vector<std::string> kClampOps = {"aten::hardtanh", "aten::clamp", "aten::clamp_min", "aten::clamp_max"};

// ---- pattern -------------------------------------------------------------------------------------

/// The post-op an activation node maps to and the rule that proves the mapping.
struct ActivationMapping {
  PostOpSpec spec;
  std::string ruleId;
};

/// Why an activation has no post-op, and which rule's near miss that is.
struct Unmapped {
  std::string ruleId, reason;
};

std::optional<ActivationMapping> activationOf(const Node& n, Unmapped* unmapped) {
  auto simple = [](const char* kind, const char* rule) { return ActivationMapping{PostOpSpec{kind, {}}, rule}; };
  auto fail = [unmapped](const char* rule, const char* reason) -> std::optional<ActivationMapping> {
    if (unmapped) *unmapped = Unmapped{rule, reason};
    return std::nullopt;
  };
  const std::string& op = n.op;
  if (!n.overload.empty() && n.overload != "default") return std::nullopt;
  if (op == "aten::relu") return simple("relu", "conv-relu-postop");
  if (op == "aten::silu") return simple("silu", "conv-silu-postop");
  if (op == "aten::sigmoid") return simple("sigmoid", "conv-sigmoid-postop");
  if (op == "aten::tanh") return simple("tanh", "conv-tanh-postop");
  if (op == "aten::hardswish") return simple("hardswish", "conv-hardswish-postop");
  if (op == "aten::hardsigmoid") return simple("hardsigmoid", "conv-hardsigmoid-postop");
  if (op == "aten::leaky_relu" && hasOperands<ir::LeakyRelu>(n)) {
    auto slope = u::numberArg(operand(n, ir::LeakyRelu::negative_slope));
    if (!slope) return fail("conv-leaky-relu-postop", "leaky_relu's slope is not a number");
    return ActivationMapping{PostOpSpec{"leaky_relu", {*slope}}, "conv-leaky-relu-postop"};
  }
  if (op == "aten::gelu" && hasOperands<ir::Gelu>(n) && operand(n, ir::Gelu::approximate).kind == Arg::Kind::String) {
    const std::string& approximate = operand(n, ir::Gelu::approximate).s;
    if (approximate == "none") return simple("gelu_erf", "conv-gelu-erf-postop");
    if (approximate == "tanh") return simple("gelu_tanh", "conv-gelu-tanh-postop");
    return fail("conv-gelu-erf-postop", "gelu approximation is neither 'none' nor 'tanh'");
  }
  if (op == "aten::elu" && hasOperands<ir::Elu>(n)) {
    auto alpha = u::numberArg(operand(n, ir::Elu::alpha)), scale = u::numberArg(operand(n, ir::Elu::scale)),
         inScale = u::numberArg(operand(n, ir::Elu::input_scale));
    if (!alpha || !scale || !inScale) return fail("conv-elu-postop", "elu's parameters are not numbers");
    if (*scale != 1.0 || *inScale != 1.0) {
      return fail("conv-elu-postop", "elu with scale or input_scale != 1 has no oneDNN eltwise");
    }
    return ActivationMapping{PostOpSpec{"elu", {*alpha}}, "conv-elu-postop"};
  }
  const double inf = std::numeric_limits<double>::infinity();
  std::optional<double> lo, hi;
  // A None bound of clamp is no bound.
  auto bound = [](const Arg& b, double none) {
    return b.kind == Arg::Kind::None ? std::optional<double>(none) : u::numberArg(b);
  };
  if (op == "aten::hardtanh" && hasOperands<ir::Hardtanh>(n)) {
    lo = u::numberArg(operand(n, ir::Hardtanh::min_val));
    hi = u::numberArg(operand(n, ir::Hardtanh::max_val));
  } else if (op == "aten::clamp" && hasOperands<ir::Clamp>(n)) {
    lo = bound(operand(n, ir::Clamp::min), -inf);
    hi = bound(operand(n, ir::Clamp::max), inf);
  } else if (op == "aten::clamp_min" && hasOperands<ir::ClampMin>(n)) {
    lo = u::numberArg(operand(n, ir::ClampMin::min));
    hi = inf;
  } else if (op == "aten::clamp_max" && hasOperands<ir::ClampMax>(n)) {
    lo = -inf;
    hi = u::numberArg(operand(n, ir::ClampMax::max));
  } else {
    return std::nullopt;
  }
  if (!lo || !hi) return fail("conv-clamp-postop", "clamp bounds are not numbers");
  // torch's clamp with lo > hi gives hi everywhere; oneDNN's clip would give lo: not fused.
  if (*lo > *hi) return fail("conv-clamp-postop", "clamp with min > max (torch returns max, oneDNN's clip min)");
  std::string rule = "conv-clamp-postop";
  if (*lo == 0.0 && *hi == 6.0) rule = "conv-relu6-postop";
  else if (*lo == -1.0 && *hi == 1.0) rule = "conv-hardtanh-postop";
  return ActivationMapping{PostOpSpec{"clamp", {*lo, *hi}}, rule};
}

MatchFn matchActivation(std::string ruleId) {
  return [ruleId](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    const Node& n = g.node(id);
    Unmapped unmapped;
    auto mapping = activationOf(n, &unmapped);
    if (!mapping) {
      if (unmapped.ruleId == ruleId) u::why(whyNot, unmapped.reason);
      return std::nullopt;
    }
    // Every activation's input is its first operand, self.
    const Arg* input = n.args.empty() ? nullptr : &ir::selfOperand(n);
    const Node* p = input ? u::singleUseFusedProducer(g, *input) : nullptr;
    if (!p) {
      // An input that is not a conv/linear is not this pattern; one with other users is a near miss.
      const Node* producer = input ? u::producerOf(g, *input) : nullptr;
      if (mapping->ruleId == ruleId && producer && isFusedOp(*producer)) {
        u::why(whyNot, "the conv/linear output has other users");
      }
      return std::nullopt;
    }
    auto chain = fusedPostOps(*p);
    if (!chain.isOk()) return u::why(whyNot, "the conv/linear's post-ops do not parse"), std::nullopt;
    // After a sum post-op a relu is proved by the residual-add-relu obligation (post-op order).
    std::string effective = mapping->ruleId;
    if (!chain->empty() && chain->back().kind == "sum" && mapping->spec.kind == "relu") effective = "residual-add-relu";
    if (effective != ruleId) return std::nullopt;
    return Match{p->id, id, 0};
  };
}

Status rewriteActivation(Graph& g, const Match& m, FusionRecord&) {
  auto mapping = activationOf(g.node(m.consumer), nullptr);
  if (!mapping) return internalError("activation no longer matches");
  Node& p = g.mutableNode(m.anchor);
  VF_ASSIGN_OR_RETURN(std::vector<PostOpSpec> chain, fusedPostOps(p));
  chain.push_back(mapping->spec);
  if (!setFusedPostOps(p, chain)) return internalError("the conv/linear has no post_ops operand");
  return u::replaceWithProducer(g, m);
}

// ---- obligations -----------------------------------------------------------------------------------

using Unary = std::function<Expr(ObligationBuilder&, Expr)>;

/// torchOp(y) = onednnOp(y) for one element y of the fused op's output.
ObligationFactory postOp(const std::string& id, Unary torchOp, Unary onednnOp) {
  return [id, torchOp, onednnOp](const DotModel&) {
    ObligationBuilder ob(id);
    Expr y = ob.var("conv.out[o]");
    ob.prove("out[o]", torchOp(ob, y), onednnOp(ob, y));
    return ob.build();
  };
}

/// One activation rule: torch op == oneDNN eltwise, mutants = wrong oneDNN parameterizations.
RuleDeclaration postOpRule(std::string id, std::vector<std::string> anchors, std::string math, Unary torchOp,
                           Unary onednnOp, std::vector<std::tuple<std::string, std::string, Unary>> wrong) {
  std::vector<verify::Mutant> mutants;
  for (auto& [name, description, op] : wrong) mutants.push_back({name, description, postOp(id, torchOp, op)});
  return {
      .id = id,
      .summary = "activation after conv/linear -> oneDNN eltwise post-op",
      .math = std::move(math),
      .phase = Phase::kFusion,
      .anchors = std::move(anchors),
      // <activation>(%y) where %y is a single-use conv/linear (any post-ops so far): the activation
      // is appended to %y's post-op chain.
      .match = matchActivation(id),
      .rewrite = rewriteActivation,
      .obligation = postOp(id, torchOp, onednnOp),
      .mutants = std::move(mutants),
  };
}

// clamp(y, lo, hi) = eltwise_clip(lo, hi) needs the guard lo <= hi: for lo > hi torch returns hi,
// oneDNN returns lo.
ObligationFactory clampObligation(bool guard, int hiOffset) {
  return [guard, hiOffset](const DotModel&) {
    ObligationBuilder ob("conv-clamp-postop");
    Expr y = ob.var("conv.out[o]"), lo = ob.var("clamp.min"), hi = ob.var("clamp.max");
    if (guard) ob.assume(lo <= hi);
    ob.prove("out[o]", sem::clamp(y, lo, hi), dnnl::eltwiseClip(y, lo, hi + hiOffset));
    return ob.build();
  };
}

// relu(y + z) = post-ops [sum(scale=1), eltwise_relu(0)], in that order.
verify::Obligation residualRelu(bool swapped) {
  ObligationBuilder ob("residual-add-relu");
  Expr y = ob.var("conv.out[o]"), z = ob.var("residual[o]");
  Expr target = swapped ? dnnl::sumPostOp(z, dnnl::eltwiseRelu(y, 0), 1) : dnnl::eltwiseRelu(dnnl::sumPostOp(z, y, 1), 0);
  ob.prove("out[o]", sem::relu(sem::add(y, z)), target);
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> activationPostOps() {
  using u::q;
  std::vector<RuleDeclaration> rules;
  rules.push_back(postOpRule(
      "conv-relu-postop", {"aten::relu"}, "relu(y) = eltwise_relu(y, alpha=0)",
      [](ObligationBuilder&, Expr y) { return sem::relu(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 0); },
      {{"relu-alpha-wrong", "eltwise_relu with alpha=1 (identity)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 1); }}}));
  rules.push_back({
      .id = "residual-add-relu",
      .summary = "relu after a sum post-op -> eltwise_relu after the sum",
      .math = "relu(y + z) = post-ops [sum(1), eltwise_relu(0)]",
      .phase = Phase::kFusion,
      .anchors = {"aten::relu"},
      // relu(%y) where %y is a single-use conv/linear whose chain ends with sum(...).
      .match = matchActivation("residual-add-relu"),
      .rewrite = rewriteActivation,
      .obligation = u::bindNoModel(residualRelu, false),
      .mutants = {{"postop-order-swapped", "[eltwise_relu, sum]: z + relu(y)", u::bindNoModel(residualRelu, true)}},
  });
  rules.push_back(postOpRule(
      "conv-leaky-relu-postop", {"aten::leaky_relu"}, "leaky_relu(y, slope) = eltwise_relu(y, alpha=slope)",
      [](ObligationBuilder& ob, Expr y) { return sem::leakyRelu(y, ob.var("negative_slope")); },
      [](ObligationBuilder& ob, Expr y) { return dnnl::eltwiseRelu(y, ob.var("negative_slope")); },
      {{"leaky-alpha-dropped", "eltwise_relu with alpha=0 (plain relu)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseRelu(y, 0); }}}));
  rules.push_back(postOpRule(
      "conv-gelu-erf-postop", {"aten::gelu"}, "gelu(y, approximate='none') = eltwise_gelu_erf(y)",
      [](ObligationBuilder&, Expr y) { return sem::geluErf(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluErf(y); },
      {{"gelu-variant-swapped", "mapped to eltwise_gelu_tanh",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluTanh(y); }}}));
  rules.push_back(postOpRule(
      "conv-gelu-tanh-postop", {"aten::gelu"}, "gelu(y, approximate='tanh') = eltwise_gelu_tanh(y)",
      [](ObligationBuilder&, Expr y) { return sem::geluTanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluTanh(y); },
      {{"gelu-variant-swapped", "mapped to eltwise_gelu_erf",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseGeluErf(y); }}}));
  rules.push_back(postOpRule(
      "conv-silu-postop", {"aten::silu"}, "silu(y) = y*sigmoid(y) = eltwise_swish(y, alpha=1)",
      [](ObligationBuilder&, Expr y) { return sem::silu(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseSwish(y, 1); },
      {{"swish-alpha-wrong", "eltwise_swish with alpha=2",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseSwish(y, 2); }},
       {"mapped-to-logistic", "mapped to eltwise_logistic",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); }}}));
  rules.push_back(postOpRule(
      "conv-sigmoid-postop", {"aten::sigmoid"}, "sigmoid(y) = eltwise_logistic(y)",
      [](ObligationBuilder&, Expr y) { return sem::sigmoid(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); },
      {{"mapped-to-tanh", "mapped to eltwise_tanh",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseTanh(y); }}}));
  rules.push_back(postOpRule(
      "conv-tanh-postop", {"aten::tanh"}, "tanh(y) = eltwise_tanh(y)",
      [](ObligationBuilder&, Expr y) { return sem::tanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseTanh(y); },
      {{"mapped-to-logistic", "mapped to eltwise_logistic",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseLogistic(y); }}}));
  rules.push_back(postOpRule(
      "conv-hardswish-postop", {"aten::hardswish"}, "y*clamp(y+3,0,6)/6 = eltwise_hardswish(y, alpha=1/6, beta=1/2)",
      [](ObligationBuilder&, Expr y) { return sem::hardswish(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 6), q(1, 2)); },
      {{"hardswish-alpha-wrong", "eltwise_hardswish with alpha=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 3), q(1, 2)); }},
       {"hardswish-beta-wrong", "eltwise_hardswish with beta=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardswish(y, q(1, 6), q(1, 3)); }}}));
  rules.push_back(postOpRule(
      "conv-hardsigmoid-postop", {"aten::hardsigmoid"},
      "clamp(y/6+1/2,0,1) = eltwise_hardsigmoid(y, alpha=1/6, beta=1/2)",
      [](ObligationBuilder&, Expr y) { return sem::hardsigmoid(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardsigmoid(y, q(1, 6), q(1, 2)); },
      {{"hardsigmoid-alpha-wrong", "eltwise_hardsigmoid with alpha=1/3",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseHardsigmoid(y, q(1, 3), q(1, 2)); }}}));
  rules.push_back({
      .id = "conv-clamp-postop",
      .summary = "activation after conv/linear -> oneDNN eltwise post-op",
      .math = "clamp(y, lo, hi) = eltwise_clip(y, lo, hi)  if lo <= hi",
      .phase = Phase::kFusion,
      .anchors = kClampOps,
      // clamp/clamp_min/clamp_max/hardtanh(%y, lo, hi) with number bounds, lo <= hi (other than
      // (0, 6) and (-1, 1), which relu6 and hardtanh prove).
      .match = matchActivation("conv-clamp-postop"),
      .rewrite = rewriteActivation,
      .obligation = clampObligation(true, 0),
      .mutants = {{"clamp-bound-off-by-one", "eltwise_clip(lo, hi+1)", clampObligation(true, 1)},
                  {"clamp-guard-dropped", "no lo <= hi guard (torch gives hi, oneDNN lo)", clampObligation(false, 0)}},
  });
  rules.push_back(postOpRule(
      "conv-relu6-postop", kClampOps, "relu6(y) = hardtanh(y,0,6) = eltwise_clip(y, 0, 6)",
      [](ObligationBuilder&, Expr y) { return sem::relu6(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, 0, 6); },
      {{"clamp-bound-off-by-one", "eltwise_clip(0, 5)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, 0, 5); }}}));
  rules.push_back(postOpRule(
      "conv-hardtanh-postop", kClampOps, "hardtanh(y, -1, 1) = eltwise_clip(y, -1, 1)",
      [](ObligationBuilder&, Expr y) { return sem::hardtanh(y); },
      [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, -1, 1); },
      {{"clamp-bound-off-by-one", "eltwise_clip(-2, 1)",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseClip(y, -2, 1); }}}));
  rules.push_back(postOpRule(
      "conv-elu-postop", {"aten::elu"}, "elu(y, alpha) = eltwise_elu(y, alpha)",
      [](ObligationBuilder& ob, Expr y) { return sem::elu(y, ob.var("elu.alpha")); },
      [](ObligationBuilder& ob, Expr y) { return dnnl::eltwiseElu(y, ob.var("elu.alpha")); },
      {{"elu-alpha-dropped", "eltwise_elu with alpha=1",
        [](ObligationBuilder&, Expr y) { return dnnl::eltwiseElu(y, 1); }}}));
  return rules;
}

}  // namespace verifuse::rules::families
