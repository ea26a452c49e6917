// The capability model's CPU half (cpu_features.h): tier names, the tier a feature set forms, and
// the VERIFUSE_MAX_ISA / ONEDNN_MAX_CPU_ISA cap (in child processes: the model is read once).
#include "verifuse/kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace verifuse::kernels::cpu {
namespace {

constexpr Tier kAll[] = {Tier::kBaseline, Tier::kAvx2,       Tier::kAvx2Vnni, Tier::kAvx512,
                         Tier::kAvx512Vnni, Tier::kAvx512Bf16, Tier::kAmx};

TEST(CpuFeatures, TierNamesRoundTripAndOnednnSpellingsParse) {
  for (Tier t : kAll) EXPECT_EQ(parseTier(tierName(t)), t) << tierName(t);
  EXPECT_EQ(parseTier("AVX2"), Tier::kAvx2);
  EXPECT_EQ(parseTier("avx512_core"), Tier::kAvx512);
  EXPECT_EQ(parseTier("AVX512_CORE_VNNI"), Tier::kAvx512Vnni);
  EXPECT_EQ(parseTier("AVX512_CORE_BF16"), Tier::kAvx512Bf16);
  EXPECT_EQ(parseTier("AVX512_CORE_AMX"), Tier::kAmx);
  EXPECT_EQ(parseTier("ALL"), Tier::kAmx);
  EXPECT_FALSE(parseTier("avx3").has_value());
  EXPECT_FALSE(parseTier("").has_value());
}

TEST(CpuFeatures, EachTierIsTheTierOfItsOwnFeatures) {
  for (Tier t : kAll) EXPECT_EQ(tierOf(featuresOf(t)), t) << tierName(t);
  // A Zen 4 (AVX-512 with VNNI and BF16, no AVX-VNNI, no AMX) and an Alder Lake (AVX2 with
  // AVX-VNNI, no AVX-512): the tier is the highest whose features are all there.
  CpuFeatures zen4 = featuresOf(Tier::kAvx512Bf16);
  EXPECT_EQ(tierOf(zen4), Tier::kAvx512Bf16);
  EXPECT_EQ(tierOf(zen4, Tier::kAvx2Vnni), Tier::kAvx2);  // capped where it has no AVX-VNNI
  CpuFeatures alderLake = featuresOf(Tier::kAvx2Vnni);
  EXPECT_EQ(tierOf(alderLake), Tier::kAvx2Vnni);
  EXPECT_TRUE(alderLake.int8DotWithoutSaturation());
  EXPECT_FALSE(featuresOf(Tier::kAvx512).int8DotWithoutSaturation());  // Skylake-SP: vpmaddubsw only
  EXPECT_FALSE(featuresOf(Tier::kAvx2).nativeBf16());
  EXPECT_TRUE(featuresOf(Tier::kAvx512Bf16).nativeBf16());
}

TEST(CpuFeatures, UsableFeaturesAreTheTiersAndTheCpusBoth) {
  const CpuCapabilities& c = capabilities();
  EXPECT_LE(c.tier, c.detectedTier);
  if (c.cap) EXPECT_LE(c.tier, *c.cap);
  EXPECT_EQ(tierOf(c.usable), c.tier);
  EXPECT_EQ(isaName(), tierName(c.tier));
  EXPECT_EQ(hasAvx2Fma(), c.usable.avx2Fma());
  EXPECT_EQ(hasAvx512(), c.usable.avx512());
  EXPECT_EQ(hasAvx512Bf16(), c.usable.avx512() && c.usable.avx512Bf16);
  if (c.usable.avx512()) {
    EXPECT_TRUE(c.detected.avx512());
  }
  std::printf("[ info ] tier %s (CPU %s%s%s)\n", tierName(c.tier), tierName(c.detectedTier),
              c.cap ? ", capped by " : "", c.capSource.c_str());
}

/// Runs \p body in a fresh child process (the model is read once per process).
template <typename F>
void inChild(F body, const char* expectOutput) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(body(), ::testing::ExitedWithCode(0), expectOutput);
}

TEST(CpuFeatures, VerifuseMaxIsaCapsTheOwnKernels) {
  inChild(
      [] {
        setenv("VERIFUSE_MAX_ISA", "avx2", 1);
        unsetenv("ONEDNN_MAX_CPU_ISA");
        const CpuCapabilities& c = capabilities();
        const bool ok = c.cap == Tier::kAvx2 && c.tier <= Tier::kAvx2 && !hasAvx512() && !hasAvx512Bf16() &&
                        !c.usable.avxVnni && !c.usable.amxTile && hasAvx2Fma() == c.detected.avx2Fma();
        std::fprintf(stderr, "tier=%s source=%s\n", tierName(c.tier), c.capSource.c_str());
        std::exit(ok ? 0 : 1);
      },
      "source=VERIFUSE_MAX_ISA=avx2");
}

TEST(CpuFeatures, TheLowerOfTheTwoCapsWinsAndAnUnknownNameIsReported) {
  inChild(
      [] {
        setenv("VERIFUSE_MAX_ISA", "avx512_bf16", 1);
        setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
        const CpuCapabilities& c = capabilities();
        std::fprintf(stderr, "cap=%s source=%s\n", c.cap ? tierName(*c.cap) : "none", c.capSource.c_str());
        std::exit(c.cap == Tier::kAvx2 && !hasAvx512() ? 0 : 1);
      },
      "cap=avx2 source=ONEDNN_MAX_CPU_ISA=AVX2");
  inChild(
      [] {
        setenv("VERIFUSE_MAX_ISA", "avx3", 1);
        unsetenv("ONEDNN_MAX_CPU_ISA");
        const CpuCapabilities& c = capabilities();
        std::fprintf(stderr, "%s\n", c.capError.c_str());
        std::exit(!c.cap && c.tier == c.detectedTier ? 0 : 1);
      },
      "VERIFUSE_MAX_ISA=avx3 is not a tier name");
}

}  // namespace
}  // namespace verifuse::kernels::cpu
