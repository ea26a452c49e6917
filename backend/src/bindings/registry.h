// Self-registration of pybind11 binding groups into the single `verifuse._C` extension module.
// Each bindings TU registers a function at static-initialization time; module.cpp runs them all
// in name order (deterministic) when Python imports verifuse._C.
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <map>
#include <string>

#include "verifuse/support/status.h"

namespace verifuse::runtime {
class CompiledGraph;
}

namespace verifuse::bindings {

using BindingFn = std::function<void(pybind11::module_&)>;

/// All registered binding groups, keyed (and therefore ordered) by name.
inline std::map<std::string, BindingFn>& bindingRegistry() {
  static std::map<std::string, BindingFn> registry;
  return registry;
}

/// Raises the Python exception for \p status (never returns): StaleWeightsError (its subclass
/// WeightsModifiedError for kWeightsModified), UnsupportedError (kUnsupported/kUnimplemented; its
/// subclass NeedsExactPlanError for kNeedsExactPlan), ValueError (kInvalidGraph), or RuntimeError with ATen's own
/// message for kInvalidArgument. Defined in module.cpp; every binding group uses it.
[[noreturn]] void raise(const Status& status);

/// A compiled graph's step counts (dispatcher, builtin, fused, oneDNN, constant-folded) and op
/// histogram: CompiledGraph.stats() in Python, and part of optimize_and_compile's report.
/// Defined in module.cpp.
pybind11::dict statsDict(const runtime::CompiledGraph& graph);

struct BindingRegistrar {
  BindingRegistrar(const char* name, BindingFn fn) { bindingRegistry().emplace(name, std::move(fn)); }
};

}  // namespace verifuse::bindings

/// VERIFUSE_REGISTER_BINDINGS(shapes, [](pybind11::module_& m) { m.def(...); });
#define VERIFUSE_REGISTER_BINDINGS(name, fn) \
  static ::verifuse::bindings::BindingRegistrar verifuse_bindings_registrar_##name(#name, fn)
