// Exact rationals and the hash-consed term table.
#include "terms.h"

#include <algorithm>

namespace verifuse::shapes {

i128 checkedAdd(i128 a, i128 b) {
  i128 r;
  if (__builtin_add_overflow(a, b, &r)) throw ArithOverflow{};
  return r;
}
i128 checkedSub(i128 a, i128 b) {
  i128 r;
  if (__builtin_sub_overflow(a, b, &r)) throw ArithOverflow{};
  return r;
}
i128 checkedMul(i128 a, i128 b) {
  i128 r;
  if (__builtin_mul_overflow(a, b, &r)) throw ArithOverflow{};
  return r;
}

std::string i128ToString(i128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  std::string s;
  // Work with negative values so that the minimum value does not overflow.
  i128 x = neg ? v : -v;
  while (x != 0) {
    int digit = -static_cast<int>(x % 10);
    s.push_back(static_cast<char>('0' + digit));
    x /= 10;
  }
  if (neg) s.push_back('-');
  std::reverse(s.begin(), s.end());
  return s;
}

i128 gcd128(i128 a, i128 b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b != 0) {
    i128 t = a % b;
    a = b;
    b = t;
  }
  return a;
}

Rat::Rat(i128 n, i128 d) {
  if (d == 0) throw ArithOverflow{};  // callers never divide by zero; treat as "cannot compute"
  if (d < 0) {
    n = checkedSub(0, n);
    d = checkedSub(0, d);
  }
  i128 g = gcd128(n, d);
  if (g > 1) {
    n /= g;
    d /= g;
  }
  num = n;
  den = d;
}

i128 Rat::floor() const {
  if (den == 1) return num;
  i128 q = num / den;
  if (num < 0) q -= 1;  // truncation rounds toward zero
  return q;
}
i128 Rat::ceil() const {
  if (den == 1) return num;
  return floor() + 1;
}

std::string Rat::toString() const {
  if (den == 1) return i128ToString(num);
  return i128ToString(num) + "/" + i128ToString(den);
}

std::string Rat::toSmt() const {
  auto intText = [](i128 v) { return v < 0 ? "(- " + i128ToString(-v) + ")" : i128ToString(v); };
  if (den == 1) return intText(num);
  return "(/ " + intText(num) + " " + i128ToString(den) + ")";
}

Rat operator+(const Rat& a, const Rat& b) {
  if (a.den == 1 && b.den == 1) return Rat(checkedAdd(a.num, b.num));
  return Rat(checkedAdd(checkedMul(a.num, b.den), checkedMul(b.num, a.den)), checkedMul(a.den, b.den));
}
Rat operator-(const Rat& a) { return Rat(checkedSub(0, a.num), a.den); }
Rat operator-(const Rat& a, const Rat& b) { return a + (-b); }
Rat operator*(const Rat& a, const Rat& b) {
  if (a.den == 1 && b.den == 1) return Rat(checkedMul(a.num, b.num));
  return Rat(checkedMul(a.num, b.num), checkedMul(a.den, b.den));
}
Rat operator/(const Rat& a, const Rat& b) {
  return Rat(checkedMul(a.num, b.den), checkedMul(a.den, b.num));
}
bool operator<(const Rat& a, const Rat& b) {
  if (a.den == b.den) return a.num < b.num;
  return checkedMul(a.num, b.den) < checkedMul(b.num, a.den);
}

const char* sortName(Sort s) {
  switch (s) {
    case Sort::kInt: return "Int";
    case Sort::kReal: return "Real";
    case Sort::kBool: return "Bool";
  }
  return "?";
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

TermId TermTable::mk(Op op, Sort sort, std::vector<TermId> kids, Rat val, uint32_t var) {
  uint64_t h = mix(static_cast<uint64_t>(op), static_cast<uint64_t>(sort));
  h = mix(h, var);
  h = mix(h, static_cast<uint64_t>(val.num));
  h = mix(h, static_cast<uint64_t>(val.num >> 64));
  h = mix(h, static_cast<uint64_t>(val.den));
  for (TermId k : kids) h = mix(h, k);
  auto range = index_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    const Node& n = nodes_[it->second];
    if (n.op == op && n.sort == sort && n.var == var && n.val == val && n.kids == kids) return it->second;
  }
  TermId id = static_cast<TermId>(nodes_.size());
  nodes_.push_back(Node{op, sort, var, val, std::move(kids)});
  index_.emplace(h, id);
  return id;
}

TermId TermTable::mkVar(const std::string& name, Sort s, bool internal) {
  uint32_t idx = static_cast<uint32_t>(vars_.size());
  TermId t = mk(Op::kVar, s, {}, Rat(), idx);
  vars_.push_back(VarInfo{name, s, t, internal});
  return t;
}

namespace {
const char* opName(Op op) {
  switch (op) {
    case Op::kAdd: return "+";
    case Op::kMul: return "*";
    case Op::kDiv: return "div";
    case Op::kMod: return "mod";
    case Op::kAbs: return "abs";
    case Op::kRDiv: return "/";
    case Op::kToReal: return "to_real";
    case Op::kToInt: return "to_int";
    case Op::kPow: return "^";
    case Op::kIte: return "ite";
    case Op::kEq: return "=";
    case Op::kLe: return "<=";
    case Op::kLt: return "<";
    case Op::kNot: return "not";
    case Op::kAnd: return "and";
    case Op::kOr: return "or";
    default: return "?";
  }
}
}  // namespace

std::string TermTable::toSmt(TermId root, size_t max_chars) const {
  std::string out;
  // Explicit stack: (term, next child index); terms can be deep.
  std::vector<std::pair<TermId, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    if (out.size() > max_chars) {
      out += " ...";
      break;
    }
    auto& [t, i] = stack.back();
    const Node& n = nodes_[t];
    if (i == 0) {
      switch (n.op) {
        case Op::kVar: out += vars_[n.var].name; stack.pop_back(); continue;
        case Op::kConst: {
          std::string s = n.val.toSmt();
          if (n.sort == Sort::kReal && n.val.isInt()) {
            s = n.val.num < 0 ? "(- " + i128ToString(-n.val.num) + ".0)" : i128ToString(n.val.num) + ".0";
          }
          out += s;
          stack.pop_back();
          continue;
        }
        case Op::kBool: out += n.val.num ? "true" : "false"; stack.pop_back(); continue;
        default: out += "("; out += opName(n.op);
      }
    }
    if (i < n.kids.size()) {
      TermId k = n.kids[i];
      ++i;
      out += " ";
      stack.push_back({k, 0});
    } else {
      out += ")";
      stack.pop_back();
    }
  }
  return out;
}

}  // namespace verifuse::shapes
