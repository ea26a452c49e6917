// Int8WeightMatmul (weight_only.h): packing, the variant the tier picks, threads over column groups.
#include "verifuse/kernels/weight_only.h"

#include <omp.h>

#include <algorithm>

#include "cpu/weight_only_internal.h"
#include "verifuse/kernels/cpu_features.h"

namespace verifuse::kernels {

namespace {

// Column blocks per packed group and thread task: a group's weights are one sequential stream (a
// 64-byte line per k step), and two threads still split a decode step's smallest matrices (896
// columns: 14 groups).
constexpr int64_t kBlocksPerTask = 4;

}  // namespace

bool int8WeightMatmulAvailable() { return cpu::hasAvx2Fma(); }

StatusOr<std::unique_ptr<Int8WeightMatmul>> Int8WeightMatmul::create(const int8_t* w, int64_t n, int64_t k) {
  if (n < 1 || k < 1 || w == nullptr) return invalidArgument("Int8WeightMatmul: need n, k >= 1 and a weight");
  if (!int8WeightMatmulAvailable()) return unimplemented("Int8WeightMatmul: needs AVX2 + FMA (" + cpu::isaName() + ")");
  std::unique_ptr<Int8WeightMatmul> m(new Int8WeightMatmul(n, k, cpu::hasAvx512()));
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  m->packed_.assign(static_cast<size_t>(blocks * k * kBlock), 0);
  // Groups of kBlocksPerTask blocks (the last may have fewer), each [k][group's blocks * 16]: a
  // task reads its weights as one sequential stream.
  for (int64_t b0 = 0; b0 < blocks; b0 += kBlocksPerTask) {
    const int64_t nb = std::min(kBlocksPerTask, blocks - b0);
    int8_t* group = m->packed_.data() + b0 * k * kBlock;
    for (int64_t c = 0; c < nb * kBlock && b0 * kBlock + c < n; ++c) {
      const int8_t* row = w + (b0 * kBlock + c) * k;
      for (int64_t kk = 0; kk < k; ++kk) group[kk * nb * kBlock + c] = row[kk];
    }
  }
  return m;
}

Status Int8WeightMatmul::run(const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy) const {
  if (rows < 0 || ldx < k_ || ldy < n_) return invalidArgument("Int8WeightMatmul::run: rows < 0, ldx < k or ldy < n");
  if (rows == 0) return Status::ok();
  const int64_t blocks = (n_ + kBlock - 1) / kBlock;
  const int64_t tasks = (blocks + kBlocksPerTask - 1) / kBlocksPerTask;
  auto group = avx512_ ? weight_only::groupAvx512 : weight_only::groupAvx2;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b0 = t * kBlocksPerTask;
    const int64_t nb = std::min(kBlocksPerTask, blocks - b0);
    const int64_t col0 = b0 * kBlock;
    group(x, rows, ldx, packed_.data() + b0 * k_ * kBlock, nb, k_, y + col0, ldy, std::min(nb * kBlock, n_ - col0));
  }
  return Status::ok();
}

const char* Int8WeightMatmul::implInfo() const {
  return avx512_ ? "verifuse int8-weight:avx512" : "verifuse int8-weight:avx2";
}

}  // namespace verifuse::kernels
