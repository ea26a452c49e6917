// The only part of shapes/ that talks to Z3 (the types stay in z3_bridge.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "terms.h"

namespace verifuse::shapes {

enum class SolveResult { kSat, kUnsat, kUnknown };

class Z3Session {
 public:
  explicit Z3Session(const TermTable& terms);
  ~Z3Session();
  Z3Session(const Z3Session&) = delete;
  Z3Session& operator=(const Z3Session&) = delete;

  /// Satisfiability of the conjunction of \p constraints. On sat, fills (*model)[var] for every
  /// variable Z3 assigns a rational value.
  SolveResult check(const std::vector<TermId>& constraints, int timeout_ms,
                    std::vector<std::optional<Rat>>* model, std::string* why);

  /// Incremental prefix queries: implied(t) asks whether the asserts added so far entail t
  /// (kUnsat = implied, i.e. prefix and not t is unsat).
  void add(TermId t);
  SolveResult implied(TermId t, int timeout_ms);

  /// Leave-one-out queries over \p asserts: does the conjunction of all others entail asserts[i]?
  void track(const std::vector<TermId>& asserts);
  SolveResult impliedByOthers(size_t i, int timeout_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string z3VersionString();

}  // namespace verifuse::shapes
