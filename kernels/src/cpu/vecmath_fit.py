#!/usr/bin/env python3
"""Fits the polynomial coefficients used by vecmath_avx2.h (run by hand; not part of the build).

Each function is a near-minimax polynomial (Lawson's iteratively reweighted least squares on a
dense Chebyshev-distributed grid, errors measured against mpmath at 50 digits), then rounded to
float32. The printed max errors are of the double-precision polynomial; the float32 evaluation is
measured by tests/cpp/kernels/cpu/vecmath_avx2_test.cpp, which is the real acceptance test.

    python3 kernels/src/cpu/vecmath_fit.py
"""
import mpmath
import numpy as np

mpmath.mp.dps = 50


def cheb_grid(lo, hi, n):
    k = np.arange(n)
    return 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * (k + 0.5) / n)


def lawson(basis, target, weight, iters=200):
    """Minimises max |weight * (basis @ c - target)| approximately."""
    w = np.ones(len(target))
    c = None
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(basis * (sw * weight)[:, None], target * sw * weight, rcond=None)
        err = np.abs(weight * (basis @ c - target))
        w = w * err
        w /= w.sum()
    return c


def f32(c):
    return [float(np.float32(v)) for v in c]


def show(name, coeffs):
    print(f"// {name}")
    for v in coeffs:
        print(f"  {np.float32(v).item()!r:>18}f,  // {float(np.float32(v)).hex()}")


def fit_gelu_pieces(phi, deg=5, lo=-6.0, width=0.5, pieces=24):
    """GELU(x) = x * phi(x) for the bf16 GEMM's epilogue (vecmath_avx512.h, geluByPieces): phi
    piecewise, one degree-5 polynomial in f = 2x - floor(2x) per half-unit interval of [-6, 6),
    fitted relative to phi (its negative tail is small), plus an interval of zeros below and of
    (1, 0, ...) above (phi = 0 and 1 exactly there: the kernel clamps into them). Rows: intervals,
    columns: coefficients of f^0 .. f^deg."""
    rows = [[0.0] * (deg + 1)]
    worst = 0.0
    f = (cheb_grid(0.0, 1.0, 600))
    basis = np.stack([f ** k for k in range(deg + 1)], axis=1)
    for i in range(pieces):
        xs = lo + width * (i + f)
        tgt = np.array([float(phi(mpmath.mpf(x))) for x in xs])
        c = lawson(basis, tgt, 1 / np.maximum(tgt, 1e-3))
        worst = max(worst, np.max(np.abs(basis @ c - tgt)))
        rows.append(f32(c))
    rows.append([1.0] + [0.0] * deg)
    print(f"gelu pieces max abs err of phi {worst:.3g}")
    return rows


def phi_erf(x):
    return mpmath.ncdf(x)


def phi_tanh(x):
    return (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x ** 3))) / 2


def show_table(name, rows):
    """The C++ declaration vecmath_avx512.h holds: [coefficient][interval], padded to 32 intervals
    (the kernel permutes one coefficient row, two zmm registers, by the interval index)."""
    cols = len(rows[0])
    padded = rows + [[0.0] * cols] * (32 - len(rows))
    print(f"alignas(64) inline constexpr float {name}[{cols}][32] = {{")
    for k in range(cols):
        vals = [f"{np.float32(r[k]).item()!r}f" for r in padded]
        print("    {" + ",\n     ".join(", ".join(vals[j:j + 4]) for j in range(0, 32, 4)) + "},")
    print("};")


def fit_erf_small(deg=7, t=0.921875):
    # erf(x) = x + x * P(x^2), |x| <= t; P(s) = erf(x)/x - 1, fit relative to erf(x)/x.
    xs = cheb_grid(1e-4, t, 4000)
    s = xs * xs
    tgt = np.array([float(mpmath.erf(mpmath.mpf(x)) / x - 1) for x in xs])
    ref = tgt + 1
    basis = np.stack([s ** k for k in range(deg)], axis=1)
    c = lawson(basis, tgt, 1 / ref)
    print("erf small max rel err", np.max(np.abs((basis @ c - tgt) / ref)))
    return c


def fit_erfcx(deg=12, lo=0.0, hi=10.1):
    # (1 + 2a) erfcx(a) = (1 + 2a) exp(a^2) erfc(a) as a polynomial in q = (a - 2) / (a + 2): it
    # stays within [1.128, 1.28] on the whole range, so the float Horner sum does not cancel (a fit
    # of erfcx itself does, by ~5x near a = 10).
    qlo, qhi = (lo - 2) / (lo + 2), (hi - 2) / (hi + 2)
    qs = cheb_grid(qlo, qhi, 4000)
    a = 2 * (1 + qs) / (1 - qs)
    tgt = np.array([float((1 + 2 * mpmath.mpf(v)) * mpmath.erfc(mpmath.mpf(v)) * mpmath.exp(mpmath.mpf(v) ** 2))
                    for v in a])
    basis = np.stack([qs ** k for k in range(deg)], axis=1)
    c = lawson(basis, tgt, 1 / tgt)
    print("(1+2a) erfcx max rel err", np.max(np.abs((basis @ c - tgt) / tgt)))
    return c


def fit_tanh_small(deg=5, t=0.625):
    # tanh(x) = x + x^3 * P(x^2), |x| <= t.
    xs = cheb_grid(1e-4, t, 4000)
    s = xs * xs
    tgt = np.array([float((mpmath.tanh(mpmath.mpf(x)) - x) / x ** 3) for x in xs])
    ref = np.array([float(mpmath.tanh(mpmath.mpf(x))) for x in xs])
    basis = np.stack([s ** k for k in range(deg)], axis=1)
    wt = xs ** 3 / ref
    c = lawson(basis, tgt, wt)
    print("tanh small max rel err", np.max(np.abs(wt * (basis @ c - tgt))))
    return c


def fit_expm1(deg=5):
    # expm1(r) = r + r^2/2 + r^3 * P(r), |r| <= ln2/2.
    h = float(mpmath.log(2)) / 2
    rs = cheb_grid(-h, h, 4000)
    rs = rs[np.abs(rs) > 1e-5]
    tgt = np.array([float((mpmath.expm1(mpmath.mpf(r)) - r - r * r / 2) / r ** 3) for r in rs])
    ref = np.array([float(mpmath.expm1(mpmath.mpf(r))) for r in rs])
    basis = np.stack([rs ** k for k in range(deg)], axis=1)
    wt = rs ** 3 / ref
    c = lawson(basis, tgt, wt)
    print("expm1 max rel err", np.max(np.abs(wt * (basis @ c - tgt))))
    return c


def fit_exp(deg=5):
    # exp(r) = 1 + r + r^2 * P(r), |r| <= ln2/2.
    h = float(mpmath.log(2)) / 2
    rs = cheb_grid(-h, h, 4000)
    rs = rs[np.abs(rs) > 1e-5]
    tgt = np.array([float((mpmath.exp(mpmath.mpf(r)) - 1 - r) / r ** 2) for r in rs])
    ref = np.array([float(mpmath.exp(mpmath.mpf(r))) for r in rs])
    basis = np.stack([rs ** k for k in range(deg)], axis=1)
    wt = rs ** 2 / ref
    c = lawson(basis, tgt, wt)
    print("exp max rel err", np.max(np.abs(wt * (basis @ c - tgt))))
    return c


def fit_exp_for_bf16(deg=4):
    """exp(r), |r| <= ln2/2, as one degree-4 polynomial fitted relative to exp (all coefficients
    free): the attention row step's exp for probabilities rounded to bf16 next
    (vecmath_avx512.h, expForBf16Probabilities)."""
    h = float(mpmath.log(2)) / 2
    rs = cheb_grid(-h, h, 4000)
    ref = np.array([float(mpmath.exp(mpmath.mpf(r))) for r in rs])
    basis = np.stack([rs ** k for k in range(deg + 1)], axis=1)
    c = lawson(basis, ref, 1 / ref)
    print("exp for bf16 max rel err", np.max(np.abs((basis @ c - ref) / ref)))
    return c


def fit_log(deg=8):
    # log(1 + f) = f - f^2/2 + f^3 * P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1].
    fs = cheb_grid(np.sqrt(0.5) - 1, np.sqrt(2) - 1, 4000)
    fs = fs[np.abs(fs) > 1e-5]
    tgt = np.array([float((mpmath.log1p(mpmath.mpf(f)) - f + f * f / 2) / f ** 3) for f in fs])
    ref = np.array([float(mpmath.log1p(mpmath.mpf(f))) for f in fs])
    basis = np.stack([fs ** k for k in range(deg)], axis=1)
    wt = fs ** 3 / ref
    c = lawson(basis, tgt, wt)
    print("log max rel err", np.max(np.abs(wt * (basis @ c - tgt))))
    return c


if __name__ == "__main__":
    # Coefficients are printed lowest order first; the header evaluates them by Horner from the top.
    show("exp P", f32(fit_exp()))
    show("exp for bf16 P", f32(fit_exp_for_bf16()))
    show("expm1 P", f32(fit_expm1()))
    show("log P", f32(fit_log()))
    show("erf small P", f32(fit_erf_small()))
    show("(1+2a) erfcx(q)", f32(fit_erfcx()))
    show("tanh small P", f32(fit_tanh_small()))
    show_table("kGeluErfPhiPieces", fit_gelu_pieces(phi_erf))
    show_table("kGeluTanhPhiPieces", fit_gelu_pieces(phi_tanh))
