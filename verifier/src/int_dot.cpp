// Kernel arithmetic proofs (int_dot.h): the four schematic lemmas of a declared int8 dot-product
// variant and their mutants, and the per-instance check of the lemmas' side conditions on the real
// weights. Z3-free: the lemmas are ordinary obligations and go through prove().
//
// Why four lemmas and not one: a single obligation for "one reduction group, from codes to the
// running sum" is nonlinear in symbolic codes, weights, range and zero point, and Z3 did not decide
// it within 20 s for groupSize 4 (measured with the Python API, z3 4.x); split into products ->
// group -> accumulate -> compensate, where each later lemma assumes the earlier lemmas'
// conclusions, each is decided in well under a second.
#include "verifuse/verify/int_dot.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "verifuse/verify/proof_cache.h"

namespace verifuse::verify {

namespace {

using kernels::IntDotArithmetic;
using Source = IntDotArithmetic::Source;

constexpr int kMaxGroupSize = 64;
constexpr int64_t kWeightMin = -128;
constexpr int64_t kWeightMax = 127;
// Reductions longer than this are refused (Unsupported): it keeps every per-channel sum of
// products within int64 with room to spare (|product| <= 383 * 128 < 2^16).
constexpr int64_t kMaxReduction = int64_t{1} << 32;

int64_t signedMax(int bits) { return bits >= 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1; }
int64_t signedMin(int bits) { return bits >= 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1)); }

/// Two's complement wrap of \p v to \p bits (what a non-saturating step stores on overflow).
int64_t wrapTo(int64_t v, int bits) {
  if (bits >= 64) return v;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t u = static_cast<uint64_t>(v) & mask;
  if (u & (uint64_t{1} << (bits - 1))) u |= ~mask;  // sign-extend
  return static_cast<int64_t>(u);
}

const char* sourceSuffix(Source s) {
  switch (s) {
    case Source::kCodes: return "codes";
    case Source::kCodesPlus128: return "codes-plus-128";
    case Source::kCodesMinusZeroPoint: return "codes-minus-zero-point";
  }
  return "codes";
}

/// The codes the lemmas quantify over: 8-bit codes, u8 or s8; the +128 shift is defined for s8 only.
struct CodeBounds {
  int64_t lo, hi;
};
CodeBounds codeBounds(Source s) { return s == Source::kCodesPlus128 ? CodeBounds{-128, 127} : CodeBounds{-128, 255}; }

/// Largest |e(x)| over codeBounds: 255 for the codes and the shifted codes, 383 for x - zx.
int64_t maxAbsEncoded(Source s) { return s == Source::kCodesMinusZeroPoint ? 383 : 255; }

// ---------------------------------------------------------------------------------------------
// The arithmetic as modelled: the declaration, or a mutant of it.

struct Model {
  std::string variant;
  Source source = Source::kCodes;
  int groupSize = 1;
  int groupBits = 32;
  bool groupSaturates = false;
  int accumulatorBits = 32;
  bool groupCondition = false;  ///< the side condition is part of the group lemma
  int64_t groupUpper = 0;       ///< what the side condition compares the group maximum with
  int64_t groupLower = 0;
  bool accumulatorCondition = true;
  bool readU8AsS8 = false;  ///< mutant: the widening kernel reads u8 codes as s8, no zero point
  enum class Compensation { kDeclared, kNone, kZeroPointOnly };
  Compensation compensation = Compensation::kDeclared;
  bool boundIgnoresWeightSign = false;  ///< mutant: f(w) = e(hi) w, g(w) = e(lo) w
};

Model declaredModel(const IntDotArithmetic& a) {
  Model m;
  m.variant = a.variant;
  m.source = a.source;
  m.groupSize = a.groupSize;
  m.groupBits = a.groupBits;
  m.groupSaturates = a.groupSaturates;
  m.accumulatorBits = a.accumulatorBits;
  m.groupCondition = intDotGroupHasSideCondition(a);
  m.groupUpper = signedMax(a.groupBits);
  m.groupLower = signedMin(a.groupBits);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Building the lemmas. Every variable is an Int: Expr(3) would be a Real constant, so integers go
// through I().

Expr I(int64_t v) { return Expr::integer(v); }
Expr intVar(const std::string& name) { return Expr::var(name, Sort::Int); }
Expr isum(const std::vector<Expr>& terms) {
  if (terms.empty()) return I(0);
  Expr acc = terms.front();
  for (size_t i = 1; i < terms.size(); ++i) acc = acc + terms[i];
  return acc;
}
Expr inRange(const Expr& v, int bits) { return I(signedMin(bits)) <= v && v <= I(signedMax(bits)); }

struct Range {
  Expr lo, hi, zx;
};

Range assumeRange(ObligationBuilder& ob, const Model& m) {
  Range r{intVar("src.lo"), intVar("src.hi"), intVar("src.zero_point")};
  const CodeBounds b = codeBounds(m.source);
  ob.assume(I(b.lo) <= r.lo).assume(r.lo <= r.zx).assume(r.zx <= r.hi).assume(r.hi <= I(b.hi));
  return r;
}

/// e(x): the value that enters the products.
Expr encode(const Model& m, const Range& r, const Expr& x) {
  if (m.readU8AsS8) return Expr::ite(x >= I(128), x - I(256), x);
  switch (m.source) {
    case Source::kCodes: return x;
    case Source::kCodesPlus128: return x + I(128);
    case Source::kCodesMinusZeroPoint: return x - r.zx;
  }
  return x;
}

/// c in acc = sum (x - zx) w + c * sum w: what the products carry besides the exact result.
Expr carriedCompensation(const Model& m, const Range& r) {
  if (m.readU8AsS8) return I(0);
  switch (m.source) {
    case Source::kCodes: return r.zx;
    case Source::kCodesPlus128: return r.zx + I(128);
    case Source::kCodesMinusZeroPoint: return I(0);
  }
  return I(0);
}

/// The constant the kernel subtracts (times sum w) after the reduction.
Expr subtractedCompensation(const Model& m, const Range& r) {
  switch (m.compensation) {
    case Model::Compensation::kDeclared: return carriedCompensation(m, r);
    case Model::Compensation::kNone: return I(0);
    case Model::Compensation::kZeroPointOnly: return r.zx;
  }
  return carriedCompensation(m, r);
}

// Per-weight bounds over the encoded range [e(lo), e(hi)] (e is increasing) and over [lo-zx, hi-zx].
Expr fBound(const Model& m, const Range& r, const Expr& w) {
  Expr top = encode(m, r, r.hi) * w;
  return m.boundIgnoresWeightSign ? top : Expr::max(top, encode(m, r, r.lo) * w);
}
Expr gBound(const Model& m, const Range& r, const Expr& w) {
  Expr bottom = encode(m, r, r.lo) * w;
  return m.boundIgnoresWeightSign ? bottom : Expr::min(encode(m, r, r.hi) * w, bottom);
}
Expr frBound(const Range& r, const Expr& w) { return Expr::max((r.hi - r.zx) * w, (r.lo - r.zx) * w); }
Expr grBound(const Range& r, const Expr& w) { return Expr::min((r.hi - r.zx) * w, (r.lo - r.zx) * w); }

struct Group {
  std::vector<Expr> x, w;
};

Group assumeGroup(ObligationBuilder& ob, const Range& r, int n) {
  Group g;
  for (int i = 0; i < n; ++i) {
    Expr x = intVar("x[" + std::to_string(i) + "]");
    Expr w = intVar("w[" + std::to_string(i) + "]");
    ob.assume(r.lo <= x).assume(x <= r.hi).assume(I(kWeightMin) <= w).assume(w <= I(kWeightMax));
    g.x.push_back(x);
    g.w.push_back(w);
  }
  return g;
}

Expr encodedSum(const Model& m, const Range& r, const Group& g) {
  std::vector<Expr> terms;
  for (size_t i = 0; i < g.x.size(); ++i) terms.push_back(encode(m, r, g.x[i]) * g.w[i]);
  return isum(terms);
}

/// A value stored in \p bits that equals \p exact when exact fits and is unspecified otherwise:
/// the declaration does not say whether a non-saturating step wraps, so on overflow the stored
/// value is a fresh variable (any value of the type). Written as ite(fits, exact, fresh) rather
/// than as a fresh value constrained by "fits => v = exact": the constraint put the nonlinear
/// exact sum into the vacuity query, which took Z3 2.2 s for vpdpbusd's group instead of 0.01 s.
Expr unspecifiedOnOverflow(ObligationBuilder& ob, const std::string& name, const Expr& exact, int bits) {
  Expr onOverflow = ob.fresh(
      name + ".on_overflow", [&](Expr v) { return std::vector<Expr>{inRange(v, bits)}; }, Sort::Int);
  return Expr::ite(inRange(exact, bits), exact, onOverflow);
}

Expr groupStep(ObligationBuilder& ob, const Model& m, const Expr& exact) {
  if (m.groupSaturates) {
    return Expr::min(Expr::max(exact, I(signedMin(m.groupBits))), I(signedMax(m.groupBits)));
  }
  return unspecifiedOnOverflow(ob, "group.step", exact, m.groupBits);
}

std::string lemmaName(const Model& m, IntDotStep step) { return "int-dot-" + m.variant + "-" + intDotStepName(step); }

Obligation productsLemma(const Model& m) {
  ObligationBuilder ob(lemmaName(m, IntDotStep::kProducts));
  Range r = assumeRange(ob, m);
  Group g = assumeGroup(ob, r, 1);
  const Expr& x = g.x[0];
  const Expr& w = g.w[0];
  Expr p = encode(m, r, x) * w;
  Expr q = (x - r.zx) * w;
  // Written as min/max identities, so a counterexample shows the product and the bound.
  ob.prove("e(x)*w <= f(w)", p, Expr::min(p, fBound(m, r, w)));
  ob.prove("e(x)*w >= g(w)", p, Expr::max(p, gBound(m, r, w)));
  ob.prove("(x-zx)*w <= fr(w)", q, Expr::min(q, frBound(r, w)));
  ob.prove("(x-zx)*w >= gr(w)", q, Expr::max(q, grBound(r, w)));
  return ob.build();
}

std::string groupGoal(const Model& m) {
  return "group (s" + std::to_string(m.groupBits) + (m.groupSaturates ? ", saturating)" : ", unspecified on overflow)");
}

Obligation groupLemma(const Model& m) {
  ObligationBuilder ob(lemmaName(m, IntDotStep::kGroup));
  Range r = assumeRange(ob, m);
  Group g = assumeGroup(ob, r, m.groupSize);
  const Expr n = I(m.groupSize);
  if (m.groupCondition) {
    // Pairing-independent side condition: tau and E (sigma and D) come from the whole output
    // channel; the group's own excesses over tau are a subset of the channel's (README).
    Expr tau = intVar("top.tau"), excess = intVar("top.excess");
    Expr sigma = intVar("bottom.sigma"), deficit = intVar("bottom.excess");
    std::vector<Expr> over, under;
    for (const Expr& w : g.w) {
      over.push_back(Expr::max(fBound(m, r, w) - tau, I(0)));
      under.push_back(Expr::min(gBound(m, r, w) - sigma, I(0)));
    }
    ob.assume(tau >= I(0)).assume(isum(over) <= excess).assume(n * tau + excess <= I(m.groupUpper));
    ob.assume(sigma <= I(0)).assume(isum(under) >= deficit).assume(n * sigma + deficit >= I(m.groupLower));
  }
  Expr exact = encodedSum(m, r, g);
  ob.prove(groupGoal(m), exact, groupStep(ob, m, exact));
  return ob.build();
}

Obligation accumulateLemma(const Model& m) {
  ObligationBuilder ob(lemmaName(m, IntDotStep::kAccumulate));
  Range r = assumeRange(ob, m);
  Group g = assumeGroup(ob, r, m.groupSize);
  const int bits = m.accumulatorBits;
  // The products lemma's conclusions for each product of the group.
  std::vector<Expr> dx, maxF, minG, frs, grs;
  for (size_t i = 0; i < g.x.size(); ++i) {
    const Expr& w = g.w[i];
    Expr p = encode(m, r, g.x[i]) * w;
    Expr q = (g.x[i] - r.zx) * w;
    ob.assume(gBound(m, r, w) <= p).assume(p <= fBound(m, r, w));
    ob.assume(grBound(r, w) <= q).assume(q <= frBound(r, w));
    dx.push_back(q);
    maxF.push_back(Expr::max(fBound(m, r, w), I(0)));
    minG.push_back(Expr::min(gBound(m, r, w), I(0)));
    frs.push_back(frBound(r, w));
    grs.push_back(grBound(r, w));
  }
  // The group lemma's conclusion: the group step's result is the exact sum.
  Expr groupResult = intVar("group.result");
  ob.assume(groupResult == encodedSum(m, r, g));
  // The invariant before the step.
  Expr acc = intVar("acc"), exact = intVar("exact"), wsum = intVar("wsum");
  Expr upper = intVar("acc.upper"), lower = intVar("acc.lower");
  Expr exactUpper = intVar("exact.upper"), exactLower = intVar("exact.lower");
  const Expr c = carriedCompensation(m, r);
  ob.assume(acc == exact + c * wsum).assume(inRange(acc, bits));
  ob.assume(lower <= acc).assume(acc <= upper).assume(exactLower <= exact).assume(exact <= exactUpper);
  Expr upper2 = upper + isum(maxF), lower2 = lower + isum(minG);
  if (m.accumulatorCondition) ob.assume(upper2 <= I(signedMax(bits))).assume(lower2 >= I(signedMin(bits)));
  Expr next = unspecifiedOnOverflow(ob, "acc.next", acc + groupResult, bits);
  Expr exact2 = exact + isum(dx), wsum2 = wsum + isum(g.w);
  Expr exactUpper2 = exactUpper + isum(frs), exactLower2 = exactLower + isum(grs);
  const std::string acc_s = "accumulator (s" + std::to_string(bits) + ")";
  ob.prove(acc_s, acc + groupResult, next);
  ob.prove("invariant acc = sum (x-zx)w + c*sum w", exact2 + c * wsum2, next);
  ob.prove("accumulator bounds", lower2 <= next && next <= upper2, Expr::boolean(true));
  ob.prove("exact-result bounds", exactLower2 <= exact2 && exact2 <= exactUpper2, Expr::boolean(true));
  return ob.build();
}

Obligation compensateLemma(const Model& m) {
  ObligationBuilder ob(lemmaName(m, IntDotStep::kCompensate));
  Range r = assumeRange(ob, m);
  const int bits = m.accumulatorBits;
  Expr acc = intVar("acc"), exact = intVar("exact"), wsum = intVar("wsum");
  Expr exactUpper = intVar("exact.upper"), exactLower = intVar("exact.lower");
  ob.assume(acc == exact + carriedCompensation(m, r) * wsum).assume(inRange(acc, bits));
  ob.assume(exactLower <= exact).assume(exact <= exactUpper);
  ob.assume(I(signedMin(bits)) <= exactLower).assume(exactUpper <= I(signedMax(bits)));
  Expr comp = subtractedCompensation(m, r) * wsum;
  ob.assume(inRange(comp, bits));
  Expr out = unspecifiedOnOverflow(ob, "out", acc - comp, bits);
  ob.prove("result (s" + std::to_string(bits) + ")", exact, out);
  return ob.build();
}

Obligation lemmaOf(const Model& m, IntDotStep step) {
  switch (step) {
    case IntDotStep::kProducts: return productsLemma(m);
    case IntDotStep::kGroup: return groupLemma(m);
    case IntDotStep::kAccumulate: return accumulateLemma(m);
    case IntDotStep::kCompensate: return compensateLemma(m);
  }
  return Obligation{};
}

// ---------------------------------------------------------------------------------------------
// Rule proofs and mutants.

std::string kebab(const std::string& name) {
  std::string out;
  for (char ch : name) {
    char c = (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch - 'A' + 'a') : ch;
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string sourceText(Source s) {
  switch (s) {
    case Source::kCodes: return "e(x) = x, c = zx";
    case Source::kCodesPlus128: return "e(x) = x + 128, c = zx + 128";
    case Source::kCodesMinusZeroPoint: return "e(x) = x - zx, c = 0";
  }
  return "";
}

std::string mathOf(const Model& m, IntDotStep step) {
  const std::string n = std::to_string(m.groupSize), B = std::to_string(m.groupBits);
  const std::string A = std::to_string(m.accumulatorBits);
  const std::string head = m.variant + " (" + sourceText(m.source) + ", " + n + " products into s" + B +
                           (m.groupSaturates ? " saturating" : "") + ", s" + A + " accumulator): ";
  switch (step) {
    case IntDotStep::kProducts:
      return head + "lo <= x <= hi, -128 <= w <= 127 => min(e(hi)w, e(lo)w) <= e(x)w <= max(e(hi)w, e(lo)w) and "
                    "min((hi-zx)w, (lo-zx)w) <= (x-zx)w <= max((hi-zx)w, (lo-zx)w)";
    case IntDotStep::kGroup:
      return head + "step_s" + B + "(sum_{i<" + n + "} e(x_i)w_i) = sum_i e(x_i)w_i" +
             (m.groupCondition ? " when tau >= 0, sum_i max(f(w_i)-tau, 0) <= E, " + n + "*tau + E <= 2^" +
                                     std::to_string(m.groupBits - 1) + "-1 and sigma <= 0, sum_i min(g(w_i)-sigma, 0) "
                                     ">= D, " + n + "*sigma + D >= -2^" + std::to_string(m.groupBits - 1) +
                                     " (tau, E, sigma, D from the whole output channel: pairing-independent)"
                               : " for all codes and weights (no side condition)");
    case IntDotStep::kAccumulate:
      return head + "acc = T + c*W, L <= acc <= U, TL <= T <= TU, r = sum_i e(x_i)w_i, U + sum_i max(f(w_i),0) <= "
                    "2^" + std::to_string(m.accumulatorBits - 1) + "-1, L + sum_i min(g(w_i),0) >= -2^" +
             std::to_string(m.accumulatorBits - 1) + " => acc' = acc + r and the invariant holds after the step";
    case IntDotStep::kCompensate:
      return head + "acc = T + c*W, T and c*W within s" + A + " => sub_s" + A + "(acc, c*W) = T";
  }
  return head;
}

RuleProof ruleProofOf(const Model& declared, IntDotStep step, const std::string& id) {
  RuleProof p;
  p.ruleId = id;
  p.math = mathOf(declared, step);
  p.usesDot = false;
  p.build = [declared, step](const sem::DotModel&) { return lemmaOf(declared, step); };
  auto mutant = [&](std::string name, std::string description, Model m) {
    p.mutants.push_back({std::move(name), std::move(description),
                         [m, step](const sem::DotModel&) { return lemmaOf(m, step); }});
  };
  Model m = declared;
  switch (step) {
    case IntDotStep::kProducts:
      m.boundIgnoresWeightSign = true;
      mutant("bound-ignores-weight-sign", "f(w) = e(hi)*w and g(w) = e(lo)*w: wrong for negative weights", m);
      break;
    case IntDotStep::kGroup:
      if (declared.groupCondition) {
        m.groupCondition = false;
        mutant("side-condition-dropped", "the group step without its per-channel side condition", m);
        m = declared;
        m.groupUpper = declared.groupBits >= 64 ? signedMax(64) : (int64_t{1} << declared.groupBits) - 1;
        mutant("side-condition-unsigned-bound",
               "the side condition compares with 2^B - 1 (2^16 - 1 for s16) instead of 2^(B-1) - 1", m);
      } else {
        // A wide declaration (vpdpbusd) modelled as vpmaddubsw's narrow saturating step, on the
        // full code range and without a side condition.
        const int bits = declared.groupSize * maxAbsEncoded(declared.source) * 128 > signedMax(16) ? 16 : 8;
        m.groupSaturates = true;
        m.groupBits = bits;
        m.groupCondition = false;
        mutant("group-as-saturating-s" + std::to_string(bits),
               "the group step modelled as a saturating s" + std::to_string(bits) + " step on the full code range", m);
      }
      break;
    case IntDotStep::kAccumulate:
      m.accumulatorCondition = false;
      mutant("accumulator-bound-dropped", "the running sum without its bound: overflows for a long reduction", m);
      if (declared.source == Source::kCodesMinusZeroPoint) {
        m = declared;
        m.readU8AsS8 = true;
        mutant("u8-read-as-s8-zero-point-not-subtracted",
               "the widening kernel reads the codes 0..255 as s8 and does not subtract the zero point", m);
      }
      break;
    case IntDotStep::kCompensate:
      if (declared.source == Source::kCodes) {
        m.compensation = Model::Compensation::kNone;
        mutant("zero-point-not-compensated", "zx * sum(w) is not subtracted after the reduction", m);
      } else if (declared.source == Source::kCodesPlus128) {
        m.compensation = Model::Compensation::kZeroPointOnly;
        mutant("shift-not-compensated", "only zx * sum(w) is subtracted, not the +128 shift's 128 * sum(w)", m);
      } else {
        m.compensation = Model::Compensation::kZeroPointOnly;
        mutant("zero-point-subtracted-twice", "zx * sum(w) subtracted although the products used x - zx", m);
      }
      break;
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// The instance check.

/// Per-instance constants: the encoded range and the per-weight-value bounds.
struct InstanceTables {
  int64_t lo = 0, hi = 0, zx = 0;
  int64_t elo = 0, ehi = 0;  // e(lo), e(hi)
  int64_t c = 0;             // compensation constant
  std::array<int64_t, 256> f{}, g{}, fr{}, gr{};
  std::array<int, 256> byFDesc{}, byGAsc{};  // weight values (index v + 128) ordered by f / g
};

int64_t encodeCode(Source s, int64_t x, int64_t zx) {
  switch (s) {
    case Source::kCodes: return x;
    case Source::kCodesPlus128: return x + 128;
    case Source::kCodesMinusZeroPoint: return x - zx;
  }
  return x;
}

InstanceTables tablesFor(const IntDotArithmetic& a, const IntDotInstance& inst) {
  InstanceTables t;
  t.lo = inst.src.lo;
  t.hi = inst.src.hi;
  t.zx = inst.zeroPoint;
  t.elo = encodeCode(a.source, t.lo, t.zx);
  t.ehi = encodeCode(a.source, t.hi, t.zx);
  t.c = a.source == Source::kCodes ? t.zx : a.source == Source::kCodesPlus128 ? t.zx + 128 : 0;
  for (int i = 0; i < 256; ++i) {
    const int64_t w = i - 128;
    t.f[i] = std::max(t.ehi * w, t.elo * w);
    t.g[i] = std::min(t.ehi * w, t.elo * w);
    t.fr[i] = std::max((t.hi - t.zx) * w, (t.lo - t.zx) * w);
    t.gr[i] = std::min((t.hi - t.zx) * w, (t.lo - t.zx) * w);
    t.byFDesc[i] = t.byGAsc[i] = i;
  }
  std::stable_sort(t.byFDesc.begin(), t.byFDesc.end(), [&](int x, int y) { return t.f[x] > t.f[y]; });
  std::stable_sort(t.byGAsc.begin(), t.byGAsc.end(), [&](int x, int y) { return t.g[x] < t.g[y]; });
  return t;
}

using Histogram = std::array<int64_t, 256>;

/// The n-th value along \p order (counting multiplicities), or nullopt when the channel has fewer
/// than n weights.
std::optional<int64_t> nth(const Histogram& h, const std::array<int, 256>& order, const std::array<int64_t, 256>& value,
                           int n) {
  int64_t taken = 0;
  for (int i : order) {
    taken += h[i];
    if (taken >= n) return value[i];
  }
  return std::nullopt;
}

/// One output channel's side-condition values.
struct ChannelBounds {
  int64_t groupMax = 0, groupMin = 0;  // n tau + E, n sigma + D
  int64_t accUpper = 0, accLower = 0;  // U, L
  int64_t exactUpper = 0, exactLower = 0;
  int64_t wsum = 0;
};

ChannelBounds boundsOf(const Histogram& h, const InstanceTables& t, int n, bool group) {
  ChannelBounds b;
  for (int i = 0; i < 256; ++i) {
    const int64_t k = h[i];
    if (k == 0) continue;
    b.accUpper += k * std::max<int64_t>(t.f[i], 0);
    b.accLower += k * std::min<int64_t>(t.g[i], 0);
    b.exactUpper += k * t.fr[i];
    b.exactLower += k * t.gr[i];
    b.wsum += k * (i - 128);
  }
  if (group) {
    // tau = max(n-th largest f, 0): n*tau + E is then the sum of the n largest f among the
    // channel's weights and n - 1 padding zeros (README "why the bound is pairing-independent").
    const int64_t tau = std::max<int64_t>(nth(h, t.byFDesc, t.f, n).value_or(0), 0);
    const int64_t sigma = std::min<int64_t>(nth(h, t.byGAsc, t.g, n).value_or(0), 0);
    int64_t excess = 0, deficit = 0;
    for (int i = 0; i < 256; ++i) {
      if (h[i] == 0) continue;
      excess += h[i] * std::max<int64_t>(t.f[i] - tau, 0);
      deficit += h[i] * std::min<int64_t>(t.g[i] - sigma, 0);
    }
    b.groupMax = n * tau + excess;
    b.groupMin = n * sigma + deficit;
  }
  return b;
}

Verdict unsupportedVerdict(std::string detail) {
  Verdict v;
  v.kind = VerdictKind::Unsupported;
  v.messageClass = MessageClass::NotEncodable;
  v.detail = std::move(detail);
  return v;
}

std::string num(int64_t v) { return std::to_string(v); }

std::string checkInstanceShape(const IntDotArithmetic& a, const IntDotInstance& inst) {
  if (inst.outputChannels < 1 || inst.reductionLength < 1) return "an instance needs at least one channel and one product";
  if (inst.reductionLength > kMaxReduction) return "reduction length " + num(inst.reductionLength) + " is over 2^32";
  if (static_cast<int64_t>(inst.weights.size()) / inst.outputChannels != inst.reductionLength ||
      static_cast<int64_t>(inst.weights.size()) % inst.outputChannels != 0) {
    return num(static_cast<int64_t>(inst.weights.size())) + " weights for " + num(inst.outputChannels) + " x " +
           num(inst.reductionLength);
  }
  const CodeRange s = inst.src;
  if (s.lo > s.hi) return "empty code range [" + num(s.lo) + ", " + num(s.hi) + "]";
  const bool u8 = s.lo >= 0 && s.hi <= 255, s8 = s.lo >= -128 && s.hi <= 127;
  if (!u8 && !s8) return "code range [" + num(s.lo) + ", " + num(s.hi) + "] is neither within u8 nor within s8";
  if (a.source == Source::kCodesPlus128 && !s8) {
    return "the +128 shift takes s8 codes; code range [" + num(s.lo) + ", " + num(s.hi) + "] is not within s8";
  }
  if (inst.zeroPoint < s.lo || inst.zeroPoint > s.hi) {
    return "zero point " + num(inst.zeroPoint) + " outside the code range [" + num(s.lo) + ", " + num(s.hi) + "]";
  }
  return "";
}

void sortValues(Counterexample& cex) { std::sort(cex.values.begin(), cex.values.end()); }

/// The refutation of a group side condition on channel \p o: the channel's extreme weights
/// (upper: the n largest f, lower: the n smallest g), the codes that reach them, evaluated by the
/// declared step and confirmed by a ground Z3 query of the group lemma without its side condition.
Verdict refuteGroup(const IntDotVariantProof& variant, const IntDotInstance& inst, const InstanceTables& t,
                    const Histogram& h, int64_t o, bool upper) {
  const IntDotArithmetic& a = variant.arithmetic;
  const int n = a.groupSize;
  // The chosen weight values, with multiplicity, skipping those whose extreme product has the
  // wrong sign (a shorter group: the kernel's zero padding).
  std::vector<int> values;
  const auto& order = upper ? t.byFDesc : t.byGAsc;
  for (int i : order) {
    if (upper ? t.f[i] < 0 : t.g[i] > 0) break;  // the rest of the order has the wrong sign too
    for (int64_t k = 0; k < h[i] && static_cast<int>(values.size()) < n; ++k) values.push_back(i);
    if (static_cast<int>(values.size()) >= n) break;
  }
  const int8_t* row = inst.weights.data() + o * inst.reductionLength;
  std::vector<int64_t> index, codes;
  std::vector<int8_t> weights;
  std::vector<bool> used(static_cast<size_t>(inst.reductionLength), false);
  for (int v : values) {
    for (int64_t k = 0; k < inst.reductionLength; ++k) {
      if (!used[k] && row[k] + 128 == v) {
        used[k] = true;
        index.push_back(k);
        const int64_t w = v - 128;
        // The code that makes the product extreme: e is increasing, so hi or lo.
        const bool hiWins = upper ? t.ehi * w >= t.elo * w : t.ehi * w <= t.elo * w;
        codes.push_back(hiWins ? t.hi : t.lo);
        weights.push_back(static_cast<int8_t>(w));
        break;
      }
    }
  }
  const IntDotGroupValue value = evaluateIntDotGroup(a, codes, weights, t.zx);
  Verdict v;
  if (!value.overflowed) {
    v.kind = VerdictKind::Unknown;
    v.messageClass = MessageClass::SolverUnknown;
    v.detail = "internal: channel " + num(o) + " fails the group side condition but its extreme group evaluates exactly";
    return v;
  }
  Counterexample cex;
  cex.values.emplace_back("output channel", num(o));
  for (size_t i = 0; i < index.size(); ++i) {
    cex.values.emplace_back("w[" + num(o) + "," + num(index[i]) + "]", num(weights[i]));
    cex.values.emplace_back("x[" + num(index[i]) + "]", num(codes[i]));
  }
  cex.values.emplace_back("src.lo", num(t.lo));
  cex.values.emplace_back("src.hi", num(t.hi));
  cex.values.emplace_back("src.zero_point", num(t.zx));
  sortValues(cex);
  Model m = declaredModel(a);
  cex.goal = groupGoal(m);
  cex.sourceValue = num(value.exact);
  cex.targetValue = num(value.computed);

  // Ground confirmation: the group lemma without its side condition, at exactly these values
  // (a group shorter than n is padded with w = 0, x = zx, as the kernel pads).
  m.groupCondition = false;
  Obligation ground = groupLemma(m);
  ground.name += "-ground";
  ground.assumptions.push_back(intVar("src.lo") == I(t.lo));
  ground.assumptions.push_back(intVar("src.hi") == I(t.hi));
  ground.assumptions.push_back(intVar("src.zero_point") == I(t.zx));
  for (int i = 0; i < n; ++i) {
    const bool real = i < static_cast<int>(weights.size());
    ground.assumptions.push_back(intVar("x[" + std::to_string(i) + "]") == I(real ? codes[i] : t.zx));
    ground.assumptions.push_back(intVar("w[" + std::to_string(i) + "]") == I(real ? weights[i] : 0));
  }
  ProveOptions groundOptions;
  groundOptions.timeoutMs = variant.timeoutMs;
  const Verdict z3 = prove(ground, groundOptions);  // not cached: one per refuted instance
  if (z3.kind == VerdictKind::Proved) {
    v.kind = VerdictKind::Unknown;
    v.messageClass = MessageClass::SolverUnknown;
    v.detail = "internal: the evaluated counterexample of channel " + num(o) + " is Proved by the ground query";
    return v;
  }
  v.kind = VerdictKind::Refuted;
  v.messageClass = MessageClass::ValueMismatch;
  std::string ws, xs;
  for (size_t i = 0; i < weights.size(); ++i) {
    ws += (i ? ", " : "") + num(weights[i]);
    xs += (i ? ", " : "") + num(codes[i]);
  }
  v.detail = "output channel " + num(o) + ": weights " + ws + " with codes " + xs + " sum to " + num(value.exact) +
             " in one group, which the " + cex.goal + " step stores as " + num(value.computed) +
             " (if the kernel's layout puts them in one group: the bound takes the channel's " +
             (upper ? "largest" : "smallest") + " " + num(n) + " products); ground query: " +
             verdictKindName(z3.kind);
  v.counterexample = std::move(cex);
  return v;
}

/// The refutation of an accumulator, result or compensation bound on channel \p o.
Verdict refuteSum(const IntDotVariantProof& variant, const IntDotInstance& inst, const InstanceTables& t,
                  const ChannelBounds& b, int64_t o, IntDotStep step, bool upper) {
  const IntDotArithmetic& a = variant.arithmetic;
  const int bits = a.accumulatorBits;
  const std::string acc_s = "s" + std::to_string(bits);
  Counterexample cex;
  cex.values.emplace_back("output channel", num(o));
  cex.values.emplace_back("src.lo", num(t.lo));
  cex.values.emplace_back("src.hi", num(t.hi));
  cex.values.emplace_back("src.zero_point", num(t.zx));
  cex.values.emplace_back("reduction length", num(inst.reductionLength));
  Verdict v;
  v.kind = VerdictKind::Refuted;
  v.messageClass = MessageClass::ValueMismatch;
  const int8_t* row = inst.weights.data() + o * inst.reductionLength;
  const int64_t positiveCode = upper ? t.hi : t.lo, negativeCode = upper ? t.lo : t.hi;
  const std::string codeRule = num(positiveCode) + " where w > 0, " + num(negativeCode) + " where w < 0";
  if (step == IntDotStep::kAccumulate) {
    // Evaluate the declared steps in the stored order with the extreme codes; the first running
    // sum that leaves the accumulator is the witness. When none does in this order (only when the
    // code range excludes the zero point's sign change), the witness is the partial sum over the
    // products of one sign, which another layout accumulates first.
    int64_t acc = 0, groups = 0;
    bool found = false;
    std::vector<int64_t> codes;
    std::vector<int8_t> weights;
    for (int64_t k0 = 0; k0 < inst.reductionLength && !found; k0 += a.groupSize) {
      codes.clear();
      weights.clear();
      for (int64_t k = k0; k < std::min(k0 + a.groupSize, inst.reductionLength); ++k) {
        const int64_t w = row[k];
        const bool hiWins = upper ? t.ehi * w >= t.elo * w : t.ehi * w <= t.elo * w;
        codes.push_back(hiWins ? t.hi : t.lo);
        weights.push_back(row[k]);
      }
      acc += evaluateIntDotGroup(a, codes, weights, t.zx).computed;
      ++groups;
      found = acc > signedMax(bits) || acc < signedMin(bits);
    }
    if (!found) acc = upper ? b.accUpper : b.accLower;
    cex.values.emplace_back("x[k]", codeRule);
    cex.values.emplace_back(found ? "groups accumulated" : "products accumulated",
                            found ? num(groups) : "those with " + std::string(upper ? "positive" : "negative") + " e(x)*w");
    cex.goal = "accumulator (" + acc_s + ")";
    cex.sourceValue = num(acc);
    cex.targetValue = num(wrapTo(acc, bits));
    v.detail = "output channel " + num(o) + ": with codes " + codeRule + " the running sum reaches " + num(acc) +
               ", outside " + acc_s + " (the declaration leaves accumulator overflow unspecified; shown wrapped)";
  } else if (step == IntDotStep::kCompensate && (b.exactUpper > signedMax(bits) || b.exactLower < signedMin(bits))) {
    const int64_t exact = upper ? b.exactUpper : b.exactLower;
    const std::string rule = upper ? num(t.hi) + " where w > 0, " + num(t.lo) + " where w < 0"
                                   : num(t.lo) + " where w > 0, " + num(t.hi) + " where w < 0";
    cex.values.emplace_back("x[k]", rule);
    cex.goal = "result (" + acc_s + ")";
    cex.sourceValue = num(exact);
    cex.targetValue = num(wrapTo(exact, bits));
    v.detail = "output channel " + num(o) + ": with codes " + rule + " the exact result sum (x - zx) w = " +
               num(exact) + " does not fit " + acc_s;
  } else {
    const int64_t comp = t.c * b.wsum;
    cex.values.emplace_back("sum_k w[" + num(o) + ",k]", num(b.wsum));
    cex.values.emplace_back("compensation constant c", num(t.c));
    cex.goal = "compensation (" + acc_s + ")";
    cex.sourceValue = num(comp);
    cex.targetValue = num(wrapTo(comp, bits));
    v.detail = "output channel " + num(o) + ": the compensation c * sum w = " + num(comp) + " does not fit " + acc_s;
  }
  sortValues(cex);
  v.counterexample = std::move(cex);
  return v;
}

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

const char* intDotStepName(IntDotStep step) {
  switch (step) {
    case IntDotStep::kProducts: return "products";
    case IntDotStep::kGroup: return "group";
    case IntDotStep::kAccumulate: return "accumulate";
    case IntDotStep::kCompensate: return "compensate";
  }
  return "?";
}

Status checkIntDotArithmetic(const IntDotArithmetic& a) {
  const std::string who = "int dot arithmetic '" + a.variant + "'";
  if (a.variant.empty() || kebab(a.variant).empty()) return unsupported(who + ": no variant name");
  if (a.groupSize < 1 || a.groupSize > kMaxGroupSize) {
    return unsupported(who + ": groupSize " + std::to_string(a.groupSize) + " outside 1..64");
  }
  if (a.groupBits < 8 || a.groupBits > 64) {
    return unsupported(who + ": groupBits " + std::to_string(a.groupBits) + " outside 8..64");
  }
  if (a.accumulatorBits < 8 || a.accumulatorBits > 64) {
    return unsupported(who + ": accumulatorBits " + std::to_string(a.accumulatorBits) + " outside 8..64");
  }
  switch (a.source) {
    case Source::kCodes: case Source::kCodesPlus128: case Source::kCodesMinusZeroPoint: break;
    default: return unsupported(who + ": unknown source");
  }
  return Status::ok();
}

bool intDotGroupHasSideCondition(const IntDotArithmetic& a) {
  const int64_t maxProduct = maxAbsEncoded(a.source) * 128;  // |e(x)| * |w|, w = -128
  return a.groupSize * maxProduct > signedMax(std::clamp(a.groupBits, 8, 64));
}

Obligation intDotLemma(const IntDotArithmetic& a, IntDotStep step) {
  if (!checkIntDotArithmetic(a).isOk()) {
    Obligation empty;
    empty.name = "int-dot-invalid-declaration";
    return empty;
  }
  return lemmaOf(declaredModel(a), step);
}

IntDotVariantProof proveIntDotVariant(const IntDotArithmetic& a, const ProveOptions& opts) {
  IntDotVariantProof proof;
  proof.arithmetic = a;
  proof.timeoutMs = opts.timeoutMs;
  if (Status s = checkIntDotArithmetic(a); !s.isOk()) {
    proof.verdict = unsupportedVerdict(s.message());
    return proof;
  }
  proof.groupSideCondition = intDotGroupHasSideCondition(a);
  const Model m = declaredModel(a);
  ProofCache::Batch batch(opts.cache);  // one durable cache write for the four lemmas
  proof.verdict.kind = VerdictKind::Proved;
  proof.verdict.messageClass = MessageClass::None;
  for (IntDotStep step : kIntDotSteps) {
    Verdict v = prove(lemmaOf(m, step), opts);
    proof.verdict.seconds += v.seconds;
    if (!v.proved() && proof.verdict.proved()) {
      const double seconds = proof.verdict.seconds;
      proof.verdict = v;
      proof.verdict.seconds = seconds;
      proof.verdict.detail = "lemma " + lemmaName(m, step) + " (schematic, not these weights): " +
                             (v.detail.empty() ? messageClassText(v.messageClass) : v.detail);
    }
    proof.lemmas.push_back({step, std::move(v)});
  }
  return proof;
}

namespace {

Verdict checkInstance(const IntDotVariantProof& variant, const IntDotInstance& inst) {
  const IntDotArithmetic& a = variant.arithmetic;
  if (Status s = checkIntDotArithmetic(a); !s.isOk()) return unsupportedVerdict(s.message());
  if (std::string why = checkInstanceShape(a, inst); !why.empty()) return unsupportedVerdict(why);
  if (!variant.proved()) return variant.verdict;

  const InstanceTables t = tablesFor(a, inst);
  const int n = a.groupSize;
  const bool group = variant.groupSideCondition;
  const int64_t gMax = signedMax(a.groupBits), gMin = signedMin(a.groupBits);
  const int64_t aMax = signedMax(a.accumulatorBits), aMin = signedMin(a.accumulatorBits);
  ChannelBounds worst;  // the tightest values over all channels, for the Proved detail
  worst.groupMax = worst.accUpper = worst.exactUpper = std::numeric_limits<int64_t>::min();
  worst.groupMin = worst.accLower = worst.exactLower = std::numeric_limits<int64_t>::max();
  int64_t worstComp = 0;
  Histogram h;
  for (int64_t o = 0; o < inst.outputChannels; ++o) {
    // One pass over the channel's weights: a histogram of the 256 values, from which every bound
    // is exact integer arithmetic (256 terms) independent of the reduction's order.
    h.fill(0);
    const int8_t* row = inst.weights.data() + o * inst.reductionLength;
    for (int64_t k = 0; k < inst.reductionLength; ++k) ++h[static_cast<uint8_t>(row[k] + 128)];
    const ChannelBounds b = boundsOf(h, t, n, group);
    if (group && b.groupMax > gMax) return refuteGroup(variant, inst, t, h, o, true);
    if (group && b.groupMin < gMin) return refuteGroup(variant, inst, t, h, o, false);
    if (b.accUpper > aMax) return refuteSum(variant, inst, t, b, o, IntDotStep::kAccumulate, true);
    if (b.accLower < aMin) return refuteSum(variant, inst, t, b, o, IntDotStep::kAccumulate, false);
    const int64_t comp = t.c * b.wsum;
    if (b.exactUpper > aMax || b.exactLower < aMin || comp > aMax || comp < aMin) {
      return refuteSum(variant, inst, t, b, o, IntDotStep::kCompensate, b.exactUpper > aMax);
    }
    worst.groupMax = std::max(worst.groupMax, b.groupMax);
    worst.groupMin = std::min(worst.groupMin, b.groupMin);
    worst.accUpper = std::max(worst.accUpper, b.accUpper);
    worst.accLower = std::min(worst.accLower, b.accLower);
    worst.exactUpper = std::max(worst.exactUpper, b.exactUpper);
    worst.exactLower = std::min(worst.exactLower, b.exactLower);
    if (std::abs(comp) > std::abs(worstComp)) worstComp = comp;
  }
  Verdict v;
  v.kind = VerdictKind::Proved;
  v.messageClass = MessageClass::None;
  const std::string accS = " (s" + std::to_string(a.accumulatorBits) + ")";
  v.detail = num(inst.outputChannels) + " channels x " + num(inst.reductionLength) + ": ";
  if (group) {
    v.detail += "group in [" + num(worst.groupMin) + ", " + num(worst.groupMax) + "] (s" +
                std::to_string(a.groupBits) + "), ";
  } else {
    v.detail += "group exact without a side condition, ";
  }
  v.detail += "accumulator in [" + num(worst.accLower) + ", " + num(worst.accUpper) + "]" + accS + ", result in [" +
              num(worst.exactLower) + ", " + num(worst.exactUpper) + "], compensation up to " + num(worstComp);
  return v;
}

}  // namespace

Verdict checkIntDotInstance(const IntDotVariantProof& variant, const IntDotInstance& inst) {
  const auto start = std::chrono::steady_clock::now();
  Verdict v = checkInstance(variant, inst);
  if (!variant.proved() && v.kind == variant.verdict.kind) return v;  // the lemmas' own verdict and time
  v.seconds = since(start);
  v.fromCache = false;
  return v;
}

Verdict proveIntDotInstance(const IntDotArithmetic& a, std::span<const int8_t> weights, int64_t outputChannels,
                            int64_t reductionLength, CodeRange src, int64_t zeroPoint, const ProveOptions& opts) {
  IntDotInstance inst{weights, outputChannels, reductionLength, src, zeroPoint};
  // An invalid instance is Unsupported before any solving.
  if (Status s = checkIntDotArithmetic(a); !s.isOk()) return unsupportedVerdict(s.message());
  if (std::string why = checkInstanceShape(a, inst); !why.empty()) return unsupportedVerdict(why);
  return checkIntDotInstance(proveIntDotVariant(a, opts), inst);
}

IntDotGroupValue evaluateIntDotGroup(const IntDotArithmetic& a, std::span<const int64_t> codes,
                                     std::span<const int8_t> weights, int64_t zeroPoint) {
  IntDotGroupValue r;
  const size_t n = std::min(codes.size(), weights.size());
  for (size_t i = 0; i < n; ++i) r.exact += encodeCode(a.source, codes[i], zeroPoint) * weights[i];
  const int bits = std::clamp(a.groupBits, 8, 64);
  r.computed = a.groupSaturates ? std::clamp(r.exact, signedMin(bits), signedMax(bits)) : wrapTo(r.exact, bits);
  r.overflowed = r.computed != r.exact;
  return r;
}

StatusOr<std::vector<RuleProof>> intDotProofs(std::span<const IntDotArithmetic> variants) {
  using Key = std::tuple<std::string, int, int, int, bool, int>;
  auto keyOf = [](const IntDotArithmetic& a) {
    return Key{a.variant, static_cast<int>(a.source), a.groupSize, a.groupBits, a.groupSaturates, a.accumulatorBits};
  };
  // Distinct declarations in their order; per kebab name, the sources declared.
  std::vector<const IntDotArithmetic*> distinct;
  std::map<Key, bool> seen;
  std::map<std::string, std::map<int, Key>> byName;
  for (const IntDotArithmetic& a : variants) {
    if (Status s = checkIntDotArithmetic(a); !s.isOk()) return s;
    if (!seen.emplace(keyOf(a), true).second) continue;
    auto [it, fresh] = byName[kebab(a.variant)].emplace(static_cast<int>(a.source), keyOf(a));
    if (!fresh) {
      return invalidArgument("int dot arithmetic '" + a.variant +
                             "' is declared twice with the same source and different steps");
    }
    distinct.push_back(&a);
  }
  std::vector<RuleProof> proofs;
  for (const IntDotArithmetic* a : distinct) {
    const std::string name = kebab(a->variant);
    std::string id = "int-dot-" + name;
    if (byName[name].size() > 1) id += std::string("-") + sourceSuffix(a->source);
    const Model m = declaredModel(*a);
    for (IntDotStep step : kIntDotSteps) proofs.push_back(ruleProofOf(m, step, id + "-" + intDotStepName(step)));
  }
  return proofs;
}

}  // namespace verifuse::verify
