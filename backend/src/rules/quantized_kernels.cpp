// The int8 kernels of their own (rules/quantized.cpp describes the int8 rules and their integer
// semantics): torchao's dynamic int8 matmul on oneDNN, and every quantize left over on the
// runtime's one-pass quantize kernel.
//
//   int8-int-mm                _int_mm(xq, permute(Wq, [1, 0]))             = verifuse::int_mm(xq, Wq) (s32, torchao's dynamic int8)
//   int8-quantize-kernel       q(x f32) left over                          = verifuse::quantize (one C++ pass)
//   int8-weight-only-mm        mm(x f32, permute(Wq, [1, 0]).to(f32))      = verifuse::int8_weight_mm(x, Wq) (torchao's weight-only int8)
#include <string>
#include <vector>

#include "rules/quantized_common.h"

namespace verifuse::rules::families {

namespace {

using namespace quantized;  // the shared pieces (quantized_common.h)

}  // namespace

// ---- int8-int-mm --------------------------------------------------------------------------------

namespace {

// aten::_int_mm(a, permute(W, [1, 0])), a u8/s8 [M, K], W an s8 [N, K] constant (torchao's
// dynamic-activation int8 linear after aot_autograd desugars its weight): the s32 accumulator on
// oneDNN's VNNI matmul. K is bounded so that no s32 sum can overflow (|a_k w_k| <= 255 * 128):
// past it, eager's wrap-around and oneDNN's saturation could differ.
constexpr int64_t kMaxExactK = 65535;

using ir::IntMm;
using ir::Permute;

std::optional<Match> matchIntMm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<IntMm>(n) || !operand(n, IntMm::self).isValue()) return std::nullopt;
  const ir::Value& a = g.value(u::valueOf(operand(n, IntMm::self)));
  if (a.dtype != DType::UInt8 && a.dtype != DType::Int8) return u::why(whyNot, "the activation is not u8/s8"), std::nullopt;
  const Node* perm = u::producerOf(g, operand(n, IntMm::mat2));
  if (!perm || perm->op != "aten::permute" || !hasOperands<Permute>(*perm)) {
    return u::why(whyNot, "the weight is not a transposed constant"), std::nullopt;
  }
  auto dims = operand(*perm, Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const ConstantTensor* w = constantOf(g, operand(*perm, Permute::self));
  if (!w || w->dtype != DType::Int8 || w->sizes.size() != 2 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a contiguous 2-d s8 constant"), std::nullopt;
  }
  if (w->sizes[1] > kMaxExactK) return u::why(whyNot, "K > 65535: the s32 sum could overflow"), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteIntMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Node* perm = u::producerOf(g, operand(n, IntMm::mat2));
  if (!perm) return internalError("int8-int-mm: match no longer holds");
  using ir::FusedIntMm;
  // The permute stays while others read it (torchao's column sums).
  std::vector<Arg> operands = OperandsOf<FusedIntMm>()
                                  .set(FusedIntMm::a, operand(n, IntMm::self))
                                  .set(FusedIntMm::weight, operand(*perm, Permute::self))
                                  .take();
  n.op = "verifuse::int_mm";
  n.overload = "";
  n.args = std::move(operands);
  return Status::ok();
}

enum class IntMmBug { None, WeightNotTransposed };

// _int_mm(a, permute(W, [1, 0]))[m, n] = sum_k a[m, k] W[n, k] on explicit [2, 2] tensors (the
// kernel reads torch's [N, K] weight as the [K, N] operand; exact integer sums on both sides).
Obligation intMm(IntMmBug bug) {
  ObligationBuilder ob("int8-int-mm");
  using sem::ElementTensor;
  const ElementTensor a = ElementTensor::variables("a", {2, 2}), w = ElementTensor::variables("W", {2, 2});
  const ElementTensor kernel = ElementTensor::fromFunction({2, 2}, [a, w, bug](const sem::Index& i) {
    Expr acc = Expr::integer(0);
    for (int64_t k = 0; k < 2; ++k) {
      acc = acc + a.at({i[0], k}) * (bug == IntMmBug::WeightNotTransposed ? w.at({k, i[1]}) : w.at({i[1], k}));
    }
    return acc;
  });
  sem::proveElementwise(ob, "out", sem::mm(a, sem::permute(w, {1, 0})), kernel);
  return ob.build();
}

}  // namespace

RuleDeclaration int8IntMm() {
  return {
      .id = "int8-int-mm",
      .summary = "_int_mm(u8/s8 a, permute(s8 W)) -> verifuse::int_mm (oneDNN s32 matmul, W prepacked)",
      .math = "sum_k a[m, k] W^T[k, n] = sum_k a[m, k] W[n, k], exact in s32 for K <= 65535",
      .phase = Phase::kFusion,
      .anchors = {"aten::_int_mm"},
      .match = matchIntMm,
      .rewrite = rewriteIntMm,
      .obligation = u::bindNoModel(intMm, IntMmBug::None),
      .mutants = {{"int-mm-weight-not-transposed", "W read as [K, N] (its transpose)",
                   u::bindNoModel(intMm, IntMmBug::WeightNotTransposed)}},
  };
}

// ---- int8-weight-only-mm -------------------------------------------------------------------------

namespace {

using ir::Mm;
using ir::ToCopy;

// aten::mm(x, _to_copy(permute(W, [1, 0]), float32)), x a float32 [M, K] value, W an s8 [N, K]
// constant: torchao's Int8WeightOnlyConfig linear after aot_autograd desugars its Int8Tensor
// weight (the per-row scale is the graph's own multiply after the mm, left as eager has it).
// Without the rule the widened weight is folded into a float32 copy at plan time: four bytes per
// weight read on every decode step instead of one.
std::optional<Match> matchInt8WeightOnlyMm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<Mm>(n) || !operand(n, Mm::self).isValue() || !operand(n, Mm::mat2).isValue()) return std::nullopt;
  const Node* widen = u::producerOf(g, operand(n, Mm::mat2));
  if (!widen || widen->op != "aten::_to_copy" || !hasAtLeastOperands<ir::Unary>(*widen)) return std::nullopt;
  const ir::Value& x = g.value(u::valueOf(operand(n, Mm::self)));
  if (x.dtype != DType::Float32 || x.shape.size() != 2) return u::why(whyNot, "the activation is not a 2-d float32 value"), std::nullopt;
  if (g.value(u::valueOf(operand(n, Mm::mat2))).dtype != DType::Float32) {
    return u::why(whyNot, "the weight is not widened to float32"), std::nullopt;
  }
  const Node* perm = u::producerOf(g, operand(*widen, ToCopy::self));
  if (!perm || perm->op != "aten::permute" || !hasOperands<Permute>(*perm)) {
    return u::why(whyNot, "the widened weight is not a transposed constant"), std::nullopt;
  }
  auto dims = operand(*perm, Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const ConstantTensor* w = constantOf(g, operand(*perm, Permute::self));
  if (!w || w->dtype != DType::Int8 || w->sizes.size() != 2 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a contiguous 2-d s8 constant"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteInt8WeightOnlyMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Node* widen = u::producerOf(g, operand(n, Mm::mat2));
  const Node* perm = widen ? u::producerOf(g, operand(*widen, ToCopy::self)) : nullptr;
  if (!perm) return internalError("int8-weight-only-mm: match no longer holds");
  using ir::FusedInt8WeightMm;
  // The widening and the permute stay while others read them (dead code removes them otherwise).
  std::vector<Arg> operands = OperandsOf<FusedInt8WeightMm>()
                                  .set(FusedInt8WeightMm::x, operand(n, Mm::self))
                                  .set(FusedInt8WeightMm::weight, operand(*perm, Permute::self))
                                  .take();
  n.op = "verifuse::int8_weight_mm";
  n.overload = "";
  n.args = std::move(operands);
  return Status::ok();
}

enum class WeightOnlyBug { None, WeightNotTransposed, WeightZeroExtended };

// mm(x, permute(W, [1, 0]).to(float32))[m, n] = sum_k x[m, k] * W[n, k] on explicit [2, 2]
// tensors, W integers in [-128, 127]: the widening is exact on both sides (|W| < 2^24), so the
// kernel's sign-extended weight times x is the source's product, summed over k (both sides sum
// in float32; the order of that sum is every GEMM's freedom, as for the float linears).
Obligation weightOnlyMm(WeightOnlyBug bug) {
  ObligationBuilder ob("int8-weight-only-mm");
  using sem::ElementTensor;
  const ElementTensor x = ElementTensor::variables("x", {2, 2});
  std::vector<Expr> codes;
  for (int64_t i = 0; i < 4; ++i) {
    Expr c = ob.var("W[" + std::to_string(i / 2) + "," + std::to_string(i % 2) + "]", Sort::Int);
    ob.assume(c >= Expr::integer(-128)).assume(c <= Expr::integer(127));
    codes.push_back(c);
  }
  const ElementTensor w = ElementTensor::fromFunction({2, 2}, [codes](const sem::Index& i) { return codes[static_cast<size_t>(i[0] * 2 + i[1])]; });
  // The kernel widens each s8 weight in registers (vpmovsxbd, then vcvtdq2ps) and multiplies.
  auto widened = [bug](const Expr& code) {
    if (bug == WeightOnlyBug::WeightZeroExtended) return Expr::ite(code < Expr::integer(0), code + Expr::integer(256), code);
    return code;
  };
  const ElementTensor kernel = ElementTensor::fromFunction({2, 2}, [x, w, bug, widened](const sem::Index& i) {
    Expr acc = Expr::integer(0);
    for (int64_t k = 0; k < 2; ++k) {
      const Expr code = bug == WeightOnlyBug::WeightNotTransposed ? w.at({k, i[1]}) : w.at({i[1], k});
      acc = acc + x.at({i[0], k}) * widened(code);
    }
    return acc;
  });
  sem::proveElementwise(ob, "out", sem::mm(x, sem::permute(w, {1, 0})), kernel);
  return ob.build();
}

}  // namespace

RuleDeclaration int8WeightOnlyMm() {
  return {
      .id = "int8-weight-only-mm",
      .summary = "mm(f32 x, permute(s8 W).to(f32)) -> verifuse::int8_weight_mm (reads W as s8, widens in registers)",
      .math = "sum_k x[m, k] float(W^T[k, n]) = sum_k x[m, k] float(W[n, k]), float(W) exact for |W| <= 128",
      .phase = Phase::kFusion,
      .anchors = {"aten::mm"},
      .match = matchInt8WeightOnlyMm,
      .rewrite = rewriteInt8WeightOnlyMm,
      .obligation = u::bindNoModel(weightOnlyMm, WeightOnlyBug::None),
      .mutants = {{"weight-only-mm-weight-not-transposed", "W read as [K, N] (its transpose)",
                   u::bindNoModel(weightOnlyMm, WeightOnlyBug::WeightNotTransposed)},
                  {"weight-only-mm-weight-zero-extended", "the s8 weight widened as u8 (vpmovzxbd for vpmovsxbd)",
                   u::bindNoModel(weightOnlyMm, WeightOnlyBug::WeightZeroExtended)}},
  };
}

// ---- int8-quantize-kernel -----------------------------------------------------------------------

namespace {

// quantize_per_tensor(x f32, s, z, qmin, qmax, u8/s8) that no rule before it absorbed: the
// runtime's one-pass kernel (verifuse::quantize) instead of torch's Python composition.
std::optional<Match> matchQuantizeKernel(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  using Q = ir::QuantizePerTensor;
  if (!hasOperands<Q>(n) || !operand(n, Q::input).isValue()) return std::nullopt;
  if (g.value(u::valueOf(operand(n, Q::input))).dtype != DType::Float32) {
    return u::why(whyNot, "input not known to be float32"), std::nullopt;
  }
  if (!tensorQParams(n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteQuantizeKernel(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  n.op = "verifuse::quantize";
  n.overload = "";
  return Status::ok();
}

enum class QuantizeBug { None, RoundHalfAway, MissingClamp, DroppedZeroPoint };

// torch's quantize_per_tensor against the kernel's loop, for every scaled value t = x * (1/s) (the
// same float32 product on both sides) and any [qmin, qmax] within the dtype: clamp(round(t) + z).
Obligation quantizeKernel(QuantizeBug bug) {
  ObligationBuilder ob("int8-quantize-kernel");
  Expr t = ob.var("t"), z = ob.var("zero_point", Sort::Int);
  Expr qmin = ob.var("qmin", Sort::Int), qmax = ob.var("qmax", Sort::Int);
  ob.assume(qmin >= Expr::integer(-128)).assume(qmax <= Expr::integer(255)).assume(qmin <= z).assume(z <= qmax);
  Expr source = sem::clamp(roundHalfEven(ob, t, "round(t)") + z, qmin, qmax);
  Expr n = bug == QuantizeBug::RoundHalfAway ? roundHalfAway(ob, t, "nearbyint(t)") : roundHalfEven(ob, t, "nearbyint(t)");
  Expr code = bug == QuantizeBug::DroppedZeroPoint ? n : n + z;
  ob.prove("q", source, bug == QuantizeBug::MissingClamp ? code : sem::clamp(code, qmin, qmax));
  return ob.build();
}

}  // namespace

RuleDeclaration int8QuantizeKernel() {
  return {
      .id = "int8-quantize-kernel",
      .summary = "quantize_per_tensor of a float32 tensor -> verifuse::quantize (one pass, same float32 steps)",
      .math = "clamp(round_half_even(x * (1/s)) + z, qmin, qmax) = clamp(nearbyint(x * (1/s)) + z, qmin, qmax)",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchQuantizeKernel,
      .rewrite = rewriteQuantizeKernel,
      .obligation = u::bindNoModel(quantizeKernel, QuantizeBug::None),
      .mutants = {{"round-half-away", "ties away from zero", u::bindNoModel(quantizeKernel, QuantizeBug::RoundHalfAway)},
                  {"missing-clamp", "no clamp to [qmin, qmax]", u::bindNoModel(quantizeKernel, QuantizeBug::MissingClamp)},
                  {"dropped-zero-point", "zero point not added", u::bindNoModel(quantizeKernel, QuantizeBug::DroppedZeroPoint)}},
  };
}

}  // namespace verifuse::rules::families
