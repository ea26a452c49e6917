// Internal interface between the baseline-ISA front end of the widening int8 kernel
// (int8_widening.cpp: checks, geometry, weight packing) and its AVX2 kernels
// (int8_widening_avx2.cpp). Not a public header.
#pragma once

#include <cstdint>

#include "verifuse/support/status.h"

namespace verifuse::kernels::int8w {

/// Output columns per packed weight panel (two ymm registers of eight s32 accumulators).
inline constexpr int64_t kPanelWidth = 16;
/// Channels per depthwise weight block (one ymm of eight s32 accumulators).
inline constexpr int64_t kDwBlock = 8;
/// Largest window the depthwise kernel takes (larger ones go through the GEMM, one group each).
inline constexpr int64_t kMaxDwTaps = 64;
/// Largest ring of prepared input rows of the depthwise kernel (kernelH * dilationH).
inline constexpr int64_t kMaxDwRingRows = 256;
inline constexpr int kMaxPostOps = 8;

enum class DstKind : uint8_t { kF32, kU8, kS8, kS32 };
enum class PostOpKind : uint8_t { kRelu, kClamp, kGeluErf, kGeluTanh, kSum };
/// What the epilogue does after y = acc * scale + bias, chosen at creation:
///   kBounds     y = clamp(y, boundLo, boundHi): any chain of relu / clamp composes into one
///               clamp (none: +-inf);
///   kSumBounds  y += sumScale * (r - sumZeroPoint), then the bounds (ResNet's residual + ReLU);
///   kGeneral    the post-ops one by one (GELU anywhere, a sum after an activation).
/// For u8/s8 outputs, kBounds and kSumBounds fold 1 / dstScale into the per-channel factors, the
/// sum scale and the bounds (intersected with the code range), so requantizing is one rounding.
enum class Recipe : uint8_t { kBounds, kSumBounds, kGeneral };

/// One kernel, resolved at creation. A linear is a 1x1 convolution over M images of 1x1 pixel
/// (batch = M, channels = K, the src's row and column strides as the N and C strides).
struct Plan {
  // Source: batch x channels x height x width codes at these element strides (all >= 0).
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t srcStrideN = 0, srcStrideC = 0, srcStrideH = 0, srcStrideW = 0;
  bool srcSigned = false;  ///< s8 codes (else u8)
  int32_t srcZeroPoint = 0;

  // Output: batch x outChannels x outHeight x outWidth, dense.
  int64_t outChannels = 0, outHeight = 0, outWidth = 0;
  bool dstChannelsLast = true;  ///< NHWC (and linear's [M, N]); else NCHW
  DstKind dst = DstKind::kF32;

  // Window (torch conventions; dilation 1 = dense).
  int64_t kernelH = 1, kernelW = 1, strideH = 1, strideW = 1, padTop = 0, padLeft = 0;
  int64_t dilationH = 1, dilationW = 1;
  int64_t groups = 1, groupChannels = 0, groupOutChannels = 0;

  // Implicit GEMM per group: rows = batch * outHeight * outWidth output pixels, K = kernelH *
  // kernelW * groupChannels ordered (kh, kw, c), columns = the group's output channels.
  int64_t k = 0, kPairs = 0;  ///< kPairs = ceil(k / 2)
  int64_t panels = 0;         ///< per group: ceil(groupOutChannels / 16)
  /// [groups][panels][kPairs][16 columns][2]: the pair (w_k, w_k+1) of a column adjacent, so one
  /// 64-byte line holds one k pair of a panel. Zeros past k and past the group's columns.
  const int16_t* weights = nullptr;
  /// [groups * panels * 16]: float(srcScale * weightScales[o]) and bias[o] per packed column
  /// (0 on padded columns); depthwise: per channel.
  const float* scales = nullptr;
  const float* biases = nullptr;
  /// The same divided by dstScale (each rounded once from double): the folded factors.
  const float* scalesOverDst = nullptr;
  const float* biasesOverDst = nullptr;

  // Depthwise (groups == channels == outChannels): per kernel row, the taps in pairs (kw, kw + 1)
  // (an odd last one paired with a zero weight).
  bool depthwise = false;
  int64_t dwRowPairs = 0;  ///< ceil(kernelW / 2)
  /// [ceil(C / 8)][kernelH][dwRowPairs][8 channels][2]: (w[c][kh][kw], w[c][kh][kw + 1])
  /// adjacent, zeros past the last tap and channel.
  const int16_t* dwWeights = nullptr;

  // Epilogue.
  Recipe recipe = Recipe::kGeneral;
  /// kBounds / kSumBounds: the composed clamp (for u8/s8 outputs in units of dstScale, within
  /// [code min - dstZeroPoint, code max - dstZeroPoint]).
  float boundLo = 0.f, boundHi = 0.f;
  float sumScaleOverDst = 0.f;  ///< kSumBounds with u8/s8 output: sumScale / dstScale
  PostOpKind postOps[kMaxPostOps] = {};
  int nPostOps = 0;
  float clampLo = 0.f, clampHi = 0.f;
  float sumScale = 1.f;
  int32_t sumZeroPoint = 0;
  float invDstScale = 1.f;  ///< 1 / dstScale, rounded to float
  int32_t dstZeroPoint = 0;

  /// Multiply-adds of one call (threads are chosen from it).
  double macs() const {
    return static_cast<double>(batch) * static_cast<double>(outHeight * outWidth) *
           static_cast<double>(outChannels) * static_cast<double>(depthwise ? kernelH * kernelW : k);
  }
};

/// Runs \p p on \p src into \p dst with \p threads OpenMP threads (int8_widening_avx2.cpp; call
/// only when cpu::hasAvx2Fma()). kInternal when per-thread scratch cannot be allocated.
Status runAvx2(const Plan& p, const void* src, void* dst, int threads);

}  // namespace verifuse::kernels::int8w
