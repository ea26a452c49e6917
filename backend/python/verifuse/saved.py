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

__all__ = ["SavedGraph", "VerifusePlanWarning", "save", "load", "save_problem", "environment"]

_FORMAT = "verifuse-saved-graph-v2"  # v2: the graph node by node (v1: torch.fx pickling)


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
        nodes, attrs = _encode_graph(gm)
        return pickle.dumps({
            "format": _FORMAT,
            "nodes": nodes,
            "attrs": attrs,
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
        _encode_graph(gm, copy_attrs=False)  # every compile asks: no tensor copies
    except _Unsavable as err:
        return str(err)
    return None


# ---- the ATen graph as plain data ---------------------------------------------------------------
# Not torch.fx's own pickling: it saves the generated code and re-traces it, and the re-trace runs
# every call whose arguments hold no graph value (aten.arange in the decomposition of a nearest
# upsample, aten.full, ...) at load time, turning it into a constant: the graph no longer matches
# its plan node for node. Nodes are saved one by one instead: op, target by name, arguments with
# node references, node name.

def _encode_target(target: Any) -> tuple:
    if isinstance(target, torch._ops.OpOverload):
        ns, _, name = target._schema.name.partition("::")
        return ("op", ns, name, target._overloadname)
    if isinstance(target, str):
        return ("attr", target)
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        return ("py", module, qualname)
    raise _Unsavable(f"a graph node calls {target!r}, which cannot be saved by name")


def _decode_target(enc: tuple) -> Any:
    kind = enc[0]
    if kind == "op":
        _, ns, name, overload = enc
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    if kind == "attr":
        return enc[1]
    import importlib

    obj: Any = importlib.import_module(enc[1])
    for part in enc[2].split("."):
        obj = getattr(obj, part)
    return obj


def _encode_arg(a: Any, index: dict) -> Any:
    if isinstance(a, torch.fx.Node):
        return ("node", index[a])
    if a is None or isinstance(a, (bool, int, float, str)):
        return ("v", a)
    if isinstance(a, (list, tuple)):
        return ("list" if isinstance(a, list) else "tuple", [_encode_arg(x, index) for x in a])
    if isinstance(a, dict):
        return ("dict", [(k, _encode_arg(v, index)) for k, v in a.items()])
    if isinstance(a, torch.dtype):
        return ("dtype", str(a).replace("torch.", ""))
    if isinstance(a, torch.device):
        return ("device", str(a))
    if isinstance(a, torch.layout):
        return ("layout", str(a).replace("torch.", ""))
    if isinstance(a, torch.memory_format):
        return ("memory_format", str(a).replace("torch.", ""))
    if isinstance(a, slice):
        return ("slice", [_encode_arg(x, index) for x in (a.start, a.stop, a.step)])
    if a is Ellipsis:
        return ("ellipsis",)
    raise _Unsavable(f"a graph node has an argument of type {type(a).__name__}, which cannot be saved")


def _decode_arg(enc: Any, nodes: list) -> Any:
    kind = enc[0]
    if kind == "node":
        return nodes[enc[1]]
    if kind == "v":
        return enc[1]
    if kind == "list":
        return [_decode_arg(x, nodes) for x in enc[1]]
    if kind == "tuple":
        return tuple(_decode_arg(x, nodes) for x in enc[1])
    if kind == "dict":
        return {k: _decode_arg(v, nodes) for k, v in enc[1]}
    if kind in ("dtype", "layout", "memory_format"):
        return getattr(torch, enc[1])
    if kind == "device":
        return torch.device(enc[1])
    if kind == "slice":
        return slice(*[_decode_arg(x, nodes) for x in enc[1]])
    if kind == "ellipsis":
        return Ellipsis
    raise RuntimeError(f"verifuse: unknown saved argument kind {kind!r}")


def _encode_graph(gm: torch.fx.GraphModule, copy_attrs: bool = True) -> tuple[list, dict]:
    """Every node (op, name, target, args, kwargs) and (``copy_attrs``) copies of the tensors
    get_attr nodes read."""
    index: dict = {}
    nodes, attrs = [], {}
    for i, n in enumerate(gm.graph.nodes):
        if n.op not in ("placeholder", "call_function", "get_attr", "output"):
            raise _Unsavable(f"a graph node of kind {n.op}")
        if n.op == "get_attr":
            value = gm
            for part in str(n.target).split("."):
                value = getattr(value, part)
            if not isinstance(value, torch.Tensor):
                raise _Unsavable(f"a graph attribute of type {type(value).__name__}")
            if copy_attrs:
                attrs[str(n.target)] = value.detach().clone()
        nodes.append((n.op, n.name, _encode_target(n.target), _encode_arg(tuple(n.args), index),
                      _encode_arg(dict(n.kwargs), index)))
        index[n] = i
    return nodes, attrs


def _decode_graph(nodes: list, attrs: dict) -> torch.fx.GraphModule:
    root = torch.nn.Module()
    for name, value in attrs.items():
        owner = root
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_buffer(leaf, value)
    graph = torch.fx.Graph()
    made: list = []
    for op, name, target, args, kwargs in nodes:
        made.append(graph.create_node(op, _decode_target(target), _decode_arg(args, made), _decode_arg(kwargs, made),
                                      name=name))
    # Lazy: its Python code is generated on first call or first look at .code, never for a graph
    # only lowered (40 ms of BERT-base's warm start).
    from torch.fx._lazy_graph_module import _LazyGraphModule

    return _LazyGraphModule(root, graph)


def _rebuild_graph_module(state: dict) -> torch.fx.GraphModule:
    """The ATen graph back, node for node, with each node's example value restored as a meta
    tensor: the lowering reads shapes and dtypes from node.meta."""
    gm = _decode_graph(state["nodes"], state["attrs"])
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
    and the guard types torch cannot serialize are dropped, and, as torch's ``caching_precompile``
    does, guards that derive one of those: e.g. the DICT_VERSION a torch.export'ed GraphModule's
    guards carry, which would make a PT2E-quantized model unsavable) plus Dynamo's TENSOR_MATCH guards on the
    model's parameters and buffers. Restoring one guard per weight is most of
    a load's time (ResNet-50: about 0.5 s of 0.9 s), and verifuse checks the weights itself: their
    shapes, dtypes and content fingerprints against the plan on the first call (a mismatch
    re-validates or refuses), then each frozen weight's identity, data pointer and version counter
    on every call (a different or updated weight rebuilds the plan, never a stale result)."""
    from torch._dynamo.guards import CheckFunctionManager

    unserializable = CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES
    keep = []
    for entry in guard_entries:
        derived = tuple(getattr(entry, "derived_guard_types", ()) or ())
        if (getattr(entry, "is_global", False) or entry.guard_type in unserializable
                or any(d in unserializable for d in derived)):
            keep.append(False)
            continue
        name = getattr(entry, "name", "") or ""
        value = entry.value if getattr(entry, "has_value", False) else None
        weight = entry.guard_type == "TENSOR_MATCH" and (
            isinstance(value, torch.nn.Parameter) or "._parameters[" in name or "._buffers[" in name)
        # A module whose class torch cannot name (defined in a function, or a torch.fx
        # GraphModule's per-instance class): Dynamo's TYPE_MATCH guard on it cannot be saved. The
        # module's weights are what the plan depends on, and verifuse checks those itself.
        local_module = entry.guard_type == "TYPE_MATCH" and isinstance(value, torch.nn.Module) and (
            type(value).__qualname__ != type(value).__name__)
        keep.append(not weight and not local_module)
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
    problem = save_problem(model, guard_filter_fn)
    if problem is not None:
        raise ValueError(f"verifuse.save: {problem}")
    if guard_filter_fn is drop_weight_guards and isinstance(model, torch.fx.GraphModule):
        # A torch.export'ed (e.g. PT2E-quantized) GraphModule: torch pickles the objects its
        # guards read, and export's forward pre-hook is a function pickle cannot name, so any
        # guard on the module makes it unsavable. Its behaviour is its graph, which the plan
        # holds; what else can change is checked by verifuse on every call (the weights'
        # identity and versions, fingerprints on the first call, every input's shape and dtype).
        guard_filter_fn = _no_guards
    if guard_filter_fn is not None:
        options = dict(options, guard_filter_fn=guard_filter_fn)
    compiled = _aot(model, tuple(example_inputs), options)
    compiled.save_compiled_function(path)


def _no_guards(guard_entries: Sequence[Any]) -> list[bool]:
    return [False] * len(guard_entries)


def save_problem(model: Any, guard_filter_fn: Optional[Callable] = drop_weight_guards) -> Optional[str]:
    """Why torch cannot save a function of ``model`` (checked before any work, where torch would
    say so only after tracing, from inside Dynamo), with what to do; None when nothing is known
    to stand in the way."""
    if not isinstance(model, torch.nn.Module):
        return f"expected a torch.nn.Module, got {type(model).__name__}"
    if guard_filter_fn is drop_weight_guards:
        return None  # it drops the type guards torch cannot save (drop_weight_guards)
    for name, module in model.named_modules():
        cls = type(module)
        if cls.__qualname__ != cls.__name__ and not isinstance(module, torch.fx.GraphModule):
            where = f"the model's submodule {name!r}" if name else "the model"
            return (f"{where} is a {cls.__module__}.{cls.__qualname__}, a class torch cannot name (defined inside a "
                    "function or another class), and the guard_filter_fn given keeps Dynamo's type guards, which "
                    "torch then cannot save: pass the default guard_filter_fn, or define the class at the top level "
                    "of a module")
    return None


def _module_for_global(name: str) -> Any:
    """The module a Dynamo global ___module_<name>_<id>_c<n> stands for (``name`` is the module's
    last dotted component): the top-level module of that name, else the one loaded module whose
    name ends in it; None if neither is unique."""
    import importlib
    import re
    import sys

    m = re.fullmatch(r"___module_(.+?)_\d+_c\d+", name)
    if m is None:
        return None
    short = m.group(1)
    try:
        return importlib.import_module(short)
    except ImportError:
        pass
    found = [mod for key, mod in sorted(sys.modules.items()) if key.rsplit(".", 1)[-1] == short]
    return found[0] if len(found) == 1 else None


def load(path: str) -> Callable:
    """The function :func:`save` wrote; call it as ``fn(model, *inputs)`` (the model supplies the
    weights, checked against the plan's fingerprints on the first call). It is an inference
    function: it runs under ``torch.no_grad()`` whatever the caller's grad mode (the plan was
    saved under it, and Dynamo's saved guards would otherwise refuse a call with grad enabled)."""
    import functools
    import io
    import re

    with open(path, "rb") as f:
        data = f.read()
    extra: dict[str, Any] = {}
    while True:
        try:
            compiled = torch.compiler.load_compiled_function(io.BytesIO(data), f_globals=extra or None)
            break
        except RuntimeError as err:
            # Dynamo's saved code loads some modules it used (e.g. `collections` in a transformers
            # model's output) through globals named ___module_<name>_<id>_c<n>, which the loading
            # process must supply: they are modules, so import them by name.
            missing = [r for r in re.findall(r"'(___module_[A-Za-z0-9_]+)'", str(err)) if r not in extra]
            resolved = {r: m for r in missing if (m := _module_for_global(r)) is not None}
            if not missing or len(resolved) != len(missing):
                raise
            extra.update(resolved)

    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return compiled(*args, **kwargs)

    return run


def _call_model(model: torch.nn.Module, *inputs: Any) -> Any:
    return model(*inputs)


def _aot(model: torch.nn.Module, example_inputs: tuple, options: dict) -> Any:
    import torch._dynamo.config as dynamo_config

    with dynamo_config.patch(enable_aot_compile=True):
        # dynamic=False: every save traces the one function _call_model, so from the second save
        # in a process Dynamo's automatic dynamic shapes would mark sizes symbolic (a saved plan is
        # for static shapes).
        fn = torch.compile(_call_model, backend="verifuse", fullgraph=True, dynamic=False, options=options or None)
        with torch.no_grad():
            return fn.aot_compile(((model, *example_inputs), {}))
