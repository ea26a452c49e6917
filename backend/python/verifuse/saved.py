"""Saved plans through PyTorch's own API (issue 18).

``torch.compile(f, backend="verifuse", fullgraph=True).aot_compile(((model, x), {}))`` returns a
function whose ``save_compiled_function(path)`` writes Dynamo's guards and bytecode plus what
verifuse returned for the graph: a :class:`SavedGraph` (a ``SerializableCallable``), serialized as
the ATen inference graph, its node shapes, the frozen-input positions, the options and the C++
saved plan (driver/saved_plan.h: proof verdicts, instance checks, tuning decisions, optimized IR,
environment, weight fingerprints). Not the weights.

``torch.compiler.load_compiled_function(file)`` in another process gives a function that, on its
first call, binds the weights the call passes (``f(model, x)``: the model's parameters), checks
their content fingerprints against the plan and replays it: no Dynamo tracing, no AOT tracing, no
Z3 query, no timing. A plan that does not fit (other weights, another verifuse/torch/oneDNN/Z3
build, another CPU) is refused with a warning naming the reason, and the graph is compiled from
scratch on those weights (so a result is never computed with a plan validated for other weights).

``save(model, example_inputs, path)`` / ``load(path)`` wrap the two calls for a module.
"""
from __future__ import annotations

import pickle
import threading
import time
import warnings
from typing import Any, Callable, Optional, Sequence

import torch
from torch._dynamo.aot_compile_types import SerializableCallable

__all__ = ["SavedGraph", "VerifusePlanWarning", "save", "load", "environment"]

_FORMAT = "verifuse-saved-graph-v1"


class VerifusePlanWarning(UserWarning):
    """A saved plan was refused (and the graph compiled from scratch); the message says why."""


def environment(opts: Any) -> str:
    """The Python half of a saved plan's environment key: verifuse build, torch, intra-op threads
    (tuning decisions depend on them), the options that change a plan, and the benchmarking knobs
    the driver reads. The C++ half adds Z3, oneDNN, the CPU ISA and the plan format."""
    import os

    from . import _C, __version__

    try:
        st = os.stat(_C.__file__)  # a rebuilt extension may carry other rules: its own plans
        build = f"{st.st_size}-{st.st_mtime_ns}"
    except OSError:
        build = "unknown"
    knobs = ",".join(f"{k}={os.environ.get(k, '')}" for k in (
        "VERIFUSE_ENGINE", "VERIFUSE_LINEAR_WEIGHTS", "VERIFUSE_ATTENTION", "VERIFUSE_TEST_TUNE_ONEDNN_PENALTY_MS",
        "VERIFUSE_TEST_PLANTED_BUG"))
    return (f"verifuse={__version__}+{build};torch={torch.__version__};threads={torch.get_num_threads()};"
            f"verify={opts.verify};autotune={opts.autotune};dtype={opts.dtype};"
            f"layer_check_weights={opts.layer_check_weights};linear_weights={opts.linear_weights};{knobs}")


class SaveState:
    """What the backend learned about one graph that a saved function needs: filled by the
    inference compiler; ``reason`` says why the graph cannot be saved (None: it can)."""

    def __init__(self) -> None:
        self.reason: Optional[str] = "the graph was not compiled by verifuse"
        self.aot_gm: Optional[torch.fx.GraphModule] = None
        self.static: list[int] = []
        self.names: list[str] = []
        self.options: dict[str, Any] = {}
        self.runner: Any = None  # backend.CompiledGraphRunner (its saved_plan)

    def payload(self) -> bytes:
        if self.reason is not None:
            raise RuntimeError(f"verifuse: this graph cannot be saved: {self.reason}")
        plan = getattr(self.runner, "saved_plan", None)
        if plan is None:
            note = getattr(self.runner, "plan_note", "") or "no plan was recorded"
            raise RuntimeError(f"verifuse: this graph cannot be saved: {note}")
        gm = self.aot_gm
        return pickle.dumps({
            "format": _FORMAT,
            "gm": pickle.dumps(gm, protocol=pickle.HIGHEST_PROTOCOL),
            "graph": _graph_spec(gm),
            "static": self.static,
            "names": self.names,
            "options": self.options,
            "plan": bytes(plan),
        }, protocol=pickle.HIGHEST_PROTOCOL)


def inference_problem(meta: Any) -> Optional[str]:
    """Why the ATen graph cannot run without AOT's runtime wrappers (mutated inputs, outputs that
    alias, ...): a saved graph calls it directly with Dynamo's arguments. None when it can."""
    from torch._functorch._aot_autograd.schemas import OutputType

    if meta is None:
        return "no AOT metadata"
    if any(getattr(i, "mutates_data", False) or getattr(i, "mutates_metadata", False) for i in meta.input_info):
        return "the graph mutates an input"
    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return "an output aliases an input or an intermediate (AOT regenerates it at run time)"
    if getattr(meta, "num_intermediate_bases", 0) or getattr(meta, "tokens", None):
        return "the graph has intermediate bases or effect tokens"
    from torch._functorch._aot_autograd.schemas import SubclassCreationMeta

    if any(isinstance(m, SubclassCreationMeta) for m in getattr(meta, "subclass_inp_meta", []) or []):
        return "tensor subclass inputs"
    return None


def _spec(val: Any) -> Any:
    """A node's example value as plain data (static shapes only)."""
    if isinstance(val, torch.Tensor):
        shape, stride = tuple(val.shape), tuple(val.stride())
        if not all(isinstance(d, int) for d in shape + stride):
            raise _Unsavable("dynamic shapes (a symbolic size)")
        return ("tensor", shape, stride, str(val.dtype).replace("torch.", ""))
    if isinstance(val, (list, tuple)):
        return ("list", [_spec(v) for v in val])
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Unsavable("dynamic shapes (a symbolic scalar)")
    if val is None or isinstance(val, (bool, int, float)):
        return ("value", val)
    return ("other", None)


def _unspec(spec: Any) -> Any:
    kind, *rest = spec
    if kind == "tensor":
        shape, stride, dtype = rest
        return torch.empty_strided(shape, stride, dtype=getattr(torch, dtype), device="meta")
    if kind == "list":
        return [_unspec(s) for s in rest[0]]
    return rest[0]


class _Unsavable(Exception):
    pass


def _graph_spec(gm: torch.fx.GraphModule) -> list:
    return [(_target(n), _spec(n.meta["val"]) if "val" in n.meta else None) for n in gm.graph.nodes
            if n.op in ("placeholder", "call_function")]


def graph_problem(gm: torch.fx.GraphModule) -> Optional[str]:
    try:
        _graph_spec(gm)
    except _Unsavable as err:
        return str(err)
    return None


def _rebuild_graph_module(state: dict) -> torch.fx.GraphModule:
    """The ATen graph back (torch.fx's own pickling: its code, re-traced), with each node's
    example value restored as a meta tensor: the lowering reads shapes and dtypes from node.meta."""
    gm = pickle.loads(state["gm"])
    nodes = [n for n in gm.graph.nodes if n.op in ("placeholder", "call_function")]
    specs = state["graph"]
    if len(nodes) != len(specs) or any(_target(n) != target for n, (target, _) in zip(nodes, specs)):
        raise RuntimeError("the saved ATen graph does not rebuild node for node")
    for node, (_, spec) in zip(nodes, specs):
        if spec is not None:
            node.meta["val"] = _unspec(spec)
    return gm


def _target(node: torch.fx.Node) -> str:
    return "placeholder" if node.op == "placeholder" else str(node.target)


class SavedGraph(SerializableCallable):
    """What verifuse returns to Dynamo: runs the compiled graph and, for aot_compile, serializes
    it. A loaded one builds its plan on the first call from the weights that call passes."""

    def __init__(self, fn: Optional[Callable], state: Any) -> None:
        self._fn = fn
        self._state = state
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        fn = self._fn
        if fn is None:
            fn = self._bind(args)
        return fn(*args)

    @classmethod
    def serialize_compile_artifacts(cls, fn: "SavedGraph") -> bytes:
        state = fn._state
        return state if isinstance(state, bytes) else state.payload()

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "SavedGraph":
        state = pickle.loads(data)
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise RuntimeError(f"verifuse: not a saved verifuse graph (format {state.get('format') if isinstance(state, dict) else '?'}, "
                               f"expected {_FORMAT})")
        return cls(None, data)

    def _bind(self, args: Sequence[Any]) -> Callable:
        """First call after a load: rebuild the ATen graph, bind this call's weights, replay."""
        with self._lock:
            if self._fn is not None:
                return self._fn
            self._fn = _load_runner(pickle.loads(self._state), list(args))
            return self._fn


def _load_runner(state: dict, args: list) -> Callable:
    from . import report as _report
    from .backend import CompiledGraphRunner, _inference_problem
    from .options import Options

    start = time.perf_counter()
    opts = Options.parse(state["options"])
    gm = _rebuild_graph_module(state)
    graph_report = _report.GraphReport(graph_id=_report.next_graph_id())
    problem = _inference_problem(args, state["names"])

    def eager(reason: str) -> Callable:
        warnings.warn(f"verifuse: running this loaded graph in eager mode: {reason}", VerifusePlanWarning, stacklevel=3)
        _report.record_fallback(graph_report, "<graph>", reason)
        graph_report.engine = "eager"
        _report.publish(graph_report)
        return lambda *a: gm(*a)

    if problem is not None:
        return eager(problem)
    try:
        runner = CompiledGraphRunner(gm, args, set(state["static"]), state["names"], opts, graph_report,
                                     saved_plan=state["plan"])
    except Exception as exc:  # a loaded model must never fail because of verifuse
        if opts.strict:
            raise
        return eager(f"{type(exc).__name__}: {exc}")
    graph_report.compile_seconds = time.perf_counter() - start
    _report.publish(graph_report)
    # The plan is for the traced shapes. Dynamo's saved guards check them too, unless a
    # guard_filter_fn dropped those guards: this check holds either way (a few compares per call).
    static = set(state["static"])
    placeholders = [spec for target, spec in state["graph"] if target == "placeholder"]
    expected = [(i, tuple(spec[1]), getattr(torch, spec[3])) for i, spec in enumerate(placeholders)
                if i not in static and spec is not None and spec[0] == "tensor"]
    names = state["names"]

    def run(*a: Any) -> Any:
        for i, shape, dtype in expected:
            t = a[i]
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != shape or t.dtype != dtype:
                got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise RuntimeError(f"verifuse: input {names[i] if i < len(names) else i} is {got}; the saved "
                                   f"plan was compiled for {shape} {dtype}")
        return runner(list(a))

    return run


def drop_weight_guards(guard_entries: Sequence[Any]) -> list[bool]:
    """:func:`save`'s default guard filter: torch's own default for ``aot_compile`` (global guards
    and the guard types torch cannot serialize are dropped) plus Dynamo's TENSOR_MATCH guards on the
    model's parameters and buffers. Restoring one guard per weight is most of
    a load's time (ResNet-50: about 0.5 s of 0.9 s), and verifuse checks the weights itself: their
    shapes, dtypes and content fingerprints against the plan on the first call (a mismatch
    re-validates or refuses), then each frozen weight's identity, data pointer and version counter
    on every call (a different or updated weight rebuilds the plan, never a stale result)."""
    from torch._dynamo.guards import CheckFunctionManager

    unserializable = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    keep = []
    for entry in guard_entries:
        if getattr(entry, "is_global", False) or entry.guard_type in unserializable:
            keep.append(False)
            continue
        name = getattr(entry, "name", "") or ""
        value = entry.value if getattr(entry, "has_value", False) else None
        weight = entry.guard_type == "TENSOR_MATCH" and (
            isinstance(value, torch.nn.Parameter) or "._parameters[" in name or "._buffers[" in name)
        keep.append(not weight)
    return keep


def save(model: torch.nn.Module, example_inputs: Sequence[Any], path: str, *,
         guard_filter_fn: Optional[Callable] = drop_weight_guards, **options: Any) -> None:
    """Compiles ``model`` with verifuse for ``example_inputs`` through ``aot_compile`` and saves the
    function to ``path``: load it with :func:`load` (or ``torch.compiler.load_compiled_function``)
    and call it as ``fn(model, *inputs)``. ``guard_filter_fn`` goes to Dynamo; the default,
    :func:`drop_weight_guards`, leaves the weights to verifuse's own checks. torch cannot save some
    guards (an ID_MATCH guard, e.g. on a transformers model): a filter such as
    ``torch.compiler.skip_all_guards_unsafe`` drops them (torch's own, unsafe, choice; verifuse
    still checks the weights' fingerprints once, the weights' identity per call and every input's
    shape and dtype per call). ``None`` keeps every guard."""
    if guard_filter_fn is not None:
        options = dict(options, guard_filter_fn=guard_filter_fn)
    compiled = _aot(model, tuple(example_inputs), options)
    compiled.save_compiled_function(path)


def load(path: str) -> Callable:
    """The function :func:`save` wrote; call it as ``fn(model, *inputs)`` (the model supplies the
    weights, checked against the plan's fingerprints on the first call)."""
    with open(path, "rb") as f:
        return torch.compiler.load_compiled_function(f)


def _call_model(model: torch.nn.Module, *inputs: Any) -> Any:
    return model(*inputs)


def _aot(model: torch.nn.Module, example_inputs: tuple, options: dict) -> Any:
    import torch._dynamo.config as dynamo_config

    with dynamo_config.patch(enable_aot_compile=True):
        fn = torch.compile(_call_model, backend="verifuse", fullgraph=True, options=options or None)
        with torch.no_grad():
            return fn.aot_compile(((model, *example_inputs), {}))
