"""The ATen trace of a Dynamo graph, kept in ``cache_dir`` for the next process (issue 40).

With a warm plan cache a first call still paid verifuse's ATen trace (``make_fx`` under fake
tensors: ~1 s of a ResNet-50's or BERT-base's first call, more than the plan's replay) and the
first build of the decomposition table. The trace is a function of what this module keys it by,
so the next process that compiles the same Dynamo graph for the same inputs reads the ATen graph
back instead of tracing it again; the lowering and the plan cache then proceed as after a trace
(the plan cache keys by the lowered graph and the weights' contents, and replays only a plan made
for both).

The key is everything the trace reads:

- Dynamo's graph node by node: op, name, target by qualified name, and the arguments with node
  references. A graph whose targets are not torch's, Python's operators or builtins (a user
  function allowed in the graph, whose body may have changed), or whose arguments are not plain
  data, is not cached: it is traced as before.
- each input's dtype, device, shape, strides, storage offset, whether it requires grad, whether
  Dynamo marked it as a parameter or buffer (frozen), and which inputs share storage;
- torch's version, the default dtype, and the verifuse build and Python sources that trace
  (the decomposition table lives in them).

A record is one file, ``cache_dir/traces-v1/<key>.pt``: a SHA-256 of its body, then the body:
the graph as JSON (node by node, saved.py's encoding), then the tensors the trace made, if any
(``torch.save``, read back with ``weights_only=True``): nothing in a record runs code on load. Written to a temporary file and renamed into place, so a reader sees a whole record or none
(a process killed mid-write leaves a temporary file, removed by a later write after a minute). A
record that does not read back whole (truncated, another format, a checksum that does not match)
is a miss: the graph is traced and the record written again.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import time
from typing import Any, Optional, Sequence

import torch
import torch.fx

__all__ = ["trace_key", "load_trace", "store_trace"]

_FORMAT = "verifuse-trace-v1"
_DIR = "traces-v1"
_MAX_ATTR_BYTES = 64 << 20  # constants the trace made (torch.tensor(...) in a model): small
_TEMP_GRACE_SECONDS = 60

# Where a graph's call_function targets may come from for its trace to be a function of their name.
_KNOWN_MODULES = ("torch", "_operator", "operator", "builtins", "math")


class _NotCacheable(Exception):
    pass


@functools.lru_cache(maxsize=1)
def _build_identity() -> str:
    """The verifuse build and the Python sources whose code the trace runs, by content."""
    from . import _C, __version__

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in ("aten_trace.py", "backend.py", "saved.py", "trace_cache.py"):
        try:
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"missing " + name.encode())
    try:
        st = os.stat(_C.__file__)
        build = f"{st.st_size}-{st.st_mtime_ns}"
    except OSError:
        build = "unknown"
    return f"verifuse={__version__}+{build};sources={h.hexdigest()[:16]}"


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return "method:" + target
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return "op:" + str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        raise _NotCacheable(f"higher-order operator {target.name()}")
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or ""
    if not qualname or module.split(".")[0] not in _KNOWN_MODULES:
        raise _NotCacheable(f"a call of {target!r} (not torch's: its body may differ next time)")
    if "<locals>" not in qualname:
        return f"py:{module}.{qualname}"
    # A function torch makes at import (F.max_pool2d is boolean_dispatch's closure choosing between
    # two functions by an argument): named by its name and what it closes over.
    cells = getattr(target, "__closure__", None) or ()
    return f"py:{module}.{qualname}/{getattr(target, '__name__', '')}({','.join(_cell_text(c) for c in cells)})"


def _cell_text(cell: Any) -> str:
    value = cell.cell_contents
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if callable(value) and not getattr(value, "__closure__", None):
        return _target_name(value)
    raise _NotCacheable(f"a torch function closing over a {type(value).__name__}")


def _input_text(t: torch.Tensor, static: bool, alias: int) -> str:
    return (f"{t.dtype}/{t.device}/{tuple(t.shape)}/{tuple(t.stride())}/{t.storage_offset()}/"
            f"grad={t.requires_grad}/static={static}/alias={alias}")


def trace_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], static: Sequence[int]) -> Optional[str]:
    """The key of ``gm``'s ATen trace for these inputs, or None when it is not cacheable."""
    from .saved import _encode_arg, _Unsavable

    try:
        parts = [_FORMAT, _build_identity(), f"torch={torch.__version__}", f"default_dtype={torch.get_default_dtype()}",
                 f"one_trace={os.environ.get('VERIFUSE_ONE_TRACE', '1')}"]
        storages: dict = {}
        static_set = set(static)
        for i, t in enumerate(example_inputs):
            if not isinstance(t, torch.Tensor):
                raise _NotCacheable(f"input {i} is not a tensor")
            ptr = t.untyped_storage().data_ptr()
            alias = storages.setdefault(ptr, i) if t.untyped_storage().nbytes() else i
            parts.append("input " + _input_text(t, i in static_set, alias))
        index: dict = {}
        for i, node in enumerate(gm.graph.nodes):
            if node.op not in ("placeholder", "call_function", "call_method", "output"):
                raise _NotCacheable(f"a {node.op} node")
            target = _target_name(node.target) if node.op in ("call_function", "call_method") else str(node.target)
            # saved.py's encoding of arguments (node references by index, plain data as itself);
            # repr is exact for floats and tells True from 1 and -0.0 from 0.0.
            parts.append(f"{node.op} {node.name} {target} {_encode_arg(tuple(node.args), index)!r} "
                         f"{_encode_arg(dict(node.kwargs), index)!r}")
            index[node] = i
    except (_NotCacheable, _Unsavable):
        return None
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:32]


def _path(cache_dir: str, key: str) -> str:
    return os.path.join(cache_dir, _DIR, key + ".pt")


def load_trace(cache_dir: str, key: str) -> Optional[tuple[torch.fx.GraphModule, list[int], list[int], list]]:
    """The ATen graph, its static input indices, the inputs it writes and the written inputs
    Dynamo's graph returns (OneTrace.written, .returns_written) stored under ``key``; None on a
    miss or a record that does not read back whole."""
    from .saved import _rebuild_graph_module

    try:
        with open(_path(cache_dir, key), "rb") as f:
            data = f.read()
    except OSError:
        return None
    if len(data) < 40 or hashlib.sha256(data[32:]).digest() != data[:32]:
        return None
    try:
        size = int.from_bytes(data[32:40], "little")
        record = json.loads(data[40:40 + size].decode("utf-8"))
        if record.get("format") != _FORMAT or record.get("key") != key:
            return None
        tensors = data[40 + size:]
        record["attrs"] = torch.load(io.BytesIO(tensors), weights_only=True) if tensors else {}
        return (_rebuild_graph_module(record), [int(i) for i in record["static"]],
                [int(i) for i in record.get("written", [])],
                [(int(j), int(i)) for j, i in record.get("returns_written", [])])
    except Exception:  # noqa: BLE001 - a record that does not rebuild is a miss, never an error
        return None


def store_trace(cache_dir: str, key: str, gm: torch.fx.GraphModule, static: Sequence[int],
                written: Sequence[int] = (), returns_written: Sequence[tuple[int, int]] = ()) -> bool:
    """Writes the record (whole or not at all); False when the graph cannot be stored."""
    from .saved import _Unsavable, _encode_graph, _graph_spec

    try:
        nodes, attrs = _encode_graph(gm)
        specs = _graph_spec(gm)
    except _Unsavable:
        return False
    if sum(t.numel() * t.element_size() for t in attrs.values()) > _MAX_ATTR_BYTES:
        return False
    # The graph as JSON (the encoding is plain lists, strings and numbers; Python's json writes
    # nan and inf and reads them back, and floats round-trip exactly); the tensors with torch.save.
    text = json.dumps({"format": _FORMAT, "key": key, "nodes": nodes, "graph": specs, "static": list(static),
                       "written": list(written), "returns_written": [list(p) for p in returns_written]},
                      separators=(",", ":")).encode("utf-8")
    tensors = b""
    if attrs:
        buffer = io.BytesIO()
        torch.save(attrs, buffer)
        tensors = buffer.getvalue()
    body = len(text).to_bytes(8, "little") + text + tensors
    directory = os.path.join(cache_dir, _DIR)
    try:
        os.makedirs(directory, exist_ok=True)
        _remove_stale_temporaries(directory)
        temp = os.path.join(directory, f".tmp.{key}.{os.getpid()}.{time.monotonic_ns()}")
        with open(temp, "wb") as f:
            f.write(hashlib.sha256(body).digest())
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, _path(cache_dir, key))
    except OSError:
        return False  # an unwritable cache only costs the trace next time
    return True


def _remove_stale_temporaries(directory: str) -> None:
    """Temporary files of writers that died before their rename (older than a minute: a live
    writer renames within milliseconds)."""
    now = time.time()
    try:
        for entry in os.scandir(directory):
            if entry.name.startswith(".tmp.") and now - entry.stat().st_mtime > _TEMP_GRACE_SECONDS:
                os.unlink(entry.path)
    except OSError:
        pass
