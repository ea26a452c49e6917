"""Shape guards under dynamic shapes (design.md section 3, level 3; issue 5 deliverable 2).

``analyze_shape_guards(aot_gm, fake_inputs, real_inputs, static_indices)`` runs inside verifuse's AOT
inference compiler. It

1. collects what Dynamo will check before the graph runs: the ShapeEnv's guards, the value range
   of every size symbol, its replacements and divisibility facts, and the deferred runtime asserts
   the graph itself checks;
2. derives the plan's own shape assumptions from the ATen graph: every input size positive, each
   convolution/pooling window fits its (padded) input (``size + 2*pad >= dilation*(k-1)+1``), channel
   and feature counts equal the frozen weights' (conv, linear/matmul, batch norm, layer norm), a
   view keeps the element count and only merges dimensions that are contiguous with each other;
3. decides with the verifuse shapes engine (C++, ``_C.analyze_shapes``: own reasoning, then Z3)
   which assumptions the guards entail: ``guards AND NOT assumption`` unsat means entailed; sat comes
   with a counterexample; unknown counts as not entailed;
4. turns each assumption that does not follow into a runtime guard on the input sizes (``check``),
   and writes the whole shape program in the corpus's SMT-LIB format (``smt2``).

Nothing here adds a guard to Dynamo's ShapeEnv: only sympy expressions are read, never compared as
SymInts. Assumptions are never built as sympy relations either (sympy would "prove" ``s0 >= 1``
from the symbol's ``positive=True`` flag, which Dynamo's guards may not back, e.g. under
``backed_size_oblivious`` the range of a size starts at 0).
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
import warnings
from typing import Any, Callable, Optional, Sequence

import sympy
import torch
import torch.fx

__all__ = ["ShapeGuardResult", "ShapeGuardError", "analyze_shape_guards", "attach_shape_guards", "to_smt",
           "to_python"]


from .backend import VerifuseError  # noqa: E402 - the package imports backend first anyway


class ShapeGuardError(VerifuseError):
    """Input sizes violate a shape assumption the compiled plan relies on (and Dynamo's guards do
    not check); raised instead of the eager fallback under strict mode."""


class _Untranslatable(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# sympy -> SMT-LIB / Python
# ------------------------------------------------------------------------------------------------

def _funcs():
    from torch.utils._sympy import functions as F

    return F


def _smt_int(v: int) -> str:
    return str(v) if v >= 0 else f"(- {-v})"


def to_smt(e: Any, names: dict) -> str:
    """An integer-valued or boolean sympy expression over size symbols as SMT-LIB text. Raises
    _Untranslatable for anything outside integer arithmetic (floats, opaque functions)."""
    F = _funcs()
    if isinstance(e, bool):
        return "true" if e else "false"
    if isinstance(e, int):
        return _smt_int(e)
    if e is sympy.true:
        return "true"
    if e is sympy.false:
        return "false"
    if isinstance(e, sympy.Symbol):
        if e not in names:
            raise _Untranslatable(f"symbol {e} is not a size")
        return names[e]
    if isinstance(e, sympy.Integer):
        return _smt_int(int(e))
    if isinstance(e, sympy.Rational):
        return f"(/ {_smt_int(int(e.p))} {int(e.q)})"
    if isinstance(e, sympy.Add):
        return "(+ " + " ".join(to_smt(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(* " + " ".join(to_smt(a, names) for a in e.args) + ")"
    if isinstance(e, (sympy.Pow, F.PowByNatural)):
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and 0 <= int(exp) <= 8:
            k = int(exp)
            if k == 0:
                return "1"
            b = to_smt(base, names)
            return b if k == 1 else "(* " + " ".join([b] * k) + ")"
        raise _Untranslatable(f"power {e}")
    if isinstance(e, (F.FloorDiv, F.CleanDiv)):
        a, b = (to_smt(x, names) for x in e.args)
        if isinstance(e.args[1], sympy.Integer) and int(e.args[1]) > 0:
            return f"(div {a} {b})"
        # floor division for either sign of the divisor (SMT-LIB div is Euclidean)
        return f"(ite (> {b} 0) (div {a} {b}) (div (- {a}) (- {b})))"
    if isinstance(e, (F.Mod, F.PythonMod)):
        a, b = (to_smt(x, names) for x in e.args)
        if isinstance(e.args[1], sympy.Integer) and int(e.args[1]) > 0:
            return f"(mod {a} {b})"
        return f"(- {a} (* {b} (ite (> {b} 0) (div {a} {b}) (div (- {a}) (- {b})))))"
    if isinstance(e, F.CeilDiv):
        a, b = e.args
        if isinstance(b, sympy.Integer) and int(b) > 0:
            return f"(- (div (- {to_smt(a, names)}) {int(b)}))"
        raise _Untranslatable(f"ceil division by a non-constant: {e}")
    if isinstance(e, (sympy.Max, sympy.Min, F.Max, F.Min)):
        op = ">=" if isinstance(e, (sympy.Max, F.Max)) else "<="
        args = [to_smt(a, names) for a in e.args]
        acc = args[0]
        for a in args[1:]:
            acc = f"(ite ({op} {acc} {a}) {acc} {a})"
        return acc
    if isinstance(e, sympy.Eq):
        return f"(= {to_smt(e.lhs, names)} {to_smt(e.rhs, names)})"
    if isinstance(e, sympy.Ne):
        return f"(not (= {to_smt(e.lhs, names)} {to_smt(e.rhs, names)}))"
    rel = {sympy.StrictLessThan: "<", sympy.LessThan: "<=", sympy.StrictGreaterThan: ">",
           sympy.GreaterThan: ">="}
    for cls, op in rel.items():
        if isinstance(e, cls):
            return f"({op} {to_smt(e.lhs, names)} {to_smt(e.rhs, names)})"
    if isinstance(e, sympy.And):
        return "(and " + " ".join(to_smt(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Or):
        return "(or " + " ".join(to_smt(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Not):
        return f"(not {to_smt(e.args[0], names)})"
    raise _Untranslatable(f"{type(e).__name__}: {e}")


def to_python(e: Any, names: dict) -> str:
    """The same expression as Python source over the names in ``names`` (ints, ``//``, ``%``)."""
    F = _funcs()
    if isinstance(e, bool):
        return repr(e)
    if isinstance(e, int):
        return repr(e)
    if e is sympy.true or e is sympy.false:
        return repr(bool(e))
    if isinstance(e, sympy.Symbol):
        if e not in names:
            raise _Untranslatable(f"symbol {e} is not a size")
        return names[e]
    if isinstance(e, sympy.Integer):
        return repr(int(e))
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(to_python(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        if any(isinstance(a, sympy.Rational) and not isinstance(a, sympy.Integer) for a in e.args):
            raise _Untranslatable(f"rational coefficient in {e}")
        return "(" + " * ".join(to_python(a, names) for a in e.args) + ")"
    if isinstance(e, (sympy.Pow, F.PowByNatural)):
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and int(exp) >= 0:
            return f"({to_python(base, names)} ** {int(exp)})"
        raise _Untranslatable(f"power {e}")
    if isinstance(e, (F.FloorDiv, F.CleanDiv)):
        return f"({to_python(e.args[0], names)} // {to_python(e.args[1], names)})"
    if isinstance(e, (F.Mod, F.PythonMod)):
        return f"({to_python(e.args[0], names)} % {to_python(e.args[1], names)})"
    if isinstance(e, F.CeilDiv):
        return f"(-((-{to_python(e.args[0], names)}) // {to_python(e.args[1], names)}))"
    if isinstance(e, (sympy.Max, F.Max)):
        return "max(" + ", ".join(to_python(a, names) for a in e.args) + ")"
    if isinstance(e, (sympy.Min, F.Min)):
        return "min(" + ", ".join(to_python(a, names) for a in e.args) + ")"
    rel = {sympy.Eq: "==", sympy.Ne: "!=", sympy.StrictLessThan: "<", sympy.LessThan: "<=",
           sympy.StrictGreaterThan: ">", sympy.GreaterThan: ">="}
    for cls, op in rel.items():
        if isinstance(e, cls):
            return f"({to_python(e.lhs, names)} {op} {to_python(e.rhs, names)})"
    if isinstance(e, sympy.And):
        return "(" + " and ".join(to_python(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Or):
        return "(" + " or ".join(to_python(a, names) for a in e.args) + ")"
    if isinstance(e, sympy.Not):
        return f"(not {to_python(e.args[0], names)})"
    raise _Untranslatable(f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------------------------------------
# Conditions: built from (expression, op, expression) triples, never as sympy relations.
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Cond:
    """``lhs op rhs`` over sympy integer expressions; ``alts`` makes a disjunction of such triples."""

    alts: tuple  # ((lhs, op, rhs), ...) -- true when any alternative holds

    def is_static(self) -> bool:
        return all(not _free(l) and not _free(r) for l, _, r in self.alts)

    def static_value(self) -> bool:
        return any(_py_rel(int(l), op, int(r)) for l, op, r in self.alts)

    def structurally_true(self) -> bool:
        """An alternative is an identity (``e = e`` / ``e >= e`` after expansion), independent of
        any assumption about the symbols."""
        for l, op, r in self.alts:
            if op in ("=", "<=", ">="):
                try:
                    if sympy.expand(sympy.sympify(l) - sympy.sympify(r)) == 0:
                        return True
                except Exception:  # noqa: BLE001 - an exotic expression is simply not an identity
                    pass
        return False

    def smt(self, names: dict) -> str:
        parts = [f"({op} {to_smt(l, names)} {to_smt(r, names)})" for l, op, r in self.alts]
        return parts[0] if len(parts) == 1 else "(or " + " ".join(parts) + ")"

    def py(self, names: dict) -> str:
        pyop = {"=": "==", "<=": "<=", ">=": ">=", "<": "<", ">": ">"}
        parts = [f"({to_python(l, names)} {pyop[op]} {to_python(r, names)})" for l, op, r in self.alts]
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def text(self) -> str:
        pyop = {"=": "==", "<=": "<=", ">=": ">=", "<": "<", ">": ">"}
        return " or ".join(f"{l} {pyop[op]} {r}" for l, op, r in self.alts)


def _py_rel(a: int, op: str, b: int) -> bool:
    return {"=": a == b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b}[op]


def _free(e: Any) -> set:
    return set(e.free_symbols) if isinstance(e, sympy.Basic) else set()


def _expr(v: Any) -> Any:
    """A size as a sympy expression (SymInt) or an int; None when it is neither."""
    if isinstance(v, torch.SymInt):
        return v.node.expr
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, sympy.Basic):
        return v
    return None


def _prod(xs: Sequence[Any]) -> Any:
    out: Any = 1
    for x in xs:
        out = out * x
    return out


# ------------------------------------------------------------------------------------------------
# Result
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ShapeGuardResult:
    """What analyze_shape_guards found for one graph.

    assumptions: one dict per distinct assumption: text, kind, nodes, smt, entailed (bool),
      how ("structural", "verifuse-shapes:<decided_by>", "counterexample", "unknown: ..."),
      counterexample (sizes, when not entailed), seconds.
    added_guards: the runtime checks for the assumptions that do not follow: text, python, kind.
    guards: Dynamo's facts used as hypotheses (text, source, smt or skipped reason).
    smt2: the shape program (declarations with example values, guards, assumptions, outputs).
    """

    dynamic: bool = False
    symbols: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    guards: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    assumptions: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    added_guards: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    static_assumptions: int = 0
    non_size_guards: int = 0
    smt2: str = ""
    seconds: float = 0.0
    solver_calls: int = 0
    _checker: Optional[Callable[[Sequence[Any]], Optional[str]]] = dataclasses.field(default=None, repr=False)

    def violation(self, args: Sequence[Any]) -> Optional[str]:
        """The first added guard the arguments violate (as text), or None."""
        if self._checker is None:
            return None
        return self._checker(args)

    def check(self, args: Sequence[Any]) -> None:
        """Raises ShapeGuardError when the argument sizes violate an added guard."""
        msg = self.violation(args)
        if msg is not None:
            raise ShapeGuardError(msg)

    def report_entries(self) -> list[dict[str, Any]]:
        """For GraphReport.shape_guards: every assumption (entailed or not) and every added guard."""
        out: list[dict[str, Any]] = [{
            "type": "summary", "seconds": round(self.seconds, 4), "solver_calls": self.solver_calls,
            "assumptions": len(self.assumptions), "entailed": sum(a["entailed"] for a in self.assumptions),
            "runtime_checks": sum(1 for g in self.added_guards if g.get("python")),
            "static_assumptions": self.static_assumptions, "non_size_guards": self.non_size_guards,
            "symbols": {k: v["source"] for k, v in self.symbols.items()}}]
        for a in self.assumptions:
            out.append({"type": "assumption", "text": a["text"], "kind": a["kind"], "nodes": a["nodes"],
                        "entailed": a["entailed"], "how": a["how"], "added_guard": not a["entailed"],
                        **({"counterexample": a["counterexample"]} if a.get("counterexample") else {})})
        for g in self.added_guards:
            out.append({"type": "added_guard", "text": g["text"], "kind": g["kind"], "nodes": g["nodes"],
                        "checked_at_runtime": bool(g.get("python")),
                        **({"python": g["python"]} if g.get("python") else {}),
                        **({"covered_by_other_added_guards": True} if g.get("covered_by_other_added_guards") else {})})
        for g in self.guards:
            out.append({"type": "dynamo_guard", "text": g["text"], "source": g["source"],
                        **({"skipped": g["skipped"]} if g.get("skipped") else {})})
        return out

    def guarded(self, runner: Callable, aot_gm: torch.fx.GraphModule, strict: bool = False) -> Callable:
        """Wraps a boxed runner: arguments that violate an added guard raise ShapeGuardError under
        strict, otherwise run the ATen graph eagerly (correct, just not through the plan)."""
        if not self.added_guards:
            return runner
        return _GuardedRunner(runner, aot_gm, self, strict)

    def to_dict(self) -> dict[str, Any]:
        return {"dynamic": self.dynamic, "symbols": self.symbols, "guards": self.guards,
                "assumptions": self.assumptions, "added_guards": self.added_guards,
                "static_assumptions": self.static_assumptions, "non_size_guards": self.non_size_guards,
                "seconds": self.seconds,
                "solver_calls": self.solver_calls}


class _GuardedRunner:
    _boxed_call = True

    def __init__(self, runner: Callable, aot_gm: torch.fx.GraphModule, result: ShapeGuardResult, strict: bool):
        self._runner = runner
        self._aot_gm = aot_gm
        self._result = result
        self._strict = strict
        self._warned = False

    def __call__(self, args: list) -> list:
        msg = self._result.violation(args)
        if msg is None:
            return self._runner(args)
        if self._strict:
            raise ShapeGuardError(f"verifuse (strict): {msg}")
        from . import report as _report

        _report.bump("shape_guard_fallbacks")
        if not self._warned:
            self._warned = True
            warnings.warn(f"verifuse: running this graph in eager mode for these input sizes: {msg}",
                          stacklevel=2)
        out = self._aot_gm(*args)
        args.clear()
        return list(out)


# ------------------------------------------------------------------------------------------------
# Analysis
# ------------------------------------------------------------------------------------------------

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


def _shape_env(fake_inputs: Sequence[Any]) -> Any:
    for t in fake_inputs:
        vals = list(t.shape) if isinstance(t, torch.Tensor) else [t]
        for v in vals:
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


class _Collector:
    """The plan's shape assumptions, from the ATen graph's node metadata."""

    def __init__(self):
        self.items: list[tuple[str, str, _Cond]] = []  # (kind, node, cond)

    def add(self, kind: str, node: str, *alts: tuple) -> None:
        cond_alts = []
        for l, op, r in alts:
            if l is None or r is None:
                return
            cond_alts.append((l, op, r))
        self.items.append((kind, node, _Cond(tuple(cond_alts))))

    def window(self, node: str, what: str, x: Any, kernel: Sequence[int], stride_pad: Sequence[int],
               dilation: Sequence[int], ceil_strides: Sequence[int] | None = None) -> None:
        """One output position at least: size + 2*pad >= extent, or with ceil_mode (pooling) the
        last partial window counts too: size + 2*pad + stride - 1 >= extent."""
        nsp = len(kernel)
        sizes = [_expr(s) for s in x.shape]
        for j in range(nsp):
            size = sizes[len(sizes) - nsp + j]
            k, pad = int(kernel[j]), int(stride_pad[j] if j < len(stride_pad) else stride_pad[0])
            dil = int(dilation[j] if j < len(dilation) else dilation[0]) if dilation else 1
            extent = dil * (k - 1) + 1
            slack = 2 * pad + (int(ceil_strides[j]) - 1 if ceil_strides else 0)
            self.add(f"{what} window fits", node, (size + slack if slack else size, ">=", extent))

    def equal(self, kind: str, node: str, a: Any, b: Any) -> None:
        self.add(kind, node, (_expr(a), "=", _expr(b)))


def _meta(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else n


def _list(v: Any, n: int) -> list[int]:
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v] if v else [0] * n
    return [int(v)] * n


def _collect_assumptions(aot_gm: torch.fx.GraphModule, fake_inputs: Sequence[Any], static: set[int],
                         hints: dict) -> _Collector:
    aten = torch.ops.aten
    c = _Collector()
    placeholders = [n for n in aot_gm.graph.nodes if n.op == "placeholder"]
    for i, (ph, t) in enumerate(zip(placeholders, fake_inputs)):
        if i in static or not isinstance(t, torch.Tensor):
            continue
        for d, s in enumerate(t.shape):
            e = _expr(s)
            if _free(e):
                c.add("positive size", f"{ph.name}.size({d})", (e, ">=", 1))

    for n in aot_gm.graph.nodes:
        if n.op != "call_function":
            continue
        tgt = n.target
        name = n.name
        try:
            if tgt in (aten.convolution.default, aten._convolution.default):
                x, w = _meta(n.args[0]), _meta(n.args[1])
                stride, pad, dil, transposed, _, groups = n.args[3:9]
                if transposed or not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor):
                    continue
                k = list(w.shape[2:])
                c.window(name, "convolution", x, [int(_expr(v)) for v in k], _list(pad, len(k)), _list(dil, len(k)))
                c.equal("static channel count", name, x.shape[1], _expr(w.shape[1]) * int(groups))
            elif tgt in (aten.max_pool2d_with_indices.default, aten.max_pool2d.default, aten.avg_pool2d.default):
                x = _meta(n.args[0])
                kernel = _list(n.args[1], 2)
                stride = _list(n.args[2], 2) if len(n.args) > 2 and n.args[2] else kernel
                pad = _list(n.args[3] if len(n.args) > 3 else 0, 2)
                is_avg = tgt == aten.avg_pool2d.default
                dil = _list(n.args[4], 2) if not is_avg and len(n.args) > 4 else [1, 1]
                ceil_index = 4 if is_avg else 5
                ceil = bool(n.args[ceil_index]) if len(n.args) > ceil_index else bool(n.kwargs.get("ceil_mode", False))
                c.window(name, "pooling", x, kernel, pad, dil, stride if ceil else None)
            elif tgt == aten._adaptive_avg_pool2d.default:
                x = _meta(n.args[0])
                for d in (-2, -1):
                    c.add("pooling input non-empty", name, (_expr(x.shape[d]), ">=", 1))
            elif tgt == aten.addmm.default:
                a, b = _meta(n.args[1]), _meta(n.args[2])
                c.equal("static feature count", name, a.shape[-1], b.shape[0])
            elif tgt == aten.mm.default:
                a, b = _meta(n.args[0]), _meta(n.args[1])
                c.equal("matmul inner sizes equal", name, a.shape[-1], b.shape[0])
            elif tgt == aten.bmm.default:
                a, b = _meta(n.args[0]), _meta(n.args[1])
                c.equal("matmul batch sizes equal", name, a.shape[0], b.shape[0])
                c.equal("matmul inner sizes equal", name, a.shape[2], b.shape[1])
            elif tgt in (aten._native_batch_norm_legit_no_training.default, aten._batch_norm_no_update.default,
                         aten.native_batch_norm.default):
                x, mean = _meta(n.args[0]), _meta(n.args[3])
                if isinstance(mean, torch.Tensor) and x.dim() > 1:
                    c.equal("static channel count", name, x.shape[1], mean.shape[0])
            elif tgt == aten.native_layer_norm.default:
                x, shape = _meta(n.args[0]), list(n.args[1])
                for j, s in enumerate(shape):
                    c.equal("static normalized size", name, x.shape[x.dim() - len(shape) + j], _expr(_meta(s)))
            elif tgt in (aten.view.default, aten._unsafe_view.default):
                _view_assumptions(c, name, _meta(n.args[0]), [_expr(_meta(s)) for s in n.args[1]],
                                  unsafe=tgt == aten._unsafe_view.default, hints=hints)
        except (TypeError, ValueError, IndexError, AttributeError):
            continue  # metadata in an unexpected form: no assumption from this node
    return c


def _view_assumptions(c: _Collector, name: str, x: Any, new: list, unsafe: bool, hints: dict) -> None:
    if not isinstance(x, torch.Tensor) or any(v is None for v in new):
        return
    old = [_expr(s) for s in x.shape]
    strides = [_expr(s) for s in x.stride()]
    if -1 in new:
        return  # inferred size: the element count holds by construction
    c.add("view keeps element count", name, (_prod(old), "=", _prod(new)))
    if unsafe:
        return  # _unsafe_view follows a copy: its input is contiguous by construction
    # Which old dimensions merge into one new dimension (ATen's computeStride grouping), found on
    # the example sizes; each merge needs stride[k] == stride[k+1] * size[k+1] (or size[k] == 1).
    hint_old, hint_new = [_hint_of(v, hints) for v in old], [_hint_of(v, hints) for v in new]
    if None in hint_old or None in hint_new:
        return
    i = j = 0
    while i < len(old) and j < len(new):
        group = [i]
        po, pn = hint_old[i], hint_new[j]
        while po != pn and (i + 1 < len(old) or j + 1 < len(new)):
            if po < pn and i + 1 < len(old):
                i += 1
                group.append(i)
                po *= hint_old[i]
            elif j + 1 < len(new):
                j += 1
                pn *= hint_new[j]
            else:
                break
        for k in group[:-1]:
            if old[k] == 1:
                continue
            c.add("view merges contiguous dims", name, (strides[k], "=", strides[k + 1] * old[k + 1]),
                  (old[k], "=", 1))
        i += 1
        j += 1


def _hint_of(e: Any, hints: dict) -> Optional[int]:
    if isinstance(e, int):
        return e
    try:
        return int(e.xreplace(hints))
    except (TypeError, ValueError, AttributeError):
        return None


def _engine_check(program: str, timeout_ms: int) -> dict:
    from . import _C

    return json.loads(_C.analyze_shapes(program, False, timeout_ms, "prefix", True))


def analyze_shape_guards(aot_gm: torch.fx.GraphModule, fake_inputs: Sequence[Any], real_inputs: Sequence[Any],
                         static_indices: Sequence[int], timeout_ms: int = 2000) -> ShapeGuardResult:
    """See the module docstring. ``real_inputs`` gives the example sizes when the ShapeEnv has no
    hint; ``static_indices`` are the frozen parameters/buffers (their sizes are static)."""
    start = time.perf_counter()
    static = set(static_indices)
    res = ShapeGuardResult()
    shape_env = _shape_env(fake_inputs)

    # Size symbols and how to read them from the call's arguments.
    bindings: dict[sympy.Symbol, tuple[int, str, int]] = {}
    for i, t in enumerate(fake_inputs):
        if i in static:
            continue
        if isinstance(t, torch.Tensor):
            for d, s in enumerate(t.shape):
                e = _expr(s)
                if isinstance(e, sympy.Symbol) and e not in bindings:
                    bindings[e] = (i, "size", d)
        elif isinstance(t, torch.SymInt):
            e = _expr(t)
            if isinstance(e, sympy.Symbol) and e not in bindings:
                bindings[e] = (i, "int", 0)

    symbols: set = set(bindings)
    if shape_env is not None:
        symbols |= {s for s in shape_env.var_to_range if _is_size_symbol(s)}
    hints: dict = {}
    for sym in symbols:
        hint = _hint(shape_env, sym) if shape_env is not None else None
        if hint is None and sym in bindings:
            i, kind, d = bindings[sym]
            v = real_inputs[i] if i < len(real_inputs) else None
            if isinstance(v, torch.Tensor):
                hint = int(v.shape[d])
            elif isinstance(v, int):
                hint = v
        if hint is not None:
            hints[sym] = hint
    collected = _collect_assumptions(aot_gm, fake_inputs, static, hints)
    for _, _, cond in collected.items:
        for l, _, r in cond.alts:
            symbols |= {s for s in _free(l) | _free(r) if _is_size_symbol(s)}
    res.dynamic = bool(symbols)

    # Names (corpus style: x_size0) and example values.
    names: dict = {}
    taken: set = set()
    for sym in sorted(symbols, key=lambda s: str(s)):
        sources = list(shape_env.var_to_sources.get(sym, [])) if shape_env is not None else []
        smt, src = _smt_name(sym, sources, taken)
        names[sym] = smt
        rng = shape_env.var_to_range.get(sym) if shape_env is not None else None
        res.symbols[smt] = {"symbol": str(sym), "source": src, "example": hints.get(sym),
                            "range": [_bound(rng.lower), _bound(rng.upper)] if rng is not None else None,
                            "bound_to": list(bindings[sym]) if sym in bindings else None}

    # Dynamo's facts (hypotheses).
    hyps: list[tuple[str, str]] = []  # (smt, label)

    def hyp(text: str, source: str, build: Callable[[], str], expr: Any = None) -> None:
        if expr is not None and _free(expr) and not any(_is_size_symbol(x) for x in _free(expr)):
            res.non_size_guards += 1  # e.g. a batch norm's eps/momentum Dynamo wrapped as a float
            return
        try:
            smt = build()
        except _Untranslatable as err:
            res.guards.append({"text": text, "source": source, "skipped": str(err)})
            return
        if expr is not None:
            try:
                text = to_python(expr, names).removeprefix("(").removesuffix(")")
            except _Untranslatable:
                pass
        res.guards.append({"text": text, "source": source, "smt": smt})
        hyps.append((smt, f"{source}: {text}"))

    if shape_env is not None:
        for sym in sorted(symbols, key=str):
            rng = shape_env.var_to_range.get(sym)
            if rng is None:
                continue
            lo, hi = _bound(rng.lower), _bound(rng.upper)
            if lo is not None:
                hyp(f"{names[sym]} >= {lo}", "var_to_range", lambda s=sym, lo=lo: f"(>= {names[s]} {_smt_int(lo)})")
            if hi is not None:
                hyp(f"{names[sym]} <= {hi}", "var_to_range", lambda s=sym, hi=hi: f"(<= {names[s]} {_smt_int(hi)})")
        for sym, rep in list(shape_env.replacements.items()):
            if sym in names:
                hyp(f"{names[sym]} == {rep}", "replacement", lambda s=sym, r=rep: f"(= {names[s]} {to_smt(r, names)})")
        for e in list(getattr(shape_env, "divisible", ()) or ()):
            hyp(f"Eq({e}, 0)", "divisible", lambda e=e: f"(= {to_smt(e, names)} 0)")
        for g in list(shape_env.guards):
            hyp(str(g.expr), "guard", lambda g=g: to_smt(g.expr, names), g.expr)
        for _, ras in list(shape_env.deferred_runtime_asserts.items()):
            for ra in ras:
                hyp(str(ra.expr), "runtime_assert", lambda ra=ra: to_smt(ra.expr, names), ra.expr)

    # Distinct assumptions.
    merged: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    for kind, node, cond in collected.items:
        if cond.is_static():
            res.static_assumptions += 1
            if not cond.static_value():  # a static assumption that fails would be a tracing bug
                key = f"static:{cond.text()}"
                merged.setdefault(key, {"text": cond.text(), "kind": kind, "nodes": [], "cond": cond,
                                        "smt": "false"})
                merged[key]["nodes"].append(node)
                order.append(key) if key not in order else None
            continue
        try:
            smt = cond.smt(names)
        except _Untranslatable as err:
            smt = None
            key = f"untranslatable:{cond.text()}"
        else:
            key = smt
        if key not in merged:
            try:
                text = cond.py(names).removeprefix("(").removesuffix(")") if len(cond.alts) == 1 else cond.py(names)
            except _Untranslatable:
                text = cond.text()
            merged[key] = {"text": text, "sympy": cond.text(), "kind": kind, "nodes": [], "cond": cond, "smt": smt}
            order.append(key)
        if node not in merged[key]["nodes"]:
            merged[key]["nodes"].append(node)
        if smt is None:
            merged[key]["error"] = str(err)

    # Decide.
    header = _program_header(names, res.symbols)
    hyp_text = "".join(f"(assert {s})\n" for s, _ in hyps)
    for key in order:
        a = merged[key]
        t0 = time.perf_counter()
        cond: _Cond = a.pop("cond")
        entry = {"text": a["text"], "kind": a["kind"], "nodes": a["nodes"], "smt": a["smt"],
                 "sympy": a.get("sympy", a["text"])}
        if a["smt"] == "false":
            entry.update(entailed=False, how="static assumption fails")
        elif a["smt"] is None:
            entry.update(entailed=False, how=f"untranslatable: {a.get('error')}")
        elif cond.structurally_true():
            entry.update(entailed=True, how="structural")
        else:
            program = header + hyp_text + f"(assert (not {a['smt']}))\n(check-sat)\n"
            try:
                rep = _engine_check(program, timeout_ms)
                res.solver_calls += 1
            except Exception as err:  # noqa: BLE001 - an engine error keeps the assumption guarded
                rep = {"verdict": "unknown", "note": f"{type(err).__name__}: {err}"}
            if rep["verdict"] == "unsat":
                entry.update(entailed=True, how=f"verifuse-shapes:{rep.get('decided_by', '?')}")
            elif rep["verdict"] == "sat":
                model = rep.get("model") or {}
                entry.update(entailed=False, how=f"verifuse-shapes:{rep.get('decided_by', '?')} (counterexample)",
                             counterexample={k: v for k, v in model.items() if k in res.symbols})
            else:
                entry.update(entailed=False, how=f"unknown: {rep.get('note', '')}")
        entry["seconds"] = time.perf_counter() - t0
        res.assumptions.append(entry)
        if not entry["entailed"]:
            try:
                py = cond.py(names)
                unbound = sorted(str(s) for l, _, r in cond.alts for s in _free(l) | _free(r) if s not in bindings)
                if unbound:
                    raise _Untranslatable(f"no input size binds {', '.join(unbound)}")
            except _Untranslatable as err:
                py = None
                entry["how"] += f"; no runtime check possible: {err}"
            res.added_guards.append({"text": entry["text"], "kind": entry["kind"], "nodes": entry["nodes"],
                                     "python": py, "smt": entry["smt"]})

    _minimize_added(res, header, hyp_text, timeout_ms)
    res._checker = _build_checker(res.added_guards, names, bindings)
    res.smt2 = _program(header, hyps, res.assumptions, aot_gm, names)
    res.seconds = time.perf_counter() - start
    return res


def _minimize_added(res: ShapeGuardResult, header: str, hyp_text: str, timeout_ms: int) -> None:
    """An assumption that does not follow from Dynamo's guards may still follow from the guards
    verifuse adds for other assumptions (``x >= 1`` makes ``(x-1)//2 + 1 >= 1`` hold): the engine's
    prefix redundancy over guards + added guards (simplest first) finds them; they need no check of
    their own."""
    cands = [g for g in res.added_guards if g.get("python")]
    if len(cands) < 2:
        return
    cands.sort(key=lambda g: len(g["smt"]))
    program = header + hyp_text + "".join(f"(assert {g['smt']})\n" for g in cands) + "(check-sat)\n"
    n_hyps = hyp_text.count("(assert ")
    try:
        from . import _C

        rep = json.loads(_C.analyze_shapes(program, True, timeout_ms, "prefix", True))
        res.solver_calls += 1
    except Exception:  # noqa: BLE001 - without the minimization every added guard is checked
        return
    covered = {a["index"] - n_hyps for a in rep.get("redundancy", {}).get("asserts", []) if a["index"] >= n_hyps}
    for k, g in enumerate(cands):
        if k in covered:
            g["covered_by_other_added_guards"] = True
            g["python"] = None
            for a in res.assumptions:
                if a.get("smt") == g["smt"]:
                    a["how"] += "; implied by the other added guards"
    res.added_guards.sort(key=lambda g: (g.get("covered_by_other_added_guards", False), len(g["smt"])))


def _bound(v: Any) -> Optional[int]:
    try:
        if v is None or not bool(getattr(v, "is_finite", True)) or abs(v) > 2**62:
            return None
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _program_header(names: dict, symbols: dict) -> str:
    lines = ["(set-option :produce-models true)"]
    for smt, info in symbols.items():
        lines.append(f"(declare-const {smt} Int)")
        if info.get("example") is not None:
            lines.append(f"(set-info :example-{smt} {info['example']})")
    return "\n".join(lines) + "\n"


def _program(header: str, hyps: list[tuple[str, str]], assumptions: list[dict], aot_gm: torch.fx.GraphModule,
             names: dict) -> str:
    """The graph's shape program in the corpus format: Dynamo's guards and the plan's assumptions as
    asserts (entailed ones first would be redundant: `python -m verifuse shapes --redundant` lists
    them), output sizes as define-funs, check-sat, get-value of the inputs."""
    out = ["; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions",
           header.rstrip("\n")]
    for i, (smt, label) in enumerate(hyps):
        out.append(f"; {label}")
        out.append(f"(define-fun guard_{i} () Bool {smt})")
        out.append(f"(assert guard_{i})")
    for i, a in enumerate(assumptions):
        if not a.get("smt") or a["smt"] == "false":
            continue
        verdict = ("entailed" if a["entailed"] else "NOT entailed by Dynamo's guards: "
                   + ("implied by the other added guards" if "implied by the other" in a["how"] else "runtime guard added"))
        out.append(f"; assumption {a['kind']} ({', '.join(a['nodes'][:4])}{'...' if len(a['nodes']) > 4 else ''}):"
                   f" {verdict} [{a['how']}]")
        out.append(f"(define-fun assume_{i} () Bool {a['smt']})")
        out.append(f"(assert assume_{i})")
    outputs = [n for n in aot_gm.graph.nodes if n.op == "output"]
    if outputs:
        vals = outputs[0].args[0]
        for k, v in enumerate(vals if isinstance(vals, (list, tuple)) else [vals]):
            t = _meta(v)
            if not isinstance(t, torch.Tensor):
                continue
            for d, s in enumerate(t.shape):
                try:
                    out.append(f"(define-fun output{k}_size{d} () Int {to_smt(_expr(s), names)})")
                except _Untranslatable:
                    pass
    out.append("(check-sat)")
    if names:
        out.append("(get-value (" + " ".join(sorted(names.values())) + "))")
    return "\n".join(out) + "\n"


def _build_checker(added: list[dict], names: dict, bindings: dict) -> Optional[Callable]:
    checks = [g for g in added if g.get("python")]
    if not checks:
        return None
    reads = []
    for sym, smt in names.items():
        if sym in bindings:
            i, kind, d = bindings[sym]
            reads.append(f"    {smt} = int(args[{i}].shape[{d}])" if kind == "size" else f"    {smt} = int(args[{i}])")
    src = ["def _check(args):"] + reads
    for k, g in enumerate(checks):
        src.append(f"    if not {g['python']}:")
        src.append(f"        return {('shape guard failed: ' + g['text'] + ' (' + g['kind'] + ')')!r}")
    src.append("    return None")
    code = "\n".join(src)
    scope: dict[str, Any] = {}
    try:
        exec(compile(code, "<verifuse shape guards>", "exec"), scope)  # noqa: S102 - generated from sympy
    except (SyntaxError, NameError) as err:
        raise RuntimeError(f"verifuse: could not build the shape guard checker: {err}\n{code}") from err
    fn = scope["_check"]

    return fn


def attach_shape_guards(runner: Callable, aot_gm: torch.fx.GraphModule, fake_inputs: Sequence[Any],
                        real_inputs: Sequence[Any], static_indices: Sequence[int], graph_report: Any = None,
                        strict: bool = False) -> Callable:
    """The backend hook: analyzes the graph's shapes (only when some input size is symbolic),
    records assumptions, Dynamo's guards and the shape program in ``graph_report``, and returns
    ``runner`` wrapped with the added guards (or ``runner`` itself when none are needed)."""
    if not any(isinstance(v, torch.SymInt) for t in fake_inputs
               for v in (t.shape if isinstance(t, torch.Tensor) else [t])):
        return runner  # static shapes: Dynamo's guards pin every size
    from . import report as _report

    try:
        result = analyze_shape_guards(aot_gm, fake_inputs, real_inputs, static_indices)
    except Exception as err:  # noqa: BLE001 - the analysis must not break a compile
        if strict:
            raise
        if graph_report is not None:
            graph_report.shape_guards = [{"type": "error", "text": f"{type(err).__name__}: {err}"}]
        return runner
    if graph_report is not None:
        graph_report.shape_guards = result.report_entries()
        graph_report.shape_program_smt2 = result.smt2
    checks = sum(1 for g in result.added_guards if g.get("python"))
    _report.bump("shape_assumptions", len(result.assumptions))
    _report.bump("shape_assumptions_entailed", sum(a["entailed"] for a in result.assumptions))
    _report.bump("shape_guards_added", checks)
    return result.guarded(runner, aot_gm, strict)
