// RecordStore: verifuse's one on-disk record format (tuning decisions, proof verdicts, saved
// plans): a persistent map from a string key to a string payload, durable and safe to share
// between threads and processes. Format and guarantees: support/README.md.
//
// NOTE: invariants of a store <dir>/<name>.vfstore
//  - the file is only ever replaced whole: temp file in the same directory, fsync, rename, fsync of
//    the directory. A reader sees an old or a new file, never a half-written one;
//  - writers merge under an exclusive flock on <dir>/<name>.vfstore.lock (read the file, add
//    ours, write), so no writer's records are lost; the newer `created` wins a key both wrote;
//  - every record is length-framed and checksummed (FNV-1a 64 over its header, key and payload):
//    any bytes survive, and damage (bit rot, truncation, another version, a foreign file) is
//    detected at load, the valid records kept and the file rewritten;
//  - a payload above RecordStoreOptions::inlineLimit lives in its own checksummed file under
//    <dir>/<name>.blobs/, written (and synced) under the lock before the index that names it, and
//    read only when asked for. Blob files no record names are deleted under the lock, once
//    older than RecordStoreOptions::blobGraceSeconds; a reader whose blob has gone re-reads the
//    index and retries with the blob it names now, for as long as the index keeps changing;
//  - nothing but a flush under the lock removes a record, and only a record whose blob is gone
//    there: a failed blob read is a miss, never a deletion (which the next flush would write);
//  - a process killed at any point (SIGKILL inside flush included) leaves the last committed
//    index, its blobs, and at most temp files and unnamed blobs that later flushes delete; the
//    flock dies with the process. tests/cpp/support/record_store_crash.cpp checks this.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::support {

struct RecordStoreOptions {
  /// Payloads longer than this many bytes are kept in a file of their own (a "blob") and read on
  /// demand, so opening and flushing the store costs the same however big the payloads are.
  size_t inlineLimit = 64 * 1024;
  /// A blob file no record names any more is deleted by a flush only once it is this many
  /// seconds old. Readers read blobs without the lock, from the index as they last read it: the
  /// grace period lets a reader that is a few replacements behind still read the old blob (get()
  /// also re-reads the index and retries when a blob has gone). 0: delete at once.
  int64_t blobGraceSeconds = 60;
};

/// One value of the map.
struct Record {
  std::string payload;
  /// When it was made, seconds since the Unix epoch by convention (callers may pass their own
  /// clock); the newer record wins when two writers stored the same key, a tie keeps the one of
  /// the writer that is flushing.
  int64_t created = 0;
};

/// Counters of one open store (a snapshot). "Dropped" records were on disk but not usable.
struct RecordStoreStats {
  int64_t loaded = 0;          ///< valid records read at open()
  int64_t hits = 0;            ///< get() found the key
  int64_t misses = 0;          ///< get() did not (including an unreadable blob)
  int64_t puts = 0;            ///< put() calls
  int64_t flushes = 0;         ///< files written (open()'s repair included)
  int64_t reloads = 0;         ///< re-reads of the file after another writer changed it
  int64_t droppedRecords = 0;  ///< damaged records of a file read (checksum, framing, syntax)
  /// Blob payloads missing or failing their checksum: at get() (a miss; the record stays, and a
  /// later get() or another process may read it) or at flush() (a record whose blob file is gone
  /// or of the wrong size under the lock, which is dropped from the index).
  int64_t droppedBlobs = 0;
  /// A file read was damaged or of another format/store, and is (or at the next flush() will be)
  /// rewritten from its valid records. Missing file: not damage.
  bool rebuilt = false;
  /// The first damage seen: "bad checksum in record 3 at byte 812", "truncated (no trailer)",
  /// "format version 2, expected 1", "store 'plans-v1', expected 'tuning-v2'", ...
  std::string rebuildReason;
  /// Every damage seen, in order (at most 16 entries).
  std::vector<std::string> damage;
};

/// A persistent string -> (payload, created) map in one file per store. Thread-safe; several
/// objects (in one or several processes) on one store are safe too. Nothing is written before
/// flush(), except open()'s repair of a damaged file.
class RecordStore {
 public:
  /// Version of the file layout below the store's own name (which callers version themselves,
  /// e.g. "tuning-v2"): a file of another layout version is ignored and replaced.
  static constexpr int kFormatVersion = 1;

  /// Opens (creating \p dir if missing) the store \p name: file <dir>/<name>.vfstore. \p name is
  /// [A-Za-z0-9._-]+ and does not start with '.'. A damaged file is not an error: it is rebuilt
  /// from its valid records and stats() says what was dropped and why. Errors (callers then run
  /// without persistence): empty or bad name, \p dir cannot be created or is not a writable
  /// directory, the file cannot be read or rewritten.
  static StatusOr<std::unique_ptr<RecordStore>> open(const std::string& dir, const std::string& name,
                                                     RecordStoreOptions options = {});

  RecordStore(const RecordStore&) = delete;
  RecordStore& operator=(const RecordStore&) = delete;
  ~RecordStore();

  /// The record of \p key, or nullopt. On a miss, re-reads the file first if another writer
  /// replaced it since this object last read or wrote it (one stat() call when it did not).
  std::optional<Record> get(const std::string& key);
  /// Whether \p key is present, without reading a blob (no reload, no hit/miss counted).
  bool contains(const std::string& key) const;
  /// Sets \p key in memory (flush() makes it durable). \p created defaults to now.
  void put(const std::string& key, std::string payload, int64_t created);
  void put(const std::string& key, std::string payload);

  /// Merges with the file under the lock (records another writer flushed since are kept, the
  /// newer per key wins), writes pending blobs and the file atomically and durably, deletes blobs
  /// no record names. No-op when nothing changed since the last flush. Afterwards this object
  /// also sees the other writers' records.
  Status flush();
  /// Re-reads the file if another writer replaced it (merging: unflushed puts stay).
  Status reload();

  size_t size() const;
  /// All keys, sorted.
  std::vector<std::string> keys() const;
  RecordStoreStats stats() const;
  /// <dir>/<name>.vfstore
  const std::string& path() const;
  const std::string& dir() const;
  const std::string& name() const;

  /// Seconds since the Unix epoch: the default `created`.
  static int64_t nowSeconds();

 private:
  struct Impl;
  explicit RecordStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace verifuse::support
