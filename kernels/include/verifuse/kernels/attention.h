// Scaled dot-product attention (inference, float32 or bf16): two matmuls with a vectorized row
// softmax in between, the matmuls on verifuse's own AVX-512 register tiles (oneDNN matmuls on
// other CPUs): the kernel behind the runtime's attention engine op (ATen's
// _scaled_dot_product_flash_attention_for_cpu, no dropout). Why our own: on CPUs where MKL's
// sgemm takes no AVX-512 path (AMD), ATen's fused CPU kernel runs its GEMMs at about half the
// speed of oneDNN's matmul; the runtime times both and keeps the faster.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// out[b,h,i,:] = softmax_j(scale * q[b,h,i,:]·k[b,g,j,:] + mask[b,h,i,j]) · v[b,g,j,:], g = h (or h's
/// group with kvHeads).
/// Every tensor is given by its sizes (implied by the fields below) and element strides, so
/// permuted views of [B,S,H,D] projections are read in place. Requirements (else kUnimplemented,
/// and the caller runs ATen): the last dim of q, k, v and out has stride 1 (oneDNN's matmul
/// kernels read rows). The mask may have any strides (rows whose keys are not adjacent are gathered
/// per query row).
struct AttentionParams {
  int64_t batch = 0, heads = 0, seq = 0, kvSeq = 0, headDim = 0, valueDim = 0;
  /// Heads of k and v (grouped-query attention, as ATen's enable_gqa and HF's repeat_kv): query head
  /// h reads key/value head h / (heads / kvHeads). 0: heads.
  int64_t kvHeads = 0;
  std::array<int64_t, 4> qStrides{}, kStrides{}, vStrides{}, outStrides{};  ///< [B,H,*,*]
  /// Additive float32 mask broadcast to [B,H,S,KV]: stride 0 along broadcast dims.
  bool hasMask = false;
  std::array<int64_t, 4> maskStrides{};
  float scale = 1.f;
  /// Top-left aligned, as ATen's is_causal: query i sees keys j <= i (with the mask, if any).
  bool causal = false;
  /// Also write logsumexp[b,h,i] = max_j + log(sum_j exp(x_j - max_j)) with these strides.
  bool logsumexp = false;
  std::array<int64_t, 3> lseStrides{};
  /// Query rows per block; 0: chosen so the [rows, KV] score tile stays well inside L2.
  int64_t blockRows = 0;
  /// A bf16 model's attention: q, k, v, the mask and out are bf16. Scores, the softmax and the
  /// P·V accumulation are f32; the probabilities are rounded to bf16 for the P·V matmul and the
  /// output once at the end, as ATen's CPU flash attention does for reduced float types.
  /// On an AVX-512 CPU (for bf16 AVX512-BF16) both matmuls run on verifuse's own register tiles
  /// (no oneDNN primitive; implInfo says "own f32 tiles" / "own bf16 tiles");
  /// VERIFUSE_ATTENTION_TILES=0 at creation keeps oneDNN's matmuls.
  /// Where oneDNN has no bf16 instructions (!capabilities().onednnNativeBf16()), or with
  /// \p widenBf16, bf16 runs "widened": q, k and v widened (exactly) into float32 copies per block
  /// and head, oneDNN's float32 matmuls, the probabilities rounded to bf16 values in place (the same
  /// rounding as above, so P·V multiplies the same bf16 probabilities), the output rounded once;
  /// implInfo ends with "f32 on bf16io".
  bool bf16 = false;
  bool widenBf16 = false;
};

/// Created once per shape and stride set (the oneDNN primitives are made here); execute() is
/// const, thread-safe, and creates no primitive. Parallel over (batch, head, row block) with
/// OpenMP (omp_get_max_threads(), 1 inside a parallel region); each thread's matmuls run
/// single-threaded. Results do not depend on the thread count (each row is computed by one thread
/// in a fixed order).
class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  /// \p mask may be null when !hasMask; \p lse may be null when !logsumexp.
  /// q, k, v, mask and out hold float, or bf16 (uint16 bit patterns) with AttentionParams::bf16.
  virtual Status execute(const void* q, const void* k, const void* v, const void* mask, void* out,
                         float* lse) const = 0;
  /// "attention: qk <impl> / pv <impl>, rows <n>".
  virtual std::string implInfo() const = 0;
  virtual int64_t blockRows() const = 0;
};

StatusOr<std::unique_ptr<AttentionKernel>> createAttention(const AttentionParams& p);

}  // namespace verifuse::kernels
