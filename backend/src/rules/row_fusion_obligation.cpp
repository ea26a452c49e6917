// Row fusion's obligation: each table entry and the composed patterns (RMSNorm, layer norm,
// softmax with its max shift, rotary, bf16 rounding) on small symbolic rows, interpreting the
// program the table emits (row_fusion.h), against ATen's semantics. The rule is row_fusion.cpp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "rules/row_fusion.h"

namespace verifuse::rules::families::row_fusion {

namespace {

// ---- obligation: the table entries and the composed patterns, on small symbolic rows ------------

/// A small [R, C] tensor of expressions; a per-row value has C == 1, a per-column one R == 1.
struct Grid {
  int64_t r = 1, c = 1;
  std::vector<Expr> e;
  Expr at(int64_t i, int64_t j) const { return e[static_cast<size_t>((r == 1 ? 0 : i) * c + (c == 1 ? 0 : j))]; }
};

Grid vars(const std::string& name, int64_t r, int64_t c) {
  Grid g{r, c, {}};
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) g.e.push_back(Expr::var(name + "[" + std::to_string(i) + "," + std::to_string(j) + "]"));
  }
  return g;
}

template <typename F>
Grid map2(int64_t r, int64_t c, F f) {
  Grid g{r, c, {}};
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) g.e.push_back(f(i, j));
  }
  return g;
}

// Functions the obligations leave uninterpreted (besides sem's exp/erf/tanh/sigmoid/gelu): both
// sides use the same function for the same real function, so a proof holds for every
// interpretation, the real one included; a swapped function (tanh for erf) is refuted.
Expr ufLog(Expr x) { return Expr::apply("log", {std::move(x)}); }
Expr ufSqrt(Expr x) { return Expr::apply("sqrt_fn", {std::move(x)}); }
Expr ufRsqrt(Expr x) { return Expr::apply("rsqrt_fn", {std::move(x)}); }
Expr ufPow(Expr x, float e) { return Expr::apply("pow_fn", {std::move(x), sem::floatValue(e)}); }
Expr maxOf(const std::vector<Expr>& xs) {
  Expr m = xs[0];
  for (size_t k = 1; k < xs.size(); ++k) m = Expr::max(m, xs[k]);
  return m;
}

/// x ** e over the reals as torch.pow(tensor, scalar) means it (special exponents spelled out).
Expr powReal(Expr x, float e) {
  if (e == 2.f) return x * x;
  if (e == 3.f) return x * x * x;
  if (e == 1.f) return x;
  if (e == 0.5f) return ufSqrt(x);
  if (e == -0.5f) return ufRsqrt(x);
  if (e == -1.f) return 1 / x;
  return ufPow(x, e);
}

/// The row program over the reals, rows of \p cols elements: \p inputs[k] is input k (a grid that
/// broadcasts to [R, cols]; a bool input is given as its 0/1 value).
std::vector<Grid> interpret(const RowProgram& p, const std::vector<Grid>& inputs, int64_t rows, int64_t cols) {
  const auto& code = p.instructions();
  std::vector<Grid> v(code.size());
  std::vector<Grid> out(static_cast<size_t>(p.numOutputs()));
  for (size_t k = 0; k < code.size(); ++k) {
    const RowInstr& in = code[k];
    auto A = [&]() -> const Grid& { return v[static_cast<size_t>(in.a)]; };
    auto B = [&]() -> const Grid& { return v[static_cast<size_t>(in.b)]; };
    auto shapeAB = [&](int64_t* r, int64_t* c) {
      *r = std::max(A().r, B().r);
      *c = std::max(A().c, B().c);
    };
    auto unary = [&](auto f) { return map2(A().r, A().c, [&](int64_t i, int64_t j) { return f(A().at(i, j)); }); };
    auto binary = [&](auto f) {
      int64_t r, c;
      shapeAB(&r, &c);
      return map2(r, c, [&](int64_t i, int64_t j) { return f(A().at(i, j), B().at(i, j)); });
    };
    auto rowReduce = [&](auto f) {
      Grid g{A().r, 1, {}};
      for (int64_t i = 0; i < A().r; ++i) {
        std::vector<Expr> row;
        for (int64_t j = 0; j < cols; ++j) row.push_back(A().at(i, j));
        g.e.push_back(f(row));
      }
      return g;
    };
    switch (in.op) {
      case RowOp::kLoad: v[k] = inputs.at(static_cast<size_t>(in.index)); break;
      case RowOp::kConst: v[k] = Grid{1, 1, {sem::floatValue(in.f0)}}; break;
      case RowOp::kAdd: v[k] = binary([](Expr a, Expr b) { return a + b; }); break;
      case RowOp::kSub: v[k] = binary([](Expr a, Expr b) { return a - b; }); break;
      case RowOp::kMul: v[k] = binary([](Expr a, Expr b) { return a * b; }); break;
      case RowOp::kDiv: v[k] = binary([](Expr a, Expr b) { return a / b; }); break;
      case RowOp::kMax: v[k] = binary([](Expr a, Expr b) { return Expr::max(a, b); }); break;
      case RowOp::kMin: v[k] = binary([](Expr a, Expr b) { return Expr::min(a, b); }); break;
      case RowOp::kPow: v[k] = unary([&](Expr a) { return powReal(a, in.f0); }); break;
      case RowOp::kNeg: v[k] = unary([](Expr a) { return -a; }); break;
      case RowOp::kExp: v[k] = unary([](Expr a) { return sem::exp(a); }); break;
      case RowOp::kLog: v[k] = unary([](Expr a) { return ufLog(a); }); break;
      case RowOp::kSqrt: v[k] = unary([](Expr a) { return ufSqrt(a); }); break;
      case RowOp::kRsqrt: v[k] = unary([](Expr a) { return ufRsqrt(a); }); break;
      case RowOp::kReciprocal: v[k] = unary([](Expr a) { return 1 / a; }); break;
      case RowOp::kSquare: v[k] = unary([](Expr a) { return a * a; }); break;
      case RowOp::kRelu: v[k] = unary([](Expr a) { return sem::relu(a); }); break;
      case RowOp::kGeluErf: v[k] = unary([](Expr a) { return sem::geluErf(a); }); break;
      case RowOp::kGeluTanh: v[k] = unary([](Expr a) { return sem::geluTanh(a); }); break;
      case RowOp::kSilu: v[k] = unary([](Expr a) { return sem::silu(a); }); break;
      case RowOp::kSigmoid: v[k] = unary([](Expr a) { return sem::sigmoid(a); }); break;
      case RowOp::kTanh: v[k] = unary([](Expr a) { return sem::tanh(a); }); break;
      case RowOp::kErf: v[k] = unary([](Expr a) { return sem::erf(a); }); break;
      case RowOp::kClamp:
        v[k] = unary([&](Expr a) {
          if (std::isfinite(in.f0)) a = Expr::max(a, sem::floatValue(in.f0));
          if (std::isfinite(in.f1)) a = Expr::min(a, sem::floatValue(in.f1));
          return a;
        });
        break;
      case RowOp::kWhere: {
        const Grid& m = A();
        const Grid& c = v[static_cast<size_t>(in.c)];
        const int64_t r = std::max({m.r, B().r, c.r}), cc = std::max({m.c, B().c, c.c});
        v[k] = map2(r, cc, [&](int64_t i, int64_t j) { return Expr::ite(m.at(i, j) != 0, B().at(i, j), c.at(i, j)); });
        break;
      }
      case RowOp::kSum: v[k] = rowReduce([](const std::vector<Expr>& row) { return verify::sum(row); }); break;
      case RowOp::kMean:
        v[k] = rowReduce([&](const std::vector<Expr>& row) { return verify::sum(row) / Expr(static_cast<int>(cols)); });
        break;
      case RowOp::kRowMax: v[k] = rowReduce([](const std::vector<Expr>& row) { return maxOf(row); }); break;
      case RowOp::kRowMin:
        v[k] = rowReduce([](const std::vector<Expr>& row) {
          Expr m = row[0];
          for (size_t q = 1; q < row.size(); ++q) m = Expr::min(m, row[q]);
          return m;
        });
        break;
      case RowOp::kRotateHalf: {
        const int64_t h = cols / 2;
        v[k] = map2(A().r, cols, [&](int64_t i, int64_t j) { return j < h ? -A().at(i, j + h) : A().at(i, j - h); });
        break;
      }
      case RowOp::kStore: {
        const Grid& a = A();
        out[static_cast<size_t>(in.index)] = map2(rows, cols, [&](int64_t i, int64_t j) { return a.at(i, j); });
        break;
      }
      // Rounding to bf16: a function the proof leaves uninterpreted (only where it is applied matters).
      case RowOp::kCastBf16: v[k] = unary([](Expr a) { return Expr::apply("round_bf16", {a}); }); break;
      default: v[k] = unary([](Expr a) { return Expr::apply("unmodelled", {a}); }); break;
    }
  }
  return out;
}

/// Builds the program for the entries \p steps (each reading earlier step results or inputs by
/// index: negative = input -1-k, numbers as constants) and interprets it.
struct Step {
  OpSpec spec;
  std::vector<int> operands;  ///< >= 0: step k's result; < 0: input (-1 - k)
  std::vector<std::optional<double>> numbers;  ///< a number in place of an operand
};

Grid runSteps(const std::vector<Step>& steps, const std::vector<Grid>& inputs, int64_t rows, int64_t cols, Bug bug) {
  RowProgram p;
  std::vector<RowValue> loads, results;
  for (size_t k = 0; k < inputs.size(); ++k) loads.push_back(p.load(static_cast<int>(k)));
  for (const Step& s : steps) {
    std::vector<RowValue> in;
    for (size_t k = 0; k < s.operands.size(); ++k) {
      if (k < s.numbers.size() && s.numbers[k]) {
        in.push_back(p.constant(static_cast<float>(*s.numbers[k])));
      } else {
        const int o = s.operands[k];
        in.push_back(o >= 0 ? results[static_cast<size_t>(o)] : loads[static_cast<size_t>(-1 - o)]);
      }
    }
    results.push_back(emitMember(p, s.spec, in, bug));
  }
  p.store(0, results.back());
  return interpret(p, inputs, rows, cols).at(0);
}

void proveGrid(ObligationBuilder& ob, const std::string& label, const Grid& src, const Grid& tgt, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      ob.prove(label + "[" + std::to_string(i) + "," + std::to_string(j) + "]", src.at(i, j), tgt.at(i, j));
    }
  }
}

OpSpec spec(Kind k) {
  OpSpec s;
  s.kind = k;
  return s;
}

/// ATen's semantics of one elementwise entry, for operands given as grids.
Expr atenUnary(Kind k, Expr x, const OpSpec& s) {
  switch (k) {
    case Kind::Neg: return -x;
    case Kind::Exp: return sem::exp(x);
    case Kind::Log: return ufLog(x);
    case Kind::Sqrt: return ufSqrt(x);
    case Kind::Rsqrt: return ufRsqrt(x);
    case Kind::Reciprocal: return 1 / x;
    case Kind::Pow: return powReal(x, static_cast<float>(s.exponent));
    case Kind::Relu: return sem::relu(x);
    case Kind::GeluErf: return sem::geluErf(x);
    case Kind::GeluTanh: return sem::geluTanh(x);
    case Kind::Silu: return sem::silu(x);
    case Kind::Sigmoid: return sem::sigmoid(x);
    case Kind::Tanh: return sem::tanh(x);
    case Kind::Erf: return sem::erf(x);
    case Kind::Identity: return x;
    case Kind::Clamp: {
      Expr y = x;
      if (std::isfinite(s.lo)) y = Expr::max(y, sem::floatValue(static_cast<float>(s.lo)));
      if (std::isfinite(s.hi)) y = Expr::min(y, sem::floatValue(static_cast<float>(s.hi)));
      return y;
    }
    default: return x;
  }
}

/// ATen reductions over \p dim (0 or 1) of an [R, C] grid, keepdim.
Grid atenReduce(Kind k, const Grid& x, int dim) {
  const int64_t n = dim == 1 ? x.c : x.r;
  const int64_t outer = dim == 1 ? x.r : x.c;
  std::vector<Expr> red;
  for (int64_t o = 0; o < outer; ++o) {
    std::vector<Expr> xs;
    for (int64_t q = 0; q < n; ++q) xs.push_back(dim == 1 ? x.at(o, q) : x.at(q, o));
    red.push_back(k == Kind::Sum ? verify::sum(xs) : k == Kind::Mean ? verify::sum(xs) / Expr(static_cast<int>(n)) : maxOf(xs));
  }
  return dim == 1 ? Grid{x.r, 1, red} : Grid{1, x.c, red};
}

/// The ground instances of exp's axiom exp(a - m) * exp(m) = exp(a), exp(m) > 0 that connect the
/// engine's max-shifted softmax with sem::softmax's exp(x)/Σ exp(x); m is the row max the program
/// computes (same expression as the interpreter's).
void softmaxShiftFacts(ObligationBuilder& ob, const Grid& s, int64_t cols) {
  for (int64_t i = 0; i < s.r; ++i) {
    std::vector<Expr> row;
    for (int64_t j = 0; j < cols; ++j) row.push_back(s.at(i, j));
    Expr m = maxOf(row);
    ob.assume(sem::exp(m) > 0);
    for (const Expr& a : row) {
      ob.assume(sem::exp(a - m) * sem::exp(m) == sem::exp(a));
      ob.assume(sem::exp(a) > 0);
    }
  }
}

Grid softmaxRef(ObligationBuilder& ob, const Grid& s, int dim) {
  sem::ElementTensor t = sem::ElementTensor::fromFunction({s.r, s.c}, [s](const sem::Index& i) { return s.at(i[0], i[1]); });
  sem::ElementTensor y = sem::softmax(ob, t, dim);
  return map2(s.r, s.c, [&](int64_t i, int64_t j) { return y.at({i, j}); });
}

/// Which obligation pieces a case builds: all of them for the rule, one for a mutant.

}  // namespace

Obligation rowFusionObligation(Bug bug, Piece piece) {
  ObligationBuilder ob("row-fusion");
  const int64_t R = 2, C = 3;
  const bool all = piece == Piece::All;
  Grid x = vars("x", R, C), y = vars("y", R, C);
  Grid rowv = vars("r", R, 1), colv = vars("w", 1, C);
  if (all || piece == Piece::Entries || piece == Piece::Gelu) {
    // Each elementwise entry, on [R, C] inputs.
    std::vector<Kind> unaries = {Kind::Neg, Kind::Exp, Kind::Log, Kind::Sqrt, Kind::Rsqrt, Kind::Reciprocal, Kind::Relu,
                                 Kind::GeluErf, Kind::GeluTanh, Kind::Silu, Kind::Sigmoid, Kind::Tanh, Kind::Erf,
                                 Kind::Identity};
    if (piece == Piece::Gelu) unaries = {Kind::GeluErf};
    for (Kind k : unaries) {
      OpSpec s = spec(k);
      Grid src = map2(R, C, [&](int64_t i, int64_t j) { return atenUnary(k, x.at(i, j), s); });
      proveGrid(ob, "entry" + std::to_string(static_cast<int>(k)), src, runSteps({{s, {-1}, {}}}, {x}, R, C, bug), R, C);
    }
  }
  if (all || piece == Piece::Entries) {
    for (float e : {2.f, 3.f, 1.f, 0.5f, -0.5f, -1.f, 1.5f}) {
      OpSpec s = spec(Kind::Pow);
      s.exponent = e;
      Grid src = map2(R, C, [&](int64_t i, int64_t j) { return atenUnary(Kind::Pow, x.at(i, j), s); });
      proveGrid(ob, "pow(" + std::to_string(e) + ")", src, runSteps({{s, {-1}, {}}}, {x}, R, C, bug), R, C);
    }
    for (auto [lo, hi] : std::vector<std::pair<double, double>>{{-1.5, 2.0}, {0.0, INFINITY}, {-INFINITY, 6.0}}) {
      OpSpec s = spec(Kind::Clamp);
      s.lo = lo;
      s.hi = hi;
      Grid src = map2(R, C, [&](int64_t i, int64_t j) { return atenUnary(Kind::Clamp, x.at(i, j), s); });
      proveGrid(ob, "clamp", src, runSteps({{s, {-1}, {}}}, {x}, R, C, bug), R, C);
    }
    // Binary entries with every broadcast the engine loads: [R,C] with [R,C], [R,1], [1,C].
    Expr alpha = sem::floatValue(2.5f);
    for (const Grid* b : {&y, &rowv, &colv}) {
      for (Kind k : {Kind::Add, Kind::Sub, Kind::Rsub, Kind::Mul, Kind::Div}) {
        OpSpec s = spec(k);
        const bool withAlpha = k == Kind::Add || k == Kind::Sub || k == Kind::Rsub;
        if (withAlpha) s.alpha = 2.5;
        Expr al = withAlpha ? alpha : Expr(1);
        Grid src = map2(R, C, [&](int64_t i, int64_t j) {
          Expr a = x.at(i, j), bb = b->at(i, j);
          switch (k) {
            case Kind::Add: return a + al * bb;
            case Kind::Sub: return a - al * bb;
            case Kind::Rsub: return bb - al * a;
            case Kind::Mul: return a * bb;
            default: return a / bb;
          }
        });
        proveGrid(ob, "binary" + std::to_string(static_cast<int>(k)), src, runSteps({{s, {-1, -2}, {}}}, {x, *b}, R, C, bug), R, C);
      }
    }
    // A number operand (add.Scalar / mul by a literal): the literal's float32 value.
    {
      Grid src = map2(R, C, [&](int64_t i, int64_t j) { return x.at(i, j) + sem::floatValue(0.125f); });
      proveGrid(ob, "add-number", src, runSteps({{spec(Kind::Add), {-1, 0}, {std::nullopt, 0.125}}}, {x}, R, C, bug), R, C);
    }
    // where(mask, a, b), the mask a bool input loaded as 0/1.
    {
      Grid mb{R, C, {}}, m01{R, C, {}};
      for (int64_t i = 0; i < R; ++i) {
        for (int64_t j = 0; j < C; ++j) {
          Expr v = Expr::var("cond[" + std::to_string(i) + "," + std::to_string(j) + "]", verify::Sort::Bool);
          mb.e.push_back(v);
          m01.e.push_back(Expr::ite(v, 1, 0));
        }
      }
      Grid src = map2(R, C, [&](int64_t i, int64_t j) { return Expr::ite(mb.at(i, j), x.at(i, j), rowv.at(i, j)); });
      proveGrid(ob, "where", src, runSteps({{spec(Kind::Where), {-1, -2, -3}, {}}}, {m01, x, rowv}, R, C, bug), R, C);
    }
    for (Kind k : {Kind::Sum, Kind::Amax}) {
      Grid src = atenReduce(k, x, 1);
      proveGrid(ob, k == Kind::Sum ? "sum" : "amax", src, runSteps({{spec(k), {-1}, {}}}, {x}, R, C, bug), R, 1);
    }
  }
  if (all || piece == Piece::Reduction) {
    // mean over the last dim (the mutant: a mean over dim 0 taken for it).
    const int dim = bug == Bug::ReductionWrongAxis ? 0 : 1;
    Grid src = atenReduce(Kind::Mean, x, dim);
    Grid tgt = runSteps({{spec(Kind::Mean), {-1}, {}}}, {x}, R, C, bug);
    if (dim == 0) proveGrid(ob, "mean", Grid{R, 1, {src.at(0, 0), src.at(0, 1)}}, tgt, R, 1);
    else proveGrid(ob, "mean", src, tgt, R, 1);
  }
  if (all || piece == Piece::RmsNorm) {
    // HF Llama/T5 RMSNorm: w * (x * rsqrt(mean(x^2, -1, keepdim) + eps)), eps > 0.
    Expr eps = ob.var("eps");
    ob.assume(eps > 0);
    Grid ms = atenReduce(Kind::Mean, map2(R, C, [&](int64_t i, int64_t j) { return x.at(i, j) * x.at(i, j); }), 1);
    Grid src = map2(R, C, [&](int64_t i, int64_t j) { return colv.at(i, j) * (x.at(i, j) * ufRsqrt(ms.at(i, 0) + eps)); });
    OpSpec pw = spec(Kind::Pow);
    pw.exponent = 2;
    std::vector<Step> steps = {{pw, {-1}, {}}, {spec(Kind::Mean), {0}, {}}, {spec(Kind::Add), {1, -3}, {}},
                               {spec(Kind::Rsqrt), {2}, {}}, {spec(Kind::Mul), {-1, 3}, {}}, {spec(Kind::Mul), {-2, 4}, {}}};
    if (bug == Bug::EpsOutsideRsqrt) {
      steps = {{pw, {-1}, {}}, {spec(Kind::Mean), {0}, {}}, {spec(Kind::Rsqrt), {1}, {}},
               {spec(Kind::Add), {2, -3}, {}}, {spec(Kind::Mul), {-1, 3}, {}}, {spec(Kind::Mul), {-2, 4}, {}}};
    }
    Grid epsGrid{1, 1, {eps}};
    proveGrid(ob, "rms_norm", src, runSteps(steps, {x, colv, epsGrid}, R, C, bug), R, C);
  }
  if (all || piece == Piece::LayerNorm) {
    // aten::native_layer_norm(x, [C], w, b, eps)[0] = (x - mean) * rsqrt(var + eps) * w + b, var biased.
    const float epsF = 1e-5f;
    Expr eps = sem::floatValue(epsF);
    Grid mean = atenReduce(Kind::Mean, x, 1);
    Grid var = map2(R, 1, [&](int64_t i, int64_t) {
      std::vector<Expr> sq;
      for (int64_t j = 0; j < C; ++j) sq.push_back((x.at(i, j) - mean.at(i, 0)) * (x.at(i, j) - mean.at(i, 0)));
      return verify::sum(sq) / Expr(static_cast<int>(C));
    });
    Grid bias = vars("b", 1, C);
    Grid src = map2(R, C, [&](int64_t i, int64_t j) {
      return (x.at(i, j) - mean.at(i, 0)) * ufRsqrt(var.at(i, 0) + eps) * colv.at(i, j) + bias.at(i, j);
    });
    OpSpec ln = spec(Kind::LayerNorm);
    ln.eps = epsF;
    ln.weight = ln.bias = true;
    proveGrid(ob, "layer_norm", src, runSteps({{ln, {-1, -2, -3}, {}}}, {x, colv, bias}, R, C, bug), R, C);
  }
  if (all || piece == Piece::Softmax) {
    // softmax(x * c + mask, -1), mask [R, C] additive, c a literal; also a bare softmax and the
    // mutants' axis.
    const float cF = 0.125f;
    Expr cc = sem::floatValue(cF);
    Grid mask = vars("mask", R, C);
    Grid s = map2(R, C, [&](int64_t i, int64_t j) { return x.at(i, j) * cc + mask.at(i, j); });
    std::vector<Step> steps = {{spec(Kind::Mul), {-1, 0}, {std::nullopt, cF}}, {spec(Kind::Add), {0, -2}, {}},
                               {spec(Kind::Softmax), {1}, {}}};
    Grid tgt;
    if (bug == Bug::MaskAfterSoftmax) {
      steps = {{spec(Kind::Mul), {-1, 0}, {std::nullopt, cF}}, {spec(Kind::Softmax), {0}, {}}, {spec(Kind::Add), {1, -2}, {}}};
      Grid scaled = map2(R, C, [&](int64_t i, int64_t j) { return x.at(i, j) * cc; });
      softmaxShiftFacts(ob, scaled, C);
    } else {
      softmaxShiftFacts(ob, s, C);
    }
    tgt = runSteps(steps, {x, mask}, R, C, bug);
    proveGrid(ob, "softmax", softmaxRef(ob, s, bug == Bug::SoftmaxWrongAxis ? 0 : 1), tgt, R, C);
  }
  if (all || piece == Piece::Rotary) {
    // HF rotary: q * cos + cat(-q[..., C/2:], q[..., :C/2]) * sin, C = 4; cos/sin per column.
    const int64_t C4 = 4, h = 2;
    Grid q = vars("q", R, C4), cs = vars("cos", 1, C4), sn = vars("sin", 1, C4);
    const bool swapped = bug == Bug::RotaryHalvesSwapped;  // the guard took the halves the other way
    auto sliceCat = [&](int64_t i, int64_t j) {
      // cat([neg(slice(q, a, b)), slice(q, c, d)], -1) as ATen's slice and cat define it.
      const int64_t first = swapped ? 0 : h, second = swapped ? h : 0;
      return j < h ? -q.at(i, first + j) : q.at(i, second + (j - h));
    };
    Grid src = map2(R, C4, [&](int64_t i, int64_t j) { return q.at(i, j) * cs.at(i, j) + sliceCat(i, j) * sn.at(i, j); });
    std::vector<Step> steps = {{spec(Kind::Mul), {-1, -2}, {}}, {spec(Kind::RotateHalf), {-1}, {}},
                               {spec(Kind::Mul), {1, -3}, {}}, {spec(Kind::Add), {0, 2}, {}}};
    proveGrid(ob, "rotary", src, runSteps(steps, {q, cs, sn}, R, C4, bug), R, C4);
  }
  if (all || piece == Piece::Bf16) {
    // A bf16 model's chain as eager runs it: each bf16 op computes in float32 from its (exactly
    // widened) operands and rounds its result to bf16 once; float32 islands stay float32.
    // add and gelu in bf16, _to_copy to float32 (widening: identity), a float32 mul, _to_copy back
    // to bf16 (a rounding). round_bf16 is uninterpreted: only where roundings happen is proved.
    auto round = [](Expr a) { return Expr::apply("round_bf16", {a}); };
    auto bf16 = [](Kind k) {
      OpSpec s = spec(k);
      s.bf16Result = true;
      return s;
    };
    Grid src = map2(R, C, [&](int64_t i, int64_t j) {
      Expr h = round(x.at(i, j) + y.at(i, j));
      return round(round(sem::geluErf(h)) * y.at(i, j));
    });
    std::vector<Step> steps = {{bf16(Kind::Add), {-1, -2}, {}}, {bf16(Kind::GeluErf), {0}, {}},
                               {spec(Kind::Identity), {1}, {}}, {spec(Kind::Mul), {2, -2}, {}},
                               {bf16(Kind::Identity), {3}, {}}};
    proveGrid(ob, "bf16-chain", src, runSteps(steps, {x, y}, R, C, bug), R, C);
  }
  return ob.build();
}

}  // namespace verifuse::rules::families::row_fusion
