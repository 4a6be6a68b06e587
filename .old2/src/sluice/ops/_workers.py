"""Worker processes for ``fn.external_source(parallel=True)``.

Each worker runs the user's callback on the samples it is given and sends back torch tensors, which
``torch.multiprocessing`` moves through shared memory (no pickling of the pixel data). Batches are prepared
``prefetch_queue_depth`` iterations ahead. A worker that dies, or a callback that raises, becomes an exception
in the pipeline naming the worker, the error and, for per-sample sources, the sample; the pool never waits on a
dead worker. Workers exit when the pipeline's process dies (:func:`sluice._pipes.exit_with_parent`), and a pool that
is closed, or dropped with its pipeline, stops them.
"""

from __future__ import annotations

import gc
import logging
import os
import queue
import threading
import time
import traceback
from typing import Any

import torch.multiprocessing as mp

from sluice import types
from sluice._pipes import exit_with_parent
from sluice.errors import SampleError
from sluice.pipeline.batch import to_tensor

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.2
_STOP = "__sluice_end_of_epoch__"


def _tensors(value: Any) -> Any:
    if isinstance(value, (tuple, list)) and not (value and isinstance(value[0], (int, float))):
        return type(value)(_tensors(v) for v in value)
    return to_tensor(value)


def _worker_main(source: Any, kind: str, batch_info: bool, tasks: Any, results: Any, parent_pid: int,
                 current: Any) -> None:
    """``current`` (shared with the pool) holds the iteration and index in the batch of the sample being made, or
    -1: the pool names that sample when this process dies."""
    exit_with_parent(parent_pid)
    generator = None
    while True:
        task = tasks.get()
        if task is None:
            return
        task_id, what, payload = task
        try:
            if what == "samples":
                out = []
                for info in payload:
                    current[0], current[1] = info.iteration, info.idx_in_batch
                    try:
                        out.append(_tensors(source(info)))
                    except StopIteration:
                        out.append(_STOP)  # the samples before the end still count
                        break
            elif what == "batch":
                out = _tensors(source(payload) if batch_info else source())
            elif what == "next":
                if generator is None or payload == "restart":
                    generator = iter(source())
                out = _tensors(next(generator))
            else:
                raise ValueError(f"unknown task {what}")
            current[1] = -1
            results.put((task_id, "ok", out))
        except StopIteration:
            generator = None
            current[1] = -1
            results.put((task_id, "stop", None))
        except BaseException as e:  # noqa: BLE001 - reported to the pipeline
            sample = int(current[1])
            current[1] = -1
            results.put((task_id, "error", (sample, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")))


class WorkerPool:
    """A pool of processes running one external_source's callback."""

    def __init__(self, source: Any, kind: str, num_workers: int, start_method: str, depth: int, name: str,
                 batch_info: bool):
        self.source = source
        self.kind = kind
        self.num_workers = max(1, num_workers if kind != "generator_function" else 1)
        self.start_method = start_method
        self.depth = max(1, depth)
        self.name = name
        self.batch_info = batch_info
        self._procs: list[Any] = []
        self._tasks: list[Any] = []
        self._current: list[Any] = []  # per worker: [iteration, sample index in the batch] it works on, or -1
        self._task_iteration: dict[int, int] = {}  # task id -> the iteration its samples belong to
        self._results: Any = None
        self._next_task = 0
        self._pending: dict[Any, list[int]] = {}  # key -> task ids
        self._done: dict[int, tuple[str, Any]] = {}
        self._restart_generator = True
        self._discarded: set[int] = set()

    def _start(self) -> None:
        if self._procs:
            return
        ctx = mp.get_context(self.start_method)  # 'fork' or 'spawn', checked by the Pipeline
        _tracker_users(+1, self.start_method)
        self._results = ctx.Queue()
        for _ in range(self.num_workers):
            tasks = ctx.Queue()
            current = ctx.RawArray("q", [-1, -1])
            proc = ctx.Process(target=_worker_main, args=(self.source, self.kind, self.batch_info, tasks,
                                                          self._results, os.getpid(), current), daemon=True)
            proc.start()
            self._procs.append(proc)
            self._tasks.append(tasks)
            self._current.append(current)

    def _submit(self, worker: int, what: str, payload: Any) -> int:
        self._start()
        task_id = self._next_task
        self._next_task += 1
        self._tasks[worker].put((task_id, what, payload))
        return task_id

    def _wait(self, task_id: int) -> tuple[str, Any]:
        while task_id not in self._done:
            try:
                tid, status, payload = self._results.get(timeout=_POLL_SECONDS)
                if tid in self._discarded:
                    self._discarded.discard(tid)
                else:
                    self._done[tid] = (status, payload)
            except queue.Empty:
                self._raise_if_a_worker_died(self._task_iteration.get(task_id))
            except (ConnectionError, EOFError, OSError) as exc:
                # Tensors come back as file descriptors served by the worker that made them: a worker that died
                # after sending a result leaves it unreadable. Report the death, not the broken connection.
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    self._raise_if_a_worker_died(self._task_iteration.get(task_id))
                    time.sleep(0.02)
                raise RuntimeError(f"{self.name}: could not receive data from a worker process "
                                   f"({type(exc).__name__}: {exc})") from exc
        return self._done.pop(task_id)

    def _raise_if_a_worker_died(self, awaited_iteration: int | None = None) -> None:
        """Raise if a worker died: a SampleError naming the sample it was making when that sample belongs to the
        awaited iteration (the batch being made), else an error naming it in words (a sample prefetched)."""
        for proc, current in zip(self._procs, self._current):
            if not proc.is_alive():
                iteration, sample = int(current[0]), int(current[1])
                what = f"sample {sample} of iteration {iteration}" if sample >= 0 else "data"
                error = RuntimeError(f"{self.name}: worker process {proc.pid} died (exit code {proc.exitcode}) while "
                                     f"preparing {what}; see the worker's output above")
                if sample >= 0 and iteration == awaited_iteration:
                    raise SampleError(sample, "", error) from None
                raise error from None

    def _collect(self, task_ids: list[int]) -> list[Any]:
        out = []
        for tid in task_ids:
            status, payload = self._wait(tid)
            iteration = self._task_iteration.pop(tid, None)
            if status == "stop":
                raise StopIteration
            if status == "error":
                sample, text = payload
                if sample >= 0:
                    raise SampleError(sample, "", RuntimeError(
                        f"{self.name}: the source raised in a worker process on sample {sample} of iteration "
                        f"{iteration}: {text}"))
                raise RuntimeError(f"{self.name}: the source raised in a worker process: {text}")
            out.append(payload)
        return out

    # ---- per-sample callables ------------------------------------------------------------------------------
    def _submit_samples(self, infos: list[types.SampleInfo]) -> list[int]:
        n = len(infos)
        per = -(-n // self.num_workers)
        ids = [self._submit(w, "samples", infos[w * per:(w + 1) * per]) for w in range(self.num_workers)
               if infos[w * per:(w + 1) * per]]
        for tid in ids:
            self._task_iteration[tid] = infos[0].iteration
        return ids

    def get_samples(self, infos: list[types.SampleInfo]) -> list[Any]:
        first = infos[0]
        key = (first.epoch_idx, first.iteration)
        ids = self._pending.pop(key, None) or self._submit_samples(infos)
        n = len(infos)
        for ahead in range(1, self.depth + 1):
            k = (first.epoch_idx, first.iteration + ahead)
            if k not in self._pending:
                base = first.idx_in_epoch + ahead * n
                self._pending[k] = self._submit_samples(
                    [types.SampleInfo(base + i, i, first.iteration + ahead, first.epoch_idx) for i in range(n)])
        samples = []
        for chunk in self._collect(ids):
            for sample in chunk:
                if isinstance(sample, str) and sample == _STOP:
                    return samples + [_STOP]
                samples.append(sample)
        return samples

    # ---- batch callables and generator functions --------------------------------------------------------------
    def get_batch(self, info: types.BatchInfo) -> Any:
        if self.kind == "generator_function":
            restart = "restart" if self._restart_generator else ""
            self._restart_generator = False
            return self._collect([self._submit(0, "next", restart)])[0]
        key = (info.epoch_idx, info.iteration)
        ids = self._pending.pop(key, None) or [self._submit(info.iteration % self.num_workers, "batch", info)]
        for ahead in range(1, self.depth + 1):
            k = (info.epoch_idx, info.iteration + ahead)
            if k not in self._pending:
                self._pending[k] = [self._submit((info.iteration + ahead) % self.num_workers, "batch",
                                                 types.BatchInfo(info.iteration + ahead, info.epoch_idx))]
        return self._collect(ids)[0]

    # ---- epochs ------------------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget work prefetched past the end of the epoch."""
        for ids in self._pending.values():
            self._discarded.update(ids)
            for tid in ids:
                self._task_iteration.pop(tid, None)
        self._pending.clear()
        self._restart_generator = True

    def restart_at(self, iteration: int, epoch_idx: int, idx_in_epoch: int) -> None:
        self.reset()

    def close(self) -> None:
        """Stop the workers (idempotent). The queues' named semaphores go with them; the resource tracker goes too
        when sluice started it and no other pool of sluice uses it."""
        if not self._procs:
            return
        for tasks in self._tasks:
            try:
                tasks.put(None)
            except Exception:  # noqa: BLE001 - the worker may be gone
                pass
        for proc in self._procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2)
        for q in self._tasks + [self._results]:
            try:
                q.close()
                q.join_thread()
            except Exception:  # noqa: BLE001 - closing must not raise
                pass
        self._procs, self._tasks, self._current, self._results = [], [], [], None
        _tracker_users(-1, self.start_method)


_tracker: dict[str, Any] = {"users": 0, "started_by_us": False}
_tracker_lock = threading.Lock()


def _tracker_users(delta: int, start_method: str) -> None:
    """Count the pools that need multiprocessing's resource tracker (spawn starts it, and registers the queues'
    named semaphores with it). When the last one closes, stop the tracker if sluice's first pool started it."""
    if start_method == "fork":
        return
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    with _tracker_lock:
        if delta > 0:
            if _tracker["users"] == 0 and not _tracker["started_by_us"]:
                _tracker["started_by_us"] = getattr(tracker, "_fd", None) is None
            _tracker["users"] += 1
            return
        _tracker["users"] = max(0, _tracker["users"] - 1)
        if _tracker["users"] or not _tracker["started_by_us"]:
            return
    # The closed queues' semaphores unregister themselves when collected, which may be later than now (a
    # pipeline collected by the garbage collector closes its pools from inside a collection).
    threading.Thread(target=_stop_tracker_when_unused, args=(tracker,), name="sluice-tracker-stop",
                     daemon=True).start()


def _registered_resources_alive() -> bool:
    """Whether this process holds a named semaphore or shared memory block (sluice's or anyone's): a tracker
    stopped under them would unlink their names, which processes started later need."""
    from multiprocessing import synchronize

    from multiprocessing.shared_memory import SharedMemory

    gc.collect()
    # type(), not isinstance(): the latter reads __class__, which some objects turn into a warning (torch's
    # deprecated torch.distributed.reduce_op)
    return any((issubclass(type(o), synchronize.SemLock) and o._semlock.name is not None)
               or issubclass(type(o), SharedMemory) for o in gc.get_objects())


def _stop_tracker_when_unused(tracker: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = _registered_resources_alive()
        with _tracker_lock:
            if _tracker["users"] or not _tracker["started_by_us"]:
                return  # a new pool uses it
            if not busy:
                _tracker["started_by_us"] = False
                pid = _close_tracker(tracker)
                break
        time.sleep(0.1)
    else:
        return
    # It exits once every process holding its pipe has closed it (fork children of this process hold it too):
    # reap it when it does, without blocking anything on it.
    while pid is not None and time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.1)


def _close_tracker(tracker: Any) -> int | None:
    """Close our end of the tracker's pipe, as ``ResourceTracker._stop`` does but without waiting for it to
    exit; its pid, or None. A later spawn starts a new one (``ensure_running``)."""
    lock = getattr(tracker, "_lock", None)
    if lock is None or not hasattr(tracker, "_fd"):
        return None  # another Python's tracker: it exits with the interpreter
    with lock:
        if tracker._fd is None:
            return None
        fd, pid = tracker._fd, getattr(tracker, "_pid", None)
        tracker._fd = None
        tracker._pid = None
        try:
            os.close(fd)
        except OSError:
            pass
        return pid
