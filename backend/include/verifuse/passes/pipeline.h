// The pass pipeline: every pass is a set of proof-carrying rules (rules/rules.h, one phase each),
// run in this order: canonicalize (ATen conv/linear → verifuse fused ops, then the N-d linear's
// view pair), remove-no-ops, dead-code, then fusion-rules, remove-no-ops and dead-code to a
// fixpoint. A rule applies only when its proof admits it (VerifyLevel). Every pass reports whether
// it changed the graph; the graph is re-verified after each one. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/rules/rules.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/catalog.h"
#include "verifuse/verify/layer_check.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::passes {

/// How rewrites are justified (Options.verify in Python).
enum class VerifyLevel {
  kOff,        ///< apply rules without consulting their proofs (reported "not-verified")
  kRules,      ///< a rule applies only if its proof is Proved (and every mutant Refuted)
  kInstances,  ///< kRules + every applied fold validated on the real constants
};

struct ProofOutcome {
  std::string rule;
  std::string verdict;   ///< "Proved", "Refuted", "Unknown", "Timeout", "Unsupported"
  std::string message;   ///< the verifier's message, counterexample included when Refuted
  double seconds = 0;
  bool fromCache = false;
  bool admitted = false; ///< rewrites of this rule may apply
};

struct PipelineOptions {
  bool fuse = true;
  VerifyLevel verify = VerifyLevel::kInstances;
  /// Proves a rule (with its mutants) and says whether it may apply. Called at most once per rule
  /// per pipeline run, only for rules that matched. Required unless verify == kOff.
  std::function<ProofOutcome(const rules::Rule&)> proveRule;
  /// Validates an applied fold on the real constants (kInstances). Optional.
  std::function<rules::InstanceCheck(const ir::Graph&, const rules::FusionRecord&)> validateInstance;
  /// Extra rules tried before the built-in ones of their phase (tests: the planted bug).
  std::vector<rules::Rule> extraRules;
  int maxIterations = 20;
};

/// A rule whose pattern's anchor op matched a node where a guard then failed, and why. Kept only if
/// it still describes the final graph: the node is live, has the same op, and the rule did not
/// apply there later.
struct NearMiss {
  std::string rule;
  ir::NodeId node = -1;  ///< before compaction (like FusionRecord::result)
  std::string op;        ///< qualified op, "aten::clamp"
  std::string name;      ///< the node's first output: "%name", or "%<value id>" when unnamed
  std::string reason;
};
inline constexpr size_t kMaxNearMisses = 200;

struct PipelineResult {
  std::vector<rules::FusionRecord> fusions;  ///< fusion-phase rewrites (and refused instances)
  std::vector<ProofOutcome> proofs;      ///< one per rule that matched, in first-match order
  std::map<std::string, int> passChanges;  ///< pass name → number of runs that changed the graph
  std::map<std::string, int> rewrites;   ///< rule id → rewrites applied, every phase
  int rulesMatched = 0, rulesApplied = 0, rulesRefused = 0;  ///< fusion phase
  /// Deterministic: graph order, then rule order; the first kMaxNearMisses, the rest counted.
  std::vector<NearMiss> nearMisses;
  int nearMissesOmitted = 0;
};

/// Runs the whole pipeline on \p graph in place.
StatusOr<PipelineResult> runPipeline(ir::Graph& graph, const PipelineOptions& options);

/// Every built-in rule runPipeline runs, in its order (PipelineOptions::extraRules not included).
StatusOr<std::vector<rules::Rule>> pipelineRules();
/// Their proofs, same order: exactly what `python -m verifuse prove` proves.
StatusOr<std::vector<verify::RuleProof>> pipelineRuleProofs();
/// The lemmas of every int8 kernel variant's declared integer arithmetic (any tier's), with their
/// mutants: kernels::int8ArithmeticDeclarations() through verify::intDotProofs. `python -m verifuse
/// prove` proves these after the rules.
StatusOr<std::vector<verify::RuleProof>> kernelArithmeticProofs();

// Individual passes, their rules applied without proof gates (tests and tools; each returns
// whether it changed the graph).
StatusOr<bool> canonicalizeFusedOps(ir::Graph& graph);  ///< aten conv/linear → verifuse ops
StatusOr<bool> removeNoOps(ir::Graph& graph);           ///< clone/detach/alias/eval dropout/views
StatusOr<bool> eliminateDeadCode(ir::Graph& graph);

/// Instance validation of a fold (kInstances): recomputes the folded constants from the originals in
/// long double and checks each against a per-output-channel float32 rounding bound. "Proved" when
/// every value is within its bound, "Refuted" otherwise, "Unsupported" without data.
rules::InstanceCheck validateFoldInstance(const ir::Graph& graph, const rules::FusionRecord& record);

/// Which folds also get the end-to-end layer check (verify/layer_check.h) and the per-compile
/// budget: the check costs about 0.1 ms per weight, so a compile spends at most weightBudget
/// checked weights on it, in graph order (deterministic).
struct LayerCheckPolicy {
  int64_t maxLayerWeights = 4096;
  int64_t weightBudget = INT64_MAX;
  verify::LayerCheckOptions options;
};
rules::InstanceCheck validateFoldInstanceWithPolicy(const ir::Graph& graph, const rules::FusionRecord& record,
                                                    LayerCheckPolicy& policy);

/// A float32 constant owned by a host buffer (folded weights).
ir::ConstantId addHostConstant(ir::Graph& graph, const std::string& baseName, std::vector<int64_t> sizes,
                               std::vector<float> values);

}  // namespace verifuse::passes
