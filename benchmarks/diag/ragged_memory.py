"""GPU memory over many batches whose shapes change every time: the speech program's device operators
(preemphasis -> spectrogram -> mel -> dB -> normalize -> pad) on packed batches of 64 signals of random lengths
(1.5-35 s at 16 kHz, a new draw each batch), run by the operators' batch kernels on one stream. Prints the allocated
and reserved memory every tenth of the run; they must stay flat (no growth from the caching allocator keeping a
block per new shape).

    python benchmarks/diag/ragged_memory.py [--iterations 10000] [--batch 64]
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ops", "audio"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    from sluice.pipeline.batch import Batch
    from test_speech_chain_ragged import CHAIN, run_chain_one

    device = torch.device("cuda", 0)
    rng = np.random.default_rng(0)
    pool = torch.randn(int(35 * 16000 * a.batch), device=device) * 0.1
    stream = torch.cuda.Stream()
    marks = []
    t = time.perf_counter()
    with torch.cuda.stream(stream):
        for it in range(a.iterations):
            lengths = rng.integers(int(1.5 * 16000), 35 * 16000, a.batch)
            b = Batch.from_packed(pool[: int(lengths.sum())], lengths[:, None])
            for op, const, _ in CHAIN:
                b = run_chain_one(b, op, const, device)
            if it % max(1, a.iterations // 10) == 0 or it == a.iterations - 1:
                torch.cuda.synchronize()
                marks.append((it, torch.cuda.memory_allocated() / 2**20, torch.cuda.memory_reserved() / 2**20))
                print(f"iteration {it:6d}: allocated {marks[-1][1]:8.1f} MiB, reserved {marks[-1][2]:8.1f} MiB "
                      f"({time.perf_counter() - t:.0f} s)", flush=True)
    later = [m[2] for m in marks[2:]]
    print(f"reserved after the first fifth: {min(later):.0f}-{max(later):.0f} MiB; "
          f"growth from the second mark to the last: {marks[-1][2] - marks[1][2]:+.0f} MiB")


if __name__ == "__main__":
    main()
