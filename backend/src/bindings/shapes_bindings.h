// Shape bindings shared with the pipeline binding (shapes_bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "verifuse/ir/graph.h"
#include "verifuse/ir/sym_expr.h"
#include "verifuse/shape_guards/shape_guards.h"

namespace verifuse::bindings {

/// DynamoFacts from optimize_and_compile's shape_facts argument (a verifuse._C.ShapeFacts), or
/// empty facts (no analysis) for None.
shape_guards::DynamoFacts shapeFactsFrom(const pybind11::object& facts);

/// Adds the shape report of a dynamic-shape graph to a compile report dict under GraphReport's
/// names: "shape_guards" (the entries explain() lists), "shape_program_smt2", and "shape_check"
/// (a ShapeGuardCheck, or None when no guard is checked per call). Nothing for static shapes.
void addShapeReport(pybind11::dict& d, const shape_guards::ShapeGuardReport& r);

/// A tensor value's sizes (ints, SymExprs, None for an unnamed symbolic size) and optional strides;
/// an Int value's symbolic value (the lowering's set_sym_shape / set_sym_value, and build_graph).
void setSymShape(ir::Graph& g, int32_t value, const pybind11::iterable& sizes, const pybind11::object& strides);
void setSymValue(ir::Graph& g, int32_t value, const ir::SymExpr& e);

}  // namespace verifuse::bindings
