"""The sample order of a reader: sharding, shuffling and padding, as DALI documents them. Shared by readers.

* Shards: shard ``i`` of ``S`` over ``N`` samples holds samples ``floor(i*N/S) .. floor((i+1)*N/S) - 1``.
* Without ``stick_to_shard``, a reader moves to the next shard every epoch (epoch ``e`` reads shard
  ``(shard_id + e) % S``), so that over ``S`` epochs it sees the whole data set.
* ``pad_last_batch`` repeats the last sample of the shard until every shard yields the same number of full
  batches: ``ceil(ceil(N/S) / batch_size) * batch_size`` samples per shard and epoch. Without it, a batch that
  crosses the end of an epoch continues with the next epoch's first samples.
* ``shuffle_after_epoch`` reorders the whole data set every epoch with a permutation that depends only on the
  epoch (and on the reader's own ``seed`` when given), so every shard agrees on it.
* ``random_shuffle`` is DALI's buffer shuffle: the reader keeps ``initial_fill`` samples and returns a random
  one of them, replacing it with the next; each epoch still yields every sample of its shard exactly once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sluice.errors import ArgumentError

# DALI's fixed loader seed: permutations must not depend on per-rank pipeline seeds.
SHUFFLE_SEED = 524287


def shard_bounds(n: int, shard_id: int, num_shards: int) -> tuple[int, int]:
    """[begin, end) of shard ``shard_id``."""
    return shard_id * n // num_shards, (shard_id + 1) * n // num_shards


def distributed_defaults(shard_id: int | None, num_shards: int | None) -> tuple[int, int]:
    """Explicit values win; otherwise torch.distributed's global rank and world size, else 0 and 1."""
    rank, world = 0, 1
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover
        pass
    num_shards = world if num_shards is None else num_shards
    shard_id = (rank if num_shards == world else 0) if shard_id is None else shard_id
    return shard_id, num_shards


@dataclass
class ShardingArgs:
    shard_id: int
    num_shards: int
    stick_to_shard: bool
    pad_last_batch: bool
    random_shuffle: bool
    initial_fill: int
    shuffle_after_epoch: bool
    seed: int
    batch_size: int

    @classmethod
    def from_args(cls, op: str, args: dict[str, Any], batch_size: int, pipeline_seed: int) -> ShardingArgs:
        shard_id, num_shards = distributed_defaults(args.get("shard_id"), args.get("num_shards"))
        if num_shards < 1 or not 0 <= shard_id < num_shards:
            raise ArgumentError(f"{op}: shard_id must be in [0, num_shards), got shard_id={shard_id}, "
                                f"num_shards={num_shards}")
        if args.get("random_shuffle") and args.get("shuffle_after_epoch"):
            raise ArgumentError(f"{op}: random_shuffle and shuffle_after_epoch cannot both be True")
        if args.get("shuffle_after_epoch") and args.get("stick_to_shard"):
            raise ArgumentError(f"{op}: shuffle_after_epoch and stick_to_shard cannot both be True")
        seed = args.get("seed", -1)
        return cls(shard_id, num_shards, bool(args.get("stick_to_shard")), bool(args.get("pad_last_batch")),
                   bool(args.get("random_shuffle")), int(args.get("initial_fill") or 1024),
                   bool(args.get("shuffle_after_epoch")), pipeline_seed if seed is None or seed < 0 else seed,
                   batch_size)


class SampleOrder:
    """The endless stream of sample indices a reader returns, with its position (for checkpoints)."""

    def __init__(self, n: int, a: ShardingArgs, explicit_seed: bool = False):
        if n <= 0:
            raise ArgumentError("the data set is empty")
        if a.num_shards > n:
            raise ArgumentError(f"{a.num_shards} shards for {n} samples: every shard needs at least one sample")
        self.n = n
        self.a = a
        self.explicit_seed = explicit_seed
        self.epoch = 0
        self.pos = 0
        self._order: np.ndarray | None = None

    # ---- sizes -------------------------------------------------------------------------------------------------
    def shard_of_epoch(self, epoch: int) -> int:
        return self.a.shard_id if self.a.stick_to_shard else (self.a.shard_id + epoch) % self.a.num_shards

    def shard_size(self, shard: int) -> int:
        b, e = shard_bounds(self.n, shard, self.a.num_shards)
        return e - b

    def padded_shard_size(self) -> int:
        biggest = math.ceil(self.n / self.a.num_shards)
        return math.ceil(biggest / self.a.batch_size) * self.a.batch_size

    def epoch_length(self, epoch: int) -> int:
        return self.padded_shard_size() if self.a.pad_last_batch else self.shard_size(self.shard_of_epoch(epoch))

    def meta(self) -> dict[str, Any]:
        return {
            "epoch_size": self.n,
            "epoch_size_padded": self.padded_shard_size() * self.a.num_shards if self.a.pad_last_batch else self.n,
            "number_of_shards": self.a.num_shards,
            "shard_id": self.a.shard_id,
            "pad_last_batch": int(self.a.pad_last_batch),
            "stick_to_shard": int(self.a.stick_to_shard),
        }

    # ---- the order of one epoch ---------------------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray:
        a = self.a
        if a.shuffle_after_epoch:
            seed = [a.seed, epoch] if self.explicit_seed else [SHUFFLE_SEED, epoch]
            perm = np.random.default_rng(seed).permutation(self.n)
        else:
            perm = np.arange(self.n)
        begin, end = shard_bounds(self.n, self.shard_of_epoch(epoch), a.num_shards)
        order = perm[begin:end]
        if a.random_shuffle:
            order = _buffer_shuffle(order, a.initial_fill, np.random.default_rng([a.seed & 0xFFFFFFFF, epoch, 7]))
        if a.pad_last_batch:
            pad = self.padded_shard_size() - len(order)
            order = np.concatenate([order, np.full(pad, order[-1])])
        return order

    def next_indices(self, count: int) -> list[tuple[int, int]]:
        """The next ``count`` (sample index, epoch) pairs."""
        out: list[tuple[int, int]] = []
        while len(out) < count:
            if self._order is None:
                self._order = self.epoch_order(self.epoch)
            take = min(count - len(out), len(self._order) - self.pos)
            out.extend(zip(self._order[self.pos:self.pos + take].tolist(), [self.epoch] * take))
            self.pos += take
            if self.pos >= len(self._order):
                self.epoch += 1
                self.pos = 0
                self._order = None
        return out

    def peek_indices(self, count: int) -> list[tuple[int, int]]:
        """The ``count`` pairs :meth:`next_indices` returns next, the position left where it is."""
        saved = self.epoch, self.pos, self._order
        try:
            return self.next_indices(count)
        finally:
            self.epoch, self.pos, self._order = saved

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = None


def _buffer_shuffle(order: np.ndarray, fill: int, rng: np.random.Generator) -> np.ndarray:
    """DALI's shuffle through a buffer of ``fill`` samples: each next sample replaces a random one of the buffer,
    which goes out; then the buffer drains in random order. The buffer positions are drawn in one call (the same
    values as a call per draw, which cost 3 us each: 25 ms of GIL per epoch of 8192 files)."""
    fill = max(1, fill)
    buffer = order[:fill].tolist()
    rest = order[fill:].tolist()
    size = len(buffer)
    picks = rng.integers(0, np.concatenate([np.full(len(rest), size), np.arange(size, 0, -1)])).tolist()
    out = []
    for k, nxt in zip(picks, rest):
        out.append(buffer[k])
        buffer[k] = nxt
    for k in picks[len(rest):]:
        out.append(buffer.pop(k))
    return np.asarray(out, dtype=order.dtype)
