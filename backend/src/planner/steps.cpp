// Steps: one per node in execution order — a boxed dispatcher call (schema-typed constant
// arguments converted now), a builtin, or a fused op (conv, linear, row program, attention) on
// the engine the heuristic gave its partition, unless the tuner will time it.
#include "planner/planner.h"

#include "verifuse/rules/rules.h"

namespace verifuse::planner {

using ir::Arg;
using ir::ValueId;
using runtime::ArgSlot;
using runtime::FusedOp;
using runtime::kRowwiseOp;
using runtime::Step;

StatusOr<Step> planStep(const ir::Node& n, const std::vector<at::Tensor>& constants) {
  Step step;
  step.name = n.qualifiedName();
  step.outputs = n.outputs;
  auto builtin = runtime::builtins().find(step.name);
  if (builtin != runtime::builtins().end()) {
    step.builtin = builtin->second;
    for (const Arg& a : n.args) {
      ArgSlot slot;
      if (a.kind == Arg::Kind::Value) {
        slot.kind = ArgSlot::Kind::Value;
        slot.value = static_cast<ValueId>(a.i);
      } else {
        VF_ASSIGN_OR_RETURN(slot.fixed, runtime::fixedValue(a, c10::NumberType::get(), constants));
      }
      step.args.push_back(std::move(slot));
    }
    if (n.outputs.size() != 1) return invalidGraph(step.name + " must have one output");
    return step;
  }
  auto op = c10::Dispatcher::singleton().findSchema(c10::OperatorName(n.op, n.overload));
  if (!op) return unsupported("operator " + step.name + " is not registered with the dispatcher");
  const auto& schema = op->schema();
  if (schema.is_mutable()) return unsupported("operator " + step.name + " mutates its inputs");
  if (schema.is_vararg() || n.args.size() != schema.arguments().size()) {
    return invalidGraph(step.name + " has " + std::to_string(n.args.size()) + " arguments, schema wants " +
                        std::to_string(schema.arguments().size()) + " (lowering must normalize them)");
  }
  for (size_t k = 0; k < n.args.size(); ++k) {
    const Arg& a = n.args[k];
    const c10::TypePtr& type = schema.arguments()[k].type();
    ArgSlot slot;
    if (a.kind == Arg::Kind::Value) {
      slot.kind = ArgSlot::Kind::Value;
      slot.value = static_cast<ValueId>(a.i);
      slot.toDouble = runtime::isFloatLike(runtime::unwrapOptional(type));
      slot.toTensor = runtime::unwrapOptional(type)->kind() == c10::TypeKind::TensorType;
    } else if (a.kind == Arg::Kind::List && a.usesValues()) {
      auto t = runtime::unwrapOptional(type);
      if (t->kind() != c10::TypeKind::ListType) return unsupported(step.name + ": list for a non-list argument");
      slot.kind = ArgSlot::Kind::DynamicList;
      slot.list = a;
      slot.elemType = t->castRaw<c10::ListType>()->getElementType();
    } else {
      auto fixed = runtime::fixedValue(a, type, constants);
      if (!fixed.isOk()) return fixed.status().withContext(step.name + " argument " + schema.arguments()[k].name());
      slot.fixed = std::move(fixed).value();
    }
    step.args.push_back(std::move(slot));
  }
  const auto& returns = schema.returns();
  if (returns.size() == 1 && returns[0].type()->kind() == c10::TypeKind::ListType) {
    step.unpackList = true;
  } else if (returns.size() != n.outputs.size()) {
    return invalidGraph(step.name + " has " + std::to_string(n.outputs.size()) + " outputs, schema returns " +
                        std::to_string(returns.size()));
  }
  step.op = *op;
  return step;
}

namespace {

/// A fused op's tensor operand: a frozen constant read in place (fixed), or a value per call;
/// nullopt for any other argument (the op's own state).
std::optional<ArgSlot> tensorSlot(const Arg& a, const std::vector<at::Tensor>& constants) {
  ArgSlot slot;
  if (a.isConstant()) {
    slot.kind = ArgSlot::Kind::Fixed;
    slot.fixed = c10::IValue(constants[static_cast<size_t>(a.i)]);
  } else if (a.isValue()) {
    slot.kind = ArgSlot::Kind::Value;
    slot.value = static_cast<ValueId>(a.i);
  } else {
    return std::nullopt;
  }
  return slot;
}

}  // namespace

/// A row program's step: the weights it reads (layer norm's gamma/beta, RMSNorm's weight) read in
/// place, its values per call. Returns the op for the caller to configure and hand to the step.
StatusOr<std::unique_ptr<FusedOp>> rowwiseStep(const ir::Graph& g, const ir::Node& n,
                                               const std::vector<at::Tensor>& constants,
                                               const CompileOptions& options, Step& step) {
  step.name = n.op;
  step.outputs = n.outputs;
  for (const Arg& a : n.args) {
    if (auto slot = tensorSlot(a, constants)) step.args.push_back(std::move(*slot));
  }
  auto row = runtime::createRowwiseOp(g, n, options);
  if (!row.isOk()) return row.status().withContext(n.op);
  return std::move(row).value();
}

StatusOr<bool> buildSteps(PlanBuild& b) {
  ir::Graph& graph = b.graph;
  const CompileOptions& options = b.options;
  runtime::CompiledGraph::Impl& impl = b.impl;
  const size_t numNodes = graph.nodes().size();
  b.fusedOf.assign(numNodes, nullptr);
  b.stepOf.assign(numNodes, SIZE_MAX);
  b.anyLayoutOut.assign(numNodes, false);
  // The engine of a partition the heuristic decides (the tuner sets the others' later).
  auto untimed = [&](size_t k) -> std::optional<Engine> {
    const int32_t part = b.units[static_cast<size_t>(b.unitOfNode[k])].partition;
    if (part < 0 || b.facts[static_cast<size_t>(part)].timed) return std::nullopt;
    return b.facts[static_cast<size_t>(part)].heuristic;
  };
  for (size_t k : b.order) {
    if (b.planTime[k]) continue;  // evaluated while planning (constant_fold.cpp)
    const ir::Node& n = graph.nodes()[k];
    Step step;
    if (n.op == kRowwiseOp) {
      VF_ASSIGN_OR_RETURN(std::unique_ptr<FusedOp> op, rowwiseStep(graph, n, impl.constants, options, step));
      if (auto e = untimed(k)) op->setEngine(op->canRun(*e) ? *e : Engine::kAten);
      b.fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl.stats.fusedSteps++;
    } else if (runtime::isAttentionEngineOp(n)) {
      step.name = n.op;
      step.outputs = n.outputs;
      // The tensor arguments only (q, k, v, the mask if any): the rest is the op's own state.
      using A = ir::FlashAttentionCpu;
      for (A::Operand a : {A::query, A::key, A::value, A::attn_mask}) {
        if (auto slot = tensorSlot(ir::operand(n, a), impl.constants)) step.args.push_back(std::move(*slot));
      }
      auto attn = runtime::createAttentionOp(graph, n, options);
      if (!attn.isOk()) return attn.status().withContext(n.op);
      std::unique_ptr<FusedOp> op = std::move(attn).value();
      if (auto e = untimed(k)) op->setEngine(*e);
      b.fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl.stats.fusedSteps++;
    } else if (rules::isFusedOp(n)) {
      step.name = n.op;
      step.outputs = n.outputs;
      for (const Arg& a : n.args) {
        if (!a.isValue()) continue;
        ArgSlot slot;
        slot.kind = ArgSlot::Kind::Value;
        slot.value = static_cast<ValueId>(a.i);
        step.args.push_back(std::move(slot));
      }
      // conv and linear alike: x, weight, bias first (ir/op_schema.h)
      const Arg& input = *ir::namedOperand(n, "x");
      const Arg* weights[] = {ir::namedOperand(n, "weight"), ir::namedOperand(n, "bias")};
      const ir::Value& x = graph.value(static_cast<ValueId>(input.i));
      const std::vector<int64_t>* shape = x.hasStaticShape() ? &x.shape : nullptr;
      std::vector<at::Tensor> taken;  // references handed to the op (and dropped here)
      for (const Arg* weight : weights) {
        const Arg& arg = *weight;
        if (!arg.isConstant()) continue;
        const size_t c = static_cast<size_t>(arg.i);
        ir::ConstantTensor& ct = graph.mutableConstants()[c];
        if (!impl.constants[c].defined() && ct.materialize) {
          ct.materializeNow();
          impl.constants[c] = runtime::constantToTensor(ct);
        }
      }
      // Weights handed over now are freed once the op's kernel holds its prepacked copy: right
      // away for partitions the heuristic decides, after tuning for those that are timed.
      if (options.releaseWeights && shape) {
        for (const Arg* weight : weights) {
          const Arg& arg = *weight;
          if (!arg.isConstant()) continue;
          const size_t c = static_cast<size_t>(arg.i);
          ir::ConstantTensor& ct = graph.mutableConstants()[c];
          if (ct.ownerKind == ir::ConstantOwner::HostBuffer && b.constantReaders[c] == 1 && b.readByFused[c]) {
            taken.push_back(impl.constants[c]);
            ct.owner.reset();
            ct.data = nullptr;
          }
        }
      }
      const bool clOut = layoutAgnosticReaders(graph, n.outputs[0]);
      b.anyLayoutOut[k] = clOut;
      const bool bf16Input = input.isValue() && x.dtype == ir::DType::BFloat16;
      auto fused = runtime::createFusedOp(n, impl.constants, shape, options, clOut, bf16Input ? at::kBFloat16 : at::kFloat);
      if (!taken.empty()) {
        for (const Arg* a : weights) {
          if (a->isConstant() && !graph.constants()[static_cast<size_t>(a->i)].data) {
            impl.constants[static_cast<size_t>(a->i)] = at::Tensor();
          }
        }
      }
      if (!fused.isOk()) return fused.status().withContext(n.op);
      std::unique_ptr<FusedOp> op = std::move(fused).value();
      if (auto heuristic = untimed(k)) {
        // The heuristic decides now (engine_selection.cpp).
        Engine e = *heuristic;
        if (!op->canRun(e)) {
          e = op->canRun(Engine::kOnednn) ? Engine::kOnednn : op->canRun(Engine::kGemm) ? Engine::kGemm : Engine::kAten;
        }
        op->setEngine(e);
        if (options.releaseWeights) op->releaseWeights();
        // Only the references dropped here really free memory: a kernel that reads its weights in
        // place (borrowed linear weights) keeps the op's reference alive.
        for (const at::Tensor& t : taken) {
          if (t.use_count() == 1) b.releasedSinceTrim += t.nbytes();
        }
        taken.clear();
        releaseFreedHeapPages(b.releasedSinceTrim);
      }
      b.fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl.stats.fusedSteps++;
    } else {
      VF_ASSIGN_OR_RETURN(step, planStep(n, impl.constants));
      impl.nodeEngines[k] = step.op ? "dispatcher" : "builtin";
      impl.nodeRunsOn[k] = step.op ? "ATen" : "builtin";
    }
    if (!step.fused) (step.op ? impl.stats.dispatcherSteps : impl.stats.builtinSteps)++;
    b.stepOf[k] = impl.steps.size();
    step.node = k;
    impl.steps.push_back(std::move(step));
  }
  return !impl.steps.empty();
}

}  // namespace verifuse::planner
