// A saved plan: what one compile decided, so another process can rebuild the same plan without
// running a Z3 query or a timing (issue 18: aot_compile save/load and the plan cache).
//
// What it holds: the proof verdicts of the rules that matched (with the solver version), the
// verdict of every fold instance validated on the weights, every tuning decision by its key, the
// optimized IR as text, the environment it was made in (verifuse build, torch, oneDNN, Z3, CPU
// ISA, options) and a content fingerprint of every frozen weight. Not the weights: they are bound
// again from the module at load time, and a plan is only replayed over weights with the same
// fingerprints.
//
// How it is used (driver::compile, compile.h): the pipeline runs again on the lowered graph (the
// rewrites are deterministic and cheap; the folded constants are recomputed from the real
// weights), but every proof, instance check and tuning decision is answered from the record. Any
// divergence (a rule, instance or tuning key the record does not have, or an optimized graph that
// prints differently) refuses the saved plan, and the graph is compiled from scratch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/kernels/tuning_db.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/support/status.h"

namespace verifuse::driver {

/// Content fingerprint of one frozen weight: shape, strides, dtype and every byte it spans.
struct WeightPrint {
  std::string name;  ///< the constant's name in the lowered graph
  std::string print; ///< 16 hex digits
};

struct SavedPlan {
  /// Bumped when the encoding or the meaning of a field changes: older records are ignored.
  static constexpr const char* kFormat = "verifuse-plan-v1";

  /// Where the plan was made: environmentKey() plus the caller's part (verifuse build, torch
  /// version, options). A plan from another environment is never used.
  std::string environment;
  std::vector<WeightPrint> weights;  ///< every constant of the lowered graph (weights first), by id
  std::map<std::string, passes::ProofOutcome> proofs;  ///< rule id -> verdict, rules that matched
  /// Every fold instance check, in the order the pipeline asked for them (rule id, result).
  std::vector<std::pair<std::string, rules::InstanceCheck>> instances;
  /// Tuning decisions by TuningKey::canonical(); `tuned` says whether the compile had a tuning
  /// database (without one the size heuristic decided and nothing was timed).
  bool tuned = false;
  std::map<std::string, kernels::TuningDecision> tunings;
  std::string optimizedIr;  ///< ir::printGraph of the planned graph

  /// Length-framed text; decode(encode()) == *this.
  std::string encode() const;
  /// kInvalidArgument for bytes that are not a plan of this format (truncated, other version, ...).
  static StatusOr<SavedPlan> decode(const std::string& bytes);
};

/// The environment part verifuse itself knows: plan format, Z3 version, oneDNN version and ISA,
/// the ISA of verifuse's own kernels.
std::string environmentKey();

/// 16 hex digits per constant of \p g listed in \p constants: sizes, strides, dtype and the bytes
/// it spans. Errors: a constant without data.
StatusOr<std::vector<WeightPrint>> fingerprintWeights(const ir::Graph& g, const std::vector<ir::ConstantId>& constants);

/// Ok when \p saved was made over the same weights; else kInvalidArgument naming the first
/// weight that differs.
Status checkWeights(const std::vector<WeightPrint>& saved, const std::vector<WeightPrint>& now);

}  // namespace verifuse::driver
