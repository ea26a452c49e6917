// The executor: runs an IR graph with every operator called through the c10 dispatcher.
// One of the two translation units that see LibTorch headers (the other is the Python module).
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/kernels/tuning_db.h"
#include "verifuse/support/status.h"

namespace verifuse::runtime {

/// A frozen weight: argument \p argIndex of every call must still be the tensor that became
/// constant \p constant (same TensorImpl, data pointer and version counter).
struct FrozenInput {
  int32_t argIndex = -1;
  ir::ConstantId constant = -1;
};

struct ExecutorStats {
  size_t dispatcherSteps = 0;
  size_t builtinSteps = 0;
  size_t constants = 0;
  size_t fusedSteps = 0;          ///< verifuse::conv / verifuse::linear steps
  size_t onednnSteps = 0;         ///< of those, running on oneDNN
  size_t constantFoldedSteps = 0; ///< steps with only constant inputs, evaluated once at compile time
};

/// How fused ops run.
struct CompileOptions {
  bool useOnednn = true;  ///< false: the ATen composition of every fused op (autotuning baseline)
  bool bf16 = false;      ///< convolution and matmul in bfloat16 with float32 accumulation
  /// Time each static-shape fused op on oneDNN and on ATen and keep the faster (decisions stored
  /// in \p tuningDb when given); false: a size heuristic decides.
  bool autotune = false;
  kernels::TuningDb* tuningDb = nullptr;
  int tuneRepeats = 3;
  /// Static-shape fused ops on oneDNN keep only their prepacked weights (the folded float32 copy
  /// is freed). Inputs that need the ATen composition (NaN/Inf) then make run() return
  /// kUnimplemented "exact plan needed": the caller runs an unfused plan instead.
  bool releaseWeights = false;
  /// Ops above this many multiply-adds run on oneDNN untimed (see chooseEngine).
  double tuneMaxMacs = 2.0e7;
  /// float32 linears on oneDNN read their weights in place, in the plain [N, K] layout the graph
  /// holds (the user's parameter itself when nothing was folded into it), instead of a packed copy:
  /// a transformer's weights are then held once, and a new row count (dynamic shapes) creates a
  /// kernel without another copy. false: packed weights (benchmarking, VERIFUSE_LINEAR_WEIGHTS=packed).
  bool borrowLinearWeights = true;
};

class CompiledGraph;

/// Builds the execution plan once: operator handles looked up, schema-typed constant arguments
/// converted to IValues, last uses computed. Fails with kUnsupported when an operator or an
/// argument cannot be executed, so the caller can fall back.
///   \p inputArgIndex[k]: position in the call's argument list of graph input k.
StatusOr<std::shared_ptr<const CompiledGraph>> compileGraph(ir::Graph graph,
                                                            std::vector<int32_t> inputArgIndex,
                                                            std::vector<FrozenInput> frozen,
                                                            int32_t numArgs,
                                                            const CompileOptions& options = {});

/// Converts a constant to the tensor the executor uses (the original at::Tensor if the bindings
/// created it, else a view over the host buffer that keeps it alive).
at::Tensor constantToTensor(const ir::ConstantTensor& c);

class CompiledGraph {
 public:
  struct Impl;
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  ~CompiledGraph();

  /// Runs the graph. Re-entrant: all per-call state lives on the calling thread's stack.
  /// Returns kStaleWeights if a frozen weight was replaced or modified in place; ATen errors
  /// (bad shapes, ...) come back as kInvalidArgument with ATen's message.
  StatusOr<std::vector<c10::IValue>> run(const std::vector<c10::IValue>& args) const;

  /// kStaleWeights with the name of the first frozen input that no longer matches, else Ok.
  Status checkFrozenInputs(const std::vector<c10::IValue>& args) const;

  const ir::Graph& graph() const;
  ExecutorStats stats() const;
  /// Per node of graph(): tuned milliseconds {oneDNN, ATen} of fused ops (-1: not timed).
  const std::vector<std::pair<double, double>>& nodeTimings() const;
  /// Per node of graph(): "onednn", "aten" (fused op on ATen), "dispatcher", "builtin" or
  /// "constant" (folded at compile time).
  const std::vector<std::string>& nodeEngines() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace verifuse::runtime
