"""sluice's one worker-process mechanism (sluice._workers): the three ways a worker starts, answers through shared
memory that has no name in /dev/shm, the error a raising worker gives, restart-once, and a pipeline that owns its
workers (made on first use, ended by close() and by del, none shared between two pipelines)."""

from __future__ import annotations

import gc
import os
import re
import signal
import sys
import time

import numpy as np
import pytest

import sluice
from sluice import fn
from sluice._workers import WorkerDied, WorkerError, Workers, report

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfds, /proc and /dev/shm are Linux's")

MODULE = """
import os, sys

def handle(request):
    if request == "modules":
        return sorted(m for m in ("sluice", "torch") if m in sys.modules)
    if request == "die":
        os._exit(3)
    return request
"""


def _children() -> set[int]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        found = {int(p) for p in f.read().split()}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                found |= {int(p) for p in f.read().split()}
        except FileNotFoundError:
            pass
    return {p for p in found if _alive(p)}


def _shm() -> set[str]:
    """/dev/shm's entries, less those another process's name says it made (joblib's, in a test run beside)."""
    return {e for e in os.listdir("/dev/shm") if not ((m := re.search(r"loky-(\d+)-", e)) and int(m[1]) != os.getpid())}


def _no_new_shm(before: set[str]) -> bool:
    """No entry in /dev/shm beyond ``before``, waiting out another process's passing ones (multiprocessing names a
    semaphore there for an instant)."""
    deadline = time.monotonic() + 3
    while _shm() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _shm() - before


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def triple(x):  # module level: picklable for spawn
    report(x, 7)
    if x < 0:
        raise KeyError(f"no sample {x}")
    return np.full(100_000, x * 3, np.int32)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_callable_runs_in_a_worker_and_its_arrays_come_back_through_shared_memory(method):
    shm = _shm()
    with Workers() as workers:
        w = workers.worker(triple, method=method, name="triple")
        out = w.call(5)
        assert out.dtype == np.int32 and (out == 15).all() and out.flags.writeable
        base = out
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base, memoryview)  # a view of the answer's memory file, not a copy in the pickle
        pid = w.pid
        assert pid in _children()
    assert not _alive(pid)
    assert _no_new_shm(shm)


def test_a_module_worker_imports_neither_sluice_nor_torch(tmp_path):
    (tmp_path / "mod.py").write_text(MODULE)
    with Workers() as workers:
        for method in ("spawn", "forkserver"):
            w = workers.worker(module=str(tmp_path / "mod.py"), method=method, name=method, ready_timeout=60)
            assert w.call("modules") == []
        server = workers.server_pid(str(tmp_path / "mod.py"))
        assert server is not None and _alive(server)
    assert not _alive(server)


@pytest.mark.parametrize("method", ["fork"])  # spawn: tests/ops/test_external_source.py
def test_an_error_in_the_worker_names_the_worker_the_request_and_what_it_reported(method):
    with Workers() as workers:
        w = workers.worker(triple, method=method, name="fn.external_source 'src'")
        with pytest.raises(WorkerError, match=r"fn.external_source 'src': KeyError: 'no sample -2' \(while making "
                                              r"sample -2; in worker process \d+\)") as info:
            w.call(-2, "making sample -2")
        assert info.value.type_name == "KeyError" and info.value.progress == (-2, 7)
        assert "Traceback" in info.value.traceback and "triple" in info.value.traceback
        assert (w.call(1) == 3).all()  # the worker lives on


def test_restart_once(tmp_path):
    """A worker killed between requests, or once during one, is started again and the request redone; a request
    whose worker dies twice, or that may not be redone (a generator's), raises WorkerDied naming it."""
    (tmp_path / "mod.py").write_text(MODULE)
    with Workers() as workers:
        w = workers.worker(module=str(tmp_path / "mod.py"), method="forkserver", name="decoder", ready_timeout=60)
        assert w.call(1) == 1
        first = w.pid
        os.kill(first, signal.SIGKILL)  # idle
        assert w.call(2) == 2 and w.pid != first and w.restarts == 1
        with pytest.raises(WorkerDied, match=r"decoder: worker process \d+ died \(exit code 3\) while decoding "
                                             r"'a.mp4' \(it had been started again after dying on it\)") as info:
            w.call("die", "decoding 'a.mp4'")
        assert w.restarts == 2 and not info.value.at_start and info.value.exit_code == 3
        assert w.call(3) == 3  # and on it goes with a new process
        once = workers.worker(module=str(tmp_path / "mod.py"), method="spawn", name="generator", redo=False)
        with pytest.raises(WorkerDied, match=r"generator: worker process \d+ died \(exit code 3\) while running it$"):
            once.call("die", "running it")
        assert once.restarts == 0


def test_a_worker_that_cannot_start_is_at_start(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # an "interpreter" that exits at once
    with Workers() as workers:
        w = workers.worker(triple, method="spawn", name="triple")
        with pytest.raises(WorkerDied, match="before it was ready, twice") as info:
            w.call(1)
        assert info.value.at_start


def test_a_closed_group_starts_nothing():
    workers = Workers()
    workers.close()
    with pytest.raises(RuntimeError, match="closed"):
        workers.worker(triple, method="fork")


def sample(info):
    return np.full((2,), info.idx_in_epoch, np.int32)


def kill_once(marker: str):
    def source(info):
        if info.idx_in_epoch == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return np.full((1,), info.idx_in_epoch, np.int32)
    return source


def _pipe(source, start="fork", workers=2):
    @sluice.pipeline_def(batch_size=4, num_threads=1, device_id=None, seed=0, py_num_workers=workers,
                         py_start_method=start)
    def pipe():
        return fn.external_source(source=source, batch=False, parallel=True)

    return pipe()


def _pids(p) -> list[int]:
    return [pid for op in p.executor.operators.values() for pid in op._pool.pids]


def test_a_parallel_source_whose_worker_dies_once_gives_every_sample(tmp_path):
    p = _pipe(kill_once(str(tmp_path / "killed")))
    try:
        outs = [[int(s[0]) for s in p.run()[0].as_cpu().samples] for _ in range(3)]
        assert outs == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        pool = next(op._pool for op in p.executor.operators.values())
        assert [w.restarts for w in pool._workers] == [1, 0]
    finally:
        p.close()


@pytest.mark.parametrize("start,end", [("fork", "close"), ("fork", "del"), ("spawn", "close")])
def test_a_pipeline_leaves_no_worker_and_no_shared_memory(start, end):
    shm, children = _shm(), _children()
    p = _pipe(sample, start)
    runtime = p.executor.runtime
    assert _pids(p) == [] and ("worker processes",) in runtime.sessions()  # made at build, started on first use
    for _ in range(3):
        p.run()
    pids = _pids(p)
    assert len(pids) == 2 and set(pids) <= _children()
    if end == "close":
        p.close()
        assert runtime.closed and not runtime.sessions()
    else:
        del p, runtime
        gc.collect()
    assert not any(_alive(pid) for pid in pids)
    assert _children() <= children, f"left running: {_children() - children}"
    assert _no_new_shm(shm), f"left in /dev/shm: {_shm() - shm}"


def test_train_and_val_pipelines_have_their_own_workers():
    train, val = _pipe(sample), _pipe(sample, workers=1)
    try:
        train.run()
        val.run()
        assert train.executor.runtime.workers() is not val.executor.runtime.workers()
        a, b = _pids(train), _pids(val)
        assert len(a) == 2 and len(b) == 1 and not set(a) & set(b)
        train.close()
        assert not any(_alive(pid) for pid in a) and all(_alive(pid) for pid in b)
        assert [int(s[0]) for s in val.run()[0].as_cpu().samples] == [4, 5, 6, 7]
    finally:
        train.close()
        val.close()
