// The int8 kernel choice (int8_kernel_choice.h): proof first, then the kernel, then the probe.
#include "runtime/int8_kernel_choice.h"

#include <atomic>
#include <map>
#include <mutex>

#include "verifuse/kernels/int8_widening.h"
#include "verifuse/verify/int_dot.h"
#include "verifuse/verify/proof_cache.h"

namespace verifuse::runtime {

namespace {

std::atomic<Int8TestHook> gHook{Int8TestHook::kNone};

/// The schematic lemmas of a declaration, proved once per process (they do not depend on the
/// instance; a few Z3 queries of tens of milliseconds).
const verify::IntDotVariantProof& variantProof(const kernels::IntDotArithmetic& a,
                                               verify::ProofCache* cache = nullptr) {
  static std::mutex m;
  static std::map<std::string, std::unique_ptr<verify::IntDotVariantProof>> proved;
  const std::string key = a.variant + "|" + std::to_string(static_cast<int>(a.source)) + "|" +
                          std::to_string(a.groupSize) + "|" + std::to_string(a.groupBits) + "|" +
                          std::to_string(a.groupSaturates) + "|" + std::to_string(a.accumulatorBits);
  std::lock_guard<std::mutex> lock(m);
  auto it = proved.find(key);
  if (it == proved.end()) {
    verify::ProveOptions opts;
    opts.cache = cache;
    it = proved.emplace(key, std::make_unique<verify::IntDotVariantProof>(verify::proveIntDotVariant(a, opts))).first;
  }
  return *it->second;
}

struct Variant {
  kernels::IntDotArithmetic arithmetic;
  StatusOr<std::unique_ptr<kernels::Kernel>> (*make)(const kernels::Int8Params&);
};

/// The candidates of this tier, fastest first.
std::vector<Variant> candidatesFor(const kernels::Int8Params& p) {
  std::vector<Variant> out;
  kernels::IntDotArithmetic onednn = kernels::onednnInt8Arithmetic(p.srcType);
  if (gHook.load() == Int8TestHook::kOnednnDeclaredExact) {
    onednn.variant = "onednn:vpdpbusd";
    onednn.groupSize = 4;
    onednn.groupBits = 32;
    onednn.groupSaturates = false;
  }
  out.push_back({onednn, &kernels::createInt8Unprobed});
  if (kernels::int8WideningAvailable()) out.push_back({kernels::int8WideningArithmetic(), &kernels::createInt8Widening});
  return out;
}

verify::Verdict notChecked(const char* why) {
  verify::Verdict v;
  v.kind = verify::VerdictKind::Proved;
  v.detail = why;
  return v;
}

}  // namespace

void proveInt8VariantLemmas(verify::ProofCache* cache) {
  for (kernels::Int8Type src : {kernels::Int8Type::kU8, kernels::Int8Type::kS8}) {
    kernels::Int8Params p;
    p.srcType = src;
    for (const Variant& v : candidatesFor(p)) variantProof(v.arithmetic, cache);
  }
}

void setInt8TestHook(Int8TestHook hook) { gHook.store(hook); }
Int8TestHook int8TestHook() { return gHook.load(); }

std::string Int8Choice::summary() const {
  std::string s = kernel ? variant + " (" + kernel->implInfo() + ")" : std::string("no int8 kernel");
  std::string refused;
  for (const Int8Candidate& c : candidates) {
    if (c.variant == variant && kernel) continue;
    if (!refused.empty()) refused += "; ";
    refused += c.variant + ": " + (c.proof.proved() ? c.made.toString() : "not proved exact, " + c.proof.summary());
  }
  if (!refused.empty()) s += (kernel ? "; not used: " : ": ") + refused;
  return s;
}

Int8Choice chooseInt8Kernel(const kernels::Int8Params& p) {
  Int8Choice choice;
  const Int8TestHook hook = gHook.load();
  const int64_t outC = p.weightDims.empty() ? 0 : p.weightDims[0];
  int64_t weightCount = 1;
  for (int64_t d : p.weightDims) weightCount *= d;
  verify::IntDotInstance instance;
  instance.weights = std::span<const int8_t>(p.weights, p.weights ? static_cast<size_t>(weightCount) : 0);
  instance.outputChannels = outC;
  instance.reductionLength = outC > 0 ? weightCount / outC : 0;
  instance.src = p.srcType == kernels::Int8Type::kU8 ? verify::CodeRange{0, 255} : verify::CodeRange{-128, 127};
  instance.zeroPoint = p.srcZeroPoint;
  for (const Variant& v : candidatesFor(p)) {
    Int8Candidate c;
    c.variant = v.arithmetic.variant;
    c.proof = hook == Int8TestHook::kNoProof || hook == Int8TestHook::kNoChecks
                  ? notChecked("not checked (test hook)")
                  : verify::checkIntDotInstance(variantProof(v.arithmetic), instance);
    if (!c.proof.proved()) {
      c.made = Status(StatusCode::kUnsupported, "not tried: its arithmetic is not proved exact here");
      choice.candidates.push_back(std::move(c));
      continue;
    }
    auto made = v.make(p);
    if (made.isOk() && hook != Int8TestHook::kNoChecks) {
      Status probed = kernels::probeInt8Kernel(p, **made);
      if (!probed.isOk()) made = probed;
    }
    c.made = made.status();
    if (made.isOk()) {
      c.impl = (*made)->implInfo();
      choice.kernel = std::shared_ptr<const kernels::Kernel>(std::move(made).value());
      choice.variant = c.variant;
      choice.candidates.push_back(std::move(c));
      break;
    }
    choice.candidates.push_back(std::move(c));
  }
  return choice;
}

}  // namespace verifuse::runtime
