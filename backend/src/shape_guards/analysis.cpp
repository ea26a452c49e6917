// Deciding the plan's shape assumptions against Dynamo's guards (see shape_guards.h).
//
// For each assumption A: `guards AND NOT A` unsat means Dynamo's guards entail A; sat comes with
// a counterexample; unknown counts as not entailed. Each assumption that does not follow becomes
// an added guard, checked on every call unless the other added guards imply it (the engine's
// prefix redundancy over guards + added guards, simplest first).
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "lower_smt.h"
#include "verifuse/shape_guards/shape_guards.h"
#include "verifuse/shapes/shape_problem.h"

namespace verifuse::shape_guards {
namespace {

using ir::SymExpr;
using Kind = SymExpr::Kind;
using Clock = std::chrono::steady_clock;
using Term = shapes::ShapeProblem::Term;

double secondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// lowerSmt's term backend: the engine's ShapeProblem.
struct ProblemTerms {
  using T = Term;
  shapes::ShapeProblem& p;
  T integer(int64_t v) { return p.integer(v); }
  T symbol(const std::string& name) { return p.declareInt(name); }
  T boolean(bool v) { return p.boolean(v); }
  T add(std::vector<T> a) { return p.add(std::move(a)); }
  T mul(std::vector<T> a) { return p.mul(std::move(a)); }
  T neg(T a) { return p.neg(a); }
  T sub(T a, T b) { return p.sub(a, b); }
  T div(T a, T b) { return p.div(a, b); }
  T mod(T a, T b) { return p.mod(a, b); }
  T ite(T c, T a, T b) { return p.ite(c, a, b); }
  T eq(T a, T b) { return p.eq(a, b); }
  T le(T a, T b) { return p.le(a, b); }
  T lt(T a, T b) { return p.lt(a, b); }
  T ge(T a, T b) { return p.ge(a, b); }
  T gt(T a, T b) { return p.gt(a, b); }
  T notOf(T a) { return p.notOf(a); }
  T andOf(std::vector<T> a) { return p.andOf(std::move(a)); }
  T orOf(std::vector<T> a) { return p.orOf(std::move(a)); }
};

Term termOf(shapes::ShapeProblem& p, const SymExpr& e) {
  ProblemTerms b{p};
  return lowerSmt(e, b);
}

std::string stripParens(const std::string& s) {
  if (s.size() >= 2 && s.front() == '(' && s.back() == ')') return s.substr(1, s.size() - 2);
  return s;
}

bool structurallyTrue(const Assumption& a) {
  for (const Comparison& c : a.alternatives) {
    if ((c.op == Kind::kEq || c.op == Kind::kLe || c.op == Kind::kGe) && SymExpr::samePolynomial(c.lhs, c.rhs)) {
      return true;
    }
  }
  return false;
}

bool isStatic(const Assumption& a) {
  return std::none_of(a.alternatives.begin(), a.alternatives.end(),
                      [](const Comparison& c) { return c.lhs.hasSymbols() || c.rhs.hasSymbols(); });
}

/// Where each symbol can be read on a call: the first graph input that has it as a size (or is it).
std::vector<SymbolBinding> bindingsOf(const ir::Graph& plan, const std::vector<int32_t>& inputArgIndex) {
  std::vector<SymbolBinding> out;
  std::set<std::string> seen;
  for (size_t k = 0; k < plan.inputs().size() && k < inputArgIndex.size(); ++k) {
    const ir::Value& v = plan.value(plan.inputs()[k]);
    auto bind = [&](const SymExpr& e, int32_t dim) {
      if (e.valid() && e.kind() == Kind::kSym && seen.insert(e.name()).second) {
        out.push_back({e.name(), inputArgIndex[k], dim});
      }
    };
    if (v.type == ir::ValueType::Int) bind(v.symValue, -1);
    if (v.type == ir::ValueType::Tensor && v.hasShape) {
      for (size_t d = 0; d < v.shape.size(); ++d) bind(v.dim(d), static_cast<int32_t>(d));
    }
  }
  return out;
}

std::string nodesText(const std::vector<std::string>& nodes) {
  std::string s;
  for (size_t k = 0; k < nodes.size() && k < 4; ++k) s += (k ? ", " : "") + nodes[k];
  return nodes.size() > 4 ? s + "..." : s;
}

/// The graph's shape program in the corpus format: Dynamo's guards and the plan's assumptions as
/// asserts (each a define-fun, so `verifuse shapes --redundant` names them), output sizes as
/// define-funs, check-sat, get-value of the inputs.
std::string shapeProgram(const ShapeGuardReport& r, const std::vector<std::pair<std::string, std::string>>& hyps,
                         const ir::Graph& plan) {
  std::string out = "; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions\n";
  out += "(set-option :produce-models true)\n";
  for (const SizeSymbol& s : r.symbols) {
    out += "(declare-const " + s.name + " Int)\n";
    if (s.example) out += "(set-info :example-" + s.name + " " + std::to_string(*s.example) + ")\n";
  }
  for (size_t i = 0; i < hyps.size(); ++i) {
    out += "; " + hyps[i].second + "\n";
    out += "(define-fun guard_" + std::to_string(i) + " () Bool " + hyps[i].first + ")\n";
    out += "(assert guard_" + std::to_string(i) + ")\n";
  }
  for (size_t i = 0; i < r.assumptions.size(); ++i) {
    const Assumption& a = r.assumptions[i];
    if (a.smt.empty() || a.smt == "false") continue;
    std::string verdict = a.entailed ? "entailed"
                                     : std::string("NOT entailed by Dynamo's guards: ") +
                                           (a.how.find("implied by the other") != std::string::npos
                                                ? "implied by the other added guards"
                                                : "runtime guard added");
    out += "; assumption " + a.kind + " (" + nodesText(a.nodes) + "): " + verdict + " [" + a.how + "]\n";
    out += "(define-fun assume_" + std::to_string(i) + " () Bool " + a.smt + ")\n";
    out += "(assert assume_" + std::to_string(i) + ")\n";
  }
  for (size_t k = 0; k < plan.outputs().size(); ++k) {
    const ir::Arg& o = plan.outputs()[k];
    if (!o.isValue()) continue;
    const ir::Value& v = plan.value(static_cast<ir::ValueId>(o.i));
    if (v.type != ir::ValueType::Tensor || !v.hasShape) continue;
    for (size_t d = 0; d < v.shape.size(); ++d) {
      SymExpr e = v.dim(d);
      if (!e.valid()) continue;
      out += "(define-fun output" + std::to_string(k) + "_size" + std::to_string(d) + " () Int " + toSmt(e) + ")\n";
    }
  }
  out += "(check-sat)\n";
  if (!r.symbols.empty()) {
    std::vector<std::string> names;
    for (const SizeSymbol& s : r.symbols) names.push_back(s.name);
    std::sort(names.begin(), names.end());
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : " ") + n;
    out += "(get-value (" + list + "))\n";
  }
  return out;
}

class Analyzer {
 public:
  Analyzer(const ir::Graph& plan, const std::vector<int32_t>& inputArgIndex, const DynamoFacts& facts,
           ShapeGuardReport& r)
      : plan_(plan), inputArgIndex_(inputArgIndex), facts_(facts), r_(r) {}

  void run() {
    r_.symbols = facts_.symbols;
    r_.nonSizeGuards = facts_.nonSizeGuards;
    std::map<std::string, int64_t> examples;
    for (const SizeSymbol& s : facts_.symbols) {
      problem_.declareInt(s.name, s.example);  // declaration order = the program's
      if (s.example) examples[s.name] = *s.example;
      known_.insert(s.name);
    }
    // Hypotheses: Dynamo's facts.
    for (const DynamoFact& f : facts_.facts) {
      if (!f.condition.valid() || !f.condition.isCondition()) {
        r_.guards.push_back({f.text, f.source, f.skipped.empty() ? "not a condition over sizes" : f.skipped});
        continue;
      }
      const std::string text = stripParens(f.condition.toString());
      r_.guards.push_back({text, f.source, ""});
      hyps_.push_back(termOf(problem_, f.condition));
      hypText_.push_back({toSmt(f.condition), f.source + ": " + text});
    }
    r_.assumptions = deriveAssumptions(plan_, examples, &r_.staticAssumptions);
    const std::vector<SymbolBinding> bindings = bindingsOf(plan_, inputArgIndex_);
    std::set<std::string> bound;
    for (const SymbolBinding& b : bindings) bound.insert(b.name);

    for (Assumption& a : r_.assumptions) {
      const auto t0 = Clock::now();
      decide(a);
      a.seconds = secondsSince(t0);
      if (a.entailed) continue;
      AddedGuard g;
      g.text = a.text;
      g.kind = a.kind;
      g.nodes = a.nodes;
      g.condition = a.condition;
      g.smt = a.smt;
      std::vector<std::string> unbound;
      for (const std::string& s : a.condition.symbols()) {
        if (!bound.count(s)) unbound.push_back(s);
      }
      if (unbound.empty()) {
        g.checkedAtRuntime = true;
      } else {
        std::string list;
        for (const std::string& s : unbound) list += (list.empty() ? "" : ", ") + s;
        a.how += "; no runtime check possible: no input size binds " + list;
      }
      r_.addedGuards.push_back(std::move(g));
    }
    minimize();

    std::vector<GuardCheck::Guard> checks;
    for (const AddedGuard& g : r_.addedGuards) {
      if (g.checkedAtRuntime) checks.push_back({g.condition, "shape guard failed: " + g.text + " (" + g.kind + ")"});
    }
    if (!checks.empty()) r_.check = std::make_shared<GuardCheck>(bindings, std::move(checks));
    r_.smt2 = shapeProgram(r_, hypText_, plan_);
  }

 private:
  void decide(Assumption& a) {
    if (isStatic(a)) {
      a.smt = "false";
      a.entailed = false;
      a.how = "static assumption fails";
      return;
    }
    a.smt = toSmt(a.condition);
    if (structurallyTrue(a)) {
      a.entailed = true;
      a.how = "structural";
      return;
    }
    std::vector<Term> asserts = hyps_;
    asserts.push_back(problem_.notOf(termOf(problem_, a.condition)));
    shapes::ShapeOptions options;
    options.timeout_ms = facts_.timeoutMs;
    auto rep = shapes::analyzeShapeProblem(problem_, asserts, options);
    ++r_.solverCalls;
    if (!rep.isOk()) {
      a.entailed = false;
      a.how = "unknown: " + rep.status().toString();
      return;
    }
    switch (rep->verdict) {
      case shapes::Verdict::kUnsat:
        a.entailed = true;
        a.how = "verifuse-shapes:" + rep->decided_by;
        break;
      case shapes::Verdict::kSat:
        a.entailed = false;
        a.how = "verifuse-shapes:" + rep->decided_by + " (counterexample)";
        for (const shapes::ModelValue& m : rep->model) {
          if (!known_.count(m.name)) continue;
          try {
            size_t pos = 0;
            int64_t v = std::stoll(m.value, &pos);
            if (pos == m.value.size()) a.counterexample.emplace_back(m.name, v);
          } catch (...) {
          }
        }
        break;
      case shapes::Verdict::kUnknown:
        a.entailed = false;
        a.how = "unknown: " + rep->note;
        break;
    }
  }

  /// An assumption that does not follow from Dynamo's guards may still follow from the guards
  /// verifuse adds for other assumptions (x >= 1 makes (x-1)//2 + 1 >= 1 hold): prefix redundancy
  /// over guards + added guards, simplest first, finds those; they need no check of their own.
  void minimize() {
    std::vector<AddedGuard*> cands;
    for (AddedGuard& g : r_.addedGuards) {
      if (g.checkedAtRuntime) cands.push_back(&g);
    }
    auto bySmtLength = [](const AddedGuard* a, const AddedGuard* b) { return a->smt.size() < b->smt.size(); };
    if (cands.size() >= 2) {
      std::stable_sort(cands.begin(), cands.end(), bySmtLength);
      std::vector<Term> asserts = hyps_;
      for (const AddedGuard* g : cands) asserts.push_back(termOf(problem_, g->condition));
      shapes::ShapeOptions options;
      options.redundant = true;
      options.mode = shapes::RedundancyMode::kPrefix;
      options.timeout_ms = facts_.timeoutMs;
      auto rep = shapes::analyzeShapeProblem(problem_, asserts, options);
      ++r_.solverCalls;
      if (rep.isOk()) {
        for (const shapes::RedundantAssert& red : rep->redundant) {
          if (red.index < hyps_.size()) continue;
          AddedGuard* g = cands[red.index - hyps_.size()];
          g->coveredByOtherAddedGuards = true;
          g->checkedAtRuntime = false;
          for (Assumption& a : r_.assumptions) {
            if (a.smt == g->smt) a.how += "; implied by the other added guards";
          }
        }
      }
    }
    std::stable_sort(r_.addedGuards.begin(), r_.addedGuards.end(), [](const AddedGuard& a, const AddedGuard& b) {
      if (a.coveredByOtherAddedGuards != b.coveredByOtherAddedGuards) return !a.coveredByOtherAddedGuards;
      return a.smt.size() < b.smt.size();
    });
  }

  const ir::Graph& plan_;
  const std::vector<int32_t>& inputArgIndex_;
  const DynamoFacts& facts_;
  ShapeGuardReport& r_;
  shapes::ShapeProblem problem_;
  std::set<std::string> known_;
  std::vector<Term> hyps_;
  std::vector<std::pair<std::string, std::string>> hypText_;  // (smt, label)
};

}  // namespace

std::string toSmt(const ir::SymExpr& e) {
  if (!e.valid()) return "?";
  SmtText b;
  return lowerSmt(e, b);
}

ShapeGuardReport analyzeShapeGuards(const ir::Graph& plan, const std::vector<int32_t>& inputArgIndex,
                                    const DynamoFacts& facts) {
  const auto t0 = Clock::now();
  ShapeGuardReport r;
  r.analyzed = true;
  try {
    Analyzer(plan, inputArgIndex, facts, r).run();
  } catch (const std::exception& e) {
    ShapeGuardReport failed;
    failed.analyzed = true;
    failed.error = std::string("shape analysis failed: ") + e.what();
    r = std::move(failed);
  }
  r.seconds = secondsSince(t0);
  return r;
}

}  // namespace verifuse::shape_guards
