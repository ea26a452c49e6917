"""End to end: torch.compile(model, backend="verifuse") against eager, in strict mode (so any
fallback is a failure), with float32's default assert_close tolerances."""
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch.nn as nn

import verifuse
from models_zoo import ZOO, GraphBreakModel, build, conv_bn_relu


def compile_strict(model, **kw):
    return torch.compile(model, backend="verifuse", options={"strict": True}, **kw)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_matches_eager_without_fallback(name):
    model, x = build(name)
    verifuse.reset_stats()
    compiled = compile_strict(model)
    with torch.no_grad():
        expected = model(x)
        got = compiled(x)
        got_again = compiled(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_again, expected)
    s = verifuse.stats()
    assert s["graphs_verifuse"] >= 1
    assert s["graphs_fallback"] == 0 and s["fallbacks"] == 0


def test_graph_break_runs_every_subgraph_through_verifuse():
    torch.manual_seed(0)
    model = GraphBreakModel().eval()
    x = torch.randn(2, 3, 8, 8)
    verifuse.reset_stats()
    compiled = compile_strict(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    s = verifuse.stats()
    assert s["graphs_verifuse"] == 2, s
    assert s["graphs_fallback"] == 0


def _graphs_compiled_per_call(compiled, model, inputs):
    counts = []
    with torch.no_grad():
        for x in inputs:
            torch.testing.assert_close(compiled(x), model(x))
            counts.append(verifuse.stats()["graphs_compiled"])
    return counts


def test_dynamic_batch_does_not_recompile_per_size():
    model, _ = build("conv_bn_relu_sequential")
    verifuse.reset_stats()
    compiled = compile_strict(model, dynamic=True)
    sizes = (3, 8, 5, 12, 7, 2)  # avoid 16, the spatial size: duck sizing would tie the symbols
    counts = _graphs_compiled_per_call(compiled, model, [torch.randn(b, 3, 16, 16) for b in sizes])
    # Dynamo may trace the first size statically and recompile once with a symbolic batch (it
    # does the same for aot_eager); after that no size adds a graph.
    assert counts[-1] <= 2, counts
    assert counts[2:] == [counts[1]] * (len(sizes) - 2), counts


def test_dynamic_sequence_length_encoder():
    model, _ = build("transformer_encoder")
    verifuse.reset_stats()
    compiled = compile_strict(model, dynamic=True)
    shapes = ((2, 5), (3, 9), (4, 16), (2, 7), (5, 12))
    counts = _graphs_compiled_per_call(compiled, model, [torch.randn(b, t, 32) for b, t in shapes])
    assert counts[-1] <= 2, counts
    assert counts[2:] == [counts[1]] * (len(shapes) - 2), counts


def test_concurrent_calls_match_serial():
    model, _ = build("resnet_basic_block")
    compiled = compile_strict(model)
    inputs = [torch.randn(2, 8, 16, 16) for _ in range(4)]
    with torch.no_grad():
        serial = [compiled(x) for x in inputs]
    errors = []

    def worker(k):
        try:
            with torch.no_grad():
                for _ in range(50):
                    out = compiled(inputs[k])
                    if not torch.equal(out, serial[k]):
                        errors.append(f"thread {k}: result differs from the serial call")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"thread {k}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_load_state_dict_after_compile_uses_new_weights():
    model, x = build("conv_bn_relu_sequential")
    compiled = compile_strict(model)
    with torch.no_grad():
        before = compiled(x)
    torch.manual_seed(123)
    other, _ = build("conv_bn_relu_sequential")
    for p in other.parameters():
        p.data.normal_()
    model.load_state_dict(other.state_dict())
    verifuse.reset_stats()
    with torch.no_grad():
        after = compiled(x)
        torch.testing.assert_close(after, model(x))
    assert not torch.allclose(before, after)
    assert verifuse.stats()["weight_refreshes"] >= 1


def test_parameter_replaced_after_compile():
    model = nn.Sequential(nn.Linear(4, 4)).eval()
    compiled = compile_strict(model)
    x = torch.randn(2, 4)
    with torch.no_grad():
        compiled(x)
        model[0].weight = nn.Parameter(torch.randn(4, 4))
        torch.testing.assert_close(compiled(x), model(x))


def test_in_place_weight_update_after_compile():
    model, x = build("mlp")
    compiled = compile_strict(model)
    with torch.no_grad():
        compiled(x)
        model.net[0].bias.add_(1.0)
        torch.testing.assert_close(compiled(x), model(x))


def test_inductor_freezing_flag_on_still_compiles_and_freezes():
    # torch._inductor.config.freezing = True (a common CPU-inference setting) makes Dynamo keep the
    # parameters as graph-module attributes; aot_autograd lifts them back in front of the inputs.
    # verifuse maps them by name and freezes them as usual instead of falling back.
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(conv_bn_relu(3, 8), nn.Flatten(), nn.Linear(8 * 16 * 16, 10)).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad(), torch._inductor.config.patch(freezing=True), warnings.catch_warnings():
        warnings.simplefilter("error", verifuse.VerifuseFallbackWarning)
        report = verifuse.explain(model, x, strict=True)
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        next(model.parameters()).mul_(1.5)  # an in-place update after compile is still seen
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    graph = report.graphs[0]
    assert not graph.fallbacks and graph.num_constants > 0, (graph.fallbacks, graph.num_constants)
    assert "conv-bn-fold" in graph.rewrites, graph.rewrites


def test_model_copies_sharing_a_graph_keep_one_plan_each():
    # Dynamo reuses one graph for copies of a model (their weights are arguments): calling the
    # copies in turn must switch between their plans, not rebuild a plan on every call.
    models = [build("mlp")[0] for _ in range(3)]
    x = build("mlp")[1]
    for k, m in enumerate(models[1:], 1):
        with torch.no_grad():
            for p in m.parameters():
                p.mul_(1.0 + k)
    compiled = [compile_strict(m) for m in models]
    verifuse.reset_stats()
    with torch.no_grad():
        for _ in range(4):
            for m, c in zip(models, compiled):
                torch.testing.assert_close(c(x), m(x))
        assert verifuse.stats()["weight_refreshes"] <= 2  # the second and third copy, once each
        models[0].net[0].bias.add_(1.0)  # in place: that copy's plan is rebuilt, the others kept
        for m, c in zip(models, compiled):
            torch.testing.assert_close(c(x), m(x))
    assert verifuse.stats()["weight_refreshes"] <= 3


def test_grad_mode_falls_back_with_one_warning():
    model, x = build("mlp")
    compiled = torch.compile(model, backend="verifuse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x)
    messages = [str(w.message) for w in caught if issubclass(w.category, verifuse.VerifuseFallbackWarning)]
    assert len(messages) == 1, messages
    assert "no_grad" in messages[0]
    torch.testing.assert_close(out, model(x))
    assert out.requires_grad  # eager semantics kept: autograd still works
    out.sum().backward()


def test_float64_model_falls_back_naming_the_dtype():
    model, x = build("mlp")
    model = model.double()
    compiled = torch.compile(model, backend="verifuse")
    with pytest.warns(verifuse.VerifuseFallbackWarning, match="float64"), torch.no_grad():
        out = compiled(x.double())
    torch.testing.assert_close(out, model(x.double()))


def test_strict_mode_raises_instead_of_falling_back():
    model, x = build("mlp")
    compiled = torch.compile(model.double(), backend="verifuse", options={"strict": True})
    with pytest.raises(Exception, match="float64"), torch.no_grad():
        compiled(x.double())


def test_training_mode_batch_norm_falls_back_and_updates_stats_like_eager():
    torch.manual_seed(0)
    model = conv_bn_relu(3, 4).train()
    reference = conv_bn_relu(3, 4).train()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(model, backend="verifuse")
    with pytest.warns(verifuse.VerifuseFallbackWarning, match="training mode"), torch.no_grad():
        out = compiled(x)
    with torch.no_grad():
        expected = reference(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)


def test_unknown_option_names_valid_ones():
    model, x = build("mlp")
    compiled = torch.compile(model, backend="verifuse", options={"verfy": "off"})
    with pytest.raises(Exception, match="valid options are: verify, autotune, strict, cache_dir, dtype"):
        with torch.no_grad():
            compiled(x)


def test_backend_found_without_import_in_fresh_process():
    code = (
        "import sys, torch\n"
        "m = torch.nn.Linear(3, 2).eval()\n"
        "c = torch.compile(m, backend='verifuse', options={'strict': True})\n"
        "x = torch.randn(4, 3)\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(c(x), m(x))\n"
        "assert 'verifuse' in sys.modules\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")


def test_explain_report_keys_and_json():
    import json

    model, x = build("resnet_basic_block")
    report = verifuse.explain(model, x)
    d = report.to_dict()
    assert set(d) >= {"fusions", "partitions", "fallbacks", "proofs", "compile_seconds"}
    assert d["fallbacks"] == []
    assert d["compile_seconds"] > 0
    json.loads(report.to_json())
    assert "verifuse::conv" in str(report) and "conv-bn-fold" in str(report)
    # Where the compile went: the parts are measured and fit inside the whole.
    (g,) = d["graphs"]
    assert 0 < g["trace_seconds"] and 0 < g["plan_seconds"]
    assert g["trace_seconds"] + g["pipeline_seconds"] + g["plan_seconds"] <= g["compile_seconds"]
    assert "compile: ATen trace" in str(report)
    # A first call's split (issue 40): the lowering inside the compile, the first run after it.
    assert 0 < g["lowering_seconds"] and g["trace_seconds"] + g["lowering_seconds"] <= g["compile_seconds"]
    assert 0 < g["first_run_seconds"], g
    assert "lowering" in str(report) and "first run" in str(report)


@pytest.mark.parametrize("one_trace", ["1", "0"])
def test_the_trace_time_is_reported_on_both_paths(one_trace, monkeypatch):
    monkeypatch.setenv("VERIFUSE_ONE_TRACE", one_trace)
    model, x = build("mlp")
    (g,) = verifuse.explain(model, x).to_dict()["graphs"]
    assert 0 < g["trace_seconds"] < g["compile_seconds"]


def test_explain_records_fallback_reason():
    model, x = build("mlp")
    with pytest.warns(verifuse.VerifuseFallbackWarning):
        report = verifuse.explain(model.double(), x.double())
    assert len(report.fallbacks) == 1
    assert "float64" in report.fallbacks[0]["reason"]


def test_wrong_input_shape_gets_eager_error():
    model, x = build("lenet")
    compiled = compile_strict(model)
    with torch.no_grad():
        compiled(x)
        bad = torch.randn(2, 3, 28, 28)  # 3 channels, conv1 wants 1
        with pytest.raises(RuntimeError) as eager_err:
            model(bad)
        with pytest.raises(RuntimeError) as ours:
            compiled(bad)
    assert "channels" in str(ours.value) and "channels" in str(eager_err.value)
