// Symbolic sizes: the IR's expression language for dynamic shapes (torch-free, Z3-free).
//
// A SymExpr is an immutable expression tree over named size symbols ("x_size0", the corpus's
// naming): integer constants and symbols combined by + * ** // % max min (Python semantics: //
// floors, % takes the divisor's sign), and boolean conditions over them (== != < <= > >=, and,
// or, not). A tensor value's sizes and strides, an Int value, one of Dynamo's shape guards and
// one of the plan's shape assumptions are all SymExprs.
//
// Arithmetic is kept in a canonical form, so equal sizes print equally: sums and products are
// flattened, their integer constants folded and put first, equal terms collected (x + x = 2*x,
// x*x = x**2), the other operands ordered (symbols by name, then powers, products, sums and the
// functions, each group by text), and a constant times a sum is distributed (sympy's form).
// Conditions are kept exactly as built (no folding), so an assumption such as `x == x` stays
// visible as such.
//
// Text (toString) is Python syntax, fully parenthesized: `(1 + ((-7 + x_size2) // 2)) >= 5`
// prints as `((1 + ((-7 + x_size2) // 2)) >= 5)`; parse() reads it back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::ir {

class SymExpr {
 public:
  enum class Kind : uint8_t {
    kInt, kBool, kSym,                                    // leaves
    kAdd, kMul, kPow, kFloorDiv, kMod, kMax, kMin,        // integer-valued
    kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr, kNot,        // boolean
  };

  /// The invalid expression: an unknown size.
  SymExpr() = default;
  static SymExpr integer(int64_t v);
  static SymExpr boolean(bool v);
  static SymExpr symbol(std::string name);
  /// kind(args) in canonical form. Invalid (unknown) when an argument is invalid, the sorts do
  /// not fit (arithmetic on a condition, `and` of integers), a power's exponent is not a constant
  /// in [0, 64], or folding a constant overflows int64.
  static SymExpr make(Kind kind, std::vector<SymExpr> args);

  bool valid() const { return node_ != nullptr; }
  Kind kind() const;
  /// A condition (kBool, a comparison or a connective).
  bool isCondition() const;
  std::optional<int64_t> asInt() const;
  int64_t intValue() const;                  ///< kInt (0 otherwise)
  bool boolValue() const;                    ///< kBool (false otherwise)
  const std::string& name() const;           ///< kSym ("" otherwise)
  const std::vector<SymExpr>& args() const;  ///< operands (empty for leaves)

  /// Python syntax, fully parenthesized; "?" for the invalid expression.
  std::string toString() const;
  /// Symbols in first-occurrence order (each once).
  std::vector<std::string> symbols() const;
  bool hasSymbols() const;
  /// Value under \p lookup (conditions give 1 or 0), with Python's // and %. nullopt when a symbol
  /// has no value, a division by zero happens, or a value leaves int64.
  std::optional<int64_t> evaluate(const std::function<std::optional<int64_t>(const std::string&)>& lookup) const;
  /// Same tree (structurally equal).
  bool operator==(const SymExpr& other) const;
  bool operator!=(const SymExpr& other) const { return !(*this == other); }
  /// a - b expands to the zero polynomial (atoms: symbols and the //, %, max, min subterms).
  static bool samePolynomial(const SymExpr& a, const SymExpr& b);

  /// Reads toString()'s syntax (also `-` and unary minus). Errors name the column.
  static StatusOr<SymExpr> parse(std::string_view text);
  /// Reads one expression from the start of \p text and stops before the first character that
  /// cannot continue it (',' ']' '}' ...); *consumed is the length read (spaces included).
  static StatusOr<SymExpr> parsePrefix(std::string_view text, size_t* consumed);

  struct Node;

 private:
  friend struct SymExprBuilder;  // sym_expr.cpp: canonical construction
  explicit SymExpr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
};

SymExpr operator+(const SymExpr& a, const SymExpr& b);
SymExpr operator*(const SymExpr& a, const SymExpr& b);
SymExpr operator+(const SymExpr& a, int64_t b);
SymExpr operator*(int64_t a, const SymExpr& b);
SymExpr operator*(const SymExpr& a, int64_t b);

/// The product of \p factors (1 for none).
SymExpr product(const std::vector<SymExpr>& factors);

}  // namespace verifuse::ir
