"""Minimized fuzz cases kept as regression tests (issue 7).

Every failure ``python -m verifuse fuzz`` finds is minimized and printed as a ``Case``; paste its
dict here with the fuzz seed it came from. A case whose bug is not fixed yet gets ``xfail``
(strict, so the fix is noticed) with the reason.

Until the fuzzer finds a failure, this file keeps hand-picked edge cases of the generator's
operator set that the fixed-seed CI batch may not draw (marked ``origin: "edge"``).
"""
import pytest

from verifuse import fuzz

REGRESSIONS = [
    # origin, case, batches (extra batch sizes through the same compiled callable), xfail reason
    # Found by the 30-minute run `python -m verifuse fuzz --seconds 1800 --seed 2026112101`
    # (2026-11-21): under dynamic shapes the plan's "pooling window fits" assumption ignored
    # ceil_mode, so a valid model (a 1-long signal into a ceil-mode avg pool, kernel 2 stride 2)
    # failed its own shape guard in strict mode. Fixed in guards.py (ceil_mode adds stride - 1).
    ("fuzz 30 min: dynamic conv1d to length 1, then ceil-mode avg pool wider than the input",
     {"seed": 2026118179338122, "input_shape": [1, 1, 5], "dynamic": True, "layers": [
         {"op": "conv", "nd": 1, "out": 1, "k": 5, "stride": 1, "padding": 0, "dilation": 1, "groups": 1,
          "bias": False, "bn": False, "act": {"name": "none"}},
         {"op": "pool", "kind": "avg", "nd": 1, "k": 2, "stride": 2, "padding": 0, "ceil": True}]}, None, None),
    # Found by `python -m verifuse fuzz --seed 2` (cases 2000083/-127/-157/-166, minimized) against
    # the fused executor in the working tree on 2026-11-21 (not yet committed then): plan.run raised
    # a RuntimeError with an empty message for view -> transpose -> contiguous -> (mul) -> reshape.
    # Passes on the committed executor; kept so the regression cannot land.
    ("fuzz seed 2: view, transpose, contiguous, reshape",
     {"seed": 2000166, "input_shape": [1, 8], "dynamic": False, "layers": [{"op": "view_roundtrip", "split": 2}]},
     None, None),
    ("fuzz seed 2: flatten then view, transpose, contiguous, reshape",
     {"seed": 2000089, "input_shape": [1, 4, 8], "dynamic": False, "layers": [
         {"op": "flatten"}, {"op": "view_roundtrip", "split": 2}]}, None, None),
    ("edge: depthwise dilated strided conv3d + BN + hardswish",
     {"seed": 101, "input_shape": [2, 4, 7, 6, 7], "dynamic": False, "layers": [
         {"op": "conv", "nd": 3, "out": 4, "k": 3, "stride": 2, "padding": 2, "dilation": 2, "groups": 4,
          "bias": False, "bn": True, "act": {"name": "hardswish"}}]}, None, None),
    ("edge: ceil-mode pools with padding, then adaptive max",
     {"seed": 102, "input_shape": [3, 3, 17, 17], "dynamic": False, "layers": [
         {"op": "pool", "kind": "max", "nd": 2, "k": 3, "stride": 2, "padding": 1, "ceil": True},
         {"op": "pool", "kind": "avg", "nd": 2, "k": 3, "stride": 2, "padding": 1, "ceil": True},
         {"op": "pool", "kind": "adaptive_max", "nd": 2, "out": 3}]}, None, None),
    ("edge: residual conv+BN then concat with a gelu-tanh branch, flatten, linear with 1 output",
     {"seed": 103, "input_shape": [2, 4, 8, 8], "dynamic": False, "layers": [
         {"op": "residual", "inner": "conv", "nd": 2, "bn": True, "act": {"name": "relu6"}, "bias": True},
         {"op": "concat", "nd": 2, "out": 2, "act": {"name": "gelu_tanh"}},
         {"op": "view_flatten"},
         {"op": "linear", "out": 1, "bias": True, "act": {"name": "sigmoid"}}]}, None, None),
    ("edge: per-channel affine then BN1d then clamp / elu on an MLP, dynamic batch",
     {"seed": 104, "input_shape": [3, 33], "dynamic": True, "layers": [
         {"op": "affine", "mul": True, "add": True},
         {"op": "bn", "act": {"name": "clamp", "min": -0.5, "max": 0.5}},
         {"op": "linear", "out": 31, "bias": False, "act": {"name": "elu", "alpha": 0.5}},
         {"op": "dropout"},
         {"op": "residual", "inner": "linear", "act": {"name": "leaky_relu", "slope": 0.2}, "bias": True}]},
     [5, 8], None),
    ("edge: conv1d k=5 dilation 2 with bias, avg pool, hardtanh / hardsigmoid / tanh chain",
     {"seed": 105, "input_shape": [1, 3, 23], "dynamic": False, "layers": [
         {"op": "conv", "nd": 1, "out": 8, "k": 5, "stride": 1, "padding": 2, "dilation": 2, "groups": 1,
          "bias": True, "bn": False, "act": {"name": "hardtanh", "min": -1.0, "max": 2.0}},
         {"op": "pool", "kind": "avg", "nd": 1, "k": 2, "stride": 2, "padding": 0, "ceil": False},
         {"op": "act", "act": {"name": "hardsigmoid"}},
         {"op": "act", "act": {"name": "tanh"}},
         {"op": "reshape_flatten"}]}, None, None),
]


def _params():
    out = []
    for origin, case, batches, xfail in REGRESSIONS:
        marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
        out.append(pytest.param(case, batches, id=origin.split(":")[0] + "-" + str(case["seed"]), marks=marks))
    return out


def test_transpose_contiguous_reshape():
    """The fuzz failure above, as plain code: x.t().contiguous().reshape(-1)."""
    import torch

    def f(x):
        return x.t().contiguous().reshape(16)

    x = torch.randn(2, 8)
    with torch.no_grad():
        got = torch.compile(f, backend="verifuse", options={"strict": True})(x)
    assert torch.equal(got, f(x))


@pytest.mark.parametrize("case_dict,batches", _params())
def test_regression(case_dict, batches):
    case = fuzz.Case.from_dict(case_dict)
    assert fuzz._valid(case), "the kept case is not a valid model any more"
    outcome = fuzz.run_case(case, batches)
    assert outcome.ok, fuzz.reproducer(case, outcome)
