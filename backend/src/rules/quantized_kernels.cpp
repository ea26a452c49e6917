// The int8 kernels of their own (rules/quantized.cpp describes the int8 rules and their integer
// semantics): torchao's dynamic int8 matmul on oneDNN, and every quantize left over on the
// runtime's one-pass quantize kernel.
//
//   int8-int-mm                _int_mm(xq, permute(Wq, [1, 0]))             = verifuse::int_mm(xq, Wq) (s32, torchao's dynamic int8)
//   int8-quantize-kernel       q(x f32) left over                          = verifuse::quantize (one C++ pass)
//   int8-weight-only-mm        mm(x f32, permute(Wq, [1, 0]).to(f32))      = verifuse::int8_weight_mm(x, Wq) (torchao's weight-only int8)
//   int4-weight-only-mm        [add]mm([b,] x f32, permute(view((view(Q).to(f32) - view(Z).to(f32)) * view(S))))
//                                                                          = verifuse::int4_weight_mm(x, Q, S, Z, b, g) (torchao's int4, groups of g)
#include <string>
#include <vector>

#include "rules/quantized_common.h"

namespace verifuse::rules::families {

namespace {

using namespace quantized;  // the shared pieces (quantized_common.h)

}  // namespace

// ---- int8-int-mm --------------------------------------------------------------------------------

namespace {

// aten::_int_mm(a, permute(W, [1, 0])), a u8/s8 [M, K], W an s8 [N, K] constant (torchao's
// dynamic-activation int8 linear after aot_autograd desugars its weight): the s32 accumulator on
// oneDNN's VNNI matmul. K is bounded so that no s32 sum can overflow (|a_k w_k| <= 255 * 128):
// past it, eager's wrap-around and oneDNN's saturation could differ.
constexpr int64_t kMaxExactK = 65535;

using ir::IntMm;
using ir::Permute;

std::optional<Match> matchIntMm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<IntMm>(n) || !operand(n, IntMm::self).isValue()) return std::nullopt;
  const ir::Value& a = g.value(u::valueOf(operand(n, IntMm::self)));
  if (a.dtype != DType::UInt8 && a.dtype != DType::Int8) return u::why(whyNot, "the activation is not u8/s8"), std::nullopt;
  const Node* perm = u::producerOf(g, operand(n, IntMm::mat2));
  if (!perm || perm->op != "aten::permute" || !hasOperands<Permute>(*perm)) {
    return u::why(whyNot, "the weight is not a transposed constant"), std::nullopt;
  }
  auto dims = operand(*perm, Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const ConstantTensor* w = constantOf(g, operand(*perm, Permute::self));
  if (!w || w->dtype != DType::Int8 || w->sizes.size() != 2 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a contiguous 2-d s8 constant"), std::nullopt;
  }
  if (w->sizes[1] > kMaxExactK) return u::why(whyNot, "K > 65535: the s32 sum could overflow"), std::nullopt;
  return Match{id, id, 0};
}

Status rewriteIntMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Node* perm = u::producerOf(g, operand(n, IntMm::mat2));
  if (!perm) return internalError("int8-int-mm: match no longer holds");
  using ir::FusedIntMm;
  // The permute stays while others read it (torchao's column sums).
  std::vector<Arg> operands = OperandsOf<FusedIntMm>()
                                  .set(FusedIntMm::a, operand(n, IntMm::self))
                                  .set(FusedIntMm::weight, operand(*perm, Permute::self))
                                  .take();
  n.op = "verifuse::int_mm";
  n.overload = "";
  n.args = std::move(operands);
  return Status::ok();
}

enum class IntMmBug { None, WeightNotTransposed };

// _int_mm(a, permute(W, [1, 0]))[m, n] = sum_k a[m, k] W[n, k] on explicit [2, 2] tensors (the
// kernel reads torch's [N, K] weight as the [K, N] operand; exact integer sums on both sides).
Obligation intMm(IntMmBug bug) {
  ObligationBuilder ob("int8-int-mm");
  using sem::ElementTensor;
  const ElementTensor a = ElementTensor::variables("a", {2, 2}), w = ElementTensor::variables("W", {2, 2});
  const ElementTensor kernel = ElementTensor::fromFunction({2, 2}, [a, w, bug](const sem::Index& i) {
    Expr acc = Expr::integer(0);
    for (int64_t k = 0; k < 2; ++k) {
      acc = acc + a.at({i[0], k}) * (bug == IntMmBug::WeightNotTransposed ? w.at({k, i[1]}) : w.at({i[1], k}));
    }
    return acc;
  });
  sem::proveElementwise(ob, "out", sem::mm(a, sem::permute(w, {1, 0})), kernel);
  return ob.build();
}

}  // namespace

RuleDeclaration int8IntMm() {
  return {
      .id = "int8-int-mm",
      .summary = "_int_mm(u8/s8 a, permute(s8 W)) -> verifuse::int_mm (oneDNN s32 matmul, W prepacked)",
      .math = "sum_k a[m, k] W^T[k, n] = sum_k a[m, k] W[n, k], exact in s32 for K <= 65535",
      .phase = Phase::kFusion,
      .anchors = {"aten::_int_mm"},
      .match = matchIntMm,
      .rewrite = rewriteIntMm,
      .obligation = u::bindNoModel(intMm, IntMmBug::None),
      .mutants = {{"int-mm-weight-not-transposed", "W read as [K, N] (its transpose)",
                   u::bindNoModel(intMm, IntMmBug::WeightNotTransposed)}},
  };
}

// ---- int8-weight-only-mm -------------------------------------------------------------------------

namespace {

using ir::Mm;
using ir::ToCopy;

// aten::mm(x, _to_copy(permute(W, [1, 0]), float32)), x a float32 [M, K] value, W an s8 [N, K]
// constant: torchao's Int8WeightOnlyConfig linear after aot_autograd desugars its Int8Tensor
// weight (the per-row scale is the graph's own multiply after the mm, left as eager has it).
// Without the rule the widened weight is folded into a float32 copy at plan time: four bytes per
// weight read on every decode step instead of one.
std::optional<Match> matchInt8WeightOnlyMm(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  if (!hasOperands<Mm>(n) || !operand(n, Mm::self).isValue() || !operand(n, Mm::mat2).isValue()) return std::nullopt;
  const Node* widen = u::producerOf(g, operand(n, Mm::mat2));
  if (!widen || widen->op != "aten::_to_copy" || !hasAtLeastOperands<ir::Unary>(*widen)) return std::nullopt;
  const ir::Value& x = g.value(u::valueOf(operand(n, Mm::self)));
  if (x.dtype != DType::Float32 || x.shape.size() != 2) return u::why(whyNot, "the activation is not a 2-d float32 value"), std::nullopt;
  if (g.value(u::valueOf(operand(n, Mm::mat2))).dtype != DType::Float32) {
    return u::why(whyNot, "the weight is not widened to float32"), std::nullopt;
  }
  const Node* perm = u::producerOf(g, operand(*widen, ToCopy::self));
  if (!perm || perm->op != "aten::permute" || !hasOperands<Permute>(*perm)) {
    return u::why(whyNot, "the widened weight is not a transposed constant"), std::nullopt;
  }
  auto dims = operand(*perm, Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const ConstantTensor* w = constantOf(g, operand(*perm, Permute::self));
  if (!w || w->dtype != DType::Int8 || w->sizes.size() != 2 || !w->isContiguous()) {
    return u::why(whyNot, "the weight is not a contiguous 2-d s8 constant"), std::nullopt;
  }
  return Match{id, id, 0};
}

Status rewriteInt8WeightOnlyMm(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  const Node* widen = u::producerOf(g, operand(n, Mm::mat2));
  const Node* perm = widen ? u::producerOf(g, operand(*widen, ToCopy::self)) : nullptr;
  if (!perm) return internalError("int8-weight-only-mm: match no longer holds");
  using ir::FusedInt8WeightMm;
  // The widening and the permute stay while others read them (dead code removes them otherwise).
  std::vector<Arg> operands = OperandsOf<FusedInt8WeightMm>()
                                  .set(FusedInt8WeightMm::x, operand(n, Mm::self))
                                  .set(FusedInt8WeightMm::weight, operand(*perm, Permute::self))
                                  .take();
  n.op = "verifuse::int8_weight_mm";
  n.overload = "";
  n.args = std::move(operands);
  return Status::ok();
}

enum class WeightOnlyBug { None, WeightNotTransposed, WeightZeroExtended };

// mm(x, permute(W, [1, 0]).to(float32))[m, n] = sum_k x[m, k] * W[n, k] on explicit [2, 2]
// tensors, W integers in [-128, 127]: the widening is exact on both sides (|W| < 2^24), so the
// kernel's sign-extended weight times x is the source's product, summed over k (both sides sum
// in float32; the order of that sum is every GEMM's freedom, as for the float linears).
Obligation weightOnlyMm(WeightOnlyBug bug) {
  ObligationBuilder ob("int8-weight-only-mm");
  using sem::ElementTensor;
  const ElementTensor x = ElementTensor::variables("x", {2, 2});
  std::vector<Expr> codes;
  for (int64_t i = 0; i < 4; ++i) {
    Expr c = ob.var("W[" + std::to_string(i / 2) + "," + std::to_string(i % 2) + "]", Sort::Int);
    ob.assume(c >= Expr::integer(-128)).assume(c <= Expr::integer(127));
    codes.push_back(c);
  }
  const ElementTensor w = ElementTensor::fromFunction({2, 2}, [codes](const sem::Index& i) { return codes[static_cast<size_t>(i[0] * 2 + i[1])]; });
  // The kernel widens each s8 weight in registers (vpmovsxbd, then vcvtdq2ps) and multiplies.
  auto widened = [bug](const Expr& code) {
    if (bug == WeightOnlyBug::WeightZeroExtended) return Expr::ite(code < Expr::integer(0), code + Expr::integer(256), code);
    return code;
  };
  const ElementTensor kernel = ElementTensor::fromFunction({2, 2}, [x, w, bug, widened](const sem::Index& i) {
    Expr acc = Expr::integer(0);
    for (int64_t k = 0; k < 2; ++k) {
      const Expr code = bug == WeightOnlyBug::WeightNotTransposed ? w.at({k, i[1]}) : w.at({i[1], k});
      acc = acc + x.at({i[0], k}) * widened(code);
    }
    return acc;
  });
  sem::proveElementwise(ob, "out", sem::mm(x, sem::permute(w, {1, 0})), kernel);
  return ob.build();
}

}  // namespace

RuleDeclaration int8WeightOnlyMm() {
  return {
      .id = "int8-weight-only-mm",
      .summary = "mm(f32 x, permute(s8 W).to(f32)) -> verifuse::int8_weight_mm (reads W as s8, widens in registers)",
      .math = "sum_k x[m, k] float(W^T[k, n]) = sum_k x[m, k] float(W[n, k]), float(W) exact for |W| <= 128",
      .phase = Phase::kFusion,
      .anchors = {"aten::mm"},
      .match = matchInt8WeightOnlyMm,
      .rewrite = rewriteInt8WeightOnlyMm,
      .obligation = u::bindNoModel(weightOnlyMm, WeightOnlyBug::None),
      .mutants = {{"weight-only-mm-weight-not-transposed", "W read as [K, N] (its transpose)",
                   u::bindNoModel(weightOnlyMm, WeightOnlyBug::WeightNotTransposed)},
                  {"weight-only-mm-weight-zero-extended", "the s8 weight widened as u8 (vpmovzxbd for vpmovsxbd)",
                   u::bindNoModel(weightOnlyMm, WeightOnlyBug::WeightZeroExtended)}},
  };
}

// ---- int4-weight-only-mm -------------------------------------------------------------------------

namespace {

using ir::Addmm;
using ir::View;

// Int4WeightMatmul::kChunk (kernels/weight_only.h): the group sizes the kernel packs are its
// multiples (other groups would only reach the op's own composition).
constexpr int64_t kInt4Chunk = 16;

// The constant under aten::view(constant, sizes): the view's sizes and the constant's operand.
struct ViewedConstant {
  const ConstantTensor* tensor = nullptr;
  Arg operand;
  std::vector<int64_t> sizes;
};

std::optional<ViewedConstant> viewedConstant(const Graph& g, const Arg& a) {
  const Node* v = u::producerOf(g, a);
  if (!v || v->op != "aten::view" || !hasOperands<View>(*v)) return std::nullopt;
  auto sizes = operand(*v, View::size).asIntList();
  const ConstantTensor* c = constantOf(g, operand(*v, View::self));
  if (!sizes.isOk() || !c || !c->isContiguous()) return std::nullopt;
  return ViewedConstant{c, operand(*v, View::self), *sizes};
}

// The operand of a float32 aten::_to_copy.
const Arg* widenedOperand(const Graph& g, const Arg& a) {
  const Node* widen = u::producerOf(g, a);
  if (!widen || widen->op != "aten::_to_copy" || !hasAtLeastOperands<ir::Unary>(*widen)) return nullptr;
  if (g.value(u::valueOf(a)).dtype != DType::Float32) return nullptr;
  return &operand(*widen, ToCopy::self);
}

struct Int4Linear {
  Arg x, codes, scale, zeroPoint, bias = Arg::none();
  int64_t group = 0;
};

// aten::mm(x, W^T) or aten::addmm(b, x, W^T, 1, 1) with W^T = permute(view(D, [N, K]), [1, 0]) and
//   D = (view(Q, [N, G, g]).to(f32) - view(Z, [N, G, 1]).to(f32)) * view(S, [N, G, 1])
// (the multiply's operands either way round): torchao's IntxWeightOnlyConfig(int4, PerGroup(g))
// linear after aot_autograd desugars its IntxUnpackedToInt8Tensor (s8 codes Q [N, K], float32
// scales S and s8 zero points Z [N, G]). Without the rule the dequantized float32 weight is
// computed on every call (rows of a row-fused program): eight bytes written and read per weight.
std::optional<Int4Linear> int4Linear(const Graph& g, const Node& n, std::string* whyNot) {
  const bool isAddmm = n.op == "aten::addmm";
  if (isAddmm ? !hasOperands<Addmm>(n) : !hasOperands<Mm>(n)) return std::nullopt;
  const Arg& xArg = isAddmm ? operand(n, Addmm::mat1) : operand(n, Mm::self);
  const Arg& wArg = isAddmm ? operand(n, Addmm::mat2) : operand(n, Mm::mat2);
  const Node* perm = u::producerOf(g, wArg);
  if (!perm || perm->op != "aten::permute" || !hasOperands<Permute>(*perm)) return std::nullopt;
  auto dims = operand(*perm, Permute::dims).asIntList();
  if (!dims.isOk() || *dims != std::vector<int64_t>{1, 0}) return std::nullopt;
  const Node* flat = u::producerOf(g, operand(*perm, Permute::self));
  if (!flat || flat->op != "aten::view" || !hasOperands<View>(*flat)) return std::nullopt;
  const Node* mul = u::producerOf(g, operand(*flat, View::self));
  if (!mul || mul->op != "aten::mul" || !hasOperands<ir::Mul>(*mul)) return std::nullopt;
  const Node* sub = u::producerOf(g, operand(*mul, ir::Mul::self));
  Arg scaleArg = operand(*mul, ir::Mul::other);
  if (!sub || sub->op != "aten::sub") {
    sub = u::producerOf(g, operand(*mul, ir::Mul::other));
    scaleArg = operand(*mul, ir::Mul::self);
  }
  if (!sub || sub->op != "aten::sub" || !hasOperands<ir::Sub>(*sub)) return std::nullopt;
  // From here on the shape is torchao's dequantize-then-matmul: a failed guard is a near miss.
  auto alpha = u::numberArg(operand(*sub, ir::Sub::alpha));
  if (!alpha || *alpha != 1.0) return u::why(whyNot, "the zero point is subtracted with alpha != 1"), std::nullopt;
  const Arg* codesWidened = widenedOperand(g, operand(*sub, ir::Sub::self));
  const Arg* zeroWidened = widenedOperand(g, operand(*sub, ir::Sub::other));
  if (!codesWidened || !zeroWidened) return u::why(whyNot, "codes and zero points are not widened to float32"), std::nullopt;
  const auto codes = viewedConstant(g, *codesWidened), zeros = viewedConstant(g, *zeroWidened),
             scales = viewedConstant(g, scaleArg);
  if (!codes || !zeros || !scales || codes->tensor->dtype != DType::Int8 || zeros->tensor->dtype != DType::Int8 ||
      scales->tensor->dtype != DType::Float32 || codes->tensor->sizes.size() != 2 || codes->sizes.size() != 3) {
    return u::why(whyNot, "not s8 codes, s8 zero points and float32 scales viewed as [N, G, g]"), std::nullopt;
  }
  const int64_t rows = codes->tensor->sizes[0], cols = codes->tensor->sizes[1];
  const int64_t groups = codes->sizes[1], group = codes->sizes[2];
  const std::vector<int64_t> perGroup{rows, groups, 1}, flatSizes{rows, cols}, stored{rows, groups};
  if (codes->sizes[0] != rows || groups * group != cols || zeros->sizes != perGroup || scales->sizes != perGroup ||
      zeros->tensor->sizes != stored || scales->tensor->sizes != stored) {
    return u::why(whyNot, "the scales and zero points are not one per row and group"), std::nullopt;
  }
  auto flatTo = operand(*flat, View::size).asIntList();
  if (!flatTo.isOk() || *flatTo != flatSizes) return u::why(whyNot, "the dequantized weight is not viewed back as [N, K]"), std::nullopt;
  if (group % kInt4Chunk != 0) {
    return u::why(whyNot, "group size " + std::to_string(group) + " is not a multiple of 16 (the kernel's packing)"),
           std::nullopt;
  }
  if (!xArg.isValue() || g.value(u::valueOf(xArg)).dtype != DType::Float32 ||
      g.value(u::valueOf(xArg)).shape.size() != 2) {
    return u::why(whyNot, "the activation is not a 2-d float32 value"), std::nullopt;
  }
  Int4Linear linear{xArg, codes->operand, scales->operand, zeros->operand, Arg::none(), group};
  if (isAddmm) {
    auto beta = u::numberArg(operand(n, Addmm::beta)), a = u::numberArg(operand(n, Addmm::alpha));
    if (!beta || !a || *beta != 1.0 || *a != 1.0) return u::why(whyNot, "addmm with beta/alpha != 1"), std::nullopt;
    const ConstantTensor* b = u::f32Constant(g, operand(n, Addmm::self));
    if (!b || b->sizes != std::vector<int64_t>{rows}) {
      return u::why(whyNot, "the bias is not a float32 constant with one value per output feature"), std::nullopt;
    }
    linear.bias = operand(n, Addmm::self);
  }
  return linear;
}

std::optional<Match> matchInt4WeightOnlyMm(const Graph& g, NodeId id, std::string* whyNot) {
  if (!int4Linear(g, g.node(id), whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteInt4WeightOnlyMm(Graph& g, const Match& m, FusionRecord&) {
  auto linear = int4Linear(g, g.node(m.anchor), nullptr);
  if (!linear) return internalError("int4-weight-only-mm: match no longer holds");
  using ir::FusedInt4WeightMm;
  Node& n = g.mutableNode(m.anchor);
  // The dequantization stays while others read it (dead code removes it otherwise).
  n.args = OperandsOf<FusedInt4WeightMm>()
               .set(FusedInt4WeightMm::x, linear->x)
               .set(FusedInt4WeightMm::weight, linear->codes)
               .set(FusedInt4WeightMm::scale, linear->scale)
               .set(FusedInt4WeightMm::zero_point, linear->zeroPoint)
               .set(FusedInt4WeightMm::bias, linear->bias)
               .set(FusedInt4WeightMm::group_size, Arg::integer(linear->group))
               .take();
  n.op = "verifuse::int4_weight_mm";
  n.overload = "";
  return Status::ok();
}

enum class Int4Bug { None, NibbleOrderSwapped, GroupBoundaryOffByOne, ZeroPointSignFlipped, CodesNotRecentred };

// On explicit tensors (N = 2 output features, K = 8, groups of g = 4; the kernel packs 8 columns'
// nibbles per 32-bit word, here 2 per byte, the same layout narrowed), codes Q in [-8, 7] (the
// kernel's packing refuses others at run time), zero points Z any s8, scales S any reals:
//   source weight  D[n, k] = (Q[n, k] - Z[n, k / g]) * S[n, k / g]
//   kernel weight  T[n, k / g][u(n, k)] = (u(n, k) - (Z[n, k / g] + 8)) * S[n, k / g]
// where u(n, k) is the nibble the kernel reads back from the word it packed: the word of k holds
// Q[c, k] + 8 in nibble c (bits 4c..4c+3), and the nibbles of a word P are the unique
// u_c in [0, 15] with P = sum_c 16^c u_c (what `shift right 4c` then the table's low-4-bit index,
// or `and 15`, compute). The goals: per weight, the integer factor and the scale the kernel
// multiplies are the source's (so the float32 products, one rounding on each side, are the same
// number: torchao's dequantized weight exactly; stated as two goals, the integer one linear, as
// one product it is a nonlinear mixed problem the solver times out on); and, with those weights,
// the kernel's output b[n] + sum_k x[k] w[n, k] is addmm(b, x, permute(view(w, [N, K]), [1, 0]))
// (the view and the transposition; the mm form is b = 0).
Obligation int4WeightOnlyDequant(Int4Bug bug) {
  ObligationBuilder ob("int4-weight-only-mm");
  using sem::ElementTensor;
  constexpr int64_t kN = 2, kK = 8, kGroup = 4, kGroups = kK / kGroup;
  std::vector<Expr> codes, zeros, scales;
  for (int64_t i = 0; i < kN * kK; ++i) {
    Expr c = ob.var("Q[" + std::to_string(i / kK) + "," + std::to_string(i % kK) + "]", Sort::Int);
    ob.assume(c >= Expr::integer(-8)).assume(c <= Expr::integer(7));
    codes.push_back(c);
  }
  for (int64_t i = 0; i < kN * kGroups; ++i) {
    const std::string at = "[" + std::to_string(i / kGroups) + "," + std::to_string(i % kGroups) + "]";
    Expr z = ob.var("Z" + at, Sort::Int);
    ob.assume(z >= Expr::integer(-128)).assume(z <= Expr::integer(127));
    zeros.push_back(z);
    scales.push_back(ob.var("S" + at));
  }
  auto code = [&](int64_t n, int64_t k) { return codes[static_cast<size_t>(n * kK + k)]; };
  auto zero = [&](int64_t n, int64_t gi) { return zeros[static_cast<size_t>(n * kGroups + gi)]; };
  auto scale = [&](int64_t n, int64_t gi) { return scales[static_cast<size_t>(n * kGroups + gi)]; };
  // The kernel's packing and the nibbles it reads back.
  auto stored = [bug](const Expr& q) {
    if (bug == Int4Bug::CodesNotRecentred) return Expr::ite(q < Expr::integer(0), q + Expr::integer(16), q);
    return q + Expr::integer(8);
  };
  std::vector<Expr> nibble(static_cast<size_t>(kN * kK));
  for (int64_t k = 0; k < kK; ++k) {
    const std::string at = "[" + std::to_string(k) + "]";
    const Expr packed = stored(code(0, k)) + Expr::integer(16) * stored(code(1, k));
    const Expr u0 = ob.fresh("u0" + at, [](Expr v) { return std::vector<Expr>{v >= Expr::integer(0), v <= Expr::integer(15)}; }, Sort::Int);
    const Expr u1 = ob.fresh("u1" + at, [&](Expr v) {
      return std::vector<Expr>{v >= Expr::integer(0), v <= Expr::integer(15), packed == Expr::integer(16) * v + u0};
    }, Sort::Int);
    const bool swapped = bug == Int4Bug::NibbleOrderSwapped;
    nibble[static_cast<size_t>(0 * kK + k)] = swapped ? u1 : u0;
    nibble[static_cast<size_t>(1 * kK + k)] = swapped ? u0 : u1;
  }
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t k = 0; k < kK; ++k) {
      const int64_t gi = k / kGroup;
      const int64_t kernelGroup = bug == Int4Bug::GroupBoundaryOffByOne ? std::min((k + 1) / kGroup, kGroups - 1) : gi;
      const Expr offsetZero = bug == Int4Bug::ZeroPointSignFlipped ? Expr::integer(8) - zero(n, kernelGroup)
                                                                   : zero(n, kernelGroup) + Expr::integer(8);
      const std::string at = "[" + std::to_string(n) + "," + std::to_string(k) + "]";
      ob.prove("weight code" + at, code(n, k) - zero(n, gi), nibble[static_cast<size_t>(n * kK + k)] - offsetZero);
      ob.prove("weight scale" + at, scale(n, gi), scale(n, kernelGroup));
    }
  }
  // The sum over those weights, in the kernel's indexing, against addmm over the viewed,
  // transposed weight.
  const ElementTensor x = ElementTensor::variables("x", {1, kK});
  const ElementTensor bias = ElementTensor::variables("b", {kN});
  const ElementTensor w = ElementTensor::variables("w", {kN, kGroups, kGroup});
  const ElementTensor source = sem::addmm(bias, x, sem::permute(sem::reshape(w, {kN, kK}), {1, 0}), 1, 1);
  const ElementTensor kernel = ElementTensor::fromFunction({1, kN}, [x, bias, w](const sem::Index& i) {
    Expr acc = bias.at({i[1]});
    for (int64_t k = 0; k < kK; ++k) acc = acc + x.at({0, k}) * w.at({i[1], k / kGroup, k % kGroup});
    return acc;
  });
  sem::proveElementwise(ob, "out", source, kernel);
  return ob.build();
}

}  // namespace

RuleDeclaration int4WeightOnlyMm() {
  return {
      .id = "int4-weight-only-mm",
      .summary = "[add]mm(f32 x, torchao's dequantized int4 weight^T) -> verifuse::int4_weight_mm (packed nibbles, "
                 "a table per group)",
      .math = "sum_k x[k] (Q[n,k] - Z[n,k/g]) S[n,k/g] = sum_k x[k] T[n,k/g][u(n,k)], u = Q + 8 packed 8 "
              "columns per word, T[u] = (u - (Z + 8)) S",
      .phase = Phase::kFusion,
      .anchors = {"aten::mm", "aten::addmm"},
      .match = matchInt4WeightOnlyMm,
      .rewrite = rewriteInt4WeightOnlyMm,
      .obligation = u::bindNoModel(int4WeightOnlyDequant, Int4Bug::None),
      .mutants = {{"int4-nibble-order-swapped", "column 0 read from nibble 1 and column 1 from nibble 0",
                   u::bindNoModel(int4WeightOnlyDequant, Int4Bug::NibbleOrderSwapped)},
                  {"int4-group-boundary-off-by-one", "k takes the scale and zero point of group (k + 1) / g",
                   u::bindNoModel(int4WeightOnlyDequant, Int4Bug::GroupBoundaryOffByOne)},
                  {"int4-zero-point-sign-flipped", "the table subtracts 8 - Z instead of Z + 8",
                   u::bindNoModel(int4WeightOnlyDequant, Int4Bug::ZeroPointSignFlipped)},
                  {"int4-codes-not-recentred", "codes stored as two's-complement nibbles, read as offset by 8",
                   u::bindNoModel(int4WeightOnlyDequant, Int4Bug::CodesNotRecentred)}},
  };
}

// ---- int8-quantize-kernel -----------------------------------------------------------------------

namespace {

// quantize_per_tensor(x f32, s, z, qmin, qmax, u8/s8) that no rule before it absorbed: the
// runtime's one-pass kernel (verifuse::quantize) instead of torch's Python composition.
std::optional<Match> matchQuantizeKernel(const Graph& g, NodeId id, std::string* whyNot) {
  const Node& n = g.node(id);
  using Q = ir::QuantizePerTensor;
  if (!hasOperands<Q>(n) || !operand(n, Q::input).isValue()) return std::nullopt;
  if (g.value(u::valueOf(operand(n, Q::input))).dtype != DType::Float32) {
    return u::why(whyNot, "input not known to be float32"), std::nullopt;
  }
  if (!tensorQParams(n, whyNot)) return std::nullopt;
  return Match{id, id, 0};
}

Status rewriteQuantizeKernel(Graph& g, const Match& m, FusionRecord&) {
  Node& n = g.mutableNode(m.anchor);
  n.op = "verifuse::quantize";
  n.overload = "";
  return Status::ok();
}

enum class QuantizeBug { None, RoundHalfAway, MissingClamp, DroppedZeroPoint };

// torch's quantize_per_tensor against the kernel's loop, for every scaled value t = x * (1/s) (the
// same float32 product on both sides) and any [qmin, qmax] within the dtype: clamp(round(t) + z).
Obligation quantizeKernel(QuantizeBug bug) {
  ObligationBuilder ob("int8-quantize-kernel");
  Expr t = ob.var("t"), z = ob.var("zero_point", Sort::Int);
  Expr qmin = ob.var("qmin", Sort::Int), qmax = ob.var("qmax", Sort::Int);
  ob.assume(qmin >= Expr::integer(-128)).assume(qmax <= Expr::integer(255)).assume(qmin <= z).assume(z <= qmax);
  Expr source = sem::clamp(roundHalfEven(ob, t, "round(t)") + z, qmin, qmax);
  Expr n = bug == QuantizeBug::RoundHalfAway ? roundHalfAway(ob, t, "nearbyint(t)") : roundHalfEven(ob, t, "nearbyint(t)");
  Expr code = bug == QuantizeBug::DroppedZeroPoint ? n : n + z;
  ob.prove("q", source, bug == QuantizeBug::MissingClamp ? code : sem::clamp(code, qmin, qmax));
  return ob.build();
}

}  // namespace

RuleDeclaration int8QuantizeKernel() {
  return {
      .id = "int8-quantize-kernel",
      .summary = "quantize_per_tensor of a float32 tensor -> verifuse::quantize (one pass, same float32 steps)",
      .math = "clamp(round_half_even(x * (1/s)) + z, qmin, qmax) = clamp(nearbyint(x * (1/s)) + z, qmin, qmax)",
      .phase = Phase::kFusion,
      .anchors = {kQuantize},
      .match = matchQuantizeKernel,
      .rewrite = rewriteQuantizeKernel,
      .obligation = u::bindNoModel(quantizeKernel, QuantizeBug::None),
      .mutants = {{"round-half-away", "ties away from zero", u::bindNoModel(quantizeKernel, QuantizeBug::RoundHalfAway)},
                  {"missing-clamp", "no clamp to [qmin, qmax]", u::bindNoModel(quantizeKernel, QuantizeBug::MissingClamp)},
                  {"dropped-zero-point", "zero point not added", u::bindNoModel(quantizeKernel, QuantizeBug::DroppedZeroPoint)}},
  };
}

}  // namespace verifuse::rules::families
