"""verifuse.profile (issue 44, part 4): per-partition time of a compiled call, from timers around
each plan step. Checked structurally (no timing is asserted): every node that ran is charged to
its partition or to its ATen operator, the rows say what runs them, the timers are off outside
profile(), and the text and HTML forms carry the rows.
"""
from __future__ import annotations

import torch
import torch.nn as nn

import verifuse
from verifuse import _C


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 256)
        self.b = nn.Linear(256, 64)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(self.b(torch.relu(self.a(x))) + x).cumsum(-1)


def test_profile_charges_every_step_to_its_partition_or_operator():
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(16, 64)
    prof = verifuse.profile(model, x, runs=5, warmup=1, strict=True)
    torch._dynamo.reset()
    rows = prof.rows
    assert rows[-1].graph == -1 and "outside the plan" in rows[-1].what
    plan_rows = rows[:-1]
    assert [r.ms for r in plan_rows] == sorted((r.ms for r in plan_rows), reverse=True)
    assert all(r.ms > 0 for r in plan_rows)
    linear = [r for r in plan_rows if "linear" in r.what]
    assert linear and linear[0].partition is not None and linear[0].gflops and linear[0].gflops > 0
    assert any(r.partition is None and r.what.startswith("cumsum") and r.runs_on == "ATen" for r in plan_rows)
    assert any(r.runs_on == "row engine" for r in plan_rows) or not _C.capabilities()["own_avx2"]
    # every row's share is of the untimed call, and the rows add up to it
    assert abs(sum(r.ms for r in rows) - prof.call_ms) <= 1e-6 * prof.call_ms + max(0.0, prof.steps_ms - prof.call_ms)
    assert prof.reference_gflops > 0 and prof.runs == 5
    text, html = str(prof), prof.to_html()
    assert "cumsum" in text and 'class="bar"' in html and "linear" in html


def test_timers_are_off_outside_profile():
    torch._dynamo.reset()
    model = Block().eval()
    x = torch.randn(16, 64)
    with verifuse.report.collect() as graphs, torch.no_grad():
        compiled = torch.compile(model, backend="verifuse", options={"strict": True})
        compiled(x)
    plan = graphs[0].plan_of()
    plan.reset_profile()
    with torch.no_grad():
        compiled(x)
    assert plan.profile() == {"runs": 0, "node_ns": {}}
    _C.set_profiling(True)
    try:
        with torch.no_grad():
            compiled(x)
    finally:
        _C.set_profiling(False)
    got = plan.profile()
    assert got["runs"] == 1 and got["node_ns"] and all(v > 0 for v in got["node_ns"].values())
    torch._dynamo.reset()
