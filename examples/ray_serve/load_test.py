"""Bounded load against the Ray Serve deployment of serve_app.py, on a local Ray cluster this script
starts itself (loopback only, no dashboard, no HTTP proxy: clients use deployment handles).

For each model and backend: deploy 2 replicas (sharing one cache_dir), send ``--requests``
requests from ``--clients`` concurrent client threads, check every response against eager (the
same model built from the same seed in this process), and report throughput, p50/p99 latency,
each replica's start cost (and for verifuse whether it replayed a cached plan), requests lost
(none allowed) and wrong (none allowed), and retries. With ``--kill-at F`` (verifuse only, by
default) one replica is killed with SIGKILL once a fraction F of the requests is answered: Ray
Serve starts a replacement, the clients retry what the dead replica dropped.

    python examples/ray_serve/load_test.py --models resnet50,bert --backends verifuse,eager,inductor \
        --requests 2000 --clients 8 --kill-at 0.5 --json serve-results.json

The run stops by itself: a client gives up on a request after ``--retries`` failed attempts (it is
then counted as lost) and the whole run has a deadline.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _pythonpath() -> str:
    """verifuse from this checkout when it is not installed, plus the bench's model definitions."""
    parts = [HERE, os.path.join(ROOT, "bench")]
    try:
        import verifuse  # noqa: F401
    except ImportError:
        parts.append(os.path.join(ROOT, "backend", "python"))
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join(parts + ([old] if old else []))


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * len(s) + 0.5)) - 1))  # nearest rank
    return s[k]


def run_load(handle, payloads, refs, tolerance, requests: int, clients: int, retries: int, deadline: float,
             on_progress=None) -> dict:
    import torch

    lock = threading.Lock()
    state = {"next": 0, "done": 0, "retries": 0, "lost": 0, "wrong": 0, "errors": {}}
    latencies: list[float] = []

    def client() -> None:
        while True:
            with lock:
                i = state["next"]
                if i >= requests:
                    return
                state["next"] += 1
            x, ref = payloads[i % len(payloads)], refs[i % len(refs)]
            t0 = time.perf_counter()
            out = None
            for attempt in range(retries + 1):
                if time.time() > deadline:
                    break
                try:
                    out = handle.remote(x).result(timeout_s=120)
                    break
                except Exception as exc:  # a dead replica's requests fail: retry on another one
                    with lock:
                        state["retries"] += 1 if attempt < retries else 0
                        name = type(exc).__name__
                        state["errors"][name] = state["errors"].get(name, 0) + 1
                    time.sleep(0.2)
            elapsed = time.perf_counter() - t0
            with lock:
                if out is None:
                    state["lost"] += 1
                else:
                    latencies.append(elapsed)
                    if not torch.allclose(out, ref, **tolerance):
                        state["wrong"] += 1
                state["done"] += 1
                done = state["done"]
            if on_progress is not None:
                on_progress(done)

    start = time.perf_counter()
    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.time()))
    wall = time.perf_counter() - start
    hung = sum(t.is_alive() for t in threads)
    answered = len(latencies)
    return {
        "requests": requests,
        "answered": answered,
        "lost": state["lost"] + (requests - state["done"]),
        "wrong": state["wrong"],
        "retries": state["retries"],
        "errors": state["errors"],
        "clients_hung": hung,
        "wall_s": wall,
        "throughput_rps": answered / wall if wall > 0 else 0.0,
        "p50_ms": 1000 * percentile(latencies, 50),
        "p99_ms": 1000 * percentile(latencies, 99),
        "mean_ms": 1000 * statistics.fmean(latencies) if latencies else float("nan"),
    }


def replica_infos(info_dir: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(info_dir, "replica-*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    return sorted(out, key=lambda r: r["started_at"])


def wait_for_replicas(info_dir: str, count: int, timeout: float) -> list[dict]:
    end = time.time() + timeout
    while time.time() < end:
        infos = replica_infos(info_dir)
        if len(infos) >= count:
            return infos
        time.sleep(0.5)
    raise TimeoutError(f"only {len(replica_infos(info_dir))} of {count} replicas started in {timeout:.0f} s")


def serve_one(model_name: str, backend: str, args, cache_dir: str, kill_at: float | None) -> dict:
    import torch
    from ray import serve

    import models
    import serve_app

    info_dir = tempfile.mkdtemp(prefix=f"vf-serve-{model_name}-{backend}-")
    # Eager references, in this process, from the same seed as the replicas' weights.
    torch.set_num_threads(1)
    model, _ = models.build(model_name)
    payloads = models.inputs(model_name, args.distinct_inputs)
    with torch.no_grad():
        refs = [model(x) for x in payloads]
    del model
    app_name = f"{model_name}-{backend}"
    t0 = time.perf_counter()
    handle = serve.run(serve_app.app(model_name, backend, cache_dir, info_dir, replicas=args.replicas,
                                     threads=args.replica_threads), name=app_name, route_prefix=None)
    deploy_s = time.perf_counter() - t0
    infos = wait_for_replicas(info_dir, args.replicas, 600)
    killed: dict = {}

    def on_progress(done: int) -> None:
        if kill_at is None or killed or done < kill_at * args.requests:
            return
        killed["pid"] = infos[0]["pid"]  # the first replica that started
        killed["after_requests"] = done
        killed["at"] = time.time()
        try:
            os.kill(killed["pid"], signal.SIGKILL)
        except ProcessLookupError:
            killed["error"] = "already gone"

    deadline = time.time() + args.deadline
    result = run_load(handle, payloads, refs, models.TOLERANCE[model_name], args.requests, args.clients,
                      args.retries, deadline, on_progress if kill_at is not None else None)
    if killed:
        # The replacement replica: Ray Serve starts it after its health check sees the crash.
        try:
            after = wait_for_replicas(info_dir, args.replicas + 1, 300)
            killed["replacement"] = after[-1]
            killed["replacement_ready_after_kill_s"] = after[-1]["started_at"] - killed["at"]
        except TimeoutError as err:
            killed["replacement"] = str(err)
    try:
        threads_per_replica = sorted({handle.threads.remote().result(timeout_s=30) for _ in range(8)})
    except Exception as exc:  # informative only
        threads_per_replica = [f"{type(exc).__name__}"]
    serve.delete(app_name)
    result.update({"model": model_name, "backend": backend, "deploy_s": deploy_s,
                   "replicas": replica_infos(info_dir), "killed": killed or None,
                   "threads_per_replica_seen": threads_per_replica})
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,bert")
    p.add_argument("--backends", default="verifuse,eager,inductor")
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--replica-threads", type=int, default=1, help="torch intra-op threads per replica")
    p.add_argument("--kill-at", type=float, default=0.5,
                   help="kill one verifuse replica after this fraction of the requests (negative: never)")
    p.add_argument("--kill-backends", default="verifuse")
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--distinct-inputs", type=int, default=16)
    p.add_argument("--deadline", type=float, default=1800, help="seconds per model and backend")
    p.add_argument("--cache-dir", default=None, help="the replicas' shared cache_dir (default: a fresh one)")
    p.add_argument("--num-cpus", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    os.environ["PYTHONPATH"] = _pythonpath()
    sys.path[:0] = [HERE, os.path.join(ROOT, "bench")]
    import ray
    from ray import serve

    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="vf-serve-cache-")
    ray.init(address="local", num_cpus=args.num_cpus or max(args.replicas, os.cpu_count() or 1),
             include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}})
    serve.start(proxy_location="Disabled")
    results = []
    try:
        for model_name in args.models.split(","):
            for backend in args.backends.split(","):
                kill = args.kill_at if args.kill_at >= 0 and backend in args.kill_backends.split(",") else None
                r = serve_one(model_name, backend, args, cache_dir, kill)
                results.append(r)
                print(summary_line(r), flush=True)
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump({"cache_dir": cache_dir, "results": results}, f, indent=1)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(table(results))
    bad = [r for r in results if r["lost"] or r["wrong"] or r["clients_hung"]]
    return 1 if bad else 0


def summary_line(r: dict) -> str:
    reps = ", ".join(
        f"pid {i['pid']}: ready in {i['start_to_ready_s']:.1f} s"
        + (f" ({'plan cache' if i.get('plan_cache_hits') else 'compiled'}, {i.get('solver_queries', 0)} Z3 queries, "
           f"{i.get('timings_run', 0)} timings)" if r["backend"] == "verifuse" else "")
        for i in r["replicas"])
    kill = ""
    if r["killed"]:
        k = r["killed"]
        rep = k.get("replacement")
        kill = (f"; killed pid {k['pid']} after {k['after_requests']} answers"
                + (f", replacement ready {k['replacement_ready_after_kill_s']:.1f} s later" if isinstance(rep, dict) else f", {rep}"))
    return (f"{r['model']:9s} {r['backend']:9s} {r['answered']}/{r['requests']} answered, lost {r['lost']}, "
            f"wrong {r['wrong']}, retries {r['retries']}, {r['throughput_rps']:.1f} req/s, p50 {r['p50_ms']:.1f} ms, "
            f"p99 {r['p99_ms']:.1f} ms; replicas: {reps}{kill}")


def table(results: list[dict]) -> str:
    lines = ["| model | backend | answered | lost | wrong | retries | req/s | p50 ms | p99 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['backend']} | {r['answered']}/{r['requests']} | {r['lost']} | {r['wrong']} | "
                     f"{r['retries']} | {r['throughput_rps']:.1f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
