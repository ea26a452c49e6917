"""One benchmark process: ``python -m verifuse_bench.worker SPEC.json`` (started by orchestrate.py).

Modes (``spec["mode"]``):

* ``config``: one configuration (model x batch x threads, in the run's dtype), every backend, in this fresh process;
  writes ``spec["out"]``. While it runs it keeps ``spec["heartbeat"]`` up to date with the stage
  and backend it is in, so the parent can name the culprit if the process dies.
* ``memory``: builds the model, compiles one backend, runs its first call and warm-up calls, and
  reports the process's RSS and peak RSS (the isolated memory mode).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _write_json(path: str | Path, data: dict[str, Any]) -> None:
    from .report import dumps

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dumps(data))
    tmp.replace(p)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    from . import harness
    from .harness import BenchOptions

    opts = BenchOptions.from_dict(spec["opts"])
    model, batch, threads = spec["model"], int(spec["batch"]), int(spec["threads"])
    label = spec.get("label", f"[{model} b{batch} t{threads}]")
    hb_path = spec.get("heartbeat")

    def heartbeat(stage: str, backend: str | None) -> None:
        if hb_path:
            try:
                Path(hb_path).write_text(json.dumps({"stage": stage, "backend": backend, "t": time.time()}))
            except OSError:
                pass

    result: dict[str, Any] = {"kind": "config", "model": model, "batch": batch, "threads": threads, "dtype": opts.dtype,
                              "fingerprint": spec.get("fingerprint"), "complete": False, "entry": None,
                              "errors": [], "backends": {}, "process": {"pid": os.getpid(), "isolated": True}}
    t0 = time.perf_counter()
    heartbeat("start", None)
    result["environment"] = harness.environment_info()  # CPU flags etc. with every configuration
    from .suites import get_model

    bm = get_model(model)
    if "torchvision" in bm.requires:
        from .vendor import ensure_torchvision, torchvision_info

        ensure_torchvision()  # before anything imports transformers / timm
        result["process"]["torchvision"] = torchvision_info()
    heartbeat("imports", None)
    for name in opts.backends:
        result["backends"][name] = harness._backend_entry(name)
    result["process"]["imports_s"] = time.perf_counter() - t0
    uses_inductor = any(harness.BACKENDS[b].uses_inductor_codegen for b in opts.backends
                        if b in harness.BACKENDS and result["backends"][b]["status"] == "available")
    with harness.fresh_inductor_cache_dir(uses_inductor and opts.inductor_cache == "cold") as cache_dir:
        result["process"]["inductor_cache_dir"] = cache_dir or "default"
        heartbeat("build", None)
        try:
            t_b = time.perf_counter()
            bm, m, why = harness.build_model(model, opts.seed, threads)
            result["process"]["build_s"] = time.perf_counter() - t_b
            result["process"]["rss_after_build_mb"] = harness.rss_mb()
        except Exception as e:
            m, why = None, f"build failed: {type(e).__name__}: {e}"
            result["errors"].append({"model": model, "batch": batch, "threads": threads, "stage": "build",
                                     "error": why, "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
        if m is None:
            if why and why.startswith("requires"):
                result["errors"].append({"model": model, "batch": batch, "threads": threads,
                                         "stage": "unavailable", "error": why})
            _log(f"{label} skipped: {why}")
            result["complete"] = True
            return result
        if uses_inductor:
            heartbeat("inductor_warmup", None)
            try:
                result["process"]["inductor_warmup_compile_s"] = harness.inductor_warmup()
            except Exception as e:
                result["errors"].append({"stage": "inductor_warmup", "error": f"{type(e).__name__}: {e}"})
        try:
            heartbeat("dtype", None)
            try:
                rm = harness.model_for_dtype(bm, m, bm.make_inputs(batch, opts.seed), opts.dtype, batch, opts.seed)
            except Exception as e:
                if opts.dtype != "int8":
                    raise
                # the model cannot be quantized (export or the quantizer fails): recorded, not "eager failed"
                result["errors"].append({"model": model, "batch": batch, "threads": threads, "stage": "quantize",
                                         "error": f"{type(e).__name__}: {str(e)[:800]}",
                                         "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
                _log(f"{label} int8 quantization failed: {type(e).__name__}: {str(e)[:300]}")
                result["complete"] = True
                return result
            entry = harness.run_config(bm, rm.model, rm.inputs, batch, threads, opts, _log, label, heartbeat,
                                       float_model=rm.float_model, quant_info=rm.quant_info)
            entry["process"] = result["process"]
            result["entry"] = entry
        except Exception as e:
            result["errors"].append({"model": model, "batch": batch, "threads": threads, "stage": "run",
                                     "error": f"{type(e).__name__}: {e}",
                                     "traceback_tail": traceback.format_exc(limit=-16)[-3000:]})
            _log(f"{label} failed: {e}")
    heartbeat("done", None)
    result["complete"] = True
    result["wall_s"] = time.perf_counter() - t0
    return result


def memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Peak RSS of a process that builds the model and runs one backend (no other backend)."""
    import torch

    from . import harness
    from .backends import BACKENDS
    from .harness import BenchOptions

    opts = BenchOptions.from_dict(spec["opts"])
    name = spec["backend"]
    model, batch, threads = spec["model"], int(spec["batch"]), int(spec["threads"])
    out: dict[str, Any] = {"kind": "memory", "backend": name, "rss_at_start_mb": harness.rss_mb()}
    from .suites import get_model

    if "torchvision" in get_model(model).requires:
        from .vendor import ensure_torchvision

        ensure_torchvision()
    ok, reason, _ = harness.backend_availability(name)
    if not ok:
        out.update(status="unavailable", reason=reason)
        return out
    with harness.fresh_inductor_cache_dir(opts.inductor_cache == "cold"):
        bm, m, why = harness.build_model(model, opts.seed, threads)
        if m is None:
            out.update(status="unavailable", reason=why)
            return out
        torch.set_num_threads(threads)
        rm = harness.model_for_dtype(bm, m, bm.make_inputs(batch, opts.seed), opts.dtype, batch, opts.seed)
        m, inputs = rm.model, rm.inputs
        del rm
        import gc

        gc.collect()
        out["rss_after_build_mb"] = harness.rss_mb()
        out["peak_reset"] = harness.reset_peak_rss()
        try:
            ctx = BACKENDS[name].compile(m, opts, threads)
            with torch.no_grad():
                with ctx.first_call:
                    ctx.compiled(*inputs.args, **inputs.kwargs)
                for _ in range(max(1, opts.warmup)):
                    ctx.compiled(*inputs.args, **inputs.kwargs)
        except Exception as e:
            out.update(status="failed", reason=f"{type(e).__name__}: {str(e)[:500]}")
            return out
        out["rss_after_mb"] = harness.rss_mb()
        out["peak_rss_mb"] = harness.peak_rss_mb()
        out["status"] = "ok"
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m verifuse_bench.worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    mode = spec.get("mode", "config")
    fn = {"config": run_one, "memory": memory}[mode]
    result = fn(spec)
    _write_json(spec["out"], result)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
