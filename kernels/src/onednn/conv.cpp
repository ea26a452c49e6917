// Convolution 1-D/2-D/3-D with groups, dilation, asymmetric padding, post-ops, prepacked weights.
#include "common.h"

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
