#include "cpu/bf16_convert.h"

#include <omp.h>

#include <algorithm>

#include "cpu/rowwise_internal.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

namespace {

/// Elements per OpenMP chunk: below two chunks a conversion runs on the calling thread (a thread
/// wake-up costs more than converting 64K elements, ~10 us).
constexpr int64_t kChunk = int64_t{1} << 16;

template <typename Body>
void overChunks(int64_t n, Body&& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), chunks));
  if (threads <= 1) {
    body(0, n);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

}  // namespace

void widenBf16(const uint16_t* src, float* dst, int64_t n) {
  const bool avx2 = hasAvx2Fma();
  overChunks(n, [&](int64_t b, int64_t e) {
    if (avx2) {
      detail::widenBf16Avx2(src + b, dst + b, e - b);
    } else {
      for (int64_t i = b; i < e; ++i) dst[i] = rowwise::detail::bf16ToFloat(src[i]);
    }
  });
}

void narrowToBf16(const float* src, uint16_t* dst, int64_t n) {
  const bool avx2 = hasAvx2Fma();
  overChunks(n, [&](int64_t b, int64_t e) {
    if (avx2) {
      detail::narrowToBf16Avx2(src + b, dst + b, e - b);
    } else {
      for (int64_t i = b; i < e; ++i) dst[i] = rowwise::detail::floatToBf16(src[i]);
    }
  });
}

}  // namespace verifuse::kernels::cpu
