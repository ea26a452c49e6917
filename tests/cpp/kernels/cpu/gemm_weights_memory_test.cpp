// Packed weights are asked to live in transparent huge pages (cpu/weight_memory.h): a GEMM
// streams its weights once per call, and on 4 KiB pages every page of a weight matrix that is not
// in the TLB costs a page walk (decode-sized calls read nothing else). Large buffers have pages
// of their own, small ones share 2 MiB chunks.
// Checked where the kernel says it holds them: the AnonHugePages line of the mapping in
// /proc/self/smaps. Skipped only where this kernel gives no huge pages to madvised memory.
#include "verifuse/kernels/gemm.h"

#include "cpu/weight_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace verifuse::kernels::gemm {
namespace {

/// The bracketed word of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise",
/// "never"), or "" without THP.
std::string transparentHugePageMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(f, line)) return "";
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
}

/// AnonHugePages (kB) of the mapping holding \p p; -1 when no mapping holds it.
long anonHugePagesKb(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> start >> dash >> end && dash == '-') {  // a mapping's first line
      inside = address >= start && address < end;
      continue;
    }
    long kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) return kb;
  }
  return -1;
}

class GemmWeightsMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string mode = transparentHugePageMode();
    if (mode != "always" && mode != "madvise") {
      GTEST_SKIP() << "transparent huge pages are " << (mode.empty() ? "not available" : mode) << " here";
    }
    if (!available()) GTEST_SKIP() << "no GEMM kernel for this CPU";
  }

  // 16 MiB of float32 weights: far more than one 2 MiB page.
  static constexpr int64_t kK = 1024, kN = 4096;
  std::vector<float> weights_ = std::vector<float>(static_cast<size_t>(kK * kN), 0.5f);
};

TEST_F(GemmWeightsMemory, LargeFloat32WeightsAreInHugePages) {
  auto packed = packWeights(weights_.data(), kK, kN, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  const long kb = anonHugePagesKb((*packed)->data());
  ASSERT_GE(kb, 0) << "no mapping holds the packed weights";
  // Whole 2 MiB pages; the buffer is 2 MiB aligned, so all but a page's worth of it at most.
  EXPECT_GE(kb, 8 * 1024) << "16 MiB of packed weights, " << kb << " kB of them in huge pages";
  EXPECT_EQ((*packed)->data()[0], 0.5f);  // the pages hold what was packed
}

TEST_F(GemmWeightsMemory, LargeBfloat16WeightsAreInHugePages) {
  if (!availableBf16()) GTEST_SKIP() << "no AVX512-BF16";
  auto packed = packWeightsBf16(weights_.data(), kK, kN, WeightOrder::kNK);
  ASSERT_TRUE(packed.isOk()) << packed.status().toString();
  const long kb = anonHugePagesKb((*packed)->data());
  ASSERT_GE(kb, 0) << "no mapping holds the packed weights";
  EXPECT_GE(kb, 4 * 1024) << "8 MiB of packed bf16 weights, " << kb << " kB of them in huge pages";
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
    const long kb = anonHugePagesKb(all[0]->data());
    EXPECT_GE(kb, 2048) << "a chunk of small packed weights, " << kb << " kB of it in huge pages";
    for (const auto& p : all) EXPECT_EQ(p->data()[0], 0.5f);
  }
  // Released: only the chunk new buffers are carved from may stay.
  EXPECT_LE(cpu::weightMemoryChunkCount(), before + 1);
}

}  // namespace
}  // namespace verifuse::kernels::gemm
