// Operator schemas: every operator whose operands the backend reads, with its operands named.
//
// A node's arguments are in its operator's schema order (the lowering normalizes kwargs and
// defaults), so "argument 1 of aten::convolution" is the weight. Code never writes that 1: it
// writes `operand(n, Convolution::weight)`, where the slot names are ATen's own (a Python test
// compares every aten:: and quantized_decomposed:: row below with torch's schema) and the
// verifuse:: rows define the fused ops the rules produce. One table, read by the rules, the
// planner, the runtime, the bindings (`_C.op_schemas()`) and the tests.
//
// Each row generates a struct, e.g.
//   struct Convolution { static constexpr std::string_view kOp = "aten::convolution";
//                        enum Operand : size_t { input, weight, bias, ..., groups, kArity }; };
// `operand(n, Convolution::weight)` finds the struct from the slot's type and checks that n's
// operator is the struct's (a string compare; operands are read while rules match and plans are
// built, never per run), so one operator's numbering is never read on another.
//
// Variadic tails: verifuse::conv/linear take one residual per "sum" post-op after their fixed
// operands (variadicOperands); verifuse::rowwise takes its inputs then its program (last).
// Generic code over operators that share a prefix uses the shape rows (Unary, Binary,
// BinaryWithAlpha), which accept any operator.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verifuse/ir/graph.h"

namespace verifuse::ir {

// X(Struct, "namespace::op", operand names in schema order...)
#define VERIFUSE_OP_SCHEMAS(X)                                                                                       \
  /* --- shapes shared by many operators (accept any operator) --- */                                                 \
  X(Unary, "", self)                                                                                                  \
  X(Binary, "", self, other)                                                                                          \
  X(BinaryWithAlpha, "", self, other, alpha)                                                                          \
  X(AttentionQkv, "", query, key, value) /* every scaled-dot-product-attention variant */                             \
  /* --- ATen: matrix products and convolution --- */                                                                 \
  X(Convolution, "aten::convolution", input, weight, bias, stride, padding, dilation, transposed, output_padding,      \
    groups)                                                                                                           \
  X(Linear, "aten::linear", input, weight, bias)                                                                      \
  X(Addmm, "aten::addmm", self, mat1, mat2, beta, alpha)                                                              \
  X(Mm, "aten::mm", self, mat2)                                                                                       \
  X(Bmm, "aten::bmm", self, mat2)                                                                                     \
  X(IntMm, "aten::_int_mm", self, mat2)                                                                               \
  /* --- ATen: elementwise --- */                                                                                     \
  X(Add, "aten::add", self, other, alpha)                                                                             \
  X(Sub, "aten::sub", self, other, alpha)                                                                             \
  X(Rsub, "aten::rsub", self, other, alpha)                                                                           \
  X(Mul, "aten::mul", self, other)                                                                                    \
  X(Div, "aten::div", self, other, rounding_mode)                                                                     \
  X(Pow, "aten::pow", self, exponent)                                                                                 \
  X(Where, "aten::where", condition, self, other)                                                                     \
  X(MaskedFill, "aten::masked_fill", self, mask, value)                                                               \
  X(Addcmul, "aten::addcmul", self, tensor1, tensor2, value)                                                          \
  X(Clamp, "aten::clamp", self, min, max)                                                                             \
  X(ClampMin, "aten::clamp_min", self, min)                                                                           \
  X(ClampMax, "aten::clamp_max", self, max)                                                                           \
  X(Hardtanh, "aten::hardtanh", self, min_val, max_val)                                                               \
  X(LeakyRelu, "aten::leaky_relu", self, negative_slope)                                                              \
  X(Elu, "aten::elu", self, alpha, scale, input_scale)                                                                \
  X(Gelu, "aten::gelu", self, approximate)                                                                            \
  /* --- ATen: reductions and normalization --- */                                                                    \
  X(Softmax, "aten::_softmax", self, dim, half_to_float)                                                              \
  X(SoftmaxInt, "aten::softmax", self, dim, dtype)                                                                    \
  X(SafeSoftmax, "aten::_safe_softmax", self, dim, dtype)                                                             \
  X(Amax, "aten::amax", self, dim, keepdim)                                                                           \
  X(Sum, "aten::sum", self, dim, keepdim, dtype)                                                                      \
  X(Mean, "aten::mean", self, dim, keepdim, dtype)                                                                    \
  X(NativeLayerNorm, "aten::native_layer_norm", input, normalized_shape, weight, bias, eps)                           \
  X(NativeBatchNorm, "aten::native_batch_norm", input, weight, bias, running_mean, running_var, training, momentum,    \
    eps)                                                                                                              \
  X(BatchNormNoTraining, "aten::_native_batch_norm_legit_no_training", input, weight, bias, running_mean,             \
    running_var, momentum, eps)                                                                                       \
  /* --- ATen: views, copies, data movement --- */                                                                    \
  X(View, "aten::view", self, size)                                                                                   \
  X(UnsafeView, "aten::_unsafe_view", self, size)                                                                     \
  X(Reshape, "aten::reshape", self, shape)                                                                            \
  X(Permute, "aten::permute", self, dims)                                                                             \
  X(Transpose, "aten::transpose", self, dim0, dim1)                                                                   \
  X(Unsqueeze, "aten::unsqueeze", self, dim)                                                                          \
  X(Squeeze, "aten::squeeze", self, dim)                                                                              \
  X(Expand, "aten::expand", self, size, implicit)                                                                     \
  X(Slice, "aten::slice", self, dim, start, end, step)                                                                \
  X(Select, "aten::select", self, dim, index)                                                                         \
  X(Cat, "aten::cat", tensors, dim)                                                                                   \
  X(SplitWithSizes, "aten::split_with_sizes", self, split_sizes, dim)                                                 \
  X(Unflatten, "aten::unflatten", self, dim, sizes)                                                                   \
  X(Flatten, "aten::flatten", self, start_dim, end_dim)                                                               \
  X(Narrow, "aten::narrow", self, dim, start, length)                                                                 \
  X(Clone, "aten::clone", self, memory_format)                                                                        \
  X(ToCopy, "aten::_to_copy", self, dtype, layout, device, pin_memory, non_blocking, memory_format)                   \
  X(Dropout, "aten::dropout", input, p, train)                                                                        \
  X(Embedding, "aten::embedding", weight, indices, padding_idx, scale_grad_by_freq, sparse)                           \
  /* --- ATen: pooling and attention --- */                                                                           \
  X(MaxPool2d, "aten::max_pool2d", self, kernel_size, stride, padding, dilation, ceil_mode)                           \
  X(MaxPool2dWithIndices, "aten::max_pool2d_with_indices", self, kernel_size, stride, padding, dilation, ceil_mode)    \
  X(AvgPool2d, "aten::avg_pool2d", self, kernel_size, stride, padding, ceil_mode, count_include_pad,                  \
    divisor_override)                                                                                                 \
  X(AdaptiveAvgPool2d, "aten::_adaptive_avg_pool2d", self, output_size)                                               \
  X(FlashAttentionCpu, "aten::_scaled_dot_product_flash_attention_for_cpu", query, key, value, dropout_p, is_causal,  \
    attn_mask, scale)                                                                                                 \
  X(ScaledDotProductAttention, "aten::scaled_dot_product_attention", query, key, value, attn_mask, dropout_p,         \
    is_causal, scale, enable_gqa)                                                                                     \
  /* --- PT2E's quantize/dequantize --- */                                                                            \
  X(QuantizePerTensor, "quantized_decomposed::quantize_per_tensor", input, scale, zero_point, quant_min, quant_max,   \
    dtype)                                                                                                            \
  X(DequantizePerTensor, "quantized_decomposed::dequantize_per_tensor", input, scale, zero_point, quant_min,          \
    quant_max, dtype, out_dtype)                                                                                      \
  X(DequantizePerChannel, "quantized_decomposed::dequantize_per_channel", input, scales, zero_points, axis,           \
    quant_min, quant_max, dtype, out_dtype)                                                                           \
  /* --- verifuse's fused ops (what the rules produce; the runtime runs them) --- */                                  \
  /* conv/linear: one residual operand per "sum" post-op follows post_ops (variadicOperands) */                        \
  X(FusedConv, "verifuse::conv", x, weight, bias, stride, padding, dilation, groups, post_ops)                        \
  X(FusedLinear, "verifuse::linear", x, weight, bias, post_ops)                                                       \
  /* int8: u8/s8 codes in, the dequantized weights' scales folded into the kernel, requantized */                      \
  /* (y_*) or float32 out, an optional residual summed on its own scale and zero point */                              \
  X(QConv, "verifuse::qconv", x, weight, bias, stride, padding, dilation, groups, post_ops, x_scale, x_zp, w_scales,  \
    w_zps, y_scale, y_zp, y_qmin, y_qmax, y_dtype, residual, r_scale, r_zp)                                           \
  X(QLinear, "verifuse::qlinear", x, weight, bias, post_ops, x_scale, x_zp, w_scales, w_zps, y_scale, y_zp, y_qmin,   \
    y_qmax, y_dtype, residual, r_scale, r_zp)                                                                         \
  X(FusedIntMm, "verifuse::int_mm", a, weight)                                                                        \
  X(FusedInt8WeightMm, "verifuse::int8_weight_mm", x, weight)                                                         \
  X(FusedInt4WeightMm, "verifuse::int4_weight_mm", x, weight, scale, zero_point, bias, group_size)                     \
  X(FusedQuantize, "verifuse::quantize", input, scale, zero_point, quant_min, quant_max, dtype)                       \
  X(QMaxPool, "verifuse::qmax_pool", codes, kernel_size, stride, padding, dilation, ceil_mode)

/// Finds a slot's schema struct from the slot's type (each struct declares schemaOfSlot as a
/// hidden friend taking its Operand enum).
template <class Slot>
using SchemaOf = decltype(schemaOfSlot(std::declval<Slot>()));

#define VERIFUSE_DEFINE_SCHEMA_(Name, op, ...)                                        \
  struct Name {                                                                       \
    static constexpr std::string_view kOp = op;                                       \
    static constexpr std::string_view kOperandNames = #__VA_ARGS__;                   \
    enum Operand : size_t { __VA_ARGS__, kArity };                                    \
    /** True when \p nodeOp is this schema's operator (or the schema is a shape). */  \
    static bool covers(std::string_view nodeOp) { return kOp.empty() || nodeOp == kOp; } \
    friend Name schemaOfSlot(Operand);                                                \
  };
VERIFUSE_OP_SCHEMAS(VERIFUSE_DEFINE_SCHEMA_)
#undef VERIFUSE_DEFINE_SCHEMA_

namespace detail {
[[noreturn]] void operandOfWrongOperator(const Node& n, std::string_view schemaOp);
}

/// The operand in \p slot of \p n: `operand(n, Convolution::weight)`. Throws std::out_of_range
/// when n has fewer operands (callers check hasOperands first where a graph may be malformed) and
/// std::logic_error when n is another operator (a programming error).
template <class Slot>
const Arg& operand(const Node& n, Slot slot) {
  if (!SchemaOf<Slot>::covers(n.op)) detail::operandOfWrongOperator(n, SchemaOf<Slot>::kOp);
  return n.args.at(static_cast<size_t>(slot));
}
template <class Slot>
Arg& operand(Node& n, Slot slot) {
  if (!SchemaOf<Slot>::covers(n.op)) detail::operandOfWrongOperator(n, SchemaOf<Slot>::kOp);
  return n.args.at(static_cast<size_t>(slot));
}

/// True when \p n has exactly the schema's operands (`hasOperands<Convolution>(n)`).
template <class Schema>
bool hasOperands(const Node& n) {
  return n.args.size() == Schema::kArity;
}
/// True when \p n has at least the schema's operands (a variadic tail may follow).
template <class Schema>
bool hasAtLeastOperands(const Node& n) {
  return n.args.size() >= Schema::kArity;
}
/// The operands after the schema's fixed ones (verifuse::conv/linear's residuals).
template <class Schema>
std::span<const Arg> variadicOperands(const Node& n) {
  if (n.args.size() <= Schema::kArity) return {};
  return std::span<const Arg>(n.args).subspan(Schema::kArity);
}

/// A node's operands built by name, in the schema's order; operands not set are None:
///   n.args = OperandsOf<FusedLinear>().set(FusedLinear::x, x).set(FusedLinear::weight, w)
///                .set(FusedLinear::bias, b).set(FusedLinear::post_ops, Arg::string("")).take();
template <class Schema>
class OperandsOf {
 public:
  OperandsOf& set(typename Schema::Operand slot, Arg a) {
    operands_.at(static_cast<size_t>(slot)) = std::move(a);
    return *this;
  }
  /// Appends a variadic operand after the fixed ones (a residual of verifuse::conv/linear).
  OperandsOf& append(Arg a) {
    operands_.push_back(std::move(a));
    return *this;
  }
  std::vector<Arg> take() { return std::move(operands_); }

 private:
  std::vector<Arg> operands_ = std::vector<Arg>(Schema::kArity);
};

/// The tensor an elementwise or view operator reads first: ATen names it self (or input) and puts
/// it first in every such schema.
inline const Arg& selfOperand(const Node& n) { return operand(n, Unary::self); }

// ---- by name, for code generic over operators with differently placed operands ----------------

/// One row of the table, as data.
struct OpSchemaInfo {
  std::string_view op;                  ///< "aten::convolution"; empty for the shape rows
  std::string_view schema;              ///< the struct's name, "Convolution"
  std::vector<std::string_view> operands;
};
/// Every row, in table order.
const std::vector<OpSchemaInfo>& opSchemas();
/// The row for \p op ("aten::convolution"), or null.
const OpSchemaInfo* findOpSchema(std::string_view op);
/// Index of operand \p name in \p n's operator's schema, or nullopt (no schema, no such operand).
std::optional<size_t> operandIndex(const Node& n, std::string_view name);
/// The operand named \p name of \p n (`namedOperand(n, "post_ops")` for conv and linear alike),
/// or null when n's operator has no such operand or n has too few operands.
const Arg* namedOperand(const Node& n, std::string_view name);
Arg* namedOperand(Node& n, std::string_view name);
/// namedOperand that must be there: std::logic_error (a programming error) when it is not.
const Arg& requiredOperand(const Node& n, std::string_view name);
Arg& requiredOperand(Node& n, std::string_view name);

// ---- verifuse::rowwise: inputs..., program ------------------------------------------------------

inline constexpr std::string_view kRowwiseOp = "verifuse::rowwise";
/// The row program's text (the last operand), or null when there is none.
const Arg* rowwiseProgram(const Node& n);
/// The rowwise op's tensor inputs (every operand before the program).
std::span<const Arg> rowwiseInputs(const Node& n);

}  // namespace verifuse::ir
