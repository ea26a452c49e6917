// The int8 rules' shared pieces (internal header): the op names, quantize/dequantize parameters,
// the int8 ops' operands by name, their float32 results, and the rounding of the obligations.
// quantized.cpp describes the rules and their integer semantics and lists them in pipeline order;
// each rule (pattern, guards, rewrite, obligation, mutants, declaration) is in one of
// quantized_{folds,postops,requantize,kernels}.cpp.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/verify/tensor_semantics.h"

namespace verifuse::rules::families::quantized {

using ir::Arg;
using ir::ConstantTensor;
using ir::DType;
using ir::Graph;
using ir::hasOperands;
using ir::namedOperand;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::OperandsOf;
using ir::selfOperand;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
using verify::Sort;
namespace sem = verify::sem;
namespace dnnl = verify::sem::onednn;
namespace u = util;

constexpr const char* kQuantize = "quantized_decomposed::quantize_per_tensor";
constexpr const char* kDequantize = "quantized_decomposed::dequantize_per_tensor";
constexpr const char* kDequantizeChannel = "quantized_decomposed::dequantize_per_channel";
constexpr const char* kQConv = "verifuse::qconv";
constexpr const char* kQLinear = "verifuse::qlinear";

// The int8 ops' operands are ir::QConv's and ir::QLinear's (ir/op_schema.h).
inline bool isInt8Op(const Node& n) { return n.op == kQConv || n.op == kQLinear; }

/// An operand of an int8 op by name: qconv and qlinear share the names after their geometry
/// (post_ops, x_scale, ..., y_scale, y_zp, y_qmin, y_qmax, y_dtype, residual, r_scale, r_zp), at
/// different positions. Throws std::logic_error when \p n has no such operand (not an int8 op).
const Arg& int8Operand(const Node& n, std::string_view name);
Arg& int8Operand(Node& n, std::string_view name);

/// quantize_per_tensor's dtype (the u8/s8 of its codes).
DType quantizedDType(const Node& quantize);

inline bool goodScale(double s) { return std::isfinite(s) && s > 0; }

/// The dtype's full range for u8/s8 (what oneDNN saturates to).
std::optional<std::pair<int64_t, int64_t>> int8Range(DType t);

/// quantize_per_tensor / dequantize_per_tensor parameters (their shared operands input, scale,
/// zero_point, quant_min, quant_max, dtype; a dequantize's out_dtype must be None).
struct TensorQParams {
  Arg input;
  double scale = 0;
  int64_t zeroPoint = 0, qmin = 0, qmax = 0;
  DType dtype = DType::Undefined;
};

/// Of \p n, a quantize_per_tensor or dequantize_per_tensor (another operator is a logic_error).
std::optional<TensorQParams> tensorQParams(const Node& n, std::string* whyNot);

/// dequantize_per_tensor(xq, ...) feeding \p a: its parameters (input = the quantized value).
std::optional<TensorQParams> dequantizedInput(const Graph& g, const Arg& a, std::string* whyNot);

const ConstantTensor* constantOf(const Graph& g, const Arg& a);

/// A single-use int8 op producing \p a with a float32 result (not yet requantized).
const Node* floatInt8Producer(const Graph& g, const Arg& a);

/// floatInt8Producer of \p a, or of the input of a single-use aten::view producing \p a (BERT's
/// linears are 2-D and their results viewed back to [batch, seq, features] before the GELU and the
/// quantize); *view is that view or null. Elementwise post-ops and the requantization commute
/// with a view (the obligations prove it on an explicit tensor).
const Node* floatInt8ProducerThroughView(const Graph& g, const Arg& a, const Node** view);

// ---- obligations ----------------------------------------------------------------------------------

/// round(t), ties to even (torch.round, and oneDNN's nearbyint in the default rounding mode).
Expr roundHalfEven(ObligationBuilder& ob, Expr t, const std::string& name);

/// round(t), ties away from zero (std::round): a mutant's rounding.
Expr roundHalfAway(ObligationBuilder& ob, Expr t, const std::string& name);

}  // namespace verifuse::rules::families::quantized

namespace verifuse::rules::families {

// The int8 rules' declarations, one function each (pattern, guards, rewrite, obligation and
// mutants beside it), listed in pipeline order by quantizedInt8() (quantized.cpp).
// quantized_folds.cpp
RuleDeclaration int8ConvDequant();
RuleDeclaration int8LinearDequant();
// quantized_postops.cpp
RuleDeclaration int8ReluPostOp();
RuleDeclaration int8ClampPostOp();
RuleDeclaration int8GeluPostOp();
RuleDeclaration int8ReluAcrossRequant();
// quantized_requantize.cpp
RuleDeclaration int8Requantize();
RuleDeclaration int8MaxPoolCodes();
RuleDeclaration int8RequantizeCat();
RuleDeclaration int8RequantizeMaxPool();
RuleDeclaration int8SelectCodes();
RuleDeclaration int8ResidualSum();
// quantized_kernels.cpp
RuleDeclaration int8IntMm();
RuleDeclaration int8WeightOnlyMm();
RuleDeclaration int4WeightOnlyMm();
RuleDeclaration int8QuantizeKernel();

}  // namespace verifuse::rules::families
