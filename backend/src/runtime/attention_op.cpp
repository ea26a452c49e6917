// SDPA as an engine op: the attention kernel (kernels/attention.h) or ATen's own kernel.
#include "runtime/fused_ops.h"
#include "runtime/fused_support.h"

#include "verifuse/ir/op_schema.h"
#include "verifuse/kernels/attention.h"
#include "verifuse/kernels/capabilities.h"

#include <ATen/ATen.h>

namespace verifuse::runtime {

namespace {

using Sdpa = ir::FlashAttentionCpu;  // kAttentionOp's operands

// ---- attention -----------------------------------------------------------------------------------

/// aten::_scaled_dot_product_flash_attention_for_cpu as an engine op. Engines: ATen (the node
/// itself through the dispatcher: eager's computation, the reference and the fallback) and oneDNN
/// (kernels::createAttention: oneDNN matmuls around a vectorized row softmax). Why both: ATen's
/// fused kernel calls MKL's sgemm, which takes no AVX-512 path on AMD CPUs; the tuner times the
/// partition on each and keeps the faster. A kernel per stride set of (q, k, v, mask), made on
/// first use (the projections' permuted views are read in place).
class AttentionOp final : public FusedOp {
 public:
  Engine engine() const override { return engine_; }
  bool canRun(Engine e) const override { return e == Engine::kAten || (e == Engine::kOnednn && onednnOk_); }
  void setEngine(Engine e) override { engine_ = canRun(e) ? e : Engine::kAten; }
  void releaseWeights() override {}
  double macs() const override { return macs_; }
  std::string implInfo() const override {
    return kernels_.info();
  }
  // The "oneDNN" engine of SDPA is the attention kernel (kernels/attention.h: row steps and, on
  // AVX-512, its own matmul tiles), not one oneDNN primitive.
  std::string runsOn() const override { return engine_ == Engine::kOnednn ? "attention engine" : "ATen"; }
  size_t numOutputs() const override { return 2; }

  at::Tensor run(const std::vector<at::Tensor>& in, bool exact) const override {
    return runAll(exact ? Engine::kAten : engine_, in).at(0);
  }
  at::Tensor runOn(Engine e, const std::vector<at::Tensor>& in) const override { return runAll(e, in).at(0); }

  std::vector<at::Tensor> runAll(Engine e, const std::vector<at::Tensor>& in) const override {
    if (e == Engine::kOnednn && onednnOk_) {
      std::vector<at::Tensor> out;
      if (runKernel(in, out)) return out;
    }
    return runAten(in);
  }

  double dropout_ = 0;
  bool causal_ = false;
  bool hasMask_ = false;
  std::optional<double> scale_;
  bool lseRead_ = true;
  bool onednnOk_ = false;
  Engine engine_ = Engine::kAten;
  double macs_ = 0;
  std::vector<int64_t> qShape_, kShape_, vShape_;
  /// q, k, v, the mask and the output: float32, or bfloat16 for a bf16 model (the logsumexp is
  /// float32 either way, as ATen's).
  at::ScalarType dtype_ = at::kFloat;

 private:
  std::vector<at::Tensor> runAten(const std::vector<at::Tensor>& in) const {
    std::optional<at::Tensor> mask;
    if (hasMask_) mask = in.at(3);
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(in.at(0), in.at(1), in.at(2), dropout_, causal_,
                                                                       mask, scale_);
    return {out, lse};
  }

  /// The mask's element strides broadcast to [B,H,S,KV] (0 along broadcast dims); false if its
  /// shape does not broadcast.
  static bool maskStrides(const at::Tensor& m, const std::array<int64_t, 4>& target, std::array<int64_t, 4>& out) {
    if (m.dim() > 4) return false;
    const int64_t off = 4 - m.dim();
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t src = t - off;
      if (src < 0 || m.size(src) == 1) {
        out[static_cast<size_t>(t)] = 0;
      } else if (m.size(src) == target[static_cast<size_t>(t)]) {
        out[static_cast<size_t>(t)] = m.stride(src);
      } else {
        return false;
      }
    }
    return true;
  }

  /// The attention kernel, when it takes these inputs; false: use ATen.
  bool runKernel(const std::vector<at::Tensor>& in, std::vector<at::Tensor>& out) const {
    if (in.size() != (hasMask_ ? 4u : 3u)) return false;
    for (const at::Tensor& t : in) {
      if (!t.device().is_cpu() || t.layout() != at::kStrided || t.scalar_type() != dtype_) return false;
    }
    const at::Tensor &q = in[0], &k = in[1], &v = in[2];
    if (q.sizes() != c10::IntArrayRef(qShape_) || k.sizes() != c10::IntArrayRef(kShape_) ||
        v.sizes() != c10::IntArrayRef(vShape_)) {
      return false;
    }
    const std::array<int64_t, 4> target{qShape_[0], qShape_[1], qShape_[2], kShape_[2]};
    std::array<int64_t, 4> ms{};
    if (hasMask_ && !maskStrides(in[3], target, ms)) return false;
    // ATen's op returns empty_like(q): dense, in q's dim order.
    const auto outStrides = at::infer_dense_strides(q.sizes(), q.strides());
    c10::SmallVector<int64_t, 20> key;
    key.append(q.strides().begin(), q.strides().end());
    key.append(k.strides().begin(), k.strides().end());
    key.append(v.strides().begin(), v.strides().end());
    key.append(ms.begin(), ms.end());
    const kernels::AttentionKernel* kernel = kernels_.get(key, [&] {
        kernels::AttentionParams p;
        p.batch = qShape_[0], p.heads = qShape_[1], p.seq = qShape_[2], p.kvSeq = kShape_[2];
        p.headDim = qShape_[3], p.valueDim = vShape_[3], p.kvHeads = kShape_[1];
        std::copy_n(q.strides().begin(), 4, p.qStrides.begin());
        std::copy_n(k.strides().begin(), 4, p.kStrides.begin());
        std::copy_n(v.strides().begin(), 4, p.vStrides.begin());
        std::copy_n(outStrides.begin(), 4, p.outStrides.begin());
        p.hasMask = hasMask_, p.maskStrides = ms;
        // ATen's default: 1/sqrt(D) in double, used as a float.
        p.scale = static_cast<float>(scale_ ? *scale_ : 1.0 / std::sqrt(static_cast<double>(qShape_[3])));
        p.logsumexp = lseRead_;
        p.causal = causal_;
        p.lseStrides = {qShape_[2] * qShape_[1], 1, qShape_[1]};
        p.bf16 = dtype_ == at::kBFloat16;
        auto made = kernels::createAttention(p);
        if (!made.isOk()) {
          return std::make_pair(std::unique_ptr<kernels::AttentionKernel>(), "aten (" + made.status().toString() + ")");
        }
        std::string info = (*made)->implInfo();
        return std::make_pair(std::move(made).value(), std::move(info));
    });
    if (kernel == nullptr) return false;
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
    at::Tensor o = emptyStridedActivation(q.sizes(), outStrides, at::TensorOptions().dtype(dtype_));
    at::Tensor lse;
    if (lseRead_) {
      // ATen's layout: [B,S,H] transposed to [B,H,S].
      lse = at::empty_strided({qShape_[0], qShape_[1], qShape_[2]}, {qShape_[2] * qShape_[1], 1, qShape_[1]}, f32);
    }
    Status s = kernel->execute(q.const_data_ptr(), k.const_data_ptr(), v.const_data_ptr(),
                               hasMask_ ? in[3].const_data_ptr() : nullptr, o.mutable_data_ptr(),
                               lseRead_ ? lse.mutable_data_ptr<float>() : nullptr);
    TORCH_CHECK(s.isOk(), "verifuse: attention kernel failed: ", s.toString());
    out = {o, lse};
    return true;
  }

  KernelsByLayout<kernels::AttentionKernel> kernels_;
};

}  // namespace

bool isAttentionEngineOp(const ir::Node& n) {
  // Every operand, typed as attention-to-sdpa writes them; any other spelling stays a plain
  // dispatcher step.
  if (n.op != kAttentionOp || !ir::hasOperands<Sdpa>(n) || n.outputs.size() != 2) return false;
  for (Sdpa::Operand tensor : {Sdpa::query, Sdpa::key, Sdpa::value}) {
    if (!ir::operand(n, tensor).isValue()) return false;
  }
  const ir::Arg& mask = ir::operand(n, Sdpa::attn_mask);
  const ir::Arg& scale = ir::operand(n, Sdpa::scale);
  return ir::operand(n, Sdpa::dropout_p).kind == ir::Arg::Kind::Double &&
         ir::operand(n, Sdpa::is_causal).kind == ir::Arg::Kind::Bool &&
         (mask.isValue() || mask.isConstant() || mask.kind == ir::Arg::Kind::None) &&
         (scale.kind == ir::Arg::Kind::Double || scale.kind == ir::Arg::Kind::None);
}

StatusOr<std::unique_ptr<FusedOp>> createAttentionOp(const ir::Graph& g, const ir::Node& n, const CompileOptions& options) {
  if (!isAttentionEngineOp(n)) return invalidGraph(n.op + ": not in the form the attention op reads");
  auto op = std::make_unique<AttentionOp>();
  op->dropout_ = ir::operand(n, Sdpa::dropout_p).d;
  op->causal_ = ir::operand(n, Sdpa::is_causal).i != 0;
  op->hasMask_ = ir::operand(n, Sdpa::attn_mask).kind != ir::Arg::Kind::None;
  const ir::Arg& scale = ir::operand(n, Sdpa::scale);
  if (scale.kind == ir::Arg::Kind::Double) op->scale_ = scale.d;
  // The logsumexp is computed only when a node or the graph's outputs read it.
  const ir::ValueId lse = n.outputs[1];
  bool lseRead = false;
  std::vector<ir::ValueId> used;
  for (const ir::Node& m : g.nodes()) {
    if (m.erased) continue;
    for (const ir::Arg& a : m.args) a.collectValues(used);
  }
  for (const ir::Arg& a : g.outputs()) a.collectValues(used);
  for (ir::ValueId v : used) lseRead = lseRead || v == lse;
  op->lseRead_ = lseRead;
  const ir::Value& q = g.value(static_cast<ir::ValueId>(ir::operand(n, Sdpa::query).i));
  const ir::Value& k = g.value(static_cast<ir::ValueId>(ir::operand(n, Sdpa::key).i));
  const ir::Value& v = g.value(static_cast<ir::ValueId>(ir::operand(n, Sdpa::value).i));
  // float32 (or unknown: float32 graphs from text), or a bf16 model's bfloat16 (natively, or on
  // float32 matmuls with bf16 data widened where oneDNN has no bf16 instructions: bf16ModelsRun).
  const bool bf16 = q.dtype == ir::DType::BFloat16;
  const ir::DType want = bf16 ? ir::DType::BFloat16 : ir::DType::Float32;
  auto ofType = [&](ir::DType t) { return t == want || (!bf16 && t == ir::DType::Undefined); };
  bool ok = options.useOnednn && q.hasStaticShape() && k.hasStaticShape() && v.hasStaticShape() && q.shape.size() == 4 &&
            k.shape.size() == 4 && v.shape.size() == 4 && ofType(q.dtype) && ofType(k.dtype) && ofType(v.dtype) &&
            op->dropout_ == 0.0 && (!bf16 || bf16ModelsRun());
  op->dtype_ = bf16 ? at::kBFloat16 : at::kFloat;
  if (ok) {
    // Same batch everywhere; q's heads a multiple of k's and v's (grouped-query attention, as
    // ATen's kernel reads it); keys and values agree.
    ok = k.shape[0] == q.shape[0] && v.shape[0] == q.shape[0] && k.shape[1] == v.shape[1] && k.shape[1] > 0 &&
         q.shape[1] % k.shape[1] == 0 &&
         k.shape[3] == q.shape[3] && v.shape[2] == k.shape[2] && q.shape[3] > 0 && q.shape[2] > 0 && k.shape[2] > 0 &&
         q.shape[0] > 0 && q.shape[1] > 0 && v.shape[3] > 0;
  }
  if (ok && op->hasMask_) {
    const ir::Arg& m = ir::operand(n, Sdpa::attn_mask);
    if (m.isValue()) {
      const ir::Value& mv = g.value(static_cast<ir::ValueId>(m.i));
      ok = ofType(mv.dtype);  // bool masks: ATen
    } else {
      ok = g.constants()[static_cast<size_t>(m.i)].dtype == want;
    }
  }
  op->onednnOk_ = ok;
  if (ok) {
    op->qShape_ = q.shape, op->kShape_ = k.shape, op->vShape_ = v.shape;
    op->macs_ = static_cast<double>(q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2]) *
                static_cast<double>(q.shape[3] + v.shape[3]);
  }
  op->engine_ = ok ? Engine::kOnednn : Engine::kAten;
  return std::unique_ptr<FusedOp>(std::move(op));
}

}  // namespace verifuse::runtime
