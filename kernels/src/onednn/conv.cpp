// Convolution 1-D/2-D/3-D with groups, dilation, asymmetric padding, post-ops, prepacked weights;
// a bf16 model's convolution natively (bf16 kernels) or, where oneDNN has no bf16 instructions, on
// its float32 kernels with the bf16 data widened and the result rounded once (WidenedBf16Conv).
#include "common.h"

#include "cpu/bf16_convert.h"
#include "verifuse/kernels/capabilities.h"

namespace verifuse::kernels {
using namespace onednn;

namespace {

struct ConvGeometry {
  dims stride, padL, padR, dilation;  // dilation in torch convention
};

StatusOr<ConvGeometry> geometry(const ConvParams& p) {
  const size_t rank = p.srcDims.size();
  if (rank < 3 || rank > 5) {
    return invalidArgument("conv: src must be N,C + 1..3 spatial dims, got " + dimsToString(p.srcDims));
  }
  if (p.weightDims.size() != rank) {
    return invalidArgument("conv: weight dims " + dimsToString(p.weightDims) +
                           " do not match src rank " + std::to_string(rank));
  }
  const size_t n = rank - 2;
  ConvGeometry g;
  VF_RETURN_IF_ERROR(spatialVector(p.stride, n, 1, "conv stride", &g.stride));
  VF_RETURN_IF_ERROR(spatialVector(p.padL, n, 0, "conv padL", &g.padL));
  VF_RETURN_IF_ERROR(spatialVector(p.padR.empty() ? p.padL : p.padR, n, 0, "conv padR", &g.padR));
  VF_RETURN_IF_ERROR(spatialVector(p.dilation, n, 1, "conv dilation", &g.dilation));
  for (size_t i = 0; i < n; ++i) {
    if (g.stride[i] < 1 || g.dilation[i] < 1 || g.padL[i] < 0 || g.padR[i] < 0) {
      return invalidArgument("conv: stride/dilation must be >= 1 and padding >= 0");
    }
  }
  return g;
}

/// Per-thread staging slots of the widened bf16 convolution (common.h: 0 is the primitives'
/// scratchpad, 1.. converted inputs of PrimitiveKernel, 7 the attention kernel's tiles).
constexpr int kWidenedSrcSlot = 5;
constexpr int kWidenedDstSlot = 6;

/// A bf16-in, bf16-out convolution on oneDNN's float32 kernel (ConvParams::widenBf16 says when and
/// why): src widened into a per-thread float32 buffer, the float32 convolution with its post-ops
/// (a sum reads the residual widened from the output buffer), the result rounded to bf16 once.
/// Products of bf16 values are exact in float32, so this computes what a bf16 convolution with
/// float32 accumulation does (summed in oneDNN's float32 kernel's order).
class WidenedBf16Conv final : public Kernel {
 public:
  WidenedBf16Conv(std::unique_ptr<Kernel> inner, bool sum) : inner_(std::move(inner)), sum_(sum) {
    const Layout& src = inner_->srcLayout();
    const Layout& dst = inner_->dstLayout();
    inputLayouts_ = {Layout::plain(src.dims(), src.strides(), DataType::kBF16)};
    outputLayout_ = Layout::plain(dst.dims(), dst.strides(), DataType::kBF16);
    srcElems_ = src.numElements();
    dstElems_ = dst.numElements();
    implInfo_ = inner_->implInfo() + " f32 on bf16io";
    scratchpadBytes_ = inner_->scratchpadBytes();
  }
  const char* name() const override { return "conv"; }
  Status execute(std::span<const void* const> inputs, void* output) const override {
    if (inputs.size() != 1 || inputs[0] == nullptr || output == nullptr) {
      return invalidArgument("conv (widened bf16): expected one source and an output");
    }
    return guarded("conv (widened bf16) execute", [&]() -> Status {
      auto* src = static_cast<float*>(threadScratch(kWidenedSrcSlot, static_cast<size_t>(srcElems_) * sizeof(float)));
      auto* dst = static_cast<float*>(threadScratch(kWidenedDstSlot, static_cast<size_t>(dstElems_) * sizeof(float)));
      cpu::widenBf16(static_cast<const uint16_t*>(inputs[0]), src, srcElems_);
      if (sum_) cpu::widenBf16(static_cast<const uint16_t*>(output), dst, dstElems_);
      VF_RETURN_IF_ERROR(inner_->execute({static_cast<const void*>(src)}, dst));
      cpu::narrowToBf16(dst, static_cast<uint16_t*>(output), dstElems_);
      return Status::ok();
    });
  }

 private:
  std::unique_ptr<Kernel> inner_;
  bool sum_;
  int64_t srcElems_ = 0, dstElems_ = 0;
};

/// True for a plain layout whose elements fill its buffer exactly (any dim order): converting it
/// element by element is converting the tensor.
bool denseLayout(const Layout& l) {
  return l.isPlain() && l.byteSize() == static_cast<size_t>(l.numElements()) * dataTypeSize(l.dtype());
}

StatusOr<std::unique_ptr<Kernel>> createWidenedBf16Conv(const ConvParams& p) {
  bool sum = false;
  for (const PostOp& op : p.postOps) {
    if (op.kind == PostOp::Kind::kBinary) return unimplemented("conv (widened bf16): binary post-ops");
    sum = sum || op.kind == PostOp::Kind::kSum;
  }
  ConvParams q = p;
  q.io = DataType::kF32;
  q.compute = ComputeType::kF32;
  q.widenBf16 = false;
  // Dense float32 twins of the bf16 layouts, so the conversions are element by element.
  if (!p.srcLayout.empty()) {
    if (!denseLayout(p.srcLayout)) {
      return unimplemented("conv (widened bf16): src layout " + p.srcLayout.toString() + " is not dense");
    }
    q.srcLayout = Layout::plain(p.srcLayout.dims(), p.srcLayout.strides(), DataType::kF32);
  } else if (q.srcFormat == Format::kAny) {
    q.srcFormat = Format::kChannelsLast;
  }
  if (q.dstFormat == Format::kAny) q.dstFormat = Format::kChannelsLast;
  // The weights rounded to bf16 once, as the native kernel's bf16 packing rounds them (a folded
  // batch norm's float32 weights; a bf16 model's own weights are bf16 values already).
  int64_t wElems = 1;
  for (int64_t d : p.weightDims) wElems *= d;
  std::vector<uint16_t> wBf16(static_cast<size_t>(wElems));
  std::vector<float> wRounded(static_cast<size_t>(wElems));
  cpu::narrowToBf16(p.weights, wBf16.data(), wElems);
  cpu::widenBf16(wBf16.data(), wRounded.data(), wElems);
  q.weights = wRounded.data();
  VF_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> inner, createConv(q));
  if (!denseLayout(inner->srcLayout()) || !denseLayout(inner->dstLayout())) {
    return unimplemented("conv (widened bf16): oneDNN chose a blocked layout");
  }
  return std::unique_ptr<Kernel>(std::make_unique<WidenedBf16Conv>(std::move(inner), sum));
}

}  // namespace

std::vector<int64_t> convOutputDims(const ConvParams& p) {
  auto g = geometry(p);
  if (!g.isOk()) return {};
  std::vector<int64_t> out = {p.srcDims[0], p.weightDims[0]};
  for (size_t i = 0; i + 2 < p.srcDims.size(); ++i) {
    int64_t k = p.weightDims[i + 2];
    int64_t span = g->dilation[i] * (k - 1) + 1;
    out.push_back((p.srcDims[i + 2] + g->padL[i] + g->padR[i] - span) / g->stride[i] + 1);
  }
  return out;
}

StatusOr<std::unique_ptr<Kernel>> createConv(const ConvParams& p) {
  VF_ASSIGN_OR_RETURN(ConvGeometry g, geometry(p));
  const int64_t groups = p.groups;
  const int64_t outC = p.weightDims[0];
  if (p.weights == nullptr) return invalidArgument("conv: weights are required");
  if (groups < 1 || outC % groups != 0 || p.srcDims[1] != p.weightDims[1] * groups) {
    return invalidArgument("conv: channels do not match groups: src " + dimsToString(p.srcDims) +
                           ", weight " + dimsToString(p.weightDims) + ", groups " +
                           std::to_string(groups));
  }
  std::vector<int64_t> dstDimsV = convOutputDims(p);
  for (int64_t d : dstDimsV) {
    if (d < 1) return invalidArgument("conv: empty output " + dimsToString(dstDimsV));
  }
  if (!p.srcLayout.empty() &&
      (p.srcLayout.dims() != p.srcDims || p.srcLayout.dtype() != p.io)) {
    return invalidArgument("conv: srcLayout " + p.srcLayout.toString() + " does not match srcDims " +
                           dimsToString(p.srcDims));
  }

  if (p.io == DataType::kBF16 && (p.widenBf16 || !capabilities().onednnNativeBf16())) {
    return createWidenedBf16Conv(p);
  }

  return guarded("conv", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    // bf16 compute on f32 I/O converts the source on entry; a bf16 model's source is bf16 already.
    const bool bf16 = p.compute == ComputeType::kBF16 && p.io == DataType::kF32;
    const dt io = toDnnl(p.io);
    const dt cdt = bf16 || p.io == DataType::kBF16 ? dt::bf16 : dt::f32;
    dims srcDims(p.srcDims.begin(), p.srcDims.end());
    dims dstDims(dstDimsV.begin(), dstDimsV.end());

    // User-side (f32) src: explicit layout, or chosen by format.
    dnnl::memory::desc userSrc =
        !p.srcLayout.empty() ? toDesc(p.srcLayout) : activationDesc(srcDims, io, p.srcFormat);
    // Primitive-side src: in bf16 mode the primitive always chooses; we convert on entry.
    dnnl::memory::desc primSrc = bf16 ? dnnl::memory::desc(srcDims, dt::bf16, tag::any) : userSrc;
    if (bf16 && userSrc.get_format_kind() == dnnl::memory::format_kind::any) {
      // NOTE: an f32 twin of a bf16 blocked layout cannot be spelled in the v3.2 API, so a bf16
      // conv asked for "any" src exposes dense channels-last f32 instead.
      userSrc = activationDesc(srcDims, dt::f32, Format::kChannelsLast);
    }

    // Weights: torch [O, C/G, k...] is bit-identical to oneDNN [G, O/G, C/G, k...].
    dims userWDims;
    if (groups > 1) {
      userWDims = {groups, outC / groups, p.weightDims[1]};
    } else {
      userWDims = {outC, p.weightDims[1]};
    }
    userWDims.insert(userWDims.end(), p.weightDims.begin() + 2, p.weightDims.end());
    dnnl::memory::desc userW(userWDims, dt::f32, plainTag(static_cast<int>(userWDims.size())));
    dnnl::memory::desc primW(userWDims, cdt, tag::any);
    dnnl::memory::desc biasMd({outC}, dt::f32, tag::a);
    dnnl::memory::desc dstMd = activationDesc(dstDims, io, p.dstFormat);

    std::vector<RuntimeInput> binaryInputs;
    VF_ASSIGN_OR_RETURN(dnnl::primitive_attr attr, makeAttr(p.postOps, dstDims, &binaryInputs, io));

    dims dil(g.dilation.size());
    for (size_t i = 0; i < dil.size(); ++i) dil[i] = g.dilation[i] - 1;  // oneDNN: 0 = dense
    using cf = dnnl::convolution_forward;
    cf::primitive_desc pd =
        p.bias ? cf::primitive_desc(engine(), dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::convolution_direct, primSrc, primW, biasMd,
                                    dstMd, g.stride, dil, g.padL, g.padR, attr)
               : cf::primitive_desc(engine(), dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::convolution_direct, primSrc, primW, dstMd,
                                    g.stride, dil, g.padL, g.padR, attr);
    if (!bf16 && userSrc.get_format_kind() == dnnl::memory::format_kind::any) {
      userSrc = pd.src_desc();
    }

    return finishWeighted<cf>("conv", pd, userSrc, std::move(binaryInputs), p.weights, userW, p.bias, biasMd);
  });
}

}  // namespace verifuse::kernels
