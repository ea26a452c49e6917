// Polynomial normal forms, equality propagation, bounds, and exact evaluation.
#include "reasoning.h"

#include <algorithm>

namespace verifuse::shapes {

i128 smtMod(i128 a, i128 b) {
  i128 m = b < 0 ? -b : b;
  i128 r = a % m;
  if (r < 0) r += m;
  return r;
}
i128 smtDiv(i128 a, i128 b) { return (a - smtMod(a, b)) / b; }

namespace {

constexpr size_t kMaxPolyTerms = 4096;

Poly constPoly(const Rat& c) {
  Poly p;
  if (!c.isZero()) p.terms.push_back({Mono{}, c});
  return p;
}

Poly atomPoly(TermId a) {
  Poly p;
  p.terms.push_back({Mono{a}, Rat(1)});
  return p;
}

Poly add(const Poly& a, const Poly& b) {
  Poly r;
  r.terms.reserve(a.terms.size() + b.terms.size());
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    if (j >= b.terms.size() || (i < a.terms.size() && a.terms[i].first < b.terms[j].first)) {
      r.terms.push_back(a.terms[i++]);
    } else if (i >= a.terms.size() || b.terms[j].first < a.terms[i].first) {
      r.terms.push_back(b.terms[j++]);
    } else {
      Rat c = a.terms[i].second + b.terms[j].second;
      if (!c.isZero()) r.terms.push_back({a.terms[i].first, c});
      ++i;
      ++j;
    }
  }
  return r;
}

Poly scale(const Poly& a, const Rat& c) {
  Poly r;
  if (c.isZero()) return r;
  r.terms = a.terms;
  for (auto& t : r.terms) t.second = t.second * c;
  return r;
}

Poly mul(const Poly& a, const Poly& b) {
  if (a.terms.size() * b.terms.size() > kMaxPolyTerms) throw ArithOverflow{};
  std::vector<std::pair<Mono, Rat>> acc;
  acc.reserve(a.terms.size() * b.terms.size());
  for (auto& [ma, ca] : a.terms) {
    for (auto& [mb, cb] : b.terms) {
      Mono m;
      m.reserve(ma.size() + mb.size());
      std::merge(ma.begin(), ma.end(), mb.begin(), mb.end(), std::back_inserter(m));
      acc.push_back({std::move(m), ca * cb});
    }
  }
  std::sort(acc.begin(), acc.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  Poly r;
  for (auto& t : acc) {
    if (!r.terms.empty() && r.terms.back().first == t.first) {
      r.terms.back().second = r.terms.back().second + t.second;
      if (r.terms.back().second.isZero()) r.terms.pop_back();
    } else if (!t.second.isZero()) {
      r.terms.push_back(std::move(t));
    }
  }
  return r;
}

Poly sub(const Poly& a, const Poly& b) { return add(a, scale(b, Rat(-1))); }

// Extended-real endpoint for interval products.
struct Ext {
  int inf;  // -1, 0, +1
  Rat v;
};
Ext extMul(const Ext& a, const Ext& b) {
  if ((a.inf == 0 && a.v.isZero()) || (b.inf == 0 && b.v.isZero())) return {0, Rat(0)};
  if (a.inf != 0 || b.inf != 0) {
    int sa = a.inf != 0 ? a.inf : a.v.sign();
    int sb = b.inf != 0 ? b.inf : b.v.sign();
    return {sa * sb, Rat(0)};
  }
  return {0, a.v * b.v};
}
bool extLess(const Ext& a, const Ext& b) {
  if (a.inf != b.inf) return a.inf < b.inf;
  if (a.inf != 0) return false;
  return a.v < b.v;
}

Interval ivMul(const Interval& a, const Interval& b) {
  Ext al = a.lo ? Ext{0, *a.lo} : Ext{-1, Rat(0)};
  Ext ah = a.hi ? Ext{0, *a.hi} : Ext{1, Rat(0)};
  Ext bl = b.lo ? Ext{0, *b.lo} : Ext{-1, Rat(0)};
  Ext bh = b.hi ? Ext{0, *b.hi} : Ext{1, Rat(0)};
  Ext c[4] = {extMul(al, bl), extMul(al, bh), extMul(ah, bl), extMul(ah, bh)};
  Ext lo = c[0], hi = c[0];
  for (auto& e : c) {
    if (extLess(e, lo)) lo = e;
    if (extLess(hi, e)) hi = e;
  }
  Interval r;
  if (lo.inf == 0) r.lo = lo.v;
  if (hi.inf == 0) r.hi = hi.v;
  return r;
}
Interval ivAdd(const Interval& a, const Interval& b) {
  Interval r;
  if (a.lo && b.lo) r.lo = *a.lo + *b.lo;
  if (a.hi && b.hi) r.hi = *a.hi + *b.hi;
  return r;
}
Interval ivScale(const Interval& a, const Rat& c) {
  Interval r;
  if (c.sign() >= 0) {
    if (a.lo) r.lo = *a.lo * c;
    if (a.hi) r.hi = *a.hi * c;
  } else {
    if (a.hi) r.lo = *a.hi * c;
    if (a.lo) r.hi = *a.lo * c;
  }
  if (c.isZero()) r.lo = r.hi = Rat(0);
  return r;
}
Interval ivMeet(const Interval& a, const Interval& b) {
  Interval r = a;
  if (b.lo && (!r.lo || *r.lo < *b.lo)) r.lo = b.lo;
  if (b.hi && (!r.hi || *b.hi < *r.hi)) r.hi = b.hi;
  return r;
}

i128 lcmDen(const Poly& p) {
  i128 l = 1;
  for (auto& t : p.terms) l = checkedMul(l / gcd128(l, t.second.den), t.second.den);
  return l;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Polynomials <-> canonical terms

const Poly& Reasoner::polyOf(TermId t) {
  auto it = poly_memo_.find(t);
  if (it != poly_memo_.end()) return it->second;
  const Node& n = T_.at(t);
  Poly p;
  switch (n.op) {
    case Op::kConst: p = constPoly(n.val); break;
    case Op::kAdd:
      for (TermId k : n.kids) p = add(p, polyOf(k));
      break;
    case Op::kMul:
      p = constPoly(Rat(1));
      for (TermId k : n.kids) p = mul(p, polyOf(k));
      break;
    case Op::kToReal: p = polyOf(n.kids[0]); break;
    default: p = atomPoly(t); break;
  }
  return poly_memo_.emplace(t, std::move(p)).first->second;
}

TermId Reasoner::fromPoly(const Poly& p, Sort sort) {
  std::vector<TermId> sum;
  for (auto& [mono, c] : p.terms) {
    if (mono.empty()) {
      sum.push_back(T_.mkConst(c, sort));
      continue;
    }
    std::vector<TermId> factors;
    for (TermId a : mono) {
      if (sort == Sort::kReal && T_.sort(a) == Sort::kInt) a = T_.mk(Op::kToReal, Sort::kReal, {a});
      factors.push_back(a);
    }
    if (c == Rat(1) && factors.size() == 1) {
      sum.push_back(factors[0]);
    } else {
      if (c != Rat(1)) factors.insert(factors.begin(), T_.mkConst(c, sort));
      sum.push_back(T_.mk(Op::kMul, sort, std::move(factors)));
    }
  }
  if (sum.empty()) return T_.mkConst(Rat(0), sort);
  if (sum.size() == 1) return sum[0];
  return T_.mk(Op::kAdd, sort, std::move(sum));
}

bool Reasoner::allInt(const Poly& p) const {
  for (auto& [mono, c] : p.terms) {
    for (TermId a : mono) {
      if (T_.sort(a) != Sort::kInt) return false;
    }
  }
  return true;
}

// ------------------------------------------------------------------------------------------------
// Intervals

Interval Reasoner::atomInterval(TermId a) {
  auto it = ival_memo_.find(a);
  if (it != ival_memo_.end()) return it->second;
  ival_memo_[a] = Interval{};  // guards against cycles through ite
  const Node& n = T_.at(a);
  Interval r;
  try {
    switch (n.op) {
      case Op::kConst: r.lo = r.hi = n.val; break;
      case Op::kMod: {
        Interval d = intervalOf(n.kids[1]);
        if (d.lo && d.hi && *d.lo == *d.hi && !d.lo->isZero()) {
          Rat m = d.lo->sign() < 0 ? -*d.lo : *d.lo;
          r.lo = Rat(0);
          r.hi = m - Rat(1);
        } else if (d.lo && d.lo->sign() > 0) {
          r.lo = Rat(0);
          if (d.hi) r.hi = *d.hi - Rat(1);
        }
        break;
      }
      case Op::kDiv: {
        Interval x = intervalOf(n.kids[0]);
        Interval d = intervalOf(n.kids[1]);
        if (d.lo && d.hi && *d.lo == *d.hi && d.lo->sign() > 0) {
          i128 c = d.lo->num;
          if (x.lo) r.lo = Rat(smtDiv(x.lo->floor(), c));
          if (x.hi) r.hi = Rat(smtDiv(x.hi->floor(), c));
        } else if (d.lo && d.lo->sign() > 0 && x.lo && x.lo->sign() >= 0) {
          r.lo = Rat(0);
          if (x.hi) r.hi = Rat(smtDiv(x.hi->floor(), d.lo->floor()));
        }
        break;
      }
      case Op::kToInt: {
        Interval x = intervalOf(n.kids[0]);
        if (x.lo) r.lo = Rat(x.lo->floor());
        if (x.hi) r.hi = Rat(x.hi->floor());
        break;
      }
      case Op::kAbs: {
        Interval x = intervalOf(n.kids[0]);
        r.lo = Rat(0);
        if (x.lo && x.hi) r.hi = std::max(-*x.lo, *x.hi);
        if (x.lo && x.lo->sign() >= 0) r = x;
        break;
      }
      case Op::kIte: {
        Interval x = intervalOf(n.kids[1]), y = intervalOf(n.kids[2]);
        if (x.lo && y.lo) r.lo = std::min(*x.lo, *y.lo);
        if (x.hi && y.hi) r.hi = std::max(*x.hi, *y.hi);
        break;
      }
      default: break;
    }
  } catch (const ArithOverflow&) {
    r = Interval{};
  }
  auto b = bounds_.find(a);
  if (b != bounds_.end()) r = ivMeet(r, b->second);
  if (T_.sort(a) == Sort::kInt) {
    if (r.lo) r.lo = Rat(r.lo->ceil());
    if (r.hi) r.hi = Rat(r.hi->floor());
  }
  ival_memo_[a] = r;
  return r;
}

Interval Reasoner::intervalOf(TermId t) {
  try {
    const Poly& p = polyOf(t);
    Interval acc;
    acc.lo = acc.hi = Rat(0);
    for (auto& [mono, c] : p.terms) {
      Interval m;
      m.lo = m.hi = Rat(1);
      for (TermId a : mono) m = ivMul(m, atomInterval(a));
      acc = ivAdd(acc, ivScale(m, c));
      if (!acc.lo && !acc.hi) break;
    }
    return acc;
  } catch (const ArithOverflow&) {
    return Interval{};
  }
}

bool Reasoner::isExcluded(TermId atom, const Rat& v) const {
  auto it = excluded_.find(atom);
  if (it == excluded_.end()) return false;
  return std::find(it->second.begin(), it->second.end(), v) != it->second.end();
}

bool Reasoner::knownNonzero(const Poly& p) {
  TermId n = cmp(Op::kEq, p);
  return T_.isFalse(n);
}

// ------------------------------------------------------------------------------------------------
// Normalization

TermId Reasoner::norm(TermId t) {
  try {
    return normRec(t);
  } catch (const ArithOverflow&) {
    return t;  // too large to canonicalize: leave as is (sound)
  }
}

TermId Reasoner::cmp(Op op, Poly p) {
  bool intMode = allInt(p);
  if (intMode) {
    i128 l = lcmDen(p);
    if (l != 1) p = scale(p, Rat(l));
    if (op == Op::kLt) {
      p = add(p, constPoly(Rat(1)));
      op = Op::kLe;
    }
  }
  if (p.isConst()) {
    Rat c = p.constant();
    bool v = op == Op::kEq ? c.isZero() : (op == Op::kLe ? c.sign() <= 0 : c.sign() < 0);
    return T_.mkBool(v);
  }
  Rat k = p.constant();
  Poly q = sub(p, constPoly(k));  // non-constant part
  if (intMode) {
    i128 g = 0;
    for (auto& t : q.terms) g = gcd128(g, t.second.num);
    if (op == Op::kEq) {
      if (k.num % g != 0) return T_.mkBool(false);
      Rat s = q.terms[0].second.sign() < 0 ? Rat(-g) : Rat(g);
      p = scale(p, Rat(1) / s);
    } else {
      q = scale(q, Rat(1, g));
      p = add(q, constPoly(Rat((k / Rat(g)).ceil())));
    }
  } else {
    Rat lead = q.terms[0].second;
    if (op != Op::kEq && lead.sign() < 0) lead = -lead;
    p = scale(p, Rat(1) / lead);
  }
  Sort s = intMode ? Sort::kInt : Sort::kReal;
  TermId atom = T_.mk(op, Sort::kBool, {fromPoly(p, s), T_.mkConst(Rat(0), s)});
  return decideAtom(atom);
}

TermId Reasoner::decideAtom(TermId atom) {
  if (facts_enabled_) {
    auto f = facts_.find(atom);
    if (f != facts_.end()) return T_.mkBool(f->second);
  }
  const Node& n = T_.at(atom);
  if (n.op != Op::kEq && n.op != Op::kLe && n.op != Op::kLt) return atom;
  if (T_.sort(n.kids[0]) == Sort::kBool) return atom;
  Interval iv = intervalOf(n.kids[0]);
  switch (n.op) {
    case Op::kLe:
      if (iv.hi && iv.hi->sign() <= 0) return T_.mkBool(true);
      if (iv.lo && iv.lo->sign() > 0) return T_.mkBool(false);
      break;
    case Op::kLt:
      if (iv.hi && iv.hi->sign() < 0) return T_.mkBool(true);
      if (iv.lo && iv.lo->sign() >= 0) return T_.mkBool(false);
      break;
    case Op::kEq: {
      if (iv.lo && iv.hi && iv.lo->isZero() && iv.hi->isZero()) return T_.mkBool(true);
      if ((iv.lo && iv.lo->sign() > 0) || (iv.hi && iv.hi->sign() < 0)) return T_.mkBool(false);
      const Poly& p = polyOf(n.kids[0]);
      const auto& nonconst = p.terms.back();
      size_t nterms = p.terms.size() - (p.terms[0].first.empty() ? 1 : 0);
      if (nterms == 1 && nonconst.first.size() == 1) {
        Rat v = -p.constant() / nonconst.second;
        if (isExcluded(nonconst.first[0], v)) return T_.mkBool(false);
      }
      break;
    }
    default: break;
  }
  return atom;
}

TermId Reasoner::negate(TermId n) {
  const Node& x = T_.at(n);
  if (x.op == Op::kBool) return T_.mkBool(x.val.isZero());
  if (x.op == Op::kNot) return x.kids[0];
  if ((x.op == Op::kLe || x.op == Op::kLt) && T_.sort(x.kids[0]) != Sort::kBool) {
    Poly p = scale(polyOf(x.kids[0]), Rat(-1));
    // not (p <= 0)  <=>  -p < 0 ;  not (p < 0)  <=>  -p <= 0
    return cmp(x.op == Op::kLe ? Op::kLt : Op::kLe, std::move(p));
  }
  TermId r = T_.mk(Op::kNot, Sort::kBool, {n});
  if (facts_enabled_) {
    auto f = facts_.find(r);
    if (f != facts_.end()) return T_.mkBool(f->second);
  }
  return r;
}

TermId Reasoner::normRec(TermId t) {
  auto it = memo_.find(t);
  if (it != memo_.end()) return it->second;
  const Node n = T_.at(t);  // copy: the table may grow below
  TermId r = t;
  switch (n.op) {
    case Op::kConst:
    case Op::kBool: r = t; break;
    case Op::kVar: {
      auto s = subst_.find(n.var);
      if (s != subst_.end()) {
        r = normRec(s->second);
      } else if (n.sort == Sort::kBool) {
        r = decideAtom(t);
      } else {
        // A variable with equal bounds is that constant.
        auto b = bounds_.find(t);
        if (b != bounds_.end() && b->second.lo && b->second.hi && *b->second.lo == *b->second.hi) {
          r = T_.mkConst(*b->second.lo, n.sort);
        }
      }
      break;
    }
    case Op::kNot: r = negate(normRec(n.kids[0])); break;
    case Op::kAnd:
    case Op::kOr: {
      bool isAnd = n.op == Op::kAnd;
      std::vector<TermId> kids;
      bool shortcut = false;
      std::vector<TermId> work(n.kids.rbegin(), n.kids.rend());
      while (!work.empty() && !shortcut) {
        TermId k = normRec(work.back());
        work.pop_back();
        const Node& kn = T_.at(k);
        if (kn.op == Op::kBool) {
          if (kn.val.isZero() == isAnd) shortcut = true;
          continue;
        }
        if (kn.op == n.op) {
          for (TermId g : kn.kids) kids.push_back(g);
        } else {
          kids.push_back(k);
        }
      }
      if (shortcut) {
        r = T_.mkBool(!isAnd);
        break;
      }
      std::sort(kids.begin(), kids.end());
      kids.erase(std::unique(kids.begin(), kids.end()), kids.end());
      for (TermId k : kids) {
        const Node& kn = T_.at(k);
        if (kn.op == Op::kNot && std::binary_search(kids.begin(), kids.end(), kn.kids[0])) shortcut = true;
      }
      if (shortcut) {
        r = T_.mkBool(!isAnd);
      } else if (kids.empty()) {
        r = T_.mkBool(isAnd);
      } else if (kids.size() == 1) {
        r = kids[0];
      } else {
        r = decideAtom(T_.mk(n.op, Sort::kBool, std::move(kids)));
      }
      break;
    }
    case Op::kEq:
    case Op::kLe:
    case Op::kLt: {
      TermId a = normRec(n.kids[0]);
      TermId b = normRec(n.kids[1]);
      if (T_.sort(a) == Sort::kBool) {
        if (a == b) {
          r = T_.mkBool(true);
        } else if (T_.at(a).op == Op::kBool) {
          r = T_.isTrue(a) ? b : negate(b);
        } else if (T_.at(b).op == Op::kBool) {
          r = T_.isTrue(b) ? a : negate(a);
        } else {
          r = decideAtom(T_.mk(Op::kEq, Sort::kBool, {std::min(a, b), std::max(a, b)}));
        }
        break;
      }
      r = cmp(n.op, sub(polyOf(a), polyOf(b)));
      break;
    }
    case Op::kIte: {
      TermId c = normRec(n.kids[0]);
      if (T_.isTrue(c)) {
        r = normRec(n.kids[1]);
      } else if (T_.isFalse(c)) {
        r = normRec(n.kids[2]);
      } else {
        TermId a = normRec(n.kids[1]), b = normRec(n.kids[2]);
        r = a == b ? a : T_.mk(Op::kIte, n.sort, {c, a, b});
        if (n.sort == Sort::kBool && r != a) r = decideAtom(r);
      }
      break;
    }
    default: r = normArith(t); break;
  }
  memo_[t] = r;
  return r;
}

TermId Reasoner::normArith(TermId t) {
  const Node n = T_.at(t);
  std::vector<TermId> k;
  for (TermId c : n.kids) k.push_back(normRec(c));
  switch (n.op) {
    case Op::kAdd: {
      Poly p;
      for (TermId c : k) p = add(p, polyOf(c));
      return fromPoly(p, n.sort);
    }
    case Op::kMul: {
      Poly p = constPoly(Rat(1));
      for (TermId c : k) p = mul(p, polyOf(c));
      return fromPoly(p, n.sort);
    }
    case Op::kToReal: return fromPoly(polyOf(k[0]), Sort::kReal);
    case Op::kRDiv: {
      const Poly& d = polyOf(k[1]);
      if (d.isConst() && !d.constant().isZero()) return fromPoly(scale(polyOf(k[0]), Rat(1) / d.constant()), Sort::kReal);
      return T_.mk(Op::kRDiv, Sort::kReal, k);
    }
    case Op::kToInt: {
      const Poly& p = polyOf(k[0]);
      if (p.isConst()) return T_.mkConst(Rat(p.constant().floor()), Sort::kInt);
      bool integral = allInt(p);
      for (auto& tm : p.terms) integral = integral && tm.second.isInt();
      if (integral) return fromPoly(p, Sort::kInt);
      return T_.mk(Op::kToInt, Sort::kInt, k);
    }
    case Op::kAbs: {
      Interval iv = intervalOf(k[0]);
      if (iv.lo && iv.lo->sign() >= 0) return k[0];
      if (iv.hi && iv.hi->sign() <= 0) return fromPoly(scale(polyOf(k[0]), Rat(-1)), n.sort);
      return T_.mk(Op::kAbs, n.sort, k);
    }
    case Op::kPow: {
      const Poly& b = polyOf(k[0]);
      const Poly& e = polyOf(k[1]);
      if (e.isConst() && e.constant() == Rat(1)) return k[0];
      if (b.isConst() && e.isConst()) {
        std::vector<std::optional<Rat>> none;
        Evaluator ev(T_, none);
        if (auto v = ev.eval(T_.mk(Op::kPow, Sort::kReal, k))) return T_.mkConst(*v, Sort::kReal);
      }
      return T_.mk(Op::kPow, Sort::kReal, k);
    }
    case Op::kDiv:
    case Op::kMod: {
      bool isDiv = n.op == Op::kDiv;
      const Poly a = polyOf(k[0]);
      const Poly b = polyOf(k[1]);
      if (b.isConst() && !b.constant().isZero()) {
        i128 c = b.constant().num;
        Poly q, rem;
        for (auto& tm : a.terms) {
          if (tm.second.num % c == 0) {
            q.terms.push_back({tm.first, Rat(tm.second.num / c)});
          } else {
            rem.terms.push_back(tm);
          }
        }
        // a = c*q + rem  =>  div(a,c) = q + div(rem,c),  mod(a,c) = mod(rem,c)
        if (rem.isConst()) {
          i128 rv = rem.constant().num;
          if (isDiv) return fromPoly(add(q, constPoly(Rat(smtDiv(rv, c)))), Sort::kInt);
          return T_.mkConst(Rat(smtMod(rv, c)), Sort::kInt);
        }
        TermId remT = fromPoly(rem, Sort::kInt);
        Interval iv = intervalOf(remT);
        if (iv.lo && iv.hi) {
          i128 dl = smtDiv(iv.lo->num, c), dh = smtDiv(iv.hi->num, c);
          if (dl == dh) {
            // the quotient is constant over the range of rem, so mod(rem,c) = rem - c*dl
            if (isDiv) return fromPoly(add(q, constPoly(Rat(dl))), Sort::kInt);
            return fromPoly(sub(rem, constPoly(Rat(checkedMul(c, dl)))), Sort::kInt);
          }
        }
        TermId atom = T_.mk(n.op, Sort::kInt, {remT, k[1]});
        if (!isDiv) return atom;
        return fromPoly(add(q, atomPoly(atom)), Sort::kInt);
      }
      // Non-constant divisor: exact division by a single monomial c*m when it is nonzero.
      if (b.terms.size() == 1 && !b.terms[0].first.empty() && knownNonzero(b)) {
        const Mono& m = b.terms[0].first;
        const Rat& bc = b.terms[0].second;
        Poly q;
        bool exact = bc.isInt();
        for (auto& tm : a.terms) {
          if (!exact) break;
          if (tm.second.num % bc.num != 0 || !std::includes(tm.first.begin(), tm.first.end(), m.begin(), m.end())) {
            exact = false;
            break;
          }
          Mono rest;
          std::set_difference(tm.first.begin(), tm.first.end(), m.begin(), m.end(), std::back_inserter(rest));
          q.terms.push_back({rest, Rat(tm.second.num / bc.num)});
        }
        if (exact) {
          std::sort(q.terms.begin(), q.terms.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
          if (isDiv) return fromPoly(q, Sort::kInt);
          return T_.mkConst(Rat(0), Sort::kInt);
        }
      }
      return T_.mk(n.op, Sort::kInt, k);
    }
    default: return T_.mk(n.op, n.sort, k);
  }
}

// ------------------------------------------------------------------------------------------------
// Learning

bool Reasoner::containsVar(TermId root, TermId var) {
  std::unordered_set<TermId> seen;
  std::vector<TermId> stack{root};
  while (!stack.empty()) {
    TermId t = stack.back();
    stack.pop_back();
    if (t == var) return true;
    if (!seen.insert(t).second) continue;
    for (TermId k : T_.at(t).kids) stack.push_back(k);
  }
  return false;
}

bool Reasoner::tighten(TermId atom, std::optional<Rat> lo, std::optional<Rat> hi) {
  bool isInt = T_.sort(atom) == Sort::kInt;
  if (isInt) {
    if (lo) lo = Rat(lo->ceil());
    if (hi) hi = Rat(hi->floor());
  }
  Interval& b = bounds_[atom];
  if (b.lo == std::nullopt && b.hi == std::nullopt &&
      std::find(bound_order_.begin(), bound_order_.end(), atom) == bound_order_.end()) {
    bound_order_.push_back(atom);
  }
  bool changed = false;
  if (lo && (!b.lo || *b.lo < *lo)) {
    b.lo = lo;
    changed = true;
  }
  if (hi && (!b.hi || *hi < *b.hi)) {
    b.hi = hi;
    changed = true;
  }
  if (isInt) {
    while (b.lo && isExcluded(atom, *b.lo)) {
      b.lo = *b.lo + Rat(1);
      changed = true;
    }
    while (b.hi && isExcluded(atom, *b.hi)) {
      b.hi = *b.hi - Rat(1);
      changed = true;
    }
  }
  if (b.lo && b.hi && *b.hi < *b.lo) {
    conflict_ = true;
    return false;
  }
  if (changed) {
    bump();
    const Op aop = T_.at(atom).op;
    const uint32_t avar = T_.at(atom).var;
    const Sort asort = T_.sort(atom);
    if (aop == Op::kVar && b.lo && b.hi && *b.lo == *b.hi && !subst_.count(avar)) {
      Rat v = *b.lo;
      TermId c = T_.mkConst(v, asort);
      addSubst(avar, c);
    }
  }
  return true;
}

void Reasoner::addSubst(uint32_t var, TermId e) {
  TermId x = T_.vars()[var].term;
  subst_[var] = e;
  bump();
  // Bounds and exclusions on x become constraints on e.
  auto b = bounds_.find(x);
  if (b != bounds_.end()) {
    Sort s = T_.sort(x);
    if (b->second.lo) pending_.push_back(T_.mk(Op::kLe, Sort::kBool, {T_.mkConst(*b->second.lo, s), e}));
    if (b->second.hi) pending_.push_back(T_.mk(Op::kLe, Sort::kBool, {e, T_.mkConst(*b->second.hi, s)}));
    bounds_.erase(b);
  }
  auto ex = excluded_.find(x);
  if (ex != excluded_.end()) {
    for (const Rat& v : ex->second) {
      pending_.push_back(T_.mk(Op::kNot, Sort::kBool,
                               {T_.mk(Op::kEq, Sort::kBool, {e, T_.mkConst(v, T_.sort(x))})}));
    }
    excluded_.erase(ex);
  }
  // Facts mentioning x are re-normalized (without themselves) so they keep matching.
  if (facts_enabled_ && !facts_.empty()) {
    auto old = std::move(facts_);
    facts_.clear();
    facts_enabled_ = false;
    std::vector<std::pair<TermId, bool>> renormed;
    for (auto& [f, v] : old) renormed.push_back({norm(f), v});
    facts_enabled_ = true;
    for (auto& [f, v] : renormed) {
      if (T_.at(f).op == Op::kBool) {
        if (T_.isTrue(f) != v) conflict_ = true;
        continue;
      }
      facts_[f] = v;
    }
    memo_.clear();
  }
}

bool Reasoner::learn(TermId f) {
  if (conflict_) return false;
  const Node n = T_.at(f);
  switch (n.op) {
    case Op::kBool:
      if (n.val.isZero()) conflict_ = true;
      break;
    case Op::kAnd:
      for (TermId k : n.kids) {
        if (!learn(norm(k))) return false;
      }
      break;
    case Op::kVar:
      addSubst(n.var, T_.mkBool(true));
      break;
    case Op::kEq:
    case Op::kLe:
    case Op::kLt: {
      if (T_.sort(n.kids[0]) == Sort::kBool) {
        facts_[f] = true;
        break;
      }
      const Poly p = polyOf(n.kids[0]);
      Rat k = p.constant();
      size_t nonconst = p.terms.size() - (p.terms.empty() || !p.terms[0].first.empty() ? 0 : 1);
      bool done = false;
      if (n.op == Op::kEq) {
        bool intMode = T_.sort(n.kids[0]) == Sort::kInt;
        for (auto& [mono, c] : p.terms) {
          if (mono.size() != 1 || T_.at(mono[0]).op != Op::kVar) continue;
          TermId x = mono[0];
          if (intMode && T_.sort(x) != Sort::kInt) continue;
          if (!intMode && T_.sort(x) != Sort::kReal) continue;
          Poly rest = sub(p, scale(atomPoly(x), c));
          Poly e = scale(rest, Rat(-1) / c);
          if (intMode) {
            bool integral = true;
            for (auto& tm : e.terms) integral = integral && tm.second.isInt();
            if (!integral) continue;
          }
          TermId et = fromPoly(e, T_.sort(x));
          if (containsVar(et, x)) continue;
          addSubst(T_.at(x).var, et);
          done = true;
          break;
        }
        if (!done && nonconst == 1 && p.terms.back().first.size() == 1) {
          TermId a = p.terms.back().first[0];
          Rat v = -k / p.terms.back().second;
          if (T_.sort(a) == Sort::kInt && !v.isInt()) {
            conflict_ = true;
            return false;
          }
          tighten(a, v, v);
          done = true;
        }
      } else if (nonconst == 1 && p.terms.back().first.size() == 1) {
        TermId a = p.terms.back().first[0];
        Rat c = p.terms.back().second;
        Rat v = -k / c;  // c*a + k <= 0  <=>  a <= v (c > 0) or a >= v (c < 0)
        if (c.sign() > 0) {
          tighten(a, std::nullopt, v);
        } else {
          tighten(a, v, std::nullopt);
        }
        done = n.op == Op::kLe;
      }
      if (!done) facts_[f] = true;
      break;
    }
    case Op::kNot: {
      TermId inner = n.kids[0];
      const Node& in = T_.at(inner);
      if (in.op == Op::kVar) {
        addSubst(in.var, T_.mkBool(false));
        break;
      }
      facts_[inner] = false;
      facts_[f] = true;
      if (in.op == Op::kEq && T_.sort(in.kids[0]) != Sort::kBool) {
        const Poly& p = polyOf(in.kids[0]);
        size_t nonconst = p.terms.size() - (p.terms.empty() || !p.terms[0].first.empty() ? 0 : 1);
        if (nonconst == 1 && p.terms.back().first.size() == 1) {
          TermId a = p.terms.back().first[0];
          Rat v = -p.constant() / p.terms.back().second;
          auto& ex = excluded_[a];
          if (std::find(ex.begin(), ex.end(), v) == ex.end()) {
            ex.push_back(v);
            if (std::find(bound_order_.begin(), bound_order_.end(), a) == bound_order_.end()) {
              bound_order_.push_back(a);
            }
            tighten(a, std::nullopt, std::nullopt);
            bump();
          }
        }
      }
      break;
    }
    default:
      facts_[f] = true;
      break;
  }
  while (!pending_.empty() && !conflict_) {
    TermId p = pending_.back();
    pending_.pop_back();
    TermId np = norm(p);
    if (!learn(np)) return false;
  }
  return !conflict_;
}

std::vector<TermId> Reasoner::boundConstraints() {
  std::vector<TermId> out;
  for (TermId a : bound_order_) {
    Sort s = T_.sort(a);
    const Node& an = T_.at(a);
    if (an.op == Op::kVar && subst_.count(an.var)) continue;
    auto b = bounds_.find(a);
    if (b != bounds_.end()) {
      if (b->second.lo) out.push_back(T_.mk(Op::kLe, Sort::kBool, {T_.mkConst(*b->second.lo, s), a}));
      if (b->second.hi) out.push_back(T_.mk(Op::kLe, Sort::kBool, {a, T_.mkConst(*b->second.hi, s)}));
    }
    auto ex = excluded_.find(a);
    if (ex != excluded_.end()) {
      for (const Rat& v : ex->second) {
        out.push_back(T_.mk(Op::kNot, Sort::kBool, {T_.mk(Op::kEq, Sort::kBool, {a, T_.mkConst(v, s)})}));
      }
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Evaluation

namespace {
std::optional<i128> isqrtExact(i128 v) {
  if (v < 0) return std::nullopt;
  i128 lo = 0, hi = 1;
  while (hi * hi <= v) {
    lo = hi;
    if (hi > (static_cast<i128>(1) << 62)) break;
    hi *= 2;
  }
  while (lo < hi) {
    i128 mid = (lo + hi + 1) / 2;
    if (mid * mid <= v) lo = mid; else hi = mid - 1;
  }
  if (lo * lo == v) return lo;
  return std::nullopt;
}
}  // namespace

std::optional<Rat> Evaluator::eval(TermId t) {
  try {
    return evalRec(t);
  } catch (const ArithOverflow&) {
    return std::nullopt;
  }
}

std::optional<Rat> Evaluator::evalRec(TermId t) {
  auto it = memo_.find(t);
  if (it != memo_.end()) return it->second;
  const Node& n = T_.at(t);
  std::optional<Rat> r;
  auto kid = [&](size_t i) { return evalRec(n.kids[i]); };
  auto truth = [](bool b) { return std::optional<Rat>(Rat(b ? 1 : 0)); };
  switch (n.op) {
    case Op::kVar:
      if (n.var < values_.size()) r = values_[n.var];
      break;
    case Op::kConst:
    case Op::kBool: r = n.val; break;
    case Op::kAdd: {
      Rat acc(0);
      bool ok = true;
      for (size_t i = 0; i < n.kids.size() && ok; ++i) {
        auto v = kid(i);
        if (v) acc = acc + *v; else ok = false;
      }
      if (ok) r = acc;
      break;
    }
    case Op::kMul: {
      Rat acc(1);
      bool ok = true, zero = false;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        auto v = kid(i);
        if (!v) ok = false;
        else if (v->isZero()) zero = true;
        else if (ok) acc = acc * *v;
      }
      if (zero) r = Rat(0); else if (ok) r = acc;
      break;
    }
    case Op::kDiv:
    case Op::kMod: {
      auto a = kid(0), b = kid(1);
      if (a && b && !b->isZero()) r = Rat(n.op == Op::kDiv ? smtDiv(a->num, b->num) : smtMod(a->num, b->num));
      break;
    }
    case Op::kAbs: {
      auto a = kid(0);
      if (a) r = a->sign() < 0 ? -*a : *a;
      break;
    }
    case Op::kRDiv: {
      auto a = kid(0), b = kid(1);
      if (a && b && !b->isZero()) r = *a / *b;
      break;
    }
    case Op::kToReal: r = kid(0); break;
    case Op::kToInt: {
      auto a = kid(0);
      if (a) r = Rat(a->floor());
      break;
    }
    case Op::kPow: {
      auto a = kid(0), e = kid(1);
      if (!a || !e) break;
      if (e->isInt()) {
        i128 k = e->num;
        if (k < 0 && a->isZero()) break;
        if (k > 256 || k < -256) break;
        Rat acc(1);
        for (i128 i = 0; i < (k < 0 ? -k : k); ++i) acc = acc * *a;
        r = k < 0 ? Rat(1) / acc : acc;
      } else if (*e == Rat(1, 2)) {
        auto sn = isqrtExact(a->num), sd = isqrtExact(a->den);
        if (sn && sd) r = Rat(*sn, *sd);
      }
      break;
    }
    case Op::kIte: {
      auto c = kid(0);
      if (c) r = c->isZero() ? kid(2) : kid(1);
      break;
    }
    case Op::kEq: {
      auto a = kid(0), b = kid(1);
      if (a && b) r = truth(*a == *b);
      break;
    }
    case Op::kLe: {
      auto a = kid(0), b = kid(1);
      if (a && b) r = truth(*a <= *b);
      break;
    }
    case Op::kLt: {
      auto a = kid(0), b = kid(1);
      if (a && b) r = truth(*a < *b);
      break;
    }
    case Op::kNot: {
      auto a = kid(0);
      if (a) r = truth(a->isZero());
      break;
    }
    case Op::kAnd:
    case Op::kOr: {
      bool isAnd = n.op == Op::kAnd;
      bool unknown = false;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        auto v = kid(i);
        if (!v) {
          unknown = true;
          continue;
        }
        if (v->isZero() == isAnd) {
          r = truth(!isAnd);
          break;
        }
      }
      if (!r && !unknown) r = truth(isAnd);
      break;
    }
  }
  memo_[t] = r;
  return r;
}

}  // namespace verifuse::shapes
