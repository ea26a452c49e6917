// What the fused ops share (fused_ops.cpp: conv and linear; rowwise_op.cpp; attention_op.cpp):
// kernels made per input layout on first use, activations from a pool of large blocks, and whether
// bf16 models run on this CPU. Internal to the runtime.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace verifuse::runtime {

/// A bf16 model's convolutions, linears and attention run on verifuse's kernels on this CPU: natively
/// where oneDNN has bf16 instructions (avx512_bf16, AMX), else on float32 kernels over bf16 data
/// (the own GEMM's widening AVX-512 or AVX2 variant, oneDNN's float32 convolution and matmuls with
/// the bf16 data widened exactly and each op's result rounded to bf16 once), which needs AVX2.
bool bf16ModelsRun();

/// An empty tensor for a fused op's result: from the large-block pool at >= 16 MB
/// (activation_memory.cpp says why), else ATen's allocator.
at::Tensor emptyActivation(c10::IntArrayRef sizes, const at::TensorOptions& options);
at::Tensor emptyStridedActivation(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options);

/// Kernels keyed by an input layout (strides), made on first use under a lock.
template <typename K>
class KernelsByLayout {
 public:
  /// \p create() -> std::pair<std::unique_ptr<K>, std::string>: the kernel (or null) and its
  /// description for implInfo() (an empty one keeps the previous description).
  template <typename Create>
  const K* get(c10::IntArrayRef key, Create create) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, kernel] : entries_) {
      if (c10::IntArrayRef(k) == key) return kernel.get();
    }
    auto [kernel, info] = create();
    if (!info.empty()) info_ = std::move(info);
    entries_.emplace_back(key.vec(), std::move(kernel));
    return entries_.back().second.get();
  }
  std::string info() const {
    std::lock_guard<std::mutex> lock(mu_);
    return info_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<K>>> entries_;
  mutable std::string info_;
};

}  // namespace verifuse::runtime
