"""Deferred packing (issue 40, warm start): linears on the own GEMM pack their weights on a
background thread after the plan is returned (CompileOptions::deferPacking), and a run that
reaches a linear first waits for its packed weights. VERIFUSE_DEFER_PACKING=0 packs inside the
plan, as before: both must give the same answers and report the same weight copies, also when
the first calls come from several threads at once, straight after the compile.
"""
from __future__ import annotations

import threading

import pytest
import torch
import torch.nn as nn

import verifuse


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(768, 768), nn.ReLU()) for _ in range(6)])
        self.head = nn.Linear(768, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(x) + x)


def compile_and_explain(monkeypatch, defer: str):
    monkeypatch.setenv("VERIFUSE_DEFER_PACKING", defer)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Mlp().eval()
    report = verifuse.explain(model, torch.randn(64, 768), autotune=False, strict=True)
    torch._dynamo.reset()
    return model, report


@pytest.mark.parametrize("defer", ["1", "0"])
def test_first_calls_from_several_threads_straight_after_the_compile(monkeypatch, defer):
    monkeypatch.setenv("VERIFUSE_DEFER_PACKING", defer)
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Mlp().eval()
    xs = [torch.randn(64, 768, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    with torch.no_grad():
        want = [model(x) for x in xs]
    compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
    got: dict = {}

    def call(i: int) -> None:
        with torch.no_grad():
            got[i] = compiled(xs[i])

    # The first call compiles (one thread); the others start as soon as it returns, while the
    # plan's background thread may still be packing.
    call(0)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        torch.testing.assert_close(got[i], want[i], rtol=1e-4, atol=1e-4)


def test_deferred_and_immediate_packing_report_the_same_engines_and_weight_copies(monkeypatch):
    _, deferred = compile_and_explain(monkeypatch, "1")
    _, immediate = compile_and_explain(monkeypatch, "0")

    def summary(report):
        return [(p["ops"], p["engine"], p["weight_layout"], p["weight_copy_bytes"])
                for p in report.to_dict()["partitions"]]

    assert summary(deferred) == summary(immediate)
    engines = {p["engine"] for p in deferred.to_dict()["partitions"]}
    if "gemm" not in engines:
        pytest.skip(f"no linear chose the own GEMM on this CPU (engines {sorted(engines)})")
    assert deferred.to_dict()["graphs"][0]["weight_copy_bytes"] > 0
