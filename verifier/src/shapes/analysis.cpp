// The shape-analysis pipeline: parse -> propagate (own reasoning) -> candidate model -> Z3 on the
// residual -> redundancy. See README.md in this folder.
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <unordered_set>

#include "parser.h"
#include "problem_internal.h"
#include "reasoning.h"
#include "verifuse/shapes/shape_analysis.h"
#include "verifuse/shapes/shape_problem.h"
#include "z3_bridge.h"

namespace verifuse::shapes {

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kSat: return "sat";
    case Verdict::kUnsat: return "unsat";
    case Verdict::kUnknown: return "unknown";
  }
  return "unknown";
}

const char* redundancyModeName(RedundancyMode m) { return m == RedundancyMode::kPrefix ? "prefix" : "others"; }

std::string z3Version() { return z3VersionString(); }

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class Analysis {
 public:
  Analysis(ParsedProgram& prog, const ShapeOptions& opt, ShapeReport& rep)
      : prog_(prog), T_(prog.terms), opt_(opt), rep_(rep), z3_(prog.terms) {
    z3_deadline_ = Clock::now() + std::chrono::milliseconds(opt.timeout_ms);
  }

  void run() {
    auto t0 = Clock::now();
    size_t n = prog_.asserts.size();
    prefix_true_.assign(n, false);
    bool ok = true;
    if (opt_.use_reasoning) {
      try {
        ok = reason();
      } catch (const ArithOverflow&) {
        reasoning_failed_ = true;
      }
    }
    rep_.reasoning_s = secondsSince(t0);
    if (!ok) {
      rep_.verdict = Verdict::kUnsat;
      rep_.decided_by = "reasoning";
    } else if (!opt_.use_reasoning || reasoning_failed_) {
      solveFull();
    } else {
      solve();
    }
    if (opt_.redundant) {
      auto tr = Clock::now();
      redundancy();
      rep_.redundancy_s = secondsSince(tr);
    }
  }

 private:
  int remainingMs() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(z3_deadline_ - Clock::now()).count();
    return static_cast<int>(std::max<int64_t>(0, left));
  }

  SolveResult timedCheck(const std::vector<TermId>& cs, std::vector<std::optional<Rat>>* model, std::string* why) {
    auto t = Clock::now();
    ++rep_.solver_calls;
    SolveResult r = z3_.check(cs, std::max(1, remainingMs()), model, why);
    rep_.solver_s += secondsSince(t);
    return r;
  }

  /// Propagation passes. \returns false when the asserts are contradictory.
  bool reason() {
    size_t n = prog_.asserts.size();
    Reasoner& R = R_;
    // Pass 1, in order: what the asserts before each one decide (prefix implication).
    for (size_t i = 0; i < n; ++i) {
      TermId a = R.norm(prog_.asserts[i].term);
      if (T_.isTrue(a)) {
        prefix_true_[i] = true;
        continue;
      }
      if (T_.isFalse(a) || !R.learn(a)) return false;
    }
    // Fixpoint passes over the rest with everything learned (facts off: no self-justification).
    R.setFactsEnabled(false);
    for (int pass = 0; pass < 4; ++pass) {
      uint64_t gen = R.generation();
      for (size_t i = 0; i < n; ++i) {
        if (prefix_true_[i]) continue;
        TermId a = R.norm(prog_.asserts[i].term);
        if (T_.isFalse(a) || !R.learn(a)) return false;
      }
      if (R.generation() == gen) break;
    }
    // Residual: what the knowledge does not decide, deduplicated.
    std::unordered_set<TermId> seen;
    size_t decided = 0;
    for (size_t i = 0; i < n; ++i) {
      TermId a = R.norm(prog_.asserts[i].term);
      if (T_.isFalse(a)) return false;
      if (T_.isTrue(a)) {
        ++decided;
        continue;
      }
      if (seen.insert(a).second) residual_.push_back(a);
    }
    rep_.decided_without_solver = decided;
    rep_.residual_asserts = residual_.size();
    rep_.substituted_vars = R.substitutions().size();
    return true;
  }

  /// Values for the free (not substituted) variables: \p fixed first, then hints, then bounds.
  std::vector<std::optional<Rat>> chooseFree(const std::vector<std::optional<Rat>>& fixed, bool hints) {
    const auto& vars = T_.vars();
    std::vector<std::optional<Rat>> v(vars.size());
    for (size_t i = 0; i < vars.size(); ++i) {
      if (vars[i].internal || R_.substitutions().count(static_cast<uint32_t>(i))) continue;
      if (i < fixed.size() && fixed[i]) {
        v[i] = fixed[i];
        continue;
      }
      if (vars[i].sort == Sort::kBool) {
        v[i] = Rat(1);
        continue;
      }
      Interval b = R_.boundsOf(vars[i].term);
      std::optional<Rat> pick;
      auto h = prog_.hints.find(vars[i].name);
      if (hints && h != prog_.hints.end() && b.contains(h->second) && !R_.isExcluded(vars[i].term, h->second) &&
          (vars[i].sort == Sort::kReal || h->second.isInt())) {
        pick = h->second;
      }
      if (!pick) {
        Rat x = b.lo ? *b.lo : (b.hi && *b.hi < Rat(1) ? *b.hi : Rat(1));
        for (int k = 0; k < 64 && R_.isExcluded(vars[i].term, x); ++k) x = x + Rat(1);
        pick = x;
      }
      v[i] = pick;
    }
    // Substituted variables: evaluate their canonical definitions over the free values.
    Evaluator ev(T_, v);
    std::vector<std::optional<Rat>> full = v;
    for (auto& [var, rhs] : R_.substitutions()) {
      full[var] = ev.eval(R_.norm(vars[var].term));
    }
    return full;
  }

  bool checkModel(const std::vector<std::optional<Rat>>& values) {
    Evaluator ev(T_, values);
    for (auto& a : prog_.asserts) {
      auto v = ev.eval(a.term);
      if (!v || v->isZero()) return false;
    }
    return true;
  }

  void setModel(const std::vector<std::optional<Rat>>& values, bool checked) {
    rep_.model.clear();
    const auto& vars = T_.vars();
    for (size_t i = 0; i < vars.size(); ++i) {
      if (vars[i].internal) continue;
      ModelValue mv;
      mv.name = vars[i].name;
      mv.sort = sortName(vars[i].sort);
      if (i < values.size() && values[i]) {
        mv.value = vars[i].sort == Sort::kBool ? (values[i]->isZero() ? "false" : "true") : values[i]->toString();
      } else {
        mv.value = "?";
      }
      rep_.model.push_back(std::move(mv));
    }
    rep_.model_checked = checked;
  }

  void solve() {
    // 1. Candidate from the knowledge base (plus the recorded example values).
    for (bool hints : {false, true}) {
      if (hints && !opt_.use_hints) continue;
      auto cand = chooseFree({}, hints);
      if (checkModel(cand)) {
        rep_.verdict = Verdict::kSat;
        rep_.decided_by = hints ? "reasoning+hints" : "reasoning";
        setModel(cand, true);
        return;
      }
    }
    // 2. Z3 on the residual problem plus the learned bounds.
    std::vector<TermId> cs = residual_;
    for (TermId b : R_.boundConstraints()) cs.push_back(b);
    std::vector<std::optional<Rat>> zm;
    std::string why;
    SolveResult r = timedCheck(cs, &zm, &why);
    if (r == SolveResult::kUnsat) {
      rep_.verdict = Verdict::kUnsat;
      rep_.decided_by = "z3-residual";
      return;
    }
    if (r == SolveResult::kSat) {
      auto cand = chooseFree(zm, opt_.use_hints);
      bool checked = checkModel(cand);
      rep_.verdict = Verdict::kSat;
      rep_.decided_by = "z3-residual";
      setModel(cand, checked);
      if (checked) return;
      // Z3's model leaves something undetermined (e.g. division by zero): ask for the full model.
    }
    solveFull(why);
  }

  void solveFull(const std::string& prior = "") {
    if (remainingMs() <= 0) {
      if (rep_.verdict != Verdict::kSat) {
        rep_.verdict = Verdict::kUnknown;
        rep_.note = prior.empty() ? "solver budget exhausted" : prior;
      }
      return;
    }
    std::vector<TermId> cs;
    for (auto& a : prog_.asserts) cs.push_back(a.term);
    std::vector<std::optional<Rat>> zm;
    std::string why;
    SolveResult r = timedCheck(cs, &zm, &why);
    if (r == SolveResult::kUnsat) {
      rep_.verdict = Verdict::kUnsat;
      rep_.decided_by = "z3-full";
    } else if (r == SolveResult::kSat) {
      // Variables absent from the asserts get any value.
      const auto& vars = T_.vars();
      zm.resize(vars.size());
      for (size_t i = 0; i < vars.size(); ++i) {
        if (!zm[i] && !vars[i].internal) zm[i] = Rat(vars[i].sort == Sort::kBool ? 1 : 1);
      }
      bool checked = checkModel(zm);
      if (!(rep_.verdict == Verdict::kSat && rep_.model_checked)) {
        rep_.verdict = Verdict::kSat;
        rep_.decided_by = "z3-full";
        setModel(zm, checked);
      }
    } else if (rep_.verdict != Verdict::kSat) {
      rep_.verdict = Verdict::kUnknown;
      rep_.note = why;
    }
  }

  void markRedundant(size_t i, const char* by) {
    const AssertInfo& a = prog_.asserts[i];
    rep_.redundant.push_back(RedundantAssert{i, a.line, a.text, a.definition, by});
  }

  void redundancy() {
    size_t n = prog_.asserts.size();
    rep_.redundancy_computed = true;
    rep_.mode = opt_.mode;
    std::vector<int> state(n, 0);  // 0 undecided, 1 by reasoning, 2 by z3
    if (opt_.use_reasoning && !reasoning_failed_) {
      for (size_t i = 0; i < n; ++i) {
        if (prefix_true_[i]) state[i] = 1;
      }
      if (opt_.mode == RedundancyMode::kOthers) {
        // Implied by the asserts after it (a subset of the others): the same pass, reversed.
        try {
          Reasoner back(T_);
          for (size_t j = n; j-- > 0;) {
            TermId a = back.norm(prog_.asserts[j].term);
            if (T_.isTrue(a)) {
              if (state[j] == 0) state[j] = 1;
              continue;
            }
            if (T_.isFalse(a) || !back.learn(a)) break;
          }
        } catch (const ArithOverflow&) {
        }
      }
    }
    // Z3 for the rest, within the budget; unknown counts as "not redundant".
    auto queryOne = [&](auto&& ask) {
      int left = remainingMs();
      if (left <= 0) return SolveResult::kUnknown;
      auto t = Clock::now();
      ++rep_.redundancy_solver_queries;
      SolveResult r = ask(std::min(left, opt_.query_timeout_ms));
      rep_.solver_s += secondsSince(t);
      return r;
    };
    if (opt_.mode == RedundancyMode::kPrefix) {
      for (size_t i = 0; i < n; ++i) {
        if (state[i] == 0 && i > 0) {
          SolveResult r = queryOne([&](int ms) { return z3_.implied(prog_.asserts[i].term, ms); });
          if (r == SolveResult::kUnsat) state[i] = 2;
          if (r == SolveResult::kUnknown) ++rep_.redundancy_unknown;
        }
        z3_.add(prog_.asserts[i].term);
      }
    } else {
      std::vector<TermId> all;
      for (auto& a : prog_.asserts) all.push_back(a.term);
      bool tracked = false;
      for (size_t i = 0; i < n; ++i) {
        if (state[i] != 0 || n < 2) continue;
        if (!tracked) {
          z3_.track(all);
          tracked = true;
        }
        SolveResult r = queryOne([&](int ms) { return z3_.impliedByOthers(i, ms); });
        if (r == SolveResult::kUnsat) state[i] = 2;
        if (r == SolveResult::kUnknown) ++rep_.redundancy_unknown;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      if (state[i] == 1) ++rep_.redundancy_by_reasoning;
      if (state[i] != 0) markRedundant(i, state[i] == 1 ? "reasoning" : "z3");
    }
  }

  ParsedProgram& prog_;
  TermTable& T_;
  const ShapeOptions& opt_;
  ShapeReport& rep_;
  Z3Session z3_;
  Reasoner R_{prog_.terms};
  Clock::time_point z3_deadline_;
  std::vector<bool> prefix_true_;
  std::vector<TermId> residual_;
  bool reasoning_failed_ = false;
};

/// Runs \p fn on a thread with a large stack: terms can nest thousands deep.
void runWithBigStack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, static_cast<size_t>(1) << 30);
  pthread_t th;
  auto* heap = new std::function<void()>(fn);
  auto tramp = [](void* p) -> void* {
    (*static_cast<std::function<void()>*>(p))();
    return nullptr;
  };
  if (pthread_create(&th, &attr, tramp, heap) != 0) {
    pthread_attr_destroy(&attr);
    fn();  // fall back to the caller's stack
  } else {
    pthread_join(th, nullptr);
    pthread_attr_destroy(&attr);
  }
  delete heap;
}

/// Runs \p load (which fills the program, or returns an error) and the analysis on a big stack;
/// no exception escapes.
StatusOr<ShapeReport> analyzeLoaded(const std::function<Status(ParsedProgram*)>& load, const ShapeOptions& options) {
  Status status;
  ShapeReport report;
  runWithBigStack([&] {
    try {
      auto t0 = Clock::now();
      ParsedProgram prog;
      status = load(&prog);
      report.parse_s = secondsSince(t0);
      if (!status.isOk()) return;
      report.num_asserts = prog.asserts.size();
      for (auto& v : prog.terms.vars()) report.num_vars += v.internal ? 0 : 1;
      Analysis(prog, options, report).run();
      report.total_s = secondsSince(t0);
    } catch (const std::bad_alloc&) {
      status = internalError("out of memory in shape analysis");
    } catch (const std::exception& e) {
      status = internalError(std::string("shape analysis failed: ") + e.what());
    } catch (...) {
      status = internalError("shape analysis failed");
    }
  });
  if (!status.isOk()) return status;
  return report;
}

}  // namespace

StatusOr<ShapeReport> analyzeShapeProgram(std::string_view text, const ShapeOptions& options) {
  return analyzeLoaded(
      [&](ParsedProgram* prog) -> Status {
        auto parsed = parseSmtLib(text);
        if (!parsed.isOk()) return parsed.status();
        *prog = std::move(parsed).value();
        return Status::ok();
      },
      options);
}

StatusOr<ShapeReport> analyzeShapeProblem(const ShapeProblem& problem, const std::vector<ShapeProblem::Term>& asserts,
                                          const ShapeOptions& options) {
  return analyzeLoaded([&](ParsedProgram* prog) { return loadProblem(problem, asserts, prog); }, options);
}

namespace {
std::string jsonStr(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}
std::string num(double d) {
  char buf[32];
  snprintf(buf, sizeof buf, "%.6f", d);
  return buf;
}
}  // namespace

std::string toJson(const ShapeReport& r, std::string_view file) {
  std::string o = "{";
  if (!file.empty()) o += "\"file\": " + jsonStr(file) + ", ";
  o += "\"verdict\": " + jsonStr(verdictName(r.verdict));
  o += ", \"decided_by\": " + jsonStr(r.decided_by);
  if (!r.note.empty()) o += ", \"note\": " + jsonStr(r.note);
  o += ", \"model\": {";
  bool first = true;
  if (r.verdict == Verdict::kSat) {
    for (auto& m : r.model) {
      if (!first) o += ", ";
      first = false;
      bool plain = m.sort == "Bool" || (m.value.find('/') == std::string::npos && m.value != "?");
      o += jsonStr(m.name) + ": " + (plain ? m.value : jsonStr(m.value));
    }
  }
  o += "}, \"model_checked\": " + std::string(r.model_checked ? "true" : "false");
  o += ", \"stats\": {\"asserts\": " + std::to_string(r.num_asserts) + ", \"vars\": " + std::to_string(r.num_vars) +
       ", \"substituted_vars\": " + std::to_string(r.substituted_vars) +
       ", \"decided_without_solver\": " + std::to_string(r.decided_without_solver) +
       ", \"residual_asserts\": " + std::to_string(r.residual_asserts) + "}";
  o += ", \"times\": {\"total_s\": " + num(r.total_s) + ", \"parse_s\": " + num(r.parse_s) +
       ", \"reasoning_s\": " + num(r.reasoning_s) + ", \"solver_s\": " + num(r.solver_s) +
       ", \"redundancy_s\": " + num(r.redundancy_s) + ", \"solver_calls\": " + std::to_string(r.solver_calls) + "}";
  if (r.redundancy_computed) {
    o += ", \"redundancy\": {\"mode\": " + jsonStr(redundancyModeName(r.mode)) +
         ", \"count\": " + std::to_string(r.redundant.size()) +
         ", \"by_reasoning\": " + std::to_string(r.redundancy_by_reasoning) +
         ", \"solver_queries\": " + std::to_string(r.redundancy_solver_queries) +
         ", \"unknown\": " + std::to_string(r.redundancy_unknown) + ", \"asserts\": [";
    for (size_t i = 0; i < r.redundant.size(); ++i) {
      const auto& a = r.redundant[i];
      if (i) o += ", ";
      o += "{\"index\": " + std::to_string(a.index) + ", \"line\": " + std::to_string(a.line) +
           ", \"text\": " + jsonStr(a.text) + ", \"definition\": " + jsonStr(a.definition) +
           ", \"by\": " + jsonStr(a.by) + "}";
    }
    o += "]}";
  }
  o += "}";
  return o;
}

}  // namespace verifuse::shapes
