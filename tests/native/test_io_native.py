"""The compiled core's byte-range reads and CRC-32C against their pure-Python twins (sluice.native.io), and CRC-32C
against the standard check value and the values TFRecord files carry."""

import contextlib

import numpy as np
import pytest

from sluice import native
from sluice.native import io as nio

needs_core = pytest.mark.skipif(not native.available(), reason="the compiled core is not built")


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    out = []
    for k in range(3):
        p = tmp_path / f"f{k}.bin"
        p.write_bytes(rng.integers(0, 256, 1000 + 300 * k, np.uint8).tobytes())
        out.append(str(p))
    return out


def _case(files, tmp_path):
    paths = [files[0], files[0], files[1], str(tmp_path / "missing"), files[2], files[2], files[0]]
    starts = np.array([0, 900, 17, 0, 1500, 1590, 999], np.int64)
    sizes = np.array([10, 200, 300, 5, 90, 50, 1], np.int64)   # the 2nd and 6th run past their file's end
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    return paths, starts, sizes, offsets


def _expected(paths, starts, sizes):
    out = []
    for p, s, n in zip(paths, starts.tolist(), sizes.tolist()):
        try:
            with open(p, "rb") as f:
                f.seek(s)
                out.append(f.read(n))
        except OSError:
            out.append(None)
    return out


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_core), False])
def test_read_ranges_reads_what_python_reads(files, tmp_path, compiled):
    paths, starts, sizes, offsets = _case(files, tmp_path)
    buf = np.zeros(int(sizes.sum()), np.uint8)
    if compiled:
        got, status = nio.read_ranges(paths, starts, sizes, offsets, buf)
    else:
        with native.fallback():
            got, status = nio.read_ranges(paths, starts, sizes, offsets, buf)
    for i, want in enumerate(_expected(paths, starts, sizes)):
        if want is None:
            assert status[i] < 0 and got[i] == 0
        else:
            assert status[i] == 0 and got[i] == len(want)
            assert buf[offsets[i]: offsets[i] + got[i]].tobytes() == want
    assert got[1] == 100 and got[5] == 10  # short reads where the file ends first


@pytest.mark.parametrize("compiled", [pytest.param(True, marks=needs_core), False])
def test_read_ranges_rejects_slots_outside_the_buffer(files, compiled):
    ctx = native.fallback() if not compiled else contextlib.nullcontext()
    with ctx, pytest.raises(ValueError, match="outside the buffer"):
        nio.read_ranges([files[0]], [0], [10], [5], np.zeros(8, np.uint8))


def test_crc32c_check_value_and_twin():
    data = np.frombuffer(b"123456789" + bytes(range(256)) * 3, np.uint8)
    offsets, sizes = np.array([0, 9, 0, 20, 9]), np.array([9, 768, 777, 0, 1])
    with native.fallback():
        slow = nio.crc32c(data, offsets, sizes)
    assert slow[0] == 0xE3069283  # the CRC-32C check value of "123456789"
    assert slow[3] == 0
    if native.available():
        assert np.array_equal(nio.crc32c(data, offsets, sizes), slow)
