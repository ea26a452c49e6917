// Proof cache on the record store "proofs-v2". A record's payload is text, one field a line:
//   solver\t<z3 version>  kind\t<Proved|Refuted>  class\t<MessageClass>  seconds\t<s>
//   detail\t..  goal\t..  source\t..  target\t..  value\t<name>\t<value> (repeated)
//   canonical\t<the obligation's canonical form>
// with \\, \n and \t escaped in values. The store checksums and frames the record.
#include "verifuse/verify/proof_cache.h"

#include <charconv>
#include <sstream>
#include <string_view>
#include <vector>

#include "verifuse/support/hash.h"
#include "verifuse/verify/prover.h"

namespace verifuse::verify {

namespace {

using support::fnv1a64;
using support::hex16;

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

std::string serialize(const std::string& canonical, const Verdict& v) {
  std::ostringstream os;
  os << "solver\t" << escape(solverVersion()) << "\n";
  os << "kind\t" << verdictKindName(v.kind) << "\n";
  os << "class\t" << messageClassId(v.messageClass) << "\n";
  char secs[64];
  auto end = std::to_chars(secs, secs + sizeof secs, v.seconds).ptr;  // locale-independent
  os << "seconds\t" << std::string_view(secs, static_cast<size_t>(end - secs)) << "\n";
  os << "detail\t" << escape(v.detail) << "\n";
  os << "goal\t" << escape(v.counterexample.goal) << "\n";
  os << "source\t" << escape(v.counterexample.sourceValue) << "\n";
  os << "target\t" << escape(v.counterexample.targetValue) << "\n";
  for (const auto& [name, value] : v.counterexample.values) {
    os << "value\t" << escape(name) << "\t" << escape(value) << "\n";
  }
  os << "canonical\t" << escape(canonical) << "\n";
  return os.str();
}

// Returns false on any format problem, or when the record is another obligation's or solver's.
bool parse(const std::string& body, const std::string& canonical, Verdict& v) {
  std::istringstream is(body);
  std::string line;
  bool sawSolver = false, sawKind = false, sawCanonical = false;
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
    if (field == "solver") {
      if (val != solverVersion()) return false;
      sawSolver = true;
    } else if (field == "kind") {
      if (val == verdictKindName(VerdictKind::Proved)) v.kind = VerdictKind::Proved;
      else if (val == verdictKindName(VerdictKind::Refuted)) v.kind = VerdictKind::Refuted;
      else return false;
      sawKind = true;
    } else if (field == "class") {
      if (!parseMessageClass(val, v.messageClass)) return false;
    } else if (field == "seconds") {
      auto r = std::from_chars(val.data(), val.data() + val.size(), v.seconds);
      if (r.ec != std::errc() || r.ptr != val.data() + val.size()) return false;
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
  return sawSolver && sawKind && sawCanonical;
}

}  // namespace

ProofCache::ProofCache(std::string dir) : dir_(std::move(dir)) {
  auto store = support::RecordStore::open(dir_, kStoreName);
  if (store.isOk()) {
    store_ = std::move(store).value();
  } else {
    status_ = store.status().withContext("proof cache");
  }
}

ProofCache::~ProofCache() = default;

std::string ProofCache::keyFor(const Obligation& ob) {
  return hex16(fnv1a64(ob.canonical() + '\0' + solverVersion()));
}

std::string ProofCache::path() const { return store_ ? store_->path() : dir_ + "/" + kStoreName + ".vfstore"; }

std::optional<Verdict> ProofCache::lookup(const Obligation& ob) {
  std::optional<support::Record> r;
  if (store_) r = store_->get(keyFor(ob));
  Verdict v;
  bool ok = r && parse(r->payload, ob.canonical(), v);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    if (r) ++stats_.corrupt;  // present but not this obligation's verdict
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  v.fromCache = true;
  return v;
}

Status ProofCache::store(const Obligation& ob, const Verdict& verdict) {
  if (verdict.kind != VerdictKind::Proved && verdict.kind != VerdictKind::Refuted) return Status::ok();
  if (!store_) return status_;
  store_->put(keyFor(ob), serialize(ob.canonical(), verdict));
  bool batched;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.stores;
    batched = batchDepth_ > 0;
  }
  if (batched) return Status::ok();
  Status s = store_->flush().withContext("proof cache");
  if (!s.isOk()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.writeErrors;
  }
  return s;
}

ProofCache::Batch::Batch(ProofCache* cache) : cache_(cache) {
  if (!cache_) return;
  std::lock_guard<std::mutex> lock(cache_->mu_);
  ++cache_->batchDepth_;
}

ProofCache::Batch::~Batch() {
  if (!cache_) return;
  {
    std::lock_guard<std::mutex> lock(cache_->mu_);
    if (--cache_->batchDepth_ > 0) return;
  }
  if (!cache_->store_) return;
  // NOTE: a failed write only costs a re-proof next time; the verdicts stand.
  if (!cache_->store_->flush().isOk()) {
    std::lock_guard<std::mutex> lock(cache_->mu_);
    ++cache_->stats_.writeErrors;
  }
}

ProofCache::Stats ProofCache::stats() const {
  Stats out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = stats_;
  }
  if (store_) {
    support::RecordStoreStats s = store_->stats();
    out.corrupt += static_cast<uint64_t>(s.droppedRecords + s.droppedBlobs);
  }
  return out;
}

support::RecordStoreStats ProofCache::storeStats() const {
  return store_ ? store_->stats() : support::RecordStoreStats{};
}

}  // namespace verifuse::verify
