"""One rank of tests/test_ranks.py: several CPU ranks under torchrun with gloo, each running its own pipeline.

    torchrun --standalone --nproc_per_node=2 tests/ranks_job.py shards --root DIR
    torchrun --standalone --nproc_per_node=2 tests/ranks_job.py kill --root DIR

``shards``: every rank reads the same generated files through ``readers.file`` with sluice's defaults for
num_threads, in three ways: sluice's torch.distributed defaults (no shard_id / num_shards), DALI's examples'
explicit ``shard_id`` / ``num_shards`` from the rank (random_shuffle, moving to the next shard every epoch), and
``stick_to_shard`` without padding. Per epoch the ranks gather what they got (file index and label); rank 0 prints
``OK <way> epoch <e>`` when every sample was seen exactly once across the ranks with its label. Meanwhile each rank
counts its threads and child processes (:class:`Census`); rank 0 prints a ``CORES`` line per rank and ``CORES
total`` with the sum of the ranks' peaks and the cores the job may use.

``kill``: every rank trains a stand-in model (one gloo all_reduce per batch, as DDP's gradients) on a pipeline
with a parallel external_source (a worker process per rank) and writes ``ready_<rank>.json`` (its pid and its
children's) once it is past the first batch of its second epoch; then it keeps going until the test kills a rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from multi_gpu import child_pids  # noqa: E402 - the benchmark's rank script counts children the same way

SAMPLES, CLASSES, BATCH, EPOCHS = 23, 3, 4, 2


class Census(threading.Thread):
    """This rank's threads and child processes, sampled every 5 ms; keeps the peaks.

    ``working`` counts what can keep a core busy on sluice's behalf at once: the threads of sluice's pools (named
    ``sluice-*``), or the CPU stage's thread where the pipeline has no pool (with a pool, the stage thread waits
    on it), plus every child process. ``tasks`` is every thread of the process (gloo's and torch's included)."""

    def __init__(self) -> None:
        super().__init__(name="census", daemon=True)
        self.peak = {"working": 0, "sluice_threads": 0, "tasks": 0, "children": 0}
        self.done = threading.Event()

    def sample(self) -> None:
        names = [t.name for t in threading.enumerate()]
        stages = sum(n.startswith("sluice-stage-cpu") for n in names)
        pools = sum(n.startswith("sluice-") and not n.startswith("sluice-stage-") for n in names)
        children = len(child_pids())
        now = {"working": (pools or stages) + children, "sluice_threads": pools + stages,
               "tasks": len(os.listdir("/proc/self/task")), "children": children}
        for k, v in now.items():
            self.peak[k] = max(self.peak[k], v)

    def run(self) -> None:
        while not self.done.wait(0.005):
            self.sample()


def data_root(root: str) -> str:
    return os.path.join(root, "data")


def make_files(root: str, rank: int) -> dict[int, int]:
    """SAMPLES files under CLASSES class folders, each holding its own index (2 bytes); index -> label."""
    root = data_root(root)
    labels = {i: i % CLASSES for i in range(SAMPLES)}
    if rank == 0:
        for i, label in labels.items():
            os.makedirs(os.path.join(root, f"class{label}"), exist_ok=True)
            with open(os.path.join(root, f"class{label}", f"{i:04d}.bin"), "wb") as f:
                f.write(i.to_bytes(2, "little"))
    dist.barrier()
    return labels


WAYS = {
    # sluice's torch.distributed defaults: shard_id = rank, num_shards = world size
    "defaults": dict(shuffle_after_epoch=True, pad_last_batch=True),
    # as DALI's multi-GPU examples: shard_id / num_shards from the rank, buffer shuffle, next shard every epoch
    "explicit": dict(random_shuffle=True, pad_last_batch=True, shard=True),
    # the same shard every epoch, no padding: shards of 11 and 12 samples
    "stick": dict(stick_to_shard=True, shard=True),
}


def shards(root: str) -> int:
    from sluice import fn, pipeline_def
    from sluice._workers import _sibling_ranks, cores_per_rank
    from sluice.torch import DALIGenericIterator, LastBatchPolicy

    rank, world = dist.get_rank(), dist.get_world_size()
    labels = make_files(root, rank)
    census = Census()
    census.start()
    failed = False
    for way, kwargs in WAYS.items():
        kwargs = dict(kwargs)
        if kwargs.pop("shard", False):
            kwargs.update(shard_id=rank, num_shards=world)

        @pipeline_def(batch_size=BATCH, device_id=None, seed=1234)  # num_threads: sluice's default
        def pipe():
            return fn.readers.file(file_root=data_root(root), file_filters=["*.bin"], name="Reader", **kwargs)

        p = pipe()
        meta = p.reader_meta("Reader")
        assert (meta["shard_id"], meta["number_of_shards"]) == (rank, world), (way, meta)
        loader = DALIGenericIterator(p, ["data", "label"], reader_name="Reader",
                                     last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
        for epoch in range(EPOCHS):
            seen = []
            for batch in loader:
                data, label = batch[0]["data"], batch[0]["label"]
                ids = (data[:, 0].long() + 256 * data[:, 1].long()).tolist()
                seen += list(zip(ids, label.flatten().tolist()))
            everyone: list = [None] * world
            dist.all_gather_object(everyone, seen)
            if rank == 0:
                got = sorted(s for part in everyone for s in part)
                if got != sorted(labels.items()):
                    print(f"FAIL {way} epoch {epoch}: (index, label) seen {got}", flush=True)
                    failed = True
                else:
                    print(f"OK {way} epoch {epoch}: {SAMPLES} samples once each, per rank "
                          f"{[len(x) for x in everyone]}", flush=True)
        p.close()
    census.done.set()
    census.join()
    census.sample()
    mine = dict(census.peak, share=cores_per_rank(), num_threads=p.num_threads, siblings=len(_sibling_ranks()),
                affinity=len(os.sched_getaffinity(0)), omp=torch.get_num_threads())
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        for r, c in enumerate(everyone):
            print(f"CORES rank {r}: " + " ".join(f"{k}={v}" for k, v in c.items()), flush=True)
        print(f"CORES total working={sum(c['working'] for c in everyone)} cores={mine['affinity']}", flush=True)
    dist.barrier()
    return 1 if failed else 0


def _sample(info):
    return np.full((2,), info.idx_in_epoch % 256, np.uint8)


def kill(root: str) -> int:
    from sluice import fn, pipeline_def
    from sluice.torch import DALIGenericIterator

    rank = dist.get_rank()
    make_files(root, rank)

    @pipeline_def(batch_size=BATCH, device_id=None, seed=1234, py_num_workers=1)
    def pipe():
        data, label = fn.readers.file(file_root=data_root(root), file_filters=["*.bin"], pad_last_batch=True,
                                      name="Reader")
        extra = fn.external_source(source=_sample, batch=False, parallel=True)
        return data, label, extra

    loader = DALIGenericIterator(pipe(), ["data", "label", "extra"], reader_name="Reader", auto_reset=True)
    grad = torch.zeros(1)
    epoch = 0
    while True:
        for i, _ in enumerate(loader):
            dist.all_reduce(grad)  # as DDP's gradients: the ranks meet every batch
            if epoch == 1 and i == 0:
                state = {"rank": rank, "pid": os.getpid(), "children": child_pids()}
                with open(os.path.join(root, f".ready_{rank}.tmp"), "w") as f:
                    json.dump(state, f)
                os.replace(os.path.join(root, f".ready_{rank}.tmp"), os.path.join(root, f"ready_{rank}.json"))
            time.sleep(0.05)
        epoch += 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("shards", "kill"))
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        return shards(args.root) if args.mode == "shards" else kill(args.root)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
