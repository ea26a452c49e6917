// The int8 post-ops (rules/quantized.cpp describes the int8 rules and their integer semantics): an
// activation of an int8 op's float32 result becomes the op's oneDNN post-op, before any
// requantization; and a relu between a dequantize and a quantize with the same parameters becomes
// a max on the codes.
//
//   int8-relu-postop           relu(qconv f32)                             = qconv with the relu post-op
//   int8-clamp-postop          hardtanh/clamp(qconv f32, lo, hi), lo <= hi = qconv with the clip post-op (ReLU6)
//   int8-gelu-postop           gelu([view](qlinear f32))                   = [view](qlinear with the gelu post-op)
//   int8-relu-across-requant   q(relu(dq(xq, s, z)), s, z)                 = clamp_min(xq, z)
#include <limits>
#include <string>
#include <utility>

#include "rules/quantized_common.h"

namespace verifuse::rules::families {

namespace {

using namespace quantized;  // the shared pieces (quantized_common.h)

}  // namespace

// ---- int8-relu-postop -------------------------------------------------------------------------

namespace {

std::optional<Match> matchReluPostOp(const Graph& g, NodeId id, std::string*) {
  const Node& n = g.node(id);
  if (!hasOperands<ir::Unary>(n) || !n.overload.empty()) return std::nullopt;
  const Node* p = floatInt8Producer(g, selfOperand(n));
  if (!p || !hasNoFusedPostOps(*p)) return std::nullopt;
  return Match{p->id, id, 0};
}

Status rewriteReluPostOp(Graph& g, const Match& m, FusionRecord&) {
  Node& p = g.mutableNode(m.anchor);
  if (!setFusedPostOps(p, {PostOpSpec{"relu", {}}})) return internalError("int8-relu-postop: no post_ops operand");
  return u::replaceWithProducer(g, m);
}

enum class ReluBug { None, BeforeBias };

Obligation reluPostOp(ReluBug bug) {
  // relu(y) with y = sx*sw*acc + b, against the relu post-op on oneDNN's result.
  ObligationBuilder ob("int8-relu-postop");
  Expr s = ob.var("x.scale*w.scale[o]"), acc = ob.var("acc[o]"), b = ob.var("b[o]");
  ob.assume(s > 0);
  Expr tgt = bug == ReluBug::BeforeBias ? dnnl::eltwiseRelu(s * acc, 0) + b : dnnl::eltwiseRelu(s * acc + b, 0);
  ob.prove("out[o]", sem::relu(s * acc + b), tgt);
  return ob.build();
}

}  // namespace

RuleDeclaration int8ReluPostOp() {
  return {
      .id = "int8-relu-postop",
      .summary = "relu of an int8 op's f32 result -> its relu post-op (before any requantization)",
      .math = "relu(sx sw[o] acc + b) = eltwise_relu(sx sw[o] acc + b, 0)",
      .phase = Phase::kFusion,
      .anchors = {"aten::relu"},
      .match = matchReluPostOp,
      .rewrite = rewriteReluPostOp,
      .obligation = u::bindNoModel(reluPostOp, ReluBug::None),
      .mutants = {{"relu-before-bias", "relu on the scaled accumulator, bias added after",
                   u::bindNoModel(reluPostOp, ReluBug::BeforeBias)}},
  };
}

// ---- int8-clamp-postop ------------------------------------------------------------------------

namespace {

/// hardtanh(y, lo, hi) or clamp(y, lo?, hi?) (a missing bound is infinite) with number bounds.
std::optional<std::pair<double, double>> clampBounds(const Node& n, std::string* whyNot) {
  const bool clamp = n.op == "aten::clamp";
  if (!(clamp ? hasOperands<ir::Clamp>(n) : hasOperands<ir::Hardtanh>(n)) || !n.overload.empty()) return std::nullopt;
  const double inf = std::numeric_limits<double>::infinity();
  auto bound = [&](const Arg& a, double missing) -> std::optional<double> {
    if (clamp && a.kind == Arg::Kind::None) return missing;
    return u::numberArg(a);
  };
  auto lo = clamp ? bound(operand(n, ir::Clamp::min), -inf) : bound(operand(n, ir::Hardtanh::min_val), -inf);
  auto hi = clamp ? bound(operand(n, ir::Clamp::max), inf) : bound(operand(n, ir::Hardtanh::max_val), inf);
  if (!lo || !hi) return u::why(whyNot, "clamp bounds are not numbers"), std::nullopt;
  // torch's clamp with lo > hi gives hi everywhere, oneDNN's clip gives lo; NaN bounds neither.
  if (!(*lo <= *hi)) return u::why(whyNot, "clamp with min > max (or a NaN bound)"), std::nullopt;
  return std::make_pair(*lo, *hi);
}

std::optional<Match> matchClampPostOp(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.empty()) return std::nullopt;
  const Node* p = floatInt8Producer(g, selfOperand(n));
  if (!p || !hasNoFusedPostOps(*p)) return std::nullopt;
  if (!clampBounds(n, whyNot)) return std::nullopt;
  return Match{p->id, id, 0};
}

Status rewriteClampPostOp(Graph& g, const Match& m, FusionRecord&) {
  auto bounds = clampBounds(g.node(m.consumer), nullptr);
  if (!bounds) return internalError("int8-clamp-postop: match no longer holds");
  Node& p = g.mutableNode(m.anchor);
  if (!setFusedPostOps(p, {PostOpSpec{"clamp", {bounds->first, bounds->second}}})) {
    return internalError("int8-clamp-postop: no post_ops operand");
  }
  return u::replaceWithProducer(g, m);
}

enum class ClampBug { None, BeforeBias, BoundsUnchecked };

Obligation clampPostOp(ClampBug bug) {
  // clamp(y, lo, hi) (hardtanh, ReLU6) with y = sx*sw*acc + b, against oneDNN's eltwise_clip
  // post-op; the guard lo <= hi is an assumption (torch gives hi for lo > hi, oneDNN lo).
  ObligationBuilder ob("int8-clamp-postop");
  Expr s = ob.var("x.scale*w.scale[o]"), acc = ob.var("acc[o]"), b = ob.var("b[o]");
  Expr lo = ob.var("clamp.min"), hi = ob.var("clamp.max");
  ob.assume(s > 0);
  if (bug != ClampBug::BoundsUnchecked) ob.assume(lo <= hi);
  Expr tgt = bug == ClampBug::BeforeBias ? dnnl::eltwiseClip(s * acc, lo, hi) + b : dnnl::eltwiseClip(s * acc + b, lo, hi);
  ob.prove("out[o]", sem::clamp(s * acc + b, lo, hi), tgt);
  return ob.build();
}

}  // namespace

RuleDeclaration int8ClampPostOp() {
  return {
      .id = "int8-clamp-postop",
      .summary = "hardtanh / clamp (ReLU6) of an int8 op's f32 result -> its clip post-op (before any requantization)",
      .math = "clamp(sx sw[o] acc + b, lo, hi) = eltwise_clip(sx sw[o] acc + b, lo, hi), lo <= hi",
      .phase = Phase::kFusion,
      .anchors = {"aten::hardtanh", "aten::clamp"},
      .match = matchClampPostOp,
      .rewrite = rewriteClampPostOp,
      .obligation = u::bindNoModel(clampPostOp, ClampBug::None),
      .mutants = {{"clamp-before-bias", "clip on the scaled accumulator, bias added after",
                   u::bindNoModel(clampPostOp, ClampBug::BeforeBias)},
                  {"clamp-bounds-unchecked", "min > max fused (torch returns max, oneDNN's clip min)",
                   u::bindNoModel(clampPostOp, ClampBug::BoundsUnchecked)}},
  };
}

// ---- int8-gelu-postop -------------------------------------------------------------------------

namespace {

std::optional<Match> matchGeluPostOp(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<ir::Gelu>(n)) return std::nullopt;
  const Arg& approximate = operand(n, ir::Gelu::approximate);
  if (approximate.kind != Arg::Kind::String) return std::nullopt;
  const Node* view = nullptr;
  const Node* p = floatInt8ProducerThroughView(g, operand(n, ir::Gelu::self), &view);
  if (!p || !hasNoFusedPostOps(*p)) return std::nullopt;
  if (approximate.s != "none" && approximate.s != "tanh") {
    return u::why(whyNot, "gelu approximation is neither 'none' nor 'tanh'"), std::nullopt;
  }
  return Match{p->id, id, 0};
}

Status rewriteGeluPostOp(Graph& g, const Match& m, FusionRecord&) {
  const Node& gelu = g.node(m.consumer);
  const std::string kind = operand(gelu, ir::Gelu::approximate).s == "tanh" ? "gelu_tanh" : "gelu_erf";
  const ValueId input = u::valueOf(operand(gelu, ir::Gelu::self));  // the int8 op's result, or its view
  Node& p = g.mutableNode(m.anchor);
  if (!setFusedPostOps(p, {PostOpSpec{kind, {}}})) return internalError("int8-gelu-postop: no post_ops operand");
  g.replaceAllUses(g.node(m.consumer).outputs[0], input);
  g.eraseNode(m.consumer);
  return Status::ok();
}

enum class GeluBug { None, VariantSwapped, BeforeBias };

// gelu(y) with y = sx*sw*acc + b against oneDNN's gelu post-op, for approximate='none' (erf) and
// 'tanh'; and gelu(view(y)) = view(gelu(y)) on an explicit [2, 3, 2] -> [6, 2] tensor (the rule
// fuses through BERT's view back to [batch, seq, features]).
Obligation geluPostOp(GeluBug bug) {
  ObligationBuilder ob("int8-gelu-postop");
  Expr s = ob.var("x.scale*w.scale[o]"), acc = ob.var("acc[o]"), b = ob.var("b[o]");
  ob.assume(s > 0);
  Expr y = s * acc + b;
  Expr erfTarget = bug == GeluBug::VariantSwapped ? dnnl::eltwiseGeluTanh(y)
                   : bug == GeluBug::BeforeBias   ? dnnl::eltwiseGeluErf(s * acc) + b
                                                  : dnnl::eltwiseGeluErf(y);
  ob.prove("out[o] (erf)", sem::geluErf(y), erfTarget);
  ob.prove("out[o] (tanh)", sem::geluTanh(y),
           bug == GeluBug::VariantSwapped ? dnnl::eltwiseGeluErf(y) : dnnl::eltwiseGeluTanh(y));
  using sem::ElementTensor;
  const ElementTensor yt = ElementTensor::variables("y", {2, 3, 2});
  auto gelu = [](const ElementTensor& t) {
    return ElementTensor::fromFunction(t.sizes(), [t](const sem::Index& i) { return sem::geluErf(t.at(i)); });
  };
  sem::proveElementwise(ob, "view", gelu(sem::view(yt, {6, 2}, "undefined-view")),
                        sem::view(gelu(yt), {6, 2}, "undefined-view"));
  return ob.build();
}

}  // namespace

RuleDeclaration int8GeluPostOp() {
  return {
      .id = "int8-gelu-postop",
      .summary = "gelu (erf or tanh) of an int8 op's f32 result, through a view -> its gelu post-op",
      .math = "gelu(view(sx sw[o] acc + b)) = view(eltwise_gelu(sx sw[o] acc + b)), erf and tanh forms",
      .phase = Phase::kFusion,
      .anchors = {"aten::gelu"},
      .match = matchGeluPostOp,
      .rewrite = rewriteGeluPostOp,
      .obligation = u::bindNoModel(geluPostOp, GeluBug::None),
      .mutants = {{"gelu-variant-swapped", "erf mapped to eltwise_gelu_tanh and tanh to gelu_erf",
                   u::bindNoModel(geluPostOp, GeluBug::VariantSwapped)},
                  {"gelu-before-bias", "gelu on the scaled accumulator, bias added after",
                   u::bindNoModel(geluPostOp, GeluBug::BeforeBias)}},
  };
}

// ---- int8-relu-across-requant -----------------------------------------------------------------

namespace {

std::optional<Match> matchReluAcrossRequant(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.empty()) return std::nullopt;
  const Node* relu = u::producerOf(g, operand(n, ir::QuantizePerTensor::input));
  if (!relu || relu->op != "aten::relu" || !hasOperands<ir::Unary>(*relu)) return std::nullopt;
  auto x = dequantizedInput(g, selfOperand(*relu), whyNot);
  if (!x) return std::nullopt;
  auto q = tensorQParams(n, whyNot);
  if (!q) return std::nullopt;
  if (q->scale != x->scale || q->zeroPoint != x->zeroPoint || q->dtype != x->dtype || q->qmin != x->qmin ||
      q->qmax != x->qmax) {
    return u::why(whyNot, "quantize and dequantize around the relu differ in scale, zero point or range"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteReluAcrossRequant(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Node* relu = u::producerOf(g, operand(n, ir::QuantizePerTensor::input));
  auto x = dequantizedInput(g, selfOperand(*relu), nullptr);
  if (!x) return internalError("int8-relu-across-requant: match no longer holds");
  n.op = "aten::clamp_min";
  n.overload = "";
  n.args = OperandsOf<ir::ClampMin>()
               .set(ir::ClampMin::self, x->input)
               .set(ir::ClampMin::min, Arg::integer(x->zeroPoint))
               .take();
  return Status::ok();
}

enum class AcrossBug { None, ZeroPointIgnored };

// q(relu(dq(x, s, z)), s, z) = max(x, z): goal 1 rescales (relu(s*(x - z)) * (1/s) = relu(x - z),
// s > 0), goal 2 the code, x an integer code in the dtype's range.
Obligation reluAcrossRequant(AcrossBug bug) {
  ObligationBuilder ob("int8-relu-across-requant");
  Expr s = ob.var("scale"), xr = ob.var("x.real"), zr = ob.var("zero_point.real");
  ob.assume(s > 0);
  Expr inv = ob.fresh("1/scale", [&](Expr r) { return std::vector<Expr>{r * s == 1}; });
  ob.prove("t", sem::relu(s * (xr - zr)) * inv, sem::relu(xr - zr));
  Expr x = ob.var("x", Sort::Int), z = ob.var("zero_point", Sort::Int);
  Expr qmin = ob.var("qmin", Sort::Int), qmax = ob.var("qmax", Sort::Int);
  ob.assume(qmin <= x).assume(x <= qmax).assume(qmin <= z).assume(z <= qmax);
  Expr source = sem::clamp(roundHalfEven(ob, sem::relu(x - z), "round(relu(x - z))") + z, qmin, qmax);
  ob.prove("q", source, Expr::max(x, bug == AcrossBug::ZeroPointIgnored ? Expr::integer(0) : z));
  return ob.build();
}

}  // namespace

RuleDeclaration int8ReluAcrossRequant() {
  return {
      .id = "int8-relu-across-requant",
      .summary = "q(relu(dq(x, s, z)), s, z) -> max(x, z) on the integer codes",
      .math = "clamp(round(relu(s (x - z)) / s) + z, qmin, qmax) = max(x, z)",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchReluAcrossRequant,
      .rewrite = rewriteReluAcrossRequant,
      .obligation = u::bindNoModel(reluAcrossRequant, AcrossBug::None),
      .mutants = {{"relu-across-nonzero-zero-point", "max(x, 0): relu moved onto the codes ignoring the zero point",
                   u::bindNoModel(reluAcrossRequant, AcrossBug::ZeroPointIgnored)}},
  };
}

}  // namespace verifuse::rules::families
