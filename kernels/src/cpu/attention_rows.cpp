#include "cpu/attention_rows.h"

#include <cmath>
#include <limits>

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

float attentionSoftmaxRow(float* s, const float* mask, int64_t maskStride, int64_t n, float scale, float* sum) {
  static const bool avx512 = hasAvx512() && hasAvx2Fma();
  static const bool avx2 = hasAvx2Fma();
  if (mask == nullptr || maskStride == 1) {
    if (avx512) return detail::attentionSoftmaxRowAvx512(s, mask, n, scale, sum);
    if (avx2) return detail::attentionSoftmaxRowAvx2(s, mask, n, scale, sum);
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    float x = s[j] * scale;
    if (mask) x += mask[j * maskStride];
    s[j] = x;
    mx = std::fmax(mx, x);
  }
  float total = 0.f;
  if (mx == -std::numeric_limits<float>::infinity()) {
    // exp(-inf - -inf) would be NaN: a fully masked row has no weight anywhere.
    for (int64_t j = 0; j < n; ++j) s[j] = 0.f;
  } else {
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - mx);
      total += s[j];
    }
  }
  *sum = total;
  return mx;
}

}  // namespace verifuse::kernels::cpu
