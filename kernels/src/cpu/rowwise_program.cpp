// The row engine's programs: RowProgram (builder, validation, its text and the parser of that
// text) and the builders of common programs (layer norm, RMSNorm, softmax, GELU, SiLU-mul, rotary,
// bias/residual add). The interpreter that runs them is rowwise.cpp.
#include "verifuse/kernels/rowwise.h"

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cpu/rowwise_internal.h"

namespace verifuse::kernels::rowwise {

// ---- RowProgram ----------------------------------------------------------------------------------

const char* rowOpName(RowOp op) {
  switch (op) {
    case RowOp::kLoad: return "load";
    case RowOp::kConst: return "const";
    case RowOp::kAdd: return "add";
    case RowOp::kSub: return "sub";
    case RowOp::kMul: return "mul";
    case RowOp::kDiv: return "div";
    case RowOp::kMax: return "maximum";
    case RowOp::kMin: return "minimum";
    case RowOp::kPow: return "pow";
    case RowOp::kNeg: return "neg";
    case RowOp::kAbs: return "abs";
    case RowOp::kExp: return "exp";
    case RowOp::kLog: return "log";
    case RowOp::kSqrt: return "sqrt";
    case RowOp::kRsqrt: return "rsqrt";
    case RowOp::kReciprocal: return "reciprocal";
    case RowOp::kSquare: return "square";
    case RowOp::kRelu: return "relu";
    case RowOp::kGeluErf: return "gelu_erf";
    case RowOp::kGeluTanh: return "gelu_tanh";
    case RowOp::kSilu: return "silu";
    case RowOp::kSigmoid: return "sigmoid";
    case RowOp::kTanh: return "tanh";
    case RowOp::kErf: return "erf";
    case RowOp::kClamp: return "clamp";
    case RowOp::kLeakyRelu: return "leaky_relu";
    case RowOp::kHardswish: return "hardswish";
    case RowOp::kHardsigmoid: return "hardsigmoid";
    case RowOp::kElu: return "elu";
    case RowOp::kCastBf16: return "cast_bf16";
    case RowOp::kWhere: return "where";
    case RowOp::kSum: return "sum";
    case RowOp::kMean: return "mean";
    case RowOp::kRowMax: return "rowmax";
    case RowOp::kRowMin: return "rowmin";
    case RowOp::kRotateHalf: return "rotate_half";
    case RowOp::kStore: return "store";
  }
  return "?";
}

const char* elemTypeName(ElemType t) {
  switch (t) {
    case ElemType::kF32: return "f32";
    case ElemType::kBF16: return "bf16";
    case ElemType::kBool: return "bool";
  }
  return "?";
}

namespace {

using detail::isBinary;
using detail::isReduce;
using detail::isUnary;

/// Unary ops whose printed form carries parameters.
int numParams(RowOp op) {
  switch (op) {
    case RowOp::kPow:
    case RowOp::kLeakyRelu:
    case RowOp::kElu: return 1;
    case RowOp::kClamp: return 2;
    default: return 0;
  }
}

std::string fmtFloat(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

}  // namespace

RowValue RowProgram::push(RowInstr in) {
  instrs_.push_back(in);
  return {static_cast<int32_t>(instrs_.size()) - 1};
}

bool RowProgram::operandOk(RowValue v) const {
  if (v.id >= 0 && v.id < static_cast<int32_t>(instrs_.size()) && instrs_[v.id].op != RowOp::kStore) return true;
  if (error_.empty()) {
    const_cast<RowProgram*>(this)->error_ =
        "instruction " + std::to_string(instrs_.size()) + ": operand %" + std::to_string(v.id) + " is not a value defined earlier";
  }
  return false;
}

RowValue RowProgram::load(int input) {
  if (input < 0 && error_.empty()) error_ = "instruction " + std::to_string(instrs_.size()) + ": negative input index";
  numInputs_ = std::max(numInputs_, input + 1);
  RowInstr in;
  in.op = RowOp::kLoad;
  in.index = input;
  return push(in);
}

RowValue RowProgram::constant(float v) {
  RowInstr in;
  in.op = RowOp::kConst;
  in.f0 = v;
  return push(in);
}

RowValue RowProgram::binary(RowOp op, RowValue a, RowValue b) {
  if (!isBinary(op) && error_.empty())
    error_ = "instruction " + std::to_string(instrs_.size()) + ": " + rowOpName(op) + " is not a binary op";
  operandOk(a);
  operandOk(b);
  RowInstr in;
  in.op = op;
  in.a = a.id;
  in.b = b.id;
  return push(in);
}

RowValue RowProgram::unary(RowOp op, RowValue a, float f0, float f1) {
  if (!isUnary(op) && error_.empty())
    error_ = "instruction " + std::to_string(instrs_.size()) + ": " + rowOpName(op) + " is not a unary op";
  operandOk(a);
  RowInstr in;
  in.op = op;
  in.a = a.id;
  in.f0 = f0;
  in.f1 = f1;
  return push(in);
}

RowValue RowProgram::where(RowValue mask, RowValue a, RowValue b) {
  operandOk(mask);
  operandOk(a);
  operandOk(b);
  RowInstr in;
  in.op = RowOp::kWhere;
  in.a = mask.id;
  in.b = a.id;
  in.c = b.id;
  return push(in);
}

RowValue RowProgram::reduce(RowOp op, RowValue a) {
  if (!isReduce(op) && error_.empty())
    error_ = "instruction " + std::to_string(instrs_.size()) + ": " + rowOpName(op) + " is not a reduction";
  operandOk(a);
  RowInstr in;
  in.op = op;
  in.a = a.id;
  return push(in);
}

void RowProgram::store(int output, RowValue v) {
  if (output < 0 && error_.empty()) error_ = "instruction " + std::to_string(instrs_.size()) + ": negative output index";
  operandOk(v);
  numOutputs_ = std::max(numOutputs_, output + 1);
  RowInstr in;
  in.op = RowOp::kStore;
  in.index = output;
  in.a = v.id;
  push(in);
}

Status RowProgram::validate() const {
  if (!error_.empty()) return invalidArgument("row program: " + error_);
  if (numOutputs_ == 0) return invalidArgument("row program: no store");
  std::vector<int> stores(static_cast<size_t>(numOutputs_), 0);
  for (const RowInstr& in : instrs_)
    if (in.op == RowOp::kStore) ++stores[static_cast<size_t>(in.index)];
  for (int k = 0; k < numOutputs_; ++k)
    if (stores[static_cast<size_t>(k)] != 1)
      return invalidArgument("row program: output " + std::to_string(k) + " is stored " +
                             std::to_string(stores[static_cast<size_t>(k)]) + " times (must be once)");
  return Status::ok();
}

std::string RowProgram::toString() const {
  std::string s;
  for (size_t i = 0; i < instrs_.size(); ++i) {
    const RowInstr& in = instrs_[i];
    auto val = [](int32_t id) {
      std::string v = std::to_string(id);
      v.insert(v.begin(), '%');
      return v;
    };
    if (in.op == RowOp::kStore) {
      s += "store out" + std::to_string(in.index) + ", " + val(in.a) + "\n";
      continue;
    }
    s += val(static_cast<int32_t>(i)) + " = " + rowOpName(in.op);
    if (in.op == RowOp::kLoad) {
      s += " in" + std::to_string(in.index);
    } else if (in.op == RowOp::kConst) {
      s += " " + fmtFloat(in.f0);
    } else if (in.op == RowOp::kWhere) {
      s += " " + val(in.a) + ", " + val(in.b) + ", " + val(in.c);
    } else if (isBinary(in.op)) {
      s += " " + val(in.a) + ", " + val(in.b);
    } else {
      s += " " + val(in.a);
      if (numParams(in.op) >= 1) s += ", " + fmtFloat(in.f0);
      if (numParams(in.op) >= 2) s += ", " + fmtFloat(in.f1);
    }
    s += "\n";
  }
  return s;
}

// ---- Text -> RowProgram (the format toString() prints) ------------------------------------------

namespace {

const std::map<std::string, RowOp>& opsByName() {
  static const std::map<std::string, RowOp> table = [] {
    std::map<std::string, RowOp> t;
    for (int k = 0; k <= static_cast<int>(RowOp::kStore); ++k) {
      const RowOp op = static_cast<RowOp>(k);
      t[rowOpName(op)] = op;
    }
    return t;
  }();
  return table;
}

/// "%12" -> 12, "in3"/"out3" -> 3 (with the given prefix), a float otherwise.
bool parseIndex(const std::string& tok, const char* prefix, int* out) {
  const std::string p(prefix);
  if (tok.compare(0, p.size(), p) != 0 || tok.size() == p.size()) return false;
  char* end = nullptr;
  const long v = std::strtol(tok.c_str() + p.size(), &end, 10);
  if (*end != '\0' || v < 0) return false;
  *out = static_cast<int>(v);
  return true;
}

bool parseFloat(const std::string& tok, float* out) {
  char* end = nullptr;
  *out = std::strtof(tok.c_str(), &end);
  return !tok.empty() && *end == '\0';
}

std::vector<std::string> tokens(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ' ' || c == ',' || c == '\t' || c == '=') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

}  // namespace

StatusOr<RowProgram> RowProgram::parse(std::string_view text) {
  RowProgram p;
  int lineNo = 0;
  int next = 0;  // the instruction index the next line defines
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++lineNo;
    std::vector<std::string> t = tokens(line);
    if (t.empty()) continue;
    auto bad = [&](const std::string& why) {
      return invalidArgument("row program line " + std::to_string(lineNo) + " '" + std::string(line) + "': " + why);
    };
    auto value = [&](const std::string& tok, RowValue* v) {
      int id = -1;
      if (!parseIndex(tok, "%", &id)) return false;
      v->id = id;
      return true;
    };
    if (t[0] == "store") {
      int out = -1;
      RowValue v;
      if (t.size() != 3 || !parseIndex(t[1], "out", &out) || !value(t[2], &v)) return bad("expected 'store outJ, %V'");
      p.store(out, v);
      ++next;
      continue;
    }
    int id = -1;
    if (t.size() < 2 || !parseIndex(t[0], "%", &id)) return bad("expected '%N = op ...'");
    if (id != next) return bad("value id " + std::to_string(id) + " is not the instruction index " + std::to_string(next));
    auto it = opsByName().find(t[1]);
    if (it == opsByName().end()) return bad("unknown op '" + t[1] + "'");
    const RowOp op = it->second;
    RowValue made;
    std::vector<RowValue> vals;
    std::vector<float> params;
    if (op == RowOp::kLoad) {
      int in = -1;
      if (t.size() != 3 || !parseIndex(t[2], "in", &in)) return bad("expected 'load inK'");
      made = p.load(in);
    } else if (op == RowOp::kConst) {
      float f = 0;
      if (t.size() != 3 || !parseFloat(t[2], &f)) return bad("expected 'const <float>'");
      made = p.constant(f);
    } else {
      for (size_t k = 2; k < t.size(); ++k) {
        RowValue v;
        float f = 0;
        if (value(t[k], &v)) {
          if (!params.empty()) return bad("an operand after a parameter");
          vals.push_back(v);
        } else if (parseFloat(t[k], &f)) {
          params.push_back(f);
        } else {
          return bad("cannot read '" + t[k] + "'");
        }
      }
      if (op == RowOp::kWhere) {
        if (vals.size() != 3 || !params.empty()) return bad("where takes three operands");
        made = p.where(vals[0], vals[1], vals[2]);
      } else if (isBinary(op)) {
        if (vals.size() != 2 || !params.empty()) return bad("a binary op takes two operands");
        made = p.binary(op, vals[0], vals[1]);
      } else if (isReduce(op)) {
        if (vals.size() != 1 || !params.empty()) return bad("a reduction takes one operand");
        made = p.reduce(op, vals[0]);
      } else {
        if (vals.size() != 1 || params.size() > 2) return bad("a unary op takes one operand and at most two parameters");
        made = p.unary(op, vals[0], params.size() > 0 ? params[0] : 0.f, params.size() > 1 ? params[1] : 0.f);
      }
    }
    if (made.id != id) return bad("value numbering out of step");
    ++next;
  }
  VF_RETURN_IF_ERROR(p.validate());
  return p;
}

// ---- Builders ------------------------------------------------------------------------------------

RowProgram layerNormProgram(const LayerNormSpec& spec) {
  RowProgram p;
  int in = 0;
  RowValue h = p.load(in++);
  if (spec.residual) h = p.add(h, p.load(in++));
  RowValue m = p.reduce(RowOp::kMean, h);
  RowValue d = p.sub(h, m);
  RowValue v = p.reduce(RowOp::kMean, p.mul(d, d));
  RowValue r = p.unary(RowOp::kRsqrt, p.add(v, p.constant(spec.eps)));
  RowValue y = p.mul(d, r);
  if (spec.gamma) y = p.mul(y, p.load(in++));
  if (spec.beta) y = p.add(y, p.load(in++));
  p.store(0, y);
  if (spec.residual && spec.storeSum) p.store(1, h);
  return p;
}

RowProgram rmsNormProgram(const RmsNormSpec& spec) {
  RowProgram p;
  int in = 0;
  RowValue h = p.load(in++);
  if (spec.residual) {
    h = p.add(h, p.load(in++));
    if (spec.bf16Input) h = p.castBf16(h);  // the residual add is a bf16 op in a bf16 model
  }
  RowValue v = p.reduce(RowOp::kMean, p.mul(h, h));
  RowValue n = p.mul(h, p.unary(RowOp::kRsqrt, p.add(v, p.constant(spec.eps))));
  if (spec.bf16Input) n = p.castBf16(n);  // hidden_states.to(input_dtype)
  RowValue y = spec.weight ? p.mul(p.load(in++), n) : n;
  p.store(0, y);
  if (spec.residual && spec.storeSum) p.store(1, h);
  return p;
}

RowProgram softmaxProgram(float scale, MaskKind mask) {
  RowProgram p;
  RowValue s = p.load(0);
  if (scale != 1.0f) s = p.mul(s, p.constant(scale));
  if (mask == MaskKind::kAdditive) s = p.add(s, p.load(1));
  if (mask == MaskKind::kBoolean) {
    RowValue keep = p.load(1);
    RowValue minusInf = p.constant(-std::numeric_limits<float>::infinity());
    s = p.where(keep, s, minusInf);
  }
  RowValue m = p.reduce(RowOp::kRowMax, s);
  RowValue e = p.unary(RowOp::kExp, p.sub(s, m));
  RowValue z = p.reduce(RowOp::kSum, e);
  p.store(0, p.mul(e, p.unary(RowOp::kReciprocal, z)));
  return p;
}

RowProgram geluProgram(bool tanhApproximation, bool bias) {
  RowProgram p;
  RowValue x = p.load(0);
  if (bias) x = p.add(x, p.load(1));
  p.store(0, p.unary(tanhApproximation ? RowOp::kGeluTanh : RowOp::kGeluErf, x));
  return p;
}

RowProgram siluMulProgram() {
  RowProgram p;
  RowValue a = p.load(0);
  RowValue b = p.load(1);
  p.store(0, p.mul(p.unary(RowOp::kSilu, a), b));
  return p;
}

RowProgram rotaryProgram() {
  RowProgram p;
  RowValue x = p.load(0);
  RowValue cos = p.load(1);
  RowValue sin = p.load(2);
  RowValue xc = p.mul(x, cos);
  RowValue rs = p.mul(p.rotateHalf(x), sin);
  p.store(0, p.add(xc, rs));
  return p;
}

RowProgram biasResidualAddProgram(bool bias, bool residual) {
  RowProgram p;
  int in = 0;
  RowValue y = p.load(in++);
  if (bias) y = p.add(y, p.load(in++));
  if (residual) y = p.add(y, p.load(in++));
  p.store(0, y);
  return p;
}

}  // namespace verifuse::kernels::rowwise
