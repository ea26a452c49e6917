"""explain's picture at transformer scale (issue 44, part 3): repeated layers drawn once with
"× N" and index/mask-building subgraphs collapsed, so a 12-layer BERT draws a few dozen boxes
instead of hundreds, with every node still in the tables."""
from __future__ import annotations

import re

import pytest
import torch

import verifuse
from verifuse.report_fold import collapse_index_building, find_repeated_layers, fold_layers


def layer(base: int, prev: int) -> list[dict]:
    """Ten nodes: a fused linear chain with a residual from the previous layer's output."""
    ids = list(range(base, base + 10))
    nodes = []
    for k, i in enumerate(ids):
        inputs = [ids[k - 1] if k else prev]
        if k == 9:
            inputs.append(prev)  # the residual
        nodes.append({"id": i, "op": "verifuse::linear" if k % 3 == 0 else "verifuse::rowwise", "inputs": inputs,
                      "partition": i, "fusion": None, "runs_on": "own GEMM" if k % 3 == 0 else "row engine"})
    return nodes


def synthetic(layers: int = 12, odd: int | None = None) -> list[dict]:
    nodes = [{"id": k, "op": "aten::embedding", "inputs": ["%x"] if k == 0 else [k - 1], "partition": None,
              "runs_on": "ATen"} for k in range(5)]
    prev = 4
    for j in range(layers):
        block = layer(100 + 10 * j, prev)
        if j == odd:
            block[4]["op"] = "aten::cumsum"
        nodes += block
        prev = block[-1]["id"]
    nodes += [{"id": 1000 + k, "op": "aten::tanh", "inputs": [prev if k == 0 else 1000 + k - 1], "partition": None,
               "runs_on": "ATen"} for k in range(3)]
    return nodes


def test_finds_the_repeated_layers():
    fold = find_repeated_layers(synthetic())
    assert (fold.start, fold.period, fold.count) == (5, 10, 12)
    drawn, fold = fold_layers(synthetic())
    assert len(drawn) == 5 + 10 + 3
    # the suffix now reads the drawn layer's last node
    assert drawn[-3]["inputs"] == [fold.drawn[-1]]


def test_a_different_layer_breaks_the_run():
    fold = find_repeated_layers(synthetic(odd=6))
    assert fold.period == 10 and fold.count == 6  # layers 0-5 repeat; 6 differs, 7-11 are 5


def test_index_building_collapses_into_one_box():
    nodes = [
        {"id": 0, "op": "aten::arange", "inputs": [], "partition": None},
        {"id": 1, "op": "aten::slice.Tensor", "inputs": [0], "partition": None},
        {"id": 2, "op": "aten::eq.Tensor", "inputs": [1, "%mask"], "partition": None},
        {"id": 3, "op": "aten::where.self", "inputs": [2], "partition": None},
        {"id": 4, "op": "aten::_scaled_dot_product_flash_attention_for_cpu", "inputs": ["%q", 3], "partition": 0},
        {"id": 5, "op": "aten::relu", "inputs": [4], "partition": None},
    ]
    out = collapse_index_building(nodes)
    boxes = [n for n in out if n.get("collapsed")]
    assert len(boxes) == 1 and boxes[0]["collapsed"] == [0, 1, 2, 3]
    assert boxes[0]["inputs"] == ["%mask"]
    assert next(n for n in out if n["id"] == 4)["inputs"] == ["%q", boxes[0]["id"]]
    assert [n["id"] for n in out if not n.get("collapsed")] == [4, 5]  # relu is no index building


def test_bert_base_depth_draws_one_layer():
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=12, num_attention_heads=4, intermediate_size=128,
                                  vocab_size=500)
    model = transformers.BertModel(cfg).eval()
    report = verifuse.explain(model, torch.randint(0, 500, (1, 32)))
    torch._dynamo.reset()
    html = __import__("verifuse.report_html", fromlist=["render_html"]).render_html(report)
    drawn = re.search(r"Drawn: (\d+) of (\d+) nodes", html)
    assert drawn, "the picture was not folded"
    assert int(drawn.group(1)) < 60 < 150 < int(drawn.group(2))
    assert "× 12 — 12 identical layers" in html
    first_svg = re.search(r"<svg.*?</svg>", html, re.S).group(0)
    assert len(first_svg) < 60_000  # ~12 KB; the unfolded picture of the same graph is ~115 KB
    # every node is still reported
    assert len(report.to_dict()["nodes"]) == int(drawn.group(2))
