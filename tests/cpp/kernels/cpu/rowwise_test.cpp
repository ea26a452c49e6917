// The row engine (verifuse/kernels/rowwise.h) against an independent naive interpreter written
// here (every value a full row, inputs read element by element through their own strides):
//  - in float, with the documented summation order and transcendental functions rounded once from
//    double: the scalar kernel must match it bit for bit (so must the AVX2 and AVX-512 kernels for
//    programs without transcendental functions); the vector kernels within a few ulp otherwise;
//  - in double: the builders' results within tolerances derived from the row length C.
// Also: every instruction, broadcasting, strided rows, in-place outputs, bf16 in/out, thread-count
// invariance, refused layouts, NaN/inf like eager, a fully masked softmax row.
#include "verifuse/kernels/rowwise.h"
#include "verifuse/kernels/cpu_features.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace verifuse::kernels::rowwise {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint16_t toBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float fromBf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
float roundBf16(float f) { return fromBf16(toBf16(f)); }

// ---- Test tensors --------------------------------------------------------------------------------

/// A tensor with its own storage; `base` is the index of element 0 in the storage.
struct Tensor {
  TensorDesc desc;
  std::vector<float> f;
  std::vector<uint16_t> h;
  std::vector<uint8_t> m;
  int64_t base = 0;

  size_t storage() const { return std::max({f.size(), h.size(), m.size()}); }
  void* data() {
    switch (desc.type) {
      case ElemType::kF32: return f.data() + base;
      case ElemType::kBF16: return h.data() + base;
      case ElemType::kBool: return m.data() + base;
    }
    return nullptr;
  }
  float at(int64_t off) const {
    switch (desc.type) {
      case ElemType::kF32: return f[static_cast<size_t>(base + off)];
      case ElemType::kBF16: return fromBf16(h[static_cast<size_t>(base + off)]);
      case ElemType::kBool: return m[static_cast<size_t>(base + off)] != 0 ? 1.0f : 0.0f;
    }
    return 0;
  }
  void set(int64_t off, float v) {
    switch (desc.type) {
      case ElemType::kF32: f[static_cast<size_t>(base + off)] = v; break;
      case ElemType::kBF16: h[static_cast<size_t>(base + off)] = toBf16(v); break;
      case ElemType::kBool: m[static_cast<size_t>(base + off)] = v != 0 ? 1 : 0; break;
    }
  }
};

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return st;
}

int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

/// A tensor with the given strides over fresh storage (storage covers every element; negative
/// strides put `base` at the far end).
Tensor makeTensor(ElemType t, std::vector<int64_t> sizes, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = contiguousStrides(sizes);
  Tensor x;
  x.desc = {t, sizes, strides};
  int64_t lo = 0, hi = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t span = (std::max<int64_t>(sizes[i], 1) - 1) * strides[i];
    (span < 0 ? lo : hi) += span;
  }
  x.base = -lo;
  const size_t n = static_cast<size_t>(hi - lo + 1);
  if (t == ElemType::kF32) x.f.assign(n, kNaN);  // gaps hold NaN: reading one shows up
  if (t == ElemType::kBF16) x.h.assign(n, 0x7FC0);
  if (t == ElemType::kBool) x.m.assign(n, 0);
  return x;
}

/// Visits every element (multi-index -> storage offset).
template <class F>
void forEach(const Tensor& x, F f) {
  const auto& sz = x.desc.sizes;
  std::vector<int64_t> idx(sz.size(), 0);
  const int64_t n = numel(sz);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < sz.size(); ++d) off += idx[d] * x.desc.strides[d];
    f(idx, off);
    for (size_t d = sz.size(); d-- > 0;) {
      if (++idx[d] < sz[d]) break;
      idx[d] = 0;
    }
  }
}

void fillRandom(Tensor& x, std::mt19937& rng, float lo = -3.0f, float hi = 3.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::bernoulli_distribution b(0.6);
  forEach(x, [&](const std::vector<int64_t>&, int64_t off) { x.set(off, x.desc.type == ElemType::kBool ? (b(rng) ? 1.0f : 0.0f) : u(rng)); });
}

/// Element of an input broadcast to the output's multi-index.
float readBroadcast(const Tensor& x, const std::vector<int64_t>& outIdx) {
  const size_t r = outIdx.size(), ri = x.desc.sizes.size();
  int64_t off = 0;
  for (size_t j = 0; j < ri; ++j) {
    const int64_t i = x.desc.sizes[j] == 1 ? 0 : outIdx[r - ri + j];
    off += i * x.desc.strides[j];
  }
  return x.at(off);
}

// ---- The naive reference interpreter ------------------------------------------------------------

double sigmoidD(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

/// The op in double; the float reference rounds it once.
double unaryD(RowOp op, double x, float f0, float f1) {
  switch (op) {
    case RowOp::kNeg: return -x;
    case RowOp::kAbs: return std::fabs(x);
    case RowOp::kExp: return std::exp(x);
    case RowOp::kLog: return std::log(x);
    case RowOp::kSqrt: return std::sqrt(x);
    case RowOp::kTanh: return std::tanh(x);
    case RowOp::kErf: return std::erf(x);
    case RowOp::kSigmoid: return sigmoidD(x);
    case RowOp::kSilu: return x * sigmoidD(x);
    case RowOp::kGeluErf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case RowOp::kGeluTanh: {
      if (std::isnan(x)) return x;
      // Beyond +-12, x*sigmoid(2u) is x or (-)0 in float; -inf gives -inf * 0 = NaN as torch.
      double c = std::isinf(x) ? x : std::max(-12.0, std::min(12.0, x));
      return x * sigmoidD(2.0 * std::sqrt(2.0 / M_PI) * (c + 0.044715 * c * c * c));
    }
    case RowOp::kElu: return x > 0 || std::isnan(x) ? x : std::expm1(x) * f0;
    default: ADD_FAILURE() << "unaryD " << rowOpName(op); return 0;
  }
  (void)f1;
}

/// Float semantics of every unary op (torch's formulas; transcendental ones rounded from double).
float unaryF(RowOp op, float x, float f0, float f1) {
  switch (op) {
    case RowOp::kPow:
      if (f0 == 2.0f) return x * x;
      if (f0 == 3.0f) return x * x * x;
      if (f0 == 0.5f) return std::sqrt(x);
      if (f0 == -0.5f) return 1.0f / std::sqrt(x);
      if (f0 == -1.0f) return 1.0f / x;
      if (f0 == -2.0f) return 1.0f / (x * x);
      if (f0 == 1.0f) return x;
      if (f0 == 0.0f) return 1.0f;
      return std::pow(x, f0);
    case RowOp::kRsqrt: return 1.0f / std::sqrt(x);
    case RowOp::kReciprocal: return 1.0f / x;
    case RowOp::kSquare: return x * x;
    case RowOp::kRelu: return std::isnan(x) ? x : (x < 0 ? 0.0f : x);
    case RowOp::kClamp: return std::isnan(x) ? x : std::min(std::max(x, f0), f1);
    case RowOp::kLeakyRelu: return x > 0 ? x : x * f0;
    case RowOp::kHardswish: return x * (std::isnan(x) ? x : std::min(std::max(x + 3.0f, 0.0f), 6.0f)) / 6.0f;
    case RowOp::kHardsigmoid: return (std::isnan(x) ? x : std::min(std::max(x + 3.0f, 0.0f), 6.0f)) / 6.0f;
    case RowOp::kCastBf16: return roundBf16(x);
    case RowOp::kNeg: return -x;
    case RowOp::kAbs: return std::fabs(x);
    case RowOp::kSqrt: return std::sqrt(x);
    case RowOp::kElu: return x > 0 || std::isnan(x) ? x : static_cast<float>(std::expm1(static_cast<double>(x))) * f0;  // torch: expm1 then * alpha
    default: return static_cast<float>(unaryD(op, x, f0, f1));
  }
}

/// The op in double (the double reference).
double unaryDouble(RowOp op, double x, float f0, float f1) {
  const auto r6 = [](double v) { return std::isnan(v) ? v : std::min(std::max(v + 3.0, 0.0), 6.0); };
  switch (op) {
    case RowOp::kPow: return f0 == 0.5f ? std::sqrt(x) : std::pow(x, static_cast<double>(f0));
    case RowOp::kRsqrt: return 1.0 / std::sqrt(x);
    case RowOp::kReciprocal: return 1.0 / x;
    case RowOp::kSquare: return x * x;
    case RowOp::kRelu: return std::isnan(x) ? x : (x < 0 ? 0.0 : x);
    case RowOp::kClamp: return std::isnan(x) ? x : std::min(std::max(x, static_cast<double>(f0)), static_cast<double>(f1));
    case RowOp::kLeakyRelu: return x > 0 ? x : x * f0;
    case RowOp::kHardswish: return x * r6(x) / 6.0;
    case RowOp::kHardsigmoid: return r6(x) / 6.0;
    case RowOp::kCastBf16: return roundBf16(static_cast<float>(x));
    default: return unaryD(op, x, f0, f1);
  }
}

template <class T>
T binaryT(RowOp op, T a, T b) {
  switch (op) {
    case RowOp::kAdd: return a + b;
    case RowOp::kSub: return a - b;
    case RowOp::kMul: return a * b;
    case RowOp::kDiv: return a / b;
    case RowOp::kMax: return std::isnan(a) || std::isnan(b) ? T(NAN) : std::max(a, b);
    case RowOp::kMin: return std::isnan(a) || std::isnan(b) ? T(NAN) : std::min(a, b);
    default: ADD_FAILURE(); return 0;
  }
}

/// The documented summation order (RowOp::kSum).
float documentedSum(const std::vector<float>& x) {
  float p[4][8] = {};
  for (size_t i = 0; i < x.size(); ++i) p[(i / 8) % 4][i % 8] += x[i];
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = (p[0][l] + p[1][l]) + (p[2][l] + p[3][l]);
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

/// Runs \p p on every row, each value a full row of T. Returns one dense [R*C] vector per output.
template <class T>
std::vector<std::vector<T>> reference(const RowProgram& p, const std::vector<const Tensor*>& ins,
                                      const std::vector<int64_t>& outSizes) {
  const int64_t C = outSizes.back(), R = numel(outSizes) / std::max<int64_t>(C, 1);
  std::vector<std::vector<T>> outs(static_cast<size_t>(p.numOutputs()), std::vector<T>(static_cast<size_t>(R * C)));
  const auto& code = p.instructions();
  std::vector<std::vector<T>> val(code.size());
  std::vector<int64_t> idx(outSizes.size(), 0);
  for (int64_t r = 0; r < R; ++r) {
    int64_t rem = r;
    for (size_t d = outSizes.size() - 1; d-- > 0;) {
      idx[d] = rem % outSizes[d];
      rem /= outSizes[d];
    }
    for (size_t i = 0; i < code.size(); ++i) {
      const RowInstr& in = code[i];
      std::vector<T>& v = val[i];
      v.assign(static_cast<size_t>(C), T(0));
      const auto& A = in.a >= 0 ? val[static_cast<size_t>(in.a)] : v;
      const auto& B = in.b >= 0 ? val[static_cast<size_t>(in.b)] : v;
      const auto& Cv = in.c >= 0 ? val[static_cast<size_t>(in.c)] : v;
      for (int64_t c = 0; c < C; ++c) {
        const size_t k = static_cast<size_t>(c);
        switch (in.op) {
          case RowOp::kLoad:
            idx.back() = c;
            v[k] = readBroadcast(*ins[static_cast<size_t>(in.index)], idx);
            break;
          case RowOp::kConst: v[k] = in.f0; break;
          case RowOp::kWhere: v[k] = A[k] != 0 ? B[k] : Cv[k]; break;
          case RowOp::kStore: outs[static_cast<size_t>(in.index)][static_cast<size_t>(r * C + c)] = A[k]; break;
          case RowOp::kRotateHalf: v[k] = c < C / 2 ? -A[k + static_cast<size_t>(C / 2)] : A[k - static_cast<size_t>(C / 2)]; break;
          case RowOp::kSum: case RowOp::kMean: case RowOp::kRowMax: case RowOp::kRowMin: break;
          default:
            if (in.op >= RowOp::kAdd && in.op <= RowOp::kMin) {
              v[k] = binaryT<T>(in.op, A[k], B[k]);
            } else if constexpr (std::is_same_v<T, float>) {
              v[k] = unaryF(in.op, A[k], in.f0, in.f1);
            } else {
              v[k] = unaryDouble(in.op, A[k], in.f0, in.f1);
            }
        }
      }
      if (in.op == RowOp::kSum || in.op == RowOp::kMean) {
        T s;
        if constexpr (std::is_same_v<T, float>) s = documentedSum(A);
        else { s = 0; for (T x : A) s += x; }
        if (in.op == RowOp::kMean) s /= static_cast<T>(C);
        std::fill(v.begin(), v.end(), s);
      } else if (in.op == RowOp::kRowMax || in.op == RowOp::kRowMin) {
        T m = in.op == RowOp::kRowMax ? -T(INFINITY) : T(INFINITY);
        for (T x : A) m = binaryT<T>(in.op == RowOp::kRowMax ? RowOp::kMax : RowOp::kMin, m, x);
        std::fill(v.begin(), v.end(), m);
      }
    }
  }
  return outs;
}

// ---- Running kernels -----------------------------------------------------------------------------

/// Creates and runs a kernel; outputs are dense tensors of \p outTypes (or the given tensors).
struct KernelRun {
  Status status;
  std::vector<Tensor> outs;
  std::string isa;
  std::string describe;
};

/// The kernels every check runs: the default (AVX-512 on a CPU with it, else AVX2), the AVX2 ones
/// (also where AVX-512 would be taken) and the scalar interpreter.
std::vector<RowKernelOptions> kernelVariants() {
  RowKernelOptions avx2, scalar;
  avx2.forceAvx2 = true;
  scalar.forceScalar = true;
  return {RowKernelOptions{}, avx2, scalar};
}

std::string variantName(const RowKernelOptions& o) {
  return o.forceScalar ? "scalar kernel" : o.forceAvx2 ? "AVX2 kernel" : "default kernel";
}

KernelRun runWith(const RowProgram& p, std::vector<Tensor*> ins, const std::vector<int64_t>& outSizes,
                  std::vector<ElemType> outTypes, const RowKernelOptions& opt, std::vector<Tensor> outs = {});

KernelRun run(const RowProgram& p, std::vector<Tensor*> ins, const std::vector<int64_t>& outSizes,
        std::vector<ElemType> outTypes, bool scalar, std::vector<Tensor> outs = {}) {
  RowKernelOptions opt;
  opt.forceScalar = scalar;
  return runWith(p, std::move(ins), outSizes, std::move(outTypes), opt, std::move(outs));
}

KernelRun runWith(const RowProgram& p, std::vector<Tensor*> ins, const std::vector<int64_t>& outSizes,
                  std::vector<ElemType> outTypes, const RowKernelOptions& opt, std::vector<Tensor> outs) {
  KernelRun res;
  std::vector<TensorDesc> inDescs, outDescs;
  for (Tensor* t : ins) inDescs.push_back(t->desc);
  if (outs.empty())
    for (ElemType t : outTypes) outs.push_back(makeTensor(t, outSizes));
  for (Tensor& t : outs) outDescs.push_back(t.desc);
  auto k = createRowKernel(p, inDescs, outDescs, opt);
  if (!k.isOk()) {
    res.status = k.status();
    return res;
  }
  res.isa = k.value()->isa();
  res.describe = k.value()->describe();
  std::vector<const void*> ip;
  for (Tensor* t : ins) ip.push_back(t->data());
  std::vector<void*> op;
  for (Tensor& t : outs) op.push_back(t.data());
  res.status = k.value()->execute(ip, op);
  res.outs = std::move(outs);
  return res;
}

/// A dense [R*C] float view of a (possibly strided) output.
std::vector<float> values(const Tensor& t) {
  std::vector<float> v;
  forEach(t, [&](const std::vector<int64_t>&, int64_t off) { v.push_back(t.at(off)); });
  return v;
}

bool sameFloat(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

double ulpDist(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got) ? 0 : INFINITY;
  if (std::isinf(want) || std::isinf(got)) return got == want ? 0 : INFINITY;
  const double ulp = std::ldexp(1.0, std::max(std::ilogb(std::max(std::fabs(want), 1e-38f)), -126) - 23);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

/// Bitwise equal (NaN = NaN) element by element.
::testing::AssertionResult bitEqual(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!sameFloat(got[i], want[i]))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

/// Within \p ulps of the float reference (or an absolute 1e-37 for tiny values).
::testing::AssertionResult ulpClose(const std::vector<float>& got, const std::vector<float>& want, double ulps) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size";
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= 1e-37f) continue;
    if (ulpDist(got[i], want[i]) > ulps)
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i] << " ("
                                           << ulpDist(got[i], want[i]) << " ulp)";
  }
  return ::testing::AssertionSuccess();
}

/// |got - want| <= tol * (1 + |want|), NaN/inf exactly.
::testing::AssertionResult closeTo(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      if (!(std::isnan(want[i]) ? std::isnan(got[i]) : static_cast<double>(got[i]) == want[i]))
        return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
      continue;
    }
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i]
                                           << " (tol " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> toFloat(const std::vector<float>& v, ElemType t) {
  if (t != ElemType::kBF16) return v;
  std::vector<float> r(v);
  for (float& x : r) x = roundBf16(x);
  return r;
}

/// The central check: scalar kernel bit-equal to the float reference; the vector kernels (AVX2,
/// and AVX-512 where the CPU has it) bit-equal too if \p exactVector, else within \p ulps; all
/// within \p tol of the double reference if tol > 0.
void checkProgram(const RowProgram& p, std::vector<Tensor*> ins, const std::vector<int64_t>& outSizes,
                  std::vector<ElemType> outTypes, bool exactVector, double ulps = 8, double tol = 0) {
  auto refF = reference<float>(p, {ins.begin(), ins.end()}, outSizes);
  auto refD = reference<double>(p, {ins.begin(), ins.end()}, outSizes);
  for (const RowKernelOptions& opt : kernelVariants()) {
    SCOPED_TRACE(variantName(opt));
    KernelRun r = runWith(p, ins, outSizes, outTypes, opt);
    ASSERT_TRUE(r.status.isOk()) << r.status.toString();
    for (size_t k = 0; k < r.outs.size(); ++k) {
      SCOPED_TRACE("output " + std::to_string(k));
      std::vector<float> got = values(r.outs[k]);
      std::vector<float> want = toFloat(refF[k], outTypes[k]);
      if (opt.forceScalar || exactVector || r.isa == "scalar") EXPECT_TRUE(bitEqual(got, want));
      else EXPECT_TRUE(ulpClose(got, want, ulps));
      if (tol > 0) EXPECT_TRUE(closeTo(got, refD[k], tol));
    }
  }
}

Tensor randomTensor(ElemType t, std::vector<int64_t> sizes, std::mt19937& rng, float lo = -3, float hi = 3,
                    std::vector<int64_t> strides = {}) {
  Tensor x = makeTensor(t, std::move(sizes), std::move(strides));
  fillRandom(x, rng, lo, hi);
  return x;
}

// ---- Program text and validation ----------------------------------------------------------------

TEST(RowProgram, TextOfTheBuilders) {
  EXPECT_EQ(layerNormProgram({1e-5f, true, true, true, true}).toString(),
            "%0 = load in0\n"
            "%1 = load in1\n"
            "%2 = add %0, %1\n"
            "%3 = mean %2\n"
            "%4 = sub %2, %3\n"
            "%5 = mul %4, %4\n"
            "%6 = mean %5\n"
            "%7 = const 9.99999975e-06\n"
            "%8 = add %6, %7\n"
            "%9 = rsqrt %8\n"
            "%10 = mul %4, %9\n"
            "%11 = load in2\n"
            "%12 = mul %10, %11\n"
            "%13 = load in3\n"
            "%14 = add %12, %13\n"
            "store out0, %14\n"
            "store out1, %2\n");
  EXPECT_EQ(rmsNormProgram({1e-6f, true, true, false, false}).toString(),
            "%0 = load in0\n"
            "%1 = mul %0, %0\n"
            "%2 = mean %1\n"
            "%3 = const 9.99999997e-07\n"
            "%4 = add %2, %3\n"
            "%5 = rsqrt %4\n"
            "%6 = mul %0, %5\n"
            "%7 = cast_bf16 %6\n"
            "%8 = load in1\n"
            "%9 = mul %8, %7\n"
            "store out0, %9\n");
  EXPECT_EQ(softmaxProgram(0.125f, MaskKind::kBoolean).toString(),
            "%0 = load in0\n"
            "%1 = const 0.125\n"
            "%2 = mul %0, %1\n"
            "%3 = load in1\n"
            "%4 = const -inf\n"
            "%5 = where %3, %2, %4\n"
            "%6 = rowmax %5\n"
            "%7 = sub %5, %6\n"
            "%8 = exp %7\n"
            "%9 = sum %8\n"
            "%10 = reciprocal %9\n"
            "%11 = mul %8, %10\n"
            "store out0, %11\n");
  EXPECT_EQ(rotaryProgram().toString(),
            "%0 = load in0\n%1 = load in1\n%2 = load in2\n%3 = mul %0, %1\n%4 = rotate_half %0\n"
            "%5 = mul %4, %2\n%6 = add %3, %5\nstore out0, %6\n");
  EXPECT_EQ(siluMulProgram().toString(), "%0 = load in0\n%1 = load in1\n%2 = silu %0\n%3 = mul %2, %1\nstore out0, %3\n");
  EXPECT_EQ(geluProgram(true, true).toString(), "%0 = load in0\n%1 = load in1\n%2 = add %0, %1\n%3 = gelu_tanh %2\nstore out0, %3\n");
  EXPECT_EQ(biasResidualAddProgram(true, true).toString(),
            "%0 = load in0\n%1 = load in1\n%2 = add %0, %1\n%3 = load in2\n%4 = add %2, %3\nstore out0, %4\n");
  RowProgram p;
  RowValue x = p.load(0);
  p.store(0, p.clamp(p.unary(RowOp::kLeakyRelu, p.pow(x, 1.5f), 0.01f), -1.0f, 6.0f));
  EXPECT_EQ(p.toString(), "%0 = load in0\n%1 = pow %0, 1.5\n%2 = leaky_relu %1, 0.00999999978\n%3 = clamp %2, -1, 6\nstore out0, %3\n");
  EXPECT_EQ(p.numInputs(), 1);
  EXPECT_EQ(p.numOutputs(), 1);
}

TEST(RowProgram, ParseReadsBackTheText) {
  RowProgram params;
  RowValue x = params.load(0);
  params.store(0, params.clamp(params.unary(RowOp::kLeakyRelu, params.pow(x, 1.5f), 0.01f), -1.0f, 6.0f));
  const std::vector<RowProgram> programs = {layerNormProgram({1e-5f, true, true, true, true}),
                                            rmsNormProgram({1e-6f, true, true, false, false}),
                                            softmaxProgram(0.125f, MaskKind::kBoolean),
                                            rotaryProgram(),
                                            siluMulProgram(),
                                            geluProgram(true, true),
                                            params};
  for (const RowProgram& p : programs) {
    auto parsed = RowProgram::parse(p.toString());
    ASSERT_TRUE(parsed.isOk()) << parsed.status().toString();
    EXPECT_EQ(parsed->toString(), p.toString());
    EXPECT_EQ(parsed->numInputs(), p.numInputs());
    EXPECT_EQ(parsed->numOutputs(), p.numOutputs());
  }
  // Blank lines are skipped.
  auto blank = RowProgram::parse("\n%0 = load in0\n\nstore out0, %0");
  ASSERT_TRUE(blank.isOk()) << blank.status().toString();
  EXPECT_EQ(blank->toString(), "%0 = load in0\nstore out0, %0\n");
}

TEST(RowProgram, ParseNamesTheBadLine) {
  auto unknown = RowProgram::parse("%0 = load in0\n%1 = frobnicate %0\nstore out0, %1\n");
  ASSERT_FALSE(unknown.isOk());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(), "row program line 2 '%1 = frobnicate %0': unknown op 'frobnicate'");
  auto numbering = RowProgram::parse("%1 = load in0\nstore out0, %1\n");
  ASSERT_FALSE(numbering.isOk());
  EXPECT_EQ(numbering.status().message(), "row program line 1 '%1 = load in0': value id 1 is not the instruction index 0");
  // A program validate() refuses is refused too.
  auto noStore = RowProgram::parse("%0 = load in0\n");
  ASSERT_FALSE(noStore.isOk());
  EXPECT_EQ(noStore.status().message(), "row program: no store");
}

TEST(RowProgram, MisuseIsReportedNotThrown) {
  {
    RowProgram p;
    RowValue x = p.load(0);
    p.store(0, p.add(x, RowValue{7}));
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
    auto k = createRowKernel(p, {{ElemType::kF32, {2, 8}, {8, 1}}}, {{ElemType::kF32, {2, 8}, {8, 1}}});
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
  }
  {
    RowProgram p;
    RowValue x = p.load(0);
    p.store(0, x);
    p.store(0, x);
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument) << "stored twice";
  }
  {
    RowProgram p;
    p.load(0);
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument) << "no store";
  }
  {
    RowProgram p;
    p.store(1, p.load(0));
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument) << "out0 never stored";
  }
  {
    RowProgram p;
    RowValue x = p.load(0);
    p.store(0, p.binary(RowOp::kExp, x, x));
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument) << "exp is not binary";
  }
  {
    RowProgram p;
    p.store(0, p.reduce(RowOp::kAdd, p.load(0)));
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  }
  {
    RowProgram p;
    RowValue x = p.load(0);
    p.store(0, x);
    p.store(0 + 1, RowValue{1});  // the id of a store is not a value
    EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  }
  // Descriptor counts.
  RowProgram p = siluMulProgram();
  TensorDesc d{ElemType::kF32, {4, 8}, {8, 1}};
  EXPECT_EQ(createRowKernel(p, {d}, {d}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(createRowKernel(p, {d, d}, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(createRowKernel(p, {d, d}, {d}).isOk());
  auto k = createRowKernel(p, {d, d}, {d});
  std::vector<float> a(32, 1.0f), b(32, 1.0f), c(32);
  const void* ins[] = {a.data()};
  void* outs[] = {c.data()};
  EXPECT_EQ(k.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
  const void* ins2[] = {a.data(), nullptr};
  EXPECT_EQ(k.value()->execute(ins2, outs).code(), StatusCode::kInvalidArgument);
}

// ---- Every instruction ---------------------------------------------------------------------------

struct UnaryCase {
  RowOp op;
  float f0 = 0, f1 = 0;
  bool exact = false;  // no transcendental function: AVX2 bit-equal to the float composition
};

TEST(RowEngine, EveryUnaryInstruction) {
  std::mt19937 rng(1);
  const std::vector<UnaryCase> cases = {
      {RowOp::kNeg, 0, 0, true},        {RowOp::kAbs, 0, 0, true},        {RowOp::kExp},
      {RowOp::kLog},                    {RowOp::kSqrt, 0, 0, true},       {RowOp::kRsqrt, 0, 0, true},
      {RowOp::kReciprocal, 0, 0, true}, {RowOp::kSquare, 0, 0, true},     {RowOp::kRelu, 0, 0, true},
      {RowOp::kGeluErf},                {RowOp::kGeluTanh},               {RowOp::kSilu},
      {RowOp::kSigmoid},                {RowOp::kTanh},                   {RowOp::kErf},
      {RowOp::kClamp, -1.5f, 2.0f, true}, {RowOp::kClamp, 0.0f, kInf, true}, {RowOp::kLeakyRelu, 0.1f, 0, true},
      {RowOp::kHardswish, 0, 0, true},  {RowOp::kHardsigmoid, 0, 0, true}, {RowOp::kElu, 1.0f},
      {RowOp::kElu, 0.3f},              {RowOp::kCastBf16, 0, 0, true},   {RowOp::kPow, 2.0f, 0, true},
      {RowOp::kPow, 3.0f, 0, true},     {RowOp::kPow, 0.5f, 0, true},     {RowOp::kPow, -0.5f, 0, true},
      {RowOp::kPow, -1.0f, 0, true},    {RowOp::kPow, -2.0f, 0, true},    {RowOp::kPow, 1.0f, 0, true},
      {RowOp::kPow, 0.0f, 0, true},     {RowOp::kPow, 1.7f, 0, true},
  };
  // 7 rows x 37: several rows per tile, a partial vector at the end of each row.
  Tensor x = randomTensor(ElemType::kF32, {7, 37}, rng, -6, 6);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-40f, -1e-40f, 88.0f, -88.0f, 100.0f, -100.0f, 3.0f, -3.0f};
  for (size_t i = 0; i < std::size(specials); ++i) x.f[i * 19] = specials[i];
  for (const UnaryCase& c : cases) {
    SCOPED_TRACE(std::string(rowOpName(c.op)) + " " + std::to_string(c.f0));
    RowProgram p;
    p.store(0, p.unary(c.op, p.load(0), c.f0, c.f1));
    checkProgram(p, {&x}, {7, 37}, {ElemType::kF32}, c.exact, 4);
  }
}

TEST(RowEngine, EveryBinaryInstructionWithEveryOperandShape) {
  std::mt19937 rng(2);
  Tensor a = randomTensor(ElemType::kF32, {5, 3, 40}, rng);
  Tensor full = randomTensor(ElemType::kF32, {5, 3, 40}, rng);
  Tensor perRow = randomTensor(ElemType::kF32, {5, 3, 1}, rng);
  Tensor perCol = randomTensor(ElemType::kF32, {40}, rng);
  Tensor scalar = randomTensor(ElemType::kF32, {}, rng);
  a.f[3] = kNaN;
  full.f[9] = kNaN;
  full.f[10] = 0.0f;  // division by zero
  for (RowOp op : {RowOp::kAdd, RowOp::kSub, RowOp::kMul, RowOp::kDiv, RowOp::kMax, RowOp::kMin}) {
    for (Tensor* b : {&full, &perRow, &perCol, &scalar}) {
      SCOPED_TRACE(std::string(rowOpName(op)) + " rank " + std::to_string(b->desc.sizes.size()));
      RowProgram p;
      RowValue x = p.load(0), y = p.load(1);
      p.store(0, p.binary(op, x, y));
      checkProgram(p, {&a, b}, {5, 3, 40}, {ElemType::kF32}, true);
      RowProgram q;  // broadcast operand first
      RowValue y2 = q.load(1), x2 = q.load(0);
      q.store(0, q.binary(op, y2, x2));
      checkProgram(q, {&a, b}, {5, 3, 40}, {ElemType::kF32}, true);
    }
    RowProgram c;  // constants on either side
    c.store(0, c.binary(op, c.constant(0.75f), c.binary(op, c.load(0), c.constant(-2.5f))));
    checkProgram(c, {&a}, {5, 3, 40}, {ElemType::kF32}, true);
  }
}

TEST(RowEngine, WhereWithBoolMasks) {
  std::mt19937 rng(3);
  Tensor x = randomTensor(ElemType::kF32, {6, 24}, rng);
  Tensor y = randomTensor(ElemType::kF32, {6, 24}, rng);
  for (std::vector<int64_t> ms : {std::vector<int64_t>{6, 24}, {1, 24}, {6, 1}, {24}}) {
    Tensor m = randomTensor(ElemType::kBool, ms, rng);
    RowProgram p;
    p.store(0, p.where(p.load(2), p.load(0), p.load(1)));
    checkProgram(p, {&x, &y, &m}, {6, 24}, {ElemType::kF32}, true);
    RowProgram q;  // a per-row scalar and a constant as the branches
    q.store(0, q.where(q.load(0), q.reduce(RowOp::kSum, q.load(1)), q.constant(-kInf)));
    checkProgram(q, {&m, &x}, {6, 24}, {ElemType::kF32}, true);
  }
}

TEST(RowEngine, ReductionsFollowTheDocumentedOrder) {
  std::mt19937 rng(4);
  for (int64_t C : {1, 7, 8, 31, 32, 33, 100, 768, 1500, 5000}) {
    SCOPED_TRACE(C);
    Tensor x = randomTensor(ElemType::kF32, {3, C}, rng, -1e3f, 1e3f);
    for (RowOp op : {RowOp::kSum, RowOp::kMean, RowOp::kRowMax, RowOp::kRowMin}) {
      RowProgram p;
      RowValue v = p.load(0);
      p.store(0, p.sub(v, p.reduce(op, v)));  // the scalar broadcast back over the row
      checkProgram(p, {&x}, {3, C}, {ElemType::kF32}, true);
    }
    // sum/mean of a product (run fused): each product rounded, then summed in the same order.
    Tensor y = randomTensor(ElemType::kF32, {3, C}, rng, -1e3f, 1e3f);
    for (RowOp op : {RowOp::kSum, RowOp::kMean}) {
      RowProgram p;
      RowValue a = p.load(0), b = p.load(1);
      p.store(0, p.reduce(op, p.mul(a, b)));
      p.store(1, p.reduce(op, p.mul(a, a)));
      checkProgram(p, {&x, &y}, {3, C}, {ElemType::kF32, ElemType::kF32}, true);
    }
  }
  // NaN anywhere in the row: max/min/sum are NaN (torch.amax propagates NaN).
  Tensor y = randomTensor(ElemType::kF32, {2, 50}, rng);
  y.f[57] = kNaN;
  for (RowOp op : {RowOp::kSum, RowOp::kRowMax, RowOp::kRowMin}) {
    RowProgram p;
    p.store(0, p.reduce(op, p.load(0)));
    KernelRun r = run(p, {&y}, {2, 50}, {ElemType::kF32}, false);
    ASSERT_TRUE(r.status.isOk());
    EXPECT_FALSE(std::isnan(r.outs[0].f[0]));
    EXPECT_TRUE(std::isnan(r.outs[0].f[50]));
  }
}

TEST(RowEngine, SumIsAtLeastAsAccurateAsALeftToRightLoop) {
  std::mt19937 rng(5);
  const int64_t C = 60000;
  Tensor x = randomTensor(ElemType::kF32, {1, C}, rng, 0.0f, 1.0f);
  RowProgram p;
  p.store(0, p.reduce(RowOp::kSum, p.load(0)));
  KernelRun r = run(p, {&x}, {1, C}, {ElemType::kF32}, false);
  ASSERT_TRUE(r.status.isOk());
  double exact = 0;
  float naive = 0;
  for (int64_t i = 0; i < C; ++i) {
    exact += x.f[static_cast<size_t>(i)];
    naive += x.f[static_cast<size_t>(i)];
  }
  const double err = std::fabs(r.outs[0].f[0] - exact), naiveErr = std::fabs(naive - exact);
  EXPECT_LE(err, naiveErr);
  EXPECT_LE(err, (C / 32.0 + 5) * 0x1p-24 * exact);
}

TEST(RowEngine, RotateHalfAndCasts) {
  std::mt19937 rng(6);
  for (int64_t C : {2, 6, 16, 64, 130, 2050}) {
    Tensor x = randomTensor(ElemType::kF32, {3, C}, rng);
    RowProgram p;
    p.store(0, p.rotateHalf(p.load(0)));
    checkProgram(p, {&x}, {3, C}, {ElemType::kF32}, true);
  }
  Tensor odd = randomTensor(ElemType::kF32, {3, 7}, rng);
  RowProgram p;
  p.store(0, p.rotateHalf(p.load(0)));
  EXPECT_EQ(run(p, {&odd}, {3, 7}, {ElemType::kF32}, false).status.code(), StatusCode::kUnsupported);
  // rotate_half / reductions of a per-row scalar materialise it first.
  Tensor s = randomTensor(ElemType::kF32, {3, 1}, rng);
  RowProgram q;
  RowValue v = q.load(0);
  q.store(0, q.add(q.rotateHalf(v), q.reduce(RowOp::kSum, v)));
  checkProgram(q, {&s}, {3, 10}, {ElemType::kF32}, true);
}

TEST(RowEngine, ConstantsScalarsAndStoresOfEveryKind) {
  // Ops of constants only are folded at creation; per-row scalars broadcast into stores.
  std::mt19937 rng(22);
  Tensor x = randomTensor(ElemType::kF32, {4, 40}, rng);
  Tensor s = randomTensor(ElemType::kF32, {4, 1}, rng);
  RowProgram p;
  RowValue a = p.load(0);
  RowValue k1 = p.constant(1.0f), k3 = p.constant(3.0f), k2 = p.constant(2.0f);
  RowValue diff = p.sub(k1, k3);                                   // -2, not 2
  RowValue e = p.unary(RowOp::kExp, p.div(k1, k2));                 // exp(0.5)
  RowValue w = p.where(p.constant(0.0f), k3, p.maximum(k1, k2));    // 2
  p.store(0, p.mul(p.add(a, diff), p.sub(e, w)));
  p.store(1, p.sub(k2, p.unary(RowOp::kSqrt, k2)));                 // a constant output
  RowValue rs = p.load(1);
  p.store(2, p.sub(p.reduce(RowOp::kRowMax, a), p.unary(RowOp::kTanh, rs)));  // a per-row scalar output
  checkProgram(p, {&x, &s}, {4, 40}, {ElemType::kF32, ElemType::kF32, ElemType::kBF16}, false, 2);
  KernelRun r = run(p, {&x, &s}, {4, 40}, {ElemType::kF32, ElemType::kF32, ElemType::kF32}, false);
  ASSERT_TRUE(r.status.isOk());
  const float c = static_cast<float>(std::exp(0.5)) - 2.0f;
  EXPECT_EQ(r.outs[0].f[7], (x.f[7] - 2.0f) * c);
  EXPECT_EQ(r.outs[1].f[33], 2.0f - std::sqrt(2.0f));
}

TEST(RowEngine, ValuesLiveAcrossReductionsAndChunks) {
  // A vector made before a reduction and read after it must survive the whole row, also when the
  // row is processed in several chunks (C > 1024) and when a tile holds several short rows.
  std::mt19937 rng(23);
  for (int64_t C : {40, 1000, 3000, 5002}) {
    SCOPED_TRACE(C);
    Tensor x = randomTensor(ElemType::kF32, {3, C}, rng);
    Tensor y = randomTensor(ElemType::kF32, {3, C}, rng);
    RowProgram p;
    RowValue a = p.load(0), b = p.load(1);
    RowValue twice = p.mul(a, p.constant(2.0f));        // made in the first group
    RowValue e = p.unary(RowOp::kAbs, b);              // another one, read two groups later
    RowValue s = p.reduce(RowOp::kSum, p.add(a, b));   // barrier 1
    RowValue t = p.sub(twice, s);                       // second group
    RowValue m = p.reduce(RowOp::kRowMax, t);           // barrier 2
    p.store(0, p.add(p.mul(t, m), e));                  // third group reads twice's child and e
    p.store(1, p.rotateHalf(p.sub(twice, e)));
    checkProgram(p, {&x, &y}, {3, C}, {ElemType::kF32, ElemType::kF32}, true);
  }
}

/// An f32 tensor whose storage ends right before an inaccessible page: reading one element past
/// the end of any row that ends there faults (rows read in place must stop at the row's end).
struct GuardedTensor {
  void* map = nullptr;
  size_t mapBytes = 0;
  TensorDesc desc;
  float* data = nullptr;
  GuardedTensor(std::vector<int64_t> sizes, std::mt19937& rng) {
    const int64_t n = numel(sizes);
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (static_cast<size_t>(n) * 4 + page - 1) / page * page;
    mapBytes = bytes + page;
    map = mmap(nullptr, mapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(map, MAP_FAILED);
    EXPECT_EQ(mprotect(static_cast<char*>(map) + bytes, page, PROT_NONE), 0);
    data = reinterpret_cast<float*>(static_cast<char*>(map) + bytes) - n;
    std::uniform_real_distribution<float> u(-3, 3);
    for (int64_t i = 0; i < n; ++i) data[i] = u(rng);
    desc = {ElemType::kF32, sizes, contiguousStrides(sizes)};
  }
  ~GuardedTensor() { munmap(map, mapBytes); }
};

TEST(RowEngine, RowsReadInPlaceStopAtTheRowEnd) {
  std::mt19937 rng(24);
  for (int64_t C : {5, 37, 1001, 3003}) {
    SCOPED_TRACE(C);
    GuardedTensor x({4, C}, rng), y({4, C}, rng);
    std::vector<float> out(static_cast<size_t>(4 * C)), out2(out.size());
    TensorDesc o{ElemType::kF32, {4, C}, {C, 1}};
    const std::vector<RowProgram> programs = {
        softmaxProgram(0.5f, MaskKind::kAdditive), layerNormProgram({1e-5f, false, false, true, true}),
        rmsNormProgram({1e-6f, false, false, true, false}), siluMulProgram(), geluProgram(true, true)};
    for (const RowProgram& p : programs) {
      std::vector<TensorDesc> ins;
      std::vector<const void*> ip;
      for (int i = 0; i < p.numInputs(); ++i) {
        ins.push_back(i == 0 ? x.desc : y.desc);
        ip.push_back(i == 0 ? x.data : y.data);
      }
      std::vector<TensorDesc> outs(static_cast<size_t>(p.numOutputs()), o);
      std::vector<void*> op = {out.data(), out2.data()};
      op.resize(outs.size());
      for (const RowKernelOptions& opt : kernelVariants()) {
        auto k = createRowKernel(p, ins, outs, opt);
        ASSERT_TRUE(k.isOk()) << k.status().toString();
        EXPECT_TRUE(k.value()->execute(ip, op).isOk());  // a read past the end would fault here
      }
    }
    // Binary ops with a broadcast operand, unary ops and where on the guarded rows.
    RowProgram q;
    RowValue a = q.load(0), b = q.load(1);
    RowValue s = q.reduce(RowOp::kSum, a);
    q.store(0, q.where(b, q.unary(RowOp::kTanh, a), q.mul(q.sub(a, s), q.constant(3.0f))));
    RowProgram q2;  // every operand shape of a plain binary op, and a unary op, on guarded rows
    RowValue a2 = q2.load(0), b2 = q2.load(1);
    RowValue s2 = q2.reduce(RowOp::kRowMax, b2);
    q2.store(0, q2.sub(a2, s2));
    q2.store(1, q2.sub(s2, a2));
    q2.store(2, q2.div(a2, b2));
    q2.store(3, q2.unary(RowOp::kSilu, b2));
    std::vector<float> out3(out.size()), out4(out.size());
    for (const RowKernelOptions& opt : kernelVariants()) {
      auto k = createRowKernel(q, {x.desc, y.desc}, {o}, opt);
      ASSERT_TRUE(k.isOk());
      const void* ip[] = {x.data, y.data};
      void* op[] = {out.data()};
      EXPECT_TRUE(k.value()->execute(ip, op).isOk());
      auto k2 = createRowKernel(q2, {x.desc, y.desc}, {o, o, o, o}, opt);
      ASSERT_TRUE(k2.isOk());
      void* op2[] = {out.data(), out2.data(), out3.data(), out4.data()};
      EXPECT_TRUE(k2.value()->execute(ip, op2).isOk());
    }
  }
}

// ---- Builders ------------------------------------------------------------------------------------

/// Tolerance for a normalisation over C elements (relative to 1 + |y|): the reductions' error
/// (C/32 + 5) eps plus a few roundings per element, times a safety factor of 4.
double normTol(int64_t C) { return 4 * (C / 32.0 + 16) * 0x1p-24; }

TEST(RowEngine, LayerNormAllVariants) {
  std::mt19937 rng(7);
  for (int64_t C : {8, 37, 768, 3000}) {
    for (int variant = 0; variant < 4; ++variant) {
      LayerNormSpec spec;
      spec.gamma = variant != 1;
      spec.beta = variant != 2;
      spec.residual = variant >= 2;
      spec.storeSum = variant == 3;
      spec.eps = variant == 1 ? 1e-12f : 1e-5f;
      SCOPED_TRACE("C " + std::to_string(C) + " variant " + std::to_string(variant));
      Tensor x = randomTensor(ElemType::kF32, {2, 5, C}, rng, -4, 6);
      Tensor r = randomTensor(ElemType::kF32, {2, 5, C}, rng);
      Tensor g = randomTensor(ElemType::kF32, {C}, rng, 0.5f, 1.5f);
      Tensor b = randomTensor(ElemType::kF32, {C}, rng);
      std::vector<Tensor*> ins = {&x};
      if (spec.residual) ins.push_back(&r);
      if (spec.gamma) ins.push_back(&g);
      if (spec.beta) ins.push_back(&b);
      std::vector<ElemType> outs = {ElemType::kF32};
      if (spec.storeSum) outs.push_back(ElemType::kF32);
      checkProgram(layerNormProgram(spec), ins, {2, 5, C}, outs, true, 0, normTol(C));
    }
  }
}

/// Layer norm as the row-fusion rule writes native_layer_norm of a bf16 model: the loads first,
/// the float32 computation, one bf16 rounding at the end.
RowProgram fusedStyleLayerNorm(float eps, bool weight, bool bias, bool castEnd) {
  RowProgram p;
  RowValue x = p.load(0);
  RowValue w = weight ? p.load(1) : RowValue{};
  RowValue b = bias ? p.load(weight ? 2 : 1) : RowValue{};
  RowValue d = p.sub(x, p.reduce(RowOp::kMean, x));
  RowValue y = p.mul(d, p.unary(RowOp::kRsqrt, p.add(p.reduce(RowOp::kMean, p.mul(d, d)), p.constant(eps))));
  if (weight) y = p.mul(y, w);
  if (bias) y = p.add(b, y);  // the bias first: the match takes either operand order
  p.store(0, castEnd ? p.castBf16(y) : y);
  return p;
}

TEST(RowEngine, NormsRunAsOneFusedKernelWithTheInterpretersBits) {
  // On an AVX-512 CPU the default kernels run these programs as one fused kernel per row
  // (describe() says so); checkProgram holds every variant to the float reference bit for bit,
  // the AVX2 interpreter and the scalar one included.
  const bool fusedExpected = cpu::hasAvx512();
  std::mt19937 rng(21);
  auto expectFused = [&](const RowProgram& p, std::vector<Tensor*> ins, std::vector<int64_t> outSizes, ElemType out,
                         bool fused) {
    KernelRun r = run(p, ins, outSizes, {out}, false);
    ASSERT_TRUE(r.status.isOk()) << r.status.toString();
    EXPECT_EQ(r.describe.find("fused") != std::string::npos, fused && fusedExpected) << r.describe;
    checkProgram(p, ins, outSizes, {out}, true);
  };
  for (int64_t C : {2, 37, 96, 768, 3000}) {
    SCOPED_TRACE("C " + std::to_string(C));
    Tensor x = randomTensor(ElemType::kF32, {2, 5, C}, rng, -4, 6);
    Tensor g = randomTensor(ElemType::kF32, {C}, rng, 0.5f, 1.5f);
    Tensor b = randomTensor(ElemType::kF32, {C}, rng);
    for (int variant = 0; variant < 4; ++variant) {
      LayerNormSpec spec;
      spec.gamma = variant != 1 && variant != 3;
      spec.beta = variant != 2 && variant != 3;
      std::vector<Tensor*> ins = {&x};
      if (spec.gamma) ins.push_back(&g);
      if (spec.beta) ins.push_back(&b);
      expectFused(layerNormProgram(spec), ins, {2, 5, C}, ElemType::kF32, true);
    }
    // Rows 3 elements apart wider than C (a slice of a wider tensor): read in place, strided.
    Tensor wide = randomTensor(ElemType::kF32, {4, C}, rng, -4, 6, {C + 3, 1});
    expectFused(layerNormProgram({}), {&wide, &g, &b}, {4, C}, ElemType::kF32, true);
    // A bf16 model: bf16 rows, weight and bias, bf16 result (f32 result too).
    Tensor xb = randomTensor(ElemType::kBF16, {3, C}, rng, -4, 6);
    Tensor gb = randomTensor(ElemType::kBF16, {C}, rng, 0.5f, 1.5f);
    Tensor bb = randomTensor(ElemType::kBF16, {C}, rng);
    expectFused(fusedStyleLayerNorm(1e-12f, true, true, true), {&xb, &gb, &bb}, {3, C}, ElemType::kBF16, true);
    expectFused(fusedStyleLayerNorm(1e-5f, true, true, true), {&xb, &gb, &bb}, {3, C}, ElemType::kF32, true);
    expectFused(fusedStyleLayerNorm(1e-5f, false, true, false), {&xb, &bb}, {3, C}, ElemType::kF32, true);
    // RMSNorm: float32 (T5) and HF Llama's bf16 form (cast before and after the weight).
    expectFused(rmsNormProgram({1e-6f, true, false, false, false}), {&x, &g}, {2, 5, C}, ElemType::kF32, true);
    expectFused(rmsNormProgram({1e-6f, false, false, false, false}), {&x}, {2, 5, C}, ElemType::kF32, true);
    expectFused(rmsNormProgram({1e-6f, true, true, false, false}), {&xb, &gb}, {3, C}, ElemType::kBF16, true);
    // Not the pattern: the norm of a residual sum (x + r is no input row); the mean of another
    // input than the one centred.
    expectFused(rmsNormProgram({1e-6f, true, true, true, false}), {&xb, &xb, &gb}, {3, C}, ElemType::kBF16, false);
    RowProgram other;
    RowValue a = other.load(0), o = other.load(1);
    RowValue d = other.sub(a, other.reduce(RowOp::kMean, o));
    other.store(0, other.mul(d, other.unary(RowOp::kRsqrt, other.add(other.reduce(RowOp::kMean, other.mul(d, d)),
                                                                       other.constant(1e-5f)))));
    expectFused(other, {&x, &x}, {2, 5, C}, ElemType::kF32, false);
  }
}

TEST(RowEngine, FusedNormInPlace) {
  // Output = input (same layout): every row is read in full before any of it is written.
  std::mt19937 rng(22);
  for (ElemType t : {ElemType::kF32, ElemType::kBF16}) {
    Tensor x = randomTensor(t, {6, 100}, rng, -4, 6);
    Tensor g = randomTensor(t, {100}, rng, 0.5f, 1.5f);
    KernelRun want = run(fusedStyleLayerNorm(1e-5f, true, false, t == ElemType::kBF16), {&x, &g}, {6, 100}, {t}, true);
    ASSERT_TRUE(want.status.isOk());
    auto k = createRowKernel(fusedStyleLayerNorm(1e-5f, true, false, t == ElemType::kBF16), {x.desc, g.desc}, {x.desc});
    ASSERT_TRUE(k.isOk()) << k.status().toString();
    const void* ip[] = {x.data(), g.data()};
    void* op[] = {x.data()};
    ASSERT_TRUE(k.value()->execute(ip, op).isOk());
    EXPECT_TRUE(bitEqual(values(x), values(want.outs[0])));
  }
}

TEST(RowEngine, LayerNormOfAConstantRowIsBeta) {
  // var = 0: y = 0 * rsqrt(eps) + beta exactly, as torch (no NaN, no division by zero).
  Tensor x = makeTensor(ElemType::kF32, {2, 16});
  for (float& v : x.f) v = 3.25f;
  KernelRun r = run(layerNormProgram({1e-5f, false, false, false, false}), {&x}, {2, 16}, {ElemType::kF32}, false);
  ASSERT_TRUE(r.status.isOk());
  for (float v : r.outs[0].f) EXPECT_EQ(v, 0.0f);
}

TEST(RowEngine, RmsNormFloatAndBf16) {
  std::mt19937 rng(8);
  for (int64_t C : {64, 512, 4096}) {
    SCOPED_TRACE(C);
    Tensor x = randomTensor(ElemType::kF32, {3, C}, rng);
    Tensor w = randomTensor(ElemType::kF32, {C}, rng, 0.5f, 1.5f);
    checkProgram(rmsNormProgram({1e-6f, true, false, false, false}), {&x, &w}, {3, C}, {ElemType::kF32}, true, 0,
                 normTol(C));
    checkProgram(rmsNormProgram({1e-6f, false, false, false, false}), {&x}, {3, C}, {ElemType::kF32}, true, 0,
                 normTol(C));
    // A bf16 model (HF: upcast, normalise in f32, cast back, then the bf16 weight multiply).
    Tensor xb = randomTensor(ElemType::kBF16, {3, C}, rng);
    Tensor rb = randomTensor(ElemType::kBF16, {3, C}, rng);
    Tensor wb = randomTensor(ElemType::kBF16, {C}, rng, 0.5f, 1.5f);
    checkProgram(rmsNormProgram({1e-6f, true, true, false, false}), {&xb, &wb}, {3, C}, {ElemType::kBF16}, true);
    checkProgram(rmsNormProgram({1e-6f, true, true, true, true}), {&xb, &rb, &wb}, {3, C},
                 {ElemType::kBF16, ElemType::kBF16}, true);
  }
}

TEST(RowEngine, RmsNormBf16MatchesHuggingFaceStepByStep) {
  // HF LlamaRMSNorm on a bf16 input, written out op by op in float with torch's bf16 roundings.
  std::mt19937 rng(9);
  const int64_t C = 96;
  Tensor x = randomTensor(ElemType::kBF16, {2, C}, rng);
  Tensor w = randomTensor(ElemType::kBF16, {C}, rng, 0.5f, 1.5f);
  KernelRun r = run(rmsNormProgram({1e-6f, true, true, false, false}), {&x, &w}, {2, C}, {ElemType::kBF16}, true);
  ASSERT_TRUE(r.status.isOk());
  for (int64_t row = 0; row < 2; ++row) {
    std::vector<float> sq;
    for (int64_t c = 0; c < C; ++c) {
      float h = fromBf16(x.h[static_cast<size_t>(row * C + c)]);
      sq.push_back(h * h);
    }
    float var = documentedSum(sq) / static_cast<float>(C);
    float rs = 1.0f / std::sqrt(var + 1e-6f);
    for (int64_t c = 0; c < C; ++c) {
      float h = roundBf16(fromBf16(x.h[static_cast<size_t>(row * C + c)]) * rs);  // .to(input_dtype)
      uint16_t want = toBf16(fromBf16(w.h[static_cast<size_t>(c)]) * h);       // bf16 mul
      EXPECT_EQ(r.outs[0].h[static_cast<size_t>(row * C + c)], want) << row << "," << c;
    }
  }
}

TEST(RowEngine, SoftmaxWithScaleAndMasks) {
  std::mt19937 rng(10);
  for (int64_t C : {5, 128, 1000}) {
    SCOPED_TRACE(C);
    Tensor x = randomTensor(ElemType::kF32, {2, 3, 4, C}, rng, -8, 8);
    checkProgram(softmaxProgram(1.0f, MaskKind::kNone), {&x}, {2, 3, 4, C}, {ElemType::kF32}, false, 8, normTol(C));
    // HF-style [b, 1, q, kv] additive mask (broadcast over heads) with -inf and large negatives.
    Tensor add = randomTensor(ElemType::kF32, {2, 1, 4, C}, rng, -2, 0);
    for (size_t i = 0; i < add.f.size(); i += 3) add.f[i] = i % 2 ? -kInf : -3.4e38f;
    checkProgram(softmaxProgram(0.125f, MaskKind::kAdditive), {&x, &add}, {2, 3, 4, C}, {ElemType::kF32}, false, 8,
                 normTol(C));
    Tensor boolean = randomTensor(ElemType::kBool, {2, 1, 4, C}, rng);
    for (int64_t q = 0; q < 8; ++q) boolean.m[static_cast<size_t>(q * C)] = 1;  // keep one per row
    checkProgram(softmaxProgram(0.125f, MaskKind::kBoolean), {&x, &boolean}, {2, 3, 4, C}, {ElemType::kF32}, false, 8,
                 normTol(C));
  }
}

TEST(RowEngine, FullyMaskedSoftmaxRowIsNaNLikeTorch) {
  // torch.softmax(torch.full((1, 4), -inf), -1) -> nan (max = -inf, -inf - -inf = nan).
  std::mt19937 rng(11);
  Tensor x = randomTensor(ElemType::kF32, {3, 20}, rng);
  Tensor m = makeTensor(ElemType::kBool, {3, 20});
  for (int64_t c = 0; c < 20; ++c) m.m[static_cast<size_t>(c)] = 1;  // row 0 kept, rows 1-2 fully masked
  for (bool scalar : {true, false}) {
    KernelRun r = run(softmaxProgram(1.0f, MaskKind::kBoolean), {&x, &m}, {3, 20}, {ElemType::kF32}, scalar);
    ASSERT_TRUE(r.status.isOk());
    float sum = 0;
    for (int64_t c = 0; c < 20; ++c) sum += r.outs[0].f[static_cast<size_t>(c)];
    EXPECT_NEAR(sum, 1.0f, 1e-6f);
    for (int64_t c = 20; c < 60; ++c) EXPECT_TRUE(std::isnan(r.outs[0].f[static_cast<size_t>(c)]));
  }
}

TEST(RowEngine, KernelsAreTheWidestTheCpuHasUnlessForced) {
  std::mt19937 rng(5);
  Tensor x = randomTensor(ElemType::kF32, {2, 40}, rng);
  const std::vector<std::string> want = {cpu::hasAvx512() ? "avx512" : cpu::hasAvx2Fma() ? "avx2" : "scalar",
                                         cpu::hasAvx2Fma() ? "avx2" : "scalar", "scalar"};
  const auto variants = kernelVariants();
  for (size_t v = 0; v < variants.size(); ++v) {
    KernelRun r = runWith(siluMulProgram(), {&x, &x}, {2, 40}, {ElemType::kF32}, variants[v]);
    ASSERT_TRUE(r.status.isOk());
    EXPECT_EQ(r.isa, want[v]) << variantName(variants[v]);
  }
}

TEST(RowEngine, PointwiseBuilders) {
  std::mt19937 rng(12);
  Tensor x = randomTensor(ElemType::kF32, {4, 300}, rng, -7, 7);
  Tensor y = randomTensor(ElemType::kF32, {4, 300}, rng, -7, 7);
  Tensor bias = randomTensor(ElemType::kF32, {300}, rng);
  const double tol = 8 * 0x1p-24;
  checkProgram(geluProgram(false), {&x}, {4, 300}, {ElemType::kF32}, false, 6, tol);
  checkProgram(geluProgram(true), {&x}, {4, 300}, {ElemType::kF32}, false, 6, tol);
  checkProgram(geluProgram(false, true), {&x, &bias}, {4, 300}, {ElemType::kF32}, false, 6, tol);
  checkProgram(siluMulProgram(), {&x, &y}, {4, 300}, {ElemType::kF32}, false, 6, tol);
  for (bool b : {false, true})
    for (bool r : {false, true}) {
      std::vector<Tensor*> ins = {&x};
      if (b) ins.push_back(&bias);
      if (r) ins.push_back(&y);
      checkProgram(biasResidualAddProgram(b, r), ins, {4, 300}, {ElemType::kF32}, true, 0, tol);
    }
}

TEST(RowEngine, RotaryWithCosSinBroadcastOverHeads) {
  // q [b, h, s, d], cos/sin [b, 1, s, d] (HF unsqueezes the head dim), and [s, d].
  std::mt19937 rng(13);
  Tensor q = randomTensor(ElemType::kF32, {2, 4, 16, 64}, rng);
  Tensor cos = randomTensor(ElemType::kF32, {2, 1, 16, 64}, rng, -1, 1);
  Tensor sin = randomTensor(ElemType::kF32, {2, 1, 16, 64}, rng, -1, 1);
  checkProgram(rotaryProgram(), {&q, &cos, &sin}, {2, 4, 16, 64}, {ElemType::kF32}, true, 0, 4 * 0x1p-24);
  Tensor cos2 = randomTensor(ElemType::kF32, {16, 64}, rng, -1, 1);
  Tensor sin2 = randomTensor(ElemType::kF32, {16, 64}, rng, -1, 1);
  checkProgram(rotaryProgram(), {&q, &cos2, &sin2}, {2, 4, 16, 64}, {ElemType::kF32}, true);
  // q as a strided view: [b, s, h, d] memory read as [b, h, s, d] (transpose(1, 2)).
  Tensor qt = randomTensor(ElemType::kF32, {2, 4, 16, 64}, rng, -3, 3, {4 * 16 * 64, 64, 4 * 64, 1});
  checkProgram(rotaryProgram(), {&qt, &cos, &sin}, {2, 4, 16, 64}, {ElemType::kF32}, true);
}

/// Runs \p p once (default ISA) on dense inputs and returns output 0.
std::vector<float> run0(const RowProgram& p, std::vector<Tensor*> ins, const std::vector<int64_t>& shape) {
  KernelRun r = run(p, std::move(ins), shape, std::vector<ElemType>(static_cast<size_t>(p.numOutputs()), ElemType::kF32), false);
  EXPECT_TRUE(r.status.isOk()) << r.status.toString();
  return r.status.isOk() ? values(r.outs[0]) : std::vector<float>();
}

TEST(RowEngine, BuildersMatchTheTextbookFormulas) {
  // Each builder against its formula written directly in double (independent of the program, so
  // a builder with a wrong formula, a dropped eps or a swapped half fails here).
  std::mt19937 rng(21);
  const int64_t R = 6, C = 200;
  Tensor x = randomTensor(ElemType::kF32, {R, C}, rng, -4, 4);
  Tensor y = randomTensor(ElemType::kF32, {R, C}, rng, -4, 4);
  Tensor g = randomTensor(ElemType::kF32, {C}, rng, 0.5f, 1.5f);
  Tensor b = randomTensor(ElemType::kF32, {C}, rng);
  Tensor mask = randomTensor(ElemType::kF32, {R, C}, rng, -3, 0);
  Tensor keep = randomTensor(ElemType::kBool, {R, C}, rng);
  for (int64_t r = 0; r < R; ++r) keep.m[static_cast<size_t>(r * C)] = 1;
  auto X = [&](const Tensor& t, int64_t r, int64_t c) { return static_cast<double>(t.f[static_cast<size_t>(r * C + c)]); };
  auto V = [&](const Tensor& t, int64_t c) { return static_cast<double>(t.f[static_cast<size_t>(c)]); };
  const double eps = 1e-2;  // large enough that dropping it shows
  std::vector<double> ln, lnSum, rms, smAdd, smBool, ge, gt, sm, rot, bra;
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0, sq = 0;
    for (int64_t c = 0; c < C; ++c) mean += X(x, r, c) + X(y, r, c);
    mean /= C;
    for (int64_t c = 0; c < C; ++c) var += (X(x, r, c) + X(y, r, c) - mean) * (X(x, r, c) + X(y, r, c) - mean);
    var /= C;
    for (int64_t c = 0; c < C; ++c) sq += X(x, r, c) * X(x, r, c);
    for (int64_t c = 0; c < C; ++c) {
      ln.push_back((X(x, r, c) + X(y, r, c) - mean) / std::sqrt(var + eps) * V(g, c) + V(b, c));
      lnSum.push_back(X(x, r, c) + X(y, r, c));
      rms.push_back(V(g, c) * (X(x, r, c) / std::sqrt(sq / C + eps)));
    }
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<double> s(static_cast<size_t>(C));
      double mx = -INFINITY, z = 0;
      for (int64_t c = 0; c < C; ++c) {
        double v = X(x, r, c) * 0.3;
        if (kind == 0) v += X(mask, r, c);
        else if (!keep.m[static_cast<size_t>(r * C + c)]) v = -INFINITY;
        s[static_cast<size_t>(c)] = v;
        mx = std::max(mx, v);
      }
      for (double& v : s) z += (v = std::exp(v - mx));
      for (double v : s) (kind == 0 ? smAdd : smBool).push_back(v / z);
    }
    for (int64_t c = 0; c < C; ++c) {
      const double a = X(x, r, c);
      ge.push_back(0.5 * a * (1 + std::erf(a / std::sqrt(2.0))));
      gt.push_back(0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a))));
      sm.push_back(a / (1 + std::exp(-a)) * X(y, r, c));
      const double half = c < C / 2 ? -X(x, r, c + C / 2) : X(x, r, c - C / 2);
      rot.push_back(a * X(y, r, c) + half * X(mask, r, c));  // cos = y, sin = mask
      bra.push_back(a + V(b, c) + X(y, r, c));
    }
  }
  const double tol = 64 * 0x1p-24;
  LayerNormSpec lnSpec{static_cast<float>(eps), true, true, true, true};
  EXPECT_TRUE(closeTo(run0(layerNormProgram(lnSpec), {&x, &y, &g, &b}, {R, C}), ln, tol));
  KernelRun both = run(layerNormProgram(lnSpec), {&x, &y, &g, &b}, {R, C}, {ElemType::kF32, ElemType::kF32}, false);
  ASSERT_TRUE(both.status.isOk());
  EXPECT_TRUE(closeTo(values(both.outs[1]), lnSum, tol));
  EXPECT_TRUE(closeTo(run0(rmsNormProgram({static_cast<float>(eps), true, false, false, false}), {&x, &g}, {R, C}), rms, tol));
  EXPECT_TRUE(closeTo(run0(softmaxProgram(0.3f, MaskKind::kAdditive), {&x, &mask}, {R, C}), smAdd, tol));
  EXPECT_TRUE(closeTo(run0(softmaxProgram(0.3f, MaskKind::kBoolean), {&x, &keep}, {R, C}), smBool, tol));
  EXPECT_TRUE(closeTo(run0(geluProgram(false), {&x}, {R, C}), ge, tol));
  EXPECT_TRUE(closeTo(run0(geluProgram(true), {&x}, {R, C}), gt, tol));
  EXPECT_TRUE(closeTo(run0(siluMulProgram(), {&x, &y}, {R, C}), sm, tol));
  EXPECT_TRUE(closeTo(run0(rotaryProgram(), {&x, &y, &mask}, {R, C}), rot, tol));
  EXPECT_TRUE(closeTo(run0(biasResidualAddProgram(true, true), {&x, &b, &y}, {R, C}), bra, tol));
}

// ---- Layouts -------------------------------------------------------------------------------------

TEST(RowEngine, BroadcastingAndStridedRows) {
  std::mt19937 rng(14);
  const std::vector<int64_t> shape = {3, 5, 70};
  Tensor x = randomTensor(ElemType::kF32, shape, rng);
  std::vector<Tensor> others;
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng));                            // full
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 1}, rng));                             // per row
  others.push_back(randomTensor(ElemType::kF32, {70}, rng));                                  // per column
  others.push_back(randomTensor(ElemType::kF32, {1}, rng));                                   // scalar
  others.push_back(randomTensor(ElemType::kF32, {3, 1, 70}, rng));                            // middle broadcast
  others.push_back(randomTensor(ElemType::kF32, {5, 1}, rng));                                // per (·, j) row
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng, -3, 3, {5 * 80, 80, 1}));    // padded rows
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng, -3, 3, {70, 3 * 70, 1}));    // permuted outer
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng, -3, 3, {-5 * 70, 70, 1}));   // negative stride
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng, -3, 3, {0, 70, 1}));         // expand (stride 0)
  others.push_back(randomTensor(ElemType::kF32, {3, 5, 70}, rng, -3, 3, {5, 1, 0}));          // expanded last dim
  for (size_t i = 0; i < others.size(); ++i) {
    SCOPED_TRACE(i);
    RowProgram p;
    RowValue a = p.load(0), b = p.load(1);
    p.store(0, p.mul(p.sub(a, p.reduce(RowOp::kMean, b)), b));
    checkProgram(p, {&x, &others[i]}, shape, {ElemType::kF32}, true);
  }
  // Strided output (padded rows, permuted outer dims).
  for (std::vector<int64_t> st : {std::vector<int64_t>{5 * 72, 72, 1}, {70, 3 * 70, 1}}) {
    RowProgram p;
    p.store(0, p.add(p.load(0), p.constant(1.0f)));
    KernelRun r = run(p, {&x}, shape, {}, false, {makeTensor(ElemType::kF32, shape, st)});
    ASSERT_TRUE(r.status.isOk()) << r.status.toString();
    std::vector<float> got = values(r.outs[0]), want = values(x);
    for (float& v : want) v += 1.0f;
    EXPECT_TRUE(bitEqual(got, want));
  }
}

TEST(RowEngine, ShortLongAndDegenerateShapes) {
  std::mt19937 rng(15);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1000, 1}, {37, 3}, {5, 9}, {2, 1023}, {2, 1025},
                                     {1, 8191}, {3, 20000}, {70000 / 4, 4}, {300}}) {
    SCOPED_TRACE(shape.size() == 1 ? shape[0] * 1000000 : shape[0] * 1000000 + shape[1]);
    Tensor x = randomTensor(ElemType::kF32, shape, rng);
    Tensor y = randomTensor(ElemType::kF32, shape, rng);
    checkProgram(layerNormProgram({1e-5f, false, false, true, true}), {&x, &y}, shape,
                 {ElemType::kF32, ElemType::kF32}, true, 0, normTol(shape.back()));
    checkProgram(softmaxProgram(0.5f, MaskKind::kNone), {&x}, shape, {ElemType::kF32}, false, 8, normTol(shape.back()));
  }
  // Empty iteration spaces run nothing.
  for (std::vector<int64_t> shape : {std::vector<int64_t>{0, 16}, {4, 0}}) {
    Tensor x = makeTensor(ElemType::kF32, shape);
    KernelRun r = run(softmaxProgram(1.0f, MaskKind::kNone), {&x}, shape, {ElemType::kF32}, false);
    EXPECT_TRUE(r.status.isOk()) << r.status.toString();
  }
}

TEST(RowEngine, UnsupportedLayoutsAreRefused) {
  RowProgram p = biasResidualAddProgram(false, true);
  TensorDesc ok{ElemType::kF32, {4, 16}, {16, 1}};
  auto code = [&](TensorDesc a, TensorDesc b, TensorDesc o) { return createRowKernel(p, {a, b}, {o}).status().code(); };
  EXPECT_EQ(code(ok, ok, ok), StatusCode::kOk);
  EXPECT_EQ(code({ElemType::kF32, {4, 16}, {32, 2}}, ok, ok), StatusCode::kUnsupported) << "strided last dim";
  EXPECT_EQ(code({ElemType::kF32, {4, 16}, {1, 4}}, ok, ok), StatusCode::kUnsupported) << "column-major";
  EXPECT_EQ(code(ok, ok, {ElemType::kF32, {4, 16}, {32, 2}}), StatusCode::kUnsupported) << "output last stride";
  EXPECT_EQ(code(ok, ok, {ElemType::kF32, {4, 16}, {0, 1}}), StatusCode::kUnsupported) << "overlapping output rows";
  EXPECT_EQ(code(ok, ok, {ElemType::kF32, {4, 16}, {8, 1}}), StatusCode::kUnsupported) << "overlapping output rows";
  EXPECT_EQ(code(ok, ok, {ElemType::kBool, {4, 16}, {16, 1}}), StatusCode::kUnsupported) << "bool output";
  TensorDesc wide{ElemType::kF32, {2, 70000}, {70000, 1}};
  EXPECT_EQ(code(wide, wide, wide), StatusCode::kUnsupported) << "row too long";
  EXPECT_EQ(code({ElemType::kF32, {3, 16}, {16, 1}}, ok, ok), StatusCode::kInvalidArgument) << "does not broadcast";
  EXPECT_EQ(code({ElemType::kF32, {2, 4, 16}, {64, 16, 1}}, ok, ok), StatusCode::kInvalidArgument) << "higher rank";
  EXPECT_EQ(code({ElemType::kF32, {4, 16}, {16}}, ok, ok), StatusCode::kInvalidArgument) << "ranks differ";
  EXPECT_EQ(createRowKernel(p, {ok, ok}, {{ElemType::kF32, {}, {}}}).status().code(), StatusCode::kInvalidArgument);
}

// ---- Aliasing, dtypes, threads, NaN ---------------------------------------------------------------

TEST(RowEngine, InPlaceResidualAdd) {
  std::mt19937 rng(16);
  for (int64_t C : {24, 3000}) {
    Tensor x = randomTensor(ElemType::kF32, {6, C}, rng);
    Tensor res = randomTensor(ElemType::kF32, {6, C}, rng);
    Tensor bias = randomTensor(ElemType::kF32, {C}, rng);
    std::vector<float> want(res.f.size());
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = static_cast<size_t>(r * C + c);
        want[i] = (x.f[i] + bias.f[static_cast<size_t>(c)]) + res.f[i];
      }
    auto k = createRowKernel(biasResidualAddProgram(true, true), {x.desc, bias.desc, res.desc}, {res.desc});
    ASSERT_TRUE(k.isOk());
    const void* ins[] = {x.data(), bias.data(), res.data()};
    void* outs[] = {res.data()};  // out0 is the residual buffer
    ASSERT_TRUE(k.value()->execute(ins, outs).isOk());
    EXPECT_TRUE(bitEqual(res.f, want));
  }
  // Layer norm writing h = x + r back into r, and y elsewhere (pre-LN transformer block).
  Tensor x = randomTensor(ElemType::kF32, {4, 2000}, rng);
  Tensor r = randomTensor(ElemType::kF32, {4, 2000}, rng);
  Tensor y = makeTensor(ElemType::kF32, {4, 2000});
  std::vector<float> h(r.f.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = x.f[i] + r.f[i];
  RowProgram ln = layerNormProgram({1e-5f, false, false, true, true});
  auto k = createRowKernel(ln, {x.desc, r.desc}, {y.desc, r.desc});
  ASSERT_TRUE(k.isOk());
  Tensor rCopy = r;
  const void* ins[] = {x.data(), r.data()};
  void* outs[] = {y.data(), r.data()};
  ASSERT_TRUE(k.value()->execute(ins, outs).isOk());
  EXPECT_TRUE(bitEqual(r.f, h));
  KernelRun fresh = run(ln, {&x, &rCopy}, {4, 2000}, {ElemType::kF32, ElemType::kF32}, false);
  EXPECT_TRUE(bitEqual(y.f, fresh.outs[0].f));
}

TEST(RowEngine, AliasingThatWouldBeWrongIsRefused) {
  std::vector<float> a(64, 1.0f), b(64, 2.0f), c(64);
  TensorDesc d{ElemType::kF32, {4, 16}, {16, 1}};
  // The store comes before a later load of the same input: in place would change what is read.
  RowProgram p;
  RowValue x = p.load(0);
  p.store(0, p.add(x, x));
  p.store(1, p.load(1));
  auto k = createRowKernel(p, {d, d}, {d, d});
  ASSERT_TRUE(k.isOk());
  {
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {b.data(), c.data()};  // out0 aliases in1, loaded after out0's store
    EXPECT_EQ(k.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
  }
  {
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {c.data(), c.data()};  // outputs overlap
    EXPECT_EQ(k.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
  }
  {
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {a.data() + 1, c.data()};  // partial overlap with an input
    EXPECT_EQ(k.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
  }
  {
    const void* ins[] = {a.data(), b.data()};
    void* outs[] = {a.data(), c.data()};  // out0 = in0 in place: loaded first, allowed
    EXPECT_TRUE(k.value()->execute(ins, outs).isOk());
    EXPECT_EQ(a[5], 2.0f);
    EXPECT_EQ(c[5], 2.0f);
  }
  // The op that writes out0 in place reads in0 itself (fine), but a later op reads in0 again: refused.
  {
    RowProgram r;
    RowValue x0 = r.load(0);
    r.store(0, r.add(x0, r.constant(1.0f)));
    r.store(1, r.mul(x0, r.constant(2.0f)));
    auto kr = createRowKernel(r, {d}, {d, d});
    ASSERT_TRUE(kr.isOk());
    std::vector<float> u(64, 3.0f);
    const void* ins[] = {u.data()};
    void* outs[] = {u.data(), c.data()};
    EXPECT_EQ(kr.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
    RowProgram r2;
    RowValue x1 = r2.load(0);
    r2.store(1, r2.mul(x1, r2.constant(2.0f)));
    r2.store(0, r2.add(x1, r2.constant(1.0f)));
    auto k2 = createRowKernel(r2, {d}, {d, d});
    ASSERT_TRUE(k2.isOk());
    EXPECT_TRUE(k2.value()->execute(ins, outs).isOk());
    EXPECT_EQ(u[17], 4.0f);
    EXPECT_EQ(c[17], 6.0f);
  }
  // A broadcast input can never be an in-place target.
  RowProgram q = biasResidualAddProgram(true, false);
  TensorDesc row{ElemType::kF32, {16}, {1}};
  auto k2 = createRowKernel(q, {d, row}, {d});
  ASSERT_TRUE(k2.isOk());
  const void* ins[] = {a.data(), a.data()};
  void* outs[] = {a.data()};
  EXPECT_EQ(k2.value()->execute(ins, outs).code(), StatusCode::kInvalidArgument);
}

TEST(RowEngine, Bf16InputsAndOutputs) {
  std::mt19937 rng(17);
  Tensor x = randomTensor(ElemType::kBF16, {5, 100}, rng);
  Tensor y = randomTensor(ElemType::kF32, {5, 100}, rng);
  Tensor g = randomTensor(ElemType::kBF16, {100}, rng);
  RowProgram p;
  p.store(0, p.mul(p.add(p.load(0), p.load(1)), p.load(2)));
  p.store(1, p.castBf16(p.add(p.load(0), p.load(1))));
  checkProgram(p, {&x, &y, &g}, {5, 100}, {ElemType::kBF16, ElemType::kF32}, true);
  checkProgram(p, {&x, &y, &g}, {5, 100}, {ElemType::kF32, ElemType::kBF16}, true);
  checkProgram(layerNormProgram({}), {&x, &g, &g}, {5, 100}, {ElemType::kBF16}, true);
  checkProgram(softmaxProgram(0.3f, MaskKind::kAdditive), {&x, &y}, {5, 100}, {ElemType::kBF16}, false, 1);
  // Rounding to nearest even and NaN as torch.
  Tensor s = makeTensor(ElemType::kF32, {1, 8});
  const float in[8] = {1.00390625f, 1.01171875f, 1.0f + 0x1p-8f + 0x1p-20f, kNaN, kInf, -kInf, 3.4e38f, -0.0f};
  std::copy(in, in + 8, s.f.begin());
  RowProgram c;
  c.store(0, c.load(0));
  KernelRun r = run(c, {&s}, {1, 8}, {ElemType::kBF16}, false);
  ASSERT_TRUE(r.status.isOk());
  const uint16_t want[8] = {0x3F80, 0x3F82, 0x3F81, 0x7FC0, 0x7F80, 0xFF80, 0x7F80, 0x8000};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.outs[0].h[static_cast<size_t>(i)], want[i]) << i;
}

TEST(RowEngine, ThreadCountDoesNotChangeTheResult) {
  std::mt19937 rng(18);
  const int saved = omp_get_max_threads();
  struct Case {
    RowProgram p;
    std::vector<int64_t> shape;
    int inputs;
  };
  std::vector<Case> cases = {{layerNormProgram({1e-5f, true, true, true, true}), {128, 768}, 4},
                             {softmaxProgram(0.125f, MaskKind::kAdditive), {12, 128, 128}, 2},
                             {rmsNormProgram({}), {64, 4096}, 2},
                             {geluProgram(false), {128, 3072}, 1}};
  for (Case& c : cases) {
    std::vector<Tensor> ts;
    for (int i = 0; i < c.inputs; ++i) ts.push_back(randomTensor(ElemType::kF32, c.shape, rng));
    std::vector<Tensor*> ins;
    for (Tensor& t : ts) ins.push_back(&t);
    std::vector<ElemType> outs(static_cast<size_t>(c.p.numOutputs()), ElemType::kF32);
    omp_set_num_threads(1);
    KernelRun one = run(c.p, ins, c.shape, outs, false);
    omp_set_num_threads(2);
    KernelRun two = run(c.p, ins, c.shape, outs, false);
    omp_set_num_threads(3);
    KernelRun three = run(c.p, ins, c.shape, outs, false);
    ASSERT_TRUE(one.status.isOk() && two.status.isOk() && three.status.isOk());
    for (size_t k = 0; k < one.outs.size(); ++k) {
      EXPECT_TRUE(bitEqual(one.outs[k].f, two.outs[k].f));
      EXPECT_TRUE(bitEqual(one.outs[k].f, three.outs[k].f));
    }
  }
  omp_set_num_threads(saved);
}

TEST(RowEngine, ConcurrentExecuteIsSafe) {
  std::mt19937 rng(19);
  Tensor x = randomTensor(ElemType::kF32, {64, 500}, rng);
  auto k = createRowKernel(softmaxProgram(1.0f, MaskKind::kNone), {x.desc}, {x.desc});
  ASSERT_TRUE(k.isOk());
  std::vector<std::vector<float>> outs(4, std::vector<float>(x.f.size()));
#pragma omp parallel for num_threads(4)
  for (int t = 0; t < 4; ++t) {
    const void* ins[] = {x.data()};
    void* o[] = {outs[static_cast<size_t>(t)].data()};
    for (int rep = 0; rep < 5; ++rep) (void)k.value()->execute(ins, o);
  }
  for (int t = 1; t < 4; ++t) EXPECT_TRUE(bitEqual(outs[static_cast<size_t>(t)], outs[0]));
}

TEST(RowEngine, NaNAndInfPropagateLikeEager) {
  Tensor x = makeTensor(ElemType::kF32, {4, 16});
  std::mt19937 rng(20);
  fillRandom(x, rng);
  x.f[3] = kNaN;        // row 0: NaN
  x.f[16 + 5] = kInf;   // row 1: +inf
  x.f[32 + 7] = -kInf;  // row 2: -inf
  // Layer norm: a NaN or inf anywhere makes the row NaN (torch gives nan too: mean is nan/inf).
  KernelRun ln = run(layerNormProgram({1e-5f, false, false, false, false}), {&x}, {4, 16}, {ElemType::kF32}, false);
  ASSERT_TRUE(ln.status.isOk());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 16; ++c) EXPECT_TRUE(std::isnan(ln.outs[0].f[static_cast<size_t>(r * 16 + c)])) << r << "," << c;
  for (int64_t c = 0; c < 16; ++c) EXPECT_TRUE(std::isfinite(ln.outs[0].f[static_cast<size_t>(48 + c)]));
  // Softmax: NaN row -> NaN; +inf -> NaN (inf - inf); -inf -> that entry 0, the rest fine.
  KernelRun sm = run(softmaxProgram(1.0f, MaskKind::kNone), {&x}, {4, 16}, {ElemType::kF32}, false);
  ASSERT_TRUE(sm.status.isOk());
  for (int64_t c = 0; c < 16; ++c) {
    EXPECT_TRUE(std::isnan(sm.outs[0].f[static_cast<size_t>(c)]));
    EXPECT_TRUE(std::isnan(sm.outs[0].f[static_cast<size_t>(16 + c)]));
    EXPECT_TRUE(std::isfinite(sm.outs[0].f[static_cast<size_t>(32 + c)]));
  }
  EXPECT_EQ(sm.outs[0].f[32 + 7], 0.0f);
}

}  // namespace
}  // namespace verifuse::kernels::rowwise
