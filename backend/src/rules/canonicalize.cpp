// Canonicalization: ATen's convolution and matrix products become verifuse's fused ops (which the
// other rules extend with folds and post-ops), and an N-d linear's flatten/unflatten views go.
//
//   canonicalize-convolution   aten::convolution(x, W, b, s, p, d, false, op, g) = verifuse::conv(x, W, b, s, p, d, g)
//   canonicalize-addmm         aten::addmm(b, x, W^T, 1, 1) = verifuse::linear(x, W, b)
//   canonicalize-addmm-kn      aten::addmm(b, x, V, 1, 1) = verifuse::linear(x, V^T, b), V a [K, N] constant
//                              (GPT-2's Conv1D) and V^T a transposed view of V's buffer (no copy)
//   canonicalize-mm            aten::mm(x, W^T) = verifuse::linear(x, W)
//   canonicalize-linear        aten::linear(x, W, b) = verifuse::linear(x, W, b)
//   collapse-linear-view-pair  view(linear(view(x, [M, K]), W, b), x.shape[:-1] + [N]) = linear(x, W, b)
//
// The obligations are index-level (verify/tensor_semantics.h), on small concrete shapes: what
// these rewrites claim is about which argument means what (a transposed weight, the groups, the
// argument positions) and about row-major index arithmetic, which explicit elements state exactly.
#include <algorithm>
#include <array>
#include <optional>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::FusedConv;
using ir::FusedLinear;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::ValueId;
using Conv = ir::Convolution;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::sem::ElementTensor;
namespace sem = verify::sem;
namespace u = util;

bool isIntList(const Arg& a, std::initializer_list<int64_t> expected) {
  auto v = a.asIntList();
  return v.isOk() && *v == std::vector<int64_t>(expected);
}

/// W[N, K] for a transposed constant weight: permute(W, [1, 0]) or t(W).
const ir::ConstantTensor* transposedWeight(const Graph& g, const Arg& a, Arg* weight) {
  const Node* p = u::producerOf(g, a);
  if (!p) return nullptr;
  const bool permute = p->op == ir::Permute::kOp && ir::hasOperands<ir::Permute>(*p) &&
                       isIntList(operand(*p, ir::Permute::dims), {1, 0});
  const bool t = (p->op == "aten::t" || p->op == "aten::numpy_T") && ir::hasOperands<ir::Unary>(*p);
  if (!permute && !t) return nullptr;
  const ir::ConstantTensor* w = u::floatConstant(g, ir::selfOperand(*p));
  if (!w || w->sizes.size() != 2) return nullptr;
  *weight = ir::selfOperand(*p);
  return w;
}

/// No bias, or a constant [n] of the weight's dtype \p dtype.
bool validBias(const Graph& g, const Arg& b, int64_t n, ir::DType dtype) {
  if (b.kind == Arg::Kind::None) return true;
  const ir::ConstantTensor* c = u::floatConstant(g, b);
  return c && c->dtype == dtype && c->sizes.size() == 1 && c->sizes[0] == n;
}

/// view / reshape / _unsafe_view of a graph value to a size list (each has two operands: self and
/// the size list).
bool isView(const Node* n) {
  if (!n) return false;
  const bool view = (n->op == ir::View::kOp && ir::hasOperands<ir::View>(*n)) ||
                    (n->op == ir::Reshape::kOp && ir::hasOperands<ir::Reshape>(*n)) ||
                    (n->op == ir::UnsafeView::kOp && ir::hasOperands<ir::UnsafeView>(*n));
  return view && ir::selfOperand(*n).isValue();
}

/// The size list of a view / reshape / _unsafe_view (isView).
const Arg& viewSize(const Node& n) {
  if (n.op == ir::Reshape::kOp) return operand(n, ir::Reshape::shape);
  if (n.op == ir::UnsafeView::kOp) return operand(n, ir::UnsafeView::size);
  return operand(n, ir::View::size);
}

void toLinear(Node& n, Arg x, Arg w, Arg b) {
  n.op = kLinearOp;
  n.overload = "";
  n.args = ir::OperandsOf<FusedLinear>()
               .set(FusedLinear::x, std::move(x))
               .set(FusedLinear::weight, std::move(w))
               .set(FusedLinear::bias, std::move(b))
               .set(FusedLinear::post_ops, Arg::string(""))
               .take();
}

const char* const kNotTransposedWeight =
    "the weight operand is not permute(W, [1, 0]) / t(W) of a 2-D float32 or bfloat16 constant";
const char* const kBadBias = "the bias is not a constant of N (C_out) elements in the weight's dtype";

// ---- canonicalize-convolution ---------------------------------------------------------------------

// verifuse::conv(x, W, b, stride, padding, dilation, groups, post_ops) takes every operand but
// post_ops from aten::convolution(input, weight, bias, stride, padding, dilation, transposed,
// output_padding, groups) as this table says (transposed and output_padding are dropped: the guard
// admits forward convolutions only). The rewrite and the obligation both read it.
struct ConvOperandFrom {
  FusedConv::Operand to;
  Conv::Operand from;
};
constexpr std::array<ConvOperandFrom, 7> kConvFromAten = {{
    {FusedConv::x, Conv::input},
    {FusedConv::weight, Conv::weight},
    {FusedConv::bias, Conv::bias},
    {FusedConv::stride, Conv::stride},
    {FusedConv::padding, Conv::padding},
    {FusedConv::dilation, Conv::dilation},
    {FusedConv::groups, Conv::groups},
}};

std::optional<Match> matchConvolution(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!ir::hasOperands<Conv>(n) || !operand(n, Conv::input).isValue()) return std::nullopt;
  const ir::ConstantTensor* w = u::floatConstant(g, operand(n, Conv::weight));
  if (!w) return u::why(whyNot, "the weight is not a frozen float32 or bfloat16 constant"), std::nullopt;
  const Arg& transposed = operand(n, Conv::transposed);
  if (transposed.kind != Arg::Kind::Bool || transposed.i != 0) {
    return u::why(whyNot, "transposed convolution (verifuse::conv is a forward convolution)"), std::nullopt;
  }
  if (w->sizes.size() < 3 || w->sizes.size() > 5) {
    return u::why(whyNot, "weight rank is not 3..5 (1 to 3 spatial dims)"), std::nullopt;
  }
  if (!operand(n, Conv::stride).asIntList().isOk() || !operand(n, Conv::padding).asIntList().isOk() ||
      !operand(n, Conv::dilation).asIntList().isOk()) {
    return u::why(whyNot, "stride, padding or dilation is not an int list"), std::nullopt;
  }
  if (operand(n, Conv::groups).kind != Arg::Kind::Int) return u::why(whyNot, "groups is not an int"), std::nullopt;
  if (!validBias(g, operand(n, Conv::bias), w->sizes[0], w->dtype)) return u::why(whyNot, kBadBias), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteConvolution(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  ir::OperandsOf<FusedConv> fused;
  for (const ConvOperandFrom& slot : kConvFromAten) fused.set(slot.to, operand(n, slot.from));
  fused.set(FusedConv::post_ops, Arg::string(""));
  n.op = kConvOp;
  n.overload = "";
  n.args = fused.take();
  return Status::ok();
}

/// One aten::convolution call on small 1-D shapes: its integer operands, indexed by Conv::Operand
/// (input, weight and bias are the case's tensors; their entries are unused).
struct ConvCase {
  int64_t batch, inChannels, length;
  sem::Sizes weight;
  bool bias;
  std::array<int64_t, Conv::kArity> ints;
};

std::vector<ConvCase> convCases(bool includeTransposed) {
  std::vector<ConvCase> cases = {
      // C_in 2 -> C_out 2, kernel 2, stride 1, padding 1.
      {1, 2, 4, {2, 2, 2}, true, {0, 0, 0, 1, 1, 1, 0, 0, 1}},
      // Two groups of 2 input channels, stride 2, no bias.
      {1, 4, 5, {2, 2, 2}, false, {0, 0, 0, 2, 0, 1, 0, 0, 2}},
      // Depthwise (groups 2 = C_in), padding 1, dilation 2.
      {1, 2, 5, {2, 1, 2}, true, {0, 0, 0, 1, 1, 2, 0, 0, 2}},
  };
  // A transposed convolution (W[C_in, C_out/groups, k]); the guard excludes it.
  if (includeTransposed) cases.push_back({1, 2, 3, {2, 2, 1}, true, {0, 0, 0, 1, 0, 1, 1, 0, 1}});
  return cases;
}

enum class ConvBug { None, TransposedTaken, GroupsDropped, PaddingDilationSwapped };

Obligation convCanonical(ConvBug bug) {
  ObligationBuilder ob("canonicalize-convolution");
  // kConvFromAten, or the mutant's version of it.
  std::vector<ConvOperandFrom> table(kConvFromAten.begin(), kConvFromAten.end());
  auto slotOf = [&table](FusedConv::Operand to) {
    return std::find_if(table.begin(), table.end(), [to](const ConvOperandFrom& s) { return s.to == to; });
  };
  if (bug == ConvBug::GroupsDropped) table.erase(slotOf(FusedConv::groups));  // groups left at its default, 1
  if (bug == ConvBug::PaddingDilationSwapped) {
    std::swap(slotOf(FusedConv::padding)->from, slotOf(FusedConv::dilation)->from);
  }
  int caseNo = 0;
  for (const ConvCase& c : convCases(/*includeTransposed=*/bug == ConvBug::TransposedTaken)) {
    const std::string tag = "case" + std::to_string(caseNo++);
    ElementTensor x = ElementTensor::variables(tag + ".x", {c.batch, c.inChannels, c.length});
    ElementTensor w = ElementTensor::variables(tag + ".conv.weight", c.weight);
    const int64_t cout = c.ints[Conv::transposed] ? c.weight[1] * c.ints[Conv::groups] : c.weight[0];
    ElementTensor b = ElementTensor::variables(tag + ".conv.bias", {cout});
    const ElementTensor* bias = c.bias ? &b : nullptr;
    sem::ConvAttrs aten{.stride = c.ints[Conv::stride], .padding = c.ints[Conv::padding],
                        .dilation = c.ints[Conv::dilation], .groups = c.ints[Conv::groups],
                        .transposed = c.ints[Conv::transposed] != 0, .outputPadding = c.ints[Conv::output_padding]};
    // verifuse::conv's attribute operands as the table passes them (default when not passed on).
    auto passed = [&](FusedConv::Operand to, int64_t dflt) {
      auto slot = slotOf(to);
      return slot == table.end() ? dflt : c.ints[slot->from];
    };
    sem::ConvAttrs fused{.stride = passed(FusedConv::stride, 1), .padding = passed(FusedConv::padding, 0),
                         .dilation = passed(FusedConv::dilation, 1), .groups = passed(FusedConv::groups, 1)};
    sem::proveElementwise(ob, tag + ".out", sem::convolution1d(x, w, bias, aten), sem::convolution1d(x, w, bias, fused));
  }
  return ob.build();
}

// ---- canonicalize-addmm / -mm / -linear ------------------------------------------------------------

/// addmm's beta and alpha are both the number 1 (self + mat1 @ mat2, unscaled).
bool unscaledAddmm(const Node& n) {
  auto beta = u::numberArg(operand(n, ir::Addmm::beta)), alpha = u::numberArg(operand(n, ir::Addmm::alpha));
  return beta && alpha && *beta == 1.0 && *alpha == 1.0;
}

std::optional<Match> matchAddmm(const Graph& g, NodeId id, std::string* whyNot) {
  using A = ir::Addmm;
  const Node& n = g.node(id);
  if (!ir::hasOperands<A>(n) || !operand(n, A::mat1).isValue()) return std::nullopt;
  Arg weight;
  const ir::ConstantTensor* w = transposedWeight(g, operand(n, A::mat2), &weight);
  if (!w) return u::why(whyNot, kNotTransposedWeight), std::nullopt;
  if (!unscaledAddmm(n)) return u::why(whyNot, "beta or alpha is not 1"), std::nullopt;
  const Arg& bias = operand(n, A::self);
  if (bias.kind == Arg::Kind::None || !validBias(g, bias, w->sizes[0], w->dtype)) {
    return u::why(whyNot, kBadBias), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteAddmm(Graph& g, const Match& m, FusionRecord&) {
  using A = ir::Addmm;
  Node& n = g.mutableNode(m.anchor);
  Arg weight;
  if (!transposedWeight(g, operand(n, A::mat2), &weight)) return internalError("addmm no longer matches");
  toLinear(n, operand(n, A::mat1), weight, operand(n, A::self));  // addmm(b, x, W^T) -> linear(x, W, b)
  return Status::ok();
}

// ---- canonicalize-addmm-kn (GPT-2's Conv1D: the weight stored [K, N], read as is) --------------------

/// The [K, N] float32 constant an addmm reads as its matrix operand directly, or nullptr.
const ir::ConstantTensor* knWeight(const Graph& g, const Arg& a) {
  if (!a.isConstant()) return nullptr;
  const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(a.i));
  const bool floatDtype = c.dtype == ir::DType::Float32 || c.dtype == ir::DType::BFloat16;
  return floatDtype && c.sizes.size() == 2 && c.strides.size() == 2 ? &c : nullptr;
}

std::optional<Match> matchAddmmKn(const Graph& g, NodeId id, std::string* whyNot) {
  using A = ir::Addmm;
  const Node& n = g.node(id);
  if (!ir::hasOperands<A>(n) || !operand(n, A::mat1).isValue()) return std::nullopt;
  if (!operand(n, A::mat2).isConstant()) return std::nullopt;  // permute(W) is canonicalize-addmm's pattern
  const ir::ConstantTensor* w = knWeight(g, operand(n, A::mat2));
  if (!w) return u::why(whyNot, "the [K, N] weight is not a 2-D float32 or bfloat16 constant"), std::nullopt;
  if (w->sizes[0] == 0 || w->sizes[1] == 0) return u::why(whyNot, "empty weight"), std::nullopt;
  if (!unscaledAddmm(n)) return u::why(whyNot, "beta or alpha is not 1"), std::nullopt;
  const Arg& bias = operand(n, A::self);
  if (bias.kind == Arg::Kind::None || !validBias(g, bias, w->sizes[1], w->dtype)) {
    return u::why(whyNot, "the bias is not a constant of N (= the weight's dim 1) elements in its dtype"), std::nullopt;
  }
  const auto* x = u::knownShape(g, u::valueOf(operand(n, A::mat1)));
  if (x && (x->size() != 2 || ((*x)[1] >= 0 && (*x)[1] != w->sizes[0]))) {
    return u::why(whyNot, "x is not [M, K] with K the weight's dim 0"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteAddmmKn(Graph& g, const Match& m, FusionRecord&) {
  using A = ir::Addmm;
  const Node& n = g.node(m.anchor);
  const ir::ConstantTensor* w = knWeight(g, operand(n, A::mat2));
  if (!w) return internalError("addmm no longer matches");
  // W^T[n, k] = W[k, n]: sizes [N, K], the source's strides swapped ([1, N] for a dense W).
  std::vector<int64_t> sizes = {w->sizes[1], w->sizes[0]}, strides = {w->strides[1], w->strides[0]};
  VF_ASSIGN_OR_RETURN(ir::ConstantId wt, ir::addConstantView(g, static_cast<ir::ConstantId>(operand(n, A::mat2).i),
                                                               sizes, strides, "_t"));
  Node& node = g.mutableNode(m.anchor);
  toLinear(node, operand(node, A::mat1), Arg::constant(wt), operand(node, A::self));  // addmm(b, x, W) -> linear(x, W^T, b)
  return Status::ok();
}

enum class KnBug { None, WeightNotTransposed, BiasDropped, ScalesUnchecked };

// addmm(b, x, V, beta, alpha)[m, n] = beta*b[n] + alpha*sum_k x[m, k]*V[k, n]; the target reads
// V through the transposed view T[n, k] = V[k, n] (sem::permute: the view's elements, not a copy).
// The realistic bug is the view's strides left row-major: V's buffer read as an [N, K] matrix.
Obligation addmmKnCanonical(KnBug bug) {
  ObligationBuilder ob("canonicalize-addmm-kn");
  struct Case {
    sem::Sizes x;
    int64_t n;
  };
  // K != N, so a buffer reread as [N, K] is a different matrix; the scale bug on the smallest case.
  const std::vector<Case> cases = bug == KnBug::ScalesUnchecked ? std::vector<Case>{{{1, 1}, 1}}
                                                                 : std::vector<Case>{{{2, 2}, 3}, {{1, 3}, 2}};
  int caseNo = 0;
  for (const Case& c : cases) {
    const std::string tag = "case" + std::to_string(caseNo++);
    const int64_t k = c.x.back();
    ElementTensor x = ElementTensor::variables(tag + ".x", c.x);
    ElementTensor v = ElementTensor::variables(tag + ".addmm.weight", {k, c.n});  // [K, N], as stored
    ElementTensor b = ElementTensor::variables(tag + ".addmm.bias", {c.n});
    Expr beta = ob.var(tag + ".addmm.beta"), alpha = ob.var(tag + ".addmm.alpha");
    if (bug != KnBug::ScalesUnchecked) ob.assume(beta == 1).assume(alpha == 1);
    ElementTensor weight = bug == KnBug::WeightNotTransposed ? sem::reshape(v, {c.n, k}) : sem::permute(v, {1, 0});
    sem::proveElementwise(ob, tag + ".out", sem::addmm(b, x, v, beta, alpha),
                          sem::linear(x, weight, bug == KnBug::BiasDropped ? nullptr : &b));
  }
  return ob.build();
}

std::optional<Match> matchMm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!ir::hasOperands<ir::Mm>(n) || !operand(n, ir::Mm::self).isValue()) return std::nullopt;
  Arg weight;
  if (!transposedWeight(g, operand(n, ir::Mm::mat2), &weight)) return u::why(whyNot, kNotTransposedWeight), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  Arg weight;
  if (!transposedWeight(g, operand(n, ir::Mm::mat2), &weight)) return internalError("mm no longer matches");
  toLinear(n, operand(n, ir::Mm::self), weight, Arg::none());  // mm(x, W^T) -> linear(x, W)
  return Status::ok();
}

std::optional<Match> matchLinear(const Graph& g, NodeId id, std::string* whyNot) {
  using L = ir::Linear;
  const Node& n = g.node(id);
  if (!ir::hasOperands<L>(n) || !operand(n, L::input).isValue()) return std::nullopt;
  const ir::ConstantTensor* w = u::floatConstant(g, operand(n, L::weight));
  if (!w || w->sizes.size() != 2) {
    return u::why(whyNot, "the weight is not a 2-D float32 or bfloat16 constant"), std::nullopt;
  }
  if (!validBias(g, operand(n, L::bias), w->sizes[0], w->dtype)) return u::why(whyNot, kBadBias), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteLinear(Graph& g, const Match& m, FusionRecord&) {
  using L = ir::Linear;
  Node& n = g.mutableNode(m.anchor);
  toLinear(n, operand(n, L::input), operand(n, L::weight), operand(n, L::bias));
  return Status::ok();
}

/// Small shapes of x (K last) and N, the weight's rows.
struct LinearCase {
  sem::Sizes x;
  int64_t n;
};
const std::vector<LinearCase> kMatrixCases = {{{2, 2}, 2}, {{1, 3}, 2}};
const std::vector<LinearCase> kSquareCase = {{{2, 2}, 2}};  // a weight read untransposed still fits

enum class LinearBug { None, BiasDropped, WeightNotTransposed, ScalesUnchecked };

/// source(x, W, b) == verifuse::linear(x, W', b') on each case, under the rule's guard facts.
template <typename Source>
Obligation linearCanonical(const std::string& id, const std::vector<LinearCase>& cases, LinearBug bug, bool withBias,
                           Source source) {
  ObligationBuilder ob(id);
  int caseNo = 0;
  for (const LinearCase& c : cases) {
    const std::string tag = "case" + std::to_string(caseNo++);
    ElementTensor x = ElementTensor::variables(tag + ".x", c.x);
    ElementTensor w = ElementTensor::variables(tag + ".linear.weight", {c.n, c.x.back()});
    ElementTensor b = ElementTensor::variables(tag + ".linear.bias", {c.n});
    ElementTensor targetWeight = bug == LinearBug::WeightNotTransposed ? sem::permute(w, {1, 0}) : w;
    const bool targetBias = withBias && bug != LinearBug::BiasDropped;
    sem::proveElementwise(ob, tag + ".out", source(ob, x, w, b),
                          sem::linear(x, targetWeight, targetBias ? &b : nullptr));
  }
  return ob.build();
}

Obligation addmmCanonical(LinearBug bug) {
  // Dropping the beta = alpha = 1 guard shows on the smallest case (cheaper to refute: cubic terms).
  const std::vector<LinearCase> scalarCase = {{{1, 1}, 1}};
  const auto& cases = bug == LinearBug::WeightNotTransposed ? kSquareCase
                      : bug == LinearBug::ScalesUnchecked   ? scalarCase
                                                            : kMatrixCases;
  return linearCanonical("canonicalize-addmm", cases, bug, true,
                         [bug](ObligationBuilder& ob, const ElementTensor& x, const ElementTensor& w, const ElementTensor& b) {
                           Expr beta = ob.var("addmm.beta"), alpha = ob.var("addmm.alpha");
                           if (bug != LinearBug::ScalesUnchecked) ob.assume(beta == 1).assume(alpha == 1);
                           return sem::addmm(b, x, sem::permute(w, {1, 0}), beta, alpha);
                         });
}

Obligation mmCanonical(LinearBug bug) {
  const auto& cases = bug == LinearBug::WeightNotTransposed ? kSquareCase : kMatrixCases;
  return linearCanonical("canonicalize-mm", cases, bug, false,
                         [](ObligationBuilder&, const ElementTensor& x, const ElementTensor& w, const ElementTensor&) {
                           return sem::mm(x, sem::permute(w, {1, 0}));
                         });
}

Obligation linearCanonicalObligation(LinearBug bug) {
  // aten::linear takes x[..., K]: a 3-d input too.
  std::vector<LinearCase> cases = {{{2, 2}, 2}, {{2, 1, 3}, 2}};
  if (bug == LinearBug::WeightNotTransposed) cases = kSquareCase;
  return linearCanonical("canonicalize-linear", cases, bug, true,
                         [](ObligationBuilder&, const ElementTensor& x, const ElementTensor& w, const ElementTensor& b) {
                           return sem::linear(x, w, &b);
                         });
}

// ---- collapse-linear-view-pair ----------------------------------------------------------------------

std::optional<Match> matchLinearViewPair(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& lin = g.node(id);
  if (!hasNoFusedPostOps(lin)) return std::nullopt;
  const Node* flatten = u::producerOf(g, operand(lin, FusedLinear::x));
  if (!isView(flatten) || !u::hasSingleUse(g, lin.outputs[0])) return std::nullopt;
  const auto* xShape = u::staticShape(g, u::valueOf(ir::selfOperand(*flatten)));
  const Node* unflatten = &g.node(g.users(lin.outputs[0])[0]);
  if (!isView(unflatten)) return std::nullopt;
  if (!xShape || xShape->size() < 2) {
    return u::why(whyNot, "the flattened input's shape is not static (rank >= 2)"), std::nullopt;
  }
  auto outSize = viewSize(*unflatten).asIntList();
  const int64_t n = g.constants()[static_cast<size_t>(operand(lin, FusedLinear::weight).i)].sizes[0];
  std::vector<int64_t> expected(xShape->begin(), xShape->end() - 1);
  expected.push_back(n);
  if (!outSize.isOk() || *outSize != expected) {
    return u::why(whyNot, "the output view is not x.shape[:-1] + [N]"), std::nullopt;
  }
  return Match{id, unflatten->id, 0};
}

Status rewriteLinearViewPair(Graph& g, const Match& m, FusionRecord&) {
  const Node& lin = g.node(m.anchor);
  const ValueId x = u::valueOf(ir::selfOperand(*u::producerOf(g, operand(lin, FusedLinear::x))));
  const Node& unflatten = g.node(m.consumer);
  auto outSize = viewSize(unflatten).asIntList();
  if (!outSize.isOk()) return internalError("view pair no longer matches");
  const ValueId unflattened = unflatten.outputs[0];
  Node& n = g.mutableNode(m.anchor);
  operand(n, FusedLinear::x) = Arg::value(x);
  g.mutableValue(n.outputs[0]).setShape(*outSize);
  g.replaceAllUses(unflattened, n.outputs[0]);
  g.eraseNode(m.consumer);
  return Status::ok();
}

enum class ViewPairBug { None, PermuteAsView, OutputShapeUnchecked };

// Row-major reshapes: reshape(linear(reshape(x, [A*B, K]), W, b), [A, B, N]) = linear(x, W, b).
Obligation linearViewPair(ViewPairBug bug) {
  ObligationBuilder ob("collapse-linear-view-pair");
  const int64_t n = 2;
  ElementTensor w = ElementTensor::variables("linear.weight", {n, 2});
  ElementTensor b = ElementTensor::variables("linear.bias", {n});
  if (bug == ViewPairBug::PermuteAsView) {
    // The op producing the linear's input is permute(x, [1, 0]), collapsed as if it were a view.
    ElementTensor x = ElementTensor::variables("x", {2, 2});
    ElementTensor y = sem::linear(sem::permute(x, {1, 0}), w, &b);
    sem::proveElementwise(ob, "out", sem::reshape(y, {2, n}), sem::linear(x, w, &b));
    return ob.build();
  }
  ElementTensor x = ElementTensor::variables("x", {2, 3, 2});
  ElementTensor y = sem::linear(sem::reshape(x, {6, 2}), w, &b);
  // The guard: the output view is x.shape[:-1] + [N]; the mutant takes [3, 2, N] as well.
  sem::Sizes outSize = bug == ViewPairBug::OutputShapeUnchecked ? sem::Sizes{3, 2, n} : sem::Sizes{2, 3, n};
  sem::proveElementwise(ob, "out", sem::reshape(y, outSize), sem::linear(x, w, &b));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> canonicalizeOps() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "canonicalize-convolution",
      .summary = "aten::convolution -> verifuse::conv",
      .math = "convolution(x, W, b, s, p, d, transposed=false, op, g) = conv(x, W, b, s, p, d, g)  "
              "(1-d, bounded: 3 shapes with stride, padding, dilation, groups and depthwise)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::convolution"},
      // convolution(%x, $W, $b?, [s], [p], [d], false, [op], g): W a float32 constant of rank 3..5,
      // b None or a float32 constant of C_out elements; the arguments map by kConvFromAten.
      .match = matchConvolution,
      .rewrite = rewriteConvolution,
      .obligation = u::bindNoModel(convCanonical, ConvBug::None),
      .mutants = {{"transposed-conv-taken", "a transposed convolution canonicalized as a forward one",
                   u::bindNoModel(convCanonical, ConvBug::TransposedTaken)},
                  {"groups-dropped", "groups not passed on (verifuse::conv with groups=1)",
                   u::bindNoModel(convCanonical, ConvBug::GroupsDropped)},
                  {"padding-dilation-swapped", "padding and dilation taken from each other's positions",
                   u::bindNoModel(convCanonical, ConvBug::PaddingDilationSwapped)}},
  });
  rules.push_back({
      .id = "canonicalize-addmm",
      .summary = "aten::addmm(b, x, W^T) -> verifuse::linear(x, W, b)",
      .math = "addmm(b, x, permute(W,[1,0]), beta=1, alpha=1)[m,n] = sum_k x[m,k]*W[n,k] + b[n] = linear(x, W, b)  "
              "(bounded: x [2,2] and [1,3])",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::addmm"},
      // addmm($b, %x, permute($W, [1, 0]) | t($W), 1, 1): W a 2-D float32 or bfloat16 constant (b of its dtype), b of N elements.
      .match = matchAddmm,
      .rewrite = rewriteAddmm,
      .obligation = u::bindNoModel(addmmCanonical, LinearBug::None),
      .mutants = {{"bias-dropped", "linear(x, W) without the bias", u::bindNoModel(addmmCanonical, LinearBug::BiasDropped)},
                  {"weight-not-transposed", "linear(x, W^T, b): the permute kept in the weight",
                   u::bindNoModel(addmmCanonical, LinearBug::WeightNotTransposed)},
                  {"beta-alpha-unchecked", "beta*b + alpha*x@W^T taken as linear for any beta, alpha",
                   u::bindNoModel(addmmCanonical, LinearBug::ScalesUnchecked)}},
  });
  rules.push_back({
      .id = "canonicalize-addmm-kn",
      .summary = "aten::addmm(b, x, W[K,N]) -> verifuse::linear(x, W^T view, b) (GPT-2 Conv1D)",
      .math = "addmm(b, x, V, beta=1, alpha=1)[m,n] = sum_k x[m,k]*V[k,n] + b[n] = linear(x, T, b), "
              "T[n,k] = V[k,n] a transposed view of V (bounded: x [2,2] with N 3, x [1,3] with N 2)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::addmm"},
      // addmm($b, %x, $V, 1, 1): V a 2-D float32 or bfloat16 constant [K, N] read as is, b of N elements, x
      // [M, K] when its shape is known. The weight becomes the constant view $V_t: sizes [N, K],
      // V's strides swapped ([1, N]), V's buffer (ir::addConstantView).
      .match = matchAddmmKn,
      .rewrite = rewriteAddmmKn,
      .obligation = u::bindNoModel(addmmKnCanonical, KnBug::None),
      .mutants = {{"weight-not-transposed", "linear reads V's buffer as a row-major [N, K] matrix (view strides not swapped)",
                   u::bindNoModel(addmmKnCanonical, KnBug::WeightNotTransposed)},
                  {"bias-dropped", "linear(x, V^T) without the bias", u::bindNoModel(addmmKnCanonical, KnBug::BiasDropped)},
                  {"beta-alpha-unchecked", "beta*b + alpha*x@V taken as linear for any beta, alpha",
                   u::bindNoModel(addmmKnCanonical, KnBug::ScalesUnchecked)}},
  });
  rules.push_back({
      .id = "canonicalize-mm",
      .summary = "aten::mm(x, W^T) -> verifuse::linear(x, W)",
      .math = "mm(x, permute(W,[1,0]))[m,n] = sum_k x[m,k]*W[n,k] = linear(x, W)  (bounded: x [2,2] and [1,3])",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::mm"},
      // mm(%x, permute($W, [1, 0]) | t($W)): W a 2-D float32 or bfloat16 constant.
      .match = matchMm,
      .rewrite = rewriteMm,
      .obligation = u::bindNoModel(mmCanonical, LinearBug::None),
      .mutants = {{"weight-not-transposed", "linear(x, W^T): the permute kept in the weight",
                   u::bindNoModel(mmCanonical, LinearBug::WeightNotTransposed)}},
  });
  rules.push_back({
      .id = "canonicalize-linear",
      .summary = "aten::linear -> verifuse::linear",
      .math = "aten::linear(x, W, b)[..., n] = sum_k x[..., k]*W[n,k] + b[n] = verifuse::linear(x, W, b)  "
              "(bounded: x [2,2] and [2,1,3])",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::linear"},
      // linear(%x, $W, $b?): W a 2-D float32 constant, b None or of N elements.
      .match = matchLinear,
      .rewrite = rewriteLinear,
      .obligation = u::bindNoModel(linearCanonicalObligation, LinearBug::None),
      .mutants = {{"bias-dropped", "verifuse::linear(x, W) without the bias",
                   u::bindNoModel(linearCanonicalObligation, LinearBug::BiasDropped)},
                  {"weight-transposed", "verifuse::linear(x, W^T, b)",
                   u::bindNoModel(linearCanonicalObligation, LinearBug::WeightNotTransposed)}},
  });
  return rules;
}

std::vector<RuleDeclaration> canonicalizeViews() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "collapse-linear-view-pair",
      .summary = "view(x, [M, K]) -> linear -> view(y, [..., N]) => linear(x[..., K])",
      .math = "reshape(linear(reshape(x, [A*B, K]), W, b), [A, B, N]) = linear(x, W, b)  (bounded: x [2,3,2])",
      .phase = Phase::kCanonicalizeViews,
      .anchors = {kLinearOp},
      // view(linear(view(%x, s), $W, $b?), x.shape[:-1] + [N]): the linear without post-ops, its
      // only user the second view, x of static rank >= 2 (the views' numels force s = [M, K]).
      .match = matchLinearViewPair,
      .rewrite = rewriteLinearViewPair,
      .obligation = u::bindNoModel(linearViewPair, ViewPairBug::None),
      .mutants = {{"permute-collapsed-as-view", "linear(permute(x)) collapsed to linear(x) as if permute were a view",
                   u::bindNoModel(linearViewPair, ViewPairBug::PermuteAsView)},
                  {"output-view-unchecked", "collapsed although the output view is [3, 2, N], not x.shape[:-1] + [N]",
                   u::bindNoModel(linearViewPair, ViewPairBug::OutputShapeUnchecked)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
