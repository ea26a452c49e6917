// Micro-benchmark (not a test): verifuse's own GEMM (kernels/src/cpu/gemm*) against oneDNN's
// inner product (kernels::createLinear, packed and borrowed weights) on transformer shapes.
//
//   verifuse_gemm_bench [--threads 1,2] [--samples 40] [--only NAME_SUBSTRING] [--no-onednn]
//                       [--epilogue bias|bias_relu|bias_gelu|bias_sum] [--cpu-time] [--bf16]
//                       [--isa avx2] [--bf16-widening] [--shape MxKxN[,MxKxN...]]
//
// Per (shape, threads): one warm-up call of each kernel, then `samples` rounds; a round times one
// sample of every kernel in turn (interleaved, so a change of machine load hits all of them
// alike); a sample repeats the call until it took >= 2 ms and gives the time per call. Prints the
// median (best sample in brackets) as GFLOP/s (2·M·K·N / t) and GB/s (bytes of weights + input +
// output once per call / t: the memory-bound view for small M), and the bandwidth of a plain
// read of the packed weights with the same threads (the streaming limit).
// --cpu-time: time with the calling thread's CPU clock (1 thread only): preemption by other
// processes is not counted, cache and memory-bandwidth interference still is.
// --bf16: bf16 activations in and out (gemm::runBf16, the variant the CPU has: AVX512-BF16, or the
// widening AVX-512 or AVX2 one; --isa avx2 forces the AVX2 variants of both kernels,
// --bf16-widening a widening variant even with AVX512-BF16), and a last column with
// the own float32 GEMM on the same shape (what the bf16 kernel is measured against on CPUs without
// bf16 instructions). Where oneDNN has no bf16 instructions (e.g. VERIFUSE_MAX_ISA=avx2) its bf16
// inner product is reference code: the oneDNN columns are then its float32 inner product.
// Run it alone (`taskset -c 0` for one thread); quote medians together with `uptime`.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/gemm.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"

namespace {

using namespace verifuse;
using namespace verifuse::kernels;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t m, k, n;
};

const Shape kShapes[] = {
    // the table in the brief (x[M,K]·Wᵀ, W from nn.Linear)
    {"base 128x768x768", 128, 768, 768},
    {"base 128x768x3072", 128, 768, 3072},
    {"base 128x3072x768", 128, 3072, 768},
    {"base 64x512x512", 64, 512, 512},
    {"base 1024x768x3072", 1024, 768, 3072},
    // M=128 targets
    {"m128 128x512x2048", 128, 512, 2048},
    {"m128 128x2048x512", 128, 2048, 512},
    {"m128 128x4096x4096", 128, 4096, 4096},
    {"m128 128x2048x2048", 128, 2048, 2048},
    // GPT-2 small, 64 tokens
    {"gpt2 qkv 64x768x2304", 64, 768, 2304},
    {"gpt2 proj 64x768x768", 64, 768, 768},
    {"gpt2 fc 64x768x3072", 64, 768, 3072},
    {"gpt2 fc2 64x3072x768", 64, 3072, 768},
    // ViT-base, 197 tokens
    {"vit qkv 197x768x2304", 197, 768, 2304},
    {"vit proj 197x768x768", 197, 768, 768},
    {"vit fc 197x768x3072", 197, 768, 3072},
    {"vit fc2 197x3072x768", 197, 3072, 768},
    // Llama-class small (hidden 512, MLP 1408)
    {"llama qkv 128x512x1536", 128, 512, 1536},
    {"llama o 128x512x512", 128, 512, 512},
    {"llama up 128x512x1408", 128, 512, 1408},
    {"llama down 128x1408x512", 128, 1408, 512},
    {"llama up 64x512x1408", 64, 512, 1408},
    {"llama down 64x1408x512", 64, 1408, 512},
    // decode steps: memory-bound on the weights
    {"decode 1x768x768", 1, 768, 768},
    {"decode 1x768x3072", 1, 768, 3072},
    {"decode 1x3072x768", 1, 3072, 768},
    {"decode 1x4096x4096", 1, 4096, 4096},
    {"decode 8x768x3072", 8, 768, 3072},
    {"decode 8x4096x4096", 8, 4096, 4096},
    {"decode 1x512x1408", 1, 512, 1408},
    {"decode 8x1408x512", 8, 1408, 512},
    // Whisper-tiny/base encoder (1500 frames), ConvNeXt-tiny's pointwise MLPs (56², 28², 14², 7²)
    {"whisper qkv 1500x384x384", 1500, 384, 384},
    {"whisper fc 1500x384x1536", 1500, 384, 1536},
    {"whisper fc2 1500x1536x384", 1500, 1536, 384},
    // Llama lm_head over a b8 x 128-token prompt: an output (131 MB) far bigger than the caches.
    {"lm_head 1024x512x32000", 1024, 512, 32000},
    {"t5 b8 qkv 1024x512x1536", 1024, 512, 1536},
    {"t5 b8 o 1024x512x512", 1024, 512, 512},
    {"t5 b8 wi 1024x512x2048", 1024, 512, 2048},
    {"t5 b8 wo 1024x2048x512", 1024, 2048, 512},
    {"vit b8 qkv 1576x768x2304", 1576, 768, 2304},
    {"vit b8 fc 1576x768x3072", 1576, 768, 3072},
    {"vit b8 fc2 1576x3072x768", 1576, 3072, 768},
    {"convnext s1 fc 3136x96x384", 3136, 96, 384},
    {"convnext s1 fc2 3136x384x96", 3136, 384, 96},
    {"convnext s2 fc 784x192x768", 784, 192, 768},
    {"convnext s3 fc 196x384x1536", 196, 384, 1536},
    {"convnext s4 fc2 49x3072x768", 49, 3072, 768},
};

struct Result {
  double median = 0, min = 0;  // seconds per call
};

bool gCpuTime = false;

double now() {
  if (gCpuTime) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

/// Times every call in \p calls, interleaved round by round (see the file comment).
std::vector<Result> timeInterleaved(const std::vector<std::function<void()>>& calls, int samples) {
  std::vector<int> reps(calls.size(), 1);
  for (size_t c = 0; c < calls.size(); ++c) {
    calls[c]();  // warm-up (and first touch of any scratch)
    for (;;) {
      const double t0 = now();
      for (int r = 0; r < reps[c]; ++r) calls[c]();
      if (now() - t0 >= 2e-3 || reps[c] >= (1 << 20)) break;
      reps[c] *= 2;
    }
  }
  std::vector<std::vector<double>> t(calls.size());
  for (int s = 0; s < samples; ++s) {
    for (size_t c = 0; c < calls.size(); ++c) {
      const double t0 = now();
      for (int r = 0; r < reps[c]; ++r) calls[c]();
      t[c].push_back((now() - t0) / reps[c]);
    }
  }
  std::vector<Result> out;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    out.push_back({v[v.size() / 2], v.front()});
  }
  return out;
}

std::vector<int> parseInts(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

/// Reads \p bytes at \p p once (8 independent AVX2 sums): the memory-bandwidth reference for the
/// memory-bound shapes (the same bytes the kernel streams: the packed weights).
__attribute__((target("avx2"))) float readAll(const float* p, size_t bytes) {
  __m256 acc[8];
  for (auto& v : acc) v = _mm256_setzero_ps();
  const size_t n = bytes / sizeof(float);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(p + i + 8 * j));
  }
  __m256 s = acc[0];
  for (int j = 1; j < 8; ++j) s = _mm256_add_ps(s, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  float r = 0;
  for (float v : out) r += v;
  for (; i < n; ++i) r += p[i];
  return r;
}

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void die(const Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int samples = 40;
  std::string only;
  bool onednn = true;
  std::string epi = "bias";
  bool bf16 = false;
  std::vector<Shape> custom;  // --shape: these instead of the built-in list
  std::vector<std::string> customNames;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = parseInts(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--no-onednn") onednn = false;
    else if (a == "--epilogue" && i + 1 < argc) epi = argv[++i];
    else if (a == "--cpu-time") gCpuTime = true;
    else if (a == "--bf16") bf16 = true;
    else if (a == "--isa" && i + 1 < argc && std::string(argv[i + 1]) == "avx2") {
      gemm::setMaxIsa(gemm::Isa::kAvx2);
      ++i;
    } else if (a == "--bf16-widening") {
      gemm::setMaxBf16Variant(gemm::Bf16Variant::kAvx512Widening);
    }
    else if (a == "--shape" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at < list.size();) {
        const size_t end = std::min(list.find(',', at), list.size());
        customNames.push_back(list.substr(at, end - at));
        at = end + 1;
      }
    }
    else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--samples N] [--only SUBSTR] [--no-onednn] "
                   "[--epilogue bias|bias_relu|bias_gelu|bias_sum] [--cpu-time] [--bf16] [--isa avx2] "
                   "[--bf16-widening] [--shape MxKxN[,MxKxN...]]\n", argv[0]);
      return 2;
    }
  }
  for (const std::string& name : customNames) {
    long long m = 0, k = 0, n = 0;
    if (std::sscanf(name.c_str(), "%lldx%lldx%lld", &m, &k, &n) != 3 || m <= 0 || k <= 0 || n <= 0) {
      std::fprintf(stderr, "--shape wants MxKxN, got '%s'\n", name.c_str());
      return 2;
    }
    custom.push_back({name.c_str(), m, k, n});
  }
  if (!gemm::available()) {
    std::fprintf(stderr, "no AVX2+FMA on this CPU\n");
    return 1;
  }
  if (gCpuTime && (threads.size() != 1 || threads[0] != 1)) {
    std::fprintf(stderr, "--cpu-time needs --threads 1\n");
    return 2;
  }
  if (bf16 && !gemm::availableBf16()) {
    std::fprintf(stderr, "no AVX2+FMA on this CPU\n");
    return 1;
  }
  // oneDNN's bf16 inner product only where it has bf16 instructions (else: its float32 one).
  const bool onednnBf16 = bf16 && capabilities().onednnNativeBf16();
  std::printf("# verifuse_gemm_bench: epilogue=%s samples=%d clock=%s dtype=%s%s%s; own f32 %s; GFLOP/s and "
              "GB/s at the median [GFLOP/s of the best sample]\n",
              epi.c_str(), samples, gCpuTime ? "thread-cpu" : "wall", bf16 ? "bf16" : "f32",
              !bf16 ? ""
              : gemm::activeBf16Variant() == gemm::Bf16Variant::kAvx512Bf16    ? " (own: avx512_bf16"
              : gemm::activeBf16Variant() == gemm::Bf16Variant::kAvx512Widening ? " (own: avx512 widening"
                                                                                : " (own: avx2 widening",
              !bf16 ? "" : onednnBf16 ? ", oneDNN bf16)" : ", oneDNN f32)",
              gemm::activeIsa() == gemm::Isa::kAvx512 ? "avx512" : "avx2");
  std::printf("%-26s %3s | %-22s | %-22s | %-22s | %-9s | %-9s%s\n", "shape M,K,N", "thr",
              "verifuse GFLOP/s  GB/s", "oneDNN packed", "oneDNN borrowed", "read GB/s",
              "max|diff|", bf16 ? " | own f32 GFLOP/s GB/s" : "");

  volatile float sink = 0;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (const Shape& s : custom.empty() ? std::vector<Shape>(std::begin(kShapes), std::end(kShapes)) : custom) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    std::vector<float> x(s.m * s.k), w(s.n * s.k), bias(s.n), residual(s.m * s.n);
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng) * 0.05f;
    for (float& v : bias) v = dist(rng);
    for (float& v : residual) v = dist(rng);
    std::vector<float> y(s.m * s.n), yRef(s.m * s.n);

    auto packed = gemm::packWeights(w.data(), s.k, s.n, gemm::WeightOrder::kNK);
    if (!packed.isOk()) die(packed.status(), "packWeights");
    // --bf16: bf16 activations in and out, weights rounded to bf16 by each side's packing.
    std::shared_ptr<const gemm::PackedWeightsBf16> packedBf16;
    std::vector<uint16_t> xb(x.size()), yb(y.size()), yRefb(y.size()), residualb(y.size());
    if (bf16) {
      auto pb = gemm::packWeightsBf16(w.data(), s.k, s.n, gemm::WeightOrder::kNK);
      if (!pb.isOk()) die(pb.status(), "packWeightsBf16");
      packedBf16 = pb.value();
      for (size_t i = 0; i < x.size(); ++i) xb[i] = toBf16(x[i]);
      for (size_t i = 0; i < y.size(); ++i) residualb[i] = toBf16(residual[i]);
    }
    gemm::Epilogue ep;
    ep.bias = bias.data();
    std::vector<PostOp> postOps;
    if (epi == "bias_relu") {
      PostOp r;
      r.kind = PostOp::Kind::kEltwise;
      r.act = Activation::kRelu;
      postOps.push_back(r);
    } else if (epi == "bias_gelu") {
      PostOp r;
      r.kind = PostOp::Kind::kEltwise;
      r.act = Activation::kGeluErf;
      postOps.push_back(r);
    } else if (epi == "bias_sum") {
      PostOp r;
      r.kind = PostOp::Kind::kSum;
      r.scale = 1.f;
      postOps.push_back(r);
    }
    ep.postOps = postOps;
    const bool sum = epi == "bias_sum";

    const double flops = 2.0 * s.m * s.k * s.n;
    const double bytes = (bf16 ? 2.0 : 4.0) * (static_cast<double>(s.k) * s.n + s.m * s.k + s.m * s.n);
    const gemm::PackedWeights& pw = *packed.value();
    for (int t : threads) {
      omp_set_num_threads(t);
      // NOTE: created after omp_set_num_threads: oneDNN fixes its thread count when the primitive
      // is created (a primitive made under 2 threads keeps using 2 when the caller asks for 1).
      std::unique_ptr<Kernel> dnnlPacked, dnnlBorrowed;
      if (onednn) {
        LinearParams lp;
        lp.m = s.m; lp.k = s.k; lp.n = s.n;
        lp.weights = w.data();
        lp.bias = bias.data();
        lp.postOps = postOps;
        if (onednnBf16) {
          lp.compute = ComputeType::kBF16;
          lp.io = DataType::kBF16;
        }
        auto kp = createLinear(lp);
        if (!kp.isOk()) die(kp.status(), "createLinear");
        dnnlPacked = std::move(kp.value());
        lp.borrowWeights = true;
        auto kb = createLinear(lp);
        if (!kb.isOk()) die(kb.status(), "createLinear(borrow)");
        dnnlBorrowed = std::move(kb.value());
      }

      std::vector<std::function<void()>> calls;
      calls.push_back([&] {
        if (bf16) {
          if (sum) std::memcpy(yb.data(), residualb.data(), yb.size() * 2);
          Status st = gemm::runBf16(xb.data(), s.m, s.k, *packedBf16, yb.data(), s.n, ep,
                                    sum ? yb.data() : nullptr, s.n);
          if (!st.isOk()) die(st, "gemm::runBf16");
          return;
        }
        if (sum) std::memcpy(y.data(), residual.data(), y.size() * 4);
        Status st = gemm::run(x.data(), s.m, s.k, pw, y.data(), s.n, ep, sum ? y.data() : nullptr,
                              s.n);
        if (!st.isOk()) die(st, "gemm::run");
      });
      // Plain read of the packed weights with the same threads: what streaming them can reach.
      calls.push_back([&] {
        float part = 0;
#pragma omp parallel for reduction(+ : part) num_threads(t)
        for (int q = 0; q < t; ++q) {
          const size_t chunk = pw.bytes() / t / 64 * 64;
          part += readAll(pw.data() + q * chunk / 4, q == t - 1 ? pw.bytes() - q * chunk : chunk);
        }
        sink = sink + part;
      });
      for (const Kernel* kern : {dnnlPacked.get(), dnnlBorrowed.get()}) {
        if (kern == nullptr) continue;
        calls.push_back([&, kern] {
          if (onednnBf16) {
            if (sum) std::memcpy(yRefb.data(), residualb.data(), yRefb.size() * 2);
            Status st = kern->execute({xb.data()}, yRefb.data());
            if (!st.isOk()) die(st, "onednn execute");
            return;
          }
          if (sum) std::memcpy(yRef.data(), residual.data(), yRef.size() * 4);
          Status st = kern->execute({x.data()}, yRef.data());
          if (!st.isOk()) die(st, "onednn execute");
        });
      }
      // --bf16: the own float32 GEMM on the same shape, last.
      const size_t f32Call = calls.size();
      if (bf16) {
        calls.push_back([&] {
          if (sum) std::memcpy(y.data(), residual.data(), y.size() * 4);
          Status st = gemm::run(x.data(), s.m, s.k, pw, y.data(), s.n, ep, sum ? y.data() : nullptr, s.n);
          if (!st.isOk()) die(st, "gemm::run");
        });
      }
      const std::vector<Result> r = timeInterleaved(calls, samples);
      char cell[3][64] = {"-", "-", "-"};
      const int cellOf[] = {0, -1, 1, 2};
      for (size_t c = 0; c < r.size() && c < f32Call; ++c) {
        if (cellOf[c] < 0) continue;
        std::snprintf(cell[cellOf[c]], sizeof cell[0], "%6.1f %6.1f [%5.1f]", flops / r[c].median / 1e9,
                      bytes / r[c].median / 1e9, flops / r[c].min / 1e9);
      }
      char readCell[32];
      std::snprintf(readCell, sizeof readCell, "%6.1f", pw.bytes() / r[1].median / 1e9);
      char f32Cell[64] = "";
      if (bf16) {
        const double f32Bytes = 4.0 * (static_cast<double>(s.k) * s.n + s.m * s.k + s.m * s.n);
        std::snprintf(f32Cell, sizeof f32Cell, " | %6.1f %6.1f [%5.1f]", flops / r[f32Call].median / 1e9,
                      f32Bytes / r[f32Call].median / 1e9, flops / r[f32Call].min / 1e9);
      }
      double maxDiff = 0;
      if (onednn) {
        calls[0]();
        calls[2]();
        if (bf16) {
          for (size_t i = 0; i < y.size(); ++i) {
            y[i] = fromBf16(yb[i]);
            if (onednnBf16) yRef[i] = fromBf16(yRefb[i]);
          }
        }
        for (size_t i = 0; i < y.size(); ++i) {
          maxDiff = std::max<double>(maxDiff, std::fabs(y[i] - yRef[i]));
        }
      }
      std::printf("%-26s %3d | %-22s | %-22s | %-22s | %-9s | %-9.2g%s\n", s.name, t, cell[0], cell[1],
                  cell[2], readCell, maxDiff, f32Cell);
      std::fflush(stdout);
    }
  }
  return 0;
}
