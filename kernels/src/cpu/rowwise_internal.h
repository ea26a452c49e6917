// Internal interface of the row engine: the per-ISA kernel table the interpreter (rowwise.cpp)
// calls once per instruction per tile. Three implementations: rowwise_scalar.cpp (baseline ISA,
// also the tests' oracle), rowwise_avx2.cpp (AVX2+FMA, vecmath_avx2.h) and rowwise_avx512.cpp
// (the AVX2 table 16 lanes wide, same bits).
#pragma once

#include <cstdint>
#include <climits>

#include "verifuse/kernels/rowwise.h"

namespace verifuse::kernels::rowwise::detail {

/// The instruction classes (RowOp's enumerators are grouped by class): rowwise_program.cpp
/// validates and prints programs with them, the interpreter plans with them.
inline bool isBinary(RowOp op) { return op >= RowOp::kAdd && op <= RowOp::kMin; }
inline bool isUnary(RowOp op) { return (op >= RowOp::kPow && op <= RowOp::kCastBf16) || op == RowOp::kRotateHalf; }
inline bool isReduce(RowOp op) { return op >= RowOp::kSum && op <= RowOp::kRowMin; }

/// An operand over a (rows x w) block: !bcast: element (r, c) = p[r * ld + c] for c < valid and
/// 0 beyond (an input row read in place ends at the row's end; scratch slots are padded, valid >= w);
/// bcast: element (r, c) = p[r * ld] (ld 1: a per-row scalar slot, ld 0: a constant).
struct Src {
  const float* p = nullptr;
  int64_t ld = 0;
  bool bcast = false;
  int64_t valid = INT64_MAX;
};

/// A layer norm or RMSNorm program recognised as a whole (rowwise.cpp, matchNorm): per row,
/// mean = sum(x) / C and var = sum(d * d) / C with d = x - mean (layer norm), or var = sum(x * x) / C
/// (RMSNorm), each sum in the kSum order; rstd = 1 / sqrt(var + eps); y = d * rstd (x * rstd),
/// rounded to bf16 if castMid, times w, plus b, rounded to bf16 if castEnd: the instructions the
/// interpreter would run, in its order, so the same bits, in one kernel with no scratch traffic.
struct NormRow {
  bool layerNorm = true;
  bool xBf16 = false;    ///< x is bf16 (widened exactly), else f32
  bool outBf16 = false;  ///< y stored as bf16 (rounded to nearest even), else f32
  bool castMid = false;
  bool castEnd = false;
  float eps = 0.f;
};

/// Kernels over blocks of `rows` rows x `w` columns. For the vectorised table, w is a multiple of
/// 8 for unary/binary/where/copy (the interpreter pads rows and scalar slots to 8).
struct IsaKernels {
  const char* name;
  /// d = op(a) for the unary ops (kPow ... kCastBf16), parameters f0, f1 (a never bcast).
  void (*unary)(RowOp op, float f0, float f1, float* d, int64_t ldd, Src a, int64_t rows, int64_t w);
  /// d = op(a, b) for kAdd ... kMin.
  void (*binary)(RowOp op, float* d, int64_t ldd, Src a, Src b, int64_t rows, int64_t w);
  /// d = op2(op1(a, b), c), or op2(c, op1(a, b)) if swap2: two binary ops in one pass (the
  /// intermediate is rounded to float as before, it just never goes to memory).
  void (*binary2)(RowOp op1, RowOp op2, bool swap2, float* d, int64_t ldd, Src a, Src b, Src c, int64_t rows,
                  int64_t w);
  /// d = m != 0 ? a : b.
  void (*where)(float* d, int64_t ldd, Src m, Src a, Src b, int64_t rows, int64_t w);
  /// d = a (materialises a broadcast operand).
  void (*copy)(float* d, int64_t ldd, Src a, int64_t rows, int64_t w);
  /// kSum / kMean / kRowMax / kRowMin over x[0, n) (order: see RowOp::kSum).
  float (*reduce)(RowOp op, const float* x, int64_t n);
  /// kSum / kMean of the products a[i] * b[i] (each rounded, then summed in the kSum order): the
  /// fused form of reduce(mul(a, b)), bit-identical to it.
  float (*reduceProduct)(RowOp op, const float* a, const float* b, int64_t n);
  /// d[0, n) = rotate_half(x[0, n)), n even.
  void (*rotateHalf)(float* d, const float* x, int64_t n);
  /// d[0, n) = widen(src[0, n)) (dense), d[n, padTo) = 0.
  void (*load)(ElemType t, float* d, const void* src, int64_t n, int64_t padTo);
  /// dst[0, n) = narrow(s[0, n)), or narrow(*s) everywhere if bcast.
  void (*store)(ElemType t, void* dst, const float* s, bool bcast, int64_t n);
  /// Optional (null: the interpreter runs norms too): one row of a NormRow program; x and y are
  /// the row's C elements (y may be x itself), w and b float32 [C] or null.
  void (*normRow)(const NormRow& n, const void* x, void* y, const float* w, const float* b, int64_t C) = nullptr;
};

const IsaKernels& scalarKernels();
/// Only valid when cpu::hasAvx2Fma().
const IsaKernels& avx2Kernels();
/// Only valid when cpu::hasAvx512() (and hasAvx2Fma(): it calls into the AVX2 table).
const IsaKernels& avx512Kernels();

/// The scalar semantics of one unary op (used for constant folding and by the scalar table).
float scalarUnary(RowOp op, float f0, float f1, float x);
float scalarBinary(RowOp op, float a, float b);

/// torch's float -> bf16 (c10::round_to_nearest_even) and bf16 -> float. NOTE: static, so the
/// copies compiled with -mavx2 never stand in for the baseline ones at link time.
static inline uint16_t floatToBf16(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16ToFloat(uint16_t b) { return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16); }

}  // namespace verifuse::kernels::rowwise::detail
