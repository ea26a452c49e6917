// Row fusion: maximal chains of float32 (or bf16) elementwise ops and last-dim row reductions
// become ONE verifuse::rowwise node, which the executor runs on the fused row engine
// (kernels/include/verifuse/kernels/rowwise.h: one pass over the rows) or, as fallback, as the
// same program interpreted op by op on ATen.
//
//   row-fusion   sink(... ops ...) = rowwise(inputs..., program)
//
// The chain is gathered backwards from a sink (a table op none of whose readers would take it into
// their own chain) through the operands whose producers are table ops (TABLE below: add/sub/rsub/
// mul/div, neg, exp, log, sqrt, rsqrt, reciprocal, pow(tensor, number), relu, gelu (none/tanh),
// silu, sigmoid, tanh, erf, clamp, where with a bool mask, _to_copy between float32 and
// bfloat16, mean/sum/amax over the last dim with keepdim, native_layer_norm over the last dim,
// _softmax over the last dim, and HF's rotate_half written cat(-x[..., C/2:], x[..., :C/2])).
// The translation table turns each op into row instructions; the program is built op by op in
// graph order, so it is the chain's own composition (no reassociation across ops).
//
// Guards (each with a reason at the node): every member's output is float32 or bfloat16 (the IR's
// dtype from the lowering; unknown is refused; a bf16 result is the entry's float32 instructions on
// the widened operands followed by one rounding to bf16, as eager computes bf16 ops), statically shaped, and broadcasts to the sink's shape S
// [..., C] (numpy rules, which the engine's loads follow: 0 strides are broadcasts); reductions,
// layer norm, softmax and rotate_half read a value whose last dim is C (a reduction over a
// broadcast row would count it C times); the reduction keeps its dim; a where's mask is bool; a
// layer norm's mean and rstd outputs are unread; _safe_softmax is refused (its fully masked rows
// are 0, the engine's NaN). Views stop a chain (they are leaves), except the slices inside the
// rotate_half pattern. A member read outside the chain becomes an extra output (a store) when its
// shape is S and every outside reader comes after the sink (the rowwise node takes the sink's
// place); otherwise it is left to ATen and read as an input. A chain of one elementwise op stays
// on ATen (nothing to fuse); a single layer norm or softmax is fused.
//
// This rule runs in its own pass (Phase::kRowFusion) after the fusion rules reached their
// fixpoint: linears and convs keep their bias/activation/residual post-ops, and attention was
// already recognized by then.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "rules/families.h"
#include "rules/row_fusion.h"
#include "rules/rule_util.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/kernels/rowwise.h"
#include "verifuse/verify/semantics.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace row_fusion {

bool isComposite(Kind k) { return k == Kind::LayerNorm || k == Kind::Softmax; }
/// Entries that read a whole row of their (first) operand.
bool readsRow(Kind k) {
  return k == Kind::Mean || k == Kind::Sum || k == Kind::Amax || k == Kind::LayerNorm || k == Kind::Softmax ||
         k == Kind::RotateHalf;
}

/// The row instructions of one table entry. \p in are the operands' row values (numbers already
/// constants), in OpSpec::operands order. Used by the rule and, with the same code, by its
/// obligation (which interprets the program symbolically), so the proof is about this function.
RowValue emit(RowProgram& p, const OpSpec& s, const std::vector<RowValue>& in, Bug bug) {
  auto scaled = [&](RowValue b) { return s.alpha == 1.0 ? b : p.mul(b, p.constant(static_cast<float>(s.alpha))); };
  switch (s.kind) {
    case Kind::Add: return bug == Bug::AddNumberDropped ? in[0] : p.add(in[0], scaled(in[1]));
    case Kind::Sub: return p.sub(in[0], scaled(in[1]));
    case Kind::Rsub: return p.sub(in[1], scaled(in[0]));
    case Kind::Mul: return p.mul(in[0], in[1]);
    case Kind::Div: return p.div(in[0], in[1]);
    case Kind::Neg: return p.unary(RowOp::kNeg, in[0]);
    case Kind::Exp: return p.unary(RowOp::kExp, in[0]);
    case Kind::Log: return p.unary(RowOp::kLog, in[0]);
    case Kind::Sqrt: return p.unary(RowOp::kSqrt, in[0]);
    case Kind::Rsqrt: return p.unary(RowOp::kRsqrt, in[0]);
    case Kind::Reciprocal: return p.unary(RowOp::kReciprocal, in[0]);
    case Kind::Pow: return p.pow(in[0], static_cast<float>(s.exponent));
    case Kind::Relu: return p.unary(RowOp::kRelu, in[0]);
    case Kind::GeluErf: return p.unary(bug == Bug::GeluSwapped ? RowOp::kGeluTanh : RowOp::kGeluErf, in[0]);
    case Kind::GeluTanh: return p.unary(RowOp::kGeluTanh, in[0]);
    case Kind::Silu: return p.unary(RowOp::kSilu, in[0]);
    case Kind::Sigmoid: return p.unary(RowOp::kSigmoid, in[0]);
    case Kind::Tanh: return p.unary(RowOp::kTanh, in[0]);
    case Kind::Erf: return p.unary(RowOp::kErf, in[0]);
    case Kind::Clamp: return p.clamp(in[0], static_cast<float>(s.lo), static_cast<float>(s.hi));
    case Kind::Where: return p.where(in[0], in[1], in[2]);
    case Kind::Identity: return in[0];
    case Kind::Mean: return p.reduce(RowOp::kMean, in[0]);
    case Kind::Sum: return p.reduce(RowOp::kSum, in[0]);
    case Kind::Amax: return p.reduce(RowOp::kRowMax, in[0]);
    case Kind::LayerNorm: {
      // Two-pass, as the engine's layerNormProgram: d = x - mean(x); y = d * rsqrt(mean(d*d) + eps) * w + b.
      RowValue x = in[0];
      RowValue d = bug == Bug::LayerNormNoMean ? x : p.sub(x, p.reduce(RowOp::kMean, x));
      RowValue var = p.reduce(RowOp::kMean, p.mul(d, d));
      RowValue y = p.mul(d, p.unary(RowOp::kRsqrt, p.add(var, p.constant(static_cast<float>(s.eps)))));
      size_t k = 1;
      if (s.weight) y = p.mul(y, in[k++]);
      if (s.bias) y = p.add(y, in[k++]);
      return y;
    }
    case Kind::Softmax: {
      // As ATen's last-dim kernel: e = exp(x - rowmax(x)); y = e * (1 / sum(e)).
      RowValue e = p.unary(RowOp::kExp, p.sub(in[0], p.reduce(RowOp::kRowMax, in[0])));
      return p.mul(e, p.unary(RowOp::kReciprocal, p.reduce(RowOp::kSum, e)));
    }
    case Kind::RotateHalf: {
      RowValue r = p.rotateHalf(in[0]);
      return bug == Bug::RotarySignFlipped ? p.unary(RowOp::kNeg, r) : r;
    }
  }
  return in[0];
}

/// One member: its entry's instructions, then the bf16 rounding eager applies to a bf16 result.
RowValue emitMember(RowProgram& p, const OpSpec& s, const std::vector<RowValue>& in, Bug bug) {
  RowValue v = emit(p, s, in, bug);
  return s.bf16Result && bug != Bug::Bf16RoundingDropped ? p.castBf16(v) : v;
}

}  // namespace row_fusion

namespace {

using namespace row_fusion;
using ir::hasAtLeastOperands;
using ir::hasOperands;
using ir::namedOperand;
using ir::operand;
using ir::selfOperand;

// ---- matching: one op --------------------------------------------------------------------------

const std::vector<int64_t>* shapeOf(const Graph& g, const Arg& a) {
  if (a.isConstant()) return &g.constants()[static_cast<size_t>(a.i)].sizes;
  return u::staticShape(g, u::valueOf(a));
}

bool isTensor(const Arg& a) { return a.isValue() || a.isConstant(); }

/// The dim \p d of a rank-\p rank tensor is its last one.
bool isLastDim(int64_t d, size_t rank) { return d == -1 || (rank > 0 && d == static_cast<int64_t>(rank) - 1); }

/// A slice of x over its last dim from \p start to \p end (end clipped to C); x's value.
std::optional<ValueId> lastDimSlice(const Graph& g, const Arg& a, int64_t start, int64_t end, std::vector<NodeId>* nodes) {
  using S = ir::Slice;
  const Node* s = u::producerOf(g, a);
  // The step may be left out (then it is 1): self, dim, start and end are required.
  if (!s || s->op != "aten::slice" || !namedOperand(*s, "end") || !operand(*s, S::self).isValue()) return std::nullopt;
  const auto* xs = u::staticShape(g, u::valueOf(operand(*s, S::self)));
  const Arg& dim = operand(*s, S::dim);
  if (!xs || xs->empty() || dim.kind != Arg::Kind::Int || !isLastDim(dim.i, xs->size())) return std::nullopt;
  const int64_t c = xs->back();
  const Arg& endArg = operand(*s, S::end);
  auto st = u::numberArg(operand(*s, S::start));
  auto en = endArg.kind == Arg::Kind::None ? std::optional<double>(static_cast<double>(c)) : u::numberArg(endArg);
  const Arg* step = namedOperand(*s, "step");
  if (step && !(u::numberArg(*step) && *u::numberArg(*step) == 1.0)) return std::nullopt;
  // The end may be INT64_MAX ("to the end"): clipped as a double, a cast would overflow.
  if (!st || !en || *st != static_cast<double>(start) || std::min(*en, static_cast<double>(c)) != static_cast<double>(end)) {
    return std::nullopt;
  }
  nodes->push_back(s->id);
  return u::valueOf(operand(*s, S::self));
}

/// cat([neg(x[..., C/2:]), x[..., :C/2]], -1) -> x (rotate_half). With \p swapped (the mutant's
/// guard) the halves are taken the other way round.
std::optional<ValueId> rotateHalfInput(const Graph& g, const Node& cat, std::vector<NodeId>* nodes, bool swapped = false) {
  if (cat.op != "aten::cat" || !hasOperands<ir::Cat>(cat)) return std::nullopt;
  const Arg& tensors = operand(cat, ir::Cat::tensors);
  const Arg& dim = operand(cat, ir::Cat::dim);
  if (tensors.kind != Arg::Kind::List || tensors.list.size() != 2 || dim.kind != Arg::Kind::Int) return std::nullopt;
  const auto* out = u::staticShape(g, cat.outputs[0]);
  if (!out || out->empty() || !isLastDim(dim.i, out->size()) || out->back() % 2 != 0) return std::nullopt;
  const int64_t c = out->back(), h = c / 2;
  const Arg& negatedHalf = tensors.list.front();
  const Arg& keptHalf = tensors.list.back();
  const Node* neg = u::producerOf(g, negatedHalf);
  if (!neg || neg->op != "aten::neg" || !hasOperands<ir::Unary>(*neg)) return std::nullopt;
  std::vector<NodeId> found = {neg->id};
  auto hi = lastDimSlice(g, selfOperand(*neg), swapped ? 0 : h, swapped ? h : c, &found);
  auto lo = lastDimSlice(g, keptHalf, swapped ? h : 0, swapped ? c : h, &found);
  if (!hi || !lo || *hi != *lo) return std::nullopt;
  const auto* xs = u::staticShape(g, *hi);
  if (!xs || *xs != *out) return std::nullopt;
  nodes->insert(nodes->end(), found.begin(), found.end());
  return *hi;
}

/// The table entry of node \p n, or nullopt; a guard that fails on an op of the table writes why.
std::optional<OpSpec> specOf(const Graph& g, const Node& n, std::string* why) {
  OpSpec s;
  const std::string& op = n.op;
  auto fail = [&](const std::string& reason) -> std::optional<OpSpec> {
    if (why) *why = reason;
    return std::nullopt;
  };
  auto binary = [&](Kind k) -> std::optional<OpSpec> {
    if (n.overload != "Tensor" && n.overload != "Scalar") return std::nullopt;
    if (!hasAtLeastOperands<ir::Binary>(n)) return std::nullopt;
    s.kind = k;
    s.operands = {operand(n, ir::Binary::self), operand(n, ir::Binary::other)};
    if (hasAtLeastOperands<ir::BinaryWithAlpha>(n) && (k == Kind::Add || k == Kind::Sub || k == Kind::Rsub)) {
      auto alpha = u::numberArg(operand(n, ir::BinaryWithAlpha::alpha));
      if (!alpha) return fail(op + " with a non-numeric alpha");
      s.alpha = *alpha;
    }
    return s;
  };
  static const std::map<std::string, Kind> unary = {
      {"aten::neg", Kind::Neg},         {"aten::exp", Kind::Exp},         {"aten::log", Kind::Log},
      {"aten::sqrt", Kind::Sqrt},       {"aten::rsqrt", Kind::Rsqrt},     {"aten::reciprocal", Kind::Reciprocal},
      {"aten::relu", Kind::Relu},       {"aten::silu", Kind::Silu},       {"aten::sigmoid", Kind::Sigmoid},
      {"aten::tanh", Kind::Tanh},       {"aten::erf", Kind::Erf}};
  if (op == "aten::add") return binary(Kind::Add);
  if (op == "aten::sub") return binary(Kind::Sub);
  if (op == "aten::rsub") return binary(Kind::Rsub);
  if (op == "aten::mul") return binary(Kind::Mul);
  if (op == "aten::div") {
    if (n.overload == "Tensor_mode" || n.overload == "Scalar_mode") return fail("div with a rounding mode");
    return binary(Kind::Div);
  }
  if (auto it = unary.find(op); it != unary.end()) {
    if (!n.overload.empty() || !hasOperands<ir::Unary>(n)) return std::nullopt;
    s.kind = it->second;
    s.operands = {selfOperand(n)};
    return s;
  }
  if (op == "aten::gelu") {
    if (!hasAtLeastOperands<ir::Unary>(n)) return std::nullopt;
    const Arg* approximate = namedOperand(n, "approximate");
    const std::string approx = approximate && approximate->kind == Arg::Kind::String ? approximate->s : "none";
    if (approx != "none" && approx != "tanh") return fail("gelu with approximate='" + approx + "'");
    s.kind = approx == "none" ? Kind::GeluErf : Kind::GeluTanh;
    s.operands = {operand(n, ir::Gelu::self)};
    return s;
  }
  if (op == "aten::pow") {
    if (n.overload != "Tensor_Scalar" || !hasOperands<ir::Pow>(n)) return std::nullopt;
    auto e = u::numberArg(operand(n, ir::Pow::exponent));
    if (!e) return fail("pow with a non-numeric exponent");
    s.kind = Kind::Pow;
    s.exponent = *e;
    s.operands = {operand(n, ir::Pow::self)};
    return s;
  }
  if (op == "aten::clamp" || op == "aten::clamp_min" || op == "aten::clamp_max") {
    // clamp(self, min, max), clamp_min(self, min), clamp_max(self, max): self and a bound at least.
    if (!n.overload.empty() || !hasAtLeastOperands<ir::Binary>(n)) return std::nullopt;
    s.kind = Kind::Clamp;
    s.operands = {selfOperand(n)};
    // A bound the op does not take (or leaves out, or passes as None) stays unbounded.
    auto bound = [&](const Arg* b, double* out) {
      if (!b || b->kind == Arg::Kind::None) return true;
      auto v = u::numberArg(*b);
      if (!v) return false;
      *out = *v;
      return true;
    };
    const bool ok = bound(namedOperand(n, "min"), &s.lo) && bound(namedOperand(n, "max"), &s.hi);
    if (!ok) return fail(op + " with tensor bounds");
    if (!(s.lo <= s.hi)) return fail("clamp with min > max");
    return s;
  }
  if (op == "aten::where") {
    using W = ir::Where;
    if (n.overload != "self" || !hasOperands<W>(n)) return std::nullopt;
    if (!isTensor(operand(n, W::condition)) || dtypeOf(g, operand(n, W::condition)) != DType::Bool) {
      return fail("where whose mask is not a bool tensor (the engine reads a mask as mask != 0)");
    }
    s.kind = Kind::Where;
    s.operands = {operand(n, W::condition), operand(n, W::self), operand(n, W::other)};
    return s;
  }
  if (op == "aten::_to_copy") {
    if (!hasAtLeastOperands<ir::Unary>(n) || !operand(n, ir::ToCopy::self).isValue()) return std::nullopt;
    const DType from = dtypeOf(g, operand(n, ir::ToCopy::self));
    if (from != DType::Float32 && from != DType::BFloat16) return fail("_to_copy of a value that is not float32 or bfloat16");
    // To bf16: the member's bf16 result adds the rounding; to float32: widening, exact.
    s.kind = Kind::Identity;
    s.operands = {operand(n, ir::ToCopy::self)};
    return s;
  }
  const bool mean = op == "aten::mean" && n.overload == "dim";
  const bool sum = op == "aten::sum" && n.overload == "dim_IntList";
  const bool amax = op == "aten::amax" && n.overload.empty();
  if (mean || sum || amax) {
    // mean.dim and sum.dim_IntList (self, dim, keepdim, dtype), amax (self, dim, keepdim).
    const Arg* keepdim = namedOperand(n, "keepdim");
    if (!keepdim || !selfOperand(n).isValue()) return std::nullopt;
    const auto* xs = u::staticShape(g, u::valueOf(selfOperand(n)));
    if (!xs) return fail(op + " of a value without a static shape (dynamic shapes)");
    auto dims = namedOperand(n, "dim")->asIntList();
    const std::string what = op.substr(6);
    if (!dims.isOk() || dims->size() != 1) return fail(what + " over several dims (or all): the row engine reduces the last dim only");
    if (!isLastDim((*dims)[0], xs->size())) {
      return fail(what + " over dim " + std::to_string((*dims)[0]) + ", not the last dim: the row engine reduces along rows only");
    }
    if (keepdim->kind != Arg::Kind::Bool || keepdim->i == 0) {
      return fail(what + " without keepdim=True: its result would broadcast along another axis");
    }
    const Arg* dtype = namedOperand(n, "dtype");  // amax has none
    if (dtype && dtype->kind != Arg::Kind::None) return fail(what + " with a dtype argument");
    s.kind = mean ? Kind::Mean : sum ? Kind::Sum : Kind::Amax;
    s.operands = {selfOperand(n)};
    return s;
  }
  if (op == "aten::native_layer_norm") {
    using L = ir::NativeLayerNorm;
    if (!hasOperands<L>(n) || !operand(n, L::input).isValue()) return std::nullopt;
    const auto* xs = u::staticShape(g, u::valueOf(operand(n, L::input)));
    if (!xs || xs->empty()) return fail("layer norm of a value without a static shape (dynamic shapes)");
    auto norm = operand(n, L::normalized_shape).asIntList();
    if (!norm.isOk() || norm->size() != 1 || (*norm)[0] != xs->back()) {
      return fail("layer norm over more than the last dim (normalized_shape is not [C])");
    }
    auto eps = u::numberArg(operand(n, L::eps));
    if (!eps) return fail("layer norm with a non-numeric eps");
    for (size_t k = 1; k < n.outputs.size(); ++k) {
      if (!g.users(n.outputs[k]).empty() || g.isGraphOutput(n.outputs[k])) {
        return fail("layer norm whose mean or rstd output is read");
      }
    }
    s.kind = Kind::LayerNorm;
    s.eps = *eps;
    s.operands = {operand(n, L::input)};
    for (L::Operand slot : {L::weight, L::bias}) {
      const Arg& affine = operand(n, slot);
      if (affine.kind == Arg::Kind::None) continue;
      const auto* ws = shapeOf(g, affine);
      if (!isTensor(affine) || !ws || *ws != std::vector<int64_t>{xs->back()}) {
        return fail("layer norm weight/bias that is not a [C] tensor");
      }
      (slot == L::weight ? s.weight : s.bias) = true;
      s.operands.push_back(affine);
    }
    return s;
  }
  if (op == "aten::_safe_softmax") {
    return fail("_safe_softmax: its fully masked rows are 0, the row engine's softmax gives NaN there");
  }
  if (op == "aten::_softmax") {
    using Sm = ir::Softmax;
    if (!hasOperands<Sm>(n) || !operand(n, Sm::self).isValue()) return std::nullopt;
    const auto* xs = u::staticShape(g, u::valueOf(operand(n, Sm::self)));
    if (!xs || xs->empty()) return fail("softmax of a value without a static shape (dynamic shapes)");
    const Arg& dim = operand(n, Sm::dim);
    if (dim.kind != Arg::Kind::Int || !isLastDim(dim.i, xs->size())) {
      return fail("softmax over dim " + std::to_string(dim.i) + ", not the last dim");
    }
    const Arg& halfToFloat = operand(n, Sm::half_to_float);
    if (halfToFloat.kind != Arg::Kind::Bool || halfToFloat.i != 0) return fail("softmax with half_to_float");
    s.kind = Kind::Softmax;
    s.operands = {operand(n, Sm::self)};
    return s;
  }
  if (op == "aten::cat") {
    std::vector<NodeId> internal;
    auto x = rotateHalfInput(g, n, &internal);
    if (!x) return std::nullopt;  // another concatenation
    s.kind = Kind::RotateHalf;
    s.operands = {Arg::value(*x)};
    s.internal = std::move(internal);
    return s;
  }
  return std::nullopt;
}

// ---- matching: the chain ------------------------------------------------------------------------

/// \p a broadcasts to \p s (numpy rules).
bool broadcastsTo(const std::vector<int64_t>& a, const std::vector<int64_t>& s) {
  if (a.size() > s.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    const int64_t d = a[a.size() - 1 - k], t = s[s.size() - 1 - k];
    if (d != 1 && d != t) return false;
  }
  return true;
}

/// Node \p n as a member of a chain whose row shape is \p s: its spec, or nullopt with a reason.
std::optional<OpSpec> memberSpec(const Graph& g, const Node& n, const std::vector<int64_t>& s, std::string* why) {
  auto spec = specOf(g, n, why);
  if (!spec) return std::nullopt;
  auto fail = [&](const std::string& reason) -> std::optional<OpSpec> {
    if (why) *why = reason;
    return std::nullopt;
  };
  const ir::Value& out = g.value(n.outputs[0]);
  if (out.dtype != DType::Float32 && out.dtype != DType::BFloat16) {
    return fail(n.qualifiedName() + (out.dtype == DType::Undefined ? " whose dtype is unknown" : " whose result is not float32 or bfloat16") +
                " (the row engine computes float32, rounding bf16 results as eager does)");
  }
  spec->bf16Result = out.dtype == DType::BFloat16;
  if (!out.hasStaticShape()) return fail(n.qualifiedName() + " without a static output shape (dynamic shapes)");
  if (!broadcastsTo(out.shape, s)) return fail("its result does not broadcast to the chain's shape");
  for (size_t k = 0; k < spec->operands.size(); ++k) {
    const Arg& a = spec->operands[k];
    if (u::numberArg(a)) continue;
    if (!isTensor(a)) return fail(n.qualifiedName() + " with an operand that is neither a tensor nor a number");
    const bool mask = spec->kind == Kind::Where && k == 0;
    const DType have = dtypeOf(g, a);
    // bf16 operands are loaded widened (exact): what eager's bf16 kernels compute from too.
    const bool ok = mask ? have == DType::Bool : have == DType::Float32 || have == DType::BFloat16;
    if (!ok) return fail(n.qualifiedName() + " with an operand that is not " + (mask ? "bool" : "float32 or bfloat16"));
    const auto* as = shapeOf(g, a);
    if (!as) return fail(n.qualifiedName() + " with an operand without a static shape (dynamic shapes)");
    if (!broadcastsTo(*as, s)) return fail(n.qualifiedName() + " with an operand that does not broadcast to the chain's shape");
  }
  if (readsRow(spec->kind)) {
    const auto* xs = shapeOf(g, spec->operands[0]);
    if (xs->empty() || s.empty() || xs->back() != s.back()) {
      return fail(n.qualifiedName() + " reads a row of length " + (xs->empty() ? std::string("1") : std::to_string(xs->back())) +
                  " in a chain of rows of " + std::to_string(s.empty() ? 1 : s.back()) +
                  ": the engine cannot broadcast a row it reduces");
    }
  }
  return spec;
}

struct Chain {
  std::vector<int64_t> shape;                 ///< S, the sink's
  std::vector<NodeId> members;                ///< graph order; the sink last
  std::map<NodeId, OpSpec> specs;
  std::vector<NodeId> stored;                 ///< members other than the sink kept as outputs, graph order
  std::vector<Arg> inputs;                    ///< leaves, first-use order
  RowProgram program;
};

/// The readers of \p v (node ids).
bool readOutside(const Graph& g, ValueId v, const std::set<NodeId>& inside, NodeId sink, bool* before, bool* any) {
  for (NodeId r : g.users(v)) {
    if (inside.count(r)) continue;
    *any = true;
    if (r < sink) *before = true;
  }
  if (g.isGraphOutput(v)) *any = true;
  return *any;
}

/// Gathers the chain ending at \p sink (already known to be a member with shape S).
std::optional<Chain> gatherChain(const Graph& g, NodeId sink, const OpSpec& sinkSpec, Bug bug) {
  Chain c;
  c.shape = g.value(g.node(sink).outputs[0]).shape;
  std::map<NodeId, OpSpec> cand = {{sink, sinkSpec}};
  std::set<NodeId> excluded;
  // Candidates: producers of operands, transitively, that are members for S.
  std::vector<NodeId> work = {sink};
  while (!work.empty()) {
    const NodeId id = work.back();
    work.pop_back();
    for (const Arg& a : cand.at(id).operands) {
      const Node* p = u::producerOf(g, a);
      if (!p || cand.count(p->id) || excluded.count(p->id)) continue;
      auto spec = memberSpec(g, *p, c.shape, nullptr);
      if (!spec) {
        excluded.insert(p->id);
        continue;
      }
      cand.emplace(p->id, *spec);
      work.push_back(p->id);
    }
  }
  // Fixpoint: drop members read outside the chain before the sink, or read outside with another
  // shape than S (they could not be stored); the rest of what they read stays only if still reached.
  std::set<NodeId> reach;
  while (true) {
    reach.clear();
    std::vector<NodeId> stack = {sink};
    while (!stack.empty()) {
      const NodeId id = stack.back();
      stack.pop_back();
      if (!reach.insert(id).second) continue;
      for (const Arg& a : cand.at(id).operands) {
        const Node* p = u::producerOf(g, a);
        if (p && cand.count(p->id)) stack.push_back(p->id);
      }
    }
    std::set<NodeId> inside = reach;
    for (NodeId id : reach) inside.insert(cand.at(id).internal.begin(), cand.at(id).internal.end());
    std::vector<NodeId> drop;
    c.stored.clear();
    for (NodeId id : reach) {
      if (id == sink) continue;
      bool before = false, any = false;
      const ValueId v = g.node(id).outputs[0];
      readOutside(g, v, inside, sink, &before, &any);
      if (!any) continue;
      if (before || g.value(v).shape != c.shape) drop.push_back(id);
      else c.stored.push_back(id);
    }
    if (drop.empty()) break;
    for (NodeId id : drop) cand.erase(id);
  }
  c.members.assign(reach.begin(), reach.end());  // std::set: ascending ids = graph order
  std::sort(c.stored.begin(), c.stored.end());
  for (NodeId id : c.members) c.specs.emplace(id, cand.at(id));
  // Worth a node: two ops, or one that is itself a row computation.
  const bool composite = std::any_of(c.members.begin(), c.members.end(), [&](NodeId id) { return isComposite(c.specs.at(id).kind); });
  if (c.members.size() < 2 && !composite) return std::nullopt;
  // The program, op by op in graph order.
  std::map<ValueId, RowValue> memberValue;
  std::map<std::pair<int, int64_t>, RowValue> loaded;  // (kind, id) of a leaf -> its load
  for (NodeId id : c.members) {
    const OpSpec& spec = c.specs.at(id);
    std::vector<RowValue> in;
    for (const Arg& a : spec.operands) {
      if (auto num = u::numberArg(a)) {
        in.push_back(c.program.constant(static_cast<float>(*num)));
        continue;
      }
      if (a.isValue() && memberValue.count(u::valueOf(a))) {
        in.push_back(memberValue.at(u::valueOf(a)));
        continue;
      }
      const auto key = std::make_pair(a.isConstant() ? 1 : 0, a.i);
      auto it = loaded.find(key);
      if (it == loaded.end()) {
        it = loaded.emplace(key, c.program.load(static_cast<int>(c.inputs.size()))).first;
        c.inputs.push_back(a);
      }
      in.push_back(it->second);
    }
    memberValue[g.node(id).outputs[0]] = emitMember(c.program, spec, in, bug);
  }
  c.program.store(0, memberValue.at(g.node(sink).outputs[0]));
  for (size_t k = 0; k < c.stored.size(); ++k) {
    c.program.store(static_cast<int>(k + 1), memberValue.at(g.node(c.stored[k]).outputs[0]));
  }
  if (!c.program.validate().isOk()) return std::nullopt;
  return c;
}

/// Whether a chain of rows of shape \p s continues from node \p n's result to a member of shape
/// \p s (which could then be the sink that gathers \p n): through members for \p s, a few steps.
bool reachesRowsOf(const Graph& g, const Node& n, const std::vector<int64_t>& s, int depth = 6) {
  if (depth == 0 || n.outputs.empty()) return false;
  for (NodeId r : g.users(n.outputs[0])) {
    const Node& reader = g.node(r);
    if (reader.outputs.empty() || !memberSpec(g, reader, s, nullptr)) continue;
    if (g.value(reader.outputs[0]).shape == s || reachesRowsOf(g, reader, s, depth - 1)) return true;
  }
  return false;
}

/// Whether reader \p r would take \p v (a member for its own shape) into its chain: then \p v is
/// not a sink, the reader's chain gathers it. The reader's chain has the reader's shape, or, for a
/// row reduction whose per-row result flows on into rows of \p v's shape, that shape: a bf16
/// RMSNorm's mean(x.float() ** 2) sits inside the chain of x's rows, so x.float() ** 2 must not
/// become a chain (and two row passes, with two float32 rows stored between them) of its own.
bool readerTakes(const Graph& g, const Node& r, ValueId v) {
  if (r.outputs.empty()) return false;
  const ir::Value& out = g.value(r.outputs[0]);
  if (!out.hasStaticShape()) return false;
  const Node& producer = g.node(g.value(v).producer);
  std::vector<std::vector<int64_t>> shapes = {out.shape};
  auto own = specOf(g, r, nullptr);
  const ir::Value& in = g.value(v);
  if (own && readsRow(own->kind) && !isComposite(own->kind) && in.hasStaticShape() && in.shape != out.shape &&
      reachesRowsOf(g, r, in.shape)) {
    shapes.push_back(in.shape);
  }
  for (const auto& s : shapes) {
    auto spec = memberSpec(g, r, s, nullptr);
    if (!spec || !memberSpec(g, producer, s, nullptr)) continue;
    for (const Arg& a : spec->operands) {
      if (a.isValue() && u::valueOf(a) == v) return true;
    }
  }
  return false;
}

std::optional<Chain> matchChain(const Graph& g, NodeId id, std::string* whyNot, Bug bug) {
  const Node& n = g.node(id);
  if (n.outputs.empty()) return std::nullopt;
  std::string why;
  auto spec = specOf(g, n, &why);
  const bool rowOp = n.op == "aten::mean" || n.op == "aten::sum" || n.op == "aten::amax" ||
                     n.op == "aten::native_layer_norm" || n.op == "aten::_softmax" || n.op == "aten::_safe_softmax" ||
                     n.op == "aten::where";
  // A failed guard is a near miss for the row ops and for float32 elementwise ops; an int or
  // unknown-dtype elementwise op (index arithmetic) is simply not this rule's pattern.
  const bool reportable = rowOp || g.value(n.outputs[0]).dtype == DType::Float32 ||
                          g.value(n.outputs[0]).dtype == DType::BFloat16;
  if (!spec) {
    if (reportable && !why.empty()) u::why(whyNot, why);
    return std::nullopt;
  }
  const ir::Value& out = g.value(n.outputs[0]);
  if (!out.hasStaticShape() || out.shape.empty()) {
    if (reportable) u::why(whyNot, n.qualifiedName() + " without a static shape of rank >= 1 (dynamic shapes)");
    return std::nullopt;
  }
  why.clear();
  auto member = memberSpec(g, n, out.shape, &why);
  if (!member) {
    if (reportable) u::why(whyNot, why);
    return std::nullopt;
  }
  // Not a sink when a reader will take it into its own chain.
  for (NodeId r : g.users(n.outputs[0])) {
    if (readerTakes(g, g.node(r), n.outputs[0])) return std::nullopt;
  }
  return gatherChain(g, id, *member, bug);
}

std::optional<Match> matchRowFusion(const Graph& g, NodeId id, std::string* whyNot) {
  if (!matchChain(g, id, whyNot, Bug::None)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteRowFusion(Graph& g, const Match& m, FusionRecord& record) {
  auto c = matchChain(g, m.anchor, nullptr, Bug::None);
  if (!c) return internalError("row chain no longer matches");
  for (NodeId id : c->members) {
    if (id != m.anchor) record.nodes.push_back(g.node(id).qualifiedName());
  }
  // Stored members: their readers (all after the sink) read the rowwise node's extra outputs.
  std::vector<std::pair<ValueId, ValueId>> moved;
  for (NodeId id : c->stored) {
    const ValueId nv = ir::addNodeOutput(g, m.anchor, ir::ValueType::Tensor);
    g.mutableValue(nv).setShape(c->shape);
    g.mutableValue(nv).dtype = g.value(g.node(id).outputs[0]).dtype;  // float32 or bf16, as the member's
    moved.emplace_back(g.node(id).outputs[0], nv);
  }
  Node& n = g.mutableNode(m.anchor);
  std::vector<ValueId> outs = {n.outputs[0]};
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    // A layer norm sink's unread mean/rstd outputs are dropped; the extra outputs just added stay.
    if (g.value(n.outputs[k]).type == ir::ValueType::Tensor && g.value(n.outputs[k]).shape == c->shape &&
        std::any_of(moved.begin(), moved.end(), [&](const auto& p) { return p.second == n.outputs[k]; })) {
      outs.push_back(n.outputs[k]);
    }
  }
  n.outputs = outs;
  for (size_t k = 0; k < n.outputs.size(); ++k) g.mutableValue(n.outputs[k]).outputIndex = static_cast<int32_t>(k);
  n.op = kRowwise;
  n.overload = "";
  n.args = c->inputs;
  n.args.push_back(Arg::string(c->program.toString()));  // the sink's output keeps its dtype
  for (const auto& [from, to] : moved) g.replaceAllUses(from, to);
  // The other members are read only inside the chain now (or by the node itself, never).
  for (NodeId id : c->members) {
    if (id != m.anchor) g.eraseNode(id);
  }
  return Status::ok();
}

}  // namespace

using row_fusion::Bug;
using row_fusion::Piece;
using row_fusion::rowFusionObligation;

std::vector<RuleDeclaration> rowFusion() {
  auto mutant = [](Bug b, Piece p) { return u::bindNoModel(rowFusionObligation, b, p); };
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "row-fusion",
      .summary = "a chain of float32 elementwise ops and last-dim row reductions -> one verifuse::rowwise node",
      .math = "each table entry ATen op = its row instructions, on [2,3] rows with [2,3]/[2,1]/[1,3] operands "
              "(add/sub/rsub with alpha, mul, div, a number operand, unary ops, pow 2/3/1/0.5/-0.5/-1/1.5, clamp, "
              "where(bool mask), sum, amax, mean over the last dim); composed: RMSNorm w*(x*rsqrt(mean(x^2)+eps)), "
              "layer norm (x-mean)*rsqrt(var+eps)*w+b, softmax(x*c+mask) with the max shift (exp(a-m)exp(m)=exp(a)), "
              "rotary q*cos + cat(-q[C/2:], q[:C/2])*sin; exp, erf, tanh, sigmoid, gelu, log, sqrt, rsqrt, pow "
              "uninterpreted; a chain is the composition of its entries in graph order; a bf16 result is its "
              "float32 entry followed by one bf16 rounding (uninterpreted round_bf16), as eager computes bf16 ops",
      .phase = Phase::kRowFusion,
      .anchors = {"aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::div", "aten::neg", "aten::exp",
                  "aten::log", "aten::sqrt", "aten::rsqrt", "aten::reciprocal", "aten::pow", "aten::relu",
                  "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh", "aten::erf", "aten::clamp",
                  "aten::clamp_min", "aten::clamp_max", "aten::where", "aten::_to_copy", "aten::mean", "aten::sum",
                  "aten::amax", "aten::native_layer_norm", "aten::_softmax", "aten::_safe_softmax", "aten::cat"},
      // Rooted at the chain's sink; the chain, guards and stores are in the file comment.
      .match = matchRowFusion,
      .rewrite = rewriteRowFusion,
      .obligation = mutant(Bug::None, Piece::All),
      .mutants = {{"rms-eps-dropped", "add(v, eps) translated as v: RMSNorm without eps", mutant(Bug::AddNumberDropped, Piece::RmsNorm)},
                  {"rms-eps-outside-rsqrt", "RMSNorm composed as rsqrt(mean(x^2)) + eps",
                   mutant(Bug::EpsOutsideRsqrt, Piece::RmsNorm)},
                  {"reduction-wrong-axis", "a mean over dim 0 accepted as the row mean", mutant(Bug::ReductionWrongAxis, Piece::Reduction)},
                  {"rotary-sign-flipped", "rotate_half translated as [h2, -h1]", mutant(Bug::RotarySignFlipped, Piece::Rotary)},
                  {"rotary-halves-swapped", "cat(-x[..., :C/2], x[..., C/2:]) accepted as rotate_half",
                   mutant(Bug::RotaryHalvesSwapped, Piece::Rotary)},
                  {"softmax-wrong-axis", "a softmax over dim 0 accepted as the row softmax", mutant(Bug::SoftmaxWrongAxis, Piece::Softmax)},
                  {"mask-after-softmax", "softmax(x*c + mask) composed as softmax(x*c) + mask",
                   mutant(Bug::MaskAfterSoftmax, Piece::Softmax)},
                  {"gelu-erf-tanh-swapped", "gelu(approximate='none') translated to the tanh GELU", mutant(Bug::GeluSwapped, Piece::Gelu)},
                  {"layer-norm-without-mean", "layer norm translated without the mean subtraction",
                   mutant(Bug::LayerNormNoMean, Piece::LayerNorm)},
                  {"bf16-rounding-dropped", "a bf16 op's result kept in float32 (eager rounds it to bf16)",
                   mutant(Bug::Bf16RoundingDropped, Piece::Bf16)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
