// Proof cache fault tolerance (issue 7, on the record store since issue 15): truncation, random byte
// damage, foreign and oversized entries, stale temp files from a crashed writer, a directory where
// the store file should be, and many writers and readers (threads and processes) on one directory.
// Each fault is a miss (counted as corrupt where a record is lost), never a crash and never a wrong
// verdict; opening the damaged file rebuilds it from its valid records and the next store adds the
// lost entry back. The store's own fault matrix: tests/cpp/support/record_store_test.cpp.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "verifuse/verify/proof_cache.h"

namespace verifuse::verify {
namespace {

namespace fs = std::filesystem;

class ProofCacheFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("verifuse-proof-cache-fault-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Obligations are only hashed and compared here; nothing is solved.
  static Obligation obligation(int i) {
    ObligationBuilder ob("fault-" + std::to_string(i));
    Expr a = ob.var("a"), b = ob.var("b");
    ob.prove("out", a * b + Expr(i), b * a + Expr(i));
    return ob.build();
  }
  static Verdict refuted(int i) {
    Verdict v;
    v.kind = VerdictKind::Refuted;
    v.messageClass = MessageClass::ValueMismatch;
    v.detail = "detail with\ttab and\nnewline " + std::to_string(i);
    v.counterexample.goal = "out";
    v.counterexample.values = {{"a", std::to_string(i)}, {"b", "-1"}};
    v.seconds = 0.25;
    return v;
  }
  static Verdict proved() {
    Verdict v;
    v.kind = VerdictKind::Proved;
    v.seconds = 0.5;
    return v;
  }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static void write(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
  }
  static void expectSame(const Verdict& got, const Verdict& want) {
    EXPECT_EQ(got.kind, want.kind);
    EXPECT_EQ(got.messageClass, want.messageClass);
    EXPECT_EQ(got.detail, want.detail);
    EXPECT_EQ(got.counterexample.goal, want.counterexample.goal);
    EXPECT_EQ(got.counterexample.values, want.counterexample.values);
    EXPECT_TRUE(got.fromCache);
  }

  fs::path dir_;
};

TEST_F(ProofCacheFaultTest, TruncationIsAMissOrTheRightVerdictAndRebuilt) {
  Obligation ob = obligation(1);
  Verdict v = refuted(1);
  std::string path;
  {
    ProofCache cache(dir_.string());
    ASSERT_TRUE(cache.store(ob, v).isOk());
    path = cache.path();
  }
  const std::string good = read(path);
  ASSERT_GT(good.size(), 200u);
  const size_t recordEnd = good.rfind("end 1\n");  // a prefix holding the whole record keeps it
  // Every cut near a line boundary, a stride through the rest (each open repairs the file: two
  // fsyncs, so every length would take seconds on a loaded machine).
  std::set<size_t> lengths;
  for (size_t i = 0; i < good.size(); ++i) {
    if (i % 5 == 0 || good[i] == '\n') lengths.insert(i);
    if (good[i] == '\n' && i + 1 < good.size()) lengths.insert(i + 1);
  }
  for (size_t len : lengths) {
    write(path, good.substr(0, len));
    ProofCache cache(dir_.string());
    ASSERT_TRUE(cache.status().isOk()) << cache.status().toString();
    EXPECT_TRUE(cache.storeStats().rebuilt) << len;
    std::optional<Verdict> got = cache.lookup(ob);
    if (len < recordEnd) {
      EXPECT_FALSE(got.has_value()) << "prefix of " << len << " bytes accepted";
    } else {
      ASSERT_TRUE(got.has_value()) << len;
      expectSame(*got, v);
    }
  }
  ProofCache cache(dir_.string());
  ASSERT_TRUE(cache.store(ob, v).isOk());  // rebuilt
  ProofCache again(dir_.string());
  std::optional<Verdict> hit = again.lookup(ob);
  ASSERT_TRUE(hit.has_value());
  expectSame(*hit, v);
  EXPECT_FALSE(again.storeStats().rebuilt);
}

TEST_F(ProofCacheFaultTest, RandomByteDamageNeverYieldsAWrongVerdict) {
  Obligation ob = obligation(2);
  Verdict v = refuted(2);
  std::string path;
  {
    ProofCache cache(dir_.string());
    ASSERT_TRUE(cache.store(ob, v).isOk());
    path = cache.path();
  }
  const std::string good = read(path);
  std::mt19937 rng(7);
  int trials = 0, misses = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::string bad = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % bad.size();
      switch (rng() % 3) {
        case 0: bad[at] = static_cast<char>(bad[at] ^ (1 + rng() % 255)); break;  // flip
        case 1: bad.erase(at, 1 + rng() % 8); break;                               // drop bytes
        default: bad.insert(at, 1, static_cast<char>(rng() % 256)); break;         // insert a byte
      }
      if (bad.empty()) bad = "x";
    }
    if (bad == good) continue;
    ++trials;
    write(path, bad);
    ProofCache cache(dir_.string());
    std::optional<Verdict> got = cache.lookup(ob);
    // Every byte of the record is under its checksum: damage there is a miss. Damage confined to
    // the header line or the trailer may leave the record intact: then it is the right verdict.
    if (got) {
      expectSame(*got, v);
    } else {
      ++misses;
    }
    EXPECT_TRUE(cache.storeStats().rebuilt) << "trial " << trial;
  }
  EXPECT_GE(misses, trials * 3 / 4) << "the record spans most of the file";
}

TEST_F(ProofCacheFaultTest, ForeignOversizedAndBinaryEntriesAreMisses) {
  Obligation a = obligation(3), b = obligation(4);
  ASSERT_NE(ProofCache::keyFor(a), ProofCache::keyFor(b));
  {
    ProofCache cache(dir_.string());
    ASSERT_TRUE(cache.store(a, refuted(3)).isOk());
  }
  // A well-formed, checksummed record of another obligation under b's key (a stale record, or a
  // hash collision): its canonical form does not match b, so it is not b's verdict.
  {
    auto store = support::RecordStore::open(dir_.string(), ProofCache::kStoreName);
    ASSERT_TRUE(store.isOk());
    std::optional<support::Record> ra = store.value()->get(ProofCache::keyFor(a));
    ASSERT_TRUE(ra.has_value());
    store.value()->put(ProofCache::keyFor(b), ra->payload);
    ASSERT_TRUE(store.value()->flush().isOk());
  }
  {
    ProofCache cache(dir_.string());
    EXPECT_FALSE(cache.lookup(b).has_value());
    EXPECT_EQ(cache.stats().corrupt, 1u);
    ASSERT_TRUE(cache.lookup(a).has_value());  // a is untouched
  }
  // The whole file replaced by 8 MiB of zeros, binary noise, only a header, a header and trailer.
  std::string noise(1u << 16, '\0');
  std::mt19937 rng(3);
  for (char& c : noise) c = static_cast<char>(rng());
  const std::string path = (dir_ / "proofs-v2.vfstore").string();
  for (const std::string& junk : {std::string(8u << 20, '\0'), noise, std::string("vfstore 1 proofs-v2\n"),
                                  std::string("vfstore 1 proofs-v2\nend 0\n")}) {
    write(path, junk);
    ProofCache cache(dir_.string());
    EXPECT_FALSE(cache.lookup(a).has_value());
    EXPECT_FALSE(cache.lookup(b).has_value());
    ASSERT_TRUE(cache.store(a, refuted(3)).isOk());  // rebuilt
  }
  // A verdict too big to keep inline (a 1 MB counterexample) goes to a blob file and back.
  Verdict big = refuted(4);
  big.detail = std::string(1u << 20, 'd');
  {
    ProofCache cache(dir_.string());
    ASSERT_TRUE(cache.store(b, big).isOk());
  }
  ProofCache cache(dir_.string());
  std::optional<Verdict> hit = cache.lookup(b);
  ASSERT_TRUE(hit.has_value());
  expectSame(*hit, big);
  EXPECT_TRUE(fs::exists(dir_ / "proofs-v2.blobs"));
  EXPECT_LT(fs::file_size(path), 4096u);
  ASSERT_TRUE(cache.lookup(a).has_value());
}

TEST_F(ProofCacheFaultTest, DirectoryInPlaceOfTheStoreFileIsAMissAndStoreReportsError) {
  fs::create_directories(dir_ / "proofs-v2.vfstore");  // a directory named like the store's file
  ProofCache cache(dir_.string());
  EXPECT_FALSE(cache.status().isOk());
  Obligation ob = obligation(5);
  EXPECT_FALSE(cache.lookup(ob).has_value());
  Status s = cache.store(ob, proved());  // an error value, the verdict itself stands
  EXPECT_FALSE(s.isOk());
  EXPECT_FALSE(cache.lookup(ob).has_value());
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
  }
}

TEST_F(ProofCacheFaultTest, StaleTempFilesFromACrashedWriterAreIgnoredAndRemoved) {
  fs::create_directories(dir_);
  // What a writer killed between write and rename leaves: a half-written temp file.
  const fs::path stale = dir_ / ".proofs-v2.vfstore.tmp.99999.0";
  write(stale, "vfstore 1 proofs-v2\nrec 1 16 ");
  ProofCache cache(dir_.string());
  Obligation ob = obligation(6);
  EXPECT_FALSE(cache.lookup(ob).has_value());
  EXPECT_EQ(cache.stats().corrupt, 0u) << "a temp file is not the store";
  ASSERT_TRUE(cache.store(ob, proved()).isOk());
  EXPECT_FALSE(fs::exists(stale));  // removed under the lock by the flush
  ASSERT_TRUE(cache.lookup(ob).has_value());
}

// Many writers (separate ProofCache objects, as separate processes would have) store the same
// entries while readers look them up: a reader sees either no entry or a complete, correct one.
TEST_F(ProofCacheFaultTest, ConcurrentWritersAndReadersInThreads) {
  // Every store is a durable flush (two fsyncs, serialized by the lock): few rounds suffice.
  constexpr int kEntries = 4, kWriters = 4, kReaders = 4, kRounds = 30;
  std::vector<Obligation> obs;
  for (int i = 0; i < kEntries; ++i) obs.push_back(obligation(100 + i));
  std::atomic<int> wrong{0}, storeErrors{0}, hits{0};
  std::atomic<uint64_t> corrupt{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      ProofCache cache(dir_.string());
      for (int r = 0; r < kRounds; ++r) {
        int i = (r + w) % kEntries;
        if (!cache.store(obs[i], refuted(100 + i)).isOk()) ++storeErrors;
      }
    });
  }
  // Readers keep reading until every writer is done (on a loaded machine they could otherwise
  // finish before the first store), then read each entry once more: those lookups must hit.
  std::atomic<bool> writersDone{false};
  for (int rd = 0; rd < kReaders; ++rd) {
    threads.emplace_back([&, rd] {
      ProofCache cache(dir_.string());
      auto check = [&](int i) {
        std::optional<Verdict> v = cache.lookup(obs[i]);
        if (!v) return;
        ++hits;
        Verdict want = refuted(100 + i);
        if (v->kind != want.kind || v->detail != want.detail || v->counterexample.values != want.counterexample.values)
          ++wrong;
      };
      for (int r = 0; r < kRounds * 2 || !writersDone.load(); ++r) check((r + rd) % kEntries);
      for (int i = 0; i < kEntries; ++i) check(i);
      corrupt += cache.stats().corrupt;
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[static_cast<size_t>(w)].join();
  writersDone = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_GE(hits.load(), kReaders * kEntries);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(storeErrors.load(), 0);
  EXPECT_EQ(corrupt.load(), 0u) << "a reader saw a partially written entry (writes are not atomic)";
  ProofCache cache(dir_.string());
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left behind: " << e.path();
  }
  EXPECT_EQ(cache.storeStats().loaded, kEntries);
  for (int i = 0; i < kEntries; ++i) {
    std::optional<Verdict> v = cache.lookup(obs[i]);
    ASSERT_TRUE(v.has_value());
    expectSame(*v, refuted(100 + i));
  }
}

// The same across processes (fork before any thread starts; the children only touch files).
TEST_F(ProofCacheFaultTest, ConcurrentWriterProcesses) {
  constexpr int kProcs = 4, kRounds = 25, kEntries = 3;
  fs::create_directories(dir_);
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int bad = 0;
      ProofCache cache(dir_.string());
      for (int r = 0; r < kRounds; ++r) {
        int i = (r + p) % kEntries;
        Obligation ob = obligation(200 + i);
        if (!cache.store(ob, refuted(200 + i)).isOk()) bad |= 1;
        std::optional<Verdict> v = cache.lookup(obligation(200 + (r + 1) % kEntries));
        if (v && v->detail != refuted(200 + (r + 1) % kEntries).detail) bad |= 2;
      }
      if (cache.stats().corrupt != 0) bad |= 4;
      ::_exit(bad);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child crashed";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "1: store failed, 2: wrong verdict, 4: saw a partial entry";
  }
  ProofCache cache(dir_.string());
  for (int i = 0; i < kEntries; ++i) {
    std::optional<Verdict> v = cache.lookup(obligation(200 + i));
    ASSERT_TRUE(v.has_value());
    expectSame(*v, refuted(200 + i));
  }
  EXPECT_EQ(cache.stats().corrupt, 0u);
}

}  // namespace
}  // namespace verifuse::verify
