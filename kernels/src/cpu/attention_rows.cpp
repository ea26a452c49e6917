#include "cpu/attention_rows.h"

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/rowwise_internal.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::cpu {

namespace {

/// The f32 probabilities to bf16 (round to nearest even, NaN to the quiet NaN), as oneDNN's reorder.
void toBf16Row(const float* s, int64_t n, uint16_t* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = rowwise::detail::floatToBf16(s[j]);
}

/// The ISA the row steps dispatch on, asked once.
struct Isa {
  bool avx512 = hasAvx512() && hasAvx2Fma();
  bool avx512Bf16 = avx512 && hasAvx512Bf16();
  bool avx2 = hasAvx2Fma();
};
const Isa& isa() {
  static const Isa known;
  return known;
}

}  // namespace

float attentionSoftmaxRow(float* s, const float* mask, int64_t maskStride, int64_t n, float scale, float* sum,
                          uint16_t* bf16Out, bool exactBf16) {
  if (mask == nullptr || maskStride == 1) {
    if (isa().avx512) {
      return detail::attentionSoftmaxRowAvx512(s, mask, n, scale, sum, bf16Out, isa().avx512Bf16 && !exactBf16);
    }
    if (isa().avx2) {
      const float mx = detail::attentionSoftmaxRowAvx2(s, mask, n, scale, sum);
      if (bf16Out) toBf16Row(s, n, bf16Out);
      return mx;
    }
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
  if (bf16Out) toBf16Row(s, n, bf16Out);
  return mx;
}

float attentionSoftmaxRowBf16Mask(float* s, const uint16_t* mask, int64_t n, float scale, float* sum,
                                  uint16_t* bf16Out, bool exactBf16) {
  if (isa().avx512) {
    return detail::attentionSoftmaxRowBf16MaskAvx512(s, mask, n, scale, sum, bf16Out, isa().avx512Bf16 && !exactBf16);
  }
  thread_local std::vector<float> wide;
  wide.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) wide[static_cast<size_t>(j)] = rowwise::detail::bf16ToFloat(mask[j]);
  return attentionSoftmaxRow(s, wide.data(), 1, n, scale, sum, bf16Out, exactBf16);
}

void attentionScaleRow(const float* from, float r, int64_t n, float* to) {
  if (isa().avx512) return detail::attentionScaleRowAvx512(from, r, n, to);
  for (int64_t j = 0; j < n; ++j) to[j] = from[j] * r;
}

void attentionRoundRowToBf16(float* s, int64_t n) {
  if (isa().avx2) return detail::attentionRoundRowToBf16Avx2(s, n);
  for (int64_t j = 0; j < n; ++j) s[j] = rowwise::detail::bf16ToFloat(rowwise::detail::floatToBf16(s[j]));
}

void attentionScaleRowToBf16(const float* from, float r, int64_t n, uint16_t* to) {
  if (isa().avx512) return detail::attentionScaleRowToBf16Avx512(from, r, n, to);
  for (int64_t j = 0; j < n; ++j) to[j] = rowwise::detail::floatToBf16(from[j] * r);
}

}  // namespace verifuse::kernels::cpu
