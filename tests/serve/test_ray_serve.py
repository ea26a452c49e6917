"""Ray Serve (issue 18): examples/ray_serve/load_test.py against 2 replicas on a local Ray cluster
(loopback), verifuse vs eager vs inductor, one verifuse replica killed in the middle of the load.

Not part of `make test` (minutes of load on 2 cores): `make test-serve` runs it, with
SERVE_MODELS / SERVE_BACKENDS / SERVE_REQUESTS / SERVE_CLIENTS to scale it (defaults: resnet50
and bert, all three backends, 2,000 requests from 8 clients). Asserts: every request answered
(retries allowed and reported), every answer equal to eager's within the model's tolerance, the
killed replica replaced, and every verifuse replica after the first one started from the plan
cache with no Z3 query and no timing.

Issue 40: a replica killed while it writes the shared cache (load_test.py --kill-in-flush). From an
empty cache_dir, the replicas carry verifuse's VERIFUSE_TEST_PAUSE_IN_FLUSH hook; the first one to
flush the plan store pauses there (lock held, index not committed) and is SIGKILLed. Asserts: the
kill landed inside that pause with nothing committed, the other replica compiled and stored a plan,
Ray's replacement replayed it (1 plan-cache hit, 0 Z3 queries, 0 timings, 0 fallbacks), every
request answered and equal to eager, and afterwards no lock file is still locked and a fresh
process replays the stored plan within a timeout. SERVE_FLUSH_MODELS / SERVE_FLUSH_REQUESTS /
SERVE_FLUSH_CLIENTS / SERVE_FLUSH_PAUSE scale it (defaults: resnet50, 200 requests, 4 clients, 5 s).
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray.serve")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOAD_TEST = os.path.join(ROOT, "examples", "ray_serve", "load_test.py")
sys.path.insert(0, os.path.dirname(LOAD_TEST))
import load_test  # noqa: E402  (kill_in_flush_problems: the same checks the script's exit code uses)


def test_ray_serve_two_replicas_bounded_load_with_a_killed_replica(tmp_path):
    out = tmp_path / "serve.json"
    cmd = [sys.executable, LOAD_TEST, "--models", os.environ.get("SERVE_MODELS", "resnet50,bert"),
           "--backends", os.environ.get("SERVE_BACKENDS", "verifuse,eager,inductor"),
           "--requests", os.environ.get("SERVE_REQUESTS", "2000"), "--clients", os.environ.get("SERVE_CLIENTS", "8"),
           "--kill-at", "0.5", "--json", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=int(os.environ.get("SERVE_TIMEOUT", "7200")))
    table = [l for l in proc.stdout.splitlines() if l.startswith("|") or " answered, lost " in l]
    print("\n".join(table))  # the measured output (pytest -s shows it)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results, proc.stdout[-3000:]
    for r in results:
        name = f"{r['model']}/{r['backend']}"
        assert r["answered"] == r["requests"] and r["lost"] == 0, (name, r)
        assert r["wrong"] == 0, (name, r)
        assert r["clients_hung"] == 0, (name, r)
        if r["backend"] != "verifuse":
            continue
        reps = r["replicas"]
        assert all(i.get("fallbacks", 0) == 0 for i in reps), (name, reps)
        # The first replica compiled (or found an earlier run's plan); every later one replayed.
        for later in reps[1:]:
            assert later["plan_cache_hits"] == 1 and later["solver_queries"] == 0 and later["timings_run"] == 0, (name, reps)
        k = r["killed"]
        assert k and isinstance(k.get("replacement"), dict), (name, k)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_ray_serve_kill_in_flush_replacement_replays_a_valid_plan(tmp_path):
    out = tmp_path / "kill-in-flush.json"
    cmd = [sys.executable, LOAD_TEST, "--models", os.environ.get("SERVE_FLUSH_MODELS", "resnet50"),
           "--backends", "verifuse", "--kill-in-flush", "--flush-pause", os.environ.get("SERVE_FLUSH_PAUSE", "5"),
           "--requests", os.environ.get("SERVE_FLUSH_REQUESTS", "200"),
           "--clients", os.environ.get("SERVE_FLUSH_CLIENTS", "4"), "--kill-at", "-1",
           "--json", str(out), "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=int(os.environ.get("SERVE_TIMEOUT", "7200")))
    lines = [l for l in proc.stdout.splitlines() if l.startswith("|") or " answered, lost " in l or "kill-in-flush:" in l]
    print("\n".join(lines))
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert results, proc.stdout[-3000:]
    for r in results:
        name = r["model"]
        k = r["killed"] or {}
        # The kill: the first replica to write the plan store, inside that write (its pause), before
        # its index was committed; the process is gone and never reported ready.
        assert k.get("mode") == "in-flush" and k.get("pid") and "at" in k, (name, k)
        assert k["dead"], (name, k)
        assert 0 <= k["in_flush_s"] < k["pause_s"], (name, k)
        assert not k["index_committed_at_kill"], (name, k["cache_at_kill"])
        assert k["pid"] not in [i["pid"] for i in r["replicas"]], (name, r["replicas"])
        # Every request answered, every answer eager's.
        assert r["answered"] == r["requests"] and r["lost"] == 0 and r["clients_hung"] == 0, (name, r)
        assert r["wrong"] == 0, (name, r)
        # The replacement replayed a valid plan: the one the other original replica compiled.
        rep = k["replacement"]
        assert isinstance(rep, dict), (name, rep)
        assert (rep["plan_cache_hits"], rep["plans_compiled"], rep["solver_queries"], rep["timings_run"],
                rep["fallbacks"]) == (1, 0, 0, 0, 0), (name, rep)
        assert set(rep["plan_sources"]) == {"plan-cache"} and not any(rep["plan_notes"]), (name, rep)
        assert [i["plans_compiled"] for i in k["originals"]] == [1], (name, k["originals"])
        # The store afterwards: no lock left locked, a fresh process replays it and answers like eager.
        a = r["after_check"]
        assert not a.get("error"), (name, a)
        assert a["stale_locks"] == [], (name, a)
        assert (a["plan_cache_hits"], a["plans_compiled"], a["solver_queries"], a["timings_run"]) == (1, 0, 0, 0), (name, a)
        assert set(a["plan_sources"]) == {"plan-cache"} and not any(a["plan_notes"]), (name, a)
        assert a["equal_to_eager"], (name, a)
        assert load_test.kill_in_flush_problems(r) == [], (name, r["kill_in_flush_problems"])
        _assert_checks_can_fail(r)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _assert_checks_can_fail(r: dict) -> None:
    """The passing result, broken one way at a time, fails load_test's checks: a run without the
    kill, a kill after the pause ended, a replacement that compiled, a fresh process that did not
    replay or timed out, a stale lock, a wrong answer."""
    def broken(change) -> list[str]:
        b = copy.deepcopy(r)
        change(b)
        return load_test.kill_in_flush_problems(b)

    def compiled(info: dict) -> None:
        info.update(plan_cache_hits=0, plans_compiled=1, solver_queries=1, plan_sources=["compiled"])

    assert broken(lambda b: b.update(killed=None))
    assert broken(lambda b: b["killed"].update(error="no process paused in a flush of plans-v1", pid=None))
    assert broken(lambda b: b["killed"].update(in_flush_s=b["killed"]["pause_s"] + 0.1))
    assert broken(lambda b: b["killed"].update(index_committed_at_kill=True))
    assert broken(lambda b: compiled(b["killed"]["replacement"]))
    assert broken(lambda b: b["killed"]["replacement"].update(plan_notes=["plan cache entry refused, compiled from scratch: x"]))
    assert broken(lambda b: b["killed"].update(replacement="0 replicas started after the kill, expected 1"))
    assert broken(lambda b: compiled(b["after_check"]))
    assert broken(lambda b: b.update(after_check={"error": "the fresh process did not finish in 300 s (a stale lock?)"}))
    assert broken(lambda b: b["after_check"].update(stale_locks=["plans-v1.vfstore.lock"]))
    assert broken(lambda b: b.update(wrong=1))
