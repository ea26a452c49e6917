"""``python -m verifuse bench`` (also ``python -m verifuse_bench``).

    bench [--suite own|hf|timm|torchvision] [--models a,b] [--tiny]
          [--backends eager,inductor,inductor-nofreeze,openvino,zentorch,verifuse|all]
          [--batch 1,32] [--threads 1,2] [--iters N] [--warmup N] [--chunk N] [--time-budget S]
          [--json PATH] [--resume] [--in-process] [--config-timeout S] [--memory inprocess|isolated]
          [--no-plot] [--quick] [--inductor-cache cold|warm] [--verifuse-options JSON] [--seed N] [--list]
          [--dtype float32|bfloat16|int8]

Exit status: 0 when the run completed (backends or models that are unavailable, and backends
that fail to compile, are recorded in the results; they do not change the status); 1 when eager
itself failed for some configuration (a broken model); 2 on a usage error. Timings never affect
the exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# chunk 1: every round runs each backend once, so each timed call has a partner of every other
# backend seconds away, and the verdicts pair them by round (harness.ratio_uncertainty).
QUICK_DEFAULTS = {"iters": 10, "warmup": 2, "chunk": 1, "time_budget": 15.0}
FULL_DEFAULTS = {"iters": 30, "warmup": 3, "chunk": 1, "time_budget": 60.0}


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
    from .backends import ALL_BACKENDS
    from .models import DEFAULT_SUITE, QUICK_SUITE
    from .suites import SUITES

    p = argparse.ArgumentParser(
        prog="python -m verifuse bench",
        description="Benchmark verifuse against eager, inductor, OpenVINO and zentorch on CPU inference models.",
    )
    p.add_argument("--suite", choices=SUITES, default=None,
                   help="model suite: own (the project's models), hf (transformers), timm, torchvision")
    p.add_argument("--models", type=_csv, default=None,
                   help=f"comma-separated model names (default: the suite's models; without --suite: "
                        f"{','.join(DEFAULT_SUITE)}; with --quick: {','.join(QUICK_SUITE)}). With --suite, "
                        "the suite prefix may be left out (--suite hf --models bert_base). See --list.")
    p.add_argument("--tiny", action="store_true", help="the suite's tiny stand-in models (smoke runs)")
    p.add_argument("--tier", default=None,
                   help="measure as on a CPU of this tier (avx2, avx512, ...): verifuse, eager, inductor, MKL and "
                        "oneDNN capped (verifuse.env.cap_environment); zentorch, which cannot be, is left out")
    p.add_argument("--backends", type=_csv, default=None,
                   help=f"comma-separated: {','.join(ALL_BACKENDS)} or 'all' (default: all; with --quick: "
                        "eager,inductor,verifuse). A backend that is not installed is recorded as unavailable.")
    p.add_argument("--batch", type=_csv_int, default=None,
                   help="batch sizes, e.g. 1,32 (default: each model's default batch sizes)")
    p.add_argument("--threads", type=_csv_int, default=None, help="torch.set_num_threads values (default: 1)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per backend per config")
    p.add_argument("--warmup", type=int, default=None, help="untimed iterations per backend after compile")
    p.add_argument("--chunk", type=int, default=None, help="iterations per backend per round-robin round")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds of timing per config before rounds stop early (min 5 iters kept)")
    p.add_argument("--json", type=Path, default=None,
                   help="output JSON path (default: bench/results/bench[-SUITE]-<timestamp>.json); the .md "
                        "table and .png plot are written next to it, per-configuration files in <stem>.d/")
    p.add_argument("--resume", action="store_true",
                   help="reuse the finished per-configuration files of an earlier run with the same --json "
                        "and settings")
    p.add_argument("--in-process", action="store_true",
                   help="run every configuration in this process instead of one process each")
    p.add_argument("--config-timeout", type=float, default=3600.0,
                   help="seconds before a configuration's process is killed (default 3600)")
    p.add_argument("--memory", choices=("inprocess", "isolated"), default="inprocess",
                   help="isolated: also measure each backend's peak RSS in a process of its own")
    p.add_argument("--no-plot", action="store_true", help="do not write the PNG")
    p.add_argument("--quick", action="store_true",
                   help="small models, batch default, 1 thread, few iterations, eager,inductor,verifuse")
    p.add_argument("--inductor-cache", choices=("cold", "warm"), default="cold",
                   help="cold (default): inductor compiles into a fresh cache dir each time")
    p.add_argument("--verifuse-cache", choices=("cold", "default"), default="cold",
                   help="cold (default): verifuse compiles each configuration into its own empty cache_dir "
                        "and reports a second, warm compile from it (compile_warm_s); default: the user's cache")
    p.add_argument("--verifuse-options", type=str, default=None,
                   help='JSON dict passed as torch.compile(..., options=...) to verifuse, e.g. \'{"verify":"rules"}\'')
    p.add_argument("--dtype", choices=("float32", "bfloat16", "int8"), default="float32",
                   help="float32 (default); bfloat16: every model .to(torch.bfloat16) and its floating-point "
                        "inputs too; the reference is eager bf16, and one eager float32 call per configuration "
                        "measures eager's own bf16 error. int8: the float32 model quantized once with PT2E "
                        "(torchao X86InductorQuantizer, calibrated on random inputs) and the same quantized graph "
                        "given to every backend; the reference is that graph run by eager, plus error and top-1 "
                        "agreement against the float32 model. Part of the result file names (-bf16, -int8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="list the models of every suite and exit")
    p.add_argument("--no-print", action="store_true", help="do not print the markdown table")
    return p


def _list_models() -> None:
    from .suites import SUITE_REQUIRES, SUITES, registry

    import importlib.util

    reg = registry()
    for suite in SUITES:
        libs = SUITE_REQUIRES[suite]
        missing = [m for m in libs if importlib.util.find_spec(m) is None
                   and not (m == "torchvision" and _vendored_torchvision())]
        state = f" (needs {', '.join(missing)}: make bench-deps)" if missing else ""
        print(f"--suite {suite}{state}")
        for name, e in reg.items():
            if e.suite != suite:
                continue
            batches = ",".join(str(b) for b in e.default_batches)
            print(f"  {name:26s} {e.family:11s} {'tiny ' if e.tiny else '     '}batch {batches:6s} {e.description}")


def _vendored_torchvision() -> bool:
    from .vendor import vendor_dir

    return (vendor_dir() / "torchvision" / "__init__.py").is_file()


def _run_capped(argv: list[str]) -> "int | None":
    """--tier T: run the whole benchmark as on a CPU of tier T (verifuse.env.cap_environment: verifuse,
    eager, inductor, MKL and every oneDNN capped). The caps are read when each library starts, so the
    process starts again with them set; None when there is nothing to do."""
    if "--tier" not in argv:
        return None
    i = argv.index("--tier")
    if i + 1 >= len(argv):
        print("error: --tier needs a tier name", file=sys.stderr)
        return 2
    tier, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    from verifuse.env import cap_environment

    try:
        caps = cap_environment(tier)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if all(os.environ.get(k) == v for k, v in caps.items()):
        return None
    env = dict(os.environ, **caps)
    os.execve(sys.executable, [sys.executable, "-m", "verifuse_bench", *rest, "--tier", tier], env)
    return 0  # not reached


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":  # tolerate `verifuse bench ...` passed through whole
        argv = argv[1:]
    capped = _run_capped(argv)
    if capped is not None:
        return capped
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help / errors
        return int(e.code or 0)

    if args.list:
        _list_models()
        return 0

    from .backends import ALL_BACKENDS, BACKENDS
    from .models import DEFAULT_SUITE, QUICK_SUITE
    from .suites import resolve, suite_models

    defaults = QUICK_DEFAULTS if args.quick else FULL_DEFAULTS
    try:
        if args.models:
            models = resolve(args.models, args.suite)
        elif args.suite:
            models = suite_models(args.suite, tiny=args.tiny)
        else:
            models = list(QUICK_SUITE if args.quick else DEFAULT_SUITE)
    except KeyError as e:
        print(f"error: unknown model {e}; see --list", file=sys.stderr)
        return 2
    if args.backends and args.backends != ["all"]:
        backends = [b for b in args.backends if b != "all"]
    elif args.backends == ["all"] or not args.quick:
        backends = list(ALL_BACKENDS)
        if os.environ.get("VERIFUSE_MAX_ISA") and "zentorch" in backends:
            # zentorch decides AVX-512 by its own cpuid check, which no variable caps: in a capped
            # run it would measure the host's tier, not the one asked for. On a real AVX2 CPU it
            # reduces to inductor (docs/benchmarking.md), which runs here capped.
            backends.remove("zentorch")
            print("note: zentorch left out of a VERIFUSE_MAX_ISA-capped run (it cannot be capped)", file=sys.stderr)
    else:
        backends = ["eager", "inductor", "verifuse"]
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        print(f"error: unknown backend(s) {bad}; known: {', '.join(BACKENDS)}", file=sys.stderr)
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

    # heavy imports only when actually running
    from .harness import BenchOptions, default_json_path, run_benchmark, to_markdown, write_report

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
        verifuse_cache=args.verifuse_cache,
        verifuse_options=vopts,
        quick=args.quick,
        suite=args.suite,
        isolate=not args.in_process,
        resume=args.resume,
        config_timeout_s=args.config_timeout,
        memory=args.memory,
        plot=not args.no_plot,
        dtype=args.dtype,
    )
    log = (lambda s: print(s, file=sys.stderr, flush=True))
    json_path = args.json or default_json_path(opts)
    report = run_benchmark(opts, log=log, argv=argv, json_path=json_path)
    jp, mp = write_report(report, json_path)
    if not args.no_print:
        print(to_markdown(report))
    plot = report.get("plot") or {}
    extra = f" and {plot['path']}" if plot.get("status") == "ok" else (
        f" (no plot: {plot.get('reason')})" if plot else "")
    print(f"wrote {jp} and {mp}{extra}", file=sys.stderr)
    eager_failed = any(e.get("backends", {}).get("eager", {}).get("status") != "ok" for e in report["results"])
    eager_failed = eager_failed or any(err.get("stage") in ("build", "run", "process") for err in report["errors"])
    return 1 if eager_failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
