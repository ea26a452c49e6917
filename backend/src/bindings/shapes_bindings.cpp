// Python bindings for shapes:
//   analyze_shapes(text, ...)        the SMT-LIB shape-program engine (`python -m verifuse shapes`)
//   SymExpr                          size expressions (ir::SymExpr): the one term language Python
//                                    translates Dynamo's sympy expressions into
//   ShapeFacts                       Dynamo's facts for one graph, handed to optimize_and_compile
//   ShapeGuardCheck                  the added guards, checked in C++ on a call's input sizes
//   ShapeGuardViolation              raised by ShapeGuardCheck.check (a kShapeGuardFailed status)
//   set_sym_shape / set_sym_value    symbolic sizes of IR values (the lowering)
#include "bindings/shapes_bindings.h"

#include <pybind11/stl.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "bindings/registry.h"
#include "verifuse/ir/graph.h"
#include "verifuse/shapes/shape_analysis.h"

namespace py = pybind11;

namespace verifuse::bindings {
namespace {

using ir::SymExpr;
using Kind = SymExpr::Kind;

PyObject* gShapeGuardViolation = nullptr;

std::string analyzeShapes(const std::string& text, bool redundant, int timeout_ms, const std::string& mode,
                          bool use_hints) {
  verifuse::shapes::ShapeOptions opt;
  opt.redundant = redundant;
  opt.timeout_ms = timeout_ms;
  opt.use_hints = use_hints;
  if (mode == "others") {
    opt.mode = verifuse::shapes::RedundancyMode::kOthers;
  } else if (mode != "prefix") {
    throw py::value_error("mode must be 'prefix' or 'others', got '" + mode + "'");
  }
  verifuse::StatusOr<verifuse::shapes::ShapeReport> report = [&] {
    py::gil_scoped_release release;
    return verifuse::shapes::analyzeShapeProgram(text, opt);
  }();
  // The bindings are the only place where a Status becomes a Python exception.
  if (!report.isOk()) throw py::value_error(report.status().message());
  return verifuse::shapes::toJson(report.value());
}

Kind kindNamed(const std::string& op) {
  static const std::map<std::string, Kind> kinds = {
      {"add", Kind::kAdd}, {"mul", Kind::kMul}, {"pow", Kind::kPow}, {"floordiv", Kind::kFloorDiv},
      {"mod", Kind::kMod}, {"max", Kind::kMax}, {"min", Kind::kMin}, {"eq", Kind::kEq}, {"ne", Kind::kNe},
      {"lt", Kind::kLt},   {"le", Kind::kLe},   {"gt", Kind::kGt},   {"ge", Kind::kGe},  {"and", Kind::kAnd},
      {"or", Kind::kOr},   {"not", Kind::kNot}};
  auto it = kinds.find(op);
  if (it == kinds.end()) throw py::value_error("unknown SymExpr operator '" + op + "'");
  return it->second;
}

/// An int, bool or SymExpr as a SymExpr (None: invalid, an unknown size).
SymExpr asExpr(const py::handle& h) {
  if (h.is_none()) return SymExpr();
  if (py::isinstance<SymExpr>(h)) return h.cast<SymExpr>();
  if (py::isinstance<py::bool_>(h)) return SymExpr::boolean(h.cast<bool>());
  if (py::isinstance<py::int_>(h)) return SymExpr::integer(h.cast<int64_t>());
  throw py::type_error("expected an int, a bool or a SymExpr");
}

std::vector<SymExpr> asExprs(const py::iterable& items) {
  std::vector<SymExpr> out;
  for (const py::handle& h : items) out.push_back(asExpr(h));
  return out;
}

/// A Python int (or anything with __index__) as int64.
bool readInt(PyObject* o, int64_t* out) {
  PyObject* index = PyNumber_Index(o);
  if (!index) {
    PyErr_Clear();
    return false;
  }
  int overflow = 0;
  *out = PyLong_AsLongLongAndOverflow(index, &overflow);
  Py_DECREF(index);
  if (overflow || (*out == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  return true;
}

/// The added guards of one compiled graph, checked on every call before the plan runs.
class ShapeGuardCheck {
 public:
  explicit ShapeGuardCheck(std::shared_ptr<const shape_guards::GuardCheck> check) : check_(std::move(check)) {}

  /// Reads the bound sizes of \p args (the boxed call's full argument list) and raises
  /// ShapeGuardViolation with the first violated guard.
  void check(const py::list& args) const {
    const auto& bindings = check_->bindings();
    constexpr size_t kInline = 16;
    int64_t inlineValues[kInline];
    std::vector<int64_t> heapValues;
    int64_t* values = inlineValues;
    if (bindings.size() > kInline) {
      heapValues.resize(bindings.size());
      values = heapValues.data();
    }
    PyObject* list = args.ptr();
    for (size_t i = 0; i < bindings.size(); ++i) {
      const shape_guards::SymbolBinding& b = bindings[i];
      if (b.argIndex < 0 || b.argIndex >= PyList_GET_SIZE(list)) violation("cannot read " + b.name + ": no such argument");
      PyObject* arg = PyList_GET_ITEM(list, b.argIndex);
      bool ok = false;
      if (b.dim < 0) {
        ok = readInt(arg, &values[i]);
      } else if (PyObject* shape = PyObject_GetAttrString(arg, "shape")) {
        if (PyTuple_Check(shape) && b.dim < PyTuple_GET_SIZE(shape)) ok = readInt(PyTuple_GET_ITEM(shape, b.dim), &values[i]);
        Py_DECREF(shape);
      } else {
        PyErr_Clear();
      }
      if (!ok) violation("cannot read " + b.name + " from argument " + std::to_string(b.argIndex));
    }
    Status s = check_->check(values, bindings.size());
    if (!s.isOk()) violation(s.message());
  }

  py::list bindings() const {
    py::list out;
    for (const auto& b : check_->bindings()) out.append(py::make_tuple(b.name, b.argIndex, b.dim));
    return out;
  }
  py::list guards() const {
    py::list out;
    for (const auto& g : check_->guards()) out.append(g.message);
    return out;
  }

 private:
  [[noreturn]] static void violation(const std::string& message) {
    PyErr_SetString(gShapeGuardViolation, message.c_str());
    throw py::error_already_set();
  }
  std::shared_ptr<const shape_guards::GuardCheck> check_;
};

void registerShapes(py::module_& m) {
  m.def("analyze_shapes", &analyzeShapes, py::arg("text"), py::arg("redundant") = false,
        py::arg("timeout_ms") = 8000, py::arg("mode") = "prefix", py::arg("use_hints") = true,
        "Analyze an SMT-LIB shape program; returns the report as a JSON string. Invalid input raises "
        "ValueError naming the line and column.");

  gShapeGuardViolation = PyErr_NewException("verifuse._C.ShapeGuardViolation", PyExc_RuntimeError, nullptr);
  m.attr("ShapeGuardViolation") = py::handle(gShapeGuardViolation);

  py::class_<SymExpr>(m, "SymExpr",
                      "A size expression or condition over named size symbols (ir::SymExpr): build with "
                      "integer/symbol/boolean/apply; str() is Python syntax.")
      .def_static("integer", &SymExpr::integer)
      .def_static("symbol", &SymExpr::symbol)
      .def_static("boolean", &SymExpr::boolean)
      .def_static(
          "apply",
          [](const std::string& op, const py::iterable& args) {
            SymExpr e = SymExpr::make(kindNamed(op), asExprs(args));
            if (!e.valid()) throw py::value_error("ill-formed SymExpr '" + op + "' (sorts, exponent or overflow)");
            return e;
          },
          py::arg("op"), py::arg("args"),
          "op: add mul pow floordiv mod max min eq ne lt le gt ge and or not; args: SymExprs or ints.")
      .def_static("parse",
                  [](const std::string& text) {
                    auto e = SymExpr::parse(text);
                    if (!e.isOk()) throw py::value_error(e.status().message());
                    return e.value();
                  })
      .def("smt", &shape_guards::toSmt, "SMT-LIB text (Python's // and % as floor division)")
      .def("symbols", &SymExpr::symbols)
      .def_property_readonly("is_condition", &SymExpr::isCondition)
      .def("evaluate",
           [](const SymExpr& e, const std::map<std::string, int64_t>& values) -> py::object {
             auto v = e.evaluate([&](const std::string& s) -> std::optional<int64_t> {
               auto it = values.find(s);
               if (it == values.end()) return std::nullopt;
               return it->second;
             });
             if (!v) return py::none();
             if (e.isCondition()) return py::bool_(*v != 0);
             return py::int_(*v);
           },
           "The value for these symbol values (Python semantics), None when it has none.")
      .def("__eq__", [](const SymExpr& a, const SymExpr& b) { return a == b; })
      .def("__hash__", [](const SymExpr& e) { return std::hash<std::string>()(e.toString()); })
      .def("__str__", &SymExpr::toString)
      .def("__repr__", [](const SymExpr& e) { return "SymExpr(" + e.toString() + ")"; });

  py::class_<shape_guards::DynamoFacts>(m, "ShapeFacts",
                                        "Dynamo's shape facts for one graph (optimize_and_compile's shape_facts).")
      .def(py::init([] {
        shape_guards::DynamoFacts f;
        f.dynamic = true;
        return f;
      }))
      .def("add_symbol",
           [](shape_guards::DynamoFacts& f, const std::string& name, const std::string& source,
              std::optional<int64_t> example) { f.symbols.push_back({name, source, example}); },
           py::arg("name"), py::arg("source"), py::arg("example"))
      .def("add_fact",
           [](shape_guards::DynamoFacts& f, const std::string& source, const SymExpr& condition) {
             if (!condition.isCondition()) throw py::value_error("a fact is a condition");
             f.facts.push_back({source, condition, condition.toString(), ""});
           },
           py::arg("source"), py::arg("condition"))
      .def("add_skipped",
           [](shape_guards::DynamoFacts& f, const std::string& source, const std::string& text,
              const std::string& reason) { f.facts.push_back({source, SymExpr(), text, reason}); },
           py::arg("source"), py::arg("text"), py::arg("reason"))
      .def_readwrite("non_size_guards", &shape_guards::DynamoFacts::nonSizeGuards)
      .def_readwrite("timeout_ms", &shape_guards::DynamoFacts::timeoutMs)
      .def_property_readonly("symbols", [](const shape_guards::DynamoFacts& f) {
        py::list out;
        for (const auto& s : f.symbols) out.append(py::make_tuple(s.name, s.source, s.example));
        return out;
      });

  py::class_<ShapeGuardCheck>(m, "ShapeGuardCheck", "A compiled graph's added shape guards, checked in C++.")
      .def("check", &ShapeGuardCheck::check, py::arg("args"),
           "Raises ShapeGuardViolation when the arguments' sizes violate an added guard.")
      .def("bindings", &ShapeGuardCheck::bindings, "(symbol, argument index, dim or -1 for an int argument)")
      .def("guards", &ShapeGuardCheck::guards);

  m.def(
      "set_sym_shape",
      [](ir::Graph& g, int32_t value, const py::iterable& sizes, const py::object& strides) {
        setSymShape(g, value, sizes, strides);
      },
      py::arg("graph"), py::arg("value"), py::arg("sizes"), py::arg("strides") = py::none(),
      "A tensor value's sizes (ints, SymExprs, None for an unnamed symbolic size) and strides.");
  m.def("set_sym_value", &setSymValue, py::arg("graph"), py::arg("value"), py::arg("expr"),
        "An Int value's symbolic value.");
}

}  // namespace

void setSymShape(ir::Graph& g, int32_t value, const py::iterable& sizes, const py::object& strides) {
  if (value < 0 || static_cast<size_t>(value) >= g.numValues()) throw py::index_error("no such value");
  ir::Value& v = g.mutableValue(value);
  v.setSymShape(asExprs(sizes));
  if (!strides.is_none()) {
    std::vector<SymExpr> s = asExprs(strides.cast<py::iterable>());
    if (s.size() != v.shape.size()) throw py::value_error("one stride per dim");
    v.symStrides = std::move(s);
  }
}

void setSymValue(ir::Graph& g, int32_t value, const SymExpr& e) {
  if (value < 0 || static_cast<size_t>(value) >= g.numValues()) throw py::index_error("no such value");
  if (e.isCondition()) throw py::value_error("an Int value is an integer expression");
  g.mutableValue(value).symValue = e;
}

shape_guards::DynamoFacts shapeFactsFrom(const py::object& facts) {
  if (facts.is_none()) return {};
  return facts.cast<shape_guards::DynamoFacts>();
}

void addShapeReport(py::dict& d, const shape_guards::ShapeGuardReport& r) {
  if (!r.analyzed) return;  // static shapes: the report keeps its defaults
  py::list entries;
  if (!r.error.empty()) {
    py::dict e;
    e["type"] = "error";
    e["text"] = r.error;
    entries.append(e);
  } else {
    py::dict summary;
    int entailed = 0, checks = 0;
    for (const auto& a : r.assumptions) entailed += a.entailed ? 1 : 0;
    for (const auto& g : r.addedGuards) checks += g.checkedAtRuntime ? 1 : 0;
    py::dict symbols;
    for (const auto& s : r.symbols) symbols[py::str(s.name)] = s.source;
    summary["type"] = "summary";
    summary["seconds"] = std::round(r.seconds * 1e4) / 1e4;
    summary["solver_calls"] = r.solverCalls;
    summary["assumptions"] = static_cast<int>(r.assumptions.size());
    summary["entailed"] = entailed;
    summary["runtime_checks"] = checks;
    summary["static_assumptions"] = r.staticAssumptions;
    summary["non_size_guards"] = r.nonSizeGuards;
    summary["symbols"] = symbols;
    entries.append(summary);
    for (const auto& a : r.assumptions) {
      py::dict e;
      e["type"] = "assumption";
      e["text"] = a.text;
      e["kind"] = a.kind;
      e["nodes"] = a.nodes;
      e["entailed"] = a.entailed;
      e["how"] = a.how;
      e["added_guard"] = !a.entailed;
      if (!a.counterexample.empty()) {
        py::dict cex;
        for (const auto& [name, value] : a.counterexample) cex[py::str(name)] = value;
        e["counterexample"] = cex;
      }
      entries.append(e);
    }
    for (const auto& g : r.addedGuards) {
      py::dict e;
      e["type"] = "added_guard";
      e["text"] = g.text;
      e["kind"] = g.kind;
      e["nodes"] = g.nodes;
      e["checked_at_runtime"] = g.checkedAtRuntime;
      if (g.checkedAtRuntime) e["python"] = g.condition.toString();
      if (g.coveredByOtherAddedGuards) e["covered_by_other_added_guards"] = true;
      entries.append(e);
    }
  }
  for (const auto& g : r.guards) {
    py::dict e;
    e["type"] = "dynamo_guard";
    e["text"] = g.text;
    e["source"] = g.source;
    if (!g.skipped.empty()) e["skipped"] = g.skipped;
    entries.append(e);
  }
  d["shape_guards"] = entries;
  d["shape_program_smt2"] = r.smt2;
  d["shape_check"] = r.check ? py::cast(ShapeGuardCheck(r.check)) : py::object(py::none());
}

VERIFUSE_REGISTER_BINDINGS(shapes, registerShapes);

}  // namespace verifuse::bindings
