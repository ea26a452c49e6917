// verifuse::conv / verifuse::linear on oneDNN, with the exact ATen composition as fallback.
//
// Layout policy: a 2-D/3-D convolution reads and writes channels-last tensors (NHWC / NDHWC),
// the layout oneDNN's fastest f32 kernels use on this CPU class; torch describes them with strides,
// so ATen ops between two convolutions (pooling, adds) work on them directly and no reorder is
// needed between consecutive convolutions. A plain NCHW input is converted once at entry.
#include "runtime/fused_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>

#include "verifuse/kernels/gemm.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"
#include "verifuse/rules/rules.h"

namespace verifuse::runtime {

namespace {

using kernels::Kernel;
using rules::PostOpSpec;

StatusOr<kernels::PostOp> toKernelPostOp(const PostOpSpec& s) {
  using kernels::PostOp;
  const float fmax = std::numeric_limits<float>::max();
  auto clampF = [&](double v) { return static_cast<float>(std::max<double>(-fmax, std::min<double>(fmax, v))); };
  if (s.kind == "relu") return PostOp::relu();
  if (s.kind == "leaky_relu") return PostOp::leakyRelu(static_cast<float>(s.params[0]));
  if (s.kind == "gelu_erf") return PostOp::geluErf();
  if (s.kind == "gelu_tanh") return PostOp::geluTanh();
  if (s.kind == "silu") return PostOp::silu();
  if (s.kind == "sigmoid") return PostOp::sigmoid();
  if (s.kind == "tanh") return PostOp::tanh();
  if (s.kind == "hardswish") return PostOp::hardswish();
  if (s.kind == "hardsigmoid") return PostOp::hardsigmoid();
  if (s.kind == "clamp") return PostOp::clamp(clampF(s.params[0]), clampF(s.params[1]));
  if (s.kind == "elu") return PostOp::elu(static_cast<float>(s.params[0]));
  if (s.kind == "sum") return PostOp::sum(static_cast<float>(s.params[0]));
  return unimplemented("post-op " + s.kind);
}

/// The ATen composition a post-op chain stands for (the reference the oneDNN path must match).
at::Tensor applyPostOpsAten(at::Tensor y, const std::vector<PostOpSpec>& ops, const at::Tensor* residual) {
  for (const PostOpSpec& s : ops) {
    if (s.kind == "relu") y = at::relu(y);
    else if (s.kind == "leaky_relu") y = at::leaky_relu(y, s.params[0]);
    else if (s.kind == "gelu_erf") y = at::gelu(y, "none");
    else if (s.kind == "gelu_tanh") y = at::gelu(y, "tanh");
    else if (s.kind == "silu") y = at::silu(y);
    else if (s.kind == "sigmoid") y = at::sigmoid(y);
    else if (s.kind == "tanh") y = at::tanh(y);
    else if (s.kind == "hardswish") y = at::hardswish(y);
    else if (s.kind == "hardsigmoid") y = at::hardsigmoid(y);
    else if (s.kind == "clamp") {
      std::optional<at::Scalar> lo, hi;
      if (std::isfinite(s.params[0])) lo = s.params[0];
      if (std::isfinite(s.params[1])) hi = s.params[1];
      y = at::clamp(y, lo, hi);
    } else if (s.kind == "elu") y = at::elu(y, s.params[0]);
    else if (s.kind == "sum") y = at::add(y, *residual, s.params[0]);
  }
  return y;
}

bool hasSum(const std::vector<PostOpSpec>& ops) {
  for (const auto& s : ops) {
    if (s.kind == "sum") return true;
  }
  return false;
}

/// The message of the error a fused op raises when its ATen composition is needed after its folded
/// weights were released; the executor turns it into StatusCode::kUnimplemented so the caller runs
/// the unfused plan instead.
constexpr const char* kNeedsExactPlan = "verifuse: exact plan needed (prepacked weights only)";

/// True if \p r may be overwritten in place: the executor handed over its only reference (the
/// value's last use), no other tensor shares its storage, and it has exactly the strides the
/// kernel writes.
bool donatedResidual(const at::Tensor& r, c10::IntArrayRef strides) {
  return r.use_count() == 1 && r.storage().use_count() == 1 && r.storage_offset() == 0 &&
         r.strides() == strides && r.device().is_cpu() &&
         r.storage().nbytes() == static_cast<size_t>(r.numel()) * sizeof(float);
}

/// A kernel and the output layout it writes, read once at creation (not per call).
struct KernelEntry {
  std::shared_ptr<const Kernel> kernel;  ///< null: oneDNN has only its reference kernel here
  std::vector<int64_t> dstDims, dstStrides;  ///< dstStrides empty if the output is not plain
};

/// One kernel per input shape, created on first use and kept. Lookups allocate nothing.
class KernelCache {
 public:
  template <typename Create>
  StatusOr<std::shared_ptr<const KernelEntry>> get(c10::IntArrayRef dims, Create create) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [d, entry] : entries_) {
      if (c10::IntArrayRef(d) != dims) continue;
      if (!entry->kernel) return unimplemented("oneDNN has only its reference implementation for this shape");
      return entry;
    }
    auto created = create();
    auto entry = std::make_shared<KernelEntry>();
    // oneDNN's reference kernels ("ref:any") are orders of magnitude slower than ATen: a shape that
    // only has one runs on ATen (remembered, so the primitive is not created again).
    if (created.isOk() && (*created)->implInfo().rfind("ref", 0) != 0) {
      entry->kernel = std::move(created).value();
      entry->dstDims = entry->kernel->dstLayout().dims();
      if (entry->kernel->dstLayout().isPlain()) entry->dstStrides = entry->kernel->dstLayout().strides();
      implInfo_ = entry->kernel->implInfo();
    }
    entries_.emplace_back(dims.vec(), entry);
    if (!entry->kernel) {
      return created.isOk() ? unimplemented("oneDNN has only its reference implementation for this shape")
                            : created.status();
    }
    return std::shared_ptr<const KernelEntry>(entry);
  }
  std::string implInfo() const {
    std::lock_guard<std::mutex> lock(mu_);
    return implInfo_;
  }
  /// Drops every kernel (and the prepacked weights they hold): another engine won.
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.clear();
  }

 private:
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::vector<int64_t>, std::shared_ptr<const KernelEntry>>> entries_;
  mutable std::string implInfo_;
};

class FusedBase : public FusedOp {
 public:
  Engine engine() const override { return engine_; }
  std::string implInfo() const override { return cache_.implInfo(); }
  bool canRun(Engine e) const override { return e == Engine::kAten || (e == Engine::kOnednn && onednnOk_); }
  void setEngine(Engine e) override { engine_ = e; }
  double macs() const override { return macs_; }
  void requireWeights() const {
    TORCH_CHECK(!released_, kNeedsExactPlan);
  }

  // An internal class: createFusedOp configures the fields directly.
  /// Weight and bias for kernel creation.
  std::pair<at::Tensor, at::Tensor> weights() const {
    std::lock_guard<std::mutex> lock(weightMu_);
    return {weight_, bias_};
  }
  void releaseWeights() override {
    if (engine_ != Engine::kOnednn || !staticShape_) return;
    std::lock_guard<std::mutex> lock(weightMu_);
    if (kernelsBorrowWeights_) return;  // the kernels read weight_ in place: it is the only copy
    weight_ = at::Tensor();
    bias_ = at::Tensor();
    atenWeight_ = at::Tensor();
    atenBias_ = at::Tensor();
    released_ = true;
  }
  bool released_ = false;
  bool borrowWeights_ = false;                // ask kernels to read weight_ in place
  mutable std::atomic<bool> kernelsBorrowWeights_{false};  // a created kernel does: weight_ must stay

  at::Tensor weight_, bias_;  // contiguous float32 (the folded constants)
  at::Tensor atenWeight_, atenBias_;  // kept only for the ATen path

  /// The buffer the kernel writes: fresh, or holding the residual of a sum post-op (the residual
  /// itself when the executor handed it over at its last use: no copy; a copy otherwise). An
  /// undefined tensor when the residual does not match (the caller runs the ATen composition).
  at::Tensor outputBuffer(const std::vector<at::Tensor>& in, c10::IntArrayRef dims, c10::IntArrayRef strides,
                          const at::TensorOptions& options) const {
    if (!hasSum_) return at::empty(dims, options);
    const at::Tensor& r = in.at(1);
    if (r.sizes() != dims || r.scalar_type() != at::kFloat) return at::Tensor();
    if (donatedResidual(r, strides)) return r;
    at::Tensor out = at::empty(dims, options);
    out.copy_(r);
    return out;
  }
  std::vector<PostOpSpec> postOps_;
  bool hasSum_ = false;  // postOps_ has a sum: input 1 is the residual
  kernels::ComputeType compute_ = kernels::ComputeType::kF32;
  Engine engine_ = Engine::kAten;
  bool onednnOk_ = false;     // oneDNN has a kernel (static shape), or may try per shape (dynamic)
  bool staticShape_ = false;  // the input shape was known at plan time
  double macs_ = 0;
  KernelCache cache_;
  mutable std::mutex weightMu_;
};

// ---- convolution ----------------------------------------------------------------------------------

class FusedConv final : public FusedBase {
 public:
  std::vector<int64_t> stride_, padding_, dilation_;
  int64_t groups_ = 1;
  bool channelsLastOutput_ = true;

  at::MemoryFormat activationFormat(int64_t rank) const {
    if (rank == 4) return at::MemoryFormat::ChannelsLast;
    if (rank == 5) return at::MemoryFormat::ChannelsLast3d;
    return at::MemoryFormat::Contiguous;
  }

  StatusOr<std::shared_ptr<const KernelEntry>> kernelFor(c10::IntArrayRef dims) const {
    return cache_.get(dims, [&]() -> StatusOr<std::unique_ptr<Kernel>> {
      auto [w, b] = weights();
      if (!w.defined()) return unimplemented("conv: weights were released after prepacking (static shapes)");
      kernels::ConvParams p;
      p.srcDims = dims.vec();
      p.weightDims = w.sizes().vec();
      p.weights = w.data_ptr<float>();
      p.bias = b.defined() ? b.data_ptr<float>() : nullptr;
      p.stride = stride_;
      p.padL = padding_;
      p.dilation = dilation_;
      p.groups = groups_;
      for (const PostOpSpec& s : postOps_) {
        VF_ASSIGN_OR_RETURN(kernels::PostOp op, toKernelPostOp(s));
        p.postOps.push_back(op);
      }
      const auto fmt = dims.size() >= 4 ? kernels::Format::kChannelsLast : kernels::Format::kPlain;
      p.srcFormat = fmt;
      // Same format on both sides: oneDNN has no optimized kernel for NHWC in, NCHW out (it
      // falls back to its reference convolution, ~300x slower); a plain result is reordered after.
      p.dstFormat = fmt;
      p.compute = compute_;
      return kernels::createConv(p);
    });
  }

  at::Tensor runAten(const std::vector<at::Tensor>& in) const {
    requireWeights();
    at::Tensor y = at::convolution(in[0], atenWeight_, atenBias_.defined() ? std::optional<at::Tensor>(atenBias_) : std::nullopt,
                                   stride_, padding_, dilation_, false, std::vector<int64_t>(stride_.size(), 0), groups_);
    y = applyPostOpsAten(y, postOps_, in.size() > 1 ? &in[1] : nullptr);
    return channelsLastOutput_ ? y : y.contiguous();
  }

  at::Tensor run(const std::vector<at::Tensor>& in, bool exact) const override {
    return runOn(exact ? Engine::kAten : engine_, in);
  }

  at::Tensor runOn(Engine engine, const std::vector<at::Tensor>& in) const override {
    const at::Tensor& x = in.at(0);
    const int64_t rank = static_cast<int64_t>(stride_.size()) + 2;
    if (engine != Engine::kOnednn || x.scalar_type() != at::kFloat || x.dim() != rank || !x.device().is_cpu() ||
        x.layout() != at::kStrided || x.numel() == 0) {
      return runAten(in);  // eager's errors and edge cases, exactly
    }
    const at::MemoryFormat fmt = activationFormat(rank);
    at::Tensor xc = x.contiguous(fmt);
    auto kernel = kernelFor(xc.sizes());
    if (!kernel.isOk()) return runAten(in);
    const KernelEntry& k = **kernel;
    if (k.dstStrides.empty()) return runAten(in);
    at::Tensor out = outputBuffer(in, k.dstDims, k.dstStrides, x.options().memory_format(fmt));
    if (!out.defined() || out.strides() != c10::IntArrayRef(k.dstStrides)) return runAten(in);
    const void* src = xc.data_ptr();
    Status s = k.kernel->execute({src}, out.data_ptr());
    TORCH_CHECK(s.isOk(), "verifuse: oneDNN convolution failed: ", s.toString());
    return channelsLastOutput_ ? out : out.contiguous();
  }
};

// ---- linear ---------------------------------------------------------------------------------------

class FusedLinear final : public FusedBase {
 public:
  StatusOr<std::shared_ptr<const KernelEntry>> kernelFor(int64_t m) const {
    return cache_.get(c10::IntArrayRef(m), [&]() -> StatusOr<std::unique_ptr<Kernel>> {
      auto [w, b] = weights();
      if (!w.defined()) return unimplemented("linear: weights were released after prepacking (static shapes)");
      kernels::LinearParams p;
      p.m = m;
      p.n = w.size(0);
      p.k = w.size(1);
      p.weights = w.data_ptr<float>();
      p.bias = b.defined() ? b.data_ptr<float>() : nullptr;
      for (const PostOpSpec& s : postOps_) {
        VF_ASSIGN_OR_RETURN(kernels::PostOp op, toKernelPostOp(s));
        p.postOps.push_back(op);
      }
      p.compute = compute_;
      p.borrowWeights = borrowWeights_;
      auto kernel = kernels::createLinear(p);
      if (kernel.isOk() && (*kernel)->borrowsWeights()) kernelsBorrowWeights_ = true;
      return kernel;
    });
  }

  bool canRun(Engine e) const override {
    if (e == Engine::kGemm) return gemmOk_;
    return FusedBase::canRun(e);
  }

  void setEngine(Engine e) override {
    FusedBase::setEngine(e);
    if (e == Engine::kGemm) (void)packed();
  }

  void releaseWeights() override {
    if (!staticShape_) return;
    if (engine_ == Engine::kGemm) {
      // The packed copy is all the GEMM reads (and the bias, kept by gemmBias_): the folded
      // float32 weights and oneDNN's kernels (prepacked copies unless borrowed) can go.
      std::lock_guard<std::mutex> lock(weightMu_);
      weight_ = at::Tensor();
      bias_ = at::Tensor();
      atenWeight_ = at::Tensor();
      atenBias_ = at::Tensor();
      released_ = true;
      cache_.clear();
      return;
    }
    packed_.reset();  // packed only while the tuner timed it
    FusedBase::releaseWeights();
  }

  /// The weights packed for the own GEMM, made on first use (the tuner's first timing, or the
  /// engine choice): a partition that never picks the GEMM never holds the copy.
  const kernels::gemm::PackedWeights* packed() const {
    std::lock_guard<std::mutex> lock(gemmMu_);
    if (!packed_) {
      auto [w, b] = weights();
      if (!w.defined()) return nullptr;
      auto p = kernels::gemm::packWeights(w.data_ptr<float>(), w.size(1), w.size(0), kernels::gemm::WeightOrder::kNK);
      if (!p.isOk()) return nullptr;
      packed_ = std::move(p).value();
      gemmBias_ = b;
    }
    return packed_.get();
  }

  at::Tensor runAten(const std::vector<at::Tensor>& in) const {
    requireWeights();
    at::Tensor y = at::linear(in[0], atenWeight_, atenBias_.defined() ? std::optional<at::Tensor>(atenBias_) : std::nullopt);
    return applyPostOpsAten(y, postOps_, in.size() > 1 ? &in[1] : nullptr);
  }

  at::Tensor run(const std::vector<at::Tensor>& in, bool exact) const override {
    return runOn(exact ? Engine::kAten : engine_, in);
  }

  at::Tensor runOn(Engine engine, const std::vector<at::Tensor>& in) const override {
    const at::Tensor& x = in.at(0);
    if (engine == Engine::kAten || x.scalar_type() != at::kFloat || x.dim() < 1 || !x.device().is_cpu() ||
        x.layout() != at::kStrided || x.numel() == 0 || x.size(-1) != outFeaturesIn_) {
      return runAten(in);
    }
    at::Tensor xc = x.contiguous();
    const int64_t m = xc.numel() / outFeaturesIn_;
    at::DimVector outSizes(x.sizes());  // on the stack: no per-call heap allocation
    outSizes.back() = outFeatures_;
    at::Tensor out = outputBuffer(in, outSizes, c10::contiguous_strides(outSizes), x.options());
    if (!out.defined()) return runAten(in);
    if (engine == Engine::kGemm) {
      const kernels::gemm::PackedWeights* b = packed();
      if (b == nullptr) return runAten(in);
      // outputBuffer already holds the residual for a sum post-op: accumulate in place.
      const float* residual = hasSum_ ? out.data_ptr<float>() : nullptr;
      Status s = kernels::gemm::run(xc.data_ptr<float>(), m, outFeaturesIn_, *b, out.data_ptr<float>(), outFeatures_,
                                    gemmEpilogue_, residual, hasSum_ ? outFeatures_ : 0);
      TORCH_CHECK(s.isOk(), "verifuse: GEMM failed: ", s.toString());
      return out;
    }
    auto kernel = kernelFor(m);
    if (!kernel.isOk()) return runAten(in);
    Status s = (*kernel)->kernel->execute({static_cast<const void*>(xc.data_ptr())}, out.data_ptr());
    TORCH_CHECK(s.isOk(), "verifuse: oneDNN inner product failed: ", s.toString());
    return out;
  }

  int64_t outFeatures_ = 0, outFeaturesIn_ = 0;
  bool gemmOk_ = false;                  // the own GEMM can run this op (AVX2, f32, post-ops)
  kernels::gemm::Epilogue gemmEpilogue_;  // bias pointer set once packed() kept the bias alive
  mutable std::mutex gemmMu_;
  mutable std::shared_ptr<const kernels::gemm::PackedWeights> packed_;
  mutable at::Tensor gemmBias_;
};

at::Tensor constantArg(const ir::Arg& a, const std::vector<at::Tensor>& constants) {
  if (!a.isConstant()) return at::Tensor();
  return constants.at(static_cast<size_t>(a.i));
}

}  // namespace

namespace {

void configureCommon(FusedBase& op, const at::Tensor& w, const at::Tensor& b, const std::vector<PostOpSpec>& postOps,
                     const CompileOptions& options) {
  op.postOps_ = postOps;
  op.hasSum_ = hasSum(postOps);
  op.compute_ = options.bf16 ? kernels::ComputeType::kBF16 : kernels::ComputeType::kF32;
  op.atenWeight_ = w;
  op.atenBias_ = b;
  op.weight_ = w.contiguous();
  op.bias_ = b.defined() ? b.contiguous() : b;
}

}  // namespace

bool isNeedsExactPlanError(const std::string& message) { return message.find(kNeedsExactPlan) != std::string::npos; }

StatusOr<std::unique_ptr<FusedOp>> createFusedOp(const ir::Node& n, const std::vector<at::Tensor>& constants,
                                                 const std::vector<int64_t>* inputShape,
                                                 const CompileOptions& options, bool channelsLastOutput) {
  VF_ASSIGN_OR_RETURN(std::vector<PostOpSpec> postOps, rules::parsePostOps(n.args.at(rules::postOpsArgIndex(n)).s));
  at::Tensor w = constantArg(n.args.at(1), constants);
  at::Tensor b = constantArg(n.args.at(2), constants);
  if (!w.defined() || w.scalar_type() != at::kFloat) return unsupported(n.op + ": weight is not a float32 constant");
  std::unique_ptr<FusedBase> result;
  // A static shape creates the kernel (and prepacks the weights) now; whether oneDNN can run it
  // decides its candidates. Without one, kernels come per shape at run time.
  if (n.op == rules::kConvOp) {
    auto op = std::make_unique<FusedConv>();
    VF_ASSIGN_OR_RETURN(op->stride_, n.args[3].asIntList());
    VF_ASSIGN_OR_RETURN(op->padding_, n.args[4].asIntList());
    VF_ASSIGN_OR_RETURN(op->dilation_, n.args[5].asIntList());
    if (n.args[6].kind != ir::Arg::Kind::Int) return unsupported("verifuse::conv: groups is not constant");
    op->groups_ = n.args[6].i;
    op->channelsLastOutput_ = channelsLastOutput;
    configureCommon(*op, w, b, postOps, options);
    op->onednnOk_ = options.useOnednn;
    if (options.useOnednn && inputShape) {
      op->staticShape_ = true;
      auto k = op->kernelFor(*inputShape);
      op->onednnOk_ = k.isOk();
      if (k.isOk()) {
        op->macs_ = static_cast<double>(c10::multiply_integers((*k)->dstDims)) * static_cast<double>(w.numel() / w.size(0));
      }
    }
    result = std::move(op);
  } else if (n.op == rules::kLinearOp) {
    auto op = std::make_unique<FusedLinear>();
    configureCommon(*op, w, b, postOps, options);
    op->borrowWeights_ = options.borrowLinearWeights;
    op->outFeatures_ = w.size(0);
    op->outFeaturesIn_ = w.size(1);
    op->onednnOk_ = options.useOnednn;
    // The own GEMM (AVX2, float32 compute) with the post-ops as its epilogue.
    op->gemmOk_ = options.useOnednn && options.ownGemm && kernels::gemm::available() &&
                  op->compute_ == kernels::ComputeType::kF32;
    for (const PostOpSpec& spec : postOps) {
      auto kop = toKernelPostOp(spec);
      if (!kop.isOk() || !kernels::gemm::supportsPostOp(*kop)) {
        op->gemmOk_ = false;
        break;
      }
      op->gemmEpilogue_.postOps.push_back(*kop);
    }
    if (op->bias_.defined()) op->gemmEpilogue_.bias = op->bias_.data_ptr<float>();
    if (inputShape && !inputShape->empty()) {
      int64_t m = 1;
      for (size_t d = 0; d + 1 < inputShape->size(); ++d) m *= (*inputShape)[d];
      op->macs_ = static_cast<double>(m) * static_cast<double>(w.numel());
      if (options.useOnednn) {
        op->staticShape_ = true;
        op->onednnOk_ = op->kernelFor(m).isOk();
      }
    }
    result = std::move(op);
  } else {
    return unsupported("unknown fused op " + n.op);
  }
  result->engine_ = result->onednnOk_ ? Engine::kOnednn : Engine::kAten;
  return std::unique_ptr<FusedOp>(std::move(result));
}

}  // namespace verifuse::runtime
