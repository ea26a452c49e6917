"""Tests for the benchmark suite (bench/verifuse_bench): models and harness plumbing.

Timings are never asserted on; these tests check that models build with the right shapes and
parameter counts and that the harness produces a well-formed JSON report.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

try:
    import verifuse_bench  # noqa: F401  (installed by setup.py)
except ImportError:  # source checkout: bench/ on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from verifuse_bench import models as vm  # noqa: E402
from verifuse_bench.models import MODELS, count_params  # noqa: E402

SMALL = [n for n, s in MODELS.items() if s.small]
FULL = [n for n, s in MODELS.items() if not s.small]


@pytest.fixture(autouse=True)
def _one_thread():
    """2 OpenMP threads on a loaded 2-core box are 10x slower than 1; keep the tests quick."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _all_eval(model: torch.nn.Module) -> bool:
    return all(not m.training for m in model.modules())


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_small_model_forward(name):
    spec = MODELS[name]
    model, input_fn = spec.build(seed=0)
    assert _all_eval(model)
    x = input_fn(2)
    assert tuple(x.shape) == (2, *spec.input_shape)
    with torch.no_grad():
        y = model(x)
    assert tuple(y.shape) == spec.expected_output_shape(2)
    assert torch.isfinite(y).all()
    # activations stay O(1): BN stats were calibrated (keeps accuracy diffs meaningful)
    assert 1e-3 < float(y.abs().max()) < 1e3


@pytest.mark.parametrize("name", FULL)
def test_full_model_shapes_on_meta(name):
    """Full-size models at their real input size; meta tensors keep this free of compute."""
    spec = MODELS[name]
    with torch.device("meta"):
        model = spec.factory().eval()
        x = torch.empty((1, *spec.input_shape))
        with torch.no_grad():
            y = model(x)
    assert tuple(y.shape) == spec.expected_output_shape(1)


@pytest.mark.parametrize(
    "factory,expected",
    [
        (vm.resnet18, 11_689_512),  # torchvision resnet18: 11.69M
        (vm.resnet50, 25_557_032),  # torchvision resnet50: 25.56M
        (vm.mobilenet_v2, 3_504_872),  # torchvision mobilenet_v2: 3.50M
        # BERT-base encoder without embeddings/pooler: 12 x 7,087,872 = 85.05M
        (lambda: vm.BertEncoder(12, 768, 12, 3072), 85_054_464),
        (lambda: vm.TorchTransformerEncoder(12, 768, 12, 3072), 85_054_464),
    ],
    ids=["resnet18", "resnet50", "mobilenet_v2", "bert_base", "bert_base_te"],
)
def test_param_counts(factory, expected):
    with torch.device("meta"):
        model = factory()
    assert count_params(model) == expected


def test_bert_layer_param_count():
    with torch.device("meta"):
        layer = vm.BertLayer(768, 12, 3072)
    # QKV 3*(768*768+768) + out 768*768+768 + FFN 768*3072+3072 + 3072*768+768 + 2 LN * 1536
    assert count_params(layer) == 7_087_872


def test_registry_expected_params_consistent():
    for name, spec in MODELS.items():
        if spec.expected_params is None:
            continue
        with torch.device("meta"):
            model = spec.factory()
        assert count_params(model) == spec.expected_params, name


def test_resnet_block_structure_matches_torchvision():
    with torch.device("meta"):
        r18, r50 = vm.resnet18(), vm.resnet50()
    assert [len(getattr(r18, f"layer{i}")) for i in range(1, 5)] == [2, 2, 2, 2]
    assert [len(getattr(r50, f"layer{i}")) for i in range(1, 5)] == [3, 4, 6, 3]
    b = r50.layer2[0]  # v1.5: stride on the 3x3 conv
    assert b.conv1.stride == (1, 1) and b.conv2.stride == (2, 2)
    assert r50.fc.in_features == 2048 and r18.fc.in_features == 512
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in r18.modules()) == 20
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in r50.modules()) == 53


def test_mobilenet_structure():
    with torch.device("meta"):
        m = vm.mobilenet_v2()
    blocks = [f for f in m.features if isinstance(f, vm.InvertedResidual)]
    assert len(blocks) == 17
    assert sum(b.use_res_connect for b in blocks) == 10
    dw = [c for c in m.modules() if isinstance(c, torch.nn.Conv2d) and c.groups > 1]
    assert len(dw) == 17 and all(c.groups == c.in_channels == c.out_channels for c in dw)
    assert sum(isinstance(c, torch.nn.ReLU6) for c in m.modules()) == 35


def test_build_is_deterministic_and_bn_nontrivial():
    spec = MODELS["mlp_small"]
    m1, f1 = spec.build(seed=3)
    m2, f2 = spec.build(seed=3)
    x1, x2 = f1(4), f2(4)
    assert torch.equal(x1, x2)
    with torch.no_grad():
        assert torch.equal(m1(x1), m2(x2))
    bn = next(m for m in m1.modules() if isinstance(m, torch.nn.BatchNorm1d))
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))
    # building must not disturb the global RNG
    torch.manual_seed(123)
    a = torch.rand(3)
    torch.manual_seed(123)
    spec.build(seed=0)
    assert torch.equal(torch.rand(3), a)


def test_get_spec_unknown():
    with pytest.raises(KeyError):
        vm.get_spec("no_such_model")


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------


def test_stats_helpers():
    from verifuse_bench.harness import geomean, latency_stats

    s = latency_stats([float(i) for i in range(1, 11)])
    assert s["n"] == 10 and s["median"] == pytest.approx(5.5) and s["p90"] == pytest.approx(9.1)
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, float("nan")]) is None


def _check_report_keys(data, backends):
    for k in ("schema", "created", "settings", "environment", "backends", "results", "summary", "errors"):
        assert k in data, k
    env = data["environment"]
    for k in ("torch_version", "cpu_model", "load_avg", "cpu_count"):
        assert k in env, k
    assert set(data["backends"]) == set(backends)
    assert data["results"], data.get("errors")
    e = data["results"][0]
    for k in ("model", "family", "batch", "threads", "backends", "ratios", "load_avg_before",
              "load_avg_after", "rounds"):
        assert k in e, k
    assert set(e["backends"]) == set(backends)
    eager = e["backends"]["eager"]
    assert eager["status"] == "ok"
    for k in ("median", "p90", "n"):
        assert k in eager["latency_ms"]
    assert "speedup_vs_eager" in e["ratios"]
    assert "verifuse_vs_inductor" in e["ratios"]
    assert "compile_ratio_verifuse_inductor" in e["ratios"]
    assert isinstance(data["summary"]["geomeans"], list)
    return e


def test_cli_eager_and_verifuse_never_crash(tmp_path):
    """verifuse may be missing or half-built: it must be reported, not crash the run."""
    from verifuse_bench.cli import main

    out = tmp_path / "r.json"
    rc = main(["--quick", "--models", "mlp_small", "--backends", "eager,verifuse", "--iters", "3",
               "--warmup", "1", "--json", str(out), "--no-print"])
    assert rc == 0
    data = json.loads(out.read_text())
    e = _check_report_keys(data, ["eager", "verifuse"])
    assert e["backends"]["verifuse"]["status"] in ("ok", "unavailable", "failed")
    if e["backends"]["verifuse"]["status"] != "ok":
        assert e["backends"]["verifuse"]["reason"]
    assert out.with_suffix(".md").exists()


def test_cli_usage_errors(tmp_path):
    from verifuse_bench.cli import main

    assert main(["--models", "nope", "--json", str(tmp_path / "x.json")]) == 2
    assert main(["--backends", "eager,tvm", "--json", str(tmp_path / "x.json")]) == 2
    assert main(["--list"]) == 0


def test_quick_run_eager_inductor_json(tmp_path):
    """A --quick run with eager and inductor(freezing) on one small model (~20-40 s on 2 cores)."""
    from verifuse_bench.cli import main

    out = tmp_path / "bench.json"
    rc = main(["bench", "--quick", "--models", "mlp_small", "--backends", "eager,inductor",
               "--iters", "5", "--warmup", "1", "--json", str(out), "--no-print"])
    assert rc == 0
    data = json.loads(out.read_text())
    e = _check_report_keys(data, ["eager", "inductor"])
    ind = e["backends"]["inductor"]
    assert ind["status"] == "ok", ind.get("reason")
    assert ind["compile_s"] > 0
    assert ind["freezing_config_at_trace"] is True and ind["grad_enabled_at_trace"] is False
    assert ind["freezing"]["frozen_params"] > 0 and ind["freezing"]["verified"] is True
    acc = ind["accuracy"]
    assert acc["max_abs_diff"] is not None and math.isfinite(acc["max_abs_diff"])
    assert e["ratios"]["speedup_vs_eager"]["inductor"] > 0
    md = out.with_suffix(".md").read_text()
    assert "| mlp_small |" in md


def test_backend_compile_failure_is_recorded(monkeypatch):
    """A backend that raises while compiling is reported as failed; the run goes on."""
    from verifuse_bench import harness

    def broken_compile(model, **kwargs):
        def call(*a, **k):
            raise RuntimeError("boom: unsupported op")

        return call

    monkeypatch.setattr(harness, "backend_availability", lambda name: (True, None, 0.0))
    monkeypatch.setattr(harness.torch, "compile", broken_compile)
    opts = harness.BenchOptions(models=["mlp_small"], backends=["eager", "verifuse"], iters=3, warmup=1)
    report = harness.run_benchmark(opts, log=lambda s: None)
    e = report["results"][0]
    assert e["backends"]["eager"]["status"] == "ok"
    v = e["backends"]["verifuse"]
    assert v["status"] == "failed" and "boom" in v["reason"]
    assert e["ratios"]["speedup_vs_eager"] == {} and e["ratios"]["verifuse_vs_inductor"] is None
