"""Encoded bytes decoded as files (memfds): copied once per content, read back exactly, closed when evicted and
unused, and a reused descriptor number never taken for the file it named before. The reference is the bytes
themselves (read back through the path) and the frames' barcodes."""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest
import torch

from sluice.backends.video import get_index, prepare_clip, read_clips
from sluice.backends.video.barcode import read_barcodes
from sluice.backends.video.hybrid import HybridBackend
from sluice.backends.video.index import file_key
from sluice.backends.video.memfile import MemoryFiles

import fake_nvc

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfds are Linux's")


def _bytes(path) -> np.ndarray:
    return np.frombuffer(open(path, "rb").read(), np.uint8)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_bytes_fed_again_are_copied_once_and_read_back(videos):
    files = MemoryFiles()
    data = _bytes(videos["h264-mp4"])
    first = files.lease(data)
    again = files.lease(data[:])  # another view of the same memory, as each sample of external_source is
    assert again is first and files.copies == 1
    assert _read(first.path) == data.tobytes()
    other = files.lease(_bytes(videos["h264-mov"]))
    assert other.path != first.path and files.copies == 2
    assert _read(other.path) == _bytes(videos["h264-mov"]).tobytes()
    for lease in (first, again, other):
        files.release(lease)
    files.close()
    with pytest.raises(OSError):
        _read(first.path)


def test_evicted_only_when_unused_and_a_reused_number_names_another_file(videos):
    files = MemoryFiles(max_bytes=1)  # nothing kept once unused
    a = files.lease(_bytes(videos["h264-mp4"]))
    key_a = file_key(a.path)
    b = files.lease(_bytes(videos["h264-mov"]))
    assert _read(a.path) == _bytes(videos["h264-mp4"]).tobytes()  # in use: kept though over the limit
    files.release(a)
    with pytest.raises(OSError):
        os.fstat(a.fd)  # closed once unused
    c = files.lease(_bytes(videos["h264-ts"]))
    assert c.path == a.path  # the number is reused...
    assert file_key(c.path) != key_a  # ...for a file the caches tell apart
    files.release(b)
    files.release(c)
    files.close()


@pytest.fixture
def fake_files(monkeypatch):
    created: list = []
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", fake_nvc.make_module(created, with_simple=True))
    for name, value in (("misnumber", False), ("fail_open", False), ("clock", None), ("stamp_offsets", None)):
        monkeypatch.setattr(fake_nvc.SimpleDecoder, name, value)
    return created


def _batch(backend, data, path, reqs):
    idx = get_index(data)
    return read_clips([prepare_clip(data, frames=r, index=idx) for r in reqs], backend)


def test_hybrid_decodes_bytes_as_files_in_processes_and_the_file_decoder(videos, gpu_videos, fake_files):
    """Bytes (as decoders.video gets them from external_source) go to the worker processes and NVDEC's file
    decoder through a memfd. Two videos of different sizes fed in turn, each memfd closed after its batch, so the
    next one takes its number: every frame is the right one of the right video (a decoder or container kept for
    the old file would give the other size)."""
    small, large = videos["h264-mp4"], gpu_videos["h264-mp4"]
    backend = HybridBackend(sessions=1, cpu_workers=2, cpu_processes=True)
    backend._memory_files.max_bytes = 1
    reqs = [[0, 7, 14], [3, 4, 30], [21, 22, 23], [1, 9, 17]]
    in_process, decode_in_process = [], backend._decode_in_process
    backend._decode_in_process = lambda job, worker: in_process.append(job.source) or decode_in_process(job, worker)
    backend.start_workers()
    deadline = time.monotonic() + 30
    while not all(w.poll_ready() for w in backend._workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        paths = []
        for k, source in enumerate([small, large, small, large, small]):
            data = _bytes(source)
            jobs_of, seen = backend._jobs, []
            backend._jobs = lambda requests, leases: seen.append(jobs_of(requests, leases)) or seen[-1]
            clips = _batch(backend, data, source, reqs)
            backend._jobs = jobs_of
            paths.append({j.source for j in seen[0][0]})
            want = (48, 64) if source == small else (144, 160)
            assert [read_barcodes(c.frames) for c in clips] == reqs, k
            assert all(tuple(c.frames.shape[1:3]) == want for c in clips), k
            assert all(isinstance(p, str) and p.startswith("/proc/") for p in paths[-1])
        assert len(set().union(*paths)) < len(paths)  # numbers were reused
        assert backend.nvdec.stats["file_decoder_runs"] > 0 and in_process
    finally:
        backend.close()
    assert backend._memory_files.copies == 5


def test_bytes_fed_again_reach_the_decoders_without_a_copy(videos, fake_files):
    backend = HybridBackend(sessions=1, cpu_workers=1, cpu_processes=False)
    data = _bytes(videos["h264-mp4"])
    try:
        first = _batch(backend, data, None, [[0, 5]])
        for _ in range(3):
            again = _batch(backend, data[:], None, [[0, 5]])
        assert torch.equal(first[0].frames, again[0].frames)
        assert backend._memory_files.copies == 1
    finally:
        backend.close()
