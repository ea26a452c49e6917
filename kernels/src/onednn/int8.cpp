// Int8 convolution (u8/s8 src with a zero point, s8 per-channel weights prepacked once) and
// linear (oneDNN matmul: inner product takes no source zero point in v3.2), with output scales,
// requantization to u8/s8 or dequantization to f32, and relu / clamp / gelu / sum post-ops. int8.h says what
// one kernel computes.
#include "verifuse/kernels/int8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "common.h"
#include "verifuse/kernels/capabilities.h"

namespace verifuse::kernels {
using namespace onednn;

const char* int8TypeName(Int8Type t) {
  switch (t) {
    case Int8Type::kU8: return "u8";
    case Int8Type::kS8: return "s8";
    case Int8Type::kF32: return "f32";
    case Int8Type::kS32: return "s32";
  }
  return "?";
}

namespace {

dt toDt(Int8Type t) {
  return t == Int8Type::kU8 ? dt::u8 : t == Int8Type::kS8 ? dt::s8 : t == Int8Type::kS32 ? dt::s32 : dt::f32;
}

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
             std::vector<ConstantArg> constants, bool sum)
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
      for (const ConstantArg& c : constants_) args.emplace(c.arg, c.memory);
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
  std::vector<ConstantArg> constants_;
  bool sum_ = false;
};

Status checkParams(const Int8Params& p) {
  if (p.srcType == Int8Type::kF32 || p.srcType == Int8Type::kS32) return invalidArgument("int8: src must be u8 or s8");
  if (p.dstType == Int8Type::kS32 &&
      (p.conv || p.bias || !p.postOps.empty() || p.srcZeroPoint != 0 || p.srcScale != 1.f ||
       std::any_of(p.weightScales.begin(), p.weightScales.end(), [](float s) { return s != 1.f; }))) {
    return invalidArgument("int8: an s32 output is the bare accumulator of a linear (no scales, zero points, bias, post-ops)");
  }
  if (p.weights == nullptr) return invalidArgument("int8: weights are required");
  const int64_t outC = p.weightDims.empty() ? 0 : p.weightDims[0];
  if (static_cast<int64_t>(p.weightScales.size()) != outC) {
    return invalidArgument("int8: " + std::to_string(p.weightScales.size()) + " weight scales for " +
                           std::to_string(outC) + " output channels");
  }
  // Scales must be positive and finite (a zero or NaN scale has no integer meaning; the rules
  // refuse such graphs, this is the kernel's own guard).
  auto bad = [](float s) { return !std::isfinite(s) || s <= 0.f; };
  const bool codesOut = p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8;
  if (bad(p.srcScale) || (codesOut && bad(p.dstScale)) || !std::isfinite(p.sumScale)) {
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

namespace {

/// Deterministic pseudo-random bytes (a 64-bit LCG's high bits).
struct ProbeCodes {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  uint8_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint8_t>(state >> 56);
  }
};

int64_t numelOf(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t v : d) n *= v;
  return n;
}

/// Strides of a dense output: row-major, or channels-last (N, spatial..., C) when asked.
std::vector<int64_t> denseStrides(const std::vector<int64_t>& dims, bool channelsLast) {
  const size_t r = dims.size();
  std::vector<int64_t> st(r, 1);
  if (!channelsLast || r < 3) {
    for (size_t i = r - 1; i-- > 0;) st[i] = st[i + 1] * dims[i + 1];
    return st;
  }
  st[1] = 1;
  int64_t run = dims[1];
  for (size_t i = r - 1; i >= 2; --i) {
    st[i] = run;
    run *= dims[i];
  }
  st[0] = run;
  return st;
}

double applyPostOps(const Int8Params& p, double y, double residualCode) {
  for (Int8Params::PostOp op : p.postOps) {
    switch (op) {
      case Int8Params::PostOp::kSum: y += p.sumScale * (residualCode - p.sumZeroPoint); break;
      case Int8Params::PostOp::kRelu: y = std::max(y, 0.0); break;
      case Int8Params::PostOp::kClamp: y = std::min(std::max(y, double(p.clampLo)), double(p.clampHi)); break;
      case Int8Params::PostOp::kGeluErf: y = 0.5 * y * (1.0 + std::erf(y * M_SQRT1_2)); break;
      case Int8Params::PostOp::kGeluTanh:
        y = 0.5 * y * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (y + 0.044715 * y * y * y)));
        break;
    }
  }
  return y;
}

}  // namespace

namespace {

/// Where one output element of each channel is checked and how its products are laid out: the
/// probe's geometry, derived once from the parameters.
struct ProbeGeometry {
  std::vector<int64_t> out, outStrides;
  size_t spatial = 0;
  int64_t cg = 0, og = 0, kernelVolume = 1;
};

ProbeGeometry probeGeometry(const Int8Params& p, std::vector<int64_t> out) {
  ProbeGeometry g;
  g.out = std::move(out);
  g.outStrides = denseStrides(g.out, p.conv && p.dstChannelsLast && g.out.size() >= 4);
  g.spatial = p.conv ? p.srcDims.size() - 2 : 0;
  const int64_t groups = p.conv ? p.groups : 1;
  g.cg = p.weightDims[1];
  g.og = p.weightDims[0] / groups;
  g.kernelVolume = numelOf(std::vector<int64_t>(p.weightDims.begin() + 2, p.weightDims.end()));
  return g;
}

/// The checked element of channel o: batch row o mod N, a spatial position near the centre (every
/// weight of the channel in bounds for a padded conv), linear row o mod M.
std::vector<int64_t> probePosition(const ProbeGeometry& g, int64_t o) {
  std::vector<int64_t> pos(g.out.size(), 0);
  pos[0] = o % g.out[0];
  pos[1] = o;
  for (size_t d = 0; d < g.spatial; ++d) pos[2 + d] = std::min(g.out[2 + d] - 1, g.out[2 + d] / 2 + (o % 2));
  return pos;
}

/// Calls tap(srcOffset, weightIndex) for every product of output element \p pos of channel \p o
/// whose source is inside the input (padding contributes nothing).
template <typename Tap>
void forEachProduct(const Int8Params& p, const ProbeGeometry& g, const std::vector<int64_t>& pos, int64_t o, Tap tap) {
  auto at = [](const std::vector<int64_t>& v, size_t i, int64_t dflt) { return i < v.size() ? v[i] : dflt; };
  const int64_t grp = o / g.og;
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t kk = 0; kk < g.kernelVolume; ++kk) {
      int64_t srcOffset = pos[0] * p.srcStrides[0] + (p.conv ? (grp * g.cg + c) * p.srcStrides[1] : c * p.srcStrides[1]);
      bool inside = true;
      int64_t rem = kk;
      for (size_t d = g.spatial; d-- > 0;) {
        const int64_t kd = p.weightDims[2 + d];
        const int64_t kIndex = rem % kd;
        rem /= kd;
        const int64_t in = pos[2 + d] * at(p.stride, d, 1) - at(p.padL, d, 0) + kIndex * at(p.dilation, d, 1);
        if (in < 0 || in >= p.srcDims[2 + d]) inside = false;
        srcOffset += in * p.srcStrides[2 + d];
      }
      if (inside) tap(srcOffset, (o * g.cg + c) * g.kernelVolume + kk);
    }
  }
}

/// The channel whose two largest same-sign weights sum highest in magnitude: where a kernel that
/// adds products in saturating pairs is most likely to clamp.
int64_t channelWithTheLargestPairs(const Int8Params& p, const ProbeGeometry& g) {
  const int64_t outC = p.weightDims[0], perChannel = g.cg * g.kernelVolume;
  int64_t best = 0, bestSum = -1;
  for (int64_t o = 0; o < outC; ++o) {
    int64_t pos1 = 0, pos2 = 0, neg1 = 0, neg2 = 0;  // the two largest positive and |negative| weights
    for (int64_t i = 0; i < perChannel; ++i) {
      const int64_t w = p.weights[o * perChannel + i];
      if (w > pos1) { pos2 = pos1; pos1 = w; }
      else if (w > pos2) { pos2 = w; }
      if (-w > neg1) { neg2 = neg1; neg1 = -w; }
      else if (-w > neg2) { neg2 = -w; }
    }
    const int64_t sum = std::max(pos1 + pos2, neg1 + neg2);
    if (sum > bestSum) {
      bestSum = sum;
      best = o;
    }
  }
  return best;
}

/// Runs \p k on \p src (and the residual codes \p residual for a sum post-op) and checks the
/// element probePosition(o) of every channel in \p channels against the formula.
Status runAndCheck(const Int8Params& p, const Kernel& k, const ProbeGeometry& g, const std::vector<uint8_t>& src,
                   const std::vector<uint8_t>& residual, const std::vector<int64_t>& channels, const char* run) {
  auto srcCode = [&](int64_t offset) -> int64_t {
    const uint8_t b = src[static_cast<size_t>(offset)];
    return p.srcType == Int8Type::kU8 ? int64_t(b) : int64_t(static_cast<int8_t>(b));
  };
  const bool quantOut = p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8;
  const bool accOut = p.dstType == Int8Type::kS32;
  const bool sum = std::find(p.postOps.begin(), p.postOps.end(), Int8Params::PostOp::kSum) != p.postOps.end();
  std::vector<uint8_t> dst = residual;
  VF_RETURN_IF_ERROR(k.execute({src.data()}, dst.data()));
  auto dstCode = [&](const std::vector<uint8_t>& buf, int64_t offset) -> double {
    const uint8_t b = buf[static_cast<size_t>(offset)];
    return p.dstType == Int8Type::kU8 ? double(b) : double(static_cast<int8_t>(b));
  };
  for (int64_t o : channels) {
    const std::vector<int64_t> pos = probePosition(g, o);
    int64_t acc = 0;
    forEachProduct(p, g, pos, o, [&](int64_t srcOffset, int64_t wi) {
      acc += int64_t(p.weights[wi]) * (srcCode(srcOffset) - p.srcZeroPoint);
    });
    const double scale = double(p.srcScale) * double(p.weightScales[static_cast<size_t>(o)]);
    const double bias = p.bias ? double(p.bias[o]) : 0.0;
    int64_t offset = 0;
    for (size_t d = 0; d < g.out.size(); ++d) offset += pos[d] * g.outStrides[d];
    const double y = applyPostOps(p, scale * double(acc) + bias, sum ? dstCode(residual, offset) : 0.0);
    double got, want, tol;
    if (accOut) {
      int32_t v;
      std::memcpy(&v, dst.data() + offset * 4, 4);
      got = v;
      want = static_cast<double>(acc);
      tol = 0;  // the accumulator itself: exact
    } else if (quantOut) {
      got = dstCode(dst, offset);
      const double lo = p.dstType == Int8Type::kU8 ? 0 : -128, hi = p.dstType == Int8Type::kU8 ? 255 : 127;
      want = std::min(hi, std::max(lo, std::nearbyint(y / p.dstScale) + p.dstZeroPoint));
      tol = 1.0;
    } else {
      float f;
      std::memcpy(&f, dst.data() + offset * 4, 4);
      got = f;
      want = y;
      // A few float32 roundings (2^-24 each) of the scaled accumulator, the bias add and the
      // result; a gelu post-op's approximation adds a few ulp of the result. One weight off by
      // one moves the result by scale * |x - zero point|, above this wherever that code is not 0.
      const bool gelu = std::any_of(p.postOps.begin(), p.postOps.end(), [](Int8Params::PostOp op) {
        return op == Int8Params::PostOp::kGeluErf || op == Int8Params::PostOp::kGeluTanh;
      });
      tol = 4e-7 * (scale * std::abs(double(acc)) + std::abs(bias) + std::abs(y)) + (gelu ? 4e-6 * std::abs(y) : 0) +
            1e-30;
    }
    if (!(std::abs(got - want) <= tol)) {
      char buf[240];
      std::snprintf(buf, sizeof buf, "%s codes, output channel %lld: kernel %.9g, integer formula %.9g (tolerance %.3g)",
                    run, static_cast<long long>(o), got, want, tol);
      return internalError(std::string("int8 probe: the prepacked kernel does not reproduce the formula: ") + buf);
    }
  }
  return Status::ok();
}

}  // namespace

IntDotArithmetic onednnInt8Arithmetic(Int8Type srcType) {
  return onednnInt8Arithmetic(srcType, capabilities().onednnInt8WithoutSaturation());
}

Status probeInt8Kernel(const Int8Params& p, const Kernel& k) {
  const std::vector<int64_t> out = int8OutputDims(p);
  if (out.empty() || p.srcDims.size() != p.srcStrides.size()) return invalidArgument("int8 probe: invalid geometry");
  const ProbeGeometry g = probeGeometry(p, out);
  // The src buffer spans the caller's (dense) strides.
  int64_t srcSpan = 1;
  for (size_t d = 0; d < p.srcDims.size(); ++d) srcSpan += (p.srcDims[d] - 1) * p.srcStrides[d];
  ProbeCodes rng;
  std::vector<uint8_t> src(static_cast<size_t>(srcSpan));
  for (auto& b : src) b = rng.next();
  const bool quantOut = p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8;
  std::vector<uint8_t> residual(static_cast<size_t>(numelOf(out)) * (quantOut ? 1 : 4));
  if (std::find(p.postOps.begin(), p.postOps.end(), Int8Params::PostOp::kSum) != p.postOps.end()) {
    for (auto& b : residual) b = rng.next();  // the residual's codes
  }
  std::vector<int64_t> every(static_cast<size_t>(p.weightDims[0]));
  for (size_t o = 0; o < every.size(); ++o) every[o] = static_cast<int64_t>(o);
  VF_RETURN_IF_ERROR(runAndCheck(p, k, g, src, residual, every, "random"));

  // The extremes, as bytes of the source type: every product of the target element at its
  // largest (the top code where the weight is positive, the bottom one where it is negative), at
  // its smallest, and the top code everywhere.
  const int64_t target = channelWithTheLargestPairs(p, g);
  const std::vector<int64_t> pos = probePosition(g, target);
  const uint8_t top = p.srcType == Int8Type::kU8 ? 255 : 127, bottom = p.srcType == Int8Type::kU8 ? 0 : 0x80;
  const struct {
    const char* name;
    bool maxWherePositive, maxWhereNegative;
  } runs[] = {{"largest-sum", true, false}, {"smallest-sum", false, true}, {"top", true, true}};
  for (const auto& r : runs) {
    std::vector<uint8_t> extreme = src;
    forEachProduct(p, g, pos, target, [&](int64_t srcOffset, int64_t wi) {
      const bool positive = p.weights[wi] >= 0;
      extreme[static_cast<size_t>(srcOffset)] = (positive ? r.maxWherePositive : r.maxWhereNegative) ? top : bottom;
    });
    VF_RETURN_IF_ERROR(runAndCheck(p, k, g, extreme, residual, {target}, r.name));
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<Kernel>> createInt8(const Int8Params& p) {
  VF_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, createInt8Unprobed(p));
  VF_RETURN_IF_ERROR(probeInt8Kernel(p, *k));
  return k;
}

StatusOr<std::unique_ptr<Kernel>> createInt8Unprobed(const Int8Params& p) {
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
    const bool accOut = p.dstType == Int8Type::kS32;  // no quantization attributes at all: exact s32
    if (!accOut) {
      attr.set_scales_mask(DNNL_ARG_SRC, 0);
      attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    }
    const bool quantOut = p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8;
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

    std::vector<ConstantArg> constants;
    const int32_t srcZp = p.srcZeroPoint, dstZp = p.dstZeroPoint;
    const float srcScale = p.srcScale, dstScale = p.dstScale;
    if (!accOut) {
      constants.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scalarMemory(&srcScale, 1, dt::f32));
      constants.emplace_back(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, scalarMemory(&srcZp, 1, dt::s32));
      constants.emplace_back(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                             scalarMemory(p.weightScales.data(), p.weightScales.size(), dt::f32));
    }
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
      constants.push_back(packConstant(DNNL_ARG_WEIGHTS, p.weights, userW, pd.weights_desc()));
      if (p.bias) constants.push_back(packConstant(DNNL_ARG_BIAS, p.bias, biasMd, pd.bias_desc()));
      auto prim = makePrimitive<cf>(pd);
      return std::unique_ptr<Kernel>(new Int8Kernel("int8_conv", prim, pd.scratchpad_desc().get_size(),
                                                    pd.impl_info_str(), makeInput(DNNL_ARG_SRC, userSrc, pd.src_desc()),
                                                    pd.dst_desc(), userDst, std::move(constants), sum));
    }
    // Linear: matmul src [M, K] x weights [K, N] (torch's [N, K] read transposed), scales per N.
    const int64_t k = p.weightDims[1];
    if (!accOut) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);
    dnnl::memory::desc userW({k, outC}, dt::s8, tag::ba);
    dnnl::memory::desc primW({k, outC}, dt::s8, tag::any);
    dnnl::memory::desc biasMd({1, outC}, dt::f32, tag::ab);
    using mm = dnnl::matmul;
    mm::primitive_desc pd = p.bias ? mm::primitive_desc(engine(), userSrc, primW, biasMd, userDst, attr)
                                   : mm::primitive_desc(engine(), userSrc, primW, userDst, attr);
    constants.push_back(packConstant(DNNL_ARG_WEIGHTS, p.weights, userW, pd.weights_desc()));
    if (p.bias) constants.push_back(packConstant(DNNL_ARG_BIAS, p.bias, biasMd, pd.bias_desc()));
    auto prim = makePrimitive<mm>(pd);
    return std::unique_ptr<Kernel>(new Int8Kernel("int8_linear", prim, pd.scratchpad_desc().get_size(),
                                                  pd.impl_info_str(), makeInput(DNNL_ARG_SRC, userSrc, pd.src_desc()),
                                                  pd.dst_desc(), userDst, std::move(constants), sum));
  });
}

}  // namespace verifuse::kernels
