// Small graph queries shared by the rules and passes (internal header).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verifuse/ir/graph.h"

namespace verifuse::rules::util {

/// The value an argument names, or kNoValue.
inline ir::ValueId valueOf(const ir::Arg& a) { return a.isValue() ? static_cast<ir::ValueId>(a.i) : ir::kNoValue; }

/// The node producing argument \p a (a value defined by a live node), or nullptr.
inline const ir::Node* producerOf(const ir::Graph& g, const ir::Arg& a) {
  ir::ValueId v = valueOf(a);
  if (v == ir::kNoValue) return nullptr;
  ir::NodeId p = g.value(v).producer;
  if (p < 0) return nullptr;
  const ir::Node& n = g.node(p);
  return n.erased ? nullptr : &n;
}

/// The element type of a tensor argument (a constant's, or a value's when the lowering knew it);
/// Undefined otherwise.
inline ir::DType dtypeOf(const ir::Graph& g, const ir::Arg& a) {
  if (a.isConstant()) return g.constants()[static_cast<size_t>(a.i)].dtype;
  return a.isValue() ? g.value(valueOf(a)).dtype : ir::DType::Undefined;
}

/// \p v is read by exactly one node and is not a graph output.
inline bool hasSingleUse(const ir::Graph& g, ir::ValueId v) {
  if (g.isGraphOutput(v)) return false;
  auto users = g.users(v);
  if (users.size() != 1) return false;
  // A node reading v twice (x + x) is one user but two uses.
  int uses = 0;
  std::vector<ir::ValueId> vs;
  for (const ir::Arg& a : g.node(users[0]).args) {
    vs.clear();
    a.collectValues(vs);
    for (ir::ValueId u : vs) uses += (u == v);
  }
  return uses == 1;
}

/// A float32, contiguous constant with data (or without data when parsed from text).
inline const ir::ConstantTensor* f32Constant(const ir::Graph& g, const ir::Arg& a) {
  if (!a.isConstant()) return nullptr;
  const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(a.i));
  if (c.dtype != ir::DType::Float32 || !c.isContiguous()) return nullptr;
  return &c;
}

/// A contiguous constant of a model's float dtype, float32 or bfloat16 (a bf16 model's weights):
/// for rewrites that only re-express the op (canonicalization, post-op fusion). Folds take it only
/// for a bf16 model's own bf16 operands (per-channel-mul-fold: ConvNeXt's layer scale), which they
/// widen exactly and validate in float32 like the model's bf16 weights.
inline const ir::ConstantTensor* floatConstant(const ir::Graph& g, const ir::Arg& a) {
  if (!a.isConstant()) return nullptr;
  const ir::ConstantTensor& c = g.constants().at(static_cast<size_t>(a.i));
  if ((c.dtype != ir::DType::Float32 && c.dtype != ir::DType::BFloat16) || !c.isContiguous()) return nullptr;
  return &c;
}

inline std::optional<double> numberArg(const ir::Arg& a) {
  if (a.kind == ir::Arg::Kind::Double) return a.d;
  if (a.kind == ir::Arg::Kind::Int) return static_cast<double>(a.i);
  return std::nullopt;
}

inline const std::vector<int64_t>* staticShape(const ir::Graph& g, ir::ValueId v) {
  if (v == ir::kNoValue) return nullptr;
  const ir::Value& val = g.value(v);
  return val.hasStaticShape() ? &val.shape : nullptr;
}

inline const std::vector<int64_t>* knownShape(const ir::Graph& g, ir::ValueId v) {
  if (v == ir::kNoValue) return nullptr;
  const ir::Value& val = g.value(v);
  return val.hasShape ? &val.shape : nullptr;
}

}  // namespace verifuse::rules::util
