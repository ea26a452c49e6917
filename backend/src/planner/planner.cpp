// compileGraph: checks what it is given, then runs the planning passes (planner.h) in order on
// one PlanBuild and returns the immutable plan.
#include "planner/planner.h"

#include "runtime/int8_ops.h"
#include "verifuse/kernels/tuning_db.h"

namespace verifuse::planner {

namespace {

/// The frozen weights the caller still passes per call, each checked on every run.
StatusOr<bool> recordFrozenInputs(PlanBuild& b) {
  runtime::CompiledGraph::Impl& impl = b.impl;
  const ir::Graph& graph = b.graph;
  for (const runtime::FrozenInput& f : b.frozen) {
    if (f.argIndex < 0 || f.argIndex >= b.numArgs || f.constant < 0 ||
        static_cast<size_t>(f.constant) >= impl.constants.size()) {
      return invalidArgument("frozen input out of range");
    }
    const at::Tensor& t = impl.constants[static_cast<size_t>(f.constant)];
    runtime::FrozenCheck check{f.argIndex, graph.constants()[static_cast<size_t>(f.constant)].name, t,
                               t.unsafeGetTensorImpl(), t.data_ptr(), 0, !t.is_inference()};
    if (check.checkVersion) check.version = t._version();
    impl.frozen.push_back(std::move(check));
  }
  return !impl.frozen.empty();
}

using PlanPass = StatusOr<bool> (*)(PlanBuild&);

struct NamedPass {
  const char* name;
  PlanPass run;
};

/// The passes, in order; each reads what the ones before it decided (planner.h).
constexpr NamedPass kPasses[] = {
    {"mark plan-time nodes", markPlanTimeNodes},
    {"schedule", scheduleUnits},
    {"select engines", selectEngines},
    {"prepare constants", prepareConstants},
    {"record frozen inputs", recordFrozenInputs},
    {"evaluate plan-time nodes", evaluatePlanTimeNodes},
    {"build steps", buildSteps},
    {"keep folded values", keepFoldedValues},
    {"assign layouts", assignLayouts},
    {"plan lifetimes", planLifetimes},
    {"write inputs in place", writeInputsInPlace},
    {"decide partitions", decidePartitions},
    {"record edge conversions", recordEdgeConversions},
    {"start deferred packing", startDeferredPacking},
};

}  // namespace

}  // namespace verifuse::planner

namespace verifuse::runtime {

StatusOr<std::shared_ptr<const CompiledGraph>> compileGraph(ir::Graph graph, std::vector<int32_t> inputArgIndex,
                                                            std::vector<FrozenInput> frozen, int32_t numArgs,
                                                            const CompileOptions& options) {
  VF_RETURN_IF_ERROR(ir::verifyGraph(graph));
  registerInt8Ops();  // verifuse::qconv / qlinear run as dispatcher ops (int8_ops.h)
  if (inputArgIndex.size() != graph.inputs().size()) {
    return invalidArgument("inputArgIndex has " + std::to_string(inputArgIndex.size()) + " entries for " +
                           std::to_string(graph.inputs().size()) + " graph inputs");
  }
  for (int32_t idx : inputArgIndex) {
    if (idx < 0 || idx >= numArgs) return invalidArgument("graph input maps to argument " + std::to_string(idx) + " out of range");
  }
  // Partition node ids refer to the graph as given; compaction must not renumber them.
  for (const ir::Node& n : graph.nodes()) {
    if (n.erased && !options.partitions.empty()) return invalidArgument("compileGraph: partitions given for an uncompacted graph");
  }
  graph.compact();
  // Every timing of this plan: the partitions' engines and the linears' weight layouts.
  const int64_t timingsBefore = kernels::timingCallCount();
  auto impl = std::make_unique<CompiledGraph::Impl>();
  const size_t numNodes = graph.nodes().size();
  planner::PlanBuild b(graph, options, *impl);
  b.frozen = std::move(frozen);
  b.numArgs = numArgs;
  for (size_t k = 0; k < numNodes; ++k) b.indexOf[graph.nodes()[k].id] = k;
  b.isOutput.assign(graph.numValues(), false);
  std::vector<ir::ValueId> outputs;
  for (const ir::Arg& a : graph.outputs()) a.collectValues(outputs);
  for (ir::ValueId v : outputs) b.isOutput[static_cast<size_t>(v)] = true;
  impl->nodeEngines.assign(numNodes, "");
  impl->nodeRunsOn.assign(numNodes, "");
  impl->nodeTimings.assign(numNodes, {});
  impl->nodePartition.assign(numNodes, -1);
  impl->inputArgIndex = std::move(inputArgIndex);  // read by the passes (writeInputsInPlace)

  for (const planner::NamedPass& pass : planner::kPasses) {
    auto changed = pass.run(b);
    if (!changed.isOk()) return changed.status();
    if (*changed) impl->stats.planPassesChanged.push_back(pass.name);
  }

  impl->stats.constants = impl->constants.size();
  impl->numArgs = numArgs;
  impl->timingsRun = kernels::timingCallCount() - timingsBefore;
  for (size_t k = 0; k < numNodes; ++k) {
    if (b.fusedOf[k] && b.fusedOf[k]->engine() == Engine::kOnednn) impl->stats.onednnSteps++;
  }
  impl->graph = std::move(graph);
  impl->stepNs = std::make_unique<std::atomic<int64_t>[]>(impl->steps.size());
  for (size_t s = 0; s < impl->steps.size(); ++s) impl->stepNs[s].store(0, std::memory_order_relaxed);
  return std::shared_ptr<const CompiledGraph>(std::make_shared<CompiledGraph>(std::move(impl)));
}

}  // namespace verifuse::runtime
