// The ISA variants of Int8WeightMatmul (weight_only.h): one column-block group of the packed
// weight against every row of x. Reached only after cpu::hasAvx512() / cpu::hasAvx2Fma().
#pragma once

#include <cstdint>

namespace verifuse::kernels::weight_only {

/// y[m, n0 + c] for m < rows and c < cols (cols <= blocks * 16), from one packed group of `blocks`
/// blocks at w: [k][blocks * 16] s8, the group's blocks interleaved per k (one sequential stream).
void groupAvx512(const float* x, int64_t rows, int64_t ldx, const int8_t* w, int64_t blocks, int64_t k, float* y,
                 int64_t ldy, int64_t cols);
void groupAvx2(const float* x, int64_t rows, int64_t ldx, const int8_t* w, int64_t blocks, int64_t k, float* y,
               int64_t ldy, int64_t cols);

/// One pass of R rows over a group: B blocks at a time where the group has them, one at a time
/// otherwise. Isa::tile<R, B>(x, ldx, w, kStride, k, y, ldy, cols) is an ISA's register tile of R
/// rows x B blocks, block b's 16 weights of step kk at w + kk * kStride + b * 16.
template <class Isa, int R, int B>
void rowsOf(const float* x, int64_t ldx, const int8_t* w, int64_t blocks, int64_t k, float* y, int64_t ldy,
            int64_t cols) {
  constexpr int64_t kBlock = 16;
  const int64_t kStride = blocks * kBlock;
  int64_t b = 0;
  for (; b + B <= blocks; b += B) {
    Isa::template tile<R, B>(x, ldx, w + b * kBlock, kStride, k, y + b * kBlock, ldy, cols - b * kBlock);
  }
  for (; b < blocks; ++b) {
    Isa::template tile<R, 1>(x, ldx, w + b * kBlock, kStride, k, y + b * kBlock, ldy, cols - b * kBlock);
  }
}

}  // namespace verifuse::kernels::weight_only
