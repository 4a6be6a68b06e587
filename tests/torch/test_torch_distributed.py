"""Many GPUs: shard and device defaults under torch.distributed, equal batch counts per rank, and shuffles that
agree across ranks. Each rank is simulated by its own pipeline and iterator (as on separate processes); the
2-process run with torchrun is in test_torch_ddp.py."""

from __future__ import annotations

import pytest
import torch

from sluice import Pipeline, fn, pipeline_def
from sluice.ops.readers._sharding import distributed_defaults
from sluice.torch import DALIGenericIterator, LastBatchPolicy


@pytest.fixture
def fake_dist(monkeypatch):
    """torch.distributed 'initialised' with a given rank and world size."""
    import torch.distributed as dist

    def init(rank, world):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_rank", lambda *a, **k: rank)
        monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world)

    return init


def rank_pipe(files, batch_size=4, shard_id=None, num_shards=None, shuffle=True, pad=True):
    @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, seed=11)
    def pipe():
        return fn.readers.file(files=files, shuffle_after_epoch=shuffle, pad_last_batch=pad, shard_id=shard_id,
                               num_shards=num_shards, name="Reader")

    return pipe()


def test_defaults_follow_the_global_rank(fake_dist, numbered_files):
    fake_dist(rank=3, world=4)
    assert distributed_defaults(None, None) == (3, 4)
    assert distributed_defaults(1, None) == (1, 4)  # an explicit value wins
    assert distributed_defaults(None, 2) == (0, 2)
    meta = rank_pipe(numbered_files(9)).reader_meta("Reader")
    assert (meta["shard_id"], meta["number_of_shards"]) == (3, 4)
    meta = rank_pipe(numbered_files(9), shard_id=0, num_shards=1).reader_meta("Reader")
    assert (meta["shard_id"], meta["number_of_shards"]) == (0, 1)


def test_defaults_without_distributed(numbered_files):
    assert distributed_defaults(None, None) == (0, 1)


def test_device_id_is_the_local_rank_not_the_global_one(monkeypatch):
    """Under torchrun on the second node, RANK=3 but LOCAL_RANK=1: the GPU is cuda:1 (a common DALI trap)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert Pipeline(batch_size=2).device_id == 1
    assert Pipeline(batch_size=2, device_id=0).device_id == 0
    assert Pipeline(batch_size=2, device_id=None).device_id is None


def run_ranks(files, world, policy, epochs=3, pad=True, batch_size=4):
    """Per epoch: per rank, the batches it gets."""
    its = [DALIGenericIterator(rank_pipe(files, batch_size, r, world, pad=pad), ["data", "label"],
                               reader_name="Reader", last_batch_policy=policy, auto_reset=True)
           for r in range(world)]
    out = []
    for _ in range(epochs):
        lens = [len(it) for it in its]
        per_rank = [[b[0]["data"].flatten().tolist() for b in it] for it in its]
        assert [len(x) for x in per_rank] == lens
        out.append(per_rank)
    return out


@pytest.mark.parametrize("n,world", [(23, 2), (10, 3), (8, 2), (5, 4)])
@pytest.mark.parametrize("policy", [LastBatchPolicy.PARTIAL, LastBatchPolicy.FILL, LastBatchPolicy.DROP])
def test_every_rank_gets_the_same_number_of_batches(numbered_files, n, world, policy):
    epochs = run_ranks(numbered_files(n), world, policy)
    for per_rank in epochs:
        assert len({len(x) for x in per_rank}) == 1, [len(x) for x in per_rank]


@pytest.mark.parametrize("n,world", [(23, 2), (10, 3), (7, 2)])
def test_each_sample_exactly_once_per_epoch_across_ranks(numbered_files, n, world):
    """pad_last_batch + PARTIAL + shuffle_after_epoch: the ranks' shards of one epoch's permutation are
    disjoint and cover the data set; the permutation changes every epoch."""
    epochs = run_ranks(numbered_files(n), world, LastBatchPolicy.PARTIAL)
    orders = []
    for per_rank in epochs:
        seen = [v for rank in per_rank for batch in rank for v in batch]
        assert sorted(seen) == list(range(n))
        orders.append(seen)
    assert orders[0] != orders[1] or orders[1] != orders[2]
