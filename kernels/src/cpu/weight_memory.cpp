#include "cpu/weight_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>

namespace verifuse::kernels::cpu {

void* allocateWeightMemory(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  static const bool wanted = [] {
    const char* v = std::getenv("VERIFUSE_HUGE_PAGES");
    return v == nullptr || std::string(v) != "0";
  }();
  if (bytes < kHuge || !wanted) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (p != nullptr) (void)madvise(p, rounded, MADV_HUGEPAGE);  // advice: failure leaves 4 KiB pages
  return p;
}

}  // namespace verifuse::kernels::cpu
