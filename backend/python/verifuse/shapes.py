"""``python -m verifuse shapes FILE.smt2... [--redundant] [--mode prefix|others] [--json]``.

Shape-program analysis (SMT-LIB, the PyTorch shape corpus format): a verdict, a model of the input
sizes, and (with ``--redundant``) the asserts implied by the asserts before them (``--mode prefix``,
the default) or by all the other asserts (``--mode others``). The work happens in C++
(``verifuse._C.analyze_shapes``); see verifier/src/shapes/README.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["analyze", "main"]


class ShapeProgramError(ValueError):
    """An SMT-LIB file that could not be read (the message names the line and column)."""


def analyze(text: str, redundant: bool = False, timeout_ms: int = 8000, mode: str = "prefix",
            use_hints: bool = True) -> dict[str, Any]:
    """Analyzes one shape program given as text; returns the report as a dict."""
    from verifuse import _C  # the extension; imported lazily so `--help` works without it

    try:
        out = _C.analyze_shapes(text, redundant, timeout_ms, mode, use_hints)
    except ValueError as err:
        raise ShapeProgramError(str(err)) from None
    return json.loads(out)


def _table(reports: list[dict[str, Any]], redundant: bool) -> str:
    rows = [("file", "verdict", "by", "asserts", "decided w/o z3", "z3 calls", "redundant", "time s")]
    for r in reports:
        red = r.get("redundancy", {})
        rows.append((
            r["file"], r["verdict"], r.get("decided_by", ""), str(r["stats"]["asserts"]),
            str(r["stats"]["decided_without_solver"]), str(r["times"]["solver_calls"]),
            str(red.get("count", "-")) if redundant else "-", f"{r['times']['total_s']:.3f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out = "\n".join(lines)
    for r in reports:
        if r["verdict"] == "sat" and r.get("model"):
            model = ", ".join(f"{k}={v}" for k, v in r["model"].items())
            out += f"\n\n{r['file']}: model{' (checked)' if r.get('model_checked') else ''}: {model}"
        if r["verdict"] == "unknown" and r.get("note"):
            out += f"\n\n{r['file']}: unknown: {r['note']}"
        if redundant and r.get("redundancy", {}).get("asserts"):
            red = r["redundancy"]
            out += f"\n\n{r['file']}: {red['count']} redundant assert(s) ({red['mode']} mode):"
            for a in red["asserts"]:
                detail = f"  ; {a['definition']}" if a.get("definition") else ""
                out += f"\n  #{a['index']} line {a['line']} [{a['by']}]: {a['text']}{detail}"
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifuse shapes", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", metavar="FILE.smt2")
    parser.add_argument("--redundant", action="store_true", help="also list redundant asserts")
    parser.add_argument("--mode", choices=("prefix", "others"), default="prefix",
                        help="redundant = implied by the asserts before it (prefix) or by all others")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--timeout-ms", type=int, default=8000, help="Z3 budget per file")
    parser.add_argument("--no-hints", action="store_true", help="ignore (set-info :example-...) values")
    args = parser.parse_args(argv)

    try:
        from verifuse import _C  # noqa: F401
        if not hasattr(_C, "analyze_shapes"):
            raise ImportError("verifuse._C was built without shape analysis")
    except ImportError as err:
        print(f"verifuse shapes: the C++ extension is not available: {err}", file=sys.stderr)
        return 2

    reports: list[dict[str, Any]] = []
    rc = 0
    for path in args.files:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as err:
            print(f"verifuse shapes: {path}: {err.strerror or err}", file=sys.stderr)
            rc = 1
            continue
        try:
            report = analyze(text, args.redundant, args.timeout_ms, args.mode, not args.no_hints)
        except ShapeProgramError as err:
            print(f"verifuse shapes: {path}: {err}", file=sys.stderr)
            rc = 1
            continue
        report = {"file": path, **report}
        reports.append(report)
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 and len(args.files) == 1 else reports, indent=1))
    elif reports:
        print(_table(reports, args.redundant))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
