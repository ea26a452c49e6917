// Layout reasoning for rules (see strides.h).
#include "rules/strides.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "rules/graph_util.h"
#include "verifuse/ir/op_schema.h"

namespace verifuse::rules::util {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::operand;
using ir::selfOperand;
using ir::ValueId;

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (size_t k = sizes.size(); k-- > 1;) s[k - 1] = s[k] * std::max<int64_t>(sizes[k], 1);
  return s;
}

std::optional<std::vector<int64_t>> viewStrides(const std::vector<int64_t>& oldShape,
                                                const std::vector<int64_t>& oldStride,
                                                const std::vector<int64_t>& newShape) {
  // at::detail::computeStride (aten/src/ATen/TensorUtils.cpp).
  if (oldShape.empty()) return std::vector<int64_t>(newShape.size(), 1);
  const int64_t numel = std::accumulate(oldShape.begin(), oldShape.end(), int64_t{1}, std::multiplies<>());
  if (numel != std::accumulate(newShape.begin(), newShape.end(), int64_t{1}, std::multiplies<>())) return std::nullopt;
  if (numel == 0) return oldShape == newShape ? std::optional(oldStride) : std::optional(contiguousStrides(newShape));
  std::vector<int64_t> newStride(newShape.size(), 0);
  int64_t viewD = static_cast<int64_t>(newShape.size()) - 1;
  int64_t chunkBaseStride = oldStride.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t tensorD = static_cast<int64_t>(oldShape.size()) - 1; tensorD >= 0; tensorD--) {
    tensorNumel *= oldShape[static_cast<size_t>(tensorD)];
    if (tensorD == 0 || (oldShape[static_cast<size_t>(tensorD - 1)] != 1 &&
                         oldStride[static_cast<size_t>(tensorD - 1)] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newShape[static_cast<size_t>(viewD)] == 1)) {
        newStride[static_cast<size_t>(viewD)] = viewNumel * chunkBaseStride;
        viewNumel *= newShape[static_cast<size_t>(viewD)];
        viewD--;
      }
      if (viewNumel != tensorNumel) return std::nullopt;
      if (tensorD > 0) {
        chunkBaseStride = oldStride[static_cast<size_t>(tensorD - 1)];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  if (viewD != -1) return std::nullopt;
  return newStride;
}

bool nonOverlappingAndDense(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  // c10's is_non_overlapping_and_dense: sort dims by stride, then they must be contiguous in that order.
  std::vector<size_t> perm(sizes.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes[a] < 2) return false;
    if (sizes[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t require = 1;
  for (size_t d : perm) {
    if (sizes[d] < 2) continue;
    if (strides[d] != require) return false;
    require *= sizes[d];
  }
  return true;
}

namespace {

int64_t normDim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

const std::set<std::string>& unmodelledViews() {
  static const std::set<std::string> ops = {
      "aten::split",       "aten::split_with_sizes", "aten::unbind",       "aten::chunk",
      "aten::narrow",      "aten::unfold",           "aten::diagonal",     "aten::as_strided",
      "aten::_reshape_alias", "aten::view_as_real",  "aten::view_as_complex", "aten::movedim",
      "aten::swapaxes",    "aten::unflatten",        "aten::flatten",      "aten::tensor_split",
      "aten::expand_as",   "aten::view_as",          "aten::squeeze",      "aten::real",
      "aten::imag",        "aten::indices",          "aten::values",       "aten::set_",
      "aten::copy_",       "aten::resize_",
  };
  return ops;
}

bool fail(std::string* whyNot, const std::string& reason) {
  if (whyNot) *whyNot = reason;
  return false;
}

/// The output strides of view-like \p n reading a tensor of \p sizes / \p strides; nullopt with
/// *stop = true for a reader that accepts any layout, nullopt with a reason otherwise.
std::optional<std::vector<int64_t>> propagate(const Graph& g, const Node& n, const std::vector<int64_t>& sizes,
                                              const std::vector<int64_t>& strides, bool* stop, std::string* whyNot) {
  *stop = false;
  const std::string& op = n.op;
  const auto* outShape = n.outputs.empty() ? nullptr : staticShape(g, n.outputs[0]);
  auto needShape = [&]() {
    if (!outShape) fail(whyNot, "a reader (" + n.qualifiedName() + ") has no static output shape");
    return outShape != nullptr;
  };
  const size_t rank = sizes.size();
  if (op == "aten::view" || op == "aten::_unsafe_view") {
    if (!needShape()) return std::nullopt;
    auto s = viewStrides(sizes, strides, *outShape);
    if (!s) fail(whyNot, "a reader's view to " + std::to_string(outShape->size()) + "-d needs a layout the new strides do not have");
    return s;
  }
  if (op == "aten::reshape") {
    if (!needShape()) return std::nullopt;
    auto s = viewStrides(sizes, strides, *outShape);
    return s ? s : std::optional(contiguousStrides(*outShape));  // reshape copies when it cannot view
  }
  if (op == "aten::alias" || op == "aten::detach" || op == "aten::lift_fresh_copy") return strides;
  if (op == "aten::permute") {
    auto dims = ir::hasOperands<ir::Permute>(n) ? operand(n, ir::Permute::dims).asIntList() : invalidArgument("permute");
    if (!dims.isOk() || dims->size() != rank) return fail(whyNot, "permute with unknown dims"), std::nullopt;
    std::vector<int64_t> out;
    for (int64_t d : *dims) out.push_back(strides[static_cast<size_t>(normDim(d, rank))]);
    return out;
  }
  if (op == "aten::transpose" || op == "aten::t") {
    int64_t a = 0, b = 1;
    if (op == "aten::transpose") {
      if (!ir::hasOperands<ir::Transpose>(n) || operand(n, ir::Transpose::dim0).kind != Arg::Kind::Int ||
          operand(n, ir::Transpose::dim1).kind != Arg::Kind::Int) {
        return fail(whyNot, "transpose with unknown dims"), std::nullopt;
      }
      a = normDim(operand(n, ir::Transpose::dim0).i, rank);
      b = normDim(operand(n, ir::Transpose::dim1).i, rank);
    }
    std::vector<int64_t> out = strides;
    if (rank >= 2) std::swap(out[static_cast<size_t>(a)], out[static_cast<size_t>(b)]);
    return out;
  }
  if (op == "aten::expand") {
    if (!needShape()) return std::nullopt;
    const size_t outRank = outShape->size();
    std::vector<int64_t> out(outRank, 0);
    for (size_t k = 0; k < outRank; ++k) {
      if (k < outRank - rank) continue;  // new leading dim: stride 0
      const size_t in = k - (outRank - rank);
      out[k] = (sizes[in] == 1 && (*outShape)[k] != 1) ? 0 : strides[in];
    }
    return out;
  }
  if (op == "aten::unsqueeze") {
    if (!ir::hasOperands<ir::Unsqueeze>(n) || operand(n, ir::Unsqueeze::dim).kind != Arg::Kind::Int) {
      return fail(whyNot, "unsqueeze dim unknown"), std::nullopt;
    }
    const int64_t d = normDim(operand(n, ir::Unsqueeze::dim).i, rank + 1);
    std::vector<int64_t> out = strides;
    const int64_t s = d >= static_cast<int64_t>(rank) ? 1 : sizes[static_cast<size_t>(d)] * strides[static_cast<size_t>(d)];
    out.insert(out.begin() + d, s);
    return out;
  }
  if (op == "aten::squeeze" && (n.overload == "dim" || n.overload == "dims")) {
    std::vector<int64_t> dims;
    // squeeze.dim(self, int dim) or squeeze.dims(self, int[] dim)
    const Arg* dim = ir::hasOperands<ir::Squeeze>(n) ? &operand(n, ir::Squeeze::dim) : nullptr;
    if (n.overload == "dim" && dim && dim->kind == Arg::Kind::Int) dims = {dim->i};
    else if (auto l = dim ? dim->asIntList() : invalidArgument("squeeze"); l.isOk()) dims = *l;
    else return fail(whyNot, "squeeze dims unknown"), std::nullopt;
    std::vector<int64_t> out;
    for (size_t k = 0; k < rank; ++k) {
      bool drop = sizes[k] == 1 && std::any_of(dims.begin(), dims.end(), [&](int64_t d) { return normDim(d, rank) == static_cast<int64_t>(k); });
      if (!drop) out.push_back(strides[k]);
    }
    return out;
  }
  if (op == "aten::slice" && n.overload == "Tensor") {
    if (!ir::hasOperands<ir::Slice>(n) || operand(n, ir::Slice::dim).kind != Arg::Kind::Int ||
        operand(n, ir::Slice::step).kind != Arg::Kind::Int) {
      return fail(whyNot, "slice with unknown dim or step"), std::nullopt;
    }
    std::vector<int64_t> out = strides;
    out[static_cast<size_t>(normDim(operand(n, ir::Slice::dim).i, rank))] *= operand(n, ir::Slice::step).i;
    return out;
  }
  if (op == "aten::select" && n.overload == "int") {
    if (!ir::hasOperands<ir::Select>(n) || operand(n, ir::Select::dim).kind != Arg::Kind::Int) {
      return fail(whyNot, "select dim unknown"), std::nullopt;
    }
    std::vector<int64_t> out = strides;
    out.erase(out.begin() + normDim(operand(n, ir::Select::dim).i, rank));
    return out;
  }
  if (op == "aten::clone") {
    // memory_format: absent or None (preserve), preserve_format (1) or contiguous_format (0).
    const Arg* format = ir::hasAtLeastOperands<ir::Clone>(n) ? &operand(n, ir::Clone::memory_format) : nullptr;
    const bool preserve = !format || format->kind == Arg::Kind::None ||
                          (format->kind == Arg::Kind::MemoryFormat && format->i == 1);
    const bool contiguous = format && format->kind == Arg::Kind::MemoryFormat && format->i == 0;
    if (contiguous) {
      *stop = true;
      return std::nullopt;
    }
    if (preserve && nonOverlappingAndDense(sizes, strides)) return strides;  // empty_like keeps them
    if (preserve && rank < 4) return contiguousStrides(sizes);               // no channels-last guess below 4-d
    return fail(whyNot, "a clone whose output layout depends on the new strides"), std::nullopt;
  }
  if (unmodelledViews().count(op)) return fail(whyNot, "a reader (" + n.qualifiedName() + ") is a view op verifuse does not model"), std::nullopt;
  *stop = true;  // a compute op: reads any layout
  return std::nullopt;
}

bool walk(const Graph& g, ValueId v, const std::vector<int64_t>& strides, int depth, std::string* whyNot) {
  if (depth > 32) return fail(whyNot, "view chain too long");
  if (g.isGraphOutput(v)) return fail(whyNot, "the value (or a view of it) is a graph output; its strides would change");
  const auto* sizes = staticShape(g, v);
  if (!sizes || sizes->size() != strides.size()) return fail(whyNot, "a value on the way has no static shape");
  for (ir::NodeId user : g.users(v)) {
    const Node& n = g.node(user);
    bool stop = false;
    auto out = propagate(g, n, *sizes, strides, &stop, whyNot);
    if (stop) continue;
    if (!out) return false;
    // A view-like op reads v as its first argument; v anywhere else (an index, a list) is a compute use.
    if (!(selfOperand(n).isValue() && valueOf(selfOperand(n)) == v) || n.outputs.size() != 1) {
      return fail(whyNot, "a view-like reader uses the value in an unexpected position");
    }
    if (!walk(g, n.outputs[0], *out, depth + 1, whyNot)) return false;
  }
  return true;
}

}  // namespace

bool readersAcceptLayout(const Graph& g, ValueId v, const std::vector<int64_t>& strides, std::string* whyNot) {
  return walk(g, v, strides, 0, whyNot);
}

namespace {

bool walkAnyLayout(const Graph& g, ValueId v, int depth, std::string* whyNot) {
  static const std::set<std::string> anyStrides = {"aten::permute", "aten::transpose", "aten::t",
                                                   "aten::unsqueeze", "aten::slice", "aten::select",
                                                   "aten::expand", "aten::alias", "aten::detach"};
  static const std::set<std::string> layoutDependent = {"aten::view", "aten::_unsafe_view", "aten::reshape",
                                                        "aten::clone"};
  if (depth > 32) return fail(whyNot, "view chain too long");
  if (g.isGraphOutput(v)) return fail(whyNot, "the value (or a view of it) is a graph output; its strides would change");
  for (ir::NodeId user : g.users(v)) {
    const Node& n = g.node(user);
    if (layoutDependent.count(n.op) || unmodelledViews().count(n.op)) {
      return fail(whyNot, "a reader (" + n.qualifiedName() + ") depends on the layout");
    }
    if (!anyStrides.count(n.op)) continue;  // a compute op: reads any layout
    if (!(selfOperand(n).isValue() && valueOf(selfOperand(n)) == v) || n.outputs.size() != 1) {
      return fail(whyNot, "a view-like reader uses the value in an unexpected position");
    }
    if (!walkAnyLayout(g, n.outputs[0], depth + 1, whyNot)) return false;
  }
  return true;
}

}  // namespace

bool readersAcceptAnyLayout(const Graph& g, ValueId v, std::string* whyNot) { return walkAnyLayout(g, v, 0, whyNot); }

}  // namespace verifuse::rules::util
