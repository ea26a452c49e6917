"""Ray Serve (issue 18): examples/ray_serve/load_test.py against 2 replicas on a local Ray cluster
(loopback), verifuse vs eager vs inductor, one verifuse replica killed in the middle of the load.

Not part of `make test` (minutes of load on 2 cores): `make test-serve` runs it, with
SERVE_MODELS / SERVE_BACKENDS / SERVE_REQUESTS / SERVE_CLIENTS to scale it (defaults: resnet50
and bert, all three backends, 2,000 requests from 8 clients). Asserts: every request answered
(retries allowed and reported), every answer equal to eager's within the model's tolerance, the
killed replica replaced, and every verifuse replica after the first one started from the plan
cache with no Z3 query and no timing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("ray.serve")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOAD_TEST = os.path.join(ROOT, "examples", "ray_serve", "load_test.py")


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
