// Internal to kernels/: the oneDNN engine, per-thread stream and scratch, Layout <-> memory::desc,
// error conversion, post-op attributes and the one generic primitive-backed Kernel.
#pragma once

#include <dnnl.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/layout.h"
#include "verifuse/kernels/ops.h"
#include "verifuse/support/status.h"

namespace verifuse::kernels {

struct Layout::Impl {
  dnnl::memory::desc md;
};

/// The only bridge between Layout and oneDNN.
struct LayoutAccess {
  static const dnnl::memory::desc& desc(const Layout& l);
  static Layout make(const dnnl::memory::desc& md);
};
inline const dnnl::memory::desc& toDesc(const Layout& l) { return LayoutAccess::desc(l); }
inline Layout toLayout(const dnnl::memory::desc& md) { return LayoutAccess::make(md); }

namespace onednn {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

/// The process-wide CPU engine (created on first use).
const dnnl::engine& engine();
/// A stream for the calling thread (CPU streams are cheap but not free to create).
dnnl::stream& threadStream();

/// Per-thread scratch buffers, 64-byte aligned, grown as needed, never shrunk. Slot 0 is the
/// primitive scratchpad; slots 1.. hold converted inputs (bf16 staging).
void* threadScratch(int slot, size_t bytes);
constexpr int kMaxScratchSlots = 8;

/// Counts primitive creations (public: primitiveCreationCount()).
void notePrimitiveCreated();

dt toDnnl(DataType t);
DataType fromDnnl(dt t);
dnnl::algorithm toDnnl(BinaryAlg a);
/// Eltwise algorithm and oneDNN alpha/beta for a torch-level activation.
struct EltwiseMapping {
  dnnl::algorithm alg;
  float alpha, beta;
};
EltwiseMapping mapActivation(Activation a, float alpha, float beta);

/// Dense row-major / channels-last / any tag for a rank.
tag plainTag(int rank);
tag channelsLastTag(int rank);
dnnl::memory::desc activationDesc(const dims& d, dt type, Format f);

/// dnnl::error -> Status (dnnl_unimplemented -> kUnimplemented).
Status fromError(const dnnl::error& e, const std::string& what);

/// Runs \p body (returning StatusOr<T> or Status), converting any exception to a Status.
template <typename F>
auto guarded(const std::string& what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return fromError(e, what);
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kInternal, what + ": out of memory");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, what + ": " + e.what());
  }
}

/// A runtime argument of the main primitive: the user's memory, optionally converted (reorder
/// into a per-thread staging buffer) to the layout the primitive wants.
struct RuntimeInput {
  int arg = 0;
  dnnl::memory::desc userMd;
  dnnl::memory::desc primMd;              ///< == userMd unless convert is set
  std::optional<dnnl::primitive> convert; ///< reorder userMd -> primMd, created once
  size_t convertScratch = 0;
};

/// Builds a RuntimeInput; creates the conversion reorder if \p userMd != \p primMd.
RuntimeInput makeInput(int arg, const dnnl::memory::desc& userMd,
                       const dnnl::memory::desc& primMd);

/// primitive_attr with user scratchpad and the given post-ops; appends one RuntimeInput per
/// binary post-op to \p binaryInputs. \p dstDims validates binary operand shapes.
StatusOr<dnnl::primitive_attr> makeAttr(const std::vector<PostOp>& postOps, const dims& dstDims,
                                        std::vector<RuntimeInput>* binaryInputs, dt operandType = dt::f32);
/// Plain attr with user scratchpad.
dnnl::primitive_attr userScratchAttr();

/// A primitive's constant argument: its memory and, when verifuse allocated the buffer behind it
/// (packConstant; null for borrowed weights and oneDNN's own allocations), that buffer, which
/// lives as long as the argument does.
struct ConstantArg {
  ConstantArg(int a, dnnl::memory m, std::shared_ptr<void> b = nullptr)
      : arg(a), memory(std::move(m)), buffer(std::move(b)) {}
  int arg;
  dnnl::memory memory;
  std::shared_ptr<void> buffer;
};

/// Copies \p src (dense f32 in \p userMd) once into memory of \p packedMd for argument \p arg,
/// in a buffer from cpu::allocateWeightMemory (huge pages: weights are streamed on every call).
ConstantArg packConstant(int arg, const void* src, const dnnl::memory::desc& userMd,
                         const dnnl::memory::desc& packedMd);

/// The generic primitive-backed kernel: inputs (optionally converted), constant args (prepacked
/// weights, bias, gamma...), one dst.
class PrimitiveKernel final : public Kernel {
 public:
  PrimitiveKernel(const char* name, dnnl::primitive prim, size_t primScratch, std::string impl,
                  std::vector<RuntimeInput> inputs, dnnl::memory::desc dstMd,
                  std::vector<ConstantArg> constants, bool borrowsWeights = false);
  const char* name() const override { return name_; }
  Status execute(std::span<const void* const> inputs, void* output) const override;

 private:
  const char* name_;
  dnnl::primitive prim_;
  std::vector<RuntimeInput> inputs_;
  dnnl::memory::desc dstMd_;
  std::vector<ConstantArg> constants_;
};

/// Creates a primitive from its descriptor and counts it.
template <typename Prim, typename PD>
Prim makePrimitive(const PD& pd) {
  Prim p(pd);
  notePrimitiveCreated();
  return p;
}

/// Wraps a finished primitive descriptor into a PrimitiveKernel.
template <typename Prim, typename PD>
std::unique_ptr<Kernel> finish(const char* name, const PD& pd, std::vector<RuntimeInput> inputs,
                               std::vector<ConstantArg> constants = {},
                               bool borrowsWeights = false) {
  return std::make_unique<PrimitiveKernel>(name, makePrimitive<Prim>(pd), pd.scratchpad_desc().get_size(),
                                           pd.impl_info_str(), std::move(inputs), pd.dst_desc(),
                                           std::move(constants), borrowsWeights);
}

/// finish() for the weighted primitives (convolution, inner product): the source plus the binary
/// post-op operands at run time, weights (and bias, if given) prepacked once into \p pd's layout.
/// With \p borrowWeights (only when \p pd takes the weights in \p userWeights' layout) the kernel
/// reads \p weights in place instead: the caller keeps them alive at that address.
template <typename Prim, typename PD>
std::unique_ptr<Kernel> finishWeighted(const char* name, const PD& pd, const dnnl::memory::desc& userSrc,
                                       std::vector<RuntimeInput> binaryInputs, const void* weights,
                                       const dnnl::memory::desc& userWeights, const void* bias,
                                       const dnnl::memory::desc& biasMd, bool borrowWeights = false) {
  std::vector<RuntimeInput> inputs;
  inputs.push_back(makeInput(DNNL_ARG_SRC, userSrc, pd.src_desc()));
  for (auto& b : binaryInputs) inputs.push_back(std::move(b));
  std::vector<ConstantArg> constants;
  const bool borrow = borrowWeights && pd.weights_desc() == userWeights;
  constants.push_back(borrow ? ConstantArg(DNNL_ARG_WEIGHTS, dnnl::memory(userWeights, engine(), const_cast<void*>(weights)))
                             : packConstant(DNNL_ARG_WEIGHTS, weights, userWeights, pd.weights_desc()));
  if (bias) constants.push_back(packConstant(DNNL_ARG_BIAS, bias, biasMd, pd.bias_desc()));
  return finish<Prim>(name, pd, std::move(inputs), std::move(constants), borrow);
}

/// Normalizes an optional per-spatial-dim vector (empty -> \p dflt repeated).
Status spatialVector(const std::vector<int64_t>& v, size_t n, int64_t dflt, const char* what,
                     dims* out);

std::string dimsToString(const std::vector<int64_t>& d);

}  // namespace onednn
}  // namespace verifuse::kernels
