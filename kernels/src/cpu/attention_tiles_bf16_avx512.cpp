// The bf16 attention tiles on AVX512-BF16 (attention_tiles.h; reached only after
// attentionTilesBf16Available()); the tile loops are attention_tiles_avx512.h's. Both matmuls are register tiles over operands packed in the pair
// layout vdpbf16ps reads: one instruction multiplies a broadcast pair (a[i][k], a[i][k+1]) with
// the pairs (b[k][j], b[k+1][j]) of 16 columns and adds both products to float32 lanes.
//
// Q·K^T reads the query rows in place (a pair of adjacent head-dim values is one 32-bit
// broadcast), so only K is packed: per panel of 16 keys, a 16 x d/2 transpose of 32-bit pairs.
// P·V reads the probabilities the row step wrote in bf16, and V is packed per panel of 16 value
// columns by interleaving two key rows. Tiles: 8 rows x 3 panels (24 accumulators) for the scores,
// whose reduction is short (d/2 steps, 32 at d = 64); 6 rows x 4 panels for the output, so a
// head dim of 64 is one tile wide.
//
// Numerics: float32 accumulation of exact bf16 products (denormal inputs read as zero, as in
// oneDNN's bf16 matmul on this instruction), summed in an order that differs from oneDNN's.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/attention_tiles.h"
#include "cpu/attention_tiles_avx512.h"
#include "cpu/vecmath_avx512.h"

namespace verifuse::kernels::cpu {
namespace {

constexpr int64_t kLanes = kAttentionPairLanes;

/// One step: a (k, k + 1) pair of a's row (one 32-bit broadcast) against the packed pairs of 16
/// columns, both products added to each float32 lane by vdpbf16ps.
struct Bf16Step {
  using T = uint16_t;
  static constexpr int64_t kRow = kLanes;
  static __attribute__((always_inline)) __m512i loadB(const T* p) {
    return _mm512_load_si512(reinterpret_cast<const void*>(p));
  }
  static __attribute__((always_inline)) __m512i broadcast(const T* row, int64_t p) {
    int32_t v;
    std::memcpy(&v, row + 2 * p, sizeof v);
    return _mm512_set1_epi32(v);
  }
  /// (a[2·p], 0) against the packed (b[2·p], 0) pairs: an odd reduction length's last index.
  static __attribute__((always_inline)) __m512i broadcastTail(const T* row, int64_t p) {
    return _mm512_set1_epi32(static_cast<int32_t>(row[2 * p]));
  }
  static __attribute__((always_inline)) __m512 madd(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
  }
};

/// The output rows: times the row's 1 / sum, rounded to bf16 (nearest even, NaN quiet, denormals
/// kept: avx512::toBf16Bits, the rounding of the row step's attentionScaleRowToBf16) into the
/// caller's rows; the last panel's lanes past dv are not written.
struct StoreOutputBf16 {
  const float* rowScale;
  uint16_t* out;
  int64_t ldOut, dv;
  __attribute__((always_inline)) void operator()(int64_t i, int64_t panel, __m512 y) const {
    const __m512 scaled = _mm512_mul_ps(y, _mm512_set1_ps(rowScale[i]));
    _mm256_mask_storeu_epi16(out + i * ldOut + 16 * panel, tiles::panelMask(dv, panel),
                             _mm512_cvtepi32_epi16(avx512::detail::toBf16Bits(scaled)));
  }
};

}  // namespace

void attentionPackKeysBf16(const uint16_t* k, int64_t ld, int64_t kv, int64_t d, uint16_t* out) {
  const int64_t pairRows = (d + 1) / 2, fullPairs = d / 2;
  // One gather per pair row: the 32-bit pair (k[j][2r], k[j][2r + 1]) of 16 keys j (scalar
  // strided copies of the same took ~5 us per BERT head, a sixth of the attention).
  alignas(64) int32_t offsets[16];
  for (int t = 0; t < 16; ++t) offsets[t] = static_cast<int32_t>(t * ld * 2);  // bytes
  const __m512i idx = _mm512_load_si512(reinterpret_cast<const void*>(offsets));
  for (int64_t j0 = 0; j0 < kv; j0 += 16) {
    uint16_t* panel = out + (j0 / 16) * pairRows * kLanes;
    const int64_t keys = std::min<int64_t>(16, kv - j0);
    const __mmask16 m = keys == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << keys) - 1u);
    const char* base = reinterpret_cast<const char*>(k + j0 * ld);
    // The next panel's key rows (strided by the heads: the hardware prefetcher misses them).
    for (int64_t t = 0; t < 16 && j0 + 16 + t < kv; ++t) {
      for (int64_t c = 0; c < d; c += 32) _mm_prefetch(reinterpret_cast<const char*>(k + (j0 + 16 + t) * ld + c), _MM_HINT_T0);
    }
    for (int64_t r = 0; r < fullPairs; ++r) {
      const __m512i pairs = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, base + 4 * r, 1);
      _mm512_store_si512(reinterpret_cast<void*>(panel + r * kLanes), pairs);
    }
    if (d % 2 != 0) {  // (k[j][d - 1], 0): the last value alone, widened
      uint32_t* last = reinterpret_cast<uint32_t*>(panel + fullPairs * kLanes);
      for (int64_t t = 0; t < 16; ++t) last[t] = t < keys ? k[(j0 + t) * ld + d - 1] : 0u;
    }
  }
}

void attentionPackValuesBf16(const uint16_t* v, int64_t ld, int64_t kv, int64_t dv, uint16_t* out) {
  const int64_t pairRows = (kv + 1) / 2;
  // Lane 2i takes column i of the first key row (low 256 bits), lane 2i + 1 that of the second.
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(reinterpret_cast<const void*>(kInterleave));
  for (int64_t c0 = 0; c0 < dv; c0 += 16) {
    uint16_t* panel = out + (c0 / 16) * pairRows * kLanes;
    const int64_t cols = std::min<int64_t>(16, dv - c0);
    const __mmask16 m = cols == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1u);
    for (int64_t r = 0; r < pairRows; ++r) {
      const __m256i lo = _mm256_maskz_loadu_epi16(m, v + (2 * r) * ld + c0);
      const __m256i hi = 2 * r + 1 < kv ? _mm256_maskz_loadu_epi16(m, v + (2 * r + 1) * ld + c0) : _mm256_setzero_si256();
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      _mm512_store_si512(reinterpret_cast<void*>(panel + r * kLanes), _mm512_permutexvar_epi16(idx, both));
    }
  }
}

void attentionScoresBf16(const uint16_t* q, int64_t ldq, int64_t n, int64_t d, const uint16_t* kPacked, int64_t kv,
                         float* s, int64_t lds) {
  const int64_t panelStride = (d + 1) / 2 * kLanes;
  tiles::matmul<Bf16Step, 8, 3>(q, ldq, n, d / 2, d % 2 != 0, kPacked, panelStride, (kv + 15) / 16,
                                tiles::StoreScores{s, lds});
}

void attentionValuesBf16(const uint16_t* p, int64_t ldp, int64_t n, int64_t kv, const uint16_t* vPacked,
                         int64_t kvPacked, int64_t dv, const float* rowScale, uint16_t* out, int64_t ldOut) {
  const int64_t panelStride = (kvPacked + 1) / 2 * kLanes;
  tiles::matmul<Bf16Step, 6, 4>(p, ldp, n, (kv + 1) / 2, false, vPacked, panelStride, (dv + 15) / 16,
                                StoreOutputBf16{rowScale, out, ldOut, dv});
}

}  // namespace verifuse::kernels::cpu
