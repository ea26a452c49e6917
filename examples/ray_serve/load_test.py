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

With ``--kill-in-flush`` (issue 40; verifuse only) the kill happens inside the write of the shared
plan cache instead, from an empty cache_dir (one per model, ``<cache_dir>/kill-in-flush-<model>``):
the replicas get verifuse's test hook ``VERIFUSE_TEST_PAUSE_IN_FLUSH=plans-v1:<marker dir>:<s>``,
so a replica flushing the plan store, holding the store's lock with its blob files written and its
index not yet committed, creates ``<marker dir>/<pid>`` and sleeps ``--flush-pause`` seconds. The
load test waits for the first marker and SIGKILLs that pid (the first replica to compile, still in
its constructor); the other replica, which was waiting on the per-key compile lock, compiles and
stores its plan; Ray Serve starts a replacement, which must replay that plan (1 plan-cache hit, 0
Z3 queries, 0 timings, 0 fallbacks). Then the requests are sent and checked against eager as
above, and after the deployment is gone the store is checked from here: no lock file left locked,
and a fresh process (``torch.compile`` of the same model with the same cache_dir, under a timeout)
replays the plan with 0 Z3 queries and eager's answer.

    python examples/ray_serve/load_test.py --models resnet50 --backends verifuse --kill-in-flush \
        --requests 200 --clients 4 --json kill-in-flush.json

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
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# verifuse's plan cache: the record store the kill-in-flush mode pauses in
# (kPlanStore in backend/src/driver/compile.cpp): <cache_dir>/plans-v1.vfstore, .blobs/, .lock
PLAN_STORE = "plans-v1"


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


def serve_one(model_name: str, backend: str, args, cache_dir: str, kill_at: float | None,
              in_flush: bool = False) -> dict:
    import torch
    from ray import serve

    import models
    import serve_app

    info_dir = tempfile.mkdtemp(prefix=f"vf-serve-{model_name}-{backend}-")
    env_vars: dict[str, str] = {}
    killer = None
    if in_flush:
        marker_dir = tempfile.mkdtemp(prefix=f"vf-flush-markers-{model_name}-")
        env_vars["VERIFUSE_TEST_PAUSE_IN_FLUSH"] = f"{PLAN_STORE}:{marker_dir}:{args.flush_pause:g}"
        killer = FlushKiller(marker_dir, cache_dir, args.flush_pause, args.kill_timeout)
    # Eager references, in this process, from the same seed as the replicas' weights.
    torch.set_num_threads(1)
    model, _ = models.build(model_name)
    payloads = models.inputs(model_name, args.distinct_inputs)
    with torch.no_grad():
        refs = [model(x) for x in payloads]
    del model
    app_name = f"{model_name}-{backend}"
    t0 = time.perf_counter()
    if killer is not None:
        killer.start()  # kills inside serve.run: the replicas compile in their constructors
    handle = serve.run(serve_app.app(model_name, backend, cache_dir, info_dir, replicas=args.replicas,
                                     threads=args.replica_threads, env_vars=env_vars),
                       name=app_name, route_prefix=None)
    deploy_s = time.perf_counter() - t0
    infos = wait_for_replicas(info_dir, args.replicas, 600)
    killed: dict = {}
    if killer is not None:
        killed = killer.finish(infos)

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
    if killed and not in_flush:  # (in-flush: the replacement started before serve.run returned)
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
    if in_flush:
        result["cache_dir"] = cache_dir
        result["after_check"] = after_check(model_name, cache_dir, args.replica_threads, args.after_check_timeout)
    return result


def _cache_listing(cache_dir: str) -> dict[str, int]:
    """Every file under cache_dir (relative path -> bytes)."""
    out = {}
    for dirpath, _, files in os.walk(cache_dir):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                out[os.path.relpath(path, cache_dir)] = os.path.getsize(path)
            except OSError:  # replaced or deleted meanwhile
                pass
    return dict(sorted(out.items()))


def _gone(pid: int) -> bool:
    """The process has exited (no /proc entry, or a zombie its parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


class FlushKiller:
    """The kill-in-flush mode's killer: waits (in a thread, while serve.run deploys) for the first
    marker verifuse's VERIFUSE_TEST_PAUSE_IN_FLUSH hook creates, ``<marker dir>/<pid>``: that
    process holds the plan store's lock, its blobs written and its index not committed, and sleeps
    ``pause_s``. SIGKILLs that pid and records when (``in_flush_s``: seconds after it paused, less
    than ``pause_s`` when the kill landed inside the flush) and what the cache held then."""

    def __init__(self, marker_dir: str, cache_dir: str, pause_s: float, timeout_s: float) -> None:
        self.marker_dir, self.cache_dir, self.pause_s, self.timeout_s = marker_dir, cache_dir, pause_s, timeout_s
        self.result: dict = {"mode": "in-flush", "store": PLAN_STORE, "pause_s": pause_s, "marker_dir": marker_dir}
        self.stop = threading.Event()  # set once the deployment is up: no constructor flushes any more
        self.thread = threading.Thread(target=self._run, name="flush-killer", daemon=True)

    def start(self) -> None:
        self.result["armed_at"] = time.time()
        self.thread.start()

    def markers(self) -> dict[str, float]:
        """pid -> the time its flush paused (the marker's mtime), for every marker so far."""
        out = {}
        for name in os.listdir(self.marker_dir):
            if name.isdigit():
                try:
                    out[name] = os.stat(os.path.join(self.marker_dir, name)).st_mtime
                except FileNotFoundError:
                    pass
        return out

    def _run(self) -> None:
        r = self.result
        end = time.time() + self.timeout_s
        while not (found := self.markers()):
            if self.stop.is_set() or time.time() > end:
                r["error"] = (f"no process paused in a flush of {PLAN_STORE} "
                              + ("before the deployment was up" if self.stop.is_set() else
                                 f"within {self.timeout_s:.0f} s"))
                return
            time.sleep(0.02)
        pid_text, paused_at = min(found.items(), key=lambda kv: kv[1])
        pid = int(pid_text)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmdline = ""
        try:
            os.kill(pid, signal.SIGKILL)
            at = time.time()
        except ProcessLookupError:
            r.update(pid=pid, error="the paused process was gone before the kill")
            return
        # What the kill left: the blobs of the interrupted flush, no committed index (empty start).
        listing = _cache_listing(self.cache_dir)
        r.update(pid=pid, cmdline=cmdline[:200], paused_at=paused_at, at=at, in_flush_s=at - paused_at,
                 index_committed_at_kill=f"{PLAN_STORE}.vfstore" in listing, cache_at_kill=listing)
        end = time.time() + 30
        while not _gone(pid) and time.time() < end:
            time.sleep(0.05)
        r["dead"] = _gone(pid)

    def finish(self, infos: list[dict]) -> dict:
        """After serve.run: which replica replaced the killed one (the one whose constructor
        started after the kill) and which one compiled the stored plan."""
        self.stop.set()
        self.thread.join(60)
        r = self.result
        r["markers"] = self.markers()  # every process that paused in a plan-store flush
        if "at" not in r:
            r.setdefault("error", "the killer did not finish")
            return r
        later = [i for i in infos if i.get("init_started_at", 0) > r["at"]]
        r["originals"] = [i for i in infos if i not in later]
        if len(later) == 1:
            r["replacement"] = later[0]
            r["replacement_ready_after_kill_s"] = later[0]["started_at"] - r["at"]
            r["replacement_flushed_plan_store"] = str(later[0]["pid"]) in r["markers"]
        else:
            r["replacement"] = f"{len(later)} replicas started after the kill, expected 1"
        return r


def after_check(model_name: str, cache_dir: str, threads: int, timeout_s: float) -> dict:
    """The plan store after the run, from this side: no lock file under cache_dir still locked,
    and a fresh process compiling the same model with the same cache_dir replays the stored plan
    (plan-cache hit, 0 Z3 queries, 0 timings, no note of an ignored or refused entry) and answers
    like eager, within ``timeout_s`` (a stale lock would hang it)."""
    import fcntl

    out: dict = {"stale_locks": [], "cache": _cache_listing(cache_dir)}
    for rel in out["cache"]:
        if not rel.endswith(".lock"):
            continue
        with open(os.path.join(cache_dir, rel), "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                out["stale_locks"].append(rel)
    cmd = [sys.executable, os.path.abspath(__file__), "--after-check-child", model_name, cache_dir, str(threads)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out["error"] = f"the fresh process did not finish in {timeout_s:.0f} s (a stale lock?)"
        return out
    out["seconds"] = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        out["error"] = f"the fresh process failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
        return out
    out.update(json.loads(lines[-1]))
    return out


def after_check_child(model_name: str, cache_dir: str, threads: int) -> int:
    """The fresh process of after_check: prints one JSON line."""
    sys.path[:0] = [HERE, os.path.join(ROOT, "bench")]
    import torch

    import models
    import verifuse
    from verifuse import report

    torch.set_num_threads(threads)  # part of the plan's environment key: the replicas' count
    model, example = models.build(model_name)
    with torch.no_grad():
        ref = model(example)  # before the compile
    fn = torch.compile(model, backend="verifuse", options={"cache_dir": cache_dir})
    t0 = time.perf_counter()
    with report.collect() as graphs, torch.no_grad():
        out = fn(example)
    first_call_s = time.perf_counter() - t0
    stats = verifuse.stats()
    print(json.dumps({
        "pid": os.getpid(), "first_call_s": first_call_s, "verifuse_build": verifuse_build(),
        "plan_sources": [g.plan_source for g in graphs], "plan_notes": [g.plan_note for g in graphs],
        **{k: stats.get(k, 0) for k in ("plan_cache_hits", "plans_compiled", "solver_queries", "timings_run",
                                         "fallbacks")},
        "equal_to_eager": bool(torch.allclose(out, ref, **models.TOLERANCE[model_name])),
        "max_abs_diff": float((out - ref).abs().max()),
    }), flush=True)
    return 0


def verifuse_build() -> str:
    """The installed extension's size and mtime: the build part of a plan's environment key
    (verifuse/saved.py), so a plan stored by one build is not replayed by another."""
    from verifuse import _C

    st = os.stat(_C.__file__)
    return f"{st.st_size}-{st.st_mtime_ns}"


def _replayed(info: dict) -> list[str]:
    """Why a replica (or the after-check's process) did not replay a valid plan: [] when it did."""
    want = {"plan_cache_hits": 1, "plans_compiled": 0, "solver_queries": 0, "timings_run": 0, "fallbacks": 0}
    out = [f"{k}={info.get(k)!r}, expected {v}" for k, v in want.items() if info.get(k) != v]
    if not info.get("plan_sources") or any(s != "plan-cache" for s in info["plan_sources"]):
        out.append(f"plan sources {info.get('plan_sources')!r}, expected only 'plan-cache'")
    if any(info.get("plan_notes") or []):
        out.append(f"plan notes {info.get('plan_notes')!r}")
    return out


def kill_in_flush_problems(r: dict) -> list[str]:
    """What a kill-in-flush result fails of issue 40's claim ("a replica killed while it writes the
    shared cache; the replacement replays a valid plan and every answer equals eager"): [] when
    nothing."""
    problems = []
    if r["answered"] != r["requests"] or r["lost"] or r["clients_hung"]:
        problems.append(f"answered {r['answered']}/{r['requests']}, lost {r['lost']}, hung {r['clients_hung']}")
    if r["wrong"]:
        problems.append(f"{r['wrong']} answers differ from eager")
    k = r.get("killed") or {}
    if k.get("mode") != "in-flush" or not k.get("pid") or "at" not in k:
        return problems + [f"no replica was killed in a flush of the plan store: {k.get('error', k)!r}"]
    if k.get("error"):
        problems.append(k["error"])
    if not k.get("dead"):
        problems.append(f"pid {k['pid']} still alive after SIGKILL")
    if not 0 <= k["in_flush_s"] < k["pause_s"]:
        problems.append(f"killed {k['in_flush_s']:.2f} s after it paused in the flush: not inside the {k['pause_s']} s pause")
    if k.get("index_committed_at_kill"):
        problems.append("the plan store's index was already committed when the replica was killed")
    if any(i["pid"] == k["pid"] for i in r.get("replicas") or []):
        problems.append(f"the killed pid {k['pid']} finished its constructor")
    rep = k.get("replacement")
    if not isinstance(rep, dict):
        problems.append(f"no replacement replica: {rep!r}")
    else:
        problems += [f"replacement pid {rep['pid']}: {p}" for p in _replayed(rep)]
        if k.get("replacement_flushed_plan_store"):
            problems.append(f"replacement pid {rep['pid']} wrote the plan store (a replay should not)")
    # The killed write was never committed: the other original replica found no plan and compiled
    # (its proofs and tunings may come from the proof cache and tuning DB the killed one flushed).
    compiled = [i for i in k.get("originals") or [] if i.get("plans_compiled") == 1 and i.get("plan_cache_hits") == 0]
    if len(compiled) != 1:
        problems.append(f"expected the other original replica to compile the plan: {k.get('originals')!r}")
    a = r.get("after_check") or {}
    if a.get("error"):
        problems.append(f"after-check: {a['error']}")
    else:
        if a.get("stale_locks"):
            problems.append(f"after-check: lock files still locked: {a['stale_locks']}")
        problems += [f"after-check: {p}" for p in _replayed(a)]
        builds = {i.get("verifuse_build") for i in r.get("replicas") or []} | {a.get("verifuse_build")}
        if _replayed(a) and len(builds) > 1:
            problems.append(f"after-check: verifuse was reinstalled during the run (extension builds {sorted(map(str, builds))}): "
                            f"the stored plan belongs to another build")
        if not a.get("equal_to_eager"):
            problems.append(f"after-check: answer differs from eager (max abs diff {a.get('max_abs_diff')})")
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--after-check-child"]:  # after_check's fresh process
        return after_check_child(argv[1], argv[2], int(argv[3]))
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
    p.add_argument("--kill-in-flush", action="store_true",
                   help="(verifuse only) start from an empty cache_dir and kill the first replica that pauses inside "
                        "its write of the plan store, during the deployment (instead of --kill-at)")
    p.add_argument("--flush-pause", type=float, default=5.0,
                   help="--kill-in-flush: seconds a replica sleeps inside the plan store's flush")
    p.add_argument("--kill-timeout", type=float, default=600,
                   help="--kill-in-flush: seconds to wait for a replica to pause in the flush")
    p.add_argument("--after-check-timeout", type=float, default=300,
                   help="--kill-in-flush: seconds the fresh process checking the store may take")
    p.add_argument("--retries", type=int, default=5)
    p.add_argument("--distinct-inputs", type=int, default=16)
    p.add_argument("--deadline", type=float, default=1800, help="seconds per model and backend")
    p.add_argument("--cache-dir", default=None, help="the replicas' shared cache_dir (default: a fresh one)")
    p.add_argument("--num-cpus", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.kill_in_flush and set(args.backends.split(",")) != {"verifuse"}:
        p.error("--kill-in-flush needs --backends verifuse (the plan cache is verifuse's)")

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
                if args.kill_in_flush:
                    # An empty cache_dir per model: the first plan-store write is the one killed.
                    model_cache = os.path.join(cache_dir, f"kill-in-flush-{model_name}")
                    if os.path.isdir(model_cache) and os.listdir(model_cache):
                        raise SystemExit(f"--kill-in-flush: {model_cache} is not empty")
                    os.makedirs(model_cache, exist_ok=True)
                    r = serve_one(model_name, backend, args, model_cache, None, in_flush=True)
                    r["kill_in_flush_problems"] = kill_in_flush_problems(r)
                else:
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
    for r in results:
        for problem in r.get("kill_in_flush_problems") or []:
            print(f"{r['model']} {r['backend']}: kill-in-flush: {problem}")
    bad = [r for r in results if r["lost"] or r["wrong"] or r["clients_hung"] or r.get("kill_in_flush_problems")]
    return 1 if bad else 0


def summary_line(r: dict) -> str:
    reps = ", ".join(
        f"pid {i['pid']}: ready in {i['start_to_ready_s']:.1f} s"
        + (f" ({'plan cache' if i.get('plan_cache_hits') else 'compiled'}, {i.get('solver_queries', 0)} Z3 queries, "
           f"{i.get('timings_run', 0)} timings)" if r["backend"] == "verifuse" else "")
        for i in r["replicas"])
    kill = ""
    if r["killed"] and r["killed"].get("mode") == "in-flush":
        k = r["killed"]
        rep = k.get("replacement")
        a = r.get("after_check") or {}
        kill = (f"; killed pid {k['pid']} {k['in_flush_s']:.2f} s into its {k['pause_s']:g} s pause inside the "
                f"{k['store']} flush (index committed: {k['index_committed_at_kill']})" if "at" in k
                else f"; NO KILL IN FLUSH: {k.get('error')}")
        if isinstance(rep, dict):
            kill += (f", replacement pid {rep['pid']} ready {k['replacement_ready_after_kill_s']:.1f} s later "
                     f"({rep.get('plan_cache_hits')} plan-cache hit, {rep.get('solver_queries')} Z3 queries, "
                     f"{rep.get('timings_run')} timings, {rep.get('fallbacks')} fallbacks)")
        elif rep is not None:
            kill += f", {rep}"
        kill += ("; after-check: " + (a["error"] if a.get("error") else
                 f"stale locks {len(a.get('stale_locks', []))}, fresh process {a.get('plan_sources')} with "
                 f"{a.get('solver_queries')} Z3 queries in {a.get('seconds', 0):.1f} s, equal to eager: "
                 f"{a.get('equal_to_eager')}"))
    elif r["killed"]:
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
