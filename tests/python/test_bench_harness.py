"""Tests of the peer benchmark harness (bench/verifuse_bench): suites, backends, the method's rules,
the JSON schema and the plot. No timing is ever asserted on.

CI installs only requirements.txt: transformers / timm / torchvision / openvino / zentorch /
matplotlib may all be missing. The harness tests therefore run on the project's own tiny models
with fake backends (cheap ``torch.compile`` backends defined here) and a peer forced missing
(``VERIFUSE_BENCH_DISABLE``); the per-suite cases skip when their library is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench_source import BENCH, use_source_tree_bench  # noqa: E402

use_source_tree_bench()

from verifuse_bench import backends as bk  # noqa: E402
from verifuse_bench import harness  # noqa: E402
from verifuse_bench import orchestrate  # noqa: E402
from verifuse_bench.backends import BackendDef, CompileCtx  # noqa: E402
from verifuse_bench.harness import BenchOptions, run_benchmark  # noqa: E402
from verifuse_bench.report import to_markdown, write_report  # noqa: E402
from verifuse_bench.suites import SUITES, get_model, registry, resolve, suite_models  # noqa: E402

HAS = {m: importlib.util.find_spec(m) is not None for m in ("transformers", "timm", "matplotlib")}


@pytest.fixture(autouse=True)
def _one_thread_fresh_caches(monkeypatch):
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(harness, "_AVAILABILITY_CACHE", {})
    monkeypatch.setattr(harness, "_AVAILABILITY_DETAILS", {})
    yield
    torch.set_num_threads(old)


class CountingBackend:
    """A torch.compile backend that runs the graph as is and counts its compiles."""

    def __init__(self):
        self.compiles = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1
        return gm.forward


def fake_backend(name: str, counter: CountingBackend | None = None) -> BackendDef:
    counter = counter or CountingBackend()

    def compile_(model, opts, threads):
        return CompileCtx(compiled=torch.compile(model, backend=counter, dynamic=False),
                          first_call=torch.no_grad(), info={"fake": True})

    d = BackendDef(name, lambda: (True, None, {"note": "test backend"}), compile_, is_peer=False)
    d.counter = counter  # type: ignore[attr-defined]
    return d


def _opts(models, backends, **kw) -> BenchOptions:
    base = dict(iters=3, warmup=1, chunk=2, time_budget_s=5.0, min_iters=2)
    base.update(kw)
    return BenchOptions(models=models, backends=backends, **base)


def _check_schema(data: dict) -> None:
    assert data["schema"] == "verifuse-bench/2"
    for k in ("created", "finished", "settings", "suites", "environment", "backends", "results", "summary",
              "errors"):
        assert k in data, k
    env = data["environment"]
    for k in ("torch_version", "cpu_model", "cpu_flags", "isa_summary", "avx512", "load_avg", "load_avg_end",
              "cpu_count"):
        assert k in env, k
    for e in data["results"]:
        for k in ("model", "suite", "family", "batch", "threads", "input_shape", "output_compared", "params",
                  "load_avg_before", "load_avg_after", "rounds", "recompiles_during_timing", "compile_order",
                  "backends", "ratios"):
            assert k in e, k
        for k in ("speedup_vs_eager", "inductor_best", "best_peer", "verifuse_vs_best_peer",
                  "verifuse_vs_inductor", "compile_ratio_verifuse_inductor"):
            assert k in e["ratios"], k
        for name, b in e["backends"].items():
            assert b["status"] in ("ok", "unavailable", "failed"), (name, b)
            if b["status"] != "ok":
                assert b["reason"]
                continue
            for k in ("compile_s", "latency_ms", "samples_ms", "memory", "cpu_utilization",
                      "recompiles_during_timing"):
                assert k in b, (name, k)
            for k in ("median", "p90", "n"):
                assert k in b["latency_ms"]
            if name != "eager":
                for k in ("accuracy", "graphs", "graph_breaks"):
                    assert k in b, (name, k)
                # Dynamo's share of the first call, measured (not the whole call, not nothing)
                assert 0 < b["dynamo_s"] < b["compile_s"], (name, b.get("dynamo_s"), b["compile_s"])
    for g in data["summary"]["geomeans"]:
        for k in ("suite", "batch", "threads", "scope", "n_configs", "speedup_vs_eager", "verifuse_vs_best_peer",
                  "n_used", "best_peer_counts"):
            assert k in g, k


# ---------------------------------------------------------------------------------------------
# Suites
# ---------------------------------------------------------------------------------------------


def test_every_suite_has_models_and_a_tiny_stand_in():
    reg = registry()
    for suite in SUITES:
        assert suite_models(suite), suite
        assert suite_models(suite, tiny=True), suite
    for name, e in reg.items():
        assert e.family in ("cnn", "transformer", "mlp"), name
        assert e.default_batches and e.output and e.input_desc, name
    assert resolve(["bert_base"], "hf") == ["hf_bert_base"]
    assert resolve(["resnet50"], "own") == ["resnet50"]
    with pytest.raises(KeyError):
        resolve(["no_such_model"], "timm")
    assert {"hf_llama_prefill", "hf_llama_decode", "hf_whisper_encoder"} <= set(suite_models("hf"))


def test_missing_library_makes_a_model_unavailable_not_a_crash(monkeypatch):
    e = get_model("hf_bert_tiny")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    assert e.missing_requirements() == ["transformers"]
    report = run_benchmark(_opts(["hf_bert_tiny"], ["eager"]), log=lambda s: None)
    assert report["results"] == []
    assert report["errors"][0]["stage"] == "unavailable" and "transformers" in report["errors"][0]["error"]


# ---------------------------------------------------------------------------------------------
# Harness: a peer missing, fake backends, the no-reset rule
# ---------------------------------------------------------------------------------------------


def test_own_tiny_model_with_a_missing_peer(monkeypatch, tmp_path):
    monkeypatch.setenv(bk.DISABLE_ENV, "openvino")
    monkeypatch.setitem(bk.BACKENDS, "fake", fake_backend("fake"))
    report = run_benchmark(_opts(["mlp_small"], ["eager", "fake", "openvino"]), log=lambda s: None)
    assert report["backends"]["openvino"]["status"] == "unavailable"
    assert "VERIFUSE_BENCH_DISABLE" in report["backends"]["openvino"]["reason"]
    e = report["results"][0]
    assert e["backends"]["openvino"]["status"] == "unavailable"
    assert e["backends"]["fake"]["status"] == "ok" and e["backends"]["fake"]["accuracy"]["ok"]
    assert e["backends"]["fake"]["memory"]["rss_before_mb"] is not None
    assert e["ratios"]["best_peer"] is None and e["ratios"]["verifuse_vs_best_peer"] is None
    jp, mp = write_report(report, tmp_path / "r.json", plot=False)
    data = json.loads(jp.read_text())
    _check_schema(data)
    md = mp.read_text()
    assert "**openvino unavailable**" in md and "| mlp_small |" in md and "verifuse vs the best peer" in md


def test_no_reset_between_backends_no_recompiles(monkeypatch):
    """Each backend compiles once per configuration: a later backend's compile does not make an
    earlier backend's compiled function recompile (the harness never calls torch._dynamo.reset()
    between backends), neither while timing nor in the accuracy calls."""
    a, b = fake_backend("fake-a"), fake_backend("fake-b")
    monkeypatch.setitem(bk.BACKENDS, "fake-a", a)
    monkeypatch.setitem(bk.BACKENDS, "fake-b", b)
    resets = []
    real_reset = torch._dynamo.reset
    monkeypatch.setattr(torch._dynamo, "reset", lambda: (resets.append(1), real_reset())[1])
    spec = get_model("encoder_2l")
    model = spec.build(0)
    opts = _opts(["encoder_2l"], ["eager", "fake-a", "fake-b"])
    entry = harness.run_config(spec, model, spec.make_inputs(1, 0), 1, 1, opts, log=lambda s: None)
    assert resets == []
    assert a.counter.compiles == 1 and b.counter.compiles == 1
    assert entry["recompiles_during_timing"] == 0
    for name in ("fake-a", "fake-b"):
        assert entry["backends"][name]["status"] == "ok"
        assert entry["backends"][name]["recompiles_during_timing"] == 0
        assert entry["backends"][name]["graphs"] == 1


def test_why_the_rule_exists_a_reset_recompiles_earlier_backends():
    import copy

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
    ca, cb = CountingBackend(), CountingBackend()
    fa = torch.compile(m, backend=ca, dynamic=False)
    fb = torch.compile(copy.deepcopy(m), backend=cb, dynamic=False)
    x = torch.randn(2, 4)
    with torch.no_grad():
        fa(x)
        fb(x)
        fa(x)
        assert (ca.compiles, cb.compiles) == (1, 1)  # no reset: nothing recompiles
        torch._dynamo.reset()
        fa(x)
    assert ca.compiles == 2  # a reset between backends would recompile the earlier one


def test_inductor_does_not_run_a_leaked_joint_custom_post_pass(monkeypatch):
    """zentorch leaves torch._inductor.config.joint_custom_post_pass set after its compile; the
    harness's inductor compile must not run it (a control run without the harness does: the
    pass is called once on the same model, see docs/benchmarking.md)."""
    import torch._inductor.config as ic
    from torch._inductor.custom_graph_pass import CustomGraphPass

    calls = []

    class LeakedPass(CustomGraphPass):
        def __call__(self, graph):
            calls.append(1)

        def uuid(self):
            return "verifuse-bench-test-leaked-pass"

    monkeypatch.setattr(ic, "joint_custom_post_pass", LeakedPass())
    spec = get_model("mlp_small")
    model = spec.build(0)
    opts = _opts(["mlp_small"], ["eager", "inductor"], warmup=0)
    p = harness.prepare_backend("inductor", model, spec.make_inputs(8, 0), opts, 1)
    assert p.status == "ok", p.reason
    assert calls == []
    assert p.info["joint_custom_post_pass_at_trace"] is None
    assert p.info["freezing_config_at_trace"] is True and p.info["freezing"]["verified"] is True
    assert p.info["freezing"]["omp_parallel_regions"] == 0  # compiled for the 1 thread it was given
    assert isinstance(ic.joint_custom_post_pass, LeakedPass)  # restored, not cleared behind our back


@pytest.mark.parametrize("model,lib", [("hf_llama_tiny_decode", "transformers"), ("timm_test_resnet", "timm"),
                                       ("tv_shufflenet_tiny", "torchvision")])
def test_tiny_model_per_suite(model, lib, monkeypatch):
    e = get_model(model)
    missing = e.missing_requirements()
    if missing:
        pytest.skip(f"{lib} not installed: {missing}")
    monkeypatch.setenv(bk.DISABLE_ENV, "zentorch")
    monkeypatch.setitem(bk.BACKENDS, "fake", fake_backend("fake"))
    report = run_benchmark(_opts([model], ["eager", "fake", "zentorch"], iters=2, warmup=0), log=lambda s: None)
    assert not report["errors"], report["errors"]
    r = report["results"][0]
    assert r["suite"] == e.suite
    assert r["backends"]["zentorch"]["status"] == "unavailable"
    fake = r["backends"]["fake"]
    assert fake["status"] == "ok", fake.get("reason")
    assert fake["accuracy"]["ok"], fake["accuracy"]
    assert fake["recompiles_during_timing"] == 0


# ---------------------------------------------------------------------------------------------
# Ratios, the process orchestration, the plot
# ---------------------------------------------------------------------------------------------


def _b(median, compile_s=1.0, acc_ok=True, dynamo_s=None):
    b = {"status": "ok", "latency_ms": {"median": median}, "compile_s": compile_s,
         "accuracy": {"ok": acc_ok, "max_rel_diff": 0.0 if acc_ok else 1.0}}
    if dynamo_s is not None:
        b["dynamo_s"] = dynamo_s
    return b


def test_config_ratios_best_peer():
    r = harness.config_ratios({
        "eager": {"status": "ok", "latency_ms": {"median": 100.0}},
        "inductor": _b(50.0, 20.0), "inductor-nofreeze": _b(40.0, 10.0, dynamo_s=1.0),
        "openvino": _b(30.0, acc_ok=False), "zentorch": _b(45.0),
        "verifuse": _b(60.0, 2.0, dynamo_s=1.1)})
    assert r["inductor_best"] == "inductor-nofreeze"
    assert r["speedup_vs_eager_inductor_best"] == pytest.approx(2.5)
    assert r["best_peer"] == "inductor-nofreeze"  # openvino is faster but inaccurate
    assert r["peers_excluded"] == {"openvino": "accuracy check failed"}
    assert r["verifuse_vs_best_peer"] == pytest.approx(40.0 / 60.0)
    assert r["verifuse_vs_inductor"] == pytest.approx(40.0 / 60.0)
    assert r["compile_ratio_verifuse_inductor"] == pytest.approx(0.2)
    # without Dynamo's own tracing: (2.0 - 1.1) / (10.0 - 1.0)
    assert r["compile_ratio_verifuse_inductor_after_dynamo"] == pytest.approx(0.1)
    assert r["compile_ratio_verifuse_openvino"] == pytest.approx(2.0)  # compile time counts even if inaccurate


def test_crashed_process_is_retried_without_the_culprit(monkeypatch, tmp_path):
    from verifuse_bench import orchestrate

    calls = []

    def fake_spawn(spec, timeout_s):
        calls.append(list(spec["opts"]["backends"]))
        if len(calls) == 1:
            Path(spec["heartbeat"]).write_text(json.dumps({"stage": "compile", "backend": "openvino"}))
            return None, "the process was killed by signal 11 (SIGSEGV)"
        entry = {"model": spec["model"], "backends": {"eager": {"status": "ok", "latency_ms": {"median": 1.0}}}}
        return {"complete": True, "entry": entry, "errors": []}, None

    monkeypatch.setattr(orchestrate, "_spawn", fake_spawn)
    opts = _opts(["mlp_small"], ["eager", "openvino"], isolate=True)
    res = orchestrate.run_config_process(opts, "mlp_small", 8, 1, tmp_path / "c.json", "[1/1]", lambda s: None)
    assert calls == [["eager", "openvino"], ["eager"]]
    ov = res["entry"]["backends"]["openvino"]
    assert ov["status"] == "failed" and "SIGSEGV" in ov["reason"] and "compile" in ov["reason"]
    assert json.loads((tmp_path / "c.json").read_text())["killed"] == {"openvino": ov["reason"]}


def test_cli_one_process_per_configuration_and_resume(tmp_path, monkeypatch, capfd):
    """The CLI's default: one process per configuration, each writing its own file; --resume
    reuses it without starting a process. A disabled peer is recorded as unavailable."""
    from verifuse_bench.cli import main

    monkeypatch.setenv(bk.DISABLE_ENV, "openvino")
    out = tmp_path / "run.json"
    args = ["--models", "mlp_small", "--backends", "eager,openvino", "--iters", "2", "--warmup", "0",
            "--time-budget", "5", "--json", str(out), "--no-print", "--no-plot"]
    assert main(args) == 0
    err = capfd.readouterr().err
    assert "[1/1 mlp_small b8 t1]" in err and "eager: reference call" in err  # the worker's progress
    data = json.loads(out.read_text())
    _check_schema(data)
    assert data["backends"]["openvino"]["status"] == "unavailable"
    cfg = tmp_path / "run.d" / "mlp_small-b8-t1.json"
    first = json.loads(cfg.read_text())
    assert first["complete"] and first["entry"]["process"]["isolated"] is True
    assert first["entry"]["process"]["pid"] != os.getpid()
    assert data["results"][0]["backends"]["openvino"]["status"] == "unavailable"
    assert main(args + ["--resume"]) == 0
    assert "reused mlp_small-b8-t1.json" in capfd.readouterr().err
    again = json.loads(out.read_text())
    assert again["results"][0]["process"]["pid"] == first["entry"]["process"]["pid"]
    assert again["backends"]["openvino"]["status"] == "unavailable"


def _synthetic_report() -> dict:
    def entry(model, batch):
        bs = {"eager": {"status": "ok", "latency_ms": {"median": 10.0, "p90": 11.0, "n": 3}, "compile_s": 0.0},
              "inductor": dict(_b(5.0, 12.0), latency_ms={"median": 5.0, "p90": 6.0, "n": 3}),
              "openvino": {"status": "unavailable", "reason": "not installed"},
              "verifuse": dict(_b(4.0, 2.0), latency_ms={"median": 4.0, "p90": 4.5, "n": 3})}
        return {"model": model, "suite": "own", "family": "cnn", "batch": batch, "threads": 1, "backends": bs,
                "ratios": harness.config_ratios(bs)}

    results = [entry("m1", 1), entry("m2", 1), entry("m1", 8)]
    opts = BenchOptions(models=["m1", "m2"], backends=["eager", "inductor", "openvino", "verifuse"])
    from dataclasses import asdict

    return {"schema": harness.SCHEMA, "created": "now", "suites": ["own"], "settings": asdict(opts),
            "environment": harness.environment_info(), "backends": {}, "results": results, "errors": [],
            "summary": harness.summarize(results, opts.backends)}


@pytest.mark.skipif(not HAS["matplotlib"], reason="matplotlib not installed")
def test_plot_written_as_png(tmp_path):
    rep = _synthetic_report()
    jp, mp = write_report(rep, tmp_path / "p.json", plot=True)
    png = tmp_path / "p.png"
    assert rep["plot"]["status"] == "ok"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "![speed-up and compile time](p.png)" in mp.read_text()
    g = [g for g in rep["summary"]["geomeans"] if g["batch"] == 1][0]
    assert g["verifuse_vs_best_peer"] == pytest.approx(1.25)


def test_plot_without_matplotlib_is_reported(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_mpl(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    rep = _synthetic_report()
    _, mp = write_report(rep, tmp_path / "n.json", plot=True)
    assert rep["plot"]["status"] == "unavailable" and "matplotlib" in rep["plot"]["reason"]
    assert not (tmp_path / "n.png").exists()
    assert "plot not written" in mp.read_text()
    assert "no AVX-512" in to_markdown(rep) or "AVX-512" in to_markdown(rep)


# ---------------------------------------------------------------------------------------------
# torchvision in the bench process only
# ---------------------------------------------------------------------------------------------


def _run_py(code: str, **env_over) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_over)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_no_torchvision_is_a_reason_not_a_crash(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(BENCH)!r}); "
            "import importlib.util as u\n"
            "from verifuse_bench.vendor import ensure_torchvision\n"
            "ok, why = ensure_torchvision()\n"
            "print(ok if u.find_spec('torchvision') is None else 'site', why)")
    r = _run_py(code, VERIFUSE_BENCH_VENDOR=str(tmp_path / "empty"))
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip()
    assert out.startswith("site") or (out.startswith("False") and "make bench-deps" in out)


@pytest.mark.skipif(not HAS["transformers"], reason="transformers not installed")
def test_transformers_plain_and_torchvision_in_bench_process():
    """After `make bench-deps`: transformers imports in a plain process (torchvision is not visible
    to it), and the bench process then gets torchvision (and timm) through the vendor directory."""
    code = ("from transformers import BertModel\n"
            "print('TRANSFORMERS OK', flush=True)\n"
            f"import sys; sys.path.insert(0, {str(BENCH)!r})\n"
            "from verifuse_bench.vendor import ensure_torchvision, torchvision_info\n"
            "ok, why = ensure_torchvision()\n"
            "if not ok: print('SKIP', why); raise SystemExit(0)\n"
            "import torchvision.models as m\n"
            "m.resnet18(weights=None)\n"
            "print('OK', torchvision_info())")
    r = _run_py(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("TRANSFORMERS OK")
    if "SKIP" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert "\nOK " in r.stdout


# ---------------------------------------------------------------------------------------------
# --dtype bfloat16 (issue 19)
# ---------------------------------------------------------------------------------------------


class DtypeRecordingBackend(CountingBackend):
    """Records the dtypes of the floating-point tensors a compiled graph sees (inputs, parameters,
    buffers)."""

    def __init__(self):
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def __call__(self, gm, example_inputs):
        ts = [t for t in example_inputs if isinstance(t, torch.Tensor)] + list(gm.parameters()) + list(gm.buffers())
        self.dtypes |= {t.dtype for t in ts if t.is_floating_point()}
        return super().__call__(gm, example_inputs)


def test_bf16_reaches_the_model_and_its_inputs_in_the_worker(monkeypatch, tmp_path):
    """worker.run_one with dtype bfloat16: the compiled graph sees only bf16 parameters and inputs,
    the eager reference is bf16, eager's own bf16 error (vs float32 on the same weights) is
    measured, and the backend's accuracy is judged against it."""
    from verifuse_bench import worker

    rec = DtypeRecordingBackend()
    monkeypatch.setitem(bk.BACKENDS, "fake", fake_backend("fake", rec))
    opts = _opts(["mlp_small"], ["eager", "fake"], dtype="bfloat16")
    from dataclasses import asdict

    res = worker.run_one({"mode": "config", "opts": asdict(opts), "model": "mlp_small", "batch": 4, "threads": 1,
                          "out": str(tmp_path / "o.json")})
    assert res["complete"] and res["dtype"] == "bfloat16", res.get("errors")
    e = res["entry"]
    assert rec.dtypes == {torch.bfloat16}
    assert e["dtype"] == "bfloat16" and set(e["param_dtypes"]) == {"bfloat16"}
    assert e["input_dtypes"] == {"arg0": "bfloat16"}
    own = e["eager_own_bf16_error"]
    assert own["max_abs_diff"] > 0  # bf16 rounding is visible against float32
    acc = e["backends"]["fake"]["accuracy"]
    # the fake backend runs the same graph as eager: no error of its own
    assert acc["max_abs_diff"] == 0 and acc["vs_eager_own_error"] == 0 and acc["ok"]
    assert acc["max_abs_diff_vs_float32"] == pytest.approx(own["max_abs_diff"])
    md = to_markdown({"schema": harness.SCHEMA, "created": "now", "suites": ["own"], "settings": asdict(opts),
                      "environment": res["environment"], "backends": res["backends"], "results": [e],
                      "errors": [], "summary": harness.summarize([e], opts.backends)})
    assert md.startswith("# verifuse bench — own — bfloat16 —")
    assert "err vs eager / eager's own bf16 err" in md and "| 1 (own) |" in md
    # a verifuse that ran its graphs in eager is marked where the speed-ups are read
    e["backends"]["verifuse"] = dict(e["backends"]["fake"], verifuse_stats_delta={"graphs_fallback": 1})
    opts.backends.append("verifuse")
    md = to_markdown({"schema": harness.SCHEMA, "created": "now", "suites": ["own"], "settings": asdict(opts),
                      "environment": res["environment"], "backends": {}, "results": [e], "errors": [],
                      "summary": {"geomeans": []}})
    assert "(eager fallback) |" in md and "1 graph(s) fell back to eager" in md


def test_float32_runs_stay_float32(monkeypatch):
    rec = DtypeRecordingBackend()
    monkeypatch.setitem(bk.BACKENDS, "fake", fake_backend("fake", rec))
    report = run_benchmark(_opts(["mlp_small"], ["eager", "fake"]), log=lambda s: None)
    e = report["results"][0]
    assert rec.dtypes == {torch.float32} and e["dtype"] == "float32"
    assert "eager_own_bf16_error" not in e and "vs_eager_own_error" not in e["backends"]["fake"]["accuracy"]
    assert "err vs eager / eager's own bf16 err" not in to_markdown(report)


def test_bf16_inputs_kv_cache_bf16_ids_int64():
    """Floating-point inputs become bf16, also inside lists (the Llama decode step's KV cache);
    token ids, position ids and integer masks stay int64."""
    from verifuse_bench.suite_hf import LLAMA_TINY, decode_inputs, text_inputs

    dec = harness.cast_inputs(decode_inputs(LLAMA_TINY, 8)(2, 0), torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in dec.kwargs["past_keys"] + dec.kwargs["past_values"])
    assert isinstance(dec.kwargs["past_keys"], list)
    for k in ("input_ids", "attention_mask", "position_ids"):
        assert dec.kwargs[k].dtype == torch.int64, k
    txt = harness.cast_inputs(text_inputs(16, 1000)(2, 0), torch.bfloat16)
    assert txt.args[0].dtype == torch.int64 and txt.kwargs["attention_mask"].dtype == torch.int64
    model, inp = harness.apply_dtype(torch.nn.Linear(4, 4), harness.Inputs((torch.randn(2, 4),)), "bfloat16")
    assert model.weight.dtype == torch.bfloat16 and inp.args[0].dtype == torch.bfloat16
    with pytest.raises(ValueError):
        harness.apply_dtype(model, inp, "float16")


def test_bf16_accuracy_is_judged_against_eagers_own_error():
    own = {"max_abs_diff": 0.1}
    ok = {"max_abs_diff": 0.15}
    harness.bf16_accuracy(ok, {"max_abs_diff": 0.08}, own)
    assert ok["ok"] and ok["vs_eager_own_error"] == pytest.approx(1.5)
    bad = {"max_abs_diff": 0.5}
    harness.bf16_accuracy(bad, {"max_abs_diff": 0.45}, own)
    assert not bad["ok"] and bad["vs_eager_own_error"] == pytest.approx(5.0)


def test_openvino_precision_hint_follows_the_dtype(monkeypatch):
    """bf16 runs ask OpenVINO for bf16 inference; float32 runs keep forcing f32 (its default on
    CPUs with AVX512-BF16/AMX would be bf16)."""
    assert bk.openvino_options(2)["config"] == {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": "2"}
    assert bk.openvino_options(1, "bfloat16")["config"]["INFERENCE_PRECISION_HINT"] == "bf16"
    seen = []

    def fake_compile(model, **kw):
        seen.append(kw)
        return lambda *a, **k: (model.weight.dtype, [t.dtype for t in a], {n: t.dtype for n, t in k.items()})

    monkeypatch.setattr(bk.torch, "compile", fake_compile)
    x, ids = torch.randn(2, 4, dtype=torch.bfloat16), torch.ones(2, 4, dtype=torch.long)
    for dtype, hint in (("float32", "f32"), ("bfloat16", "bf16")):
        model = torch.nn.Linear(4, 4).to(bk.torch.float32 if dtype == "float32" else torch.bfloat16)
        ctx = bk._openvino_compile(model, _opts(["mlp_small"], ["eager"], dtype=dtype), 1)
        assert ctx.info["openvino_options"]["config"]["INFERENCE_PRECISION_HINT"] == hint
        assert seen[-1]["options"]["config"]["INFERENCE_PRECISION_HINT"] == hint
        w, args, kwargs = ctx.compiled(x, ids=ids)
        if dtype == "bfloat16":
            # its torch.compile backend cannot take bf16 tensors: the float32 upcast, hint bf16
            assert w == torch.float32 and args == [torch.float32] and kwargs == {"ids": torch.long}
            assert "upcast" in ctx.info["bf16_via"]
        else:
            assert w == torch.float32 and args == [torch.bfloat16] and "bf16_via" not in ctx.info
    rep = _synthetic_report()
    rep["backends"] = {"openvino": {"status": "available"}}
    assert "'INFERENCE_PRECISION_HINT': 'f32'" in to_markdown(rep)
    rep["settings"]["dtype"] = "bfloat16"
    assert "'INFERENCE_PRECISION_HINT': 'bf16'" in to_markdown(rep)


def test_dtype_in_configuration_key_and_file_names():
    """bf16 results have their own file names and fingerprints; float32 names and fingerprints are
    the ones every earlier run has (so old per-configuration files are still resumed)."""
    import hashlib
    from dataclasses import replace

    assert orchestrate.config_file_name("hf_bert_base", 1, 1) == "hf_bert_base-b1-t1.json"
    assert orchestrate.config_file_name("hf_bert_base", 1, 1, "bfloat16") == "hf_bert_base-b1-t1-bf16.json"
    f32 = _opts(["mlp_small"], ["eager"], suite="hf")
    bf16 = replace(f32, dtype="bfloat16")
    assert harness.default_json_path(f32).name.startswith("bench-hf-2")
    assert harness.default_json_path(bf16).name.startswith("bench-hf-bf16-")
    # the float32 fingerprint as computed before --dtype existed
    d = {k: getattr(f32, k) for k in orchestrate._FINGERPRINT_KEYS}
    d.update(model="mlp_small", batch=8, threads=1, backends=sorted(f32.backends))
    old = hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert orchestrate.fingerprint(f32, "mlp_small", 8, 1) == old
    assert orchestrate.fingerprint(bf16, "mlp_small", 8, 1) != old


def test_bf16_and_float32_configurations_resume_independently(tmp_path):
    """A finished float32 configuration file is reused by a float32 --resume and ignored by a
    bf16 one (and the other way round): both live side by side in <run>.d/."""
    from dataclasses import replace

    f32 = _opts(["mlp_small"], ["eager"])
    bf16 = replace(f32, dtype="bfloat16")
    for o in (f32, bf16):
        name = orchestrate.config_file_name("mlp_small", 8, 1, o.dtype)
        (tmp_path / name).write_text(json.dumps({"complete": True, "dtype": o.dtype,
                                                 "fingerprint": orchestrate.fingerprint(o, "mlp_small", 8, 1)}))
    assert orchestrate._reusable(f32, tmp_path, "mlp_small", 8, 1)["dtype"] == "float32"
    assert orchestrate._reusable(bf16, tmp_path, "mlp_small", 8, 1)["dtype"] == "bfloat16"
    (tmp_path / "mlp_small-b8-t1-bf16.json").unlink()
    assert orchestrate._reusable(bf16, tmp_path, "mlp_small", 8, 1) is None


def test_old_schema_2_results_still_load(tmp_path):
    """Result files written before --dtype (no dtype anywhere) are float32 runs: they load,
    render and resume as before."""
    rep = _synthetic_report()
    rep["settings"].pop("dtype")
    for e in rep["results"]:
        e.pop("dtype", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(rep))
    old = json.loads(path.read_text())
    assert old["schema"] == "verifuse-bench/2" == harness.SCHEMA
    md = to_markdown(old)
    assert md.startswith("# verifuse bench — own — float32 —") and "| m1 | 1 | 1 |" in md
    assert BenchOptions.from_dict(old["settings"]).dtype == "float32"
    # A real /2 run from before --dtype, committed with the results. NOTE: keep it; a newer run of
    # the same configuration goes to a new name (peers-hf-b1-t1-s29.json), or this check loses it
    # (bench/results/INDEX.md lists it as kept for this test).
    real = BENCH / "results" / "peers-hf-b1-t1.json"
    if real.exists():
        data = json.loads(real.read_text())
        assert "dtype" not in data["settings"]
        assert "— float32 —" in to_markdown(data)


def test_openvino_running_a_graph_in_pytorch_is_recorded(monkeypatch):
    """OpenVINO's executor runs a subgraph in PyTorch for good when its execution fails (a DEBUG
    log only, e.g. for bf16 tensors); the results must say so."""
    import logging

    monkeypatch.setattr(bk.torch, "compile", lambda model, **kw: model)  # openvino may be missing
    ctx = bk._openvino_compile(torch.nn.Identity(), _opts(["mlp_small"], ["eager"]), 1)
    with ctx.first_call:
        logging.getLogger("openvino.frontend.pytorch.torchdynamo.execute").debug(
            "OpenVINO execution failed with torch.bfloat16. Falling back to native PyTorch execution.")
    assert ctx.info["ran_in_pytorch"] == 1 and "torch.bfloat16" in ctx.info["ran_in_pytorch_reasons"][0]


def test_flop_count_includes_cpu_attention():
    """gflop_per_call counts attention: torch's flop counter has no formula for ATen's fused CPU
    attention op, so an SDPA model counted only its linears (Whisper's encoder lost ~40%)."""
    import torch

    from verifuse_bench.harness import _count_flops

    q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
    _, gflop = _count_flops(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert gflop == pytest.approx(2 * 2 * (2 * 4 * 32 * 32 * 16) / 1e9)  # q·kᵀ and p·v, 2 FLOPs each
    lin = torch.nn.Linear(16, 8)
    _, gflop = _count_flops(lambda: lin(q))
    assert gflop == pytest.approx(2 * (2 * 4 * 32) * 16 * 8 / 1e9)


def test_ceiling_table_from_a_results_file(tmp_path, capsys):
    """bench/ceiling.py: the FLOP floor at the FMA peak of the threads used, verifuse's share of it,
    and the best peer's median over the floor (bf16 rows take the bf16 peak)."""
    spec = importlib.util.spec_from_file_location("ceiling", Path(__file__).parents[2] / "bench" / "ceiling.py")
    ceiling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ceiling)
    ok = lambda ms: {"status": "ok", "latency_ms": {"median": ms}}  # noqa: E731
    results = {"results": [
        {"model": "m32", "threads": 2, "batch": 1, "dtype": "float32", "gflop_per_call": 2.3,
         "backends": {"eager": ok(30.0), "verifuse": ok(12.5), "zentorch": ok(15.0), "openvino": ok(20.0),
                      "inductor": {"status": "error"}}},
        {"model": "m16", "threads": 1, "batch": 8, "dtype": "bfloat16", "gflop_per_call": 2.31,
         "backends": {"verifuse": ok(20.0), "openvino": ok(25.0)}},
    ]}
    (tmp_path / "r.json").write_text(json.dumps(results))
    assert ceiling.main([str(tmp_path / "r.json"), "--peak-f32", "115", "--peak-bf16", "231"]) == 0
    r32, r16 = ceiling.rows(results, 115.0, 231.0)
    assert r32["floor_ms"] == pytest.approx(10.0) and r32["pct_of_peak"] == pytest.approx(80.0)
    assert r32["best_peer"] == "zentorch" and r32["ceiling"] == pytest.approx(1.5) and r32["ratio"] == pytest.approx(1.2)
    assert r16["floor_ms"] == pytest.approx(10.0) and r16["ceiling"] == pytest.approx(2.5)
    assert "| m32 | 2.30 | 12.50 | 80% | 15.00 (zentorch) | 1.200 | 1.500 |" in capsys.readouterr().out


# ---- benchmark honesty (issue 43): verdicts with their uncertainty, the gate on verifuse, cold caches

def test_verdicts_come_from_the_interval_not_the_median():
    slow, fast = [10.0 + 0.1 * i for i in range(15)], [8.0 + 0.1 * i for i in range(15)]
    win = harness.ratio_uncertainty(fast, slow)
    assert win["verdict"] == "win" and win["verifuse_vs_best_peer_ci"][0] > 1
    assert win["verifuse_win_probability"] > 0.95
    assert harness.ratio_uncertainty(slow, fast)["verdict"] == "loss"
    # A 1-2% lead inside the spread of the calls is a tie, however the medians compare.
    noisy_v = [9.8, 10.4, 9.9, 10.6, 9.7, 10.2, 10.0, 10.5, 9.6, 10.1]
    noisy_p = [10.1, 9.9, 10.7, 10.0, 10.3, 9.8, 10.6, 10.2, 9.9, 10.4]
    tie = harness.ratio_uncertainty(noisy_v, noisy_p)
    assert tie["verdict"] == "tie"
    lo, hi = tie["verifuse_vs_best_peer_ci"]
    assert lo < 1 < hi and 0.3 < tie["verifuse_win_probability"] < 0.8
    assert harness.ratio_uncertainty(noisy_v, noisy_p) == tie  # deterministic
    assert harness.ratio_uncertainty([1.0, 2.0], noisy_p) == {}  # too few calls: no verdict



def test_verdicts_pair_the_calls_of_a_round_so_host_drift_cancels():
    """The host's speed drifts by up to 1.5x over minutes. Calls of one round are seconds apart,
    so a round's ratio cancels the drift: a steady 3% lead under drift is a win when paired, while
    the same calls resampled as independent cannot tell it from the drift (a tie). Equal speed
    under drift stays a tie; too few rounds falls back to the unpaired interval and says so."""
    drift = [1.0 + 0.5 * ((7 * j) % 15) / 14 for j in range(15)]  # host speed factor per round
    wobble = [1.0 + 0.004 * ((3 * j) % 5 - 2) for j in range(15)]
    verifuse = [9.7 * f * w for f, w in zip(drift, wobble)]
    peer = [10.0 * f for f in drift]
    paired = harness.ratio_uncertainty(verifuse, peer, chunk=1)
    assert paired["verdict_method"] == "paired by round (15 rounds of 1)"
    assert paired["verdict"] == "win" and paired["verifuse_vs_best_peer_ci"][0] > 1, paired
    assert paired["verifuse_win_probability"] == 1.0
    assert paired["verifuse_vs_best_peer_paired"] == pytest.approx(10.0 / 9.7, rel=0.01)
    unpaired = harness.ratio_uncertainty(verifuse, peer)
    assert unpaired["verdict"] == "tie" and unpaired["verdict_method"].startswith("unpaired"), unpaired
    equal = harness.ratio_uncertainty([10.0 * f * w for f, w in zip(drift, wobble)], peer, chunk=1)
    assert equal["verdict"] == "tie", equal
    # 15 calls in chunks of 5 are 3 rounds: too few to pair.
    assert harness.ratio_uncertainty(verifuse, peer, chunk=5)["verdict_method"].startswith("unpaired")
    # config_ratios pairs with the run's chunk.
    def b(samples):
        return {"status": "ok", "samples_ms": samples, "latency_ms": harness.latency_stats(samples),
                "accuracy": {"ok": True}}
    r = harness.config_ratios({"eager": b([20.0 * f for f in drift]), "inductor": b(peer),
                               "verifuse": b(verifuse)}, chunk=1)
    assert r["verdict"] == "win" and r["verdict_method"].startswith("paired"), r

def test_an_inaccurate_verifuse_row_is_a_failed_row():
    def backends(vf_ok: bool) -> dict:
        samples = {"eager": [100.0, 99.0, 101.0, 100.5], "inductor": [40.0, 41.0, 39.0, 40.5],
                   "verifuse": [30.0, 29.0, 31.0, 30.5]}
        out = {"eager": {"status": "ok"}, "inductor": _b(40.0), "verifuse": _b(30.0, acc_ok=vf_ok)}
        for name, b in out.items():
            b["samples_ms"] = samples[name]
            b["latency_ms"] = harness.latency_stats(samples[name])
        return out

    good = harness.config_ratios(backends(True))
    assert good["verifuse_vs_best_peer"] == pytest.approx(40.25 / 30.25) and good["verdict"] == "win"
    bad = harness.config_ratios(backends(False))
    assert bad["verifuse_failed"] == "accuracy check failed"
    assert bad["verifuse_vs_best_peer"] is None and "verdict" not in bad
    results = [{"model": m, "family": "mlp", "batch": 1, "threads": 1, "suite": "own",
                "backends": backends(ok), "ratios": harness.config_ratios(backends(ok))}
               for m, ok in (("a", True), ("b", False))]
    (g,) = [g for g in harness.summarize(results, ["eager", "inductor", "verifuse"])["geomeans"]
            if g["batch"] == 1 and g["scope"] == "all"]
    assert g["verdicts"] == {"win": 1, "tie": 0, "loss": 0, "failed": 1}
    assert g["n_used"]["verifuse_vs_best_peer"] == 1  # the failed row is not in the geomean
    from verifuse_bench import report as bench_report

    opts = _opts(["mlp_small"], ["eager", "inductor", "verifuse"])
    report = harness._new_report(opts, None)
    report["results"] = results
    harness.finish_report(report, opts)
    text = bench_report.to_markdown(report)
    assert "FAILED (accuracy check failed)" in text and "1 / 0 / 0 (1)" in text


def test_verifuse_compiles_each_configuration_into_its_own_empty_cache(monkeypatch):
    """Cold like the peers: a second configuration of the same model tunes again (no decision
    from the first one's database) and a warm compile from the configuration's own directory is
    reported apart."""
    pytest.importorskip("verifuse")
    spec = get_model("mlp_small")
    opts = _opts(["mlp_small"], ["eager", "verifuse"])
    assert opts.verifuse_cache == "cold"
    entries = []
    for _ in range(2):
        torch._dynamo.reset()
        entries.append(harness.run_config(spec, spec.build(0), spec.make_inputs(8, 0), 8, 1, opts, log=lambda s: None))
    dirs = [e["backends"]["verifuse"]["verifuse_cache_dir"] for e in entries]
    assert dirs[0] != dirs[1]
    for e in entries:
        b = e["backends"]["verifuse"]
        assert b["status"] == "ok", b
        stats = b.get("verifuse_stats_delta", {})
        assert stats.get("timings_run", 0) > 0, stats  # tuned afresh, also the second time
        assert stats.get("tuning_db_hits", 0) == 0, stats
        assert b["compile_warm_s"] is not None and b["compile_warm_s"] > 0


def test_inductor_is_the_fastest_accurate_of_its_variants():
    assert {"inductor-max-autotune", "inductor-cpp-wrapper"} <= set(bk.ALL_BACKENDS) <= set(bk.BACKENDS)
    r = harness.config_ratios({
        "eager": {"status": "ok", "latency_ms": {"median": 100.0}},
        "inductor": _b(50.0), "inductor-nofreeze": _b(45.0),
        "inductor-max-autotune": _b(30.0, acc_ok=False), "inductor-cpp-wrapper": _b(40.0),
        "verifuse": _b(42.0)})
    assert r["inductor_best"] == "inductor-cpp-wrapper" and r["best_peer"] == "inductor-cpp-wrapper"
    assert r["verifuse_vs_best_peer"] == pytest.approx(40.0 / 42.0)


def test_inductor_variants_compile_with_their_settings(monkeypatch):
    """max-autotune and cpp_wrapper reach inductor's config at trace time (with freezing)."""
    spec = get_model("mlp_small")
    model = spec.build(0)
    opts = _opts(["mlp_small"], ["eager", "inductor-cpp-wrapper"])
    entry = harness.run_config(spec, model, spec.make_inputs(2, 0), 2, 1, opts, log=lambda s: None)
    b = entry["backends"]["inductor-cpp-wrapper"]
    assert b["status"] == "ok", b
    assert b["cpp_wrapper_config_at_trace"] is True and b["freezing_config_at_trace"] is True
    assert b["accuracy"]["ok"]


# ---- the README's results block --------------------------------------------------------------------

def test_readme_results_block_says_what_its_files_say():
    """The README's "Measured" tables are generated from committed result JSON: the block names
    its files, and regenerating it from them must give the README's text unchanged."""
    from verifuse_bench import readme

    path = BENCH.parent / "README.md"
    text = path.read_text()
    names = readme.sources_of(text)
    assert names, "README.md has no generated results block"
    files = [BENCH / "results" / n for n in names]
    assert all(f.is_file() for f in files), names
    assert readme.replace_block(text, readme.render(files)) == text, (
        "README.md's results block differs from its sources: "
        "PYTHONPATH=bench python -m verifuse_bench.readme --update README.md " + " ".join(map(str, files)))


def test_readme_block_counts_verdicts_from_the_file(tmp_path):
    """A changed verdict in the JSON changes the README's table and its win/tie/loss count, so a
    hand edit of either cannot survive the check above."""
    from verifuse_bench import readme

    src = BENCH / "results" / "peers-hf-b1-t1-s47-amx.json"
    data = json.loads(src.read_text())
    before = readme.render([src])
    data["results"][0]["ratios"]["verdict"] = "win"
    for g in data["summary"]["geomeans"]:
        if g["scope"] == "all" and g["batch"] != "all":
            g["verdicts"] = {"win": 3, "tie": 4, "loss": 4}
    changed = tmp_path / src.name
    changed.write_text(json.dumps(data))
    after = readme.render([changed])
    assert after != before
    assert "| hf_bert_base | 329.0 | inductor-cpp-wrapper | 232.8 | 268.6 | 0.87x | 0.82-1.00 | win |" in after
    assert "**3 wins, 4 ties, 4 losses**" in after


def test_readme_block_shares_one_table_between_files_of_the_same_configurations(tmp_path):
    """Files that measured the same configurations (one sweep per CPU tier) share one table, a column
    group per file, each file's CPU / tier / date / commit above it and its geomean below; files of
    different configurations keep a table each."""
    from verifuse_bench import readme

    src = BENCH / "results" / "peers-hf-b1-t1-s47-amx.json"
    data = json.loads(src.read_text())
    capped = json.loads(src.read_text())
    capped["environment"]["tier"] = {"tier": "avx2", "cap": "avx2", "cpu_tier": "amx"}
    capped["results"][0]["ratios"]["verdict"] = "win"
    other = tmp_path / "capped.json"
    other.write_text(json.dumps(capped))
    block = readme.render([src, other])
    assert block.count("| model |") == 1
    assert "| model | amx: best peer | its ms | verifuse ms | vs best peer (95% interval) | verdict | avx2: best peer |" in block
    assert ("| hf_bert_base | inductor-cpp-wrapper | 232.8 | 268.6 | 0.87x (0.82-1.00) | tie | "
            "inductor-cpp-wrapper | 232.8 | 268.6 | 0.87x (0.82-1.00) | win |") in block
    assert "- **avx2**: " in block and "tier avx2 (capped on an amx CPU)" in block and "(`bench/results/capped.json`)" in block
    assert "Geomean verifuse vs the best peer (amx) **0.95**" in block and "Geomean verifuse vs the best peer (avx2)" in block
    assert readme.sources_of(block) == [src.name, "capped.json"]
    data["results"] = data["results"][:3]  # other configurations: a table each, as for one file
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    assert readme.render([src, short]).count("| model |") == 2


def test_render_regenerates_markdown_from_a_committed_result(tmp_path, capsys):
    """`python -m verifuse_bench.render` (make bench-reports): the .md (and .png) of a committed JSON
    are made again from it, the JSON untouched; files that are not peer-benchmark reports are
    skipped and named."""
    from verifuse_bench import render
    from verifuse_bench.report import to_markdown

    src = BENCH / "results" / "peers-hf-b1-t1-s47-amx.json"
    before = src.read_bytes()
    (md,) = render.render_one(src, tmp_path, plot=False)
    data = json.loads(before)
    data.pop("plot", None)
    assert md == tmp_path / "peers-hf-b1-t1-s47-amx.md" and md.read_text() == to_markdown(data)
    assert "| hf_bert_base |" in md.read_text() and src.read_bytes() == before
    other = tmp_path / "cold.json"
    other.write_text(json.dumps([{"model": "resnet50", "mode": "cold"}]))
    assert render.main([str(src), str(other), "--out", str(tmp_path / "o"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "skipped (not peer-benchmark reports): cold.json" in out
    assert (tmp_path / "o" / "peers-hf-b1-t1-s47-amx.md").is_file()
    assert not (tmp_path / "o" / "cold.md").exists()
