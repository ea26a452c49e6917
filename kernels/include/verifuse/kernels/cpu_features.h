// What the CPU verifuse runs on can do, asked once at run time (cpuid), for choosing between the
// own kernels' ISA variants. oneDNN makes its own choice (kernels::cpuIsaName()).
#pragma once

#include <string>

namespace verifuse::kernels::cpu {

/// AVX2 + FMA + F16C, and the OS saves the YMM state: the own AVX2 kernels may run.
bool hasAvx2Fma();
/// AVX-512 F/BW/VL/DQ with OS support for the ZMM state.
bool hasAvx512();
/// hasAvx512() and AVX512-BF16 (vdpbf16ps, vcvtneps2bf16).
bool hasAvx512Bf16();
/// Short description for reports and tuning keys, e.g. "avx2" or "avx512" or "baseline".
std::string isaName();
/// Bumped whenever an own kernel's speed changes enough to make old tuning decisions stale (the
/// tuning key holds it): "2" = the AVX-512 GEMM, "3" = its bf16 variant, "4" = epilogue operands
/// prefetched and the bf16 epilogue in registers.
std::string kernelsRevision();

}  // namespace verifuse::kernels::cpu
