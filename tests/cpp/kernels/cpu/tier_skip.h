// Skips for the own kernels' tests that name what a test needs and the tier this run has (the
// capability model's CPU half: a run capped by VERIFUSE_MAX_ISA says so), never "this CPU".
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu::testing {

inline std::string thisRun() {
  const CpuCapabilities& c = capabilities();
  std::string s = std::string("; this run: tier ") + tierName(c.tier);
  if (c.cap) s += std::string(" (capped by ") + c.capSource + "; the CPU is " + tierName(c.detectedTier) + ")";
  return s;
}

}  // namespace verifuse::kernels::cpu::testing

/// GTEST_SKIP() with "needs <what>; this run: tier ...".
#define VF_CPU_SKIP(what) GTEST_SKIP() << "needs " << (what) << ::verifuse::kernels::cpu::testing::thisRun()
