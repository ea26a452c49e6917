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
#include <array>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
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
  const bool permute = p->op == "aten::permute" && p->args.size() == 2 && isIntList(p->args[1], {1, 0});
  const bool t = (p->op == "aten::t" || p->op == "aten::numpy_T") && p->args.size() == 1;
  if (!permute && !t) return nullptr;
  const ir::ConstantTensor* w = u::floatConstant(g, p->args[0]);
  if (!w || w->sizes.size() != 2) return nullptr;
  *weight = p->args[0];
  return w;
}

/// No bias, or a constant [n] of the weight's dtype \p dtype.
bool validBias(const Graph& g, const Arg& b, int64_t n, ir::DType dtype) {
  if (b.kind == Arg::Kind::None) return true;
  const ir::ConstantTensor* c = u::floatConstant(g, b);
  return c && c->dtype == dtype && c->sizes.size() == 1 && c->sizes[0] == n;
}

/// view / reshape / _unsafe_view of a graph value to a size list.
bool isView(const Node* n) {
  return n && (n->op == "aten::view" || n->op == "aten::reshape" || n->op == "aten::_unsafe_view") &&
         n->args.size() == 2 && n->args[0].isValue();
}

void toLinear(Node& n, Arg x, Arg w, Arg b) {
  n.op = kLinearOp;
  n.overload = "";
  n.args = {std::move(x), std::move(w), std::move(b), Arg::string("")};
}

const char* const kNotTransposedWeight =
    "the weight operand is not permute(W, [1, 0]) / t(W) of a 2-D float32 or bfloat16 constant";
const char* const kBadBias = "the bias is not a constant of N (C_out) elements in the weight's dtype";

// ---- canonicalize-convolution ---------------------------------------------------------------------

// verifuse::conv(x, W, b, stride, padding, dilation, groups, post_ops) takes its first seven
// arguments from these positions of aten::convolution(x, W, b, stride, padding, dilation,
// transposed, output_padding, groups). The rewrite and the obligation both read this table.
constexpr std::array<int, 7> kConvFromAten = {0, 1, 2, 3, 4, 5, 8};

std::optional<Match> matchConvolution(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.size() != 9 || !n.args[0].isValue()) return std::nullopt;
  const ir::ConstantTensor* w = u::floatConstant(g, n.args[1]);
  if (!w) return u::why(whyNot, "the weight is not a frozen float32 or bfloat16 constant"), std::nullopt;
  if (n.args[6].kind != Arg::Kind::Bool || n.args[6].i != 0) {
    return u::why(whyNot, "transposed convolution (verifuse::conv is a forward convolution)"), std::nullopt;
  }
  if (w->sizes.size() < 3 || w->sizes.size() > 5) {
    return u::why(whyNot, "weight rank is not 3..5 (1 to 3 spatial dims)"), std::nullopt;
  }
  if (!n.args[3].asIntList().isOk() || !n.args[4].asIntList().isOk() || !n.args[5].asIntList().isOk()) {
    return u::why(whyNot, "stride, padding or dilation is not an int list"), std::nullopt;
  }
  if (n.args[8].kind != Arg::Kind::Int) return u::why(whyNot, "groups is not an int"), std::nullopt;
  if (!validBias(g, n.args[2], w->sizes[0], w->dtype)) return u::why(whyNot, kBadBias), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteConvolution(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  std::vector<Arg> args;
  for (int from : kConvFromAten) args.push_back(n.args[static_cast<size_t>(from)]);
  args.push_back(Arg::string(""));
  n.op = kConvOp;
  n.overload = "";
  n.args = std::move(args);
  return Status::ok();
}

/// One aten::convolution call on small 1-D shapes: its integer arguments by position.
struct ConvCase {
  int64_t batch, inChannels, length;
  sem::Sizes weight;
  bool bias;
  std::array<int64_t, 9> args;  ///< positions 3..8: stride, padding, dilation, transposed, output_padding, groups
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
  std::array<int, 7> from = kConvFromAten;
  if (bug == ConvBug::GroupsDropped) from[6] = -1;  // groups left at its default, 1
  if (bug == ConvBug::PaddingDilationSwapped) std::swap(from[4], from[5]);
  int caseNo = 0;
  for (const ConvCase& c : convCases(/*includeTransposed=*/bug == ConvBug::TransposedTaken)) {
    const std::string tag = "case" + std::to_string(caseNo++);
    ElementTensor x = ElementTensor::variables(tag + ".x", {c.batch, c.inChannels, c.length});
    ElementTensor w = ElementTensor::variables(tag + ".conv.weight", c.weight);
    const int64_t cout = c.args[6] ? c.weight[1] * c.args[8] : c.weight[0];
    ElementTensor b = ElementTensor::variables(tag + ".conv.bias", {cout});
    const ElementTensor* bias = c.bias ? &b : nullptr;
    sem::ConvAttrs aten{.stride = c.args[3], .padding = c.args[4], .dilation = c.args[5], .groups = c.args[8],
                        .transposed = c.args[6] != 0, .outputPadding = c.args[7]};
    auto arg = [&](int slot, int64_t dflt) { return from[slot] < 0 ? dflt : c.args[static_cast<size_t>(from[slot])]; };
    sem::ConvAttrs fused{.stride = arg(3, 1), .padding = arg(4, 0), .dilation = arg(5, 1), .groups = arg(6, 1)};
    sem::proveElementwise(ob, tag + ".out", sem::convolution1d(x, w, bias, aten), sem::convolution1d(x, w, bias, fused));
  }
  return ob.build();
}

// ---- canonicalize-addmm / -mm / -linear ------------------------------------------------------------

std::optional<Match> matchAddmm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.size() != 5 || !n.args[1].isValue()) return std::nullopt;
  Arg weight;
  const ir::ConstantTensor* w = transposedWeight(g, n.args[2], &weight);
  if (!w) return u::why(whyNot, kNotTransposedWeight), std::nullopt;
  auto beta = u::numberArg(n.args[3]), alpha = u::numberArg(n.args[4]);
  if (!beta || !alpha || *beta != 1.0 || *alpha != 1.0) return u::why(whyNot, "beta or alpha is not 1"), std::nullopt;
  if (n.args[0].kind == Arg::Kind::None || !validBias(g, n.args[0], w->sizes[0], w->dtype)) {
    return u::why(whyNot, kBadBias), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteAddmm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  Arg weight;
  if (!transposedWeight(g, n.args[2], &weight)) return internalError("addmm no longer matches");
  toLinear(n, n.args[1], weight, n.args[0]);  // addmm(b, x, W^T) -> linear(x, W, b)
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
  const Node& n = g.node(id);
  if (n.args.size() != 5 || !n.args[1].isValue()) return std::nullopt;
  if (!n.args[2].isConstant()) return std::nullopt;  // permute(W) is canonicalize-addmm's pattern
  const ir::ConstantTensor* w = knWeight(g, n.args[2]);
  if (!w) return u::why(whyNot, "the [K, N] weight is not a 2-D float32 or bfloat16 constant"), std::nullopt;
  if (w->sizes[0] == 0 || w->sizes[1] == 0) return u::why(whyNot, "empty weight"), std::nullopt;
  auto beta = u::numberArg(n.args[3]), alpha = u::numberArg(n.args[4]);
  if (!beta || !alpha || *beta != 1.0 || *alpha != 1.0) return u::why(whyNot, "beta or alpha is not 1"), std::nullopt;
  if (n.args[0].kind == Arg::Kind::None || !validBias(g, n.args[0], w->sizes[1], w->dtype)) {
    return u::why(whyNot, "the bias is not a constant of N (= the weight's dim 1) elements in its dtype"), std::nullopt;
  }
  const auto* x = u::knownShape(g, u::valueOf(n.args[1]));
  if (x && (x->size() != 2 || ((*x)[1] >= 0 && (*x)[1] != w->sizes[0]))) {
    return u::why(whyNot, "x is not [M, K] with K the weight's dim 0"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteAddmmKn(Graph& g, const Match& m, FusionRecord&) {
  const Node& n = g.node(m.anchor);
  const ir::ConstantTensor* w = knWeight(g, n.args[2]);
  if (!w) return internalError("addmm no longer matches");
  // W^T[n, k] = W[k, n]: sizes [N, K], the source's strides swapped ([1, N] for a dense W).
  std::vector<int64_t> sizes = {w->sizes[1], w->sizes[0]}, strides = {w->strides[1], w->strides[0]};
  VF_ASSIGN_OR_RETURN(ir::ConstantId wt, ir::addConstantView(g, static_cast<ir::ConstantId>(n.args[2].i), sizes,
                                                               strides, "_t"));
  Node& node = g.mutableNode(m.anchor);
  toLinear(node, node.args[1], Arg::constant(wt), node.args[0]);  // addmm(b, x, W) -> linear(x, W^T, b)
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
  if (n.args.size() != 2 || !n.args[0].isValue()) return std::nullopt;
  Arg weight;
  if (!transposedWeight(g, n.args[1], &weight)) return u::why(whyNot, kNotTransposedWeight), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  Arg weight;
  if (!transposedWeight(g, n.args[1], &weight)) return internalError("mm no longer matches");
  toLinear(n, n.args[0], weight, Arg::none());  // mm(x, W^T) -> linear(x, W)
  return Status::ok();
}

std::optional<Match> matchLinear(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.args.size() != 3 || !n.args[0].isValue()) return std::nullopt;
  const ir::ConstantTensor* w = u::floatConstant(g, n.args[1]);
  if (!w || w->sizes.size() != 2) {
    return u::why(whyNot, "the weight is not a 2-D float32 or bfloat16 constant"), std::nullopt;
  }
  if (!validBias(g, n.args[2], w->sizes[0], w->dtype)) return u::why(whyNot, kBadBias), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteLinear(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  toLinear(n, n.args[0], n.args[1], n.args[2]);
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
  if (!lin.args[kLinearPostOpsArg].s.empty()) return std::nullopt;
  const Node* flatten = u::producerOf(g, lin.args[0]);
  if (!isView(flatten) || !u::hasSingleUse(g, lin.outputs[0])) return std::nullopt;
  const auto* xShape = u::staticShape(g, u::valueOf(flatten->args[0]));
  const Node* unflatten = &g.node(g.users(lin.outputs[0])[0]);
  if (!isView(unflatten)) return std::nullopt;
  if (!xShape || xShape->size() < 2) {
    return u::why(whyNot, "the flattened input's shape is not static (rank >= 2)"), std::nullopt;
  }
  auto outSize = unflatten->args[1].asIntList();
  const int64_t n = g.constants()[static_cast<size_t>(lin.args[1].i)].sizes[0];
  std::vector<int64_t> expected(xShape->begin(), xShape->end() - 1);
  expected.push_back(n);
  if (!outSize.isOk() || *outSize != expected) {
    return u::why(whyNot, "the output view is not x.shape[:-1] + [N]"), std::nullopt;
  }
  return Match{id, unflatten->id, 0};
}

Status rewriteLinearViewPair(Graph& g, const Match& m, FusionRecord&) {
  const Node& lin = g.node(m.anchor);
  const ValueId x = u::valueOf(u::producerOf(g, lin.args[0])->args[0]);
  const Node& unflatten = g.node(m.consumer);
  auto outSize = unflatten.args[1].asIntList();
  if (!outSize.isOk()) return internalError("view pair no longer matches");
  const ValueId unflattened = unflatten.outputs[0];
  Node& n = g.mutableNode(m.anchor);
  n.args[0] = Arg::value(x);
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
