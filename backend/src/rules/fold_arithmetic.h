// The constant folds, written once: batch norm (conv-bn-fold, linear-bn-fold, bn-to-scale-shift)
// and the per-channel mul, div and add folds. Each folds into a conv/linear, per output channel o, as
//
//   W'[o, i] = W[o, i] * scale[o]        b'[o] = b[o] * biasScale[o] + shift[o]   (b = 0 without a bias)
//
// FoldTerms<T> states that once, over any number type: the rewrites and the instance check
// (passes/instance_check.cpp) evaluate it in double from the original constants (float32, or a
// bf16 model's widened exactly) and the rewrites round the result to float32; the rules'
// obligations evaluate the same functions over verify::Expr (real numbers) and prove that a
// conv/linear with W' and b' equals the source pattern, so the formula the rewrite runs is the one
// proved. The only primitive each side supplies is batch norm's scale gamma / sqrt(var + eps):
// std::sqrt in double, the verifier's rsqrt (a fresh r > 0 with r*r*(var + eps) = 1) in the proof.
// Internal header, torch-free.
#pragma once

#include <cstddef>
#include <vector>

#include "verifuse/rules/rules.h"

namespace verifuse::rules {

/// One output channel's fold, over double (the rewrite, the instance check) or verify::Expr (the
/// obligation).
template <class T>
struct FoldTerms {
  T scale, biasScale, shift;
  T weight(const T& w) const { return w * scale; }
  T bias(const T& b) const { return b * biasScale + shift; }
};

/// Batch norm with s = gamma / sqrt(var + eps) (\p scale): W' = W*s, b' = b*s + (beta - mean*s)
/// (= (b - mean)*s + beta).
template <class T>
FoldTerms<T> batchNormTerms(const T& scale, const T& beta, const T& mean) {
  return {scale, scale, beta - mean * scale};
}
/// y * c[o]: W' = W*c, b' = b*c.
template <class T>
FoldTerms<T> channelMulTerms(const T& c, const T& /*one*/, const T& zero) {
  return {c, c, zero};
}
/// y / d[o]: W' = W*(1/d), b' = b*(1/d).
template <class T>
FoldTerms<T> channelDivTerms(const T& d, const T& one, const T& zero) {
  const T inverse = one / d;
  return {inverse, inverse, zero};
}
/// y + alpha*a[o]: W' = W, b' = b + alpha*a.
template <class T>
FoldTerms<T> channelAddTerms(const T& a, const T& alpha, const T& one) {
  return {one, one, alpha * a};
}

/// A per-output-channel fold (one entry per output channel o).
struct ChannelFold {
  std::vector<double> scale, biasScale, shift;

  /// Channel o's terms.
  FoldTerms<double> terms(size_t o) const { return {scale[o], biasScale[o], shift[o]}; }
  /// W'[o, i] of the weight element \p w, before its float32 rounding.
  double weight(size_t o, double w) const { return terms(o).weight(w); }
  /// b'[o] of the bias element \p b (0 when the op has no bias), before its float32 rounding.
  double bias(size_t o, double b) const { return terms(o).bias(b); }
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
