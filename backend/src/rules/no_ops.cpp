// No-op removal: ops that do not change the values their readers see are replaced by their input.
//
//   remove-alias           detach(x) = alias(x) = lift_fresh_copy(x) = x      (autograd/aliasing only)
//   remove-clone           clone(x) = x  for readers that choose their own layout (conv/linear,
//                          attention's keys/values)
//   remove-dense-clone     clone(x, memory_format=preserve) = x  for x a fresh dense tensor (values and strides)
//   dropout-eval-identity  dropout(x, p, train=false) = x
//   remove-identity-view   view(x, x.shape) = x
//   collapse-view-pair     view(view(y, s), y.shape) = y
//   cat-skip-empty         cat([e, x], d) = x   for e a 1-D empty tensor (torch's cat skips it)
//
// Every rule keeps an op whose output is a graph output (a graph output must stay a fresh tensor,
// as eager returns one). The obligations are index-level on small shapes
// (verify/tensor_semantics.h); clone's also models layout, which is what its guard is about.
#include <algorithm>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::hasOperands;
using ir::operand;
using ir::selfOperand;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::Sort;
using verify::sem::ElementTensor;
namespace sem = verify::sem;
namespace u = util;

const std::vector<std::string> kViewOps = {"aten::view", "aten::reshape", "aten::_unsafe_view"};

/// The common shape of a no-op: one output and a value first operand (self; dropout's input).
bool unary(const Node& n) {
  return n.outputs.size() == 1 && ir::hasAtLeastOperands<ir::Unary>(n) && selfOperand(n).isValue();
}

/// The guard every no-op rule shares: a graph output must stay a fresh tensor.
bool notGraphOutput(const Graph& g, const Node& n, std::string* whyNot) {
  if (g.isGraphOutput(n.outputs[0])) return u::why(whyNot, "its output is a graph output (kept fresh, as eager returns it)");
  return true;
}

/// The target shape of view and _unsafe_view (size) or reshape (shape); null for another op or
/// another number of operands.
const Arg* viewShape(const Node& n) {
  if (n.op == "aten::view") return hasOperands<ir::View>(n) ? &operand(n, ir::View::size) : nullptr;
  if (n.op == "aten::reshape") return hasOperands<ir::Reshape>(n) ? &operand(n, ir::Reshape::shape) : nullptr;
  if (n.op == "aten::_unsafe_view") return hasOperands<ir::UnsafeView>(n) ? &operand(n, ir::UnsafeView::size) : nullptr;
  return nullptr;
}

bool isView(const Node* n) { return n && viewShape(*n) && selfOperand(*n).isValue(); }

/// Replaces the one-output node's uses by \p replacement and erases it.
Status replaceBy(Graph& g, NodeId id, ValueId replacement) {
  g.replaceAllUses(g.node(id).outputs[0], replacement);
  g.eraseNode(id);
  return Status::ok();
}

Status replaceByInput(Graph& g, const Match& m, FusionRecord&) {
  return replaceBy(g, m.anchor, u::valueOf(selfOperand(g.node(m.anchor))));
}

// ---- remove-alias ------------------------------------------------------------------------------------

std::optional<Match> matchAlias(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!unary(n) || !notGraphOutput(g, n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

// detach/alias/lift_fresh_copy only change autograd tracking or aliasing: out[i] = x[i].
Obligation aliasIdentity(bool permuteTaken) {
  ObligationBuilder ob("remove-alias");
  ElementTensor x = ElementTensor::variables("x", {2, 2});
  ElementTensor source = permuteTaken ? sem::permute(x, {1, 0}) : sem::clone(x);
  sem::proveElementwise(ob, "out", source, x);
  return ob.build();
}

// ---- remove-clone ------------------------------------------------------------------------------------

/// \p n is CPU flash attention (q, k, v, dropout, causal, mask, scale) reading \p v only as its
/// keys or values: their strides do not shape its output (ATen: empty_like(q); the attention
/// engine: the same), and both engines read them by index whatever the strides (the engine packs
/// strided rows per head). Not the mask, although the engine reads any mask strides: a mask whose
/// keys are not adjacent is gathered per query row, in every layer that reads it, and one copy
/// (T5 makes its permuted position bias contiguous once for all six layers) costs less: measured at
/// T5-small's batch 8 bf16 attention, 1.56 ms per layer with the dense mask, 1.97 with the gather.
bool readsAsKeysOrValues(const Node& n, ValueId v) {
  using A = ir::FlashAttentionCpu;
  if (n.op != A::kOp || !hasOperands<A>(n)) return false;
  auto readsV = [v](const Arg& a) { return a.isValue() && a.i == v; };
  const auto asKeysOrValues = static_cast<size_t>(readsV(operand(n, A::key))) + readsV(operand(n, A::value));
  const auto anywhere = static_cast<size_t>(std::count_if(n.args.begin(), n.args.end(), readsV));
  return asKeysOrValues > 0 && anywhere == asKeysOrValues;  // not read as the query, mask, ...
}

std::optional<Match> matchClone(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!unary(n) || !notGraphOutput(g, n, whyNot)) return std::nullopt;
  // clone fixes strides (x.contiguous() is a clone with memory_format=contiguous) and a later
  // view may rely on them: drop it only when every reader chooses its own output layout.
  // Element-wise ops keep their input's strides, so only conv/linear qualify, and attention for
  // its keys and values (its output is laid out like q, ATen's empty_like(q), so not q):
  // Whisper's k.transpose(1, 2).contiguous() feeding SDPA.
  for (NodeId user : g.users(n.outputs[0])) {
    if (readsAsKeysOrValues(g.node(user), n.outputs[0])) continue;
    if (!isFusedOp(g.node(user))) {
      return u::why(whyNot, "a reader (" + g.node(user).qualifiedName() + ") may depend on the clone's layout"),
             std::nullopt;
    }
  }
  return Match{id, id, 0};
}

// x is a non-contiguous [2, 3] (the transpose of a contiguous [3, 2]). A reader that chooses its
// own layout reads elements by index: reader(clone(x)) = reader(x). The mutant lets a view read it:
// view(clone(x), [6]) is defined, view(x, [6]) is not (eager raises).
Obligation cloneIdentity(bool viewReader) {
  ObligationBuilder ob("remove-clone");
  ElementTensor x = sem::permute(ElementTensor::variables("x.storage", {3, 2}), {1, 0});
  if (viewReader) {
    sem::proveElementwise(ob, "out", sem::view(sem::clone(x), {6}, "view(clone(x)).undefined"),
                          sem::view(x, {6}, "view(x).undefined"));
  } else {
    sem::proveElementwise(ob, "out", sem::clone(x), x);
  }
  return ob.build();
}

// ---- remove-dense-clone ------------------------------------------------------------------------------

/// Ops whose output is a freshly allocated, non-overlapping and dense tensor (GEMMs, convolutions,
/// TensorIterator ops, reductions, normalizations): a preserving clone of it copies its strides.
bool producesDenseTensor(const Node& p) {
  if (isFusedOp(p)) return true;
  static const std::vector<std::string> ops = {
      "aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::convolution", "aten::add", "aten::sub",
      "aten::mul", "aten::div", "aten::neg", "aten::relu", "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh",
      "aten::exp", "aten::rsqrt", "aten::pow", "aten::where", "aten::_softmax", "aten::native_layer_norm",
      "aten::mean", "aten::sum", "aten::cat", "aten::hardtanh", "aten::hardswish", "aten::leaky_relu", "aten::elu"};
  return std::find(ops.begin(), ops.end(), p.op) != ops.end();
}

std::optional<Match> matchDenseClone(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!unary(n)) return std::nullopt;
  const Arg* format = ir::hasAtLeastOperands<ir::Clone>(n) ? &operand(n, ir::Clone::memory_format) : nullptr;
  const bool preserve = !format || format->kind == Arg::Kind::None ||
                        (format->kind == Arg::Kind::MemoryFormat && format->i == 1);
  if (!preserve) return std::nullopt;  // a contiguous clone: remove-clone's case
  if (!notGraphOutput(g, n, whyNot)) return std::nullopt;
  const Node* p = u::producerOf(g, selfOperand(n));
  // The first output of the producer (layer norm's statistics are outputs 1 and 2, dense as well).
  if (!p || !producesDenseTensor(*p)) {
    return u::why(whyNot, "the clone's input is not known to be a fresh dense tensor (a view may rely on the copy's layout)"),
           std::nullopt;
  }
  return Match{id, id, 0};
}

// clone(x, preserve) of a non-overlapping, dense x has x's values and x's strides (empty_like keeps
// them), so any reader (a view too) sees the same tensor. x: a dense but non-contiguous [2,3] (the
// transpose of a [3,2]); a view reads both the same way (the same undefined result on this
// layout). The mutant's x is an expand (overlapping: stride 0), which the clone makes contiguous,
// so view(clone(x)) is defined and view(x) is not.
Obligation denseCloneIdentity(bool overlappingInput) {
  ObligationBuilder ob("remove-dense-clone");
  const ElementTensor x = overlappingInput ? sem::expand(ElementTensor::variables("x.row", {1, 3}), {2, 3})
                                           : sem::permute(ElementTensor::variables("x.storage", {3, 2}), {1, 0});
  // preserve format: x's layout when x is dense, contiguous otherwise.
  const ElementTensor copy = overlappingInput ? sem::clone(x)
                                              : ElementTensor::fromFunction(x.sizes(), [x](const sem::Index& i) { return x.at(i); },
                                                                            x.contiguous());
  sem::proveElementwise(ob, "values", copy, x);
  sem::proveElementwise(ob, "view", sem::view(copy, {6}, "view.undefined"), sem::view(x, {6}, "view.undefined"));
  return ob.build();
}

// ---- dropout-eval-identity ---------------------------------------------------------------------------

std::optional<Match> matchDropout(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!unary(n) || !notGraphOutput(g, n, whyNot)) return std::nullopt;
  if (!hasOperands<ir::Dropout>(n) || operand(n, ir::Dropout::train).kind != Arg::Kind::Bool ||
      operand(n, ir::Dropout::train).i != 0) {
    return u::why(whyNot, "dropout in training mode (or train flag not a constant)"), std::nullopt;
  }
  return Match{id, id, 0};
}

// Eval-mode dropout is the identity. The mutant uses training semantics: keep ? x/(1-p) : 0.
Obligation dropout(bool training) {
  ObligationBuilder ob("dropout-eval-identity");
  Expr x = ob.var("x"), p = ob.var("dropout.p"), keep = ob.var("dropout.mask", Sort::Bool);
  ob.assume(p >= 0).assume(p < 1);
  Expr source = training ? sem::dropoutTrain(x, p, keep) : sem::dropoutEval(x);
  ob.prove("out", source, x);
  return ob.build();
}

// ---- remove-identity-view / collapse-view-pair ---------------------------------------------------------

std::optional<Match> matchIdentityView(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!isView(&n) || !unary(n)) return std::nullopt;
  auto size = viewShape(n)->asIntList();
  if (!size.isOk()) return std::nullopt;
  const auto* inShape = u::staticShape(g, u::valueOf(selfOperand(n)));
  if (!inShape || *inShape != *size) return std::nullopt;  // a reshaping view: not this rule's pattern
  if (!notGraphOutput(g, n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

// view(x, x.shape)[i] = x[unravel(ravel(i))] = x[i]. The mutant compares the sizes by numel only.
Obligation identityView(bool numelOnly) {
  ObligationBuilder ob("remove-identity-view");
  ElementTensor x = ElementTensor::variables("x", {2, 3});
  sem::proveElementwise(ob, "out", sem::view(x, numelOnly ? sem::Sizes{3, 2} : sem::Sizes{2, 3}, "undefined"), x);
  return ob.build();
}

std::optional<Match> matchViewPair(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!isView(&n) || !unary(n)) return std::nullopt;
  auto size = viewShape(n)->asIntList();
  if (!size.isOk()) return std::nullopt;
  const Node* p = u::producerOf(g, selfOperand(n));
  if (!isView(p)) return std::nullopt;
  const auto* srcShape = u::staticShape(g, u::valueOf(selfOperand(*p)));
  if (!srcShape || *srcShape != *size) return std::nullopt;  // not back to the original shape
  if (!notGraphOutput(g, n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteViewPair(Graph& g, const Match& m, FusionRecord&) {
  const Node* inner = u::producerOf(g, selfOperand(g.node(m.anchor)));
  if (!inner) return internalError("view pair no longer matches");
  return replaceBy(g, m.anchor, u::valueOf(selfOperand(*inner)));
}

// view/reshape/_unsafe_view have reshape's values wherever they are defined:
// reshape(reshape(y, s), y.shape) = y for y of any layout. The mutant's inner op is a permute.
Obligation viewPair(bool innerPermute) {
  ObligationBuilder ob("collapse-view-pair");
  if (innerPermute) {
    ElementTensor y = ElementTensor::variables("y", {2, 3});
    sem::proveElementwise(ob, "out", sem::reshape(sem::permute(y, {1, 0}), {2, 3}), y);
    return ob.build();
  }
  ElementTensor y = ElementTensor::variables("y", {2, 3});
  ElementTensor strided = sem::permute(ElementTensor::variables("z", {3, 2}), {1, 0});
  sem::proveElementwise(ob, "flat", sem::reshape(sem::reshape(y, {6}), {2, 3}), y);
  sem::proveElementwise(ob, "transposed-shape", sem::reshape(sem::reshape(y, {3, 2}), {2, 3}), y);
  sem::proveElementwise(ob, "non-contiguous", sem::reshape(sem::reshape(strided, {3, 2}), {2, 3}), strided);
  return ob.build();
}

// ---- cat-skip-empty ----------------------------------------------------------------------------------

/// A 1-D tensor of size 0: torch.cat skips such inputs whatever the other inputs' rank (legacy rule),
/// as transformers' DynamicCache meets it (the empty key/value it starts from, concatenated with
/// the past it is given, every layer and call).
bool legacyEmpty(const Graph& g, const Arg& a) {
  if (a.isConstant()) return g.constants()[static_cast<size_t>(a.i)].sizes == std::vector<int64_t>{0};
  if (!a.isValue()) return false;
  const ir::Value& v = g.value(u::valueOf(a));
  return v.hasShape && v.shape == std::vector<int64_t>{0};
}

std::optional<Match> matchEmptyInCat(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  const Arg* tensors = ir::namedOperand(n, "tensors");  // cat(tensors, dim)
  if (n.outputs.size() != 1 || !tensors || tensors->kind != Arg::Kind::List) return std::nullopt;
  const std::vector<Arg>& items = tensors->list;
  size_t empties = 0;
  for (const Arg& item : items) empties += legacyEmpty(g, item);
  if (empties == 0 || empties == items.size()) return std::nullopt;
  // cat's result type promotes over every input, the skipped ones included.
  const ir::DType out = g.value(n.outputs[0]).dtype;
  for (const Arg& item : items) {
    if (out == ir::DType::Undefined || u::dtypeOf(g, item) != out) {
      return u::why(whyNot, "an input's dtype is unknown or not the result's (cat promotes over the empty inputs too)"),
             std::nullopt;
    }
  }
  if (items.size() - empties == 1 && !notGraphOutput(g, n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status dropEmptyInputs(Graph& g, const Match& m, FusionRecord&) {
  std::vector<Arg> kept;
  for (const Arg& item : operand(g.node(m.anchor), ir::Cat::tensors).list) {
    if (!legacyEmpty(g, item)) kept.push_back(item);
  }
  if (kept.size() == 1 && kept[0].isValue()) return replaceBy(g, m.anchor, u::valueOf(kept[0]));
  operand(g.mutableNode(m.anchor), ir::Cat::tensors) = Arg::makeList(std::move(kept));
  return Status::ok();
}

// cat([e, x], dim) = x for e empty along dim (a skipped 1-D empty adds no elements): index level
// on x [1, 2, 2, 1] concatenated along dim 2. The mutant drops an input of one element.
Obligation emptyInCat(bool nonEmptyDropped) {
  ObligationBuilder ob("cat-skip-empty");
  ElementTensor x = ElementTensor::variables("x", {1, 2, 2, 1});
  ElementTensor e = ElementTensor::variables("empty", {1, 2, nonEmptyDropped ? 1 : 0, 1});
  sem::proveElementwise(ob, "out", sem::cat({e, x}, 2), x);
  sem::proveElementwise(ob, "out.after", sem::cat({x, e}, 2), x);
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> noOps() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "remove-alias",
      .summary = "detach / alias / lift_fresh_copy -> their input",
      .math = "detach(x) = alias(x) = lift_fresh_copy(x) = x  (values; bounded: x [2,2])",
      .phase = Phase::kNoOps,
      .anchors = {"aten::detach", "aten::alias", "aten::lift_fresh_copy"},
      // <op>(%x) whose output is not a graph output.
      .match = matchAlias,
      .rewrite = replaceByInput,
      .obligation = u::bindNoModel(aliasIdentity, false),
      .mutants = {{"permute-taken-as-alias", "a view that reorders elements (permute) removed as an alias",
                   u::bindNoModel(aliasIdentity, true)}},
  });
  rules.push_back({
      .id = "remove-clone",
      .summary = "clone read only by conv/linear or as attention's k/v -> its input",
      .math = "reader(clone(x)) = reader(x) for readers that read elements by index (conv/linear, "
              "attention's k/v)  "
              "(bounded: x a non-contiguous [2,3])",
      .phase = Phase::kNoOps,
      .anchors = {"aten::clone"},
      // clone(%x, ...) whose every reader is a verifuse::conv/linear, not a graph output.
      .match = matchClone,
      .rewrite = replaceByInput,
      .obligation = u::bindNoModel(cloneIdentity, false),
      .mutants = {{"clone-dropped-before-view", "a clone removed although a view reads it (view(x) of a "
                                                "non-contiguous x is undefined)",
                   u::bindNoModel(cloneIdentity, true)}},
  });
  rules.push_back({
      .id = "remove-dense-clone",
      .summary = "clone(x, preserve) of a fresh dense tensor -> x",
      .math = "clone(x, memory_format=preserve) = x, same values and strides, for x non-overlapping and dense  "
              "(bounded: x a dense non-contiguous [2,3], read by index and by a view)",
      .phase = Phase::kNoOps,
      .anchors = {"aten::clone"},
      // clone(%x, None | preserve) with x the output of a GEMM, convolution, pointwise op,
      // reduction or normalization (a fresh dense tensor), not a graph output. Eval dropout arrives
      // as such a clone; removing it lets a residual add reach the linear before it.
      .match = matchDenseClone,
      .rewrite = replaceByInput,
      .obligation = u::bindNoModel(denseCloneIdentity, false),
      .mutants = {{"overlapping-input-clone-dropped", "a preserving clone of an expand (not dense: the copy is "
                                                      "contiguous) removed before a view",
                   u::bindNoModel(denseCloneIdentity, true)}},
  });
  rules.push_back({
      .id = "dropout-eval-identity",
      .summary = "eval-mode dropout -> its input",
      .math = "dropout(x, p, train=False) = x",
      .phase = Phase::kNoOps,
      .anchors = {"aten::dropout"},
      // dropout(%x, p, false), not a graph output.
      .match = matchDropout,
      .rewrite = replaceByInput,
      .obligation = u::bindNoModel(dropout, false),
      .mutants = {{"dropout-training-mode", "training dropout: mask ? x/(1-p) : 0 is not the identity",
                   u::bindNoModel(dropout, true)}},
  });
  rules.push_back({
      .id = "remove-identity-view",
      .summary = "view(x, x.shape) -> x",
      .math = "view(x, x.shape) = x  (row-major; bounded: x [2,3])",
      .phase = Phase::kNoOps,
      .anchors = kViewOps,
      // view|reshape|_unsafe_view(%x, s) with s equal to x's static shape.
      .match = matchIdentityView,
      .rewrite = replaceByInput,
      .obligation = u::bindNoModel(identityView, false),
      .mutants = {{"shape-compared-by-numel", "view(x, [3,2]) of an x [2,3] taken as x (same numel)",
                   u::bindNoModel(identityView, true)}},
  });
  rules.push_back({
      .id = "collapse-view-pair",
      .summary = "view(view(y, s), y.shape) -> y",
      .math = "reshape(reshape(y, s), y.shape) = y  (row-major, any layout of y; bounded: y [2,3], s [6] and [3,2])",
      .phase = Phase::kNoOps,
      .anchors = kViewOps,
      // view(view(%y, s), t) with t equal to y's static shape (either op view, reshape or _unsafe_view).
      .match = matchViewPair,
      .rewrite = rewriteViewPair,
      .obligation = u::bindNoModel(viewPair, false),
      .mutants = {{"permute-collapsed-as-view", "view(permute(y), y.shape) collapsed to y as if permute were a view",
                   u::bindNoModel(viewPair, true)}},
  });
  rules.push_back({
      .id = "cat-skip-empty",
      .summary = "cat whose inputs include 1-D empty tensors -> cat of the others (one left: that input)",
      .math = "cat([e, x], d) = cat([x, e], d) = x for e a 1-D empty tensor (torch skips it)  "
              "(bounded: x [1,2,2,1], d 2)",
      .phase = Phase::kNoOps,
      .anchors = {"aten::cat"},
      // cat([..], dim) with a [0]-shaped input and another that is not; every input of the
      // result's dtype; the result not a graph output when a single input is left.
      .match = matchEmptyInCat,
      .rewrite = dropEmptyInputs,
      .obligation = u::bindNoModel(emptyInCat, false),
      .mutants = {{"non-empty-input-dropped", "an input of one element along the cat axis dropped as if empty",
                   u::bindNoModel(emptyInCat, true)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
