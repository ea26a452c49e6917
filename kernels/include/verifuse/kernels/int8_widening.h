// verifuse's own int8 convolution and linear for AVX2 CPUs without VNNI (AMD Zen 3, AVX-512
// without VNNI): exact by construction, no oneDNN, no LibTorch.
//
// Why: oneDNN's u8 x s8 kernels on such CPUs add adjacent products with vpmaddubsw, which
// saturates to s16 (255*127*2 = 64770 > 32767), so a real PT2E-quantized model gets silently
// wrong codes there. This kernel never forms such a sum: the source codes minus the zero point are
// widened to s16 (|x - zx| <= 255 for codes and zero points in the code range), the s8 weights
// are widened to s16 and prepacked once, vpmaddwd adds two s16 x s16 products into s32 (at most
// 2 * 255 * 128 in magnitude) and those sums accumulate in s32. At creation the kernel checks,
// per output channel, that max|x - zx| * sum_k |w_k| < 2^31 (no partial sum can wrap), so every
// accumulator is the exact integer sum (int8WideningArithmetic() declares this for the verifier).
//
// Semantics, inputs and outputs are those of createInt8 (int8.h), per output element:
//   acc = sum_k (x_k - srcZeroPoint) * w_k                     exact (s32)
//   y   = srcScale * weightScales[o] * acc + bias[o]            float32
//   y   = post-ops in order: relu, clamp, gelu (erf / tanh),
//         sum: y + sumScale * (r - sumZeroPoint), r the residual's code the output holds on entry
//   dst = f32: y;  u8/s8: saturate(nearbyint(y / dstScale) + dstZeroPoint), half to even;
//         s32 (linear only): acc itself.
// Float32 details (the integer part is exact): the per-channel factor srcScale * weightScales[o]
// is rounded to float once at creation, y = fma(float(acc), factor, bias[o]) (float(acc) is exact
// below 2^24), the GELUs are the shared AVX2 vector math's (kernels/src/cpu/vecmath_avx2.h, a few
// ulp), and requantization multiplies by the float reciprocal of dstScale instead of dividing:
// a code can differ from the exact rational result by one step right at a rounding boundary.
// The result does not depend on the number of threads (bit-identical for any count).
#pragma once

#include <cstdint>
#include <memory>

#include "verifuse/kernels/int8.h"
#include "verifuse/kernels/int_arithmetic.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// Creates the kernel for \p p (the parameters of createInt8). execute() takes one input, the src
/// in the strides \p p.srcStrides describe, and writes the output dense: row-major (NCHW; linear
/// [M, N]) or channels-last (NHWC) when \p p.dstChannelsLast. With a sum post-op the output holds
/// the residual's codes on entry. execute() is const and thread-safe; its scratch is per thread
/// (grown on demand, no allocation per call once warm); it uses up to omp_get_max_threads()
/// OpenMP threads (1 inside a parallel region).
///
/// Supported: 2-d convolutions (any stride, padding, dilation, groups; a dedicated depthwise
/// kernel for groups == C == O) and linear; u8 and s8 src; any src strides without negative
/// entries (channels-contiguous sources are read in place, others converted once per call);
/// f32, u8 and s8 output (and s32 for linear); every post-op of Int8Params.
///
/// \returns kInvalidArgument for the parameters createInt8 refuses (scales not finite and > 0,
/// mismatched dims, groups, strides, an s32 output with scales/bias/post-ops, a clamp with
/// lo > hi, a sum into an f32 output, ...); kUnimplemented for what this kernel does not do
/// (1-d / 3-d convolutions, negative strides, !int8WideningAvailable(), and weights or zero points
/// for which an s32 accumulator or the s16 source could overflow): the caller then takes another
/// path, never a wrong result.
///
/// implInfo(): "verifuse int8:avx2_vpmaddwd" (implicit GEMM) or "verifuse int8 dw:avx2_vpmaddwd"
/// (depthwise). name(): "int8_conv" / "int8_linear".
/// NOTE: inputLayouts() / outputLayout() hold one empty Layout each: Layout's implementation
/// lives in the oneDNN library, which this one must not link. The layouts are the ones \p p
/// describes. probeInt8Kernel (int8.h, oneDNN library) accepts these kernels; this factory does
/// not call it (the tests compare every output against an exact reference instead).
StatusOr<std::unique_ptr<Kernel>> createInt8Widening(const Int8Params& p);

/// Whether this CPU can run the kernels: AVX2 + FMA + F16C with OS support.
bool int8WideningAvailable();

/// What the kernels compute, for the verifier (int_arithmetic.h): x - zx exact in s16 before the
/// products, vpmaddwd's exact two-product groups in s32, s32 accumulation.
IntDotArithmetic int8WideningArithmetic();

}  // namespace verifuse::kernels
