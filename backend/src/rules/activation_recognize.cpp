// Activation recognition: activations that models write out op by op become the one ATen op, so
// the activation post-op rules can fuse them into the GEMM before them.
//
//   gelu-tanh-recognize   0.5*x*(1 + tanh(B*(x + C*x^3))) = gelu(x, approximate='tanh')
//                         (GPT-2's NewGELUActivation, "gelu_new"); B, C float literals that round to
//                         ATen's float32 constants float(sqrt(2/pi)) and 0.044715f
//   gelu-erf-recognize    0.5*x*(1 + erf(x*A)) = gelu(x, approximate='none'), A rounding to float(1/sqrt(2))
//   silu-recognize        x*sigmoid(x) = silu(x)
//
// The pattern's root is the outer multiply; it becomes the ATen op in place (its output keeps its
// name and shape) and the ops it no longer reads go with dead code. The three products of the
// formula may be associated and ordered either way ((x*0.5)*T, x*(T*0.5), (x*T)*0.5, x/2*T, with
// T = 1 + tanh(...)), and every add/mul may have its operands either way round.
//
// Constants: the graph holds each literal as a double; every op here computes in float32 (the
// tensors are float32), so a literal acts as its float32 rounding. The guard requires that rounding
// to equal ATen's constant, and the obligation states both sides with that float's exact rational
// value: the identity is exact over the reals with the constants the kernels really use. (x / sqrt(2)
// is refused: 1/float(sqrt 2) is not float(1/sqrt 2), so that form is not ATen's gelu over the reals.)
#include <cmath>
#include <cstdio>

#include "rules/families.h"
#include "rules/rule_util.h"
#include "verifuse/verify/semantics.h"

namespace verifuse::rules::families {

namespace {

using ir::Arg;
using ir::Binary;
using ir::Graph;
using ir::Node;
using ir::NodeId;
using ir::operand;
using ir::ValueId;
using verify::Expr;
using verify::Obligation;
using verify::ObligationBuilder;
namespace sem = verify::sem;
namespace u = util;

bool isBinary(const Node* n, const char* op) {
  return n && n->op == op && (n->overload == "Tensor" || n->overload == "Scalar") && ir::hasAtLeastOperands<Binary>(*n);
}

/// The operands of an add whose alpha is 1 (add(a, b, 1) = a + b).
bool plainAdd(const Node* n) {
  if (!isBinary(n, "aten::add")) return false;
  if (ir::hasOperands<Binary>(*n)) return true;  // alpha left out
  auto alpha = u::numberArg(operand(*n, ir::Add::alpha));
  return alpha && *alpha == 1.0;
}

/// The two operands of a commutative binary op, for trying them either way round.
constexpr Binary::Operand kBothOrders[] = {Binary::self, Binary::other};
/// The operand slot a binary op's \p slot is paired with: self <-> other.
Binary::Operand partnerOf(Binary::Operand slot) { return slot == Binary::self ? Binary::other : Binary::self; }

bool sameValue(const Arg& a, ValueId v) { return a.isValue() && u::valueOf(a) == v; }

bool literalIs(const Arg& a, double value) {
  auto v = u::numberArg(a);
  return v && *v == value;
}

/// The float32 a double literal acts as in a float32 op.
float asFloat(double d) { return static_cast<float>(d); }

std::string literalText(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g (float32 %.9g)", d, static_cast<double>(asFloat(d)));
  return buf;
}

/// One operand of a commutative binary node is \p pred's, the other is returned through \p other.
template <typename Pred>
bool eitherWay(const Node* n, Pred pred, Arg* other) {
  for (Binary::Operand slot : kBothOrders) {
    if (pred(operand(*n, slot))) {
      *other = operand(*n, partnerOf(slot));
      return true;
    }
  }
  return false;
}

/// Recognizes the factor T = 1 + f(x) of an activation written out, returning x; a structural
/// match whose constants are wrong writes why into *whyNot.
using CoreFn = std::function<std::optional<ValueId>(const Graph&, const Arg&, std::string* whyNot)>;

/// T = 1 + fn(inner) (either order, alpha 1), with fn the given unary op: returns inner's producer arg.
std::optional<Arg> onePlus(const Graph& g, const Arg& t, const char* fn) {
  const Node* add = u::producerOf(g, t);
  if (!plainAdd(add)) return std::nullopt;
  Arg other;
  if (!eitherWay(add, [](const Arg& a) { return literalIs(a, 1.0); }, &other)) return std::nullopt;
  const Node* f = u::producerOf(g, other);
  if (!f || f->op != fn || !ir::hasOperands<ir::Unary>(*f)) return std::nullopt;
  return ir::selfOperand(*f);
}

/// T = 1 + tanh(B*(x + C*pow(x, 3))) -> x.
std::optional<ValueId> tanhCore(const Graph& g, const Arg& t, std::string* whyNot) {
  auto inner = onePlus(g, t, "aten::tanh");
  if (!inner) return std::nullopt;
  const Node* scaled = u::producerOf(g, *inner);
  if (!isBinary(scaled, "aten::mul")) return std::nullopt;
  Arg sum;
  double beta = 0;
  if (!eitherWay(scaled, [&](const Arg& a) { auto v = u::numberArg(a); return v && (beta = *v, true); }, &sum)) {
    return std::nullopt;
  }
  const Node* s = u::producerOf(g, sum);
  if (!plainAdd(s)) return std::nullopt;
  // x + C*pow(x, 3): find the cube first, it names x.
  for (Binary::Operand cubicSlot : kBothOrders) {
    const Node* cubic = u::producerOf(g, operand(*s, cubicSlot));
    if (!isBinary(cubic, "aten::mul")) continue;
    Arg powArg;
    double kappa = 0;
    if (!eitherWay(cubic, [&](const Arg& a) { auto v = u::numberArg(a); return v && (kappa = *v, true); }, &powArg)) {
      continue;
    }
    const Node* pw = u::producerOf(g, powArg);
    if (!pw || pw->op != "aten::pow" || pw->overload != "Tensor_Scalar" || !ir::hasOperands<ir::Pow>(*pw) ||
        !operand(*pw, ir::Pow::self).isValue() || !literalIs(operand(*pw, ir::Pow::exponent), 3.0)) {
      continue;
    }
    const ValueId x = u::valueOf(operand(*pw, ir::Pow::self));
    if (!sameValue(operand(*s, partnerOf(cubicSlot)), x)) continue;
    if (asFloat(kappa) != sem::geluTanhKappaFloat()) {
      return u::why(whyNot, "tanh GELU with cubic coefficient " + literalText(kappa) + ", not 0.044715f"), std::nullopt;
    }
    if (asFloat(beta) != sem::geluTanhBetaFloat()) {
      return u::why(whyNot, "tanh GELU with inner scale " + literalText(beta) +
                                ", which does not round to ATen's float(sqrt(2/pi))"),
             std::nullopt;
    }
    return x;
  }
  return std::nullopt;
}

/// T = 1 + erf(x*A) -> x.
std::optional<ValueId> erfCore(const Graph& g, const Arg& t, std::string* whyNot) {
  auto inner = onePlus(g, t, "aten::erf");
  if (!inner) return std::nullopt;
  const Node* scaled = u::producerOf(g, *inner);
  if (scaled && scaled->op == "aten::div" && ir::hasOperands<Binary>(*scaled) &&
      operand(*scaled, ir::Div::self).isValue() && u::numberArg(operand(*scaled, ir::Div::other))) {
    return u::why(whyNot, "erf GELU written x / " + literalText(*u::numberArg(operand(*scaled, ir::Div::other))) +
                              ": ATen's gelu multiplies by float(1/sqrt(2)), and 1/float(sqrt(2)) is another "
                              "real number, so the identity is not exact"),
           std::nullopt;
  }
  if (!isBinary(scaled, "aten::mul")) return std::nullopt;
  Arg x;
  double alpha = 0;
  if (!eitherWay(scaled, [&](const Arg& a) { auto v = u::numberArg(a); return v && (alpha = *v, true); }, &x) ||
      !x.isValue()) {
    return std::nullopt;
  }
  if (asFloat(alpha) != sem::geluErfAlphaFloat()) {
    return u::why(whyNot, "erf GELU with inner scale " + literalText(alpha) + ", not float(1/sqrt(2))"), std::nullopt;
  }
  return u::valueOf(x);
}

/// The outer product 0.5 * x * T in any association: (x*0.5)*T, (x/2)*T, x*(T*0.5), (x*T)*0.5 -> x.
std::optional<ValueId> geluProductInput(const Graph& g, const Node& n, const CoreFn& core, std::string* whyNot) {
  if (!isBinary(&n, "aten::mul") || n.outputs.size() != 1) return std::nullopt;
  std::string why;
  auto done = [&](std::optional<ValueId> x) {
    if (!x && !why.empty()) u::why(whyNot, why);
    return x;
  };
  // (x*T)*0.5 and 0.5*(x*T)
  Arg other;
  if (eitherWay(&n, [](const Arg& a) { return literalIs(a, 0.5); }, &other)) {
    const Node* xt = u::producerOf(g, other);
    if (!isBinary(xt, "aten::mul")) return std::nullopt;
    for (Binary::Operand tSlot : kBothOrders) {
      auto x = core(g, operand(*xt, tSlot), &why);
      if (x && sameValue(operand(*xt, partnerOf(tSlot)), *x)) return x;
    }
    return done(std::nullopt);
  }
  for (Binary::Operand tSlot : kBothOrders) {
    const Arg& tArg = operand(n, tSlot);
    const Arg& hArg = operand(n, partnerOf(tSlot));
    // (x*0.5)*T, (0.5*x)*T, (x/2)*T
    if (auto x = core(g, tArg, &why)) {
      const Node* h = u::producerOf(g, hArg);
      Arg hx;
      if (isBinary(h, "aten::mul") && eitherWay(h, [](const Arg& a) { return literalIs(a, 0.5); }, &hx) &&
          sameValue(hx, *x)) {
        return x;
      }
      if (h && h->op == "aten::div" && ir::hasOperands<Binary>(*h) && sameValue(operand(*h, ir::Div::self), *x) &&
          literalIs(operand(*h, ir::Div::other), 2.0)) {
        return x;
      }
      continue;
    }
    // x*(T*0.5), x*(0.5*T)
    const Node* half = u::producerOf(g, tArg);
    Arg t;
    if (isBinary(half, "aten::mul") && eitherWay(half, [](const Arg& a) { return literalIs(a, 0.5); }, &t)) {
      auto x = core(g, t, &why);
      if (x && sameValue(hArg, *x)) return x;
    }
  }
  return done(std::nullopt);
}

MatchFn matchGeluProduct(CoreFn core) {
  return [core](const Graph& g, NodeId id, std::string* whyNot) -> std::optional<Match> {
    if (!geluProductInput(g, g.node(id), core, whyNot)) return std::nullopt;
    return Match{id, id, 0};
  };
}

RewriteFn rewriteGelu(CoreFn core, std::string approximate) {
  return [core, approximate](Graph& g, const Match& m, FusionRecord&) -> Status {
    auto x = geluProductInput(g, g.node(m.anchor), core, nullptr);
    if (!x) return internalError("GELU no longer matches");
    Node& n = g.mutableNode(m.anchor);
    n.op = "aten::gelu";
    n.overload = "";
    n.args = {Arg::value(*x), Arg::string(approximate)};
    return Status::ok();
  };
}

// ---- obligations ------------------------------------------------------------------------------------

enum class GeluBug { None, HalfMissing, CubicWrong, OtherTranscendental, InnerScaleMissing, DivisionForm };

/// Every accepted association of the outer product, as separate goals, against the ATen op's UF
/// with its definition instantiated at x. \p t is the written-out 1 + f(...) factor.
void proveGeluForms(ObligationBuilder& ob, Expr x, Expr t, Expr target, bool halfMissing) {
  Expr half = halfMissing ? Expr(1) : Expr::rational(1, 2);
  ob.prove("out (x*0.5)*T", (x * half) * t, target);
  if (halfMissing) return;  // one goal shows the bug
  ob.prove("out (x/2)*T", (x / 2) * t, target);
  ob.prove("out x*(T*0.5)", x * (t * half), target);
  ob.prove("out (x*T)*0.5", (x * t) * half, target);
}

// 0.5*x*(1 + tanh(B*(x + C*x^3))) = gelu_tanh(x), B and C the float32 values of the literals, which
// the guard requires to be ATen's kBeta and kKappa.
Obligation geluTanhRecognize(GeluBug bug) {
  ObligationBuilder ob("gelu-tanh-recognize");
  Expr x = ob.var("x");
  sem::defineGeluTanhAt(ob, x);
  Expr beta = sem::floatValue(sem::geluTanhBetaFloat());
  Expr kappa = sem::floatValue(bug == GeluBug::CubicWrong ? 0.04472f : sem::geluTanhKappaFloat());
  Expr inner = x + kappa * (x * x * x);
  Expr arg = bug == GeluBug::InnerScaleMissing ? inner : inner * beta;
  Expr t = 1 + (bug == GeluBug::OtherTranscendental ? sem::erf(arg) : sem::tanh(arg));
  proveGeluForms(ob, x, t, sem::geluTanh(x), bug == GeluBug::HalfMissing);
  return ob.build();
}

// 0.5*x*(1 + erf(x*A)) = gelu_erf(x), A the float32 value of the literal (ATen's kAlpha).
Obligation geluErfRecognize(GeluBug bug) {
  ObligationBuilder ob("gelu-erf-recognize");
  Expr x = ob.var("x");
  sem::defineGeluErfAt(ob, x);
  Expr alpha = sem::floatValue(sem::geluErfAlphaFloat());
  // The division form the guard refuses: x / float(sqrt(2)).
  Expr arg = bug == GeluBug::DivisionForm ? x / sem::floatValue(static_cast<float>(M_SQRT2)) : x * alpha;
  Expr t = 1 + (bug == GeluBug::OtherTranscendental ? sem::tanh(arg) : sem::erf(arg));
  proveGeluForms(ob, x, t, sem::geluErf(x), bug == GeluBug::HalfMissing);
  return ob.build();
}

// ---- silu-recognize -------------------------------------------------------------------------------------

std::optional<Match> matchSilu(const Graph& g, NodeId id, std::string*) {
  const Node& n = g.node(id);
  if (!isBinary(&n, "aten::mul") || n.overload != "Tensor" || n.outputs.size() != 1) return std::nullopt;
  for (Binary::Operand sigmoidSlot : kBothOrders) {
    const Node* s = u::producerOf(g, operand(n, sigmoidSlot));
    if (s && s->op == "aten::sigmoid" && ir::hasOperands<ir::Unary>(*s) && ir::selfOperand(*s).isValue() &&
        sameValue(operand(n, partnerOf(sigmoidSlot)), u::valueOf(ir::selfOperand(*s)))) {
      return Match{id, id, static_cast<int>(sigmoidSlot)};  // which operand is the sigmoid
    }
  }
  return std::nullopt;
}

Status rewriteSilu(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Binary::Operand sigmoidSlot = m.operand == 0 ? Binary::self : Binary::other;
  const Arg x = operand(n, partnerOf(sigmoidSlot));
  n.op = "aten::silu";
  n.overload = "";
  n.args = {x};
  return Status::ok();
}

// x*sigmoid(x) = sigmoid(x)*x = silu(x). The mutant takes the sigmoid of another value.
Obligation siluRecognize(bool otherOperand) {
  ObligationBuilder ob("silu-recognize");
  Expr x = ob.var("x"), y = ob.var("y");
  Expr s = sem::sigmoid(otherOperand ? y : x);
  ob.prove("out x*sigmoid(x)", x * s, sem::silu(x));
  ob.prove("out sigmoid(x)*x", s * x, sem::silu(x));
  return ob.build();
}

}  // namespace

std::vector<RuleDeclaration> activationRecognition() {
  std::vector<RuleDeclaration> rules;
  rules.push_back({
      .id = "gelu-tanh-recognize",
      .summary = "0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) -> aten::gelu(x, approximate='tanh')",
      .math = "0.5*x*(1 + tanh(B*(x + C*x^3))) = gelu_tanh(x), B = float(sqrt(2/pi)) = 6693141/2^23, "
              "C = 0.044715f, exact rationals; gelu_tanh defined by that formula (ATen's kernel constants)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::mul"},
      // mul(H, T) in any association with 0.5 and x (see the file comment), T = add(tanh(mul(add(x,
      // mul(pow(x, 3), C)), B)), 1) with commuted operands, every add's alpha 1; float(B) and
      // float(C) equal ATen's kBeta and kKappa.
      .match = matchGeluProduct(tanhCore),
      .rewrite = rewriteGelu(tanhCore, "tanh"),
      .obligation = u::bindNoModel(geluTanhRecognize, GeluBug::None),
      .mutants = {{"half-missing", "x*(1 + tanh(...)) without the 0.5", u::bindNoModel(geluTanhRecognize, GeluBug::HalfMissing)},
                  {"cubic-coefficient-wrong", "0.04472 instead of 0.044715 accepted",
                   u::bindNoModel(geluTanhRecognize, GeluBug::CubicWrong)},
                  {"erf-instead-of-tanh", "0.5*x*(1 + erf(...)) taken for the tanh GELU",
                   u::bindNoModel(geluTanhRecognize, GeluBug::OtherTranscendental)},
                  {"inner-scale-missing", "tanh(x + C*x^3) without sqrt(2/pi) accepted",
                   u::bindNoModel(geluTanhRecognize, GeluBug::InnerScaleMissing)}},
  });
  rules.push_back({
      .id = "gelu-erf-recognize",
      .summary = "0.5*x*(1+erf(x*(1/sqrt(2)))) -> aten::gelu(x, approximate='none')",
      .math = "0.5*x*(1 + erf(x*A)) = gelu_erf(x), A = float(1/sqrt(2)) = 11863283/2^24 exactly; "
              "gelu_erf defined by that formula (ATen's kernel constant)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::mul"},
      // mul(H, T) as for the tanh GELU, T = add(erf(mul(x, A)), 1), float(A) = ATen's kAlpha;
      // erf(div(x, sqrt(2))) is a near miss (not exact over the reals).
      .match = matchGeluProduct(erfCore),
      .rewrite = rewriteGelu(erfCore, "none"),
      .obligation = u::bindNoModel(geluErfRecognize, GeluBug::None),
      .mutants = {{"half-missing", "x*(1 + erf(...)) without the 0.5", u::bindNoModel(geluErfRecognize, GeluBug::HalfMissing)},
                  {"tanh-instead-of-erf", "0.5*x*(1 + tanh(x*A)) taken for the erf GELU",
                   u::bindNoModel(geluErfRecognize, GeluBug::OtherTranscendental)},
                  {"division-form-accepted", "erf(x / float(sqrt(2))) taken as erf(x * float(1/sqrt(2)))",
                   u::bindNoModel(geluErfRecognize, GeluBug::DivisionForm)}},
  });
  rules.push_back({
      .id = "silu-recognize",
      .summary = "x*sigmoid(x) -> aten::silu(x)",
      .math = "x*sigmoid(x) = sigmoid(x)*x = silu(x)",
      .phase = Phase::kCanonicalize,
      .anchors = {"aten::mul"},
      // mul.Tensor(%x, sigmoid(%x)) either way round, the same value both times.
      .match = matchSilu,
      .rewrite = rewriteSilu,
      .obligation = u::bindNoModel(siluRecognize, false),
      .mutants = {{"sigmoid-of-other-operand", "x*sigmoid(y) taken for silu(x)", u::bindNoModel(siluRecognize, true)}},
  });
  return rules;
}

}  // namespace verifuse::rules::families
