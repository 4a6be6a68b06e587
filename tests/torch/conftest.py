"""Data for the sluice.torch tests: tiny files whose bytes are their own number, so every batch shows which
samples it holds."""

import pytest


@pytest.fixture
def numbered_files(tmp_path):
    """``numbered_files(n, first=0)``: paths of n files holding the single byte first, first+1, ..."""
    def make(n, first=0):
        paths = []
        for i in range(first, first + n):
            p = tmp_path / f"{i:03d}.bin"
            p.write_bytes(bytes([i]))
            paths.append(str(p))
        return paths

    return make


@pytest.fixture
def seven(numbered_files):
    """DALI's documented example data set: samples 1..7."""
    return numbered_files(7, first=1)
