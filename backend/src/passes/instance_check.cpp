// Instance validation of constant folds: the folded constants a rule produced must equal the
// rule's formula, recomputed here in double from the original constants, within a float32
// rounding bound derived per output channel. The formula's arithmetic is the one the rewrite
// rounds to float32 and the rule's obligation proves (rules/fold_arithmetic.h, written once);
// everything else is this file's own:
// it reads the original and folded constants from the FoldRecord, not through the rewrite, and
// checks every folded element (the rewrite's graph reading, indexing, lazy folding and rounding).
// The end-to-end layer check below is independent of the formula too: it states batch norm, mul
// and div from their raw operands.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "rules/fold_arithmetic.h"
#include "verifuse/passes/pipeline.h"
#include "verifuse/verify/layer_check.h"

namespace verifuse::passes {

namespace {

using rules::FoldRecord;
// double: its rounding (2^-53) is far below the float32 bound checked (2^-23), and x87 long
// double would make validating ResNet-50's 25M weights several times slower. (The rewrite folds in
// double too: rules::ChannelFold's arithmetic.)
using Real = double;

std::vector<Real> load(const ir::Graph& g, ir::ConstantId id) {
  std::vector<Real> out;
  if (id < 0) return out;
  const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(id));
  if (!c.data || !c.isContiguous()) return out;
  std::shared_ptr<std::vector<float>> keep;
  const float* p = c.widenedFloatData(keep);  // float32, or a bf16 model's bfloat16 widened (exact)
  if (p) out.assign(p, p + c.numel());
  return out;
}

/// Per-channel factor vector from an operand constant (numel 1 or C) or the record's scalar.
std::vector<Real> channelVector(const ir::Graph& g, ir::ConstantId operand, double scalar, int64_t channels) {
  if (operand < 0) return std::vector<Real>(static_cast<size_t>(channels), scalar);
  std::vector<Real> v = load(g, operand);
  if (v.size() == 1) return std::vector<Real>(static_cast<size_t>(channels), v[0]);
  return v;
}

/// qkv-concat: the concatenated weight (bias) must be a bit-exact copy of the parts' rows, read
/// through each part's strides. No floating-point bound: a copy rounds nothing.
/// A bf16 model's concatenation: the weights' and biases' bf16 bits, copied not rounded.
rules::InstanceCheck validateConcatBf16(const ir::Graph& g, const FoldRecord& f) {
  rules::InstanceCheck check;
  check.layerVerdict = "skipped";
  check.layerDetail = "an exact copy (compared bit for bit)";
  int64_t mismatches = 0;
  auto compare = [&](ir::ConstantId catId, const std::vector<ir::ConstantId>& parts) -> std::string {
    const ir::ConstantTensor& cat = g.constants().at(static_cast<size_t>(catId));
    if (cat.dtype != ir::DType::BFloat16 || !cat.data || !cat.isContiguous()) return "the concatenation has no bf16 data";
    const uint16_t* out = static_cast<const uint16_t*>(cat.data);
    const int64_t width = cat.sizes.size() == 2 ? cat.sizes[1] : 1;
    int64_t row = 0;
    for (ir::ConstantId id : parts) {
      const ir::ConstantTensor& p = g.constants().at(static_cast<size_t>(id));
      if (p.dtype != ir::DType::BFloat16 || !p.data || p.sizes.size() != cat.sizes.size() ||
          (cat.sizes.size() == 2 && p.sizes[1] != width)) {
        return "a part has no bf16 data or another width";
      }
      const uint16_t* src = static_cast<const uint16_t*>(p.data);
      const int64_t cs = cat.sizes.size() == 2 ? p.strides[1] : 0;
      for (int64_t r = 0; r < p.sizes[0]; ++r, ++row) {
        if (row >= cat.sizes[0]) return "the parts have more rows than the concatenation";
        for (int64_t c = 0; c < width; ++c) mismatches += out[row * width + c] != src[r * p.strides[0] + c * cs];
      }
    }
    return row == cat.sizes[0] ? "" : "the parts' rows do not add up to the concatenation's";
  };
  std::string problem = compare(f.foldedWeight, f.parts);
  if (problem.empty() && f.foldedBias >= 0) problem = compare(f.foldedBias, f.partBiases);
  if (!problem.empty()) {
    check.verdict = "Unsupported";
    check.detail = problem;
    return check;
  }
  check.verdict = mismatches == 0 ? "Proved" : "Refuted";
  check.detail = mismatches == 0 ? "bf16 weights and biases copied bit for bit"
                                 : std::to_string(mismatches) + " elements differ from the projections'";
  return check;
}

rules::InstanceCheck validateConcat(const ir::Graph& g, const FoldRecord& f) {
  rules::InstanceCheck check;
  check.layerVerdict = "skipped";
  check.layerDetail = "an exact copy (compared bit for bit)";
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  auto unsupported = [&](const std::string& why) {
    check.verdict = "Unsupported";
    check.detail = why;
    return check;
  };
  const ir::ConstantTensor& cat = g.constants().at(static_cast<size_t>(f.foldedWeight));
  if (cat.dtype == ir::DType::BFloat16) return validateConcatBf16(g, f);
  std::shared_ptr<std::vector<float>> keepCat;
  const float* catData = cat.dtype == ir::DType::Float32 && cat.isContiguous() && cat.sizes.size() == 2
                             ? cat.floatData(keepCat) : nullptr;
  if (!catData) return unsupported("the concatenated weight has no data");
  const int64_t k = cat.sizes[1];
  int64_t row = 0, mismatches = 0;
  for (ir::ConstantId id : f.parts) {
    const ir::ConstantTensor& p = g.constants().at(static_cast<size_t>(id));
    std::shared_ptr<std::vector<float>> keep;
    const float* src = p.dtype == ir::DType::Float32 && p.sizes.size() == 2 ? p.floatData(keep) : nullptr;
    if (!src || p.sizes[1] != k) return unsupported("a part has no data or another K");
    // A lazily materialized part is a dense row-major buffer; otherwise the constant's strides.
    const bool dense = !p.data;
    const int64_t rs = dense ? k : p.strides[0], cs = dense ? 1 : p.strides[1];
    for (int64_t r = 0; r < p.sizes[0]; ++r, ++row) {
      if (row >= cat.sizes[0]) return unsupported("the parts have more rows than the concatenation");
      for (int64_t c = 0; c < k; ++c) mismatches += bits(catData[row * k + c]) != bits(src[r * rs + c * cs]);
    }
  }
  if (row != cat.sizes[0]) return unsupported("the parts' rows do not add up to the concatenation's");
  if (f.foldedBias >= 0) {
    std::vector<Real> cb = load(g, f.foldedBias);
    size_t at = 0;
    for (ir::ConstantId id : f.partBiases) {
      for (Real v : load(g, id)) {
        if (at >= cb.size()) return unsupported("the biases have more elements than the concatenation");
        mismatches += bits(static_cast<float>(cb[at++])) != bits(static_cast<float>(v));
      }
    }
    if (at != cb.size() || cb.empty()) return unsupported("the biases do not add up to the concatenation's");
  }
  check.verdict = mismatches == 0 ? "Proved" : "Refuted";
  check.detail = std::to_string(row) + " rows x " + std::to_string(k) + " copied; " + std::to_string(mismatches) +
                 " values differ";
  return check;
}

/// A constant's elements as doubles (f32, f64, i64, i32); empty when it has no data or another dtype.
std::vector<double> numbers(const ir::Graph& g, ir::ConstantId id) {
  std::vector<double> out;
  if (id < 0) return out;
  const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(id));
  if (!c.data || !c.isContiguous()) return out;
  const int64_t n = c.numel();
  out.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    switch (c.dtype) {
      case ir::DType::Float32: out.push_back(static_cast<const float*>(c.data)[k]); break;
      case ir::DType::Float64: out.push_back(static_cast<const double*>(c.data)[k]); break;
      case ir::DType::Int64: out.push_back(static_cast<double>(static_cast<const int64_t*>(c.data)[k])); break;
      case ir::DType::Int32: out.push_back(static_cast<const int32_t*>(c.data)[k]); break;
      default: return {};
    }
  }
  return out;
}

/// int8-conv-dequant / int8-linear-dequant: the rule's proof is over the reals and assumes the
/// folded output scale sx * sw[o] > 0 and weight zero points 0. On this instance: the s8 weight
/// holds data, every zero point is 0, and every scale the kernel will use, float(sx) *
/// float(sw[o]) rounded to float32, is a positive normal float within 2^-24 (relative) of the
/// exact product of the float32 scales eager's dequantize uses. Rechecked here from the constants,
/// independently of the rule's guard. The prepacked weight itself is checked where oneDNN packs it
/// (kernels/int8.h, probeInt8Kernel: every output channel's packed row against the plain weight).
rules::InstanceCheck validateInt8Scales(const ir::Graph& g, const FoldRecord& f) {
  rules::InstanceCheck check;
  check.layerVerdict = "skipped";
  check.layerDetail = "integer kernel: the s32 accumulation is exact; the packed weights are probed at kernel creation";
  auto verdict = [&](const char* v, const std::string& why) {
    check.verdict = v;
    check.detail = why;
    return check;
  };
  const ir::ConstantTensor& w = g.constants().at(static_cast<size_t>(f.weight));
  if (!w.data || w.dtype != ir::DType::Int8 || !w.isContiguous() || w.sizes.empty()) {
    return verdict("Unsupported", "the weight is not a contiguous s8 constant with data");
  }
  const int64_t channels = w.sizes[0];
  const std::vector<double> scales = numbers(g, f.operand), zps = numbers(g, f.zeroPoints);
  if (static_cast<int64_t>(scales.size()) != channels || static_cast<int64_t>(zps.size()) != channels) {
    return verdict("Unsupported", "weight scales / zero points are not one number per output channel with data");
  }
  const float sx = static_cast<float>(f.scalar);
  const double bound = std::ldexp(1.0, -24);
  for (int64_t o = 0; o < channels; ++o) {
    const size_t k = static_cast<size_t>(o);
    if (zps[k] != 0) return verdict("Refuted", "weight zero point " + std::to_string(zps[k]) + " at channel " + std::to_string(o));
    const float sw = static_cast<float>(scales[k]);
    const double exact = static_cast<double>(sx) * static_cast<double>(sw);
    const float folded = sx * sw;
    if (!(exact > 0) || !std::isfinite(exact) || !std::isnormal(folded) || folded <= 0.f) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "channel %lld: output scale %.9g * %.9g = %.9g is not a positive normal float32",
                    static_cast<long long>(o), static_cast<double>(sx), static_cast<double>(sw), static_cast<double>(folded));
      return verdict("Refuted", buf);
    }
    const double rel = std::abs(static_cast<double>(folded) - exact) / exact;
    check.maxError = std::max(check.maxError, rel);
    if (rel > bound) return verdict("Refuted", "channel " + std::to_string(o) + ": folded scale off by more than 2^-24");
  }
  check.maxErrorBound = bound;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%lld channels: output scale sx*sw[o] positive normal float32, max relative error %.3g (bound 2^-24); "
                "weight zero points 0",
                static_cast<long long>(channels), check.maxError);
  return verdict("Proved", buf);
}

}  // namespace

rules::InstanceCheck validateFoldInstance(const ir::Graph& g, const rules::FusionRecord& rec) {
  LayerCheckPolicy unlimited;
  return validateFoldInstanceWithPolicy(g, rec, unlimited);
}

rules::InstanceCheck validateFoldInstanceWithPolicy(const ir::Graph& g, const rules::FusionRecord& rec, LayerCheckPolicy& policy) {
  rules::InstanceCheck check;
  const FoldRecord& f = rec.fold;
  if (f.kind == FoldRecord::Kind::kNone) {
    check.verdict = "exact";
    return check;
  }
  if (f.kind == FoldRecord::Kind::kConcat) return validateConcat(g, f);
  if (f.kind == FoldRecord::Kind::kInt8Scales) return validateInt8Scales(g, f);
  // Expected folded weight w'[o, i] = W[o, i] * scale[o] and bias b'[o] = B[o] * biasScale[o] + shift[o].
  rules::ChannelFold fold;
  std::vector<Real> gamma, beta, mean, var, factors;  // the fold's operands, also for the layer check
  int64_t c = 0;
  if (f.kind == FoldRecord::Kind::kBatchNorm) {
    gamma = load(g, f.gamma);
    beta = load(g, f.beta);
    mean = load(g, f.mean);
    var = load(g, f.var);
    c = static_cast<int64_t>(mean.size());
    if (mean.empty() || var.size() != mean.size()) {
      check.verdict = "Unsupported";
      check.detail = "batch norm statistics have no data";
      return check;
    }
    fold = rules::batchNormFold(gamma, beta, mean, var, f.eps);
  } else {
    const int64_t outC = g.constants().at(static_cast<size_t>(f.foldedWeight)).sizes.at(0);
    c = outC;
    factors = channelVector(g, f.operand, f.scalar, c);
    if (factors.size() != static_cast<size_t>(c)) {
      check.verdict = "Unsupported";
      check.detail = "constants have no data or unexpected sizes";
      return check;
    }
    // add: the record's scalar is add's alpha when the operand is a constant; a number operand's
    // scalar (the factors) already includes alpha.
    fold = rules::channelOpFold(f.kind, factors, f.operand >= 0 ? static_cast<Real>(f.scalar) : 1.0);
  }
  // A standalone batch norm (no weight) folds to scale/shift constants themselves.
  const bool standalone = f.weight < 0;
  // A bf16 model's fold: its float32 result is rounded to bf16 once more when the kernel packs it.
  bool bf16Model = false;
  // Weights are read in place (float pointers), not copied: validating ResNet-50's largest layer
  // must not add tens of MB to compile-time peak memory.
  // (Lazily folded weights are materialized for the check and freed right after it.)
  std::shared_ptr<std::vector<float>> keepW, keepFw;
  const float* wData = nullptr;
  size_t wCount = static_cast<size_t>(c);
  if (!standalone) {
    const ir::ConstantTensor& wc = g.constants().at(static_cast<size_t>(f.weight));
    if (wc.isContiguous()) wData = wc.widenedFloatData(keepW);
    bf16Model = wc.dtype == ir::DType::BFloat16;
    wCount = static_cast<size_t>(wc.numel());
  }
  const ir::ConstantTensor& fwc = g.constants().at(static_cast<size_t>(f.foldedWeight));
  const float* fwData = fwc.dtype == ir::DType::Float32 && fwc.isContiguous() ? fwc.floatData(keepFw) : nullptr;
  std::vector<Real> b = load(g, f.bias);
  std::vector<Real> fb = load(g, f.foldedBias);
  if ((!standalone && !wData) || !fwData || static_cast<size_t>(fwc.numel()) != wCount || c <= 0 ||
      wCount % static_cast<size_t>(c) != 0 || (f.foldedBias >= 0 && fb.size() != static_cast<size_t>(c))) {
    check.verdict = "Unsupported";
    check.detail = "constants have no data or unexpected sizes";
    return check;
  }
  auto w = [&](size_t k) -> Real { return standalone ? 1.0 : static_cast<Real>(wData[k]); };
  auto fw = [&](size_t k) -> Real { return static_cast<Real>(fwData[k]); };
  const size_t perChannel = wCount / static_cast<size_t>(c);
  // One float32 rounding of the exact value, plus the rounding of the double-precision product the
  // rewrite computed first: 2 ulp(|exact|) per element, i.e. |exact| * 2^-23, and 2^-149 (the
  // smallest subnormal) for values that round to zero.
  const Real ulpFactor = std::ldexp(1.0, -23), tiny = std::ldexp(1.0, -149);
  bool ok = true;
  for (size_t o = 0; o < static_cast<size_t>(c); ++o) {
    Real channelBound = 0;
    for (size_t i = 0; i < perChannel; ++i) {
      Real exact = fold.weight(o, w(o * perChannel + i));
      Real bound = std::fabs(exact) * ulpFactor + tiny;
      Real err = std::fabs(fw(o * perChannel + i) - exact);
      channelBound = std::max(channelBound, bound);
      check.maxError = std::max<double>(check.maxError, static_cast<double>(err));
      if (!(err <= bound)) ok = false;
    }
    if (!fb.empty()) {
      Real exact = standalone ? fold.shift[o] : fold.bias(o, b.empty() ? 0.0 : b[o]);
      Real bound = std::fabs(exact) * ulpFactor + tiny;
      Real err = std::fabs(fb[o] - exact);
      channelBound = std::max(channelBound, bound);
      check.maxError = std::max<double>(check.maxError, static_cast<double>(err));
      if (!(err <= bound)) ok = false;
    }
    check.maxErrorBound = std::max<double>(check.maxErrorBound, static_cast<double>(channelBound));
  }
  // bf16 model: the kernel computes with the folded values rounded to bf16. Round-to-nearest has
  // relative error <= 2^-8 (bf16's unit roundoff: 8 significant bits; an earlier version said
  // 2^-9, half the true worst case) for values in bf16's normal range: the same bound as the
  // rounding of every activation eager's own bf16 computation makes (each op's result is rounded
  // to bf16), so the fold adds an error of the size eager already has on its inputs. Outside the normal range
  // (overflow to inf, subnormal) that bound does not hold: the fold is refused.
  std::string bf16Note;
  if (bf16Model) {
    const Real bf16Max = std::ldexp(Real(255) / 128, 127), bf16MinNormal = std::ldexp(1.0, -126);
    size_t outOfRange = 0;
    auto inRange = [&](Real v) { return v == 0 || (std::fabs(v) >= bf16MinNormal && std::fabs(v) <= bf16Max); };
    for (size_t k = 0; k < wCount; ++k) outOfRange += !inRange(fw(k));
    for (Real v : fb) outOfRange += !inRange(v);
    if (outOfRange > 0) ok = false;
    bf16Note = outOfRange == 0 ? "; bf16 kernel: each folded value rounded to bf16 within 2^-8 relative, as eager "
                                 "rounds each activation"
                               : "; bf16 kernel: " + std::to_string(outOfRange) +
                                     " folded values outside bf16's normal range (rounding error above 2^-8 relative)";
  }
  check.verdict = ok ? "Proved" : "Refuted";
  // The seed blog's end-to-end check on small layers: concrete weights as exact rationals, Z3
  // searches for an input that tells the fused and unfused layers apart. A Refuted layer fails the
  // instance; Unknown/Timeout/Unsupported are recorded and prove nothing (the per-element check
  // above is what admitted the fold then). It runs even when that check failed: two independent
  // verdicts on a wrong fold.
  const int64_t layerWeights = static_cast<int64_t>(wCount);
  if (layerWeights > policy.maxLayerWeights) {
    check.layerVerdict = "skipped";
    check.layerDetail = std::to_string(layerWeights) + " weights > " + std::to_string(policy.maxLayerWeights);
  } else if (layerWeights > policy.weightBudget) {
    check.layerVerdict = "skipped";
    check.layerDetail = "this compile's budget of end-to-end checked weights (layer_check_weights) is spent";
  } else {
    policy.weightBudget -= layerWeights;
    std::vector<float> bias32(b.begin(), b.end()), foldedBias32(fb.begin(), fb.end());
    verify::FoldedLayer layer;
    layer.channels = c;
    layer.fanIn = static_cast<int64_t>(perChannel);
    layer.weight = standalone ? nullptr : wData;
    layer.bias = bias32.empty() ? nullptr : bias32.data();
    layer.foldedWeight = fwData;
    layer.foldedBias = foldedBias32.empty() ? nullptr : foldedBias32.data();
    if (f.kind == FoldRecord::Kind::kBatchNorm) {
      layer.fold = verify::FoldedLayer::Fold::kBatchNorm;
      layer.gamma = std::move(gamma);
      layer.beta = std::move(beta);
      layer.mean = std::move(mean);
      layer.var = std::move(var);
      layer.eps = f.eps;
    } else {
      layer.fold = f.kind == FoldRecord::Kind::kChannelMul   ? verify::FoldedLayer::Fold::kMul
                   : f.kind == FoldRecord::Kind::kChannelDiv ? verify::FoldedLayer::Fold::kDiv
                                                             : verify::FoldedLayer::Fold::kAdd;
      layer.factor = f.kind == FoldRecord::Kind::kChannelAdd ? fold.shift : std::move(factors);
    }
    layer.inputName = (rec.nodes.empty() ? std::string("layer") : rec.nodes.front()) + ".in";
    layer.outputName = rec.resultName.empty() ? (rec.nodes.empty() ? std::string("layer") : rec.nodes.back()) : rec.resultName;
    verify::LayerCheckResult lc = verify::checkFoldedLayer(layer, policy.options);
    check.layerVerdict = verify::verdictKindName(lc.verdict.kind);
    check.layerDetail = lc.verdict.summary();
    if (!lc.verdict.counterexample.empty()) check.layerDetail += "; " + lc.verdict.counterexample.toString();
    check.layerSeconds = lc.verdict.seconds;
    if (lc.verdict.kind == verify::VerdictKind::Refuted) check.verdict = "Refuted";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu channels x %zu values; max |folded - formula| = %.3g, bound %.3g",
                static_cast<size_t>(c), perChannel, check.maxError, check.maxErrorBound);
  check.detail = buf + bf16Note;
  return check;
}

}  // namespace verifuse::passes
