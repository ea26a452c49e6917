// Shape-program analysis: satisfiability, a model of the input sizes, and redundant asserts for
// SMT-LIB shape programs (the PyTorch shape corpus format). verifuse's own reasoning (equality
// propagation, polynomial normal forms, interval bounds, exact evaluation) decides most asserts;
// Z3 runs, with a timeout, on what is left. No Z3 types in this header.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::shapes {

enum class Verdict { kSat, kUnsat, kUnknown };
const char* verdictName(Verdict v);

/// Which asserts count as redundant (see verifier/src/shapes/README.md):
///   kPrefix: a_i is implied by a_1..a_{i-1}. All prefix-redundant asserts can be dropped together
///            and the rest is equivalent to the whole program.
///   kOthers: a_i is implied by all the other asserts (leave-one-out). Each one can be dropped on
///            its own, but not necessarily all of them at once.
enum class RedundancyMode { kPrefix, kOthers };
const char* redundancyModeName(RedundancyMode m);

struct ShapeOptions {
  bool redundant = false;                   ///< also compute redundant asserts
  RedundancyMode mode = RedundancyMode::kPrefix;
  int timeout_ms = 8000;                    ///< total Z3 budget for one program
  int query_timeout_ms = 250;               ///< per redundancy query
  bool use_hints = true;                    ///< try (set-info :example-X v) values as a candidate model
  bool use_reasoning = true;                ///< false: plain Z3 on the whole program (for comparison)
};

struct ModelValue {
  std::string name;
  std::string sort;   ///< "Int", "Real", "Bool"
  std::string value;  ///< "3", "-3", "1/2", "true"
};

struct RedundantAssert {
  size_t index = 0;      ///< 0-based position among the asserts
  int line = 0;          ///< 1-based source line of the (assert ...) command
  std::string text;      ///< the assert command as written
  std::string definition;  ///< body of the define-fun it names, when it names one
  std::string by;        ///< "reasoning" (no solver) or "z3"
};

struct ShapeReport {
  Verdict verdict = Verdict::kUnknown;
  std::string decided_by;  ///< "reasoning", "reasoning+hints", "z3-residual", "z3-full"
  std::string note;        ///< why unknown, when unknown
  std::vector<ModelValue> model;  ///< declared symbols, for sat
  bool model_checked = false;     ///< every assert evaluated to true under the model (exact arithmetic)

  size_t num_asserts = 0;
  size_t num_vars = 0;
  size_t substituted_vars = 0;
  size_t decided_without_solver = 0;  ///< asserts decided (true) by reasoning alone
  size_t residual_asserts = 0;        ///< asserts left for Z3 after reasoning

  bool redundancy_computed = false;
  RedundancyMode mode = RedundancyMode::kPrefix;
  std::vector<RedundantAssert> redundant;
  size_t redundancy_by_reasoning = 0;
  size_t redundancy_solver_queries = 0;
  size_t redundancy_unknown = 0;  ///< queries that timed out (kept: not reported redundant)

  double total_s = 0, parse_s = 0, reasoning_s = 0, solver_s = 0, redundancy_s = 0;
  int solver_calls = 0;
};

/// Analyzes one SMT-LIB shape program. Invalid input gives an InvalidArgument status naming the line
/// and column; no exception escapes.
StatusOr<ShapeReport> analyzeShapeProgram(std::string_view text, const ShapeOptions& options);

/// JSON object for \p report; \p file is echoed as "file" when non-empty.
std::string toJson(const ShapeReport& report, std::string_view file = "");

/// The Z3 version verifuse was built against.
std::string z3Version();

}  // namespace verifuse::shapes
