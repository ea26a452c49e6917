"""Making a big graph's picture readable (issue 44, part 3): index- and mask-building subgraphs
collapsed into one box, and a run of identical layers drawn once with "× N".

Both work on the per-node records the picture draws (report_html.graph_nodes) and keep the
records' meaning: a collapsed box or a folded layer stands for nodes that are still listed in the
report's tables; edges into and out of them are redirected, never invented.
"""
from __future__ import annotations

import dataclasses
from typing import Any

# ATen operators that build indices, masks and positions from shapes and small integer tensors
# (attention masks, rotary positions, causal masks): what transformers' preambles are made of.
INDEX_OPS = frozenset({
    "arange", "slice", "select", "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "index",
    "cumsum", "bitwise_and", "bitwise_or", "bitwise_not", "eq", "ne", "lt", "le", "gt", "ge", "where", "full",
    "ones", "zeros", "scalar_tensor", "_to_copy", "to", "type_as", "masked_fill", "sub", "rsub", "add", "mul",
    "clone", "lift_fresh_copy", "alias", "permute", "transpose", "t", "cat", "stack", "new_ones", "new_zeros",
    "logical_and", "logical_or", "logical_not", "any", "all", "min", "max", "diff", "copy", "detach", "sym_size",
    "embedding", "repeat", "tril", "triu", "fill", "empty", "floor_divide", "remainder", "abs",
})
# Fold only pictures at least this big, and collapse index building only from COLLAPSE_MIN_NODES:
# small graphs are readable as they are (and their tests see every node).
FOLD_MIN_NODES = 80
COLLAPSE_MIN_NODES = 40
MIN_COLLAPSE = 3


@dataclasses.dataclass
class Fold:
    """Layers [start, start + period·count) of the (collapsed) node list, drawn as the first one."""

    start: int
    period: int
    count: int
    drawn: list[Any]  # ids of the drawn layer's nodes


def _short(op: str) -> str:
    name = op.split("::")[-1]
    return name.split(".")[0]


def _redirected(node: dict[str, Any], stands_for: dict[Any, Any]) -> dict[str, Any]:
    """A copy of ``node`` whose inputs read what stands for them (each input once)."""
    row = dict(node)
    refs: list[Any] = []
    for ref in node.get("inputs", []):
        ref = stands_for.get(ref, ref)
        if ref not in refs:
            refs.append(ref)
    row["inputs"] = refs
    return row


def collapse_index_building(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each connected set of at least MIN_COLLAPSE index-building ATen nodes (INDEX_OPS, outside
    every partition) becomes one box listing its operators; readers of its nodes read the box."""
    candidates = {n["id"] for n in nodes if n.get("partition") is None and _short(str(n.get("op"))) in INDEX_OPS}
    parent = {i: i for i in candidates}

    def find(i: Any) -> Any:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for n in nodes:
        if n["id"] not in candidates:
            continue
        for ref in n.get("inputs", []):
            if ref in candidates:
                parent[find(ref)] = find(n["id"])
    groups: dict[Any, list[dict[str, Any]]] = {}
    for n in nodes:
        if n["id"] in candidates:
            groups.setdefault(find(n["id"]), []).append(n)
    box_of: dict[Any, int] = {}
    boxes: dict[int, dict[str, Any]] = {}
    for k, (_, members) in enumerate(sorted(((r, m) for r, m in groups.items() if len(m) >= MIN_COLLAPSE),
                                             key=lambda rm: rm[1][0]["id"] if isinstance(rm[1][0]["id"], int) else 0)):
        box_id = -1000 - k
        ids = {m["id"] for m in members}
        inputs: list[Any] = []
        for m in members:
            for ref in m.get("inputs", []):
                if ref not in ids and ref not in inputs:
                    inputs.append(ref)
        ops: dict[str, int] = {}
        for m in members:
            ops[_short(str(m["op"]))] = ops.get(_short(str(m["op"])), 0) + 1
        summary = ", ".join(f"{o} x{c}" if c > 1 else o for o, c in ops.items())
        boxes[box_id] = {"id": box_id, "op": "shape & index ops", "inputs": inputs, "partition": None,
                         "engine": "aten", "runs_on": "ATen", "fusion": None,
                         "collapsed": sorted(ids, key=str), "summary": summary,
                         "graph_output": any(m.get("graph_output") for m in members)}
        for i in ids:
            box_of[i] = box_id
    if not boxes:
        return [dict(n) for n in nodes]
    out: list[dict[str, Any]] = []
    placed: set[int] = set()
    for n in nodes:
        b = box_of.get(n["id"])
        if b is not None:
            if b not in placed:  # the box sits where its first node was
                placed.add(b)
                out.append(boxes[b])
            continue
        out.append(_redirected(n, box_of))
    # A box reads only what is outside itself; boxes may read other boxes.
    for b in boxes.values():
        b["inputs"] = [box_of.get(r, r) for r in b["inputs"] if box_of.get(r, r) != b["id"]]
    return out


def _signatures(nodes: list[dict[str, Any]]) -> list[tuple[tuple, tuple]]:
    """Per node: (operator, fusion, engine) and the distances back to its inputs (None for a graph
    input), sorted."""
    pos = {n["id"]: i for i, n in enumerate(nodes)}
    out = []
    for i, n in enumerate(nodes):
        dists = sorted((i - pos[r]) if r in pos else -1 for r in n.get("inputs", []))
        out.append(((n.get("op"), n.get("fusion"), n.get("runs_on")), tuple(dists)))
    return out


def _same(a: tuple[tuple, tuple], b: tuple[tuple, tuple], horizon: int) -> bool:
    """Two nodes are the same layer position: same operator, fusion and engine, and the same
    distances to their inputs up to ``horizon`` (farther inputs, e.g. a mask every layer reads,
    only have to be far in both)."""
    if a[0] != b[0] or len(a[1]) != len(b[1]):
        return False
    clip = lambda d: d if d <= horizon else horizon + 1  # noqa: E731
    return sorted(map(clip, a[1])) == sorted(map(clip, b[1]))


def find_repeated_layers(nodes: list[dict[str, Any]], min_period: int = 4) -> "Fold | None":
    """The run of identical consecutive layers covering the most nodes (the shortest period on a
    tie), or None when none repeats twice."""
    n = len(nodes)
    sig = _signatures(nodes)
    best: tuple[int, int, int, int] | None = None  # (covered, -period, start, count)
    for period in range(min_period, n // 2 + 1):
        run = 0
        for i in range(n - period - 1, -2, -1):
            if i >= 0 and _same(sig[i], sig[i + period], period):
                run += 1
                continue
            if run >= period:
                start = i + 1
                count = (run + period) // period
                cand = (count * period, -period, start, count)
                if best is None or cand > best:
                    best = cand
            run = 0
    if best is None:
        return None
    _, neg_period, start, count = best
    period = -neg_period
    return Fold(start, period, count, [nodes[start + k]["id"] for k in range(period)])


def fold_layers(nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], "Fold | None"]:
    """The nodes to draw with the repeated layers folded into their first (FOLD_MIN_NODES and up):
    the later layers' nodes are left out, and whatever read them reads the first layer's
    counterpart instead."""
    if len(nodes) < FOLD_MIN_NODES:
        return nodes, None
    fold = find_repeated_layers(nodes)
    if fold is None:
        return nodes, None
    first, end = fold.start + fold.period, fold.start + fold.period * fold.count
    counterpart = {nodes[i]["id"]: nodes[fold.start + (i - fold.start) % fold.period]["id"] for i in range(first, end)}
    out = []
    for i, n in enumerate(nodes):
        if first <= i < end:
            continue
        out.append(_redirected(n, counterpart))
    return out, fold


def readable(nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], "Fold | None", dict[Any, Any]]:
    """Both steps; also the map from every original node id to the drawn node standing for it
    (for redirecting the conversion edges)."""
    collapsed = collapse_index_building(nodes) if len(nodes) >= COLLAPSE_MIN_NODES else [dict(n) for n in nodes]
    stands_for: dict[Any, Any] = {}
    for n in collapsed:
        for i in n.get("collapsed", [n["id"]]):
            stands_for[i] = n["id"]
    drawn, fold = fold_layers(collapsed)
    if fold is not None:
        first, end = fold.start + fold.period, fold.start + fold.period * fold.count
        rep = {collapsed[i]["id"]: collapsed[fold.start + (i - fold.start) % fold.period]["id"] for i in range(first, end)}
        stands_for = {orig: rep.get(now, now) for orig, now in stands_for.items()}
    return drawn, fold, stands_for
