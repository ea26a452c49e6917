// Micro-benchmark (not a test): verifuse's widening int8 kernel (kernels/int8_widening.h) against
// oneDNN's float32 convolution / inner product and oneDNN's own int8 kernel (createInt8Unprobed)
// on ResNet-50's convolutions, MobileNetV2's depthwise convolutions and BERT-base's linears,
// batch 1.
//
//   ONEDNN_MAX_CPU_ISA=AVX2 verifuse_int8_bench [--threads 1,2] [--samples 15] [--only SUBSTR]
//                                             [--dst u8|f32] [--cpu-time] [--no-onednn] [--no-ceilings]
//
// Run oneDNN capped to AVX2 (the variable above): the float32 comparison is then oneDNN's AVX2
// kernel, and its int8 kernel the vpmaddubsw one this kernel replaces (whose codes differ from
// the exact ones wherever an s16 pair sum saturated: the last column counts them).
// Layouts: channels-last src and dst for every convolution (oneDNN's fastest plain layout and
// what the runtime asks for), [M, K] row-major for the linears. Epilogue: bias + ReLU (ResNet),
// bias + ReLU6 as clamp (MobileNetV2), bias (BERT); int8 outputs requantized to --dst.
// Per (shape, threads): one warm-up call of each kernel, then `samples` rounds; a round times one
// sample of every kernel in turn (interleaved, so a change of machine load hits all alike); a
// sample repeats the call until it took >= 5 ms. Prints the median GOP/s (2 * multiply-adds / t)
// and the ratios. --cpu-time: the calling thread's CPU clock (1 thread only). First and last, the
// ceilings of the moment (vpmaddwd + vpaddd and FMA loops on registers; --no-ceilings skips them).
// NOTE: the machine is shared: wrap runs in `flock /tmp/verifuse-bench.lock ...`.
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
#include "verifuse/kernels/int8.h"
#include "verifuse/kernels/int8_widening.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"

namespace {

using namespace verifuse;
using namespace verifuse::kernels;
using Clock = std::chrono::steady_clock;

enum class Kind { kConv, kDepthwise, kLinear };

struct Shape {
  const char* name;
  Kind kind;
  int64_t c, h, w, o, k, stride;  ///< conv: C, H, W -> O, k x k, stride (pad k / 2); linear: M = h, K = c, N = o
};

const Shape kShapes[] = {
    // ResNet-50 (torchvision v1.5: the stride sits on the 3x3), batch 1, 224 x 224.
    {"r50 stem 7x7/2 3->64 @224", Kind::kConv, 3, 224, 224, 64, 7, 2},
    {"r50 s1 1x1 64->64 @56", Kind::kConv, 64, 56, 56, 64, 1, 1},
    {"r50 s1 3x3 64->64 @56", Kind::kConv, 64, 56, 56, 64, 3, 1},
    {"r50 s1 1x1 64->256 @56", Kind::kConv, 64, 56, 56, 256, 1, 1},
    {"r50 s1 1x1 256->64 @56", Kind::kConv, 256, 56, 56, 64, 1, 1},
    {"r50 s2 1x1 256->128 @56", Kind::kConv, 256, 56, 56, 128, 1, 1},
    {"r50 s2 3x3/2 128 @56->28", Kind::kConv, 128, 56, 56, 128, 3, 2},
    {"r50 s2 1x1/2 256->512 @56", Kind::kConv, 256, 56, 56, 512, 1, 2},
    {"r50 s2 3x3 128->128 @28", Kind::kConv, 128, 28, 28, 128, 3, 1},
    {"r50 s2 1x1 128->512 @28", Kind::kConv, 128, 28, 28, 512, 1, 1},
    {"r50 s2 1x1 512->128 @28", Kind::kConv, 512, 28, 28, 128, 1, 1},
    {"r50 s3 1x1 512->256 @28", Kind::kConv, 512, 28, 28, 256, 1, 1},
    {"r50 s3 3x3/2 256 @28->14", Kind::kConv, 256, 28, 28, 256, 3, 2},
    {"r50 s3 1x1/2 512->1024 @28", Kind::kConv, 512, 28, 28, 1024, 1, 2},
    {"r50 s3 3x3 256->256 @14", Kind::kConv, 256, 14, 14, 256, 3, 1},
    {"r50 s3 1x1 256->1024 @14", Kind::kConv, 256, 14, 14, 1024, 1, 1},
    {"r50 s3 1x1 1024->256 @14", Kind::kConv, 1024, 14, 14, 256, 1, 1},
    {"r50 s4 1x1 1024->512 @14", Kind::kConv, 1024, 14, 14, 512, 1, 1},
    {"r50 s4 3x3/2 512 @14->7", Kind::kConv, 512, 14, 14, 512, 3, 2},
    {"r50 s4 1x1/2 1024->2048 @14", Kind::kConv, 1024, 14, 14, 2048, 1, 2},
    {"r50 s4 3x3 512->512 @7", Kind::kConv, 512, 7, 7, 512, 3, 1},
    {"r50 s4 1x1 512->2048 @7", Kind::kConv, 512, 7, 7, 2048, 1, 1},
    {"r50 s4 1x1 2048->512 @7", Kind::kConv, 2048, 7, 7, 512, 1, 1},
    // MobileNetV2's depthwise 3x3 (stride 1, pad 1).
    {"mnv2 dw 3x3 32 @112", Kind::kDepthwise, 32, 112, 112, 32, 3, 1},
    {"mnv2 dw 3x3 144 @56", Kind::kDepthwise, 144, 56, 56, 144, 3, 1},
    {"mnv2 dw 3x3 192 @28", Kind::kDepthwise, 192, 28, 28, 192, 3, 1},
    {"mnv2 dw 3x3 576 @14", Kind::kDepthwise, 576, 14, 14, 576, 3, 1},
    {"mnv2 dw 3x3 960 @7", Kind::kDepthwise, 960, 7, 7, 960, 3, 1},
    // BERT-base, 128 tokens: M x K -> N.
    {"bert 128x768->768", Kind::kLinear, 768, 128, 1, 768, 1, 1},
    {"bert 128x768->3072", Kind::kLinear, 768, 128, 1, 3072, 1, 1},
    {"bert 128x3072->768", Kind::kLinear, 3072, 128, 1, 768, 1, 1},
};

bool gCpuTime = false;

double now() {
  if (gCpuTime) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

/// Median seconds per call of each of \p calls, interleaved round by round (see the file comment).
std::vector<double> timeInterleaved(const std::vector<std::function<void()>>& calls, int samples) {
  std::vector<int> reps(calls.size(), 1);
  for (size_t c = 0; c < calls.size(); ++c) {
    calls[c]();  // warm-up (first touch of scratch, oneDNN's lazy state)
    for (;;) {
      const double t0 = now();
      for (int r = 0; r < reps[c]; ++r) calls[c]();
      if (now() - t0 >= 5e-3 || reps[c] >= (1 << 20)) break;
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
  std::vector<double> out;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    out.push_back(v[v.size() / 2]);
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

// The ceilings at the moment of the run (the machine is shared): independent accumulators with
// their operands in registers (10 for vpmaddwd: its two temporaries and three operands take the
// other 5 ymm registers; 12 for the FMA, as the float32 GEMM's 6x16 tiles). vpmaddwd + vpaddd: 16
// multiply-adds per two instructions; an FMA: 8 in one. GOP/s (2 ops per multiply-add).
__attribute__((target("avx2,fma"), noinline)) double maddCeiling(int64_t steps) {
  __m256i c[10];
  for (auto& v : c) v = _mm256_setzero_si256();
  __m256i a = _mm256_set1_epi16(3), b0 = _mm256_set1_epi16(5), b1 = _mm256_set1_epi16(7);
  const double t0 = now();
  for (int64_t k = 0; k < steps; ++k) {
    asm volatile(
        "vpmaddwd %[b0], %[a], %%ymm14\n\tvpaddd %%ymm14, %[c0], %[c0]\n\tvpmaddwd %[b1], %[a], %%ymm15\n\tvpaddd %%ymm15, %[c1], %[c1]\n\t"
        "vpmaddwd %[b0], %[a], %%ymm14\n\tvpaddd %%ymm14, %[c2], %[c2]\n\tvpmaddwd %[b1], %[a], %%ymm15\n\tvpaddd %%ymm15, %[c3], %[c3]\n\t"
        "vpmaddwd %[b0], %[a], %%ymm14\n\tvpaddd %%ymm14, %[c4], %[c4]\n\tvpmaddwd %[b1], %[a], %%ymm15\n\tvpaddd %%ymm15, %[c5], %[c5]\n\t"
        "vpmaddwd %[b0], %[a], %%ymm14\n\tvpaddd %%ymm14, %[c6], %[c6]\n\tvpmaddwd %[b1], %[a], %%ymm15\n\tvpaddd %%ymm15, %[c7], %[c7]\n\t"
        "vpmaddwd %[b0], %[a], %%ymm14\n\tvpaddd %%ymm14, %[c8], %[c8]\n\tvpmaddwd %[b1], %[a], %%ymm15\n\tvpaddd %%ymm15, %[c9], %[c9]"
        : [c0] "+x"(c[0]), [c1] "+x"(c[1]), [c2] "+x"(c[2]), [c3] "+x"(c[3]), [c4] "+x"(c[4]), [c5] "+x"(c[5]),
          [c6] "+x"(c[6]), [c7] "+x"(c[7]), [c8] "+x"(c[8]), [c9] "+x"(c[9])
        : [a] "x"(a), [b0] "x"(b0), [b1] "x"(b1)
        : "xmm14", "xmm15");
  }
  const double t = now() - t0;
  volatile int sink = _mm256_extract_epi32(c[0], 0) + _mm256_extract_epi32(c[9], 0);
  (void)sink;
  return 2.0 * 10 * 16 * static_cast<double>(steps) / t / 1e9;
}

__attribute__((target("avx2,fma"), noinline)) double fmaCeiling(int64_t steps) {
  __m256 c[12];
  for (auto& v : c) v = _mm256_setzero_ps();
  __m256 a = _mm256_set1_ps(1e-9f), b0 = _mm256_set1_ps(1e-9f), b1 = _mm256_set1_ps(2e-9f);
  const double t0 = now();
  for (int64_t k = 0; k < steps; ++k) {
    asm volatile(
        "vfmadd231ps %[b0], %[a], %[c0]\n\tvfmadd231ps %[b1], %[a], %[c1]\n\tvfmadd231ps %[b0], %[a], %[c2]\n\t"
        "vfmadd231ps %[b1], %[a], %[c3]\n\tvfmadd231ps %[b0], %[a], %[c4]\n\tvfmadd231ps %[b1], %[a], %[c5]\n\t"
        "vfmadd231ps %[b0], %[a], %[c6]\n\tvfmadd231ps %[b1], %[a], %[c7]\n\tvfmadd231ps %[b0], %[a], %[c8]\n\t"
        "vfmadd231ps %[b1], %[a], %[c9]\n\tvfmadd231ps %[b0], %[a], %[c10]\n\tvfmadd231ps %[b1], %[a], %[c11]"
        : [c0] "+x"(c[0]), [c1] "+x"(c[1]), [c2] "+x"(c[2]), [c3] "+x"(c[3]), [c4] "+x"(c[4]), [c5] "+x"(c[5]),
          [c6] "+x"(c[6]), [c7] "+x"(c[7]), [c8] "+x"(c[8]), [c9] "+x"(c[9]), [c10] "+x"(c[10]), [c11] "+x"(c[11])
        : [a] "x"(a), [b0] "x"(b0), [b1] "x"(b1));
  }
  const double t = now() - t0;
  volatile float sink = _mm256_cvtss_f32(c[0]) + _mm256_cvtss_f32(c[11]);
  (void)sink;
  return 2.0 * 12 * 8 * static_cast<double>(steps) / t / 1e9;
}

/// Median of 7 alternated runs of each ceiling (about 0.1 s each).
void printCeilings() {
  std::vector<double> m, f;
  for (int i = 0; i < 7; ++i) {
    m.push_back(maddCeiling(20'000'000));
    f.push_back(fmaCeiling(20'000'000));
  }
  std::sort(m.begin(), m.end());
  std::sort(f.begin(), f.end());
  std::printf("# ceilings on this core now (operands in registers): vpmaddwd+vpaddd %.1f GOP/s, "
              "FMA %.1f GFLOP/s (ratio %.2f)\n", m[3], f[3], m[3] / f[3]);
}

[[noreturn]] void die(const Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads = {1, 2};
  int samples = 15;
  std::string only;
  bool onednn = true, ceilings = true;
  Int8Type dstType = Int8Type::kU8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = parseInts(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--no-onednn") onednn = false;
    else if (a == "--no-ceilings") ceilings = false;
    else if (a == "--cpu-time") gCpuTime = true;
    else if (a == "--dst" && i + 1 < argc) {
      const std::string d = argv[++i];
      dstType = d == "f32" ? Int8Type::kF32 : Int8Type::kU8;
    } else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--samples N] [--only SUBSTR] [--dst u8|f32] [--cpu-time] "
                   "[--no-onednn] [--no-ceilings]\n", argv[0]);
      return 2;
    }
  }
  if (!int8WideningAvailable()) {
    std::fprintf(stderr, "no AVX2+FMA on this CPU\n");
    return 1;
  }
  if (gCpuTime && (threads.size() != 1 || threads[0] != 1)) {
    std::fprintf(stderr, "--cpu-time needs --threads 1\n");
    return 2;
  }
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  std::printf("# verifuse_int8_bench: %s; ONEDNN_MAX_CPU_ISA=%s; dst %s; samples %d; clock %s; GOP/s = 2 * MACs / "
              "median time\n",
              capabilities().summary().c_str(), cap != nullptr ? cap : "(unset)", dstType == Int8Type::kU8 ? "u8" : "f32",
              samples, gCpuTime ? "thread-cpu" : "wall");
  std::printf("%-30s %3s | %9s %9s %9s | %8s %8s | %-28s | %-26s | %s\n", "shape", "thr", "own", "dnn f32", "dnn int8",
              "own/f32", "own/int8", "own impl", "oneDNN int8 impl", "codes != own");

  if (ceilings) printCeilings();
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> codeDist(0, 255), weightDist(-127, 127);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const Shape& s : kShapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    const bool conv = s.kind != Kind::kLinear, dw = s.kind == Kind::kDepthwise;
    const int64_t cg = dw ? 1 : s.c, pad = s.k / 2;
    const int64_t oh = conv ? (s.h + 2 * pad - s.k) / s.stride + 1 : s.h, ow = conv ? (s.w + 2 * pad - s.k) / s.stride + 1 : 1;
    const int64_t kVolume = cg * s.k * s.k;
    const double macs = static_cast<double>(oh * ow) * static_cast<double>(s.o) * static_cast<double>(kVolume);

    // Codes around a zero point of 128 (ReLU outputs would sit at 0: the same work), weights
    // with per-channel scales, f32 twins for oneDNN's float kernels.
    const int64_t srcNumel = conv ? s.c * s.h * s.w : s.h * s.c;
    std::vector<uint8_t> src(static_cast<size_t>(srcNumel));
    for (auto& v : src) v = static_cast<uint8_t>(codeDist(rng));
    std::vector<int8_t> w(static_cast<size_t>(s.o * kVolume));
    for (auto& v : w) v = static_cast<int8_t>(weightDist(rng));
    std::vector<float> bias(static_cast<size_t>(s.o)), wScales(static_cast<size_t>(s.o));
    for (auto& v : bias) v = 0.1f * normal(rng);
    const float srcScale = 0.02f;
    for (auto& v : wScales) v = 1.f / (127.f * srcScale * 128.f * std::sqrt(static_cast<float>(kVolume)));
    // Torch weight [O, C/g, k, k] in (o, c, kh, kw) order: the same buffer for both, as f32.
    std::vector<float> wf(w.size()), srcF(src.size());
    for (size_t i = 0; i < w.size(); ++i) wf[i] = static_cast<float>(w[i]) * wScales[i / static_cast<size_t>(kVolume)];
    // Both buffers in channels-last (conv) / row-major (linear) order.
    for (size_t i = 0; i < src.size(); ++i) srcF[i] = (static_cast<float>(src[i]) - 128.f) * srcScale;

    Int8Params p;
    p.conv = conv;
    if (conv) {
      p.srcDims = {1, s.c, s.h, s.w};
      p.srcStrides = {s.h * s.w * s.c, 1, s.w * s.c, s.c};
      p.weightDims = {s.o, cg, s.k, s.k};
      p.stride = {s.stride, s.stride};
      p.padL = {pad, pad};
      p.groups = dw ? s.c : 1;
      p.dstChannelsLast = true;
    } else {
      p.srcDims = {s.h, s.c};
      p.srcStrides = {s.c, 1};
      p.weightDims = {s.o, s.c};
    }
    p.srcType = Int8Type::kU8;
    p.dstType = dstType;
    p.weights = w.data();
    p.bias = bias.data();
    p.srcScale = srcScale;
    p.srcZeroPoint = 128;
    p.weightScales = wScales;
    p.dstScale = 0.05f;
    p.dstZeroPoint = dstType == Int8Type::kU8 ? 0 : 0;
    std::vector<PostOp> f32Ops;
    if (s.kind == Kind::kConv) {
      p.postOps = {Int8Params::PostOp::kRelu};
      PostOp r;
      r.act = Activation::kRelu;
      f32Ops.push_back(r);
    } else if (dw) {
      p.postOps = {Int8Params::PostOp::kClamp};
      p.clampLo = 0.f;
      p.clampHi = 6.f;
      PostOp r;
      r.act = Activation::kClamp;
      r.alpha = 0.f;
      r.beta = 6.f;
      f32Ops.push_back(r);
    }
    const int64_t outNumel = oh * ow * s.o;
    const size_t outBytes = static_cast<size_t>(outNumel) * (dstType == Int8Type::kU8 ? 1 : 4);

    for (int t : threads) {
      omp_set_num_threads(t);
      // NOTE: oneDNN fixes its thread count when the primitive is created: create after setting it.
      auto own = createInt8Widening(p);
      if (!own.isOk()) die(own.status(), "createInt8Widening");
      const Status probe = probeInt8Kernel(p, *own.value());
      if (!probe.isOk()) die(probe, "probeInt8Kernel (own kernel)");
      std::unique_ptr<Kernel> f32, i8;
      if (onednn) {
        if (conv) {
          ConvParams cp;
          cp.srcDims = p.srcDims;
          cp.weightDims = p.weightDims;
          cp.weights = wf.data();
          cp.bias = bias.data();
          cp.stride = p.stride;
          cp.padL = p.padL;
          cp.groups = p.groups;
          cp.postOps = f32Ops;
          cp.srcFormat = Format::kChannelsLast;
          cp.dstFormat = Format::kChannelsLast;
          auto k = createConv(cp);
          if (!k.isOk()) die(k.status(), "createConv");
          f32 = std::move(k.value());
        } else {
          LinearParams lp;
          lp.m = s.h;
          lp.k = s.c;
          lp.n = s.o;
          lp.weights = wf.data();
          lp.bias = bias.data();
          auto k = createLinear(lp);
          if (!k.isOk()) die(k.status(), "createLinear");
          f32 = std::move(k.value());
        }
        auto k = createInt8Unprobed(p);
        if (!k.isOk()) die(k.status(), "createInt8Unprobed");
        i8 = std::move(k.value());
      }
      std::vector<uint8_t> outOwn(outBytes), outI8(outBytes);
      std::vector<float> outF32(static_cast<size_t>(outNumel));
      std::vector<std::function<void()>> calls;
      calls.push_back([&] {
        const Status st = own.value()->execute({src.data()}, outOwn.data());
        if (!st.isOk()) die(st, "own execute");
      });
      if (onednn) {
        calls.push_back([&] {
          const Status st = f32->execute({srcF.data()}, outF32.data());
          if (!st.isOk()) die(st, "oneDNN f32 execute");
        });
        calls.push_back([&] {
          const Status st = i8->execute({src.data()}, outI8.data());
          if (!st.isOk()) die(st, "oneDNN int8 execute");
        });
      }
      const std::vector<double> sec = timeInterleaved(calls, samples);
      auto gops = [&](double seconds) { return 2.0 * macs / seconds / 1e9; };
      int64_t differing = 0;
      if (onednn) {
        if (dstType == Int8Type::kU8) {
          for (size_t i = 0; i < outOwn.size(); ++i) differing += outOwn[i] != outI8[i];
        } else {
          for (int64_t i = 0; i < outNumel; ++i) {
            float a, b;
            std::memcpy(&a, outOwn.data() + i * 4, 4);
            std::memcpy(&b, outI8.data() + i * 4, 4);
            differing += std::abs(a - b) > 1e-4f * std::max(1.f, std::abs(a));
          }
        }
      }
      char f32Cell[16] = "-", i8Cell[16] = "-", r1[16] = "-", r2[16] = "-";
      if (onednn) {
        std::snprintf(f32Cell, sizeof f32Cell, "%9.1f", gops(sec[1]));
        std::snprintf(i8Cell, sizeof i8Cell, "%9.1f", gops(sec[2]));
        std::snprintf(r1, sizeof r1, "%8.2f", sec[1] / sec[0]);
        std::snprintf(r2, sizeof r2, "%8.2f", sec[2] / sec[0]);
      }
      std::printf("%-30s %3d | %9.1f %9s %9s | %8s %8s | %-28s | %-26s | %lld / %lld\n", s.name, t, gops(sec[0]), f32Cell,
                  i8Cell, r1, r2, own.value()->implInfo().c_str(), onednn ? i8->implInfo().c_str() : "-",
                  static_cast<long long>(differing), static_cast<long long>(outNumel));
      std::fflush(stdout);
    }
  }
  if (ceilings) printCeilings();
  return 0;
}
