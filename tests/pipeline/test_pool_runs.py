"""How a batch is cut into pool tasks (sluice.pipeline.pool.runs): contiguous, covering every sample once, as many
as asked per thread, and by weight when weights are given; share_items hands each item out once to threads that
run the core's batch kernels on its worker threads in one call."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sluice import native
from sluice.native.signal import nonsilent_region
from sluice.pipeline import pool as pool_module
from sluice.pipeline.pool import MAX_TASKS, RuntimePool, ThreadPool, runs, share_items


@pytest.fixture(scope="module")
def pool():
    with ThreadPool(4) as p:
        yield p


def test_a_pool_says_its_threads_and_a_plain_executor_counts_as_one(pool):
    """The helpers size their tasks by a pool's public ``threads`` (the runtime's pools, ThreadPool); a plain
    ThreadPoolExecutor says nothing, and is worked as no pool is: by the calling thread, in per_thread runs."""
    assert pool.threads == 4 and len(runs(64, pool, per_thread=1)) == 4
    with ThreadPoolExecutor(4) as plain:
        assert len(runs(64, plain, per_thread=1)) == 1
        caller = threading.get_ident()
        seen = set()
        pool_module.share_work(plain, lambda: seen.add(threading.get_ident()), 8)
        assert seen == {caller}
    rt = RuntimePool(3)
    try:
        assert rt.threads == 3
    finally:
        rt.shutdown()


def _covers(parts, n):
    return [i for r in parts for i in r] == list(range(n))


@pytest.mark.parametrize("n", [0, 1, 2, 5, 64, 1000])
@pytest.mark.parametrize("per_thread", [0, 1, 2])
def test_runs_cover_the_batch_in_order(pool, n, per_thread):
    parts = runs(n, pool, per_thread=per_thread)
    assert _covers(parts, n)
    assert len(parts) <= max(1, min(n, per_thread * 4 if per_thread else MAX_TASKS))


def test_without_a_pool_one_run():
    assert runs(10, None, per_thread=1, weights=np.ones(10)) == [range(10)]


def test_weights_balance_the_runs(pool):
    sizes = np.array([900] * 8 + [100] * 56)  # eight large files, then small ones
    parts = runs(len(sizes), pool, per_thread=1, weights=sizes)
    assert _covers(parts, len(sizes)) and len(parts) == 4
    loads = [int(sizes[r.start:r.stop].sum()) for r in parts]
    even = sizes.sum() / 4
    assert all(abs(load - even) <= 900 for load in loads)  # within one sample of even
    by_count = runs(len(sizes), pool, per_thread=1)
    assert max(int(sizes[r.start:r.stop].sum()) for r in by_count) == 7200 + 8 * 100


def test_zero_and_negative_weights_still_cover(pool):
    for w in (np.zeros(7), -np.ones(7), np.array([0, 0, 5, 0, 0, 0, 9])):
        assert _covers(runs(7, pool, per_thread=1, weights=w), 7)


def test_share_range_covers_every_item_once_in_order(pool):
    from sluice.pipeline.pool import share_range

    seen = []
    out = share_range(pool, 50, lambda lo, hi: (seen.extend(range(lo, hi)), list(range(lo, hi)))[1])
    assert sorted(seen) == list(range(50)) and [i for chunk in out for i in chunk] == list(range(50))
    assert share_range(None, 3, lambda lo, hi: (lo, hi)) == [(0, 1), (1, 2), (2, 3)]  # guided, one thread
    assert share_range(pool, 0, lambda lo, hi: 1 / 0) == []


def test_share_range_raises_the_first_failure_after_every_chunk_finished(pool):
    import threading
    import time

    from sluice.pipeline.pool import share_range

    finished = []
    lock = threading.Lock()

    def work(lo, hi):
        time.sleep(0.002)
        with lock:
            finished.extend(range(lo, hi))
        if lo <= 30 < hi or lo <= 10 < hi:
            raise ValueError(f"item in {lo}..{hi}")

    with pytest.raises(ValueError) as e:
        share_range(pool, 40, work)
    assert "item in" in str(e.value) and int(str(e.value).split()[2].split("..")[0]) <= 10
    assert sorted(finished) == list(range(40))  # nothing was left running or skipped


def test_share_range_does_not_wait_for_a_pool_that_is_busy():
    import threading

    from sluice.pipeline.pool import share_range

    gate = threading.Event()
    with ThreadPool(2) as busy:
        busy.submit(gate.wait)
        busy.submit(gate.wait)  # every pool thread is taken: the caller does all the work itself
        assert [i for c in share_range(busy, 9, lambda lo, hi: list(range(lo, hi))) for i in c] == list(range(9))
        gate.set()


def test_map_all_returns_when_the_pool_is_shut_down_under_it():
    """Pipeline.close() shuts the pool down with cancel_futures=True: tasks still queued are cancelled, and
    concurrent.futures.wait() never returns for those. map_all raises CancelledError instead of waiting forever."""
    import threading
    from concurrent.futures import CancelledError

    from sluice.pipeline.pool import map_all

    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    pool.submit(gate.wait, 10)  # the only pool thread is busy: map_all's tasks stay queued
    raised = []

    def call():
        try:
            map_all(pool, lambda x: x, [1, 2])
        except CancelledError as e:
            raised.append(e)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    deadline = time.monotonic() + 5
    while pool._work_queue.qsize() < 2 and time.monotonic() < deadline:  # both tasks queued
        time.sleep(0.005)
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    caller.join(5)
    assert not caller.is_alive(), "map_all still waits for tasks the pool's shutdown cancelled"
    assert len(raised) == 1



def test_share_items_runs_the_batch_on_the_core_threads_in_one_call():
    if not native.available():
        pytest.skip("the compiled core is not built")
    data = np.random.default_rng(0).normal(0, 1, 100_000).astype(np.float32)
    offsets = np.arange(0, 100_000, 1000)
    lengths = np.full(100, 1000)
    want = nonsilent_region(data, offsets, lengths, window=64, factor=0.5)
    pool = RuntimePool(4)
    try:
        calls = share_items(pool, 100, lambda lo, hi, core: (lo, hi, core is pool.core, nonsilent_region(
            data, offsets[lo:hi], lengths[lo:hi], window=64, factor=0.5, pool=core)))
    finally:
        pool.shutdown()
    assert len(calls) == 1 and calls[0][:3] == (0, 100, True)
    np.testing.assert_array_equal(calls[0][3][0], want[0])
    np.testing.assert_array_equal(calls[0][3][1], want[1])
    with native.fallback():                      # the twins: chunks in the pool's Python threads
        plain = ThreadPool(3)
        try:
            parts = share_items(plain, 100, lambda lo, hi, core: (core, nonsilent_region(
                data, offsets[lo:hi], lengths[lo:hi], window=64, factor=0.5, pool=core)))
        finally:
            plain.shutdown()
    assert all(core is None for core, _ in parts)
    np.testing.assert_array_equal(np.concatenate([p[1][0] for p in parts]), want[0])


def test_core_pool_runs_jobs_of_two_callers_at_once_and_closes():
    if not native.available():
        pytest.skip("the compiled core is not built")
    c = native.core()
    pool = c.WorkerPool(3)
    data = np.random.default_rng(1).normal(0, 1, 200_000).astype(np.float32)
    offsets, lengths = np.arange(0, 200_000, 500), np.full(400, 500)
    want = c.nonsilent_region(data, offsets, lengths, 32, 0.5, 0.0, None)
    with ThreadPoolExecutor(2) as callers:
        got = list(callers.map(lambda _: c.nonsilent_region(data, offsets, lengths, 32, 0.5, 0.0, pool), range(4)))
    for g in got:
        np.testing.assert_array_equal(g[0], want[0])
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.nonsilent_region(data, offsets, lengths, 32, 0.5, 0.0, pool)


def test_core_pool_survives_many_short_jobs_from_two_callers():
    """A worker that picks a job as its last items are taken must not touch it once the caller returned (the job
    lives on the caller's stack): many tiny jobs from two threads at once, as the pipeline's stages make them."""
    if not native.available():
        pytest.skip("the compiled core is not built")
    c = native.core()
    pool = c.WorkerPool(8)
    data = np.random.default_rng(2).normal(0, 1, 4_000).astype(np.float32)
    offsets, lengths = np.arange(0, 4_000, 500), np.full(8, 500)
    want = c.nonsilent_region(data, offsets, lengths, 16, 0.5, 0.0, None)

    def many(_):
        for _ in range(1500):
            got = c.nonsilent_region(data, offsets, lengths, 16, 0.5, 0.0, pool)
            np.testing.assert_array_equal(got[1], want[1])

    try:
        with ThreadPoolExecutor(2) as callers:
            list(callers.map(many, range(2)))
    finally:
        pool.close()


@pytest.mark.parametrize("cores, threads, want", [(16, 16, 13), (16, 8, 8), (16, 13, 13), (64, 16, 16), (4, 16, 1),
                                                  (2, 2, 1)])
def test_native_workers_leave_cores_to_the_stage_threads(monkeypatch, cores, threads, want):
    """The core's workers are num_threads, but never so many that the pipeline's stage threads (which run Python and
    hold the GIL in turn) find no free core: on 16 cores, 16 workers ran the speech program at 7,620-8,198 utt/s
    12 at 9,879-10,045, 13 at 9,501-10,350 and 14 at 9,575-9,890 (H100 host, 2026-11-28)."""
    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert pool_module.native_workers(threads) == want


def test_the_core_leaves_cores_only_while_the_device_stage_runs_operators_from_python(monkeypatch):
    """A device stage that ran EAGER_NODES_RESERVING operators eagerly (a ragged speech batch) has the core's batch
    calls leave STAGE_CORES cores; one that replayed a CUDA graph (a dense log-mel batch, whose CPU decoding then
    wants every core) gives them back."""
    if not native.available():
        pytest.skip("the compiled core is not built")
    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda pid: set(range(16)))
    pool = RuntimePool(16)
    try:
        assert pool.every_core.threads != pool.fewer_cores.threads
        assert pool.core is pool.every_core
        pool.reserve_stage_cores(pool_module.EAGER_NODES_RESERVING)
        assert pool.core is pool.fewer_cores
        data = np.random.default_rng(0).normal(0, 1, 10_000).astype(np.float32)
        got = share_items(pool, 10, lambda lo, hi, core: (core, nonsilent_region(
            data, np.arange(lo, hi) * 1000, np.full(hi - lo, 1000), window=64, factor=0.5, pool=core)))
        assert got[0][0] is pool.fewer_cores
        pool.reserve_stage_cores(0)
        assert pool.core is pool.every_core
    finally:
        pool.shutdown()
