// Graph edits for rewrite rules (see graph_edit.h).
#include "verifuse/ir/graph_edit.h"

#include <utility>

namespace verifuse::ir {

StatusOr<ConstantId> addConstantView(Graph& g, ConstantId source, std::vector<int64_t> sizes,
                                     std::vector<int64_t> strides, const std::string& suffix) {
  if (source < 0 || static_cast<size_t>(source) >= g.constants().size()) {
    return invalidArgument("constant view of constant #" + std::to_string(source) + ", which does not exist");
  }
  if (sizes.size() != strides.size()) return invalidArgument("constant view: sizes and strides differ in rank");
  const ConstantTensor& src = g.constants()[static_cast<size_t>(source)];
  // The largest element offset the view reads must lie within the source's extent.
  int64_t viewLast = 0, sourceLast = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0 || strides[k] < 0) return invalidArgument("constant view: negative size or stride");
    if (sizes[k] == 0) return invalidArgument("constant view: empty view");
    viewLast += (sizes[k] - 1) * strides[k];
  }
  for (size_t k = 0; k < src.sizes.size(); ++k) {
    if (src.sizes[k] == 0) return invalidArgument("constant view: empty source");
    sourceLast += (src.sizes[k] - 1) * src.strides.at(k);
  }
  if (viewLast > sourceLast) {
    return invalidArgument("constant view of $" + src.name + " reads past the source's extent");
  }
  const std::string name = src.name + suffix;
  for (size_t k = 0; k < g.constants().size(); ++k) {
    const ConstantTensor& c = g.constants()[k];
    if (c.name == name && c.data == src.data && c.owner == src.owner && c.sizes == sizes && c.strides == strides &&
        c.dtype == src.dtype) {
      return static_cast<ConstantId>(k);
    }
  }
  ConstantTensor view;
  view.name = name;
  for (int n = 1;; ++n) {  // a unique name (a constant of that name may be something else)
    bool taken = false;
    for (const ConstantTensor& c : g.constants()) taken |= c.name == view.name;
    if (!taken) break;
    view.name = name + "_" + std::to_string(n);
  }
  view.sizes = std::move(sizes);
  view.strides = std::move(strides);
  view.dtype = src.dtype;
  view.data = src.data;
  view.owner = src.owner;
  view.ownerKind = src.ownerKind;
  view.materialize = src.materialize;
  return g.addConstant(std::move(view));
}

ValueId addNodeOutput(Graph& g, NodeId node, ValueType type) {
  // Graph makes values only with nodes: make one at the end, take its value, drop the carrier.
  const NodeId carrier = g.addNode("prim::carrier", "", {}, {type});
  const ValueId v = g.node(carrier).outputs[0];
  g.mutableNodes().pop_back();
  Node& n = g.mutableNode(node);
  Value& value = g.mutableValue(v);
  value.producer = node;
  value.outputIndex = static_cast<int32_t>(n.outputs.size());
  n.outputs.push_back(v);
  return v;
}

bool isFreeSlot(const Graph& g, NodeId slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= g.nodes().size()) return false;
  const Node& n = g.node(slot);
  if (n.outputs.size() != 1) return false;
  if (n.erased) return true;
  return g.users(n.outputs[0]).empty() && !g.isGraphOutput(n.outputs[0]);
}

NodeId findFreeSlot(const Graph& g, NodeId after, NodeId before) {
  for (NodeId k = before - 1; k > after && k >= 0; --k) {
    if (isFreeSlot(g, k)) return k;
  }
  return -1;
}

StatusOr<ValueId> placeInSlot(Graph& g, NodeId slot, std::string op, std::string overload, std::vector<Arg> args,
                              ValueType outputType) {
  if (!isFreeSlot(g, slot)) return invalidArgument("node " + std::to_string(slot) + " is not a free slot");
  Node& n = g.mutableNode(slot);
  n.op = std::move(op);
  n.overload = std::move(overload);
  n.args = std::move(args);
  n.erased = false;
  Value& v = g.mutableValue(n.outputs[0]);
  v.type = outputType;
  v.name.clear();
  v.setShape({});  // also drops symbolic sizes/strides where the IR records them
  v.hasShape = false;
  return n.outputs[0];
}

}  // namespace verifuse::ir
