"""The trace cache (issue 40, warm start; verifuse/trace_cache.py): with a cache_dir, the ATen
trace of a Dynamo graph is stored, and a later compile of the same graph for the same inputs
reads it back instead of tracing; anything that changes the trace changes the key; a damaged
record is a miss; graphs calling functions that are not torch's are never cached.

Dynamo is reset between compiles so that each compile calls the backend again (what a new
process does); one test uses a real second process.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import verifuse
from verifuse import aten_trace, backend
from verifuse import report as _report

HERE = os.path.abspath(__file__)


class Net(nn.Module):
    def __init__(self, stride: int = 1, scale: float = 0.5) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=stride, padding=1)
        self.fc = nn.Linear(8, 4)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(y.mean((2, 3)) * self.scale)


def build(stride: int = 1, scale: float = 0.5) -> nn.Module:
    torch.manual_seed(0)
    return Net(stride, scale).eval()


def compile_once(model: nn.Module, x: torch.Tensor, cache: str):
    """One fresh compile (Dynamo reset) and its graph reports."""
    torch._dynamo.reset()
    with _report.collect() as graphs, torch.no_grad():
        out = torch.compile(model, backend="verifuse", options={"cache_dir": cache, "strict": True})(x)
    assert len(graphs) == 1 and graphs[0].aten_trace == "one trace", [g.aten_trace for g in graphs]
    return out, graphs[0]


def records(cache: str) -> list[str]:
    d = os.path.join(cache, "traces-v1")
    return sorted(f for f in os.listdir(d) if f.endswith(".pt")) if os.path.isdir(d) else []


def eager(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def test_a_second_compile_reads_the_trace_instead_of_tracing(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    model, x = build(), torch.randn(2, 3, 16, 16)
    out, first = compile_once(model, x, cache)
    assert first.trace_source == "traced" and first.plan_source == "compiled"
    assert records(cache) == [first.trace_key + ".pt"]

    def no_trace(*args, **kwargs):
        raise AssertionError("traced although the trace cache has this graph")

    monkeypatch.setattr(aten_trace, "trace_inference_graph", no_trace)
    hits = verifuse.stats().get("trace_cache_hits", 0)
    again, second = compile_once(model, x, cache)
    assert second.trace_source == "trace cache" and second.trace_key == first.trace_key
    assert verifuse.stats().get("trace_cache_hits", 0) == hits + 1
    # The read-back graph lowers to the same graph: the plan cache replays the plan made for it.
    assert second.plan_source == "plan-cache"
    torch.testing.assert_close(again, eager(model, x))
    torch.testing.assert_close(again, out, rtol=0, atol=0)
    torch._dynamo.reset()
    assert "from the trace cache" in str(verifuse.explain(model, x, cache_dir=cache))


@pytest.mark.parametrize("change", ["shape", "dtype", "stride constant", "scale constant", "strides of the input"])
def test_what_changes_the_trace_changes_the_key(tmp_path, change):
    cache = str(tmp_path / "cache")
    model, x = build(), torch.randn(2, 3, 16, 16)
    _, first = compile_once(model, x, cache)
    other_model, other_x = model, x
    if change == "shape":
        other_x = torch.randn(1, 3, 16, 16)
    elif change == "dtype":
        other_model, other_x = build().double(), x.double()
    elif change == "stride constant":
        other_model = build(stride=2)
    elif change == "scale constant":
        other_model = build(scale=0.25)
    elif change == "strides of the input":
        other_x = x.contiguous(memory_format=torch.channels_last)
    if change == "dtype":
        torch._dynamo.reset()  # float64 falls back (verifuse compiles float32 and bf16): key only
        captured = {}

        def spy(gm, example_inputs, **kwargs):
            from verifuse.trace_cache import trace_key

            captured["key"] = trace_key(gm, example_inputs, aten_trace.static_indices(gm))
            return gm.forward

        with torch.no_grad():
            torch.compile(other_model, backend=spy)(other_x)
        assert captured["key"] is not None and captured["key"] != first.trace_key
        return
    out, second = compile_once(other_model, other_x, cache)
    assert second.trace_source == "traced" and second.trace_key != first.trace_key
    torch.testing.assert_close(out, eager(other_model, other_x))
    assert len(records(cache)) == 2


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty", "other key's record"])
def test_a_damaged_record_is_a_miss_and_is_written_again(tmp_path, damage):
    cache = str(tmp_path / "cache")
    model, x = build(), torch.randn(2, 3, 16, 16)
    _, first = compile_once(model, x, cache)
    path = os.path.join(cache, "traces-v1", first.trace_key + ".pt")
    data = open(path, "rb").read()
    if damage == "flipped byte":
        data = data[:100] + bytes([data[100] ^ 0x40]) + data[101:]
    elif damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = b""
    else:  # a whole, valid record of another graph under this key
        _, other = compile_once(build(scale=0.25), x, cache)
        data = open(os.path.join(cache, "traces-v1", other.trace_key + ".pt"), "rb").read()
    with open(path, "wb") as f:
        f.write(data)
    out, second = compile_once(model, x, cache)
    assert second.trace_source == "traced"
    torch.testing.assert_close(out, eager(model, x))
    _, third = compile_once(model, x, cache)
    assert third.trace_source == "trace cache"


def _mine(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_graph_calling_a_function_that_is_not_torchs_is_never_cached(tmp_path):
    cache = str(tmp_path / "cache")
    torch._dynamo.allow_in_graph(_mine)
    try:
        class Calls(nn.Module):
            def forward(self, x):
                return torch.relu(_mine(x)) + 1

        model, x = Calls().eval(), torch.randn(4, 8)
        for _ in range(2):
            out, g = compile_once(model, x, cache)
            assert g.trace_source == "traced" and g.trace_key == ""
            torch.testing.assert_close(out, eager(model, x))
        assert records(cache) == []
    finally:
        torch._dynamo.disallow_in_graph(_mine)


def test_without_a_cache_dir_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.delenv("VERIFUSE_CACHE_DIR", raising=False)
    torch._dynamo.reset()
    model, x = build(), torch.randn(2, 3, 16, 16)
    with _report.collect() as graphs, torch.no_grad():
        torch.compile(model, backend="verifuse")(x)
    assert graphs[0].trace_source == "traced" and graphs[0].trace_key == ""


def _child(cache: str) -> None:
    model, x = build(), torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    out, g = compile_once(model, x, cache)
    torch.testing.assert_close(out, eager(model, x))
    print("CHILD", g.trace_source, g.plan_source, flush=True)


def test_a_new_process_reads_the_trace(tmp_path):
    cache = str(tmp_path / "cache")
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, HERE, "--child", cache], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        runs.append([l for l in proc.stdout.splitlines() if l.startswith("CHILD")][-1])
    assert runs == ["CHILD traced compiled", "CHILD trace cache plan-cache"]


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--child":
    _child(sys.argv[2])
