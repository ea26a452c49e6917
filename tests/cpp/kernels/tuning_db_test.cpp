// The tuning database: round trip, damage detection and rebuild, concurrent writers (threads and
// processes), key sensitivity, the timing helper and the N-candidate tuner (failing candidates,
// alternation, persisted decisions). Never asserts on measured times. The record store under it
// has its own fault matrix (tests/cpp/support/record_store_test.cpp).
#include <algorithm>
#include <cctype>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "reference.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/tuning_db.h"
#include "verifuse/support/record_store.h"

namespace verifuse::kernels {
namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "verifuse-tuning-XXXXXX").string();
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

TuningKey key(const std::string& sig, int threads = 4, const std::string& isa = "avx512_core") {
  TuningKey k;
  k.signature = sig;
  k.inputShapes = {{1, 64, 56, 56}};
  k.dtype = "f32";
  k.isa = isa;
  k.threads = threads;
  k.onednnVersion = "3.2.0 (test)";
  k.cpuKernelsIsa = "avx2";
  return k;
}

TuningDecision decision(Engine e, double onednn, double aten, int64_t created = 1700000000) {
  TuningDecision d;
  d.engine = e;
  d.onednnMs = onednn;
  d.atenMs = aten;
  d.created = created;
  return d;
}

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

/// A database in \p dir holding three records, flushed.
void populate(const std::string& dir) {
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir));
  db->record(key("conv;relu"), decision(Engine::kOneDnn, 0.25, 0.5));
  db->record(key("add\twith\ttabs\nand\\newlines"), decision(Engine::kAten, 1.0 / 3.0, 0.1));
  db->record(key("pool"), decision(Engine::kAten, -1.0, 0.75));
  VF_ASSERT_OK(db->flush());
}

TEST(TuningDb, RoundTripKeepsEveryFieldExactly) {
  TempDir dir;
  populate(dir.path());
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_FALSE(db->stats().rebuilt) << db->stats().rebuildReason;
  EXPECT_EQ(db->stats().loaded, 3);
  EXPECT_EQ(db->size(), 3u);
  auto a = db->lookup(key("conv;relu"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->engine, Engine::kOneDnn);
  EXPECT_EQ(a->onednnMs, 0.25);
  EXPECT_EQ(a->atenMs, 0.5);
  EXPECT_EQ(a->created, 1700000000);
  auto b = db->lookup(key("add\twith\ttabs\nand\\newlines"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->onednnMs, 1.0 / 3.0);  // shortest round-trip formatting loses nothing
  EXPECT_EQ(db->lookup(key("pool"))->onednnMs, -1.0);
  EXPECT_FALSE(db->lookup(key("missing")).has_value());
  EXPECT_EQ(db->stats().hits, 3);
  EXPECT_EQ(db->stats().misses, 1);
  // The file is stable: flushing unchanged content writes the same bytes.
  std::string before = readAll(db->path());
  db->record(key("conv;relu"), *a);
  VF_ASSERT_OK(db->flush());
  EXPECT_EQ(readAll(db->path()), before);
  EXPECT_EQ(before.rfind("vfstore 1 tuning-v2\n", 0), 0u);
  EXPECT_EQ(db->path(), dir.path() + "/tuning-v2.vfstore");
}

TEST(TuningDb, FlushWithoutChangesWritesNothing) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  VF_ASSERT_OK(db->flush());
  EXPECT_EQ(db->stats().flushes, 0);
  EXPECT_FALSE(fs::exists(db->path()));
}

TEST(TuningDb, CorruptByteIsDetectedAndTheRestKept) {
  TempDir dir;
  populate(dir.path());
  std::string path = dir.path() + "/tuning-v2.vfstore";
  std::string text = readAll(path);
  size_t at = text.find("conv;relu");
  ASSERT_NE(at, std::string::npos);
  text[at] = 'X';  // flip one byte of one record's key
  writeAll(path, text);
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  TuningDbStats s = db->stats();
  EXPECT_TRUE(s.rebuilt);
  EXPECT_NE(s.rebuildReason.find("checksum"), std::string::npos) << s.rebuildReason;
  EXPECT_EQ(s.droppedRecords, 1);
  EXPECT_EQ(db->size(), 2u);
  EXPECT_FALSE(db->lookup(key("conv;relu")).has_value());
  EXPECT_TRUE(db->lookup(key("pool")).has_value());
  // The file was rewritten at open: the next reader finds it healthy.
  VF_ASSERT_OK_AND_ASSIGN(auto again, TuningDb::open(dir.path()));
  EXPECT_FALSE(again->stats().rebuilt) << again->stats().rebuildReason;
  EXPECT_EQ(again->size(), 2u);
}

TEST(TuningDb, TruncationAnywhereIsDetectedNeverACrash) {
  TempDir dir;
  populate(dir.path());
  std::string path = dir.path() + "/tuning-v2.vfstore";
  const std::string full = readAll(path);
  // Every cut at or next to a line boundary, plus a stride through the middle of lines (each
  // open rewrites and fsyncs the file, so every single length would be slow).
  std::set<size_t> lengths;
  for (size_t i = 0; i < full.size(); i += 13) lengths.insert(i);
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] != '\n') continue;
    for (size_t len : {i, i + 1, i + 2}) {
      if (len < full.size()) lengths.insert(len);
    }
  }
  for (size_t len : lengths) {
    writeAll(path, full.substr(0, len));
    auto db = TuningDb::open(dir.path());
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    EXPECT_TRUE(db.value()->stats().rebuilt) << "length " << len;
    EXPECT_LE(db.value()->size(), 3u);
  }
  writeAll(path, full);
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_FALSE(db->stats().rebuilt);
}

TEST(TuningDb, GarbageAndWrongVersionAreRebuiltFromScratch) {
  TempDir dir;
  std::string path = dir.path() + "/tuning-v2.vfstore";
  writeAll(path, std::string("\x7f" "ELF\0\0\x01 binary junk\n", 20));
  VF_ASSERT_OK_AND_ASSIGN(auto junk, TuningDb::open(dir.path()));
  EXPECT_TRUE(junk->stats().rebuilt);
  EXPECT_NE(junk->stats().rebuildReason.find("header"), std::string::npos);
  EXPECT_EQ(junk->size(), 0u);

  populate(dir.path());
  std::string text = readAll(path);
  text.replace(0, std::string("vfstore 1").size(), "vfstore 2");
  writeAll(path, text);
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_TRUE(db->stats().rebuilt);
  EXPECT_NE(db->stats().rebuildReason.find("version 2"), std::string::npos) << db->stats().rebuildReason;
  EXPECT_EQ(db->size(), 0u);  // records of another format are not trusted
  EXPECT_EQ(readAll(path), "vfstore 1 tuning-v2\nend 0\n");
}

TEST(TuningDb, DuplicatedRecordLineBreaksTheTrailerCount) {
  TempDir dir;
  populate(dir.path());
  std::string path = dir.path() + "/tuning-v2.vfstore";
  std::string text = readAll(path);
  size_t firstRecord = text.find('\n') + 1;
  size_t secondRecord = text.find("\nrec ", firstRecord) + 1;
  text.insert(firstRecord, text.substr(firstRecord, secondRecord - firstRecord));  // a valid line twice
  writeAll(path, text);
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_TRUE(db->stats().rebuilt);
  EXPECT_NE(db->stats().rebuildReason.find("trailer"), std::string::npos) << db->stats().rebuildReason;
  EXPECT_EQ(db->size(), 3u);
}

TEST(TuningDb, UnusableCacheDirIsAnErrorNotACrash) {
  TempDir dir;
  std::string file = dir.path() + "/not-a-dir";
  writeAll(file, "x");
  auto db = TuningDb::open(file);  // a regular file where the directory should be
  ASSERT_FALSE(db.isOk());
  EXPECT_FALSE(TuningDb::open("").isOk());
}

TEST(TuningDb, TwoThreadsWritingKeepEveryRecord) {
  TempDir dir;
  constexpr int kPerThread = 40;
  auto writer = [&](int t) {
    auto db = TuningDb::open(dir.path());
    ASSERT_TRUE(db.isOk());
    for (int i = 0; i < kPerThread; ++i) {
      db.value()->record(key("t" + std::to_string(t) + "/" + std::to_string(i)),
                         decision(Engine::kAten, 1.0, 0.5));
      ASSERT_TRUE(db.value()->flush().isOk());  // one file write per record: maximal contention
    }
  };
  std::thread a(writer, 0), b(writer, 1);
  a.join();
  b.join();
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_FALSE(db->stats().rebuilt) << db->stats().rebuildReason;
  EXPECT_EQ(db->size(), 2u * kPerThread);
  // No temp file is left behind.
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST(TuningDb, ThreadsSharingOneDbObject) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        TuningKey k = key("s" + std::to_string(t * 100 + i));
        db->record(k, decision(Engine::kOneDnn, 0.1, 0.2));
        EXPECT_TRUE(db->lookup(k).has_value());
        if (i % 5 == 0) EXPECT_TRUE(db->flush().isOk());
      }
    });
  }
  for (auto& t : threads) t.join();
  VF_ASSERT_OK(db->flush());
  VF_ASSERT_OK_AND_ASSIGN(auto reread, TuningDb::open(dir.path()));
  EXPECT_EQ(reread->size(), 100u);
}

TEST(TuningDb, SeveralProcessesWritingMergeUnderTheLock) {
  TempDir dir;
  constexpr int kProcs = 4, kPerProc = 20;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Child: no gtest assertions (they would report into a copy of the parent's state).
      int rc = 0;
      auto db = TuningDb::open(dir.path());
      if (!db.isOk()) ::_exit(10);
      for (int i = 0; i < kPerProc; ++i) {
        db.value()->record(key("p" + std::to_string(p) + "/" + std::to_string(i)),
                           decision(Engine::kOneDnn, 0.5, 1.0));
        if (!db.value()->flush().isOk()) rc = 11;
      }
      ::_exit(rc);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_FALSE(db->stats().rebuilt) << db->stats().rebuildReason;
  EXPECT_EQ(db->size(), static_cast<size_t>(kProcs * kPerProc));
}

TEST(TuningDb, MergeKeepsTheNewerMeasurement) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto a, TuningDb::open(dir.path()));
  VF_ASSERT_OK_AND_ASSIGN(auto b, TuningDb::open(dir.path()));
  a->record(key("k"), decision(Engine::kOneDnn, 0.1, 0.2, /*created=*/200));
  VF_ASSERT_OK(a->flush());
  b->record(key("k"), decision(Engine::kAten, 0.3, 0.2, /*created=*/100));  // older, written later
  VF_ASSERT_OK(b->flush());
  EXPECT_EQ(b->lookup(key("k"))->engine, Engine::kOneDnn);  // b now sees a's newer decision
  VF_ASSERT_OK_AND_ASSIGN(auto c, TuningDb::open(dir.path()));
  EXPECT_EQ(c->lookup(key("k"))->created, 200);
}

TEST(TuningKey, EveryComponentChangesTheKey) {
  const TuningKey base = key("conv(in0,const:f32[8,8,3,3])->n0.0");
  std::vector<TuningKey> variants(8, base);
  variants[0].threads = 8;
  variants[1].isa = "avx2";
  variants[2].dtype = "bf16";
  variants[3].onednnVersion = "3.3.0 (test)";
  variants[4].inputShapes = {{2, 64, 56, 56}};
  variants[5].signature += ";aten::relu(n0.0)";
  variants[6].inputShapes = {{1, 64, 56}, {56}};  // same numbers, other split
  variants[7].cpuKernelsIsa = "baseline";          // the own GEMM's AVX2 path vs none
  for (const TuningKey& v : variants) {
    EXPECT_NE(v.canonical(), base.canonical());
    EXPECT_NE(v.shortHash(), base.shortHash());
  }
  EXPECT_EQ(key("x").canonical(), key("x").canonical());
  // Stable across runs and platforms: a golden value.
  EXPECT_EQ(key("x").canonical(),
            "k2;sig=1:x;shapes=13:1[1,64,56,56];dtype=3:f32;isa=11:avx512_core;threads=1:4;"
            "onednn=12:3.2.0 (test);kisa=4:avx2;");
  // Length prefixes make field boundaries unambiguous.
  TuningKey a = key("a;dtype=3:f32"), b = key("a");
  EXPECT_NE(a.canonical(), b.canonical());
}

TEST(TuningKey, ThreadCountAndIsaSeparateDecisions) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  db->record(key("conv", 1), decision(Engine::kAten, 2.0, 1.0));
  db->record(key("conv", 4), decision(Engine::kOneDnn, 0.5, 1.0));
  EXPECT_EQ(db->lookup(key("conv", 1))->engine, Engine::kAten);
  EXPECT_EQ(db->lookup(key("conv", 4))->engine, Engine::kOneDnn);
  EXPECT_FALSE(db->lookup(key("conv", 4, "avx2")).has_value());
}

TEST(TuningKey, ForThisMachineFillsIsaAndVersion) {
  TuningKey k = TuningKey::forThisMachine("sig", {{1, 2}}, "f32", 3);
  EXPECT_EQ(k.isa, capabilities().onednnIsa);
  EXPECT_EQ(k.onednnVersion, onednnVersion());
  EXPECT_EQ(k.threads, 3);
  EXPECT_EQ(k.cpuKernelsIsa, cpu::isaName() + ":" + cpu::kernelsRevision());
  EXPECT_FALSE(k.cpuKernelsIsa.empty());
  // The timed code's revision is a hash of its sources made at build time (cmake/HashSources.cmake),
  // not a hand-set number that an edit can forget to bump.
  const std::string rev = cpu::kernelsRevision();
  EXPECT_EQ(rev.size(), 16u) << rev;
  EXPECT_TRUE(std::all_of(rev.begin(), rev.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }))
      << rev;
}

TEST(Timing, TimeCallableCountsRunsAndOrdersStatistics) {
  int calls = 0;
  const int64_t before = timingCallCount();
  VF_ASSERT_OK_AND_ASSIGN(TimingResult r, timeCallable([&] { ++calls; return Status::ok(); }, 3, 11));
  EXPECT_EQ(calls, 14);
  EXPECT_EQ(r.repeats, 11);
  EXPECT_LE(r.minMs, r.medianMs);
  EXPECT_LE(r.medianMs, r.p90Ms);
  EXPECT_GE(r.minMs, 0.0);
  EXPECT_EQ(timingCallCount(), before + 1);
  EXPECT_FALSE(timeCallable([] { return Status::ok(); }, 0, 0).isOk());
}

TEST(Timing, ErrorsAreReturned) {
  int calls = 0;
  auto r = timeCallable([&] { return ++calls == 2 ? unimplemented("no kernel") : Status::ok(); }, 1, 5);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(calls, 2);
}

TEST(Timing, TuneOrLookupTimesOnceThenReadsTheDatabase) {
  TempDir dir;
  auto busy = [](int n) {
    return [n] {
      volatile double x = 0;
      for (int i = 0; i < n; ++i) x = x + 1.0;
      return Status::ok();
    };
  };
  const int64_t t0 = timingCallCount();
  {
    VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
    VF_ASSERT_OK_AND_ASSIGN(TuningDecision d, tuneOrLookup(*db, key("p"), busy(1000), busy(1000), 1, 3));
    EXPECT_GE(d.onednnMs, 0.0);
    EXPECT_GE(d.atenMs, 0.0);
    EXPECT_EQ(d.engine, d.onednnMs < d.atenMs ? Engine::kOneDnn : Engine::kAten);
    EXPECT_EQ(timingCallCount(), t0 + 2);
    // oneDNN cannot run it: ATen, with the oneDNN time marked as missing.
    VF_ASSERT_OK_AND_ASSIGN(TuningDecision e, tuneOrLookup(*db, key("q"), [] { return unimplemented("x"); },
                                                          busy(10), 0, 2));
    EXPECT_EQ(e.engine, Engine::kAten);
    EXPECT_LT(e.onednnMs, 0.0);
    VF_ASSERT_OK(db->flush());
  }
  // A "second compile": a fresh process-level view of the same cache_dir times nothing.
  const int64_t t1 = timingCallCount();
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision again, tuneOrLookup(*db, key("p"), busy(1), busy(1)));
  VF_ASSERT_OK(tuneOrLookup(*db, key("q"), busy(1), busy(1)).status());
  EXPECT_EQ(timingCallCount(), t1);
  EXPECT_EQ(db->stats().hits, 2);
  (void)again;
  // A failing ATen run is an error, not a decision.
  EXPECT_FALSE(tuneOrLookup(*db, key("r"), busy(1), [] { return internalError("boom"); }).isOk());
}

// ---- the N-candidate tuner -------------------------------------------------------------------------

Candidate noop(const std::string& name, std::vector<std::string>* calls = nullptr) {
  return {name, [name, calls] {
            if (calls) calls->push_back(name);
            return Status::ok();
          }};
}

Candidate sleeper(const std::string& name, int micros, std::vector<std::string>* calls = nullptr) {
  return {name, [name, micros, calls] {
            if (calls) calls->push_back(name);
            std::this_thread::sleep_for(std::chrono::microseconds(micros));
            return Status::ok();
          }};
}

Candidate failing(const std::string& name, Status s, int okRuns = 0, std::vector<std::string>* calls = nullptr) {
  auto runs = std::make_shared<int>(0);
  return {name, [name, s, okRuns, runs, calls] {
            if (calls) calls->push_back(name);
            return (*runs)++ < okRuns ? Status::ok() : s;
          }};
}

void expectSameDecision(const TuningDecision& a, const TuningDecision& b) {
  EXPECT_EQ(a.chosen, b.chosen);
  EXPECT_EQ(a.medianMs, b.medianMs);
  EXPECT_EQ(a.failures, b.failures);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.engine, b.engine);
  EXPECT_EQ(a.onednnMs, b.onednnMs);
  EXPECT_EQ(a.atenMs, b.atenMs);
}

TEST(Tuner, PicksTheFastestRunnableCandidateAndRecordsTheOthers) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  const int64_t t0 = timingCallCount();
  VF_ASSERT_OK_AND_ASSIGN(
      TuningDecision d,
      tuneOrLookup(*db, key("mlp"),
                   {sleeper("onednn", 3000), noop("gemm"), failing("rowwise", unimplemented("no AVX2 path")),
                    sleeper("aten", 3000)},
                   1, 3));
  EXPECT_EQ(timingCallCount(), t0 + 4);  // one timing per candidate
  EXPECT_EQ(d.chosen, "gemm");          // a no-op against 3 ms sleeps
  ASSERT_EQ(d.medianMs.size(), 4u);
  EXPECT_GE(d.msOf("onednn"), 2.9);
  EXPECT_GE(d.msOf("aten"), 2.9);
  EXPECT_LT(d.medianMs.at("rowwise"), 0.0);
  EXPECT_EQ(d.msOf("rowwise"), -1.0);
  EXPECT_EQ(d.msOf("not-a-candidate"), -1.0);
  ASSERT_EQ(d.failures.size(), 1u);
  EXPECT_EQ(d.failures.at("rowwise"), "Unimplemented: no AVX2 path");
  for (const auto& [engine, ms] : d.medianMs) {
    if (ms >= 0) EXPECT_LE(d.medianMs.at(d.chosen), ms) << engine;
  }
  // The two-engine view follows.
  EXPECT_EQ(d.engine, Engine::kAten);
  EXPECT_EQ(d.onednnMs, d.msOf("onednn"));
  EXPECT_EQ(d.atenMs, d.msOf("aten"));
  EXPECT_GT(d.created, 1700000000);
  EXPECT_EQ(db->size(), 1u);
}

TEST(Tuner, RoundsAlternateBetweenCandidatesAndDropAFailingOne) {
  std::vector<std::string> calls;
  // "b" runs twice (the warm-up round and the first timed round), then fails.
  VF_ASSERT_OK_AND_ASSIGN(
      TuningDecision d,
      timeCandidates({noop("a", &calls), failing("b", internalError("boom"), 2, &calls), noop("c", &calls)}, 1, 4));
  // Round r runs every live candidate once, starting at candidate r mod 3.
  const std::vector<std::string> expected = {
      "a", "b", "c",  // warm-up
      "b", "c", "a",  // timed round 1
      "c", "a", "b",  // round 2: b fails here and is dropped
      "a", "c",       // round 3 (would start at a)
      "c", "a",       // round 4 (would start at b)
  };
  EXPECT_EQ(calls, expected);
  EXPECT_EQ(d.msOf("b"), -1.0);
  EXPECT_EQ(d.failures.at("b"), "Internal: boom");
  EXPECT_GE(d.msOf("a"), 0.0);
  EXPECT_GE(d.msOf("c"), 0.0);
  EXPECT_TRUE(d.chosen == "a" || d.chosen == "c") << d.chosen;
}

TEST(Tuner, ThrowingCandidateIsNotRunnable) {
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision d,
                          timeCandidates({{"x", []() -> Status { throw std::runtime_error("bad shape"); }}, noop("y")},
                                         0, 2));
  EXPECT_EQ(d.chosen, "y");
  EXPECT_EQ(d.failures.at("x"), "Internal: threw: bad shape");
}

TEST(Tuner, AnErrorOnlyWhenNoCandidateRuns) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  auto none = tuneOrLookup(*db, key("p"),
                           {failing("onednn", unimplemented("no primitive")), failing("gemm", internalError("nan"))}, 0, 2);
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), StatusCode::kUnimplemented);  // the first failure's code
  EXPECT_NE(none.status().message().find("onednn: Unimplemented: no primitive"), std::string::npos);
  EXPECT_NE(none.status().message().find("gemm: Internal: nan"), std::string::npos);
  EXPECT_EQ(db->size(), 0u);  // nothing recorded
  // Invalid requests.
  EXPECT_FALSE(timeCandidates({}, 1, 1).isOk());
  EXPECT_FALSE(timeCandidates({noop("a"), noop("a")}, 1, 1).isOk());
  EXPECT_FALSE(timeCandidates({noop("a b")}, 1, 1).isOk());
  EXPECT_FALSE(timeCandidates({noop("")}, 1, 1).isOk());
  EXPECT_FALSE(timeCandidates({{"a", nullptr}}, 1, 1).isOk());
  EXPECT_FALSE(timeCandidates({noop("a")}, 1, 0).isOk());
  EXPECT_FALSE(timeCandidates({noop("a")}, -1, 1).isOk());
}

TEST(Tuner, DecisionIsPersistedAndAnotherProcessTimesNothing) {
  TempDir dir;
  const std::vector<Candidate> candidates = {sleeper("onednn", 500), noop("gemm"),
                                             failing("attention", unimplemented("mask\nwith \\ newline")),
                                             sleeper("aten", 500)};
  TuningDecision first;
  {
    VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
    VF_ASSERT_OK_AND_ASSIGN(first, tuneOrLookup(*db, key("block"), candidates, 1, 3));
    VF_ASSERT_OK(db->flush());
  }
  // A second compile in this process: a fresh database object times nothing.
  {
    const int64_t t1 = timingCallCount();
    VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
    VF_ASSERT_OK_AND_ASSIGN(TuningDecision again, tuneOrLookup(*db, key("block"), candidates, 1, 3));
    EXPECT_EQ(timingCallCount(), t1);
    expectSameDecision(again, first);
    EXPECT_EQ(again.failures.at("attention"), "Unimplemented: mask\nwith \\ newline");
  }
  // And in another process.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int64_t t1 = timingCallCount();
    auto db = TuningDb::open(dir.path());
    if (!db.isOk()) ::_exit(10);
    auto d = tuneOrLookup(*db.value(), key("block"), candidates, 1, 3);
    if (!d.isOk()) ::_exit(11);
    if (timingCallCount() != t1) ::_exit(12);
    if (d->chosen != first.chosen || d->medianMs != first.medianMs || d->created != first.created) ::_exit(13);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: open, 11: tune, 12: timed again, 13: other decision";
}

TEST(Tuner, ADecisionIsReusedOnlyForTheCandidatesItMeasured) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  VF_ASSERT_OK(tuneOrLookup(*db, key("p"), {sleeper("onednn", 2000), sleeper("aten", 2000)}, 0, 1).status());
  // A new engine became a candidate: the old decision did not measure it, so time again.
  int64_t t = timingCallCount();
  VF_ASSERT_OK_AND_ASSIGN(
      TuningDecision d, tuneOrLookup(*db, key("p"), {sleeper("onednn", 2000), sleeper("aten", 2000), noop("gemm")}, 0, 3));
  EXPECT_EQ(timingCallCount(), t + 3);
  EXPECT_EQ(d.chosen, "gemm");
  // Now the same three, in another order: reused.
  t = timingCallCount();
  VF_ASSERT_OK(tuneOrLookup(*db, key("p"), {noop("gemm"), sleeper("aten", 2000), sleeper("onednn", 2000)}, 0, 3).status());
  EXPECT_EQ(timingCallCount(), t);
  // Fewer candidates whose winner is gone ("gemm" not offered this time): time again.
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision two, tuneOrLookup(*db, key("p"), {noop("onednn"), sleeper("aten", 2000)}, 0, 3));
  EXPECT_EQ(timingCallCount(), t + 2);
  EXPECT_EQ(two.chosen, "onednn");
  // The legacy two-engine form reuses it (its candidates are exactly these two).
  t = timingCallCount();
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision legacy, tuneOrLookup(*db, key("p"), [] { return Status::ok(); },
                                                               [] { return Status::ok(); }));
  EXPECT_EQ(timingCallCount(), t);
  EXPECT_EQ(legacy.engine, Engine::kOneDnn);
}

TEST(Tuner, TwoEngineAndNamedViewsAgree) {
  TempDir dir;
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  // Recorded through the two-engine fields: read back through both.
  db->record(key("legacy"), decision(Engine::kOneDnn, 0.25, -1.0, 123));
  auto a = db->lookup(key("legacy"));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->chosen, "onednn");
  EXPECT_EQ(a->medianMs, (std::map<std::string, double>{{"aten", -1.0}, {"onednn", 0.25}}));
  EXPECT_EQ(a->engine, Engine::kOneDnn);
  EXPECT_EQ(a->atenMs, -1.0);
  EXPECT_EQ(a->created, 123);
  // Recorded by name with an engine the two-engine view has no name for.
  TuningDecision named;
  named.chosen = "rowwise";
  named.medianMs = {{"rowwise", 0.1}, {"aten", 0.3}};
  named.created = 124;
  db->record(key("named"), named);
  VF_ASSERT_OK(db->flush());
  VF_ASSERT_OK_AND_ASSIGN(auto reread, TuningDb::open(dir.path()));
  auto b = reread->lookup(key("named"));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->chosen, "rowwise");
  EXPECT_EQ(b->engine, Engine::kAten);  // not oneDNN
  EXPECT_EQ(b->atenMs, 0.3);
  EXPECT_EQ(b->onednnMs, -1.0);
  // The two-engine tuner fills the named fields too, with oneDNN's failure reason.
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision c, tuneOrLookup(*reread, key("c"), [] { return unimplemented("x"); },
                                                        [] { return Status::ok(); }, 0, 1));
  EXPECT_EQ(c.chosen, "aten");
  EXPECT_EQ(c.failures.at("onednn"), "Unimplemented: x");
}

TEST(Tuner, UndecodablePayloadIsAMissAndRetimed) {
  TempDir dir;
  {
    auto store = support::RecordStore::open(dir.path(), TuningDb::kStoreName);
    ASSERT_TRUE(store.isOk());
    store.value()->put(key("p").canonical(), "not a decision\n", 1);
    VF_ASSERT_OK(store.value()->flush());
  }
  VF_ASSERT_OK_AND_ASSIGN(auto db, TuningDb::open(dir.path()));
  EXPECT_FALSE(db->lookup(key("p")).has_value());
  EXPECT_EQ(db->stats().droppedRecords, 1);
  VF_ASSERT_OK_AND_ASSIGN(TuningDecision d, tuneOrLookup(*db, key("p"), {noop("aten")}, 0, 1));
  EXPECT_EQ(d.chosen, "aten");
  EXPECT_TRUE(db->lookup(key("p")).has_value());
}

}  // namespace
}  // namespace verifuse::kernels
