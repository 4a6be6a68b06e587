"""GPU time of ``audio_resample``'s two GPU paths on Whisper-shaped batches: the Triton kernel over signals where
they lie, and the padded torch schedule (padded copy, conversion, matrix product). 32 INT16 clips of 5-45 s at
44.1 kHz, packed, resampled to 16 kHz; each path timed over ``--iterations`` batches after a warm-up, synchronised.

    python benchmarks/diag/resample_paths.py [--iterations 50]
"""
import argparse
import time

import numpy as np
import torch

from sluice import types
from sluice.ops.audio import resample as op
from sluice.pipeline.batch import Batch
from sluice.schema import BatchArgs, BatchContext, get_schema


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=50)
    a = ap.parse_args()
    g = np.random.default_rng(0)
    lengths = (g.uniform(5, 45, 32) * 44100).astype(np.int64)
    flat = torch.from_numpy(g.integers(-8000, 8000, int(lengths.sum()), dtype=np.int16)).cuda()
    schema = get_schema("audio_resample")
    const = {name: arg.default for name, arg in schema.args.items()}
    const.update(out_rate=16000.0, dtype=types.FLOAT)
    args = BatchArgs(const, {"in_rate": [44100.0] * 32}, 32)
    ctx = BatchContext("audio_resample", 32, [""] * 32, [""], torch.device("cuda"), None)
    fast = op._resample_where_they_lie
    for name, path in (("triton, where they lie", fast), ("padded torch", lambda *x: None)):
        op._resample_where_they_lie = path
        for i in range(5 + a.iterations):
            if i == 5:
                torch.cuda.synchronize()
                t = time.perf_counter()
            schema.kernels["gpu"].kernel(ctx, Batch.from_packed(flat, lengths[:, None]), args=args)
        torch.cuda.synchronize()
        print(f"{name:24s} {1e3 * (time.perf_counter() - t) / a.iterations:7.2f} ms a batch")
    op._resample_where_they_lie = fast


if __name__ == "__main__":
    main()
