"""The bench tests import the checkout's bench/verifuse_bench, not an older installed copy."""

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def use_source_tree_bench() -> None:
    """Drop an imported verifuse_bench that is not this checkout's, and put bench/ first on the path."""
    mod = sys.modules.get("verifuse_bench")
    if mod is not None and Path(mod.__file__).resolve().parent.parent != BENCH:
        for name in [n for n in sys.modules if n == "verifuse_bench" or n.startswith("verifuse_bench.")]:
            del sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
