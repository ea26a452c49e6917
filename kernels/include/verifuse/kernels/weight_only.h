// Float32 matrix products whose weights stay int8 in memory (torchao's Int8WeightOnlyConfig
// linears; issue 42): no oneDNN, no LibTorch.
//
// Why: a decode step reads every weight once per token, so its time is the bytes of the weights
// over the memory bandwidth. Folding the widened weight into a float32 constant (what the plan
// does with permute(W).to(float32) otherwise) reads four bytes per weight; this kernel reads one
// and widens in registers.
//
// Semantics, per output element (W an s8 [N, K] matrix, x float32 [M, K]):
//   y[m, n] = sum_k x[m, k] * float(W[n, k])
// float(W) is exact (|W| <= 128 < 2^24): the widening is vpmovsxbd then vcvtdq2ps, sign-extended.
// The sum is float32 fused multiply-adds in ascending k for every element, so a row's result does
// not depend on M, on the other rows or on the number of threads; eager's mm on the widened weight
// sums in MKL's order instead (the freedom every float GEMM of the backend has). The rule
// int8-weight-only-mm (rules/quantized_kernels.cpp) proves the rewrite to this meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "verifuse/support/status.h"

namespace verifuse::kernels {

class Int8WeightMatmul {
 public:
  /// Output columns per packed block: W is packed once in groups of 4 blocks (64 columns, the last
  /// group fewer), each [K][64] s8 with the last block padded with zero weights, so a k step loads
  /// 16 weights of 16 columns at once and a group is read as one sequential stream.
  static constexpr int64_t kBlock = 16;

  /// Packs \p w (row-major s8 [n, k], read once; the caller may free it after). kInvalidArgument
  /// for n or k < 1; kUnimplemented when int8WeightMatmulAvailable() is false.
  static StatusOr<std::unique_ptr<Int8WeightMatmul>> create(const int8_t* w, int64_t n, int64_t k);

  /// y[m, :] for m < rows: x row m at x + m * ldx (k floats), y row m at y + m * ldy (n floats).
  /// const and thread-safe; uses up to omp_get_max_threads() OpenMP threads (1 inside a parallel
  /// region). kInvalidArgument for rows < 0, ldx < k or ldy < n.
  Status run(const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy) const;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  size_t packedBytes() const { return packed_.size(); }
  /// "verifuse int8-weight:avx512" or "verifuse int8-weight:avx2" (the variant the tier picked).
  const char* implInfo() const;

 private:
  Int8WeightMatmul(int64_t n, int64_t k, bool avx512) : n_(n), k_(k), avx512_(avx512) {}
  int64_t n_ = 0, k_ = 0;
  bool avx512_ = false;
  std::vector<int8_t> packed_;
};

/// Whether this CPU's tier (the capability model, capped) runs the kernel: AVX2 + FMA at least.
bool int8WeightMatmulAvailable();

// ---- int4 weights in groups (torchao's IntxWeightOnlyConfig(int4, PerGroup(g)) linears) ----------
//
// Semantics, per output element (codes Q an [N, K] matrix of integers in [-8, 7], one float32
// scale S and one integer zero point Z per row and group of g consecutive k, x float32 [M, K]):
//   y[m, n] = bias[n] + sum_k x[m, k] * w[n, k],   w[n, k] = float32((Q[n, k] - Z[n, k / g]) * S[n, k / g])
// w is exactly torchao's dequantized weight (the difference of two small integers is exact, the
// product is rounded once to float32, as eager's `(q.float() - z.float()) * s`). The kernel
// computes it as a 16-entry table per row and group, T[u] = float32((u - (Z + 8)) * S), looked up
// by the stored nibble u = Q + 8 (vpermps on AVX-512; the same two operations per lane on AVX2).
//
// Packing (the rule int4-weight-only-mm proves the lookup against the source): output columns in
// blocks of 8; for each k, one 32-bit word holds the block's 8 nibbles, column c in bits 4c..4c+3
// (so a column's nibbles are a shift away, with no byte shuffles: on AVX-512 the only shuffle per
// 16 weights is the lookup itself). 16 consecutive k make a 64-byte vector. The sum: lane j of a
// float32 accumulator per (row, output column) adds, in ascending k, the products of the
// k = j (mod 16) with fused multiply-adds; the 16 lanes are reduced by the fixed tree (j, j + 8),
// (j, j + 4), (j, j + 2), (j, j + 1); then the bias is added. Both ISA variants compute exactly
// this (the same bits), for any M and any number of threads.
class Int4WeightMatmul {
 public:
  /// k values per 64-byte vector of a block; the group sizes the packing takes are its multiples.
  static constexpr int64_t kChunk = 16;
  /// Output columns per packed block (the nibbles of one 32-bit word).
  static constexpr int64_t kColumns = 8;

  /// Packs \p codes (row-major s8 [n, k], each in [-8, 7]), \p scale and \p zeroPoint (row-major
  /// [n, k / groupSize]); all read once. kInvalidArgument for n, k < 1, groupSize not a positive
  /// multiple of kChunk (16) dividing k, or a code outside [-8, 7] (the caller then runs the source's
  /// own composition); kUnimplemented when int4WeightMatmulAvailable() is false.
  static StatusOr<std::unique_ptr<Int4WeightMatmul>> create(const int8_t* codes, const float* scale,
                                                            const int8_t* zeroPoint, int64_t n, int64_t k,
                                                            int64_t groupSize);

  /// y[m, :] for m < rows: x row m at x + m * ldx (k floats), y row m at y + m * ldy (n floats);
  /// bias null or n floats. const and thread-safe; up to omp_get_max_threads() OpenMP threads.
  /// kInvalidArgument for rows < 0, ldx < k or ldy < n.
  Status run(const float* x, int64_t rows, int64_t ldx, const float* bias, float* y, int64_t ldy) const;

  /// Output columns per panel of dequantize() (the last panel has n - 64 * (panels - 1)).
  static constexpr int64_t kPanelColumns = 64;
  /// Panel \p panel's dequantized weights, as [64][k] (out[c * k + kk] = w[64 * panel + c][kk],
  /// torchao's float32 numbers exactly; columns past n are 0): for many rows the caller multiplies
  /// x by the panel with a GEMM. kInvalidArgument for a panel out of range.
  Status dequantize(int64_t panel, float* out) const;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t groupSize() const { return group_; }
  bool symmetric() const { return symmetric_; }
  size_t packedBytes() const { return packed_.size() * sizeof(uint32_t); }
  /// The packed blocks (for the variants' comparison in the tests).
  const uint32_t* packedData() const { return packed_.data(); }
  /// "verifuse int4-weight:avx512" or "verifuse int4-weight:avx2".
  const char* implInfo() const;

 private:
  Int4WeightMatmul(int64_t n, int64_t k, int64_t group, bool avx512, bool symmetric)
      : n_(n), k_(k), group_(group), avx512_(avx512), symmetric_(symmetric) {}
  int64_t n_ = 0, k_ = 0, group_ = 0;
  bool avx512_ = false;
  bool symmetric_ = false;  // every zero point 0 (torchao's default mapping): the headers hold the scales only
  std::vector<uint32_t> packed_;
};

/// Whether this CPU's tier runs Int4WeightMatmul: AVX2 + FMA at least.
bool int4WeightMatmulAvailable();

}  // namespace verifuse::kernels
