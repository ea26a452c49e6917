"""``python -m verifuse bench`` (also ``python -m verifuse_bench``).

    bench [--models a,b] [--backends eager,inductor,verifuse] [--batch 1,32] [--threads 1,2]
          [--iters N] [--warmup N] [--chunk N] [--time-budget S] [--json PATH] [--quick]
          [--inductor-cache cold|warm] [--verifuse-options JSON] [--seed N] [--list]

Exit status: 0 when the run completed (backends that are unavailable or fail to compile are
recorded in the results, they do not change the status); 1 when eager itself failed for some
configuration (a broken model); 2 on a usage error. Timings never affect the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .models import DEFAULT_SUITE, MODELS, QUICK_SUITE

QUICK_DEFAULTS = {"iters": 10, "warmup": 2, "chunk": 5, "time_budget": 15.0}
FULL_DEFAULTS = {"iters": 30, "warmup": 3, "chunk": 5, "time_budget": 60.0}


def _csv(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _csv_int(s: str) -> list[int]:
    try:
        vals = [int(p) for p in _csv(s)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return vals


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verifuse bench",
        description="Benchmark eager vs inductor (freezing) vs verifuse on CPU inference models.",
    )
    p.add_argument("--models", type=_csv, default=None,
                   help=f"comma-separated model names (default: {','.join(DEFAULT_SUITE)}; "
                        f"with --quick: {','.join(QUICK_SUITE)}). See --list.")
    p.add_argument("--backends", type=_csv, default=None,
                   help="comma-separated: eager,inductor,inductor-nofreeze,verifuse "
                        "(default: eager,inductor,verifuse)")
    p.add_argument("--batch", type=_csv_int, default=None,
                   help="batch sizes, e.g. 1,32 (default: each model's default batch)")
    p.add_argument("--threads", type=_csv_int, default=None, help="torch.set_num_threads values (default: 1)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per backend per config")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations per backend after compile")
    p.add_argument("--chunk", type=int, default=None, help="iterations per backend per round-robin round")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds of timing per config before rounds stop early (min 5 iters kept)")
    p.add_argument("--json", type=Path, default=None,
                   help="output JSON path (default: bench/results/bench-<timestamp>.json); "
                        "a .md table is written next to it")
    p.add_argument("--quick", action="store_true",
                   help="small models, batch default, 1 thread, few iterations")
    p.add_argument("--inductor-cache", choices=("cold", "warm"), default="cold",
                   help="cold (default): inductor compiles into a fresh cache dir each time")
    p.add_argument("--verifuse-options", type=str, default=None,
                   help='JSON dict passed as torch.compile(..., options=...) to verifuse, e.g. \'{"verify":"rules"}\'')
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--no-print", action="store_true", help="do not print the markdown table")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":  # tolerate `verifuse bench ...` passed through whole
        argv = argv[1:]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help / errors
        return int(e.code or 0)

    if args.list:
        for name, s in MODELS.items():
            print(f"{name:18s} {s.family:12s} {'small' if s.small else 'full ':5s} "
                  f"batch {s.default_batch:<3d} {s.description}")
        return 0

    # heavy imports only when actually running
    from .harness import KNOWN_BACKENDS, BenchOptions, default_json_path, run_benchmark, to_markdown, write_report

    defaults = QUICK_DEFAULTS if args.quick else FULL_DEFAULTS
    models = args.models or list(QUICK_SUITE if args.quick else DEFAULT_SUITE)
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        print(f"error: unknown model(s) {unknown}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    backends = args.backends or ["eager", "inductor", "verifuse"]
    bad = [b for b in backends if b not in KNOWN_BACKENDS]
    if bad:
        print(f"error: unknown backend(s) {bad}; known: {', '.join(KNOWN_BACKENDS)}", file=sys.stderr)
        return 2
    if "eager" not in backends:
        backends = ["eager"] + backends  # eager is the reference for accuracy and speedups
    vopts = None
    if args.verifuse_options:
        try:
            vopts = json.loads(args.verifuse_options)
            assert isinstance(vopts, dict)
        except Exception:
            print("error: --verifuse-options must be a JSON object", file=sys.stderr)
            return 2

    def pick(name: str, key: str):
        v = getattr(args, name)
        return defaults[key] if v is None else v

    opts = BenchOptions(
        models=models,
        backends=backends,
        batches=args.batch,
        threads=args.threads or [1],
        iters=max(1, pick("iters", "iters")),
        warmup=max(0, pick("warmup", "warmup")),
        chunk=max(1, pick("chunk", "chunk")),
        time_budget_s=float(pick("time_budget", "time_budget")),
        min_iters=min(5, max(1, pick("iters", "iters"))),
        seed=args.seed,
        inductor_cache=args.inductor_cache,
        verifuse_options=vopts,
        quick=args.quick,
    )
    log = (lambda s: print(s, file=sys.stderr, flush=True))
    report = run_benchmark(opts, log=log, argv=argv)
    json_path = args.json or default_json_path()
    jp, mp = write_report(report, json_path)
    if not args.no_print:
        print(to_markdown(report))
    print(f"wrote {jp} and {mp}", file=sys.stderr)
    eager_failed = any(e.get("backends", {}).get("eager", {}).get("status") != "ok" for e in report["results"])
    eager_failed = eager_failed or any(err.get("stage") in ("build", "run") for err in report["errors"])
    return 1 if eager_failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
