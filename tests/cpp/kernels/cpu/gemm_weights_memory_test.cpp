// Packed weights are asked to live in transparent huge pages (cpu/weight_memory.h): a GEMM
// streams its weights once per call, and on 4 KiB pages every page of a weight matrix that is not
// in the TLB costs a page walk (decode-sized calls read nothing else). Large buffers have pages
// of their own, small ones share 2 MiB chunks.
// Checked in /proc/self/smaps: the mapping holding the weights carries the huge-page advice
// (VmFlags "hg", set by madvise(MADV_HUGEPAGE)) over all of its whole 2 MiB pages. Whether the
// kernel then finds free huge pages is its business (under memory pressure it may not), so the
// AnonHugePages it granted is printed, not asserted: the test must not depend on the machine's
// fragmentation. Skipped only on a kernel without transparent huge pages.
#include "verifuse/kernels/gemm.h"

#include "cpu/weight_memory.h"
#include "tier_skip.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace verifuse::kernels::gemm {
namespace {

constexpr uintptr_t kHuge = uintptr_t{2} << 20;

/// The mapping of /proc/self/smaps that holds an address.
struct Mapping {
  uintptr_t start = 0, end = 0;
  bool hugePageAdvice = false;  ///< VmFlags has "hg"
  long anonHugePagesKb = -1;
};

std::optional<Mapping> mappingOf(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  std::optional<Mapping> found;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> start >> dash >> end && dash == '-') {  // a mapping's first line
      if (found) return found;
      if (address >= start && address < end) found = Mapping{start, end};
      continue;
    }
    if (!found) continue;
    long kb = 0;
    if (std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) found->anonHugePagesKb = kb;
    if (line.rfind("VmFlags:", 0) == 0) found->hugePageAdvice = (line + " ").find(" hg ") != std::string::npos;
  }
  return found;
}

/// The whole 2 MiB pages of [p, p + bytes) lie in one mapping that carries the huge-page advice.
void expectAdvised(const void* p, size_t bytes, const char* what) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(address % kHuge, 0u) << what << " are not 2 MiB aligned";
  const auto m = mappingOf(p);
  ASSERT_TRUE(m.has_value()) << "no mapping holds the " << what;
  EXPECT_TRUE(m->hugePageAdvice) << what << ": their mapping has no huge-page advice (VmFlags hg)";
  EXPECT_LE(m->start, address);
  EXPECT_GE(m->end, address + bytes / kHuge * kHuge) << what << ": the advice stops early";
  std::printf("%s: %zu bytes, the kernel granted %ld kB of huge pages\n", what, bytes, m->anonHugePagesKb);
}

class GemmWeightsMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
      GTEST_SKIP() << "this kernel has no transparent huge pages";
    }
    if (!available()) VF_CPU_SKIP("AVX2+FMA (the GEMM)");
  }

  // 16 MiB of float32 weights: far more than one 2 MiB page.
  static constexpr int64_t kK = 1024, kN = 4096;
  std::vector<float> weights_ = std::vector<float>(static_cast<size_t>(kK * kN), 0.5f);
};

TEST_F(GemmWeightsMemory, LargeFloat32WeightsAreAdvisedHugePages) {
  auto packed = packWeights(weights_.data(), kK, kN, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  expectAdvised((*packed)->data(), sizeof(float) * kK * kN, "16 MiB of packed float32 weights");
  EXPECT_EQ((*packed)->data()[0], 0.5f);  // the pages hold what was packed
}

TEST_F(GemmWeightsMemory, LargeBfloat16WeightsAreAdvisedHugePages) {
  if (!availableBf16()) VF_CPU_SKIP("a bf16 GEMM variant");
  auto packed = packWeightsBf16(weights_.data(), kK, kN, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  expectAdvised((*packed)->data(), sizeof(uint16_t) * kK * kN, "8 MiB of packed bf16 weights");
  EXPECT_EQ((*packed)->data()[0], 0x3F00);  // bf16(0.5)
}

TEST_F(GemmWeightsMemory, SmallWeightsShareHugePageChunksReturnedWhenReleased) {
  const size_t before = cpu::weightMemoryChunkCount();
  {
    // 24 matrices of 256 KiB: 6 MiB in chunks of 2 MiB.
    std::vector<std::shared_ptr<const PackedWeights>> all;
    for (int i = 0; i < 24; ++i) {
      auto packed = packWeights(weights_.data(), 256, 256, WeightOrder::kNK);
      ASSERT_TRUE(packed.isOk()) << packed.status().toString();
      all.push_back(*packed);
    }
    const auto base = [](const float* p) { return reinterpret_cast<uintptr_t>(p) >> 21; };
    EXPECT_EQ(base(all[0]->data()), base(all[1]->data())) << "two small buffers in one chunk";
    EXPECT_GE(cpu::weightMemoryChunkCount(), before + 2);
    const auto* first = all[0]->data();
    expectAdvised(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(first) & ~(kHuge - 1)), kHuge,
                  "a chunk of small packed weights");
    for (const auto& p : all) EXPECT_EQ(p->data()[0], 0.5f);
  }
  // Released: only the chunk new buffers are carved from may stay.
  EXPECT_LE(cpu::weightMemoryChunkCount(), before + 1);
}

}  // namespace
}  // namespace verifuse::kernels::gemm
