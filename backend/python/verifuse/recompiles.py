"""Dynamo's recompile limit, made visible.

Past ``torch._dynamo.config.recompile_limit`` recompilations of one frame (default 8; also
``accumulated_recompile_limit``, default 256), Dynamo stops compiling that frame and runs it in
eager mode from then on. It logs one warning on ``torch._dynamo.convert_frame`` (which users
often silence) and otherwise says nothing: a model served through verifuse would silently lose
verifuse. ``install()`` makes it reported when the frame was being compiled for verifuse:

* a ``RecompileLimitWarning`` (a ``VerifuseFallbackWarning``) naming the function, the limit and
  Dynamo's last recompile reason;
* the counter ``recompile_limit_hits`` in ``verifuse.stats()``;
* under ``options={"strict": True}`` a ``VerifuseError`` instead (strict turns every fallback into
  an error), which Dynamo propagates to the caller.

Detection: ``torch._dynamo.convert_frame.exceeds_recompile_limit`` (torch 2.13) is wrapped, so the
hit is seen whatever the logging configuration; if that function is missing (another torch), a
logging handler on ``torch._dynamo.convert_frame`` watches for the "hit config.*limit" warning
instead. Either way the backend is identified from ``compiler_fn`` of Dynamo's ``_compile``
frame on the stack; hits for other backends are left alone.
"""
from __future__ import annotations

import logging
import sys
import threading
import warnings
from typing import Any, Optional

from . import report as _report
from .backend import VerifuseError, VerifuseFallbackWarning

__all__ = ["RecompileLimitWarning", "install", "uninstall", "installed"]

_lock = threading.Lock()
_state: dict[str, Any] = {"mode": None, "orig": None, "handler": None}


class RecompileLimitWarning(VerifuseFallbackWarning):
    """Dynamo hit its recompile limit on a frame compiled for verifuse; that frame now runs eager."""


def _verifuse_options(compiler_fn: Any) -> Optional[dict]:
    """The verifuse options of a Dynamo compiler_fn (through its wrappers), or None when the
    backend is not verifuse."""
    from .backend import verifuse_backend

    fn, seen = compiler_fn, 0
    while fn is not None and seen < 8:
        seen += 1
        if fn is verifuse_backend or getattr(fn, "__wrapped__", None) is verifuse_backend:
            return {}
        name = getattr(fn, "compiler_name", None)
        if name == "verifuse":
            kwargs = getattr(fn, "kwargs", None) or {}
            return dict(kwargs.get("options") or {})
        if getattr(fn, "func", None) is verifuse_backend:  # functools.partial(verifuse_backend, options=...)
            return dict((getattr(fn, "keywords", None) or {}).get("options") or {})
        fn = getattr(fn, "_torchdynamo_orig_backend", None) or getattr(fn, "compiler_fn", None)
    return None


def _dynamo_compile_frame() -> tuple[Any, Any]:
    """(compiler_fn, code) of the innermost Dynamo ``_compile`` frame on this thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "_compile" and "compiler_fn" in frame.f_locals:
            locals_ = frame.f_locals
            return locals_.get("compiler_fn"), locals_.get("code")
        frame = frame.f_back
    return None, None


def _report_hit(limit_type: str, detail: str = "") -> None:
    compiler_fn, code = _dynamo_compile_frame()
    options = _verifuse_options(compiler_fn)
    if options is None:
        return
    import torch._dynamo.config as dynamo_config

    where = (f"'{code.co_name}' ({code.co_filename}:{code.co_firstlineno})" if code is not None else "a frame")
    limit = getattr(dynamo_config, limit_type, "?")
    message = (f"Dynamo hit torch._dynamo.config.{limit_type} ({limit}) on {where}; from now on "
               "that frame runs in eager mode, without verifuse, for inputs that match none of its "
               f"{limit} compiled graphs. Raise torch._dynamo.config.{limit_type}, or compile with "
               "dynamic=True to stop recompiling per input shape." + (f" {detail}" if detail else ""))
    _report.bump("recompile_limit_hits")
    from .options import Options

    try:
        strict = Options.parse(options).strict
    except Exception:
        strict = False
    if strict:
        raise VerifuseError(f"verifuse (strict): {message}")
    warnings.warn(f"verifuse: {message}", RecompileLimitWarning, stacklevel=2)


def _wrap_exceeds(orig: Any) -> Any:
    def exceeds_recompile_limit(*args: Any, **kwargs: Any) -> Any:
        result = orig(*args, **kwargs)
        try:
            exceeded, limit_type = result
        except (TypeError, ValueError):
            return result
        if exceeded:
            _report_hit(str(limit_type))
        return result

    exceeds_recompile_limit._verifuse_wrapped = orig  # type: ignore[attr-defined]
    return exceeds_recompile_limit


class _LimitLogHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        msg = str(record.msg)
        if "hit config." not in msg or "limit" not in msg:
            return
        limit_type = "recompile_limit"
        if record.args and isinstance(record.args, tuple):
            limit_type = str(record.args[0])
        _report_hit(limit_type)


def install() -> str:
    """Idempotent. Returns how the hit is detected: "wrap" or "log"."""
    with _lock:
        if _state["mode"] is not None:
            return _state["mode"]
        try:
            import torch._dynamo.convert_frame as convert_frame
        except Exception:  # no Dynamo: nothing to watch
            _state["mode"] = "none"
            return "none"
        orig = getattr(convert_frame, "exceeds_recompile_limit", None)
        if callable(orig):
            if getattr(orig, "_verifuse_wrapped", None) is None:
                convert_frame.exceeds_recompile_limit = _wrap_exceeds(orig)
                _state["orig"] = orig
            _state["mode"] = "wrap"
        else:
            handler = _LimitLogHandler()
            logging.getLogger("torch._dynamo.convert_frame").addHandler(handler)
            _state["handler"] = handler
            _state["mode"] = "log"
        return _state["mode"]


def uninstall() -> None:
    with _lock:
        if _state["mode"] == "wrap" and _state["orig"] is not None:
            import torch._dynamo.convert_frame as convert_frame

            convert_frame.exceeds_recompile_limit = _state["orig"]
        elif _state["mode"] == "log" and _state["handler"] is not None:
            logging.getLogger("torch._dynamo.convert_frame").removeHandler(_state["handler"])
        _state.update(mode=None, orig=None, handler=None)


def installed() -> Optional[str]:
    return _state["mode"]
