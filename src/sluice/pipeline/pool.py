"""Splitting a batch's per-sample work over the executor's thread pool: contiguous runs of samples, one pool task
each, and a map that lets every task finish before the first failure is raised.

Each task is one call into the compiled core (:mod:`sluice.native`) or one Python loop over its run, so a batch
costs the pool a bounded number of hand-offs rather than one per sample.

Example::

    parts = map_all(pool, lambda r: work(items[r.start:r.stop]), runs(len(items), pool, per_thread=2))
"""

from __future__ import annotations

from concurrent.futures import wait

import numpy as np

__all__ = ["MAX_TASKS", "runs", "map_all", "share_work"]

#: The samples of a batch go to at most this many pool tasks: a task per file cost more in the pool's hand-offs
#: than reading it (6.6k vs 15.1k files/s of 69 KB measured here).
MAX_TASKS = 32


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
        tasks = min(tasks, int(per_thread) * int(getattr(pool, "_max_workers", MAX_TASKS // 2) or 1))
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
    wait(futures)
    return [f.result() for f in futures]


def share_work(pool, work, n: int) -> None:
    """Start ``work`` (a callable that takes items from a shared queue until none is left, such as the core's
    ``FileBatchRead.work``) in up to ``n - 1`` of ``pool``'s threads, then run it in the calling thread. Nothing
    waits for the pool's tasks: the work object itself tells when every item is done (``FileBatchRead.wait``), and
    a task that starts after that finds nothing left. With no pool (or one shut down) the caller does it all."""
    if pool is not None and n > 1:
        helpers = min(n, int(getattr(pool, "_max_workers", 1) or 1)) - 1
        try:
            for _ in range(helpers):
                pool.submit(work)
        except RuntimeError:  # the pool is shutting down (the pipeline closes): the caller finishes alone
            pass
    work()
