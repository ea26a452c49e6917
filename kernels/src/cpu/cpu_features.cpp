// The capability model, CPU half (cpu_features.h): cpuid and xgetbv, then the cap.
#include "verifuse/kernels/cpu_features.h"
#include "verifuse_kernels_fingerprint.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>

namespace verifuse::kernels::cpu {

namespace {

struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}
bool bit(unsigned reg, int b) { return ((reg >> b) & 1u) != 0; }

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

/// Linux hands the AMX tile data state to a process only after it asks (arch_prctl
/// ARCH_REQ_XCOMP_PERM); oneDNN asks the same way before its AMX kernels. Without the permission the
/// first tile instruction faults, so a CPU whose kernel refuses is not an AMX CPU for verifuse.
bool amxPermitted() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymmState = (xcr0 & 0x6) == 0x6;             // SSE + AVX state
  const bool zmmState = ymmState && (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool tileState = (xcr0 & 0x60000) == 0x60000;       // XTILECFG, XTILEDATA
  const Regs l7 = cpuid(7, 0);
  const Regs l7s1 = l7.a >= 1 ? cpuid(7, 1) : Regs{};
  if (ymmState) {
    f.avx2 = bit(l7.b, 5);
    f.fma = bit(l1.c, 12);
    f.f16c = bit(l1.c, 29);
    f.avxVnni = bit(l7s1.a, 4);
  }
  if (zmmState) {
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512Vnni = bit(l7.c, 11);
    f.avx512Bf16 = bit(l7s1.a, 5);
    f.avx512Fp16 = bit(l7.d, 23);
  }
  if (tileState && bit(l7.d, 24) && amxPermitted()) {
    f.amxTile = true;
    f.amxBf16 = bit(l7.d, 22);
    f.amxInt8 = bit(l7.d, 25);
  }
  return f;
}

CpuFeatures both(const CpuFeatures& a, const CpuFeatures& b) {
  CpuFeatures r;
  r.avx2 = a.avx2 && b.avx2;
  r.fma = a.fma && b.fma;
  r.f16c = a.f16c && b.f16c;
  r.avxVnni = a.avxVnni && b.avxVnni;
  r.avx512f = a.avx512f && b.avx512f;
  r.avx512bw = a.avx512bw && b.avx512bw;
  r.avx512vl = a.avx512vl && b.avx512vl;
  r.avx512dq = a.avx512dq && b.avx512dq;
  r.avx512Vnni = a.avx512Vnni && b.avx512Vnni;
  r.avx512Bf16 = a.avx512Bf16 && b.avx512Bf16;
  r.avx512Fp16 = a.avx512Fp16 && b.avx512Fp16;
  r.amxTile = a.amxTile && b.amxTile;
  r.amxInt8 = a.amxInt8 && b.amxInt8;
  r.amxBf16 = a.amxBf16 && b.amxBf16;
  return r;
}

bool includes(const CpuFeatures& have, const CpuFeatures& need) {
  const CpuFeatures common = both(have, need);
  return common.avx2 == need.avx2 && common.fma == need.fma && common.f16c == need.f16c &&
         common.avxVnni == need.avxVnni && common.avx512f == need.avx512f && common.avx512bw == need.avx512bw &&
         common.avx512vl == need.avx512vl && common.avx512dq == need.avx512dq &&
         common.avx512Vnni == need.avx512Vnni && common.avx512Bf16 == need.avx512Bf16 &&
         common.avx512Fp16 == need.avx512Fp16 && common.amxTile == need.amxTile && common.amxInt8 == need.amxInt8 &&
         common.amxBf16 == need.amxBf16;
}

std::string upper(std::string_view s) {
  std::string u(s);
  std::transform(u.begin(), u.end(), u.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return u;
}

CpuCapabilities compute() {
  CpuCapabilities c;
  c.detected = detect();
  c.detectedTier = tierOf(c.detected);
  for (const char* var : {"VERIFUSE_MAX_ISA", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(var);
    if (value == nullptr || *value == '\0') continue;
    std::optional<Tier> t = parseTier(value);
    if (!t) {
      if (c.capError.empty()) c.capError = std::string(var) + "=" + value + " is not a tier name";
      continue;
    }
    if (!c.cap || *t < *c.cap) {
      c.cap = *t;
      c.capSource = std::string(var) + "=" + value;
    }
  }
  c.tier = tierOf(c.detected, c.cap ? std::min(*c.cap, c.detectedTier) : c.detectedTier);
  c.usable = both(c.detected, featuresOf(c.tier));
  return c;
}

}  // namespace

const char* tierName(Tier t) {
  switch (t) {
    case Tier::kBaseline: return "baseline";
    case Tier::kAvx2: return "avx2";
    case Tier::kAvx2Vnni: return "avx2_vnni";
    case Tier::kAvx512: return "avx512";
    case Tier::kAvx512Vnni: return "avx512_vnni";
    case Tier::kAvx512Bf16: return "avx512_bf16";
    case Tier::kAmx: return "amx";
  }
  return "baseline";
}

std::optional<Tier> parseTier(std::string_view name) {
  const std::string u = upper(name);
  if (u == "BASELINE" || u == "SSE41" || u == "AVX") return Tier::kBaseline;
  if (u == "AVX2") return Tier::kAvx2;
  if (u == "AVX2_VNNI" || u == "AVX2_VNNI_2") return Tier::kAvx2Vnni;
  if (u == "AVX512" || u == "AVX512_CORE") return Tier::kAvx512;
  if (u == "AVX512_VNNI" || u == "AVX512_CORE_VNNI") return Tier::kAvx512Vnni;
  if (u == "AVX512_BF16" || u == "AVX512_CORE_BF16") return Tier::kAvx512Bf16;
  if (u == "AMX" || u == "AVX512_CORE_FP16" || u == "AVX512_CORE_AMX" || u == "AVX512_CORE_AMX_FP16" || u == "ALL" ||
      u == "DEFAULT") {
    return Tier::kAmx;
  }
  return std::nullopt;
}

CpuFeatures featuresOf(Tier t) {
  CpuFeatures f;
  if (t == Tier::kBaseline) return f;
  f.avx2 = f.fma = f.f16c = true;
  if (t == Tier::kAvx2) return f;
  if (t == Tier::kAvx2Vnni) {
    f.avxVnni = true;
    return f;
  }
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  if (t == Tier::kAvx512) return f;
  f.avx512Vnni = true;
  if (t == Tier::kAvx512Vnni) return f;
  f.avx512Bf16 = true;
  if (t == Tier::kAvx512Bf16) return f;
  f.avxVnni = f.avx512Fp16 = f.amxTile = f.amxInt8 = f.amxBf16 = true;
  return f;
}

Tier tierOf(const CpuFeatures& f, Tier atMost) {
  // A tier's defining features only: an AMX CPU without AVX-VNNI or FP16 is still an AMX CPU for
  // verifuse (its kernels use neither), so those two do not decide the tier.
  for (int t = static_cast<int>(atMost); t > 0; --t) {
    CpuFeatures need = featuresOf(static_cast<Tier>(t));
    if (static_cast<Tier>(t) == Tier::kAmx) need.avxVnni = need.avx512Fp16 = false;
    if (includes(f, need)) return static_cast<Tier>(t);
  }
  return Tier::kBaseline;
}

const CpuCapabilities& capabilities() {
  static const CpuCapabilities c = compute();
  return c;
}

bool hasAvx2Fma() { return capabilities().usable.avx2Fma(); }
bool hasAvx512() { return capabilities().usable.avx512(); }
bool hasAvx512Bf16() { return capabilities().usable.avx512() && capabilities().usable.avx512Bf16; }

std::string isaName() { return tierName(capabilities().tier); }

std::string kernelsRevision() { return VERIFUSE_KERNELS_FINGERPRINT; }

}  // namespace verifuse::kernels::cpu
