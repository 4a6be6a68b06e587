"""Splitting a batch's per-sample work over the executor's thread pool: contiguous runs of samples, one pool task
each, and a map that lets every task finish before the first failure is raised.

Each task is one call into the compiled core (:mod:`sluice.native`) or one Python loop over its run, so a batch
costs the pool a bounded number of hand-offs rather than one per sample.

Example::

    parts = map_all(pool, lambda r: work(items[r.start:r.stop]), runs(len(items), pool, per_thread=2))
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, ThreadPoolExecutor
from typing import Any

import numpy as np

from sluice import native   # the core or its twins (native knows no pipeline)

__all__ = ["MAX_TASKS", "runs", "map_all", "share_work", "run_shared", "share_range", "share_items", "ThreadPool",
           "RuntimePool"]

#: The samples of a batch go to at most this many pool tasks: a task per file cost more in the pool's hand-offs
#: than reading it (6.6k vs 15.1k files/s of 69 KB measured here).
MAX_TASKS = 32


def _threads(pool) -> int:
    """How many threads ``pool`` runs, as it says (``threads``: a :class:`ThreadPool`, every pool of the runtime's);
    1 without a pool, and for a pool that does not say (a plain ``ThreadPoolExecutor``: the helpers here then work
    in the calling thread, as without a pool, so give them a :class:`ThreadPool`)."""
    return max(1, int(getattr(pool, "threads", 1) or 1)) if pool is not None else 1


def runs(n: int, pool, per_thread: int = 0, weights=None) -> list[range]:
    """Contiguous runs of ``n`` samples, one per pool task: at most MAX_TASKS of them, or ``per_thread`` per pool
    thread. With ``weights`` (each sample's cost, such as its bytes) the runs carry about equal weight, else equal
    counts.

    Every task costs hand-offs that take the GIL (its start, its return, its future), and those queue behind
    each other: reading a batch of 64 files of 882 KB in 16 threads took 2.3 ms as 16 runs, 3.8 ms as 32 and
    6.8 ms as 64 (H200 host, benchmarks/diag/read_threads.py). Work of a predictable cost (bytes to read) is
    best cut into one run per thread by weight; work whose cost varies (decoding) takes two per thread."""
    if pool is None or n < 2:
        return [range(n)]
    tasks = MAX_TASKS
    if per_thread:
        tasks = min(tasks, int(per_thread) * _threads(pool))
    tasks = min(n, tasks)
    if weights is not None:
        total = np.cumsum(np.maximum(np.asarray(weights, dtype=np.float64), 0.0) + 1.0)  # +1: a per-sample cost
        if total.size == n and total[-1] > 0:
            # run k ends after the first sample whose running total reaches k/tasks of the whole
            ends = np.searchsorted(total, total[-1] * np.arange(1, tasks) / tasks, side="left") + 1
            bounds = np.unique(np.concatenate([[0], np.minimum(ends, n), [n]])).tolist()
            return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    size = -(-n // tasks)
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def map_all(pool, fn, items: list) -> list:
    """``[fn(x) for x in items]``, in ``pool``'s threads when there is one; every task finishes before the first
    failure (in order) is raised, so that no task still works on what the caller cleans up (open files)."""
    if pool is None or len(items) < 2:
        return [fn(x) for x in items]
    futures = [pool.submit(fn, x) for x in items]
    for f in futures:
        # not concurrent.futures.wait(): it never returns for a task that pool.shutdown(cancel_futures=True)
        # took off the queue (cancelled, but its waiters never told); exception() returns or raises for those too
        try:
            f.exception()
        except CancelledError:
            pass
    return [f.result() for f in futures]


def share_work(pool, work, n: int) -> None:
    """Start ``work`` (a callable that takes items from a shared queue until none is left, such as the core's
    ``FileBatchRead.work``) in up to ``n - 1`` of ``pool``'s threads, then run it in the calling thread. Nothing
    waits for the pool's tasks: the work object itself tells when every item is done (``FileBatchRead.wait``), and
    a task that starts after that finds nothing left. With no pool (or one shut down) the caller does it all."""
    if pool is not None and n > 1:
        helpers = min(n, _threads(pool)) - 1
        try:
            for _ in range(helpers):
                pool.submit(work)
        except RuntimeError:  # the pool is shutting down (the pipeline closes): the caller finishes alone
            pass
    work()


def run_shared(pool, job, n: int):
    """A batch job of the compiled core (``FileBatchRead``, ``RangeBatchRead``: ``n`` items, ``run(core)``, ``work()``,
    ``wait()``, ``results()``): run on the core's worker threads in one call when the pool has them
    (:class:`RuntimePool`), else worked by the calling thread and the pool's (:func:`share_work`); its results once
    every item is read."""
    core = getattr(pool, "core", None)
    if core is not None:
        job.run(core)
        return job.results()
    share_work(pool, job.work, n)
    job.wait()
    return job.results()


class _SharedRange:
    """The items ``[0, n)`` handed out in chunks to whichever thread asks next (guided: a chunk is a
    ``1 / (2 * threads)`` share of what is left, at least one item), and counted as they finish."""

    def __init__(self, n: int, work: Callable[[int, int], Any], threads: int):
        self.n, self.work, self.threads = n, work, max(1, threads)
        self.lock = threading.Lock()
        self.finished_all = threading.Condition(self.lock)
        self.next = self.finished = 0
        self.results: dict[int, Any] = {}
        self.errors: dict[int, BaseException] = {}

    def _claim(self) -> tuple[int, int] | None:
        with self.lock:
            left = self.n - self.next
            if left <= 0:
                return None
            lo = self.next
            self.next += max(1, left // (2 * self.threads))
            return lo, self.next

    def loop(self) -> None:
        while (chunk := self._claim()) is not None:
            lo, hi = chunk
            try:
                result, error = self.work(lo, hi), None
            except BaseException as e:  # noqa: BLE001 - raised by the caller, after every chunk finished
                result, error = None, e
            with self.lock:
                self.results[lo] = result
                if error is not None:
                    self.errors[lo] = error
                self.finished += hi - lo
                if self.finished == self.n:
                    self.finished_all.notify_all()

    def wait(self) -> None:
        with self.lock:
            while self.finished < self.n:
                self.finished_all.wait()


def share_range(pool, n: int, work: Callable[[int, int], Any]) -> list:
    """``work(lo, hi)`` over the items ``[0, n)``, in chunks taken by the calling thread and up to ``n - 1`` pool
    threads, each taking the next chunk when it is free (see :class:`_SharedRange`): a thread that starts late
    (its core busy, the GIL taken) takes fewer chunks rather than holding the batch back with a fixed share of it,
    and nothing waits for a pool task that never started. Returns the chunks' results in order; the first failure
    (by position) is raised once every chunk taken has finished."""
    if n <= 0:
        return []
    threads = _threads(pool)
    shared = _SharedRange(n, work, threads)
    share_work(pool if threads > 1 else None, shared.loop, n)
    shared.wait()
    if shared.errors:
        raise shared.errors[min(shared.errors)]
    return [shared.results[lo] for lo in sorted(shared.results)]



def share_items(pool, n: int, work: Callable[[int, int, Any], Any]) -> list:
    """A batch kernel of the compiled core over the items ``[0, n)``: with the pipeline's :class:`RuntimePool`,
    ``work(0, n, core)`` once, where ``core`` is its ``WorkerPool``: the kernel runs the items on the core's worker
    threads and the calling thread in one call, the GIL released once. (A call per pool thread and chunk, as
    :func:`share_range` makes, took the GIL back per chunk: with 16 threads busy, the speech program's pool threads
    waited for it longer than they worked.) Otherwise ``work(lo, hi, None)`` over chunks in the pool's threads, as
    :func:`share_range` does (the core's pure-Python twins, or no pool). Returns the calls' results."""
    core = getattr(pool, "core", None)
    if n <= 0:
        return []
    if core is not None:
        return [work(0, n, core)]
    return share_range(pool, n, lambda lo, hi: work(lo, hi, None))


#: Cores the compiled core's workers leave to the pipeline's own threads while the device stage runs its operators
#: from Python (see :meth:`RuntimePool.reserve_stage_cores`). The stage threads (reader, CPU stage, device stage) and
#: the training loop take turns on the GIL; a batch call of the core runs on its workers and the calling thread at
#: once, so with a worker for every core the thread holding the GIL was descheduled while the others waited for it.
STAGE_CORES = 3

#: Operators the device stage runs eagerly in an iteration (not replayed as a CUDA graph) from which the core's
#: workers leave :data:`STAGE_CORES` cores to the stage threads: a ragged speech batch runs 7, a dense log-mel batch
#: none (one replay), DALI's ResNet-50 programs 2-3.
EAGER_NODES_RESERVING = 4


def native_workers(threads: int) -> int:
    """How many native threads the core's ``WorkerPool`` of a ``threads``-thread pool runs while the stage threads
    keep cores: ``threads``, but at most the cores this process may use less :data:`STAGE_CORES` (and at least
    one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):    # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(int(threads), cores - STAGE_CORES))


class ThreadPool(ThreadPoolExecutor):
    """A thread pool that says how many threads it runs (``threads``), by which the helpers here cut a batch into
    tasks. The runtime's pools are of this kind (:meth:`sluice.runtime.Runtime.thread_pool`, :class:`RuntimePool`);
    code outside a pipeline that hands a pool to sluice's kernels (a benchmark) makes one the same way.

    Example::

        with ThreadPool(8) as pool:
            parts = map_all(pool, work, runs(n, pool, per_thread=2))
    """

    def __init__(self, threads: int, thread_name_prefix: str = "", initializer: Callable[[], Any] | None = None):
        self.threads = max(1, int(threads))
        super().__init__(self.threads, thread_name_prefix=thread_name_prefix, initializer=initializer)


class RuntimePool(ThreadPool):
    """The pipeline's CPU pool (its :class:`sluice.runtime.Runtime` makes one with ``num_threads`` and shuts it with
    the pipeline; ``initializer`` runs first in each of its threads): Python threads for host work written in Python,
    and, where the compiled core is built, ``core``: the core's ``WorkerPool`` on which its batch kernels run their
    items with the GIL released (:func:`share_items`, :func:`run_shared`). The native threads never run Python.

    ``core`` runs ``threads`` native threads, or :func:`native_workers` of them while the executor says the device
    stage needs cores for its Python (:meth:`reserve_stage_cores`): two ``WorkerPool`` objects, the idle one's
    threads asleep. On the H100's 16 cores the speech program ran 8,738 utt/s with every core for the workers and
    10,130 with three kept; a FLAC log-mel program, whose device stage is one graph replay, ran 2,350-2,376 clips/s
    with every core and 1,988-2,005 with three kept (2026-11-28)."""

    def __init__(self, threads: int, initializer: Callable[[], Any] | None = None):
        super().__init__(threads, "sluice-cpu", initializer)
        c = native.core()
        usable = c is not None and hasattr(c, "WorkerPool")
        fewer = native_workers(threads)
        self.every_core = c.WorkerPool(threads) if usable else None
        self.fewer_cores = c.WorkerPool(fewer) if usable and fewer < threads else self.every_core
        self.core = self.every_core

    def reserve_stage_cores(self, eager_nodes: int) -> None:
        """The device stage ran ``eager_nodes`` operators from Python in its last iteration: from
        :data:`EAGER_NODES_RESERVING` on, the core's batch calls leave :data:`STAGE_CORES` cores to the stage threads,
        else they take every thread. A call already running keeps the workers it started on."""
        self.core = self.fewer_cores if eager_nodes >= EAGER_NODES_RESERVING else self.every_core

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        for core in {id(c): c for c in (self.every_core, self.fewer_cores) if c is not None}.values():
            core.close()
