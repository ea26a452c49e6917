// Crash-consistency harness for the record store (support/record_store.h), in the spirit of
// SQLite's crash tests: N worker processes write, flush, reload and read one store while the
// parent kills them with SIGKILL at random moments (inside flush() included) and starts
// replacements. Afterwards, and continuously while it runs, it checks that
//
//   - no record acknowledged by a completed flush() is ever lost: the final store, and every
//     reader after a reload(), has each acknowledged key at its acknowledged version or later;
//   - no payload is corrupt or torn: every payload read matches the bytes its (key, version)
//     determines, blobs (most payloads here) included, and the index is never rebuilt;
//   - nothing is left behind: the store's lock can be taken at once after the kills, and a flush
//     leaves no temp file.
//
//   verifuse_record_store_crash [--seconds S] [--workers N] [--seed X] [--dir D] [--grace G]
//
// Prints one summary line and exits 0 when every check held, 1 otherwise. `make test` runs it for
// a few seconds (ctest: RecordStoreCrash.Short); `make test-crash` for minutes.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "verifuse/support/hash.h"
#include "verifuse/support/record_store.h"

namespace {

namespace fs = std::filesystem;
using verifuse::support::RecordStore;
using verifuse::support::RecordStoreOptions;

constexpr const char* kStore = "crash-v1";
/// Few keys, so a key's blob is often replaced (and, with no grace period, deleted) while another
/// process still reads it from the index it read before.
constexpr int kKeysPerWorker = 8;
constexpr size_t kInlineLimit = 256;  // most payloads are blobs: the racy part

/// What the workers share with the parent (an anonymous shared mapping made before fork).
struct Shared {
  std::atomic<int> inFlush[64];       // worker w is inside flush()
  std::atomic<long> flushes{0};       // completed flushes (acknowledged)
  std::atomic<long> reads{0};         // payloads read and checked
  std::atomic<long> failures{0};      // checks that failed (details in the failure log)
};

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The payload a (key, version) stands for: its length and bytes follow from the pair, and it
/// starts with the version, so a reader can check any payload it gets without knowing which
/// version to expect.
std::string payloadOf(const std::string& key, int64_t version) {
  uint64_t seed = verifuse::support::fnv1a64(key) ^ static_cast<uint64_t>(version) * 0x100000001b3ull;
  uint64_t s = seed;
  const size_t len = 24 + splitmix(s) % 6000;  // a quarter inline, the rest blobs
  std::string out = std::to_string(version) + ":";
  while (out.size() < len) out.push_back(static_cast<char>('a' + splitmix(s) % 26));
  return out;
}

/// The version a payload claims, if it is exactly payloadOf(key, version); -1 otherwise.
int64_t checkedVersion(const std::string& key, const std::string& payload) {
  const size_t colon = payload.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 19) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < colon; ++i) {
    if (payload[i] < '0' || payload[i] > '9') return -1;
    v = v * 10 + (payload[i] - '0');
  }
  return payloadOf(key, v) == payload ? v : -1;
}

std::string keyOf(int worker, int k) {
  std::string key = "w";
  key += std::to_string(worker);
  key += "/k";
  key += std::to_string(k);
  return key;
}
std::string ackLog(const std::string& dir, int worker) { return dir + "/ack." + std::to_string(worker) + ".log"; }

/// The highest acknowledged version of each key in a worker's log ("key version" lines; a line cut
/// by a kill has no newline and is ignored: its flush completed but was not acknowledged).
std::map<std::string, int64_t> readAcks(const std::string& path) {
  std::map<std::string, int64_t> acks;
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  while (true) {
    const size_t nl = all.find('\n', pos);
    if (nl == std::string::npos) break;
    std::istringstream line(all.substr(pos, nl - pos));
    std::string key;
    int64_t v = -1;
    if (line >> key >> v) acks[key] = std::max(acks[key], v);
    pos = nl + 1;
  }
  return acks;
}

void fail(const std::string& dir, Shared* shared, const std::string& what) {
  shared->failures.fetch_add(1);
  const std::string line = what + "\n";
  int fd = ::open((dir + "/failures.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
  }
}

/// One worker's life until it is killed: put 1-4 of its keys at new versions, flush, acknowledge;
/// reload and read back another worker's acknowledged records; now and then reopen the store.
[[noreturn]] void worker(const std::string& dir, int id, int workers, int generation, uint64_t seed,
                         const RecordStoreOptions& options, Shared* shared) {
  uint64_t rng = seed ^ (uint64_t(id) << 40) ^ (uint64_t(generation) << 20);
  // Versions grow across this worker's lives: a life starts above every version it could have
  // acknowledged before (generation in the high bits, a counter below).
  int64_t counter = int64_t(generation) << 24;
  const int ackFd = ::open(ackLog(dir, id).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ackFd < 0) ::_exit(20);
  auto opened = RecordStore::open(dir, kStore, options);
  if (!opened.isOk()) {
    fail(dir, shared, "worker open: " + opened.status().toString());
    ::_exit(21);
  }
  std::unique_ptr<RecordStore> store = std::move(opened).value();
  if (store->stats().rebuilt) fail(dir, shared, "store rebuilt at open: " + store->stats().rebuildReason);
  while (true) {
    const int puts = 1 + int(splitmix(rng) % 4);
    std::string acks;
    for (int i = 0; i < puts; ++i) {
      const std::string key = keyOf(id, int(splitmix(rng) % kKeysPerWorker));
      const int64_t version = ++counter;
      store->put(key, payloadOf(key, version), version);
      acks += key + " " + std::to_string(version) + "\n";
    }
    shared->inFlush[id].store(1);
    auto s = store->flush();
    shared->inFlush[id].store(0);
    if (!s.isOk()) {
      fail(dir, shared, "flush: " + s.toString());
      continue;
    }
    shared->flushes.fetch_add(1);
    (void)!::write(ackFd, acks.data(), acks.size());  // one write: a kill leaves whole lines or a cut last one

    // A reader's check: another worker's acknowledged records are there and intact; after a
    // reload(), at their acknowledged version or later. Without one, get() reads from the index
    // this object read last, whose blobs other writers may have replaced and deleted since.
    const int other = int(splitmix(rng) % workers);
    const auto theirs = readAcks(ackLog(dir, other));  // read first: acknowledged before the gets
    const bool reloaded = splitmix(rng) % 2 == 0;
    if (reloaded) {
      shared->inFlush[id].store(2);
      auto r = store->reload();
      shared->inFlush[id].store(0);
      if (!r.isOk()) fail(dir, shared, "reload: " + r.toString());
    }
    int checked = 0;
    for (const auto& [key, acked] : theirs) {
      if (checked++ >= 6 && splitmix(rng) % 4 != 0) continue;
      auto rec = store->get(key);
      if (!rec) {
        fail(dir, shared, "worker " + std::to_string(id) + ": acknowledged " + key + " v" + std::to_string(acked) +
                              " missing" + (reloaded ? " after reload" : ""));
        continue;
      }
      const int64_t v = checkedVersion(key, rec->payload);
      if (v < 0) {
        fail(dir, shared, "worker " + std::to_string(id) + ": corrupt payload of " + key);
      } else if (reloaded && v < acked) {
        fail(dir, shared, "worker " + std::to_string(id) + ": " + key + " at v" + std::to_string(v) +
                              " after reload, v" + std::to_string(acked) + " acknowledged");
      }
      shared->reads.fetch_add(1);
    }
    if (splitmix(rng) % 16 == 0) {  // a fresh open now and then (open's read and repair path)
      store.reset();
      auto again = RecordStore::open(dir, kStore, options);
      if (!again.isOk()) {
        fail(dir, shared, "worker reopen: " + again.status().toString());
        ::_exit(22);
      }
      store = std::move(again).value();
      if (store->stats().rebuilt) fail(dir, shared, "store rebuilt at reopen: " + store->stats().rebuildReason);
    }
  }
}

pid_t spawn(const std::string& dir, int id, int workers, int generation, uint64_t seed,
            const RecordStoreOptions& options, Shared* shared) {
  pid_t pid = ::fork();
  if (pid == 0) worker(dir, id, workers, generation, seed, options, shared);
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 5;
  int workers = 4;
  uint64_t seed = 1;
  int64_t grace = 0;  // 0: replaced blobs deleted at once, so readers do meet deleted blobs
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--seconds") seconds = std::atof(v.c_str());
    else if (a == "--workers") workers = std::atoi(v.c_str());
    else if (a == "--seed") seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--dir") dir = v;
    else if (a == "--grace") grace = std::atoll(v.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (workers < 1 || workers > 64) return 2;
  bool ownDir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/verifuse-crash-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return 2;
    dir = tmpl;
    ownDir = true;
  }
  RecordStoreOptions options;
  options.inlineLimit = kInlineLimit;
  options.blobGraceSeconds = grace;

  void* mem = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 2;
  Shared* shared = new (mem) Shared();

  std::mt19937_64 rng(seed);
  std::vector<pid_t> pids(workers);
  std::vector<int> generation(workers, 1);
  for (int w = 0; w < workers; ++w) pids[w] = spawn(dir, w, workers, generation[w], seed, options, shared);

  long kills = 0, killsInFlush = 0, killsInReload = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    ::usleep(static_cast<useconds_t>(2000 + rng() % 18000));  // 2-20 ms between kills
    const int w = int(rng() % workers);
    const int state = shared->inFlush[w].load();
    ::kill(pids[w], SIGKILL);
    ::waitpid(pids[w], nullptr, 0);  // a worker that gave up on its own has logged why
    ++kills;
    killsInFlush += state == 1;
    killsInReload += state == 2;
    shared->inFlush[w].store(0);
    pids[w] = spawn(dir, w, workers, ++generation[w], seed, options, shared);
  }
  for (int w = 0; w < workers; ++w) {
    ::kill(pids[w], SIGKILL);
    ::waitpid(pids[w], nullptr, 0);
  }

  // No stale lock: the last holder died with its flock.
  long lost = 0, corrupt = 0, checkedRecords = 0;
  bool lockFree = false, rebuilt = false, tempLeft = false;
  {
    int fd = ::open((dir + "/" + kStore + ".vfstore.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    lockFree = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0) ::close(fd);
  }
  auto opened = RecordStore::open(dir, kStore, options);
  if (!opened.isOk()) {
    std::printf("record store crash harness: final open failed: %s\n", opened.status().toString().c_str());
    return 1;
  }
  auto& store = *opened.value();
  rebuilt = store.stats().rebuilt;
  for (int w = 0; w < workers; ++w) {
    for (const auto& [key, acked] : readAcks(ackLog(dir, w))) {
      ++checkedRecords;
      auto rec = store.get(key);
      const int64_t v = rec ? checkedVersion(key, rec->payload) : -2;
      if (v == -2 || (v >= 0 && v < acked)) {
        ++lost;
        fail(dir, shared, "final: " + key + (rec ? " at v" + std::to_string(v) : std::string(" missing")) +
                              ", v" + std::to_string(acked) + " acknowledged");
      } else if (v < 0) {
        ++corrupt;
        fail(dir, shared, "final: corrupt payload of " + key);
      }
    }
  }
  // A flush of the survivor clears what the killed writers left (temp files).
  store.put("final", "x", 1);
  if (!store.flush().isOk()) fail(dir, shared, "final flush failed");
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f.find(".tmp.") != std::string::npos) tempLeft = true;
  }

  const long failures = shared->failures.load();
  const bool ok = failures == 0 && lost == 0 && corrupt == 0 && lockFree && !rebuilt && !tempLeft;
  std::printf(
      "record store crash harness: %.0f s, %d workers, seed %llu, grace %llds: %ld SIGKILLs (%ld inside flush, %ld "
      "inside reload), %ld acknowledged flushes, %ld reads checked, %ld acknowledged keys checked at the end: "
      "%ld lost, %ld corrupt, %ld failed checks, lock %s, index %s, temp files %s -> %s\n",
      seconds, workers, static_cast<unsigned long long>(seed), static_cast<long long>(grace), kills, killsInFlush,
      killsInReload, shared->flushes.load(), shared->reads.load(), checkedRecords, lost, corrupt, failures,
      lockFree ? "free" : "STALE", rebuilt ? "REBUILT" : "intact", tempLeft ? "LEFT" : "none", ok ? "ok" : "FAILED");
  if (!ok) {
    std::ifstream in(dir + "/failures.log");
    std::string line;
    for (int n = 0; n < 20 && std::getline(in, line); ++n) std::printf("  %s\n", line.c_str());
    std::printf("  (store kept in %s)\n", dir.c_str());
  } else if (ownDir) {
    fs::remove_all(dir);
  }
  return ok ? 0 : 1;
}
