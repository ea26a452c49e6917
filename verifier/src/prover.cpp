// The Z3 layer for rule obligations (with layer_check.cpp and shapes/z3_bridge.cpp, one of the few
// translation units that include z3++.h). Encodes obligations, runs the vacuity / definedness / value
// queries, maps Z3 results to Verdicts. No exception escapes.
#include "verifuse/verify/prover.h"

#include <z3++.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "verifuse/verify/proof_cache.h"

namespace verifuse::verify {

namespace {

std::atomic<uint64_t> gQueries{0};

struct Unsupported {
  std::string what;
};

// Readable name of a UF application for counterexamples: gelu_erf(conv.out[o]).
std::string pretty(const Expr& e) {
  if (e.kind() == ExprKind::Var) return e.name();
  if (e.kind() != ExprKind::Apply) return e.str();
  std::string out = e.name() + "(";
  for (size_t i = 0; i < e.children().size(); ++i) out += (i ? ", " : "") + pretty(e.children()[i]);
  return out + ")";
}

/// Expr -> z3::expr. Collects free variables (for counterexamples), UF applications, and the
/// denominators of divisions (definedness side conditions) of the side being encoded.
class Encoder {
 public:
  explicit Encoder(z3::context& ctx) : ctx_(ctx), tensor_(ctx.uninterpreted_sort("Tensor")) {}

  /// Encodes \p e; division denominators go to \p denoms (may be null: ignored).
  z3::expr encode(const Expr& e, std::vector<z3::expr>* denoms) {
    denoms_ = denoms;
    return enc(e);
  }

  const std::map<std::string, z3::expr>& freeVars() const { return freeVars_; }
  const std::map<std::string, z3::expr>& applications() const { return apps_; }

 private:
  z3::sort sortOf(Sort s) {
    switch (s) {
      case Sort::Real: return ctx_.real_sort();
      case Sort::Int: return ctx_.int_sort();
      case Sort::Bool: return ctx_.bool_sort();
      case Sort::Tensor: return tensor_;
    }
    return ctx_.real_sort();
  }

  static bool isArith(const z3::expr& e) { return e.is_int() || e.is_real(); }

  void requireArith(const z3::expr& a, const z3::expr& b, const char* op) {
    if (!isArith(a) || !isArith(b)) throw Unsupported{std::string("operator ") + op + " on non-numeric operands"};
  }

  // Promote Int to Real when mixed.
  void unify(z3::expr& a, z3::expr& b) {
    if (a.is_int() && b.is_real()) a = z3::to_real(a);
    if (b.is_int() && a.is_real()) b = z3::to_real(b);
  }

  z3::expr var(const Expr& e) {
    std::string key = e.name();
    auto it = vars_.find(key);
    if (it != vars_.end()) {
      if (varSorts_.at(key) != e.sort()) {
        throw Unsupported{"variable '" + key + "' used with two sorts"};
      }
    } else {
      z3::expr c = ctx_.constant(key.c_str(), sortOf(e.sort()));
      vars_.emplace(key, c);
      varSorts_.emplace(key, e.sort());
    }
    z3::expr c = vars_.at(key);
    if (!bound_.count(key)) freeVars_.emplace(key, c);
    return c;
  }

  z3::expr enc(const Expr& e) {
    if (!e.valid()) throw Unsupported{"null expression"};
    const auto& ch = e.children();
    switch (e.kind()) {
      case ExprKind::Const:
        if (e.sort() == Sort::Bool) return ctx_.bool_val(e.num() != 0);
        if (e.sort() == Sort::Int) return ctx_.int_val(static_cast<int64_t>(e.num()));
        return ctx_.real_val(static_cast<int64_t>(e.num()), static_cast<int64_t>(e.den()));
      case ExprKind::Var:
        return var(e);
      case ExprKind::Add: case ExprKind::Sub: case ExprKind::Mul: case ExprKind::Div:
      case ExprKind::Lt: case ExprKind::Le: case ExprKind::Gt: case ExprKind::Ge:
      case ExprKind::Min: case ExprKind::Max: {
        z3::expr a = enc(ch.at(0)), b = enc(ch.at(1));
        requireArith(a, b, exprKindName(e.kind()));
        unify(a, b);
        switch (e.kind()) {
          case ExprKind::Add: return a + b;
          case ExprKind::Sub: return a - b;
          case ExprKind::Mul: return a * b;
          case ExprKind::Div: {
            if (a.is_int()) a = z3::to_real(a);
            if (b.is_int()) b = z3::to_real(b);
            if (denoms_ && !(b.is_numeral() && b.get_decimal_string(20) != "0")) denoms_->push_back(b);
            return a / b;
          }
          case ExprKind::Lt: return a < b;
          case ExprKind::Le: return a <= b;
          case ExprKind::Gt: return a > b;
          case ExprKind::Ge: return a >= b;
          case ExprKind::Min: return z3::ite(a < b, a, b);
          default: return z3::ite(a > b, a, b);
        }
      }
      case ExprKind::Neg: {
        z3::expr a = enc(ch.at(0));
        if (!isArith(a)) throw Unsupported{"negation of a non-numeric operand"};
        return -a;
      }
      case ExprKind::Eq: case ExprKind::Ne: {
        z3::expr a = enc(ch.at(0)), b = enc(ch.at(1));
        if (isArith(a) && isArith(b)) unify(a, b);
        if (!z3::eq(a.get_sort(), b.get_sort())) throw Unsupported{"comparison of different sorts"};
        return e.kind() == ExprKind::Eq ? (a == b) : (a != b);
      }
      case ExprKind::And: case ExprKind::Or: case ExprKind::Implies: {
        z3::expr a = enc(ch.at(0)), b = enc(ch.at(1));
        if (!a.is_bool() || !b.is_bool()) throw Unsupported{"boolean connective on non-Bool operands"};
        if (e.kind() == ExprKind::And) return a && b;
        if (e.kind() == ExprKind::Or) return a || b;
        return z3::implies(a, b);
      }
      case ExprKind::Not: {
        z3::expr a = enc(ch.at(0));
        if (!a.is_bool()) throw Unsupported{"not on a non-Bool operand"};
        return !a;
      }
      case ExprKind::Ite: {
        z3::expr c = enc(ch.at(0)), t = enc(ch.at(1)), f = enc(ch.at(2));
        if (!c.is_bool()) throw Unsupported{"ite condition is not Bool"};
        if (isArith(t) && isArith(f)) unify(t, f);
        if (!z3::eq(t.get_sort(), f.get_sort())) throw Unsupported{"ite branches of different sorts"};
        return z3::ite(c, t, f);
      }
      case ExprKind::Apply: {
        z3::expr_vector args(ctx_);
        z3::sort_vector domain(ctx_);
        std::string sig = e.name() + "(";
        for (const Expr& c : ch) {
          z3::expr a = enc(c);
          args.push_back(a);
          domain.push_back(a.get_sort());
          sig += a.get_sort().name().str() + ",";
        }
        sig += ")->" + std::string(sortName(e.sort()));
        auto it = funcSigs_.find(e.name());
        if (it == funcSigs_.end()) {
          funcSigs_.emplace(e.name(), sig);
          funcs_.emplace(e.name(), ctx_.function(e.name().c_str(), domain, sortOf(e.sort())));
        } else if (it->second != sig) {
          throw Unsupported{"uninterpreted function '" + e.name() + "' used with two signatures (" +
                            it->second + " and " + sig + ")"};
        }
        z3::expr app = funcs_.at(e.name())(args);
        if (bound_.empty() && e.sort() != Sort::Tensor) apps_.emplace(pretty(e), app);
        return app;
      }
      case ExprKind::ForAll: {
        z3::expr_vector xs(ctx_);
        std::vector<std::string> added;
        for (size_t i = 0; i + 1 < ch.size(); ++i) {
          if (ch[i].kind() != ExprKind::Var) throw Unsupported{"forall binds a non-variable"};
          if (!bound_.count(ch[i].name())) added.push_back(ch[i].name());
          bound_.insert(ch[i].name());
          xs.push_back(var(ch[i]));
        }
        std::vector<z3::expr>* saved = denoms_;
        denoms_ = nullptr;  // NOTE: divisions under a quantifier are not definedness conditions.
        z3::expr body = enc(ch.back());
        denoms_ = saved;
        for (const std::string& n : added) bound_.erase(n);
        if (!body.is_bool()) throw Unsupported{"forall body is not Bool"};
        return z3::forall(xs, body);
      }
      case ExprKind::Sqrt:
        throw Unsupported{"sqrt is not encoded (it pushes Z3 into algebraic numbers); use a fresh "
                          "variable r > 0 with r*r = x (see sem::rsqrt)"};
      case ExprKind::Pow:
        throw Unsupported{"pow is not encoded; expand integer powers as products"};
    }
    throw Unsupported{"unknown expression kind"};
  }

  z3::context& ctx_;
  z3::sort tensor_;
  std::vector<z3::expr>* denoms_ = nullptr;
  std::map<std::string, z3::expr> vars_;
  std::map<std::string, Sort> varSorts_;
  std::map<std::string, z3::expr> freeVars_;
  std::map<std::string, z3::expr> apps_;
  std::map<std::string, std::string> funcSigs_;
  std::map<std::string, z3::func_decl> funcs_;
  std::set<std::string> bound_;
};

std::string valueString(const z3::expr& v) {
  if (v.is_bool()) {
    if (v.is_true()) return "true";
    if (v.is_false()) return "false";
  }
  if (v.is_numeral()) {
    std::string s;
    if (v.is_numeral(s)) return s;
  }
  if (v.is_algebraic()) return v.get_decimal_string(12) + "?";
  return v.to_string();
}

z3::expr conj(z3::context& ctx, const std::vector<z3::expr>& xs) {
  z3::expr_vector v(ctx);
  for (const auto& x : xs) v.push_back(x);
  return v.empty() ? ctx.bool_val(true) : z3::mk_and(v);
}

struct QueryResult {
  z3::check_result result;
  std::string reason;
};

// Z3 reports both an expired timeout and an exhausted rlimit as "canceled"; an rlimit stop well
// before the wall-clock timeout is reported as Unknown (the budget, not the clock, ran out).
QueryResult check(z3::solver& s, const ProveOptions& options) {
  ++gQueries;
  auto start = std::chrono::steady_clock::now();
  z3::check_result r = s.check();
  QueryResult q{r, r == z3::unknown ? s.reason_unknown() : std::string()};
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (r == z3::unknown && options.resourceLimit && q.reason == "canceled" && ms < 0.9 * options.timeoutMs) {
    q.reason = "resource limit exhausted (rlimit " + std::to_string(options.resourceLimit) + ")";
  }
  return q;
}

Verdict undecided(const QueryResult& q, const std::string& phase) {
  Verdict v;
  bool timeout = q.reason.find("timeout") != std::string::npos || q.reason.find("canceled") != std::string::npos;
  v.kind = timeout ? VerdictKind::Timeout : VerdictKind::Unknown;
  v.messageClass = timeout ? MessageClass::SolverTimeout : MessageClass::SolverUnknown;
  v.detail = phase + ": " + q.reason;
  return v;
}

Counterexample extract(const z3::model& m, Encoder& enc) {
  Counterexample cex;
  for (const auto& [name, c] : enc.freeVars()) cex.values.emplace_back(name, valueString(m.eval(c, true)));
  size_t shown = 0;
  for (const auto& [text, app] : enc.applications()) {
    if (++shown > 24) break;
    cex.values.emplace_back(text, valueString(m.eval(app, true)));
  }
  return cex;
}

Verdict proveUncached(const Obligation& ob, const ProveOptions& options) {
  z3::context ctx;
  Encoder enc(ctx);
  std::vector<z3::expr> base;
  std::vector<z3::expr> srcDenoms, tgtDenoms;
  std::vector<std::pair<z3::expr, z3::expr>> goals;
  try {
    for (const Expr& a : ob.assumptions) base.push_back(enc.encode(a, &srcDenoms));
    for (const FreshVariable& f : ob.fresh) {
      enc.encode(f.var, nullptr);
      for (const Expr& c : f.constraints) base.push_back(enc.encode(c, &srcDenoms));
    }
    for (const Expr& a : ob.axioms) base.push_back(enc.encode(a, nullptr));
    for (const Goal& g : ob.goals) {
      z3::expr s = enc.encode(g.source, &srcDenoms);
      z3::expr t = enc.encode(g.target, &tgtDenoms);
      if ((s.is_int() || s.is_real()) && (t.is_int() || t.is_real())) {
        if (s.is_int() && t.is_real()) s = z3::to_real(s);
        if (t.is_int() && s.is_real()) t = z3::to_real(t);
      }
      if (!z3::eq(s.get_sort(), t.get_sort())) throw Unsupported{"goal '" + g.label + "': source and target sorts differ"};
      goals.emplace_back(s, t);
    }
    for (const auto& d : srcDenoms) base.push_back(d != 0);
    for (const Expr& a : ob.assumptions) {
      if (a.sort() != Sort::Bool) throw Unsupported{"assumption is not Bool: " + a.str()};
    }
    for (const Expr& a : ob.axioms) {
      if (a.sort() != Sort::Bool) throw Unsupported{"axiom is not Bool: " + a.str()};
    }
  } catch (const Unsupported& u) {
    Verdict v;
    v.kind = VerdictKind::Unsupported;
    v.messageClass = MessageClass::NotEncodable;
    v.detail = u.what;
    return v;
  }
  if (goals.empty()) {
    Verdict v;
    v.kind = VerdictKind::Unsupported;
    v.messageClass = MessageClass::NotEncodable;
    v.detail = "obligation has no goals";
    return v;
  }

  z3::solver s(ctx);
  z3::params p(ctx);
  p.set("timeout", options.timeoutMs);
  if (options.resourceLimit) p.set("rlimit", options.resourceLimit);
  s.set(p);
  s.add(conj(ctx, base));

  // 1. Vacuity: the precondition must be satisfiable, or the "proof" proves nothing.
  QueryResult q = check(s, options);
  if (q.result == z3::unsat) {
    Verdict v;
    v.kind = VerdictKind::Refuted;
    v.messageClass = MessageClass::PreconditionAlwaysFalse;
    v.detail = "assumptions, fresh-variable constraints and axioms are unsatisfiable";
    return v;
  }
  if (q.result == z3::unknown) return undecided(q, "vacuity check");

  // 2. Target definedness: where the source is defined, target denominators must be nonzero.
  if (!tgtDenoms.empty()) {
    std::vector<z3::expr> nz;
    for (const auto& d : tgtDenoms) nz.push_back(d != 0);
    s.push();
    s.add(!conj(ctx, nz));
    q = check(s, options);
    if (q.result == z3::sat) {
      Verdict v;
      v.kind = VerdictKind::Refuted;
      v.messageClass = MessageClass::TargetLessDefined;
      v.counterexample = extract(s.get_model(), enc);
      v.counterexample.goal = "target division by zero";
      return v;
    }
    if (q.result == z3::unknown) return undecided(q, "target definedness");
    s.pop();
  }

  // 3. Values: some goal differs?
  z3::expr_vector diffs(ctx);
  for (const auto& [src, tgt] : goals) diffs.push_back(src != tgt);
  s.add(z3::mk_or(diffs));
  q = check(s, options);
  if (q.result == z3::unsat) {
    Verdict v;
    v.kind = VerdictKind::Proved;
    return v;
  }
  if (q.result == z3::unknown) return undecided(q, "value check");
  Verdict v;
  v.kind = VerdictKind::Refuted;
  v.messageClass = MessageClass::ValueMismatch;
  z3::model m = s.get_model();
  v.counterexample = extract(m, enc);
  for (size_t i = 0; i < goals.size(); ++i) {
    if (m.eval(goals[i].first != goals[i].second, true).is_true()) {
      v.counterexample.goal = ob.goals[i].label;
      v.counterexample.sourceValue = valueString(m.eval(goals[i].first, true));
      v.counterexample.targetValue = valueString(m.eval(goals[i].second, true));
      break;
    }
  }
  return v;
}

}  // namespace

uint64_t solverQueryCount() { return gQueries.load(); }

std::string solverVersion() {
  unsigned major = 0, minor = 0, build = 0, rev = 0;
  Z3_get_version(&major, &minor, &build, &rev);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(build);
}

Verdict prove(const Obligation& ob, const ProveOptions& options) {
  if (options.cache) {
    if (std::optional<Verdict> hit = options.cache->lookup(ob)) return *hit;
  }
  auto start = std::chrono::steady_clock::now();
  Verdict v;
  try {
    v = proveUncached(ob, options);
  } catch (const z3::exception& e) {
    v = Verdict{};
    v.kind = VerdictKind::Unsupported;
    v.messageClass = MessageClass::NotEncodable;
    v.detail = std::string("z3 error: ") + e.msg();
  } catch (const std::exception& e) {
    v = Verdict{};
    v.kind = VerdictKind::Unknown;
    v.messageClass = MessageClass::SolverUnknown;
    v.detail = std::string("internal error: ") + e.what();
  }
  v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (options.cache && (v.kind == VerdictKind::Proved || v.kind == VerdictKind::Refuted)) {
    // NOTE: a failed cache write only costs a re-proof next time; the verdict stands.
    (void)options.cache->store(ob, v);
  }
  return v;
}

}  // namespace verifuse::verify
