"""The explain report tells the truth (issue 44, parts 1 and 2): each node and partition names what
really runs it — oneDNN, the own GEMM, MKL's sgemm, the row engine, the attention engine, an int8
kernel or ATen — in to_dict(), the text report and the HTML picture, and red dashed edges appear
exactly where the plan converts a tensor, not wherever a tensor crosses a partition boundary.

Each label is checked against the runtime's own counters of which engine ran (``_C.engine_run_counts``),
so a label that says one engine while another runs fails here.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import verifuse
from verifuse import _C
from verifuse.report_html import conversion_edges, graph_nodes, render_graph_svg, render_html

CAPS = _C.capabilities()
needs_avx2 = pytest.mark.skipif(not CAPS["own_avx2"], reason=f"needs AVX2+FMA; this run: {CAPS['summary']}")


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return self.norm(x * 2.0 + 1.0)


class Attention(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def explain_counting(model, *xs, **options):
    """explain() plus which engines the runtime says ran during its call."""
    torch._dynamo.reset()
    before = dict(_C.engine_run_counts())
    report = verifuse.explain(model, *xs, strict=True, autotune=False, **options)
    after = dict(_C.engine_run_counts())
    torch._dynamo.reset()
    ran = {e for e in after if after[e] > before.get(e, 0)}
    return report, ran


def runs_on_of(report, op_prefix: str) -> set[str]:
    return {n["runs_on"] for n in report.to_dict()["nodes"] if n["op"].startswith(op_prefix)}


def html_of(report) -> str:
    return render_html(report)


@needs_avx2
@pytest.mark.parametrize("linear, kernel, label, engine", [
    ("gemm", "own", "own GEMM", "gemm"),
    ("onednn", "auto", "oneDNN", "onednn"),
    ("gemm", "mkl", "MKL sgemm", "gemm"),
])
def test_linear_labels_name_the_engine_that_ran(monkeypatch, linear, kernel, label, engine):
    if kernel == "mkl" and not CAPS["mkl_sgemm"]:
        pytest.skip(f"MKL packed sgemm unavailable: {CAPS['mkl_sgemm_unavailable']}")
    monkeypatch.setenv("VERIFUSE_LINEAR", linear)
    monkeypatch.setenv("VERIFUSE_GEMM_KERNEL", kernel)
    torch.manual_seed(0)
    report, ran = explain_counting(Mlp().eval(), torch.randn(32, 64))
    assert runs_on_of(report, "verifuse::linear") == {label}
    assert engine in ran, (label, ran)
    parts = [p for p in report.to_dict()["partitions"] if any(o.startswith("verifuse::linear") for o in p["ops"])]
    assert parts and {p["runs_on"] for p in parts} == {label}
    assert label in str(report)
    html = html_of(report)
    assert f"· {label} ·" in html
    assert "aten · P" not in html  # the old picture called every engine that is not oneDNN "aten"


@needs_avx2
def test_row_programs_say_row_engine():
    report, ran = explain_counting(Norm().eval(), torch.randn(8, 64))
    assert runs_on_of(report, "verifuse::rowwise") == {"row engine"}
    assert "rowwise" in ran
    assert "· row engine ·" in html_of(report)


@pytest.mark.parametrize("knob, label", [("onednn", "attention engine"), ("aten", "ATen")])
def test_attention_says_which_engine(monkeypatch, knob, label):
    monkeypatch.setenv("VERIFUSE_ATTENTION", knob)
    q, k, v = (torch.randn(1, 4, 32, 16) for _ in range(3))
    report, ran = explain_counting(Attention().eval(), q, k, v)
    assert runs_on_of(report, "aten::_scaled_dot_product_flash_attention_for_cpu") == {label}
    assert ("onednn" in ran) == (knob == "onednn"), ran


def test_int8_nodes_name_their_kernel_or_the_reference():
    pytest.importorskip("torchao")
    from quant_models import LinearNet, quantize_pt2e

    torch.manual_seed(0)
    x = torch.randn(16, 32)
    report, _ = explain_counting(quantize_pt2e(LinearNet(), x), x)
    int8 = [n for n in report.to_dict()["nodes"] if n["op"] in ("verifuse::qlinear", "verifuse::qconv")]
    assert int8
    chosen = {r["node"]: r for r in report.to_dict()["int8_kernels"] if r.get("impl")}
    for n in int8:
        if n["id"] in chosen:
            assert n["runs_on"].startswith("int8 kernel (") and chosen[n["id"]]["variant"] in n["runs_on"]
        else:
            assert n["runs_on"] == "ATen (int8 reference)"


# ---- conversions ------------------------------------------------------------------------------------

class ConvThenView(nn.Module):
    """conv (channels-last inside) -> a view that needs the plain layout: one output conversion."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)).view(x.shape[0], -1)


class LinearsAcrossAten(nn.Module):
    """Two linear partitions with an ATen op between them: crossings, no conversion."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(32, 32)
        self.b = nn.Linear(32, 32)

    def forward(self, x):
        return self.b(torch.cumsum(self.a(x), dim=-1))


def red_edges(svg: str) -> int:
    return len(re.findall(r'class="edge reorder"', svg))


def test_no_conversion_no_red_edge():
    torch.manual_seed(0)
    report, _ = explain_counting(LinearsAcrossAten().eval(), torch.randn(4, 32))
    g = report.graphs[0]
    nodes = graph_nodes(g)
    parts = {n["partition"] for n in nodes}
    assert len(parts - {None}) >= 2 or None in parts  # the graph does cross partition boundaries
    assert g.reorders == 0 and conversion_edges(g, nodes) == {}
    svg = render_graph_svg(nodes, "g", conversion_edges(g, nodes))
    assert red_edges(svg) == 0
    assert 'class="edge crossing"' in svg  # crossings are drawn, as ordinary dark edges


def test_red_edges_are_exactly_the_conversions():
    torch.manual_seed(0)
    report, _ = explain_counting(ConvThenView().eval(), torch.randn(2, 3, 16, 16))
    g = report.graphs[0]
    nodes = graph_nodes(g)
    convs = [c for p in g.partitions for c in p.get("conversions") or []]
    assert len(convs) == g.reorders >= 1, (convs, g.reorders)
    for c in convs:
        assert c["kind"].startswith("layout: ") and c["bytes"] > 0
    edges = conversion_edges(g, nodes)
    # An input conversion is the one edge into its node; an output conversion every edge out.
    expected = set()
    for c in convs:
        if c["direction"] == "input":
            expected.add((c["producer"], c["node"]))
        else:
            expected |= {(c["node"], n["id"]) for n in nodes if c["node"] in n.get("inputs", [])}
    assert set(edges) == expected and expected
    svg = render_graph_svg(nodes, "g", edges)
    drawn = {k for k in edges if k in expected}
    assert red_edges(svg) == len(drawn)
