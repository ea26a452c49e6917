// GuardCheck: the added shape guards, evaluated on every call before the plan runs. Each guard is
// compiled once into a postfix program over the bound symbols' values, so a call costs a few
// integer operations and no allocation.
#include <algorithm>
#include <array>

#include "verifuse/shape_guards/shape_guards.h"

namespace verifuse::shape_guards {

using ir::SymExpr;
using Kind = SymExpr::Kind;

struct GuardCheck::Program {
  struct Step {
    Kind kind;
    bool push = false;    // a leaf: a constant (symbol < 0) or a symbol's value
    int32_t symbol = -1;
    int64_t value = 0;    // the constant; the operand count of an n-ary step; a power's exponent
  };
  std::vector<Step> steps;
  size_t depth = 0;       // stack slots needed
  bool compiled = false;  // false: too deep for the stack machine, evaluated as a tree
};

namespace {

constexpr size_t kMaxDepth = 64;

bool compile(const SymExpr& e, const std::vector<SymbolBinding>& bindings, GuardCheck::Program& p, size_t depth) {
  using Step = GuardCheck::Program::Step;
  if (!e.valid() || depth >= kMaxDepth) return false;
  p.depth = std::max(p.depth, depth + 1);
  switch (e.kind()) {
    case Kind::kInt:
    case Kind::kBool:
      p.steps.push_back(Step{e.kind(), true, -1, e.kind() == Kind::kInt ? e.intValue() : (e.boolValue() ? 1 : 0)});
      return true;
    case Kind::kSym:
      for (size_t i = 0; i < bindings.size(); ++i) {
        if (bindings[i].name == e.name()) {
          p.steps.push_back(Step{Kind::kSym, true, static_cast<int32_t>(i), 0});
          return true;
        }
      }
      return false;  // a symbol no input binds
    case Kind::kPow:
      if (!compile(e.args()[0], bindings, p, depth)) return false;
      p.steps.push_back(Step{Kind::kPow, false, -1, e.args()[1].intValue()});
      return true;
    default:
      for (size_t k = 0; k < e.args().size(); ++k) {
        if (!compile(e.args()[k], bindings, p, depth + k)) return false;
      }
      p.steps.push_back(Step{e.kind(), false, -1, static_cast<int64_t>(e.args().size())});
      return true;
  }
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

/// 1 (holds), 0 (violated) or -1 (cannot be evaluated).
int run(const GuardCheck::Program& p, const int64_t* values, size_t count) {
  std::array<int64_t, kMaxDepth + 1> stack;
  size_t top = 0;  // number of live slots
  for (const auto& s : p.steps) {
    if (s.push) {
      if (s.symbol >= 0) {
        if (static_cast<size_t>(s.symbol) >= count) return -1;
        stack[top++] = values[s.symbol];
      } else {
        stack[top++] = s.value;
      }
      continue;
    }
    if (s.kind == Kind::kPow) {
      int64_t acc = 1;
      for (int64_t k = 0; k < s.value; ++k) {
        if (__builtin_mul_overflow(acc, stack[top - 1], &acc)) return -1;
      }
      stack[top - 1] = acc;
      continue;
    }
    const size_t n = static_cast<size_t>(s.value);
    int64_t* a = &stack[top - n];
    int64_t r = 0;
    switch (s.kind) {
      case Kind::kAdd:
        r = a[0];
        for (size_t k = 1; k < n; ++k) {
          if (__builtin_add_overflow(r, a[k], &r)) return -1;
        }
        break;
      case Kind::kMul:
        r = a[0];
        for (size_t k = 1; k < n; ++k) {
          if (__builtin_mul_overflow(r, a[k], &r)) return -1;
        }
        break;
      case Kind::kFloorDiv:
      case Kind::kMod: {
        if (a[1] == 0 || (a[0] == INT64_MIN && a[1] == -1)) return -1;
        const int64_t q = floorDiv(a[0], a[1]);
        r = s.kind == Kind::kFloorDiv ? q : a[0] - q * a[1];
        break;
      }
      case Kind::kMax:
      case Kind::kMin:
        r = a[0];
        for (size_t k = 1; k < n; ++k) r = s.kind == Kind::kMax ? std::max(r, a[k]) : std::min(r, a[k]);
        break;
      case Kind::kEq: r = a[0] == a[1]; break;
      case Kind::kNe: r = a[0] != a[1]; break;
      case Kind::kLt: r = a[0] < a[1]; break;
      case Kind::kLe: r = a[0] <= a[1]; break;
      case Kind::kGt: r = a[0] > a[1]; break;
      case Kind::kGe: r = a[0] >= a[1]; break;
      case Kind::kAnd:
        r = 1;
        for (size_t k = 0; k < n; ++k) r = r && a[k];
        break;
      case Kind::kOr:
        r = 0;
        for (size_t k = 0; k < n; ++k) r = r || a[k];
        break;
      case Kind::kNot: r = !a[0]; break;
      default: return -1;
    }
    top -= n;
    stack[top++] = r;
  }
  if (top != 1) return -1;
  return stack[0] != 0 ? 1 : 0;
}

}  // namespace

GuardCheck::GuardCheck(std::vector<SymbolBinding> bindings, std::vector<Guard> guards)
    : bindings_(std::move(bindings)), guards_(std::move(guards)) {
  for (const Guard& g : guards_) {
    Program p;
    p.compiled = compile(g.condition, bindings_, p, 0);
    if (!p.compiled) p.steps.clear();
    programs_.push_back(std::move(p));
  }
}

GuardCheck::~GuardCheck() = default;

Status GuardCheck::check(const int64_t* values, size_t count) const {
  for (size_t k = 0; k < programs_.size(); ++k) {
    int holds;
    if (programs_[k].compiled) {
      holds = run(programs_[k], values, count);
    } else {
      auto v = guards_[k].condition.evaluate([&](const std::string& name) -> std::optional<int64_t> {
        for (size_t i = 0; i < bindings_.size() && i < count; ++i) {
          if (bindings_[i].name == name) return values[i];
        }
        return std::nullopt;  // a symbol no input binds: the guard cannot be checked, so it fails
      });
      holds = v ? (*v != 0) : -1;
    }
    if (holds != 1) return Status(StatusCode::kShapeGuardFailed, guards_[k].message);
  }
  return Status::ok();
}

}  // namespace verifuse::shape_guards
