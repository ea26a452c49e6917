// The int8 rules' shared pieces (see quantized_common.h).
#include "rules/quantized_common.h"

#include <stdexcept>

namespace verifuse::rules::families::quantized {

std::optional<std::pair<int64_t, int64_t>> int8Range(DType t) {
  if (t == DType::UInt8) return std::make_pair<int64_t, int64_t>(0, 255);
  if (t == DType::Int8) return std::make_pair<int64_t, int64_t>(-128, 127);
  return std::nullopt;
}

const Arg& int8Operand(const Node& n, std::string_view name) {
  if (!isInt8Op(n)) throw std::logic_error(n.op + " is not an int8 op");
  return ir::requiredOperand(n, name);
}
Arg& int8Operand(Node& n, std::string_view name) {
  return const_cast<Arg&>(int8Operand(static_cast<const Node&>(n), name));
}

DType quantizedDType(const Node& quantize) {
  return static_cast<DType>(operand(quantize, ir::QuantizePerTensor::dtype).i);
}

namespace {

/// quantize_per_tensor (Q = ir::QuantizePerTensor) and dequantize_per_tensor (Q =
/// ir::DequantizePerTensor) share their operands up to dtype; a dequantize's out_dtype may be
/// left out.
template <class Q>
std::optional<TensorQParams> tensorQParamsOf(const Node& n, std::string* whyNot) {
  if (n.args.size() <= Q::dtype) return std::nullopt;
  const Arg* outDtype = namedOperand(n, "out_dtype");  // dequantize only
  if (outDtype && outDtype->kind != Arg::Kind::None) {
    return u::why(whyNot, "out_dtype given: only float32 results are lowered to int8 kernels"), std::nullopt;
  }
  const Arg &scale = operand(n, Q::scale), &zeroPoint = operand(n, Q::zero_point);
  const Arg &qmin = operand(n, Q::quant_min), &qmax = operand(n, Q::quant_max), &dtype = operand(n, Q::dtype);
  TensorQParams p;
  p.input = operand(n, Q::input);
  if (scale.kind != Arg::Kind::Double || zeroPoint.kind != Arg::Kind::Int || qmin.kind != Arg::Kind::Int ||
      qmax.kind != Arg::Kind::Int || dtype.kind != Arg::Kind::DTypeTag) {
    return u::why(whyNot, "scale / zero point / range not static numbers (a tensor-valued scale)"), std::nullopt;
  }
  p.scale = scale.d;
  p.zeroPoint = zeroPoint.i;
  p.qmin = qmin.i;
  p.qmax = qmax.i;
  p.dtype = static_cast<DType>(dtype.i);
  if (!goodScale(p.scale)) {
    return u::why(whyNot, "scale " + std::to_string(p.scale) + " is zero, negative, NaN or infinite: no integer meaning"),
           std::nullopt;
  }
  auto range = int8Range(p.dtype);
  if (!range) return u::why(whyNot, "quantized dtype is not u8/s8"), std::nullopt;
  if (p.qmin < range->first || p.qmax > range->second || p.qmin > p.qmax || p.zeroPoint < p.qmin ||
      p.zeroPoint > p.qmax) {
    return u::why(whyNot, "zero point or range outside the dtype"), std::nullopt;
  }
  return p;
}

}  // namespace

std::optional<TensorQParams> tensorQParams(const Node& n, std::string* whyNot) {
  return n.op == kDequantize ? tensorQParamsOf<ir::DequantizePerTensor>(n, whyNot)
                             : tensorQParamsOf<ir::QuantizePerTensor>(n, whyNot);
}

std::optional<TensorQParams> dequantizedInput(const Graph& g, const Arg& a, std::string* whyNot) {
  const Node* dq = u::producerOf(g, a);
  if (!dq || dq->op != kDequantize) return std::nullopt;
  auto p = tensorQParams(*dq, whyNot);
  if (p && !p->input.isValue()) return u::why(whyNot, "quantized input is a constant"), std::nullopt;
  return p;
}

const ConstantTensor* constantOf(const Graph& g, const Arg& a) {
  return a.isConstant() ? &g.constants().at(static_cast<size_t>(a.i)) : nullptr;
}

const Node* floatInt8Producer(const Graph& g, const Arg& a) {
  const Node* p = u::producerOf(g, a);
  if (!p || !isInt8Op(*p) || !u::hasSingleUse(g, u::valueOf(a))) return nullptr;
  if (int8Operand(*p, "y_dtype").kind != Arg::Kind::None) return nullptr;  // requantized already
  return p;
}

const Node* floatInt8ProducerThroughView(const Graph& g, const Arg& a, const Node** view) {
  *view = nullptr;
  if (const Node* p = floatInt8Producer(g, a)) return p;
  const Node* v = u::producerOf(g, a);
  if (!v || v->op != "aten::view" || !hasOperands<ir::View>(*v) || !u::hasSingleUse(g, u::valueOf(a))) return nullptr;
  const Node* p = floatInt8Producer(g, operand(*v, ir::View::self));
  if (p) *view = v;
  return p;
}

// ---- obligations ----------------------------------------------------------------------------------

namespace {

Expr half() { return Expr::rational(1, 2); }

}  // namespace

Expr roundHalfEven(ObligationBuilder& ob, Expr t, const std::string& name) {
  Expr h = Expr::var(name + ".half", Sort::Int);
  ob.addFresh(h, {});
  return ob.fresh(
      name,
      [&](Expr n) {
        return std::vector<Expr>{n >= t - half(), n <= t + half(), implies(n - t == half(), n == h * Expr::integer(2)),
                                 implies(t - n == half(), n == h * Expr::integer(2))};
      },
      Sort::Int);
}

Expr roundHalfAway(ObligationBuilder& ob, Expr t, const std::string& name) {
  return ob.fresh(
      name,
      [&](Expr n) {
        return std::vector<Expr>{n >= t - half(), n <= t + half(), implies(n - t == half(), t >= 0),
                                 implies(t - n == half(), t < 0)};
      },
      Sort::Int);
}

}  // namespace verifuse::rules::families::quantized
