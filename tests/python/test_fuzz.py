"""Differential fuzzing (issue 7): a fixed-seed batch of random models, verifuse (strict) vs eager.

CI runs ``CI_GRAPHS`` cases of seed 0 (about 0.5 s each on a 2-core box); ``python -m verifuse fuzz
--seconds N`` runs longer. Tolerances are verifuse.fuzz.RTOL / ATOL (1e-4, 1e-4 x max(1, max|eager|)).
"""
import dataclasses
import io

import pytest
import torch

import verifuse
from verifuse import fuzz

CI_SEED = 0
CI_GRAPHS = 40


def test_generation_is_deterministic_per_seed():
    for s in range(30):
        a, b = fuzz.generate(s), fuzz.generate(s)
        assert a == b
        assert fuzz._valid(a), a
        ma, mb = fuzz.build(a), fuzz.build(b)
        for (na, ta), (nb, tb) in zip(ma.state_dict().items(), mb.state_dict().items()):
            assert na == nb and torch.equal(ta, tb)
        assert torch.equal(fuzz.make_input(a), fuzz.make_input(b))
    assert fuzz.generate(1) != fuzz.generate(2)


def test_generator_covers_the_operator_set():
    ops, acts, pools, nds = set(), set(), set(), set()
    for s in range(400):
        case = fuzz.generate(s)
        nds.add(len(case.input_shape))
        for layer in case.layers:
            ops.add(layer["op"])
            if "act" in layer:
                acts.add(layer["act"]["name"])
            if layer["op"] == "pool":
                pools.add(layer["kind"])
            if layer["op"] == "conv":
                ops.add(f"conv{layer['nd']}d")
                if layer["groups"] > 1:
                    ops.add("grouped")
                if layer["dilation"] > 1:
                    ops.add("dilated")
                if layer["bn"]:
                    ops.add("conv+bn")
    assert nds == {2, 3, 4, 5}
    assert {"conv1d", "conv2d", "conv3d", "grouped", "dilated", "conv+bn", "linear", "bn", "act", "residual",
            "affine", "pool", "concat", "dropout", "identity", "flatten", "view_flatten", "reshape_flatten",
            "view_roundtrip"} <= ops
    assert set(fuzz.ACTIVATIONS) == acts
    assert pools == {"max", "avg", "adaptive_avg", "adaptive_max"}


def test_comparator_catches_wrong_results():
    want = torch.randn(4, 5) * 100
    assert fuzz.compare(want.clone(), want).ok
    assert fuzz.compare(want + 1e-3, want).ok  # within 1e-4 * max|want| (~1e-2) absolute
    bad = want.clone()
    bad[1, 2] += 0.5
    out = fuzz.compare(bad, want)
    assert not out.ok and out.kind == "mismatch"
    assert fuzz.compare(want[:3], want).kind == "shape"
    assert fuzz.compare(want.double(), want).kind == "shape"
    nan = want.clone()
    nan[0, 0] = float("nan")
    assert fuzz.compare(nan, want).kind == "nan"
    assert fuzz.compare(nan, nan.clone()).ok
    inf = want.clone()
    inf[0, 0] = float("inf")
    assert not fuzz.compare(inf, want).ok


def test_minimizer_drops_layers_and_prints_a_runnable_reproducer():
    # A synthetic failure: "fails" whenever the case still contains a conv with dilation 2.
    case = fuzz.Case(seed=3, input_shape=[2, 4, 12, 12], layers=[
        {"op": "bn", "act": {"name": "relu"}},
        {"op": "conv", "nd": 2, "out": 8, "k": 3, "stride": 1, "padding": 1, "dilation": 2, "groups": 1,
         "bias": True, "bn": True, "act": {"name": "silu"}},
        {"op": "act", "act": {"name": "tanh"}},
        {"op": "pool", "kind": "max", "nd": 2, "k": 2, "stride": 2, "padding": 0, "ceil": False},
    ])
    assert fuzz._valid(case)

    def check(c):
        bad = any(l["op"] == "conv" and l["dilation"] == 2 for l in c.layers)
        return fuzz.Outcome(not bad, "mismatch" if bad else "ok")

    small = fuzz.minimize(case, "mismatch", check)
    assert len(small.layers) == 1 and small.layers[0]["op"] == "conv"
    assert small.layers[0]["act"] == {"name": "none"} and not small.layers[0]["bn"]
    assert small.input_shape[0] == 1
    src = fuzz.reproducer(small, fuzz.Outcome(False, "mismatch", "synthetic"))
    compile(src, "<reproducer>", "exec")
    assert "Case.from_dict" in src
    assert fuzz.Case.from_dict(dataclasses.asdict(small)) == small


def test_fixed_seed_batch_matches_eager():
    """The CI batch: every case compiles in strict mode (no fallback) and matches eager."""
    out = io.StringIO()
    before = verifuse.stats()["graphs_verifuse"]
    summary = fuzz.fuzz(seconds=600, seed=CI_SEED, max_graphs=CI_GRAPHS, out=out)
    print(out.getvalue())
    assert summary["graphs"] == CI_GRAPHS
    assert summary["invalid_generated"] == 0, "the generator produced models eager rejects"
    assert summary["failures"] == 0, out.getvalue()
    assert verifuse.stats()["graphs_verifuse"] - before >= CI_GRAPHS


def test_cli_runs_and_reports(capsys):
    from verifuse.__main__ import main

    assert main(["fuzz", "--max-graphs", "2", "--seed", "7", "--seconds", "60"]) == 0
    assert "verifuse fuzz: 2 graphs run, 0 failures" in capsys.readouterr().out
