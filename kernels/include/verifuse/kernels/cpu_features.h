// The capability model, CPU half: what the CPU can do (cpuid and the OS's saved register state),
// capped by one documented variable, asked once per process. No oneDNN here, so verifuse's own
// kernels (kernels/src/cpu) can use it; kernels/capabilities.h adds what oneDNN will dispatch and
// is the one source for the planner, Python, cache keys, reports and tests.
//
// The cap: VERIFUSE_MAX_ISA=<tier> (tier names below). It caps verifuse's own kernels and, through
// kernels::capabilities(), oneDNN too (dnnl::set_max_cpu_isa), so a test or a user can run an
// AVX-512 machine as an AVX2 one. ONEDNN_MAX_CPU_ISA (oneDNN's own variable) caps the same way,
// so the two libraries can never disagree about the tier; the lower of the two wins.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace verifuse::kernels::cpu {

/// The x86 features verifuse's kernels care about.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avxVnni = false;  ///< VEX vpdpbusd (Alder Lake, Zen 5): int8 dot products without saturation
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512Vnni = false;  ///< EVEX vpdpbusd (Cascade Lake, Ice Lake, Zen 4)
  bool avx512Bf16 = false;  ///< vdpbf16ps, vcvtneps2bf16 (Cooper Lake, Sapphire Rapids, Zen 4)
  bool avx512Fp16 = false;
  bool amxTile = false, amxInt8 = false, amxBf16 = false;  ///< with the OS's permission for the tile state

  /// AVX2 + FMA + F16C: the own AVX2 kernels may run.
  bool avx2Fma() const { return avx2 && fma && f16c; }
  /// AVX-512 F/BW/VL/DQ (and the AVX2 set, which every such CPU has).
  bool avx512() const { return avx2Fma() && avx512f && avx512bw && avx512vl && avx512dq; }
  /// u8 x s8 products summed into s32 in hardware without an s16 step that saturates.
  bool int8DotWithoutSaturation() const { return avxVnni || (avx512() && avx512Vnni) || amxInt8; }
  /// bf16 arithmetic in hardware.
  bool nativeBf16() const { return (avx512() && avx512Bf16) || amxBf16; }
};

/// The tiers users run, lowest first. A tier names a feature set (featuresOf); a CPU's tier is the
/// highest one whose features it has.
///   baseline     no AVX2 (verifuse's own kernels take their scalar paths)
///   avx2         AVX2 + FMA + F16C (Haswell .. Comet Lake, Zen 1-3)
///   avx2_vnni    + AVX-VNNI (Alder Lake and later client CPUs, no AVX-512)
///   avx512       + AVX-512 F/BW/VL/DQ, no VNNI (Skylake-SP)
///   avx512_vnni  + AVX512-VNNI (Cascade Lake, Ice Lake)
///   avx512_bf16  + AVX512-BF16 (Cooper Lake, Zen 4, Zen 5)
///   amx          + AVX512-FP16, AMX tiles with int8 and bf16, AVX-VNNI (Sapphire Rapids and later)
enum class Tier { kBaseline, kAvx2, kAvx2Vnni, kAvx512, kAvx512Vnni, kAvx512Bf16, kAmx };

const char* tierName(Tier t);
/// Accepts the names above (case-insensitive) and oneDNN's ONEDNN_MAX_CPU_ISA spellings (AVX2,
/// AVX2_VNNI, AVX512_CORE, AVX512_CORE_VNNI, AVX512_CORE_BF16, AVX512_CORE_FP16, AVX512_CORE_AMX,
/// SSE41, ALL, DEFAULT). nullopt for anything else.
std::optional<Tier> parseTier(std::string_view name);
/// The features a tier stands for (every feature flag of a CPU of that tier that verifuse uses).
CpuFeatures featuresOf(Tier t);
/// The highest tier whose features \p f has (at most \p atMost).
Tier tierOf(const CpuFeatures& f, Tier atMost = Tier::kAmx);

struct CpuCapabilities {
  CpuFeatures detected;  ///< cpuid with OS support (XSAVE state; AMX: the kernel's permission)
  Tier detectedTier = Tier::kBaseline;
  /// The cap in force (VERIFUSE_MAX_ISA and ONEDNN_MAX_CPU_ISA, the lower one), if any.
  std::optional<Tier> cap;
  /// Where the cap came from ("VERIFUSE_MAX_ISA=avx2"), or "" without one.
  std::string capSource;
  /// A cap variable that could not be parsed ("" when none); the variable is then ignored.
  std::string capError;
  Tier tier = Tier::kBaseline;  ///< the tier verifuse runs as: detected, capped
  CpuFeatures usable;           ///< the features verifuse's kernels may use: featuresOf(tier) ∩ detected
};

/// Asked once per process (the environment is read at the first call).
const CpuCapabilities& capabilities();

/// Shorthands for the own kernels: capabilities().usable's predicates.
bool hasAvx2Fma();
bool hasAvx512();
bool hasAvx512Bf16();
/// The tier's name ("avx2", "avx512_bf16", ...): the own kernels' part of tuning keys and reports.
std::string isaName();
/// The timed code's identity in tuning keys: a hash of the own kernels, the oneDNN wrappers and the
/// runtime's fused ops, made at build time from their sources (cmake/HashSources.cmake), so a
/// stored decision never outlives the code it was measured on (it was a hand-set number).
std::string kernelsRevision();

}  // namespace verifuse::kernels::cpu
