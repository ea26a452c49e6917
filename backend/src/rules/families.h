// The rule families (internal header): each function returns the declarations of one file, in
// the order they are tried. registry.cpp puts the families in pipeline order.
#pragma once

#include <vector>

#include "verifuse/rules/rules.h"

namespace verifuse::rules::families {

// canonicalize.cpp
std::vector<RuleDeclaration> canonicalizeOps();    ///< aten conv/addmm/mm/linear -> verifuse ops
std::vector<RuleDeclaration> canonicalizeViews();  ///< the N-d linear's flatten/unflatten views
// activation_recognize.cpp
std::vector<RuleDeclaration> activationRecognition();  ///< written-out GELU (tanh, erf), SiLU -> the ATen op
// attention.cpp
std::vector<RuleDeclaration> attentionRecognition();   ///< eager attention -> SDPA
std::vector<RuleDeclaration> attentionGroupedKv();     ///< SDPA over repeat_kv heads -> grouped-query SDPA
RuleDeclaration plantedAttentionScaleOneOverD();        ///< test only, deliberately wrong
// qkv_concat.cpp
std::vector<RuleDeclaration> qkvConcat();              ///< linears of one input -> one linear + slices
// no_ops.cpp
std::vector<RuleDeclaration> noOps();              ///< detach/alias, clone, eval dropout, views
// common_subexpression.cpp
std::vector<RuleDeclaration> commonSubexpressions();  ///< a repeated deterministic node -> the earlier one
// dead_code.cpp
std::vector<RuleDeclaration> deadCode();
// batch_norm_fold.cpp
std::vector<RuleDeclaration> batchNormFolds();     ///< conv-bn-fold, linear-bn-fold
std::vector<RuleDeclaration> batchNormScaleShift();  ///< bn-to-scale-shift (tried after every other fusion)
RuleDeclaration plantedBatchNormFoldWithoutEps();  ///< test only, deliberately wrong
// per_channel_fold.cpp
std::vector<RuleDeclaration> perChannelFolds();
// residual_add.cpp
std::vector<RuleDeclaration> residualAdd();
// activation_postops.cpp
std::vector<RuleDeclaration> activationPostOps();
// quantized.cpp (the rules themselves: quantized_{folds,postops,requantize,kernels}.cpp)
std::vector<RuleDeclaration> quantizedInt8();  ///< PT2E int8 chains -> verifuse::qconv / qlinear
// quantized_folds.cpp
RuleDeclaration plantedInt8DroppedZeroPoint();  ///< test only, deliberately wrong
// row_fusion.cpp
std::vector<RuleDeclaration> rowFusion();  ///< elementwise/row-reduction chains -> verifuse::rowwise

}  // namespace verifuse::rules::families
