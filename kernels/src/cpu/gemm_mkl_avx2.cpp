// The epilogue of runMkl (gemm_mkl.cpp) as one pass over c after MKL's product: + bias, then the
// post-ops, with run()'s AVX2 epilogue code (gemm_shared_avx2.h: the same formulas and vector
// math). Built with -mavx2 -mfma; reached only when mklAvailable(), which needs cpu::hasAvx2Fma().
#include <immintrin.h>
#include <omp.h>

#include "cpu/gemm_internal.h"
#include "cpu/gemm_shared_avx2.h"

namespace verifuse::kernels::gemm::detail {

float* productScratchAvx2(size_t floats) { return tlsScratch.get(floats); }

void finishInPlaceAvx2(const Problem& p, const float* src) {
  const int64_t n = p.n, nv = (n + 7) / 8;
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* crow = p.c + i * p.ldc;
      const float* in = src != nullptr ? src + i * n : crow;
      for (int64_t v = 0; v < nv; ++v) {
        const int64_t j = 8 * v;
        const int64_t count = std::min<int64_t>(8, n - j);
        const bool full = count == 8;
        const __m256i mask = maskOf(count);
        // Each element is read (the product, and any operand that is c itself) before it is written.
        __m256 y = loadCols(in + j, full, mask);
        if (p.bias != nullptr) y = _mm256_add_ps(y, loadCols(p.bias + j, full, mask));
        for (int o = 0; o < p.nOps; ++o) y = applyOp(p.ops[o], y, i, j, full, mask);
        if (full) {
          _mm256_storeu_ps(crow + j, y);
        } else {
          _mm256_maskstore_ps(crow + j, mask, y);
        }
      }
    }
  };
  if (p.threads <= 1) {
    rows(0, p.m);
    return;
  }
#pragma omp parallel num_threads(p.threads)
  {
    const int team = omp_get_num_threads(), tid = omp_get_thread_num();
    rows(cut(p.m, team, tid), cut(p.m, team, tid + 1));
  }
}

}  // namespace verifuse::kernels::gemm::detail
