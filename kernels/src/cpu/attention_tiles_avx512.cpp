// The float32 attention tiles on AVX-512 (attention_tiles.h; reached only after
// attentionTilesF32Available()); the tile loops are attention_tiles_avx512.h's. One step
// broadcasts a[i][k] and multiply-adds it into 16 columns of the packed panel row k.
// Q·K^T reads the query rows in place against K packed per head (16-key panels, one gather per
// head-dim index); P·V reads the probability rows of the score tile against V packed per head
// (16-column panels, a copy of each key row's 16 values), and multiplies by the row's 1 / sum on
// the way to the caller's rows.
#include <immintrin.h>

#include <algorithm>

#include "cpu/attention_tiles.h"
#include "cpu/attention_tiles_avx512.h"

namespace verifuse::kernels::cpu {
namespace {

struct F32Step {
  using T = float;
  static constexpr int64_t kRow = 16;
  static __attribute__((always_inline)) __m512 loadB(const T* p) { return _mm512_load_ps(p); }
  static __attribute__((always_inline)) __m512 broadcast(const T* row, int64_t k) { return _mm512_set1_ps(row[k]); }
  static __attribute__((always_inline)) __m512 broadcastTail(const T* row, int64_t k) { return broadcast(row, k); }
  static __attribute__((always_inline)) __m512 madd(__m512 acc, __m512 a, __m512 b) {
    return _mm512_fmadd_ps(a, b, acc);
  }
};

/// The output rows: times the row's 1 / sum (one rounding, as attentionScaleRow) into the
/// caller's rows; the last panel's lanes past dv are not written.
struct StoreOutputF32 {
  const float* rowScale;
  float* out;
  int64_t ldOut, dv;
  __attribute__((always_inline)) void operator()(int64_t i, int64_t panel, __m512 y) const {
    _mm512_mask_storeu_ps(out + i * ldOut + 16 * panel, tiles::panelMask(dv, panel),
                          _mm512_mul_ps(y, _mm512_set1_ps(rowScale[i])));
  }
};

}  // namespace

void attentionPackKeysF32(const float* k, int64_t ld, int64_t kv, int64_t d, float* out) {
  alignas(64) int32_t offsets[16];
  for (int t = 0; t < 16; ++t) offsets[t] = static_cast<int32_t>(t * ld);  // elements (scale 4)
  const __m512i idx = _mm512_load_si512(reinterpret_cast<const void*>(offsets));
  for (int64_t j0 = 0; j0 < kv; j0 += 16) {
    float* panel = out + (j0 / 16) * d * 16;
    const int64_t keys = std::min<int64_t>(16, kv - j0);
    const __mmask16 m = keys == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << keys) - 1u);
    const float* base = k + j0 * ld;
    // The next panel's key rows (strided by the heads: the hardware prefetcher misses them).
    for (int64_t t = 0; t < 16 && j0 + 16 + t < kv; ++t) {
      for (int64_t c = 0; c < d; c += 16) _mm_prefetch(reinterpret_cast<const char*>(base + (16 + t) * ld + c), _MM_HINT_T0);
    }
    for (int64_t c = 0; c < d; ++c) {
      _mm512_store_ps(panel + c * 16, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, base + c, 4));
    }
  }
}

void attentionPackValuesF32(const float* v, int64_t ld, int64_t kv, int64_t dv, float* out) {
  for (int64_t c0 = 0; c0 < dv; c0 += 16) {
    float* panel = out + (c0 / 16) * kv * 16;
    const __mmask16 m = tiles::panelMask(dv - c0, 0);
    for (int64_t j = 0; j < kv; ++j) _mm512_store_ps(panel + j * 16, _mm512_maskz_loadu_ps(m, v + j * ld + c0));
  }
}

void attentionScoresF32(const float* q, int64_t ldq, int64_t n, int64_t d, const float* kPacked, int64_t kv, float* s,
                        int64_t lds) {
  tiles::matmul<F32Step, 8, 3>(q, ldq, n, d, false, kPacked, d * 16, (kv + 15) / 16, tiles::StoreScores{s, lds});
}

void attentionValuesF32(const float* p, int64_t ldp, int64_t n, int64_t kv, const float* vPacked, int64_t kvPacked,
                        int64_t dv, const float* rowScale, float* out, int64_t ldOut) {
  tiles::matmul<F32Step, 6, 4>(p, ldp, n, kv, false, vPacked, kvPacked * 16, (dv + 15) / 16,
                               StoreOutputF32{rowScale, out, ldOut, dv});
}

}  // namespace verifuse::kernels::cpu
