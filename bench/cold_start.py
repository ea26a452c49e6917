"""Cold start of a fresh process (issue 18): time from the start of the process to the first
correct result, for ResNet-50 and BERT-base (random weights from a fixed seed, batch 1, 1 thread).

Modes, each in its own process:
  cold   torch.compile(backend="verifuse") into an empty cache_dir: Dynamo, AOT, rules with their
         proofs, instance checks, tuning, packing (what every replica paid before issue 18)
  save   verifuse.save(model, (x,), path) (aot_compile), cache_dir empty
  load   verifuse.load(path)(model, x): the saved plan replayed
  cache  torch.compile with the cache_dir the cold run filled: Dynamo and AOT run, the plan replays
  eager  the module alone (the floor: building it and one eager call)

    python bench/cold_start.py --models resnet50,bert [--repeats 1] [--json out.json]

Each child prints the phases (import, build the module, compile/load + first call) and verifuse's
counters (solver_queries, timings_run: 0 on a replayed plan). Never asserted on: a benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(mode: str, model_name: str, path: str, cache: str) -> None:
    import torch

    torch.set_num_threads(1)
    import verifuse

    sys.path[:0] = [os.path.join(ROOT, "examples", "ray_serve"), HERE]
    import models

    t_import = time.perf_counter()
    model, x = models.build(model_name)
    t_built = time.perf_counter()
    with torch.no_grad():
        if mode == "eager":
            y = model(x)
        elif mode in ("cold", "cache"):
            y = torch.compile(model, backend="verifuse", options={"cache_dir": cache})(x)
        elif mode == "save":
            # BERT: Dynamo puts an ID_MATCH guard on the transformers module, which torch cannot
            # save; ResNet-50: verifuse's default filter (drop_weight_guards).
            if model_name == "bert":
                verifuse.save(model, (x,), path, cache_dir=cache, guard_filter_fn=torch.compiler.skip_all_guards_unsafe)
            else:
                verifuse.save(model, (x,), path, cache_dir=cache)
            y = verifuse.load(path)(model, x)  # (not timed as a load: same process)
        elif mode == "load":
            y = verifuse.load(path)(model, x)
        else:
            raise ValueError(mode)
    t_first = time.perf_counter()
    y = y[0] if isinstance(y, (list, tuple)) else y
    with torch.no_grad():
        ok = torch.allclose(y, model(x), **models.TOLERANCE[model_name])
    stats = verifuse.stats()
    print("RESULT " + json.dumps({
        "mode": mode, "model": model_name, "import_s": t_import - T0, "build_s": t_built - t_import,
        "first_result_s": t_first - t_built, "start_to_first_result_s": t_first - T0, "correct": bool(ok),
        "solver_queries": stats.get("solver_queries", 0), "timings_run": stats.get("timings_run", 0),
        "plans_loaded": stats.get("plans_loaded", 0), "plan_cache_hits": stats.get("plan_cache_hits", 0)}),
        flush=True)


def run(mode: str, model_name: str, path: str, cache: str) -> dict:
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, model_name, path, cache],
                          capture_output=True, text=True, timeout=900)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{mode} {model_name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="resnet50,bert")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    rows = []
    for model_name in args.models.split(","):
        for _ in range(args.repeats):
            work = tempfile.mkdtemp(prefix=f"vf-cold-{model_name}-")
            path = os.path.join(work, "model.vfplan")
            cold_cache, save_cache = os.path.join(work, "cold"), os.path.join(work, "save")
            for mode, cache in (("eager", cold_cache), ("cold", cold_cache), ("cache", cold_cache),
                                ("save", save_cache), ("load", save_cache)):
                r = run(mode, model_name, path, cache)
                rows.append(r)
                print(f"{model_name:9s} {mode:6s} import {r['import_s']:.2f} s, build {r['build_s']:.2f} s, "
                      f"first result {r['first_result_s']:.2f} s (start to first {r['start_to_first_result_s']:.2f} s), "
                      f"correct {r['correct']}, Z3 queries {r['solver_queries']}, timings {r['timings_run']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
    else:
        sys.exit(main())
