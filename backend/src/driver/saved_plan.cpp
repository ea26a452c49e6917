// Saved plans (see saved_plan.h): encoding, the environment key, weight fingerprints.
#include "verifuse/kernels/capabilities.h"
#include "verifuse/driver/saved_plan.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver/environment.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/support/hash.h"
#include "verifuse/verify/prover.h"

namespace verifuse::driver {
namespace {

/// Every field is "<decimal length>:<bytes>", so any bytes survive and a cut is detected.
class Writer {
 public:
  void str(const std::string& s) {
    out_ += std::to_string(s.size());
    out_ += ':';
    out_ += s;
  }
  void num(int64_t v) { str(std::to_string(v)); }
  void real(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    str(buf);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  bool str(std::string& s) {
    size_t colon = in_.find(':', pos_);
    if (colon == std::string::npos || colon == pos_ || colon - pos_ > 12) return false;
    size_t len = 0;
    for (size_t k = pos_; k < colon; ++k) {
      if (in_[k] < '0' || in_[k] > '9') return false;
      len = len * 10 + static_cast<size_t>(in_[k] - '0');
    }
    if (len > in_.size() - colon - 1) return false;
    s.assign(in_, colon + 1, len);
    pos_ = colon + 1 + len;
    return true;
  }
  bool num(int64_t& v) {
    std::string s;
    if (!str(s) || s.empty()) return false;
    char* end = nullptr;
    v = std::strtoll(s.c_str(), &end, 10);
    return end && *end == '\0';
  }
  bool real(double& v) {
    std::string s;
    if (!str(s) || s.empty()) return false;
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    return end && *end == '\0';
  }
  bool atEnd() const { return pos_ == in_.size(); }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

/// A count read from the record, bounded so a damaged length cannot make us allocate wildly.
bool count(Reader& r, int64_t& n) { return r.num(n) && n >= 0 && n < (int64_t{1} << 24); }

/// 64-bit words mixed in four independent lanes (several bytes per cycle; FNV-1a alone would
/// spend ~0.1 s on ResNet-50's 100 MB of weights), then the tail bytewise with FNV-1a.
uint64_t hashBytes(const unsigned char* p, size_t n, uint64_t seed) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  uint64_t lane[4] = {seed, seed ^ 0x632be59bd9b4e019ull, seed + kMul, seed ^ 0x8cb92ba72f3d8dd7ull};
  size_t k = 0;
  for (; k + 32 <= n; k += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + k + 8 * l, 8);
      lane[l] = (lane[l] ^ w) * kMul;
      lane[l] ^= lane[l] >> 29;
    }
  }
  uint64_t h = support::fnv1a64(std::string_view(reinterpret_cast<const char*>(p + k), n - k), seed);
  for (uint64_t l : lane) {
    h ^= l;
    h *= 1099511628211ull;
    h ^= h >> 31;
  }
  return h;
}

}  // namespace

std::string SavedPlan::encode() const {
  Writer w;
  w.str(kFormat);
  w.str(environment);
  w.num(static_cast<int64_t>(weights.size()));
  for (const WeightPrint& p : weights) {
    w.str(p.name);
    w.str(p.print);
  }
  w.num(static_cast<int64_t>(proofs.size()));
  for (const auto& [rule, p] : proofs) {
    w.str(rule);
    w.str(p.verdict);
    w.str(p.message);
    w.num(p.admitted ? 1 : 0);
  }
  w.num(static_cast<int64_t>(instances.size()));
  for (const auto& [rule, c] : instances) {
    w.str(rule);
    w.str(c.verdict);
    w.real(c.maxErrorBound);
    w.real(c.maxError);
    w.str(c.detail);
    w.str(c.layerVerdict);
    w.str(c.layerDetail);
    w.real(c.layerSeconds);
  }
  w.num(tuned ? 1 : 0);
  w.num(static_cast<int64_t>(tunings.size()));
  for (const auto& [key, d] : tunings) {
    w.str(key);
    w.str(d.chosen);
    w.num(d.created);
    w.num(static_cast<int64_t>(d.medianMs.size()));
    for (const auto& [name, ms] : d.medianMs) {
      w.str(name);
      w.real(ms);
    }
    w.num(static_cast<int64_t>(d.failures.size()));
    for (const auto& [name, why] : d.failures) {
      w.str(name);
      w.str(why);
    }
  }
  w.str(optimizedIr);
  w.str("end");
  return w.take();
}

StatusOr<SavedPlan> SavedPlan::decode(const std::string& bytes) {
  Reader r(bytes);
  SavedPlan p;
  std::string format;
  auto bad = [](const std::string& what) { return invalidArgument("saved plan unreadable: " + what); };
  if (!r.str(format)) return bad("no format tag");
  if (format != kFormat) return bad("format '" + format.substr(0, 40) + "', expected '" + kFormat + "'");
  if (!r.str(p.environment)) return bad("environment");
  int64_t n = 0;
  if (!count(r, n)) return bad("weight count");
  for (int64_t k = 0; k < n; ++k) {
    WeightPrint w;
    if (!r.str(w.name) || !r.str(w.print)) return bad("weight " + std::to_string(k));
    p.weights.push_back(std::move(w));
  }
  if (!count(r, n)) return bad("proof count");
  for (int64_t k = 0; k < n; ++k) {
    passes::ProofOutcome o;
    int64_t admitted = 0;
    if (!r.str(o.rule) || !r.str(o.verdict) || !r.str(o.message) || !r.num(admitted)) return bad("proof " + std::to_string(k));
    o.admitted = admitted == 1;
    o.fromCache = true;
    p.proofs[o.rule] = std::move(o);
  }
  if (!count(r, n)) return bad("instance count");
  for (int64_t k = 0; k < n; ++k) {
    std::string rule;
    rules::InstanceCheck c;
    if (!r.str(rule) || !r.str(c.verdict) || !r.real(c.maxErrorBound) || !r.real(c.maxError) || !r.str(c.detail) ||
        !r.str(c.layerVerdict) || !r.str(c.layerDetail) || !r.real(c.layerSeconds)) {
      return bad("instance " + std::to_string(k));
    }
    p.instances.emplace_back(std::move(rule), std::move(c));
  }
  int64_t tuned = 0;
  if (!r.num(tuned)) return bad("tuned flag");
  p.tuned = tuned == 1;
  if (!count(r, n)) return bad("tuning count");
  for (int64_t k = 0; k < n; ++k) {
    std::string key;
    kernels::TuningDecision d;
    int64_t m = 0;
    if (!r.str(key) || !r.str(d.chosen) || !r.num(d.created) || !count(r, m)) return bad("tuning " + std::to_string(k));
    for (int64_t j = 0; j < m; ++j) {
      std::string name;
      double ms = 0;
      if (!r.str(name) || !r.real(ms)) return bad("tuning " + std::to_string(k));
      d.medianMs[name] = ms;
    }
    if (!count(r, m)) return bad("tuning " + std::to_string(k));
    for (int64_t j = 0; j < m; ++j) {
      std::string name, why;
      if (!r.str(name) || !r.str(why)) return bad("tuning " + std::to_string(k));
      d.failures[name] = why;
    }
    // The two-engine view the database fills on every decision it returns.
    d.engine = d.chosen == "onednn" ? kernels::Engine::kOneDnn : kernels::Engine::kAten;
    d.onednnMs = d.msOf("onednn");
    d.atenMs = d.msOf("aten");
    p.tunings[key] = std::move(d);
  }
  std::string end;
  if (!r.str(p.optimizedIr) || !r.str(end) || end != "end" || !r.atEnd()) return bad("truncated or trailing bytes");
  return p;
}

std::string environmentKey() {
  const std::string foreignIsa = foreignIsaForTests();
  return std::string(SavedPlan::kFormat) + ";z3=" + verify::solverVersion() + ";onednn=" + kernels::onednnVersion() +
         ";isa=" + (!foreignIsa.empty() ? foreignIsa : kernels::capabilities().onednnIsa) + ";kernels-isa=" + kernels::cpu::isaName();
}

StatusOr<std::vector<WeightPrint>> fingerprintWeights(const ir::Graph& g, const std::vector<ir::ConstantId>& constants) {
  std::vector<WeightPrint> out;
  for (ir::ConstantId id : constants) {
    if (id < 0 || static_cast<size_t>(id) >= g.constants().size()) return invalidArgument("weight constant out of range");
    const ir::ConstantTensor& c = g.constants()[static_cast<size_t>(id)];
    uint64_t h = support::fnv1a64(ir::dtypeShortName(c.dtype));
    for (int64_t s : c.sizes) h = support::fnv1a64(std::to_string(s) + ",", h);
    h = support::fnv1a64("/", h);
    for (int64_t s : c.strides) h = support::fnv1a64(std::to_string(s) + ",", h);
    // The bytes the tensor spans: from its first element to its last (strides may be any order).
    int64_t span = c.numel() > 0 ? 1 : 0;
    for (size_t d = 0; d < c.sizes.size() && span > 0; ++d) {
      const int64_t stride = d < c.strides.size() ? c.strides[d] : 0;
      if (stride < 0) return invalidArgument("weight '" + c.name + "' has a negative stride");
      span += (c.sizes[d] - 1) * stride;
    }
    if (span > 0 && !c.data) return invalidArgument("weight '" + c.name + "' has no data");
    const size_t bytes = static_cast<size_t>(span) * ir::dtypeSize(c.dtype);
    h = hashBytes(static_cast<const unsigned char*>(c.data), bytes, h);
    out.push_back({c.name, support::hex16(h)});
  }
  return out;
}

Status checkWeights(const std::vector<WeightPrint>& saved, const std::vector<WeightPrint>& now) {
  if (saved.size() != now.size()) {
    return invalidArgument("the plan was made for " + std::to_string(saved.size()) + " frozen weights, the module has " +
                           std::to_string(now.size()));
  }
  for (size_t k = 0; k < saved.size(); ++k) {
    if (saved[k].print != now[k].print) {
      return invalidArgument("weight '" + now[k].name + "' differs from the one the plan was validated for (content "
                             "fingerprint " + now[k].print + ", plan has " + saved[k].print + ")");
    }
  }
  return Status::ok();
}

}  // namespace verifuse::driver
