// The fusion rules: batch-norm folding, per-channel constant folding, activation post-ops and the
// residual-add sum post-op. Each rule's id is the id of its obligation in the verifier's catalogue.
#include <cmath>
#include <limits>
#include <set>

#include "rules/graph_util.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"

namespace verifuse::rules {

using ir::Arg;
using ir::ConstantId;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
namespace u = util;

StatusOr<Rule> makeRule(const std::vector<verify::RuleProof>& catalogue, const std::string& id, std::string summary,
                        Rule::MatchFn match, Rule::RewriteFn rewrite, bool foldsConstants) {
  for (const verify::RuleProof& proof : catalogue) {
    if (proof.ruleId == id) {
      return Rule(proof, std::move(summary), std::move(match), std::move(rewrite), foldsConstants);
    }
  }
  return Status(StatusCode::kNotFound, "rule '" + id + "' has no proof obligation in the verifier's catalogue");
}

namespace {

bool why(std::string* whyNot, const std::string& reason) {
  if (whyNot) *whyNot = reason;
  return false;
}

/// The fused op producing \p a, if it is the only reader of that value.
const Node* singleUseFusedProducer(const Graph& g, const Arg& a) {
  const Node* p = u::producerOf(g, a);
  if (!p || !isFusedOp(*p)) return nullptr;
  if (!u::hasSingleUse(g, u::valueOf(a))) return nullptr;
  return p;
}

int64_t outChannels(const Graph& g, const Node& fused) {
  const Arg& w = fused.args[1];
  if (!w.isConstant()) return -1;
  return g.constants()[static_cast<size_t>(w.i)].sizes.at(0);
}

std::vector<PostOpSpec> postOpsOf(const Node& n) {
  auto parsed = parsePostOps(n.args[postOpsArgIndex(n)].s);
  return parsed.isOk() ? *parsed : std::vector<PostOpSpec>{};
}

bool hasNoPostOps(const Node& n) { return n.args[postOpsArgIndex(n)].s.empty(); }

/// Output rank and channel axis of a fused op (conv: axis 1; linear: the last axis), or -1.
int channelAxis(const Graph& g, const Node& fused, int* rank) {
  const auto* shape = u::knownShape(g, fused.outputs[0]);
  if (fused.op == kConvOp) {
    int r = static_cast<int>(g.constants()[static_cast<size_t>(fused.args[1].i)].sizes.size());
    if (shape && static_cast<int>(shape->size()) != r) return -1;  // unbatched conv: not folded
    *rank = r;
    return 1;
  }
  if (!shape) return -1;
  *rank = static_cast<int>(shape->size());
  return *rank - 1;
}

// ---- constant data -------------------------------------------------------------------------------

std::vector<double> toDoubles(const ir::ConstantTensor* c) {
  std::vector<double> out;
  if (!c || !c->data) return out;
  const float* p = static_cast<const float*>(c->data);
  out.assign(p, p + c->numel());
  return out;
}

/// W'[o, ...] = W[o, ...] * scale[o];  b'[o] = shift(o)  (computed in double, stored as float).
struct FoldedConstants {
  ConstantId weight = -1, bias = -1;
};

FoldedConstants foldPerChannel(Graph& g, const Node& fused, const std::vector<double>& scale,
                               const std::vector<double>& shiftFromBias /* b'[o] given b[o] */,
                               const std::vector<double>& biasScale, bool makeBias) {
  // b'[o] = b[o] * biasScale[o] + shiftFromBias[o]
  const ir::ConstantTensor& w = g.constants()[static_cast<size_t>(fused.args[1].i)];
  const ir::ConstantTensor* b = fused.args[2].isConstant() ? &g.constants()[static_cast<size_t>(fused.args[2].i)] : nullptr;
  const int64_t channels = w.sizes[0];
  const int64_t perChannel = channels ? w.numel() / channels : 0;
  const bool computable = w.hasData() && (b == nullptr || b->data) && !scale.empty();
  FoldedConstants out;
  std::vector<float> bv;
  std::vector<double> bias = toDoubles(b);
  std::function<std::shared_ptr<std::vector<float>>()> lazyWeight;
  if (computable) {
    // The weight is folded on demand (W'[o, i] = W[o, i] * scale[o], in double, stored as float):
    // the source is kept alive by reference, never copied here.
    std::shared_ptr<void> sourceOwner = w.owner;
    const float* sourceData = static_cast<const float*>(w.data);
    auto sourceLazy = w.materialize;
    const int64_t numel = w.numel();
    lazyWeight = [sourceOwner, sourceData, sourceLazy, scale, channels, perChannel, numel]() {
      std::shared_ptr<std::vector<float>> tmp;
      const float* src = sourceData;
      if (!src && sourceLazy) {
        tmp = sourceLazy();
        src = tmp->data();
      }
      auto folded = std::make_shared<std::vector<float>>(static_cast<size_t>(numel));
      for (int64_t o = 0; o < channels; ++o) {
        for (int64_t i = 0; i < perChannel; ++i) {
          size_t k = static_cast<size_t>(o * perChannel + i);
          (*folded)[k] = static_cast<float>(static_cast<double>(src[k]) * scale[static_cast<size_t>(o)]);
        }
      }
      return folded;
    };
    if (b || makeBias) {
      bv.resize(static_cast<size_t>(channels));
      for (int64_t o = 0; o < channels; ++o) {
        double bo = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
        bv[static_cast<size_t>(o)] =
            static_cast<float>(bo * biasScale[static_cast<size_t>(o)] + shiftFromBias[static_cast<size_t>(o)]);
      }
    }
  }
  // Copies: adding constants below invalidates references into the constant table.
  auto foldedName = [](const std::string& name) {
    return name.size() > 7 && name.compare(name.size() - 7, 7, "_folded") == 0 ? name : name + "_folded";
  };
  std::string wName = w.name;
  std::vector<int64_t> wSizes = w.sizes;
  std::string bName = b ? foldedName(b->name) : wName + "_bias_folded";
  out.weight = passes::addHostConstant(g, foldedName(wName), wSizes, {});
  g.mutableConstants()[static_cast<size_t>(out.weight)].materialize = std::move(lazyWeight);
  if (b || makeBias) {
    out.bias = passes::addHostConstant(g, bName, {channels}, std::move(bv));
  }
  return out;
}

// ---- batch norm ------------------------------------------------------------------------------------

struct BatchNormArgs {
  Arg input, gamma, beta, mean, var;
  double eps = 0;
};

/// Eval-mode batch norm with constant statistics; nullopt (with a reason) otherwise.
std::optional<BatchNormArgs> evalBatchNorm(const Graph& g, const Node& n, std::string* whyNot) {
  BatchNormArgs bn;
  size_t epsArg;
  if (n.op == "aten::_native_batch_norm_legit_no_training" && n.args.size() == 7) {
    epsArg = 6;
  } else if (n.op == "aten::native_batch_norm" && n.args.size() == 8) {
    if (n.args[5].kind != Arg::Kind::Bool || n.args[5].i != 0) {
      why(whyNot, "batch norm in training mode (batch statistics, not running statistics)");
      return std::nullopt;
    }
    epsArg = 7;
  } else {
    return std::nullopt;
  }
  bn.input = n.args[0];
  bn.gamma = n.args[1];
  bn.beta = n.args[2];
  bn.mean = n.args[3];
  bn.var = n.args[4];
  auto eps = u::numberArg(n.args[epsArg]);
  if (!eps) {
    why(whyNot, "batch norm eps is not a constant");
    return std::nullopt;
  }
  bn.eps = *eps;
  for (size_t k = 1; k < n.outputs.size(); ++k) {
    if (!g.users(n.outputs[k]).empty() || g.isGraphOutput(n.outputs[k])) {
      why(whyNot, "batch norm's saved statistics are used");
      return std::nullopt;
    }
  }
  const ir::ConstantTensor* mean = u::f32Constant(g, bn.mean);
  const ir::ConstantTensor* var = u::f32Constant(g, bn.var);
  if (!mean || !var) {
    why(whyNot, "batch norm running statistics are not frozen float32 constants");
    return std::nullopt;
  }
  for (const Arg* a : {&bn.gamma, &bn.beta}) {
    if (a->kind != Arg::Kind::None && !u::f32Constant(g, *a)) {
      why(whyNot, "batch norm weight/bias are not frozen float32 constants");
      return std::nullopt;
    }
  }
  return bn;
}

int64_t batchNormChannels(const Graph& g, const BatchNormArgs& bn) {
  return g.constants()[static_cast<size_t>(bn.mean.i)].numel();
}

/// s[o] = gamma[o] / sqrt(var[o] + eps) and t[o] = beta[o] - mean[o] * s[o], in double.
void batchNormScaleShift(const Graph& g, const BatchNormArgs& bn, std::vector<double>& s, std::vector<double>& t,
                         std::vector<double>& mean) {
  const int64_t c = batchNormChannels(g, bn);
  std::vector<double> gamma = toDoubles(u::f32Constant(g, bn.gamma));
  std::vector<double> beta = toDoubles(u::f32Constant(g, bn.beta));
  mean = toDoubles(u::f32Constant(g, bn.mean));
  std::vector<double> var = toDoubles(u::f32Constant(g, bn.var));
  s.clear();
  t.clear();
  if (mean.empty() || var.empty()) return;
  s.resize(static_cast<size_t>(c));
  t.resize(static_cast<size_t>(c));
  for (size_t o = 0; o < static_cast<size_t>(c); ++o) {
    double gm = gamma.empty() ? 1.0 : gamma[o];
    double bt = beta.empty() ? 0.0 : beta[o];
    s[o] = gm / std::sqrt(var[o] + bn.eps);
    t[o] = bt - mean[o] * s[o];
  }
}

ConstantId argConstant(const Arg& a) { return a.isConstant() ? static_cast<ConstantId>(a.i) : -1; }

Status replaceWithProducer(Graph& g, const Match& m) {
  g.replaceAllUses(g.node(m.consumer).outputs[0], g.node(m.anchor).outputs[0]);
  g.eraseNode(m.consumer);
  return Status::ok();
}

Rule::MatchFn matchBatchNormFold(const char* fusedOp, bool epsForgotten) {
  return [fusedOp, epsForgotten](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    (void)epsForgotten;
    const Node& n = g.node(id);
    auto bn = evalBatchNorm(g, n, whyNot);
    if (!bn) return std::nullopt;
    const Node* p = singleUseFusedProducer(g, bn->input);
    if (!p || p->op != fusedOp) {
      why(whyNot, "batch norm input is not a single-use " + std::string(fusedOp));
      return std::nullopt;
    }
    if (!hasNoPostOps(*p)) {
      why(whyNot, "the producer already has post-ops");
      return std::nullopt;
    }
    if (!u::f32Constant(g, p->args[1]) || (p->args[2].kind != Arg::Kind::None && !u::f32Constant(g, p->args[2]))) {
      why(whyNot, "the producer's weights are not frozen float32 constants");
      return std::nullopt;
    }
    int rank = 0;
    int axis = channelAxis(g, *p, &rank);
    // Batch norm normalizes dim 1; the fold is per output channel, so dim 1 must be the channel axis.
    if (axis != 1) {
      why(whyNot, "batch norm's channel axis (1) is not the producer's output-channel axis");
      return std::nullopt;
    }
    if (batchNormChannels(g, *bn) != outChannels(g, *p)) {
      why(whyNot, "batch norm channel count differs from the producer's output channels");
      return std::nullopt;
    }
    return Match{p->id, id, 0};
  };
}

Rule::RewriteFn rewriteBatchNormFold(bool epsForgotten) {
  return [epsForgotten](Graph& g, const Match& m, FusionRecord& rec) -> Status {
    const Node& n = g.node(m.consumer);
    auto bn = evalBatchNorm(g, n, nullptr);
    if (!bn) return internalError("batch norm no longer matches");
    BatchNormArgs args = *bn;
    if (epsForgotten) args.eps = 0;  // the planted bug
    std::vector<double> s, t, mean;
    batchNormScaleShift(g, args, s, t, mean);
    // b' = (b - mean) * s + beta = b * s + t
    const Node& p = g.node(m.anchor);
    FoldedConstants folded = foldPerChannel(g, p, s, t, s, /*makeBias=*/true);
    Node& pm = g.mutableNode(m.anchor);
    rec.fold.kind = FoldRecord::Kind::kBatchNorm;
    rec.fold.weight = argConstant(pm.args[1]);
    rec.fold.bias = argConstant(pm.args[2]);
    rec.fold.gamma = argConstant(bn->gamma);
    rec.fold.beta = argConstant(bn->beta);
    rec.fold.mean = argConstant(bn->mean);
    rec.fold.var = argConstant(bn->var);
    rec.fold.eps = bn->eps;
    rec.fold.foldedWeight = folded.weight;
    rec.fold.foldedBias = folded.bias;
    pm.args[1] = Arg::constant(folded.weight);
    pm.args[2] = Arg::constant(folded.bias);
    return replaceWithProducer(g, m);
  };
}

// ---- batch norm with nothing to fold into ------------------------------------------------------

std::optional<Match> matchStandaloneBatchNorm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  auto bn = evalBatchNorm(g, n, whyNot);
  if (!bn) return std::nullopt;
  if (!bn->input.isValue()) return std::nullopt;
  const auto* shape = u::knownShape(g, u::valueOf(bn->input));
  if (!shape || shape->size() < 2) {
    why(whyNot, "batch norm input rank unknown");
    return std::nullopt;
  }
  if ((*shape)[1] >= 0 && (*shape)[1] != batchNormChannels(g, *bn)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteStandaloneBatchNorm(Graph& g, const Match& m, FusionRecord& rec) {
  auto bn = evalBatchNorm(g, g.node(m.anchor), nullptr);
  if (!bn) return internalError("batch norm no longer matches");
  std::vector<double> s, t, mean;
  batchNormScaleShift(g, *bn, s, t, mean);
  const int64_t c = batchNormChannels(g, *bn);
  const size_t rank = g.value(u::valueOf(bn->input)).shape.size();
  // [C, 1, ..., 1]: broadcasts along dim 1 of an N-d input (right-aligned).
  std::vector<int64_t> sizes(rank - 1, 1);
  sizes[0] = c;
  std::vector<float> sv(s.begin(), s.end()), tv(t.begin(), t.end());
  std::string base = g.constants()[static_cast<size_t>(bn->mean.i)].name;
  ConstantId scale = passes::addHostConstant(g, base + "_bn_scale", sizes, std::move(sv));
  ConstantId shift = passes::addHostConstant(g, base + "_bn_shift", sizes, std::move(tv));
  rec.fold.kind = FoldRecord::Kind::kBatchNorm;
  rec.fold.gamma = argConstant(bn->gamma);
  rec.fold.beta = argConstant(bn->beta);
  rec.fold.mean = argConstant(bn->mean);
  rec.fold.var = argConstant(bn->var);
  rec.fold.eps = bn->eps;
  rec.fold.foldedWeight = scale;
  rec.fold.foldedBias = shift;
  Node& n = g.mutableNode(m.anchor);
  // addcmul(shift, x, scale, 1) = shift + x * scale: one pass over x, like batch norm itself.
  n.op = "aten::addcmul";
  n.overload = "";
  n.args = {Arg::constant(shift), bn->input, Arg::constant(scale), Arg::integer(1)};
  n.outputs.resize(1);
  return Status::ok();
}

// ---- per-channel constant folds --------------------------------------------------------------------

enum class ChannelOp { kMul, kAdd, kDiv };

/// Per-output-channel factors of a constant operand: nullopt if it broadcasts along any other axis
/// (a scale on the wrong axis cannot be folded into the weights).
std::optional<std::vector<double>> channelFactors(const Graph& g, const Node& fused, const Arg& operand,
                                                  std::string* whyNot) {
  const int64_t channels = outChannels(g, fused);
  if (auto v = u::numberArg(operand)) return std::vector<double>(static_cast<size_t>(channels), *v);
  const ir::ConstantTensor* c = u::f32Constant(g, operand);
  if (!c) return std::nullopt;
  int rank = 0;
  int axis = channelAxis(g, fused, &rank);
  if (axis < 0) return std::nullopt;
  if (static_cast<int>(c->sizes.size()) > rank) {
    why(whyNot, "constant has more dims than the output");
    return std::nullopt;
  }
  // Right-align the constant's dims against the output's.
  const int offset = rank - static_cast<int>(c->sizes.size());
  for (int d = 0; d < static_cast<int>(c->sizes.size()); ++d) {
    int outDim = d + offset;
    int64_t size = c->sizes[static_cast<size_t>(d)];
    if (size == 1) continue;
    if (outDim != axis || size != channels) {
      why(whyNot, "constant varies along an axis other than the output channels");
      return std::nullopt;
    }
  }
  if (!c->data) return std::vector<double>(static_cast<size_t>(channels), 1.0);  // parsed graph: shapes only
  std::vector<double> vals = toDoubles(c);
  if (vals.size() == 1) return std::vector<double>(static_cast<size_t>(channels), vals[0]);
  return vals;
}

Rule::MatchFn matchChannelFold(ChannelOp op) {
  return [op](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    const Node& n = g.node(id);
    const bool isMul = op == ChannelOp::kMul && n.op == "aten::mul" && n.overload == "Tensor";
    const bool isAdd = op == ChannelOp::kAdd && n.op == "aten::add" && n.overload == "Tensor";
    const bool isDiv = op == ChannelOp::kDiv && n.op == "aten::div" && n.overload == "Tensor";
    if (!isMul && !isAdd && !isDiv) return std::nullopt;
    for (int k = 0; k < 2; ++k) {
      if (isDiv && k == 1) break;  // c / y is not a per-channel scale of y
      const Node* p = singleUseFusedProducer(g, n.args[static_cast<size_t>(k)]);
      if (!p) continue;
      if (!hasNoPostOps(*p)) return why(whyNot, "producer has post-ops"), std::nullopt;
      if (!u::f32Constant(g, p->args[1])) return std::nullopt;
      if (isAdd) {
        auto alpha = u::numberArg(n.args[2]);
        if (!alpha || (k == 1 && *alpha != 1.0)) return std::nullopt;
      }
      if (!channelFactors(g, *p, n.args[static_cast<size_t>(1 - k)], whyNot)) return std::nullopt;
      return Match{p->id, id, k};
    }
    return std::nullopt;
  };
}

Rule::RewriteFn rewriteChannelFold(ChannelOp op) {
  return [op](Graph& g, const Match& m, FusionRecord& rec) -> Status {
    const Node& n = g.node(m.consumer);
    const Arg operand = n.args[static_cast<size_t>(1 - m.operand)];
    auto factors = channelFactors(g, g.node(m.anchor), operand, nullptr);
    if (!factors) return internalError("channel fold no longer matches");
    const size_t channels = factors->size();
    std::vector<double> ones(channels, 1.0), zeros(channels, 0.0), scale, shift, biasScale;
    double alpha = 1.0;
    switch (op) {
      case ChannelOp::kMul: scale = *factors; shift = zeros; biasScale = *factors; break;
      case ChannelOp::kDiv:
        scale.resize(channels);
        for (size_t o = 0; o < channels; ++o) scale[o] = 1.0 / (*factors)[o];
        shift = zeros;
        biasScale = scale;
        break;
      case ChannelOp::kAdd:
        alpha = *u::numberArg(n.args[2]);
        scale = ones;
        biasScale = ones;
        shift.resize(channels);
        for (size_t o = 0; o < channels; ++o) shift[o] = alpha * (*factors)[o];
        break;
    }
    const Node& p = g.node(m.anchor);
    const bool makeBias = op == ChannelOp::kAdd;
    FoldedConstants folded = foldPerChannel(g, p, scale, shift, biasScale, makeBias);
    Node& pm = g.mutableNode(m.anchor);
    rec.fold.kind = op == ChannelOp::kMul ? FoldRecord::Kind::kChannelMul
                    : op == ChannelOp::kAdd ? FoldRecord::Kind::kChannelAdd
                                            : FoldRecord::Kind::kChannelDiv;
    rec.fold.weight = argConstant(pm.args[1]);
    rec.fold.bias = argConstant(pm.args[2]);
    rec.fold.operand = argConstant(operand);
    rec.fold.scalar = operand.isConstant() ? alpha : *u::numberArg(operand);
    if (op == ChannelOp::kAdd && !operand.isConstant()) rec.fold.scalar = alpha * *u::numberArg(operand);
    rec.fold.foldedWeight = folded.weight;
    rec.fold.foldedBias = folded.bias;
    pm.args[1] = Arg::constant(folded.weight);
    if (folded.bias >= 0) pm.args[2] = Arg::constant(folded.bias);
    return replaceWithProducer(g, m);
  };
}

// ---- activation post-ops ---------------------------------------------------------------------------

/// The post-op an activation node maps to and the catalogue rule that proves the mapping.
struct ActivationMapping {
  PostOpSpec spec;
  std::string ruleId;
};

std::optional<ActivationMapping> activationOf(const Node& n) {
  auto simple = [](const char* kind, const char* rule) {
    return ActivationMapping{PostOpSpec{kind, {}}, rule};
  };
  const std::string& op = n.op;
  if (!n.overload.empty() && n.overload != "default") return std::nullopt;
  if (op == "aten::relu") return simple("relu", "conv-relu-postop");
  if (op == "aten::silu") return simple("silu", "conv-silu-postop");
  if (op == "aten::sigmoid") return simple("sigmoid", "conv-sigmoid-postop");
  if (op == "aten::tanh") return simple("tanh", "conv-tanh-postop");
  if (op == "aten::hardswish") return simple("hardswish", "conv-hardswish-postop");
  if (op == "aten::hardsigmoid") return simple("hardsigmoid", "conv-hardsigmoid-postop");
  if (op == "aten::leaky_relu" && n.args.size() == 2) {
    auto slope = u::numberArg(n.args[1]);
    if (!slope) return std::nullopt;
    return ActivationMapping{PostOpSpec{"leaky_relu", {*slope}}, "conv-leaky-relu-postop"};
  }
  if (op == "aten::gelu" && n.args.size() == 2 && n.args[1].kind == Arg::Kind::String) {
    if (n.args[1].s == "none") return simple("gelu_erf", "conv-gelu-erf-postop");
    if (n.args[1].s == "tanh") return simple("gelu_tanh", "conv-gelu-tanh-postop");
    return std::nullopt;
  }
  if (op == "aten::elu" && n.args.size() == 4) {
    auto alpha = u::numberArg(n.args[1]), scale = u::numberArg(n.args[2]), inScale = u::numberArg(n.args[3]);
    if (!alpha || !scale || !inScale || *scale != 1.0 || *inScale != 1.0) return std::nullopt;
    return ActivationMapping{PostOpSpec{"elu", {*alpha}}, "conv-elu-postop"};
  }
  const double inf = std::numeric_limits<double>::infinity();
  std::optional<double> lo, hi;
  if (op == "aten::hardtanh" && n.args.size() == 3) {
    lo = u::numberArg(n.args[1]);
    hi = u::numberArg(n.args[2]);
    if (!lo || !hi) return std::nullopt;
  } else if (op == "aten::clamp" && n.args.size() == 3) {
    lo = n.args[1].kind == Arg::Kind::None ? std::optional<double>(-inf) : u::numberArg(n.args[1]);
    hi = n.args[2].kind == Arg::Kind::None ? std::optional<double>(inf) : u::numberArg(n.args[2]);
    if (!lo || !hi) return std::nullopt;
  } else if (op == "aten::clamp_min" && n.args.size() == 2) {
    lo = u::numberArg(n.args[1]);
    hi = inf;
    if (!lo) return std::nullopt;
  } else if (op == "aten::clamp_max" && n.args.size() == 2) {
    lo = -inf;
    hi = u::numberArg(n.args[1]);
    if (!hi) return std::nullopt;
  } else {
    return std::nullopt;
  }
  // torch's clamp with lo > hi gives hi everywhere; oneDNN's clip would give lo: not fused.
  if (*lo > *hi) return std::nullopt;
  std::string rule = "conv-clamp-postop";
  if (*lo == 0.0 && *hi == 6.0) rule = "conv-relu6-postop";
  else if (*lo == -1.0 && *hi == 1.0) rule = "conv-hardtanh-postop";
  return ActivationMapping{PostOpSpec{"clamp", {*lo, *hi}}, rule};
}

Rule::MatchFn matchActivation(std::string ruleId) {
  return [ruleId](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    const Node& n = g.node(id);
    auto mapping = activationOf(n);
    if (!mapping) return std::nullopt;
    std::vector<PostOpSpec> chain;
    const Node* p = n.args.empty() ? nullptr : singleUseFusedProducer(g, n.args[0]);
    if (!p) return why(whyNot, "activation input is not a single-use fused op"), std::nullopt;
    chain = postOpsOf(*p);
    // After a sum post-op a relu is proved by the residual-add-relu obligation (post-op order).
    std::string effective = mapping->ruleId;
    if (!chain.empty() && chain.back().kind == "sum" && mapping->spec.kind == "relu") effective = "residual-add-relu";
    if (effective != ruleId) return std::nullopt;
    return Match{p->id, id, 0};
  };
}

Status rewriteActivation(Graph& g, const Match& m, FusionRecord&) {
  auto mapping = activationOf(g.node(m.consumer));
  if (!mapping) return internalError("activation no longer matches");
  Node& p = g.mutableNode(m.anchor);
  std::vector<PostOpSpec> chain = postOpsOf(p);
  chain.push_back(mapping->spec);
  p.args[postOpsArgIndex(p)] = Arg::string(formatPostOps(chain));
  return replaceWithProducer(g, m);
}

// ---- residual add → sum post-op ----------------------------------------------------------------

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
  if (n.op != "aten::add" || n.overload != "Tensor" || n.args.size() != 3) return std::nullopt;
  auto alpha = u::numberArg(n.args[2]);
  if (!alpha) return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const Node* p = singleUseFusedProducer(g, n.args[static_cast<size_t>(k)]);
    if (!p) continue;
    const Arg& other = n.args[static_cast<size_t>(1 - k)];
    if (!other.isValue() || g.value(u::valueOf(other)).type != ir::ValueType::Tensor) continue;
    // y + alpha * r is a sum post-op with scale alpha; r + alpha * y only when alpha == 1.
    if (k == 1 && *alpha != 1.0) continue;
    bool hasSum = false;
    for (const PostOpSpec& s : postOpsOf(*p)) hasSum |= s.kind == "sum";
    if (hasSum) continue;  // one residual per fused op
    if (!sameKnownShape(g, p->outputs[0], u::valueOf(other))) {
      why(whyNot, "residual shape differs from (or is not known to equal) the output shape");
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
  const Arg residual = add.args[static_cast<size_t>(1 - m.operand)];
  const double scale = m.operand == 0 ? *u::numberArg(add.args[2]) : 1.0;
  std::vector<PostOpSpec> chain = postOpsOf(producer);
  chain.push_back(PostOpSpec{"sum", {scale}});
  add.op = producer.op;
  add.overload = producer.overload;
  add.args = producer.args;
  add.args[postOpsArgIndex(add)] = Arg::string(formatPostOps(chain));
  add.args.push_back(residual);
  g.eraseNode(m.anchor);
  return Status::ok();
}

}  // namespace

// ---- the rule table ------------------------------------------------------------------------------------

StatusOr<std::vector<Rule>> fusionRules(const std::vector<verify::RuleProof>& catalogue) {
  std::vector<Rule> rules;
  auto add = [&](const std::string& id, std::string summary, Rule::MatchFn match, Rule::RewriteFn rewrite,
                 bool folds = false) -> Status {
    VF_ASSIGN_OR_RETURN(Rule r, makeRule(catalogue, id, std::move(summary), std::move(match), std::move(rewrite), folds));
    rules.push_back(std::move(r));
    return Status::ok();
  };
  VF_RETURN_IF_ERROR(add("conv-bn-fold", "convolution + eval batch norm -> convolution with folded weight and bias",
                         matchBatchNormFold(kConvOp, false), rewriteBatchNormFold(false), true));
  VF_RETURN_IF_ERROR(add("linear-bn-fold", "linear + eval batch norm -> linear with folded weight and bias",
                         matchBatchNormFold(kLinearOp, false), rewriteBatchNormFold(false), true));
  VF_RETURN_IF_ERROR(add("per-channel-mul-fold", "conv/linear * per-channel constant -> scaled weight and bias",
                         matchChannelFold(ChannelOp::kMul), rewriteChannelFold(ChannelOp::kMul), true));
  VF_RETURN_IF_ERROR(add("per-channel-div-fold", "conv/linear / per-channel constant -> scaled weight and bias",
                         matchChannelFold(ChannelOp::kDiv), rewriteChannelFold(ChannelOp::kDiv), true));
  VF_RETURN_IF_ERROR(add("per-channel-add-fold", "conv/linear + per-channel constant -> shifted bias",
                         matchChannelFold(ChannelOp::kAdd), rewriteChannelFold(ChannelOp::kAdd), true));
  VF_RETURN_IF_ERROR(add("residual-add-sum-postop", "conv/linear + residual -> sum post-op",
                         matchResidualAdd, rewriteResidualAdd));
  for (const char* id : {"conv-relu-postop", "residual-add-relu", "conv-leaky-relu-postop", "conv-gelu-erf-postop",
                         "conv-gelu-tanh-postop", "conv-silu-postop", "conv-sigmoid-postop", "conv-tanh-postop",
                         "conv-hardswish-postop", "conv-hardsigmoid-postop", "conv-clamp-postop", "conv-relu6-postop",
                         "conv-hardtanh-postop", "conv-elu-postop"}) {
    VF_RETURN_IF_ERROR(add(id, "activation after conv/linear -> oneDNN eltwise post-op", matchActivation(id),
                           rewriteActivation));
  }
  // Last: a batch norm nothing could absorb becomes one per-channel multiply-add.
  VF_RETURN_IF_ERROR(add("bn-to-scale-shift", "eval batch norm -> addcmul(shift, x, scale)", matchStandaloneBatchNorm,
                         rewriteStandaloneBatchNorm, true));
  return rules;
}

verify::RuleProof plantedBugProof() {
  // The catalogue's own eps-dropped mutant of conv-bn-fold, presented as if it were a rule.
  for (const verify::RuleProof& p : verify::builtinRuleProofs()) {
    if (p.ruleId != "conv-bn-fold") continue;
    for (const verify::Mutant& mutant : p.mutants) {
      if (mutant.name != "eps-dropped") continue;
      verify::RuleProof planted;
      planted.ruleId = "test-planted-conv-bn-fold-without-eps";
      planted.math = "BN(conv(x,W,b)) = conv(x, W*gamma/sqrt(var), ...)  (WRONG: eps dropped)";
      planted.build = mutant.build;
      planted.usesDot = p.usesDot;
      return planted;
    }
  }
  return {};
}

StatusOr<Rule> plantedBugRule(const std::vector<verify::RuleProof>& catalogue) {
  return makeRule(catalogue, "test-planted-conv-bn-fold-without-eps",
                  "TEST ONLY: conv + batch norm folded without eps (deliberately wrong)",
                  matchBatchNormFold(kConvOp, true), rewriteBatchNormFold(true), /*foldsConstants=*/true);
}

}  // namespace verifuse::rules
