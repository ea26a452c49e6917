"""One process per configuration: the parent side.

For every configuration (model x batch x threads, in the run's dtype) the parent starts ``python -m
verifuse_bench.worker`` and waits; the worker writes ``<run>.d/<model>-b<batch>-t<threads>[-bf16].json``
(no suffix for float32).
The parent merges those files into the report after every configuration (JSON and markdown,
marked ``"partial"`` until the end), so an interrupted run keeps what it measured, and
``--resume`` reuses every finished file whose settings fingerprint matches.

If a worker dies (a segfault in a backend, the OOM killer, the per-configuration timeout), the
heartbeat file says which backend it was compiling or warming up; that backend is recorded as
failed with the reason and the configuration is run again without it. A death while timing
(all backends interleaved) cannot be attributed and is recorded as an error of the configuration.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .harness import (BenchOptions, _hms, _new_report, _one_line, config_list, dtype_tag, finish_report)

_FINGERPRINT_KEYS = ("iters", "warmup", "chunk", "time_budget_s", "min_iters", "seed", "inductor_cache",
                     "verifuse_cache", "verifuse_options", "memory", "recompile_limit")


def fingerprint(opts: BenchOptions, model: str, batch: int, threads: int) -> str:
    d = {k: getattr(opts, k) for k in _FINGERPRINT_KEYS}
    if opts.dtype != "float32":  # float32 leaves it out: the fingerprints of earlier runs stay valid
        d["dtype"] = opts.dtype
    d.update(model=model, batch=batch, threads=threads, backends=sorted(opts.backends))
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parent.parent)
    # the child must import this very verifuse_bench (a source checkout, or the installed one,
    # which it finds by itself)
    import site

    site_dirs = {os.path.realpath(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    if os.path.realpath(pkg_parent) not in site_dirs and \
            pkg_parent not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _spawn(spec: dict[str, Any], timeout_s: float | None) -> tuple[dict[str, Any] | None, str | None]:
    """Run one worker; (its result, None) or (None, why it has none)."""
    with tempfile.TemporaryDirectory(prefix="verifuse-bench-") as td:
        spec_path = Path(td) / "spec.json"
        if "out" not in spec:
            spec["out"] = str(Path(td) / "out.json")
        spec_path.write_text(json.dumps(spec, default=str))
        proc = subprocess.Popen([sys.executable, "-m", "verifuse_bench.worker", str(spec_path)],
                                env=_child_env(), start_new_session=True)
        why = None
        try:
            rc = proc.wait(timeout=timeout_s)
            if rc != 0:
                why = (f"the process was killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0
                       else f"the process exited with status {rc}")
        except subprocess.TimeoutExpired:
            why = f"the process was killed after the {timeout_s:.0f}s configuration timeout"
            _kill(proc)
        except BaseException:
            _kill(proc)  # Ctrl-C: take the worker (and its compile workers) down too
            raise
        out = Path(spec["out"])
        if out.exists():
            try:
                return json.loads(out.read_text()), None
            except ValueError as e:
                why = why or f"unreadable result: {e}"
        return None, why or "the process wrote no result"


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=30)
    except Exception:
        pass


def _opts_dict(opts: BenchOptions, **over) -> dict[str, Any]:
    from dataclasses import asdict

    d = asdict(opts)
    d.update(over)
    d["isolate"] = False
    return d


def run_config_process(opts: BenchOptions, model: str, batch: int, threads: int, out_path: Path, label: str,
                       log) -> dict[str, Any]:
    """One configuration in a fresh process; retried without a backend that killed the process."""
    backends = list(opts.backends)
    killed: dict[str, str] = {}
    attempts = 0
    hb = out_path.with_name(out_path.name + ".stage")
    while True:
        attempts += 1
        spec = {"mode": "config", "opts": _opts_dict(opts, backends=backends), "model": model, "batch": batch,
                "threads": threads, "label": label, "out": str(out_path), "heartbeat": str(hb),
                "fingerprint": fingerprint(opts, model, batch, threads)}
        if out_path.exists():
            out_path.unlink()
        res, why = _spawn(spec, opts.config_timeout_s)
        if res is not None and res.get("complete"):
            break
        stage = {}
        try:
            stage = json.loads(hb.read_text())
        except (OSError, ValueError):
            pass
        culprit = stage.get("backend")
        where = f"{stage.get('stage', '?')} {culprit or ''}".strip()
        if culprit and culprit != "eager" and culprit in backends:
            killed[culprit] = f"{why} while in stage '{stage.get('stage')}' of {culprit}"
            log(f"{label} {culprit}: {killed[culprit]}; running the configuration again without it")
            backends.remove(culprit)
            continue
        res = {"kind": "config", "model": model, "batch": batch, "threads": threads, "dtype": opts.dtype,
               "complete": False,
               "entry": None, "backends": {},
               "errors": [{"model": model, "batch": batch, "threads": threads, "stage": "process",
                           "error": f"{why} (stage: {where})"}]}
        break
    if hb.exists():
        hb.unlink()
    res["attempts"] = attempts
    entry = res.get("entry")
    if entry is not None:
        entry.setdefault("process", {})["attempts"] = attempts
        for name, reason in killed.items():
            entry["backends"][name] = {"status": "failed", "reason": reason}
        # keep the user's backend order in the row
        entry["backends"] = {n: entry["backends"][n] for n in opts.backends if n in entry["backends"]}
        from .harness import config_ratios

        entry["ratios"] = config_ratios(entry["backends"], chunk=opts.chunk)
    res["killed"] = killed
    from .worker import _write_json

    _write_json(out_path, res)
    return res


def config_file_name(model: str, batch: int, threads: int, dtype: str = "float32") -> str:
    """``<model>-b<batch>-t<threads>[-bf16|-int8].json``: the configuration's key, dtype included (float32
    has no suffix, as in every run before --dtype existed)."""
    return f"{model}-b{batch}-t{threads}{dtype_tag(dtype)}.json"


def _reusable(opts: BenchOptions, cfg_dir: Path, model: str, batch: int, threads: int) -> dict[str, Any] | None:
    path = cfg_dir / config_file_name(model, batch, threads, opts.dtype)
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if old.get("complete") and old.get("fingerprint") == fingerprint(opts, model, batch, threads):
        return old
    return None


def memory_processes(opts: BenchOptions, entry: dict[str, Any], log, label: str) -> None:
    """``memory="isolated"``: one more process per ok backend, its peak RSS alone."""
    for name, b in entry["backends"].items():
        if b.get("status") != "ok":
            continue
        log(f"{label} {name}: isolated memory run")
        res, why = _spawn({"mode": "memory", "opts": _opts_dict(opts), "model": entry["model"],
                           "batch": entry["batch"], "threads": entry["threads"], "backend": name},
                          opts.config_timeout_s)
        b.setdefault("memory", {})["isolated"] = res if res is not None else {"status": "failed", "reason": why}


def run_isolated(opts: BenchOptions, log: Callable[[str], None], argv: list[str] | None,
                 json_path: Path) -> dict[str, Any]:
    from .report import write_report

    report = _new_report(opts, argv)
    report["environment"]["isolation"] = "one process per configuration"
    cfg_dir = json_path.with_name(json_path.stem + ".d")
    report["config_dir"] = str(cfg_dir)
    configs = config_list(opts)
    log(f"{len(configs)} configurations ({len(opts.models)} models), backends {', '.join(opts.backends)}; "
        f"per-configuration results in {cfg_dir}")
    t_run = time.perf_counter()
    reusable = {cfg: _reusable(opts, cfg_dir, *cfg) for cfg in configs} if opts.resume else {}
    # No separate probe process: every configuration's process records which backends it found
    # (and why not); the report's "backends" is the first record of each.
    done_times: list[float] = []
    for k, (model, batch, threads) in enumerate(configs, 1):
        label = f"[{k}/{len(configs)} {model} b{batch} t{threads}{dtype_tag(opts.dtype)}]"
        out_path = cfg_dir / config_file_name(model, batch, threads, opts.dtype)
        res = reusable.get((model, batch, threads))
        if res is not None:
            log(f"{label} reused {out_path.name} (--resume)")
        if res is None:
            t0 = time.perf_counter()
            log(f"{label} starting (elapsed {_hms(time.perf_counter() - t_run)})")
            res = run_config_process(opts, model, batch, threads, out_path, label, log)
            if opts.memory == "isolated" and res.get("entry"):
                memory_processes(opts, res["entry"], log, label)
                from .worker import _write_json

                _write_json(out_path, res)
            done_times.append(time.perf_counter() - t0)
        for name, b in res.get("backends", {}).items():
            if name not in report["backends"]:
                report["backends"][name] = b
                if b.get("status") != "available":
                    log(f"backend {name}: unavailable ({b.get('reason')})")
                elif b.get("note"):
                    log(f"backend {name}: note: {b['note']}")
        tv = (res.get("process") or {}).get("torchvision")
        if tv and "torchvision" not in report["environment"]:
            report["environment"]["torchvision"] = tv
        if res.get("entry"):
            report["results"].append(res["entry"])
            log(f"{label} {_one_line(res['entry'])}")
        report["errors"] += res.get("errors", [])
        left = len(configs) - k
        eta = f", about {_hms(left * sum(done_times) / len(done_times))} left" if done_times and left else ""
        log(f"{label} done; elapsed {_hms(time.perf_counter() - t_run)}{eta}")
        report["partial"] = {"done": k, "total": len(configs)}
        finish_report(report, opts)
        write_report(report, json_path, plot=False)
    report.pop("partial", None)
    finish_report(report, opts)
    return report
