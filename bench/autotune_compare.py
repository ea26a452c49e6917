"""Autotuner effect (issue 6): verifuse with the autotuner against oneDNN everywhere and ATen
everywhere, timed round-robin in one process; and a warm tuning database's second compile.

    PYTHONPATH=backend/python:bench python bench/autotune_compare.py [--models resnet18,...]
        [--batch 1] [--threads 1] [--rounds 6] [--json bench/results/autotune.json]

Modes: "autotuned" (default options), "onednn" (every fused op oneDNN can take on oneDNN, untimed;
VERIFUSE_ENGINE=onednn) and "aten" (every fused op as its ATen composition; VERIFUSE_ENGINE=aten).
Rule folding and post-op fusion are the same in all three: only the engine differs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

import verifuse
from verifuse_bench import models as M

MODES = ("autotuned", "onednn", "aten")


def build(name: str, batch: int):
    model = getattr(M, name)().eval()
    x = torch.randn(batch, 3, 224, 224) if name != "mlp_bn" else None
    if x is None:
        raise SystemExit("image models only")
    return model, x


def compile_mode(model, x, mode: str, cache_dir: str):
    os.environ["VERIFUSE_ENGINE"] = "auto" if mode == "autotuned" else mode
    torch._dynamo.reset()
    start = time.perf_counter()
    report = verifuse.explain(model, x, cache_dir=cache_dir)
    compiled = torch.compile(model, backend="verifuse", options={"cache_dir": cache_dir})
    with torch.no_grad():
        compiled(x)
    seconds = time.perf_counter() - start
    g = report.to_dict()["graphs"][0]
    engines = [p["engine"] for p in report.to_dict()["partitions"]]
    return compiled, {"compile_s": seconds, "reorders": g["reorders"], "reorders_before": g["reorders_before"],
                      "timings_run": g["timings_run"], "partitions": engines}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="resnet18,mobilenet_v2,resnet50")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--json", default="bench/results/autotune.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    results = {"batch": args.batch, "threads": args.threads, "models": {}}
    for name in args.models.split(","):
        model, x = build(name, args.batch)
        cache_dir = tempfile.mkdtemp(prefix="verifuse-tune-")
        compiled, info = {}, {}
        for mode in MODES:
            compiled[mode], info[mode] = compile_mode(model, x, mode, cache_dir)
        os.environ.pop("VERIFUSE_ENGINE", None)
        # Warm database: a second compile of the autotuned model reads decisions, times nothing.
        torch._dynamo.reset()
        warm_start = time.perf_counter()
        warm = verifuse.explain(model, x, cache_dir=cache_dir).to_dict()["graphs"][0]
        warm_s = time.perf_counter() - warm_start
        times = {m: [] for m in MODES}
        with torch.no_grad():
            for _ in range(args.rounds):
                for mode in MODES:  # alternate the engines: the 2 shared cores are noisy
                    t = time.perf_counter()
                    for _ in range(3):
                        compiled[mode](x)
                    times[mode].append((time.perf_counter() - t) / 3 * 1e3)
        row = {mode: dict(info[mode], median_ms=statistics.median(times[mode])) for mode in MODES}
        row["warm_second_compile"] = {"seconds": warm_s, "timings_run": warm["timings_run"]}
        results["models"][name] = row
        print(f"{name} b{args.batch} t{args.threads}: " + ", ".join(
            f"{m} {row[m]['median_ms']:.2f} ms (compile {row[m]['compile_s']:.2f} s, timings {row[m]['timings_run']})"
            for m in MODES) + f"; warm second compile {warm_s:.2f} s with {warm['timings_run']} timings;"
            f" reorders {row['autotuned']['reorders_before']} -> {row['autotuned']['reorders']}", flush=True)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
    print("wrote", args.json)


if __name__ == "__main__":
    main()
