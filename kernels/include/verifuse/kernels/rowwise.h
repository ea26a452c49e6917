// The fused row engine: a straight-line program of elementwise ops and row reductions (layer norm,
// RMSNorm, softmax with scale and mask, rotary embedding, GELU, silu(a)*b, bias/residual adds,
// bf16 casts) built once at plan time and run as ONE pass over cache-sized tiles of rows,
// vectorised (AVX2+FMA, or a scalar interpreter on other CPUs), threads from OpenMP. No oneDNN,
// no LibTorch, no code generation.
//
// Semantics: a program is the composition of the ops it lists, each evaluated in float32 in
// program order exactly as written (no reassociation across instructions; the summation order of
// reductions is fixed and documented on RowOp::kSum), so results match eager PyTorch within
// float32 rounding of the original expression. See kernels/README.md ("The row engine").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::kernels::rowwise {

/// Instructions. Operands are values defined earlier in the program; a value is, per row, either
/// a vector of the row's C elements or a per-row scalar (a reduction result, or an input whose
/// last dim is broadcast), or a constant. Mixing kinds broadcasts the scalar across the row, as
/// torch broadcasting of a keepdim=True reduction would.
enum class RowOp : uint8_t {
  kLoad,        ///< input \p index (f32, bf16 widened exactly, bool/uint8 as 0.0/1.0)
  kConst,       ///< constant f0
  // binary (a, b)
  kAdd, kSub, kMul, kDiv,
  kMax, kMin,   ///< torch.maximum / torch.minimum: NaN on either side gives NaN
  // unary (a), parameters in f0/f1
  kPow,         ///< a ** f0 as torch.pow(tensor, scalar): 2 -> a*a, 3 -> a*a*a, 0.5 -> sqrt,
                ///< -0.5 -> rsqrt, -1 -> 1/a, -2 -> 1/(a*a), 1 -> a, 0 -> 1, otherwise powf
  kNeg, kAbs, kExp, kLog, kSqrt,
  kRsqrt,       ///< 1/sqrt(a) (two IEEE roundings, as torch.rsqrt)
  kReciprocal, kSquare,
  kRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kErf,
  kClamp,       ///< min(max(a, f0), f1); use +-inf for a one-sided clamp
  kLeakyRelu,   ///< a > 0 ? a : a * f0
  kHardswish, kHardsigmoid,
  kElu,         ///< a > 0 ? a : f0 * expm1(a)
  kCastBf16,    ///< round to bf16 (nearest even, NaN -> canonical NaN, as torch) and back to f32
  // ternary
  kWhere,       ///< where(a != 0, b, c): a is a mask (e.g. a loaded bool input)
  // row reductions -> per-row scalar
  kSum,         ///< summation order: element i goes to partial sum (i/8)%4 lane i%8 (32 partial
                ///< sums, each accumulated in increasing i, starting at +0); then
                ///< v[l] = (p0[l]+p1[l]) + (p2[l]+p3[l]) and
                ///< sum = ((v0+v4)+(v2+v6)) + ((v1+v5)+(v3+v7)). Same order on every ISA path
                ///< and any thread count; error <= (C/32 + 5) eps * sum|x|, vs C eps for a plain
                ///< left-to-right loop.
  kMean,        ///< kSum / C (a division, as torch.mean)
  kRowMax, kRowMin,  ///< NaN anywhere in the row gives NaN (as torch.amax / amin)
  // row permutation
  kRotateHalf,  ///< HF transformers' rotate_half: halves h1, h2 of the row -> [-h2, h1] (C even)
  kStore,       ///< output \p index = a (a per-row scalar fills the row)
};
const char* rowOpName(RowOp op);

/// One instruction. Value ids are instruction indices (a kStore defines no value).
struct RowInstr {
  RowOp op = RowOp::kConst;
  int32_t a = -1, b = -1, c = -1;  ///< operand value ids
  int32_t index = -1;              ///< input (kLoad) or output (kStore) number
  float f0 = 0.f, f1 = 0.f;        ///< constant / exponent / clamp bounds / slope / alpha
};

/// A value handle returned by the builder methods.
struct RowValue {
  int32_t id = -1;
};

/// A straight-line program (value type). Build it with the methods below; a misuse (an operand
/// that is not a value defined earlier, a negative input index) is recorded and reported by
/// validate() and createRowKernel() as kInvalidArgument, never thrown.
class RowProgram {
 public:
  RowValue load(int input);
  RowValue constant(float v);
  RowValue add(RowValue a, RowValue b) { return binary(RowOp::kAdd, a, b); }
  RowValue sub(RowValue a, RowValue b) { return binary(RowOp::kSub, a, b); }
  RowValue mul(RowValue a, RowValue b) { return binary(RowOp::kMul, a, b); }
  RowValue div(RowValue a, RowValue b) { return binary(RowOp::kDiv, a, b); }
  RowValue maximum(RowValue a, RowValue b) { return binary(RowOp::kMax, a, b); }
  RowValue minimum(RowValue a, RowValue b) { return binary(RowOp::kMin, a, b); }
  RowValue binary(RowOp op, RowValue a, RowValue b);
  /// Any unary op (kNeg ... kCastBf16, kPow, kRotateHalf); \p f0, \p f1 are its parameters.
  RowValue unary(RowOp op, RowValue a, float f0 = 0.f, float f1 = 0.f);
  RowValue pow(RowValue a, float exponent) { return unary(RowOp::kPow, a, exponent); }
  RowValue clamp(RowValue a, float lo, float hi) { return unary(RowOp::kClamp, a, lo, hi); }
  RowValue where(RowValue mask, RowValue a, RowValue b);
  /// kSum, kMean, kRowMax or kRowMin over the row.
  RowValue reduce(RowOp op, RowValue a);
  RowValue rotateHalf(RowValue a) { return unary(RowOp::kRotateHalf, a); }
  RowValue castBf16(RowValue a) { return unary(RowOp::kCastBf16, a); }
  void store(int output, RowValue v);

  const std::vector<RowInstr>& instructions() const { return instrs_; }
  /// 1 + the largest input / output index used.
  int numInputs() const { return numInputs_; }
  int numOutputs() const { return numOutputs_; }
  /// OK, or kInvalidArgument naming the first misuse: bad operands, an output stored twice or
  /// never, no store at all.
  Status validate() const;
  /// Stable text, one instruction a line ("%3 = mean %2", "store out0, %9"), for golden tests and
  /// reports. Floats are printed with 9 significant digits (they round-trip). verifuse::rowwise
  /// carries its program in the IR in this form.
  std::string toString() const;
  /// toString()'s text back as a program ("%1 = load in0", "%2 = mean %1", "store out0, %5", one
  /// instruction a line; value ids must be the instruction indices). kInvalidArgument naming the
  /// line on any error, including a program validate() refuses.
  static StatusOr<RowProgram> parse(std::string_view text);

 private:
  RowValue push(RowInstr in);
  bool operandOk(RowValue v) const;
  std::vector<RowInstr> instrs_;
  int numInputs_ = 0, numOutputs_ = 0;
  std::string error_;
};

/// Element types at the kernel's boundary (computation is always f32).
enum class ElemType { kF32, kBF16, kBool };
const char* elemTypeName(ElemType t);

/// A tensor as the caller (the executor) holds it: element type, sizes and element strides.
struct TensorDesc {
  ElemType type = ElemType::kF32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  ///< in elements; 0 = expanded (broadcast) dim
};

/// Creation options.
struct RowKernelOptions {
  /// Run the scalar interpreter even where AVX2 is available (the tests' oracle).
  bool forceScalar = false;
  /// Run the AVX2 kernels even where AVX-512 is available (tests, benchmarks).
  bool forceAvx2 = false;
};

/// A program bound to concrete input/output layouts. Immutable: execute() is const and may be
/// called concurrently from any number of threads.
class RowKernel {
 public:
  virtual ~RowKernel() = default;
  /// Runs the program over every row. \p inputs / \p outputs: one data pointer per descriptor
  /// given at creation (pointing at the element with index 0; negative strides are fine).
  /// An output may be the same buffer as an input with the identical layout and element type (the
  /// in-place residual add) if the program loads that input before it stores that output; any
  /// other overlap between an output and an input or another output is kInvalidArgument (checked
  /// on the address ranges the layouts span). Rows run in parallel on the OpenMP pool
  /// (omp_get_max_threads(), fewer for small problems); the result is bit-identical for any
  /// thread count. No allocation after the first call on a thread (thread-local scratch).
  virtual Status execute(std::span<const void* const> inputs, std::span<void* const> outputs) const = 0;
  /// Rows R (product of the output's outer dims) and row length C (its last dim).
  virtual int64_t rows() const = 0;
  virtual int64_t cols() const = 0;
  /// "avx2" or "scalar".
  virtual const char* isa() const = 0;
  /// One line for reports: isa, R x C, tile (rows x chunk), scratch bytes per thread.
  virtual std::string describe() const = 0;
};

/// Binds \p program to layouts. The iteration space is the outputs' shape (all outputs must have
/// the same sizes, rank >= 1): R rows x C = sizes.back() columns. Each input is broadcast to it by
/// numpy rules (its sizes right-aligned; each 1 or equal; strides of size-1 dims ignored).
///
/// Refused with kUnsupported (the caller keeps ATen):
///  - an input whose last-dim stride is neither 1 (dense row) nor 0 / size 1 (one value per row),
///    or an output whose last-dim stride is not 1, or an output with overlapping elements
///    (a stride-0 dim of size > 1);
///  - C > 65536 (the row's temporaries would no longer stay in L2), element types other than
///    f32/bf16 for outputs or f32/bf16/bool for inputs;
///  - kRotateHalf with C odd.
/// kInvalidArgument: an invalid program, descriptor counts that do not match the program,
/// sizes/strides of different ranks, negative sizes, shapes that do not broadcast.
StatusOr<std::unique_ptr<RowKernel>> createRowKernel(const RowProgram& program,
                                                     const std::vector<TensorDesc>& inputs,
                                                     const std::vector<TensorDesc>& outputs,
                                                     const RowKernelOptions& options = {});

/// Whether the vectorised (AVX2) interpreter is used on this CPU.
bool avx2Available();

// ---- Builders: the programs the executor needs first --------------------------------------------
// Each documents its inputs (in0, in1, ...) and outputs; shapes are the caller's (any broadcast
// the factory accepts), dtypes are whatever the descriptors say (bf16 inputs are widened exactly,
// bf16 outputs rounded to nearest even on store).

/// torch.nn.functional.layer_norm over the last dim, optionally of (x + residual):
///   h = x [+ r];  m = mean(h);  d = h - m;  v = mean(d * d);  y = (d * rsqrt(v + eps)) [* g] [+ b]
/// (two-pass: centred variance, biased as torch). Inputs: in0 = x, then r if \p residual, then g
/// if \p gamma, then b if \p beta. Outputs: out0 = y, out1 = h if \p storeSum (the pre-norm
/// residual stream that the next block reads).
struct LayerNormSpec {
  float eps = 1e-5f;
  bool gamma = true, beta = true, residual = false, storeSum = false;
};
RowProgram layerNormProgram(const LayerNormSpec& spec);

/// HF Llama RMSNorm: h = float(x); v = mean(h * h); h = h * rsqrt(v + eps);
/// [h = castBf16(h) if \p bf16Input: HF casts back to the input dtype before the weight];
/// y = w * h. Inputs: in0 = x, in1 = w if \p weight. Out0 = y (store bf16 for a bf16 model: the
/// product is rounded once, as torch's bf16 mul). Optional residual like layer norm:
/// h0 = x + r (in1 = r, weight then in2), out1 = h0 if \p storeSum.
struct RmsNormSpec {
  float eps = 1e-6f;
  bool weight = true, bf16Input = false, residual = false, storeSum = false;
};
RowProgram rmsNormProgram(const RmsNormSpec& spec);

/// softmax(x * scale + mask, dim=-1) as torch computes it: s = x * scale (skipped if scale == 1);
/// additive: s = s + mask; boolean: s = where(mask, s, -inf) (True = attend, as SDPA's bool
/// attn_mask); m = rowmax(s); e = exp(s - m); y = e * (1 / sum(e)). A fully masked row gives NaN,
/// as torch.softmax of an all -inf row does. Inputs: in0 = x, in1 = mask. Out0 = y.
enum class MaskKind { kNone, kAdditive, kBoolean };
RowProgram softmaxProgram(float scale, MaskKind mask);

/// y = gelu(x [+ bias]) (approximate="none" uses erf, "tanh" the tanh form). Inputs: in0 = x,
/// in1 = bias if \p bias.
RowProgram geluProgram(bool tanhApproximation, bool bias = false);

/// y = silu(a) * b (Llama's MLP: act(gate(x)) * up(x)). Inputs: in0 = a, in1 = b.
RowProgram siluMulProgram();

/// HF rotary embedding: y = x * cos + rotate_half(x) * sin. Inputs: in0 = x, in1 = cos,
/// in2 = sin (usually broadcast over heads: stride 0).
RowProgram rotaryProgram();

/// y = (x [+ bias]) [+ residual]. Inputs: in0 = x, then bias, then residual, as enabled.
RowProgram biasResidualAddProgram(bool bias, bool residual);

}  // namespace verifuse::kernels::rowwise
