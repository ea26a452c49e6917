// MKL's packed sgemm as a second float32 GEMM for linears (gemm.h, "MKL's packed sgemm"): finding
// MKL's CBLAS entry points in the process, the tier check, packing, and the call. The epilogue is
// run()'s, applied afterwards (gemm_mkl_avx2.cpp). Baseline ISA: MKL dispatches its own kernels.
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <new>
#include <string>

#include "cpu/gemm_internal.h"
#include "cpu/weight_memory.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/gemm.h"

namespace verifuse::kernels::gemm {
namespace {

// CBLAS constants (mkl_cblas.h), LP64 interface (MKL_INT = int): torch's MKL exports these.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112, kPacked = 151, kBMatrix = 162;

using PackGetSizeFn = size_t (*)(int identifier, int m, int n, int k);
using PackFn = void (*)(int layout, int identifier, int trans, int m, int n, int k, float alpha, const float* src,
                        int ld, float* dest);
using ComputeFn = void (*)(int layout, int transa, int transb, int m, int n, int k, const float* a, int lda,
                           const float* b, int ldb, float beta, float* c, int ldc);

struct Mkl {
  PackGetSizeFn packGetSize = nullptr;
  PackFn pack = nullptr;
  ComputeFn compute = nullptr;
  std::string unavailable;  // why not, "" when usable
};

/// A symbol of the process: global scope first, then torch's libtorch_cpu if it is loaded (torch's
/// Python module loads it with local scope, so RTLD_DEFAULT alone does not see it there).
void* findSymbol(const char* name) {
  if (void* f = dlsym(RTLD_DEFAULT, name)) return f;
  for (const char* lib : {"libtorch_cpu.so", "libmkl_rt.so.2", "libmkl_rt.so"}) {
    void* handle = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* f = dlsym(handle, name);
    dlclose(handle);  // NOLOAD took a reference; the library stays loaded by its first opener
    if (f != nullptr) return f;
  }
  return nullptr;
}

/// MKL may run only code of the tier verifuse runs as. MKL picks its code path from the CPU and
/// MKL_ENABLE_INSTRUCTIONS, read when it starts (before verifuse could set it): below a CPU's
/// AVX-512 tier, MKL is held there only when that variable says AVX2 or lower.
std::string tierProblem() {
  const cpu::CpuCapabilities& caps = cpu::capabilities();
  if (!caps.usable.avx2Fma()) return "the tier has no AVX2+FMA (the epilogue's code)";
  if (caps.usable.avx512() || !caps.detected.avx512()) return "";
  const char* env = std::getenv("MKL_ENABLE_INSTRUCTIONS");
  std::string v = env ? env : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::toupper(ch); });
  if (v == "AVX2" || v == "AVX" || v == "SSE4_2") return "";
  return std::string("the tier is ") + cpu::tierName(caps.tier) +
         " on an AVX-512 CPU and MKL_ENABLE_INSTRUCTIONS does not cap MKL to AVX2";
}

const Mkl& mkl() {
  static const Mkl m = [] {
    Mkl r;
    r.packGetSize = reinterpret_cast<PackGetSizeFn>(findSymbol("cblas_sgemm_pack_get_size"));
    r.pack = reinterpret_cast<PackFn>(findSymbol("cblas_sgemm_pack"));
    r.compute = reinterpret_cast<ComputeFn>(findSymbol("cblas_sgemm_compute"));
    if (r.packGetSize == nullptr || r.pack == nullptr || r.compute == nullptr) {
      r.unavailable = "MKL's cblas_sgemm_pack/compute are not in this process (torch's libtorch_cpu exports them)";
    } else {
      r.unavailable = tierProblem();
    }
    return r;
  }();
  return m;
}

constexpr int64_t kIntMax = 0x7fffffff;

}  // namespace

MklPackedWeights::~MklPackedWeights() { cpu::freeWeightMemory(data_); }

bool mklAvailable() { return mkl().unavailable.empty(); }

const std::string& mklUnavailableReason() { return mkl().unavailable; }

StatusOr<std::shared_ptr<const MklPackedWeights>> packWeightsMkl(const float* w, int64_t k, int64_t n,
                                                                 WeightOrder order, int64_t m) {
  if (!mklAvailable()) return unimplemented("gemm: MKL: " + mklUnavailableReason());
  if (w == nullptr) return invalidArgument("gemm::packWeightsMkl: null weights");
  if (k < 1 || n < 1 || m < 1 || k > kIntMax || n > kIntMax || m > kIntMax) {
    return invalidArgument("gemm::packWeightsMkl: m, k and n must be in [1, 2^31), got m=" + std::to_string(m) +
                           " k=" + std::to_string(k) + " n=" + std::to_string(n));
  }
  const Mkl& l = mkl();
  const int mi = static_cast<int>(m), ki = static_cast<int>(k), ni = static_cast<int>(n);
  const size_t bytes = l.packGetSize(kBMatrix, mi, ni, ki);
  if (bytes == 0) return internalError("gemm::packWeightsMkl: MKL gave no packed size");
  auto* data = static_cast<float*>(cpu::allocateWeightMemory(bytes));
  if (data == nullptr) return internalError("gemm::packWeightsMkl: out of memory");
  // B = Wᵀ for nn.Linear's [N, K] (transposed, ld K); [K, N] is B itself (ld N).
  if (order == WeightOrder::kNK) {
    l.pack(kRowMajor, kBMatrix, kTrans, mi, ni, ki, 1.0f, w, ki, data);
  } else {
    l.pack(kRowMajor, kBMatrix, kNoTrans, mi, ni, ki, 1.0f, w, ni, data);
  }
  auto* packed = new (std::nothrow) MklPackedWeights(k, n, m, bytes, data);
  if (packed == nullptr) {
    cpu::freeWeightMemory(data);
    return internalError("gemm::packWeightsMkl: out of memory");
  }
  try {
    return std::shared_ptr<const MklPackedWeights>(packed);
  } catch (const std::bad_alloc&) {
    return internalError("gemm::packWeightsMkl: out of memory");
  }
}

Status runMkl(const float* a, int64_t m, int64_t lda, const MklPackedWeights& b, float* c, int64_t ldc,
              const Epilogue& ep, const float* residual, int64_t ldr,
              std::span<const float* const> binaryOperands) {
  if (!mklAvailable()) return unimplemented("gemm: MKL: " + mklUnavailableReason());
  detail::Problem p;
  VF_RETURN_IF_ERROR(
      detail::resolveProblem(a, m, lda, b.k(), b.n(), c, ldc, ep, residual, ldr, binaryOperands, p));
  if (p.m == 0) return Status::ok();
  if (m != b.m()) {
    return unimplemented("gemm::runMkl: weights packed for " + std::to_string(b.m()) + " rows, called with " +
                         std::to_string(m));
  }
  if (lda > kIntMax || ldc > kIntMax) return invalidArgument("gemm::runMkl: row stride >= 2^31");
  p.threads = detail::threadsForMacs(m, b.k(), b.n());
  // An operand that is c itself (the in-place residual add) must be read before MKL overwrites
  // c: the product goes to scratch and the epilogue writes c from it.
  bool readsC = false;
  for (int o = 0; o < p.nOps; ++o) readsC = readsC || p.ops[o].aliasesC;
  float* product = c;
  int64_t ldp = ldc;
  float* scratch = nullptr;
  if (readsC) {
    scratch = detail::productScratchAvx2(static_cast<size_t>(m * b.n()));
    if (scratch == nullptr) return internalError("gemm::runMkl: out of scratch memory");
    product = scratch;
    ldp = b.n();
  }
  mkl().compute(kRowMajor, kNoTrans, kPacked, static_cast<int>(m), static_cast<int>(b.n()), static_cast<int>(b.k()),
                a, static_cast<int>(lda), b.data_, static_cast<int>(b.n()), 0.0f, product, static_cast<int>(ldp));
  if (readsC || p.bias != nullptr || p.nOps > 0) detail::finishInPlaceAvx2(p, scratch);
  return Status::ok();
}

}  // namespace verifuse::kernels::gemm
