// The execution plan's internals, shared by the planner (backend/src/planner/, which builds it)
// and the executor (runtime/executor.cpp, which only runs it): the steps, their argument slots,
// the frozen-input checks and CompiledGraph::Impl. Not a public header.
#pragma once

#include "runtime/fused_ops.h"
#include "verifuse/runtime/executor.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace verifuse::runtime {

at::ScalarType toScalarType(ir::DType t);

/// One argument of a step: fixed at plan time, a graph value, or a list built per call because
/// some of its elements are graph values (symbolic sizes, tensor lists).
struct ArgSlot {
  enum class Kind { Fixed, Value, DynamicList } kind = Kind::Fixed;
  c10::IValue fixed;
  ir::ValueId value = ir::kNoValue;
  ir::Arg list;           // DynamicList: the IR list
  c10::TypePtr elemType;  // DynamicList: the schema's element type
  bool toDouble = false;  // Value: schema wants a float and the value may be an int
  bool toTensor = false;  // Value: schema wants a Tensor and the value may be a Python number
};

using BuiltinFn = std::function<StatusOr<c10::IValue>(const std::vector<c10::IValue>&)>;

struct Step {
  std::optional<c10::OperatorHandle> op;
  /// The in-place form of \p op (aten::index_put_ for index_put) when its first argument is an
  /// input the caller writes back with this step's result (planner: writeInputsInPlace). Used
  /// only by a call's run (CompiledGraph::run) whose inputs pass inPlaceInputsUnaliased.
  std::optional<c10::OperatorHandle> inPlaceOp;
  std::shared_ptr<const FusedOp> fused;
  ir::ValueId donatedResidual = ir::kNoValue;  // fused op's residual at its last use: accumulated in place
  BuiltinFn builtin;
  std::string name;
  std::vector<ArgSlot> args;
  std::vector<ir::ValueId> outputs;
  bool unpackList = false;             // schema returns one list; IR has one value per element
  std::vector<ir::ValueId> freeAfter;  // values whose last use is this step
  size_t node = SIZE_MAX;              // index in the plan's graph of the node it runs (profiles)
  /// Max pooling of a dense NCHW input runs on its channels-last copy (ATen 2.13's NCHW CPU
  /// kernel: 4.5 ms at ResNet-50's [1,64,112,112] stem, 1 thread; channels-last 0.26 ms, the copy
  /// ~0.1). The maximum and its index do not depend on the layout, so the values are eager's; the
  /// result goes back to NCHW unless every reader takes any layout (layoutAgnosticReaders).
  struct PoolLayout {
    bool channelsLast = false;
    bool keepValuesChannelsLast = false;  // output 0 read only by layout-agnostic readers
    bool indicesRead = false;             // output 1 (indices) read or a graph output
  } pool;
};

/// A frozen weight the caller passes per call: the run refuses it once it was replaced or
/// modified in place (CompiledGraph::checkFrozenInputs).
struct FrozenCheck {
  int32_t argIndex;
  std::string name;
  at::Tensor tensor;  // keeps the TensorImpl alive so its address cannot be reused
  const c10::TensorImpl* impl;
  const void* dataPtr;
  uint32_t version;
  bool checkVersion;
};

struct CompiledGraph::Impl {
  ir::Graph graph;
  std::vector<at::Tensor> constants;
  std::vector<int32_t> inputArgIndex;
  int32_t numArgs = 0;
  std::vector<Step> steps;  // in execution order: each partition's steps are contiguous
  std::vector<FrozenCheck> frozen;
  /// Call arguments some step writes in place (Step::inPlaceOp), in increasing order.
  std::vector<int32_t> inPlaceArgs;
  ExecutorStats stats;
  std::vector<std::pair<ir::ValueId, c10::IValue>> folded;  // values computed at compile time
  std::vector<std::string> nodeEngines;                     // by node index of graph
  std::vector<std::string> nodeRunsOn;                      // by node index: FusedOp::runsOn, "ATen", ...
  std::vector<std::map<std::string, double>> nodeTimings;
  std::vector<int32_t> nodePartition;
  std::vector<PartitionDecision> partitions;
  int64_t timingsRun = 0;
  /// Profiling (setProfiling): nanoseconds each step took, summed over the profiled runs, and
  /// how many runs were profiled. Written by whichever thread runs the plan.
  mutable std::unique_ptr<std::atomic<int64_t>[]> stepNs;
  mutable std::atomic<int64_t> profiledRuns{0};
  /// Packs the own GEMM's deferred weights (CompileOptions::deferPacking) after the plan is
  /// returned; joined before the ops it works on are destroyed.
  std::thread deferredWork;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (deferredWork.joinable()) deferredWork.join();
  }
};

// --- values (runtime/values.cpp) ------------------------------------------------------------

/// Python operator and SymInt arithmetic that Dynamo leaves in graphs, by qualified name.
const std::map<std::string, BuiltinFn>& builtins();
c10::TypePtr unwrapOptional(const c10::TypePtr& t);
bool isFloatLike(const c10::TypePtr& t);
int64_t ivalueToInt(const c10::IValue& v);
double ivalueToDouble(const c10::IValue& v);
bool isNumber(const c10::IValue& v);
/// A Python number where the schema wants a Tensor, wrapped as eager does.
c10::IValue wrapNumber(const c10::IValue& v);
/// Builds a typed list IValue from IR list elements, reading values from \p slots if needed.
StatusOr<c10::IValue> buildList(const ir::Arg& list, const c10::TypePtr& elemType,
                                const std::vector<c10::IValue>* slots, const std::vector<at::Tensor>& constants);
/// A non-list argument known at plan time.
StatusOr<c10::IValue> fixedValue(const ir::Arg& a, const c10::TypePtr& type, const std::vector<at::Tensor>& constants);

// --- running (runtime/executor.cpp) ---------------------------------------------------------

/// Runs steps [begin, end) on \p slots. \p engine: run every fused step on it (the partition
/// tuner's candidates); nullopt: each fused op's planned engine (or ATen when \p exact). ATen
/// errors propagate as exceptions (c10::Error), the executor's own as a Status. \p keepValues:
/// free nothing (the planner reads the values afterwards). \p inPlace: steps with an in-place form
/// run it (only a call's run, never the planner's: a write into the caller's input is done once).
Status runSteps(const CompiledGraph::Impl& p, size_t begin, size_t end, std::vector<c10::IValue>& slots, bool exact,
                std::optional<Engine> engine, bool keepValues = false, std::atomic<int64_t>* stepNs = nullptr,
                bool inPlace = false);

}  // namespace verifuse::runtime
