"""int8 runs of the peer benchmark (``--dtype int8``, issue 17): the PT2E-quantized graph reaches
every backend, the float32 model is the second yardstick, ``-int8`` keys files and fingerprints,
a peer that cannot run the quantized graph is recorded as such and left out of the best peer, and
float32 results still load. Tiny models, fake backends (no inductor compile), no timing asserted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

BENCH = Path(__file__).resolve().parents[2] / "bench"
_mod = sys.modules.get("verifuse_bench")
if _mod is not None and Path(_mod.__file__).resolve().parent.parent != BENCH:  # test the checkout's bench/
    for _n in [n for n in sys.modules if n == "verifuse_bench" or n.startswith("verifuse_bench.")]:
        del sys.modules[_n]
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from verifuse_bench import backends as bk
from verifuse_bench import harness, orchestrate, suites
from verifuse_bench.backends import BackendDef, CompileCtx
from verifuse_bench.cli import build_parser
from verifuse_bench.harness import BenchOptions, run_benchmark
from verifuse_bench.report import to_markdown
from verifuse_bench.suites import BenchModel, Inputs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="needs torchao")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(harness, "_AVAILABILITY_CACHE", {})
    monkeypatch.setattr(harness, "_AVAILABILITY_DETAILS", {})
    yield
    torch.set_num_threads(old)


class TinyCNN(nn.Module):
    """conv-bn-relu, a residual conv + add + relu (the shape untie_resnet_relus exists for), pool, linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.c2(y) + y)
        return self.fc(y.mean((2, 3)))


def _img_inputs(batch: int, seed: int) -> Inputs:
    return Inputs((torch.randn(batch, 3, 12, 12, generator=torch.Generator().manual_seed(seed + 7)),))


TINY_CNN = BenchModel("int8_tiny_cnn", "own", "cnn", "tiny CNN (tests)", lambda seed: TinyCNN(), _img_inputs,
                      "3x12x12", "logits", lambda out: out, default_batches=(2,), tiny=True)


class GraphSpy:
    """A torch.compile backend that runs the graph as is and records the quantized ops it got."""

    def __init__(self):
        self.quantized_ops: list[int] = []

    def __call__(self, gm, example_inputs):
        self.quantized_ops.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"
                                      and "quantized_decomposed" in str(n.target)))
        return gm.forward


def spy_backend(name: str, spy: GraphSpy, info: dict | None = None) -> BackendDef:
    def compile_(model, opts, threads):
        return CompileCtx(compiled=torch.compile(model, backend=spy, dynamic=False), first_call=torch.no_grad(),
                          info=dict(info or {}))

    return BackendDef(name, lambda: (True, None, {}), compile_, is_peer=True)


def _opts(models, backends, **kw) -> BenchOptions:
    base = dict(iters=2, warmup=1, chunk=1, time_budget_s=5.0, min_iters=1, plot=False)
    base.update(kw)
    return BenchOptions(models=models, backends=backends, **base)


def _with_tiny_cnn(monkeypatch):
    monkeypatch.setitem(suites.registry(), TINY_CNN.name, TINY_CNN)


def test_int8_quantized_graph_reaches_every_backend(monkeypatch):
    _with_tiny_cnn(monkeypatch)
    spies = {"inductor": GraphSpy(), "verifuse": GraphSpy()}
    for name, spy in spies.items():
        monkeypatch.setitem(bk.BACKENDS, name, spy_backend(name, spy))
    rep = run_benchmark(_opts([TINY_CNN.name], ["eager", "inductor", "verifuse"], dtype="int8"), log=lambda s: None)
    assert not rep["errors"], rep["errors"]
    (e,) = rep["results"]
    assert e["dtype"] == "int8"
    q = e["quantization"]
    assert q["quantized_ops"] and q["channels_last_inputs"] and len(q["calibration_seeds"]) >= 2
    assert q["weight_layers"]["int8_weights"] == 3 and q["weight_layers"]["float_weights"] == 0  # c1, c2, fc
    for name, spy in spies.items():
        # Dynamo handed the backend a graph with the quantize/dequantize ops of the PT2E graph
        assert spy.quantized_ops and spy.quantized_ops[0] > 0, name
        assert e["backends"][name]["graph_quantized_ops"] > 0
    assert e["backends"]["eager"]["graph_quantized_ops"] > 0
    own = e["eager_own_int8_error"]  # eager int8 vs the float32 model
    assert own["max_abs_diff"] > 0 and 0.0 <= own["top1_agreement_vs_float32"] <= 1.0
    assert own["top1_samples"] == 2 * 4  # benchmark batch + three extra random inputs
    acc = e["backends"]["verifuse"]["accuracy"]
    assert acc["max_abs_diff"] == 0.0  # the spy runs the same graph as eager
    assert acc["max_abs_diff_vs_float32"] == pytest.approx(own["max_abs_diff"])
    assert acc["top1_agreement_vs_float32"] == pytest.approx(own["top1_agreement_vs_float32"])
    assert acc["ok"] and acc["eager_own_int8_max_abs_diff"] == own["max_abs_diff"]
    md = to_markdown(rep)
    assert "int8" in md and "top-1" in md and "X86InductorQuantizer" in md


def test_the_worker_process_quantizes_and_records_a_model_it_cannot_quantize(monkeypatch, tmp_path):
    """verifuse_bench.worker.run_one (one configuration, the body of each isolated process), called
    in this process so the test model and the spy backend are visible to it."""
    from dataclasses import asdict

    from verifuse_bench import worker

    _with_tiny_cnn(monkeypatch)
    spy = GraphSpy()
    monkeypatch.setitem(bk.BACKENDS, "verifuse", spy_backend("verifuse", spy))
    opts = _opts([TINY_CNN.name], ["eager", "verifuse"], dtype="int8", inductor_cache="warm")
    res = worker.run_one({"opts": asdict(opts), "model": TINY_CNN.name, "batch": 2, "threads": 1})
    assert res["complete"] and not res["errors"], res["errors"]
    assert res["dtype"] == "int8" and res["entry"]["quantization"]["quantized_ops"]
    assert spy.quantized_ops[0] > 0 and res["entry"]["backends"]["verifuse"]["graph_quantized_ops"] > 0

    class NoQuant(nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 2

    bm = BenchModel("int8_noquant", "own", "mlp", "tanh (tests)", lambda seed: NoQuant(),
                    lambda b, s: Inputs((torch.randn(b, 4),)), "4", "y", lambda o: o, tiny=True)
    monkeypatch.setitem(suites.registry(), bm.name, bm)
    opts = _opts([bm.name], ["eager"], dtype="int8", inductor_cache="warm")
    res = worker.run_one({"opts": asdict(opts), "model": bm.name, "batch": 1, "threads": 1})
    assert res["complete"] and res["entry"] is None
    assert [e["stage"] for e in res["errors"]] == ["quantize"]


def test_float32_runs_get_no_quantized_graph(monkeypatch):
    _with_tiny_cnn(monkeypatch)
    spy = GraphSpy()
    monkeypatch.setitem(bk.BACKENDS, "verifuse", spy_backend("verifuse", spy))
    rep = run_benchmark(_opts([TINY_CNN.name], ["eager", "verifuse"]), log=lambda s: None)
    (e,) = rep["results"]
    assert spy.quantized_ops == [0] and "quantization" not in e and "eager_own_int8_error" not in e
    assert "graph_quantized_ops" not in e["backends"]["verifuse"]


def test_a_model_the_flow_cannot_quantize_is_recorded_not_eager_failed(monkeypatch):
    class NoQuant(nn.Module):  # nothing the X86 quantizer annotates
        def forward(self, x):
            return torch.tanh(x) * 2

    bm = BenchModel("int8_noquant", "own", "mlp", "tanh (tests)", lambda seed: NoQuant(),
                    lambda b, s: Inputs((torch.randn(b, 4),)), "4", "y", lambda o: o, tiny=True)
    monkeypatch.setitem(suites.registry(), bm.name, bm)
    rep = run_benchmark(_opts([bm.name], ["eager"], dtype="int8"), log=lambda s: None)
    assert rep["results"] == []
    (err,) = rep["errors"]
    assert err["stage"] == "quantize" and "quantized_decomposed" in err["error"]


def test_int8_tag_in_file_names_fingerprints_and_cli():
    assert harness.dtype_tag("int8") == "-int8"
    assert orchestrate.config_file_name("resnet50", 1, 1, "int8") == "resnet50-b1-t1-int8.json"
    assert orchestrate.config_file_name("resnet50", 1, 1) == "resnet50-b1-t1.json"
    fps = {d: orchestrate.fingerprint(_opts(["resnet50"], ["eager"], dtype=d), "resnet50", 1, 1)
           for d in ("float32", "bfloat16", "int8")}
    assert len(set(fps.values())) == 3
    assert harness.default_json_path(_opts(["resnet50"], ["eager"], dtype="int8", suite="own")).name.startswith(
        "bench-own-int8-")
    assert build_parser().parse_args(["--dtype", "int8"]).dtype == "int8"


def test_int8_and_float32_configurations_resume_independently(tmp_path):
    cfg_dir = tmp_path / "r.d"
    cfg_dir.mkdir()
    f32, i8 = _opts(["mlp_small"], ["eager"]), _opts(["mlp_small"], ["eager"], dtype="int8")
    (cfg_dir / orchestrate.config_file_name("mlp_small", 8, 1)).write_text(json.dumps(
        {"complete": True, "fingerprint": orchestrate.fingerprint(f32, "mlp_small", 8, 1)}))
    assert orchestrate._reusable(f32, cfg_dir, "mlp_small", 8, 1) is not None
    assert orchestrate._reusable(i8, cfg_dir, "mlp_small", 8, 1) is None  # the float32 file is not an int8 result


def test_peer_that_ran_the_quantized_graph_in_pytorch_is_not_the_best_peer():
    info = {"ran_in_pytorch": 1, "ran_in_pytorch_reasons": ["OpenVINO execution failed with ..."]}
    harness.int8_evidence("openvino", info)
    assert info["int8_not_run"] and info["int8_kernels"] is False

    def ok(ms, **kw):
        return {"status": "ok", "latency_ms": {"median": ms}, "accuracy": {"ok": True}, **kw}

    r = harness.config_ratios({"eager": ok(10.0), "inductor": ok(5.0), "openvino": ok(1.0, **info),
                               "verifuse": ok(4.0)})
    assert r["best_peer"] == "inductor" and "openvino" in r["peers_excluded"]
    ind = {"freezing": {"int8_ops": {"qconv2d_pointwise": 2}}}
    harness.int8_evidence("inductor", ind)
    nf = {"freezing": {"int8_ops": {}}}
    harness.int8_evidence("inductor-nofreeze", nf)
    assert ind["int8_kernels"] and not nf["int8_kernels"] and "int8_not_run" not in nf


def test_inductor_int8_ops_from_generated_code():
    code = ("extern_kernels.x = torch.ops.onednn.qconv2d_pointwise.default(buf0, 0.1, 3)\n"
            "torch.ops.onednn.qlinear_pointwise.tensor(buf1)\ntorch.ops.mkldnn._linear_pointwise(buf2)\n")
    ev = harness.analyze_inductor_code([code])
    assert ev["int8_ops"] == {"qconv2d_pointwise": 1, "qlinear_pointwise": 1}


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="needs openvino")
def test_openvino_on_the_quantized_graph_is_recorded(monkeypatch):
    """OpenVINO 2026.4's torch.compile backend cannot convert the PT2E graph (i8 convolution/addmm
    against an f32 bias) and runs it in PyTorch: recorded as int8_not_run. If a later OpenVINO
    runs it, the record says so instead (int8_not_run absent) and this test shows the change."""
    _with_tiny_cnn(monkeypatch)
    m = TINY_CNN.build(0)
    rm = harness.model_for_dtype(TINY_CNN, m, TINY_CNN.make_inputs(2, 0), "int8", 2, 0)
    p = harness.prepare_backend("openvino", rm.model, rm.inputs, _opts([TINY_CNN.name], ["openvino"], dtype="int8",
                                                                       warmup=0), 1)
    assert p.status == "ok", p.reason
    assert p.info["graph_quantized_ops"] > 0
    out = p.fn()
    with torch.no_grad():
        same_as_eager = torch.equal(out, rm.model(*rm.inputs.args))
    if same_as_eager:  # bit-identical to eager int8: it ran in PyTorch, and the record must say so
        assert p.info["ran_in_pytorch"] >= 1, p.info
        assert p.info["int8_not_run"] == harness.OPENVINO_INT8_NOT_RUN
    else:
        assert "int8_not_run" not in p.info


def test_openvino_fallback_found_after_a_long_conversion_report(monkeypatch):
    """The fallback message ends a many-line conversion report (> 500 characters)."""
    import logging

    monkeypatch.setattr(bk.torch, "compile", lambda model, **kw: model)
    ctx = bk._openvino_compile(torch.nn.Identity(), _opts(["mlp_small"], ["eager"], dtype="int8"), 1)
    with ctx.first_call:
        logging.getLogger("openvino.frontend.pytorch.torchdynamo.execute").debug(
            "OpenVINO execution failed with Check 'false' failed " + "x" * 2000
            + ". Falling back to native PyTorch execution.")
    assert ctx.info["ran_in_pytorch"] == 1
    assert ctx.info["ran_in_pytorch_reasons"][0].endswith("Falling back to native PyTorch execution.")


def test_float32_results_without_int8_fields_still_render():
    rep = {"schema": "verifuse-bench/2", "created": "x", "suites": ["own"], "environment": {},
           "settings": {"backends": ["eager", "verifuse"], "iters": 1, "chunk": 1, "warmup": 0, "time_budget_s": 1,
                        "inductor_cache": "cold", "seed": 0},
           "backends": {}, "errors": [], "summary": {"geomeans": []},
           "results": [{"model": "m", "batch": 1, "threads": 1, "ratios": {"speedup_vs_eager": {"verifuse": 2.0}},
                        "backends": {"eager": {"status": "ok", "latency_ms": {"median": 2.0, "p90": 2.0}},
                                     "verifuse": {"status": "ok", "latency_ms": {"median": 1.0, "p90": 1.0},
                                                  "accuracy": {"ok": True, "max_abs_diff": 0.0}}}}]}
    md = to_markdown(rep)
    assert "float32" in md and "top-1" not in md and "int8" not in md


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_gpt2_conv1d_gets_no_int8_weight_and_is_not_benchmarked_as_int8():
    """GPT-2's Conv1D layers are addmm, which X86InductorQuantizer does not annotate: the
    "quantized" graph would be the float model; the flow refuses it with the reason."""
    from verifuse_bench.suite_hf import _e, _simple, text_inputs

    bm = _e("gpt2_tiny", "transformer", "", _simple("GPT2Model", "GPT2Config", dict(
        vocab_size=100, n_embd=16, n_layer=1, n_head=2, use_cache=False)), text_inputs(8, 100), "", "last_hidden_state",
        (1,))
    with pytest.raises(RuntimeError, match="no layer got an int8 weight.*aten.addmm"):
        harness.model_for_dtype(bm, bm.build(0), bm.make_inputs(1, 0), "int8", 1, 0)


def test_verifuse_int8_kernels_are_recorded_from_its_graph_reports(monkeypatch):
    ok, why, _ = harness.backend_availability("verifuse")
    if not ok:
        pytest.skip(why)
    m = TINY_CNN.build(0)
    rm = harness.model_for_dtype(TINY_CNN, m, TINY_CNN.make_inputs(2, 0), "int8", 2, 0)
    p = harness.prepare_backend("verifuse", rm.model, rm.inputs, _opts([TINY_CNN.name], ["verifuse"], dtype="int8",
                                                                       warmup=0), 1)
    assert p.status == "ok", p.reason
    if p.info.get("fallback_warnings"):
        pytest.skip(f"this verifuse build runs the int8 graph on eager: {p.info['fallback_warnings'][0]}")
    assert p.info["int8_kernels"] and p.info["int8_ops"].get("verifuse::qconv", 0) >= 2, p.info.get("int8_ops")
