// The obligation language: Z3-free expression trees and the proof obligations built from them.
//
// An Obligation says "for all values of the named variables that satisfy the assumptions (and the
// defining constraints of the fresh variables, and the axioms), every source expression equals its
// target expression". Rules in backend/ build obligations with ObligationBuilder; the prover
// (prover.h) is the only place that turns them into Z3 terms.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace verifuse::verify {

/// Sorts of the language. Real is the default for tensor elements and parameters; Int and Bool are
/// for structural facts (channel indices, flags); Tensor is an uninterpreted sort used only as the
/// argument of uninterpreted functions such as `dot(W, X)`.
enum class Sort { Real, Int, Bool, Tensor };

const char* sortName(Sort sort);

/// Node kinds. Sqrt and Pow exist so that rule authors can write them, but the encoder rejects
/// them (Unsupported): write `1/sqrt(v)` as a fresh variable `r > 0 ∧ r*r*v = 1` instead, which keeps
/// every query polynomial.
enum class ExprKind {
  Const,    // rational constant num/den (Real), integer (Int) or true/false (Bool)
  Var,      // named free variable; the name is the IR-style name shown in counterexamples
  Add, Sub, Mul, Div, Neg,
  Eq, Ne, Lt, Le, Gt, Ge,
  And, Or, Not, Implies,
  Ite, Min, Max,
  Apply,    // uninterpreted function by name (gelu_erf, sigmoid, dot, ...)
  ForAll,   // children: bound variables..., body (last)
  Sqrt, Pow,  // deliberately not encodable (see above)
};

const char* exprKindName(ExprKind kind);

struct ExprNode;

/// An immutable expression (shared tree). Arithmetic and comparison operators build new nodes, in
/// the style of z3++: `a == b` is an Expr of sort Bool, not a C++ bool (use structurallyEqual).
class Expr {
 public:
  /// Integer constant of sort Real (ints promote to Real: rule math is over the reals).
  Expr(int value);        // NOLINT(implicit)
  Expr(long long value);  // NOLINT(implicit)
  Expr() = default;

  /// Rational constant num/den of sort Real (den != 0; normalized, sign in the numerator).
  static Expr rational(long long num, long long den);
  /// Exact decimal constant, e.g. decimal("0.044715") == 44715/1000000 (Real).
  static Expr decimal(const std::string& text);
  static Expr integer(long long value);  ///< sort Int
  static Expr boolean(bool value);
  /// A named variable. Two variables with the same name and sort are the same variable.
  static Expr var(const std::string& name, Sort sort = Sort::Real);
  /// Uninterpreted function application; the result sort is part of the function's signature.
  static Expr apply(const std::string& function, std::vector<Expr> args, Sort result = Sort::Real);
  /// ∀ bound. body; \p bound must be Var expressions.
  static Expr forAll(std::vector<Expr> bound, Expr body);
  static Expr ite(Expr cond, Expr then, Expr otherwise);
  static Expr min(Expr a, Expr b);
  static Expr max(Expr a, Expr b);
  static Expr sqrt(Expr x);           ///< not encodable (Unsupported), see ExprKind
  static Expr pow(Expr base, Expr exponent);  ///< not encodable (Unsupported)

  bool valid() const { return node_ != nullptr; }
  ExprKind kind() const;
  Sort sort() const;
  /// Var name or Apply function name; empty otherwise.
  const std::string& name() const;
  const std::vector<Expr>& children() const;
  /// Const payload: numerator/denominator (Bool: 1/0 as num).
  long long num() const;
  long long den() const;

  /// The canonical printed form, an S-expression: `(+ |bn.var| 1/100000)`. Deterministic; used
  /// as the proof-cache key.
  std::string str() const;
  bool structurallyEqual(const Expr& other) const { return str() == other.str(); }

  const ExprNode* node() const { return node_.get(); }

 private:
  friend Expr makeNode(ExprKind, Sort, std::vector<Expr>, std::string, long long, long long);
  std::shared_ptr<const ExprNode> node_;
};

struct ExprNode {
  ExprKind kind;
  Sort sort;
  std::vector<Expr> children;
  std::string name;
  long long num = 0;
  long long den = 1;
};

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
/// Division. The prover records `b != 0` as a definedness condition: where the source divides, the
/// source is defined only if the denominator is nonzero; where the target divides, the target must be
/// defined wherever the source is ("Target is less defined than source" otherwise).
Expr operator/(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator==(Expr a, Expr b);
Expr operator!=(Expr a, Expr b);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr operator!(Expr a);
Expr implies(Expr a, Expr b);
/// Sum of \p terms (0 when empty).
Expr sum(const std::vector<Expr>& terms);

/// A variable introduced by the encoding (not by the rule), pinned down by constraints.
/// Example: `r = rsqrt(var+eps)` is fresh `r` with `r > 0 ∧ r*r*(var+eps) = 1`.
struct FreshVariable {
  Expr var;
  std::vector<Expr> constraints;
};

/// One equality that must hold: the rule's source semantics and its replacement's semantics.
struct Goal {
  std::string label;  ///< e.g. "out[o]"; shown in counterexamples
  Expr source;
  Expr target;
};

/// A proof obligation (pure data).
struct Obligation {
  std::string name;
  std::vector<Expr> assumptions;        ///< side conditions (guards of the rule)
  std::vector<FreshVariable> fresh;     ///< encoding variables with defining constraints
  std::vector<Expr> axioms;             ///< closed (quantified) facts about uninterpreted functions
  std::vector<Goal> goals;              ///< source == target, for all values satisfying the above

  /// Deterministic printed form of everything that affects the verdict (not the name).
  std::string canonical() const;
};

/// Builds obligations so that rule files read like the math:
///
///   ObligationBuilder ob("bn-to-scale-shift");
///   Expr x = ob.var("x"), eps = ob.var("bn.eps"), var = ob.var("bn.running_var[c]");
///   ob.assume(eps > 0).assume(var >= 0);
///   Expr r = ob.fresh("rsqrt(bn.running_var[c]+bn.eps)", [&](Expr r) {
///     return std::vector<Expr>{r > 0, r * r * (var + eps) == 1}; });
///   ob.prove("out", src, tgt);
///   Obligation o = ob.build();
class ObligationBuilder {
 public:
  explicit ObligationBuilder(std::string name);

  /// A named variable (a rule parameter or an input element).
  Expr var(const std::string& name, Sort sort = Sort::Real) const { return Expr::var(name, sort); }
  /// A fresh variable whose constraints are produced by \p define(var).
  template <typename F>
  Expr fresh(const std::string& name, F define, Sort sort = Sort::Real) {
    Expr v = Expr::var(name, sort);
    addFresh(v, define(v));
    return v;
  }
  /// Adds a fresh variable with given constraints. Re-adding the same variable is a no-op.
  void addFresh(Expr var, std::vector<Expr> constraints);
  ObligationBuilder& assume(Expr condition);
  ObligationBuilder& axiom(Expr statement);
  ObligationBuilder& axioms(const std::vector<Expr>& statements);
  /// Requires source == target.
  ObligationBuilder& prove(const std::string& label, Expr source, Expr target);

  const std::string& name() const { return ob_.name; }
  Obligation build() const { return ob_; }

 private:
  Obligation ob_;
};

}  // namespace verifuse::verify
