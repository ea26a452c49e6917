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

}  // namespace verifuse::kernels
