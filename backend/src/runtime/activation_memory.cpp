// The large-block pool the fused ops' big results come from (see LargeBlockPool).
#include "runtime/fused_support.h"

#include <ATen/EmptyTensor.h>

#include <list>
#include <new>

namespace verifuse::runtime {

namespace {

/// Where the fused ops' large results live (>= kPooledBytes): freed blocks are kept, up to
/// kPoolBytes in all, and handed out again to a request of the same size. NOTE: glibc serves
/// requests above 32 MiB (its largest mmap threshold) with a fresh mmap and unmaps them on free,
/// so every call page-faulted its big activations in again, zero-filled by the kernel: a 131 MB
/// buffer costs 49 ms fresh against 3.5 ms reused (Llama's logits at b8 x 128 tokens; Whisper's
/// 73 MB MLP activations at b8, four per call). Exact sizes: one plan's activations repeat theirs
/// from call to call; the oldest free block goes first when the pool is full.
class LargeBlockPool final : public c10::Allocator {
 public:
  static constexpr size_t kPooledBytes = size_t{16} << 20;
  static constexpr size_t kPoolBytes = size_t{256} << 20;

  static LargeBlockPool& instance() {
    static LargeBlockPool* pool = new LargeBlockPool();  // never destroyed: outlives every tensor
    return *pool;
  }

  c10::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->second == n) {
          p = it->first;
          cached_ -= n;
          free_.erase(it);
          break;
        }
      }
    }
    if (p == nullptr) p = std::aligned_alloc(64, (n + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    auto* block = new Block{p, n};
    return {p, block, &LargeBlockPool::release, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };

  static void release(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    instance().put(block->ptr, block->bytes);
    delete block;
  }

  void put(void* p, size_t n) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.emplace_back(p, n);
      cached_ += n;
      while (cached_ > kPoolBytes && !free_.empty()) {
        drop.push_back(free_.front().first);
        cached_ -= free_.front().second;
        free_.pop_front();
      }
    }
    for (void* d : drop) std::free(d);
  }

  std::mutex mu_;
  std::list<std::pair<void*, size_t>> free_;  // oldest first
  size_t cached_ = 0;
};

}  // namespace

/// at::empty / at::empty_strided for a fused op's result: large ones from LargeBlockPool.
at::Tensor emptyActivation(c10::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  if (bytes < LargeBlockPool::kPooledBytes || options.device().type() != c10::DeviceType::CPU) {
    return at::empty(sizes, options);
  }
  return at::detail::empty_generic(sizes, &LargeBlockPool::instance(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   options.dtype().toScalarType(), options.memory_format_opt());
}

at::Tensor emptyStridedActivation(c10::IntArrayRef sizes, c10::IntArrayRef strides, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  if (bytes < LargeBlockPool::kPooledBytes || options.device().type() != c10::DeviceType::CPU) {
    return at::empty_strided(sizes, strides, options);
  }
  return at::detail::empty_strided_generic(sizes, strides, &LargeBlockPool::instance(),
                                           c10::DispatchKeySet(c10::DispatchKey::CPU), options.dtype().toScalarType());
}

}  // namespace verifuse::runtime
