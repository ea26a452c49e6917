// Front end of the widening int8 kernel (baseline ISA): the checks createInt8 makes, the
// geometry, the exactness guard, weight packing, and the Kernel object that dispatches to the
// AVX2 code (int8_widening_avx2.cpp). int8_widening.h says what the kernel computes.
#include "verifuse/kernels/int8_widening.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "cpu/int8_widening_internal.h"
#include "cpu/weight_memory.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels {

// NOTE: the one place that decides which CPUs run these kernels (cpu_features is being replaced
// by a capability model: change this line only).
bool int8WideningAvailable() { return cpu::hasAvx2Fma(); }

IntDotArithmetic int8WideningArithmetic() {
  return IntDotArithmetic{.variant = "own:vpmaddwd",
                          .source = IntDotArithmetic::Source::kCodesMinusZeroPoint,
                          .groupSize = 2,
                          .groupBits = 32,
                          .groupSaturates = false,
                          .accumulatorBits = 32};
}

namespace {

using int8w::DstKind;
using int8w::Plan;
using int8w::PostOpKind;
using int8w::Recipe;

bool u8Out(const Int8Params& p) { return p.dstType == Int8Type::kU8; }

std::string dimsString(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

/// The checks createInt8 makes before it asks oneDNN (same codes, same order).
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

/// \p v with torch's conventions for a per-spatial-dim argument: empty = \p dflt, one entry =
/// every dim (as createInt8's spatialVector).
Status spatial(const std::vector<int64_t>& v, size_t n, int64_t dflt, const char* what, std::vector<int64_t>* out) {
  if (v.empty()) {
    out->assign(n, dflt);
  } else if (v.size() == 1 && n > 1) {
    out->assign(n, v[0]);
  } else if (v.size() != n) {
    return invalidArgument(std::string("int8 conv: ") + what + " has " + std::to_string(v.size()) +
                           " entries, expected " + std::to_string(n));
  } else {
    *out = v;
  }
  return Status::ok();
}

struct Geometry {
  std::vector<int64_t> out;  ///< output dims (conv: N, O, spatial...; linear: M, N)
  std::vector<int64_t> stride, padL, padR, dilation;
};

/// int8OutputDims (int8.h, oneDNN library) and the conv geometry checks, with their codes.
StatusOr<Geometry> geometryOf(const Int8Params& p) {
  Geometry g;
  if (!p.conv) {
    if (p.srcDims.size() != 2 || p.weightDims.size() != 2 || p.srcDims[1] != p.weightDims[1]) {
      return invalidArgument("int8: invalid geometry, src " + dimsString(p.srcDims) + " weight " + dimsString(p.weightDims));
    }
    g.out = {p.srcDims[0], p.weightDims[0]};
    return g;
  }
  const size_t rank = p.srcDims.size();
  if (rank < 3 || rank > 5 || p.weightDims.size() != rank) {
    return invalidArgument("int8: invalid geometry, src " + dimsString(p.srcDims) + " weight " + dimsString(p.weightDims));
  }
  const size_t n = rank - 2;
  VF_RETURN_IF_ERROR(spatial(p.stride, n, 1, "stride", &g.stride));
  VF_RETURN_IF_ERROR(spatial(p.padL, n, 0, "padL", &g.padL));
  VF_RETURN_IF_ERROR(spatial(p.padR.empty() ? p.padL : p.padR, n, 0, "padR", &g.padR));
  VF_RETURN_IF_ERROR(spatial(p.dilation, n, 1, "dilation", &g.dilation));
  for (size_t i = 0; i < n; ++i) {
    if (g.stride[i] < 1 || g.dilation[i] < 1 || g.padL[i] < 0 || g.padR[i] < 0) {
      return invalidArgument("int8 conv: stride/dilation must be >= 1 and padding >= 0");
    }
  }
  g.out = {p.srcDims[0], p.weightDims[0]};
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = g.dilation[i] * (p.weightDims[2 + i] - 1) + 1;
    g.out.push_back((p.srcDims[2 + i] + g.padL[i] + g.padR[i] - span) / g.stride[i] + 1);
  }
  return g;
}

/// A buffer of cpu::allocateWeightMemory (huge pages), released with the kernel.
struct FreeWeightMemory {
  void operator()(void* p) const { cpu::freeWeightMemory(p); }
};
using WeightMemory = std::unique_ptr<void, FreeWeightMemory>;

class Int8WideningKernel final : public Kernel {
 public:
  /// \p plan's weights, scales and biases point into \p packed.
  Int8WideningKernel(bool conv, const Plan& plan, WeightMemory packed)
      : conv_(conv), plan_(plan), packed_(std::move(packed)) {
    implInfo_ = plan.depthwise ? "verifuse int8 dw:avx2_vpmaddwd" : "verifuse int8:avx2_vpmaddwd";
    // Empty Layouts: see int8_widening.h (Layout is implemented in the oneDNN library).
    inputLayouts_.emplace_back();
  }
  const char* name() const override { return conv_ ? "int8_conv" : "int8_linear"; }

  Status execute(std::span<const void* const> inputs, void* output) const override {
    if (inputs.size() != 1 || inputs[0] == nullptr || output == nullptr) {
      return invalidArgument(std::string(name()) + ": expects one src and an output");
    }
    // Below ~2^18 multiply-adds per thread another thread costs more than it saves (as the GEMM).
    // A depthwise multiply-add costs about 4 of the GEMM's (a third of its vpmaddwd lanes carry an
    // odd tap's zero weight, and each output needs its own epilogue): MobileNetV2's 7x7x960 layer
    // (0.4 M multiply-adds) ran on one thread at 22 GOP/s while oneDNN's two threads made 29.
    constexpr double kMinMacsPerThread = 1 << 18;
    const double work = plan_.macs() * (plan_.depthwise ? 4.0 : 1.0);
    const int maxThreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int threads = static_cast<int>(std::max(1.0, std::min<double>(maxThreads, work / kMinMacsPerThread)));
    return int8w::runAvx2(plan_, inputs[0], output, threads);
  }

 private:
  bool conv_;
  Plan plan_;
  WeightMemory packed_;
};

}  // namespace

StatusOr<std::unique_ptr<Kernel>> createInt8Widening(const Int8Params& p) {
  VF_RETURN_IF_ERROR(checkParams(p));
  VF_ASSIGN_OR_RETURN(Geometry geo, geometryOf(p));
  for (int64_t d : geo.out) {
    if (d < 1) return invalidArgument("int8: empty output " + dimsString(geo.out));
  }
  bool sum = false;
  for (Int8Params::PostOp op : p.postOps) {
    if (op == Int8Params::PostOp::kClamp && !(p.clampLo <= p.clampHi)) {
      return invalidArgument("int8: clamp post-op with lo > hi (or NaN)");
    }
    if (op == Int8Params::PostOp::kSum) {
      if (sum || !(p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8)) {
        return invalidArgument("int8: one sum post-op, into a u8/s8 output only");
      }
      sum = true;
    }
  }
  const int64_t outC = p.weightDims[0];
  if (p.conv && (p.groups < 1 || outC % p.groups != 0 || p.srcDims[1] != p.weightDims[1] * p.groups)) {
    return invalidArgument("int8 conv: channels do not match groups");
  }
  for (int64_t d : p.srcDims) {
    if (d < 1) return invalidArgument("int8: empty src " + dimsString(p.srcDims));
  }
  for (int64_t d : p.weightDims) {
    if (d < 1) return invalidArgument("int8: empty weight " + dimsString(p.weightDims));
  }

  // What this kernel does not do: the caller takes another path.
  if (p.conv && p.srcDims.size() != 4) return unimplemented("int8 widening: only 2-d convolutions");
  if (!int8WideningAvailable()) return unimplemented("int8 widening: this CPU has no AVX2+FMA");
  for (int64_t s : p.srcStrides) {
    if (s < 0) return unimplemented("int8 widening: negative src strides");
  }
  if (static_cast<int>(p.postOps.size()) > int8w::kMaxPostOps) return unimplemented("int8 widening: more than 8 post-ops");
  // Sizes far beyond any model: keeps every index below in int64 and every count in int.
  constexpr int64_t kLimit = int64_t{1} << 31;
  for (int64_t d : p.srcDims) {
    if (d >= kLimit) return unimplemented("int8 widening: src too large");
  }
  for (int64_t d : geo.out) {
    if (d >= kLimit) return unimplemented("int8 widening: output too large");
  }

  Plan plan;
  const bool u8 = p.srcType == Int8Type::kU8;
  plan.srcSigned = !u8;
  plan.srcZeroPoint = p.srcZeroPoint;
  if (p.conv) {
    plan.batch = p.srcDims[0];
    plan.channels = p.srcDims[1];
    plan.height = p.srcDims[2];
    plan.width = p.srcDims[3];
    plan.srcStrideN = p.srcStrides[0];
    plan.srcStrideC = p.srcStrides[1];
    plan.srcStrideH = p.srcStrides[2];
    plan.srcStrideW = p.srcStrides[3];
    plan.outChannels = outC;
    plan.outHeight = geo.out[2];
    plan.outWidth = geo.out[3];
    plan.dstChannelsLast = p.dstChannelsLast;
    plan.kernelH = p.weightDims[2];
    plan.kernelW = p.weightDims[3];
    plan.strideH = geo.stride[0];
    plan.strideW = geo.stride[1];
    plan.padTop = geo.padL[0];
    plan.padLeft = geo.padL[1];
    plan.dilationH = geo.dilation[0];
    plan.dilationW = geo.dilation[1];
    plan.groups = p.groups;
  } else {
    plan.batch = p.srcDims[0];
    plan.channels = p.srcDims[1];
    plan.height = plan.width = 1;
    plan.srcStrideN = p.srcStrides[0];
    plan.srcStrideC = p.srcStrides[1];
    plan.outChannels = outC;
    plan.outHeight = plan.outWidth = 1;
    plan.dstChannelsLast = true;
  }
  plan.groupChannels = plan.channels / plan.groups;
  plan.groupOutChannels = outC / plan.groups;
  switch (p.dstType) {
    case Int8Type::kF32: plan.dst = DstKind::kF32; break;
    case Int8Type::kU8: plan.dst = DstKind::kU8; break;
    case Int8Type::kS8: plan.dst = DstKind::kS8; break;
    case Int8Type::kS32: plan.dst = DstKind::kS32; break;
  }
  const int64_t taps = plan.kernelH * plan.kernelW;
  plan.k = taps * plan.groupChannels;
  plan.kPairs = (plan.k + 1) / 2;
  plan.panels = (plan.groupOutChannels + int8w::kPanelWidth - 1) / int8w::kPanelWidth;
  if (plan.k >= kLimit / 64 || static_cast<double>(plan.kPairs) * plan.panels * plan.groups * 64 > 1e12) {
    return unimplemented("int8 widening: weights too large");
  }

  // Exactness guard: x - zx must fit s16 for every code, and no partial sum of any output
  // channel may leave s32 (every partial sum is bounded by max|x - zx| * sum |w|).
  const int64_t codeLo = u8 ? 0 : -128, codeHi = u8 ? 255 : 127;
  const int64_t maxAbsX = std::max(std::abs(codeLo - int64_t{p.srcZeroPoint}), std::abs(codeHi - int64_t{p.srcZeroPoint}));
  if (maxAbsX > 32767) {
    return unimplemented("int8 widening: source zero point " + std::to_string(p.srcZeroPoint) +
                         " puts x - zx outside s16");
  }
  for (int64_t o = 0; o < outC; ++o) {
    int64_t absSum = 0;
    for (int64_t kk = 0; kk < plan.k; ++kk) absSum += std::abs(int64_t{p.weights[o * plan.k + kk]});
    if (absSum * maxAbsX > std::numeric_limits<int32_t>::max()) {
      return unimplemented("int8 widening: output channel " + std::to_string(o) +
                           " could overflow the s32 accumulator (sum |w| = " + std::to_string(absSum) + ")");
    }
  }

  // Depthwise kernel: padding reads zx as a code; the window's terms and the ring of input rows
  // (kernelH * dilationH) have fixed bounds.
  plan.depthwise = p.conv && plan.groups == plan.channels && plan.groupOutChannels == 1 && taps <= int8w::kMaxDwTaps &&
                   plan.kernelH * plan.dilationH <= int8w::kMaxDwRingRows && p.srcZeroPoint >= codeLo &&
                   p.srcZeroPoint <= codeHi;
  plan.dwRowPairs = (plan.kernelW + 1) / 2;

  plan.nPostOps = static_cast<int>(p.postOps.size());
  for (size_t i = 0; i < p.postOps.size(); ++i) {
    switch (p.postOps[i]) {
      case Int8Params::PostOp::kRelu: plan.postOps[i] = PostOpKind::kRelu; break;
      case Int8Params::PostOp::kClamp: plan.postOps[i] = PostOpKind::kClamp; break;
      case Int8Params::PostOp::kGeluErf: plan.postOps[i] = PostOpKind::kGeluErf; break;
      case Int8Params::PostOp::kGeluTanh: plan.postOps[i] = PostOpKind::kGeluTanh; break;
      case Int8Params::PostOp::kSum: plan.postOps[i] = PostOpKind::kSum; break;
    }
  }
  plan.clampLo = p.clampLo;
  plan.clampHi = p.clampHi;
  plan.sumScale = p.sumScale;
  plan.sumZeroPoint = p.sumZeroPoint;
  plan.invDstScale = static_cast<float>(1.0 / static_cast<double>(p.dstScale));
  plan.dstZeroPoint = p.dstZeroPoint;

  // The epilogue's recipe (int8_widening_internal.h): a leading sum, then relu / clamp only,
  // composed into one clamp [lo, hi]. clamp(clamp(y, lo, hi), a, b) is clamp(y, max(lo, a),
  // min(hi, b)) when the intervals meet, else the constant a (hi < a) or b (lo > b).
  const bool codesOut = p.dstType == Int8Type::kU8 || p.dstType == Int8Type::kS8;
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  auto compose = [&](double a, double b) {
    if (hi < a) {
      lo = hi = a;
    } else if (lo > b) {
      lo = hi = b;
    } else {
      lo = std::max(lo, a);
      hi = std::min(hi, b);
    }
  };
  plan.recipe = Recipe::kBounds;
  for (size_t i = 0; i < p.postOps.size(); ++i) {
    const Int8Params::PostOp op = p.postOps[i];
    if (op == Int8Params::PostOp::kRelu) {
      compose(0, std::numeric_limits<double>::infinity());
    } else if (op == Int8Params::PostOp::kClamp) {
      compose(p.clampLo, p.clampHi);
    } else if (op == Int8Params::PostOp::kSum && i == 0) {
      plan.recipe = Recipe::kSumBounds;
    } else {
      plan.recipe = Recipe::kGeneral;
    }
  }
  const double invDst = 1.0 / static_cast<double>(p.dstScale);
  if (codesOut) {
    // In units of dstScale, inside the codes' range around the zero point.
    const double qLo = (u8Out(p) ? 0.0 : -128.0) - p.dstZeroPoint, qHi = (u8Out(p) ? 255.0 : 127.0) - p.dstZeroPoint;
    lo *= invDst;
    hi *= invDst;
    compose(qLo, qHi);
  }
  plan.boundLo = static_cast<float>(lo);
  plan.boundHi = static_cast<float>(hi);
  plan.sumScaleOverDst = static_cast<float>(static_cast<double>(p.sumScale) * invDst);

  // One buffer: the packed weights (GEMM panels or depthwise blocks), then scales and biases per
  // packed column (depthwise: per channel).
  const int64_t dwBlocks = (plan.channels + int8w::kDwBlock - 1) / int8w::kDwBlock;
  const int64_t columns = plan.depthwise ? dwBlocks * int8w::kDwBlock : plan.groups * plan.panels * int8w::kPanelWidth;
  const int64_t weightElems = plan.depthwise ? dwBlocks * plan.kernelH * plan.dwRowPairs * int8w::kDwBlock * 2
                                             : plan.groups * plan.panels * plan.kPairs * int8w::kPanelWidth * 2;
  const size_t weightBytes = (static_cast<size_t>(weightElems) * 2 + 63) / 64 * 64;
  const size_t bytes = weightBytes + 4 * static_cast<size_t>(columns) * sizeof(float);
  WeightMemory packed(cpu::allocateWeightMemory(bytes));
  if (packed == nullptr) return internalError("int8 widening: out of memory");
  auto* w16 = static_cast<int16_t*>(packed.get());
  auto* scales = reinterpret_cast<float*>(static_cast<char*>(packed.get()) + weightBytes);
  float* biases = scales + columns;
  float* scalesOverDst = biases + columns;
  float* biasesOverDst = scalesOverDst + columns;
  std::memset(packed.get(), 0, bytes);

  // Torch's weight [O, C/groups, kh, kw] (linear [N, K]): element (o, c, kh, kw) at
  // ((o * cg + c) * kh_size + kh) * kw_size + kw; its GEMM row is k = (kh * kw_size + kw) * cg + c.
  const int64_t cg = plan.groupChannels, og = plan.groupOutChannels;
  auto weightAt = [&](int64_t o, int64_t kk) -> int16_t {
    const int64_t tap = kk / cg, c = kk % cg;
    return p.weights[(o * cg + c) * taps + tap];
  };
  if (plan.depthwise) {
    for (int64_t c = 0; c < plan.channels; ++c) {
      for (int64_t kh = 0; kh < plan.kernelH; ++kh) {
        for (int64_t kw = 0; kw < plan.kernelW; ++kw) {
          const int64_t block = c / int8w::kDwBlock, lane = c % int8w::kDwBlock;
          const int64_t pair = (block * plan.kernelH + kh) * plan.dwRowPairs + kw / 2;
          w16[(pair * int8w::kDwBlock + lane) * 2 + kw % 2] = p.weights[c * taps + kh * plan.kernelW + kw];
        }
      }
    }
  } else {
    for (int64_t g = 0; g < plan.groups; ++g) {
      for (int64_t j = 0; j < plan.panels; ++j) {
        int16_t* panel = w16 + (g * plan.panels + j) * plan.kPairs * int8w::kPanelWidth * 2;
        for (int64_t col = 0; col < int8w::kPanelWidth; ++col) {
          const int64_t oLocal = j * int8w::kPanelWidth + col;
          if (oLocal >= og) break;
          for (int64_t kk = 0; kk < plan.k; ++kk) {
            panel[((kk / 2) * int8w::kPanelWidth + col) * 2 + kk % 2] = weightAt(g * og + oLocal, kk);
          }
        }
      }
    }
  }
  for (int64_t g = 0; g < plan.groups; ++g) {
    for (int64_t oLocal = 0; oLocal < og; ++oLocal) {
      const int64_t o = g * og + oLocal;
      // Packed column of output channel o: group g's panels start at g * panels * 16.
      const int64_t col = plan.depthwise ? o : g * plan.panels * int8w::kPanelWidth + oLocal;
      const double scale = static_cast<double>(p.srcScale) * static_cast<double>(p.weightScales[o]);
      const double bias = p.bias != nullptr ? static_cast<double>(p.bias[o]) : 0.0;
      scales[col] = static_cast<float>(scale);
      biases[col] = static_cast<float>(bias);
      scalesOverDst[col] = static_cast<float>(scale * invDst);
      biasesOverDst[col] = static_cast<float>(bias * invDst);
    }
  }
  plan.weights = plan.depthwise ? nullptr : w16;
  plan.dwWeights = plan.depthwise ? w16 : nullptr;
  plan.scales = scales;
  plan.biases = biases;
  plan.scalesOverDst = scalesOverDst;
  plan.biasesOverDst = biasesOverDst;
  Kernel* kernel = new (std::nothrow) Int8WideningKernel(p.conv, plan, std::move(packed));
  if (kernel == nullptr) return internalError("int8 widening: out of memory");
  return std::unique_ptr<Kernel>(kernel);
}

}  // namespace verifuse::kernels
