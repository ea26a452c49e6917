// verifuse::qconv / verifuse::qlinear on oneDNN's int8 kernels (kernels/int8.h), with the ATen
// composition of the quantized graph as the reference and fallback.
//
//   qconv(x, Wq, b?, stride, padding, dilation, groups, post_ops, x_scale, x_zp, w_scales, w_zps,
//         y_scale, y_zp, y_qmin, y_qmax, y_dtype?, residual?, r_scale, r_zp)
//   qlinear(x, Wq, b?, post_ops, x_scale, x_zp, w_scales, w_zps, y_scale, y_zp, y_qmin, y_qmax, y_dtype?,
//           residual?, r_scale, r_zp)
//
// x is u8/s8 (quantized with x_scale, x_zp), Wq s8 [O, ...] per-channel symmetric (w_scales,
// w_zps: the graph's own constants, w_zps all zero: the rule's guard), post_ops "", "relu",
// "clamp(lo hi)" (hardtanh / ReLU6, lo <= hi), "gelu_erf", "gelu_tanh", "sum" or "sum,relu" (sum: + dequantize(residual,
// r_scale, r_zp), the residual's codes of the output's shape).
// y_dtype None: the f32 result (the dequantizing form); u8/s8: requantized with y_scale, y_zp
// clamped to [y_qmin, y_qmax] (the dtype's range: the rule's guard). The reference computes
// exactly what torch's quantized_decomposed ops and ATen compute in the source graph
// (torch/ao/quantization/fx/_decomposed.py), so an input the kernel cannot take (or a shape error)
// gives eager's result or eager's error.
//
//   int8_weight_mm(x, Wq): x float32 [M, K], Wq s8 [N, K] (torchao's weight-only int8 linears):
//         mm(x, Wq^T widened to float32) on the kernel that keeps Wq in s8 (kernels/weight_only.h).
//   int4_weight_mm(x, Q, S, Z, b, g): torchao's int4 weight-only linears (codes in s8, a scale and
//         zero point per g columns of a row): [add]mm(x, dequantized Q^T) on the nibble kernel.
#include "runtime/int8_ops.h"
#include "runtime/weight_packings.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "verifuse/kernels/int8.h"
#include "verifuse/kernels/kernel.h"
#include "verifuse/kernels/layout.h"
#include "verifuse/kernels/ops.h"
#include "verifuse/kernels/quantize.h"
#include "verifuse/kernels/weight_only.h"
#include "verifuse/rules/rules.h"

namespace verifuse::runtime {

namespace {

// ---- the reference: the source graph's ops, as torch computes them -------------------------------

at::Tensor dequantizePerTensor(const at::Tensor& x, double scale, int64_t zp) {
  return (x.to(at::kFloat) - zp) * scale;
}

at::Tensor dequantizePerChannel(const at::Tensor& w, const at::Tensor& scales, const at::Tensor& zps) {
  std::vector<int64_t> shape(static_cast<size_t>(w.dim()), 1);
  shape[0] = scales.size(0);
  return ((w - zps.view(shape)) * scales.view(shape)).to(at::kFloat);
}

at::Tensor quantizePerTensor(const at::Tensor& y, double scale, int64_t zp, int64_t qmin, int64_t qmax,
                             at::ScalarType dtype) {
  const double inv = 1.0 / scale;
  return at::clamp(at::round(y * inv) + zp, qmin, qmax).to(dtype);
}

/// The post-ops of an int8 op, as the reference applies them: none, relu, clamp(lo hi) (lo <= hi),
/// gelu_erf, gelu_tanh, sum, or sum then relu.
struct Int8PostOps {
  bool sum = false, relu = false, clamp = false;
  std::string gelu;  ///< "", "none" (erf) or "tanh": torch's approximate argument
  double clampLo = 0, clampHi = 0;
};

/// An int8 op's post-op list (parsed by rules::parsePostOps, the one parser of the format), or
/// nullopt for a malformed text or a list the int8 ops do not take. The int8 sum has no scale of
/// its own: the residual is dequantized with r_scale and r_zp.
std::optional<Int8PostOps> parseInt8PostOpsUncached(std::string_view text) {
  auto parsed = rules::parsePostOps(text);
  if (!parsed.isOk()) return std::nullopt;
  const std::vector<rules::PostOpSpec>& ops = *parsed;
  Int8PostOps p;
  if (ops.empty()) return p;
  const rules::PostOpSpec& first = ops.front();
  if (first.kind == "sum" && first.params.empty()) {  // sum, or sum then relu
    if (ops.size() > 2 || (ops.size() == 2 && ops[1].kind != "relu")) return std::nullopt;
    p.sum = true;
    p.relu = ops.size() == 2;
    return p;
  }
  if (ops.size() != 1) return std::nullopt;
  if (first.kind == "relu") {
    p.relu = true;
  } else if (first.kind == "gelu_erf" || first.kind == "gelu_tanh") {
    p.gelu = first.kind == "gelu_erf" ? "none" : "tanh";
  } else if (first.kind == "clamp") {
    p.clamp = true;
    p.clampLo = first.params[0];
    p.clampHi = first.params[1];
    if (!(p.clampLo <= p.clampHi)) return std::nullopt;  // the rule's guard (torch gives hi, oneDNN lo)
  } else {
    return std::nullopt;
  }
  return p;
}

/// parseInt8PostOps once per distinct text and thread: the ops run it on every call, and a model
/// has a handful of post-op lists (a hit compares strings, allocates nothing).
std::optional<Int8PostOps> parseInt8PostOps(c10::string_view text) {
  const std::string_view key(text.data(), text.size());
  thread_local std::vector<std::pair<std::string, std::optional<Int8PostOps>>> seen;
  for (const auto& [t, ops] : seen) {
    if (t == key) return ops;
  }
  std::optional<Int8PostOps> ops = parseInt8PostOpsUncached(key);
  if (seen.size() < 32) seen.emplace_back(std::string(key), ops);
  return ops;
}

/// The reference's post-ops (\p ops: \p postOps parsed) and requantization of the float32 result \p y.
at::Tensor finish(at::Tensor y, c10::string_view postOps, const std::optional<Int8PostOps>& ops, double yScale,
                  int64_t yZp, int64_t yQmin, int64_t yQmax, std::optional<at::ScalarType> yDtype,
                  const std::optional<at::Tensor>& residual, double rScale, int64_t rZp) {
  TORCH_CHECK(ops.has_value(), "verifuse: int8 op with unknown post-ops \"", std::string(postOps), "\"");
  if (ops->sum) {
    TORCH_CHECK(residual.has_value(), "verifuse: a sum post-op without its residual");
    y = y + dequantizePerTensor(*residual, rScale, rZp);
  }
  if (ops->relu) y = at::relu(y);
  if (ops->clamp) y = at::hardtanh(y, ops->clampLo, ops->clampHi);
  if (!ops->gelu.empty()) y = at::gelu(y, ops->gelu);
  if (!yDtype) return y;
  return quantizePerTensor(y, yScale, yZp, yQmin, yQmax, *yDtype);
}

// ---- the kernel path ----------------------------------------------------------------------------

struct KernelEntry {
  c10::weak_intrusive_ptr<c10::TensorImpl> weight;  ///< the prepacked weights' source
  std::shared_ptr<const kernels::Kernel> kernel;     ///< null: no kernel qualified (the reference runs)
  std::shared_ptr<const Int8Decision> decision;      ///< which variant and why (the report's)
};

/// Kernels by (weight address, src shape/strides/dtype, parameters): created (and the weights
/// prepacked) at the first run of each configuration, reused afterwards.
std::mutex& cacheMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, KernelEntry>& cache() {
  static std::map<std::string, KernelEntry> c;
  return c;
}

/// Eager's convolution writes a channels-last result for a channels-last input (its suggested
/// memory format); the int8 conv does the same, so a channels-last model stays without reorders.
bool channelsLastOut(const at::Tensor& x) {
  return (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast)) ||
         (x.dim() == 5 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast3d));
}

std::optional<kernels::Int8Type> int8Type(at::ScalarType t) {
  if (t == at::kByte) return kernels::Int8Type::kU8;
  if (t == at::kChar) return kernels::Int8Type::kS8;
  return std::nullopt;
}

bool isDtypeRange(at::ScalarType t, int64_t qmin, int64_t qmax) {
  return (t == at::kByte && qmin == 0 && qmax == 255) || (t == at::kChar && qmin == -128 && qmax == 127);
}

std::string versions(const at::Tensor& w, const at::Tensor& scales, const std::optional<at::Tensor>& b) {
  return c10::str(w._version(), ",", scales._version(), ",", b ? int64_t(b->_version()) : int64_t(-1));
}

/// Drops the cache entries of freed weights (a new tensor may reuse the address) and the entries
/// of this weight (keys starting with \p samePointer) from before an in-place update (not starting
/// with \p current: their prepacked copies are stale). Called with cacheMutex() held.
void dropStaleEntries(std::map<std::string, KernelEntry>& entries, const std::string& samePointer,
                      const std::string& current) {
  for (auto e = entries.begin(); e != entries.end();) {
    const bool stale = e->first.rfind(samePointer, 0) == 0 && e->first.rfind(current, 0) != 0;
    e = e->second.weight.expired() || stale ? entries.erase(e) : std::next(e);
  }
}

/// The kernel the choice (int8_kernel_choice.h) settles on for \p p, or null. A configuration for
/// which every candidate was refused by its proof or its probe, or failed for another reason than
/// having no implementation, is said once: \p instead names what runs in its place.
KernelEntry makeInt8Kernel(const c10::intrusive_ptr<c10::TensorImpl>& weight, const kernels::Int8Params& p,
                           const char* op, const char* instead) {
  Int8Choice choice = chooseInt8Kernel(p);
  if (!choice.kernel) {
    bool noisy = false;
    for (const Int8Candidate& c : choice.candidates) {
      const StatusCode code = c.made.code();
      noisy = noisy || !c.proof.proved() ||
              (code != StatusCode::kUnimplemented && code != StatusCode::kInvalidArgument);
    }
    if (noisy) TORCH_WARN("verifuse: int8 kernel not used, ", instead, " instead: ", choice.summary());
  }
  auto decision = std::make_shared<Int8Decision>();
  decision->op = op;
  decision->weight = weight.get();
  decision->variant = choice.variant;
  decision->impl = choice.kernel ? choice.kernel->implInfo() : "";
  decision->summary = choice.summary();
  decision->candidates = choice.candidates;
  return KernelEntry{c10::weak_intrusive_ptr<c10::TensorImpl>(weight), std::move(choice.kernel), std::move(decision)};
}

/// The kernel for this call, or null (run the reference). \p ops is \p postOps parsed.
std::shared_ptr<const kernels::Kernel> kernelFor(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b,
                                           bool conv, at::IntArrayRef stride, at::IntArrayRef padding,
                                           at::IntArrayRef dilation, int64_t groups, c10::string_view postOps,
                                           const std::optional<Int8PostOps>& ops, double xScale, int64_t xZp, const at::Tensor& wScales, const at::Tensor& wZps,
                                           double yScale, int64_t yZp, int64_t yQmin, int64_t yQmax,
                                           std::optional<at::ScalarType> yDtype, const std::optional<at::Tensor>& residual,
                                           double rScale, int64_t rZp) {
  auto srcType = int8Type(x.scalar_type());
  if (!srcType || w.scalar_type() != at::kChar || !w.is_contiguous() || x.numel() == 0) return nullptr;
  if (!x.is_contiguous() && !x.is_contiguous(at::MemoryFormat::ChannelsLast) &&
      !x.is_contiguous(at::MemoryFormat::ChannelsLast3d)) {
    return nullptr;
  }
  if (b && (b->scalar_type() != at::kFloat || !b->is_contiguous() || b->numel() != w.size(0))) return nullptr;
  if (!ops) return nullptr;
  const bool sum = ops->sum;
  // The sum post-op reads the residual's codes from the output buffer: same integer dtype, and
  // finite scale (its zero point is the residual's).
  if (sum && (!residual || !yDtype || residual->scalar_type() != *yDtype || !std::isfinite(rScale))) return nullptr;
  if (wScales.dim() != 1 || wScales.numel() != w.size(0)) return nullptr;
  if (yDtype && (!int8Type(*yDtype) || !isDtypeRange(*yDtype, yQmin, yQmax))) return nullptr;
  if (conv ? (x.dim() != w.dim() || x.dim() < 3 || x.dim() > 5) : (x.dim() != 2 || w.dim() != 2)) return nullptr;

  // The weight, its scales and the bias are read at creation (prepacked, copied): their version
  // counters are part of the key, so an in-place update (load_state_dict into the frozen tensor)
  // makes a new kernel instead of reusing the stale one.
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(w.data_ptr())) + "|" + versions(w, wScales, b) + "|" +
                    std::to_string(conv) + "|" +
                    c10::str(x.sizes(), x.strides(), x.scalar_type(), stride, padding, dilation, groups, "|",
                             std::string(postOps), "|", xScale, xZp, yScale, yZp, yDtype ? int(*yDtype) : -1, "|",
                             b ? reinterpret_cast<uintptr_t>(b->data_ptr()) : 0, "|", rScale, rZp);
  std::lock_guard<std::mutex> lock(cacheMutex());
  auto& entries = cache();
  auto it = entries.find(key);
  if (it != entries.end() && !it->second.weight.expired()) return it->second.kernel;
  // A new configuration: the weight zero points must be 0 (the rule's guard, checked again here).
  if (!wZps.eq(0).all().item<bool>()) return nullptr;
  const std::string samePointer = std::to_string(reinterpret_cast<uintptr_t>(w.data_ptr())) + "|";
  dropStaleEntries(entries, samePointer, samePointer + versions(w, wScales, b) + "|");

  kernels::Int8Params p;
  p.conv = conv;
  p.srcDims.assign(x.sizes().begin(), x.sizes().end());
  p.srcStrides.assign(x.strides().begin(), x.strides().end());
  p.weightDims.assign(w.sizes().begin(), w.sizes().end());
  p.dstChannelsLast = channelsLastOut(x);
  if (conv) {
    p.stride.assign(stride.begin(), stride.end());
    p.padL.assign(padding.begin(), padding.end());
    p.dilation.assign(dilation.begin(), dilation.end());
    p.groups = groups;
  }
  p.srcType = *srcType;
  p.dstType = yDtype ? *int8Type(*yDtype) : kernels::Int8Type::kF32;
  p.weights = static_cast<const int8_t*>(w.data_ptr());
  p.bias = b ? b->data_ptr<float>() : nullptr;
  p.srcScale = static_cast<float>(xScale);
  p.srcZeroPoint = static_cast<int32_t>(xZp);
  at::Tensor ws = wScales.to(at::kFloat).contiguous();
  p.weightScales.assign(ws.data_ptr<float>(), ws.data_ptr<float>() + ws.numel());
  p.dstScale = static_cast<float>(yScale);
  p.dstZeroPoint = static_cast<int32_t>(yZp);
  if (sum) p.postOps.push_back(kernels::Int8Params::PostOp::kSum);
  if (ops->relu) p.postOps.push_back(kernels::Int8Params::PostOp::kRelu);
  if (!ops->gelu.empty()) {
    p.postOps.push_back(ops->gelu == "none" ? kernels::Int8Params::PostOp::kGeluErf
                                            : kernels::Int8Params::PostOp::kGeluTanh);
  }
  if (ops->clamp) {
    p.postOps.push_back(kernels::Int8Params::PostOp::kClamp);
    p.clampLo = static_cast<float>(ops->clampLo);
    p.clampHi = static_cast<float>(ops->clampHi);
  }
  p.sumScale = static_cast<float>(rScale);
  p.sumZeroPoint = static_cast<int32_t>(rZp);
  KernelEntry entry = makeInt8Kernel(w.getIntrusivePtr(), p, conv ? "verifuse::qconv" : "verifuse::qlinear",
                                     "the quantized graph's ATen ops run");
  entries.insert_or_assign(key, entry);
  return entry.kernel;
}

/// Runs kernel \p k; with \p sum (a sum post-op) the output starts as the residual's codes.
at::Tensor runKernel(const kernels::Kernel& k, const at::Tensor& x, std::vector<int64_t> outDims,
                     std::optional<at::ScalarType> yDtype, bool sum, const std::optional<at::Tensor>& residual) {
  const bool cl = x.dim() >= 4 && x.dim() == static_cast<int64_t>(outDims.size()) && channelsLastOut(x);
  at::Tensor out = at::empty(outDims, x.options()
                                          .dtype(yDtype ? *yDtype : at::kFloat)
                                          .memory_format(!cl ? at::MemoryFormat::Contiguous
                                                         : x.dim() == 4 ? at::MemoryFormat::ChannelsLast
                                                                        : at::MemoryFormat::ChannelsLast3d));
  if (sum) {
    TORCH_CHECK(residual->sizes() == out.sizes(), "verifuse: residual of shape ", residual->sizes(),
                " for an output of shape ", out.sizes());
    out.copy_(*residual);  // the sum post-op accumulates into the residual's codes
  }
  Status s = k.execute({x.data_ptr()}, out.data_ptr());
  TORCH_CHECK(s.isOk(), "verifuse: oneDNN int8 kernel failed: ", s.toString());
  return out;
}

// verifuse::quantize(x, scale, zp, qmin, qmax, dtype): quantize_per_tensor in one pass, the same
// float32 operations torch's composition performs (kernels/quantize.h), so the codes are
// bit-identical to eager's.
at::Tensor quantize(const at::Tensor& x, double scale, int64_t zp, int64_t qmin, int64_t qmax, at::ScalarType dtype) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "Expecting input to have dtype torch.float32, but got dtype: ",
              x.scalar_type());
  if (!int8Type(dtype) || !x.is_non_overlapping_and_dense()) return quantizePerTensor(x, scale, zp, qmin, qmax, dtype);
  at::Tensor out = at::empty_like(x, x.options().dtype(dtype));
  kernels::QuantizeParams p;
  p.invScale = static_cast<float>(1.0 / scale);
  p.zeroPoint = static_cast<float>(zp);
  p.qmin = static_cast<float>(qmin);
  p.qmax = static_cast<float>(qmax);
  p.u8 = dtype == at::kByte;
  const float* src = x.data_ptr<float>();
  auto* dst = static_cast<char*>(out.data_ptr());
  at::parallel_for(0, x.numel(), 65536, [&](int64_t begin, int64_t end) {
    kernels::quantizeF32(src + begin, end - begin, p, dst + begin);
  });
  return out;
}

at::Tensor qconv(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b, at::IntArrayRef stride,
                 at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups, c10::string_view postOps,
                 double xScale, int64_t xZp, const at::Tensor& wScales, const at::Tensor& wZps, double yScale,
                 int64_t yZp, int64_t yQmin, int64_t yQmax, std::optional<at::ScalarType> yDtype,
                 const std::optional<at::Tensor>& residual, double rScale, int64_t rZp) {
  const std::optional<Int8PostOps> ops = parseInt8PostOps(postOps);
  if (auto k = kernelFor(x, w, b, true, stride, padding, dilation, groups, postOps, ops, xScale, xZp, wScales, wZps,
                         yScale, yZp, yQmin, yQmax, yDtype, residual, rScale, rZp)) {
    kernels::Int8Params p;
    p.conv = true;
    p.srcDims.assign(x.sizes().begin(), x.sizes().end());
    p.weightDims.assign(w.sizes().begin(), w.sizes().end());
    p.stride.assign(stride.begin(), stride.end());
    p.padL.assign(padding.begin(), padding.end());
    p.dilation.assign(dilation.begin(), dilation.end());
    p.groups = groups;
    return runKernel(*k, x, kernels::int8OutputDims(p), yDtype, ops->sum, residual);
  }
  at::Tensor y = at::convolution(dequantizePerTensor(x, xScale, xZp), dequantizePerChannel(w, wScales, wZps), b, stride,
                                 padding, dilation, false, std::vector<int64_t>(stride.size(), 0), groups);
  return finish(y, postOps, ops, yScale, yZp, yQmin, yQmax, yDtype, residual, rScale, rZp);
}

at::Tensor qlinear(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& b,
                   c10::string_view postOps, double xScale, int64_t xZp, const at::Tensor& wScales,
                   const at::Tensor& wZps, double yScale, int64_t yZp, int64_t yQmin, int64_t yQmax,
                   std::optional<at::ScalarType> yDtype, const std::optional<at::Tensor>& residual, double rScale,
                   int64_t rZp) {
  const std::optional<Int8PostOps> ops = parseInt8PostOps(postOps);
  if (x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1)) {
    if (auto k = kernelFor(x, w, b, false, {}, {}, {}, 1, postOps, ops, xScale, xZp, wScales, wZps, yScale, yZp, yQmin,
                           yQmax, yDtype, residual, rScale, rZp)) {
      return runKernel(*k, x, {x.size(0), w.size(0)}, yDtype, ops->sum, residual);
    }
  }
  // The source graph's addmm(b, x, permute(W)) (or mm without a bias).
  at::Tensor xf = dequantizePerTensor(x, xScale, xZp);
  at::Tensor wt = dequantizePerChannel(w, wScales, wZps).permute({1, 0});
  at::Tensor y = b ? at::addmm(*b, xf, wt) : at::mm(xf, wt);
  return finish(y, postOps, ops, yScale, yZp, yQmin, yQmax, yDtype, residual, rScale, rZp);
}

// verifuse::int_mm(a, w): aten::_int_mm(a, w.t()) with w an s8 [N, K] constant (int8-int-mm:
// torchao's dynamic int8 linears), on the int8 kernel the choice proves exact (oneDNN's VNNI matmul,
// or the own widening kernel below VNNI) with the weight prepacked once: the exact s32 accumulator,
// _int_mm's meaning. Where no kernel qualifies the product is computed in int64 and narrowed, not by
// ATen's _int_mm: torch 2.13's CPU _int_mm runs its bundled oneDNN, whose s16 pair sums saturate
// below VNNI (docs/cpu-tiers.md).
at::Tensor intMm(const at::Tensor& a, const at::Tensor& w) {
  auto srcType = int8Type(a.scalar_type());
  if (srcType && w.scalar_type() == at::kChar && w.is_contiguous() && a.dim() == 2 && w.dim() == 2 &&
      a.size(1) == w.size(1) && a.numel() > 0 && w.numel() > 0 && (a.stride(1) == 1 || a.stride(0) == 1)) {
    const std::string key = "int_mm|" + std::to_string(reinterpret_cast<uintptr_t>(w.data_ptr())) + "|" +
                            c10::str(w._version(), "|", a.sizes(), a.strides(), a.scalar_type(), w.sizes());
    std::shared_ptr<const kernels::Kernel> k;
    {
      std::lock_guard<std::mutex> lock(cacheMutex());
      auto& entries = cache();
      auto it = entries.find(key);
      if (it != entries.end() && !it->second.weight.expired()) {
        k = it->second.kernel;
      } else {
        const std::string samePointer = "int_mm|" + std::to_string(reinterpret_cast<uintptr_t>(w.data_ptr())) + "|";
        dropStaleEntries(entries, samePointer, samePointer + std::to_string(w._version()) + "|");
        kernels::Int8Params p;
        p.conv = false;
        p.srcDims = a.sizes().vec();
        p.srcStrides = a.strides().vec();
        p.weightDims = w.sizes().vec();
        p.srcType = *srcType;
        p.dstType = kernels::Int8Type::kS32;
        p.weights = static_cast<const int8_t*>(w.data_ptr());
        p.weightScales.assign(static_cast<size_t>(w.size(0)), 1.f);
        KernelEntry entry = makeInt8Kernel(w.getIntrusivePtr(), p, "verifuse::int_mm", "an int64 product runs");
        k = entry.kernel;
        entries.insert_or_assign(key, std::move(entry));
      }
    }
    if (k) {
      at::Tensor out = at::empty({a.size(0), w.size(0)}, a.options().dtype(at::kInt));
      Status st = k->execute({a.data_ptr()}, out.data_ptr());
      TORCH_CHECK(st.isOk(), "verifuse: oneDNN int8 matmul failed: ", st.toString());
      return out;
    }
  }
  // Both code types _int_mm takes (torchao's dynamic activations are u8 with a zero point) get the
  // exact product; only what _int_mm refuses goes to it, for eager's own error.
  if (a.dim() != 2 || w.dim() != 2 || a.size(1) != w.size(1) || !srcType || w.scalar_type() != at::kChar) {
    return at::_int_mm(a, w.t());
  }
  return at::mm(a.to(at::kLong), w.to(at::kLong).t()).to(at::kInt);
}

// Rows from which verifuse::int4_weight_mm multiplies by panels (the kernel dequantizes 64 output
// columns at a time, torchao's float32 weights exactly, and ATen's GEMM multiplies them) instead of
// running the kernel row by row, whose table lookups are repeated for every row. Zen 4, 1 thread,
// 4864 x 896: at 64 rows both take 7.3 ms, at 128 the panels 13.3 ms (a float32 GEMM 13.7) and the
// row kernel ~14.8; eager's composition 27.7. (The int8 kernel's per-row widening is cheaper: it
// matches the GEMM at 128 rows, so int8_weight_mm has no panel path.)
constexpr int64_t kPanelMinRows = 64;

// y = x W^T [+ b] by panels of the int4 kernel's dequantized weights ([64][k], W's rows).
at::Tensor panelMatmul(const kernels::Int4WeightMatmul& kernel, const at::Tensor& x,
                       const std::optional<at::Tensor>& bias) {
  const int64_t n = kernel.n(), k = kernel.k(), width = kernels::Int4WeightMatmul::kPanelColumns;
  at::Tensor y = at::empty({x.size(0), n}, x.options());
  at::Tensor panel = at::empty({width, k}, x.options());
  for (int64_t p = 0; p * width < n; ++p) {
    Status st = kernel.dequantize(p, panel.data_ptr<float>());
    TORCH_CHECK(st.isOk(), "verifuse: int4 weight panel: ", st.toString());
    const int64_t cols = std::min(width, n - p * width);
    at::Tensor wt = panel.narrow(0, 0, cols).t();  // [k, cols]
    at::Tensor part = bias ? at::addmm(bias->narrow(0, p * width, cols), x, wt) : at::mm(x, wt);
    y.narrow(1, p * width, cols).copy_(part);
  }
  return y;
}

// verifuse::int8_weight_mm(x, w): aten::mm(x, permute(w, [1, 0]).to(float32)) with w an s8 [N, K]
// constant (int8-weight-only-mm: torchao's Int8WeightOnlyConfig linears), on the kernel that reads
// w as s8, packed once per weight (kernels/weight_only.h). Below AVX2, or for what the kernel does
// not take, eager's own composition runs (its result, or its error).
at::Tensor int8WeightMm(const at::Tensor& x, const at::Tensor& w) {
  const bool fits = x.scalar_type() == at::kFloat && w.scalar_type() == at::kChar && x.dim() == 2 && w.dim() == 2 &&
                    x.size(1) == w.size(1) && w.is_contiguous() && w.numel() > 0 && x.stride(1) == 1 &&
                    (x.size(0) <= 1 || x.stride(0) >= x.size(1)) && kernels::int8WeightMatmulAvailable();
  if (!fits) return at::mm(x, w.t().to(at::kFloat));
  // Packed once per weight for the process (runtime/weight_packings.h), kept while the weight lives.
  static WeightPackings<kernels::Int8WeightMatmul> packings(/*keepStrong=*/true);
  auto kernel = packings.get({w}, "int8 weights", [&] {
    return kernels::Int8WeightMatmul::create(static_cast<const int8_t*>(w.data_ptr()), w.size(0), w.size(1));
  });
  if (!kernel) return at::mm(x, w.t().to(at::kFloat));
  at::Tensor y = at::empty({x.size(0), w.size(0)}, x.options());
  if (x.size(0) == 0) return y;
  const int64_t ldx = x.size(0) == 1 ? x.size(1) : x.stride(0);  // one row: its stride is never read
  Status st = kernel->run(x.data_ptr<float>(), x.size(0), ldx, y.data_ptr<float>(), w.size(0));
  TORCH_CHECK(st.isOk(), "verifuse: int8 weight matmul failed: ", st.toString());
  return y;
}

// verifuse::int4_weight_mm(x, weight, scale, zero_point, bias, group_size): torchao's
// IntxWeightOnlyConfig(int4, PerGroup(g)) linear after aot_autograd,
//   [add]mm([bias,] x, permute(view((view(Q, [N, K/g, g]).to(f32) - view(Z, [N, K/g, 1]).to(f32))
//                                    * view(S, [N, K/g, 1]), [N, K]), [1, 0]))
// (int4-weight-only-mm), on the kernel that keeps Q as packed nibbles (kernels/weight_only.h).
// From kPanelMinRows rows on, by panels (the kernel's dequantized weights into ATen's GEMM). The
// composition itself runs for what the kernel does not take: below AVX2, codes outside [-8, 7],
// group sizes it does not pack, or eager's errors.
at::Tensor int4WeightMm(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale, const at::Tensor& zero,
                        const std::optional<at::Tensor>& bias, int64_t groupSize) {
  auto composition = [&] {
    TORCH_CHECK(groupSize > 0 && q.dim() == 2 && q.size(1) % groupSize == 0,
                "verifuse::int4_weight_mm: the weight's columns are not whole groups");
    const int64_t n = q.size(0), groups = q.size(1) / groupSize;
    at::Tensor w = (q.view({n, groups, groupSize}).to(at::kFloat) - zero.view({n, groups, 1}).to(at::kFloat)) *
                   scale.view({n, groups, 1});
    at::Tensor wt = w.view({n, q.size(1)}).t();
    return bias ? at::addmm(*bias, x, wt) : at::mm(x, wt);
  };
  // (Contiguous scales and zero points are read in row-major [N, K/g] order: what the source's
  // view(S, [N, K/g, 1]) reads, whatever their own shape.)
  const bool dtypes = x.scalar_type() == at::kFloat && q.scalar_type() == at::kChar &&
                      scale.scalar_type() == at::kFloat && zero.scalar_type() == at::kChar;
  const bool shapes = x.dim() == 2 && q.dim() == 2 && q.numel() > 0 && groupSize > 0 && q.size(1) % groupSize == 0 &&
                      x.size(1) == q.size(1) && scale.numel() == q.numel() / groupSize && zero.numel() == scale.numel();
  const bool layouts = q.is_contiguous() && scale.is_contiguous() && zero.is_contiguous() && x.stride(1) == 1 &&
                       (x.size(0) <= 1 || x.stride(0) >= x.size(1));
  const bool biasOk = !bias || (bias->scalar_type() == at::kFloat && bias->dim() == 1 && bias->size(0) == q.size(0) &&
                                bias->is_contiguous());
  const bool fits = dtypes && shapes && layouts && biasOk && kernels::int4WeightMatmulAvailable();
  if (!fits) return composition();
  static WeightPackings<kernels::Int4WeightMatmul> packings(/*keepStrong=*/true);
  auto kernel = packings.get({q, scale, zero}, "int4 weights", [&] {
    return kernels::Int4WeightMatmul::create(static_cast<const int8_t*>(q.data_ptr()), scale.data_ptr<float>(),
                                             static_cast<const int8_t*>(zero.data_ptr()), q.size(0), q.size(1),
                                             groupSize);
  });
  if (!kernel) return composition();
  if (x.size(0) >= kPanelMinRows) return panelMatmul(*kernel, x, bias);
  at::Tensor y = at::empty({x.size(0), q.size(0)}, x.options());
  if (x.size(0) == 0) return y;
  const int64_t ldx = x.size(0) == 1 ? x.size(1) : x.stride(0);
  Status st = kernel->run(x.data_ptr<float>(), x.size(0), ldx, bias ? bias->data_ptr<float>() : nullptr,
                          y.data_ptr<float>(), q.size(0));
  TORCH_CHECK(st.isOk(), "verifuse: int4 weight matmul failed: ", st.toString());
  return y;
}

// verifuse::qmax_pool(x, kernel_size, stride, padding, dilation, ceil_mode): 2-d max pooling of
// u8/s8 codes (int8-maxpool-codes: the code of the max is the max of the codes), on oneDNN's u8/s8
// pooling. The reference pools the codes widened to float (exact for codes) and narrows back:
// ATen's own channels-last u8 max pooling fails its index-range check ("input_depth *
// input_height * input_width <=" the uint8 index type) on any real feature map.
at::Tensor qmaxPool(const at::Tensor& x, at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                    at::IntArrayRef dilation, bool ceilMode) {
  const bool cl = x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
  const std::vector<int64_t> strideOrKernel = stride.empty() ? kernel.vec() : stride.vec();
  if (int8Type(x.scalar_type()) && x.dim() == 4 && (x.is_contiguous() || cl) && x.numel() > 0) {
    // Kernels (and their output sizes) by input geometry: the parameters are built on a miss only.
    struct PoolEntry {
      std::shared_ptr<kernels::Kernel> kernel;  ///< null: oneDNN refused this configuration
      std::vector<int64_t> outDims;
    };
    static std::mutex m;
    static std::map<std::string, PoolEntry> kernelsByKey;
    const std::string key = c10::str(x.sizes(), x.strides(), x.scalar_type(), kernel, strideOrKernel, padding, dilation,
                                     ceilMode);
    PoolEntry entry;
    {
      std::lock_guard<std::mutex> lock(m);
      auto it = kernelsByKey.find(key);
      if (it == kernelsByKey.end()) {
        kernels::PoolParams p;
        p.alg = kernels::PoolAlg::kMax;
        p.src = kernels::Layout::plain(x.sizes().vec(), x.strides().vec(),
                                       x.scalar_type() == at::kByte ? kernels::DataType::kU8 : kernels::DataType::kS8);
        p.kernel = kernel.vec();
        p.stride = strideOrKernel;
        p.padL = padding.vec();
        p.dilation = dilation.vec();
        p.ceilMode = ceilMode;
        p.dstFormat = cl ? kernels::Format::kChannelsLast : kernels::Format::kPlain;
        auto made = kernels::createPool(p);
        std::vector<int64_t> outDims = kernels::poolOutputDims(p);
        PoolEntry fresh{made.isOk() && outDims.size() == 4 ? std::shared_ptr<kernels::Kernel>(std::move(made).value())
                                                           : nullptr,
                        std::move(outDims)};
        it = kernelsByKey.emplace(key, std::move(fresh)).first;
      }
      entry = it->second;
    }
    if (entry.kernel) {
      at::Tensor out = at::empty(entry.outDims, x.options().memory_format(cl ? at::MemoryFormat::ChannelsLast
                                                                              : at::MemoryFormat::Contiguous));
      Status s = entry.kernel->execute({x.data_ptr()}, out.data_ptr());
      TORCH_CHECK(s.isOk(), "verifuse: oneDNN max pooling of int8 codes failed: ", s.toString());
      return out;
    }
  }
  return at::max_pool2d(x.to(at::kFloat), kernel, stride, padding, dilation, ceilMode).to(x.scalar_type());
}

}  // namespace

std::vector<std::shared_ptr<const Int8Decision>> int8DecisionsFor(const c10::TensorImpl* weight) {
  std::vector<std::shared_ptr<const Int8Decision>> out;
  std::lock_guard<std::mutex> lock(cacheMutex());
  for (const auto& [key, entry] : cache()) {
    if (entry.decision && entry.decision->weight == weight && !entry.weight.expired()) out.push_back(entry.decision);
  }
  return out;
}

void registerInt8Ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    static torch::Library defs(torch::Library::FRAGMENT, "verifuse", std::nullopt, __FILE__, __LINE__);
    defs.def(
        "qconv(Tensor x, Tensor weight, Tensor? bias, int[] stride, int[] padding, int[] dilation, int groups, str post_ops, "
        "float x_scale, int x_zp, Tensor w_scales, Tensor w_zps, float y_scale, int y_zp, int y_qmin, int y_qmax, "
        "ScalarType? y_dtype, Tensor? residual, float r_scale, int r_zp) -> Tensor");
    defs.def(
        "qlinear(Tensor x, Tensor weight, Tensor? bias, str post_ops, float x_scale, int x_zp, Tensor w_scales, Tensor w_zps, "
        "float y_scale, int y_zp, int y_qmin, int y_qmax, ScalarType? y_dtype, Tensor? residual, float r_scale, "
        "int r_zp) -> Tensor");
    defs.def("quantize(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype) -> Tensor");
    defs.def("int_mm(Tensor a, Tensor weight) -> Tensor");
    defs.def("int8_weight_mm(Tensor x, Tensor weight) -> Tensor");
    defs.def("int4_weight_mm(Tensor x, Tensor weight, Tensor scale, Tensor zero_point, Tensor? bias, int group_size) -> Tensor");
    defs.def("qmax_pool(Tensor codes, int[] kernel_size, int[] stride, int[] padding, int[] dilation, bool ceil_mode) -> Tensor");
    static torch::Library impls(torch::Library::IMPL, "verifuse", c10::DispatchKey::CPU, __FILE__, __LINE__);
    impls.impl("quantize", TORCH_FN(quantize));
    impls.impl("qconv", TORCH_FN(qconv));
    impls.impl("qlinear", TORCH_FN(qlinear));
    impls.impl("qmax_pool", TORCH_FN(qmaxPool));
    impls.impl("int_mm", TORCH_FN(intMm));
    impls.impl("int8_weight_mm", TORCH_FN(int8WeightMm));
    impls.impl("int4_weight_mm", TORCH_FN(int4WeightMm));
  });
}

}  // namespace verifuse::runtime
