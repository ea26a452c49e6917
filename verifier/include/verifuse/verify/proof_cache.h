// Persistent cache of definitive verdicts (Proved / Refuted), in the record store "proofs-v2".
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "verifuse/support/record_store.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/obligation.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {

/// Key = FNV-1a-64 of (obligation's canonical form, Z3 version); the record also holds the
/// canonical form and the solver version themselves, compared on lookup, so a hash collision is
/// a miss, never a wrong verdict. The records live in one support::RecordStore file,
/// <dir>/proofs-v2.vfstore (support/README.md): a store() is flushed (merge under an flock, temp
/// file, fsync, rename, directory fsync) before it returns, or, while a Batch is open, when the
/// last Batch closes; every record is checksummed; a damaged file is rebuilt from its valid
/// records when opened. Timeout/Unknown/Unsupported verdicts are never cached. The previous
/// layout (one <key>.proof file per obligation) is ignored, not read or deleted.
class ProofCache {
 public:
  static constexpr const char* kStoreName = "proofs-v2";

  /// Opens (creating \p dir if missing) the store in \p dir. When that fails (unwritable
  /// directory, ...), the cache works without persistence: lookups miss and store() returns
  /// status(). Never throws.
  explicit ProofCache(std::string dir);
  ~ProofCache();
  ProofCache(const ProofCache&) = delete;
  ProofCache& operator=(const ProofCache&) = delete;

  /// 16 hex digits.
  static std::string keyFor(const Obligation& ob);
  const std::string& dir() const { return dir_; }
  /// <dir>/proofs-v2.vfstore
  std::string path() const;
  /// Ok, or why the cache has no file to read and write.
  const Status& status() const { return status_; }

  /// The cached verdict (fromCache = true), or nullopt on a miss or an unusable entry. A miss
  /// re-reads the file when another writer replaced it since.
  std::optional<Verdict> lookup(const Obligation& ob);
  /// Stores a Proved/Refuted verdict durably (see Batch); other kinds are ignored (ok).
  Status store(const Obligation& ob, const Verdict& verdict);

  /// Groups stores: while one is alive, store() keeps verdicts in memory (lookups see them) and
  /// the last Batch to close flushes them together: one durable write per rule instead of one per
  /// obligation (each costs two fsyncs, 2-12 ms here). Nestable and thread-safe; a store() from
  /// another thread meanwhile is flushed with the batch. proveRule()/proveAll() open one.
  class Batch {
   public:
    explicit Batch(ProofCache* cache);  ///< null: no-op
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

   private:
    ProofCache* cache_;
  };

  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t stores = 0;
    /// Unusable entries: records of the file that failed their checksum or framing, and records
    /// whose verdict does not parse or belongs to another obligation or solver (each such
    /// lookup also counts as a miss).
    uint64_t corrupt = 0;
    /// Flushes that failed (a store() returns its error; a Batch can only count it).
    uint64_t writeErrors = 0;
  };
  Stats stats() const;
  /// The store's own counters: records loaded, flushes, what was dropped and why.
  support::RecordStoreStats storeStats() const;

 private:
  std::string dir_;
  std::unique_ptr<support::RecordStore> store_;  // null when status_ is an error
  Status status_;
  mutable std::mutex mu_;
  Stats stats_;
  int batchDepth_ = 0;  // under mu_
};

}  // namespace verifuse::verify
