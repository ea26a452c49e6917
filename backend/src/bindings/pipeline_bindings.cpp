// verifuse._C.optimize_and_compile: the C++ half of a compile. Runs the pass pipeline (rules gated
// by their Z3 proofs, folds validated per instance), then builds the executor plan, and returns
// the plan with a report (fusions, proofs, engines) for verifuse.explain().
#include <pybind11/stl.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>

#include "bindings/registry.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/rules/rules.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/verify/catalog.h"
#include "verifuse/verify/proof_cache.h"
#include "verifuse/verify/prover.h"

namespace py = pybind11;

namespace verifuse::bindings {
namespace {

/// Rule proofs are schematic: proved once per process (and once per machine with cache_dir).
class ProofMemo {
 public:
  passes::ProofOutcome prove(const rules::Rule& rule, const std::string& cacheDir) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = outcomes_.find(rule.id());
    if (it != outcomes_.end()) {
      passes::ProofOutcome cached = it->second;
      cached.fromCache = true;
      cached.seconds = 0;
      return cached;
    }
    verify::ProveAllOptions options;
    options.maxK = 2;
    options.checkAxioms = false;
    options.prove.timeoutMs = 5000;
    if (!cacheDir.empty()) {
      auto& cache = caches_[cacheDir];
      if (!cache) cache = std::make_unique<verify::ProofCache>(cacheDir + "/proofs");
      options.prove.cache = cache.get();
    }
    const uint64_t queriesBefore = verify::solverQueryCount();
    auto start = std::chrono::steady_clock::now();
    verify::RuleResult r = verify::proveRule(rule.proof(), options);
    passes::ProofOutcome out;
    out.rule = rule.id();
    out.verdict = verify::verdictKindName(r.verdict.kind);
    out.message = r.verdict.summary();
    if (!r.verdict.counterexample.empty()) out.message += "; counterexample: " + r.verdict.counterexample.toString();
    for (const auto& m : r.mutants) {
      if (!m.killed()) out.message += "; mutant " + m.name + " NOT refuted (" + m.verdict.summary() + ")";
    }
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.fromCache = verify::solverQueryCount() == queriesBefore;
    out.admitted = r.ok();  // Proved, every bounded instance Proved, every mutant Refuted
    outcomes_[rule.id()] = out;
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, passes::ProofOutcome> outcomes_;
  std::map<std::string, std::unique_ptr<verify::ProofCache>> caches_;
};

ProofMemo& proofMemo() {
  static ProofMemo* memo = new ProofMemo();  // never destroyed: used from any thread until exit
  return *memo;
}

[[noreturn]] void raiseStatus(const Status& s) {
  if (s.code() == StatusCode::kUnsupported || s.code() == StatusCode::kUnimplemented) {
    PyErr_SetString(py::module_::import("verifuse._C").attr("UnsupportedError").ptr(), s.toString().c_str());
    throw py::error_already_set();
  }
  throw std::runtime_error(s.toString());
}

const char* foldKindName(rules::FoldRecord::Kind k) {
  switch (k) {
    case rules::FoldRecord::Kind::kBatchNorm: return "batch_norm";
    case rules::FoldRecord::Kind::kChannelMul: return "channel_mul";
    case rules::FoldRecord::Kind::kChannelAdd: return "channel_add";
    case rules::FoldRecord::Kind::kChannelDiv: return "channel_div";
    default: return "none";
  }
}

void registerPipeline(py::module_& m) {
  m.def(
      "optimize_and_compile",
      [](ir::Graph graph, std::vector<int32_t> inputArgIndex, const std::vector<std::pair<int32_t, int32_t>>& frozen,
         int32_t numArgs, const std::string& verifyLevel, bool fuse, bool onednn, bool bf16,
         const std::string& cacheDir, bool plantedBug) {
        passes::PipelineOptions options;
        options.fuse = fuse;
        if (verifyLevel == "off") options.verify = passes::VerifyLevel::kOff;
        else if (verifyLevel == "rules") options.verify = passes::VerifyLevel::kRules;
        else if (verifyLevel == "instances") options.verify = passes::VerifyLevel::kInstances;
        else throw py::value_error("verify must be off, rules or instances");
        options.proveRule = [cacheDir](const rules::Rule& r) { return proofMemo().prove(r, cacheDir); };
        options.validateInstance = passes::validateFoldInstance;
        if (plantedBug) {
          auto planted = rules::plantedBugRule({rules::plantedBugProof()});
          if (!planted.isOk()) raiseStatus(planted.status());
          options.extraRules.push_back(std::move(planted).value());
        }
        std::vector<runtime::FrozenInput> f;
        for (const auto& [arg, constant] : frozen) f.push_back({arg, constant});
        runtime::CompileOptions compileOptions;
        compileOptions.useOnednn = onednn;
        compileOptions.bf16 = bf16;

        StatusOr<passes::PipelineResult> result = passes::PipelineResult{};
        StatusOr<std::shared_ptr<const runtime::CompiledGraph>> compiled = Status::ok();
        double pipelineSeconds = 0, planSeconds = 0;
        {
          py::gil_scoped_release release;
          auto t0 = std::chrono::steady_clock::now();
          result = passes::runPipeline(graph, options);
          auto t1 = std::chrono::steady_clock::now();
          pipelineSeconds = std::chrono::duration<double>(t1 - t0).count();
          if (result.isOk()) {
            compiled = runtime::compileGraph(std::move(graph), std::move(inputArgIndex), std::move(f), numArgs,
                                             compileOptions);
          }
          planSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        }
        if (!result.isOk()) raiseStatus(result.status());
        if (!compiled.isOk()) raiseStatus(compiled.status());

        py::dict report;
        py::list fusions;
        for (const rules::FusionRecord& r : result->fusions) {
          py::dict d;
          d["rule"] = r.rule;
          d["nodes"] = r.nodes;
          d["applied"] = r.applied;
          d["proof"] = r.proofVerdict;
          d["instance"] = r.instance.verdict;
          d["verdict"] = !r.applied ? "Refuted (instance)" : r.proofVerdict;
          d["fold"] = foldKindName(r.fold.kind);
          d["max_error_bound"] = r.instance.maxErrorBound;
          d["max_error"] = r.instance.maxError;
          d["detail"] = r.instance.detail;
          fusions.append(d);
        }
        report["fusions"] = fusions;
        py::list proofs;
        for (const passes::ProofOutcome& p : result->proofs) {
          py::dict d;
          d["rule"] = p.rule;
          d["verdict"] = p.verdict;
          d["message"] = p.message;
          d["seconds"] = p.seconds;
          d["cached"] = p.fromCache;
          d["admitted"] = p.admitted;
          proofs.append(d);
        }
        report["proofs"] = proofs;
        report["rules_matched"] = result->rulesMatched;
        report["rules_applied"] = result->rulesApplied;
        report["rules_refused"] = result->rulesRefused;
        report["pass_changes"] = result->passChanges;
        report["pipeline_seconds"] = pipelineSeconds;
        report["plan_seconds"] = planSeconds;
        const auto& cg = **compiled;
        report["engines"] = cg.nodeEngines();
        auto stats = cg.stats();
        report["fused_steps"] = stats.fusedSteps;
        report["onednn_steps"] = stats.onednnSteps;
        report["constant_folded_steps"] = stats.constantFoldedSteps;
        return py::make_tuple(std::const_pointer_cast<runtime::CompiledGraph>(*compiled), report);
      },
      py::arg("graph"), py::arg("input_arg_index"), py::arg("frozen"), py::arg("num_args"),
      py::arg("verify") = "instances", py::arg("fuse") = true, py::arg("onednn") = true, py::arg("bf16") = false,
      py::arg("cache_dir") = "", py::arg("planted_bug") = false,
      "Runs the fusion pipeline and builds the plan: returns (CompiledGraph, report dict).");
}

VERIFUSE_REGISTER_BINDINGS(pipeline, registerPipeline);

}  // namespace
}  // namespace verifuse::bindings
