// The executor: an IR graph turned into a flat list of steps, each a boxed call through the c10
// dispatcher (or a small builtin for Python/SymInt arithmetic), with intermediates freed after
// their last use. The plan is immutable after compileGraph, so any number of threads may run it.
#include "verifuse/runtime/executor.h"

#include "runtime/fused_ops.h"
#include "runtime/int8_ops.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/tuning_db.h"
#include "verifuse/rules/rules.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#include <cmath>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <typeinfo>

namespace verifuse::runtime {

namespace {

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


using ir::Arg;
using ir::ValueId;

at::ScalarType toScalarType(ir::DType t) { return static_cast<at::ScalarType>(static_cast<int8_t>(t)); }

/// One argument of a step: fixed at plan time, a graph value, or a list built per call because
/// some of its elements are graph values (symbolic sizes, tensor lists).
struct ArgSlot {
  enum class Kind { Fixed, Value, DynamicList } kind = Kind::Fixed;
  c10::IValue fixed;
  ValueId value = ir::kNoValue;
  Arg list;             // DynamicList: the IR list
  c10::TypePtr elemType;  // DynamicList: the schema's element type
  bool toDouble = false;  // Value: schema wants a float and the value may be an int
  bool toTensor = false;  // Value: schema wants a Tensor and the value may be a Python number
};

using BuiltinFn = std::function<StatusOr<c10::IValue>(const std::vector<c10::IValue>&)>;

struct Step {
  std::optional<c10::OperatorHandle> op;
  std::shared_ptr<const FusedOp> fused;
  ValueId donatedResidual = ir::kNoValue;  // fused op's residual at its last use: accumulated in place
  BuiltinFn builtin;
  std::string name;
  std::vector<ArgSlot> args;
  std::vector<ValueId> outputs;
  bool unpackList = false;         // schema returns one list; IR has one value per element
  std::vector<ValueId> freeAfter;  // values whose last use is this step
  size_t node = SIZE_MAX;          // index in the plan's graph of the node it runs (profiles)
  /// Max pooling of a dense NCHW input runs on its channels-last copy (ATen 2.13's NCHW CPU
  /// kernel: 4.5 ms at ResNet-50's [1,64,112,112] stem, 1 thread; channels-last 0.26 ms, the copy
  /// ~0.1). The maximum and its index do not depend on the layout, so the values are eager's; the
  /// result goes back to NCHW unless every reader takes any layout (layoutAgnosticReaders).
  struct PoolLayout {
    bool channelsLast = false;
    bool keepValuesChannelsLast = false;  // output 0 read only by layout-agnostic readers
    bool indicesRead = false;             // output 1 (indices) read or a graph output
  } pool;
};

c10::TypePtr unwrapOptional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

bool isIntLike(const c10::TypePtr& t) {
  auto k = t->kind();
  return k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType;
}

bool isFloatLike(const c10::TypePtr& t) {
  auto k = t->kind();
  return k == c10::TypeKind::FloatType || k == c10::TypeKind::SymFloatType;
}

int64_t ivalueToInt(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  if (v.isBool()) return v.toBool();
  return static_cast<int64_t>(v.toDouble());
}

double ivalueToDouble(const c10::IValue& v) {
  if (v.isDouble()) return v.toDouble();
  if (v.isSymFloat()) return v.toSymFloat().guard_float(__FILE__, __LINE__);
  return static_cast<double>(ivalueToInt(v));
}

/// A Python number where the schema wants a Tensor (x / 5.0 traces to div.Tensor(x, 5.0)):
/// wrapped as eager does, a 0-d "wrapped number" tensor that type promotion treats as a scalar.
c10::IValue wrapNumber(const c10::IValue& v) {
  at::Tensor t;
  if (v.isDouble() || v.isSymFloat()) t = at::scalar_tensor(ivalueToDouble(v), at::kDouble);
  else if (v.isBool()) t = at::scalar_tensor(v.toBool(), at::kBool);
  else t = at::scalar_tensor(ivalueToInt(v), at::kLong);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::IValue(std::move(t));
}

bool isNumber(const c10::IValue& v) {
  return v.isDouble() || v.isInt() || v.isBool() || v.isSymInt() || v.isSymFloat();
}

/// Builds a typed list IValue from IR list elements, reading values from \p slots if needed.
StatusOr<c10::IValue> buildList(const Arg& list, const c10::TypePtr& elemType,
                                const std::vector<c10::IValue>* slots,
                                const std::vector<at::Tensor>& constants) {
  auto elementValue = [&](const Arg& e) -> const c10::IValue* {
    if (e.kind == Arg::Kind::Value && slots) return &(*slots)[static_cast<size_t>(e.i)];
    return nullptr;
  };
  auto elem = unwrapOptional(elemType);
  if (isIntLike(elemType)) {
    c10::List<int64_t> out;
    out.reserve(list.list.size());
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(ivalueToInt(*v));
      else if (e.kind == Arg::Kind::Int || e.kind == Arg::Kind::Bool) out.push_back(e.i);
      else return unsupported("int list element of kind " + std::to_string(static_cast<int>(e.kind)));
    }
    return c10::IValue(out);
  }
  if (isFloatLike(elemType)) {
    c10::List<double> out;
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(ivalueToDouble(*v));
      else if (e.kind == Arg::Kind::Double) out.push_back(e.d);
      else if (e.kind == Arg::Kind::Int) out.push_back(static_cast<double>(e.i));
      else return unsupported("float list element is not a number");
    }
    return c10::IValue(out);
  }
  if (elemType->kind() == c10::TypeKind::BoolType) {
    c10::List<bool> out;
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(v->toBool());
      else if (e.kind == Arg::Kind::Bool) out.push_back(e.i != 0);
      else return unsupported("bool list element is not a bool");
    }
    return c10::IValue(out);
  }
  if (elem->kind() == c10::TypeKind::TensorType) {
    const bool optionalElems = elemType->kind() == c10::TypeKind::OptionalType;
    auto tensorOf = [&](const Arg& e) -> std::optional<at::Tensor> {
      if (const c10::IValue* v = elementValue(e)) {
        if (v->isNone()) return std::nullopt;
        return v->toTensor();
      }
      if (e.kind == Arg::Kind::Constant) return constants[static_cast<size_t>(e.i)];
      return std::nullopt;
    };
    if (optionalElems) {
      c10::List<std::optional<at::Tensor>> out;
      for (const Arg& e : list.list) out.push_back(tensorOf(e));
      return c10::IValue(out);
    }
    c10::List<at::Tensor> out;
    for (const Arg& e : list.list) {
      auto t = tensorOf(e);
      if (!t) return unsupported("tensor list element is not a tensor");
      out.push_back(*t);
    }
    return c10::IValue(out);
  }
  return unsupported("list of " + elemType->str());
}

/// A non-list argument known at plan time.
StatusOr<c10::IValue> fixedValue(const Arg& a, const c10::TypePtr& type,
                                 const std::vector<at::Tensor>& constants) {
  auto t = unwrapOptional(type);
  if (t->kind() == c10::TypeKind::TensorType &&
      (a.kind == Arg::Kind::Bool || a.kind == Arg::Kind::Int || a.kind == Arg::Kind::Double)) {
    c10::IValue number = a.kind == Arg::Kind::Double ? c10::IValue(a.d)
                         : a.kind == Arg::Kind::Bool ? c10::IValue(a.i != 0)
                                                     : c10::IValue(a.i);
    return wrapNumber(number);
  }
  switch (a.kind) {
    case Arg::Kind::None: return c10::IValue();
    case Arg::Kind::Bool: return c10::IValue(a.i != 0);
    case Arg::Kind::Int:
      if (isFloatLike(t)) return c10::IValue(static_cast<double>(a.i));
      return c10::IValue(a.i);
    case Arg::Kind::Double: return c10::IValue(a.d);
    case Arg::Kind::String: return c10::IValue(a.s);
    case Arg::Kind::Constant: return c10::IValue(constants[static_cast<size_t>(a.i)]);
    case Arg::Kind::DTypeTag: return c10::IValue(static_cast<int64_t>(a.i));
    case Arg::Kind::Layout: return c10::IValue(a.i);
    case Arg::Kind::MemoryFormat: return c10::IValue(a.i);
    case Arg::Kind::Device: return c10::IValue(c10::Device(a.s));
    case Arg::Kind::List: {
      if (t->kind() != c10::TypeKind::ListType) return unsupported("list given for a " + t->str() + " argument");
      return buildList(a, t->castRaw<c10::ListType>()->getElementType(), nullptr, constants);
    }
    case Arg::Kind::Value: break;
  }
  return internalError("fixedValue called on a graph value");
}

// --- builtins: Python operator and SymInt arithmetic that Dynamo leaves in graphs -------------
bool bothInts(const c10::IValue& a, const c10::IValue& b) {
  return (a.isInt() || a.isSymInt() || a.isBool()) && (b.isInt() || b.isSymInt() || b.isBool());
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

BuiltinFn binaryArith(std::function<int64_t(int64_t, int64_t)> onInt,
                      std::function<double(double, double)> onDouble, bool checkZero = false) {
  return [onInt, onDouble, checkZero](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
    if (in.size() != 2) return invalidArgument("binary operator expects 2 arguments");
    if (bothInts(in[0], in[1]) && onInt) {
      int64_t b = ivalueToInt(in[1]);
      if (checkZero && b == 0) return invalidArgument("integer division or modulo by zero");
      return c10::IValue(onInt(ivalueToInt(in[0]), b));
    }
    return c10::IValue(onDouble(ivalueToDouble(in[0]), ivalueToDouble(in[1])));
  };
}

BuiltinFn comparison(std::function<bool(double, double)> cmp) {
  return [cmp](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
    if (in.size() != 2) return invalidArgument("comparison expects 2 arguments");
    if (bothInts(in[0], in[1])) {
      // Compare exactly as integers (large sizes lose precision as doubles), then map the
      // ordering onto the double predicate.
      int64_t a = ivalueToInt(in[0]), b = ivalueToInt(in[1]);
      return c10::IValue(cmp(a < b ? -1.0 : (a > b ? 1.0 : 0.0), 0.0));
    }
    return c10::IValue(cmp(ivalueToDouble(in[0]), ivalueToDouble(in[1])));
  };
}

const std::map<std::string, BuiltinFn>& builtins() {
  static const std::map<std::string, BuiltinFn> table = [] {
    std::map<std::string, BuiltinFn> t;
    t["_operator::add"] = binaryArith([](int64_t a, int64_t b) { return a + b; }, [](double a, double b) { return a + b; });
    t["_operator::sub"] = binaryArith([](int64_t a, int64_t b) { return a - b; }, [](double a, double b) { return a - b; });
    t["_operator::mul"] = binaryArith([](int64_t a, int64_t b) { return a * b; }, [](double a, double b) { return a * b; });
    t["_operator::floordiv"] = binaryArith(floorDiv, [](double a, double b) { return std::floor(a / b); }, true);
    t["_operator::mod"] = binaryArith(
        [](int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; },
        [](double a, double b) { return a - b * std::floor(a / b); }, true);
    t["_operator::truediv"] = binaryArith(nullptr, [](double a, double b) { return a / b; });
    t["_operator::pow"] = binaryArith(nullptr, [](double a, double b) { return std::pow(a, b); });
    t["verifuse::sym_max"] = binaryArith([](int64_t a, int64_t b) { return std::max(a, b); },
                                         [](double a, double b) { return std::max(a, b); });
    t["verifuse::sym_min"] = binaryArith([](int64_t a, int64_t b) { return std::min(a, b); },
                                         [](double a, double b) { return std::min(a, b); });
    t["_operator::eq"] = comparison([](double a, double b) { return a == b; });
    t["_operator::ne"] = comparison([](double a, double b) { return a != b; });
    t["_operator::lt"] = comparison([](double a, double b) { return a < b; });
    t["_operator::le"] = comparison([](double a, double b) { return a <= b; });
    t["_operator::gt"] = comparison([](double a, double b) { return a > b; });
    t["_operator::ge"] = comparison([](double a, double b) { return a >= b; });
    t["_operator::neg"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      if (in.at(0).isDouble()) return c10::IValue(-in[0].toDouble());
      return c10::IValue(-ivalueToInt(in.at(0)));
    };
    t["verifuse::sym_float"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(ivalueToDouble(in.at(0)));
    };
    t["verifuse::sym_int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(static_cast<int64_t>(std::trunc(ivalueToDouble(in.at(0)))));
    };
    t["verifuse::sym_not"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(!in.at(0).toBool());
    };
    t["aten::sym_size.int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().size(ivalueToInt(in.at(1))));
    };
    t["aten::sym_stride.int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().stride(ivalueToInt(in.at(1))));
    };
    t["aten::sym_numel"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().numel());
    };
    t["aten::sym_storage_offset"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().storage_offset());
    };
    return t;
  }();
  return table;
}

struct FrozenCheck {
  int32_t argIndex;
  std::string name;
  at::Tensor tensor;  // keeps the TensorImpl alive so its address cannot be reused
  const c10::TensorImpl* impl;
  const void* dataPtr;
  uint32_t version;
  bool checkVersion;
};

}  // namespace

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

struct CompiledGraph::Impl {
  ir::Graph graph;
  std::vector<at::Tensor> constants;
  std::vector<int32_t> inputArgIndex;
  int32_t numArgs = 0;
  std::vector<Step> steps;  // in execution order: each partition's steps are contiguous
  std::vector<FrozenCheck> frozen;
  ExecutorStats stats;
  std::vector<std::pair<ValueId, c10::IValue>> folded;  // values computed at compile time
  std::vector<std::string> nodeEngines;                 // by node index of graph
  std::vector<std::string> nodeRunsOn;                  // by node index: FusedOp::runsOn, "ATen", ...
  std::vector<std::map<std::string, double>> nodeTimings;
  std::vector<int32_t> nodePartition;
  std::vector<PartitionDecision> partitions;
  int64_t timingsRun = 0;
  /// Profiling (setProfiling): nanoseconds each step took, summed over the profiled runs, and
  /// how many runs were profiled. Written by whichever thread runs the plan.
  mutable std::unique_ptr<std::atomic<int64_t>[]> stepNs;
  mutable std::atomic<int64_t> profiledRuns{0};
  /// Packs the own GEMM's deferred weights (CompileOptions::deferPacking) after the plan is
  /// returned; joined before the ops it works on are destroyed.
  std::thread deferredWork;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (deferredWork.joinable()) deferredWork.join();
  }
};

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

namespace {

StatusOr<Step> planStep(const ir::Node& n, const std::vector<at::Tensor>& constants) {
  Step step;
  step.name = n.qualifiedName();
  step.outputs = n.outputs;
  auto builtin = builtins().find(step.name);
  if (builtin != builtins().end()) {
    step.builtin = builtin->second;
    for (const Arg& a : n.args) {
      ArgSlot slot;
      if (a.kind == Arg::Kind::Value) {
        slot.kind = ArgSlot::Kind::Value;
        slot.value = static_cast<ValueId>(a.i);
      } else {
        VF_ASSIGN_OR_RETURN(slot.fixed, fixedValue(a, c10::NumberType::get(), constants));
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
      slot.toDouble = isFloatLike(unwrapOptional(type));
      slot.toTensor = unwrapOptional(type)->kind() == c10::TypeKind::TensorType;
    } else if (a.kind == Arg::Kind::List && a.usesValues()) {
      auto t = unwrapOptional(type);
      if (t->kind() != c10::TypeKind::ListType) return unsupported(step.name + ": list for a non-list argument");
      slot.kind = ArgSlot::Kind::DynamicList;
      slot.list = a;
      slot.elemType = t->castRaw<c10::ListType>()->getElementType();
    } else {
      auto fixed = fixedValue(a, type, constants);
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
  auto row = createRowwiseOp(g, n, options);
  if (!row.isOk()) return row.status().withContext(n.op);
  return std::move(row).value();
}

/// True if every reader of \p v accepts any memory format (so a convolution may leave it
/// channels-last): other convolutions, pooling and element-wise ops. Views need eager's strides,
/// and graph outputs keep eager's layout.
bool layoutAgnosticReaders(const ir::Graph& g, ValueId v, int depth = 0) {
  static const std::set<std::string> agnostic = {
      "aten::max_pool2d_with_indices", "aten::max_pool2d", "aten::avg_pool2d",
      "aten::_adaptive_avg_pool2d", "aten::adaptive_avg_pool2d", "aten::mean.dim", "aten::add.Tensor",
      "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::relu", "aten::addcmul",
      "aten::sigmoid", "aten::hardswish", "aten::hardsigmoid", "aten::hardtanh", "aten::clamp", "aten::silu",
      "aten::gelu", "aten::tanh", "aten::leaky_relu", "aten::elu", "aten::max_pool3d_with_indices",
      "aten::avg_pool3d", "aten::_adaptive_avg_pool3d", "aten::clamp_min", "aten::clamp_max",
      // cat's result is channels-last when all its inputs are (DenseNet's feature concatenations:
      // without it each conv result went back to NCHW for the cat and the next conv copied it
      // forward again), dense NCHW otherwise; its values do not depend on the layouts.
      "aten::cat"};
  // Element-wise ops, pooling and the row engine keep their input's memory format, so their
  // outputs must in turn reach only layout-agnostic readers; so must a permute's (a permuted
  // channels-last tensor is a dense tensor in another dim order: ConvNeXt's
  // permute(0, 2, 3, 1) -> layer norm -> linears -> permute(0, 3, 1, 2) -> residual add). A
  // convolution re-decides for its own output and a linear writes a fresh dense result, whether
  // it reads v as its input (made contiguous) or as its residual (copied into the output, or
  // accumulated in place when its strides are the output's: ConvNeXt's blocks after
  // add-below-permute, whose residual is the previous block's input permuted back to NHWC).
  if (g.isGraphOutput(v) || depth > 64) return false;
  for (ir::NodeId user : g.users(v)) {
    const ir::Node& n = g.node(user);
    if (n.op == "verifuse::conv" || n.op == "verifuse::linear") continue;
    if (!agnostic.count(n.qualifiedName()) && n.op != "verifuse::rowwise" && n.op != "aten::permute") return false;
    for (ValueId out : n.outputs) {
      if (g.value(out).type != ir::ValueType::Tensor) continue;
      // max_pool2d_with_indices' indices: unused or read like any tensor.
      if (!layoutAgnosticReaders(g, out, depth + 1)) return false;
    }
  }
  return true;
}

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
      const bool contiguousClone = clone.op == "aten::clone" && clone.args.size() == 2 &&
                                   clone.args[1].kind == Arg::Kind::MemoryFormat &&
                                   clone.args[1].i == static_cast<int64_t>(c10::MemoryFormat::Contiguous);
      if (!contiguousClone) return false;
    }
    read = true;
  }
  return read;
}

}  // namespace

namespace {

/// One unit of scheduling: a partition's nodes, or a single node outside every partition.
struct Unit {
  std::vector<size_t> nodes;  // node indices (graph order)
  int32_t partition = -1;     // index into the plan's partitions, or -1
};

/// Orders the units so that each partition runs as one contiguous block: Kahn's algorithm over the
/// graph of units (acyclic, since the partitioner only makes acyclic merges), always taking the
/// ready unit whose first node comes earliest, so an unpartitioned graph keeps its order exactly.
StatusOr<std::vector<size_t>> scheduleUnits(const ir::Graph& graph, const std::vector<Unit>& units,
                                            const std::vector<int32_t>& unitOfNode) {
  const size_t n = units.size();
  std::vector<std::vector<size_t>> succ(n);
  std::vector<int> indegree(n, 0);
  std::vector<ValueId> used;
  for (size_t u = 0; u < n; ++u) {
    std::set<size_t> preds;
    for (size_t k : units[u].nodes) {
      used.clear();
      for (const Arg& a : graph.nodes()[k].args) a.collectValues(used);
      for (ValueId v : used) {
        const ir::NodeId producer = graph.value(v).producer;
        if (producer < 0) continue;
        const int32_t pu = unitOfNode[static_cast<size_t>(producer)];
        if (pu >= 0 && static_cast<size_t>(pu) != u) preds.insert(static_cast<size_t>(pu));
      }
    }
    for (size_t p : preds) {
      succ[p].push_back(u);
      indegree[u]++;
    }
  }
  std::set<std::pair<size_t, size_t>> ready;  // (first node index, unit)
  for (size_t u = 0; u < n; ++u) {
    if (indegree[u] == 0) ready.insert({units[u].nodes.front(), u});
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t u = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(u);
    for (size_t s : succ[u]) {
      if (--indegree[s] == 0) ready.insert({units[s].nodes.front(), s});
    }
  }
  if (order.size() != n) return invalidArgument("partitions form a cycle: they cannot each run as one block");
  return order;
}

/// Multiply-adds of a fused node from the IR's static shapes (0 when unknown): decides, before
/// any kernel exists, whether its partition will be timed (and so must keep its weights a while).
double estimateMacs(const ir::Graph& g, const ir::Node& n) {
  if (isAttentionEngineOp(n)) {
    // Q·K^T and P·V: B·H·S·KV·(D + Dv).
    const ir::Value& q = g.value(static_cast<ValueId>(n.args[0].i));
    const ir::Value& k = g.value(static_cast<ValueId>(n.args[1].i));
    const ir::Value& v = g.value(static_cast<ValueId>(n.args[2].i));
    if (!q.hasStaticShape() || !k.hasStaticShape() || !v.hasStaticShape() || q.shape.size() != 4 ||
        k.shape.size() != 4 || v.shape.size() != 4) {
      return 0;
    }
    return static_cast<double>(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]) *
           static_cast<double>(q.shape[3] + v.shape[3]);
  }
  if (!rules::isFusedOp(n) || !n.args[1].isConstant()) return 0;
  const auto& w = g.constants()[static_cast<size_t>(n.args[1].i)];
  const ir::Value& out = g.value(n.outputs[0]);
  if (!out.hasStaticShape() || w.sizes.empty() || w.sizes[0] == 0) return 0;
  double outElems = 1;
  for (int64_t d : out.shape) outElems *= static_cast<double>(d);
  return outElems * static_cast<double>(w.numel() / w.sizes[0]);
}

/// Test hook (tests/python/test_autotune.py): a fixed delay added to every oneDNN op run *while
/// tuning*, so a test can make ATen the faster engine deterministically and check that the tuner
/// keeps it, records it, and that the plan then runs ATen. Read once; 0 (unset) in production.
double testOnednnTuningPenaltyMs() {
  static const double penalty = [] {
    const char* e = std::getenv("VERIFUSE_TEST_TUNE_ONEDNN_PENALTY_MS");
    return e ? std::atof(e) : 0.0;
  }();
  return penalty;
}

}  // namespace

namespace {

/// A linear whose epilogue has a GELU and whose K is at most 512. The own GEMM's GELU is accurate
/// to a few ulp and costs about 4x what oneDNN's cheaper approximation does, which only shows when
/// K is short (kernels/bench/gemm_bench --epilogue bias_gelu, Zen 5, 1 thread: Whisper
/// 1500x384x1536 188 vs 232 GFLOP/s, 128x512x1408 205 vs 227; level at K = 768, ahead beyond).
/// A linear's K (its input's last dim), or -1 when unknown.
int64_t linearK(const ir::Graph& g, const ir::Node& n) {
  if (!n.args[0].isValue()) return -1;
  const ir::Value& x = g.value(static_cast<ValueId>(n.args[0].i));
  return x.shape.empty() ? -1 : x.shape.back();
}

/// The rows a linear multiplies (the product of its input's leading sizes), or -1 when unknown.
int64_t linearRows(const ir::Graph& g, const ir::Node& n) {
  if (!n.args[0].isValue()) return -1;
  const ir::Value& x = g.value(static_cast<ValueId>(n.args[0].i));
  if (x.shape.empty()) return -1;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d) {
    if (x.shape[d] < 0) return -1;
    rows *= x.shape[d];
  }
  return rows;
}

bool geluOnShortK(const ir::Graph& g, const ir::Node& n) {
  auto ops = rules::parsePostOps(n.args.at(rules::postOpsArgIndex(n)).s);
  if (!ops.isOk()) return false;
  bool gelu = false;
  for (const rules::PostOpSpec& op : *ops) gelu = gelu || op.kind.rfind("gelu", 0) == 0;
  const int64_t k = linearK(g, n);
  return gelu && k > 0 && k <= 512;
}

/// Runs steps [begin, end) on \p slots. \p engine: run every fused step on it (the partition
/// tuner's candidates); nullopt: each fused op's planned engine (or ATen when \p exact). ATen
/// errors propagate as exceptions (c10::Error), the executor's own as a Status.
Status runSteps(const CompiledGraph::Impl& p, size_t begin, size_t end, std::vector<c10::IValue>& slots, bool exact,
                std::optional<Engine> engine, bool keepValues = false, std::atomic<int64_t>* stepNs = nullptr);

/// The value a partition input \p id is a view of, when it is made from one through a short chain
/// of the plan's own ATen view steps (split, view, transpose, ...) whose other arguments are
/// fixed: the chain's nodes go to \p chain, nearest first. nullopt when \p id is not such a view.
std::optional<ValueId> viewChainRoot(const ir::Graph& graph, const std::map<ir::NodeId, size_t>& indexOf,
                                     const std::vector<size_t>& stepOf, const CompiledGraph::Impl& impl, ValueId id,
                                     std::vector<size_t>& chain) {
  static const std::set<std::string> kViews = {
      "aten::view",       "aten::_unsafe_view", "aten::reshape",          "aten::transpose.int", "aten::permute",
      "aten::slice.Tensor", "aten::split.Tensor", "aten::split_with_sizes", "aten::select.int",    "aten::unsqueeze",
      "aten::squeeze.dim", "aten::expand",       "aten::t",                "aten::alias",         "aten::unbind.int"};
  // (qualified names: "aten::view" is the default overload, "aten::slice.Tensor" another)
  constexpr size_t kMaxChain = 8;
  chain.clear();
  ValueId cur = id;
  // Sizes, dims and offsets known now, not values of the call (nor inside a list).
  std::function<bool(const Arg&)> fixed = [&](const Arg& a) {
    if (a.isValue() || a.isConstant()) return false;
    for (const Arg& e : a.list) {
      if (!fixed(e)) return false;
    }
    return true;
  };
  while (chain.size() < kMaxChain) {
    const ir::Value& v = graph.value(cur);
    auto it = indexOf.find(v.producer);
    if (v.producer < 0 || it == indexOf.end()) break;
    const size_t k = it->second;
    const ir::Node& n = graph.nodes()[k];
    if (!kViews.count(n.qualifiedName()) || stepOf[k] == SIZE_MAX || n.args.empty() || !n.args[0].isValue()) break;
    const Step& step = impl.steps[stepOf[k]];
    if (step.fused || step.builtin || !step.op) break;
    bool fixedRest = true;
    for (size_t a = 1; a < n.args.size(); ++a) fixedRest = fixedRest && fixed(n.args[a]);
    if (!fixedRest) break;
    chain.push_back(k);
    cur = static_cast<ValueId>(n.args[0].i);
  }
  if (chain.empty() || !graph.value(cur).hasStaticShape()) return std::nullopt;
  // The root is made dense, so it must be dense in the model too: a graph input (taken dense,
  // as every timing input always was) or a verifuse op's output (its kernels write dense
  // tensors). Not an ATen op's: SDPA returns [b, h, s, d] laid out as [b, s, h, d], which a dense
  // root would turn into a view the model's own view step cannot take.
  const ir::NodeId rootProducer = graph.value(cur).producer;
  if (rootProducer >= 0) {
    auto it = indexOf.find(rootProducer);
    if (it == indexOf.end()) return std::nullopt;
    const ir::Node& n = graph.nodes()[it->second];
    if (!rules::isFusedOp(n) && n.op != kRowwiseOp) return std::nullopt;
  }
  return cur;
}

}  // namespace

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
  std::map<ir::NodeId, size_t> indexOf;
  for (size_t k = 0; k < numNodes; ++k) indexOf[graph.nodes()[k].id] = k;

  // Nodes over constants alone run once now (planTimeNodes), outside every partition: a row
  // program the partitioner grouped with per-call work leaves its partition (it reads nothing the
  // partition computes, so scheduling it first keeps the order valid).
  const std::vector<bool> planTime = planTimeNodes(graph);

  // --- units: the driver's partitions; a fused node outside all of them is a partition alone ----
  std::vector<Unit> units;
  std::vector<int32_t> unitOfNode(numNodes, -1);
  std::vector<PartitionSpec> specs;
  for (const PartitionSpec& spec : options.partitions) {
    Unit u;
    for (ir::NodeId id : spec.nodes) {
      auto it = indexOf.find(id);
      if (it == indexOf.end()) return invalidArgument("partition " + std::to_string(spec.id) + " names a node not in the graph");
      if (unitOfNode[it->second] >= 0) return invalidArgument("a node is in two partitions");
      if (!isEngineOp(graph.nodes()[it->second])) {
        return unsupported("partition " + std::to_string(spec.id) + " holds " + graph.nodes()[it->second].qualifiedName() +
                           ": no engine runs it yet");
      }
      if (planTime[it->second]) continue;
      unitOfNode[it->second] = static_cast<int32_t>(units.size());
      u.nodes.push_back(it->second);
    }
    if (u.nodes.empty()) continue;
    std::sort(u.nodes.begin(), u.nodes.end());
    u.partition = static_cast<int32_t>(specs.size());
    specs.push_back(spec);
    if (u.nodes.size() != spec.nodes.size()) {
      // Members folded away: the partition that runs is a smaller one, under a key of its own.
      PartitionSpec& kept = specs.back();
      kept.nodes.clear();
      kept.memberSignatures.clear();
      for (size_t m = 0; m < spec.nodes.size(); ++m) {
        const size_t k = indexOf.at(spec.nodes[m]);
        if (planTime[k]) continue;
        kept.nodes.push_back(spec.nodes[m]);
        if (m < spec.memberSignatures.size()) kept.memberSignatures.push_back(spec.memberSignatures[m]);
      }
      if (kept.memberSignatures.size() != kept.nodes.size()) kept.memberSignatures.clear();
      kept.signature += " less " + std::to_string(spec.nodes.size() - kept.nodes.size()) + " folded";
    }
    units.push_back(std::move(u));
  }
  for (size_t k = 0; k < numNodes; ++k) {
    if (unitOfNode[k] >= 0) continue;
    Unit u;
    u.nodes = {k};
    if (isEngineOp(graph.nodes()[k]) && !planTime[k]) {
      PartitionSpec alone;
      alone.id = static_cast<int32_t>(options.partitions.size() + specs.size());
      alone.nodes = {graph.nodes()[k].id};
      alone.engineClass = graph.nodes()[k].op == kRowwiseOp ? 2 : isAttentionEngineOp(graph.nodes()[k]) ? 3 : 1;
      u.partition = static_cast<int32_t>(specs.size());
      specs.push_back(alone);
    }
    unitOfNode[k] = static_cast<int32_t>(units.size());
    units.push_back(std::move(u));
  }
  VF_ASSIGN_OR_RETURN(std::vector<size_t> unitOrder, scheduleUnits(graph, units, unitOfNode));
  std::vector<size_t> order;  // node indices in execution order
  for (size_t u : unitOrder) order.insert(order.end(), units[u].nodes.begin(), units[u].nodes.end());

  // Which partitions will be timed: static shapes, an engine choice to make, small enough.
  const bool tuning = options.autotune && (options.tuningDb != nullptr || options.replayTunings != nullptr) &&
                      options.useOnednn;
  std::vector<double> partitionMacs(specs.size(), 0);
  std::vector<bool> partitionStatic(specs.size(), true);
  for (const Unit& u : units) {
    if (u.partition < 0) continue;
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      partitionMacs[static_cast<size_t>(u.partition)] += estimateMacs(graph, n);
      const ValueId shaped = n.op == kRowwiseOp ? n.outputs[0] : static_cast<ValueId>(n.args[0].i);
      partitionStatic[static_cast<size_t>(u.partition)] =
          partitionStatic[static_cast<size_t>(u.partition)] && graph.value(shaped).hasStaticShape();
    }
  }
  // VERIFUSE_ATTENTION=onednn|aten (tests, benchmarking; read per compile): every SDPA partition on
  // that engine, untimed, whatever its size (an op that cannot run oneDNN still takes ATen).
  const char* attentionKnob = std::getenv("VERIFUSE_ATTENTION");
  const std::string forcedAttention = attentionKnob ? attentionKnob : "";
  auto forcesAttention = [&](const Unit& u) {
    return (forcedAttention == "onednn" || forcedAttention == "aten") && u.nodes.size() == 1 &&
           isAttentionEngineOp(graph.nodes()[u.nodes[0]]);
  };
  // VERIFUSE_LINEAR=gemm|onednn (tests, benchmarking; read per compile): likewise every partition
  // of linears on the own GEMM or on oneDNN (a member that cannot run it falls back as usual).
  const char* linearKnob = std::getenv("VERIFUSE_LINEAR");
  const std::string forcedLinear = linearKnob ? linearKnob : "";
  auto forcesLinear = [&](const Unit& u) {
    if (forcedLinear != "gemm" && forcedLinear != "onednn") return false;
    for (size_t k : u.nodes) {
      if (graph.nodes()[k].op != rules::kLinearOp) return false;
    }
    return true;
  };
  std::vector<bool> partitionForced(specs.size(), false);
  for (const Unit& u : units) {
    if (u.partition >= 0 && (forcesAttention(u) || forcesLinear(u))) partitionForced[static_cast<size_t>(u.partition)] = true;
  }
  // float32 linears of at most 4 rows (a decode step at batch <= 4) stream their weight once and
  // do little else: the own GEMM's packed panels read it faster than oneDNN's packed inner product
  // at every such shape measured (verifuse_gemm_bench, Zen 4, 1 and 2 threads: 1x512x32000 12.6 vs
  // 8.1 GFLOP/s, 4x512x32000 44.4 vs 43.6, 1x512x1536 37.9 vs 32.6, 4x1376x512 107 vs 94; at 8
  // rows oneDNN leads on 8x512x32000, 83 vs 70), while timing them would pack every candidate's
  // copy of the weight: Llama decode's plan spent 0.25 of 0.30 s on it, most for its 65 MB
  // lm_head. These take the own GEMM untimed (not under dtype="bfloat16": its bf16 GEMM does not
  // take so few rows, and oneDNN and ATen are timed as before).
  std::vector<bool> fewRowLinears(specs.size(), options.ownGemm && !options.bf16);
  for (const Unit& u : units) {
    if (u.partition < 0) continue;
    const size_t p = static_cast<size_t>(u.partition);
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      const int64_t rows = n.op == rules::kLinearOp ? linearRows(graph, n) : -1;
      bool ok = rows >= 1 && rows <= 4 && !geluOnShortK(graph, n);
      for (ValueId out : n.outputs) ok = ok && graph.value(out).dtype == ir::DType::Float32;
      fewRowLinears[p] = fewRowLinears[p] && ok;
    }
  }
  auto willTime = [&](int32_t part) {
    const size_t p = static_cast<size_t>(part);
    return tuning && partitionStatic[p] && partitionMacs[p] <= options.tuneMaxMacs && !partitionForced[p] &&
           !fewRowLinears[p];
  };
  // The engine a partition gets when it is not timed: tiny ones pay more for a kernel call and
  // layout overhead than they gain (ATen); float32 linears take the own GEMM (measured faster than
  // oneDNN 3.2's inner product on AVX2 and on AVX-512: kernels/README.md); everything else oneDNN. A member
  // that cannot run the partition's engine falls back to oneDNN, then the own GEMM (a widened bf16
  // linear), then ATen.
  std::vector<Engine> heuristicEngine(specs.size(), Engine::kOnednn);
  for (const Unit& u : units) {
    if (u.partition < 0) continue;
    const size_t p = static_cast<size_t>(u.partition);
    bool allLinear = true, allRows = true, anyBf16 = false, shortGelu = false, veryShortK = false;
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      allLinear = allLinear && n.op == rules::kLinearOp;
      shortGelu = shortGelu || (n.op == rules::kLinearOp && geluOnShortK(graph, n));
      const int64_t inK = n.op == rules::kLinearOp ? linearK(graph, n) : -1;
      veryShortK = veryShortK || (inK > 0 && inK <= 384);
      allRows = allRows && n.op == kRowwiseOp;
      for (ValueId out : n.outputs) anyBf16 = anyBf16 || graph.value(out).dtype == ir::DType::BFloat16;
    }
    // A bf16 model's linears on a CPU without bf16 instructions: oneDNN has only reference bf16
    // kernels there (no candidate), the own GEMM's widening variant is the engine; the K <= 384 and
    // short-GELU exceptions below are about oneDNN's native bf16 and GELU kernels.
    const bool widenedBf16 = anyBf16 && !kernels::capabilities().onednnNativeBf16();
    const ir::Node& first = graph.nodes()[u.nodes[0]];
    if (u.nodes.size() == 1 && isAttentionEngineOp(first)) {
      // SDPA: oneDNN where it was measured faster than ATen's fused kernel (Zen 5, 1 thread, q/k/v
      // permuted views, compiled call each way: [1,12,16,64] ATen 0.038 ms vs 0.045, [1,12,32,64]
      // 0.074 vs 0.064, [1,12,64,64] 0.202 vs 0.131, BERT's [1,12,128,64] 0.66 vs 0.35,
      // [1,6,1500,64] 39-40 vs 19.3 ms): the kernel pays two matmul calls and some copies per
      // (batch, head, block), so it needs at least 2^17 multiply-adds per (batch, head).
      // Below AVX-512 the float32 attention engine has no own tiles and calls oneDNN's matmuls
      // per block: measured in the model on AVX2 (SPR capped, 1 thread), ATen's kernel is ahead
      // at Whisper's [1,6,1500,64], too big to time (341 vs 366 ms for its 4 layers), so an
      // untimed float32 SDPA takes ATen on that tier. Timed ones are decided by their timing
      // (BERT's [1,12,128,64] on its real layout: the engine 1.21 ms, ATen 1.36).
      const ir::Value& q = graph.value(static_cast<ValueId>(first.args[0].i));
      const double heads = q.shape.size() == 4 ? static_cast<double>(q.shape[0] * q.shape[1]) : 1.0;
      const bool f32WithoutTiles = q.dtype == ir::DType::Float32 && !kernels::capabilities().attentionOwnTilesF32();
      heuristicEngine[p] = partitionStatic[p] && partitionMacs[p] >= 131072.0 * heads && !f32WithoutTiles
                               ? Engine::kOnednn
                               : Engine::kAten;
      if (partitionForced[p]) heuristicEngine[p] = forcedAttention == "onednn" ? Engine::kOnednn : Engine::kAten;
    } else if (allRows) {
      heuristicEngine[p] = Engine::kRowwise;
    } else if (partitionStatic[p] && partitionMacs[p] < 4096.0 * static_cast<double>(u.nodes.size())) {
      heuristicEngine[p] = Engine::kAten;
    } else if (allLinear && options.ownGemm && (widenedBf16 || (!shortGelu && !(anyBf16 && veryShortK)))) {
      // Also with a GELU epilogue at K > 512 (geluOnShortK says why not below): BERT-base (b1,
      // 1 thread, Zen 5), whose fc + GELU + fc partitions are too big to time, ran 109.4 ms per
      // call with them on oneDNN (bench run at f4187ce) and 103.7 ms on the own GEMM with its
      // 16-lane GELU (run at 7ccd1e1). bf16 too (a bf16 model, or dtype="bfloat16"): oneDNN's
      // bf16 inner product drops to 410-440 GFLOP/s at some M (584, 1000, 1016, 1576 = ViT-base
      // at batch 8, at K = 768) where the own bf16 GEMM holds 490-520 (gemm_bench --bf16
      // --shape), and elsewhere the two are level but for the GELU epilogue, 3% behind at K = 768
      // (470 vs 483 GFLOP/s with geluErfForBf16). ViT-base bf16 batch 8: 704 -> 624 ms per call.
      // Except a bf16 partition with a member at K <= 384, where oneDNN keeps a 2% lead without
      // any GELU (Whisper's 12000x384x1152 and 384x384 at batch 8: the model's linears 1.7% and the
      // whole model 3% slower on the own GEMM; level at K = 512, ahead from 768).
      heuristicEngine[p] = Engine::kGemm;
    }
    if (allLinear && partitionForced[p]) heuristicEngine[p] = forcedLinear == "gemm" ? Engine::kGemm : Engine::kOnednn;
  }

  // Folded constants (host buffers) read by exactly one fused op: the op takes the only reference,
  // so once its kernel holds the prepacked copy the folded one is freed (peak memory).
  std::vector<int> constantReaders(graph.constants().size(), 0);
  std::vector<bool> readByFused(graph.constants().size(), false);
  for (const ir::Node& n : graph.nodes()) {
    std::function<void(const Arg&)> visit = [&](const Arg& a) {
      if (a.isConstant()) {
        constantReaders[static_cast<size_t>(a.i)]++;
        readByFused[static_cast<size_t>(a.i)] = readByFused[static_cast<size_t>(a.i)] || rules::isFusedOp(n);
      }
      for (const Arg& e : a.list) visit(e);
    };
    for (const Arg& a : n.args) visit(a);
  }
  for (const Arg& a : graph.outputs()) {
    if (a.isConstant()) constantReaders[static_cast<size_t>(a.i)] += 2;
  }
  for (ir::ConstantTensor& c : graph.mutableConstants()) {
    const size_t id = impl->constants.size();
    if (!c.data && c.materialize) {
      // A lazily folded weight: materialized when its one fused reader is built (below), so the
      // folded copies never all exist at once. Anything else reading it gets it now.
      if (constantReaders[id] == 1 && readByFused[id]) {
        impl->constants.emplace_back();
        continue;
      }
      c.materializeNow();
    }
    if (!c.data && c.numel() > 0) return invalidArgument("constant '" + c.name + "' has no data");
    impl->constants.push_back(constantToTensor(c));
  }
  for (const FrozenInput& f : frozen) {
    if (f.argIndex < 0 || f.argIndex >= numArgs || f.constant < 0 ||
        static_cast<size_t>(f.constant) >= impl->constants.size()) {
      return invalidArgument("frozen input out of range");
    }
    const at::Tensor& t = impl->constants[static_cast<size_t>(f.constant)];
    FrozenCheck check{f.argIndex, graph.constants()[static_cast<size_t>(f.constant)].name, t,
                      t.unsafeGetTensorImpl(), t.data_ptr(), 0, !t.is_inference()};
    if (check.checkVersion) check.version = t._version();
    impl->frozen.push_back(std::move(check));
  }

  // Last use of every value (in execution order), so steps can drop intermediates once dead.
  std::vector<int64_t> lastUse(graph.numValues(), -1);
  size_t releasedSinceTrim = 0;  // bytes of folded weights freed since the last heap trim
  std::vector<ValueId> used;
  for (size_t s = 0; s < order.size(); ++s) {
    used.clear();
    for (const Arg& a : graph.nodes()[order[s]].args) a.collectValues(used);
    for (ValueId v : used) lastUse[static_cast<size_t>(v)] = static_cast<int64_t>(s);
  }
  std::vector<bool> isOutput(graph.numValues(), false);
  used.clear();
  for (const Arg& a : graph.outputs()) a.collectValues(used);
  for (ValueId v : used) isOutput[static_cast<size_t>(v)] = true;

  impl->nodeEngines.assign(numNodes, "");
  impl->nodeRunsOn.assign(numNodes, "");
  impl->nodeTimings.assign(numNodes, {});
  impl->nodePartition.assign(numNodes, -1);
  std::vector<FusedOp*> fusedOf(numNodes, nullptr);  // planning-time handles (the steps own them)
  std::vector<c10::IValue> foldSlots(graph.numValues());  // the plan-time nodes' results
  std::vector<size_t> stepOf(numNodes, SIZE_MAX);
  // A channels-last tag per value: the layout the plan will really hand to readers (for counting
  // the conversions at partition edges).
  std::vector<bool> channelsLast(graph.numValues(), false);

  for (size_t s = 0; s < order.size(); ++s) {
    const size_t k = order[s];
    const ir::Node& n = graph.nodes()[k];
    const int32_t part = units[static_cast<size_t>(unitOfNode[k])].partition;
    Step step;
    if (planTime[k]) {
      // Evaluated once now on the folded values; a row program on ATen (planTimeNodes says why).
      if (n.op == kRowwiseOp) {
        VF_ASSIGN_OR_RETURN(std::unique_ptr<FusedOp> op, rowwiseStep(graph, n, impl->constants, options, step));
        step.fused = std::move(op);
      } else {
        VF_ASSIGN_OR_RETURN(step, planStep(n, impl->constants));
      }
      impl->steps.push_back(std::move(step));
      const size_t last = impl->steps.size() - 1;
      Status folded = Status::ok();
      try {
        folded = runSteps(*impl, last, last + 1, foldSlots, /*exact=*/true, std::nullopt, /*keepValues=*/true);
      } catch (const std::exception& e) {
        folded = unsupported(impl->steps[last].name + " failed on constant inputs: " + e.what());
      }
      impl->steps.pop_back();
      VF_RETURN_IF_ERROR(folded);
      impl->stats.constantFoldedSteps++;
      impl->nodeEngines[k] = "constant";
      impl->nodeRunsOn[k] = "constant";
      continue;
    }
    if (n.op == kRowwiseOp) {
      VF_ASSIGN_OR_RETURN(std::unique_ptr<FusedOp> op, rowwiseStep(graph, n, impl->constants, options, step));
      if (part >= 0 && !willTime(part)) {
        Engine e = heuristicEngine[static_cast<size_t>(part)];
        op->setEngine(op->canRun(e) ? e : Engine::kAten);
      }
      fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl->stats.fusedSteps++;
    } else if (isAttentionEngineOp(n)) {
      step.name = n.op;
      step.outputs = n.outputs;
      // The tensor arguments only (q, k, v, the mask if any): the rest is the op's own state.
      for (size_t a : {size_t{0}, size_t{1}, size_t{2}, size_t{5}}) {
        if (auto slot = tensorSlot(n.args[a], impl->constants)) step.args.push_back(std::move(*slot));
      }
      auto attn = createAttentionOp(graph, n, options);
      if (!attn.isOk()) return attn.status().withContext(n.op);
      std::unique_ptr<FusedOp> op = std::move(attn).value();
      if (part >= 0 && !willTime(part)) op->setEngine(heuristicEngine[static_cast<size_t>(part)]);
      fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl->stats.fusedSteps++;
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
      const ir::Value& x = graph.value(static_cast<ValueId>(n.args[0].i));
      const std::vector<int64_t>* shape = x.hasStaticShape() ? &x.shape : nullptr;
      std::vector<at::Tensor> taken;  // references handed to the op (and dropped here)
      for (size_t a : {size_t{1}, size_t{2}}) {
        const Arg& arg = n.args[a];
        if (!arg.isConstant()) continue;
        const size_t c = static_cast<size_t>(arg.i);
        ir::ConstantTensor& ct = graph.mutableConstants()[c];
        if (!impl->constants[c].defined() && ct.materialize) {
          ct.materializeNow();
          impl->constants[c] = constantToTensor(ct);
        }
      }
      // Weights handed over now are freed once the op's kernel holds its prepacked copy: right
      // away for partitions the heuristic decides, after tuning for those that are timed.
      if (options.releaseWeights && shape) {
        for (size_t a : {size_t{1}, size_t{2}}) {
          const Arg& arg = n.args[a];
          if (!arg.isConstant()) continue;
          const size_t c = static_cast<size_t>(arg.i);
          ir::ConstantTensor& ct = graph.mutableConstants()[c];
          if (ct.ownerKind == ir::ConstantOwner::HostBuffer && constantReaders[c] == 1 && readByFused[c]) {
            taken.push_back(impl->constants[c]);
            ct.owner.reset();
            ct.data = nullptr;
          }
        }
      }
      const bool clOut = layoutAgnosticReaders(graph, n.outputs[0]);
      const bool bf16Input = n.args[0].isValue() && graph.value(static_cast<ValueId>(n.args[0].i)).dtype == ir::DType::BFloat16;
      auto fused = createFusedOp(n, impl->constants, shape, options, clOut, bf16Input ? at::kBFloat16 : at::kFloat);
      if (!taken.empty()) {
        for (const Arg& a : {n.args[1], n.args[2]}) {
          if (a.isConstant() && !graph.constants()[static_cast<size_t>(a.i)].data) {
            impl->constants[static_cast<size_t>(a.i)] = at::Tensor();
          }
        }
      }
      if (!fused.isOk()) return fused.status().withContext(n.op);
      std::unique_ptr<FusedOp> op = std::move(fused).value();
      if (part >= 0 && !willTime(part)) {
        // The heuristic decides now (see heuristicEngine).
        Engine e = heuristicEngine[static_cast<size_t>(part)];
        if (!op->canRun(e)) {
          e = op->canRun(Engine::kOnednn) ? Engine::kOnednn : op->canRun(Engine::kGemm) ? Engine::kGemm : Engine::kAten;
        }
        op->setEngine(e);
        if (options.releaseWeights) op->releaseWeights();
        // Only the references dropped here really free memory: a kernel that reads its weights in
        // place (borrowed linear weights) keeps the op's reference alive.
        for (const at::Tensor& t : taken) {
          if (t.use_count() == 1) releasedSinceTrim += t.nbytes();
        }
        taken.clear();
        releaseFreedHeapPages(releasedSinceTrim);
      }
      fusedOf[k] = op.get();
      step.fused = std::shared_ptr<const FusedOp>(std::move(op));
      impl->stats.fusedSteps++;
      channelsLast[static_cast<size_t>(n.outputs[0])] = n.op == rules::kConvOp && clOut &&
          graph.value(n.outputs[0]).shape.size() >= 4;
      // The row engine lays its result out like its first input of the result's shape.
      if (n.op == "verifuse::rowwise") {
        for (const Arg& a : n.args) {
          if (!a.isValue() || graph.value(static_cast<ValueId>(a.i)).shape != graph.value(n.outputs[0]).shape) continue;
          channelsLast[static_cast<size_t>(n.outputs[0])] = channelsLast[static_cast<size_t>(a.i)];
          break;
        }
      }
    } else {
      VF_ASSIGN_OR_RETURN(step, planStep(n, impl->constants));
      impl->nodeEngines[k] = step.op ? "dispatcher" : "builtin";
      impl->nodeRunsOn[k] = step.op ? "ATen" : "builtin";
      if (step.op && n.qualifiedName() == "aten::max_pool2d_with_indices" && n.outputs.size() == 2 &&
          n.args[0].isValue() && graph.value(static_cast<ValueId>(n.args[0].i)).shape.size() == 4) {
        step.pool.channelsLast = true;
        impl->stats.channelsLastPools++;
        const ValueId values = n.outputs[0], indices = n.outputs[1];
        step.pool.keepValuesChannelsLast = !graph.users(values).empty() && layoutAgnosticReaders(graph, values);
        step.pool.indicesRead = isOutput[static_cast<size_t>(indices)] || !graph.users(indices).empty();
      }
      // Element-wise ops and pooling keep their first input's memory format; a permute of a
      // 4-D value turns channels-last NCHW into dense NHWC (0, 2, 3, 1) and back (0, 3, 1, 2).
      if (n.op == "aten::permute" && n.args.size() == 2 && n.args[0].isValue() && !n.outputs.empty()) {
        const bool inCl = channelsLast[static_cast<size_t>(n.args[0].i)];
        auto dims = n.args[1].asIntList();
        const bool toNchw = dims.isOk() && *dims == std::vector<int64_t>{0, 3, 1, 2};
        // (A channels-last value permuted to NHWC is dense: not channels-last.)
        channelsLast[static_cast<size_t>(n.outputs[0])] =
            toNchw && !inCl && graph.value(static_cast<ValueId>(n.args[0].i)).shape.size() == 4;
      } else if (!n.outputs.empty()) {
        // The first tensor argument of the result's shape (addcmul(shift, x, scale) follows x),
        // else the first argument (pooling).
        const Arg* from = !n.args.empty() && n.args[0].isValue() ? &n.args[0] : nullptr;
        for (const Arg& a : n.args) {
          if (a.isValue() && graph.value(static_cast<ValueId>(a.i)).shape == graph.value(n.outputs[0]).shape) {
            from = &a;
            break;
          }
        }
        if (from) {
          channelsLast[static_cast<size_t>(n.outputs[0])] = channelsLast[static_cast<size_t>(from->i)] &&
                                                           !isOutput[static_cast<size_t>(n.outputs[0])];
        }
      }
      if (step.pool.keepValuesChannelsLast) channelsLast[static_cast<size_t>(n.outputs[0])] = true;
    }
    for (size_t v = 0; v < lastUse.size(); ++v) {
      if (lastUse[v] == static_cast<int64_t>(s) && !isOutput[v]) step.freeAfter.push_back(static_cast<ValueId>(v));
    }
    // Outputs nobody reads (e.g. batch norm's saved statistics) die right away.
    for (ValueId out : n.outputs) {
      if (lastUse[static_cast<size_t>(out)] == -1 && !isOutput[static_cast<size_t>(out)]) step.freeAfter.push_back(out);
    }
    if (!step.fused) (step.op ? impl->stats.dispatcherSteps : impl->stats.builtinSteps)++;
    if (step.fused && step.args.size() == 2 && step.args[1].value != step.args[0].value) {
      const ValueId r = step.args[1].value;
      if (lastUse[static_cast<size_t>(r)] == static_cast<int64_t>(s) && !isOutput[static_cast<size_t>(r)] &&
          graph.value(r).producer >= 0) {
        step.donatedResidual = r;  // an intermediate nobody reads later: its buffer can take the sum
      }
    }
    stepOf[k] = impl->steps.size();
    step.node = k;
    impl->steps.push_back(std::move(step));
  }
  // Folded values kept for the calls: those a step reads (the rest fed only other folded nodes).
  std::vector<bool> readPerCall(graph.numValues(), false);
  for (const Step& step : impl->steps) {
    for (const ArgSlot& a : step.args) {
      if (a.kind == ArgSlot::Kind::Value) readPerCall[static_cast<size_t>(a.value)] = true;
      if (a.kind != ArgSlot::Kind::DynamicList) continue;
      used.clear();
      a.list.collectValues(used);
      for (ValueId v : used) readPerCall[static_cast<size_t>(v)] = true;
    }
  }
  for (size_t v = 0; v < foldSlots.size(); ++v) {
    if (!readPerCall[v] || foldSlots[v].isNone()) continue;
    c10::IValue value = std::move(foldSlots[v]);
    if (value.isTensor() && !value.toTensor().is_contiguous() &&
        layoutUnobservable(graph, static_cast<ValueId>(v), planTime)) {
      value = value.toTensor().contiguous();
      impl->stats.foldedMadeContiguous++;
    }
    impl->folded.emplace_back(static_cast<ValueId>(v), std::move(value));
  }
  foldSlots.clear();
  impl->stats.constants = impl->constants.size();
  impl->inputArgIndex = std::move(inputArgIndex);
  impl->numArgs = numArgs;

  // --- one decision per partition, in execution order ------------------------------------------
  for (size_t u : unitOrder) {
    const Unit& unit = units[u];
    if (unit.partition < 0) continue;
    const PartitionSpec& spec = specs[static_cast<size_t>(unit.partition)];
    PartitionDecision d;
    d.id = spec.id;
    for (size_t k : unit.nodes) d.nodes.push_back(graph.nodes()[k].id);
    std::vector<FusedOp*> members;
    for (size_t k : unit.nodes) members.push_back(fusedOf[k]);
    std::vector<Engine> candidates;
    for (Engine e : allEngines()) {
      bool all = true;
      for (FusedOp* op : members) all = all && op->canRun(e);
      if (all) candidates.push_back(e);
    }
    if (!willTime(unit.partition) || candidates.size() < 2) {
      d.engine = engineName(members.front()->engine());
      if (candidates.size() < 2) d.how = "heuristic: one candidate engine";
      else if (!partitionStatic[static_cast<size_t>(unit.partition)]) d.how = "heuristic: dynamic shapes";
      else if (partitionForced[static_cast<size_t>(unit.partition)]) {
        d.how = forcedAttention.empty() || !forcesAttention(unit) ? "heuristic: VERIFUSE_LINEAR=" + forcedLinear
                                                                  : "heuristic: VERIFUSE_ATTENTION=" + forcedAttention;
      }
      else if (!tuning) d.how = options.autotune ? "heuristic: no tuning database" : "heuristic: autotune off";
      else if (fewRowLinears[static_cast<size_t>(unit.partition)]) d.how = "heuristic: float32 linear of at most 4 rows";
      else d.how = "heuristic: too big to time (" + std::to_string(static_cast<int64_t>(partitionMacs[static_cast<size_t>(unit.partition)])) + " MACs)";
      if (candidates.size() < 2 && options.releaseWeights) {
        for (FusedOp* op : members) op->releaseWeights();
      }
    } else {
      // Time the whole partition on each candidate with random inputs of its real shapes. The
      // inputs are made only when a candidate really runs: a decision the tuning database holds
      // needs none (random tensors and a partition run per compile were most of a warm plan).
      const size_t begin = stepOf[unit.nodes.front()];
      size_t end = begin;
      for (size_t k : unit.nodes) end = std::max(end, stepOf[k] + 1);
      std::vector<bool> isFolded(graph.numValues(), false);
      for (const auto& entry : impl->folded) isFolded[static_cast<size_t>(entry.first)] = true;
      std::vector<ValueId> randomInputs;
      std::vector<std::vector<int64_t>> inputShapes;
      // Which inputs arrive channels-last, or as views: a convolution's timing depends on it (a
      // plain input costs oneDNN a conversion that ATen's kernel does not pay), and attention's
      // on q/k/v's strides, so it is part of the key. Keys of partitions whose inputs are all
      // dense stay what they were.
      std::string inputLayouts;
      // 'v': made through the model's view steps (its strides, see partitionInputs).
      std::vector<size_t> viewChain;
      auto layoutLetter = [&](ValueId v) {
        if (channelsLast[static_cast<size_t>(v)] && graph.value(v).shape.size() >= 4) return 'c';
        return viewChainRoot(graph, indexOf, stepOf, *impl, v, viewChain) ? 'v' : 'd';
      };
      auto layoutTag = [](const std::string& letters) {
        return letters.find_first_not_of('d') == std::string::npos ? std::string() : " inputs:" + letters;
      };
      std::set<ValueId> produced;
      for (size_t st = begin; st < end; ++st) {
        for (const ArgSlot& a : impl->steps[st].args) {
          if (a.kind != ArgSlot::Kind::Value || produced.count(a.value) || isFolded[static_cast<size_t>(a.value)]) continue;
          produced.insert(a.value);  // read twice, one input
          randomInputs.push_back(a.value);
          inputShapes.push_back(graph.value(a.value).shape);
          inputLayouts += layoutLetter(a.value);
        }
        for (ValueId out : impl->steps[st].outputs) produced.insert(out);
      }
      std::vector<c10::IValue> slots;  // the partition's start values: folded ones, random inputs
      auto partitionInputs = [&]() -> const std::vector<c10::IValue>& {
        if (!slots.empty()) return slots;
        impl->stats.tuningInputsMade++;
        slots.resize(graph.numValues());
        for (const auto& [v, value] : impl->folded) slots[static_cast<size_t>(v)] = value;
        auto randomOf = [&](ValueId id) {
          const ir::Value& v = graph.value(id);
          // A bf16 model's activations are bf16; everything else is timed on float32 as before.
          const at::ScalarType type = v.dtype == ir::DType::BFloat16 ? at::kBFloat16 : at::kFloat;
          at::Tensor t = at::randn(v.shape, at::TensorOptions().dtype(type));
          if (channelsLast[static_cast<size_t>(id)] && v.shape.size() == 4) t = t.contiguous(at::MemoryFormat::ChannelsLast);
          if (channelsLast[static_cast<size_t>(id)] && v.shape.size() == 5) t = t.contiguous(at::MemoryFormat::ChannelsLast3d);
          return t;
        };
        for (ValueId id : randomInputs) {
          if (!slots[static_cast<size_t>(id)].isNone()) continue;  // made by an earlier input's view chain
          // An input the model hands over through views (SDPA's q, k and v: a projection's output
          // split per head and transposed) is made the same way, from a random root through the
          // plan's own view steps, so it has the model's strides: the engines do not pay the same
          // for strided rows (AVX2, [1,12,128,64]: the attention engine 4% ahead of ATen's kernel
          // on dense q/k/v, 3-5% behind on transposed views of a split input).
          std::vector<size_t> chain;
          if (auto root = viewChainRoot(graph, indexOf, stepOf, *impl, id, chain)) {
            if (slots[static_cast<size_t>(*root)].isNone()) slots[static_cast<size_t>(*root)] = randomOf(*root);
            bool ok = true;
            for (auto it = chain.rbegin(); it != chain.rend() && ok; ++it) {
              ok = runSteps(*impl, stepOf[*it], stepOf[*it] + 1, slots, false, std::nullopt, /*keepValues=*/true).isOk();
            }
            const c10::IValue& made = slots[static_cast<size_t>(id)];
            if (ok && made.isTensor() && made.toTensor().sizes().vec() == graph.value(id).shape) {
              impl->stats.tuningInputsThroughViews++;
              continue;
            }
          }
          slots[static_cast<size_t>(id)] = randomOf(id);
        }
        return slots;
      };
      const double penaltyMs = testOnednnTuningPenaltyMs();
      // Runs steps [from, to) on engine e from the random inputs (or, for one member, from the
      // values a whole-partition run left in `values`).
      std::vector<c10::IValue> values;
      auto runRange = [&](size_t from, size_t to, Engine e, const std::vector<c10::IValue>& start,
                          std::vector<c10::IValue>* keep) -> Status {
        std::vector<c10::IValue> scratch = start;
        try {
          VF_RETURN_IF_ERROR(runSteps(*impl, from, to, scratch, false, e, /*keepValues=*/keep != nullptr));
        } catch (const std::exception& ex) {
          return unimplemented(std::string("partition failed on ") + engineName(e) + ": " + ex.what());
        }
        if (e == Engine::kOnednn && penaltyMs > 0) {
          size_t fusedRuns = 0;
          for (size_t st = from; st < to; ++st) fusedRuns += impl->steps[st].fused ? 1 : 0;
          std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(penaltyMs * static_cast<double>(fusedRuns)));
        }
        if (keep) *keep = std::move(scratch);
        return Status::ok();
      };
      // `start` hands the values a timing run starts from (made on first use; null: none).
      using StartValues = std::function<const std::vector<c10::IValue>*()>;
      auto tune = [&](const std::string& signature, const std::vector<std::vector<int64_t>>& shapes,
                      const std::vector<Engine>& engines, size_t from, size_t to,
                      const StartValues& start) -> StatusOr<kernels::TuningDecision> {
        std::vector<kernels::Candidate> cands;
        for (Engine e : engines) {
          cands.push_back({engineName(e), [&, e, from, to]() -> Status {
                             const std::vector<c10::IValue>* values = start();
                             if (values == nullptr) return unimplemented("the partition's run before its members failed");
                             return runRange(from, to, e, *values, nullptr);
                           }});
        }
        auto key = kernels::TuningKey::forThisMachine(signature, shapes, options.bf16 ? "bf16" : "f32",
                                                      at::get_num_threads());
        return tuneOrReplay(TuningSources::of(options), key, signature.substr(0, 80), cands, 1, options.tuneRepeats);
      };
      auto parseEngine = [](const std::string& name) {
        for (Engine e : allEngines()) {
          if (name == engineName(e)) return e;
        }
        return Engine::kAten;
      };
      const int64_t timingsAtStart = kernels::timingCallCount();
      auto decision = tune((spec.signature.empty() ? std::string("partition") : spec.signature) + layoutTag(inputLayouts),
                           inputShapes, candidates, begin, end, [&] { return &partitionInputs(); });
      Engine chosen = heuristicEngine[static_cast<size_t>(unit.partition)];
      if (!decision.isOk()) {
        d.how = "heuristic: tuning failed (" + decision.status().toString() + ")";
        if (std::find(candidates.begin(), candidates.end(), chosen) == candidates.end()) chosen = candidates.front();
      } else {
        chosen = parseEngine(decision->chosen);
        for (const auto& [name, ms] : decision->medianMs) {
          if (ms >= 0) d.candidateMs[name] = ms;
        }
        d.how = kernels::timingCallCount() > timingsAtStart ? "tuned" : "tuning-db";
        // Split when a mix pays: each member alone on each engine it can run (from the values a
        // whole-partition run produced), its best summed over the members.
        if (members.size() > 1 && spec.memberSignatures.size() == members.size()) {
          bool ranWhole = false;
          auto memberInputs = [&]() -> const std::vector<c10::IValue>* {
            if (!ranWhole) {
              ranWhole = true;
              (void)runRange(begin, end, chosen, partitionInputs(), &values);
            }
            return values.empty() ? nullptr : &values;
          };
          double mixMs = 0;
          std::vector<Engine> best(members.size(), chosen);
          bool complete = true;
          for (size_t j = 0; j < members.size() && complete; ++j) {
            const size_t st = stepOf[unit.nodes[j]];
            std::vector<std::vector<int64_t>> shapes;
            std::vector<Engine> engines;
            std::string memberLayouts;
            for (const ArgSlot& a : impl->steps[st].args) {
              if (a.kind != ArgSlot::Kind::Value) continue;
              shapes.push_back(graph.value(a.value).shape);
              memberLayouts += layoutLetter(a.value);
            }
            for (Engine e : allEngines()) {
              if (members[j]->canRun(e)) engines.push_back(e);
            }
            auto mine = tune(spec.memberSignatures[j] + layoutTag(memberLayouts), shapes, engines, st, st + 1, memberInputs);
            if (!mine.isOk()) {
              complete = false;
              break;
            }
            best[j] = parseEngine(mine->chosen);
            mixMs += mine->msOf(mine->chosen);
            for (const auto& [name, ms] : mine->medianMs) {
              if (ms >= 0) impl->nodeTimings[unit.nodes[j]][name] = ms;
            }
          }
          const double wholeMs = decision->msOf(decision->chosen);
          bool mixed = false;
          for (Engine e : best) mixed = mixed || e != best.front();
          if (complete && mixed && wholeMs > 0 && mixMs < wholeMs * (1.0 - options.splitMargin)) {
            d.split = true;
            d.splitMs = mixMs;
            for (size_t j = 0; j < members.size(); ++j) members[j]->setEngine(best[j]);
          }
        }
      }
      impl->timingsRun = kernels::timingCallCount() - timingsBefore;
      if (!d.split) {
        for (FusedOp* op : members) op->setEngine(chosen);
      }
      d.engine = d.split ? "split" : engineName(chosen);
      if (options.releaseWeights) {
        for (FusedOp* op : members) op->releaseWeights();
      }
    }
    // Layout inside and conversions at the edges.
    bool anyConv = false;
    for (size_t k : unit.nodes) d.macs += estimateMacs(graph, graph.nodes()[k]);
    for (size_t k : unit.nodes) {
      const ir::Node& n = graph.nodes()[k];
      const ir::Value& x = graph.value(static_cast<ValueId>(n.args[0].i));
      if (n.op == rules::kConvOp && x.shape.size() >= 4) {
        anyConv = true;
        // Conversions are per tensor, recorded with what they move (explain draws exactly these).
        auto convert = [&](ValueId v, bool input) {
          const ir::Value& t = graph.value(v);
          EdgeConversion c;
          c.value = v;
          c.node = n.id;
          c.input = input;
          c.kind = input ? "layout: plain -> channels_last" : "layout: channels_last -> plain";
          if (t.hasStaticShape()) {
            int64_t numel = 1;
            for (const int64_t dim : t.shape) numel *= dim;
            c.bytes = numel * static_cast<int64_t>(c10::elementSize(toScalarType(t.dtype == ir::DType::Undefined
                                                                                     ? ir::DType::Float32
                                                                                     : t.dtype)));
          }
          d.conversions.push_back(std::move(c));
        };
        if (!channelsLast[static_cast<size_t>(n.args[0].i)]) {
          d.inputConversions++;
          convert(static_cast<ValueId>(n.args[0].i), true);
        }
        if (!channelsLast[static_cast<size_t>(n.outputs[0])]) {
          d.outputConversions++;
          convert(n.outputs[0], false);
        }
      }
    }
    d.layout = anyConv ? "channels_last" : "plain";
    for (size_t k : unit.nodes) {
      const ir::Node& n = graph.nodes()[k];
      if (n.outputs.empty()) continue;
      const ir::DType t = graph.value(n.outputs[0]).dtype;
      const std::string name = t == ir::DType::Undefined ? "f32" : ir::dtypeShortName(t);  // text graphs: f32
      d.dtype = d.dtype.empty() || d.dtype == name ? name : "mixed";
    }
    std::vector<std::string> runsOn;  // each engine once, in member order
    for (FusedOp* op : members) {
      const std::string on = op->runsOn();
      if (std::find(runsOn.begin(), runsOn.end(), on) == runsOn.end()) {
        d.runsOn += (runsOn.empty() ? "" : " + ") + on;
        runsOn.push_back(on);
      }
      if (d.impl.empty() && op->engine() != Engine::kAten) d.impl = op->implInfo();
      d.weightCopyBytes += op->weightCopyBytes();
      const std::string layout = op->weightLayout();
      if (layout.empty()) continue;
      d.weightLayout = d.weightLayout.empty() || d.weightLayout == layout ? layout : "mixed";
    }
    impl->stats.weightCopyBytes += d.weightCopyBytes;
    const int32_t index = static_cast<int32_t>(impl->partitions.size());
    for (size_t k : unit.nodes) {
      impl->nodePartition[k] = index;
      impl->nodeEngines[k] = engineName(fusedOf[k]->engine());
      impl->nodeRunsOn[k] = fusedOf[k]->runsOn();
    }
    impl->stats.conversions += static_cast<size_t>(d.inputConversions + d.outputConversions);
    impl->partitions.push_back(std::move(d));
  }
  std::vector<FusedOp*> deferred;
  for (FusedOp* op : fusedOf) {
    if (!op) continue;
    op->finishPlanning();
    if (op->hasDeferredWork() && std::find(deferred.begin(), deferred.end(), op) == deferred.end()) deferred.push_back(op);
  }
  if (!deferred.empty()) {
    // In step order, so the first run and the packing walk the model together; the run waits on
    // an op's lock only when it overtakes the packing.
    {
      std::lock_guard<std::mutex> lock(gDeferredMu);
      ++gDeferredRunning;
    }
    auto done = [] {
      std::lock_guard<std::mutex> lock(gDeferredMu);
      --gDeferredRunning;
      gDeferredDone.notify_all();
    };
    try {
      impl->deferredWork = std::thread([deferred, done] {
        for (FusedOp* op : deferred) op->finishDeferredWork();
        done();
      });
    } catch (const std::system_error&) {
      for (FusedOp* op : deferred) op->finishDeferredWork();  // no thread to be had: pack now
      done();
    }
  }
  impl->timingsRun = kernels::timingCallCount() - timingsBefore;
  impl->stats.partitions = impl->partitions.size();
  for (size_t k = 0; k < numNodes; ++k) {
    if (fusedOf[k] && fusedOf[k]->engine() == Engine::kOnednn) impl->stats.onednnSteps++;
  }
  impl->graph = std::move(graph);
  impl->stepNs = std::make_unique<std::atomic<int64_t>[]>(impl->steps.size());
  for (size_t s = 0; s < impl->steps.size(); ++s) impl->stepNs[s].store(0, std::memory_order_relaxed);
  return std::shared_ptr<const CompiledGraph>(std::make_shared<CompiledGraph>(std::move(impl)));
}

namespace {

Status runSteps(const CompiledGraph::Impl& p, size_t begin, size_t end, std::vector<c10::IValue>& slots, bool exact,
                std::optional<Engine> engine, bool keepValues, std::atomic<int64_t>* stepNs) {
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
      step.op->callBoxed(stack);
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

}  // namespace

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
    if (n.args.size() < 2 || !n.args[1].isConstant()) continue;
    const at::Tensor& w = impl_->constants[static_cast<size_t>(n.args[1].i)];
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
      return Status(StatusCode::kStaleWeights, f.name + " was modified in place");
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
    VF_RETURN_IF_ERROR(runSteps(p, 0, p.steps.size(), slots, exact, std::nullopt, /*keepValues=*/false, stepNs));
  } catch (const c10::Error& e) {
    if (isNeedsExactPlanError(e.what_without_backtrace())) {
      return unimplemented(e.what_without_backtrace());
    }
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
