// Operator semantics as obligation-language expressions (per output element, over the reals).
//
// PyTorch operators live in `sem`, oneDNN post-op parameterizations in `sem::onednn`, so a rule can
// prove "the PyTorch op equals the oneDNN attribute it is lowered to". Piecewise-linear operators
// are exact (ite/min/max); transcendental ones are distinct uninterpreted functions, so that
// gelu(erf) and gelu(tanh) can never be confused by a proof.
#pragma once

#include <string>
#include <vector>

#include "verifuse/verify/obligation.h"

namespace verifuse::verify::sem {

// --- uninterpreted functions (names are part of the cache key; never rename) ---------------------
inline constexpr const char* kGeluErf = "gelu_erf";
inline constexpr const char* kGeluTanh = "gelu_tanh";
inline constexpr const char* kSigmoid = "sigmoid";
inline constexpr const char* kTanh = "tanh";
inline constexpr const char* kErf = "erf";
inline constexpr const char* kExp = "exp";
inline constexpr const char* kDot = "dot";        ///< dot(W: Tensor, X: Tensor) -> Real
inline constexpr const char* kScale = "scale";    ///< scale(c: Real, W: Tensor) -> Tensor
inline constexpr const char* kTAdd = "tadd";      ///< tadd(W1: Tensor, W2: Tensor) -> Tensor

Expr exp(Expr x);
Expr erf(Expr x);
Expr sigmoid(Expr x);
Expr tanh(Expr x);
/// gelu(x, approximate="none") as its own UF (not expanded through erf).
Expr geluErf(Expr x);
/// gelu(x, approximate="tanh") as its own UF, distinct from geluErf.
Expr geluTanh(Expr x);

/// The exact rational value of a float32 (every finite float is m * 2^e): how a float literal of a
/// graph enters an obligation. Non-finite values and |f| >= 2^62 give 0 (not used by the rules).
Expr floatValue(float f);

/// ATen's gelu(x, approximate="tanh") CPU kernel computes, in float32,
///   0.5*x*(1 + tanh(kBeta*(x + kKappa*x^3))),  kBeta = float(M_SQRT2*M_2_SQRTPI*0.5), kKappa = 0.044715f
/// and gelu(x, approximate="none") computes 0.5*x*(1 + erf(x*kAlpha)), kAlpha = float(M_SQRT1_2).
/// These are those float32 constants as exact rationals (what the rules compare literals against).
float geluTanhBetaFloat();   ///< float(sqrt(2/pi)) as ATen rounds it
float geluTanhKappaFloat();  ///< 0.044715f
float geluErfAlphaFloat();   ///< float(1/sqrt(2))
/// The definition of the gelu_tanh UF over the reals with ATen's float32 constants (exact rationals):
/// 0.5*x*(1 + tanh(beta*(x + kappa*x*x*x))), tanh the `tanh` UF.
Expr geluTanhFormula(Expr x);
/// The definition of the gelu_erf UF: 0.5*x*(1 + erf(alpha*x)), erf the `erf` UF.
Expr geluErfFormula(Expr x);
/// Adds the definition instantiated at \p x as an assumption: gelu_tanh(x) == geluTanhFormula(x)
/// (a ground instance of the definition, so mutants stay quantifier-free and are refuted with a
/// counterexample).
void defineGeluTanhAt(ObligationBuilder& ob, Expr x);
/// gelu_erf(x) == geluErfFormula(x) as an assumption.
void defineGeluErfAt(ObligationBuilder& ob, Expr x);

// --- PyTorch pointwise ops ----------------------------------------------------------------------
Expr relu(Expr x);                              ///< max(x, 0)
Expr leakyRelu(Expr x, Expr negativeSlope);     ///< x if x >= 0 else slope*x
Expr clamp(Expr x, Expr lo, Expr hi);           ///< min(max(x, lo), hi)
Expr hardtanh(Expr x, Expr lo = -1, Expr hi = 1);
Expr relu6(Expr x);                             ///< clamp(x, 0, 6)
Expr hardswish(Expr x);                         ///< x * clamp(x + 3, 0, 6) / 6
Expr hardsigmoid(Expr x);                       ///< clamp(x/6 + 1/2, 0, 1)
Expr elu(Expr x, Expr alpha);                   ///< x if x > 0 else alpha*(exp(x) - 1)
Expr silu(Expr x);                              ///< x * sigmoid(x)
/// torch.add(a, b, alpha=alpha) = a + alpha*b
Expr add(Expr a, Expr b, Expr alpha = 1);
/// dropout in eval mode: identity.
Expr dropoutEval(Expr x);
/// dropout in training mode for one element: keep ? x/(1-p) : 0 (keep is a Bool variable).
Expr dropoutTrain(Expr x, Expr p, Expr keep);

// --- rsqrt and batch norm -----------------------------------------------------------------------
/// 1/sqrt(x) as a fresh variable `r` with `r > 0 ∧ r*r*x = 1` (keeps queries polynomial).
/// \p name is the fresh variable's (IR-style) name, e.g. "rsqrt(bn.running_var[o]+bn.eps)".
Expr rsqrt(ObligationBuilder& ob, Expr x, const std::string& name);

/// Per-channel batch-norm parameters of one channel.
struct BatchNormParams {
  Expr gamma, beta, mean, var, eps;
};
/// Variables `<prefix>.weight[<ch>]`, `.bias[<ch>]`, `.running_mean[<ch>]`, `.running_var[<ch>]`,
/// `<prefix>.eps`.
BatchNormParams batchNormParams(const std::string& prefix, const std::string& channel);
/// The guard facts of an eval-mode BN: eps > 0, var >= 0.
void assumeBatchNorm(ObligationBuilder& ob, const BatchNormParams& p);
/// rsqrt(var + eps) for \p p (one fresh variable per channel, named after the parameters).
Expr batchNormRsqrt(ObligationBuilder& ob, const BatchNormParams& p);
/// Eval-mode batch norm of one element: gamma*(y - mean)*rsqrt(var + eps) + beta.
Expr batchNormEval(ObligationBuilder& ob, Expr y, const BatchNormParams& p);

// --- conv / linear, per output element ----------------------------------------------------------

/// A tensor operand of a per-output-element linear map: either a term of the uninterpreted sort
/// Tensor (symbolic model) or K explicit Real elements (bounded model).
struct TensorTerm {
  Expr symbolic;
  std::vector<Expr> elements;
};

/// How `dot(W, X)` (one output element of conv/linear: Σ_k w_k x_k) is modelled.
///  - symbolic(): uninterpreted `dot`, `scale`, `tadd` with the linearity axioms dotAxioms(); proves
///    the rule for every layer size at once.
///  - explicitSum(K): Σ_{k<K} w_k x_k with explicit Real elements; the bounded instantiation that
///    checks the same identity (and each axiom) on small concrete shapes.
/// A rule writes its obligation once as a function of a DotModel and gets both.
class DotModel {
 public:
  static DotModel symbolic();
  static DotModel explicitSum(int k);

  bool isSymbolic() const { return k_ == 0; }
  int k() const { return k_; }
  /// "dot-uf" or "K=3".
  std::string describe() const;

  /// The weight row / input window named \p name (elements are `name[k]`).
  TensorTerm tensor(const std::string& name) const;
  /// c * T (elementwise by a scalar).
  TensorTerm scale(Expr c, const TensorTerm& t) const;
  /// T1 + T2 (elementwise).
  TensorTerm add(const TensorTerm& a, const TensorTerm& b) const;
  Expr dot(const TensorTerm& w, const TensorTerm& x) const;
  /// One output element of conv/linear: dot(W, X) + b. Adds the axioms to \p ob when symbolic.
  Expr linear(ObligationBuilder& ob, const TensorTerm& w, const TensorTerm& x, Expr b) const;
  /// Adds the axioms the model relies on (none for explicit sums).
  void require(ObligationBuilder& ob) const;

 private:
  explicit DotModel(int k) : k_(k) {}
  int k_ = 0;
};

/// The stated axioms of the symbolic model:
///   ∀c,W,X.     dot(scale(c,W), X) = c·dot(W,X)
///   ∀W1,W2,X.   dot(tadd(W1,W2), X) = dot(W1,X) + dot(W2,X)
std::vector<Expr> dotAxioms();
/// Names of the axioms, parallel to dotAxioms(): "dot-scale-linear", "dot-add-linear".
std::vector<std::string> dotAxiomNames();
/// Bounded instantiation of axiom \p index with K explicit elements (an obligation that must be
/// Proved), e.g. Σ (c·w_k)·x_k = c·Σ w_k·x_k.
Obligation dotAxiomInstance(size_t index, int k);

// --- oneDNN post-op semantics (dnnl v3 eltwise algorithms, sum and binary post-ops) ---------------
namespace onednn {
Expr eltwiseRelu(Expr x, Expr alpha);                   ///< x if x > 0 else alpha*x
Expr eltwiseClip(Expr x, Expr lo, Expr hi);             ///< lo if x <= lo; x if x <= hi; hi
Expr eltwiseHardswish(Expr x, Expr alpha, Expr beta);   ///< x * max(0, min(1, alpha*x + beta))
Expr eltwiseHardsigmoid(Expr x, Expr alpha, Expr beta); ///< max(0, min(1, alpha*x + beta))
Expr eltwiseSwish(Expr x, Expr alpha);                  ///< x * sigmoid(alpha*x)
Expr eltwiseLogistic(Expr x);                           ///< sigmoid(x)
Expr eltwiseTanh(Expr x);                               ///< tanh(x)
Expr eltwiseGeluErf(Expr x);                            ///< gelu_erf(x)
Expr eltwiseGeluTanh(Expr x);                           ///< gelu_tanh(x)
Expr eltwiseElu(Expr x, Expr alpha);                    ///< x if x > 0 else alpha*(exp(x) - 1)
Expr eltwiseLinear(Expr x, Expr alpha, Expr beta);      ///< alpha*x + beta
/// Sum post-op: dst = scale * dst_prev + result (zero point 0).
Expr sumPostOp(Expr dstPrev, Expr result, Expr scale);
/// Binary add post-op: dst = result + src1.
Expr binaryAdd(Expr result, Expr src1);
/// Binary mul post-op: dst = result * src1.
Expr binaryMul(Expr result, Expr src1);
}  // namespace onednn

}  // namespace verifuse::verify::sem
