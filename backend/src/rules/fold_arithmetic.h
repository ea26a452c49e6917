// The numeric constant folds, written once: batch norm (conv-bn-fold, linear-bn-fold,
// bn-to-scale-shift) and the per-channel mul, div and add folds. Each folds into a conv/linear as
//
//   W'[o, i] = W[o, i] * scale[o]        b'[o] = b[o] * biasScale[o] + shift[o]   (b = 0 without a bias)
//
// in double, from the original constants (float32, or a bf16 model's widened exactly). The
// rewrites round these values to float32 (util::foldPerChannel; bn-to-scale-shift stores scale and
// shift themselves); the instance check (passes/instance_check.cpp) recomputes them from the
// constants the FoldRecord names and bounds each folded constant's distance to them. The rules'
// obligations state the same math over the reals: they are what this arithmetic is proved
// against, not a copy of it. Internal header, torch-free.
#pragma once

#include <cstddef>
#include <vector>

#include "verifuse/rules/rules.h"

namespace verifuse::rules {

/// A per-output-channel fold (one entry per output channel o).
struct ChannelFold {
  std::vector<double> scale, biasScale, shift;

  /// W'[o, i] of the weight element \p w, before its float32 rounding.
  double weight(size_t o, double w) const { return w * scale[o]; }
  /// b'[o] of the bias element \p b (0 when the op has no bias), before its float32 rounding.
  double bias(size_t o, double b) const { return b * biasScale[o] + shift[o]; }
};

/// Batch norm: scale = biasScale = s and shift = t, with s[o] = gamma[o] / sqrt(var[o] + eps) and
/// t[o] = beta[o] - mean[o] * s[o] (so b' = (b - mean) * s + beta = b * s + t). Without gamma
/// (beta) it is 1 (0). Empty (no channels) when mean or var has no data or their sizes differ.
ChannelFold batchNormFold(const std::vector<double>& gamma, const std::vector<double>& beta,
                          const std::vector<double>& mean, const std::vector<double>& var, double eps);

/// The per-channel op of \p kind (kChannelMul, kChannelDiv or kChannelAdd) by factors[o]:
///   mul: scale = biasScale = c        div: scale = biasScale = 1 / d
///   add: shift = alpha * a, scale = biasScale = 1 (add's alpha; 1 when a already includes it)
ChannelFold channelOpFold(FoldRecord::Kind kind, const std::vector<double>& factors, double alpha);

}  // namespace verifuse::rules
