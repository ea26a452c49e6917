// The row engine's programs: RowProgram (builder, validation, text) and the builders of common
// programs (layer norm, RMSNorm, softmax, GELU, SiLU-mul, rotary, bias/residual add). The
// interpreter that runs them is rowwise.cpp.
#include "verifuse/kernels/rowwise.h"

#include <cstdio>
#include <limits>
#include <string>

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
