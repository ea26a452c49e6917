// The compile driver: the whole C++ pipeline in order, for one graph.
//
//   canonicalize + fuse (rules under their proof gates, folds validated)   passes/, rules/
//   partition (union-find by engine class, acyclic merges)                 partition/
//   plan: per partition one engine, one layout, one (timed) decision       runtime/, kernels/
//
// Python lowers an FX graph to ir::Graph and calls compile() once; the bindings only translate
// the request and the report.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "verifuse/driver/saved_plan.h"
#include "verifuse/ir/graph.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/shape_guards/shape_guards.h"
#include "verifuse/support/status.h"

namespace verifuse::driver {

/// Which engines the plan may use (VERIFUSE_ENGINE, a benchmarking knob, overrides "auto").
enum class EnginePolicy {
  kAuto,    ///< every engine; partitions tuned or chosen by the size heuristic
  kAten,    ///< every fused op as its ATen composition (the unfused "exact" plan uses this too)
  kOnednn,  ///< every partition oneDNN can run on oneDNN, untimed
};

struct CompileRequest {
  std::vector<int32_t> inputArgIndex;        ///< graph input k is argument inputArgIndex[k] of a call
  std::vector<runtime::FrozenInput> frozen;  ///< arguments that are frozen weights (checked per call)
  int32_t numArgs = 0;
  /// {graph output, argument} pairs the caller copies back after each call (runtime::CompileOptions::
  /// writtenBackInputs): aot_autograd's input mutations, sent by Python.
  std::vector<std::pair<int32_t, int32_t>> writtenBack;
  passes::VerifyLevel verify = passes::VerifyLevel::kInstances;
  bool fuse = true;                          ///< false: no rules at all (the exact plan)
  EnginePolicy engines = EnginePolicy::kAuto;
  bool bf16 = false;                         ///< conv/linear compute in bf16
  std::string cacheDir;                      ///< proofs and tuning decisions persist here ("" = none)
  bool autotune = true;
  int64_t layerCheckWeights = 4096;          ///< -1: no limit, 0: off
  /// Linear weights on oneDNN: read in place, prepacked, or chosen per shape (runtime::LinearWeights).
  /// VERIFUSE_LINEAR_WEIGHTS=packed|in-place (a benchmarking knob) overrides kAuto.
  runtime::LinearWeights linearWeights = runtime::LinearWeights::kAuto;
  bool plantedBug = false;                   ///< test only: the deliberately wrong rule joins in
  /// Dynamic shapes: Dynamo's shape guards, sent once by Python (verifuse/guards.py). With
  /// shapeFacts.dynamic the plan's shape assumptions are derived and decided (report.shapes).
  shape_guards::DynamoFacts shapeFacts;
  /// Saved plans (saved_plan.h). \p environment: the caller's part of the environment key
  /// (verifuse build, torch version, options); a plan is recorded (CompiledModel::saved) when it
  /// is non-empty and the shapes are static.
  std::string environment;
  /// Replay this plan (aot_compile load): proofs, instance checks and tuning from the record, no
  /// Z3 query and no timing. A plan that does not fit (weights, environment, a divergence) is
  /// refused and the graph compiled from scratch; CompileReport::planSource says which happened.
  std::shared_ptr<const SavedPlan> replay;
  /// The plan cache: look the graph up in cacheDir's "plans-v1" store (key: the lowered graph,
  /// weight fingerprints and environment) and replay a hit; store a fresh plan on a miss.
  bool planCache = false;
};

/// Where a node's input comes from: another node, or a graph input (by its name).
struct NodeInputReport {
  ir::NodeId producer = -1;        ///< -1: a graph input
  std::string graphInput;          ///< the graph input's name when producer is -1
};

/// One live node of the planned graph, for the report's picture.
struct NodeReport {
  ir::NodeId id = -1;
  std::string op;                  ///< qualified name
  std::vector<NodeInputReport> inputs;  ///< each producer (or graph input) once, in order
  int32_t partition = -1;          ///< index into CompileReport::partitions, or -1 (ATen alone)
  std::string engine;              ///< "onednn", "aten", "dispatcher", "builtin", "constant"
  std::string runsOn;              ///< what runs it, for people (CompiledGraph::nodeRunsOn)
  std::string fusion;              ///< post-op chain of a fused node (its post_ops operand), "" otherwise
  bool graphOutput = false;        ///< one of its outputs is a graph output
  std::map<std::string, double> timings;  ///< the node alone on each engine, when timed
};

/// Each node of \p g (in order) as the report pictures it, from the graph alone: id, operator,
/// inputs, fusion and graphOutput (partition, engine, runsOn and timings are the plan's and stay
/// unset). The compile report fills in the rest; the HTML report uses it alone for a graph it only
/// has as IR text (`_C.graph_nodes`).
std::vector<NodeReport> describeGraphNodes(const ir::Graph& g);

/// Everything explain() shows about one compile. Field names match the Python GraphReport's.
struct CompileReport {
  std::vector<rules::FusionRecord> fusions;
  std::vector<passes::ProofOutcome> proofs;
  int rulesMatched = 0, rulesApplied = 0, rulesRefused = 0;
  std::map<std::string, int> passChanges;
  std::map<std::string, int> rewrites;                 ///< rule id -> applications, every phase
  std::vector<passes::NearMiss> nearMisses;           ///< a rule's op matched, a guard refused
  int nearMissesOmitted = 0;
  std::vector<runtime::PartitionDecision> partitions;  ///< execution order
  std::vector<NodeReport> nodes;
  int reorders = 0;         ///< layout conversions per run at partition edges
  int reordersBefore = 0;   ///< the same count if every fused node were its own partition
  int64_t timingsRun = 0;   ///< autotuner timings this compile ran
  std::string tuningDb;     ///< the database's path, or why there is none
  int64_t tuningDbHits = 0;
  std::string tuningDbRebuilt;
  runtime::ExecutorStats stats;
  std::map<std::string, int> ops;  ///< op histogram of the planned graph
  double pipelineSeconds = 0;      ///< rules, proofs and instance validation
  double planSeconds = 0;          ///< partitioning, kernels, prepacking, tuning
  /// Dynamic shapes: the plan's assumptions vs Dynamo's guards, the added guards and their
  /// per-call check (shapes.check), the shape program (empty unless request.shapeFacts.dynamic).
  shape_guards::ShapeGuardReport shapes;
  /// "compiled", "plan-cache" (replayed from cacheDir) or "saved-plan" (replayed from the request).
  std::string planSource = "compiled";
  /// Why a saved or cached plan was refused or not stored ("" when nothing to say).
  std::string planNote;
  /// Z3 queries (rule proofs and layer checks) and timings this compile ran.
  int64_t solverQueries = 0;
};

struct CompiledModel {
  std::shared_ptr<const runtime::CompiledGraph> plan;
  CompileReport report;
  /// The plan as a record (null when not recorded: no environment given, or dynamic shapes).
  std::shared_ptr<const SavedPlan> saved;
};

/// Runs the pipeline on \p graph and builds its plan. Errors: kUnsupported / kUnimplemented for a
/// graph the executor cannot run (the caller falls back to eager), kInvalidGraph / kInvalidArgument
/// for malformed input.
StatusOr<CompiledModel> compile(ir::Graph graph, const CompileRequest& request);

}  // namespace verifuse::driver
