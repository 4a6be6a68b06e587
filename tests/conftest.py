"""Test options: the `cuda` mark (skipped without a GPU) and a `device` fixture binding tests to cpu and gpu.
Everything sluice writes while the tests run (video indexes, demo images) goes to pytest's temporary folder: the
cache root ``SLUICE_CACHE`` (and HOME) point there for the whole session, never at the user's ``~/.cache/sluice``."""

import os
from pathlib import Path

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


@pytest.fixture(scope="session", autouse=True)
def sluice_cache(tmp_path_factory):
    """sluice's cache root for the session (subprocesses started by tests inherit it). HOME points into pytest's
    folder as well, and the session fails if anything lands in its ~/.cache/sluice: code that ignores
    SLUICE_CACHE is caught without touching the user's cache (which other programs may be writing to)."""
    keys = ("HOME", "XDG_CACHE_HOME", "SLUICE_CACHE", "SLUICE_VIDEO_INDEX_DIR", "PIP_CONFIG_FILE")
    saved = {k: os.environ.get(k) for k in keys}
    user_pip = [p for p in (Path.home() / ".config" / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf")
                if p.exists()]
    if user_pip and "PIP_CONFIG_FILE" not in os.environ:  # pip in tests (the fresh-install test) keeps its settings
        os.environ["PIP_CONFIG_FILE"] = str(user_pip[0])
    home = tmp_path_factory.mktemp("home")
    os.environ["HOME"] = str(home)
    os.environ.pop("XDG_CACHE_HOME", None)
    root = tmp_path_factory.mktemp("sluice_cache")
    os.environ["SLUICE_CACHE"] = str(root)
    os.environ.pop("SLUICE_VIDEO_INDEX_DIR", None)  # the video indexes follow SLUICE_CACHE
    yield root
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    stray = sorted(str(p) for p in (home / ".cache" / "sluice").rglob("*") if p.is_file())
    assert not stray, f"written into ~/.cache/sluice instead of $SLUICE_CACHE: {stray[:10]}"


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.cuda)])
def device(request):
    """Runs a test once on the CPU and, where a GPU exists, once on it."""
    return request.param


@pytest.fixture
def device_id(device):
    return 0 if device == "gpu" else None


@pytest.fixture
def triton_interpreter():
    """Runs a script in a fresh Python with ``TRITON_INTERPRET=1`` (the flag is read when kernels are defined, so
    not in this process) and asserts it exits cleanly with ``ok`` last on its output: Triton kernels checked on a
    machine without a GPU."""
    import subprocess
    import sys

    def run(script: str, timeout: float = 600) -> None:
        env = dict(os.environ, TRITON_INTERPRET="1")
        res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout)
        assert res.returncode == 0 and res.stdout.strip().lower().endswith("ok"), \
            res.stdout[-2000:] + res.stderr[-3000:]

    return run
