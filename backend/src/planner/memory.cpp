// Memory: folded weights materialized late and handed to the one op that prepacks them (so the
// folded copies never all exist at once), values freed after their last use, a dead residual's
// buffer donated to the sum that reads it, inputs the caller writes back updated in place, and
// the own GEMM's packing deferred past the plan.
#include "planner/planner.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <system_error>
#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace verifuse::runtime {

namespace {
// Plans whose background work is still running (see waitForDeferredWork).
std::mutex gDeferredMu;
std::condition_variable gDeferredDone;
int gDeferredRunning = 0;
}  // namespace

void waitForDeferredWork() {
  std::unique_lock<std::mutex> lock(gDeferredMu);
  gDeferredDone.wait(lock, [] { return gDeferredRunning == 0; });
}

}  // namespace verifuse::runtime

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;

/// Hands freed heap pages back to the OS once \p releasedBytes (folded weights freed since the
/// last trim) reach 16 MB. A folded weight is materialized, prepacked and freed once per fused op
/// at compile time; glibc keeps such freed chunks (its mmap threshold rises to the largest freed
/// block), so without this the compile's peak RSS grows by weights that are already gone
/// (ResNet-50: 643-694 MB instead of about 600 MB). malloc_trim also releases free pages in the
/// middle of the heap; the cost is the trim plus faulting those pages in again for later
/// allocations: trimming after every weight made ResNet-50's plan build 0.06 -> 0.21 s, every
/// 16 MB makes it 0.16 s for a peak 3 MB higher.
void releaseFreedHeapPages(size_t& releasedBytes) {
  constexpr size_t kTrimThreshold = size_t{16} << 20;
  if (releasedBytes < kTrimThreshold) return;
  releasedBytes = 0;
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

StatusOr<bool> prepareConstants(PlanBuild& b) {
  ir::Graph& graph = b.graph;
  runtime::CompiledGraph::Impl& impl = b.impl;
  // Folded constants (host buffers) read by exactly one fused op: the op takes the only reference,
  // so once its kernel holds the prepacked copy the folded one is freed (peak memory).
  b.constantReaders.assign(graph.constants().size(), 0);
  b.readByFused.assign(graph.constants().size(), false);
  for (const ir::Node& n : graph.nodes()) {
    std::function<void(const Arg&)> visit = [&](const Arg& a) {
      if (a.isConstant()) {
        b.constantReaders[static_cast<size_t>(a.i)]++;
        b.readByFused[static_cast<size_t>(a.i)] = b.readByFused[static_cast<size_t>(a.i)] || rules::isFusedOp(n);
      }
      for (const Arg& e : a.list) visit(e);
    };
    for (const Arg& a : n.args) visit(a);
  }
  for (const Arg& a : graph.outputs()) {
    if (a.isConstant()) b.constantReaders[static_cast<size_t>(a.i)] += 2;
  }
  bool deferred = false;
  for (ir::ConstantTensor& c : graph.mutableConstants()) {
    const size_t id = impl.constants.size();
    if (!c.data && c.materialize) {
      // A lazily folded weight: materialized when its one fused reader is built (steps.cpp), so
      // the folded copies never all exist at once. Anything else reading it gets it now.
      if (b.constantReaders[id] == 1 && b.readByFused[id]) {
        impl.constants.emplace_back();
        deferred = true;
        continue;
      }
      c.materializeNow();
    }
    if (!c.data && c.numel() > 0) return invalidArgument("constant '" + c.name + "' has no data");
    impl.constants.push_back(runtime::constantToTensor(c));
  }
  return deferred;
}

StatusOr<bool> planLifetimes(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  runtime::CompiledGraph::Impl& impl = b.impl;
  // Last use of every value (in execution order), so steps can drop intermediates once dead.
  std::vector<int64_t> lastUse(graph.numValues(), -1);
  std::vector<ValueId> used;
  for (size_t s = 0; s < b.order.size(); ++s) {
    used.clear();
    for (const Arg& a : graph.nodes()[b.order[s]].args) a.collectValues(used);
    for (ValueId v : used) lastUse[static_cast<size_t>(v)] = static_cast<int64_t>(s);
  }
  // The values each position frees, in value order (one pass, not one per step).
  std::vector<std::vector<ValueId>> lastUsedAt(b.order.size());
  for (size_t v = 0; v < lastUse.size(); ++v) {
    if (lastUse[v] >= 0 && !b.isOutput[v]) lastUsedAt[static_cast<size_t>(lastUse[v])].push_back(static_cast<ValueId>(v));
  }
  bool changed = false;
  for (size_t s = 0; s < b.order.size(); ++s) {
    const size_t k = b.order[s];
    if (b.stepOf[k] == SIZE_MAX) continue;  // evaluated while planning
    runtime::Step& step = impl.steps[b.stepOf[k]];
    const ir::Node& n = graph.nodes()[k];
    step.freeAfter = std::move(lastUsedAt[s]);
    // Outputs nobody reads (e.g. batch norm's saved statistics) die right away.
    for (ValueId out : n.outputs) {
      if (lastUse[static_cast<size_t>(out)] == -1 && !b.isOutput[static_cast<size_t>(out)]) step.freeAfter.push_back(out);
    }
    if (step.fused && step.args.size() == 2 && step.args[1].value != step.args[0].value) {
      const ValueId r = step.args[1].value;
      if (lastUse[static_cast<size_t>(r)] == static_cast<int64_t>(s) && !b.isOutput[static_cast<size_t>(r)] &&
          graph.value(r).producer >= 0) {
        step.donatedResidual = r;  // an intermediate nobody reads later: its buffer can take the sum
      }
    }
    changed = changed || !step.freeAfter.empty();
  }
  return changed;
}

StatusOr<bool> writeInputsInPlace(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  runtime::CompiledGraph::Impl& impl = b.impl;
  if (b.options.writtenBackInputs.empty()) return false;
  // How often each value is read (node arguments and graph outputs), over the whole graph.
  std::vector<int> reads(graph.numValues(), 0);
  std::vector<ValueId> used;
  for (const ir::Node& n : graph.nodes()) {
    used.clear();
    for (const Arg& a : n.args) a.collectValues(used);
    for (ValueId v : used) reads[static_cast<size_t>(v)]++;
  }
  std::vector<int> outputUses(graph.numValues(), 0);
  std::vector<ValueId> outs;
  for (const Arg& a : graph.outputs()) a.collectValues(outs);
  for (ValueId v : outs) {
    reads[static_cast<size_t>(v)]++;
    outputUses[static_cast<size_t>(v)]++;
  }
  const auto inPlaceForm = c10::Dispatcher::singleton().findSchema(c10::OperatorName("aten::index_put_", ""));
  if (!inPlaceForm) return false;
  bool changed = false;
  for (const auto& [output, arg] : b.options.writtenBackInputs) {
    if (output < 0 || static_cast<size_t>(output) >= graph.outputs().size()) continue;
    const Arg& out = graph.outputs()[static_cast<size_t>(output)];
    if (!out.isValue()) continue;
    const ValueId updated = static_cast<ValueId>(out.i);
    // Also a plain output of the graph: returning the input itself would alias it.
    if (outputUses[static_cast<size_t>(updated)] != 1) continue;
    const ir::NodeId producer = graph.value(updated).producer;
    if (producer < 0) continue;
    const size_t k = b.indexOf.at(producer);
    const ir::Node& n = graph.nodes()[k];
    // index_put(self, indices, values, accumulate=False): rerunning it (a call whose fused plan
    // hands over to the exact plan midway) writes the same values again; an accumulating one would
    // add twice.
    if (n.qualifiedName() != "aten::index_put" || n.args.size() != 4 || n.outputs.size() != 1) continue;
    if (n.args[3].kind != Arg::Kind::Bool || n.args[3].i != 0 || !n.args[0].isValue()) continue;
    const ValueId self = static_cast<ValueId>(n.args[0].i);
    // The input the caller writes back, read by this index_put alone (no reader of the old value).
    const auto& inputs = graph.inputs();
    const auto input = std::find(inputs.begin(), inputs.end(), self);
    if (input == inputs.end() || impl.inputArgIndex[static_cast<size_t>(input - inputs.begin())] != arg) continue;
    if (reads[static_cast<size_t>(self)] != 1) continue;
    if (b.stepOf[k] == SIZE_MAX) continue;
    runtime::Step& step = impl.steps[b.stepOf[k]];
    if (!step.op || step.fused || step.builtin) continue;
    step.inPlaceOp = *inPlaceForm;
    impl.inPlaceArgs.push_back(arg);
    impl.nodeRunsOn[k] = "ATen, in place";
    impl.stats.inPlaceWrites++;
    changed = true;
  }
  std::sort(impl.inPlaceArgs.begin(), impl.inPlaceArgs.end());
  impl.inPlaceArgs.erase(std::unique(impl.inPlaceArgs.begin(), impl.inPlaceArgs.end()), impl.inPlaceArgs.end());
  return changed;
}

StatusOr<bool> startDeferredPacking(PlanBuild& b) {
  std::vector<runtime::FusedOp*> deferred;
  for (runtime::FusedOp* op : b.fusedOf) {
    if (!op) continue;
    op->finishPlanning();
    if (op->hasDeferredWork() && std::find(deferred.begin(), deferred.end(), op) == deferred.end()) deferred.push_back(op);
  }
  if (deferred.empty()) return false;
  // In step order, so the first run and the packing walk the model together; the run waits on
  // an op's lock only when it overtakes the packing.
  {
    std::lock_guard<std::mutex> lock(runtime::gDeferredMu);
    ++runtime::gDeferredRunning;
  }
  auto done = [] {
    std::lock_guard<std::mutex> lock(runtime::gDeferredMu);
    --runtime::gDeferredRunning;
    runtime::gDeferredDone.notify_all();
  };
  try {
    b.impl.deferredWork = std::thread([deferred, done] {
      for (runtime::FusedOp* op : deferred) op->finishDeferredWork();
      done();
    });
  } catch (const std::system_error&) {
    for (runtime::FusedOp* op : deferred) op->finishDeferredWork();  // no thread to be had: pack now
    done();
  }
  return true;
}

}  // namespace verifuse::planner
