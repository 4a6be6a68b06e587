"""sluice.jax: arrays equal to the pipeline's outputs (NumPy as the reference) with the torch iterator's epoch
arithmetic. The checks (jax_iterator_check.py) run in a child process, so that JAX's threads never live in the
test process, which forks DataLoader workers in other tests."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

CHECKS = os.path.join(os.path.dirname(__file__), "jax_iterator_check.py")


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax")
def test_jax_iterator(tmp_path):
    done = subprocess.run([sys.executable, CHECKS, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "OK jax iterator" in done.stdout
