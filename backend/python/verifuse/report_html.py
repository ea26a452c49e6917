"""The explain report as a picture: one self-contained HTML file (inline SVG and CSS, no scripts,
no network) that draws every compiled graph with its partitions coloured, fused nodes marked and
each node's engine, followed by the report's tables.

The layout is computed here (layered, top to bottom: a node sits one layer below its deepest
input; nodes within a layer are ordered by the mean position of their inputs), so the picture
needs no graphviz and is the same for the same report.
"""
from __future__ import annotations

import dataclasses
import html
import math
from typing import TYPE_CHECKING, Any, Iterable

from .report_fold import readable

if TYPE_CHECKING:  # pragma: no cover
    from .report import GraphReport, Report

__all__ = ["Layout", "parse_graph_text", "graph_nodes", "layout_graph", "render_graph_svg", "render_html"]

# Geometry of the drawing, in SVG user units (px).
NODE_W, NODE_H = 184, 54
INPUT_W, INPUT_H = 96, 26
GAP_X, GAP_Y = 26, 44
SLOT_W = 14  # the slot an edge takes in each layer it crosses
MARGIN = 16

# Partition fills: pastel, distinguishable, cycled when there are more partitions.
_PALETTE = ["#cfe2ff", "#d1f2d6", "#ffe3c2", "#e6d6ff", "#ffd6e0", "#cff4f2", "#fff3b0",
            "#e2e8c8", "#f5d0c5", "#d7dbe8"]
_ATEN_FILL = "#f4f4f4"

def parse_graph_text(text: str) -> list[dict[str, Any]]:
    """Reads the IR text form (``%3 : Tensor = aten::relu(%2)``) into the per-node records the
    picture draws: {id, op, inputs, partition, engine, fusion, graph_output}.

    The text is parsed by the IR's own parser and described by the driver (``_C.graph_nodes``), so
    the format is read in one place. ``inputs`` holds node ids (ints) and, for graph inputs, their
    ``%name`` (str). The text says nothing about partitions, so ``partition`` is None; ``engine`` is
    "onednn" for verifuse's own fused ops (``verifuse::conv``, ``verifuse::linear``: oneDNN
    kernels) and "aten" otherwise; ``fusion`` is a fused conv/linear's post-op list. Text that does
    not parse draws nothing.
    """
    from . import _C

    try:
        nodes = _C.graph_nodes(text)
    except ValueError:
        return []
    for node in nodes:
        node["partition"] = None
        node["engine"] = "onednn" if node["op"].startswith("verifuse::") else "aten"
    return nodes


# The unfolded picture of a folded graph is offered (expandable) up to this many nodes.
FULL_PICTURE_MAX_NODES = 400


def graph_nodes(graph: "GraphReport") -> list[dict[str, Any]]:
    """The nodes to draw: ``graph.nodes`` when the compiler filled it, else parsed from
    ``graph.graph_text``."""
    if graph.nodes:
        from .report import node_rows

        return node_rows(graph)
    return parse_graph_text(graph.graph_text) if graph.graph_text else []


def conversion_edges(graph: "GraphReport", nodes: list[dict[str, Any]]) -> dict[tuple[Any, Any], str]:
    """The edges that carry a conversion the plan really performs, with what it is: an input
    conversion on (producer, node), an output conversion on (node, reader) for each reader.
    Partition crossings without a conversion are not here."""
    out: dict[tuple[Any, Any], str] = {}
    readers: dict[Any, list[Any]] = {}
    for n in nodes:
        for ref in n.get("inputs", []):
            readers.setdefault(ref, []).append(n["id"])
    for p in graph.partitions:
        for c in p.get("conversions") or []:
            what = f"{c.get('kind')} of {c.get('value')}" + (
                f", {c['bytes'] / 1024:.0f} KiB" if (c.get("bytes") or -1) >= 0 else "")
            if c.get("direction") == "input":
                out[(c.get("producer"), c.get("node"))] = what
            else:
                for r in readers.get(c.get("node"), []):
                    out[(c.get("node"), r)] = what
    return out


def engine_class(runs_on: str) -> str:
    """The picture's border for what runs a node: oneDNN blue, verifuse's own engines green, MKL
    purple, ATen dashed grey."""
    if runs_on.lower() == "onednn":  # (a text-only graph carries the planner's name)
        return "onednn"
    if runs_on.startswith("MKL"):
        return "mkl"
    if runs_on in ("own GEMM", "row engine", "attention engine") or runs_on.startswith("int8 kernel"):
        return "own"
    return "aten"


@dataclasses.dataclass
class Layout:
    """Where everything goes: ``boxes`` {node id or graph input "%name": (x, y, w, h)}; ``routes``
    {(source, destination): [(x, y), ...]} from the source's bottom to the destination's top,
    through the free slots that edges spanning several layers get; width and height."""

    boxes: dict[Any, tuple[float, float, float, float]]
    routes: dict[tuple[Any, Any], list[tuple[float, float]]]
    width: float
    height: float


def _edges(nodes: list[dict[str, Any]], by_id: dict[Any, dict[str, Any]]) -> list[tuple[Any, Any]]:
    """(source, destination) pairs, each once, in node and then input order."""
    seen: set[tuple[Any, Any]] = set()
    out = []
    for n in nodes:
        for ref in n.get("inputs", []):
            if (ref in by_id or isinstance(ref, str)) and (ref, n["id"]) not in seen:
                seen.add((ref, n["id"]))
                out.append((ref, n["id"]))
    return out


def layout_graph(nodes: list[dict[str, Any]]) -> Layout:
    """Layered layout (Sugiyama-style, one sweep): graph inputs on top, every node one layer below
    its deepest input, an edge that spans several layers routed through a narrow slot in each
    layer it crosses (so it never runs behind a box), and each layer ordered by the mean x of
    what feeds it."""
    by_id = {n["id"]: n for n in nodes}
    layer: dict[Any, int] = {}
    edges = _edges(nodes, by_id)
    for src, _ in edges:
        if src not in by_id:
            layer[src] = 0

    def assign_layer(root: Any) -> None:
        # Iterative post-order, so a deep graph (ResNet-50 has ~170 layers) cannot hit Python's
        # recursion limit; a node on the stack counts as layer 0 if a malformed graph loops.
        visiting: set[Any] = set()
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            key, expanded = stack.pop()
            if key in layer:
                continue
            refs = [r for r in by_id[key].get("inputs", []) if r in by_id or r in layer]
            if not expanded:
                visiting.add(key)
                stack.append((key, True))
                stack.extend((r, False) for r in refs if r in by_id and r not in layer and r not in visiting)
            else:
                layer[key] = 1 + max((layer.get(r, 0) for r in refs), default=0)

    for n in nodes:
        assign_layer(n["id"])
    # A node that reads only constants (a weight permute) sits just above its first reader,
    # not on top with an edge down the whole picture.
    for n in reversed(nodes):
        if any(src == n["id"] for src, _ in edges) and not any(dst == n["id"] for _, dst in edges):
            readers = [layer[dst] for src, dst in edges if src == n["id"]]
            layer[n["id"]] = max(min(readers) - 1, 1)

    # Rows of keys: nodes, graph inputs, and one ("~", edge index, layer) slot per crossed layer.
    rows: dict[int, list[Any]] = {}
    upper: dict[Any, list[Any]] = {}  # key -> what feeds it from the row above
    chains: dict[tuple[Any, Any], list[Any]] = {}
    for key in [k for k in layer if k not in by_id] + [n["id"] for n in nodes]:
        rows.setdefault(layer[key], []).append(key)
    for index, (src, dst) in enumerate(edges):
        chain = [src]
        for k in range(layer[src] + 1, layer[dst]):
            slot = ("~", index, k)
            rows.setdefault(k, []).append(slot)
            upper[slot] = [chain[-1]]
            chain.append(slot)
        upper.setdefault(dst, []).append(chain[-1])
        chains[(src, dst)] = chain + [dst]

    def width_of(key: Any) -> float:
        if isinstance(key, tuple):
            return SLOT_W
        return INPUT_W if key not in by_id else NODE_W

    # Order each row by the mean centre of what feeds it (stable for ties), then place it.
    centre: dict[Any, float] = {}
    for k in sorted(rows):
        row = rows[k]
        if k > 0:
            original = {key: i for i, key in enumerate(row)}

            def barycenter(key: Any) -> tuple[float, int]:
                xs = [centre[u] for u in upper.get(key, []) if u in centre]
                return (sum(xs) / len(xs) if xs else math.inf, original[key])

            row.sort(key=barycenter)
        x = 0.0
        for key in row:
            centre[key] = x + width_of(key) / 2
            x += width_of(key) + GAP_X

    row_widths = {k: sum(width_of(key) for key in row) + GAP_X * (len(row) - 1) for k, row in rows.items()}
    width = 2 * MARGIN + max(row_widths.values(), default=0.0)
    boxes: dict[Any, tuple[float, float, float, float]] = {}
    slot_x: dict[Any, float] = {}
    row_top: dict[int, float] = {}
    row_height: dict[int, float] = {}
    y = float(MARGIN)
    for k in sorted(rows):
        shift = (width - row_widths[k]) / 2
        row_top[k] = y
        row_height[k] = INPUT_H if k == 0 else NODE_H
        for key in rows[k]:
            cx = centre[key] + shift
            if isinstance(key, tuple):
                slot_x[key] = cx
                continue
            w, h = (NODE_W, NODE_H) if key in by_id else (INPUT_W, INPUT_H)
            boxes[key] = (cx - w / 2, y, w, h)
        y += row_height[k] + GAP_Y
    height = y - GAP_Y + MARGIN if rows else 2.0 * MARGIN

    routes: dict[tuple[Any, Any], list[tuple[float, float]]] = {}
    for edge, chain in chains.items():
        sx, sy, sw, sh = boxes[chain[0]]
        points = [(sx + sw / 2, sy + sh)]
        for slot in chain[1:-1]:
            k = slot[2]
            points.append((slot_x[slot], row_top[k]))
            points.append((slot_x[slot], row_top[k] + row_height[k]))
        dx, dy, dw, _ = boxes[chain[-1]]
        points.append((dx + dw / 2, dy))
        routes[edge] = points
    return Layout(boxes, routes, float(width), float(height))


def _route_path(points: list[tuple[float, float]]) -> str:
    """Smooth vertical S-curves between layers, straight runs through a layer's slot."""
    (x, y), rest = points[0], points[1:]
    d = [f"M{x:.1f},{y:.1f}"]
    for i, (nx, ny) in enumerate(rest):
        if i % 2 == 0:  # between layers (a gap): an S-curve
            bend = max((ny - y) / 2, 12.0)
            d.append(f"C{x:.1f},{y + bend:.1f} {nx:.1f},{ny - bend:.1f} {nx:.1f},{ny - (1 if i == len(rest) - 1 else 0):.1f}")
        else:  # through a layer, inside an empty slot
            d.append(f"L{nx:.1f},{ny:.1f}")
        x, y = nx, ny
    return " ".join(d)


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _short_op(op: str) -> str:
    for prefix in ("aten::", "prims::"):
        if op.startswith(prefix):
            op = op[len(prefix):]
    return op if len(op) <= 26 else op[:25] + "…"


def partition_color(partition: Any) -> str:
    if partition is None:
        return _ATEN_FILL
    return _PALETTE[int(partition) % len(_PALETTE)]


def render_graph_svg(nodes: list[dict[str, Any]], title: str = "",
                     conversions: "dict[tuple[Any, Any], str] | None" = None,
                     frame: "list[Any] | None" = None, frame_label: str = "") -> str:
    """One graph as an inline ``<svg>``: boxes filled by partition, the border saying what runs
    the node (engine_class), an orange stripe and ``+ post-ops`` line on fused nodes, and red
    dashed edges exactly where the plan converts a tensor (``conversions``, from conversion_edges)."""
    conversions = conversions or {}
    if not nodes:
        return '<p class="empty">no nodes recorded for this graph</p>'
    lay = layout_graph(nodes)
    boxes, width, height = lay.boxes, lay.width, lay.height
    by_id = {n["id"]: n for n in nodes}
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width:.0f}" '
           f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
           f'aria-label="{_esc(title)}">']
    out.append('<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
               'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
               'fill="#666"/></marker><marker id="arrow-red" viewBox="0 0 10 10" refX="9" refY="5" '
               'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path '
               'd="M0,0 L10,5 L0,10 z" fill="#c62828"/></marker></defs>')
    if frame:
        inside = [boxes[k] for k in frame if k in boxes]
        if inside:
            x0 = min(b[0] for b in inside) - 14
            y0 = min(b[1] for b in inside) - 24
            x1 = max(b[0] + b[2] for b in inside) + 14
            y1 = max(b[1] + b[3] for b in inside) + 10
            out.append(f'<g class="fold"><rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
                       f'rx="10"/><text x="{x0 + 10:.1f}" y="{y0 + 16:.1f}">{_esc(frame_label)}</text></g>')
    # Edges first, so boxes cover their ends.
    for (src, dst), points in lay.routes.items():
        what = conversions.get((src, dst))
        src_part = by_id[src].get("partition") if src in by_id else None
        crossing = src_part != by_id[dst].get("partition")
        cls = "edge reorder" if what else ("edge crossing" if crossing else "edge")
        marker = "arrow-red" if what else "arrow"
        tip = f"<title>{_esc(what)}</title>" if what else ""
        out.append(f'<path class="{cls}" d="{_route_path(points)}" marker-end="url(#{marker})">{tip}</path>')
    for key, (x, y, w, h) in boxes.items():
        if key in by_id:
            continue
        out.append(f'<g class="input"><title>graph input {_esc(key)}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="13"/>'
                   f'<text x="{x + w / 2:.1f}" y="{y + 17:.1f}" text-anchor="middle">{_esc(key)}</text></g>')
    for n in nodes:
        x, y, w, h = boxes[n["id"]]
        part = n.get("partition")
        engine = n.get("runs_on") or n.get("engine") or "ATen"
        fusion = n.get("fusion")
        fused = bool(fusion) or str(n.get("op", "")).startswith("verifuse::")
        classes = ["node", engine_class(engine)]
        if fused:
            classes.append("fused")
        tip = [f"node {n['id']}: {n.get('op')}", f"engine: {engine}",
               f"partition: {'none (ATen)' if part is None else part}"]
        if fusion:
            tip.append(f"fusion: {fusion}")
        if n.get("summary"):
            tip.append(f"collapsed: {n['summary']}")
        if n.get("graph_output"):
            tip.append("graph output")
        out.append(f'<g class="{" ".join(classes)}" data-node="{_esc(n["id"])}">'
                   f'<title>{_esc(chr(10).join(tip))}</title>')
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w}" height="{h}" rx="6" '
                   f'fill="{partition_color(part)}"/>')
        if fused:
            out.append(f'<rect class="stripe" x="{x:.1f}" y="{y:.1f}" width="6" height="{h}" rx="3"/>')
        out.append(f'<text class="op" x="{x + 12:.1f}" y="{y + 17:.1f}">{_esc(_short_op(str(n.get("op"))))}</text>')
        where = f"P{part}" if part is not None else "—"
        if n.get("collapsed"):  # index/mask building collapsed into this box (report_fold)
            summary = str(n.get("summary", ""))
            out.append(f'<text class="meta" x="{x + 12:.1f}" y="{y + 32:.1f}">{len(n["collapsed"])} ATen ops · '
                       f'{_esc(summary if len(summary) <= 24 else summary[:23] + "…")}</text>')
            out.append("</g>")
            continue
        out.append(f'<text class="meta" x="{x + 12:.1f}" y="{y + 32:.1f}">#{_esc(n["id"])} · {_esc(engine)} · '
                   f'{_esc(where)}{" · out" if n.get("graph_output") else ""}</text>')
        if fusion:
            label = str(fusion)
            label = label if len(label) <= 28 else label[:27] + "…"
            out.append(f'<text class="fusion" x="{x + 12:.1f}" y="{y + 47:.1f}">+ {_esc(label)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if value < 0:
            return "n/a"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) if len(value) <= 12 else f"{len(value)} nodes"
    return str(value)


def _table(caption: str, headers: list[str], rows: Iterable[list[Any]]) -> str:
    rows = list(rows)
    out = [f"<h3>{_esc(caption)} <span class=\"count\">({len(rows)})</span></h3>"]
    if not rows:
        out.append('<p class="empty">none</p>')
        return "\n".join(out)
    out.append("<table><thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{_esc(_fmt(v))}</td>" for v in row) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _legend(graph: "GraphReport", nodes: list[dict[str, Any]]) -> str:
    from .report import _candidates_cell

    items = []
    ids = sorted({n["partition"] for n in nodes if n.get("partition") is not None})
    for pid in ids:
        entry = next((p for i, p in enumerate(graph.partitions) if p.get("id", i) == pid), {})
        timed = _candidates_cell(entry) if entry else "-"
        times = "" if timed == "-" else f" · timed (ms): {timed}"
        runs = sorted({n.get("runs_on") or n.get("engine") or "ATen" for n in nodes if n.get("partition") == pid})
        items.append(f'<span class="chip" style="background:{partition_color(pid)}">P{pid} · '
                     f'{_esc(" + ".join(runs))}{_esc(times)}</span>')
    items.append(f'<span class="chip" style="background:{_ATEN_FILL}">no partition · ATen</span>')
    items.append('<span class="chip key-onednn">oneDNN</span>')
    items.append('<span class="chip key-own">verifuse engine (own GEMM, row, attention, int8)</span>')
    items.append('<span class="chip key-mkl">MKL sgemm</span>')
    items.append('<span class="chip key-aten">ATen</span>')
    items.append('<span class="chip key-fused">fused (+ post-ops)</span>')
    items.append('<span class="chip key-reorder">conversion (hover: kind, bytes)</span>')
    return '<div class="legend">' + " ".join(items) + "</div>"


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 6px} h3{font-size:15px;margin:18px 0 6px}
.summary{color:#444} .count{color:#888;font-weight:normal} .empty{color:#888;font-style:italic}
table{border-collapse:collapse;margin:4px 0 8px} th,td{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f6f6f6} td{font-variant-numeric:tabular-nums}
.scroll{overflow:auto;border:1px solid #e4e4e4;border-radius:6px;max-height:80vh;background:#fff}
.legend{margin:6px 0 8px} .chip{display:inline-block;padding:2px 8px;margin:2px;border-radius:10px;border:1px solid #ccc;font-size:12px}
.key-onednn{border:2px solid #1f4e9c} .key-aten{border:2px dashed #999} .key-fused{border-left:6px solid #e8710a}
.key-reorder{border:2px dashed #c62828} .key-own{border:2px solid #2e7d32} .key-mkl{border:2px solid #6a1b9a}
svg.graph text{font:12px system-ui,sans-serif;fill:#222} svg.graph text.meta{fill:#555;font-size:11px}
svg.graph text.fusion{fill:#b35400;font-weight:600;font-size:11px}
svg.graph .node.onednn rect{stroke:#1f4e9c;stroke-width:2}
svg.graph .node.aten rect{stroke:#999;stroke-width:1.5;stroke-dasharray:5 3}
svg.graph .node.own rect{stroke:#2e7d32;stroke-width:2} svg.graph .node.mkl rect{stroke:#6a1b9a;stroke-width:2}
svg.graph .node rect.stripe{fill:#e8710a;stroke:none}
svg.graph .input rect{fill:#fff;stroke:#555} svg.graph .edge{fill:none;stroke:#888;stroke-width:1.3}
svg.graph .edge.reorder{stroke:#c62828;stroke-width:1.8;stroke-dasharray:6 3}
svg.graph .edge.crossing{stroke:#555}
svg.graph .fold rect{fill:#f3f6fb;stroke:#7a8db3;stroke-width:1.5;stroke-dasharray:4 3}
svg.graph .fold text{font-weight:700;fill:#33466b;font-size:13px}
details{margin:6px 0}
"""


def render_html(report: "Report") -> str:
    """The whole report as one HTML document (UTF-8, no external resources)."""
    data = report.to_dict()
    graphs = report.graphs
    total_parts = len(data.get("partitions", []))
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        "<title>verifuse report</title>", f"<style>{_CSS}</style></head><body>",
        "<h1>verifuse report</h1>",
        f'<p class="summary">{len(graphs)} graph(s) · compile {report.compile_seconds:.3f} s · '
        f'{len(data.get("fusions", []))} fusion(s) · {total_parts} partition(s) · '
        f'{data.get("reorders", 0)} layout conversion(s) · {len(data.get("fallbacks", []))} fallback(s)</p>',
    ]
    for g in graphs:
        nodes = graph_nodes(g)
        parts.append(f"<h2>graph {g.graph_id} <span class=\"count\">engine {_esc(g.engine)} · "
                     f"{len(nodes)} node(s) · {g.reorders} layout conversion(s) · compile "
                     f"{g.compile_seconds:.3f} s</span></h2>")
        edges = conversion_edges(g, nodes)
        drawn, fold, stands_for = readable(nodes)
        parts.append(_legend(g, drawn))  # the partitions the picture shows
        if len(drawn) == len(nodes) and fold is None:
            parts.append('<div class="scroll">' + render_graph_svg(nodes, f"graph {g.graph_id}", edges) + "</div>")
            continue
        # Readable at scale: the picture with repeated layers drawn once and index building
        # collapsed, the conversions moved onto the drawn nodes standing for theirs; the whole
        # graph below it, expandable (only when it is small enough to draw at all).
        moved: dict[tuple[Any, Any], str] = {}
        for (src, dst), what in edges.items():
            key = (stands_for.get(src, src), stands_for.get(dst, dst))
            if key[0] != key[1]:
                moved.setdefault(key, what)
        label = ""
        if fold is not None:
            label = (f"× {fold.count} — {fold.count} identical layers of {fold.period} nodes, drawn once "
                     f"(the tables list every node)")
        collapsed = sum(len(n.get("collapsed", [])) for n in drawn)
        note = []
        if fold is not None:
            note.append(f"{fold.count} repeated layers drawn as one")
        if collapsed:
            note.append(f"{collapsed} shape/index node(s) collapsed")
        parts.append(f'<p class="summary">Drawn: {len(drawn)} of {len(nodes)} nodes ({"; ".join(note)}).</p>')
        parts.append('<div class="scroll">' + render_graph_svg(drawn, f"graph {g.graph_id}", moved,
                                                              fold.drawn if fold else None, label) + "</div>")
        if len(nodes) <= FULL_PICTURE_MAX_NODES:
            parts.append(f"<details><summary>the whole graph ({len(nodes)} nodes)</summary>"
                         '<div class="scroll">' + render_graph_svg(nodes, f"graph {g.graph_id} (whole)", edges)
                         + "</div></details>")
        else:
            parts.append(f'<p class="empty">the whole graph ({len(nodes)} nodes) is too big to draw; '
                         "the tables below list every node</p>")

    parts.append("<h2>tables</h2>")
    parts.append(_table("fusions", ["graph", "rule", "nodes", "verdict", "max error bound", "layer check (Z3)"],
                        ([f.get("graph"), f.get("rule"), f.get("nodes"), f.get("verdict"),
                          f.get("max_error_bound"), f.get("layer_check")] for f in data.get("fusions", []))))
    from .report import _candidates_cell

    parts.append(_table("partitions", ["graph", "partition", "nodes", "runs on", "kernel", "timed (ms per run)",
                                       "conversions"],
                        ([p.get("graph"), p.get("id"), p.get("nodes"), p.get("runs_on"), p.get("impl") or "—",
                          _candidates_cell(p), "; ".join(f"{c['kind']} ({c['value']})" for c in p.get("conversions") or [])
                          or "—"] for p in data.get("partitions", []))))
    parts.append(_table("fallbacks", ["graph", "node / op", "reason"],
                        ([f.get("graph"), f.get("node"), f.get("reason")] for f in data.get("fallbacks", []))))
    parts.append(_table("proofs", ["graph", "rule", "verdict", "seconds"],
                        ([p.get("graph"), p.get("rule"), p.get("verdict"), p.get("seconds")]
                         for p in data.get("proofs", []))))
    parts.append(_table("layout conversions and compile time", ["graph", "reorders", "compile s"],
                        ([g.graph_id, g.reorders, round(g.compile_seconds, 4)] for g in graphs)))
    parts.append("</body></html>\n")
    return "\n".join(parts)
