// Applies vecmath_avx512.h functions to arrays for the tests (built with the AVX-512 flags; call
// only after cpu::hasAvx512()).
#include "cpu/vecmath_avx512.h"

#include <cstring>

#include "vecmath_eval.h"

namespace verifuse::kernels::cpu::testing {

void evalAvx512(VecFn fn, const float* x, float* y, size_t n) {
  // The functions vecmath_avx512.h does not have run 8 lanes wide.
  if (fn != VecFn::kGeluErf && fn != VecFn::kGeluErfForBf16 && fn != VecFn::kGeluTanhForBf16 && fn != VecFn::kExp &&
      fn != VecFn::kExpForBf16Probabilities) {
    evalAvx2(fn, x, y, n);
    return;
  }
  for (size_t i = 0; i < n; i += 16) {
    float in[16] = {}, out[16];
    const size_t m = n - i < 16 ? n - i : 16;
    std::memcpy(in, x + i, m * sizeof(float));
    const __m512 v = _mm512_loadu_ps(in);
    // exp: vecmath_avx2.h's clamps, then vecmath_avx512.h's expClamped (vscalefps scaling).
    const __m512 clamped = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), v));
    _mm512_storeu_ps(out, fn == VecFn::kExp              ? avx512::detail::expClamped(clamped)
                          : fn == VecFn::kExpForBf16Probabilities ? avx512::detail::expForBf16Probabilities(v)
                          : fn == VecFn::kGeluErf        ? avx512::geluErf(v)
                          : fn == VecFn::kGeluErfForBf16 ? avx512::geluErfForBf16(v)
                                                         : avx512::geluTanhForBf16(v));
    std::memcpy(y + i, out, m * sizeof(float));
  }
}

}  // namespace verifuse::kernels::cpu::testing
