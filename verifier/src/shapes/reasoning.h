// verifuse's own reasoning over shape programs: polynomial normal forms, substitution (equality
// propagation), interval bounds, and exact evaluation. No Z3 here.
#pragma once

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "terms.h"

namespace verifuse::shapes {

using Mono = std::vector<TermId>;  // sorted multiset of atom terms; empty = constant
struct Poly {
  std::vector<std::pair<Mono, Rat>> terms;  // sorted by Mono, no zero coefficients
  bool isConst() const { return terms.empty() || (terms.size() == 1 && terms[0].first.empty()); }
  Rat constant() const { return (!terms.empty() && terms[0].first.empty()) ? terms[0].second : Rat(0); }
};

struct Interval {
  std::optional<Rat> lo, hi;
  bool contains(const Rat& v) const { return (!lo || *lo <= v) && (!hi || v <= *hi); }
};

/// Canonicalizes terms under a knowledge base (substitutions x := e, bounds on atoms, excluded
/// values, and asserted facts) that it learns from asserts. Every KB entry is implied by the asserts
/// it was learned from, so norm(a) is equivalent to a under those asserts.
class Reasoner {
 public:
  explicit Reasoner(TermTable& terms) : T_(terms) {}

  /// The canonical form of \p t under the current knowledge: true/false when decided.
  TermId norm(TermId t);
  /// Adds canonical \p fact (an assert's norm) to the knowledge. \returns false on a conflict.
  bool learn(TermId fact);
  bool conflict() const { return conflict_; }
  /// Facts (whole asserted atoms) decide later duplicates; off for the fixpoint passes, where an
  /// assert would otherwise be decided by itself.
  void setFactsEnabled(bool on) {
    facts_enabled_ = on;
    memo_.clear();
  }
  uint64_t generation() const { return generation_; }

  const std::unordered_map<uint32_t, TermId>& substitutions() const { return subst_; }
  /// Bounds and excluded values as plain constraint terms (not simplified by the bounds).
  std::vector<TermId> boundConstraints();
  Interval intervalOf(TermId canon_arith);
  Interval boundsOf(TermId atom) const {
    auto it = bounds_.find(atom);
    return it == bounds_.end() ? Interval{} : it->second;
  }
  bool isExcluded(TermId atom, const Rat& v) const;
  const Poly& polyOf(TermId canon);
  TermId fromPoly(const Poly& p, Sort sort);

 private:
  TermId normRec(TermId t);
  TermId normArith(TermId t);
  TermId cmp(Op op, Poly p);
  TermId decideAtom(TermId atom);
  TermId negate(TermId n);
  Interval atomInterval(TermId a);
  bool knownNonzero(const Poly& p);
  bool allInt(const Poly& p) const;
  void addSubst(uint32_t var, TermId e);
  bool tighten(TermId atom, std::optional<Rat> lo, std::optional<Rat> hi);
  bool containsVar(TermId t, TermId var);
  void bump() {
    ++generation_;
    memo_.clear();
    ival_memo_.clear();
  }

  TermTable& T_;
  std::unordered_map<TermId, TermId> memo_;
  std::unordered_map<TermId, Poly> poly_memo_;
  std::unordered_map<TermId, Interval> ival_memo_;
  std::unordered_map<uint32_t, TermId> subst_;
  std::unordered_map<TermId, Interval> bounds_;
  std::vector<TermId> bound_order_;  // deterministic iteration over bounds_
  std::unordered_map<TermId, std::vector<Rat>> excluded_;
  std::unordered_map<TermId, bool> facts_;
  bool facts_enabled_ = true;
  bool conflict_ = false;
  uint64_t generation_ = 0;
  std::vector<TermId> pending_;
};

/// Exact evaluation of terms under an assignment of the variables. nullopt when the value is not
/// determined (division by zero, irrational power, overflow, unassigned variable).
class Evaluator {
 public:
  Evaluator(const TermTable& terms, const std::vector<std::optional<Rat>>& values)
      : T_(terms), values_(values) {}
  std::optional<Rat> eval(TermId t);

 private:
  std::optional<Rat> evalRec(TermId t);
  const TermTable& T_;
  const std::vector<std::optional<Rat>>& values_;
  std::unordered_map<TermId, std::optional<Rat>> memo_;
};

/// SMT-LIB euclidean division and modulus (b != 0).
i128 smtDiv(i128 a, i128 b);
i128 smtMod(i128 a, i128 b);

}  // namespace verifuse::shapes
