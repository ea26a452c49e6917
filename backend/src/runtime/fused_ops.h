// Executing verifuse::conv / verifuse::linear: a oneDNN kernel (weights prepacked once, one
// primitive per input shape) with an exact ATen fallback. Internal to the runtime (LibTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/support/status.h"

namespace verifuse::runtime {

/// What a fused op throws when it must run its ATen composition but released its weights.
bool isNeedsExactPlanError(const std::string& message);

class FusedOp {
 public:
  virtual ~FusedOp() = default;
  /// \p inputs: the node's tensor value arguments in order (x, then the residual of a sum post-op).
  /// May throw c10::Error (the executor turns it into eager's message).
  /// \p exact: run the ATen composition (the executor asks for it when an input holds NaN or
  /// Inf: oneDNN's clip-based post-ops map NaN to a bound where torch propagates it).
  virtual at::Tensor run(const std::vector<at::Tensor>& inputs, bool exact) const = 0;
  /// "onednn" or "aten" (when oneDNN cannot run this op, or the options say so).
  virtual std::string engine() const = 0;
  /// oneDNN's implementation name of the last kernel created ("brg:avx512_core", ...), or "".
  virtual std::string implInfo() const = 0;
  /// Autotuning result in milliseconds {oneDNN, ATen}; -1 where not timed.
  virtual std::pair<double, double> tunedMs() const = 0;
};

/// Builds the executor for a fused node. \p inputShape: the static shape of x when known (the
/// kernel is then created and weights prepacked right away). \p channelsLastOutput: a 2-D/3-D
/// convolution may leave its result channels-last (every reader is layout-agnostic); otherwise it
/// writes the contiguous layout eager would (a view of the output needs it).
StatusOr<std::unique_ptr<FusedOp>> createFusedOp(const ir::Node& node, const std::vector<at::Tensor>& constants,
                                                 const std::vector<int64_t>* inputShape, const CompileOptions& options,
                                                 bool channelsLastOutput);

}  // namespace verifuse::runtime
