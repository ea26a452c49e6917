// Checking a list of rule proofs (catalog.h). The proofs themselves live with their rules in
// backend/src/rules/; this file holds no obligation.
#include "verifuse/verify/catalog.h"

#include <set>

namespace verifuse::verify {

bool isKebabCase(const std::string& name) {
  if (name.empty() || name.front() == '-' || name.back() == '-') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return name.find("--") == std::string::npos;
}

Status checkRuleProofs(const std::vector<RuleProof>& proofs) {
  std::set<std::string> ids;
  for (const RuleProof& p : proofs) {
    const std::string who = "rule '" + p.ruleId + "'";
    if (!isKebabCase(p.ruleId)) return invalidArgument(who + ": the id is not kebab-case");
    if (!ids.insert(p.ruleId).second) return invalidArgument(who + " is declared twice");
    if (p.math.empty()) return invalidArgument(who + " has no math");
    if (!p.build) return invalidArgument(who + " has no obligation");
    if (p.mutants.empty()) return invalidArgument(who + " has no mutant (a proof nothing can refute is not checked)");
    std::set<std::string> names;
    for (const Mutant& m : p.mutants) {
      if (!isKebabCase(m.name)) return invalidArgument(who + ": mutant '" + m.name + "' is not kebab-case");
      if (!names.insert(m.name).second) return invalidArgument(who + ": mutant '" + m.name + "' declared twice");
      if (m.description.empty()) return invalidArgument(who + ": mutant '" + m.name + "' has no description");
      if (!m.build) return invalidArgument(who + ": mutant '" + m.name + "' has no obligation");
    }
  }
  return Status::ok();
}

}  // namespace verifuse::verify
