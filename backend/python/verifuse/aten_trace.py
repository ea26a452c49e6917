"""Dynamo's FX graph to an ATen inference graph in one trace, without aot_autograd.

aot_autograd traces a graph twice (once to collect its input/output metadata, once to make the
graph), and wraps the result in runtime wrappers that replay input mutations and regenerate
outputs that alias inputs. An inference graph that mutates none of its inputs and returns no
alias needs neither: one ``make_fx`` trace under Dynamo's own fake tensors and AOT's
functionalization, with the same decomposition table, gives the same ATen operators (in-place
operators on intermediates become their functional forms, as under AOT), and the compiled plan
can be called with Dynamo's arguments as they are. Measured on the Zen 4 VM, 1 thread, same
Dynamo graph, best of 3: BERT-base 0.44 s against AOT's 0.74 s, GPT-2 0.40 against 0.67, T5-small
0.29 against 0.51, ResNet-50 (transformers) 0.30 against 0.51; in a first compile AOT's share is
larger (its first call also imports it: BERT's first call 3.7 -> 2.8-3.1 s, warm caches).

Anything else goes through aot_autograd as before, and :func:`trace_inference_graph` says why:
tensor subclasses (torchao's quantized weights), symbolic sizes (``dynamic=True``), parameters
kept as graph attributes (inductor's freezing flag), higher-order operators, graphs that write an
input (functionalization records it; any operator left in the graph whose schema writes is
refused too), batch norm in training mode, and outputs that are inputs or views of inputs or of
each other.

``VERIFUSE_ONE_TRACE=0`` turns this off (every graph through aot_autograd).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.fx

__all__ = ["OneTrace", "one_trace_wanted", "trace_inference_graph"]


@dataclass
class OneTrace:
    """The result of :func:`trace_inference_graph`: an ATen graph whose placeholders are Dynamo's
    inputs in Dynamo's order, and which of them are parameters or buffers (frozen)."""

    graph: Optional[torch.fx.GraphModule]
    static: list[int]
    # Why the graph goes through aot_autograd instead ("" when ``graph`` is set).
    reason: str = ""


def one_trace_wanted() -> bool:
    return os.environ.get("VERIFUSE_ONE_TRACE", "1") != "0"


def trace_inference_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                          decompositions: dict) -> OneTrace:
    """``gm``'s ATen graph from one trace, or the reason it needs aot_autograd."""
    reason = _input_problem(example_inputs) or _dynamo_graph_problem(gm)
    if reason:
        return OneTrace(None, [], reason)
    fake_mode = _dynamo_fake_mode(gm)
    if fake_mode is None:
        return OneTrace(None, [], "Dynamo's fake tensors are not on the graph")
    from torch._dispatch.python import enable_python_dispatcher
    from torch.fx.experimental.proxy_tensor import make_fx

    fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in example_inputs]
    written: list[int] = []
    try:
        # Under Dynamo's fake mode the trace runs no kernel ("real": make_fx adds no fake mode of
        # its own); the Python dispatcher on and grad mode off, as AOT traces inference graphs.
        with fake_mode, torch.no_grad(), enable_python_dispatcher():
            traced = make_fx(_functionalized(gm, written), decomposition_table=decompositions,
                             tracing_mode="real")(*fakes)
    except Exception as err:  # noqa: BLE001 - AOT then traces it the way it always has
        return OneTrace(None, [], f"the one-trace path failed: {type(err).__name__}: {err}")
    if written:
        return OneTrace(None, [], f"the graph writes input {written[0]}")
    reason = _aten_graph_problem(traced)
    if reason:
        return OneTrace(None, [], reason)
    # Outputs nobody reads (a layer norm's mean and rstd, a split's unused pieces): AOT's graph
    # does not have them either, and a saved graph must rebuild node for node from its code.
    traced.graph.eliminate_dead_code()
    traced.recompile()
    return OneTrace(traced, _static_indices(gm))


def _functionalized(gm: torch.fx.GraphModule, written: list[int]) -> Any:
    """``gm`` under AOT's functionalization (the Python FunctionalTensorMode): writes to
    intermediates become functional operators, views stay views. A write to an input cannot be
    expressed without AOT's runtime wrapper, so the indices of written inputs are collected.

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
        for i, (f_arg, arg) in enumerate(zip(functional_args, args)):
            if has_data_mutation(f_arg) or has_metadata_mutation(f_arg, arg, check_only_storage_mutation=False):
                written.append(i)
        return torch.utils._pytree.tree_map(from_fun, out)

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


def _static_indices(gm: torch.fx.GraphModule) -> list[int]:
    """The placeholders Dynamo marked as parameters or buffers (what aot_autograd reports as
    static input indices for the same graph)."""
    static = []
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        if node.meta.get("tensor_dict", {}).get("_dynamo_static_input_type"):
            static.append(i)
    return static
