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

}  // namespace verifuse::kernels::weight_only
