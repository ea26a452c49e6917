// The widening int8 kernel (kernels/int8_widening.h) against an exact reference: the accumulator
// in int64 straight from the definition (sum over the window of (x - zx) * w, padding skipped),
// then scales, bias and post-ops in double. The integer part must match exactly (s32 outputs bit
// for bit; f32 outputs of unit scales too), f32 outputs within a bound on the kernel's float32
// roundings carried through the post-ops, and every u8/s8 code must be one the exact value rounds
// to once that bound is taken into account (so a code may differ only right at a rounding
// boundary; almost all must be equal). Inputs lean on the extremes (codes 0 / 255 / -128 / 127,
// weights +127 / -128, zero points 0 and 128): where oneDNN's vpmaddubsw kernels saturate.
#include "verifuse/kernels/int8_widening.h"
#include "tier_skip.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace verifuse::kernels {
namespace {

using PostOpList = std::vector<Int8Params::PostOp>;
constexpr auto kRelu = Int8Params::PostOp::kRelu;
constexpr auto kClamp = Int8Params::PostOp::kClamp;
constexpr auto kGeluErf = Int8Params::PostOp::kGeluErf;
constexpr auto kGeluTanh = Int8Params::PostOp::kGeluTanh;
constexpr auto kSum = Int8Params::PostOp::kSum;

/// One convolution or linear, its inputs and the parameters built from them.
struct Case {
  bool conv = true;
  // conv: src [n, c, h, w], weight [o, c / groups, kh, kw]; linear: src [n, c] = [M, K], weight [o, c].
  int64_t n = 1, c = 8, h = 9, w = 9, o = 16;
  int64_t kh = 3, kw = 3, sh = 1, sw = 1, padT = 1, padL = 1, padB = 1, padR = 1, dh = 1, dw = 1, groups = 1;
  bool srcChannelsLast = true, dstChannelsLast = true;
  bool srcColumnMajor = false;  ///< linear: src strides {1, M}
  bool srcS8 = false;
  int32_t zx = 128;
  Int8Type dst = Int8Type::kU8;
  bool bias = true;
  PostOpList ops;
  float clampLo = -0.5f, clampHi = 0.75f;  ///< every clamp post-op's bounds
  uint32_t seed = 1;
  /// Share of codes and weights drawn from the extremes (0/255 or -128/127; +127/-128).
  double extremes = 0.25;
  /// Unit scales, no bias: an f32 output is then the accumulator itself (exact below 2^24).
  bool unitScales = false;
};

std::string describe(const Case& t) {
  std::string s = t.conv ? "conv" : "linear";
  s += " n" + std::to_string(t.n) + " c" + std::to_string(t.c) + " " + std::to_string(t.h) + "x" + std::to_string(t.w) +
       " o" + std::to_string(t.o);
  if (t.conv) {
    s += " k" + std::to_string(t.kh) + "x" + std::to_string(t.kw) + " s" + std::to_string(t.sh) + "," +
         std::to_string(t.sw) + " pad" + std::to_string(t.padT) + "," + std::to_string(t.padL) + "," +
         std::to_string(t.padB) + "," + std::to_string(t.padR) + " dil" + std::to_string(t.dh) + "," +
         std::to_string(t.dw) + " g" + std::to_string(t.groups) + (t.srcChannelsLast ? " nhwc" : " nchw") +
         (t.dstChannelsLast ? "->nhwc" : "->nchw");
  } else if (t.srcColumnMajor) {
    s += " colmajor";
  }
  s += std::string(t.srcS8 ? " s8" : " u8") + " zx" + std::to_string(t.zx) + " dst" +
       std::to_string(static_cast<int>(t.dst)) + (t.bias ? " bias" : "") + " ops";
  for (auto op : t.ops) s += " " + std::to_string(static_cast<int>(op));
  return s;
}

struct Built {
  Int8Params p;
  std::vector<uint8_t> src;  ///< codes (u8, or s8 bytes) at p.srcStrides
  std::vector<int8_t> weights;
  std::vector<float> bias, weightScales;
  std::vector<int64_t> outDims, outStrides;
  int64_t outNumel = 0;
  std::vector<uint8_t> residual;  ///< codes the output holds on entry (sum post-op)
};

bool hasOp(const Case& t, Int8Params::PostOp op) { return std::find(t.ops.begin(), t.ops.end(), op) != t.ops.end(); }

Built build(const Case& t) {
  Built b;
  std::mt19937 rng(t.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto code = [&]() -> uint8_t {
    const int lo = t.srcS8 ? -128 : 0, hi = t.srcS8 ? 127 : 255;
    int v = unit(rng) < t.extremes ? (unit(rng) < 0.5 ? lo : hi) : std::uniform_int_distribution<int>(lo, hi)(rng);
    return static_cast<uint8_t>(v);
  };
  Int8Params& p = b.p;
  p.conv = t.conv;
  const int64_t cg = t.conv ? t.c / t.groups : t.c;
  if (t.conv) {
    p.srcDims = {t.n, t.c, t.h, t.w};
    p.srcStrides = t.srcChannelsLast ? std::vector<int64_t>{t.h * t.w * t.c, 1, t.w * t.c, t.c}
                                     : std::vector<int64_t>{t.c * t.h * t.w, t.h * t.w, t.w, 1};
    p.weightDims = {t.o, cg, t.kh, t.kw};
    p.stride = {t.sh, t.sw};
    p.padL = {t.padT, t.padL};
    p.padR = {t.padB, t.padR};
    p.dilation = {t.dh, t.dw};
    p.groups = t.groups;
    p.dstChannelsLast = t.dstChannelsLast;
  } else {
    p.srcDims = {t.n, t.c};
    p.srcStrides = t.srcColumnMajor ? std::vector<int64_t>{1, t.n} : std::vector<int64_t>{t.c, 1};
    p.weightDims = {t.o, t.c};
  }
  b.src.resize(static_cast<size_t>(t.conv ? t.n * t.c * t.h * t.w : t.n * t.c));
  for (auto& v : b.src) v = code();
  const int64_t k = cg * (t.conv ? t.kh * t.kw : 1);
  b.weights.resize(static_cast<size_t>(t.o * k));
  for (auto& v : b.weights) {
    v = static_cast<int8_t>(unit(rng) < t.extremes ? (unit(rng) < 0.5 ? -128 : 127)
                                                   : std::uniform_int_distribution<int>(-128, 127)(rng));
  }
  p.srcType = t.srcS8 ? Int8Type::kS8 : Int8Type::kU8;
  p.dstType = t.dst;
  p.weights = b.weights.data();
  p.srcZeroPoint = t.zx;
  // Scales that put y in a few units: the accumulator's spread is about sqrt(K) * 128 * 74.
  p.srcScale = t.unitScales ? 1.f : 0.02f;
  b.weightScales.resize(static_cast<size_t>(t.o));
  for (int64_t o = 0; o < t.o; ++o) {
    b.weightScales[o] = t.unitScales ? 1.f
                                     : static_cast<float>((0.5 + 0.15 * static_cast<double>(o % 7)) /
                                                          (0.02 * std::sqrt(static_cast<double>(k)) * 9500.0));
  }
  p.weightScales = b.weightScales;
  if (t.bias && !t.unitScales) {
    b.bias.resize(static_cast<size_t>(t.o));
    for (auto& v : b.bias) v = static_cast<float>(unit(rng) * 2.0 - 1.0);
    p.bias = b.bias.data();
  }
  p.dstScale = 0.03f;
  p.dstZeroPoint = t.dst == Int8Type::kS8 ? -3 : 120;
  p.postOps = t.ops;
  p.clampLo = t.clampLo;
  p.clampHi = t.clampHi;
  p.sumScale = 0.04f;
  p.sumZeroPoint = t.dst == Int8Type::kS8 ? -5 : 17;

  if (t.conv) {
    const int64_t oh = (t.h + t.padT + t.padB - t.dh * (t.kh - 1) - 1) / t.sh + 1;
    const int64_t ow = (t.w + t.padL + t.padR - t.dw * (t.kw - 1) - 1) / t.sw + 1;
    b.outDims = {t.n, t.o, oh, ow};
    b.outStrides = t.dstChannelsLast ? std::vector<int64_t>{oh * ow * t.o, 1, ow * t.o, t.o}
                                     : std::vector<int64_t>{t.o * oh * ow, oh * ow, ow, 1};
  } else {
    b.outDims = {t.n, t.o};
    b.outStrides = {t.o, 1};
  }
  b.outNumel = 1;
  for (int64_t d : b.outDims) b.outNumel *= d;
  if (hasOp(t, kSum)) {
    b.residual.resize(static_cast<size_t>(b.outNumel));
    for (auto& v : b.residual) v = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 255)(rng));
  }
  return b;
}

int64_t srcCode(const Case& t, const Built& b, int64_t offset) {
  const uint8_t v = b.src[static_cast<size_t>(offset)];
  return t.srcS8 ? int64_t{static_cast<int8_t>(v)} : int64_t{v};
}

/// The exact accumulator of output element (n, o, oh, ow) (linear: (n, o)).
int64_t exactAcc(const Case& t, const Built& b, int64_t n, int64_t o, int64_t oh, int64_t ow) {
  const Int8Params& p = b.p;
  int64_t acc = 0;
  if (!t.conv) {
    for (int64_t kk = 0; kk < t.c; ++kk) {
      acc += (srcCode(t, b, n * p.srcStrides[0] + kk * p.srcStrides[1]) - t.zx) * b.weights[o * t.c + kk];
    }
    return acc;
  }
  const int64_t cg = t.c / t.groups, og = t.o / t.groups, g = o / og;
  for (int64_t c = 0; c < cg; ++c) {
    for (int64_t i = 0; i < t.kh; ++i) {
      for (int64_t j = 0; j < t.kw; ++j) {
        const int64_t ih = oh * t.sh - t.padT + i * t.dh, iw = ow * t.sw - t.padL + j * t.dw;
        if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;  // zero padding of the dequantized input
        const int64_t off = n * p.srcStrides[0] + (g * cg + c) * p.srcStrides[1] + ih * p.srcStrides[2] + iw * p.srcStrides[3];
        acc += (srcCode(t, b, off) - t.zx) * b.weights[((o * cg + c) * t.kh + i) * t.kw + j];
      }
    }
  }
  return acc;
}

struct Expected {
  double y = 0;    ///< exact result before the output conversion
  double err = 0;  ///< bound on the kernel's float32 error in y
};

/// y and the bound on the kernel's error in it (int8_widening.h's float32 steps: the scale
/// product, the fma, the GELUs' few ulp, the sum's fma), through the post-ops in order.
Expected expected(const Case& t, const Built& b, int64_t acc, int64_t o, double residualCode) {
  const Int8Params& p = b.p;
  const double prod = static_cast<double>(p.srcScale) * static_cast<double>(b.weightScales[o]) * static_cast<double>(acc);
  const double bias = p.bias != nullptr ? static_cast<double>(p.bias[o]) : 0.0;
  Expected e{prod + bias, 0};
  // Unit scales and no bias: y = fma(float(acc), 1, 0) is the accumulator itself (below 2^24).
  e.err = t.unitScales ? 0.0 : 1.2e-7 * (2 * std::abs(prod) + std::abs(e.y)) + 1e-30;
  for (auto op : t.ops) {
    switch (op) {
      case Int8Params::PostOp::kRelu: e.y = std::max(e.y, 0.0); break;
      case Int8Params::PostOp::kClamp:
        e.y = std::min(std::max(e.y, static_cast<double>(p.clampLo)), static_cast<double>(p.clampHi));
        break;
      case Int8Params::PostOp::kGeluErf:
        e.y = 0.5 * e.y * (1.0 + std::erf(e.y * M_SQRT1_2));
        e.err = 1.13 * e.err + 5e-7 * std::abs(e.y) + 1e-37;
        break;
      case Int8Params::PostOp::kGeluTanh:
        e.y = 0.5 * e.y * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (e.y + 0.044715 * e.y * e.y * e.y)));
        e.err = 1.13 * e.err + 5e-7 * std::abs(e.y) + 1e-37;
        break;
      case Int8Params::PostOp::kSum:
        e.y += static_cast<double>(p.sumScale) * (residualCode - p.sumZeroPoint);
        e.err += 1.2e-7 * std::abs(e.y);
        break;
    }
  }
  return e;
}

std::vector<uint8_t> runKernel(const Kernel& k, const Built& b) {
  const size_t es = b.p.dstType == Int8Type::kU8 || b.p.dstType == Int8Type::kS8 ? 1 : 4;
  std::vector<uint8_t> out(static_cast<size_t>(b.outNumel) * es, 0xA5);
  if (!b.residual.empty()) out = b.residual;
  const Status s = k.execute({b.src.data()}, out.data());
  EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

/// Runs \p t and checks every output element. \returns the share of codes equal to the exact
/// rounding (1 for f32 / s32 outputs).
double check(const Case& t, const char* wantImpl = nullptr) {
  SCOPED_TRACE(describe(t));
  const Built b = build(t);
  auto made = createInt8Widening(b.p);
  EXPECT_TRUE(made.isOk()) << made.status().toString();
  if (!made.isOk()) return 0;
  const Kernel& k = *made.value();
  if (wantImpl != nullptr) EXPECT_EQ(k.implInfo(), wantImpl);
  const std::vector<uint8_t> out = runKernel(k, b);
  const bool codes = t.dst == Int8Type::kU8 || t.dst == Int8Type::kS8;
  const double lo = t.dst == Int8Type::kU8 ? 0 : -128, hi = t.dst == Int8Type::kU8 ? 255 : 127;
  int64_t equal = 0, failures = 0;
  const int64_t oh = t.conv ? b.outDims[2] : 1, ow = t.conv ? b.outDims[3] : 1;
  for (int64_t n = 0; n < t.n; ++n) {
    for (int64_t o = 0; o < t.o; ++o) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const int64_t off = t.conv ? n * b.outStrides[0] + o * b.outStrides[1] + y * b.outStrides[2] + x * b.outStrides[3]
                                     : n * b.outStrides[0] + o;
          const int64_t acc = exactAcc(t, b, n, o, y, x);
          std::string where = "output (" + std::to_string(n) + "," + std::to_string(o) + "," + std::to_string(y) + "," +
                              std::to_string(x) + ") acc " + std::to_string(acc);
          bool ok = true;
          if (t.dst == Int8Type::kS32) {
            int32_t got;
            std::memcpy(&got, out.data() + off * 4, 4);
            ok = got == acc;
            if (!ok) ADD_FAILURE() << where << ": kernel " << got;
            equal += ok;
          } else {
            double residual = 0;
            if (!b.residual.empty()) {
              const uint8_t r = b.residual[static_cast<size_t>(off)];
              residual = t.dst == Int8Type::kU8 ? r : static_cast<int8_t>(r);
            }
            const Expected e = expected(t, b, acc, o, residual);
            if (!codes) {
              float got;
              std::memcpy(&got, out.data() + off * 4, 4);
              ok = std::abs(static_cast<double>(got) - e.y) <= e.err;
              if (!ok) ADD_FAILURE() << where << ": kernel " << got << ", exact " << e.y << " (bound " << e.err << ")";
              equal += ok;
            } else {
              const uint8_t raw = out[static_cast<size_t>(off)];
              const double got = t.dst == Int8Type::kU8 ? static_cast<double>(raw) : static_cast<double>(static_cast<int8_t>(raw));
              // The codes of y / dstScale anywhere within the error bound (+ the reciprocal's
              // rounding and the product's).
              const double q = e.y / static_cast<double>(b.p.dstScale);
              const double qErr = e.err / static_cast<double>(b.p.dstScale) + 2.4e-7 * std::abs(q) + 1e-12;
              auto codeOf = [&](double v) { return std::min(hi, std::max(lo, std::nearbyint(v) + b.p.dstZeroPoint)); };
              const double exact = codeOf(q), cLo = codeOf(q - qErr), cHi = codeOf(q + qErr);
              ok = got >= cLo && got <= cHi;
              if (!ok) ADD_FAILURE() << where << ": kernel code " << got << ", exact " << exact << " (y/scale " << q << ")";
              equal += got == exact;
            }
          }
          if (!ok && ++failures >= 5) return 0;
        }
      }
    }
  }
  return static_cast<double>(equal) / static_cast<double>(b.outNumel);
}

#define SKIP_WITHOUT_AVX2() \
  if (!int8WideningAvailable()) VF_CPU_SKIP("AVX2+FMA (the widening int8 kernel)")

/// Checks \p t and that at least 99% of its codes are the exact rounding.
void checkMostlyExact(const Case& t, const char* wantImpl = nullptr) {
  const double share = check(t, wantImpl);
  EXPECT_GE(share, 0.99) << describe(t);
}

TEST(Int8Widening, DeclaresItsArithmetic) {
  const IntDotArithmetic a = int8WideningArithmetic();
  EXPECT_EQ(a.variant, "own:vpmaddwd");
  EXPECT_EQ(a.source, IntDotArithmetic::Source::kCodesMinusZeroPoint);
  EXPECT_EQ(a.groupSize, 2);
  EXPECT_EQ(a.groupBits, 32);
  EXPECT_FALSE(a.groupSaturates);
  EXPECT_EQ(a.accumulatorBits, 32);
}

TEST(Int8Widening, ResNetLikeConvolutions) {
  SKIP_WITHOUT_AVX2();
  const char* gemm = "verifuse int8:avx2_vpmaddwd";
  // 3x3 / 1x1, stride 1 and 2, N not a multiple of 16, M not a multiple of 6.
  checkMostlyExact(Case{.c = 16, .h = 14, .w = 14, .o = 32}, gemm);
  checkMostlyExact(Case{.c = 32, .h = 7, .w = 7, .o = 24, .kh = 1, .kw = 1, .padT = 0, .padL = 0, .padB = 0, .padR = 0}, gemm);
  checkMostlyExact(Case{.c = 24, .h = 15, .w = 13, .o = 40, .sh = 2, .sw = 2}, gemm);
  checkMostlyExact(Case{.c = 64, .h = 8, .w = 8, .o = 16, .kh = 1, .kw = 1, .sh = 2, .sw = 2, .padT = 0, .padL = 0, .padB = 0,
                        .padR = 0},
                   gemm);
  // The ResNet stem: 7x7 stride 2 pad 3 over 3 channels (K = 147, odd), batch 2.
  checkMostlyExact(Case{.n = 2, .c = 3, .h = 32, .w = 30, .o = 64, .kh = 7, .kw = 7, .sh = 2, .sw = 2, .padT = 3, .padL = 3,
                        .padB = 3, .padR = 3},
                   gemm);
  // Odd K (c = 5, 3x3 = 45), one output channel, a single output row.
  checkMostlyExact(Case{.c = 5, .h = 3, .w = 11, .o = 1, .padT = 0, .padB = 0}, gemm);
  // Deep K (9 * 160 = 1440) and several row blocks and panel blocks.
  checkMostlyExact(Case{.n = 2, .c = 160, .h = 10, .w = 10, .o = 48, .dst = Int8Type::kF32});
}

TEST(Int8Widening, WindowGeometry) {
  SKIP_WITHOUT_AVX2();
  // Asymmetric padding, dilation, rectangular kernels, stride larger than the kernel.
  checkMostlyExact(Case{.c = 8, .h = 10, .w = 12, .o = 16, .padT = 0, .padL = 2, .padB = 3, .padR = 1});
  checkMostlyExact(Case{.c = 8, .h = 13, .w = 11, .o = 16, .padT = 2, .padL = 2, .padB = 2, .padR = 2, .dh = 2, .dw = 2});
  checkMostlyExact(Case{.c = 6, .h = 9, .w = 17, .o = 20, .kh = 1, .kw = 5, .padT = 0, .padL = 2, .padB = 0, .padR = 2,
                        .dw = 3});
  checkMostlyExact(Case{.c = 4, .h = 12, .w = 12, .o = 16, .kh = 2, .kw = 2, .sh = 3, .sw = 3, .padT = 0, .padL = 0, .padB = 0,
                        .padR = 0});
  // A window larger than the input in one dim (every output reads padding).
  checkMostlyExact(Case{.c = 3, .h = 2, .w = 9, .o = 8, .kh = 5, .kw = 3, .padT = 2, .padL = 1, .padB = 2, .padR = 1});
}

TEST(Int8Widening, LayoutsAndTypes) {
  SKIP_WITHOUT_AVX2();
  for (bool srcCl : {true, false}) {
    for (bool dstCl : {true, false}) {
      for (Int8Type dst : {Int8Type::kU8, Int8Type::kS8, Int8Type::kF32}) {
        for (bool s8 : {false, true}) {
          Case t{.n = 2, .c = 12, .h = 7, .w = 9, .o = 20, .srcChannelsLast = srcCl, .dstChannelsLast = dstCl, .srcS8 = s8,
                 .zx = s8 ? -7 : 128, .dst = dst};
          checkMostlyExact(t);
        }
      }
    }
  }
  // Zero points 0 and the code range's ends; no bias.
  for (int32_t zx : {0, 255, 3}) checkMostlyExact(Case{.c = 10, .o = 18, .zx = zx, .bias = false});
  for (int32_t zx : {0, -128, 127}) checkMostlyExact(Case{.c = 10, .o = 18, .srcS8 = true, .zx = zx});
}

TEST(Int8Widening, GroupedConvolutions) {
  SKIP_WITHOUT_AVX2();
  const char* gemm = "verifuse int8:avx2_vpmaddwd";
  checkMostlyExact(Case{.c = 16, .h = 8, .w = 8, .o = 32, .groups = 2}, gemm);
  // Groups whose output channels are not a multiple of 16 (10 each) and odd K per group (3 * 9).
  checkMostlyExact(Case{.n = 2, .c = 12, .h = 7, .w = 6, .o = 40, .groups = 4, .srcChannelsLast = false, .dst = Int8Type::kS8},
                   gemm);
  // Depthwise with a channel multiplier of 2: one input channel per group, the GEMM path.
  checkMostlyExact(Case{.c = 8, .h = 6, .w = 6, .o = 16, .groups = 8}, gemm);
}

TEST(Int8Widening, DepthwiseConvolutions) {
  SKIP_WITHOUT_AVX2();
  const char* dw = "verifuse int8 dw:avx2_vpmaddwd";
  // MobileNetV2's: 3x3, stride 1 and 2, with ReLU6 (clamp) into u8.
  checkMostlyExact(Case{.c = 32, .h = 12, .w = 12, .o = 32, .groups = 32, .ops = {kClamp}}, dw);
  checkMostlyExact(Case{.c = 48, .h = 11, .w = 13, .o = 48, .sh = 2, .sw = 2, .groups = 48}, dw);
  // Channels not a multiple of 8, batch 2, both layouts, every output type, s8 sources.
  for (bool srcCl : {true, false}) {
    for (bool dstCl : {true, false}) {
      for (Int8Type dst : {Int8Type::kU8, Int8Type::kS8, Int8Type::kF32}) {
        checkMostlyExact(Case{.n = 2, .c = 13, .h = 6, .w = 7, .o = 13, .groups = 13, .srcChannelsLast = srcCl,
                              .dstChannelsLast = dstCl, .dst = dst},
                         dw);
      }
    }
  }
  checkMostlyExact(Case{.c = 20, .h = 9, .w = 9, .o = 20, .groups = 20, .srcS8 = true, .zx = 0}, dw);
  // 5x5 (odd tap count 25), dilation, asymmetric padding, zero point 0 and 255.
  checkMostlyExact(Case{.c = 16, .h = 10, .w = 10, .o = 16, .kh = 5, .kw = 5, .padT = 2, .padL = 2, .padB = 2, .padR = 2,
                        .groups = 16, .zx = 0},
                   dw);
  checkMostlyExact(Case{.c = 24, .h = 11, .w = 9, .o = 24, .padT = 0, .padL = 3, .padB = 2, .padR = 1, .dh = 2, .dw = 1,
                        .groups = 24, .zx = 255},
                   dw);
  // Horizontal dilation (pairs (x[iw], x[iw + 2])) with stride 2, 16-channel steps and a tail.
  checkMostlyExact(Case{.n = 2, .c = 40, .h = 9, .w = 13, .o = 40, .sh = 2, .sw = 2, .padT = 2, .padL = 2, .padB = 2,
                        .padR = 2, .dh = 2, .dw = 2, .groups = 40, .dst = Int8Type::kF32},
                   dw);
  checkMostlyExact(Case{.c = 36, .h = 5, .w = 16, .o = 36, .kh = 1, .kw = 4, .padT = 0, .padL = 3, .padB = 0, .padR = 0,
                        .dw = 3, .groups = 36},
                   dw);
  // A zero point outside the code range cannot pad with a code: the grouped GEMM takes it.
  checkMostlyExact(Case{.c = 8, .h = 5, .w = 5, .o = 8, .groups = 8, .zx = 300}, "verifuse int8:avx2_vpmaddwd");
}

TEST(Int8Widening, Linear) {
  SKIP_WITHOUT_AVX2();
  // M not a multiple of 6, K odd, N not a multiple of 16; row-major and column-major sources.
  for (bool colMajor : {false, true}) {
    for (Int8Type dst : {Int8Type::kU8, Int8Type::kS8, Int8Type::kF32}) {
      checkMostlyExact(Case{.conv = false, .n = 13, .c = 77, .o = 37, .srcColumnMajor = colMajor, .dst = dst});
    }
  }
  checkMostlyExact(Case{.conv = false, .n = 64, .c = 768, .o = 48, .srcS8 = true, .zx = 3, .dst = Int8Type::kF32});
  checkMostlyExact(Case{.conv = false, .n = 1, .c = 1, .o = 1});
}

TEST(Int8Widening, LinearS32IsTheExactAccumulator) {
  SKIP_WITHOUT_AVX2();
  for (bool s8 : {false, true}) {
    for (bool colMajor : {false, true}) {
      Case t{.conv = false, .n = 11, .c = 333, .o = 35, .srcColumnMajor = colMajor, .srcS8 = s8, .zx = 0,
             .dst = Int8Type::kS32, .bias = false, .extremes = 0.5, .unitScales = true};
      EXPECT_EQ(check(t), 1.0);
    }
  }
}

TEST(Int8Widening, EveryPostOp) {
  SKIP_WITHOUT_AVX2();
  const std::vector<PostOpList> lists = {{kRelu},          {kClamp},        {kGeluErf},      {kGeluTanh},
                                         {kSum},           {kSum, kRelu},   {kRelu, kSum},   {kSum, kClamp},
                                         {kClamp, kGeluErf}, {kGeluTanh, kSum, kRelu}};
  for (const PostOpList& ops : lists) {
    const bool sum = std::find(ops.begin(), ops.end(), kSum) != ops.end();
    for (Int8Type dst : {Int8Type::kU8, Int8Type::kS8, Int8Type::kF32}) {
      if (sum && dst == Int8Type::kF32) continue;  // a sum reads codes from the output
      checkMostlyExact(Case{.c = 12, .h = 6, .w = 7, .o = 24, .dst = dst, .ops = ops});
      checkMostlyExact(Case{.c = 12, .h = 6, .w = 7, .o = 24, .dstChannelsLast = false, .dst = dst, .ops = ops});
      checkMostlyExact(Case{.c = 12, .h = 6, .w = 7, .o = 12, .groups = 12, .dst = dst, .ops = ops});  // depthwise
      checkMostlyExact(Case{.conv = false, .n = 9, .c = 40, .o = 20, .dst = dst, .ops = ops});
    }
  }
}

TEST(Int8Widening, ChainsOfReluAndClamp) {
  SKIP_WITHOUT_AVX2();
  // The kernel composes relu / clamp chains into one clamp: overlapping bounds, and bounds that
  // do not meet (the chain is then a constant: relu then clamp(-2, -1) is -1 everywhere, clamp(-2,
  // -1) then relu is 0).
  struct Chain {
    PostOpList ops;
    float lo, hi;
  };
  const std::vector<Chain> chains = {{{kClamp, kRelu}, -0.5f, 0.75f}, {{kRelu, kClamp}, -2.f, -1.f},
                                     {{kClamp, kRelu}, -2.f, -1.f},   {{kClamp, kClamp}, 0.25f, 0.5f},
                                     {{kRelu, kRelu, kClamp}, 0.f, 0.f}, {{kSum, kClamp, kRelu}, -0.25f, 2.f}};
  for (const Chain& c : chains) {
    for (Int8Type dst : {Int8Type::kU8, Int8Type::kS8, Int8Type::kF32}) {
      if (c.ops[0] == kSum && dst == Int8Type::kF32) continue;
      checkMostlyExact(Case{.c = 12, .h = 6, .w = 7, .o = 24, .dst = dst, .ops = c.ops, .clampLo = c.lo, .clampHi = c.hi});
      checkMostlyExact(
          Case{.c = 12, .h = 6, .w = 7, .o = 12, .groups = 12, .dst = dst, .ops = c.ops, .clampLo = c.lo, .clampHi = c.hi});
    }
  }
}

/// The inputs on which vpmaddubsw-based kernels (oneDNN without VNNI) saturate: adjacent
/// products of 255 * 127 (and (0 - 128) * -128 after the zero point) sum beyond s16.
TEST(Int8Widening, SaturatingInputsGiveTheExactAccumulator) {
  SKIP_WITHOUT_AVX2();
  // A linear [4, K] x [4, K]^T with s32 output (no zero point): row 0 all 255, row 1 all 0, row 2
  // 255 where channel 2's weight is positive and 0 where negative, row 3 all 128; channel 0 all
  // +127, channel 1 all -128, channel 2 +127 / -128 alternating, channel 3 -128 / +127.
  const int64_t k = 256;
  std::vector<uint8_t> src(4 * k);
  std::vector<int8_t> w(4 * k);
  for (int64_t i = 0; i < k; ++i) {
    src[0 * k + i] = 255;
    src[1 * k + i] = 0;
    src[2 * k + i] = i % 2 == 0 ? 255 : 0;
    src[3 * k + i] = 128;
    w[0 * k + i] = 127;
    w[1 * k + i] = -128;
    w[2 * k + i] = i % 2 == 0 ? 127 : -128;
    w[3 * k + i] = i % 2 == 0 ? -128 : 127;
  }
  for (int32_t zx : {0, 128}) {
    Int8Params p;
    p.conv = false;
    p.srcDims = {4, k};
    p.srcStrides = {k, 1};
    p.weightDims = {4, k};
    p.weights = w.data();
    p.weightScales.assign(4, 1.f);
    p.srcZeroPoint = zx;
    // s32 takes no zero point; with zx = 128 the f32 output of unit scales is the accumulator
    // (|acc| <= 256 * 255 * 128 < 2^24: exact in float).
    p.dstType = zx == 0 ? Int8Type::kS32 : Int8Type::kF32;
    auto made = createInt8Widening(p);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    std::vector<int32_t> out(16, 0);
    ASSERT_TRUE((*made)->execute({src.data()}, out.data()).isOk());
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t o = 0; o < 4; ++o) {
        int64_t exact = 0;
        for (int64_t i = 0; i < k; ++i) exact += (int64_t{src[r * k + i]} - zx) * w[o * k + i];
        double got;
        if (p.dstType == Int8Type::kS32) {
          got = out[r * 4 + o];
        } else {
          float f;
          std::memcpy(&f, &out[r * 4 + o], 4);
          got = f;
        }
        EXPECT_EQ(got, static_cast<double>(exact)) << "zx " << zx << " row " << r << " channel " << o;
      }
    }
  }
  // The same extremes through convolutions (3x3 and 1x1, the stem, depthwise): every code and
  // weight an extreme, f32 outputs of unit scales are the accumulators themselves.
  const std::vector<Case> convs = {
      Case{.c = 32, .h = 6, .w = 6, .o = 16},
      Case{.c = 64, .h = 5, .w = 5, .o = 32, .kh = 1, .kw = 1, .padT = 0, .padL = 0, .padB = 0, .padR = 0},
      Case{.c = 3, .h = 12, .w = 12, .o = 16, .kh = 7, .kw = 7, .sh = 2, .sw = 2, .padT = 3, .padL = 3, .padB = 3, .padR = 3},
      Case{.c = 16, .h = 6, .w = 6, .o = 16, .groups = 16},
  };
  for (Case t : convs) {
    for (int32_t zx : {0, 128}) {
      for (bool s8 : {false, true}) {
        t.zx = s8 ? (zx == 0 ? 0 : -128) : zx;
        t.srcS8 = s8;
        t.dst = Int8Type::kF32;
        t.unitScales = true;
        t.extremes = 1.0;
        EXPECT_EQ(check(t), 1.0);
      }
    }
  }
}

TEST(Int8Widening, NeverReadsPastTheSource) {
  SKIP_WITHOUT_AVX2();
  // The source ends right before a PROT_NONE page: a read past its last code faults. The packing
  // converts codes 16 at a time and may read ahead only inside the source (stem-like runs of 21
  // codes, depthwise tails, a linear's last row).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const std::vector<Case> cases = {
      Case{.c = 3, .h = 9, .w = 9, .o = 16, .kh = 7, .kw = 7, .sh = 2, .sw = 2, .padT = 3, .padL = 3, .padB = 3, .padR = 3},
      Case{.c = 3, .h = 5, .w = 6, .o = 8, .padT = 0, .padL = 0, .padB = 0, .padR = 0},
      Case{.c = 13, .h = 5, .w = 5, .o = 13, .groups = 13},
      Case{.c = 20, .h = 4, .w = 4, .o = 20, .groups = 20, .srcS8 = true, .zx = 0},
      Case{.conv = false, .n = 3, .c = 21, .o = 5},
      Case{.c = 5, .h = 4, .w = 7, .o = 6, .srcChannelsLast = false},
  };
  for (const Case& t : cases) {
    SCOPED_TRACE(describe(t));
    Built b = build(t);
    const size_t bytes = b.src.size(), span = (bytes + page - 1) / page * page;
    void* mem = mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem, MAP_FAILED);
    ASSERT_EQ(mprotect(static_cast<char*>(mem) + span, page, PROT_NONE), 0);
    uint8_t* src = static_cast<uint8_t*>(mem) + (span - bytes);
    std::memcpy(src, b.src.data(), bytes);
    auto made = createInt8Widening(b.p);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    const std::vector<uint8_t> want = runKernel(**made, b);
    std::vector<uint8_t> got(want.size(), 0);
    if (!b.residual.empty()) got = b.residual;
    ASSERT_TRUE((*made)->execute({src}, got.data()).isOk());
    EXPECT_EQ(got, want);
    munmap(mem, span + page);
  }
}

TEST(Int8Widening, ThreadCountDoesNotChangeABit) {
  SKIP_WITHOUT_AVX2();
  const std::vector<Case> cases = {
      Case{.n = 2, .c = 64, .h = 14, .w = 14, .o = 48, .dst = Int8Type::kU8, .ops = {kSum, kRelu}},
      Case{.c = 32, .h = 28, .w = 28, .o = 96, .kh = 1, .kw = 1, .padT = 0, .padL = 0, .padB = 0, .padR = 0,
           .dstChannelsLast = false, .dst = Int8Type::kF32, .ops = {kGeluErf}},
      Case{.c = 64, .h = 56, .w = 56, .o = 64, .groups = 64, .ops = {kClamp}},
      Case{.c = 96, .h = 20, .w = 20, .o = 96, .groups = 96, .srcChannelsLast = false, .dstChannelsLast = false},
      Case{.conv = false, .n = 100, .c = 512, .o = 200, .dst = Int8Type::kS8},
      Case{.conv = false, .n = 7, .c = 1024, .o = 512, .srcColumnMajor = true, .dst = Int8Type::kF32},
  };
  const int saved = omp_get_max_threads();
  for (const Case& t : cases) {
    SCOPED_TRACE(describe(t));
    const Built b = build(t);
    auto made = createInt8Widening(b.p);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    omp_set_num_threads(1);
    const std::vector<uint8_t> one = runKernel(**made, b);
    for (int threads : {2, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(runKernel(**made, b), one) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(Int8Widening, ConcurrentCallsOnOneKernel) {
  SKIP_WITHOUT_AVX2();
  for (const Case& t : {Case{.n = 2, .c = 32, .h = 12, .w = 12, .o = 32, .ops = {kSum}},
                        Case{.c = 32, .h = 20, .w = 20, .o = 32, .groups = 32, .srcChannelsLast = false}}) {
    const Built b = build(t);
    auto made = createInt8Widening(b.p);
    ASSERT_TRUE(made.isOk()) << made.status().toString();
    const std::vector<uint8_t> want = runKernel(**made, b);
    std::vector<std::vector<uint8_t>> got(4);
    std::vector<std::thread> workers;
    for (int i = 0; i < 4; ++i) {
      workers.emplace_back([&, i] {
        for (int rep = 0; rep < 10; ++rep) got[i] = runKernel(**made, b);
      });
    }
    for (auto& th : workers) th.join();
    for (const auto& g : got) EXPECT_EQ(g, want);
  }
}

/// A 2x4 by 4x4 linear with unit scales, for the parameter checks.
struct Tiny {
  std::vector<int8_t> w = std::vector<int8_t>(16, 1);
  Int8Params p;
  Tiny() {
    p.conv = false;
    p.srcDims = {2, 4};
    p.srcStrides = {4, 1};
    p.weightDims = {4, 4};
    p.weights = w.data();
    p.weightScales = {1, 1, 1, 1};
  }
};

StatusCode codeOf(const Int8Params& p) {
  auto made = createInt8Widening(p);
  return made.isOk() ? StatusCode::kOk : made.status().code();
}

TEST(Int8Widening, RefusesInvalidParametersLikeCreateInt8) {
  SKIP_WITHOUT_AVX2();
  const float nan = std::nanf("");
  auto invalid = [](auto&& edit) {
    Tiny t;
    edit(t.p);
    return codeOf(t.p);
  };
  EXPECT_EQ(codeOf(Tiny().p), StatusCode::kOk);
  EXPECT_EQ(invalid([](Int8Params& p) { p.srcScale = 0.f; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([&](Int8Params& p) { p.srcScale = nan; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.weightScales[2] = -1.f; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.weightScales.pop_back(); }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.dstType = Int8Type::kU8;
              p.dstScale = std::numeric_limits<float>::infinity();
            }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([&](Int8Params& p) { p.sumScale = nan; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.weights = nullptr; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.srcType = Int8Type::kF32; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.srcStrides = {1}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.srcDims = {2, 5}; }), StatusCode::kInvalidArgument);
  // s32: the bare accumulator of a linear only.
  EXPECT_EQ(invalid([](Int8Params& p) { p.dstType = Int8Type::kS32; }), StatusCode::kOk);
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.dstType = Int8Type::kS32;
              p.srcZeroPoint = 1;
            }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.dstType = Int8Type::kS32;
              p.postOps = {kRelu};
            }),
            StatusCode::kInvalidArgument);
  // Post-ops: clamp bounds in order; one sum, into codes.
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.postOps = {kClamp};
              p.clampLo = 1.f;
              p.clampHi = 0.f;
            }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) { p.postOps = {kSum}; }), StatusCode::kInvalidArgument);  // f32 output
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.dstType = Int8Type::kU8;
              p.postOps = {kSum, kSum};
            }),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid([](Int8Params& p) {
              p.dstType = Int8Type::kU8;
              p.postOps = {kSum, kRelu};
            }),
            StatusCode::kOk);

  // Convolutions: groups that do not divide, a window larger than the padded input, strides.
  std::vector<int8_t> w(8 * 4 * 9, 1);
  auto conv = [&](auto&& edit) {
    Int8Params p;
    p.srcDims = {1, 8, 5, 5};
    p.srcStrides = {200, 25, 5, 1};
    p.weightDims = {8, 4, 3, 3};
    p.groups = 2;
    p.weights = w.data();
    p.weightScales.assign(8, 1.f);
    edit(p);
    return codeOf(p);
  };
  EXPECT_EQ(conv([](Int8Params&) {}), StatusCode::kOk);
  EXPECT_EQ(conv([](Int8Params& p) { p.groups = 3; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.groups = 1; }), StatusCode::kInvalidArgument);  // 8 != 4 * 1
  EXPECT_EQ(conv([](Int8Params& p) { p.srcDims = {1, 8, 2, 5}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.stride = {0, 1}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.padL = {-1, 0}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.stride = {1, 1, 1}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.weightDims = {8, 4, 3}; }), StatusCode::kInvalidArgument);
  EXPECT_EQ(conv([](Int8Params& p) { p.dstType = Int8Type::kS32; }), StatusCode::kInvalidArgument);
}

TEST(Int8Widening, SaysUnimplementedForWhatItDoesNotDo) {
  SKIP_WITHOUT_AVX2();
  std::vector<int8_t> w(4 * 4 * 27, 1);
  // 1-d and 3-d convolutions.
  Int8Params p1;
  p1.srcDims = {1, 4, 9};
  p1.srcStrides = {36, 9, 1};
  p1.weightDims = {4, 4, 3};
  p1.weights = w.data();
  p1.weightScales.assign(4, 1.f);
  EXPECT_EQ(codeOf(p1), StatusCode::kUnimplemented);
  Int8Params p3 = p1;
  p3.srcDims = {1, 4, 3, 3, 3};
  p3.srcStrides = {108, 27, 9, 3, 1};
  p3.weightDims = {4, 4, 3, 3, 3};
  EXPECT_EQ(codeOf(p3), StatusCode::kUnimplemented);
  // Negative strides.
  Tiny t;
  t.p.srcStrides = {-4, 1};
  EXPECT_EQ(codeOf(t.p), StatusCode::kUnimplemented);
  // A zero point that puts x - zx outside s16.
  Tiny z;
  z.p.srcZeroPoint = 40000;
  EXPECT_EQ(codeOf(z.p), StatusCode::kUnimplemented);
  z.p.srcZeroPoint = -32000;  // 255 - (-32000) = 32255: still s16
  EXPECT_EQ(codeOf(z.p), StatusCode::kOk);
  // Weights whose accumulator could leave s32: 70000 * 127 * 255 > 2^31 (one of two channels).
  const int64_t k = 70000;
  std::vector<int8_t> big(2 * k, 1);
  std::fill(big.begin() + k, big.end(), 127);
  Int8Params l;
  l.conv = false;
  l.srcDims = {1, k};
  l.srcStrides = {k, 1};
  l.weightDims = {2, k};
  l.weights = big.data();
  l.weightScales = {1.f, 1.f};
  EXPECT_EQ(codeOf(l), StatusCode::kUnimplemented);
  std::fill(big.begin() + k, big.end(), 1);  // 70000 * 1 * 255: fine
  EXPECT_EQ(codeOf(l), StatusCode::kOk);
}

}  // namespace
}  // namespace verifuse::kernels
