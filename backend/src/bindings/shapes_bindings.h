// Shape bindings shared with the pipeline binding (shapes_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "verifuse/shape_guards/shape_guards.h"

namespace verifuse::bindings {

/// DynamoFacts from optimize_and_compile's shape_facts argument (a verifuse._C.ShapeFacts), or
/// empty facts (no analysis) for None.
shape_guards::DynamoFacts shapeFactsFrom(const pybind11::object& facts);

/// Adds the shape report of a dynamic-shape graph to a compile report dict under GraphReport's
/// names: "shape_guards" (the entries explain() lists), "shape_program_smt2", and "shape_check"
/// (a ShapeGuardCheck, or None when no guard is checked per call). Nothing for static shapes.
void addShapeReport(pybind11::dict& d, const shape_guards::ShapeGuardReport& r);

}  // namespace verifuse::bindings
