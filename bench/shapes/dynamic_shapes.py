#!/usr/bin/env python3
"""Dynamic shapes acceptance: how many graphs verifuse compiles for batch 1..16 (and sequence
length 16..128 for the encoder) under ``torch.compile(m, backend="verifuse", dynamic=True)``, which
shape assumptions Dynamo's guards entail, and which runtime guards verifuse adds.

    PYTHONPATH=backend/python python bench/shapes/dynamic_shapes.py [--json bench/results/shapes_dynamic.json]
           [--models small_resnet,resnet18_64,encoder_2l] [--configs dynamic,dynamo_default_tracing,mark_dynamic]

Each (model, config) runs in a fresh subprocess (Dynamo state and torch config are per process).
Configs:
  dynamic                  torch.compile(dynamic=True) as a user writes it: while Dynamo traces a
                           frame for verifuse, sizes are traced size-obliviously (no 0/1
                           specialization) and a plainly contiguous convolution does not ask ATen
                           which kernel it would pick (no batch >= 16 guard); see
                           verifuse/dynamic_tracing.py
  dynamo_default_tracing   the same with VERIFUSE_SIZE_OBLIVIOUS_TRACING=0 (Dynamo's own tracing)
  mark_dynamic             torch._dynamo.mark_dynamic(x, 0, min=1, max=16) (documented constraint API)
Never asserted on in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("small_resnet", "resnet18_64", "encoder_2l")
CONFIGS = ("dynamic", "dynamo_default_tracing", "mark_dynamic")


def shapes_for(model: str) -> list[tuple[int, ...]]:
    if model == "encoder_2l":
        return [(b, s, 128) for b in range(1, 17) for s in (16, 17, 31, 32, 64, 100, 127, 128)]
    side = 32 if model == "small_resnet" else 64
    return [(b, 3, side, side) for b in range(1, 17)]


def child(model: str, config: str) -> dict:
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import verifuse
    from verifuse import report as _report

    torch.manual_seed(0)
    torch.set_num_threads(1)
    if model == "small_resnet":
        from verifuse.models import SmallResNet, randomize_batchnorm

        m = randomize_batchnorm(SmallResNet()).eval()
    else:
        from verifuse_bench.models import get_spec

        m = get_spec(model).build_model()
    compiled = torch.compile(m, backend="verifuse", dynamic=True)
    verifuse.reset_stats()
    out: dict = {"model": model, "config": config, "calls": 0, "max_abs_err": 0.0, "error": None}
    shapes = shapes_for(model)
    t0 = time.perf_counter()
    first_call_s = None
    with _report.collect() as graphs, torch.no_grad():
        for shape in shapes:
            x = torch.randn(*shape)
            if config == "mark_dynamic":
                torch._dynamo.mark_dynamic(x, 0, min=1, max=16)
                if model == "encoder_2l":
                    torch._dynamo.mark_dynamic(x, 1, min=16, max=128)
            t = time.perf_counter()
            try:
                y = compiled(x)
            except Exception as e:  # noqa: BLE001 - a failure is a result here
                out["error"] = f"{shape}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                break
            if first_call_s is None:
                first_call_s = time.perf_counter() - t
            out["calls"] += 1
            out["max_abs_err"] = max(out["max_abs_err"], float((y - m(x)).abs().max()))
    out["sweep_s"] = time.perf_counter() - t0
    out["first_call_s"] = first_call_s
    out["stats"] = verifuse.stats()
    out["graphs_compiled"] = out["stats"]["graphs_compiled"]
    out["graphs"] = []
    for g in graphs:
        entries = g.shape_guards
        out["graphs"].append({
            "graph": g.graph_id, "engine": g.engine, "compile_s": g.compile_seconds,
            "assumptions": sum(e["type"] == "assumption" for e in entries),
            "entailed": sum(e["type"] == "assumption" and e["entailed"] for e in entries),
            "added_guards": [e["text"] for e in entries if e["type"] == "added_guard" and e["checked_at_runtime"]],
            "added_but_implied_by_other_added": [e["text"] for e in entries if e["type"] == "added_guard"
                                                 and not e["checked_at_runtime"]],
            "dynamo_guards": [e["text"] for e in entries if e["type"] == "dynamo_guard"],
            "shape_program_bytes": len(g.shape_program_smt2),
        })
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "shapes_dynamic.json"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print("@@RESULT@@" + json.dumps(child(*args.child)))
        return 0
    rows = []
    env = dict(os.environ, PYTHONPATH=str(ROOT / "backend" / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for model in args.models.split(","):
        for config in args.configs.split(","):
            child_env = dict(env, VERIFUSE_SIZE_OBLIVIOUS_TRACING="0" if config == "dynamo_default_tracing" else "1")
            p = subprocess.run([sys.executable, __file__, "--child", model, config], capture_output=True, text=True,
                               env=child_env, timeout=1800)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("@@RESULT@@")]
            row = json.loads(line[0][len("@@RESULT@@"):]) if line else {
                "model": model, "config": config, "error": (p.stderr.strip().splitlines() or ["?"])[-1]}
            rows.append(row)
            print(f"{model:14s} {config:24s} graphs={row.get('graphs_compiled')} calls={row.get('calls')} "
                  f"err={row.get('max_abs_err')} error={row.get('error')}", flush=True)
    import torch

    out = {"torch": torch.__version__, "rows": rows}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    md = ["# verifuse under dynamic=True: graphs compiled and shape guards", "",
          f"torch {torch.__version__}; batch 1..16 (encoder: x seq 16,17,31,32,64,100,127,128); one process per row.",
          "", "| model | config | calls | graphs compiled | max abs err vs eager | assumptions (entailed) | "
              "guards verifuse added (checked at run time) | error |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gs = r.get("graphs", [])
        ass = "; ".join(f"{g['assumptions']} ({g['entailed']})" for g in gs) or "-"
        added = "; ".join(", ".join(g["added_guards"]) or "none" for g in gs) or "-"
        err = r.get("max_abs_err")
        md.append(f"| {r['model']} | {r['config']} | {r.get('calls', '-')} | {r.get('graphs_compiled', '-')} | "
                  f"{err if err is None else f'{err:.2e}'} | {ass} | {added} | {r.get('error') or ''} |")
    Path(args.json).with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
