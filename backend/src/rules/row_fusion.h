// Row fusion's translation table, shared by the rule (row_fusion.cpp: matching and rewrite) and
// its obligation (row_fusion_obligation.cpp), so the proof is about the very table the rewrite
// uses. Internal to the rules.
#pragma once

#include <cmath>
#include <vector>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/kernels/rowwise.h"
#include "verifuse/verify/semantics.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families::row_fusion {

using ir::Arg;
using ir::DType;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::ValueId;
using kernels::rowwise::RowInstr;
using kernels::rowwise::RowOp;
using kernels::rowwise::RowProgram;
using kernels::rowwise::RowValue;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
namespace sem = verify::sem;
namespace u = util;
using u::dtypeOf;

constexpr const char* kRowwise = "verifuse::rowwise";

// ---- the translation table ----------------------------------------------------------------------

/// The ATen ops the table translates (one entry each).
enum class Kind {
  Add, Sub, Rsub, Mul, Div, Neg, Exp, Log, Sqrt, Rsqrt, Reciprocal, Pow, Relu, GeluErf, GeluTanh, Silu,
  Sigmoid, Tanh, Erf, Clamp, Where, Identity, Mean, Sum, Amax, LayerNorm, Softmax, RotateHalf
};

/// Deliberately wrong translations (mutants): each must come out Refuted.
enum class Bug {
  None,
  AddNumberDropped,    ///< add(t, number) translated as t (RMSNorm's eps dropped)
  EpsOutsideRsqrt,     ///< RMSNorm composed as rsqrt(v) + eps
  ReductionWrongAxis,  ///< mean over dim 0 accepted as the row mean
  RotarySignFlipped,   ///< rotate_half as [h2, -h1]
  RotaryHalvesSwapped, ///< cat(-x[..., :C/2], x[..., C/2:]) accepted as rotate_half
  SoftmaxWrongAxis,    ///< softmax over dim 0 accepted as the row softmax
  MaskAfterSoftmax,    ///< softmax(x*c + m) composed as softmax(x*c) + m
  GeluSwapped,         ///< gelu 'none' (erf) translated to the tanh GELU
  LayerNormNoMean,     ///< layer norm without the mean subtraction
  Bf16RoundingDropped, ///< a bf16 op's result left in float32 (eager rounds it to bf16)
};

struct OpSpec {
  Kind kind = Kind::Add;
  double alpha = 1;              ///< add/sub/rsub: a + alpha*b
  double exponent = 1;           ///< pow
  double lo = -INFINITY, hi = INFINITY;  ///< clamp
  double eps = 0;                ///< layer norm
  bool weight = false, bias = false;     ///< layer norm
  std::vector<Arg> operands;     ///< in table order (layer norm: x, weight?, bias?; where: mask, a, b)
  std::vector<NodeId> internal;  ///< nodes inside the pattern (rotate_half's slices and neg)
  /// The op's result is bfloat16 (a bf16 model): eager computes it in float32 from the widened
  /// operands and rounds once to bf16, so the entry's instructions are followed by a bf16 rounding.
  bool bf16Result = false;
};

bool isComposite(Kind k);
/// Entries that read a whole row of their (first) operand.
bool readsRow(Kind k);
/// The row instructions of one table entry. \p in are the operands' row values (numbers already
/// constants), in OpSpec::operands order. Used by the rule and, with the same code, by its
/// obligation (which interprets the program symbolically), so the proof is about this function.
RowValue emit(RowProgram& p, const OpSpec& s, const std::vector<RowValue>& in, Bug bug);
/// emit() for a chain member (row_fusion.cpp).
RowValue emitMember(RowProgram& p, const OpSpec& s, const std::vector<RowValue>& in, Bug bug);

/// Which part of the table an obligation states (All for the rule; a mutant's piece alone).
enum class Piece { All, Entries, RmsNorm, Reduction, Rotary, Softmax, Gelu, LayerNorm, Bf16 };
/// The rule's obligation (row_fusion_obligation.cpp).
Obligation rowFusionObligation(Bug bug, Piece piece);

}  // namespace verifuse::rules::families::row_fusion
