// Residual add: conv/linear output + a tensor of the same shape becomes oneDNN's sum post-op.
//
//   add-below-permute         add(permute(a, p), permute(b, p), alpha) = permute(add(a, b, alpha), p)
//                             add(r, permute(y, p), alpha) = permute(add(permute(r, p^-1), y, alpha), p)
//   residual-add-sum-postop   add(y, z, alpha) = y + alpha*z = sum post-op (dst_prev = z, scale = alpha)
//                             add(z, y, alpha) with alpha == 1 likewise (scale 1)
//
// add-below-permute is there for the residual of ConvNeXt's blocks (transformers' and timm's): the
// block computes in NHWC (dwconv, permute, layer norm, two linears) and adds its input in NCHW,
// add(x, permute(linear_out, [0,3,1,2])) with x itself a permute or a conv's output, so the add ran
// as its own ATen op (18 memory passes per call); moved below the permute it is the linear's
// residual (x permuted back to NHWC is a view, dense where x came from a channels-last conv).
#include "rules/families.h"
#include "rules/rule_util.h"
#include "rules/strides.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Add;
using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::Permute;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
namespace sem = verify::sem;
namespace u = util;

/// One sum post-op per conv/linear: a residual already taken leaves no room for another (nor do
/// post-ops that do not parse: the rewrite would have to keep them).
bool hasSumPostOp(const Node& fused) {
  auto ops = fusedPostOps(fused);
  if (!ops.isOk()) return true;
  for (const PostOpSpec& s : *ops) {
    if (s.kind == "sum") return true;
  }
  return false;
}

/// add(self, other, alpha): the operand on side \p k (0: self, 1: other) and the one opposite.
const Arg& addOperand(const Node& add, int k) { return operand(add, k == 0 ? Add::self : Add::other); }
const Arg& otherAddOperand(const Node& add, int k) { return operand(add, k == 0 ? Add::other : Add::self); }

/// aten::add.Tensor's operands, by name.
std::vector<Arg> addOperands(Arg self, Arg other, Arg alpha) {
  return ir::OperandsOf<Add>()
      .set(Add::self, std::move(self))
      .set(Add::other, std::move(other))
      .set(Add::alpha, std::move(alpha))
      .take();
}

// ---- add-below-permute ----------------------------------------------------------------------------

std::vector<int64_t> inversePermutation(const std::vector<int64_t>& dims) {
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> inverse(dims.size(), 0);
  for (int64_t k = 0; k < rank; ++k) inverse[static_cast<size_t>(dims[static_cast<size_t>(k)] < 0 ? dims[static_cast<size_t>(k)] + rank : dims[static_cast<size_t>(k)])] = k;
  return inverse;
}

const Node* permuteOf(const Graph& g, const Arg& a) {
  const Node* p = u::producerOf(g, a);
  if (!p || p->op != Permute::kOp || !ir::hasOperands<Permute>(*p) || !operand(*p, Permute::self).isValue() ||
      !operand(*p, Permute::dims).asIntList().isOk()) {
    return nullptr;
  }
  return p;
}

// Match.operand: -1 when both operands are permutes (the inner add takes the place of one the add
// alone reads, Match.consumer, or a free slot there); otherwise the free slot for permute(r, p^-1),
// with Match.consumer the permute of the conv/linear output, whose place the inner add takes.
constexpr int kBothPermuted = -1;

std::optional<Match> matchAddBelowPermute(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.op != Add::kOp || n.overload != "Tensor" || !ir::hasOperands<Add>(n) || !u::numberArg(operand(n, Add::alpha))) {
    return std::nullopt;
  }
  const Node* pa = permuteOf(g, operand(n, Add::self));
  const Node* pb = permuteOf(g, operand(n, Add::other));
  if (!pa && !pb) return std::nullopt;
  // The sum's layout becomes the permuted layout of the inner add, whatever ATen or a fused kernel
  // gives that: every reader must take any layout.
  std::string layout;
  if (pa && pb && *operand(*pa, Permute::dims).asIntList() == *operand(*pb, Permute::dims).asIntList()) {
    const ValueId a = u::valueOf(operand(*pa, Permute::self)), b = u::valueOf(operand(*pb, Permute::self));
    const auto* sa = u::staticShape(g, a);
    const auto* sb = u::staticShape(g, b);
    if (!sa || !sb || *sa != *sb) {
      return u::why(whyNot, "the permutes' inputs do not have one static shape (broadcasting stays above the permute)"),
             std::nullopt;
    }
    if (g.value(a).dtype == ir::DType::Undefined || g.value(a).dtype != g.value(b).dtype) {
      return u::why(whyNot, "the permutes' inputs do not have one known dtype"), std::nullopt;
    }
    if (!u::readersAcceptAnyLayout(g, n.outputs[0], &layout)) return u::why(whyNot, "the sum's readers: " + layout), std::nullopt;
    auto definedBefore = [&](ValueId v, NodeId position) { return g.value(v).producer < position; };
    NodeId slot = -1;
    if (u::hasSingleUse(g, pb->outputs[0]) && definedBefore(a, pb->id)) slot = pb->id;
    else if (u::hasSingleUse(g, pa->outputs[0]) && definedBefore(b, pa->id)) slot = pa->id;
    else slot = ir::findFreeSlot(g, std::max(g.value(a).producer, g.value(b).producer), id);
    if (slot < 0) return u::why(whyNot, "no node slot between the permutes' inputs and the add"), std::nullopt;
    return Match{id, slot, kBothPermuted};
  }
  // One permute, of a conv/linear output that could take the other operand as its residual: the
  // other operand is permuted back (a view) so that the add is the fused op's.
  for (int k = 0; k < 2; ++k) {
    const Node* p = k == 0 ? pa : pb;
    if (!p || !u::hasSingleUse(g, p->outputs[0])) continue;
    const Node* fused = u::singleUseFusedProducer(g, operand(*p, Permute::self));
    if (!fused || hasSumPostOp(*fused)) continue;
    const Arg& other = otherAddOperand(n, k);
    if (!other.isValue() || g.value(u::valueOf(other)).type != ir::ValueType::Tensor) continue;
    // The other operand a conv/linear output itself: residual-add-sum-postop takes the add as it
    // is. (Rewritten, add(permute(r, p^-1), y) would match here again the other way round.)
    if (u::singleUseFusedProducer(g, other)) continue;
    const ValueId r = u::valueOf(other), y = u::valueOf(operand(*p, Permute::self));
    const auto* sr = u::staticShape(g, r);
    const auto* sp = u::staticShape(g, p->outputs[0]);
    if (!sr || !sp || *sr != *sp) {
      u::why(whyNot, "the other operand does not have the permute's static shape");
      continue;
    }
    if (g.value(r).dtype == ir::DType::Undefined || g.value(r).dtype != g.value(y).dtype) {
      u::why(whyNot, "the other operand's dtype is not the conv/linear output's");
      continue;
    }
    if (!u::readersAcceptAnyLayout(g, n.outputs[0], &layout)) return u::why(whyNot, "the sum's readers: " + layout), std::nullopt;
    const NodeId slot = ir::findFreeSlot(g, g.value(r).producer, p->id);
    if (slot < 0) {
      u::why(whyNot, "no free node slot for the other operand's permute before the conv/linear's");
      continue;
    }
    return Match{id, p->id, static_cast<int>(slot)};
  }
  return std::nullopt;
}

Status rewriteAddBelowPermute(Graph& g, const Match& m, FusionRecord&) {
  const Node add = g.node(m.anchor);
  const Arg alpha = operand(add, Add::alpha);
  Arg dims, innerA, innerB;
  if (m.operand == kBothPermuted) {
    const Node& pa = *u::producerOf(g, operand(add, Add::self));
    const Node& pb = *u::producerOf(g, operand(add, Add::other));
    dims = operand(pa, Permute::dims);
    innerA = operand(pa, Permute::self);
    innerB = operand(pb, Permute::self);
  } else {
    const Node& p = g.node(m.consumer);
    const bool permutedFirst = u::valueOf(operand(add, Add::self)) == p.outputs[0];
    const Arg r = operand(add, permutedFirst ? Add::other : Add::self);
    dims = operand(p, Permute::dims);
    const std::vector<int64_t> inverse = inversePermutation(*dims.asIntList());
    VF_ASSIGN_OR_RETURN(ValueId rp, ir::placeInSlot(g, static_cast<NodeId>(m.operand), std::string(Permute::kOp), "",
                                                     ir::OperandsOf<Permute>()
                                                         .set(Permute::self, r)
                                                         .set(Permute::dims, Arg::intList(inverse))
                                                         .take(),
                                                     ir::ValueType::Tensor));
    const Arg& y = operand(p, Permute::self);
    g.mutableValue(rp).setShape(*u::staticShape(g, u::valueOf(y)));
    g.mutableValue(rp).dtype = g.value(u::valueOf(y)).dtype;
    innerA = permutedFirst ? y : Arg::value(rp);
    innerB = permutedFirst ? Arg::value(rp) : y;
  }
  const ValueId av = u::valueOf(innerA);
  const std::vector<int64_t> shape = *u::staticShape(g, av);
  const ir::DType dtype = g.value(av).dtype;
  ValueId inner = ir::kNoValue;
  if (!ir::isFreeSlot(g, m.consumer)) {
    // A permute only the add read becomes the inner add and keeps its output value.
    Node& slot = g.mutableNode(m.consumer);
    slot.op = Add::kOp;
    slot.overload = "Tensor";
    slot.args = addOperands(innerA, innerB, alpha);
    inner = slot.outputs[0];
  } else {
    VF_ASSIGN_OR_RETURN(inner, ir::placeInSlot(g, m.consumer, std::string(Add::kOp), "Tensor",
                                               addOperands(innerA, innerB, alpha), ir::ValueType::Tensor));
  }
  g.mutableValue(inner).setShape(shape);
  g.mutableValue(inner).dtype = dtype;
  Node& outer = g.mutableNode(m.anchor);
  outer.op = Permute::kOp;
  outer.overload = "";
  outer.args = ir::OperandsOf<Permute>().set(Permute::self, Arg::value(inner)).set(Permute::dims, dims).take();
  return Status::ok();
}

enum class PermuteAddBug { None, PermutationsDiffer, InversePermutation, AlphaOnFirst, OtherNotPermutedBack };

// Index level with a 3-cycle p (its inverse differs from it): the add of two equally permuted
// [2, 3, 2] tensors is the permute of their add, alpha on the second operand; an add of r and a
// permuted tensor is the permute of the add of r permuted back, either operand order.
Obligation addBelowPermute(PermuteAddBug bug) {
  ObligationBuilder ob("add-below-permute");
  const std::vector<int64_t> dims = {2, 0, 1};
  const std::vector<int64_t> inverse = inversePermutation(dims);
  const sem::ElementTensor a = sem::ElementTensor::variables("a", {2, 3, 2});
  const sem::ElementTensor b = sem::ElementTensor::variables("b", {2, 3, 2});
  const sem::ElementTensor r = sem::ElementTensor::variables("r", {2, 2, 2});
  const Expr alpha = ob.var("add.alpha");
  const std::vector<int64_t> outer = bug == PermuteAddBug::InversePermutation ? inverse : dims;
  const sem::ElementTensor both =
      sem::broadcastAdd(sem::permute(a, dims), sem::permute(b, bug == PermuteAddBug::PermutationsDiffer ? std::vector<int64_t>{0, 2, 1} : dims), alpha);
  const sem::ElementTensor inner = bug == PermuteAddBug::AlphaOnFirst ? sem::broadcastAdd(b, a, alpha) : sem::broadcastAdd(a, b, alpha);
  sem::proveElementwise(ob, "both permuted", both, sem::permute(inner, outer));
  // One operand permuted: on [2, 2, 2] cubes, so that r permuted forward (the mutant) is well
  // formed and differs only in which element meets which.
  const sem::ElementTensor c = sem::ElementTensor::variables("c", {2, 2, 2});
  const sem::ElementTensor back = sem::permute(r, bug == PermuteAddBug::OtherNotPermutedBack ? dims : inverse);
  sem::proveElementwise(ob, "second permuted", sem::broadcastAdd(r, sem::permute(c, dims), alpha),
                        sem::permute(sem::broadcastAdd(back, c, alpha), outer));
  sem::proveElementwise(ob, "first permuted", sem::broadcastAdd(sem::permute(c, dims), r, alpha),
                        sem::permute(sem::broadcastAdd(c, back, alpha), outer));
  return ob.build();
}

bool sameKnownShape(const Graph& g, ValueId a, ValueId b) {
  const auto* sa = u::knownShape(g, a);
  const auto* sb = u::knownShape(g, b);
  if (!sa || !sb || sa->size() != sb->size()) return false;
  for (size_t d = 0; d < sa->size(); ++d) {
    // Symbolic sizes are checked again at run time (the executor falls back to ATen on mismatch).
    if ((*sa)[d] >= 0 && (*sb)[d] >= 0 && (*sa)[d] != (*sb)[d]) return false;
  }
  return true;
}

std::optional<Match> matchResidualAdd(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (n.op != Add::kOp || n.overload != "Tensor" || !ir::hasOperands<Add>(n)) return std::nullopt;
  auto alpha = u::numberArg(operand(n, Add::alpha));
  if (!alpha) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const Node* p = u::singleUseFusedProducer(g, addOperand(n, k));
    if (!p) continue;
    const Arg& other = otherAddOperand(n, k);
    if (!other.isValue() || g.value(u::valueOf(other)).type != ir::ValueType::Tensor) continue;
    // y + alpha * r is a sum post-op with scale alpha; r + alpha * y only when alpha == 1.
    if (k == 1 && *alpha != 1.0) {
      u::why(whyNot, "r + alpha*y with alpha != 1 scales the conv/linear output, not the residual");
      continue;
    }
    if (hasSumPostOp(*p)) {
      u::why(whyNot, "the conv/linear already has a residual (one sum post-op per op)");
      continue;
    }
    if (!sameKnownShape(g, p->outputs[0], u::valueOf(other))) {
      u::why(whyNot, "residual shape differs from (or is not known to equal) the output shape");
      continue;
    }
    return Match{p->id, id, k};
  }
  return std::nullopt;
}

Status rewriteResidualAdd(Graph& g, const Match& m, FusionRecord&) {
  // The fused op moves to the add's position: the residual may be computed after the producer,
  // and every input of the producer is defined before it, hence before the add.
  const Node producer = g.node(m.anchor);
  Node& add = g.mutableNode(m.consumer);
  const Arg residual = otherAddOperand(add, m.operand);
  const double scale = m.operand == 0 ? *u::numberArg(operand(add, Add::alpha)) : 1.0;
  VF_ASSIGN_OR_RETURN(std::vector<PostOpSpec> chain, fusedPostOps(producer));
  chain.push_back(PostOpSpec{"sum", {scale}});
  add.op = producer.op;
  add.overload = producer.overload;
  add.args = producer.args;
  setFusedPostOps(add, chain);
  add.args.push_back(residual);  // the sum's residual, after the fixed operands (variadicOperands)
  g.eraseNode(m.anchor);
  return Status::ok();
}

enum class SumBug { None, WrongScale, SwappedAlphaUnchecked };

// add(y, z, alpha) = y + alpha*z = sum post-op with dst_prev = z (the residual), scale = alpha.
// add(z, y, alpha') = z + alpha'*y is rewritten with scale 1, under the guard alpha' == 1.
Obligation residualSum(SumBug bug) {
  ObligationBuilder ob("residual-add-sum-postop");
  Expr y = ob.var("conv.out[o]"), z = ob.var("residual[o]"), alpha = ob.var("add.alpha");
  Expr swappedAlpha = ob.var("add.alpha[residual-first]");
  if (bug != SumBug::SwappedAlphaUnchecked) ob.assume(swappedAlpha == 1);
  ob.prove("out[o]", sem::add(y, z, alpha), sem::onednn::sumPostOp(z, y, bug == SumBug::WrongScale ? Expr(1) : alpha));
  ob.prove("out[o] (residual first)", sem::add(z, y, swappedAlpha), sem::onednn::sumPostOp(z, y, 1));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> residualAdd() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "add-below-permute",
      .summary = "add of permuted tensors -> permute of their add (the conv/linear's residual)",
      .math = "add(permute(a,p), permute(b,p), alpha) = permute(add(a, b, alpha), p); "
              "add(r, permute(y,p), alpha) = permute(add(permute(r,p^-1), y, alpha), p), either order",
      .phase = Phase::kFusion,
      .anchors = {"aten::add"},
      // add.Tensor(permute(%a, p), permute(%b, p), alpha) with %a, %b of one static shape and dtype;
      // or add.Tensor of %r and permute(%y, p) (either order), %y a single-use conv/linear output
      // without a residual yet, read by nothing but that permute, %r of the permute's shape and
      // %y's dtype. Every reader of the sum takes any layout. The inner add takes the place of a
      // permute only the add read (or a free slot); the add becomes the permute.
      .match = matchAddBelowPermute,
      .rewrite = rewriteAddBelowPermute,
      .obligation = u::bindNoModel(addBelowPermute, PermuteAddBug::None),
      .mutants = {{"permutations-differ", "the second permute's dims unchecked", u::bindNoModel(addBelowPermute, PermuteAddBug::PermutationsDiffer)},
                  {"inverse-permutation", "the sum permuted by the inverse", u::bindNoModel(addBelowPermute, PermuteAddBug::InversePermutation)},
                  {"alpha-on-first-operand", "add(b, a, alpha) inside", u::bindNoModel(addBelowPermute, PermuteAddBug::AlphaOnFirst)},
                  {"other-permuted-forward", "r permuted by p instead of p^-1", u::bindNoModel(addBelowPermute, PermuteAddBug::OtherNotPermutedBack)}},
  });
  rules.push_back({
      .id = "residual-add-sum-postop",
      .summary = "conv/linear + residual -> sum post-op",
      .math = "add(y, z, alpha) = sum post-op: alpha*z + y (dst_prev = z); add(z, y, 1) likewise",
      .phase = Phase::kFusion,
      .anchors = {"aten::add"},
      // add.Tensor(%y, %z, alpha) where %y is a single-use conv/linear with no sum post-op yet and
      // %z a tensor of the same known shape (or %z first with alpha == 1).
      .match = matchResidualAdd,
      .rewrite = rewriteResidualAdd,
      .obligation = u::bindNoModel(residualSum, SumBug::None),
      .mutants = {{"sum-scale-wrong", "sum post-op scale 1 instead of alpha", u::bindNoModel(residualSum, SumBug::WrongScale)},
                  {"residual-first-alpha-unchecked", "z + alpha*y fused as sum(1) for any alpha",
                   u::bindNoModel(residualSum, SumBug::SwappedAlphaUnchecked)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
