"""How Dynamo traces a frame whose backend is verifuse, so that ``dynamic=True`` gives one graph for
every batch size (issue 5).

Two things in Dynamo's tracing split a CNN's batch range into several graphs, and neither says
anything about the model:

1. **0/1 specialization.** A size that is 1 when the frame is traced becomes the constant 1, so
   batch 1 gets a graph of its own and batch 2 recompiles. ``backed_size_oblivious`` gives sizes the
   range ``[0, inf)`` instead and reasons about them without specializing; verifuse's own shape
   analysis (``verifuse.guards``) then finds that its plan assumes every size is at least 1 and adds
   that as a runtime guard (an empty batch runs eagerly, or raises under ``strict``).
2. **ATen's convolution heuristics.** To give a fake convolution output the memory format eager
   would produce, Dynamo's fake convolution asks ATen which kernel it would pick
   (``torch._C._select_conv_backend``); that choice compares the batch with 1 and 16 (oneDNN or
   the native kernel, by measured speed), and each comparison becomes a guard. Whatever kernel ATen
   picks, its output is contiguous when the input and the weight are both plainly contiguous (every
   backend's ``_conv_determine_backend_memory_format`` picks channels-last only when the input or
   the weight suggests channels-last, and exactly contiguous NCHW/NCDHW strides never do). So while
   verifuse traces, a convolution whose input and weight are exactly contiguous gets its contiguous
   output shape from the meta kernel without asking for the backend; anything else (channels-last,
   other strides, mkldnn tensors, the backward) goes to Dynamo's own implementation unchanged.

Both apply only while Dynamo compiles a frame for the verifuse backend: a compile-start callback
(``torch._dynamo.callback``) finds the backend of the compile it brackets and turns them on; the
compile-end callback turns them off. ``torch._dynamo.reset()`` clears every compile callback, so
verifuse registers its two again right after the handler's ``clear``. Dynamo compiles one frame at a time (its compile
lock), and both settings only change symbolic reasoning during tracing, so eager code and other
backends' compiles are unaffected. If a future torch changes how the backend can be found, nothing
is turned on and Dynamo's default tracing applies (more graphs, same results).

``VERIFUSE_SIZE_OBLIVIOUS_TRACING=0`` turns this off (Dynamo's default tracing for verifuse too).
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Optional

import torch

__all__ = ["install", "active", "enabled"]

_state = threading.local()
_installed = False
_install_lock = threading.Lock()


def enabled() -> bool:
    return os.environ.get("VERIFUSE_SIZE_OBLIVIOUS_TRACING", "1") != "0"


def active() -> bool:
    """Whether the current thread is tracing a frame for verifuse with these settings on."""
    return getattr(_state, "patch", None) is not None


def _unwrap_backend(fn: Any) -> Any:
    # WrapBackendDebug -> _TorchCompileWrapper (torch.compile) -> the registered backend function.
    for _ in range(8):
        inner = getattr(fn, "_torchdynamo_orig_backend", None)
        if inner is None and type(fn).__name__ == "_TorchCompileWrapper":
            inner = getattr(fn, "compiler_fn", None)
        if inner is None:
            inner = getattr(fn, "func", None) if type(fn).__name__ == "partial" else None
        if inner is None:
            return fn
        fn = inner
    return fn


def _compile_backend() -> Optional[Any]:
    """The backend of the Dynamo compile the calling callback brackets: the ``compiler_fn`` local
    of ``torch._dynamo.convert_frame._compile`` on this thread's stack."""
    frame = sys._getframe(1)
    for _ in range(64):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name == "_compile" and code.co_filename.endswith("convert_frame.py"):
            return frame.f_locals.get("compiler_fn")
        frame = frame.f_back
    return None


def _is_verifuse(fn: Any) -> bool:
    from .backend import verifuse_backend

    return _unwrap_backend(fn) is verifuse_backend


def _on_compile_start(_args: Any) -> None:
    if active() or not enabled():
        return
    try:
        if not _is_verifuse(_compile_backend()):
            return
        import torch.fx.experimental._config as fx_config

        patch = fx_config.patch(backed_size_oblivious=True)
        patch.__enter__()
        _state.patch = patch
    except Exception:  # noqa: BLE001 - finding the backend is best effort: default tracing applies
        _state.patch = None


def _on_compile_end(_args: Any) -> None:
    patch = getattr(_state, "patch", None)
    if patch is not None:
        _state.patch = None
        patch.__exit__(None, None, None)


def _exactly_contiguous(t: Any) -> bool:
    """Strides are exactly the contiguous ones for the sizes (provable without adding a guard)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if getattr(t, "is_mkldnn", False) or t.layout != torch.strided:
        return False
    expected: Any = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if not statically_known_true(stride == expected):
            return False
        expected = expected * size
    return True


def _wrap_fake_convolution() -> None:
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.operator_schemas import normalize_function

    aten = torch.ops.aten
    forward_ops = (aten.convolution.default, aten._convolution.default, aten._convolution.deprecated)
    for op in forward_ops:
        original = fake_impls.op_implementations_dict.get(op)
        if original is None or getattr(original, "_verifuse_wrapped", False):
            continue

        def convolution(fake_mode: Any, func: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if active():
                normalized = normalize_function(func, args, kwargs, normalize_to_only_use_kwargs=True)
                named = normalized.kwargs if normalized is not None else {}
                input_, weight = named.get("input"), named.get("weight")
                if (isinstance(input_, FakeTensor) and isinstance(weight, FakeTensor)
                        and input_.dim() in (3, 4, 5) and input_.dtype == weight.dtype
                        and _exactly_contiguous(input_) and _exactly_contiguous(weight)):
                    # Same as Dynamo's own path when sizes have no hint: the meta kernel's
                    # contiguous output, which is what every ATen backend returns here. Invalid
                    # shapes go to Dynamo's implementation, which raises ATen's own message.
                    try:
                        with fake_impls.in_kernel_invocation_manager(fake_mode):
                            out = func(*args, **kwargs)
                    except RuntimeError:
                        return _original(fake_mode, func, *args, **kwargs)
                    return FakeTensor(fake_mode, out, input_.fake_device)
            return _original(fake_mode, func, *args, **kwargs)

        convolution._verifuse_wrapped = True  # type: ignore[attr-defined]
        fake_impls.op_implementations_dict[op] = convolution


def _register_callbacks() -> None:
    from torch._dynamo.callback import callback_handler

    if _on_compile_start not in callback_handler.start_callbacks:
        callback_handler.register_start_callback(_on_compile_start)
    if _on_compile_end not in callback_handler.end_callbacks:
        callback_handler.register_end_callback(_on_compile_end)


def _keep_callbacks_across_reset() -> None:
    # torch._dynamo.reset() clears every compile callback (callback_handler.clear()); without this
    # the first compile after a reset would trace with Dynamo's defaults.
    from torch._dynamo.callback import callback_handler

    original_clear = callback_handler.clear
    if getattr(original_clear, "_verifuse_wrapped", False):
        return

    def clear() -> None:
        original_clear()
        _register_callbacks()

    clear._verifuse_wrapped = True  # type: ignore[attr-defined]
    callback_handler.clear = clear  # type: ignore[method-assign]


def install() -> None:
    """Registers the compile callbacks and the fake-convolution wrapper (idempotent)."""
    global _installed
    with _install_lock:
        if not _installed:
            _wrap_fake_convolution()
            _keep_callbacks_across_reset()
            _installed = True
        _register_callbacks()
