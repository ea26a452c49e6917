// ShapeProblem: shape programs built in C++ (see shape_problem.h). Terms are made exactly as the
// SMT-LIB reader makes them, so a problem and its text are analyzed alike.
#include <utility>

#include "problem_internal.h"

namespace verifuse::shapes {

ShapeProblem::ShapeProblem() : impl_(std::make_unique<Impl>()) {}
ShapeProblem::~ShapeProblem() = default;
ShapeProblem::ShapeProblem(const ShapeProblem& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
ShapeProblem& ShapeProblem::operator=(const ShapeProblem& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
ShapeProblem::ShapeProblem(ShapeProblem&&) noexcept = default;
ShapeProblem& ShapeProblem::operator=(ShapeProblem&&) noexcept = default;

namespace {

/// Records the first sort error; the term returned then is a placeholder.
ShapeProblem::Term sortError(ShapeProblem::Impl& p, const std::string& what) {
  if (p.error.empty()) p.error = what;
  return p.terms.mkBool(false);
}

bool allSorted(const ShapeProblem::Impl& p, const std::vector<ShapeProblem::Term>& args, Sort s) {
  for (auto a : args) {
    if (a >= p.terms.size() || p.terms.sort(a) != s) return false;
  }
  return true;
}

}  // namespace

ShapeProblem::Term ShapeProblem::declareInt(const std::string& name, std::optional<int64_t> example) {
  auto it = impl_->ints.find(name);
  if (it != impl_->ints.end()) return it->second;
  TermId t = impl_->terms.mkVar(name, Sort::kInt);
  impl_->ints.emplace(name, t);
  if (example) impl_->hints[name] = Rat(static_cast<i128>(*example));
  return t;
}

ShapeProblem::Term ShapeProblem::integer(int64_t v) { return impl_->terms.mkConst(Rat(static_cast<i128>(v)), Sort::kInt); }
ShapeProblem::Term ShapeProblem::boolean(bool v) { return impl_->terms.mkBool(v); }

ShapeProblem::Term ShapeProblem::add(std::vector<Term> args) {
  if (args.empty() || !allSorted(*impl_, args, Sort::kInt)) return sortError(*impl_, "'+' needs Int terms");
  if (args.size() == 1) return args[0];
  return impl_->terms.mk(Op::kAdd, Sort::kInt, std::move(args));
}

ShapeProblem::Term ShapeProblem::mul(std::vector<Term> args) {
  if (args.empty() || !allSorted(*impl_, args, Sort::kInt)) return sortError(*impl_, "'*' needs Int terms");
  if (args.size() == 1) return args[0];
  return impl_->terms.mk(Op::kMul, Sort::kInt, std::move(args));
}

ShapeProblem::Term ShapeProblem::neg(Term a) {
  if (!allSorted(*impl_, {a}, Sort::kInt)) return sortError(*impl_, "'-' needs an Int term");
  return impl_->terms.mk(Op::kMul, Sort::kInt, {integer(-1), a});
}

ShapeProblem::Term ShapeProblem::sub(Term a, Term b) {
  if (!allSorted(*impl_, {a, b}, Sort::kInt)) return sortError(*impl_, "'-' needs Int terms");
  return impl_->terms.mk(Op::kAdd, Sort::kInt, {a, impl_->terms.mk(Op::kMul, Sort::kInt, {integer(-1), b})});
}

ShapeProblem::Term ShapeProblem::div(Term a, Term b) {
  if (!allSorted(*impl_, {a, b}, Sort::kInt)) return sortError(*impl_, "'div' needs Int terms");
  return impl_->terms.mk(Op::kDiv, Sort::kInt, {a, b});
}

ShapeProblem::Term ShapeProblem::mod(Term a, Term b) {
  if (!allSorted(*impl_, {a, b}, Sort::kInt)) return sortError(*impl_, "'mod' needs Int terms");
  return impl_->terms.mk(Op::kMod, Sort::kInt, {a, b});
}

ShapeProblem::Term ShapeProblem::ite(Term c, Term a, Term b) {
  if (!allSorted(*impl_, {c}, Sort::kBool) || a >= impl_->terms.size() || b >= impl_->terms.size() ||
      impl_->terms.sort(a) != impl_->terms.sort(b)) {
    return sortError(*impl_, "'ite' needs a Bool condition and branches of one sort");
  }
  return impl_->terms.mk(Op::kIte, impl_->terms.sort(a), {c, a, b});
}

ShapeProblem::Term ShapeProblem::eq(Term a, Term b) {
  if (a >= impl_->terms.size() || b >= impl_->terms.size() || impl_->terms.sort(a) != impl_->terms.sort(b)) {
    return sortError(*impl_, "'=' needs terms of one sort");
  }
  return impl_->terms.mk(Op::kEq, Sort::kBool, {a, b});
}

ShapeProblem::Term ShapeProblem::le(Term a, Term b) {
  if (!allSorted(*impl_, {a, b}, Sort::kInt)) return sortError(*impl_, "'<=' needs Int terms");
  return impl_->terms.mk(Op::kLe, Sort::kBool, {a, b});
}

ShapeProblem::Term ShapeProblem::lt(Term a, Term b) {
  if (!allSorted(*impl_, {a, b}, Sort::kInt)) return sortError(*impl_, "'<' needs Int terms");
  return impl_->terms.mk(Op::kLt, Sort::kBool, {a, b});
}

ShapeProblem::Term ShapeProblem::ge(Term a, Term b) { return le(b, a); }
ShapeProblem::Term ShapeProblem::gt(Term a, Term b) { return lt(b, a); }

ShapeProblem::Term ShapeProblem::notOf(Term a) {
  if (!allSorted(*impl_, {a}, Sort::kBool)) return sortError(*impl_, "'not' needs a Bool term");
  return impl_->terms.mk(Op::kNot, Sort::kBool, {a});
}

ShapeProblem::Term ShapeProblem::andOf(std::vector<Term> args) {
  if (!allSorted(*impl_, args, Sort::kBool)) return sortError(*impl_, "'and' needs Bool terms");
  if (args.empty()) return boolean(true);
  if (args.size() == 1) return args[0];
  return impl_->terms.mk(Op::kAnd, Sort::kBool, std::move(args));
}

ShapeProblem::Term ShapeProblem::orOf(std::vector<Term> args) {
  if (!allSorted(*impl_, args, Sort::kBool)) return sortError(*impl_, "'or' needs Bool terms");
  if (args.empty()) return boolean(false);
  if (args.size() == 1) return args[0];
  return impl_->terms.mk(Op::kOr, Sort::kBool, std::move(args));
}

const std::string& ShapeProblem::error() const { return impl_->error; }

std::string ShapeProblem::toSmt(Term t, size_t maxChars) const {
  if (t >= impl_->terms.size()) return "?";
  return impl_->terms.toSmt(t, maxChars);
}

Status loadProblem(const ShapeProblem& problem, const std::vector<ShapeProblem::Term>& asserts, ParsedProgram* out) {
  const ShapeProblem::Impl& p = problem.impl();
  if (!p.error.empty()) return invalidArgument("shape problem: " + p.error);
  out->terms = p.terms;
  out->hints = p.hints;
  out->check_sats = 1;
  for (size_t i = 0; i < asserts.size(); ++i) {
    if (asserts[i] >= p.terms.size() || p.terms.sort(asserts[i]) != Sort::kBool) {
      return invalidArgument("shape problem: assert " + std::to_string(i) + " is not a Bool term");
    }
    AssertInfo a;
    a.term = asserts[i];
    a.text = "(assert " + p.terms.toSmt(asserts[i]) + ")";
    out->asserts.push_back(std::move(a));
  }
  return Status::ok();
}

}  // namespace verifuse::shapes
