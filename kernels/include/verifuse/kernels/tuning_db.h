// The tuning database: per partition and shape, whether oneDNN or ATen ran faster on this
// machine, persisted under the user's cache_dir so a second compile times nothing.
//
// NOTE: invariants of the file (cache_dir/tuning-v1.db)
//  - written only as a whole, atomically (temp file in the same directory, fsync, rename, fsync of
//    the directory), so a reader sees an old or a new file, never a half-written one;
//  - writers from several threads or processes merge under an flock on cache_dir/tuning-v1.db.lock
//    (read what is on disk, add ours, write), so no writer's records are lost;
//  - every record carries its own checksum and the file ends with a trailer giving the record
//    count: bit rot, truncation, a foreign file or another format version are detected, the
//    valid records kept where the version matches, and the file rewritten ("rebuilt"). A broken
//    database costs re-timing, never a failed compile.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// What a decision depends on. Everything that can change which engine is faster is in here.
struct TuningKey {
  /// Partition structure (verifuse::partition::partitionSignature): ops, attributes, weight shapes.
  std::string signature;
  /// Shapes of the partition's tensor inputs, in the partition's input order.
  std::vector<std::vector<int64_t>> inputShapes;
  /// Compute dtype, "f32" or "bf16".
  std::string dtype = "f32";
  /// cpuIsaName() of the machine that timed it.
  std::string isa;
  /// Intra-op threads the timing ran with (torch.get_num_threads()).
  int threads = 1;
  /// onednnVersion(): a new oneDNN may pick other kernels.
  std::string onednnVersion;

  /// A key with \p isa and \p onednnVersion of this process filled in.
  static TuningKey forThisMachine(std::string signature, std::vector<std::vector<int64_t>> inputShapes,
                                  std::string dtype, int threads);
  /// Canonical, unambiguous text (length-prefixed fields); equal keys <=> equal strings, and the
  /// string is the same on every run and platform. This is what the file stores.
  std::string canonical() const;
  /// 16 hex digits of FNV-1a 64 over canonical(): a short stable id for logs and reports.
  std::string shortHash() const;
};

enum class Engine : uint8_t { kOneDnn, kAten };
/// "onednn" or "aten".
const char* engineName(Engine e);
StatusOr<Engine> parseEngine(const std::string& name);

struct TuningDecision {
  Engine engine = Engine::kAten;
  /// Median ms per run on each engine; negative when that engine could not run the partition.
  double onednnMs = -1.0;
  double atenMs = -1.0;
  /// Seconds since the Unix epoch when it was timed (the newer one wins when two writers merge).
  int64_t created = 0;
};

/// Counters of one open database (a snapshot).
struct TuningDbStats {
  int64_t loaded = 0;          // valid records read at open()
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t recorded = 0;        // record() calls
  int64_t flushes = 0;         // files written
  int64_t droppedRecords = 0;  // records of a damaged file that failed their checksum or parse
  bool rebuilt = false;        // the file at open() was damaged or of another version
  std::string rebuildReason;   // why ("bad checksum in record 3", "truncated", "version 2 ...")
};

/// A persistent map TuningKey -> TuningDecision. Thread-safe; one object per cache_dir is enough
/// per process, but several (or several processes) on one directory are also safe.
class TuningDb {
 public:
  static constexpr int kFormatVersion = 1;

  /// Opens \p cacheDir (created if missing) and loads its database. A damaged file is not an
  /// error: it is rewritten from its valid records and stats().rebuilt says so. Errors: the
  /// directory cannot be created or is not writable.
  static StatusOr<std::unique_ptr<TuningDb>> open(const std::string& cacheDir);

  std::optional<TuningDecision> lookup(const TuningKey& key);
  /// Remembers \p decision in memory; flush() makes it durable.
  void record(const TuningKey& key, const TuningDecision& decision);
  /// Merges with the file on disk under the lock and writes it atomically. No-op when nothing
  /// changed since the last flush. Afterwards this object also sees other writers' records.
  Status flush();

  size_t size() const;
  TuningDbStats stats() const;
  /// cacheDir/tuning-v1.db
  const std::string& path() const { return path_; }

 private:
  TuningDb(std::string dir, std::string path) : dir_(std::move(dir)), path_(std::move(path)) {}
  Status flushLocked();

  std::string dir_;
  std::string path_;
  mutable std::mutex mu_;
  std::map<std::string, TuningDecision> records_;  // by canonical key: sorted, so files are stable
  bool dirty_ = false;
  TuningDbStats stats_;
};

/// Result of timing a callable.
struct TimingResult {
  double medianMs = 0.0;
  double p90Ms = 0.0;  // nearest-rank 90th percentile
  double minMs = 0.0;
  int repeats = 0;
};

/// Runs \p fn \p warmup times untimed, then \p repeats times timed (steady clock). The first
/// error \p fn returns is returned. Errors: kInvalidArgument when repeats < 1 or warmup < 0.
StatusOr<TimingResult> timeCallable(const std::function<Status()>& fn, int warmup, int repeats);

/// Process-wide number of timeCallable() calls: a warm database must leave it unchanged, which
/// is how tests and reports prove a second compile timed nothing.
int64_t timingCallCount();

/// The autotuner step for one partition: the decision from \p db when it has one (times
/// nothing), else time both callables, keep the faster, record and return it. A failing oneDNN
/// run (e.g. kUnimplemented) is a decision for ATen with onednnMs < 0; a failing ATen run is an
/// error. Does not flush.
StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key,
                                      const std::function<Status()>& runOneDnn,
                                      const std::function<Status()>& runAten, int warmup = 2,
                                      int repeats = 10);

}  // namespace verifuse::kernels
