// Factories for every oneDNN kernel: conv, inner product, matmul, pooling, eltwise, binary,
// softmax, layer norm, concat and reorder. All return a Kernel or a Status (kUnimplemented when
// oneDNN has no implementation: the caller falls back to ATen).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/layout.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// Element-wise functions, usable as a standalone kernel or as a fused post-op. The mapping to
/// oneDNN is exact (alpha/beta below are oneDNN's):
///   kRelu        eltwise_relu(0)            kLeakyRelu(slope)  eltwise_relu(alpha=slope)
///   kGeluErf     eltwise_gelu_erf           kGeluTanh          eltwise_gelu_tanh
///   kSilu        eltwise_swish(alpha=1)     kSigmoid           eltwise_logistic
///   kTanh        eltwise_tanh               kElu(alpha)        eltwise_elu(alpha)
///   kHardswish   eltwise_hardswish(1/6, 1/2):   x * clamp(x/6 + 1/2, 0, 1)
///   kHardsigmoid eltwise_hardsigmoid(1/6, 1/2): clamp(x/6 + 1/2, 0, 1)
///   kClamp(lo,hi) eltwise_clip(lo, hi)       (hardtanh, relu6 = clamp(0, 6))
///   kLinear(a,b) eltwise_linear: a*x + b    (e.g. attention's 1/sqrt(d) scale)
enum class Activation {
  kRelu, kLeakyRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kHardswish, kHardsigmoid,
  kClamp, kElu, kLinear,
};
const char* activationName(Activation a);

/// Binary algorithms (standalone binary kernel and binary post-ops).
enum class BinaryAlg { kAdd, kMul, kSub, kDiv, kMax, kMin };
const char* binaryAlgName(BinaryAlg a);

/// One fused post-op, applied in list order to the primary op's f32 result.
struct PostOp {
  enum class Kind { kEltwise, kSum, kBinary };
  Kind kind = Kind::kEltwise;
  Activation act = Activation::kRelu;
  /// kEltwise: the torch-level parameters (leaky slope, clamp lo/hi, elu alpha, linear a/b).
  float alpha = 0.f, beta = 0.f;
  /// kSum: dst = dst_result + scale * dst_before (residual add; the output buffer holds it).
  float scale = 1.f;
  /// kBinary: dst = alg(dst, src1). src1 is a runtime input, dense row-major in the kernel's I/O
  /// dtype with these dims (same rank as dst, each dim 1 or equal: per-channel {1,C,1,1} or full).
  BinaryAlg binaryAlg = BinaryAlg::kAdd;
  std::vector<int64_t> binaryDims;

  static PostOp eltwise(Activation a, float alpha = 0.f, float beta = 0.f);
  static PostOp relu() { return eltwise(Activation::kRelu); }
  static PostOp leakyRelu(float slope) { return eltwise(Activation::kLeakyRelu, slope); }
  static PostOp geluErf() { return eltwise(Activation::kGeluErf); }
  static PostOp geluTanh() { return eltwise(Activation::kGeluTanh); }
  static PostOp silu() { return eltwise(Activation::kSilu); }
  static PostOp sigmoid() { return eltwise(Activation::kSigmoid); }
  static PostOp tanh() { return eltwise(Activation::kTanh); }
  static PostOp hardswish() { return eltwise(Activation::kHardswish); }
  static PostOp hardsigmoid() { return eltwise(Activation::kHardsigmoid); }
  static PostOp clamp(float lo, float hi) { return eltwise(Activation::kClamp, lo, hi); }
  static PostOp elu(float alpha = 1.f) { return eltwise(Activation::kElu, alpha); }
  static PostOp linear(float a, float b = 0.f) { return eltwise(Activation::kLinear, a, b); }
  static PostOp sum(float scale = 1.f);
  static PostOp binary(BinaryAlg alg, std::vector<int64_t> dims);
};

/// Compute precision. kBF16: inputs/outputs stay f32; weights are prepacked in bf16, activations
/// converted to bf16 on entry, accumulation and post-ops in f32. Needs capabilities().onednnNativeBf16() for speed
/// (oneDNN may fall back to a slow reference implementation otherwise).
enum class ComputeType { kF32, kBF16 };

// ---- Convolution ---------------------------------------------------------------------------------

/// N-d convolution (1-D, 2-D or 3-D spatial), forward inference.
/// Inputs at execute(): {src, binary post-op operands...}.
struct ConvParams {
  std::vector<int64_t> srcDims;     ///< N, C, spatial...
  std::vector<int64_t> weightDims;  ///< torch layout: O, C/groups, k...
  const float* weights = nullptr;   ///< dense torch weight; copied + reordered once at creation
  const float* bias = nullptr;      ///< [O] or nullptr
  std::vector<int64_t> stride;      ///< default 1
  std::vector<int64_t> padL;        ///< default 0
  std::vector<int64_t> padR;        ///< default padL (asymmetric allowed)
  std::vector<int64_t> dilation;    ///< torch convention (1 = dense); default 1
  int64_t groups = 1;
  std::vector<PostOp> postOps;
  Format srcFormat = Format::kPlain;
  Format dstFormat = Format::kPlain;
  /// If non-empty, overrides srcFormat with an exact layout (e.g. the previous kernel's dst).
  Layout srcLayout;
  ComputeType compute = ComputeType::kF32;
  /// dtype of src, dst and the post-op operands; kBF16 (a bf16 model) as LinearParams::io: bf16
  /// in and out, weights (given as f32) prepacked in bf16, f32 accumulation, bias and post-ops.
  /// Where oneDNN has no bf16 instructions (!capabilities().onednnNativeBf16(): v3.2 has no bf16
  /// convolution below avx512_core), or with \p widenBf16: the same bf16 in and out on oneDNN's
  /// float32 convolution ("widened"): the weights rounded to bf16 once and packed as float32, the
  /// source widened (exactly) into a per-thread float32 buffer, f32 accumulation, bias and
  /// post-ops, the result rounded to bf16 (nearest even, as torch) once; src and dst are dense
  /// (kAny means channels-last), no binary post-ops (kUnimplemented). implInfo() is oneDNN's
  /// float32 implementation followed by " f32 on bf16io".
  DataType io = DataType::kF32;
  bool widenBf16 = false;
};
StatusOr<std::unique_ptr<Kernel>> createConv(const ConvParams& p);
/// torch's output spatial size: (in + padL + padR - dil*(k-1) - 1) / stride + 1.
std::vector<int64_t> convOutputDims(const ConvParams& p);

// ---- Linear / matmul -----------------------------------------------------------------------------

/// y[M,N] = x[M,K] * W[N,K]^T + b (torch.nn.Linear on a 2-D view). Inputs: {src, binary...}.
struct LinearParams {
  int64_t m = 0, k = 0, n = 0;
  const float* weights = nullptr;  ///< dense [N, K]; prepacked once (unless borrowed)
  const float* bias = nullptr;     ///< [N] or nullptr
  std::vector<PostOp> postOps;
  ComputeType compute = ComputeType::kF32;
  /// f32 only: run on \p weights in place, in their plain [N, K] layout, when oneDNN has an
  /// optimized (non-reference) kernel for that: no packed copy, so a model's weights are not held
  /// twice. The caller keeps them alive, at the same address, while the kernel exists. Otherwise
  /// (bf16, no such kernel) the weights are prepacked as usual; Kernel::borrowsWeights() says which.
  bool borrowWeights = false;
  /// dtype of src, dst and the post-op operands (binary src1, the sum's residual). kBF16 is a bf16
  /// model's linear: bf16 in and out, weights prepacked in bf16 (\p weights are the bf16 values
  /// widened to f32, so packing is exact), f32 accumulation, bias and post-ops, one rounding to
  /// bf16 at the end.
  DataType io = DataType::kF32;
};
StatusOr<std::unique_ptr<Kernel>> createLinear(const LinearParams& p);

/// Batched matmul with numpy broadcasting over batch dims; both operands runtime.
/// Inputs: {a, b, binary...}; a[..., M, K], b[..., K, N] may be strided (e.g. a transposed view);
/// ranks may differ (leading 1s are added). Output: dense [broadcast batch..., M, N].
struct MatmulParams {
  Layout a, b;
  std::vector<PostOp> postOps;
  ComputeType compute = ComputeType::kF32;
};
StatusOr<std::unique_ptr<Kernel>> createMatmul(const MatmulParams& p);

// ---- Pooling -------------------------------------------------------------------------------------

enum class PoolAlg { kMax, kAvgIncludePad, kAvgExcludePad };

/// Max / avg pooling over 1-3 spatial dims. Inputs: {src}. ceilMode is mapped to extra right
/// padding with torch's rule (the last window must start inside the input or left padding).
struct PoolParams {
  PoolAlg alg = PoolAlg::kMax;
  Layout src;                       ///< any layout (plain or a conv's blocked dst)
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride;      ///< default = kernel (torch)
  std::vector<int64_t> padL;        ///< default 0
  std::vector<int64_t> padR;        ///< default padL
  std::vector<int64_t> dilation;    ///< torch convention, max pooling only; default 1
  bool ceilMode = false;
  Format dstFormat = Format::kAny;  ///< kAny: same kind of layout as src
};
StatusOr<std::unique_ptr<Kernel>> createPool(const PoolParams& p);
/// Output spatial sizes torch would produce for \p p (with ceilMode).
std::vector<int64_t> poolOutputDims(const PoolParams& p);

/// adaptive_avg_pool{1,2,3}d when every input spatial size is a multiple of the output size
/// (then it is avg pooling with kernel = stride = in/out); kUnsupported otherwise.
StatusOr<std::unique_ptr<Kernel>> createAdaptiveAvgPool(const Layout& src,
                                                        const std::vector<int64_t>& outSpatial,
                                                        Format dstFormat = Format::kAny);

// ---- Element-wise, binary, softmax, layer norm, concat, reorder ----------------------------------

/// dst = act(src); dst has src's layout. Inputs: {src}.
StatusOr<std::unique_ptr<Kernel>> createEltwise(const Layout& src, Activation act,
                                                float alpha = 0.f, float beta = 0.f);

/// dst = alg(a, b) with numpy broadcasting (either side). Inputs: {a, b}. dstFormat kAny follows
/// a's layout when a has the output shape; otherwise dst is dense.
StatusOr<std::unique_ptr<Kernel>> createBinary(BinaryAlg alg, const Layout& a, const Layout& b,
                                               Format dstFormat = Format::kPlain);

/// softmax (or log_softmax) along \p axis (negative counts from the end). dst has src's layout.
StatusOr<std::unique_ptr<Kernel>> createSoftmax(const Layout& src, int axis, bool logSoftmax = false);

/// Layer norm over the last dim: (x - mean) / sqrt(var + eps) * gamma + beta. gamma/beta are
/// [last dim] or nullptr; copied at creation. Inputs: {src}; dst has src's layout.
StatusOr<std::unique_ptr<Kernel>> createLayerNorm(const Layout& src, float eps,
                                                  const float* gamma = nullptr,
                                                  const float* beta = nullptr);

/// Concatenation along \p axis. Inputs: the sources in order.
StatusOr<std::unique_ptr<Kernel>> createConcat(const std::vector<Layout>& srcs, int axis,
                                               Format dstFormat = Format::kPlain);

/// Copies between two layouts of the same dims (blocked <-> plain, f32 <-> bf16). Inputs: {src}.
StatusOr<std::unique_ptr<Kernel>> createReorder(const Layout& from, const Layout& to);

}  // namespace verifuse::kernels
