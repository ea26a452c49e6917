// Translation of shape terms to Z3 and the solver calls (timeouts, push/pop, assumptions).
#include "z3_bridge.h"

#include <unordered_map>
#include <z3++.h>

namespace verifuse::shapes {

namespace {
std::optional<Rat> parseZ3Numeral(const std::string& s) {
  try {
    size_t slash = s.find('/');
    auto parseInt = [](const std::string& t) -> std::optional<i128> {
      if (t.empty()) return std::nullopt;
      bool neg = t[0] == '-';
      i128 v = 0;
      for (size_t i = neg ? 1 : 0; i < t.size(); ++i) {
        if (t[i] < '0' || t[i] > '9') return std::nullopt;
        v = checkedAdd(checkedMul(v, 10), t[i] - '0');
      }
      return neg ? -v : v;
    };
    if (slash == std::string::npos) {
      auto v = parseInt(s);
      if (!v) return std::nullopt;
      return Rat(*v);
    }
    auto n = parseInt(s.substr(0, slash)), d = parseInt(s.substr(slash + 1));
    if (!n || !d || *d == 0) return std::nullopt;
    return Rat(*n, *d);
  } catch (const ArithOverflow&) {
    return std::nullopt;
  }
}
}  // namespace

struct Z3Session::Impl {
  const TermTable& T;
  z3::context ctx;
  std::unordered_map<TermId, z3::expr> cache;
  std::unique_ptr<z3::solver> inc;     // prefix queries
  std::unique_ptr<z3::solver> loo;     // leave-one-out
  std::vector<z3::expr> loo_lits, loo_neg;
  std::vector<TermId> loo_asserts;

  explicit Impl(const TermTable& t) : T(t) {}

  z3::expr num(const Rat& v, Sort s) {
    std::string text = v.isInt() ? i128ToString(v.num) : (i128ToString(v.num) + "/" + i128ToString(v.den));
    return z3::expr(ctx, Z3_mk_numeral(ctx, text.c_str(), s == Sort::kInt ? ctx.int_sort() : ctx.real_sort()));
  }

  z3::expr tr(TermId t) {
    auto it = cache.find(t);
    if (it != cache.end()) return it->second;
    const Node& n = T.at(t);
    std::vector<z3::expr> k;
    k.reserve(n.kids.size());
    for (TermId c : n.kids) k.push_back(tr(c));
    auto arr = [&]() {
      std::vector<Z3_ast> a;
      for (auto& e : k) a.push_back(e);
      return a;
    };
    z3::expr r(ctx);
    switch (n.op) {
      case Op::kVar: {
        const std::string& name = T.vars()[n.var].name;
        r = n.sort == Sort::kInt ? ctx.int_const(name.c_str())
                                 : (n.sort == Sort::kReal ? ctx.real_const(name.c_str()) : ctx.bool_const(name.c_str()));
        break;
      }
      case Op::kConst: r = num(n.val, n.sort); break;
      case Op::kBool: r = ctx.bool_val(!n.val.isZero()); break;
      case Op::kAdd: { auto a = arr(); r = z3::expr(ctx, Z3_mk_add(ctx, a.size(), a.data())); break; }
      case Op::kMul: { auto a = arr(); r = z3::expr(ctx, Z3_mk_mul(ctx, a.size(), a.data())); break; }
      case Op::kDiv:
      case Op::kRDiv: r = z3::expr(ctx, Z3_mk_div(ctx, k[0], k[1])); break;
      case Op::kMod: r = z3::expr(ctx, Z3_mk_mod(ctx, k[0], k[1])); break;
      case Op::kAbs: r = z3::ite(k[0] >= 0, k[0], -k[0]); break;
      case Op::kToReal: r = z3::expr(ctx, Z3_mk_int2real(ctx, k[0])); break;
      case Op::kToInt: r = z3::expr(ctx, Z3_mk_real2int(ctx, k[0])); break;
      case Op::kPow: r = z3::expr(ctx, Z3_mk_power(ctx, k[0], k[1])); break;
      case Op::kIte: r = z3::ite(k[0], k[1], k[2]); break;
      case Op::kEq: r = k[0] == k[1]; break;
      case Op::kLe: r = k[0] <= k[1]; break;
      case Op::kLt: r = k[0] < k[1]; break;
      case Op::kNot: r = !k[0]; break;
      case Op::kAnd: { auto a = arr(); r = z3::expr(ctx, Z3_mk_and(ctx, a.size(), a.data())); break; }
      case Op::kOr: { auto a = arr(); r = z3::expr(ctx, Z3_mk_or(ctx, a.size(), a.data())); break; }
    }
    cache.emplace(t, r);
    return r;
  }

  static SolveResult convert(z3::check_result r) {
    if (r == z3::sat) return SolveResult::kSat;
    if (r == z3::unsat) return SolveResult::kUnsat;
    return SolveResult::kUnknown;
  }
};

Z3Session::Z3Session(const TermTable& terms) : impl_(std::make_unique<Impl>(terms)) {}
Z3Session::~Z3Session() = default;

SolveResult Z3Session::check(const std::vector<TermId>& constraints, int timeout_ms,
                             std::vector<std::optional<Rat>>* model, std::string* why) {
  try {
    z3::solver s(impl_->ctx);
    z3::params p(impl_->ctx);
    p.set("timeout", static_cast<unsigned>(std::max(1, timeout_ms)));
    s.set(p);
    for (TermId t : constraints) s.add(impl_->tr(t));
    SolveResult r = Impl::convert(s.check());
    if (r == SolveResult::kUnknown && why) *why = "z3: " + s.reason_unknown();
    if (r == SolveResult::kSat && model) {
      z3::model m = s.get_model();
      const auto& vars = impl_->T.vars();
      model->resize(vars.size());
      for (size_t i = 0; i < vars.size(); ++i) {
        if (vars[i].internal) continue;
        auto it = impl_->cache.find(vars[i].term);
        if (it == impl_->cache.end()) continue;  // not in the constraints: caller picks a value
        z3::expr v = m.eval(it->second, /*model_completion=*/true);
        if (vars[i].sort == Sort::kBool) {
          if (v.is_true()) (*model)[i] = Rat(1);
          else if (v.is_false()) (*model)[i] = Rat(0);
        } else if (v.is_numeral()) {
          (*model)[i] = parseZ3Numeral(Z3_get_numeral_string(impl_->ctx, v));
        }
      }
    }
    return r;
  } catch (const z3::exception& e) {
    if (why) *why = std::string("z3 error: ") + e.msg();
    return SolveResult::kUnknown;
  }
}

void Z3Session::add(TermId t) {
  try {
    if (!impl_->inc) impl_->inc = std::make_unique<z3::solver>(impl_->ctx);
    impl_->inc->add(impl_->tr(t));
  } catch (const z3::exception&) {
  }
}

SolveResult Z3Session::implied(TermId t, int timeout_ms) {
  try {
    if (!impl_->inc) impl_->inc = std::make_unique<z3::solver>(impl_->ctx);
    z3::solver& s = *impl_->inc;
    z3::params p(impl_->ctx);
    p.set("timeout", static_cast<unsigned>(std::max(1, timeout_ms)));
    s.set(p);
    s.push();
    s.add(!impl_->tr(t));
    SolveResult r = Impl::convert(s.check());
    s.pop();
    return r;
  } catch (const z3::exception&) {
    return SolveResult::kUnknown;
  }
}

void Z3Session::track(const std::vector<TermId>& asserts) {
  try {
    impl_->loo = std::make_unique<z3::solver>(impl_->ctx);
    impl_->loo_asserts = asserts;
    impl_->loo_lits.clear();
    impl_->loo_neg.clear();
    for (size_t i = 0; i < asserts.size(); ++i) {
      z3::expr a = impl_->tr(asserts[i]);
      z3::expr lit = impl_->ctx.bool_const(("__vf_keep_" + std::to_string(i)).c_str());
      z3::expr neg = impl_->ctx.bool_const(("__vf_neg_" + std::to_string(i)).c_str());
      impl_->loo->add(z3::implies(lit, a));
      impl_->loo->add(z3::implies(neg, !a));
      impl_->loo_lits.push_back(lit);
      impl_->loo_neg.push_back(neg);
    }
  } catch (const z3::exception&) {
    impl_->loo.reset();
  }
}

SolveResult Z3Session::impliedByOthers(size_t i, int timeout_ms) {
  try {
    if (!impl_->loo || i >= impl_->loo_lits.size()) return SolveResult::kUnknown;
    z3::params p(impl_->ctx);
    p.set("timeout", static_cast<unsigned>(std::max(1, timeout_ms)));
    impl_->loo->set(p);
    z3::expr_vector assumptions(impl_->ctx);
    for (size_t j = 0; j < impl_->loo_lits.size(); ++j) {
      if (j != i) assumptions.push_back(impl_->loo_lits[j]);
    }
    assumptions.push_back(impl_->loo_neg[i]);
    return Impl::convert(impl_->loo->check(assumptions));
  } catch (const z3::exception&) {
    return SolveResult::kUnknown;
  }
}

std::string z3VersionString() {
  unsigned major, minor, build, rev;
  Z3_get_version(&major, &minor, &build, &rev);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(build);
}

}  // namespace verifuse::shapes
