// Plain C++ reference implementations and helpers for the kernel tests (no oneDNN).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"

namespace verifuse::kernels::testing {

using Dims = std::vector<int64_t>;

/// GTEST_SKIP()s the calling test unless \p have, naming what it needs and the tier this run has
/// (the capability model: a capped run says so).
#define VF_SKIP_UNLESS(have, needs)                                                                  \
  do {                                                                                              \
    if (!(have)) GTEST_SKIP() << "needs " << (needs) << "; this run: " << capabilities().summary(); \
  } while (0)

/// oneDNN's name for a kernel on bf16 instructions: avx512_core_bf16 or AMX (whose tiles take bf16);
/// not a widened one (float32 kernels on bf16 data: "bf16io" in the name).
inline bool isNativeBf16Impl(const std::string& impl) {
  return (impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos) &&
         impl.find("bf16io") == std::string::npos;
}

inline int64_t numel(const Dims& d) {
  return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<int64_t>());
}

inline std::vector<float> randomVec(int64_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

/// Row-major strides of \p d.
inline Dims rowMajorStrides(const Dims& d) {
  Dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

/// Expects |got - want| <= atol + rtol * |want| everywhere; reports the worst element.
inline void expectClose(const std::vector<float>& got, const std::vector<float>& want, float atol,
                        float rtol = 0.f, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  ASSERT_FALSE(want.empty()) << what << ": nothing compared";
  size_t worst = 0;
  double worstExcess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]);
    double excess = err - (atol + rtol * std::fabs(want[i]));
    if (std::isnan(got[i]) != std::isnan(want[i])) excess = 1e30;
    if (excess > worstExcess) {
      worstExcess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worstExcess, 0.0) << what << ": element " << worst << " got " << got[worst]
                              << " want " << want[worst] << " (atol " << atol << ", rtol " << rtol
                              << ")";
}

inline float maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

/// torch's definitions (alpha/beta are the torch-level parameters, as in PostOp).
inline float refActivation(Activation a, float x, float alpha = 0.f, float beta = 0.f) {
  switch (a) {
    case Activation::kRelu: return x > 0 ? x : 0.f;
    case Activation::kLeakyRelu: return x > 0 ? x : alpha * x;
    case Activation::kGeluErf: return 0.5f * x * (1.f + std::erf(x / std::sqrt(2.f)));
    case Activation::kGeluTanh: {
      const float k = std::sqrt(2.f / static_cast<float>(M_PI));
      return 0.5f * x * (1.f + std::tanh(k * (x + 0.044715f * x * x * x)));
    }
    case Activation::kSilu: return x / (1.f + std::exp(-x));
    case Activation::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case Activation::kTanh: return std::tanh(x);
    case Activation::kHardswish: return x * std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f;
    case Activation::kHardsigmoid: return std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f;
    case Activation::kClamp: return std::min(std::max(x, alpha), beta);
    case Activation::kElu: return x > 0 ? x : alpha * (std::exp(x) - 1.f);
    case Activation::kLinear: return alpha * x + beta;
  }
  return x;
}

inline float refBinary(BinaryAlg a, float x, float y) {
  switch (a) {
    case BinaryAlg::kAdd: return x + y;
    case BinaryAlg::kMul: return x * y;
    case BinaryAlg::kSub: return x - y;
    case BinaryAlg::kDiv: return x / y;
    case BinaryAlg::kMax: return std::max(x, y);
    case BinaryAlg::kMin: return std::min(x, y);
  }
  return x;
}

/// Index of a broadcast operand (dims \p bd, same rank as \p od) for output index \p idx.
inline int64_t broadcastIndex(const Dims& od, const Dims& bd, int64_t idx) {
  int64_t off = 0, stride = 1;
  for (int i = static_cast<int>(od.size()) - 1; i >= 0; --i) {
    int64_t c = idx % od[i];
    idx /= od[i];
    if (bd[i] != 1) off += c * stride;
    stride *= bd[i];
  }
  return off;
}

/// Applies post-ops the way torch would (binary operands in \p binaryOperands, in order);
/// \p prior is the dst content before the op (for sum).
inline void refPostOps(const std::vector<PostOp>& ops, const Dims& od, std::vector<float>& y,
                       const std::vector<float>& prior,
                       const std::vector<std::vector<float>>& binaryOperands) {
  size_t nb = 0;
  for (const PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kSum) {
      for (size_t i = 0; i < y.size(); ++i) y[i] += op.scale * prior[i];
    } else if (op.kind == PostOp::Kind::kBinary) {
      const auto& b = binaryOperands.at(nb++);
      for (size_t i = 0; i < y.size(); ++i) {
        y[i] = refBinary(op.binaryAlg, y[i], b[broadcastIndex(od, op.binaryDims, int64_t(i))]);
      }
    } else {
      for (float& v : y) v = refActivation(op.act, v, op.alpha, op.beta);
    }
  }
}

struct RefConvGeom {
  Dims stride, padL, dilation;
  int64_t groups = 1;
};

/// N-d direct convolution (torch semantics, dense NC... layouts); spatial rank 1..3.
inline std::vector<float> refConv(const std::vector<float>& x, const Dims& xd,
                                  const std::vector<float>& w, const Dims& wd, const float* bias,
                                  const RefConvGeom& g, const Dims& od) {
  const int ns = static_cast<int>(xd.size()) - 2;
  auto pad3 = [&](const Dims& v, int64_t fill) {
    Dims r(3, fill);
    for (int i = 0; i < ns; ++i) r[3 - ns + i] = v[i];
    return r;
  };
  Dims X = pad3(Dims(xd.begin() + 2, xd.end()), 1), K = pad3(Dims(wd.begin() + 2, wd.end()), 1),
       O = pad3(Dims(od.begin() + 2, od.end()), 1), S = pad3(g.stride, 1), P = pad3(g.padL, 0),
       D = pad3(g.dilation, 1);
  const int64_t N = xd[0], C = xd[1], OC = od[1], G = g.groups, icg = C / G, ocg = OC / G;
  std::vector<float> y(static_cast<size_t>(numel(od)));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oc = 0; oc < OC; ++oc) {
      const int64_t grp = oc / ocg;
      for (int64_t o0 = 0; o0 < O[0]; ++o0)
        for (int64_t o1 = 0; o1 < O[1]; ++o1)
          for (int64_t o2 = 0; o2 < O[2]; ++o2) {
            double acc = bias ? bias[oc] : 0.0;
            for (int64_t ic = 0; ic < icg; ++ic)
              for (int64_t k0 = 0; k0 < K[0]; ++k0)
                for (int64_t k1 = 0; k1 < K[1]; ++k1)
                  for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                    int64_t i0 = o0 * S[0] - P[0] + k0 * D[0];
                    int64_t i1 = o1 * S[1] - P[1] + k1 * D[1];
                    int64_t i2 = o2 * S[2] - P[2] + k2 * D[2];
                    if (i0 < 0 || i0 >= X[0] || i1 < 0 || i1 >= X[1] || i2 < 0 || i2 >= X[2]) continue;
                    int64_t c = grp * icg + ic;
                    float xv = x[(((n * C + c) * X[0] + i0) * X[1] + i1) * X[2] + i2];
                    float wv = w[(((oc * icg + ic) * K[0] + k0) * K[1] + k1) * K[2] + k2];
                    acc += double(xv) * wv;
                  }
            y[(((n * OC + oc) * O[0] + o0) * O[1] + o1) * O[2] + o2] = static_cast<float>(acc);
          }
    }
  return y;
}

/// Rounds to bf16 (round to nearest even), for bf16 references.
inline float roundBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fff + ((u >> 16) & 1);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

/// Unwraps a StatusOr<unique_ptr<Kernel>> in a test, failing with the status message.
#define VF_ASSERT_OK_AND_ASSIGN(lhs, expr)                                     \
  auto VF_CONCAT_(kor_, __LINE__) = (expr);                                    \
  ASSERT_TRUE(VF_CONCAT_(kor_, __LINE__).isOk())                               \
      << VF_CONCAT_(kor_, __LINE__).status().toString();                       \
  lhs = std::move(VF_CONCAT_(kor_, __LINE__)).value()

#define VF_ASSERT_OK(expr)                         \
  do {                                             \
    ::verifuse::Status s_ = (expr);                \
    ASSERT_TRUE(s_.isOk()) << s_.toString();       \
  } while (0)

/// Runs a kernel whose single input and output are dense f32 (plain layouts) and returns dst.
inline std::vector<float> runDense(const Kernel& k, const std::vector<const float*>& inputs,
                                   const std::vector<float>* prior = nullptr) {
  std::vector<float> out(k.outputLayout().byteSize() / sizeof(float));
  if (prior) out = *prior;
  std::vector<const void*> in(inputs.begin(), inputs.end());
  Status s = k.execute(std::span<const void* const>(in.data(), in.size()), out.data());
  EXPECT_TRUE(s.isOk()) << s.toString();
  return out;
}

}  // namespace verifuse::kernels::testing

namespace verifuse::kernels::testing {

/// Converts dense f32 data to \p target (any layout) with a reorder kernel; returns raw bytes as
/// floats (sized for target.byteSize()).
inline std::vector<float> toLayoutBuffer(const std::vector<float>& dense, const Layout& target) {
  Layout plainL = Layout::contiguous(target.dims());
  if (target == plainL) return dense;
  auto r = createReorder(plainL, target);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  std::vector<float> out((target.byteSize() + 3) / 4);
  EXPECT_TRUE((*r)->execute({dense.data()}, out.data()).isOk());
  return out;
}

/// Inverse of toLayoutBuffer: reads a buffer in \p src into dense f32.
inline std::vector<float> fromLayoutBuffer(const std::vector<float>& buf, const Layout& src) {
  Layout plainL = Layout::contiguous(src.dims());
  if (src == plainL) return buf;
  auto r = createReorder(src, plainL);
  EXPECT_TRUE(r.isOk()) << r.status().toString();
  std::vector<float> out(static_cast<size_t>(plainL.numElements()));
  EXPECT_TRUE((*r)->execute({buf.data()}, out.data()).isOk());
  return out;
}

/// Runs \p k on dense f32 data: the first input is converted to k.srcLayout(), other inputs are
/// passed as is (binary operands are dense), prior (for sum) goes in dst layout; returns dense dst.
inline std::vector<float> runAnyLayout(const Kernel& k, const std::vector<float>& src,
                                       const std::vector<std::vector<float>>& rest = {},
                                       const std::vector<float>* prior = nullptr) {
  std::vector<float> srcBuf = toLayoutBuffer(src, k.srcLayout());
  std::vector<float> dst((k.dstLayout().byteSize() + 3) / 4, 0.f);
  if (prior) dst = toLayoutBuffer(*prior, k.dstLayout());
  std::vector<const void*> in{srcBuf.data()};
  for (const auto& r : rest) in.push_back(r.data());
  Status s = k.execute(std::span<const void* const>(in.data(), in.size()), dst.data());
  EXPECT_TRUE(s.isOk()) << s.toString();
  return fromLayoutBuffer(dst, k.dstLayout());
}

}  // namespace verifuse::kernels::testing
