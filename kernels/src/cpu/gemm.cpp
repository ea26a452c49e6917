// GEMM front end (baseline ISA): weight packing, argument checks, post-op resolution, and the
// run-time dispatch to the AVX-512 kernel (gemm_avx512.cpp) or the AVX2+FMA one (gemm_avx2.cpp);
// bf16: to the AVX512-BF16 kernel (gemm_bf16_avx512.cpp) or a widening one (AVX-512:
// gemm_bf16_widening_avx512.cpp, AVX2: gemm_bf16_avx2.cpp).
#include "verifuse/kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include <omp.h>

#include "cpu/gemm_internal.h"
#include "cpu/weight_memory.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels::gemm {

using detail::EpiOp;
using detail::kBlockMax;
using detail::kNR;

PackedWeights::~PackedWeights() { cpu::freeWeightMemory(data_); }

StatusOr<std::shared_ptr<const PackedWeights>> packWeights(const float* w, int64_t k, int64_t n,
                                                           WeightOrder order) {
  if (w == nullptr) return invalidArgument("gemm::packWeights: null weights");
  if (k < 1 || n < 1) {
    return invalidArgument("gemm::packWeights: k and n must be >= 1, got k=" + std::to_string(k) +
                           " n=" + std::to_string(n));
  }
  const int64_t nPadded = (n + kNR - 1) / kNR * kNR;
  if (k > (int64_t{1} << 40) / nPadded) return invalidArgument("gemm::packWeights: too large");
  // Equal K blocks (a multiple of 4, at most kBlockMax) so no block is a short remainder.
  const int64_t nBlocks = (k + kBlockMax - 1) / kBlockMax;
  const int64_t kBlock = ((k + nBlocks - 1) / nBlocks + 3) / 4 * 4;

  const size_t bytes = static_cast<size_t>(k) * static_cast<size_t>(nPadded) * sizeof(float);
  auto* data = static_cast<float*>(cpu::allocateWeightMemory(bytes));
  if (data == nullptr) return internalError("gemm::packWeights: out of memory");

  for (int64_t k0 = 0; k0 < k; k0 += kBlock) {
    const int64_t kb = std::min(kBlock, k - k0);
    float* block = data + k0 * nPadded;
    for (int64_t j = 0; j < nPadded / kNR; ++j) {
      float* panel = block + j * kb * kNR;
      const int64_t cols = std::min(kNR, n - j * kNR);
      if (order == WeightOrder::kKN) {
        for (int64_t kk = 0; kk < kb; ++kk) {
          const float* src = w + (k0 + kk) * n + j * kNR;
          float* dst = panel + kk * kNR;
          std::memcpy(dst, src, static_cast<size_t>(cols) * sizeof(float));
          std::fill(dst + cols, dst + kNR, 0.f);
        }
      } else if (cols == kNR && cpu::hasAvx2Fma()) {
        detail::packPanelNkAvx2(w, k, j * kNR, k0, kb, panel);
      } else {
        for (int64_t col = 0; col < kNR; ++col) {
          if (col >= cols) {
            for (int64_t kk = 0; kk < kb; ++kk) panel[kk * kNR + col] = 0.f;
            continue;
          }
          const float* src = w + (j * kNR + col) * k + k0;
          for (int64_t kk = 0; kk < kb; ++kk) panel[kk * kNR + col] = src[kk];
        }
      }
    }
  }
  auto* packed = new (std::nothrow) PackedWeights(k, n, nPadded, kBlock, data);
  if (packed == nullptr) {
    cpu::freeWeightMemory(data);
    return internalError("gemm::packWeights: out of memory");
  }
  try {
    return std::shared_ptr<const PackedWeights>(packed);  // deletes packed if this throws
  } catch (const std::bad_alloc&) {
    return internalError("gemm::packWeights: out of memory");
  }
}

bool available() { return cpu::hasAvx2Fma(); }

namespace {
std::atomic<bool> gAvx512Allowed{true};
}  // namespace

Isa activeIsa() {
  return gAvx512Allowed.load(std::memory_order_relaxed) && cpu::hasAvx512() ? Isa::kAvx512 : Isa::kAvx2;
}

void setMaxIsa(Isa isa) { gAvx512Allowed.store(isa == Isa::kAvx512, std::memory_order_relaxed); }

namespace detail {
int threadsForMacs(int64_t m, int64_t k, int64_t n) {
  // Below this many multiply-adds per thread, another thread costs more than it saves.
  constexpr double kMinMacsPerThread = 1 << 18;
  const int maxThreads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double macs = static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  return static_cast<int>(std::max(1.0, std::min<double>(maxThreads, macs / kMinMacsPerThread)));
}
}  // namespace detail

int threadsFor(int64_t m, const PackedWeights& b) { return detail::threadsForMacs(m, b.k(), b.n()); }

bool supportsPostOp(const PostOp& op) {
  switch (op.kind) {
    case PostOp::Kind::kSum:
    case PostOp::Kind::kBinary: return true;
    case PostOp::Kind::kEltwise: break;
  }
  switch (op.act) {
    case Activation::kRelu:
    case Activation::kLeakyRelu:
    case Activation::kClamp:
    case Activation::kLinear:
    case Activation::kHardswish:
    case Activation::kHardsigmoid:
    case Activation::kGeluErf:
    case Activation::kGeluTanh:
    case Activation::kSilu:
    case Activation::kSigmoid:
    case Activation::kTanh:
    case Activation::kElu: return true;
  }
  return false;
}

namespace {

/// activationName() lives in the oneDNN library, which this one must not need.
const char* actName(Activation a) {
  switch (a) {
    case Activation::kRelu: return "relu";
    case Activation::kLeakyRelu: return "leaky_relu";
    case Activation::kGeluErf: return "gelu_erf";
    case Activation::kGeluTanh: return "gelu_tanh";
    case Activation::kSilu: return "silu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kHardswish: return "hardswish";
    case Activation::kHardsigmoid: return "hardsigmoid";
    case Activation::kClamp: return "clamp";
    case Activation::kElu: return "elu";
    case Activation::kLinear: return "linear";
  }
  return "?";
}

/// [first, last) byte range a strided [rows, cols] f32 matrix touches.
struct Extent {
  const char* first;
  const char* last;
};
Extent extentOf(const float* p, int64_t rows, int64_t cols, int64_t ld) {
  const auto* b = reinterpret_cast<const char*>(p);
  return {b, b + ((rows - 1) * ld + cols) * static_cast<int64_t>(sizeof(float))};
}
bool overlaps(Extent x, Extent y) { return x.first < y.last && y.first < x.last; }

Status resolveEltwise(const PostOp& op, EpiOp& e) {
  using K = EpiOp::Kind;
  e.alpha = op.alpha;
  e.beta = op.beta;
  switch (op.act) {
    case Activation::kRelu: e.kind = K::kRelu; return Status::ok();
    case Activation::kLeakyRelu: e.kind = K::kLeakyRelu; return Status::ok();
    case Activation::kClamp: e.kind = K::kClamp; return Status::ok();
    case Activation::kLinear: e.kind = K::kLinear; return Status::ok();
    case Activation::kHardswish: e.kind = K::kHardswish; return Status::ok();
    case Activation::kHardsigmoid: e.kind = K::kHardsigmoid; return Status::ok();
    case Activation::kGeluErf: e.kind = K::kGeluErf; return Status::ok();
    case Activation::kGeluTanh: e.kind = K::kGeluTanh; return Status::ok();
    case Activation::kSilu: e.kind = K::kSilu; return Status::ok();
    case Activation::kSigmoid: e.kind = K::kSigmoid; return Status::ok();
    case Activation::kTanh: e.kind = K::kTanh; return Status::ok();
    case Activation::kElu: e.kind = K::kElu; return Status::ok();
  }
  return unimplemented(std::string("gemm: post-op ") + actName(op.act));
}

}  // namespace

namespace detail {

Status resolveProblem(const float* a, int64_t m, int64_t lda, int64_t k, int64_t n, float* c, int64_t ldc,
                      const Epilogue& ep, const float* residual, int64_t ldr,
                      std::span<const float* const> binaryOperands, Problem& p) {
  if (m < 0) return invalidArgument("gemm::run: m < 0");
  if (static_cast<int64_t>(ep.postOps.size()) > detail::kMaxEpiOps) {
    return unimplemented("gemm: more than 16 post-ops");
  }
  size_t nBinary = 0;
  for (const PostOp& op : ep.postOps) {
    if (op.kind == PostOp::Kind::kBinary) ++nBinary;
    if (!supportsPostOp(op)) {
      return unimplemented(std::string("gemm: unsupported post-op ") + actName(op.act));
    }
  }
  if (binaryOperands.size() != nBinary) {
    return invalidArgument("gemm::run: " + std::to_string(nBinary) + " binary post-ops but " +
                           std::to_string(binaryOperands.size()) + " operands");
  }
  p.m = 0;
  if (m == 0) return Status::ok();
  if (a == nullptr || c == nullptr) return invalidArgument("gemm::run: null a or c");
  if (lda < k) return invalidArgument("gemm::run: lda < k");
  if (ldc < n) return invalidArgument("gemm::run: ldc < n");

  p.a = a; p.m = m; p.lda = lda; p.k = k; p.n = n; p.c = c; p.ldc = ldc; p.bias = ep.bias;
  p.nOps = 0;
  const Extent cExt = extentOf(c, m, n, ldc);
  if (overlaps(cExt, extentOf(a, m, k, lda))) return invalidArgument("gemm::run: c overlaps a");
  if (ep.bias != nullptr && overlaps(cExt, extentOf(ep.bias, 1, n, n))) {
    return invalidArgument("gemm::run: c overlaps bias");
  }

  size_t binaryIndex = 0;
  for (const PostOp& op : ep.postOps) {
    EpiOp& e = p.ops[p.nOps++];
    switch (op.kind) {
      case PostOp::Kind::kEltwise: VF_RETURN_IF_ERROR(resolveEltwise(op, e)); break;
      case PostOp::Kind::kSum: {
        if (residual == nullptr) return invalidArgument("gemm::run: sum post-op without residual");
        if (ldr < n) return invalidArgument("gemm::run: ldr < n");
        e.kind = EpiOp::Kind::kSum;
        e.alpha = op.scale;
        e.bcast = EpiOp::Bcast::kFull;
        e.src = residual;
        e.ld = ldr;
        if (residual == c && ldr == ldc) {
          e.aliasesC = true;
        } else if (overlaps(cExt, extentOf(residual, m, n, ldr))) {
          return invalidArgument("gemm::run: residual overlaps c without being c");
        }
        break;
      }
      case PostOp::Kind::kBinary: {
        const float* src = binaryOperands[binaryIndex++];
        if (src == nullptr) return invalidArgument("gemm::run: null binary operand");
        const std::vector<int64_t>& d = op.binaryDims;
        if (d.size() != 2 || !(d[0] == 1 || d[0] == m) || !(d[1] == 1 || d[1] == n)) {
          std::string dims;
          for (int64_t x : d) {
            if (!dims.empty()) dims += ',';
            dims += std::to_string(x);
          }
          return unimplemented("gemm: binary operand dims {" + dims + "} for output [" +
                               std::to_string(m) + "," + std::to_string(n) +
                               "]: only {1|M, 1|N}");
        }
        e.kind = EpiOp::Kind::kBinary;
        e.alg = op.binaryAlg;
        e.src = src;
        const bool perRow = d[0] == m && m > 1, perCol = d[1] == n && n > 1;
        // m == 1 or n == 1 make two broadcasts the same; pick the one reading the right elements.
        if (d[0] == m && d[1] == n) {
          e.bcast = EpiOp::Bcast::kFull;
        } else if (perCol) {
          e.bcast = EpiOp::Bcast::kPerColumn;
        } else if (perRow) {
          e.bcast = EpiOp::Bcast::kPerRow;
        } else {
          e.bcast = EpiOp::Bcast::kScalar;
        }
        e.ld = n;
        const Extent opExt = extentOf(src, d[0], d[1], d[1]);
        if (e.bcast == EpiOp::Bcast::kFull && src == c && ldc == n) {
          e.aliasesC = true;
        } else if (overlaps(cExt, opExt)) {
          return invalidArgument("gemm::run: binary operand overlaps c without being c");
        }
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace detail

Status run(const float* a, int64_t m, int64_t lda, const PackedWeights& b, float* c, int64_t ldc,
           const Epilogue& ep, const float* residual, int64_t ldr,
           std::span<const float* const> binaryOperands) {
  if (!available()) return unimplemented("gemm: this CPU has no AVX2+FMA");
  detail::Problem p;
  VF_RETURN_IF_ERROR(detail::resolveProblem(a, m, lda, b.k(), b.n(), c, ldc, ep, residual, ldr, binaryOperands, p));
  if (p.m == 0) return Status::ok();
  p.b = &b;
  p.threads = threadsFor(m, b);
  return activeIsa() == Isa::kAvx512 ? detail::runAvx512(p) : detail::runAvx2(p);
}

// ---- bfloat16 -------------------------------------------------------------------------------------

PackedWeightsBf16::~PackedWeightsBf16() { cpu::freeWeightMemory(data_); }

namespace {
/// float32 -> bf16 bits, round to nearest even; NaN -> 0x7FC0 (c10::BFloat16's conversion).
uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (f != f) return 0x7FC0;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace

StatusOr<std::shared_ptr<const PackedWeightsBf16>> packWeightsBf16(const float* w, int64_t k, int64_t n,
                                                                   WeightOrder order) {
  if (w == nullptr) return invalidArgument("gemm::packWeightsBf16: null weights");
  if (k < 1 || n < 1) {
    return invalidArgument("gemm::packWeightsBf16: k and n must be >= 1, got k=" + std::to_string(k) +
                           " n=" + std::to_string(n));
  }
  const int64_t nPadded = (n + kNR - 1) / kNR * kNR;
  const int64_t kPairs = (k + 1) / 2;
  if (kPairs > (int64_t{1} << 40) / nPadded) return invalidArgument("gemm::packWeightsBf16: too large");
  const size_t elems = static_cast<size_t>(kPairs) * static_cast<size_t>(nPadded) * 2;
  auto* data = static_cast<uint16_t*>(cpu::allocateWeightMemory(elems * 2));
  if (data == nullptr) return internalError("gemm::packWeightsBf16: out of memory");
  for (int64_t j = 0; j < nPadded / kNR; ++j) {
    uint16_t* panel = data + j * kPairs * 32;
    for (int64_t col = 0; col < kNR; ++col) {
      const int64_t nn = j * kNR + col;
      for (int64_t kk = 0; kk < 2 * kPairs; ++kk) {
        float v = 0.f;
        if (nn < n && kk < k) v = order == WeightOrder::kKN ? w[kk * n + nn] : w[nn * k + kk];
        panel[(kk / 2) * 32 + col * 2 + kk % 2] = toBf16(v);
      }
    }
  }
  auto* packed = new (std::nothrow) PackedWeightsBf16(k, n, nPadded, data);
  if (packed == nullptr) {
    cpu::freeWeightMemory(data);
    return internalError("gemm::packWeightsBf16: out of memory");
  }
  try {
    return std::shared_ptr<const PackedWeightsBf16>(packed);
  } catch (const std::bad_alloc&) {
    return internalError("gemm::packWeightsBf16: out of memory");
  }
}

bool availableBf16() { return cpu::hasAvx2Fma(); }

namespace {
std::atomic<int> gMaxBf16Variant{static_cast<int>(Bf16Variant::kAvx512Bf16)};
}  // namespace

Bf16Variant activeBf16Variant() {
  const bool avx512 = gAvx512Allowed.load(std::memory_order_relaxed) && cpu::hasAvx512();
  const int cap = gMaxBf16Variant.load(std::memory_order_relaxed);
  if (avx512 && cpu::hasAvx512Bf16() && cap >= static_cast<int>(Bf16Variant::kAvx512Bf16)) {
    return Bf16Variant::kAvx512Bf16;
  }
  if (avx512 && cap >= static_cast<int>(Bf16Variant::kAvx512Widening)) return Bf16Variant::kAvx512Widening;
  return Bf16Variant::kAvx2Widening;
}

void setMaxBf16Variant(Bf16Variant v) { gMaxBf16Variant.store(static_cast<int>(v), std::memory_order_relaxed); }

bool supportsPostOpBf16(const PostOp& op) {
  if (op.kind == PostOp::Kind::kBinary) return false;
  return supportsPostOp(op);
}

Status runBf16(const uint16_t* a, int64_t m, int64_t lda, const PackedWeightsBf16& b, uint16_t* c,
               int64_t ldc, const Epilogue& ep, const uint16_t* residual, int64_t ldr) {
  if (!availableBf16()) return unimplemented("gemm (bf16): this CPU has no AVX2+FMA");
  const int64_t k = b.k(), n = b.n();
  if (m < 0) return invalidArgument("gemm::runBf16: m < 0");
  if (static_cast<int64_t>(ep.postOps.size()) > detail::kMaxEpiOps) {
    return unimplemented("gemm: more than 16 post-ops");
  }
  for (const PostOp& op : ep.postOps) {
    if (!supportsPostOpBf16(op)) return unimplemented(std::string("gemm (bf16): unsupported post-op"));
  }
  if (m == 0) return Status::ok();
  if (a == nullptr || c == nullptr) return invalidArgument("gemm::runBf16: null a or c");
  if (lda < k) return invalidArgument("gemm::runBf16: lda < k");
  if (ldc < n) return invalidArgument("gemm::runBf16: ldc < n");
  auto extent16 = [](const uint16_t* p, int64_t rows, int64_t cols, int64_t ld) {
    const auto* first = reinterpret_cast<const char*>(p);
    return Extent{first, first + ((rows - 1) * ld + cols) * 2};
  };
  const Extent cExt = extent16(c, m, n, ldc);
  if (overlaps(cExt, extent16(a, m, k, lda))) return invalidArgument("gemm::runBf16: c overlaps a");
  if (ep.bias != nullptr && overlaps(cExt, extentOf(ep.bias, 1, n, n))) {
    return invalidArgument("gemm::runBf16: c overlaps bias");
  }

  detail::ProblemBf16 p;
  p.a = a; p.m = m; p.lda = lda; p.b = &b; p.c = c; p.ldc = ldc; p.bias = ep.bias;
  for (const PostOp& op : ep.postOps) {
    EpiOp& e = p.ops[p.nOps++];
    if (op.kind == PostOp::Kind::kSum) {
      if (residual == nullptr) return invalidArgument("gemm::runBf16: sum post-op without residual");
      if (ldr < n) return invalidArgument("gemm::runBf16: ldr < n");
      if (!(residual == c && ldr == ldc) && overlaps(cExt, extent16(residual, m, n, ldr))) {
        return invalidArgument("gemm::runBf16: residual overlaps c without being c");
      }
      e.kind = EpiOp::Kind::kSum;
      e.alpha = op.scale;
      p.residual = residual;
      p.ldr = ldr;
    } else {
      VF_RETURN_IF_ERROR(resolveEltwise(op, e));
    }
  }
  p.threads = detail::threadsForMacs(m, k, n);
  switch (activeBf16Variant()) {
    case Bf16Variant::kAvx512Bf16: return detail::runBf16Avx512(p);
    case Bf16Variant::kAvx512Widening: return detail::runBf16WideningAvx512(p);
    case Bf16Variant::kAvx2Widening: break;
  }
  return detail::runBf16Avx2(p);
}

}  // namespace verifuse::kernels::gemm
