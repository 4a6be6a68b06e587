"""Splitting a batch's per-sample work over the executor's thread pool: contiguous runs of samples, one pool task
each, and a map that lets every task finish before the first failure is raised.

Each task is one call into the compiled core (:mod:`sluice.native`) or one Python loop over its run, so a batch
costs the pool a bounded number of hand-offs rather than one per sample.

Example::

    parts = map_all(pool, lambda r: work(items[r.start:r.stop]), runs(len(items), pool, per_thread=True))
"""

from __future__ import annotations

from concurrent.futures import wait

__all__ = ["MAX_TASKS", "runs", "map_all"]

#: The samples of a batch go to at most this many pool tasks: a task per file cost more in the pool's hand-offs
#: than reading it (6.6k vs 15.1k files/s of 69 KB measured here).
MAX_TASKS = 32


def runs(n: int, pool, per_thread: bool = False) -> list[range]:
    """Contiguous runs of ``n`` samples, one per pool task: at most MAX_TASKS of them, or with ``per_thread``
    two per pool thread (samples of about one cost)."""
    if pool is None or n < 2:
        return [range(n)]
    tasks = MAX_TASKS
    if per_thread:
        tasks = min(tasks, 2 * int(getattr(pool, "_max_workers", MAX_TASKS // 2) or 1))
    size = -(-n // min(n, tasks))
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def map_all(pool, fn, items: list) -> list:
    """``[fn(x) for x in items]``, in ``pool``'s threads when there is one; every task finishes before the first
    failure (in order) is raised, so that no task still works on what the caller cleans up (open files)."""
    if pool is None or len(items) < 2:
        return [fn(x) for x in items]
    futures = [pool.submit(fn, x) for x in items]
    wait(futures)
    return [f.result() for f in futures]
