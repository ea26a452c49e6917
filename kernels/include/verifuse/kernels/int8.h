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

#include "verifuse/kernels/int_arithmetic.h"
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

/// What oneDNN's int8 convolutions and matmuls compute on the tier the capability model gives
/// (capabilities.h): with VNNI or AMX, u8 x s8 products summed four at a time into s32 (vpdpbusd,
/// tdpbusd): exact; below (AVX2, AVX-512 without VNNI), pairs summed into an s16 that saturates
/// (vpmaddubsw; oneDNN's doc/advanced/int8_computations.md). The codes enter raw and the zero point
/// is compensated after the sum; s8 sources are shifted by +128 into u8 first. The verifier proves an
/// instance exact under this declaration before the kernel may run (backend's int8 kernel choice).
IntDotArithmetic onednnInt8Arithmetic(Int8Type srcType);
/// The same for a given tier class: \p withoutSaturation = VNNI or AMX (no oneDNN needed).
IntDotArithmetic onednnInt8Arithmetic(Int8Type srcType, bool withoutSaturation);
/// Every integer arithmetic an int8 kernel variant of any tier declares (oneDNN's with and without
/// VNNI, for u8 and s8 sources; verifuse's own widening kernel): what `python -m verifuse prove`
/// proves and mutates (verifier/int_dot.h), whatever the machine.
std::vector<IntDotArithmetic> int8ArithmeticDeclarations();

/// A second check after the proof, never instead of it: runs \p k (made from \p p) on
/// deterministic codes and checks output elements against the integer formula above computed here
/// from the plain (unpacked) weights \p p.weights: the s32 accumulator exactly, then scales, bias
/// and post-ops in double. f32 outputs must agree within float32 rounding of the scaled
/// accumulator; u8/s8 outputs within one quantization step; s32 exactly. Four runs: pseudo-random
/// codes checking one element of every output channel (a scrambled layout, a wrong packed weight or
/// scale shows), then, for the channel whose weights make the largest pair sums, its receptive field
/// set to the code extremes that drive every partial sum to its maximum, to its minimum, and to the
/// top code everywhere (where a kernel that saturates partial sums loses the most). kInternal naming
/// the first mismatch. createInt8 calls it on every kernel it makes (about one multiply-add per
/// weight per run).
Status probeInt8Kernel(const Int8Params& p, const Kernel& k);

/// Creates the kernel: one input (src in the caller's layout, converted on entry when the
/// primitive wants another), output dense row-major (NC... / MN; channels-last when asked) in dstType. kUnimplemented when
/// oneDNN has no implementation (the caller runs the ATen composition).
/// Every kernel passes probeInt8Kernel before it is returned (a mismatch is kInternal).
StatusOr<std::unique_ptr<Kernel>> createInt8(const Int8Params& p);
/// The kernel without the probe (tests pair it with other parameters to see the probe refuse).
StatusOr<std::unique_ptr<Kernel>> createInt8Unprobed(const Int8Params& p);

}  // namespace verifuse::kernels
