#include "cpu/weight_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace verifuse::kernels::cpu {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

bool hugePagesWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("VERIFUSE_HUGE_PAGES");
    return v == nullptr || std::string(v) != "0";
  }();
  return wanted;
}

/// One 2 MiB chunk shared by small buffers: filled front to back, freed when none is live.
struct Chunk {
  size_t used = 0;
  int64_t live = 0;
};

/// The chunks by base address, and the one new buffers are carved from. Only small buffers live
/// in chunks, so an address's chunk is its 2 MiB aligned base (a large buffer's base is never a
/// chunk's: both are live allocations of their own).
struct Chunks {
  std::mutex mutex;
  std::map<uintptr_t, Chunk> byBase;
  uintptr_t open = 0;
};

Chunks& chunks() {
  static Chunks* c = new Chunks;  // never destroyed: buffers may be released during exit
  return *c;
}

void* allocateHuge(size_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, bytes) != 0) return nullptr;
  (void)madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
  return p;
}

}  // namespace

void* allocateWeightMemory(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (!hugePagesWanted()) return std::aligned_alloc(64, rounded);
  if (rounded >= kHuge) return allocateHuge(bytes);
  Chunks& c = chunks();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto open = c.byBase.find(c.open);
  if (open == c.byBase.end() || open->second.used + rounded > kHuge) {
    void* base = allocateHuge(kHuge);
    if (base == nullptr) return nullptr;
    c.open = reinterpret_cast<uintptr_t>(base);
    open = c.byBase.emplace(c.open, Chunk{}).first;
  }
  void* p = reinterpret_cast<void*>(open->first + open->second.used);
  open->second.used += rounded;
  open->second.live += 1;
  return p;
}

void freeWeightMemory(void* p) {
  if (p == nullptr) return;
  if (hugePagesWanted()) {
    Chunks& c = chunks();
    std::lock_guard<std::mutex> lock(c.mutex);
    const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kHuge} - 1);
    auto it = c.byBase.find(base);
    if (it != c.byBase.end()) {
      if (--it->second.live == 0) {
        if (base == c.open) {
          it->second.used = 0;  // the open chunk starts over
        } else {
          c.byBase.erase(it);
          std::free(reinterpret_cast<void*>(base));
        }
      }
      return;
    }
  }
  std::free(p);
}

size_t weightMemoryChunkCount() {
  Chunks& c = chunks();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.byBase.size();
}

}  // namespace verifuse::kernels::cpu
