// Shape programs built in C++ (no SMT-LIB text): the same engine as analyzeShapeProgram (own
// reasoning, then Z3 with a budget) on terms made through a builder. The backend states Dynamo's
// guards and its plan's shape assumptions this way (backend/src/shape_guards). No Z3 types here.
//
//   ShapeProblem p;
//   auto x = p.declareInt("x_size0", /*example=*/8);
//   auto guard = p.ge(x, p.integer(0));
//   auto assumption = p.ge(x, p.integer(1));
//   // Entailed iff guard AND NOT assumption is unsat:
//   auto report = analyzeShapeProblem(p, {guard, p.notOf(assumption)}, ShapeOptions{});
//
// The builder desugars like the SMT-LIB reader (`>=` is `<=` swapped, `-` a product with -1), so a
// problem and its text (toSmt) are analyzed alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "verifuse/shapes/shape_analysis.h"
#include "verifuse/support/status.h"

namespace verifuse::shapes {

class ShapeProblem {
 public:
  using Term = uint32_t;

  ShapeProblem();
  ~ShapeProblem();
  ShapeProblem(const ShapeProblem& other);
  ShapeProblem& operator=(const ShapeProblem& other);
  ShapeProblem(ShapeProblem&&) noexcept;
  ShapeProblem& operator=(ShapeProblem&&) noexcept;

  /// An Int constant (declared once per name; a second call returns the same term). \p example is
  /// a value the engine tries first for a model, like `(set-info :example-NAME v)`.
  Term declareInt(const std::string& name, std::optional<int64_t> example = std::nullopt);
  Term integer(int64_t v);
  Term boolean(bool v);
  Term add(std::vector<Term> args);   ///< (+ a b ...)
  Term mul(std::vector<Term> args);   ///< (* a b ...)
  Term neg(Term a);                   ///< (- a)
  Term sub(Term a, Term b);           ///< (- a b)
  Term div(Term a, Term b);           ///< (div a b): SMT-LIB's Euclidean division
  Term mod(Term a, Term b);           ///< (mod a b)
  Term ite(Term c, Term a, Term b);
  Term eq(Term a, Term b);
  Term le(Term a, Term b);
  Term lt(Term a, Term b);
  Term ge(Term a, Term b);
  Term gt(Term a, Term b);
  Term notOf(Term a);
  Term andOf(std::vector<Term> args);
  Term orOf(std::vector<Term> args);

  /// The first sort error made while building ("" when none); analyzeShapeProblem refuses a
  /// problem with one.
  const std::string& error() const;
  /// SMT-LIB text of \p t in the engine's form (cut off after about \p maxChars characters).
  std::string toSmt(Term t, size_t maxChars = 400) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Analyzes the conjunction of \p asserts (Bool terms of \p problem) like analyzeShapeProgram:
/// verdict, model of the declared constants, and with options.redundant the redundant asserts
/// (RedundantAssert::text is the assert's toSmt text).
StatusOr<ShapeReport> analyzeShapeProblem(const ShapeProblem& problem, const std::vector<ShapeProblem::Term>& asserts,
                                          const ShapeOptions& options);

}  // namespace verifuse::shapes
