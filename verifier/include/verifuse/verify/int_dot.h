// Proving a kernel variant's integer arithmetic exact for an int8 conv/linear instance.
//
// A kernel variant declares what its int8 dot product computes, step by step
// (kernels::IntDotArithmetic: source encoding, group step, accumulator). Before the variant runs an
// instance, the verifier proves that, for the instance's real weights and the input's code range
// (zero point included), the steps compute exactly, per output element,
//
//   y = sum_k (x_k - zx) * w_k        in the mathematical integers.
//
// Two levels (README "Kernel arithmetic"):
//   1. Schematic lemmas per declared variant, proved once with Z3 (cacheable): for symbolic codes,
//      weights, code range and zero point, one reduction group's products, group step,
//      accumulation and compensation are exact, under side conditions stated with a few numbers
//      per output channel. Proved by proveIntDotVariant(); listed for `python -m verifuse prove`
//      by intDotProofs() with their mutants.
//   2. Per instance, checkIntDotInstance() evaluates those numbers exactly (int64) in one pass over
//      the real weights and compares them with the bounds. No solver unless a side condition
//      fails, and then only to confirm the concrete counterexample.
//
// The bounds are pairing-independent: which products share a group depends on the kernel's weight
// layout, so the group bound of an output channel is the sum of the groupSize largest products any
// of its weights can make (never a bound on the weights in their stored order).
//
// Z3-free interface; the encoding is in verifier/src/int_dot.cpp (through prover.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "verifuse/kernels/int_arithmetic.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/catalog.h"
#include "verifuse/verify/obligation.h"
#include "verifuse/verify/prover.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

/// The codes an input tensor may hold (inclusive): 0..255 for u8, -128..127 for s8, or the
/// quantizer's [quant_min, quant_max] (0..127 for 7-bit activations).
struct CodeRange {
  int64_t lo = 0;
  int64_t hi = 0;
};

/// One int8 conv/linear instance, seen per output channel as a dot product of length
/// reductionLength (a convolution's C_in/groups * prod(kernel) patch; a linear's in_features).
/// Row o of \p weights (weights[o * reductionLength + k]) is output channel o's reduction, in any
/// order: the bounds do not depend on the order or on the kernel's layout.
struct IntDotInstance {
  std::span<const int8_t> weights;
  int64_t outputChannels = 0;
  int64_t reductionLength = 0;
  CodeRange src;          ///< the input's codes
  int64_t zeroPoint = 0;  ///< the input's zero point zx; must lie in src
};

/// The four lemmas of a variant, in the order of the computation.
enum class IntDotStep {
  kProducts,    ///< every product lies between the per-weight bounds the side conditions use
  kGroup,       ///< the group step equals the exact sum of its products
  kAccumulate,  ///< one step of the running sum: exact, and the invariant carries over
  kCompensate,  ///< subtracting the compensation leaves exactly sum (x - zx) w
};
const char* intDotStepName(IntDotStep step);  ///< "products", "group", "accumulate", "compensate"
inline constexpr IntDotStep kIntDotSteps[] = {IntDotStep::kProducts, IntDotStep::kGroup, IntDotStep::kAccumulate,
                                              IntDotStep::kCompensate};

/// Checks that a declaration is one the lemmas cover: a variant name, 1 <= groupSize <= 64,
/// 8 <= groupBits <= 64, 8 <= accumulatorBits <= 64, a known Source. kUnsupported otherwise.
Status checkIntDotArithmetic(const kernels::IntDotArithmetic& a);

/// True when the variant's group lemma carries the per-channel side condition: the group step can
/// leave groupBits on the source's full code range (groupSize * max|product| > 2^(groupBits-1) - 1),
/// as vpmaddubsw's s16 can; vpmaddwd on x - zx and vpdpbusd cannot and are proved without one.
/// The choice is arithmetic on the declaration only; the proof decides (a wrong choice either adds
/// a condition that always holds or leaves a lemma that Z3 refutes).
bool intDotGroupHasSideCondition(const kernels::IntDotArithmetic& a);

/// The obligation of one lemma of \p a (declaration checked first: an invalid one gives an
/// obligation without goals, which proves Unsupported). The statements:
///
/// Notation: codes x in [lo, hi] with lo <= zx <= hi (lo >= -128, hi <= 255; hi <= 127 for
/// kCodesPlus128), weights w in [-128, 127], e(x) the encoded source (x, x + 128 or x - zx),
/// c the compensation constant (zx, zx + 128 or 0), n = groupSize, B = groupBits,
/// A = accumulatorBits, f(w) = max(e(hi) w, e(lo) w), g(w) = min(e(hi) w, e(lo) w),
/// fr(w) = max((hi - zx) w, (lo - zx) w), gr(w) = min(...), s_B = [-2^(B-1), 2^(B-1) - 1].
///   products:   g(w) <= e(x) w <= f(w)  and  gr(w) <= (x - zx) w <= fr(w).
///   group:      step_B(sum_{i<n} e(x_i) w_i) = sum_{i<n} e(x_i) w_i, where step_B clamps to s_B
///               (groupSaturates) or is unspecified outside s_B; with the side condition (see
///               intDotGroupHasSideCondition) tau >= 0, sum_i max(f(w_i) - tau, 0) <= E,
///               n tau + E <= 2^(B-1) - 1, and sigma <= 0, sum_i min(g(w_i) - sigma, 0) >= D,
///               n sigma + D >= -2^(B-1).
///   accumulate: given the products facts, the group result r = sum_i e(x_i) w_i and the invariant
///               acc = T + c W, L <= acc <= U, TL <= T <= TU, acc in s_A; with
///               U' = U + sum_i max(f(w_i), 0) <= 2^(A-1) - 1 and L' = L + sum_i min(g(w_i), 0)
///               >= -2^(A-1): acc' = acc + r (acc' is unspecified when acc + r leaves s_A) and the
///               invariant holds for acc', T' = T + sum_i (x_i - zx) w_i, W' = W + sum_i w_i,
///               U', L', TU' = TU + sum_i fr(w_i), TL' = TL + sum_i gr(w_i).
///   compensate: acc = T + c W, TL <= T <= TU within s_A, c W within s_A, acc in s_A:
///               sub_A(acc, c W) = T (unspecified outside s_A).
/// By induction over the groups (base: everything 0), the output is sum_k (x_k - zx) w_k.
Obligation intDotLemma(const kernels::IntDotArithmetic& a, IntDotStep step);

/// The lemmas' verdicts for one declaration; checkIntDotInstance() needs it Proved.
struct IntDotVariantProof {
  kernels::IntDotArithmetic arithmetic;  ///< the declaration the lemmas were built from (a copy)
  bool groupSideCondition = false;       ///< intDotGroupHasSideCondition(arithmetic)
  struct Lemma {
    IntDotStep step;
    Verdict verdict;
  };
  std::vector<Lemma> lemmas;             ///< in kIntDotSteps order (empty if the declaration is invalid)
  /// Proved iff every lemma is Proved; otherwise the first lemma's verdict that is not, with the
  /// lemma named in its detail (Unsupported for an invalid declaration).
  Verdict verdict;
  unsigned timeoutMs = 5000;             ///< for the ground query that confirms a counterexample
  bool proved() const { return verdict.proved(); }
};

/// Proves the four lemmas of \p a through prove() (opts.cache makes it once per machine). Keep the
/// result per process and call checkIntDotInstance() per layer: the lemmas do not depend on it.
IntDotVariantProof proveIntDotVariant(const kernels::IntDotArithmetic& a, const ProveOptions& opts = {});

/// Checks one instance against a proved variant. Never throws. Verdicts:
///   Proved       the variant is Proved and, for every output channel, the exact int64 values
///                (one pass over the weights) satisfy the lemmas' side conditions: group (if the
///                variant has it) with tau = max(n-th largest f, 0), E = sum_k max(f(w_k) - tau, 0)
///                (n tau + E is the sum of the n largest f: the pairing-independent group maximum;
///                likewise from below), U = sum_k max(f(w_k), 0) and L = sum_k min(g(w_k), 0) in
///                s_A, sum_k fr(w_k) and sum_k gr(w_k) in s_A, c * sum_k w_k in s_A.
///   Refuted      the first output channel and step that fail, with a Counterexample: the channel,
///                the group's weights "w[o,k]" and codes "x[k]" (stored codes), the zero point, and
///                for the failing goal ("group (s16, saturating)", "accumulator (s32)", "result
///                (s32)", "compensation (s32)") the exact value (source) and the computed one
///                (target: clamped, or wrapped where the declaration leaves overflow unspecified).
///                A group counterexample is re-evaluated with evaluateIntDotGroup() and confirmed
///                by a ground Z3 query of the group lemma without its side condition.
///   Unsupported  invalid declaration or instance: zero point outside src, a range that is not an
///                8-bit code range (within 0..255 or within -128..127; -128..127 for
///                kCodesPlus128), weights.size() != outputChannels * reductionLength, ...
///   otherwise    the variant's verdict (a lemma not Proved: Timeout, Unknown, ...).
/// Verdict::seconds is the time of the check (the weight pass), not of the lemmas.
Verdict checkIntDotInstance(const IntDotVariantProof& variant, const IntDotInstance& instance);

/// proveIntDotVariant() then checkIntDotInstance(): the one-call form.
Verdict proveIntDotInstance(const kernels::IntDotArithmetic& a, std::span<const int8_t> weights,
                            int64_t outputChannels, int64_t reductionLength, CodeRange src, int64_t zeroPoint,
                            const ProveOptions& opts = {});

/// One group evaluated as the declaration says, on concrete stored codes and weights (equal
/// lengths, at most groupSize): exact = sum_i e(x_i) w_i in int64, computed = the group step's
/// result (clamped when groupSaturates, else wrapped to groupBits), overflowed = computed != exact.
struct IntDotGroupValue {
  int64_t exact = 0;
  int64_t computed = 0;
  bool overflowed = false;
};
IntDotGroupValue evaluateIntDotGroup(const kernels::IntDotArithmetic& a, std::span<const int64_t> codes,
                                     std::span<const int8_t> weights, int64_t zeroPoint);

/// The lemmas of every declaration in \p variants as RuleProofs for proveAll (`python -m verifuse
/// prove`), four per declaration: "int-dot-<variant>-<step>", <variant> the kebab-case variant name
/// ("onednn:vpmaddubsw" -> "onednn-vpmaddubsw"), with "-codes", "-codes-plus-128" or
/// "-codes-minus-zero-point" appended when one variant name is declared with several sources.
/// Identical declarations are listed once. Every lemma has mutants that must be Refuted with a
/// counterexample (README "Kernel arithmetic"). kUnsupported for an invalid declaration,
/// kInvalidArgument for one variant name declared twice with different arithmetic. Wiring (the
/// list of variants belongs to kernels/):
///
///   // passes::pipelineRuleProofs(), after the rules' own proofs:
///   std::vector<verify::RuleProof> proofs = rules::proofsOf(rules);
///   VF_ASSIGN_OR_RETURN(std::vector<verify::RuleProof> intDot, verify::intDotProofs(variants));
///   proofs.insert(proofs.end(), intDot.begin(), intDot.end());
StatusOr<std::vector<RuleProof>> intDotProofs(std::span<const kernels::IntDotArithmetic> variants);

}  // namespace verifuse::verify
