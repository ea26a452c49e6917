"""``python -m verifuse <command>``: env, demo, prove, shapes, bench, fuzz."""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "env": ("verifuse.env", "the CPU tier verifuse runs as: features, the VERIFUSE_MAX_ISA cap, oneDNN's ISA"),
    "demo": ("verifuse.demo", "compile a small ResNet, show the graph, fallbacks, accuracy and speed"),
    "prove": ("verifuse.prove", "prove every rewrite rule and refute every mutant"),
    "shapes": ("verifuse.shapes", "analyze SMT-LIB shape programs"),
    "bench": ("verifuse_bench.cli", "benchmark eager, inductor and verifuse"),
    "fuzz": ("verifuse.fuzz", "differential fuzzing: random models, verifuse (strict) vs eager"),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: python -m verifuse <command> [args]\n\ncommands:")
        for name, (_, help_text) in COMMANDS.items():
            print(f"  {name:8s} {help_text}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module_name, _ = COMMANDS[argv[0]]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        print(f"verifuse: the '{argv[0]}' command is not available in this build: {err}", file=sys.stderr)
        return 2
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
