"""Nothing sluice starts outlives what started it: a pipeline dropped without ``close()`` stops its threads and
worker processes once collected, and a SIGKILLed training process leaves no worker and no named shared memory
(``/dev/shm``) behind. The reference is the PyTorch DataLoader's iterator, whose workers end in both cases."""

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import sluice
from sluice import fn

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and /dev/shm are Linux's")


def sample(info):
    return np.full((2,), info.idx_in_epoch, np.int32)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def _wait_until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _sluice_threads(but=()) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sluice") and t not in but]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_dropped_pipeline_stops_its_threads_and_workers(start):
    before = _sluice_threads()  # other tests' pipelines, not closed yet

    @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=0, py_num_workers=2,
                         py_start_method=start)
    def pipe():
        return fn.external_source(source=sample, batch=False, parallel=True)

    p = pipe()
    (out,) = p.run()
    assert [int(s[0]) for s in out.as_cpu().samples] == [0, 1, 2, 3]
    pids = [pid for op in p.executor.operators.values() for pid in op._pool.pids]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    assert _sluice_threads(before)
    del p, out
    gc.collect()
    assert _wait_until(lambda: not any(_alive(pid) for pid in pids), 5), "workers outlived the pipeline"
    assert _wait_until(lambda: not _sluice_threads(before), 12), \
        f"threads outlived the pipeline: {[t.name for t in _sluice_threads(before)]}"


def test_close_waits_for_the_running_operator_and_starts_no_other():
    """close() while an operator of a prefetched iteration still runs (a program's last iteration on a slow
    machine): close() returns once that operator has finished and the stage thread has ended, and no later operator
    starts. Before, close() gave up after 5 s and the daemon thread ran the rest of the iteration with closed
    operators and a shut pool, on into the interpreter's exit, which it can abort (SIGABRT)."""
    running, release = threading.Event(), threading.Event()
    calls = []

    def first(iteration):
        if iteration == 1:  # the prefetched iteration: still running when the pipeline is closed
            running.set()
            release.wait(10)
        calls.append(("first", iteration))
        return [np.full((2,), iteration, np.int32)]

    def second(iteration):
        calls.append(("second", iteration))
        return [np.full((2,), iteration, np.int32)]

    @sluice.pipeline_def(batch_size=1, num_threads=2, device_id=None, seed=0, prefetch_queue_depth=2)
    def pipe():
        return fn.external_source(source=first, batch=True), fn.external_source(source=second, batch=True)

    p = pipe()
    p.run()
    assert running.wait(10)
    stage = list(p.executor._threads)
    closer = threading.Thread(target=p.close, daemon=True)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() returned while an operator was running"
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert not any(t.is_alive() for t in stage), "the stage thread outlived close()"
    assert calls == [("first", 0), ("second", 0), ("first", 1)], calls


_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import sluice
    from sluice import fn

    def sample(info):
        return np.full((2,), info.idx_in_epoch, np.int32)

    if __name__ == "__main__":
        @sluice.pipeline_def(batch_size=4, num_threads=2, device_id=None, seed=0, py_num_workers=2,
                             py_start_method=sys.argv[1])
        def pipe():
            return fn.external_source(source=sample, batch=False, parallel=True)

        p = pipe()
        p.run()
        pids = [pid for op in p.executor.operators.values() for pid in op._pool.pids]
        print(json.dumps(pids), flush=True)
        sys.stdin.read()  # wait to be killed
""")


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (workers, the resource tracker)."""
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in os.listdir(f"/proc/{p}/task") if os.path.isdir(f"/proc/{p}/task") else []:
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = {int(x) for x in f.read().split()}
            except FileNotFoundError:
                continue
            todo.extend(kids - found)
            found |= kids
    return found


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_sigkilled_parent_leaves_no_worker_and_no_shared_memory(tmp_path, start):
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    shm_before = set(os.listdir("/dev/shm"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, str(script), start], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, start_new_session=True)
    descendants: set[int] = set()
    try:
        line = proc.stdout.readline()
        assert line, "the training script ended before its first batch"
        workers = json.loads(line)
        descendants = _children(proc.pid)  # with spawn, also multiprocessing's resource tracker
        assert set(workers) <= descendants
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_until(lambda: not any(_alive(pid) for pid in descendants), 5), \
            f"left running: {[pid for pid in descendants if _alive(pid)]}"
        assert _wait_until(lambda: not (set(os.listdir("/dev/shm")) - shm_before), 5), \
            f"left in /dev/shm: {sorted(set(os.listdir('/dev/shm')) - shm_before)}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in descendants:  # whatever a failure left
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.stdin.close()
        proc.stdout.close()


_WORKERS_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from sluice._workers import Workers

    workers = Workers()
    spawned = workers.worker(module=sys.argv[1], method="spawn", name="spawned")
    forked = workers.worker(module=sys.argv[1], method="forkserver", name="forked")
    assert spawned.call(1) == 1 and forked.call(2) == 2
    holder = os.fork()  # a child holding the workers' sockets open: EOF alone would never come
    if holder == 0:
        time.sleep(60)
        os._exit(0)
    print(spawned.pid, forked.pid, workers.server_pid(sys.argv[1]), holder, flush=True)
    sys.stdin.read()  # wait to be killed
""")


def test_workers_and_fork_server_end_with_their_parent_even_when_their_sockets_stay_open(tmp_path):
    """sluice._workers' processes (a spawned module worker, a fork server and the worker it forked) exit when the
    process that started them is SIGKILLed, even while a forked child of that process holds their sockets open."""
    (tmp_path / "serve.py").write_text("def handle(request):\n    return request\n")
    script = tmp_path / "parent.py"
    script.write_text(_WORKERS_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "serve.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    pids = []
    try:
        pids = [int(x) for x in proc.stdout.readline().split()]
        spawned, forked, server, holder = pids
        assert _alive(spawned) and _alive(forked) and _alive(server)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_until(lambda: not any(_alive(p) for p in (spawned, forked, server)), 5), \
            f"left running: {[p for p in (spawned, forked, server) if _alive(p)]}"
        assert _alive(holder)  # so it was not EOF that ended them
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.stdin.close()
        proc.stdout.close()
