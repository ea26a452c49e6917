// The executor: runs a plan the planner built (backend/src/planner/) — a flat list of steps, each
// a boxed call through the c10 dispatcher, a small builtin for Python/SymInt arithmetic, or a
// fused op on its engine — with intermediates freed after their last use. The plan is immutable
// once built, so any number of threads may run it.
#include "verifuse/runtime/executor.h"

#include "runtime/fused_ops.h"
#include "runtime/int8_ops.h"
#include "runtime/plan.h"
#include "verifuse/ir/op_schema.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>
#include <typeinfo>

namespace verifuse::runtime {

using ir::Arg;
using ir::ValueId;

at::ScalarType toScalarType(ir::DType t) { return static_cast<at::ScalarType>(static_cast<int8_t>(t)); }

const char* engineName(Engine engine) {
  switch (engine) {
    case Engine::kAten: return "aten";
    case Engine::kOnednn: return "onednn";
    case Engine::kGemm: return "gemm";
    case Engine::kRowwise: return "rowwise";
  }
  return "?";
}

namespace {
std::atomic<int64_t> gEngineRuns[4];  // indexed by Engine
std::atomic<bool> gProfiling{false};  // setProfiling
}  // namespace

void setProfiling(bool on) { gProfiling.store(on, std::memory_order_relaxed); }

std::map<std::string, int64_t> engineRunCounts() {
  std::map<std::string, int64_t> out;
  for (Engine e : allEngines()) out[engineName(e)] = gEngineRuns[static_cast<size_t>(e)].load(std::memory_order_relaxed);
  return out;
}

const std::vector<Engine>& allEngines() {
  static const std::vector<Engine> engines = {Engine::kOnednn, Engine::kGemm, Engine::kRowwise, Engine::kAten};
  return engines;
}

at::Tensor constantToTensor(const ir::ConstantTensor& c) {
  if (c.ownerKind == ir::ConstantOwner::AtTensor && c.owner) {
    const at::Tensor& t = *static_cast<const at::Tensor*>(c.owner.get());
    if (c.data == t.data_ptr() && t.sizes() == c10::IntArrayRef(c.sizes) && t.strides() == c10::IntArrayRef(c.strides)) {
      return t;
    }
    // A view of the owner's buffer with other sizes/strides (a rule's transposed weight, e.g.
    // GPT-2's Conv1D [K, N] read as [N, K]): the same storage, never a copy.
    const int64_t offset = (static_cast<const char*>(c.data) - static_cast<const char*>(t.data_ptr())) /
                           static_cast<int64_t>(t.element_size());
    return t.as_strided(c.sizes, c.strides, t.storage_offset() + offset);
  }
  auto keepAlive = c.owner;
  return at::from_blob(c.data, c.sizes, c.strides, [keepAlive](void*) mutable { keepAlive.reset(); },
                       at::TensorOptions().dtype(toScalarType(c.dtype)));
}

Status runSteps(const CompiledGraph::Impl& p, size_t begin, size_t end, std::vector<c10::IValue>& slots, bool exact,
                std::optional<Engine> engine, bool keepValues, std::atomic<int64_t>* stepNs, bool inPlace) {
  std::vector<at::Tensor> fusedInputs;
  std::vector<c10::IValue> stack;
  // Profiling: each step's wall time, from the end of the previous one (so the argument
  // gathering and freeing between steps is charged to the step they serve).
  auto last = stepNs != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  auto charge = [&](size_t s) {
    if (stepNs == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    stepNs[s].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count(),
                        std::memory_order_relaxed);
    last = now;
  };
  for (size_t s = begin; s < end; charge(s), ++s) {
    const Step& step = p.steps[s];
    stack.clear();
    for (const ArgSlot& a : step.args) {
      switch (a.kind) {
        case ArgSlot::Kind::Fixed: stack.push_back(a.fixed); break;
        case ArgSlot::Kind::Value: {
          const c10::IValue& v = slots[static_cast<size_t>(a.value)];
          if (a.toDouble && (v.isInt() || v.isSymInt())) stack.emplace_back(ivalueToDouble(v));
          else if (a.toTensor && isNumber(v)) stack.push_back(wrapNumber(v));
          else stack.push_back(v);
          break;
        }
        case ArgSlot::Kind::DynamicList: {
          VF_ASSIGN_OR_RETURN(c10::IValue list, buildList(a.list, a.elemType, &slots, p.constants));
          stack.push_back(std::move(list));
          break;
        }
      }
    }
    if (step.fused) {
      fusedInputs.clear();
      for (const c10::IValue& v : stack) {
        if (!v.isTensor()) return invalidArgument(step.name + ": expected a tensor argument");
        fusedInputs.push_back(v.toTensor());
      }
      stack.clear();
      if (step.donatedResidual != ir::kNoValue && !keepValues) slots[static_cast<size_t>(step.donatedResidual)] = c10::IValue();
      const Engine ran = engine ? *engine : (exact ? Engine::kAten : step.fused->engine());
      gEngineRuns[static_cast<size_t>(ran)].fetch_add(1, std::memory_order_relaxed);
      // torch.profiler sees each engine run as "verifuse::linear@onednn" etc. (ATen steps record
      // themselves); the name is built only while a profiler is active.
      RECORD_FUNCTION(step.name + "@" + engineName(ran), std::vector<c10::IValue>());
      if (step.outputs.size() == 1) {
        slots[static_cast<size_t>(step.outputs[0])] = step.fused->runOn(ran, fusedInputs);
      } else {
        std::vector<at::Tensor> outs = step.fused->runAll(ran, fusedInputs);
        for (size_t o = 0; o < step.outputs.size(); ++o) slots[static_cast<size_t>(step.outputs[o])] = std::move(outs.at(o));
      }
      fusedInputs.clear();
    } else if (step.builtin) {
      VF_ASSIGN_OR_RETURN(c10::IValue out, step.builtin(stack));
      slots[static_cast<size_t>(step.outputs[0])] = std::move(out);
    } else {
      // (Step::PoolLayout) Only for a dense NCHW float input; channels-last ones are fast as they are.
      const bool poolOnChannelsLast = step.pool.channelsLast && stack.at(0).isTensor() && [&] {
        const at::Tensor& x = stack[0].toTensor();
        return x.dim() == 4 && x.size(1) > 1 && x.size(2) * x.size(3) > 1 && x.is_contiguous() &&
               at::isFloatingType(x.scalar_type());
      }();
      if (poolOnChannelsLast) stack[0] = stack[0].toTensor().contiguous(at::MemoryFormat::ChannelsLast);
      (inPlace && step.inPlaceOp ? *step.inPlaceOp : *step.op).callBoxed(stack);
      if (poolOnChannelsLast) {
        if (!step.pool.keepValuesChannelsLast) stack.at(0) = stack[0].toTensor().contiguous();
        if (step.pool.indicesRead) stack.at(1) = stack[1].toTensor().contiguous();
      }
      if (step.unpackList) {
        auto list = stack.at(0).toList();
        if (list.size() != step.outputs.size()) {
          return internalError(step.name + " returned " + std::to_string(list.size()) + " elements, graph expects " +
                               std::to_string(step.outputs.size()));
        }
        for (size_t k = 0; k < step.outputs.size(); ++k) slots[static_cast<size_t>(step.outputs[k])] = list.get(k);
      } else {
        for (size_t k = 0; k < step.outputs.size(); ++k) {
          slots[static_cast<size_t>(step.outputs[k])] = std::move(stack[k]);
        }
      }
    }
    if (!keepValues) {
      for (ValueId v : step.freeAfter) slots[static_cast<size_t>(v)] = c10::IValue();
    }
  }
  return Status::ok();
}

CompiledGraph::CompiledGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledGraph::~CompiledGraph() = default;
const ir::Graph& CompiledGraph::graph() const { return impl_->graph; }
ExecutorStats CompiledGraph::stats() const { return impl_->stats; }
const std::vector<std::string>& CompiledGraph::nodeEngines() const { return impl_->nodeEngines; }
const std::vector<std::map<std::string, double>>& CompiledGraph::nodeTimings() const { return impl_->nodeTimings; }
const std::vector<int32_t>& CompiledGraph::nodePartition() const { return impl_->nodePartition; }
const std::vector<std::string>& CompiledGraph::nodeRunsOn() const { return impl_->nodeRunsOn; }

NodeProfile CompiledGraph::profile() const {
  NodeProfile out;
  out.runs = impl_->profiledRuns.load(std::memory_order_relaxed);
  out.nodeNs.assign(impl_->graph.nodes().size(), 0);
  for (size_t s = 0; s < impl_->steps.size(); ++s) {
    const size_t node = impl_->steps[s].node;
    if (node < out.nodeNs.size()) out.nodeNs[node] += impl_->stepNs[s].load(std::memory_order_relaxed);
  }
  return out;
}

void CompiledGraph::resetProfile() const {
  for (size_t s = 0; s < impl_->steps.size(); ++s) impl_->stepNs[s].store(0, std::memory_order_relaxed);
  impl_->profiledRuns.store(0, std::memory_order_relaxed);
}
const std::vector<PartitionDecision>& CompiledGraph::partitions() const { return impl_->partitions; }
int64_t CompiledGraph::timingsRun() const { return impl_->timingsRun; }

std::vector<Int8KernelReport> CompiledGraph::int8Kernels() const {
  std::vector<Int8KernelReport> rows;
  const ir::Graph& g = graph();
  for (size_t k = 0; k < g.nodes().size(); ++k) {
    const ir::Node& n = g.nodes()[k];
    if (n.erased || !isInt8KernelOp(n.op)) continue;
    const ir::Arg* weight = ir::namedOperand(n, "weight");  // qconv, qlinear, int_mm
    if (!weight || !weight->isConstant()) continue;
    const at::Tensor& w = impl_->constants[static_cast<size_t>(weight->i)];
    for (const auto& d : int8DecisionsFor(w.unsafeGetTensorImpl())) {
      Int8KernelReport r;
      r.node = static_cast<int32_t>(k);
      r.op = d->op;
      r.variant = d->variant;
      r.impl = d->impl;
      r.summary = d->summary;
      for (const Int8Candidate& c : d->candidates) {
        r.candidates.push_back({c.variant, verify::verdictKindName(c.proof.kind), c.proof.summary(),
                                c.proof.counterexample.empty() ? "" : c.proof.counterexample.toString(),
                                c.made.isOk() ? "OK" : c.made.toString()});
      }
      rows.push_back(std::move(r));
    }
  }
  return rows;
}

Status CompiledGraph::checkFrozenInputs(const std::vector<c10::IValue>& args) const {
  for (const FrozenCheck& f : impl_->frozen) {
    const c10::IValue& v = args[static_cast<size_t>(f.argIndex)];
    if (!v.isTensor()) return Status(StatusCode::kStaleWeights, f.name + " is no longer a tensor");
    const at::Tensor& t = v.toTensor();
    if (t.unsafeGetTensorImpl() != f.impl) return Status(StatusCode::kStaleWeights, f.name + " was replaced");
    if (t.data_ptr() != f.dataPtr) return Status(StatusCode::kStaleWeights, f.name + " has new storage");
    if (f.checkVersion && t._version() != f.version) {
      return Status(StatusCode::kWeightsModified, f.name + " was modified in place");
    }
  }
  return Status::ok();
}

namespace {

/// Whether every element of a floating-point input is finite. A float32, bfloat16 or float16 tensor
/// whose elements exactly fill their span (contiguous, or dense in any dim order) is scanned bit by
/// bit (an exponent of all ones is Inf or NaN) in a loop the compiler vectorizes; ATen's sum + item
/// cost ~10 us per tensor even when small, 0.15 ms per Llama decode step for its 8 KV-cache inputs.
/// Other tensors take the sum in double (float32's would overflow on a mask of finfo.min twice).
template <typename Bits>
bool noAllOnesExponent(const at::Tensor& t, Bits exponent) {
  const Bits* bits = static_cast<const Bits*>(t.data_ptr());
  const int64_t n = t.numel();
  Bits bad = 0;
  for (int64_t k = 0; k < n; ++k) bad |= static_cast<Bits>((bits[k] & exponent) == exponent);
  return bad == 0;
}

bool allFinite(const at::Tensor& t) {
  if (t.is_non_overlapping_and_dense()) {
    switch (t.scalar_type()) {
      case at::kFloat: return noAllOnesExponent<uint32_t>(t, 0x7f800000u);
      case at::kBFloat16: return noAllOnesExponent<uint16_t>(t, 0x7f80u);
      case at::kHalf: return noAllOnesExponent<uint16_t>(t, 0x7c00u);
      default: break;
    }
  }
  return std::isfinite(t.sum(at::kDouble).item<double>());
}

/// Whether the inputs the plan writes in place (Impl::inPlaceArgs) may be: each a dense CPU tensor
/// (no element written twice) sharing its storage with no other argument (a write into it must
/// not show through another input the graph reads; aot_autograd's synthetic bases normally rule
/// that out, the check makes it certain), and writable here (an inference tensor only in
/// inference mode, as eager requires). Otherwise the run takes the functional form and the
/// caller's write-back does the copy.
bool inPlaceInputsUnaliased(const std::vector<int32_t>& inPlaceArgs, const std::vector<c10::IValue>& args) {
  // On the stack for a model's caches (a decode step of a 32-layer model writes 64): no heap
  // allocation per call.
  c10::SmallVector<const c10::StorageImpl*, 64> written;
  for (int32_t a : inPlaceArgs) {
    const c10::IValue& v = args[static_cast<size_t>(a)];
    if (!v.isTensor()) return false;
    const at::Tensor& t = v.toTensor();
    if (!t.has_storage() || !t.device().is_cpu() || !t.is_non_overlapping_and_dense()) return false;
    if (t.is_inference() && !c10::InferenceMode::is_enabled()) return false;
    written.push_back(t.storage().unsafeGetStorageImpl());
  }
  std::sort(written.begin(), written.end());
  if (std::adjacent_find(written.begin(), written.end()) != written.end()) return false;
  size_t seen = 0;
  for (const c10::IValue& v : args) {
    if (!v.isTensor() || !v.toTensor().has_storage()) continue;
    seen += std::binary_search(written.begin(), written.end(), v.toTensor().storage().unsafeGetStorageImpl()) ? 1 : 0;
  }
  return seen == written.size();  // each written storage reached through its own argument only
}

}  // namespace

StatusOr<std::vector<c10::IValue>> CompiledGraph::run(const std::vector<c10::IValue>& args) const {
  const Impl& p = *impl_;
  if (static_cast<int32_t>(args.size()) != p.numArgs) {
    return invalidArgument("expected " + std::to_string(p.numArgs) + " arguments, got " + std::to_string(args.size()));
  }
  VF_RETURN_IF_ERROR(checkFrozenInputs(args));
  c10::AutoGradMode noGrad(false);
  std::vector<c10::IValue> slots(p.graph.numValues());
  for (size_t k = 0; k < p.inputArgIndex.size(); ++k) {
    slots[static_cast<size_t>(p.graph.inputs()[k])] = args[static_cast<size_t>(p.inputArgIndex[k])];
  }
  for (const auto& [v, value] : p.folded) slots[static_cast<size_t>(v)] = value;
  // NaN/Inf inputs run every fused op as its ATen composition: oneDNN's clip-based post-ops turn
  // NaN into a bound where torch propagates it. One scan per input detects them (allFinite).
  bool exact = false;
  if (p.stats.fusedSteps > 0) {
    try {
      for (ValueId in : p.graph.inputs()) {
        const c10::IValue& v = slots[static_cast<size_t>(in)];
        if (!v.isTensor()) continue;
        const at::Tensor& t = v.toTensor();
        if (!t.is_floating_point() || t.numel() == 0 || !t.device().is_cpu()) continue;
        if (!allFinite(t)) {
          exact = true;
          break;
        }
      }
    } catch (const std::exception&) {
      exact = true;  // an input ATen cannot even sum: let the ops report it as eager would
    }
  }
  try {
    std::atomic<int64_t>* stepNs = nullptr;
    if (gProfiling.load(std::memory_order_relaxed) && p.stepNs) {
      stepNs = p.stepNs.get();
      p.profiledRuns.fetch_add(1, std::memory_order_relaxed);
    }
    const bool inPlace = !p.inPlaceArgs.empty() && inPlaceInputsUnaliased(p.inPlaceArgs, args);
    VF_RETURN_IF_ERROR(runSteps(p, 0, p.steps.size(), slots, exact, std::nullopt, /*keepValues=*/false, stepNs, inPlace));
  } catch (const NeedsExactPlan& e) {
    return Status(StatusCode::kNeedsExactPlan, e.what());
  } catch (const c10::Error& e) {
    // ATen's own message without the C++ backtrace, as eager shows it.
    return invalidArgument(e.what_without_backtrace());
  } catch (const std::exception& e) {
    // ATen's own message (shape mismatch, bad dtype, ...), exactly as eager would report it.
    // Except a Python exception (torch's python_error: a Python kernel or dispatch mode raised,
    // e.g. under aot_autograd's runtime wrapper): its message lives in the Python error object,
    // what() is empty, so it goes up as is and Python sees eager's own exception.
    if (std::string_view(typeid(e).name()).find("python_error") != std::string_view::npos) throw;
    return invalidArgument(e.what());
  }
  std::vector<c10::IValue> outputs;
  outputs.reserve(p.graph.outputs().size());
  for (const Arg& a : p.graph.outputs()) {
    switch (a.kind) {
      case Arg::Kind::Value: outputs.push_back(slots[static_cast<size_t>(a.i)]); break;
      case Arg::Kind::Constant: outputs.emplace_back(p.constants[static_cast<size_t>(a.i)]); break;
      case Arg::Kind::None: outputs.emplace_back(); break;
      case Arg::Kind::Int: outputs.emplace_back(a.i); break;
      case Arg::Kind::Double: outputs.emplace_back(a.d); break;
      case Arg::Kind::Bool: outputs.emplace_back(a.i != 0); break;
      default: return unsupported("graph output of this kind");
    }
  }
  return outputs;
}

}  // namespace verifuse::runtime
