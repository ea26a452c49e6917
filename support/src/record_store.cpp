// RecordStore: one checksummed, length-framed, atomically replaced, flock-merged record file per
// store, big payloads in blob files beside it. The format is in support/README.md; in short:
//
//   vfstore 1 <name>\n
//   rec <created> <keyLen> <payloadLen> <fnv1a64, 16 hex>\n<key bytes><payload bytes>\n
//   blob <created> <keyLen> <refLen> <fnv1a64>\n<key bytes><blobFile> <payloadLen> <blobSum>\n
//   ...
//   end <number of records>\n
//
// The checksum of a record covers its header line (without the checksum), key and payload. Blob
// files (<name>.blobs/<file>) hold "vfblob 1 <keyLen> <payloadLen> <sum>\n<key><payload>" where
// sum covers the same things; the index names the file, its payload length and that sum.
#include "verifuse/support/record_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string_view>
#include <thread>

#include "verifuse/support/hash.h"

namespace verifuse::support {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "vfstore";
constexpr std::string_view kBlobMagic = "vfblob";
constexpr const char* kSuffix = ".vfstore";
constexpr size_t kMaxDamageNotes = 16;
constexpr size_t kMaxHeaderLine = 200;  // "blob -9223372036854775808 <20 digits> <20 digits> <16>"

std::atomic<uint64_t> gTempCounter{0};

std::string errnoText(std::string_view what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

/// What a file was when this object last read or wrote it. Every write is a rename of a new
/// file, so a changed inode (or size or times, should an inode number be reused) means "replaced".
struct FileId {
  bool exists = false;
  uint64_t dev = 0, ino = 0;
  int64_t size = 0, mtimeNs = 0, ctimeNs = 0;
  bool operator==(const FileId&) const = default;
};

FileId fileIdOf(const struct stat& st) {
  FileId id;
  id.exists = true;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.size = st.st_size;
  id.mtimeNs = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctimeNs = int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

FileId statFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return FileId{};
  return fileIdOf(st);
}

/// Reads all of \p path. A missing file is ok with exists = false.
Status readWhole(const std::string& path, std::string& out, FileId& id) {
  out.clear();
  id = FileId{};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::ok();
    return internalError(errnoText("cannot read", path));
  }
  struct stat st;
  bool statOk = ::fstat(fd, &st) == 0;
  if (!statOk || !S_ISREG(st.st_mode)) {
    if (statOk) errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    Status s = internalError(errnoText("cannot read", path));
    ::close(fd);
    return s;
  }
  id = fileIdOf(st);
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (true) {
    if (done == out.size()) out.resize(out.size() + 4096);  // grew since fstat: read to EOF
    ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = internalError(errnoText("cannot read", path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  ::close(fd);
  return Status::ok();
}

Status writeAll(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return internalError(errnoText("cannot write", path));
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

void syncDir(const std::string& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

/// Writes \p pieces to \p tmp, fsyncs it and renames it onto \p path. The caller syncs the
/// directory. On error nothing is left behind.
Status writeFileDurably(const std::string& tmp, const std::string& path,
                        std::initializer_list<std::string_view> pieces) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return internalError(errnoText("cannot create", tmp));
  Status s;
  for (std::string_view p : pieces) {
    s = writeAll(fd, p, tmp);
    if (!s.isOk()) break;
  }
  if (s.isOk() && ::fsync(fd) != 0) s = internalError(errnoText("cannot sync", tmp));
  if (::close(fd) != 0 && s.isOk()) s = internalError(errnoText("cannot close", tmp));
  if (s.isOk() && ::rename(tmp.c_str(), path.c_str()) != 0) s = internalError(errnoText("cannot rename onto", path));
  if (!s.isOk()) ::unlink(tmp.c_str());
  return s;
}

/// Test hook for killing a process inside a flush (tests/serve: a Ray Serve replica killed while it
/// writes the shared cache). VERIFUSE_TEST_PAUSE_IN_FLUSH=<store name>:<marker dir>:<seconds>: a
/// flush of that store, holding the lock with its blobs written and its index not yet committed,
/// creates <marker dir>/<pid> and sleeps that long before going on.
void pauseInFlushForTests(const std::string& storeName) {
  const char* hook = std::getenv("VERIFUSE_TEST_PAUSE_IN_FLUSH");
  if (!hook) return;
  const std::string spec(hook);
  const size_t a = spec.find(':');
  const size_t b = a == std::string::npos ? a : spec.find(':', a + 1);
  if (b == std::string::npos || spec.substr(0, a) != storeName) return;
  const std::string marker = spec.substr(a + 1, b - a - 1) + "/" + std::to_string(::getpid());
  int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(spec.c_str() + b + 1)));
}

std::string tempSuffix() {
  return std::to_string(::getpid()) + "." + std::to_string(gTempCounter.fetch_add(1));
}

/// Exclusive flock on a side file for as long as it lives. flock locks belong to the open file
/// description, so two stores on one file in one process exclude each other too.
class FileLock {
 public:
  static StatusOr<std::unique_ptr<FileLock>> acquire(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return internalError(errnoText("cannot open lock file", path));
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      Status s = internalError(errnoText("cannot lock", path));
      ::close(fd);
      return s;
    }
    return std::unique_ptr<FileLock>(new FileLock(fd));
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  if (s.empty() || s.front() == '+') return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool parseHex16(std::string_view s, uint64_t& out) {
  if (s.size() != 16) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  auto r = std::from_chars(s.data(), s.data() + 16, out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + 16;
}

std::vector<std::string_view> splitSpaces(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t sp = s.find(' ', start);
    out.push_back(s.substr(start, sp == std::string_view::npos ? std::string_view::npos : sp - start));
    if (sp == std::string_view::npos) break;
    start = sp + 1;
  }
  return out;
}

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 100 || name.front() == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

/// One key's value in memory.
struct Entry {
  int64_t created = 0;
  /// The payload when it is inline, or a big payload whose blob is not written yet (or not yet
  /// named by a written index).
  std::string payload;
  /// Non-empty: the payload lives in blobDir/blobFile (payload is then empty once committed).
  std::string blobFile;
  uint64_t blobSize = 0;
  uint64_t blobSum = 0;
  /// put() since the last flush: only a strictly newer record from disk replaces it.
  bool unflushed = false;
};

/// A blob reference as the index stores it.
std::string blobRef(const Entry& e) { return e.blobFile + " " + std::to_string(e.blobSize) + " " + hex16(e.blobSum); }

bool parseBlobRef(std::string_view ref, Entry& e) {
  auto parts = splitSpaces(ref);
  if (parts.size() != 3 || !validName(parts[0]) || !parseNumber(parts[1], e.blobSize) ||
      !parseHex16(parts[2], e.blobSum)) {
    return false;
  }
  e.blobFile = std::string(parts[0]);
  return true;
}

/// "vfblob 1 <keyLen> <payloadLen>": the blob header without its checksum.
std::string blobHeaderPrefix(size_t keyLen, uint64_t payloadLen) {
  return std::string(kBlobMagic) + " 1 " + std::to_string(keyLen) + " " + std::to_string(payloadLen);
}

struct Parsed {
  std::map<std::string, Entry> entries;
  int64_t dropped = 0;
  std::vector<std::string> damage;
};

/// One record at \p pos, or false (\p truncated: it would run past the end of the file). On
/// success \p next is the first byte after it.
bool parseRecord(std::string_view text, size_t pos, std::string& key, Entry& e, size_t& next, bool& truncated) {
  truncated = false;
  size_t eol = text.find('\n', pos);
  if (eol == std::string_view::npos) truncated = text.size() - pos <= kMaxHeaderLine;
  if (eol == std::string_view::npos || eol - pos > kMaxHeaderLine) return false;
  std::string_view line = text.substr(pos, eol - pos);
  auto f = splitSpaces(line);
  if (f.size() != 5 || (f[0] != "rec" && f[0] != "blob")) return false;
  int64_t created = 0;
  uint64_t keyLen = 0, dataLen = 0, sum = 0;
  if (!parseNumber(f[1], created) || !parseNumber(f[2], keyLen) || !parseNumber(f[3], dataLen) ||
      !parseHex16(f[4], sum)) {
    return false;
  }
  size_t start = eol + 1;
  size_t avail = text.size() - start;
  if (keyLen > avail || dataLen > avail - keyLen || avail - keyLen - dataLen < 1) {
    truncated = true;
    return false;
  }
  if (text[start + keyLen + dataLen] != '\n') return false;
  std::string_view k = text.substr(start, keyLen), data = text.substr(start + keyLen, dataLen);
  uint64_t h = fnv1a64(line.substr(0, line.size() - 17));
  h = fnv1a64(k, h);
  h = fnv1a64(data, h);
  if (h != sum) return false;
  e = Entry{};
  e.created = created;
  if (f[0] == "blob") {
    if (!parseBlobRef(data, e)) return false;
  } else {
    e.payload = std::string(data);
  }
  key = std::string(k);
  next = start + keyLen + dataLen + 1;
  return true;
}

void addDamage(Parsed& p, std::string what) {
  if (p.damage.size() < kMaxDamageNotes) p.damage.push_back(std::move(what));
}

bool startsWith(std::string_view s, size_t pos, std::string_view prefix) {
  return s.size() - pos >= prefix.size() && s.substr(pos, prefix.size()) == prefix;
}

/// Tolerant parse: every valid record is kept, damage is described.
Parsed parse(std::string_view text, const std::string& name) {
  Parsed p;
  if (text.empty()) {
    addDamage(p, "empty file");
    return p;
  }
  size_t eol = text.find('\n');
  if (eol == std::string_view::npos || eol > kMaxHeaderLine) {
    addDamage(p, "not a verifuse record store (bad header)");
    return p;
  }
  auto h = splitSpaces(text.substr(0, eol));
  if (h.size() != 3 || h[0] != kMagic) {
    addDamage(p, "not a verifuse record store (bad header)");
    return p;
  }
  if (h[1] != std::to_string(RecordStore::kFormatVersion)) {
    // Another layout: its records may mean something else. Start over.
    addDamage(p, "format version " + std::string(h[1].substr(0, 20)) + ", expected " +
                     std::to_string(RecordStore::kFormatVersion));
    return p;
  }
  if (h[2] != name) {
    addDamage(p, "store '" + std::string(h[2].substr(0, 100)) + "', expected '" + name + "'");
    return p;
  }
  int64_t framed = 0;  // records and damaged regions seen, for the trailer's count
  bool inDamage = false, sawEnd = false, truncated = false;
  size_t pos = eol + 1;
  while (pos < text.size()) {
    if (startsWith(text, pos, "end ")) {
      size_t lineEnd = text.find('\n', pos);
      int64_t count = -1;
      if (lineEnd + 1 == text.size() && parseNumber(text.substr(pos + 4, lineEnd - pos - 4), count)) {
        sawEnd = true;
        if (count != framed && p.damage.empty()) {
          addDamage(p, "trailer says " + std::to_string(count) + " records, found " + std::to_string(framed));
        }
        break;
      }
      // Not a well-formed last line: damage (a trailer is valid only at the very end).
      truncated = lineEnd == std::string_view::npos;
    } else {
      std::string key;
      Entry e;
      size_t next = 0;
      if (parseRecord(text, pos, key, e, next, truncated)) {
        ++framed;
        inDamage = false;
        auto it = p.entries.find(key);
        if (it == p.entries.end() || e.created >= it->second.created) p.entries[key] = std::move(e);
        pos = next;
        continue;
      }
    }
    if (!inDamage) {
      inDamage = true;
      ++framed;
      ++p.dropped;
      addDamage(p, std::string(truncated ? "truncated" : "bad checksum or framing in") + " record " +
                       std::to_string(framed) + " at byte " + std::to_string(pos));
    }
    // Resynchronize: the next line that starts like a record or the trailer.
    size_t nl = text.find('\n', pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    while (pos < text.size() && !startsWith(text, pos, "rec ") && !startsWith(text, pos, "blob ") &&
           !startsWith(text, pos, "end ")) {
      nl = text.find('\n', pos);
      pos = nl == std::string_view::npos ? text.size() : nl + 1;
    }
  }
  if (!sawEnd) addDamage(p, "truncated (no trailer)");
  return p;
}

std::string serialize(const std::string& name, const std::map<std::string, Entry>& entries) {
  size_t total = 64;
  for (const auto& [key, e] : entries) total += 96 + key.size() + (e.blobFile.empty() ? e.payload.size() : 64);
  std::string out;
  out.reserve(total);
  out += kMagic;
  out += ' ';
  out += std::to_string(RecordStore::kFormatVersion);
  out += ' ';
  out += name;
  out += '\n';
  for (const auto& [key, e] : entries) {
    const bool blob = !e.blobFile.empty();
    const std::string ref = blob ? blobRef(e) : std::string();
    std::string_view data = blob ? std::string_view(ref) : std::string_view(e.payload);
    std::string prefix = std::string(blob ? "blob " : "rec ") + std::to_string(e.created) + " " +
                         std::to_string(key.size()) + " " + std::to_string(data.size());
    uint64_t h = fnv1a64(data, fnv1a64(key, fnv1a64(prefix)));
    out += prefix;
    out += ' ';
    out += hex16(h);
    out += '\n';
    out += key;
    out += data;
    out += '\n';
  }
  out += "end ";
  out += std::to_string(entries.size());
  out += '\n';
  return out;
}

uint64_t randomId() {
  static std::mutex mu;
  static std::mt19937_64 rng = [] {
    std::random_device rd;
    uint64_t seed = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid()) ^
                    uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    return std::mt19937_64(seed);
  }();
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

}  // namespace

struct RecordStore::Impl {
  std::string dir, name, path, blobDir;
  RecordStoreOptions options;
  mutable std::mutex mu;
  std::map<std::string, Entry> entries;  // sorted: a file's bytes depend only on its content
  FileId seen;                           // the file as last read or written by this object
  bool dirty = false;
  RecordStoreStats stats;

  void noteDamage(const std::string& what) {
    if (!stats.rebuilt) {
      stats.rebuilt = true;
      stats.rebuildReason = what;
    }
    if (stats.damage.size() < kMaxDamageNotes) stats.damage.push_back(what);
  }

  void absorbDamage(Parsed& p) {
    stats.droppedRecords += p.dropped;
    for (const std::string& d : p.damage) noteDamage(d);
    if (!p.damage.empty()) dirty = true;  // the next flush rewrites the file from what is valid
  }

  /// Takes the records of \p onDisk that are new here or newer than ours. A record put here and
  /// not yet flushed yields only to a strictly newer one; otherwise the file is authoritative.
  void merge(Parsed& onDisk) {
    for (auto& [key, theirs] : onDisk.entries) {
      auto it = entries.find(key);
      if (it == entries.end()) {
        entries.emplace(key, std::move(theirs));
        continue;
      }
      Entry& ours = it->second;
      bool take = ours.unflushed ? theirs.created > ours.created : theirs.created >= ours.created;
      if (take) ours = std::move(theirs);
    }
  }

  /// Reads and merges the file if it is not the one this object last saw.
  Status reloadLocked() {
    if (statFile(path) == seen) return Status::ok();
    std::string text;
    FileId id;
    VF_RETURN_IF_ERROR(readWhole(path, text, id));
    if (id.exists) {
      Parsed p = parse(text, name);
      absorbDamage(p);
      merge(p);
    }
    seen = id;
    ++stats.reloads;
    return Status::ok();
  }

  std::string blobPath(const std::string& file) const { return blobDir + "/" + file; }

  /// Writes \p e's payload to a new blob file (under the lock); sets its blob fields.
  Status writeBlob(const std::string& key, Entry& e) {
    std::error_code ec;
    fs::create_directories(blobDir, ec);
    if (ec) return internalError("cannot create " + blobDir + ": " + ec.message());
    std::string file;
    do {
      file = hex16(fnv1a64(key)) + "-" + hex16(randomId()) + ".blob";
    } while (::access(blobPath(file).c_str(), F_OK) == 0);
    const std::string prefix = blobHeaderPrefix(key.size(), e.payload.size());
    const uint64_t sum = fnv1a64(e.payload, fnv1a64(key, fnv1a64(prefix)));
    const std::string header = prefix + " " + hex16(sum) + "\n";
    VF_RETURN_IF_ERROR(writeFileDurably(blobDir + "/.tmp." + tempSuffix(), blobPath(file), {header, key, e.payload}));
    e.blobFile = file;
    e.blobSize = e.payload.size();
    e.blobSum = sum;
    return Status::ok();
  }

  /// Bytes a blob file of \p key and \p e must have.
  static uint64_t blobFileSize(const std::string& key, const Entry& e) {
    return blobHeaderPrefix(key.size(), e.blobSize).size() + 18 + key.size() + e.blobSize;
  }

  Status flushLocked() {
    if (!dirty) return Status::ok();
    VF_ASSIGN_OR_RETURN(auto fileLock, FileLock::acquire(path + ".lock"));
    // Merge under the lock: whatever another writer put there since we read it survives. Also
    // when it is the file this object last read: a put since then may have replaced a newer
    // record learned from it (created 1003 by another process, then put here with 1002), and
    // merge() gives it back (an unflushed put yields to a strictly newer record). Skipping that
    // file overwrote the newer record and deleted its blob under the readers of other processes
    // (RecordStore.SeveralProcessesMergeUnderTheLock failed in about 1 run of 4). Its damage
    // was counted when it was read.
    {
      std::string text;
      FileId id;
      VF_RETURN_IF_ERROR(readWhole(path, text, id));
      if (id.exists) {
        Parsed p = parse(text, name);
        if (!(id == seen)) absorbDamage(p);
        merge(p);
      }
    }
    // Big payloads go to their own files first: a committed index never names a missing blob.
    std::vector<std::string> written;
    Status s;
    for (auto& [key, e] : entries) {
      if (!e.blobFile.empty() || e.payload.size() <= options.inlineLimit) continue;
      s = writeBlob(key, e);
      if (!s.isOk()) break;
      written.push_back(key);
    }
    if (!written.empty()) syncDir(blobDir);
    // Blobs named by records from disk must still be there (a damaged or cleaned directory).
    std::vector<std::string> missing;
    if (s.isOk()) {
      for (const auto& [key, e] : entries) {
        if (e.blobFile.empty() || !e.payload.empty()) continue;
        struct stat st;
        if (::stat(blobPath(e.blobFile).c_str(), &st) != 0 || uint64_t(st.st_size) != blobFileSize(key, e)) {
          missing.push_back(key);
        }
      }
    }
    for (const std::string& key : missing) {
      ++stats.droppedBlobs;
      noteDamage("blob " + entries[key].blobFile + " missing or of the wrong size");
      entries.erase(key);
    }
    if (s.isOk()) pauseInFlushForTests(name);
    if (s.isOk()) {
      s = writeFileDurably(dir + "/." + name + kSuffix + ".tmp." + tempSuffix(), path, {serialize(name, entries)});
    }
    if (!s.isOk()) {
      // Nothing committed: the payloads stay pending in memory, their blob files go.
      for (const std::string& key : written) {
        Entry& e = entries[key];
        ::unlink(blobPath(e.blobFile).c_str());
        e.blobFile.clear();
      }
      return s;
    }
    syncDir(dir);  // the rename is durable only once the directory is
    seen = statFile(path);
    std::set<std::string> referenced;
    for (auto& [key, e] : entries) {
      e.unflushed = false;
      if (!e.blobFile.empty()) {
        referenced.insert(e.blobFile);
        std::string().swap(e.payload);  // committed: read from the blob from now on
      }
    }
    collectGarbage(referenced);
    dirty = false;
    ++stats.flushes;
    return Status::ok();
  }

  /// Under the lock no other writer is between "write temp" and "rename", so every temp file of
  /// this store is a crashed writer's, and a blob no record names is garbage.
  /// Unreferenced blob files go only after the grace period (readers may be reading them from an
  /// older index); temp files at once (no reader ever opens one).
  void collectGarbage(const std::set<std::string>& referenced) {
    std::error_code ec;
    const std::string tmpPrefix = "." + name + kSuffix + ".tmp.";
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string f = it->path().filename().string();
      if (f.rfind(tmpPrefix, 0) == 0) ::unlink(it->path().c_str());
    }
    ec.clear();
    const int64_t now = nowSeconds();
    for (fs::directory_iterator it(blobDir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string f = it->path().filename().string();
      if (referenced.count(f) != 0) continue;
      const bool temp = f.rfind(".tmp.", 0) == 0;
      struct stat st;
      if (!temp && options.blobGraceSeconds > 0 &&
          (::stat(it->path().c_str(), &st) != 0 || now - int64_t(st.st_mtim.tv_sec) < options.blobGraceSeconds)) {
        continue;
      }
      ::unlink(it->path().c_str());
    }
  }

  /// Reads the blob of \p e (no lock held). nullopt + \p why on any problem.
  std::optional<std::string> readBlob(const std::string& key, const Entry& e, std::string& why) const {
    std::string text;
    FileId id;
    Status s = readWhole(blobPath(e.blobFile), text, id);
    if (!s.isOk() || !id.exists) {
      why = s.isOk() ? "missing" : s.message();
      return std::nullopt;
    }
    const std::string header = blobHeaderPrefix(key.size(), e.blobSize) + " " + hex16(e.blobSum) + "\n";
    if (text.size() != header.size() + key.size() + e.blobSize || text.compare(0, header.size(), header) != 0 ||
        text.compare(header.size(), key.size(), key) != 0) {
      why = "header, key or length mismatch";
      return std::nullopt;
    }
    std::string_view payload = std::string_view(text).substr(header.size() + key.size());
    uint64_t sum = fnv1a64(payload, fnv1a64(key, fnv1a64(header.substr(0, header.size() - 18))));
    if (sum != e.blobSum) {
      why = "bad checksum";
      return std::nullopt;
    }
    text.erase(0, header.size() + key.size());
    return text;
  }
};

RecordStore::RecordStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RecordStore::~RecordStore() = default;

StatusOr<std::unique_ptr<RecordStore>> RecordStore::open(const std::string& dir, const std::string& name,
                                                         RecordStoreOptions options) {
  if (!validName(name)) return invalidArgument("record store: bad store name '" + name + "'");
  if (dir.empty()) return invalidArgument("record store " + name + ": empty cache directory");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return internalError("record store " + name + ": cannot create " + dir + ": " + ec.message());
  if (!fs::is_directory(dir, ec)) return invalidArgument("record store " + name + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return invalidArgument(errnoText("record store " + name + ": directory is not writable:", dir));
  }
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->name = name;
  impl->path = dir + "/" + name + kSuffix;
  impl->blobDir = dir + "/" + name + ".blobs";
  impl->options = options;
  std::unique_ptr<RecordStore> store(new RecordStore(std::move(impl)));
  Impl& s = *store->impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::string text;
  FileId id;
  VF_RETURN_IF_ERROR(readWhole(s.path, text, id).withContext("record store " + name));
  if (id.exists) {
    Parsed p = parse(text, name);
    s.absorbDamage(p);
    s.merge(p);
    s.seen = id;
  }
  s.stats.loaded = static_cast<int64_t>(s.entries.size());
  if (s.dirty) VF_RETURN_IF_ERROR(s.flushLocked().withContext("record store: rebuilding " + s.path));
  return store;
}

std::optional<Record> RecordStore::get(const std::string& key) {
  Impl& s = *impl_;
  // A blob read fails when a writer replaced the record and deleted its old blob after this object
  // read the index (or when the blob is damaged). Re-read the index and retry with the blob it
  // names now, as long as the index keeps changing; a failure against an unchanged index is
  // damage, reported as a miss. Either way the record stays: only a flush under the lock, which
  // sees the blob directory as it is, drops a record whose blob is gone.
  constexpr int kMaxAttempts = 64;
  std::string failedBlob, why;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Entry copy;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.entries.find(key);
      if (it == s.entries.end() || (!failedBlob.empty() && it->second.blobFile == failedBlob)) {
        (void)s.reloadLocked();  // an unreadable file is a miss like any other
        it = s.entries.find(key);
      }
      if (it == s.entries.end()) {
        ++s.stats.misses;
        return std::nullopt;
      }
      if (it->second.blobFile.empty() || !it->second.payload.empty()) {
        ++s.stats.hits;
        return Record{it->second.payload, it->second.created};
      }
      if (!failedBlob.empty() && it->second.blobFile == failedBlob) break;  // the index still names it
      copy.blobFile = it->second.blobFile;
      copy.blobSize = it->second.blobSize;
      copy.blobSum = it->second.blobSum;
      copy.created = it->second.created;
    }
    std::optional<std::string> payload = s.readBlob(key, copy, why);
    if (payload) {
      std::lock_guard<std::mutex> lock(s.mu);
      ++s.stats.hits;
      return Record{std::move(*payload), copy.created};
    }
    failedBlob = copy.blobFile;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.stats.droppedBlobs;
  // Not a rebuild: the index is intact, and the record stays in it.
  if (s.stats.damage.size() < kMaxDamageNotes) s.stats.damage.push_back("blob " + failedBlob + ": " + why);
  ++s.stats.misses;
  return std::nullopt;
}

bool RecordStore::contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->entries.count(key) != 0;
}

void RecordStore::put(const std::string& key, std::string payload, int64_t created) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  Entry& e = s.entries[key];
  e = Entry{};
  e.created = created;
  e.payload = std::move(payload);
  e.unflushed = true;
  ++s.stats.puts;
  s.dirty = true;
}

void RecordStore::put(const std::string& key, std::string payload) { put(key, std::move(payload), nowSeconds()); }

Status RecordStore::flush() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->flushLocked().withContext("record store " + impl_->path);
}

Status RecordStore::reload() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->reloadLocked().withContext("record store " + impl_->path);
}

size_t RecordStore::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->entries.size();
}

std::vector<std::string> RecordStore::keys() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::string> out;
  out.reserve(impl_->entries.size());
  for (const auto& kv : impl_->entries) out.push_back(kv.first);
  return out;
}

RecordStoreStats RecordStore::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const std::string& RecordStore::path() const { return impl_->path; }
const std::string& RecordStore::dir() const { return impl_->dir; }
const std::string& RecordStore::name() const { return impl_->name; }

int64_t RecordStore::nowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace verifuse::support
