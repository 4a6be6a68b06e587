"""How a batch is cut into pool tasks (sluice.pipeline.pool.runs): contiguous, covering every sample once, as many
as asked per thread, and by weight when weights are given; share_items hands each item out once to threads that
call the core once each."""

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sluice import native
from sluice.native.signal import nonsilent_region
from sluice.pipeline.pool import MAX_TASKS, runs, share_items


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(4) as p:
        yield p


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
    with ThreadPoolExecutor(2) as busy:
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


def test_share_items_hands_every_item_out_once_over_threads_in_one_call_each():
    if not native.available():
        pytest.skip("the compiled core is not built")
    data = np.random.default_rng(0).normal(0, 1, 100_000).astype(np.float32)
    offsets = np.arange(0, 100_000, 1000)
    lengths = np.full(100, 1000)
    want = nonsilent_region(data, offsets, lengths, window=64, factor=0.5)
    begin, length = np.full(100, -1, np.int32), np.full(100, -1, np.int32)
    calls = []
    with ThreadPoolExecutor(4) as pool:
        share_items(pool, 100, lambda lo, hi, queue: calls.append(nonsilent_region(
            data, offsets, lengths, window=64, factor=0.5, begin=begin, length=length, queue=queue)))
    assert 1 <= len(calls) <= 4          # one call per thread that found items left, not one per chunk
    np.testing.assert_array_equal(begin, want[0])
    np.testing.assert_array_equal(length, want[1])


def test_share_items_raises_the_first_failure_without_waiting_for_items_never_taken():
    if not native.available():
        pytest.skip("the compiled core is not built")

    def work(lo, hi, queue):
        raise ValueError("bad argument")

    with ThreadPoolExecutor(3) as pool, pytest.raises(ValueError, match="bad argument"):
        share_items(pool, 10, work)
