// Which kernel runs an int8 convolution or linear, and why. The candidates are the kernel variants
// of this tier, fastest first: oneDNN's (vpdpbusd / AMX where the tier has VNNI, vpmaddubsw's
// saturating s16 pairs below) and verifuse's own widening kernel (kernels/int8_widening.h). A
// candidate runs an instance only if
//   1. its declared integer arithmetic (kernels/int_arithmetic.h) is proved exact for the instance's
//      real weights and the source's code range, zero point included (verifier/int_dot.h): Proved,
//      never Unknown or Timeout; and then
//   2. its kernel passes the probe (kernels::probeInt8Kernel, codes at the extremes): a second check
//      that the kernel computes what it declares, never the proof.
// When no candidate qualifies the caller runs the quantized graph's own ATen ops (eager's values).
// Torch-free: the runtime's int8 ops (int8_ops.cpp) call it once per kernel configuration.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/kernels/int8.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/support/status.h"
#include "verifuse/verify/verdict.h"

namespace verifuse::verify {
class ProofCache;
}

namespace verifuse::runtime {

/// One candidate variant and what became of it.
struct Int8Candidate {
  std::string variant;    ///< the declaration's name: "onednn:vpdpbusd", "onednn:vpmaddubsw", "own:vpmaddwd"
  verify::Verdict proof;  ///< the instance's exactness verdict for this variant
  Status made;            ///< creation and probe; kUnsupported "not tried" when not proved
  std::string impl;       ///< the kernel's implementation name when made
};

struct Int8Choice {
  std::shared_ptr<const kernels::Kernel> kernel;  ///< null: no candidate qualified
  std::string variant;                            ///< the chosen candidate's variant, or ""
  std::vector<Int8Candidate> candidates;          ///< every candidate tried, in order
  /// One line: "own:vpmaddwd (onednn:vpmaddubsw refuted: ...)" or why none qualified.
  std::string summary() const;
};

/// Test hooks that switch the checks off, to show that the tests fail without them. Process-wide;
/// set only by tests (verifuse._C._set_int8_test_hook).
enum class Int8TestHook {
  kNone,
  kNoProof,              ///< every variant taken as proved (the probe still runs)
  kNoChecks,             ///< neither proof nor probe: the first kernel that can be made runs
  kOnednnDeclaredExact,  ///< oneDNN's kernels declared vpdpbusd on every tier (a lying declaration)
};
void setInt8TestHook(Int8TestHook hook);
Int8TestHook int8TestHook();

/// Proves the lemmas of this tier's candidate variants now (once per process), through \p cache
/// (may be null), so that an int8 op's first run does not wait for Z3. The driver calls it for
/// graphs with int8 ops; chooseInt8Kernel proves whatever is still missing itself.
void proveInt8VariantLemmas(verify::ProofCache* cache);

/// Whether \p op is one of the ops that choose an int8 kernel at their first run.
inline bool isInt8KernelOp(std::string_view op) {
  return op == "verifuse::qconv" || op == "verifuse::qlinear" || op == "verifuse::int_mm";
}

/// Chooses the kernel for \p p (the parameters of kernels::createInt8), its source codes' range
/// being the whole range of p.srcType.
Int8Choice chooseInt8Kernel(const kernels::Int8Params& p);

}  // namespace verifuse::runtime
