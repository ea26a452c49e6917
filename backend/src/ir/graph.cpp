// Graph construction, queries and well-formedness.
#include <algorithm>
#include <set>

#include "verifuse/ir/graph.h"

namespace verifuse::ir {

const char* valueTypeName(ValueType t) {
  switch (t) {
    case ValueType::Tensor: return "Tensor";
    case ValueType::Int: return "Int";
    case ValueType::Float: return "Float";
    case ValueType::Bool: return "Bool";
    case ValueType::None: return "None";
    case ValueType::Other: return "Other";
  }
  return "Other";
}

StatusOr<ValueType> parseValueType(std::string_view name) {
  for (ValueType t : {ValueType::Tensor, ValueType::Int, ValueType::Float, ValueType::Bool,
                      ValueType::None, ValueType::Other}) {
    if (name == valueTypeName(t)) return t;
  }
  return invalidArgument("unknown value type '" + std::string(name) + "'");
}

namespace {
struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::UInt8, "u8", 1},   {DType::Int8, "i8", 1},     {DType::Int16, "i16", 2},
    {DType::Int32, "i32", 4},  {DType::Int64, "i64", 8},   {DType::Float16, "f16", 2},
    {DType::Float32, "f32", 4}, {DType::Float64, "f64", 8}, {DType::Bool, "bool", 1},
    {DType::BFloat16, "bf16", 2}, {DType::Undefined, "undef", 0},
};
}  // namespace

const char* dtypeShortName(DType t) {
  for (const auto& info : kDTypes) {
    if (info.dtype == t) return info.name;
  }
  return "undef";
}

StatusOr<DType> parseDTypeShortName(std::string_view name) {
  for (const auto& info : kDTypes) {
    if (name == info.name) return info.dtype;
  }
  return invalidArgument("unknown dtype '" + std::string(name) + "'");
}

size_t dtypeSize(DType t) {
  for (const auto& info : kDTypes) {
    if (info.dtype == t) return info.size;
  }
  return 0;
}

int64_t ConstantTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool ConstantTensor::isContiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

Arg Arg::intList(const std::vector<int64_t>& v) {
  std::vector<Arg> items;
  items.reserve(v.size());
  for (int64_t x : v) items.push_back(integer(x));
  return makeList(std::move(items));
}

bool Arg::usesValues() const {
  if (kind == Kind::Value) return true;
  if (kind == Kind::List) {
    return std::any_of(list.begin(), list.end(), [](const Arg& a) { return a.usesValues(); });
  }
  return false;
}

void Arg::collectValues(std::vector<ValueId>& out) const {
  if (kind == Kind::Value) out.push_back(static_cast<ValueId>(i));
  if (kind == Kind::List) {
    for (const Arg& a : list) a.collectValues(out);
  }
}

StatusOr<std::vector<int64_t>> Arg::asIntList() const {
  if (kind != Kind::List) return invalidArgument("expected an int list");
  std::vector<int64_t> out;
  for (const Arg& a : list) {
    if (a.kind != Kind::Int) return invalidArgument("int list has a non-constant element");
    out.push_back(a.i);
  }
  return out;
}

bool Arg::operator==(const Arg& o) const {
  return kind == o.kind && i == o.i && (d == o.d || (d != d && o.d != o.d)) && s == o.s &&
         list == o.list;
}

std::string Node::qualifiedName() const {
  return overload.empty() ? op : op + "." + overload;
}

bool Value::hasStaticShape() const {
  if (!hasShape) return false;
  for (int64_t d : shape) {
    if (d < 0) return false;
  }
  return true;
}

void Value::setSymShape(std::vector<SymExpr> sizes) {
  shape.assign(sizes.size(), -1);
  hasShape = true;
  bool symbolic = false;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (auto v = sizes[k].asInt()) shape[k] = *v;
    else if (sizes[k].valid()) symbolic = true;
  }
  if (symbolic) symShape = std::move(sizes);
  else symShape.clear();
}

SymExpr Value::dim(size_t k) const {
  if (!hasShape || k >= shape.size()) return SymExpr();
  if (shape[k] >= 0) return SymExpr::integer(shape[k]);
  return k < symShape.size() ? symShape[k] : SymExpr();
}

ValueId Graph::addInput(std::string name, ValueType type) {
  Value v;
  v.id = static_cast<ValueId>(values_.size());
  v.type = type;
  v.name = std::move(name);
  values_.push_back(v);
  inputs_.push_back(v.id);
  return v.id;
}

ConstantId Graph::addConstant(ConstantTensor constant) {
  constants_.push_back(std::move(constant));
  return static_cast<ConstantId>(constants_.size() - 1);
}

NodeId Graph::addNode(std::string op, std::string overload, std::vector<Arg> args,
                      const std::vector<ValueType>& outputTypes) {
  Node n;
  n.id = static_cast<NodeId>(nodes_.size());
  n.op = std::move(op);
  n.overload = std::move(overload);
  n.args = std::move(args);
  for (size_t k = 0; k < outputTypes.size(); ++k) {
    Value v;
    v.id = static_cast<ValueId>(values_.size());
    v.type = outputTypes[k];
    v.producer = n.id;
    v.outputIndex = static_cast<int32_t>(k);
    values_.push_back(v);
    n.outputs.push_back(v.id);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().id;
}

size_t Graph::numLiveNodes() const {
  return static_cast<size_t>(
      std::count_if(nodes_.begin(), nodes_.end(), [](const Node& n) { return !n.erased; }));
}

std::vector<NodeId> Graph::users(ValueId v) const {
  std::vector<NodeId> out;
  std::vector<ValueId> used;
  for (const Node& n : nodes_) {
    if (n.erased) continue;
    used.clear();
    for (const Arg& a : n.args) a.collectValues(used);
    if (std::find(used.begin(), used.end(), v) != used.end()) out.push_back(n.id);
  }
  return out;
}

bool Graph::isGraphOutput(ValueId v) const {
  std::vector<ValueId> used;
  for (const Arg& a : outputs_) a.collectValues(used);
  return std::find(used.begin(), used.end(), v) != used.end();
}

namespace {
void replaceInArg(Arg& a, ValueId from, ValueId to) {
  if (a.kind == Arg::Kind::Value && a.i == from) a.i = to;
  if (a.kind == Arg::Kind::List) {
    for (Arg& e : a.list) replaceInArg(e, from, to);
  }
}
}  // namespace

void Graph::replaceAllUses(ValueId from, ValueId to) {
  for (Node& n : nodes_) {
    if (n.erased) continue;
    for (Arg& a : n.args) replaceInArg(a, from, to);
  }
  for (Arg& a : outputs_) replaceInArg(a, from, to);
}

void Graph::compact() {
  std::vector<Node> live;
  live.reserve(nodes_.size());
  for (Node& n : nodes_) {
    if (!n.erased) live.push_back(std::move(n));
  }
  for (size_t k = 0; k < live.size(); ++k) {
    live[k].id = static_cast<NodeId>(k);
    for (ValueId out : live[k].outputs) values_[static_cast<size_t>(out)].producer = live[k].id;
  }
  nodes_ = std::move(live);
}

namespace {
Status checkArg(const Graph& g, const Arg& a, const std::vector<bool>& defined,
                const std::string& where) {
  switch (a.kind) {
    case Arg::Kind::Value: {
      if (a.i < 0 || static_cast<size_t>(a.i) >= g.numValues()) {
        return invalidGraph(where + " refers to value #" + std::to_string(a.i) + " which does not exist");
      }
      if (!defined[static_cast<size_t>(a.i)]) {
        return invalidGraph(where + " uses value #" + std::to_string(a.i) + " before it is defined");
      }
      return Status::ok();
    }
    case Arg::Kind::Constant:
      if (a.i < 0 || static_cast<size_t>(a.i) >= g.constants().size()) {
        return invalidGraph(where + " refers to constant #" + std::to_string(a.i) + " which does not exist");
      }
      return Status::ok();
    case Arg::Kind::List:
      for (const Arg& e : a.list) VF_RETURN_IF_ERROR(checkArg(g, e, defined, where));
      return Status::ok();
    default:
      return Status::ok();
  }
}
}  // namespace

Status verifyGraph(const Graph& g) {
  std::vector<bool> defined(g.numValues(), false);
  for (ValueId in : g.inputs()) {
    if (g.value(in).producer != -1) return invalidGraph("graph input #" + std::to_string(in) + " has a producer");
    defined[static_cast<size_t>(in)] = true;
  }
  std::set<std::string> inputNames;
  for (ValueId in : g.inputs()) {
    if (!inputNames.insert(g.value(in).name).second) {
      return invalidGraph("duplicate graph input name '" + g.value(in).name + "'");
    }
  }
  for (const Node& n : g.nodes()) {
    if (n.erased) continue;
    if (n.op.empty()) return invalidGraph("node " + std::to_string(n.id) + " has no operator");
    const std::string where = "node " + std::to_string(n.id) + " (" + n.qualifiedName() + ")";
    for (const Arg& a : n.args) VF_RETURN_IF_ERROR(checkArg(g, a, defined, where));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      ValueId out = n.outputs[k];
      if (out < 0 || static_cast<size_t>(out) >= g.numValues()) {
        return invalidGraph(where + " has an output that does not exist");
      }
      if (defined[static_cast<size_t>(out)]) {
        return invalidGraph(where + " redefines value #" + std::to_string(out));
      }
      const Value& v = g.value(out);
      if (v.producer != n.id || v.outputIndex != static_cast<int32_t>(k)) {
        return invalidGraph(where + " output #" + std::to_string(out) + " records the wrong producer");
      }
      defined[static_cast<size_t>(out)] = true;
    }
  }
  for (const Arg& a : g.outputs()) VF_RETURN_IF_ERROR(checkArg(g, a, defined, "graph output"));
  for (const ConstantTensor& c : g.constants()) {
    if (c.sizes.size() != c.strides.size()) {
      return invalidGraph("constant '" + c.name + "' has " + std::to_string(c.sizes.size()) +
                          " sizes but " + std::to_string(c.strides.size()) + " strides");
    }
  }
  return Status::ok();
}

}  // namespace verifuse::ir
