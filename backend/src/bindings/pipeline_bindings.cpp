// verifuse._C.optimize_and_compile: translates a Python compile request into a
// driver::CompileRequest and the driver's CompileReport into a dict whose keys are the field
// names of the Python GraphReport. No pipeline logic here (that is driver::compile).
#include <pybind11/stl.h>

#include "bindings/registry.h"
#include "bindings/shapes_bindings.h"
#include "verifuse/driver/compile.h"

namespace py = pybind11;

namespace verifuse::bindings {
namespace {

const char* foldKindName(rules::FoldRecord::Kind k) {
  switch (k) {
    case rules::FoldRecord::Kind::kBatchNorm: return "batch_norm";
    case rules::FoldRecord::Kind::kChannelMul: return "channel_mul";
    case rules::FoldRecord::Kind::kChannelAdd: return "channel_add";
    case rules::FoldRecord::Kind::kChannelDiv: return "channel_div";
    case rules::FoldRecord::Kind::kConcat: return "concat";
    case rules::FoldRecord::Kind::kInt8Scales: return "int8_scales";
    default: return "none";
  }
}

py::object msOrNone(const std::map<std::string, double>& ms, const char* engine) {
  auto it = ms.find(engine);
  return it == ms.end() ? py::object(py::none()) : py::object(py::float_(it->second));
}

/// A node's graph-only report fields: id, op, inputs (a producer's node id, or "%name" for a graph
/// input, as the conversions' producers), fusion (None when it has none).
py::dict nodeDict(const driver::NodeReport& n) {
  py::dict x;
  x["id"] = n.id;
  x["op"] = n.op;
  py::list inputs;
  for (const driver::NodeInputReport& in : n.inputs) {
    if (in.producer >= 0) inputs.append(in.producer);
    else inputs.append("%" + in.graphInput);
  }
  x["inputs"] = inputs;
  x["fusion"] = n.fusion.empty() ? py::object(py::none()) : py::object(py::str(n.fusion));
  return x;
}

py::dict toDict(const driver::CompileReport& r, const runtime::CompiledGraph& plan) {
  py::dict d;
  py::list fusions;
  for (const rules::FusionRecord& f : r.fusions) {
    py::dict x;
    x["rule"] = f.rule;
    x["nodes"] = f.nodes;
    x["applied"] = f.applied;
    x["proof"] = f.proofVerdict;
    x["instance"] = f.instance.verdict;
    x["verdict"] = !f.applied ? "Refuted (instance)" : f.proofVerdict;
    x["fold"] = foldKindName(f.fold.kind);
    x["max_error_bound"] = f.instance.maxErrorBound;
    x["max_error"] = f.instance.maxError;
    x["detail"] = f.instance.detail;
    x["layer_check"] = f.instance.layerVerdict;
    x["layer_check_detail"] = f.instance.layerDetail;
    x["layer_check_seconds"] = f.instance.layerSeconds;
    fusions.append(x);
  }
  d["fusions"] = fusions;
  py::list proofs;
  for (const passes::ProofOutcome& p : r.proofs) {
    py::dict x;
    x["rule"] = p.rule;
    x["verdict"] = p.verdict;
    x["message"] = p.message;
    x["seconds"] = p.seconds;
    x["cached"] = p.fromCache;
    x["admitted"] = p.admitted;
    proofs.append(x);
  }
  d["proofs"] = proofs;
  const ir::Graph& g = plan.graph();
  py::list partitions;
  for (size_t k = 0; k < r.partitions.size(); ++k) {
    const runtime::PartitionDecision& p = r.partitions[k];
    py::dict x;
    x["id"] = static_cast<int>(k);
    x["nodes"] = p.nodes;
    py::list ops;
    for (ir::NodeId id : p.nodes) ops.append(g.node(id).qualifiedName());
    x["ops"] = ops;
    x["engine"] = p.engine;
    x["candidates"] = p.candidateMs;
    x["onednn_ms"] = msOrNone(p.candidateMs, "onednn");
    x["aten_ms"] = msOrNone(p.candidateMs, "aten");
    x["how"] = p.how;
    x["split"] = p.split;
    x["layout"] = p.layout;
    x["input_conversions"] = p.inputConversions;
    x["output_conversions"] = p.outputConversions;
    x["weight_copy_bytes"] = p.weightCopyBytes;
    x["shared_weight_copy_bytes"] = p.sharedWeightCopyBytes;
    x["weight_layout"] = p.weightLayout;
    x["dtype"] = p.dtype;
    x["impl"] = p.impl;
    x["runs_on"] = p.runsOn;
    x["macs"] = p.macs;
    py::list conversions;
    for (const runtime::EdgeConversion& c : p.conversions) {
      py::dict e;
      const ir::Value& v = g.value(c.value);
      e["value"] = v.name;
      // Where the tensor comes from: a node id, or "%name" for a graph input (as nodes' inputs).
      e["producer"] = v.producer >= 0 ? py::object(py::int_(v.producer)) : py::object(py::str("%" + v.name));
      e["node"] = c.node;
      e["direction"] = c.input ? "input" : "output";
      e["kind"] = c.kind;
      e["bytes"] = c.bytes;
      conversions.append(e);
    }
    x["conversions"] = conversions;
    partitions.append(x);
  }
  d["partitions"] = partitions;
  py::list nodes;
  py::list engines;
  for (const driver::NodeReport& n : r.nodes) {
    py::dict x = nodeDict(n);
    x["partition"] = n.partition >= 0 ? py::object(py::int_(n.partition)) : py::object(py::none());
    x["engine"] = n.engine == "onednn" ? "onednn" : "aten";
    x["runs_on"] = n.runsOn;
    x["timings"] = n.timings;
    nodes.append(x);
    engines.append(n.engine);
  }
  d["nodes"] = nodes;
  d["engines"] = engines;
  d["reorders"] = r.reorders;
  d["reorders_before"] = r.reordersBefore;
  d["timings_run"] = r.timingsRun;
  d["tuning_inputs_made"] = r.stats.tuningInputsMade;
  d["tuning_inputs_through_views"] = r.stats.tuningInputsThroughViews;
  d["plan_passes"] = r.stats.planPassesChanged;
  d["in_place_writes"] = r.stats.inPlaceWrites;
  d["tuning_db"] = r.tuningDb;
  d["tuning_db_hits"] = r.tuningDbHits;
  d["tuning_db_rebuilt"] = r.tuningDbRebuilt;
  d["pipeline_seconds"] = r.pipelineSeconds;
  d["plan_seconds"] = r.planSeconds;
  d["rules_matched"] = r.rulesMatched;
  d["rules_applied"] = r.rulesApplied;
  d["rules_refused"] = r.rulesRefused;
  d["pass_changes"] = r.passChanges;
  d["rewrites"] = r.rewrites;
  py::list misses;
  for (const passes::NearMiss& n : r.nearMisses) {
    py::dict x;
    x["rule"] = n.rule;
    x["op"] = n.op;
    x["name"] = n.name;
    x["reason"] = n.reason;
    misses.append(x);
  }
  d["near_misses"] = misses;
  d["near_misses_omitted"] = r.nearMissesOmitted;
  d["ops"] = r.ops;
  d["onednn_steps"] = r.stats.onednnSteps;
  d["weight_copy_bytes"] = r.stats.weightCopyBytes;
  d["shared_weight_copy_bytes"] = r.stats.sharedWeightCopyBytes;
  d["graph_text"] = ir::printGraph(g);
  d["num_nodes"] = static_cast<int>(r.nodes.size());
  d["num_constants"] = static_cast<int>(r.stats.constants);
  return d;
}

driver::EnginePolicy parseEngines(const std::string& name) {
  if (name == "auto") return driver::EnginePolicy::kAuto;
  if (name == "aten") return driver::EnginePolicy::kAten;
  if (name == "onednn") return driver::EnginePolicy::kOnednn;
  throw py::value_error("engines must be auto, aten or onednn");
}

runtime::LinearWeights parseLinearWeights(const std::string& name) {
  if (name == "auto") return runtime::LinearWeights::kAuto;
  if (name == "packed") return runtime::LinearWeights::kPacked;
  if (name == "in-place") return runtime::LinearWeights::kInPlace;
  throw py::value_error("linear_weights must be auto, packed or in-place");
}

passes::VerifyLevel parseVerify(const std::string& name) {
  if (name == "off") return passes::VerifyLevel::kOff;
  if (name == "rules") return passes::VerifyLevel::kRules;
  if (name == "instances") return passes::VerifyLevel::kInstances;
  throw py::value_error("verify must be off, rules or instances");
}

void registerPipeline(py::module_& m) {
  m.def(
      "graph_nodes",
      [](const std::string& text) {
        auto graph = ir::parseGraph(text);
        if (!graph.isOk()) throw py::value_error(graph.status().message());
        py::list nodes;
        for (const driver::NodeReport& n : driver::describeGraphNodes(*graph)) {
          py::dict x = nodeDict(n);
          x["graph_output"] = n.graphOutput;
          nodes.append(x);
        }
        return nodes;
      },
      "The nodes of a graph given as IR text, as the report pictures them (driver::describeGraphNodes): "
      "id, op, inputs, fusion, graph_output. ValueError when the text does not parse.");
  m.def(
      "optimize_and_compile",
      [](ir::Graph graph, std::vector<int32_t> inputArgIndex, const std::vector<std::pair<int32_t, int32_t>>& frozen,
         int32_t numArgs, const std::string& verify, bool fuse, const std::string& engines, bool bf16,
         const std::string& cacheDir, bool plantedBug, bool autotune, int64_t layerCheckWeights,
         const py::object& shapeFacts, const std::string& linearWeights, const std::string& environment,
         const py::object& savedPlan, bool planCache, const std::vector<std::pair<int32_t, int32_t>>& writtenBack) {
        driver::CompileRequest request;
        request.writtenBack = writtenBack;
        request.inputArgIndex = std::move(inputArgIndex);
        for (const auto& [arg, constant] : frozen) request.frozen.push_back({arg, constant});
        request.numArgs = numArgs;
        request.verify = parseVerify(verify);
        request.fuse = fuse;
        request.engines = parseEngines(engines);
        request.bf16 = bf16;
        request.cacheDir = cacheDir;
        request.plantedBug = plantedBug;
        request.autotune = autotune;
        request.layerCheckWeights = layerCheckWeights;
        request.linearWeights = parseLinearWeights(linearWeights);
        request.shapeFacts = shapeFactsFrom(shapeFacts);
        request.environment = environment;
        request.planCache = planCache;
        if (!savedPlan.is_none()) {
          auto decoded = driver::SavedPlan::decode(savedPlan.cast<std::string>());
          if (!decoded.isOk()) raise(decoded.status());
          request.replay = std::make_shared<const driver::SavedPlan>(std::move(decoded).value());
        }
        StatusOr<driver::CompiledModel> compiled = [&] {
          py::gil_scoped_release release;
          return driver::compile(std::move(graph), request);
        }();
        if (!compiled.isOk()) raise(compiled.status());
        py::dict report = toDict(compiled->report, *compiled->plan);
        addShapeReport(report, compiled->report.shapes);
        report["plan_source"] = compiled->report.planSource;
        report["plan_note"] = compiled->report.planNote;
        report["solver_queries"] = compiled->report.solverQueries;
        report["saved_plan"] = compiled->saved ? py::object(py::bytes(compiled->saved->encode())) : py::object(py::none());
        return py::make_tuple(std::const_pointer_cast<runtime::CompiledGraph>(compiled->plan), report);
      },
      py::arg("graph"), py::arg("input_arg_index"), py::arg("frozen"), py::arg("num_args"),
      py::arg("verify") = "instances", py::arg("fuse") = true, py::arg("engines") = "auto", py::arg("bf16") = false,
      py::arg("cache_dir") = "", py::arg("planted_bug") = false, py::arg("autotune") = true,
      py::arg("layer_check_weights") = 4096, py::arg("shape_facts") = py::none(), py::arg("linear_weights") = "auto",
      py::arg("environment") = "", py::arg("saved_plan") = py::none(), py::arg("plan_cache") = false,
      py::arg("written_back") = std::vector<std::pair<int32_t, int32_t>>(),
      "Runs the compile driver (rules, partitions, plan): returns (CompiledGraph, report dict).");
}

VERIFUSE_REGISTER_BINDINGS(pipeline, registerPipeline);

}  // namespace
}  // namespace verifuse::bindings
