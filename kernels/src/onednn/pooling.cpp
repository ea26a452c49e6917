// Max / avg pooling (torch ceil_mode via right padding) and adaptive avg pooling.
#include "common.h"

namespace verifuse::kernels {
using namespace onednn;

namespace {

struct PoolGeometry {
  dims kernel, stride, padL, padR, dilation;  // padR: effective (ceil_mode extension included)
  dims padRRequested;
  std::vector<int64_t> out;
};

StatusOr<PoolGeometry> poolGeometry(const PoolParams& p) {
  const int rank = p.src.rank();
  if (rank < 3 || rank > 5) {
    return invalidArgument("pool: src must be N,C + 1..3 spatial dims, got " + p.src.toString());
  }
  const size_t n = rank - 2;
  PoolGeometry g;
  if (p.kernel.empty()) return invalidArgument("pool: kernel is required");
  VF_RETURN_IF_ERROR(spatialVector(p.kernel, n, 1, "pool kernel", &g.kernel));
  VF_RETURN_IF_ERROR(spatialVector(p.stride.empty() ? p.kernel : p.stride, n, 1, "pool stride",
                                   &g.stride));
  VF_RETURN_IF_ERROR(spatialVector(p.padL, n, 0, "pool padL", &g.padL));
  VF_RETURN_IF_ERROR(spatialVector(p.padR.empty() ? p.padL : p.padR, n, 0, "pool padR", &g.padR));
  VF_RETURN_IF_ERROR(spatialVector(p.dilation, n, 1, "pool dilation", &g.dilation));
  g.padRRequested = g.padR;
  auto in = p.src.dims();
  for (size_t i = 0; i < n; ++i) {
    if (g.kernel[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1 || g.padL[i] < 0 || g.padR[i] < 0) {
      return invalidArgument("pool: kernel/stride/dilation must be >= 1 and padding >= 0");
    }
    const int64_t span = g.dilation[i] * (g.kernel[i] - 1) + 1;
    const int64_t total = in[i + 2] + g.padL[i] + g.padR[i] - span;
    if (total < 0) return invalidArgument("pool: window larger than padded input");
    int64_t o = (p.ceilMode ? (total + g.stride[i] - 1) / g.stride[i] : total / g.stride[i]) + 1;
    // torch: the last window must start inside the input or the left padding.
    if (p.ceilMode && (o - 1) * g.stride[i] >= in[i + 2] + g.padL[i]) --o;
    const int64_t needR = (o - 1) * g.stride[i] + span - in[i + 2] - g.padL[i];
    if (needR > g.padR[i]) g.padR[i] = needR;
    g.out.push_back(o);
  }
  return g;
}

}  // namespace

std::vector<int64_t> poolOutputDims(const PoolParams& p) {
  auto g = poolGeometry(p);
  if (!g.isOk()) return {};
  auto d = p.src.dims();
  std::vector<int64_t> out = {d[0], d[1]};
  out.insert(out.end(), g->out.begin(), g->out.end());
  return out;
}

StatusOr<std::unique_ptr<Kernel>> createPool(const PoolParams& p) {
  VF_ASSIGN_OR_RETURN(PoolGeometry g, poolGeometry(p));
  bool dilated = false;
  for (int64_t d : g.dilation) dilated |= d != 1;
  if (dilated && p.alg != PoolAlg::kMax) {
    return unsupported("pool: dilation is only defined for max pooling");
  }
  if (p.alg == PoolAlg::kAvgIncludePad && g.padR != g.padRRequested) {
    // torch divides by the window clipped to the *requested* padding; oneDNN would count the
    // ceil_mode extension too.
    return unsupported("pool: avg pooling with count_include_pad and a ceil_mode window past the "
                       "padding has a different divisor in torch");
  }
  return guarded("pool", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const dnnl::memory::desc& srcMd = toDesc(p.src);
    auto sd = p.src.dims();
    dims dstDims = {sd[0], sd[1]};
    dstDims.insert(dstDims.end(), g.out.begin(), g.out.end());
    dnnl::memory::desc dstMd = activationDesc(dstDims, srcMd.get_data_type(), p.dstFormat);
    dims dil(g.dilation.size());
    for (size_t i = 0; i < dil.size(); ++i) dil[i] = g.dilation[i] - 1;
    dnnl::algorithm alg = p.alg == PoolAlg::kMax ? dnnl::algorithm::pooling_max
                          : p.alg == PoolAlg::kAvgIncludePad
                              ? dnnl::algorithm::pooling_avg_include_padding
                              : dnnl::algorithm::pooling_avg_exclude_padding;
    dnnl::pooling_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, alg,
                                             srcMd, dstMd, g.stride, g.kernel, dil, g.padL, g.padR,
                                             userScratchAttr());
    std::vector<RuntimeInput> inputs;
    inputs.push_back(makeInput(DNNL_ARG_SRC, srcMd, pd.src_desc()));
    return finish<dnnl::pooling_forward>("pool", pd, std::move(inputs));
  });
}

StatusOr<std::unique_ptr<Kernel>> createAdaptiveAvgPool(const Layout& src,
                                                        const std::vector<int64_t>& outSpatial,
                                                        Format dstFormat) {
  const int rank = src.rank();
  if (rank < 3 || rank > 5 || outSpatial.size() != static_cast<size_t>(rank - 2)) {
    return invalidArgument("adaptive_avg_pool: src " + src.toString() + " and output size " +
                           dimsToString(outSpatial) + " do not match");
  }
  auto d = src.dims();
  PoolParams p;
  p.alg = PoolAlg::kAvgExcludePad;
  p.src = src;
  p.dstFormat = dstFormat;
  for (size_t i = 0; i < outSpatial.size(); ++i) {
    if (outSpatial[i] < 1 || d[i + 2] % outSpatial[i] != 0) {
      return unsupported("adaptive_avg_pool: input size " + std::to_string(d[i + 2]) +
                         " is not a multiple of output size " + std::to_string(outSpatial[i]) +
                         " (windows would overlap unevenly)");
    }
    p.kernel.push_back(d[i + 2] / outSpatial[i]);
  }
  p.stride = p.kernel;
  return createPool(p);
}

}  // namespace verifuse::kernels
