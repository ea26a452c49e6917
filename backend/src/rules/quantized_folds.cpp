// The int8 folds (rules/quantized.cpp describes the int8 rules and their integer semantics): a
// convolution or linear of dequantized u8/s8 activations and s8 per-channel weights becomes the
// int8 op with a float32 result, oneDNN's s32 accumulation with the source zero point and the
// folded output scale sx * sw[o]; and the test-only planted rule that drops the zero point.
//
//   int8-conv-dequant          conv(dq(xq, sx, zx), dq_ch(Wq, sw, 0), b)  = qconv(xq, Wq, b) -> f32
//   int8-linear-dequant        addmm(b, dq(xq), permute(dq_ch(Wq)))        = qlinear(xq, Wq, b) -> f32
#include <string>
#include <vector>

#include "rules/quantized_common.h"

namespace verifuse::rules::families {

namespace {

using namespace quantized;  // the shared pieces (quantized_common.h)

// ---- what both folds share: the weight, the int8 op's arguments, the obligation ----------------

/// Every element of a constant with data satisfies \p ok (f32/f64 scales, i64/i32 zero points);
/// a constant without data (parsed from text) is not checked.
template <typename F>
bool allElements(const ConstantTensor& c, F ok) {
  if (!c.data) return !c.hasData();  // lazily folded constants never hold quantization parameters
  if (!c.isContiguous()) return false;
  const int64_t n = c.numel();
  for (int64_t k = 0; k < n; ++k) {
    double v;
    switch (c.dtype) {
      case DType::Float32: v = static_cast<const float*>(c.data)[k]; break;
      case DType::Float64: v = static_cast<const double*>(c.data)[k]; break;
      case DType::Int64: v = static_cast<double>(static_cast<const int64_t*>(c.data)[k]); break;
      case DType::Int32: v = static_cast<const int32_t*>(c.data)[k]; break;
      default: return false;
    }
    if (!ok(v)) return false;
  }
  return true;
}

/// dequantize_per_channel(Wq, scales, zps, axis, qmin, qmax, dtype[, out_dtype]) of a constant s8
/// weight with positive finite scales and zero points 0, along axis 0.
struct ChannelWeight {
  Arg weight, scales, zeroPoints;
};

using DQC = ir::DequantizePerChannel;

std::optional<ChannelWeight> dequantizedWeight(const Graph& g, const Arg& a, int64_t outChannels, std::string* whyNot) {
  const Node* dq = u::producerOf(g, a);
  // Every operand up to dtype; out_dtype may be left out.
  if (!dq || dq->op != kDequantizeChannel || dq->args.size() <= DQC::dtype) return std::nullopt;
  const Arg &weight = operand(*dq, DQC::input), &scales = operand(*dq, DQC::scales);
  const Arg& zeroPoints = operand(*dq, DQC::zero_points);
  const ConstantTensor* w = constantOf(g, weight);
  const ConstantTensor* s = constantOf(g, scales);
  const ConstantTensor* z = constantOf(g, zeroPoints);
  if (!w || w->dtype != DType::Int8 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a frozen contiguous s8 constant"), std::nullopt;
  }
  auto isInt = [](const Arg& x, int64_t v) { return x.kind == Arg::Kind::Int && x.i == v; };
  const Arg& dtype = operand(*dq, DQC::dtype);
  const Arg* outDtype = namedOperand(*dq, "out_dtype");
  if (!isInt(operand(*dq, DQC::axis), 0) || !isInt(operand(*dq, DQC::quant_min), -128) ||
      !isInt(operand(*dq, DQC::quant_max), 127) || dtype.kind != Arg::Kind::DTypeTag ||
      static_cast<DType>(dtype.i) != DType::Int8 || (outDtype && outDtype->kind != Arg::Kind::None)) {
    return u::why(whyNot, "weight quantization is not s8 [-128, 127] per output channel (axis 0)"), std::nullopt;
  }
  if (!s || s->numel() != outChannels || s->sizes.size() != 1) {
    return u::why(whyNot, "weight scales are not a constant with one scale per output channel"), std::nullopt;
  }
  if (!allElements(*s, goodScale)) {
    return u::why(whyNot, "a weight scale is zero, negative, NaN or infinite: no integer meaning"), std::nullopt;
  }
  if (!z || z->numel() != outChannels || !allElements(*z, [](double v) { return v == 0; })) {
    return u::why(whyNot, "weight zero points are not all 0 (oneDNN's s8 weights are symmetric)"), std::nullopt;
  }
  return ChannelWeight{weight, scales, zeroPoints};
}

/// The bias: None or a float32 constant.
bool biasOk(const Graph& g, const Arg& b) { return b.kind == Arg::Kind::None || u::f32Constant(g, b) != nullptr; }

/// The operands qconv and qlinear (Q = ir::QConv, ir::QLinear) share after their own geometry: the
/// float32 form (no post-ops, no requantization: y_dtype None; no residual).
template <class Q>
void setQuantOperands(OperandsOf<Q>& ops, const TensorQParams& x, const ChannelWeight& w) {
  ops.set(Q::post_ops, Arg::string(""))
      .set(Q::x_scale, Arg::real(x.scale))
      .set(Q::x_zp, Arg::integer(x.zeroPoint))
      .set(Q::w_scales, w.scales)
      .set(Q::w_zps, w.zeroPoints)
      .set(Q::y_scale, Arg::real(1.0))
      .set(Q::y_zp, Arg::integer(0))
      .set(Q::y_qmin, Arg::integer(0))
      .set(Q::y_qmax, Arg::integer(0))
      .set(Q::y_dtype, Arg::none())
      .set(Q::residual, Arg::none())  // residual, r_scale, r_zp (int8-residual-sum)
      .set(Q::r_scale, Arg::real(0.0))
      .set(Q::r_zp, Arg::integer(0));
}

enum class FoldBug { None, DroppedZeroPoint, WeightScaleOfInputChannel, InputScaleMissing, WeightZeroPointUnchecked };

// One output element of dequantize -> conv/linear (K = 3 products) and of the int8 op that
// computes it from the s32 accumulator with the folded scale sx * sw[o].
Obligation dequantFold(const std::string& name, FoldBug bug) {
  ObligationBuilder ob(name);
  Expr sx = ob.var("x.scale"), zx = ob.var("x.zero_point");
  Expr sw = ob.var("w.scale[o]"), zw = ob.var("w.zero_point[o]"), swi = ob.var("w.scale[i]");
  Expr b = ob.var("b[o]");
  ob.assume(sx > 0).assume(sw > 0).assume(swi > 0);
  if (bug != FoldBug::WeightZeroPointUnchecked) ob.assume(zw == 0);
  std::vector<Expr> src, acc, accNoZp;
  for (int k = 0; k < 3; ++k) {
    Expr xk = ob.var("xq[" + std::to_string(k) + "]"), wk = ob.var("Wq[o," + std::to_string(k) + "]");
    src.push_back(((wk - zw) * sw) * ((xk - zx) * sx));  // dequantize_per_channel * dequantize_per_tensor
    acc.push_back(wk * (xk - zx));                       // oneDNN: s32, source zero point
    accNoZp.push_back(wk * xk);
  }
  Expr scale = bug == FoldBug::WeightScaleOfInputChannel ? sx * swi : bug == FoldBug::InputScaleMissing ? sw : sx * sw;
  Expr tgt = scale * verify::sum(bug == FoldBug::DroppedZeroPoint ? accNoZp : acc) + b;
  Expr source = verify::sum(src) + b;
  ob.prove("out[o]", source, tgt);
  if (name == "int8-linear-dequant") {
    // An N-d input: view(dequantize(xq), [M, K]) = dequantize(view(xq, [M, K])), on xq [2, 3, 2].
    using sem::ElementTensor;
    const ElementTensor xq = ElementTensor::variables("xq", {2, 3, 2});
    auto dq = [&](const ElementTensor& t) {
      return ElementTensor::fromFunction(t.sizes(), [t, sx, zx](const sem::Index& i) { return (t.at(i) - zx) * sx; });
    };
    sem::proveElementwise(ob, "view", sem::view(dq(xq), {6, 2}, "undefined-view"), dq(sem::view(xq, {6, 2}, "undefined-view")));
  }
  return ob.build();
}

verify::Mutant foldMutant(const std::string& rule, const char* name, const char* what, FoldBug bug) {
  return {name, what, u::bindNoModel(dequantFold, rule, bug)};
}

}  // namespace

// ---- int8-conv-dequant ------------------------------------------------------------------------

namespace {

using C = ir::Convolution;

std::optional<Match> matchConvDequant(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<C>(n)) return std::nullopt;
  auto x = dequantizedInput(g, operand(n, C::input), whyNot);
  if (!x) return std::nullopt;
  const Node* wdq = u::producerOf(g, operand(n, C::weight));
  if (!wdq || wdq->op != kDequantizeChannel || wdq->args.empty()) return std::nullopt;
  const ConstantTensor* wq = constantOf(g, operand(*wdq, DQC::input));
  if (!wq || wq->sizes.size() < 3) return u::why(whyNot, "the weight is not a constant conv weight"), std::nullopt;
  auto w = dequantizedWeight(g, operand(n, C::weight), wq->sizes[0], whyNot);
  if (!w) return std::nullopt;
  if (!biasOk(g, operand(n, C::bias))) return u::why(whyNot, "the bias is not a float32 constant"), std::nullopt;
  const Arg& transposed = operand(n, C::transposed);
  if (transposed.kind != Arg::Kind::Bool || transposed.i != 0) {
    return u::why(whyNot, "transposed convolution: no int8 kernel"), std::nullopt;
  }
  if (operand(n, C::groups).kind != Arg::Kind::Int) return u::why(whyNot, "groups not a static number"), std::nullopt;
  for (C::Operand k : {C::stride, C::padding, C::dilation}) {
    if (!operand(n, k).asIntList().isOk()) return u::why(whyNot, "stride/padding/dilation not static"), std::nullopt;
  }
  return Match{id, id, 0};
}

/// The instance the validator checks (kInt8Scales): the folded output scales and the weight's zero
/// points, on the real constants.
void recordScales(FusionRecord& record, const TensorQParams& x, const ChannelWeight& w) {
  record.fold.kind = rules::FoldRecord::Kind::kInt8Scales;
  record.fold.weight = w.weight.i;
  record.fold.operand = w.scales.i;
  record.fold.zeroPoints = w.zeroPoints.i;
  record.fold.scalar = x.scale;
}

Status rewriteConvDequant(Graph& g, const Match& m, FusionRecord& record) {
  Node& n = g.mutableNode(m.anchor);
  auto x = dequantizedInput(g, operand(n, C::input), nullptr);
  const Node* wdq = u::producerOf(g, operand(n, C::weight));
  const int64_t outChannels = g.constants().at(static_cast<size_t>(operand(*wdq, DQC::input).i)).sizes[0];
  auto w = dequantizedWeight(g, operand(n, C::weight), outChannels, nullptr);
  if (!x || !w) return internalError("int8-conv-dequant: match no longer holds");
  recordScales(record, *x, *w);
  using Q = ir::QConv;
  OperandsOf<Q> ops;
  ops.set(Q::x, x->input)
      .set(Q::weight, w->weight)
      .set(Q::bias, operand(n, C::bias))
      .set(Q::stride, operand(n, C::stride))
      .set(Q::padding, operand(n, C::padding))
      .set(Q::dilation, operand(n, C::dilation))
      .set(Q::groups, operand(n, C::groups));
  setQuantOperands(ops, *x, *w);
  n.op = kQConv;
  n.overload = "";
  n.args = ops.take();
  return Status::ok();
}

}  // namespace

RuleDeclaration int8ConvDequant() {
  return {
      .id = "int8-conv-dequant",
      .summary = "conv of dequantized u8/s8 input and s8 per-channel weights -> int8 conv (f32 result)",
      .math = "sum_k ((W_k - 0) sw[o]) ((x_k - zx) sx) + b = (sx sw[o]) sum_k W_k (x_k - zx) + b",
      .phase = Phase::kFusion,
      .anchors = {"aten::convolution"},
      .match = matchConvDequant,
      .rewrite = rewriteConvDequant,
      .obligation = u::bindNoModel(dequantFold, std::string("int8-conv-dequant"), FoldBug::None),
      .mutants = {foldMutant("int8-conv-dequant", "dropped-zero-point", "accumulate W*x without the source zero point",
                             FoldBug::DroppedZeroPoint),
                  foldMutant("int8-conv-dequant", "wrong-scale-product", "output scale sx * sw[i] (input channel's)",
                             FoldBug::WeightScaleOfInputChannel),
                  foldMutant("int8-conv-dequant", "input-scale-missing", "output scale sw[o] alone",
                             FoldBug::InputScaleMissing),
                  foldMutant("int8-conv-dequant", "weight-zero-point-unchecked", "weight zero point assumed 0, not checked",
                             FoldBug::WeightZeroPointUnchecked)},
      // Validated on a copy of the graph: the kernel's folded output scales and the weight's zero
      // points on the real constants (instance_check.cpp, kInt8Scales).
      .foldsConstants = true,
  };
}

// ---- int8-linear-dequant ----------------------------------------------------------------------

namespace {

// aten::addmm(b, dq(xq), permute(dq_ch(Wq), [1, 0]), beta = 1, alpha = 1) or aten::mm(dq(xq), permute(...)), xq 2-D.
/// The linear's input: dq(xq), or view(dq(xq), [M, K]) read only by the linear (an N-d input;
/// the rewrite then views the codes: dequantize is elementwise, it commutes with the view).
std::optional<TensorQParams> linearInput(const Graph& g, const Arg& a, const Node** view, std::string* whyNot) {
  *view = nullptr;
  if (auto x = dequantizedInput(g, a, whyNot)) return x;
  const Node* v = u::producerOf(g, a);
  if (!v || v->op != "aten::view" || !hasOperands<ir::View>(*v) || !u::hasSingleUse(g, v->outputs[0])) {
    return std::nullopt;
  }
  auto x = dequantizedInput(g, operand(*v, ir::View::self), whyNot);
  if (x) *view = v;
  return x;
}

/// addmm(b, x, Wt, 1, 1) or mm(x, Wt) (a linear without bias: T5, Llama): x, Wt and the bias (None).
struct LinearOperands {
  Arg x, wt, bias;
};

std::optional<LinearOperands> linearOperands(const Node& n) {
  using ir::Addmm, ir::Mm;
  if (n.op == "aten::addmm" && hasOperands<Addmm>(n)) {
    return LinearOperands{operand(n, Addmm::mat1), operand(n, Addmm::mat2), operand(n, Addmm::self)};
  }
  if (n.op == "aten::mm" && hasOperands<Mm>(n)) {
    return LinearOperands{operand(n, Mm::self), operand(n, Mm::mat2), Arg::none()};
  }
  return std::nullopt;
}

std::optional<Match> matchLinearDequant(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  auto ops = linearOperands(n);
  if (!ops) return std::nullopt;
  const Node* view = nullptr;
  auto x = linearInput(g, ops->x, &view, whyNot);
  if (!x) return std::nullopt;
  const Node* perm = u::producerOf(g, ops->wt);
  if (!perm || perm->op != "aten::permute" || !hasOperands<ir::Permute>(*perm)) return std::nullopt;
  auto dims = operand(*perm, ir::Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const Arg& permuted = operand(*perm, ir::Permute::self);
  const Node* wdq = u::producerOf(g, permuted);
  if (!wdq || wdq->op != kDequantizeChannel || wdq->args.empty()) return std::nullopt;
  const ConstantTensor* wq = constantOf(g, operand(*wdq, DQC::input));
  if (!wq || wq->sizes.size() != 2) return u::why(whyNot, "the weight is not a 2-D constant"), std::nullopt;
  auto w = dequantizedWeight(g, permuted, wq->sizes[0], whyNot);
  if (!w) return std::nullopt;
  if (!biasOk(g, ops->bias)) return u::why(whyNot, "the bias is not a float32 constant"), std::nullopt;
  if (n.op == "aten::addmm") {
    auto beta = u::numberArg(operand(n, ir::Addmm::beta)), alpha = u::numberArg(operand(n, ir::Addmm::alpha));
    if (!beta || !alpha || *beta != 1.0 || *alpha != 1.0) return u::why(whyNot, "addmm with beta/alpha != 1"), std::nullopt;
  }
  const ConstantTensor* b = u::f32Constant(g, ops->bias);
  if (b && (b->sizes.size() != 1 || b->sizes[0] != wq->sizes[0])) {
    return u::why(whyNot, "the bias is not one value per output feature (a broadcast bias)"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteLinearDequant(Graph& g, const Match& m, FusionRecord& record) {
  Node& n = g.mutableNode(m.anchor);
  auto ops = linearOperands(n);
  if (!ops) return internalError("int8-linear-dequant: match no longer holds");
  const Node* view = nullptr;
  auto x = linearInput(g, ops->x, &view, nullptr);
  const Node* perm = u::producerOf(g, ops->wt);
  const Node* wdq = perm ? u::producerOf(g, operand(*perm, ir::Permute::self)) : nullptr;
  if (!x || !wdq) return internalError("int8-linear-dequant: match no longer holds");
  const int64_t outFeatures = g.constants().at(static_cast<size_t>(operand(*wdq, DQC::input).i)).sizes[0];
  auto w = dequantizedWeight(g, operand(*perm, ir::Permute::self), outFeatures, nullptr);
  if (!w) return internalError("int8-linear-dequant: match no longer holds");
  recordScales(record, *x, *w);
  Arg input = x->input;
  if (view) {
    // The view now reads the codes (same sizes and strides as their dequantized values).
    Node& v = g.mutableNode(view->id);
    operand(v, ir::View::self) = x->input;
    g.mutableValue(v.outputs[0]).dtype = x->dtype;
    input = Arg::value(v.outputs[0]);
  }
  using Q = ir::QLinear;
  OperandsOf<Q> qops;
  qops.set(Q::x, input).set(Q::weight, w->weight).set(Q::bias, ops->bias);
  setQuantOperands(qops, *x, *w);
  n.op = kQLinear;
  n.overload = "";
  n.args = qops.take();
  return Status::ok();
}

}  // namespace

RuleDeclaration int8LinearDequant() {
  return {
      .id = "int8-linear-dequant",
      .summary = "addmm (or mm: no bias) of dequantized u8/s8 input and s8 per-channel weights -> int8 linear (f32 result)",
      .math = "sum_k ((W[o,k] - 0) sw[o]) ((x_k - zx) sx) + b = (sx sw[o]) sum_k W[o,k] (x_k - zx) + b (b = 0: mm)",
      .phase = Phase::kFusion,
      .anchors = {"aten::addmm", "aten::mm"},
      .match = matchLinearDequant,
      .rewrite = rewriteLinearDequant,
      .obligation = u::bindNoModel(dequantFold, std::string("int8-linear-dequant"), FoldBug::None),
      .mutants = {foldMutant("int8-linear-dequant", "dropped-zero-point", "accumulate W*x without the source zero point",
                             FoldBug::DroppedZeroPoint),
                  foldMutant("int8-linear-dequant", "wrong-scale-product", "output scale sx * sw[i] (input feature's)",
                             FoldBug::WeightScaleOfInputChannel),
                  foldMutant("int8-linear-dequant", "weight-zero-point-unchecked",
                             "weight zero point assumed 0, not checked", FoldBug::WeightZeroPointUnchecked)},
      .foldsConstants = true,
  };
}

RuleDeclaration plantedInt8DroppedZeroPoint() {
  // Test only: int8-conv-dequant whose kernel would drop the source zero point, carrying the
  // obligation of that (wrong) math. Refuted, so it never applies.
  auto rules = quantizedInt8();
  RuleDeclaration d = rules.front();
  return RuleDeclaration{
      .id = "test-planted-int8-dropped-zero-point",
      .summary = "test only: int8 conv without the source zero point",
      .math = "sum_k W_k sw[o] (x_k - zx) sx + b = (sx sw[o]) sum_k W_k x_k + b  (wrong)",
      .phase = Phase::kFusion,
      .anchors = {"aten::convolution"},
      .match = d.match.get(),
      .rewrite = d.rewrite.get(),
      .obligation = u::bindNoModel(dequantFold, std::string("test-planted-int8-dropped-zero-point"),
                                   FoldBug::DroppedZeroPoint),
      .mutants = {foldMutant("test-planted-int8-dropped-zero-point", "input-scale-missing", "output scale sw[o] alone",
                             FoldBug::InputScaleMissing)},
  };
}

}  // namespace verifuse::rules::families
