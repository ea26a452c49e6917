// Internal to kernels/: the row step of the attention kernel (kernels/src/onednn/attention.cpp).
#pragma once

#include <cstdint>

namespace verifuse::kernels::cpu {

/// One score row s[0..n): x_j = s_j * scale + mask_j (mask may be null, mask stride \p maskStride,
/// 0 = one value for the whole row), then s_j = exp(x_j - max) in place. Returns max and sets
/// *sum = sum_j s_j. A row whose every x_j is -inf gets s = 0, sum 0 and max -inf (the kernel then
/// writes a zero output row, as ATen's CPU flash attention does). exp is the row engine's
/// (vecmath, < 1 ulp) on AVX-512 or AVX2, std::exp otherwise.
/// \p bf16Out (bf16 attention): the probabilities are written there instead, each rounded to bf16
/// (nearest even), for the P·V matmul; s then holds scratch. The sum is of the float values.
/// Denormal bf16 probabilities (below 2^-126) are flushed to zero on AVX512-BF16 CPUs (one
/// conversion instruction; vdpbf16ps, which oneDNN's bf16 matmul runs there, reads denormal inputs
/// as zero anyway) unless \p exactBf16.
float attentionSoftmaxRow(float* s, const float* mask, int64_t maskStride, int64_t n, float scale, float* sum,
                          uint16_t* bf16Out = nullptr, bool exactBf16 = false);

/// The same row step with a bf16 mask row (key stride 1), widened (exactly) as it is read.
float attentionSoftmaxRowBf16Mask(float* s, const uint16_t* mask, int64_t n, float scale, float* sum,
                                  uint16_t* bf16Out = nullptr, bool exactBf16 = false);

/// The attention's output rows: to[d] = from[d] * r for d < n, to float or (bf16To) to bf16 rounded
/// to nearest even (NaN to the quiet NaN; denormals kept), as oneDNN's f32 -> bf16 reorder.
void attentionScaleRow(const float* from, float r, int64_t n, float* to);
/// s[j] = float(bf16(s[j])) for j < n (nearest even, NaN quiet, denormals kept): the widened bf16
/// attention's probabilities, kept in float32 for its float32 P·V matmul.
void attentionRoundRowToBf16(float* s, int64_t n);
void attentionScaleRowToBf16(const float* from, float r, int64_t n, uint16_t* to);

namespace detail {
float attentionSoftmaxRowAvx2(float* s, const float* mask, int64_t n, float scale, float* sum);
void attentionRoundRowToBf16Avx2(float* s, int64_t n);
float attentionSoftmaxRowAvx512(float* s, const float* mask, int64_t n, float scale, float* sum, uint16_t* bf16Out,
                                bool cvtneBf16);
float attentionSoftmaxRowBf16MaskAvx512(float* s, const uint16_t* mask, int64_t n, float scale, float* sum,
                                        uint16_t* bf16Out, bool cvtneBf16);
void attentionScaleRowAvx512(const float* from, float r, int64_t n, float* to);
void attentionScaleRowToBf16Avx512(const float* from, float r, int64_t n, uint16_t* to);
}  // namespace detail

}  // namespace verifuse::kernels::cpu
