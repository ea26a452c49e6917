// Int8 convolution (u8/s8 src with a zero point, s8 per-channel weights prepacked once) and
// linear (oneDNN matmul: inner product takes no source zero point in v3.2), with output scales,
// requantization to u8/s8 or dequantization to f32, and relu / clamp / gelu / sum post-ops. int8.h says what
// one kernel computes.
#include "verifuse/kernels/int8.h"

#include <cmath>
#include <cstring>

#include "common.h"

namespace verifuse::kernels {
using namespace onednn;

const char* int8TypeName(Int8Type t) {
  switch (t) {
    case Int8Type::kU8: return "u8";
    case Int8Type::kS8: return "s8";
    case Int8Type::kF32: return "f32";
  }
  return "?";
}

namespace {

dt toDt(Int8Type t) { return t == Int8Type::kU8 ? dt::u8 : t == Int8Type::kS8 ? dt::s8 : dt::f32; }

/// A scalar (or per-channel) f32 / s32 constant argument of the quantization attributes.
dnnl::memory scalarMemory(const void* data, size_t count, dt type) {
  dnnl::memory m(dnnl::memory::desc({static_cast<dnnl::memory::dim>(count)}, type, tag::a), engine());
  std::memcpy(m.get_data_handle(), data, count * 4);
  return m;
}

/// The primitive, its prepacked constants, the src conversion on entry and, when the primitive
/// chose a blocked dst, the conversion back to the caller's dense row-major output.
class Int8Kernel final : public Kernel {
 public:
  Int8Kernel(const char* name, dnnl::primitive prim, size_t scratch, std::string impl, RuntimeInput src,
             dnnl::memory::desc primDst, dnnl::memory::desc userDst,
             std::vector<std::pair<int, dnnl::memory>> constants, bool sum)
      : name_(name), prim_(std::move(prim)), src_(std::move(src)), primDst_(primDst), userDst_(userDst),
        constants_(std::move(constants)), sum_(sum) {
    implInfo_ = std::move(impl);
    scratchpadBytes_ = std::max(scratch, src_.convertScratch);
    if (primDst_ != userDst_) {
      dnnl::reorder::primitive_desc out(engine(), primDst_, engine(), userDst_, userScratchAttr());
      toUser_ = makePrimitive<dnnl::reorder>(out);
      scratchpadBytes_ = std::max(scratchpadBytes_, out.scratchpad_desc().get_size());
      if (sum_) {
        dnnl::reorder::primitive_desc in(engine(), userDst_, engine(), primDst_, userScratchAttr());
        fromUser_ = makePrimitive<dnnl::reorder>(in);
        scratchpadBytes_ = std::max(scratchpadBytes_, in.scratchpad_desc().get_size());
      }
    }
    inputLayouts_.push_back(toLayout(src_.userMd));
    outputLayout_ = toLayout(userDst_);
  }
  const char* name() const override { return name_; }

  Status execute(std::span<const void* const> inputs, void* output) const override {
    if (inputs.size() != 1 || inputs[0] == nullptr || output == nullptr) {
      return invalidArgument(std::string(name_) + ": expects one src and an output");
    }
    return guarded(std::string(name_) + " execute", [&]() -> Status {
      const dnnl::engine& eng = engine();
      dnnl::stream& s = threadStream();
      std::unordered_map<int, dnnl::memory> args;
      dnnl::memory scratch;
      if (scratchpadBytes_ > 0) {
        dnnl::memory::desc spMd({static_cast<dnnl::memory::dim>(scratchpadBytes_)}, dt::u8, tag::a);
        scratch = dnnl::memory(spMd, eng, threadScratch(0, scratchpadBytes_));
        args.emplace(DNNL_ARG_SCRATCHPAD, scratch);
      }
      dnnl::memory user(src_.userMd, eng, const_cast<void*>(inputs[0]));
      if (src_.convert) {
        dnnl::memory staged(src_.primMd, eng, threadScratch(1, src_.primMd.get_size()));
        std::unordered_map<int, dnnl::memory> cargs{{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, staged}};
        if (scratch) cargs.emplace(DNNL_ARG_SCRATCHPAD, scratch);
        src_.convert->execute(s, cargs);
        args.emplace(DNNL_ARG_SRC, staged);
      } else {
        args.emplace(DNNL_ARG_SRC, user);
      }
      for (const auto& [arg, mem] : constants_) args.emplace(arg, mem);
      dnnl::memory userOut(userDst_, eng, output);
      if (!toUser_) {
        args.emplace(DNNL_ARG_DST, userOut);
        prim_.execute(s, args);
      } else {
        dnnl::memory primOut(primDst_, eng, threadScratch(2, primDst_.get_size()));
        if (fromUser_) {
          std::unordered_map<int, dnnl::memory> rargs{{DNNL_ARG_FROM, userOut}, {DNNL_ARG_TO, primOut}};
          if (scratch) rargs.emplace(DNNL_ARG_SCRATCHPAD, scratch);
          fromUser_->execute(s, rargs);
        }
        args.emplace(DNNL_ARG_DST, primOut);
        prim_.execute(s, args);
        std::unordered_map<int, dnnl::memory> oargs{{DNNL_ARG_FROM, primOut}, {DNNL_ARG_TO, userOut}};
        if (scratch) oargs.emplace(DNNL_ARG_SCRATCHPAD, scratch);
        toUser_->execute(s, oargs);
      }
      s.wait();
      return Status::ok();
    });
  }

 private:
  const char* name_;
  dnnl::primitive prim_;
  RuntimeInput src_;
  dnnl::memory::desc primDst_, userDst_;
  std::optional<dnnl::primitive> toUser_, fromUser_;
  std::vector<std::pair<int, dnnl::memory>> constants_;
  bool sum_ = false;
};

Status checkParams(const Int8Params& p) {
  if (p.srcType == Int8Type::kF32) return invalidArgument("int8: src must be u8 or s8");
  if (p.weights == nullptr) return invalidArgument("int8: weights are required");
  const int64_t outC = p.weightDims.empty() ? 0 : p.weightDims[0];
  if (static_cast<int64_t>(p.weightScales.size()) != outC) {
    return invalidArgument("int8: " + std::to_string(p.weightScales.size()) + " weight scales for " +
                           std::to_string(outC) + " output channels");
  }
  // Scales must be positive and finite (a zero or NaN scale has no integer meaning; the rules
  // refuse such graphs, this is the kernel's own guard).
  auto bad = [](float s) { return !std::isfinite(s) || s <= 0.f; };
  if (bad(p.srcScale) || (p.dstType != Int8Type::kF32 && bad(p.dstScale)) || !std::isfinite(p.sumScale)) {
    return invalidArgument("int8: scales must be finite and > 0");
  }
  for (float s : p.weightScales) {
    if (bad(s)) return invalidArgument("int8: weight scales must be finite and > 0");
  }
  if (p.srcStrides.size() != p.srcDims.size()) return invalidArgument("int8: src strides do not match src dims");
  return Status::ok();
}

}  // namespace

std::vector<int64_t> int8OutputDims(const Int8Params& p) {
  if (!p.conv) {
    if (p.srcDims.size() != 2 || p.weightDims.size() != 2 || p.srcDims[1] != p.weightDims[1]) return {};
    return {p.srcDims[0], p.weightDims[0]};
  }
  ConvParams c;
  c.srcDims = p.srcDims;
  c.weightDims = p.weightDims;
  c.stride = p.stride;
  c.padL = p.padL;
  c.padR = p.padR;
  c.dilation = p.dilation;
  c.groups = p.groups;
  return convOutputDims(c);
}

StatusOr<std::unique_ptr<Kernel>> createInt8(const Int8Params& p) {
  VF_RETURN_IF_ERROR(checkParams(p));
  std::vector<int64_t> outV = int8OutputDims(p);
  if (outV.empty()) return invalidArgument("int8: invalid geometry, src " + dimsToString(p.srcDims) + " weight " + dimsToString(p.weightDims));
  for (int64_t d : outV) {
    if (d < 1) return invalidArgument("int8: empty output " + dimsToString(outV));
  }
  return guarded(p.conv ? "int8 conv" : "int8 linear", [&]() -> StatusOr<std::unique_ptr<Kernel>> {
    const int64_t outC = p.weightDims[0];
    dims srcDims(p.srcDims.begin(), p.srcDims.end());
    dims srcStrides(p.srcStrides.begin(), p.srcStrides.end());
    dims dstDims(outV.begin(), outV.end());
    dnnl::memory::desc userSrc(srcDims, toDt(p.srcType), srcStrides);
    const int rank = static_cast<int>(dstDims.size());
    dnnl::memory::desc userDst(dstDims, toDt(p.dstType),
                               p.conv && p.dstChannelsLast && rank >= 4 ? channelsLastTag(rank) : plainTag(rank));

    dnnl::primitive_attr attr = userScratchAttr();
    attr.set_scales_mask(DNNL_ARG_SRC, 0);
    attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    const bool quantOut = p.dstType != Int8Type::kF32;
    if (quantOut) {
      attr.set_scales_mask(DNNL_ARG_DST, 0);
      attr.set_zero_points_mask(DNNL_ARG_DST, 0);
    }
    dnnl::post_ops po;
    bool sum = false;
    for (Int8Params::PostOp op : p.postOps) {
      if (op == Int8Params::PostOp::kRelu) {
        po.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      } else if (op == Int8Params::PostOp::kGeluErf) {
        po.append_eltwise(dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
      } else if (op == Int8Params::PostOp::kGeluTanh) {
        po.append_eltwise(dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
      } else if (op == Int8Params::PostOp::kClamp) {
        if (!(p.clampLo <= p.clampHi)) return invalidArgument("int8: clamp post-op with lo > hi (or NaN)");
        po.append_eltwise(dnnl::algorithm::eltwise_clip, p.clampLo, p.clampHi);
      } else {
        if (sum || !quantOut) return invalidArgument("int8: one sum post-op, into a u8/s8 output only");
        po.append_sum(p.sumScale, p.sumZeroPoint, toDt(p.dstType));
        sum = true;
      }
    }
    attr.set_post_ops(po);

    std::vector<std::pair<int, dnnl::memory>> constants;
    const int32_t srcZp = p.srcZeroPoint, dstZp = p.dstZeroPoint;
    const float srcScale = p.srcScale, dstScale = p.dstScale;
    constants.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scalarMemory(&srcScale, 1, dt::f32));
    constants.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, scalarMemory(&srcZp, 1, dt::s32));
    constants.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                           scalarMemory(p.weightScales.data(), p.weightScales.size(), dt::f32));
    if (quantOut) {
      constants.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scalarMemory(&dstScale, 1, dt::f32));
      constants.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, scalarMemory(&dstZp, 1, dt::s32));
    }

    if (p.conv) {
      dims userWDims;
      int wMask = 1;
      if (p.groups > 1) {
        userWDims = {p.groups, outC / p.groups, p.weightDims[1]};
        wMask = 3;  // per (group, output channel of the group)
      } else {
        userWDims = {outC, p.weightDims[1]};
      }
      if (outC % p.groups != 0 || p.srcDims[1] != p.weightDims[1] * p.groups) {
        return invalidArgument("int8 conv: channels do not match groups");
      }
      userWDims.insert(userWDims.end(), p.weightDims.begin() + 2, p.weightDims.end());
      attr.set_scales_mask(DNNL_ARG_WEIGHTS, wMask);
      const size_t n = p.srcDims.size() - 2;
      dims stride, padL, padR, dil;
      VF_RETURN_IF_ERROR(spatialVector(p.stride, n, 1, "conv stride", &stride));
      VF_RETURN_IF_ERROR(spatialVector(p.padL, n, 0, "conv padL", &padL));
      VF_RETURN_IF_ERROR(spatialVector(p.padR.empty() ? p.padL : p.padR, n, 0, "conv padR", &padR));
      VF_RETURN_IF_ERROR(spatialVector(p.dilation, n, 1, "conv dilation", &dil));
      for (auto& d : dil) d -= 1;  // oneDNN: 0 = dense
      dnnl::memory::desc userW(userWDims, dt::s8, plainTag(static_cast<int>(userWDims.size())));
      dnnl::memory::desc primW(userWDims, dt::s8, tag::any);
      dnnl::memory::desc primSrc(srcDims, toDt(p.srcType), tag::any);
      dnnl::memory::desc primDst(dstDims, toDt(p.dstType), tag::any);
      dnnl::memory::desc biasMd({outC}, dt::f32, tag::a);
      using cf = dnnl::convolution_forward;
      cf::primitive_desc pd =
          p.bias ? cf::primitive_desc(engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      primSrc, primW, biasMd, primDst, stride, dil, padL, padR, attr)
                 : cf::primitive_desc(engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      primSrc, primW, primDst, stride, dil, padL, padR, attr);
      constants.emplace_back(DNNL_ARG_WEIGHTS, packConstant(p.weights, userW, pd.weights_desc()));
      if (p.bias) constants.emplace_back(DNNL_ARG_BIAS, packConstant(p.bias, biasMd, pd.bias_desc()));
      auto prim = makePrimitive<cf>(pd);
      return std::unique_ptr<Kernel>(new Int8Kernel("int8_conv", prim, pd.scratchpad_desc().get_size(),
                                                    pd.impl_info_str(), makeInput(DNNL_ARG_SRC, userSrc, pd.src_desc()),
                                                    pd.dst_desc(), userDst, std::move(constants), sum));
    }
    // Linear: matmul src [M, K] x weights [K, N] (torch's [N, K] read transposed), scales per N.
    const int64_t k = p.weightDims[1];
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);
    dnnl::memory::desc userW({k, outC}, dt::s8, tag::ba);
    dnnl::memory::desc primW({k, outC}, dt::s8, tag::any);
    dnnl::memory::desc biasMd({1, outC}, dt::f32, tag::ab);
    using mm = dnnl::matmul;
    mm::primitive_desc pd = p.bias ? mm::primitive_desc(engine(), userSrc, primW, biasMd, userDst, attr)
                                   : mm::primitive_desc(engine(), userSrc, primW, userDst, attr);
    constants.emplace_back(DNNL_ARG_WEIGHTS, packConstant(p.weights, userW, pd.weights_desc()));
    if (p.bias) constants.emplace_back(DNNL_ARG_BIAS, packConstant(p.bias, biasMd, pd.bias_desc()));
    auto prim = makePrimitive<mm>(pd);
    return std::unique_ptr<Kernel>(new Int8Kernel("int8_linear", prim, pd.scratchpad_desc().get_size(),
                                                  pd.impl_info_str(), makeInput(DNNL_ARG_SRC, userSrc, pd.src_desc()),
                                                  pd.dst_desc(), userDst, std::move(constants), sum));
  });
}

}  // namespace verifuse::kernels
