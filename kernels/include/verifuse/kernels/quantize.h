// quantize_per_tensor of float32 values to u8/s8 codes in one pass (issue 17): the quantize that
// sits before every int8 linear whose input comes from a float32 op (BERT's layer norms, GELU,
// attention). oneDNN-free and LibTorch-free.
//
// Per element, in float32, exactly the steps of torch's composition
// (torch/ao/quantization/fx/_decomposed.py: clamp(round(x * (1/scale)) + zero_point, qmin, qmax)):
//   t    = x * invScale                 (one float32 product; invScale = float(1.0 / scale))
//   r    = nearbyint(t)                 (round half to even)
//   v    = clamp(r + zeroPoint, qmin, qmax)
//   code = v, and 0 for a NaN x (what torch's float-to-u8/s8 conversion gives for NaN)
// so the codes are bit-identical to eager's. The AVX-512 variant (roundscale, masked tail) is
// taken when cpu::hasAvx512(); otherwise a scalar loop.
#pragma once

#include <cstdint>

namespace verifuse::kernels {

struct QuantizeParams {
  float invScale = 1.f;
  float zeroPoint = 0.f;
  float qmin = 0.f, qmax = 255.f;  ///< within the dtype's range, qmin <= zeroPoint <= qmax
  bool u8 = true;                  ///< u8 codes, else s8
};

/// Quantizes src[0..n) into dst[0..n) (uint8_t or int8_t, by p.u8). Single-threaded: callers split
/// the range across threads.
void quantizeF32(const float* src, int64_t n, const QuantizeParams& p, void* dst);

namespace detail {
void quantizeF32Scalar(const float* src, int64_t n, const QuantizeParams& p, void* dst);
void quantizeF32Avx512(const float* src, int64_t n, const QuantizeParams& p, void* dst);
}  // namespace detail

}  // namespace verifuse::kernels
