"""Shape guards under dynamic shapes: the Dynamo side (design.md section 3, level 3).

The C++ core owns the plan's shape assumptions (``backend/src/shape_guards``): it derives them from
the planned graph's symbolic sizes, decides which of them Dynamo's guards entail (verifier/shapes:
own reasoning, then Z3), adds a guard for each one that does not follow (minimized), checks the
added guards on every call before the plan runs, and writes the shape program as SMT-LIB. This
module does what only Python can:

1. ``collect_shape_facts`` reads, once per graph, what Dynamo checks before the graph runs: the
   ShapeEnv's guards, the value range of every size symbol, its replacements and divisibility
   facts, and the deferred runtime asserts the graph checks itself. Each becomes a condition in the
   C++ term language (``to_term``, the one sympy translator; the lowering uses it for symbolic
   sizes too) inside a ``_C.ShapeFacts`` that travels with the compile request.
2. ``attach_shape_guards`` turns a violated added guard (C++ raises ``_C.ShapeGuardViolation``)
   into the eager fallback with one warning, or ``ShapeGuardError`` under strict.

Nothing here adds a guard to Dynamo's ShapeEnv: only sympy expressions are read, never compared as
SymInts.
"""
from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Callable, Optional, Sequence

import sympy
import torch
import torch.fx

from . import _C
from .backend import VerifuseError

__all__ = ["ShapeGuardError", "ShapeFacts", "collect_shape_facts", "attach_shape_guards", "to_term"]


class ShapeGuardError(VerifuseError):
    """Input sizes violate a shape assumption the compiled plan relies on (and Dynamo's guards do
    not check); raised instead of the eager fallback under strict mode."""


class _Untranslatable(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# sympy -> the C++ term language (verifuse._C.SymExpr)
# ------------------------------------------------------------------------------------------------

def _funcs() -> Any:
    from torch.utils._sympy import functions as F

    return F


_RELATIONS = {sympy.Eq: "eq", sympy.Ne: "ne", sympy.StrictLessThan: "lt", sympy.LessThan: "le",
              sympy.StrictGreaterThan: "gt", sympy.GreaterThan: "ge"}


def to_term(e: Any, names: dict, memo: Optional[dict] = None) -> Any:
    """An integer-valued or boolean sympy expression over size symbols as a ``_C.SymExpr``
    (Python semantics: ``//`` floors, ``%`` takes the divisor's sign). Raises _Untranslatable for
    anything outside integer arithmetic (floats, opaque functions, symbols not in ``names``)."""
    if memo is not None and isinstance(e, sympy.Basic):
        hit = memo.get(e)
        if hit is None:
            hit = memo[e] = _to_term(e, names, memo)
        return hit
    return _to_term(e, names, memo)


def _apply(op: str, args: list) -> Any:
    try:
        return _C.SymExpr.apply(op, args)
    except (ValueError, TypeError, OverflowError) as err:
        raise _Untranslatable(f"{op}: {err}") from None


def _to_term(e: Any, names: dict, memo: Optional[dict]) -> Any:
    F = _funcs()
    C = _C.SymExpr
    sub = lambda x: to_term(x, names, memo)  # noqa: E731
    if isinstance(e, bool) or e is sympy.true or e is sympy.false:
        return C.boolean(bool(e))
    if isinstance(e, (int, sympy.Integer)):
        v = int(e)
        if not -2**63 <= v < 2**63:
            raise _Untranslatable(f"integer {v} out of range")
        return C.integer(v)
    if isinstance(e, sympy.Symbol):
        if e not in names:
            raise _Untranslatable(f"symbol {e} is not a size")
        return C.symbol(names[e])
    if isinstance(e, sympy.Add):
        return _apply("add", [sub(a) for a in e.args])
    if isinstance(e, sympy.Mul):
        return _apply("mul", [sub(a) for a in e.args])
    if isinstance(e, (sympy.Pow, F.PowByNatural)):
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and 0 <= int(exp) <= 64:
            return _apply("pow", [sub(base), int(exp)])
        raise _Untranslatable(f"power {e}")
    if isinstance(e, (F.FloorDiv, F.CleanDiv)):
        return _apply("floordiv", [sub(a) for a in e.args])
    if isinstance(e, (F.Mod, F.PythonMod)):
        return _apply("mod", [sub(a) for a in e.args])
    if isinstance(e, F.CeilDiv):  # -((-a) // b)
        a, b = e.args
        return _apply("mul", [-1, _apply("floordiv", [_apply("mul", [-1, sub(a)]), sub(b)])])
    if isinstance(e, (sympy.Max, F.Max)):
        return _apply("max", [sub(a) for a in e.args])
    if isinstance(e, (sympy.Min, F.Min)):
        return _apply("min", [sub(a) for a in e.args])
    for cls, op in _RELATIONS.items():
        if isinstance(e, cls):
            return _apply(op, [sub(e.lhs), sub(e.rhs)])
    if isinstance(e, sympy.And):
        return _apply("and", [sub(a) for a in e.args])
    if isinstance(e, sympy.Or):
        return _apply("or", [sub(a) for a in e.args])
    if isinstance(e, sympy.Not):
        return _apply("not", [sub(e.args[0])])
    raise _Untranslatable(f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------------------------------------
# Dynamo's facts
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ShapeFacts:
    """One graph's size symbols (sympy symbol -> corpus-style name, ``x_size0``) and Dynamo's
    facts about them, ready for the compile request (``cpp``)."""

    names: dict
    cpp: Any  # _C.ShapeFacts
    _memo: dict = dataclasses.field(default_factory=dict, repr=False)

    def term(self, e: Any) -> Any:
        """``e`` (a SymInt, sympy expression or int) as a _C.SymExpr, or None when it cannot be
        translated (the size stays unnamed)."""
        if isinstance(e, torch.SymInt):
            e = e.node.expr
        try:
            return to_term(e, self.names, self._memo)
        except _Untranslatable:
            return None


_SIZE_SOURCE = re.compile(r"^(.*)\.(size|stride)\(\)\[(\d+)\]$")
_SOURCE_PIECE = re.compile(r"\[['\"]?([A-Za-z0-9_]+)['\"]?\]|\.([A-Za-z_][A-Za-z0-9_]*)")


def _source_name(src: Any) -> str:
    try:
        n = src.name() if callable(getattr(src, "name", None)) else src.name
        return str(n)
    except Exception:  # noqa: BLE001 - the Source API moved between torch versions
        return ""


def _smt_name(sym: sympy.Symbol, sources: list, taken: set) -> tuple[str, str]:
    src = _source_name(sources[0]) if sources else ""
    m = _SIZE_SOURCE.search(src)
    pieces = [a or b for a, b in _SOURCE_PIECE.findall(m.group(1))] if m else []
    if m and pieces:  # L['x'].size()[0] -> x_size0 (the corpus's naming); L['args'][0] -> args_0
        base = f"{'_'.join(pieces)}_{m.group(2)}{m.group(3)}"
    else:
        base = re.sub(r"[^A-Za-z0-9_]", "_", src).strip("_") if src else ""
        base = base or str(sym)
        if base[0].isdigit():
            base = "v" + base
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name, src


def _is_size_symbol(sym: Any) -> bool:
    return isinstance(sym, sympy.Symbol) and bool(sym.is_integer)


def _free(e: Any) -> set:
    return set(e.free_symbols) if isinstance(e, sympy.Basic) else set()


def _expr(v: Any) -> Any:
    if isinstance(v, torch.SymInt):
        return v.node.expr
    return v


def _shape_env(fake_inputs: Sequence[Any]) -> Any:
    for t in fake_inputs:
        for v in (list(t.shape) if isinstance(t, torch.Tensor) else [t]):
            if isinstance(v, torch.SymInt):
                return v.node.shape_env
    try:
        from torch._guards import TracingContext

        ctx = TracingContext.try_get()
        fm = getattr(ctx, "fake_mode", None) if ctx is not None else None
        return getattr(fm, "shape_env", None)
    except Exception:  # noqa: BLE001
        return None


def _hint(shape_env: Any, sym: sympy.Symbol) -> Optional[int]:
    for attr in ("backed_var_to_val", "var_to_val"):
        try:
            d = getattr(shape_env, attr)
            if sym in d:
                return int(d[sym])
        except Exception:  # noqa: BLE001
            continue
    return None


def _bound(v: Any) -> Optional[int]:
    try:
        if v is None or not bool(getattr(v, "is_finite", True)) or abs(v) > 2**62:
            return None
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def collect_shape_facts(fake_inputs: Sequence[Any], real_inputs: Sequence[Any], static_indices: Sequence[int],
                        graph_report: Any = None, strict: bool = False) -> Optional[ShapeFacts]:
    """Dynamo's facts about the sizes of one graph, or None when no input size is symbolic
    (static shapes: Dynamo's guards pin every size). ``real_inputs`` give the example sizes when
    the ShapeEnv has no hint; ``static_indices`` are the frozen parameters/buffers. A failure is
    recorded in ``graph_report.shape_guards`` (raised under strict); the graph then compiles
    without shape analysis."""
    if not any(isinstance(v, torch.SymInt) for t in fake_inputs
               for v in (t.shape if isinstance(t, torch.Tensor) else [t])):
        return None
    try:
        return _collect(fake_inputs, real_inputs, set(static_indices))
    except Exception as err:  # noqa: BLE001 - reading Dynamo's state must not break a compile
        if strict:
            raise
        if graph_report is not None:
            graph_report.shape_guards = [{"type": "error", "text": f"{type(err).__name__}: {err}"}]
        return None


def _collect(fake_inputs: Sequence[Any], real_inputs: Sequence[Any], static: set) -> ShapeFacts:
    shape_env = _shape_env(fake_inputs)

    # Symbols an input size (or SymInt input) is, and where to read an example when Dynamo has none.
    first_seen: dict = {}
    for i, t in enumerate(fake_inputs):
        if i in static:
            continue
        dims = list(enumerate(t.shape)) if isinstance(t, torch.Tensor) else [(None, t)]
        for d, s in dims:
            e = _expr(s)
            if isinstance(e, sympy.Symbol) and e not in first_seen:
                first_seen[e] = (i, d)
    symbols = set(first_seen)
    if shape_env is not None:
        symbols |= {s for s in shape_env.var_to_range if _is_size_symbol(s)}

    names: dict = {}
    taken: set = set()
    cpp = _C.ShapeFacts()
    for sym in sorted(symbols, key=str):
        sources = list(shape_env.var_to_sources.get(sym, [])) if shape_env is not None else []
        name, src = _smt_name(sym, sources, taken)
        names[sym] = name
        hint = _hint(shape_env, sym) if shape_env is not None else None
        if hint is None and sym in first_seen:
            i, d = first_seen[sym]
            v = real_inputs[i] if i < len(real_inputs) else None
            hint = int(v.shape[d]) if isinstance(v, torch.Tensor) else (v if isinstance(v, int) else None)
        cpp.add_symbol(name, src, hint)
    facts = ShapeFacts(names, cpp)
    if shape_env is None:
        return facts

    def add(source: str, build: Callable[[], Any], text: Callable[[], str], expr: Any = None) -> None:
        if expr is not None and _free(expr) and not any(_is_size_symbol(x) for x in _free(expr)):
            cpp.non_size_guards += 1  # e.g. a batch norm's eps/momentum Dynamo wrapped as a float
            return
        try:
            cpp.add_fact(source, build())
        except (_Untranslatable, ValueError) as err:
            cpp.add_skipped(source, text(), str(err))

    def term(e: Any) -> Any:
        return to_term(e, names, facts._memo)

    for sym in sorted(symbols, key=str):
        rng = shape_env.var_to_range.get(sym)
        if rng is None:
            continue
        lo, hi = _bound(rng.lower), _bound(rng.upper)
        if lo is not None:
            add("var_to_range", lambda s=sym, lo=lo: _apply("ge", [term(s), lo]), lambda s=sym, lo=lo: f"{names[s]} >= {lo}")
        if hi is not None:
            add("var_to_range", lambda s=sym, hi=hi: _apply("le", [term(s), hi]), lambda s=sym, hi=hi: f"{names[s]} <= {hi}")
    for sym, rep in list(shape_env.replacements.items()):
        if sym in names:
            add("replacement", lambda s=sym, r=rep: _apply("eq", [term(s), term(r)]),
                lambda s=sym, r=rep: f"{names[s]} == {r}")
    for e in list(getattr(shape_env, "divisible", ()) or ()):
        add("divisible", lambda e=e: _apply("eq", [term(e), 0]), lambda e=e: f"Eq({e}, 0)")
    for g in list(shape_env.guards):
        add("guard", lambda g=g: term(g.expr), lambda g=g: str(g.expr), g.expr)
    for _, ras in list(shape_env.deferred_runtime_asserts.items()):
        for ra in ras:
            add("runtime_assert", lambda ra=ra: term(ra.expr), lambda ra=ra: str(ra.expr), ra.expr)
    return facts


# ------------------------------------------------------------------------------------------------
# The runner's side: counters, and what a violated guard does
# ------------------------------------------------------------------------------------------------

def attach_shape_guards(runner: Any, aot_gm: torch.fx.GraphModule, graph_report: Any = None,
                        strict: bool = False) -> Callable:
    """After the compile: counts the graph's assumptions and added guards, and wraps ``runner``
    (a CompiledGraphRunner, which checks the added guards in C++ before each run) so that a
    violation runs the ATen graph eagerly (one warning) or raises ShapeGuardError under strict.
    Static graphs, and graphs whose assumptions all follow, get ``runner`` back unchanged."""
    from . import report as _report

    entries = list(getattr(graph_report, "shape_guards", None) or [])
    errors = [e["text"] for e in entries if e["type"] == "error"]
    if errors and strict:
        raise VerifuseError(f"verifuse (strict): {errors[0]}")
    assumptions = [e for e in entries if e["type"] == "assumption"]
    if assumptions:
        _report.bump("shape_assumptions", len(assumptions))
        _report.bump("shape_assumptions_entailed", sum(a["entailed"] for a in assumptions))
        _report.bump("shape_guards_added", sum(1 for e in entries if e["type"] == "added_guard" and e["checked_at_runtime"]))
    if getattr(runner, "shape_check", None) is None:
        return runner
    return _GuardedRunner(runner, aot_gm, strict)


class _GuardedRunner:
    _boxed_call = True

    def __init__(self, runner: Callable, aot_gm: torch.fx.GraphModule, strict: bool):
        self._runner = runner
        self._aot_gm = aot_gm
        self._strict = strict
        self._warned = False

    def __call__(self, args: list) -> list:
        try:
            return self._runner(args)
        except _C.ShapeGuardViolation as err:  # raised before the plan ran: args are untouched
            msg = str(err)
        if self._strict:
            raise ShapeGuardError(f"verifuse (strict): {msg}")
        from . import report as _report

        _report.bump("shape_guard_fallbacks")
        if not self._warned:
            self._warned = True
            warnings.warn(f"verifuse: running this graph in eager mode for these input sizes: {msg}", stacklevel=2)
        out = self._aot_gm(*args)
        args.clear()
        return list(out)
