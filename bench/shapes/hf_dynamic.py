#!/usr/bin/env python3
"""Dynamic shapes on the hf suite's text transformers: ``torch.compile(model, backend="verifuse",
dynamic=True, options={"strict": True})`` called with batch 1..8 x sequence 16..128 (a padding
mask on the last row of each batch, as a tokenizer pads), against eager on the same model.

    PYTHONPATH=backend/python:bench python bench/shapes/hf_dynamic.py [--json bench/results/hf_dynamic.json]
           [--models hf_bert_base,...] [--batches 1,2,5,8] [--seqs 16,37,64,128]

For each model: graphs Dynamo compiled (and how many verifuse ran rather than fell back), the worst
error against eager relative to eager's largest value, the first call (trace + compile) and the
median later call. Under strict a fallback would raise, so every graph counted ran on verifuse.
Each model runs in a fresh subprocess (Dynamo state is per process), 1 thread. Never asserted on
in CI.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("hf_bert_base", "hf_distilbert", "hf_roberta_base", "hf_gpt2", "hf_t5_small_encoder", "hf_llama_prefill")


def child(name: str, batches: list[int], seqs: list[int]) -> dict:
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import verifuse
    from verifuse import report as _report
    from verifuse_bench import suites

    torch.manual_seed(0)
    torch.set_num_threads(1)
    bm = suites.get_model(name)
    model = bm.build(0)
    vocab = int(getattr(model.config, "vocab_size", 1000))
    compiled = torch.compile(model, backend="verifuse", dynamic=True, options={"strict": True})
    verifuse.reset_stats()
    out: dict = {"model": name, "shapes": [], "error": None}
    later: list[float] = []
    with _report.collect() as graphs, torch.no_grad():
        for b in batches:
            for s in seqs:
                g = torch.Generator().manual_seed(1000 * b + s)
                ids = torch.randint(3, vocab, (b, s), generator=g)
                mask = torch.ones(b, s, dtype=torch.long)
                mask[-1, s - s // 4:] = 0  # the last row padded
                want = model(input_ids=ids, attention_mask=mask)
                t = time.perf_counter()
                try:
                    got = compiled(input_ids=ids, attention_mask=mask)
                except Exception as e:  # noqa: BLE001 - a failure is the result
                    out["error"] = f"batch {b} seq {s}: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
                    return out
                elapsed = time.perf_counter() - t
                w, o = bm.select(want), bm.select(got)
                w, o = (w[0], o[0]) if isinstance(w, (tuple, list)) else (w, o)
                err = ((o - w).abs().max() / w.abs().max().clamp_min(1e-6)).item()
                out["shapes"].append({"batch": b, "seq": s, "rel_err": err, "ms": elapsed * 1e3})
                if len(out["shapes"]) > 1:
                    later.append(elapsed)
    stats = verifuse.stats()
    out["graphs_compiled"] = stats.get("graphs_compiled", 0)
    out["graphs_verifuse"] = stats.get("graphs_verifuse", 0)
    out["graphs_fallback"] = stats.get("graphs_fallback", 0)
    out["recompiles"] = len(graphs)
    out["max_rel_err"] = max(x["rel_err"] for x in out["shapes"])
    out["first_call_s"] = out["shapes"][0]["ms"] / 1e3
    out["median_later_ms"] = statistics.median(later) * 1e3 if later else None
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default="1,2,5,8")
    p.add_argument("--seqs", default="16,37,64,128")
    p.add_argument("--json", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    batches = [int(x) for x in a.batches.split(",")]
    seqs = [int(x) for x in a.seqs.split(",")]
    if a.child:
        print(json.dumps(child(a.child, batches, seqs)))
        return 0
    rows = []
    for name in a.models.split(","):
        r = subprocess.run([sys.executable, __file__, "--child", name, "--batches", a.batches, "--seqs", a.seqs],
                           capture_output=True, text=True)
        line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = {"model": name, "error": f"child failed (exit {r.returncode}): {r.stderr.strip()[-400:]}"}
        rows.append(row)
        if row.get("error"):
            print(f"{name:22s} ERROR {row['error']}", flush=True)
        else:
            print(f"{name:22s} shapes {len(row['shapes']):3d}  graphs {row['graphs_compiled']} "
                  f"(verifuse {row['graphs_verifuse']}, fallback {row['graphs_fallback']})  "
                  f"max rel err {row['max_rel_err']:.1e}  first call {row['first_call_s']:.1f} s  "
                  f"later median {row['median_later_ms']:.1f} ms", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"batches": batches, "seqs": seqs, "rows": rows}, indent=1))
        md = ["| model | shapes | graphs compiled | on verifuse | fallbacks | max error / max abs eager | first call s |",
              "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if r.get("error"):
                md.append(f"| {r['model']} | error: {r['error']} | | | | | |")
            else:
                md.append(f"| {r['model']} | {len(r['shapes'])} | {r['graphs_compiled']} | {r['graphs_verifuse']} | "
                          f"{r['graphs_fallback']} | {r['max_rel_err']:.1e} | {r['first_call_s']:.1f} |")
        Path(a.json).with_suffix(".md").write_text(
            f"dynamic=True, strict, 1 thread; batch {batches} x sequence {seqs}, last row padded.\n\n" + "\n".join(md) + "\n")
    return 0 if all(not r.get("error") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
