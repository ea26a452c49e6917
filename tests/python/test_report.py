"""The explain report: to_dict() keys, the text table, and the HTML picture (self-contained SVG
with partitions coloured, fusions marked and engines shown), on synthetic graph reports and on
the IR text the compiler produces today."""
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from verifuse.report import GraphReport, Report
from verifuse.report_html import graph_nodes, layout_graph, parse_graph_text, render_graph_svg

SVG_NS = "{http://www.w3.org/2000/svg}"

# A residual block after partitioning: conv+bn+relu fused into one oneDNN conv, a second conv
# with the residual add as a post-op, an op oneDNN cannot run (cumsum) on a side branch.
NODES = [
    {"id": 0, "op": "verifuse::conv", "inputs": ["%x"], "partition": 0, "engine": "onednn",
     "fusion": "conv-bn-fold+relu"},
    {"id": 1, "op": "aten::cumsum", "inputs": [0], "partition": None, "engine": "aten", "fusion": None},
    {"id": 2, "op": "verifuse::conv", "inputs": [0, "%x"], "partition": 0, "engine": "onednn",
     "fusion": "sum+relu"},
    {"id": 3, "op": "aten::add.Tensor", "inputs": [2, 1], "partition": 1, "engine": "onednn", "fusion": None},
    {"id": 4, "op": "aten::topk", "inputs": [3], "partition": None, "engine": "aten", "fusion": None},
]


def synthetic_report() -> Report:
    g = GraphReport(graph_id=7, num_nodes=5, compile_seconds=0.25, reorders=5, nodes=[dict(n) for n in NODES])
    g.fusions = [{"rule": "conv-bn-fold", "nodes": [0], "verdict": "Proved", "max_error_bound": 3.1e-6},
                 {"rule": "conv-relu-postop", "nodes": [0], "verdict": "Proved", "max_error_bound": 0.0}]
    g.partitions = [{"nodes": [0, 2], "engine": "onednn", "onednn_ms": 0.21, "aten_ms": 0.35, "layout": "channels_last",
                     "candidates": {"onednn": 0.21, "aten": 0.35}, "how": "tuned", "input_conversions": 1,
                     "output_conversions": 1},
                    {"nodes": [3], "engine": "aten", "onednn_ms": 0.05, "aten_ms": 0.02, "layout": "plain",
                     "candidates": {"onednn": 0.05, "aten": 0.02}, "how": "tuning-db"}]
    g.proofs = [{"rule": "conv-bn-fold", "verdict": "Proved", "seconds": 0.012}]
    g.fallbacks = [{"node": "aten::topk", "reason": "no oneDNN kernel <topk>"}]
    return Report([g], compile_seconds=0.25)


def test_to_dict_has_partitions_with_times_and_reorders():
    d = synthetic_report().to_dict()
    json.dumps(d)  # JSON-serializable
    assert d["reorders"] == 5
    assert d["graphs"][0]["reorders"] == 5
    assert [p["id"] for p in d["partitions"]] == [0, 1]
    p0 = d["partitions"][0]
    assert p0["nodes"] == [0, 2] and p0["engine"] == "onednn"
    assert p0["onednn_ms"] == 0.21 and p0["aten_ms"] == 0.35 and p0["graph"] == 7
    for key in ("fusions", "partitions", "fallbacks", "proofs", "compile_seconds"):
        assert key in d


def test_to_dict_fills_missing_partition_fields():
    g = GraphReport(graph_id=1, partitions=[{"nodes": 12, "engine": "aten"}])
    p = Report([g], 0.1).to_dict()["partitions"][0]
    # runs_on: a report without the compiler's answer falls back to the engine's name
    assert p == {"nodes": 12, "engine": "aten", "id": 0, "onednn_ms": None, "aten_ms": None, "graph": 1,
                 "runs_on": "ATen"}


def test_str_shows_partition_table_and_reorders():
    text = str(synthetic_report())
    assert "layout conversions (reorders): 5" in text
    header = next(line for line in text.splitlines() if "decided by" in line)
    assert header.split() == ["graph", "part", "nodes", "runs", "on", "dtype", "layout", "conv", "in/out", "weights", "(copy)",
                              "timed", "(ms", "per", "run)", "decided", "by"]
    rows = [line.split() for line in text.splitlines() if re.match(r"\s+7\s+\d\s", line)]
    # The chosen engine's time comes first, then the other candidates.
    assert rows == [["7", "0", "0,2", "oneDNN", "-", "channels_last", "1/1", "-", "onednn", "0.2100,", "aten",
                     "0.3500", "tuned"],
                    ["7", "1", "3", "ATen", "-", "plain", "0/0", "-", "aten", "0.0200,", "onednn", "0.0500",
                     "tuning-db"]]


def test_str_with_untimed_partitions():
    g = GraphReport(graph_id=1, partitions=[{"nodes": 40, "engine": "aten"}, {"nodes": [1], "onednn_ms": -1.0}])
    text = str(Report([g], 0.1))
    assert re.search(r"1\s+0\s+40\s+ATen\s+-\s+-\s+0/0\s+-\s+-\s+-", text)
    assert re.search(r"1\s+1\s+1\s+ATen\s+-\s+-\s+0/0\s+-\s+onednn n/a\s+-", text)


def _svg_nodes(svg: str) -> dict[str, ET.Element]:
    root = ET.fromstring(svg)
    return {g.get("data-node"): g for g in root.iter(SVG_NS + "g") if g.get("data-node") is not None}


def test_svg_colours_partitions_marks_fusions_and_engines():
    svg = render_graph_svg([dict(n) for n in NODES], "graph 7")
    groups = _svg_nodes(svg)
    assert set(groups) == {"0", "1", "2", "3", "4"}

    def fill(node_id: str) -> str:
        return next(r.get("fill") for r in groups[node_id].iter(SVG_NS + "rect") if r.get("fill"))

    assert fill("0") == fill("2")            # same partition, same colour
    assert fill("0") != fill("3")            # other partition, other colour
    assert fill("1") == fill("4")            # ATen nodes share the neutral fill
    assert fill("1") not in (fill("0"), fill("3"))
    assert "onednn" in groups["0"].get("class") and "aten" in groups["1"].get("class")
    assert "fused" in groups["0"].get("class") and "fused" not in groups["3"].get("class")
    text0 = " ".join(t.text or "" for t in groups["0"].iter(SVG_NS + "text"))
    assert "+ conv-bn-fold+relu" in text0 and "onednn" in text0.lower() and "P0" in text0
    # Crossing a partition boundary is not a conversion (issue 44): 0->1, 2->3, 1->3, 3->4 and the
    # graph input into partition 0 (twice) cross and are drawn as crossings; only the conversions
    # the plan reports are red, with their kind.
    root = ET.fromstring(svg)
    edges = [p for p in root.iter(SVG_NS + "path") if "edge" in (p.get("class") or "")]
    assert len(edges) == 7
    assert sum("reorder" in p.get("class") for p in edges) == 0
    assert sum("crossing" in p.get("class") for p in edges) == 6
    svg = render_graph_svg([dict(n) for n in NODES], "graph 7", {(2, 3): "layout: channels_last -> plain of v3"})
    red = [p for p in ET.fromstring(svg).iter(SVG_NS + "path") if "reorder" in (p.get("class") or "")]
    assert len(red) == 1 and "channels_last -> plain" in "".join(red[0].itertext())


def test_layout_is_layered_and_non_overlapping():
    lay = layout_graph([dict(n) for n in NODES])
    boxes, width, height = lay.boxes, lay.width, lay.height
    assert set(boxes) == {"%x", 0, 1, 2, 3, 4}
    # Every node lies below all its inputs.
    for n in NODES:
        for ref in n["inputs"]:
            assert boxes[ref][1] + boxes[ref][3] < boxes[n["id"]][1]
    # No two boxes overlap, and all fit in the drawing.
    items = list(boxes.values())
    for i, (x, y, w, h) in enumerate(items):
        assert 0 <= x and x + w <= width and 0 <= y and y + h <= height
        for (x2, y2, w2, h2) in items[i + 1:]:
            assert x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y


def test_long_edges_never_run_behind_a_box():
    # %x feeds node 2 two layers down (a residual skip): its route passes node 0's layer through
    # a free slot, not behind node 0's box.
    lay = layout_graph([dict(n) for n in NODES])
    route = lay.routes[("%x", 2)]
    assert len(route) == 4  # source bottom, slot top, slot bottom, destination top
    (sx, top), (sx2, bottom) = route[1], route[2]
    assert sx == sx2 and bottom > top
    for x, y, w, h in lay.boxes.values():
        if y < bottom and top < y + h:  # a box in the crossed layer
            assert not (x <= sx <= x + w)
    assert lay.routes[(0, 2)][0] == (lay.boxes[0][0] + lay.boxes[0][2] / 2, lay.boxes[0][1] + lay.boxes[0][3])


def test_layout_of_a_deep_graph_does_not_recurse():
    chain = [{"id": i, "op": "aten::relu", "inputs": [i - 1] if i else ["%x"], "partition": None,
              "engine": "aten", "fusion": None} for i in range(3000)]
    boxes = layout_graph(chain).boxes
    assert boxes[2999][1] > boxes[0][1]


def test_layout_is_deterministic():
    a = render_graph_svg([dict(n) for n in NODES])
    b = render_graph_svg([dict(n) for n in reversed(NODES)])  # order of the list does not matter
    assert a == render_graph_svg([dict(n) for n in NODES])
    assert _svg_nodes(a).keys() == _svg_nodes(b).keys()


GRAPH_TEXT = """// after the pipeline
graph(%x : Tensor[1, 3, 8, 8], %s0 : Int) {
  %0 : Tensor[1, 16, 8, 8] = verifuse::conv(%x, $w, $b, [1, 1], [1, 1], [1, 1], 1, "relu")
  %1 : Tensor, %2 : Tensor = aten::split.Tensor(%0, 8, 1)
  %3 : Tensor = aten::cat([%2, %1], 1)
  %4 : Tensor = verifuse::conv(%3, $w2, None, [1, 1], [0, 0], [1, 1], 1, "")
  %5 : Tensor = aten::mul.Tensor(%4, "100%")
  return (%5, None)
}
constants {
  $w : f32[16, 3, 3, 3]
  $b : f32[16]
  $w2 : f32[16, 16, 1, 1]
}
"""


def test_parse_graph_text():
    assert parse_graph_text("not a graph") == []
    nodes = parse_graph_text(GRAPH_TEXT)
    assert [n["op"] for n in nodes] == ["verifuse::conv", "aten::split.Tensor", "aten::cat",
                                        "verifuse::conv", "aten::mul.Tensor"]
    assert [n["inputs"] for n in nodes] == [["%x"], [0], [1], [2], [3]]
    assert [n["engine"] for n in nodes] == ["onednn", "aten", "aten", "onednn", "aten"]
    assert [n["fusion"] for n in nodes] == ["relu", None, None, None, None]
    assert [n["graph_output"] for n in nodes] == [False, False, False, False, True]
    assert all(n["partition"] is None for n in nodes)


def test_graph_nodes_prefers_compiler_data_and_falls_back_to_text():
    g = GraphReport(graph_id=1, graph_text=GRAPH_TEXT)
    assert len(graph_nodes(g)) == 5
    g.nodes = [dict(NODES[0])]
    assert graph_nodes(g) == [dict(NODES[0], runs_on="oneDNN")]  # the planner's name, said for people
    assert graph_nodes(GraphReport(graph_id=2)) == []


def test_save_html_is_self_contained(tmp_path):
    report = synthetic_report()
    report.graphs.append(GraphReport(graph_id=8, graph_text=GRAPH_TEXT, engine="verifuse"))
    report.graphs.append(GraphReport(graph_id=9, engine="eager"))  # nothing to draw
    path = report.save_html(tmp_path / "report.html")
    assert path == str((tmp_path / "report.html").resolve())
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    # No network: no external references of any kind, no scripts.
    assert not re.search(r"(src|href)\s*=", page)
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<script" not in page
    assert page.count("<svg") == 2
    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):
        ET.fromstring(svg)  # well-formed
    for needle in ("conv-bn-fold", "Proved", "3.1e-06", "no oneDNN kernel &lt;topk&gt;", "0.21", "0.35",
                   "5 layout conversion(s)", "graph 8", "no nodes recorded"):
        assert needle in page, needle


def test_html_escapes_user_strings(tmp_path):
    g = GraphReport(graph_id=1, nodes=[{"id": 0, "op": "aten::<script>", "inputs": ['%"x"'], "partition": None,
                                        "engine": "aten", "fusion": "a&b"}])
    path = Report([g], 0.0).save_html(tmp_path / "x.html")
    page = open(path, encoding="utf-8").read()
    assert "<script>" not in page and "&lt;script&gt;" in page and "a&amp;b" in page


@pytest.mark.slow
def test_explain_report_draws_the_compiled_graph(tmp_path):
    torch = pytest.importorskip("torch")
    import verifuse

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 4)).eval()
    report = verifuse.explain(model, torch.randn(1, 3, 8, 8))
    d = report.to_dict()
    assert "reorders" in d and all({"nodes", "engine", "onednn_ms", "aten_ms"} <= set(p) for p in d["partitions"])
    assert "layout conversions (reorders)" in str(report)
    page = open(report.save_html(tmp_path / "r.html"), encoding="utf-8").read()
    assert page.count("<svg") == len([g for g in report.graphs if graph_nodes(g)]) >= 1
    assert "data-node=" in page


def test_constant_only_nodes_sit_above_their_first_reader():
    text = ("graph(%x : Tensor) {\n  %0 : Tensor = aten::relu(%x)\n  %1 : Tensor = aten::permute($w, [1, 0])\n"
            "  %2 : Tensor = aten::relu(%0)\n  %3 : Tensor = aten::addmm($b, %2, %1, 1, 1)\n  return (%3)\n}\n"
            "constants {\n  $w : f32[4, 4]\n  $b : f32[4]\n}\n")
    boxes = layout_graph(parse_graph_text(text)).boxes
    assert boxes[1][1] == boxes[2][1]  # the weight permute shares the row of addmm's other input


def test_report_states_the_weight_copies_each_engine_holds(tmp_path, monkeypatch):
    """The memory price of an engine decision is reported per partition: oneDNN reading a
    linear's weights in place costs nothing extra; a prepacked copy costs N*K float32 per kernel;
    the own GEMM's packed copy at least N*K (padded panels). linear_weights chooses the layout;
    "auto" times both per shape when autotuning and records the decision in the tuning database."""
    import torch

    import verifuse

    def fresh_model():
        torch._dynamo.reset()  # Dynamo would reuse the compile of an earlier module of this class
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU()).eval()

    x = torch.randn(4, 64)

    def partition_of(report):
        (p,) = [p for p in report.to_dict()["partitions"] if p["ops"] == ["verifuse::linear"]]
        return p, report.to_dict()["graphs"][0]["weight_copy_bytes"]

    for layout, expected, copy in (("in-place", "in place", 0), ("packed", "prepacked", 96 * 64 * 4)):
        model = fresh_model()
        with torch.no_grad():
            want = model(x)
        with torch.no_grad():
            got = torch.compile(model, backend="verifuse", options={"linear_weights": layout, "autotune": False,
                                                                    "strict": True})(x)
        torch.testing.assert_close(got, want)
        p, total = partition_of(verifuse.explain(fresh_model(), x, autotune=False, linear_weights=layout,
                                                 strict=True))
        if p["engine"] == "gemm":  # the own GEMM: always a packed copy, so never for "in-place"
            assert layout == "packed", p
            assert p["weight_layout"] == "packed" and p["weight_copy_bytes"] >= 96 * 64 * 4
            continue
        assert p["engine"] == "onednn" and p["weight_layout"] == expected, p
        assert p["weight_copy_bytes"] == copy == total
    # Explaining the same module again reports the plan that runs (Dynamo reuses its compile).
    model = fresh_model()
    verifuse.explain(model, x, autotune=False)
    again = verifuse.explain(model, x, autotune=False)
    assert len(again.graphs) == 1 and "weights (copy)" in str(again)

    # "auto" with autotuning: both layouts timed on the real shape, the decision kept per shape.
    cache = tmp_path / "cache"
    p, _ = partition_of(verifuse.explain(fresh_model(), x, autotune=True, cache_dir=str(cache), strict=True))
    if p["engine"] == "onednn":
        assert p["weight_layout"] in ("in place", "prepacked")
        records = b"".join(f.read_bytes() for f in cache.rglob("*") if f.is_file())
        assert b"verifuse::linear weights n=96 k=64" in records and b"in-place" in records
    # Many rows per weight (>= 256): packed without timing the layouts (every timing chose it).
    cache = tmp_path / "cache-rows"
    monkeypatch.setenv("VERIFUSE_LINEAR", "onednn")  # the own GEMM may win the timing: it always packs
    report = verifuse.explain(fresh_model(), torch.randn(256, 64), autotune=True, cache_dir=str(cache), strict=True)
    p, _ = partition_of(report)
    assert p["weight_layout"] == "prepacked" and p["weight_copy_bytes"] >= 96 * 64 * 4, p
    records = b"".join(f.read_bytes() for f in cache.rglob("*") if f.is_file())
    assert b"verifuse::linear weights" not in records
    with pytest.raises(verifuse.OptionsError, match="linear_weights"):
        verifuse.explain(fresh_model(), x, linear_weights="blocked")


def test_profiler_sees_each_engine_run():
    """torch.profiler names each fused op's run with its engine ("verifuse::linear@onednn"), so
    a profile says where the time goes inside the plan, not only inside ATen's ops."""
    import torch

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 8)).eval()
    compiled = torch.compile(model, backend="verifuse", options={"strict": True, "autotune": False})
    x = torch.randn(4, 32)
    with torch.no_grad():
        compiled(x)
        with torch.profiler.profile() as prof:
            compiled(x)
    names = [e.key for e in prof.key_averages()]
    runs = [n for n in names if n.startswith("verifuse::linear@")]
    assert runs and all(n.split("@")[1] in ("onednn", "gemm", "aten") for n in runs), names
