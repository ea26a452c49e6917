// Verdict names and printing.
#include "verifuse/verify/verdict.h"

#include <cstdio>

namespace verifuse::verify {

const char* verdictKindName(VerdictKind kind) {
  switch (kind) {
    case VerdictKind::Proved: return "Proved";
    case VerdictKind::Refuted: return "Refuted";
    case VerdictKind::Unknown: return "Unknown";
    case VerdictKind::Timeout: return "Timeout";
    case VerdictKind::Unsupported: return "Unsupported";
  }
  return "Unknown";
}

const char* messageClassText(MessageClass cls) {
  switch (cls) {
    case MessageClass::None: return "";
    case MessageClass::ValueMismatch: return "Value mismatch";
    case MessageClass::TargetLessDefined: return "Target is less defined than source";
    case MessageClass::PreconditionAlwaysFalse: return "Precondition is always false";
    case MessageClass::SolverTimeout: return "Solver timed out";
    case MessageClass::SolverUnknown: return "Solver returned unknown";
    case MessageClass::NotEncodable: return "Not encodable";
  }
  return "";
}

std::string Counterexample::toString() const {
  std::string out;
  for (const auto& [name, value] : values) out += "  " + name + " = " + value + "\n";
  if (!goal.empty()) {
    out += "  goal " + goal + ": source = " + sourceValue + ", target = " + targetValue + "\n";
  }
  return out;
}

std::string Verdict::summary() const {
  std::string out = verdictKindName(kind);
  if (messageClass != MessageClass::None) out += std::string(" (") + messageClassText(messageClass) + ")";
  if (!detail.empty()) out += ": " + detail;
  char buf[48];
  std::snprintf(buf, sizeof buf, " [%.3f s%s]", seconds, fromCache ? ", cached" : "");
  return out + buf;
}

}  // namespace verifuse::verify
