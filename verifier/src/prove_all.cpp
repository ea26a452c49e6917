// proveAll: prove every rule (symbolically and by bounded instantiation), refute every mutant,
// validate the dot axioms on small shapes; JSON and text reports.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "verifuse/verify/catalog.h"
#include "verifuse/verify/proof_cache.h"

namespace verifuse::verify {

namespace {

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}

std::string str(const std::string& s) { return "\"" + jsonEscape(s) + "\""; }

}  // namespace

bool RuleResult::ok() const {
  if (!verdict.proved()) return false;
  for (const InstanceResult& i : bounded) {
    if (!i.verdict.proved()) return false;
  }
  for (const MutantResult& m : mutants) {
    if (!m.killed()) return false;
  }
  return true;
}

bool ProveReport::ok() const {
  for (const AxiomResult& a : axioms) {
    if (!a.verdict.proved()) return false;
  }
  for (const RuleResult& r : rules) {
    if (!r.ok()) return false;
  }
  return !rules.empty();
}

RuleResult proveRule(const RuleProof& rule, const ProveAllOptions& options) {
  auto ruleStart = std::chrono::steady_clock::now();
  ProofCache::Batch batch(options.prove.cache);  // one durable cache write per rule
  const sem::DotModel symbolic = sem::DotModel::symbolic();
  RuleResult result;
  result.ruleId = rule.ruleId;
  bool refutedOnInstance = false;
  if (rule.usesDot) {
    // Concrete shapes first: they are quantifier-free and decide quickly, and a wrong rule is
    // refuted there with a real witness, where the quantified proof would only time out.
    for (int k = 1; k <= options.maxK; ++k) {
      sem::DotModel m = sem::DotModel::explicitSum(k);
      result.bounded.push_back({m.describe(), prove(rule.build(m), options.prove)});
      if (result.bounded.back().verdict.kind == VerdictKind::Refuted) {
        result.verdict = result.bounded.back().verdict;
        refutedOnInstance = true;
        break;
      }
    }
  }
  if (!refutedOnInstance) result.verdict = prove(rule.build(symbolic), options.prove);
  const sem::DotModel mutantModel =
      rule.usesDot && options.mutantK > 0 ? sem::DotModel::explicitSum(options.mutantK) : symbolic;
  for (const Mutant& mutant : rule.mutants) {
    result.mutants.push_back({mutant.name, mutant.description, prove(mutant.build(mutantModel), options.prove)});
  }
  result.seconds = since(ruleStart);
  return result;
}

ProveReport proveAll(const std::vector<RuleProof>& catalogue, const ProveAllOptions& options) {
  auto start = std::chrono::steady_clock::now();
  ProofCache::Batch batch(options.prove.cache);  // one durable cache write for the whole list
  ProveReport report;
  report.solverVersion = solverVersion();
  if (options.checkAxioms) {
    for (size_t i = 0; i < sem::dotAxioms().size(); ++i) {
      for (int k = 1; k <= options.maxK; ++k) {
        report.axioms.push_back({sem::dotAxiomNames()[i], "K=" + std::to_string(k),
                                 prove(sem::dotAxiomInstance(i, k), options.prove)});
      }
    }
  }
  for (const RuleProof& rule : catalogue) report.rules.push_back(proveRule(rule, options));
  report.seconds = since(start);
  return report;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string verdictToJson(const Verdict& v) {
  std::ostringstream os;
  os << "{\"verdict\":" << str(verdictKindName(v.kind)) << ",\"message\":" << str(messageClassText(v.messageClass))
     << ",\"detail\":" << str(v.detail) << ",\"seconds\":" << num(v.seconds)
     << ",\"cached\":" << (v.fromCache ? "true" : "false");
  if (!v.counterexample.empty()) {
    const Counterexample& c = v.counterexample;
    os << ",\"counterexample\":{\"values\":{";
    for (size_t i = 0; i < c.values.size(); ++i) {
      os << (i ? "," : "") << str(c.values[i].first) << ":" << str(c.values[i].second);
    }
    os << "},\"goal\":" << str(c.goal) << ",\"source\":" << str(c.sourceValue) << ",\"target\":" << str(c.targetValue)
       << "}";
  }
  os << "}";
  return os.str();
}

std::string ProveReport::toJson() const {
  std::ostringstream os;
  os << "{\"ok\":" << (ok() ? "true" : "false") << ",\"solver\":" << str("z3 " + solverVersion)
     << ",\"seconds\":" << num(seconds) << ",\"axioms\":[";
  for (size_t i = 0; i < axioms.size(); ++i) {
    os << (i ? "," : "") << "{\"axiom\":" << str(axioms[i].axiom) << ",\"model\":" << str(axioms[i].model)
       << ",\"result\":" << verdictToJson(axioms[i].verdict) << "}";
  }
  os << "],\"rules\":[";
  for (size_t i = 0; i < rules.size(); ++i) {
    const RuleResult& r = rules[i];
    os << (i ? "," : "") << "{\"rule\":" << str(r.ruleId) << ",\"ok\":" << (r.ok() ? "true" : "false")
       << ",\"verdict\":" << str(verdictKindName(r.verdict.kind)) << ",\"seconds\":" << num(r.seconds)
       << ",\"proof\":" << verdictToJson(r.verdict) << ",\"bounded\":[";
    for (size_t j = 0; j < r.bounded.size(); ++j) {
      os << (j ? "," : "") << "{\"model\":" << str(r.bounded[j].model)
         << ",\"result\":" << verdictToJson(r.bounded[j].verdict) << "}";
    }
    os << "],\"mutants\":[";
    for (size_t j = 0; j < r.mutants.size(); ++j) {
      const MutantResult& m = r.mutants[j];
      os << (j ? "," : "") << "{\"name\":" << str(m.name) << ",\"description\":" << str(m.description)
         << ",\"killed\":" << (m.killed() ? "true" : "false") << ",\"result\":" << verdictToJson(m.verdict) << "}";
    }
    os << "]}";
  }
  os << "]}";
  return os.str();
}

std::string ProveReport::toText() const {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-28s %-10s %8s  %s\n", "rule", "verdict", "seconds", "bounded / mutants");
  os << line;
  for (const RuleResult& r : rules) {
    int boundedOk = 0, killed = 0;
    for (const auto& b : r.bounded) boundedOk += b.verdict.proved();
    for (const auto& m : r.mutants) killed += m.killed();
    std::snprintf(line, sizeof line, "%-28s %-10s %8.3f  K %d/%zu, mutants refuted %d/%zu%s\n", r.ruleId.c_str(),
                  verdictKindName(r.verdict.kind), r.seconds, boundedOk, r.bounded.size(), killed,
                  r.mutants.size(), r.ok() ? "" : "  <-- FAILED");
    os << line;
    for (const auto& m : r.mutants) {
      if (!m.killed()) os << "    mutant " << m.name << ": " << m.verdict.summary() << "\n";
    }
  }
  int axiomsOk = 0;
  for (const auto& a : axioms) axiomsOk += a.verdict.proved();
  std::snprintf(line, sizeof line, "axiom instances proved: %d/%zu; total %.3f s (z3 %s)\n", axiomsOk, axioms.size(),
                seconds, solverVersion.c_str());
  os << line;
  return os.str();
}

}  // namespace verifuse::verify
