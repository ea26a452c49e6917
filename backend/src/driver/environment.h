// The one place the backend reads its environment variables (the kernels' capability model reads
// VERIFUSE_MAX_ISA and the variables it mirrors in kernels/src/cpu/cpu_features.cpp). All are for
// tests, benchmarking and comparisons; read per compile, so a test may set one between compiles.
#pragma once

#include "verifuse/driver/compile.h"
#include "verifuse/runtime/executor.h"

#include <string>

namespace verifuse::driver {

/// VERIFUSE_ENGINE=aten|onednn|auto: the engine policy when the request leaves it to auto.
EnginePolicy engineFromEnvironment(EnginePolicy requested);

/// The planner's knobs: VERIFUSE_DEFER_PACKING=0 (pack inside the plan), VERIFUSE_GEMM_KERNEL=
/// own|mkl|auto, VERIFUSE_LINEAR_WEIGHTS=packed|in-place (when the request says auto),
/// VERIFUSE_ATTENTION=onednn|aten, VERIFUSE_LINEAR=gemm|onednn and the test hook
/// VERIFUSE_TEST_TUNE_ONEDNN_PENALTY_MS.
void applyPlannerEnvironment(runtime::CompileOptions& plan);

/// VERIFUSE_TEST_CPU_ISA (tests/python/test_saved_plans.py): stands in for another CPU's oneDNN
/// ISA in a saved plan's environment key; empty when unset.
std::string foreignIsaForTests();

}  // namespace verifuse::driver
