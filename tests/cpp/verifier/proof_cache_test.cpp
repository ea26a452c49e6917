// The proof cache: hits skip solving, corrupt entries are detected and rebuilt, atomic writes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
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

TEST_F(ProofCacheTest, WholeCatalogueSecondRunDoesNoSolving) {
  ProofCache cache(dir_.string());
  ProveAllOptions opts;
  opts.prove.cache = &cache;
  ProveReport first = proveAll(builtinRuleProofs(), opts);
  ASSERT_TRUE(first.ok()) << first.toText();
  uint64_t before = solverQueryCount();
  ProveReport second = proveAll(builtinRuleProofs(), opts);
  EXPECT_EQ(solverQueryCount(), before);
  EXPECT_TRUE(second.ok()) << second.toText();
  EXPECT_EQ(second.toJson().find("\"cached\":false"), std::string::npos);
}

TEST_F(ProofCacheTest, CorruptEntriesAreDetectedAndRebuilt) {
  Obligation ob = refutable();
  ProofCache cache(dir_.string());
  ProveOptions opts;
  opts.cache = &cache;
  ASSERT_TRUE(prove(ob, opts).refutedWithCounterexample());
  fs::path path = cache.pathFor(ob);
  ASSERT_TRUE(fs::exists(path));
  const std::string good = read(path);

  std::vector<std::string> corruptions = {
      good.substr(0, good.size() / 2),  // truncated
      "",                               // empty
      std::string("\x00\xff garbage \n end\t0\n", 20),
  };
  std::string flipped = good;
  flipped[good.find("conv.out[o]")] = 'C';  // one byte changed: checksum mismatch
  corruptions.push_back(flipped);
  std::string wrongKind = good;
  size_t k = wrongKind.find("kind\tRefuted");
  wrongKind.replace(k, 12, "kind\tProved_");  // tampered field (checksum catches it)
  corruptions.push_back(wrongKind);

  for (const std::string& bad : corruptions) {
    write(path, bad);
    uint64_t corrupt = cache.stats().corrupt;
    EXPECT_FALSE(cache.lookup(ob).has_value());
    EXPECT_EQ(cache.stats().corrupt, corrupt + 1);
    uint64_t before = solverQueryCount();
    Verdict v = prove(ob, opts);  // sees the corrupt entry too, re-solves and rewrites it
    EXPECT_EQ(cache.stats().corrupt, corrupt + 2);
    EXPECT_GT(solverQueryCount(), before);
    EXPECT_TRUE(v.refutedWithCounterexample());
    EXPECT_FALSE(v.fromCache);
    EXPECT_EQ(read(path).substr(0, 17), "verifuse-proof v1");
    std::optional<Verdict> hit = cache.lookup(ob);
    ASSERT_TRUE(hit.has_value());
    EXPECT_TRUE(hit->fromCache);
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
  EXPECT_FALSE(fs::exists(cache.pathFor(ob.build())));
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
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".proof") << e.path();
  }
  EXPECT_EQ(files, 2);
}

TEST_F(ProofCacheTest, UnwritableDirectoryIsAnErrorValueNotACrash) {
  write(dir_, "a file where the directory should be");
  ProofCache cache((dir_ / "sub").string());
  ProveOptions opts;
  opts.cache = &cache;
  Verdict v = prove(provable(), opts);  // the verdict stands; the store failed quietly
  EXPECT_TRUE(v.proved());
  Status s = cache.store(provable(), v);
  EXPECT_FALSE(s.isOk());
  fs::remove(dir_);
}

}  // namespace
}  // namespace verifuse::verify
