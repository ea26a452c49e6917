// Verdicts of the prover. Never a bool: only VerdictKind::Proved lets a rewrite apply.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace verifuse::verify {

enum class VerdictKind { Proved, Refuted, Unknown, Timeout, Unsupported };

/// What the verdict is about (Alive2-style message classes).
enum class MessageClass {
  None,                     ///< Proved
  ValueMismatch,            ///< Refuted: source and target values differ (counterexample)
  TargetLessDefined,        ///< Refuted: target divides by zero where the source is defined
  PreconditionAlwaysFalse,  ///< vacuity error: assumptions (+ fresh constraints, axioms) unsatisfiable
  SolverTimeout,            ///< Timeout
  SolverUnknown,            ///< Unknown (incomplete theory, resource limit, ...)
  NotEncodable,             ///< Unsupported: the encoder cannot express the obligation
};

const char* verdictKindName(VerdictKind kind);
/// "Value mismatch", "Precondition is always false", ...
const char* messageClassText(MessageClass cls);

/// Concrete witness of a Refuted verdict: values of every named variable (IR-style names, exact
/// rationals such as "-1/2" or decimals for algebraic numbers), values of uninterpreted-function
/// applications in the goal, and the source and target values of the first goal that differs.
struct Counterexample {
  std::vector<std::pair<std::string, std::string>> values;  ///< sorted by name
  std::string goal;         ///< label of the failing goal
  std::string sourceValue;
  std::string targetValue;

  bool empty() const { return values.empty() && goal.empty(); }
  std::string toString() const;
};

struct Verdict {
  VerdictKind kind = VerdictKind::Unknown;
  MessageClass messageClass = MessageClass::None;
  std::string detail;        ///< free text (Z3's reason_unknown, the unsupported construct, ...)
  Counterexample counterexample;
  double seconds = 0;        ///< wall time of the proof when it was solved (kept on cache hits)
  bool fromCache = false;

  /// The only way to ask "may this rewrite apply?".
  bool proved() const { return kind == VerdictKind::Proved; }
  /// Refuted with a real counterexample (a killed mutant). A vacuity error is not a refutation.
  bool refutedWithCounterexample() const {
    return kind == VerdictKind::Refuted && messageClass != MessageClass::PreconditionAlwaysFalse &&
           !counterexample.empty();
  }
  bool isVacuous() const { return messageClass == MessageClass::PreconditionAlwaysFalse; }
  /// "Refuted (Value mismatch): ..." one line.
  std::string summary() const;
};

}  // namespace verifuse::verify
