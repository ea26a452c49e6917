// Helpers shared by the rule families (see rule_util.h).
#include "rules/rule_util.h"

#include <stdexcept>
#include <string_view>

#include "verifuse/passes/pipeline.h"

namespace verifuse::rules::util {

using ir::Arg;
using ir::ConstantId;
using ir::Graph;
using ir::Node;

const Node* singleUseFusedProducer(const Graph& g, const Arg& a) {
  const Node* p = producerOf(g, a);
  if (!p || !isFusedOp(*p)) return nullptr;
  if (!hasSingleUse(g, valueOf(a))) return nullptr;
  return p;
}

namespace {
const Arg& fusedOperand(const Node& fused, std::string_view name) {
  if (!isFusedOp(fused)) throw std::logic_error(fused.op + " is not verifuse::conv or verifuse::linear");
  return ir::requiredOperand(fused, name);
}
}  // namespace

const Arg& fusedWeight(const Node& fused) { return fusedOperand(fused, "weight"); }
Arg& fusedWeight(Node& fused) { return const_cast<Arg&>(fusedOperand(fused, "weight")); }
const Arg& fusedBias(const Node& fused) { return fusedOperand(fused, "bias"); }
Arg& fusedBias(Node& fused) { return const_cast<Arg&>(fusedOperand(fused, "bias")); }

int64_t outChannels(const Graph& g, const Node& fused) {
  const Arg& w = fusedWeight(fused);
  if (!w.isConstant()) return -1;
  return g.constants()[static_cast<size_t>(w.i)].sizes.at(0);
}

int channelAxis(const Graph& g, const Node& fused, int* rank) {
  const auto* shape = knownShape(g, fused.outputs[0]);
  if (fused.op == kConvOp) {
    int r = static_cast<int>(g.constants()[static_cast<size_t>(fusedWeight(fused).i)].sizes.size());
    if (shape && static_cast<int>(shape->size()) != r) return -1;  // unbatched conv: not folded
    *rank = r;
    return 1;
  }
  if (!shape) return -1;
  *rank = static_cast<int>(shape->size());
  return *rank - 1;
}

std::string foldableWeightProblem(const Graph& g, const Node& fused) {
  for (const bool isBias : {false, true}) {
    const Arg& a = isBias ? fusedBias(fused) : fusedWeight(fused);
    if (isBias && a.kind == Arg::Kind::None) continue;
    const char* what = isBias ? "bias" : "weight";
    if (!a.isConstant()) return std::string("the producer's ") + what + " is not a frozen constant";
    const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(a.i));
    // bfloat16 (a bf16 model): folded from its exact float32 widening into float32 constants; the
    // kernel's bf16 packing of those is the one rounding, bounded by the instance check.
    if (c.dtype != ir::DType::Float32 && c.dtype != ir::DType::BFloat16) {
      return std::string("the producer's ") + what + " is not float32 or bfloat16";
    }
    if (!c.isContiguous()) {
      return std::string("the producer's ") + what +
             " is a strided view of another constant (e.g. GPT-2 Conv1D's transposed weight); folds read row-major data";
    }
  }
  return "";
}

std::vector<double> toDoubles(const ir::ConstantTensor* c) {
  std::vector<double> out;
  if (!c || !c->data || !c->isContiguous()) return out;
  std::shared_ptr<std::vector<float>> keep;
  const float* p = c->widenedFloatData(keep);  // float32, or bfloat16 widened
  if (p) out.assign(p, p + c->numel());
  return out;
}

ConstantId argConstant(const Arg& a) { return a.isConstant() ? static_cast<ConstantId>(a.i) : -1; }

Status replaceWithProducer(Graph& g, const Match& m) {
  g.replaceAllUses(g.node(m.consumer).outputs[0], g.node(m.anchor).outputs[0]);
  g.eraseNode(m.consumer);
  return Status::ok();
}

FoldedConstants foldPerChannel(Graph& g, const Node& fused, const ChannelFold& fold, bool makeBias) {
  const ir::ConstantTensor& w = g.constants()[static_cast<size_t>(fusedWeight(fused).i)];
  const Arg& biasArg = fusedBias(fused);
  const ir::ConstantTensor* b = biasArg.isConstant() ? &g.constants()[static_cast<size_t>(biasArg.i)] : nullptr;
  const int64_t channels = w.sizes[0];
  const int64_t perChannel = channels ? w.numel() / channels : 0;
  // Row-major reads below: a strided weight is never folded (the matchers refuse it, see
  // foldableWeightProblem); should one get here, its folded constant has no data and the
  // instance check reports it Unsupported instead of validating wrong numbers.
  const bool computable = w.hasData() && w.isContiguous() && (b == nullptr || (b->data && b->isContiguous())) &&
                          !fold.scale.empty();
  FoldedConstants out;
  std::vector<float> bv;
  std::vector<double> bias = toDoubles(b);
  std::function<std::shared_ptr<std::vector<float>>()> lazyWeight;
  if (computable) {
    // The weight is folded on demand (in double, stored as float): the source is kept alive by
    // reference, never copied here.
    std::shared_ptr<void> sourceOwner = w.owner;
    const float* sourceData = w.dtype == ir::DType::Float32 ? static_cast<const float*>(w.data) : nullptr;
    auto sourceLazy = w.materialize;
    if (w.dtype == ir::DType::BFloat16) {  // a bf16 model's weight, widened (exactly) when folded
      ir::ConstantTensor source = w;
      sourceLazy = [source]() {
        std::shared_ptr<std::vector<float>> keep;
        source.widenedFloatData(keep);
        return keep;
      };
    }
    const int64_t numel = w.numel();
    lazyWeight = [sourceOwner, sourceData, sourceLazy, fold, channels, perChannel, numel]() {
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
          (*folded)[k] = static_cast<float>(fold.weight(static_cast<size_t>(o), static_cast<double>(src[k])));
        }
      }
      return folded;
    };
    if (b || makeBias) {
      bv.resize(static_cast<size_t>(channels));
      for (int64_t o = 0; o < channels; ++o) {
        double bo = bias.empty() ? 0.0 : bias[static_cast<size_t>(o)];
        bv[static_cast<size_t>(o)] = static_cast<float>(fold.bias(static_cast<size_t>(o), bo));
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

}  // namespace verifuse::rules::util
