"""The host cost of a batch of the webdataset reader against readers.file, on the same JPEGs (loose files and tar
shards written as benchmarks/readers_gpu.py writes them), each reader alone in a CPU pipeline (issue 23: in the GPU
training pipeline the shards ran at 0.81x of the loose files, the decoding being the same).

Per reader: batches/s of the reader alone (the pipeline's own threads, prefetching), the wall and CPU ms of one
batch run in the caller's thread (``exec_async=False``), the ms the consumers then spend on it (the mixed image
decoder's ``batch_region`` of the data, the iterator's ``as_tensor`` of the labels), and with ``--profile`` the
top functions of cProfile over the synchronous batches::

    python benchmarks/peers/gen.py images /tmp/wds23/images 8192
    python benchmarks/diag/reader_host.py /tmp/wds23/images [--shards 32] [--batch 256] [--threads 4] [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from readers_cpu import jpeg_set  # noqa: E402

from sluice import fn, native, pipeline_def  # noqa: E402
from sluice.ops.readers.file import batch_region  # noqa: E402


def make(shards, files, labels):
    if shards:
        return fn.readers.webdataset(paths=shards, ext=["jpg", "cls"], random_shuffle=True, name="Reader")
    return fn.readers.file(files=files, labels=labels, random_shuffle=True, name="Reader")


def measure(name, shards, files, labels, a):
    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=1, prefetch_queue_depth=2)
    def pipe():
        return make(shards, files, labels)

    p = pipe()
    for _ in range(a.warmup):
        p.run()
    t = time.perf_counter()
    for _ in range(a.batches):
        p.run()
    rate = a.batches / (time.perf_counter() - t)
    p.close()

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=1, exec_async=False,
                  exec_pipelined=False)
    def sync_pipe():
        return make(shards, files, labels)

    p = sync_pipe()
    for _ in range(a.warmup):
        p.run()
    prof = cProfile.Profile() if a.profile else None
    wall, cpu, use = [], [], []
    for _ in range(a.batches):
        t, c = time.perf_counter(), time.thread_time()
        if prof:
            prof.enable()
        data, lab = p.run()
        t1 = time.perf_counter()
        wall.append(t1 - t)
        cpu.append(time.thread_time() - c)
        packed = batch_region(data) is not None
        lab.as_tensor()
        use.append(time.perf_counter() - t1)
        if prof:
            prof.disable()
    p.close()
    ms = 1e3 / a.batches
    print(f"{name:14s} {rate:7.1f} batches/s ({rate * a.batch:8,.0f} samples/s) | one batch in the caller "
          f"(median): {1e3 * np.median(wall):6.2f} ms wall, CPU of the calling thread {1e3 * np.median(cpu):5.2f} "
          f"ms (mean {sum(cpu) * ms:5.2f}) | consumers {1e3 * np.median(use):5.2f} ms | packed data: {packed}",
          flush=True)
    if prof:
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    files, labels, shards = jpeg_set(a.folder, a.shards)
    print(f"{len(files)} JPEGs, {a.shards} shards, batch {a.batch}, {a.threads} threads, nproc {os.cpu_count()}, "
          f"compiled core: {native.available()}", flush=True)
    for _ in range(a.repeat):
        measure("readers.file", None, files, labels, a)
        measure("webdataset", shards, files, labels, a)


if __name__ == "__main__":
    main()
