"""The README's results block, regenerated from committed result JSON (never typed by hand).

    PYTHONPATH=bench python -m verifuse_bench.readme --update README.md \\
        bench/results/peers-hf-b1-t1-s47-amx.json [more.json ...]

rewrites the text between ``<!-- bench-results:begin -->`` and ``<!-- bench-results:end -->``:
per result file one line naming the CPU, the tier, dtype, batch, threads and date, a table of
every configuration (eager, the best peer and its median, verifuse, the ratio with its 95%
interval and the verdict) and the geomean with wins / ties / losses as the harness judged them.
The block's first line lists its source files, so ``--check`` (and the test) can tell whether the
README still says what those files say.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"
SOURCES = "<!-- sources: {} -->"


def _ms(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _median(e: dict[str, Any], backend: str) -> float | None:
    b = e["backends"].get(backend) or {}
    return (b.get("latency_ms") or {}).get("median") if b.get("status") == "ok" else None


def _tier(env: dict[str, Any]) -> str:
    tier = env.get("tier") or {}
    if not tier:
        return "tier not recorded"
    if tier.get("cap"):
        return f"tier {tier['tier']} (capped on a {tier.get('cpu_tier')} CPU)"
    return f"tier {tier.get('tier')} (the CPU's own)"


def block_for(report: dict[str, Any], name: str) -> list[str]:
    env, s = report["environment"], report["settings"]
    threads = ", ".join(str(t) for t in s.get("threads", []))
    batches = ", ".join(str(b) for b in s.get("batches", []))
    cpu = env.get("cpu_model") or "?"
    if env.get("hypervisor"):
        cpu += " (virtual machine)"
    lines = [f"**{s.get('suite')}, {s.get('dtype', 'float32')}, batch {batches}, {threads} thread(s)** — {cpu}, "
             f"{_tier(env)}, {report.get('created', '')[:10]}, commit {str(env.get('git_commit') or '?')[:7]} "
             f"(`bench/results/{name}`)", "",
             "| model | eager ms | best peer | its ms | verifuse ms | verifuse vs best peer | 95% interval | verdict |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for e in report.get("results", []):
        r = e["ratios"]
        ci = r.get("verifuse_vs_best_peer_ci")
        v = r.get("verifuse_vs_best_peer")
        if r.get("verifuse_failed"):
            ratio, verdict = "–", f"FAILED ({r['verifuse_failed']})"
        else:
            ratio, verdict = (f"{v:.2f}x" if v else "–"), (r.get("verdict") or "–")
        model = e["model"] + ("" if len(s.get("batches", [])) == 1 and len(s.get("threads", [])) == 1
                              else f" b{e['batch']} t{e['threads']}")
        lines.append(f"| {model} | {_ms(_median(e, 'eager'))} | {r.get('best_peer') or '–'} | "
                     f"{_ms(r.get('best_peer_median_ms'))} | {_ms(_median(e, 'verifuse'))} | {ratio} | "
                     f"{f'{ci[0]:.2f}-{ci[1]:.2f}' if ci else '–'} | {verdict} |")
    rows = [g for g in report.get("summary", {}).get("geomeans", []) if g.get("scope") == "all"]
    per_config = [g for g in rows if g.get("batch") != "all"]
    # Runs before the paired verdicts recorded no method: their intervals resampled calls alone.
    methods = sorted({e["ratios"].get("verdict_method", "unpaired (calls as independent samples)").split(" (")[0]
                      for e in report.get("results", []) if e.get("ratios", {}).get("verdict")})
    method = " / ".join(methods) or "–"
    for g in per_config + ([g for g in rows if g.get("batch") == "all"] if len(per_config) > 1 else []):
        vd = g.get("verdicts") or {}
        gm = g.get("verifuse_vs_best_peer")
        lines += ["", f"Geomean verifuse vs the best peer **{gm:.2f}** over {g['n_configs']} configurations "
                      f"(batch {g['batch']}, {g['threads']} thread(s)): **{vd.get('win', 0)} wins, {vd.get('tie', 0)} "
                      f"ties, {vd.get('loss', 0)} losses**" + (f", {vd['failed']} failed" if vd.get("failed") else "")
                      + f" (a win or a loss only when the 95% interval excludes 1; intervals {method})."]
    return lines


def render(paths: list[Path]) -> str:
    lines = [BEGIN, SOURCES.format(" ".join(p.name for p in paths))]
    for p in paths:
        lines += [""] + block_for(json.loads(p.read_text()), p.name)
    lines += ["", END]
    return "\n".join(lines)


def sources_of(readme: str) -> list[str]:
    """The result files a README's block names ([] without a block)."""
    if BEGIN not in readme:
        return []
    first = readme.split(BEGIN, 1)[1].strip().splitlines()[0]
    if not first.startswith("<!-- sources:"):
        return []
    return first[len("<!-- sources:"):-len("-->")].split()


def replace_block(readme: str, block: str) -> str:
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README has no {BEGIN} ... {END} block")
    head, rest = readme.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verifuse_bench.readme", description=__doc__.splitlines()[0])
    ap.add_argument("readme", type=Path)
    ap.add_argument("results", type=Path, nargs="*",
                    help="result JSON files (default: the ones the block names, in bench/results)")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="rewrite the block")
    mode.add_argument("--check", action="store_true", help="exit 1 if the block differs from its sources")
    args = ap.parse_args(argv)
    text = args.readme.read_text()
    paths = args.results or [Path(__file__).resolve().parents[1] / "results" / n for n in sources_of(text)]
    if not paths:
        ap.error("no result files given and the README's block names none")
    new = replace_block(text, render(paths))
    if args.check:
        if new != text:
            print(f"{args.readme}: the results block differs from {', '.join(p.name for p in paths)}; "
                  "regenerate it with --update", file=sys.stderr)
            return 1
        return 0
    args.readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
