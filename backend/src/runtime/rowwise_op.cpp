// verifuse::rowwise as an engine op: the row engine's kernels or the program on ATen.
#include "runtime/fused_ops.h"
#include "runtime/fused_support.h"

#include "verifuse/ir/op_schema.h"
#include "verifuse/kernels/cpu_features.h"
#include "verifuse/kernels/rowwise.h"

#include <ATen/ATen.h>

namespace verifuse::runtime {

namespace {

// ---- row engine -----------------------------------------------------------------------------------

/// verifuse::rowwise(v0..vN-1, program): a chain of elementwise ops and last-dim reductions the
/// row-fusion rules gathered into one program. Engines: the row engine (one pass over the rows,
/// a kernel per input layout, made on first use) and ATen (the same program, one ATen op per
/// instruction: eager's own computation, the reference and the fallback).
class RowwiseOp final : public FusedOp {
 public:
  RowwiseOp(kernels::rowwise::RowProgram program, size_t numOutputs, std::vector<int64_t> outShape)
      : program_(std::move(program)), numOutputs_(numOutputs), outShape_(std::move(outShape)) {}

  Engine engine() const override { return engine_; }
  bool canRun(Engine e) const override { return e == Engine::kAten || (e == Engine::kRowwise && rowOk_); }
  void setEngine(Engine e) override { engine_ = canRun(e) ? e : Engine::kAten; }
  void releaseWeights() override {}
  double macs() const override { return 0; }
  std::string implInfo() const override {
    return kernels_.info();
  }
  size_t numOutputs() const override { return numOutputs_; }

  at::Tensor run(const std::vector<at::Tensor>& in, bool exact) const override {
    return runAll(exact ? Engine::kAten : engine_, in).at(0);
  }
  at::Tensor runOn(Engine e, const std::vector<at::Tensor>& in) const override { return runAll(e, in).at(0); }

  std::vector<at::Tensor> runAll(Engine e, const std::vector<at::Tensor>& in) const override {
    if (e == Engine::kRowwise) {
      // The engine reads rows dense (last-dim stride 1) or broadcast (0). An input with strided
      // rows (a permuted view of an NCHW tensor, e.g. ConvNeXt's norm after an ATen convolution)
      // is copied dense: one pass, where the op-by-op ATen program would be one per instruction.
      std::vector<at::Tensor> out, dense;
      if (runKernel(denseRows(in, dense) ? dense : in, out)) return out;
    }
    return runAten(in);
  }

  /// \p in with each input whose rows are strided made contiguous; false if none is.
  static bool denseRows(const std::vector<at::Tensor>& in, std::vector<at::Tensor>& dense) {
    bool changed = false;
    dense.clear();
    for (const at::Tensor& t : in) {
      const bool strided = t.dim() > 0 && t.size(-1) > 1 && t.stride(-1) != 1 && t.stride(-1) != 0;
      dense.push_back(strided ? t.contiguous() : t);
      changed = changed || strided;
    }
    return changed;
  }

  bool rowOk_ = true;
  Engine engine_ = Engine::kRowwise;
  std::vector<at::ScalarType> outTypes_;  ///< per output: float32 or bfloat16

 private:
  /// The row engine, when it takes these inputs (f32/bool dense rows); false: use ATen.
  bool runKernel(const std::vector<at::Tensor>& in, std::vector<at::Tensor>& out) const {
    c10::SmallVector<int64_t, 64> key;  // dtype, rank, sizes, strides per input: no heap per call
    for (const at::Tensor& t : in) {
      if (!t.device().is_cpu() || t.layout() != at::kStrided) return false;
      key.push_back(static_cast<int64_t>(t.scalar_type()));
      key.push_back(t.dim());
      key.append(t.sizes().begin(), t.sizes().end());
      key.append(t.strides().begin(), t.strides().end());
    }
    const kernels::rowwise::RowKernel* kernel = kernels_.get(key, [&] {
      std::unique_ptr<kernels::rowwise::RowKernel> made = create(in);
      std::string info = made ? made->describe() : "";
      return std::make_pair(std::move(made), std::move(info));
    });
    if (kernel == nullptr) return false;
    c10::SmallVector<const void*, 8> inPtrs;
    for (const at::Tensor& t : in) inPtrs.push_back(t.data_ptr());
    c10::SmallVector<void*, 4> outPtrs;
    out.reserve(numOutputs_);
    const std::vector<int64_t> strides = outputStrides(in);
    for (size_t j = 0; j < numOutputs_; ++j) {
      out.push_back(emptyStridedActivation(outShape_, strides, at::TensorOptions().dtype(outTypes_.at(j))));
      outPtrs.push_back(out.back().data_ptr());
    }
    Status s = kernel->execute(std::span<const void* const>(inPtrs.data(), inPtrs.size()),
                               std::span<void* const>(outPtrs.data(), outPtrs.size()));
    TORCH_CHECK(s.isOk(), "verifuse: row engine failed: ", s.toString());
    return true;
  }

  /// The outputs' strides: dense, in the dim order of the first input of the output's shape, as
  /// the chain's eager elementwise ops (TensorIterator) would lay their result out. Readers
  /// traced against eager's strides (a view of a permute of SDPA's output, whose layout follows its
  /// query) then stay valid; contiguous when no input has the output's shape or the order would
  /// not put the row last (the kernel writes dense rows).
  std::vector<int64_t> outputStrides(const std::vector<at::Tensor>& in) const {
    const auto contiguous = c10::contiguous_strides(outShape_);
    for (const at::Tensor& t : in) {
      if (t.sizes() != c10::IntArrayRef(outShape_)) continue;
      const auto dense = at::infer_dense_strides(t.sizes(), t.strides());
      if (dense.empty() || dense.back() != 1) break;
      return std::vector<int64_t>(dense.begin(), dense.end());
    }
    return std::vector<int64_t>(contiguous.begin(), contiguous.end());
  }

  /// A kernel for these inputs' layouts, or null when the row engine refuses them.
  std::unique_ptr<kernels::rowwise::RowKernel> create(const std::vector<at::Tensor>& in) const {
    std::vector<kernels::rowwise::TensorDesc> inputs, outputs;
    for (const at::Tensor& t : in) {
      kernels::rowwise::TensorDesc d;
      if (t.scalar_type() == at::kFloat) d.type = kernels::rowwise::ElemType::kF32;
      else if (t.scalar_type() == at::kBFloat16) d.type = kernels::rowwise::ElemType::kBF16;
      else if (t.scalar_type() == at::kBool) d.type = kernels::rowwise::ElemType::kBool;
      else return nullptr;
      d.sizes = t.sizes().vec();
      d.strides = t.strides().vec();
      inputs.push_back(std::move(d));
    }
    const std::vector<int64_t> strides = outputStrides(in);
    for (size_t j = 0; j < numOutputs_; ++j) {
      kernels::rowwise::TensorDesc d;
      d.type = outTypes_.at(j) == at::kBFloat16 ? kernels::rowwise::ElemType::kBF16 : kernels::rowwise::ElemType::kF32;
      d.sizes = outShape_;
      d.strides = strides;
      outputs.push_back(std::move(d));
    }
    auto k = kernels::rowwise::createRowKernel(program_, inputs, outputs);
    return k.isOk() ? std::move(k).value() : nullptr;
  }

  /// The program as ATen ops, one per instruction, in program order.
  std::vector<at::Tensor> runAten(const std::vector<at::Tensor>& in) const {
    using kernels::rowwise::RowOp;
    const auto& code = program_.instructions();
    std::vector<at::Tensor> v(code.size());
    std::vector<at::Tensor> out(numOutputs_);
    for (size_t i = 0; i < code.size(); ++i) {
      const auto& ins = code[i];
      auto A = [&]() -> const at::Tensor& { return v[static_cast<size_t>(ins.a)]; };
      auto B = [&]() -> const at::Tensor& { return v[static_cast<size_t>(ins.b)]; };
      switch (ins.op) {
        case RowOp::kLoad: {
          const at::Tensor& t = in.at(static_cast<size_t>(ins.index));
          // As the engine reads it: a mask as 0/1, bf16 widened to float32 (the program rounds
          // bf16 results itself).
          v[i] = t.scalar_type() == at::kBool || t.scalar_type() == at::kBFloat16 ? t.to(at::kFloat) : t;
          break;
        }
        case RowOp::kConst: v[i] = at::scalar_tensor(ins.f0, at::kFloat); break;
        case RowOp::kAdd: v[i] = at::add(A(), B()); break;
        case RowOp::kSub: v[i] = at::sub(A(), B()); break;
        case RowOp::kMul: v[i] = at::mul(A(), B()); break;
        case RowOp::kDiv: v[i] = at::div(A(), B()); break;
        case RowOp::kMax: v[i] = at::maximum(A(), B()); break;
        case RowOp::kMin: v[i] = at::minimum(A(), B()); break;
        case RowOp::kPow: v[i] = at::pow(A(), static_cast<double>(ins.f0)); break;
        case RowOp::kNeg: v[i] = at::neg(A()); break;
        case RowOp::kAbs: v[i] = at::abs(A()); break;
        case RowOp::kExp: v[i] = at::exp(A()); break;
        case RowOp::kLog: v[i] = at::log(A()); break;
        case RowOp::kSqrt: v[i] = at::sqrt(A()); break;
        case RowOp::kRsqrt: v[i] = at::rsqrt(A()); break;
        case RowOp::kReciprocal: v[i] = at::reciprocal(A()); break;
        case RowOp::kSquare: v[i] = at::mul(A(), A()); break;
        case RowOp::kRelu: v[i] = at::relu(A()); break;
        case RowOp::kGeluErf: v[i] = at::gelu(A(), "none"); break;
        case RowOp::kGeluTanh: v[i] = at::gelu(A(), "tanh"); break;
        case RowOp::kSilu: v[i] = at::silu(A()); break;
        case RowOp::kSigmoid: v[i] = at::sigmoid(A()); break;
        case RowOp::kTanh: v[i] = at::tanh(A()); break;
        case RowOp::kErf: v[i] = at::erf(A()); break;
        case RowOp::kClamp: v[i] = at::clamp(A(), static_cast<double>(ins.f0), static_cast<double>(ins.f1)); break;
        case RowOp::kLeakyRelu: v[i] = at::leaky_relu(A(), static_cast<double>(ins.f0)); break;
        case RowOp::kHardswish: v[i] = at::hardswish(A()); break;
        case RowOp::kHardsigmoid: v[i] = at::hardsigmoid(A()); break;
        case RowOp::kElu: v[i] = at::elu(A(), static_cast<double>(ins.f0)); break;
        case RowOp::kCastBf16: v[i] = A().to(at::kBFloat16).to(at::kFloat); break;
        case RowOp::kWhere:
          v[i] = at::where(A().ne(0), B(), v[static_cast<size_t>(ins.c)]);
          break;
        case RowOp::kSum: v[i] = at::sum(A(), {-1}, /*keepdim=*/true); break;
        case RowOp::kMean: v[i] = at::mean(A(), {-1}, /*keepdim=*/true); break;
        case RowOp::kRowMax: v[i] = at::amax(A(), {-1}, /*keepdim=*/true); break;
        case RowOp::kRowMin: v[i] = at::amin(A(), {-1}, /*keepdim=*/true); break;
        case RowOp::kRotateHalf: {
          const int64_t half = A().size(-1) / 2;
          v[i] = at::cat({at::neg(A().slice(-1, half)), A().slice(-1, 0, half)}, -1);
          break;
        }
        case RowOp::kStore: {
          const at::ScalarType type = outTypes_.at(static_cast<size_t>(ins.index));
          at::Tensor o = at::empty_strided(outShape_, outputStrides(in), at::TensorOptions().dtype(type));
          o.copy_(A().expand(outShape_));
          out.at(static_cast<size_t>(ins.index)) = std::move(o);
          break;
        }
      }
    }
    return out;
  }

  kernels::rowwise::RowProgram program_;
  size_t numOutputs_;
  std::vector<int64_t> outShape_;
  KernelsByLayout<kernels::rowwise::RowKernel> kernels_;
};

}  // namespace

StatusOr<std::unique_ptr<FusedOp>> createRowwiseOp(const ir::Graph& g, const ir::Node& n, const CompileOptions& options) {
  const ir::Arg* text = ir::rowwiseProgram(n);
  if (!text) return invalidGraph("verifuse::rowwise: no program");
  VF_ASSIGN_OR_RETURN(kernels::rowwise::RowProgram program, kernels::rowwise::RowProgram::parse(text->s));
  const ir::Value& out = g.value(n.outputs.at(0));
  if (!out.hasStaticShape()) return unsupported("verifuse::rowwise: output shape is not static");
  for (ir::ValueId o : n.outputs) {
    if (g.value(o).shape != out.shape) return invalidGraph("verifuse::rowwise: outputs of different shapes");
  }
  auto op = std::make_unique<RowwiseOp>(std::move(program), n.outputs.size(), out.shape);
  for (ir::ValueId o : n.outputs) {
    // float32, or bf16 in a bf16 model (the program rounded it already: storing is exact).
    const ir::DType t = g.value(o).dtype;
    op->outTypes_.push_back(t == ir::DType::BFloat16 ? at::kBFloat16 : at::kFloat);
  }
  op->rowOk_ = options.useOnednn;  // the engines policy "aten" keeps every op on ATen
  op->engine_ = op->rowOk_ ? Engine::kRowwise : Engine::kAten;
  return std::unique_ptr<FusedOp>(std::move(op));
}

}  // namespace verifuse::runtime
