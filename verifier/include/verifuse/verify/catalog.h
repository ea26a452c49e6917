// Rule proofs (an obligation factory with its mutants) and proving a list of them
// (`python -m verifuse prove`). The verifier owns no rule: every RuleProof is declared by its rule,
// next to the pattern and the rewrite it justifies (backend/src/rules/, one file per family), and
// the backend hands the pipeline's list to proveAll().
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "verifuse/support/status.h"
#include "verifuse/verify/obligation.h"
#include "verifuse/verify/prover.h"
#include "verifuse/verify/semantics.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

/// Builds an obligation for a given model of conv/linear (rules without a dot ignore it).
using ObligationFactory = std::function<Obligation(const sem::DotModel&)>;

/// A deliberately wrong variant of a rule; it must come out Refuted with a counterexample,
/// which shows that the rule's proof is not vacuous and that the encoding can see the bug.
struct Mutant {
  std::string name;         ///< kebab-case, e.g. "eps-dropped"
  std::string description;  ///< what the bug is
  ObligationFactory build;
};

/// A rule's proof: its id (the rule's kebab-case id), the math as a human proof sketch, the
/// obligation factory, and its mutants. Built by rules::Rule from the rule's declaration.
struct RuleProof {
  std::string ruleId;
  std::string math;
  ObligationFactory build;
  /// True when the obligation uses sem::DotModel: it is then proved with the symbolic model (UF
  /// `dot` + axioms) and by bounded instantiation with explicit sums for K = 1..maxK.
  bool usesDot = false;
  std::vector<Mutant> mutants;
};

/// Checks a list of rule proofs without proving anything: every id unique and kebab-case, math
/// written, an obligation factory, and at least one mutant (kebab-case name unique within the
/// rule, a description, a factory). kInvalidArgument naming the first offender otherwise.
Status checkRuleProofs(const std::vector<RuleProof>& proofs);
bool isKebabCase(const std::string& name);

struct ProveAllOptions {
  ProveOptions prove;
  int maxK = 4;             ///< bounded instantiation K = 1..maxK (0: none)
  bool checkAxioms = true;  ///< also prove each dot axiom on K = 1..maxK
  /// Mutants of usesDot rules are refuted on this concrete shape (explicit sums, quantifier-free):
  /// a counterexample at K=2 is a real witness, while refuting against the quantified axioms needs
  /// model-based quantifier instantiation over nonlinear reals, which Z3 does not finish quickly.
  int mutantK = 2;
};

struct MutantResult {
  std::string name;
  std::string description;
  Verdict verdict;
  /// Refuted with a counterexample (a vacuity error does not count).
  bool killed() const { return verdict.refutedWithCounterexample(); }
};

struct InstanceResult {
  std::string model;  ///< "K=1", ...
  Verdict verdict;
};

struct RuleResult {
  std::string ruleId;
  Verdict verdict;                       ///< the general (symbolic) proof
  std::vector<InstanceResult> bounded;   ///< bounded instantiations (usesDot rules)
  std::vector<MutantResult> mutants;
  double seconds = 0;                    ///< wall time for the rule, its instances and mutants
  /// Proved, every bounded instance Proved, every mutant killed.
  bool ok() const;
};

struct AxiomResult {
  std::string axiom;  ///< "dot-scale-linear"
  std::string model;  ///< "K=2"
  Verdict verdict;
};

struct ProveReport {
  std::vector<AxiomResult> axioms;
  std::vector<RuleResult> rules;
  double seconds = 0;
  std::string solverVersion;
  bool ok() const;
  /// {"ok":..., "solver":..., "seconds":..., "axioms":[...], "rules":[{"rule":..., "verdict":...,
  ///  "message":..., "seconds":..., "bounded":[...], "mutants":[{"name":..., "verdict":...,
  ///  "killed":..., "counterexample":{"values":{...}, "goal":..., "source":..., "target":...}}]}]}
  std::string toJson() const;
  /// A readable table.
  std::string toText() const;
};

/// Proves one rule: bounded instances first (a wrong rule is refuted there with a concrete
/// witness), then the symbolic proof, then its mutants. ok() is the gate for applying the rule.
RuleResult proveRule(const RuleProof& rule, const ProveAllOptions& options = {});

/// Proves every rule and refutes every mutant of \p catalogue.
ProveReport proveAll(const std::vector<RuleProof>& catalogue, const ProveAllOptions& options = {});

/// JSON helpers (hand-written): a Verdict as a JSON object, and string escaping.
std::string verdictToJson(const Verdict& v);
std::string jsonEscape(const std::string& s);

}  // namespace verifuse::verify
