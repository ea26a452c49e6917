// Int4WeightMatmul (weight_only.h): packing (8 columns' nibbles per 32-bit word, per-group scales
// and offset zero points), the variant the tier picks, threads over column blocks.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "cpu/weight_only_internal.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/weight_only.h"

namespace verifuse::kernels {

namespace {

// Blocks (8 columns each) per thread task: 64 columns, so two threads split a decode step's
// smallest matrices (896 columns) evenly enough and a task's weights are one long stream.
constexpr int64_t kBlocksPerTask = 8;

int64_t blockWords(int64_t k, int64_t group, bool symmetric) {
  return (k / group) * weight_only::int4HeaderWords(symmetric) + k;
}

}  // namespace

bool int4WeightMatmulAvailable() { return cpu::hasAvx2Fma(); }

StatusOr<std::unique_ptr<Int4WeightMatmul>> Int4WeightMatmul::create(const int8_t* codes, const float* scale,
                                                                   const int8_t* zeroPoint, int64_t n, int64_t k,
                                                                   int64_t groupSize) {
  if (n < 1 || k < 1 || !codes || !scale || !zeroPoint) {
    return invalidArgument("Int4WeightMatmul: need n, k >= 1, codes, scales and zero points");
  }
  if (groupSize < kChunk || groupSize % kChunk != 0 || k % groupSize != 0) {
    return invalidArgument("Int4WeightMatmul: the group size must be a multiple of 16 dividing k");
  }
  if (!int4WeightMatmulAvailable()) return unimplemented("Int4WeightMatmul: needs AVX2 + FMA (" + cpu::isaName() + ")");
  for (int64_t i = 0; i < n * k; ++i) {
    if (codes[i] < -8 || codes[i] > 7) return invalidArgument("Int4WeightMatmul: a code outside [-8, 7]");
  }
  const int64_t groups = k / groupSize, blocks = (n + kColumns - 1) / kColumns;
  const bool symmetric = std::all_of(zeroPoint, zeroPoint + n * groups, [](int8_t z) { return z == 0; });
  std::unique_ptr<Int4WeightMatmul> m(new Int4WeightMatmul(n, k, groupSize, cpu::hasAvx512(), symmetric));
  const int64_t words = blockWords(k, groupSize, symmetric), headerWords = weight_only::int4HeaderWords(symmetric);
  // Padding columns: code 0 (stored 8), scale 0 and offset zero point 8: weights of zero.
  m->packed_.assign(static_cast<size_t>(blocks * words), 0x88888888u);
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t* p = m->packed_.data() + b * words;
    for (int64_t gi = 0; gi < groups; ++gi) {
      float header[2 * kColumns];
      for (int64_t c = 0; c < kColumns; ++c) {
        const int64_t col = b * kColumns + c;
        header[c] = col < n ? scale[col * groups + gi] : 0.f;
        // Z + 8, exact in float32: u - (Z + 8) = Q - Z for the stored u = Q + 8.
        header[kColumns + c] = col < n ? static_cast<float>(static_cast<int>(zeroPoint[col * groups + gi]) + 8) : 8.f;
      }
      std::memcpy(p, header, static_cast<size_t>(headerWords) * sizeof(float));  // no zero points if symmetric
      p += headerWords;
      for (int64_t kk = gi * groupSize; kk < (gi + 1) * groupSize; ++kk, ++p) {
        uint32_t word = 0;
        for (int64_t c = 0; c < kColumns; ++c) {
          const int64_t col = b * kColumns + c;
          const uint32_t u = col < n ? static_cast<uint32_t>(codes[col * k + kk] + 8) : 8u;
          word |= u << (4 * c);
        }
        *p = word;
      }
    }
  }
  return m;
}

Status Int4WeightMatmul::run(const float* x, int64_t rows, int64_t ldx, const float* bias, float* y,
                             int64_t ldy) const {
  if (rows < 0 || ldx < k_ || ldy < n_) return invalidArgument("Int4WeightMatmul::run: rows < 0, ldx < k or ldy < n");
  if (rows == 0) return Status::ok();
  const int64_t groups = k_ / group_, vectors = group_ / kChunk, blocks = (n_ + kColumns - 1) / kColumns;
  const int64_t words = blockWords(k_, group_, symmetric_);
  const int64_t tasks = (blocks + kBlocksPerTask - 1) / kBlocksPerTask;
  auto block = avx512_ ? weight_only::int4BlockAvx512 : weight_only::int4BlockAvx2;
  const int threads = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    for (int64_t b = t * kBlocksPerTask; b < std::min(blocks, (t + 1) * kBlocksPerTask); ++b) {
      const int64_t col0 = b * kColumns;
      block(x, rows, ldx, packed_.data() + b * words, groups, vectors, symmetric_, bias ? bias + col0 : nullptr,
            y + col0, ldy, std::min(kColumns, n_ - col0));
    }
  }
  return Status::ok();
}

Status Int4WeightMatmul::dequantize(int64_t panel, float* out) const {
  const int64_t blocks = (n_ + kColumns - 1) / kColumns, perPanel = kPanelColumns / kColumns;
  if (panel < 0 || panel * perPanel >= blocks || out == nullptr) {
    return invalidArgument("Int4WeightMatmul::dequantize: no such panel");
  }
  const int64_t words = blockWords(k_, group_, symmetric_);
  for (int64_t b = panel * perPanel; b < (panel + 1) * perPanel; ++b) {
    float* rows = out + (b - panel * perPanel) * kColumns * k_;
    if (b < blocks) {
      weight_only::int4PanelAvx2(packed_.data() + b * words, k_ / group_, group_, symmetric_, k_, rows);
    } else {
      std::fill(rows, rows + kColumns * k_, 0.f);
    }
  }
  return Status::ok();
}

const char* Int4WeightMatmul::implInfo() const {
  return avx512_ ? "verifuse int4-weight:avx512" : "verifuse int4-weight:avx2";
}

}  // namespace verifuse::kernels
