// Terms of a shape program: exact rationals and a hash-consed DAG of Int/Real/Bool terms.
// Internal to verifier/src/shapes (no Z3 here).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace verifuse::shapes {

using i128 = __int128;

/// Thrown by checked arithmetic when a value leaves the 128-bit range. Internal only: the analysis
/// entry point catches it (never escapes the library).
struct ArithOverflow {};

i128 checkedAdd(i128 a, i128 b);
i128 checkedSub(i128 a, i128 b);
i128 checkedMul(i128 a, i128 b);
std::string i128ToString(i128 v);

/// An exact rational num/den with den > 0 and gcd(num, den) = 1.
struct Rat {
  i128 num = 0;
  i128 den = 1;
  Rat() = default;
  Rat(i128 n) : num(n), den(1) {}  // NOLINT(implicit)
  Rat(i128 n, i128 d);
  bool isInt() const { return den == 1; }
  bool isZero() const { return num == 0; }
  int sign() const { return num > 0 ? 1 : (num < 0 ? -1 : 0); }
  i128 floor() const;
  i128 ceil() const;
  std::string toString() const;  // "3", "-3", "1/2"
  std::string toSmt() const;     // "3", "(- 3)", "(/ 1 2)"
  friend bool operator==(const Rat& a, const Rat& b) { return a.num == b.num && a.den == b.den; }
  friend bool operator!=(const Rat& a, const Rat& b) { return !(a == b); }
};
Rat operator+(const Rat& a, const Rat& b);
Rat operator-(const Rat& a, const Rat& b);
Rat operator*(const Rat& a, const Rat& b);
Rat operator/(const Rat& a, const Rat& b);  // b != 0
Rat operator-(const Rat& a);
bool operator<(const Rat& a, const Rat& b);
inline bool operator<=(const Rat& a, const Rat& b) { return !(b < a); }
inline bool operator>(const Rat& a, const Rat& b) { return b < a; }
inline bool operator>=(const Rat& a, const Rat& b) { return !(a < b); }
i128 gcd128(i128 a, i128 b);

enum class Sort : uint8_t { kInt, kReal, kBool };
const char* sortName(Sort s);

/// Term operators. The parser desugars `-`, `>`, `>=`, `distinct`, `=>` into these.
enum class Op : uint8_t {
  kVar,    // declared constant; `var` indexes TermTable::vars
  kConst,  // numeral (Int or Real)
  kBool,   // true/false (val 1/0)
  kAdd, kMul,
  kDiv, kMod, kAbs,  // Int: SMT-LIB euclidean div/mod
  kRDiv,             // Real `/`
  kToReal, kToInt, kPow,
  kIte,
  kEq, kLe, kLt,     // Eq also on Bool (iff)
  kNot, kAnd, kOr,
};

using TermId = uint32_t;

struct Node {
  Op op;
  Sort sort;
  uint32_t var = 0;
  Rat val;
  std::vector<TermId> kids;
};

struct VarInfo {
  std::string name;
  Sort sort;
  TermId term;
  bool internal = false;  // a define-fun parameter used to type-check a macro body
};

/// Hash-consed term DAG: structurally equal terms get the same id.
class TermTable {
 public:
  TermId mk(Op op, Sort sort, std::vector<TermId> kids, Rat val = Rat(), uint32_t var = 0);
  TermId mkConst(const Rat& v, Sort s) { return mk(Op::kConst, s, {}, v); }
  TermId mkBool(bool b) { return mk(Op::kBool, Sort::kBool, {}, Rat(b ? 1 : 0)); }
  TermId mkVar(const std::string& name, Sort s, bool internal = false);
  const Node& at(TermId t) const { return nodes_[t]; }
  Sort sort(TermId t) const { return nodes_[t].sort; }
  bool isTrue(TermId t) const { return nodes_[t].op == Op::kBool && nodes_[t].val.num == 1; }
  bool isFalse(TermId t) const { return nodes_[t].op == Op::kBool && nodes_[t].val.num == 0; }
  const std::vector<VarInfo>& vars() const { return vars_; }
  size_t size() const { return nodes_.size(); }
  /// SMT-LIB text of \p t, cut off after about \p max_chars characters.
  std::string toSmt(TermId t, size_t max_chars = 400) const;

 private:
  std::vector<Node> nodes_;
  std::vector<VarInfo> vars_;
  std::unordered_multimap<uint64_t, TermId> index_;  // structural hash -> candidates
};

}  // namespace verifuse::shapes
