// verifuse::qconv / verifuse::qlinear: the int8 ops the quantized rules produce
// (backend/src/rules/quantized.cpp), registered with the dispatcher so the executor runs them as
// ordinary steps. Internal to the runtime (LibTorch).
#pragma once

namespace verifuse::runtime {

/// Registers the two operators (once per process; later calls do nothing). The executor calls it
/// before planning a graph that holds them.
void registerInt8Ops();

}  // namespace verifuse::runtime
