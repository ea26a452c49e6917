// Scaled dot-product attention: per (batch, head, block of query rows) S = Q_blk·K^T (oneDNN
// matmul), the row softmax (cpu/attention_rows.h), O_blk = P·V (oneDNN matmul), O rows times
// 1/sum. The score tile [rows, KV] is per thread and reused block after block (kScoreTileBytes
// says how tall it is and why). On an AVX-512 CPU (AVX512-BF16 for bf16) both matmuls are instead
// the own register tiles of cpu/attention_tiles.h over K and V packed once per head (why: that
// header); the oneDNN matmuls remain for other CPUs and with VERIFUSE_ATTENTION_TILES=0. bf16
// where oneDNN has no bf16 instructions runs "widened" (AttentionParams::widenBf16): q, k, v
// widened into the float32 copies, float32 matmuls, the probabilities rounded to bf16 in place.
#include "verifuse/kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common.h"
#include "cpu/attention_rows.h"
#include "cpu/attention_tiles.h"
#include "cpu/bf16_convert.h"
#include "cpu/rowwise_internal.h"
#include "verifuse/kernels/capabilities.h"

namespace verifuse::kernels {
using namespace onednn;

namespace {

/// Per-thread score tile slot in threadScratch (slot 0 is the primitives' scratchpad).
constexpr int kScoreSlot = 7;
/// Score tile budget. Measured (kernels/bench/attention_bench.cpp, Zen 5, 1 thread, [1,6,1500,64]):
/// 16 rows 39.5 ms, 32 31.3, 64 27.0, 128 25.1, 256 23.9, 384 23.6 ms: oneDNN's matmul gains more
/// from a taller block than the tile loses by spilling out of the 1 MiB L2 (the tile is written and
/// read once, in order), so the budget is 2 MiB (336 rows at KV 1500), capped at 512 rows.
constexpr int64_t kScoreTileBytes = 2 * 1024 * 1024;

struct MatmulPair {
  dnnl::matmul prim;
  dnnl::memory::desc src, wei, dst;
  size_t scratch = 0;
  std::string impl;
};

MatmulPair makeMatmul(const dnnl::memory::desc& src, const dnnl::memory::desc& wei, const dnnl::memory::desc& dst) {
  dnnl::matmul::primitive_desc pd(engine(), src, wei, dst, userScratchAttr());
  MatmulPair m{makePrimitive<dnnl::matmul>(pd), src, wei, dst, pd.scratchpad_desc().get_size(), pd.impl_info_str()};
  return m;
}

class OnednnAttention final : public AttentionKernel {
 public:
  AttentionParams p;
  int64_t rows = 0;  // query rows per block
  // [0]: full block, [1]: the last, shorter block (when seq % rows != 0).
  std::optional<MatmulPair> qk[2], pv[2];
  // Operands whose rows are not dense are copied per block (q, out) or per head (k, v) into dense
  // per-thread buffers: oneDNN's brgemm matmul takes only dense operands and is measurably faster
  // than the gemm:jit it picks for strided ones (createAttention).
  bool packQ = false, packKV = false, packO = false;
  size_t esize = sizeof(float);  // bytes per element of q, k, v, mask and out
  // Both matmuls on the own tiles (cpu/attention_tiles.h) instead of oneDNN: q read in place, k
  // and v packed per head into 16-column panels (bf16: the pair layout), no oneDNN primitive.
  bool ownTiles = false;
  // bf16 q/k/v/mask/out on float32 matmuls (AttentionParams::widenBf16): the copies widen, the
  // probabilities are rounded to bf16 in the float32 score tile.
  bool widened = false;

  Status execute(const void* qIn, const void* kIn, const void* vIn, const void* maskIn, void* outIn,
                 float* lse) const override {
    // Byte-addressed: strides count elements of esize bytes.
    const char* q = static_cast<const char*>(qIn);
    const char* k = static_cast<const char*>(kIn);
    const char* v = static_cast<const char*>(vIn);
    const char* mask = static_cast<const char*>(maskIn);
    char* out = static_cast<char*>(outIn);
    const int64_t E = static_cast<int64_t>(esize);
    if (!q || !k || !v || !out || (p.hasMask && !mask) || (p.logsumexp && !lse)) {
      return invalidArgument("attention: null buffer");
    }
    const int64_t blocks = (p.seq + rows - 1) / rows;
    // The softmax row step reads mask values adjacent (or one value for every key); any other
    // key stride (a mask left in a permuted layout, e.g. T5's position bias) is gathered.
    const int64_t maskKeyStride = p.maskStrides[3];
    // A bf16 mask with adjacent keys is widened by the row step as it reads it.
    const bool gatherMask = p.hasMask && maskKeyStride != 1 && (p.bf16 || maskKeyStride != 0);
    const int64_t group = p.heads / (p.kvHeads > 0 ? p.kvHeads : p.heads);
    const int64_t units = p.batch * p.heads * blocks;
    const int maxThreads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(maxThreads, units)));
    std::atomic<bool> failed{false};
    std::string error;
    std::mutex errorMu;
    size_t scratch = 0;
    for (int t = 0; t < 2; ++t) {
      if (qk[t]) scratch = std::max({scratch, qk[t]->scratch, pv[t]->scratch});
    }
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      try {
        const dnnl::engine& eng = engine();
        dnnl::stream& s = threadStream();
        // The thread's buffers, each 64-byte aligned: score tile, row max and sum, and the packed
        // copies of operands whose rows are not dense (see createAttention).
        const int64_t D = p.headDim, Dv = p.valueDim, KV = p.kvSeq;
        auto pad = [](int64_t n) { return (n + 15) / 16 * 16; };
        // Sizes in floats; bf16 also needs the probabilities in bf16 and an f32 output block (P·V
        // accumulates in f32); a mask whose keys are not adjacent (or, in bf16, one value for
        // every key) is gathered into an f32 row.
        const bool bf16 = p.bf16;
        // bf16 operands of the matmuls themselves (not when widened).
        const bool bf16Mm = bf16 && !widened;
        // Row strides of the score tile, the bf16 probabilities and the f32 output block: the own
        // tiles write whole 16-column panels and read the probabilities in (key, key + 1) pairs.
        const int64_t lds = ownTiles ? pad(KV) : KV, ldp = ownTiles ? (KV + 1) / 2 * 2 : KV;
        const int64_t kPackFloats = !ownTiles ? (packKV ? KV * D : 0)
                                    : bf16    ? cpu::attentionPackedKeysSize(KV, D) / 2
                                              : cpu::attentionPackedKeysSizeF32(KV, D);
        const int64_t vPackFloats = !ownTiles ? (packKV ? KV * Dv : 0)
                                    : bf16    ? cpu::attentionPackedValuesSize(KV, Dv) / 2
                                              : cpu::attentionPackedValuesSizeF32(KV, Dv);
        const int64_t sizes[] = {rows * lds, rows, rows, packQ ? rows * D : 0, kPackFloats,
                                 vPackFloats, ownTiles ? rows : packO || bf16 ? rows * Dv : 0, bf16Mm ? (rows * ldp + 1) / 2 : 0,
                                 gatherMask ? KV : 0};
        constexpr int kParts = 9;
        int64_t total = 0;
        for (int64_t n : sizes) total += pad(n);
        float* buf = static_cast<float*>(threadScratch(kScoreSlot, static_cast<size_t>(total) * sizeof(float)));
        float* parts[kParts];
        for (int i = 0; i < kParts; ++i) {
          parts[i] = buf;
          buf += pad(sizes[i]);
        }
        float *tile = parts[0], *rowMax = parts[1], *rowSum = parts[2], *oPack = parts[6], *maskRow = parts[8];
        char *qPack = reinterpret_cast<char*>(parts[3]), *kPack = reinterpret_cast<char*>(parts[4]),
             *vPack = reinterpret_cast<char*>(parts[5]), *pTile = reinterpret_cast<char*>(parts[7]);
        int64_t packedB = -1, packedG = -1;  // whose k/v the packs hold (static schedule: runs of blocks)
        // Memory objects made once per thread and call; each block only swaps pointers.
        struct Mems {
          dnnl::memory qm, km, sm, vm, om, sp, pm;  // pm: bf16 only
        };
        std::optional<Mems> mems[2];
        for (int t = 0; t < 2; ++t) {
          if (!qk[t]) continue;
          mems[t] = Mems{dnnl::memory(qk[t]->src, eng, nullptr), dnnl::memory(qk[t]->wei, eng, nullptr),
                         dnnl::memory(qk[t]->dst, eng, tile), dnnl::memory(pv[t]->wei, eng, nullptr),
                         dnnl::memory(pv[t]->dst, eng, bf16 ? oPack : nullptr), dnnl::memory(),
                         bf16Mm ? dnnl::memory(pv[t]->src, eng, pTile) : dnnl::memory()};
          if (scratch > 0) {
            dnnl::memory::desc spMd({static_cast<int64_t>(scratch)}, dt::u8, tag::a);
            mems[t]->sp = dnnl::memory(spMd, eng, threadScratch(0, scratch));
          }
        }
        // The row step of a block: scale, mask, softmax of each score row (tile row stride lds),
        // bf16 probabilities at row stride ldp.
        auto softmaxRows = [&](int64_t b, int64_t h, int64_t r0, int64_t n) {
          const char* maskBase =
              p.hasMask ? mask + (b * p.maskStrides[0] + h * p.maskStrides[1] + r0 * p.maskStrides[2]) * E : nullptr;
          for (int64_t i = 0; i < n; ++i) {
            // Causal (top-left aligned, as ATen's is_causal): query r0 + i sees keys 0..r0 + i; the
            // rest of its row gets weight 0.
            const int64_t seen = p.causal ? std::min(p.kvSeq, r0 + i + 1) : p.kvSeq;
            float* row = tile + i * lds;
            const float* maskOfRow = nullptr;
            const uint16_t* bf16MaskOfRow = nullptr;
            if (maskBase) {
              const char* m0 = maskBase + i * p.maskStrides[2] * E;
              if (gatherMask) {  // one value or the row, f32 (bf16 widens exactly), keys adjacent
                // A mask the same for every query row (transformers' padding mask, [b, 1, 1, kv]
                // expanded) is gathered once per block, not once per row.
                const bool sameForRows = p.maskStrides[2] == 0;
                if (!sameForRows || i == 0) {
                  const int64_t count = maskKeyStride == 0 ? 1 : sameForRows ? p.kvSeq : seen;
                  if (bf16) {
                    const uint16_t* mb = reinterpret_cast<const uint16_t*>(m0);
                    for (int64_t j = 0; j < count; ++j) {
                      maskRow[j] = rowwise::detail::bf16ToFloat(mb[j * maskKeyStride]);
                    }
                  } else {
                    const float* mf = reinterpret_cast<const float*>(m0);
                    for (int64_t j = 0; j < count; ++j) maskRow[j] = mf[j * maskKeyStride];
                  }
                }
                maskOfRow = maskRow;
              } else if (bf16) {
                bf16MaskOfRow = reinterpret_cast<const uint16_t*>(m0);
              } else {
                maskOfRow = reinterpret_cast<const float*>(m0);
              }
            }
            // bf16: the row step writes P rounded to bf16 for the matmul itself (exp values in
            // [0, 1]; one pass less than a reorder of the f32 tile afterwards).
            uint16_t* pRow = bf16Mm ? reinterpret_cast<uint16_t*>(pTile) + i * ldp : nullptr;
            rowMax[i] = bf16MaskOfRow
                            ? cpu::attentionSoftmaxRowBf16Mask(row, bf16MaskOfRow, seen, p.scale, &rowSum[i], pRow)
                            : cpu::attentionSoftmaxRow(row, maskOfRow, maskKeyStride == 0 ? 0 : 1, seen, p.scale,
                                                       &rowSum[i], pRow);
            if (bf16Mm) {
              std::fill(pRow + seen, pRow + ldp, uint16_t{0});
            } else {
              // Widened bf16: the probabilities P·V multiplies are the bf16 ones (the sum stays the
              // float values', as on the bf16 path).
              if (widened) cpu::attentionRoundRowToBf16(row, seen);
              std::fill(row + seen, row + p.kvSeq, 0.f);
            }
          }
        };
        // The block's output rows oRows (row stride ldFrom, f32; null: already written) times
        // 1 / sum into the caller's, and the rows' logsumexp.
        auto finishRows = [&](int64_t b, int64_t h, int64_t r0, int64_t n, const float* oRows, int64_t ldFrom,
                              char* oCaller) {
          // Normalize the (short) output rows instead of the (long) probability rows; times the
          // reciprocal, as ATen's kernel does. A packed output is scaled on its way to the caller's
          // strided rows; bf16 is rounded once (nearest even) on its way there.
          for (int64_t i = 0; oRows && i < n; ++i) {
            // A fully masked row (sum 0) stays 0, as ATen's kernel leaves it (not 0 * 1/0 = NaN).
            const float r = rowSum[i] > 0.f ? 1.f / rowSum[i] : 0.f;
            const float* from = oRows + i * ldFrom;
            if (bf16) {
              cpu::attentionScaleRowToBf16(from, r, Dv, reinterpret_cast<uint16_t*>(oCaller) + i * p.outStrides[2]);
            } else {
              cpu::attentionScaleRow(from, r, Dv, reinterpret_cast<float*>(oCaller) + i * p.outStrides[2]);
            }
          }
          if (p.logsumexp) {
            float* l = lse + b * p.lseStrides[0] + h * p.lseStrides[1] + r0 * p.lseStrides[2];
            for (int64_t i = 0; i < n; ++i) {
              // ATen 2.13 reports 0 for a fully masked row (measured), not -inf.
              l[i * p.lseStrides[2]] = rowSum[i] > 0.f ? rowMax[i] + std::log(rowSum[i]) : 0.f;
            }
          }
        };
#pragma omp for schedule(static)
        for (int64_t u = 0; u < units; ++u) {
          if (failed.load(std::memory_order_relaxed)) continue;
          const int64_t blk = u % blocks, bh = u / blocks;
          const int64_t b = bh / p.heads, h = bh % p.heads;
          const int64_t r0 = blk * rows;
          const int64_t n = std::min(rows, p.seq - r0);
          const int t = n == rows ? 0 : 1;
          const char* qBlk = q + (b * p.qStrides[0] + h * p.qStrides[1] + r0 * p.qStrides[2]) * E;
          const int64_t g = h / group;
          const char* kHead = k + (b * p.kStrides[0] + g * p.kStrides[1]) * E;
          const char* vHead = v + (b * p.vStrides[0] + g * p.vStrides[1]) * E;
          char* oCaller = out + (b * p.outStrides[0] + h * p.outStrides[1] + r0 * p.outStrides[2]) * E;
          // Causal: the block's last row sees keys 0..r0 + n - 1, so no later key is multiplied.
          const int64_t kvUsed = p.causal ? std::min(KV, r0 + n) : KV;
          if (ownTiles) {
            // K and V packed once per run of blocks of one (batch, kv head); the scores; the row
            // step (f32: the probabilities in place, 0 past each row's last key; bf16: into
            // pTile); the output rows straight into the caller's, each times 1 / sum (0 for a
            // fully masked row, as finishRows), oPack holding the row factors.
            const bool repack = b != packedB || g != packedG;
            packedB = b, packedG = g;
            if (bf16) {
              auto* kPacked = reinterpret_cast<uint16_t*>(kPack);
              auto* vPacked = reinterpret_cast<uint16_t*>(vPack);
              if (repack) {
                cpu::attentionPackKeysBf16(reinterpret_cast<const uint16_t*>(kHead), p.kStrides[2], KV, D, kPacked);
                cpu::attentionPackValuesBf16(reinterpret_cast<const uint16_t*>(vHead), p.vStrides[2], KV, Dv, vPacked);
              }
              cpu::attentionScoresBf16(reinterpret_cast<const uint16_t*>(qBlk), p.qStrides[2], n, D, kPacked, kvUsed,
                                       tile, lds);
              softmaxRows(b, h, r0, n);
              for (int64_t i = 0; i < n; ++i) oPack[i] = rowSum[i] > 0.f ? 1.f / rowSum[i] : 0.f;
              cpu::attentionValuesBf16(reinterpret_cast<const uint16_t*>(pTile), ldp, n, kvUsed, vPacked, KV, Dv, oPack,
                                       reinterpret_cast<uint16_t*>(oCaller), p.outStrides[2]);
            } else {
              auto* kPacked = reinterpret_cast<float*>(kPack);
              auto* vPacked = reinterpret_cast<float*>(vPack);
              if (repack) {
                cpu::attentionPackKeysF32(reinterpret_cast<const float*>(kHead), p.kStrides[2], KV, D, kPacked);
                cpu::attentionPackValuesF32(reinterpret_cast<const float*>(vHead), p.vStrides[2], KV, Dv, vPacked);
              }
              cpu::attentionScoresF32(reinterpret_cast<const float*>(qBlk), p.qStrides[2], n, D, kPacked, kvUsed, tile,
                                      lds);
              softmaxRows(b, h, r0, n);
              for (int64_t i = 0; i < n; ++i) oPack[i] = rowSum[i] > 0.f ? 1.f / rowSum[i] : 0.f;
              cpu::attentionValuesF32(tile, lds, n, kvUsed, vPacked, KV, Dv, oPack, reinterpret_cast<float*>(oCaller),
                                      p.outStrides[2]);
            }
            finishRows(b, h, r0, n, nullptr, 0, nullptr);  // the logsumexp only
            continue;
          }
          Mems& m = *mems[t];
          if (widened) {  // bf16 rows widened into the float32 copy
            for (int64_t i = 0; i < n; ++i) {
              cpu::widenBf16(reinterpret_cast<const uint16_t*>(qBlk + i * p.qStrides[2] * E),
                             reinterpret_cast<float*>(qPack) + i * D, D);
            }
            qBlk = qPack;
          } else if (packQ) {
            for (int64_t i = 0; i < n; ++i) std::copy_n(qBlk + i * p.qStrides[2] * E, D * E, qPack + i * D * E);
            qBlk = qPack;
          }
          m.qm.set_data_handle(const_cast<char*>(qBlk));
          if (packKV) {
            if (b != packedB || g != packedG) {
              for (int64_t j = 0; j < KV; ++j) {
                if (widened) {
                  cpu::widenBf16(reinterpret_cast<const uint16_t*>(kHead + j * p.kStrides[2] * E),
                                 reinterpret_cast<float*>(kPack) + j * D, D);
                  cpu::widenBf16(reinterpret_cast<const uint16_t*>(vHead + j * p.vStrides[2] * E),
                                 reinterpret_cast<float*>(vPack) + j * Dv, Dv);
                } else {
                  std::copy_n(kHead + j * p.kStrides[2] * E, D * E, kPack + j * D * E);
                  std::copy_n(vHead + j * p.vStrides[2] * E, Dv * E, vPack + j * Dv * E);
                }
              }
              packedB = b, packedG = g;
            }
            kHead = kPack, vHead = vPack;
          }
          m.km.set_data_handle(const_cast<char*>(kHead));
          m.vm.set_data_handle(const_cast<char*>(vHead));
          // f32 rows the P·V matmul writes: the caller's (f32, dense rows) or a packed block.
          float* o = packO || bf16 ? oPack : reinterpret_cast<float*>(oCaller);
          if (!bf16) m.om.set_data_handle(o);
          std::unordered_map<int, dnnl::memory> args{
              {DNNL_ARG_SRC, m.qm}, {DNNL_ARG_WEIGHTS, m.km}, {DNNL_ARG_DST, m.sm}};
          if (scratch > 0) args.emplace(DNNL_ARG_SCRATCHPAD, m.sp);
          qk[t]->prim.execute(s, args);
          s.wait();
          softmaxRows(b, h, r0, n);
          if (bf16Mm) {
            args[DNNL_ARG_SRC] = m.pm;
          } else {
            args[DNNL_ARG_SRC] = m.sm;
          }
          args[DNNL_ARG_WEIGHTS] = m.vm;
          args[DNNL_ARG_DST] = m.om;
          pv[t]->prim.execute(s, args);
          s.wait();
          finishRows(b, h, r0, n, packO || bf16 ? oPack : o, packO || bf16 ? Dv : p.outStrides[2], oCaller);
        }
      } catch (const std::exception& e) {
        failed = true;
        std::lock_guard<std::mutex> lock(errorMu);
        if (error.empty()) error = e.what();
      }
    }
    if (failed) return Status(StatusCode::kInternal, "attention: " + error);
    return Status::ok();
  }

  std::string implInfo() const override {
    if (ownTiles) {
      const std::string t = p.bf16 ? "own bf16 tiles" : "own f32 tiles";
      return "attention: qk " + t + " / pv " + t + ", rows " + std::to_string(rows);
    }
    return "attention: qk " + qk[0]->impl + " / pv " + pv[0]->impl + ", rows " + std::to_string(rows) +
           (widened ? ", f32 on bf16io" : "");
  }
  int64_t blockRows() const override { return rows; }
};

}  // namespace

StatusOr<std::unique_ptr<AttentionKernel>> createAttention(const AttentionParams& p) {
  if (p.batch < 1 || p.heads < 1 || p.seq < 1 || p.kvSeq < 1 || p.headDim < 1 || p.valueDim < 1) {
    return invalidArgument("attention: every size must be >= 1");
  }
  if (p.kvHeads < 0 || (p.kvHeads > 0 && p.heads % p.kvHeads != 0)) {
    return invalidArgument("attention: heads must be a multiple of kvHeads");
  }
  if (p.qStrides[3] != 1 || p.kStrides[3] != 1 || p.vStrides[3] != 1 || p.outStrides[3] != 1) {
    return unimplemented("attention: the last dim of q, k, v and out must be dense");
  }
  return guarded("attention", [&]() -> StatusOr<std::unique_ptr<AttentionKernel>> {
    auto kern = std::make_unique<OnednnAttention>();
    kern->p = p;
    int64_t rows = p.blockRows > 0 ? p.blockRows : kScoreTileBytes / (p.kvSeq * static_cast<int64_t>(sizeof(float)));
    rows = std::clamp<int64_t>(rows, 8, 512);
    if (p.blockRows <= 0 && rows > 16) rows -= rows % 16;  // whole register tiles for the matmuls
    rows = std::min(rows, p.seq);
    kern->rows = rows;
    // Measured (kernels/bench/attention_bench.cpp, Zen 5, 1 thread): with rows of stride H·D (the
    // heads' permuted views) oneDNN 3.2 picks gemm:jit for both matmuls, 23.1 ms at [1,6,1500,64]
    // and 0.342 ms at [1,12,128,64]; with dense rows brg:avx512_core, 21.1 and 0.321 ms. Copying
    // the rows costs O(S·D + KV·D) per head against O(S·KV·D) of matmul work.
    kern->packQ = p.qStrides[2] != p.headDim;
    kern->packKV = p.kStrides[2] != p.headDim || p.vStrides[2] != p.valueDim;
    kern->packO = p.outStrides[2] != p.valueDim;
    const int64_t tail = p.seq % rows;
    kern->widened = p.bf16 && (p.widenBf16 || !capabilities().onednnNativeBf16());
    const dt io = p.bf16 && !kern->widened ? dt::bf16 : dt::f32;
    kern->esize = p.bf16 ? 2 : sizeof(float);
    // AVX-512 (bf16: AVX512-BF16): the own tiles (measured against oneDNN's matmuls:
    // kernels/README.md, Attention).
    // VERIFUSE_ATTENTION_TILES=0 keeps oneDNN's matmuls (tests, benchmarking).
    const char* tilesKnob = std::getenv("VERIFUSE_ATTENTION_TILES");
    // K is packed by 32-bit gathers whose offsets (16 key rows) must fit in int32.
    const bool gatherable = p.kStrides[2] >= 0 && p.kStrides[2] < (int64_t{1} << 31) / 64;
    kern->ownTiles = (p.bf16 ? !kern->widened && cpu::attentionTilesBf16Available() : cpu::attentionTilesF32Available()) &&
                     gatherable && !(tilesKnob && std::string(tilesKnob) == "0");
    if (kern->ownTiles) {
      kern->packQ = kern->packKV = kern->packO = false;
      return std::unique_ptr<AttentionKernel>(std::move(kern));
    }
    if (kern->widened) kern->packQ = kern->packKV = kern->packO = true;  // the copies widen
    for (int t = 0; t < 2; ++t) {
      const int64_t n = t == 0 ? rows : tail;
      if (n == 0) continue;
      dnnl::memory::desc qMd({n, p.headDim}, io, {p.headDim, 1});
      dnnl::memory::desc kMd({p.headDim, p.kvSeq}, io, {1, p.headDim});
      dnnl::memory::desc sMd({n, p.kvSeq}, dt::f32, {p.kvSeq, 1});
      dnnl::memory::desc pMd({n, p.kvSeq}, io, {p.kvSeq, 1});
      dnnl::memory::desc vMd({p.kvSeq, p.valueDim}, io, {p.valueDim, 1});
      dnnl::memory::desc oMd({n, p.valueDim}, dt::f32, {p.valueDim, 1});
      kern->qk[t] = makeMatmul(qMd, kMd, sMd);
      kern->pv[t] = makeMatmul(pMd, vMd, oMd);
      if (kern->qk[t]->impl.rfind("ref", 0) == 0 || kern->pv[t]->impl.rfind("ref", 0) == 0) {
        return unimplemented("attention: oneDNN has only a reference matmul for these strides");
      }
    }
    return std::unique_ptr<AttentionKernel>(std::move(kern));
  });
}

}  // namespace verifuse::kernels
