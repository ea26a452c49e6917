// The int8 rules' shared pieces (see quantized_common.h).
#include "rules/quantized_common.h"

namespace verifuse::rules::families::quantized {

std::optional<std::pair<int64_t, int64_t>> int8Range(DType t) {
  if (t == DType::UInt8) return std::make_pair<int64_t, int64_t>(0, 255);
  if (t == DType::Int8) return std::make_pair<int64_t, int64_t>(-128, 127);
  return std::nullopt;
}

std::optional<TensorQParams> tensorQParams(const Node& n, std::string* whyNot) {
  if (n.args.size() < 6) return std::nullopt;
  if (n.args.size() == 7 && n.args[6].kind != Arg::Kind::None) {
    return u::why(whyNot, "out_dtype given: only float32 results are lowered to int8 kernels"), std::nullopt;
  }
  TensorQParams p;
  p.input = n.args[0];
  if (n.args[1].kind != Arg::Kind::Double || n.args[2].kind != Arg::Kind::Int || n.args[3].kind != Arg::Kind::Int ||
      n.args[4].kind != Arg::Kind::Int || n.args[5].kind != Arg::Kind::DTypeTag) {
    return u::why(whyNot, "scale / zero point / range not static numbers (a tensor-valued scale)"), std::nullopt;
  }
  p.scale = n.args[1].d;
  p.zeroPoint = n.args[2].i;
  p.qmin = n.args[3].i;
  p.qmax = n.args[4].i;
  p.dtype = static_cast<DType>(n.args[5].i);
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
  if (p->args[requantIndex(*p) + 4].kind != Arg::Kind::None) return nullptr;
  return p;
}

const Node* floatInt8ProducerThroughView(const Graph& g, const Arg& a, const Node** view) {
  *view = nullptr;
  if (const Node* p = floatInt8Producer(g, a)) return p;
  const Node* v = u::producerOf(g, a);
  if (!v || v->op != "aten::view" || v->args.size() != 2 || !u::hasSingleUse(g, u::valueOf(a))) return nullptr;
  const Node* p = floatInt8Producer(g, v->args[0]);
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
