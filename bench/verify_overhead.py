"""Compile-time cost of verification (issue 4): verify="instances" against verify="off".

Same process, same model object, the two modes alternated; Dynamo's cache is reset before each
compile and every proof comes from the in-process memo after the first round (as in a served
process), so what differs is instance validation: the per-element fold check and the end-to-end
Z3 layer check. Reports medians of the whole first call (Dynamo + AOT + verifuse + the run) and of
verifuse's own backend compile.

    python bench/verify_overhead.py --model resnet50 --rounds 6 --out bench/results/verify_overhead
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import verifuse  # noqa: E402
from verifuse_bench.models import get_spec  # noqa: E402


def one(model, x, verify: str) -> dict:
    torch._dynamo.reset()
    start = time.perf_counter()
    report = verifuse.explain(model, x, verify=verify)
    total = time.perf_counter() - start
    folds = [f for f in report.to_dict()["fusions"] if f.get("fold", "none") != "none"]
    checked = [f for f in folds if f.get("layer_check") not in (None, "skipped", "not-checked")]
    return {
        "total_s": total,
        "backend_s": sum(g.compile_seconds for g in report.graphs),
        "pipeline_s": sum(g.pipeline_seconds for g in report.graphs),
        "layer_checks": len(checked),
        "layer_check_verdicts": sorted({f["layer_check"] for f in checked}),
        "layer_check_s": sum(f.get("layer_check_seconds", 0.0) for f in checked),
        "instances": sorted({f.get("instance") for f in folds}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    spec = get_spec(args.model)
    model = spec.build_model()
    x = spec.make_input(args.batch)
    one(model, x, "instances")  # warm-up: proofs into the memo, oneDNN and Z3 initialized
    runs = {"instances": [], "off": []}
    for r in range(args.rounds):
        for mode in (("instances", "off") if r % 2 == 0 else ("off", "instances")):
            runs[mode].append(one(model, x, mode))
    med = {m: {k: statistics.median(run[k] for run in rs) for k in ("total_s", "backend_s", "pipeline_s", "layer_check_s")}
           for m, rs in runs.items()}
    result = {
        "model": args.model, "batch": args.batch, "threads": args.threads, "rounds": args.rounds,
        "torch": torch.__version__, "median": med,
        "overhead_total": med["instances"]["total_s"] / med["off"]["total_s"] - 1,
        "overhead_backend": med["instances"]["backend_s"] / med["off"]["backend_s"] - 1,
        "layer_checks": runs["instances"][0]["layer_checks"],
        "layer_check_verdicts": runs["instances"][0]["layer_check_verdicts"],
        "instances": runs["instances"][0]["instances"],
        "runs": runs,
    }
    lines = [
        f"# verify=instances vs verify=off: {args.model}, batch {args.batch}, {args.threads} thread(s), "
        f"{args.rounds} alternating rounds, medians",
        "",
        "| mode | first call (Dynamo+AOT+verifuse) | verifuse backend | pipeline | layer checks |",
        "|---|---|---|---|---|",
    ]
    for m in ("off", "instances"):
        lines.append(f"| {m} | {med[m]['total_s']:.3f} s | {med[m]['backend_s']:.3f} s | {med[m]['pipeline_s']:.3f} s | "
                     f"{med[m]['layer_check_s']:.3f} s |")
    lines += ["", f"Overhead of instance validation: first call {result['overhead_total']:+.1%}, "
                  f"backend compile {result['overhead_backend']:+.1%}. End-to-end layer checks: "
                  f"{result['layer_checks']} ({', '.join(result['layer_check_verdicts']) or 'none'}); fold instances: "
                  f"{', '.join(result['instances'])}."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
