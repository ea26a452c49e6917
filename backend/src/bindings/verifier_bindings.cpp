// verifuse._C.prove_all: proves every rule the pass pipeline uses (passes::pipelineRuleProofs(),
// declared with their rules in backend/src/rules/) and every int8 kernel variant's arithmetic
// (passes::kernelArithmeticProofs()), and refutes every mutant.
// pybind11 only (no LibTorch, no Z3: the verifier's public headers are Z3-free).
#include <optional>
#include <stdexcept>

#include "bindings/registry.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/verify/catalog.h"
#include "verifuse/verify/proof_cache.h"
#include "verifuse/verify/prover.h"

namespace py = pybind11;

namespace {

void registerVerifier(py::module_& m) {
  m.def(
      "prove_all",
      [](int timeoutMs, int maxK, const std::string& cacheDir, bool asJson) {
        verifuse::verify::ProveAllOptions options;
        options.prove.timeoutMs = timeoutMs;
        options.maxK = maxK;
        std::optional<verifuse::verify::ProofCache> cache;
        if (!cacheDir.empty()) {
          cache.emplace(cacheDir);
          options.prove.cache = &*cache;
        }
        auto proofs = verifuse::passes::pipelineRuleProofs();
        if (!proofs.isOk()) throw std::runtime_error(proofs.status().toString());
        auto kernelProofs = verifuse::passes::kernelArithmeticProofs();
        if (!kernelProofs.isOk()) throw std::runtime_error(kernelProofs.status().toString());
        proofs->insert(proofs->end(), kernelProofs->begin(), kernelProofs->end());
        verifuse::verify::ProveReport report;
        {
          py::gil_scoped_release release;
          report = verifuse::verify::proveAll(*proofs, options);
        }
        return py::make_tuple(report.ok(), asJson ? report.toJson() : report.toText());
      },
      py::arg("timeout_ms") = 5000, py::arg("max_k") = 4, py::arg("cache_dir") = "", py::arg("json") = false,
      "Returns (ok, text or JSON): ok is True only if every rule is Proved and every mutant Refuted.");
}

VERIFUSE_REGISTER_BINDINGS(verifier, registerVerifier);

}  // namespace
