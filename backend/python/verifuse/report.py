"""Per-graph compile reports, the process-wide counters behind ``verifuse.stats()``, and
``Report``, what ``verifuse.explain`` returns."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import threading
from typing import Any, Iterator

__all__ = ["GraphReport", "Report", "stats", "reset_stats"]

_lock = threading.Lock()
_counters: collections.Counter = collections.Counter()
_collectors: list[list["GraphReport"]] = []


@dataclasses.dataclass
class GraphReport:
    """What happened to one graph Dynamo handed to verifuse."""

    graph_id: int
    engine: str = "verifuse"  # "verifuse" or "eager" (fallback)
    fallbacks: list[dict[str, str]] = dataclasses.field(default_factory=list)
    fusions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    partitions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    proofs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    compile_seconds: float = 0.0
    ops: dict[str, int] = dataclasses.field(default_factory=dict)
    num_nodes: int = 0
    num_constants: int = 0
    graph_text: str = ""
    # Dynamic shapes (issue 5): the plan's shape assumptions, whether each follows from Dynamo's
    # guards, the guards verifuse added, and the graph's shape program as SMT-LIB.
    shape_guards: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    shape_program_smt2: str = ""
    # Layout conversions at partition boundaries (issue 6).
    reorders: int = 0
    # Per-node picture data (issue 6), filled by the compiler: one dict per node with keys id,
    # op, inputs (node ids; a graph input as its "%name"), partition (int or None), engine
    # ("onednn" | "aten", the planner's class), runs_on (what really runs it: node_rows) and
    # fusion (rule or post-op names, or None). When empty, save_html() reads graph_text instead.
    nodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # Per live node of graph_text, the engine that runs it: "onednn", "aten" (a fused op on
    # ATen), "dispatcher", "builtin" or "constant" (folded at compile time).
    engines: list[str] = dataclasses.field(default_factory=list)
    reorders_before: int = 0       # conversions if every oneDNN node were its own partition
    timings_run: int = 0           # autotuner timings this compile ran: engines and weight layouts (0 with a warm tuning DB)
    tuning_inputs_made: int = 0    # partitions given random timing inputs (0 with a warm tuning DB)
    tuning_inputs_through_views: int = 0  # of their tensors, made through the model's views (its strides)
    plan_passes: list[str] = dataclasses.field(default_factory=list)  # the planning passes that changed the plan, in order
    in_place_writes: int = 0       # written-back inputs (a static KV cache) the plan updates in place
    tuning_db: str = ""
    # Rule id -> rewrites applied (every phase: canonicalization, no-ops, dead code, fusions).
    rewrites: dict[str, int] = dataclasses.field(default_factory=dict)
    # Near misses: a rule's op matched but a guard refused, with the rule's reason ({rule, op,
    # name, reason}); explain(..., verbose=True) prints them.
    near_misses: list[dict[str, str]] = dataclasses.field(default_factory=list)
    near_misses_omitted: int = 0
    # The int8 ops' kernel choices (variant, kernel, each candidate's exactness verdict), asked of
    # the plan when the report is read: int8 ops choose at their first run.
    int8_kernels_of: Any = dataclasses.field(default=None, repr=False, compare=False)
    # The plan the graph runs (verifuse.profile asks it for its per-node times), or None.
    plan_of: Any = dataclasses.field(default=None, repr=False, compare=False)
    trace_seconds: float = 0.0     # Dynamo's graph to the ATen graph (one trace, or AOT's)
    pipeline_seconds: float = 0.0  # rules, proofs and instance validation
    plan_seconds: float = 0.0      # executor plan: kernels created, weights prepacked
    lowering_seconds: float = 0.0  # the ATen graph handed to C++ (Python's lowering, node by node)
    first_run_seconds: float = 0.0  # the plan's first run (0 until it ran)
    # Bytes of weight copies the engines hold beyond the frozen weights (own GEMM's packed copies,
    # oneDNN's prepacked ones): the memory price of the engine decisions.
    weight_copy_bytes: int = 0
    # The part of them that is a packing an earlier plan of the process made and shares (the
    # prefill and decode plans of generate() pack the model's weights once): held once in memory.
    shared_weight_copy_bytes: int = 0
    # Saved plans (issue 18): "compiled", "plan-cache" or "saved-plan"; why a plan was refused or
    # not saved; Z3 queries this compile ran (0 when a plan was replayed).
    plan_source: str = "compiled"
    plan_note: str = ""
    solver_queries: int = 0
    # How the ATen graph was made: "one trace" (aten_trace.py) or "aot_autograd (<why>)".
    aten_trace: str = ""
    # Where the one trace came from: "traced", or "trace cache" (an earlier process's trace of the
    # same Dynamo graph and inputs, read from cache_dir: trace_cache.py); its key ("" uncached).
    trace_source: str = "traced"
    trace_key: str = ""


def record_fallback(report: GraphReport, op: str, reason: str) -> None:
    report.fallbacks.append({"node": op, "reason": reason})
    bump("fallbacks")


def bump(name: str, n: int = 1) -> None:
    with _lock:
        _counters[name] += n


def publish(report: GraphReport) -> None:
    """Called once per compiled graph: feeds active explain() collectors and the counters."""
    with _lock:
        _counters["graphs_compiled"] += 1
        if report.engine == "eager":
            _counters["graphs_fallback"] += 1
        else:
            _counters["graphs_verifuse"] += 1
        _counters["nodes_lowered"] += report.num_nodes
        for collector in _collectors:
            collector.append(report)


def next_graph_id() -> int:
    with _lock:
        _counters["_graph_ids"] += 1
        return _counters["_graph_ids"]


@contextlib.contextmanager
def collect() -> Iterator[list[GraphReport]]:
    """Collects the GraphReports of every graph compiled inside the block."""
    sink: list[GraphReport] = []
    with _lock:
        _collectors.append(sink)
    try:
        yield sink
    finally:
        with _lock:
            _collectors.remove(sink)


def observe(report: GraphReport) -> None:
    """Called when a compiled graph runs: an explain() collector active now that did not see the
    graph compile (Dynamo reused a compile from before the block: its frame cache is keyed on the
    code and guards, not on the options) still gets the report of what ran. Costs one list check
    per call when nothing collects."""
    if not _collectors:
        return
    with _lock:
        for collector in _collectors:
            if not any(r is report for r in collector):
                collector.append(report)


def stats() -> dict[str, int]:
    """Process-wide counters: graphs compiled (through verifuse / fell back), nodes lowered,
    fallbacks, weight refreshes, and the rule counters of later stages."""
    keys = ("graphs_compiled", "graphs_verifuse", "graphs_fallback", "nodes_lowered", "fallbacks",
            "weight_refreshes", "rules_matched", "rules_proved", "rules_applied")
    with _lock:
        out = {k: int(_counters.get(k, 0)) for k in keys}
        out.update({k: int(v) for k, v in _counters.items() if not k.startswith("_") and k not in out})
    return out


def reset_stats() -> None:
    with _lock:
        ids = _counters["_graph_ids"]
        _counters.clear()
        _counters["_graph_ids"] = ids


class Report:
    """The explain() result for one model: one entry per graph Dynamo produced."""

    def __init__(self, graphs: list[GraphReport], compile_seconds: float, verbose: bool = False):
        self.graphs = graphs
        self.compile_seconds = compile_seconds
        self.verbose = verbose  # str() also lists every rule's near misses

    @property
    def fallbacks(self) -> list[dict[str, str]]:
        return [dict(f, graph=g.graph_id) for g in self.graphs for f in g.fallbacks]

    def to_dict(self) -> dict[str, Any]:
        rows = {g.graph_id: node_rows(g) for g in self.graphs}  # once per graph (int8 rows come from C++)
        return {
            "fusions": [dict(f, graph=g.graph_id) for g in self.graphs for f in g.fusions],
            "partitions": [dict(_partition_row(p, i, g.graph_id),
                                runs_on=partition_runs_on(rows[g.graph_id], dict(p, id=p.get("id", i))))
                           for g in self.graphs for i, p in enumerate(g.partitions)],
            # Every node with what runs it (node_rows): the picture, the tables and this agree.
            "nodes": [dict(n, graph=g.graph_id) for g in self.graphs for n in rows[g.graph_id]],
            "reorders": sum(g.reorders for g in self.graphs),
            "fallbacks": self.fallbacks,
            "proofs": [dict(p, graph=g.graph_id) for g in self.graphs for p in g.proofs],
            "near_misses": [dict(m, graph=g.graph_id) for g in self.graphs for m in g.near_misses],
            "compile_seconds": self.compile_seconds,
            # The tier the plans were made for (the capability model; VERIFUSE_MAX_ISA caps it).
            "cpu": _cpu_row(),
            "int8_kernels": [dict(r, graph=g.graph_id) for g in self.graphs for r in _int8_rows(g)],
            "graphs": [
                {"graph": g.graph_id, "engine": g.engine, "nodes": g.num_nodes, "constants": g.num_constants,
                 "ops": dict(g.ops), "compile_seconds": g.compile_seconds, "reorders": g.reorders,
                 "reorders_before": g.reorders_before, "timings_run": g.timings_run,
                 "tuning_inputs_made": g.tuning_inputs_made,
                 "tuning_inputs_through_views": g.tuning_inputs_through_views, "plan_passes": list(g.plan_passes),
                 "in_place_writes": g.in_place_writes,
                 "tuning_db": g.tuning_db,
                 "trace_seconds": g.trace_seconds, "pipeline_seconds": g.pipeline_seconds, "plan_seconds": g.plan_seconds,
                 "lowering_seconds": g.lowering_seconds, "first_run_seconds": g.first_run_seconds,
                 "weight_copy_bytes": g.weight_copy_bytes,
                 "shared_weight_copy_bytes": g.shared_weight_copy_bytes, "aten_trace": g.aten_trace,
                 "trace_source": g.trace_source}
                for g in self.graphs
            ],
            # --- shapes (issue 5; owned by the shapes work): assumptions, added and Dynamo guards ---
            "shape_guards": [dict(s, graph=g.graph_id) for g in self.graphs for s in g.shape_guards],
        }

    # --- shapes (issue 5; owned by the shapes work) ---
    def shape_program_smt2(self, graph: "int | None" = None) -> str:
        """The shape program of a dynamic-shape graph (``graph`` id; by default the last one) in
        the corpus's SMT-LIB format, for ``python -m verifuse shapes FILE --redundant``; empty
        when no graph had symbolic sizes."""
        programs = [g for g in self.graphs if g.shape_program_smt2 and graph in (None, g.graph_id)]
        return programs[-1].shape_program_smt2 if programs else ""

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def __str__(self) -> str:
        lines = [f"verifuse report: {len(self.graphs)} graph(s), compile {self.compile_seconds:.3f} s",
                 f"  cpu: {_cpu_row()['summary']}"]
        for g in self.graphs:
            lines.append(f"  graph {g.graph_id}: engine={g.engine} nodes={g.num_nodes} "
                         f"constants={g.num_constants} compile={g.compile_seconds:.3f}s")
            if g.engine == "verifuse" and g.compile_seconds > 0:
                # Where the backend's compile went (Dynamo's own trace before it is not in it).
                source = " (from the trace cache)" if g.trace_source == "trace cache" else ""
                lines.append(f"    compile: ATen trace{source} {g.trace_seconds:.3f}s, lowering {g.lowering_seconds:.3f}s, "
                             f"rules and proofs {g.pipeline_seconds:.3f}s, plan {g.plan_seconds:.3f}s "
                             f"({g.timings_run} autotune timings, plan {g.plan_source}); first run "
                             f"{g.first_run_seconds:.3f}s")
            if g.aten_trace:
                lines.append(f"    ATen graph from: {g.aten_trace}")
            top = sorted(g.ops.items(), key=lambda kv: (-kv[1], kv[0]))
            if top:
                width = max(len(op) for op, _ in top)
                lines.append(f"    {'op'.ljust(width)}  count")
                for op, count in top:
                    lines.append(f"    {op.ljust(width)}  {count}")
        data = self.to_dict()
        fusions = data["fusions"]
        lines.append(f"  fusions: {len(fusions)}")
        for f in fusions:
            line = f"    {f.get('rule')}: {f.get('nodes')} verdict={f.get('verdict')}"
            if f.get("max_error_bound"):
                line += f" bound={f['max_error_bound']:.2g}"
            if "bf16 kernel:" in (f.get("detail") or ""):  # a bf16 model's fold: the kernel's rounding
                line += " bf16-rounding<=2^-8(rel)" if "within 2^-8" in f["detail"] else " bf16-rounding=REFUSED"
            if f.get("layer_check") not in (None, "not-checked"):
                line += f" layer-check={f['layer_check']}"
            lines.append(line)
        copies = sum(g.weight_copy_bytes for g in self.graphs)
        shared = sum(g.shared_weight_copy_bytes for g in self.graphs)
        held = f"{_mib(copies - shared)} ({_mib(shared)} more shared between plans)" if shared else _mib(copies)
        lines.append(f"  partitions: {len(data['partitions'])}, layout conversions (reorders): {data['reorders']}, "
                     f"weight copies held by engines: {held}")
        lines.extend("    " + row for row in _text_table(
            ["graph", "part", "nodes", "runs on", "dtype", "layout", "conv in/out", "weights (copy)",
             "timed (ms per run)", "decided by"],
            [[p["graph"], p["id"], _nodes_cell(p["nodes"]), p["runs_on"], p.get("dtype") or "-", p.get("layout", "-"),
              f"{p.get('input_conversions', 0)}/{p.get('output_conversions', 0)}", _weights_cell(p),
              _candidates_cell(p), p.get("how", "-")] for p in data["partitions"]]))
        int8 = data["int8_kernels"]
        if int8:
            lines.append(f"  int8 kernels: {len(int8)} (each variant runs only where its integer arithmetic is "
                         f"proved exact for the layer's weights and code range)")
            lines.extend(f"    node {r['node']} {r['op']}: {r['summary']}" for r in int8)
        if self.verbose:
            misses = data["near_misses"]
            omitted = sum(g.near_misses_omitted for g in self.graphs)
            lines.append(f"  near misses (a rule's op matched, a guard refused): {len(misses)}"
                         + (f" (+{omitted} not listed)" if omitted else ""))
            for m in misses:
                lines.append(f"    graph {m['graph']}: {m['rule']} at {m['op']} {m['name']}: {m['reason']}")
        lines.append(f"  fallbacks: {len(self.fallbacks)}")
        for f in self.fallbacks:
            lines.append(f"    graph {f['graph']}: {f['node']}: {f['reason']}")
        lines.extend(_shape_guard_lines(self.graphs))
        return "\n".join(lines)

    __repr__ = __str__

    def save_html(self, path: str | os.PathLike[str]) -> str:
        """Writes the report as one self-contained HTML file (inline SVG, no network): each graph
        drawn with partitions coloured, fused nodes marked and each node's engine, then the
        fusion, partition, fallback, proof and reorder tables. Returns the absolute path."""
        from .report_html import render_html

        target = os.path.abspath(os.fspath(path))
        with open(target, "w", encoding="utf-8") as f:
            f.write(render_html(self))
        return target


def _shape_guard_lines(graphs: list[GraphReport]) -> list[str]:
    """Dynamic-shape graphs: Dynamo's guards, the plan's shape assumptions (which of them the
    guards entail) and the guards verifuse added for the rest."""
    lines: list[str] = []
    for g in graphs:
        if not g.shape_guards:
            continue
        by_type: dict[str, list[dict[str, Any]]] = {}
        for e in g.shape_guards:
            by_type.setdefault(e["type"], []).append(e)
        assumptions = by_type.get("assumption", [])
        lines.append(f"  shape guards, graph {g.graph_id}: {len(by_type.get('dynamo_guard', []))} from Dynamo, "
                     f"{len(assumptions)} plan assumptions ({sum(a['entailed'] for a in assumptions)} entailed)")
        for e in by_type.get("dynamo_guard", []):
            lines.append(f"    dynamo:   {e['text']}")
        for a in assumptions:
            verdict = "entailed" if a["entailed"] else "NOT entailed"
            lines.append(f"    assumes:  {a['text']}  [{a['kind']}; {verdict}: {a['how']}]")
        for e in by_type.get("added_guard", []):
            how = "checked on every call" if e["checked_at_runtime"] else "implied by the other added guards"
            lines.append(f"    added:    {e['text']}  [{how}]")
        for e in by_type.get("error", []):
            lines.append(f"    error:    {e['text']}")
    return lines


def _int8_rows(g: GraphReport) -> list[dict[str, Any]]:
    return list(g.int8_kernels_of()) if g.int8_kernels_of is not None else []


INT8_OPS = ("verifuse::qconv", "verifuse::qlinear", "verifuse::int_mm")
# Reports made before the compiler said what runs each node: the planner's engine names.
_ENGINE_LABELS = {"onednn": "oneDNN", "aten": "ATen", "gemm": "own GEMM", "rowwise": "row engine",
                  "dispatcher": "ATen"}


def node_rows(g: GraphReport) -> list[dict[str, Any]]:
    """The graph's nodes, each with ``runs_on``: what really runs it, from the compiler (the fused
    op's own answer: "oneDNN", "own GEMM", "MKL sgemm", "row engine", "attention engine" or
    "ATen"), and for int8 ops from their kernel choice (made at their first run): "int8 kernel
    (<variant>)", or "ATen (int8 reference)" where no kernel was proved exact."""
    chosen: dict[int, list[str]] = {}
    for r in _int8_rows(g):
        if r.get("impl"):
            chosen.setdefault(r["node"], []).append(r.get("variant") or r["impl"])
    rows = []
    for n in g.nodes:
        row = dict(n)
        if row.get("op") in INT8_OPS:
            variants = sorted(set(chosen.get(row["id"], [])))
            row["runs_on"] = f"int8 kernel ({', '.join(variants)})" if variants else "ATen (int8 reference)"
        if not row.get("runs_on"):
            engine = row.get("engine") or "aten"
            row["runs_on"] = _ENGINE_LABELS.get(engine, engine)
        rows.append(row)
    return rows


def partition_runs_on(nodes: list[dict[str, Any]], p: dict[str, Any]) -> str:
    """A partition's ``runs_on``: the compiler's, or its nodes' (int8 partitions); ``nodes`` are
    its graph's node_rows."""
    members = [n for n in nodes if n.get("partition") == p.get("id")]
    if members and all(n.get("op") in INT8_OPS for n in members):
        return " + ".join(sorted({n["runs_on"] for n in members}))
    if p.get("runs_on"):
        return p["runs_on"]
    engine = p.get("engine") or "aten"
    return _ENGINE_LABELS.get(engine, engine)


def _cpu_row() -> dict[str, Any]:
    """The capability model's view the plans were made with (one per process)."""
    from .env import capabilities

    caps = capabilities()
    return {k: caps[k] for k in ("tier", "cpu_tier", "cap", "onednn_isa", "summary")}


def _partition_row(p: dict[str, Any], index: int, graph_id: int) -> dict[str, Any]:
    """A partition as to_dict() reports it: always id, nodes, engine and both tuned times (None
    when not timed), plus whatever else the compiler recorded."""
    row = dict(p)
    row.setdefault("id", index)
    row.setdefault("nodes", [])
    row.setdefault("engine", "aten")
    row.setdefault("onednn_ms", None)
    row.setdefault("aten_ms", None)
    row["graph"] = graph_id
    return row


def _nodes_cell(nodes: Any) -> str:
    if isinstance(nodes, (list, tuple)):
        return ",".join(str(n) for n in nodes) if len(nodes) <= 8 else f"{len(nodes)} nodes"
    return str(nodes)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 / 10 else f"{n / 2**10:.0f} KiB"


def _weights_cell(p: dict[str, Any]) -> str:
    layout = p.get("weight_layout") or ""
    if not layout:
        return "-"
    copy = int(p.get("weight_copy_bytes", 0))
    if copy and int(p.get("shared_weight_copy_bytes", 0)) >= copy:
        return f"{layout} (shared {_mib(copy)})"
    return f"{layout} (+{_mib(copy)})" if copy else layout


def _candidates_cell(p: dict[str, Any]) -> str:
    """Each timed engine's median ms, the chosen one first: "aten 0.0200, onednn 5.1100"."""
    timed = dict(p.get("candidates") or {})
    for engine in ("onednn", "aten"):  # reports written before candidates existed
        if p.get(f"{engine}_ms") is not None:
            timed.setdefault(engine, p[f"{engine}_ms"])
    if not timed:
        return "-"
    order = sorted(timed, key=lambda e: (e != p.get("engine"), e))
    return ", ".join(f"{e} {_ms_cell(timed[e])}" for e in order)


def _ms_cell(ms: Any) -> str:
    if ms is None:
        return "-"
    return "n/a" if ms < 0 else f"{ms:.4f}"


def _text_table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """Left-aligned columns, two spaces apart; no rows, no table."""
    if not rows:
        return []
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]

    def fmt(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    return [fmt(headers)] + [fmt(r) for r in cells]
