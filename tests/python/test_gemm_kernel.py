"""The own-GEMM engine's two float32 kernels: verifuse's and MKL's packed sgemm (the one torch's
frozen linears use), chosen per static shape by timing (VERIFUSE_GEMM_KERNEL=auto, the default)
or fixed (own / mkl). Either must give eager's results with every epilogue the engine fuses (bias,
activations, the in-place residual add), and the report must name the kernel that ran.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import verifuse
from verifuse import _C

MKL = _C.capabilities()
needs_mkl = pytest.mark.skipif(not MKL["mkl_sgemm"],
                               reason=f"MKL packed sgemm unavailable: {MKL['mkl_sgemm_unavailable']}")


class Block(nn.Module):
    """A transformer MLP: fc + GELU, fc + residual add, and a plain projection."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(96, 96)
        self.fc1 = nn.Linear(96, 384)
        self.fc2 = nn.Linear(384, 96)
        self.head = nn.Linear(96, 40, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        h = self.fc2(torch.nn.functional.gelu(self.fc1(h))) + h
        return torch.relu(self.head(h))


def explain(monkeypatch, kernel: str, tmp_path, **options):
    monkeypatch.setenv("VERIFUSE_GEMM_KERNEL", kernel)
    monkeypatch.setenv("VERIFUSE_LINEAR", "gemm")  # every linear partition on the own-GEMM engine
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 24, 96)
    with torch.no_grad():
        want = model(x)
    report = verifuse.explain(model, x, strict=True, cache_dir=str(tmp_path), **options)
    compiled = torch.compile(model, backend="verifuse",
                             options={"strict": True, "cache_dir": str(tmp_path), **options})
    with torch.no_grad():
        got = compiled(x)
    torch._dynamo.reset()
    return want, got, report


def linear_impls(report) -> list[str]:
    return [p["impl"] for p in report.to_dict()["partitions"] if "gemm" in p["impl"] or "mkl" in p["impl"]]


@needs_mkl
def test_mkl_kernel_gives_eagers_results_and_is_named(monkeypatch, tmp_path):
    want, got, report = explain(monkeypatch, "mkl", tmp_path)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    impls = linear_impls(report)
    assert impls and all(i == "mkl sgemm_compute (packed)" for i in impls), impls


def test_own_kernel_gives_eagers_results_and_is_named(monkeypatch, tmp_path):
    if not MKL["own_avx2"]:
        pytest.skip(f"needs AVX2+FMA for the own GEMM; this run: {MKL['summary']}")
    want, got, report = explain(monkeypatch, "own", tmp_path)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    impls = linear_impls(report)
    assert impls and all(i.startswith("verifuse gemm:") for i in impls), impls


@needs_mkl
def test_timed_choice_is_one_of_the_two_and_kept_for_the_next_compile(monkeypatch, tmp_path):
    want, got, report = explain(monkeypatch, "auto", tmp_path, autotune=True)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)
    first = linear_impls(report)
    assert first and all(i == "mkl sgemm_compute (packed)" or i.startswith("verifuse gemm:") for i in first)
    # The decisions are in the tuning database: a second process-local compile makes the same
    # choices (timing noise cannot flip them) and times nothing new.
    _, got2, report2 = explain(monkeypatch, "auto", tmp_path, autotune=True)
    torch.testing.assert_close(got2, want, atol=2e-5, rtol=1e-5)
    assert linear_impls(report2) == first
