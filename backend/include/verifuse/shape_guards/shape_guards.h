// Shape guards under dynamic shapes (design.md section 3, level 3): the plan's own shape
// assumptions, which of them Dynamo's guards entail, and the guards verifuse adds for the rest.
//
//   Python (verifuse/guards.py)            collects Dynamo's facts once: the ShapeEnv's guards,
//                                          value ranges, replacements, divisibility, runtime
//                                          asserts, each as an ir::SymExpr (DynamoFacts)
//   deriveAssumptions(planned graph)       what the plan relies on, from its symbolic sizes
//   analyzeShapeGuards(plan, facts)        entailment per assumption (verifier/shapes: own
//                                          reasoning, then Z3), the added guards (minimized),
//                                          the shape program as SMT-LIB, and a GuardCheck
//   GuardCheck::check(input sizes)         on every call, before the plan runs: a violated guard
//                                          is a kShapeGuardFailed status (the caller runs the
//                                          graph eagerly, or raises under strict)
//
// Torch-free; Z3 stays behind verifier/shapes (verifuse/shapes/shape_problem.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "verifuse/ir/graph.h"
#include "verifuse/ir/sym_expr.h"
#include "verifuse/support/status.h"

namespace verifuse::shape_guards {

/// A size symbol, named as in the shape corpus ("x_size0"), with Dynamo's source and example.
struct SizeSymbol {
  std::string name;
  std::string source;              ///< "L['x'].size()[0]"
  std::optional<int64_t> example;  ///< the value it was traced with
};

/// One of Dynamo's facts about the sizes: something Dynamo checks before the graph runs.
struct DynamoFact {
  std::string source;      ///< "var_to_range", "replacement", "divisible", "guard", "runtime_assert"
  ir::SymExpr condition;   ///< invalid when Python could not translate it
  std::string text;        ///< Dynamo's own text, for an untranslated fact
  std::string skipped;     ///< why it was not translated (it is then not used)
};

/// What Python hands over once per dynamic graph (driver::CompileRequest::shapeFacts).
struct DynamoFacts {
  std::vector<SizeSymbol> symbols;  ///< in the order the shape program declares them
  std::vector<DynamoFact> facts;
  int nonSizeGuards = 0;            ///< guards over non-size symbols (a float eps): counted, not used
  int timeoutMs = 2000;             ///< solver budget per question
  /// Analyze at all: set by the bindings when Python sends facts (some input size is symbolic).
  bool dynamic = false;
};

/// `lhs op rhs`, op one of the comparison kinds.
struct Comparison {
  ir::SymExpr lhs;
  ir::SymExpr::Kind op = ir::SymExpr::Kind::kEq;
  ir::SymExpr rhs;
};

/// One of the plan's shape assumptions: true when any alternative holds.
struct Assumption {
  std::string kind;                      ///< "positive size", "convolution window fits", ...
  std::vector<std::string> nodes;        ///< where it comes from: "x.size(0)", "verifuse::conv#3"
  std::vector<Comparison> alternatives;
  ir::SymExpr condition;                 ///< the comparison, or the `or` of the alternatives
  std::string text;                      ///< as the report shows it: "x_size0 >= 1"

  // Filled by analyzeShapeGuards:
  bool entailed = false;
  std::string how;  ///< "structural", "verifuse-shapes:<decided by>", "... (counterexample)", "unknown: ..."
  std::vector<std::pair<std::string, int64_t>> counterexample;  ///< sizes where the guards hold and it does not
  std::string smt;  ///< SMT-LIB text ("false" for a static assumption that fails)
  double seconds = 0;
};

/// A guard verifuse adds for an assumption the guards do not entail.
struct AddedGuard {
  std::string text, kind;
  std::vector<std::string> nodes;
  ir::SymExpr condition;
  std::string smt;
  bool checkedAtRuntime = false;         ///< false: no input binds a symbol, or implied by the others
  bool coveredByOtherAddedGuards = false;
};

/// Where a symbol's value is read on each call: argument argIndex, its size dim (dim -1: the
/// argument is an Int).
struct SymbolBinding {
  std::string name;
  int32_t argIndex = -1;
  int32_t dim = -1;
};

/// The added guards, evaluated on a call's input sizes (compiled once; no allocation per call).
class GuardCheck {
 public:
  struct Guard {
    ir::SymExpr condition;
    std::string message;  ///< "shape guard failed: x_size0 >= 1 (positive size)"
  };
  /// Conditions may only use symbols of \p bindings.
  GuardCheck(std::vector<SymbolBinding> bindings, std::vector<Guard> guards);
  ~GuardCheck();

  const std::vector<SymbolBinding>& bindings() const { return bindings_; }
  const std::vector<Guard>& guards() const { return guards_; }
  /// \p values[i] is the value of bindings()[i] for this call. kShapeGuardFailed with the first
  /// violated guard's message; a guard that cannot be evaluated (division by zero, overflow)
  /// counts as violated.
  Status check(const int64_t* values, size_t count) const;
  Status check(const std::vector<int64_t>& values) const { return check(values.data(), values.size()); }

  struct Program;

 private:
  std::vector<SymbolBinding> bindings_;
  std::vector<Guard> guards_;
  std::vector<Program> programs_;
};

/// One of Dynamo's facts as the report shows it.
struct GuardEntry {
  std::string text, source, skipped;
};

/// Everything explain() shows about a dynamic graph's shapes (driver::CompileReport::shapes).
struct ShapeGuardReport {
  bool analyzed = false;           ///< the graph had symbolic sizes and facts were given
  std::string error;               ///< the analysis failed: nothing is checked per call
  std::vector<SizeSymbol> symbols;
  std::vector<GuardEntry> guards;
  std::vector<Assumption> assumptions;
  std::vector<AddedGuard> addedGuards;
  int staticAssumptions = 0;       ///< assumptions with no symbol (decided by their constants)
  int nonSizeGuards = 0;
  int solverCalls = 0;             ///< engine questions asked
  double seconds = 0;
  std::string smt2;                ///< the shape program in the corpus's SMT-LIB format
  std::shared_ptr<const GuardCheck> check;  ///< null when no guard is checked per call
};

/// The plan's shape assumptions, in graph order (graph inputs first), one per distinct condition
/// (nodes merged). \p examples (symbol -> traced value) picks the dims a view merges. Assumptions
/// without symbols are counted in *staticCount and listed only when they fail.
std::vector<Assumption> deriveAssumptions(const ir::Graph& plan, const std::map<std::string, int64_t>& examples,
                                          int* staticCount);

/// Derives the assumptions of \p plan, decides each against \p facts, adds (minimized) guards
/// for the rest and writes the shape program. \p inputArgIndex maps graph inputs to call
/// arguments (where the guard check reads sizes). Never fails: errors land in report.error.
ShapeGuardReport analyzeShapeGuards(const ir::Graph& plan, const std::vector<int32_t>& inputArgIndex,
                                    const DynamoFacts& facts);

/// SMT-LIB text of a size expression or condition, with Python's // and % (floor semantics).
std::string toSmt(const ir::SymExpr& e);

}  // namespace verifuse::shape_guards
