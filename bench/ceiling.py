"""How far each model of a peer-benchmark run is from the FMA peak, and the most any backend could
beat the best peer by: where a ratio against the best peer misses, this says whether the time is
left in the arithmetic or elsewhere.

For each model of a results JSON (`python -m verifuse_bench ... --json F`):

* FLOP floor: the model's FLOPs per call (`gflop_per_call`, counted on eager: linears, convs,
  matmuls and attention; results written before stop 37 counted no attention) at the FMA peak
  of the threads used;
* verifuse at % of peak: the floor over verifuse's median;
* ceiling: the best peer's median over the floor, the ratio against the best peer a backend would
  reach if it did every FLOP at peak and nothing else. A memory-bound model (a decode step) has a
  ceiling far above what its weight traffic allows; the table says so by its low % of peak.

    python bench/ceiling.py bench/results/peers-hf-b1-t1-s37.json [--peak-f32 115 --peak-bf16 231]

The default peaks are per core of the Zen 4 VM this project measures on (kernels/README.md): 115
GFLOP/s float32 (two 256-bit FMA pipes, AVX-512 double-pumped, ~3.6 GHz) and 231 bf16 (vdpbf16ps);
pass the peaks of another CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import sys


def rows(results: dict, peak_f32: float, peak_bf16: float) -> list[dict]:
    out = []
    for r in results["results"]:
        backends = r.get("backends", {})
        gflop = r.get("gflop_per_call")
        mine = (backends.get("verifuse") or {}).get("latency_ms") or {}
        peers = {name: b["latency_ms"]["median"] for name, b in backends.items()
                 if name not in ("eager", "verifuse") and b.get("status") == "ok" and b.get("latency_ms")}
        if not gflop or not mine.get("median") or not peers:
            continue
        best = min(peers, key=peers.get)
        peak = (peak_bf16 if "bfloat16" in str(r.get("dtype")) else peak_f32) * int(r["threads"])
        floor_ms = gflop / peak * 1e3
        out.append({"model": r["model"], "batch": r.get("batch"), "threads": r["threads"], "gflop": gflop,
                    "verifuse_ms": mine["median"], "best_peer": best, "best_peer_ms": peers[best],
                    "floor_ms": floor_ms, "pct_of_peak": 100.0 * floor_ms / mine["median"],
                    "ratio": peers[best] / mine["median"], "ceiling": peers[best] / floor_ms})
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="results JSON files of verifuse_bench")
    ap.add_argument("--peak-f32", type=float, default=115.0, help="float32 FMA peak per thread, GFLOP/s")
    ap.add_argument("--peak-bf16", type=float, default=231.0, help="bf16 dot-product peak per thread, GFLOP/s")
    args = ap.parse_args(argv)
    for path in args.results:
        with open(path) as f:
            table = rows(json.load(f), args.peak_f32, args.peak_bf16)
        print(f"## {path}\n")
        print("| model | GFLOP/call | verifuse ms | % of FMA peak | best peer ms | vs best peer | ceiling |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for t in table:
            print(f"| {t['model']} | {t['gflop']:.2f} | {t['verifuse_ms']:.2f} | {t['pct_of_peak']:.0f}% | "
                  f"{t['best_peer_ms']:.2f} ({t['best_peer']}) | {t['ratio']:.3f} | {t['ceiling']:.3f} |")
        print(f"\ngeomean vs best peer {geomean([t['ratio'] for t in table]):.3f}, "
              f"geomean ceiling {geomean([t['ceiling'] for t in table]):.3f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
