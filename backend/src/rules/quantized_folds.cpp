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

std::optional<ChannelWeight> dequantizedWeight(const Graph& g, const Arg& a, int64_t outChannels, std::string* whyNot) {
  const Node* dq = u::producerOf(g, a);
  if (!dq || dq->op != kDequantizeChannel || dq->args.size() < 7) return std::nullopt;
  const ConstantTensor* w = constantOf(g, dq->args[0]);
  const ConstantTensor* s = constantOf(g, dq->args[1]);
  const ConstantTensor* z = constantOf(g, dq->args[2]);
  if (!w || w->dtype != DType::Int8 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a frozen contiguous s8 constant"), std::nullopt;
  }
  if (dq->args[3].kind != Arg::Kind::Int || dq->args[3].i != 0 || dq->args[4].kind != Arg::Kind::Int ||
      dq->args[4].i != -128 || dq->args[5].kind != Arg::Kind::Int || dq->args[5].i != 127 ||
      dq->args[6].kind != Arg::Kind::DTypeTag || static_cast<DType>(dq->args[6].i) != DType::Int8 ||
      (dq->args.size() == 8 && dq->args[7].kind != Arg::Kind::None)) {
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
  return ChannelWeight{dq->args[0], dq->args[1], dq->args[2]};
}

/// The bias: None or a float32 constant.
bool biasOk(const Graph& g, const Arg& b) { return b.kind == Arg::Kind::None || u::f32Constant(g, b) != nullptr; }

/// Arguments shared by qconv and qlinear after their own geometry: the float32 form (no requant).
void appendQuantArgs(std::vector<Arg>& args, const TensorQParams& x, const ChannelWeight& w) {
  args.push_back(Arg::string(""));
  args.push_back(Arg::real(x.scale));
  args.push_back(Arg::integer(x.zeroPoint));
  args.push_back(w.scales);
  args.push_back(w.zeroPoints);
  args.push_back(Arg::real(1.0));
  args.push_back(Arg::integer(0));
  args.push_back(Arg::integer(0));
  args.push_back(Arg::integer(0));
  args.push_back(Arg::none());
  args.push_back(Arg::none());  // residual, r_scale, r_zp (int8-residual-sum)
  args.push_back(Arg::real(0.0));
  args.push_back(Arg::integer(0));
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

// aten::convolution(x, W, b, stride, padding, dilation, transposed, output_padding, groups)
std::optional<Match> matchConvDequant(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.size() != 9) return std::nullopt;
  auto x = dequantizedInput(g, n.args[0], whyNot);
  if (!x) return std::nullopt;
  const Node* wdq = u::producerOf(g, n.args[1]);
  if (!wdq || wdq->op != kDequantizeChannel || wdq->args.empty()) return std::nullopt;
  const ConstantTensor* wq = constantOf(g, wdq->args[0]);
  if (!wq || wq->sizes.size() < 3) return u::why(whyNot, "the weight is not a constant conv weight"), std::nullopt;
  auto w = dequantizedWeight(g, n.args[1], wq->sizes[0], whyNot);
  if (!w) return std::nullopt;
  if (!biasOk(g, n.args[2])) return u::why(whyNot, "the bias is not a float32 constant"), std::nullopt;
  if (n.args[6].kind != Arg::Kind::Bool || n.args[6].i != 0) {
    return u::why(whyNot, "transposed convolution: no int8 kernel"), std::nullopt;
  }
  if (n.args[8].kind != Arg::Kind::Int) return u::why(whyNot, "groups not a static number"), std::nullopt;
  for (size_t k : {3, 4, 5}) {
    if (!n.args[k].asIntList().isOk()) return u::why(whyNot, "stride/padding/dilation not static"), std::nullopt;
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
  auto x = dequantizedInput(g, n.args[0], nullptr);
  const Node* wdq = u::producerOf(g, n.args[1]);
  auto w = dequantizedWeight(g, n.args[1], g.constants().at(static_cast<size_t>(wdq->args[0].i)).sizes[0], nullptr);
  if (!x || !w) return internalError("int8-conv-dequant: match no longer holds");
  recordScales(record, *x, *w);
  std::vector<Arg> args = {x->input, w->weight, n.args[2], n.args[3], n.args[4], n.args[5], n.args[8]};
  appendQuantArgs(args, *x, *w);
  n.op = kQConv;
  n.overload = "";
  n.args = std::move(args);
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
  if (!v || v->op != "aten::view" || v->args.size() != 2 || !u::hasSingleUse(g, v->outputs[0])) return std::nullopt;
  auto x = dequantizedInput(g, v->args[0], whyNot);
  if (x) *view = v;
  return x;
}

/// addmm(b, x, Wt, 1, 1) or mm(x, Wt) (a linear without bias: T5, Llama): x, Wt and the bias (None).
struct LinearOperands {
  Arg x, wt, bias;
};

std::optional<LinearOperands> linearOperands(const Node& n) {
  if (n.op == "aten::addmm" && n.args.size() == 5) return LinearOperands{n.args[1], n.args[2], n.args[0]};
  if (n.op == "aten::mm" && n.args.size() == 2) return LinearOperands{n.args[0], n.args[1], Arg::none()};
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
  if (!perm || perm->op != "aten::permute" || perm->args.size() != 2) return std::nullopt;
  auto dims = perm->args[1].asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const Node* wdq = u::producerOf(g, perm->args[0]);
  if (!wdq || wdq->op != kDequantizeChannel || wdq->args.empty()) return std::nullopt;
  const ConstantTensor* wq = constantOf(g, wdq->args[0]);
  if (!wq || wq->sizes.size() != 2) return u::why(whyNot, "the weight is not a 2-D constant"), std::nullopt;
  auto w = dequantizedWeight(g, perm->args[0], wq->sizes[0], whyNot);
  if (!w) return std::nullopt;
  if (!biasOk(g, ops->bias)) return u::why(whyNot, "the bias is not a float32 constant"), std::nullopt;
  if (n.op == "aten::addmm") {
    auto beta = u::numberArg(n.args[3]), alpha = u::numberArg(n.args[4]);
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
  const Node* wdq = perm ? u::producerOf(g, perm->args[0]) : nullptr;
  if (!x || !wdq) return internalError("int8-linear-dequant: match no longer holds");
  auto w = dequantizedWeight(g, perm->args[0], g.constants().at(static_cast<size_t>(wdq->args[0].i)).sizes[0], nullptr);
  if (!w) return internalError("int8-linear-dequant: match no longer holds");
  recordScales(record, *x, *w);
  Arg input = x->input;
  if (view) {
    // The view now reads the codes (same sizes and strides as their dequantized values).
    Node& v = g.mutableNode(view->id);
    v.args[0] = x->input;
    g.mutableValue(v.outputs[0]).dtype = x->dtype;
    input = Arg::value(v.outputs[0]);
  }
  std::vector<Arg> args = {input, w->weight, ops->bias};
  appendQuantArgs(args, *x, *w);
  n.op = kQLinear;
  n.overload = "";
  n.args = std::move(args);
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
