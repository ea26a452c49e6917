// Kernel: a compiled oneDNN primitive (plus prepacked weights) executed many times.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "verifuse/kernels/layout.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels {

/// A kernel created once (with real shapes) and executed many times.
///
/// NOTE: invariants
///  - the oneDNN primitive(s) are created in the factory, never in execute();
///  - execute() is const and thread-safe: concurrent calls on one kernel object are allowed
///    (scratchpad is in user mode and comes from a per-thread buffer grown as needed);
///  - execute() allocates nothing but small oneDNN memory handles; buffers are the caller's;
///  - errors are values: no exception leaves this library.
class Kernel {
 public:
  virtual ~Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  /// Stable short name ("conv", "inner_product", "matmul", "pool", ...).
  virtual const char* name() const = 0;

  /// Runs the kernel. \p inputs are raw buffers in the order the factory documents, each laid out
  /// as inputLayouts()[i]; \p output is laid out as outputLayout(). Binary post-op operands follow
  /// the kernel's own inputs, in post-op order. With a sum post-op, \p output must already hold the
  /// residual (in outputLayout()) and is accumulated into.
  virtual Status execute(std::span<const void* const> inputs, void* output) const = 0;
  Status execute(std::initializer_list<const void*> inputs, void* output) const {
    return execute(std::span<const void* const>(inputs.begin(), inputs.size()), output);
  }

  /// Layouts of the runtime inputs, in execute() order (binary post-op operands included).
  const std::vector<Layout>& inputLayouts() const { return inputLayouts_; }
  const Layout& outputLayout() const { return outputLayout_; }
  /// Convenience: inputLayouts()[0] and outputLayout().
  const Layout& srcLayout() const { return inputLayouts_.at(0); }
  const Layout& dstLayout() const { return outputLayout_; }
  /// oneDNN's implementation name, e.g. "brgconv:avx512_core" (for reports and the tuning DB).
  const std::string& implInfo() const { return implInfo_; }
  /// Bytes of scratchpad one execute() needs (taken from the calling thread's buffer).
  size_t scratchpadBytes() const { return scratchpadBytes_; }
  /// True when the kernel reads the caller's weights in place (no packed copy of its own).
  bool borrowsWeights() const { return borrowsWeights_; }

 protected:
  Kernel() = default;
  std::vector<Layout> inputLayouts_;
  Layout outputLayout_;
  std::string implInfo_;
  size_t scratchpadBytes_ = 0;
  bool borrowsWeights_ = false;
};

/// "3.2.0 (40112196...)".
std::string onednnVersion();
/// Number of oneDNN primitives (incl. reorders) verifuse created in this process. Grows at kernel
/// creation only; tests use it to prove execute() never creates primitives.
int64_t primitiveCreationCount();

}  // namespace verifuse::kernels
