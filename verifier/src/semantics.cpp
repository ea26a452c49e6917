// Operator semantics: PyTorch ops, oneDNN post-ops, batch norm, and the dot model of conv/linear.
#include "verifuse/verify/semantics.h"

#include <cmath>

namespace verifuse::verify::sem {

Expr exp(Expr x) { return Expr::apply(kExp, {std::move(x)}); }
Expr erf(Expr x) { return Expr::apply(kErf, {std::move(x)}); }
Expr sigmoid(Expr x) { return Expr::apply(kSigmoid, {std::move(x)}); }
Expr tanh(Expr x) { return Expr::apply(kTanh, {std::move(x)}); }
Expr geluErf(Expr x) { return Expr::apply(kGeluErf, {std::move(x)}); }
Expr geluTanh(Expr x) { return Expr::apply(kGeluTanh, {std::move(x)}); }

Expr floatValue(float f) {
  if (!std::isfinite(f) || std::fabs(f) >= std::ldexp(1.0, 62)) return Expr(0);
  if (f == 0.0f) return Expr(0);
  int e = 0;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, 0.5 <= |m| < 1
  // A float has 24 significant bits: f = (m * 2^24) * 2^(e - 24), an integer times a power of 2.
  long long mant = static_cast<long long>(std::ldexp(m, 24));
  int exp2 = e - 24;
  while (exp2 < 0 && (mant % 2) == 0) {
    mant /= 2;
    ++exp2;
  }
  if (exp2 >= 0) return Expr::rational(mant * (1LL << exp2), 1);
  // 2^-exp2 may not fit one long long (floats go down to 2^-149): a product of exact factors.
  if (-exp2 <= 62) return Expr::rational(mant, 1LL << (-exp2));
  Expr value = Expr::rational(mant, 1);
  for (int left = -exp2; left > 0; left -= 62) value = value * Expr::rational(1, 1LL << (left > 62 ? 62 : left));
  return value;
}

float geluTanhBetaFloat() { return static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5); }
float geluTanhKappaFloat() { return 0.044715f; }
float geluErfAlphaFloat() { return static_cast<float>(M_SQRT1_2); }

Expr geluTanhFormula(Expr x) {
  Expr beta = floatValue(geluTanhBetaFloat()), kappa = floatValue(geluTanhKappaFloat());
  return Expr::rational(1, 2) * x * (1 + tanh(beta * (x + kappa * x * x * x)));
}

Expr geluErfFormula(Expr x) {
  return Expr::rational(1, 2) * x * (1 + erf(floatValue(geluErfAlphaFloat()) * x));
}

void defineGeluTanhAt(ObligationBuilder& ob, Expr x) { ob.assume(geluTanh(x) == geluTanhFormula(x)); }
void defineGeluErfAt(ObligationBuilder& ob, Expr x) { ob.assume(geluErf(x) == geluErfFormula(x)); }

Expr relu(Expr x) { return Expr::max(std::move(x), 0); }
Expr leakyRelu(Expr x, Expr negativeSlope) { return Expr::ite(x >= 0, x, negativeSlope * x); }
Expr clamp(Expr x, Expr lo, Expr hi) { return Expr::min(Expr::max(std::move(x), std::move(lo)), std::move(hi)); }
Expr hardtanh(Expr x, Expr lo, Expr hi) { return clamp(std::move(x), std::move(lo), std::move(hi)); }
Expr relu6(Expr x) { return clamp(std::move(x), 0, 6); }
Expr hardswish(Expr x) { return x * clamp(x + 3, 0, 6) / 6; }
Expr hardsigmoid(Expr x) { return clamp(x / 6 + Expr::rational(1, 2), 0, 1); }
Expr elu(Expr x, Expr alpha) { return Expr::ite(x > 0, x, alpha * (exp(x) - 1)); }
Expr silu(Expr x) { return x * sigmoid(x); }
Expr add(Expr a, Expr b, Expr alpha) { return a + alpha * b; }
Expr dropoutEval(Expr x) { return x; }
Expr dropoutTrain(Expr x, Expr p, Expr keep) { return Expr::ite(keep, x / (1 - p), 0); }

Expr rsqrt(ObligationBuilder& ob, Expr x, const std::string& name) {
  return ob.fresh(name, [&](Expr r) { return std::vector<Expr>{r > 0, r * r * x == 1}; });
}

BatchNormParams batchNormParams(const std::string& prefix, const std::string& channel) {
  auto v = [&](const std::string& field) { return Expr::var(prefix + "." + field + "[" + channel + "]"); };
  return {v("weight"), v("bias"), v("running_mean"), v("running_var"), Expr::var(prefix + ".eps")};
}

void assumeBatchNorm(ObligationBuilder& ob, const BatchNormParams& p) {
  ob.assume(p.eps > 0).assume(p.var >= 0);
}

Expr batchNormRsqrt(ObligationBuilder& ob, const BatchNormParams& p) {
  return rsqrt(ob, p.var + p.eps, "rsqrt(" + p.var.name() + "+" + p.eps.name() + ")");
}

Expr batchNormEval(ObligationBuilder& ob, Expr y, const BatchNormParams& p) {
  Expr r = batchNormRsqrt(ob, p);
  return p.gamma * (y - p.mean) * r + p.beta;
}

// --- DotModel -----------------------------------------------------------------------------------

DotModel DotModel::symbolic() { return DotModel(0); }
DotModel DotModel::explicitSum(int k) { return DotModel(k < 1 ? 1 : k); }

std::string DotModel::describe() const { return isSymbolic() ? "dot-uf" : "K=" + std::to_string(k_); }

TensorTerm DotModel::tensor(const std::string& name) const {
  TensorTerm t;
  if (isSymbolic()) {
    t.symbolic = Expr::var(name, Sort::Tensor);
  } else {
    for (int i = 0; i < k_; ++i) t.elements.push_back(Expr::var(name + "[" + std::to_string(i) + "]"));
  }
  return t;
}

TensorTerm DotModel::scale(Expr c, const TensorTerm& t) const {
  TensorTerm out;
  if (isSymbolic()) {
    out.symbolic = Expr::apply(kScale, {std::move(c), t.symbolic}, Sort::Tensor);
  } else {
    for (const Expr& e : t.elements) out.elements.push_back(c * e);
  }
  return out;
}

TensorTerm DotModel::add(const TensorTerm& a, const TensorTerm& b) const {
  TensorTerm out;
  if (isSymbolic()) {
    out.symbolic = Expr::apply(kTAdd, {a.symbolic, b.symbolic}, Sort::Tensor);
  } else {
    for (size_t i = 0; i < a.elements.size() && i < b.elements.size(); ++i) {
      out.elements.push_back(a.elements[i] + b.elements[i]);
    }
  }
  return out;
}

Expr DotModel::dot(const TensorTerm& w, const TensorTerm& x) const {
  if (isSymbolic()) return Expr::apply(kDot, {w.symbolic, x.symbolic});
  std::vector<Expr> terms;
  for (size_t i = 0; i < w.elements.size() && i < x.elements.size(); ++i) {
    terms.push_back(w.elements[i] * x.elements[i]);
  }
  return sum(terms);
}

Expr DotModel::linear(ObligationBuilder& ob, const TensorTerm& w, const TensorTerm& x, Expr b) const {
  require(ob);
  return dot(w, x) + std::move(b);
}

void DotModel::require(ObligationBuilder& ob) const {
  if (isSymbolic()) ob.axioms(dotAxioms());
}

std::vector<Expr> dotAxioms() {
  Expr c = Expr::var("c");
  Expr w = Expr::var("W", Sort::Tensor), w1 = Expr::var("W1", Sort::Tensor);
  Expr w2 = Expr::var("W2", Sort::Tensor), x = Expr::var("X", Sort::Tensor);
  auto dot = [](Expr a, Expr b) { return Expr::apply(kDot, {std::move(a), std::move(b)}); };
  return {
      Expr::forAll({c, w, x}, dot(Expr::apply(kScale, {c, w}, Sort::Tensor), x) == c * dot(w, x)),
      Expr::forAll({w1, w2, x},
                   dot(Expr::apply(kTAdd, {w1, w2}, Sort::Tensor), x) == dot(w1, x) + dot(w2, x)),
  };
}

std::vector<std::string> dotAxiomNames() { return {"dot-scale-linear", "dot-add-linear"}; }

Obligation dotAxiomInstance(size_t index, int k) {
  DotModel m = DotModel::explicitSum(k);
  std::string name = (index < dotAxiomNames().size() ? dotAxiomNames()[index] : "axiom?") + "/" + m.describe();
  ObligationBuilder ob(name);
  TensorTerm x = m.tensor("X");
  if (index == 0) {
    Expr c = ob.var("c");
    TensorTerm w = m.tensor("W");
    ob.prove("dot", m.dot(m.scale(c, w), x), c * m.dot(w, x));
  } else {
    TensorTerm w1 = m.tensor("W1"), w2 = m.tensor("W2");
    ob.prove("dot", m.dot(m.add(w1, w2), x), m.dot(w1, x) + m.dot(w2, x));
  }
  return ob.build();
}

// --- oneDNN -------------------------------------------------------------------------------------
namespace onednn {
Expr eltwiseRelu(Expr x, Expr alpha) { return Expr::ite(x > 0, x, alpha * x); }
Expr eltwiseClip(Expr x, Expr lo, Expr hi) { return Expr::ite(x <= lo, lo, Expr::ite(x <= hi, x, hi)); }
Expr eltwiseHardswish(Expr x, Expr alpha, Expr beta) {
  return x * Expr::max(0, Expr::min(1, alpha * x + beta));
}
Expr eltwiseHardsigmoid(Expr x, Expr alpha, Expr beta) { return Expr::max(0, Expr::min(1, alpha * x + beta)); }
Expr eltwiseSwish(Expr x, Expr alpha) { return x * sigmoid(alpha * x); }
Expr eltwiseLogistic(Expr x) { return sigmoid(std::move(x)); }
Expr eltwiseTanh(Expr x) { return tanh(std::move(x)); }
Expr eltwiseGeluErf(Expr x) { return geluErf(std::move(x)); }
Expr eltwiseGeluTanh(Expr x) { return geluTanh(std::move(x)); }
Expr eltwiseElu(Expr x, Expr alpha) { return Expr::ite(x > 0, x, alpha * (exp(x) - 1)); }
Expr eltwiseLinear(Expr x, Expr alpha, Expr beta) { return alpha * x + beta; }
Expr sumPostOp(Expr dstPrev, Expr result, Expr scale) { return scale * dstPrev + result; }
Expr binaryAdd(Expr result, Expr src1) { return result + src1; }
Expr binaryMul(Expr result, Expr src1) { return result * src1; }
}  // namespace onednn

}  // namespace verifuse::verify::sem
