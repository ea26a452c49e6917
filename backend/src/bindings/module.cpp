// verifuse._C: the Python face of the C++ core. The only place where a Status becomes a Python
// exception. LibTorch headers here and in the executor only.
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <functional>
#include <map>

#include "bindings/registry.h"
#include "bindings/shapes_bindings.h"
#include "runtime/int8_kernel_choice.h"
#include "verifuse/ir/graph.h"
#include "verifuse/ir/op_schema.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/gemm.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/runtime/executor.h"
#include "verifuse/runtime/plan_set.h"

namespace py = pybind11;

namespace verifuse::bindings {
namespace {
PyObject* gStaleWeightsError = nullptr;
PyObject* gWeightsModifiedError = nullptr;
PyObject* gUnsupportedError = nullptr;
PyObject* gNeedsExactPlanError = nullptr;
}  // namespace

[[noreturn]] void raise(const Status& status) {
  PyObject* type = PyExc_RuntimeError;
  if (status.code() == StatusCode::kStaleWeights) type = gStaleWeightsError;
  else if (status.code() == StatusCode::kWeightsModified) type = gWeightsModifiedError;
  else if (status.code() == StatusCode::kNeedsExactPlan) type = gNeedsExactPlanError;
  else if (status.code() == StatusCode::kUnsupported || status.code() == StatusCode::kUnimplemented) type = gUnsupportedError;
  else if (status.code() == StatusCode::kInvalidGraph) type = PyExc_ValueError;
  const bool asEager = status.code() == StatusCode::kInvalidArgument && !status.message().empty();
  PyErr_SetString(type, asEager ? status.message().c_str() : status.toString().c_str());
  throw py::error_already_set();
}

namespace {

template <typename T>
T unwrap(StatusOr<T> s) {
  if (!s.isOk()) raise(s.status());
  return std::move(s).value();
}

ir::ValueType valueTypeFromString(const std::string& name) { return unwrap(ir::parseValueType(name)); }

ir::ConstantTensor constantFromTensor(const std::string& name, const at::Tensor& t) {
  ir::ConstantTensor c;
  c.name = name;
  c.sizes = t.sizes().vec();
  c.strides = t.strides().vec();
  c.dtype = static_cast<ir::DType>(static_cast<int8_t>(t.scalar_type()));
  c.data = t.numel() ? t.data_ptr() : nullptr;
  c.owner = std::make_shared<at::Tensor>(t);
  c.ownerKind = ir::ConstantOwner::AtTensor;
  return c;
}

c10::IValue toIValue(const py::handle& obj) {
  if (THPVariable_Check(obj.ptr())) return THPVariable_Unpack(obj.ptr());
  if (obj.is_none()) return c10::IValue();
  if (py::isinstance<py::bool_>(obj)) return obj.cast<bool>();
  if (py::isinstance<py::int_>(obj)) return obj.cast<int64_t>();
  if (py::isinstance<py::float_>(obj)) return obj.cast<double>();
  // torch.SymInt / SymFloat that are backed by concrete values at run time.
  if (py::hasattr(obj, "__index__")) return obj.attr("__index__")().cast<int64_t>();
  if (py::hasattr(obj, "__float__")) return obj.attr("__float__")().cast<double>();
  throw py::type_error("verifuse: unsupported argument of type " + std::string(py::str(py::type::of(obj))));
}

py::object fromIValue(const c10::IValue& v) {
  if (v.isTensor()) return py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor()));
  if (v.isNone()) return py::none();
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isBool()) return py::bool_(v.toBool());
  throw py::type_error("verifuse: graph produced an output of unsupported type " + v.tagKind());
}

}  // namespace

py::dict statsDict(const runtime::CompiledGraph& cg) {
  py::dict d;
  auto s = cg.stats();
  d["dispatcher_steps"] = s.dispatcherSteps;
  d["builtin_steps"] = s.builtinSteps;
  d["constants"] = s.constants;
  d["fused_steps"] = s.fusedSteps;
  d["onednn_steps"] = s.onednnSteps;
  d["constant_folded_steps"] = s.constantFoldedSteps;
  d["folded_made_contiguous"] = s.foldedMadeContiguous;
  d["channels_last_pools"] = s.channelsLastPools;
  d["tuning_inputs_made"] = s.tuningInputsMade;
  d["tuning_inputs_through_views"] = s.tuningInputsThroughViews;
  d["plan_passes"] = s.planPassesChanged;
  d["in_place_writes"] = s.inPlaceWrites;
  std::map<std::string, int> ops;
  for (const auto& n : cg.graph().nodes()) ops[n.qualifiedName()]++;
  d["ops"] = ops;
  return d;
}

namespace {

py::list int8KernelRows(const runtime::CompiledGraph& cg) {
  py::list rows;
  for (const runtime::Int8KernelReport& r : cg.int8Kernels()) {
    py::dict d;
    d["node"] = r.node;
    d["op"] = r.op;
    d["variant"] = r.variant;
    d["impl"] = r.impl;
    d["summary"] = r.summary;
    py::list candidates;
    for (const auto& c : r.candidates) {
      py::dict x;
      x["variant"] = c.variant;
      x["proof"] = c.proof;
      x["proof_detail"] = c.proofDetail;
      x["counterexample"] = c.counterexample;
      x["made"] = c.made;
      candidates.append(x);
    }
    d["candidates"] = candidates;
    rows.append(d);
  }
  return rows;
}

void setInt8TestHook(const std::string& hook) {
  using H = runtime::Int8TestHook;
  if (hook.empty()) return runtime::setInt8TestHook(H::kNone);
  if (hook == "no-proof") return runtime::setInt8TestHook(H::kNoProof);
  if (hook == "no-checks") return runtime::setInt8TestHook(H::kNoChecks);
  if (hook == "onednn-declared-exact") return runtime::setInt8TestHook(H::kOnednnDeclaredExact);
  throw py::value_error("unknown int8 test hook '" + hook + "' (\"\", no-proof, no-checks, onednn-declared-exact)");
}

py::dict featuresDict(const kernels::cpu::CpuFeatures& f) {
  py::dict d;
  d["avx2"] = f.avx2;
  d["fma"] = f.fma;
  d["f16c"] = f.f16c;
  d["avx_vnni"] = f.avxVnni;
  d["avx512f"] = f.avx512f;
  d["avx512bw"] = f.avx512bw;
  d["avx512vl"] = f.avx512vl;
  d["avx512dq"] = f.avx512dq;
  d["avx512_vnni"] = f.avx512Vnni;
  d["avx512_bf16"] = f.avx512Bf16;
  d["avx512_fp16"] = f.avx512Fp16;
  d["amx_tile"] = f.amxTile;
  d["amx_int8"] = f.amxInt8;
  d["amx_bf16"] = f.amxBf16;
  return d;
}

py::dict capabilitiesDict() {
  const kernels::Capabilities& c = kernels::capabilities();
  py::dict d;
  d["tier"] = kernels::cpu::tierName(c.tier());
  d["cpu_tier"] = kernels::cpu::tierName(c.cpu.detectedTier);
  d["cap"] = c.cpu.cap ? py::object(py::str(kernels::cpu::tierName(*c.cpu.cap))) : py::object(py::none());
  d["cap_source"] = c.cpu.capSource;
  d["cap_error"] = c.cpu.capError;
  d["onednn_isa"] = c.onednnIsa;
  d["onednn_tier"] = kernels::cpu::tierName(c.onednnTier);
  d["onednn_cap_error"] = c.onednnCapError;
  d["detected"] = featuresDict(c.cpu.detected);
  d["usable"] = featuresDict(c.cpu.usable);
  d["own_avx2"] = c.cpu.usable.avx2Fma();
  d["own_avx512"] = c.cpu.usable.avx512();
  d["own_avx512_bf16"] = c.cpu.usable.avx512() && c.cpu.usable.avx512Bf16;
  d["onednn_native_bf16"] = c.onednnNativeBf16();
  d["onednn_int8_without_saturation"] = c.onednnInt8WithoutSaturation();
  // MKL's packed sgemm, the own-GEMM engine's second float32 kernel (kernels/gemm.h).
  d["mkl_sgemm"] = kernels::gemm::mklAvailable();
  d["mkl_sgemm_unavailable"] = kernels::gemm::mklUnavailableReason();
  d["summary"] = c.summary();
  return d;
}

/// Runs \p plan (a CompiledGraph or a PlanSet) on Python arguments, without the GIL; its error
/// raised as the Python exception for its Status (raise).
template <typename Plan>
py::tuple runOn(Plan& plan, const py::list& pyArgs) {
  std::vector<c10::IValue> args;
  args.reserve(pyArgs.size());
  for (const auto& a : pyArgs) args.push_back(toIValue(a));
  // A kernel decided at its first run may warn (an int8 op falling back to its reference); the
  // handler turns C++ warnings into Python ones when it goes out of scope, with the GIL held
  // again, so users' warning filters and tests see them. Its scope ends before any error is
  // raised: a warning filter that makes it an error may then throw from its destructor without
  // another exception in flight.
  StatusOr<std::vector<c10::IValue>> result = [&] {
    torch::PyWarningHandler warnings;  // destroyed last, once the GIL is held again
    py::gil_scoped_release release;
    return plan.run(args);
  }();
  // Drop our references to the inputs before Python regains control.
  args.clear();
  if (!result.isOk()) raise(result.status());
  py::tuple out(result->size());
  for (size_t k = 0; k < result->size(); ++k) out[k] = fromIValue((*result)[k]);
  return out;
}

void registerCore(py::module_& m) {
  gStaleWeightsError = PyErr_NewException("verifuse._C.StaleWeightsError", PyExc_RuntimeError, nullptr);
  gUnsupportedError = PyErr_NewException("verifuse._C.UnsupportedError", PyExc_RuntimeError, nullptr);
  m.attr("StaleWeightsError") = py::handle(gStaleWeightsError);
  m.attr("UnsupportedError") = py::handle(gUnsupportedError);
  // Subclasses, so a caller that only knows the base classes keeps working: a weight modified in
  // place (that plan can never match again) and inputs that need the unfused plan.
  gWeightsModifiedError = PyErr_NewException("verifuse._C.WeightsModifiedError", gStaleWeightsError, nullptr);
  gNeedsExactPlanError = PyErr_NewException("verifuse._C.NeedsExactPlanError", gUnsupportedError, nullptr);
  m.attr("WeightsModifiedError") = py::handle(gWeightsModifiedError);
  m.attr("NeedsExactPlanError") = py::handle(gNeedsExactPlanError);

  // The lowering's whole graph in one crossing (lowering.py, _GraphSpec): the constants, then the
  // records in creation order — inputs and nodes (their value ids are assigned in that order, as
  // the Graph methods below would), shapes, dtypes and symbolic sizes — and the outputs. Arguments
  // are (kind, payload) tuples, kinds as in _GraphSpec. The graph is verified before it returns.
  m.def("build_graph", [](const py::list& constants, const py::list& records, const py::list& outputs) {
    ir::Graph g;
    for (const py::handle c : constants) {
      const auto entry = c.cast<py::tuple>();
      g.addConstant(constantFromTensor(entry[0].cast<std::string>(), entry[1].cast<at::Tensor>()));
    }
    std::function<ir::Arg(const py::handle&)> argOf = [&](const py::handle& h) -> ir::Arg {
      const auto t = h.cast<py::tuple>();
      const auto kind = t[0].cast<std::string>();
      if (kind == "v") return ir::Arg::value(t[1].cast<int32_t>());
      if (kind == "c") return ir::Arg::constant(t[1].cast<int32_t>());
      if (kind == "n") return ir::Arg::none();
      if (kind == "b") return ir::Arg::boolean(t[1].cast<bool>());
      if (kind == "i") return ir::Arg::integer(t[1].cast<int64_t>());
      if (kind == "r") return ir::Arg::real(t[1].cast<double>());
      if (kind == "s") return ir::Arg::string(t[1].cast<std::string>());
      if (kind == "t") return ir::Arg::dtype(static_cast<ir::DType>(t[1].cast<int>()));
      if (kind == "d") return ir::Arg::device(t[1].cast<std::string>());
      if (kind == "l") return ir::Arg::layout(t[1].cast<int64_t>());
      if (kind == "m") return ir::Arg::memoryFormat(t[1].cast<int64_t>());
      if (kind == "L") {
        std::vector<ir::Arg> items;
        for (const py::handle e : t[1].cast<py::list>()) items.push_back(argOf(e));
        return ir::Arg::makeList(std::move(items));
      }
      throw py::value_error("build_graph: argument kind '" + kind + "'");
    };
    auto valueAt = [&](const py::handle& h) {
      const int32_t v = h.cast<int32_t>();
      if (v < 0 || static_cast<size_t>(v) >= g.numValues()) throw py::index_error("no such value");
      return v;
    };
    for (const py::handle r : records) {
      const auto rec = r.cast<py::tuple>();
      const auto what = rec[0].cast<std::string>();
      if (what == "input") {
        g.addInput(rec[1].cast<std::string>(), valueTypeFromString(rec[2].cast<std::string>()));
      } else if (what == "node") {
        std::vector<ir::Arg> args;
        for (const py::handle a : rec[3].cast<py::list>()) args.push_back(argOf(a));
        std::vector<ir::ValueType> types;
        for (const py::handle t : rec[4].cast<py::list>()) types.push_back(valueTypeFromString(t.cast<std::string>()));
        g.addNode(rec[1].cast<std::string>(), rec[2].cast<std::string>(), std::move(args), types);
      } else if (what == "shape") {
        g.mutableValue(valueAt(rec[1])).setShape(rec[2].cast<std::vector<int64_t>>());
      } else if (what == "dtype") {
        g.mutableValue(valueAt(rec[1])).dtype = static_cast<ir::DType>(rec[2].cast<int64_t>());
      } else if (what == "sym_shape") {
        setSymShape(g, valueAt(rec[1]), rec[2].cast<py::iterable>(), py::reinterpret_borrow<py::object>(rec[3]));
      } else if (what == "sym_value") {
        setSymValue(g, valueAt(rec[1]), rec[2].cast<ir::SymExpr>());
      } else {
        throw py::value_error("build_graph: record '" + what + "'");
      }
    }
    std::vector<ir::Arg> outs;
    for (const py::handle o : outputs) outs.push_back(argOf(o));
    g.setOutputs(std::move(outs));
    Status s = ir::verifyGraph(g);
    if (!s.isOk()) raise(s);
    return g;
  });

  py::class_<ir::Arg>(m, "Arg", "One operand of an IR node (build with the static constructors).")
      .def_static("none", &ir::Arg::none)
      .def_static("boolean", &ir::Arg::boolean)
      .def_static("integer", &ir::Arg::integer)
      .def_static("real", &ir::Arg::real)
      .def_static("string", &ir::Arg::string)
      .def_static("value", &ir::Arg::value)
      .def_static("constant", &ir::Arg::constant)
      .def_static("list", &ir::Arg::makeList)
      .def_static("dtype", [](int code) { return ir::Arg::dtype(static_cast<ir::DType>(code)); })
      .def_static("device", &ir::Arg::device)
      .def_static("layout", &ir::Arg::layout)
      .def_static("memory_format", &ir::Arg::memoryFormat);

  py::class_<ir::Graph>(m, "Graph", "A verifuse IR graph.")
      .def(py::init<>())
      .def("add_input", [](ir::Graph& g, const std::string& name, const std::string& type) {
        return g.addInput(name, valueTypeFromString(type));
      })
      .def("add_constant", [](ir::Graph& g, const std::string& name, const at::Tensor& t) {
        return g.addConstant(constantFromTensor(name, t));
      })
      .def("add_node",
           [](ir::Graph& g, const std::string& op, const std::string& overload, std::vector<ir::Arg> args,
              const std::vector<std::string>& outputTypes) {
             std::vector<ir::ValueType> types;
             for (const auto& t : outputTypes) types.push_back(valueTypeFromString(t));
             ir::NodeId id = g.addNode(op, overload, std::move(args), types);
             return g.node(id).outputs;
           })
      .def("set_outputs", &ir::Graph::setOutputs)
      .def("set_shape",
           [](ir::Graph& g, int32_t value, std::vector<int64_t> shape) {
             if (value < 0 || static_cast<size_t>(value) >= g.numValues()) throw py::index_error("no such value");
             g.mutableValue(value).setShape(std::move(shape));
           },
           "Records a value's sizes (-1 for a symbolic size).")
      .def("set_dtype",
           [](ir::Graph& g, int32_t value, int64_t code) {
             if (value < 0 || static_cast<size_t>(value) >= g.numValues()) throw py::index_error("no such value");
             g.mutableValue(value).dtype = static_cast<ir::DType>(code);
           },
           "Records a tensor value's element type (a c10::ScalarType code).")
      .def("verify", [](const ir::Graph& g) {
        Status s = ir::verifyGraph(g);
        if (!s.isOk()) raise(s);
      })
      .def("to_text", &ir::printGraph)
      .def("num_nodes", &ir::Graph::numLiveNodes)
      .def("__str__", &ir::printGraph);
  m.def(
      "op_schemas",
      [] {
        py::list rows;
        for (const ir::OpSchemaInfo& row : ir::opSchemas()) {
          py::list operands;
          for (std::string_view o : row.operands) operands.append(std::string(o));
          rows.append(py::make_tuple(std::string(row.schema), std::string(row.op), operands));
        }
        return rows;
      },
      "The operator schema table (ir/op_schema.h): (struct, operator, operand names) per row.");
  m.def("parse_graph", [](const std::string& text) { return unwrap(ir::parseGraph(text)); });

  py::class_<runtime::CompiledGraph, std::shared_ptr<runtime::CompiledGraph>>(m, "CompiledGraph")
      .def("run", [](const runtime::CompiledGraph& cg, const py::list& pyArgs) { return runOn(cg, pyArgs); },
           "Runs the graph on the full argument list (frozen weights included).")
      .def("weights_match",
           [](const runtime::CompiledGraph& cg, const py::list& pyArgs) {
             std::vector<c10::IValue> args;
             args.reserve(pyArgs.size());
             for (const auto& a : pyArgs) args.push_back(toIValue(a));
             return cg.checkFrozenInputs(args).isOk();
           },
           "True if the frozen arguments are the tensors (and versions) the plan was built for.")
      .def("graph_text", [](const runtime::CompiledGraph& cg) { return ir::printGraph(cg.graph()); })
      .def("stats", &statsDict)
      .def("profile",
           [](const runtime::CompiledGraph& cg) {
             const runtime::NodeProfile p = cg.profile();
             py::dict d;
             d["runs"] = p.runs;
             py::dict ns;
             for (size_t k = 0; k < p.nodeNs.size(); ++k) {
               if (p.nodeNs[k] > 0) ns[py::int_(cg.graph().nodes()[k].id)] = p.nodeNs[k];
             }
             d["node_ns"] = ns;
             return d;
           },
           "Per node id, nanoseconds summed over the runs made while set_profiling(True) (and how many).")
      .def("reset_profile", &runtime::CompiledGraph::resetProfile)
      .def("int8_kernels", &int8KernelRows,
           "The int8 ops' kernel choices made so far (at their first run): variant, kernel and every "
           "candidate's exactness verdict.");

  py::class_<runtime::PlanSet, std::shared_ptr<runtime::PlanSet>>(
      m, "PlanSet", "The plans of one compiled graph (a plan per set of weights, the exact plan) and the policy "
                    "that picks among them (runtime/plan_set.h).")
      .def(py::init([](std::shared_ptr<runtime::CompiledGraph> first, size_t maxPlans) {
             return std::make_shared<runtime::PlanSet>(std::move(first), maxPlans);
           }),
           py::arg("first"), py::arg("max_plans"))
      .def("run", [](runtime::PlanSet& set, const py::list& pyArgs) { return runOn(set, pyArgs); },
           "Runs the right plan; StaleWeightsError: add() one for these weights; NeedsExactPlanError: set_exact().")
      .def("run_exact", [](runtime::PlanSet& set, const py::list& pyArgs) {
             struct Exact {
               runtime::PlanSet& set;
               StatusOr<std::vector<c10::IValue>> run(const std::vector<c10::IValue>& a) { return set.runExact(a); }
             } exact{set};
             return runOn(exact, pyArgs);
           })
      .def("add", [](runtime::PlanSet& set, std::shared_ptr<runtime::CompiledGraph> plan) { set.add(std::move(plan)); })
      .def("set_exact",
           [](runtime::PlanSet& set, std::shared_ptr<runtime::CompiledGraph> plan) { set.setExact(std::move(plan)); })
      .def("current",
           [](const runtime::PlanSet& set) { return std::const_pointer_cast<runtime::CompiledGraph>(set.current()); })
      .def("size", &runtime::PlanSet::size)
      .def("switches", &runtime::PlanSet::switches);

  m.def("_set_int8_test_hook", &setInt8TestHook,
        "Tests only: switch the int8 kernel checks off (\"no-proof\", \"no-checks\") or declare oneDNN's "
        "int8 kernels exact on every tier (\"onednn-declared-exact\"); \"\" restores them. Process-wide; "
        "kernels already made keep their choice.");
  m.def("capabilities", &capabilitiesDict,
        "The capability model (kernels/capabilities.h): the tier verifuse runs as, the cap, the CPU's "
        "and the usable features, oneDNN's effective ISA and the predicates kernels and tests use.");
  m.def("wait_for_deferred_work", &runtime::waitForDeferredWork, py::call_guard<py::gil_scoped_release>(),
        "Blocks until no plan packs weights in the background (called at interpreter exit).");
  m.def("set_profiling", &runtime::setProfiling,
        "While on, every plan times each of its steps (CompiledGraph.profile; verifuse.profile).");
  m.def("gemm_packing_counts", &runtime::gemmPackingCounts,
        "The own GEMM's packed weights alive in the process (each once, shared by the plans using them), "
        "their bytes, and the lookups that found one (runtime/weight_packings.h).");
  m.def("engine_run_counts", &runtime::engineRunCounts,
        "Fused-op runs per engine since the process started (what plans really executed).");
  m.def(
      "compile",
      [](ir::Graph graph, std::vector<int32_t> inputArgIndex, const std::vector<std::pair<int32_t, int32_t>>& frozen,
         int32_t numArgs) {
        std::vector<runtime::FrozenInput> f;
        for (const auto& [arg, constant] : frozen) f.push_back({arg, constant});
        auto compiled = unwrap(runtime::compileGraph(std::move(graph), std::move(inputArgIndex), std::move(f), numArgs));
        return std::const_pointer_cast<runtime::CompiledGraph>(compiled);
      },
      py::arg("graph"), py::arg("input_arg_index"), py::arg("frozen"), py::arg("num_args"));
}

VERIFUSE_REGISTER_BINDINGS(core, registerCore);

}  // namespace

}  // namespace verifuse::bindings

PYBIND11_MODULE(_C, m) {
  m.doc() = "verifuse C++ core";
  for (auto& [name, fn] : verifuse::bindings::bindingRegistry()) fn(m);
}
