"""Where the time goes: ``verifuse.profile(model, *inputs)`` runs the compiled plan with a timer
around each of its steps and reports each partition's share of a call, largest first, with what
runs it and the FLOP/s it reached (issue 44, part 4).

The shares are of the call time measured *without* the timers (median of ``runs`` calls,
alternating with the timed ones), so the timers' own cost does not inflate them; what the plan's
steps do not account for (Dynamo's guards, the Python wrapper, the plan's argument handling) is
its own row. FLOP/s are compared with a reference the same process measures: MKL's sgemm on a
1024 x 1024 x 1024 product (``torch.mm``) at the same thread count, the attainable float32 rate
of this CPU rather than a datasheet number.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

from . import report as _report


@dataclasses.dataclass
class ProfileRow:
    """One partition (or the ATen ops outside partitions, grouped by operator)."""

    graph: int
    partition: Any          # partition id, or None for ops outside partitions
    what: str               # its ops, shortened
    runs_on: str
    ms: float               # per call
    share: float            # of the untimed call
    gflops: float | None    # 2 * multiply-adds / time, where the shape is static
    nodes: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ProfileReport:
    rows: list[ProfileRow]
    call_ms: float           # median call without the timers
    timed_call_ms: float     # median call with them
    steps_ms: float          # sum of every row (what the plan's steps account for)
    reference_gflops: float  # torch.mm 1024^3 float32 at the same threads
    threads: int
    runs: int

    def top(self, n: int = 10) -> list[ProfileRow]:
        return self.rows[:n]

    def to_dict(self) -> dict[str, Any]:
        return {"call_ms": self.call_ms, "timed_call_ms": self.timed_call_ms, "steps_ms": self.steps_ms,
                "reference_gflops": self.reference_gflops, "threads": self.threads, "runs": self.runs,
                "rows": [dataclasses.asdict(r) for r in self.rows]}

    def __str__(self) -> str:
        lines = [f"verifuse profile: {self.call_ms:.3f} ms per call (median of {self.runs}, {self.threads} "
                 f"thread(s); {self.timed_call_ms:.3f} ms with the step timers), the steps account for "
                 f"{self.steps_ms:.3f} ms; reference torch.mm 1024^3: {self.reference_gflops:.1f} GFLOP/s"]
        lines.append(f"  {'share':>6} {'ms':>9} {'GFLOP/s':>8} {'% ref':>6}  {'graph/part':10} {'runs on':24} what")
        for r in self.rows:
            gf = f"{r.gflops:8.1f}" if r.gflops else f"{'-':>8}"
            ref = f"{100 * r.gflops / self.reference_gflops:5.0f}%" if r.gflops and self.reference_gflops else f"{'-':>6}"
            where = f"{r.graph}/{'-' if r.partition is None else 'P' + str(r.partition)}"
            lines.append(f"  {100 * r.share:5.1f}% {r.ms:9.3f} {gf} {ref}  {where:10} {r.runs_on[:24]:24} {r.what}")
        return "\n".join(lines)

    def to_html(self) -> str:
        """A table with a bar per row (its share of the call)."""
        from html import escape

        rows = []
        for r in self.rows:
            width = max(0.5, 100 * r.share)
            gf = f"{r.gflops:.1f}" if r.gflops else "—"
            rows.append(f"<tr><td>{r.graph}/{'—' if r.partition is None else 'P' + str(r.partition)}</td>"
                        f"<td>{escape(r.runs_on)}</td><td>{escape(r.what)}</td><td>{r.ms:.3f}</td><td>{gf}</td>"
                        f'<td><div class="bar" style="width:{width:.1f}%"></div> {100 * r.share:.1f}%</td></tr>')
        return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>verifuse profile</title>"
                "<style>body{font:14px system-ui,sans-serif;margin:24px} table{border-collapse:collapse}"
                "td,th{border:1px solid #ddd;padding:3px 8px} td:last-child{width:320px}"
                ".bar{display:inline-block;height:10px;background:#1f4e9c;vertical-align:middle}</style></head><body>"
                f"<h1>verifuse profile</h1><p>{escape(str(self).splitlines()[0])}</p><table><thead><tr>"
                "<th>graph/partition</th><th>runs on</th><th>what</th><th>ms per call</th><th>GFLOP/s</th>"
                "<th>share of the call</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></body></html>\n")


def _what(ops: list[str]) -> str:
    names: dict[str, int] = {}
    for op in ops:
        short = op.split("::")[-1]
        names[short] = names.get(short, 0) + 1
    text = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in names.items())
    return text if len(text) <= 60 else text[:59] + "…"


def _reference_gflops() -> float:
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * 1024 ** 3 / best / 1e9


def profile(model: Any, *example_inputs: Any, runs: int = 20, warmup: int = 3, **options: Any) -> ProfileReport:
    """Compiles ``model`` with verifuse (``options`` as torch.compile's), then times ``runs`` calls
    without and ``runs`` with the per-step timers, alternating, under no_grad; returns every
    partition's time per call, largest first (see the module's docstring)."""
    import torch

    from . import _C
    from .options import Options

    Options.parse(options)
    compiled = torch.compile(model, backend="verifuse", options=dict(options) or None)
    with _report.collect() as graphs, torch.no_grad():
        compiled(*example_inputs)
    graphs = [g for g in graphs if g.engine == "verifuse" and g.plan_of is not None]
    plans = [(g, g.plan_of()) for g in graphs]
    plans = [(g, p) for g, p in plans if p is not None]
    with torch.no_grad():
        for _ in range(warmup):
            compiled(*example_inputs)
        for _, p in plans:
            p.reset_profile()
        plain, timed = [], []
        try:
            for _ in range(runs):
                _C.set_profiling(False)
                t = time.perf_counter()
                compiled(*example_inputs)
                plain.append(time.perf_counter() - t)
                _C.set_profiling(True)
                t = time.perf_counter()
                compiled(*example_inputs)
                timed.append(time.perf_counter() - t)
        finally:
            _C.set_profiling(False)
    call_ms = statistics.median(plain) * 1e3
    rows: list[ProfileRow] = []
    for g, p in plans:
        prof = p.profile()
        n_runs = max(1, prof["runs"])
        node_ns = prof["node_ns"]
        rows_of_graph = _report.node_rows(g)
        nodes = {n["id"]: n for n in rows_of_graph}
        parts = {pp.get("id", i): pp for i, pp in enumerate(g.partitions)}
        by_part: dict[Any, list[Any]] = {}
        for nid in node_ns:
            part = nodes.get(nid, {}).get("partition")
            key = ("P", part) if part is not None else ("op", nodes.get(nid, {}).get("op", "?"))
            by_part.setdefault(key, []).append(nid)
        for key, nids in by_part.items():
            ms = sum(node_ns[n] for n in nids) / n_runs / 1e6
            if key[0] == "P":
                pp = parts.get(key[1], {})
                macs = float(pp.get("macs") or 0)
                rows.append(ProfileRow(g.graph_id, key[1], _what(list(pp.get("ops") or [])),
                                       _report.partition_runs_on(rows_of_graph, dict(pp, id=key[1])), ms, ms / call_ms,
                                       2 * macs / (ms / 1e3) / 1e9 if macs and ms > 0 else None, sorted(nids)))
            else:
                runs_on = nodes[nids[0]].get("runs_on", "ATen") if nids[0] in nodes else "ATen"
                rows.append(ProfileRow(g.graph_id, None, f"{key[1].split('::')[-1]} x{len(nids)}", runs_on, ms,
                                       ms / call_ms, None, sorted(nids)))
    steps_ms = sum(r.ms for r in rows)
    rows.sort(key=lambda r: -r.ms)
    outside = max(0.0, call_ms - steps_ms)
    rows.append(ProfileRow(-1, None, "outside the plan's steps (Dynamo guards, Python, argument handling)",
                           "—", outside, outside / call_ms, None))
    return ProfileReport(rows, call_ms, statistics.median(timed) * 1e3, steps_ms, _reference_gflops(),
                         torch.get_num_threads(), runs)
