// verifuse's own single-precision GEMM for CPU inference: c = epilogue(a · B) with B (a layer's
// weights) packed once into the kernel's panel layout. AVX-512 where the CPU has it, else AVX2+FMA;
// OpenMP; no oneDNN, no LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "verifuse/kernels/ops.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels::gemm {

/// How the caller's weight matrix is stored: nn.Linear holds W[N,K] (y = x·Wᵀ); GPT-2's Conv1D,
/// addmm(bias, x, W) and mm(x, W) hold W[K,N] (y = x·W).
enum class WeightOrder { kNK, kKN };

/// The weights packed once into the kernel's panel layout; owns its 64-byte aligned buffer.
/// Immutable after packWeights(), so one object may be shared by any number of threads.
///
/// Layout (for reports and tests; the kernel is the only reader): K is cut into blocks of
/// kBlock() rows (the last one may be shorter); N is padded with zero columns to nPadded(), a
/// multiple of 16. Block b (rows k0..k0+kb) is stored at data() + k0·nPadded(); inside it, panel j
/// (columns 16j..16j+15) is kb×16 floats, row-major: element (k, n) of B sits at
/// data()[k0·nPadded() + (n/16)·kb·16 + (k-k0)·16 + n%16].
class PackedWeights {
 public:
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  /// Reduction length K (columns of a).
  int64_t k() const { return k_; }
  /// Output columns N.
  int64_t n() const { return n_; }
  /// Bytes of the packed buffer (K · nPadded() · 4).
  size_t bytes() const { return static_cast<size_t>(k_) * static_cast<size_t>(nPadded_) * 4; }
  /// N rounded up to a multiple of 16 (the padded columns hold zeros).
  int64_t nPadded() const { return nPadded_; }
  /// Rows of K per block (fixed at packing time; also fixes the summation order, see run()).
  int64_t kBlock() const { return kBlock_; }
  const float* data() const { return data_; }

 private:
  friend StatusOr<std::shared_ptr<const PackedWeights>> packWeights(const float*, int64_t, int64_t,
                                                                    WeightOrder);
  PackedWeights(int64_t k, int64_t n, int64_t nPadded, int64_t kBlock, float* data)
      : k_(k), n_(n), nPadded_(nPadded), kBlock_(kBlock), data_(data) {}
  int64_t k_, n_, nPadded_, kBlock_;
  float* data_;
};

/// Packs \p w (dense, row-major: [n, k] for WeightOrder::kNK, [k, n] for kKN) into the kernel's
/// layout. Costs one pass over the weights; the caller's buffer may die afterwards.
/// \returns kInvalidArgument for k < 1, n < 1 or a null \p w; kInternal if allocation fails.
/// Packing needs no AVX2, so it works on any CPU (run() is what needs available()).
StatusOr<std::shared_ptr<const PackedWeights>> packWeights(const float* w, int64_t k, int64_t n,
                                                           WeightOrder order);

/// What is applied to each output tile right after its last K block, while it is still in L1:
/// + bias[n] (optional, [N]), then \p postOps in order. Supported post-ops (the same vocabulary as
/// kernels::PostOp in ops.h, with eager PyTorch's formulas):
///  - every eltwise activation: relu, leaky_relu(slope), clamp(lo, hi), linear(a, b) = fma(a, x, b),
///    hardswish = x·min(max(x+3, 0), 6)/6, hardsigmoid = min(max(x+3, 0), 6)/6, gelu_erf,
///    gelu_tanh, silu, sigmoid, tanh, elu(alpha), all from the shared AVX2 vector math
///    (kernels/src/cpu/vecmath_avx2.h: within 4 ulp, eager's NaN/inf behaviour);
///  - sum(scale): c = c + scale·residual (the `residual` argument of run());
///  - binary(alg, dims): c = alg(c, operand) for every BinaryAlg, the operand dense row-major f32
///    with dims {1, N} (per column), {M, N} (full), {M, 1} (per row) or {1, 1}. max/min propagate
///    NaN like torch.maximum/minimum. Other dims give kUnimplemented.
/// At most 16 post-ops (more: kUnimplemented).
struct Epilogue {
  const float* bias = nullptr;
  std::vector<PostOp> postOps;
};

/// c[M,N] (row stride \p ldc) = epilogue(a[M,K] (row stride \p lda) · B), K = b.k(), N = b.n().
/// \p residual (row stride \p ldr, >= N) is read by sum post-ops; \p binaryOperands holds one
/// pointer per binary post-op, in post-op order.
///
/// Aliasing: \p c may be the same buffer as \p residual (same pointer and ldr == ldc: the in-place
/// residual add), and the same as a full {M, N} binary operand (then ldc must be N). Any other
/// overlap of \p c with an input is kInvalidArgument.
///
/// Numerics (NOTE: an invariant the tests check bit for bit): every c[i][j] is first the float32
/// fused-multiply-add chain acc = fma(a[i][k], B[k][j], acc) over k = 0, 1, ..., K-1 starting
/// from acc = +0 (one rounding per step, no reassociation), then + bias[j], then the post-ops.
/// The result therefore does not depend on the blocking, on the number of OpenMP threads or on
/// the position of the row in a tile: any thread count gives bit-identical output.
///
/// Threading: OpenMP, up to omp_get_max_threads() threads (fewer for small problems); the output
/// is split into disjoint row/column ranges, so no thread sums over K for another.
/// \returns kUnimplemented if !available() or a post-op is not supported (the caller then uses
/// oneDNN); kInvalidArgument for bad shapes, strides, pointers or operand counts. m == 0 is a
/// no-op (OK).
Status run(const float* a, int64_t m, int64_t lda, const PackedWeights& b, float* c, int64_t ldc,
           const Epilogue& ep, const float* residual = nullptr, int64_t ldr = 0,
           std::span<const float* const> binaryOperands = {});

/// The number of OpenMP threads run() uses for an \p m-row product with \p b when called from here:
/// omp_get_max_threads() (1 inside a parallel region), fewer when each thread would get less than
/// ~2^18 multiply-adds. Threads never split K.
int threadsFor(int64_t m, const PackedWeights& b);

/// Whether this CPU can run() (AVX2 + FMA + F16C with OS support: cpu::hasAvx2Fma()).
bool available();

/// The kernel variants run() chooses from: the AVX-512 one (8x48 tiles, the whole K in registers)
/// wherever cpu::hasAvx512(), else the AVX2 one (6x16 tiles over K blocks). Both compute the same
/// FMA chains, so their results are bit-identical (see run()), except after a GELU (erf) post-op,
/// which the AVX-512 variant evaluates 16 lanes wide (cpu/vecmath_avx512.h: within 2 ulp of the
/// AVX2 vector math, same accuracy bound).
enum class Isa { kAvx2, kAvx512 };
/// The variant run() uses now.
Isa activeIsa();
/// Tests and benchmarks: restrict run() to \p isa (kAvx512 is still only used where the CPU has
/// it), and runBf16() to kAvx2Widening with kAvx2. Process-wide; do not call while another thread
/// is inside run() or runBf16().
void setMaxIsa(Isa isa);

/// Whether run() supports \p op as a post-op (today every activation, sum and binary). Binary dims
/// are checked by run(), which knows M and N (kUnimplemented for dims it does not take).
bool supportsPostOp(const PostOp& op);

// ---- bfloat16 ---------------------------------------------------------------------------------------
//
// bf16 models' linears: bf16 activations in and out, the weights packed once in bf16, float32
// arithmetic. Three variants (activeBf16Variant()): on AVX512-BF16 pairs of K on vdpbf16ps; on
// AVX-512 CPUs without it (Skylake-SP, Cascade Lake, Ice Lake) and on AVX2 CPUs (Zen 1-3, Haswell ..
// Comet Lake) every bf16 value widened to float32 in the kernel (exact) and the float32 FMA
// kernel's arithmetic, 16 or 8 lanes wide. All read the same packed weights (half the bytes of
// float32: decode-sized and other memory-bound linears run up to twice as fast as float32).

/// Weights rounded once to bfloat16 (round to nearest even, as torch's .to(torch.bfloat16)) and
/// packed for runBf16(). Immutable after packWeightsBf16(); shareable between threads.
///
/// Layout: N padded to nPadded() (a multiple of 16) with zero columns, K to 2·kPairs() with a zero
/// row; panel j (columns 16j..16j+15) is kPairs() x 16 x 2 bf16, the pair (k, k+1) of a column
/// adjacent: element (k, n) sits at data()[(n/16)·kPairs()·32 + (k/2)·32 + (n%16)·2 + k%2].
class PackedWeightsBf16 {
 public:
  ~PackedWeightsBf16();
  PackedWeightsBf16(const PackedWeightsBf16&) = delete;
  PackedWeightsBf16& operator=(const PackedWeightsBf16&) = delete;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t nPadded() const { return nPadded_; }
  /// ceil(K / 2).
  int64_t kPairs() const { return (k_ + 1) / 2; }
  /// Bytes of the packed buffer (2·kPairs() · nPadded() · 2).
  size_t bytes() const { return static_cast<size_t>(kPairs()) * static_cast<size_t>(nPadded_) * 4; }
  /// bf16 bit patterns.
  const uint16_t* data() const { return data_; }

 private:
  friend StatusOr<std::shared_ptr<const PackedWeightsBf16>> packWeightsBf16(const float*, int64_t, int64_t,
                                                                            WeightOrder);
  PackedWeightsBf16(int64_t k, int64_t n, int64_t nPadded, uint16_t* data)
      : k_(k), n_(n), nPadded_(nPadded), data_(data) {}
  int64_t k_, n_, nPadded_;
  uint16_t* data_;
};

/// Rounds \p w (float32, dense row-major [n, k] for kNK or [k, n] for kKN) to bf16 and packs it.
/// \returns kInvalidArgument for k < 1, n < 1 or a null \p w; kInternal if allocation fails.
StatusOr<std::shared_ptr<const PackedWeightsBf16>> packWeightsBf16(const float* w, int64_t k, int64_t n,
                                                                   WeightOrder order);

/// c[M,N] (bf16, row stride \p ldc) = bf16(epilogue(a[M,K] (bf16, row stride \p lda) · B)):
/// float32 accumulation from +0, then + bias[j] (float32), then the post-ops in float32, then one
/// rounding to bf16 (nearest even, NaN -> 0x7FC0). Bit-identical for any thread count. Post-ops:
/// the eltwise activations of run() and sum(scale) with the bf16 \p residual (row stride \p ldr;
/// it may be c itself with ldr == ldc: the in-place residual add; widened exactly); binary
/// post-ops give kUnimplemented (supportsPostOpBf16).
///
/// Numerics (NOTE: what each variant computes; the tests check both):
///  - kAvx512Bf16: each element is the chain of vdpbf16ps steps over the pairs (k, k+1),
///    k = 0, 2, 4, ... (each step adds both exact products of its pair to the float32
///    accumulator; an odd K's last k is paired with 0); GELU (erf and tanh) is the cheaper form for
///    a bf16 result (cpu/vecmath_avx512.h: within 2.5e-7·|x|), the other post-ops run()'s vector
///    math. Denormal bf16 inputs are read as zero (vdpbf16ps).
///  - kAvx2Widening: a and B widened to float32 (exact), then exactly run()'s AVX2 float32
///    computation: the chain acc = fma(a[i][k], B[k][j], acc) over k = 0, 1, ..., K-1 from +0
///    (one rounding per step), + bias[j], the post-ops with the AVX2 vector math (sum: fma(scale,
///    residual, acc)); then the one rounding to bf16. So runBf16() on this variant is bit for bit
///    bf16(run() on the widened operands with Isa::kAvx2). Denormals are kept.
///  - kAvx512Widening: the same with run()'s AVX-512 float32 computation: bit for bit
///    bf16(run() with Isa::kAvx512), i.e. kAvx2Widening's bits but after a GELU (erf), which
///    run()'s AVX-512 variant evaluates 16 lanes wide (within 2 ulp before the rounding).
/// Both products of two bf16 values are exact in float32; the variants differ in how the float32
/// sums are rounded (pairs vs one step per k) and in the GELU, both far below the final bf16 rounding.
/// \returns kUnimplemented if !availableBf16(); kInvalidArgument for bad shapes or pointers.
Status runBf16(const uint16_t* a, int64_t m, int64_t lda, const PackedWeightsBf16& b, uint16_t* c,
               int64_t ldc, const Epilogue& ep, const uint16_t* residual = nullptr, int64_t ldr = 0);

/// Whether this CPU can runBf16(): AVX2 + FMA + F16C (cpu::hasAvx2Fma()), with or without bf16
/// instructions.
bool availableBf16();

/// The variants runBf16() chooses from, lowest first: kAvx512Bf16 wherever cpu::hasAvx512Bf16(),
/// else kAvx512Widening wherever cpu::hasAvx512(), else kAvx2Widening (within what setMaxIsa and
/// setMaxBf16Variant allow).
enum class Bf16Variant { kAvx2Widening, kAvx512Widening, kAvx512Bf16 };
/// The variant runBf16() uses now. setMaxIsa(Isa::kAvx2) restricts runBf16() to kAvx2Widening too.
Bf16Variant activeBf16Variant();
/// Tests and benchmarks: restrict runBf16() to \p v and the variants below it (each is still only
/// used where the CPU has it). Process-wide, like setMaxIsa.
void setMaxBf16Variant(Bf16Variant v);

/// Whether runBf16() supports \p op (eltwise activations and sum).
bool supportsPostOpBf16(const PostOp& op);

// ---- MKL's packed sgemm ------------------------------------------------------------------------------
//
// The float32 GEMM torch's own frozen linears use (inductor's freezing: mkl::_mkl_linear):
// cblas_sgemm_pack once, cblas_sgemm_compute per call, with the bias and post-ops applied by
// run()'s epilogue code in one pass over c afterwards. A second kernel for the same linears,
// chosen per shape by timing (runtime/fused_ops.cpp): on Sapphire Rapids it reads 87-103 GFLOP/s
// at BERT/ViT/Llama shapes where the own AVX-512 kernel (tuned on Zen 5) reads 69-80; elsewhere
// the own kernel may lead. MKL is not linked: its CBLAS symbols are looked up at run time in the
// process (torch's libtorch_cpu exports them), so builds and processes without torch lack it.
//
// Numerics: MKL's summation order (blocked over K, not one FMA chain; it may depend on the thread
// count), then + bias[j] and the post-ops exactly as run() applies them (AVX2 vector math). Float32
// reassociation, as oneDNN's inner product: not bit-identical to run().

/// The weights packed by cblas_sgemm_pack for products of exactly m() rows (MKL's packed layout is
/// its own; only runMkl reads it). Immutable; shareable between threads.
class MklPackedWeights {
 public:
  ~MklPackedWeights();
  MklPackedWeights(const MklPackedWeights&) = delete;
  MklPackedWeights& operator=(const MklPackedWeights&) = delete;

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  /// The row count the weights were packed for; runMkl takes only this one.
  int64_t m() const { return m_; }
  size_t bytes() const { return bytes_; }

 private:
  friend StatusOr<std::shared_ptr<const MklPackedWeights>> packWeightsMkl(const float*, int64_t, int64_t,
                                                                          WeightOrder, int64_t);
  MklPackedWeights(int64_t k, int64_t n, int64_t m, size_t bytes, float* data)
      : k_(k), n_(n), m_(m), bytes_(bytes), data_(data) {}
  int64_t k_, n_, m_;
  size_t bytes_;
  float* data_;
  friend Status runMkl(const float*, int64_t, int64_t, const MklPackedWeights&, float*, int64_t,
                       const Epilogue&, const float*, int64_t, std::span<const float* const>);
};

/// Whether runMkl can run here: MKL's cblas_sgemm_pack/compute found in the process, the own
/// epilogue's AVX2, and MKL held to the capability model's tier (below AVX-512 with a CPU that has
/// it, only when MKL_ENABLE_INSTRUCTIONS caps MKL to AVX2 or lower: a capped run must not execute
/// AVX-512 code). Decided once per process.
bool mklAvailable();
/// Why mklAvailable() is false ("" when it is true).
const std::string& mklUnavailableReason();

/// Packs \p w ([n, k] for kNK, [k, n] for kKN, dense row-major) for \p m-row products.
/// \returns kUnimplemented when !mklAvailable(); kInvalidArgument for bad sizes or a null \p w.
StatusOr<std::shared_ptr<const MklPackedWeights>> packWeightsMkl(const float* w, int64_t k, int64_t n,
                                                                 WeightOrder order, int64_t m);

/// run()'s contract (epilogue, operands, aliasing, checks) with MKL's product and MKL's numerics
/// (above). \returns kUnimplemented when m != b.m() or !mklAvailable().
Status runMkl(const float* a, int64_t m, int64_t lda, const MklPackedWeights& b, float* c, int64_t ldc,
              const Epilogue& ep, const float* residual = nullptr, int64_t ldr = 0,
              std::span<const float* const> binaryOperands = {});

}  // namespace verifuse::kernels::gemm
