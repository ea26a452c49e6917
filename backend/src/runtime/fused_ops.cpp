// verifuse::conv / verifuse::linear on oneDNN, with the exact ATen composition as fallback.
//
// Layout policy: a 2-D/3-D convolution reads and writes channels-last tensors (NHWC / NDHWC),
// the layout oneDNN's fastest f32 kernels use on this CPU class; torch describes them with strides,
// so ATen ops between two convolutions (pooling, adds) work on them directly and no reorder is
// needed between consecutive convolutions. A plain NCHW input is converted once at entry.
#include "runtime/fused_ops.h"
#include "runtime/fused_support.h"
#include "runtime/weight_packings.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <list>
#include <mutex>
#include <new>
#include <optional>
#include <thread>

#include "verifuse/kernels/capabilities.h"
#include "verifuse/kernels/attention.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/gemm.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/ops.h"
#include "verifuse/rules/rules.h"

namespace verifuse::runtime {

/// A bf16 model's convolutions, linears and attention run on verifuse's kernels on this CPU: natively
/// where oneDNN has bf16 instructions (avx512_bf16, AMX), else on float32 kernels over bf16 data
/// (the own GEMM's widening AVX-512 or AVX2 variant, oneDNN's float32 convolution and matmuls with
/// the bf16 data widened exactly and each op's result rounded to bf16 once), which needs AVX2.
bool bf16ModelsRun() { return kernels::capabilities().onednnNativeBf16() || kernels::cpu::hasAvx2Fma(); }

namespace {

// The own GEMM's packed weights, shared by every plan that multiplies by the same weights (held
// weakly: a packing goes with the last linear holding it).
WeightPackings<kernels::gemm::PackedWeights>& sharedGemmPackings() {
  static WeightPackings<kernels::gemm::PackedWeights> table(/*keepStrong=*/false);
  return table;
}
WeightPackings<kernels::gemm::PackedWeightsBf16>& sharedBf16Packings() {
  static WeightPackings<kernels::gemm::PackedWeightsBf16> table(/*keepStrong=*/false);
  return table;
}
WeightPackings<kernels::gemm::MklPackedWeights>& sharedMklPackings() {
  static WeightPackings<kernels::gemm::MklPackedWeights> table(/*keepStrong=*/false);
  return table;
}

}  // namespace

std::map<std::string, int64_t> gemmPackingCounts() {
  int64_t alive = 0, bytes = 0;
  auto add = [&](const auto& packings) {
    for (const auto& p : packings) ++alive, bytes += static_cast<int64_t>(p->bytes());
  };
  add(sharedGemmPackings().alive());
  add(sharedBf16Packings().alive());
  add(sharedMklPackings().alive());
  const int64_t hits = sharedGemmPackings().hits() + sharedBf16Packings().hits() + sharedMklPackings().hits();
  return {{"alive", alive}, {"bytes", bytes}, {"hits", hits}};
}

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

/// Linears with at least this many rows hold packed weights without timing the two layouts
/// (FusedLinear::chooseWeightLayout says why).
constexpr int64_t kPackedWithoutTimingRows = 256;

/// True if \p r may be overwritten in place: the executor handed over its only reference (the
/// value's last use), no other tensor shares its storage, and it has exactly the strides the
/// kernel writes.
bool donatedResidual(const at::Tensor& r, c10::IntArrayRef strides) {
  return r.use_count() == 1 && r.storage().use_count() == 1 && r.storage_offset() == 0 &&
         r.strides() == strides && r.device().is_cpu() &&
         r.storage().nbytes() == static_cast<size_t>(r.numel()) * r.element_size();
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
  /// Kernels held (one per input shape, each with its own prepacked weights unless borrowed).
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [d, entry] : entries_) n += entry->kernel ? 1 : 0;
    return n;
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

/// Kernels of one op keyed by the layout of its inputs (sizes, strides, dtypes as int64s), made
/// on first use under a lock and kept; a layout whose kernel could not be made is remembered as
/// null (the op runs ATen for it). Lookups allocate nothing.
class FusedBase : public FusedOp {
 public:
  Engine engine() const override { return engine_; }
  std::string implInfo() const override { return cache_.implInfo(); }
  bool canRun(Engine e) const override { return e == Engine::kAten || (e == Engine::kOnednn && onednnOk_); }
  void setEngine(Engine e) override { engine_ = e; }
  double macs() const override { return macs_; }
  void requireWeights() const {
    if (released_) throw NeedsExactPlan();
  }

  // An internal class: createFusedOp configures the fields directly.
  /// \p w as the kernels take it: float32 (a bf16 model's weights widened, exactly, for packing;
  /// bf16 kernels always pack, so the widened copy lives only while the kernel is created).
  static at::Tensor float32Weights(const at::Tensor& w) { return w.scalar_type() == at::kFloat ? w : w.to(at::kFloat); }
  /// Weight and bias for kernel creation.
  std::pair<at::Tensor, at::Tensor> weights() const {
    std::lock_guard<std::mutex> lock(weightMu_);
    // Dense copies only when a kernel asks: a transposed-view weight (GPT-2's Conv1D) is packed by
    // the own GEMM straight from its [K, N] buffer and never needs the [N, K] copy.
    if (weight_.defined() && !weight_.is_contiguous()) {
      weight_ = weight_.contiguous();
      denseCopyBytes_ = static_cast<int64_t>(weight_.nbytes());
    }
    return {weight_, bias_};
  }
  /// oneDNN's copies: a prepacked weight per kernel unless the kernels read weight_ in place.
  int64_t onednnWeightBytes() const {
    if (engine_ != Engine::kOnednn || kernelsBorrowWeights_) return 0;
    // bf16 kernels pack bf16 weights; a bf16 model's widened convolution packs them as float32.
    const bool bf16Packed = compute_ == kernels::ComputeType::kBF16 ||
                            (io_ == at::kBFloat16 && kernels::capabilities().onednnNativeBf16());
    const int64_t elem = bf16Packed ? 2 : 4;
    return static_cast<int64_t>(cache_.size()) * weightNumel_ * elem;
  }
  int64_t weightCopyBytes() const override {
    std::lock_guard<std::mutex> lock(weightMu_);
    return onednnWeightBytes() + (weight_.defined() ? denseCopyBytes_ : 0);
  }
  std::string weightLayout() const override {
    if (engine_ != Engine::kOnednn) return engine_ == Engine::kAten ? "in place" : "";
    return kernelsBorrowWeights_ ? "in place" : "prepacked";
  }
  int64_t weightNumel_ = 0;                   // of the folded weight
  mutable int64_t denseCopyBytes_ = 0;        // weights() made weight_ a dense copy of a view
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
  mutable bool borrowWeights_ = false;        // ask kernels to read weight_ in place (chooseWeightLayout)
  mutable std::atomic<bool> kernelsBorrowWeights_{false};  // a created kernel does: weight_ must stay

  mutable at::Tensor weight_;  // float32, or a bf16 model's bf16; made contiguous by weights() on first use
  at::Tensor bias_;            // contiguous float32
  /// The model's dtype at this op: float32, or bfloat16 for a bf16 model (kernels then read and
  /// write bf16; atenWeight_/atenBias_ stay the model's bf16 constants, so the ATen path is eager's).
  at::ScalarType io_ = at::kFloat;
  at::Tensor atenWeight_, atenBias_;  // kept only for the ATen path

  /// The buffer the kernel writes: fresh, or holding the residual of a sum post-op (the residual
  /// itself when the executor handed it over at its last use: no copy; a copy otherwise). An
  /// undefined tensor when the residual does not match (the caller runs the ATen composition).
  at::Tensor outputBuffer(const std::vector<at::Tensor>& in, c10::IntArrayRef dims, c10::IntArrayRef strides,
                          const at::TensorOptions& options) const {
    if (!hasSum_) return emptyActivation(dims, options);
    const at::Tensor& r = in.at(1);
    if (r.sizes() != dims || r.scalar_type() != options.dtype().toScalarType()) return at::Tensor();
    if (donatedResidual(r, strides)) return r;
    at::Tensor out = emptyActivation(dims, options);
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
      auto [stored, b] = weights();
      if (!stored.defined()) return unimplemented("conv: weights were released after prepacking (static shapes)");
      const at::Tensor w = float32Weights(stored);
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
      // Every rank runs channels-last (1-D: [N, L, C] in memory): oneDNN's plain 1-D kernel is
      // its im2col + GEMM fallback, 2-4x slower than the direct nwc kernel (Whisper's stem).
      const auto fmt = kernels::Format::kChannelsLast;
      p.srcFormat = fmt;
      // Same format on both sides: oneDNN has no optimized kernel for NHWC in, NCHW out (it
      // falls back to its reference convolution, ~300x slower); a plain result is reordered after.
      p.dstFormat = fmt;
      p.compute = compute_;
      p.io = io_ == at::kBFloat16 ? kernels::DataType::kBF16 : kernels::DataType::kF32;
      return kernels::createConv(p);
    });
  }

  static at::Tensor channelsLast1d(const at::Tensor& x) {
    if (x.stride(1) == 1 && x.stride(2) == x.size(1) && x.stride(0) == x.size(1) * x.size(2)) return x;
    return x.transpose(1, 2).contiguous().transpose(1, 2);
  }

  /// The 1-D output (or the residual it accumulates into) with the kernel's channels-last strides.
  at::Tensor outputBuffer1d(const std::vector<at::Tensor>& in, c10::IntArrayRef dims, c10::IntArrayRef strides,
                            const at::TensorOptions& options) const {
    at::Tensor out = emptyStridedActivation(dims, strides, options);
    if (!hasSum_) return out;
    const at::Tensor& r = in.at(1);
    if (r.sizes() != dims || r.scalar_type() != options.dtype().toScalarType()) return at::Tensor();
    if (donatedResidual(r, strides)) return r;
    out.copy_(r);
    return out;
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
    if (engine != Engine::kOnednn || x.scalar_type() != io_ || x.dim() != rank || !x.device().is_cpu() ||
        x.layout() != at::kStrided || x.numel() == 0) {
      return runAten(in);  // eager's errors and edge cases, exactly
    }
    const at::MemoryFormat fmt = activationFormat(rank);
    // torch has no channels-last memory format for 1-D: [N, C, L] with strides (L*C, 1, C).
    at::Tensor xc = rank == 3 ? channelsLast1d(x) : x.contiguous(fmt);
    auto kernel = kernelFor(xc.sizes());
    if (!kernel.isOk()) return runAten(in);
    const KernelEntry& k = **kernel;
    if (k.dstStrides.empty()) return runAten(in);
    at::Tensor out = rank == 3 ? outputBuffer1d(in, k.dstDims, k.dstStrides, x.options())
                               : outputBuffer(in, k.dstDims, k.dstStrides, x.options().memory_format(fmt));
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
  /// A oneDNN inner product for \p m rows that reads the weights in place (\p borrow) or packs them.
  StatusOr<std::unique_ptr<Kernel>> makeKernel(int64_t m, bool borrow) const {
    auto [stored, b] = weights();
    if (!stored.defined()) return unimplemented("linear: weights were released after prepacking (static shapes)");
    const at::Tensor w = float32Weights(stored);
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
    p.io = io_ == at::kBFloat16 ? kernels::DataType::kBF16 : kernels::DataType::kF32;
    p.borrowWeights = borrow;
    return kernels::createLinear(p);
  }

  StatusOr<std::shared_ptr<const KernelEntry>> kernelFor(int64_t m) const {
    return cache_.get(c10::IntArrayRef(m), [&]() -> StatusOr<std::unique_ptr<Kernel>> {
      // Only when a kernel is made: a call that finds its kernel pays nothing for it.
      if (staticShape_) std::call_once(layoutChosen_, [this] { chooseWeightLayout(); });
      auto kernel = makeKernel(m, borrowWeights_);
      if (kernel.isOk() && (*kernel)->borrowsWeights()) kernelsBorrowWeights_ = true;
      return kernel;
    });
  }

  /// How oneDNN holds this linear's weights at the static shape: read in place, or a prepacked
  /// copy (faster on some CPUs and shapes, at the price of a second copy of the weights). The
  /// policy fixes it, or ("auto") a timing of both kernels with the real shape decides, kept in
  /// the tuning database per shape; without tuning, AVX-512 CPUs pack (measured on Zen 5: the
  /// packed kernel 1.1-1.5x faster at every transformer shape of kernels/bench) and others read
  /// in place. Chosen when the first oneDNN kernel is made (kernelFor), not at creation: a linear
  /// whose partition ends on the own GEMM never times oneDNN's layouts (Llama decode's 65 MB
  /// lm_head spent ~0.1 s of a 0.3 s plan doing so).
  void chooseWeightLayout() const {
    if (layoutPolicy_ != LinearWeights::kAuto) {
      borrowWeights_ = layoutPolicy_ == LinearWeights::kInPlace;
      return;
    }
    borrowWeights_ = !kernels::cpu::hasAvx512();
    // Timing costs 8 runs of the GEMM once per shape (then the tuning database answers): not for
    // products so big that compile time would grow with them, and not where many rows share each
    // weight (m >= kPackedWithoutTimingRows): there the packed layout's faster inner loop wins and its
    // one-time cost is spread over the rows. Every timing of the hf suite agreed, on Zen 4: packed
    // 10-25% faster at 64 and 128 rows (BERT, GPT-2), 5-8% at Whisper's 1,500 rows, in place
    // chosen only at one row (the pooler) where both read the same bytes. Whisper's timings of
    // its 1,500-row linears were 0.48 of its 0.76 s cold plan, for decisions the rule makes too.
    if (!autotune_ || tuning_.db == nullptr || compute_ != kernels::ComputeType::kF32 || io_ != at::kFloat ||
        macs_ > 2.0e9 || (!borrowWeights_ && m_ >= kPackedWithoutTimingRows)) {
      return;
    }
    // The two kernels (one packs a copy of the weights) and the random input are made only when
    // the database has no decision for this shape and the candidates really run.
    struct Timing {
      bool made = false;
      Status status;
      std::unique_ptr<Kernel> inPlace, packed;
      at::Tensor x, out;
    } timing;
    auto make = [&]() -> Status {
      if (timing.made) return timing.status;
      timing.made = true;
      auto inPlace = makeKernel(m_, true);
      auto packedKernel = makeKernel(m_, false);
      if (!inPlace.isOk()) return timing.status = inPlace.status();
      if (!packedKernel.isOk()) return timing.status = packedKernel.status();
      if (!(*inPlace)->borrowsWeights()) return timing.status = unimplemented("oneDNN copies these weights either way");
      timing.inPlace = std::move(inPlace).value();
      timing.packed = std::move(packedKernel).value();
      timing.x = at::randn({m_, outFeaturesIn_});
      timing.out = at::zeros({m_, outFeatures_});
      return Status::ok();
    };
    auto runner = [&](bool inPlace) {
      return [&, inPlace]() -> Status {
        VF_RETURN_IF_ERROR(make());
        const Kernel& k = inPlace ? *timing.inPlace : *timing.packed;
        return k.execute({static_cast<const void*>(timing.x.data_ptr())}, timing.out.data_ptr());
      };
    };
    std::string signature = "verifuse::linear weights n=" + std::to_string(outFeatures_) +
                            " k=" + std::to_string(outFeaturesIn_) + " postops=" + std::to_string(postOps_.size());
    auto key = kernels::TuningKey::forThisMachine(signature, {{m_, outFeaturesIn_}}, "f32", at::get_num_threads());
    auto decision = kernels::tuneOrLookup(*tuning_.db, key, {{"in-place", runner(true)}, {"packed", runner(false)}}, 1,
                                          tuneRepeats_);
    if (!decision.isOk()) return;
    // A second copy of the weights must pay for itself: packed only when it beats reading in
    // place by more than 5% (within noise, the weights are held once).
    const double inPlaceMs = decision->msOf("in-place"), packedMs = decision->msOf("packed");
    borrowWeights_ = !(packedMs > 0 && (inPlaceMs < 0 || packedMs < inPlaceMs * 0.95));
  }

  bool canRun(Engine e) const override {
    if (e == Engine::kGemm) return gemmOk_;
    return FusedBase::canRun(e);
  }

  void finishPlanning() override {
    if (engine_ == Engine::kOnednn && staticShape_ && !released_) (void)kernelFor(m_);  // a failure runs ATen
    tuning_ = {};  // the caller's database and saved-plan maps go away with the plan
  }

  void setEngine(Engine e) override {
    // Kernels are made when an engine is chosen (or timed), not at creation: a linear that ends
    // on the own GEMM never builds oneDNN's kernel nor a dense copy of a transposed weight. If
    // the engine cannot run it after all, the op stays on ATen (weights kept). Deferred packing
    // keeps the weights until packing succeeds (runAten serves the op if it fails).
    if (e == Engine::kGemm) chooseGemmKernelOnce();
    if (e == Engine::kGemm && !(deferPacking_ && !isPacked() ? canPack() : packed())) e = Engine::kAten;
    if (e != Engine::kGemm) {  // the tuner's packed copy would be held for nothing
      std::lock_guard<std::mutex> lock(gemmMu_);
      packReady_.store(false, std::memory_order_release);
      packed_.reset();
      packedBf16_.reset();
      packedMkl_.reset();
    }
    if (e == Engine::kOnednn && staticShape_ && !kernelFor(m_).isOk()) {
      onednnOk_ = false;
      e = Engine::kAten;
    }
    FusedBase::setEngine(e);
  }

  void releaseWeights() override {
    if (!staticShape_) return;
    if (engine_ == Engine::kGemm) {
      if (deferPacking_ && !isPacked()) {
        releaseAfterPacking_ = true;  // finishDeferredWork() releases them once packed
        return;
      }
      releaseForGemm();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(gemmMu_);
      packReady_.store(false, std::memory_order_release);
      packed_.reset();  // packed only while the tuner timed it
      packedBf16_.reset();
      packedMkl_.reset();
    }
    FusedBase::releaseWeights();
  }

  int64_t weightCopyBytes() const override {
    if (engine_ == Engine::kGemm) {
      std::lock_guard<std::mutex> lock(gemmMu_);
      if (packedBf16_) return static_cast<int64_t>(packedBf16_->bytes());
      if (packed_) return static_cast<int64_t>(packed_->bytes());
      if (packedMkl_) return static_cast<int64_t>(packedMkl_->bytes());
      if (!deferPacking_) return 0;
      if (gemmUsesMkl_) return outFeaturesIn_ * outFeatures_ * 4;  // about MKL's packed size
      // Not packed yet (deferred): the copy it will hold, as packWeights/packWeightsBf16 size it.
      const int64_t nPadded = (outFeatures_ + 15) / 16 * 16;
      return gemmBf16_ ? (outFeaturesIn_ + 1) / 2 * nPadded * 4 : outFeaturesIn_ * nPadded * 4;
    }
    return FusedBase::weightCopyBytes();
  }
  int64_t sharedWeightCopyBytes() const override {
    if (engine_ != Engine::kGemm) return 0;
    bool packedNow = false, found = false;
    {
      std::lock_guard<std::mutex> lock(gemmMu_);
      packedNow = packed_ || packedBf16_ || packedMkl_;
      found = packingFound_;
    }
    if (packedNow) return found ? weightCopyBytes() : 0;  // (weightCopyBytes takes gemmMu_ itself)
    // Deferred: the packing another plan holds now is the one this op will find.
    at::Tensor w;
    {
      std::lock_guard<std::mutex> lock(weightMu_);
      w = atenWeight_;
    }
    if (!w.defined()) return 0;
    const bool held = gemmBf16_      ? sharedBf16Packings().holds({w}, kBf16Packing)
                      : gemmUsesMkl_ ? sharedMklPackings().holds({w}, mklPacking())
                                     : sharedGemmPackings().holds({w}, kF32Packing);
    return held ? weightCopyBytes() : 0;
  }

  bool hasDeferredWork() const override {
    return deferPacking_ && engine_ == Engine::kGemm && !isPacked();
  }
  void finishDeferredWork() override {
    if (!deferPacking_ || engine_ != Engine::kGemm) return;
    // A failed packing keeps the weights: runOn falls back to runAten for this op.
    if (packed() && releaseAfterPacking_) releaseForGemm();
  }
  std::string weightLayout() const override {
    return engine_ == Engine::kGemm ? "packed" : FusedBase::weightLayout();
  }
  std::string implInfo() const override {
    if (engine_ != Engine::kGemm) return FusedBase::implInfo();
    if (gemmBf16_) {
      // bf16 instructions, or float32 arithmetic on bf16 data (bf16 in and out, widened in the kernel)
      switch (kernels::gemm::activeBf16Variant()) {
        case kernels::gemm::Bf16Variant::kAvx512Bf16: return "verifuse gemm:avx512_bf16";
        case kernels::gemm::Bf16Variant::kAvx512Widening: return "verifuse gemm:avx512_bf16io";
        case kernels::gemm::Bf16Variant::kAvx2Widening: break;
      }
      return "verifuse gemm:avx2_bf16io";
    }
    if (gemmUsesMkl_) return "mkl sgemm_compute (packed)";
    return kernels::gemm::activeIsa() == kernels::gemm::Isa::kAvx512 ? "verifuse gemm:avx512_f32"
                                                                     : "verifuse gemm:avx2_f32";
  }

  std::string runsOn() const override {
    return engine_ == Engine::kGemm && gemmUsesMkl_ ? "MKL sgemm" : FusedBase::runsOn();
  }

  bool isPacked() const {
    std::lock_guard<std::mutex> lock(gemmMu_);
    return packed_ || packedBf16_ || packedMkl_;
  }

  void chooseGemmKernelOnce() const {
    std::call_once(gemmKernelChosen_, [this] { chooseGemmKernel(); });
  }

  /// Which float32 GEMM this linear's own-GEMM engine runs (CompileOptions::gemmKernel): the own
  /// kernel or MKL's packed sgemm, which torch's frozen linears use and which beats the own
  /// AVX-512 kernel on some CPUs (Sapphire Rapids: 87-103 vs 69-80 GFLOP/s at BERT, ViT and Llama
  /// shapes, 1 thread) and not on others (the own kernel was tuned on Zen 5). kAuto times both
  /// once per shape with the real bias and activations, the decision kept in the tuning database;
  /// MKL must win by 3% (within noise the own kernel's bit-exact, thread-count independent
  /// results are worth more). Only at a static shape (MKL packs for one row count), only above
  /// the decode sizes the own kernel takes untimed (<= 4 rows), and only on the planning thread
  /// (the tuning database is gone once the plan is returned).
  void chooseGemmKernel() const {
    gemmUsesMkl_ = false;
    if (gemmBf16_ || io_ != at::kFloat || !staticShape_ || m_ <= 4 || !kernels::gemm::mklAvailable()) return;
    if (gemmKernel_ == GemmKernel::kOwn) return;
    if (gemmKernel_ == GemmKernel::kMkl) {
      gemmUsesMkl_ = true;
      return;
    }
    if (!autotune_ || !tuning_.available() || macs_ > 2.0e9) return;
    at::Tensor w;
    {
      std::lock_guard<std::mutex> lock(weightMu_);
      w = atenWeight_;
    }
    if (!w.defined() || w.dim() != 2) return;
    const int64_t n = w.size(0), k = w.size(1);
    // Timing inputs and both packed copies are made only when the database has no decision.
    struct Timing {
      bool made = false;
      Status status;
      std::shared_ptr<const kernels::gemm::PackedWeights> own;
      std::shared_ptr<const kernels::gemm::MklPackedWeights> mkl;
      bool ownFound = false, mklFound = false;
      at::Tensor x, out;
    } timing;
    kernels::gemm::Epilogue ep;  // bias and activations; sum and binary operands are per call
    ep.bias = gemmEpilogue_.bias;
    std::string acts;
    for (const kernels::PostOp& op : gemmEpilogue_.postOps) {
      if (op.kind != kernels::PostOp::Kind::kEltwise) continue;
      ep.postOps.push_back(op);
      acts += "," + std::to_string(static_cast<int>(op.act));
    }
    auto make = [&]() -> Status {
      if (timing.made) return timing.status;
      timing.made = true;
      const auto [dense, order] = packingSource(w, /*widen=*/false);
      Status failed = Status::ok();
      auto keepStatus = [&](auto made) {
        if (!made.isOk()) failed = made.status();
        return made;
      };
      timing.own = sharedGemmPackings().get({w}, kF32Packing, [&] {
        return keepStatus(kernels::gemm::packWeights(dense.data_ptr<float>(), k, n, order));
      }, &timing.ownFound);
      timing.mkl = sharedMklPackings().get({w}, mklPacking(), [&] {
        return keepStatus(kernels::gemm::packWeightsMkl(dense.data_ptr<float>(), k, n, order, m_));
      }, &timing.mklFound);
      if (!timing.own || !timing.mkl) {
        return timing.status = failed.isOk() ? unimplemented("linear: the weights could not be packed") : failed;
      }
      timing.x = at::randn({m_, k});
      timing.out = at::empty({m_, n});
      return Status::ok();
    };
    auto runner = [&](bool useMkl) {
      return [&, useMkl]() -> Status {
        VF_RETURN_IF_ERROR(make());
        const float* x = timing.x.data_ptr<float>();
        float* out = timing.out.data_ptr<float>();
        return useMkl ? kernels::gemm::runMkl(x, m_, k, *timing.mkl, out, n, ep)
                      : kernels::gemm::run(x, m_, k, *timing.own, out, n, ep);
      };
    };
    const std::string signature = "verifuse::linear gemm kernel n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                  " bias=" + std::to_string(ep.bias != nullptr) + " acts=" + acts;
    auto key = kernels::TuningKey::forThisMachine(signature, {{m_, k}}, "f32", at::get_num_threads());
    auto decision = tuneOrReplay(tuning_, key, signature, {{"own", runner(false)}, {"mkl", runner(true)}}, 1,
                                 tuneRepeats_ + 2);
    if (!decision.isOk()) return;
    const double ownMs = decision->msOf("own"), mklMs = decision->msOf("mkl");
    gemmUsesMkl_ = mklMs > 0 && (ownMs < 0 || mklMs < ownMs * 0.97);
    // The winner's copy was packed for the timing: keep it (packed() then has nothing to do).
    std::lock_guard<std::mutex> lock(gemmMu_);
    if (gemmUsesMkl_ && timing.mkl) packedMkl_ = std::move(timing.mkl), packingFound_ = timing.mklFound;
    if (!gemmUsesMkl_ && timing.own) packed_ = std::move(timing.own), packingFound_ = timing.ownFound;
    if (packed_ || packedMkl_) gemmBias_ = bias_;
  }
  // The kinds of packing in the shared tables (weight_packings.h): MKL packs for the row count.
  static constexpr const char* kF32Packing = "gemm f32";
  static constexpr const char* kBf16Packing = "gemm bf16";
  std::string mklPacking() const { return "mkl m=" + std::to_string(m_); }
  /// What the own GEMM or MKL packs from \p w: dense float32 rows (a bf16 model's weights widened
  /// exactly when \p widen; the copy dies after packing), or [N, K] viewed from a dense [K, N]
  /// buffer (GPT-2's Conv1D) read straight from it.
  static std::pair<at::Tensor, kernels::gemm::WeightOrder> packingSource(const at::Tensor& w, bool widen) {
    const at::Tensor f = widen ? float32Weights(w) : w;
    const bool kn = f.stride(0) == 1 && f.stride(1) == f.size(0);
    return {kn ? f : f.contiguous(), kn ? kernels::gemm::WeightOrder::kKN : kernels::gemm::WeightOrder::kNK};
  }
  bool canPack() const {
    std::lock_guard<std::mutex> lock(weightMu_);
    return atenWeight_.defined() && atenWeight_.dim() == 2 && atenWeight_.size(0) >= 1 && atenWeight_.size(1) >= 1;
  }
  void releaseForGemm() {
    // The packed copy is all the GEMM reads (and the bias, kept by gemmBias_): the folded
    // float32 weights and oneDNN's kernels (prepacked copies unless borrowed) can go.
    std::lock_guard<std::mutex> lock(weightMu_);
    weight_ = at::Tensor();
    bias_ = at::Tensor();
    atenWeight_ = at::Tensor();
    atenBias_ = at::Tensor();
    released_ = true;
    cache_.clear();
  }

  /// The weights packed for the own GEMM (float32, or bf16 for a bf16 model), made on first use
  /// (the tuner's first timing, or the engine choice): a partition that never picks the GEMM
  /// never holds the copy. \returns false if they cannot be packed.
  bool packed() const {
    // Every GEMM run asks: once packed, an acquire load answers (the pointers were set before).
    if (packReady_.load(std::memory_order_acquire)) return true;
    if (tuning_.available()) chooseGemmKernelOnce();  // planning (the tuner's candidate run)
    std::lock_guard<std::mutex> lock(gemmMu_);
    if (packed_ || packedBf16_ || packedMkl_) {
      packReady_.store(true, std::memory_order_release);
      return true;
    }
    at::Tensor w, b;
    {
      std::lock_guard<std::mutex> weights(weightMu_);  // (deferred packing: released under it)
      w = atenWeight_;
      b = bias_;
    }
    if (!w.defined()) return false;
    // The packing is shared with every other plan of the process that multiplies by the same
    // weights (runtime/weight_packings.h): generate()'s prefill and decode plans pack once.
    const int64_t n = w.size(0), k = w.size(1);
    if (gemmBf16_) {
      packedBf16_ = sharedBf16Packings().get({w}, kBf16Packing, [&] {
        auto [d, order] = packingSource(w, /*widen=*/true);
        return kernels::gemm::packWeightsBf16(d.data_ptr<float>(), k, n, order);
      }, &packingFound_);
      if (!packedBf16_) return false;
    } else if (gemmUsesMkl_) {
      packedMkl_ = sharedMklPackings().get({w}, mklPacking(), [&] {
        auto [d, order] = packingSource(w, /*widen=*/false);
        return kernels::gemm::packWeightsMkl(d.data_ptr<float>(), k, n, order, m_);
      }, &packingFound_);
      if (!packedMkl_) return false;
    } else {
      packed_ = sharedGemmPackings().get({w}, kF32Packing, [&] {
        auto [d, order] = packingSource(w, /*widen=*/false);
        return kernels::gemm::packWeights(d.data_ptr<float>(), k, n, order);
      }, &packingFound_);
      if (!packed_) return false;
    }
    gemmBias_ = b;
    packReady_.store(true, std::memory_order_release);
    return true;
  }

  at::Tensor runAten(const std::vector<at::Tensor>& in) const {
    at::Tensor w, b;
    {
      // Copies under the lock: with deferred packing the background thread may release them now.
      std::lock_guard<std::mutex> lock(weightMu_);
      requireWeights();
      w = atenWeight_;
      b = atenBias_;
    }
    at::Tensor y = at::linear(in[0], w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt);
    return applyPostOpsAten(y, postOps_, in.size() > 1 ? &in[1] : nullptr);
  }

  at::Tensor run(const std::vector<at::Tensor>& in, bool exact) const override {
    return runOn(exact ? Engine::kAten : engine_, in);
  }

  at::Tensor runOn(Engine engine, const std::vector<at::Tensor>& in) const override {
    const at::Tensor& x = in.at(0);
    if (engine == Engine::kAten || x.scalar_type() != io_ || x.dim() < 1 || !x.device().is_cpu() ||
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
      if (!packed()) return runAten(in);
      // outputBuffer already holds the residual for a sum post-op: accumulate in place.
      Status s = Status::ok();
      if (gemmBf16_) {
        auto* o = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
        s = kernels::gemm::runBf16(reinterpret_cast<const uint16_t*>(xc.data_ptr<at::BFloat16>()), m, outFeaturesIn_,
                                   *packedBf16_, o, outFeatures_, gemmEpilogue_, hasSum_ ? o : nullptr,
                                   hasSum_ ? outFeatures_ : 0);
      } else if (packedMkl_) {
        if (m != packedMkl_->m()) return runAten(in);  // packed for the static row count only
        const float* residual = hasSum_ ? out.data_ptr<float>() : nullptr;
        s = kernels::gemm::runMkl(xc.data_ptr<float>(), m, outFeaturesIn_, *packedMkl_, out.data_ptr<float>(),
                                  outFeatures_, gemmEpilogue_, residual, hasSum_ ? outFeatures_ : 0);
      } else {
        const float* residual = hasSum_ ? out.data_ptr<float>() : nullptr;
        s = kernels::gemm::run(xc.data_ptr<float>(), m, outFeaturesIn_, *packed_, out.data_ptr<float>(), outFeatures_,
                               gemmEpilogue_, residual, hasSum_ ? outFeatures_ : 0);
      }
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
  int64_t m_ = 0;                         // rows of the static input shape
  LinearWeights layoutPolicy_ = LinearWeights::kAuto;
  bool autotune_ = false;
  TuningSources tuning_;  // planning only (compileGraph's caller owns them)
  mutable std::once_flag layoutChosen_;     // chooseWeightLayout ran (with the first oneDNN kernel)
  int tuneRepeats_ = 3;
  bool gemmOk_ = false;                  // the own GEMM can run this op (AVX2, f32, post-ops)
  bool gemmBf16_ = false;                // ... in bf16 (a bf16 model: AVX512-BF16, or widening on AVX2)
  kernels::gemm::Epilogue gemmEpilogue_;  // bias pointer set once packed() kept the bias alive
  bool deferPacking_ = false;            // CompileOptions::deferPacking
  bool releaseAfterPacking_ = false;     // releaseWeights() came before the deferred packing
  mutable std::mutex gemmMu_;
  mutable std::shared_ptr<const kernels::gemm::PackedWeights> packed_;
  mutable std::shared_ptr<const kernels::gemm::PackedWeightsBf16> packedBf16_;
  mutable std::shared_ptr<const kernels::gemm::MklPackedWeights> packedMkl_;
  mutable bool packingFound_ = false;  // the packing came from another plan (weight_packings.h)
  mutable at::Tensor gemmBias_;
  GemmKernel gemmKernel_ = GemmKernel::kAuto;  // CompileOptions::gemmKernel
  mutable std::atomic<bool> packReady_{false};  // packed() is true: the pointers above are set
  mutable std::once_flag gemmKernelChosen_;    // chooseGemmKernel ran (planning thread)
  mutable bool gemmUsesMkl_ = false;           // the own-GEMM engine runs MKL's packed sgemm
};


at::Tensor constantArg(const ir::Arg& a, const std::vector<at::Tensor>& constants) {
  if (!a.isConstant()) return at::Tensor();
  return constants.at(static_cast<size_t>(a.i));
}

}  // namespace

namespace {

void configureCommon(FusedBase& op, const at::Tensor& w, const at::Tensor& b, const std::vector<PostOpSpec>& postOps,
                     const CompileOptions& options, at::ScalarType io) {
  op.postOps_ = postOps;
  op.hasSum_ = hasSum(postOps);
  op.compute_ = options.bf16 ? kernels::ComputeType::kBF16 : kernels::ComputeType::kF32;
  op.io_ = io;
  // The ATen composition computes in the model's dtype: a bf16 model's float32 folded weights are
  // rounded to bf16 for it, the rounding the oneDNN kernel's bf16 packing makes too.
  op.atenWeight_ = w.scalar_type() == io ? w : w.to(io);
  op.atenBias_ = !b.defined() || b.scalar_type() == io ? b : b.to(io);
  op.weightNumel_ = w.numel();
  // A bf16 model: a float32 bias (oneDNN adds it in f32 before the one rounding to bf16, as
  // eager's addmm does); the weights stay bf16 here and are widened only to be packed
  // (float32Weights), so no float32 copy of the model is held.
  op.weight_ = w;
  op.bias_ = b.defined() ? b.to(at::kFloat).contiguous() : b;
}

}  // namespace


bool isEngineOp(const ir::Node& n) { return rules::isFusedOp(n) || n.op == kRowwiseOp || isAttentionEngineOp(n); }

StatusOr<std::unique_ptr<FusedOp>> createFusedOp(const ir::Node& n, const std::vector<at::Tensor>& constants,
                                                 const std::vector<int64_t>* inputShape,
                                                 const CompileOptions& options, bool channelsLastOutput,
                                                 at::ScalarType io) {
  VF_ASSIGN_OR_RETURN(std::vector<PostOpSpec> postOps, rules::fusedPostOps(n));
  for (const PostOpSpec& s : postOps) {
    // A bare "sum" is the int8 ops' (their residual's scale is an operand); a float sum names its scale.
    if (s.kind == "sum" && s.params.empty()) return invalidGraph(n.op + ": post-op sum without its scale");
  }
  // conv and linear alike name their weight and bias (ir/op_schema.h)
  at::Tensor w = constantArg(*ir::namedOperand(n, "weight"), constants);
  at::Tensor b = constantArg(*ir::namedOperand(n, "bias"), constants);
  if (!w.defined() || (w.scalar_type() != at::kFloat && w.scalar_type() != at::kBFloat16)) {
    return unsupported(n.op + ": weight is not a float32 or bfloat16 constant");
  }
  if (b.defined() && b.scalar_type() != w.scalar_type()) return unsupported(n.op + ": bias and weight dtypes differ");
  if (io != at::kFloat && io != at::kBFloat16) return unsupported(n.op + ": input is not float32 or bfloat16");
  if (w.scalar_type() == at::kBFloat16 && io != at::kBFloat16) {
    return unsupported(n.op + ": bfloat16 weights with a float32 input (eager raises)");
  }
  if (io == at::kBFloat16 && !bf16ModelsRun()) {
    // Neither bf16 instructions nor AVX2 for the own GEMM's widening variant.
    return unsupported(n.op + ": bfloat16 needs a CPU with AVX2 or native bf16");
  }
  // Without bf16 instructions a bf16 model's convolution runs widened on oneDNN's float32 kernel
  // (kernels::ConvParams::widenBf16) and its linears on the own GEMM's widening variant: oneDNN's
  // bf16 inner product has only reference code there, so it is no candidate.
  const bool widenedBf16 = io == at::kBFloat16 && !kernels::capabilities().onednnNativeBf16();
  std::unique_ptr<FusedBase> result;
  // A static shape creates the kernel (and prepacks the weights) now; whether oneDNN can run it
  // decides its candidates. Without one, kernels come per shape at run time.
  if (n.op == rules::kConvOp) {
    auto op = std::make_unique<FusedConv>();
    using C = ir::FusedConv;
    VF_ASSIGN_OR_RETURN(op->stride_, ir::operand(n, C::stride).asIntList());
    VF_ASSIGN_OR_RETURN(op->padding_, ir::operand(n, C::padding).asIntList());
    VF_ASSIGN_OR_RETURN(op->dilation_, ir::operand(n, C::dilation).asIntList());
    if (ir::operand(n, C::groups).kind != ir::Arg::Kind::Int) return unsupported("verifuse::conv: groups is not constant");
    op->groups_ = ir::operand(n, C::groups).i;
    op->channelsLastOutput_ = channelsLastOutput;
    configureCommon(*op, w, b, postOps, options, io);
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
    configureCommon(*op, w, b, postOps, options, io);
    op->layoutPolicy_ = options.linearWeights;
    op->borrowWeights_ = options.linearWeights != LinearWeights::kPacked;  // dynamic shapes: per-shape kernels
    op->autotune_ = options.autotune;
    op->deferPacking_ = options.deferPacking;
    op->tuning_ = TuningSources::of(options);
    op->tuneRepeats_ = options.tuneRepeats;
    op->gemmKernel_ = options.gemmKernel;
    op->outFeatures_ = w.size(0);
    op->outFeaturesIn_ = w.size(1);
    op->onednnOk_ = options.useOnednn && !widenedBf16;
    // The own GEMM (AVX-512 or AVX2, float32 compute) with the post-ops as its epilogue.
    // It always reads a packed copy, so not when the user asked for weights read in place. A bf16
    // model's linears take its bf16 variant (AVX512-BF16: vdpbf16ps, float32 accumulation; on other
    // AVX2 CPUs the widening one: bf16 weights and activations, float32 FMAs).
    const bool gemmAllowed = options.useOnednn && options.ownGemm &&
                             options.linearWeights != LinearWeights::kInPlace &&
                             op->compute_ == kernels::ComputeType::kF32;
    op->gemmBf16_ = op->io_ == at::kBFloat16;
    op->gemmOk_ = gemmAllowed && (op->gemmBf16_ ? kernels::gemm::availableBf16()
                                                : op->io_ == at::kFloat && kernels::gemm::available());
    for (const PostOpSpec& spec : postOps) {
      auto kop = toKernelPostOp(spec);
      const bool supported = kop.isOk() && (op->gemmBf16_ ? kernels::gemm::supportsPostOpBf16(*kop)
                                                          : kernels::gemm::supportsPostOp(*kop));
      if (!supported) {
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
      op->m_ = m;
      op->staticShape_ = options.useOnednn;
    }
    result = std::move(op);
  } else {
    return unsupported("unknown fused op " + n.op);
  }
  // Where it starts; the planner sets the partition's engine (creating that engine's kernel).
  result->engine_ = result->onednnOk_ ? Engine::kOnednn : Engine::kAten;
  return std::unique_ptr<FusedOp>(std::move(result));
}

TuningSources TuningSources::of(const CompileOptions& o) {
  return {o.tuningDb, o.replayTunings, o.recordTunings, o.replayMiss};
}

StatusOr<kernels::TuningDecision> tuneOrReplay(const TuningSources& s, const kernels::TuningKey& key,
                                               const std::string& what,
                                               const std::vector<kernels::Candidate>& candidates, int warmup,
                                               int repeats) {
  if (s.replay != nullptr) {  // a saved plan: its decision, never a timing
    auto saved = s.replay->find(key.canonical());
    if (saved == s.replay->end()) {
      if (s.replayMiss != nullptr && s.replayMiss->empty()) {
        *s.replayMiss = "tuning key " + key.shortHash() + " (" + what + ") is not in the saved plan";
      }
      return Status(StatusCode::kNotFound, "not in the saved plan");
    }
    if (s.record != nullptr) (*s.record)[key.canonical()] = saved->second;
    return saved->second;
  }
  if (s.db == nullptr) return Status(StatusCode::kNotFound, "no tuning database");
  auto decided = kernels::tuneOrLookup(*s.db, key, candidates, warmup, repeats);
  if (decided.isOk() && s.record != nullptr) (*s.record)[key.canonical()] = *decided;
  return decided;
}

std::string FusedOp::runsOn() const {
  switch (engine()) {
    case Engine::kOnednn: return "oneDNN";
    case Engine::kGemm: return "own GEMM";
    case Engine::kRowwise: return "row engine";
    case Engine::kAten: return "ATen";
  }
  return "ATen";
}

}  // namespace verifuse::runtime
