"""The README's results block, regenerated from committed result JSON (never typed by hand).

    PYTHONPATH=bench python -m verifuse_bench.readme --update README.md \\
        bench/results/peers-hf-b1-t1-s47-amx.json [more.json ...]

rewrites the text between ``<!-- bench-results:begin -->`` and ``<!-- bench-results:end -->``:
per result file one line naming the CPU, the tier, dtype, batch, threads and date, a table of
every configuration (eager, the best peer and its median, verifuse, the ratio with its 95%
interval and the verdict) and the geomean with wins / ties / losses as the harness judged them.
Files that measured the same configurations (suite, dtype, batch, threads, models), e.g. one sweep
per CPU tier, share one table instead: a column group per file (the best peer, its median,
verifuse, the ratio with its interval, the verdict), each file's CPU, tier, date and commit above
it and its geomean below. The block's first line lists its source files, so ``--check`` (and the
test) can tell whether the README still says what those files say.
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


def _count(n: int, one: str, many: str = "") -> str:
    """'1 win', '2 wins'."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


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
        return f"tier {tier['tier']} (capped on an {tier.get('cpu_tier')} CPU)"
    return f"tier {tier.get('tier')} (the CPU's own)"


def _settings_line(s: dict[str, Any]) -> str:
    threads = ", ".join(str(t) for t in s.get("threads", []))
    batches = ", ".join(str(b) for b in s.get("batches", []))
    return f"**{s.get('suite')}, {s.get('dtype', 'float32')}, batch {batches}, {threads} thread(s)**"


def _source_line(report: dict[str, Any], name: str) -> str:
    env = report["environment"]
    cpu = env.get("cpu_model") or "?"
    if env.get("hypervisor"):
        cpu += " (virtual machine)"
    return (f"{cpu}, {_tier(env)}, {report.get('created', '')[:10]}, commit "
            f"{str(env.get('git_commit') or '?')[:7]} (`bench/results/{name}`)")


def _model(e: dict[str, Any], s: dict[str, Any]) -> str:
    return e["model"] + ("" if len(s.get("batches", [])) == 1 and len(s.get("threads", [])) == 1
                         else f" b{e['batch']} t{e['threads']}")


def _ratio_verdict(r: dict[str, Any]) -> tuple[str, str, str]:
    ci = r.get("verifuse_vs_best_peer_ci")
    v = r.get("verifuse_vs_best_peer")
    if r.get("verifuse_failed"):
        ratio, verdict = "–", f"FAILED ({r['verifuse_failed']})"
    else:
        ratio, verdict = (f"{v:.2f}x" if v else "–"), (r.get("verdict") or "–")
    return ratio, (f"{ci[0]:.2f}-{ci[1]:.2f}" if ci else "–"), verdict


def block_for(report: dict[str, Any], name: str) -> list[str]:
    s = report["settings"]
    lines = [f"{_settings_line(s)} — {_source_line(report, name)}", "",
             "| model | eager ms | best peer | its ms | verifuse ms | verifuse vs best peer | 95% interval | verdict |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for e in report.get("results", []):
        r = e["ratios"]
        ratio, interval, verdict = _ratio_verdict(r)
        lines.append(f"| {_model(e, s)} | {_ms(_median(e, 'eager'))} | {r.get('best_peer') or '–'} | "
                     f"{_ms(r.get('best_peer_median_ms'))} | {_ms(_median(e, 'verifuse'))} | {ratio} | "
                     f"{interval} | {verdict} |")
    return lines + _geomean_lines(report)


def _geomean_lines(report: dict[str, Any], label: str = "") -> list[str]:
    lines: list[str] = []
    rows = [g for g in report.get("summary", {}).get("geomeans", []) if g.get("scope") == "all"]
    per_config = [g for g in rows if g.get("batch") != "all"]
    # Runs before the paired verdicts recorded no method: their intervals resampled calls alone.
    methods = sorted({e["ratios"].get("verdict_method", "unpaired (calls as independent samples)").split(" (")[0]
                      for e in report.get("results", []) if e.get("ratios", {}).get("verdict")})
    method = " / ".join(methods) or "–"
    for g in per_config + ([g for g in rows if g.get("batch") == "all"] if len(per_config) > 1 else []):
        vd = g.get("verdicts") or {}
        gm = g.get("verifuse_vs_best_peer")
        lines += ["", f"Geomean verifuse vs the best peer{label} **{gm:.2f}** over {g['n_configs']} configurations "
                      f"(batch {g['batch']}, {g['threads']} thread(s)): **{_count(vd.get('win', 0), 'win')}, "
                      f"{_count(vd.get('tie', 0), 'tie')}, {_count(vd.get('loss', 0), 'loss', 'losses')}**" + (f", {vd['failed']} failed" if vd.get("failed") else "")
                      + f" (a win or a loss only when the 95% interval excludes 1; intervals {method})."]
    return lines


def _configurations(report: dict[str, Any]) -> tuple:
    s = report["settings"]
    return (s.get("suite"), s.get("dtype", "float32"), tuple(s.get("batches", [])), tuple(s.get("threads", [])),
            tuple((e["model"], e["batch"], e["threads"]) for e in report.get("results", [])))


def _labels(reports: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Each file's column label: its tier where the tiers tell the files apart, else its name."""
    tiers = [((r["environment"].get("tier") or {}).get("tier")) for r in reports]
    if all(tiers) and len(set(tiers)) == len(tiers):
        return [str(t) for t in tiers]
    return [n.removesuffix(".json") for n in names]


def combined_block(reports: list[dict[str, Any]], names: list[str]) -> list[str]:
    """One table for files that measured the same configurations: a column group per file."""
    s = reports[0]["settings"]
    labels = _labels(reports, names)
    lines = [f"{_settings_line(s)}, verifuse vs the best peer, one column group per result file:", ""]
    lines += [f"- **{lab}**: {_source_line(r, n)}" for lab, r, n in zip(labels, reports, names)]
    head = "| model |" + "".join(f" {lab}: best peer | its ms | verifuse ms | vs best peer (95% interval) | verdict |"
                                 for lab in labels)
    lines += ["", head, "|---|" + "---|---:|---:|---:|---|" * len(reports)]
    for rows in zip(*(r.get("results", []) for r in reports)):
        cells = []
        for e in rows:
            r = e["ratios"]
            ratio, interval, verdict = _ratio_verdict(r)
            cells.append(f" {r.get('best_peer') or '–'} | {_ms(r.get('best_peer_median_ms'))} | "
                         f"{_ms(_median(e, 'verifuse'))} | {ratio} ({interval}) | {verdict} |")
        lines.append(f"| {_model(rows[0], s)} |" + "".join(cells))
    for lab, r in zip(labels, reports):
        lines += _geomean_lines(r, f" ({lab})")
    return lines


def render(paths: list[Path]) -> str:
    lines = [BEGIN, SOURCES.format(" ".join(p.name for p in paths))]
    reports = [json.loads(p.read_text()) for p in paths]
    if len(reports) > 1 and len({_configurations(r) for r in reports}) == 1:
        lines += [""] + combined_block(reports, [p.name for p in paths])
    else:
        for p, r in zip(paths, reports):
            lines += [""] + block_for(r, p.name)
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
