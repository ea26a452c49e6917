// Micro-benchmark (not a test): the weight-only kernels (kernels/weight_only.h) at decode shapes,
// one row of x, from cache and from memory, against the read bandwidth of the moment.
//
//   verifuse_weight_only_bench [--threads 1] [--samples 9] [--m 1]
//
// Per case: G weights/s and the packed bytes read per second (GB/s), median over samples, each
// sample repeating the call over a set of matrices until >= 20 ms. "cache": one 512 x 896 matrix
// (int4: 0.34 MB packed) called again and again; "memory": 64 matrices of 4864 x 896 (~200 MB in
// int4, ~280 MB in int8) in turn, as a decode step reads them; "mem-kT": the same of 896 x 4864
// (an MLP's down projection: long rows). The read bandwidth is a float32 sum
// over 512 MB. Where a kernel reaches the bandwidth from memory but not much more from cache it is
// bound by its arithmetic. NOTE: the machine is shared: wrap runs in `flock /tmp/verifuse-bench.lock`.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "verifuse/kernels/weight_only.h"

namespace {

using Clock = std::chrono::steady_clock;

double medianSeconds(const std::function<void()>& call, int samples) {
  std::vector<double> per;
  for (int s = 0; s < samples; ++s) {
    int reps = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      call();
      ++reps;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < 0.02);
    per.push_back(elapsed / reps);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, samples = 9;
  int64_t rows = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--samples") samples = std::atoi(argv[i + 1]);
    else if (a == "--m") rows = std::atoll(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  std::mt19937 gen(1);
  std::uniform_int_distribution<int> code4(-8, 7), code8(-128, 127);
  // Read bandwidth: a float32 sum over 512 MB.
  {
    std::vector<float> big(size_t(128) << 20, 1.f);
    float sink = 0;
    const double t = medianSeconds([&] {
      float s = 0;
#pragma omp parallel for simd reduction(+ : s) num_threads(threads)
      for (size_t i = 0; i < big.size(); ++i) s += big[i];
      sink += s;
    }, 5);
    std::printf("read bandwidth (float32 sum, %d thread%s): %.1f GB/s%s\n", threads, threads > 1 ? "s" : "",
                big.size() * 4 / t / 1e9, sink == 0 ? " " : "");
  }
  std::printf("%-28s %-7s %10s %10s\n", "kernel", "from", "Gweight/s", "GB/s");
  struct Case {
    const char* from;
    int64_t n, k, count;
  };
  for (const Case& c : {Case{"cache", 512, 896, 1}, Case{"memory", 4864, 896, 64}, Case{"mem-kT", 896, 4864, 64}, Case{"cache-kT", 64, 4864, 1}}) {
    std::vector<float> x(static_cast<size_t>(rows * c.k)), y(static_cast<size_t>(rows * c.n));
    for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(gen);
    std::vector<int8_t> codes(static_cast<size_t>(c.n * c.k));
    const double weights = double(c.n) * c.k;
    // int8 per row
    {
      std::vector<std::unique_ptr<verifuse::kernels::Int8WeightMatmul>> ks;
      for (int64_t i = 0; i < c.count; ++i) {
        for (auto& v : codes) v = static_cast<int8_t>(code8(gen));
        ks.push_back(std::move(*verifuse::kernels::Int8WeightMatmul::create(codes.data(), c.n, c.k)));
      }
      size_t next = 0;
      const double t = medianSeconds([&] {
        (void)ks[next]->run(x.data(), rows, c.k, y.data(), c.n);
        next = (next + 1) % ks.size();
      }, samples);
      std::printf("%-28s %-7s %10.1f %10.1f\n", ks[0]->implInfo(), c.from, weights / t / 1e9,
                  ks[0]->packedBytes() / t / 1e9);
    }
    for (int64_t group : {32, 128}) {
      std::vector<float> scale(static_cast<size_t>(c.n * c.k / group), 0.01f);
      std::vector<int8_t> zero(scale.size(), 0);
      std::vector<std::unique_ptr<verifuse::kernels::Int4WeightMatmul>> ks;
      for (int64_t i = 0; i < c.count; ++i) {
        for (auto& v : codes) v = static_cast<int8_t>(code4(gen));
        ks.push_back(std::move(*verifuse::kernels::Int4WeightMatmul::create(codes.data(), scale.data(), zero.data(),
                                                                             c.n, c.k, group)));
      }
      size_t next = 0;
      const double t = medianSeconds([&] {
        (void)ks[next]->run(x.data(), rows, c.k, nullptr, y.data(), c.n);
        next = (next + 1) % ks.size();
      }, samples);
      const std::string name = std::string(ks[0]->implInfo()) + " g" + std::to_string(group);
      std::printf("%-28s %-7s %10.1f %10.1f\n", name.c_str(), c.from, weights / t / 1e9, ks[0]->packedBytes() / t / 1e9);
    }
  }
  return 0;
}
