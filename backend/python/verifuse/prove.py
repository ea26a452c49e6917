"""``python -m verifuse prove [--json]``: prove every rewrite rule's obligation with Z3 and refute
every rule's mutants. Exit status 0 only if every rule is Proved and every mutant Refuted (CI
runs this through the test suite)."""
from __future__ import annotations

import argparse

__all__ = ["main"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m verifuse prove", description=__doc__)
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument("--timeout-ms", type=int, default=5000, help="Z3 timeout per query")
    parser.add_argument("--max-k", type=int, default=4, help="bounded instantiation sizes K=1..N")
    parser.add_argument("--cache-dir", default="", help="proof cache directory (default: no cache)")
    args = parser.parse_args(argv)
    from verifuse import _C

    ok, text = _C.prove_all(timeout_ms=args.timeout_ms, max_k=args.max_k, cache_dir=args.cache_dir, json=args.json)
    print(text)
    return 0 if ok else 1
