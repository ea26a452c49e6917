// Persistent cache of definitive verdicts (Proved / Refuted), one small file per obligation.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "verifuse/support/status.h"
#include "verifuse/verify/obligation.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

/// Key = FNV-1a-64 of (obligation's canonical form, Z3 version); the entry also stores the
/// canonical form itself, so a hash collision is a miss, not a wrong verdict. Entries are written
/// to a temp file and renamed (atomic on POSIX); each ends with a checksum line, and an entry that
/// fails to parse or check (truncated, corrupted, other format) is counted as corrupt, ignored and
/// overwritten by the next store. Timeout/Unknown/Unsupported verdicts are never cached.
class ProofCache {
 public:
  /// \p dir is created on first store if missing.
  explicit ProofCache(std::string dir);

  /// 16 hex digits.
  static std::string keyFor(const Obligation& ob);
  std::string pathFor(const Obligation& ob) const;
  const std::string& dir() const { return dir_; }

  /// The cached verdict (fromCache = true), or nullopt on a miss or a corrupt entry.
  std::optional<Verdict> lookup(const Obligation& ob);
  /// Stores a Proved/Refuted verdict; other kinds are ignored (ok).
  Status store(const Obligation& ob, const Verdict& verdict);

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t stores = 0;
    uint64_t corrupt = 0;  ///< entries found unreadable (each then counts as a miss too)
  };
  Stats stats() const;

 private:
  std::string dir_;
  mutable std::mutex mu_;
  Stats stats_;
};

}  // namespace verifuse::verify
