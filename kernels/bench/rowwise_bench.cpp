// Micro-benchmark (not a test): the fused row engine (verifuse/kernels/rowwise.h) on transformer
// shapes against a plain fused loop written by hand (scalar C++, -O3, libm): its default kernels,
// the AVX2 ones where the default is AVX-512, and its scalar interpreter.
//
//   verifuse_rowwise_bench [--threads 1] [--samples 30] [--only NAME_SUBSTRING] [--cpu-time]
//
// Per case: one warm-up call of each variant, then `samples` rounds; a round times one sample of
// every variant in turn (interleaved, so a change of machine load hits all alike); a sample repeats
// the call until it took >= 2 ms and gives the time per call. Prints the median (best in brackets)
// in microseconds and as GB/s = bytes of every input and output touched once per call / time.
// --cpu-time: the calling thread's CPU clock (1 thread only; preemption not counted).
// Run it alone (`taskset -c 0` for one thread); quote medians together with `uptime`.
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
#include <set>
#include <string>
#include <vector>

#include "verifuse/kernels/rowwise.h"

namespace {

using namespace verifuse::kernels::rowwise;
using Clock = std::chrono::steady_clock;

bool gCpuTime = false;

double nowSeconds() {
  if (gCpuTime) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

/// Seconds per call: repeats \p f until >= 2 ms have passed.
double sample(const std::function<void()>& f) {
  int reps = 0;
  const double t0 = nowSeconds();
  double t = t0;
  do {
    f();
    ++reps;
    t = nowSeconds();
  } while (t - t0 < 2e-3);
  return (t - t0) / reps;
}

std::vector<float> randomVec(size_t n, std::mt19937& rng, float lo = -3, float hi = 3) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TensorDesc desc(std::vector<int64_t> sizes) {
  std::vector<int64_t> st(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) st[i - 1] = st[i] * sizes[i];
  return {ElemType::kF32, sizes, st};
}

struct Variant {
  std::string name;
  std::function<void()> call;
  std::vector<double> samples;
};

struct Case {
  std::string name;
  double bytes = 0;
  std::vector<Variant> variants;
};

/// The engine's variants: its default kernels (AVX-512, else AVX2, else scalar), the AVX2 ones where
/// those differ, and the forced scalar interpreter.
void addEngine(Case& c, const RowProgram& p, const std::vector<TensorDesc>& ins, const std::vector<TensorDesc>& outs,
               std::vector<const void*> inPtrs, std::vector<void*> outPtrs) {
  std::set<std::string> seen;
  for (int variant : {0, 1, 2}) {
    RowKernelOptions o;
    o.forceAvx2 = variant == 1;
    o.forceScalar = variant == 2;
    const bool scalar = variant == 2;
    auto k = createRowKernel(p, ins, outs, o);
    if (!k.isOk()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), k.status().toString().c_str());
      std::exit(1);
    }
    std::shared_ptr<RowKernel> kernel(std::move(k).value());
    if (!seen.insert(kernel->isa()).second) continue;
    if (!scalar) std::printf("  %s: %s\n", c.name.c_str(), kernel->describe().c_str());
    c.variants.push_back({std::string("engine-") + kernel->isa(), [kernel, inPtrs, outPtrs] {
                            if (!kernel->execute(inPtrs, outPtrs).isOk()) std::abort();
                          }, {}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, samples = 30;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--samples" && i + 1 < argc) samples = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--cpu-time") gCpuTime = true;
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--samples N] [--only SUBSTR] [--cpu-time]\n", argv[0]);
      return 2;
    }
  }
  omp_set_num_threads(threads);
  std::mt19937 rng(1);
  std::vector<Case> cases;
  // Buffers live for the whole run (captured by pointer).
  std::vector<std::unique_ptr<std::vector<float>>> keep;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> keepMasks;
  auto buf = [&](size_t n, float lo = -3, float hi = 3) {
    keep.push_back(std::make_unique<std::vector<float>>(randomVec(n, rng, lo, hi)));
    return keep.back()->data();
  };

  // Layer norm (BERT-base / GPT-2 hidden 768), with and without the residual add in front.
  for (bool residual : {false, true}) {
    const int64_t R = 128, C = 768;
    float *x = buf(R * C), *r = buf(R * C), *g = buf(C, 0.5f, 1.5f), *b = buf(C), *y = buf(R * C), *h = buf(R * C);
    Case c{residual ? "layernorm(x+r) 128x768 (+h out)" : "layernorm 128x768", 0, {}};
    c.bytes = 4.0 * (R * C * (residual ? 4 : 2) + 2 * C);
    LayerNormSpec spec;
    spec.residual = residual;
    spec.storeSum = residual;
    std::vector<TensorDesc> ins = {desc({R, C})};
    std::vector<const void*> ip = {x};
    if (residual) {
      ins.push_back(desc({R, C}));
      ip.push_back(r);
    }
    ins.push_back(desc({C}));
    ins.push_back(desc({C}));
    ip.push_back(g);
    ip.push_back(b);
    std::vector<TensorDesc> outs = {desc({R, C})};
    std::vector<void*> op = {y};
    if (residual) {
      outs.push_back(desc({R, C}));
      op.push_back(h);
    }
    addEngine(c, layerNormProgram(spec), ins, outs, ip, op);
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < R; ++i) {
                              const float* xr = x + i * C;
                              const float* rr = r + i * C;
                              float* hr = h + i * C;
                              float* yr = y + i * C;
                              float mean = 0, var = 0;
                              for (int64_t j = 0; j < C; ++j) {
                                float v = residual ? xr[j] + rr[j] : xr[j];
                                if (residual) hr[j] = v;
                                mean += v;
                              }
                              mean /= C;
                              const float* src = residual ? hr : xr;
                              for (int64_t j = 0; j < C; ++j) var += (src[j] - mean) * (src[j] - mean);
                              const float rs = 1.0f / std::sqrt(var / C + 1e-5f);
                              for (int64_t j = 0; j < C; ++j) yr[j] = (src[j] - mean) * rs * g[j] + b[j];
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }

  // Layer norm of a bf16 model (BERT-base bf16: bf16 rows, weight and bias; float32 inside).
  {
    const int64_t R = 128, C = 768;
    auto bf16Buf = [&](size_t n, float lo, float hi) {
      std::vector<float> v = randomVec(n, rng, lo, hi);
      keep.push_back(std::make_unique<std::vector<float>>((n + 1) / 2));
      uint16_t* h = reinterpret_cast<uint16_t*>(keep.back()->data());
      for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &v[i], 4);
        h[i] = static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
      }
      return static_cast<void*>(h);
    };
    void *x = bf16Buf(R * C, -3, 3), *g = bf16Buf(C, 0.5f, 1.5f), *b = bf16Buf(C, -3, 3), *y = bf16Buf(R * C, -3, 3);
    Case c{"layernorm bf16 128x768", 2.0 * (2 * R * C + 2 * C), {}};
    auto bf = [](std::vector<int64_t> sizes) {
      TensorDesc d = desc(std::move(sizes));
      d.type = ElemType::kBF16;
      return d;
    };
    addEngine(c, layerNormProgram(LayerNormSpec{}), {bf({R, C}), bf({C}), bf({C})}, {bf({R, C})}, {x, g, b}, {y});
    cases.push_back(std::move(c));
  }

  // Softmax(x * scale + mask): BERT 12 heads x 128 x 128 with an additive [1,1,128,128] mask, and
  // GPT-2 12 x 64 x 64 with a boolean causal mask.
  {
    const int64_t H = 12, S = 128;
    float *x = buf(H * S * S), *m = buf(S * S, -1, 0), *y = buf(H * S * S);
    Case c{"softmax(x*s+mask) 12x128x128", 4.0 * (2 * H * S * S + S * S), {}};
    addEngine(c, softmaxProgram(0.125f, MaskKind::kAdditive), {desc({H, S, S}), desc({1, S, S})}, {desc({H, S, S})},
              {x, m}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < H * S; ++i) {
                              const float* xr = x + i * S;
                              const float* mr = m + (i % S) * S;
                              float* yr = y + i * S;
                              float mx = -INFINITY, z = 0;
                              for (int64_t j = 0; j < S; ++j) mx = std::max(mx, yr[j] = xr[j] * 0.125f + mr[j]);
                              for (int64_t j = 0; j < S; ++j) z += (yr[j] = std::exp(yr[j] - mx));
                              const float rz = 1.0f / z;
                              for (int64_t j = 0; j < S; ++j) yr[j] *= rz;
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }
  {
    const int64_t H = 12, S = 64;
    float *x = buf(H * S * S), *y = buf(H * S * S);
    keepMasks.push_back(std::make_unique<std::vector<uint8_t>>(S * S));
    uint8_t* m = keepMasks.back()->data();
    for (int64_t q = 0; q < S; ++q)
      for (int64_t k = 0; k < S; ++k) m[q * S + k] = k <= q;
    Case c{"softmax(where(causal)) 12x64x64", 4.0 * 2 * H * S * S + S * S, {}};
    TensorDesc md{ElemType::kBool, {S, S}, {S, 1}};
    addEngine(c, softmaxProgram(0.125f, MaskKind::kBoolean), {desc({H, S, S}), md}, {desc({H, S, S})}, {x, m}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < H * S; ++i) {
                              const float* xr = x + i * S;
                              const uint8_t* mr = m + (i % S) * S;
                              float* yr = y + i * S;
                              float mx = -INFINITY, z = 0;
                              for (int64_t j = 0; j < S; ++j) mx = std::max(mx, yr[j] = mr[j] ? xr[j] * 0.125f : -INFINITY);
                              for (int64_t j = 0; j < S; ++j) z += (yr[j] = std::exp(yr[j] - mx));
                              const float rz = 1.0f / z;
                              for (int64_t j = 0; j < S; ++j) yr[j] *= rz;
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }

  // GELU on the BERT FFN activation 128 x 3072 (erf and tanh).
  for (bool tanhForm : {false, true}) {
    const int64_t R = 128, C = 3072;
    float *x = buf(R * C), *y = buf(R * C);
    Case c{tanhForm ? "gelu_tanh 128x3072" : "gelu_erf 128x3072", 4.0 * 2 * R * C, {}};
    addEngine(c, geluProgram(tanhForm), {desc({R, C})}, {desc({R, C})}, {x}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < R * C; ++i) {
                              const float v = x[i];
                              y[i] = tanhForm ? 0.5f * v * (1 + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)))
                                              : 0.5f * v * (1 + std::erf(v * 0.70710678f));
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }

  // RMSNorm (Llama-class d512 at 64 tokens, and d4096 at 128 tokens).
  for (int64_t C : {512, 4096}) {
    const int64_t R = C == 512 ? 64 : 128;
    float *x = buf(R * C), *w = buf(C, 0.5f, 1.5f), *y = buf(R * C);
    Case c{"rmsnorm " + std::to_string(R) + "x" + std::to_string(C), 4.0 * (2 * R * C + C), {}};
    addEngine(c, rmsNormProgram({}), {desc({R, C}), desc({C})}, {desc({R, C})}, {x, w}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < R; ++i) {
                              const float* xr = x + i * C;
                              float* yr = y + i * C;
                              float s = 0;
                              for (int64_t j = 0; j < C; ++j) s += xr[j] * xr[j];
                              const float rs = 1.0f / std::sqrt(s / C + 1e-6f);
                              for (int64_t j = 0; j < C; ++j) yr[j] = w[j] * (xr[j] * rs);
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }

  // silu(gate) * up (Llama d512 MLP, hidden 1408, 64 tokens) and rotary q [1, 8, 64, 64].
  {
    const int64_t R = 64, C = 1408;
    float *a = buf(R * C), *b = buf(R * C), *y = buf(R * C);
    Case c{"silu(a)*b 64x1408", 4.0 * 3 * R * C, {}};
    addEngine(c, siluMulProgram(), {desc({R, C}), desc({R, C})}, {desc({R, C})}, {a, b}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < R * C; ++i) y[i] = a[i] / (1 + std::exp(-a[i])) * b[i];
                          }, {}});
    cases.push_back(std::move(c));
  }
  {
    const int64_t H = 8, S = 64, D = 64;
    float *q = buf(H * S * D), *cs = buf(S * D, -1, 1), *sn = buf(S * D, -1, 1), *y = buf(H * S * D);
    Case c{"rotary 8x64x64 (cos/sin 64x64)", 4.0 * (2 * H * S * D + 2 * S * D), {}};
    addEngine(c, rotaryProgram(), {desc({H, S, D}), desc({S, D}), desc({S, D})}, {desc({H, S, D})}, {q, cs, sn}, {y});
    c.variants.push_back({"plain-loop", [=] {
                            for (int64_t i = 0; i < H * S; ++i) {
                              const float* x = q + i * D;
                              const float* cr = cs + (i % S) * D;
                              const float* sr = sn + (i % S) * D;
                              float* yr = y + i * D;
                              for (int64_t j = 0; j < D; ++j) {
                                const float rot = j < D / 2 ? -x[j + D / 2] : x[j - D / 2];
                                yr[j] = x[j] * cr[j] + rot * sr[j];
                              }
                            }
                          }, {}});
    cases.push_back(std::move(c));
  }

  std::printf("threads %d, samples %d%s; median us [best] and GB/s (median)\n", threads, samples,
              gCpuTime ? ", thread CPU time" : "");
  for (Case& c : cases) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    for (Variant& v : c.variants) v.call();  // warm-up
    for (int s = 0; s < samples; ++s)
      for (Variant& v : c.variants) v.samples.push_back(sample(v.call));
    std::printf("%-34s", c.name.c_str());
    for (Variant& v : c.variants) {
      std::sort(v.samples.begin(), v.samples.end());
      const double med = v.samples[v.samples.size() / 2], best = v.samples.front();
      std::printf("  %s %8.1f [%7.1f] %6.2f GB/s", v.name.c_str(), med * 1e6, best * 1e6, c.bytes / med * 1e-9);
    }
    std::printf("\n");
  }
  return 0;
}
