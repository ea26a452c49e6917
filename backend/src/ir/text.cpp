// Stable text form of the IR (printer) and its reader (parser), used by golden tests.
//
//   graph(%x : Tensor, %s0 : Int) {
//     %0 : Tensor = aten::convolution(%x, $w, $b, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)
//     %1 : Tensor, %2 : Tensor, %3 : Tensor = aten::_native_batch_norm_legit_no_training(%0, ...)
//     return (%1)
//   }
//   constants {
//     $w : f32[4, 3, 3, 3]
//   }
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "verifuse/ir/graph.h"

namespace verifuse::ir {

namespace {

std::string formatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", d);
  std::string s(buf);
  // Shortest form that reads back to the same double keeps golden files readable.
  for (int precision = 1; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) {
      s = buf;
      break;
    }
  }
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

class Printer {
 public:
  explicit Printer(const Graph& g) : g_(g), names_(g.numValues()) {
    for (ValueId in : g.inputs()) names_[static_cast<size_t>(in)] = "%" + g.value(in).name;
    int next = 0;
    for (const Node& n : g.nodes()) {
      if (n.erased) continue;
      for (ValueId out : n.outputs) names_[static_cast<size_t>(out)] = "%" + std::to_string(next++);
    }
  }

  /// "Tensor", or "Tensor[1, 16, ?, ?]" when the shape is known ('?' = symbolic, unnamed), with
  /// symbolic sizes as expressions ("Tensor[x_size0, 3, (-4 + x_size2)]") and, when they are not
  /// the contiguous ones, recorded strides in braces ("Tensor[x_size0, 8]{1, x_size0}"). An Int
  /// with a symbolic value: "Int{x_size0}".
  static std::string typeText(const Value& v) {
    std::string out = valueTypeName(v.type);
    if (v.dtype != DType::Undefined) out += std::string("<") + dtypeShortName(v.dtype) + ">";
    if (v.symValue.valid()) return out + "{" + v.symValue.toString() + "}";
    if (!v.hasShape) return out;
    out += "[";
    for (size_t k = 0; k < v.shape.size(); ++k) {
      if (k) out += ", ";
      SymExpr d = v.dim(k);
      out += d.valid() ? d.toString() : std::string("?");
    }
    out += "]";
    if (!v.symStrides.empty() && !contiguous(v)) {
      out += "{";
      for (size_t k = 0; k < v.symStrides.size(); ++k) out += (k ? ", " : "") + v.symStrides[k].toString();
      out += "}";
    }
    return out;
  }

  /// The recorded strides are the row-major ones for the sizes.
  static bool contiguous(const Value& v) {
    if (v.symStrides.size() != v.shape.size()) return false;
    SymExpr expected = SymExpr::integer(1);
    for (size_t k = v.shape.size(); k-- > 0;) {
      if (!SymExpr::samePolynomial(v.symStrides[k], expected)) return false;
      expected = expected * v.dim(k);
    }
    return true;
  }

  std::string print() {
    std::ostringstream os;
    os << "graph(";
    for (size_t k = 0; k < g_.inputs().size(); ++k) {
      ValueId in = g_.inputs()[k];
      os << (k ? ", " : "") << names_[static_cast<size_t>(in)] << " : " << typeText(g_.value(in));
    }
    os << ") {\n";
    for (const Node& n : g_.nodes()) {
      if (n.erased) continue;
      os << "  ";
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        ValueId out = n.outputs[k];
        os << (k ? ", " : "") << names_[static_cast<size_t>(out)] << " : " << typeText(g_.value(out));
      }
      if (!n.outputs.empty()) os << " = ";
      os << n.qualifiedName() << "(";
      const char* separator = "";
      for (const Arg& a : n.args) os << std::exchange(separator, ", ") << arg(a);
      os << ")\n";
    }
    os << "  return (";
    for (size_t k = 0; k < g_.outputs().size(); ++k) os << (k ? ", " : "") << arg(g_.outputs()[k]);
    os << ")\n}\n";
    if (!g_.constants().empty()) {
      os << "constants {\n";
      for (const ConstantTensor& c : g_.constants()) {
        os << "  $" << c.name << " : " << dtypeShortName(c.dtype) << "[";
        for (size_t k = 0; k < c.sizes.size(); ++k) os << (k ? ", " : "") << c.sizes[k];
        os << "]\n";
      }
      os << "}\n";
    }
    return os.str();
  }

 private:
  std::string arg(const Arg& a) {
    switch (a.kind) {
      case Arg::Kind::None: return "None";
      case Arg::Kind::Bool: return a.i ? "true" : "false";
      case Arg::Kind::Int: return std::to_string(a.i);
      case Arg::Kind::Double: return formatDouble(a.d);
      case Arg::Kind::String: return quote(a.s);
      case Arg::Kind::Value:
        if (a.i < 0 || static_cast<size_t>(a.i) >= names_.size() || names_[static_cast<size_t>(a.i)].empty()) {
          return "%<invalid#" + std::to_string(a.i) + ">";
        }
        return names_[static_cast<size_t>(a.i)];
      case Arg::Kind::Constant:
        if (a.i < 0 || static_cast<size_t>(a.i) >= g_.constants().size()) {
          return "$<invalid#" + std::to_string(a.i) + ">";
        }
        return "$" + g_.constants()[static_cast<size_t>(a.i)].name;
      case Arg::Kind::List: {
        std::string s = "[";
        for (size_t k = 0; k < a.list.size(); ++k) s += (k ? ", " : "") + arg(a.list[k]);
        return s + "]";
      }
      case Arg::Kind::DTypeTag: return std::string("dtype(") + dtypeShortName(static_cast<DType>(a.i)) + ")";
      case Arg::Kind::Device: return "device(" + a.s + ")";
      case Arg::Kind::Layout: return "layout(" + std::to_string(a.i) + ")";
      case Arg::Kind::MemoryFormat: return "memory_format(" + std::to_string(a.i) + ")";
    }
    return "?";
  }

  const Graph& g_;
  std::vector<std::string> names_;
};

// ---------------------------------------------------------------------------------------------
// Parser: a hand-written recursive-descent reader over printGraph's grammar.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<Graph> parse() {
    VF_RETURN_IF_ERROR(expectWord("graph"));
    VF_RETURN_IF_ERROR(expect('('));
    VF_RETURN_IF_ERROR(commaList(')', [&]() -> Status {
      VF_ASSIGN_OR_RETURN(std::string name, valueName());
      VF_RETURN_IF_ERROR(expect(':'));
      VF_ASSIGN_OR_RETURN(std::string typeName, identifier());
      VF_ASSIGN_OR_RETURN(ValueType type, parseValueType(typeName));
      if (values_.count(name)) return error("duplicate value %" + name);
      values_[name] = graph_.addInput(name, type);
      return typeDetails(graph_.mutableValue(values_[name]));
    }));
    VF_RETURN_IF_ERROR(expect('{'));
    while (true) {
      skipSpace();
      if (startsWithWord("return")) break;
      VF_RETURN_IF_ERROR(parseNode());
    }
    VF_RETURN_IF_ERROR(expectWord("return"));
    VF_RETURN_IF_ERROR(expect('('));
    std::vector<Arg> outputs;
    VF_RETURN_IF_ERROR(argList(')', outputs));
    VF_RETURN_IF_ERROR(expect('}'));
    skipSpace();
    if (startsWithWord("constants")) {
      VF_RETURN_IF_ERROR(expectWord("constants"));
      VF_RETURN_IF_ERROR(expect('{'));
      while (true) {
        skipSpace();
        if (peekIs('}')) { ++pos_; break; }
        VF_RETURN_IF_ERROR(parseConstantDecl());
      }
    }
    skipSpace();
    if (pos_ != text_.size()) return error("unexpected text after the graph");
    if (!pendingConstants_.empty()) {
      return error("constant $" + pendingConstants_.begin()->first +
                   " is used but not declared in 'constants { }'");
    }
    graph_.setOutputs(std::move(outputs));
    return std::move(graph_);
  }

 private:
  /// What may follow a value's type: "[1, ?, (x_size0 // 2)]" (sizes), then "{...}" (strides)
  /// for a tensor; "{x_size0}" (its symbolic value) for an Int.
  Status typeDetails(Value& v) {
    if (peekIs('<')) {
      ++pos_;
      VF_ASSIGN_OR_RETURN(std::string name, identifier());
      VF_ASSIGN_OR_RETURN(v.dtype, parseDTypeShortName(name));
      VF_RETURN_IF_ERROR(expect('>'));
    }
    if (peekIs('[')) {
      ++pos_;
      std::vector<SymExpr> dims;
      VF_RETURN_IF_ERROR(commaList(']', [&]() -> Status {
        skipSpace();
        if (peekIs('?')) {
          ++pos_;
          dims.emplace_back();
          return Status::ok();
        }
        VF_ASSIGN_OR_RETURN(SymExpr d, expression());
        if (d.isCondition() || (d.asInt() && *d.asInt() < 0)) return error("a shape holds sizes or '?'");
        dims.push_back(std::move(d));
        return Status::ok();
      }));
      v.setSymShape(std::move(dims));
    }
    if (!peekIs('{')) return Status::ok();
    ++pos_;
    std::vector<SymExpr> items;
    VF_RETURN_IF_ERROR(commaList('}', [&]() -> Status {
      VF_ASSIGN_OR_RETURN(SymExpr e, expression());
      items.push_back(std::move(e));
      return Status::ok();
    }));
    if (v.type == ValueType::Int) {
      if (items.size() != 1 || items[0].isCondition()) return error("an Int's value is one integer expression");
      v.symValue = items[0];
    } else {
      if (!v.hasShape || items.size() != v.shape.size()) return error("strides need the sizes, one per dim");
      v.symStrides = std::move(items);
    }
    return Status::ok();
  }

  /// A size expression (SymExpr syntax) at the current position.
  StatusOr<SymExpr> expression() {
    skipSpace();
    size_t consumed = 0;
    auto e = SymExpr::parsePrefix(text_.substr(pos_), &consumed);
    if (!e.isOk()) return error("bad size expression: " + e.status().message());
    pos_ += consumed;
    return e;
  }

  Status parseNode() {
    std::vector<std::string> outNames;
    std::vector<ValueType> outTypes;
    std::vector<Value> outDetails;  // sizes, strides, symbolic value
    skipSpace();
    if (peekIs('%')) {
      while (true) {
        VF_ASSIGN_OR_RETURN(std::string name, valueName());
        VF_RETURN_IF_ERROR(expect(':'));
        VF_ASSIGN_OR_RETURN(std::string typeName, identifier());
        VF_ASSIGN_OR_RETURN(ValueType type, parseValueType(typeName));
        Value details;
        details.type = type;
        VF_RETURN_IF_ERROR(typeDetails(details));
        outNames.push_back(name);
        outTypes.push_back(type);
        outDetails.push_back(std::move(details));
        skipSpace();
        if (peekIs(',')) { ++pos_; continue; }
        break;
      }
      VF_RETURN_IF_ERROR(expect('='));
    }
    VF_ASSIGN_OR_RETURN(std::string qualified, opName());
    std::string op = qualified, overload;
    size_t sep = qualified.find("::");
    size_t dot = qualified.find('.', sep == std::string::npos ? 0 : sep);
    if (dot != std::string::npos) {
      op = qualified.substr(0, dot);
      overload = qualified.substr(dot + 1);
    }
    VF_RETURN_IF_ERROR(expect('('));
    std::vector<Arg> args;
    VF_RETURN_IF_ERROR(argList(')', args));
    NodeId id = graph_.addNode(op, overload, std::move(args), outTypes);
    for (size_t k = 0; k < outNames.size(); ++k) {
      if (values_.count(outNames[k])) return error("value %" + outNames[k] + " is defined twice");
      values_[outNames[k]] = graph_.node(id).outputs[k];
      Value& v = graph_.mutableValue(values_[outNames[k]]);
      v.hasShape = outDetails[k].hasShape;
      v.shape = std::move(outDetails[k].shape);
      v.symShape = std::move(outDetails[k].symShape);
      v.symStrides = std::move(outDetails[k].symStrides);
      v.symValue = std::move(outDetails[k].symValue);
      v.dtype = outDetails[k].dtype;
    }
    return Status::ok();
  }

  StatusOr<Arg> parseArg() {
    skipSpace();
    if (pos_ >= text_.size()) return error("unexpected end of text in an argument");
    char c = text_[pos_];
    if (c == '%') {
      VF_ASSIGN_OR_RETURN(std::string name, valueName());
      auto it = values_.find(name);
      if (it == values_.end()) return error("value %" + name + " is used before it is defined");
      return Arg::value(it->second);
    }
    if (c == '$') {
      ++pos_;
      VF_ASSIGN_OR_RETURN(std::string name, identifier());
      return constantRef(name);
    }
    if (c == '[') {
      ++pos_;
      std::vector<Arg> items;
      VF_RETURN_IF_ERROR(argList(']', items));
      return Arg::makeList(std::move(items));
    }
    if (c == '"') {
      ++pos_;
      std::string s;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
        s += text_[pos_++];
      }
      VF_RETURN_IF_ERROR(expect('"'));
      return Arg::string(s);
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      ++pos_;
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) ||
                                     text_[pos_] == '.' || text_[pos_] == '-' || text_[pos_] == '+')) {
        ++pos_;
      }
      std::string tok(text_.substr(start, pos_ - start));
      if (tok == "-inf") return Arg::real(-INFINITY);
      if (tok.find_first_of(".eEn") != std::string::npos) return Arg::real(std::strtod(tok.c_str(), nullptr));
      return Arg::integer(std::strtoll(tok.c_str(), nullptr, 10));
    }
    VF_ASSIGN_OR_RETURN(std::string word, identifier());
    if (word == "None") return Arg::none();
    if (word == "true") return Arg::boolean(true);
    if (word == "false") return Arg::boolean(false);
    if (word == "nan") return Arg::real(NAN);
    if (word == "inf") return Arg::real(INFINITY);
    if (word == "dtype" || word == "device" || word == "layout" || word == "memory_format") {
      VF_RETURN_IF_ERROR(expect('('));
      VF_ASSIGN_OR_RETURN(std::string inner, identifier());
      VF_RETURN_IF_ERROR(expect(')'));
      if (word == "dtype") {
        VF_ASSIGN_OR_RETURN(DType t, parseDTypeShortName(inner));
        return Arg::dtype(t);
      }
      if (word == "device") return Arg::device(inner);
      if (word == "layout") return Arg::layout(std::strtoll(inner.c_str(), nullptr, 10));
      return Arg::memoryFormat(std::strtoll(inner.c_str(), nullptr, 10));
    }
    return error("unexpected argument '" + word + "'");
  }

  // Constants are declared after the body, so references are resolved at the end.
  StatusOr<Arg> constantRef(const std::string& name) {
    auto it = constantIds_.find(name);
    if (it == constantIds_.end()) {
      ConstantTensor c;
      c.name = name;
      ConstantId id = graph_.addConstant(c);
      it = constantIds_.emplace(name, id).first;
      pendingConstants_.emplace(name, true);
    }
    return Arg::constant(it->second);
  }

  Status parseConstantDecl() {
    VF_RETURN_IF_ERROR(expect('$'));
    VF_ASSIGN_OR_RETURN(std::string name, identifier());
    VF_RETURN_IF_ERROR(expect(':'));
    VF_ASSIGN_OR_RETURN(std::string dtypeName, identifier());
    VF_ASSIGN_OR_RETURN(DType dtype, parseDTypeShortName(dtypeName));
    VF_RETURN_IF_ERROR(expect('['));
    std::vector<int64_t> sizes;
    skipSpace();
    while (!peekIs(']')) {
      VF_ASSIGN_OR_RETURN(Arg a, parseArg());
      if (a.kind != Arg::Kind::Int) return error("constant sizes must be integers");
      sizes.push_back(a.i);
      skipSpace();
      if (peekIs(',')) ++pos_;
      skipSpace();
    }
    VF_RETURN_IF_ERROR(expect(']'));
    auto it = constantIds_.find(name);
    ConstantId id;
    if (it == constantIds_.end()) {
      ConstantTensor c;
      c.name = name;
      id = graph_.addConstant(c);
      constantIds_[name] = id;
    } else {
      id = it->second;
    }
    pendingConstants_.erase(name);
    ConstantTensor& c = graph_.mutableConstants()[static_cast<size_t>(id)];
    c.dtype = dtype;
    c.sizes = sizes;
    c.strides.assign(sizes.size(), 1);
    for (size_t k = sizes.size(); k-- > 1;) c.strides[k - 1] = c.strides[k] * sizes[k];
    return Status::ok();
  }

  /// Reads `item (, item)* close` (or just `close`), calling \p item for each element.
  template <typename ItemFn>
  Status commaList(char close, ItemFn item) {
    skipSpace();
    if (!peekIs(close)) {
      while (true) {
        VF_RETURN_IF_ERROR(item());
        skipSpace();
        if (!peekIs(',')) break;
        ++pos_;
      }
    }
    return expect(close);
  }

  Status argList(char close, std::vector<Arg>& out) {
    return commaList(close, [&]() -> Status {
      VF_ASSIGN_OR_RETURN(Arg a, parseArg());
      out.push_back(std::move(a));
      return Status::ok();
    });
  }

  void skipSpace() {
    while (pos_ < text_.size()) {
      if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else if (text_.compare(pos_, 2, "//") == 0) {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  bool peekIs(char c) { return pos_ < text_.size() && text_[pos_] == c; }
  bool startsWithWord(std::string_view w) {
    return text_.compare(pos_, w.size(), w) == 0 &&
           (pos_ + w.size() >= text_.size() || !std::isalnum(static_cast<unsigned char>(text_[pos_ + w.size()])));
  }
  Status expect(char c) {
    skipSpace();
    if (!peekIs(c)) return error(std::string("expected '") + c + "'");
    ++pos_;
    return Status::ok();
  }
  Status expectWord(std::string_view w) {
    skipSpace();
    if (!startsWithWord(w)) return error("expected '" + std::string(w) + "'");
    pos_ += w.size();
    return Status::ok();
  }
  static bool isIdentChar(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  }
  StatusOr<std::string> identifier() {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && isIdentChar(text_[pos_])) ++pos_;
    if (start == pos_) return error("expected a name");
    return std::string(text_.substr(start, pos_ - start));
  }
  StatusOr<std::string> valueName() {
    skipSpace();
    if (!peekIs('%')) return error("expected a value name starting with '%'");
    ++pos_;
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
    if (start == pos_) return error("expected a value name after '%'");
    return std::string(text_.substr(start, pos_ - start));
  }
  StatusOr<std::string> opName() {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && (isIdentChar(text_[pos_]) || text_[pos_] == ':')) ++pos_;
    if (start == pos_) return error("expected an operator name");
    return std::string(text_.substr(start, pos_ - start));
  }
  Status error(const std::string& message) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < pos_ && k < text_.size(); ++k) {
      if (text_[k] == '\n') { ++line; col = 1; } else { ++col; }
    }
    return invalidArgument("line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + message);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Graph graph_;
  std::map<std::string, ValueId> values_;
  std::map<std::string, ConstantId> constantIds_;
  std::map<std::string, bool> pendingConstants_;
};

}  // namespace

std::string printGraph(const Graph& graph) { return Printer(graph).print(); }

StatusOr<Graph> parseGraph(std::string_view text) { return Parser(text).parse(); }

}  // namespace verifuse::ir
