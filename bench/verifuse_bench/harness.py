"""Benchmark harness: eager vs inductor (freezing on / off) vs OpenVINO vs zentorch vs verifuse.

The method (bench/README.md has it in full):

* One configuration = model x batch x threads. With ``isolate=True`` (the CLI's default) every
  configuration runs in its own Python process (``verifuse_bench.worker``); the parent only
  orchestrates, writes one JSON file per configuration (so a partial run is never lost and
  ``--resume`` skips what is done) and merges them into the report.
* Inside a configuration every backend compiles its own ``copy.deepcopy`` of the model, in a fixed
  order (zentorch last), with **no** ``torch._dynamo.reset()`` between backends: a reset makes the
  earlier backends' compiled functions recompile on their next call (inductor then silently
  loses freezing). Everything runs under ``torch.no_grad()``, static shapes, in the run's dtype
  (``dtype``: float32, or bfloat16 = ``model.to(torch.bfloat16)`` and its floating-point inputs;
  see :func:`apply_dtype`).
* inductor: freezing set *while it traces*, in the tracing thread, and verified from the
  generated code; ``inductor-nofreeze`` the same with freezing off. "inductor" in the ratios is the
  better of the two per configuration; both raw rows are kept.
* Compile time = the first call. Warm-up calls follow right after it (untimed). Latency is
  measured round-robin: each round runs every backend ``chunk`` times, the order rotating every
  round; GC off while timing; median and p90 per backend.
* Per backend: max abs / rel error against eager, Dynamo graph count and graph breaks, recompiles
  while timing, CPU utilisation while timing (process CPU time / wall time: ~1.0 per thread used),
  and memory: RSS growth over its compile + warm-up and the process peak RSS during them (the
  peak is reset before each backend through /proc/self/clear_refs); ``memory="isolated"`` adds a
  separate process per backend that builds the model, compiles only that backend and reports its
  own peak RSS.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import gc
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import torch

from . import backends as _bk
from .backends import ALL_BACKENDS, BACKENDS, INDUCTOR_VARIANTS, PEERS, compile_order
from .suites import BenchModel, Inputs, get_model

SCHEMA = "verifuse-bench/2"
KNOWN_BACKENDS: tuple[str, ...] = ALL_BACKENDS
DEFAULT_BACKENDS: tuple[str, ...] = ALL_BACKENDS
QUICK_BACKENDS: tuple[str, ...] = ("eager", "inductor", "verifuse")


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


@dataclass
class BenchOptions:
    models: list[str]
    backends: list[str] = field(default_factory=lambda: list(DEFAULT_BACKENDS))
    batches: list[int] | None = None  # None: each model's default batches
    threads: list[int] = field(default_factory=lambda: [1])
    iters: int = 30  # timed iterations per backend and configuration
    warmup: int = 3  # untimed iterations per backend right after its compile call
    chunk: int = 1  # iterations per backend per round (round-robin alternation; verdicts pair rounds)
    time_budget_s: float = 60.0  # per configuration; stops rounds early (>= min_iters kept)
    min_iters: int = 5
    seed: int = 0
    inductor_cache: str = "cold"  # "cold": fresh cache dir, no FX-graph/AOTAutograd cache hits
    # "cold": verifuse compiles each configuration into its own empty cache_dir (no tuning decision,
    # proof or plan from an earlier model: what the peers get), and once the timing is over compiles
    # again in the same process from that directory (compile_warm_s: its tuning database and plan
    # cache warm); "default": the user's default cache directory, as before.
    verifuse_cache: str = "cold"
    verifuse_options: dict[str, Any] | None = None
    quick: bool = False
    suite: str | None = None  # informational (models are already resolved)
    isolate: bool = False  # one subprocess per configuration (the CLI's default)
    resume: bool = False  # isolate only: reuse finished per-configuration files
    config_timeout_s: float = 3600.0  # isolate only: a configuration process is killed after this
    memory: str = "inprocess"  # "inprocess" | "isolated" (adds one process per backend)
    recompile_limit: int = 64  # Dynamo's per-frame limit; every backend adds cache entries
    plot: bool = True
    dtype: str = "float32"  # "float32" | "bfloat16": model.to(dtype), floating-point inputs too

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchOptions":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# --------------------------------------------------------------------------------------------
# dtype
# --------------------------------------------------------------------------------------------

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# "int8" is not a cast but the float32 model quantized with PT2E: model_for_dtype, quant.py (issue 17)
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "int8": "int8"}


def dtype_tag(dtype: str | None) -> str:
    """Suffix of file names and labels: "" for float32 (the names every float32 result already
    has), "-bf16" for bfloat16, "-int8" for int8."""
    return "" if (dtype or "float32") == "float32" else "-" + DTYPE_SHORT[dtype]


def cast_inputs(inputs: Inputs, dtype: torch.dtype) -> Inputs:
    """The same call with every floating-point tensor (also inside lists, e.g. a KV cache) in
    ``dtype``; integer tensors (token ids, position ids, integer masks) are left as they are."""
    def cast(v):
        if isinstance(v, torch.Tensor):
            return v.to(dtype) if v.is_floating_point() else v
        if isinstance(v, (list, tuple)):
            return type(v)(cast(t) for t in v)
        return v

    return Inputs(tuple(cast(a) for a in inputs.args), {k: cast(v) for k, v in inputs.kwargs.items()})


def apply_dtype(model: torch.nn.Module, inputs: Inputs, dtype: str) -> tuple[torch.nn.Module, Inputs]:
    """``model.to(dtype)`` (parameters and floating-point buffers) and the inputs cast likewise.
    The model is built (and its BatchNorm statistics calibrated) in float32 first."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if dtype == "float32":
        return model, inputs
    return model.to(DTYPES[dtype]), cast_inputs(inputs, DTYPES[dtype])


@dataclass
class RunModel:
    """What the backends of one configuration get: ``model`` and ``inputs`` in the run's dtype;
    for int8 also the float32 model it was quantized from and how (quant.py)."""

    model: torch.nn.Module
    inputs: Inputs
    float_model: torch.nn.Module | None = None
    quant_info: dict[str, Any] | None = None


def model_for_dtype(bm: BenchModel, model: torch.nn.Module, inputs: Inputs, dtype: str, batch: int,
                    seed: int) -> RunModel:
    """float32 / bfloat16: :func:`apply_dtype`. int8: the PT2E-quantized GraphModule (the same one
    for every backend) and the inputs as every backend gets them (channels-last images)."""
    if dtype == "int8":
        from .quant import quantize_int8

        gm, q_inputs, info = quantize_int8(bm, model, inputs, batch, seed)
        return RunModel(gm, q_inputs, float_model=model, quant_info=info)
    m, i = apply_dtype(model, inputs, dtype)
    return RunModel(m, i)


def _tensor_dtypes(model: torch.nn.Module, inputs: Inputs) -> tuple[dict[str, int], dict[str, str]]:
    params: dict[str, int] = {}
    for p in model.parameters():
        k = str(p.dtype).replace("torch.", "")
        params[k] = params.get(k, 0) + 1
    ins: dict[str, str] = {}
    for i, a in enumerate(inputs.args):
        if isinstance(a, torch.Tensor):
            ins[f"arg{i}"] = str(a.dtype).replace("torch.", "")
    for k, v in inputs.kwargs.items():
        if isinstance(v, torch.Tensor):
            ins[k] = str(v.dtype).replace("torch.", "")
        elif isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v):
            ins[k] = ",".join(sorted({str(t.dtype).replace("torch.", "") for t in v}))
    return params, ins


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------

_ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx_vnni",
              "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def _cpuinfo() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # first processor is enough
                if ":" in line:
                    k, v = line.split(":", 1)
                    out.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return out


def _cpu_model() -> str:
    return _cpuinfo().get("model name") or platform.processor() or "unknown"


def _cpu_flags() -> list[str]:
    flags = set(_cpuinfo().get("flags", "").split())
    return [fl for fl in _ISA_FLAGS if fl in flags]


def _microarch(info: dict[str, str]) -> str | None:
    vendor = info.get("vendor_id", "")
    try:
        fam, mod = int(info.get("cpu family", "")), int(info.get("model", ""))
    except ValueError:
        return None
    if vendor == "AuthenticAMD":
        if fam == 0x17:
            return "Zen/Zen 2"
        if fam == 0x19:
            return "Zen 4" if (0x10 <= mod <= 0x1F or 0x60 <= mod <= 0x7F or 0xA0 <= mod <= 0xAF) else "Zen 3"
        if fam == 0x1A:
            return "Zen 5"
    return None


def isa_summary(flags: list[str]) -> str:
    f = set(flags)
    parts = ["AVX2" if "avx2" in f else "no AVX2"]
    if "fma" in f:
        parts[0] += "+FMA"
    parts.append("AVX-512" if "avx512f" in f else "no AVX-512")
    parts.append("AVX512-BF16" if "avx512_bf16" in f else "no AVX512-BF16")
    parts.append("VNNI" if ("avx512_vnni" in f or "avx_vnni" in f) else "no VNNI")
    parts.append("AMX" if "amx_tile" in f else "no AMX")
    return ", ".join(parts)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _git_commit() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None
    except Exception:
        return None


def _tier() -> dict[str, Any] | None:
    try:
        from verifuse.env import capabilities
    except ImportError:
        return None
    caps = capabilities()
    return {k: caps[k] for k in ("tier", "cpu_tier", "cap", "cap_source", "onednn_isa", "summary")}


def environment_info() -> dict[str, Any]:
    ci = _cpuinfo()
    flags = _cpu_flags()
    info: dict[str, Any] = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_vendor": ci.get("vendor_id"),
        "cpu_family": ci.get("cpu family"),
        "cpu_model_number": ci.get("model"),
        "cpu_microarch": _microarch(ci),
        "hypervisor": "hypervisor" in ci.get("flags", "").split(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": flags,
        "avx512": "avx512f" in flags,
        "isa_summary": isa_summary(flags),
        "load_avg": load_average(),
        "torch_num_threads_default": torch.get_num_threads(),
        "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
        "mkl_available": bool(torch.backends.mkl.is_available()),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "git_commit": _git_commit(),
        # The tier the run measured (verifuse's capability model: the CPU's own, or capped by
        # VERIFUSE_MAX_ISA), and the caps the peers saw: ONEDNN_MAX_CPU_ISA reaches oneDNN in
        # torch, OpenVINO and verifuse; ATEN_CPU_CAPABILITY eager's kernels and inductor's code.
        "tier": _tier(),
        "isa_caps": {k: os.environ[k] for k in ("VERIFUSE_MAX_ISA", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                 "MKL_ENABLE_INSTRUCTIONS")
                     if os.environ.get(k)},
    }
    try:
        import torch._inductor.config as ic

        info["inductor_compile_threads"] = ic.compile_threads
        info["inductor_cpp_weight_prepack"] = ic.cpp.weight_prepack
    except Exception as e:  # pragma: no cover
        info["inductor_config_error"] = repr(e)
    return info


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------


def _percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = (len(sorted_vals) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def latency_stats(samples_ms: list[float]) -> dict[str, float | int]:
    s = sorted(samples_ms)
    n = len(s)
    mean = sum(s) / n if n else float("nan")
    var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
    return {
        "n": n,
        "median": _percentile(s, 0.5),
        "p90": _percentile(s, 0.9),
        "p10": _percentile(s, 0.1),
        "mean": mean,
        "min": s[0] if s else float("nan"),
        "max": s[-1] if s else float("nan"),
        "stdev": math.sqrt(var),
    }


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# --------------------------------------------------------------------------------------------
# Memory (Linux /proc; None elsewhere)
# --------------------------------------------------------------------------------------------


def _status_mb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def rss_mb() -> float | None:
    return _status_mb("VmRSS")


def peak_rss_mb() -> float | None:
    return _status_mb("VmHWM")


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _threads_now() -> int | None:
    v = _status_mb("Threads")
    return None if v is None else int(round(v * 1024))


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    name: str
    status: str  # "ok" | "unavailable" | "failed"
    fn: Callable[[], Any] | None = None
    reason: str | None = None
    compile_s: float | None = None
    dynamo_s: float | None = None  # of compile_s: Dynamo's own tracing (outside the backend)
    first_output: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    call: Callable[..., Any] | None = None  # the compiled callable (int8: top-1 on extra inputs)


_AVAILABILITY_CACHE: dict[str, tuple[bool, str | None, float | None]] = {}
_AVAILABILITY_DETAILS: dict[str, dict[str, Any]] = {}


def backend_availability(name: str) -> tuple[bool, str | None, float | None]:
    """(available, reason if not, one-time import seconds). Never raises; cached per process."""
    if name not in _AVAILABILITY_CACHE:
        ok, reason, import_s, details = _bk.availability(name)
        _AVAILABILITY_CACHE[name] = (ok, reason, import_s)
        _AVAILABILITY_DETAILS[name] = details
    return _AVAILABILITY_CACHE[name]


def backend_details(name: str) -> dict[str, Any]:
    return dict(_AVAILABILITY_DETAILS.get(name, {}))


def _dynamo_counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items()}


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def _counter_delta(before: dict, after: dict, group: str) -> dict[str, int]:
    b = before.get(group, {})
    a = after.get(group, {})
    return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}


@contextlib.contextmanager
def fresh_inductor_cache_dir(enabled: bool):
    """One empty inductor cache directory for the whole run/process (removed afterwards)."""
    if not enabled:
        yield None
        return
    d = tempfile.mkdtemp(prefix="verifuse-bench-inductor-")
    try:
        try:
            from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
        except Exception:  # pragma: no cover - older torch
            temporary_cache_dir = None
        if temporary_cache_dir is not None:
            with temporary_cache_dir(d):
                yield d
        else:  # pragma: no cover
            old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
            try:
                yield d
            finally:
                if old is None:
                    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
                else:
                    os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
    finally:
        shutil.rmtree(d, ignore_errors=True)


_BACKEND_CACHE_DIRS: list[str] = []


@contextlib.contextmanager
def _backend_cache_dir(name: str):
    """A fresh inductor cache directory (and empty in-memory code caches) for one backend's
    compile. Kept until the process ends: compiled kernels stay loaded from it."""
    try:
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    except Exception:  # pragma: no cover
        yield
        return
    parent = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or None
    d = tempfile.mkdtemp(prefix=f"{name}-", dir=parent)
    if parent is None:
        _BACKEND_CACHE_DIRS.append(d)
    with temporary_cache_dir(d):
        yield


def _remove_backend_cache_dirs() -> None:
    for d in _BACKEND_CACHE_DIRS:
        shutil.rmtree(d, ignore_errors=True)


import atexit  # noqa: E402

atexit.register(_remove_backend_cache_dirs)


def inductor_warmup() -> float:
    """Compile a trivial function once, so that one-time costs (C++ prefix header, worker pool)
    are not charged to the first model's compile time. Returns its wall time. Runs before any
    backend of a configuration is compiled (the reset here never hits a compiled model)."""
    import torch._inductor.config as ic

    t0 = time.perf_counter()
    torch._dynamo.reset()
    f = torch.compile(lambda a: torch.relu(a * 2.0 + 1.0), backend="inductor", dynamic=False)
    with torch.no_grad(), ic.patch(joint_custom_post_pass=None):
        f(torch.randn(16))
    torch._dynamo.reset()
    return time.perf_counter() - t0


_FROZEN_RE = re.compile(r"_frozen_param\d+")
_ONEDNN_OP_RE = re.compile(r"torch\.ops\.(?:mkldnn|mkl|onednn)\.(\w+)")
_ZENTORCH_OP_RE = re.compile(r"torch\.ops\.zentorch\.(\w+)")


def analyze_inductor_code(codes: list[str]) -> dict[str, Any]:
    """Evidence that freezing happened, from inductor's generated wrapper code."""
    frozen: set[str] = set()
    ops: dict[str, int] = {}
    zops: dict[str, int] = {}
    for c in codes:
        frozen.update(_FROZEN_RE.findall(c))
        for op in _ONEDNN_OP_RE.findall(c):
            ops[op] = ops.get(op, 0) + 1
        for op in _ZENTORCH_OP_RE.findall(c):
            zops[op] = zops.get(op, 0) + 1
    out = {"frozen_params": len(frozen), "onednn_ops": ops, "onednn_op_calls": sum(ops.values()),
           # int8 runs: inductor's X86 int8 lowering (qconv/qlinear on oneDNN); empty = it did not apply
           "int8_ops": {k: v for k, v in ops.items() if k.startswith("q")},
           "code_captured": len(codes),
           # evidence that set_num_threads held at compile time: inductor emits no OpenMP parallel
           # region at all when it compiles for 1 thread (with more, the regions use the OpenMP
           # default, which torch.set_num_threads sets)
           "omp_parallel_regions": sum(c.count("#pragma omp parallel") for c in codes)}
    if zops:
        out["zentorch_ops"] = zops
    return out


def _call_fn(compiled: Callable, inputs: Inputs) -> Callable[[], Any]:
    args, kwargs = inputs.args, inputs.kwargs

    def fn():
        return compiled(*args, **kwargs)

    return fn


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """ATen's fused CPU attention (what SDPA dispatches to on CPU): the two products q·kᵀ and p·v,
    2 FLOPs per multiply-add, as torch counts its CUDA attention ops; the flop counter has no
    formula for the CPU op, so attention counted 0 (Whisper's 1500-token attention is ~40% of
    its FLOPs)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _count_flops(fn: Callable[[], Any]) -> tuple[Any, float | None]:
    try:
        from torch.utils.flop_counter import FlopCounterMode

        custom = {}
        op = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
        if op is not None:
            custom[op] = _cpu_attention_flops
        with FlopCounterMode(display=False, custom_mapping=custom) as fc:
            out = fn()
        return out, fc.get_total_flops() / 1e9
    except Exception:
        return fn(), None


OPENVINO_INT8_NOT_RUN = ("OpenVINO could not convert the quantized graph and its executor ran it in PyTorch "
                         "(eager) instead: not an OpenVINO int8 result")


def int8_evidence(name: str, info: dict[str, Any]) -> None:
    """int8 runs: whether the backend ran int8 kernels, from its own evidence (inductor / zentorch:
    oneDNN qconv/qlinear calls in the generated code; verifuse: verifuse::q* ops in its graphs;
    OpenVINO: whether its executor fell back to PyTorch). A peer that did not run the quantized
    graph itself gets ``int8_not_run`` (the reason) and is left out of the best peer."""
    if name == "eager":
        return
    fz = info.get("freezing")
    if isinstance(fz, dict) and "int8_ops" in fz:
        info["int8_kernels"] = bool(fz["int8_ops"])
        if name == "zentorch" and not fz.get("zentorch_ops"):
            info["int8_note"] = ("no zentorch ops in the generated code: the int8 kernels are inductor's "
                                 "(oneDNN qconv/qlinear via its X86 int8 lowering)" if fz["int8_ops"] else
                                 "no zentorch ops and no int8 kernels in the generated code")
    elif name == "verifuse" and "int8_ops" in info:
        info["int8_kernels"] = bool(info["int8_ops"])
    if name == "openvino" and info.get("ran_in_pytorch"):
        info["int8_kernels"] = False
        info["int8_not_run"] = OPENVINO_INT8_NOT_RUN
    elif name == "openvino" and info.get("fell_back_to_inductor"):
        info["int8_note"] = "OpenVINO failed on the graph and compiled it with inductor's compile_fx instead"


# Dynamo's timers (torch._dynamo.utils.compilation_time_metrics): the whole frame compile, and
# the backend call inside it. Their difference is Dynamo's own tracing, the same work for every
# backend; it bounds how small any backend's compile time (the first call) can get.
_DYNAMO_FRAME = "_compile.compile_inner"
_DYNAMO_BACKEND = "OutputGraph.call_user_compiler"


def _dynamo_timers() -> dict[str, float]:
    try:
        from torch._dynamo.utils import compilation_time_metrics as m
    except Exception:  # noqa: BLE001 - the timers are internal; without them no split is reported
        return {}
    return {k: float(sum(m.get(k, ()))) for k in (_DYNAMO_FRAME, _DYNAMO_BACKEND)}


def _dynamo_trace_s(before: dict[str, float], after: dict[str, float]) -> float | None:
    if not before or not after:
        return None
    frame = after[_DYNAMO_FRAME] - before[_DYNAMO_FRAME]
    backend = after[_DYNAMO_BACKEND] - before[_DYNAMO_BACKEND]
    return max(0.0, frame - backend) if frame > 0 else None


def prepare_backend(name: str, model: torch.nn.Module, inputs: Inputs, opts: BenchOptions, threads: int,
                    heartbeat: Callable[[str, str | None], None] | None = None) -> Prepared:
    """Compile one backend on its own deep copy of the model: first call (= compile time), then
    the warm-up calls; memory, graphs and backend evidence recorded. Never raises."""
    avail, reason, _ = backend_availability(name)
    if not avail:
        return Prepared(name, "unavailable", reason=reason)
    if name not in BACKENDS:
        return Prepared(name, "unavailable", reason=f"unknown backend {name!r}")
    bdef = BACKENDS[name]
    if heartbeat:
        heartbeat("compile", name)
    m = model if name == "eager" else copy.deepcopy(model)
    gc.collect()
    mem: dict[str, Any] = {"rss_before_mb": rss_mb()}
    mem["peak_reset"] = reset_peak_rss()
    before = _dynamo_counters()
    info: dict[str, Any] = {}
    stack = contextlib.ExitStack()
    try:
        if opts.inductor_cache == "cold" and name != "eager":
            # every backend compiles its C++ kernels afresh: without this, a later inductor-family
            # backend would find the earlier one's kernels (same source hash) in the cache
            # directory and its compile time would look shorter than it is
            stack.enter_context(_backend_cache_dir(name))
        ctx = bdef.compile(m, opts, threads)
        info = ctx.info  # the backend fills it during and after its first call
        fn = _call_fn(ctx.compiled, inputs)
        with torch.no_grad():
            with ctx.first_call:
                timers0 = _dynamo_timers()
                t0 = time.perf_counter()
                if name == "eager":
                    out, gflop = _count_flops(fn)
                    info["gflop_per_call"] = gflop
                else:
                    out = fn()
                compile_s = time.perf_counter() - t0
                dynamo_s = _dynamo_trace_s(timers0, _dynamo_timers())
            stack.close()
            if ctx.after is not None:
                ctx.after(info)
            if heartbeat:
                heartbeat("warmup", name)
            for _ in range(opts.warmup):
                fn()
    except Exception as e:
        stack.close()
        tb = traceback.format_exc(limit=-16)
        info.pop("_codes", None)
        info["traceback_tail"] = tb[-3000:]
        del m
        gc.collect()
        return Prepared(name, "failed", reason=f"{type(e).__name__}: {str(e)[:800]}", info=info)
    mem["rss_after_mb"] = rss_mb()
    mem["peak_rss_mb"] = peak_rss_mb()
    if mem["rss_before_mb"] is not None and mem["rss_after_mb"] is not None:
        mem["rss_growth_mb"] = mem["rss_after_mb"] - mem["rss_before_mb"]
        if mem["peak_rss_mb"] is not None and mem["peak_reset"]:
            mem["peak_growth_mb"] = mem["peak_rss_mb"] - mem["rss_before_mb"]
    info["memory"] = mem
    after = _dynamo_counters()
    if name != "eager":
        stats = _counter_delta(before, after, "stats")
        info["graphs"] = stats.get("unique_graphs", 0)
        gb = _counter_delta(before, after, "graph_break")
        info["graph_breaks"] = sum(gb.values())
        if gb:
            info["graph_break_reasons"] = dict(list(gb.items())[:10])
    codes = info.pop("_codes", None)
    if bdef.uses_inductor_codegen and codes is not None:
        ev = analyze_inductor_code(codes)
        ind = _counter_delta(before, after, "inductor")
        ev["weight_pack_matches"] = sum(v for k, v in ind.items() if "weight_pack_matcher_count" in k)
        ev["fusion_matches"] = {k: v for k, v in ind.items() if k.endswith("_matcher_count")}
        n_params = sum(1 for _ in model.parameters())
        if info.get("freezing_config_at_trace"):
            if ev["code_captured"] == 0:
                ev["verified"] = None
                ev["note"] = "no generated code captured; freezing not verifiable"
            else:
                ev["verified"] = bool(ev["frozen_params"] > 0 or n_params == 0)
                if not ev["verified"]:
                    ev["note"] = "freezing requested but no _frozen_param constants in generated code"
        else:
            ev["verified_off"] = ev["frozen_params"] == 0
        info["freezing"] = ev
    if getattr(opts, "dtype", "float32") == "int8":
        # evidence that this backend got the quantized graph: its own copy's quantized_decomposed ops
        from .quant import quantized_ops

        info["graph_quantized_ops"] = sum(quantized_ops(m).values())
        int8_evidence(name, info)
    return Prepared(name, "ok", fn=fn, compile_s=0.0 if name == "eager" else compile_s,
                    dynamo_s=None if name == "eager" else dynamo_s, first_output=out,
                    info=info, call=ctx.compiled)


# --------------------------------------------------------------------------------------------
# Accuracy
# --------------------------------------------------------------------------------------------


def _flatten(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        r: list[torch.Tensor] = []
        for o in out:
            r += _flatten(o)
        return r
    if isinstance(out, dict):
        r = []
        for k in sorted(out):
            r += _flatten(out[k])
        return r
    if hasattr(out, "to_tuple"):  # transformers ModelOutput
        return _flatten(out.to_tuple())
    return []


def compare_outputs(ref, out) -> dict[str, Any]:
    a, b = _flatten(ref), _flatten(out)
    if len(a) != len(b):
        return {"max_abs_diff": None, "max_rel_diff": None, "error": f"{len(b)} outputs vs {len(a)}"}
    max_abs, ref_max = 0.0, 0.0
    for r, o in zip(a, b):
        if r.shape != o.shape:
            return {"max_abs_diff": None, "max_rel_diff": None,
                    "error": f"shape {tuple(o.shape)} vs eager {tuple(r.shape)}"}
        if not r.is_floating_point():
            r, o = r.double(), o.double()
        d = (r.detach().double() - o.detach().double()).abs()
        if d.numel():
            max_abs = max(max_abs, float(d.max()))
            ref_max = max(ref_max, float(r.detach().abs().max()))
    rel = max_abs / ref_max if ref_max > 0 else max_abs
    return {"max_abs_diff": max_abs, "max_rel_diff": rel, "ref_max_abs": ref_max}


# fp32 with conv/linear-BN folding and different reduction orders: loose, report-only tolerance
ACCURACY_REL_TOL = 1e-3
# bf16: a backend's max abs diff against eager bf16, in units of eager's own bf16 error (eager bf16
# against eager float32 on the same bf16-rounded weights and inputs). If the backend is no further
# from float32 than eager is, the triangle inequality bounds that ratio by 2; above 2 the backend is
# provably less accurate than eager (in max abs error against float32).
BF16_OWN_ERROR_FACTOR = 2.0


def float32_reference(bm: BenchModel, model: torch.nn.Module, inputs: Inputs) -> tuple[Any, float]:
    """Eager float32 on a float32 copy of ``model`` (its bf16-rounded weights upcast) and the
    inputs upcast likewise: what eager bf16 computes, without bf16 rounding along the way.
    (compared output, seconds)."""
    t0 = time.perf_counter()
    m32 = copy.deepcopy(model).float()
    in32 = cast_inputs(inputs, torch.float32)
    with torch.no_grad():
        out = bm.select(m32(*in32.args, **in32.kwargs))
    del m32
    gc.collect()
    return out, time.perf_counter() - t0


def _own_error_accuracy(acc: dict[str, Any], out_vs_float32: dict[str, Any], eager_own: dict[str, Any],
                        dtype: str, factor: float) -> None:
    r"""Fill a reduced-precision backend's accuracy entry: its max abs diff against eager in the same
    dtype, in units of eager's own error against float32, and the ok flag (at most \p factor)."""
    own = eager_own.get("max_abs_diff")
    diff = acc.get("max_abs_diff")
    acc["max_abs_diff_vs_float32"] = out_vs_float32.get("max_abs_diff")
    acc[f"eager_own_{dtype}_max_abs_diff"] = own
    acc["vs_eager_own_error"] = diff / own if diff is not None and own else None
    acc["own_error_factor"] = factor
    if diff is None or own is None:
        acc["ok"] = False
    elif own == 0:
        acc["ok"] = diff == 0
    else:
        acc["ok"] = diff <= factor * own


def bf16_accuracy(acc: dict[str, Any], out_vs_float32: dict[str, Any], eager_own: dict[str, Any]) -> None:
    """A bf16 backend's accuracy entry (see BF16_OWN_ERROR_FACTOR)."""
    _own_error_accuracy(acc, out_vs_float32, eager_own, "bf16", BF16_OWN_ERROR_FACTOR)


def int8_reference(bm: BenchModel, float_model: torch.nn.Module, inputs: Inputs, eager: Prepared, batch: int,
                   seed: int) -> tuple[Any, dict[str, Any], list[tuple[Inputs, torch.Tensor]] | None]:
    """int8: the float32 model on the same inputs (the quantization error's yardstick), eager
    int8's own error against it and, for classifiers, the float32 top-1 on a few extra random
    inputs. (float32 output, eager's own int8 error, [(extra inputs, float32 output)] or None)."""
    from .quant import TOP1_EXTRA_INPUTS, TOP1_SEED_OFFSET, channels_last, is_classifier

    t0 = time.perf_counter()
    with torch.no_grad():
        ref32 = bm.select(float_model(*inputs.args, **inputs.kwargs))
        eager_q = bm.select(eager.first_output)
        own = compare_outputs(ref32, eager_q)
        extra = None
        if is_classifier(bm, ref32):
            extra = []
            for i in range(TOP1_EXTRA_INPUTS):
                x = channels_last(bm.make_inputs(batch, seed + TOP1_SEED_OFFSET + i))
                extra.append((x, bm.select(float_model(*x.args, **x.kwargs))))
            own["top1_agreement_vs_float32"] = top1_agreement(bm, eager, eager_q, [(inputs, ref32)] + extra,
                                                              first_is_benchmark=True)
            own["top1_samples"] = int(ref32.shape[0]) * (1 + len(extra))
            extra = [(inputs, ref32)] + extra
    own["float32_reference_s"] = time.perf_counter() - t0
    return ref32, own, extra


def top1_agreement(bm: BenchModel, p: Prepared, out: Any, samples: list[tuple[Inputs, torch.Tensor]],
                   first_is_benchmark: bool = True) -> float | None:
    """Fraction of rows whose argmax equals the float32 model's, over the benchmark input (``out``
    is the backend's output on it) and the extra inputs (run through the backend's compiled call;
    same shapes, so no recompile)."""
    from .quant import top1

    if p.call is None:
        return None
    same = total = 0
    with torch.no_grad():
        for k, (x, want) in enumerate(samples):
            got = out if (k == 0 and first_is_benchmark) else bm.select(p.call(*x.args, **x.kwargs))
            same += int((top1(got) == top1(want)).sum())
            total += int(want.shape[0])
    return same / total if total else None


# int8: a backend's max abs diff against eager int8 (the reference semantics), in units of eager
# int8's own quantization error (max abs diff against the float32 model). As for bf16: a backend
# no further from float32 than eager int8 has a ratio of at most 2 (triangle inequality).
INT8_OWN_ERROR_FACTOR = 2.0


def int8_accuracy(acc: dict[str, Any], out_vs_float32: dict[str, Any], eager_own: dict[str, Any]) -> None:
    """An int8 backend's accuracy entry (see INT8_OWN_ERROR_FACTOR)."""
    _own_error_accuracy(acc, out_vs_float32, eager_own, "int8", INT8_OWN_ERROR_FACTOR)


# --------------------------------------------------------------------------------------------
# One configuration
# --------------------------------------------------------------------------------------------


def _time_round_robin(runners: list[Prepared], opts: BenchOptions, heartbeat=None
                      ) -> tuple[dict[str, list[float]], int, bool, dict[str, dict[str, float]]]:
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    extra: dict[str, dict[str, float]] = {r.name: {"cpu_s": 0.0, "wall_s": 0.0, "new_graphs": 0}
                                          for r in runners}
    if not runners:
        return samples, 0, False, extra
    if heartbeat:
        heartbeat("timing", None)
    perf = time.perf_counter_ns
    cpu = time.process_time
    rounds = 0
    budget_hit = False
    start = time.perf_counter()
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.no_grad():
            while any(len(samples[r.name]) < opts.iters for r in runners):
                k = rounds % len(runners)
                order = runners[k:] + runners[:k]  # rotate the order every round
                for r in order:
                    n = min(opts.chunk, opts.iters - len(samples[r.name]))
                    if n <= 0:
                        continue
                    buf = samples[r.name]
                    fn = r.fn
                    g0, c0, w0 = _unique_graphs(), cpu(), perf()
                    for _ in range(n):
                        t0 = perf()
                        fn()
                        buf.append((perf() - t0) / 1e6)
                    ex = extra[r.name]
                    ex["wall_s"] += (perf() - w0) / 1e9
                    ex["cpu_s"] += cpu() - c0
                    ex["new_graphs"] += _unique_graphs() - g0
                rounds += 1
                if (time.perf_counter() - start > opts.time_budget_s
                        and all(len(samples[r.name]) >= opts.min_iters for r in runners)):
                    budget_hit = True
                    break
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples, rounds, budget_hit, extra


def run_config(bm: BenchModel, model: torch.nn.Module, inputs: Inputs, batch: int, threads: int,
               opts: BenchOptions, log: Callable[[str], None], label: str = "",
               heartbeat: Callable[[str, str | None], None] | None = None,
               float_model: torch.nn.Module | None = None,
               quant_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """All backends on one configuration, in this process (no Dynamo reset between backends).
    int8 runs pass the quantized GraphModule as ``model`` and the float32 model it came from."""
    import torch._dynamo.config as dc

    t_cfg = time.perf_counter()
    torch.set_num_threads(threads)
    if opts.verifuse_cache == "cold":
        from .backends import new_verifuse_cold_cache_dir

        new_verifuse_cold_cache_dir(opts)  # this configuration's own, empty
    entry: dict[str, Any] = {
        "model": bm.name,
        "suite": bm.suite,
        "family": bm.family,
        "description": bm.description,
        "input_desc": bm.input_desc,
        "output_compared": bm.output,
        "params": sum(p.numel() for p in (float_model if float_model is not None else model).parameters()),
        "batch": batch,
        "threads": threads,
        "torch_num_threads": torch.get_num_threads(),
        "input_shape": inputs.shapes(),
        "dtype": opts.dtype,
        "attn_implementation": getattr(getattr(model, "config", None), "_attn_implementation", None),
        "load_avg_before": load_average(),
        "backends": {},
    }
    # what the backends really get (evidence that --dtype reached the model and the inputs)
    entry["param_dtypes"], entry["input_dtypes"] = _tensor_dtypes(model, inputs)
    if bm.notes:
        entry["notes"] = bm.notes
    if quant_info is not None:
        entry["quantization"] = quant_info
    if opts.inductor_cache == "cold":
        try:
            from torch._inductor.utils import clear_caches

            clear_caches()  # in-memory code caches
        except Exception:
            pass
    order = compile_order(list(opts.backends))
    if "eager" not in order:
        order = ["eager"] + order  # the reference is always computed
    entry["compile_order"] = order
    prepared: dict[str, Prepared] = {}
    ref32 = None
    extra32 = None  # int8 classifiers: [(extra inputs, float32 output)] for top-1 agreement
    if opts.dtype == "int8" and float_model is None:
        raise ValueError("int8 run without the float32 model (model_for_dtype gives both)")
    with dc.patch(recompile_limit=max(dc.recompile_limit, opts.recompile_limit)):
        for name in order:
            log(f"{label} {name}: compiling ..." if name != "eager" else f"{label} eager: reference call")
            p = prepare_backend(name, model, inputs, opts, threads, heartbeat)
            prepared[name] = p
            if p.status == "ok":
                if name != "eager":
                    log(f"{label} {name}: compile {p.compile_s:.2f}s")
            else:
                log(f"{label} {name}: {p.status}: {p.reason}")
            if name == "eager" and p.status != "ok":
                raise RuntimeError(f"eager failed: {p.reason}")
            if name == "eager" and opts.dtype == "int8":
                if heartbeat:
                    heartbeat("float32_reference", None)
                ref32, entry["eager_own_int8_error"], extra32 = int8_reference(bm, float_model, inputs, p, batch,
                                                                               opts.seed)
                log(f"{label} eager int8 vs float32: max abs diff "
                    f"{entry['eager_own_int8_error'].get('max_abs_diff')}"
                    + (f", top-1 agreement {entry['eager_own_int8_error']['top1_agreement_vs_float32']:.3f}"
                       if "top1_agreement_vs_float32" in entry["eager_own_int8_error"] else ""))
            elif name == "eager" and opts.dtype != "float32":
                # one extra eager call in float32: the size of eager's own bf16 rounding error
                if heartbeat:
                    heartbeat("float32_reference", None)
                ref32, t32 = float32_reference(bm, model, inputs)
                own = compare_outputs(ref32, bm.select(p.first_output))
                own["float32_reference_s"] = t32
                entry["eager_own_bf16_error"] = own
                log(f"{label} eager {opts.dtype} vs eager float32 (same weights): max abs diff "
                    f"{own.get('max_abs_diff')}")
        ref = bm.select(prepared["eager"].first_output)
        entry["gflop_per_call"] = prepared["eager"].info.pop("gflop_per_call", None)
        runners = [prepared[n] for n in opts.backends if n in prepared and prepared[n].status == "ok"]
        log(f"{label} timing {', '.join(r.name for r in runners)} (round-robin, {opts.iters} iters each, "
            f"budget {opts.time_budget_s:.0f}s)")
        graphs_before = _unique_graphs()
        samples, rounds, budget_hit, extra = _time_round_robin(runners, opts, heartbeat)
        entry["rounds"] = rounds
        entry["time_budget_hit"] = budget_hit
        entry["recompiles_during_timing"] = _unique_graphs() - graphs_before
        with torch.no_grad():
            for name in opts.backends:
                p = prepared.get(name) or Prepared(name, "unavailable", reason="not prepared")
                b: dict[str, Any] = {"status": p.status}
                if p.reason:
                    b["reason"] = p.reason
                if p.status == "ok":
                    b["compile_s"] = p.compile_s
                    if p.dynamo_s is not None:
                        b["dynamo_s"] = p.dynamo_s
                    b["latency_ms"] = latency_stats(samples[name])
                    b["samples_ms"] = [round(v, 4) for v in samples[name]]
                    ex = extra[name]
                    b["cpu_utilization"] = ex["cpu_s"] / ex["wall_s"] if ex["wall_s"] > 0 else None
                    b["recompiles_during_timing"] = ex["new_graphs"]
                    if name != "eager":
                        g0 = _unique_graphs()
                        warm = bm.select(p.fn())  # warm call
                        acc = compare_outputs(ref, warm)
                        first = compare_outputs(ref, bm.select(p.first_output))
                        b["recompiles_during_timing"] += _unique_graphs() - g0
                        acc["first_call_max_abs_diff"] = first.get("max_abs_diff")
                        if opts.dtype == "int8":
                            int8_accuracy(acc, compare_outputs(ref32, warm), entry["eager_own_int8_error"])
                            if extra32 is not None:
                                acc["top1_agreement_vs_float32"] = top1_agreement(bm, p, warm, extra32)
                        elif ref32 is None:
                            acc["rel_tolerance"] = ACCURACY_REL_TOL
                            rel = acc.get("max_rel_diff")
                            acc["ok"] = rel is not None and rel <= ACCURACY_REL_TOL
                        else:
                            bf16_accuracy(acc, compare_outputs(ref32, warm), entry["eager_own_bf16_error"])
                        b["accuracy"] = acc
                b.update(p.info)
                if name in _AVAILABILITY_DETAILS and _AVAILABILITY_DETAILS[name].get("note") and "note" not in b:
                    b["note"] = _AVAILABILITY_DETAILS[name]["note"]
                entry["backends"][name] = b
    vb = entry["backends"].get("verifuse") or {}
    if vb.get("status") == "ok" and vb.get("verifuse_cache_dir"):
        for p in prepared.values():  # the timing is over: Dynamo's reset below recompiles them all
            p.fn = None
        vb["compile_warm_s"] = warm_verifuse_compile(model, inputs, opts, threads)
    entry["ratios"] = config_ratios(entry["backends"], chunk=opts.chunk)
    entry["load_avg_after"] = load_average()
    entry["wall_s"] = time.perf_counter() - t_cfg
    for p in prepared.values():  # drop compiled models before the next configuration
        p.fn = None
        p.first_output = None
    return entry


def warm_verifuse_compile(model: torch.nn.Module, inputs: Inputs, opts: BenchOptions, threads: int) -> float | None:
    """A second verifuse compile of the configuration, from the cache directory its cold compile
    filled (tuning database, plan cache, trace cache): the first call's seconds, or None."""
    from .backends import BACKENDS

    try:
        torch._dynamo.reset()
        ctx = BACKENDS["verifuse"].compile(copy.deepcopy(model), opts, threads)
        fn = _call_fn(ctx.compiled, inputs)
        with torch.no_grad(), ctx.first_call:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - a column, never a failed configuration
        return None


# --------------------------------------------------------------------------------------------
# Ratios
# --------------------------------------------------------------------------------------------


def _median(b: dict[str, Any] | None) -> float | None:
    if not b or b.get("status") != "ok":
        return None
    return b["latency_ms"]["median"]


def _accurate(b: dict[str, Any]) -> bool:
    acc = b.get("accuracy")
    return acc is None or bool(acc.get("ok"))


# A row's verdict: the 95% interval of (best peer's median / verifuse's median) from a bootstrap over
# the timed calls; a win if it lies above 1, a loss if below, otherwise a tie. The win probability
# is the chance that one verifuse call is faster than one best-peer call (all pairs of samples).
VERDICT_LEVEL = 0.95
VERDICT_RESAMPLES = 2000


def ratio_uncertainty(verifuse_ms: list | None, peer_ms: list | None, seed: int = 0,
                      chunk: int | None = None) -> dict[str, Any]:
    """The 95% interval of peer / verifuse, the win probability and the verdict ("win", "tie",
    "loss"); empty when either side has fewer than 3 samples.

    Paired by round when it can be: the calls were taken round-robin, ``chunk`` per backend per
    round, so sample i of both lists belongs to round i // chunk, minutes apart from other rounds
    but seconds apart from each other. This host's speed drifts by up to 1.5x over minutes, which
    moves both backends of a round alike: the ratio of each round's two chunk medians cancels it,
    and the interval is a bootstrap over rounds of their median (the win probability: the share
    of rounds verifuse won). Unpaired samples treated as independent gave intervals that excluded
    1 on drift alone (RoBERTa "lost" 0.81 in a sweep where BERT, the same computation, tied 1.05).
    With fewer than 5 whole rounds, or lists of different lengths: a bootstrap of each side's
    median, samples treated as independent ("verdict_method" says which)."""
    import random
    import statistics

    v, p = [float(x) for x in verifuse_ms or []], [float(x) for x in peer_ms or []]
    if len(v) < 3 or len(p) < 3:
        return {}
    rng = random.Random(seed)  # deterministic: the same samples give the same verdict
    tail = (1 - VERDICT_LEVEL) / 2
    rounds = len(v) // chunk if chunk and chunk > 0 and len(v) == len(p) else 0
    if rounds >= 5:
        per_round = [statistics.median(p[j * chunk:(j + 1) * chunk]) / statistics.median(v[j * chunk:(j + 1) * chunk])
                     for j in range(rounds)]
        ratios = sorted(statistics.median(rng.choices(per_round, k=rounds)) for _ in range(VERDICT_RESAMPLES))
        wins = sum((r > 1) + 0.5 * (r == 1) for r in per_round) / rounds
        method = f"paired by round ({rounds} rounds of {chunk})"
        extra = {"verifuse_vs_best_peer_paired": statistics.median(per_round)}
    else:
        ratios = sorted(statistics.median(rng.choices(p, k=len(p))) / statistics.median(rng.choices(v, k=len(v)))
                        for _ in range(VERDICT_RESAMPLES))
        wins = sum((a < b) + 0.5 * (a == b) for a in v for b in p) / (len(v) * len(p))
        method = "unpaired (calls as independent samples)"
        extra = {}
    lo = ratios[int(tail * (len(ratios) - 1))]
    hi = ratios[int((1 - tail) * (len(ratios) - 1))]
    verdict = "win" if lo > 1 else "loss" if hi < 1 else "tie"
    return {"verifuse_vs_best_peer_ci": [lo, hi], "verifuse_win_probability": wins, "verdict": verdict,
            "verdict_method": method, **extra}


def config_ratios(backends: dict[str, Any], chunk: int | None = None) -> dict[str, Any]:
    """Speed-ups of one configuration (baseline median / backend median: > 1 means faster);
    ``chunk``: calls per backend per round-robin round, for the paired verdict."""
    eager = _median(backends.get("eager"))
    r: dict[str, Any] = {"speedup_vs_eager": {}}
    for name, b in backends.items():
        m = _median(b)
        if name != "eager" and eager and m:
            r["speedup_vs_eager"][name] = eager / m
    # "inductor" = the fastest of its variants (freezing on / off, max-autotune, cpp_wrapper) among
    # the accurate ones (the fastest of all if none is, to be excluded below with its reason)
    ind = [(_median(backends.get(n)), n) for n in INDUCTOR_VARIANTS if _median(backends.get(n))]
    ind_ok = [(m, n) for m, n in ind if _accurate(backends[n])]
    ind_best = min(ind_ok or ind)[1] if ind else None
    r["inductor_best"] = ind_best
    r["speedup_vs_eager_inductor_best"] = r["speedup_vs_eager"].get(ind_best) if ind_best else None
    # best peer: the fastest of inductor (best variant), openvino, zentorch with accurate results
    cands, excluded = [], {}
    for n in [ind_best, *[p for p in PEERS if p not in INDUCTOR_VARIANTS]]:
        if n is None or _median(backends.get(n)) is None:
            continue
        if not _accurate(backends[n]):
            excluded[n] = "accuracy check failed"
            continue
        if backends[n].get("int8_not_run"):
            excluded[n] = "did not run the quantized graph itself (int8_not_run)"
            continue
        cands.append((_median(backends[n]), n))
    best = min(cands) if cands else None
    r["best_peer"] = best[1] if best else None
    r["best_peer_median_ms"] = best[0] if best else None
    if excluded:
        r["peers_excluded"] = excluded
    vf = _median(backends.get("verifuse"))
    if vf and not _accurate(backends["verifuse"]):
        # The gate applies to verifuse too: an inaccurate verifuse row is a failed row, not a speed.
        r["verifuse_failed"] = "accuracy check failed"
        vf = None
    r["verifuse_vs_best_peer"] = best[0] / vf if best and vf else None
    if best and vf:
        r.update(ratio_uncertainty(backends["verifuse"].get("samples_ms"), backends[best[1]].get("samples_ms"),
                                   chunk=chunk))
    ind_m = _median(backends.get(ind_best)) if ind_best else None
    r["verifuse_vs_inductor"] = ind_m / vf if ind_m and vf else None
    ci = (backends.get(ind_best) or {}).get("compile_s") if ind_best else None
    cv = (backends.get("verifuse") or {}).get("compile_s")
    r["compile_ratio_verifuse_inductor"] = cv / ci if ci and cv else None
    # The same without Dynamo's tracing, which every backend pays alike: what each backend adds.
    di = (backends.get(ind_best) or {}).get("dynamo_s") if ind_best else None
    dv = (backends.get("verifuse") or {}).get("dynamo_s")
    ok = ci and cv and di is not None and dv is not None and ci > di and cv > dv
    r["compile_ratio_verifuse_inductor_after_dynamo"] = (cv - dv) / (ci - di) if ok else None
    co = (backends.get("openvino") or {}).get("compile_s") if (backends.get("openvino") or {}).get("status") == "ok" else None
    r["compile_ratio_verifuse_openvino"] = cv / co if co and cv else None
    return r


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summarize(results: list[dict[str, Any]], backends: list[str]) -> dict[str, Any]:
    """Geomeans per (suite, batch, threads), per suite and over everything; scopes: each family
    and the whole suite."""
    groups: dict[tuple, list[dict]] = {}
    ok = [e for e in results if "backends" in e and "ratios" in e]
    for e in ok:
        suite = e.get("suite", "own")
        groups.setdefault((suite, e["batch"], e["threads"]), []).append(e)
        groups.setdefault((suite, "all", "all"), []).append(e)
    if len({e.get("suite", "own") for e in ok}) > 1:
        groups[("all", "all", "all")] = ok
    out = []
    for (suite, batch, threads), entries in groups.items():
        families = sorted({e["family"] for e in entries})
        scopes = ["all"] + (families if len(families) > 1 else [])
        for scope in scopes:
            es = [e for e in entries if scope == "all" or e["family"] == scope]
            g: dict[str, Any] = {"suite": suite, "batch": batch, "threads": threads, "scope": scope,
                                 "n_configs": len(es), "models": sorted({e["model"] for e in es}),
                                 "speedup_vs_eager": {}}
            g["n_used"] = {"speedup_vs_eager": {}}
            for name in list(backends) + ["inductor_best"]:
                if name == "eager":
                    continue
                if name == "inductor_best":
                    vals = [e["ratios"].get("speedup_vs_eager_inductor_best") for e in es]
                else:
                    vals = [e["ratios"]["speedup_vs_eager"].get(name) for e in es]
                vals = [v for v in vals if v]
                g["speedup_vs_eager"][name] = geomean(vals)
                g["n_used"]["speedup_vs_eager"][name] = len(vals)
            for key in ("verifuse_vs_best_peer", "verifuse_vs_inductor", "compile_ratio_verifuse_inductor",
                        "compile_ratio_verifuse_inductor_after_dynamo", "compile_ratio_verifuse_openvino"):
                vals = [v for v in (e["ratios"].get(key) for e in es) if v]
                g[key] = geomean(vals)
                g["n_used"][key] = len(vals)
            counts: dict[str, int] = {}
            for e in es:
                bp = e["ratios"].get("best_peer")
                if bp:
                    counts[bp] = counts.get(bp, 0) + 1
            g["best_peer_counts"] = counts
            # Wins, ties and losses by each row's interval; a failed verifuse row is counted apart.
            verdicts = {"win": 0, "tie": 0, "loss": 0, "failed": 0}
            for e in es:
                if e["ratios"].get("verifuse_failed"):
                    verdicts["failed"] += 1
                elif e["ratios"].get("verdict") in verdicts:
                    verdicts[e["ratios"]["verdict"]] += 1
            g["verdicts"] = verdicts
            out.append(g)
    return {"geomeans": out}


# --------------------------------------------------------------------------------------------
# Whole run
# --------------------------------------------------------------------------------------------


def config_list(opts: BenchOptions) -> list[tuple[str, int, int]]:
    out = []
    for m in opts.models:
        bm = get_model(m)
        for b in (opts.batches or list(bm.default_batches)):
            for t in opts.threads:
                out.append((m, b, t))
    return out


def _new_report(opts: BenchOptions, argv: list[str] | None) -> dict[str, Any]:
    started = _dt.datetime.now(_dt.timezone.utc)
    suites = sorted({get_model(m).suite for m in opts.models})
    return {
        "schema": SCHEMA,
        "created": started.isoformat(timespec="seconds"),
        "argv": list(argv) if argv is not None else None,
        "settings": asdict(opts),
        "suites": suites,
        "environment": environment_info(),
        "backends": {},
        "results": [],
        "errors": [],
    }


def _backend_entry(name: str) -> dict[str, Any]:
    avail, reason, import_s = backend_availability(name)
    d = {"status": "available" if avail else "unavailable", "reason": reason, "import_s": import_s}
    d.update({k: v for k, v in backend_details(name).items() if k not in d})
    return d


def build_model(name: str, seed: int, threads: int) -> tuple[BenchModel, torch.nn.Module | None, str | None]:
    bm = get_model(name)
    missing = bm.missing_requirements()
    if missing:
        return bm, None, f"requires {', '.join(missing)} (make bench-deps)"
    torch.set_num_threads(threads)  # building is not timed; keep it cheap
    return bm, bm.build(seed), None


def run_benchmark(opts: BenchOptions, log: Callable[[str], None] = print, argv: list[str] | None = None,
                  json_path: Path | None = None) -> dict[str, Any]:
    """Run every configuration; in this process, or one subprocess each with ``opts.isolate``."""
    for m in opts.models:
        get_model(m)  # fail early on unknown names
    unknown = [b for b in opts.backends if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {', '.join(BACKENDS)}")
    if opts.isolate:
        from .orchestrate import run_isolated

        return run_isolated(opts, log, argv, Path(json_path) if json_path else default_json_path(opts))
    return _run_in_process(opts, log, argv)


def _run_in_process(opts: BenchOptions, log: Callable[[str], None], argv: list[str] | None) -> dict[str, Any]:
    threads_before = torch.get_num_threads()
    report = _new_report(opts, argv)
    report["environment"]["isolation"] = "in-process (torch._dynamo.reset() between configurations only)"
    uses_inductor = any(BACKENDS[b].uses_inductor_codegen for b in opts.backends if b in BACKENDS)
    configs = config_list(opts)
    stack = contextlib.ExitStack()
    t_run = time.perf_counter()
    try:
        cache_dir = stack.enter_context(fresh_inductor_cache_dir(uses_inductor and opts.inductor_cache == "cold"))
        report["environment"]["inductor_cache_dir"] = cache_dir or "default"
        for name in opts.backends:
            report["backends"][name] = _backend_entry(name)
            if report["backends"][name]["status"] != "available":
                log(f"backend {name}: unavailable ({report['backends'][name]['reason']})")
        if uses_inductor and any(report["backends"][b]["status"] == "available"
                                 for b in opts.backends if b in BACKENDS and BACKENDS[b].uses_inductor_codegen):
            try:
                w = inductor_warmup()
                report["environment"]["inductor_warmup_compile_s"] = w
                log(f"inductor warm-up compile (one-time costs): {w:.2f}s")
            except Exception as e:
                report["errors"].append({"stage": "inductor_warmup", "error": f"{type(e).__name__}: {e}"})
        built: dict[str, Any] = {}
        for k, (mname, batch, threads) in enumerate(configs, 1):
            label = f"[{k}/{len(configs)} {mname} b{batch} t{threads}{dtype_tag(opts.dtype)}]"
            if mname not in built:
                built.clear()
                gc.collect()
                log(f"{label} building")
                try:
                    built[mname] = build_model(mname, opts.seed, min(opts.threads))
                except Exception as e:
                    built[mname] = (get_model(mname), None, f"build failed: {type(e).__name__}: {e}")
            bm, model, why = built[mname]
            if model is None:
                report["errors"].append({"model": mname, "batch": batch, "threads": threads,
                                         "stage": "unavailable" if "requires" in (why or "") else "build",
                                         "error": why})
                log(f"{label} skipped: {why}")
                continue
            try:
                torch._dynamo.reset()  # between configurations only, never between backends
            except Exception:
                pass
            try:
                rm = model_for_dtype(bm, model, bm.make_inputs(batch, opts.seed), opts.dtype, batch, opts.seed)
            except Exception as e:
                # int8: the model cannot be quantized (export or the quantizer fails), not "eager failed"
                report["errors"].append({"model": mname, "batch": batch, "threads": threads,
                                         "stage": "quantize" if opts.dtype == "int8" else "run",
                                         "error": f"{type(e).__name__}: {str(e)[:800]}",
                                         "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
                log(f"{label} {opts.dtype} model failed: {type(e).__name__}: {str(e)[:300]}")
                continue
            try:
                entry = run_config(bm, rm.model, rm.inputs, batch, threads, opts, log, label,
                                   float_model=rm.float_model, quant_info=rm.quant_info)
                entry["process"] = {"isolated": False, "pid": os.getpid()}
            except Exception as e:
                report["errors"].append({"model": mname, "batch": batch, "threads": threads, "stage": "run",
                                         "error": f"{type(e).__name__}: {e}",
                                         "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
                log(f"{label} failed: {e}")
                continue
            report["results"].append(entry)
            log(f"{label} {_one_line(entry)}  (elapsed {_hms(time.perf_counter() - t_run)})")
    finally:
        torch.set_num_threads(threads_before)
        try:
            torch._dynamo.reset()
        except Exception:
            pass
        stack.close()
    finish_report(report, opts)
    return report


def finish_report(report: dict[str, Any], opts: BenchOptions) -> None:
    report["summary"] = summarize(report["results"], opts.backends)
    report["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    report["environment"]["load_avg_end"] = load_average()


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _one_line(entry: dict[str, Any]) -> str:
    parts = []
    for name, b in entry["backends"].items():
        if b["status"] == "ok":
            parts.append(f"{name} {b['latency_ms']['median']:.3f}ms")
        else:
            parts.append(f"{name} {b['status']}")
    r = entry.get("ratios", {})
    if r.get("verifuse_failed"):
        parts.append(f"verifuse FAILED: {r['verifuse_failed']}")
    if r.get("verifuse_vs_best_peer"):
        verdict = f" ({r['verdict']}, 95% interval {r['verifuse_vs_best_peer_ci'][0]:.2f}-" \
                  f"{r['verifuse_vs_best_peer_ci'][1]:.2f})" if r.get("verdict") else ""
        parts.append(f"verifuse vs {r['best_peer']}: {r['verifuse_vs_best_peer']:.2f}x{verdict}")
    return "-> " + ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def default_results_dir() -> Path:
    here = Path(__file__).resolve().parent
    if here.parent.name == "bench":  # running from the source tree: bench/results
        return here.parent / "results"
    return Path.cwd() / "bench" / "results"


def default_json_path(opts: BenchOptions | None = None) -> Path:
    ts = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tag = f"-{opts.suite}" if opts is not None and opts.suite else ""
    tag += dtype_tag(opts.dtype if opts is not None else None)
    return default_results_dir() / f"bench{tag}-{ts}.json"


from .report import to_markdown, write_report  # noqa: E402  (re-exported: harness.write_report)

__all__ = ["BenchOptions", "run_benchmark", "run_config", "write_report", "to_markdown", "summarize",
           "config_ratios", "latency_stats", "geomean", "compare_outputs", "environment_info",
           "backend_availability", "SCHEMA", "KNOWN_BACKENDS", "DEFAULT_BACKENDS"]
