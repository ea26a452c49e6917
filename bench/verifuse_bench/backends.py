"""The backends the benchmark compares, each optional.

``eager`` (the reference), ``inductor`` (freezing on at trace time), ``inductor-nofreeze``,
``openvino`` (OpenVINO's ``torch.compile`` backend), ``zentorch`` (AMD's) and ``verifuse``.

Each backend is a :class:`BackendDef`: how to find out whether it can run here (never raising: a
missing package is *unavailable* with the reason), how to compile a model, and the context its
*first call* (Dynamo trace + backend compile) runs in. What each peer needs, and why, is written
next to it; bench/README.md has the method.

Tests add fake backends with ``BACKENDS[name] = BackendDef(...)``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

ALL_BACKENDS: tuple[str, ...] = ("eager", "inductor", "inductor-nofreeze", "inductor-max-autotune",
                                  "inductor-cpp-wrapper", "openvino", "zentorch", "verifuse")
# Inductor at its best: default with freezing, without it, max-autotune (its C++ GEMM templates
# timed against ATen's, with freezing) and cpp_wrapper (C++ instead of Python between kernels, with
# freezing); the "inductor" of the ratios and tables is the fastest accurate one of them.
INDUCTOR_VARIANTS: tuple[str, ...] = ("inductor", "inductor-nofreeze", "inductor-max-autotune", "inductor-cpp-wrapper")
PEERS: tuple[str, ...] = (*INDUCTOR_VARIANTS, "openvino", "zentorch")
# How the tables mark the variant that was the best inductor ("" for the default one).
INDUCTOR_VARIANT_MARKS: dict[str, str] = {"inductor": "", "inductor-nofreeze": "nf", "inductor-max-autotune": "ma",
                                          "inductor-cpp-wrapper": "cw"}
# Compile order inside one configuration. zentorch last: its compile sets
# torch._inductor.config.joint_custom_post_pass globally (we also patch it back, see below), and
# OpenVINO falls back to inductor's compile_fx for subgraphs it cannot convert.
COMPILE_ORDER: tuple[str, ...] = ("eager", "inductor", "inductor-nofreeze", "inductor-max-autotune",
                                   "inductor-cpp-wrapper", "verifuse", "openvino", "zentorch")
DISABLE_ENV = "VERIFUSE_BENCH_DISABLE"  # comma-separated backends to record as unavailable


@dataclass
class CompileCtx:
    """What a backend's compile hands to the harness."""

    compiled: Callable[..., Any]
    first_call: contextlib.AbstractContextManager  # entered around the first (compiling) call
    info: dict[str, Any] = field(default_factory=dict)
    after: Callable[[dict[str, Any]], None] | None = None  # called after the first call, fills info


@dataclass
class BackendDef:
    name: str
    availability: Callable[[], tuple[bool, str | None, dict[str, Any]]]  # (ok, reason, details)
    compile: Callable[[torch.nn.Module, Any, int], CompileCtx]  # (model, BenchOptions, threads)
    is_peer: bool = False
    uses_inductor_codegen: bool = False  # freezing evidence from generated code applies


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            # long messages keep their head and their tail: OpenVINO's "... Falling back to native
            # PyTorch execution." comes after a conversion report of many lines
            self.records.append((record.name, record.levelname,
                                 msg if len(msg) <= 500 else msg[:300] + " [...] " + msg[-200:]))
        except Exception:  # pragma: no cover
            pass


@contextlib.contextmanager
def capture_logs(logger_name: str, level: int = logging.DEBUG):
    """Collect a library's log records (without printing more than it would anyway)."""
    lg = logging.getLogger(logger_name)
    h = _Records()
    old_level, old_prop = lg.level, lg.propagate
    lg.addHandler(h)
    lg.setLevel(level)
    lg.propagate = False  # recorded into the results instead of printed
    try:
        yield h.records
    finally:
        lg.removeHandler(h)
        lg.setLevel(old_level)
        lg.propagate = old_prop


@contextlib.contextmanager
def capture_inductor_code(sink: list[str]):
    try:
        from unittest import mock

        from torch._inductor.graph import GraphLowering
    except Exception:  # pragma: no cover
        yield
        return
    with mock.patch.object(GraphLowering, "save_output_code", lambda code: sink.append(code)):
        yield


@contextlib.contextmanager
def no_graph_caches(mode: str):
    """"cold": no FX-graph / AOTAutograd cache hits, so every model is really compiled."""
    if mode != "cold":
        yield
        return
    import torch._inductor.config as ic

    with contextlib.ExitStack() as st:
        st.enter_context(ic.patch(fx_graph_cache=False))
        try:
            import torch._functorch.config as fc

            st.enter_context(fc.patch(enable_autograd_cache=False))
        except Exception:  # pragma: no cover
            pass
        yield


def _disabled(name: str) -> str | None:
    dis = {s.strip() for s in os.environ.get(DISABLE_ENV, "").split(",") if s.strip()}
    if name in dis:
        return f"disabled by {DISABLE_ENV}={os.environ.get(DISABLE_ENV)}"
    return None


def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# eager
# --------------------------------------------------------------------------------------------


def _eager_avail():
    return True, None, {}


def _eager_compile(model, opts, threads) -> CompileCtx:
    return CompileCtx(compiled=model, first_call=contextlib.nullcontext())


# --------------------------------------------------------------------------------------------
# inductor (freezing on / off)
# --------------------------------------------------------------------------------------------


def _inductor_avail():
    try:
        import torch._inductor.compile_fx  # noqa: F401
        from torch._inductor.async_compile import maybe_warm_pool

        maybe_warm_pool()
        return True, None, {"version": torch.__version__}
    except Exception as e:
        return False, f"inductor import failed: {type(e).__name__}: {e}", {}


def _make_inductor(freezing: bool, **extra: bool):
    def compile_(model, opts, threads) -> CompileCtx:
        import torch._inductor.config as ic

        # options= makes the inductor variants compare unequal, so Dynamo's BACKEND_MATCH guard
        # keeps their cache entries apart; the patch makes freezing (and max_autotune, cpp_wrapper)
        # visible at trace time (config is per-thread in torch 2.12+, read while inductor compiles).
        compiled = torch.compile(model, backend="inductor", dynamic=False, options={"freezing": freezing, **extra})
        info: dict[str, Any] = {}
        codes: list[str] = []
        info["_codes"] = codes

        @contextlib.contextmanager
        def first_call():
            # joint_custom_post_pass=None: zentorch sets this globally at its first compile and
            # never restores it; plain inductor must not run zentorch's passes.
            with ic.patch(freezing=freezing, joint_custom_post_pass=None, **extra), capture_inductor_code(codes), \
                    no_graph_caches(opts.inductor_cache), capture_logs("zentorch") as zlog:
                info["freezing_config_at_trace"] = bool(ic.freezing)
                for key in extra:
                    info[f"{key}_config_at_trace"] = bool(getattr(ic, key))
                info["grad_enabled_at_trace"] = torch.is_grad_enabled()
                info["joint_custom_post_pass_at_trace"] = (None if ic.joint_custom_post_pass is None
                                                           else repr(ic.joint_custom_post_pass))
                yield
            info["zentorch_log_records_during_compile"] = len(zlog)

        return CompileCtx(compiled=compiled, first_call=first_call(), info=info)

    return compile_


# --------------------------------------------------------------------------------------------
# verifuse
# --------------------------------------------------------------------------------------------


def _verifuse_avail():
    import_err = None
    details: dict[str, Any] = {}
    try:
        import verifuse  # noqa: F401

        details["version"] = getattr(verifuse, "__version__", None) or _version("verifuse")
    except Exception as e:
        import_err = f"import verifuse failed: {type(e).__name__}: {e}"
    try:
        from torch._dynamo import list_backends

        names = list_backends(exclude_tags=())
    except Exception as e:
        return False, f"torch._dynamo.list_backends failed: {e!r}", details
    if "verifuse" not in names:
        reason = "backend 'verifuse' is not registered with torch._dynamo"
        if import_err:
            reason += f" ({import_err})"
        return False, reason, details
    try:
        from torch._dynamo.backends.registry import lookup_backend

        lookup_backend("verifuse")  # loads the entry point; surfaces import errors here
    except Exception as e:
        return False, f"lookup_backend('verifuse') failed: {type(e).__name__}: {e}", details
    return True, None, details


def verifuse_stats() -> dict | None:
    try:
        import verifuse

        s = verifuse.stats()
        if hasattr(s, "to_dict"):
            s = s.to_dict()
        return dict(s) if isinstance(s, dict) else None
    except Exception:
        return None


@contextlib.contextmanager
def _verifuse_reports(enabled: bool):
    """verifuse's GraphReports of the graphs compiled inside the block (what verifuse.explain
    reads), or None when not ``enabled`` or this verifuse has no report collector."""
    if not enabled:
        yield None
        return
    try:
        from verifuse import report as _report

        cm = _report.collect()
    except Exception:
        yield None
        return
    with cm as graphs:
        yield graphs


_VERIFUSE_COLD_DIRS: dict[int, str] = {}


def new_verifuse_cold_cache_dir(opts) -> str:
    """A new, empty verifuse cache directory for the configuration about to run with ``opts``
    (harness.run_config asks at its start), removed when the process ends."""
    import atexit
    import shutil
    import tempfile

    d = _VERIFUSE_COLD_DIRS[id(opts)] = tempfile.mkdtemp(prefix="verifuse-cold-")
    atexit.register(shutil.rmtree, d, True)
    return d


def verifuse_cold_cache_dir(opts) -> str:
    """The current configuration's own verifuse cache directory (made on first use)."""
    return _VERIFUSE_COLD_DIRS.get(id(opts)) or new_verifuse_cold_cache_dir(opts)


def _verifuse_compile(model, opts, threads) -> CompileCtx:
    kwargs: dict[str, Any] = {"backend": "verifuse", "dynamic": False}
    options = dict(opts.verifuse_options or {})
    cold_dir = None
    if getattr(opts, "verifuse_cache", "default") == "cold" and "cache_dir" not in options:
        # Cold like the peers: no tuning decision, proof or plan from an earlier model or run (the
        # rule proofs made at install time seed it, as they seed every new cache directory).
        cold_dir = options["cache_dir"] = verifuse_cold_cache_dir(opts)
    if options:
        kwargs["options"] = options
    compiled = torch.compile(model, **kwargs)
    before = verifuse_stats()
    info: dict[str, Any] = {"verifuse_cache_dir": cold_dir} if cold_dir else {}

    @contextlib.contextmanager
    def first_call():
        # verifuse falls back to eager with one warning naming the reason: keep those warnings
        # (with the stats' graphs_fallback) in the results, and still show them
        import warnings

        int8 = getattr(opts, "dtype", "float32") == "int8"
        with warnings.catch_warnings(record=True) as caught, _verifuse_reports(int8) as graphs:
            warnings.simplefilter("always")
            yield
        if graphs is not None:
            # which ops the compiled graphs run (int8: verifuse::q* are its oneDNN int8 kernels)
            ops: dict[str, int] = {}
            for g in graphs:
                for op, n in (getattr(g, "ops", None) or {}).items():
                    ops[str(op)] = ops.get(str(op), 0) + int(n)
            info["int8_ops"] = {k: v for k, v in sorted(ops.items()) if k.startswith("verifuse::q")}
        fb = [f"{w.category.__name__}: {w.message}" for w in caught if str(w.message).startswith("verifuse")]
        if fb:
            info["fallback_warnings"] = fb[:5]
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    def after(info_: dict[str, Any]) -> None:
        now = verifuse_stats()
        if isinstance(now, dict) and isinstance(before, dict):
            info_["verifuse_stats_delta"] = {
                k: now[k] - before.get(k, 0) for k in now
                if isinstance(now[k], (int, float)) and now[k] != before.get(k, 0)}

    return CompileCtx(compiled=compiled, first_call=first_call(), info=info, after=after)


# --------------------------------------------------------------------------------------------
# OpenVINO
# --------------------------------------------------------------------------------------------
#
# * options={"aot_autograd": True}: without it, torch 2.13 fails with "sources must not be empty
#   for symbol sN".
# * config INFERENCE_PRECISION_HINT=f32 for float32 runs: on CPUs with avx512_bf16/AMX OpenVINO
#   infers in bf16 by default (then it is not the same computation as the others). For bfloat16
#   runs (--dtype bfloat16) the hint is bf16, so that OpenVINO computes in bf16 like the others.
# * bfloat16 runs: OpenVINO's torch.compile backend (2026.4) cannot take bf16 tensors: the input
#   dtype_mapping in openvino/frontend/pytorch/torchdynamo/compile.py has no torch.bfloat16, so
#   compiling raises KeyError ("OpenVINO execution failed with torch.bfloat16"), and then its
#   executor silently (debug log) runs the graph in PyTorch for good -- eager bf16 under OpenVINO's name. So OpenVINO gets the float32 upcast of the bf16 model
#   (the same bf16-rounded weights) and of the inputs, with the bf16 hint: OpenVINO's own way to
#   run bf16 inference (it converts to bf16 inside). The upcast of the inputs is in the timed call
#   (small next to a model). That runtime fallback is recorded for every run (ran_in_pytorch).
# * config INFERENCE_NUM_THREADS=<threads>: OpenVINO ignores torch.set_num_threads and uses every
#   core by default (measured here: BERT-base "1 thread" 221 ms, 375 ms once this was set).
# * Importing openvino's torch backend sets torch._dynamo.config.inline_inbuilt_nn_modules=False
#   process-wide; in torch 2.13 that flag is deprecated and ignored (always True), so it changes
#   nothing for the other backends. The harness does not touch it.
# * When a subgraph fails to convert, openvino silently (debug log) compiles it with inductor's
#   compile_fx instead; the harness captures that log and the partitioning (how many OpenVINO
#   subgraphs, which ops stayed in PyTorch) into the results.


def _openvino_avail():
    import warnings

    try:
        import openvino

        # its import reads a config flag torch 2.13 deprecated (a FutureWarning on every import)
        warnings.filterwarnings("ignore", message=".*inline_inbuilt_nn_modules is deprecated.*",
                                category=FutureWarning)

        import openvino.torch  # noqa: F401  (registers backend="openvino")
    except Exception as e:
        return False, f"openvino not importable: {type(e).__name__}: {e}", {}
    return True, None, {"version": getattr(openvino, "__version__", None)}


# int8: the quantized graph's float parts (everything between dequantize and quantize) in f32, as
# in eager; OpenVINO's int8 execution comes from the graph's quantize/dequantize pairs, not the hint
OPENVINO_PRECISION = {"float32": "f32", "bfloat16": "bf16", "int8": "f32"}


def openvino_precision(dtype: str) -> str:
    """OpenVINO's precision hint for a run: bf16 only where the tier has bf16 instructions (the
    capability model). On a tier without them OpenVINO infers bf16 models in f32 (what it does on
    a real AVX2 CPU), and in a capped run its own cpuid-based bf16 path would otherwise be taken
    against a capped oneDNN (empty or garbage outputs were seen that way)."""
    hint = OPENVINO_PRECISION[dtype]
    if hint == "bf16":
        try:
            from verifuse.env import capabilities

            if not capabilities()["onednn_native_bf16"]:
                return "f32"
        except ImportError:
            pass
    return hint


def openvino_options(threads: int, dtype: str = "float32") -> dict[str, Any]:
    return {"device": "CPU", "aot_autograd": True,
            "config": {"INFERENCE_PRECISION_HINT": openvino_precision(dtype), "INFERENCE_NUM_THREADS": str(threads)}}


OPENVINO_BF16_VIA = ("the float32 upcast of the bf16 model and inputs with INFERENCE_PRECISION_HINT=bf16 "
                     "(OpenVINO's torch.compile backend cannot take bfloat16 tensors)")


def _to_float32(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.float() if v.dtype == torch.bfloat16 else v
    if isinstance(v, (list, tuple)):
        return type(v)(_to_float32(t) for t in v)
    if isinstance(v, dict):
        return {k: _to_float32(t) for k, t in v.items()}
    return v


def _openvino_compile(model, opts, threads) -> CompileCtx:
    dtype = getattr(opts, "dtype", "float32")
    ov_opts = openvino_options(threads, dtype)
    info: dict[str, Any] = {"openvino_options": ov_opts}
    if dtype == "bfloat16":
        model = model.float()  # the harness's own deep copy; same bf16-rounded values
        info["bf16_via"] = OPENVINO_BF16_VIA
    compiled = torch.compile(model, backend="openvino", dynamic=False, options=ov_opts)
    call = compiled
    if dtype == "bfloat16":
        def call(*args, **kwargs):
            return compiled(*_to_float32(args), **_to_float32(kwargs))
    parts: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def first_call():
        from unittest import mock

        try:
            from openvino.frontend.pytorch.torchdynamo.partition import Partitioner
            orig = Partitioner.make_partitions
        except Exception:  # pragma: no cover
            Partitioner = orig = None

        def spy(self, graph_module, options):
            gm = orig(self, graph_module, options)
            ov, torch_ops = 0, {}
            for node in gm.graph.nodes:
                if node.op == "call_module" and "fused_" in node.name:
                    ov += 1
                elif node.op not in ("placeholder", "output", "get_attr"):
                    t = str(node.target)
                    torch_ops[t] = torch_ops.get(t, 0) + 1
            parts.append({"openvino_subgraphs": ov, "ops_left_to_pytorch": torch_ops})
            return gm

        with contextlib.ExitStack() as st:
            if orig is not None:
                st.enter_context(mock.patch.object(Partitioner, "make_partitions", spy))
            # its backend logger is pinned to WARNING; the fallback message is logged at DEBUG
            logs = st.enter_context(capture_logs("openvino.frontend.pytorch.torchdynamo.backend"))
            # a subgraph whose OpenVINO execution fails runs in PyTorch from then on (DEBUG log)
            run_logs = st.enter_context(capture_logs("openvino.frontend.pytorch.torchdynamo.execute"))
            yield
        fallback = [m for (_, _, m) in logs if "Failed in OpenVINO" in m]
        info["partitions"] = parts
        info["fell_back_to_inductor"] = len(fallback)
        if fallback:
            info["fallback_reasons"] = fallback[:5]
        in_pytorch = [m for (_, _, m) in run_logs
                      if "Falling back to native PyTorch" in m or m.startswith("OpenVINO execution failed")]
        info["ran_in_pytorch"] = len(in_pytorch)
        if in_pytorch:
            info["ran_in_pytorch_reasons"] = in_pytorch[:5]

    return CompileCtx(compiled=call, first_call=first_call(), info=info)


# --------------------------------------------------------------------------------------------
# zentorch
# --------------------------------------------------------------------------------------------
#
# * backend="zentorch" after `import zentorch`. It is inductor (compile_fx) plus ZenDNN operator
#   swaps installed as inductor's joint_custom_post_pass; it recommends freezing, so freezing is on
#   at trace time as for "inductor".
# * Its compile sets torch._inductor.config.joint_custom_post_pass globally and never restores it:
#   the harness compiles zentorch last and wraps its first call in
#   ic.patch(joint_custom_post_pass=None), which puts the old value back afterwards.
# * zentorch's optimize() returns the graph untouched, with the warning "ZenTorch optimization is
#   only available on CPUs with AVX-512 support.", when zentorch._C.is_avx512_supported() is False.
#   The harness records that check and the log records of the compile, so a result on a CPU
#   without AVX-512 says that zentorch ran as inductor + freezing (+ its conv-bn folding) there.
# * Threads: the generated code is inductor's (OpenMP, thread count from torch.get_num_threads()
#   at compile time), so torch.set_num_threads is respected; cpu_utilization in the results shows it.


ZENTORCH_NO_AVX512_NOTE = ("no AVX-512 on this CPU: zentorch skips all of its graph optimizations "
                           "(ZenDNN ops, fusions, weight prepacking; it logs 'ZenTorch optimization is only "
                           "available on CPUs with AVX-512 support.') and what runs is inductor with "
                           "freezing plus its conv+bn folding")


def _zentorch_avail():
    try:
        t0 = time.perf_counter()
        zentorch = importlib.import_module("zentorch")
        details: dict[str, Any] = {"version": getattr(zentorch, "__version__", None) or _version("zentorch"),
                                   "import_s": time.perf_counter() - t0}
    except Exception as e:
        return False, f"zentorch not importable: {type(e).__name__}: {e}", {}
    try:
        avx512 = bool(zentorch._C.is_avx512_supported())
        details["avx512_supported"] = avx512
        if not avx512:
            details["note"] = ZENTORCH_NO_AVX512_NOTE
    except Exception as e:  # pragma: no cover
        details["avx512_supported"] = None
        details["avx512_check_error"] = repr(e)
    return True, None, details


def _zentorch_compile(model, opts, threads) -> CompileCtx:
    import torch._inductor.config as ic

    compiled = torch.compile(model, backend="zentorch", dynamic=False)
    info: dict[str, Any] = {}
    codes: list[str] = []
    info["_codes"] = codes

    @contextlib.contextmanager
    def first_call():
        with ic.patch(freezing=True, joint_custom_post_pass=None), capture_inductor_code(codes), \
                no_graph_caches(opts.inductor_cache), capture_logs("zentorch", logging.INFO) as zlog:
            info["freezing_config_at_trace"] = bool(ic.freezing)
            info["grad_enabled_at_trace"] = torch.is_grad_enabled()
            yield
            info["joint_custom_post_pass_set_by_compile"] = (None if ic.joint_custom_post_pass is None
                                                             else repr(ic.joint_custom_post_pass))
        info["joint_custom_post_pass_after_restore"] = (None if ic.joint_custom_post_pass is None
                                                        else repr(ic.joint_custom_post_pass))
        info["zentorch_log"] = [f"{lvl} {name}: {msg}" for (name, lvl, msg) in zlog][:20]
        skipped = any("only available on CPUs with AVX-512" in m for (_, _, m) in zlog)
        ran = any("Optimizing the fx_graph with zentorch ops" in m for (_, _, m) in zlog)
        info["zentorch_optimize"] = "skipped: no AVX-512" if skipped else ("ran" if ran else "unknown")
        if skipped:
            info["note"] = ZENTORCH_NO_AVX512_NOTE

    return CompileCtx(compiled=compiled, first_call=first_call(), info=info)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

BACKENDS: dict[str, BackendDef] = {
    "eager": BackendDef("eager", _eager_avail, _eager_compile),
    "inductor": BackendDef("inductor", _inductor_avail, _make_inductor(True), is_peer=True,
                           uses_inductor_codegen=True),
    "inductor-nofreeze": BackendDef("inductor-nofreeze", _inductor_avail, _make_inductor(False), is_peer=True,
                                    uses_inductor_codegen=True),
    "inductor-max-autotune": BackendDef("inductor-max-autotune", _inductor_avail,
                                        _make_inductor(True, max_autotune=True), is_peer=True,
                                        uses_inductor_codegen=True),
    "inductor-cpp-wrapper": BackendDef("inductor-cpp-wrapper", _inductor_avail,
                                       _make_inductor(True, cpp_wrapper=True), is_peer=True,
                                       uses_inductor_codegen=True),
    "openvino": BackendDef("openvino", _openvino_avail, _openvino_compile, is_peer=True),
    "zentorch": BackendDef("zentorch", _zentorch_avail, _zentorch_compile, is_peer=True,
                           uses_inductor_codegen=True),
    "verifuse": BackendDef("verifuse", _verifuse_avail, _verifuse_compile),
}


def known_backends() -> tuple[str, ...]:
    return tuple(BACKENDS)


def compile_order(names: list[str]) -> list[str]:
    rank = {n: i for i, n in enumerate(COMPILE_ORDER)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank) - 1.5), names.index(n)))


def availability(name: str) -> tuple[bool, str | None, float | None, dict[str, Any]]:
    """(available, reason if not, import seconds, details). Never raises."""
    if name not in BACKENDS:
        return False, f"unknown backend {name!r}; known: {', '.join(BACKENDS)}", None, {}
    why = _disabled(name)
    if why:
        return False, why, None, {}
    t0 = time.perf_counter()
    try:
        ok, reason, details = BACKENDS[name].availability()
    except Exception as e:  # pragma: no cover - availability functions catch their own errors
        ok, reason, details = False, f"{type(e).__name__}: {e}", {}
    return ok, reason, (time.perf_counter() - t0) if ok else None, details
