// Layout: an opaque value type describing one tensor's memory (dims, dtype, strides or blocking).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace verifuse::kernels {

/// Element types the kernels store. Compute precision is chosen separately (see ComputeType).
enum class DataType { kF32, kBF16, kU8, kS8 };  ///< u8/s8: int8 codes (quantized models)

/// Bytes per element of \p dt.
size_t dataTypeSize(DataType dt);
const char* dataTypeName(DataType dt);

/// How a kernel's activation (src/dst) memory is chosen at creation time.
enum class Format {
  kPlain,        ///< dense row-major (NCHW, NCDHW, ...), i.e. a contiguous torch tensor
  kChannelsLast, ///< dense NHWC / NDHWC / NWC (torch.channels_last)
  kAny,          ///< the primitive chooses (typically blocked nChw16c or NHWC); query the kernel
};

/// Describes a tensor's memory: dims, element type and either plain strides or a blocked layout a
/// oneDNN primitive chose. Cheap to copy (shared immutable state). Two layouts are equal iff a
/// buffer written in one can be read as the other without a reorder.
///
/// NOTE: Layout hides oneDNN's memory::desc so public headers stay free of oneDNN; kernels/src
/// converts with an internal accessor.
class Layout {
 public:
  /// An empty layout (no dims, byteSize() == 0).
  Layout() = default;

  /// Plain strided layout; strides are in elements (torch's convention). Empty \p strides means
  /// dense row-major. Factories never throw: dims/strides oneDNN cannot describe (overlapping
  /// strides, rank 0 or > 12, negative sizes) give an empty() layout, which every kernel factory
  /// rejects with kInvalidArgument.
  static Layout plain(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides = {},
                      DataType dtype = DataType::kF32);
  /// Dense row-major.
  static Layout contiguous(const std::vector<int64_t>& dims, DataType dtype = DataType::kF32);
  /// Dense channels-last (dim 1 innermost) for 3-D/4-D/5-D dims; row-major for other ranks.
  static Layout channelsLast(const std::vector<int64_t>& dims, DataType dtype = DataType::kF32);

  bool empty() const { return impl_ == nullptr; }
  std::vector<int64_t> dims() const;
  int rank() const;
  int64_t numElements() const;
  DataType dtype() const;
  /// Bytes a buffer for this layout needs (includes blocking padding, e.g. C=3 padded to 16).
  size_t byteSize() const;
  /// True for a strided layout without inner blocking (what a torch tensor can describe).
  bool isPlain() const;
  /// Element strides; empty if !isPlain().
  std::vector<int64_t> strides() const;
  /// True if plain and dense row-major.
  bool isContiguous() const;
  /// Readable form, e.g. "f32[1,64,56,56] strides=[200704,1,3584,64]" or
  /// "f32[1,64,56,56] blocked(outer=[...],inner=16b)".
  std::string toString() const;

  bool operator==(const Layout& other) const;
  bool operator!=(const Layout& other) const { return !(*this == other); }

  struct Impl;

 private:
  explicit Layout(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  friend struct LayoutAccess;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace verifuse::kernels
