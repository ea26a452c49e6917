// Rewrite rules as data: each rule is a pattern (match), side conditions (checked in match, with a
// reason when they fail), a replacement (rewrite) and the proof obligation that justifies it
// (verify::RuleProof from the verifier's catalogue). Torch-free and Z3-free.
//
// The fused-op vocabulary the rules produce (the executor runs these on oneDNN, or on ATen when
// oneDNN has no implementation):
//   verifuse::conv(x, W, b?, stride, padding, dilation, groups, post_ops, extra...)
//   verifuse::linear(x, W, b?, post_ops, extra...)        x[..., K], W[N, K]
// post_ops is a string such as "sum(1),relu" (see PostOpSpec); every "sum" consumes the next
// extra value argument (the residual, same shape as the output).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/catalog.h"

namespace verifuse::rules {

inline constexpr const char* kConvOp = "verifuse::conv";
inline constexpr const char* kLinearOp = "verifuse::linear";
inline constexpr size_t kConvPostOpsArg = 7;
inline constexpr size_t kLinearPostOpsArg = 3;

/// True for verifuse::conv / verifuse::linear.
bool isFusedOp(const ir::Node& n);
/// Index of the post_ops string argument of a fused op.
size_t postOpsArgIndex(const ir::Node& n);

/// One post-op of a fused op. Kinds and params (torch's parameters, not oneDNN's):
///   relu | leaky_relu(slope) | gelu_erf | gelu_tanh | silu | sigmoid | tanh | hardswish |
///   hardsigmoid | clamp(lo, hi) | elu(alpha) | sum(scale)
struct PostOpSpec {
  std::string kind;
  std::vector<double> params;
  bool operator==(const PostOpSpec&) const = default;
};
std::string formatPostOps(const std::vector<PostOpSpec>& ops);
StatusOr<std::vector<PostOpSpec>> parsePostOps(std::string_view text);

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
  enum class Kind { kNone, kBatchNorm, kChannelMul, kChannelAdd, kChannelDiv } kind = Kind::kNone;
  ir::ConstantId weight = -1, bias = -1;            ///< before (bias -1: none)
  ir::ConstantId foldedWeight = -1, foldedBias = -1; ///< after
  ir::ConstantId gamma = -1, beta = -1, mean = -1, var = -1;  ///< batch norm (gamma/beta may be -1)
  ir::ConstantId operand = -1;                      ///< the per-channel constant (mul/add/div)
  double eps = 0, scalar = 1;                       ///< bn eps; scalar operand / add alpha
};

/// One applied rewrite, for the report and the instance validator.
struct FusionRecord {
  std::string rule;                 ///< rule id (= its obligation's id)
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
  ir::NodeId consumer = -1; ///< the node it absorbs
  int operand = 0;          ///< which operand of the consumer is the anchor's output
};

/// A proof-carrying rewrite rule. Rules are created only through makeRule(), which looks up the
/// rule's obligation in the verifier's catalogue and fails if there is none: a rule cannot exist
/// without a proof obligation.
class Rule {
 public:
  using MatchFn = std::function<std::optional<Match>(const ir::Graph&, ir::NodeId, std::string* whyNot)>;
  using RewriteFn = std::function<Status(ir::Graph&, const Match&, FusionRecord&)>;

  const std::string& id() const { return proof_.ruleId; }
  const std::string& summary() const { return summary_; }
  const verify::RuleProof& proof() const { return proof_; }
  /// The rewrite creates folded constants (the instance validator checks them).
  bool foldsConstants() const { return foldsConstants_; }
  std::optional<Match> match(const ir::Graph& g, ir::NodeId n, std::string* whyNot = nullptr) const {
    return match_(g, n, whyNot);
  }
  Status rewrite(ir::Graph& g, const Match& m, FusionRecord& record) const { return rewrite_(g, m, record); }

 private:
  friend StatusOr<Rule> makeRule(const std::vector<verify::RuleProof>& catalogue, const std::string& id,
                                 std::string summary, MatchFn match, RewriteFn rewrite, bool foldsConstants);
  Rule(verify::RuleProof proof, std::string summary, MatchFn match, RewriteFn rewrite, bool foldsConstants)
      : proof_(std::move(proof)), summary_(std::move(summary)), match_(std::move(match)),
        rewrite_(std::move(rewrite)), foldsConstants_(foldsConstants) {}
  verify::RuleProof proof_;
  std::string summary_;
  MatchFn match_;
  RewriteFn rewrite_;
  bool foldsConstants_ = false;
};

/// kNotFound when \p id has no obligation in \p catalogue.
StatusOr<Rule> makeRule(const std::vector<verify::RuleProof>& catalogue, const std::string& id,
                        std::string summary, Rule::MatchFn match, Rule::RewriteFn rewrite,
                        bool foldsConstants = false);

/// The fusion rules, in the order the pass manager tries them. \p catalogue: the obligations
/// (normally verify::builtinRuleProofs(), plus test-only planted bugs).
StatusOr<std::vector<Rule>> fusionRules(const std::vector<verify::RuleProof>& catalogue);

/// Test-only: a rule that folds batch norm into a convolution WITHOUT eps, carrying the
/// obligation of that (wrong) math. Its proof comes out Refuted, so it must never apply.
verify::RuleProof plantedBugProof();
StatusOr<Rule> plantedBugRule(const std::vector<verify::RuleProof>& catalogue);

}  // namespace verifuse::rules
