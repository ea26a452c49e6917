// cpuid-based feature detection (GCC's __builtin_cpu_supports checks the OS's XSAVE state too).
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

bool hasAvx2Fma() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  }();
  return yes;
}

bool hasAvx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
}

bool hasAvx512Bf16() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return hasAvx512() && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
}

std::string isaName() {
  if (hasAvx512()) return "avx512";
  if (hasAvx2Fma()) return "avx2";
  return "baseline";
}

std::string kernelsRevision() { return "4"; }

}  // namespace verifuse::kernels::cpu
