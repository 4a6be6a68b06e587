"""How fast files come out of the page cache on this machine, by threads and by processes (diagnostic).

Reads the same files (warm in the page cache) in batches: ``readv`` straight into one preallocated buffer (page-
locked when CUDA is there), in N threads of one process, then in N processes (each into its own buffer), then
through readers.file's ``read_files`` as a GPU pipeline calls it. If threads stop scaling where processes go on,
the reader is bound by the GIL; if both stop at the same figure, by the memory system. Example::

    python benchmarks/read_sweep.py /tmp/audio_bench --threads 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing as mp
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

BATCH = 64


def _read_batch(paths, buf, offsets, lo, hi):
    for i in range(lo, hi):
        fd = os.open(paths[i], os.O_RDONLY)
        try:
            os.readv(fd, [buf[offsets[i]:offsets[i + 1]]])
        finally:
            os.close(fd)


def _proc_worker(args):
    paths, seconds = args
    sizes = [os.path.getsize(p) for p in paths]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    buf = np.empty(offsets[-1], np.uint8)
    buf[:] = 0
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _read_batch(paths, buf, offsets, 0, len(paths))
        n += len(paths)
    return n, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.root, "**", "*.wav"), recursive=True))
    sizes = [os.path.getsize(p) for p in paths]
    mean = np.mean(sizes)
    print(f"{len(paths)} files, mean {mean / 1e3:.0f} KB", flush=True)
    import torch

    pin = torch.cuda.is_available()
    for p in paths:  # warm the page cache
        with open(p, "rb") as f:
            f.read()
    batches = [paths[s:s + BATCH] for s in range(0, len(paths) - BATCH + 1, BATCH)]
    for n in args.threads:
        # threads of this process, readv into one (page-locked) batch buffer, runs of files per task
        buf = torch.empty(int(max(sizes)) * BATCH, dtype=torch.uint8, pin_memory=pin).numpy()
        with ThreadPoolExecutor(n) as pool:
            count, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                for b in batches:
                    offs = np.concatenate([[0], np.cumsum([os.path.getsize(p) for p in b])]).tolist()
                    step = -(-len(b) // n)
                    list(pool.map(lambda lo, b=b, offs=offs, step=step: _read_batch(b, buf, offs, lo, min(lo + step, len(b))),
                                  range(0, len(b), step)))
                    count += len(b)
            dt = time.perf_counter() - t0
        print(f"threads {n:2d}: {count / dt:8,.0f} files/s  {count * mean / dt / 1e9:5.2f} GB/s", flush=True)
        # the same number of processes, each reading its share of the files over and over
        shares = [paths[k::n] for k in range(n)]
        with mp.get_context("spawn").Pool(n) as pool:
            pool.map(_proc_worker, [(s[:2], 0.01) for s in shares])
            res = pool.map(_proc_worker, [(s, args.seconds) for s in shares])
        rate = sum(c / t for c, t in res)
        print(f"procs   {n:2d}: {rate:8,.0f} files/s  {rate * mean / 1e9:5.2f} GB/s", flush=True)
    from sluice.ops.readers.file import read_files
    from sluice.pipeline.pool import ThreadPool

    for n in args.threads:
        with ThreadPool(n) as pool:
            for b in batches[:2]:
                read_files(b, pool, pin=pin, device_id=0 if pin else None)
            count, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                for b in batches:
                    read_files(b, pool, pin=pin, device_id=0 if pin else None)
                    count += len(b)
            dt = time.perf_counter() - t0
        print(f"read_files (pin={pin}), threads {n:2d}: {count / dt:8,.0f} files/s", flush=True)


if __name__ == "__main__":
    main()
