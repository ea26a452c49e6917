"""verifuse benchmark suite: model zoo (written from scratch, no downloads) and an
eager / inductor(freezing) / verifuse comparison harness.

    python -m verifuse bench --models resnet18 --backends eager,inductor,verifuse
    python -m verifuse_bench --quick          # same CLI, without the verifuse package

Nothing here asserts on timings: this is a benchmark, not a test.
"""

from .models import MODELS, ModelSpec, get_spec, list_models

__all__ = ["MODELS", "ModelSpec", "get_spec", "list_models"]
