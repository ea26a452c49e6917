// Pieces shared by the AVX2 and AVX-512 GEMM kernels (gemm_avx2.cpp, gemm_avx512.cpp): the fused
// epilogue (8 columns at a time, AVX2 vector math), per-thread scratch, the thread grid, and the
// per-thread copies of operands that alias c. Included only by files built with at least
// -mavx2 -mfma. NOTE: everything here has internal linkage (anonymous namespace) on purpose: an
// inline function with external linkage compiled into both files would be merged by the linker,
// and the AVX-512 copy could then run on a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cpu/gemm_internal.h"
#include "cpu/vecmath_avx2.h"

namespace verifuse::kernels::gemm::detail {
namespace {

#define VF_GEMM_INLINE inline __attribute__((always_inline))

/// 8x8 transpose of the rows r[0..7]: column q is stored as 8 floats at dst + q·stride, in
/// increasing q (with stride < 8 each store's tail is overwritten by the next column: callers
/// keep 8 - stride floats of slack after the last one). Packing A panels (stride MR) and B panels
/// from [N, K] weights (stride 16).
VF_GEMM_INLINE void transposeStore8x8(const __m256 (&r)[8], float* dst, int64_t stride) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(dst + 0 * stride, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}

// ---- epilogue ------------------------------------------------------------------------------------

/// One thread's view of the call: c and the resolved post-ops (operands may point at its copies).
struct Ctx {
  float* c;
  int64_t ldc;
  int64_t n;
  const float* bias;
  const EpiOp* ops;
  int nOps;
};

VF_GEMM_INLINE __m256i maskOf(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

VF_GEMM_INLINE __m256 loadCols(const float* p, bool full, __m256i mask) {
  return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

VF_GEMM_INLINE __m256 operandAt(const EpiOp& e, int64_t i, int64_t j, bool full, __m256i mask) {
  switch (e.bcast) {
    case EpiOp::Bcast::kFull:
      return loadCols(e.src + (i - e.rowOff) * e.ld + (j - e.colOff), full, mask);
    case EpiOp::Bcast::kPerColumn: return loadCols(e.src + j, full, mask);
    case EpiOp::Bcast::kPerRow: return _mm256_broadcast_ss(e.src + i);
    case EpiOp::Bcast::kScalar: return _mm256_broadcast_ss(e.src);
  }
  return _mm256_setzero_ps();
}

/// y = op(y) for the 8 elements c[i][j..j+8). The activations are the shared vector math's
/// (eager PyTorch's formulas and edge cases).
VF_GEMM_INLINE __m256 applyOp(const EpiOp& e, __m256 y, int64_t i, int64_t j, bool full,
                              __m256i mask) {
  namespace vm = cpu::avx2;
  switch (e.kind) {
    case EpiOp::Kind::kRelu: return vm::relu(y);
    case EpiOp::Kind::kLeakyRelu: return vm::leakyRelu(y, e.alpha);
    case EpiOp::Kind::kClamp: return vm::clamp(y, e.alpha, e.beta);
    case EpiOp::Kind::kLinear:
      return _mm256_fmadd_ps(_mm256_set1_ps(e.alpha), y, _mm256_set1_ps(e.beta));
    case EpiOp::Kind::kHardswish: return vm::hardswish(y);
    case EpiOp::Kind::kHardsigmoid: return vm::hardsigmoid(y);
    case EpiOp::Kind::kGeluErf: return vm::geluErf(y);
    case EpiOp::Kind::kGeluTanh: return vm::geluTanh(y);
    case EpiOp::Kind::kSilu: return vm::silu(y);
    case EpiOp::Kind::kSigmoid: return vm::sigmoid(y);
    case EpiOp::Kind::kTanh: return vm::tanh(y);
    case EpiOp::Kind::kElu: return vm::elu(y, e.alpha);
    case EpiOp::Kind::kSum:
      return _mm256_fmadd_ps(_mm256_set1_ps(e.alpha), operandAt(e, i, j, full, mask), y);
    case EpiOp::Kind::kBinary: {
      const __m256 o = operandAt(e, i, j, full, mask);
      switch (e.alg) {
        case BinaryAlg::kAdd: return _mm256_add_ps(y, o);
        case BinaryAlg::kSub: return _mm256_sub_ps(y, o);
        case BinaryAlg::kMul: return _mm256_mul_ps(y, o);
        case BinaryAlg::kDiv: return _mm256_div_ps(y, o);
        case BinaryAlg::kMax: return vm::maximum(y, o);
        case BinaryAlg::kMin: return vm::minimum(y, o);
      }
      return y;
    }
  }
  return y;
}

/// c[row0.., col0..] = post-ops(buf + bias) for rows x cols (cols <= 16·NP).
[[maybe_unused]] void epilogue(const Ctx& x, const float* buf, int64_t ldb, int64_t rows, int64_t cols,
              int64_t row0, int64_t col0) {
  const int64_t nv = (cols + 7) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = row0 + r;
    float* crow = x.c + i * x.ldc;
    for (int64_t v = 0; v < nv; ++v) {
      const int64_t j = col0 + 8 * v;
      const int64_t count = std::min<int64_t>(8, cols - 8 * v);
      const bool full = count == 8;
      const __m256i mask = maskOf(count);
      __m256 y = _mm256_load_ps(buf + r * ldb + 8 * v);
      if (x.bias != nullptr) y = _mm256_add_ps(y, loadCols(x.bias + j, full, mask));
      for (int o = 0; o < x.nOps; ++o) y = applyOp(x.ops[o], y, i, j, full, mask);
      if (full) {
        _mm256_storeu_ps(crow + j, y);
      } else {
        _mm256_maskstore_ps(crow + j, mask, y);
      }
    }
  }
}

// ---- per-thread work -----------------------------------------------------------------------------

/// A thread's growing, 64-byte aligned scratch (packed A, operand copies); freed at thread exit.
struct Scratch {
  float* p = nullptr;
  size_t cap = 0;
  ~Scratch() { std::free(p); }
  float* get(size_t floats) {
    if (floats > cap) {
      std::free(p);
      const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
      p = static_cast<float*>(std::aligned_alloc(64, bytes));
      cap = p != nullptr ? bytes / sizeof(float) : 0;
    }
    return p;
  }
};
thread_local Scratch tlsScratch;

/// This thread's copies of the operands that are c itself (sum / full binary post-ops): c holds
/// partial sums between K blocks, so the kernel must read such an operand from a copy taken before
/// the first block. Fills \p ops from \p p (operand pointers redirected to the copies, which sit
/// in \p scratch after \p reserved floats). \returns the scratch (nullptr: allocation failed).
[[maybe_unused]] float* prepareOperands(const Problem& p, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                       bool severalBlocks, size_t reserved, EpiOp* ops) {
  int nCopies = 0;
  for (int o = 0; o < p.nOps; ++o) {
    ops[o] = p.ops[o];
    if (ops[o].aliasesC && severalBlocks) ++nCopies;
  }
  const size_t copyFloats = static_cast<size_t>((m1 - m0) * (n1 - n0));
  float* scratch = tlsScratch.get(std::max<size_t>(16, reserved + copyFloats * nCopies));
  if (scratch == nullptr) return nullptr;
  float* copy = scratch + reserved;
  for (int o = 0; o < p.nOps; ++o) {
    EpiOp& e = ops[o];
    if (!(e.aliasesC && severalBlocks)) continue;
    for (int64_t i = m0; i < m1; ++i) {
      std::memcpy(copy + (i - m0) * (n1 - n0), e.src + i * e.ld + n0, (n1 - n0) * sizeof(float));
    }
    e.src = copy;
    e.ld = n1 - n0;
    e.rowOff = m0;
    e.colOff = n0;
    copy += copyFloats;
  }
  return scratch;
}


/// How \p nt threads split the output: tm row ranges x tn panel ranges.
struct Grid {
  int tm = 1, tn = 1;
};
Grid chooseGrid(int nt, int64_t rowTiles, int64_t panels) {
  // Prefer splitting N: each thread then streams its own part of B (the big operand) and the
  // packed A (small) is duplicated. Split M only when there are too few panels.
  for (int tn = nt; tn >= 1; --tn) {
    if (nt % tn != 0) continue;
    const int tm = nt / tn;
    if ((tn == 1 || panels >= 2 * tn) && rowTiles >= tm) return {tm, tn};
  }
  return {1, 1};
}

/// [begin, end) of part \p i of \p total units cut into \p parts near-equal contiguous pieces.
VF_GEMM_INLINE int64_t cut(int64_t total, int parts, int i) { return total * i / parts; }

/// Runs \p region(m0, m1, q0, q1) on \p nt OpenMP threads over disjoint parts of the [m, panels]
/// output: rows cut at multiples of \p rowUnit, panels at multiples of \p panelUnit (chooseGrid
/// picks the split; nt == 1 runs the whole output here). \returns false if any region did.
template <class Region>
bool splitOverThreads(int nt, int64_t m, int64_t rowUnit, int64_t panels, int64_t panelUnit,
                      Region&& region) {
  if (nt == 1) return region(int64_t{0}, m, int64_t{0}, panels);
  const int64_t rowTiles = (m + rowUnit - 1) / rowUnit;
  const int64_t groups = (panels + panelUnit - 1) / panelUnit;
  std::atomic<bool> ok{true};
#pragma omp parallel num_threads(nt)
  {
    const int team = omp_get_num_threads(), tid = omp_get_thread_num();
    const Grid grid = chooseGrid(team, rowTiles, panels);
    if (tid < grid.tm * grid.tn) {
      const int im = tid / grid.tn, in = tid % grid.tn;
      const int64_t m0 = std::min(m, cut(rowTiles, grid.tm, im) * rowUnit);
      const int64_t m1 = std::min(m, cut(rowTiles, grid.tm, im + 1) * rowUnit);
      const int64_t q0 = std::min(panels, panelUnit * cut(groups, grid.tn, in));
      const int64_t q1 = std::min(panels, panelUnit * cut(groups, grid.tn, in + 1));
      if (m0 < m1 && q0 < q1 && !region(m0, m1, q0, q1)) ok = false;
    }
  }
  return ok;
}

}  // namespace
}  // namespace verifuse::kernels::gemm::detail
