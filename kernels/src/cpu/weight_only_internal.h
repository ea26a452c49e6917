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

/// Int4WeightMatmul's variants: one packed block (Int4WeightMatmul::kColumns output columns)
/// against every row of x, y[m, c] for c < cols (bias null or the block's first column's). A
/// block is, per group, a header (the columns' 8 float32 scales, then, unless symmetric, their 8
/// zero points plus 8 as float32) and the group's 64-byte vectors (16 k, a 32-bit word of 8
/// nibbles each). Symmetric blocks (every zero point 0) use 8 as every offset zero point.
void int4BlockAvx512(const float* x, int64_t rows, int64_t ldx, const uint32_t* block, int64_t groups,
                     int64_t vectorsPerGroup, bool symmetric, const float* bias, float* y, int64_t ldy, int64_t cols);
void int4BlockAvx2(const float* x, int64_t rows, int64_t ldx, const uint32_t* block, int64_t groups,
                   int64_t vectorsPerGroup, bool symmetric, const float* bias, float* y, int64_t ldy, int64_t cols);
/// Int4WeightMatmul::dequantize(): a packed block's 8 columns dequantized to float32 rows [8][k]
/// (the kernels' two float32 operations). Compiled for AVX2 (the loop is vectorized there).
void int4PanelAvx2(const uint32_t* block, int64_t groups, int64_t groupSize, bool symmetric, int64_t k, float* out);

/// 32-bit words per group header (symmetric or not) and per vector.
constexpr int64_t int4HeaderWords(bool symmetric) { return symmetric ? 8 : 16; }
constexpr int64_t kInt4VectorWords = 16;

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
