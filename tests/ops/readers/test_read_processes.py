"""readers.file's worker processes: the bytes equal the files' (read with Python's open), errors name the file,
a killed worker loses no batch, held buffers never block, and a GPU pipeline reads through them."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

import sluice
from sluice import fn
from sluice.errors import SampleError
from sluice.ops.readers import read_processes
from sluice.ops.readers.file import contiguous_bytes, is_page_locked_buffer, read_files
from sluice.ops.readers.read_processes import ProcessReader, _read_here, _runs_by_bytes, read_processes_default


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(3)
    paths = []
    for i, size in enumerate([0, 1, 4097, 70_000, 250_003, 5, 131_072, 99_999, 12]):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(str(p))
    return paths


@pytest.fixture
def reader():
    r = ProcessReader(3)
    yield r
    r.close()


def _same(samples, paths):
    assert len(samples) == len(paths)
    for s, p in zip(samples, paths):
        with open(p, "rb") as f:
            assert s.numpy().tobytes() == f.read(), p


def test_bytes_equal_the_files(files, reader):
    for order in (files, files[::-1], files[2:5] * 3, files[:1]):
        _same(read_files(order, processes=reader), order)
    assert reader.stats["process_batches"] == 4 and reader.stats["thread_batches"] == 0
    assert len(reader.slots) == 1  # each batch's views died before the next: one buffer reused


def test_batch_lies_back_to_back_in_one_buffer(files, reader):
    samples = read_files(files, processes=reader)
    region = contiguous_bytes(samples)
    assert region is not None and region.numel() == sum(os.path.getsize(p) for p in files)
    assert not is_page_locked_buffer(region)  # no GPU here: ordinary shared memory


def test_missing_file_names_it_and_its_sample(files, reader, tmp_path):
    paths = files[:4] + [str(tmp_path / "gone.bin")] + files[4:]
    open(paths[4], "wb").close()
    os.remove(paths[4])
    with pytest.raises(SampleError, match="gone.bin") as info:
        read_files(paths, processes=reader)
    assert info.value.index == 4 and info.value.source.endswith("gone.bin")
    _same(read_files(files, processes=reader), files)  # the next batch is fine


def test_unreadable_file_named_by_the_worker(files, reader, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    locked = tmp_path / "locked.bin"
    locked.write_bytes(b"secret")
    locked.chmod(0)
    with pytest.raises(SampleError, match="cannot read .*locked.bin.*ermission"):
        read_files(files + [str(locked)], processes=reader)


def test_worker_killed_between_batches_is_restarted(files, reader):
    _same(read_files(files, processes=reader), files)
    victim = reader.workers[1].proc
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    _same(read_files(files, processes=reader), files)
    assert reader.workers[1].proc.pid != victim.pid


def test_worker_killed_mid_batch_loses_no_file(files, reader, monkeypatch, caplog):
    """The files of a worker that dies while reading are read by the caller; the next batch starts a new one."""
    send = read_processes._send
    victim = []

    def send_then_kill(stream, message):
        send(stream, message)
        worker = reader.workers[1]
        if worker.proc is not None and stream is worker.proc.stdin and not victim:
            victim.append(worker.proc)
            os.kill(worker.proc.pid, signal.SIGKILL)

    monkeypatch.setattr(read_processes, "_send", send_then_kill)
    with caplog.at_level("WARNING"):
        _same(read_files(files, processes=reader), files)
    assert reader.stats["worker_restarts"] == 1 and "reading process exited" in caplog.text
    _same(read_files(files, processes=reader), files)
    assert reader.workers[1].proc.pid != victim[0].pid


def test_held_batches_never_block(files, reader, monkeypatch):
    monkeypatch.setattr(read_processes, "MAX_SLOTS", 2)
    kept = [read_files(files, processes=reader) for _ in range(4)]
    for batch in kept:
        _same(batch, files)
    assert reader.stats == {"process_batches": 2, "thread_batches": 2, "worker_restarts": 0}
    del kept
    _same(read_files(files, processes=reader), files)
    assert reader.stats["process_batches"] == 3 and len(reader.slots) == 2


def test_larger_batch_replaces_a_small_buffer(tmp_path, reader):
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 10)
    _same(read_files([str(small)], processes=reader), [str(small)])
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 << 20))
    _same(read_files([str(big), str(small)], processes=reader), [str(big), str(small)])
    assert len(reader.slots) == 1 and reader.slots[0].capacity >= 3 << 20


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/PID/maps (Linux)")
def test_replaced_buffer_unmapped_by_every_worker(tmp_path, reader):
    """A buffer replaced by a larger one is unmapped by each worker at its next request, also by workers that had
    no file in the batch that replaced it (else its memory stays held after the unlink)."""
    small = [str(tmp_path / f"s{i}.bin") for i in range(3)]
    for p in small:
        open(p, "wb").write(b"x" * 100)
    _same(read_files(small, processes=reader), small)
    old = reader.slots[0].shm.name
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 << 20))
    _same(read_files([str(big)], processes=reader), [str(big)])  # one file: only one worker is asked
    _same(read_files(small, processes=reader), small)
    for worker in reader.workers:
        with open(f"/proc/{worker.proc.pid}/maps") as f:
            assert old not in f.read()


def test_full_shared_memory_falls_back_to_threads(files, reader, monkeypatch, caplog):
    """A /dev/shm too small for a batch (Docker's 64 MB default) is a warning and the threads' path, never a
    SIGBUS."""
    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with caplog.at_level("WARNING"):
        for _ in range(2):
            _same(read_files(files, processes=reader), files)
    assert "is /dev/shm large enough" in caplog.text and caplog.text.count("No space left") == 1
    assert reader.stats["thread_batches"] == 2 and not reader.slots


def test_file_that_grew_is_read_whole(tmp_path):
    path = tmp_path / "grows.bin"
    path.write_bytes(b"abcdefgh")
    buf = bytearray(16)
    kind, payload = _read_here(memoryview(buf), [(0, str(path), 2, 5)])
    assert kind == "ok" and payload == [(0, 5, True)] and bytes(buf[2:7]) == b"abcde"
    kind, payload = _read_here(memoryview(buf), [(0, str(path), 0, 12)])  # shrank: the bytes there are
    assert payload == [(0, 8, False)]


def test_close_ends_the_workers_and_frees_the_memory(files):
    r = ProcessReader(2)
    read_files(files, processes=r)
    procs = [w.proc for w in r.workers]
    names = [s.shm.name for s in r.slots]
    r.close()
    assert all(p.poll() is not None for p in procs)
    assert not any(os.path.exists(f"/dev/shm/{n}") for n in names)


def test_runs_balance_bytes():
    assert _runs_by_bytes([10, 10, 10, 10], 2) == [range(2), range(2, 4)]
    assert _runs_by_bytes([100, 1, 1, 1], 3)[0] == range(1)
    assert sum(len(r) for r in _runs_by_bytes([5] * 7, 16)) == 7
    assert _runs_by_bytes([0, 0, 0], 2) and _runs_by_bytes([], 4) == [range(0)]


def test_process_count_setting(monkeypatch):
    monkeypatch.setenv("SLUICE_READ_PROCESSES", "0")
    assert read_processes_default() == 0
    monkeypatch.setenv("SLUICE_READ_PROCESSES", "many")
    with pytest.raises(ValueError, match="SLUICE_READ_PROCESSES"):
        read_processes_default()
    monkeypatch.delenv("SLUICE_READ_PROCESSES")
    assert 2 <= read_processes_default() <= 8
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(128)), raising=False)
    assert read_processes_default() == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")  # sixteen ranks on 128 cores: 8 cores each, 4 readers each
    assert read_processes_default() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "32")
    assert read_processes_default() == 2


def test_cpu_pipeline_reads_in_threads(files):
    """Only a GPU pipeline's reader uses worker processes (its batches go to the GPU by DMA)."""
    @sluice.pipeline_def(batch_size=3, num_threads=2, device_id=None)
    def pipe():
        data, _ = fn.readers.file(files=files, name="Reader")
        return data

    p = pipe()
    p.build()
    (data,) = p.run()
    _same(list(data), files[:3])
    reader_op = next(op for op in p._executor.operators.values() if hasattr(op, "_processes"))
    assert reader_op._processes() is None


@pytest.mark.cuda
def test_gpu_pipeline_reads_through_page_locked_processes(files):
    @sluice.pipeline_def(batch_size=len(files), num_threads=2, device_id=0)
    def pipe():
        data, _ = fn.readers.file(files=files, name="Reader")
        return data, data.gpu()

    p = pipe()
    p.build()
    for _ in range(3):
        host, dev = p.run()
        _same(list(host), files)
        assert [bytes(s.cpu().numpy()) for s in dev] == [bytes(s.numpy()) for s in host]
        assert is_page_locked_buffer(contiguous_bytes(list(host)))
    reader_op = next(op for op in p._executor.operators.values() if hasattr(op, "_processes"))
    assert reader_op._reader.stats["process_batches"] >= 1
    assert torch.cuda.is_available()
    p.close() if hasattr(p, "close") else None
