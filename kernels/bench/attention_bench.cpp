// The attention kernel (kernels/attention.h) at one shape per run, per block-row count: ms per
// call (median of N). Usage: verifuse_attention_bench B H S KV D [reps] [rows...]; q, k, v are
// permuted views of [B,S,H,D] as transformers make them. Set OMP_NUM_THREADS for the thread count;
// ATTN_BENCH_BF16=1 runs bf16 operands (VERIFUSE_ATTENTION_TILES=0: oneDNN's matmuls instead of
// the own tiles).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "verifuse/kernels/attention.h"

using namespace verifuse::kernels;

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s B H S KV D [reps] [rows...]\n", argv[0]);
    return 2;
  }
  const int64_t B = std::atoll(argv[1]), H = std::atoll(argv[2]), S = std::atoll(argv[3]), KV = std::atoll(argv[4]),
                D = std::atoll(argv[5]);
  const int reps = argc > 6 ? std::atoi(argv[6]) : 10;
  std::vector<int64_t> rowsList;
  for (int i = 7; i < argc; ++i) rowsList.push_back(std::atoll(argv[i]));
  if (rowsList.empty()) rowsList.push_back(0);
  // (3x the elements: room for the fused-QKV layout, whose rows are 3·H·D apart)
  std::vector<float> q(static_cast<size_t>(3 * B * S * H * D)), k(static_cast<size_t>(3 * B * KV * H * D)),
      v(k.size()), o(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 7919) % 1000) / 1000.f - 0.5f;
  for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = static_cast<float>((i * 104729) % 1000) / 1000.f - 0.5f;
  const bool bf16 = std::getenv("ATTN_BENCH_BF16") != nullptr;
  // bf16 operands: the float bit patterns' upper halves, in the first half of each buffer.
  auto toBf16 = [](std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &x[i], 4);
      h[i] = static_cast<uint16_t>(u >> 16);
    }
    std::memcpy(x.data(), h.data(), h.size() * 2);
  };
  if (bf16) toBf16(q), toBf16(k), toBf16(v);
  for (int64_t rows : rowsList) {
    AttentionParams p;
    p.batch = B, p.heads = H, p.seq = S, p.kvSeq = KV, p.headDim = D, p.valueDim = D;
    p.qStrides = p.outStrides = {S * H * D, D, H * D, 1};
    p.kStrides = p.vStrides = {KV * H * D, D, H * D, 1};
    if (std::getenv("ATTN_BENCH_DENSE_KV")) p.kStrides = p.vStrides = {KV * H * D, KV * D, D, 1};
    if (std::getenv("ATTN_BENCH_FUSED_QKV")) {  // views of one [B,S,3,H,D] projection (S == KV)
      p.qStrides = p.kStrides = p.vStrides = {3 * S * H * D, D, 3 * H * D, 1};
    }
    if (std::getenv("ATTN_BENCH_DENSE_HEADS")) {  // [B,H,S,D] contiguous instead
      p.qStrides = p.outStrides = {S * H * D, S * D, D, 1};
      p.kStrides = p.vStrides = {KV * H * D, KV * D, D, 1};
    }
    p.scale = 0.125f;
    p.bf16 = bf16;
    p.blockRows = rows;
    auto kern = createAttention(p);
    if (!kern.isOk()) {
      std::fprintf(stderr, "%s\n", kern.status().toString().c_str());
      return 1;
    }
    std::vector<double> ms;
    for (int r = 0; r < reps + 2; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      if (!(*kern)->execute(q.data(), k.data(), v.data(), nullptr, o.data(), nullptr).isOk()) return 1;
      if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double flop = 2.0 * B * H * S * KV * 2 * D;
    std::printf("[%ld,%ld,%ld,%ld,%ld] threads %d %s: median %.3f ms, min %.3f ms (%.0f GFLOP/s)\n", (long)B, (long)H,
                (long)S, (long)KV, (long)D, omp_get_max_threads(), (*kern)->implInfo().c_str(), ms[ms.size() / 2],
                ms.front(), flop / ms.front() / 1e6);
  }
  return 0;
}
