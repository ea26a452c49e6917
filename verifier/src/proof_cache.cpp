// Proof cache: one text file per obligation, atomic writes, checksummed entries.
#include "verifuse/verify/proof_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "verifuse/verify/prover.h"

namespace verifuse::verify {

namespace {

constexpr const char* kMagic = "verifuse-proof v1";

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

bool unescape(const std::string& s, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i >= s.size()) return false;
    if (s[i] == 'n') out += '\n';
    else if (s[i] == 't') out += '\t';
    else if (s[i] == '\\') out += '\\';
    else return false;
  }
  return true;
}

const char* messageClassId(MessageClass c) {
  switch (c) {
    case MessageClass::None: return "None";
    case MessageClass::ValueMismatch: return "ValueMismatch";
    case MessageClass::TargetLessDefined: return "TargetLessDefined";
    case MessageClass::PreconditionAlwaysFalse: return "PreconditionAlwaysFalse";
    case MessageClass::SolverTimeout: return "SolverTimeout";
    case MessageClass::SolverUnknown: return "SolverUnknown";
    case MessageClass::NotEncodable: return "NotEncodable";
  }
  return "None";
}

bool parseMessageClass(const std::string& s, MessageClass& out) {
  for (MessageClass c : {MessageClass::None, MessageClass::ValueMismatch, MessageClass::TargetLessDefined,
                         MessageClass::PreconditionAlwaysFalse, MessageClass::SolverTimeout,
                         MessageClass::SolverUnknown, MessageClass::NotEncodable}) {
    if (s == messageClassId(c)) {
      out = c;
      return true;
    }
  }
  return false;
}

std::string serialize(const std::string& key, const std::string& canonical, const Verdict& v) {
  std::ostringstream os;
  os << kMagic << "\n";
  os << "key\t" << key << "\n";
  os << "solver\t" << escape(solverVersion()) << "\n";
  os << "kind\t" << verdictKindName(v.kind) << "\n";
  os << "class\t" << messageClassId(v.messageClass) << "\n";
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.6f", v.seconds);
  os << "seconds\t" << secs << "\n";
  os << "detail\t" << escape(v.detail) << "\n";
  os << "goal\t" << escape(v.counterexample.goal) << "\n";
  os << "source\t" << escape(v.counterexample.sourceValue) << "\n";
  os << "target\t" << escape(v.counterexample.targetValue) << "\n";
  for (const auto& [name, value] : v.counterexample.values) {
    os << "value\t" << escape(name) << "\t" << escape(value) << "\n";
  }
  os << "canonical\t" << escape(canonical) << "\n";
  std::string body = os.str();
  return body + "end\t" + hex16(fnv1a(body)) + "\n";
}

// Returns false on any format or checksum problem.
bool parse(const std::string& text, const std::string& key, const std::string& canonical, Verdict& v) {
  size_t endPos = text.rfind("end\t");
  if (endPos == std::string::npos || (endPos > 0 && text[endPos - 1] != '\n')) return false;
  std::string body = text.substr(0, endPos);
  std::string trailer = text.substr(endPos + 4);
  if (trailer != hex16(fnv1a(body)) + "\n") return false;
  std::istringstream is(body);
  std::string line;
  if (!std::getline(is, line) || line != kMagic) return false;
  bool sawKey = false, sawKind = false, sawCanonical = false;
  v = Verdict{};
  while (std::getline(is, line)) {
    size_t tab = line.find('\t');
    if (tab == std::string::npos) return false;
    std::string field = line.substr(0, tab), rest = line.substr(tab + 1), val;
    if (field == "value") {
      size_t tab2 = rest.find('\t');
      if (tab2 == std::string::npos) return false;
      std::string n, x;
      if (!unescape(rest.substr(0, tab2), n) || !unescape(rest.substr(tab2 + 1), x)) return false;
      v.counterexample.values.emplace_back(n, x);
      continue;
    }
    if (!unescape(rest, val)) return false;
    if (field == "key") {
      if (val != key) return false;
      sawKey = true;
    } else if (field == "solver") {
      if (val != solverVersion()) return false;
    } else if (field == "kind") {
      if (val == verdictKindName(VerdictKind::Proved)) v.kind = VerdictKind::Proved;
      else if (val == verdictKindName(VerdictKind::Refuted)) v.kind = VerdictKind::Refuted;
      else return false;
      sawKind = true;
    } else if (field == "class") {
      if (!parseMessageClass(val, v.messageClass)) return false;
    } else if (field == "seconds") {
      try {
        v.seconds = std::stod(val);
      } catch (...) {
        return false;
      }
    } else if (field == "detail") {
      v.detail = val;
    } else if (field == "goal") {
      v.counterexample.goal = val;
    } else if (field == "source") {
      v.counterexample.sourceValue = val;
    } else if (field == "target") {
      v.counterexample.targetValue = val;
    } else if (field == "canonical") {
      if (val != canonical) return false;  // hash collision or stale entry: a miss
      sawCanonical = true;
    } else {
      return false;
    }
  }
  return sawKey && sawKind && sawCanonical;
}

}  // namespace

ProofCache::ProofCache(std::string dir) : dir_(std::move(dir)) {}

std::string ProofCache::keyFor(const Obligation& ob) {
  return hex16(fnv1a(ob.canonical() + '\0' + solverVersion()));
}

std::string ProofCache::pathFor(const Obligation& ob) const { return dir_ + "/" + keyFor(ob) + ".proof"; }

std::optional<Verdict> ProofCache::lookup(const Obligation& ob) {
  std::string key = keyFor(ob);
  std::string path = dir_ + "/" + key + ".proof";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.misses;
    return std::nullopt;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  Verdict v;
  bool ok = parse(buf.str(), key, ob.canonical(), v);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    ++stats_.corrupt;
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  v.fromCache = true;
  return v;
}

Status ProofCache::store(const Obligation& ob, const Verdict& verdict) {
  if (verdict.kind != VerdictKind::Proved && verdict.kind != VerdictKind::Refuted) return Status::ok();
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return internalError("proof cache: cannot create " + dir_ + ": " + ec.message());
  std::string key = keyFor(ob);
  std::string path = dir_ + "/" + key + ".proof";
  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())) + "." +
                    std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return internalError("proof cache: cannot write " + tmp);
    out << serialize(key, ob.canonical(), verdict);
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return internalError("proof cache: write failed for " + tmp);
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return internalError("proof cache: cannot rename into " + path);
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.stores;
  return Status::ok();
}

ProofCache::Stats ProofCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace verifuse::verify
