"""The compiled core's byte-range reads and CRC-32C against their pure-Python twins (sluice.native.io), and CRC-32C
against the standard check value and the values TFRecord files carry."""

import contextlib

import numpy as np
import pytest

from sluice import native
from sluice.native import io as nio

needs_core = pytest.mark.skipif(not native.available(), reason="the compiled core is not built")


def _random_files(folder, sizes, seed: int, prefix: str = "") -> list[str]:
    """Files of random bytes of the given sizes under ``folder``: their paths."""
    rng = np.random.default_rng(seed)
    out = []
    for k, size in enumerate(sizes):
        p = folder / f"{prefix}{k}.bin"
        p.write_bytes(rng.integers(0, 256, size, np.uint8).tobytes())
        out.append(str(p))
    return out


@pytest.fixture
def files(tmp_path):
    return _random_files(tmp_path, [1000 + 300 * k for k in range(3)], seed=0, prefix="f")


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


def _work_in_threads(job, helpers: int = 3) -> int:
    """``job.work()`` in ``helpers`` threads and in this one, then ``job.wait()``: how many items this thread read."""
    import threading

    threads = [threading.Thread(target=job.work) for _ in range(helpers)]
    for t in threads:
        t.start()
    mine = job.work()
    job.wait()
    for t in threads:
        t.join()
    return mine


@needs_core
def test_a_batch_read_by_several_threads_equals_python_reads(tmp_path):
    """FileBatchRead: whichever thread takes which file, the bytes and statuses are those of readers.file's
    pure-Python reads (``_read_fully``; a missing file is -ENOENT, a file larger than its slot 1); a thread that
    calls work() after wait() finds nothing left."""
    import errno
    import os

    from sluice.ops.readers.file import _read_fully

    paths = _random_files(tmp_path, [100 + 37 * k for k in range(40)], seed=1)
    paths[7] = str(tmp_path / "missing")
    sizes = np.array([0 if k == 7 else 100 + 37 * k for k in range(40)], np.int64)
    sizes[11] -= 5  # the file holds more than its slot: it grew since its size was taken
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    c = native.core()
    want = np.zeros(int(sizes.sum()), np.uint8)
    want_got, want_status = np.zeros(40, np.int64), np.zeros(40, np.int32)
    for k, path in enumerate(paths):
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            want_status[k] = -errno.ENOENT
            continue
        try:
            want_got[k], grew = _read_fully(fd, want[offsets[k]: offsets[k] + sizes[k]])
            want_status[k] = 1 if grew else 0
        finally:
            os.close(fd)
    out = np.zeros_like(want)
    job = c.FileBatchRead(paths, offsets, sizes, out)
    mine = _work_in_threads(job)
    got, status = job.results()
    assert np.array_equal(out, want) and np.array_equal(got, want_got) and np.array_equal(status, want_status)
    assert status[7] == -errno.ENOENT and status[11] == 1 and (np.delete(status, [7, 11]) == 0).all()
    assert 0 <= mine <= 40 and job.work() == 0


@needs_core
def test_a_batch_read_checks_its_slots(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"x" * 10)
    with pytest.raises(ValueError, match="slot lies outside"):
        native.core().FileBatchRead([str(p)], np.array([5], np.int64), np.array([10], np.int64), np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="one value per path"):
        native.core().FileBatchRead([str(p)], np.array([0, 1], np.int64), np.array([10], np.int64),
                                    np.zeros(8, np.uint8))


@needs_core
def test_a_batch_of_ranges_read_by_several_threads_equals_the_twin(files, tmp_path):
    """RangeBatchRead: whichever thread takes which range, the bytes, counts and statuses are those of
    read_ranges' pure-Python twin (a missing file is -ENOENT, a range past its file's end is short), with the
    ranges of each file spread over the batch; a thread that calls work() after wait() finds nothing left."""
    import errno

    paths, starts, sizes, offsets = _case(files, tmp_path)
    paths, starts, sizes, offsets = paths * 6, np.tile(starts, 6), np.tile(sizes, 6), np.tile(offsets, 6)
    offsets = offsets + np.repeat(np.arange(6) * int(sizes[:7].sum()), 7)
    want = np.zeros(int(offsets[-1] + sizes[-1]), np.uint8)
    with native.fallback():
        want_got, want_status = nio.read_ranges(paths, starts, sizes, offsets, want)
    distinct = sorted(set(paths))
    index = np.array([distinct.index(p) for p in paths], np.int64)
    out = np.zeros_like(want)
    job = native.core().RangeBatchRead(distinct, index, starts, sizes, offsets, out)
    mine = _work_in_threads(job)
    got, status = job.results()
    assert np.array_equal(out, want) and np.array_equal(got, want_got) and np.array_equal(status, want_status)
    assert status[3] == -errno.ENOENT and got[1] == 100 and got[5] == 10
    assert 0 <= mine <= len(paths) and job.work() == 0


@needs_core
def test_a_batch_of_ranges_checks_its_arguments(files):
    job = native.core().RangeBatchRead
    one = np.array([0], np.int64)
    with pytest.raises(ValueError, match="slot lies outside"):
        job([files[0]], one, one, np.array([10], np.int64), np.array([5], np.int64), np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="not an index of files"):
        job([files[0]], np.array([1], np.int64), one, one, one, np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="starts before"):
        job([files[0]], one, np.array([-1], np.int64), one, one, np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match="one value per file_index"):
        job([files[0]], one, np.array([0, 0], np.int64), one, one, np.zeros(8, np.uint8))
