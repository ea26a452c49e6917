// Internal to kernels/: the two matmuls of attention as own AVX-512 register tiles, for the
// attention kernel (kernels/src/onednn/attention.cpp): bf16 on AVX512-BF16 (vdpbf16ps) and float32
// (vfmadd). Per head the keys and values are packed once into 16-column panels (for bf16 in the
// pair layout vdpbf16ps reads); the score and output tiles are then plain register tiles.
// Why not oneDNN's matmul here: at BERT's head shape ([128, 64] x [64, 128], then [128, 128] x
// [128, 64]) two oneDNN calls per head, each copying or reordering its operands, leave the whole
// bf16 attention at ~120 GFLOP/s on Zen 4 where vdpbf16ps peaks at 231; with these tiles the two
// matmuls run near that peak and the attention 10-20% faster in bf16, 4-16% in float32
// (kernels/README.md, Attention).
#pragma once

#include <cstdint>

namespace verifuse::kernels::cpu {

/// Lanes (bf16 values) per packed row: 16 columns x a (k, k + 1) pair.
inline constexpr int64_t kAttentionPairLanes = 32;

/// bf16 elements the packed keys of one head take: ceil(kv / 16) panels of ceil(d / 2) pair rows.
inline int64_t attentionPackedKeysSize(int64_t kv, int64_t d) {
  return (kv + 15) / 16 * ((d + 1) / 2) * kAttentionPairLanes;
}
/// Likewise the packed values: ceil(dv / 16) panels of ceil(kv / 2) pair rows.
inline int64_t attentionPackedValuesSize(int64_t kv, int64_t dv) {
  return (dv + 15) / 16 * ((kv + 1) / 2) * kAttentionPairLanes;
}

/// True when this CPU runs the bf16 kernels below (AVX512-BF16).
bool attentionTilesBf16Available();
/// True when this CPU runs the float32 kernels below (AVX-512).
bool attentionTilesF32Available();

/// Packs keys k[j][c] (row j at k + j * ld, c < d) as the B operand of Q·K^T: panel of keys
/// j0..j0+15, pair row c/2 holds (k[j][c], k[j][c+1]) for those 16 keys. Missing keys and an odd
/// last c are zero. \p out: attentionPackedKeysSize(kv, d) elements, 64-byte aligned.
void attentionPackKeysBf16(const uint16_t* k, int64_t ld, int64_t kv, int64_t d, uint16_t* out);

/// Packs values v[j][c] (row j at v + j * ld, c < dv) as the B operand of P·V: panel of columns
/// c0..c0+15, pair row j/2 holds (v[j][c], v[j+1][c]). Missing columns and an odd last key are zero.
void attentionPackValuesBf16(const uint16_t* v, int64_t ld, int64_t kv, int64_t dv, uint16_t* out);

/// s[i][j] = sum_c q[i][c] * k[j][c] in float32 for i < n and j < round_up(kv, 16) (keys past kv
/// give 0): q row i at q + i * ldq (d values), s row i at s + i * lds (lds >= round_up(kv, 16)).
/// \p kPacked from attentionPackKeysBf16(…, kv, d, …).
void attentionScoresBf16(const uint16_t* q, int64_t ldq, int64_t n, int64_t d, const uint16_t* kPacked, int64_t kv,
                         float* s, int64_t lds);

/// out[i][c] = bf16(rowScale[i] * sum_{j < kv} p[i][j] * v[j][c]) for i < n, c < dv: the sum in
/// float32, times the scale, rounded once to nearest even (NaN quiet, denormals kept), as
/// attentionScaleRowToBf16 rounds. p row i at p + i * ldp holds round_up(kv, 2) bf16 values (an
/// odd kv's last one 0); out row i at out + i * ldOut. \p vPacked from
/// attentionPackValuesBf16(…, kvPacked, dv, …) with kvPacked >= kv (a causal block reads only the
/// keys its rows see).
void attentionValuesBf16(const uint16_t* p, int64_t ldp, int64_t n, int64_t kv, const uint16_t* vPacked,
                         int64_t kvPacked, int64_t dv, const float* rowScale, uint16_t* out, int64_t ldOut);

// ---- float32 ------------------------------------------------------------------------------------

/// Floats the packed keys of one head take: ceil(kv / 16) panels of d rows of 16.
inline int64_t attentionPackedKeysSizeF32(int64_t kv, int64_t d) { return (kv + 15) / 16 * d * 16; }
/// Floats the packed values take: ceil(dv / 16) panels of kv rows of 16.
inline int64_t attentionPackedValuesSizeF32(int64_t kv, int64_t dv) { return (dv + 15) / 16 * kv * 16; }

/// Packs keys k[j][c] (row j at k + j * ld) as the B operand of Q·K^T: panel of keys j0..j0+15,
/// row c holds k[j][c] of those 16 keys (missing keys 0). \p out 64-byte aligned.
void attentionPackKeysF32(const float* k, int64_t ld, int64_t kv, int64_t d, float* out);
/// Packs values v[j][c] as the B operand of P·V: panel of columns c0..c0+15, row j holds v[j][c]
/// (missing columns 0).
void attentionPackValuesF32(const float* v, int64_t ld, int64_t kv, int64_t dv, float* out);

/// s[i][j] = sum_c q[i][c] * k[j][c] (float32, fused multiply-adds in c order) for i < n and
/// j < round_up(kv, 16) (keys past kv give 0); lds >= round_up(kv, 16).
void attentionScoresF32(const float* q, int64_t ldq, int64_t n, int64_t d, const float* kPacked, int64_t kv, float* s,
                        int64_t lds);

/// out[i][c] = rowScale[i] * sum_{j < kv} p[i][j] * v[j][c] for i < n, c < dv (one rounding of the
/// product, as attentionScaleRow); p row i at p + i * ldp; \p vPacked from
/// attentionPackValuesF32(…, kvPacked, dv, …) with kvPacked >= kv.
void attentionValuesF32(const float* p, int64_t ldp, int64_t n, int64_t kv, const float* vPacked, int64_t kvPacked,
                        int64_t dv, const float* rowScale, float* out, int64_t ldOut);

}  // namespace verifuse::kernels::cpu
