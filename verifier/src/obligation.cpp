// The obligation language: node construction, normalization of constants, canonical printing.
#include "verifuse/verify/obligation.h"

#include <cstdlib>
#include <numeric>
#include <sstream>

namespace verifuse::verify {

const char* sortName(Sort sort) {
  switch (sort) {
    case Sort::Real: return "Real";
    case Sort::Int: return "Int";
    case Sort::Bool: return "Bool";
    case Sort::Tensor: return "Tensor";
  }
  return "?";
}

const char* exprKindName(ExprKind kind) {
  switch (kind) {
    case ExprKind::Const: return "const";
    case ExprKind::Var: return "var";
    case ExprKind::Add: return "+";
    case ExprKind::Sub: return "-";
    case ExprKind::Mul: return "*";
    case ExprKind::Div: return "/";
    case ExprKind::Neg: return "neg";
    case ExprKind::Eq: return "=";
    case ExprKind::Ne: return "distinct";
    case ExprKind::Lt: return "<";
    case ExprKind::Le: return "<=";
    case ExprKind::Gt: return ">";
    case ExprKind::Ge: return ">=";
    case ExprKind::And: return "and";
    case ExprKind::Or: return "or";
    case ExprKind::Not: return "not";
    case ExprKind::Implies: return "=>";
    case ExprKind::Ite: return "ite";
    case ExprKind::Min: return "min";
    case ExprKind::Max: return "max";
    case ExprKind::Apply: return "apply";
    case ExprKind::ForAll: return "forall";
    case ExprKind::Sqrt: return "sqrt";
    case ExprKind::Pow: return "pow";
  }
  return "?";
}

Expr makeNode(ExprKind kind, Sort sort, std::vector<Expr> children, std::string name, long long num,
              long long den) {
  auto node = std::make_shared<ExprNode>();
  node->kind = kind;
  node->sort = sort;
  node->children = std::move(children);
  node->name = std::move(name);
  node->num = num;
  node->den = den;
  Expr e;
  e.node_ = std::move(node);
  return e;
}

namespace {

const std::string kEmpty;
const std::vector<Expr> kNoChildren;

// Arithmetic result sort: Int only if both operands are Int; otherwise Real (ints promote).
Sort arithSort(const Expr& a, const Expr& b) {
  return (a.sort() == Sort::Int && b.sort() == Sort::Int) ? Sort::Int : Sort::Real;
}

Expr binary(ExprKind kind, Sort sort, Expr a, Expr b) {
  return makeNode(kind, sort, {std::move(a), std::move(b)}, "", 0, 1);
}

void printExpr(const Expr& e, std::ostream& os) {
  if (!e.valid()) {
    os << "<null>";
    return;
  }
  switch (e.kind()) {
    case ExprKind::Const:
      if (e.sort() == Sort::Bool) {
        os << (e.num() ? "true" : "false");
      } else if (e.sort() == Sort::Int) {
        os << e.num() << "i";
      } else if (e.den() == 1) {
        os << e.num();
      } else {
        os << e.num() << "/" << e.den();
      }
      return;
    case ExprKind::Var:
      os << "|" << e.name() << "|";
      if (e.sort() != Sort::Real) os << ":" << sortName(e.sort());
      return;
    case ExprKind::Apply:
      os << "(" << e.name();
      if (e.sort() != Sort::Real) os << ":" << sortName(e.sort());
      for (const Expr& c : e.children()) {
        os << " ";
        printExpr(c, os);
      }
      os << ")";
      return;
    default:
      os << "(" << exprKindName(e.kind());
      for (const Expr& c : e.children()) {
        os << " ";
        printExpr(c, os);
      }
      os << ")";
      return;
  }
}

}  // namespace

Expr::Expr(int value) : Expr(rational(value, 1)) {}
Expr::Expr(long long value) : Expr(rational(value, 1)) {}

Expr Expr::rational(long long num, long long den) {
  if (den == 0) den = 1;  // NOTE: a zero denominator is a programming error; keep the tree valid.
  if (den < 0) {
    num = -num;
    den = -den;
  }
  long long g = std::gcd(num < 0 ? -num : num, den);
  if (g > 1) {
    num /= g;
    den /= g;
  }
  return makeNode(ExprKind::Const, Sort::Real, {}, "", num, den);
}

Expr Expr::decimal(const std::string& text) {
  long long num = 0, den = 1;
  bool neg = false, frac = false;
  for (char ch : text) {
    if (ch == '-') {
      neg = true;
    } else if (ch == '.') {
      frac = true;
    } else if (ch >= '0' && ch <= '9') {
      num = num * 10 + (ch - '0');
      if (frac) den *= 10;
    }
  }
  return rational(neg ? -num : num, den);
}

Expr Expr::integer(long long value) { return makeNode(ExprKind::Const, Sort::Int, {}, "", value, 1); }
Expr Expr::boolean(bool value) { return makeNode(ExprKind::Const, Sort::Bool, {}, "", value ? 1 : 0, 1); }
Expr Expr::var(const std::string& name, Sort sort) { return makeNode(ExprKind::Var, sort, {}, name, 0, 1); }
Expr Expr::apply(const std::string& function, std::vector<Expr> args, Sort result) {
  return makeNode(ExprKind::Apply, result, std::move(args), function, 0, 1);
}
Expr Expr::forAll(std::vector<Expr> bound, Expr body) {
  bound.push_back(std::move(body));
  return makeNode(ExprKind::ForAll, Sort::Bool, std::move(bound), "", 0, 1);
}
Expr Expr::ite(Expr cond, Expr then, Expr otherwise) {
  Sort s = then.sort() == otherwise.sort() ? then.sort() : arithSort(then, otherwise);
  return makeNode(ExprKind::Ite, s, {std::move(cond), std::move(then), std::move(otherwise)}, "", 0, 1);
}
Expr Expr::min(Expr a, Expr b) {
  Sort s = arithSort(a, b);
  return binary(ExprKind::Min, s, std::move(a), std::move(b));
}
Expr Expr::max(Expr a, Expr b) {
  Sort s = arithSort(a, b);
  return binary(ExprKind::Max, s, std::move(a), std::move(b));
}
Expr Expr::sqrt(Expr x) { return makeNode(ExprKind::Sqrt, Sort::Real, {std::move(x)}, "", 0, 1); }
Expr Expr::pow(Expr base, Expr exponent) {
  return binary(ExprKind::Pow, Sort::Real, std::move(base), std::move(exponent));
}

ExprKind Expr::kind() const { return node_->kind; }
Sort Expr::sort() const { return node_->sort; }
const std::string& Expr::name() const { return node_ ? node_->name : kEmpty; }
const std::vector<Expr>& Expr::children() const { return node_ ? node_->children : kNoChildren; }
long long Expr::num() const { return node_->num; }
long long Expr::den() const { return node_->den; }

std::string Expr::str() const {
  std::ostringstream os;
  printExpr(*this, os);
  return os.str();
}

Expr operator+(Expr a, Expr b) {
  Sort s = arithSort(a, b);
  return binary(ExprKind::Add, s, std::move(a), std::move(b));
}
Expr operator-(Expr a, Expr b) {
  Sort s = arithSort(a, b);
  return binary(ExprKind::Sub, s, std::move(a), std::move(b));
}
Expr operator*(Expr a, Expr b) {
  Sort s = arithSort(a, b);
  return binary(ExprKind::Mul, s, std::move(a), std::move(b));
}
Expr operator/(Expr a, Expr b) { return binary(ExprKind::Div, Sort::Real, std::move(a), std::move(b)); }
Expr operator-(Expr a) {
  Sort s = a.sort();
  return makeNode(ExprKind::Neg, s, {std::move(a)}, "", 0, 1);
}
Expr operator==(Expr a, Expr b) { return binary(ExprKind::Eq, Sort::Bool, std::move(a), std::move(b)); }
Expr operator!=(Expr a, Expr b) { return binary(ExprKind::Ne, Sort::Bool, std::move(a), std::move(b)); }
Expr operator<(Expr a, Expr b) { return binary(ExprKind::Lt, Sort::Bool, std::move(a), std::move(b)); }
Expr operator<=(Expr a, Expr b) { return binary(ExprKind::Le, Sort::Bool, std::move(a), std::move(b)); }
Expr operator>(Expr a, Expr b) { return binary(ExprKind::Gt, Sort::Bool, std::move(a), std::move(b)); }
Expr operator>=(Expr a, Expr b) { return binary(ExprKind::Ge, Sort::Bool, std::move(a), std::move(b)); }
Expr operator&&(Expr a, Expr b) { return binary(ExprKind::And, Sort::Bool, std::move(a), std::move(b)); }
Expr operator||(Expr a, Expr b) { return binary(ExprKind::Or, Sort::Bool, std::move(a), std::move(b)); }
Expr operator!(Expr a) { return makeNode(ExprKind::Not, Sort::Bool, {std::move(a)}, "", 0, 1); }
Expr implies(Expr a, Expr b) { return binary(ExprKind::Implies, Sort::Bool, std::move(a), std::move(b)); }

Expr sum(const std::vector<Expr>& terms) {
  if (terms.empty()) return Expr(0);
  Expr acc = terms.front();
  for (size_t i = 1; i < terms.size(); ++i) acc = acc + terms[i];
  return acc;
}

std::string Obligation::canonical() const {
  std::ostringstream os;
  os << "(obligation\n";
  for (const Expr& a : assumptions) os << " (assume " << a.str() << ")\n";
  for (const FreshVariable& f : fresh) {
    os << " (fresh " << f.var.str();
    for (const Expr& c : f.constraints) os << " " << c.str();
    os << ")\n";
  }
  for (const Expr& a : axioms) os << " (axiom " << a.str() << ")\n";
  for (const Goal& g : goals) os << " (goal \"" << g.label << "\" " << g.source.str() << " " << g.target.str() << ")\n";
  os << ")";
  return os.str();
}

ObligationBuilder::ObligationBuilder(std::string name) { ob_.name = std::move(name); }

void ObligationBuilder::addFresh(Expr var, std::vector<Expr> constraints) {
  for (const FreshVariable& f : ob_.fresh) {
    if (f.var.structurallyEqual(var)) return;
  }
  ob_.fresh.push_back({std::move(var), std::move(constraints)});
}

ObligationBuilder& ObligationBuilder::assume(Expr condition) {
  ob_.assumptions.push_back(std::move(condition));
  return *this;
}

ObligationBuilder& ObligationBuilder::axiom(Expr statement) {
  for (const Expr& a : ob_.axioms) {
    if (a.structurallyEqual(statement)) return *this;
  }
  ob_.axioms.push_back(std::move(statement));
  return *this;
}

ObligationBuilder& ObligationBuilder::axioms(const std::vector<Expr>& statements) {
  for (const Expr& s : statements) axiom(s);
  return *this;
}

ObligationBuilder& ObligationBuilder::prove(const std::string& label, Expr source, Expr target) {
  ob_.goals.push_back({label, std::move(source), std::move(target)});
  return *this;
}

}  // namespace verifuse::verify
