"""``python -m verifuse demo``: the main job on an embedded model (a small ResNet with batch norm,
no downloads). Compiles it, shows the compiled graph, fallbacks and proofs, and measures accuracy
and latency against eager (and inductor with freezing, as a fair peer) in the same run."""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

__all__ = ["main"]


def _time_alternating(fns: dict[str, Callable[[], object]], rounds: int, per_round: int) -> dict[str, list[float]]:
    """Latency samples (ms), alternating between the backends every round so that machine noise
    hits all of them alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    return samples


def _p90(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifuse demo", description=__doc__)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch/oneDNN threads (1 = quiet comparison)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--no-inductor", action="store_true", help="skip the inductor comparison")
    parser.add_argument("--html", default="verifuse_report.html",
                        help="where to write the report picture (self-contained HTML; default %(default)s)")
    args = parser.parse_args(argv)

    import verifuse
    from verifuse.models import SmallResNet, randomize_batchnorm

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = randomize_batchnorm(SmallResNet()).eval()
    x = torch.randn(args.batch, 3, 64, 64)
    print(f"verifuse demo: SmallResNet (4 basic blocks, batch norm) on {tuple(x.shape)}, "
          f"{args.threads} thread(s), torch {torch.__version__}")

    report = verifuse.explain(model, x)
    print()
    print(report)
    print(f"\nreport picture (partitions, fusions, engines): {report.save_html(args.html)}")
    with torch.no_grad():
        reference = model(x)

    torch._dynamo.reset()  # explain() compiled this model already; time a cold compile
    t0 = time.perf_counter()
    compiled = torch.compile(model, backend="verifuse")
    with torch.no_grad():
        out = compiled(x)
    verifuse_compile = time.perf_counter() - t0
    max_abs = (out - reference).abs().max().item()
    print(f"\naccuracy: max |verifuse - eager| = {max_abs:.3e} "
          f"(float32 assert_close tolerance: rtol 1.3e-6, atol 1e-5)")

    fns: dict[str, Callable[[], object]] = {}
    fns["eager"] = lambda: model(x)
    fns["verifuse"] = lambda: compiled(x)
    compile_times = {"verifuse": verifuse_compile}
    if not args.no_inductor:
        import torch._inductor.config as inductor_config

        torch._dynamo.reset()
        t0 = time.perf_counter()
        inductor = torch.compile(model, backend="inductor")
        # Freezing must be on in the tracing thread at trace time, or inductor is not a fair peer.
        with inductor_config.patch(freezing=True), torch.no_grad():
            inductor(x)
        compile_times["inductor"] = time.perf_counter() - t0
        fns["inductor"] = lambda: inductor(x)

    with torch.no_grad():
        for fn in fns.values():  # warm-up
            for _ in range(3):
                fn()
        samples = _time_alternating(fns, args.rounds, 5)
    eager_median = statistics.median(samples["eager"])
    print(f"\nlatency, batch {args.batch}, {args.threads} thread(s), {args.rounds} alternating rounds x 5 calls:")
    print(f"  {'backend':10s} {'median ms':>10s} {'p90 ms':>9s} {'vs eager':>9s} {'compile s':>10s}")
    for name, xs in samples.items():
        median = statistics.median(xs)
        compile_s = f"{compile_times[name]:.2f}" if name in compile_times else "-"
        print(f"  {name:10s} {median:10.3f} {_p90(xs):9.3f} {eager_median / median:8.2f}x {compile_s:>10s}")
    print(f"\nstats: {verifuse.stats()}")
    return 0
