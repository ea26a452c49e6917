#include "verifuse/kernels/cpu_features.h"

#include <gtest/gtest.h>

namespace verifuse::kernels::cpu {
namespace {

TEST(CpuFeatures, IsaNameAgreesWithTheFlags) {
  const std::string isa = isaName();
  if (hasAvx512()) EXPECT_EQ(isa, "avx512");
  else if (hasAvx2Fma()) EXPECT_EQ(isa, "avx2");
  else EXPECT_EQ(isa, "baseline");
}

}  // namespace
}  // namespace verifuse::kernels::cpu
