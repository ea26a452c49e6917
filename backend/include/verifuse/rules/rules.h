// Rewrite rules as data: each rule is one declaration (RuleDeclaration) of its pattern (match),
// side conditions (checked in match, with a reason when they fail), replacement (rewrite), and
// the proof obligation with its mutants that justify it. The declarations live in
// backend/src/rules/, one file per rule family (README.md there). Torch-free and Z3-free.
//
// The fused-op vocabulary the rules produce (the executor runs these on oneDNN, or on ATen when
// oneDNN has no implementation) is declared with every operand named in ir/op_schema.h
// (FusedConv, FusedLinear, QConv, QLinear, ...). A fused op's post-ops are a typed list
// (PostOpSpec, read with fusedPostOps); every "sum" consumes the next residual operand after the
// fixed ones (same shape as the output).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/ir/op_schema.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/catalog.h"

namespace verifuse::rules {

inline constexpr const char* kConvOp = "verifuse::conv";
inline constexpr const char* kLinearOp = "verifuse::linear";

/// True for verifuse::conv / verifuse::linear.
bool isFusedOp(const ir::Node& n);

/// One post-op of a fused op. Kinds and params (torch's parameters, not oneDNN's):
///   relu | leaky_relu(slope) | gelu_erf | gelu_tanh | silu | sigmoid | tanh | hardswish |
///   hardsigmoid | clamp(lo, hi) | elu(alpha) | sum(scale)
struct PostOpSpec {
  std::string kind;
  std::vector<double> params;
  bool operator==(const PostOpSpec&) const = default;
};
/// The post-op list's text form ("sum(1),relu"), which the IR stores in a fused op's post_ops
/// operand and the int8 ops take as a string argument. parsePostOps is the one parser of it.
std::string formatPostOps(const std::vector<PostOpSpec>& ops);
StatusOr<std::vector<PostOpSpec>> parsePostOps(std::string_view text);
/// A fused op's post-ops, typed (verifuse::conv, linear, qconv, qlinear: their post_ops operand,
/// ir/op_schema.h). An error when the node has no post_ops operand or its text is malformed.
StatusOr<std::vector<PostOpSpec>> fusedPostOps(const ir::Node& fused);
/// Replaces a fused op's post-ops (false when the node has no post_ops operand).
bool setFusedPostOps(ir::Node& fused, const std::vector<PostOpSpec>& ops);
/// True when a fused op has no post-ops (or no post_ops operand).
bool hasNoFusedPostOps(const ir::Node& fused);

/// What the verification of an applied rewrite found (filled by the instance validator).
struct InstanceCheck {
  std::string verdict = "not-checked";  ///< "Proved", "Refuted", "not-checked", ...
  double maxErrorBound = 0;             ///< largest per-output-channel bound on |folded - exact|
  double maxError = 0;                  ///< largest |folded - exact| seen
  std::string detail;
  /// End-to-end Z3 check of the whole layer with its concrete weights (small layers only):
  /// "Proved", "Refuted", "Unknown", "Timeout", "Unsupported", "skipped" or "not-checked".
  std::string layerVerdict = "not-checked";
  std::string layerDetail;
  double layerSeconds = 0;
};

/// A constant fold the rule performed: enough to recompute the folded constants exactly.
struct FoldRecord {
  /// kConcat: foldedWeight (foldedBias) is the row concatenation of parts (partBiases), a copy
  /// that must be bit-exact (qkv-concat).
  /// kInt8Scales (int8-conv-dequant, int8-linear-dequant): no new constant; the kernel folds the
  /// output scale float(sx) * float(sw[o]) (scalar = sx, operand = the per-channel scales sw) and
  /// prepacks the s8 weight (weight); zeroPoints are the weight's zero points (all 0 required).
  enum class Kind { kNone, kBatchNorm, kChannelMul, kChannelAdd, kChannelDiv, kConcat, kInt8Scales } kind = Kind::kNone;
  ir::ConstantId weight = -1, bias = -1;            ///< before (bias -1: none)
  ir::ConstantId foldedWeight = -1, foldedBias = -1; ///< after
  ir::ConstantId gamma = -1, beta = -1, mean = -1, var = -1;  ///< batch norm (gamma/beta may be -1)
  ir::ConstantId operand = -1;                      ///< the per-channel constant (mul/add/div)
  double eps = 0, scalar = 1;                       ///< bn eps; scalar operand / add alpha
  std::vector<ir::ConstantId> parts, partBiases;    ///< kConcat: the weights (biases) concatenated
  ir::ConstantId zeroPoints = -1;                   ///< kInt8Scales: the weight's zero points
};

/// One applied rewrite, for the report and the instance validator.
struct FusionRecord {
  std::string rule;                 ///< rule id
  std::vector<std::string> nodes;   ///< the ops it replaced, in graph order
  ir::NodeId result = -1;           ///< the node holding the result (before compaction)
  std::string resultName;           ///< the result value's name when known
  FoldRecord fold;
  std::string proofVerdict = "not-verified";  ///< the rule's proof verdict at apply time
  bool applied = true;  ///< false: matched and proved, but its instance failed validation
  InstanceCheck instance;
};

struct Match {
  ir::NodeId anchor = -1;   ///< the node the rewrite keeps (the producer)
  ir::NodeId consumer = -1; ///< the node it absorbs (== anchor for one-node rules)
  int operand = 0;          ///< which operand of the consumer is the anchor's output
};

/// Pattern + guard: a Match, or nullopt. After the node's op matched one of the rule's anchors, a
/// guard that fails writes why into *whyNot (a near miss, shown by explain(verbose=True)); a node
/// that is simply not the rule's pattern (another rule's case) leaves *whyNot empty.
using MatchFn = std::function<std::optional<Match>(const ir::Graph&, ir::NodeId, std::string* whyNot)>;
/// The rewrite of a Match (fusion rules fill the record for the report and instance validation).
using RewriteFn = std::function<Status(ir::Graph&, const Match&, FusionRecord&)>;

/// Where a rule runs. The pass manager runs the phases in this order: canonicalize (two sweeps),
/// remove-no-ops, dead-code, then fusion-rules, remove-no-ops and dead-code to a fixpoint, then
/// row-fusion and dead-code.
enum class Phase {
  kCanonicalize,       ///< pass "canonicalize", first sweep: aten conv/addmm/mm/linear -> verifuse ops
  kCanonicalizeViews,  ///< pass "canonicalize", second sweep: the N-d linear's view pair
  kNoOps,              ///< pass "remove-no-ops"
  kDeadCode,           ///< pass "dead-code" (sweeps the nodes backwards)
  kFusion,             ///< pass "fusion-rules"
  kRowFusion,          ///< pass "row-fusion": once, after the fusion rules' fixpoint (then dead code)
};
const char* passName(Phase phase);

/// A declaration field that must be given: it has no default, so a RuleDeclaration that leaves it
/// out does not compile (a rule cannot be written without its obligation).
template <typename T>
class Required {
 public:
  Required() = delete;
  template <typename U>
    requires std::is_constructible_v<T, U&&>
  Required(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT(google-explicit-constructor)
  const T& get() const { return value_; }

 private:
  T value_;
};

/// Everything a rule is, in one place (one declaration per rule, in its family's file under
/// backend/src/rules/): written with designated initializers, in this order.
struct RuleDeclaration {
  Required<std::string> id;       ///< kebab-case, stable: report, stats and proof names
  Required<std::string> summary;  ///< one line for the report
  Required<std::string> math;     ///< the identity the obligation states, for review
  Required<Phase> phase;
  /// The ops the pattern is rooted at ("aten::relu"); the rule is tried only at such nodes, and a
  /// failed guard there is a near miss. Empty: every op (dead code).
  std::vector<std::string> anchors = {};
  Required<MatchFn> match;        ///< pattern and guard, with why-not reasons
  Required<RewriteFn> rewrite;
  /// Source and target semantics over the reals under the guard's facts (verify::RuleProof::build).
  Required<verify::ObligationFactory> obligation;
  /// Deliberately wrong variants (a dropped guard, a wrong constant, a wrong axis); at least one,
  /// each must come out Refuted with a counterexample (checked when the rule is declared and by
  /// tests/cpp/passes/rules_test.cpp).
  std::vector<verify::Mutant> mutants = {};
  bool usesDot = false;         ///< the obligation uses sem::DotModel (proved symbolically and K = 1..4)
  bool foldsConstants = false;  ///< the rewrite creates folded constants (instance validation checks them)
};

/// A proof-carrying rewrite rule. The only way to make one is Rule::declare(), which takes the
/// whole declaration (pattern, guard, rewrite, obligation, mutants) and refuses an incomplete one:
/// a rule cannot exist without its obligation.
class Rule {
 public:
  using MatchFn = rules::MatchFn;
  using RewriteFn = rules::RewriteFn;

  /// kInvalidArgument if the declaration is incomplete: id not kebab-case, no summary or math, no
  /// match/rewrite/obligation function, no mutant, a mutant without name, description or factory.
  static StatusOr<Rule> declare(RuleDeclaration declaration);

  const std::string& id() const { return proof_.ruleId; }
  const std::string& summary() const { return summary_; }
  const std::string& math() const { return proof_.math; }
  Phase phase() const { return phase_; }
  const std::vector<std::string>& anchors() const { return anchors_; }
  /// The node's op is one of the anchors (or the rule has none).
  bool anchoredAt(const ir::Node& n) const;
  /// The rule's obligation and mutants (what the prover proves before the rule may apply).
  const verify::RuleProof& proof() const { return proof_; }
  /// The rewrite creates folded constants (the instance validator checks them).
  bool foldsConstants() const { return foldsConstants_; }
  std::optional<Match> match(const ir::Graph& g, ir::NodeId n, std::string* whyNot = nullptr) const {
    return match_(g, n, whyNot);
  }
  Status rewrite(ir::Graph& g, const Match& m, FusionRecord& record) const { return rewrite_(g, m, record); }

 private:
  Rule() = default;
  verify::RuleProof proof_;
  std::string summary_;
  Phase phase_ = Phase::kFusion;
  std::vector<std::string> anchors_;
  MatchFn match_;
  RewriteFn rewrite_;
  bool foldsConstants_ = false;
};

/// Every built-in rule, in the order the pipeline runs them: phase by phase, and within a phase in
/// the order they are tried at each node. Fails only on a malformed declaration (a duplicate id,
/// a rule without a mutant); a test checks that it never does.
StatusOr<std::vector<Rule>> builtinRules();

/// The proofs of \p rules, same order (what `python -m verifuse prove` proves).
std::vector<verify::RuleProof> proofsOf(const std::vector<Rule>& rules);

/// Test-only: a rule that folds batch norm into a convolution WITHOUT eps, carrying the
/// obligation of that (wrong) math. Its proof comes out Refuted, so it must never apply.
StatusOr<Rule> plantedBugRule();
verify::RuleProof plantedBugProof();
/// Test-only, a transformer case: eager attention rewritten to SDPA with scale 1/D instead of the
/// graph's 1/sqrt(D), carrying the obligation of that (wrong) math. Refuted, so it never applies.
StatusOr<Rule> plantedAttentionBugRule();
/// Compatibility with callers written for the catalogue: the argument is ignored (the planted
/// rule declares its own obligation); prefer plantedBugRule().
StatusOr<Rule> plantedBugRule(const std::vector<verify::RuleProof>& ignored);

}  // namespace verifuse::rules
