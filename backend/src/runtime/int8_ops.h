// verifuse::qconv / verifuse::qlinear: the int8 ops the quantized rules produce
// (backend/src/rules/quantized.cpp), registered with the dispatcher so the executor runs them as
// ordinary steps. Internal to the runtime (LibTorch).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/int8_kernel_choice.h"

namespace c10 {
struct TensorImpl;
}

namespace verifuse::runtime {

/// Which kernel an int8 op chose for one configuration (shape, layout, parameters) of a weight, and
/// why: the report's int8 rows.
struct Int8Decision {
  std::string op;                           ///< "verifuse::qconv", "verifuse::qlinear", "verifuse::int_mm"
  const c10::TensorImpl* weight = nullptr;  ///< the weight tensor it was made for (identity only)
  std::string variant;                      ///< the chosen variant, or "" (the ATen reference runs)
  std::string impl;                         ///< the kernel's implementation name, or ""
  std::string summary;                      ///< Int8Choice::summary()
  std::vector<Int8Candidate> candidates;
};

/// The decisions made so far (kernels made at a first run) for int8 ops whose weight is \p weight.
std::vector<std::shared_ptr<const Int8Decision>> int8DecisionsFor(const c10::TensorImpl* weight);

/// Registers the int8 operators (qconv, qlinear, quantize, int_mm, int8_weight_mm, int4_weight_mm,
/// qmax_pool), once per process (later calls do nothing). The executor calls it before planning a
/// graph that holds them.
void registerInt8Ops();

}  // namespace verifuse::runtime
