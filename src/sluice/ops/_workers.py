"""Worker processes for ``fn.external_source(parallel=True)``.

Each worker runs the user's callback on the samples it is given and sends back torch tensors, which
``torch.multiprocessing`` moves through shared memory (no pickling of the pixel data). Batches are prepared
``prefetch_queue_depth`` iterations ahead. A worker that dies, or a callback that raises, becomes an exception
in the pipeline naming the worker and the error; the pool never waits on a dead worker, and a worker whose
pipeline's process died (a rank killed under torchrun) exits rather than wait for tasks that never come.
"""

from __future__ import annotations

import logging
import os
import queue
import time
import traceback
from typing import Any

import torch.multiprocessing as mp

from sluice import types
from sluice.pipeline.batch import to_tensor

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.2
_STOP = "__sluice_end_of_epoch__"


def _tensors(value: Any) -> Any:
    if isinstance(value, (tuple, list)) and not (value and isinstance(value[0], (int, float))):
        return type(value)(_tensors(v) for v in value)
    return to_tensor(value)


def _worker_main(source: Any, kind: str, batch_info: bool, tasks: Any, results: Any) -> None:
    parent = os.getppid()
    generator = None
    while True:
        try:
            task = tasks.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if os.getppid() != parent:  # the pipeline's process died without closing the pool (SIGKILL)
                return
            continue
        if task is None:
            return
        task_id, what, payload = task
        try:
            if what == "samples":
                out = []
                for info in payload:
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
            results.put((task_id, "ok", out))
        except StopIteration:
            generator = None
            results.put((task_id, "stop", None))
        except BaseException as e:  # noqa: BLE001 - reported to the pipeline
            results.put((task_id, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


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
        self._results: Any = None
        self._next_task = 0
        self._pending: dict[Any, list[int]] = {}  # key -> task ids
        self._done: dict[int, tuple[str, Any]] = {}
        self._restart_generator = True
        self._discarded: set[int] = set()

    def _start(self) -> None:
        if self._procs:
            return
        try:
            ctx = mp.get_context(self.start_method)
        except ValueError:
            raise ValueError(f"{self.name}: unknown py_start_method '{self.start_method}'; use 'fork' or "
                             "'spawn'") from None
        self._results = ctx.Queue()
        for _ in range(self.num_workers):
            tasks = ctx.Queue()
            proc = ctx.Process(target=_worker_main, args=(self.source, self.kind, self.batch_info, tasks,
                                                          self._results), daemon=True)
            proc.start()
            self._procs.append(proc)
            self._tasks.append(tasks)

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
                self._raise_if_a_worker_died()
            except (ConnectionError, EOFError, OSError) as exc:
                # Tensors come back as file descriptors served by the worker that made them: a worker that died
                # after sending a result leaves it unreadable. Report the death, not the broken connection.
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    self._raise_if_a_worker_died()
                    time.sleep(0.02)
                raise RuntimeError(f"{self.name}: could not receive data from a worker process "
                                   f"({type(exc).__name__}: {exc})") from exc
        return self._done.pop(task_id)

    def _raise_if_a_worker_died(self) -> None:
        for proc in self._procs:
            if not proc.is_alive():
                raise RuntimeError(f"{self.name}: worker process {proc.pid} died (exit code {proc.exitcode}) while "
                                   "preparing data; see the worker's output above") from None

    def _collect(self, task_ids: list[int]) -> list[Any]:
        out = []
        for tid in task_ids:
            status, payload = self._wait(tid)
            if status == "stop":
                raise StopIteration
            if status == "error":
                raise RuntimeError(f"{self.name}: the source raised in a worker process: {payload}")
            out.append(payload)
        return out

    # ---- per-sample callables ------------------------------------------------------------------------------
    def _submit_samples(self, infos: list[types.SampleInfo]) -> list[int]:
        n = len(infos)
        per = -(-n // self.num_workers)
        return [self._submit(w, "samples", infos[w * per:(w + 1) * per]) for w in range(self.num_workers)
                if infos[w * per:(w + 1) * per]]

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
        self._pending.clear()
        self._restart_generator = True

    def restart_at(self, iteration: int, epoch_idx: int, idx_in_epoch: int) -> None:
        self.reset()

    def close(self) -> None:
        for tasks in self._tasks:
            try:
                tasks.put(None)
            except Exception:  # noqa: BLE001 - the worker may be gone
                pass
        for proc in self._procs:
            proc.join(timeout=2)
            if proc.is_alive():
                proc.terminate()
        self._procs = []
        self._tasks = []
