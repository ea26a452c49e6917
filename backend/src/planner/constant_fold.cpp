// Constant folding: the nodes whose inputs are all frozen constants, literals or other such
// nodes' results run once while planning, and the calls start from their values.
#include "planner/planner.h"
#include "verifuse/ir/op_schema.h"

#include <set>
#include <string_view>

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;
using runtime::builtins;
using runtime::isEngineOp;
using runtime::kRowwiseOp;

namespace {


/// Output bytes above which a folded value that grew from another value is not kept (it would
/// live as long as the plan, where eager frees it after each call): an arange expanded and
/// copied into a huge mask costs memory the plan should not hold.
constexpr size_t kMaxFoldedBytes = size_t{64} << 20;

size_t staticBytes(const ir::Value& v) {
  size_t n = std::max<size_t>(ir::dtypeSize(v.dtype), 1);
  for (int64_t d : v.shape) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
  return n;
}

/// The nodes evaluated once while planning (constant folding): each input a frozen constant, a
/// literal or the result of another such node, so the result is the same on every call (the
/// lowering rejects random ops). Dispatcher ops with tensor results, and row programs (run on
/// ATen, eager's own kernels, so a folded row program is eager's value bit for bit: T5's
/// bucketed relative positions truncate a log to an integer). Not graph outputs (the caller may
/// mutate those); fused linears, convolutions and attention keep their engines. A node reading
/// values, not only constants, must have a static shape and keep under kMaxFoldedBytes unless its
/// largest input is as large (casts and views of weights).
std::vector<bool> planTimeNodes(const ir::Graph& g) {
  std::vector<bool> folded(g.numValues(), false);
  std::vector<bool> planTime(g.nodes().size(), false);
  std::vector<ValueId> used;
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const ir::Node& n = g.nodes()[k];
    if (n.outputs.empty() || builtins().count(n.qualifiedName())) continue;
    if (n.op != kRowwiseOp) {
      if (isEngineOp(n)) continue;
      auto op = c10::Dispatcher::singleton().findSchema(c10::OperatorName(n.op, n.overload));
      if (!op || op->schema().is_mutable() || op->schema().returns().size() != n.outputs.size()) continue;
      bool tensors = true;
      for (const auto& r : op->schema().returns()) tensors = tensors && r.type()->kind() == c10::TypeKind::TensorType;
      if (!tensors) continue;
    }
    used.clear();
    for (const Arg& a : n.args) a.collectValues(used);
    bool constantInputs = true;
    size_t largestInput = 0;
    for (ValueId v : used) {
      constantInputs = constantInputs && folded[static_cast<size_t>(v)];
      if (constantInputs) largestInput = std::max(largestInput, staticBytes(g.value(v)));
    }
    for (const Arg& a : n.args) {
      if (!a.isConstant()) continue;
      const ir::ConstantTensor& c = g.constants()[static_cast<size_t>(a.i)];
      largestInput = std::max(largestInput, static_cast<size_t>(c.numel()) * ir::dtypeSize(c.dtype));
    }
    if (!constantInputs) continue;
    bool keep = true;
    for (ValueId out : n.outputs) {
      const ir::Value& v = g.value(out);
      if (g.isGraphOutput(out) || v.type != ir::ValueType::Tensor) keep = false;
      // Nodes over constants alone (weights' casts and views, aranges) fold whatever their size,
      // as they always have.
      else if (!used.empty() && (!v.hasStaticShape() || staticBytes(v) > std::max(kMaxFoldedBytes, largestInput))) keep = false;
    }
    if (!keep) continue;
    planTime[k] = true;
    for (ValueId out : n.outputs) folded[static_cast<size_t>(out)] = true;
  }
  return planTime;
}

/// True when the layout of folded value \p v cannot be observed: every per-call reader is an
/// elementwise TensorIterator op (whose output follows its inputs' strides but holds the same
/// values whatever they are) and everything reading such an output is a contiguous clone (which
/// fixes the strides from there on) and no graph output. Then v may be stored contiguous: T5's
/// relative-position bias is an embedding [q, kv, heads] permuted to heads first; masked by a
/// where() and made contiguous per call, the where wrote the permuted layout and the clone read
/// it back (1.25 ms at batch 8, 1 thread; 0.46 ms from the dense bias).
bool layoutUnobservable(const ir::Graph& g, ValueId v, const std::vector<bool>& planTime) {
  static const std::set<std::string_view> elementwise = {"aten::where", "aten::add", "aten::sub", "aten::mul",
                                                         "aten::div", "aten::masked_fill"};
  bool read = false;
  for (ir::NodeId r : g.users(v)) {
    if (planTime[static_cast<size_t>(r)]) continue;
    const ir::Node& reader = g.node(r);
    if (!elementwise.count(reader.op) || reader.outputs.size() != 1 || g.isGraphOutput(reader.outputs[0])) return false;
    for (ir::NodeId c : g.users(reader.outputs[0])) {
      const ir::Node& clone = g.node(c);
      const bool contiguousClone =
          clone.op == "aten::clone" && ir::hasOperands<ir::Clone>(clone) &&
          ir::operand(clone, ir::Clone::memory_format).kind == Arg::Kind::MemoryFormat &&
          ir::operand(clone, ir::Clone::memory_format).i == static_cast<int64_t>(c10::MemoryFormat::Contiguous);
      if (!contiguousClone) return false;
    }
    read = true;
  }
  return read;
}

}  // namespace

StatusOr<bool> markPlanTimeNodes(PlanBuild& b) {
  b.planTime = planTimeNodes(b.graph);
  return std::find(b.planTime.begin(), b.planTime.end(), true) != b.planTime.end();
}

StatusOr<bool> evaluatePlanTimeNodes(PlanBuild& b) {
  runtime::CompiledGraph::Impl& impl = b.impl;
  b.foldSlots.assign(b.graph.numValues(), c10::IValue());
  bool changed = false;
  for (size_t k : b.order) {
    if (!b.planTime[k]) continue;
    const ir::Node& n = b.graph.nodes()[k];
    // Evaluated once now on the folded values; a row program on ATen (planTimeNodes says why).
    runtime::Step step;
    if (n.op == kRowwiseOp) {
      VF_ASSIGN_OR_RETURN(std::unique_ptr<runtime::FusedOp> op, rowwiseStep(b.graph, n, impl.constants, b.options, step));
      step.fused = std::move(op);
    } else {
      VF_ASSIGN_OR_RETURN(step, planStep(n, impl.constants));
    }
    impl.steps.push_back(std::move(step));
    const size_t last = impl.steps.size() - 1;
    Status folded = Status::ok();
    try {
      folded = runtime::runSteps(impl, last, last + 1, b.foldSlots, /*exact=*/true, std::nullopt, /*keepValues=*/true);
    } catch (const std::exception& e) {
      folded = unsupported(impl.steps[last].name + " failed on constant inputs: " + e.what());
    }
    impl.steps.pop_back();
    VF_RETURN_IF_ERROR(folded);
    impl.stats.constantFoldedSteps++;
    impl.nodeEngines[k] = "constant";
    impl.nodeRunsOn[k] = "constant";
    changed = true;
  }
  return changed;
}

StatusOr<bool> keepFoldedValues(PlanBuild& b) {
  // Folded values kept for the calls: those a step reads (the rest fed only other folded nodes).
  std::vector<bool> readPerCall(b.graph.numValues(), false);
  std::vector<ValueId> used;
  for (const runtime::Step& step : b.impl.steps) {
    for (const runtime::ArgSlot& a : step.args) {
      if (a.kind == runtime::ArgSlot::Kind::Value) readPerCall[static_cast<size_t>(a.value)] = true;
      if (a.kind != runtime::ArgSlot::Kind::DynamicList) continue;
      used.clear();
      a.list.collectValues(used);
      for (ValueId v : used) readPerCall[static_cast<size_t>(v)] = true;
    }
  }
  for (size_t v = 0; v < b.foldSlots.size(); ++v) {
    if (!readPerCall[v] || b.foldSlots[v].isNone()) continue;
    c10::IValue value = std::move(b.foldSlots[v]);
    if (value.isTensor() && !value.toTensor().is_contiguous() &&
        layoutUnobservable(b.graph, static_cast<ValueId>(v), b.planTime)) {
      value = value.toTensor().contiguous();
      b.impl.stats.foldedMadeContiguous++;
    }
    b.impl.folded.emplace_back(static_cast<ValueId>(v), std::move(value));
  }
  b.foldSlots.clear();
  return !b.impl.folded.empty();
}

}  // namespace verifuse::planner
