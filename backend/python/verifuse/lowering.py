"""Lowering: an ATen inference FX graph (from aot_autograd) to the C++ IR.

Every call_function node becomes one IR node whose arguments are normalized to the operator
schema's order (kwargs placed, defaults filled in), so the C++ side never needs Python's calling
conventions. Frozen parameters/buffers become constants that reference the real tensors (no copy).
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch
import torch.fx

from . import _C

__all__ = ["LoweredGraph", "LoweringError", "lower_graph", "readable_name"]


class LoweringError(Exception):
    """A node or value the IR cannot express; the graph falls back."""

    def __init__(self, node: str, reason: str):
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


# c10::ScalarType, c10::Layout and c10::MemoryFormat numbering (checked against torch in tests).
DTYPE_CODES = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.complex32: 8,
    torch.complex64: 9, torch.complex128: 10, torch.bool: 11, torch.bfloat16: 15,
}
LAYOUT_CODES = {torch.strided: 0, torch.sparse_coo: 1}
MEMORY_FORMAT_CODES = {
    torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
    torch.channels_last_3d: 3,
}

# Python-level operators Dynamo leaves in graphs for SymInt arithmetic -> executor builtins.
PYTHON_BUILTINS = {
    operator.add: "_operator::add", operator.sub: "_operator::sub", operator.mul: "_operator::mul",
    operator.floordiv: "_operator::floordiv", operator.mod: "_operator::mod",
    operator.truediv: "_operator::truediv", operator.pow: "_operator::pow",
    operator.neg: "_operator::neg", operator.eq: "_operator::eq", operator.ne: "_operator::ne",
    operator.lt: "_operator::lt", operator.le: "_operator::le", operator.gt: "_operator::gt",
    operator.ge: "_operator::ge", torch.sym_max: "verifuse::sym_max",
    torch.sym_min: "verifuse::sym_min", torch.sym_float: "verifuse::sym_float",
    torch.sym_int: "verifuse::sym_int", torch.sym_not: "verifuse::sym_not",
}

# Quantization ops whose scale argument (index 1) the lowering checks (issue 17).
QUANTIZE_OPS = ("quantized_decomposed::quantize_per_tensor", "quantized_decomposed::dequantize_per_tensor",
                "quantized_decomposed::quantize_per_channel", "quantized_decomposed::dequantize_per_channel")

# Operators that would make the executor's result differ from eager's by construction.
NONDETERMINISTIC_OPS = ("aten::native_dropout", "aten::bernoulli", "aten::rand", "aten::randn",
                        "aten::randint", "aten::rand_like", "aten::randn_like", "aten::normal",
                        "aten::uniform", "aten::randperm", "aten::multinomial", "aten::dropout")


@dataclass
class LoweredGraph:
    graph: Any  # _C.Graph
    input_arg_index: list[int]
    frozen: list[tuple[int, int]]  # (argument index, constant id)
    num_args: int
    constant_names: list[str] = field(default_factory=list)


_SOURCE_PIECE = re.compile(r"\[['\"]([^'\"]+)['\"]\]|\.([A-Za-z_][A-Za-z0-9_]*)")


def readable_name(source_name: Optional[str], fallback: str) -> str:
    """``L['self']._modules['conv']._parameters['weight']`` -> ``conv.weight``."""
    if not source_name:
        return _sanitize(fallback)
    parts = []
    for quoted, attr in _SOURCE_PIECE.findall(source_name):
        piece = quoted or attr
        if piece in ("self", "_modules", "_parameters", "_buffers") or piece.startswith("L"):
            continue
        parts.append(piece)
    return _sanitize(".".join(parts) if parts else fallback)


def _sanitize(name: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.]", "_", name).strip("_") or "v"
    return name if not name[0].isdigit() else "v" + name


def _value_type(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return "Tensor"
    if isinstance(val, (bool, torch.SymBool)):
        return "Bool"
    if isinstance(val, (int, torch.SymInt)):
        return "Int"
    if isinstance(val, (float, torch.SymFloat)):
        return "Float"
    if val is None:
        return "None"
    return "Other"


def _return_type(t: torch._C.JitType) -> str:
    s = str(t)
    if s.startswith("Tensor") or s == "Optional[Tensor]":
        return "Tensor"
    return {"int": "Int", "SymInt": "Int", "float": "Float", "SymFloat": "Float", "bool": "Bool"}.get(s, "Other")


class _GraphSpec:
    """The graph being lowered, kept in Python and handed to C++ in one call (_C.build_graph):
    one pybind crossing per graph instead of one per node, argument and value. Mirrors the
    _C.Graph methods the lowering uses, value ids assigned as C++ assigns them (inputs and node
    outputs in creation order). Arguments are (kind, payload) tuples: ("v", value id), ("c", constant
    id), ("n", None), ("b", bool), ("i", int), ("r", float), ("s", str), ("t", dtype code), ("l",
    layout code), ("m", memory format code), ("d", device), ("L", [arguments])."""

    def __init__(self) -> None:
        self.constants: list[tuple[str, torch.Tensor]] = []
        self.records: list[tuple] = []
        self.outputs: list[tuple] = []
        self.num_values = 0

    def add_constant(self, name: str, tensor: torch.Tensor) -> int:
        self.constants.append((name, tensor))
        return len(self.constants) - 1

    def add_input(self, name: str, vtype: str) -> int:
        self.records.append(("input", name, vtype))
        self.num_values += 1
        return self.num_values - 1

    def add_node(self, op: str, overload: str, args: list, out_types: list[str]) -> list[int]:
        self.records.append(("node", op, overload, args, out_types))
        first = self.num_values
        self.num_values += len(out_types)
        return list(range(first, self.num_values))

    def set_shape(self, vid: int, sizes: list[int]) -> None:
        self.records.append(("shape", vid, sizes))

    def set_dtype(self, vid: int, code: int) -> None:
        self.records.append(("dtype", vid, code))

    def set_sym_shape(self, vid: int, sizes: list, strides: Optional[list]) -> None:
        self.records.append(("sym_shape", vid, sizes, strides))

    def set_sym_value(self, vid: int, term: Any) -> None:
        self.records.append(("sym_value", vid, term))

    def set_outputs(self, outputs: list) -> None:
        self.outputs = outputs

    def build(self) -> Any:
        """The _C.Graph, verified."""
        return _C.build_graph(self.constants, self.records, self.outputs)


class _Lowerer:
    def __init__(self, gm: torch.fx.GraphModule, real_inputs: Sequence[Any], frozen_indices: set[int],
                 input_names: Sequence[str], shape_facts: Any = None):
        self.gm = gm
        self.real_inputs = real_inputs
        self.frozen_indices = frozen_indices
        self.input_names = input_names
        self.shape_facts = shape_facts  # guards.ShapeFacts: names the size symbols (dynamic shapes)
        self.g = _GraphSpec()
        self.env: dict[torch.fx.Node, Any] = {}  # node -> an argument tuple (_GraphSpec), or list of value ids
        self.used_names: set[str] = set()
        self.constant_names: list[str] = []
        self.frozen_tensors: dict[torch.fx.Node, torch.Tensor] = {}  # frozen placeholder -> its tensor

    def unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.used_names:
            k += 1
            name = f"{base}_{k}"
        self.used_names.add(name)
        return name

    def add_constant(self, name: str, tensor: torch.Tensor) -> int:
        name = self.unique(name)
        self.constant_names.append(name)
        return self.g.add_constant(name, tensor)

    def lower(self) -> LoweredGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        input_arg_index: list[int] = []
        frozen: list[tuple[int, int]] = []
        for i, ph in enumerate(placeholders):
            name = self.input_names[i] if i < len(self.input_names) else ph.name
            real = self.real_inputs[i] if i < len(self.real_inputs) else None
            if i in self.frozen_indices and isinstance(real, torch.Tensor):
                cid = self.add_constant(name, real)
                self.env[ph] = ("c", cid)
                self.frozen_tensors[ph] = real
                frozen.append((i, cid))
            else:
                val = ph.meta.get("val", real)
                vtype = _value_type(val)
                if vtype in ("Other", "None"):
                    raise LoweringError(ph.name, f"graph input of unsupported type {type(val).__name__}")
                vid = self.g.add_input(self.unique(name), vtype)
                self.record_shape(vid, val)
                self.env[ph] = ("v", vid)
                input_arg_index.append(i)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                attr = _fetch_attr(self.gm, node.target)
                if not isinstance(attr, torch.Tensor):
                    raise LoweringError(node.name, f"get_attr of a {type(attr).__name__}")
                self.env[node] = ("c", self.add_constant(_sanitize(node.target), attr))
            elif node.op == "call_function":
                self.lower_call(node)
            elif node.op == "output":
                outs = node.args[0]
                if not isinstance(outs, (tuple, list)):
                    outs = (outs,)
                self.g.set_outputs([self.to_arg(o, node) for o in outs])
            else:
                raise LoweringError(node.name, f"unsupported FX node kind {node.op}")
        return LoweredGraph(self.g.build(), input_arg_index, frozen, len(placeholders), self.constant_names)

    def record_shape(self, vid: int, val: Any) -> None:
        """Gives the C++ side the tensor's sizes: ints, -1 where a size is symbolic, and under
        dynamic shapes each symbolic size (and the strides) as an expression over the size
        symbols; an Int value gets its symbolic value."""
        facts = self.shape_facts
        if isinstance(val, torch.SymInt):
            if facts is not None and _constant(val) is None:
                term = facts.term(val)
                if term is not None:
                    self.g.set_sym_value(vid, term)
            return
        if not isinstance(val, torch.Tensor):
            return
        if val.dtype in DTYPE_CODES:
            self.g.set_dtype(vid, DTYPE_CODES[val.dtype])
        known = [_constant(d) for d in val.shape]
        sizes = [k if k is not None else -1 for k in known]
        if facts is None:
            self.g.set_shape(vid, sizes)
            return
        try:
            strides = list(val.stride())
        except (RuntimeError, NotImplementedError):  # layouts without strides
            strides = None
        if all(k is not None for k in known) and all(_constant(s) is not None for s in strides or ()):
            self.g.set_shape(vid, sizes)
            return
        sym_sizes = [k if k is not None else facts.term(d) for k, d in zip(known, val.shape)]
        sym_strides = None
        if strides is not None:
            sym_strides = [_constant(s) if _constant(s) is not None else facts.term(s) for s in strides]
            if any(s is None for s in sym_strides):
                sym_strides = None
        self.g.set_sym_shape(vid, sym_sizes, sym_strides)

    def lower_call(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            src, index = node.args
            produced = self.env.get(src)
            if not isinstance(produced, list):
                raise LoweringError(node.name, "getitem on a value that is not a tuple or list")
            self.env[node] = ("v", produced[index])
            return
        if target in PYTHON_BUILTINS:
            args = [self.to_arg(a, node) for a in node.args]
            if node.kwargs:
                raise LoweringError(node.name, f"{target} with keyword arguments")
            (vid,) = self.g.add_node(PYTHON_BUILTINS[target], "", args, [_value_type(node.meta.get("val"))])
            self.record_shape(vid, node.meta.get("val"))
            self.env[node] = ("v", vid)
            return
        if not isinstance(target, torch._ops.OpOverload):
            raise LoweringError(node.name, f"unsupported call target {getattr(target, '__name__', target)!r}")
        schema = target._schema
        qualified = schema.name  # "aten::convolution"
        if qualified in NONDETERMINISTIC_OPS:
            raise LoweringError(node.name, f"random operator {qualified} (dropout or sampling in training mode?)")
        if schema.is_mutable:
            raise LoweringError(node.name, f"operator {qualified}.{schema.overload_name} mutates its inputs")
        if qualified in QUANTIZE_OPS:
            self.check_quantization_scale(node, qualified)
        args = []
        for k, sarg in enumerate(schema.arguments):
            if k < len(node.args) and not sarg.kwarg_only:
                value = node.args[k]
            elif sarg.name in node.kwargs:
                value = node.kwargs[sarg.name]
            elif sarg.has_default_value():
                value = sarg.default_value
            else:
                raise LoweringError(node.name, f"{qualified}: missing argument {sarg.name}")
            # A scalar given for a fixed-size list argument (int[2] padding=0) is repeated.
            if isinstance(value, int) and not isinstance(value, bool) and str(sarg.type).startswith("List[") and sarg.N:
                value = [value] * sarg.N
            args.append(self.to_arg(value, node))
        returns = schema.returns
        if len(returns) == 1 and str(returns[0].type).startswith("List["):
            val = node.meta.get("val")
            if not isinstance(val, (list, tuple)):
                raise LoweringError(node.name, f"{qualified} returns a list of unknown length")
            out_types = ["Tensor"] * len(val)
        else:
            out_types = [_return_type(r.type) for r in returns]
        ids = self.g.add_node(qualified, schema.overload_name, args, out_types)
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        for vid, v in zip(ids, vals):
            self.record_shape(vid, v)
        if len(returns) == 1 and not str(returns[0].type).startswith("List["):
            self.env[node] = ("v", ids[0])
        else:
            self.env[node] = list(ids)

    def check_quantization_scale(self, node: torch.fx.Node, qualified: str) -> None:
        """A quantize/dequantize whose scale is 0, negative, NaN or infinite has no integer meaning
        (quantize divides by it): the graph is refused, so eager runs it and gives its own result
        or error, instead of the int8 rules or kernels seeing it."""
        scale = node.args[1] if len(node.args) > 1 else node.kwargs.get("scale", node.kwargs.get("scales"))
        if isinstance(scale, torch.fx.Node):
            scale = self.frozen_tensors.get(scale) if scale.op == "placeholder" else (
                _fetch_attr(self.gm, scale.target) if scale.op == "get_attr" else None)
        if isinstance(scale, torch.Tensor):
            bad = scale.numel() > 0 and not bool(torch.all(torch.isfinite(scale) & (scale > 0)))
        elif isinstance(scale, (int, float)):
            bad = not (math.isfinite(scale) and scale > 0)
        else:
            return
        if bad:
            raise LoweringError(node.name, f"{qualified} with scale {scale if not isinstance(scale, torch.Tensor) else 'tensor'}"
                                           " that is zero, negative, NaN or infinite: no integer meaning")

    def to_arg(self, v: Any, node: torch.fx.Node) -> Any:
        if isinstance(v, torch.fx.Node):
            arg = self.env.get(v)
            if arg is None:
                raise LoweringError(node.name, f"uses {v.name}, which was not lowered")
            if isinstance(arg, list):
                raise LoweringError(node.name, f"uses the tuple {v.name} without getitem")
            return arg
        if v is None:
            return ("n", None)
        if isinstance(v, bool):
            return ("b", v)
        if isinstance(v, int):
            return ("i", v)
        if isinstance(v, float):
            return ("r", v)
        if isinstance(v, str):
            return ("s", v)
        if isinstance(v, torch.dtype):
            if v not in DTYPE_CODES:
                raise LoweringError(node.name, f"dtype {v}")
            return ("t", DTYPE_CODES[v])
        if isinstance(v, torch.layout):
            if v not in LAYOUT_CODES:
                raise LoweringError(node.name, f"layout {v}")
            return ("l", LAYOUT_CODES[v])
        if isinstance(v, torch.memory_format):
            return ("m", MEMORY_FORMAT_CODES[v])
        if isinstance(v, torch.device):
            if v.type != "cpu":
                raise LoweringError(node.name, f"device {v}")
            return ("d", str(v))
        if isinstance(v, (list, tuple)):
            return ("L", [self.to_arg(e, node) for e in v])
        if isinstance(v, torch.Tensor):
            return ("c", self.add_constant(f"{node.name}_literal", v))
        raise LoweringError(node.name, f"argument of unsupported type {type(v).__name__}")


def _constant(v: Any) -> Optional[int]:
    """A size as an int when it is one (an int, or a SymInt with a constant value), else None."""
    if isinstance(v, int):
        return int(v)
    try:
        known = v.node.maybe_as_int()
    except Exception:  # noqa: BLE001 - not a SymInt
        return None
    return int(known) if known is not None else None


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for piece in target.split("."):
        obj = getattr(obj, piece)
    return obj


def lower_graph(gm: torch.fx.GraphModule, real_inputs: Sequence[Any], frozen_indices: set[int],
                input_names: Sequence[str] = (), shape_facts: Any = None) -> LoweredGraph:
    """Lowers an ATen FX graph. Placeholders at \\p frozen_indices become constants bound to
    ``real_inputs[i]``; the rest stay runtime inputs. ``shape_facts`` (guards.ShapeFacts, dynamic
    shapes) names the size symbols, so symbolic sizes reach the IR as expressions. Raises
    LoweringError on anything the IR cannot express."""
    return _Lowerer(gm, real_inputs, frozen_indices, input_names, shape_facts).lower()  # verified by build_graph

