// Eltwise, binary, softmax, layer norm, concat and reorder kernels.
#include "common.h"

namespace verifuse::kernels {
using namespace onednn;

StatusOr<std::unique_ptr<Kernel>> createEltwise(const Layout& src, Activation act, float alpha,
                                                float beta) {
  if (src.empty()) return invalidArgument("eltwise: empty src layout");
  return guarded("eltwise", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const dnnl::memory::desc& md = toDesc(src);
    EltwiseMapping m = mapActivation(act, alpha, beta);
    dnnl::eltwise_forward::primitive_desc pd(engine(), dnnl::prop_kind::forward_inference, m.alg, md,
                                             md, m.alpha, m.beta, userScratchAttr());
    return finish<dnnl::eltwise_forward>("eltwise", pd, {makeInput(DNNL_ARG_SRC, md, pd.src_desc())});
  });
}

namespace {

/// Prepends unit dims to a plain layout (broadcasting aligns from the right).
StatusOr<dnnl::memory::desc> alignRank(const Layout& l, int rank) {
  if (l.rank() == rank) return toDesc(l);
  if (!l.isPlain()) return unsupported("binary: a blocked operand needs the output rank");
  auto d = l.dims();
  auto s = l.strides();
  while (static_cast<int>(d.size()) < rank) {
    s.insert(s.begin(), d.empty() ? 1 : d.front() * s.front());
    d.insert(d.begin(), 1);
  }
  return dnnl::memory::desc(dims(d.begin(), d.end()), toDnnl(l.dtype()), dims(s.begin(), s.end()));
}

bool commutative(BinaryAlg a) {
  return a == BinaryAlg::kAdd || a == BinaryAlg::kMul || a == BinaryAlg::kMax || a == BinaryAlg::kMin;
}

}  // namespace

StatusOr<std::unique_ptr<Kernel>> createBinary(BinaryAlg alg, const Layout& a, const Layout& b,
                                               Format dstFormat) {
  if (a.empty() || b.empty()) return invalidArgument("binary: empty operand layout");
  const int rank = std::max(a.rank(), b.rank());
  VF_ASSIGN_OR_RETURN(dnnl::memory::desc aMd, alignRank(a, rank));
  VF_ASSIGN_OR_RETURN(dnnl::memory::desc bMd, alignRank(b, rank));
  dims ad = aMd.get_dims(), bd = bMd.get_dims(), od(rank);
  for (int i = 0; i < rank; ++i) {
    if (ad[i] != bd[i] && ad[i] != 1 && bd[i] != 1) {
      return invalidArgument("binary: " + a.toString() + " and " + b.toString() +
                             " do not broadcast");
    }
    od[i] = std::max(ad[i], bd[i]);
  }
  return guarded("binary", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    // oneDNN's fast paths broadcast src1 only; swap commutative ops when a is the broadcast one.
    const bool swap = ad != od && bd == od && commutative(alg);
    const dnnl::memory::desc& s0 = swap ? bMd : aMd;
    const dnnl::memory::desc& s1 = swap ? aMd : bMd;
    dnnl::memory::desc dstMd =
        dstFormat == Format::kAny && s0.get_dims() == od
            ? dnnl::memory::desc(od, s0.get_data_type(), tag::any)
            : activationDesc(od, s0.get_data_type(), dstFormat == Format::kAny ? Format::kPlain : dstFormat);
    dnnl::binary::primitive_desc pd(engine(), toDnnl(alg), s0, s1, dstMd, userScratchAttr());
    std::vector<RuntimeInput> inputs;
    // execute() order stays {a, b}; only the oneDNN argument slots swap.
    inputs.push_back(makeInput(swap ? DNNL_ARG_SRC_1 : DNNL_ARG_SRC_0, aMd, aMd));
    inputs.push_back(makeInput(swap ? DNNL_ARG_SRC_0 : DNNL_ARG_SRC_1, bMd, bMd));
    return finish<dnnl::binary>("binary", pd, std::move(inputs));
  });
}

StatusOr<std::unique_ptr<Kernel>> createSoftmax(const Layout& src, int axis, bool logSoftmax) {
  const int rank = src.rank();
  if (axis < 0) axis += rank;
  if (rank < 1 || axis < 0 || axis >= rank) {
    return invalidArgument("softmax: axis out of range for " + src.toString());
  }
  return guarded("softmax", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const dnnl::memory::desc& md = toDesc(src);
    dnnl::softmax_forward::primitive_desc pd(
        engine(), dnnl::prop_kind::forward_inference,
        logSoftmax ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate, md, md, axis,
        userScratchAttr());
    return finish<dnnl::softmax_forward>("softmax", pd, {makeInput(DNNL_ARG_SRC, md, pd.src_desc())});
  });
}

StatusOr<std::unique_ptr<Kernel>> createLayerNorm(const Layout& src, float eps, const float* gamma,
                                                  const float* beta) {
  if (src.rank() < 2) return invalidArgument("layer_norm: src must have rank >= 2");
  if (!(eps >= 0.f)) return invalidArgument("layer_norm: eps must be >= 0");
  return guarded("layer_norm", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const dnnl::memory::desc& md = toDesc(src);
    const int64_t c = src.dims().back();
    auto flags = dnnl::normalization_flags::none;
    if (gamma) flags |= dnnl::normalization_flags::use_scale;
    if (beta) flags |= dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::primitive_desc pd(
        engine(), dnnl::prop_kind::forward_inference, md, md, eps, flags, userScratchAttr());
    dnnl::memory::desc cMd({c}, dt::f32, tag::a);
    std::vector<ConstantArg> constants;
    if (gamma) constants.push_back(packConstant(DNNL_ARG_SCALE, gamma, cMd, cMd));
    if (beta) constants.push_back(packConstant(DNNL_ARG_SHIFT, beta, cMd, cMd));
    return finish<dnnl::layer_normalization_forward>(
        "layer_norm", pd, {makeInput(DNNL_ARG_SRC, md, pd.src_desc())}, std::move(constants));
  });
}

StatusOr<std::unique_ptr<Kernel>> createConcat(const std::vector<Layout>& srcs, int axis,
                                               Format dstFormat) {
  if (srcs.empty()) return invalidArgument("concat: no inputs");
  const int rank = srcs[0].rank();
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return invalidArgument("concat: axis out of range");
  auto od = srcs[0].dims();
  od[axis] = 0;
  for (const Layout& l : srcs) {
    auto d = l.dims();
    if (static_cast<int>(d.size()) != rank) return invalidArgument("concat: ranks differ");
    for (int i = 0; i < rank; ++i) {
      if (i != axis && d[i] != od[i]) {
        return invalidArgument("concat: " + l.toString() + " differs outside the axis");
      }
    }
    od[axis] += d[axis];
  }
  return guarded("concat", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    std::vector<dnnl::memory::desc> mds;
    for (const Layout& l : srcs) mds.push_back(toDesc(l));
    dnnl::memory::desc dstMd =
        activationDesc(dims(od.begin(), od.end()), mds[0].get_data_type(), dstFormat);
    dnnl::concat::primitive_desc pd(engine(), dstMd, axis, mds, userScratchAttr());
    std::vector<RuntimeInput> inputs;
    for (size_t i = 0; i < mds.size(); ++i) {
      inputs.push_back(makeInput(DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), mds[i], mds[i]));
    }
    return finish<dnnl::concat>("concat", pd, std::move(inputs));
  });
}

StatusOr<std::unique_ptr<Kernel>> createReorder(const Layout& from, const Layout& to) {
  if (from.empty() || to.empty() || from.dims() != to.dims()) {
    return invalidArgument("reorder: dims differ: " + from.toString() + " -> " + to.toString());
  }
  return guarded("reorder", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    dnnl::reorder::primitive_desc pd(engine(), toDesc(from), engine(), toDesc(to), userScratchAttr());
    return finish<dnnl::reorder>("reorder", pd, {makeInput(DNNL_ARG_FROM, toDesc(from), toDesc(from))});
  });
}

}  // namespace verifuse::kernels
