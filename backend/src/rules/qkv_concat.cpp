// Projection concatenation: the Q, K and V projections of one input (linears reading the same
// value with the same K) become one GEMM over the concatenated weights, and each projection is a
// slice of its output.
//
//   qkv-concat   linear(x, W_p, b_p) = slice(linear(x, cat(W_1..W_n), cat(b_1..b_n)), -1, off_p, off_p + N_p)
//
// Pattern (rooted at each verifuse::linear): at least two linears read the same value x, each
// without post-ops or extra arguments, with a 2-D constant weight [N_p, K] (any layout) of the same
// K and dtype (float32, or a bf16 model's bfloat16), biases all present (constants [N_p] of that
// dtype) or all absent, and each output read only by a view that splits its last dim into
// [heads, head_dim] (the attention head split: this concatenates attention projections, not an
// MLP's gate and up projections). Static shapes; every reader of a slice must accept its layout (a
// slice of the last dim is not contiguous; strides.h).
//
// Rewrite: the concatenated weight is a new host constant [sum N_p, K], computed on demand (the
// closure keeps the originals alive, like the folds; bf16: copied now into a bf16 host buffer) and
// the biases a small host buffer; the concatenated linear takes a free node slot before the first
// projection (ir::placeInSlot: ids never shift); each projection becomes
// aten::slice.Tensor(cat, rank-1, off_p, off_p + N_p, 1) and keeps its output value. The FoldRecord (kConcat) lets the instance check compare the copy bit
// for bit with the originals.
#include <algorithm>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "rules/strides.h"
#include "verifuse/ir/graph_edit.h"
#include "verifuse/passes/pipeline.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::ConstantId;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::sem::DotModel;
using verify::sem::TensorTerm;
namespace sem = verify::sem;
namespace u = util;
using Linear = ir::FusedLinear;  // kLinearOp's operands

/// The 2-D weight constant of a linear: float32, or a bf16 model's bfloat16 (with its data: the
/// bf16 concatenation is copied when the rule applies).
const ir::ConstantTensor* weightOf(const Graph& g, const Node& n) {
  const Arg& weight = operand(n, Linear::weight);
  if (!weight.isConstant()) return nullptr;
  const ir::ConstantTensor& c = g.constants()[static_cast<size_t>(weight.i)];
  const bool bf16 = c.dtype == ir::DType::BFloat16 && c.data != nullptr;
  return (c.dtype == ir::DType::Float32 || bf16) && c.sizes.size() == 2 && c.strides.size() == 2 ? &c : nullptr;
}

bool isHeadSplit(const Graph& g, const Node& lin) {
  if (!u::hasSingleUse(g, lin.outputs[0])) return false;
  const Node& r = g.node(g.users(lin.outputs[0])[0]);
  if (!(r.op == "aten::view" || r.op == "aten::reshape" || r.op == "aten::_unsafe_view")) return false;
  const auto* in = u::staticShape(g, lin.outputs[0]);
  const auto* out = u::staticShape(g, r.outputs[0]);
  if (!in || !out || out->size() != in->size() + 1) return false;
  for (size_t d = 0; d + 1 < in->size(); ++d) {
    if ((*in)[d] != (*out)[d]) return false;
  }
  return (*out)[out->size() - 2] * (*out)[out->size() - 1] == in->back();
}

/// A linear that may join a concatenation (nullopt) or why not.
std::optional<std::string> memberProblem(const Graph& g, const Node& n) {
  if (n.op != kLinearOp || !ir::hasOperands<Linear>(n) || !hasNoFusedPostOps(n)) {
    return "has post-ops or extra arguments";
  }
  const ir::ConstantTensor* w = weightOf(g, n);
  if (!w) return "its weight is not a 2-D float32 (or bf16 with data) constant";
  const Arg& bias = operand(n, Linear::bias);
  if (bias.kind != Arg::Kind::None) {
    if (!bias.isConstant()) return "its bias is not a constant";
    const ir::ConstantTensor& b = g.constants()[static_cast<size_t>(bias.i)];
    if (b.dtype != w->dtype || b.sizes.size() != 1 || !b.isContiguous() ||
        (b.dtype == ir::DType::BFloat16 && !b.data)) {
      return "its bias is not a [N] constant of the weight's dtype";
    }
  }
  if (!u::staticShape(g, n.outputs[0])) return "its output shape is not static";
  if (!isHeadSplit(g, n)) return "its output is not read only by an attention head split (view [..., heads, head_dim])";
  return std::nullopt;
}

struct Group {
  std::vector<NodeId> members;  ///< graph order
  NodeId slot = -1;
};

std::optional<Group> findGroup(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);  // the anchor: a verifuse::linear
  if (n.args.empty() || !operand(n, Linear::x).isValue() || memberProblem(g, n)) return std::nullopt;
  const ValueId x = u::valueOf(operand(n, Linear::x));
  Group group;
  const ir::ConstantTensor* w0 = weightOf(g, n);
  const bool biased = operand(n, Linear::bias).kind != Arg::Kind::None;
  std::string excluded;
  for (NodeId user : g.users(x)) {
    const Node& m = g.node(user);
    if (m.op != kLinearOp || m.args.empty()) continue;
    const Arg& input = operand(m, Linear::x);
    if (!(input.isValue() && u::valueOf(input) == x)) continue;
    if (auto problem = memberProblem(g, m)) {
      excluded = "a linear of the same input " + *problem;
      continue;
    }
    if (weightOf(g, m)->sizes[1] != w0->sizes[1]) continue;  // another K: not the same input width
    if (weightOf(g, m)->dtype != w0->dtype) {
      excluded = "the projections of one input mix float32 and bf16 weights";
      continue;
    }
    if ((operand(m, Linear::bias).kind != Arg::Kind::None) != biased) {
      excluded = "the projections of one input mix biased and unbiased linears";
      continue;
    }
    group.members.push_back(user);
  }
  if (group.members.size() < 2) {
    if (!excluded.empty()) u::why(whyNot, excluded);
    return std::nullopt;
  }
  if (group.members.front() != id) return std::nullopt;  // applied once, at the first projection
  const auto* xs = u::staticShape(g, x);
  if (!xs || xs->empty() || xs->back() != w0->sizes[1]) return u::why(whyNot, "the input's shape is not static [..., K]"), std::nullopt;
  // Every slice is read with the concatenation's row stride.
  int64_t total = 0;
  for (NodeId m : group.members) total += weightOf(g, g.node(m))->sizes[0];
  for (NodeId m : group.members) {
    std::vector<int64_t> sizes = *u::staticShape(g, g.node(m).outputs[0]);
    sizes.back() = total;
    const std::vector<int64_t> strides = u::contiguousStrides(sizes);
    std::string layout;
    if (!u::readersAcceptLayout(g, g.node(m).outputs[0], strides, &layout)) {
      return u::why(whyNot, "a projection's readers: " + layout), std::nullopt;
    }
  }
  const ir::NodeId xProducer = g.value(x).producer;
  group.slot = ir::findFreeSlot(g, xProducer, group.members.front());
  if (group.slot < 0) return u::why(whyNot, "no free node slot between the input and the first projection"), std::nullopt;
  return group;
}

std::optional<Match> matchQkv(const Graph& g, NodeId id, std::string* whyNot) {
  if (!findGroup(g, id, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

/// One source weight, as the closure keeps it.
struct Part {
  std::shared_ptr<void> owner;
  const float* data = nullptr;
  std::function<std::shared_ptr<std::vector<float>>()> materialize;
  int64_t rows = 0, cols = 0, rowStride = 0, colStride = 0;
};

/// A bf16 model's projections: the weights (and biases) concatenated as bf16 host buffers, bit
/// copies of the originals (float32 ones are built lazily instead, like the folds).
ConstantId concatBf16(Graph& g, const std::string& name, const std::vector<ConstantId>& parts, int64_t cols) {
  int64_t rows = 0;
  for (ConstantId id : parts) rows += g.constants()[static_cast<size_t>(id)].sizes[0];
  const int64_t width = cols > 0 ? cols : 1;  // a bias: one element per row
  auto buffer = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(rows * width));
  int64_t row = 0;
  for (ConstantId id : parts) {
    const ir::ConstantTensor& p = g.constants()[static_cast<size_t>(id)];
    const uint16_t* src = static_cast<const uint16_t*>(p.data);
    const int64_t rowStride = p.strides[0], colStride = cols > 0 ? p.strides[1] : 0;
    for (int64_t r = 0; r < p.sizes[0]; ++r, ++row) {
      for (int64_t c = 0; c < width; ++c) {
        (*buffer)[static_cast<size_t>(row * width + c)] = src[r * rowStride + c * colStride];
      }
    }
  }
  const std::vector<int64_t> sizes = cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
  const ConstantId id = passes::addHostConstant(g, name, sizes, {});
  ir::ConstantTensor& c = g.mutableConstants()[static_cast<size_t>(id)];
  c.dtype = ir::DType::BFloat16;
  c.data = buffer->data();
  c.owner = buffer;
  c.ownerKind = ir::ConstantOwner::HostBuffer;
  return id;
}

Status placeConcatenation(Graph& g, const Group& group, ConstantId wcat, ConstantId bcat);

Status rewriteQkv(Graph& g, const Match& m, FusionRecord& rec) {
  auto group = findGroup(g, m.anchor, nullptr);
  if (!group) return internalError("qkv-concat no longer matches");
  const Node& first = g.node(group->members.front());
  const bool biased = operand(first, Linear::bias).kind != Arg::Kind::None;
  const ir::ConstantTensor& w0 = *weightOf(g, first);
  const int64_t k = w0.sizes[1];
  const std::string base = w0.name;
  for (NodeId id : group->members) {
    const Node& projection = g.node(id);
    rec.fold.parts.push_back(static_cast<ConstantId>(operand(projection, Linear::weight).i));
    if (biased) rec.fold.partBiases.push_back(static_cast<ConstantId>(operand(projection, Linear::bias).i));
  }
  rec.fold.kind = FoldRecord::Kind::kConcat;
  if (w0.dtype == ir::DType::BFloat16) {
    rec.fold.foldedWeight = concatBf16(g, base + "_qkv_cat", rec.fold.parts, k);
    rec.fold.foldedBias = biased ? concatBf16(g, base + "_qkv_cat_bias", rec.fold.partBiases, 0) : -1;
    return placeConcatenation(g, *group, rec.fold.foldedWeight, rec.fold.foldedBias);
  }
  std::vector<Part> parts;
  std::vector<float> bias;
  bool biasData = true, weightData = true;
  int64_t total = 0;
  for (ConstantId id : rec.fold.parts) {
    const ir::ConstantTensor& w = g.constants()[static_cast<size_t>(id)];
    parts.push_back({w.owner, static_cast<const float*>(w.data), w.materialize, w.sizes[0], w.sizes[1], w.strides[0],
                     w.strides[1]});
    weightData &= w.hasData();
    total += w.sizes[0];
  }
  for (ConstantId id : rec.fold.partBiases) {
    const ir::ConstantTensor& b = g.constants()[static_cast<size_t>(id)];
    biasData &= b.data != nullptr;
    if (b.data) bias.insert(bias.end(), static_cast<const float*>(b.data), static_cast<const float*>(b.data) + b.numel());
  }
  // The weight: computed on demand (materialized when its linear is built, like a folded weight).
  const ConstantId wcat = passes::addHostConstant(g, base + "_qkv_cat", {total, k}, {});
  if (weightData) {
    g.mutableConstants()[static_cast<size_t>(wcat)].materialize = [parts, total, k]() {
      auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(total * k));
      int64_t row = 0;
      for (const Part& p : parts) {
        std::shared_ptr<std::vector<float>> keep;
        const float* src = p.data;
        if (!src && p.materialize) {
          keep = p.materialize();
          src = keep->data();
        }
        for (int64_t r = 0; r < p.rows; ++r, ++row) {
          for (int64_t c = 0; c < p.cols; ++c) {
            (*out)[static_cast<size_t>(row * k + c)] = src[r * p.rowStride + c * p.colStride];
          }
        }
      }
      return out;
    };
  }
  ConstantId bcat = -1;
  if (biased) {
    bcat = passes::addHostConstant(g, base + "_qkv_cat_bias", {total}, biasData ? std::move(bias) : std::vector<float>{});
  }
  rec.fold.foldedWeight = wcat;
  rec.fold.foldedBias = bcat;
  return placeConcatenation(g, *group, wcat, bcat);
}

/// The concatenated linear over \p wcat (and \p bcat, -1: none) in the free slot before the first
/// projection; each projection becomes a slice of its output.
Status placeConcatenation(Graph& g, const Group& group, ConstantId wcat, ConstantId bcat) {
  const bool biased = bcat >= 0;
  const int64_t total = g.constants()[static_cast<size_t>(wcat)].sizes[0];
  // The concatenated linear, in the free slot before the first projection.
  const Node& first = g.node(group.members.front());
  const Arg x = operand(first, Linear::x);
  const ir::DType outType = g.value(first.outputs[0]).dtype;
  std::vector<int64_t> outShape = *u::staticShape(g, first.outputs[0]);
  outShape.back() = total;
  const int64_t lastDim = static_cast<int64_t>(outShape.size()) - 1;
  std::vector<Arg> catOperands = ir::OperandsOf<Linear>()
                                     .set(Linear::x, x)
                                     .set(Linear::weight, Arg::constant(wcat))
                                     .set(Linear::bias, biased ? Arg::constant(bcat) : Arg::none())
                                     .set(Linear::post_ops, Arg::string(""))
                                     .take();
  VF_ASSIGN_OR_RETURN(ValueId cat,
                      ir::placeInSlot(g, group.slot, kLinearOp, "", std::move(catOperands), ir::ValueType::Tensor));
  g.mutableValue(cat).setShape(outShape);
  g.mutableValue(cat).dtype = outType;
  // Each projection: a slice of the last dim, keeping its output value.
  int64_t offset = 0;
  for (NodeId id : group.members) {
    Node& n = g.mutableNode(id);
    const int64_t rows = g.constants()[static_cast<size_t>(operand(n, Linear::weight).i)].sizes[0];
    n.op = "aten::slice";
    n.overload = "Tensor";
    n.args = ir::OperandsOf<ir::Slice>()
                 .set(ir::Slice::self, Arg::value(cat))
                 .set(ir::Slice::dim, Arg::integer(lastDim))
                 .set(ir::Slice::start, Arg::integer(offset))
                 .set(ir::Slice::end, Arg::integer(offset + rows))
                 .set(ir::Slice::step, Arg::integer(1))
                 .take();
    offset += rows;
  }
  return Status::ok();
}

// ---- obligation ------------------------------------------------------------------------------------

enum class QkvBug { None, OtherBias, OffsetOffByOne };

// Blocks of N_p = 2, 1, 2 rows (three projections, K unsized: the dot model). Per output column j
// of the concatenation, the rewrite's table says which projection p and row r own it; the
// concatenated weight row j and bias j are W_p[r] and b_p[r]. Projection p's output column r must
// equal the slice's column r, i.e. column off_p + r of the concatenated linear.
Obligation qkvConcatObligation(const DotModel& m, QkvBug bug) {
  ObligationBuilder ob("qkv-concat");
  const std::vector<std::string> names = {"q", "k", "v"};
  const std::vector<int64_t> rows = {2, 1, 2};
  std::vector<int64_t> offsets = {0};
  for (int64_t r : rows) offsets.push_back(offsets.back() + r);
  const int64_t total = offsets.back();
  TensorTerm x = m.tensor("x[row]");
  auto weight = [&](size_t p, int64_t r) { return m.tensor(names[p] + ".weight[" + std::to_string(r) + "]"); };
  auto bias = [&](size_t p, int64_t r) { return ob.var(names[p] + ".bias[" + std::to_string(r) + "]"); };
  // The concatenation (what the rewrite's copy loop produces): row j belongs to the last block
  // starting at or before j.
  auto owner = [&](int64_t j) {
    size_t p = 0;
    while (p + 1 < rows.size() && offsets[p + 1] <= j) ++p;
    return p;
  };
  auto catColumn = [&](int64_t j) {
    const size_t p = owner(j);
    const int64_t r = j - offsets[p];
    // The mutant takes the bias of the next projection (when it has that row).
    Expr b = bias(p, r);
    if (bug == QkvBug::OtherBias) {
      const size_t q = (p + 1) % rows.size();
      b = bias(q, std::min<int64_t>(r, rows[q] - 1));
    }
    return m.linear(ob, weight(p, r), x, b);
  };
  for (size_t p = 0; p < rows.size(); ++p) {
    for (int64_t r = 0; r < rows[p]; ++r) {
      const int64_t j = offsets[p] + r + (bug == QkvBug::OffsetOffByOne ? 1 : 0);
      if (j >= total) continue;
      ob.prove(names[p] + ".out[" + std::to_string(r) + "]", m.linear(ob, weight(p, r), x, bias(p, r)), catColumn(j));
    }
  }
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> qkvConcat() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "qkv-concat",
      .summary = "linears of one input (attention projections) -> one linear over concatenated weights + slices",
      .math = "linear(x, W_p, b_p)[..., r] = linear(x, cat_p W_p, cat_p b_p)[..., off_p + r]  "
              "(blocks of 2, 1, 2 rows; dot model)",
      .phase = Phase::kFusion,
      .anchors = {kLinearOp},
      .match = matchQkv,
      .rewrite = rewriteQkv,
      .obligation = u::bind(qkvConcatObligation, QkvBug::None),
      .mutants = {{"bias-of-another-projection", "the concatenated bias takes the next projection's bias",
                   u::bind(qkvConcatObligation, QkvBug::OtherBias)},
                  {"column-offset-off-by-one", "each slice starts one column late",
                   u::bind(qkvConcatObligation, QkvBug::OffsetOffByOne)}},
      .usesDot = true,
      .foldsConstants = true,
  });
  return rules;
}

}  // namespace verifuse::rules::families
