// Python binding for shape-program analysis: verifuse._C.analyze_shapes(text, redundant, timeout_ms).
#include <pybind11/pybind11.h>

#include <string>

#include "bindings/registry.h"
#include "verifuse/shapes/shape_analysis.h"

namespace py = pybind11;

namespace {

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

}  // namespace

VERIFUSE_REGISTER_BINDINGS(shapes, [](pybind11::module_& m) {
  m.def("analyze_shapes", &analyzeShapes, py::arg("text"), py::arg("redundant") = false,
        py::arg("timeout_ms") = 8000, py::arg("mode") = "prefix", py::arg("use_hints") = true,
        "Analyze an SMT-LIB shape program; returns the report as a JSON string. Invalid input raises "
        "ValueError naming the line and column.");
});
