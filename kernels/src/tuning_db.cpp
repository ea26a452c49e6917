// The tuning database and the timing helper. See tuning_db.h for the file's invariants.
//
// File format, version 1 (text, one record per line, sorted by key):
//   verifuse-tuning-db 1
//   <fnv1a64 of payload, 16 hex> <payload>        payload = key \t engine \t onednn_ms \t aten_ms \t created
//   ...
//   end <number of records>
// Keys are escaped (\\, \t, \n) so a payload is always one line of five tab-separated fields.
// Numbers go through to_chars/from_chars: shortest round trip, independent of the C locale.
#include "verifuse/kernels/tuning_db.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "verifuse/kernels/kernel.h"

namespace verifuse::kernels {
namespace {

constexpr std::string_view kMagic = "verifuse-tuning-db ";
constexpr const char* kFileName = "tuning-v1.db";

std::atomic<int64_t> gTimingCalls{0};
std::atomic<int64_t> gTempCounter{0};

uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = digits[v & 0xf];
  return out;
}

std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::optional<std::string> unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    if (s[i] == '\\') out += '\\';
    else if (s[i] == 't') out += '\t';
    else if (s[i] == 'n') out += '\n';
    else return std::nullopt;
  }
  return out;
}

std::string formatDouble(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string errnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

/// The parsed content of a file plus what was wrong with it (empty reason: nothing).
struct Parsed {
  std::map<std::string, TuningDecision> records;
  int64_t dropped = 0;
  std::string damage;
};

std::string serializeRecord(const std::string& key, const TuningDecision& d) {
  std::string payload = escape(key);
  payload += '\t';
  payload += engineName(d.engine);
  payload += '\t';
  payload += formatDouble(d.onednnMs);
  payload += '\t';
  payload += formatDouble(d.atenMs);
  payload += '\t';
  payload += std::to_string(d.created);
  return hex16(fnv1a64(payload)) + " " + payload + "\n";
}

std::string serialize(const std::map<std::string, TuningDecision>& records) {
  std::string out(kMagic);
  out += std::to_string(TuningDb::kFormatVersion);
  out += '\n';
  for (const auto& [key, d] : records) out += serializeRecord(key, d);
  out += "end ";
  out += std::to_string(records.size());
  out += '\n';
  return out;
}

bool parseRecord(std::string_view line, std::string& key, TuningDecision& d) {
  if (line.size() < 18 || line[16] != ' ') return false;
  std::string_view payload = line.substr(17);
  if (hex16(fnv1a64(payload)) != line.substr(0, 16)) return false;
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t tab = payload.find('\t', start);
    fields.push_back(payload.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  if (fields.size() != 5) return false;
  auto k = unescape(fields[0]);
  if (!k) return false;
  auto engine = parseEngine(std::string(fields[1]));
  if (!engine.isOk()) return false;
  if (!parseNumber(fields[2], d.onednnMs) || !parseNumber(fields[3], d.atenMs) ||
      !parseNumber(fields[4], d.created)) {
    return false;
  }
  d.engine = engine.value();
  key = std::move(*k);
  return true;
}

Parsed parse(std::string_view text) {
  Parsed p;
  if (text.empty()) {
    p.damage = "empty file";
    return p;
  }
  size_t eol = text.find('\n');
  std::string_view header = text.substr(0, eol);
  if (header.substr(0, kMagic.size()) != kMagic) {
    p.damage = "not a verifuse tuning database (bad header)";
    return p;
  }
  std::string_view version = header.substr(kMagic.size());
  if (version != std::to_string(TuningDb::kFormatVersion)) {
    // Another format: its records may mean something else; start over.
    p.damage = "format version " + std::string(version) + ", expected " +
               std::to_string(TuningDb::kFormatVersion);
    return p;
  }
  int64_t lines = 0;
  bool sawEnd = false;
  size_t pos = eol == std::string_view::npos ? text.size() : eol + 1;
  while (pos < text.size()) {
    size_t next = text.find('\n', pos);
    bool complete = next != std::string_view::npos;
    std::string_view line = text.substr(pos, complete ? next - pos : std::string_view::npos);
    pos = complete ? next + 1 : text.size();
    if (sawEnd) {
      if (p.damage.empty()) p.damage = "data after the trailer";
      continue;
    }
    if (line.substr(0, 4) == "end ") {
      int64_t count = -1;
      sawEnd = complete && parseNumber(line.substr(4), count);
      if (!sawEnd) {
        if (p.damage.empty()) p.damage = "truncated trailer";
      } else if (count != lines && p.damage.empty()) {
        p.damage = "trailer says " + std::to_string(count) + " records, found " + std::to_string(lines);
      }
      continue;
    }
    ++lines;
    std::string key;
    TuningDecision d;
    if (!complete || !parseRecord(line, key, d)) {
      ++p.dropped;
      if (p.damage.empty()) p.damage = "bad checksum or format in record " + std::to_string(lines);
      continue;
    }
    p.records[key] = d;
  }
  if (!sawEnd && p.damage.empty()) p.damage = "truncated (no trailer)";
  return p;
}

/// Reads \p path; a missing file is an empty database (no damage).
Parsed readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    Parsed p;
    if (errno != ENOENT) p.damage = errnoText("cannot read", path);
    return p;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str());
}

/// Exclusive flock on a side file for as long as it lives. flock locks belong to the open file
/// description, so two TuningDb objects in one process exclude each other too.
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

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

/// Writes \p content to \p path atomically: temp file beside it, fsync, rename, fsync the dir.
Status writeAtomically(const std::string& dir, const std::string& path, const std::string& content) {
  std::string tmp = dir + "/." + kFileName + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(gTempCounter.fetch_add(1));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return internalError(errnoText("cannot create", tmp));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = internalError(errnoText("cannot write", tmp));
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    Status s = internalError(errnoText("cannot sync", tmp));
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = internalError(errnoText("cannot rename onto", path));
    ::unlink(tmp.c_str());
    return s;
  }
  // The rename itself is durable only once the directory is synced.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

void appendField(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += '=';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += ';';
}

}  // namespace

// ---- TuningKey -------------------------------------------------------------------------------------

TuningKey TuningKey::forThisMachine(std::string signature, std::vector<std::vector<int64_t>> inputShapes,
                                    std::string dtype, int threads) {
  TuningKey k;
  k.signature = std::move(signature);
  k.inputShapes = std::move(inputShapes);
  k.dtype = std::move(dtype);
  k.isa = cpuIsaName();
  k.threads = threads;
  k.onednnVersion = kernels::onednnVersion();
  return k;
}

std::string TuningKey::canonical() const {
  std::string shapes = std::to_string(inputShapes.size());
  for (const auto& s : inputShapes) {
    shapes += '[';
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) shapes += ',';
      shapes += std::to_string(s[i]);
    }
    shapes += ']';
  }
  std::string out = "k1;";
  appendField(out, "sig", signature);
  appendField(out, "shapes", shapes);
  appendField(out, "dtype", dtype);
  appendField(out, "isa", isa);
  appendField(out, "threads", std::to_string(threads));
  appendField(out, "onednn", onednnVersion);
  return out;
}

std::string TuningKey::shortHash() const { return hex16(fnv1a64(canonical())); }

const char* engineName(Engine e) { return e == Engine::kOneDnn ? "onednn" : "aten"; }

StatusOr<Engine> parseEngine(const std::string& name) {
  if (name == "onednn") return Engine::kOneDnn;
  if (name == "aten") return Engine::kAten;
  return invalidArgument("unknown engine '" + name + "' (expected onednn or aten)");
}

// ---- TuningDb --------------------------------------------------------------------------------------

StatusOr<std::unique_ptr<TuningDb>> TuningDb::open(const std::string& cacheDir) {
  if (cacheDir.empty()) return invalidArgument("TuningDb: empty cache_dir");
  std::error_code ec;
  std::filesystem::create_directories(cacheDir, ec);
  if (ec) return internalError("TuningDb: cannot create " + cacheDir + ": " + ec.message());
  if (::access(cacheDir.c_str(), W_OK | X_OK) != 0) {
    return invalidArgument(errnoText("TuningDb: cache_dir is not writable:", cacheDir));
  }
  std::unique_ptr<TuningDb> db(new TuningDb(cacheDir, cacheDir + "/" + kFileName));
  Parsed p = readFile(db->path_);
  db->records_ = std::move(p.records);
  db->stats_.loaded = static_cast<int64_t>(db->records_.size());
  db->stats_.droppedRecords = p.dropped;
  if (!p.damage.empty()) {
    db->stats_.rebuilt = true;
    db->stats_.rebuildReason = p.damage;
    db->dirty_ = true;
    std::lock_guard<std::mutex> lock(db->mu_);
    VF_RETURN_IF_ERROR(db->flushLocked().withContext("TuningDb: rebuilding " + db->path_));
  }
  return db;
}

std::optional<TuningDecision> TuningDb::lookup(const TuningKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(key.canonical());
  if (it == records_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  return it->second;
}

void TuningDb::record(const TuningKey& key, const TuningDecision& decision) {
  std::lock_guard<std::mutex> lock(mu_);
  records_[key.canonical()] = decision;
  ++stats_.recorded;
  dirty_ = true;
}

Status TuningDb::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  return flushLocked();
}

Status TuningDb::flushLocked() {
  if (!dirty_) return Status::ok();
  VF_ASSIGN_OR_RETURN(auto fileLock, FileLock::acquire(path_ + ".lock"));
  // Merge under the lock: whatever another writer put there since we loaded survives.
  Parsed onDisk = readFile(path_);
  if (!onDisk.damage.empty() && !stats_.rebuilt) {
    stats_.rebuilt = true;
    stats_.rebuildReason = onDisk.damage;
    stats_.droppedRecords += onDisk.dropped;
  }
  for (auto& [key, theirs] : onDisk.records) {
    auto it = records_.find(key);
    if (it == records_.end()) {
      records_.emplace(key, theirs);
    } else if (theirs.created > it->second.created) {
      it->second = theirs;  // the newer measurement wins; a tie keeps ours
    }
  }
  VF_RETURN_IF_ERROR(writeAtomically(dir_, path_, serialize(records_)));
  ++stats_.flushes;
  dirty_ = false;
  return Status::ok();
}

size_t TuningDb::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

TuningDbStats TuningDb::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// ---- timing ----------------------------------------------------------------------------------------

StatusOr<TimingResult> timeCallable(const std::function<Status()>& fn, int warmup, int repeats) {
  if (repeats < 1 || warmup < 0) {
    return invalidArgument("timeCallable: need repeats >= 1 and warmup >= 0");
  }
  gTimingCalls.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < warmup; ++i) VF_RETURN_IF_ERROR(fn());
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    VF_RETURN_IF_ERROR(fn());
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  TimingResult r;
  r.repeats = repeats;
  r.minMs = ms.front();
  r.medianMs = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  size_t rank = (9 * n + 9) / 10;  // ceil(0.9 n), nearest rank
  r.p90Ms = ms[std::max<size_t>(rank, 1) - 1];
  return r;
}

int64_t timingCallCount() { return gTimingCalls.load(std::memory_order_relaxed); }

StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key,
                                      const std::function<Status()>& runOneDnn,
                                      const std::function<Status()>& runAten, int warmup, int repeats) {
  if (auto hit = db.lookup(key)) return *hit;
  VF_ASSIGN_OR_RETURN(TimingResult aten, timeCallable(runAten, warmup, repeats));
  TuningDecision d;
  d.atenMs = aten.medianMs;
  auto onednn = timeCallable(runOneDnn, warmup, repeats);
  d.onednnMs = onednn.isOk() ? onednn->medianMs : -1.0;
  d.engine = onednn.isOk() && d.onednnMs < d.atenMs ? Engine::kOneDnn : Engine::kAten;
  d.created = static_cast<int64_t>(std::time(nullptr));
  db.record(key, d);
  return d;
}

}  // namespace verifuse::kernels
