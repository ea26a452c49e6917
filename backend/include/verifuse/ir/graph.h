// The verifuse graph IR: a torch-free SSA graph of ATen operator calls.
//
// A node names an ATen operator and overload ("aten::convolution", "") and holds its arguments
// normalized to the operator's schema order (the Python lowering fills in kwargs and defaults), so
// every consumer can read argument i without knowing how the user spelled the call. Values are
// typed (Tensor, Int, Float, Bool, None) and defined exactly once. Frozen weights are constants:
// torch-free handles (sizes, strides, dtype, data pointer) that keep their owner alive.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "verifuse/ir/sym_expr.h"
#include "verifuse/support/status.h"

namespace verifuse::ir {

using ValueId = int32_t;
using NodeId = int32_t;
using ConstantId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueType : uint8_t { Tensor, Int, Float, Bool, None, Other };
const char* valueTypeName(ValueType t);
StatusOr<ValueType> parseValueType(std::string_view name);

/// Element types, numbered as c10::ScalarType so the executor converts without a table.
enum class DType : int8_t {
  UInt8 = 0, Int8 = 1, Int16 = 2, Int32 = 3, Int64 = 4, Float16 = 5, Float32 = 6, Float64 = 7,
  Bool = 11, BFloat16 = 15, Undefined = -1,
};
const char* dtypeShortName(DType t);  // "f32", "i64", ...
StatusOr<DType> parseDTypeShortName(std::string_view name);
size_t dtypeSize(DType t);

/// Who owns a constant's memory. An AtTensor owner is an `at::Tensor` created by the bindings:
/// the executor reuses that very tensor (same identity, storage and version counter).
enum class ConstantOwner : uint8_t { None, AtTensor, HostBuffer };

struct ConstantTensor {
  std::string name;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  DType dtype = DType::Float32;
  void* data = nullptr;                 // null for constants parsed from text (no data)
  std::shared_ptr<void> owner;          // keeps `data` alive
  ConstantOwner ownerKind = ConstantOwner::None;
  /// A folded float32 constant computed on demand (data == nullptr): the executor materializes it
  /// when the one op reading it is built and frees it once the kernel has prepacked it, so the
  /// folded copies of a model's weights never all exist at once.
  std::function<std::shared_ptr<std::vector<float>>()> materialize;

  /// Float32 data: the buffer itself, or a freshly materialized copy held by \p keep.
  const float* floatData(std::shared_ptr<std::vector<float>>& keep) const {
    if (data) return static_cast<const float*>(data);
    if (!materialize) return nullptr;
    keep = materialize();
    return keep ? keep->data() : nullptr;
  }
  /// Its values as float32 whatever the float dtype: float32 data as floatData(), bfloat16 data
  /// (a bf16 model's weights) widened into \p keep (exact). Null for other dtypes or no data.
  const float* widenedFloatData(std::shared_ptr<std::vector<float>>& keep) const {
    if (dtype == DType::Float32) return floatData(keep);
    if (dtype != DType::BFloat16 || !data) return nullptr;
    const uint16_t* bits = static_cast<const uint16_t*>(data);
    keep = std::make_shared<std::vector<float>>(static_cast<size_t>(numel()));
    for (size_t k = 0; k < keep->size(); ++k) {
      const uint32_t wide = static_cast<uint32_t>(bits[k]) << 16;
      std::memcpy(&(*keep)[k], &wide, sizeof(float));
    }
    return keep->data();
  }
  bool hasData() const { return data != nullptr || static_cast<bool>(materialize); }
  /// Gives a lazy constant its data as a host buffer (no-op when it has data).
  void materializeNow() {
    if (data || !materialize) return;
    auto buffer = materialize();
    data = buffer->data();
    owner = buffer;
    ownerKind = ConstantOwner::HostBuffer;
  }
  int64_t numel() const;
  bool isContiguous() const;
};

/// One operand of a node or one graph output.
struct Arg {
  enum class Kind : uint8_t {
    None, Bool, Int, Double, String, Value, Constant, List, DTypeTag, Device, Layout, MemoryFormat
  };
  Kind kind = Kind::None;
  int64_t i = 0;        // Bool, Int, DTypeTag, Layout, MemoryFormat; ValueId / ConstantId
  double d = 0.0;       // Double
  std::string s;        // String, Device
  std::vector<Arg> list;

  static Arg none() { return {}; }
  static Arg boolean(bool v) { Arg a; a.kind = Kind::Bool; a.i = v; return a; }
  static Arg integer(int64_t v) { Arg a; a.kind = Kind::Int; a.i = v; return a; }
  static Arg real(double v) { Arg a; a.kind = Kind::Double; a.d = v; return a; }
  static Arg string(std::string v) { Arg a; a.kind = Kind::String; a.s = std::move(v); return a; }
  static Arg value(ValueId v) { Arg a; a.kind = Kind::Value; a.i = v; return a; }
  static Arg constant(ConstantId c) { Arg a; a.kind = Kind::Constant; a.i = c; return a; }
  static Arg makeList(std::vector<Arg> items) { Arg a; a.kind = Kind::List; a.list = std::move(items); return a; }
  static Arg dtype(DType t) { Arg a; a.kind = Kind::DTypeTag; a.i = static_cast<int64_t>(t); return a; }
  static Arg device(std::string d) { Arg a; a.kind = Kind::Device; a.s = std::move(d); return a; }
  static Arg layout(int64_t l) { Arg a; a.kind = Kind::Layout; a.i = l; return a; }
  static Arg memoryFormat(int64_t m) { Arg a; a.kind = Kind::MemoryFormat; a.i = m; return a; }
  static Arg intList(const std::vector<int64_t>& v);

  bool isValue() const { return kind == Kind::Value; }
  bool isConstant() const { return kind == Kind::Constant; }
  /// True if this argument (or, for a list, any element) refers to a graph value.
  bool usesValues() const;
  /// Appends every ValueId this argument refers to, in order.
  void collectValues(std::vector<ValueId>& out) const;
  /// Static int list, or an error if an element is not a plain Int.
  StatusOr<std::vector<int64_t>> asIntList() const;
  bool operator==(const Arg& other) const;
};

struct Value {
  ValueId id = kNoValue;
  ValueType type = ValueType::Tensor;
  NodeId producer = -1;     // -1: graph input
  int32_t outputIndex = 0;  // position among the producer's outputs
  std::string name;         // graph inputs keep the user's name; printer renumbers the rest
  /// Tensor sizes when known (the lowering copies them from FX's fake values); -1 marks a
  /// symbolic size. Rules use them for side conditions (rank, channel axis, residual shape).
  bool hasShape = false;
  std::vector<int64_t> shape;
  /// Dynamic shapes: the sizes as expressions over size symbols (sym_expr.h), one per dim, where
  /// shape[k] is -1; an invalid entry is a symbolic size nobody could name. Empty when every size
  /// is a constant or none is known symbolically.
  std::vector<SymExpr> symShape;
  /// Dynamic shapes: the strides as expressions (the lowering records them in graphs with
  /// symbolic sizes; views rely on them). Empty when not recorded.
  std::vector<SymExpr> symStrides;
  /// An Int value's symbolic value (a SymInt in the FX graph), invalid when not known.
  SymExpr symValue;
  /// A tensor's element type when the lowering knew it (FX's fake value), Undefined otherwise
  /// (values made by rewrites, text without one). Rules that depend on the dtype (the row engine
  /// computes in float32) require it; printed as "Tensor<f32>[...]".
  DType dtype = DType::Undefined;
  /// Static sizes (-1: symbolic, unnamed); drops symbolic sizes and strides.
  void setShape(std::vector<int64_t> s) {
    shape = std::move(s);
    hasShape = true;
    symShape.clear();
    symStrides.clear();
  }
  /// Sizes as expressions (constants become static sizes, invalid ones -1).
  void setSymShape(std::vector<SymExpr> sizes);
  /// Size \p k as an expression: the static size, the symbolic one, or invalid when unknown.
  SymExpr dim(size_t k) const;
  /// True if the shape is known and has no symbolic size.
  bool hasStaticShape() const;
};

struct Node {
  NodeId id = -1;
  std::string op;        // qualified operator, "aten::convolution" (or a builtin, "_operator::mul")
  std::string overload;  // "" for .default
  std::vector<Arg> args;
  std::vector<ValueId> outputs;
  bool erased = false;

  /// "aten::add.Tensor" or "aten::relu"
  std::string qualifiedName() const;
};

/// An SSA graph. Nodes are kept in a vector in topological order; erased nodes stay as
/// tombstones until compact() so NodeIds remain stable during a pass.
class Graph {
 public:
  ValueId addInput(std::string name, ValueType type);
  ConstantId addConstant(ConstantTensor constant);
  /// Appends a node with \p outputTypes.size() fresh outputs and returns its id.
  NodeId addNode(std::string op, std::string overload, std::vector<Arg> args,
                 const std::vector<ValueType>& outputTypes);
  void setOutputs(std::vector<Arg> outputs) { outputs_ = std::move(outputs); }

  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutableNodes() { return nodes_; }
  const std::vector<Arg>& outputs() const { return outputs_; }
  std::vector<Arg>& mutableOutputs() { return outputs_; }
  const std::vector<ConstantTensor>& constants() const { return constants_; }
  std::vector<ConstantTensor>& mutableConstants() { return constants_; }
  const Value& value(ValueId id) const { return values_.at(static_cast<size_t>(id)); }
  Value& mutableValue(ValueId id) { return values_.at(static_cast<size_t>(id)); }
  size_t numValues() const { return values_.size(); }
  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& mutableNode(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  /// Number of live (non-erased) nodes.
  size_t numLiveNodes() const;

  /// Nodes (live) that read \p v, in graph order; a node using \p v twice appears once.
  std::vector<NodeId> users(ValueId v) const;
  /// True if \p v is one of the graph's outputs.
  bool isGraphOutput(ValueId v) const;
  /// Replaces every use of \p from (node args and graph outputs) by \p to.
  void replaceAllUses(ValueId from, ValueId to);
  void eraseNode(NodeId id) { nodes_.at(static_cast<size_t>(id)).erased = true; }
  /// Drops erased nodes and renumbers nodes (values keep their ids).
  void compact();

 private:
  std::vector<ValueId> inputs_;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<Arg> outputs_;
  std::vector<ConstantTensor> constants_;
};

/// Well-formedness: every value defined once before use, outputs defined, constants in range,
/// producers consistent. Returns the first violation as kInvalidGraph.
Status verifyGraph(const Graph& graph);

/// Stable text form: inputs keep their names, other values are renumbered %0, %1, ... in
/// definition order, constants print as $name with dtype and shape. Golden tests compare it.
std::string printGraph(const Graph& graph);

/// Reads printGraph's output back (constants get shape and dtype, no data).
StatusOr<Graph> parseGraph(std::string_view text);

}  // namespace verifuse::ir
