// Kernel arithmetic proofs (int_dot.h): the lemmas of the three declared variants Proved, every
// mutant Refuted with a counterexample, and instances with real-looking weights: vpmaddubsw's
// saturating s16 pairs refuted for full-range u8 codes and per-channel symmetric weights (the
// counterexample re-evaluated here), proved for 7-bit codes or weights within [-64, 64]; vpmaddwd
// and vpdpbusd proved; an overflowing s32 accumulator refuted; invalid instances Unsupported.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "verifuse/verify/int_dot.h"
#include "verifuse/verify/proof_cache.h"

namespace verifuse::verify {
namespace {

using kernels::IntDotArithmetic;
using Source = IntDotArithmetic::Source;

// The declarations as the kernels engineer states them (kernels/include/verifuse/kernels/int_arithmetic.h).
IntDotArithmetic ownVpmaddwd() { return {"own:vpmaddwd", Source::kCodesMinusZeroPoint, 2, 32, false, 32}; }
IntDotArithmetic vpmaddubswU8() { return {"onednn:vpmaddubsw", Source::kCodes, 2, 16, true, 32}; }
IntDotArithmetic vpmaddubswS8() { return {"onednn:vpmaddubsw", Source::kCodesPlus128, 2, 16, true, 32}; }
IntDotArithmetic vpdpbusdU8() { return {"onednn:vpdpbusd", Source::kCodes, 4, 32, false, 32}; }
IntDotArithmetic vpdpbusdS8() { return {"onednn:vpdpbusd", Source::kCodesPlus128, 4, 32, false, 32}; }

std::vector<IntDotArithmetic> allDeclarations() {
  return {ownVpmaddwd(), vpmaddubswU8(), vpmaddubswS8(), vpdpbusdU8(), vpdpbusdS8()};
}

constexpr CodeRange kU8{0, 255};
constexpr CodeRange kS8{-128, 127};

// The variants' lemmas are proved once for the whole test program.
const IntDotVariantProof& variantProof(const IntDotArithmetic& a) {
  static std::map<std::string, IntDotVariantProof> proofs;
  const std::string key = a.variant + "/" + std::to_string(static_cast<int>(a.source));
  auto it = proofs.find(key);
  if (it == proofs.end()) it = proofs.emplace(key, proveIntDotVariant(a)).first;
  return it->second;
}

Verdict check(const IntDotArithmetic& a, const std::vector<int8_t>& w, int64_t channels, CodeRange src, int64_t zx) {
  return checkIntDotInstance(variantProof(a), {w, channels, static_cast<int64_t>(w.size()) / channels, src, zx});
}

/// Per-channel symmetric int8 weights as a quantizer makes them: gaussian values scaled so that
/// the channel's largest |w| is exactly \p maxAbs.
std::vector<int8_t> symmetricWeights(int64_t channels, int64_t k, int maxAbs, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<int8_t> out(static_cast<size_t>(channels * k));
  std::vector<double> row(static_cast<size_t>(k));
  for (int64_t o = 0; o < channels; ++o) {
    double m = 0;
    for (double& v : row) {
      v = dist(rng);
      m = std::max(m, std::abs(v));
    }
    for (int64_t i = 0; i < k; ++i) out[o * k + i] = static_cast<int8_t>(std::lround(row[i] / m * maxAbs));
  }
  return out;
}

/// The group in a counterexample: weights "w[o,k]" and codes "x[k]", by k.
struct CexGroup {
  int64_t channel = -1;
  std::vector<int64_t> codes;
  std::vector<int8_t> weights;
};

CexGroup groupOf(const Counterexample& cex) {
  CexGroup g;
  std::map<int64_t, int64_t> codeAt, weightAt;
  for (const auto& [name, value] : cex.values) {
    if (name == "output channel") g.channel = std::stoll(value);
    if (name.rfind("w[", 0) == 0) weightAt[std::stoll(name.substr(name.find(',') + 1))] = std::stoll(value);
    if (name.rfind("x[", 0) == 0 && name != "x[k]") codeAt[std::stoll(name.substr(2))] = std::stoll(value);
  }
  for (const auto& [k, w] : weightAt) {
    g.weights.push_back(static_cast<int8_t>(w));
    g.codes.push_back(codeAt.at(k));
  }
  return g;
}

/// Checks a group counterexample independently of the library: the weights are the channel's,
/// the codes in range, and vpmaddubsw's s16 saturation really changes the sum.
void expectSaturatingGroup(const Verdict& v, const std::vector<int8_t>& weights, int64_t k, CodeRange src, int shift) {
  ASSERT_TRUE(v.refutedWithCounterexample()) << v.summary();
  EXPECT_EQ(v.counterexample.goal, "group (s16, saturating)");
  CexGroup g = groupOf(v.counterexample);
  ASSERT_GE(g.channel, 0);
  ASSERT_EQ(g.weights.size(), 2u) << v.counterexample.toString();
  int64_t exact = 0;
  for (size_t i = 0; i < g.weights.size(); ++i) {
    EXPECT_GE(g.codes[i], src.lo);
    EXPECT_LE(g.codes[i], src.hi);
    exact += (g.codes[i] + shift) * g.weights[i];
  }
  // The named weights are in the named channel at the named indices.
  for (const auto& [name, value] : v.counterexample.values) {
    if (name.rfind("w[", 0) != 0) continue;
    const int64_t idx = std::stoll(name.substr(name.find(',') + 1));
    EXPECT_EQ(weights[g.channel * k + idx], std::stoll(value)) << name;
  }
  const int64_t clamped = std::clamp<int64_t>(exact, -32768, 32767);
  EXPECT_NE(clamped, exact);
  EXPECT_EQ(v.counterexample.sourceValue, std::to_string(exact));
  EXPECT_EQ(v.counterexample.targetValue, std::to_string(clamped));
  const IntDotGroupValue e = evaluateIntDotGroup(shift ? vpmaddubswS8() : vpmaddubswU8(), g.codes, g.weights, 0);
  EXPECT_TRUE(e.overflowed);
  EXPECT_EQ(e.computed, clamped);
}

TEST(IntDot, LemmasOfTheThreeVariantsAreProved) {
  for (const IntDotArithmetic& a : allDeclarations()) {
    const IntDotVariantProof& p = variantProof(a);
    EXPECT_TRUE(p.proved()) << a.variant << ": " << p.verdict.summary();
    ASSERT_EQ(p.lemmas.size(), 4u);
    for (const auto& l : p.lemmas) {
      EXPECT_TRUE(l.verdict.proved()) << a.variant << " " << intDotStepName(l.step) << ": " << l.verdict.summary();
      std::printf("  %-18s %-24s %-10s %-9s %.3f s\n", a.variant.c_str(),
                  a.source == Source::kCodes ? "codes" : a.source == Source::kCodesPlus128 ? "codes+128" : "codes-zx",
                  intDotStepName(l.step), verdictKindName(l.verdict.kind), l.verdict.seconds);
    }
  }
  // Only the saturating s16 pairs need a weight side condition; the widening variants are exact
  // for every code and weight (besides the accumulator bound).
  EXPECT_TRUE(intDotGroupHasSideCondition(vpmaddubswU8()));
  EXPECT_TRUE(intDotGroupHasSideCondition(vpmaddubswS8()));
  EXPECT_FALSE(intDotGroupHasSideCondition(ownVpmaddwd()));
  EXPECT_FALSE(intDotGroupHasSideCondition(vpdpbusdU8()));
  EXPECT_FALSE(intDotGroupHasSideCondition(vpdpbusdS8()));
}

TEST(IntDot, GroupLemmaIsStatedForSymbolicCodesAndWeights) {
  const Obligation ob = intDotLemma(vpmaddubswU8(), IntDotStep::kGroup);
  const std::string text = ob.canonical();
  for (const char* v : {"|x[0]|:Int", "|x[1]|:Int", "|w[0]|:Int", "|w[1]|:Int", "|src.lo|:Int", "|src.hi|:Int",
                        "|src.zero_point|:Int", "|top.tau|:Int", "|top.excess|:Int"}) {
    EXPECT_NE(text.find(v), std::string::npos) << v << "\n" << text;
  }
  // vpdpbusd's group lemma has no side condition at all.
  EXPECT_EQ(intDotLemma(vpdpbusdU8(), IntDotStep::kGroup).canonical().find("top.tau"), std::string::npos);
  // An invalid declaration gives no goal: it proves Unsupported, never Proved.
  IntDotArithmetic bad = vpdpbusdU8();
  bad.groupSize = 0;
  EXPECT_EQ(prove(intDotLemma(bad, IntDotStep::kGroup)).kind, VerdictKind::Unsupported);
}

TEST(IntDot, RuleProofsProvedAndEveryMutantRefuted) {
  const std::vector<IntDotArithmetic> decls = allDeclarations();
  StatusOr<std::vector<RuleProof>> proofs = intDotProofs(decls);
  ASSERT_TRUE(proofs.isOk()) << proofs.status().toString();
  EXPECT_TRUE(checkRuleProofs(*proofs).isOk()) << checkRuleProofs(*proofs).toString();
  ASSERT_EQ(proofs->size(), 20u);
  std::set<std::string> ids;
  for (const RuleProof& p : *proofs) ids.insert(p.ruleId);
  for (const char* id : {"int-dot-own-vpmaddwd-group", "int-dot-onednn-vpmaddubsw-codes-group",
                         "int-dot-onednn-vpmaddubsw-codes-plus-128-compensate", "int-dot-onednn-vpdpbusd-codes-accumulate",
                         "int-dot-onednn-vpdpbusd-codes-plus-128-products"}) {
    EXPECT_TRUE(ids.count(id)) << id;
  }
  const ProveReport report = proveAll(*proofs);
  EXPECT_TRUE(report.ok()) << report.toText();
  std::map<std::string, std::set<std::string>> killed;
  for (const RuleResult& r : report.rules) {
    EXPECT_TRUE(r.verdict.proved()) << r.ruleId << ": " << r.verdict.summary();
    for (const MutantResult& m : r.mutants) {
      EXPECT_TRUE(m.killed()) << r.ruleId << " / " << m.name << ": " << m.verdict.summary();
      if (m.killed()) killed[r.ruleId].insert(m.name);
      std::printf("  %-52s %-40s %s %.3f s  %s = %s, %s\n", r.ruleId.c_str(), m.name.c_str(),
                  verdictKindName(m.verdict.kind), m.verdict.seconds, m.verdict.counterexample.goal.c_str(),
                  m.verdict.counterexample.sourceValue.c_str(), m.verdict.counterexample.targetValue.c_str());
    }
  }
  std::printf("%s", report.toText().c_str());
  // The mutants the design names, each killed (Refuted with a counterexample, not vacuous).
  EXPECT_TRUE(killed["int-dot-onednn-vpmaddubsw-codes-group"].count("side-condition-dropped"));
  EXPECT_TRUE(killed["int-dot-onednn-vpmaddubsw-codes-group"].count("side-condition-unsigned-bound"));
  EXPECT_TRUE(killed["int-dot-onednn-vpdpbusd-codes-group"].count("group-as-saturating-s16"));
  EXPECT_TRUE(killed["int-dot-own-vpmaddwd-accumulate"].count("u8-read-as-s8-zero-point-not-subtracted"));
  EXPECT_TRUE(killed["int-dot-onednn-vpdpbusd-codes-accumulate"].count("accumulator-bound-dropped"));
  EXPECT_TRUE(killed["int-dot-onednn-vpmaddubsw-codes-plus-128-compensate"].count("shift-not-compensated"));
}

TEST(IntDot, RuleProofIdsAndInvalidLists) {
  // One source per variant name: no source suffix.
  std::vector<IntDotArithmetic> u8 = {vpmaddubswU8(), vpdpbusdU8(), vpmaddubswU8()};
  StatusOr<std::vector<RuleProof>> proofs = intDotProofs(u8);
  ASSERT_TRUE(proofs.isOk());
  ASSERT_EQ(proofs->size(), 8u);  // the duplicate declaration is listed once
  EXPECT_EQ((*proofs)[0].ruleId, "int-dot-onednn-vpmaddubsw-products");
  EXPECT_EQ((*proofs)[1].ruleId, "int-dot-onednn-vpmaddubsw-group");
  EXPECT_EQ((*proofs)[5].ruleId, "int-dot-onednn-vpdpbusd-group");
  IntDotArithmetic bad = vpdpbusdU8();
  bad.groupBits = 7;
  EXPECT_EQ(intDotProofs(std::vector<IntDotArithmetic>{bad}).status().code(), StatusCode::kUnsupported);
  IntDotArithmetic twin = vpdpbusdU8();
  twin.groupSize = 8;
  EXPECT_EQ(intDotProofs(std::vector<IntDotArithmetic>{vpdpbusdU8(), twin}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(IntDot, RealWeightsFullRangeU8CodesSaturateVpmaddubsw) {
  const int64_t channels = 64, k = 576;  // a 3x3 conv over 64 channels
  const std::vector<int8_t> w = symmetricWeights(channels, k, 127, 1);
  const Verdict sat = check(vpmaddubswU8(), w, channels, kU8, 128);
  expectSaturatingGroup(sat, w, k, kU8, 0);
  std::printf("vpmaddubsw: %s\n%s", sat.summary().c_str(), sat.counterexample.toString().c_str());
  EXPECT_NE(sat.detail.find("ground query: Refuted"), std::string::npos) << sat.detail;
  const Verdict own = check(ownVpmaddwd(), w, channels, kU8, 128);
  EXPECT_TRUE(own.proved()) << own.summary();
  const Verdict vnni = check(vpdpbusdU8(), w, channels, kU8, 128);
  EXPECT_TRUE(vnni.proved()) << vnni.summary();
  std::printf("vpmaddwd: %s\nvpdpbusd: %s\n", own.summary().c_str(), vnni.summary().c_str());
  // The one-call form agrees.
  EXPECT_EQ(proveIntDotInstance(vpmaddubswU8(), w, channels, k, kU8, 128).kind, VerdictKind::Refuted);
  EXPECT_TRUE(proveIntDotInstance(vpdpbusdU8(), w, channels, k, kU8, 128).proved());
}

TEST(IntDot, SmallWeightsOrSevenBitCodesKeepVpmaddubswExact) {
  const int64_t channels = 32, k = 576;
  // 255 * 64 * 2 = 32640 <= 32767.
  const Verdict small = check(vpmaddubswU8(), symmetricWeights(channels, k, 64, 2), channels, kU8, 128);
  EXPECT_TRUE(small.proved()) << small.summary();
  // 127 * 127 * 2 = 32258 and 127 * -128 * 2 = -32512: 7-bit activations never saturate.
  const Verdict sevenBit = check(vpmaddubswU8(), symmetricWeights(channels, k, 127, 3), channels, {0, 127}, 64);
  EXPECT_TRUE(sevenBit.proved()) << sevenBit.summary();
  std::vector<int8_t> extreme(static_cast<size_t>(k), -128);
  EXPECT_TRUE(check(vpmaddubswU8(), extreme, 1, {0, 127}, 0).proved());
}

TEST(IntDot, BoundIsExactAtTheEdge) {
  // u8 codes: the largest pair is 255 * (w1 + w2); 127 + 1 fits (32640), 127 + 2 does not (32895).
  std::vector<int8_t> w(16, 0);
  w[3] = 127;
  w[11] = 1;
  EXPECT_TRUE(check(vpmaddubswU8(), w, 1, kU8, 0).proved());
  w[11] = 2;
  const Verdict v = check(vpmaddubswU8(), w, 1, kU8, 0);
  expectSaturatingGroup(v, w, 16, kU8, 0);
  EXPECT_EQ(v.counterexample.sourceValue, "32895");
  // From below: 255 * (-128 + 0) = -32640 fits, 255 * (-128 - 1) = -32895 does not.
  std::vector<int8_t> neg(16, 0);
  neg[0] = -128;
  EXPECT_TRUE(check(vpmaddubswU8(), neg, 1, kU8, 0).proved());
  neg[15] = -1;
  const Verdict low = check(vpmaddubswU8(), neg, 1, kU8, 0);
  expectSaturatingGroup(low, neg, 16, kU8, 0);
  EXPECT_EQ(low.counterexample.targetValue, "-32768");
}

TEST(IntDot, BoundIsPairingIndependent) {
  // In stored order every pair is (127, -127): 255 * 127 + 0 * -127 never saturates. A layout that
  // pairs two 127s does (64770), so the instance is refuted, naming two positive weights.
  std::vector<int8_t> w = {127, -127, 127, -127, 127, -127, 127, -127};
  const Verdict v = check(vpmaddubswU8(), w, 1, kU8, 128);
  expectSaturatingGroup(v, w, 8, kU8, 0);
  CexGroup g = groupOf(v.counterexample);
  EXPECT_EQ(g.weights, (std::vector<int8_t>{127, 127}));
  EXPECT_EQ(v.counterexample.sourceValue, "64770");
}

TEST(IntDot, S8SourceWithTheShift) {
  const int64_t channels = 32, k = 288;
  const std::vector<int8_t> w = symmetricWeights(channels, k, 127, 4);
  // s8 codes + 128 span 0..255 like u8: the same saturation.
  const Verdict sat = check(vpmaddubswS8(), w, channels, kS8, 0);
  expectSaturatingGroup(sat, w, k, kS8, 128);
  EXPECT_TRUE(check(vpdpbusdS8(), w, channels, kS8, 0).proved());
  EXPECT_TRUE(check(vpmaddubswS8(), symmetricWeights(channels, k, 64, 5), channels, kS8, -3).proved());
  // Codes -64..63 shift to 64..191: 191 * 127 * 2 = 48514 still saturates, 191 * 85 * 2 = 32470 does not.
  EXPECT_EQ(check(vpmaddubswS8(), w, channels, {-64, 63}, 0).kind, VerdictKind::Refuted);
  EXPECT_TRUE(check(vpmaddubswS8(), symmetricWeights(channels, k, 85, 6), channels, {-64, 63}, 0).proved());
  // The +128 shift is defined for s8 codes only.
  EXPECT_EQ(check(vpmaddubswS8(), w, channels, kU8, 128).kind, VerdictKind::Unsupported);
}

TEST(IntDot, LongReductionOverflowsTheAccumulator) {
  // 70000 * 255 * 127 = 2266950000 > 2^31 - 1: the s32 running sum overflows even with VNNI.
  std::vector<int8_t> w(70000, 127);
  const Verdict v = check(vpdpbusdU8(), w, 1, kU8, 0);
  ASSERT_TRUE(v.refutedWithCounterexample()) << v.summary();
  EXPECT_EQ(v.counterexample.goal, "accumulator (s32)");
  EXPECT_GT(std::stoll(v.counterexample.sourceValue), 2147483647LL);
  std::printf("vpdpbusd K=70000: %s\n%s", v.summary().c_str(), v.counterexample.toString().c_str());
  // vpmaddwd on x - zx with zx = 128: |x - zx| <= 128, so it takes 140000 products of 127.
  std::vector<int8_t> w2(140000, 127);
  const Verdict own = check(ownVpmaddwd(), w2, 1, kU8, 128);
  ASSERT_TRUE(own.refutedWithCounterexample()) << own.summary();
  EXPECT_EQ(own.counterexample.goal, "accumulator (s32)");
  std::vector<int8_t> w3(130000, 127);
  EXPECT_TRUE(check(ownVpmaddwd(), w3, 1, kU8, 128).proved());
}

TEST(IntDot, InvalidInstancesAreUnsupported) {
  const std::vector<int8_t> w(64, 1);
  EXPECT_EQ(check(vpdpbusdU8(), w, 1, kU8, 256).kind, VerdictKind::Unsupported);   // zero point outside
  EXPECT_EQ(check(vpdpbusdU8(), w, 1, {0, 127}, 200).kind, VerdictKind::Unsupported);
  EXPECT_EQ(check(vpdpbusdU8(), w, 1, {-128, 255}, 0).kind, VerdictKind::Unsupported);  // not an 8-bit type
  EXPECT_EQ(check(vpdpbusdU8(), w, 1, {10, 5}, 7).kind, VerdictKind::Unsupported);
  EXPECT_EQ(checkIntDotInstance(variantProof(vpdpbusdU8()), {w, 3, 21, kU8, 0}).kind, VerdictKind::Unsupported);
  Verdict v = proveIntDotInstance(vpdpbusdU8(), w, 1, 64, kU8, -1);
  EXPECT_EQ(v.kind, VerdictKind::Unsupported);
  EXPECT_NE(v.detail.find("zero point"), std::string::npos) << v.detail;
  for (auto mutate : std::vector<void (*)(IntDotArithmetic&)>{
           [](IntDotArithmetic& a) { a.groupSize = 0; }, [](IntDotArithmetic& a) { a.groupBits = 65; },
           [](IntDotArithmetic& a) { a.groupBits = 4; }, [](IntDotArithmetic& a) { a.accumulatorBits = 0; },
           [](IntDotArithmetic& a) { a.variant.clear(); },
           [](IntDotArithmetic& a) { a.source = static_cast<Source>(7); }}) {
    IntDotArithmetic a = vpdpbusdU8();
    mutate(a);
    EXPECT_EQ(proveIntDotInstance(a, w, 1, 64, kU8, 0).kind, VerdictKind::Unsupported);
  }
}

TEST(IntDot, UndecidedLemmasAreNeverProof) {
  ProveOptions starved;
  starved.resourceLimit = 1;  // every query runs out at once
  const std::vector<int8_t> w(64, 1);
  const Verdict v = proveIntDotInstance(vpdpbusdU8(), w, 1, 64, kU8, 0, starved);
  EXPECT_FALSE(v.proved()) << v.summary();
  EXPECT_TRUE(v.kind == VerdictKind::Unknown || v.kind == VerdictKind::Timeout) << v.summary();
}

TEST(IntDot, LemmasAreCached) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "verifuse_int_dot_cache_test";
  std::filesystem::remove_all(dir);
  ProofCache cache(dir.string());
  ProveOptions opts;
  opts.cache = &cache;
  ASSERT_TRUE(proveIntDotVariant(vpmaddubswU8(), opts).proved());
  const uint64_t before = solverQueryCount();
  const IntDotVariantProof again = proveIntDotVariant(vpmaddubswU8(), opts);
  EXPECT_TRUE(again.proved());
  EXPECT_EQ(solverQueryCount(), before);
  for (const auto& l : again.lemmas) EXPECT_TRUE(l.verdict.fromCache);
  std::filesystem::remove_all(dir);
}

TEST(IntDot, InstanceCheckOn25MillionWeights) {
  // About ResNet-50's weight count; vpmaddubsw with weights in [-64, 64], so the whole pass runs.
  const int64_t channels = 2048, k = 12288;
  std::vector<int8_t> w(static_cast<size_t>(channels * k));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> dist(-64, 64);
  for (int8_t& x : w) x = static_cast<int8_t>(dist(rng));
  const IntDotVariantProof& proof = variantProof(vpmaddubswU8());
  ASSERT_TRUE(proof.proved());
  const auto start = std::chrono::steady_clock::now();
  const Verdict v = checkIntDotInstance(proof, {w, channels, k, kU8, 128});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(v.proved()) << v.summary();
  std::printf("instance check, %lld weights (%lld x %lld): %.3f s (%s)\n", static_cast<long long>(w.size()),
              static_cast<long long>(channels), static_cast<long long>(k), seconds, v.detail.c_str());
  EXPECT_LT(seconds, 5.0);  // loose: the machine is shared; the measured time is printed
}

// The header the runtime includes must stay free of Z3 (like every verifier header, which
// obligation_test's PublicHeadersAreZ3Free scans), and so must the kernels header it pulls in.
TEST(IntDot, PublicHeadersAreZ3Free) {
  namespace fs = std::filesystem;
  const fs::path root(VERIFUSE_SOURCE_DIR);
  for (const fs::path& p : {root / "verifier/include/verifuse/verify/int_dot.h",
                            root / "kernels/include/verifuse/kernels/int_arithmetic.h"}) {
    std::ifstream in(p);
    ASSERT_TRUE(in.good()) << p;
    std::stringstream text;
    text << in.rdbuf();
    for (const char* banned : {"#include <z3", "#include \"z3", "dnnl", "torch/"}) {
      EXPECT_EQ(text.str().find(banned), std::string::npos) << p << ": " << banned;
    }
  }
}

}  // namespace
}  // namespace verifuse::verify
