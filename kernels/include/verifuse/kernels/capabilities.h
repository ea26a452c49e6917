// The capability model: the one answer to "what may verifuse run on this CPU?". The CPU half
// (cpu_features.h: cpuid, the OS's register state, the VERIFUSE_MAX_ISA / ONEDNN_MAX_CPU_ISA cap)
// plus what oneDNN will really dispatch once that cap is applied to it. Kernels, the planner,
// Python (verifuse._C.capabilities(), `python -m verifuse env`), the tuning and plan-cache keys,
// the report and the tests' skips all read this; nothing else asks cpuid or oneDNN's ISA.
#pragma once

#include <string>

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels {

struct Capabilities {
  cpu::CpuCapabilities cpu;
  /// oneDNN's effective ISA after the cap ("avx2", "avx512_core_vnni", "avx512_core_amx", ...).
  std::string onednnIsa;
  /// The tier oneDNN's ISA amounts to. Never above cpu.tier: the cap is applied to oneDNN before
  /// its first use (dnnl::set_max_cpu_isa); onednnCapError says why when that was too late.
  cpu::Tier onednnTier = cpu::Tier::kBaseline;
  std::string onednnCapError;

  /// The tier everything runs as: the lower of cpu.tier and onednnTier.
  cpu::Tier tier() const { return onednnTier < cpu.tier ? onednnTier : cpu.tier; }
  /// oneDNN's bf16 convolutions and matmuls use bf16 instructions (avx512_core_bf16 or AMX);
  /// below that its bf16 kernels are reference loops or missing.
  bool onednnNativeBf16() const;
  /// oneDNN's u8/s8 x s8 convolutions and matmuls sum products with vpdpbusd (VNNI) or AMX
  /// tdpbusd: exact in s32. Below that they use vpmaddubsw, whose s16 pair sums saturate
  /// (kernels/int_arithmetic.h; oneDNN's doc/advanced/int8_computations.md).
  bool onednnInt8WithoutSaturation() const;
  /// Float32 attention runs both matmuls on verifuse's own AVX-512 register tiles; below that
  /// tier the attention engine calls oneDNN's matmuls per block instead.
  bool attentionOwnTilesF32() const;
  /// One line: "tier avx2 (capped by VERIFUSE_MAX_ISA=avx2; CPU amx), oneDNN avx2".
  std::string summary() const;
};

/// Computed once per process, before oneDNN's first use (onednn::engine() asks for it first).
const Capabilities& capabilities();

}  // namespace verifuse::kernels
