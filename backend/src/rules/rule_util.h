// Helpers shared by the rule families (internal header): queries on fused ops, the per-channel
// weight fold, and small helpers for writing obligations.
#pragma once

#include <string>
#include <vector>

#include "rules/fold_arithmetic.h"
#include "rules/graph_util.h"
#include "verifuse/rules/rules.h"
#include "verifuse/verify/catalog.h"

namespace verifuse::rules::util {

/// Records a why-not reason (if asked for) and returns false, for `return why(w, "..."), nullopt;`.
inline bool why(std::string* whyNot, const std::string& reason) {
  if (whyNot) *whyNot = reason;
  return false;
}

/// The fused op producing \p a, if it is the only reader of that value.
const ir::Node* singleUseFusedProducer(const ir::Graph& g, const ir::Arg& a);
/// The weight (bias) operand of verifuse::conv or verifuse::linear (ir::FusedConv::weight,
/// ir::FusedLinear::weight); std::logic_error on another operator.
const ir::Arg& fusedWeight(const ir::Node& fused);
ir::Arg& fusedWeight(ir::Node& fused);
const ir::Arg& fusedBias(const ir::Node& fused);
ir::Arg& fusedBias(ir::Node& fused);
/// Output channels of a fused op (its weight's dim 0), or -1 when the weight is not a constant.
int64_t outChannels(const ir::Graph& g, const ir::Node& fused);
/// Output rank and channel axis of a fused op (conv: axis 1; linear: the last axis), or -1.
int channelAxis(const ir::Graph& g, const ir::Node& fused, int* rank);

/// Why the fused op's weight (and bias) cannot be folded: empty when both are float32 constants
/// laid out row-major. Every fold reads W[o, i] at o*perChannel + i, so a strided view (GPT-2's
/// Conv1D weight after canonicalize-addmm-kn: [N, K] with strides [1, N]) must be refused.
std::string foldableWeightProblem(const ir::Graph& g, const ir::Node& fused);

/// The elements of a float32 constant with data, row-major (contiguous constants only: a strided
/// view gives an empty vector, like a constant without data).
std::vector<double> toDoubles(const ir::ConstantTensor* c);
ir::ConstantId argConstant(const ir::Arg& a);
/// The consumer's uses now read the anchor's output; the consumer is erased.
Status replaceWithProducer(ir::Graph& g, const Match& m);

/// The fused op's weight and bias folded by \p fold (fold_arithmetic.h), rounded to float32:
/// W'[o, ...] = W[o, ...] * scale[o] (folded on demand) and b'[o] = b[o] * biasScale[o] + shift[o]
/// (a bias is created when makeBias).
struct FoldedConstants {
  ir::ConstantId weight = -1, bias = -1;
};
FoldedConstants foldPerChannel(ir::Graph& g, const ir::Node& fused, const ChannelFold& fold, bool makeBias);

// ---- writing obligations ---------------------------------------------------------------------------

/// A factory that calls f(model, args...).
template <typename F, typename... A>
verify::ObligationFactory bind(F f, A... args) {
  return [f, args...](const verify::sem::DotModel& m) { return f(m, args...); };
}

/// A factory for an obligation that does not use the dot model: f(args...).
template <typename F, typename... A>
verify::ObligationFactory bindNoModel(F f, A... args) {
  return [f, args...](const verify::sem::DotModel&) { return f(args...); };
}

inline verify::Expr q(long long n, long long d) { return verify::Expr::rational(n, d); }

}  // namespace verifuse::rules::util
