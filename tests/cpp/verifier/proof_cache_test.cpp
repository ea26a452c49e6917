// The proof cache: hits skip solving, a damaged file is detected and rebuilt, atomic writes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "verifuse/verify/catalog.h"
#include "verifuse/verify/proof_cache.h"
#include "verifuse/verify/prover.h"

namespace verifuse::verify {
namespace {

namespace fs = std::filesystem;

class ProofCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("verifuse-proof-cache-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static Obligation refutable() {
    ObligationBuilder ob("bad-fold");
    Expr a = ob.var("conv.out[o]");
    ob.assume(a > 0);
    ob.prove("out[o]", a * 2, a + 1);
    return ob.build();
  }
  static Obligation provable() {
    ObligationBuilder ob("good-fold");
    Expr a = ob.var("a"), b = ob.var("b");
    ob.prove("out", (a + b) * (a - b), a * a - b * b);
    return ob.build();
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

  fs::path dir_;
};

TEST_F(ProofCacheTest, SecondRunDoesNoSolving) {
  {
    ProofCache cache(dir_.string());
    ProveOptions opts;
    opts.cache = &cache;
    Verdict a = prove(provable(), opts);
    Verdict b = prove(refutable(), opts);
    EXPECT_TRUE(a.proved());
    EXPECT_TRUE(b.refutedWithCounterexample());
    EXPECT_FALSE(a.fromCache);
    EXPECT_EQ(cache.stats().stores, 2u);
    EXPECT_EQ(cache.stats().misses, 2u);
  }
  ProofCache cache(dir_.string());  // a new process would see the same files
  ProveOptions opts;
  opts.cache = &cache;
  uint64_t before = solverQueryCount();
  Verdict a = prove(provable(), opts);
  Verdict b = prove(refutable(), opts);
  EXPECT_EQ(solverQueryCount(), before) << "a cache hit must not call the solver";
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_TRUE(a.proved());
  EXPECT_TRUE(a.fromCache);
  ASSERT_TRUE(b.refutedWithCounterexample());
  EXPECT_EQ(b.messageClass, MessageClass::ValueMismatch);
  EXPECT_EQ(b.counterexample.goal, "out[o]");
  EXPECT_EQ(b.counterexample.values.at(0).first, "conv.out[o]");
}

// Two small rules with their mutants, proved the way `python -m verifuse prove` proves a list.
std::vector<RuleProof> smallCatalogue() {
  RuleProof squares;
  squares.ruleId = "diff-of-squares";
  squares.math = "(a+b)(a-b) = a^2 - b^2";
  squares.build = [](const sem::DotModel&) {
    ObligationBuilder ob("diff-of-squares");
    Expr a = ob.var("a"), b = ob.var("b");
    ob.prove("out", (a + b) * (a - b), a * a - b * b);
    return ob.build();
  };
  squares.mutants.push_back({"sign-flipped", "a^2 + b^2", [](const sem::DotModel&) {
                               ObligationBuilder ob("diff-of-squares/sign-flipped");
                               Expr a = ob.var("a"), b = ob.var("b");
                               ob.prove("out", (a + b) * (a - b), a * a + b * b);
                               return ob.build();
                             }});
  RuleProof scale;
  scale.ruleId = "scale-fold";
  scale.math = "(x w) s = x (w s)";
  scale.build = [](const sem::DotModel&) {
    ObligationBuilder ob("scale-fold");
    Expr x = ob.var("x"), w = ob.var("w"), s = ob.var("s");
    ob.assume(s > 0);
    ob.prove("out", (x * w) * s, x * (w * s));
    return ob.build();
  };
  scale.mutants.push_back({"scale-dropped", "the scale is lost", [](const sem::DotModel&) {
                             ObligationBuilder ob("scale-fold/scale-dropped");
                             Expr x = ob.var("x"), w = ob.var("w"), s = ob.var("s");
                             ob.assume(s > 0);
                             ob.prove("out", (x * w) * s, x * w);
                             return ob.build();
                           }});
  return {squares, scale};
}

TEST_F(ProofCacheTest, WholeCatalogueSecondRunDoesNoSolving) {
  uint64_t stores = 0;
  {
    ProofCache cache(dir_.string());
    ProveAllOptions opts;
    opts.prove.cache = &cache;
    ProveReport first = proveAll(smallCatalogue(), opts);
    ASSERT_TRUE(first.ok()) << first.toText();
    stores = cache.stats().stores;
    EXPECT_GE(stores, 4u);  // each rule, each mutant, and the bounded instances
    EXPECT_EQ(cache.storeStats().flushes, 1);  // proveAll batches: one durable write
  }
  ProofCache cache(dir_.string());  // a second process
  ProveAllOptions opts;
  opts.prove.cache = &cache;
  uint64_t before = solverQueryCount();
  ProveReport second = proveAll(smallCatalogue(), opts);
  EXPECT_EQ(solverQueryCount(), before);
  EXPECT_TRUE(second.ok()) << second.toText();
  EXPECT_EQ(second.toJson().find("\"cached\":false"), std::string::npos);
  EXPECT_EQ(cache.stats().hits, stores);
}

TEST_F(ProofCacheTest, ABatchWritesOnceWhenTheLastBatchCloses) {
  ProofCache cache(dir_.string());
  ProveOptions opts;
  opts.cache = &cache;
  {
    ProofCache::Batch outer(&cache);
    {
      ProofCache::Batch inner(&cache);
      EXPECT_TRUE(prove(provable(), opts).proved());
    }
    EXPECT_TRUE(prove(refutable(), opts).refutedWithCounterexample());
    EXPECT_EQ(cache.stats().stores, 2u);
    EXPECT_EQ(cache.storeStats().flushes, 0);  // nothing written while a batch is open
    EXPECT_FALSE(fs::exists(cache.path()));
    uint64_t before = solverQueryCount();
    EXPECT_TRUE(prove(provable(), opts).fromCache);  // this cache already sees them
    EXPECT_EQ(solverQueryCount(), before);
  }
  EXPECT_EQ(cache.storeStats().flushes, 1);
  ProofCache other(dir_.string());
  EXPECT_EQ(other.storeStats().loaded, 2);
  ProofCache::Batch none(nullptr);  // no cache: no-op
  // Without a batch every store is written before it returns.
  ObligationBuilder ob("third");
  Expr a = ob.var("a");
  ob.prove("out", a + a, a * 2);
  EXPECT_TRUE(prove(ob.build(), opts).proved());
  EXPECT_EQ(cache.storeStats().flushes, 2);
}

TEST_F(ProofCacheTest, CorruptFileIsDetectedAndRebuilt) {
  Obligation ob = refutable();
  std::string path;
  {
    ProofCache cache(dir_.string());
    ProveOptions opts;
    opts.cache = &cache;
    ASSERT_TRUE(prove(ob, opts).refutedWithCounterexample());
    path = cache.path();
  }
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(path, (dir_ / "proofs-v2.vfstore").string());
  const std::string good = read(path);

  struct Corruption {
    std::string text;
    std::string reason;
    uint64_t corrupt;  // records dropped
  };
  std::vector<Corruption> corruptions = {
      {good.substr(0, good.size() / 2), "truncated", 1},
      {"", "empty file", 0},
      {std::string("\x00\xff garbage \n end\t0\n", 20), "bad header", 0},
  };
  std::string flipped = good;
  flipped[good.find("conv.out[o]")] = 'C';  // one byte changed: checksum mismatch
  corruptions.push_back({flipped, "checksum", 1});
  std::string wrongKind = good;
  size_t k = wrongKind.find("kind\tRefuted");
  wrongKind.replace(k, 12, "kind\tProved_");  // tampered field (checksum catches it)
  corruptions.push_back({wrongKind, "checksum", 1});

  for (const Corruption& bad : corruptions) {
    write(path, bad.text);
    ProofCache cache(dir_.string());  // a new process opening the damaged file
    ASSERT_TRUE(cache.status().isOk()) << cache.status().toString();
    EXPECT_TRUE(cache.storeStats().rebuilt);
    EXPECT_NE(cache.storeStats().rebuildReason.find(bad.reason), std::string::npos) << cache.storeStats().rebuildReason;
    EXPECT_EQ(cache.stats().corrupt, bad.corrupt) << bad.reason;
    EXPECT_FALSE(cache.lookup(ob).has_value());
    ProveOptions opts;
    opts.cache = &cache;
    uint64_t before = solverQueryCount();
    Verdict v = prove(ob, opts);  // misses, re-solves and stores it again
    EXPECT_GT(solverQueryCount(), before);
    EXPECT_TRUE(v.refutedWithCounterexample());
    EXPECT_FALSE(v.fromCache);
    EXPECT_EQ(read(path).substr(0, 20), "vfstore 1 proofs-v2\n");
    ProofCache next(dir_.string());
    EXPECT_FALSE(next.storeStats().rebuilt);
    std::optional<Verdict> hit = next.lookup(ob);
    ASSERT_TRUE(hit.has_value());
    EXPECT_TRUE(hit->fromCache);
    EXPECT_EQ(hit->counterexample.values, v.counterexample.values);
  }
}

TEST_F(ProofCacheTest, OnlyDefinitiveVerdictsAreCached) {
  ProofCache cache(dir_.string());
  ProveOptions opts;
  opts.cache = &cache;
  ObligationBuilder ob("unsupported");
  ob.prove("out", Expr::sqrt(Expr::var("x")), Expr::var("x"));
  EXPECT_EQ(prove(ob.build(), opts).kind, VerdictKind::Unsupported);
  EXPECT_EQ(cache.stats().stores, 0u);
  EXPECT_FALSE(cache.lookup(ob.build()).has_value());
  EXPECT_FALSE(fs::exists(cache.path()));
}

TEST_F(ProofCacheTest, KeysDependOnContentNotName) {
  Obligation a = provable(), b = provable(), c = refutable();
  b.name = "renamed";
  EXPECT_EQ(ProofCache::keyFor(a), ProofCache::keyFor(b));
  EXPECT_NE(ProofCache::keyFor(a), ProofCache::keyFor(c));
  EXPECT_EQ(ProofCache::keyFor(a).size(), 16u);
}

TEST_F(ProofCacheTest, NoTempFilesLeftBehind) {
  ProofCache cache(dir_.string());
  ProveOptions opts;
  opts.cache = &cache;
  (void)prove(provable(), opts);
  (void)prove(refutable(), opts);
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.insert(e.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"proofs-v2.vfstore", "proofs-v2.vfstore.lock"}));
  ProofCache reread(dir_.string());
  EXPECT_EQ(reread.storeStats().loaded, 2);
}

TEST_F(ProofCacheTest, UnwritableDirectoryIsAnErrorValueNotACrash) {
  write(dir_, "a file where the directory should be");
  ProofCache cache((dir_ / "sub").string());
  EXPECT_FALSE(cache.status().isOk());
  ProveOptions opts;
  opts.cache = &cache;
  Verdict v = prove(provable(), opts);  // the verdict stands; the store failed quietly
  EXPECT_TRUE(v.proved());
  Status s = cache.store(provable(), v);
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.toString(), cache.status().toString());
  EXPECT_FALSE(cache.lookup(provable()).has_value());
  fs::remove(dir_);
}

}  // namespace
}  // namespace verifuse::verify
