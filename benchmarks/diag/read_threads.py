"""How fast readers.file's batch read (`_read_into_one_buffer`: sizes in one call, runs of files per pool task, each
read by the core with the GIL released, into one page-locked buffer) gets a batch of files from the page cache, by
pool size, alone in the process (no pipeline around it); beside it the same runs read by forked processes into
one shared buffer (the bound threads of one process would reach without their costs).

    python benchmarks/diag/read_threads.py /tmp/sbs/wav [--batch 64] [--threads 1,2,4,8,12,16] [--runs 2]
"""
from __future__ import annotations

import argparse
import glob
import mmap
import multiprocessing as mp
import os
import time

import numpy as np
import torch

import sluice.ops.readers.file as reader
from sluice import native
from sluice.pipeline.pool import ThreadPool

_SHARED = None


def _child_read(job):
    paths, offsets, sizes = job
    native.core().FileBatchRead(paths, offsets, sizes, _SHARED).work()
    return 0


def processes(files, batches, k, batch, size):
    """The batches' runs read by ``k`` forked processes into one shared anonymous mapping."""
    global _SHARED
    c = native.core()
    buf = mmap.mmap(-1, size + (1 << 20), flags=mmap.MAP_SHARED)
    _SHARED = np.frombuffer(buf, np.uint8)
    _SHARED[:] = 0
    with mp.get_context("fork").Pool(k) as workers:
        def one(b):
            sizes = c.file_sizes(b)
            offsets = np.zeros(len(b) + 1, np.int64)
            np.cumsum(sizes, out=offsets[1:])
            step = -(-len(b) // k)
            jobs = [(b[i:i + step], offsets[:-1][i:i + step], sizes[i:i + step]) for i in range(0, len(b), step)]
            workers.map(_child_read, jobs)
        for b in batches[:4]:
            one(b)
        t = time.perf_counter()
        for b in batches:
            one(b)
        return (time.perf_counter() - t) / len(batches)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", default="1,2,4,8,12,16")
    ap.add_argument("--batches", type=int, default=48)
    ap.add_argument("--runs", type=int, default=0, help="runs of files per pool thread (0: readers.file's own)")
    ap.add_argument("--no-pin", action="store_true", help="ordinary memory (the core's block cache)")
    ap.add_argument("--processes", action="store_true")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.folder, "*")))
    pin = torch.cuda.is_available() and not a.no_pin
    size = sum(os.path.getsize(f) for f in files[:a.batch])
    batches = [files[(i * a.batch) % len(files):][:a.batch] for i in range(a.batches)]
    print(f"{len(files)} files, batch {a.batch} ({size / 1e6:.1f} MB), page-locked: {pin}, os.cpu_count "
          f"{os.cpu_count()}, affinity {len(os.sched_getaffinity(0))}", flush=True)
    if a.runs:
        def runs(n, pool, per_thread=False):
            k = a.runs * (pool.threads if pool is not None else 1)
            step = -(-n // min(n, k))
            return [range(s, min(s + step, n)) for s in range(0, n, step)]
        reader.runs = runs
    for k in (int(x) for x in a.threads.split(",")):
        pool = ThreadPool(k) if k > 1 else None
        for b in batches[:4]:
            reader._read_into_one_buffer(b, pool, pin, 0 if pin else None)
        t = time.perf_counter()
        for b in batches:
            reader._read_into_one_buffer(b, pool, pin, 0 if pin else None)
        dt = (time.perf_counter() - t) / len(batches)
        line = f"  {k:2d} threads: {1e3 * dt:6.2f} ms a batch, {a.batch / dt:9,.0f} files/s, {size / dt / 1e9:5.1f} GB/s"
        if a.processes and k > 1:
            dp = processes(files, batches, k, a.batch, size)
            line += f" | {k:2d} processes: {1e3 * dp:6.2f} ms, {size / dp / 1e9:5.1f} GB/s"
        print(line, flush=True)
        if pool is not None:
            pool.shutdown()


if __name__ == "__main__":

    main()
