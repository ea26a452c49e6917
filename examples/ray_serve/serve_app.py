"""A verifuse-compiled model as a Ray Serve deployment (issue 18).

Each replica builds the model (random weights from a fixed seed: no downloads), compiles it with
the chosen backend and answers tensors with tensors. With ``backend="verifuse"`` the replicas
share ``cache_dir``: the first one to compile stores its plan (proof verdicts, instance checks,
tuning decisions, optimized IR) in the plan cache, and every later replica (the second one, or a
replacement Ray starts after a crash) replays it: no Z3 query and no timing.

Each replica writes what its start cost to ``info_dir/replica-<pid>.json`` (the load test reads
them): for verifuse the counters of its compile (plan-cache hits, plans compiled, Z3 queries,
autotuner timings, fallbacks) and each graph's plan source and plan note. Ray Serve runs a
synchronous ``__call__`` in a thread pool, so up to ``max_ongoing_requests`` requests call the one
compiled callable from several threads at once.

``app(..., env_vars=...)`` gives the replica processes extra environment variables: the load test's
kill-in-flush mode sets verifuse's ``VERIFUSE_TEST_PAUSE_IN_FLUSH`` hook there, so a replica
writing the shared plan cache pauses inside the write long enough to be killed.
"""
from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

import torch
from ray import serve

import models


@serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=8, health_check_period_s=2,
                  health_check_timeout_s=30, graceful_shutdown_timeout_s=5)
class CompiledModel:
    def __init__(self, model_name: str, backend: str, cache_dir: str, info_dir: str, threads: int = 1) -> None:
        init_started_at = time.time()  # wall clock: the load test tells a replacement by it
        start = time.perf_counter()
        torch.set_num_threads(threads)
        self.model, example = models.build(model_name)
        built = time.perf_counter()
        self.fn = self._compile(backend, cache_dir)
        stats_before = self._stats(backend)
        with self._collect(backend) as graphs, torch.no_grad():
            self.fn(example)  # the compile (or the plan cache's replay) happens here
        ready = time.perf_counter()
        self.threads_seen: set[int] = set()
        self.lock = threading.Lock()
        info = {
            "pid": os.getpid(),
            "model": model_name,
            "backend": backend,
            "build_s": built - start,
            "compile_and_first_call_s": ready - built,
            "start_to_ready_s": ready - start,
            "init_started_at": init_started_at,
            "started_at": time.time(),
        }
        if backend == "verifuse":
            import verifuse

            after = verifuse.stats()
            info["plan_cache_hits"] = after.get("plan_cache_hits", 0) - stats_before.get("plan_cache_hits", 0)
            info["plans_compiled"] = after.get("plans_compiled", 0) - stats_before.get("plans_compiled", 0)
            info["solver_queries"] = after.get("solver_queries", 0) - stats_before.get("solver_queries", 0)
            info["timings_run"] = after.get("timings_run", 0) - stats_before.get("timings_run", 0)
            info["fallbacks"] = after.get("fallbacks", 0)
            from verifuse import _C

            st = os.stat(_C.__file__)  # the build part of the plan's environment key (verifuse/saved.py)
            info["verifuse_build"] = f"{st.st_size}-{st.st_mtime_ns}"
            # Per graph: "compiled" or "plan-cache", and why a cache entry was ignored or refused.
            info["plan_sources"] = [g.plan_source for g in graphs]
            info["plan_notes"] = [g.plan_note for g in graphs]
        os.makedirs(info_dir, exist_ok=True)
        with open(os.path.join(info_dir, f"replica-{os.getpid()}.json"), "w") as f:
            json.dump(info, f)

    def _compile(self, backend: str, cache_dir: str) -> Any:
        if backend == "eager":
            return self.model
        if backend == "inductor":
            import importlib

            # (importlib: cloudpickle, shipping this class to the replicas, cannot pickle the
            # config object a dotted `import torch._inductor.config` names)
            inductor_config = importlib.import_module("torch._inductor.config")
            # Freezing must be on at trace time or inductor keeps weights as inputs (design.md §6);
            # config is per thread, and the first call below (same thread) is the trace.
            inductor_config.freezing = True
            return torch.compile(self.model, backend="inductor")
        if backend == "verifuse":
            return torch.compile(self.model, backend="verifuse", options={"cache_dir": cache_dir})
        raise ValueError(f"unknown backend {backend!r}")

    @staticmethod
    def _collect(backend: str) -> Any:
        """The GraphReports of the graphs compiled in the block (verifuse), else nothing."""
        if backend != "verifuse":
            import contextlib

            return contextlib.nullcontext([])
        from verifuse import report

        return report.collect()

    @staticmethod
    def _stats(backend: str) -> dict:
        if backend != "verifuse":
            return {}
        import verifuse

        return dict(verifuse.stats())

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        with self.lock:
            self.threads_seen.add(threading.get_ident())
        with torch.no_grad():
            return self.fn(x)

    def threads(self) -> int:
        """How many threads have run requests on this replica so far."""
        return len(self.threads_seen)

    def pid(self) -> int:
        return os.getpid()


def app(model_name: str, backend: str, cache_dir: str, info_dir: str, replicas: int = 2, threads: int = 1,
        env_vars: dict[str, str] | None = None):
    """The application: ``serve.run(app(...), name=...)``. ``env_vars``: extra environment variables
    of the replica processes (merged with the job's), e.g. the load test's
    ``VERIFUSE_TEST_PAUSE_IN_FLUSH`` hook."""
    options: dict[str, Any] = {"num_replicas": replicas}
    if env_vars:
        # (replaces the decorator's ray_actor_options: repeat its num_cpus)
        options["ray_actor_options"] = {"num_cpus": 1, "runtime_env": {"env_vars": dict(env_vars)}}
    return CompiledModel.options(**options).bind(model_name, backend, cache_dir, info_dir, threads)
