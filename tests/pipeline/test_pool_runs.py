"""How a batch is cut into pool tasks (sluice.pipeline.pool.runs): contiguous, covering every sample once, as many
as asked per thread, and by weight when weights are given."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sluice.pipeline.pool import MAX_TASKS, runs


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
