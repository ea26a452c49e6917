// The record store's fault matrix: round trip of any bytes, truncation at every length, flipped
// bytes, other versions and foreign files, damaged framing with resynchronisation, unwritable
// directories, concurrent writers (threads, processes), newer-wins merging, big payloads in blobs
// (damage, garbage collection, lazy reads), stale temp files, and a 1000-record load measurement.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "verifuse/support/hash.h"
#include "verifuse/support/record_store.h"

namespace verifuse::support {
namespace {

/// Blobs no record names are deleted at the flush that replaces them (tests that count files).
const RecordStoreOptions noGrace{64 * 1024, 0};


namespace fs = std::filesystem;

#define VF_ASSERT_OK(expr)                   \
  do {                                       \
    ::verifuse::Status s_ = (expr);          \
    ASSERT_TRUE(s_.isOk()) << s_.toString(); \
  } while (0)

#define VF_ASSERT_OPEN(var, ...)                                   \
  auto var##_or = RecordStore::open(__VA_ARGS__);                  \
  ASSERT_TRUE(var##_or.isOk()) << var##_or.status().toString();    \
  std::unique_ptr<RecordStore> var = std::move(var##_or).value()

/// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "verifuse-store-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Keys and payloads that break any line- or tab-based format: tabs, newlines, NULs, every byte.
std::map<std::string, std::string> awkwardRecords() {
  std::string allBytes;
  for (int c = 0; c < 256; ++c) allBytes += static_cast<char>(c);
  return {
      {"plain", "payload"},
      {std::string("tab\tnew\nline\0nul", 16), std::string("p\0q\n\nend 3\nrec 1 2 3\n", 21)},
      {"empty-payload", ""},
      {"", "the empty key"},
      {"all-bytes", allBytes},
      {"rec 1 1 1 0000000000000000\nx", "a key that looks like a record header"},
  };
}

void populate(const std::string& dir, const std::string& name = "test-v1") {
  VF_ASSERT_OPEN(store, dir, name);
  int64_t t = 1000;
  for (const auto& [k, v] : awkwardRecords()) store->put(k, v, t++);
  VF_ASSERT_OK(store->flush());
}

/// Every record \p store returns must be exactly one we wrote.
void expectOnlyOriginals(RecordStore& store) {
  auto originals = awkwardRecords();
  for (const std::string& k : store.keys()) {
    auto it = originals.find(k);
    ASSERT_NE(it, originals.end()) << "a key that was never written: " << k;
    auto r = store.get(k);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->payload, it->second) << k;
  }
}

TEST(RecordStore, RoundTripOfAnyBytes) {
  TempDir dir;
  populate(dir.path());
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  RecordStoreStats s = store->stats();
  EXPECT_FALSE(s.rebuilt) << s.rebuildReason;
  EXPECT_EQ(s.loaded, 6);
  int64_t t = 1000;
  for (const auto& [k, v] : awkwardRecords()) {
    auto r = store->get(k);
    ASSERT_TRUE(r.has_value()) << k;
    EXPECT_EQ(r->payload, v);
    EXPECT_EQ(r->created, t++);
  }
  EXPECT_FALSE(store->get("missing").has_value());
  EXPECT_EQ(store->stats().hits, 6);
  EXPECT_EQ(store->stats().misses, 1);
  EXPECT_EQ(store->path(), dir.path() + "/test-v1.vfstore");
  std::string text = readAll(store->path());
  EXPECT_EQ(text.rfind("vfstore 1 test-v1\n", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 6), "end 6\n");
}

TEST(RecordStore, FileBytesDependOnlyOnContent) {
  TempDir dir;
  populate(dir.path());
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  const std::string before = readAll(store->path());
  store->put("plain", "payload", store->get("plain")->created);  // the same record again
  VF_ASSERT_OK(store->flush());
  EXPECT_EQ(readAll(store->path()), before);
  EXPECT_EQ(store->stats().flushes, 1);
  VF_ASSERT_OK(store->flush());  // nothing changed: no write
  EXPECT_EQ(store->stats().flushes, 1);
}

TEST(RecordStore, NothingIsWrittenBeforeFlush) {
  TempDir dir;
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  VF_ASSERT_OK(store->flush());
  EXPECT_EQ(store->stats().flushes, 0);
  EXPECT_FALSE(fs::exists(store->path()));
  store->put("k", "v");
  EXPECT_FALSE(fs::exists(store->path()));
  EXPECT_EQ(store->get("k")->payload, "v");
  EXPECT_GT(store->get("k")->created, 1700000000);  // now, in seconds
}

TEST(RecordStore, TruncationAtEveryLengthKeepsOnlyValidRecords) {
  TempDir dir;
  populate(dir.path());
  const std::string path = dir.path() + "/test-v1.vfstore";
  const std::string full = readAll(path);
  ASSERT_LT(full.size(), 1200u);
  // Every cut in the header and next to a line boundary, plus a stride through the rest (each
  // open repairs the file with two fsyncs, so every length would take seconds).
  std::set<size_t> lengths;
  for (size_t i = 0; i < full.size(); ++i) {
    if (i < 20 || i % 7 == 0) lengths.insert(i);
    if (full[i] != '\n') continue;
    for (size_t len : {i, i + 1, i + 2}) {
      if (len < full.size()) lengths.insert(len);
    }
  }
  size_t previous = 0;
  for (size_t len : lengths) {
    writeAll(path, full.substr(0, len));
    auto store = RecordStore::open(dir.path(), "test-v1");
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    RecordStoreStats s = store.value()->stats();
    EXPECT_TRUE(s.rebuilt) << "length " << len;
    EXPECT_NE(s.rebuildReason.find(len == 0 ? "empty" : len < 18 ? "header" : "truncated"), std::string::npos)
        << len << ": " << s.rebuildReason;
    expectOnlyOriginals(*store.value());
    // A longer prefix never holds fewer records.
    EXPECT_GE(store.value()->size(), previous) << len;
    previous = store.value()->size();
    // The file was repaired at open: healthy for the next reader.
    auto again = RecordStore::open(dir.path(), "test-v1");
    ASSERT_TRUE(again.isOk());
    EXPECT_FALSE(again.value()->stats().rebuilt) << len << ": " << again.value()->stats().rebuildReason;
  }
  EXPECT_EQ(previous, 6u);  // all records are in before the trailer is
}

TEST(RecordStore, EveryFlippedByteIsDetectedAndOnlyThatRecordLost) {
  TempDir dir;
  populate(dir.path());
  const std::string path = dir.path() + "/test-v1.vfstore";
  const std::string good = readAll(path);
  const size_t headerEnd = good.find('\n') + 1;
  const size_t trailerStart = good.rfind("end ");
  for (size_t at = headerEnd; at < trailerStart; ++at) {
    // Every byte of the record header lines (framing), every 5th elsewhere (time: see above).
    size_t lineStart = good.rfind('\n', at - 1) + 1;
    bool inHeaderLine = good.compare(lineStart, 4, "rec ") == 0 && good.find('\n', lineStart) >= at;
    if (!inHeaderLine && at % 5 != 0) continue;
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    writeAll(path, bad);
    auto store = RecordStore::open(dir.path(), "test-v1");
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    RecordStoreStats s = store.value()->stats();
    EXPECT_TRUE(s.rebuilt) << "flip at " << at;
    EXPECT_GE(s.droppedRecords, 1) << at;
    // Records are framed: one damaged record costs that record (a damaged length field may also
    // cost the neighbour it now overlaps), never a wrong payload.
    EXPECT_GE(store.value()->size(), 4u) << "flip at " << at << ": " << s.rebuildReason;
    expectOnlyOriginals(*store.value());
  }
  // A flip inside a payload: exactly one record lost, the reason names the checksum.
  std::string bad = good;
  bad[good.find("the empty key")] = 'T';
  writeAll(path, bad);
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  EXPECT_EQ(store->size(), 5u);
  EXPECT_EQ(store->stats().droppedRecords, 1);
  EXPECT_NE(store->stats().rebuildReason.find("checksum"), std::string::npos) << store->stats().rebuildReason;
  EXPECT_FALSE(store->get("").has_value());
}

TEST(RecordStore, DamagedLengthFieldResynchronisesOnTheNextRecord) {
  TempDir dir;
  VF_ASSERT_OPEN(writer, dir.path(), "test-v1");
  for (int i = 0; i < 10; ++i) writer->put("k" + std::to_string(i), std::string(50, char('a' + i)), 1);
  VF_ASSERT_OK(writer->flush());
  std::string text = readAll(writer->path());
  // Record k3's header: "rec 1 2 50 <sum>" -> claim 5000 payload bytes, swallowing the rest.
  size_t at = text.find("rec 1 2 50 ", text.find("k2"));
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 10, "rec 1 2 5000");
  writeAll(writer->path(), text);
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  EXPECT_EQ(store->size(), 9u);
  EXPECT_FALSE(store->get("k3").has_value());
  EXPECT_EQ(store->get("k9")->payload, std::string(50, 'j'));
  EXPECT_EQ(store->stats().droppedRecords, 1);
}

TEST(RecordStore, OtherVersionsStoresAndForeignFilesAreReplaced) {
  TempDir dir;
  const std::string path = dir.path() + "/test-v1.vfstore";
  struct Case {
    std::string content, reason;
  };
  populate(dir.path());
  std::string valid = readAll(path);
  std::string otherVersion = valid, otherStore = valid;
  otherVersion.replace(0, 9, "vfstore 2");
  otherStore.replace(0, 17, "vfstore 1 plans-1");
  std::string withJunk = valid + "junk after the trailer\n";
  std::string dupRecord = valid;
  size_t second = valid.find("\nrec ", valid.find('\n') + 1) + 1;
  dupRecord.insert(valid.find('\n') + 1, valid.substr(valid.find('\n') + 1, second - valid.find('\n') - 1));
  const std::vector<Case> cases = {
      {"", "empty file"},
      {std::string("\x7f" "ELF\0\0\x01 binary junk\n", 20), "bad header"},
      {"verifuse-tuning-db 1\nend 0\n", "bad header"},  // the previous tuning DB format
      {otherVersion, "format version 2, expected 1"},
      {otherStore, "store 'plans-1', expected 'test-v1'"},
      {withJunk, "bad checksum or framing"},
      {dupRecord, "trailer says 6 records, found 7"},
  };
  for (const Case& c : cases) {
    writeAll(path, c.content);
    VF_ASSERT_OPEN(store, dir.path(), "test-v1");
    EXPECT_TRUE(store->stats().rebuilt) << c.reason;
    EXPECT_NE(store->stats().rebuildReason.find(c.reason), std::string::npos) << store->stats().rebuildReason;
    if (c.content == withJunk || c.content == dupRecord) {
      EXPECT_EQ(store->size(), 6u) << c.reason;  // every valid record kept
    } else {
      EXPECT_EQ(store->size(), 0u) << c.reason;  // another format's records are not trusted
      EXPECT_EQ(readAll(path), "vfstore 1 test-v1\nend 0\n");
    }
  }
}

TEST(RecordStore, UnusableDirectoryOrNameIsAnErrorNotACrash) {
  TempDir dir;
  std::string file = dir.path() + "/not-a-dir";
  writeAll(file, "x");
  EXPECT_FALSE(RecordStore::open(file, "test-v1").isOk());             // a file where the dir should be
  EXPECT_FALSE(RecordStore::open(file + "/sub", "test-v1").isOk());    // below a file
  EXPECT_FALSE(RecordStore::open("/proc/verifuse-no-such-dir", "test-v1").isOk());
  EXPECT_FALSE(RecordStore::open("", "test-v1").isOk());
  for (const char* name : {"", ".hidden", "a/b", "a b", "tab\t"}) {
    auto s = RecordStore::open(dir.path(), name);
    ASSERT_FALSE(s.isOk()) << name;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  }
  // A directory where the store's file should be: open fails (it cannot read or replace it).
  fs::create_directories(dir.path() + "/test-v1.vfstore");
  auto s = RecordStore::open(dir.path(), "test-v1");
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("Is a directory"), std::string::npos) << s.status().toString();
}

TEST(RecordStore, DirectoryRemovedUnderAnOpenStoreMakesFlushFail) {
  TempDir dir;
  std::string sub = dir.path() + "/sub";
  VF_ASSERT_OPEN(store, sub, "test-v1");
  fs::remove_all(sub);
  writeAll(sub, "now a file");
  store->put("k", "v");
  Status s = store->flush();
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(store->get("k")->payload, "v");  // still usable in memory
}

TEST(RecordStore, NewerRecordWinsWhateverTheFlushOrder) {
  TempDir dir;
  VF_ASSERT_OPEN(a, dir.path(), "test-v1");
  VF_ASSERT_OPEN(b, dir.path(), "test-v1");
  a->put("k", "from a, newer", 200);
  b->put("k", "from b, older", 100);
  VF_ASSERT_OK(a->flush());
  VF_ASSERT_OK(b->flush());  // b merges and keeps a's newer record
  EXPECT_EQ(b->get("k")->payload, "from a, newer");
  VF_ASSERT_OPEN(c, dir.path(), "test-v1");
  EXPECT_EQ(c->get("k")->created, 200);
  // The other order too.
  a->put("j", "from a, older", 100);
  b->put("j", "from b, newer", 200);
  VF_ASSERT_OK(b->flush());
  VF_ASSERT_OK(a->flush());
  VF_ASSERT_OPEN(d, dir.path(), "test-v1");
  EXPECT_EQ(d->get("j")->payload, "from b, newer");
  // A tie keeps the flushing writer's record; a reader then follows the file.
  a->put("t", "a", 300);
  b->put("t", "b", 300);
  VF_ASSERT_OK(a->flush());
  VF_ASSERT_OK(b->flush());
  VF_ASSERT_OK(a->reload());
  EXPECT_EQ(a->get("t")->payload, "b");
}

TEST(RecordStore, AMissSeesWhatAnotherWriterFlushed) {
  TempDir dir;
  VF_ASSERT_OPEN(reader, dir.path(), "test-v1");
  VF_ASSERT_OPEN(writer, dir.path(), "test-v1");
  EXPECT_FALSE(reader->get("k").has_value());
  writer->put("k", "v");
  VF_ASSERT_OK(writer->flush());
  ASSERT_TRUE(reader->get("k").has_value());
  EXPECT_EQ(reader->stats().reloads, 1);
  EXPECT_FALSE(reader->get("other").has_value());  // file unchanged: no second read
  EXPECT_EQ(reader->stats().reloads, 1);
  // Unflushed puts survive a reload.
  reader->put("mine", "x");
  writer->put("theirs", "y");
  VF_ASSERT_OK(writer->flush());
  VF_ASSERT_OK(reader->reload());
  EXPECT_TRUE(reader->contains("mine"));
  EXPECT_TRUE(reader->contains("theirs"));
  VF_ASSERT_OK(reader->flush());
  VF_ASSERT_OPEN(c, dir.path(), "test-v1");
  EXPECT_EQ(c->size(), 3u);
}

TEST(RecordStore, ThreadsWithTheirOwnObjectsLoseNoRecord) {
  TempDir dir;
  constexpr int kThreads = 4, kPerThread = 30;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto store = RecordStore::open(dir.path(), "test-v1");
      if (!store.isOk()) {
        ++errors;
        return;
      }
      for (int i = 0; i < kPerThread; ++i) {
        store.value()->put("t" + std::to_string(t) + "/" + std::to_string(i), std::string(100 + i, 'x'));
        if (!store.value()->flush().isOk()) ++errors;  // one file write per record: most contention
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  EXPECT_FALSE(store->stats().rebuilt) << store->stats().rebuildReason;
  EXPECT_EQ(store->size(), size_t(kThreads * kPerThread));
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(RecordStore, ThreadsSharingOneObject) {
  TempDir dir;
  VF_ASSERT_OPEN(store, dir.path(), "test-v1", RecordStoreOptions{256});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        std::string key = "s" + std::to_string(t * 100 + i);
        std::string payload(i % 2 ? 1000 : 10, char('a' + t));  // odd ones go to blobs
        store->put(key, payload);
        auto r = store->get(key);
        if (!r || r->payload != payload) ++wrong;
        if (i % 5 == 0 && !store->flush().isOk()) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  VF_ASSERT_OK(store->flush());
  VF_ASSERT_OPEN(reread, dir.path(), "test-v1", RecordStoreOptions{256});
  ASSERT_EQ(reread->size(), 100u);
  for (const std::string& k : reread->keys()) {
    int n = std::stoi(k.substr(1));
    EXPECT_EQ(reread->get(k)->payload, std::string(n % 100 % 2 ? 1000 : 10, char('a' + n / 100))) << k;
  }
}

// Writers and readers in separate processes (forked before any thread starts), big payloads
// included: every process's records survive, and a reader only ever sees complete payloads.
TEST(RecordStore, SeveralProcessesMergeUnderTheLock) {
  TempDir dir;
  constexpr int kProcs = 4, kPerProc = 20;
  // No grace period: replaced blobs go at once, so readers meet deleted blobs and must retry.
  const RecordStoreOptions small{512, 0};
  auto payloadOf = [](int p, int i) { return std::string(i % 4 == 0 ? 4000 + i : 40 + i, char('A' + p)); };
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest assertions (they would report into a copy of the parent's state).
      int rc = 0;
      auto store = RecordStore::open(dir.path(), "test-v1", small);
      if (!store.isOk()) ::_exit(10);
      for (int i = 0; i < kPerProc; ++i) {
        store.value()->put("p" + std::to_string(p) + "/" + std::to_string(i), payloadOf(p, i));
        store.value()->put("shared", payloadOf(p, 0), 1000 + i);  // all write it, a blob
        if (!store.value()->flush().isOk()) rc |= 1;
        // Read another process's records (they may not be there yet): complete or absent.
        int q = (p + 1) % kProcs;
        auto r = store.value()->get("p" + std::to_string(q) + "/" + std::to_string(i));
        if (r && r->payload != payloadOf(q, i)) rc |= 2;
        auto s = store.value()->get("shared");
        if (!s || s->payload.size() != 4000 || s->payload.find_first_not_of(s->payload[0]) != std::string::npos) rc |= 4;
      }
      if (store.value()->stats().droppedBlobs != 0 || store.value()->stats().rebuilt) rc |= 8;
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: flush failed, 2: wrong payload, 4: bad shared blob, 8: damage seen";
  }
  VF_ASSERT_OPEN(store, dir.path(), "test-v1", small);
  EXPECT_FALSE(store->stats().rebuilt) << store->stats().rebuildReason;
  EXPECT_EQ(store->size(), size_t(kProcs * kPerProc + 1));
  for (int p = 0; p < kProcs; ++p) {
    for (int i = 0; i < kPerProc; ++i) {
      auto r = store->get("p" + std::to_string(p) + "/" + std::to_string(i));
      ASSERT_TRUE(r.has_value());
      EXPECT_EQ(r->payload, payloadOf(p, i));
    }
  }
  EXPECT_EQ(store->get("shared")->created, 1000 + kPerProc - 1);
  // Only the blobs the index names are left (5 per process plus the shared one).
  int blobs = 0;
  for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) {
    ++blobs;
    EXPECT_EQ(e.path().extension(), ".blob") << e.path();
  }
  EXPECT_EQ(blobs, kProcs * kPerProc / 4 + 1);
}

TEST(RecordStore, HugePayloadLivesInABlobAndIsReadOnDemand) {
  TempDir dir;
  std::string huge(24u << 20, '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < huge.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(&huge[i], &v, 8);
  }
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1");
    store->put("plan", huge, 5);
    store->put("small", "s", 5);
    VF_ASSERT_OK(store->flush());
    EXPECT_TRUE(store->get("plan")->payload == huge);
  }
  // The index stays small; the payload is in one blob file.
  EXPECT_LT(fs::file_size(dir.path() + "/test-v1.vfstore"), 400u);
  std::vector<fs::path> blobs;
  for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) blobs.push_back(e.path());
  ASSERT_EQ(blobs.size(), 1u);
  EXPECT_GT(fs::file_size(blobs[0]), huge.size());
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1");
    auto r = store->get("plan");
    ASSERT_TRUE(r.has_value());
    EXPECT_TRUE(r->payload == huge);
    EXPECT_EQ(r->created, 5);
  }
  // One flipped byte in the blob: a miss, counted, never a wrong payload.
  {
    std::fstream f(blobs[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(blobs[0]) - 12345));
    f.put('\x5a' ^ huge[huge.size() - 12345]);
  }
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1", noGrace);
    EXPECT_FALSE(store->get("plan").has_value());
    EXPECT_EQ(store->stats().droppedBlobs, 1);
    ASSERT_EQ(store->stats().damage.size(), 1u);
    EXPECT_NE(store->stats().damage[0].find("bad checksum"), std::string::npos) << store->stats().damage[0];
    EXPECT_FALSE(store->stats().rebuilt);  // the index is intact
    EXPECT_EQ(store->get("small")->payload, "s");
    // The caller recomputes and stores it again: a new blob replaces the damaged one.
    store->put("plan", "smaller now", 6);
    VF_ASSERT_OK(store->flush());
  }
  EXPECT_TRUE(fs::is_empty(dir.path() + "/test-v1.blobs"));
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  EXPECT_EQ(store->get("plan")->payload, "smaller now");
}

TEST(RecordStore, MissingOrTruncatedBlobIsAMissAndDroppedAtTheNextFlush) {
  TempDir dir;
  const RecordStoreOptions small{16};
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1", small);
    store->put("a", std::string(100, 'a'), 1);
    store->put("b", std::string(100, 'b'), 1);
    VF_ASSERT_OK(store->flush());
  }
  std::vector<fs::path> blobs;
  for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) blobs.push_back(e.path());
  ASSERT_EQ(blobs.size(), 2u);
  VF_ASSERT_OPEN(store, dir.path(), "test-v1", small);  // reads the index only
  fs::remove(blobs[0]);                                          // one blob gone
  writeAll(blobs[1].string(), readAll(blobs[1].string()).substr(0, 60));  // the other cut short
  EXPECT_FALSE(store->get("a").has_value());
  EXPECT_FALSE(store->get("b").has_value());
  EXPECT_EQ(store->stats().droppedBlobs, 2);
  // A new writer finds both references broken when it flushes, and drops them from the index.
  VF_ASSERT_OPEN(other, dir.path(), "test-v1", small);
  other->put("c", "inline", 1);
  VF_ASSERT_OK(other->flush());
  EXPECT_EQ(other->stats().droppedBlobs, 2);
  VF_ASSERT_OPEN(last, dir.path(), "test-v1", small);
  EXPECT_EQ(last->keys(), std::vector<std::string>{"c"});
  EXPECT_FALSE(last->stats().rebuilt);
}

TEST(RecordStore, AFailedBlobReadIsAMissAndNeverDropsTheRecord) {
  // A blob that cannot be read for a moment (here: moved away and back) against an unchanged
  // index: get() misses, but the record stays, in memory and in the file this object next writes.
  TempDir dir;
  const RecordStoreOptions small{16};
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1", small);
    store->put("big", std::string(100, 'b'), 1);
    VF_ASSERT_OK(store->flush());
  }
  std::vector<fs::path> blobs;
  for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) blobs.push_back(e.path());
  ASSERT_EQ(blobs.size(), 1u);
  VF_ASSERT_OPEN(store, dir.path(), "test-v1", small);
  fs::rename(blobs[0], dir.path() + "/aside");
  EXPECT_FALSE(store->get("big").has_value());
  EXPECT_EQ(store->stats().droppedBlobs, 1);
  EXPECT_TRUE(store->contains("big"));
  fs::rename(dir.path() + "/aside", blobs[0]);
  store->put("other", "x", 2);
  VF_ASSERT_OK(store->flush());  // the index did not change: no merge, written from memory
  EXPECT_EQ(store->get("big")->payload, std::string(100, 'b'));
  VF_ASSERT_OPEN(again, dir.path(), "test-v1", small);
  EXPECT_EQ(again->keys(), (std::vector<std::string>{"big", "other"}));
  EXPECT_EQ(again->get("big")->payload, std::string(100, 'b'));
}

TEST(RecordStore, ReplacedBlobsOutliveTheGracePeriodOnly) {
  TempDir dir;
  VF_ASSERT_OPEN(reader, dir.path(), "test-v1", RecordStoreOptions{16});
  VF_ASSERT_OPEN(writer, dir.path(), "test-v1", RecordStoreOptions{16});
  writer->put("k", std::string(100, '1'), 1);
  VF_ASSERT_OK(writer->flush());
  ASSERT_TRUE(reader->contains("k") || reader->get("k").has_value());
  writer->put("k", std::string(100, '2'), 2);
  VF_ASSERT_OK(writer->flush());
  auto count = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) n += e.path().extension() == ".blob";
    return n;
  };
  EXPECT_EQ(count(), 2);  // the first blob is kept for readers of the older index
  // Once older than the grace period it goes at the next flush.
  for (const auto& e : fs::directory_iterator(dir.path() + "/test-v1.blobs")) {
    struct timespec times[2] = {{RecordStore::nowSeconds() - 3600, 0}, {RecordStore::nowSeconds() - 3600, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, e.path().c_str(), times, 0), 0);
  }
  writer->put("other", "x", 3);
  VF_ASSERT_OK(writer->flush());
  EXPECT_EQ(count(), 1);
  EXPECT_EQ(reader->get("k")->payload, std::string(100, '2'));
}

TEST(RecordStore, AReaderFollowsABlobReplacedByAnotherWriter) {
  TempDir dir;
  const RecordStoreOptions small{16, 0};
  VF_ASSERT_OPEN(reader, dir.path(), "test-v1", small);
  VF_ASSERT_OPEN(writer, dir.path(), "test-v1", small);
  writer->put("k", std::string(100, '1'), 1);
  VF_ASSERT_OK(writer->flush());
  EXPECT_EQ(reader->get("k")->payload, std::string(100, '1'));
  writer->put("k", std::string(100, '2'), 2);
  VF_ASSERT_OK(writer->flush());  // deletes the first blob
  auto r = reader->get("k");      // its blob is gone: it re-reads the index and the new blob
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->payload, std::string(100, '2'));
  EXPECT_EQ(reader->stats().droppedBlobs, 0);
}

TEST(RecordStore, StaleTempFilesOfACrashedWriterAreRemovedByTheNextFlush) {
  TempDir dir;
  VF_ASSERT_OPEN(store, dir.path(), "test-v1", RecordStoreOptions{16});
  fs::create_directories(dir.path() + "/test-v1.blobs");
  writeAll(dir.path() + "/.test-v1.vfstore.tmp.99999.0", "vfstore 1 test-v1\nrec 1");
  writeAll(dir.path() + "/test-v1.blobs/.tmp.99999.1", "vfblob 1 1 100");
  writeAll(dir.path() + "/other.txt", "not ours");
  store->put("k", std::string(100, 'k'));
  VF_ASSERT_OK(store->flush());
  std::set<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir.path())) {
    if (e.is_regular_file()) files.insert(fs::relative(e.path(), dir.path()).string());
  }
  ASSERT_EQ(files.size(), 4u);
  EXPECT_TRUE(files.count("test-v1.vfstore"));
  EXPECT_TRUE(files.count("test-v1.vfstore.lock"));
  EXPECT_TRUE(files.count("other.txt"));
}

TEST(RecordStore, LoadOfAThousandRecords) {
  TempDir dir;
  constexpr int kRecords = 1000;
  auto payload = [](int i) { return std::string(2000, char('a' + i % 26)) + std::to_string(i); };
  {
    VF_ASSERT_OPEN(store, dir.path(), "test-v1");
    for (int i = 0; i < kRecords; ++i) store->put("key/" + std::to_string(i), payload(i), i);
    auto t0 = std::chrono::steady_clock::now();
    VF_ASSERT_OK(store->flush());
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ measure  ] flush of %d records x 2 kB (%.1f MB): %.2f ms\n", kRecords,
                fs::file_size(store->path()) / 1e6, ms);
  }
  auto t0 = std::chrono::steady_clock::now();
  VF_ASSERT_OPEN(store, dir.path(), "test-v1");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ measure  ] open (load) of %d records: %.2f ms\n", kRecords, ms);
  ASSERT_EQ(store->size(), size_t(kRecords));
  EXPECT_FALSE(store->stats().rebuilt);
  for (int i = 0; i < kRecords; i += 97) EXPECT_EQ(store->get("key/" + std::to_string(i))->payload, payload(i));
}

TEST(Hash, Fnv1a64KnownValuesAndChaining) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(fnv1a64("bar", fnv1a64("foo")), fnv1a64("foobar"));
  EXPECT_EQ(hex16(0xabcull), "0000000000000abc");
}

}  // namespace
}  // namespace verifuse::support
