// Int8 convolution and linear on oneDNN's u8/s8 x s8 -> s32 kernels (VNNI on AVX-512 machines),
// for the quantized graphs of the PT2E flow (issue 17). oneDNN-free API, like ops.h.
//
// What one kernel computes, per output element (oneDNN v3 quantization attributes):
//   acc  = sum_k (src_k - srcZeroPoint) * w_k                 s32, exact (w: s8, per-channel
//                                                              symmetric: no weight zero point)
//   y    = srcScale * weightScales[o] * acc + bias[o]          f32
//   y    = the post-ops in order: relu(y), clamp(y, clampLo, clampHi), gelu(y) (erf or
//          tanh), or y + sumScale * (dst_before - sumZeroPoint) (sum: the
//          output buffer holds the residual's codes, dstType, on entry)
//   dst  = f32 output: y
//          u8/s8 output: saturate(nearbyint(y / dstScale) + dstZeroPoint)   (round half to even)
// which is the integer meaning of  quantize(post(conv(dequantize(src), dequantize(W)) + b))  the
// rules in backend/src/rules/quantized.cpp prove (over the rationals: the float32 roundings of
// the scale products differ from eager's float convolution by at most one quantization step).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "verifuse/kernels/kernel.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// kS32 (dst only, linear only): the exact s32 accumulator, no scales, zero points, bias or post-ops
/// (aten::_int_mm; torchao's dynamic int8 linears).
enum class Int8Type { kU8, kS8, kF32, kS32 };
const char* int8TypeName(Int8Type t);

struct Int8Params {
  /// conv: src [N, C, spatial...] (1-3 spatial dims), weights [O, C/groups, k...];
  /// linear: src [M, K], weights [N, K].
  bool conv = true;
  std::vector<int64_t> srcDims, srcStrides;  ///< strides of the caller's src (dense: plain or channels-last)
  std::vector<int64_t> weightDims;
  bool dstChannelsLast = false;  ///< conv: write NHWC / NDHWC (as eager does for a channels-last src)
  std::vector<int64_t> stride, padL, padR, dilation;  ///< conv only; torch conventions (dilation 1 = dense)
  int64_t groups = 1;
  Int8Type srcType = Int8Type::kU8;
  Int8Type dstType = Int8Type::kF32;
  const int8_t* weights = nullptr;  ///< s8, torch layout, dense; prepacked (copied) at creation
  const float* bias = nullptr;      ///< f32 [O] or null
  float srcScale = 1.f;
  int32_t srcZeroPoint = 0;
  std::vector<float> weightScales;  ///< one per output channel
  float dstScale = 1.f;             ///< u8/s8 output only
  int32_t dstZeroPoint = 0;         ///< u8/s8 output only
  enum class PostOp { kRelu, kClamp, kGeluErf, kGeluTanh, kSum };
  std::vector<PostOp> postOps;  ///< applied in order to y (before the dst scale)
  float clampLo = 0.f, clampHi = 0.f;  ///< kClamp: oneDNN's eltwise_clip (clampLo <= clampHi)
  float sumScale = 1.f;
  int32_t sumZeroPoint = 0;
};

/// Output dims of \p p (conv: N, O, spatial; linear: M, N); empty when the geometry is invalid.
std::vector<int64_t> int8OutputDims(const Int8Params& p);

/// Runs \p k (made from \p p) once on deterministic pseudo-random codes and checks one output
/// element of every output channel against the integer formula above computed here from the plain
/// (unpacked) weights \p p.weights: the s32 accumulator exactly, then scales, bias and post-ops in
/// double. f32 outputs must agree within float32 rounding of the scaled accumulator (so a wrong
/// packed weight shows wherever its source value differs from the zero point); u8/s8 outputs
/// within one quantization step (a scrambled layout or a wrong scale shows; a single weight off by
/// one may not). kInternal naming the first mismatch. createInt8 calls it on every kernel it makes
/// (once per configuration: about one multiply-add per weight), so an instance whose prepacked
/// weights do not reproduce the formula never runs.
Status probeInt8Kernel(const Int8Params& p, const Kernel& k);

/// Creates the kernel: one input (src in the caller's layout, converted on entry when the
/// primitive wants another), output dense row-major (NC... / MN; channels-last when asked) in dstType. kUnimplemented when
/// oneDNN has no implementation (the caller runs the ATen composition).
/// Every kernel passes probeInt8Kernel before it is returned (a mismatch is kInternal).
StatusOr<std::unique_ptr<Kernel>> createInt8(const Int8Params& p);
/// The kernel without the probe (tests pair it with other parameters to see the probe refuse).
StatusOr<std::unique_ptr<Kernel>> createInt8Unprobed(const Int8Params& p);

}  // namespace verifuse::kernels
