// Values the executor hands to ATen: IR arguments turned into schema-typed IValues (numbers
// wrapped as eager wraps them, lists built per call when they hold graph values), and the
// builtins, the Python operator and SymInt arithmetic that Dynamo leaves in graphs.
#include "runtime/plan.h"

#include <cmath>

namespace verifuse::runtime {

using ir::Arg;

c10::TypePtr unwrapOptional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

namespace {

bool isIntLike(const c10::TypePtr& t) {
  auto k = t->kind();
  return k == c10::TypeKind::IntType || k == c10::TypeKind::SymIntType;
}

}  // namespace

bool isFloatLike(const c10::TypePtr& t) {
  auto k = t->kind();
  return k == c10::TypeKind::FloatType || k == c10::TypeKind::SymFloatType;
}

int64_t ivalueToInt(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  if (v.isBool()) return v.toBool();
  return static_cast<int64_t>(v.toDouble());
}

double ivalueToDouble(const c10::IValue& v) {
  if (v.isDouble()) return v.toDouble();
  if (v.isSymFloat()) return v.toSymFloat().guard_float(__FILE__, __LINE__);
  return static_cast<double>(ivalueToInt(v));
}

/// A Python number where the schema wants a Tensor (x / 5.0 traces to div.Tensor(x, 5.0)):
/// wrapped as eager does, a 0-d "wrapped number" tensor that type promotion treats as a scalar.
c10::IValue wrapNumber(const c10::IValue& v) {
  at::Tensor t;
  if (v.isDouble() || v.isSymFloat()) t = at::scalar_tensor(ivalueToDouble(v), at::kDouble);
  else if (v.isBool()) t = at::scalar_tensor(v.toBool(), at::kBool);
  else t = at::scalar_tensor(ivalueToInt(v), at::kLong);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::IValue(std::move(t));
}

bool isNumber(const c10::IValue& v) {
  return v.isDouble() || v.isInt() || v.isBool() || v.isSymInt() || v.isSymFloat();
}

/// Builds a typed list IValue from IR list elements, reading values from \p slots if needed.
StatusOr<c10::IValue> buildList(const Arg& list, const c10::TypePtr& elemType,
                                const std::vector<c10::IValue>* slots,
                                const std::vector<at::Tensor>& constants) {
  auto elementValue = [&](const Arg& e) -> const c10::IValue* {
    if (e.kind == Arg::Kind::Value && slots) return &(*slots)[static_cast<size_t>(e.i)];
    return nullptr;
  };
  auto elem = unwrapOptional(elemType);
  if (isIntLike(elemType)) {
    c10::List<int64_t> out;
    out.reserve(list.list.size());
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(ivalueToInt(*v));
      else if (e.kind == Arg::Kind::Int || e.kind == Arg::Kind::Bool) out.push_back(e.i);
      else return unsupported("int list element of kind " + std::to_string(static_cast<int>(e.kind)));
    }
    return c10::IValue(out);
  }
  if (isFloatLike(elemType)) {
    c10::List<double> out;
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(ivalueToDouble(*v));
      else if (e.kind == Arg::Kind::Double) out.push_back(e.d);
      else if (e.kind == Arg::Kind::Int) out.push_back(static_cast<double>(e.i));
      else return unsupported("float list element is not a number");
    }
    return c10::IValue(out);
  }
  if (elemType->kind() == c10::TypeKind::BoolType) {
    c10::List<bool> out;
    for (const Arg& e : list.list) {
      if (const c10::IValue* v = elementValue(e)) out.push_back(v->toBool());
      else if (e.kind == Arg::Kind::Bool) out.push_back(e.i != 0);
      else return unsupported("bool list element is not a bool");
    }
    return c10::IValue(out);
  }
  if (elem->kind() == c10::TypeKind::TensorType) {
    const bool optionalElems = elemType->kind() == c10::TypeKind::OptionalType;
    auto tensorOf = [&](const Arg& e) -> std::optional<at::Tensor> {
      if (const c10::IValue* v = elementValue(e)) {
        if (v->isNone()) return std::nullopt;
        return v->toTensor();
      }
      if (e.kind == Arg::Kind::Constant) return constants[static_cast<size_t>(e.i)];
      return std::nullopt;
    };
    if (optionalElems) {
      c10::List<std::optional<at::Tensor>> out;
      for (const Arg& e : list.list) out.push_back(tensorOf(e));
      return c10::IValue(out);
    }
    c10::List<at::Tensor> out;
    for (const Arg& e : list.list) {
      auto t = tensorOf(e);
      if (!t) return unsupported("tensor list element is not a tensor");
      out.push_back(*t);
    }
    return c10::IValue(out);
  }
  return unsupported("list of " + elemType->str());
}

/// A non-list argument known at plan time.
StatusOr<c10::IValue> fixedValue(const Arg& a, const c10::TypePtr& type,
                                 const std::vector<at::Tensor>& constants) {
  auto t = unwrapOptional(type);
  if (t->kind() == c10::TypeKind::TensorType &&
      (a.kind == Arg::Kind::Bool || a.kind == Arg::Kind::Int || a.kind == Arg::Kind::Double)) {
    c10::IValue number = a.kind == Arg::Kind::Double ? c10::IValue(a.d)
                         : a.kind == Arg::Kind::Bool ? c10::IValue(a.i != 0)
                                                     : c10::IValue(a.i);
    return wrapNumber(number);
  }
  switch (a.kind) {
    case Arg::Kind::None: return c10::IValue();
    case Arg::Kind::Bool: return c10::IValue(a.i != 0);
    case Arg::Kind::Int:
      if (isFloatLike(t)) return c10::IValue(static_cast<double>(a.i));
      return c10::IValue(a.i);
    case Arg::Kind::Double: return c10::IValue(a.d);
    case Arg::Kind::String: return c10::IValue(a.s);
    case Arg::Kind::Constant: return c10::IValue(constants[static_cast<size_t>(a.i)]);
    case Arg::Kind::DTypeTag: return c10::IValue(static_cast<int64_t>(a.i));
    case Arg::Kind::Layout: return c10::IValue(a.i);
    case Arg::Kind::MemoryFormat: return c10::IValue(a.i);
    case Arg::Kind::Device: return c10::IValue(c10::Device(a.s));
    case Arg::Kind::List: {
      if (t->kind() != c10::TypeKind::ListType) return unsupported("list given for a " + t->str() + " argument");
      return buildList(a, t->castRaw<c10::ListType>()->getElementType(), nullptr, constants);
    }
    case Arg::Kind::Value: break;
  }
  return internalError("fixedValue called on a graph value");
}

namespace {

// --- builtins: Python operator and SymInt arithmetic that Dynamo leaves in graphs -------------
bool bothInts(const c10::IValue& a, const c10::IValue& b) {
  return (a.isInt() || a.isSymInt() || a.isBool()) && (b.isInt() || b.isSymInt() || b.isBool());
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

BuiltinFn binaryArith(std::function<int64_t(int64_t, int64_t)> onInt,
                      std::function<double(double, double)> onDouble, bool checkZero = false) {
  return [onInt, onDouble, checkZero](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
    if (in.size() != 2) return invalidArgument("binary operator expects 2 arguments");
    if (bothInts(in[0], in[1]) && onInt) {
      int64_t b = ivalueToInt(in[1]);
      if (checkZero && b == 0) return invalidArgument("integer division or modulo by zero");
      return c10::IValue(onInt(ivalueToInt(in[0]), b));
    }
    return c10::IValue(onDouble(ivalueToDouble(in[0]), ivalueToDouble(in[1])));
  };
}

BuiltinFn comparison(std::function<bool(double, double)> cmp) {
  return [cmp](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
    if (in.size() != 2) return invalidArgument("comparison expects 2 arguments");
    if (bothInts(in[0], in[1])) {
      // Compare exactly as integers (large sizes lose precision as doubles), then map the
      // ordering onto the double predicate.
      int64_t a = ivalueToInt(in[0]), b = ivalueToInt(in[1]);
      return c10::IValue(cmp(a < b ? -1.0 : (a > b ? 1.0 : 0.0), 0.0));
    }
    return c10::IValue(cmp(ivalueToDouble(in[0]), ivalueToDouble(in[1])));
  };
}

}  // namespace

const std::map<std::string, BuiltinFn>& builtins() {
  static const std::map<std::string, BuiltinFn> table = [] {
    std::map<std::string, BuiltinFn> t;
    t["_operator::add"] = binaryArith([](int64_t a, int64_t b) { return a + b; }, [](double a, double b) { return a + b; });
    t["_operator::sub"] = binaryArith([](int64_t a, int64_t b) { return a - b; }, [](double a, double b) { return a - b; });
    t["_operator::mul"] = binaryArith([](int64_t a, int64_t b) { return a * b; }, [](double a, double b) { return a * b; });
    t["_operator::floordiv"] = binaryArith(floorDiv, [](double a, double b) { return std::floor(a / b); }, true);
    t["_operator::mod"] = binaryArith(
        [](int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; },
        [](double a, double b) { return a - b * std::floor(a / b); }, true);
    t["_operator::truediv"] = binaryArith(nullptr, [](double a, double b) { return a / b; });
    t["_operator::pow"] = binaryArith(nullptr, [](double a, double b) { return std::pow(a, b); });
    t["verifuse::sym_max"] = binaryArith([](int64_t a, int64_t b) { return std::max(a, b); },
                                         [](double a, double b) { return std::max(a, b); });
    t["verifuse::sym_min"] = binaryArith([](int64_t a, int64_t b) { return std::min(a, b); },
                                         [](double a, double b) { return std::min(a, b); });
    t["_operator::eq"] = comparison([](double a, double b) { return a == b; });
    t["_operator::ne"] = comparison([](double a, double b) { return a != b; });
    t["_operator::lt"] = comparison([](double a, double b) { return a < b; });
    t["_operator::le"] = comparison([](double a, double b) { return a <= b; });
    t["_operator::gt"] = comparison([](double a, double b) { return a > b; });
    t["_operator::ge"] = comparison([](double a, double b) { return a >= b; });
    t["_operator::neg"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      if (in.at(0).isDouble()) return c10::IValue(-in[0].toDouble());
      return c10::IValue(-ivalueToInt(in.at(0)));
    };
    t["verifuse::sym_float"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(ivalueToDouble(in.at(0)));
    };
    t["verifuse::sym_int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(static_cast<int64_t>(std::trunc(ivalueToDouble(in.at(0)))));
    };
    t["verifuse::sym_not"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(!in.at(0).toBool());
    };
    t["aten::sym_size.int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().size(ivalueToInt(in.at(1))));
    };
    t["aten::sym_stride.int"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().stride(ivalueToInt(in.at(1))));
    };
    t["aten::sym_numel"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().numel());
    };
    t["aten::sym_storage_offset"] = [](const std::vector<c10::IValue>& in) -> StatusOr<c10::IValue> {
      return c10::IValue(in.at(0).toTensor().storage_offset());
    };
    return t;
  }();
  return table;
}

}  // namespace verifuse::runtime
