"""Shared pytest fixtures: seeded RNG, deterministic threads, dynamo reset between tests."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch.manual_seed(0)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: tests that take more than a few seconds")
