// ShapeProblem's insides, shared by problem.cpp and analysis.cpp (internal to verifier/src/shapes).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "parser.h"
#include "terms.h"
#include "verifuse/shapes/shape_problem.h"

namespace verifuse::shapes {

struct ShapeProblem::Impl {
  TermTable terms;
  std::unordered_map<std::string, Rat> hints;    // example values
  std::unordered_map<std::string, TermId> ints;  // declared constants by name
  std::string error;                             // the first sort error
};

/// The program analyzeShapeProblem runs: \p problem's terms (copied) with \p asserts.
Status loadProblem(const ShapeProblem& problem, const std::vector<ShapeProblem::Term>& asserts, ParsedProgram* out);

}  // namespace verifuse::shapes
