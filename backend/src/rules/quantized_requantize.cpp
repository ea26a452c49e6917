// The int8 requantizations and the ops on codes (rules/quantized.cpp describes the int8 rules and
// their integer semantics): a quantize of an int8 op's float32 result becomes the op's own u8/s8
// output (oneDNN's dst scale, zero point and saturation), also through a cat, a max pool or a
// residual add; a max pool, cat or view between a dequantize and a quantize with the same
// parameters runs on the codes.
//
//   int8-requantize            q([view](qconv f32), sy, zy, qmin, qmax)    = [view](qconv -> u8/s8) (oneDNN's dst
//                                                                            scale, zero point, saturation)
//   int8-maxpool-codes         q(max_pool2d(dq(x, s, z)), s, z)            = verifuse::qmax_pool(x) on the codes
//   int8-requantize-cat        q(cat([qconv f32, ...]))                     = cat([qconv -> u8/s8, ...]) (in place)
//   int8-requantize-maxpool    q(max_pool2d(qconv f32))                    = qmax_pool(qconv -> u8/s8)
//   int8-select-codes          q(cat([dq(a, s, z), ...]), s, z)            = cat([a, ...]) on the codes (and view)
//   int8-residual-sum          q([relu](qconv f32 + dq(r, sr, zr)))        = qconv -> u8/s8 with the sum post-op
//                                                                            (scale sr, zero point zr) [and relu]
#include <set>
#include <string>
#include <vector>

#include "rules/quantized_common.h"

namespace verifuse::rules::families {

namespace {

using namespace quantized;  // the shared pieces (quantized_common.h)
using Q = ir::QuantizePerTensor;  // the quantize each rule anchors at

/// The quantize's input (what it quantizes).
const Arg& quantizeInput(const Node& q) { return operand(q, Q::input); }

}  // namespace

// ---- int8-requantize ----------------------------------------------------------------------------

namespace {

/// A requantization to the dtype's whole range (what oneDNN saturates to).
bool fullRange(const TensorQParams& q) {
  auto range = int8Range(q.dtype);
  return range && q.qmin == range->first && q.qmax == range->second;
}

/// The int8 op \p p's requantization (y_scale, y_zp, y_qmin, y_qmax, y_dtype) becomes quantize \p q's
/// (scale, zero_point, quant_min, quant_max, dtype). Its output's dtype is the caller's to set.
void takeRequantization(Node& p, const Node& q) {
  int8Operand(p, "y_scale") = operand(q, Q::scale);
  int8Operand(p, "y_zp") = operand(q, Q::zero_point);
  int8Operand(p, "y_qmin") = operand(q, Q::quant_min);
  int8Operand(p, "y_qmax") = operand(q, Q::quant_max);
  int8Operand(p, "y_dtype") = operand(q, Q::dtype);
}

/// The int8 op \p producer takes quantize \p q's requantization (its u8/s8 output) where it stands.
void requantizeInPlace(Graph& g, NodeId producer, const Node& q) {
  Node& p = g.mutableNode(producer);
  takeRequantization(p, q);
  g.mutableValue(p.outputs[0]).dtype = quantizedDType(q);
}

std::optional<Match> matchRequantize(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  const Node* view = nullptr;
  const Node* p = floatInt8ProducerThroughView(g, n.args.empty() ? Arg::none() : quantizeInput(n), &view);
  if (!p) return std::nullopt;
  auto q = tensorQParams(n, whyNot);
  if (!q) return std::nullopt;
  if (!fullRange(*q)) {
    return u::why(whyNot, "requantization range [" + std::to_string(q->qmin) + ", " + std::to_string(q->qmax) +
                              "] narrower than the dtype: oneDNN saturates to the dtype's range"),
           std::nullopt;
  }
  return Match{p->id, id, 0};
}

Status rewriteRequantize(Graph& g, const Match& m, FusionRecord&) {
  const Node* view = nullptr;
  if (!floatInt8ProducerThroughView(g, quantizeInput(g.node(m.consumer)), &view)) {
    return internalError("int8-requantize: match no longer holds");
  }
  if (view) {
    // Through a view: the int8 op takes the requantization in place, the view now reshapes the
    // codes, and the quantize's readers read the view.
    const Node q = g.node(m.consumer);
    requantizeInPlace(g, m.anchor, q);
    g.mutableValue(view->outputs[0]).dtype = quantizedDType(q);
    g.replaceAllUses(q.outputs[0], view->outputs[0]);
    g.eraseNode(m.consumer);
    return Status::ok();
  }
  // The int8 op moves to the quantize's position and takes its output (the u8/s8 value).
  Node producer = g.node(m.anchor);
  Node& q = g.mutableNode(m.consumer);
  takeRequantization(producer, q);
  q.op = producer.op;
  q.overload = producer.overload;
  q.args = std::move(producer.args);
  g.eraseNode(m.anchor);
  return Status::ok();
}

enum class RequantBug { None, RoundHalfAway, MissingClamp, DroppedZeroPoint, ScaleNotInverted, RangeUnchecked };

// quantize_per_tensor(y) (after the int8 op's f32 result y, relu or not) against oneDNN's dst
// scale, zero point and saturation. Goal 1: the scaled value t (y * (1/s) on both sides);
// goal 2..3: the code of every t, for u8 and s8.
Obligation requantize(RequantBug bug) {
  ObligationBuilder ob("int8-requantize");
  Expr y = ob.var("y[o]"), s = ob.var("y.scale");
  ob.assume(s > 0);
  Expr inv = ob.fresh("1/y.scale", [&](Expr r) { return std::vector<Expr>{r * s == 1}; });
  // oneDNN applies the dst scale as a multiplication by its reciprocal too (the kernels
  // precompute 1/scale); the reals have one reciprocal, its float32 roundings differ (the one-step
  // caveat of int8.h).
  ob.prove("t = y * (1/s)", y * inv, bug == RequantBug::ScaleNotInverted ? y * s : y * inv);
  {
    // q(view(y)) = view(q(y)): the scaled value (and so the code) is per element, on an explicit
    // [2, 3, 2] -> [6, 2] tensor.
    using sem::ElementTensor;
    const ElementTensor yt = ElementTensor::variables("y", {2, 3, 2});
    auto scaled = [inv](const ElementTensor& t) {
      return ElementTensor::fromFunction(t.sizes(), [t, inv](const sem::Index& i) { return t.at(i) * inv; });
    };
    sem::proveElementwise(ob, "view", scaled(sem::view(yt, {6, 2}, "undefined-view")),
                          sem::view(scaled(yt), {6, 2}, "undefined-view"));
  }
  struct Range {
    const char* dtype;
    int lo, hi;
  };
  for (Range r : {Range{"u8", 0, 255}, Range{"s8", -128, 127}}) {
    const std::string d = r.dtype;
    Expr t = ob.var("t." + d), z = ob.var("y.zero_point." + d, Sort::Int);
    Expr qmin = ob.var("y.qmin." + d, Sort::Int), qmax = ob.var("y.qmax." + d, Sort::Int);
    ob.assume(z >= Expr::integer(r.lo)).assume(z <= Expr::integer(r.hi)).assume(qmin <= z).assume(z <= qmax);
        // Integer constants: a Real-typed bound makes Z3 compare the codes as reals (Unknown).
    const Expr lo = Expr::integer(r.lo), hi = Expr::integer(r.hi);
    if (bug != RequantBug::RangeUnchecked) ob.assume(qmin == lo).assume(qmax == hi);
    else ob.assume(qmin >= lo).assume(qmax <= hi);
    Expr source = sem::clamp(roundHalfEven(ob, t, "round(t." + d + ")") + z, qmin, qmax);
    Expr n = bug == RequantBug::RoundHalfAway ? roundHalfAway(ob, t, "nearbyint(t." + d + ")")
                                              : roundHalfEven(ob, t, "nearbyint(t." + d + ")");
    Expr code = bug == RequantBug::DroppedZeroPoint ? n : n + z;
    Expr target = bug == RequantBug::MissingClamp ? code : sem::clamp(code, Expr::integer(r.lo), Expr::integer(r.hi));
    ob.prove("q." + d, source, target);
  }
  return ob.build();
}

}  // namespace

RuleDeclaration int8Requantize() {
  return {
      .id = "int8-requantize",
      .summary = "quantize_per_tensor of an int8 op's f32 result -> the op's u8/s8 output (dst scale, zero point)",
      .math = "clamp(round_half_even(y * (1/s)) + z, qmin, qmax) = saturate(nearbyint(y * (1/s)) + z), [qmin, qmax] "
              "the dtype's range",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchRequantize,
      .rewrite = rewriteRequantize,
      .obligation = u::bindNoModel(requantize, RequantBug::None),
      .mutants = {{"round-half-away", "ties rounded away from zero (std::round) instead of to even",
                   u::bindNoModel(requantize, RequantBug::RoundHalfAway)},
                  {"missing-clamp", "no saturation to the dtype's range", u::bindNoModel(requantize, RequantBug::MissingClamp)},
                  {"dropped-zero-point", "output zero point not added", u::bindNoModel(requantize, RequantBug::DroppedZeroPoint)},
                  {"scale-not-inverted", "y * s instead of y / s", u::bindNoModel(requantize, RequantBug::ScaleNotInverted)},
                  {"reduced-range-unchecked", "a [qmin, qmax] narrower than the dtype saturated to the dtype",
                   u::bindNoModel(requantize, RequantBug::RangeUnchecked)}},
  };
}

// ---- int8-maxpool-codes -------------------------------------------------------------------------

namespace {

/// The operands of max_pool2d and max_pool2d_with_indices (the same in both).
struct MaxPoolOperands {
  Arg self, kernelSize, stride, padding, dilation, ceilMode;
};

template <class Pool>  // ir::MaxPool2d or ir::MaxPool2dWithIndices
MaxPoolOperands maxPoolOperandsOf(const Node& pool) {
  return {operand(pool, Pool::self),    operand(pool, Pool::kernel_size), operand(pool, Pool::stride),
          operand(pool, Pool::padding), operand(pool, Pool::dilation),    operand(pool, Pool::ceil_mode)};
}

/// max_pool2d[_with_indices]'s operands, or nullopt for another operator or another arity.
std::optional<MaxPoolOperands> maxPoolOperands(const Node& pool) {
  if (pool.op == "aten::max_pool2d" && hasOperands<ir::MaxPool2d>(pool)) return maxPoolOperandsOf<ir::MaxPool2d>(pool);
  if (pool.op == "aten::max_pool2d_with_indices" && hasOperands<ir::MaxPool2dWithIndices>(pool)) {
    return maxPoolOperandsOf<ir::MaxPool2dWithIndices>(pool);
  }
  return std::nullopt;
}

/// The max_pool2d[_with_indices](y, kernel, stride, padding, dilation, ceil_mode) quantize \p q
/// reads: its values read by q alone, the indices unused, the geometry static, y 4-d.
const Node* maxPoolReadBy(const Graph& g, const Node& q, std::string* whyNot) {
  if (q.args.empty()) return nullptr;
  const Node* pool = u::producerOf(g, quantizeInput(q));
  if (!pool) return nullptr;
  auto ops = maxPoolOperands(*pool);
  if (!ops || u::valueOf(quantizeInput(q)) != pool->outputs[0]) return nullptr;
  if (!u::hasSingleUse(g, pool->outputs[0]) ||
      (pool->outputs.size() > 1 && (!g.users(pool->outputs[1]).empty() || g.isGraphOutput(pool->outputs[1])))) {
    return u::why(whyNot, "the pooled values have other readers, or the indices are used"), nullptr;
  }
  const ir::Value& in = g.value(u::valueOf(ops->self));
  if (!in.hasShape || in.shape.size() != 4) return u::why(whyNot, "not a 4-d input of known rank"), nullptr;
  if (ops->ceilMode.kind != Arg::Kind::Bool) return u::why(whyNot, "ceil_mode not static"), nullptr;
  for (const Arg* geometry : {&ops->kernelSize, &ops->stride, &ops->padding, &ops->dilation}) {
    if (!geometry->asIntList().isOk()) return u::why(whyNot, "kernel/stride/padding/dilation not static"), nullptr;
  }
  return pool;
}

/// Quantize \p qId becomes verifuse::qmax_pool(codes, the pool's geometry), keeping its u8/s8
/// output of the pooled shape; the pool goes.
void poolCodesAt(Graph& g, NodeId qId, NodeId poolId, const Arg& codes) {
  const MaxPoolOperands pool = *maxPoolOperands(g.node(poolId));
  using ir::QMaxPool;
  std::vector<Arg> operands = OperandsOf<QMaxPool>()
                                  .set(QMaxPool::codes, codes)
                                  .set(QMaxPool::kernel_size, pool.kernelSize)
                                  .set(QMaxPool::stride, pool.stride)
                                  .set(QMaxPool::padding, pool.padding)
                                  .set(QMaxPool::dilation, pool.dilation)
                                  .set(QMaxPool::ceil_mode, pool.ceilMode)
                                  .take();
  Node& q = g.mutableNode(qId);
  q.op = "verifuse::qmax_pool";
  q.overload = "";
  q.args = std::move(operands);
  g.eraseNode(poolId);
}

// q(max_pool2d[_with_indices](dq(x, s, z), ...)[0], s, z) with the same parameters on both sides
// (X86InductorQuantizer shares the input's).
const Node* maxPoolOfCodes(const Graph& g, const Node& q, std::optional<TensorQParams>* x, std::string* whyNot) {
  const Node* pool = maxPoolReadBy(g, q, whyNot);
  if (!pool) return nullptr;
  *x = dequantizedInput(g, selfOperand(*pool), whyNot);
  if (!*x) return nullptr;
  auto p = tensorQParams(q, whyNot);
  if (!p) return nullptr;
  if (p->scale != (*x)->scale || p->zeroPoint != (*x)->zeroPoint || p->dtype != (*x)->dtype || p->qmin != (*x)->qmin ||
      p->qmax != (*x)->qmax) {
    return u::why(whyNot, "quantize and dequantize around the max pool differ in scale, zero point or range"), nullptr;
  }
  return pool;
}

std::optional<Match> matchMaxPoolCodes(const Graph& g, NodeId id, std::string* whyNot) {
  std::optional<TensorQParams> x;
  const Node* pool = maxPoolOfCodes(g, g.node(id), &x, whyNot);
  if (!pool) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteMaxPoolCodes(Graph& g, const Match& m, FusionRecord&) {
  std::optional<TensorQParams> x;
  const Node* pool = maxPoolOfCodes(g, g.node(m.anchor), &x, nullptr);
  if (!pool) return internalError("int8-maxpool-codes: match no longer holds");
  poolCodesAt(g, m.anchor, pool->id, x->input);
  return Status::ok();
}

enum class PoolBug { None, ZeroPointIgnored, ScaleSignUnchecked };

// q(max_k dq(x_k)) = max_k x_k over a window of K = 3 codes (a window of any size is the same
// argument: max is associative). Goal 1 (reals): max_k(s (x_k - z)) * (1/s) = max_k(x_k - z)
// needs s > 0 (a negative scale turns the max into a min). Goal 2: the code of the Int
// max_k(x_k - z) is max_k x_k for codes within [qmin, qmax]. Padding never wins: every window
// holds at least one input element (torch's rule) and -inf is below every code.
Obligation maxPoolCodes(PoolBug bug) {
  ObligationBuilder ob("int8-maxpool-codes");
  Expr s = ob.var("scale");
  if (bug != PoolBug::ScaleSignUnchecked) ob.assume(s > 0);
  else ob.assume(!(s == 0));
  Expr inv = ob.fresh("1/scale", [&](Expr r) { return std::vector<Expr>{r * s == 1}; });
  std::vector<Expr> xr, zr;
  Expr z = ob.var("zero_point.real");
  for (int k = 0; k < 3; ++k) xr.push_back(ob.var("x.real[" + std::to_string(k) + "]"));
  auto max3 = [](const std::vector<Expr>& v) { return Expr::max(Expr::max(v[0], v[1]), v[2]); };
  std::vector<Expr> dq, shifted;
  for (const Expr& xk : xr) {
    dq.push_back(s * (xk - z));
    shifted.push_back(xk - z);
  }
  ob.prove("t", max3(dq) * inv, max3(shifted));
  std::vector<Expr> x, xz;
  Expr zi = ob.var("zero_point", Sort::Int), qmin = ob.var("qmin", Sort::Int), qmax = ob.var("qmax", Sort::Int);
  ob.assume(qmin <= zi).assume(zi <= qmax);
  for (int k = 0; k < 3; ++k) {
    Expr xk = ob.var("x[" + std::to_string(k) + "]", Sort::Int);
    ob.assume(qmin <= xk).assume(xk <= qmax);
    x.push_back(xk);
    xz.push_back(xk - zi);
  }
  Expr source = sem::clamp(roundHalfEven(ob, max3(xz), "round(max(x - z))") + zi, qmin, qmax);
  ob.prove("q", source, bug == PoolBug::ZeroPointIgnored ? max3(x) - zi : max3(x));
  return ob.build();
}

}  // namespace

RuleDeclaration int8MaxPoolCodes() {
  return {
      .id = "int8-maxpool-codes",
      .summary = "q(max_pool2d(dq(x, s, z)), s, z) -> max pooling of the u8/s8 codes (verifuse::qmax_pool)",
      .math = "clamp(round(max_k(s (x_k - z)) / s) + z, qmin, qmax) = max_k x_k, s > 0",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchMaxPoolCodes,
      .rewrite = rewriteMaxPoolCodes,
      .obligation = u::bindNoModel(maxPoolCodes, PoolBug::None),
      .mutants = {{"maxpool-zero-point-ignored", "the pooled code taken as max(x) - z",
                   u::bindNoModel(maxPoolCodes, PoolBug::ZeroPointIgnored)},
                  {"maxpool-scale-sign-unchecked", "a negative scale allowed (max of the values is the min of the codes)",
                   u::bindNoModel(maxPoolCodes, PoolBug::ScaleSignUnchecked)}},
  };
}

// ---- int8-requantize-cat / int8-requantize-maxpool ---------------------------------------------

namespace {

// The X86 quantizer quantizes a cat's or a max pool's output, not its inputs: conv -> relu -> cat ->
// q. Quantization is elementwise (so it commutes with cat's selection) and monotone (so with max):
// each int8 op that feeds the cat / pool takes the requantization itself (int8-requantize's dst
// scale, zero point and saturation) and the cat / pool runs on the codes.
std::optional<std::vector<NodeId>> catOfInt8(const Graph& g, const Node& q, const Node** cat, std::string* whyNot) {
  if (q.args.empty()) return std::nullopt;
  *cat = u::producerOf(g, quantizeInput(q));
  const Node* c = *cat;
  if (!c || c->op != "aten::cat" || !hasOperands<ir::Cat>(*c)) return std::nullopt;
  const Arg& tensors = operand(*c, ir::Cat::tensors);
  if (tensors.kind != Arg::Kind::List || tensors.list.empty() || !u::hasSingleUse(g, c->outputs[0])) {
    return std::nullopt;
  }
  std::vector<NodeId> producers;
  for (const Arg& a : tensors.list) {
    const Node* p = floatInt8Producer(g, a);
    if (!p) return u::why(whyNot, "a cat input is not an int8 op's f32 result read only by the cat"), std::nullopt;
    producers.push_back(p->id);
  }
  auto qp = tensorQParams(q, whyNot);
  if (!qp) return std::nullopt;
  if (!fullRange(*qp)) return u::why(whyNot, "requantization range narrower than the dtype"), std::nullopt;
  return producers;
}

std::optional<Match> matchRequantizeCat(const Graph& g, NodeId id, std::string* whyNot) {
  const Node* cat = nullptr;
  if (!catOfInt8(g, g.node(id), &cat, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteRequantizeCat(Graph& g, const Match& m, FusionRecord&) {
  const Node q = g.node(m.anchor);
  const Node* cat = nullptr;
  auto producers = catOfInt8(g, q, &cat, nullptr);
  if (!producers) return internalError("int8-requantize-cat: match no longer holds");
  const ValueId catOut = cat->outputs[0];
  for (NodeId p : *producers) requantizeInPlace(g, p, q);
  g.mutableValue(catOut).dtype = quantizedDType(q);
  g.replaceAllUses(q.outputs[0], catOut);
  g.eraseNode(m.anchor);
  return Status::ok();
}

enum class CatBug { None, OrderSwapped };

// q(cat(y_1, y_2)) = cat(q(y_1), q(y_2)): the scaled value y * (1/s) commutes with cat (explicit
// [1, 2, 2] and [1, 1, 2] along dim 1), then the code of every t is int8-requantize's (its goals).
Obligation requantizeCat(CatBug bug) {
  Obligation o = requantize(RequantBug::None);
  o.name = "int8-requantize-cat";
  ObligationBuilder ob("int8-requantize-cat.commute");
  Expr s = ob.var("y.scale");
  ob.assume(s > 0);
  Expr inv = ob.fresh("1/y.scale", [&](Expr r) { return std::vector<Expr>{r * s == 1}; });
  using sem::ElementTensor;
  const ElementTensor a = ElementTensor::variables("y1", {1, 2, 2}), b = ElementTensor::variables("y2", {1, 1, 2});
  auto scaled = [inv](const ElementTensor& t) {
    return ElementTensor::fromFunction(t.sizes(), [t, inv](const sem::Index& i) { return t.at(i) * inv; });
  };
  sem::proveElementwise(ob, "cat", scaled(sem::cat({a, b}, 1)),
                        bug == CatBug::OrderSwapped ? sem::cat({scaled(b), scaled(a)}, 1) : sem::cat({scaled(a), scaled(b)}, 1));
  Obligation c = ob.build();
  for (auto& x : c.assumptions) o.assumptions.push_back(x);
  for (auto& f : c.fresh) o.fresh.push_back(f);
  for (auto& goal : c.goals) o.goals.push_back(goal);
  return o;
}

}  // namespace

RuleDeclaration int8RequantizeCat() {
  return {
      .id = "int8-requantize-cat",
      .summary = "q(cat of int8 ops' f32 results) -> each op requantized (u8/s8), the cat on the codes",
      .math = "q(cat(y_1, ..., y_n)) = cat(q(y_1), ..., q(y_n)), q = int8-requantize's code",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchRequantizeCat,
      .rewrite = rewriteRequantizeCat,
      .obligation = u::bindNoModel(requantizeCat, CatBug::None),
      .mutants = {{"cat-order-swapped", "the requantized inputs concatenated in the other order",
                   u::bindNoModel(requantizeCat, CatBug::OrderSwapped)}},
  };
}

namespace {

const Node* maxPoolOfInt8(const Graph& g, const Node& q, const Node** producer, std::string* whyNot) {
  const Node* pool = maxPoolReadBy(g, q, whyNot);
  if (!pool) return nullptr;
  *producer = floatInt8Producer(g, selfOperand(*pool));
  if (!*producer) return nullptr;
  auto qp = tensorQParams(q, whyNot);
  if (!qp) return nullptr;
  if (!fullRange(*qp)) return u::why(whyNot, "requantization range narrower than the dtype"), nullptr;
  return pool;
}

std::optional<Match> matchRequantizeMaxPool(const Graph& g, NodeId id, std::string* whyNot) {
  const Node* producer = nullptr;
  if (!maxPoolOfInt8(g, g.node(id), &producer, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteRequantizeMaxPool(Graph& g, const Match& m, FusionRecord&) {
  const Node* producer = nullptr;
  const Node* pool = maxPoolOfInt8(g, g.node(m.anchor), &producer, nullptr);
  if (!pool) return internalError("int8-requantize-maxpool: match no longer holds");
  const NodeId poolId = pool->id, producerId = producer->id;
  const Arg codes = Arg::value(producer->outputs[0]);
  requantizeInPlace(g, producerId, g.node(m.anchor));
  poolCodesAt(g, m.anchor, poolId, codes);
  return Status::ok();
}

enum class MaxPoolRequantBug { None, ScaleSignUnchecked, RoundHalfAway };

// q(max_k y_k) = max_k q(y_k) over a window of K = 3: goal 1, max_k(y_k) * (1/s) = max_k(y_k *
// (1/s)) needs s > 0; goal 2, the code is monotone: clamp(round(max_k t_k) + z) = max_k clamp(
// round(t_k) + z) with round half to even (both sides; oneDNN's nearbyint is the same rounding).
Obligation requantizeMaxPool(MaxPoolRequantBug bug) {
  ObligationBuilder ob("int8-requantize-maxpool");
  Expr s = ob.var("y.scale");
  if (bug == MaxPoolRequantBug::ScaleSignUnchecked) ob.assume(!(s == 0));
  else ob.assume(s > 0);
  Expr inv = ob.fresh("1/y.scale", [&](Expr r) { return std::vector<Expr>{r * s == 1}; });
  auto max3 = [](const std::vector<Expr>& v) { return Expr::max(Expr::max(v[0], v[1]), v[2]); };
  std::vector<Expr> y, scaled, t;
  for (int k = 0; k < 3; ++k) {
    y.push_back(ob.var("y[" + std::to_string(k) + "]"));
    scaled.push_back(y.back() * inv);
    t.push_back(ob.var("t[" + std::to_string(k) + "]"));
  }
  ob.prove("t", max3(y) * inv, max3(scaled));
  Expr z = ob.var("y.zero_point", Sort::Int);
  ob.assume(z >= Expr::integer(0)).assume(z <= Expr::integer(255));
  auto code = [&](Expr v, const std::string& name, bool away) {
    Expr n = away ? roundHalfAway(ob, v, name) : roundHalfEven(ob, v, name);
    return sem::clamp(n + z, Expr::integer(0), Expr::integer(255));
  };
  std::vector<Expr> codes;
  for (int k = 0; k < 3; ++k) {
    codes.push_back(code(t[static_cast<size_t>(k)], "nearbyint(t[" + std::to_string(k) + "])",
                         bug == MaxPoolRequantBug::RoundHalfAway));
  }
  ob.prove("q.u8", code(max3(t), "round(max t)", false), max3(codes));
  return ob.build();
}

}  // namespace

RuleDeclaration int8RequantizeMaxPool() {
  return {
      .id = "int8-requantize-maxpool",
      .summary = "q(max_pool2d(int8 op f32)) -> the op requantized (u8/s8), max pooling on the codes",
      .math = "clamp(round(max_k y_k / s) + z) = max_k clamp(nearbyint(y_k / s) + z), s > 0",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchRequantizeMaxPool,
      .rewrite = rewriteRequantizeMaxPool,
      .obligation = u::bindNoModel(requantizeMaxPool, MaxPoolRequantBug::None),
      .mutants = {{"maxpool-requant-scale-sign-unchecked", "a negative scale allowed (max then becomes min)",
                   u::bindNoModel(requantizeMaxPool, MaxPoolRequantBug::ScaleSignUnchecked)},
                  {"maxpool-requant-round-half-away", "the pooled codes rounded half away from zero",
                   u::bindNoModel(requantizeMaxPool, MaxPoolRequantBug::RoundHalfAway)}},
  };
}

// ---- int8-select-codes ------------------------------------------------------------------------

namespace {

// q(cat([dq(a_1, s, z), ..., dq(a_n, s, z)], dim), s, z) or q(view(dq(a, s, z), sizes), s, z), every
// parameter equal (the X86 quantizer shares cat's and a flatten's quantization): each output
// element is one input element, and q(dq(code)) is that code, so the op runs on the codes.
struct SelectOfCodes {
  const Node* op = nullptr;
  std::vector<Arg> codes;  ///< the quantized inputs, in the op's order
};

std::optional<SelectOfCodes> selectOfCodes(const Graph& g, const Node& q, std::string* whyNot) {
  if (q.args.empty()) return std::nullopt;
  const Node* op = u::producerOf(g, quantizeInput(q));
  if (!op || !u::hasSingleUse(g, op->outputs[0])) return std::nullopt;
  std::vector<Arg> inputs;
  if (op->op == "aten::cat" && hasOperands<ir::Cat>(*op)) {
    const Arg& tensors = operand(*op, ir::Cat::tensors);
    if (tensors.kind != Arg::Kind::List || tensors.list.empty()) return std::nullopt;
    inputs = tensors.list;
  } else if (op->op == "aten::view" && hasOperands<ir::View>(*op)) {
    inputs = {operand(*op, ir::View::self)};
  } else {
    return std::nullopt;
  }
  auto p = tensorQParams(q, whyNot);
  if (!p) return std::nullopt;
  SelectOfCodes m{op, {}};
  for (const Arg& a : inputs) {
    auto x = dequantizedInput(g, a, whyNot);
    if (!x) return std::nullopt;
    if (x->scale != p->scale || x->zeroPoint != p->zeroPoint || x->dtype != p->dtype || x->qmin != p->qmin ||
        x->qmax != p->qmax) {
      return u::why(whyNot, "an input's dequantize differs from the quantize in scale, zero point or range"), std::nullopt;
    }
    m.codes.push_back(x->input);
  }
  if (op->op == "aten::view") {
    // A view needs the codes to have its input's strides: the dequantize's result follows a dense
    // input's layout, and the ops below always write dense outputs (a strided slice of codes
    // would not; its view could fail where the dequantized copy's did not).
    static const std::set<std::string> dense = {kQuantize, "verifuse::quantize", kQConv, kQLinear, "verifuse::qmax_pool",
                                                "aten::cat"};
    const Node* producer = u::producerOf(g, m.codes[0]);
    if (!producer || !dense.count(producer->op)) {
      return u::why(whyNot, "the codes are not known to be dense (a view of them may fail)"), std::nullopt;
    }
  }
  return m;
}

std::optional<Match> matchSelectCodes(const Graph& g, NodeId id, std::string* whyNot) {
  if (!selectOfCodes(g, g.node(id), whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteSelectCodes(Graph& g, const Match& m, FusionRecord&) {
  auto sel = selectOfCodes(g, g.node(m.anchor), nullptr);
  if (!sel) return internalError("int8-select-codes: match no longer holds");
  const Node& op = *sel->op;
  std::vector<Arg> operands;
  if (op.op == "aten::cat") {
    using ir::Cat;
    operands = OperandsOf<Cat>()
                   .set(Cat::tensors, Arg::makeList(sel->codes))
                   .set(Cat::dim, operand(op, Cat::dim))
                   .take();
  } else {
    using ir::View;
    operands = OperandsOf<View>().set(View::self, sel->codes[0]).set(View::size, operand(op, View::size)).take();
  }
  const NodeId opId = op.id;
  Node& q = g.mutableNode(m.anchor);  // keeps the quantize's u8/s8 output of the op's shape
  q.op = op.op;
  q.overload = op.overload;
  q.args = std::move(operands);
  g.eraseNode(opId);
  return Status::ok();
}

enum class SelectBug { None, ScalesUnchecked, ZeroPointIgnored };

// One output element of cat / view is one input element x (a code in [qmin, qmax]): goal 1 (reals)
// s (x - z) * (1/s') = x - z with s' the quantize's scale (equal to s: the guard); goal 2: the code
// clamp(round(x - z) + z, qmin, qmax) = x.
Obligation selectCodes(SelectBug bug) {
  ObligationBuilder ob("int8-select-codes");
  Expr s = ob.var("input.scale"), sq = ob.var("output.scale"), xr = ob.var("x.real"), zr = ob.var("zero_point.real");
  ob.assume(s > 0).assume(sq > 0);
  if (bug != SelectBug::ScalesUnchecked) ob.assume(s == sq);
  Expr inv = ob.fresh("1/output.scale", [&](Expr r) { return std::vector<Expr>{r * sq == 1}; });
  ob.prove("t", s * (xr - zr) * inv, xr - zr);
  Expr x = ob.var("x", Sort::Int), z = ob.var("zero_point", Sort::Int);
  Expr qmin = ob.var("qmin", Sort::Int), qmax = ob.var("qmax", Sort::Int);
  ob.assume(qmin <= x).assume(x <= qmax).assume(qmin <= z).assume(z <= qmax);
  Expr source = sem::clamp(roundHalfEven(ob, x - z, "round(x - z)") + z, qmin, qmax);
  ob.prove("q", source, bug == SelectBug::ZeroPointIgnored ? x - z : x);
  return ob.build();
}

}  // namespace

RuleDeclaration int8SelectCodes() {
  return {
      .id = "int8-select-codes",
      .summary = "q(cat / view of dq(x, s, z), s, z) -> the cat / view of the u8/s8 codes",
      .math = "clamp(round(s (x - z) / s) + z, qmin, qmax) = x for every selected element x",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchSelectCodes,
      .rewrite = rewriteSelectCodes,
      .obligation = u::bindNoModel(selectCodes, SelectBug::None),
      .mutants = {{"select-scales-unchecked", "inputs and output quantized with different scales",
                   u::bindNoModel(selectCodes, SelectBug::ScalesUnchecked)},
                  {"select-zero-point-ignored", "the code taken as x - z",
                   u::bindNoModel(selectCodes, SelectBug::ZeroPointIgnored)}},
  };
}

// ---- int8-residual-sum ------------------------------------------------------------------------

namespace {

struct ResidualMatch {
  const Node* producer = nullptr;
  std::vector<NodeId> between;  ///< the add (and relu), read only on the way to the quantize
  TensorQParams residual;
  bool relu = false;
};

// q(v, sy, zy, dtype range) with v = relu(a) or a, a = add(p, dq(r)) or add(dq(r), p) (alpha 1), p a
// single-use int8 op with an f32 result and no post-op, r of the output's dtype and shape.
std::optional<ResidualMatch> residualOf(const Graph& g, const Node& q, std::string* whyNot) {
  if (q.args.empty()) return std::nullopt;
  ResidualMatch m;
  const Node* a = u::producerOf(g, quantizeInput(q));
  if (a && a->op == "aten::relu" && hasOperands<ir::Unary>(*a) && u::hasSingleUse(g, a->outputs[0])) {
    m.relu = true;
    m.between.push_back(a->id);
    a = u::producerOf(g, selfOperand(*a));
  }
  using ir::Add;
  if (!a || a->op != "aten::add" || a->overload != "Tensor" || !hasOperands<Add>(*a)) return std::nullopt;
  if (!u::hasSingleUse(g, a->outputs[0])) return std::nullopt;
  // The int8 op on either side of the add, the dequantized residual on the other.
  for (auto [int8Side, residualSide] : {std::pair{Add::self, Add::other}, std::pair{Add::other, Add::self}}) {
    const Node* p = floatInt8Producer(g, operand(*a, int8Side));
    if (!p || !hasNoFusedPostOps(*p)) continue;
    auto r = dequantizedInput(g, operand(*a, residualSide), whyNot);
    if (!r) continue;
    auto alpha = u::numberArg(operand(*a, Add::alpha));
    if (!alpha || *alpha != 1.0) return u::why(whyNot, "add with alpha != 1"), std::nullopt;
    const auto* ps = u::staticShape(g, p->outputs[0]);
    const auto* rs = u::staticShape(g, u::valueOf(r->input));
    if (!ps || !rs || *ps != *rs) return u::why(whyNot, "residual shape differs from (or is not known to equal) the output's"), std::nullopt;
    m.producer = p;
    m.residual = *r;
    m.between.push_back(a->id);
    return m;
  }
  return std::nullopt;
}

std::optional<Match> matchResidualSum(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  auto m = residualOf(g, n, whyNot);
  if (!m) return std::nullopt;
  auto q = tensorQParams(n, whyNot);
  if (!q) return std::nullopt;
  if (!fullRange(*q)) {
    return u::why(whyNot, "requantization range narrower than the dtype: oneDNN saturates to the dtype's range"),
           std::nullopt;
  }
  if (m->residual.dtype != q->dtype) {
    return u::why(whyNot, "residual and output dtypes differ (the sum post-op reads the residual in the output buffer)"),
           std::nullopt;
  }
  return Match{m->producer->id, id, 0};
}

Status rewriteResidualSum(Graph& g, const Match& m, FusionRecord&) {
  Node& qn = g.mutableNode(m.consumer);
  auto r = residualOf(g, qn, nullptr);
  if (!r) return internalError("int8-residual-sum: match no longer holds");
  Node producer = g.node(m.anchor);
  // The int8 form of sum: no scale of its own (the residual is dequantized with r_scale, r_zp).
  std::vector<PostOpSpec> postOps = {PostOpSpec{"sum", {}}};
  if (r->relu) postOps.push_back(PostOpSpec{"relu", {}});
  if (!setFusedPostOps(producer, postOps)) return internalError("int8-residual-sum: no post_ops operand");
  takeRequantization(producer, qn);
  int8Operand(producer, "residual") = r->residual.input;
  int8Operand(producer, "r_scale") = Arg::real(r->residual.scale);
  int8Operand(producer, "r_zp") = Arg::integer(r->residual.zeroPoint);
  qn.op = producer.op;
  qn.overload = producer.overload;
  qn.args = std::move(producer.args);
  g.eraseNode(m.anchor);
  for (NodeId between : r->between) g.eraseNode(between);  // single-use: only the quantize read them
  return Status::ok();
}

enum class SumBug { None, ResidualZeroPointDropped, ResidualScaleOne, ReluBeforeSum };

// q([relu](y + dq(r, sr, zr))) against oneDNN's sum post-op sr * (r - zr) (the residual's codes in
// the output buffer), [relu], then the requantization of int8-requantize (its code goals again).
Obligation residualSum(SumBug bug, bool relu) {
  ObligationBuilder ob(relu ? "int8-residual-sum-relu" : "int8-residual-sum");
  Expr y = ob.var("y[o]"), r = ob.var("residual[o]"), sr = ob.var("residual.scale"), zr = ob.var("residual.zero_point");
  Expr s = ob.var("y.scale");
  ob.assume(s > 0).assume(sr > 0);
  Expr inv = ob.fresh("1/y.scale", [&](Expr v) { return std::vector<Expr>{v * s == 1}; });
  Expr source = sem::add(y, (r - zr) * sr);  // dequantize_per_tensor(r) added to the f32 result
  Expr sumIn = bug == SumBug::ResidualZeroPointDropped ? r : r - zr;
  Expr target = dnnl::sumPostOp(sumIn, y, bug == SumBug::ResidualScaleOne ? Expr(1) : sr);
  if (relu) {
    source = sem::relu(source);
    target = bug == SumBug::ReluBeforeSum ? dnnl::sumPostOp(sumIn, dnnl::eltwiseRelu(y, 0), sr) : dnnl::eltwiseRelu(target, 0);
  }
  ob.prove("t = post_ops(y) * (1/s)", source * inv, target * inv);
  Expr t = ob.var("t"), z = ob.var("y.zero_point", Sort::Int);
  ob.assume(z >= Expr::integer(0)).assume(z <= Expr::integer(255));
  ob.prove("q.u8", sem::clamp(roundHalfEven(ob, t, "round(t)") + z, Expr::integer(0), Expr::integer(255)),
           sem::clamp(roundHalfEven(ob, t, "nearbyint(t)") + z, Expr::integer(0), Expr::integer(255)));
  return ob.build();
}

}  // namespace

RuleDeclaration int8ResidualSum() {
  return {
      .id = "int8-residual-sum",
      .summary = "q([relu](int8 op f32 + dq(residual))) -> the op's u8/s8 output with the sum post-op",
      .math = "clamp(round([relu](y + sr (r - zr)) / s) + z) = saturate(nearbyint([relu](sum(sr, zr)(r, y)) / s) + z)",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchResidualSum,
      .rewrite = rewriteResidualSum,
      .obligation = [](const sem::DotModel&) {
        Obligation plain = residualSum(SumBug::None, false), withRelu = residualSum(SumBug::None, true);
        // Both forms in one obligation: the goals of the relu form under fresh names.
        Obligation o = plain;
        o.name = "int8-residual-sum";
        for (auto& a : withRelu.assumptions) o.assumptions.push_back(a);
        for (auto& f : withRelu.fresh) o.fresh.push_back(f);
        for (auto& goal : withRelu.goals) o.goals.push_back({goal.label + " (relu)", goal.source, goal.target});
        return o;
      },
      .mutants = {{"residual-zero-point-dropped", "sum post-op without the residual's zero point",
                   u::bindNoModel(residualSum, SumBug::ResidualZeroPointDropped, false)},
                  {"residual-scale-one", "sum post-op scale 1 instead of the residual's scale",
                   u::bindNoModel(residualSum, SumBug::ResidualScaleOne, false)},
                  {"relu-before-sum", "relu on the conv result before the residual is added",
                   u::bindNoModel(residualSum, SumBug::ReluBeforeSum, true)}},
  };
}

}  // namespace verifuse::rules::families
