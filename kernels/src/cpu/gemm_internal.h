// Internal interface between the baseline-ISA GEMM front end (gemm.cpp: packing, checks,
// dispatch) and the kernels (gemm_avx2.cpp, gemm_avx512.cpp; bf16: gemm_bf16_avx512.cpp,
// gemm_bf16_widening_avx512.cpp, gemm_bf16_avx2.cpp). Not a public header.
#pragma once

#include <cstdint>
#include <span>

#include "verifuse/kernels/gemm.h"
#include "verifuse/kernels/ops.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels::gemm::detail {

/// Columns per packed B panel (two ymm registers).
inline constexpr int64_t kNR = 16;
/// Largest K block chosen at packing time: a 6×16 tile's B panel (kBlockMax·16·4 = 16 KiB) stays
/// in the 32 KiB L1d while a whole row block of A streams past it from L2.
inline constexpr int64_t kBlockMax = 256;
inline constexpr int kMaxEpiOps = 16;

/// One post-op, resolved against the call's operands.
struct EpiOp {
  enum class Kind : uint8_t {
    kRelu, kLeakyRelu, kClamp, kLinear, kHardswish, kHardsigmoid,  // eltwise, alpha/beta below
    kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kElu,             // vecmath_avx2.h
    kSum,                                                          // x + alpha·operand
    kBinary,                                                       // alg(x, operand)
  };
  /// How the operand broadcasts over the [M, N] output.
  enum class Bcast : uint8_t { kFull, kPerColumn, kPerRow, kScalar };
  Kind kind = Kind::kRelu;
  BinaryAlg alg = BinaryAlg::kAdd;
  Bcast bcast = Bcast::kFull;
  /// The operand is exactly c (same pointer and row stride): the kernel must read it before the
  /// tile is written, and copy it first when c holds partial sums between K blocks.
  bool aliasesC = false;
  float alpha = 0.f, beta = 0.f;
  /// Operand element (i, j) is src[(i - rowOff)·ld + (j - colOff)] (offsets: per-thread copies).
  const float* src = nullptr;
  int64_t ld = 0;
  int64_t rowOff = 0, colOff = 0;
};

/// One checked run() call.
struct Problem {
  const float* a = nullptr;
  int64_t m = 0, lda = 0;
  int64_t k = 0, n = 0;
  const PackedWeights* b = nullptr;  // null for runMkl
  float* c = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;
  EpiOp ops[kMaxEpiOps];
  int nOps = 0;
  /// OpenMP threads to ask for (gemm::threadsFor).
  int threads = 1;
};

/// OpenMP threads for an m x k x n product (gemm::threadsFor).
int threadsForMacs(int64_t m, int64_t k, int64_t n);

/// This thread's 64-byte aligned scratch of at least \p floats (the GEMM kernels' per-thread
/// scratch; valid until the next call on this thread), or nullptr (gemm_mkl_avx2.cpp).
float* productScratchAvx2(size_t floats);

/// run()'s checks and post-op resolution for c[m, n] = epilogue(a[m, k] · B): fills \p p but for
/// b and threads (p.m == 0 when there is nothing to do). Shared by run() and runMkl().
Status resolveProblem(const float* a, int64_t m, int64_t lda, int64_t k, int64_t n, float* c, int64_t ldc,
                      const Epilogue& ep, const float* residual, int64_t ldr,
                      std::span<const float* const> binaryOperands, Problem& p);

/// c = epilogue(c) in place, or c = epilogue(src) from a dense [m, n] \p src (row stride n) when
/// src is not null: bias and p.ops with run()'s AVX2 epilogue code, rows split over p.threads
/// (gemm_mkl_avx2.cpp; call only when cpu::hasAvx2Fma()).
void finishInPlaceAvx2(const Problem& p, const float* src);

/// Runs a checked problem with m >= 1 (gemm_avx2.cpp; call only when cpu::hasAvx2Fma()).
Status runAvx2(const Problem& p);

/// One full B panel from [N, K] weights: panel[kk·16 + c] = w[(n0 + c)·k + k0 + kk] for c < 16,
/// kk < kb (8×8 register transposes; gemm_avx2.cpp, call only when cpu::hasAvx2Fma()). A copy:
/// the same floats as the scalar loop, in the same places.
void packPanelNkAvx2(const float* w, int64_t k, int64_t n0, int64_t k0, int64_t kb, float* panel);

/// The same with the AVX-512 kernel (gemm_avx512.cpp; call only when cpu::hasAvx512()).
Status runAvx512(const Problem& p);

/// One checked runBf16() call.
struct ProblemBf16 {
  const uint16_t* a = nullptr;
  int64_t m = 0, lda = 0;
  const PackedWeightsBf16* b = nullptr;
  uint16_t* c = nullptr;
  int64_t ldc = 0;
  const float* bias = nullptr;
  EpiOp ops[kMaxEpiOps];  // eltwise or kSum (its operand: residual)
  int nOps = 0;
  const uint16_t* residual = nullptr;
  int64_t ldr = 0;
  int threads = 1;
};

/// Runs a checked bf16 problem with m >= 1 on AVX512-BF16 (gemm_bf16_avx512.cpp; only when
/// activeBf16Variant() is kAvx512Bf16).
Status runBf16Avx512(const ProblemBf16& p);

/// The same on AVX2+FMA, widening bf16 to float32 (gemm_bf16_avx2.cpp; only when cpu::hasAvx2Fma()).
Status runBf16Avx2(const ProblemBf16& p);

/// The same on AVX-512 without bf16 instructions, widening (gemm_bf16_widening_avx512.cpp; only
/// when cpu::hasAvx512()).
Status runBf16WideningAvx512(const ProblemBf16& p);

}  // namespace verifuse::kernels::gemm::detail
