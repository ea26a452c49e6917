"""The markdown table and the PNG of peer-benchmark result files, regenerated from their JSON.

    make bench-reports
    PYTHONPATH=bench python -m verifuse_bench.render [bench/results/x.json ...] [--no-plot] [--out DIR]

Only the JSON of a run is committed (bench/results/INDEX.md); its ``.md`` and ``.png`` are what
``write_report`` would write next to it, made again here with today's renderer (report.to_markdown,
plot.write_plot) and ignored by git. The JSON is read, never rewritten. Files that are not
peer-benchmark reports (schema ``verifuse-bench/2``: cold start, shapes, prove, fuzz, ...) are
skipped and named. Without arguments: every ``*.json`` in ``bench/results``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .report import to_markdown

RESULTS = Path(__file__).resolve().parents[1] / "results"


def is_bench_report(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("schema", "")).startswith("verifuse-bench/") \
        and "settings" in data and "results" in data


def render_one(json_path: Path, out_dir: Path | None = None, plot: bool = True) -> list[Path]:
    """Writes ``<stem>.md`` (and ``<stem>.png`` with ``plot``) for one report; returns the paths."""
    json_path = Path(json_path)
    report = json.loads(json_path.read_text())
    if not is_bench_report(report):
        raise ValueError(f"{json_path} is not a peer-benchmark report (schema verifuse-bench/2)")
    out = Path(out_dir) if out_dir else json_path.parent
    out.mkdir(parents=True, exist_ok=True)
    written = []
    report.pop("plot", None)  # the run's own plot status; the markdown links what is rendered now
    if plot and report.get("results"):
        from .plot import write_plot

        png = out / (json_path.stem + ".png")
        report["plot"] = write_plot(report, png)
        if report["plot"].get("status") == "ok":
            written.append(png)
    md = out / (json_path.stem + ".md")
    md.write_text(to_markdown(report))
    written.append(md)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verifuse_bench.render", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="*", help="result JSON files (default: bench/results/*.json)")
    ap.add_argument("--out", type=Path, default=None, help="write here instead of next to each JSON")
    ap.add_argument("--no-plot", action="store_true", help="markdown only (no PNG, no matplotlib needed)")
    args = ap.parse_args(argv)
    paths = args.results or sorted(RESULTS.glob("*.json"))
    skipped, failed, n = [], 0, 0
    for p in paths:
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            print(f"{p}: cannot read ({e})", file=sys.stderr)
            failed += 1
            continue
        if not is_bench_report(data):
            skipped.append(p.name)
            continue
        for w in render_one(p, args.out, plot=not args.no_plot):
            print(f"wrote {w}")
            n += 1
    if skipped:
        print(f"skipped (not peer-benchmark reports): {', '.join(skipped)}")
    print(f"{n} files written")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
