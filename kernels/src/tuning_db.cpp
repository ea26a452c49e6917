// The tuning database (on the support::RecordStore "tuning-v2") and the timing helpers. See
// tuning_db.h for the guarantees and support/README.md for the file.
//
// Record: key = TuningKey::canonical(), created = the decision's `created`, payload = lines
//   chosen <engine>
//   ms <engine> <median ms>          one per candidate, sorted by engine; -1: could not run
//   fail <engine> <reason>           reason with \ and newlines escaped (\\, \n)
// Numbers go through to_chars/from_chars: shortest round trip, independent of the C locale.
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/tuning_db.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <ctime>
#include <string_view>

#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/support/hash.h"
#include "verifuse/support/record_store.h"

namespace verifuse::kernels {
namespace {

std::atomic<int64_t> gTimingCalls{0};

std::string formatDouble(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

template <typename T>
bool parseNumber(std::string_view s, T& out) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

bool validEngineName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string escapeLine(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::optional<std::string> unescapeLine(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) return std::nullopt;
    if (s[i] == '\\') out += '\\';
    else if (s[i] == 'n') out += '\n';
    else return std::nullopt;
  }
  return out;
}

/// Fills the deprecated two-engine fields from chosen/medianMs.
void fillTwoEngineView(TuningDecision& d) {
  d.engine = d.chosen == "onednn" ? Engine::kOneDnn : Engine::kAten;
  d.onednnMs = d.msOf("onednn");
  d.atenMs = d.msOf("aten");
}

/// A decision as record() stores it: a legacy one (chosen empty) becomes a named one.
TuningDecision normalized(const TuningDecision& in) {
  TuningDecision d = in;
  if (d.chosen.empty()) {
    d.chosen = engineName(in.engine);
    d.medianMs = {{"onednn", in.onednnMs < 0 ? -1.0 : in.onednnMs}, {"aten", in.atenMs < 0 ? -1.0 : in.atenMs}};
  }
  fillTwoEngineView(d);
  return d;
}

std::string encode(const TuningDecision& d) {
  std::string out = "chosen " + d.chosen + "\n";
  for (const auto& [engine, ms] : d.medianMs) out += "ms " + engine + " " + formatDouble(ms) + "\n";
  for (const auto& [engine, why] : d.failures) out += "fail " + engine + " " + escapeLine(why) + "\n";
  return out;
}

std::optional<TuningDecision> decode(std::string_view payload, int64_t created) {
  TuningDecision d;
  d.created = created;
  size_t pos = 0;
  while (pos < payload.size()) {
    size_t eol = payload.find('\n', pos);
    if (eol == std::string_view::npos) return std::nullopt;
    std::string_view line = payload.substr(pos, eol - pos);
    pos = eol + 1;
    size_t sp1 = line.find(' ');
    if (sp1 == std::string_view::npos) return std::nullopt;
    std::string_view tag = line.substr(0, sp1), rest = line.substr(sp1 + 1);
    if (tag == "chosen") {
      if (!validEngineName(rest) || !d.chosen.empty()) return std::nullopt;
      d.chosen = std::string(rest);
      continue;
    }
    size_t sp2 = rest.find(' ');
    if (sp2 == std::string_view::npos) return std::nullopt;
    std::string engine(rest.substr(0, sp2));
    std::string_view value = rest.substr(sp2 + 1);
    if (!validEngineName(engine)) return std::nullopt;
    if (tag == "ms") {
      double ms = 0;
      if (!parseNumber(value, ms)) return std::nullopt;
      d.medianMs[engine] = ms;
    } else if (tag == "fail") {
      auto why = unescapeLine(value);
      if (!why) return std::nullopt;
      d.failures[engine] = std::move(*why);
    } else {
      return std::nullopt;
    }
  }
  if (d.chosen.empty()) return std::nullopt;
  fillTwoEngineView(d);
  return d;
}

void appendField(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += '=';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += ';';
}

int64_t nowSeconds() { return support::RecordStore::nowSeconds(); }

/// Whether \p d measured exactly what timing \p candidates would measure now.
bool covers(const TuningDecision& d, const std::vector<Candidate>& candidates) {
  bool chosenIsCandidate = false;
  for (const Candidate& c : candidates) {
    if (d.medianMs.count(c.name) == 0) return false;
    chosenIsCandidate = chosenIsCandidate || c.name == d.chosen;
  }
  return chosenIsCandidate;
}

/// timeCandidates, also handing back each failed candidate's Status.
StatusOr<TuningDecision> timeCandidatesImpl(const std::vector<Candidate>& candidates, int warmup, int repeats,
                                            std::map<std::string, Status>* failureStatus) {
  if (candidates.empty()) return invalidArgument("timeCandidates: no candidates");
  if (repeats < 1 || warmup < 0) return invalidArgument("timeCandidates: need repeats >= 1 and warmup >= 0");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (!validEngineName(c.name)) return invalidArgument("timeCandidates: bad engine name '" + c.name + "'");
    if (!c.run) return invalidArgument("timeCandidates: no callable for " + c.name);
    for (size_t j = 0; j < i; ++j) {
      if (candidates[j].name == c.name) return invalidArgument("timeCandidates: duplicate engine " + c.name);
    }
  }
  const size_t n = candidates.size();
  gTimingCalls.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  std::vector<bool> alive(n, true);
  std::vector<std::vector<double>> samples(n);
  std::vector<Status> failed(n);
  auto runOnce = [&](size_t i, bool timed) {
    if (!alive[i]) return;
    Status s;
    auto t0 = std::chrono::steady_clock::now();
    try {
      s = candidates[i].run();
    } catch (const std::exception& e) {
      s = internalError(std::string("threw: ") + e.what());
    } catch (...) {
      s = internalError("threw a non-standard exception");
    }
    auto t1 = std::chrono::steady_clock::now();
    if (!s.isOk()) {
      alive[i] = false;
      failed[i] = s;
      samples[i].clear();
      return;
    }
    if (timed) samples[i].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  };
  // Round r runs every candidate once, starting at candidate r mod n.
  for (int round = 0; round < warmup + repeats; ++round) {
    for (size_t j = 0; j < n; ++j) runOnce((j + static_cast<size_t>(round)) % n, round >= warmup);
  }
  TuningDecision d;
  d.created = nowSeconds();
  double best = 0;
  std::string reasons;
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = candidates[i].name;
    if (!alive[i]) {
      d.medianMs[name] = -1.0;
      d.failures[name] = failed[i].toString();
      if (failureStatus) (*failureStatus)[name] = failed[i];
      reasons += (reasons.empty() ? "" : "; ") + name + ": " + failed[i].toString();
      continue;
    }
    std::vector<double>& ms = samples[i];
    std::sort(ms.begin(), ms.end());
    const size_t m = ms.size();
    double median = m % 2 ? ms[m / 2] : 0.5 * (ms[m / 2 - 1] + ms[m / 2]);
    d.medianMs[name] = median;
    if (d.chosen.empty() || median < best) {
      d.chosen = name;
      best = median;
    }
  }
  if (d.chosen.empty()) {
    size_t first = 0;
    while (first < n && alive[first]) ++first;
    return Status(failed[first].code(), "no candidate engine could run the partition: " + reasons);
  }
  fillTwoEngineView(d);
  return d;
}

}  // namespace

// ---- TuningKey -------------------------------------------------------------------------------------

TuningKey TuningKey::forThisMachine(std::string signature, std::vector<std::vector<int64_t>> inputShapes,
                                    std::string dtype, int threads) {
  TuningKey k;
  k.signature = std::move(signature);
  k.inputShapes = std::move(inputShapes);
  k.dtype = std::move(dtype);
  k.isa = capabilities().onednnIsa;
  k.threads = threads;
  k.onednnVersion = kernels::onednnVersion();
  k.cpuKernelsIsa = cpu::isaName() + ":" + cpu::kernelsRevision();
  return k;
}

std::string TuningKey::canonical() const {
  std::string shapes = std::to_string(inputShapes.size());
  for (const auto& s : inputShapes) {
    shapes += '[';
    for (size_t i = 0; i < s.size(); ++i) {
      if (i) shapes += ',';
      shapes += std::to_string(s[i]);
    }
    shapes += ']';
  }
  std::string out = "k2;";
  appendField(out, "sig", signature);
  appendField(out, "shapes", shapes);
  appendField(out, "dtype", dtype);
  appendField(out, "isa", isa);
  appendField(out, "threads", std::to_string(threads));
  appendField(out, "onednn", onednnVersion);
  appendField(out, "kisa", cpuKernelsIsa);
  return out;
}

std::string TuningKey::shortHash() const { return support::hex16(support::fnv1a64(canonical())); }

const char* engineName(Engine e) { return e == Engine::kOneDnn ? "onednn" : "aten"; }

StatusOr<Engine> parseEngine(const std::string& name) {
  if (name == "onednn") return Engine::kOneDnn;
  if (name == "aten") return Engine::kAten;
  return invalidArgument("unknown engine '" + name + "' (expected onednn or aten)");
}

double TuningDecision::msOf(const std::string& name) const {
  auto it = medianMs.find(name);
  return it == medianMs.end() || it->second < 0 ? -1.0 : it->second;
}

// ---- TuningDb --------------------------------------------------------------------------------------

TuningDb::TuningDb(std::unique_ptr<support::RecordStore> store) : store_(std::move(store)) {}
TuningDb::~TuningDb() = default;

StatusOr<std::unique_ptr<TuningDb>> TuningDb::open(const std::string& cacheDir) {
  if (cacheDir.empty()) return invalidArgument("TuningDb: empty cache_dir");
  auto store = support::RecordStore::open(cacheDir, kStoreName);
  if (!store.isOk()) return store.status().withContext("TuningDb");
  return std::unique_ptr<TuningDb>(new TuningDb(std::move(store).value()));
}

std::optional<TuningDecision> TuningDb::lookup(const TuningKey& key) {
  std::optional<support::Record> r = store_->get(key.canonical());
  std::optional<TuningDecision> d;
  if (r) d = decode(r->payload, r->created);
  std::lock_guard<std::mutex> lock(mu_);
  if (r && !d) ++undecodable_;  // checksummed but not a decision this code can read: re-time
  ++(d ? hits_ : misses_);
  return d;
}

void TuningDb::record(const TuningKey& key, const TuningDecision& decision) {
  TuningDecision d = normalized(decision);
  const int64_t created = d.created != 0 ? d.created : nowSeconds();
  store_->put(key.canonical(), encode(d), created);
  std::lock_guard<std::mutex> lock(mu_);
  ++recorded_;
}

Status TuningDb::flush() { return store_->flush().withContext("TuningDb"); }

size_t TuningDb::size() const { return store_->size(); }

TuningDbStats TuningDb::stats() const {
  support::RecordStoreStats s = store_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  TuningDbStats out;
  out.loaded = s.loaded;
  out.hits = hits_;
  out.misses = misses_;
  out.recorded = recorded_;
  out.flushes = s.flushes;
  out.droppedRecords = s.droppedRecords + s.droppedBlobs + undecodable_;
  out.rebuilt = s.rebuilt;
  out.rebuildReason = s.rebuildReason;
  return out;
}

const std::string& TuningDb::path() const { return store_->path(); }

// ---- timing ----------------------------------------------------------------------------------------

StatusOr<TimingResult> timeCallable(const std::function<Status()>& fn, int warmup, int repeats) {
  if (repeats < 1 || warmup < 0) {
    return invalidArgument("timeCallable: need repeats >= 1 and warmup >= 0");
  }
  gTimingCalls.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < warmup; ++i) VF_RETURN_IF_ERROR(fn());
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    VF_RETURN_IF_ERROR(fn());
    auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  TimingResult r;
  r.repeats = repeats;
  r.minMs = ms.front();
  r.medianMs = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  size_t rank = (9 * n + 9) / 10;  // ceil(0.9 n), nearest rank
  r.p90Ms = ms[std::max<size_t>(rank, 1) - 1];
  return r;
}

int64_t timingCallCount() { return gTimingCalls.load(std::memory_order_relaxed); }

StatusOr<TuningDecision> timeCandidates(const std::vector<Candidate>& candidates, int warmup, int repeats) {
  return timeCandidatesImpl(candidates, warmup, repeats, nullptr);
}

StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key, const std::vector<Candidate>& candidates,
                                      int warmup, int repeats) {
  if (auto hit = db.lookup(key); hit && covers(*hit, candidates)) return *hit;
  VF_ASSIGN_OR_RETURN(TuningDecision d, timeCandidatesImpl(candidates, warmup, repeats, nullptr));
  db.record(key, d);
  return d;
}

StatusOr<TuningDecision> tuneOrLookup(TuningDb& db, const TuningKey& key,
                                      const std::function<Status()>& runOneDnn,
                                      const std::function<Status()>& runAten, int warmup, int repeats) {
  // ATen first: it is the fallback, so it wins an exact tie (as the first tuner did).
  const std::vector<Candidate> candidates = {{"aten", runAten}, {"onednn", runOneDnn}};
  if (auto hit = db.lookup(key); hit && covers(*hit, candidates)) return *hit;
  std::map<std::string, Status> failures;
  VF_ASSIGN_OR_RETURN(TuningDecision d, timeCandidatesImpl(candidates, warmup, repeats, &failures));
  if (auto it = failures.find("aten"); it != failures.end()) return it->second;
  db.record(key, d);
  return d;
}

}  // namespace verifuse::kernels
