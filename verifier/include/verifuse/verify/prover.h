// Discharging obligations with Z3 (behind this Z3-free interface).
#pragma once

#include <cstdint>
#include <string>

#include "verifuse/verify/obligation.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

class ProofCache;

struct ProveOptions {
  /// Per-query timeout (each Z3 check), milliseconds.
  unsigned timeoutMs = 5000;
  /// Deterministic Z3 resource limit per query (rlimit); 0 = none. Exhausting it gives Unknown.
  unsigned resourceLimit = 0;
  /// Optional persistent cache of definitive verdicts (Proved/Refuted). Not owned.
  ProofCache* cache = nullptr;
};

/// Proves \p ob. One fresh Z3 context per call (thread-safe: calls may run concurrently).
/// Steps: encode (Unsupported on failure) → vacuity check of assumptions ∧ fresh constraints ∧
/// axioms ∧ source definedness (PreconditionAlwaysFalse if unsat) → target definedness
/// (TargetLessDefined) → value equality of every goal (ValueMismatch with counterexample).
/// Never throws.
Verdict prove(const Obligation& ob, const ProveOptions& options = {});

/// Number of Z3 check() calls made by this process so far (tests use it to show that a cached
/// run did no solving).
uint64_t solverQueryCount();

/// Version of the linked Z3 ("5.4.0"); part of the cache key.
std::string solverVersion();

}  // namespace verifuse::verify
