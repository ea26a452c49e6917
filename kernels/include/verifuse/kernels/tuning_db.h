// The tuning database: per partition and shape, which candidate engine ("onednn", "aten", "gemm",
// "rowwise", "attention", ...) ran fastest on this machine, persisted under the user's cache_dir so
// a second compile times nothing.
//
// NOTE: the file is the support::RecordStore "tuning-v2" (cache_dir/tuning-v2.vfstore; format and
// durability in support/README.md): replaced whole and atomically (temp file, fsync, rename, fsync
// of the directory), merged under an flock when several threads or processes write, every record
// checksummed, a damaged file rebuilt from its valid records. A broken database costs re-timing,
// never a failed compile. The previous file (tuning-v1.db, another key and record format) is
// ignored, not read or deleted: an older verifuse sharing the cache_dir keeps working.
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

namespace verifuse::support {
class RecordStore;
}

namespace verifuse::kernels {

/// What a decision depends on. Everything that can change which engine is faster is in here.
struct TuningKey {
  /// Partition structure (verifuse::partition::partitionSignature): ops, attributes, weight shapes.
  std::string signature;
  /// Shapes of the partition's tensor inputs, in the partition's input order.
  std::vector<std::vector<int64_t>> inputShapes;
  /// Compute dtype, "f32" or "bf16".
  std::string dtype = "f32";
  /// capabilities().onednnIsa of the machine that timed it (oneDNN's view of the CPU).
  std::string isa;
  /// Intra-op threads the timing ran with (torch.get_num_threads()).
  int threads = 1;
  /// onednnVersion(): a new oneDNN may pick other kernels.
  std::string onednnVersion;
  /// cpu::isaName() (kernels/cpu_features.h): which ISA path of verifuse's own kernels (gemm, row
  /// engine) ran, e.g. "avx2" or "baseline".
  std::string cpuKernelsIsa;

  /// A key with \p isa, \p onednnVersion and \p cpuKernelsIsa of this process filled in.
  static TuningKey forThisMachine(std::string signature, std::vector<std::vector<int64_t>> inputShapes,
                                  std::string dtype, int threads);
  /// Canonical, unambiguous text (length-prefixed fields); equal keys <=> equal strings, and the
  /// string is the same on every run and platform. This is the record's key in the store.
  std::string canonical() const;
  /// 16 hex digits of FNV-1a 64 over canonical(): a short stable id for logs and reports.
  std::string shortHash() const;
};

/// The two engines of the first tuner. Deprecated: engines are named by strings now (a
/// TuningDecision's `chosen`); kept while the runtime moves to the N-candidate API.
enum class Engine : uint8_t { kOneDnn, kAten };
/// "onednn" or "aten".
const char* engineName(Engine e);
StatusOr<Engine> parseEngine(const std::string& name);

/// The outcome of timing one partition's candidate engines.
struct TuningDecision {
  /// The fastest engine that could run the partition ("onednn", "aten", "gemm", ...).
  std::string chosen;
  /// Median ms per run of every candidate that was timed; negative: it could not run.
  std::map<std::string, double> medianMs;
  /// Why a candidate could not run (its first error, Status::toString()).
  std::map<std::string, std::string> failures;
  /// Seconds since the Unix epoch when it was timed (the newer one wins when two writers merge).
  int64_t created = 0;

  /// Median ms of \p engine, or -1 when it was not a candidate or could not run.
  double msOf(const std::string& engine) const;

  // Two-engine view (deprecated), filled on every decision the database or tuner returns:
  // engine = kOneDnn iff chosen == "onednn". record() reads these only when `chosen` is empty.
  Engine engine = Engine::kAten;
  double onednnMs = -1.0;
  double atenMs = -1.0;
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
  std::string rebuildReason;   // why ("bad checksum or framing in record 3 at byte 812", ...)
};

/// A persistent map TuningKey -> TuningDecision. Thread-safe; one object per cache_dir is enough
/// per process, but several (or several processes) on one directory are also safe.
class TuningDb {
 public:
  /// The record store's name: bump it when the key or the decision's encoding changes meaning.
  static constexpr const char* kStoreName = "tuning-v2";

  /// Opens \p cacheDir (created if missing) and loads its database. A damaged file is not an
  /// error: it is rewritten from its valid records and stats().rebuilt says so. Errors: the
  /// directory cannot be created or is not writable (callers then tune without persisting).
  static StatusOr<std::unique_ptr<TuningDb>> open(const std::string& cacheDir);
  ~TuningDb();

  /// The decision recorded for \p key (by this process or, once flushed, any other).
  std::optional<TuningDecision> lookup(const TuningKey& key);
  /// Remembers \p decision in memory; flush() makes it durable. Its `created` decides which of
  /// two writers' decisions for one key survives (0: now).
  void record(const TuningKey& key, const TuningDecision& decision);
  /// Merges with the file on disk under the lock and writes it atomically. No-op when nothing
  /// changed since the last flush. Afterwards this object also sees other writers' records.
  Status flush();

  size_t size() const;
  TuningDbStats stats() const;
  /// cacheDir/tuning-v2.vfstore
  const std::string& path() const;

 private:
  explicit TuningDb(std::unique_ptr<support::RecordStore> store);

  std::unique_ptr<support::RecordStore> store_;
  mutable std::mutex mu_;
  int64_t hits_ = 0, misses_ = 0, recorded_ = 0, undecodable_ = 0;
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

/// Process-wide number of timings run: one per timeCallable() call and one per candidate engine
/// timeCandidates() times. A warm database must leave it unchanged, which is how tests and
/// reports prove a second compile timed nothing.
int64_t timingCallCount();

/// One engine that can run a partition: \p name is [A-Za-z0-9_.-]+ ("onednn", "gemm", ...), \p run
/// runs the partition once on it (an error, e.g. kUnimplemented, means "cannot run it").
struct Candidate {
  std::string name;
  std::function<Status()> run;
};

/// Times every candidate with the real inputs, alternating between them (each round runs every
/// candidate once, starting one further each round, so drift of a noisy machine hits all alike):
/// \p warmup untimed rounds, then \p repeats timed rounds; median per candidate. A candidate that
/// fails (or throws) is dropped from further rounds and recorded as not runnable (medianMs < 0,
/// failures[name]). Picks the smallest median; a tie goes to the earlier candidate. Counts one
/// timingCallCount() per candidate. Errors: no candidate ran (the first failure's code, every
/// reason in the message); invalid arguments (no candidates, empty/duplicate/bad names, a null
/// callable, repeats < 1, warmup < 0).
StatusOr<TuningDecision> timeCandidates(const std::vector<Candidate>& candidates, int warmup, int repeats);

/// The autotuner step for one partition: the decision from \p db when it has one that measured
/// every one of \p candidates (times nothing), else timeCandidates(), record and return it. An
/// error only when no candidate runs (then nothing is recorded). Does not flush.
StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key, const std::vector<Candidate>& candidates,
                                      int warmup = 2, int repeats = 10);

/// The two-engine form (deprecated; a thin wrapper over the one above with candidates "aten" then
/// "onednn"). A failing oneDNN run is a decision for ATen with onednnMs < 0; a failing ATen run
/// is an error (ATen's), and nothing is recorded.
StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key,
                                      const std::function<Status()>& runOneDnn,
                                      const std::function<Status()>& runAten, int warmup = 2,
                                      int repeats = 10);

}  // namespace verifuse::kernels
