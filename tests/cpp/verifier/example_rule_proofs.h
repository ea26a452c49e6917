// Test fixtures for the prover machinery (proveAll, the proof cache): a few RuleProofs written
// here, because the verifier owns no rule. The product's rules and their proofs live in
// backend/src/rules/ and are tested in tests/cpp/passes/rules_test.cpp.
#pragma once

#include <vector>

#include "verifuse/verify/catalog.h"

namespace verifuse::verify::examples {

/// relu(BN(conv(x))) = oneDNN conv' with eltwise_relu(0), conv' the BN-folded conv: the composition
/// of two rules in one obligation (dot model, rsqrt, relu). It was a catalogue entry without a
/// rule (the pipeline applies conv-bn-fold, then conv-relu-postop); here it exercises the prover.
inline Obligation convBnReluFold(const sem::DotModel& m, bool biasBug) {
  ObligationBuilder ob("example-conv-bn-relu-fold");
  sem::BatchNormParams bn = sem::batchNormParams("bn", "o");
  sem::assumeBatchNorm(ob, bn);
  sem::TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]");
  Expr source = sem::relu(sem::batchNormEval(ob, m.linear(ob, w, x, b), bn));
  Expr s = bn.gamma * sem::batchNormRsqrt(ob, bn);
  Expr bias = biasBug ? b + bn.beta - s * bn.mean : (b - bn.mean) * s + bn.beta;
  ob.prove("out[o]", source, sem::onednn::eltwiseRelu(m.linear(ob, m.scale(s, w), x, bias), 0));
  return ob.build();
}

/// (dot(W,X) + b) / d = dot(W/d, X) + b/d: division in the source (definedness) and the target.
inline Obligation divFold(const sem::DotModel& m, bool biasBug) {
  ObligationBuilder ob("example-div-fold");
  sem::TensorTerm w = m.tensor("conv.weight[o]"), x = m.tensor("x[window]");
  Expr b = ob.var("conv.bias[o]"), d = ob.var("div.other[o]");
  ob.prove("out[o]", m.linear(ob, w, x, b) / d, m.linear(ob, m.scale(1 / d, w), x, biasBug ? b : b / d));
  return ob.build();
}

/// relu(y) = eltwise_relu(y, 0); the mutant uses alpha = 1.
inline Obligation reluPostOp(int alpha) {
  ObligationBuilder ob("example-relu-postop");
  Expr y = ob.var("conv.out[o]");
  ob.prove("out[o]", sem::relu(y), sem::onednn::eltwiseRelu(y, alpha));
  return ob.build();
}

inline std::vector<RuleProof> exampleRuleProofs() {
  std::vector<RuleProof> proofs;
  proofs.push_back({"example-conv-bn-relu-fold",
                    "relu(BN(conv(x))) = conv'(x) with eltwise_relu(0), conv' the BN-folded conv",
                    [](const sem::DotModel& m) { return convBnReluFold(m, false); },
                    true,
                    {{"bias-not-rescaled", "b' = b + beta - s*mean",
                      [](const sem::DotModel& m) { return convBnReluFold(m, true); }}}});
  proofs.push_back({"example-div-fold",
                    "conv(x,W,b) / d[o] = conv(x, W/d[o], b/d[o])",
                    [](const sem::DotModel& m) { return divFold(m, false); },
                    true,
                    {{"bias-not-divided", "b' = b", [](const sem::DotModel& m) { return divFold(m, true); }}}});
  proofs.push_back({"example-relu-postop",
                    "relu(y) = eltwise_relu(y, alpha=0)",
                    [](const sem::DotModel&) { return reluPostOp(0); },
                    false,
                    {{"relu-alpha-wrong", "eltwise_relu with alpha=1", [](const sem::DotModel&) { return reluPostOp(1); }}}});
  return proofs;
}

}  // namespace verifuse::verify::examples
