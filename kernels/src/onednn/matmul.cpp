// Linear (inner product with prepacked or borrowed plain [N,K] weights) and batched, broadcasting matmul.
#include "common.h"

namespace verifuse::kernels {
using namespace onednn;

StatusOr<std::unique_ptr<Kernel>> createLinear(const LinearParams& p) {
  if (p.m < 1 || p.k < 1 || p.n < 1) return invalidArgument("linear: m, k, n must be >= 1");
  if (p.weights == nullptr) return invalidArgument("linear: weights are required");
  return guarded("linear", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const dt io = toDnnl(p.io);
    const bool bf16 = p.compute == ComputeType::kBF16 || p.io == DataType::kBF16;
    const dt cdt = bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc userSrc({p.m, p.k}, io, tag::ab);
    dnnl::memory::desc primSrc({p.m, p.k}, cdt, tag::ab);
    dnnl::memory::desc userW({p.n, p.k}, dt::f32, tag::ab);
    dnnl::memory::desc primW({p.n, p.k}, cdt, tag::any);
    dnnl::memory::desc biasMd({p.n}, dt::f32, tag::a);
    dnnl::memory::desc dstMd({p.m, p.n}, io, tag::ab);
    std::vector<RuntimeInput> binaryInputs;
    VF_ASSIGN_OR_RETURN(dnnl::primitive_attr attr, makeAttr(p.postOps, {p.m, p.n}, &binaryInputs, io));
    using ip = dnnl::inner_product_forward;
    auto describe = [&](const dnnl::memory::desc& weightsMd) {
      return p.bias ? ip::primitive_desc(engine(), dnnl::prop_kind::forward_inference, primSrc, weightsMd,
                                         biasMd, dstMd, attr)
                    : ip::primitive_desc(engine(), dnnl::prop_kind::forward_inference, primSrc, weightsMd,
                                         dstMd, attr);
    };
    if (p.borrowWeights && !bf16) {
      // The caller's plain [N, K] weights as they are (oneDNN's gemm-based inner product takes
      // them; MKL's sgemm, which eager uses, packs panels per call the same way). Only an
      // optimized implementation is worth it: a reference one means pack as usual.
      try {
        ip::primitive_desc plain = describe(userW);
        if (std::string(plain.impl_info_str()).rfind("ref", 0) != 0) {
          return finishWeighted<ip>("linear", plain, userSrc, std::move(binaryInputs), p.weights, userW, p.bias,
                                    biasMd, /*borrowWeights=*/true);
        }
      } catch (const dnnl::error&) {
        // No implementation for plain weights: pack below.
      }
    }
    ip::primitive_desc pd = describe(primW);
    return finishWeighted<ip>("linear", pd, userSrc, std::move(binaryInputs), p.weights, userW, p.bias, biasMd);
  });
}

namespace {

/// Prepends unit dims to a plain layout's desc up to \p rank.
StatusOr<dnnl::memory::desc> padRank(const Layout& l, int rank, const char* what) {
  if (l.empty() || !l.isPlain() || l.dtype() != DataType::kF32) {
    return invalidArgument(std::string("matmul: ") + what + " must be a plain f32 layout, got " +
                           l.toString());
  }
  auto d = l.dims();
  auto s = l.strides();
  while (static_cast<int>(d.size()) < rank) {
    s.insert(s.begin(), d.empty() ? 1 : d.front() * s.front());
    d.insert(d.begin(), 1);
  }
  return dnnl::memory::desc(dims(d.begin(), d.end()), dt::f32, dims(s.begin(), s.end()));
}

}  // namespace

StatusOr<std::unique_ptr<Kernel>> createMatmul(const MatmulParams& p) {
  const int rank = std::max(p.a.rank(), p.b.rank());
  if (p.a.rank() < 2 || p.b.rank() < 2 || rank > 6) {
    return invalidArgument("matmul: operands must have rank 2..6, got " + p.a.toString() + " and " +
                           p.b.toString());
  }
  VF_ASSIGN_OR_RETURN(dnnl::memory::desc aMd, padRank(p.a, rank, "a"));
  VF_ASSIGN_OR_RETURN(dnnl::memory::desc bMd, padRank(p.b, rank, "b"));
  dims ad = aMd.get_dims(), bd = bMd.get_dims();
  if (ad[rank - 1] != bd[rank - 2]) {
    return invalidArgument("matmul: inner dims differ: " + p.a.toString() + " x " + p.b.toString());
  }
  dims dd(rank);
  for (int i = 0; i < rank - 2; ++i) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1) {
      return invalidArgument("matmul: batch dims do not broadcast: " + p.a.toString() + " x " +
                             p.b.toString());
    }
    dd[i] = std::max(ad[i], bd[i]);
  }
  dd[rank - 2] = ad[rank - 2];
  dd[rank - 1] = bd[rank - 1];
  return guarded("matmul", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const bool bf16 = p.compute == ComputeType::kBF16;
    dnnl::memory::desc primA = bf16 ? dnnl::memory::desc(ad, dt::bf16, plainTag(rank)) : aMd;
    dnnl::memory::desc primB = bf16 ? dnnl::memory::desc(bd, dt::bf16, plainTag(rank)) : bMd;
    dnnl::memory::desc dstMd(dd, dt::f32, plainTag(rank));
    std::vector<RuntimeInput> binaryInputs;
    VF_ASSIGN_OR_RETURN(dnnl::primitive_attr attr, makeAttr(p.postOps, dd, &binaryInputs));
    dnnl::matmul::primitive_desc pd(engine(), primA, primB, dstMd, attr);
    std::vector<RuntimeInput> inputs;
    inputs.push_back(makeInput(DNNL_ARG_SRC, aMd, pd.src_desc()));
    inputs.push_back(makeInput(DNNL_ARG_WEIGHTS, bMd, pd.weights_desc()));
    for (auto& b : binaryInputs) inputs.push_back(std::move(b));
    return finish<dnnl::matmul>("matmul", pd, std::move(inputs));
  });
}

}  // namespace verifuse::kernels
