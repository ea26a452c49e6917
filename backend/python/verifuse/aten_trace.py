"""Dynamo's FX graph to an ATen inference graph in one trace, without aot_autograd.

aot_autograd traces a graph twice (once to collect its input/output metadata, once to make the
graph), and wraps the result in runtime wrappers that replay input mutations and regenerate
outputs that alias inputs. An inference graph that mutates none of its inputs and returns no
alias needs neither: one ``make_fx`` trace under Dynamo's own fake tensors and AOT's
functionalization, with the same decomposition table, gives the same ATen operators (in-place
operators on intermediates become their functional forms, as under AOT), and the compiled plan
can be called with Dynamo's arguments as they are. A graph that spells no write is traced
without the functionalization (it changes nothing there and costs ~30% of the trace: BERT-base
0.44 -> 0.30 s), again with it if a writing operator shows up in the ATen graph after all; the
fake inputs are Dynamo's own when they still describe the real ones (converting 203 parameters
costs 30 ms warm, more when a garbage collection falls into it). Measured on the Zen 4 VM, 1 thread, same
Dynamo graph, best of 3: BERT-base 0.44 s against AOT's 0.74 s, GPT-2 0.40 against 0.67, T5-small
0.29 against 0.51, ResNet-50 (transformers) 0.30 against 0.51; in a first compile AOT's share is
larger (its first call also imports it: BERT's first call 3.7 -> 2.8-3.1 s, warm caches).

A graph that writes an input's data (a static KV cache's ``index_copy_``) is traced once too:
functionalization records the write, the input's new value becomes an extra output, and the
caller copies it back after each call, as AOT's runtime wrapper does (the plan may write the
input in place and return it, then there is nothing to copy). Qwen2.5-0.5B's prefill and decode
graphs: AOT 4.4 and 4.6 s, one trace 2.4 and 1.9 s.

Anything else goes through aot_autograd as before, and :func:`trace_inference_graph` says why:
tensor subclasses (torchao's quantized weights), symbolic sizes (``dynamic=True``), parameters
kept as graph attributes (inductor's freezing flag), higher-order operators, writes to an
input's metadata, to a parameter or buffer, or to an input that shares memory with another
(AOT's synthetic bases; any operator left in the graph whose schema writes is refused too),
batch norm in training mode, and outputs that are inputs or views of inputs or of each other.

``VERIFUSE_ONE_TRACE=0`` turns this off (every graph through aot_autograd).
"""
from __future__ import annotations

import dataclasses
import operator
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.fx

__all__ = ["OneTrace", "one_trace_wanted", "static_indices", "trace_inference_graph", "trace_problem"]


@dataclass
class OneTrace:
    """The result of :func:`trace_inference_graph`: an ATen graph whose placeholders are Dynamo's
    inputs in Dynamo's order, and which of them are parameters or buffers (frozen)."""

    graph: Optional[torch.fx.GraphModule]
    static: list[int]
    # Why the graph goes through aot_autograd instead ("" when ``graph`` is set).
    reason: str = ""
    # Inputs the graph writes (a static KV cache's ``index_copy_``), in order: their new values
    # are the graph's last outputs, which the caller copies back into them after each call (as
    # AOT's runtime wrapper does; the plan may write them in place instead, then the copy is none).
    written: list[int] = dataclasses.field(default_factory=list)
    # (output position, input) pairs: Dynamo's graph returns that written input itself (a
    # counter it updates in place); the graph does not compute it twice, the caller returns the
    # input after its copy-back, as eager returns the same tensor.
    returns_written: list[tuple[int, int]] = dataclasses.field(default_factory=list)


def one_trace_wanted() -> bool:
    return os.environ.get("VERIFUSE_ONE_TRACE", "1") != "0"


def trace_inference_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                          decompositions: dict) -> OneTrace:
    """``gm``'s ATen graph from one trace, or the reason it needs aot_autograd."""
    reason = trace_problem(gm, example_inputs)
    if reason:
        return OneTrace(None, [], reason)
    fake_mode = _dynamo_fake_mode(gm)
    if fake_mode is None:
        return OneTrace(None, [], "Dynamo's fake tensors are not on the graph")
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx

    backend_mode = fake_mode
    # Functionalization (what turns writes into functional operators) costs ~30% of the trace and
    # changes nothing in a graph that writes nothing (the same code for every model of the hf
    # suite that has no write): a graph whose Dynamo spelling shows no write is traced without it
    # first, and traced again with it if the ATen graph holds a mutable operator after all.
    for functionalize in ((True,) if _dynamo_graph_may_write(gm) else (False, True)):
        # Dynamo's fakes again before a second trace: the first one may have changed their metadata.
        fakes, fake_mode = _fake_inputs(gm, example_inputs, backend_mode)
        written: list[int] = []
        refused: list[str] = []
        try:
            # Under Dynamo's fake mode the trace runs no kernel ("real": make_fx adds no fake mode
            # of its own); the Python dispatcher on and grad mode off, as AOT traces inference graphs.
            with fake_mode, torch.no_grad(), enable_python_dispatcher():
                traced = make_fx(_functionalized(gm, written, refused) if functionalize else gm,
                                 decomposition_table=decompositions, tracing_mode="real")(*fakes)
        except Exception as err:  # noqa: BLE001 - AOT then traces it the way it always has
            if functionalize:
                return OneTrace(None, [], f"the one-trace path failed: {type(err).__name__}: {err}")
            continue
        if refused:
            return OneTrace(None, [], refused[0])
        static = static_indices(gm)
        shared = _written_sharing_memory(example_inputs, written)
        if shared is not None:
            return OneTrace(None, [], f"the graph writes input {shared}, which shares memory with another input")
        if any(i in static for i in written):
            return OneTrace(None, [], f"the graph writes parameter/buffer input {next(i for i in written if i in static)}")
        returns_written = _returned_written_inputs(traced, written)
        reason = _aten_graph_problem(traced)
        if not reason:
            break
        if functionalize:
            return OneTrace(None, [], reason)
    # Outputs nobody reads (a layer norm's mean and rstd, a split's unused pieces): AOT's graph
    # does not have them either, and a saved graph must rebuild node for node from its code.
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return OneTrace(traced, static_indices(gm), written=written, returns_written=returns_written)


def _returned_written_inputs(traced: torch.fx.GraphModule, written: Sequence[int]) -> list[tuple[int, int]]:
    """Takes out of the graph's outputs those of Dynamo's own outputs that are a written input's
    new value again (Dynamo returns the input it updated in place): (their position among
    Dynamo's outputs, the input). The graph then returns its other outputs, then the new values."""
    if not written:
        return []
    output = next(n for n in reversed(traced.graph.nodes) if n.op == "output")
    outs = list(output.args[0])
    first = len(outs) - len(written)
    new_value_of = {outs[first + j]: inp for j, inp in enumerate(written)}
    pairs = [(j, new_value_of[o]) for j, o in enumerate(outs[:first]) if o in new_value_of]
    if pairs:
        returned = {j for j, _ in pairs}
        output.args = (tuple(o for j, o in enumerate(outs) if j not in returned),)
        traced.recompile()
    return pairs


def _written_sharing_memory(example_inputs: Sequence[Any], written: Sequence[int]) -> Optional[int]:
    """A written input whose storage another input shares (AOT's synthetic bases handle that)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    counts: dict = {}
    for t in example_inputs:
        key = StorageWeakRef(t.untyped_storage())
        counts[key] = counts.get(key, 0) + 1
    return next((i for i in written if counts[StorageWeakRef(example_inputs[i].untyped_storage())] > 1), None)


def trace_problem(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """Why ``gm`` cannot be traced this way (it goes through aot_autograd); "" when it can."""
    return _input_problem(example_inputs) or _dynamo_graph_problem(gm)


_WRITING_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                      operator.ixor, operator.ilshift, operator.irshift, operator.imatmul}


def _dynamo_graph_may_write(gm: torch.fx.GraphModule) -> bool:
    """Whether Dynamo's graph spells a write: an in-place method or function (a trailing ``_``),
    an in-place Python operator, ``out=`` or ``inplace=True``. A hint only, to skip a trace that
    would be repeated: the traced ATen graph's operators decide (``_aten_graph_problem``)."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        if node.kwargs.get("out") is not None or node.kwargs.get("inplace") is True:
            return True
        if node.op == "call_function" and getattr(node.target, "__module__", None) == "_operator":
            if node.target in _WRITING_OPERATORS:
                return True
            continue  # operator.and_, or_, not_, is_: a keyword's underscore, not a write
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        if isinstance(name, str) and name.endswith("_") and not name.endswith("__"):
            return True
        if isinstance(name, str) and (name == "__setitem__" or (name.startswith("__i") and name.endswith("__"))):
            return True  # (also __index__ and the like: a needless second trace at worst)
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
            return True
    return False


def _fake_inputs(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], backend_mode: Any) -> tuple[list, Any]:
    """The fake tensors the trace runs on and their mode: Dynamo's own (its placeholders' example
    values, in the fake mode Dynamo traced with) when they still describe the real inputs exactly,
    else fresh ones from the real tensors in the mode Dynamo made for the backend.

    Why: a model's parameters are inputs here, and converting BERT-base's 203 costs 30 ms in a
    warm process, its allocations bringing on a full garbage collection of a big process now and
    then (0.25 s when one fell into it). Dynamo makes the backend a fresh mode because its tracing may have changed a fake's
    metadata (``x.t_()``); comparing each fake with its real tensor (sizes, strides, offset,
    dtype, flags, which inputs share memory) is what that protects."""
    from torch.multiprocessing.reductions import StorageWeakRef

    values = [n.meta.get("example_value") for n in gm.graph.find_nodes(op="placeholder")]
    dynamo_mode = getattr(values[0], "fake_mode", None) if values else None
    if (dynamo_mode is not None and len(values) == len(example_inputs)
            and all(_describes(v, t, dynamo_mode) for v, t in zip(values, example_inputs))):
        # Inputs sharing memory must share it in the fakes too, and only those.
        real_groups: dict = {}
        fake_groups: dict = {}
        for i, (v, t) in enumerate(zip(values, example_inputs)):
            real_groups.setdefault(StorageWeakRef(t.untyped_storage()), []).append(i)
            fake_groups.setdefault(StorageWeakRef(v.untyped_storage()), []).append(i)
        if sorted(real_groups.values()) == sorted(fake_groups.values()):
            return values, dynamo_mode
    return [backend_mode.from_tensor(t, static_shapes=True) for t in example_inputs], backend_mode


def _describes(fake: Any, real: torch.Tensor, fake_mode: Any) -> bool:
    """Whether ``fake`` (a Dynamo example value) has ``real``'s metadata, sizes all static."""
    if not isinstance(fake, torch._subclasses.FakeTensor) or fake.fake_mode is not fake_mode:
        return False
    if not all(isinstance(s, int) for s in (*fake.shape, *fake.stride(), fake.storage_offset())):
        return False
    return (fake.dtype == real.dtype and fake.device == real.device and tuple(fake.shape) == tuple(real.shape)
            and fake.stride() == real.stride() and fake.storage_offset() == real.storage_offset()
            and fake.requires_grad == real.requires_grad and fake.layout == real.layout
            and fake.is_conj() == real.is_conj() and fake.is_neg() == real.is_neg())


def _functionalized(gm: torch.fx.GraphModule, written: list[int], refused: list[str]) -> Any:
    """``gm`` under AOT's functionalization (the Python FunctionalTensorMode): writes to
    intermediates become functional operators, views stay views. An input whose data the graph
    writes gets its new value as an extra output, after the graph's own (``written`` collects
    their indices; the caller copies them back, as AOT's wrapper does). A write to an input's
    metadata (``x.t_()``, ``resize_``) is what only AOT's wrapper replays: ``refused`` says so.

    (``torch.func.functionalize``, the C++ wrapper, is not the same: it hides contiguity from
    ``aten::linear``, which then becomes matmul + add instead of AOT's addmm.)"""
    from torch._functorch._aot_autograd.functional_utils import (from_fun, has_data_mutation,
                                                                 has_metadata_mutation, to_fun)
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    def run(*args: Any) -> Any:
        # Functionalize below Python only, as AOT does (Note [Disabling Functionalize TLS Above
        # Python Functionalization] in torch).
        above = torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))
        with above, FunctionalTensorMode():
            functional_args = [to_fun(a) for a in args]
            out = gm(*functional_args)
        new_values = []
        for i, (f_arg, arg) in enumerate(zip(functional_args, args)):
            if has_metadata_mutation(f_arg, arg, check_only_storage_mutation=False):
                refused.append(f"the graph changes input {i}'s metadata")
            elif has_data_mutation(f_arg):
                written.append(i)
                new_values.append(f_arg)
        out = torch.utils._pytree.tree_map(from_fun, out)
        if not new_values:
            return out
        if not isinstance(out, (tuple, list)):
            refused.append("the graph writes an input and returns a single value")
            return out
        return (*out, *(from_fun(v) for v in new_values))

    return run


def _input_problem(example_inputs: Sequence[Any]) -> str:
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            return f"input {i} is a {type(t).__name__} (symbolic sizes or Python scalars)"
        if type(t) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
            return f"input {i} is a tensor subclass ({type(t).__name__})"
    return ""


def _dynamo_graph_problem(gm: torch.fx.GraphModule) -> str:
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in value.shape):
                return "symbolic input sizes"
        elif node.op in ("get_attr", "call_module"):
            return f"the graph holds modules or tensors as attributes ({node.op} {node.target})"
        elif node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            return f"higher-order operator {node.target.name()}"
    return ""


def _dynamo_fake_mode(gm: torch.fx.GraphModule) -> Any:
    from torch._guards import detect_fake_mode

    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    return detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])


def _aten_graph_problem(traced: torch.fx.GraphModule) -> str:
    """Written inputs and aliased outputs: what AOT's runtime wrappers exist for. Checked on what
    the trace recorded, not on the Dynamo graph's spelling."""
    from torch.multiprocessing.reductions import StorageWeakRef

    inputs: set = set()
    for node in traced.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor):
                inputs.add(StorageWeakRef(value.untyped_storage()))
        elif node.op == "call_function":
            if isinstance(node.target, torch._ops.OpOverload):
                if node.target._schema.is_mutable:
                    return f"in-place operator {node.target.name()} after functionalization"
                if node.target is torch.ops.aten.native_batch_norm.default and node.args[5]:
                    # Its schema does not mark the running statistics as written.
                    return "batch norm in training mode (it updates its running statistics)"
            elif isinstance(node.target, torch._ops.HigherOrderOperator):
                return f"higher-order operator {node.target.name()}"
        elif node.op == "get_attr":
            # Tensors the traced code made (torch.tensor(...)) are real constants, as under AOT.
            if isinstance(getattr(traced, node.target, None), torch._subclasses.FakeTensor):
                return f"the trace made a fake constant ({node.target})"
        elif node.op == "output":
            outputs: set = set()
            outs = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
            for out in outs:
                if not isinstance(out, torch.fx.Node) or not isinstance(out.meta.get("val"), torch.Tensor):
                    return "an output is not a tensor the graph computes"
                if out.op == "placeholder":
                    return "an output is a graph input"
                storage = StorageWeakRef(out.meta["val"].untyped_storage())
                if storage in inputs:
                    return "an output is a view of a graph input"
                if storage in outputs:
                    return "two outputs share memory"
                outputs.add(storage)
    return ""


def static_indices(gm: torch.fx.GraphModule) -> list[int]:
    """The placeholders Dynamo marked as parameters or buffers (what aot_autograd reports as
    static input indices for the same graph)."""
    static = []
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        if node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type"):
            static.append(i)
    return static
