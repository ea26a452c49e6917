// The planner: compileGraph turns a fused, partitioned IR graph into an execution plan
// (runtime/plan.h) by running the passes below in order, each in its own file. Every pass reads
// and writes one PlanBuild and reports whether it changed the plan (StatusOr<bool>), as the graph
// passes do (passes/pipeline.h); the executor (runtime/executor.cpp) only runs the result.
//
//   constant_fold.cpp    which nodes run once now, over constants alone; evaluating them; which
//                        folded values the calls keep
//   schedule.cpp         units (a partition's nodes, or one node) ordered so each partition runs
//                        as one block
//   engine_selection.cpp the engine legality table, each partition's facts (size, static shapes,
//                        forced by an option) and the engine it gets when it is not timed
//   memory.cpp           constants materialized or handed to the one op that prepacks them,
//                        last uses (values freed after them), residual buffers donated, inputs
//                        the caller writes back updated in place, deferred packing
//   steps.cpp            one step per node: a dispatcher call, a builtin or a fused op
//   layout.cpp           which values are channels-last, max pools on channels-last copies,
//                        conversions at partition edges
//   tuning.cpp           one decision per partition: timed on every candidate engine (or read
//                        from the tuning database / a saved plan), else the heuristic's
#pragma once

#include "runtime/plan.h"
#include "verifuse/rules/rules.h"

#include <map>
#include <string>
#include <vector>

namespace verifuse::planner {

using runtime::CompileOptions;
using runtime::Engine;
using runtime::PartitionSpec;

/// One unit of scheduling: a partition's nodes, or a single node outside every partition.
struct Unit {
  std::vector<size_t> nodes;  // node indices (graph order)
  int32_t partition = -1;     // index into PlanBuild::specs, or -1
};

/// What engine selection knows of a partition before any kernel exists.
struct PartitionFacts {
  double macs = 0;             // multiply-adds per run (static shapes; 0 when unknown)
  bool staticShapes = true;
  bool forced = false;         // an option fixes its engine (CompileOptions::forcedAttention/Linear)
  bool fewRowLinears = false;  // float32 or bf16 linears of at most 4 rows: the own GEMM untimed
  bool timed = false;          // the tuner decides (else `heuristic` does)
  Engine heuristic = Engine::kOnednn;
};

/// The state the passes share while one plan is built.
struct PlanBuild {
  PlanBuild(ir::Graph& g, const CompileOptions& o, runtime::CompiledGraph::Impl& i) : graph(g), options(o), impl(i) {}
  ir::Graph& graph;
  const CompileOptions& options;
  runtime::CompiledGraph::Impl& impl;
  std::vector<runtime::FrozenInput> frozen;  // weights the caller still passes per call
  int32_t numArgs = 0;
  std::map<ir::NodeId, size_t> indexOf;  // node id -> index in graph.nodes()
  std::vector<bool> isOutput;            // by value: a graph output

  std::vector<bool> planTime;            // constant_fold: by node, evaluated once while planning
  std::vector<c10::IValue> foldSlots;    // constant_fold: the plan-time nodes' results

  std::vector<Unit> units;               // schedule
  std::vector<int32_t> unitOfNode;
  std::vector<PartitionSpec> specs;      // the partitions that run (folded members removed)
  std::vector<size_t> unitOrder;         // units in execution order
  std::vector<size_t> order;             // node indices in execution order

  std::vector<PartitionFacts> facts;     // engine_selection: by spec
  bool tuning = false;                   // timing is possible at all (options, a database)

  std::vector<int> constantReaders;      // memory: by constant
  std::vector<bool> readByFused;
  size_t releasedSinceTrim = 0;          // bytes of folded weights freed since the last heap trim

  std::vector<runtime::FusedOp*> fusedOf;  // steps: by node (the steps own them)
  std::vector<size_t> stepOf;              // steps: by node, SIZE_MAX for none
  std::vector<bool> anyLayoutOut;          // steps: by node, its fused op may leave its result in any
                                           // layout (layoutAgnosticReaders, asked once per op)

  std::vector<bool> channelsLast;        // layout: by value, the layout the plan hands to readers
  std::vector<size_t> unitOfDecision;    // tuning: by impl.partitions entry
};

// The passes, in the order compileGraph runs them.
StatusOr<bool> markPlanTimeNodes(PlanBuild& b);       // constant_fold.cpp
StatusOr<bool> scheduleUnits(PlanBuild& b);           // schedule.cpp
StatusOr<bool> selectEngines(PlanBuild& b);           // engine_selection.cpp
StatusOr<bool> prepareConstants(PlanBuild& b);        // memory.cpp
StatusOr<bool> evaluatePlanTimeNodes(PlanBuild& b);   // constant_fold.cpp
StatusOr<bool> buildSteps(PlanBuild& b);              // steps.cpp
StatusOr<bool> keepFoldedValues(PlanBuild& b);        // constant_fold.cpp
StatusOr<bool> assignLayouts(PlanBuild& b);           // layout.cpp
StatusOr<bool> planLifetimes(PlanBuild& b);           // memory.cpp
StatusOr<bool> writeInputsInPlace(PlanBuild& b);      // memory.cpp
StatusOr<bool> decidePartitions(PlanBuild& b);        // tuning.cpp
StatusOr<bool> recordEdgeConversions(PlanBuild& b);   // layout.cpp
StatusOr<bool> startDeferredPacking(PlanBuild& b);    // memory.cpp

// Shared helpers.
/// A plan step for a dispatcher op or builtin (steps.cpp).
StatusOr<runtime::Step> planStep(const ir::Node& n, const std::vector<at::Tensor>& constants);
/// A row program's step and its op, for the caller to configure (steps.cpp).
StatusOr<std::unique_ptr<runtime::FusedOp>> rowwiseStep(const ir::Graph& g, const ir::Node& n,
                                                        const std::vector<at::Tensor>& constants,
                                                        const CompileOptions& options, runtime::Step& step);
/// True if every reader of \p v accepts any memory format (layout.cpp).
bool layoutAgnosticReaders(const ir::Graph& g, ir::ValueId v, int depth = 0);
/// Multiply-adds of a fused node from the IR's static shapes, 0 when unknown (engine_selection.cpp).
double estimateMacs(const ir::Graph& g, const ir::Node& n);
/// Hands freed heap pages back to the OS once enough folded weights were freed (memory.cpp).
void releaseFreedHeapPages(size_t& releasedBytes);

}  // namespace verifuse::planner
