// The capability model's oneDNN half (capabilities.h): the cap applied to oneDNN before its first
// use, and oneDNN's effective ISA read back.
#include "verifuse/kernels/capabilities.h"

#include "cpu/attention_tiles.h"

#include <dnnl.hpp>


namespace verifuse::kernels {

namespace {

using cpu::Tier;

dnnl::cpu_isa onednnIsaOf(Tier t) {
  switch (t) {
    case Tier::kBaseline: return dnnl::cpu_isa::sse41;
    case Tier::kAvx2: return dnnl::cpu_isa::avx2;
    case Tier::kAvx2Vnni: return dnnl::cpu_isa::avx2_vnni;
    case Tier::kAvx512: return dnnl::cpu_isa::avx512_core;
    case Tier::kAvx512Vnni: return dnnl::cpu_isa::avx512_core_vnni;
    case Tier::kAvx512Bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case Tier::kAmx: return dnnl::cpu_isa::isa_default;  // no cap: everything the CPU has
  }
  return dnnl::cpu_isa::isa_default;
}

const char* onednnIsaName(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  switch (isa) {
    case I::sse41: return "sse41";
    case I::avx: return "avx";
    case I::avx2: return "avx2";
    case I::avx2_vnni: return "avx2_vnni";
    case I::avx2_vnni_2: return "avx2_vnni_2";
    case I::avx512_core: return "avx512_core";
    case I::avx512_core_vnni: return "avx512_core_vnni";
    case I::avx512_core_bf16: return "avx512_core_bf16";
    case I::avx512_core_fp16: return "avx512_core_fp16";
    case I::avx512_core_amx: return "avx512_core_amx";
    case I::avx512_core_amx_fp16: return "avx512_core_amx_fp16";
    case I::isa_default: return "default";
  }
  return "unknown";
}

Tier tierOfOnednn(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  switch (isa) {
    case I::avx2: return Tier::kAvx2;
    case I::avx2_vnni:
    case I::avx2_vnni_2: return Tier::kAvx2Vnni;
    case I::avx512_core: return Tier::kAvx512;
    case I::avx512_core_vnni: return Tier::kAvx512Vnni;
    case I::avx512_core_bf16:
    case I::avx512_core_fp16: return Tier::kAvx512Bf16;
    case I::avx512_core_amx:
    case I::avx512_core_amx_fp16: return Tier::kAmx;
    default: return Tier::kBaseline;
  }
}

Capabilities compute() {
  Capabilities c;
  c.cpu = cpu::capabilities();
  // Applied even without a cap: the CPU half may see less than oneDNN would (AMX without the
  // kernel's permission, say), and the two must never disagree upwards.
  if (c.cpu.tier != Tier::kAmx) {
    try {
      dnnl::set_max_cpu_isa(onednnIsaOf(c.cpu.tier));
    } catch (const dnnl::error& e) {
      c.onednnCapError = std::string("oneDNN's ISA was fixed before verifuse could cap it: ") + e.what();
    }
  }
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  c.onednnIsa = onednnIsaName(isa);
  c.onednnTier = tierOfOnednn(isa);
  return c;
}

}  // namespace

bool Capabilities::onednnNativeBf16() const {
  return onednnTier == Tier::kAvx512Bf16 || onednnTier == Tier::kAmx;
}

bool Capabilities::onednnInt8WithoutSaturation() const {
  return onednnTier == Tier::kAvx2Vnni || onednnTier == Tier::kAvx512Vnni || onednnTier == Tier::kAvx512Bf16 ||
         onednnTier == Tier::kAmx;
}

// The attention kernel's own test (attention.cpp), so the planner and the kernel cannot disagree.
bool Capabilities::attentionOwnTilesF32() const { return cpu::attentionTilesF32Available(); }

std::string Capabilities::summary() const {
  std::string s = std::string("tier ") + cpu::tierName(tier());
  if (cpu.cap) s += std::string(" (capped by ") + cpu.capSource + "; the CPU is " + cpu::tierName(cpu.detectedTier) + ")";
  else s += " (the CPU's own)";
  s += ", oneDNN " + onednnIsa;
  if (!cpu.capError.empty()) s += "; ignored: " + cpu.capError;
  if (!onednnCapError.empty()) s += "; " + onednnCapError;
  return s;
}

const Capabilities& capabilities() {
  static const Capabilities c = compute();
  return c;
}

}  // namespace verifuse::kernels
