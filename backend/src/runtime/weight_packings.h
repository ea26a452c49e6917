// Packed copies of model weights shared by every plan of the process.
//
// A model compiled for generate() gets two plans (the prefill's and the decode step's graph), and
// both multiply by the same parameters. Each used to pack its own copy: a float32 Llama-3.2-1B held
// its 4.9 GB of weights three times (the model's, the prefill plan's, the decode plan's; peak RSS
// 15.0 GB against eager's 5.2; 10.9 GB shared) and packed them twice on the first generate(). A
// packing is a pure function of the source's bytes and the packing's kind (float32, bf16, MKL's for
// M rows; the own GEMM's layouts do not depend on the ISA variant that reads them), so plans share
// it: the second plan finds the first one's packing while it is alive.
//
// Keyed by where the source lives (storage, offset, sizes, strides, dtype), not by the tensor
// object: two plans may hold different views of one parameter. An entry is valid while the storage
// it was packed from is alive (a weak reference: no other storage can take its address meanwhile)
// and every source is at the version it was packed from (an in-place update, e.g.
// load_state_dict into the parameters, repacks). Inference tensors track no version: the GEMM's
// packings of them are not shared (each linear packs its own, as before).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace verifuse::runtime {

template <class Packing>
class WeightPackings {
 public:
  /// The packing of \p sources (sources[0] the weight; the others, e.g. scales, must be in the
  /// same places at the same versions) for \p kind, made by \p make() on a miss (returning a
  /// StatusOr<P> that converts to std::shared_ptr<const Packing>); null when make() refuses (the
  /// caller falls back; the refusal is kept like a packing, so a weight the kernel cannot take is
  /// not scanned again on every call). Built with keepStrong false, the table holds packings weakly:
  /// the callers own them, and one goes when the last plan using it does (the GEMM's weights);
  /// with keepStrong true it keeps them while their sources live (the weight-only kernels, which
  /// look theirs up on every call).
  /// \p found (optional) says whether an existing packing answered.
  template <class Make>
  std::shared_ptr<const Packing> get(c10::ArrayRef<at::Tensor> sources, const std::string& kind, Make make,
                                     bool* found = nullptr) {
    if (found != nullptr) *found = false;
    if (!keepStrong_) {
      for (const at::Tensor& t : sources) {
        if (t.is_inference()) return toShared(make());  // no version to check: not shared
      }
    }
    const Key key = keyOf(sources[0], kind);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (const Entry* e = currentEntry(key, sources)) {
        if (std::shared_ptr<const Packing> p = packingOf(*e)) {
          ++hits_;
          if (found != nullptr) *found = true;
          return p;
        }
        if (e->refused) return nullptr;
      }
    }
    // Packed without the lock: a large weight (a 545 MB LM head) must not hold up the lookups of
    // other linears, e.g. the first call's while a background thread packs (deferred packing).
    std::shared_ptr<const Packing> made = toShared(make());
    std::lock_guard<std::mutex> lock(mutex_);
    if (const Entry* e = currentEntry(key, sources)) {
      if (std::shared_ptr<const Packing> p = packingOf(*e)) {  // another thread packed it meanwhile
        ++hits_;
        if (found != nullptr) *found = true;
        return p;
      }
    }
    // Only a miss sweeps out the entries of freed sources (a hit is every decode step's).
    for (auto e = packed_.begin(); e != packed_.end();) e = expired(e->second) ? packed_.erase(e) : std::next(e);
    Entry entry;
    for (const at::Tensor& t : sources) {
      entry.sources.emplace_back(t.storage().getWeakStorageImpl());
      entry.places.push_back(Place::of(t));
      entry.versions.push_back(versionOf(t));
    }
    entry.refused = made == nullptr;
    if (keepStrong_) {
      entry.strong = made;
    } else {
      entry.weak = made;
    }
    packed_.insert_or_assign(key, std::move(entry));
    return made;
  }

  /// Whether get() would answer \p sources and \p kind from an existing packing now.
  bool holds(c10::ArrayRef<at::Tensor> sources, const std::string& kind) const {
    for (const at::Tensor& t : sources) {
      if (!keepStrong_ && t.is_inference()) return false;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const Entry* e = currentEntry(keyOf(sources[0], kind), sources);
    return e != nullptr && packingOf(*e) != nullptr;
  }

  explicit WeightPackings(bool keepStrong) : keepStrong_(keepStrong) {}

  /// Lookups answered by an existing packing (tests, the report).
  int64_t hits() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return hits_;
  }
  /// The packings alive now, each once (tests; the report).
  std::vector<std::shared_ptr<const Packing>> alive() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::shared_ptr<const Packing>> out;
    for (const auto& [key, e] : packed_) {
      if (auto p = packingOf(e)) out.push_back(std::move(p));
    }
    return out;
  }

 private:
  // Where a tensor lives: storage, offset, sizes, strides, dtype. Made and compared without heap
  // allocation (up to 4 dimensions): the weight-only kernels look theirs up on every call.
  struct Place {
    const void* storage;
    int64_t offset;
    c10::SmallVector<int64_t, 4> sizes, strides;
    int dtype;
    static Place of(const at::Tensor& t) {
      return Place{t.storage().unsafeGetStorageImpl(), t.storage_offset(),
                   c10::SmallVector<int64_t, 4>(t.sizes().begin(), t.sizes().end()),
                   c10::SmallVector<int64_t, 4>(t.strides().begin(), t.strides().end()),
                   static_cast<int>(t.scalar_type())};
    }
    bool holds(const at::Tensor& t) const {
      return storage == t.storage().unsafeGetStorageImpl() && offset == t.storage_offset() &&
             dtype == static_cast<int>(t.scalar_type()) && c10::IntArrayRef(sizes) == t.sizes() &&
             c10::IntArrayRef(strides) == t.strides();
    }
    bool operator<(const Place& o) const {
      return std::tie(storage, offset, sizes, strides, dtype) < std::tie(o.storage, o.offset, o.sizes, o.strides, o.dtype);
    }
  };
  // The weight's place and the packing's kind (callers keep kinds within std::string's inline
  // capacity, 15 characters: no allocation per lookup either).
  using Key = std::pair<Place, std::string>;
  struct Entry {
    std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> sources;
    std::vector<Place> places;  // each source's
    std::vector<uint32_t> versions;
    std::shared_ptr<const Packing> strong;
    std::weak_ptr<const Packing> weak;
    bool refused = false;
  };
  // The entry of \p key if it was made from these very sources (mutex_ held).
  const Entry* currentEntry(const Key& key, c10::ArrayRef<at::Tensor> sources) const {
    auto it = packed_.find(key);
    return it != packed_.end() && current(it->second, sources) ? &it->second : nullptr;
  }
  static std::shared_ptr<const Packing> packingOf(const Entry& e) { return e.strong ? e.strong : e.weak.lock(); }
  template <class Made>
  static std::shared_ptr<const Packing> toShared(Made made) {
    if (!made.isOk()) return nullptr;
    return std::shared_ptr<const Packing>(std::move(made).value());
  }
  // Inference tensors track no version: the weight-only tables (looked up on every call) still
  // keep theirs by place, as an ATen-frozen constant would be.
  static uint32_t versionOf(const at::Tensor& t) { return t.is_inference() ? UINT32_MAX : t._version(); }
  static Key keyOf(const at::Tensor& t, const std::string& kind) { return Key{Place::of(t), kind}; }
  bool expired(const Entry& e) const {
    for (const auto& s : e.sources) {
      if (s.expired()) return true;
    }
    return !keepStrong_ && !e.refused && e.weak.expired();
  }
  // The same places in the same storages (alive, so no other storage holds their addresses), at
  // the same versions.
  static bool current(const Entry& e, c10::ArrayRef<at::Tensor> sources) {
    if (e.sources.size() != sources.size()) return false;
    for (size_t i = 0; i < sources.size(); ++i) {
      auto alive = e.sources[i].lock();
      if (alive.get() != sources[i].storage().unsafeGetStorageImpl() || e.versions[i] != versionOf(sources[i]) ||
          !e.places[i].holds(sources[i])) {
        return false;
      }
    }
    return true;
  }
  const bool keepStrong_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> packed_;
  int64_t hits_ = 0;
};

}  // namespace verifuse::runtime
