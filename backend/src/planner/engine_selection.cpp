// Engine selection: which engines may run a node (the legality table the partitioner and the
// planner share), what each partition is before any kernel exists (its size, whether its shapes
// are static, whether an option fixes its engine), whether the tuner will time it, and the engine
// it gets when it is not timed.
#include "planner/planner.h"

#include "verifuse/ir/op_schema.h"
#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/gemm.h"

namespace verifuse::runtime {

int engineClassOf(const ir::Node& n) {
  if (rules::isFusedOp(n)) return 1;
  if (n.op == kRowwiseOp) return 2;
  if (isAttentionEngineOp(n)) return 3;
  return 0;
}

}  // namespace verifuse::runtime

namespace verifuse::planner {

using ir::ValueId;
using runtime::isAttentionEngineOp;
using runtime::kRowwiseOp;

/// Multiply-adds of a fused node from the IR's static shapes (0 when unknown): decides, before
/// any kernel exists, whether its partition will be timed (and so must keep its weights a while).
double estimateMacs(const ir::Graph& g, const ir::Node& n) {
  if (isAttentionEngineOp(n)) {
    // Q·K^T and P·V: B·H·S·KV·(D + Dv).
    const ir::Value& q = g.value(static_cast<ValueId>(ir::operand(n, ir::AttentionQkv::query).i));
    const ir::Value& k = g.value(static_cast<ValueId>(ir::operand(n, ir::AttentionQkv::key).i));
    const ir::Value& v = g.value(static_cast<ValueId>(ir::operand(n, ir::AttentionQkv::value).i));
    if (!q.hasStaticShape() || !k.hasStaticShape() || !v.hasStaticShape() || q.shape.size() != 4 ||
        k.shape.size() != 4 || v.shape.size() != 4) {
      return 0;
    }
    return static_cast<double>(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]) *
           static_cast<double>(q.shape[3] + v.shape[3]);
  }
  const ir::Arg* weight = rules::isFusedOp(n) ? ir::namedOperand(n, "weight") : nullptr;
  if (!weight || !weight->isConstant()) return 0;
  const auto& w = g.constants()[static_cast<size_t>(weight->i)];
  const ir::Value& out = g.value(n.outputs[0]);
  if (!out.hasStaticShape() || w.sizes.empty() || w.sizes[0] == 0) return 0;
  double outElems = 1;
  for (int64_t d : out.shape) outElems *= static_cast<double>(d);
  return outElems * static_cast<double>(w.numel() / w.sizes[0]);
}

namespace {

/// A linear's K (its input's last dim), or -1 when unknown or not a linear.
int64_t linearK(const ir::Graph& g, const ir::Node& n) {
  if (n.op != rules::kLinearOp) return -1;
  const ir::Arg& input = ir::operand(n, ir::FusedLinear::x);
  if (!input.isValue()) return -1;
  const ir::Value& x = g.value(static_cast<ValueId>(input.i));
  return x.shape.empty() ? -1 : x.shape.back();
}

/// The rows a linear multiplies (the product of its input's leading sizes), or -1 when unknown or not a linear.
int64_t linearRows(const ir::Graph& g, const ir::Node& n) {
  if (n.op != rules::kLinearOp) return -1;
  const ir::Arg& input = ir::operand(n, ir::FusedLinear::x);
  if (!input.isValue()) return -1;
  const ir::Value& x = g.value(static_cast<ValueId>(input.i));
  if (x.shape.empty()) return -1;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < x.shape.size(); ++d) {
    if (x.shape[d] < 0) return -1;
    rows *= x.shape[d];
  }
  return rows;
}

/// A linear whose epilogue has a GELU and whose K is at most 512. The own GEMM's GELU is accurate
/// to a few ulp and costs about 4x what oneDNN's cheaper approximation does, which only shows when
/// K is short (kernels/bench/gemm_bench --epilogue bias_gelu, Zen 5, 1 thread: Whisper
/// 1500x384x1536 188 vs 232 GFLOP/s, 128x512x1408 205 vs 227; level at K = 768, ahead beyond).
bool geluOnShortK(const ir::Graph& g, const ir::Node& n) {
  auto ops = rules::fusedPostOps(n);
  if (!ops.isOk()) return false;
  bool gelu = false;
  for (const rules::PostOpSpec& op : *ops) gelu = gelu || op.kind.rfind("gelu", 0) == 0;
  const int64_t k = linearK(g, n);
  return gelu && k > 0 && k <= 512;
}

}  // namespace

StatusOr<bool> selectEngines(PlanBuild& b) {
  const ir::Graph& graph = b.graph;
  const CompileOptions& options = b.options;
  std::vector<PartitionFacts>& facts = b.facts;
  facts.assign(b.specs.size(), PartitionFacts{});
  // Which partitions will be timed: static shapes, an engine choice to make, small enough.
  b.tuning = options.autotune && (options.tuningDb != nullptr || options.replayTunings != nullptr) && options.useOnednn;
  for (const Unit& u : b.units) {
    if (u.partition < 0) continue;
    PartitionFacts& f = facts[static_cast<size_t>(u.partition)];
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      f.macs += estimateMacs(graph, n);
      // the row engine's output; every other op's first operand (its input or query)
      const ValueId shaped = n.op == kRowwiseOp ? n.outputs[0] : static_cast<ValueId>(ir::selfOperand(n).i);
      f.staticShapes = f.staticShapes && graph.value(shaped).hasStaticShape();
    }
  }
  // CompileOptions::forcedAttention = onednn|aten: every SDPA partition on that engine, untimed,
  // whatever its size (an op that cannot run oneDNN still takes ATen); forcedLinear = gemm|onednn
  // likewise every partition of linears (a member that cannot run it falls back as usual).
  const std::string& forcedAttention = options.forcedAttention;
  const std::string& forcedLinear = options.forcedLinear;
  for (const Unit& u : b.units) {
    if (u.partition < 0) continue;
    bool linears = forcedLinear == "gemm" || forcedLinear == "onednn";
    for (size_t k : u.nodes) linears = linears && graph.nodes()[k].op == rules::kLinearOp;
    const bool attention = (forcedAttention == "onednn" || forcedAttention == "aten") && u.nodes.size() == 1 &&
                           isAttentionEngineOp(graph.nodes()[u.nodes[0]]);
    facts[static_cast<size_t>(u.partition)].forced = attention || linears;
  }
  // float32 linears of at most 4 rows (a decode step at batch <= 4) stream their weight once and
  // do little else: the own GEMM's packed panels read it faster than oneDNN's packed inner product
  // at every such shape measured (verifuse_gemm_bench, Zen 4, 1 and 2 threads: 1x512x32000 12.6 vs
  // 8.1 GFLOP/s, 4x512x32000 44.4 vs 43.6, 1x512x1536 37.9 vs 32.6, 4x1376x512 107 vs 94; at 8
  // rows oneDNN leads on 8x512x32000, 83 vs 70), while timing them would pack every candidate's
  // copy of the weight: Llama decode's plan spent 0.25 of 0.30 s on it, most for its 65 MB
  // lm_head. These take the own GEMM untimed (not under dtype="bfloat16": its bf16 GEMM does not
  // take so few rows, and oneDNN and ATen are timed as before).
  // A bf16 model's linears of at most 4 rows too: a timing repeats the call with the weights hot
  // in the last-level cache, where oneDNN's brgemm computes faster (Qwen2.5-0.5B's gate and up
  // projections, 1x896x4864, timed 0.26-0.31 ms against the own GEMM's 0.32-0.36), but a decode
  // step streams every weight from memory, where oneDNN took ~0.42 ms each and the own GEMM is
  // ahead: that model's bf16 decode 19.4-20.7 -> 22.1-23.5 tok/s with the own GEMM throughout
  // (Zen 4, 1 thread, same processes alternated).
  const bool bf16Gemm = kernels::gemm::availableBf16();
  for (const Unit& u : b.units) {
    if (u.partition < 0) continue;
    bool few = options.ownGemm && !options.bf16;
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      const int64_t rows = n.op == rules::kLinearOp ? linearRows(graph, n) : -1;
      bool ok = rows >= 1 && rows <= 4 && !geluOnShortK(graph, n);
      for (ValueId out : n.outputs) {
        const ir::DType t = graph.value(out).dtype;
        ok = ok && (t == ir::DType::Float32 || (t == ir::DType::BFloat16 && bf16Gemm));
      }
      few = few && ok;
    }
    facts[static_cast<size_t>(u.partition)].fewRowLinears = few;
  }
  for (PartitionFacts& f : facts) {
    f.timed = b.tuning && f.staticShapes && f.macs <= options.tuneMaxMacs && !f.forced && !f.fewRowLinears;
  }
  // The engine a partition gets when it is not timed: tiny ones pay more for a kernel call and
  // layout overhead than they gain (ATen); float32 linears take the own GEMM (measured faster than
  // oneDNN 3.2's inner product on AVX2 and on AVX-512: kernels/README.md); everything else oneDNN. A member
  // that cannot run the partition's engine falls back to oneDNN, then the own GEMM (a widened bf16
  // linear), then ATen.
  for (const Unit& u : b.units) {
    if (u.partition < 0) continue;
    const size_t p = static_cast<size_t>(u.partition);
    PartitionFacts& f = facts[p];
    bool allLinear = true, allRows = true, anyBf16 = false, shortGelu = false, veryShortK = false;
    for (size_t k : u.nodes) {
      const ir::Node& n = graph.nodes()[k];
      allLinear = allLinear && n.op == rules::kLinearOp;
      shortGelu = shortGelu || (n.op == rules::kLinearOp && geluOnShortK(graph, n));
      const int64_t inK = n.op == rules::kLinearOp ? linearK(graph, n) : -1;
      veryShortK = veryShortK || (inK > 0 && inK <= 384);
      allRows = allRows && n.op == kRowwiseOp;
      for (ValueId out : n.outputs) anyBf16 = anyBf16 || graph.value(out).dtype == ir::DType::BFloat16;
    }
    // A bf16 model's linears on a CPU without bf16 instructions: oneDNN has only reference bf16
    // kernels there (no candidate), the own GEMM's widening variant is the engine; the K <= 384 and
    // short-GELU exceptions below are about oneDNN's native bf16 and GELU kernels.
    const bool widenedBf16 = anyBf16 && !kernels::capabilities().onednnNativeBf16();
    const ir::Node& first = graph.nodes()[u.nodes[0]];
    if (u.nodes.size() == 1 && isAttentionEngineOp(first)) {
      // SDPA: oneDNN where it was measured faster than ATen's fused kernel (Zen 5, 1 thread, q/k/v
      // permuted views, compiled call each way: [1,12,16,64] ATen 0.038 ms vs 0.045, [1,12,32,64]
      // 0.074 vs 0.064, [1,12,64,64] 0.202 vs 0.131, BERT's [1,12,128,64] 0.66 vs 0.35,
      // [1,6,1500,64] 39-40 vs 19.3 ms): the kernel pays two matmul calls and some copies per
      // (batch, head, block), so it needs at least 2^17 multiply-adds per (batch, head).
      // Below AVX-512 the float32 attention engine has no own tiles and calls oneDNN's matmuls
      // per block: measured in the model on AVX2 (SPR capped, 1 thread), ATen's kernel is ahead
      // at Whisper's [1,6,1500,64], too big to time (341 vs 366 ms for its 4 layers), so an
      // untimed float32 SDPA takes ATen on that tier. Timed ones are decided by their timing
      // (BERT's [1,12,128,64] on its real layout: the engine 1.21 ms, ATen 1.36).
      const ir::Value& q = graph.value(static_cast<ValueId>(ir::operand(first, ir::AttentionQkv::query).i));
      const double heads = q.shape.size() == 4 ? static_cast<double>(q.shape[0] * q.shape[1]) : 1.0;
      const bool f32WithoutTiles = q.dtype == ir::DType::Float32 && !kernels::capabilities().attentionOwnTilesF32();
      f.heuristic = f.staticShapes && f.macs >= 131072.0 * heads && !f32WithoutTiles ? Engine::kOnednn : Engine::kAten;
      if (f.forced) f.heuristic = forcedAttention == "onednn" ? Engine::kOnednn : Engine::kAten;
    } else if (allRows) {
      f.heuristic = Engine::kRowwise;
    } else if (f.staticShapes && f.macs < 4096.0 * static_cast<double>(u.nodes.size())) {
      f.heuristic = Engine::kAten;
    } else if (allLinear && options.ownGemm &&
               (f.fewRowLinears || widenedBf16 || (!shortGelu && !(anyBf16 && veryShortK)))) {
      // Also with a GELU epilogue at K > 512 (geluOnShortK says why not below): BERT-base (b1,
      // 1 thread, Zen 5), whose fc + GELU + fc partitions are too big to time, ran 109.4 ms per
      // call with them on oneDNN (bench run at f4187ce) and 103.7 ms on the own GEMM with its
      // 16-lane GELU (run at 7ccd1e1). bf16 too (a bf16 model, or dtype="bfloat16"): oneDNN's
      // bf16 inner product drops to 410-440 GFLOP/s at some M (584, 1000, 1016, 1576 = ViT-base
      // at batch 8, at K = 768) where the own bf16 GEMM holds 490-520 (gemm_bench --bf16
      // --shape), and elsewhere the two are level but for the GELU epilogue, 3% behind at K = 768
      // (470 vs 483 GFLOP/s with geluErfForBf16). ViT-base bf16 batch 8: 704 -> 624 ms per call.
      // Except a bf16 partition with a member at K <= 384, where oneDNN keeps a 2% lead without
      // any GELU (Whisper's 12000x384x1152 and 384x384 at batch 8: the model's linears 1.7% and the
      // whole model 3% slower on the own GEMM; level at K = 512, ahead from 768). Not at decode
      // sizes (fewRowLinears): those stream their weights, where the own GEMM is ahead.
      f.heuristic = Engine::kGemm;
    }
    if (allLinear && f.forced) f.heuristic = forcedLinear == "gemm" ? Engine::kGemm : Engine::kOnednn;
  }
  return !facts.empty();  // every partition has its engine or is marked for timing
}

}  // namespace verifuse::planner
