// quantize_per_tensor's scalar loop and the ISA dispatch (quantize.h says what is computed).
#include "verifuse/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels {

namespace detail {

void quantizeF32Scalar(const float* src, int64_t n, const QuantizeParams& p, void* dst) {
  auto body = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    for (int64_t i = 0; i < n; ++i) {
      const float v = std::nearbyint(src[i] * p.invScale) + p.zeroPoint;
      out[i] = std::isnan(v) ? T(0) : static_cast<T>(std::min(std::max(v, p.qmin), p.qmax));
    }
  };
  if (p.u8) body(static_cast<uint8_t*>(dst));
  else body(static_cast<int8_t*>(dst));
}

}  // namespace detail

void quantizeF32(const float* src, int64_t n, const QuantizeParams& p, void* dst) {
  static const bool avx512 = cpu::hasAvx512();
  if (avx512) detail::quantizeF32Avx512(src, n, p, dst);
  else detail::quantizeF32Scalar(src, n, p, dst);
}

}  // namespace verifuse::kernels
