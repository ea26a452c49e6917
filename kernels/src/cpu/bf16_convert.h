// Internal to kernels/: bf16 <-> float32 conversion of dense buffers, for the kernels that run a
// bf16 model's ops on float32 arithmetic where the CPU has no bf16 instructions (the widened bf16
// convolution, kernels/src/onednn/conv.cpp). AVX2 loops where the CPU has AVX2, scalar otherwise;
// OpenMP over chunks for large buffers.
#pragma once

#include <cstdint>

namespace verifuse::kernels::cpu {

/// dst[i] = float(src[i]) for i < n: exact (a bf16 is the high half of a float32).
void widenBf16(const uint16_t* src, float* dst, int64_t n);

/// dst[i] = bf16(src[i]) for i < n, rounded to nearest even as torch's .to(torch.bfloat16)
/// (c10::round_to_nearest_even: NaN -> 0x7FC0, overflow -> inf, denormals kept).
void narrowToBf16(const float* src, uint16_t* dst, int64_t n);

namespace detail {
void widenBf16Avx2(const uint16_t* src, float* dst, int64_t n);
void narrowToBf16Avx2(const float* src, uint16_t* dst, int64_t n);
}  // namespace detail

}  // namespace verifuse::kernels::cpu
