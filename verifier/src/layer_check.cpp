// End-to-end layer check (see layer_check.h). Z3 is used in two theories:
//
// * The search for a distinguishing input is linear real arithmetic. Batch norm's r = 1/sqrt(v+e)
//   is irrational, and r * x_i would make the search nonlinear (nlsat needs over a minute for 256
//   inputs), so r is first enclosed in a rational interval [lo, hi] of relative width 2^-40: with
//   v + e > 0 and r > 0, r^2 (v + e) is increasing, hence r in [lo, hi] iff
//   lo^2 (v+e) <= 1 <= hi^2 (v+e), checked in Z3's exact rationals. Between the midpoint and any r
//   in [lo, hi] the unfused output moves by at most slack = |gamma| (hi - lo)/2 (sum|W| + |b - mean|)
//   on the input box, so "no input differs by more than tol - slack at the midpoint" proves "no
//   input differs by more than tol at the true r".
// * The difference is sum_i c_i x_i + d with exact rational c_i. Z3's simplex is slow on long rows
//   of 80-bit rationals (a 64-input row: 20 ms, 1,024 inputs: 2 s), so the search runs over
//   z_i = c_i x_i in [-|c_i|, |c_i|] (a bijection of the box for c_i != 0): a row of unit
//   coefficients, 3 ms for 64 inputs. The input is recovered as x_i = z_i / c_i.
// * A distinguishing input found that way is confirmed with the exact encoding r > 0,
//   r * r * (v + e) = 1 (one nonlinear variable; the input is fixed). Only a confirmed input is a
//   Refuted verdict; an input that only works somewhere in [lo, hi] gives Unknown, never a proof.
#include "verifuse/verify/layer_check.h"

#include <z3++.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace verifuse::verify {

namespace {

std::atomic<uint64_t> gLayerQueries{0};

struct Bad {
  std::string what;
};

/// An exact binary fraction m * 2^e. The per-weight coefficients W' - k W are computed in these
/// (24-bit weights times a 54-bit midpoint: at most ~102 bits) instead of by Z3's simplifier, which
/// costs tens of microseconds per call; anything that would not fit falls back to Z3.
struct Dyadic {
  __int128 m = 0;
  int e = 0;
};

int bitLength(__int128 m) {
  unsigned __int128 a = m < 0 ? static_cast<unsigned __int128>(-m) : static_cast<unsigned __int128>(m);
  int n = 0;
  while (a) {
    a >>= 1;
    ++n;
  }
  return n;
}

Dyadic normalized(Dyadic d) {
  if (d.m == 0) return {0, 0};
  while ((d.m & 1) == 0) {
    d.m /= 2;
    ++d.e;
  }
  return d;
}

constexpr int kDyadicBits = 120;

std::optional<Dyadic> toDyadic(double v) {
  if (!std::isfinite(v)) return std::nullopt;
  if (v == 0) return Dyadic{};
  int exponent = 0;
  const double mantissa = std::frexp(v, &exponent);
  return normalized({static_cast<__int128>(static_cast<long long>(std::ldexp(mantissa, 53))), exponent - 53});
}

std::optional<Dyadic> mulD(const Dyadic& a, const Dyadic& b) {
  if (a.m == 0 || b.m == 0) return Dyadic{};
  if (bitLength(a.m) + bitLength(b.m) > kDyadicBits) return std::nullopt;
  return normalized({a.m * b.m, a.e + b.e});
}

std::optional<Dyadic> addD(const Dyadic& a, const Dyadic& b) {
  if (a.m == 0) return b;
  if (b.m == 0) return a;
  const int e = std::min(a.e, b.e), sa = a.e - e, sb = b.e - e;
  if (bitLength(a.m) + sa > kDyadicBits || bitLength(b.m) + sb > kDyadicBits) return std::nullopt;
  const __int128 one = 1;
  return normalized({a.m * (one << sa) + b.m * (one << sb), e});
}

Dyadic negD(Dyadic d) {
  d.m = -d.m;
  return d;
}

std::string decimal(unsigned __int128 a) {
  if (a == 0) return "0";
  std::string s;
  while (a) {
    s.push_back(static_cast<char>('0' + static_cast<int>(a % 10)));
    a /= 10;
  }
  return std::string(s.rbegin(), s.rend());
}

/// Decimal strings of 2^k, k = 0..1200 (enough for any double's exponent), built once.
const std::string& powerOfTwo(int k) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t{"1"};
    for (int i = 1; i <= 1200; ++i) {
      const std::string& prev = t.back();
      std::string next(prev.size() + 1, '0');
      int carry = 0;
      for (size_t j = prev.size(); j-- > 0;) {
        int d = (prev[j] - '0') * 2 + carry;
        next[j + 1] = static_cast<char>('0' + d % 10);
        carry = d / 10;
      }
      next[0] = static_cast<char>('0' + carry);
      t.push_back(next[0] == '0' ? next.substr(1) : next);
    }
    return t;
  }();
  return table.at(static_cast<size_t>(k));
}

std::optional<z3::expr> dyadicReal(z3::context& ctx, const Dyadic& d) {
  if (d.m == 0) return ctx.real_val(0);
  if (d.e > 0 || -d.e > 1200) return std::nullopt;  // not needed for weights; the caller falls back
  const bool negative = d.m < 0;
  const unsigned __int128 a = negative ? static_cast<unsigned __int128>(-d.m) : static_cast<unsigned __int128>(d.m);
  const std::string text = (negative ? "-" : "") + decimal(a) + "/" + powerOfTwo(-d.e);
  return ctx.real_val(text.c_str());
}

/// The exact rational value of a finite double, as a Z3 numeral.
z3::expr exactReal(z3::context& ctx, double v) {
  std::optional<Dyadic> d = toDyadic(v);
  if (!d) throw Bad{"non-finite constant"};
  if (std::optional<z3::expr> e = dyadicReal(ctx, *d)) return *e;
  // A positive exponent: an integer, whose decimal digits glibc's printf gives exactly.
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return ctx.real_val(buf);
}

std::string show(const z3::expr& v) {
  if (v.is_algebraic()) return v.get_decimal_string(12) + "?";
  if (v.is_numeral()) return v.get_decimal_string(12);
  return v.to_string();
}

z3::check_result runCheck(z3::solver& s) {
  ++gLayerQueries;
  return s.check();
}

Verdict undecided(z3::solver& s, const std::string& where) {
  Verdict v;
  std::string reason = s.reason_unknown();
  bool timeout = reason.find("timeout") != std::string::npos || reason.find("canceled") != std::string::npos;
  v.kind = timeout ? VerdictKind::Timeout : VerdictKind::Unknown;
  v.messageClass = timeout ? MessageClass::SolverTimeout : MessageClass::SolverUnknown;
  v.detail = where + ": " + reason;
  return v;
}

Verdict unsupported(const std::string& why) {
  Verdict v;
  v.kind = VerdictKind::Unsupported;
  v.messageClass = MessageClass::NotEncodable;
  v.detail = why;
  return v;
}

bool finiteAll(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(p[i])) return false;
  }
  return true;
}

LayerCheckResult checkUnguarded(const FoldedLayer& L, const LayerCheckOptions& opt) {
  LayerCheckResult out;
  const int64_t C = L.channels, K = L.fanIn;
  const size_t c = static_cast<size_t>(C);
  const bool bn = L.fold == FoldedLayer::Fold::kBatchNorm;
  if (C <= 0 || K <= 0 || !L.foldedWeight || (!L.weight && K != 1)) {
    out.verdict = unsupported("layer has no channels or no weights");
    return out;
  }
  if (bn && (L.mean.size() != c || L.var.size() != c || (!L.gamma.empty() && L.gamma.size() != c) ||
             (!L.beta.empty() && L.beta.size() != c))) {
    out.verdict = unsupported("batch norm statistics do not match the channel count");
    return out;
  }
  if (!bn && L.factor.size() != c) {
    out.verdict = unsupported("per-channel factor does not match the channel count");
    return out;
  }
  if ((L.weight && !finiteAll(L.weight, C * K)) || !finiteAll(L.foldedWeight, C * K) ||
      (L.bias && !finiteAll(L.bias, C)) || (L.foldedBias && !finiteAll(L.foldedBias, C))) {
    out.verdict = unsupported("non-finite weights: nothing to compare over the reals");
    return out;
  }

  z3::context ctx;
  z3::params p(ctx);
  p.set("timeout", opt.timeoutMs);
  const z3::expr zero = ctx.real_val(0), one = ctx.real_val(1);
  const double tiny = std::ldexp(1.0, -149);
  auto absOf = [&](const z3::expr& e) { return z3::ite(e >= zero, e, -e).simplify(); };
  auto unknown = [&](const std::string& why) {
    Verdict v;
    v.kind = VerdictKind::Unknown;
    v.messageClass = MessageClass::SolverUnknown;
    v.detail = why;
    return v;
  };

  // One query for the whole layer: some channel o and some input tell the layers apart. Each
  // channel has its own variables z[o,i] = c[o,i] x_i; a disjunct per channel.
  struct Channel {
    z3::expr kMid, shift, varEps, gammaE, betaE, meanE, biasE, d, tol;
    std::vector<z3::expr> coef, z;
    double fb = 0;
  };
  std::vector<Channel> chans;
  chans.reserve(c);
  z3::solver search(ctx, "QF_LRA");
  search.set(p);
  z3::expr_vector apart(ctx);
  for (int64_t o = 0; o < C; ++o) {
    const size_t oc = static_cast<size_t>(o);
    const std::string where = "channel " + std::to_string(o);
    // The folded op as  t -> k * t + shift  at a rational point k = kMid of its coefficient.
    z3::expr kMid = one, shift = zero, slackPerUnit = zero, varEps = zero, gammaE = one, betaE = zero, meanE = zero;
    std::optional<Dyadic> kMidD = Dyadic{1, 0};  // kMid as an exact binary fraction when it is one
    if (bn) {
      varEps = (exactReal(ctx, L.var[oc]) + exactReal(ctx, L.eps)).simplify();
      gammaE = L.gamma.empty() ? one : exactReal(ctx, L.gamma[oc]);
      betaE = L.beta.empty() ? zero : exactReal(ctx, L.beta[oc]);
      meanE = exactReal(ctx, L.mean[oc]);
      if (!(varEps > zero).simplify().is_true()) {
        out.verdict = unsupported(where + ": var + eps <= 0, 1/sqrt(var + eps) is undefined");
        return out;
      }
      const double r0 = 1.0 / std::sqrt(L.var[oc] + L.eps);
      const double loValue = r0 * (1 - 0x1p-40), hiValue = r0 * (1 + 0x1p-40);
      z3::expr lo = exactReal(ctx, loValue), hi = exactReal(ctx, hiValue);
      // lo^2 (v+e) <= 1 <= hi^2 (v+e), decided exactly by Z3's rational simplifier.
      if (!(lo > zero && lo * lo * varEps <= one && hi * hi * varEps >= one).simplify().is_true()) {
        out.verdict = unknown(where + ": could not enclose 1/sqrt(var + eps)");
        return out;
      }
      // gamma * (t - mean) * r + beta  =  (gamma r) t + (beta - gamma r mean)
      kMid = (gammaE * (lo + hi) / 2).simplify();
      kMidD = std::nullopt;
      if (auto g = toDyadic(L.gamma.empty() ? 1.0 : L.gamma[oc])) {
        if (auto sum = addD(*toDyadic(loValue), *toDyadic(hiValue))) {
          Dyadic mid = *sum;
          mid.e -= 1;  // (lo + hi) / 2
          kMidD = mulD(*g, mid);
        }
      }
      shift = (betaE - kMid * meanE).simplify();
      slackPerUnit = absOf((gammaE * (hi - lo) / 2).simplify());
    } else {
      z3::expr f = exactReal(ctx, L.factor[oc]);
      if (L.fold == FoldedLayer::Fold::kDiv && L.factor[oc] == 0) {
        out.verdict = unsupported(where + ": division by zero");
        return out;
      }
      if (L.fold == FoldedLayer::Fold::kMul) {
        kMid = f;
        kMidD = toDyadic(L.factor[oc]);
      }
      if (L.fold == FoldedLayer::Fold::kDiv) {
        kMid = (one / f).simplify();
        kMidD = std::nullopt;  // 1/f is not a binary fraction in general
      }
      if (L.fold == FoldedLayer::Fold::kAdd) shift = f;
    }

    // fused - unfused = sum_i (W'_i - k W_i) x_i + (b' - k b - shift) = sum_i c_i x_i + d.
    Channel ch{kMid, shift, varEps, gammaE, betaE, meanE, zero, zero, zero, {}, {}, 0};
    ch.coef.reserve(static_cast<size_t>(K));
    ch.z.reserve(static_cast<size_t>(K));
    z3::expr_vector zs(ctx), preAbs(ctx);
    double l1 = 0;
    for (int64_t i = 0; i < K; ++i) {
      const float fw = L.foldedWeight[o * K + i];
      const float w = L.weight ? L.weight[o * K + i] : 1.0f;
      l1 += std::fabs(static_cast<double>(fw));
      std::optional<z3::expr> fast;
      std::optional<Dyadic> cD;
      if (kMidD) {
        if (auto kw = mulD(*kMidD, *toDyadic(w))) cD = addD(*toDyadic(fw), negD(*kw));
        if (cD) fast = dyadicReal(ctx, *cD);
      }
      z3::expr coef = fast ? *fast : (exactReal(ctx, fw) - kMid * exactReal(ctx, w)).simplify();
      z3::expr bound = fast ? *dyadicReal(ctx, cD->m < 0 ? negD(*cD) : *cD) : absOf(coef);
      z3::expr zi = ctx.real_const(("z[" + std::to_string(o) + "," + std::to_string(i) + "]").c_str());
      search.add(zi >= -bound && zi <= bound);
      zs.push_back(zi);
      ch.coef.push_back(coef);
      ch.z.push_back(zi);
      if (bn) preAbs.push_back(exactReal(ctx, std::fabs(static_cast<double>(w))));
    }
    ch.fb = L.foldedBias ? static_cast<double>(L.foldedBias[o]) : 0.0;
    l1 += std::fabs(ch.fb);
    ch.biasE = L.bias ? exactReal(ctx, L.bias[o]) : zero;
    ch.d = (exactReal(ctx, ch.fb) - kMid * ch.biasE - shift).simplify();
    const double tolValue = opt.relTolerance * l1 + static_cast<double>(K + 1) * tiny;
    out.maxTolerance = std::max(out.maxTolerance, tolValue);
    ch.tol = exactReal(ctx, tolValue);
    // Between kMid and the true gamma * r the unfused output moves by at most
    // slack = |gamma| (hi - lo) / 2 * (sum |W_i| + |b - mean|) on the box.
    z3::expr slack = zero;
    if (bn) {
      preAbs.push_back(absOf((ch.biasE - meanE).simplify()));
      slack = (slackPerUnit * z3::sum(preAbs)).simplify();
      if (!(slack < ch.tol).simplify().is_true()) {
        out.verdict = unknown(where + ": the enclosure of 1/sqrt(var + eps) is wider than the tolerance");
        return out;
      }
    }
    // |fused - unfused| > tol at the true r implies |diff at kMid| > tol - slack: search for that.
    const z3::expr diff = z3::sum(zs) + ch.d, tolEff = (ch.tol - slack).simplify();
    apart.push_back(diff > tolEff || diff < -tolEff);
    chans.push_back(std::move(ch));
  }
  search.add(z3::mk_or(apart));
  ++out.queries;
  z3::check_result r = runCheck(search);
  if (r == z3::unknown) {
    out.verdict = undecided(search, "layer search");
    return out;
  }
  if (r == z3::unsat) {
    out.verdict.kind = VerdictKind::Proved;
    out.verdict.messageClass = MessageClass::None;
    return out;
  }

  // The channel the model separates, and its input x_i = z_i / c_i: evaluate both layers on it
  // exactly, and for batch norm confirm the difference with the exact encoding of 1/sqrt.
  z3::model m = search.get_model();
  int64_t o = 0;
  while (o + 1 < C && !m.eval(apart[static_cast<int>(o)], true).is_true()) ++o;
  const Channel& ch = chans[static_cast<size_t>(o)];
  const std::string where = "channel " + std::to_string(o);
  std::vector<z3::expr> xv;
  xv.reserve(static_cast<size_t>(K));
  z3::expr_vector fusedTerms(ctx), preTerms(ctx);
  for (int64_t i = 0; i < K; ++i) {
    const z3::expr& coef = ch.coef[static_cast<size_t>(i)];
    z3::expr xi = (coef == zero).simplify().is_true() ? zero : (m.eval(ch.z[static_cast<size_t>(i)], true) / coef).simplify();
    xv.push_back(xi);
    fusedTerms.push_back(exactReal(ctx, L.foldedWeight[o * K + i]) * xi);
    preTerms.push_back(exactReal(ctx, L.weight ? L.weight[o * K + i] : 1.0f) * xi);
  }
  const z3::expr fusedVal = (z3::sum(fusedTerms) + exactReal(ctx, ch.fb)).simplify();
  const z3::expr preVal = (z3::sum(preTerms) + ch.biasE).simplify();
  Counterexample cex;
  cex.values.emplace_back("channel", std::to_string(o));
  for (int64_t i = 0; i < K && i < 16; ++i) cex.values.emplace_back(L.inputName + "[" + std::to_string(i) + "]", show(xv[static_cast<size_t>(i)]));
  if (K > 16) cex.values.emplace_back(L.inputName + "[16...]", "(" + std::to_string(K - 16) + " more)");
  cex.goal = L.outputName + " " + where + ": |fused - unfused| > " + show(ch.tol);
  cex.targetValue = show(fusedVal);
  z3::solver exact(ctx, bn ? "QF_NRA" : "QF_LRA");
  exact.set(p);
  z3::expr rr = ctx.real_const("r");
  z3::expr unfused = bn ? ch.gammaE * (preVal - ch.meanE) * rr + ch.betaE : ch.kMid * preVal + ch.shift;
  if (bn) exact.add(rr > zero && rr * rr * ch.varEps == one);
  exact.add(fusedVal - unfused > ch.tol || unfused - fusedVal > ch.tol);
  ++out.queries;
  z3::check_result er = runCheck(exact);
  if (er == z3::unknown) {
    out.verdict = undecided(exact, where + " (confirming a counterexample)");
    return out;
  }
  if (er == z3::unsat) {
    out.verdict = unknown(where + ": an input differs only within the enclosure of 1/sqrt(var + eps)");
    return out;
  }
  cex.sourceValue = show(exact.get_model().eval(unfused, true));
  Verdict v;
  v.kind = VerdictKind::Refuted;
  v.messageClass = MessageClass::ValueMismatch;
  v.counterexample = cex;
  v.detail = "an input in [-1, 1]^" + std::to_string(K) + " tells the fused and unfused layers apart";
  out.verdict = v;
  return out;
}

}  // namespace

LayerCheckResult checkFoldedLayer(const FoldedLayer& layer, const LayerCheckOptions& options) {
  auto start = std::chrono::steady_clock::now();
  LayerCheckResult out;
  try {
    out = checkUnguarded(layer, options);
  } catch (const Bad& b) {
    out.verdict = unsupported(b.what);
  } catch (const z3::exception& e) {
    out.verdict = unsupported(std::string("z3 error: ") + e.msg());
  } catch (const std::exception& e) {
    out.verdict = Verdict{};
    out.verdict.kind = VerdictKind::Unknown;
    out.verdict.messageClass = MessageClass::SolverUnknown;
    out.verdict.detail = std::string("internal error: ") + e.what();
  }
  out.verdict.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

uint64_t layerCheckQueryCount() { return gLayerQueries.load(); }

}  // namespace verifuse::verify
