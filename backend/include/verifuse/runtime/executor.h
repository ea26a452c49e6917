// The executor: runs an IR graph with every operator called through the c10 dispatcher.
// One of the two translation units that see LibTorch headers (the other is the Python module).
#pragma once

#include <ATen/core/ivalue.h>

#include <map>
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

/// What runs a partition (and so every fused node in it).
enum class Engine : uint8_t {
  kAten,    ///< the ATen composition of each op, through the dispatcher
  kOnednn,  ///< oneDNN primitives with post-ops, weights prepacked
  kGemm,    ///< verifuse's own GEMM (linears; AVX2), weights packed once, post-ops as its epilogue
  kRowwise, ///< the row engine: a chain of elementwise ops and row reductions in one pass
};
/// "aten", "onednn", "gemm", "rowwise".
const char* engineName(Engine engine);
/// ATen's CPU SDPA node (attention-to-sdpa's result, or SDPA traced as such) in the form the
/// attention engine op reads (q, k, v, dropout_p, is_causal, attn_mask, scale): planned as an
/// engine op of its own partition class (ATen, or the oneDNN attention kernel when it can run).
bool isAttentionEngineOp(const ir::Node& node);

/// The engine class a node's partition is formed in (the legality table the partitioner and the
/// planner share): 0 runs on ATen alone; 1 conv/linear chains (oneDNN, the own GEMM or ATen);
/// 2 row-engine programs; 3 SDPA (the attention kernel or ATen), so its timing is never mixed
/// with a linear's.
int engineClassOf(const ir::Node& node);
/// Every engine, in a fixed order (tuning candidates are tried in this order).
const std::vector<Engine>& allEngines();
/// Process-wide count of fused-op runs per engine name since start: what really ran, for tests
/// that check a plan executes its partitions' decisions (not only reports them).
std::map<std::string, int64_t> engineRunCounts();
/// The own GEMM's packed weights alive in the process, shared by the plans that multiply by them
/// (runtime/weight_packings.h): "alive" packings, their "bytes", and the "hits" that found one.
std::map<std::string, int64_t> gemmPackingCounts();

/// Blocks until no plan's background work (deferred weight packing) is running. The Python package
/// calls it at interpreter exit, before C++ static objects the work may use are destroyed.
void waitForDeferredWork();

/// A partition formed by the driver (union-find over the fused graph, acyclic merges) that the
/// planner turns into one unit of execution: its nodes run together, on one engine, with one
/// layout inside and conversions only at its edges.
struct PartitionSpec {
  int32_t id = 0;
  std::vector<ir::NodeId> nodes;  ///< in graph order; ids of the graph given to compileGraph
  int engineClass = 0;            ///< partition::PartitionOptions::engineClass of its nodes
  std::string signature;          ///< partition::partitionSignature (the tuning key's structure half)
  /// The signature of each member alone (a one-node partition), in nodes' order: the tuning keys
  /// of the per-member timings that decide a split. Empty: never split.
  std::vector<std::string> memberSignatures;
};

/// What the planner decided for one partition, with the evidence (explain() shows it).
/// One conversion a run performs at a partition's edge: a convolution reading an input that is not
/// channels-last (reordered into it) or leaving a result its readers need in the plain layout.
struct EdgeConversion {
  ir::ValueId value = -1;  ///< the tensor converted
  ir::NodeId node = -1;    ///< the node it is converted for (input) or by (output)
  bool input = true;       ///< true: into node's kernel layout; false: node's output back to plain
  std::string kind;        ///< e.g. "layout: plain -> channels_last"
  int64_t bytes = -1;      ///< bytes of the tensor converted (-1: shape not static)
};

struct PartitionDecision {
  int32_t id = 0;
  std::vector<ir::NodeId> nodes;
  std::string engine;                       ///< engineName of the chosen engine, or "split"
  /// Median ms of one run of the whole partition on each candidate engine that was timed (now, or
  /// earlier when read from the tuning database); empty when nothing was timed.
  std::map<std::string, double> candidateMs;
  /// How the engine was chosen: "tuned" (timed now), "tuning-db" (an earlier timing), or
  /// "heuristic: <why>" (dynamic shapes, too big to time, no tuning database, one candidate).
  std::string how;
  /// Set when timing the members one by one showed that a mix of engines beats every whole-
  /// partition engine: the members then keep their own best engine (reported per node).
  bool split = false;
  double splitMs = -1;                      ///< the mix's summed member time when split
  std::string layout;                       ///< inside: "channels_last" or "plain"
  int inputConversions = 0;                 ///< layout conversions of its inputs per run
  int outputConversions = 0;                ///< of its outputs (to the plain layout eager has)
  /// Weight copies its engine holds beyond the graph's constants (FusedOp::weightCopyBytes summed):
  /// the memory price of the decision, e.g. the own GEMM's packed copy vs oneDNN reading in place.
  int64_t weightCopyBytes = 0;
  /// The part of it another plan of the process holds too (one packing, shared; weight_packings.h).
  int64_t sharedWeightCopyBytes = 0;
  std::string weightLayout;                 ///< "in place", "packed", "prepacked", "mixed" or ""
  /// Element type its members compute in and write: "f32", "bf16" (a bf16 model), or "mixed".
  std::string dtype;
  /// The chosen engine's kernel implementation (oneDNN's name, e.g. "brg:avx512_core_bf16"), or "".
  std::string impl;
  /// What really runs it, for people (FusedOp::runsOn of its members: "oneDNN", "own GEMM",
  /// "MKL sgemm", "row engine", "attention engine", "ATen"; several joined by " + " when split).
  std::string runsOn;
  /// Its conversions, one per converted tensor (inputConversions + outputConversions of them).
  std::vector<EdgeConversion> conversions;
  /// Multiply-adds of one run (static shapes; 0 otherwise): a profile's FLOP/s.
  double macs = 0;
};

struct ExecutorStats {
  size_t dispatcherSteps = 0;
  size_t builtinSteps = 0;
  size_t constants = 0;
  size_t fusedSteps = 0;          ///< verifuse::conv / verifuse::linear steps
  size_t onednnSteps = 0;         ///< of those, running on oneDNN
  size_t partitions = 0;          ///< units of execution formed from the driver's partitions
  size_t conversions = 0;         ///< layout conversions per run at partition edges
  size_t constantFoldedSteps = 0; ///< steps with only constant inputs, evaluated once at compile time
  size_t foldedMadeContiguous = 0; ///< folded values stored contiguous (their layout cannot be observed)
  size_t channelsLastPools = 0;   ///< max pools that run on a channels-last copy of a dense NCHW input
  /// Partitions whose random timing inputs were made: 0 when the tuning database (or a saved
  /// plan) answered every key, since inputs are made only for a candidate that really runs.
  size_t tuningInputsMade = 0;
  /// Timing inputs made from a random root through the model's own view steps, so with its
  /// strides (SDPA's transposed q, k, v), instead of dense random tensors.
  size_t tuningInputsThroughViews = 0;
  int64_t weightCopyBytes = 0;    ///< every partition's PartitionDecision::weightCopyBytes
  int64_t sharedWeightCopyBytes = 0;  ///< ... and sharedWeightCopyBytes
  /// Functional updates of an input the caller writes back (a static KV cache's index_put) that
  /// run in place on the input instead (CompileOptions::writtenBackInputs).
  size_t inPlaceWrites = 0;
  /// The planning passes (backend/src/planner/planner.h) that changed the plan, in order.
  std::vector<std::string> planPassesChanged;
};

/// The linear weight layout policy (CompileOptions::linearWeights).
enum class LinearWeights : uint8_t { kAuto, kPacked, kInPlace };

/// The float32 GEMM behind the own-GEMM engine (CompileOptions::gemmKernel).
enum class GemmKernel : uint8_t { kAuto, kOwn, kMkl };

/// How fused ops run.
struct CompileOptions {
  bool useOnednn = true;  ///< false: the ATen composition of every fused op (autotuning baseline)
  bool bf16 = false;      ///< convolution and matmul in bfloat16 with float32 accumulation
  /// Linears may run on verifuse's own GEMM (kernels/gemm.h) where this CPU can run it.
  bool ownGemm = true;
  /// The partitions to plan (driver::compile forms them). Nodes outside every partition run alone
  /// on ATen; a fused node outside every partition is planned as a partition of its own.
  std::vector<PartitionSpec> partitions;
  /// Time each static-shape partition on every engine that can run it and keep the fastest
  /// (decisions stored in \p tuningDb when given); false: a size heuristic decides.
  bool autotune = false;
  kernels::TuningDb* tuningDb = nullptr;
  /// Saved plans (driver/saved_plan.h): when set, every timed partition's decision is read from
  /// here by TuningKey::canonical() instead of \p tuningDb, and nothing is timed. A key it does not
  /// hold is a divergence: \p replayMiss (when set) gets why and the caller refuses the plan.
  const std::map<std::string, kernels::TuningDecision>* replayTunings = nullptr;
  std::string* replayMiss = nullptr;
  /// When set, every tuning decision the plan used is added here, by TuningKey::canonical().
  std::map<std::string, kernels::TuningDecision>* recordTunings = nullptr;
  int tuneRepeats = 3;
  /// Static-shape fused ops on oneDNN keep only their prepacked weights (the folded float32 copy
  /// is freed). Inputs that need the ATen composition (NaN/Inf) then make run() return
  /// StatusCode::kNeedsExactPlan: the caller runs an unfused plan instead.
  bool releaseWeights = false;
  /// Linears whose engine is the own GEMM without being timed (the heuristic, or a replayed
  /// plan's decision) pack their weights on a background thread once the plan is returned:
  /// Dynamo's guard building and the first run's first layers overlap it, and a run that reaches
  /// a linear before its weights are packed waits for them (BERT-base: 0.13 s of a warm plan).
  bool deferPacking = false;
  /// Partitions above this many multiply-adds per run are not timed: they run on oneDNN (the
  /// same GEMM/conv kernels dominate either way and fusion saves the post-ops' memory passes),
  /// and timing them would make compile time grow with the batch.
  double tuneMaxMacs = 5.0e8;
  /// Split a tuned partition when the best mix of per-member engines beats the best whole-
  /// partition engine by more than this fraction.
  double splitMargin = 0.05;
  /// How float32 linears on oneDNN hold their weights at a static shape: read in place (the plain
  /// [N, K] layout the graph holds, the user's parameter itself when nothing was folded into it:
  /// weights held once) or a prepacked copy (faster on AVX-512 CPUs, twice the weight memory).
  /// kAuto times both per shape when autotuning (else: packed on AVX-512); dynamic shapes read in
  /// place unless kPacked (a new row count then creates a kernel without another copy).
  LinearWeights linearWeights = LinearWeights::kAuto;
  /// Which float32 GEMM a static-shape linear on the own-GEMM engine runs: kAuto times verifuse's
  /// kernel against MKL's packed sgemm once per shape (kept in the tuning database) where MKL is
  /// in the process and the tier allows it (kernels::gemm::mklAvailable()), else the own kernel;
  /// kOwn / kMkl fix it (VERIFUSE_GEMM_KERNEL=own|mkl|auto, for tests and comparisons).
  GemmKernel gemmKernel = GemmKernel::kAuto;
  /// "onednn" or "aten": every SDPA partition on that engine, untimed, whatever its size (an op
  /// that cannot run oneDNN still takes ATen). VERIFUSE_ATTENTION, for tests and benchmarking.
  std::string forcedAttention;
  /// "gemm" or "onednn": likewise every partition of linears (a member that cannot run it falls
  /// back as usual). VERIFUSE_LINEAR.
  std::string forcedLinear;
  /// Test hook (tests/python/test_autotune.py): a delay added to every oneDNN op run *while
  /// tuning*, so a test can make ATen the faster engine deterministically and check that the
  /// tuner keeps it. VERIFUSE_TEST_TUNE_ONEDNN_PENALTY_MS; 0 in production.
  double tuningPenaltyMs = 0;
  /// Inputs the caller overwrites with a graph output after each run: {graph output index, call
  /// argument index}. aot_autograd's runtime wrapper does this for an input the model writes (a
  /// static KV cache's index_copy_ becomes a functional index_put whose result is copied back).
  /// Where that output is index_put(input, ...) and nothing else reads the input, the plan writes
  /// the input in place (index_put_) and returns the input itself, so the write-back copies
  /// nothing (copy_ of a tensor onto itself returns at once) and no clone of the cache is made.
  std::vector<std::pair<int32_t, int32_t>> writtenBackInputs;
};

class CompiledGraph;

/// What a profiled plan spent per node (CompiledGraph::profile).
struct NodeProfile {
  int64_t runs = 0;              ///< runs profiled since the last resetProfile()
  std::vector<int64_t> nodeNs;   ///< per node of graph(): nanoseconds summed over those runs
};

/// Process-wide: while on, every CompiledGraph::run() times each of its steps (explain's profile;
/// two clock reads per step, so leave it off otherwise).
void setProfiling(bool on);

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

/// One int8 op's kernel choice for one configuration (int8 ops choose at their first run): the
/// variant that runs and every candidate's exactness verdict (runtime/int8_kernel_choice.h).
struct Int8KernelReport {
  int32_t node = -1;
  std::string op;
  std::string variant;  ///< "onednn:vpdpbusd", "onednn:vpmaddubsw", "own:vpmaddwd", or "" (ATen reference)
  std::string impl;     ///< the kernel's implementation name
  std::string summary;  ///< one line: the choice and why the others were not used
  struct Candidate {
    std::string variant;
    std::string proof;           ///< the verdict's kind: "Proved", "Refuted", ...
    std::string proofDetail;     ///< Verdict::summary()
    std::string counterexample;  ///< Counterexample::toString() of a Refuted verdict, else ""
    std::string made;            ///< "OK" or why the kernel was not made or not used
  };
  std::vector<Candidate> candidates;
};

class CompiledGraph {
 public:
  struct Impl;
  explicit CompiledGraph(std::unique_ptr<Impl> impl);
  ~CompiledGraph();

  /// Runs the graph. Re-entrant: all per-call state lives on the calling thread's stack.
  /// Returns kStaleWeights if a frozen weight was replaced, kWeightsModified if it was modified in
  /// place, kNeedsExactPlan when NaN/Inf inputs need the ATen composition of fused ops that hold
  /// only prepacked weights; ATen errors (bad shapes, ...) come back as kInvalidArgument with
  /// ATen's message.
  StatusOr<std::vector<c10::IValue>> run(const std::vector<c10::IValue>& args) const;

  /// kStaleWeights (kWeightsModified) with the name of the first frozen input that no longer
  /// matches, else Ok.
  Status checkFrozenInputs(const std::vector<c10::IValue>& args) const;

  const ir::Graph& graph() const;
  ExecutorStats stats() const;
  /// Per node of graph(): milliseconds of the fused op alone on each engine, when its partition's
  /// tuning timed members one by one (empty otherwise).
  const std::vector<std::map<std::string, double>>& nodeTimings() const;
  /// Per node of graph(): "onednn", "aten" (fused op on ATen), "dispatcher", "builtin" or
  /// "constant" (folded at compile time).
  const std::vector<std::string>& nodeEngines() const;
  /// Per node of graph(): what runs it, for people: a fused op's FusedOp::runsOn(), "ATen" for a
  /// dispatcher step, "builtin" or "constant".
  const std::vector<std::string>& nodeRunsOn() const;
  /// The per-node times of the runs made while setProfiling(true), and clearing them.
  NodeProfile profile() const;
  void resetProfile() const;
  /// Per node of graph(): the index in partitions() of its partition, or -1.
  const std::vector<int32_t>& nodePartition() const;
  /// The planner's decision for every partition, in execution order.
  const std::vector<PartitionDecision>& partitions() const;
  /// Autotuner timings this plan ran (0 with a warm tuning database).
  int64_t timingsRun() const;
  /// The int8 kernel choices of the plan's int8 ops made so far (empty before their first run).
  std::vector<Int8KernelReport> int8Kernels() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace verifuse::runtime
