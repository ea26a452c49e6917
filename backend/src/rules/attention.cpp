// Attention recognition: the eager attention that models write out (transformers'
// eager_attention_forward, our bench's BertSelfAttention) becomes one scaled-dot-product-attention
// op, which runs on ATen's fused CPU kernel.
//
//   attention-to-sdpa
//     view(bmm(view(expand(softmax(view(bmm(view(expand(q)), view(expand(k^T))))*c + mask, -1)),
//               view(expand(v))), [B,H,S,Dv])
//       = _scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, false, attn_mask=mask, scale=c)[0]
//
// q [B,H,S,D], k [B,H,KV,D], v [B,H,KV,Dv] are whatever values the matmuls read (through clones,
// same-shape expands and views, which do not change values); k^T is permute(k, [0,1,3,2]) or
// transpose(k, -2, -1). The scale is a number (mul by c: scale c; div by c: scale 1/c; none: 1);
// the mask an additive float32 tensor broadcastable to [B,H,S,KV] whose add does not broadcast the
// scores; softmax over the last axis (_softmax(x, -1 | 3, false)). Eval dropout arrives as a clone,
// a training dropout is not an identity and stops the match. Shapes must be static (symbolic sizes:
// no rewrite), the score chain (bmm .. bmm) read only by itself, and every reader of the result must
// accept the kernel's output layout ([B,S,H,D] memory, permuted to [B,H,S,D]; strides.h).
//
// The result node (the view after the second bmm) becomes the SDPA op with a second output, the
// logsumexp [B,H,S] nothing reads; the matmuls, softmax and scale/mask ops go with dead code.
#include <cmath>
#include <functional>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "rules/strides.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/verify/semantics.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::selfOperand;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::sem::ElementTensor;
namespace sem = verify::sem;
namespace u = util;

constexpr const char* kSdpaOp = "aten::_scaled_dot_product_flash_attention_for_cpu";
using Sdpa = ir::FlashAttentionCpu;  // kSdpaOp's operands

bool isViewOp(const Node* n) {
  return n && (n->op == "aten::view" || n->op == "aten::reshape" || n->op == "aten::_unsafe_view") &&
         n->args.size() == 2 && selfOperand(*n).isValue() && n->outputs.size() == 1;
}

const std::vector<int64_t>* shapeOf(const Graph& g, ValueId v) { return u::staticShape(g, v); }

/// Follows value-preserving ops back from \p v: clone (any format), alias/detach, eval dropout,
/// and expand/view/reshape to the same shape. \p passed collects the nodes walked over.
ValueId throughIdentities(const Graph& g, ValueId v, std::vector<NodeId>* passed) {
  for (int depth = 0; depth < 8; ++depth) {
    const Node* p = u::producerOf(g, Arg::value(v));
    if (!p || p->args.empty() || !selfOperand(*p).isValue() || p->outputs.size() != 1) return v;
    const ValueId in = u::valueOf(selfOperand(*p));
    bool identity = p->op == "aten::clone" || p->op == "aten::alias" || p->op == "aten::detach";
    if (p->op == "aten::dropout" && ir::hasOperands<ir::Dropout>(*p)) {
      const Arg& train = operand(*p, ir::Dropout::train);
      if (train.kind == Arg::Kind::Bool && train.i == 0) identity = true;
    }
    if ((p->op == "aten::expand" || isViewOp(p)) && shapeOf(g, in) && shapeOf(g, v) && *shapeOf(g, in) == *shapeOf(g, v)) {
      identity = true;
    }
    if (!identity) return v;
    if (passed) passed->push_back(p->id);
    v = in;
  }
  return v;
}

/// view(X, [B*H, a, b]) of a [B, H, a, b] value (through identities): X's identity-stripped source.
std::optional<ValueId> unflattenedOperand(const Graph& g, const Arg& flat, std::vector<NodeId>* passed) {
  if (!flat.isValue()) return std::nullopt;
  const Node* v = u::producerOf(g, flat);
  if (!isViewOp(v)) return std::nullopt;
  const auto* out = shapeOf(g, u::valueOf(flat));
  const auto* in = shapeOf(g, u::valueOf(selfOperand(*v)));
  if (!out || !in || out->size() != 3 || in->size() != 4) return std::nullopt;
  if ((*out)[0] != (*in)[0] * (*in)[1] || (*out)[1] != (*in)[2] || (*out)[2] != (*in)[3]) return std::nullopt;
  if (passed) passed->push_back(v->id);
  return throughIdentities(g, u::valueOf(selfOperand(*v)), passed);
}

/// Whether \p v is provably a float32 tensor (the IR has no dtypes: from its producers).
bool provablyFloat32(const Graph& g, const Arg& a, int depth = 0) {
  if (depth > 12) return false;
  if (a.isConstant()) return g.constants()[static_cast<size_t>(a.i)].dtype == ir::DType::Float32;
  const Node* p = u::producerOf(g, a);
  if (!p) return false;
  const std::string& op = p->op;
  static const std::vector<std::string> creation = {"aten::full", "aten::scalar_tensor", "aten::_to_copy",
                                                    "aten::zeros", "aten::ones", "aten::empty", "aten::full_like",
                                                    "aten::zeros_like", "aten::ones_like"};
  if (std::find(creation.begin(), creation.end(), op) != creation.end()) {
    for (const Arg& x : p->args) {
      if (x.kind == Arg::Kind::DTypeTag) return x.i == static_cast<int64_t>(ir::DType::Float32);
    }
    return false;
  }
  static const std::vector<std::string> sameDtype = {
      "aten::expand", "aten::view",    "aten::reshape", "aten::_unsafe_view", "aten::slice", "aten::unsqueeze",
      "aten::squeeze", "aten::permute", "aten::clone",  "aten::alias",        "aten::detach", "aten::select",
      "aten::neg",     "aten::transpose"};
  if (std::find(sameDtype.begin(), sameDtype.end(), op) != sameDtype.end()) return provablyFloat32(g, selfOperand(*p), depth + 1);
  if (op == "aten::embedding") return provablyFloat32(g, operand(*p, ir::Embedding::weight), depth + 1);  // the table's dtype
  if (op == "aten::where" && p->overload == "self" && ir::hasOperands<ir::Where>(*p)) {
    return provablyFloat32(g, operand(*p, ir::Where::self), depth + 1) &&
           provablyFloat32(g, operand(*p, ir::Where::other), depth + 1);
  }
  if ((op == "aten::add" || op == "aten::sub" || op == "aten::mul") && ir::hasAtLeastOperands<ir::Binary>(*p)) {
    const Arg& other = operand(*p, ir::Binary::other);
    const bool a0 = provablyFloat32(g, operand(*p, ir::Binary::self), depth + 1);
    const bool a1 = provablyFloat32(g, other, depth + 1) || u::numberArg(other).has_value();
    return a0 && a1;
  }
  return false;
}

struct Attention {
  ValueId q = ir::kNoValue, k = ir::kNoValue, v = ir::kNoValue;
  Arg mask = Arg::none();
  /// A second additive mask (scores + mask + outerMask): the rewrite adds the two at combineAt.
  Arg outerMask = Arg::none();
  NodeId combineAt = -1;
  double scale = 1.0;
  int64_t b = 0, h = 0, s = 0, kv = 0, d = 0, dv = 0;
  NodeId result = -1;  ///< the view after the second bmm: becomes the SDPA op
};

#define VF_NO(reason) return (u::why(whyNot, reason), std::nullopt)

/// The whole pattern rooted at the second bmm \p id, or nullopt (a reason once it is attention).
std::optional<Attention> matchAttentionAt(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& pv = g.node(id);
  // pv: the anchor, an aten::bmm.
  if (!ir::hasOperands<ir::Bmm>(pv) || pv.outputs.size() != 1) return std::nullopt;
  // P @ V with P = softmax(...) (through a view of identities): otherwise not attention.
  std::vector<NodeId> scoreChain = {id};
  const Node* pView = u::producerOf(g, operand(pv, ir::Bmm::self));
  if (!isViewOp(pView)) return std::nullopt;
  std::optional<ValueId> probs = unflattenedOperand(g, operand(pv, ir::Bmm::self), &scoreChain);
  if (!probs) {
    // Attention with shapes the side conditions cannot use (symbolic sizes): say so.
    Arg a = operand(pv, ir::Bmm::self);
    for (int depth = 0; depth < 6; ++depth) {
      const Node* p = u::producerOf(g, a);
      if (!p || p->args.empty()) break;
      if (p->op == "aten::_softmax" || p->op == "aten::softmax") {
        VF_NO("attention whose shapes are not static (dynamic shapes): the views and the contraction cannot be checked");
      }
      a = selfOperand(*p);
    }
    return std::nullopt;
  }
  const Node* softmax = u::producerOf(g, Arg::value(*probs));
  const bool isSoftmax = softmax && ((softmax->op == "aten::_softmax" && ir::hasOperands<ir::Softmax>(*softmax)) ||
                                     (softmax->op == "aten::softmax" && softmax->overload == "int"));
  if (!isSoftmax) return std::nullopt;
  scoreChain.push_back(softmax->id);
  const Node* qk = nullptr;  // found below, through scale and mask
  Attention at;
  // --- from here on it is attention: every failure has a reason.
  const auto* probShape = shapeOf(g, *probs);
  if (!probShape || probShape->size() != 4) VF_NO("attention probabilities without a static 4-d shape (dynamic shapes)");
  const int64_t rank = 4;
  // _softmax(self, dim, half_to_float) or softmax.int(self, dim, dtype).
  const bool internalSoftmax = softmax->op == "aten::_softmax";
  const Arg& softmaxDim = internalSoftmax ? operand(*softmax, ir::Softmax::dim) : operand(*softmax, ir::SoftmaxInt::dim);
  if (softmaxDim.kind != Arg::Kind::Int || (softmaxDim.i != -1 && softmaxDim.i != rank - 1)) {
    VF_NO("softmax is not over the last axis");
  }
  if (internalSoftmax) {
    const Arg& halfToFloat = operand(*softmax, ir::Softmax::half_to_float);
    if (halfToFloat.kind != Arg::Kind::Bool || halfToFloat.i != 0) VF_NO("softmax with half_to_float");
  }
  if (!internalSoftmax && ir::hasAtLeastOperands<ir::SoftmaxInt>(*softmax) &&
      operand(*softmax, ir::SoftmaxInt::dtype).kind != Arg::Kind::None) {
    VF_NO("softmax with a dtype");
  }
  // Scores: [mask +] [scale *] view(bmm(Q, K^T), [B,H,S,KV]).
  Arg scores = selfOperand(*softmax);
  const Node* n = u::producerOf(g, scores);
  if (n && n->op == "aten::where") VF_NO("a boolean where(mask, scores, -inf) mask (only additive float masks are recognized)");
  // Up to two additive masks, outermost first (T5: scores + position_bias + padding mask).
  std::vector<Arg> masks;
  while (n && n->op == "aten::add" && n->overload == "Tensor" && ir::hasOperands<ir::Add>(*n) && masks.size() < 2) {
    auto alpha = u::numberArg(operand(*n, ir::Add::alpha));
    if (!alpha || *alpha != 1.0) VF_NO("the mask add has alpha != 1");
    // Which operand holds the scores: (a scale of) view(bmm(...)), or the inner mask add.
    std::function<bool(const Arg&, bool)> isScores = [&](const Arg& a, bool innerAdd) {
      const Node* p = u::producerOf(g, a);
      if (innerAdd && p && p->op == "aten::add" && p->overload == "Tensor" && ir::hasOperands<ir::Add>(*p)) {
        return isScores(operand(*p, ir::Add::self), false) || isScores(operand(*p, ir::Add::other), false);
      }
      if (p && (p->op == "aten::mul" || p->op == "aten::div") && ir::hasOperands<ir::Binary>(*p)) {
        // mul(Tensor, Tensor) or div(Tensor, Tensor): the scores and a number, either way round.
        const bool selfIsTensor = operand(*p, ir::Binary::self).isValue();
        const Arg& number = operand(*p, selfIsTensor ? ir::Binary::other : ir::Binary::self);
        if (!u::numberArg(number)) return false;
        p = u::producerOf(g, operand(*p, selfIsTensor ? ir::Binary::self : ir::Binary::other));
      }
      if (!isViewOp(p)) return false;
      const Node* mm = u::producerOf(g, selfOperand(*p));
      return mm && mm->op == "aten::bmm";
    };
    // The add's operand that holds the scores (self first); the other is the mask.
    std::optional<ir::Add::Operand> scoresAt;
    for (ir::Add::Operand slot : {ir::Add::self, ir::Add::other}) {
      if (!scoresAt && isScores(operand(*n, slot), false)) scoresAt = slot;
    }
    for (ir::Add::Operand slot : {ir::Add::self, ir::Add::other}) {
      if (!scoresAt && masks.empty() && isScores(operand(*n, slot), true)) scoresAt = slot;
    }
    if (!scoresAt) VF_NO("neither operand of the add before the softmax is the scaled q @ k^T");
    const Arg mask = operand(*n, *scoresAt == ir::Add::self ? ir::Add::other : ir::Add::self);
    masks.push_back(mask);
    const auto* addShape = shapeOf(g, n->outputs[0]);
    scoreChain.push_back(n->id);
    scores = operand(*n, *scoresAt);
    n = u::producerOf(g, scores);
    if (!mask.isValue()) VF_NO("the mask is not a tensor");
    const auto* maskShape = shapeOf(g, u::valueOf(mask));
    const auto* sumShape = shapeOf(g, n ? n->outputs[0] : ir::kNoValue);
    if (!maskShape || !sumShape || !addShape || sumShape->size() != 4 || maskShape->size() > 4) {
      VF_NO("the mask has no static shape of rank <= 4");
    }
    if (*addShape != *sumShape) VF_NO("the mask add broadcasts the scores");
    for (size_t d = 0; d < maskShape->size(); ++d) {
      const int64_t m = (*maskShape)[d], sdim = (*sumShape)[4 - maskShape->size() + d];
      if (m != 1 && m != sdim) VF_NO("the mask does not broadcast to [B, H, S, KV]");
    }
    if (!provablyFloat32(g, mask)) VF_NO("the mask is not provably a float32 tensor (a bool mask would be added as 0/1)");
  }
  if (masks.size() == 1) at.mask = masks[0];
  if (masks.size() == 2) {
    // SDPA takes one mask: inner + outer, computed by the outer add's node (in the score chain,
    // which dies): rewritten in place, it reads two values defined before it.
    at.mask = masks[1];
    at.outerMask = masks[0];
    at.combineAt = scoreChain[scoreChain.size() - 2];
  }
  if (n && (n->op == "aten::mul" || n->op == "aten::div") && n->overload == "Tensor" && ir::hasOperands<ir::Binary>(*n)) {
    const bool isDiv = n->op == "aten::div";
    // mul(Tensor, Tensor) or div(Tensor, Tensor): which operand is the scores, and the number.
    std::optional<ir::Binary::Operand> tensorAt;
    std::optional<double> c;
    for (ir::Binary::Operand slot : {ir::Binary::self, ir::Binary::other}) {
      if (operand(*n, slot).isValue()) tensorAt = slot;
      else c = u::numberArg(operand(*n, slot));
    }
    if (!tensorAt || !c || (isDiv && *tensorAt != ir::Binary::self)) VF_NO("the scale is not a number");
    if (!std::isfinite(*c) || *c == 0.0) VF_NO("the scale is zero or not finite");
    at.scale = isDiv ? 1.0 / *c : *c;
    scoreChain.push_back(n->id);
    scores = operand(*n, *tensorAt);
    n = u::producerOf(g, scores);
  }
  if (!isViewOp(n)) VF_NO("the softmax input is not view(bmm(q, k^T)) (after an optional scale and mask)");
  scoreChain.push_back(n->id);
  qk = u::producerOf(g, selfOperand(*n));
  if (!qk || qk->op != "aten::bmm" || !ir::hasOperands<ir::Bmm>(*qk)) VF_NO("the softmax input is not view(bmm(q, k^T))");
  scoreChain.push_back(qk->id);
  const auto* qkShape = shapeOf(g, qk->outputs[0]);
  const auto* scoreShape = shapeOf(g, n->outputs[0]);
  if (!qkShape || !scoreShape || scoreShape->size() != 4 || qkShape->size() != 3 ||
      (*qkShape)[0] != (*scoreShape)[0] * (*scoreShape)[1] || (*qkShape)[1] != (*scoreShape)[2] ||
      (*qkShape)[2] != (*scoreShape)[3]) {
    VF_NO("the scores view is not [B*H, S, KV] -> [B, H, S, KV]");
  }
  // Operands: q, k^T, v (each a [B*H, ., .] view of a [B, H, ., .] value).
  std::vector<NodeId> operandNodes;
  auto q = unflattenedOperand(g, operand(*qk, ir::Bmm::self), &operandNodes);
  auto kt = unflattenedOperand(g, operand(*qk, ir::Bmm::mat2), &operandNodes);
  auto v = unflattenedOperand(g, operand(pv, ir::Bmm::mat2), &operandNodes);
  if (!q || !kt || !v) VF_NO("q, k^T or v is not a [B*H, ., .] view of a [B, H, ., .] value");
  const Node* transpose = u::producerOf(g, Arg::value(*kt));
  bool isTranspose = false;
  if (transpose && transpose->op == "aten::permute" && ir::hasOperands<ir::Permute>(*transpose)) {
    auto dims = operand(*transpose, ir::Permute::dims).asIntList();
    isTranspose = dims.isOk() && *dims == std::vector<int64_t>{0, 1, 3, 2};
  } else if (transpose && transpose->op == "aten::transpose" && ir::hasOperands<ir::Transpose>(*transpose) &&
             operand(*transpose, ir::Transpose::dim0).kind == Arg::Kind::Int &&
             operand(*transpose, ir::Transpose::dim1).kind == Arg::Kind::Int) {
    auto norm = [](int64_t d) { return d < 0 ? d + 4 : d; };
    const int64_t a = norm(operand(*transpose, ir::Transpose::dim0).i);
    const int64_t b = norm(operand(*transpose, ir::Transpose::dim1).i);
    isTranspose = (a == 2 && b == 3) || (a == 3 && b == 2);
  }
  if (!isTranspose || !selfOperand(*transpose).isValue()) VF_NO("the key operand is not k transposed in its last two dims");
  at.q = *q;
  at.k = u::valueOf(selfOperand(*transpose));
  at.v = *v;
  const auto *qs = shapeOf(g, at.q), *ks = shapeOf(g, at.k), *vs = shapeOf(g, at.v);
  if (!qs || !ks || !vs || qs->size() != 4 || ks->size() != 4 || vs->size() != 4) VF_NO("q, k, v are not static 4-d");
  at.b = (*qs)[0], at.h = (*qs)[1], at.s = (*qs)[2], at.d = (*qs)[3];
  at.kv = (*ks)[2];
  at.dv = (*vs)[3];
  if ((*ks)[0] != at.b || (*ks)[1] != at.h || (*ks)[3] != at.d || (*vs)[0] != at.b || (*vs)[1] != at.h ||
      (*vs)[2] != at.kv) {
    VF_NO("q [B,H,S,D], k [B,H,KV,D], v [B,H,KV,Dv] disagree (q @ k^T must contract the head dim)");
  }
  if (*probShape != std::vector<int64_t>{at.b, at.h, at.s, at.kv}) VF_NO("the probabilities are not [B, H, S, KV]");
  // The result: the second bmm's only reader views it back to [B, H, S, Dv].
  const auto* pvShape = shapeOf(g, pv.outputs[0]);
  if (!pvShape || *pvShape != std::vector<int64_t>{at.b * at.h, at.s, at.dv}) VF_NO("probs @ v is not [B*H, S, Dv]");
  if (!u::hasSingleUse(g, pv.outputs[0])) VF_NO("probs @ v has other readers than its [B, H, S, Dv] view");
  const Node& result = g.node(g.users(pv.outputs[0])[0]);
  if (!isViewOp(&result) || !shapeOf(g, result.outputs[0]) ||
      *shapeOf(g, result.outputs[0]) != std::vector<int64_t>{at.b, at.h, at.s, at.dv}) {
    VF_NO("probs @ v is not viewed back to [B, H, S, Dv]");
  }
  at.result = result.id;
  // The score chain dies with the rewrite: nothing else may read it (output_attentions would).
  for (NodeId c : scoreChain) {
    if (!u::hasSingleUse(g, g.node(c).outputs[0])) VF_NO("the attention scores or probabilities are read elsewhere");
  }
  // The kernel's output is [B, S, H, Dv] memory seen as [B, H, S, Dv].
  const std::vector<int64_t> strides = {at.s * at.h * at.dv, at.dv, at.h * at.dv, 1};
  std::string layout;
  if (!u::readersAcceptLayout(g, result.outputs[0], strides, &layout)) VF_NO("the attention output's readers: " + layout);
  return at;
}

#undef VF_NO

std::optional<Match> matchAttention(const Graph& g, NodeId id, std::string* whyNot) {
  auto at = matchAttentionAt(g, id, whyNot);
  if (!at) return std::nullopt;
  return Match{id, at->result, 0};
}

Status rewriteAttention(Graph& g, const Match& m, FusionRecord&) {
  auto at = matchAttentionAt(g, m.anchor, nullptr);
  if (!at) return internalError("attention no longer matches");
  Arg mask = at->mask;
  if (at->combineAt >= 0) {
    // mask + outerMask, in the outer add's node (its old readers, the softmax chain, die with the
    // rewrite); the sum broadcasts the two masks.
    Node& add = g.mutableNode(at->combineAt);
    add.args = ir::OperandsOf<ir::Add>()
                   .set(ir::Add::self, at->mask)
                   .set(ir::Add::other, at->outerMask)
                   .set(ir::Add::alpha, Arg::integer(1))
                   .take();
    const auto& a = *shapeOf(g, u::valueOf(at->mask));
    const auto& b = *shapeOf(g, u::valueOf(at->outerMask));
    std::vector<int64_t> sizes(std::max(a.size(), b.size()), 1);
    for (size_t d = 0; d < sizes.size(); ++d) {
      const int64_t ad = d + a.size() >= sizes.size() ? a[d + a.size() - sizes.size()] : 1;
      const int64_t bd = d + b.size() >= sizes.size() ? b[d + b.size() - sizes.size()] : 1;
      sizes[d] = std::max(ad, bd);
    }
    g.mutableValue(add.outputs[0]).setShape(sizes);
    mask = Arg::value(add.outputs[0]);
  }
  Node& n = g.mutableNode(at->result);
  n.op = kSdpaOp;
  n.overload = "";
  // -> (output, logsumexp)
  n.args = ir::OperandsOf<Sdpa>()
               .set(Sdpa::query, Arg::value(at->q))
               .set(Sdpa::key, Arg::value(at->k))
               .set(Sdpa::value, Arg::value(at->v))
               .set(Sdpa::dropout_p, Arg::real(0.0))
               .set(Sdpa::is_causal, Arg::boolean(false))
               .set(Sdpa::attn_mask, mask)
               .set(Sdpa::scale, Arg::real(at->scale))
               .take();
  const ValueId lse = ir::addNodeOutput(g, at->result, ir::ValueType::Tensor);
  g.mutableValue(lse).setShape({at->b, at->h, at->s});
  return Status::ok();
}

// ---- obligation -------------------------------------------------------------------------------------

enum class AttnBug {
  None, ScaleOneOverD, SoftmaxWrongAxis, MaskAfterSoftmax, KeyTransposeDropped, DivScaleNotInverted, SecondMaskDropped
};

struct AttnShape {
  int64_t b, h, s, kv, d, dv;
};

/// One attention instance on concrete small shapes. Source: the eager graph exactly as matched
/// (expand to the same shape, views to [B*H, ., .] and back, bmm, scores * c, mask add, softmax,
/// bmm, view); target: ATen's SDPA semantics with the recorded scale and mask. \p c is the
/// literal the scores are multiplied by and \p recorded the scale the rewrite passes to SDPA.
void attentionCase(ObligationBuilder& ob, const std::string& tag, const AttnShape& sh, Expr c, Expr recorded,
                   AttnBug bug, bool twoMasks = false) {
  const int64_t b = sh.b, h = sh.h, s = sh.s, kv = sh.kv, d = sh.d, dv = sh.dv;
  ElementTensor q = ElementTensor::variables(tag + "q", {b, h, s, d});
  ElementTensor k = ElementTensor::variables(tag + "k", {b, h, kv, d});
  ElementTensor v = ElementTensor::variables(tag + "v", {b, h, kv, dv});
  ElementTensor mask = ElementTensor::variables(tag + "mask", {b, 1, s, kv});  // [B, 1, S, KV], as transformers builds it
  auto flatten = [&](const ElementTensor& t) {
    return sem::reshape(sem::expand(t, t.sizes()), {b * h, t.sizes()[2], t.sizes()[3]});
  };
  ElementTensor kt = bug == AttnBug::KeyTransposeDropped ? k : sem::permute(k, {0, 1, 3, 2});
  ElementTensor scores = sem::reshape(sem::bmm(flatten(q), flatten(kt)), {b, h, s, kv});
  scores = sem::materialized(sem::mulScalar(scores, c));
  // A second additive mask ([1, H, S, KV], T5's position bias) after the first: the rewrite
  // passes their sum (one add of the two masks) as SDPA's mask.
  ElementTensor bias = ElementTensor::variables(tag + "position_bias", {1, h, s, kv});
  ElementTensor masked = sem::broadcastAdd(scores, mask);
  if (twoMasks) masked = sem::broadcastAdd(sem::materialized(masked), bias);
  ElementTensor probs = bug == AttnBug::MaskAfterSoftmax
                            ? sem::broadcastAdd(sem::softmax(ob, scores, -1), mask)
                            : sem::softmax(ob, sem::materialized(masked), bug == AttnBug::SoftmaxWrongAxis ? 2 : -1);
  ElementTensor out = sem::reshape(sem::bmm(flatten(sem::materialized(probs)), flatten(v)), {b, h, s, dv});
  ElementTensor sdpaMask = twoMasks && bug != AttnBug::SecondMaskDropped ? sem::materialized(sem::broadcastAdd(mask, bias))
                                                                        : mask;
  ElementTensor sdpa = sem::scaledDotProductAttention(ob, q, k, v, &sdpaMask, recorded);
  sem::proveElementwise(ob, tag + "out", out, sdpa);
}

/// scores / c = scores * s for the scale s = 1/c the rewrite records for a division (the divisor a
/// fresh c > 0 with c*c = D, D = 4). With the mul form proved for every scale, this is the div form.
void divisionScale(ObligationBuilder& ob, bool notInverted) {
  Expr c = ob.fresh("attn.divisor", [](Expr r) { return std::vector<Expr>{r > 0, r * r == 4}; });
  Expr scale = ob.var("attn.scale");
  ob.assume(scale * c == 1);  // the rewrite records 1.0 / c
  Expr x = ob.var("scores[i]");
  ob.prove("scores / c", x / c, x * (notInverted ? c : scale));
}

Obligation attentionToSdpa(AttnBug bug) {
  ObligationBuilder ob("attention-to-sdpa");
  // The mul form for any scale c (the rewrite records the literal): B 1, H 2, S 2, KV 3, D 2.
  const AttnShape main = {1, 2, 2, 3, 2, 2};
  // The mutants on the smallest shapes that show them (KV = D when the key transpose is dropped).
  const AttnShape small = {1, 1, 1, 2, 1, 1}, square = {1, 1, 1, 2, 2, 1}, rows = {1, 1, 2, 2, 1, 1};
  Expr c = ob.var("attn.scale");
  switch (bug) {
    case AttnBug::None:
      attentionCase(ob, "", main, c, c, bug);
      attentionCase(ob, "two-masks.", {1, 2, 1, 2, 1, 1}, c, c, bug, /*twoMasks=*/true);
      divisionScale(ob, false);
      break;
    case AttnBug::SecondMaskDropped: attentionCase(ob, "", small, c, c, bug, /*twoMasks=*/true); break;
    case AttnBug::ScaleOneOverD: {
      // The model's literal is 1/sqrt(D) (D = 4: 1/2); the buggy rewrite records 1/D.
      Expr literal = sem::rsqrt(ob, Expr(4), "attn.scale.literal");
      AttnShape sh = small;
      sh.d = 4;
      attentionCase(ob, "", sh, literal, Expr::rational(1, 4), bug);
      break;
    }
    case AttnBug::DivScaleNotInverted: divisionScale(ob, true); break;
    case AttnBug::KeyTransposeDropped: attentionCase(ob, "", square, c, c, bug); break;
    case AttnBug::SoftmaxWrongAxis: attentionCase(ob, "", rows, c, c, bug); break;
    case AttnBug::MaskAfterSoftmax: attentionCase(ob, "", small, c, c, bug); break;
  }
  return ob.build();
}

// ---- sdpa-grouped-kv --------------------------------------------------------------------------------
//
// Grouped-query attention as transformers writes it (repeat_kv): key and value heads repeated g
// times before SDPA, view(clone(expand(unsqueeze(x, 2), [B, Hkv, g, S, D])), [B, Hkv*g, S, D]).
// ATen's fused CPU kernel (and the attention kernel) read a [B, Hkv, S, D] key/value directly,
// query head h reading kv head h / g, so the repeat (a copy g times the size of the KV cache,
// per layer and call) goes.

/// x, when \p a is view(clone?(expand(unsqueeze(x, 2), [B, Hkv, g, S, D])), [B, Hkv*g, S, D]); the
/// group g in \p group.
std::optional<ValueId> repeatedKv(const Graph& g, const Arg& a, int64_t* group) {
  if (!a.isValue()) return std::nullopt;
  const Node* view = u::producerOf(g, a);
  if (!isViewOp(view)) return std::nullopt;
  const Node* p = u::producerOf(g, selfOperand(*view));
  if (p && p->op == "aten::clone" && !p->args.empty() && operand(*p, ir::Clone::self).isValue()) {
    p = u::producerOf(g, operand(*p, ir::Clone::self));
  }
  if (!p || p->op != "aten::expand" || p->args.empty() || !operand(*p, ir::Expand::self).isValue()) return std::nullopt;
  const Node* unsqueeze = u::producerOf(g, operand(*p, ir::Expand::self));
  if (!unsqueeze || unsqueeze->op != "aten::unsqueeze" || !ir::hasOperands<ir::Unsqueeze>(*unsqueeze) ||
      !operand(*unsqueeze, ir::Unsqueeze::self).isValue() ||
      operand(*unsqueeze, ir::Unsqueeze::dim).kind != Arg::Kind::Int) {
    return std::nullopt;
  }
  const ValueId x = u::valueOf(operand(*unsqueeze, ir::Unsqueeze::self));
  const auto* in = shapeOf(g, x);
  const auto* expanded = shapeOf(g, p->outputs[0]);
  const auto* out = shapeOf(g, u::valueOf(a));
  if (!in || !expanded || !out || in->size() != 4 || expanded->size() != 5 || out->size() != 4) return std::nullopt;
  const int64_t unsqueezed = operand(*unsqueeze, ir::Unsqueeze::dim).i;
  const int64_t dim = unsqueezed < 0 ? unsqueezed + 5 : unsqueezed;
  const auto& i = *in;
  const auto& e = *expanded;
  if (dim != 2 || e[0] != i[0] || e[1] != i[1] || e[3] != i[2] || e[4] != i[3] || e[2] < 1) return std::nullopt;
  if (*out != std::vector<int64_t>{i[0], i[1] * e[2], i[2], i[3]}) return std::nullopt;
  *group = e[2];
  return x;
}

std::optional<Match> matchGroupedKv(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);  // the anchor: kSdpaOp
  if (!ir::hasAtLeastOperands<ir::AttentionQkv>(n) || !operand(n, Sdpa::query).isValue()) return std::nullopt;
  int64_t kGroup = 0, vGroup = 0;
  const auto k = repeatedKv(g, operand(n, Sdpa::key), &kGroup);
  const auto v = repeatedKv(g, operand(n, Sdpa::value), &vGroup);
  if (!k && !v) return std::nullopt;
  if (!k || !v || kGroup != vGroup) {
    return u::why(whyNot, "key and value are not repeated by the same group (one head count for both)"), std::nullopt;
  }
  const auto* q = shapeOf(g, u::valueOf(operand(n, Sdpa::query)));
  const auto* kv = shapeOf(g, *k);
  if (!q || !kv || q->size() != 4 || (*q)[1] != (*kv)[1] * kGroup) {
    return u::why(whyNot, "the query's heads are not the repeated key/value heads"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status readGroupedKv(Graph& g, const Match& m, FusionRecord&) {
  int64_t group = 0;
  Node& n = g.mutableNode(m.anchor);
  const auto k = repeatedKv(g, operand(n, Sdpa::key), &group);
  const auto v = repeatedKv(g, operand(n, Sdpa::value), &group);
  if (!k || !v) return internalError("sdpa-grouped-kv no longer matches");
  operand(n, Sdpa::key) = Arg::value(*k);
  operand(n, Sdpa::value) = Arg::value(*v);
  return Status::ok();
}

enum class GqaBug { None, HeadsInterleaved, RepeatOnAnotherAxis };

// B 1, Hkv 2, g 3 (H 6), S 1, KV 2, D 1: source SDPA over the repeated key/value exactly as
// matched (unsqueeze as a reshape, expand, clone, view); target SDPA whose head h reads kv head
// h / g (ATen's grouped-query semantics, repeat_interleave order).
Obligation groupedKv(GqaBug bug) {
  ObligationBuilder ob("sdpa-grouped-kv");
  const int64_t b = 1, hkv = 2, grp = 3, h = hkv * grp, s = 1, kvLen = 2, d = 1;
  ElementTensor q = ElementTensor::variables("q", {b, h, s, d});
  ElementTensor k = ElementTensor::variables("k", {b, hkv, kvLen, d});
  ElementTensor v = ElementTensor::variables("v", {b, hkv, kvLen, d});
  ElementTensor mask = ElementTensor::variables("mask", {b, 1, s, kvLen});
  auto repeated = [&](const ElementTensor& x) {
    if (bug == GqaBug::RepeatOnAnotherAxis) {  // unsqueeze(x, 4): the copies interleave within a head
      return sem::reshape(sem::clone(sem::expand(sem::reshape(x, {b, hkv, kvLen, d, 1}), {b, hkv, kvLen, d, grp})),
                          {b, h, kvLen, d});
    }
    return sem::reshape(sem::clone(sem::expand(sem::reshape(x, {b, hkv, 1, kvLen, d}), {b, hkv, grp, kvLen, d})),
                        {b, h, kvLen, d});
  };
  auto grouped = [&](const ElementTensor& x) {
    return ElementTensor::fromFunction({b, h, kvLen, d}, [x, bug](const sem::Index& i) {
      const int64_t head = bug == GqaBug::HeadsInterleaved ? i[1] % hkv : i[1] / grp;
      return x.at({i[0], head, i[2], i[3]});
    });
  };
  Expr scale = ob.var("attn.scale");
  ElementTensor source = sem::scaledDotProductAttention(ob, q, repeated(k), repeated(v), &mask, scale);
  ElementTensor target = sem::scaledDotProductAttention(ob, q, grouped(k), grouped(v), &mask, scale);
  sem::proveElementwise(ob, "out", source, target);
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> attentionRecognition() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "attention-to-sdpa",
      .summary = "eager attention (bmm, scale, mask, softmax, bmm) -> aten::_scaled_dot_product_flash_attention_for_cpu",
      .math = "view(bmm(view(softmax(view(bmm(view(q), view(k^T))) * c + mask, -1)), view(v))) "
              "= SDPA(q, k, v, attn_mask=mask, scale=c)  (softmax = exp(x - max)/sum exp(x - max), exp a UF; "
              "bounded: B 1, H 2, S 2, KV 3, D 2, mask [B,1,S,KV], any scale c; two masks m1 + m2 passed as one "
              "(H 2, S 1, KV 2); scores / c' = scores * (1/c'))",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::bmm"},
      // Rooted at the second bmm; the pattern and its guards are in the file comment.
      .match = matchAttention,
      .rewrite = rewriteAttention,
      .obligation = u::bindNoModel(attentionToSdpa, AttnBug::None),
      .mutants = {{"scale-one-over-d", "SDPA's scale recorded as 1/D instead of the graph's 1/sqrt(D)",
                   u::bindNoModel(attentionToSdpa, AttnBug::ScaleOneOverD)},
                  {"softmax-wrong-axis", "a softmax over the query axis (dim 2) accepted",
                   u::bindNoModel(attentionToSdpa, AttnBug::SoftmaxWrongAxis)},
                  {"mask-after-softmax", "softmax(scores) + mask accepted as the masked attention",
                   u::bindNoModel(attentionToSdpa, AttnBug::MaskAfterSoftmax)},
                  {"key-transpose-dropped", "q @ k (no transpose of k) taken as q @ k^T",
                   u::bindNoModel(attentionToSdpa, AttnBug::KeyTransposeDropped)},
                  {"div-scale-not-inverted", "scores / c recorded as scale c instead of 1/c",
                   u::bindNoModel(attentionToSdpa, AttnBug::DivScaleNotInverted)},
                  {"second-mask-dropped", "scores + mask + position_bias passed to SDPA with the first mask only",
                   u::bindNoModel(attentionToSdpa, AttnBug::SecondMaskDropped)}},
  });
  return rules;
}

std::vector<RuleDeclaration> attentionGroupedKv() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "sdpa-grouped-kv",
      .summary = "SDPA over key/value heads repeated g times (repeat_kv) -> SDPA reading the grouped heads",
      .math = "SDPA(q, rep_g(k), rep_g(v)) = SDPA_gqa(q, k, v), rep_g(x) = view(clone(expand(unsqueeze(x, 2), "
              "[B,Hkv,g,S,D])), [B,Hkv*g,S,D]), query head h reading kv head h / g (B 1, Hkv 2, g 3, S 1, KV 2, D 1)",
      .phase = Phase::kNoOps,
      .anchors = {kSdpaOp},
      .match = matchGroupedKv,
      .rewrite = readGroupedKv,
      .obligation = u::bindNoModel(groupedKv, GqaBug::None),
      .mutants = {{"kv-heads-interleaved", "query head h reads kv head h % Hkv instead of h / g",
                   u::bindNoModel(groupedKv, GqaBug::HeadsInterleaved)},
                  {"repeat-on-another-axis", "a repeat along the last axis (unsqueeze(x, 4)) accepted",
                   u::bindNoModel(groupedKv, GqaBug::RepeatOnAnotherAxis)}},
  });
  return rules;
}

RuleDeclaration plantedAttentionScaleOneOverD() {
  // The scale-one-over-d mutant presented as a rule: its rewrite really records 1/D (the head
  // dim) instead of the graph's literal, and its obligation is that (wrong) math: Refuted.
  return {
      .id = "test-planted-attention-scale-one-over-d",
      .summary = "TEST ONLY: eager attention -> SDPA with scale 1/D (deliberately wrong)",
      .math = "softmax(q @ k^T / sqrt(D) + mask) @ v = SDPA(q, k, v, mask, scale=1/D)  (WRONG)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::bmm"},
      .match = matchAttention,
      .rewrite =
          [](Graph& g, const Match& m, FusionRecord& rec) -> Status {
            auto at = matchAttentionAt(g, m.anchor, nullptr);
            if (!at) return internalError("attention no longer matches");
            VF_RETURN_IF_ERROR(rewriteAttention(g, m, rec));
            operand(g.mutableNode(at->result), Sdpa::scale) = Arg::real(1.0 / static_cast<double>(at->d));
            return Status::ok();
          },
      .obligation = u::bindNoModel(attentionToSdpa, AttnBug::ScaleOneOverD),
      .mutants = {{"mask-after-softmax", "softmax(scores) + mask", u::bindNoModel(attentionToSdpa, AttnBug::MaskAfterSoftmax)}},
  };
}

}  // namespace verifuse::rules::families
