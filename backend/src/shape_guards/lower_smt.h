// One lowering of size expressions to SMT-LIB operations (internal to backend/src/shape_guards),
// shared by the text printer (toSmt) and the term builder (verifier/shapes' ShapeProblem), so
// the exported shape program and the questions the engine answers are the same formulas.
//
// Python semantics: `a // b` floors and `a % b` takes the divisor's sign, while SMT-LIB's div/mod
// are Euclidean; they agree for a positive constant divisor, otherwise
//   a // b = ite(b > 0, div(a, b), div(-a, -b))     a % b = a - b * (a // b).
#pragma once

#include <string>
#include <vector>

#include "verifuse/ir/sym_expr.h"

namespace verifuse::shape_guards {

/// B provides: using T; T integer(int64_t); T symbol(const std::string&); T boolean(bool);
/// T add(std::vector<T>); T mul(std::vector<T>); T neg(T); T sub(T, T); T div(T, T); T mod(T, T);
/// T ite(T, T, T); T eq(T, T); T le(T, T); T lt(T, T); T ge(T, T); T gt(T, T); T notOf(T);
/// T andOf(std::vector<T>); T orOf(std::vector<T>).
template <class B>
typename B::T lowerSmt(const ir::SymExpr& e, B& b) {
  using Kind = ir::SymExpr::Kind;
  using T = typename B::T;
  auto all = [&] {
    std::vector<T> out;
    for (const ir::SymExpr& a : e.args()) out.push_back(lowerSmt(a, b));
    return out;
  };
  auto floorDiv = [&](const ir::SymExpr& x, const ir::SymExpr& y) {
    T a = lowerSmt(x, b), d = lowerSmt(y, b);
    if (y.asInt() && *y.asInt() > 0) return b.div(a, d);
    return b.ite(b.gt(d, b.integer(0)), b.div(a, d), b.div(b.neg(a), b.neg(d)));
  };
  switch (e.kind()) {
    case Kind::kInt: return b.integer(e.intValue());
    case Kind::kBool: return b.boolean(e.boolValue());
    case Kind::kSym: return b.symbol(e.name());
    case Kind::kAdd: return b.add(all());
    case Kind::kMul: return b.mul(all());
    case Kind::kPow: {
      const int64_t k = e.args()[1].intValue();
      if (k == 0) return b.integer(1);
      T base = lowerSmt(e.args()[0], b);
      if (k == 1) return base;
      return b.mul(std::vector<T>(static_cast<size_t>(k), base));
    }
    case Kind::kFloorDiv: return floorDiv(e.args()[0], e.args()[1]);
    case Kind::kMod: {
      const ir::SymExpr& y = e.args()[1];
      if (y.asInt() && *y.asInt() > 0) return b.mod(lowerSmt(e.args()[0], b), lowerSmt(y, b));
      return b.sub(lowerSmt(e.args()[0], b), b.mul({lowerSmt(y, b), floorDiv(e.args()[0], y)}));
    }
    case Kind::kMax:
    case Kind::kMin: {
      std::vector<T> args = all();
      T acc = args[0];
      for (size_t k = 1; k < args.size(); ++k) {
        T keep = e.kind() == Kind::kMax ? b.ge(acc, args[k]) : b.le(acc, args[k]);
        acc = b.ite(keep, acc, args[k]);
      }
      return acc;
    }
    case Kind::kEq: return b.eq(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b));
    case Kind::kNe: return b.notOf(b.eq(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b)));
    case Kind::kLt: return b.lt(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b));
    case Kind::kLe: return b.le(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b));
    case Kind::kGt: return b.gt(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b));
    case Kind::kGe: return b.ge(lowerSmt(e.args()[0], b), lowerSmt(e.args()[1], b));
    case Kind::kAnd: return b.andOf(all());
    case Kind::kOr: return b.orOf(all());
    case Kind::kNot: return b.notOf(lowerSmt(e.args()[0], b));
  }
  return b.boolean(false);
}

/// SMT-LIB text, the way the corpus writes it: (- 3), (>= x 1), (not (= a b)).
struct SmtText {
  using T = std::string;
  static T list(const char* op, const std::vector<T>& args) {
    T s = std::string("(") + op;
    for (const T& a : args) s += " " + a;
    return s + ")";
  }
  T integer(int64_t v) {
    if (v >= 0) return std::to_string(v);
    return "(- " + std::to_string(static_cast<uint64_t>(0) - static_cast<uint64_t>(v)) + ")";
  }
  T symbol(const std::string& name) { return name; }
  T boolean(bool v) { return v ? "true" : "false"; }
  T add(std::vector<T> a) { return list("+", a); }
  T mul(std::vector<T> a) { return list("*", a); }
  T neg(T a) { return list("-", {a}); }
  T sub(T a, T c) { return list("-", {a, c}); }
  T div(T a, T c) { return list("div", {a, c}); }
  T mod(T a, T c) { return list("mod", {a, c}); }
  T ite(T c, T a, T d) { return list("ite", {c, a, d}); }
  T eq(T a, T c) { return list("=", {a, c}); }
  T le(T a, T c) { return list("<=", {a, c}); }
  T lt(T a, T c) { return list("<", {a, c}); }
  T ge(T a, T c) { return list(">=", {a, c}); }
  T gt(T a, T c) { return list(">", {a, c}); }
  T notOf(T a) { return list("not", {a}); }
  T andOf(std::vector<T> a) { return list("and", a); }
  T orOf(std::vector<T> a) { return list("or", a); }
};

}  // namespace verifuse::shape_guards
