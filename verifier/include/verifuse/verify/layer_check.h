// End-to-end check of one folded layer with its concrete weights (the seed blog's check): the
// weights, batch-norm statistics and folded constants become exact rationals in Z3, and the solver
// searches for an input that tells the fused layer apart from the unfused one.
//
// Z3-free interface; the encoding lives in verifier/src/layer_check.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

/// A linear layer (conv or linear, seen per output channel as a dot product over its receptive
/// field) followed by the per-channel affine op that was folded into it, and the folded result.
///
/// Unfused, output channel o at any position:   y_o = f_o(sum_i W[o,i] x_i + b[o])
/// Fused:                                        y'_o = sum_i W'[o,i] x_i + b'[o]
/// where f_o is batch norm  gamma_o * (t - mean_o) * r_o + beta_o  with  r_o > 0 and
/// r_o * r_o * (var_o + eps) = 1 (the exact 1/sqrt, no rounding), or t * factor_o, t / factor_o,
/// t + factor_o. A convolution's output at any position is such a dot product over one patch
/// (zero padding sets patch entries to 0, which the input box contains), so one patch of
/// fanIn = C_in/groups * prod(kernel) free inputs per channel covers every position.
struct FoldedLayer {
  enum class Fold { kBatchNorm, kMul, kDiv, kAdd };
  Fold fold = Fold::kBatchNorm;
  int64_t channels = 0;                ///< output channels
  int64_t fanIn = 0;                   ///< weights per output channel (1 for a standalone batch norm)
  const float* weight = nullptr;       ///< [channels * fanIn]; null: identity (standalone batch norm, fanIn 1)
  const float* bias = nullptr;         ///< [channels]; null: no bias
  const float* foldedWeight = nullptr; ///< [channels * fanIn]
  const float* foldedBias = nullptr;   ///< [channels]; null: no bias after folding either
  std::vector<double> gamma, beta;     ///< batch norm affine (empty: 1 and 0)
  std::vector<double> mean, var;       ///< batch norm statistics
  double eps = 0;
  std::vector<double> factor;          ///< mul / div / add: one per channel
  std::string inputName = "x";         ///< IR names for counterexamples
  std::string outputName = "y";
};

struct LayerCheckOptions {
  unsigned timeoutMs = 2000;  ///< per Z3 query
  /// Tolerance per channel: relTolerance * (sum_i |W'[o,i]| + |b'[o]|) + (fanIn + 1) * 2^-149,
  /// i.e. two float32 roundings of every folded constant, for inputs with |x_i| <= 1 (the error is
  /// linear in x, so larger inputs scale the weight part of the bound).
  double relTolerance = 0x1p-22;
};

struct LayerCheckResult {
  Verdict verdict;             ///< Proved / Refuted (input + channel) / Unknown / Timeout / Unsupported
  int64_t queries = 0;         ///< Z3 checks made
  double maxTolerance = 0;     ///< largest per-channel tolerance used
};

/// Checks every output channel. Never throws. Proved: for every input in [-1, 1]^fanIn and every
/// channel, |fused - unfused| <= that channel's tolerance, over the reals.
LayerCheckResult checkFoldedLayer(const FoldedLayer& layer, const LayerCheckOptions& options = {});

/// Z3 checks made by checkFoldedLayer in this process (kept apart from solverQueryCount(), which
/// counts rule proofs: those are cached, these are per compiled instance).
uint64_t layerCheckQueryCount();

}  // namespace verifuse::verify
