// Executing verifuse::conv / verifuse::linear: a oneDNN kernel (weights prepacked once, one
// primitive per input shape) with an exact ATen fallback. Internal to the runtime (LibTorch).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <stdexcept>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/support/status.h"

namespace verifuse::runtime {

/// What a fused op throws when it must run its ATen composition but released its weights (a C++
/// type, caught by type: CompiledGraph::run returns StatusCode::kNeedsExactPlan for it).
struct NeedsExactPlan : std::runtime_error {
  NeedsExactPlan() : std::runtime_error("the fused ops hold prepacked weights only") {}
};

/// A fused node (verifuse::conv / verifuse::linear) and the engines it can run on. The engine is
/// not the op's own choice: its partition's decision (the planner times whole partitions) is set
/// with setEngine() before the plan is frozen; afterwards the op is only read.
class FusedOp {
 public:
  virtual ~FusedOp() = default;
  /// Runs on engine(). \p inputs: the node's tensor value arguments in order (x, then the
  /// residual of a sum post-op). May throw c10::Error (the executor turns it into eager's message).
  /// \p exact: run the ATen composition (the executor asks for it when an input holds NaN or
  /// Inf: oneDNN's clip-based post-ops map NaN to a bound where torch propagates it).
  virtual at::Tensor run(const std::vector<at::Tensor>& inputs, bool exact) const = 0;
  /// Runs on \p engine whatever engine() is: the partition tuner's candidates.
  virtual at::Tensor runOn(Engine engine, const std::vector<at::Tensor>& inputs) const = 0;
  /// Ops with several outputs (verifuse::rowwise) return them all; the others their one.
  virtual std::vector<at::Tensor> runAll(Engine engine, const std::vector<at::Tensor>& inputs) const {
    return {runOn(engine, inputs)};
  }
  virtual size_t numOutputs() const { return 1; }
  virtual Engine engine() const = 0;
  /// True if \p engine can run this op at its static shape (a kernel exists); always true for
  /// ATen. Without a static shape, true for every engine this op has (kernels come per shape).
  virtual bool canRun(Engine engine) const = 0;
  /// Planning only: the engine its partition chose (must satisfy canRun).
  virtual void setEngine(Engine engine) = 0;
  /// Planning only, after setEngine: static shapes on oneDNN keep only the prepacked weights,
  /// so the folded float32 copy is freed (it would double the model's weight memory). The ATen
  /// composition then needs the exact plan.
  virtual void releaseWeights() = 0;
  /// Planning only, last: whatever the op still decides on first use is decided now, while the
  /// plan's tuning database exists (a linear on oneDNN chooses its weight layout with its first
  /// kernel); nothing is timed once planning is over.
  virtual void finishPlanning() {}
  /// Work the op left for after planning (CompileOptions::deferPacking): true while some is
  /// pending. finishDeferredWork() does it, on any thread; a run that needs it first waits on the
  /// op's lock instead (the plan's background thread calls it for every op, in step order).
  virtual bool hasDeferredWork() const { return false; }
  virtual void finishDeferredWork() {}
  /// Multiply-adds of one run at the static shape (0 when the shape is not static).
  virtual double macs() const = 0;
  /// oneDNN's implementation name of the last kernel created ("brg:avx512_core", ...), or "".
  virtual std::string implInfo() const = 0;
  /// What runs this op now, for reports: "oneDNN", "own GEMM", "MKL sgemm", "row engine",
  /// "attention engine" or "ATen" (by default from engine(); ops whose engine has several kernels
  /// say which).
  virtual std::string runsOn() const;
  /// Bytes of weight copies this op holds on top of the graph's constants (a packed copy for the
  /// own GEMM, oneDNN's prepacked weights per kernel, a dense copy of a strided weight): the
  /// memory price of its engine choice, which explain() reports per partition.
  virtual int64_t weightCopyBytes() const { return 0; }
  /// The part of weightCopyBytes() that is one packing shared with another plan of the process
  /// (runtime/weight_packings.h: generate()'s prefill and decode plans), held once in memory.
  virtual int64_t sharedWeightCopyBytes() const { return 0; }
  /// How the chosen engine reads the weights: "in place", "packed", "prepacked", or "" (none).
  virtual std::string weightLayout() const { return ""; }
};

/// Where a planning-time decision comes from and is kept (CompileOptions' tuningDb, replayTunings,
/// recordTunings, replayMiss): the partition tuner and the ops' own choices share it.
struct TuningSources {
  kernels::TuningDb* db = nullptr;
  const std::map<std::string, kernels::TuningDecision>* replay = nullptr;
  std::map<std::string, kernels::TuningDecision>* record = nullptr;
  std::string* replayMiss = nullptr;
  static TuningSources of(const CompileOptions& options);
  bool available() const { return db != nullptr || replay != nullptr; }
};

/// A saved plan's decision for \p key when replaying one (a key it lacks sets *replayMiss, naming
/// \p what, and is kNotFound), else the database's or a timing of \p candidates; either way
/// recorded in s.record when set.
StatusOr<kernels::TuningDecision> tuneOrReplay(const TuningSources& s, const kernels::TuningKey& key,
                                               const std::string& what,
                                               const std::vector<kernels::Candidate>& candidates, int warmup,
                                               int repeats);

inline constexpr const char* kRowwiseOp = "verifuse::rowwise";

inline constexpr const char* kAttentionOp = "aten::_scaled_dot_product_flash_attention_for_cpu";

/// True for the nodes the planner runs on an engine: verifuse::conv, verifuse::linear (createFusedOp),
/// verifuse::rowwise (createRowwiseOp) and SDPA (isAttentionEngineOp, createAttentionOp).
bool isEngineOp(const ir::Node& node);

/// verifuse::rowwise(v0..vN-1, program): the row engine, with the program's ATen composition.
StatusOr<std::unique_ptr<FusedOp>> createRowwiseOp(const ir::Graph& graph, const ir::Node& node,
                                                   const CompileOptions& options);

/// aten::_scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, attn_mask,
/// scale): ATen (the node itself, exact) and oneDNN (kernels/attention.h) when q, k, v have static
/// 4-d shapes, dropout is 0 and the mask is float32 or absent. Its run inputs are
/// the node's tensor arguments (q, k, v, then the mask if any). The logsumexp is computed only when
/// something reads it (\p graph says).
StatusOr<std::unique_ptr<FusedOp>> createAttentionOp(const ir::Graph& graph, const ir::Node& node,
                                                     const CompileOptions& options);

/// Builds the executor for a fused node. \p inputShape: the static shape of x when known (the
/// kernel is then created and weights prepacked right away). \p channelsLastOutput: a 2-D/3-D
/// convolution may leave its result channels-last (every reader is layout-agnostic); otherwise it
/// writes the contiguous layout eager would (a view of the output needs it). The op starts on
/// oneDNN when options.useOnednn and oneDNN can run it, else on ATen. \p io: the dtype of x and the
/// result, float32 or bfloat16 (a bf16 model: its weights are bf16, or float32 folded from bf16).
StatusOr<std::unique_ptr<FusedOp>> createFusedOp(const ir::Node& node, const std::vector<at::Tensor>& constants,
                                                 const std::vector<int64_t>* inputShape, const CompileOptions& options,
                                                 bool channelsLastOutput, at::ScalarType io = at::kFloat);

}  // namespace verifuse::runtime
