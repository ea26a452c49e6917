// Proof cache fault tolerance (issue 7): every truncation, random byte damage, foreign and oversized
// entries, stale temp files from a crashed writer, a directory where the entry should be, and many
// writers and readers (threads and processes) on one directory. Each fault is a miss (and counted
// as corrupt where the file exists), never a crash and never a wrong verdict; the next store
// rebuilds the entry.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
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

TEST_F(ProofCacheFaultTest, EveryTruncationIsAMissAndRebuilt) {
  ProofCache cache(dir_.string());
  Obligation ob = obligation(1);
  Verdict v = refuted(1);
  ASSERT_TRUE(cache.store(ob, v).isOk());
  const fs::path path = cache.pathFor(ob);
  const std::string good = read(path);
  ASSERT_GT(good.size(), 40u);
  for (size_t len = 0; len < good.size(); ++len) {
    write(path, good.substr(0, len));
    uint64_t corrupt = cache.stats().corrupt;
    EXPECT_FALSE(cache.lookup(ob).has_value()) << "prefix of " << len << " bytes accepted";
    EXPECT_EQ(cache.stats().corrupt, corrupt + 1) << len;
  }
  ASSERT_TRUE(cache.store(ob, v).isOk());  // rebuilt
  EXPECT_EQ(read(path), good);
  std::optional<Verdict> hit = cache.lookup(ob);
  ASSERT_TRUE(hit.has_value());
  expectSame(*hit, v);
}

TEST_F(ProofCacheFaultTest, RandomByteDamageIsNeverAccepted) {
  ProofCache cache(dir_.string());
  Obligation ob = obligation(2);
  Verdict v = refuted(2);
  ASSERT_TRUE(cache.store(ob, v).isOk());
  const fs::path path = cache.pathFor(ob);
  const std::string good = read(path);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
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
    write(path, bad);
    std::optional<Verdict> got = cache.lookup(ob);
    // FNV-1a over the body with the exact trailer: a damaged entry that still parses would have
    // to be an identical verdict (e.g. damage confined to a field that does not change meaning
    // cannot happen: every byte is under the checksum).
    EXPECT_FALSE(got.has_value()) << "trial " << trial << " accepted a damaged entry";
  }
  EXPECT_GE(cache.stats().corrupt, 490u);
}

TEST_F(ProofCacheFaultTest, ForeignOversizedAndBinaryEntriesAreMisses) {
  ProofCache cache(dir_.string());
  Obligation a = obligation(3), b = obligation(4);
  ASSERT_NE(ProofCache::keyFor(a), ProofCache::keyFor(b));
  ASSERT_TRUE(cache.store(a, refuted(3)).isOk());
  // A well-formed, checksummed entry of another obligation copied over b's path (a stale or
  // misplaced file): its key and canonical form do not match b, so it is not b's verdict.
  fs::copy_file(cache.pathFor(a), cache.pathFor(b));
  EXPECT_FALSE(cache.lookup(b).has_value());
  // 8 MiB of zeros and binary noise.
  write(cache.pathFor(b), std::string(8u << 20, '\0'));
  EXPECT_FALSE(cache.lookup(b).has_value());
  std::string noise(1u << 16, '\0');
  std::mt19937 rng(3);
  for (char& c : noise) c = static_cast<char>(rng());
  write(cache.pathFor(b), noise);
  EXPECT_FALSE(cache.lookup(b).has_value());
  // Only the magic line, and the magic line plus a valid-looking trailer.
  write(cache.pathFor(b), "verifuse-proof v1\n");
  EXPECT_FALSE(cache.lookup(b).has_value());
  write(cache.pathFor(b), "verifuse-proof v1\nend\t0000000000000000\n");
  EXPECT_FALSE(cache.lookup(b).has_value());
  EXPECT_EQ(cache.stats().corrupt, 5u);
  // a is untouched and b is rebuilt by the next store.
  ASSERT_TRUE(cache.lookup(a).has_value());
  ASSERT_TRUE(cache.store(b, proved()).isOk());
  std::optional<Verdict> hit = cache.lookup(b);
  ASSERT_TRUE(hit.has_value());
  EXPECT_TRUE(hit->proved());
}

TEST_F(ProofCacheFaultTest, DirectoryInPlaceOfEntryIsAMissAndStoreReportsError) {
  ProofCache cache(dir_.string());
  Obligation ob = obligation(5);
  fs::create_directories(cache.pathFor(ob));  // a directory named like the entry
  EXPECT_FALSE(cache.lookup(ob).has_value());
  Status s = cache.store(ob, proved());  // rename over a directory fails: an error value
  EXPECT_FALSE(s.isOk());
  EXPECT_FALSE(cache.lookup(ob).has_value());
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "temp file left: " << e.path();
  }
}

TEST_F(ProofCacheFaultTest, StaleTempFilesFromACrashedWriterAreIgnored) {
  ProofCache cache(dir_.string());
  Obligation ob = obligation(6);
  fs::create_directories(dir_);
  // What a writer killed between write and rename leaves: a half-written temp file.
  write(cache.pathFor(ob) + ".tmp.99999.1.0", "verifuse-proof v1\nkey\t");
  EXPECT_FALSE(cache.lookup(ob).has_value());
  EXPECT_EQ(cache.stats().corrupt, 0u) << "a temp file is not the entry";
  ASSERT_TRUE(cache.store(ob, proved()).isOk());
  ASSERT_TRUE(cache.lookup(ob).has_value());
}

// Many writers (separate ProofCache objects, as separate processes would have) store the same
// entries while readers look them up: a reader sees either no entry or a complete, correct one.
TEST_F(ProofCacheFaultTest, ConcurrentWritersAndReadersInThreads) {
  constexpr int kEntries = 4, kWriters = 4, kReaders = 4, kRounds = 150;
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
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".proof") << "temp file left behind: " << e.path();
  }
  EXPECT_EQ(files, kEntries);
  for (int i = 0; i < kEntries; ++i) {
    std::optional<Verdict> v = cache.lookup(obs[i]);
    ASSERT_TRUE(v.has_value());
    expectSame(*v, refuted(100 + i));
  }
}

// The same across processes (fork before any thread starts; the children only touch files).
TEST_F(ProofCacheFaultTest, ConcurrentWriterProcesses) {
  constexpr int kProcs = 4, kRounds = 100, kEntries = 3;
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
