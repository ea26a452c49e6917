"""Benchmark harness: eager vs inductor (freezing) vs verifuse, measured fairly in one process.

Fairness rules (see bench/README.md):

* Everything runs under ``torch.no_grad()``, on static shapes (``dynamic=False``), fp32, CPU.
* ``inductor`` is compiled with ``torch._inductor.config.freezing = True`` set *in the compiling
  thread at trace time* (config is per-thread in torch 2.12+), under no_grad. That it took effect
  is verified from the generated code (``_frozen_param*`` constants, ``mkldnn``/``mkl`` packed ops)
  and inductor's pattern counters, and recorded in the results.
* Every (model, batch, threads) configuration starts from ``torch._dynamo.reset()`` and compiles
  each backend afresh after ``torch.set_num_threads(threads)`` (inductor bakes the thread count
  into its generated code). By default inductor compiles into an empty cache directory
  ("cold"), so compile times are not flattered by earlier runs.
* One-time imports (inductor, its compile worker pool, verifuse) are paid up front and reported
  separately; "compile_s" is the first call (Dynamo tracing + backend compile + first run).
* Latency is measured round-robin: each round runs every backend ``chunk`` times, the backend
  order rotating every round, so slow drifts in machine load hit all backends alike. Medians and
  p90 per backend. GC is disabled while timing.
* Each compiled output is compared against eager (max abs / relative diff). Nothing is asserted:
  this is a benchmark, not a test.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from .models import MODELS, get_spec

SCHEMA = "verifuse-bench/1"
KNOWN_BACKENDS: tuple[str, ...] = ("eager", "inductor", "inductor-nofreeze", "verifuse")
DEFAULT_BACKENDS: tuple[str, ...] = ("eager", "inductor", "verifuse")


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


@dataclass
class BenchOptions:
    models: list[str]
    backends: list[str] = field(default_factory=lambda: list(DEFAULT_BACKENDS))
    batches: list[int] | None = None  # None: each model's default batch
    threads: list[int] = field(default_factory=lambda: [1])
    iters: int = 30  # timed iterations per backend and configuration
    warmup: int = 3  # untimed iterations per backend after the compile call
    chunk: int = 5  # iterations per backend per round (round-robin alternation)
    time_budget_s: float = 60.0  # per configuration; stops rounds early (>= min_iters kept)
    min_iters: int = 5
    seed: int = 0
    inductor_cache: str = "cold"  # "cold": fresh cache dir per compile; "warm": default cache
    verifuse_options: dict[str, Any] | None = None
    quick: bool = False


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _cpu_flags() -> list[str]:
    interesting = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
                   "amx_bf16", "fma")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [fl for fl in interesting if fl in flags]
    except OSError:
        pass
    return []


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


def environment_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": _cpu_flags(),
        "load_avg": load_average(),
        "torch_num_threads_default": torch.get_num_threads(),
        "mkldnn_available": bool(torch.backends.mkldnn.is_available()),
        "mkl_available": bool(torch.backends.mkl.is_available()),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "git_commit": _git_commit(),
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
# Backends
# --------------------------------------------------------------------------------------------


@dataclass
class Prepared:
    name: str
    status: str  # "ok" | "unavailable" | "failed"
    fn: Callable[[], Any] | None = None
    reason: str | None = None
    compile_s: float | None = None
    first_output: Any = None
    info: dict[str, Any] = field(default_factory=dict)


_AVAILABILITY_CACHE: dict[str, tuple[bool, str | None, float | None]] = {}


def backend_availability(name: str) -> tuple[bool, str | None, float | None]:
    """(available, reason if not, one-time import seconds). Never raises."""
    if name in _AVAILABILITY_CACHE:
        return _AVAILABILITY_CACHE[name]
    t0 = time.perf_counter()
    result: tuple[bool, str | None, float | None]
    if name == "eager":
        result = (True, None, 0.0)
    elif name in ("inductor", "inductor-nofreeze"):
        try:
            import torch._inductor.compile_fx  # noqa: F401
            from torch._inductor.async_compile import maybe_warm_pool

            maybe_warm_pool()
            result = (True, None, time.perf_counter() - t0)
        except Exception as e:
            result = (False, f"inductor import failed: {type(e).__name__}: {e}", None)
    elif name == "verifuse":
        result = _verifuse_availability(t0)
    else:
        result = (False, f"unknown backend {name!r}; known: {', '.join(KNOWN_BACKENDS)}", None)
    _AVAILABILITY_CACHE[name] = result
    return result


def _verifuse_availability(t0: float) -> tuple[bool, str | None, float | None]:
    import_err = None
    try:
        import verifuse  # noqa: F401  (registers the backend if installed as a plain package)
    except Exception as e:
        import_err = f"import verifuse failed: {type(e).__name__}: {e}"
    try:
        from torch._dynamo import list_backends

        names = list_backends(exclude_tags=())
    except Exception as e:
        return (False, f"torch._dynamo.list_backends failed: {e!r}", None)
    if "verifuse" not in names:
        reason = "backend 'verifuse' is not registered with torch._dynamo"
        if import_err:
            reason += f" ({import_err})"
        return (False, reason, None)
    try:
        from torch._dynamo.backends.registry import lookup_backend

        lookup_backend("verifuse")  # loads the entry point; surfaces import errors here
    except Exception as e:
        return (False, f"lookup_backend('verifuse') failed: {type(e).__name__}: {e}", None)
    return (True, None, time.perf_counter() - t0)


def _dynamo_counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items()}


def _counter_delta(before: dict, after: dict, group: str) -> dict[str, int]:
    b = before.get(group, {})
    a = after.get(group, {})
    return {k: v - b.get(k, 0) for k, v in a.items() if v - b.get(k, 0)}


@contextlib.contextmanager
def _capture_inductor_code(sink: list[str]):
    try:
        from unittest import mock

        from torch._inductor.graph import GraphLowering
    except Exception:
        yield
        return
    with mock.patch.object(GraphLowering, "save_output_code", lambda code: sink.append(code)):
        yield


@contextlib.contextmanager
def _no_graph_caches(mode: str):
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


@contextlib.contextmanager
def fresh_inductor_cache_dir(enabled: bool):
    """One empty inductor cache directory for the whole run (removed afterwards)."""
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


def inductor_warmup() -> float:
    """Compile a trivial function once, so that one-time costs (C++ prefix header, worker pool)
    are not charged to the first model's compile time. Returns its wall time."""
    t0 = time.perf_counter()
    torch._dynamo.reset()
    f = torch.compile(lambda a: torch.relu(a * 2.0 + 1.0), backend="inductor", dynamic=False)
    with torch.no_grad():
        f(torch.randn(16))
    torch._dynamo.reset()
    return time.perf_counter() - t0


_FROZEN_RE = re.compile(r"_frozen_param\d+")
_ONEDNN_OP_RE = re.compile(r"torch\.ops\.(?:mkldnn|mkl|onednn)\.(\w+)")


def analyze_inductor_code(codes: list[str]) -> dict[str, Any]:
    """Evidence that freezing happened, from inductor's generated wrapper code."""
    frozen: set[str] = set()
    ops: dict[str, int] = {}
    for c in codes:
        frozen.update(_FROZEN_RE.findall(c))
        for op in _ONEDNN_OP_RE.findall(c):
            ops[op] = ops.get(op, 0) + 1
    return {"frozen_params": len(frozen), "onednn_ops": ops, "onednn_op_calls": sum(ops.values()),
            "code_captured": len(codes)}


def _prepare_eager(model, x) -> Prepared:
    def fn():
        return model(x)

    with torch.no_grad():
        out = fn()
    return Prepared("eager", "ok", fn=fn, compile_s=0.0, first_output=out)


def _prepare_compiled(name: str, model, x, opts: BenchOptions) -> Prepared:
    avail, reason, _ = backend_availability(name)
    if not avail:
        return Prepared(name, "unavailable", reason=reason)
    info: dict[str, Any] = {}
    codes: list[str] = []
    before = _dynamo_counters()
    stats_before = _verifuse_stats() if name == "verifuse" else None
    try:
        if name in ("inductor", "inductor-nofreeze"):
            import torch._inductor.config as ic

            freezing = name == "inductor"
            # options= makes the two inductor variants compare unequal, so Dynamo's BACKEND_MATCH
            # guard keeps their cache entries apart; the patch makes freezing visible at trace time.
            compiled = torch.compile(model, backend="inductor", dynamic=False,
                                     options={"freezing": freezing})
            with torch.no_grad(), ic.patch(freezing=freezing), _capture_inductor_code(codes), \
                    _no_graph_caches(opts.inductor_cache):
                # Config is per-thread in torch 2.12+: record what the compiling thread sees.
                info["freezing_config_at_trace"] = bool(ic.freezing)
                info["grad_enabled_at_trace"] = torch.is_grad_enabled()
                t0 = time.perf_counter()
                out = compiled(x)
                compile_s = time.perf_counter() - t0
        elif name == "verifuse":
            kwargs: dict[str, Any] = {"backend": "verifuse", "dynamic": False}
            if opts.verifuse_options:
                kwargs["options"] = dict(opts.verifuse_options)
            compiled = torch.compile(model, **kwargs)
            with torch.no_grad():
                t0 = time.perf_counter()
                out = compiled(x)
                compile_s = time.perf_counter() - t0
        else:
            return Prepared(name, "unavailable", reason=f"unknown backend {name!r}")
    except Exception as e:
        tb = traceback.format_exc(limit=-16)
        return Prepared(name, "failed", reason=f"{type(e).__name__}: {str(e)[:800]}",
                        info={"traceback_tail": tb[-3000:]})
    after = _dynamo_counters()
    stats = _counter_delta(before, after, "stats")
    info["graphs"] = stats.get("unique_graphs")
    gb = _counter_delta(before, after, "graph_break")
    info["graph_breaks"] = sum(gb.values())
    if gb:
        info["graph_break_reasons"] = dict(list(gb.items())[:10])
    if name in ("inductor", "inductor-nofreeze"):
        ev = analyze_inductor_code(codes)
        ind = _counter_delta(before, after, "inductor")
        ev["weight_pack_matches"] = sum(v for k, v in ind.items() if "weight_pack_matcher_count" in k)
        ev["fusion_matches"] = {k: v for k, v in ind.items() if k.endswith("_matcher_count")}
        n_params = sum(1 for _ in model.parameters())
        if name == "inductor":
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
    if name == "verifuse" and stats_before is not None:
        stats_after = _verifuse_stats()
        if isinstance(stats_after, dict) and isinstance(stats_before, dict):
            info["verifuse_stats_delta"] = {
                k: stats_after[k] - stats_before.get(k, 0)
                for k in stats_after
                if isinstance(stats_after[k], (int, float)) and stats_after[k] != stats_before.get(k, 0)
            }

    def fn():
        return compiled(x)

    return Prepared(name, "ok", fn=fn, compile_s=compile_s, first_output=out, info=info)


def _verifuse_stats() -> dict | None:
    try:
        import verifuse

        s = verifuse.stats()
        if hasattr(s, "to_dict"):
            s = s.to_dict()
        return dict(s) if isinstance(s, dict) else None
    except Exception:
        return None


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
        d = (r.detach().double() - o.detach().double()).abs()
        if d.numel():
            max_abs = max(max_abs, float(d.max()))
            ref_max = max(ref_max, float(r.detach().abs().max()))
    rel = max_abs / ref_max if ref_max > 0 else max_abs
    return {"max_abs_diff": max_abs, "max_rel_diff": rel, "ref_max_abs": ref_max}


# fp32 with conv/linear-BN folding and different reduction orders: loose, report-only tolerance
ACCURACY_REL_TOL = 1e-3


# --------------------------------------------------------------------------------------------
# One configuration
# --------------------------------------------------------------------------------------------


def _time_round_robin(runners: list[Prepared], opts: BenchOptions, log) -> tuple[dict[str, list[float]], int, bool]:
    samples: dict[str, list[float]] = {r.name: [] for r in runners}
    if not runners:
        return samples, 0, False
    perf = time.perf_counter_ns
    rounds = 0
    budget_hit = False
    start = time.perf_counter()
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.no_grad():
            for r in runners:  # warmup (not timed)
                for _ in range(opts.warmup):
                    r.fn()
            while any(len(samples[r.name]) < opts.iters for r in runners):
                k = rounds % len(runners)
                order = runners[k:] + runners[:k]  # rotate the order every round
                for r in order:
                    n = min(opts.chunk, opts.iters - len(samples[r.name]))
                    buf = samples[r.name]
                    fn = r.fn
                    for _ in range(n):
                        t0 = perf()
                        fn()
                        buf.append((perf() - t0) / 1e6)
                rounds += 1
                if (time.perf_counter() - start > opts.time_budget_s
                        and all(len(samples[r.name]) >= opts.min_iters for r in runners)):
                    budget_hit = True
                    break
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples, rounds, budget_hit


def run_config(model, spec, x, batch: int, threads: int, opts: BenchOptions, log) -> dict[str, Any]:
    t_cfg = time.perf_counter()
    torch.set_num_threads(threads)
    entry: dict[str, Any] = {
        "model": spec.name,
        "family": spec.family,
        "params": sum(p.numel() for p in model.parameters()),
        "batch": batch,
        "threads": threads,
        "torch_num_threads": torch.get_num_threads(),
        "input_shape": list(x.shape),
        "load_avg_before": load_average(),
        "backends": {},
    }
    try:
        torch._dynamo.reset()
    except Exception:
        pass
    prepared: list[Prepared] = []
    if opts.inductor_cache == "cold":
        try:
            from torch._inductor.utils import clear_caches

            clear_caches()  # in-memory code caches
        except Exception:
            pass
    eager = _prepare_eager(model, x)
    ref = eager.first_output
    for name in opts.backends:
        if name == "eager":
            p = eager
        else:
            log(f"  compiling {name} ...")
            p = _prepare_compiled(name, model, x, opts)
            if p.status == "ok":
                log(f"  {name}: compile {p.compile_s:.2f}s")
            else:
                log(f"  {name}: {p.status}: {p.reason}")
        prepared.append(p)
    runners = [p for p in prepared if p.status == "ok"]
    graphs_before = _dynamo_counters().get("stats", {}).get("unique_graphs", 0)
    samples, rounds, budget_hit = _time_round_robin(runners, opts, log)
    graphs_after = _dynamo_counters().get("stats", {}).get("unique_graphs", 0)
    entry["rounds"] = rounds
    entry["time_budget_hit"] = budget_hit
    entry["recompiles_during_timing"] = graphs_after - graphs_before
    with torch.no_grad():
        for p in prepared:
            b: dict[str, Any] = {"status": p.status}
            if p.reason:
                b["reason"] = p.reason
            if p.status == "ok":
                b["compile_s"] = p.compile_s
                b["latency_ms"] = latency_stats(samples[p.name])
                b["samples_ms"] = [round(v, 4) for v in samples[p.name]]
                if p.name != "eager":
                    acc = compare_outputs(ref, p.fn())  # warm call
                    first = compare_outputs(ref, p.first_output)
                    acc["first_call_max_abs_diff"] = first.get("max_abs_diff")
                    acc["rel_tolerance"] = ACCURACY_REL_TOL
                    rel = acc.get("max_rel_diff")
                    acc["ok"] = rel is not None and rel <= ACCURACY_REL_TOL
                    b["accuracy"] = acc
            b.update(p.info)
            entry["backends"][p.name] = b
    entry["ratios"] = _config_ratios(entry["backends"])
    entry["load_avg_after"] = load_average()
    entry["wall_s"] = time.perf_counter() - t_cfg
    return entry


def _median(b: dict[str, Any] | None) -> float | None:
    if not b or b.get("status") != "ok":
        return None
    return b["latency_ms"]["median"]


def _config_ratios(backends: dict[str, Any]) -> dict[str, Any]:
    eager = _median(backends.get("eager"))
    r: dict[str, Any] = {"speedup_vs_eager": {}}
    for name, b in backends.items():
        m = _median(b)
        if name != "eager" and eager and m:
            r["speedup_vs_eager"][name] = eager / m
    ind, vf = _median(backends.get("inductor")), _median(backends.get("verifuse"))
    r["verifuse_vs_inductor"] = ind / vf if ind and vf else None
    ci = (backends.get("inductor") or {}).get("compile_s")
    cv = (backends.get("verifuse") or {}).get("compile_s")
    r["compile_ratio_verifuse_inductor"] = cv / ci if ci and cv else None
    return r


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def summarize(results: list[dict[str, Any]], backends: list[str]) -> dict[str, Any]:
    """Geomeans per (batch, threads) and over everything; scopes: CNNs and the whole suite."""
    groups: dict[tuple, list[dict]] = {}
    for e in results:
        if "backends" not in e:
            continue
        groups.setdefault((e["batch"], e["threads"]), []).append(e)
    groups[("all", "all")] = [e for e in results if "backends" in e]
    out = []
    for (batch, threads), entries in groups.items():
        for scope in ("cnn", "all"):
            es = [e for e in entries if scope == "all" or e["family"] == "cnn"]
            if not es:
                continue
            g: dict[str, Any] = {"batch": batch, "threads": threads, "scope": scope,
                                 "n_configs": len(es), "models": sorted({e["model"] for e in es}),
                                 "speedup_vs_eager": {}}
            # n_used: how many configurations each geomean covers (a backend that failed or was
            # unavailable on some model is left out of its geomean; compare n_used with n_configs)
            g["n_used"] = {"speedup_vs_eager": {}}
            for name in backends:
                if name == "eager":
                    continue
                vals = [v for v in (e["ratios"]["speedup_vs_eager"].get(name) for e in es) if v]
                g["speedup_vs_eager"][name] = geomean(vals)
                g["n_used"]["speedup_vs_eager"][name] = len(vals)
            for key in ("verifuse_vs_inductor", "compile_ratio_verifuse_inductor"):
                vals = [v for v in (e["ratios"].get(key) for e in es) if v]
                g[key] = geomean(vals)
                g["n_used"][key] = len(vals)
            out.append(g)
    return {"geomeans": out}


# --------------------------------------------------------------------------------------------
# Whole run
# --------------------------------------------------------------------------------------------


def run_benchmark(opts: BenchOptions, log: Callable[[str], None] = print, argv: list[str] | None = None
                  ) -> dict[str, Any]:
    for m in opts.models:
        get_spec(m)  # fail early on unknown names
    unknown = [b for b in opts.backends if b not in KNOWN_BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {', '.join(KNOWN_BACKENDS)}")
    started = _dt.datetime.now(_dt.timezone.utc)
    threads_before = torch.get_num_threads()
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created": started.isoformat(timespec="seconds"),
        "argv": list(argv) if argv is not None else None,
        "settings": asdict(opts),
        "environment": environment_info(),
        "backends": {},
        "results": [],
        "errors": [],
    }
    uses_inductor = any(b.startswith("inductor") for b in opts.backends)
    stack = contextlib.ExitStack()
    try:
        cache_dir = stack.enter_context(
            fresh_inductor_cache_dir(uses_inductor and opts.inductor_cache == "cold"))
        report["environment"]["inductor_cache_dir"] = cache_dir or "default"
        for name in opts.backends:
            avail, reason, import_s = backend_availability(name)
            report["backends"][name] = {"status": "available" if avail else "unavailable", "reason": reason,
                                        "import_s": import_s}
            if not avail:
                log(f"backend {name}: unavailable ({reason})")
        if uses_inductor and any(report["backends"][b]["status"] == "available"
                                 for b in opts.backends if b.startswith("inductor")):
            try:
                w = inductor_warmup()
                report["environment"]["inductor_warmup_compile_s"] = w
                log(f"inductor warm-up compile (one-time costs): {w:.2f}s")
            except Exception as e:
                report["errors"].append({"stage": "inductor_warmup", "error": f"{type(e).__name__}: {e}"})
        for mname in opts.models:
            spec = MODELS[mname]
            log(f"[{mname}] building ({spec.description})")
            try:
                torch.set_num_threads(min(opts.threads))  # building is not timed; keep it cheap
                model, input_fn = spec.build(seed=opts.seed)
            except Exception as e:
                report["errors"].append({"model": mname, "stage": "build", "error": f"{type(e).__name__}: {e}"})
                log(f"[{mname}] build failed: {e}")
                continue
            batches = opts.batches or [spec.default_batch]
            for batch in batches:
                x = input_fn(batch)
                for threads in opts.threads:
                    log(f"[{mname}] batch={batch} threads={threads}")
                    try:
                        entry = run_config(model, spec, x, batch, threads, opts, log)
                    except Exception as e:
                        report["errors"].append({"model": mname, "batch": batch, "threads": threads,
                                                 "stage": "run", "error": f"{type(e).__name__}: {e}",
                                                 "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
                        log(f"[{mname}] batch={batch} threads={threads} failed: {e}")
                        continue
                    report["results"].append(entry)
                    log(_one_line(entry))
            del model
            gc.collect()
    finally:
        torch.set_num_threads(threads_before)
        try:
            torch._dynamo.reset()
        except Exception:
            pass
        stack.close()
    report["summary"] = summarize(report["results"], opts.backends)
    report["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    report["environment"]["load_avg_end"] = load_average()
    return report


def _one_line(entry: dict[str, Any]) -> str:
    parts = []
    for name, b in entry["backends"].items():
        if b["status"] == "ok":
            parts.append(f"{name} {b['latency_ms']['median']:.3f}ms")
        else:
            parts.append(f"{name} {b['status']}")
    return f"  -> {', '.join(parts)}"


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def default_results_dir() -> Path:
    here = Path(__file__).resolve().parent
    if here.parent.name == "bench":  # running from the source tree: bench/results
        return here.parent / "results"
    return Path.cwd() / "bench" / "results"


def default_json_path() -> Path:
    ts = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return default_results_dir() / f"bench-{ts}.json"


def _fmt(v: Any, spec: str = ".3f", none: str = "–") -> str:
    if v is None:
        return none
    if isinstance(v, float) and not math.isfinite(v):
        return none
    return format(v, spec)


def to_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    s = report["settings"]
    lines = [
        f"# verifuse bench — {report['created']}",
        "",
        f"- torch {env['torch_version']}, CPU `{env['cpu_model']}` ({env['cpu_count']} logical CPUs; "
        f"{', '.join(env.get('cpu_flags') or [])}), python {env['python_version']}",
        f"- load average at start {env.get('load_avg')}, at end {env.get('load_avg_end')}",
        f"- iters {s['iters']} per backend (round-robin, chunk {s['chunk']}), warmup {s['warmup']}, "
        f"time budget {s['time_budget_s']} s per config, inductor cache {s['inductor_cache']}",
        "- inductor = torch.compile(backend='inductor') with freezing=True at trace time, under no_grad",
    ]
    for name, b in report["backends"].items():
        if b["status"] != "available":
            lines.append(f"- **{name} unavailable**: {b['reason']}")
    lines += [
        "",
        "| model | batch | thr | backend | compile s | median ms | p90 ms | speedup vs eager | max abs diff | notes |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for e in report["results"]:
        for name, b in e["backends"].items():
            notes = []
            if b["status"] != "ok":
                notes.append(f"{b['status']}: {(b.get('reason') or '')[:80]}")
                lines.append(f"| {e['model']} | {e['batch']} | {e['threads']} | {name} | – | – | – | – | – | "
                             f"{'; '.join(notes)} |")
                continue
            fr = b.get("freezing")
            if fr is not None and name == "inductor":
                notes.append(f"frozen params {fr.get('frozen_params')}, oneDNN ops {fr.get('onednn_op_calls')}"
                             + ("" if fr.get("verified") else " (freezing NOT verified)"))
            if b.get("graph_breaks"):
                notes.append(f"{b['graph_breaks']} graph breaks")
            acc = b.get("accuracy")
            if acc is not None and not acc.get("ok"):
                notes.append(f"ACCURACY rel {_fmt(acc.get('max_rel_diff'), '.2e')}")
            if e.get("time_budget_hit"):
                notes.append(f"budget hit (n={b['latency_ms']['n']})")
            sp = e["ratios"]["speedup_vs_eager"].get(name) if name != "eager" else 1.0
            lines.append(
                f"| {e['model']} | {e['batch']} | {e['threads']} | {name} | "
                f"{_fmt(b.get('compile_s'), '.2f') if name != 'eager' else '–'} | "
                f"{_fmt(b['latency_ms']['median'])} | {_fmt(b['latency_ms']['p90'])} | "
                f"{_fmt(sp, '.2f')}x | "
                f"{_fmt((acc or {}).get('max_abs_diff'), '.1e') if acc else '–'} | {'; '.join(notes)} |")
    lines += ["", "## Ratios per configuration", "",
              "| model | batch | thr | verifuse/eager | verifuse/inductor | inductor/eager | compile verifuse/inductor |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for e in report["results"]:
        r = e["ratios"]
        lines.append(f"| {e['model']} | {e['batch']} | {e['threads']} | "
                     f"{_fmt(r['speedup_vs_eager'].get('verifuse'), '.2f')} | "
                     f"{_fmt(r.get('verifuse_vs_inductor'), '.2f')} | "
                     f"{_fmt(r['speedup_vs_eager'].get('inductor'), '.2f')} | "
                     f"{_fmt(r.get('compile_ratio_verifuse_inductor'), '.2f')} |")
    lines += ["", "## Geomeans (speedup = baseline time / backend time; >1 is faster)", "",
              "| batch | thr | scope | n | inductor/eager | verifuse/eager | verifuse/inductor | compile verifuse/inductor |",
              "|---|---|---|---:|---:|---:|---:|---:|"]
    for g in report.get("summary", {}).get("geomeans", []):
        sp = g["speedup_vs_eager"]
        nu = g.get("n_used", {})

        def cell(v, n):  # mark geomeans that cover only part of the configurations
            txt = _fmt(v, ".2f")
            return txt if v is None or n is None or n == g["n_configs"] else f"{txt} ({n}/{g['n_configs']})"

        lines.append(f"| {g['batch']} | {g['threads']} | {g['scope']} | {g['n_configs']} | "
                     f"{cell(sp.get('inductor'), nu.get('speedup_vs_eager', {}).get('inductor'))} | "
                     f"{cell(sp.get('verifuse'), nu.get('speedup_vs_eager', {}).get('verifuse'))} | "
                     f"{cell(g.get('verifuse_vs_inductor'), nu.get('verifuse_vs_inductor'))} | "
                     f"{cell(g.get('compile_ratio_verifuse_inductor'), nu.get('compile_ratio_verifuse_inductor'))} |")
    if report.get("errors"):
        lines += ["", "## Errors", ""]
        for err in report["errors"]:
            lines.append(f"- {err.get('model')} (stage {err.get('stage')}): {err.get('error')}")
    lines.append("")
    return "\n".join(lines)


def write_report(report: dict[str, Any], json_path: Path) -> tuple[Path, Path]:
    json_path = Path(json_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = json_path.with_suffix(json_path.suffix + ".tmp")
    tmp.write_text(json.dumps(_finite(report), indent=2, default=_json_default, allow_nan=False))
    tmp.replace(json_path)
    md_path = json_path.with_suffix(".md")
    md_path.write_text(to_markdown(report))
    return json_path, md_path


def _finite(o: Any) -> Any:
    """Strict JSON: NaN / inf become null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, torch.Size):
        return list(o)
    return repr(o)
