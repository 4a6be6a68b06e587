"""Test options: the `cuda` mark (skipped without a GPU) and a `device` fixture binding tests to cpu and gpu."""

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def device(request):
    """Runs a test once on the CPU and, where a GPU exists, once on it."""
    return request.param


@pytest.fixture
def device_id(device):
    return 0 if device == "gpu" else None
