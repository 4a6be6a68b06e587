"""The host cost of reading a batch of files into one buffer (``readers.file``'s path for a GPU consumer) with the
buffer page-locked and without, on the pipeline's kind of pool (16 threads), in the steady state: the Whisper
program's reader reads 32 clips of about 2 MB a batch and costs 8 ms of host time there (op_times.py).

    python benchmarks/diag/read_pinned.py /tmp/sbs/whisper [--batch 32] [--threads 16] [--batches 60]
"""
import argparse
import glob
import os
import time

import torch

from sluice.ops.readers.file import _read_into_one_buffer
from sluice.pipeline.pool import RuntimePool


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--batches", type=int, default=60)
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.root, "**", "*.*"), recursive=True))
    files = [f for f in files if os.path.isfile(f)]
    pool = RuntimePool(a.threads)
    device = 0 if torch.cuda.is_available() else None
    for pin in ((True, False) if device is not None else (False,)):
        held = []
        for i in range(a.batches + 5):
            if i == 5:
                t = time.perf_counter()
            k = (i * a.batch) % max(1, len(files) - a.batch)
            held.append(_read_into_one_buffer(files[k: k + a.batch], pool, pin, device))
            held = held[-3:]                       # a pipeline keeps a few batches alive (prefetch)
        ms = 1e3 * (time.perf_counter() - t) / a.batches
        mb = sum(os.path.getsize(f) for f in files[: a.batch]) / 1e6
        print(f"pin={pin!s:5s} {ms:7.2f} ms a batch of {a.batch} files (~{mb:.0f} MB), {mb / ms:.1f} GB/s")
    pool.shutdown()


if __name__ == "__main__":
    main()
