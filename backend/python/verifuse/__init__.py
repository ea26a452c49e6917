"""verifuse: a torch.compile backend for CPU inference that proves its rewrites with Z3.

    compiled = torch.compile(model.eval(), backend="verifuse")   # no import needed

Importing verifuse is only needed for ``explain``, ``profile`` and ``stats``.
"""
from __future__ import annotations

import time
from typing import Any

from .backend import VerifuseError, VerifuseFallbackWarning, verifuse_backend
from .options import Options, OptionsError
from .profile import ProfileReport, profile
from .report import Report, reset_stats, stats
from .saved import VerifusePlanWarning, load, save

__all__ = ["verifuse_backend", "explain", "profile", "ProfileReport", "stats", "reset_stats", "Report", "Options", "OptionsError",
           "VerifuseError", "VerifuseFallbackWarning", "VerifusePlanWarning", "save", "load"]
__version__ = "0.1.0"


def _register() -> None:
    # pip installs register "verifuse" through the torch_dynamo_backends entry point; register by
    # hand only when running from a source tree, or lookup_backend's own registration would hit
    # the duplicate-name assert.
    from torch._dynamo import list_backends
    from torch._dynamo.backends.registry import register_backend

    if "verifuse" not in list_backends(exclude_tags=()):
        register_backend(compiler_fn=verifuse_backend, name="verifuse")


_register()

from . import recompiles as _recompiles  # noqa: E402  (Dynamo's recompile limit is reported, not silent)

_recompiles.install()

from . import dynamic_tracing as _dynamic_tracing  # noqa: E402  (dynamic=True: one graph for batch 1..N)

_dynamic_tracing.install()


def explain(model: Any, *example_inputs: Any, dynamic: "bool | None" = None, verbose: bool = False,
            **options: Any) -> Report:
    """Compiles ``model`` with verifuse, runs it once on ``example_inputs`` under no_grad, and
    returns what happened: graphs, fusions, partitions, proofs, fallbacks, compile time, and with
    ``dynamic=True`` the shape guards (Dynamo's, the plan's assumptions, the ones verifuse added).
    ``verbose=True``: ``str(report)`` also lists the near misses (a rule's op matched, one of its
    guards refused, and why)."""
    import torch

    from . import report as _report

    Options.parse(options)
    compiled = torch.compile(model, backend="verifuse", dynamic=dynamic, options=dict(options) or None)
    start = time.perf_counter()
    with _report.collect() as graphs, torch.no_grad():
        compiled(*example_inputs)
    elapsed = time.perf_counter() - start
    compile_seconds = sum(g.compile_seconds for g in graphs) if graphs else elapsed
    return Report(list(graphs), compile_seconds, verbose=verbose)
