"""Host memory of side_by_side.py's audio programs over many iterations (issue 19: RSS stays flat).

    python benchmarks/diag/audio_rss.py /tmp/sbs/wav [--iterations 2000] [--mixed] [--every 250]

Runs the `audio` program (readers.file -> decoders.audio on the CPU -> .gpu() -> audio_resample -> spectrogram ->
mel_filter_bank -> to_decibels; ``--mixed``: the decoder on 'mixed') for ``--iterations`` batches of 64, the
reader going round its epochs, and prints the process's resident set size (VmRSS) and CUDA's
allocated memory every ``--every`` iterations, then the growth from the first sample (taken after a warm-up
of ``--every`` iterations, once every cache has its size) to the last.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from audio_stages import build  # noqa: E402  (side_by_side.py's audio program)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--every", type=int, default=250)
    ap.add_argument("--mixed", action="store_true")
    a = ap.parse_args()
    import torch

    p = build(sorted(glob.glob(os.path.join(a.data, "*.wav"))), "full", mixed=a.mixed)
    samples = []
    t = time.perf_counter()
    for i in range(1, a.iterations + 1):
        out, = p.run()
        if i % a.every == 0:
            torch.cuda.synchronize()
            samples.append((i, rss_mib(), torch.cuda.memory_allocated() / 2**20))
            print(f"iteration {i}: RSS {samples[-1][1]:.0f} MiB, CUDA allocated {samples[-1][2]:.0f} MiB, "
                  f"{i * 64 / (time.perf_counter() - t):.0f} clips/s so far", flush=True)
    p.close()
    first, last = samples[0], samples[-1]
    print(f"{'mixed' if a.mixed else 'audio'}: RSS {first[1]:.0f} MiB at iteration {first[0]} -> {last[1]:.0f} MiB "
          f"at {last[0]} ({last[1] - first[1]:+.0f} MiB, {100 * (last[1] - first[1]) / first[1]:+.1f} %); CUDA "
          f"allocated {first[2]:.0f} -> {last[2]:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
