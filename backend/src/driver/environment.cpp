#include "driver/environment.h"

#include <cstdlib>

namespace verifuse::driver {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

EnginePolicy engineFromEnvironment(EnginePolicy requested) {
  if (requested != EnginePolicy::kAuto) return requested;
  const std::string e = env("VERIFUSE_ENGINE");
  if (e == "aten") return EnginePolicy::kAten;
  if (e == "onednn") return EnginePolicy::kOnednn;
  return EnginePolicy::kAuto;
}

void applyPlannerEnvironment(runtime::CompileOptions& plan) {
  plan.deferPacking = env("VERIFUSE_DEFER_PACKING") != "0";
  const std::string gemm = env("VERIFUSE_GEMM_KERNEL");
  if (gemm == "own") plan.gemmKernel = runtime::GemmKernel::kOwn;
  if (gemm == "mkl") plan.gemmKernel = runtime::GemmKernel::kMkl;
  const std::string weights = env("VERIFUSE_LINEAR_WEIGHTS");
  if (plan.linearWeights == runtime::LinearWeights::kAuto) {
    if (weights == "packed") plan.linearWeights = runtime::LinearWeights::kPacked;
    if (weights == "in-place") plan.linearWeights = runtime::LinearWeights::kInPlace;
  }
  plan.forcedAttention = env("VERIFUSE_ATTENTION");
  plan.forcedLinear = env("VERIFUSE_LINEAR");
  const std::string penalty = env("VERIFUSE_TEST_TUNE_ONEDNN_PENALTY_MS");
  plan.tuningPenaltyMs = penalty.empty() ? 0.0 : std::atof(penalty.c_str());
}

std::string foreignIsaForTests() { return env("VERIFUSE_TEST_CPU_ISA"); }

}  // namespace verifuse::driver
