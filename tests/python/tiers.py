"""The capability model for tests: what this run may use (the CPU, capped by VERIFUSE_MAX_ISA), as
skip markers whose reasons name what a test needs and the tier the run has. No test asks cpuid or
assumes the developer's CPU: `make test` also reruns the ISA-sensitive tests capped to lower tiers
(tests/run_tiers.py)."""
import pytest

from verifuse.env import capabilities

CAPS = capabilities()
TIER = CAPS["tier"]


def requires(predicate: str, what: str) -> pytest.MarkDecorator:
    """Skip unless the capability model's ``predicate`` (a key of verifuse.env.capabilities(),
    e.g. "onednn_native_bf16") holds."""
    return pytest.mark.skipif(not CAPS[predicate], reason=f"needs {what}; this run: {CAPS['summary']}")


def lacks(predicate: str, what: str) -> pytest.MarkDecorator:
    """Skip where the predicate holds (tests of what happens without a feature)."""
    return pytest.mark.skipif(bool(CAPS[predicate]), reason=f"tests a CPU without {what}; this run: {CAPS['summary']}")


def is_native_bf16_impl(impl: str) -> bool:
    """A kernel on bf16 instructions: oneDNN's avx512_core_bf16 or AMX ones, or verifuse's own
    AVX512-BF16 GEMM; not the widened ones (float32 arithmetic on bf16 data: "bf16io" in the name)."""
    return ("bf16" in impl or "amx" in impl) and "bf16io" not in impl
