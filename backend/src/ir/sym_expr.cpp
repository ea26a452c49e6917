// Symbolic sizes (see sym_expr.h): canonical construction, text, evaluation, parsing.
#include "verifuse/ir/sym_expr.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

namespace verifuse::ir {

struct SymExpr::Node {
  Kind kind = Kind::kInt;
  int64_t value = 0;  // kInt, kBool
  std::string name;   // kSym
  std::vector<SymExpr> args;
  std::string text;   // toString(), computed once
};

namespace {

using Kind = SymExpr::Kind;

bool isArith(Kind k) { return k == Kind::kInt || k == Kind::kSym || (k >= Kind::kAdd && k <= Kind::kMin); }
bool isCond(Kind k) { return k == Kind::kBool || k >= Kind::kEq; }

const char* relationText(Kind k) {
  switch (k) {
    case Kind::kEq: return "==";
    case Kind::kNe: return "!=";
    case Kind::kLt: return "<";
    case Kind::kLe: return "<=";
    case Kind::kGt: return ">";
    case Kind::kGe: return ">=";
    default: return "?";
  }
}

/// Where a term sorts among the operands of a sum, product, max or min: constants, symbols,
/// powers, products, sums, then the function-like terms; ties by text.
int rank(Kind k) {
  switch (k) {
    case Kind::kInt: return 0;
    case Kind::kSym: return 1;
    case Kind::kPow: return 2;
    case Kind::kMul: return 3;
    case Kind::kAdd: return 4;
    default: return 5;
  }
}

bool before(const SymExpr& a, const SymExpr& b) {
  const int ra = rank(a.kind()), rb = rank(b.kind());
  if (ra != rb) return ra < rb;
  return a.toString() < b.toString();
}

std::string join(const std::vector<SymExpr>& args, const char* sep) {
  std::string s;
  for (size_t k = 0; k < args.size(); ++k) {
    if (k) s += sep;
    s += args[k].toString();
  }
  return s;
}

bool checkedAdd(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool checkedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

int64_t floorDiv(int64_t a, int64_t b) {  // b != 0; a / b overflows only for INT64_MIN / -1
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

struct SymExprBuilder {
  static SymExpr raw(Kind kind, std::vector<SymExpr> args, int64_t value = 0, std::string name = {}) {
    auto n = std::make_shared<SymExpr::Node>();
    n->kind = kind;
    n->value = value;
    n->name = std::move(name);
    n->args = std::move(args);
    n->text = render(*n);
    return SymExpr(std::move(n));
  }

  static std::string render(const SymExpr::Node& n) {
    switch (n.kind) {
      case Kind::kInt: return std::to_string(n.value);
      case Kind::kBool: return n.value ? "True" : "False";
      case Kind::kSym: return n.name;
      case Kind::kAdd: return "(" + join(n.args, " + ") + ")";
      case Kind::kMul: return "(" + join(n.args, " * ") + ")";
      case Kind::kPow: return "(" + n.args[0].toString() + " ** " + n.args[1].toString() + ")";
      case Kind::kFloorDiv: return "(" + n.args[0].toString() + " // " + n.args[1].toString() + ")";
      case Kind::kMod: return "(" + n.args[0].toString() + " % " + n.args[1].toString() + ")";
      case Kind::kMax: return "max(" + join(n.args, ", ") + ")";
      case Kind::kMin: return "min(" + join(n.args, ", ") + ")";
      case Kind::kAnd: return "(" + join(n.args, " and ") + ")";
      case Kind::kOr: return "(" + join(n.args, " or ") + ")";
      case Kind::kNot: return "(not " + n.args[0].toString() + ")";
      default:
        return "(" + n.args[0].toString() + " " + relationText(n.kind) + " " + n.args[1].toString() + ")";
    }
  }

  /// coefficient * monomial (the monomial is invalid for a constant term).
  static std::pair<int64_t, SymExpr> splitCoefficient(const SymExpr& t) {
    if (t.kind() == Kind::kInt) return {t.intValue(), SymExpr()};
    if (t.kind() == Kind::kMul && t.args()[0].kind() == Kind::kInt) {
      std::vector<SymExpr> rest(t.args().begin() + 1, t.args().end());
      return {t.args()[0].intValue(), rest.size() == 1 ? rest[0] : raw(Kind::kMul, std::move(rest))};
    }
    return {1, t};
  }

  static SymExpr scaled(int64_t c, const SymExpr& monomial) {
    if (c == 1) return monomial;
    std::vector<SymExpr> f{SymExpr::integer(c)};
    if (monomial.kind() == Kind::kMul) {
      f.insert(f.end(), monomial.args().begin(), monomial.args().end());
    } else {
      f.push_back(monomial);
    }
    return raw(Kind::kMul, std::move(f));
  }

  static SymExpr add(const std::vector<SymExpr>& in) {
    std::vector<SymExpr> flat;
    for (const SymExpr& a : in) {
      if (a.kind() == Kind::kAdd) flat.insert(flat.end(), a.args().begin(), a.args().end());
      else flat.push_back(a);
    }
    int64_t constant = 0;
    std::vector<std::pair<SymExpr, int64_t>> terms;  // monomial, coefficient (first-seen order)
    std::map<std::string, size_t> index;
    for (const SymExpr& t : flat) {
      auto [c, m] = splitCoefficient(t);
      if (!m.valid()) {
        if (!checkedAdd(constant, c, &constant)) return SymExpr();
        continue;
      }
      auto [it, fresh] = index.emplace(m.toString(), terms.size());
      if (fresh) {
        terms.emplace_back(m, c);
      } else if (!checkedAdd(terms[it->second].second, c, &terms[it->second].second)) {
        return SymExpr();
      }
    }
    std::vector<SymExpr> out;
    for (auto& [m, c] : terms) {
      if (c != 0) out.push_back(scaled(c, m));
    }
    std::stable_sort(out.begin(), out.end(), [](const SymExpr& a, const SymExpr& b) {
      return before(splitCoefficient(a).second, splitCoefficient(b).second);
    });
    if (constant != 0 || out.empty()) out.insert(out.begin(), SymExpr::integer(constant));
    return out.size() == 1 ? out[0] : raw(Kind::kAdd, std::move(out));
  }

  static SymExpr mul(const std::vector<SymExpr>& in) {
    std::vector<SymExpr> flat;
    for (const SymExpr& a : in) {
      if (a.kind() == Kind::kMul) flat.insert(flat.end(), a.args().begin(), a.args().end());
      else flat.push_back(a);
    }
    int64_t constant = 1;
    std::vector<std::pair<SymExpr, int64_t>> bases;  // base, exponent (first-seen order)
    std::map<std::string, size_t> index;
    for (const SymExpr& f : flat) {
      if (f.kind() == Kind::kInt) {
        if (!checkedMul(constant, f.intValue(), &constant)) return SymExpr();
        continue;
      }
      SymExpr base = f;
      int64_t e = 1;
      if (f.kind() == Kind::kPow) {
        base = f.args()[0];
        e = f.args()[1].intValue();
      }
      auto [it, fresh] = index.emplace(base.toString(), bases.size());
      if (fresh) bases.emplace_back(base, e);
      else bases[it->second].second += e;
    }
    if (constant == 0) return SymExpr::integer(0);
    std::vector<SymExpr> factors;
    for (auto& [b, e] : bases) {
      if (e > 64) return SymExpr();
      factors.push_back(e == 1 ? b : raw(Kind::kPow, {b, SymExpr::integer(e)}));
    }
    std::stable_sort(factors.begin(), factors.end(), before);
    if (factors.empty()) return SymExpr::integer(constant);
    // A constant times one sum distributes, as sympy does: 2*(x + 1) = 2 + 2*x.
    if (constant != 1 && factors.size() == 1 && factors[0].kind() == Kind::kAdd) {
      std::vector<SymExpr> terms;
      for (const SymExpr& t : factors[0].args()) terms.push_back(mul({SymExpr::integer(constant), t}));
      return add(terms);
    }
    if (constant == 1 && factors.size() == 1) return factors[0];
    if (constant != 1) factors.insert(factors.begin(), SymExpr::integer(constant));
    return raw(Kind::kMul, std::move(factors));
  }

  static SymExpr pow(const SymExpr& base, const SymExpr& exponent) {
    auto k = exponent.asInt();
    if (!k || *k < 0 || *k > 64) return SymExpr();
    if (*k == 0) return SymExpr::integer(1);
    std::vector<SymExpr> factors(static_cast<size_t>(*k), base);
    return mul(factors);
  }

  static SymExpr floorDivOrMod(Kind kind, const SymExpr& a, const SymExpr& b) {
    auto x = a.asInt(), y = b.asInt();
    if (x && y && *y != 0 && !(*x == INT64_MIN && *y == -1)) {
      return SymExpr::integer(kind == Kind::kFloorDiv ? floorDiv(*x, *y) : pyMod(*x, *y));
    }
    if (y && *y == 1) return kind == Kind::kFloorDiv ? a : SymExpr::integer(0);
    if (x && *x == 0 && y && *y != 0) return SymExpr::integer(0);
    return raw(kind, {a, b});
  }

  static SymExpr maxMin(Kind kind, const std::vector<SymExpr>& in) {
    std::vector<SymExpr> flat;
    for (const SymExpr& a : in) {
      if (a.kind() == kind) flat.insert(flat.end(), a.args().begin(), a.args().end());
      else flat.push_back(a);
    }
    std::optional<int64_t> constant;
    std::vector<SymExpr> out;
    std::map<std::string, bool> seen;
    for (const SymExpr& a : flat) {
      if (auto v = a.asInt()) {
        constant = !constant ? *v : (kind == Kind::kMax ? std::max(*constant, *v) : std::min(*constant, *v));
      } else if (seen.emplace(a.toString(), true).second) {
        out.push_back(a);
      }
    }
    std::stable_sort(out.begin(), out.end(), before);
    if (constant) out.insert(out.begin(), SymExpr::integer(*constant));
    return out.size() == 1 ? out[0] : raw(kind, std::move(out));
  }
};

SymExpr SymExpr::integer(int64_t v) { return SymExprBuilder::raw(Kind::kInt, {}, v); }
SymExpr SymExpr::boolean(bool v) { return SymExprBuilder::raw(Kind::kBool, {}, v ? 1 : 0); }
SymExpr SymExpr::symbol(std::string name) { return SymExprBuilder::raw(Kind::kSym, {}, 0, std::move(name)); }

SymExpr SymExpr::make(Kind kind, std::vector<SymExpr> args) {
  for (const SymExpr& a : args) {
    if (!a.valid()) return SymExpr();
  }
  auto allArith = [&] {
    return std::all_of(args.begin(), args.end(), [](const SymExpr& a) { return isArith(a.kind()); });
  };
  auto allCond = [&] {
    return std::all_of(args.begin(), args.end(), [](const SymExpr& a) { return isCond(a.kind()); });
  };
  switch (kind) {
    case Kind::kInt:
    case Kind::kBool:
    case Kind::kSym:
      return SymExpr();  // leaves have their own constructors
    case Kind::kAdd:
    case Kind::kMul:
      if (args.empty() || !allArith()) return SymExpr();
      return kind == Kind::kAdd ? SymExprBuilder::add(args) : SymExprBuilder::mul(args);
    case Kind::kPow:
      if (args.size() != 2 || !allArith()) return SymExpr();
      return SymExprBuilder::pow(args[0], args[1]);
    case Kind::kFloorDiv:
    case Kind::kMod:
      if (args.size() != 2 || !allArith()) return SymExpr();
      return SymExprBuilder::floorDivOrMod(kind, args[0], args[1]);
    case Kind::kMax:
    case Kind::kMin:
      if (args.empty() || !allArith()) return SymExpr();
      return SymExprBuilder::maxMin(kind, args);
    case Kind::kEq:
    case Kind::kNe:
    case Kind::kLt:
    case Kind::kLe:
    case Kind::kGt:
    case Kind::kGe:
      if (args.size() != 2 || !allArith()) return SymExpr();
      return SymExprBuilder::raw(kind, std::move(args));
    case Kind::kAnd:
    case Kind::kOr:
      if (args.empty() || !allCond()) return SymExpr();
      if (args.size() == 1) return args[0];
      return SymExprBuilder::raw(kind, std::move(args));
    case Kind::kNot:
      if (args.size() != 1 || !allCond()) return SymExpr();
      return SymExprBuilder::raw(kind, std::move(args));
  }
  return SymExpr();
}

Kind SymExpr::kind() const { return node_ ? node_->kind : Kind::kInt; }
bool SymExpr::isCondition() const { return node_ && isCond(node_->kind); }
std::optional<int64_t> SymExpr::asInt() const {
  if (node_ && node_->kind == Kind::kInt) return node_->value;
  return std::nullopt;
}
int64_t SymExpr::intValue() const { return node_ && node_->kind == Kind::kInt ? node_->value : 0; }
bool SymExpr::boolValue() const { return node_ && node_->kind == Kind::kBool && node_->value != 0; }
const std::string& SymExpr::name() const {
  static const std::string empty;
  return node_ && node_->kind == Kind::kSym ? node_->name : empty;
}
const std::vector<SymExpr>& SymExpr::args() const {
  static const std::vector<SymExpr> none;
  return node_ ? node_->args : none;
}
std::string SymExpr::toString() const { return node_ ? node_->text : "?"; }

bool SymExpr::operator==(const SymExpr& other) const {
  if (node_ == other.node_) return true;
  if (!node_ || !other.node_) return false;
  return node_->kind == other.node_->kind && node_->text == other.node_->text;
}

std::vector<std::string> SymExpr::symbols() const {
  std::vector<std::string> out;
  std::vector<const SymExpr*> stack{this};
  while (!stack.empty()) {
    const SymExpr* e = stack.back();
    stack.pop_back();
    if (!e->valid()) continue;
    if (e->kind() == Kind::kSym) {
      if (std::find(out.begin(), out.end(), e->name()) == out.end()) out.push_back(e->name());
      continue;
    }
    for (size_t k = e->args().size(); k-- > 0;) stack.push_back(&e->args()[k]);
  }
  return out;
}

bool SymExpr::hasSymbols() const {
  if (!node_) return false;
  if (node_->kind == Kind::kSym) return true;
  return std::any_of(node_->args.begin(), node_->args.end(), [](const SymExpr& a) { return a.hasSymbols(); });
}

std::optional<int64_t> SymExpr::evaluate(
    const std::function<std::optional<int64_t>(const std::string&)>& lookup) const {
  if (!node_) return std::nullopt;
  const Node& n = *node_;
  switch (n.kind) {
    case Kind::kInt:
    case Kind::kBool:
      return n.value;
    case Kind::kSym:
      return lookup(n.name);
    default:
      break;
  }
  std::vector<int64_t> v;
  v.reserve(n.args.size());
  for (const SymExpr& a : n.args) {
    auto x = a.evaluate(lookup);
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  int64_t acc = 0;
  switch (n.kind) {
    case Kind::kAdd:
      for (int64_t x : v) {
        if (!checkedAdd(acc, x, &acc)) return std::nullopt;
      }
      return acc;
    case Kind::kMul:
      acc = 1;
      for (int64_t x : v) {
        if (!checkedMul(acc, x, &acc)) return std::nullopt;
      }
      return acc;
    case Kind::kPow:
      acc = 1;
      for (int64_t k = 0; k < v[1]; ++k) {
        if (!checkedMul(acc, v[0], &acc)) return std::nullopt;
      }
      return acc;
    case Kind::kFloorDiv:
    case Kind::kMod:
      if (v[1] == 0 || (v[0] == INT64_MIN && v[1] == -1)) return std::nullopt;
      return n.kind == Kind::kFloorDiv ? floorDiv(v[0], v[1]) : pyMod(v[0], v[1]);
    case Kind::kMax: return *std::max_element(v.begin(), v.end());
    case Kind::kMin: return *std::min_element(v.begin(), v.end());
    case Kind::kEq: return v[0] == v[1];
    case Kind::kNe: return v[0] != v[1];
    case Kind::kLt: return v[0] < v[1];
    case Kind::kLe: return v[0] <= v[1];
    case Kind::kGt: return v[0] > v[1];
    case Kind::kGe: return v[0] >= v[1];
    case Kind::kAnd: return std::all_of(v.begin(), v.end(), [](int64_t x) { return x != 0; });
    case Kind::kOr: return std::any_of(v.begin(), v.end(), [](int64_t x) { return x != 0; });
    case Kind::kNot: return v[0] == 0;
    default: return std::nullopt;
  }
}

// ---- polynomial comparison --------------------------------------------------------------------

namespace {

using Monomial = std::vector<std::pair<std::string, int>>;  // sorted atoms with exponents
using Poly = std::map<Monomial, __int128>;
constexpr size_t kMaxTerms = 4096;
constexpr __int128 kMaxCoefficient = static_cast<__int128>(1) << 100;

bool polyMul(const Poly& a, const Poly& b, Poly* out) {
  Poly r;
  for (const auto& [ma, ca] : a) {
    for (const auto& [mb, cb] : b) {
      std::map<std::string, int> atoms(ma.begin(), ma.end());
      for (const auto& [atom, e] : mb) atoms[atom] += e;
      __int128 c = ca * cb;  // |ca|, |cb| < 2^100 would overflow: bounded below
      if (c > kMaxCoefficient || c < -kMaxCoefficient) return false;
      r[Monomial(atoms.begin(), atoms.end())] += c;
      if (r.size() > kMaxTerms) return false;
    }
  }
  for (auto it = r.begin(); it != r.end();) it = it->second == 0 ? r.erase(it) : std::next(it);
  *out = std::move(r);
  return true;
}

bool toPoly(const SymExpr& e, Poly* out) {
  Poly p;
  switch (e.kind()) {
    case Kind::kInt:
      if (e.intValue() != 0) p[{}] = e.intValue();
      break;
    case Kind::kSym:
      p[{{e.name(), 1}}] = 1;
      break;
    case Kind::kAdd:
      for (const SymExpr& a : e.args()) {
        Poly q;
        if (!toPoly(a, &q)) return false;
        for (const auto& [m, c] : q) p[m] += c;
      }
      for (auto it = p.begin(); it != p.end();) it = it->second == 0 ? p.erase(it) : std::next(it);
      break;
    case Kind::kMul:
    case Kind::kPow: {
      p[{}] = 1;
      std::vector<SymExpr> factors = e.args();
      if (e.kind() == Kind::kPow) factors.assign(static_cast<size_t>(e.args()[1].intValue()), e.args()[0]);
      for (const SymExpr& f : factors) {
        Poly q;
        if (!toPoly(f, &q) || !polyMul(p, q, &p)) return false;
      }
      break;
    }
    case Kind::kFloorDiv:
    case Kind::kMod:
    case Kind::kMax:
    case Kind::kMin:
      p[{{"#" + e.toString(), 1}}] = 1;  // an atom
      break;
    default:
      return false;  // a condition is not a polynomial
  }
  *out = std::move(p);
  return true;
}

}  // namespace

bool SymExpr::samePolynomial(const SymExpr& a, const SymExpr& b) {
  if (!a.valid() || !b.valid()) return false;
  if (a == b && isArith(a.kind())) return true;
  Poly pa, pb;
  if (!toPoly(a, &pa) || !toPoly(b, &pb)) return false;
  return pa == pb;
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) { return SymExpr::make(SymExpr::Kind::kAdd, {a, b}); }
SymExpr operator*(const SymExpr& a, const SymExpr& b) { return SymExpr::make(SymExpr::Kind::kMul, {a, b}); }
SymExpr operator+(const SymExpr& a, int64_t b) { return a + SymExpr::integer(b); }
SymExpr operator*(int64_t a, const SymExpr& b) { return SymExpr::integer(a) * b; }
SymExpr operator*(const SymExpr& a, int64_t b) { return a * SymExpr::integer(b); }

SymExpr product(const std::vector<SymExpr>& factors) {
  if (factors.empty()) return SymExpr::integer(1);
  return SymExpr::make(SymExpr::Kind::kMul, factors);
}

// ---- parser -----------------------------------------------------------------------------------

namespace {

class ExprParser {
 public:
  explicit ExprParser(std::string_view text) : text_(text) {}

  StatusOr<SymExpr> run(size_t* consumed) {
    auto e = orExpr();
    if (!e.isOk()) return e;
    skip();
    if (consumed) *consumed = pos_;
    return e;
  }
 private:
  using Result = StatusOr<SymExpr>;

  void skip() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool peek(std::string_view tok) {
    skip();
    return text_.compare(pos_, tok.size(), tok) == 0;
  }
  bool peekWord(std::string_view w) {
    if (!peek(w)) return false;
    size_t end = pos_ + w.size();
    return end >= text_.size() || !(std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_');
  }
  bool accept(std::string_view tok) {
    if (!peek(tok)) return false;
    pos_ += tok.size();
    return true;
  }
  Status error(const std::string& what) const {
    return invalidArgument("column " + std::to_string(pos_ + 1) + ": " + what);
  }
  static Result checked(SymExpr e, const char* what) {
    if (!e.valid()) return invalidArgument(std::string("ill-formed ") + what);
    return e;
  }

  Result orExpr() {
    VF_ASSIGN_OR_RETURN(SymExpr first, andExpr());
    std::vector<SymExpr> args{first};
    while (peekWord("or")) {
      pos_ += 2;
      VF_ASSIGN_OR_RETURN(SymExpr next, andExpr());
      args.push_back(next);
    }
    if (args.size() == 1) return first;
    return checked(SymExpr::make(Kind::kOr, std::move(args)), "'or'");
  }
  Result andExpr() {
    VF_ASSIGN_OR_RETURN(SymExpr first, notExpr());
    std::vector<SymExpr> args{first};
    while (peekWord("and")) {
      pos_ += 3;
      VF_ASSIGN_OR_RETURN(SymExpr next, notExpr());
      args.push_back(next);
    }
    if (args.size() == 1) return first;
    return checked(SymExpr::make(Kind::kAnd, std::move(args)), "'and'");
  }
  Result notExpr() {
    if (peekWord("not")) {
      pos_ += 3;
      VF_ASSIGN_OR_RETURN(SymExpr inner, notExpr());
      return checked(SymExpr::make(Kind::kNot, {inner}), "'not'");
    }
    return comparison();
  }
  Result comparison() {
    VF_ASSIGN_OR_RETURN(SymExpr lhs, sum());
    static const std::pair<const char*, Kind> ops[] = {{"==", Kind::kEq}, {"!=", Kind::kNe}, {"<=", Kind::kLe},
                                                       {">=", Kind::kGe}, {"<", Kind::kLt},  {">", Kind::kGt}};
    for (const auto& [tok, kind] : ops) {
      if (accept(tok)) {
        VF_ASSIGN_OR_RETURN(SymExpr rhs, sum());
        return checked(SymExpr::make(kind, {lhs, rhs}), "comparison");
      }
    }
    return lhs;
  }
  Result sum() {
    VF_ASSIGN_OR_RETURN(SymExpr acc, term());
    while (true) {
      if (accept("+")) {
        VF_ASSIGN_OR_RETURN(SymExpr t, term());
        acc = SymExpr::make(Kind::kAdd, {acc, t});
      } else if (peek("-")) {
        ++pos_;
        VF_ASSIGN_OR_RETURN(SymExpr t, term());
        acc = SymExpr::make(Kind::kAdd, {acc, SymExpr::make(Kind::kMul, {SymExpr::integer(-1), t})});
      } else {
        break;
      }
      if (!acc.valid()) return error("ill-formed sum");
    }
    return acc;
  }
  Result term() {
    VF_ASSIGN_OR_RETURN(SymExpr acc, unary());
    while (true) {
      Kind k;
      if (accept("//")) k = Kind::kFloorDiv;
      else if (peek("**")) break;
      else if (accept("*")) k = Kind::kMul;
      else if (accept("%")) k = Kind::kMod;
      else break;
      VF_ASSIGN_OR_RETURN(SymExpr rhs, unary());
      acc = SymExpr::make(k, {acc, rhs});
      if (!acc.valid()) return error("ill-formed product");
    }
    return acc;
  }
  Result unary() {
    if (peek("-")) {
      ++pos_;
      skip();
      if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        VF_ASSIGN_OR_RETURN(SymExpr lit, number(true));
        return power(lit);
      }
      VF_ASSIGN_OR_RETURN(SymExpr inner, unary());
      return checked(SymExpr::make(Kind::kMul, {SymExpr::integer(-1), inner}), "negation");
    }
    VF_ASSIGN_OR_RETURN(SymExpr base, atom());
    return power(base);
  }
  Result power(SymExpr base) {
    if (!accept("**")) return base;
    VF_ASSIGN_OR_RETURN(SymExpr exponent, unary());
    return checked(SymExpr::make(Kind::kPow, {base, exponent}), "power (exponent 0..64)");
  }
  Result number(bool negative) {
    size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    std::string digits(text_.substr(start, pos_ - start));
    if (digits.size() > 19) return error("integer out of range");
    unsigned long long v = std::stoull(digits);
    if (v > static_cast<unsigned long long>(INT64_MAX) + (negative ? 1ULL : 0ULL)) return error("integer out of range");
    int64_t x = negative ? static_cast<int64_t>(0ULL - v) : static_cast<int64_t>(v);
    return SymExpr::integer(x);
  }
  Result atom() {
    skip();
    if (pos_ >= text_.size()) return error("expected an expression");
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return number(false);
    if (c == '(') {
      ++pos_;
      VF_ASSIGN_OR_RETURN(SymExpr inner, orExpr());
      if (!accept(")")) return error("expected ')'");
      return inner;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
      std::string word(text_.substr(start, pos_ - start));
      if (word == "True" || word == "False") return SymExpr::boolean(word == "True");
      if (word == "max" || word == "min") {
        if (!accept("(")) return error("expected '(' after " + word);
        std::vector<SymExpr> args;
        do {
          VF_ASSIGN_OR_RETURN(SymExpr a, orExpr());
          args.push_back(a);
        } while (accept(","));
        if (!accept(")")) return error("expected ')'");
        return checked(SymExpr::make(word == "max" ? Kind::kMax : Kind::kMin, std::move(args)), word.c_str());
      }
      if (word == "and" || word == "or" || word == "not") return error("unexpected '" + word + "'");
      return SymExpr::symbol(word);
    }
    return error(std::string("unexpected '") + c + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<SymExpr> SymExpr::parse(std::string_view text) {
  ExprParser p(text);
  size_t consumed = 0;
  VF_ASSIGN_OR_RETURN(SymExpr e, p.run(&consumed));
  if (consumed != text.size()) {
    return invalidArgument("column " + std::to_string(consumed + 1) + ": unexpected text after the expression");
  }
  return e;
}

StatusOr<SymExpr> SymExpr::parsePrefix(std::string_view text, size_t* consumed) {
  ExprParser p(text);
  return p.run(consumed);
}

}  // namespace verifuse::ir
